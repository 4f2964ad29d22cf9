//! [`Diagnostic`]: one finding about a model output or a plan — a code, a severity, a JSON
//! pointer, a message and the offending value. Repair prompts, the CLI, the API and the review
//! page all render the same list.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Something was noted or fixed automatically.
    Info,
    /// The plan is usable, but something was changed or is doubtful.
    Warning,
    /// The step (or, without a step, the plan) cannot be used as is.
    Error,
}

/// What kind of finding a [`Diagnostic`] is. Serialised in snake_case (`unknown_tool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Code {
    /// The output holds no JSON, or JSON that could not be repaired.
    ParseError,
    /// The JSON is in no accepted plan shape.
    UnknownShape,
    /// A step is malformed (no recognisable action, a field of the wrong type).
    InvalidStep,
    /// The plan has no steps, questions or guidance.
    EmptyPlan,
    /// Two steps share an id.
    DuplicateStepId,
    /// A tool step names a tool that is not in the catalog.
    UnknownTool,
    /// An agent step names an agent that is not available.
    UnknownAgent,
    /// The optional triage call gave no usable decision; the request was planned.
    TriageFailed,
    /// Background investigation failed, timed out or was not configured; planning went on
    /// without findings.
    InvestigationFailed,
    /// A required argument is missing.
    MissingArgument,
    /// An argument the tool does not accept.
    UnknownArgument,
    /// An argument value does not match the tool's schema.
    InvalidArgument,
    /// `depends_on` names a step that does not exist (or the step itself).
    UnknownDependency,
    /// The dependencies form a cycle.
    Cycle,
    /// A `$ref` is malformed, names an unknown step, or a step that is not an ancestor.
    InvalidRef,
    /// A `$ref` path does not fit the referenced tool's output schema.
    RefTypeMismatch,
    /// A schedule is malformed.
    InvalidSchedule,
    /// A recurring schedule that the user has not confirmed.
    ScheduleUnconfirmed,
    /// The plan had more steps than `max_steps` and was cut.
    MaxStepsExceeded,
    /// A step was removed because it stayed invalid after repair.
    StepDropped,
    /// A step repeated an earlier one exactly (same action, arguments, dependencies and
    /// schedule) and was merged into it.
    DuplicateStep,
    /// Something was fixed automatically (a missing field inferred, a near-miss name).
    AutoFixed,
    /// A step needs approval by policy (e.g. a destructive tool).
    ApprovalRequired,
    /// The language model call failed.
    ModelError,
    /// The language model stopped at its token limit.
    Truncated,
    /// No tool the plan called fits the request (the fit check); the calls became a question.
    NoToolFits,
    /// Every call of the plan filled at least half of its tool's required arguments with
    /// values the request does not give (the fit check); the calls became a question.
    InventedArguments,
}

impl Code {
    /// The snake_case name of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::ParseError => "parse_error",
            Code::UnknownShape => "unknown_shape",
            Code::InvalidStep => "invalid_step",
            Code::EmptyPlan => "empty_plan",
            Code::DuplicateStepId => "duplicate_step_id",
            Code::UnknownTool => "unknown_tool",
            Code::UnknownAgent => "unknown_agent",
            Code::TriageFailed => "triage_failed",
            Code::InvestigationFailed => "investigation_failed",
            Code::MissingArgument => "missing_argument",
            Code::UnknownArgument => "unknown_argument",
            Code::InvalidArgument => "invalid_argument",
            Code::UnknownDependency => "unknown_dependency",
            Code::Cycle => "cycle",
            Code::InvalidRef => "invalid_ref",
            Code::RefTypeMismatch => "ref_type_mismatch",
            Code::InvalidSchedule => "invalid_schedule",
            Code::ScheduleUnconfirmed => "schedule_unconfirmed",
            Code::MaxStepsExceeded => "max_steps_exceeded",
            Code::StepDropped => "step_dropped",
            Code::DuplicateStep => "duplicate_step",
            Code::AutoFixed => "auto_fixed",
            Code::ApprovalRequired => "approval_required",
            Code::ModelError => "model_error",
            Code::Truncated => "truncated",
            Code::NoToolFits => "no_tool_fits",
            Code::InventedArguments => "invented_arguments",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding, with where it is (a JSON pointer into the plan document) and the offending value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Diagnostic {
    /// What kind of finding.
    pub code: Code,
    /// How bad.
    pub severity: Severity,
    /// JSON pointer into the plan document (`/steps/0/action/arguments/city`), or `""`.
    pub pointer: String,
    /// The step concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Human-readable message.
    pub message: String,
    /// The offending value, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

impl Diagnostic {
    /// An error-level diagnostic.
    pub fn error(code: Code, pointer: impl Into<String>, message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(code, Severity::Error, pointer, message)
    }

    /// A warning-level diagnostic.
    pub fn warning(
        code: Code,
        pointer: impl Into<String>,
        message: impl Into<String>,
    ) -> Diagnostic {
        Diagnostic::new(code, Severity::Warning, pointer, message)
    }

    /// An info-level diagnostic.
    pub fn info(code: Code, pointer: impl Into<String>, message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(code, Severity::Info, pointer, message)
    }

    fn new(
        code: Code,
        severity: Severity,
        pointer: impl Into<String>,
        message: impl Into<String>,
    ) -> Diagnostic {
        Diagnostic {
            code,
            severity,
            pointer: pointer.into(),
            step: None,
            message: message.into(),
            value: None,
        }
    }

    /// Sets the step concerned.
    pub fn with_step(mut self, step: impl Into<String>) -> Diagnostic {
        self.step = Some(step.into());
        self
    }

    /// Sets the offending value.
    pub fn with_value(mut self, value: Value) -> Diagnostic {
        self.value = Some(value);
        self
    }

    /// True for error-level diagnostics.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(f, "{severity}[{}]", self.code)?;
        if !self.pointer.is_empty() {
            write!(f, " at {}", self.pointer)?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(value) = &self.value {
            let mut text = value.to_string();
            if text.len() > 200 {
                let cut = (0..=200)
                    .rev()
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap_or(0);
                text.truncate(cut);
                text.push('…');
            }
            write!(f, " (got {text})")?;
        }
        Ok(())
    }
}
