//! Which tool retriever a command uses, and the planner built with it.
//!
//! `--retriever` (on `tools search` and `eval retrieval`), else `PLANSMITH_RETRIEVER`, else the
//! config file's `retriever`, else `hybrid`: BM25F keyword search fused with the embedded
//! sentence-embedding model by reciprocal rank. The embedding model loads at the first search
//! of a catalog larger than the prompt's top-K (a catalog offered whole is only ordered, by
//! BM25F); when it is not installed, retrieval falls back to BM25F with one warning.

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
