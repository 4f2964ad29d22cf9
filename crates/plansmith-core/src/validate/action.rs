//! Each step's action: tool steps (see the tool checks), agent names and queries, reply texts,
//! and tasks that say what they do.

use serde_json::json;

use super::tool::check_tool;
use crate::catalog::Catalog;
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Action, Plan};

fn step_pointer(idx: usize) -> String {
    format!("/steps/{idx}")
}

pub(super) fn check_action(
    plan: &mut Plan,
    idx: usize,
    catalog: &Catalog,
    diags: &mut Vec<Diagnostic>,
) {
    let Some(step) = plan.steps.get_mut(idx) else {
        return;
    };
    let base = step_pointer(idx);
    let step_id = step.id.clone();
    match &mut step.action {
        Action::Tool { .. } => check_tool(step, &base, catalog, diags),
        Action::Agent { agent, query } => {
            if catalog.agent(agent).is_none() {
                let available: Vec<&str> =
                    catalog.agents().iter().map(|a| a.name.as_str()).collect();
                let message = if available.is_empty() {
                    format!("agent `{agent}` is not available: no agents are configured")
                } else {
                    format!(
                        "agent `{agent}` is not available; available agents: {}",
                        available.join(", ")
                    )
                };
                diags.push(
                    Diagnostic::error(Code::UnknownAgent, format!("{base}/action/agent"), message)
                        .with_step(step_id.clone())
                        .with_value(json!(agent)),
                );
            }
            if query.trim().is_empty() {
                diags.push(
                    Diagnostic::error(
                        Code::InvalidStep,
                        format!("{base}/action/query"),
                        "agent task has an empty query",
                    )
                    .with_step(step_id),
                );
            }
        }
        Action::Reply { text } => {
            if text.trim().is_empty() {
                diags.push(
                    Diagnostic::error(
                        Code::InvalidStep,
                        format!("{base}/action/text"),
                        "reply step has an empty text",
                    )
                    .with_step(step_id),
                );
            }
        }
        Action::Task { .. } => {
            if step.title.trim().is_empty() && step.description.trim().is_empty() {
                diags.push(
                    Diagnostic::error(
                        Code::InvalidStep,
                        base,
                        "task step has neither title nor description",
                    )
                    .with_step(step_id),
                );
            }
        }
    }
}
