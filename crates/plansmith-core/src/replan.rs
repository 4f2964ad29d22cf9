//! Replanning: the next version of a plan from a new plan of the same request, one
//! implementation for every replan — after a person's edit or answers (nothing is kept) and
//! after a run's failure (the completed steps are kept with their results).

use std::collections::HashMap;

use serde_json::Value;

use crate::pipeline::{OnEvent, Outcome, PlanError, Planner};
pub use crate::plan::{Merged, next_version};
use crate::request::PlanRequest;
use crate::validate::validate;
use crate::{Diagnostic, Plan};

/// A replan's result: the planner's outcome, whose plan is the next version, and what happened
/// to the steps.
#[derive(Debug)]
#[non_exhaustive]
pub struct Replanned {
    /// How planning ended; its plan is the next version ([`next_version`]).
    pub outcome: Outcome,
    /// How many steps the planner's new plan had, before the kept steps joined it.
    pub planned: usize,
    /// Completed steps kept from the previous plan.
    pub kept: Vec<String>,
    /// Steps still to run.
    pub added: Vec<String>,
    /// The next version's findings against the planner's catalog, when steps were kept (the
    /// planner's own plan was checked by the pipeline; the joined one is checked here).
    pub diagnostics: Vec<Diagnostic>,
}

impl Planner {
    /// Replans `request`, whose feedback holds the previous plan: plans it, then makes the next
    /// version of the previous plan ([`next_version`]) keeping the `completed` steps (step id →
    /// result; empty after a person's edit) in front of the new ones, checked against this
    /// planner's catalog when any were kept. Planning's events go to `on_event`.
    pub async fn replan(
        &self,
        request: &PlanRequest,
        completed: &HashMap<String, Value>,
        on_event: Option<OnEvent<'_>>,
    ) -> Result<Replanned, PlanError> {
        let mut outcome = match on_event {
            Some(on_event) => self.plan_with_events(request, on_event).await?,
            None => self.plan(request).await?,
        };
        let planned = outcome.plan.steps.len();
        let Some(previous) = request.feedback.as_ref().and_then(|f| f.previous.as_ref()) else {
            let added = outcome.plan.steps.iter().map(|s| s.id.clone()).collect();
            return Ok(Replanned {
                outcome,
                planned,
                kept: Vec::new(),
                added,
                diagnostics: Vec::new(),
            });
        };
        let new = std::mem::replace(&mut outcome.plan, Plan::new("", ""));
        let merged = next_version(previous, completed, new);
        let mut diagnostics = Vec::new();
        outcome.plan = if merged.kept.is_empty() {
            merged.plan
        } else {
            let (checked, found) = validate(merged.plan, self.catalog(), &request.options);
            diagnostics = found;
            checked
        };
        Ok(Replanned {
            outcome,
            planned,
            kept: merged.kept,
            added: merged.added,
            diagnostics,
        })
    }
}
