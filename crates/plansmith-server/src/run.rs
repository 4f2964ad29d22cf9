//! Plan execution over HTTP: `POST /v1/plans/{id}/run` starts (or, with `{"resume": true}`,
//! continues) a run with the executor of `plansmith-exec`, and the run's events go to the
//! plan's event stream (`exec_run_started`, `exec_step_started`, `exec_step_progress`,
//! `exec_step_completed`,
//! `exec_step_retrying`, `exec_step_ended`, `exec_replanned`, `exec_run_finished`, plus
//! `step_status` for the review page, and `plan_updated` each time the run writes its steps'
//! statuses and results into the plan); a reader that opens the stream later gets the run as
//! it stands (`exec_run`) right after its `snapshot`. Every serve process with an executor
//! also runs a worker ([`spawn_worker`]) that joins the running runs in the store, so several
//! processes on one PostgreSQL store share the steps (leases decide who runs which).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use plansmith_exec::{ExecError, ExecEvent, Executor};
use plansmith_store::{ExecStatus, RunState, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::AppState;
use crate::error::ApiError;
use crate::events::{EventBus, PlanBusEvent};

/// The executor of a serve process and the runs it takes part in.
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

impl Runner {
    /// A runner whose executor publishes its events on `bus`, and each plan it writes (the
    /// steps' statuses, results, errors and notes) as `plan_updated`, as every other writer of
    /// a plan does.
    pub fn new(executor: Executor, bus: EventBus) -> Runner {
        let documents = bus.clone();
        let executor = executor
            .with_observer(Arc::new(move |plan_id, event| {
                publish(&bus, plan_id, event);
            }))
            .with_document_observer(Arc::new(move |stored| {
                crate::routes::publish_stored(&documents, "plan_updated", stored);
            }));
        Runner {
            executor,
            active: Arc::default(),
            tasks: TaskTracker::new(),
            stopping: CancellationToken::new(),
        }
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
                () = runner.stopping.cancelled() => return,
            };
            if let Err(err) = result {
                tracing::warn!("run of plan {plan_id}: {err}");
            }
            if let Ok(mut active) = runner.active.lock() {
                active.remove(&plan_id);
            }
        });
    }

    /// Resumes the plan's run on this process if it waits for people (after a step decision
    /// that applies now); a run in any other state is left to whoever drives it.
    pub async fn resume_if_waiting(&self, plan_id: &str) {
        if let Ok(Some(run)) = self.executor.store().exec_run(plan_id).await
            && run.state == plansmith_store::RunState::Waiting
        {
            self.spawn_join(plan_id, true);
        }
    }

    /// Stops taking part in runs, for a process that shuts down: the worker stops, no run
    /// starts here any more, and each run this process takes part in is left where it
    /// stands. Its running steps here are dropped (a command tool's processes are killed),
    /// their leases given up ([`PlanStore::exec_release`]), and the run stays in progress in
    /// the store: another serve process on the store carries it on at once, re-running those
    /// steps with the same idempotency keys (this one, when it starts again: its worker joins
    /// the running runs). Returns the plans whose runs were left, once every task has ended,
    /// so that the store can close.
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

fn publish(bus: &EventBus, plan_id: &str, event: &ExecEvent) {
    let data = serde_json::to_value(event).unwrap_or(Value::Null);
    let status = match event {
        ExecEvent::StepStarted { step_id, .. } => Some((step_id, ExecStatus::Running)),
        ExecEvent::StepCompleted { step_id, .. } => Some((step_id, ExecStatus::Completed)),
        ExecEvent::StepEnded {
            step_id, status, ..
        } => Some((step_id, *status)),
        _ => None,
    };
    if let Some((step, status)) = status {
        bus.publish(PlanBusEvent {
            kind: "step_status".to_owned(),
            plan_id: plan_id.to_owned(),
            version: None,
            data: json!({"step": step, "status": status.step_status()}),
        });
    }
    bus.publish(PlanBusEvent {
        kind: format!("exec_{}", event.kind()),
        plan_id: plan_id.to_owned(),
        version: None,
        data,
    });
}

/// Every `every` (bounded pages of 100 per round): joins the store's running runs, so a run
/// started on another process, or left by a process that died, is carried on here; and
/// resumes the runs paused for people once someone decided (through this server, another
/// one, or `plansmith plans decide`), so nobody has to send `{"resume": true}`.
/// It ends with [`Runner::shut_down`].
pub fn spawn_worker(runner: Runner, every: Duration) -> tokio::task::JoinHandle<()> {
    let stopping = runner.stopping.clone();
    let tasks = runner.tasks.clone();
    tasks.spawn(async move {
        tokio::select! {
            () = work(runner, every) => {}
            () = stopping.cancelled() => {}
        }
    })
}

/// The worker's rounds (see [`spawn_worker`]).
async fn work(runner: Runner, every: Duration) {
    loop {
        match runner.executor.store().exec_active_runs(100).await {
            Ok(runs) => {
                for run in runs {
                    runner.spawn_join(&run.plan_id, false);
                }
            }
            Err(err) => tracing::warn!("worker: listing runs: {err}"),
        }
        match runner.executor.store().exec_decided_runs(100).await {
            Ok(runs) => {
                for run in runs {
                    runner.spawn_join(&run.plan_id, true);
                }
            }
            Err(err) => tracing::warn!("worker: listing paused runs: {err}"),
        }
        tokio::time::sleep(every).await;
    }
}

/// Body of `POST /v1/plans/{id}/run`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// Continue the plan's unfinished run instead of starting one.
    #[serde(default)]
    pub resume: bool,
}

/// Body of `POST /v1/plans/{id}/run/stop`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StopRequest {
    /// Why; the run's reason becomes "stopped by WHO: NOTE".
    #[serde(default)]
    pub note: String,
}

/// Answer of `POST /v1/plans/{id}/run/stop` (202): the stop is recorded; the run ends
/// `aborted` at its next turn (follow it on `GET /v1/plans/{id}/events`).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StopRequested {
    /// The plan.
    pub plan_id: String,
    /// The run's state when the stop was asked for (`running` or `waiting`).
    pub state: RunState,
}

/// Records a request to stop the plan's run; a run paused for people is resumed here so that
/// it stops now (every server's worker would also find it, one poll later).
pub(crate) async fn stop_run(
    state: &AppState,
    id: String,
    note: &str,
    actor: &str,
) -> Result<(StatusCode, Json<StopRequested>), ApiError> {
    let run = state.service.stop(&id, note, actor).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(StopRequested {
            plan_id: id,
            state: run.state,
        }),
    ))
}

/// Answer of `POST /v1/plans/{id}/run` (202): the run is under way; follow it on
/// `GET /v1/plans/{id}/events`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunStarted {
    /// The plan.
    pub plan_id: String,
    /// `running`.
    pub state: RunState,
    /// The plan version the run's steps come from.
    pub base_version: u32,
}

pub(crate) async fn run_plan(
    State(state): State<AppState>,
    id: String,
    body: RunRequest,
) -> Result<(StatusCode, Json<RunStarted>), ApiError> {
    let Some(runner) = state.runner.clone() else {
        return Err(ApiError::new(
            "bad_request",
            "this server has no executor: start it with --commands FILE or --mcp SERVERS",
        ));
    };
    let run = if body.resume {
        match state.store.exec_run(&id).await? {
            Some(run) if !run.state.is_final() => run,
            Some(run) => {
                return Err(ApiError::new(
                    "conflict",
                    format!(
                        "plan `{id}` has no run to resume (its last run is {})",
                        run.state
                    ),
                ));
            }
            None => {
                return Err(ApiError::new(
                    "conflict",
                    format!("plan `{id}` has no run to resume (it never ran)"),
                ));
            }
        }
    } else {
        runner.executor.start(&id).await.map_err(|err| match err {
            ExecError::Store(StoreError::RunActive(_)) => ApiError::new(
                "conflict",
                format!("plan `{id}` has a run in progress: resume it with {{\"resume\": true}}"),
            ),
            ExecError::Store(err) => ApiError::from(err),
            other => ApiError::new("conflict", other.to_string()),
        })?
    };
    runner.spawn_join(&id, body.resume);
    Ok((
        StatusCode::ACCEPTED,
        Json(RunStarted {
            plan_id: id,
            state: RunState::Running,
            base_version: run.base_version,
        }),
    ))
}
