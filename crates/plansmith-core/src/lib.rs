//! plansmith-core: the planning engine.
//!
//! # Brief overview
//!
//! A [`PlanRequest`] (query, profile, history, context, locale, time, options) and a [`Catalog`]
//! of tools and agents go in; an [`Outcome`] comes out: a validated [`Plan`] that is ready, a
//! plan that needs input (clarifying questions), an incomplete plan (a step the request asked
//! for could not be planned), or a fallback with its reason — always with
//! [`Diagnostics`] (attempts, strategy, raw outputs, repairs, findings, tokens, time per stage).
//!
//! The stages, one module each:
//!
//! | stage | module | what it does |
//! |---|---|---|
//! | triage | [`pipeline`] | passthrough agents get a one-task plan without a model call |
//! | select | [`retrieve`] | the retriever's top-K tools for the prompt (BM25F, or fused with dense scores), pinned tools always in |
//! | memory | [`memory`] | earlier turns of the conversation as bounded history |
//! | model triage | [`pipeline`] | optional: answer directly, hand off to an agent, or plan |
//! | investigate | [`investigate`] | optional read-only lookups before planning, findings in the prompt |
//! | render | [`prompts`], [`schema`] | minijinja prompts; the JSON Schema the output must follow |
//! | generate | [`llm`] | the [`LanguageModel`] boundary, strategy negotiation |
//! | parse | [`parse`] | fences, `<think>`, prose, lenient JSON repair, every accepted shape |
//! | ground | `ground` | a later call's argument that states an earlier result becomes a `$ref` |
//! | validate | [`validate`] | names, arguments (JSON Schema), DAG, `$ref`s, schedules, `max_steps` |
//! | repair | [`pipeline`] | a prompt quoting every diagnostic and the rejected plan, bounded |
//! | follow up | `cover` | parts of the request no call addresses are asked for once more |
//! | outcome | [`pipeline`] | questions for missing arguments, dropped steps (`incomplete`), fallback policy |
//!
//! Validation always uses the **full** catalog: a valid tool the retriever did not select is kept.
//! This crate does no network, database or HTTP work.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use plansmith_core::{Catalog, OutcomeStatus, PlanRequest, Planner, ScriptedModel, Action};
//!
//! let catalog = Catalog::from_json(&serde_json::json!([{
//!     "name": "get_weather",
//!     "description": "Current weather for a city",
//!     "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
//! }]))?;
//! // The scripted model stands in for a real one: it replays this reply.
//! let model = Arc::new(ScriptedModel::new([r#"Sure! ```json
//! {"title": "Weather", "steps": [{"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}}]}
//! ```"#]));
//! let planner = Planner::new(catalog, model);
//! let outcome = futures::executor::block_on(planner.plan(&PlanRequest::new("Weather in Paris?")))?;
//! assert_eq!(outcome.status, OutcomeStatus::Ready);
//! let Action::Tool { name, arguments } = &outcome.plan.steps[0].action else { unreachable!() };
//! assert_eq!((name.as_str(), &arguments["city"]), ("get_weather", &serde_json::json!("Paris")));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The plan document
//!
//! A [`Plan`] serialises to this JSON (a public contract, pinned by snapshot tests; optional
//! fields are omitted when empty):
//!
//! ```json
//! {
//!   "id": "plan-…", "version": 1, "parent_version": null,
//!   "title": "Weather", "goal": "Weather in Paris?", "locale": "en-US", "thought": "…",
//!   "ready": true, "has_enough_context": null,
//!   "questions": [{"id": "q1", "text": "…", "step": "s1", "argument": "city",
//!                  "kind": "missing_info", "input": "text"}],
//!   "guidance": null,
//!   "steps": [{
//!     "id": "s1", "title": "get_weather", "description": "…",
//!     "action": {"type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}},
//!     "depends_on": [], "schedule": {"type": "daily", "time": "09:00"},
//!     "status": "not_started", "requires_approval": false, "notes": "", "result": null, "error": null
//!   }],
//!   "created_at": "2026-11-22T10:00:00Z", "owner": null, "conversation_id": null, "thread_id": null,
//!   "metadata": {}
//! }
//! ```
//!
//! `action.type` is one of `tool {name, arguments}`, `agent {agent, query}`,
//! `task {kind: research|processing|<custom>, need_web_search}`, `reply {text}`. An argument may
//! be a step reference `{"$ref": "s1.output.items[0].id"}`. `schedule.type` is one of `once`,
//! `interval {minutes}`, `daily {time}`, `cron {expr}`. `status` is one of `not_started`,
//! `in_progress`, `completed`, `blocked`, `failed`, `skipped`.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod calls;
pub mod catalog;
mod cover;
mod diagnostic;
pub mod estimate;
pub mod export;
mod ground;
pub mod investigate;
pub mod llm;
pub mod memory;
pub mod parse;
pub mod pipeline;
pub mod plan;
pub mod plan_template;
pub mod prompts;
pub mod replan;
mod request;
pub mod retrieve;
pub mod schema;
pub mod secrets;
pub mod stream;
mod text;
pub mod validate;

pub use catalog::{
    AgentCard, AgentSkill, Catalog, CatalogError, CatalogProblem, Tool, ToolAnnotations,
};
pub use cover::{search_terms, unaddressed_parts};
pub use diagnostic::{Code, Diagnostic, Severity};
pub use investigate::{Finding, Investigation, Investigator, ScriptedInvestigator};
pub use llm::{
    Capabilities, Completion, CompletionRequest, LanguageModel, Likelihood, LlmError, Message,
    OutputConstraint, Role, ScriptedLikelihood, ScriptedModel, Stages, Strategy, Usage,
};
pub use memory::{MemoryReport, Turn};
pub use pipeline::{Diagnostics, Outcome, OutcomeStatus, PlanError, PlanEvent, Planner};
pub use plan::{
    Action, Answer, Assumption, InputMode, PLAIN_STEP, Plan, Question, QuestionKind, Schedule,
    Step, StepRef, StepStatus, TaskKind, answers_text, assumptions, recommended_answers,
    record_assumptions,
};
pub use plan_template::{PlanTemplate, PlanTemplateError, TemplateParameter};
pub use prompts::Prompts;
pub use request::{FallbackPolicy, Feedback, PlanFormat, PlanOptions, PlanRequest, Shape};
pub use retrieve::{Bm25Index, Fusion, Retriever};
