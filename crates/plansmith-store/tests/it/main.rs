//! plansmith-store integration tests: every suite runs on SQLite and on PostgreSQL
//! (`PLANSMITH_TEST_POSTGRES_URL`; under `CI=true` its absence fails the PostgreSQL half).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// Test databases and the `both_backends!` macro.
mod support;

/// Many writers on one plan: each write lands or conflicts, versions strictly increase.
mod concurrency;

/// A writer killed with SIGKILL mid-stream loses no acknowledged write.
mod crash;

/// Plan templates: versions, list, delete, instantiation against a changed catalog.
mod templates;

/// Conversation memory: earlier plans of a conversation shown to the model.
mod memory;

/// The execution log: claims, leases, fencing, takeover, replans, step decisions.
mod exec;

/// The owner and conversation indexes hold only plans that have one; filters use them.
mod indexes;

/// Cursor paging of the plan list.
mod paging;

/// Messages between processes on one PostgreSQL store (`LISTEN`/`NOTIFY`).
mod notify;

/// Each version's document is stored once; older rows, corrupt rows, a newer schema.
mod versions;
