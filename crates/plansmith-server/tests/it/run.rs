//! `POST /v1/plans/{id}/run` and the execution events on the plan's stream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use plansmith_core::llm::BoxFuture;
use plansmith_core::{Action, Catalog, Planner, ScriptedModel};
use plansmith_exec::{
    Call, CallProgress, ExecConfig, Executor, FnInvoker, InvokeError, Invoker, Invokers,
};
use plansmith_server::{AppState, ServerConfig};
use plansmith_store::{Location, PlanStore, Review, ReviewState, RunState};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{Server, call, reply, root, serve_state, watch};

/// The in-process tools, `get_weather` reporting its progress first (as an MCP tool does).
struct Reporting(FnInvoker);

impl Invoker for Reporting {
    fn invoke<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<Value, InvokeError>> {
        self.0.invoke(call)
    }

    fn invoke_reporting<'a>(
        &'a self,
        call: &'a Call,
        progress: &'a (dyn Fn(CallProgress) + Send + Sync),
    ) -> BoxFuture<'a, Result<Value, InvokeError>> {
        let reports = matches!(&call.action, Action::Tool { name, .. } if name == "get_weather");
        Box::pin(async move {
            if reports {
                progress(CallProgress {
                    progress: 1.0,
                    total: Some(2.0),
                    message: Some("asking the weather service".into()),
                    task: None,
                });
                // As a real tool does, it works on after its report: a page that got the
                // report and the result in one batch of events would only ever show the result.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            self.0.invoke(call).await
        })
    }
}

/// A server over a fresh store whose executor runs the example tools in process; `calls`
/// records the tool calls.
async fn start_with_executor(calls: Arc<Mutex<Vec<String>>>) -> Server {
    start_with(calls, Vec::new(), false).await.0
}

/// As [`start_with_executor`], with steps that need approval, the background worker on or
/// off, and the store handed back (to decide as `plansmith plans decide` would).
pub(crate) async fn start_with(
    calls: Arc<Mutex<Vec<String>>>,
    require_approval: Vec<String>,
    worker: bool,
) -> (Server, PlanStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = PlanStore::open(&Location::Sqlite(dir.path().join("plans.db")))
        .await
        .unwrap();
    let tools: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("examples/tools.json")).unwrap())
            .unwrap();
    let catalog = Catalog::from_json(&tools).unwrap();
    let planner = Planner::new(
        catalog.clone(),
        Arc::new(ScriptedModel::new(reply("weather-email.json", 1))),
    );
    let invoker = FnInvoker::new(move |call| {
        let Action::Tool { name, arguments } = &call.action else {
            return Ok(Value::Null);
        };
        calls
            .lock()
            .unwrap()
            .push(format!("{name} {}", Value::Object(arguments.clone())));
        std::thread::sleep(Duration::from_millis(150));
        Ok(match name.as_str() {
            "get_weather" => json!({"temperature": 21, "summary": "Sunny, 21 °C"}),
            _ => json!({"sent": true}),
        })
    });
    let invokers = Invokers {
        tools: Some(Arc::new(Reporting(invoker))),
        ..Invokers::default()
    };
    let mut config = ExecConfig::new("test-node");
    config.poll_interval = Duration::from_millis(20);
    config.require_approval = require_approval;
    let executor = Executor::new(store.clone(), invokers, config).with_catalog(catalog);
    let state = AppState::new(store.clone(), planner, ServerConfig::default())
        .with_executor(executor, worker);
    (serve_state(state, dir).await, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_endpoint_streams_execution_events() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let s = start_with_executor(calls.clone()).await;
    let (status, created) = call(
        &s,
        Method::POST,
        "/v1/plans",
        Some(json!({"query": "Email Bob the weather in Paris", "auto_accept": true})),
        None,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    // Before it runs, the plan says what the run will cost.
    let (_, shown) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(shown["estimate"]["tool_calls"], 2, "{shown}");
    assert_eq!(shown["estimate"]["per_tool"]["get_weather"], 1, "{shown}");
    assert_eq!(
        shown["estimate"]["critical_path"],
        json!(["s1", "s2", "s3"]),
        "{shown}"
    );

    let reader = watch(&s, &id, |kind, _| kind == "exec_run_finished").await;

    let (status, body) = call(&s, Method::POST, &format!("/v1/plans/{id}/run"), None, None).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["state"], "running");
    // A second start while it runs is a conflict.
    let (status, body) = call(&s, Method::POST, &format!("/v1/plans/{id}/run"), None, None).await;
    assert_eq!(status, 409, "{body}");

    let seen = reader.await.unwrap();
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    for kind in [
        "exec_run_started",
        "exec_step_started",
        "exec_step_progress",
        "exec_step_completed",
        "step_status",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing in {kinds:?}");
    }
    // A tool's progress report, between its step's start and end.
    let (_, progress) = seen
        .iter()
        .find(|(kind, _)| kind == "exec_step_progress")
        .unwrap();
    assert_eq!(
        progress["data"],
        json!({"kind": "step_progress", "step_id": "s1", "attempt": 1, "progress": 1.0,
               "total": 2.0, "message": "asking the weather service"}),
        "{progress}"
    );
    let at = |wanted: &str| {
        seen.iter()
            .position(|(kind, event)| kind == wanted && event["data"]["step_id"] == "s1")
            .unwrap()
    };
    assert!(at("exec_step_started") < at("exec_step_progress"));
    assert!(at("exec_step_progress") < at("exec_step_completed"));
    let (_, finished) = seen.last().unwrap();
    assert_eq!(finished["data"]["state"], "completed", "{finished}");
    // The run's writes of the plan come as plan_updated (the stored plan, as any writer's),
    // the last one before the end with every step's status and result.
    let (_, written) = seen
        .iter()
        .rev()
        .find(|(kind, _)| kind == "plan_updated")
        .unwrap_or_else(|| panic!("no plan_updated in {kinds:?}"));
    let steps = &written["data"]["plan"]["steps"];
    assert_eq!(steps[0]["status"], "completed", "{written}");
    assert_eq!(steps[0]["result"]["summary"], "Sunny, 21 °C", "{written}");
    assert_eq!(steps[2]["status"], "completed", "{written}");
    assert!(written["version"].as_u64().unwrap() > 1, "{written}");
    // The $ref was filled from the weather result.
    let calls = calls.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .any(|c| c.contains("\"body\":\"Sunny, 21 °C\"")),
        "{calls:?}"
    );

    let (_, plan) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(plan["plan"]["steps"][0]["status"], "completed", "{plan}");
    assert_eq!(plan["plan"]["metadata"]["last_run"]["state"], "completed");

    // Nothing to resume; a bad body is a bad request.
    let (status, _) = call(
        &s,
        Method::POST,
        &format!("/v1/plans/{id}/run"),
        Some(json!({"resume": true})),
        None,
    )
    .await;
    assert_eq!(status, 409);
    let (status, _) = call(
        &s,
        Method::POST,
        &format!("/v1/plans/{id}/run"),
        Some(json!({"resum": true})),
        None,
    )
    .await;
    assert_eq!(status, 400);
    // A step decision through the feedback route names an unknown step.
    let (status, body) = call(
        &s,
        Method::POST,
        &format!("/v1/plans/{id}/feedback"),
        Some(json!({"action": "step", "step": "s9", "verdict": "approve"})),
        None,
    )
    .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_without_an_executor_is_a_bad_request() {
    let s = crate::start(reply("weather-email.json", 1), ServerConfig::default()).await;
    let (_, created) = call(
        &s,
        Method::POST,
        "/v1/plans",
        Some(json!({"query": "x", "auto_accept": true})),
        None,
    )
    .await;
    let id = created["stored"]["plan"]["id"].as_str().unwrap();
    let (status, body) = call(&s, Method::POST, &format!("/v1/plans/{id}/run"), None, None).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("--commands"),
        "{body}"
    );
}

/// Starts a run of a new accepted plan whose `s2` needs approval, and waits until the run
/// pauses for people; returns the plan id.
async fn run_until_paused(s: &Server) -> String {
    let (status, created) = call(
        s,
        Method::POST,
        "/v1/plans",
        Some(json!({"query": "Email Bob the weather in Paris", "auto_accept": true})),
        None,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let reader = watch(s, &id, |kind, _| kind == "exec_run_finished").await;
    let (status, body) = call(s, Method::POST, &format!("/v1/plans/{id}/run"), None, None).await;
    assert_eq!(status, 202, "{body}");
    let seen = tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("the run did not pause")
        .unwrap();
    let (_, paused) = seen.last().unwrap();
    assert_eq!(paused["data"]["state"], "waiting", "{paused}");
    // The plan had never run when the stream opened: no `exec_run` after its snapshot.
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds[0], "snapshot", "{kinds:?}");
    assert!(!kinds.contains(&"exec_run"), "{kinds:?}");
    id
}

/// The first events a new reader of the plan's stream gets, up to its `exec_run`.
async fn opening_events(s: &Server, id: &str) -> Vec<(String, Value)> {
    let reader = watch(s, id, |kind, _| kind == "exec_run").await;
    tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("no exec_run event")
        .unwrap()
}

/// Waits (bounded) until the plan's run has ended; returns its state.
async fn run_end(store: &PlanStore, id: &str) -> plansmith_store::RunState {
    for _ in 0..400 {
        let run = store.exec_run(id).await.unwrap().expect("a run");
        if run.state.is_final() {
            return run.state;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the run of {id} did not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_through_feedback_continues_a_paused_run() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    // No background worker: only the feedback route can have continued the run.
    let (s, store) = start_with(calls.clone(), vec!["s2".into()], false).await;
    let id = run_until_paused(&s).await;
    assert_eq!(
        calls.lock().unwrap().len(),
        1,
        "only s1 ran before the gate"
    );
    // A reader that comes in now learns, right after the snapshot, that the run waits (the
    // review page offers no "Run" then: starting it again would be a conflict).
    let opening = opening_events(&s, &id).await;
    let kinds: Vec<&str> = opening.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["snapshot", "exec_run"]);
    let run = &opening[1].1;
    assert_eq!(run["plan_id"], id.as_str(), "{run}");
    assert_eq!(run["data"]["state"], "waiting", "{run}");
    assert_eq!(run["data"]["plan_id"], id.as_str(), "{run}");
    // The plan does not offer `run` while its run waits (a start would be refused, 409).
    let (_, got) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(got["actions"], json!([]), "{got}");
    let (status, body) = call(&s, Method::POST, &format!("/v1/plans/{id}/run"), None, None).await;
    assert_eq!(status, 409, "{body}");

    let (status, body) = call(
        &s,
        Method::POST,
        &format!("/v1/plans/{id}/feedback"),
        Some(json!({"action": "step", "step": "s2", "verdict": "approve"})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(run_end(&store, &id).await, RunState::Completed);
    let (_, got) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(got["actions"], json!(["run"]), "once it ended: {got}");
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[1].starts_with("send_email"), "{calls:?}");
    // Once it ended, a new reader gets the last run with its state and report.
    let opening = opening_events(&s, &id).await;
    let (kind, run) = &opening[1];
    assert_eq!(kind, "exec_run");
    assert_eq!(run["data"]["state"], "completed", "{run}");
    assert!(run["data"]["outcome"].is_object(), "{run}");
}

/// A step decision says whether the step was waiting for it; one that no run would read (no
/// run in progress, or a step the run is done with) is refused instead of recorded for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_decision_says_when_it_applies_and_is_refused_when_no_run_would_read_it() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (s, store) = start_with(calls.clone(), vec!["s2".into()], false).await;
    let decide = |id: String, step: &'static str, verdict: &'static str| {
        let s = &s;
        async move {
            call(
                s,
                Method::POST,
                &format!("/v1/plans/{id}/feedback"),
                Some(json!({"action": "step", "step": step, "verdict": verdict})),
                None,
            )
            .await
        }
    };

    let id = run_until_paused(&s).await;
    // s1 completed before the gate: nothing would read a decision about it.
    let (status, body) = decide(id.clone(), "s1", "retry").await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("the run is done with it (completed)"),
        "{body}"
    );
    // s3 comes after the gate: kept for when the run gets there; the run still waits.
    let (status, body) = decide(id.clone(), "s3", "approve").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["step_decision"]["step_id"], "s3", "{body}");
    assert_eq!(body["step_decision"]["verdict"], "approve", "{body}");
    assert_eq!(body["step_decision"]["applies"], "when_reached", "{body}");
    assert_eq!(body["plan"]["id"], id.as_str(), "{body}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let run = store.exec_run(&id).await.unwrap().unwrap();
    assert_eq!(run.state, RunState::Waiting);
    assert_eq!(calls.lock().unwrap().len(), 1);
    // s2 is the step the run waits for: applied now.
    let (status, body) = decide(id.clone(), "s2", "approve").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["step_decision"]["applies"], "now", "{body}");
    assert_eq!(run_end(&store, &id).await, RunState::Completed);
    // Over: refused, with what to do.
    let (status, body) = decide(id.clone(), "s2", "deny").await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("its last run is completed; decisions apply during a run"),
        "{body}"
    );

    // Never run (the same plan stored under a new id; the scripted model plans once): starting
    // a run clears earlier decisions, so this one would be dropped unused.
    let mut copy = store.get(&id).await.unwrap().plan;
    copy.id = format!("{id}-copy");
    let idle = copy.id.clone();
    store
        .create(copy, ReviewState::AwaitingReview, Review::default(), "test")
        .await
        .unwrap();
    let (status, body) = decide(idle.clone(), "s2", "approve").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "conflict", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("it never ran; decisions apply during a run"),
        "{body}"
    );
    assert!(store.step_decisions(&idle).await.unwrap().is_empty());
    // Other feedback answers carry no step decision.
    let (status, body) = call(
        &s,
        Method::POST,
        &format!("/v1/plans/{idle}/feedback"),
        Some(json!({"action": "accept"})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "accepted", "{body}");
    assert!(body.get("step_decision").is_none(), "{body}");
}

/// `POST /v1/plans/{id}/run/stop`: a paused run stops at once (its waiting step and the rest
/// are not run), the stream says how it ended, and a run that is over has nothing to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_a_paused_run_as_aborted() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    // No background worker: only the stop route can have resumed the paused run.
    let (s, store) = start_with(calls.clone(), vec!["s2".into()], false).await;
    let id = run_until_paused(&s).await;
    let reader = watch(&s, &id, |kind, _| kind == "exec_run_finished").await;
    let stop = |body: Option<Value>| {
        let (s, id) = (&s, id.clone());
        async move {
            call(
                s,
                Method::POST,
                &format!("/v1/plans/{id}/run/stop"),
                body,
                None,
            )
            .await
        }
    };
    let (status, body) = stop(Some(json!({"note": "wrong recipient"}))).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body, json!({"plan_id": id, "state": "waiting"}));
    let seen = tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("the stopped run did not finish")
        .unwrap();
    let (_, finished) = seen.last().unwrap();
    assert_eq!(finished["data"]["state"], "aborted", "{finished}");
    assert_eq!(finished["data"]["stop_reason"], "aborted", "{finished}");
    assert_eq!(
        finished["data"]["reason"], "stopped by api: wrong recipient",
        "{finished}"
    );
    assert_eq!(run_end(&store, &id).await, RunState::Aborted);
    assert_eq!(calls.lock().unwrap().len(), 1, "the email was not sent");
    let (_, plan) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(plan["plan"]["steps"][0]["status"], "completed", "{plan}");
    assert_eq!(plan["plan"]["steps"][1]["status"], "skipped", "{plan}");
    assert_eq!(plan["plan"]["steps"][2]["status"], "skipped", "{plan}");

    // Over: nothing to stop (409, with what its last run did); a bad body is a 400.
    let (status, body) = stop(None).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["message"],
        format!("plan `{id}` has no run in progress to stop: its last run is aborted"),
        "{body}"
    );
    let (status, body) = stop(Some(json!({"reason": "x"}))).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = call(&s, Method::POST, "/v1/plans/nope/run/stop", None, None).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_continues_a_run_decided_outside_the_server() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (s, store) = start_with(calls.clone(), vec!["s2".into()], true).await;
    let id = run_until_paused(&s).await;
    // Paused, nothing decided: the worker leaves it alone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run = store.exec_run(&id).await.unwrap().unwrap();
    assert_eq!(run.state, RunState::Waiting);
    assert_eq!(calls.lock().unwrap().len(), 1);

    // What `plansmith plans decide ID --step s2 deny` does: a decision in the store only.
    store
        .decide_step(
            &id,
            "s2",
            plansmith_store::StepVerdict::Deny,
            "not today",
            None,
            "cli",
        )
        .await
        .unwrap();
    // A denied step is skipped; with nothing else left the run ends.
    assert_eq!(run_end(&store, &id).await, RunState::Completed);
    let (_, plan) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(plan["plan"]["steps"][1]["status"], "skipped", "{plan}");
    assert_eq!(
        calls.lock().unwrap().len(),
        1,
        "the denied email was not sent"
    );
}

/// The approvals a run waits for, listed and decided at once over HTTP, remembered for every
/// run of the plan: the next run does not stop at the gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_approvals_are_decided_at_once_and_remembered() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (s, store) = start_with(calls.clone(), vec!["s2".into()], false).await;
    let id = run_until_paused(&s).await;
    let (status, pending) = call(
        &s,
        Method::GET,
        &format!("/v1/plans/{id}/approvals"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{pending}");
    assert_eq!(pending.as_array().unwrap().len(), 1, "{pending}");
    assert_eq!(pending[0]["step_id"], "s2");
    assert_eq!(pending[0]["tool"], "send_email");
    assert_eq!(
        pending[0]["arguments"]["to"], "bob@example.com",
        "{pending}"
    );

    // `remember` goes with approvals only.
    let (status, body) = call(
        &s,
        Method::POST,
        &format!("/v1/plans/{id}/approvals"),
        Some(json!({"verdict": "deny", "remember": "plan"})),
        None,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = call(
        &s,
        Method::POST,
        &format!("/v1/plans/{id}/approvals"),
        Some(json!({"verdict": "approve", "remember": "plan", "note": "fine"})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decided"], json!(["s2"]));
    assert_eq!(run_end(&store, &id).await, RunState::Completed);
    assert_eq!(calls.lock().unwrap().len(), 2);

    // Run again: the plan's send_email is approved for every run, nothing waits.
    let (status, _) = call(
        &s,
        Method::PATCH,
        &format!("/v1/plans/{id}/steps/s2"),
        Some(json!({"status": "not_started"})),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = call(&s, Method::POST, &format!("/v1/plans/{id}/run"), None, None).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(run_end(&store, &id).await, RunState::Completed);
    let sent = calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.starts_with("send_email"))
        .count();
    assert_eq!(sent, 2, "{:?}", calls.lock().unwrap());
}
