//! Triage: the routes a request takes before it is planned. A passthrough agent gets a one-task
//! plan and an unknown target agent guidance, both without a model call; the optional triage
//! call may answer the request or hand it to an agent.

use std::sync::Arc;

use serde_json::{Value, json};

use super::call::Call;
use super::report::{Diagnostics, Outcome, OutcomeStatus, PlanError, Triage};
use crate::catalog::{AgentCard, Catalog};
use crate::diagnostic::{Code, Diagnostic};
use crate::llm::{CompletionRequest, Message, OutputConstraint, Strategy};
use crate::plan::{Action, Plan, Step};
use crate::prompts::{PromptContext, short_description};

/// Passthrough agents and unknown target agents are handled without a model call.
pub(super) fn route(call: &mut Call<'_>) -> Option<Outcome> {
    let request = call.request;
    let target = request.target_agent.as_deref()?.trim();
    if target.is_empty() {
        return None;
    }
    match call.catalog.agent(target) {
        Some(card) if card.passthrough => {
            call.diagnostics.triage = Triage::Passthrough;
            let mut plan = call.new_plan();
            plan.title = short_description(&request.query, 60);
            plan.steps.push(agent_step(card, &request.query));
            Some(Outcome {
                status: OutcomeStatus::Ready,
                plan,
                diagnostics: call.diagnostics.clone(),
            })
        }
        Some(_) => None,
        None => {
            call.diagnostics.triage = Triage::UnknownAgent;
            let available = agent_names(call.catalog);
            let reason = if available.is_empty() {
                format!("agent `{target}` is not available: no agents are configured")
            } else {
                format!(
                    "agent `{target}` is not available; available agents: {}",
                    available.join(", ")
                )
            };
            call.diagnostics.findings.push(
                Diagnostic::error(Code::UnknownAgent, "/target_agent", reason.clone())
                    .with_value(json!(target)),
            );
            let mut plan = call.new_plan();
            plan.ready = false;
            plan.guidance = Some(reason.clone());
            plan.metadata
                .insert("fallback_reason".into(), json!(reason));
            Some(Outcome {
                status: OutcomeStatus::Fallback { reason },
                plan,
                diagnostics: call.diagnostics.clone(),
            })
        }
    }
}

/// The optional triage call (ValueCell's super-agent): answer directly, hand the request to
/// an agent, or plan. Anything unusable — a model error, malformed output, an unknown agent —
/// is a `triage_failed` warning and the request is planned.
pub(super) async fn ask_model(
    call: &mut Call<'_>,
    history: &[Message],
    context: &PromptContext,
) -> Result<Option<Outcome>, PlanError> {
    let request = call.request;
    let agent_names = agent_names(call.catalog);
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
    let constraint = match Strategy::negotiate(call.model.capabilities()) {
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
    let mut messages = vec![Message::system(call.templates.triage(context)?)];
    messages.extend(history.iter().cloned());
    // The time varies per request, so it rides with the query, after the cacheable prefix.
    messages.push(Message::user(format!(
        "Current time: {}\n\n{}",
        context.now, request.query
    )));
    let completion_request = CompletionRequest {
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
    let completion = match call.model.complete(completion_request).await {
        Ok(completion) => completion,
        Err(err) => return failed(&mut call.diagnostics, format!("model error: {err}")),
    };
    call.diagnostics.usage += completion.usage;
    let raw = match completion.tool_calls.first() {
        Some(tool_call) if completion.text.trim().is_empty() => tool_call.arguments.clone(),
        _ => completion.text.clone(),
    };
    let value = match crate::parse::extract_json(&raw) {
        Ok((value, _)) => value,
        Err(err) => return failed(&mut call.diagnostics, err.to_string()),
    };
    let field = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let reason = field("reason").map(str::to_owned);
    let mut plan = call.new_plan();
    plan.title = short_description(&request.query, 60);
    let diagnostics = &mut call.diagnostics;
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
            decided(diagnostics, Triage::Answered, reason, plan)
        }
        Some("handoff") => {
            let named = field("agent").unwrap_or_default();
            let Some(card) = call.catalog.agent(named) else {
                let why = if named.is_empty() {
                    "`handoff` without an `agent`".to_owned()
                } else {
                    format!("`handoff` to `{named}`, which is not an available agent")
                };
                return failed(diagnostics, why);
            };
            plan.steps.push(agent_step(card, &request.query));
            decided(diagnostics, Triage::HandedOff, reason, plan)
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

/// The outcome of a triage call that served the request itself: `plan`, ready, with the
/// decision and its reason in the diagnostics.
fn decided(
    diagnostics: &mut Diagnostics,
    triage: Triage,
    reason: Option<String>,
    plan: Plan,
) -> Result<Option<Outcome>, PlanError> {
    diagnostics.triage = triage;
    diagnostics.triage_reason = reason;
    Ok(Some(Outcome {
        status: OutcomeStatus::Ready,
        plan,
        diagnostics: diagnostics.clone(),
    }))
}

/// The one step of a plan that hands the whole request to `card`'s agent.
fn agent_step(card: &AgentCard, query: &str) -> Step {
    Step::new(
        "s1",
        format!("{}: {}", card.name, short_description(query, 60)),
        Action::Agent {
            agent: card.name.clone(),
            query: query.to_owned(),
        },
    )
}

/// The names of the catalog's agents, in catalog order.
fn agent_names(catalog: &Catalog) -> Vec<&str> {
    catalog.agents().iter().map(|a| a.name.as_str()).collect()
}
