//! How a run ends: paused waiting for people, or finished (what still runs is stopped, the
//! summary is written, and one node records the end state); and the report it returns.

use std::collections::BTreeMap;

use plansmith_store::{Claim, ExecStatus, ExecStep, RunState, StepEnd};
use serde_json::{Value, json};

use super::report::{ExecError, RunReport, StepReport};
use super::state::Ctx;
use crate::events::ExecEvent;
use crate::summary;
use plansmith_store::StopReason;

impl Ctx<'_> {
    /// The run pauses: only people can unblock it.
    pub(super) async fn pause(&mut self) -> Result<RunReport, ExecError> {
        self.sync.flush().await;
        let blocked: Vec<String> = self
            .view
            .values()
            .filter(|s| s.status == ExecStatus::Blocked)
            .map(|s| s.step_id.clone())
            .collect();
        let reason = format!("waiting for a decision on {}", blocked.join(", "));
        let report = self.report(RunState::Waiting, Some(reason), String::new(), None);
        let value = serde_json::to_value(&report).unwrap_or(Value::Null);
        self.ex
            .store
            .exec_set_run_state(&self.plan_id, RunState::Waiting, Some(&value))
            .await?;
        self.emit(ExecEvent::RunFinished {
            state: RunState::Waiting,
            stop_reason: None,
            reason: report.reason.clone(),
            summary: String::new(),
            counts: self.counts(),
        });
        Ok(report)
    }

    /// Ends the run: stops what runs, marks what is left, writes the summary and the state.
    pub(super) async fn finish(&mut self) -> Result<RunReport, ExecError> {
        if self.abort.is_some() || self.stall.is_some() || self.capped.is_some() {
            // Under a cap that lets running steps end, none runs by now.
            let why = self.stopped_why().unwrap_or_default();
            self.stop_and_record(&format!("stopped: {why}")).await?;
            self.refresh().await?;
            let open: Vec<String> = self
                .view
                .values()
                .filter(|s| !s.status.is_terminal())
                .map(|s| s.step_id.clone())
                .collect();
            for id in open {
                self.set_status(&id, ExecStatus::Skipped, &format!("not run: {why}"))
                    .await?;
            }
        }
        // Only one node finishes a run; the others read its report.
        let mut acquired = false;
        for _ in 0..600 {
            if self
                .ex
                .store
                .exec_claim_run(&self.plan_id, &self.ex.config.node, self.ex.config.lease)
                .await?
            {
                acquired = true;
                break;
            }
            match self.ex.store.exec_run(&self.plan_id).await? {
                Some(run) if run.state.is_final() => break,
                Some(_) => {}
                None => return Err(self.gone().await),
            }
            tokio::time::sleep(self.ex.config.poll_interval).await;
        }
        self.refresh().await?;
        if self.budget.is_some() {
            // What every node spent, for the report.
            self.budget = self.ex.store.exec_budget(&self.plan_id).await?;
        }
        let (state, stop_reason) = self.end_state();
        let reason = self
            .stopped_why()
            .or_else(|| self.goal_unmet.clone())
            .or_else(|| {
                (state == RunState::Failed).then(|| {
                    let failed: Vec<&str> = self
                        .view
                        .values()
                        .filter(|s| s.status == ExecStatus::Failed)
                        .map(|s| s.step_id.as_str())
                        .collect();
                    let mut why = format!("failed step(s): {}", failed.join(", "));
                    if self.replans_capped {
                        why.push_str(&format!(
                            "; a replan was needed past the cap of {} replans",
                            self.max_replans()
                        ));
                    }
                    why
                })
            });
        if !acquired
            && let Some(run) = self.ex.store.exec_run(&self.plan_id).await?
            && run.state.is_final()
            && let Some(outcome) = run.outcome
        {
            let summary = outcome
                .get("summary")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let reason = outcome
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_owned);
            return Ok(self.report(run.state, reason, summary, run.stop_reason));
        }
        let rows: Vec<ExecStep> = self.ordered_rows();
        let summary = summary::compose(self.ex.summary_model.as_ref(), &self.plan, &rows).await;
        let report = self.report(state, reason, summary, Some(stop_reason));
        let value = serde_json::to_value(&report).unwrap_or(Value::Null);
        // The plan document first, the run's end state second: a node dying between the two
        // leaves the run `running`, so another node finishes it and writes both. (The other
        // order once left a run ended in the log but not in the plan, which nobody repaired.)
        self.sync.meta(
            "last_run",
            json!({"state": state, "stop_reason": stop_reason, "reason": report.reason,
                   "summary": report.summary, "goal_check": report.goal_check}),
        );
        self.sync.flush().await;
        let first = self
            .ex
            .store
            .exec_set_run_state(&self.plan_id, state, Some(&value))
            .await?;
        self.release_run().await?;
        if first {
            self.emit(ExecEvent::RunFinished {
                state,
                stop_reason: Some(stop_reason),
                reason: report.reason.clone(),
                summary: report.summary.clone(),
                counts: self.counts(),
            });
        }
        Ok(report)
    }

    /// Stops this process's running steps and records each as skipped with `error` (their
    /// end, as any attempt's, reaches the document and the watchers).
    pub(super) async fn stop_and_record(&mut self, error: &str) -> Result<(), ExecError> {
        let running = self.stop_running().await;
        for id in running {
            // Our own running attempt, stopped: recorded as skipped.
            if let Some(row) = self.view.get(&id) {
                let claim = Claim {
                    step_id: id.clone(),
                    attempt: row.attempt,
                    idempotency_key: plansmith_store::idempotency_key(
                        &self.plan_id,
                        self.base_version,
                        &id,
                        row.attempt,
                    ),
                    rerun: false,
                    remote_task: None,
                };
                let event = ExecEvent::StepEnded {
                    step_id: id.clone(),
                    status: ExecStatus::Skipped,
                    reason: error.to_owned(),
                };
                self.record_end(
                    &claim,
                    StepEnd::Skipped(error.to_owned()),
                    "stopped".into(),
                    event,
                )
                .await?;
            }
        }
        Ok(())
    }

    fn ordered_rows(&self) -> Vec<ExecStep> {
        self.plan
            .steps
            .iter()
            .filter_map(|s| self.view.get(&s.id).cloned())
            .collect()
    }

    fn counts(&self) -> Value {
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for row in self.view.values() {
            *counts.entry(row.status.as_str()).or_default() += 1;
        }
        json!(counts)
    }

    /// Why the run was stopped before its steps ended, if it was: stalled, capped or aborted.
    fn stopped_why(&self) -> Option<String> {
        self.stall
            .clone()
            .or_else(|| self.capped.as_ref().map(|(_, why)| why.clone()))
            .or_else(|| self.abort.clone())
    }

    /// The run's end state and why it stopped.
    fn end_state(&self) -> (RunState, StopReason) {
        if self.stall.is_some() {
            (RunState::Stalled, StopReason::Stalled)
        } else if let Some((reason, _)) = &self.capped {
            (RunState::Aborted, *reason)
        } else if self.abort.is_some() {
            let reason = if self.deadlocked {
                StopReason::Deadlocked
            } else {
                StopReason::Aborted
            };
            (RunState::Aborted, reason)
        } else if self.goal_unmet.is_some()
            || self.view.values().any(|s| s.status == ExecStatus::Failed)
        {
            let reason = if self.replans_capped {
                StopReason::ReplansCapped
            } else {
                StopReason::Failed
            };
            (RunState::Failed, reason)
        } else {
            (RunState::Completed, StopReason::Completed)
        }
    }

    fn report(
        &self,
        state: RunState,
        reason: Option<String>,
        summary: String,
        stop_reason: Option<StopReason>,
    ) -> RunReport {
        RunReport {
            plan_id: self.plan_id.clone(),
            state,
            reason,
            stop_reason,
            budget: self.budget.clone(),
            goal_check: self.goal.as_ref().map(|(_, verdict)| verdict.clone()),
            summary,
            steps: self
                .plan
                .steps
                .iter()
                .filter_map(|step| {
                    let row = self.view.get(&step.id)?;
                    Some(StepReport {
                        id: step.id.clone(),
                        title: step.title.clone(),
                        status: row.status,
                        attempts: row.attempt,
                        result: row.result.clone(),
                        error: row.error.clone(),
                        note: row.note.clone(),
                    })
                })
                .collect(),
            replans: self.replans,
            base_version: self.base_version,
            elapsed_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }
}
