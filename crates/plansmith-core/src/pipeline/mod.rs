//! The planning pipeline: triage → select → render → generate → parse → ground → validate →
//! repair → follow up → fit check → outcome (see ARCHITECTURE.md). [`Planner::plan`] never
//! ends silently and never panics: it returns an [`Outcome`] (ready, needs input, incomplete,
//! or a fallback with its reason) or a [`PlanError`], and both carry [`Diagnostics`].
//!
//! Each stage is a function over one `Call`, the context of a planning call: the request, the
//! catalog and the tools selected from it, the model, the diagnostics so far, the event
//! listener and the best candidate. [`Planner::plan`] runs them in order:
//!
//! | stage | module |
//! |---|---|
//! | triage (passthrough, unknown agent) | `triage` |
//! | select, memory | `prompt` |
//! | model triage | `triage` |
//! | investigate | `investigation` |
//! | render | `prompt` |
//! | generate → parse → ground → validate → repair | `generate` |
//! | follow up, redundant calls | `follow_up` |
//! | fit check | `fit` |
//! | outcome, fallback | `outcome` |

mod call;
mod fit;
mod follow_up;
mod generate;
mod investigation;
mod outcome;
mod prompt;
mod report;
mod triage;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;

use crate::catalog::Catalog;
use crate::investigate::Investigator;
use crate::llm::LanguageModel;
use crate::plan::Plan;
use crate::prompts::Prompts;
use crate::request::PlanRequest;
use crate::retrieve::{Bm25Index, Retriever};
use crate::schema::SchemaCache;

pub use crate::plan::flat_plan_json;
use call::{Call, micros};
pub use report::{
    Attempt, Diagnostics, OnEvent, Outcome, OutcomeStatus, PlanError, PlanEvent, Timings, Triage,
};

/// A planner: a catalog with its retrieval index, templates, and a model.
pub struct Planner {
    catalog: Catalog,
    retriever: Arc<dyn Retriever>,
    templates: Arc<Prompts>,
    model: Arc<dyn LanguageModel>,
    investigator: Option<Arc<dyn Investigator>>,
    /// Output schemas already built for this catalog.
    schemas: Arc<SchemaCache>,
    /// Investigate every request, not only those whose options ask for it.
    investigate_always: bool,
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
            templates: Arc::new(Prompts::builtin()),
            model,
            investigator: None,
            schemas: Arc::default(),
            investigate_always: false,
        }
    }

    /// Uses this background investigator when a request asks for investigation.
    pub fn with_investigator(mut self, investigator: Arc<dyn Investigator>) -> Planner {
        self.investigator = Some(investigator);
        self
    }

    /// Investigates every request with the investigator (when one is set), as if each asked
    /// for it ([`PlanOptions::investigate`](crate::PlanOptions)): for a service whose
    /// operator chose the investigation, not its callers.
    pub fn investigating_every_request(mut self) -> Planner {
        self.investigate_always = true;
        self
    }

    /// Uses these templates.
    pub fn with_prompts(mut self, templates: Prompts) -> Planner {
        self.templates = Arc::new(templates);
        self
    }

    /// Uses this retriever (it must index the same catalog).
    pub fn with_retriever(mut self, retriever: Arc<dyn Retriever>) -> Planner {
        self.retriever = retriever;
        self
    }

    /// The model it plans with.
    pub fn model(&self) -> &Arc<dyn LanguageModel> {
        &self.model
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
            investigate_always: self.investigate_always,
        }
    }

    /// Plans one request.
    pub async fn plan(&self, request: &PlanRequest) -> Result<Outcome, PlanError> {
        self.run_answering(request, None).await
    }

    /// Plans one request like [`Planner::plan`], streaming the model's reply and reporting
    /// progress to `on_event`: each attempt, every token, each step as soon as it is complete
    /// (parsed and validated on its own), and each repair.
    pub async fn plan_with_events(
        &self,
        request: &PlanRequest,
        on_event: OnEvent<'_>,
    ) -> Result<Outcome, PlanError> {
        self.run_answering(request, Some(on_event)).await
    }

    /// [`Planner::run`], then, when the request asks not to be asked
    /// ([`PlanOptions::no_questions`](crate::PlanOptions)) and the plan asks questions with
    /// recommended answers, one replan with those answers, recorded as assumptions in the
    /// plan's `metadata.assumptions`. The replan is the next version of the same plan.
    async fn run_answering(
        &self,
        request: &PlanRequest,
        mut on_event: Option<OnEvent<'_>>,
    ) -> Result<Outcome, PlanError> {
        fn reborrow<'s>(on_event: &'s mut Option<OnEvent<'_>>) -> Option<OnEvent<'s>> {
            match on_event {
                Some(listener) => Some(&mut **listener),
                None => None,
            }
        }
        let first = self.run(request, reborrow(&mut on_event)).await?;
        if !request.options.no_questions {
            return Ok(first);
        }
        let questions = first.plan.questions.clone();
        let answers = crate::recommended_answers(&questions, "the request asked not to be asked");
        if answers.is_empty() {
            return Ok(first);
        }
        let mut replan = request.clone();
        replan.options.iteration += 1;
        replan.feedback = Some(crate::request::Feedback {
            previous: Some(first.plan.clone()),
            text: Some(crate::answers_text(&questions, &answers)),
            diagnostics: Vec::new(),
            observations: Vec::new(),
        });
        let mut next = self.run(&replan, reborrow(&mut on_event)).await?;
        let new = std::mem::replace(&mut next.plan, Plan::new("", ""));
        next.plan = crate::plan::next_version(&first.plan, &HashMap::new(), new).plan;
        crate::record_assumptions(
            &mut next.plan.metadata,
            &crate::assumptions(&questions, &answers),
        );
        next.diagnostics.timings.total_us += first.diagnostics.timings.total_us;
        Ok(next)
    }

    /// The stages, in order, over one call's context; triage may end the call early.
    async fn run(
        &self,
        request: &PlanRequest,
        on_event: Option<OnEvent<'_>>,
    ) -> Result<Outcome, PlanError> {
        let started = Instant::now();
        if let Some(problem) = request.problem() {
            return Err(PlanError::InvalidRequest(problem));
        }
        let mut call = Call {
            request,
            catalog: &self.catalog,
            retriever: self.retriever.as_ref(),
            templates: &self.templates,
            model: self.model.as_ref(),
            investigator: self.investigator.as_deref(),
            schemas: &self.schemas,
            plan_id: Plan::new_id(),
            now: request.now.unwrap_or_else(Utc::now),
            started,
            selected: Vec::new(),
            agents: self.catalog.agents().iter().collect(),
            diagnostics: Diagnostics {
                model: self.model.name(),
                ..Diagnostics::default()
            },
            // The listener is borrowed for the call only, like the request and the planner.
            on_event: on_event.map(|listener| -> OnEvent<'_> { listener }),
            best: None,
            last_failure: None,
            model_failure: None,
        };

        if let Some(mut outcome) = triage::route(&mut call) {
            outcome.diagnostics.timings.total_us = micros(started);
            return Ok(outcome);
        }
        prompt::select_tools(&mut call);
        let mut context = prompt::prompt_context(&call);
        let history = prompt::history(&mut call);
        if request.options.triage
            && let Some(mut outcome) = triage::ask_model(&mut call, &history, &context).await?
        {
            outcome.diagnostics.timings.total_us = micros(started);
            return Ok(outcome);
        }
        // After triage: a request it answered or handed off needs no search.
        if request.options.investigate || self.investigate_always {
            context.findings = investigation::investigate(&mut call)
                .await
                .iter()
                .map(|f| format!("[{}] {}", f.source, f.text))
                .collect();
        }
        let prompt = prompt::render(&mut call, &context, history)?;
        generate::attempts(&mut call, &prompt).await?;

        // A clean answer in the tool-call format whose first call invents what a skipped
        // lookup returns gets that lookup first; one that leaves a part of the request without
        // a call gets one follow-up question per such part.
        if prompt.calls
            && call.model_failure.is_none()
            && let Some(candidate) = call.best.take()
        {
            // The first answer's calls are judged for redundancy; a follow-up's did a part.
            let (candidate, restructured) =
                follow_up::producer_first(&mut call, &prompt, candidate).await;
            // A first answer rebuilt around the call it skipped is judged no further: its
            // first call, now the second, would no longer be taken as the one it was.
            let first = if restructured {
                0
            } else {
                candidate.plan.steps.len()
            };
            let candidate = follow_up::follow_up(&mut call, &prompt, candidate).await;
            call.best = Some(follow_up::without_redundant(
                &request.query,
                candidate,
                first,
            ));
        }
        // A plan whose every call goes to a tool that does not fit the request asks instead.
        if call.model_failure.is_none()
            && let Some(candidate) = call.best.take()
        {
            call.best = Some(fit::check(&mut call, candidate).await);
        }

        let mut outcome = outcome::finish(call);
        if let Ok(outcome) = &mut outcome {
            outcome.diagnostics.timings.total_us = micros(started);
        }
        outcome
    }
}
