//! plansmith-server: the engine as an HTTP service.
//!
//! [`router`] builds the axum router of the `/v1` API (plan, list, get, history, feedback,
//! step updates, delete, live events over SSE), `/metrics`, `/healthz`, `/readyz` and the
//! review page at `/`, and its OpenAPI 3.1 document at `/openapi.json`
//! ([`openapi::document`], generated from the code). This is the only crate of the workspace
//! that knows HTTP routes.
//!
//! - Errors: one table, [`error::ERROR_TABLE`]; every error body is `{code, message, details}`.
//! - Tenancy: with API tokens configured ([`ServerConfig::tokens`]) each request needs
//!   `Authorization: Bearer TOKEN`, the token names an owner, and an owner sees only its own
//!   plans (others' answer `not_found`). With no tokens the server is single-user and
//!   [`ServerConfig::check_bind`] refuses any address but loopback. Pages on other origins
//!   may call the API only when their origin is listed ([`ServerConfig::cors_origins`]).
//! - Events: [`events::EventBus`] has one broadcast channel per plan; other crates publish
//!   into it through [`Shared::bus`] (an [`AppState`] derefs to it).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod error;
mod events;
mod metrics;
mod routes;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use plansmith_core::Planner;
use plansmith_service::{Planners, Service};
use plansmith_store::PlanStore;

pub use error::{ApiError, ERROR_TABLE, ErrorBody};
pub use events::{EventBus, PlanBusEvent, RelayStats};
pub use metrics::Metrics;
pub use plansmith_service::Runner;
pub use routes::openapi;
pub use routes::{CreatePlan, Feedback, RunRequest, RunStarted, StepUpdate};

/// Server settings (the CLI layers defaults → file → `PLANSMITH_*` env → flags into this).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// API token → owner. Empty: no authentication, loopback only.
    pub tokens: HashMap<String, String>,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Requests per second per owner (0: unlimited). Each owner of a token has its own bucket
    /// (a burst of one second's worth); requests without a valid token share one bucket, and
    /// without tokens every request shares one. Over it: `429 rate_limited` with `Retry-After`.
    /// The probes (`/healthz`, `/readyz`) are not limited.
    pub rate_limit_per_sec: u32,
    /// Longest time to answer a request (SSE streams excepted once they started).
    pub request_timeout: Duration,
    /// `GET /v1/plans` counts at most this many matching plans for `total` (unless the request
    /// asks for `exact_total`): a page then costs the same however many plans the store holds.
    pub list_total_cap: u64,
    /// Origins (`scheme://host[:port]`, as a browser sends them) whose pages may call the API
    /// across origins (CORS), with their bearer token; `*` for any. Empty (the default): no
    /// cross-origin calls, which the review page (served from here) does not need.
    pub cors_origins: Vec<String>,
    /// Longest wait for a request's headers, from when the connection is ready for the next
    /// request: a client that sends partial headers, or keeps an idle connection open, is
    /// disconnected after this long. Also the longest pause within a request's body: a body
    /// that sends nothing for this long is answered `408 request_timeout`.
    pub header_timeout: Duration,
    /// Most connections served at once (review pages' event streams included); more wait to be
    /// accepted until one closes.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            tokens: HashMap::new(),
            max_body_bytes: 1 << 20,
            rate_limit_per_sec: 0,
            request_timeout: Duration::from_secs(120),
            list_total_cap: plansmith_store::store::DEFAULT_TOTAL_CAP,
            cors_origins: Vec::new(),
            header_timeout: Duration::from_secs(10),
            max_connections: 512,
        }
    }
}

/// A configuration that cannot serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No tokens and an address that is not loopback.
    #[error(
        "refusing to listen on {0} without API tokens: set tokens (PLANSMITH_TOKENS=token:owner,…) or listen on loopback"
    )]
    OpenWithoutTokens(SocketAddr),
    /// A CORS origin a browser could never send.
    #[error(
        "CORS origin `{origin}` {why}; an origin is scheme://host[:port], e.g. http://localhost:3000, or *"
    )]
    BadOrigin {
        /// The origin as configured.
        origin: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A limit of zero, which would serve nothing.
    #[error("{0} is 0: nothing could be served (give at least 1)")]
    Zero(&'static str),
}

impl ServerConfig {
    /// Checks that the address is loopback when no tokens are configured, and that the
    /// connection limits can serve anything.
    pub fn check_bind(&self, addr: SocketAddr) -> Result<(), ConfigError> {
        if self.tokens.is_empty() && !addr.ip().is_loopback() {
            return Err(ConfigError::OpenWithoutTokens(addr));
        }
        if self.max_connections == 0 {
            return Err(ConfigError::Zero("the connection limit"));
        }
        if self.header_timeout.is_zero() {
            return Err(ConfigError::Zero("the header timeout"));
        }
        Ok(())
    }

    /// [`ServerConfig::check_bind`], and that each CORS origin is one a browser can send (a
    /// trailing slash or a path, the usual slip, would never match and fail silently).
    pub fn check(&self, addr: SocketAddr) -> Result<(), ConfigError> {
        self.check_bind(addr)?;
        for origin in &self.cors_origins {
            if let Some(why) = origin_problem(origin) {
                return Err(ConfigError::BadOrigin {
                    origin: origin.clone(),
                    why,
                });
            }
        }
        Ok(())
    }
}

/// What keeps `origin` from matching a browser's `Origin` header, if anything.
fn origin_problem(origin: &str) -> Option<&'static str> {
    if origin == "*" {
        return None;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return Some("has no scheme");
    };
    if !matches!(scheme, "http" | "https") {
        return Some("is not http or https");
    }
    if rest.is_empty() {
        return Some("has no host");
    }
    if rest.contains('/') {
        return Some("has a path (or a trailing slash)");
    }
    if axum::http::HeaderValue::from_str(origin).is_err() || rest.contains(char::is_whitespace) {
        return Some("has characters a header cannot hold");
    }
    None
}

/// Everything the handlers share: one allocation, so a clone (axum clones the state for every
/// route and extractor a request passes) is one reference count. Its parts are read through
/// `Deref` ([`Shared`]).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] holds.
#[derive(Clone)]
pub struct Shared {
    /// The plan store.
    pub store: PlanStore,
    /// The planner (model + the service's catalog).
    pub planner: Arc<Planner>,
    /// The service's planner and those built for catalogs that requests sent; a stored plan's
    /// operations use [`Planners::for_review`].
    pub planners: Arc<Planners>,
    /// The operations on plans, shared with the MCP endpoint: planning and submitting, the
    /// review decisions, checks.
    pub service: Service,
    /// Settings.
    pub config: Arc<ServerConfig>,
    /// Per-plan event channels.
    pub bus: EventBus,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Rate-limit buckets by owner (bounded: the configured owners, plus one for requests
    /// without a valid token).
    limiter: Arc<Mutex<HashMap<String, Bucket>>>,
    /// The MCP endpoint mounted at `/mcp` ([`AppState::with_mcp`]), if any.
    mcp: Option<Router>,
    /// Set to `true` when [`serve`] begins to shut down: the plans' event streams end then.
    closing: Arc<tokio::sync::watch::Sender<bool>>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("planner", &self.planner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl AppState {
    /// State over a store and a planner.
    pub fn new(store: PlanStore, planner: Planner, config: ServerConfig) -> AppState {
        let planner = Arc::new(planner);
        let planners = Arc::new(Planners::new(Arc::clone(&planner)));
        AppState(Arc::new(Shared {
            service: Service::new(store.clone(), Arc::clone(&planners)),
            store,
            planners,
            planner,
            config: Arc::new(config),
            bus: EventBus::new(),
            metrics: Arc::new(Metrics::new()),
            limiter: Arc::new(Mutex::new(HashMap::new())),
            mcp: None,
            closing: Arc::new(tokio::sync::watch::Sender::new(false)),
        }))
    }

    /// Resolves once [`serve`] has begun to shut down (at once if it has).
    pub(crate) async fn closed(&self) {
        let mut closing = self.closing.subscribe();
        // An error means the sender is gone, which cannot happen while `self` holds it.
        let _ = closing.wait_for(|closing| *closing).await;
    }

    /// Mounts an MCP endpoint (e.g. `plansmith_mcp::server::http_service`, streamable HTTP) at
    /// `/mcp`, behind the same rate limit, body limit, timeout and metrics as the other routes. The
    /// service does its own authentication. This crate does not depend on the MCP crate: the
    /// CLI builds the service and passes it in.
    pub fn with_mcp<S>(mut self, service: S) -> AppState
    where
        S: tower_service::Service<axum::extract::Request, Error = std::convert::Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Response: axum::response::IntoResponse,
        S::Future: Send + 'static,
    {
        Arc::make_mut(&mut self.0).mcp = Some(Router::new().fallback_service(service));
        self
    }

    /// The router the routes are added to: empty, or with the MCP endpoint nested at `/mcp`
    /// (its request bodies are read and bounded by the guard in front of every route).
    fn base_router(&self) -> Router<AppState> {
        match &self.mcp {
            Some(mcp) => Router::new().nest_service("/mcp", mcp.clone()),
            None => Router::new(),
        }
    }

    /// Runs plans with `executor` (its events go to the plan event streams; a plan made with
    /// its caller's catalog runs against that one); with `worker`,
    /// also joins the running runs of the store every poll interval (several processes
    /// on one PostgreSQL store share the work).
    pub fn with_executor(mut self, executor: plansmith_exec::Executor, worker: bool) -> AppState {
        let every = executor.config().poll_interval;
        // Plans made with their caller's catalog run against it.
        let planners: Arc<Planners> = Arc::clone(&self.planners);
        let executor = events::observed(executor.with_planners(planners), self.bus.clone());
        let runner = Runner::new(executor);
        if worker {
            runner.spawn_worker(every);
        }
        // A decision or a stop that a paused run waits for wakes the run here at once (the
        // worker would also find it, one poll later), whichever front end it came through.
        let shared = Arc::make_mut(&mut self.0);
        shared.service = shared.service.clone().with_runner(runner);
        self
    }

    /// The runner of this server's executor, when it runs plans.
    pub fn runner(&self) -> Option<&Runner> {
        self.service.runner()
    }

    /// Takes one request from `key`'s rate-limit bucket (a full bucket for a new key). When
    /// the bucket is empty: `Err(seconds)` until the next request would be admitted (at least 1).
    fn admit(&self, key: &str) -> Result<(), u64> {
        let rate = f64::from(self.config.rate_limit_per_sec);
        if rate <= 0.0 {
            return Ok(());
        }
        let Ok(mut buckets) = self.limiter.lock() else {
            return Ok(());
        };
        let now = Instant::now();
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: rate,
            last: now,
        });
        let refill = now.duration_since(bucket.last).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refill).min(rate);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = ((1.0 - bucket.tokens) / rate).ceil();
            Err((wait as u64).max(1))
        }
    }

    /// The owner a request's `Authorization: Bearer TOKEN` maps to: `Ok(None)` without tokens
    /// configured (single user), `Err(())` when tokens are configured and it is missing or
    /// unknown.
    fn owner_of(&self, headers: &axum::http::HeaderMap) -> Result<Option<String>, ()> {
        if self.config.tokens.is_empty() {
            return Ok(None);
        }
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .and_then(|token| self.config.tokens.get(token))
            .map(|owner| Some(owner.clone()))
            .ok_or(())
    }
}

/// The whole HTTP API and the review page. Other crates add routes with `.merge(…)` /
/// `.nest(…)` on the result.
pub fn router(state: AppState) -> Router {
    routes::router(state)
}

/// Serves `router(state)` on a bound listener until `shutdown` completes, then shuts down
/// gracefully: no new connection is taken, the plans' event streams (`GET …/events`, open as
/// long as a review page is) end, and the requests in flight are answered. Returns once they
/// are, or [`ShutdownOutcome::GaveUp`] when some are still running after the request timeout
/// plus [`SHUTDOWN_SLACK`] (a request's handler is bounded by the timeout; a planning stream
/// may run longer).
///
/// Each connection must send a request's headers within [`ServerConfig::header_timeout`] of
/// being ready for it (so neither slow headers nor idle keep-alive connections hold it), and
/// at most [`ServerConfig::max_connections`] are served at once: the next one is accepted
/// when one closes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<ShutdownOutcome> {
    let closing = state.closing.clone();
    let grace = state.config.request_timeout + SHUTDOWN_SLACK;
    let header_timeout = state.config.header_timeout;
    let slots = Arc::new(tokio::sync::Semaphore::new(
        state.config.max_connections.max(1),
    ));
    let app = router(state);
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break, // never closed
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    accept_failed(&err).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_timeout);
        let connection = connections
            .watch(builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!("connection ended: {err}");
            }
            drop(slot);
        });
    }
    closing.send_replace(true);
    tokio::select! {
        () = connections.shutdown() => Ok(ShutdownOutcome::Drained),
        () = tokio::time::sleep(grace) => Ok(ShutdownOutcome::GaveUp(grace)),
    }
}

/// After a failed `accept`: a connection that went away before it was taken is nothing; other
/// errors (out of file descriptors, most often) are logged and the loop pauses before the
/// next try, rather than spinning.
async fn accept_failed(err: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    tracing::warn!("cannot accept a connection: {err}");
    tokio::time::sleep(Duration::from_millis(250)).await;
}

/// Time allowed beyond the request timeout for the requests in flight when [`serve`] shuts
/// down.
pub const SHUTDOWN_SLACK: Duration = Duration::from_secs(5);

/// How [`serve`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownOutcome {
    /// Every request in flight was answered.
    Drained,
    /// Some were still running after this long; they were dropped.
    GaveUp(Duration),
}
