//! plansmith-mcp's integration tests: the client against real third-party MCP servers
//! (installed by `scripts/mcp-servers.sh`) and against broken fixture servers.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod faults;
mod in_flight;
mod real_servers;

use std::path::PathBuf;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The path in env var `name` (set by `scripts/mcp-servers.sh`), or `None` after printing a
/// NOTE; under `CI=true` a missing variable fails the test.
pub fn installed(name: &str, test: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but {name} is not set (.ci/setup.d/30-mcp-servers.sh)"
            );
            println!("NOTE: {test} NOT RUN: set {name} (eval \"$(scripts/mcp-servers.sh)\")");
            None
        }
    }
}
