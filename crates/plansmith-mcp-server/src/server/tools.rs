//! The tools `plan`, `planning`, `feedback` and `templates`, and the MCP server handler that
//! dispatches their calls.

use plansmith_core::{OutcomeStatus, PlanRequest, Severity};
use plansmith_service::{Decision, ServiceError};
use plansmith_store::Review;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};

use super::PlansmithMcp;
use super::answer::{ToolAnswer, answer, failure, respond, stored_json};
use super::elicit::Asked;
use super::http::owner_of;
use super::params::{
    FeedbackAction, FeedbackParams, PlanParams, PlanningParams, RunParams, TemplatesParams,
};
use super::progress::plan_for;

#[tool_router(vis = "pub(super)")]
impl PlansmithMcp {
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
        // The conversation and a replan's previous plan, read as the HTTP API reads them.
        let conversation = [
            ("history", params.history),
            ("turns", params.turns),
            ("feedback", params.feedback),
        ];
        for (field, value) in conversation {
            let Some(value) = value else { continue };
            let parsed = match field {
                "history" => serde_json::from_value(value).map(|v| request.history = v),
                "turns" => serde_json::from_value(value).map(|v| request.turns = v),
                _ => serde_json::from_value(value).map(|v| request.feedback = Some(v)),
            };
            if let Err(err) = parsed {
                return failure(format!("`{field}`: {err}"));
            }
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
        let mut planned = match plan_for(
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
        let mut outcome_status = planned.outcome.status.clone();
        let diagnostics = std::mem::take(&mut planned.outcome.diagnostics);
        let mut asked = Asked::default();
        let (plan, state) = if params.save.unwrap_or(true) {
            let actor = self.actor_for(&owner);
            match self.service.submit(planned, &request, review, &actor).await {
                Ok(submitted) => {
                    let version = submitted.stored.version();
                    let (stored, how) =
                        self.ask_questions(submitted.stored, &context, &actor).await;
                    asked = how;
                    // Answered through the client: the outcome is the replanned version's.
                    if stored.version() != version {
                        outcome_status = if stored.plan.questions.is_empty() {
                            OutcomeStatus::Ready
                        } else {
                            OutcomeStatus::NeedsInput
                        };
                    }
                    (stored.plan, Some(stored.state))
                }
                Err(err) => return failure(format!("the plan could not be stored: {err}")),
            }
        } else {
            (planned.outcome.plan, None)
        };
        let status = outcome_status.name();
        // What the text says of a plan that is not as asked, and why.
        let (label, reason) = match &outcome_status {
            OutcomeStatus::Fallback { reason } => ("Fallback", Some(reason.clone())),
            OutcomeStatus::Incomplete { reason, .. } => ("Incomplete", Some(reason.clone())),
            _ => ("", None),
        };
        let mut value = json!({
            "status": status,
            "reason": reason,
            "plan_id": plan.id,
            "state": state.map(|s| s.as_str()),
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
                "investigation": diagnostics.investigation,
            },
        });
        let mut text = format!("{status}: plan `{}`\n{}", plan.id, plan.render_text());
        asked.report(&mut value, &mut text);
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
                let remember = match params.remember.as_deref().unwrap_or("run").parse() {
                    Ok(remember) => remember,
                    Err(err) => return failure(format!("`remember` for step: {err}")),
                };
                // `all`: every approval the run waits for, decided at once.
                if step == "all" {
                    let verdict = match params.verdict.as_deref().unwrap_or_default().parse() {
                        Ok(
                            v @ (plansmith_store::StepVerdict::Approve
                            | plansmith_store::StepVerdict::Deny),
                        ) => v,
                        _ => return failure("`verdict` for step `all`: approve or deny"),
                    };
                    let plan_id = current.plan.id.clone();
                    let decided = match self
                        .service
                        .decide_pending(&plan_id, None, verdict, remember, &text, &actor)
                        .await
                    {
                        Ok(decided) => decided,
                        Err(err) => return failure(err.to_string()),
                    };
                    let steps: Vec<String> = decided
                        .iter()
                        .filter_map(|d| {
                            d.step_decision.as_ref().map(|s| s.decision.step_id.clone())
                        })
                        .collect();
                    let text = format!(
                        "Plan {plan_id}: {} {}",
                        verdict.as_str(),
                        if steps.is_empty() {
                            "nothing (no approval was pending)".to_owned()
                        } else {
                            steps.join(", ")
                        }
                    );
                    return answer(json!({"plan_id": plan_id, "decided": steps}), text);
                }
                match params
                    .verdict
                    .unwrap_or_default()
                    .parse::<plansmith_store::StepVerdict>()
                {
                    Ok(verdict) => Decision::Step {
                        step,
                        verdict,
                        note: text,
                        remember,
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
                // A replan's new questions are asked through the client, as `plan` asks them.
                let replanned =
                    matches!(params.action, FeedbackAction::Edit | FeedbackAction::Answer);
                let (stored, asked) = if replanned {
                    self.ask_questions(decided.stored, &context, &actor).await
                } else {
                    (decided.stored, Asked::default())
                };
                let mut value = stored_json(&stored);
                if matches!(params.action, FeedbackAction::Patch) {
                    value["diagnostics"] = json!(decided.diagnostics);
                }
                let mut text = stored.render_text();
                if replanned {
                    asked.report(&mut value, &mut text);
                }
                answer(value, text)
            }
        }
    }

    #[tool(
        description = "Run an accepted plan on the server's executor (in the background; its progress and end, with `stop_reason`, show in the plan's `metadata.last_run`, as `planning get` returns it), or continue its unfinished run (`resume`). `budget` caps a new run: tool calls, model tokens, seconds, replans. With `wait: true` the call answers when the run ends (as a task, for a client that asks for tasks); a client that takes elicitation waits by default and is asked each approval the run waits for (`wait: false`: answer at once).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn run(
        &self,
        Parameters(params): Parameters<RunParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolAnswer {
        let owner = owner_of(&context);
        let current = match self.visible(&params.plan_id, &owner).await {
            Ok(current) => current,
            Err(err) => return failure(err.to_string()),
        };
        let budget = match params
            .budget
            .map(serde_json::from_value::<plansmith_store::Budget>)
            .transpose()
        {
            Ok(budget) => budget,
            Err(err) => return failure(format!("`budget`: {err}")),
        };
        let start = match plansmith_service::RunStart::of(params.resume, budget) {
            Ok(start) => start,
            Err(err) => return failure(err.to_string()),
        };
        let plan_id = current.plan.id.clone();
        // `wait: true` follows the run to its end; unset, a client that takes elicitation
        // follows it too (and is asked its approvals).
        let follow = params
            .wait
            .unwrap_or_else(|| super::elicit::can_elicit(&context));
        match self.service.run(&plan_id, start).await {
            Ok(_) if follow => {
                self.followed_answer(&plan_id, &context, &self.actor_for(&owner))
                    .await
            }
            Ok(run) => answer(
                json!({"plan_id": plan_id, "state": run.state, "base_version": run.base_version}),
                format!(
                    "Run of plan {plan_id} under way (version {}); its end shows in the plan's \
                     metadata.last_run",
                    run.base_version
                ),
            ),
            Err(err) => failure(err.to_string()),
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

#[tool_handler(router = self.tool_router)]
impl ServerHandler for PlansmithMcp {
    /// Every tool call ends when its client cancels it (`notifications/cancelled`): rmcp only
    /// cancels the request's token, and a handler that does not watch it runs on. `plan` and
    /// a replanning `feedback` would hold one of the embedded model's few sequences (a request
    /// waits for a free one); store writes are transactions, rolled back when dropped before the commit.
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        // A call again with a round's state continues that call, never starts another.
        if let Some(state) = request.request_state.clone() {
            return self.later_round(request, &state, context).await;
        }
        if PlansmithMcp::wants_task(&request, &context) {
            return Ok(self.start_task(request, context));
        }
        if PlansmithMcp::asks_in_rounds(&request, &context) {
            return self.first_round(request, context).await;
        }
        let cancelled = context.ct.clone();
        let call = self
            .tool_router
            .call(ToolCallContext::new(self, request, context));
        tokio::select! {
            answer = call => answer,
            () = cancelled.cancelled() => failure("cancelled by the client").map(Into::into),
        }
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, rmcp::ErrorData> {
        let managed = self.task_of_caller(&request.task_id, &context).await?;
        Ok(rmcp::model::GetTaskResult::new(
            self.tasks.get(&request.task_id, &managed)?,
        ))
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        let managed = self.task_of_caller(&request.task_id, &context).await?;
        self.tasks
            .manager()
            .update_task(&managed, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        let managed = self.task_of_caller(&request.task_id, &context).await?;
        self.tasks.manager().cancel_task(&managed)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("plansmith", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "plansmith turns a request into a validated plan over the configured tools. \
                 Call `plan` with the request; if the result has questions, ask the user and \
                 answer them with `feedback` (action answer). Manage stored plans with `planning`.",
        )
    }
}
