//! One planning call: what its stages read (the request, the catalog and the tools selected from
//! it, the model, the templates) and what they record (diagnostics, events, the best candidate so
//! far), with the helpers several stages share.

use std::time::Instant;

use chrono::{DateTime, Utc};

use super::report::{Diagnostics, OnEvent, PlanEvent};
use crate::catalog::{AgentCard, Catalog, CatalogTool};
use crate::diagnostic::Diagnostic;
use crate::investigate::Investigator;
use crate::llm::{LanguageModel, LlmError};
use crate::parse::{ParseDefaults, Parsed};
use crate::plan::Plan;
use crate::prompts::{Prompts, short_description};
use crate::request::PlanRequest;
use crate::retrieve::Retriever;
use crate::schema::SchemaCache;
use crate::validate::validate;

/// The context of one planning call, handed from stage to stage.
pub(super) struct Call<'a> {
    /// The request being planned.
    pub(super) request: &'a PlanRequest,
    /// The planner's whole catalog: validation always uses all of it.
    pub(super) catalog: &'a Catalog,
    /// The retriever over the catalog.
    pub(super) retriever: &'a dyn Retriever,
    /// The prompt templates.
    pub(super) templates: &'a Prompts,
    /// The model.
    pub(super) model: &'a dyn LanguageModel,
    /// The background investigator, when the planner has one.
    pub(super) investigator: Option<&'a dyn Investigator>,
    /// Output schemas already built for the catalog.
    pub(super) schemas: &'a SchemaCache,
    /// Id of the plan being made.
    pub(super) plan_id: String,
    /// The request's time, or the time the call started.
    pub(super) now: DateTime<Utc>,
    /// When the call started.
    pub(super) started: Instant,
    /// The tools shown to the model, in catalog order (empty until selection).
    pub(super) selected: Vec<&'a CatalogTool>,
    /// The catalog's agents.
    pub(super) agents: Vec<&'a AgentCard>,
    /// Everything the call did so far.
    pub(super) diagnostics: Diagnostics,
    /// Where progress is reported, when the caller listens.
    pub(super) on_event: Option<OnEvent<'a>>,
    /// The best candidate so far: the one with the fewest errors, the later one on a tie.
    pub(super) best: Option<Candidate>,
    /// The last output that could not be read: the parse error and the output.
    pub(super) last_failure: Option<(String, String)>,
    /// A repair call that failed; the best earlier attempt is used.
    pub(super) model_failure: Option<LlmError>,
}

/// A candidate plan from one attempt.
pub(super) struct Candidate {
    /// The plan, grounded and validated.
    pub(super) plan: Plan,
    /// Every diagnostic of parsing, grounding and validation.
    pub(super) diagnostics: Vec<Diagnostic>,
    /// The model output it was read from.
    pub(super) raw: String,
}

impl Call<'_> {
    /// Defaults for the plan fields the model may leave out.
    pub(super) fn defaults(&self) -> ParseDefaults<'_> {
        ParseDefaults {
            plan_id: &self.plan_id,
            goal: &self.request.query,
            locale: self.request.locale(),
            now: self.now,
        }
    }

    /// Reports `event` to the caller, when it listens.
    pub(super) fn emit(&mut self, event: PlanEvent) {
        if let Some(on_event) = self.on_event.as_deref_mut() {
            on_event(event);
        }
    }

    /// A parsed answer grounded ([`crate::ground`]), validated and given the request's fields,
    /// with every diagnostic of the three.
    pub(super) fn checked(&self, parsed: Parsed) -> (Plan, Vec<Diagnostic>) {
        let mut written = parsed.plan;
        let mut all = parsed.diagnostics;
        all.extend(crate::ground::ground(
            &mut written,
            self.request,
            self.catalog,
        ));
        let (mut plan, findings) = validate(written, self.catalog, &self.request.options);
        all.extend(findings);
        apply_request_fields(&mut plan, self.request);
        (plan, all)
    }

    /// An empty plan for this call: its id, the request as goal and title, locale and time.
    pub(super) fn new_plan(&self) -> Plan {
        let request = self.request;
        let mut plan = Plan::new(&self.plan_id, request.query.clone());
        plan.created_at = self.now;
        plan.locale = request.locale().to_owned();
        plan.title = short_description(&request.query, 60);
        apply_request_fields(&mut plan, request);
        plan
    }
}

/// The fields a plan takes from the request: owner, conversation and thread, and the id and next
/// version of the plan it revises.
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

/// Whether questions and messages for `locale` are written in Chinese (the planner's other
/// language; everything else gets English).
pub(super) fn chinese(locale: &str) -> bool {
    locale.to_ascii_lowercase().starts_with("zh")
}

/// Microseconds since `since`.
pub(super) fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Cuts text to at most `max` bytes at a char boundary.
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let at = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…[cut]", &text[..at])
}
