//! The final answer of a run, composed from the actual results (OpenManus's finalize): a
//! model's summary when a model is configured, else (or when it fails) a plain rendering.

use std::sync::Arc;

use plansmith_core::{Action, CompletionRequest, LanguageModel, Message, Plan};
use plansmith_store::{ExecStatus, ExecStep};

use crate::refs::preview;

/// A plain rendering: the goal, then one line per step with its status and result.
pub fn plain(plan: &Plan, steps: &[ExecStep]) -> String {
    let mut out = format!("Goal: {}\n", plan.goal);
    for step in &plan.steps {
        let Some(row) = steps.iter().find(|r| r.step_id == step.id) else {
            continue;
        };
        let detail = match row.status {
            ExecStatus::Completed => match (&step.action, &row.result) {
                (Action::Reply { .. }, Some(result)) => result
                    .get("text")
                    .and_then(|t| t.as_str())
                    .map(str::to_owned)
                    .unwrap_or_else(|| preview(result, 300)),
                (_, Some(result)) => preview(result, 300),
                (_, None) => String::new(),
            },
            // The error, then the note unless the error says it already (a stopped step:
            // "stopped: stopped by cli: …", note "stopped").
            _ => {
                let mut text = row.error.clone().unwrap_or_default();
                let note = row.note.as_str();
                if !note.is_empty() && !text.contains(note) {
                    if !text.is_empty() {
                        text.push_str("; ");
                    }
                    text.push_str(note);
                }
                text
            }
        };
        out.push_str(&format!(
            "- [{}] {} ({}): {}\n",
            step.id,
            step.title,
            row.status.as_str(),
            detail
        ));
    }
    out
}

/// The model's summary of the results, or [`plain`] when the model fails or says nothing.
pub async fn compose(
    model: Option<&Arc<dyn LanguageModel>>,
    plan: &Plan,
    steps: &[ExecStep],
) -> String {
    let rendering = plain(plan, steps);
    let Some(model) = model else {
        return rendering;
    };
    let request = CompletionRequest {
        messages: vec![
            Message::system(
                "Write the final answer for the user from the results of the plan's steps. \
                 Use only the results shown; say plainly which steps failed or were skipped.",
            ),
            Message::user(rendering.clone()),
        ],
        constraint: None,
        max_tokens: 512,
        temperature: 0.0,
    };
    match model.complete(request).await {
        Ok(completion) if !completion.text.trim().is_empty() => completion.text.trim().to_owned(),
        Ok(_) => rendering,
        Err(err) => {
            tracing::warn!("summary model failed, using the plain rendering: {err}");
            rendering
        }
    }
}

#[cfg(test)]
mod tests {
    use plansmith_core::Step;
    use serde_json::json;

    use super::*;

    fn row(id: &str, status: ExecStatus, error: Option<&str>, note: &str) -> ExecStep {
        ExecStep {
            step_id: id.into(),
            status,
            attempt: 1,
            reruns: 0,
            result: None,
            error: error.map(str::to_owned),
            note: note.into(),
            lease_owner: None,
            lease_until: None,
            not_before: None,
        }
    }

    #[test]
    fn a_step_line_says_the_error_then_a_note_it_does_not_repeat() {
        let mut plan = Plan::new("p", "the goal");
        plan.steps = serde_json::from_value::<Vec<Step>>(json!([
            {"id": "s1", "title": "long", "action": {"type": "reply", "text": "x"}},
            {"id": "s2", "title": "next", "action": {"type": "reply", "text": "y"}},
            {"id": "s3", "title": "flaky", "action": {"type": "reply", "text": "z"}}
        ]))
        .unwrap();
        let text = plain(
            &plan,
            &[
                row(
                    "s1",
                    ExecStatus::Skipped,
                    Some("stopped: stopped by cli: interrupted (Ctrl-C)"),
                    "stopped",
                ),
                row("s2", ExecStatus::Skipped, None, "not run: stopped by cli"),
                row(
                    "s3",
                    ExecStatus::Failed,
                    Some("exit 1"),
                    "gave up after 3 attempts",
                ),
            ],
        );
        assert!(
            text.contains("- [s1] long (skipped): stopped: stopped by cli: interrupted (Ctrl-C)\n"),
            "{text}"
        );
        assert!(
            text.contains("- [s2] next (skipped): not run: stopped by cli\n"),
            "{text}"
        );
        assert!(
            text.contains("- [s3] flaky (failed): exit 1; gave up after 3 attempts\n"),
            "{text}"
        );
    }
}
