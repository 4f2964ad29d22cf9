//! plansmith-llm's integration tests (one binary): recorded-traffic cassettes replayed through
//! a mock server and the real `Planner`, and fault tests against local mock servers. Every test
//! is bounded in time. See `tests/README.md` for the cassette policy.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod cassettes;
mod faults;
mod real_server;
mod support;
