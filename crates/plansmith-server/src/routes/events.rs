//! A plan's events: announcing stored plans and replanning progress on the event bus, and the
//! live stream of one plan's events over Server-Sent Events.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use plansmith_core::PlanEvent;
use plansmith_store::StoredPlan;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;
use utoipa::ToSchema;

use super::extract::{ApiPath, ApiQuery, Caller};
use super::plans::load;
use crate::AppState;
use crate::error::ApiError;
use crate::events::PlanBusEvent;

/// One Server-Sent Event as a client reads it (documentation only: the stream is written by
/// axum's `Sse`): `event` names the kind, `data` is a JSON document.
#[derive(ToSchema)]
#[allow(dead_code, reason = "a schema for the OpenAPI document, never built")]
pub(super) struct SseEvent {
    /// The kind (see the operation for the kinds and their data).
    event: String,
    /// The payload, as JSON text.
    #[schema(content_media_type = "application/json")]
    data: String,
    /// Not sent.
    id: Option<String>,
    /// Not sent.
    retry: Option<u64>,
}

pub(super) fn sse_json(kind: &str, value: &impl Serialize) -> Event {
    let data = serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned());
    Event::default().event(kind).data(data)
}

pub(super) fn sse<S>(stream: S) -> impl IntoResponse
where
    S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// The SSE kind of a planning event (on `POST /v1/plans?stream=true` and on a plan's events).
pub(super) fn event_kind(event: &PlanEvent) -> &'static str {
    match event {
        PlanEvent::AttemptStarted { .. } => "attempt_started",
        PlanEvent::Token { .. } => "token",
        PlanEvent::Step { .. } => "step",
        PlanEvent::Repair { .. } => "repair",
    }
}

/// A replanning's events, published on the plan's event stream as they happen (encoded only
/// when someone listens).
pub(super) fn replan_events(state: &AppState, id: &str) -> impl FnMut(PlanEvent) + Send + use<> {
    let bus = state.bus.clone();
    let id = id.to_owned();
    move |event: PlanEvent| {
        let kind = event_kind(&event);
        if bus.has_subscribers(&id, kind) {
            bus.publish(PlanBusEvent {
                kind: kind.to_owned(),
                plan_id: id.clone(),
                version: None,
                data: serde_json::to_value(&event).unwrap_or(Value::Null),
            });
        }
    }
}

/// Live events of one plan over Server-Sent Events: `snapshot` (data: the stored plan) first,
/// then `exec_run` (data: the plan's last run, `ExecRun`) when it has ever run, so a reader
/// that comes in during a run knows it (a run in progress cannot be started again); then
/// `plan_created`, `plan_updated`, `review_requested`, `step_status`, `plan_deleted` (the
/// stream ends after it), the progress of a replanning that feedback started
/// (`attempt_started`, `token`, `step`, `repair`, data as on `POST /v1/plans?stream=true`), and
/// kinds other crates publish (execution: `exec_run_started`, `exec_run_finished`, …). A reader
/// that falls more than 256 events behind gets a new `snapshot` and `exec_run` (as they are
/// then) in place of the events it missed.
///
/// With `?protocol=ag-ui` the same plan is followed as one AG-UI run instead (see `POST` on
/// this path).
#[utoipa::path(get, path = "/v1/plans/{id}/events", tag = "plans",
    params(("id" = String, Path, description = "The plan id"), EventsQuery),
    responses((status = 200, description = "Server-Sent Events; each `data:` is a `PlanBusEvent` (the first, `snapshot`, is the `StoredPlan`)", content_type = "text/event-stream", body = SseEvent)))]
pub(super) async fn events(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    match query.protocol.as_deref() {
        None | Some("plansmith") => {}
        Some("ag-ui") => {
            load(&state, &caller, &id).await?;
            return super::agui::watch(state, id);
        }
        Some(other) => {
            return Err(ApiError::new(
                "bad_request",
                format!("unknown protocol `{other}` (plansmith, ag-ui)"),
            ));
        }
    }
    let receiver = state
        .bus
        .subscribe(&id)
        .ok_or_else(|| ApiError::new("internal", "the event bus is unavailable"))?;
    let stored = load(&state, &caller, &id).await?;
    let first = current(&state, &id, &stored).await?;
    // The stream is open as long as the page watching it; it must not hold up a shutdown.
    let closing = state.clone();
    let closed = async move { closing.closed().await };
    let stream = futures::stream::unfold(
        (first, receiver, state, id),
        |(mut pending, mut receiver, state, id)| async move {
            if let Some(next) = pending.pop_front() {
                return Some((Ok(next), (pending, receiver, state, id)));
            }
            let event = match receiver.recv().await {
                Ok(event) => event,
                // This reader fell more than the bus holds behind (a slow client during a
                // burst) and those events are gone: it gets the plan (and its run) as they are
                // now, as on a reconnect, and goes on from the oldest event still held.
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(plan = %id, missed, "an event reader lagged; sending a new snapshot");
                    let stored = state.store.get(&id).await.ok()?;
                    let mut pending = current(&state, &id, &stored).await.ok()?;
                    let snapshot = pending.pop_front()?;
                    return Some((Ok(snapshot), (pending, receiver, state, id)));
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            let sse_event = sse_json(&event.kind, &event);
            if event.kind == "plan_deleted" {
                // One last event, then the stream ends.
                return Some((Ok(sse_event), (pending, closed_receiver(), state, id)));
            }
            Some((Ok(sse_event), (pending, receiver, state, id)))
        },
    )
    .take_until(closed);
    Ok(sse(stream).into_response())
}

/// Query of `GET /v1/plans/{id}/events`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct EventsQuery {
    /// `plansmith` (the default: the kinds above) or `ag-ui` (AG-UI 1.0 events).
    protocol: Option<String>,
}

/// What a reader of the plan's events starts from: `snapshot` (the stored plan), then
/// `exec_run` (its last run) when it has run.
async fn current(
    state: &AppState,
    id: &str,
    stored: &StoredPlan,
) -> Result<VecDeque<Event>, ApiError> {
    let mut events = VecDeque::from([sse_json("snapshot", stored)]);
    if let Some(run) = state.store.exec_run(id).await? {
        events.push_back(sse_json(
            "exec_run",
            &PlanBusEvent {
                kind: "exec_run".to_owned(),
                plan_id: id.to_owned(),
                version: None,
                data: serde_json::to_value(&run).unwrap_or(Value::Null),
            },
        ));
    }
    Ok(events)
}

/// A receiver whose channel is closed (ends a stream after its last event).
fn closed_receiver() -> broadcast::Receiver<PlanBusEvent> {
    broadcast::channel(1).1
}
