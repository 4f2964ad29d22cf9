//! The guard every request passes: where it comes from (site and `Host`), the rate limit, the
//! query parameters the route takes, the body read within its limits, the timeout, and the
//! request id, access log, latency metrics and security headers of the answer.

use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Query, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tracing::Instrument;

use crate::AppState;
use crate::error::ApiError;

/// Rate limit (per owner; not for the probes), timeout, and latency metrics for every request.
pub(super) async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
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
pub(super) const X_REQUEST_ID: header::HeaderName = header::HeaderName::from_static("x-request-id");

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
/// OpenAPI document, [`crate::routes::openapi::query_parameters`]); `None` when there are none.
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
    let taken = crate::routes::openapi::query_parameters()
        .get(&(method.as_str().to_owned(), route.to_owned()))?;
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
                && crate::routes::openapi::query_parameters()
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
