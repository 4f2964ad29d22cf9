//! The tools' arguments, as their input schemas show them to clients.

use plansmith_core::PlanOptions;
use rmcp::schemars;
use serde::Deserialize;
use serde_json::Value;

/// Arguments of `plan`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanParams {
    /// The request to plan.
    pub query: String,
    /// System prompt / persona / constraints.
    #[serde(default)]
    pub profile: Option<String>,
    /// Background context (documents, findings, business knowledge).
    #[serde(default)]
    pub context: Vec<String>,
    /// Locale of user-facing texts (default en-US).
    #[serde(default)]
    pub locale: Option<String>,
    /// Most steps in the plan (default 8; `options.max_steps` too, this one wins).
    #[serde(default)]
    pub max_steps: Option<usize>,
    /// Conversation the plan belongs to.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Thread the plan belongs to.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// Agent the request is addressed to (a passthrough agent gets it without planning).
    #[serde(default)]
    pub target_agent: Option<String>,
    /// The current time as the user sees it (RFC 3339; default now).
    #[serde(default)]
    pub now: Option<chrono::DateTime<chrono::Utc>>,
    /// The planning options, as `POST /v1/plans` takes them (shape, format, fallback, top_k,
    /// pinned_tools, max_repairs, triage, investigate, …); each left out keeps its default.
    #[serde(default)]
    pub options: Option<PlanOptions>,
    /// The caller's tools, in any catalog form (an MCP `tools/list` result, a list of MCP
    /// tools, OpenAI `tools`, a name → tool map); without it, the server's catalog. The plan
    /// keeps this catalog for its replans and runs.
    #[serde(default)]
    pub tools: Option<Value>,
    /// The caller's agent cards (a list, or `{"agents": [...]}`).
    #[serde(default)]
    pub agents: Option<Value>,
    /// Store the plan for review (default true).
    #[serde(default)]
    pub save: Option<bool>,
    /// Accept the plan without review (questions still wait for answers).
    #[serde(default)]
    pub auto_accept: bool,
    /// Review rounds before the policy applies (default 3).
    #[serde(default)]
    pub max_iterations: Option<u32>,
    /// Earlier turns of the conversation as chat messages (`[{"role": "user", "content":
    /// "…"}, …]`), sent to the model as they are, as `POST /v1/plans` takes them.
    #[serde(default)]
    pub history: Option<Value>,
    /// Earlier planning turns of the conversation, oldest first (`[{"query": "…", "plan":
    /// "…"}, …]`, as `POST /v1/plans` takes them): the planner shows the recent ones and a
    /// summary of the older ones within the memory options.
    #[serde(default)]
    pub turns: Option<Value>,
    /// For a replan: the previous plan and what was said or observed about it (`{"previous":
    /// plan, "text": "…", "observations": […]}`, as `POST /v1/plans` takes it).
    #[serde(default)]
    pub feedback: Option<Value>,
}

/// The PlanningTool commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanningCommand {
    /// New plan from a title and step texts.
    Create,
    /// New title and/or steps (unchanged steps keep their status and notes).
    Update,
    /// Every plan.
    List,
    /// One plan (the active one without plan_id).
    Get,
    /// Make a plan the conversation's active plan.
    SetActive,
    /// Set a step's status and/or notes.
    MarkStep,
    /// Delete a plan.
    Delete,
}

/// Arguments of `planning` (OpenManus's PlanningTool).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanningParams {
    /// The command.
    pub command: PlanningCommand,
    /// The plan (required for create, update, set_active, delete; get and mark_step default to
    /// the active plan).
    #[serde(default)]
    pub plan_id: Option<String>,
    /// Plan title (create, update).
    #[serde(default)]
    pub title: Option<String>,
    /// Step texts (create, update).
    #[serde(default)]
    pub steps: Option<Vec<String>>,
    /// 0-based step index (mark_step), the number this tool's plan text shows the step under.
    #[serde(default)]
    pub step_index: Option<usize>,
    /// not_started, in_progress, completed, blocked, failed, skipped (mark_step).
    #[serde(default)]
    pub step_status: Option<String>,
    /// Notes for the step (mark_step).
    #[serde(default)]
    pub step_notes: Option<String>,
    /// Conversation whose active plan get / set_active / mark_step use (default "default").
    #[serde(default)]
    pub conversation_id: Option<String>,
}

/// What a person says about a stored plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackAction {
    /// Accept it as it is.
    Accept,
    /// Free-text feedback: replan with it.
    Edit,
    /// Answers to the plan's questions: replan with them.
    Answer,
    /// Reject it (text: the reason).
    Reject,
    /// A structured edit: `patch` (RFC 6902 JSON Patch), re-validated against the plan's
    /// catalog.
    Patch,
    /// A decision about one step of a running plan: `step` and `verdict` (approve / deny a
    /// gated step, retry / skip / abort after a failure); a run waiting for it goes on.
    Step,
}

/// Arguments of `feedback`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackParams {
    /// The plan.
    pub plan_id: String,
    /// accept, edit, answer, reject, patch or step.
    pub action: FeedbackAction,
    /// The feedback (edit), the answers (answer), the reason (reject) or a note (step).
    #[serde(default)]
    pub text: Option<String>,
    /// The JSON Patch operations (patch).
    #[serde(default)]
    pub patch: Option<Value>,
    /// The step id (step), or `all`: every approval the run waits for.
    #[serde(default)]
    pub step: Option<String>,
    /// approve, deny, retry, skip or abort (step).
    #[serde(default)]
    pub verdict: Option<String>,
    /// How far an approval reaches (step, with approve): run (this step in this run, the
    /// default), plan (this tool in every run of this plan) or call (this tool with exactly
    /// these arguments, in any plan).
    #[serde(default)]
    pub remember: Option<String>,
    /// Apply only if the plan is still at this version, the one the reviewer read (else the
    /// call fails and nothing changes).
    #[serde(default)]
    pub expected_version: Option<u32>,
}

/// The template commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TemplatesCommand {
    /// Every template (newest version of each).
    List,
    /// One template (newest version, or `version`).
    Get,
    /// Save a stored plan (plan_id) as the next version of template `name`.
    Save,
    /// Delete a template (every version, or `version`).
    Delete,
    /// Make a plan from a template with `arguments`, validated against the catalog.
    Instantiate,
}

/// One parameter of a template being saved.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateParamSpec {
    /// The name used in `{{name}}`.
    pub name: String,
    /// Text of the plan that becomes `{{name}}` (optional when the plan already has it).
    #[serde(default)]
    pub literal: Option<String>,
    /// What the value is.
    #[serde(default)]
    pub description: Option<String>,
    /// Value used when instantiation gives none (without it the parameter is required).
    #[serde(default)]
    pub default: Option<String>,
}

/// Arguments of `templates`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplatesParams {
    /// The command.
    pub command: TemplatesCommand,
    /// Template name (all but list).
    #[serde(default)]
    pub name: Option<String>,
    /// A version (get, delete, instantiate; default: the newest / all for delete).
    #[serde(default)]
    pub version: Option<u32>,
    /// What the template is for (save).
    #[serde(default)]
    pub description: Option<String>,
    /// The stored plan to save as a template (save).
    #[serde(default)]
    pub plan_id: Option<String>,
    /// The template's parameters (save).
    #[serde(default)]
    pub parameters: Vec<TemplateParamSpec>,
    /// Parameter values (instantiate).
    #[serde(default)]
    pub arguments: std::collections::BTreeMap<String, String>,
    /// Conversation of the instantiated plan.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Validation options of the instantiated plan (`max_steps`, `allow_recurring`, …), as
    /// `POST /v1/templates/{name}/instantiate` takes them; each left out keeps its default.
    #[serde(default)]
    pub options: Option<PlanOptions>,
    /// Store the instantiated plan for review (default true).
    #[serde(default)]
    pub save: Option<bool>,
}

/// Arguments of `run`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// The plan to run (accepted).
    pub plan_id: String,
    /// Continue the plan's unfinished run instead of starting one.
    #[serde(default)]
    pub resume: bool,
    /// Caps of a new run, over the server's: `{"max_tool_calls", "max_tokens", "max_seconds",
    /// "max_replans", "on_cap": "finish" | "cancel"}`. Not with `resume`.
    #[serde(default)]
    pub budget: Option<Value>,
    /// Follow the run to its end before answering (`true`), or answer at once (`false`). By
    /// default a client that takes elicitation waits, and is asked each approval the run
    /// waits for; another answers at once.
    #[serde(default)]
    pub wait: Option<bool>,
}
