//! How a step's fate is decided: people's decisions about blocked steps, and the failure
//! policy applied to a failed attempt (retry, fail, skip, abort, ask a person or replan).

use chrono::Utc;
use plansmith_core::Step;
use plansmith_store::{Claim, ExecStatus, StepEnd, StepVerdict};

use super::report::ExecError;
use super::state::{Ctx, Failure};
use crate::events::ExecEvent;
use crate::fingerprint::{call_fingerprint, failure_fingerprint};
use crate::policy::{OnFailure, Siblings, policy_for};

impl Ctx<'_> {
    /// Applies people's decisions about blocked steps.
    pub(super) async fn apply_decisions(&mut self) -> Result<(), ExecError> {
        let any_blocked = self.view.values().any(|s| s.status == ExecStatus::Blocked);
        if !any_blocked {
            return Ok(());
        }
        let decisions = self.ex.store.step_decisions(&self.plan_id).await?;
        for decision in decisions {
            if self.status(&decision.step_id) != Some(ExecStatus::Blocked) {
                continue;
            }
            let who = if decision.note.is_empty() {
                format!("by {}", decision.actor)
            } else {
                format!("by {}: {}", decision.actor, decision.note)
            };
            let id = decision.step_id.clone();
            match decision.verdict {
                StepVerdict::Approve => {
                    self.approved.insert(id.clone());
                    self.set_status(&id, ExecStatus::Pending, &format!("approved {who}"))
                        .await?;
                }
                StepVerdict::Retry => {
                    // A step whose tool asked a person: the note is the answer.
                    if !decision.note.trim().is_empty() {
                        self.ex
                            .store
                            .exec_task_answer(&self.plan_id, &id, &decision.note)
                            .await?;
                    }
                    self.ex
                        .store
                        .consume_step_decision(&self.plan_id, &id)
                        .await?;
                    self.set_status(&id, ExecStatus::Pending, &format!("retry {who}"))
                        .await?;
                }
                StepVerdict::Deny | StepVerdict::Skip => {
                    let what = if decision.verdict == StepVerdict::Deny {
                        "denied"
                    } else {
                        "skipped"
                    };
                    self.set_status(&id, ExecStatus::Skipped, &format!("{what} {who}"))
                        .await?;
                }
                StepVerdict::Abort => {
                    self.set_status(&id, ExecStatus::Failed, &format!("aborted {who}"))
                        .await?;
                    self.abort = Some(format!("step {id} aborted {who}"));
                }
            }
        }
        Ok(())
    }

    /// Applies the step's policy to a failed attempt: the end to record and the event.
    pub(super) fn on_failure(
        &mut self,
        step: &Step,
        claim: &Claim,
        failure: Failure,
    ) -> (StepEnd, ExecEvent) {
        let (policy, problems) = policy_for(&self.plan, &step.id, self.ex.config.policy);
        for problem in problems {
            tracing::warn!("plan {}: ignoring {problem}", self.plan_id);
        }
        if failure.retryable && policy.may_retry(claim.attempt) {
            let delay = policy.delay(claim.attempt + 1);
            let not_before = Utc::now()
                + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::seconds(1));
            return (
                StepEnd::Retry {
                    error: failure.message.clone(),
                    not_before,
                },
                ExecEvent::StepRetrying {
                    step_id: step.id.clone(),
                    attempt: claim.attempt,
                    error: failure.message,
                    delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                },
            );
        }
        let error = format!(
            "{} (attempt {} of {})",
            failure.message,
            claim.attempt,
            policy.retries + 1
        );
        let fingerprint = failure_fingerprint(&step.action, &failure.message);
        if let Some(round) = self.failures_seen.get(&fingerprint)
            && *round < self.replans
        {
            self.stall = Some(format!(
                "stalled: step {} failed the same way as before the replan ({})",
                step.id, failure.message
            ));
        }
        self.failures_seen
            .entry(fingerprint)
            .or_insert(self.replans);
        self.failed_calls.insert(call_fingerprint(&step.action));
        let can_replan = self.planner.is_some() && self.replans < self.max_replans();
        if self.planner.is_some()
            && !can_replan
            && (failure.contradiction || policy.on_failure == OnFailure::Replan)
        {
            self.replans_capped = true;
        }
        let action = if failure.contradiction && can_replan {
            OnFailure::Replan
        } else {
            policy.on_failure
        };
        // A step that fails for good (`fail`, or `replan`) stops the steps beside it under
        // `"siblings": "cancel"` (`abort` stops them all anyway; `skip` and `ask` let the run go on).
        if matches!(action, OnFailure::Fail | OnFailure::Replan)
            && policy.siblings == Siblings::Cancel
        {
            self.cancel_siblings = Some(format!("step {} failed", step.id));
        }
        let ended = |status: ExecStatus, reason: &str| ExecEvent::StepEnded {
            step_id: step.id.clone(),
            status,
            reason: reason.to_owned(),
        };
        match action {
            OnFailure::Skip => (
                StepEnd::Skipped(error.clone()),
                ended(ExecStatus::Skipped, &error),
            ),
            OnFailure::Ask => (
                StepEnd::Blocked(error.clone()),
                ended(ExecStatus::Blocked, &error),
            ),
            OnFailure::Abort => {
                self.abort = Some(format!(
                    "step {} failed under the abort policy: {error}",
                    step.id
                ));
                (
                    StepEnd::Failed(error.clone()),
                    ended(ExecStatus::Failed, &error),
                )
            }
            OnFailure::Replan if can_replan => {
                self.replan_wanted
                    .push(format!("step {} ({}) failed: {error}", step.id, step.title));
                (
                    StepEnd::Failed(error.clone()),
                    ended(ExecStatus::Failed, &error),
                )
            }
            OnFailure::Replan | OnFailure::Fail => (
                StepEnd::Failed(error.clone()),
                ended(ExecStatus::Failed, &error),
            ),
        }
    }
}
