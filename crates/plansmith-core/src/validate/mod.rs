//! Checks a parsed plan against the **full** catalog and the options, and fixes what can be fixed
//! without guessing. Returns the plan and every finding — partial success is not an error.
//!
//! Checks, in order: step ids; the dependency graph (unknown ids, cycles, topological order);
//! `max_steps` (keeping the closing reply); each action (tool names, dates written in the form
//! the schema asks for, every argument against the tool's JSON Schema with formats, agent
//! names, empty texts); `$ref`s (well-formed, an ancestor, and a path that fits the tool's
//! `output_schema`); schedules; approval policy.

mod action;
mod dates;
mod graph;
mod prune;
mod questions;
mod refs;
mod schedule;
mod tool;

use crate::catalog::Catalog;
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::Plan;
use crate::request::PlanOptions;

use action::check_action;
use graph::{check_graph, check_ids};
use prune::{enforce_max_steps, merge_duplicates};
use questions::check_questions;
use refs::check_refs;
use schedule::check_schedule;

/// Validates `plan`; see the module docs for what is checked and fixed.
pub fn validate(
    mut plan: Plan,
    catalog: &Catalog,
    options: &PlanOptions,
) -> (Plan, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let answered = plan.has_enough_context == Some(true);
    if plan.steps.is_empty() && plan.questions.is_empty() && plan.guidance.is_none() && !answered {
        diags.push(Diagnostic::error(
            Code::EmptyPlan,
            "/steps",
            "the plan has no steps",
        ));
        return (plan, diags);
    }
    // Every step's action is checked even when the ids or the graph are broken: a caller that
    // drops the steps blamed for a graph error must not keep an unchecked step beside them.
    let graph_ok = check_ids(&plan, &mut diags) && check_graph(&mut plan, &mut diags);
    if graph_ok {
        merge_duplicates(&mut plan, &mut diags);
        enforce_max_steps(&mut plan, options.max_steps, &mut diags);
    }
    for idx in 0..plan.steps.len() {
        check_action(&mut plan, idx, catalog, &mut diags);
    }
    if !graph_ok {
        return (plan, diags);
    }
    check_refs(&mut plan, catalog, &mut diags);
    check_questions(&mut plan, catalog, &mut diags);
    for (idx, step) in plan.steps.iter().enumerate() {
        if let Some(schedule) = &step.schedule {
            check_schedule(schedule, idx, step, options, &mut diags);
        }
    }
    (plan, diags)
}
