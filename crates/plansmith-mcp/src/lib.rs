//! plansmith-mcp: MCP servers' tools as plansmith tools, on the official Rust SDK (`rmcp`). (The
//! other way, plansmith as an MCP server, is `plansmith-mcp-server`.)
//!
//! # Brief overview
//!
//! [`McpTools::connect`] reads a [`ServersConfig`] (the common
//! `{"mcpServers": {name: {command, args, env} | {url}}}` file), connects to every server over
//! stdio (a spawned command) or streamable HTTP, and imports their `tools/list` (every page;
//! `outputSchema` and annotations such as `destructiveHint` kept) into a
//! [`plansmith_core::Catalog`]. Names that clash across servers become `server__tool`
//! ([`Route`]). Every step is bounded by a timeout; a server that fails, and a tool whose schema
//! is invalid, become [`ServerProblem`]s naming them while the rest loads. [`McpTools::call`]
//! runs `tools/call` on the right server under the tool's own name, reconnecting a server whose
//! connection died.
//!
//! Destructive tools: the annotations imported here are the core's
//! [`plansmith_core::ToolAnnotations`], so a step calling a tool marked `destructiveHint: true`
//! (and not `readOnlyHint`) is flagged `requires_approval` by validation, like any other
//! catalog's.
//!
//! # Example
//!
//! ```no_run
//! use plansmith_mcp::{ClientOptions, McpTools, ServersConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ServersConfig::from_json(&serde_json::json!({"mcpServers": {
//!     "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]}
//! }}))?;
//! let imported = McpTools::connect(&config, ClientOptions::default()).await;
//! for problem in &imported.problems {
//!     eprintln!("{problem}"); // e.g. server `time`: cannot start `mcp-server-time`: …
//! }
//! let mut arguments = serde_json::Map::new();
//! arguments.insert("timezone".into(), "Europe/Paris".into());
//! let output = imported.tools.call("get_current_time", arguments).await?;
//! println!("{}", output.text);
//! # Ok(())
//! # }
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::time::Duration;

mod client;
mod config;
mod investigate;
mod names;

pub use client::{
    CLOSE_TIMEOUT, CallExtras, ClientOptions, Imported, McpTools, ServerProblem, ToolOutput,
    ToolProgress,
};
pub use config::{ServerSpec, ServersConfig, Transport};
pub use investigate::{Lookup, MAX_TERMS, McpInvestigator};
pub use names::Route;

/// What an MCP operation can fail with; every variant names the server (or tool) involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The servers configuration is unreadable or invalid.
    #[error("{source_name}: {message}")]
    Config {
        /// The file (or `server `x``) the problem is in.
        source_name: String,
        /// What is wrong.
        message: String,
    },
    /// The server's command could not be started.
    #[error("server `{server}`: {message}")]
    Spawn {
        /// The server.
        server: String,
        /// What happened.
        message: String,
    },
    /// The server answered nothing in time.
    #[error("server `{server}`: no answer to {operation} within {} s", .after.as_secs_f64())]
    Timeout {
        /// The server.
        server: String,
        /// What was asked.
        operation: String,
        /// The timeout.
        after: Duration,
    },
    /// The server closed the connection, answered garbage or an error.
    #[error("server `{server}`: {message}")]
    Protocol {
        /// The server.
        server: String,
        /// What happened.
        message: String,
    },
    /// No imported tool has this name.
    #[error("no MCP tool named `{0}` in the catalog")]
    UnknownTool(String),
    /// The call's task waits for input from a person (`input_required`).
    #[error("server `{}`: task `{}` asks: {}", .0.server, .0.task, .0.message)]
    InputRequired(Box<TaskQuestion>),
}

/// What a tool's task asks a person ([`McpError::InputRequired`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskQuestion {
    /// The server.
    pub server: String,
    /// The task.
    pub task: String,
    /// The questions, as the tool words them.
    pub message: String,
    /// The task's `inputRequests`, as the server sent them (answered by key, later, in a
    /// call of the same task).
    pub requests: serde_json::Value,
}
