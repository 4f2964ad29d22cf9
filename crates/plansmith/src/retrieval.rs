//! Which tool retriever a command uses, and the planner built with it.
//!
//! `--retriever` (on `tools search` and `eval retrieval`), else `PLANSMITH_RETRIEVER`, else the
//! config file's `retriever`, else `hybrid`: BM25F keyword search fused with the embedded
//! sentence-embedding model by reciprocal rank. The embedding model loads for a catalog larger
//! than the prompt's top-K (a catalog offered whole is only ordered, by BM25F): on a thread of
//! its own while the language model loads ([`planner_loading`]), else at the first search. When
//! it is not installed, retrieval falls back to BM25F with one warning.

use std::sync::Arc;

use plansmith_core::retrieve::{Bm25Index, Fusion, Retriever};
use plansmith_core::{Catalog, LanguageModel, Planner};

use crate::CliError;

pub use crate::config::RetrieverKind;

/// The retriever to use: `flag`, else `PLANSMITH_RETRIEVER`, else the config file, else hybrid
/// (the one layering of every setting, [`crate::config::settings`]).
pub fn kind(flag: Option<RetrieverKind>) -> anyhow::Result<RetrieverKind> {
    let flags = crate::config::Settings {
        retriever: flag,
        ..crate::config::Settings::default()
    };
    Ok(
        crate::config::settings(flags, crate::config::Scope::Command)
            .map_err(|err| err.error)?
            .retriever
            .unwrap_or(RetrieverKind::Hybrid),
    )
}

/// A retriever of this kind over the catalog.
pub fn build(catalog: &Catalog, kind: RetrieverKind) -> Arc<dyn Retriever> {
    let bm25: Arc<dyn Retriever> = Arc::new(Bm25Index::new(catalog));
    match (kind, dense(catalog)) {
        (RetrieverKind::Bm25, _) | (_, None) => bm25,
        (RetrieverKind::Dense, Some(dense)) => dense,
        (RetrieverKind::Hybrid, Some(dense)) => Arc::new(Fusion::new(vec![bm25, dense])),
    }
}

#[cfg(feature = "local")]
fn dense(catalog: &Catalog) -> Option<Arc<dyn Retriever>> {
    use plansmith_local::{acquire, embed};
    Some(Arc::new(embed::LazyDense::new(
        catalog.clone(),
        acquire::default_dir(),
        Some(embed::VectorCache::new(embed::VectorCache::default_dir())),
    )))
}

#[cfg(not(feature = "local"))]
fn dense(_catalog: &Catalog) -> Option<Arc<dyn Retriever>> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            "keyword retrieval only: this build has no embedded models (feature `local`)"
        )
    });
    None
}

/// A planner over `catalog` with the configured retriever.
pub fn planner(catalog: Catalog, model: Arc<dyn LanguageModel>) -> Result<Planner, CliError> {
    let retriever = build(&catalog, kind(None).map_err(CliError::input)?);
    Ok(Planner::with_retrieval(catalog, retriever, model))
}

/// A planner over `catalog` with the configured retriever and the model `load` returns.
///
/// When requests showing `top_k` tools will search the catalog, the retriever's embedding
/// model and vectors load on another thread while `load` runs, instead of at the first search
/// after it: a cold `plansmith plan` waits for the longer of the two loads, not their sum.
pub fn planner_loading(
    catalog: Catalog,
    top_k: usize,
    load: impl FnOnce() -> Result<Arc<dyn LanguageModel>, CliError>,
) -> Result<Planner, CliError> {
    let retriever = build(&catalog, kind(None).map_err(CliError::input)?);
    prepare_in_background(&retriever, catalog.len(), top_k);
    let model = load()?;
    Ok(Planner::with_retrieval(catalog, retriever, model))
}

/// Starts [`Retriever::prepare`] on a thread of its own when a request showing `top_k` of
/// `tools` tools searches them (`select` only orders a catalog shown whole). A search that
/// comes before it is done waits for the same load; nothing is loaded twice.
pub fn prepare_in_background(retriever: &Arc<dyn Retriever>, tools: usize, top_k: usize) {
    if top_k == 0 || tools <= top_k {
        return;
    }
    let retriever = retriever.clone();
    let spawned = std::thread::Builder::new()
        .name("plansmith-retrieval".into())
        .spawn(move || retriever.prepare());
    if let Err(err) = spawned {
        // The first search loads it instead.
        tracing::debug!("cannot prepare retrieval in the background: {err}");
    }
}
