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
            _ => [row.error.as_deref(), Some(row.note.as_str())]
                .into_iter()
                .flatten()
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join("; "),
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
