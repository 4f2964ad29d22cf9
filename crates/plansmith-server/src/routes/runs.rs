//! Running a plan through the server's executor, and stopping its run.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::extract::{ApiPath, Caller, optional_body};
use super::plans::load;
use crate::AppState;
use crate::error::{ApiError, ErrorBody};

/// Run the plan: its steps execute as a DAG through the server's executor; progress arrives as
/// `exec_*` and `step_status` events on the plan's event stream.
#[utoipa::path(post, path = "/v1/plans/{id}/run", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    request_body(content = crate::run::RunRequest, description = "Optional: `{\"resume\": true}` continues the plan's unfinished run; an empty body starts a run"),
    responses(
        (status = 202, description = "The run is under way; follow it on `GET /v1/plans/{id}/events`", body = crate::run::RunStarted),
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
    let request = optional_body::<crate::run::RunRequest>(&body, "run request")?;
    Ok(crate::run::run_plan(State(state), id, request)
        .await?
        .into_response())
}

/// Stop the plan's run: each process running it stops its running steps at its next turn
/// (recorded as skipped, "stopped: …"), nothing else starts, and the run ends `aborted` with
/// "stopped by WHO: NOTE" as its reason (`exec_run_finished` on the event stream). A run
/// paused for a decision stops too. Any server on the store can take the request, with or
/// without an executor.
#[utoipa::path(post, path = "/v1/plans/{id}/run/stop", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    request_body(content = crate::run::StopRequest, description = "Optional: `{\"note\": \"why\"}`; an empty body stops without a note"),
    responses(
        (status = 202, description = "The stop is recorded; the run ends `aborted` at its next turn (within about the executor's poll interval, 200 ms by default)", body = crate::run::StopRequested),
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
    let request = optional_body::<crate::run::StopRequest>(&body, "stop request")?;
    Ok(
        crate::run::stop_run(&state, id, &request.note, &caller.actor())
            .await?
            .into_response(),
    )
}
