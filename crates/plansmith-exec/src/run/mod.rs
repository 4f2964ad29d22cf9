//! The scheduler: [`Executor`] runs a stored plan as a DAG over the durable execution log.
//!
//! One loop per plan and node. Each turn it skips the descendants of failed or skipped steps,
//! applies people's decisions, finds the steps whose dependencies completed, blocks those that
//! need an approval, claims up to `concurrency − running` of the rest in the store (leases),
//! and starts them; then it waits for the next attempt to end (or a poll tick). An attempt's
//! end goes through the step's failure policy and into the store (fenced by the lease), and
//! the plan document follows through a coalescing writer (`DocSync`). When no step can
//! progress the run ends: replanned (failed steps under `replan`, or results contradicting the
//! plan), waiting for people, or finished with a summary. Every loop is bounded: attempts by
//! the policy and [`crate::policy::MAX_ATTEMPTS`], replans by `max_replans` and the stall
//! check, turns by [`MAX_TURNS`] and the run by `max_run_time`. A run's budget
//! ([`plansmith_store::Budget`], stored beside the run so every node and resume shares it) caps
//! its tool calls, model tokens, wall time and replans; a cap reached starts nothing new, lets
//! the running steps end or cancels them, and the run ends with a [`StopReason`].
//!
//! Its parts: `executor` (the [`Executor`] and the ways into a run), `config` and `report`
//! (what goes in and what comes out), `state` (one run's state on this node), `drive` (the
//! loop), `schedule` (which steps run next), `attempt` (one attempt, start to end),
//! `decisions` (failure policies and people's decisions), `replanning`, `finish` (how a run
//! ends) and `doc_sync` (the plan document follows the run).

mod attempt;
mod budget;
mod config;
mod decisions;
mod doc_sync;
mod drive;
mod executor;
mod finish;
mod goal;
mod replanning;
mod report;
mod schedule;
mod state;

pub use attempt::PROGRESS_EVERY;
pub use config::{ExecConfig, MAX_TURNS, node_name};
pub use executor::{Executor, PlannerSource};
pub use goal::{GoalVerdict, Verdict};
pub use plansmith_store::StopReason;
pub use report::{ExecError, RunReport, StepReport};
