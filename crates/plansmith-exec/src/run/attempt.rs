//! One attempt of a step: its arguments prepared, its invoker called on a task of its own with
//! progress reports, its result checked, and its end recorded in the store, fenced by the lease.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use plansmith_core::{Action, Step};
use plansmith_store::{Claim, ExecStatus, RunSignal, StepEnd};
use serde_json::Value;

use super::report::ExecError;
use super::state::{Ctx, Failure, Finished};
use crate::events::{ExecEvent, Observer};
use crate::invoke::{Call, CallProgress};
use crate::refs::{check_output, preview, resolve};

impl Ctx<'_> {
    /// Starts one attempt of a claimed step on its own task: `$ref`s filled, the invoker
    /// called with progress reports, the result checked against the tool's `output_schema`.
    pub(super) fn spawn_attempt(
        &mut self,
        claim: Claim,
        step: &Step,
        results: &HashMap<String, Value>,
    ) {
        let inputs: BTreeMap<String, Value> = step
            .depends_on
            .iter()
            .filter_map(|d| results.get(d).map(|r| (d.clone(), r.clone())))
            .collect();
        let prepared = self.prepare(step, results);
        let invokers = self.ex.invokers.clone();
        let output_schema = match &step.action {
            Action::Tool { name, .. } => self
                .catalog
                .tool(name)
                .and_then(|t| t.tool.output_schema.clone()),
            _ => None,
        };
        let call = Call {
            plan_id: self.plan_id.clone(),
            step_id: step.id.clone(),
            title: step.title.clone(),
            description: step.description.clone(),
            attempt: claim.attempt,
            idempotency_key: claim.idempotency_key.clone(),
            action: step.action.clone(),
            goal: self.plan.goal.clone(),
            inputs,
            tokens: crate::invoke::TokenMeter::default(),
            remote_task: claim.remote_task.clone(),
            input: None,
        };
        let store = self.ex.store.clone();
        // Only a later attempt can follow one whose tool asked a person (a first attempt, or a
        // re-run of one, has nothing to take: no store read for them).
        let may_answer = !claim.rerun && claim.attempt > 1;
        let meter = call.tokens.clone();
        let timeout = crate::policy::policy_for(&self.plan, &step.id, self.ex.config.policy)
            .0
            .timeout;
        let reporter = Reporter {
            observer: self.ex.observer.clone(),
            store: self.ex.store.clone(),
            plan_id: self.plan_id.clone(),
            step_id: step.id.clone(),
            attempt: claim.attempt,
            idempotency_key: claim.idempotency_key.clone(),
            last: Mutex::new(None),
        };
        self.running.spawn(async move {
            let begun = Instant::now();
            let outcome = match prepared {
                Err(failure) => Err(failure),
                Ok(action) => {
                    let mut call = Call { action, ..call };
                    // A person answered what the tool's task asked an earlier attempt: this
                    // attempt answers the task and follows it (a re-run of it too). An answer
                    // that cannot be read fails the attempt, retryable: calling the tool anew
                    // would drop it.
                    let taken = if may_answer {
                        store
                            .exec_take_task_input(&call.plan_id, &call.step_id)
                            .await
                            .map_err(|err| {
                                crate::invoke::InvokeError::transient(format!(
                                    "the answer to the step's question could not be read: {err}"
                                ))
                            })
                    } else {
                        Ok(None)
                    };
                    let taken = match taken {
                        Ok(taken) => taken,
                        Err(err) => {
                            return Finished {
                                claim,
                                outcome: Err(Failure::from(err)),
                                elapsed: begun.elapsed(),
                                tokens: 0,
                            };
                        }
                    };
                    if let Some((task, requests, answer)) = taken {
                        if let Err(err) = store
                            .exec_remember_task(&call.plan_id, &call.idempotency_key, &task)
                            .await
                        {
                            tracing::warn!(%err, "the task of an answered step was not recorded");
                        }
                        call.remote_task = Some(task.clone());
                        call.input = Some(crate::invoke::TaskInput {
                            task,
                            requests,
                            answer,
                        });
                    }
                    let report = |progress: CallProgress| reporter.report(progress);
                    let invoked = invokers.invoke_reporting(&call, &report);
                    // Past the step's timeout the call is dropped (a command tool's
                    // processes are killed with it) and the attempt fails, retryable.
                    let invoked = match timeout {
                        Some(limit) => match tokio::time::timeout(limit, invoked).await {
                            Ok(invoked) => invoked,
                            Err(_) => Err(crate::invoke::InvokeError::transient(format!(
                                "timed out after {} s (the step's timeout)",
                                limit.as_secs_f64()
                            ))),
                        },
                        None => invoked.await,
                    };
                    match invoked {
                        Ok(value) => {
                            match output_schema {
                                Some(schema) => check_output(&schema, &value)
                                    .map(|()| value)
                                    .map_err(|message| Failure {
                                        message,
                                        retryable: false,
                                        contradiction: true,
                                        asks: None,
                                    }),
                                None => Ok(value),
                            }
                        }
                        Err(err) => Err(Failure::from(err)),
                    }
                }
            };
            Finished {
                claim,
                outcome,
                elapsed: begun.elapsed(),
                tokens: meter.spent(),
            }
        });
    }

    /// The step's action with `$ref`s filled and, for catalog tools, checked arguments.
    fn prepare(&self, step: &Step, results: &HashMap<String, Value>) -> Result<Action, Failure> {
        match &step.action {
            Action::Tool { name, arguments } => {
                let resolved = resolve(&Value::Object(arguments.clone()), results)?;
                if let Some(entry) = self.catalog.tool(name) {
                    let problems = entry.argument_problems(&resolved, 3);
                    if !problems.is_empty() {
                        return Err(Failure {
                            message: format!(
                                "arguments of `{name}` do not fit its input schema: {}",
                                problems.join("; ")
                            ),
                            retryable: false,
                            contradiction: true,
                            asks: None,
                        });
                    }
                }
                Ok(Action::Tool {
                    name: name.clone(),
                    arguments: resolved.as_object().cloned().unwrap_or_default(),
                })
            }
            other => Ok(other.clone()),
        }
    }

    pub(super) async fn on_finished(&mut self, finished: Finished) -> Result<(), ExecError> {
        let Finished {
            claim,
            outcome,
            elapsed,
            tokens,
        } = finished;
        self.spend_tokens(tokens).await?;
        if let Ok(mut ids) = self.running_ids.lock() {
            ids.remove(&claim.step_id);
        }
        let step = self.plan.step(&claim.step_id).cloned();
        let Some(step) = step else {
            return Ok(());
        };
        if outcome.is_ok()
            && let Some(key) = plansmith_core::estimate::history_key(&step.action)
        {
            let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
            // The times estimates read; a store that cannot take them costs the run nothing.
            if let Err(err) = self.ex.store.exec_record_time(&key, ms, tokens).await {
                tracing::warn!("recording the time of step {}: {err}", step.id);
            }
        }
        let (end, event) = match outcome {
            Ok(value) => {
                let event = ExecEvent::StepCompleted {
                    step_id: claim.step_id.clone(),
                    attempt: claim.attempt,
                    elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                    preview: preview(&value, 200),
                };
                (StepEnd::Completed(value), event)
            }
            // The tool's task waits for a person: the step waits for their answer (a `retry`
            // decision whose note is the answer), whatever its failure policy.
            Err(Failure {
                message,
                asks: Some(asks),
                ..
            }) => {
                self.ex
                    .store
                    .exec_task_asks(&self.plan_id, &step.id, &asks.task, &asks.requests)
                    .await?;
                let error =
                    format!("{message} (answer with a retry decision whose note is the answer)");
                let event = ExecEvent::StepEnded {
                    step_id: step.id.clone(),
                    status: ExecStatus::Blocked,
                    reason: error.clone(),
                };
                (StepEnd::Blocked(error), event)
            }
            Err(failure) => self.on_failure(&step, &claim, failure),
        };
        let note = match &end {
            StepEnd::Completed(_) | StepEnd::Failed(_) => String::new(),
            StepEnd::Retry { .. } => format!("attempt {} failed", claim.attempt),
            StepEnd::Skipped(_) => "skipped by policy".to_owned(),
            StepEnd::Blocked(_) => "waiting: decide retry, skip or abort".to_owned(),
        };
        self.record_end(&claim, end, note, event).await
    }

    /// Records how this node's attempt ended (fenced by its lease), then tells the view, the
    /// document and the observers (`event`). A write refused because the plan was deleted
    /// meanwhile ends the run ([`ExecError::Deleted`]); one refused because another node took
    /// the step over is only logged.
    pub(super) async fn record_end(
        &mut self,
        claim: &Claim,
        end: StepEnd,
        note: String,
        event: ExecEvent,
    ) -> Result<(), ExecError> {
        let held = self
            .ex
            .store
            .exec_finish(&self.plan_id, claim, &self.ex.config.node, &end, &note)
            .await?;
        if !held {
            // Its row is gone with the plan when the plan was deleted while the step ran.
            if matches!(
                self.ex.store.run_signal(&self.plan_id).await?,
                RunSignal::Gone
            ) {
                return Err(self.gone().await);
            }
            tracing::warn!(
                "step {} of {}: lease lost before the attempt ended; another node owns it",
                claim.step_id,
                self.plan_id
            );
            self.refresh().await?;
            return Ok(());
        }
        let (status, result, error) = match &end {
            StepEnd::Completed(value) => (ExecStatus::Completed, Some(value.clone()), None),
            StepEnd::Retry { error, not_before } => {
                if let Some(row) = self.view.get_mut(&claim.step_id) {
                    row.not_before = Some(*not_before);
                }
                (ExecStatus::RetryWait, None, Some(error.clone()))
            }
            StepEnd::Failed(error) => (ExecStatus::Failed, None, Some(error.clone())),
            StepEnd::Skipped(error) => (ExecStatus::Skipped, None, Some(error.clone())),
            StepEnd::Blocked(error) => (ExecStatus::Blocked, None, Some(error.clone())),
        };
        if let Some(row) = self.view.get_mut(&claim.step_id) {
            row.status = status;
            row.result = result.clone();
            row.error = error.clone();
            row.note = note.clone();
            row.lease_owner = None;
            row.lease_until = None;
        }
        self.sync.step(&claim.step_id, status, result, error, &note);
        self.emit(event);
        Ok(())
    }
}

/// Most [`ExecEvent::StepProgress`] events per step: one every this long (a tool may report
/// many times a second; the reports between are dropped).
pub const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Turns a running attempt's progress reports into [`ExecEvent::StepProgress`], at most one
/// per [`PROGRESS_EVERY`].
struct Reporter {
    observer: Option<Observer>,
    store: plansmith_store::PlanStore,
    plan_id: String,
    step_id: String,
    attempt: u32,
    idempotency_key: String,
    last: Mutex<Option<Instant>>,
}

impl Reporter {
    fn report(&self, progress: CallProgress) {
        if let Some(task) = progress.task {
            // Kept with the attempt, so that a re-run follows the task. (A node that dies
            // before this write lands calls the tool again: at-least-once, as without tasks.)
            let (store, plan, key) = (
                self.store.clone(),
                self.plan_id.clone(),
                self.idempotency_key.clone(),
            );
            tokio::spawn(async move {
                if let Err(err) = store.exec_remember_task(&plan, &key, &task).await {
                    tracing::warn!(%err, %key, "the remote task of an attempt was not recorded");
                }
            });
            return;
        }
        let Some(observer) = &self.observer else {
            return;
        };
        if let Ok(mut last) = self.last.lock() {
            if last.is_some_and(|at| at.elapsed() < PROGRESS_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        observer(
            &self.plan_id,
            &ExecEvent::StepProgress {
                step_id: self.step_id.clone(),
                attempt: self.attempt,
                progress: progress.progress,
                total: progress.total,
                message: progress.message,
            },
        );
    }
}
