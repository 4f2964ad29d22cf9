//! Failure policies and approval gates: defaults from the executor's configuration,
//! overridden per plan and per step in the plan's `metadata.execution`:
//!
//! ```json
//! {"execution": {"on_failure": "skip", "retries": 1, "backoff_ms": 100,
//!                "siblings": "cancel", "timeout_secs": 30,
//!                "approve": ["s3"],
//!                "steps": {"s2": {"on_failure": "ask", "retries": 0, "timeout_secs": 5}}}}
//! ```
//!
//! A step that fails past its policy (`fail` or `replan`) leaves the steps running beside it
//! running and keeps their results (`"siblings": "isolate"`, the default), or stops them
//! (`"cancel"`: recorded as skipped, "cancelled: …", what finished before is kept); its
//! descendants are skipped with it as the cause. `timeout_secs` bounds each attempt: past it
//! the attempt is stopped and fails as retryable.

use std::time::Duration;

use plansmith_core::Plan;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Hard ceiling on attempts of one step, whatever the policy and the people say: no step
/// ever loops without a bound.
pub const MAX_ATTEMPTS: u32 = 20;

/// What happens once a step failed and its retries are used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// The step fails; its descendants are skipped; the run ends `failed`.
    Fail,
    /// The step is skipped, and its descendants; the run goes on.
    Skip,
    /// The run is aborted: nothing else starts, running steps are stopped.
    Abort,
    /// The step is blocked until a person decides: retry, skip or abort.
    Ask,
    /// The planner is asked for a new plan for the rest (completed steps kept).
    Replan,
}

impl OnFailure {
    /// All actions.
    pub const ALL: [OnFailure; 5] = [
        OnFailure::Fail,
        OnFailure::Skip,
        OnFailure::Abort,
        OnFailure::Ask,
        OnFailure::Replan,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Fail => "fail",
            OnFailure::Skip => "skip",
            OnFailure::Abort => "abort",
            OnFailure::Ask => "ask",
            OnFailure::Replan => "replan",
        }
    }
}

impl std::str::FromStr for OnFailure {
    type Err = String;

    fn from_str(text: &str) -> Result<OnFailure, String> {
        OnFailure::ALL
            .into_iter()
            .find(|p| p.as_str() == text.trim())
            .ok_or_else(|| {
                format!(
                    "unknown failure policy `{text}`; expected fail, skip, abort, ask or replan"
                )
            })
    }
}

/// What a step that failed past its policy does to the steps running beside it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Siblings {
    /// They run on and keep their results.
    #[default]
    Isolate,
    /// They are stopped (skipped, "cancelled: …"); what finished before is kept.
    Cancel,
}

impl std::str::FromStr for Siblings {
    type Err = String;

    fn from_str(text: &str) -> Result<Siblings, String> {
        match text.trim() {
            "isolate" => Ok(Siblings::Isolate),
            "cancel" => Ok(Siblings::Cancel),
            other => Err(format!(
                "unknown sibling policy `{other}`; expected isolate or cancel"
            )),
        }
    }
}

/// A step's failure policy: bounded retries with exponential backoff, then an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailurePolicy {
    /// Retries after the first attempt (so `retries + 1` attempts at most; capped by
    /// [`MAX_ATTEMPTS`]).
    pub retries: u32,
    /// Delay before the first retry; doubled for each further one.
    pub backoff: Duration,
    /// Longest delay between attempts.
    pub max_backoff: Duration,
    /// What happens when the retries are used up (or the failure is not retryable).
    pub on_failure: OnFailure,
    /// What a failure past the policy does to the steps running beside it.
    pub siblings: Siblings,
    /// Longest time of one attempt (`None`: no bound but the invoker's own).
    pub timeout: Option<Duration>,
}

impl FailurePolicy {
    /// The delay before attempt `next_attempt` (2 for the first retry).
    pub fn delay(&self, next_attempt: u32) -> Duration {
        let exponent = next_attempt.saturating_sub(2).min(16);
        self.backoff
            .saturating_mul(1u32 << exponent)
            .min(self.max_backoff)
    }

    /// Whether attempt `attempt` (just failed) may be followed by another.
    pub fn may_retry(&self, attempt: u32) -> bool {
        attempt <= self.retries && attempt < MAX_ATTEMPTS
    }
}

#[derive(Debug, Default, Deserialize)]
struct Overrides {
    on_failure: Option<String>,
    retries: Option<u32>,
    backoff_ms: Option<u64>,
    siblings: Option<String>,
    timeout_secs: Option<f64>,
}

/// The policy for `step_id` of `plan`: `default`, then the plan's, then the step's overrides.
/// Unreadable overrides are ignored (with the reason returned for the log).
pub fn policy_for(
    plan: &Plan,
    step_id: &str,
    default: FailurePolicy,
) -> (FailurePolicy, Vec<String>) {
    let mut policy = default;
    let mut problems = Vec::new();
    let Some(execution) = plan.metadata.get("execution") else {
        return (policy, problems);
    };
    let mut apply =
        |value: &Value, whose: &str| match serde_json::from_value::<Overrides>(value.clone()) {
            Ok(overrides) => {
                if let Some(text) = overrides.on_failure {
                    match text.parse() {
                        Ok(action) => policy.on_failure = action,
                        Err(err) => problems.push(format!("{whose}: {err}")),
                    }
                }
                if let Some(retries) = overrides.retries {
                    policy.retries = retries.min(MAX_ATTEMPTS - 1);
                }
                if let Some(ms) = overrides.backoff_ms {
                    policy.backoff = Duration::from_millis(ms);
                }
                if let Some(text) = overrides.siblings {
                    match text.parse() {
                        Ok(siblings) => policy.siblings = siblings,
                        Err(err) => problems.push(format!("{whose}: {err}")),
                    }
                }
                match overrides.timeout_secs {
                    Some(secs) if secs.is_finite() && secs > 0.0 => {
                        policy.timeout = Some(Duration::from_secs_f64(secs.min(1e9)));
                    }
                    Some(secs) => {
                        problems.push(format!("{whose}: timeout_secs {secs} is not positive"));
                    }
                    None => {}
                }
            }
            Err(err) => problems.push(format!("{whose}: {err}")),
        };
    apply(execution, "metadata.execution");
    if let Some(step) = execution.get("steps").and_then(|steps| steps.get(step_id)) {
        apply(step, &format!("metadata.execution.steps.{step_id}"));
    }
    (policy, problems)
}

/// Whether `step_id` needs a person's approval before it runs: flagged by validation (a
/// destructive tool), listed in `metadata.execution.approve`, or listed by the caller.
pub fn needs_approval(plan: &Plan, step_id: &str, listed: &[String]) -> bool {
    let flagged = plan.step(step_id).is_some_and(|s| s.requires_approval);
    let in_plan = plan
        .metadata
        .get("execution")
        .and_then(|e| e.get("approve"))
        .and_then(Value::as_array)
        .is_some_and(|ids| ids.iter().any(|id| id.as_str() == Some(step_id)));
    flagged || in_plan || listed.iter().any(|id| id == step_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plansmith_core::{Action, Step};
    use serde_json::json;

    fn default() -> FailurePolicy {
        FailurePolicy {
            retries: 2,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            on_failure: OnFailure::Fail,
            siblings: Siblings::Isolate,
            timeout: None,
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let p = default();
        let delays: Vec<u128> = (2..=5).map(|a| p.delay(a).as_millis()).collect();
        assert_eq!(delays, [100, 200, 350, 350]);
        assert!(p.may_retry(1) && p.may_retry(2) && !p.may_retry(3));
        let huge = FailurePolicy { retries: 1000, ..p };
        assert!(!huge.may_retry(MAX_ATTEMPTS));
    }

    #[test]
    fn plan_and_step_overrides() {
        let mut plan = Plan::new("p", "g");
        plan.steps
            .push(Step::new("s1", "a", Action::Reply { text: "x".into() }));
        plan.metadata.insert(
            "execution".into(),
            json!({"on_failure": "skip", "retries": 0, "approve": ["s1"], "siblings": "cancel",
                   "steps": {"s2": {"on_failure": "ask", "retries": 5, "timeout_secs": 1.5},
                             "s3": {"on_failure": "explode"}}}),
        );
        let (p1, _) = policy_for(&plan, "s1", default());
        assert_eq!((p1.on_failure, p1.retries), (OnFailure::Skip, 0));
        let (p2, _) = policy_for(&plan, "s2", default());
        assert_eq!((p2.on_failure, p2.retries), (OnFailure::Ask, 5));
        assert_eq!(p2.siblings, Siblings::Cancel);
        assert_eq!(p2.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(p1.timeout, None);
        let (p3, problems) = policy_for(&plan, "s3", default());
        assert_eq!(p3.on_failure, OnFailure::Skip);
        assert!(problems[0].contains("explode"), "{problems:?}");
        assert!(needs_approval(&plan, "s1", &[]));
        assert!(!needs_approval(&plan, "s2", &[]));
        assert!(needs_approval(&plan, "s2", &["s2".into()]));
    }
}
