//! The routes and their handlers: the router, with the CORS layer and the guard every request
//! passes, and the `/v1` API registered once for both the router and the OpenAPI document.

mod agui;
mod create;
mod events;
mod extract;
mod feedback;
mod guard;
pub mod openapi;
mod plans;
mod runs;
mod service;
mod steps;
mod templates;

use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::{Router, middleware};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;
use crate::error::ApiError;
use guard::{X_REQUEST_ID, guard};

pub use create::CreatePlan;
pub(crate) use extract::{ApiJson, ApiPath, ApiQuery, Caller};
pub use feedback::Feedback;
pub(crate) use plans::load;
pub use runs::{RunRequest, RunStarted};
pub use steps::StepUpdate;

/// Every route, registered once through utoipa-axum so the OpenAPI document and the router
/// cannot disagree: a handler is only reachable through `routes!`, which also adds its
/// `#[utoipa::path]` to the document. No route is added with a plain `.route(…)`.
pub(crate) fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(service::index))
        .routes(routes!(service::healthz))
        .routes(routes!(service::readyz))
        .routes(routes!(service::metrics))
        .routes(routes!(service::openapi_json))
        .routes(routes!(create::create_plan, plans::list_plans))
        .routes(routes!(plans::get_plan, plans::delete_plan))
        .routes(routes!(plans::history))
        .routes(routes!(feedback::feedback))
        .routes(routes!(feedback::check_edit))
        .routes(routes!(steps::update_step))
        .routes(routes!(events::events, agui::agui_run))
        .routes(routes!(runs::run_plan))
        .routes(routes!(runs::stop_run))
        .routes(routes!(runs::pending_approvals, runs::decide_approvals))
        .merge(templates::api())
}

pub(crate) fn router(state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    let cors = cors(&state.config.cors_origins);
    let (router, _spec) = api().split_for_parts();
    let router = state
        .base_router()
        .merge(router)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state);
    match cors {
        // Outermost: a preflight is answered before the token check and the rate limit (it
        // carries no token), and error answers carry the headers too, so that the calling
        // page can read them.
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// The CORS layer for `origins` (see [`crate::ServerConfig::cors_origins`]); `None` when
/// there are none. Bearer tokens, not cookies: no credentials mode.
fn cors(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        // Checked at start (`ServerConfig::check`); one that cannot be a header never matches.
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| header::HeaderValue::from_str(o).ok()),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([
                axum::http::Method::GET,
                axum::http::Method::POST,
                axum::http::Method::PATCH,
                axum::http::Method::DELETE,
            ])
            // The MCP endpoint's own headers too (streamable HTTP: the session, the protocol
            // version, resuming a stream), for a browser-based MCP client.
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::ACCEPT,
                header::HeaderName::from_static("mcp-session-id"),
                header::HeaderName::from_static("mcp-protocol-version"),
                header::HeaderName::from_static("last-event-id"),
            ])
            .expose_headers([
                header::RETRY_AFTER,
                X_REQUEST_ID,
                header::HeaderName::from_static("mcp-session-id"),
            ])
            .max_age(Duration::from_secs(3600)),
    )
}

async fn not_found() -> ApiError {
    ApiError::new("not_found", "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new("method_not_allowed", "this route does not take this method")
}
