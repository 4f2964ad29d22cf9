//! Plan execution over HTTP: `POST /v1/plans/{id}/run` starts (or, with `{"resume": true}`,
//! continues) a run through the service's runner ([`plansmith_service::Service::run`]), and the
//! run's events go to the
//! plan's event stream (`exec_run_started`, `exec_step_started`, `exec_step_progress`,
//! `exec_step_completed`,
//! `exec_step_retrying`, `exec_step_ended`, `exec_replanned`, `exec_run_finished`, plus
//! `step_status` for the review page, and `plan_updated` each time the run writes its steps'
//! statuses and results into the plan); a reader that opens the stream later gets the run as
//! it stands (`exec_run`) right after its `snapshot`. Every serve process with an executor
//! also runs a worker ([`plansmith_service::Runner::spawn_worker`]) that joins the running runs in the store, so several
//! processes on one PostgreSQL store share the steps (leases decide who runs which).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use plansmith_exec::{ExecError, ExecEvent, Executor};
use plansmith_service::ServiceError;
use plansmith_store::{ExecStatus, RunState, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::events::{EventBus, PlanBusEvent};

/// `executor` with its events published on `bus`, and each plan it writes (the steps'
/// statuses, results, errors and notes) as `plan_updated`, as every other writer of a plan
/// does.
pub(crate) fn observed(executor: Executor, bus: EventBus) -> Executor {
    let documents = bus.clone();
    executor
        .with_observer(Arc::new(move |plan_id, event| {
            publish(&bus, plan_id, event);
        }))
        .with_document_observer(Arc::new(move |stored| {
            crate::routes::publish_stored(&documents, "plan_updated", stored);
        }))
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
    let run = state
        .service
        .run(&id, body.resume)
        .await
        .map_err(|err| match err {
            ServiceError::Exec(ExecError::Store(StoreError::RunActive(_))) => ApiError::new(
                "conflict",
                format!("plan `{id}` has a run in progress: resume it with {{\"resume\": true}}"),
            ),
            other => ApiError::from(other),
        })?;
    Ok((
        StatusCode::ACCEPTED,
        Json(RunStarted {
            plan_id: id,
            state: RunState::Running,
            base_version: run.base_version,
        }),
    ))
}
