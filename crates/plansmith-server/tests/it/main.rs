//! API tests through real HTTP on loopback: every endpoint, SSE streams, error cases.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod browser;
mod catalogs;
mod openapi;
mod run;
mod security;
mod templates;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use plansmith_core::{Catalog, LanguageModel, Planner, ScriptedModel};
use plansmith_server::{AppState, ServerConfig};
use plansmith_store::{Location, PlanStore};
use reqwest::Method;
use serde_json::{Value, json};

/// A running server on an ephemeral loopback port.
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// A client with a timeout.
    pub client: reqwest::Client,
    _dir: tempfile::TempDir,
}

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The model reply of an example script, `n` times.
pub fn reply(name: &str, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(root().join("examples/replies").join(name)).unwrap();
    let script: Value = serde_json::from_str(&text).unwrap();
    let turn = script["turns"][0].as_str().unwrap().to_owned();
    vec![turn; n]
}

/// The request most tests plan.
pub fn weather() -> Value {
    json!({"query": "Email Bob the weather in Paris"})
}

/// A request the scripted `missing-recipient.json` reply answers with a plan that needs input
/// (no repairs, so the question stays).
pub fn needs_input() -> Value {
    json!({"query": "Email the report", "options": {"max_repairs": 0}})
}

/// Plans [`weather`] through `POST /v1/plans` and gives the `201` answer.
pub async fn create(server: &Server, token: Option<&str>) -> Value {
    let (status, body) = call(server, Method::POST, "/v1/plans", Some(weather()), token).await;
    assert_eq!(status, 201, "{body}");
    body
}

/// Starts a server over a fresh SQLite store, scripted with `turns`.
pub async fn start(turns: Vec<String>, config: ServerConfig) -> Server {
    start_with(Arc::new(ScriptedModel::new(turns)), config).await
}

/// Starts a server over a fresh SQLite store and the example catalog, planning with `model`.
pub async fn start_with(model: Arc<dyn LanguageModel>, config: ServerConfig) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = PlanStore::open(&Location::Sqlite(dir.path().join("plans.db")))
        .await
        .unwrap();
    serve_state(app_state(store, model, config), dir).await
}

/// The state of a server over `store` and the example catalog, planning with `model`.
pub fn app_state(
    store: PlanStore,
    model: Arc<dyn LanguageModel>,
    config: ServerConfig,
) -> AppState {
    let tools: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("examples/tools.json")).unwrap())
            .unwrap();
    let catalog = Catalog::from_json(&tools).unwrap();
    AppState::new(store, Planner::new(catalog, model), config)
}

/// Serves `state` on an ephemeral loopback port; `dir` (the store's directory) lives as long
/// as the server.
pub async fn serve_state(state: AppState, dir: tempfile::TempDir) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(plansmith_server::serve(
        listener,
        state,
        std::future::pending(),
    ));
    Server::at(addr, dir)
}

impl Server {
    /// A server listening on `addr`, over a store in `dir` (kept as long as the server).
    pub fn at(addr: std::net::SocketAddr, dir: tempfile::TempDir) -> Server {
        Server {
            base: format!("http://{addr}"),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap(),
            _dir: dir,
        }
    }
}

/// Marks step `index` of plan `id` completed straight in `store`, bypassing the server, so
/// that no event tells of it: only a new snapshot can show it.
pub async fn complete_in_store(store: &PlanStore, id: &str, index: usize) {
    let current = store.get(id).await.unwrap();
    let mut plan = current.plan.clone();
    plan.steps[index].status = plansmith_core::StepStatus::Completed;
    store
        .write(plansmith_store::Change {
            expected_version: current.version(),
            plan,
            state: current.state,
            review: current.review,
            trigger: plansmith_store::Trigger::StepUpdate,
            actor: "test".to_owned(),
        })
        .await
        .unwrap();
}

/// A config with these (token, owner) pairs.
pub fn tokens(pairs: &[(&str, &str)]) -> ServerConfig {
    let mut config = ServerConfig::default();
    config.tokens = pairs
        .iter()
        .map(|(t, o)| ((*t).to_owned(), (*o).to_owned()))
        .collect::<HashMap<_, _>>();
    config
}

/// Checks an error answer: its status, its code from the table, a message and details.
pub fn assert_error(status: u16, body: &Value, want_status: u16, want_code: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["code"], want_code, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(body.get("details").is_some(), "{body}");
}

/// Sends a request; returns the status and the body as JSON (`Null` when empty or not JSON).
pub async fn call(
    server: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (u16, Value) {
    let mut req = server
        .client
        .request(method, format!("{}{path}", server.base));
    if let Some(body) = body {
        req = req
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let response = req.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Subscribes to a plan's events (checking the answer is an event stream) and reads them in a
/// task until `until` returns true for one; waits 200 ms for the subscription to be taken.
pub async fn watch(
    server: &Server,
    id: &str,
    until: impl Fn(&str, &Value) -> bool + Send + 'static,
) -> tokio::task::JoinHandle<Vec<(String, Value)>> {
    let events = server
        .client
        .get(format!("{}/v1/plans/{id}/events", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status().as_u16(), 200);
    assert!(
        events.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let reader = tokio::spawn(read_sse(events, until));
    // the snapshot is sent first: give the subscription time to be read
    tokio::time::sleep(Duration::from_millis(200)).await;
    reader
}

/// Reads an SSE response until `until` returns true for an event (bounded), returning the
/// `(event, data)` pairs read.
pub async fn read_sse(
    response: reqwest::Response,
    until: impl Fn(&str, &Value) -> bool,
) -> Vec<(String, Value)> {
    use futures::StreamExt as _;
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("SSE stream timed out")
            .expect("SSE stream ended")
            .unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut kind = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    kind = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            if kind.is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            let stop = until(&kind, &value);
            events.push((kind, value));
            if stop {
                return events;
            }
        }
    }
}
