//! plansmith as an MCP server: the tools `plan`, `planning` and `feedback`.
//!
//! - `plan`: a request (query, profile, context, locale, conversation, thread, time, target
//!   agent, the planning `options` as `POST /v1/plans` takes them, and optionally the caller's
//!   own `tools` and `agents`) → the outcome (`ready` / `needs_input` / `fallback`), the plan
//!   with its questions, and the diagnostics (findings, attempts, repairs, strategy). A plan
//!   made with the caller's tools keeps them for its replans and runs. The plan is stored for review unless
//!   `save: false`, so `feedback` and `planning` can reach it by id. Planning reports its
//!   progress to a client that sends a progress token. Any tool call ends when its client
//!   cancels it.
//! - `planning`: OpenManus's PlanningTool, one command for one: `create` (plan_id, title,
//!   steps), `update`, `list`, `get` (the conversation's active plan without plan_id),
//!   `set_active`, `mark_step` (step_index, step_status, step_notes), `delete`, with its error
//!   cases; the answer is the text rendering (`Progress: 1/3 (33.3%)`, `[✓] [→] [!] [ ]`).
//! - `feedback`: `accept`, `edit` (free text → replan), `answer` (answers to the questions →
//!   replan), `reject`.
//! - `templates`: plan templates in the store: `list`, `get`, `save` (a stored plan with
//!   `{{param}}` parameters), `delete`, `instantiate` (arguments → a new plan, validated
//!   against the catalog and stored for review). Templates are shared by all owners.
//!
//! Every answer carries `structuredContent` (the JSON) and a text block; a failure is a tool
//! result with `isError: true` and a message naming what is wrong, never a protocol error.
//! Arguments a tool does not take (a misspelt `max_step`) are refused by name, as the HTTP API
//! refuses them: the call's answer is an invalid-params error naming the field.
//!
//! Over streamable HTTP, [`http_service`] checks bearer tokens (when configured) and each call
//! acts for the token's owner: plans of other owners answer "no plan with id …".

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use plansmith_core::parse::{ParseDefaults, to_plan};
use plansmith_core::pipeline::OnEvent;
use plansmith_core::plan_template::{PlanTemplate, TemplateParameter};
use plansmith_core::{OutcomeStatus, PlanEvent, PlanOptions, PlanRequest, Severity};
use plansmith_service::{Decision, Planned, Service, ServiceError};
use plansmith_store::{ListFilter, PlanStore, Review, StepKey, StoreError, StoredPlan};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ProgressNotificationParam, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::ServeError;

/// The plansmith MCP server: the tools over a [`Service`]. Cheap to clone.
#[derive(Clone)]
pub struct PlansmithMcp {
    service: Service,
    actor: String,
    tool_router: ToolRouter<PlansmithMcp>,
}

impl std::fmt::Debug for PlansmithMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlansmithMcp")
            .field("actor", &self.actor)
            .finish_non_exhaustive()
    }
}

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
    /// The step id (step).
    #[serde(default)]
    pub step: Option<String>,
    /// approve, deny, retry, skip or abort (step).
    #[serde(default)]
    pub verdict: Option<String>,
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
    /// Store the instantiated plan for review (default true).
    #[serde(default)]
    pub save: Option<bool>,
}

/// Header that carries the caller's owner from the HTTP layer to the tools (set by
/// [`http_service`] from the bearer token; a client-sent value is always replaced or removed).
const OWNER_HEADER: &str = "x-plansmith-owner";
/// Conversation of OpenManus's single active plan.
const DEFAULT_CONVERSATION: &str = "default";

type ToolAnswer = Result<CallToolResult, rmcp::ErrorData>;

/// Plans `request` for an MCP client. A client that asked for progress (a `progressToken`)
/// hears how it goes: each attempt, each step as it is written, each repair, and the text
/// written so far at most four times a second in between. That also keeps alive a call whose
/// timeout restarts on progress (slow local planning). (A cancelled call stops planning with
/// every other tool call: see `call_tool`.)
async fn plan_for(
    service: &Service,
    (tools, agents): (Option<&Value>, Option<&Value>),
    request: &PlanRequest,
    context: &RequestContext<RoleServer>,
) -> Result<Planned, ServiceError> {
    let Some(token) = context.meta.get_progress_token() else {
        return service.plan(request, tools, agents, None).await;
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PlanEvent>();
    let mut on_event = move |event: PlanEvent| {
        let _ = tx.send(event);
    };
    let on_event: OnEvent<'_> = &mut on_event;
    let planning = service.plan(request, tools, agents, Some(on_event));
    let peer = context.peer.clone();
    let report = async move {
        let mut count = 0u32;
        let mut written = 0usize;
        let mut last: Option<std::time::Instant> = None;
        while let Some(event) = rx.recv().await {
            count += 1;
            let message = match event {
                PlanEvent::AttemptStarted { attempt, .. } => format!("attempt {}", attempt + 1),
                PlanEvent::Step { step, .. } => format!("step {}: {}", step.id, step.title),
                PlanEvent::Repair { problems, .. } => {
                    format!("repairing: {}", problems.join("; "))
                }
                PlanEvent::Token { text, .. } => {
                    written += text.chars().count();
                    if last.is_some_and(|at| at.elapsed() < PROGRESS_EVERY) {
                        continue;
                    }
                    format!("writing ({written} characters)")
                }
            };
            last = Some(std::time::Instant::now());
            let mut progress = ProgressNotificationParam::new(token.clone(), f64::from(count));
            progress.message = Some(message);
            // A client that went away is the cancellation's business.
            let _ = peer.notify_progress(progress).await;
        }
    };
    // The callback lives as long as `planning`, so `report` never ends first.
    tokio::pin!(planning);
    tokio::select! {
        outcome = &mut planning => outcome,
        () = report => planning.await,
    }
}

/// At most one "writing" progress notification this often while the model writes.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// A successful answer: the JSON as structured content, and a text block.
fn answer(value: Value, text: String) -> ToolAnswer {
    let mut result = CallToolResult::structured(value);
    result.content = vec![ContentBlock::text(text)];
    Ok(result)
}

/// The answer to a command's outcome: its JSON and text, or its error message.
fn respond(outcome: Result<(Value, String), String>) -> ToolAnswer {
    match outcome {
        Ok((value, text)) => answer(value, text),
        Err(message) => failure(message),
    }
}

/// A failed call the caller can read (`isError: true`).
fn failure(message: impl Into<String>) -> ToolAnswer {
    Ok(CallToolResult::error(vec![ContentBlock::text(
        message.into(),
    )]))
}

fn stored_json(stored: &StoredPlan) -> Value {
    serde_json::to_value(stored).unwrap_or(Value::Null)
}

/// The caller's owner over HTTP with tokens; `None` on stdio or without tokens.
fn owner_of(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.headers.get(OWNER_HEADER))
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

#[tool_router]
impl PlansmithMcp {
    /// A server over `service` (shared with an HTTP API in the same process, so that the
    /// catalogs callers send are built once and a step decision resumes its waiting run at
    /// once: [`Service::with_on_decided`]); `actor` is recorded in the plans' history.
    pub fn new(service: Service, actor: impl Into<String>) -> PlansmithMcp {
        PlansmithMcp {
            service,
            actor: actor.into(),
            tool_router: PlansmithMcp::tool_router(),
        }
    }

    fn store(&self) -> &PlanStore {
        self.service.store()
    }

    fn actor_for(&self, owner: &Option<String>) -> String {
        owner.clone().unwrap_or_else(|| self.actor.clone())
    }

    /// The plan, if the caller may see it (another owner's plan is "not found").
    async fn visible(&self, id: &str, owner: &Option<String>) -> Result<StoredPlan, StoreError> {
        let stored = self.store().get(id).await?;
        match owner {
            Some(owner) if stored.plan.owner.as_deref() != Some(owner.as_str()) => {
                Err(StoreError::NotFound(id.to_owned()))
            }
            _ => Ok(stored),
        }
    }

    #[tool(
        description = "Plan a request: returns a validated plan of tool calls / tasks, or the questions to ask the user first, with diagnostics. The plan is stored for review (use `feedback` and `planning` with its id) unless save is false.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn plan(
        &self,
        Parameters(params): Parameters<PlanParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolAnswer {
        if params.query.trim().is_empty() {
            return failure("`query` is empty");
        }
        let owner = owner_of(&context);
        let mut request = PlanRequest::new(params.query);
        request.profile = params.profile;
        request.context = params.context;
        request.locale = params.locale;
        request.conversation_id = params.conversation_id;
        request.thread_id = params.thread_id;
        request.target_agent = params.target_agent;
        request.now = params.now;
        request.owner = owner.clone();
        request.options = params.options.unwrap_or_default();
        if let Some(max_steps) = params.max_steps {
            request.options.max_steps = max_steps;
        }
        if let Some(problem) = request.problem() {
            return failure(problem);
        }
        let mut review = Review {
            auto_accept: params.auto_accept,
            ..Review::default()
        };
        if let Some(max) = params.max_iterations {
            review.max_iterations = max;
        }
        let planned = match plan_for(
            &self.service,
            (params.tools.as_ref(), params.agents.as_ref()),
            &request,
            &context,
        )
        .await
        {
            Ok(planned) => planned,
            Err(err @ ServiceError::Store(_)) => return failure(err.to_string()),
            Err(err) => return failure(format!("planning failed: {err}")),
        };
        let outcome = planned.outcome.clone();
        let stored = if params.save.unwrap_or(true) {
            match self
                .service
                .submit(planned, &request, review, &self.actor_for(&owner))
                .await
            {
                Ok(submitted) => Some(submitted.stored),
                Err(err) => return failure(format!("the plan could not be stored: {err}")),
            }
        } else {
            None
        };
        let plan = stored.as_ref().map_or(&outcome.plan, |s| &s.plan);
        let diagnostics = &outcome.diagnostics;
        let status = outcome.status.name();
        // What the text says of a plan that is not as asked, and why.
        let (label, reason) = match &outcome.status {
            OutcomeStatus::Fallback { reason } => ("Fallback", Some(reason.clone())),
            OutcomeStatus::Incomplete { reason, .. } => ("Incomplete", Some(reason.clone())),
            _ => ("", None),
        };
        let value = json!({
            "status": status,
            "reason": reason,
            "plan_id": plan.id,
            "state": stored.as_ref().map(|s| s.state.as_str()),
            "plan": plan,
            "questions": plan.questions,
            "needs_approval": plan.steps.iter().filter(|s| s.requires_approval).map(|s| s.id.clone()).collect::<Vec<_>>(),
            "diagnostics": {
                "findings": diagnostics.findings,
                "attempts": diagnostics.attempts.len(),
                "repairs": diagnostics.repairs,
                "strategy": diagnostics.strategy.map(|s| s.as_str()),
                "model": diagnostics.model,
                "total_ms": diagnostics.timings.total_us / 1000,
            },
        });
        let mut text = format!("{status}: plan `{}`\n{}", plan.id, plan.render_text());
        for question in &plan.questions {
            text.push_str(&format!("Question {}: {}\n", question.id, question.text));
        }
        for finding in diagnostics
            .findings
            .iter()
            .filter(|d| d.severity >= Severity::Warning)
        {
            text.push_str(&format!("{finding}\n"));
        }
        if let Some(reason) = reason {
            text.push_str(&format!("{label}: {reason}\n"));
        }
        answer(value, text)
    }

    #[tool(
        description = "Manage stored plans (OpenManus PlanningTool). Commands: create (plan_id, title, steps), update (plan_id, title?, steps?), list, get (plan_id, or the active plan), set_active (plan_id), mark_step (plan_id or active, step_index, step_status, step_notes), delete (plan_id).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn planning(
        &self,
        Parameters(params): Parameters<PlanningParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolAnswer {
        let owner = owner_of(&context);
        respond(self.planning_command(params, &owner).await)
    }

    #[tool(
        description = "Review a stored plan: accept it, edit it with free-text feedback (replans), answer its questions (replans), reject it, patch it (a JSON Patch, re-validated), or decide about a step of its run (step + verdict: approve, deny, retry, skip, abort; a run waiting for it goes on).",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn feedback(
        &self,
        Parameters(params): Parameters<FeedbackParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolAnswer {
        let owner = owner_of(&context);
        let current = match self.visible(&params.plan_id, &owner).await {
            Ok(current) => current,
            Err(err) => return failure(err.to_string()),
        };
        let text = params.text.unwrap_or_default();
        let actor = self.actor_for(&owner);
        let decision = match params.action {
            FeedbackAction::Patch => match params.patch {
                Some(patch) => Decision::Patch(patch),
                None => return failure("`patch` (JSON Patch operations) is required for patch"),
            },
            FeedbackAction::Step => {
                let Some(step) = params.step.filter(|s| !s.trim().is_empty()) else {
                    return failure("`step` (the step id) is required for step");
                };
                match params
                    .verdict
                    .unwrap_or_default()
                    .parse::<plansmith_store::StepVerdict>()
                {
                    Ok(verdict) => Decision::Step {
                        step,
                        verdict,
                        note: text,
                    },
                    Err(err) => return failure(format!("`verdict` for step: {err}")),
                }
            }
            FeedbackAction::Accept => Decision::Accept,
            FeedbackAction::Reject => Decision::Reject(Some(text).filter(|t| !t.trim().is_empty())),
            FeedbackAction::Edit | FeedbackAction::Answer if text.trim().is_empty() => {
                return failure("`text` is required for edit and answer");
            }
            FeedbackAction::Edit => Decision::Edit(text),
            FeedbackAction::Answer => Decision::Answer(text),
        };
        let step = match &decision {
            Decision::Step { step, verdict, .. } => Some((step.clone(), *verdict)),
            _ => None,
        };
        let decided = match self
            .service
            .decide(
                &current.plan.id,
                decision,
                params.expected_version,
                &actor,
                None,
            )
            .await
        {
            Ok(decided) => decided,
            Err(err) => return failure(err.to_string()),
        };
        match (step, decided.step_decision) {
            (Some((step, verdict)), Some(step_decision)) => {
                let plan_id = &current.plan.id;
                let applies = serde_json::to_value(step_decision.applies).unwrap_or(Value::Null);
                let text = format!(
                    "Step {step} of plan {plan_id}: {} (applies: {})",
                    verdict.as_str(),
                    applies.as_str().unwrap_or_default()
                );
                answer(
                    json!({"plan_id": plan_id, "step_decision": step_decision}),
                    text,
                )
            }
            _ => {
                let mut value = stored_json(&decided.stored);
                if matches!(params.action, FeedbackAction::Patch) {
                    value["diagnostics"] = json!(decided.diagnostics);
                }
                answer(value, decided.stored.render_text())
            }
        }
    }

    #[tool(
        description = "Plan templates: list, get (name, version?), save (a stored plan_id as template `name`, with parameters [{name, literal?, description?, default?}]), delete (name, version?), instantiate (name, arguments {param: value}) into a new plan validated against the catalog and stored for review.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn templates(
        &self,
        Parameters(params): Parameters<TemplatesParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolAnswer {
        let owner = owner_of(&context);
        respond(self.templates_command(params, &owner).await)
    }
}

impl PlansmithMcp {
    async fn templates_command(
        &self,
        params: TemplatesParams,
        owner: &Option<String>,
    ) -> Result<(Value, String), String> {
        let err = |err: StoreError| err.to_string();
        let name = || {
            params
                .name
                .clone()
                .filter(|n| !n.trim().is_empty())
                .ok_or_else(|| "Parameter `name` is required for this command".to_owned())
        };
        match params.command {
            TemplatesCommand::List => {
                let entries = self.store().list_templates().await.map_err(err)?;
                let mut text = String::new();
                for entry in &entries {
                    let t = &entry.latest;
                    let names: Vec<&str> = t.parameters.iter().map(|p| p.name.as_str()).collect();
                    text.push_str(&format!(
                        "{} v{} [{}] {}\n",
                        t.name,
                        t.version,
                        names.join(", "),
                        t.description
                    ));
                }
                if entries.is_empty() {
                    text.push_str("No templates.");
                }
                let list: Vec<Value> = entries
                    .iter()
                    .map(|e| {
                        json!({"name": e.latest.name, "version": e.latest.version,
                        "versions": e.versions, "description": e.latest.description,
                        "parameters": e.latest.parameters})
                    })
                    .collect();
                Ok((json!({ "templates": list }), text))
            }
            TemplatesCommand::Get => {
                let template = self
                    .store()
                    .get_template(&name()?, params.version)
                    .await
                    .map_err(err)?;
                let text = format!(
                    "Template {} v{}\n{}",
                    template.name,
                    template.version,
                    template.plan.render_text()
                );
                Ok((serde_json::to_value(&template).unwrap_or(Value::Null), text))
            }
            TemplatesCommand::Save => {
                let name = name()?;
                let plan_id = params
                    .plan_id
                    .clone()
                    .ok_or("Parameter `plan_id` is required for command: save")?;
                let stored = self.visible(&plan_id, owner).await.map_err(err)?;
                let literals: Vec<(String, String)> = params
                    .parameters
                    .iter()
                    .filter_map(|p| p.literal.clone().map(|l| (p.name.clone(), l)))
                    .collect();
                let parameters = params
                    .parameters
                    .iter()
                    .map(|p| {
                        let mut parameter = TemplateParameter::new(p.name.clone());
                        parameter.description = p.description.clone().unwrap_or_default();
                        parameter.default = p.default.clone();
                        parameter
                    })
                    .collect();
                let plan = PlanTemplate::parameterize(&stored.plan, &literals);
                let template = PlanTemplate::new(
                    &name,
                    params.description.as_deref().unwrap_or_default(),
                    plan,
                    parameters,
                )
                .map_err(|e| e.to_string())?;
                let saved = self
                    .store()
                    .save_template(template, &self.actor_for(owner))
                    .await
                    .map_err(err)?;
                let text = format!("Saved template {} v{}", saved.name, saved.version);
                Ok((serde_json::to_value(&saved).unwrap_or(Value::Null), text))
            }
            TemplatesCommand::Delete => {
                let name = name()?;
                let deleted = self
                    .store()
                    .delete_template(&name, params.version)
                    .await
                    .map_err(err)?;
                Ok((
                    json!({"name": name, "deleted_versions": deleted}),
                    format!("Deleted {deleted} version(s) of template {name}"),
                ))
            }
            TemplatesCommand::Instantiate => {
                let template = self
                    .store()
                    .get_template(&name()?, params.version)
                    .await
                    .map_err(err)?;
                let plan_id = plansmith_core::Plan::new_id();
                let (mut plan, diagnostics) = template
                    .instantiate(
                        &params.arguments,
                        self.service.planners().default_planner().catalog(),
                        &PlanOptions::default(),
                        &plan_id,
                        chrono::Utc::now(),
                    )
                    .map_err(|e| e.to_string())?;
                let errors: Vec<String> = diagnostics
                    .iter()
                    .filter(|d| d.severity == Severity::Error)
                    .map(ToString::to_string)
                    .collect();
                if !errors.is_empty() {
                    return Err(format!(
                        "the plan from template {} v{} is invalid against the catalog; nothing saved: {}",
                        template.name,
                        template.version,
                        errors.join("; ")
                    ));
                }
                plan.owner = owner.clone();
                plan.conversation_id = params.conversation_id.clone();
                if params.save.unwrap_or(true) {
                    let stored = self
                        .store()
                        .create(
                            plan,
                            plansmith_store::ReviewState::AwaitingReview,
                            Review::default(),
                            &self.actor_for(owner),
                        )
                        .await
                        .map_err(err)?;
                    let mut value = stored_json(&stored);
                    value["diagnostics"] = json!(diagnostics);
                    Ok((value, stored.render_text()))
                } else {
                    let text = plan.render_text();
                    Ok((json!({"plan": plan, "diagnostics": diagnostics}), text))
                }
            }
        }
    }

    async fn planning_command(
        &self,
        params: PlanningParams,
        owner: &Option<String>,
    ) -> Result<(Value, String), String> {
        let actor = self.actor_for(owner);
        let conversation = params
            .conversation_id
            .clone()
            .unwrap_or_else(|| DEFAULT_CONVERSATION.to_owned());
        let require_id = |command: &str| {
            params
                .plan_id
                .clone()
                .filter(|id| !id.trim().is_empty())
                .ok_or_else(|| format!("Parameter `plan_id` is required for command: {command}"))
        };
        let err = |err: StoreError| err.to_string();
        let stored = match params.command {
            PlanningCommand::Create => {
                let id = require_id("create")?;
                let title = params
                    .title
                    .clone()
                    .filter(|t| !t.trim().is_empty())
                    .ok_or("Parameter `title` is required for command: create")?;
                let steps = params.steps.clone().filter(|s| !s.is_empty()).ok_or(
                    "Parameter `steps` must be a non-empty list of strings for command: create",
                )?;
                let mut plan = openmanus_plan(&id, &title, &steps)?;
                plan.owner = owner.clone();
                plan.conversation_id = params.conversation_id.clone();
                self.store()
                    .create(plan, plansmith_store::ReviewState::Draft, Review::default(), &actor)
                    .await
                    .map_err(|e| match e {
                        StoreError::AlreadyExists(id) => format!(
                            "A plan with ID '{id}' already exists. Use 'update' to modify existing plans."
                        ),
                        other => other.to_string(),
                    })?
            }
            PlanningCommand::Update => {
                let id = require_id("update")?;
                let current = self.visible(&id, owner).await.map_err(err)?;
                let title = params.title.clone().unwrap_or(current.plan.title.clone());
                let mut plan = match &params.steps {
                    Some(steps) => openmanus_plan(&id, &title, steps)?,
                    None => current.plan.clone(),
                };
                plan.title = title;
                plan.owner = current.plan.owner.clone();
                plan.conversation_id = current.plan.conversation_id.clone();
                self.store()
                    .update(&id, plan, None, &actor)
                    .await
                    .map_err(err)?
            }
            PlanningCommand::List => {
                let page = self
                    .store()
                    .list(&ListFilter {
                        owner: owner.clone(),
                        conversation_id: params.conversation_id.clone(),
                        limit: Some(1000),
                        total_cap: Some(plansmith_store::store::DEFAULT_TOTAL_CAP),
                        ..ListFilter::default()
                    })
                    .await
                    .map_err(err)?;
                let active = self.store().get_active(&conversation).await.ok();
                let mut text = String::from("Available plans:\n");
                if page.plans.is_empty() {
                    text = "No plans available. Create a plan with the 'create' command.".into();
                }
                for stored in &page.plans {
                    let done = stored
                        .plan
                        .steps
                        .iter()
                        .filter(|s| s.status == plansmith_core::StepStatus::Completed)
                        .count();
                    let marker = if active.as_ref().is_some_and(|a| a.plan.id == stored.plan.id) {
                        " (active)"
                    } else {
                        ""
                    };
                    text.push_str(&format!(
                        "• {}{marker}: {} - {done}/{} steps completed\n",
                        stored.plan.id,
                        stored.plan.title,
                        stored.plan.steps.len()
                    ));
                }
                let value = json!({
                    "plans": page.plans.iter().map(|s| json!({
                        "plan_id": s.plan.id, "title": s.plan.title, "state": s.state,
                        "version": s.version(), "steps": s.plan.steps.len(),
                    })).collect::<Vec<_>>(),
                    "total": page.total,
                    "total_exact": page.total_exact,
                    "active": active.map(|a| a.plan.id),
                });
                return Ok((value, text));
            }
            PlanningCommand::Get => match &params.plan_id {
                Some(id) => self.visible(id, owner).await.map_err(err)?,
                None => {
                    let active = self.store().get_active(&conversation).await.map_err(|_| {
                        "No active plan. Please specify a plan_id or set an active plan.".to_owned()
                    })?;
                    self.visible(&active.plan.id, owner).await.map_err(err)?
                }
            },
            PlanningCommand::SetActive => {
                let id = require_id("set_active")?;
                self.visible(&id, owner).await.map_err(err)?;
                self.store()
                    .set_active(&conversation, &id)
                    .await
                    .map_err(err)?;
                let stored = self.store().get(&id).await.map_err(err)?;
                let text = format!(
                    "Plan '{id}' is now the active plan.\n\n{}",
                    stored.render_text_from(0)
                );
                return Ok((stored_json(&stored), text));
            }
            PlanningCommand::MarkStep => {
                let id = match &params.plan_id {
                    Some(id) => id.clone(),
                    None => {
                        self.store()
                            .get_active(&conversation)
                            .await
                            .map_err(|_| {
                                "No active plan. Please specify a plan_id or set an active plan."
                                    .to_owned()
                            })?
                            .plan
                            .id
                    }
                };
                let index = params
                    .step_index
                    .ok_or("Parameter `step_index` is required for command: mark_step")?;
                self.visible(&id, owner).await.map_err(err)?;
                let stored = self
                    .store()
                    .mark_step(
                        &id,
                        &StepKey::Index(index),
                        params.step_status.as_deref(),
                        params.step_notes.as_deref(),
                        None,
                        &actor,
                    )
                    .await
                    .map_err(err)?;
                let text = format!(
                    "Step {index} updated in plan '{id}'.\n\n{}",
                    stored.render_text_from(0)
                );
                return Ok((stored_json(&stored), text));
            }
            PlanningCommand::Delete => {
                let id = require_id("delete")?;
                self.visible(&id, owner).await.map_err(err)?;
                self.store().delete(&id).await.map_err(err)?;
                return Ok((
                    json!({"deleted": id}),
                    format!("Plan '{id}' has been deleted."),
                ));
            }
        };
        let text = stored.render_text_from(0);
        Ok((stored_json(&stored), text))
    }
}

/// A plan from OpenManus's `{plan_id, title, steps: [text]}`: sequential steps.
fn openmanus_plan(id: &str, title: &str, steps: &[String]) -> Result<plansmith_core::Plan, String> {
    if steps.iter().any(|s| s.trim().is_empty()) {
        return Err("Parameter `steps` must not contain empty strings".into());
    }
    let defaults = ParseDefaults {
        plan_id: id,
        goal: title,
        locale: "en-US",
        now: chrono::Utc::now(),
    };
    let document = json!({"plan_id": id, "title": title, "steps": steps});
    to_plan(document, &defaults)
        .map(|(plan, _, _)| plan)
        .map_err(|err| format!("invalid plan: {err}"))
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for PlansmithMcp {
    /// Every tool call ends when its client cancels it (`notifications/cancelled`): rmcp only
    /// cancels the request's token, and a handler that does not watch it runs on. `plan` and
    /// a replanning `feedback` would hold the model, and the embedded model serves one request
    /// at a time; store writes are transactions, rolled back when dropped before the commit.
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let cancelled = context.ct.clone();
        let call = self
            .tool_router
            .call(ToolCallContext::new(self, request, context));
        tokio::select! {
            answer = call => answer,
            () = cancelled.cancelled() => failure("cancelled by the client").map(Into::into),
        }
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("plansmith", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "plansmith turns a request into a validated plan over the configured tools. \
                 Call `plan` with the request; if the result has questions, ask the user and \
                 answer them with `feedback` (action answer). Manage stored plans with `planning`.",
            )
    }
}

/// Serves `server` over stdin / stdout until the client disconnects. Only JSON-RPC is written
/// to stdout; logs go to stderr.
/// A line that is not a JSON-RPC message MCP knows is answered with its JSON-RPC error
/// instead of being dropped.
pub async fn serve_stdio(server: PlansmithMcp) -> Result<(), ServeError> {
    let (transport, lines) = crate::stdio::guard(tokio::io::stdin(), tokio::io::stdout());
    let running = server
        .serve(transport)
        .await
        .map_err(|err| ServeError(format!("initialize over stdio failed: {err}")))?;
    let ended = running
        .waiting()
        .await
        .map_err(|err| ServeError(err.to_string()));
    // The last answers are written before the process goes on to exit.
    let _ = lines.await;
    ended?;
    Ok(())
}

/// The response type of [`McpHttpService`].
pub type HttpResponse = http::Response<BoxBody<Bytes, Infallible>>;

/// The streamable HTTP endpoint: a `tower` service to mount (e.g. axum's
/// `nest_service("/mcp", …)`). With tokens, every request needs `Authorization: Bearer TOKEN`
/// and acts for the token's owner.
#[derive(Clone)]
pub struct McpHttpService {
    inner: StreamableHttpService<PlansmithMcp, LocalSessionManager>,
    tokens: Arc<HashMap<String, String>>,
    /// Cancelled by [`McpHttpService::close`]: rmcp ends every session then.
    closing: tokio_util::sync::CancellationToken,
}

impl McpHttpService {
    /// Ends every MCP session (their open event streams close) and refuses new requests.
    /// Call it when the server shuts down: a client's open stream would otherwise hold a
    /// graceful shutdown up. Affects every clone.
    pub fn close(&self) {
        self.closing.cancel();
    }
}

impl std::fmt::Debug for McpHttpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttpService")
            .field("tokens", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

/// The streamable HTTP service over `server`. `tokens` maps API tokens to owners (empty: no
/// authentication, which the HTTP server only allows on loopback); with tokens, the `Host`
/// check of the SDK (loopback names only, against DNS rebinding) is lifted, since callers
/// authenticate.
pub fn http_service(server: PlansmithMcp, tokens: HashMap<String, String>) -> McpHttpService {
    let mut config = StreamableHttpServerConfig::default();
    if !tokens.is_empty() {
        config = config.disable_allowed_hosts();
    }
    let closing = config.cancellation_token.clone();
    let inner = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    McpHttpService {
        inner,
        tokens: Arc::new(tokens),
        closing,
    }
}

impl<B> tower_service::Service<http::Request<B>> for McpHttpService
where
    B: http_body::Body + Send + 'static,
    B::Error: std::fmt::Display,
    B::Data: Send + 'static,
{
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<HttpResponse, Infallible>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.headers_mut().remove(OWNER_HEADER);
        if !self.tokens.is_empty() {
            let owner = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .and_then(|token| self.tokens.get(token.trim()))
                .and_then(|owner| http::HeaderValue::from_str(owner).ok());
            match owner {
                Some(owner) => {
                    request.headers_mut().insert(OWNER_HEADER, owner);
                }
                None => return Box::pin(async { Ok(unauthorized()) }),
            }
        }
        let mut inner = self.inner.clone();
        Box::pin(async move { inner.call(request).await })
    }
}

fn unauthorized() -> HttpResponse {
    let body = json!({
        "code": "unauthorized",
        "message": "a valid `Authorization: Bearer TOKEN` header is required",
        "details": null,
    })
    .to_string();
    let mut response = http::Response::new(
        http_body_util::Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = http::StatusCode::UNAUTHORIZED;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}
