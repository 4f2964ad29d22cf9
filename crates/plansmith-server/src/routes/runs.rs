//! Running a plan through the server's executor, and stopping its run: `POST
//! /v1/plans/{id}/run` starts (or, with `{"resume": true}`, continues) a run through the
//! service's runner ([`plansmith_service::Service::run`]); its events reach the plan's event
//! stream ([`crate::events::observed`]).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use plansmith_exec::ExecError;
use plansmith_service::{PendingApproval, RunStart, ServiceError};
use plansmith_store::{Budget, Remember, RunState, StepVerdict, StoreError};
use serde::{Deserialize, Serialize};

use super::extract::{ApiJson, ApiPath, Caller, optional_body};
use super::plans::load;
use crate::AppState;
use crate::error::{ApiError, ErrorBody};

/// Run the plan: its steps execute as a DAG through the server's executor; progress arrives as
/// `exec_*` and `step_status` events on the plan's event stream.
#[utoipa::path(post, path = "/v1/plans/{id}/run", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    request_body(content = RunRequest, description = "Optional: `{\"resume\": true}` continues the plan's unfinished run; `{\"budget\": {\"max_tool_calls\": 10}}` caps a new run; an empty body starts a run under the server's caps"),
    responses(
        (status = 202, description = "The run is under way; follow it on `GET /v1/plans/{id}/events`", body = RunStarted),
        (status = 400, description = "`bad_request`: invalid body, or this server has no executor", body = ErrorBody),
        (status = 404, description = "`not_found`: no such plan", body = ErrorBody),
        (status = 409, description = "`conflict`: a run is in progress, or nothing to resume", body = ErrorBody),
    ))]
pub(super) async fn run_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    load(&state, &caller, &id).await?;
    let request = optional_body::<RunRequest>(&body, "run request")?;
    let start = RunStart::of(request.resume, request.budget)?;
    let run = state
        .service
        .run(&id, start)
        .await
        .map_err(|err| match err {
            ServiceError::Exec(ExecError::Store(StoreError::RunActive(_))) => ApiError::new(
                "conflict",
                format!("plan `{id}` has a run in progress: resume it with {{\"resume\": true}}"),
            ),
            other => ApiError::from(other),
        })?;
    let started = RunStarted {
        plan_id: id,
        state: RunState::Running,
        base_version: run.base_version,
    };
    Ok((StatusCode::ACCEPTED, Json(started)).into_response())
}

/// Stop the plan's run: each process running it stops its running steps at its next turn
/// (recorded as skipped, "stopped: …"), nothing else starts, and the run ends `aborted` with
/// "stopped by WHO: NOTE" as its reason (`exec_run_finished` on the event stream). A run
/// paused for a decision stops too. Any server on the store can take the request, with or
/// without an executor.
#[utoipa::path(post, path = "/v1/plans/{id}/run/stop", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    request_body(content = StopRequest, description = "Optional: `{\"note\": \"why\"}`; an empty body stops without a note"),
    responses(
        (status = 202, description = "The stop is recorded; the run ends `aborted` at its next turn (within about the executor's poll interval, 200 ms by default)", body = StopRequested),
        (status = 400, description = "`bad_request`: invalid body", body = ErrorBody),
        (status = 404, description = "`not_found`: no such plan", body = ErrorBody),
        (status = 409, description = "`conflict`: the plan has no run in progress (it never ran, or its last run is over)", body = ErrorBody),
    ))]
pub(super) async fn stop_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    load(&state, &caller, &id).await?;
    let request = optional_body::<StopRequest>(&body, "stop request")?;
    // A run paused for people is woken here so that it stops now (every server's worker
    // would also find it, one poll later).
    let run = state
        .service
        .stop(&id, &request.note, &caller.actor())
        .await?;
    let stopped = StopRequested {
        plan_id: id,
        state: run.state,
    };
    Ok((StatusCode::ACCEPTED, Json(stopped)).into_response())
}

/// Body of `POST /v1/plans/{id}/run`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// Continue the plan's unfinished run instead of starting one.
    #[serde(default)]
    pub resume: bool,
    /// Caps of a new run, over the server's (`[budget]` in its config file): tool calls, model
    /// tokens, seconds, replans, and whether running steps finish or are cancelled at a cap.
    /// Not with `resume`: a resumed run keeps the caps it started with.
    #[serde(default)]
    pub budget: Option<Budget>,
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

/// Every approval the plan's run waits for, at once: each gated step with its tool and its
/// arguments as the plan writes them (empty when nothing waits).
#[utoipa::path(get, path = "/v1/plans/{id}/approvals", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    responses(
        (status = 200, description = "The pending approvals, in plan order", body = [PendingApproval]),
        (status = 404, description = "`not_found`: no such plan", body = ErrorBody),
    ))]
pub(super) async fn pending_approvals(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Vec<PendingApproval>>, ApiError> {
    load(&state, &caller, &id).await?;
    Ok(Json(state.service.pending_approvals(&id).await?))
}

/// Decide every approval the plan's run waits for (or those of `steps`) in one go: each is
/// recorded as its own step decision, and a paused run goes on.
#[utoipa::path(post, path = "/v1/plans/{id}/approvals", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    request_body(content = ApprovalsDecision, description = "`{\"verdict\": \"approve\"}` approves every pending approval; `steps` limits it, `remember` makes approvals outlive the run"),
    responses(
        (status = 200, description = "The steps decided (none when nothing waited)", body = ApprovalsDecided),
        (status = 400, description = "`bad_request`: invalid body, or `remember` with another verdict than `approve`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such plan", body = ErrorBody),
        (status = 409, description = "`conflict`: the plan has no run in progress", body = ErrorBody),
    ))]
pub(super) async fn decide_approvals(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<ApprovalsDecision>,
) -> Result<Json<ApprovalsDecided>, ApiError> {
    load(&state, &caller, &id).await?;
    if !matches!(request.verdict, StepVerdict::Approve | StepVerdict::Deny) {
        return Err(ApiError::new(
            "bad_request",
            "pending approvals are approved or denied (`approve`, `deny`)",
        ));
    }
    let decided = state
        .service
        .decide_pending(
            &id,
            request.steps.as_deref(),
            request.verdict,
            request.remember,
            &request.note,
            &caller.actor(),
        )
        .await?;
    Ok(Json(ApprovalsDecided {
        decided: decided
            .iter()
            .filter_map(|d| d.step_decision.as_ref().map(|s| s.decision.step_id.clone()))
            .collect(),
    }))
}

/// Body of `POST /v1/plans/{id}/approvals`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsDecision {
    /// `approve` or `deny`.
    pub verdict: StepVerdict,
    /// Only these steps (default: every pending approval).
    #[serde(default)]
    pub steps: Option<Vec<String>>,
    /// How far the approvals reach: `run` (default), `plan` or `call`.
    #[serde(default)]
    pub remember: Remember,
    /// A note for the log.
    #[serde(default)]
    pub note: String,
}

/// Answer of `POST /v1/plans/{id}/approvals`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApprovalsDecided {
    /// The steps decided, in plan order.
    pub decided: Vec<String>,
}
