//! The execution log's rows and states: runs, steps, claims, attempts and how they end.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The idempotency key of one attempt: `plan:base_version:step:attempt`.
pub fn idempotency_key(plan_id: &str, base_version: u32, step_id: &str, attempt: u32) -> String {
    format!("{plan_id}:{base_version}:{step_id}:{attempt}")
}

/// Where a run is.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Steps are being run (by one or more nodes).
    Running,
    /// Nothing can progress until a person decides (an approval, or a failed step under `ask`).
    Waiting,
    /// Every step completed or was skipped by policy; the summary is written.
    Completed,
    /// A step failed past its policy and no replan was possible.
    Failed,
    /// A step's policy (or a person) aborted the run.
    Aborted,
    /// Replanning repeated the same failure or the same call: stopped.
    Stalled,
}

impl RunState {
    /// All states.
    pub const ALL: [RunState; 6] = [
        RunState::Running,
        RunState::Waiting,
        RunState::Completed,
        RunState::Failed,
        RunState::Aborted,
        RunState::Stalled,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Waiting => "waiting",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Aborted => "aborted",
            RunState::Stalled => "stalled",
        }
    }

    /// True when the run is over (a new run may start).
    pub fn is_final(self) -> bool {
        !matches!(self, RunState::Running | RunState::Waiting)
    }
}

impl std::str::FromStr for RunState {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<RunState, String> {
        RunState::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| format!("unknown run state `{text}`"))
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a step is in the execution log (finer than the document's `StepStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecStatus {
    /// Not started; runs once its dependencies completed.
    Pending,
    /// Claimed by a node (under a lease).
    Running,
    /// Failed; another attempt may be claimed after `not_before`.
    RetryWait,
    /// Done, with a result. Never left.
    Completed,
    /// Failed past its policy.
    Failed,
    /// Not run: skipped by policy, or a dependency failed or was skipped.
    Skipped,
    /// Waiting for a person: an approval, or a decision about a failure.
    Blocked,
}

impl ExecStatus {
    /// All statuses.
    pub const ALL: [ExecStatus; 7] = [
        ExecStatus::Pending,
        ExecStatus::Running,
        ExecStatus::RetryWait,
        ExecStatus::Completed,
        ExecStatus::Failed,
        ExecStatus::Skipped,
        ExecStatus::Blocked,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecStatus::Pending => "pending",
            ExecStatus::Running => "running",
            ExecStatus::RetryWait => "retry_wait",
            ExecStatus::Completed => "completed",
            ExecStatus::Failed => "failed",
            ExecStatus::Skipped => "skipped",
            ExecStatus::Blocked => "blocked",
        }
    }

    /// True for completed, failed and skipped.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ExecStatus::Completed | ExecStatus::Failed | ExecStatus::Skipped
        )
    }

    /// The plan document's status for this one.
    pub fn step_status(self) -> plansmith_core::StepStatus {
        use plansmith_core::StepStatus;
        match self {
            ExecStatus::Pending => StepStatus::NotStarted,
            ExecStatus::Running | ExecStatus::RetryWait => StepStatus::InProgress,
            ExecStatus::Completed => StepStatus::Completed,
            ExecStatus::Failed => StepStatus::Failed,
            ExecStatus::Skipped => StepStatus::Skipped,
            ExecStatus::Blocked => StepStatus::Blocked,
        }
    }
}

impl std::str::FromStr for ExecStatus {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<ExecStatus, String> {
        ExecStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| format!("unknown execution status `{text}`"))
    }
}

/// One plan's run (the data of the `exec_run` event).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecRun {
    /// The plan.
    pub plan_id: String,
    /// The plan version the current steps come from (the run's start, or its last replan);
    /// part of every idempotency key.
    pub base_version: u32,
    /// Where the run is.
    pub state: RunState,
    /// Replans so far.
    pub replans: u32,
    /// The node that started the run.
    pub node: String,
    /// Why it stopped, once it did (from its report; `None` while it runs or waits).
    pub stop_reason: Option<StopReason>,
    /// The final report, once the run is over.
    pub outcome: Option<Value>,
    /// When the run started.
    pub started_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// Why a run stopped, as data: what a caller branches on (the run's `reason` says it in words).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Every step completed or was skipped by its policy.
    Completed,
    /// A step failed past its policy and no replan was allowed.
    Failed,
    /// A person, a step's `abort` policy or a replan that could not be made stopped the run.
    Aborted,
    /// The run's model tokens reached their cap.
    TokenCapped,
    /// The run's tool and agent calls reached their cap.
    ToolCallsCapped,
    /// The run reached its time cap.
    Deadline,
    /// A replan was needed past the cap on replans.
    ReplansCapped,
    /// A replan repeated a failure or a failed call.
    Stalled,
    /// Steps were left that nothing could start (their dependencies can never complete).
    Deadlocked,
}

impl StopReason {
    /// Every reason.
    pub const ALL: [StopReason; 9] = [
        StopReason::Completed,
        StopReason::Failed,
        StopReason::Aborted,
        StopReason::TokenCapped,
        StopReason::ToolCallsCapped,
        StopReason::Deadline,
        StopReason::ReplansCapped,
        StopReason::Stalled,
        StopReason::Deadlocked,
    ];

    /// The wire name (`tool_calls_capped`).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::Failed => "failed",
            StopReason::Aborted => "aborted",
            StopReason::TokenCapped => "token_capped",
            StopReason::ToolCallsCapped => "tool_calls_capped",
            StopReason::Deadline => "deadline",
            StopReason::ReplansCapped => "replans_capped",
            StopReason::Stalled => "stalled",
            StopReason::Deadlocked => "deadlocked",
        }
    }

    /// Whether a budget cap stopped the run.
    pub fn is_cap(self) -> bool {
        matches!(
            self,
            StopReason::TokenCapped
                | StopReason::ToolCallsCapped
                | StopReason::Deadline
                | StopReason::ReplansCapped
        )
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step's row in the execution log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecStep {
    /// The step id.
    pub step_id: String,
    /// Where it is.
    pub status: ExecStatus,
    /// The last attempt number claimed (0: never claimed).
    pub attempt: u32,
    /// How many times the current attempt was re-run after its node lost the lease.
    pub reruns: u32,
    /// The result, once completed.
    pub result: Option<Value>,
    /// The last error.
    pub error: Option<String>,
    /// A note for people (why it was skipped, what it waits for).
    pub note: String,
    /// The node holding the lease while running.
    pub lease_owner: Option<String>,
    /// When the lease expires.
    pub lease_until: Option<DateTime<Utc>>,
    /// Earliest time of the next attempt (retry backoff).
    pub not_before: Option<DateTime<Utc>>,
}

/// A step claimed by [`PlanStore::exec_claim`]: run it with this attempt and key.
///
/// [`PlanStore::exec_claim`]: crate::PlanStore::exec_claim
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The step.
    pub step_id: String,
    /// The attempt number (1 for the first).
    pub attempt: u32,
    /// `plan:base_version:step:attempt`.
    pub idempotency_key: String,
    /// True when this attempt already started on a node that lost its lease (crashed): the
    /// call is repeated with the same key.
    pub rerun: bool,
    /// For a rerun: the task the tool's server made of the attempt's call, when one was
    /// recorded ([`PlanStore::exec_remember_task`]); polled instead of calling again.
    ///
    /// [`PlanStore::exec_remember_task`]: crate::PlanStore::exec_remember_task
    pub remote_task: Option<String>,
}

/// How an attempt ended, for [`PlanStore::exec_finish`].
///
/// [`PlanStore::exec_finish`]: crate::PlanStore::exec_finish
#[derive(Debug, Clone, PartialEq)]
pub enum StepEnd {
    /// Succeeded with a result.
    Completed(Value),
    /// Failed; another attempt may run from `not_before` on.
    Retry {
        /// The error.
        error: String,
        /// When the next attempt may start.
        not_before: DateTime<Utc>,
    },
    /// Failed past its policy.
    Failed(String),
    /// Failed; skipped by policy.
    Skipped(String),
    /// Failed; waits for a person (`ask`).
    Blocked(String),
}

/// One attempt in the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// `plan:base_version:step:attempt`.
    pub idempotency_key: String,
    /// The step.
    pub step_id: String,
    /// The plan version of the run segment.
    pub base_version: u32,
    /// The attempt number.
    pub attempt: u32,
    /// The node that ran it last.
    pub node: String,
    /// How many times it was started (more than 1 after a crash mid-call).
    pub runs: u32,
    /// `started`, `succeeded` or `failed`.
    pub outcome: String,
    /// The error of a failed attempt.
    pub error: Option<String>,
    /// When it (last) started.
    pub started_at: DateTime<Utc>,
    /// When it finished.
    pub finished_at: Option<DateTime<Utc>>,
}
