//! Running plans: the [`Runner`] of a process (the executor, the runs it takes part in, the
//! worker that joins the store's running runs) and the service's run operations.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plansmith_exec::{Executor, RunReport};
use plansmith_store::{Budget, ExecRun, RunState};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{Result, Service, ServiceError};

/// How [`Service::run`] enters a plan's run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStart {
    /// A new run, with caps of its own over the runner's (an empty [`Budget`]: the runner's).
    /// Its caps are stored with it: every resume keeps to them.
    New(Budget),
    /// The plan's unfinished run, after a crash or a decision, under the caps it started with.
    Resume,
}

impl RunStart {
    /// What a front end's run request asks for: a new run with `budget` (none: the runner's
    /// caps), or a resume, which takes no caps ([`plansmith_store::StoreError::BadEdit`] when
    /// it is given some: a run's caps are set when it starts).
    pub fn of(resume: bool, budget: Option<Budget>) -> Result<RunStart> {
        match (resume, budget) {
            (false, budget) => Ok(RunStart::New(budget.unwrap_or_default())),
            (true, None) => Ok(RunStart::Resume),
            (true, Some(_)) => Err(plansmith_store::StoreError::BadEdit(
                "a run's caps are set when it starts: a resumed run keeps the caps it started \
                 with (start a new run for other caps; completed steps keep their results)"
                    .into(),
            )
            .into()),
        }
    }
}

/// The executor of a process and the runs it takes part in on background tasks. Cheap to
/// clone: clones share the runs.
#[derive(Clone)]
pub struct Runner {
    executor: Executor,
    /// The plans whose runs this process takes part in; after [`Runner::shut_down`], those it
    /// left in progress.
    active: Arc<Mutex<HashSet<String>>>,
    /// The runs' tasks and the worker, waited for by [`Runner::shut_down`].
    tasks: TaskTracker,
    /// Cancelled by [`Runner::shut_down`]: the runs and the worker stop, no run starts.
    stopping: CancellationToken,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("executor", &self.executor)
            .finish_non_exhaustive()
    }
}

/// A plan whose run a task of this process takes part in: it leaves [`Runner`]'s `active`
/// set when the task ends, also by a panic, unless `plan_id` was taken (left in progress).
struct TakingPart {
    active: Arc<Mutex<HashSet<String>>>,
    plan_id: Option<String>,
}

impl Drop for TakingPart {
    fn drop(&mut self) {
        if let Some(plan_id) = self.plan_id.take()
            && let Ok(mut active) = self.active.lock()
        {
            active.remove(&plan_id);
        }
    }
}

impl Runner {
    /// A runner over `executor` (with its observers, catalog and planners already set).
    pub fn new(executor: Executor) -> Runner {
        Runner {
            executor,
            active: Arc::default(),
            tasks: TaskTracker::new(),
            stopping: CancellationToken::new(),
        }
    }

    /// The executor.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// Takes part in the plan's run on a background task, unless this process already does
    /// or is shutting down.
    pub fn spawn_join(&self, plan_id: &str, resume: bool) {
        if self.stopping.is_cancelled() {
            return;
        }
        let Ok(mut active) = self.active.lock() else {
            return;
        };
        if !active.insert(plan_id.to_owned()) {
            return;
        }
        let runner = self.clone();
        let plan_id = plan_id.to_owned();
        self.tasks.spawn(async move {
            // However the task ends, a panic included, the plan leaves `active`, so that the
            // worker joins its run again; except when the runner stops (below).
            let mut taking_part = TakingPart {
                active: runner.active.clone(),
                plan_id: Some(plan_id.clone()),
            };
            let run = async {
                if resume {
                    runner.executor.resume(&plan_id).await.map(Some)
                } else {
                    runner.executor.join(&plan_id).await
                }
            };
            let result = tokio::select! {
                result = run => result,
                // Left in progress: it stays in `active` for `shut_down` to report.
                () = runner.stopping.cancelled() => {
                    taking_part.plan_id = None;
                    return;
                }
            };
            if let Err(err) = result {
                tracing::warn!("run of plan {plan_id}: {err}");
            }
        });
    }

    /// Resumes the plan's run on this process if it waits for people (after a step decision
    /// that applies now); a run in any other state is left to whoever drives it.
    pub async fn resume_if_waiting(&self, plan_id: &str) {
        if let Ok(Some(run)) = self.executor.store().exec_run(plan_id).await
            && run.state == RunState::Waiting
        {
            self.spawn_join(plan_id, true);
        }
    }

    /// Every `every` (bounded pages of 100 per round): joins the store's running runs, so a
    /// run started on another process, or left by a process that died, is carried on here;
    /// and resumes the runs paused for people once someone decided (through this process,
    /// another one, or `plansmith plans decide`), so nobody has to ask for the resume. It ends
    /// with [`Runner::shut_down`].
    pub fn spawn_worker(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let runner = self.clone();
        let stopping = self.stopping.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = runner.work(every) => {}
                () = stopping.cancelled() => {}
            }
        })
    }

    /// The worker's rounds (see [`Runner::spawn_worker`]).
    async fn work(&self, every: Duration) {
        loop {
            match self.executor.store().exec_active_runs(100).await {
                Ok(runs) => {
                    for run in runs {
                        self.spawn_join(&run.plan_id, false);
                    }
                }
                Err(err) => tracing::warn!("worker: listing runs: {err}"),
            }
            match self.executor.store().exec_decided_runs(100).await {
                Ok(runs) => {
                    for run in runs {
                        self.spawn_join(&run.plan_id, true);
                    }
                }
                Err(err) => tracing::warn!("worker: listing paused runs: {err}"),
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Stops taking part in runs, for a process that shuts down: the worker stops, no run
    /// starts here any more, and each run this process takes part in is left where it
    /// stands. Its running steps here are dropped (a command tool's processes are killed),
    /// their leases given up ([`PlanStore::exec_release`]), and the run stays in progress in
    /// the store: another process on the store carries it on at once, re-running those steps
    /// with the same idempotency keys (this one, when it starts again: its worker joins the
    /// running runs). Returns the plans whose runs were left, once every task has ended, so
    /// that the store can close.
    ///
    /// [`PlanStore::exec_release`]: plansmith_store::PlanStore::exec_release
    pub async fn shut_down(&self) -> Vec<String> {
        self.stopping.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        let mut left: Vec<String> = self
            .active
            .lock()
            .map(|active| active.iter().cloned().collect())
            .unwrap_or_default();
        left.sort();
        let node = &self.executor.config().node;
        for plan_id in &left {
            // Not fatal: the leases then run out by themselves.
            if let Err(err) = self.executor.store().exec_release(plan_id, node).await {
                tracing::warn!("run of plan {plan_id}: cannot give its leases up: {err}");
            }
        }
        left
    }
}

impl Service {
    /// Runs plans with `runner`: [`Service::run`] starts runs on it, and a decision or a stop
    /// that a run paused for people waits for wakes the run on it at once, whichever front end
    /// it came through.
    pub fn with_runner(mut self, runner: Runner) -> Service {
        self.runner = Some(runner);
        self
    }

    /// The runner, when this service runs plans.
    pub fn runner(&self) -> Option<&Runner> {
        self.runner.as_ref()
    }

    /// Starts a run of plan `id` (or continues its unfinished run) on the runner's background
    /// tasks, and answers the run as it stands once it is recorded. Refused before anything
    /// runs: [`ServiceError::NoExecutor`] without a runner,
    /// [`ExecError::NotRunnable`](plansmith_exec::ExecError::NotRunnable) for a plan not
    /// accepted or without steps, a run already in progress
    /// ([`plansmith_store::StoreError::RunActive`]), or nothing to resume
    /// ([`ExecError::NothingToResume`](plansmith_exec::ExecError::NothingToResume)).
    pub async fn run(&self, id: &str, start: RunStart) -> Result<ExecRun> {
        let runner = self.runner.as_ref().ok_or(ServiceError::NoExecutor)?;
        let resume = matches!(start, RunStart::Resume);
        let run = match &start {
            RunStart::Resume => runner.executor.unfinished_run(id).await?,
            RunStart::New(budget) => runner.executor.start_with(id, budget).await?,
        };
        runner.spawn_join(id, resume);
        Ok(run)
    }

    /// Runs plan `id` (or its unfinished run) in the caller's task, to its end or until it
    /// waits for people: for a front end that shows the run as it goes (the command line).
    /// Refused as [`Service::run`] is.
    pub async fn run_here(&self, id: &str, start: RunStart) -> Result<RunReport> {
        let runner = self.runner.as_ref().ok_or(ServiceError::NoExecutor)?;
        Ok(match &start {
            RunStart::Resume => runner.executor.resume(id).await?,
            RunStart::New(budget) => runner.executor.run_with(id, budget).await?,
        })
    }

    /// Wakes the run of plan `id`, paused for people, on this service's runner.
    pub(crate) fn wake(&self, id: &str) {
        if let Some(runner) = self.runner.clone() {
            let id = id.to_owned();
            tokio::spawn(async move { runner.resume_if_waiting(&id).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run task that panics still gives its plan up, so that the worker joins the run
    /// again; one left in progress (its plan taken) keeps it.
    #[tokio::test]
    async fn a_run_task_that_panics_gives_its_plan_up() {
        let active: Arc<Mutex<HashSet<String>>> = Arc::default();
        active
            .lock()
            .unwrap()
            .extend(["p1".to_owned(), "p2".to_owned()]);
        let part = TakingPart {
            active: active.clone(),
            plan_id: Some("p1".into()),
        };
        let panicked = tokio::spawn(async move {
            let _part = part;
            panic!("a run's driver panics");
        })
        .await;
        assert!(panicked.is_err_and(|err| err.is_panic()));
        let mut left = TakingPart {
            active: active.clone(),
            plan_id: Some("p2".into()),
        };
        left.plan_id = None;
        drop(left);
        assert_eq!(*active.lock().unwrap(), HashSet::from(["p2".to_owned()]));
    }
}
