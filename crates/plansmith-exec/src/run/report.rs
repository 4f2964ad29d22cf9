//! What a run gives back: its report ([`RunReport`], a [`StepReport`] a step), or the error
//! that kept it from happening ([`ExecError`]).

use plansmith_store::{ExecStatus, ReviewState, RunBudget, RunState, StopReason, StoreError};
use serde::Serialize;
use serde_json::Value;

/// A run that could not happen (step failures are not errors: they are in the report).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The plan's review state forbids running it.
    #[error("plan `{id}` is {state}: {hint}")]
    NotRunnable {
        /// The plan.
        id: String,
        /// Its state.
        state: ReviewState,
        /// What to do.
        hint: &'static str,
    },
    /// The plan was deleted while it ran: its running steps were stopped (a command tool's
    /// process killed; a call already sent to an MCP or HTTP tool may still complete there),
    /// nothing else was started and nothing was recorded.
    #[error(
        "plan `{id}` was deleted while it ran: its running steps were stopped and nothing else was started"
    )]
    Deleted {
        /// The plan.
        id: String,
    },
    /// `resume` of a plan without an unfinished run.
    #[error("plan `{id}` has no run to resume ({why})")]
    NothingToResume {
        /// The plan.
        id: String,
        /// Why.
        why: String,
    },
}

/// One step in a [`RunReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    /// The step id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Where it ended.
    pub status: ExecStatus,
    /// Attempts made.
    pub attempts: u32,
    /// The result, if completed.
    pub result: Option<Value>,
    /// The last error.
    pub error: Option<String>,
    /// Why it was skipped or blocked.
    pub note: String,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// The plan.
    pub plan_id: String,
    /// The end state (`waiting` when it paused for people).
    pub state: RunState,
    /// Why it did not complete, if it did not.
    pub reason: Option<String>,
    /// Why it stopped, as data; `None` while it waits for people.
    pub stop_reason: Option<StopReason>,
    /// Its caps and what it spent (tool calls, tokens), for runs recorded with a budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<RunBudget>,
    /// The goal check's last verdict, when the run checked its goal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal_check: Option<super::goal::GoalVerdict>,
    /// The final answer, composed from the results.
    pub summary: String,
    /// Every step.
    pub steps: Vec<StepReport>,
    /// Replans made.
    pub replans: u32,
    /// The plan version the last steps came from.
    pub base_version: u32,
    /// Wall time of this node's part of the run.
    pub elapsed_ms: u64,
}
