//! Integration tests of plansmith-local: model acquisition (local files, no network) and the
//! real SmolLM2 model planning through the whole pipeline.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// Pull, verify, and every way a pull can fail without leaving anything behind.
mod acquire;
/// The real all-MiniLM-L6-v2 embedding model: dense retrieval, fusion, the vector cache.
mod embed;
/// The real SmolLM2-135M model: schema-valid plans for a table of prompts.
mod model;
/// The real SmolLM2-135M model decoding several requests together.
mod together;
