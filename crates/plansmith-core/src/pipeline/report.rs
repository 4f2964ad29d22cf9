//! What a planning call returns and reports: its outcome, the diagnostics of everything it did,
//! the error when it ends without a plan, and the events it streams while it works.

use serde::{Deserialize, Serialize};

use crate::diagnostic::Diagnostic;
use crate::investigate::Investigation;
use crate::llm::{FinishReason, LlmError, Stages, Strategy, Usage};
use crate::memory::MemoryReport;
use crate::parse::SourceShape;
use crate::plan::{Plan, Step};
use crate::prompts::PromptError;
use crate::request::PlanFormat;

/// How a planning call ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum OutcomeStatus {
    /// A valid plan that can run.
    Ready,
    /// A valid plan that waits for answers (questions) or guidance to the user.
    NeedsInput,
    /// No valid plan could be had; the plan is the fallback the policy chose.
    Fallback {
        /// Why.
        reason: String,
    },
    /// A valid plan, but steps the model wrote could not be planned and were left out (and
    /// with them any reply, which spoke of the plan as written): it does not do all the
    /// request asked. It is never accepted without a person (`auto_accept` does not apply).
    Incomplete {
        /// What was left out, and why.
        reason: String,
        /// The ids of the steps left out (an unreadable step has none).
        dropped: Vec<String>,
    },
}

impl OutcomeStatus {
    /// The status as serialised: `ready`, `needs_input`, `fallback` or `incomplete`.
    pub fn name(&self) -> &'static str {
        match self {
            OutcomeStatus::Ready => "ready",
            OutcomeStatus::NeedsInput => "needs_input",
            OutcomeStatus::Fallback { .. } => "fallback",
            OutcomeStatus::Incomplete { .. } => "incomplete",
        }
    }
}

/// The result of one planning call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    /// How it ended.
    #[serde(flatten)]
    pub status: OutcomeStatus,
    /// The plan (for a fallback, the fallback plan).
    pub plan: Plan,
    /// Everything that happened on the way.
    pub diagnostics: Diagnostics,
}

/// How the request was routed before planning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Triage {
    /// Planned by the model.
    #[default]
    Planned,
    /// Handed to a passthrough agent as one task, without a model call.
    Passthrough,
    /// The target agent does not exist: guidance, without a model call.
    UnknownAgent,
    /// The triage call answered the request directly (one reply step).
    Answered,
    /// The triage call handed the whole request to a named agent (one agent task).
    HandedOff,
}

/// One generation and what came of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt {
    /// 0 for the first generation, then one per repair.
    pub index: u32,
    /// The raw model output (cut when huge).
    pub raw: String,
    /// Why generation stopped.
    pub finish: FinishReason,
    /// The shape recognised, if the output parsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<SourceShape>,
    /// Lenient JSON repair was needed.
    pub json_repaired: bool,
    /// What was found: parse errors, auto-fixes, validation problems.
    pub diagnostics: Vec<Diagnostic>,
    /// Tokens.
    pub usage: Usage,
    /// Time the model spent on the call (without [`Attempt::queue_ms`]).
    pub generate_ms: u64,
    /// Time the call waited for the model before it started (the embedded model decodes a few
    /// requests together, and a request waits for a free sequence).
    #[serde(default)]
    pub queue_ms: u64,
    /// Where the backend's time went, when it can tell (the embedded model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<Stages>,
}

/// Time spent per stage, in microseconds (summed over attempts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Timings {
    /// Tool selection.
    pub select_us: u64,
    /// Template rendering and schema building.
    pub render_us: u64,
    /// Model calls, without the time they waited for the model ([`Timings::queue_us`]).
    pub generate_us: u64,
    /// Time model calls waited before the model started on them: the embedded model decodes a
    /// few requests together, so under more concurrent requests this is where the time goes.
    #[serde(default)]
    pub queue_us: u64,
    /// Parsing.
    pub parse_us: u64,
    /// Validation.
    pub validate_us: u64,
    /// The fit check (scoring the request after the called tools' descriptions).
    #[serde(default)]
    pub fit_us: u64,
    /// The whole call.
    pub total_us: u64,
}

/// Everything a planning call did: attempts, strategy, repairs, findings, tokens, time.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Diagnostics {
    /// The model's name.
    pub model: String,
    /// The structured-output strategy used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// How the model wrote the plan (`json` or `calls`), when a model planned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<PlanFormat>,
    /// How the request was routed.
    pub triage: Triage,
    /// The triage call's reason for its decision (with `options.triage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triage_reason: Option<String>,
    /// What background investigation found (with `options.investigate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub investigation: Option<Investigation>,
    /// Tools shown to the model.
    pub selected_tools: Vec<String>,
    /// Every generation.
    pub attempts: Vec<Attempt>,
    /// Repair rounds used.
    pub repairs: u32,
    /// Findings about the returned plan (auto-fixes, dropped steps, questions asked).
    pub findings: Vec<Diagnostic>,
    /// The conversation memory shown to the model (when the request has earlier turns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryReport>,
    /// Tokens, summed.
    pub usage: Usage,
    /// Time per stage.
    pub timings: Timings,
}

/// A planning call that ended without a plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// No valid plan, and the fallback policy says to fail.
    #[error("planning failed: {reason}")]
    Failed {
        /// Why.
        reason: String,
        /// What happened.
        diagnostics: Box<Diagnostics>,
    },
    /// The model could not be called.
    #[error("model call failed: {source}")]
    Model {
        /// The cause.
        source: LlmError,
        /// What happened.
        diagnostics: Box<Diagnostics>,
    },
    /// A prompt template failed to render.
    #[error(transparent)]
    Prompt(#[from] PromptError),
    /// The request itself is unusable.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl PlanError {
    /// The diagnostics, when the call got far enough to have any.
    pub fn diagnostics(&self) -> Option<&Diagnostics> {
        match self {
            PlanError::Failed { diagnostics, .. } | PlanError::Model { diagnostics, .. } => {
                Some(diagnostics)
            }
            _ => None,
        }
    }
}

/// What [`Planner::plan_with_events`](super::Planner::plan_with_events) reports while it works.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum PlanEvent {
    /// A generation starts (0 first, then one per repair).
    AttemptStarted {
        /// The attempt.
        attempt: u32,
        /// The strategy asked for.
        strategy: Strategy,
    },
    /// Text (or tool-call argument text) as the model writes it.
    Token {
        /// The attempt.
        attempt: u32,
        /// The new text.
        text: String,
    },
    /// A step, as soon as the model finished writing it, parsed and validated against the
    /// catalog on its own (the final outcome may still drop or block it).
    Step {
        /// The attempt.
        attempt: u32,
        /// The step (boxed: it is much larger than the other events).
        step: Box<Step>,
        /// Findings about this step (errors mean it will be repaired, dropped or asked about).
        diagnostics: Vec<Diagnostic>,
    },
    /// The attempt's output was rejected; a repair prompt quoting these problems follows.
    Repair {
        /// The attempt that failed.
        attempt: u32,
        /// The problems quoted to the model.
        problems: Vec<String>,
    },
}

/// The event callback of [`Planner::plan_with_events`](super::Planner::plan_with_events).
pub type OnEvent<'a> = &'a mut (dyn FnMut(PlanEvent) + Send);
