//! plansmith-mcp-server: plansmith as an MCP server, on the official Rust SDK (`rmcp`).
//!
//! # Brief overview
//!
//! [`PlansmithMcp`] offers the tools `plan` (request → plan or questions, with diagnostics),
//! `planning` (OpenManus's PlanningTool commands on the plan store), `feedback` (accept, edit,
//! answer, reject, patch, step verdicts) and `templates` (list, get, save, delete, instantiate
//! plan templates), each the same operation as the HTTP API's through one
//! [`plansmith_service::Service`]. Serve it over stdio with [`serve_stdio`], or mount
//! [`http_service`] (streamable HTTP, a `tower` service) into an axum router.
//!
//! (The other way, MCP servers' tools as plansmith tools, is `plansmith-mcp`.)
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use plansmith_core::{Catalog, Planner, ScriptedModel};
//! use plansmith_mcp_server::{PlansmithMcp, serve_stdio};
//! use plansmith_service::{Planners, Service};
//! use plansmith_store::{Location, PlanStore};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PlanStore::open(&Location::Sqlite("plans.db".into())).await?;
//! let planner = Planner::new(Catalog::default(), Arc::new(ScriptedModel::new(["{}"])));
//! let service = Service::new(store, Arc::new(Planners::new(Arc::new(planner))));
//! serve_stdio(PlansmithMcp::new(service, "mcp")).await?;
//! # Ok(())
//! # }
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod server;
mod stdio;

pub use server::{McpHttpService, PlansmithMcp, http_service, serve_stdio};

/// Serving over MCP failed (the transport, or the session's start).
#[derive(Debug, thiserror::Error)]
#[error("MCP server: {0}")]
pub struct ServeError(String);
