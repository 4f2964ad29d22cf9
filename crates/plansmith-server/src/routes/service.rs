//! The service's own routes: the review page, the probes, the metrics and the OpenAPI document.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::extract::Caller;
use crate::AppState;
use crate::error::{ApiError, ErrorBody};

/// The review page.
const INDEX_HTML: &str = include_str!("../../assets/index.html");

/// The review page.
#[utoipa::path(get, path = "/", tag = "service",
    responses((status = 200, description = "The review page: one HTML document, no external assets", content_type = "text/html", body = String)))]
pub(super) async fn index() -> Html<&'static str> {
    Html(INDEX_HTML)
}

/// Answer of `GET /healthz` and `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Health {
    /// `ok` (`/healthz`: the server answers) or `ready` (`/readyz`: its store answers too).
    status: String,
    /// The store's backend: `sqlite` or `postgres`.
    store: String,
}

/// Liveness, and which store backend serves.
#[utoipa::path(get, path = "/healthz", tag = "service",
    responses((status = 200, description = "The server answers", body = Health)))]
pub(super) async fn healthz(State(state): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        store: format!("{:?}", state.store.backend()).to_lowercase(),
    })
}

/// How long `GET /readyz` waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Readiness: the store answers (a trivial query, within 2 s). For load balancers and
/// Kubernetes readiness probes: a server whose store cannot be reached answers `503
/// unavailable` here and should get no requests, while `/healthz` (liveness) stays `200`, so
/// the process is not restarted for a database outage.
#[utoipa::path(get, path = "/readyz", tag = "service",
    responses(
        (status = 200, description = "The store answers (`status` is `ready`)", body = Health),
        (status = 503, description = "`unavailable`: the store did not answer; `message` says why", body = ErrorBody),
    ))]
pub(super) async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    match tokio::time::timeout(READY_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => Ok(Json(Health {
            status: "ready".to_owned(),
            store: format!("{:?}", state.store.backend()).to_lowercase(),
        })),
        Ok(Err(err)) => Err(ApiError::new(
            "unavailable",
            format!("the store does not answer: {err}"),
        )),
        Err(_) => Err(ApiError::new(
            "unavailable",
            format!(
                "the store did not answer within {} s",
                READY_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// Prometheus metrics: plans by outcome, parse failures, repairs, validation errors by code,
/// ready ratio, steps per plan, iterations, latency per stage and per route, LLM tokens.
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", content_type = "text/plain", body = String)))]
pub(super) async fn metrics(State(state): State<AppState>, _caller: Caller) -> Response {
    let mut text = state.metrics.render();
    if let Some(stats) = state.bus.relay_stats() {
        crate::metrics::render_relay(&mut text, stats);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// This OpenAPI 3.1 document, generated from the code.
#[utoipa::path(get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", body = Object)))]
pub(super) async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::routes::openapi::document_json(),
    )
        .into_response()
}
