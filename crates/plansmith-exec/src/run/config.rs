//! The executor's settings ([`ExecConfig`]), this process's node name, and the bound on the
//! scheduler's turns.

use std::time::Duration;

use plansmith_store::Budget;

use crate::policy::{FailurePolicy, OnFailure, Siblings};

/// Most scheduler turns of one run (each turn starts or ends at least one attempt, or waits
/// one poll interval).
pub const MAX_TURNS: u64 = 10_000_000;

/// Executor settings. Pass explicitly; [`ExecConfig::new`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ExecConfig {
    /// This node's name in leases and the attempt log (unique per process).
    pub node: String,
    /// Most attempts running at once on this node.
    pub concurrency: usize,
    /// The default failure policy (plans and steps override it in `metadata.execution`).
    pub policy: FailurePolicy,
    /// Most replans of one run.
    pub max_replans: u32,
    /// Lease of a claimed step; renewed every third of it while the step runs.
    pub lease: Duration,
    /// How often the store is polled while waiting for other nodes or for people.
    pub poll_interval: Duration,
    /// Longest a run waits for a person's decision before it pauses (`waiting`).
    pub wait_for_people: Duration,
    /// Longest run time; past it, nothing new starts and the run fails.
    pub max_run_time: Duration,
    /// Approve every gated step.
    pub approve_all: bool,
    /// Steps that need an approval in addition to those the plan flags.
    pub require_approval: Vec<String>,
    /// Write step statuses and results into the plan document as they happen.
    pub sync_document: bool,
    /// The caps of every run this executor starts, under a run's own
    /// ([`Executor::start_with`](crate::Executor::start_with)). Its `max_replans`, when set,
    /// takes the place of [`ExecConfig::max_replans`].
    pub budget: Budget,
    /// Check the goal once the steps ended: the model judges the results against the request
    /// (plans override it with `metadata.execution.goal_check`).
    pub goal_check: bool,
    /// What the goal check must also find true (plans override it with
    /// `metadata.execution.goal_check.rubric`).
    pub rubric: Option<String>,
}

impl ExecConfig {
    /// Defaults: 4 at once, 2 retries from 200 ms (max 5 s) then `fail`, 2 replans, 15 s
    /// leases, 200 ms polls, no wait for people, 24 h per run, document sync on, no other caps, no goal check.
    pub fn new(node: impl Into<String>) -> ExecConfig {
        ExecConfig {
            node: node.into(),
            concurrency: 4,
            policy: FailurePolicy {
                retries: 2,
                backoff: Duration::from_millis(200),
                max_backoff: Duration::from_secs(5),
                on_failure: OnFailure::Fail,
                siblings: Siblings::Isolate,
                timeout: None,
            },
            max_replans: 2,
            lease: Duration::from_secs(15),
            poll_interval: Duration::from_millis(200),
            wait_for_people: Duration::ZERO,
            max_run_time: Duration::from_secs(24 * 3600),
            approve_all: false,
            require_approval: Vec::new(),
            sync_document: true,
            budget: Budget::default(),
            goal_check: false,
            rubric: None,
        }
    }
}

/// A node name for this process: `host-pid-random`.
pub fn node_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "node".to_owned());
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &tag[..6])
}
