//! [`ExecEvent`]: what the executor reports while it runs (the CLI's progress lines, the
//! server's SSE stream). Serialised with a `kind` tag: `{"kind": "step_started", …}`.

use std::sync::Arc;

use plansmith_store::{ExecStatus, RunState};
use serde::Serialize;
use serde_json::Value;

/// Something that happened during a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExecEvent {
    /// A run started, resumed, or a node joined it.
    RunStarted {
        /// The plan.
        plan_id: String,
        /// The plan version of the steps.
        base_version: u32,
        /// True when an earlier run is continued.
        resumed: bool,
        /// Step ids in plan order with their titles.
        steps: Vec<(String, String)>,
    },
    /// An attempt started.
    StepStarted {
        /// The step.
        step_id: String,
        /// The attempt.
        attempt: u32,
        /// Its idempotency key.
        idempotency_key: String,
        /// True when the attempt is re-run after its node lost the lease.
        rerun: bool,
    },
    /// How far a running attempt has come, as its tool reports it (an MCP tool's progress
    /// notifications; at most one event per step every [`PROGRESS_EVERY`]).
    ///
    /// [`PROGRESS_EVERY`]: crate::PROGRESS_EVERY
    StepProgress {
        /// The step.
        step_id: String,
        /// The attempt.
        attempt: u32,
        /// The progress so far.
        progress: f64,
        /// The progress at which it is done, when the tool knows it.
        total: Option<f64>,
        /// What the tool is doing, when it says.
        message: Option<String>,
    },
    /// A step completed.
    StepCompleted {
        /// The step.
        step_id: String,
        /// The attempt that succeeded.
        attempt: u32,
        /// How long the attempt took.
        elapsed_ms: u64,
        /// The result (shortened).
        preview: String,
    },
    /// An attempt failed; another follows after a delay.
    StepRetrying {
        /// The step.
        step_id: String,
        /// The attempt that failed.
        attempt: u32,
        /// Why.
        error: String,
        /// The delay before the next attempt.
        delay_ms: u64,
    },
    /// A step ended without a result: failed, skipped or blocked (waiting for a person).
    StepEnded {
        /// The step.
        step_id: String,
        /// `failed`, `skipped` or `blocked`.
        status: ExecStatus,
        /// Why.
        reason: String,
    },
    /// The rest of the plan was replanned from the observations.
    Replanned {
        /// The new version (trigger `replan`).
        version: u32,
        /// Completed steps kept.
        kept: Vec<String>,
        /// Steps of the new plan still to run.
        added: Vec<String>,
        /// Every step of the new plan (id, title), as `run_started` lists them: a step the
        /// replan changed is shown with its new title.
        steps: Vec<(String, String)>,
        /// Replans so far.
        replans: u32,
    },
    /// The run ended (or paused waiting for people).
    RunFinished {
        /// How it ended.
        state: RunState,
        /// Why it stopped, as data (`None` while it waits for people).
        stop_reason: Option<crate::StopReason>,
        /// Why, when it did not complete.
        reason: Option<String>,
        /// The final answer composed from the results.
        summary: String,
        /// Counts by status.
        counts: Value,
    },
}

impl ExecEvent {
    /// The `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            ExecEvent::RunStarted { .. } => "run_started",
            ExecEvent::StepStarted { .. } => "step_started",
            ExecEvent::StepProgress { .. } => "step_progress",
            ExecEvent::StepCompleted { .. } => "step_completed",
            ExecEvent::StepRetrying { .. } => "step_retrying",
            ExecEvent::StepEnded { .. } => "step_ended",
            ExecEvent::Replanned { .. } => "replanned",
            ExecEvent::RunFinished { .. } => "run_finished",
        }
    }
}

/// Receives events (must be quick: it runs on the scheduler's task).
pub type Observer = Arc<dyn Fn(&str, &ExecEvent) + Send + Sync>;

/// Receives the plan after each write of a run's step statuses and results into its document
/// (must be quick: it runs on the task that writes them).
pub type DocumentObserver = Arc<dyn Fn(&plansmith_store::StoredPlan) + Send + Sync>;
