//! plansmith-exec integration tests: real command tools (small shell scripts under
//! `tests/tools/` that sleep, fail, fail a few times, or append to a file) on a real store.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// Stores, plans, tools and executors for the tests.
mod support;

/// DAG scheduling: parallel speed-up, `$ref`s, statuses in the document, output schemas.
mod scheduler;

/// Failure policies: retry, skip, abort, ask, the OpenManus bounded-retry scenario.
mod policies;

/// Command tools: a call that ends early (timeout, stop) leaves none of its processes behind.
mod commands;

/// Approval gates through the feedback path.
mod gates;

/// A tool's progress reports become step events, a few a second.
mod progress;

/// Replanning from observations (scripted model at the LLM boundary), stall detection.
mod replanning;

/// Several nodes on one store: every step exactly once, takeover after a node dies.
mod nodes;

/// Budgets and stop reasons: each cap, shared by nodes; deadlocks end the run.
mod budget;

/// The goal check: gaps replanned, unmet goals and caps.
mod goal;
