//! What a planning call takes: [`PlanRequest`] with its [`PlanOptions`], history and feedback.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::diagnostic::Diagnostic;
use crate::llm::Message;
use crate::plan::MAX_PLAN_STEPS;
use crate::plan::Plan;

/// The default bound on free strings (`PlanOptions::max_string_length`).
pub const DEFAULT_TEXT_MAX: u32 = 1000;

/// One planning request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanRequest {
    /// The user's request.
    pub query: String,
    /// System prompt, persona or constraints of the calling agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Earlier turns of the conversation, as messages (sent as they are).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    /// Earlier planning turns of the conversation, oldest first (conversation memory): the
    /// planner turns them into history messages within [`PlanOptions::memory_turns`] and
    /// [`PlanOptions::memory_tokens`], folding older ones into a summary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<crate::memory::Turn>,
    /// Background findings, documents, business knowledge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<String>,
    /// Locale of the user-facing texts; default `en-US`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    /// The current time as the user sees it; default now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<DateTime<Utc>>,
    /// Agent the request is addressed to (ValueCell); a passthrough agent gets it without planning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_agent: Option<String>,
    /// For replanning: the previous plan and what was said or observed about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<Feedback>,
    /// Owner (user or tenant) to record on the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Conversation id to record on the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Thread id to record on the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// Knobs.
    #[serde(default)]
    pub options: PlanOptions,
}

impl PlanRequest {
    /// A request with default options.
    pub fn new(query: impl Into<String>) -> PlanRequest {
        PlanRequest {
            query: query.into(),
            ..PlanRequest::default()
        }
    }

    /// The locale, or `en-US`.
    pub fn locale(&self) -> &str {
        self.locale
            .as_deref()
            .filter(|l| !l.trim().is_empty())
            .unwrap_or("en-US")
    }

    /// What makes the request unplannable, in words for its sender: an empty query, a previous
    /// plan longer than any plan may be ([`MAX_PLAN_STEPS`]), or a
    /// `locale` that is not a well-formed language tag (BCP 47, as Unicode locale identifiers
    /// write it: `en-US`, `zh-Hans-CN`, `de-CH-u-co-phonebk`). The locale only reaches the
    /// prompt and the plan, so a typo there would otherwise plan in the wrong language without
    /// a word. Whether the language exists is not checked.
    pub fn problem(&self) -> Option<String> {
        if self.query.trim().is_empty() {
            return Some("the query is empty".to_owned());
        }
        let previous = self.feedback.as_ref().and_then(|f| f.previous.as_ref());
        if let Some(steps) = previous
            .map(|p| p.steps.len())
            .filter(|n| *n > MAX_PLAN_STEPS)
        {
            return Some(format!(
                "`feedback.previous` lists {steps} steps; a plan may hold at most {MAX_PLAN_STEPS}"
            ));
        }
        let locale = self.locale.as_deref().filter(|l| !l.trim().is_empty())?;
        match icu_locale_core::Locale::try_from_str(locale) {
            Ok(_) => None,
            Err(_) => Some(format!(
                "`locale` {locale:?} is not a language tag: write it as in BCP 47, such as \
                 `en-US` or `zh-CN`, or leave it out for `en-US`"
            )),
        }
    }
}

/// Feedback for replanning.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Feedback {
    /// The plan being revised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Plan>,
    /// What the person said (an edit request, answers to questions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Validation problems of the previous plan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
    /// Observations from running the previous plan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observations: Vec<String>,
}

/// Which plan shape the model is asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Tool calls with arguments and dependencies (SAGE, LLMCompiler).
    #[default]
    ToolSteps,
    /// Research and processing steps (deer-flow).
    Research,
    /// Natural-language tasks for agents, with schedules (ValueCell).
    AgentTasks,
}

impl Shape {
    /// All shapes.
    pub const ALL: [Shape; 3] = [Shape::ToolSteps, Shape::Research, Shape::AgentTasks];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::ToolSteps => "tool_steps",
            Shape::Research => "research",
            Shape::AgentTasks => "agent_tasks",
        }
    }
}

impl std::str::FromStr for Shape {
    type Err = String;

    fn from_str(s: &str) -> Result<Shape, String> {
        let wanted = s.replace('-', "_");
        Shape::ALL
            .into_iter()
            .find(|shape| shape.as_str() == wanted)
            .ok_or_else(|| {
                format!("unknown shape `{s}`; expected tool_steps, research or agent_tasks")
            })
    }
}

/// How the model writes a `tool_steps` plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PlanFormat {
    /// `calls` on a model with constrained decoding (the embedded model) when the catalog has
    /// no agents, else `json`.
    #[default]
    Auto,
    /// One JSON plan document (`{"thought", "title", "steps": [...]}`), constrained by the
    /// plan's JSON Schema.
    Json,
    /// The model's own tool-calling format (`<tool_call>{"name", "arguments"}</tool_call>`,
    /// one per step, or plain text for a reply): see [`crate::calls`].
    Calls,
}

impl PlanFormat {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanFormat::Auto => "auto",
            PlanFormat::Json => "json",
            PlanFormat::Calls => "calls",
        }
    }
}

impl std::str::FromStr for PlanFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<PlanFormat, String> {
        match text {
            "auto" => Ok(PlanFormat::Auto),
            "json" => Ok(PlanFormat::Json),
            "calls" => Ok(PlanFormat::Calls),
            other => Err(format!(
                "unknown plan format `{other}`: use auto, json or calls"
            )),
        }
    }
}

/// What to return when no valid plan could be had.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FallbackPolicy {
    /// A plan whose guidance tells the user what went wrong (ValueCell).
    #[default]
    Guidance,
    /// A plan with one reply step (SAGE); `text` defaults to a localised "plan unavailable".
    Reply {
        /// The reply text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// A default three-step plan "Plan for: …" (OpenManus).
    DefaultPlan,
    /// On the first iteration, fail; on later ones, keep the previous plan (deer-flow).
    PreviousOrFail,
    /// Fail with the diagnostics (Spring AI Alibaba's attempt cap).
    Fail,
}

impl FallbackPolicy {
    /// The policy's name, as its `kind` in JSON (`guidance`, `reply`, `default_plan`,
    /// `previous_or_fail`, `fail`).
    pub fn name(&self) -> &'static str {
        match self {
            FallbackPolicy::Guidance => "guidance",
            FallbackPolicy::Reply { .. } => "reply",
            FallbackPolicy::DefaultPlan => "default_plan",
            FallbackPolicy::PreviousOrFail => "previous_or_fail",
            FallbackPolicy::Fail => "fail",
        }
    }
}

/// Knobs of one planning call.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(default)]
#[non_exhaustive]
pub struct PlanOptions {
    /// At most this many steps (the closing reply is kept when cutting).
    pub max_steps: usize,
    /// How many tools go into the prompt; validation always uses the full catalog.
    pub top_k: usize,
    /// Tools always included in the prompt.
    pub pinned_tools: Vec<String>,
    /// Repair rounds after the first generation.
    pub max_repairs: u32,
    /// Which iteration of a review loop this call is (0 = first plan).
    pub iteration: u32,
    /// The plan shape asked of the model.
    pub shape: Shape,
    /// How the model writes a `tool_steps` plan (other shapes are always JSON).
    pub format: PlanFormat,
    /// What to return when no valid plan could be had.
    pub fallback: FallbackPolicy,
    /// The user confirmed recurring schedules; without it they become a question.
    pub allow_recurring: bool,
    /// Longest free string in the model-facing schema (bounds decoding).
    pub max_string_length: u32,
    /// Token cap for one generation.
    pub max_tokens: u32,
    /// Ask the model first whether to answer directly, hand the request to a named agent, or
    /// plan (ValueCell's super-agent); the decision and its reason go into the diagnostics.
    pub triage: bool,
    /// Run the planner's background investigator with the query first and put what it finds
    /// into the planning context (see [`crate::investigate`]).
    pub investigate: bool,
    /// Time the investigator may take, in milliseconds.
    pub investigation_budget_ms: u64,
    /// Characters of findings that go into the prompt (the rest is cut).
    pub max_findings_chars: usize,
    /// Most earlier turns of the conversation ([`PlanRequest::turns`]) shown in full.
    pub memory_turns: usize,
    /// Token budget (estimated as characters / 4) for the earlier turns; older turns are folded
    /// into one summary message.
    pub memory_tokens: usize,
    /// Check that some tool the plan calls fits the request, with a model that scores text
    /// (the embedded one), and that the calls do not guess half of their required values (any
    /// model); when either fails, the person is asked instead of the calls being returned (see
    /// the pipeline's fit check).
    pub check_fit: bool,
    /// Do not wait for answers: the plan's questions that have a recommended answer are
    /// answered with it (one replan), and the plan records each in `metadata.assumptions`.
    /// Questions without one are still asked.
    pub no_questions: bool,
}

impl Default for PlanOptions {
    fn default() -> PlanOptions {
        PlanOptions {
            max_steps: 8,
            top_k: 8,
            pinned_tools: Vec::new(),
            max_repairs: 2,
            iteration: 0,
            shape: Shape::ToolSteps,
            format: PlanFormat::Auto,
            fallback: FallbackPolicy::Guidance,
            allow_recurring: false,
            max_string_length: DEFAULT_TEXT_MAX,
            max_tokens: 2048,
            triage: false,
            investigate: false,
            investigation_budget_ms: 10_000,
            max_findings_chars: 4_000,
            memory_turns: 6,
            memory_tokens: 1_500,
            check_fit: true,
            no_questions: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Feedback, MAX_PLAN_STEPS, PlanRequest};

    fn with_locale(locale: &str) -> PlanRequest {
        PlanRequest {
            locale: Some(locale.to_owned()),
            ..PlanRequest::new("Weather in Paris?")
        }
    }

    #[test]
    fn language_tags_pass_and_others_are_named() {
        for tag in [
            "en-US",
            "zh-CN",
            "zh-Hans-CN",
            "de-CH-u-co-phonebk",
            "fr",
            "EN-us",
            "",
        ] {
            assert_eq!(with_locale(tag).problem(), None, "{tag}");
        }
        for bad in ["xx-invalid-!!", "english", "en US", "en-", "-US", "12-34"] {
            let problem = with_locale(bad).problem();
            let text = problem.as_deref().unwrap_or_default();
            assert!(
                text.starts_with(&format!("`locale` {bad:?} is not a language tag")),
                "{bad}: {problem:?}"
            );
        }
        assert_eq!(
            PlanRequest::new("  ").problem().as_deref(),
            Some("the query is empty")
        );
        let mut replan = PlanRequest::new("shorter, please");
        let mut previous = crate::Plan::new("plan-1", "long");
        previous.steps = (0..=MAX_PLAN_STEPS)
            .map(|i| {
                crate::Step::new(
                    format!("s{i}"),
                    "t",
                    crate::Action::Reply { text: "ok".into() },
                )
            })
            .collect();
        replan.feedback = Some(Feedback {
            previous: Some(previous),
            ..Feedback::default()
        });
        let problem = replan.problem().unwrap_or_default();
        assert!(problem.contains("lists 501 steps"), "{problem}");
    }
}
