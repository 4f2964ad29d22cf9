//! The approvals a run waits for, all at once ([`Service::pending_approvals`]), and a decision
//! about every one of them in one go ([`Service::decide_pending`]).

use plansmith_core::Action;
use plansmith_store::{ExecStatus, Remember, StepVerdict};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::review::{Decided, Decision};
use crate::{Result, Service};

/// A gated step that waits for a person's approval.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The step.
    pub step_id: String,
    /// Its title.
    pub title: String,
    /// The tool it calls (`agent:NAME` for an agent, `task:KIND` for a task).
    pub tool: String,
    /// Its arguments as the plan writes them (`$ref`s to earlier results included).
    pub arguments: Value,
    /// Whether the plan flags it (a destructive tool) rather than only the runner's settings.
    pub flagged: bool,
}

impl Service {
    /// Every step of plan `id`'s run that waits for an approval, in plan order.
    pub async fn pending_approvals(&self, id: &str) -> Result<Vec<PendingApproval>> {
        let stored = self.store.get(id).await?;
        let rows = self.store.exec_steps(id).await?;
        Ok(stored
            .plan
            .steps
            .iter()
            .filter(|step| {
                // Blocked without an error: gated, not failed under the `ask` policy.
                rows.iter().any(|row| {
                    row.step_id == step.id
                        && row.status == ExecStatus::Blocked
                        && row.error.is_none()
                })
            })
            .map(|step| {
                let (tool, arguments) = match &step.action {
                    Action::Tool { name, arguments } => {
                        (name.clone(), Value::Object(arguments.clone()))
                    }
                    Action::Agent { agent, query } => (
                        format!("agent:{agent}"),
                        serde_json::json!({"query": query}),
                    ),
                    Action::Task { kind, .. } => (format!("task:{kind}"), Value::Null),
                    Action::Reply { text } => ("reply".to_owned(), Value::String(text.clone())),
                };
                PendingApproval {
                    step_id: step.id.clone(),
                    title: step.title.clone(),
                    tool,
                    arguments,
                    flagged: step.requires_approval,
                }
            })
            .collect())
    }

    /// Approves or denies every approval plan `id`'s run waits for (or those of `steps`),
    /// each as its own step decision, approvals remembered as `remember` says; the decisions,
    /// in plan order. Nothing pending is not an error: the answer is empty.
    pub async fn decide_pending(
        &self,
        id: &str,
        steps: Option<&[String]>,
        verdict: StepVerdict,
        remember: Remember,
        note: &str,
        actor: &str,
    ) -> Result<Vec<Decided>> {
        let pending = self.pending_approvals(id).await?;
        let mut decided = Vec::new();
        for approval in pending {
            if steps.is_some_and(|only| !only.contains(&approval.step_id)) {
                continue;
            }
            let decision = Decision::Step {
                step: approval.step_id,
                verdict,
                note: note.to_owned(),
                remember,
            };
            decided.push(self.decide(id, decision, None, actor, None).await?);
        }
        Ok(decided)
    }
}
