//! The streamable HTTP endpoint: a `tower` service that checks bearer tokens and passes the
//! token's owner to the tools.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;

use super::PlansmithMcp;

/// Header that carries the caller's owner from the HTTP layer to the tools (set by
/// [`http_service`] from the bearer token; a client-sent value is always replaced or removed).
const OWNER_HEADER: &str = "x-plansmith-owner";

/// The caller's owner over HTTP with tokens; `None` on stdio or without tokens.
pub(super) fn owner_of(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.headers.get(OWNER_HEADER))
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// The response type of [`McpHttpService`].
pub type HttpResponse = http::Response<BoxBody<Bytes, Infallible>>;

/// The streamable HTTP endpoint: a `tower` service to mount (e.g. axum's
/// `nest_service("/mcp", …)`). With tokens, every request needs `Authorization: Bearer TOKEN`
/// and acts for the token's owner.
#[derive(Clone)]
pub struct McpHttpService {
    inner: StreamableHttpService<PlansmithMcp, LocalSessionManager>,
    tokens: Arc<HashMap<String, String>>,
    /// Cancelled by [`McpHttpService::close`]: rmcp ends every session then.
    closing: tokio_util::sync::CancellationToken,
}

impl McpHttpService {
    /// Ends every MCP session (their open event streams close) and refuses new requests.
    /// Call it when the server shuts down: a client's open stream would otherwise hold a
    /// graceful shutdown up. Affects every clone.
    pub fn close(&self) {
        self.closing.cancel();
    }
}

impl std::fmt::Debug for McpHttpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttpService")
            .field("tokens", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

/// The streamable HTTP service over `server`. `tokens` maps API tokens to owners (empty: no
/// authentication, which the HTTP server only allows on loopback); with tokens, the `Host`
/// check of the SDK (loopback names only, against DNS rebinding) is lifted, since callers
/// authenticate.
pub fn http_service(server: PlansmithMcp, tokens: HashMap<String, String>) -> McpHttpService {
    let mut config = StreamableHttpServerConfig::default();
    if !tokens.is_empty() {
        config = config.disable_allowed_hosts();
    }
    let closing = config.cancellation_token.clone();
    let inner = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    McpHttpService {
        inner,
        tokens: Arc::new(tokens),
        closing,
    }
}

impl<B> tower_service::Service<http::Request<B>> for McpHttpService
where
    B: http_body::Body + Send + 'static,
    B::Error: std::fmt::Display,
    B::Data: Send + 'static,
{
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<HttpResponse, Infallible>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.headers_mut().remove(OWNER_HEADER);
        if !self.tokens.is_empty() {
            let owner = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .and_then(|token| self.tokens.get(token.trim()))
                .and_then(|owner| http::HeaderValue::from_str(owner).ok());
            match owner {
                Some(owner) => {
                    request.headers_mut().insert(OWNER_HEADER, owner);
                }
                None => return Box::pin(async { Ok(unauthorized()) }),
            }
        }
        let mut inner = self.inner.clone();
        Box::pin(async move { inner.call(request).await })
    }
}

fn unauthorized() -> HttpResponse {
    let body = json!({
        "code": "unauthorized",
        "message": "a valid `Authorization: Bearer TOKEN` header is required",
        "details": null,
    })
    .to_string();
    let mut response = http::Response::new(
        http_body_util::Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = http::StatusCode::UNAUTHORIZED;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}
