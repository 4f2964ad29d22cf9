//! The prompt: the tools selected for the request, the conversation's memory, what the
//! templates see, and the rendered messages with the output schema or grammar the model's
//! strategy calls for.

use std::sync::Arc;
use std::time::Instant;

use super::call::{Call, micros};
use super::report::PlanError;
use crate::llm::{Message, OutputConstraint, Strategy};
use crate::plan::flat_plan_json;
use crate::prompts::{
    AgentView, DESCRIPTION_MAX, FeedbackView, PromptContext, SkillView, short_description,
};
use crate::request::{PlanFormat, PlanOptions, Shape};
use crate::retrieve::select;

/// The rendered prompt of a planning call, as every attempt and follow-up sends it.
pub(super) struct Prompt {
    /// The structured-output strategy asked for.
    pub(super) strategy: Strategy,
    /// The model writes the plan in the tool-call format ([`crate::calls`]).
    pub(super) calls: bool,
    /// System prompt, history and the user's request.
    pub(super) base_messages: Vec<Message>,
    /// The output schema, grammar or mode, when the strategy has one.
    pub(super) constraint: Option<OutputConstraint>,
}

/// Selects the tools to show the model: the retriever's top-K and the pinned tools.
pub(super) fn select_tools(call: &mut Call<'_>) {
    let request = call.request;
    let stage = Instant::now();
    let mut chosen = select(
        call.catalog,
        call.retriever,
        &request.query,
        request.options.top_k,
        &request.options.pinned_tools,
    );
    // The prompt lists the chosen tools in catalog order, not by score: two requests that
    // choose the same tools then share the whole system prompt, which a KV cache (the local
    // model) or a provider's prompt cache reuses.
    chosen.sort_unstable();
    let catalog = call.catalog;
    call.selected = chosen
        .into_iter()
        .filter_map(|idx| catalog.tool_at(idx))
        .collect();
    call.diagnostics.selected_tools = call.selected.iter().map(|t| t.tool.name.clone()).collect();
    call.diagnostics.timings.select_us = micros(stage);
}

/// The history shown to the model: earlier turns of the conversation within the request's
/// memory bounds, then the request's own history messages.
pub(super) fn history(call: &mut Call<'_>) -> Vec<Message> {
    let request = call.request;
    let mut history = Vec::new();
    if !request.turns.is_empty() {
        let (messages, report) = crate::memory::history(
            &request.turns,
            request.options.memory_turns,
            request.options.memory_tokens,
        );
        history = messages;
        call.diagnostics.memory = Some(report);
    }
    history.extend(request.history.iter().cloned());
    history
}

/// Renders the prompt: the strategy from the model's capabilities, the format, the system and
/// user messages around `history`, and the output constraint.
pub(super) fn render(
    call: &mut Call<'_>,
    context: &PromptContext,
    history: Vec<Message>,
) -> Result<Prompt, PlanError> {
    let request = call.request;
    let stage = Instant::now();
    let strategy = Strategy::negotiate(call.model.capabilities());
    call.diagnostics.strategy = Some(strategy);
    let calls = uses_calls(&request.options, strategy, call.agents.is_empty());
    call.diagnostics.format = Some(if calls {
        PlanFormat::Calls
    } else {
        PlanFormat::Json
    });
    let system = if calls {
        call.templates.calls_system(context)?
    } else {
        call.templates.system(request.options.shape, context)?
    };
    let user = call.templates.user(context)?;
    let mut base_messages = vec![Message::system(system)];
    base_messages.extend(history);
    base_messages.push(Message::user(user));
    // Prompt-only and JSON-mode backends get no schema: building it is most of the non-model
    // cost of a request.
    let schema = || {
        call.schemas
            .get(&call.selected, &call.agents, &request.options)
    };
    let constraint = match strategy {
        // The tool-call format is constrained on a grammar backend only; any other is asked
        // for it in the prompt (`calls_schema` is per request: a handful of tools).
        Strategy::Grammar if calls => Some(OutputConstraint::ToolCalls {
            schema: Arc::new(crate::calls::calls_schema(
                &call.selected,
                u64::from(request.options.max_string_length),
            )),
            max_calls: u32::try_from(request.options.max_steps.max(1)).unwrap_or(u32::MAX),
            max_text: request.options.max_string_length,
            earlier: 0,
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
    call.diagnostics.timings.render_us = micros(stage);
    Ok(Prompt {
        strategy,
        calls,
        base_messages,
        constraint,
    })
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

/// What the templates see for this request.
pub(super) fn prompt_context(call: &Call<'_>) -> PromptContext {
    let (request, now) = (call.request, call.now);
    let (tools, agents) = (&call.selected, &call.agents);
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
            .map(|entry| crate::prompts::tool_view(entry).clone())
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
