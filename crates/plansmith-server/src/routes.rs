//! The routes and their handlers.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::extract::{
    DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, Path, Query, Request, State,
};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::{Json, Router};
use futures::{Stream, StreamExt};
use plansmith_core::pipeline::OnEvent;
use plansmith_core::{
    Diagnostic, Diagnostics, OutcomeStatus, Plan, PlanEvent, PlanRequest, StepStatus,
};
use plansmith_service::{Decided, Decision, Planned, ServiceError};
use plansmith_store::store::parse_status;
use plansmith_store::{
    Change, ListFilter, Page, Review, ReviewState, StoredPlan, Submitted, Trigger, VersionRecord,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tracing::Instrument;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;
use crate::error::{ApiError, ErrorBody, rejection};
use crate::events::PlanBusEvent;

/// The review page.
const INDEX_HTML: &str = include_str!("../assets/index.html");
/// Schema problems of a request body listed in the error's details.
const MAX_BODY_PROBLEMS: usize = 20;
/// Largest page of `GET /v1/plans`.
const MAX_LIMIT: u32 = 500;

/// Every route, registered once through utoipa-axum so the OpenAPI document and the router
/// cannot disagree: a handler is only reachable through `routes!`, which also adds its
/// `#[utoipa::path]` to the document. No route is added with a plain `.route(…)`.
pub(crate) fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(crate::openapi::base())
        .routes(routes!(index))
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(openapi_json))
        .routes(routes!(create_plan, list_plans))
        .routes(routes!(get_plan, delete_plan))
        .routes(routes!(history))
        .routes(routes!(feedback))
        .routes(routes!(check_edit))
        .routes(routes!(update_step))
        .routes(routes!(events))
        .routes(routes!(run_plan))
        .routes(routes!(stop_run))
        .merge(crate::templates::api())
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

// ------------------------------------------------------------------ extractors and middleware

/// A JSON body whose rejections come out of the error table.
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<T: DeserializeOwned + ToSchema, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let value = match Json::<serde_json::Value>::from_request(req, state).await {
            Ok(Json(value)) => value,
            Err(err) => return Err(rejection(err.status(), err.body_text())),
        };
        read_body(value).map(ApiJson)
    }
}

/// Reads a request body of type `T` out of its JSON, checked against its OpenAPI schema.
fn read_body<T: DeserializeOwned + ToSchema>(value: Value) -> Result<T, ApiError> {
    // Every body of this API is a JSON object: serde would also read a struct out of an
    // array (`[]` fills an all-optional struct), which the OpenAPI document does not allow.
    if !value.is_object() {
        return Err(ApiError::new(
            "bad_request",
            "the request body must be a JSON object",
        ));
    }
    // The body must match the schema the clients were given, also where serde is laxer
    // (a nested struct read out of an array).
    if let Some(validator) = crate::openapi::body_validators().get(T::name().as_ref()) {
        let problems: Vec<(String, String)> = validator
            .iter_errors(&value)
            .take(MAX_BODY_PROBLEMS)
            .map(|err| explain(&err))
            .collect();
        if let Some(message) = body_problems_message(&problems) {
            let problems: Vec<Value> = problems
                .iter()
                .map(|(path, message)| json!({"path": path, "message": message}))
                .collect();
            return Err(
                ApiError::new("bad_request", message).with_details(json!({ "problems": problems }))
            );
        }
    }
    serde_json::from_value(value)
        .map_err(|err| ApiError::new("bad_request", format!("invalid request body: {err}")))
}

/// The error message for a body's schema problems: the first, where it is (a place in the
/// body, or the body itself), and how many more `details.problems` lists.
fn body_problems_message(problems: &[(String, String)]) -> Option<String> {
    let (path, message) = problems.first()?;
    let mut text = match path.as_str() {
        "" => format!("invalid request body: {message}"),
        path => format!("invalid request body at `{path}`: {message}"),
    };
    match problems.len() - 1 {
        0 => {}
        1 => text.push_str(" (1 more problem in `details.problems`)"),
        more => text.push_str(&format!(" ({more} more problems in `details.problems`)")),
    }
    Some(text)
}

/// Where a body breaks its schema, and how, in words a client can act on. A value that none
/// of a `oneOf`/`anyOf` union's members accepts (a feedback `action`, a step `status`) is
/// explained by the union, not by the keyword. The union's tag is the place where most members
/// want a fixed value (`const` or `enum`): when every member rejected the value there, the
/// allowed values are listed; otherwise the member that came closest speaks — one whose tag
/// matched, not of another JSON type altogether, with the fewest problems.
fn explain(err: &jsonschema::ValidationError<'_>) -> (String, String) {
    use jsonschema::error::ValidationErrorKind as Kind;
    let here = err.instance_path().to_string();
    let members = match err.kind() {
        Kind::OneOfNotValid { context } | Kind::AnyOf { context } => context,
        // jsonschema names two options and counts the rest: all of them help more.
        Kind::Enum { options } => {
            let options: Vec<String> = options
                .as_array()
                .map(|all| all.iter().map(Value::to_string).collect())
                .unwrap_or_default();
            return (
                here,
                format!("{} is not one of {}", err.instance(), options.join(", ")),
            );
        }
        // "Additional / Unevaluated properties are not allowed" is the schema's jargon.
        Kind::AdditionalProperties { unexpected } | Kind::UnevaluatedProperties { unexpected } => {
            let names: Vec<String> = unexpected
                .iter()
                .map(|n| Value::from(n.as_str()).to_string())
                .collect();
            let noun = if names.len() == 1 { "field" } else { "fields" };
            return (
                here,
                format!(
                    "unknown {noun} {} (the body's schema is in /openapi.json)",
                    names.join(", ")
                ),
            );
        }
        _ => return (here, err.to_string()),
    };
    let fixed = |error: &jsonschema::ValidationError<'_>| match error.kind() {
        Kind::Constant { expected_value } => Some(vec![(**expected_value).clone()]),
        Kind::Enum { options } => Some(options.as_array().cloned().unwrap_or_default()),
        _ => None,
    };
    let mut wanted_at: Vec<(String, usize)> = Vec::new();
    for member in members {
        let mut paths: Vec<String> = member
            .iter()
            .filter(|error| fixed(error).is_some())
            .map(|error| error.instance_path().to_string())
            .collect();
        paths.sort_unstable();
        paths.dedup();
        for path in paths {
            match wanted_at.iter_mut().find(|(at, _)| *at == path) {
                Some((_, n)) => *n += 1,
                None => wanted_at.push((path, 1)),
            }
        }
    }
    let tag = wanted_at
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(at, _)| at);
    let at_tag = |member: &[jsonschema::ValidationError<'static>]| -> Option<usize> {
        member.iter().position(|error| {
            fixed(error).is_some() && Some(error.instance_path().to_string()) == tag
        })
    };
    if let Some(tag) = &tag
        && !members.is_empty()
        && members.iter().all(|member| at_tag(member).is_some())
    {
        let mut allowed: Vec<Value> = Vec::new();
        let mut got = None;
        let at_tags = members
            .iter()
            .filter_map(|member| at_tag(member).and_then(|idx| member.get(idx)));
        for error in at_tags {
            got.get_or_insert_with(|| error.instance().clone().into_owned());
            for value in fixed(error).unwrap_or_default() {
                if !allowed.contains(&value) {
                    allowed.push(value);
                }
            }
        }
        let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        let got = got.unwrap_or(Value::Null);
        return (
            tag.clone(),
            format!("{got} is not one of {}", allowed.join(", ")),
        );
    }
    let other_type = |member: &[jsonschema::ValidationError<'static>]| {
        member.iter().any(|error| {
            matches!(error.kind(), Kind::Type { .. }) && error.instance_path().to_string() == here
        })
    };
    // No member takes a value of this JSON type: say which types they take.
    let mut types: Vec<&'static str> = Vec::new();
    for error in members.iter().flatten() {
        if let Kind::Type { kind } = error.kind()
            && error.instance_path().to_string() == here
        {
            let names: Vec<&'static str> = match kind {
                jsonschema::error::TypeKind::Single(one) => vec![one.as_str()],
                jsonschema::error::TypeKind::Multiple(set) => {
                    set.iter().map(|t| t.as_str()).collect()
                }
            };
            for name in names {
                if !types.contains(&name) {
                    types.push(name);
                }
            }
        }
    }
    if !members.is_empty() && members.iter().all(|member| other_type(member)) {
        return (
            here,
            format!(
                "{} is not of type \"{}\"",
                err.instance(),
                types.join("\" or \"")
            ),
        );
    }
    let closest = members
        .iter()
        .filter(|member| !member.is_empty())
        .min_by_key(|member| (other_type(member), at_tag(member).is_some(), member.len()));
    match closest.and_then(|member| member.first()) {
        Some(error) => explain(error),
        None => (here, err.to_string()),
    }
}

/// A query string whose rejections come out of the error table.
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(ApiQuery(value)),
            Err(err) => Err(rejection(err.status(), err.body_text())),
        }
    }
}

/// Path parameters whose rejections come out of the error table.
pub(crate) struct ApiPath<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(err) => Err(rejection(err.status(), err.body_text())),
        }
    }
}

/// Who calls: the owner its token maps to, or `None` without tokens (single user, sees all).
pub(crate) struct Caller(pub(crate) Option<String>);

impl Caller {
    pub(crate) fn actor(&self) -> String {
        self.0.clone().unwrap_or_else(|| "api".to_owned())
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state.owner_of(&parts.headers).map(Caller).map_err(|()| {
            ApiError::new(
                "unauthorized",
                "a valid `Authorization: Bearer TOKEN` header is required",
            )
        })
    }
}

/// Rate limit (per owner; not for the probes), timeout, and latency metrics for every request.
async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let request_id = request_id(req.headers());
    let method = req.method().clone();
    // One bucket per owner; requests without a valid token share one (they are refused
    // later anyway, but must not get unlimited tries).
    let key = match state.owner_of(req.headers()) {
        Ok(owner) => owner.unwrap_or_default(),
        Err(()) => "\u{0}unauthenticated".to_owned(),
    };
    // The probes stay cheap and are not rate limited: callers without a valid token, who
    // share one bucket, must not make a load balancer or an orchestrator see the server down.
    let limited = !matches!(route.as_str(), "/healthz" | "/readyz");
    let mut response = match refused_site(&state, req.headers()) {
        Some(err) => err.into_response(),
        None => {
            admitted(&state, &key, limited, req, next)
                .instrument(tracing::info_span!("request", id = %request_id))
                .await
        }
    };
    let status = response.status().as_u16();
    let seconds = started.elapsed().as_secs_f64();
    state.metrics.record_http(&route, status, seconds);
    tracing::info!(
        target: "plansmith::http",
        request_id = %request_id,
        method = %method,
        route = %route,
        status,
        ms = (seconds * 100_000.0).round() / 100.0,
        owner = %match key.trim_start_matches('\u{0}') {
            "" => "-",
            owner => owner,
        },
        "answered"
    );
    if let Ok(value) = header::HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(X_REQUEST_ID, value);
    }
    // No page of another site may frame the review page (clickjacking its buttons).
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("frame-ancestors 'none'"),
    );
    headers.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    response
}

/// Why a request must be refused for where it comes from, if it must (`403 forbidden`),
/// before any other check:
/// - Without API tokens (single user, bound to loopback only) the `Host` must be a loopback
///   name or address (`localhost`, `127.0.0.1`, `[::1]`, any loopback IP, which includes the
///   address the server is bound to). A page whose own name an attacker made resolve to 127.0.0.1 (DNS
///   rebinding) sends its own name as `Host`, so it is refused; `/mcp` follows the same rule
///   (rmcp's own check). With tokens, callers authenticate, and the server may sit behind a
///   proxy under any name.
/// - A browser's `Origin` must be the server's own (the review page), or one listed in
///   [`crate::ServerConfig::cors_origins`]: a page of another site may not make the API act,
///   even where CORS would keep the answer from it.
///
/// A request without these headers (not a browser; HTTP/1.0) is not refused here.
fn refused_site(state: &AppState, headers: &header::HeaderMap) -> Option<ApiError> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if state.config.tokens.is_empty()
        && let Some(host) = host
        && !is_loopback_host(host)
    {
        return Some(ApiError::new(
            "forbidden",
            format!(
                "`Host: {}` is not this server's: without API tokens it answers only to loopback names (localhost, 127.0.0.1, [::1]); configure tokens to \
                 serve other names",
                printable(host)
            ),
        ));
    }
    let origin = headers.get(header::ORIGIN)?;
    let origin_text = origin.to_str().unwrap_or("");
    let listed = state
        .config
        .cors_origins
        .iter()
        .any(|o| o == "*" || o.eq_ignore_ascii_case(origin_text));
    let same_site = host.is_some_and(|host| {
        origin_text
            .split_once("://")
            .is_some_and(|(scheme, authority)| {
                matches!(scheme, "http" | "https") && authority.eq_ignore_ascii_case(host)
            })
    });
    if listed || same_site {
        return None;
    }
    Some(ApiError::new(
        "forbidden",
        format!(
            "requests from pages on `{}` are refused: list the origin in cors_origins \
             (--cors-origin, PLANSMITH_CORS_ORIGINS) to allow them",
            printable(origin_text)
        ),
    ))
}

/// `text` cut to 100 characters with control characters escaped, for a message.
fn printable(text: &str) -> String {
    text.chars()
        .take(100)
        .flat_map(char::escape_debug)
        .collect()
}

/// Whether a `Host` header's value names a loopback host: `localhost` or a loopback IP (any
/// port: the port is the listener's business).
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        Some(rest) => match rest.split_once(']') {
            Some((v6, tail)) if tail.is_empty() || tail.starts_with(':') => v6,
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return false,
            None => host,
        },
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}

/// The header that names a request, in the answer and in the access log.
const X_REQUEST_ID: header::HeaderName = header::HeaderName::from_static("x-request-id");

/// The caller's `x-request-id` when it is one a log can carry as is (1 to 128 letters, digits,
/// `.`, `_`, `:` or `-`: a proxy's or a client's trace id), else a new one (a UUIDv7).
fn request_id(headers: &header::HeaderMap) -> String {
    headers
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|id| {
            (1..=128).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        })
        .map_or_else(|| uuid::Uuid::now_v7().simple().to_string(), str::to_owned)
}

/// The request through the rate limit (`key`'s bucket, when `limited`) and the timeout.
async fn admitted(
    state: &AppState,
    key: &str,
    limited: bool,
    req: Request,
    next: Next,
) -> Response {
    if limited && let Err(retry_after) = state.admit(key) {
        let mut response = ApiError::new(
            "rate_limited",
            format!("too many requests; retry in {retry_after} s"),
        )
        .with_details(json!({"retry_after_secs": retry_after}))
        .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(retry_after));
        return response;
    }
    // A caller without a valid token hears that first (the handler says so), as on every
    // route, not which parameters the route takes.
    if !key.starts_with('\u{0}')
        && let Some(err) = unknown_query(
            req.extensions().get::<MatchedPath>(),
            req.method(),
            req.uri(),
        )
    {
        return err.into_response();
    }
    let req = match body_read(
        req,
        state.config.max_body_bytes,
        state.config.header_timeout,
    )
    .await
    {
        Ok(req) => req,
        Err(err) => return err.into_response(),
    };
    match tokio::time::timeout(state.config.request_timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            "timeout",
            format!(
                "no answer within {} s",
                state.config.request_timeout.as_secs_f64()
            ),
        )
        .into_response(),
    }
}

/// The request with its body read whole, each piece within `pause` of the one before, and at
/// most `limit` bytes (`413 payload_too_large` past it), for every route, the MCP endpoint
/// (which reads bodies itself, out of `DefaultBodyLimit`'s reach) included: a stalled upload
/// would otherwise hold its connection and its handler until the request timeout.
async fn body_read(req: Request, limit: usize, pause: Duration) -> Result<Request, ApiError> {
    use futures::StreamExt;
    let (parts, body) = req.into_parts();
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    loop {
        let chunk = match tokio::time::timeout(pause, stream.next()).await {
            Err(_) => {
                return Err(ApiError::new(
                    "request_timeout",
                    format!(
                        "the request body sent nothing for {} s; send it without pauses",
                        pause.as_secs_f64()
                    ),
                ));
            }
            Ok(None) => break,
            Ok(Some(Err(err))) => {
                return Err(ApiError::new(
                    "bad_request",
                    format!("cannot read the request body: {err}"),
                ));
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        if bytes.len() + chunk.len() > limit {
            return Err(ApiError::new(
                "payload_too_large",
                format!("the request body is over the limit of {limit} bytes"),
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

/// The error for query parameters an API route does not take (the names it takes are in the
/// OpenAPI document, [`crate::openapi::query_parameters`]); `None` when there are none.
fn unknown_query(
    route: Option<&MatchedPath>,
    method: &axum::http::Method,
    uri: &axum::http::Uri,
) -> Option<ApiError> {
    uri.query().filter(|query| !query.is_empty())?;
    let route = route?.as_str();
    if !route.starts_with("/v1/") {
        return None;
    }
    let taken =
        crate::openapi::query_parameters().get(&(method.as_str().to_owned(), route.to_owned()))?;
    // (A query string that does not decode is left to the route's own reading.)
    let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(uri).ok()?;
    let version = pairs
        .iter()
        .find(|(name, _)| name == "version")
        .map(|(_, value)| value.clone());
    let mut unknown: Vec<String> = Vec::new();
    for (name, _) in pairs {
        if !taken.contains(&name) && !unknown.contains(&name) {
            unknown.push(name);
        }
    }
    let quoted = |names: &[String]| {
        names
            .iter()
            .map(|name| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let named = match unknown.len() {
        0 => return None,
        1 => format!("unknown query parameter {}", quoted(&unknown)),
        _ => format!("unknown query parameters {}", quoted(&unknown)),
    };
    let takes = match taken.as_slice() {
        [] => "it takes none".to_owned(),
        names => format!("it takes {}", quoted(names)),
    };
    // A client meaning one version, on a route that would delete them all: name the route that
    // deletes one (`DELETE /v1/templates/{name}/versions/{version}`).
    let versions = format!("{route}/versions/{{version}}");
    let hint = match version {
        Some(version)
            if method == axum::http::Method::DELETE
                && crate::openapi::query_parameters()
                    .contains_key(&(method.as_str().to_owned(), versions.clone())) =>
        {
            let one = versions.replace("{version}", &version);
            format!(
                " (it deletes every version; to delete version {version} only, use DELETE {one})"
            )
        }
        _ => String::new(),
    };
    Some(
        ApiError::new(
            "bad_request",
            format!("{named} for {method} {route}: {takes}{hint}"),
        )
        .with_details(json!({"unknown_parameters": unknown, "parameters": taken})),
    )
}

async fn not_found() -> ApiError {
    ApiError::new("not_found", "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new("method_not_allowed", "this route does not take this method")
}

/// Loads a plan the caller may see (another owner's plan is `not_found`).
pub(crate) async fn load(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<StoredPlan, ApiError> {
    let stored = state.store.get(id).await?;
    if let Some(owner) = &caller.0
        && stored.plan.owner.as_deref() != Some(owner.as_str())
    {
        return Err(ApiError::plan_not_found(id));
    }
    Ok(stored)
}

/// Publishes a stored plan as a `kind` event (`plan_created`, `plan_updated`), and
/// `review_requested` when it waits for people; nothing when nobody listens.
pub(crate) fn publish_stored(bus: &crate::EventBus, kind: &str, stored: &StoredPlan) {
    // Encoding the whole plan for nobody cost ~4 % of a create under load (perf).
    if !bus.has_subscribers(&stored.plan.id, kind) {
        return;
    }
    bus.publish(PlanBusEvent {
        kind: kind.to_owned(),
        plan_id: stored.plan.id.clone(),
        version: Some(stored.version()),
        data: serde_json::to_value(stored).unwrap_or(Value::Null),
    });
    if matches!(
        stored.state,
        ReviewState::AwaitingReview | ReviewState::NeedsInput
    ) {
        bus.publish(PlanBusEvent {
            kind: "review_requested".to_owned(),
            plan_id: stored.plan.id.clone(),
            version: Some(stored.version()),
            data: json!({"state": stored.state, "questions": stored.plan.questions}),
        });
    }
}

// ------------------------------------------------------------------ small routes

/// The review page.
#[utoipa::path(get, path = "/", tag = "service",
    responses((status = 200, description = "The review page: one HTML document, no external assets", content_type = "text/html", body = String)))]
async fn index() -> Html<&'static str> {
    Html(INDEX_HTML)
}

/// Answer of `GET /healthz` and `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
struct Health {
    /// `ok` (`/healthz`: the server answers) or `ready` (`/readyz`: its store answers too).
    status: String,
    /// The store's backend: `sqlite` or `postgres`.
    store: String,
}

/// Liveness, and which store backend serves.
#[utoipa::path(get, path = "/healthz", tag = "service",
    responses((status = 200, description = "The server answers", body = Health)))]
async fn healthz(State(state): State<AppState>) -> Json<Health> {
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
async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
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
async fn metrics(State(state): State<AppState>, _caller: Caller) -> Response {
    let mut text = state.metrics.render();
    if let Some(stats) = state.bus.relay_stats() {
        crate::metrics::render_relay(&mut text, stats);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// This OpenAPI 3.1 document, generated from the code.
#[utoipa::path(get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", body = Object)))]
async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document_json(),
    )
        .into_response()
}

// ------------------------------------------------------------------ plans

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
struct CreateQuery {
    /// Answer with Server-Sent Events while planning (`attempt_started`, `token`, `step`,
    /// `repair`, then `outcome` or `error`) instead of one JSON document.
    #[serde(default)]
    stream: bool,
}

/// Answer of `POST /v1/plans`: how planning ended, the stored plan, and what the engine did.
#[derive(Debug, Serialize, ToSchema)]
struct Created {
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
async fn create_plan(
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

/// One Server-Sent Event as a client reads it (documentation only: the stream is written by
/// axum's `Sse`): `event` names the kind, `data` is a JSON document.
#[derive(ToSchema)]
#[allow(dead_code, reason = "a schema for the OpenAPI document, never built")]
struct SseEvent {
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

fn sse_json(kind: &str, value: &impl Serialize) -> Event {
    let data = serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned());
    Event::default().event(kind).data(data)
}

fn sse<S>(stream: S) -> impl IntoResponse
where
    S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
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

/// The SSE kind of a planning event (on `POST /v1/plans?stream=true` and on a plan's events).
fn event_kind(event: &PlanEvent) -> &'static str {
    match event {
        PlanEvent::AttemptStarted { .. } => "attempt_started",
        PlanEvent::Token { .. } => "token",
        PlanEvent::Step { .. } => "step",
        PlanEvent::Repair { .. } => "repair",
    }
}

/// A replanning's events, published on the plan's event stream as they happen (encoded only
/// when someone listens).
fn replan_events(state: &AppState, id: &str) -> impl FnMut(PlanEvent) + Send + use<> {
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

/// Filters and paging of `GET /v1/plans`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only this owner's plans (ignored under tokens: an owner lists only its own).
    owner: Option<String>,
    /// Only plans of this conversation.
    conversation_id: Option<String>,
    /// Only plans of this thread.
    thread_id: Option<String>,
    /// Only plans in this review state.
    state: Option<ReviewState>,
    /// Page size (default 50, clamped to 1..=500).
    limit: Option<u32>,
    /// Plans to skip (the cost grows with it; prefer `cursor`).
    #[serde(default)]
    offset: u32,
    /// Start after this place: the `next_cursor` of the previous page. Every page costs the
    /// same however deep, and plans updated meanwhile do not shift the pages. Not with `offset`.
    cursor: Option<String>,
    /// Count every matching plan for `total`. By default the count stops at 10,000 (the
    /// server's cap; `total_exact` is then `false`), so that a page costs the same however many
    /// plans are stored; an exact count reads them all.
    #[serde(default)]
    exact_total: bool,
}

/// Lists plans, most recently updated first.
#[utoipa::path(get, path = "/v1/plans", tag = "plans", params(ListQuery),
    responses((status = 200, description = "One page of plans", body = Page)))]
async fn list_plans(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Page>, ApiError> {
    let filter = ListFilter {
        owner: caller.0.clone().or(query.owner),
        conversation_id: query.conversation_id,
        thread_id: query.thread_id,
        state: query.state,
        limit: Some(query.limit.unwrap_or(50).clamp(1, MAX_LIMIT)),
        offset: query.offset,
        cursor: query.cursor,
        total_cap: (!query.exact_total).then_some(state.config.list_total_cap),
    };
    Ok(Json(state.store.list(&filter).await?))
}

/// Query of `GET /v1/plans/{id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct VersionQuery {
    /// One version's document instead of the current plan.
    version: Option<u32>,
}

/// Answer of `GET /v1/plans/{id}`: the current plan, or one version's document.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
enum PlanOrVersion {
    /// Without `version`: the current plan with its review state.
    Current(Box<StoredPlan>),
    /// With `version`: that version's document.
    Version(Box<VersionDocument>),
}

/// One version's document.
#[derive(Debug, Serialize, ToSchema)]
struct VersionDocument {
    /// The plan as it was at that version.
    plan: Plan,
    /// The version.
    version: u32,
}

/// Answer of `GET /v1/plans/{id}/history`.
#[derive(Debug, Serialize, ToSchema)]
struct History {
    /// Every version, oldest first.
    versions: Vec<VersionRecord>,
}

/// The current plan with its review state, or one version's document.
#[utoipa::path(get, path = "/v1/plans/{id}", tag = "plans",
    params(("id" = String, Path, description = "The plan id"), VersionQuery),
    responses((status = 200, description = "The plan", body = PlanOrVersion)))]
async fn get_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<VersionQuery>,
) -> Result<Json<PlanOrVersion>, ApiError> {
    let stored = load(&state, &caller, &id).await?;
    match query.version {
        None => {
            // While a run is in progress, `run` is not offered (starting one would be refused).
            let stored = state.store.with_run(stored).await?;
            Ok(Json(PlanOrVersion::Current(Box::new(stored))))
        }
        Some(version) if version == 0 || version > stored.version() => Err(ApiError::new(
            "not_found",
            format!("plan `{id}` has no version {version}"),
        )),
        Some(version) => {
            let plan = state.store.get_version(&id, version).await?;
            let document = VersionDocument { plan, version };
            Ok(Json(PlanOrVersion::Version(Box::new(document))))
        }
    }
}

/// Every version of a plan: trigger, actor, time, review state and JSON diff.
#[utoipa::path(get, path = "/v1/plans/{id}/history", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    responses((status = 200, description = "The versions, oldest first", body = History)))]
async fn history(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<History>, ApiError> {
    load(&state, &caller, &id).await?;
    let versions = state.store.history(&id).await?;
    Ok(Json(History { versions }))
}

/// Deletes a plan and all its versions (subscribers get `plan_deleted`, then their stream ends).
#[utoipa::path(delete, path = "/v1/plans/{id}", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    responses((status = 204, description = "Deleted")))]
async fn delete_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    load(&state, &caller, &id).await?;
    state.store.delete(&id).await?;
    state.bus.publish(PlanBusEvent {
        kind: "plan_deleted".to_owned(),
        plan_id: id,
        version: None,
        data: Value::Null,
    });
    Ok(StatusCode::NO_CONTENT)
}

/// Body of `POST /v1/plans/{id}/feedback`. (Its schema is `ReviewFeedback`: core's replanning
/// `Feedback` already has the name `Feedback` in the document.)
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = ReviewFeedback)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Feedback {
    /// Accept the plan.
    Accept {
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// Reject it, with an optional reason.
    Reject {
        /// Why.
        #[serde(default)]
        text: Option<String>,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// Free-text feedback: replanned by the model.
    Edit {
        /// The feedback.
        text: String,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// A structured edit: an RFC 6902 JSON Patch on the plan document, re-validated.
    Patch {
        /// The operations.
        #[schema(value_type = Vec<Object>)]
        patch: Value,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// Answers to the plan's questions: replanned by the model.
    Answer {
        /// The answers.
        text: String,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// A decision about one step of a running plan: `approve` / `deny` a gated step, or
    /// `retry` / `skip` / `abort` after a failure under the `ask` policy.
    Step {
        /// The step id.
        step: String,
        /// `approve`, `deny`, `retry`, `skip` or `abort`.
        verdict: plansmith_store::StepVerdict,
        /// A note for the log.
        #[serde(default)]
        note: String,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
}

impl Feedback {
    /// The decision, and the version the reviewer read.
    fn into_decision(self) -> (Decision, Option<u32>) {
        match self {
            Feedback::Accept { expected_version } => (Decision::Accept, expected_version),
            Feedback::Reject {
                text,
                expected_version,
            } => (Decision::Reject(text), expected_version),
            Feedback::Edit {
                text,
                expected_version,
            } => (Decision::Edit(text), expected_version),
            Feedback::Patch {
                patch,
                expected_version,
            } => (Decision::Patch(patch), expected_version),
            Feedback::Answer {
                text,
                expected_version,
            } => (Decision::Answer(text), expected_version),
            Feedback::Step {
                step,
                verdict,
                note,
                expected_version,
            } => (
                Decision::Step {
                    step,
                    verdict,
                    note,
                },
                expected_version,
            ),
        }
    }
}

/// Answer of the feedback and step routes: the stored plan and the warnings of a patch.
#[derive(Debug, Serialize, ToSchema)]
struct Updated {
    #[serde(flatten)]
    stored: StoredPlan,
    /// The engine's warnings about a structured edit (empty otherwise).
    diagnostics: Vec<Diagnostic>,
    /// For the `step` action: the decision as recorded, and whether the step was waiting for
    /// it (`applies: now`) or the run applies it when it reaches the step (`when_reached`).
    #[serde(skip_serializing_if = "Option::is_none")]
    step_decision: Option<plansmith_store::StepDecided>,
}

/// Review feedback: accept, reject, free-text edit (replanned), structured edit (an RFC 6902
/// JSON Patch, re-validated against the catalog), or answers to the plan's questions.
#[utoipa::path(post, path = "/v1/plans/{id}/feedback", tag = "plans",
    params(("id" = String, Path, description = "The plan id")), request_body = Feedback,
    responses(
        (status = 200, description = "The plan after the feedback", body = Updated),
        (status = 409, description = "`conflict`: the plan is no longer at `expected_version`, the review state does not allow this action, or a step decision that no run would read (no run in progress, or a step the run is done with)", body = ErrorBody),
        (status = 422, description = "`invalid_plan` (the edit broke the plan; `details` is the diagnostics list) or `planning_failed`", body = ErrorBody),
        (status = 502, description = "`model_error`: the replan's model call failed", body = ErrorBody),
    ))]
async fn feedback(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<Feedback>,
) -> Result<Json<Updated>, ApiError> {
    load(&state, &caller, &id).await?;
    let (decision, expected_version) = body.into_decision();
    let mut on_event = replan_events(&state, &id);
    let decided = state
        .service
        .decide(
            &id,
            decision,
            expected_version,
            &caller.actor(),
            Some(&mut on_event),
        )
        .await?;
    let Decided {
        stored,
        diagnostics,
        step_decision,
        ..
    } = decided;
    publish_stored(&state.bus, "plan_updated", &stored);
    Ok(Json(Updated {
        stored,
        diagnostics,
        step_decision,
    }))
}

/// Body of `POST /v1/plans/{id}/check`: a structured edit to check.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The operations, as for the `patch` feedback action (RFC 6902 JSON Patch).
    #[schema(value_type = Vec<Object>)]
    patch: Value,
}

/// Answer of `POST /v1/plans/{id}/check`.
#[derive(Debug, Serialize, ToSchema)]
struct Checked {
    /// True when no finding is an error: the `patch` feedback action would store the edit.
    valid: bool,
    /// The plan as the edit would make it, validated (argument defaults filled in, etc.).
    plan: Plan,
    /// Every finding of the engine's validation, errors included.
    diagnostics: Vec<Diagnostic>,
}

/// Checks a structured edit without storing it: the engine's diagnostics of the plan as the
/// `patch` feedback action would make it. The review page calls it while an argument is
/// typed. Refused like the edit itself when the plan may not be edited.
#[utoipa::path(post, path = "/v1/plans/{id}/check", tag = "plans",
    params(("id" = String, Path, description = "The plan id")), request_body = Check,
    responses(
        (status = 200, description = "The edit's findings; nothing was stored", body = Checked),
        (status = 409, description = "`conflict`: the review state does not allow edits", body = ErrorBody),
    ))]
async fn check_edit(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<Check>,
) -> Result<Json<Checked>, ApiError> {
    load(&state, &caller, &id).await?;
    let (plan, diagnostics) = state.service.check(&id, &body.patch).await?;
    Ok(Json(Checked {
        valid: !diagnostics.iter().any(Diagnostic::is_error),
        plan,
        diagnostics,
    }))
}

/// Body of `PATCH /v1/plans/{id}/steps/{step}` (step: 0-based index or step id).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepUpdate {
    /// New status: `not_started`, `in_progress`, `completed`, `blocked`, `failed`, `skipped`.
    #[serde(default)]
    #[schema(value_type = Option<StepStatus>)]
    pub status: Option<String>,
    /// New notes.
    #[serde(default)]
    pub notes: Option<String>,
    /// The step's result.
    #[serde(default)]
    pub result: Option<Value>,
    /// Write only if the plan is still at this version (else `conflict`).
    #[serde(default)]
    pub expected_version: Option<u32>,
}

/// Marks a step: status, notes, result (a new version, trigger `step_update`; subscribers get
/// `step_status`). An update that changes nothing answers the plan as it is, with no new
/// version and no event, so a client may repeat it; an empty one is a `bad_request`.
#[utoipa::path(patch, path = "/v1/plans/{id}/steps/{step}", tag = "plans",
    params(("id" = String, Path, description = "The plan id"),
           ("step" = String, Path, description = "0-based step index or step id")),
    request_body = StepUpdate,
    responses(
        (status = 200, description = "The plan after the change", body = Updated),
        (status = 409, description = "`conflict`: `expected_version` is stale", body = ErrorBody),
    ))]
async fn update_step(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, step)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<StepUpdate>,
) -> Result<Json<Updated>, ApiError> {
    if body.status.is_none() && body.notes.is_none() && body.result.is_none() {
        return Err(ApiError::new(
            "bad_request",
            "nothing to update: give the step's `status`, `notes` or `result`",
        ));
    }
    let current = load(&state, &caller, &id).await?;
    let status: Option<StepStatus> = body.status.as_deref().map(parse_status).transpose()?;
    let mut plan = current.plan.clone();
    let index = match step.parse::<usize>() {
        Ok(i) if i < plan.steps.len() => Some(i),
        Ok(_) => None,
        Err(_) => plan.steps.iter().position(|s| s.id == step),
    };
    // A step the plan does not have is a missing resource, as a missing plan is.
    let Some(target) = index.and_then(|i| plan.steps.get_mut(i)) else {
        return Err(ApiError::new(
            "not_found",
            format!(
                "plan `{id}` has no step {step}: valid indices range from 0 to {} (or a step id)",
                plan.steps.len().saturating_sub(1)
            ),
        ));
    };
    if let Some(status) = status {
        target.status = status;
    }
    if let Some(notes) = &body.notes {
        target.notes = notes.clone();
    }
    if let Some(result) = &body.result {
        target.result = Some(result.clone());
    }
    // What the step already says (a worker repeating its report after a lost answer) makes no
    // new version and no event; a stale `expected_version` is still a conflict, below.
    let unchanged = index.and_then(|i| current.plan.steps.get(i)) == Some(&*target);
    if unchanged
        && body
            .expected_version
            .is_none_or(|expected| expected == current.version())
    {
        return Ok(Json(Updated {
            stored: current,
            diagnostics: Vec::new(),
            step_decision: None,
        }));
    }
    let event = json!({
        "step": target.id, "status": target.status, "notes": target.notes, "result": target.result,
    });
    let stored = state
        .store
        .write(Change {
            expected_version: body.expected_version.unwrap_or(current.version()),
            plan,
            state: current.state,
            review: current.review,
            trigger: Trigger::StepUpdate,
            actor: caller.actor(),
        })
        .await?;
    state.bus.publish(PlanBusEvent {
        kind: "step_status".to_owned(),
        plan_id: id,
        version: Some(stored.version()),
        data: event,
    });
    Ok(Json(Updated {
        stored,
        diagnostics: Vec::new(),
        step_decision: None,
    }))
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
#[utoipa::path(get, path = "/v1/plans/{id}/events", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    responses((status = 200, description = "Server-Sent Events; each `data:` is a `PlanBusEvent` (the first, `snapshot`, is the `StoredPlan`)", content_type = "text/event-stream", body = SseEvent)))]
async fn events(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
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
async fn run_plan(
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

/// A body that may be left out (empty: the defaults), else read as [`ApiJson`] reads one.
fn optional_body<T: DeserializeOwned + ToSchema + Default>(
    body: &[u8],
    what: &str,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let value = serde_json::from_slice(body)
        .map_err(|err| ApiError::new("bad_request", format!("invalid {what}: {err}")))?;
    read_body(value)
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
async fn stop_run(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for local in [
            "localhost",
            "LocalHost:8080",
            "localhost.:80",
            "127.0.0.1",
            "127.0.0.1:3000",
            "127.1.2.3:9",
            "[::1]",
            "[::1]:8080",
        ] {
            assert!(is_loopback_host(local), "{local}");
        }
        for other in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.nip.io:80",
            "10.0.0.1:80",
            "[::2]:80",
            "[::1",
            "[::1]x",
            "localhost:80x",
            "",
        ] {
            assert!(!is_loopback_host(other), "{other}");
        }
    }
}
