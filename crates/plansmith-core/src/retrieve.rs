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
use std::collections::{BinaryHeap, HashMap, HashSet};

use serde_json::Value;

use crate::catalog::{Catalog, Tool};

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
/// Büttcher, 2009): a tool scores `Σ 1 / (K + rank)` over the rankings it appears in, with
/// rank 1 for the best, and `K` = [`Fusion::K`].
///
/// Fusing ranks rather than scores needs no calibration between retrievers whose scores live
/// on different scales (BM25F is unbounded, a cosine is in `-1..=1`), and a tool that both
/// rankings place high beats one that only one of them likes. Each retriever is asked for its
/// best [`Fusion::DEPTH`] tools (or `limit`, if more), so a tool one of them misses entirely can
/// still come in from the other.
///
/// [`Retriever::order`] asks only the first retriever: a catalog offered whole needs an order,
/// not a search, and the others (an embedding model) need not start for it.
pub struct Fusion {
    parts: Vec<std::sync::Arc<dyn Retriever>>,
}

impl std::fmt::Debug for Fusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fusion")
            .field("parts", &self.parts.len())
            .finish()
    }
}

impl Fusion {
    /// The constant of the fusion, the value of the original paper (not tuned here): it damps
    /// the difference between the first ranks, so one retriever's top tool does not outweigh
    /// agreement between both.
    pub const K: f32 = 60.0;

    /// How many tools each retriever is asked for, at least.
    pub const DEPTH: usize = 50;

    /// Fuses these rankings; the first also orders catalogs that are offered whole.
    pub fn new(parts: Vec<std::sync::Arc<dyn Retriever>>) -> Fusion {
        Fusion { parts }
    }
}

impl Retriever for Fusion {
    fn rank(&self, query: &str, limit: usize) -> Vec<Scored> {
        if limit == 0 {
            return Vec::new();
        }
        let depth = limit.max(Fusion::DEPTH);
        let mut scores: HashMap<usize, f32> = HashMap::new();
        for part in &self.parts {
            for (rank, scored) in part.rank(query, depth).iter().enumerate() {
                *scores.entry(scored.index).or_default() += 1.0 / (Fusion::K + (rank + 1) as f32);
            }
        }
        top(
            scores
                .into_iter()
                .map(|(index, score)| Scored { index, score }),
            limit,
        )
    }

    fn order(&self, query: &str, limit: usize) -> Vec<Scored> {
        self.parts
            .first()
            .map(|part| part.order(query, limit))
            .unwrap_or_default()
    }
}

/// Weight and length normalisation of one field of a tool in [`Bm25Index`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldParams {
    /// How much one occurrence of a word in this field counts, relative to the description.
    pub weight: f32,
    /// Length normalisation in `0..=1`: 0 ignores the field's length, 1 divides by it fully.
    pub b: f32,
}

/// Parameters of [`Bm25Index`]. The defaults are the textbook values where the data did not
/// argue otherwise; they were checked on the BFCL and MetaTool development sets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation: how fast repeated occurrences stop adding to the score.
    pub k1: f32,
    /// The tool's name, split into words, plus the whole name folded into one word.
    pub name: FieldParams,
    /// The tool's description.
    pub description: FieldParams,
    /// Names of the tool's parameters (nested ones too), split like the tool's name.
    pub parameter_names: FieldParams,
    /// Descriptions of the tool's parameters (nested ones too) and their string enum values.
    pub parameter_descriptions: FieldParams,
}

impl Default for Bm25Params {
    fn default() -> Bm25Params {
        // k1 = 1.2 and b = 0.75 are the usual BM25 values; on the dev sets every k1 in 0.9..=2
        // and b in 0.5..=0.9 lies within ±0.01 MRR, so nothing is gained by moving them. Names
        // are short and precise: double weight, and a milder b because a name's length says
        // little about its topic. Parameter names are identifiers such as `city` or `unit`:
        // half weight. Parameter descriptions are long and repetitive ("The x of the y"): 0.3.
        // Dropping them costs 0.04 MRR on BFCL, weighting them 1.0 costs 0.01.
        Bm25Params {
            k1: 1.2,
            name: FieldParams {
                weight: 2.0,
                b: 0.5,
            },
            description: FieldParams {
                weight: 1.0,
                b: 0.75,
            },
            parameter_names: FieldParams {
                weight: 0.5,
                b: 0.5,
            },
            parameter_descriptions: FieldParams {
                weight: 0.3,
                b: 0.75,
            },
        }
    }
}

impl Bm25Params {
    fn fields(&self) -> [FieldParams; N_FIELDS] {
        [
            self.name,
            self.description,
            self.parameter_names,
            self.parameter_descriptions,
        ]
    }
}

const N_FIELDS: usize = 4;
const NAME: usize = 0;
const DESCRIPTION: usize = 1;

/// How deep [`Bm25Index`] looks into nested parameter schemas (`properties`, `items`, …).
const MAX_SCHEMA_DEPTH: usize = 4;

/// A keyword index over tools, scored with BM25F.
///
/// Each tool is four fields: its name, description, parameter names and parameter descriptions
/// (see [`Bm25Params`]). Text goes through [`tokenize`]. A term's occurrences are summed over
/// the fields, each weighted and normalised by that field's length, and only then saturated
/// (BM25F, Robertson & Zaragoza), so a word that appears in the name *and* the description
/// counts more than once but less than twice, and a long parameter list does not drown the name.
///
/// The per-tool part of the score does not depend on the query, so it is computed when the
/// index is built and stored in the postings: a query costs one pass over the postings of its
/// words, not over the catalog.
#[derive(Debug, Clone)]
pub struct Bm25Index {
    terms: HashMap<String, u32>,
    idf: Vec<f32>,
    /// Postings of term `t` are `postings[offsets[t]..offsets[t + 1]]`, in tool order.
    offsets: Vec<usize>,
    postings: Vec<Posting>,
    n_docs: usize,
}

#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    /// The saturated, length-normalised term frequency: `tf (k1 + 1) / (tf + k1)`.
    weight: f32,
}

impl Bm25Index {
    /// Indexes every tool of the catalog with the default parameters.
    pub fn new(catalog: &Catalog) -> Bm25Index {
        Bm25Index::with_params(catalog, Bm25Params::default())
    }

    /// Indexes every tool of the catalog with these parameters.
    pub fn with_params(catalog: &Catalog, params: Bm25Params) -> Bm25Index {
        Bm25Index::build(catalog.tools().map(|t| &t.tool), params)
    }

    /// Indexes tools that are not in a catalog (positions are indices into `tools`).
    pub fn from_tools(tools: &[Tool], params: Bm25Params) -> Bm25Index {
        Bm25Index::build(tools.iter(), params)
    }

    /// Number of indexed tools.
    pub fn len(&self) -> usize {
        self.n_docs
    }

    /// True when no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.n_docs == 0
    }

    fn build<'a>(tools: impl Iterator<Item = &'a Tool>, params: Bm25Params) -> Bm25Index {
        let mut terms: HashMap<String, u32> = HashMap::new();
        // Per tool: (term, occurrences per field), and the length of each field.
        let mut doc_terms: Vec<Vec<(u32, [u32; N_FIELDS])>> = Vec::new();
        let mut doc_lengths: Vec<[u32; N_FIELDS]> = Vec::new();
        let mut fields: [Vec<String>; N_FIELDS] = Default::default();
        let mut counts: HashMap<u32, [u32; N_FIELDS]> = HashMap::new();
        for tool in tools {
            if u32::try_from(doc_terms.len()).is_err() {
                break;
            }
            tool_fields(tool, &mut fields);
            counts.clear();
            let mut lengths = [0u32; N_FIELDS];
            for (field, tokens) in fields.iter_mut().enumerate() {
                lengths[field] = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
                for token in tokens.drain(..) {
                    let next_id = u32::try_from(terms.len()).unwrap_or(u32::MAX);
                    let id = *terms.entry(token).or_insert(next_id);
                    let tf = counts.entry(id).or_default();
                    tf[field] = tf[field].saturating_add(1);
                }
            }
            let mut entries: Vec<(u32, [u32; N_FIELDS])> = counts.drain().collect();
            entries.sort_unstable_by_key(|&(id, _)| id);
            doc_terms.push(entries);
            doc_lengths.push(lengths);
        }

        let n_docs = doc_terms.len();
        let n_terms = terms.len();
        let mut average = [0f64; N_FIELDS];
        for lengths in &doc_lengths {
            for (sum, &len) in average.iter_mut().zip(lengths) {
                *sum += f64::from(len);
            }
        }
        for sum in &mut average {
            *sum /= n_docs.max(1) as f64;
        }

        let mut df = vec![0usize; n_terms];
        for entries in &doc_terms {
            for &(id, _) in entries {
                if let Some(count) = df.get_mut(id as usize) {
                    *count += 1;
                }
            }
        }
        let mut offsets = Vec::with_capacity(n_terms + 1);
        let mut total = 0;
        offsets.push(0);
        for &count in &df {
            total += count;
            offsets.push(total);
        }
        let idf = df
            .iter()
            .map(|&count| {
                let (n, count) = (n_docs as f64, count as f64);
                (1.0 + (n - count + 0.5) / (count + 0.5)).ln() as f32
            })
            .collect();

        let field_params = params.fields();
        let k1 = f64::from(params.k1.max(0.0));
        let mut cursor = offsets.clone();
        let mut postings = vec![
            Posting {
                doc: 0,
                weight: 0.0
            };
            total
        ];
        for (doc, (entries, lengths)) in doc_terms.iter().zip(&doc_lengths).enumerate() {
            let Ok(doc) = u32::try_from(doc) else { break };
            let mut norm = [1f64; N_FIELDS];
            for field in 0..N_FIELDS {
                let b = f64::from(field_params[field].b.clamp(0.0, 1.0));
                if average[field] > 0.0 {
                    norm[field] = 1.0 - b + b * f64::from(lengths[field]) / average[field];
                }
            }
            for &(id, tf) in entries {
                let mut pseudo_tf = 0.0;
                for field in 0..N_FIELDS {
                    if tf[field] > 0 && norm[field] > 0.0 {
                        let weight = f64::from(field_params[field].weight.max(0.0));
                        pseudo_tf += weight * f64::from(tf[field]) / norm[field];
                    }
                }
                let weight = if pseudo_tf > 0.0 {
                    pseudo_tf * (k1 + 1.0) / (pseudo_tf + k1)
                } else {
                    0.0
                };
                if let Some(slot) = cursor.get_mut(id as usize)
                    && let Some(posting) = postings.get_mut(*slot)
                {
                    *posting = Posting {
                        doc,
                        weight: weight as f32,
                    };
                    *slot += 1;
                }
            }
        }
        Bm25Index {
            terms,
            idf,
            offsets,
            postings,
            n_docs,
        }
    }

    fn term_postings(&self, id: u32) -> &[Posting] {
        let id = id as usize;
        match (self.offsets.get(id), self.offsets.get(id + 1)) {
            (Some(&start), Some(&end)) => self.postings.get(start..end).unwrap_or(&[]),
            _ => &[],
        }
    }
}

impl Retriever for Bm25Index {
    fn rank(&self, query: &str, limit: usize) -> Vec<Scored> {
        if limit == 0 || self.n_docs == 0 {
            return Vec::new();
        }
        let mut ids: Vec<u32> = query_tokens(query)
            .iter()
            .filter_map(|t| self.terms.get(t).copied())
            .collect();
        // Each distinct word counts once, however often the query repeats it.
        ids.sort_unstable();
        ids.dedup();
        let n_postings: usize = ids.iter().map(|&id| self.term_postings(id).len()).sum();
        let capacity = limit.min(self.n_docs);
        if n_postings.saturating_mul(8) >= self.n_docs {
            let mut scores = vec![0f32; self.n_docs];
            for &id in &ids {
                let idf = self.idf.get(id as usize).copied().unwrap_or(0.0);
                for posting in self.term_postings(id) {
                    if let Some(score) = scores.get_mut(posting.doc as usize) {
                        *score += idf * posting.weight;
                    }
                }
            }
            let candidates = scores
                .into_iter()
                .enumerate()
                .map(|(index, score)| Scored { index, score });
            best(candidates, limit, capacity)
        } else {
            let mut scores: HashMap<u32, f32> = HashMap::with_capacity(n_postings);
            for &id in &ids {
                let idf = self.idf.get(id as usize).copied().unwrap_or(0.0);
                for posting in self.term_postings(id) {
                    *scores.entry(posting.doc).or_default() += idf * posting.weight;
                }
            }
            let candidates = scores.into_iter().map(|(doc, score)| Scored {
                index: doc as usize,
                score,
            });
            best(candidates, limit, capacity)
        }
    }
}

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

/// The four fields of a tool, as tokens.
fn tool_fields(tool: &Tool, fields: &mut [Vec<String>; N_FIELDS]) {
    for field in fields.iter_mut() {
        field.clear();
    }
    analyze(&tool.name, true, &mut fields[NAME]);
    analyze(&tool.description, false, &mut fields[DESCRIPTION]);
    let [_, _, names, descriptions] = fields;
    schema_fields(&tool.input_schema, 0, names, descriptions);
}

/// Parameter names and descriptions of an object schema, nested ones included.
fn schema_fields(
    schema: &Value,
    depth: usize,
    names: &mut Vec<String>,
    descriptions: &mut Vec<String>,
) {
    if depth >= MAX_SCHEMA_DEPTH {
        return;
    }
    let Some(object) = schema.as_object() else {
        return;
    };
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            analyze(name, true, names);
            if let Some(text) = property.get("description").and_then(Value::as_str) {
                analyze(text, false, descriptions);
            }
            if let Some(values) = property.get("enum").and_then(Value::as_array) {
                for value in values.iter().filter_map(Value::as_str) {
                    analyze(value, false, descriptions);
                }
            }
            schema_fields(property, depth + 1, names, descriptions);
        }
    }
    if let Some(items) = object.get("items") {
        schema_fields(items, depth + 1, names, descriptions);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        for branch in object
            .get(key)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            schema_fields(branch, depth + 1, names, descriptions);
        }
    }
}

/// Words that carry no meaning for tool choice. Short on purpose: BM25's idf already discounts
/// common words, and verbs such as `get`, `set`, `find` or `send` are part of many tool names.
fn is_stop_word(word: &str) -> bool {
    matches!(
        word,
        "a" | "an"
            | "and"
            | "are"
            | "as"
            | "at"
            | "be"
            | "by"
            | "can"
            | "could"
            | "do"
            | "does"
            | "for"
            | "from"
            | "has"
            | "have"
            | "how"
            | "i"
            | "in"
            | "into"
            | "is"
            | "it"
            | "its"
            | "me"
            | "my"
            | "of"
            | "on"
            | "or"
            | "please"
            | "should"
            | "some"
            | "than"
            | "that"
            | "the"
            | "their"
            | "them"
            | "then"
            | "there"
            | "these"
            | "this"
            | "to"
            | "was"
            | "we"
            | "what"
            | "when"
            | "where"
            | "which"
            | "will"
            | "with"
            | "would"
            | "you"
            | "your"
            | "s"
            | "t"
    )
}

/// Splits text into the terms [`Bm25Index`] indexes and searches.
///
/// - Words are runs of letters and digits (any script); everything else separates them.
///   Identifiers are split at `.`, `_`, `-`, `/` and camelCase boundaries, acronyms included
///   (`HTTPRequest` → `http`, `request`).
/// - Chinese, Japanese and Korean text, written without spaces, becomes overlapping character
///   bigrams (`天气预报` → `天气`, `气预`, `预报`); a lone character is kept as it is.
/// - Everything is lower-cased; a short list of English stop words is dropped.
/// - A light stemmer folds English plurals and `-ing`/`-ed` forms: `cities` → `city`,
///   `boxes` → `box`, `running` → `run`, `created` and `creates` → `creat`.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    analyze(text, false, &mut out);
    out
}

/// Query terms: [`tokenize`], plus each identifier written in the query (`get_weather`,
/// `sendEmail`) folded into one word, as tool names are indexed.
fn query_tokens(query: &str) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in query.split_whitespace() {
        analyze(chunk, true, &mut out);
    }
    out
}

/// Appends the terms of `text` to `out`. With `compound`, text made of two or more words joined
/// only by identifier separators or case changes also yields the whole of it as one term
/// (`math.factorial` → `math`, `factorial`, `mathfactorial`).
fn analyze(text: &str, compound: bool, out: &mut Vec<String>) {
    let start = out.len();
    let mut word = String::new();
    let mut cjk: Vec<char> = Vec::new();
    for c in text.chars() {
        if is_cjk(c) {
            push_words(&word, out);
            word.clear();
            cjk.push(c);
        } else {
            push_cjk(&cjk, out);
            cjk.clear();
            if c.is_alphanumeric() {
                word.push(c);
            } else {
                push_words(&word, out);
                word.clear();
            }
        }
    }
    push_words(&word, out);
    push_cjk(&cjk, out);
    if compound && out.len() > start + 1 && is_identifier(text) {
        let whole: String = text
            .chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect();
        out.push(stem(whole));
    }
}

/// True for a single identifier: letters and digits with `.`, `_`, `-`, `/` inside.
fn is_identifier(text: &str) -> bool {
    let text = text.trim_matches(|c: char| !c.is_alphanumeric());
    !text.is_empty()
        && text
            .chars()
            .all(|c| (c.is_alphanumeric() && !is_cjk(c)) || matches!(c, '.' | '_' | '-' | '/'))
}

/// Splits one run of letters and digits at case changes and appends its terms.
fn push_words(run: &str, out: &mut Vec<String>) {
    let mut piece_start = 0;
    let mut prev: Option<(usize, char)> = None;
    let mut before_prev: Option<char> = None;
    for (offset, cur) in run.char_indices() {
        if let Some((prev_offset, prev_char)) = prev {
            if cur.is_uppercase() && (prev_char.is_lowercase() || prev_char.is_numeric()) {
                push_term(&run[piece_start..offset], out);
                piece_start = offset;
            } else if cur.is_lowercase()
                && prev_char.is_uppercase()
                && before_prev.is_some_and(char::is_uppercase)
                && prev_offset > piece_start
            {
                // The last capital of an acronym starts the next word: `HTTPRequest` → `HTTP`, `Request`.
                push_term(&run[piece_start..prev_offset], out);
                piece_start = prev_offset;
            }
        }
        before_prev = prev.map(|(_, c)| c);
        prev = Some((offset, cur));
    }
    push_term(&run[piece_start..], out);
}

fn push_term(piece: &str, out: &mut Vec<String>) {
    let word = if piece.is_ascii() {
        piece.to_ascii_lowercase()
    } else {
        piece.to_lowercase()
    };
    if word.is_empty() || is_stop_word(&word) {
        return;
    }
    out.push(stem(word));
}

fn push_cjk(chars: &[char], out: &mut Vec<String>) {
    match chars {
        [] => {}
        [single] => out.push(single.to_string()),
        _ => out.extend(chars.windows(2).map(|pair| pair.iter().collect::<String>())),
    }
}

/// Chinese, Japanese and Korean characters: scripts written without spaces between words.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF     // Hiragana, Katakana
        | 0x3400..=0x4DBF   // CJK Extension A
        | 0x4E00..=0x9FFF   // CJK Unified Ideographs
        | 0xAC00..=0xD7AF   // Hangul syllables
        | 0xF900..=0xFAFF   // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F // CJK Extensions B-F, Compatibility Supplement
    )
}

/// Light English stemming, the same for tools and queries: plurals (`-ies`, `-es` after a
/// sibilant, `-s`), then `-ing` or `-ed` (undoubling a final consonant: `running` → `run`), then
/// a final `-e`, so `create`, `creates`, `created` and `creating` all become `creat`. Words of up
/// to three letters and words outside ASCII are kept as they are.
fn stem(mut word: String) -> String {
    if word.len() <= 3 || !word.is_ascii() {
        return word;
    }
    strip_plural(&mut word);
    let len = word.len();
    let stripped = if word.ends_with("ied") && len >= 5 {
        word.truncate(len - 3);
        word.push('y');
        false
    } else if word.ends_with("ing") && len >= 6 {
        word.truncate(len - 3);
        true
    } else if word.ends_with("ed") && len >= 5 && !word.ends_with("eed") {
        word.truncate(len - 2);
        true
    } else {
        false
    };
    let bytes = word.as_bytes();
    if stripped
        && let [.., before, last] = bytes
        && before == last
        && bytes.len() >= 3
        && !b"aeiouylsz".contains(last)
    {
        word.pop();
    }
    if word.len() >= 4 && word.ends_with('e') && !word.ends_with("ee") {
        word.pop();
    }
    word
}

/// `cities` → `city`, `boxes` → `box`, `tools` → `tool`; `class`, `status`, `analysis` stay.
fn strip_plural(word: &mut String) {
    let len = word.len();
    if word.ends_with("ies") && len >= 5 {
        word.truncate(len - 3);
        word.push('y');
        return;
    }
    if let Some(base) = word.strip_suffix("es")
        && ["ss", "x", "z", "ch", "sh"]
            .iter()
            .any(|end| base.ends_with(end))
    {
        word.truncate(len - 2);
        return;
    }
    if word.ends_with('s')
        && !word.ends_with("ss")
        && !word.ends_with("us")
        && !word.ends_with("is")
    {
        word.pop();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A ranking fixed in advance: tools in this order, whatever the query.
    struct Fixed(Vec<usize>);

    impl Retriever for Fixed {
        fn rank(&self, _query: &str, limit: usize) -> Vec<Scored> {
            self.0
                .iter()
                .take(limit)
                .enumerate()
                .map(|(rank, &index)| Scored {
                    index,
                    score: 1.0 / (rank + 1) as f32,
                })
                .collect()
        }
    }

    #[test]
    fn fusion_prefers_agreement_and_keeps_what_one_ranking_alone_found() {
        let fused = Fusion::new(vec![
            std::sync::Arc::new(Fixed(vec![0, 1, 2])),
            std::sync::Arc::new(Fixed(vec![1, 3, 0])),
        ]);
        let order: Vec<usize> = fused.rank("q", 10).iter().map(|s| s.index).collect();
        // 1 is second and first; 0 first and third; 3 (only the second ranking) before 2.
        assert_eq!(order, [1, 0, 3, 2]);
        assert_eq!(fused.rank("q", 2).len(), 2);
        assert!(fused.rank("q", 0).is_empty());
        // A catalog offered whole is ordered by the first ranking alone.
        let whole: Vec<usize> = fused.order("q", 10).iter().map(|s| s.index).collect();
        assert_eq!(whole, [0, 1, 2]);
    }

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

    #[test]
    fn tokenizer_table() {
        let table: &[(&str, &[&str])] = &[
            ("get_weather", &["get", "weather"]),
            ("sendEmail", &["send", "email"]),
            ("math.factorial", &["math", "factorial"]),
            ("HTTPRequest", &["http", "request"]),
            ("parseJSONToXML", &["pars", "json", "xml"]),
            ("ipv4Address", &["ipv4", "address"]),
            ("kebab-case/path", &["kebab", "cas", "path"]),
            (
                "Find the cities with boxes of tools",
                &["find", "city", "box", "tool"],
            ),
            ("Über-Straße", &["über", "straße"]),
            ("天气预报", &["天气", "气预", "预报"]),
            (
                "北京的天气 weather",
                &["北京", "京的", "的天", "天气", "weather"],
            ),
            ("東京 tokyo", &["東京", "tokyo"]),
            ("a", &[]),
            ("", &[]),
        ];
        for (text, expected) in table {
            assert_eq!(tokenize(text), *expected, "{text}");
        }
    }

    #[test]
    fn identifiers_in_queries_also_fold_whole() {
        assert_eq!(
            query_tokens("call get_weather."),
            ["call", "get", "weather", "getweather"]
        );
        assert_eq!(
            query_tokens("sendEmail now"),
            ["send", "email", "sendemail", "now"]
        );
        assert_eq!(query_tokens("weather"), ["weather"]);
    }

    #[test]
    fn stemmer_table() {
        let table = [
            ("cities", "city"),
            ("boxes", "box"),
            ("matches", "match"),
            ("classes", "class"),
            ("tools", "tool"),
            ("class", "class"),
            ("status", "status"),
            ("analysis", "analysis"),
            ("bus", "bus"),
            ("uses", "use"),
            ("running", "run"),
            ("create", "creat"),
            ("creates", "creat"),
            ("created", "creat"),
            ("creating", "creat"),
            ("studied", "study"),
            ("free", "free"),
            ("calling", "call"),
            ("need", "need"),
        ];
        for (word, expected) in table {
            assert_eq!(stem(word.to_owned()), expected, "{word}");
        }
    }

    fn catalog() -> Catalog {
        Catalog::from_json(&json!([
            {"name": "get_weather", "description": "Current weather and forecast for a city.",
             "input_schema": {"type": "object", "properties": {
                 "city": {"type": "string", "description": "City name"},
                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}},
            {"name": "sendEmail", "description": "Send an e-mail message to a recipient.",
             "input_schema": {"type": "object", "properties": {
                 "to": {"type": "string", "description": "Recipient address"},
                 "body": {"type": "string"}}}},
            {"name": "math.factorial", "description": "Calculate the factorial of a number.",
             "input_schema": {"type": "object", "properties": {"number": {"type": "integer"}}}},
            {"name": "HTTPRequest", "description": "Make an HTTP request to a URL.",
             "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}},
            {"name": "search_flights", "description": "Search flights between two airports.",
             "input_schema": {"type": "object", "properties": {
                 "legs": {"type": "array", "items": {"type": "object", "properties": {
                     "origin": {"type": "string", "description": "Departure airport code"}}}}}}},
        ]))
        .unwrap()
    }

    fn names(catalog: &Catalog, ranked: &[Scored]) -> Vec<String> {
        ranked
            .iter()
            .map(|s| catalog.tool_at(s.index).unwrap().tool.name.clone())
            .collect()
    }

    #[test]
    fn ranks_the_matching_tool_first() {
        let catalog = catalog();
        let index = Bm25Index::new(&catalog);
        let table = [
            ("What's the weather like in Paris?", "get_weather"),
            ("temperature in fahrenheit", "get_weather"),
            ("email the report to my boss", "sendEmail"),
            ("compute 5 factorial", "math.factorial"),
            ("fetch https URL with an http request", "HTTPRequest"),
            ("use math.factorial", "math.factorial"),
            ("flights from the departure airport", "search_flights"),
        ];
        for (query, expected) in table {
            let ranked = index.rank(query, 3);
            assert_eq!(
                names(&catalog, &ranked).first().map(String::as_str),
                Some(expected),
                "{query}"
            );
            assert!(
                ranked
                    .windows(2)
                    .all(|w| best_first(&w[0], &w[1]) == Ordering::Less),
                "{query}"
            );
        }
    }

    #[test]
    fn rank_limits_and_skips_non_matches() {
        let catalog = catalog();
        let index = Bm25Index::new(&catalog);
        assert!(index.rank("", 10).is_empty());
        assert!(index.rank("the of and", 10).is_empty());
        assert!(index.rank("zyxxy", 10).is_empty());
        assert!(index.rank("weather", 0).is_empty());
        assert_eq!(index.rank("send weather factorial request", 2).len(), 2);
        assert_eq!(index.rank("weather", 10).len(), 1);
    }

    #[test]
    fn ties_break_by_catalog_position() {
        let tools: Vec<Tool> = (0..20)
            .map(|idx| Tool {
                name: format!("clone_{idx}"),
                description: "Same words.".into(),
                input_schema: json!({"type": "object"}),
                output_schema: None,
                annotations: None,
            })
            .collect();
        let index = Bm25Index::from_tools(&tools, Bm25Params::default());
        let ranked = index.rank("same words", 5);
        assert_eq!(
            ranked.iter().map(|s| s.index).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn empty_catalog() {
        let catalog = Catalog::empty();
        let index = Bm25Index::new(&catalog);
        assert!(index.is_empty());
        assert!(index.rank("weather", 5).is_empty());
        assert!(select(&catalog, &index, "weather", 5, &["get_weather".into()]).is_empty());
        assert!(select(&catalog, &index, "", 0, &[]).is_empty());
    }

    #[test]
    fn select_pins_ranks_and_fills() {
        let catalog = catalog();
        let index = Bm25Index::new(&catalog);
        let pin = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        // Best match only.
        assert_eq!(select(&catalog, &index, "weather in Rome", 1, &[]), [0]);
        // Pinned first and counted; unknown and repeated pins ignored.
        assert_eq!(
            select(
                &catalog,
                &index,
                "weather in Rome",
                2,
                &pin(&["HTTPRequest", "nope", "HTTPRequest"])
            ),
            [3, 0]
        );
        // A pinned tool that also ranks is not repeated.
        assert_eq!(
            select(
                &catalog,
                &index,
                "weather in Rome",
                2,
                &pin(&["get_weather"])
            ),
            [0, 1]
        );
        // More pins than top_k: all kept.
        assert_eq!(
            select(
                &catalog,
                &index,
                "weather",
                1,
                &pin(&["sendEmail", "math.factorial"])
            ),
            [1, 2]
        );
        // Fewer matches than top_k: filled in catalog order.
        assert_eq!(select(&catalog, &index, "factorial", 3, &[]), [2, 0, 1]);
        // Empty query: catalog order.
        assert_eq!(select(&catalog, &index, "", 2, &[]), [0, 1]);
        // top_k == 0: everything, pinned first.
        assert_eq!(
            select(&catalog, &index, "weather", 0, &pin(&["search_flights"])),
            [4, 0, 1, 2, 3]
        );
        // top_k larger than the catalog: everything once.
        assert_eq!(select(&catalog, &index, "weather", 50, &[]).len(), 5);
    }

    #[test]
    fn dense_and_sparse_accumulation_agree() {
        // 200 tools: a rare term takes the sparse path, a common one the dense path.
        let tools: Vec<Tool> = (0..200)
            .map(|idx| Tool {
                name: format!("tool_{idx}"),
                description: if idx % 50 == 0 {
                    "rare common".into()
                } else {
                    "common".into()
                },
                input_schema: json!({"type": "object"}),
                output_schema: None,
                annotations: None,
            })
            .collect();
        let index = Bm25Index::from_tools(&tools, Bm25Params::default());
        let rare = index.rank("rare", 10);
        assert_eq!(
            rare.iter().map(|s| s.index).collect::<Vec<_>>(),
            [0, 50, 100, 150]
        );
        let both = index.rank("rare common", 4);
        assert_eq!(
            both.iter().map(|s| s.index).collect::<Vec<_>>(),
            [0, 50, 100, 150]
        );
        assert!((both[0].score - rare[0].score) > 0.0);
    }
}
