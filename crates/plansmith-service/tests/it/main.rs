//! plansmith-service integration tests, on SQLite and on PostgreSQL
//! (`PLANSMITH_TEST_POSTGRES_URL`; under `CI=true` its absence fails the PostgreSQL half).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// Test databases and the `both_backends!` macro, shared with the store's tests.
#[allow(dead_code, reason = "the store's tests use all of it, these some")]
#[path = "../../../plansmith-store/tests/it/support.rs"]
mod support;

/// Lifecycle (OpenManus PlanningTool) and human-in-the-loop scenario tables, `tests/data/*.json`.
mod scenarios;

/// Runs started, resumed and refused through the service.
mod runs;
