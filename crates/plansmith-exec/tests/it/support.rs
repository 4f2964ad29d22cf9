//! Test plumbing: a fresh SQLite store, plans from compact JSON, the script tools as a
//! command map, an executor with short timings.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plansmith_core::{Plan, Step};
use plansmith_exec::{
    CommandInvoker, Endpoint, ExecConfig, ExecEvent, Executor, FailurePolicy, Invokers, OnFailure,
};
use plansmith_store::{Location, PlanStore, Review, ReviewState};
use serde_json::Value;

pub struct Env {
    pub store: PlanStore,
    pub dir: tempfile::TempDir,
}

pub async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = PlanStore::open(&Location::Sqlite(dir.path().join("plans.db")))
        .await
        .unwrap();
    Env { store, dir }
}

impl Env {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Stores an accepted plan with these steps (a JSON array of steps) and metadata.
    pub async fn plan(&self, id: &str, steps: Value, metadata: Value) -> Plan {
        let mut plan = Plan::new(id, format!("goal of {id}"));
        plan.title = id.to_owned();
        plan.steps = serde_json::from_value::<Vec<Step>>(steps).unwrap();
        if let Value::Object(map) = metadata {
            plan.metadata = map;
        }
        self.store
            .create(
                plan.clone(),
                ReviewState::Accepted,
                Review::default(),
                "test",
            )
            .await
            .unwrap();
        plan
    }
}

pub fn tools_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tools")
}

/// A command endpoint running `tests/tools/SCRIPT args…`.
pub fn script(name: &str, args: &[&str]) -> Endpoint {
    let mut command = vec![
        "sh".to_owned(),
        tools_dir().join(name).display().to_string(),
    ];
    command.extend(args.iter().map(|a| (*a).to_owned()));
    Endpoint::Command {
        command,
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(30_000),
    }
}

pub fn invokers(tools: Vec<(&str, Endpoint)>) -> Invokers {
    Invokers {
        tools: Some(Arc::new(CommandInvoker::new(
            tools.into_iter().map(|(n, e)| (n.to_owned(), e)),
        ))),
        ..Invokers::default()
    }
}

pub fn config(node: &str) -> ExecConfig {
    let mut config = ExecConfig::new(node);
    config.concurrency = 8;
    config.poll_interval = Duration::from_millis(20);
    config.lease = Duration::from_secs(2);
    config.policy = FailurePolicy {
        retries: 2,
        backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        on_failure: OnFailure::Fail,
        siblings: plansmith_exec::Siblings::Isolate,
        timeout: None,
    };
    config
}

/// Events seen by an executor, as `kind step` strings.
#[derive(Clone, Default)]
pub struct Seen(pub Arc<Mutex<Vec<ExecEvent>>>);

impl Seen {
    pub fn attach(&self, executor: Executor) -> Executor {
        let seen = self.0.clone();
        executor.with_observer(Arc::new(move |_plan, event| {
            seen.lock().unwrap().push(event.clone());
        }))
    }

    pub fn kinds(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.kind().to_owned())
            .collect()
    }
}

pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}
