//! Integration tests of plansmith-core, one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The plan document contract (snapshots).
mod contract;
/// Seed-shape export and round trips.
mod export;
/// The fit check: calls to tools that do not fit the request become a question.
mod fit;
/// Parse + validate never panic (property tests).
mod fuzz;
/// The pipeline never returns a plan that does not validate (property tests).
mod invariant;
/// The parse case table.
mod parse;
/// The seed scenarios: each peer's planner behaviour, as data.
mod pipeline;
/// The tool-call format's prompts and call schema, pinned.
mod prompts;
/// The validation case table.
mod validate;
