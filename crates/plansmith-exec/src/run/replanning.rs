//! Replanning during a run: the planner is asked again with the observations
//! ([`Planner::replan`](plansmith_core::Planner::replan), the replan of every front end),
//! completed steps are kept, and the rest becomes a new version of the plan the run goes on
//! with.

use plansmith_core::Feedback;
use plansmith_core::OutcomeStatus;
use plansmith_core::replan::Replanned;
use plansmith_store::{Change, ExecStatus, StepSeed, Trigger};
use serde_json::Value;

use super::report::ExecError;
use super::state::Ctx;
use crate::events::ExecEvent;
use crate::fingerprint::call_fingerprint;
use crate::refs::preview;

impl Ctx<'_> {
    /// Replans the rest of the plan from the observations. False when it could not (the run
    /// then ends failed or stalled).
    pub(super) async fn replan(&mut self) -> Result<bool, ExecError> {
        let Some(planner) = self.planner.clone() else {
            return Ok(false);
        };
        if !self
            .ex
            .store
            .exec_claim_run(&self.plan_id, &self.ex.config.node, self.ex.config.lease)
            .await?
        {
            // Another node decides; follow it.
            tokio::time::sleep(self.ex.config.poll_interval).await;
            self.refresh().await?;
            self.replan_wanted.clear();
            return Ok(true);
        }
        self.sync.flush().await;
        let observations = self.observations();
        let stored = self.ex.store.get(&self.plan_id).await?;
        let mut previous = self.plan.clone();
        for step in &mut previous.steps {
            if let Some(row) = self.view.get(&step.id) {
                step.status = row.status.step_status();
                step.result = row.result.clone();
                step.error = row.error.clone();
            }
        }
        let request = stored.replan_request(Feedback {
            previous: Some(previous),
            text: Some(match self.goal_gaps.take() {
                Some(gaps) => format!(
                    "The steps ran, but parts of the request are not done yet: {}. The \
                     completed steps are kept with their results; plan only the missing work, \
                     referring to completed steps by their ids.",
                    gaps.join("; ")
                ),
                None => "Some steps failed while the plan ran. The completed steps are kept \
                         with their results; plan only the remaining work, referring to \
                         completed steps by their ids."
                    .into(),
            }),
            diagnostics: Vec::new(),
            observations: observations.clone(),
        });
        let reason_prefix = self.replan_wanted.join("; ");
        self.replan_wanted.clear();
        let results = self.results();
        let replanned = planner.replan(&request, &results, None).await;
        if let Ok(replanned) = &replanned {
            let usage = replanned.outcome.diagnostics.usage;
            self.spend_tokens(u64::from(usage.prompt_tokens) + u64::from(usage.completion_tokens))
                .await?;
        }
        let replanned = match replanned {
            // A replan that lost steps would run less than the request asks, unreviewed.
            Ok(Replanned {
                outcome:
                    plansmith_core::Outcome {
                        status: OutcomeStatus::Incomplete { reason, .. },
                        ..
                    },
                ..
            }) => {
                self.abort = Some(format!(
                    "{reason_prefix}; the replanned plan is incomplete: {reason}"
                ));
                self.release_run().await?;
                return Ok(false);
            }
            Ok(replanned) if replanned.planned > 0 => replanned,
            Ok(_) => {
                self.abort = Some(format!("{reason_prefix}; the replan produced no steps"));
                self.release_run().await?;
                return Ok(false);
            }
            Err(err) => {
                self.abort = Some(format!("{reason_prefix}; replanning failed: {err}"));
                self.release_run().await?;
                return Ok(false);
            }
        };
        if let Some(error) = replanned.diagnostics.iter().find(|d| d.is_error()) {
            self.abort = Some(format!(
                "{reason_prefix}; the replanned plan is invalid: {error}"
            ));
            self.release_run().await?;
            return Ok(false);
        }
        let checked = replanned.outcome.plan;
        // Stall: the new plan repeats a call that already failed.
        if let Some(step) = checked.steps.iter().find(|s| {
            replanned.added.contains(&s.id)
                && self.failed_calls.contains(&call_fingerprint(&s.action))
        }) {
            self.stall = Some(format!(
                "stalled: the replanned plan repeats the failed call of step {} ({})",
                step.id, step.title
            ));
            self.release_run().await?;
            return Ok(false);
        }
        let written = self
            .ex
            .store
            .write(Change {
                expected_version: stored.version(),
                plan: checked,
                state: stored.state,
                review: stored.review.clone(),
                trigger: Trigger::Replan,
                actor: format!("executor@{}", self.ex.config.node),
            })
            .await?;
        let seeds: Vec<StepSeed> = written
            .plan
            .steps
            .iter()
            .map(|s| StepSeed {
                step_id: s.id.clone(),
                completed: results.get(&s.id).cloned(),
            })
            .collect();
        self.ex
            .store
            .exec_replan(&self.plan_id, written.version(), &seeds)
            .await?;
        self.release_run().await?;
        self.replans += 1;
        self.base_version = written.version();
        self.plan = written.plan;
        self.approved.clear();
        self.view = self
            .ex
            .store
            .exec_steps(&self.plan_id)
            .await?
            .into_iter()
            .map(|s| (s.step_id.clone(), s))
            .collect();
        self.restrict_to_view();
        self.emit(ExecEvent::Replanned {
            version: self.base_version,
            kept: replanned.kept,
            added: replanned.added,
            steps: self
                .plan
                .steps
                .iter()
                .map(|s| (s.id.clone(), s.title.clone()))
                .collect(),
            replans: self.replans,
        });
        Ok(true)
    }

    fn observations(&self) -> Vec<String> {
        self.plan
            .steps
            .iter()
            .filter_map(|step| {
                let row = self.view.get(&step.id)?;
                let what = match (&step.action, row.status) {
                    (_, ExecStatus::Completed) => format!(
                        "completed; result: {}",
                        preview(row.result.as_ref().unwrap_or(&Value::Null), 400)
                    ),
                    (_, ExecStatus::Failed) => format!(
                        "failed after {} attempt(s): {}",
                        row.attempt,
                        row.error.as_deref().unwrap_or("unknown error")
                    ),
                    (_, status) => format!("{} {}", status.as_str(), row.note),
                };
                Some(format!("step {} \"{}\": {what}", step.id, step.title))
            })
            .collect()
    }
}
