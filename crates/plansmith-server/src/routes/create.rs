//! Creating a plan: planning a request and storing the plan for review, answered at once or
//! with the planning's progress over Server-Sent Events.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use plansmith_core::pipeline::OnEvent;
use plansmith_core::{Diagnostics, OutcomeStatus, PlanEvent, PlanRequest};
use plansmith_service::{Planned, ServiceError};
use plansmith_store::{Review, StoredPlan, Submitted};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use utoipa::{IntoParams, ToSchema};

use super::events::{SseEvent, event_kind, sse, sse_json};
use super::extract::{ApiJson, ApiQuery, Caller};
use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::events::publish_stored;

/// Body of `POST /v1/plans`: a plan request plus review settings.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatePlan {
    /// The request (the engine's wire contract; `owner` is the caller's under tokens).
    #[serde(flatten)]
    pub request: PlanRequest,
    /// Accept the plan without review (questions still wait for answers).
    #[serde(default)]
    pub auto_accept: bool,
    /// Review rounds before the policy applies (default 3).
    #[serde(default)]
    pub max_iterations: Option<u32>,
    /// The caller's tools, in any catalog form the CLI reads (an MCP `tools/list` result, a
    /// list of MCP tools, OpenAI `tools`, a name → tool map); without it, the service's
    /// catalog. The plan keeps this catalog for its replans, edits and runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    /// The caller's agent cards (a list, or `{"agents": [...]}`), with `tools` or alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Value>,
}

/// Query of `POST /v1/plans`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct CreateQuery {
    /// Answer with Server-Sent Events while planning (`attempt_started`, `token`, `step`,
    /// `repair`, then `outcome` or `error`) instead of one JSON document.
    #[serde(default)]
    stream: bool,
}

/// Answer of `POST /v1/plans`: how planning ended, the stored plan, and what the engine did.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Created {
    #[serde(flatten)]
    status: OutcomeStatus,
    /// The plan as stored (version 1) with its review state.
    #[schema(value_type = StoredPlan)]
    stored: Submitted,
    /// Attempts, strategy, repairs, findings, tokens and time per stage.
    diagnostics: Diagnostics,
}

/// Plans a request and stores the plan (`stream=true`: progress over SSE while planning).
#[utoipa::path(post, path = "/v1/plans", tag = "plans", params(CreateQuery), request_body = CreatePlan,
    responses(
        (status = 201, description = "Planned and stored", body = Created),
        (status = 200, description = "With `stream=true`: Server-Sent Events `attempt_started`, `token`, `step`, `repair` (data: the engine's `PlanEvent`), then `outcome` (data: `Created`) or `error` (data: `ErrorBody`)", content_type = "text/event-stream", body = SseEvent),
        (status = 400, description = "`bad_request`: an empty query, a bad locale, or sent `tools` / `agents` that do not load (`details` lists each problem with the tool's name and the JSON pointer into the body)", body = ErrorBody),
        (status = 409, description = "`conflict`: the plan id is taken (a request whose `feedback.previous` names a stored plan keeps that id; revise a stored plan through its feedback route instead)", body = ErrorBody),
        (status = 422, description = "`planning_failed`: no valid plan; `details` is the engine's diagnostics", body = ErrorBody),
        (status = 502, description = "`model_error`: the language model failed", body = ErrorBody),
    ))]
pub(super) async fn create_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<CreateQuery>,
    ApiJson(body): ApiJson<CreatePlan>,
) -> Result<Response, ApiError> {
    let mut request = body.request;
    if caller.0.is_some() {
        request.owner = caller.0.clone();
    }
    if request.query.trim().is_empty() {
        return Err(ApiError::new("bad_request", "`query` is empty"));
    }
    let mut review = Review {
        auto_accept: body.auto_accept,
        ..Review::default()
    };
    if let Some(max) = body.max_iterations {
        review.max_iterations = max;
    }
    if !query.stream {
        // Boxed: the planner's future is kilobytes, and inline it made this handler's future
        // as large, which axum copies as it boxes it (~2 % of a plan's time under load, perf).
        let planned = Box::pin(plan(&state, &body.tools, &body.agents, &request, None)).await?;
        let created = Box::pin(store(&state, planned, &request, review, &caller.actor())).await?;
        return Ok(json_response(StatusCode::CREATED, &created));
    }
    let (tx, rx) = mpsc::unbounded_channel::<Event>();
    let actor = caller.actor();
    tokio::spawn(async move {
        // The client closing the stream drops `rx`: planning stops then (the model's call is
        // dropped, and a local model stops generating), as it does when the client of a plain
        // request goes away. A plan already made is still stored.
        let planned = tokio::select! {
            planned = plan(&state, &body.tools, &body.agents, &request, Some(tx.clone())) => planned,
            () = tx.closed() => return,
        };
        let result = match planned {
            Ok(planned) => store(&state, planned, &request, review, &actor).await,
            Err(err) => Err(err),
        };
        let event = match result {
            Ok(created) => sse_json("outcome", &created),
            Err(err) => sse_json(
                "error",
                &json!({"code": err.code, "message": err.message, "details": err.details}),
            ),
        };
        let _ = tx.send(event);
    });
    Ok(sse(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|event| (Ok(event), rx))
    }))
    .into_response())
}

/// `value` as a JSON response, written into a buffer the size of a plan's answer (axum's `Json`
/// starts at 128 bytes and doubles: a 3 KB answer was copied five times on the way).
fn json_response(status: StatusCode, value: &impl Serialize) -> Response {
    let mut body = Vec::with_capacity(4096);
    match serde_json::to_writer(&mut body, value) {
        Ok(()) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(err) => {
            ApiError::new("internal", format!("cannot encode the answer: {err}")).into_response()
        }
    }
}

/// Plans `request` with the caller's `tools` and `agents` (or the service's catalog), sending
/// the planning events to `events` when there is a stream.
async fn plan(
    state: &AppState,
    tools: &Option<Value>,
    agents: &Option<Value>,
    request: &PlanRequest,
    events: Option<mpsc::UnboundedSender<Event>>,
) -> Result<Planned, ApiError> {
    // Dropped before the planner answers (the client went away: a closed stream or connection;
    // or the request timeout fired), the planning call is counted as abandoned.
    let unanswered = Unanswered(&state.metrics);
    let (tools, agents) = (tools.as_ref(), agents.as_ref());
    let result = match events {
        None => state.service.plan(request, tools, agents, None).await,
        Some(tx) => {
            let mut on_event = move |event: PlanEvent| {
                let _ = tx.send(sse_json(event_kind(&event), &event));
            };
            let on_event: OnEvent<'_> = &mut on_event;
            state
                .service
                .plan(request, tools, agents, Some(on_event))
                .await
        }
    };
    std::mem::forget(unanswered);
    match result {
        Ok(planned) => {
            state.metrics.record_outcome(&planned.outcome);
            Ok(planned)
        }
        // A sent catalog that does not load is the caller's error, not a planning failure.
        Err(err @ ServiceError::Store(_)) => Err(err.into()),
        Err(err) => {
            state.metrics.record_failure();
            Err(err.into())
        }
    }
}

/// Counts a planning call as abandoned when dropped; [`plan`] forgets it once the planner has
/// answered.
struct Unanswered<'a>(&'a crate::Metrics);

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        self.0.record_abandoned();
    }
}

/// Stores a planned outcome for review and announces it.
async fn store(
    state: &AppState,
    mut planned: Planned,
    request: &PlanRequest,
    review: Review,
    actor: &str,
) -> Result<Created, ApiError> {
    let status = planned.outcome.status.clone();
    let diagnostics = std::mem::take(&mut planned.outcome.diagnostics);
    let stored = state
        .service
        .submit(planned, request, review, actor)
        .await?;
    publish_stored(&state.bus, "plan_created", &stored.stored);
    Ok(Created {
        status,
        stored,
        diagnostics,
    })
}
