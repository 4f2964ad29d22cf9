//! Which steps run next: descendants of failed or skipped steps are skipped, ready steps are
//! found in plan order (gated ones block until approved), and claimed under leases.

use chrono::{DateTime, Utc};
use plansmith_store::{ExecStatus, ExecStep, StepVerdict};

use super::report::ExecError;
use super::state::Ctx;
use crate::events::ExecEvent;
use crate::policy::needs_approval;

impl Ctx<'_> {
    /// Skips steps whose dependency failed or was skipped.
    pub(super) async fn skip_descendants(&mut self) -> Result<(), ExecError> {
        if !self.replan_wanted.is_empty()
            || !self
                .view
                .values()
                .any(|s| matches!(s.status, ExecStatus::Failed | ExecStatus::Skipped))
        {
            return Ok(());
        }
        for _ in 0..self.plan.steps.len().max(1) {
            // Read first (no clones of the steps), then write.
            let to_skip: Vec<(String, String)> = self
                .plan
                .steps
                .iter()
                .filter(|step| {
                    matches!(
                        self.status(&step.id),
                        Some(ExecStatus::Pending | ExecStatus::Blocked | ExecStatus::RetryWait)
                    )
                })
                .filter_map(|step| {
                    step.depends_on
                        .iter()
                        .find_map(|dep| match self.status(dep) {
                            Some(s @ (ExecStatus::Failed | ExecStatus::Skipped)) => {
                                Some((step.id.clone(), format!("dependency {dep} {}", s.as_str())))
                            }
                            _ => None,
                        })
                })
                .collect();
            let mut changed = false;
            for (id, note) in to_skip {
                changed |= self.set_status(&id, ExecStatus::Skipped, &note).await?;
            }
            if !changed {
                break;
            }
        }
        Ok(())
    }

    /// Whether this node may claim the step of `row` at `now`: pending, past its retry
    /// backoff, or running on another node whose lease expired.
    fn claimable(&self, row: &ExecStep, now: DateTime<Utc>) -> bool {
        match row.status {
            ExecStatus::Pending => true,
            ExecStatus::RetryWait => row.not_before.is_none_or(|t| t <= now),
            ExecStatus::Running => {
                row.lease_owner.as_deref() != Some(self.ex.config.node.as_str())
                    && row.lease_until.is_some_and(|t| t < now)
            }
            _ => false,
        }
    }

    /// Steps that may be claimed now, in plan order; gated ones without approval get blocked.
    pub(super) async fn ready(&mut self) -> Result<Vec<String>, ExecError> {
        let now = Utc::now();
        let mut ready = Vec::new();
        let mut decisions: Option<Vec<plansmith_store::StepDecision>> = None;
        let candidates: Vec<usize> = self
            .plan
            .steps
            .iter()
            .enumerate()
            .filter(|(_, step)| {
                self.view
                    .get(&step.id)
                    .is_some_and(|row| self.claimable(row, now))
            })
            .map(|(idx, _)| idx)
            .collect();
        for idx in candidates {
            let Some(step) = self.plan.steps.get(idx).cloned() else {
                continue;
            };
            let step = &step;
            let Some(row) = self.view.get(&step.id) else {
                continue;
            };
            if !self.claimable(row, now)
                || !step
                    .depends_on
                    .iter()
                    .all(|d| self.status(d) == Some(ExecStatus::Completed))
            {
                continue;
            }
            if step.schedule.as_ref().is_some_and(|s| s.is_recurring()) {
                self.set_status(
                    &step.id,
                    ExecStatus::Skipped,
                    "recurring schedules are not run by the executor",
                )
                .await?;
                continue;
            }
            let gated = !self.ex.config.approve_all
                && row.status == ExecStatus::Pending
                && !self.approved.contains(&step.id)
                && needs_approval(&self.plan, &step.id, &self.ex.config.require_approval);
            if gated {
                if decisions.is_none() {
                    decisions = Some(self.ex.store.step_decisions(&self.plan_id).await?);
                }
                let decided = decisions
                    .as_ref()
                    .and_then(|d| d.iter().find(|d| d.step_id == step.id))
                    .map(|d| d.verdict);
                // Without a decision in this run, an approval that outlives runs may hold:
                // for the tool in this plan, or for this exact call.
                let standing = match (&decided, &step.action) {
                    (None, plansmith_core::Action::Tool { name, arguments }) => {
                        self.ex
                            .store
                            .standing_approval(
                                &self.plan_id,
                                name,
                                &serde_json::Value::Object(arguments.clone()),
                            )
                            .await?
                    }
                    _ => None,
                };
                if let Some(standing) = &standing {
                    tracing::info!(
                        "step {} of {}: approved for the {} by {} (standing approval)",
                        step.id,
                        self.plan_id,
                        standing.scope.as_str(),
                        standing.actor
                    );
                }
                match decided {
                    Some(StepVerdict::Approve) => {
                        self.approved.insert(step.id.clone());
                    }
                    None if standing.is_some() => {
                        self.approved.insert(step.id.clone());
                    }
                    _ => {
                        // Blocked; a recorded denial is applied on the next turn.
                        self.set_status(&step.id, ExecStatus::Blocked, "waiting for approval")
                            .await?;
                        continue;
                    }
                }
            }
            ready.push(step.id.clone());
        }
        Ok(ready)
    }

    pub(super) async fn claim_and_start(
        &mut self,
        ready: &[String],
        free: usize,
    ) -> Result<(), ExecError> {
        let claims = self
            .ex
            .store
            .exec_claim(
                &self.plan_id,
                self.base_version,
                ready,
                &self.ex.config.node,
                self.ex.config.lease,
                free,
            )
            .await?;
        if claims.len() < ready.len().min(free) {
            // Someone else holds some of them: give back the calls taken for them, and look
            // again soon.
            let not_claimed: Vec<String> = ready
                .iter()
                .take(free)
                .filter(|id| !claims.iter().any(|c| &c.step_id == *id))
                .cloned()
                .collect();
            self.return_untaken(&not_claimed).await?;
            self.refresh().await?;
        }
        let results = self.results();
        for claim in claims {
            let Some(step) = self.plan.step(&claim.step_id).cloned() else {
                continue;
            };
            if let Some(row) = self.view.get_mut(&claim.step_id) {
                row.status = ExecStatus::Running;
                row.attempt = claim.attempt;
                row.lease_owner = Some(self.ex.config.node.clone());
            }
            if let Ok(mut ids) = self.running_ids.lock() {
                ids.insert(claim.step_id.clone());
            }
            self.sync.step(
                &claim.step_id,
                ExecStatus::Running,
                None,
                None,
                &format!("attempt {}", claim.attempt),
            );
            self.emit(ExecEvent::StepStarted {
                step_id: claim.step_id.clone(),
                attempt: claim.attempt,
                idempotency_key: claim.idempotency_key.clone(),
                rerun: claim.rerun,
            });
            self.spawn_attempt(claim, &step, &results);
        }
        Ok(())
    }
}
