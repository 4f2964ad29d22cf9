//! One run's state on this node ([`Ctx`]): the plan, the view of its steps' rows in the
//! execution log, the attempts running here, and what the loop has decided so far; with the
//! reads and writes of that state the other parts share.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plansmith_core::{Catalog, Plan, Planner};
use plansmith_store::{Claim, ExecStatus, ExecStep, RunBudget};
use serde_json::Value;
use tokio::task::JoinSet;

use super::doc_sync::DocSync;
use super::executor::Executor;
use super::report::ExecError;
use crate::events::ExecEvent;
use crate::invoke::InvokeError;
use crate::refs::RefError;
use plansmith_store::StopReason;

/// Why an attempt failed, as the scheduler sees it.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) message: String,
    pub(super) retryable: bool,
    /// The plan expected something the results do not have: a replan trigger.
    pub(super) contradiction: bool,
    /// The tool waits for a person's answer ([`InvokeError::asks`]).
    pub(super) asks: Option<Box<crate::invoke::TaskInput>>,
}

impl From<InvokeError> for Failure {
    fn from(err: InvokeError) -> Failure {
        Failure {
            message: err.message,
            retryable: err.retryable,
            contradiction: false,
            asks: err.asks,
        }
    }
}

impl From<RefError> for Failure {
    fn from(err: RefError) -> Failure {
        Failure {
            message: err.0,
            retryable: false,
            contradiction: true,
            asks: None,
        }
    }
}

/// An attempt's end, as its task gives it back.
pub(super) struct Finished {
    pub(super) claim: Claim,
    pub(super) outcome: Result<Value, Failure>,
    pub(super) elapsed: Duration,
    /// Model tokens the attempt spent (a task step's model call).
    pub(super) tokens: u64,
}

/// One run as this node drives it.
pub(super) struct Ctx<'a> {
    pub(super) ex: &'a Executor,
    /// The catalog of this plan: its own when it was made with one, or the executor's.
    pub(super) catalog: Catalog,
    /// The planner that replans this plan, when the executor replans.
    pub(super) planner: Option<Arc<Planner>>,
    pub(super) plan_id: String,
    pub(super) plan: Plan,
    pub(super) base_version: u32,
    pub(super) view: HashMap<String, ExecStep>,
    pub(super) running: JoinSet<Finished>,
    pub(super) running_ids: Arc<Mutex<HashSet<String>>>,
    pub(super) approved: HashSet<String>,
    pub(super) replans: u32,
    /// Failure fingerprint → the replan round it was first seen in.
    pub(super) failures_seen: HashMap<String, u32>,
    /// Calls that failed past their policy.
    pub(super) failed_calls: HashSet<String>,
    pub(super) replan_wanted: Vec<String>,
    pub(super) abort: Option<String>,
    pub(super) stall: Option<String>,
    /// The run's budget, as last read or spent (`None`: a run recorded without one).
    pub(super) budget: Option<RunBudget>,
    /// A cap was reached: nothing new starts, and the run ends with this reason.
    pub(super) capped: Option<(StopReason, String)>,
    /// Why the run ended `aborted`, when it was not a person or a policy: steps left that
    /// nothing can start.
    pub(super) deadlocked: bool,
    /// A replan was wanted past the cap on replans.
    pub(super) replans_capped: bool,
    /// A step failed under `"siblings": "cancel"`: the steps running beside it are stopped,
    /// with this cause.
    pub(super) cancel_siblings: Option<String>,
    /// The goal check's last verdict, and the plan version it judged.
    pub(super) goal: Option<(u32, super::goal::GoalVerdict)>,
    /// The gaps the next replan is asked to fill (a goal check's `needs_revision`).
    pub(super) goal_gaps: Option<Vec<String>>,
    /// Why the goal check found the goal not met, when it ends the run failed.
    pub(super) goal_unmet: Option<String>,
    pub(super) started: Instant,
    pub(super) people_since: Option<Instant>,
    pub(super) last_refresh: Instant,
    /// When a request to stop the run was last looked for (`None`: not yet).
    pub(super) last_stop_check: Option<Instant>,
    pub(super) sync: DocSync,
}

impl<'a> Ctx<'a> {
    pub(super) async fn load(ex: &'a Executor, plan_id: &str) -> Result<Ctx<'a>, ExecError> {
        let run = ex
            .store
            .exec_run(plan_id)
            .await?
            .ok_or_else(|| ExecError::NothingToResume {
                id: plan_id.to_owned(),
                why: "it never ran".into(),
            })?;
        let stored = ex.store.get(plan_id).await?;
        let steps = ex.store.exec_steps(plan_id).await?;
        let (catalog, planner) = match (&ex.planners, &stored.review.catalog) {
            (Some(planners), Some(_)) => {
                let own = planners.for_review(&ex.store, &stored.review).await?;
                (own.catalog().clone(), ex.planner.as_ref().map(|_| own))
            }
            _ => (ex.catalog.clone(), ex.planner.clone()),
        };
        let mut ctx = Ctx {
            ex,
            catalog,
            planner,
            plan_id: plan_id.to_owned(),
            plan: stored.plan,
            base_version: run.base_version,
            view: steps.into_iter().map(|s| (s.step_id.clone(), s)).collect(),
            running: JoinSet::new(),
            running_ids: Arc::new(Mutex::new(HashSet::new())),
            approved: HashSet::new(),
            replans: run.replans,
            failures_seen: HashMap::new(),
            failed_calls: HashSet::new(),
            replan_wanted: Vec::new(),
            abort: None,
            stall: None,
            budget: ex.store.exec_budget(plan_id).await?,
            capped: None,
            deadlocked: false,
            replans_capped: false,
            cancel_siblings: None,
            goal: None,
            goal_gaps: None,
            goal_unmet: None,
            started: Instant::now(),
            people_since: None,
            last_refresh: Instant::now(),
            last_stop_check: None,
            sync: DocSync::spawn(
                ex.store.clone(),
                plan_id.to_owned(),
                format!("executor@{}", ex.config.node),
                ex.config.sync_document,
                ex.on_document.clone(),
            ),
        };
        ctx.restrict_to_view();
        Ok(ctx)
    }

    /// Steps of the document without a row (a document edited after the run started) are
    /// not part of the run.
    pub(super) fn restrict_to_view(&mut self) {
        let view = &self.view;
        self.plan.steps.retain(|s| view.contains_key(&s.id));
    }

    pub(super) fn emit(&self, event: ExecEvent) {
        if let Some(observer) = &self.ex.observer {
            observer(&self.plan_id, &event);
        }
    }

    pub(super) fn status(&self, id: &str) -> Option<ExecStatus> {
        self.view.get(id).map(|s| s.status)
    }

    pub(super) fn results(&self) -> HashMap<String, Value> {
        self.view
            .values()
            .filter(|s| s.status == ExecStatus::Completed)
            .map(|s| (s.step_id.clone(), s.result.clone().unwrap_or(Value::Null)))
            .collect()
    }

    pub(super) async fn refresh(&mut self) -> Result<(), ExecError> {
        self.last_refresh = Instant::now();
        if let Some(run) = self.ex.store.exec_run(&self.plan_id).await?
            && run.base_version != self.base_version
        {
            // Another node replanned: take its plan.
            self.base_version = run.base_version;
            self.replans = run.replans;
            self.plan = self.ex.store.get(&self.plan_id).await?.plan;
        }
        let steps = self.ex.store.exec_steps(&self.plan_id).await?;
        let local: HashSet<String> = self
            .running_ids
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        for step in steps {
            // Our own running rows are ours to update.
            if !local.contains(&step.step_id) {
                self.view.insert(step.step_id.clone(), step);
            }
        }
        self.restrict_to_view();
        Ok(())
    }

    pub(super) async fn set_status(
        &mut self,
        id: &str,
        status: ExecStatus,
        note: &str,
    ) -> Result<bool, ExecError> {
        let changed = self
            .ex
            .store
            .exec_set_status(&self.plan_id, id, status, note)
            .await?;
        if changed {
            if let Some(row) = self.view.get_mut(id) {
                row.status = status;
                row.note = note.to_owned();
            }
            self.sync.step(id, status, None, None, note);
            if matches!(
                status,
                ExecStatus::Skipped | ExecStatus::Blocked | ExecStatus::Failed
            ) {
                self.emit(ExecEvent::StepEnded {
                    step_id: id.to_owned(),
                    status,
                    reason: note.to_owned(),
                });
            }
        }
        Ok(changed)
    }

    /// The plan was deleted while it ran: stops the running steps (their tasks are dropped)
    /// and records nothing, there is nowhere to.
    pub(super) async fn gone(&mut self) -> ExecError {
        self.stop_running().await;
        ExecError::Deleted {
            id: self.plan_id.clone(),
        }
    }

    /// Stops this process's running steps (their tasks are dropped: a command tool's process
    /// is killed) and returns their ids.
    pub(super) async fn stop_running(&mut self) -> Vec<String> {
        self.running.abort_all();
        while self.running.join_next().await.is_some() {}
        self.running_ids
            .lock()
            .map(|mut ids| ids.drain().collect())
            .unwrap_or_default()
    }

    pub(super) async fn release_run(&self) -> Result<(), ExecError> {
        Ok(self
            .ex
            .store
            .exec_release_run(&self.plan_id, &self.ex.config.node)
            .await?)
    }
}
