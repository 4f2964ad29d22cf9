//! plansmith-mcp-server's integration tests: the server driven by rmcp's client.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod serve;
