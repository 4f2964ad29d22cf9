//! The planning pipeline: triage → select → render → generate → parse → ground → validate → repair →
//! outcome (see ARCHITECTURE.md). [`Planner::plan`] never ends silently and never panics: it returns an
//! [`Outcome`] (ready, needs input, incomplete, or a fallback with its reason) or a [`PlanError`], and both
//! carry [`Diagnostics`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::catalog::{AgentCard, Catalog, CatalogTool, Tool};
use crate::diagnostic::{Code, Diagnostic, Severity};
use crate::investigate::{self, Finding, Investigation, Investigator};
use crate::llm::{
    Completion, CompletionRequest, FinishReason, LanguageModel, LlmError, Message,
    OutputConstraint, Stages, Strategy, StreamEvent, Usage,
};
use crate::memory::MemoryReport;
use crate::parse::{self, ParseDefaults, SourceShape};
use crate::plan::{Action, Plan, Question, Step, StepStatus, TaskKind};
use crate::request::{FallbackPolicy, PlanFormat, PlanOptions, PlanRequest, Shape};
use crate::retrieve::{Bm25Index, Retriever, select};
use crate::schema::SchemaCache;
use crate::stream::StepScanner;
use crate::template::{
    AgentView, DESCRIPTION_MAX, FeedbackView, FollowUpContext, PromptContext, RepairContext,
    SkillView, TemplateError, Templates, short_description,
};
use crate::validate::validate;

/// Longest raw output kept per attempt in the diagnostics.
const RAW_KEEP: usize = 16_000;
/// Longest rejected output quoted in a repair prompt.
const REJECTED_QUOTE: usize = 6_000;

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
    /// Time the call waited for the model before it started (the embedded model serves one
    /// request at a time).
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
    /// Time model calls waited before the model started on them: the embedded model serves
    /// one request at a time, so under concurrent requests this is where the time goes.
    #[serde(default)]
    pub queue_us: u64,
    /// Parsing.
    pub parse_us: u64,
    /// Validation.
    pub validate_us: u64,
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
    Template(#[from] TemplateError),
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

/// What [`Planner::plan_with_events`] reports while it works.
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

/// The event callback of [`Planner::plan_with_events`].
pub type OnEvent<'a> = &'a mut (dyn FnMut(PlanEvent) + Send);

/// A planner: a catalog with its retrieval index, templates, and a model.
pub struct Planner {
    catalog: Catalog,
    retriever: Arc<dyn Retriever>,
    templates: Arc<Templates>,
    model: Arc<dyn LanguageModel>,
    investigator: Option<Arc<dyn Investigator>>,
    /// Output schemas already built for this catalog.
    schemas: Arc<SchemaCache>,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("tools", &self.catalog.len())
            .field("agents", &self.catalog.agents().len())
            .field("model", &self.model.name())
            .finish()
    }
}

/// What a follow-up question is asked with: the request and the first answer's prompt.
struct FollowUp<'a> {
    request: &'a PlanRequest,
    base_messages: &'a [Message],
    constraint: &'a Option<OutputConstraint>,
    defaults: &'a ParseDefaults<'a>,
}

/// At most this many follow-up questions per plan.
const FOLLOW_UPS_MAX: usize = 3;

/// A candidate plan from one attempt.
struct Candidate {
    plan: Plan,
    diagnostics: Vec<Diagnostic>,
    raw: String,
}

impl Planner {
    /// A planner with BM25 retrieval over the catalog and the built-in templates.
    pub fn new(catalog: Catalog, model: Arc<dyn LanguageModel>) -> Planner {
        let retriever = Arc::new(Bm25Index::new(&catalog));
        Planner::with_retrieval(catalog, retriever, model)
    }

    /// A planner with this retriever (it must index the same catalog) and the built-in
    /// templates; [`Planner::new`] without building the BM25 index it would replace.
    pub fn with_retrieval(
        catalog: Catalog,
        retriever: Arc<dyn Retriever>,
        model: Arc<dyn LanguageModel>,
    ) -> Planner {
        Planner {
            catalog,
            retriever,
            templates: Arc::new(Templates::builtin()),
            model,
            investigator: None,
            schemas: Arc::default(),
        }
    }

    /// Uses this background investigator when a request asks for investigation.
    pub fn with_investigator(mut self, investigator: Arc<dyn Investigator>) -> Planner {
        self.investigator = Some(investigator);
        self
    }

    /// Uses these templates.
    pub fn with_templates(mut self, templates: Templates) -> Planner {
        self.templates = Arc::new(templates);
        self
    }

    /// Uses this retriever (it must index the same catalog).
    pub fn with_retriever(mut self, retriever: Arc<dyn Retriever>) -> Planner {
        self.retriever = retriever;
        self
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// A planner for another catalog with this one's model, templates and investigator, and a
    /// BM25 index over the new catalog (a retriever indexes one catalog; pass another with
    /// [`Planner::with_retriever`]). Planning for a caller's own tools uses it: the model is
    /// shared, only the catalog and its index are new.
    pub fn for_catalog(&self, catalog: Catalog) -> Planner {
        Planner {
            retriever: Arc::new(Bm25Index::new(&catalog)),
            catalog,
            templates: Arc::clone(&self.templates),
            model: Arc::clone(&self.model),
            investigator: self.investigator.clone(),
            schemas: Arc::default(),
        }
    }

    /// Plans one request.
    pub async fn plan(&self, request: &PlanRequest) -> Result<Outcome, PlanError> {
        self.run(request, None).await
    }

    /// Plans one request like [`Planner::plan`], streaming the model's reply and reporting
    /// progress to `on_event`: each attempt, every token, each step as soon as it is complete
    /// (parsed and validated on its own), and each repair.
    pub async fn plan_with_events(
        &self,
        request: &PlanRequest,
        on_event: OnEvent<'_>,
    ) -> Result<Outcome, PlanError> {
        self.run(request, Some(on_event)).await
    }

    async fn run(
        &self,
        request: &PlanRequest,
        mut on_event: Option<OnEvent<'_>>,
    ) -> Result<Outcome, PlanError> {
        let started = Instant::now();
        if let Some(problem) = request.problem() {
            return Err(PlanError::InvalidRequest(problem));
        }
        let now = request.now.unwrap_or_else(Utc::now);
        let plan_id = Plan::new_id();
        let mut diagnostics = Diagnostics {
            model: self.model.name(),
            ..Diagnostics::default()
        };

        if let Some(outcome) = self.triage(request, &plan_id, now, &mut diagnostics) {
            let mut outcome = outcome;
            outcome.diagnostics.timings.total_us = micros(started);
            return Ok(outcome);
        }

        let stage = Instant::now();
        let mut chosen = select(
            &self.catalog,
            self.retriever.as_ref(),
            &request.query,
            request.options.top_k,
            &request.options.pinned_tools,
        );
        // The prompt lists the chosen tools in catalog order, not by score: two requests that
        // choose the same tools then share the whole system prompt, which a KV cache (the local
        // model) or a provider's prompt cache reuses.
        chosen.sort_unstable();
        let selected: Vec<&CatalogTool> = chosen
            .into_iter()
            .filter_map(|idx| self.catalog.tool_at(idx))
            .collect();
        diagnostics.selected_tools = selected.iter().map(|t| t.tool.name.clone()).collect();
        diagnostics.timings.select_us = micros(stage);

        let agents: Vec<&AgentCard> = self.catalog.agents().iter().collect();
        let mut context = prompt_context(request, &selected, &agents, now);
        let mut history = Vec::new();
        if !request.turns.is_empty() {
            let (messages, report) = crate::memory::history(
                &request.turns,
                request.options.memory_turns,
                request.options.memory_tokens,
            );
            history = messages;
            diagnostics.memory = Some(report);
        }
        history.extend(request.history.iter().cloned());
        if request.options.triage
            && let Some(mut outcome) = self
                .model_triage(request, &history, &context, &plan_id, now, &mut diagnostics)
                .await?
        {
            outcome.diagnostics.timings.total_us = micros(started);
            return Ok(outcome);
        }
        // After triage: a request it answered or handed off needs no search.
        if request.options.investigate {
            context.findings = self
                .investigate(request, &mut diagnostics)
                .await
                .iter()
                .map(|f| format!("[{}] {}", f.source, f.text))
                .collect();
        }
        let stage = Instant::now();
        let strategy = Strategy::negotiate(self.model.capabilities());
        diagnostics.strategy = Some(strategy);
        let calls = uses_calls(&request.options, strategy, agents.is_empty());
        diagnostics.format = Some(if calls {
            PlanFormat::Calls
        } else {
            PlanFormat::Json
        });
        let system = if calls {
            self.templates.calls_system(&context)?
        } else {
            self.templates.system(request.options.shape, &context)?
        };
        let user = self.templates.user(&context)?;
        let mut base_messages = vec![Message::system(system)];
        base_messages.extend(history);
        base_messages.push(Message::user(user));
        // Prompt-only and JSON-mode backends get no schema: building it is most of the non-model
        // cost of a request.
        let schema = || self.schemas.get(&selected, &agents, &request.options);
        let constraint = match strategy {
            // The tool-call format is constrained on a grammar backend only; any other is asked
            // for it in the prompt (`calls_schema` is per request: a handful of tools).
            Strategy::Grammar if calls => Some(OutputConstraint::ToolCalls {
                schema: Arc::new(crate::calls::calls_schema(
                    &selected,
                    u64::from(request.options.max_string_length),
                )),
                max_calls: u32::try_from(request.options.max_steps.max(1)).unwrap_or(u32::MAX),
                max_text: request.options.max_string_length,
            }),
            _ if calls => None,
            Strategy::Grammar | Strategy::JsonSchema => Some(OutputConstraint::JsonSchema {
                name: "plan".into(),
                schema: schema(),
                strict: true,
            }),
            Strategy::ToolCalling => Some(OutputConstraint::ToolCall {
                name: "planning".into(),
                description: "Submit the plan for the user's request.".into(),
                parameters: schema(),
            }),
            Strategy::JsonMode => Some(OutputConstraint::JsonObject),
            Strategy::PromptOnly => None,
        };
        diagnostics.timings.render_us = micros(stage);

        let defaults = ParseDefaults {
            plan_id: &plan_id,
            goal: &request.query,
            locale: request.locale(),
            now,
        };
        let mut messages = base_messages.clone();
        let mut best: Option<Candidate> = None;
        let mut last_failure: Option<(String, String)> = None;
        let mut model_failure: Option<LlmError> = None;
        for attempt_index in 0..=request.options.max_repairs {
            let stage = Instant::now();
            if let Some(on_event) = on_event.as_deref_mut() {
                on_event(PlanEvent::AttemptStarted {
                    attempt: attempt_index,
                    strategy,
                });
            }
            let call = CompletionRequest {
                messages: messages.clone(),
                constraint: constraint.clone(),
                max_tokens: request.options.max_tokens,
                temperature: 0.0,
            };
            let generated = match on_event.as_deref_mut() {
                None => self.model.complete(call).await,
                Some(on_event) => {
                    self.generate_streamed(call, attempt_index, request, &defaults, on_event, calls)
                        .await
                }
            };
            let completion = match generated {
                Ok(completion) => completion,
                Err(source) => {
                    diagnostics.timings.generate_us += micros(stage);
                    if attempt_index == 0 {
                        diagnostics.timings.total_us = micros(started);
                        return Err(PlanError::Model {
                            source,
                            diagnostics: Box::new(diagnostics),
                        });
                    }
                    model_failure = Some(source);
                    break;
                }
            };
            let elapsed = micros(stage);
            let queue_us = completion.queue_us.min(elapsed);
            let generate_us = elapsed - queue_us;
            diagnostics.timings.generate_us += generate_us;
            diagnostics.timings.queue_us += queue_us;
            diagnostics.usage += completion.usage;
            if let Some(used) = completion.strategy {
                diagnostics.strategy = Some(used);
            }
            if attempt_index > 0 {
                diagnostics.repairs += 1;
            }
            // A backend may have fallen back to another strategy than the one asked for.
            let used = completion.strategy.unwrap_or(strategy);
            let raw = match completion.tool_calls.first() {
                Some(call)
                    if completion.text.trim().is_empty() || used == Strategy::ToolCalling =>
                {
                    call.arguments.clone()
                }
                _ => completion.text.clone(),
            };
            let mut attempt = Attempt {
                index: attempt_index,
                raw: cut(&raw, RAW_KEEP),
                finish: completion.finish,
                shape: None,
                json_repaired: false,
                diagnostics: Vec::new(),
                usage: completion.usage,
                generate_ms: generate_us / 1000,
                queue_ms: queue_us / 1000,
                stages: completion.stages,
            };
            if completion.finish == FinishReason::Length {
                attempt.diagnostics.push(Diagnostic::warning(
                    Code::Truncated,
                    "",
                    format!(
                        "the model stopped at its token limit ({} tokens)",
                        request.options.max_tokens
                    ),
                ));
            }

            let stage = Instant::now();
            let parsed = if calls {
                parse::parse_calls_for_pipeline(&raw, &defaults)
            } else {
                parse::parse_for_pipeline(&raw, &defaults)
            };
            diagnostics.timings.parse_us += micros(stage);
            let parsed = match parsed {
                Ok(parsed) => parsed,
                Err(err) => {
                    let message = err.to_string();
                    attempt.diagnostics.push(Diagnostic::error(
                        Code::ParseError,
                        "",
                        message.clone(),
                    ));
                    diagnostics.attempts.push(attempt);
                    last_failure = Some((message.clone(), raw.clone()));
                    if let Some(on_event) = on_event.as_deref_mut() {
                        on_event(PlanEvent::Repair {
                            attempt: attempt_index,
                            problems: vec![message.clone()],
                        });
                    }
                    let repair = self.templates.repair(&RepairContext {
                        diagnostics: Vec::new(),
                        parse_error: Some(message),
                        rejected: cut(&raw, REJECTED_QUOTE),
                        calls,
                    })?;
                    messages = repair_messages(&base_messages, &raw, repair);
                    continue;
                }
            };
            attempt.shape = Some(parsed.shape);
            attempt.json_repaired = parsed.repaired;

            let stage = Instant::now();
            let (plan, all) = self.checked(parsed, request);
            diagnostics.timings.validate_us += micros(stage);
            attempt.diagnostics.extend(all.iter().cloned());
            diagnostics.attempts.push(attempt);

            let n_errors = all.iter().filter(|d| d.is_error()).count();
            let clean = n_errors == 0;
            let better = best
                .as_ref()
                .is_none_or(|b| n_errors <= b.diagnostics.iter().filter(|d| d.is_error()).count());
            let problems = repair_prompt_items(&all);
            if better {
                best = Some(Candidate {
                    plan,
                    diagnostics: all,
                    raw: raw.clone(),
                });
            }
            if clean {
                break;
            }
            if let Some(on_event) = on_event.as_deref_mut() {
                on_event(PlanEvent::Repair {
                    attempt: attempt_index,
                    problems: problems.clone(),
                });
            }
            let repair = self.templates.repair(&RepairContext {
                diagnostics: problems,
                parse_error: None,
                rejected: cut(&raw, REJECTED_QUOTE),
                calls,
            })?;
            messages = repair_messages(&base_messages, &raw, repair);
        }

        // A clean answer in the tool-call format that leaves a part of the request without a
        // call gets one follow-up question per such part.
        if calls
            && model_failure.is_none()
            && let Some(candidate) = best.take()
        {
            let follow = FollowUp {
                request,
                base_messages: &base_messages,
                constraint: &constraint,
                defaults: &defaults,
            };
            best = Some(self.follow_up(&follow, candidate, &mut diagnostics).await);
        }

        let mut outcome = self.finish(
            request,
            best,
            last_failure,
            model_failure,
            &plan_id,
            now,
            diagnostics,
        );
        if let Ok(outcome) = &mut outcome {
            outcome.diagnostics.timings.total_us = micros(started);
        }
        outcome
    }

    /// A parsed answer grounded ([`crate::ground`]), validated and given the request's fields,
    /// with every diagnostic of the three.
    fn checked(&self, parsed: parse::Parsed, request: &PlanRequest) -> (Plan, Vec<Diagnostic>) {
        let mut written = parsed.plan;
        let mut all = parsed.diagnostics;
        all.extend(crate::ground::ground(&mut written, request, &self.catalog));
        let (mut plan, findings) = validate(written, &self.catalog, &request.options);
        all.extend(findings);
        apply_request_fields(&mut plan, request);
        (plan, all)
    }

    /// Asks the model, once per part of the request that no call of `candidate` addresses (see
    /// [`crate::cover`]), for that part's calls, and adds them when they address the part and
    /// the plan with them has no more errors; anything else (a failed call, a text answer,
    /// calls for something else) leaves the candidate as it was. Only a candidate without
    /// errors is followed up, and never past `max_steps`.
    async fn follow_up(
        &self,
        follow: &FollowUp<'_>,
        mut candidate: Candidate,
        diagnostics: &mut Diagnostics,
    ) -> Candidate {
        let request = follow.request;
        if candidate.diagnostics.iter().any(Diagnostic::is_error) {
            return candidate;
        }
        let parts = crate::cover::unaddressed(&request.query, &candidate.plan);
        for part in parts.into_iter().take(FOLLOW_UPS_MAX) {
            let n_steps = candidate.plan.steps.len();
            if n_steps >= request.options.max_steps {
                break;
            }
            if crate::cover::addresses(&candidate.plan, &part) {
                continue;
            }
            let Ok(prompt) = self.templates.follow_up(&FollowUpContext {
                part: part.text.clone(),
                calls: n_steps,
            }) else {
                break;
            };
            let mut messages = follow.base_messages.to_vec();
            messages.push(Message::assistant(candidate.raw.clone()));
            messages.push(Message::user(prompt));
            let stage = Instant::now();
            let completion = self
                .model
                .complete(CompletionRequest {
                    messages,
                    constraint: follow.constraint.clone(),
                    max_tokens: request.options.max_tokens,
                    temperature: 0.0,
                })
                .await;
            diagnostics.timings.generate_us += micros(stage);
            let completion = match completion {
                Ok(completion) => completion,
                Err(err) => {
                    diagnostics.findings.push(Diagnostic::warning(
                        Code::ModelError,
                        "",
                        format!("asking for the calls of a part of the request failed: {err}"),
                    ));
                    break;
                }
            };
            diagnostics.usage += completion.usage;
            // Both answers in tagged form, one after the other: the calls are numbered on as
            // if the model had written them all at once (the first may have been bare calls).
            let (Some((written, _)), Some((added, n_added))) = (
                crate::calls::tagged(&candidate.raw),
                crate::calls::tagged(&completion.text),
            ) else {
                continue;
            };
            if n_added == 0 {
                continue;
            }
            let raw = format!("{written}\n{added}");
            let Ok(parsed) = parse::parse_calls_for_pipeline(&raw, follow.defaults) else {
                continue;
            };
            let (plan, mut all) = self.checked(parsed, request);
            if all.iter().any(Diagnostic::is_error) || plan.steps.len() <= n_steps {
                continue;
            }
            let mut new_steps = plan.clone();
            new_steps.steps.drain(..n_steps);
            if !crate::cover::touches(&new_steps, &part) {
                continue;
            }
            let ids: Vec<&str> = new_steps.steps.iter().map(|s| s.id.as_str()).collect();
            all.push(Diagnostic::info(
                Code::AutoFixed,
                "/steps",
                format!(
                    "the first answer had no call for \"{}\"; asked for it and added {}",
                    part.text,
                    ids.join(", ")
                ),
            ));
            candidate = Candidate {
                plan,
                diagnostics: all,
                raw,
            };
        }
        candidate
    }

    /// One streamed generation: tokens and each complete step go to `on_event` as they arrive.
    async fn generate_streamed(
        &self,
        call: CompletionRequest,
        attempt: u32,
        request: &PlanRequest,
        defaults: &ParseDefaults<'_>,
        on_event: OnEvent<'_>,
        calls: bool,
    ) -> Result<Completion, LlmError> {
        use futures::StreamExt;
        let mut stream = self.model.stream(call);
        let mut scanner = StepScanner::new();
        let mut steps: Vec<Value> = Vec::new();
        // The tool-call format: the text so far, read again for calls that have closed.
        let mut written = String::new();
        while let Some(event) = stream.next().await {
            match event? {
                StreamEvent::Delta(text) => {
                    let found = if calls {
                        written.push_str(&text);
                        crate::calls::complete_steps(&written)
                            .into_iter()
                            .skip(steps.len())
                            .collect()
                    } else {
                        scanner.feed(&text)
                    };
                    on_event(PlanEvent::Token { attempt, text });
                    for step in found {
                        steps.push(step);
                        self.emit_step(&steps, attempt, request, defaults, on_event);
                    }
                }
                StreamEvent::Done(completion) => {
                    // A backend that does not stream gives everything at once: its steps are
                    // still reported, before the outcome.
                    if calls {
                        let rest: Vec<Value> = crate::calls::complete_steps(&completion.text)
                            .into_iter()
                            .skip(steps.len())
                            .collect();
                        for step in rest {
                            steps.push(step);
                            self.emit_step(&steps, attempt, request, defaults, on_event);
                        }
                    } else if scanner.text().is_empty() {
                        let whole = match completion.tool_calls.first() {
                            Some(call) if completion.text.trim().is_empty() => &call.arguments,
                            _ => &completion.text,
                        };
                        for step in scanner.feed(whole) {
                            steps.push(step);
                            self.emit_step(&steps, attempt, request, defaults, on_event);
                        }
                    }
                    return Ok(completion);
                }
            }
        }
        Err(LlmError::Backend(
            "the model's stream ended without a reply".into(),
        ))
    }

    /// Parses and validates the steps seen so far and reports the last one.
    fn emit_step(
        &self,
        steps: &[Value],
        attempt: u32,
        request: &PlanRequest,
        defaults: &ParseDefaults<'_>,
        on_event: OnEvent<'_>,
    ) {
        // A strict JSON Schema reply writes `null` for absent optional fields; the client maps
        // the final reply back, and this early preview drops them the same way.
        let steps: Vec<Value> = steps.iter().cloned().map(drop_nulls).collect();
        let text = json!({"steps": steps}).to_string();
        let Ok(parsed) = parse::parse_for_pipeline(&text, defaults) else {
            return;
        };
        let Some(last_id) = parsed.plan.steps.last().map(|s| s.id.clone()) else {
            return;
        };
        let mut written = parsed.plan;
        let mut findings = crate::ground::ground(&mut written, request, &self.catalog);
        let (plan, mut checked) = validate(written, &self.catalog, &request.options);
        findings.append(&mut checked);
        let Some(step) = plan.steps.iter().find(|s| s.id == last_id) else {
            return;
        };
        let diagnostics = findings
            .into_iter()
            .filter(|d| d.step.as_deref() == Some(step.id.as_str()))
            .collect();
        on_event(PlanEvent::Step {
            attempt,
            step: Box::new(step.clone()),
            diagnostics,
        });
    }

    /// Background investigation: runs the investigator within the request's budget and returns
    /// the trimmed findings. Nothing here fails the plan: no investigator, an error or a late
    /// answer is an `investigation_failed` warning and no findings.
    async fn investigate(
        &self,
        request: &PlanRequest,
        diagnostics: &mut Diagnostics,
    ) -> Vec<Finding> {
        let budget = Duration::from_millis(request.options.investigation_budget_ms);
        let started = Instant::now();
        let mut report = Investigation::default();
        let answer = match &self.investigator {
            None => Err("no investigator is configured".to_owned()),
            Some(investigator) => {
                report.investigator = investigator.name();
                investigator.investigate(&request.query, budget).await
            }
        };
        let elapsed = started.elapsed();
        report.elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let answer = match answer {
            Ok(_) if elapsed > budget => Err(format!(
                "the answer came after {} ms, past the {} ms budget",
                report.elapsed_ms,
                budget.as_millis()
            )),
            other => other,
        };
        match answer {
            Ok(found) => {
                let (kept, cut) = investigate::trim(found, request.options.max_findings_chars);
                report.findings = kept;
                report.trimmed_chars = cut;
            }
            Err(why) => {
                diagnostics.findings.push(Diagnostic::warning(
                    Code::InvestigationFailed,
                    "/investigation",
                    format!("background investigation failed ({why}); planned without it"),
                ));
                report.error = Some(why);
            }
        }
        let findings = report.findings.clone();
        diagnostics.investigation = Some(report);
        findings
    }

    /// The optional triage call (ValueCell's super-agent): answer directly, hand the request to
    /// an agent, or plan. Anything unusable — a model error, malformed output, an unknown agent —
    /// is a `triage_failed` warning and the request is planned.
    async fn model_triage(
        &self,
        request: &PlanRequest,
        history: &[Message],
        context: &PromptContext,
        plan_id: &str,
        now: DateTime<Utc>,
        diagnostics: &mut Diagnostics,
    ) -> Result<Option<Outcome>, PlanError> {
        let agent_names: Vec<&str> = self
            .catalog
            .agents()
            .iter()
            .map(|a| a.name.as_str())
            .collect();
        let decisions: &[&str] = if agent_names.is_empty() {
            &["answer", "plan"]
        } else {
            &["answer", "handoff", "plan"]
        };
        let mut properties = json!({
            "decision": {"type": "string", "enum": decisions},
            "reason": {"type": "string", "maxLength": 300},
            "reply": {"type": "string", "maxLength": request.options.max_string_length},
        });
        if !agent_names.is_empty() {
            properties["agent"] = json!({"type": "string", "enum": agent_names});
        }
        let schema = Arc::new(json!({
            "type": "object",
            "properties": properties,
            "required": ["decision", "reason"],
            "additionalProperties": false,
        }));
        let constraint = match Strategy::negotiate(self.model.capabilities()) {
            Strategy::Grammar | Strategy::JsonSchema => Some(OutputConstraint::JsonSchema {
                name: "triage".into(),
                schema,
                strict: false,
            }),
            Strategy::ToolCalling => Some(OutputConstraint::ToolCall {
                name: "route".into(),
                description: "Decide how to serve the request.".into(),
                parameters: schema,
            }),
            Strategy::JsonMode => Some(OutputConstraint::JsonObject),
            Strategy::PromptOnly => None,
        };
        let mut messages = vec![Message::system(self.templates.triage(context)?)];
        messages.extend(history.iter().cloned());
        // The time varies per request, so it rides with the query, after the cacheable prefix.
        messages.push(Message::user(format!(
            "Current time: {}\n\n{}",
            context.now, request.query
        )));
        let call = CompletionRequest {
            messages,
            constraint,
            max_tokens: request.options.max_tokens,
            temperature: 0.0,
        };
        let failed = |diagnostics: &mut Diagnostics, why: String| {
            diagnostics.findings.push(Diagnostic::warning(
                Code::TriageFailed,
                "/triage",
                format!("triage gave no usable decision ({why}); the request was planned"),
            ));
            Ok(None)
        };
        let completion = match self.model.complete(call).await {
            Ok(completion) => completion,
            Err(err) => return failed(diagnostics, format!("model error: {err}")),
        };
        diagnostics.usage += completion.usage;
        let raw = match completion.tool_calls.first() {
            Some(call) if completion.text.trim().is_empty() => call.arguments.clone(),
            _ => completion.text.clone(),
        };
        let value = match crate::parse::extract_json(&raw) {
            Ok((value, _)) => value,
            Err(err) => return failed(diagnostics, err.to_string()),
        };
        let field = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
        };
        let reason = field("reason").map(str::to_owned);
        let mut plan = new_plan(plan_id, request, now);
        plan.title = short_description(&request.query, 60);
        match field("decision").map(str::to_ascii_lowercase).as_deref() {
            Some("plan") => {
                diagnostics.triage_reason = reason;
                Ok(None)
            }
            Some("answer") => {
                let Some(reply) = field("reply") else {
                    return failed(diagnostics, "`answer` without a `reply`".into());
                };
                plan.steps.push(Step::new(
                    "s1",
                    "Answer",
                    Action::Reply {
                        text: reply.to_owned(),
                    },
                ));
                diagnostics.triage = Triage::Answered;
                diagnostics.triage_reason = reason;
                Ok(Some(Outcome {
                    status: OutcomeStatus::Ready,
                    plan,
                    diagnostics: diagnostics.clone(),
                }))
            }
            Some("handoff") => {
                let named = field("agent").unwrap_or_default();
                let Some(card) = self.catalog.agent(named) else {
                    let why = if named.is_empty() {
                        "`handoff` without an `agent`".to_owned()
                    } else {
                        format!("`handoff` to `{named}`, which is not an available agent")
                    };
                    return failed(diagnostics, why);
                };
                plan.steps.push(Step::new(
                    "s1",
                    format!("{}: {}", card.name, short_description(&request.query, 60)),
                    Action::Agent {
                        agent: card.name.clone(),
                        query: request.query.clone(),
                    },
                ));
                diagnostics.triage = Triage::HandedOff;
                diagnostics.triage_reason = reason;
                Ok(Some(Outcome {
                    status: OutcomeStatus::Ready,
                    plan,
                    diagnostics: diagnostics.clone(),
                }))
            }
            other => failed(
                diagnostics,
                match other {
                    Some(decision) => format!("unknown decision `{decision}`"),
                    None => "no `decision`".to_owned(),
                },
            ),
        }
    }

    /// Passthrough agents and unknown target agents are handled without a model call.
    fn triage(
        &self,
        request: &PlanRequest,
        plan_id: &str,
        now: DateTime<Utc>,
        diagnostics: &mut Diagnostics,
    ) -> Option<Outcome> {
        let target = request.target_agent.as_deref()?.trim();
        if target.is_empty() {
            return None;
        }
        match self.catalog.agent(target) {
            Some(card) if card.passthrough => {
                diagnostics.triage = Triage::Passthrough;
                let mut plan = new_plan(plan_id, request, now);
                plan.title = short_description(&request.query, 60);
                plan.steps.push(Step::new(
                    "s1",
                    format!("{}: {}", card.name, short_description(&request.query, 60)),
                    Action::Agent {
                        agent: card.name.clone(),
                        query: request.query.clone(),
                    },
                ));
                Some(Outcome {
                    status: OutcomeStatus::Ready,
                    plan,
                    diagnostics: diagnostics.clone(),
                })
            }
            Some(_) => None,
            None => {
                diagnostics.triage = Triage::UnknownAgent;
                let available: Vec<&str> = self
                    .catalog
                    .agents()
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect();
                let reason = if available.is_empty() {
                    format!("agent `{target}` is not available: no agents are configured")
                } else {
                    format!(
                        "agent `{target}` is not available; available agents: {}",
                        available.join(", ")
                    )
                };
                diagnostics.findings.push(
                    Diagnostic::error(Code::UnknownAgent, "/target_agent", reason.clone())
                        .with_value(json!(target)),
                );
                let mut plan = new_plan(plan_id, request, now);
                plan.ready = false;
                plan.guidance = Some(reason.clone());
                plan.metadata
                    .insert("fallback_reason".into(), json!(reason));
                Some(Outcome {
                    status: OutcomeStatus::Fallback { reason },
                    plan,
                    diagnostics: diagnostics.clone(),
                })
            }
        }
    }

    /// Turns the best candidate into an outcome: questions for missing arguments and unconfirmed
    /// schedules, invalid steps dropped, or the fallback policy when nothing usable is left.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        request: &PlanRequest,
        best: Option<Candidate>,
        last_failure: Option<(String, String)>,
        model_failure: Option<LlmError>,
        plan_id: &str,
        now: DateTime<Utc>,
        mut diagnostics: Diagnostics,
    ) -> Result<Outcome, PlanError> {
        if let Some(err) = &model_failure {
            diagnostics.findings.push(Diagnostic::warning(
                Code::ModelError,
                "",
                format!("a repair call failed, so the best earlier attempt is used: {err}"),
            ));
        }
        let Some(Candidate {
            mut plan,
            diagnostics: findings,
            raw,
        }) = best
        else {
            let (message, raw) =
                last_failure.unwrap_or_else(|| ("the model gave no output".into(), String::new()));
            let reason = format!("no plan could be read from the model output: {message}");
            return fallback(request, plan_id, now, reason, Some(&raw), diagnostics);
        };
        let locale = plan.locale.clone();
        let zh = locale.to_ascii_lowercase().starts_with("zh");

        // Plan-level errors (no step to blame) make the whole candidate unusable.
        // A step that parsing had to leave out (unreadable, cut off) is reported without a step
        // id: it is a dropped step, not a plan-level error.
        let left_out =
            |d: &Diagnostic| d.is_error() && d.step.is_none() && d.code == Code::InvalidStep;
        let plan_errors: Vec<&Diagnostic> = findings
            .iter()
            .filter(|d| d.is_error() && d.step.is_none() && !left_out(d))
            .collect();
        if !plan_errors.is_empty() {
            let reason = plan_errors
                .iter()
                .map(|d| d.message.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            diagnostics.findings.extend(findings.iter().cloned());
            return fallback(request, plan_id, now, reason, Some(&raw), diagnostics);
        }
        // A missing argument is asked of the user, unless the caller chose to fail when the
        // repairs run out (`fail`, `previous_or_fail`): then that policy decides, as for any
        // other error. (The nl2sql shape's SQL is the model's to write, not the user's.)
        if matches!(
            request.options.fallback,
            FallbackPolicy::Fail | FallbackPolicy::PreviousOrFail
        ) {
            let missing: Vec<&str> = findings
                .iter()
                .filter(|d| d.is_error() && d.code == Code::MissingArgument)
                .map(|d| d.message.as_str())
                .collect();
            if !missing.is_empty() {
                let reason = missing.join("; ");
                diagnostics.findings.extend(findings.iter().cloned());
                return fallback(request, plan_id, now, reason, Some(&raw), diagnostics);
            }
        }

        let mut questions: Vec<Question> = Vec::new();
        let mut dropped: Vec<String> = Vec::new();
        let mut kept_findings: Vec<Diagnostic> = Vec::new();
        let step_ids: Vec<String> = plan.steps.iter().map(|s| s.id.clone()).collect();
        for step_id in &step_ids {
            let errors: Vec<&Diagnostic> = findings
                .iter()
                .filter(|d| d.is_error() && d.step.as_deref() == Some(step_id))
                .collect();
            if errors.is_empty() {
                continue;
            }
            if errors.iter().all(|d| d.code == Code::MissingArgument) {
                let Some(step) = plan.steps.iter_mut().find(|s| &s.id == step_id) else {
                    continue;
                };
                step.status = StepStatus::Blocked;
                for diag in errors {
                    let argument = diag
                        .pointer
                        .rsplit('/')
                        .next()
                        .unwrap_or_default()
                        .replace("~1", "/")
                        .replace("~0", "~");
                    let tool = match &step.action {
                        Action::Tool { name, .. } => name.clone(),
                        _ => String::new(),
                    };
                    let options = self
                        .catalog
                        .tool(&tool)
                        .map(|t| enum_options(&t.tool, &argument))
                        .unwrap_or_default();
                    let text = if zh {
                        format!(
                            "步骤「{}」（{tool}）需要参数 `{argument}`，请提供它的值。",
                            step.title
                        )
                    } else {
                        format!(
                            "What should `{argument}` be for step \"{}\" ({tool})?",
                            step.title
                        )
                    };
                    questions.push(Question {
                        id: String::new(),
                        text,
                        step: Some(step_id.clone()),
                        argument: Some(argument),
                        options,
                    });
                    kept_findings.push(Diagnostic {
                        severity: Severity::Warning,
                        message: format!("{} — asked the user", diag.message),
                        ..(*diag).clone()
                    });
                }
            } else {
                dropped.push(step_id.clone());
            }
        }
        // Steps that depend on a dropped step cannot run either.
        let mut changed = true;
        while changed {
            changed = false;
            for step in &plan.steps {
                if !dropped.contains(&step.id)
                    && step.depends_on.iter().any(|d| dropped.contains(d))
                {
                    if matches!(step.action, Action::Reply { .. }) {
                        continue;
                    }
                    dropped.push(step.id.clone());
                    changed = true;
                }
            }
        }
        let mut n_left_out = 0;
        // A reply speaks of the plan as the model wrote it ("I'll email Bob"): once a step of
        // that plan is gone, a reply would promise what the plan no longer does.
        let lost_steps = !dropped.is_empty() || findings.iter().any(left_out);
        if lost_steps {
            for step in &plan.steps {
                if matches!(step.action, Action::Reply { .. }) && !dropped.contains(&step.id) {
                    dropped.push(step.id.clone());
                }
            }
        }
        for diag in &findings {
            let on_dropped = diag.step.as_ref().is_some_and(|s| dropped.contains(s));
            if left_out(diag) {
                n_left_out += 1;
                kept_findings.push(Diagnostic {
                    code: Code::StepDropped,
                    severity: Severity::Warning,
                    ..diag.clone()
                });
            } else if !diag.is_error() || on_dropped {
                kept_findings.push(diag.clone());
            }
        }
        let mut lost: Vec<String> = Vec::new();
        for step_id in &dropped {
            let reasons: Vec<&str> = findings
                .iter()
                .filter(|d| d.is_error() && d.step.as_deref() == Some(step_id))
                .map(|d| d.message.as_str())
                .collect();
            let is_reply = plan
                .step(step_id)
                .is_some_and(|s| matches!(s.action, Action::Reply { .. }));
            let why = if !reasons.is_empty() {
                reasons.join("; ")
            } else if is_reply {
                "a reply to the plan as written, which lost steps".to_owned()
            } else {
                "it depends on a dropped step".to_owned()
            };
            lost.push(format!("`{step_id}` ({why})"));
            kept_findings.push(
                Diagnostic::warning(
                    Code::StepDropped,
                    "/steps",
                    format!("dropped step `{step_id}`: {why}"),
                )
                .with_step(step_id.clone()),
            );
        }
        plan.steps.retain(|s| !dropped.contains(&s.id));
        for step in &mut plan.steps {
            step.depends_on.retain(|d| !dropped.contains(d));
        }
        // Errors on dropped steps stay in the attempt diagnostics; in the findings they are
        // reported as the drop itself.
        kept_findings
            .retain(|d| !(d.is_error() && d.step.as_ref().is_some_and(|s| dropped.contains(s))));

        let has_work = plan
            .steps
            .iter()
            .any(|s| !matches!(s.action, Action::Reply { .. }));
        if lost_steps && !has_work && questions.is_empty() && plan.questions.is_empty() {
            let reason = findings
                .iter()
                .filter(|d| d.is_error())
                .map(|d| d.message.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            diagnostics.findings.extend(kept_findings);
            return fallback(request, plan_id, now, reason, Some(&raw), diagnostics);
        }

        for diag in findings
            .iter()
            .filter(|d| d.code == Code::ScheduleUnconfirmed)
        {
            let Some(step) = plan
                .steps
                .iter_mut()
                .find(|s| Some(&s.id) == diag.step.as_ref())
            else {
                continue;
            };
            step.status = StepStatus::Blocked;
            let when = match &step.schedule {
                Some(crate::plan::Schedule::Interval { minutes }) => {
                    format!("every {minutes} minutes")
                }
                Some(crate::plan::Schedule::Daily { time }) => format!("every day at {time}"),
                Some(crate::plan::Schedule::Cron { expr }) => format!("on the schedule `{expr}`"),
                _ => "repeatedly".to_owned(),
            };
            let text = if zh {
                format!(
                    "步骤「{}」将按计划重复执行（{when}）。确认设置这个定时任务吗？",
                    step.title
                )
            } else {
                format!(
                    "Step \"{}\" will run {when}. Shall I set up this recurring schedule?",
                    step.title
                )
            };
            questions.push(Question {
                id: String::new(),
                text,
                step: Some(step.id.clone()),
                argument: None,
                options: if zh {
                    vec!["确认".into(), "取消".into()]
                } else {
                    vec!["yes".into(), "no".into()]
                },
            });
        }

        // The model may have asked already: keep its wording, do not ask twice.
        questions.retain(|q| {
            !plan
                .questions
                .iter()
                .any(|asked| asked.step == q.step && asked.argument == q.argument)
        });
        plan.questions.extend(questions);
        for (idx, question) in plan.questions.iter_mut().enumerate() {
            question.id = format!("q{}", idx + 1);
        }
        if !plan.questions.is_empty() {
            plan.ready = false;
        }
        let answered = plan.has_enough_context == Some(true);
        if plan.steps.is_empty()
            && plan.questions.is_empty()
            && plan.guidance.is_none()
            && !answered
        {
            diagnostics.findings.extend(kept_findings);
            return fallback(
                request,
                plan_id,
                now,
                "the plan has no usable steps".into(),
                Some(&raw),
                diagnostics,
            );
        }
        // The last line of defence for "never an invalid plan": a candidate that had errors is
        // validated again as it is about to be returned. The only errors it may still have are
        // the missing arguments that became questions (their steps wait, blocked); anything else
        // means a step above was kept that should not have been, and the plan is not returned.
        if findings.iter().any(Diagnostic::is_error) {
            let (_, recheck) = validate(plan.clone(), &self.catalog, &request.options);
            let blocked = |d: &Diagnostic| {
                d.code == Code::MissingArgument
                    && plan
                        .steps
                        .iter()
                        .any(|s| Some(&s.id) == d.step.as_ref() && s.status == StepStatus::Blocked)
            };
            let left: Vec<Diagnostic> = recheck
                .into_iter()
                .filter(|d| d.is_error() && !blocked(d))
                .collect();
            if !left.is_empty() {
                let reason = format!(
                    "the plan left after dropping invalid steps is still invalid: {}",
                    left.iter()
                        .map(|d| d.message.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                );
                diagnostics.findings.extend(kept_findings);
                diagnostics.findings.extend(left);
                return fallback(request, plan_id, now, reason, Some(&raw), diagnostics);
            }
        }
        diagnostics.findings.extend(kept_findings);
        // A plan that lost steps is marked so wherever it is stored (its metadata), and its
        // status says so unless it waits for answers first (answering replans it anyway).
        let incomplete = lost_steps.then(|| {
            if n_left_out > 0 {
                lost.push(format!(
                    "{n_left_out} step(s) that could not be read from the model output"
                ));
            }
            let reason = format!(
                "left out of the plan, so it does not do all the request asked: {}",
                lost.join("; ")
            );
            plan.ready = false;
            plan.metadata.insert(
                "incomplete".into(),
                json!({"reason": reason, "dropped": dropped}),
            );
            reason
        });
        let status = match incomplete {
            _ if !plan.questions.is_empty() => OutcomeStatus::NeedsInput,
            Some(reason) => OutcomeStatus::Incomplete { reason, dropped },
            None if plan.ready => OutcomeStatus::Ready,
            None => OutcomeStatus::NeedsInput,
        };
        Ok(Outcome {
            status,
            plan,
            diagnostics,
        })
    }
}

/// Whether a planning call uses the tool-call format ([`crate::calls`]): asked for, or `auto`
/// on a grammar backend (the embedded model) with no agents; only for `tool_steps` plans.
fn uses_calls(options: &PlanOptions, strategy: Strategy, no_agents: bool) -> bool {
    options.shape == Shape::ToolSteps
        && match options.format {
            PlanFormat::Calls => true,
            PlanFormat::Json => false,
            PlanFormat::Auto => strategy == Strategy::Grammar && no_agents,
        }
}

/// `value` without object members that are `null`, recursively.
fn drop_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, drop_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(drop_nulls).collect()),
        other => other,
    }
}

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Cuts text to at most `max` bytes at a char boundary.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let at = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…[cut]", &text[..at])
}

/// The errors, one line each, as the repair prompt quotes them.
fn repair_prompt_items(diagnostics: &[Diagnostic]) -> Vec<String> {
    diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string().replace('\n', " "))
        .collect()
}

/// The base conversation, the rejected output, and the repair request. Earlier failed attempts
/// are not replayed, so repair prompts stay bounded.
fn repair_messages(base: &[Message], raw: &str, repair: String) -> Vec<Message> {
    let mut messages = base.to_vec();
    messages.push(Message::assistant(cut(raw, REJECTED_QUOTE)));
    messages.push(Message::user(repair));
    messages
}

fn enum_options(tool: &Tool, argument: &str) -> Vec<String> {
    tool.input_schema
        .get("properties")
        .and_then(|p| p.get(argument))
        .and_then(|s| s.get("enum"))
        .and_then(Value::as_array)
        .map(|values| {
            values
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| v.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

fn new_plan(plan_id: &str, request: &PlanRequest, now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::new(plan_id, request.query.clone());
    plan.created_at = now;
    plan.locale = request.locale().to_owned();
    plan.title = short_description(&request.query, 60);
    apply_request_fields(&mut plan, request);
    plan
}

fn apply_request_fields(plan: &mut Plan, request: &PlanRequest) {
    plan.owner = request.owner.clone();
    plan.conversation_id = request.conversation_id.clone();
    plan.thread_id = request.thread_id.clone();
    if let Some(previous) = request.feedback.as_ref().and_then(|f| f.previous.as_ref()) {
        plan.id = previous.id.clone();
        plan.version = previous.version.saturating_add(1);
        plan.parent_version = Some(previous.version);
    }
}

/// Applies the fallback policy.
fn fallback(
    request: &PlanRequest,
    plan_id: &str,
    now: DateTime<Utc>,
    reason: String,
    raw: Option<&str>,
    diagnostics: Diagnostics,
) -> Result<Outcome, PlanError> {
    let zh = request.locale().to_ascii_lowercase().starts_with("zh");
    let mut plan = new_plan(plan_id, request, now);
    plan.metadata
        .insert("fallback_reason".into(), json!(reason));
    match &request.options.fallback {
        FallbackPolicy::Guidance => {
            plan.ready = false;
            let mut text = if zh {
                format!("无法为这个请求制定计划：{reason}")
            } else {
                format!("I could not make a plan for this request: {reason}")
            };
            if let Some(raw) = raw.filter(|r| !r.trim().is_empty()) {
                text.push_str(if zh {
                    "\n模型的原始输出：\n"
                } else {
                    "\nThe planner's raw output:\n"
                });
                text.push_str(&cut(raw.trim(), 2_000));
            }
            plan.guidance = Some(text);
        }
        FallbackPolicy::Reply { text } => {
            let text = text.clone().unwrap_or_else(|| {
                if zh {
                    "（计划不可用）".to_owned()
                } else {
                    "(plan unavailable)".to_owned()
                }
            });
            plan.steps.push(Step::new(
                "s1",
                if zh { "回复" } else { "Reply" },
                Action::Reply { text },
            ));
        }
        FallbackPolicy::DefaultPlan => {
            plan.title = format!("Plan for: {}", short_description(&request.query, 80));
            for (idx, title) in ["Analyze request", "Execute task", "Verify results"]
                .into_iter()
                .enumerate()
            {
                let mut step = Step::new(
                    format!("s{}", idx + 1),
                    title,
                    Action::Task {
                        kind: TaskKind::Custom(crate::plan::PLAIN_STEP.into()),
                        need_web_search: false,
                    },
                );
                if idx > 0 {
                    step.depends_on.push(format!("s{idx}"));
                }
                plan.steps.push(step);
            }
        }
        FallbackPolicy::PreviousOrFail => {
            let previous = request.feedback.as_ref().and_then(|f| f.previous.as_ref());
            match previous {
                Some(previous) if request.options.iteration > 0 => {
                    plan = previous.clone();
                    plan.metadata
                        .insert("fallback_reason".into(), json!(reason));
                }
                _ => {
                    return Err(PlanError::Failed {
                        reason,
                        diagnostics: Box::new(diagnostics),
                    });
                }
            }
        }
        FallbackPolicy::Fail => {
            return Err(PlanError::Failed {
                reason,
                diagnostics: Box::new(diagnostics),
            });
        }
    }
    Ok(Outcome {
        status: OutcomeStatus::Fallback { reason },
        plan,
        diagnostics,
    })
}

/// What the templates see for this request.
fn prompt_context(
    request: &PlanRequest,
    tools: &[&CatalogTool],
    agents: &[&AgentCard],
    now: DateTime<Utc>,
) -> PromptContext {
    PromptContext {
        query: request.query.clone(),
        profile: request.profile.clone().filter(|p| !p.trim().is_empty()),
        locale: request.locale().to_owned(),
        max_steps: request.options.max_steps.max(1),
        now: format!(
            "{} ({})",
            now.format("%Y-%m-%dT%H:%M:%SZ"),
            now.format("%A")
        ),
        tools: tools
            .iter()
            .map(|entry| entry.prompt_view().clone())
            .collect(),
        agents: agents
            .iter()
            .map(|agent| AgentView {
                name: agent.name.clone(),
                description: short_description(&agent.description, DESCRIPTION_MAX),
                skills: agent
                    .skills
                    .iter()
                    .map(|s| SkillView {
                        name: s.name.clone(),
                        description: short_description(&s.description, DESCRIPTION_MAX),
                    })
                    .collect(),
            })
            .collect(),
        context: request.context.clone(),
        findings: Vec::new(),
        feedback: request.feedback.as_ref().map(|feedback| FeedbackView {
            previous: feedback.previous.as_ref().map(flat_plan_json),
            text: feedback.text.clone(),
            diagnostics: feedback
                .diagnostics
                .iter()
                .map(ToString::to_string)
                .collect(),
            observations: feedback.observations.clone(),
        }),
    }
}

/// A plan in the flat form the prompts ask for (and [`crate::parse`] reads), as compact JSON.
pub fn flat_plan_json(plan: &Plan) -> String {
    let steps: Vec<Value> = plan
        .steps
        .iter()
        .map(|step| {
            let mut flat = serde_json::Map::new();
            flat.insert("id".into(), json!(step.id));
            flat.insert("type".into(), json!(step.action.type_name()));
            flat.insert("title".into(), json!(step.title));
            match &step.action {
                Action::Tool { name, arguments } => {
                    flat.insert("name".into(), json!(name));
                    flat.insert("arguments".into(), Value::Object(arguments.clone()));
                }
                Action::Agent { agent, query } => {
                    flat.insert("agent".into(), json!(agent));
                    flat.insert("query".into(), json!(query));
                }
                Action::Task {
                    kind,
                    need_web_search,
                } => {
                    flat.insert("kind".into(), json!(kind.to_string()));
                    flat.insert("need_web_search".into(), json!(need_web_search));
                    if !step.description.is_empty() {
                        flat.insert("description".into(), json!(step.description));
                    }
                }
                Action::Reply { text } => {
                    flat.insert("text".into(), json!(text));
                }
            }
            if !step.depends_on.is_empty() {
                flat.insert("depends_on".into(), json!(step.depends_on));
            }
            if let Some(schedule) = &step.schedule {
                flat.insert(
                    "schedule".into(),
                    serde_json::to_value(schedule).unwrap_or(Value::Null),
                );
            }
            Value::Object(flat)
        })
        .collect();
    json!({"title": plan.title, "steps": steps}).to_string()
}
