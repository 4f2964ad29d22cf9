//! One step of a plan and its execution status.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Action, Schedule};

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Step {
    /// Identifier, unique in the plan: `s1`, `s2`, …
    pub id: String,
    /// Short title.
    pub title: String,
    /// What the step does and why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// What runs.
    pub action: Action,
    /// Ids of the steps that must complete first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// When the step runs; absent means once, now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// Execution status.
    #[serde(default)]
    pub status: StepStatus,
    /// Set by policy: a person must approve the step before it runs (e.g. a destructive tool).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_approval: bool,
    /// Notes added while reviewing or executing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
    /// Result of the step once it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Error of the step if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Step {
    /// A not-started step with no dependencies.
    pub fn new(id: impl Into<String>, title: impl Into<String>, action: Action) -> Step {
        Step {
            id: id.into(),
            title: title.into(),
            description: String::new(),
            action,
            depends_on: Vec::new(),
            schedule: None,
            status: StepStatus::NotStarted,
            requires_approval: false,
            notes: String::new(),
            result: None,
            error: None,
        }
    }
}

/// Execution status of a step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started yet.
    #[default]
    NotStarted,
    /// Running.
    InProgress,
    /// Finished successfully.
    Completed,
    /// Waiting on something (an answer, an approval).
    Blocked,
    /// Failed.
    Failed,
    /// Not run (its dependency failed, or a person skipped it).
    Skipped,
}

impl StepStatus {
    /// All statuses, in lifecycle order.
    pub const ALL: [StepStatus; 6] = [
        StepStatus::NotStarted,
        StepStatus::InProgress,
        StepStatus::Completed,
        StepStatus::Blocked,
        StepStatus::Failed,
        StepStatus::Skipped,
    ];

    /// The marker used in text renderings: `[✓]`, `[→]`, `[!]`, `[ ]`, `[-]`.
    pub fn marker(self) -> &'static str {
        match self {
            StepStatus::Completed => "[✓]",
            StepStatus::InProgress => "[→]",
            StepStatus::Blocked | StepStatus::Failed => "[!]",
            StepStatus::NotStarted => "[ ]",
            StepStatus::Skipped => "[-]",
        }
    }

    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::NotStarted => "not_started",
            StepStatus::InProgress => "in_progress",
            StepStatus::Completed => "completed",
            StepStatus::Blocked => "blocked",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
        }
    }
}

impl std::str::FromStr for StepStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<StepStatus, String> {
        StepStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = StepStatus::ALL.iter().map(|s| s.as_str()).collect();
                format!(
                    "unknown step status `{s}`; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips_and_rejects_unknown() {
        for status in StepStatus::ALL {
            assert_eq!(status.as_str().parse::<StepStatus>().unwrap(), status);
        }
        let err = "done".parse::<StepStatus>().unwrap_err();
        assert!(err.contains("not_started"), "{err}");
    }
}
