//! Tool retrieval: pick the few tools of a large catalog that a request needs.
//!
//! A planning prompt can hold a few dozen tool descriptions, not thousands, so the pipeline asks a
//! [`Retriever`] for the tools that best match the request and [`select`]s them, together with
//! the tools the caller pinned. The retriever shipped here is [`Bm25Index`], a keyword index with
//! per-field weighting (BM25F) over a tool's name, description and parameters; [`Fusion`]
//! combines it with other rankings (the embedded sentence-embedding index of `plansmith-local`)
//! by reciprocal-rank fusion.
//!
//! # Example
//!
//! ```
//! use plansmith_core::catalog::Catalog;
//! use plansmith_core::retrieve::{Bm25Index, Retriever, select};
//!
//! let catalog = Catalog::from_json(&serde_json::json!([
//!     {"name": "get_weather", "description": "Current weather for a city.",
//!      "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
//!     {"name": "sendEmail", "description": "Send an e-mail message.",
//!      "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}},
//! ]))?;
//! let index = Bm25Index::new(&catalog);
//! let best = index.rank("what's the weather in Paris?", 1);
//! assert_eq!(catalog.tool_at(best[0].index).map(|t| t.tool.name.as_str()), Some("get_weather"));
//! // The pinned tool comes first, then the best match: two tools in all.
//! assert_eq!(select(&catalog, &index, "mail the report to Ann", 2, &["get_weather".into()]), [0, 1]);
//! # Ok::<(), plansmith_core::catalog::CatalogError>(())
//! ```

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};

use crate::catalog::Catalog;

mod analyze;
mod bm25;
mod fusion;

pub use analyze::tokenize;
pub use bm25::{Bm25Index, Bm25Params, FieldParams};
pub use fusion::Fusion;

/// Ranks the tools of one catalog against a request.
///
/// The trait is the seam between retrieval methods and their users: keyword search
/// ([`Bm25Index`]), embedding search, and their [`Fusion`] all sit behind it, and [`select`] and
/// the pipeline do not know which one they use.
pub trait Retriever: Send + Sync {
    /// The tools that match `query`, best first, at most `limit` of them.
    ///
    /// Tools that do not match at all are left out, so the list may be shorter than `limit`
    /// (and is empty for an empty query or `limit == 0`). Equal scores are ordered by
    /// [`Scored::index`], so the result is deterministic.
    fn rank(&self, query: &str, limit: usize) -> Vec<Scored>;

    /// Orders a catalog that is offered whole: [`select`] calls this instead of
    /// [`Retriever::rank`] when every tool is shown anyway, so the ranking decides only the
    /// order. A retriever that is costly to start (an embedding model) may answer from a cheaper
    /// ranking here; the default is [`Retriever::rank`].
    fn order(&self, query: &str, limit: usize) -> Vec<Scored> {
        self.rank(query, limit)
    }

    /// Loads now what the first [`Retriever::rank`] would load (an embedding model and the
    /// catalog's vectors), so that a caller can start it on another thread beside other work,
    /// such as loading the language model. Idempotent; the default does nothing.
    fn prepare(&self) {}
}

/// A tool and how well it matches a query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// Position of the tool in [`Catalog::tools`].
    pub index: usize,
    /// Relevance score; higher is better. Only comparable within one ranking.
    pub score: f32,
}

/// The tools to offer the planner for `query`: positions in [`Catalog::tools`].
///
/// - Pinned tools (by name; names not in the catalog are ignored, repeats count once) come first,
///   in the order given, and are always included, even when there are more than `top_k` of them.
/// - Then the best-ranked other tools, up to `top_k` tools in all (pinned ones count).
/// - When the retriever finds fewer matches than that (an empty query, or words that occur in
///   no tool), the remaining places are filled with the other tools in catalog order, so a
///   catalog of at most `top_k` tools is always offered whole, and the result always has
///   `min(top_k, catalog.len())` tools, or the pinned count if larger.
/// - `top_k == 0` turns retrieval off: every tool, pinned ones first, then catalog order.
/// - A catalog offered whole (at most `top_k` tools) is ordered with [`Retriever::order`].
pub fn select(
    catalog: &Catalog,
    retriever: &dyn Retriever,
    query: &str,
    top_k: usize,
    pinned: &[String],
) -> Vec<usize> {
    let n_tools = catalog.len();
    let mut chosen = Vec::new();
    let mut seen = HashSet::new();
    for name in pinned {
        if let Some(idx) = catalog.tool_position(name)
            && seen.insert(idx)
        {
            chosen.push(idx);
        }
    }
    let wanted = if top_k == 0 {
        n_tools
    } else {
        top_k.min(n_tools)
    };
    if top_k != 0 && chosen.len() < wanted {
        // At most `chosen.len()` of the `top_k` best are pinned ones, so this is enough.
        let ranked = if wanted == n_tools {
            retriever.order(query, top_k)
        } else {
            retriever.rank(query, top_k)
        };
        for scored in ranked {
            if chosen.len() >= wanted {
                break;
            }
            if scored.index < n_tools && seen.insert(scored.index) {
                chosen.push(scored.index);
            }
        }
    }
    let mut idx = 0;
    while chosen.len() < wanted && idx < n_tools {
        if seen.insert(idx) {
            chosen.push(idx);
        }
        idx += 1;
    }
    chosen
}

/// Reciprocal-rank fusion of several rankings of the same catalog (Cormack, Clarke and
/// The `limit` best candidates with a positive score, best first (equal scores by index): a
/// bounded heap whose top is the worst kept, so a query costs `O(candidates · log limit)` and
/// no large intermediate list. For retrievers outside this module.
pub fn top(candidates: impl Iterator<Item = Scored>, limit: usize) -> Vec<Scored> {
    best(candidates, limit, limit.min(1024))
}

/// [`top`] with the heap's capacity given.
fn best(candidates: impl Iterator<Item = Scored>, limit: usize, capacity: usize) -> Vec<Scored> {
    let mut heap: BinaryHeap<WorstFirst> = BinaryHeap::with_capacity(capacity);
    for candidate in candidates.filter(|c| c.score > 0.0) {
        if heap.len() < limit {
            heap.push(WorstFirst(candidate));
        } else if let Some(mut worst) = heap.peek_mut()
            && best_first(&candidate, &worst.0) == Ordering::Less
        {
            *worst = WorstFirst(candidate);
        }
    }
    let mut ranked: Vec<Scored> = heap.into_iter().map(|item| item.0).collect();
    ranked.sort_unstable_by(best_first);
    ranked
}

/// Orders [`Scored`] so that a max-heap's top is the worst one.
struct WorstFirst(Scored);

impl PartialEq for WorstFirst {
    fn eq(&self, other: &WorstFirst) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for WorstFirst {}

impl PartialOrd for WorstFirst {
    fn partial_cmp(&self, other: &WorstFirst) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for WorstFirst {
    fn cmp(&self, other: &WorstFirst) -> Ordering {
        best_first(&self.0, &other.0)
    }
}

fn best_first(a: &Scored, b: &Scored) -> Ordering {
    b.score.total_cmp(&a.score).then(a.index.cmp(&b.index))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn select_orders_a_whole_catalog_without_searching() {
        struct OrderOnly;
        impl Retriever for OrderOnly {
            fn rank(&self, _: &str, _: usize) -> Vec<Scored> {
                panic!("a catalog offered whole needs no search")
            }
            fn order(&self, _: &str, _: usize) -> Vec<Scored> {
                vec![Scored {
                    index: 1,
                    score: 1.0,
                }]
            }
        }
        let catalog = Catalog::from_json(&json!([
            {"name": "a", "input_schema": {"type": "object"}},
            {"name": "b", "input_schema": {"type": "object"}},
        ]))
        .unwrap();
        assert_eq!(select(&catalog, &OrderOnly, "q", 8, &[]), [1, 0]);
    }
}
