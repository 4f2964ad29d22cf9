//! Clarifying questions: a question that unblocks nothing is dropped.

use serde_json::json;

use crate::catalog::Catalog;
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Action, Plan};

/// A question must unblock something: when it names a step and an argument, the step must be a
/// tool step whose tool has that parameter and has no value for it yet. Questions that fail this
/// are dropped with a warning (small models ask about values they already wrote).
pub(super) fn check_questions(plan: &mut Plan, catalog: &Catalog, diags: &mut Vec<Diagnostic>) {
    let mut kept = Vec::new();
    let mut dropped_any = false;
    for (idx, question) in std::mem::take(&mut plan.questions).into_iter().enumerate() {
        let moot = match (&question.step, &question.argument) {
            (Some(step_id), Some(argument)) => match plan.step(step_id).map(|s| &s.action) {
                None => Some(format!("names step `{step_id}`, which is not in the plan")),
                Some(Action::Tool { name, arguments }) => {
                    let known = catalog
                        .tool(name)
                        .is_none_or(|t| t.tool.parameter_names().contains(&argument.as_str()));
                    if !known {
                        Some(format!(
                            "asks for `{argument}`, which tool `{name}` does not take"
                        ))
                    } else if arguments.contains_key(argument) {
                        Some(format!(
                            "asks for `{argument}`, which step `{step_id}` already has"
                        ))
                    } else {
                        None
                    }
                }
                Some(_) => None,
            },
            (Some(step_id), None) if plan.step(step_id).is_none() => {
                Some(format!("names step `{step_id}`, which is not in the plan"))
            }
            _ => None,
        };
        match moot {
            Some(why) => {
                dropped_any = true;
                diags.push(
                    Diagnostic::warning(
                        Code::AutoFixed,
                        format!("/questions/{idx}"),
                        format!("dropped a question that {why}"),
                    )
                    .with_value(json!(question.text)),
                );
            }
            None => kept.push(question),
        }
    }
    plan.questions = kept;
    if dropped_any && plan.questions.is_empty() && plan.guidance.is_none() {
        plan.ready = true;
    }
}
