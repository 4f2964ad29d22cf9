//! plansmith-exec: runs plans.
//!
//! # Brief overview
//!
//! An [`Executor`] runs a stored plan as a DAG: every step whose dependencies completed
//! starts at once, up to a concurrency limit; `$ref` arguments are filled from earlier results
//! and results are checked against the tool's `output_schema` when it declares one;
//! every step's status and result go to the plan store as they happen.
//!
//! - **Invokers**: one trait, [`Invoker`]; commands and HTTP callbacks for tools
//!   and agent tasks ([`CommandInvoker`]), a language model for research / processing tasks
//!   ([`TaskInvoker`]), in-process functions ([`FnInvoker`]); MCP `tools/call` is one more
//!   implementation. Reply steps need none. The final answer is composed from the actual
//!   results (the model's summary, else a plain rendering).
//! - **Failure policies** ([`FailurePolicy`], [`OnFailure`]): bounded retries with backoff, then fail, skip, abort,
//!   ask a person, or replan; per plan and per step in `metadata.execution`. Descendants of a
//!   failed or skipped step are skipped with the reason.
//! - **Approval gates**: steps flagged by validation (destructive tools) or listed wait for a
//!   person's decision, recorded in the store (`PlanStore::decide_step`, which every front end
//!   reaches through `plansmith-service`).
//! - **Replanning** ([`Planner::replan`](plansmith_core::Planner::replan), the one replan of
//!   every front end): a failure under `replan`, or results that contradict the plan, call the
//!   planner with the observations; completed steps are kept, the rest is a new version with
//!   trigger `replan`; bounded, with stall detection.
//! - **Budgets and stop reasons**: caps on a run's tool calls, model tokens, wall time and
//!   replans ([`plansmith_store::Budget`]); every run ends with a [`StopReason`].
//! - **Durable log and leases**: attempts with idempotency keys, claims under leases in the
//!   store (PostgreSQL `SKIP LOCKED`), so a run resumes after a crash without repeating
//!   completed steps, and several nodes share one run.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use plansmith_core::{Action, Plan, Step};
//! use plansmith_exec::{ExecConfig, Executor, FnInvoker, Invokers};
//! use plansmith_store::{Location, PlanStore, Review, ReviewState, RunState};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
//! let dir = std::env::temp_dir().join(format!("plansmith-exec-doc-{}", std::process::id()));
//! let store = PlanStore::open(&Location::Sqlite(dir.join("plans.db"))).await?;
//! let mut plan = Plan::new("double", "Double a number");
//! plan.steps.push(Step::new("s1", "Give a number", Action::Tool {
//!     name: "number".into(), arguments: Default::default() }));
//! let mut s2 = Step::new("s2", "Double it", Action::Tool {
//!     name: "double".into(),
//!     arguments: json!({"x": {"$ref": "s1.output.n"}}).as_object().cloned().unwrap_or_default() });
//! s2.depends_on = vec!["s1".into()];
//! plan.steps.push(s2);
//! store.create(plan, ReviewState::Accepted, Review::default(), "me").await?;
//!
//! let tools = FnInvoker::new(|call| match &call.action {
//!     Action::Tool { name, arguments } if name == "number" => Ok(json!({"n": 21})),
//!     Action::Tool { arguments, .. } => Ok(json!(arguments["x"].as_i64().unwrap_or(0) * 2)),
//!     _ => Ok(json!(null)),
//! });
//! let invokers = Invokers { tools: Some(Arc::new(tools)), ..Invokers::default() };
//! let report = Executor::new(store, invokers, ExecConfig::new("doc")).run("double").await?;
//! assert_eq!(report.state, RunState::Completed);
//! assert_eq!(report.steps[1].result, Some(json!(42)));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod events;
mod fingerprint;
mod invoke;
#[cfg(feature = "mcp")]
pub mod mcp;
mod policy;
mod refs;
mod run;
mod summary;

pub use events::{DocumentObserver, ExecEvent, Observer};
pub use invoke::{
    Call, CallProgress, CommandInvoker, CommandMap, Endpoint, FnInvoker, InvokeError, Invoker,
    Invokers, TaskInput, TaskInvoker, TokenMeter,
};
pub use policy::{FailurePolicy, MAX_ATTEMPTS, OnFailure, Siblings};
pub use run::{
    ExecConfig, ExecError, Executor, GoalVerdict, MAX_TURNS, PROGRESS_EVERY, PlannerSource,
    RunReport, StepReport, StopReason, Verdict, node_name,
};
