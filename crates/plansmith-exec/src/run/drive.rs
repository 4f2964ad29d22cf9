//! The scheduler loop: entering a run, renewing this node's leases while it goes, and the
//! turns that start and end attempts until the run replans, waits for people or finishes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use plansmith_store::{ExecStatus, PlanStore, RunSignal};

use super::config::MAX_TURNS;
use super::executor::{Entry, Executor};
use super::report::{ExecError, RunReport};
use super::state::{Ctx, Finished};
use crate::events::ExecEvent;

impl Executor {
    /// Drives the plan's run on this node until it ends or waits for people, renewing this
    /// node's leases meanwhile; what still runs here when it returns is stopped.
    pub(super) async fn drive(&self, plan_id: &str, entry: Entry) -> Result<RunReport, ExecError> {
        let mut ctx = Ctx::load(self, plan_id).await?;
        ctx.emit(ExecEvent::RunStarted {
            plan_id: plan_id.to_owned(),
            base_version: ctx.base_version,
            resumed: entry != Entry::Start,
            steps: ctx
                .plan
                .steps
                .iter()
                .map(|s| (s.id.clone(), s.title.clone()))
                .collect(),
        });
        let renewer = spawn_renewer(
            self.store.clone(),
            plan_id.to_owned(),
            self.config.node.clone(),
            self.config.lease,
            ctx.running_ids.clone(),
        );
        let report = ctx.run_loop().await;
        drop(renewer);
        ctx.running.abort_all();
        ctx.sync.flush().await;
        report
    }
}

/// Aborts its task when dropped (also when the run's future is dropped mid-way).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews this node's leases on its running steps every third of the lease.
fn spawn_renewer(
    store: PlanStore,
    plan_id: String,
    node: String,
    lease: Duration,
    running: Arc<Mutex<HashSet<String>>>,
) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        let every = (lease / 3).max(Duration::from_millis(50));
        loop {
            tokio::time::sleep(every).await;
            let ids: Vec<String> = match running.lock() {
                Ok(set) => set.iter().cloned().collect(),
                Err(_) => return,
            };
            if !ids.is_empty()
                && let Err(err) = store.exec_renew(&plan_id, &ids, &node, lease).await
            {
                tracing::warn!("renewing leases of {plan_id}: {err}");
            }
        }
    }))
}

impl Ctx<'_> {
    async fn run_loop(&mut self) -> Result<RunReport, ExecError> {
        for _turn in 0..MAX_TURNS {
            self.check_deadline();
            self.check_stop().await?;
            if self.abort.is_some() || self.stall.is_some() || self.cancelled_by_cap() {
                return self.finish().await;
            }
            self.skip_descendants().await?;
            self.apply_decisions().await?;
            if self.abort.is_some() {
                continue;
            }
            let ready = self.ready().await?;
            let free = self
                .ex
                .config
                .concurrency
                .saturating_sub(self.running.len());
            if free > 0
                && !ready.is_empty()
                && self.replan_wanted.is_empty()
                && self.capped.is_none()
            {
                let allowed = self.allowed(&ready, free).await?;
                if !allowed.is_empty() {
                    self.claim_and_start(&allowed, free).await?;
                }
            }
            if self.running.is_empty() {
                // A cap reached: what ran has ended, nothing new starts.
                if self.capped.is_some() {
                    return self.finish().await;
                }
                if self.all_terminal() || !self.replan_wanted.is_empty() {
                    if !self.replan_wanted.is_empty()
                        && self.stall.is_none()
                        && self.replan().await?
                    {
                        continue;
                    }
                    // "Done" means the goal was met: checked before the run completes.
                    if self.goal_check_due() && self.judge_goal().await? {
                        continue;
                    }
                    return self.finish().await;
                }
                // Nothing runs here: wait for backoffs, other nodes or people.
                if let Some(report) = self.idle().await? {
                    return Ok(report);
                }
                continue;
            }
            self.people_since = None;
            let next =
                tokio::time::timeout(self.ex.config.poll_interval, self.running.join_next()).await;
            if let Ok(Some(joined)) = next {
                self.on_joined(joined).await?;
                // Take everything else that ended meanwhile in the same turn.
                while let Some(Some(more)) =
                    futures::FutureExt::now_or_never(self.running.join_next())
                {
                    self.on_joined(more).await?;
                }
            }
            // A step failed under `"siblings": "cancel"`: the steps running beside it stop.
            if let Some(cause) = self.cancel_siblings.take() {
                self.stop_and_record(&format!("cancelled: {cause}")).await?;
            }
            if self.others_active() && self.last_refresh.elapsed() >= self.ex.config.poll_interval {
                self.refresh().await?;
            }
        }
        self.abort = Some("the scheduler reached its turn limit".into());
        self.finish().await
    }

    /// Looks (at most once per poll interval) for a request to stop the run
    /// (`PlanStore::request_stop`), which aborts the run, and for the plan's deletion.
    async fn check_stop(&mut self) -> Result<(), ExecError> {
        if self.abort.is_some()
            || self
                .last_stop_check
                .is_some_and(|at| at.elapsed() < self.ex.config.poll_interval)
        {
            return Ok(());
        }
        self.last_stop_check = Some(Instant::now());
        match self.ex.store.run_signal(&self.plan_id).await? {
            RunSignal::Continue => Ok(()),
            RunSignal::Stop(stop) => {
                self.abort = Some(if stop.note.is_empty() {
                    format!("stopped by {}", stop.actor)
                } else {
                    format!("stopped by {}: {}", stop.actor, stop.note)
                });
                Ok(())
            }
            RunSignal::Gone => Err(self.gone().await),
        }
    }

    async fn on_joined(
        &mut self,
        joined: Result<Finished, tokio::task::JoinError>,
    ) -> Result<(), ExecError> {
        match joined {
            Ok(finished) => self.on_finished(finished).await,
            // A panicking invoker: its lease expires and the step is taken over; nothing to
            // record here (the claim is lost with the task).
            Err(err) => {
                tracing::error!("an invoker task ended abnormally: {err}");
                Ok(())
            }
        }
    }

    /// Nothing runs on this node: waits for a backoff, other nodes or people. `Some(report)`
    /// when the run pauses waiting for people.
    async fn idle(&mut self) -> Result<Option<RunReport>, ExecError> {
        let now = Utc::now();
        let waits_on_people = self.view.values().any(|s| s.status == ExecStatus::Blocked);
        // A pending step on a failed or skipped dependency is skipped on the next turn.
        let to_skip = self.plan.steps.iter().any(|step| {
            self.status(&step.id) == Some(ExecStatus::Pending)
                && step.depends_on.iter().any(|d| {
                    matches!(
                        self.status(d),
                        Some(ExecStatus::Failed | ExecStatus::Skipped)
                    )
                })
        });
        let progressing = to_skip || !self.alive().is_empty();
        let only_people = waits_on_people
            && !self.view.values().any(|s| {
                matches!(s.status, ExecStatus::Running | ExecStatus::RetryWait)
                    || (s.status == ExecStatus::Pending && self.deps_met(&s.step_id))
            });
        if only_people {
            let since = *self.people_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= self.ex.config.wait_for_people {
                return self.pause().await.map(Some);
            }
        } else if !progressing {
            let mut left: Vec<&str> = self
                .view
                .values()
                .filter(|s| !s.status.is_terminal())
                .map(|s| s.step_id.as_str())
                .collect();
            left.sort_unstable();
            self.abort = Some(format!(
                "deadlocked: no step can progress ({} left)",
                left.join(", ")
            ));
            self.deadlocked = true;
            return Ok(None);
        }
        let next_retry = self
            .view
            .values()
            .filter(|s| s.status == ExecStatus::RetryWait)
            .filter_map(|s| s.not_before)
            .min()
            .map(|t| (t - now).to_std().unwrap_or(Duration::ZERO));
        let wait = next_retry.map_or(self.ex.config.poll_interval, |d| {
            d.min(self.ex.config.poll_interval)
        });
        tokio::time::sleep(wait).await;
        self.refresh().await?;
        Ok(None)
    }

    /// The steps that can still end without a person: running or waiting for a retry, or
    /// pending on dependencies that completed or can still complete themselves. A pending step
    /// on a dependency that failed, was skipped, or is not part of the run can never start.
    fn alive(&self) -> HashSet<String> {
        let mut alive: HashSet<String> = self
            .view
            .values()
            .filter(|s| matches!(s.status, ExecStatus::Running | ExecStatus::RetryWait))
            .map(|s| s.step_id.clone())
            .collect();
        // Each round adds the pending steps whose dependencies are all completed or alive; a
        // chain of n steps takes n rounds.
        for _ in 0..=self.plan.steps.len() {
            let more: Vec<String> = self
                .plan
                .steps
                .iter()
                .filter(|step| {
                    self.status(&step.id) == Some(ExecStatus::Pending)
                        && !alive.contains(&step.id)
                        && step.depends_on.iter().all(|d| {
                            self.status(d) == Some(ExecStatus::Completed) || alive.contains(d)
                        })
                })
                .map(|step| step.id.clone())
                .collect();
            if more.is_empty() {
                break;
            }
            alive.extend(more);
        }
        alive
    }

    fn others_active(&self) -> bool {
        self.view.values().any(|s| {
            s.status == ExecStatus::Running
                && s.lease_owner.as_deref() != Some(self.ex.config.node.as_str())
        })
    }

    fn all_terminal(&self) -> bool {
        self.plan
            .steps
            .iter()
            .all(|s| self.status(&s.id).is_none_or(ExecStatus::is_terminal))
    }

    fn deps_met(&self, id: &str) -> bool {
        self.plan.step(id).is_some_and(|s| {
            s.depends_on
                .iter()
                .all(|d| self.status(d) == Some(ExecStatus::Completed))
        })
    }
}
