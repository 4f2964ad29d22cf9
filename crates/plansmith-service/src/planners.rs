//! The planners a service plans with: its own, and one for each catalog a caller sent.
//!
//! A service is started with one catalog, but several agents may share it, each with its own
//! tools. A request may carry its tools and agents (in any form [`Catalog::from_json`] reads);
//! the store keeps the document once under its content id, the plan's `Review::catalog` names
//! that id, and every later operation on the plan (replan after an edit or an answer, JSON
//! Patch, run, replan after a failed step) plans and validates against the same catalog, in
//! this process or another one on the same store. [`Planners`] holds the service's own planner
//! and a bounded set of planners built for sent catalogs, keyed by content id, so a caller that
//! sends the same tools with every request pays for compiling their schemas once.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use plansmith_core::{Catalog, CatalogError, CatalogProblem, Planner};
use plansmith_store::{PlanStore, Result, Review, StoreError, catalog_id};
use serde_json::{Map, Value};

/// Planners built for sent catalogs that are kept (the oldest built goes first).
const KEPT: usize = 32;

/// The document stored for sent tools and agents: `{"tools": …, "agents": …}`, each only when
/// sent, as sent.
fn document(tools: Option<&Value>, agents: Option<&Value>) -> Value {
    let mut map = Map::new();
    if let Some(tools) = tools {
        map.insert("tools".to_owned(), tools.clone());
    }
    if let Some(agents) = agents {
        map.insert("agents".to_owned(), agents.clone());
    }
    Value::Object(map)
}

/// Compiles a stored or sent catalog document. Problems point into the document
/// (`/tools/0/inputSchema/type`), which is also where they are in a request that sent it.
fn compile(document: &Value) -> std::result::Result<Catalog, CatalogError> {
    let within = |err: CatalogError, base: &str| match err {
        CatalogError::Invalid(problems) => CatalogError::Invalid(
            problems
                .into_iter()
                .map(|p| CatalogProblem {
                    pointer: format!("{base}{}", p.pointer),
                    ..p
                })
                .collect(),
        ),
        other => other,
    };
    let catalog = match document.get("tools") {
        Some(tools) => Catalog::from_json(tools).map_err(|err| within(err, "/tools"))?,
        None => Catalog::empty(),
    };
    match document.get("agents") {
        Some(agents) => {
            let cards = Catalog::agents_from_json(agents).map_err(|err| within(err, "/agents"))?;
            catalog.with_agents(cards)
        }
        None => Ok(catalog),
    }
}

/// The planners a service plans with: its own, and one for each catalog a caller sent (see
/// the module docs). Cheap to share behind an `Arc`.
pub struct Planners {
    default: Arc<Planner>,
    built: Mutex<Built>,
}

#[derive(Default)]
struct Built {
    by_id: HashMap<String, Arc<Planner>>,
    order: VecDeque<String>,
}

impl std::fmt::Debug for Planners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planners")
            .field("default", &self.default)
            .finish_non_exhaustive()
    }
}

impl Planners {
    /// The service's own planner, and none built yet.
    pub fn new(default: Arc<Planner>) -> Planners {
        Planners {
            default,
            built: Mutex::default(),
        }
    }

    /// The service's own planner (its catalog is every plan's without a sent one).
    pub fn default_planner(&self) -> &Arc<Planner> {
        &self.default
    }

    /// The planner for a request that sent `tools` and/or `agents`: on first sight the
    /// document is compiled off the async workers, stored (so the plan's later operations find
    /// it, on any process), and kept; a document seen before costs a hash and a lookup. Returns its content id with the planner, or `None` when neither was
    /// sent (the service's own planner applies). A document that does not load is
    /// [`StoreError::BadCatalog`], naming each tool or agent and its JSON pointer.
    pub async fn for_request(
        &self,
        store: &PlanStore,
        tools: Option<&Value>,
        agents: Option<&Value>,
    ) -> Result<Option<(String, Arc<Planner>)>> {
        if tools.is_none() && agents.is_none() {
            return Ok(None);
        }
        let document = document(tools, agents);
        let text = document.to_string();
        let id = catalog_id(&text);
        if let Some(planner) = self.cached(&id) {
            return Ok(Some((id, planner)));
        }
        // Compiled first (a document that does not load is not stored), kept once stored (a
        // kept catalog is always in the store).
        let planner = self.build(document).await?;
        store.insert_catalog(&id, text).await?;
        self.keep(&id, &planner);
        Ok(Some((id, planner)))
    }

    /// The planner for a stored plan's operations: the one for the catalog it was made with
    /// ([`Review::catalog`], loaded from the store when this process has not built it), or
    /// the service's own.
    pub async fn for_review(&self, store: &PlanStore, review: &Review) -> Result<Arc<Planner>> {
        let Some(id) = review.catalog.as_deref() else {
            return Ok(Arc::clone(&self.default));
        };
        if let Some(planner) = self.cached(id) {
            return Ok(planner);
        }
        let document = store.catalog_document(id).await?;
        let planner = self.build(document).await?;
        self.keep(id, &planner);
        Ok(planner)
    }

    fn cached(&self, id: &str) -> Option<Arc<Planner>> {
        let built = self.built.lock().ok()?;
        built.by_id.get(id).cloned()
    }

    /// A planner over `document`, compiled on a blocking thread (a large catalog's schemas take
    /// a while).
    async fn build(&self, document: Value) -> Result<Arc<Planner>> {
        let compiled = tokio::task::spawn_blocking(move || compile(&document))
            .await
            .map_err(|err| StoreError::BadEdit(format!("compiling the catalog stopped: {err}")))?;
        let catalog = compiled.map_err(StoreError::BadCatalog)?;
        Ok(Arc::new(self.default.for_catalog(catalog)))
    }

    /// Keeps `planner` under `id` (the oldest kept goes when full).
    fn keep(&self, id: &str, planner: &Arc<Planner>) {
        if let Ok(mut built) = self.built.lock()
            && !built.by_id.contains_key(id)
        {
            if built.order.len() >= KEPT
                && let Some(oldest) = built.order.pop_front()
            {
                built.by_id.remove(&oldest);
            }
            built.order.push_back(id.to_owned());
            built.by_id.insert(id.to_owned(), Arc::clone(planner));
        }
    }
}

impl plansmith_exec::PlannerSource for Planners {
    fn for_review<'a>(
        &'a self,
        store: &'a PlanStore,
        review: &'a Review,
    ) -> plansmith_core::llm::BoxFuture<'a, Result<Arc<Planner>>> {
        Box::pin(Planners::for_review(self, store, review))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn problems_point_into_what_was_sent() {
        let document = document(
            Some(&json!([{"name": "ok", "inputSchema": {"type": "object"}},
                         {"name": "bad", "inputSchema": {"type": "nonsense"}}])),
            None,
        );
        let Err(CatalogError::Invalid(problems)) = compile(&document) else {
            panic!("a broken schema must not compile");
        };
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].name, "bad");
        assert!(
            problems[0].pointer.starts_with("/tools/1"),
            "{}",
            problems[0].pointer
        );
    }

    #[test]
    fn the_same_document_has_the_same_id() {
        let tools = json!([{"name": "a", "inputSchema": {"type": "object"}}]);
        let one = catalog_id(&document(Some(&tools), None).to_string());
        let two = catalog_id(&document(Some(&tools.clone()), None).to_string());
        assert_eq!(one, two);
        assert_ne!(
            one,
            catalog_id(&document(Some(&tools), Some(&json!([]))).to_string())
        );
    }
}
