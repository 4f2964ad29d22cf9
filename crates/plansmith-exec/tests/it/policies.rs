use std::time::{Duration, Instant};

use plansmith_exec::Executor;
use plansmith_store::{ExecStatus, RunState, StepVerdict};
use serde_json::json;

use crate::support::*;

fn tool(id: &str, name: &str, deps: &[&str]) -> serde_json::Value {
    json!({"id": id, "title": format!("{name} {id}"), "depends_on": deps,
           "action": {"type": "tool", "name": name, "arguments": {}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_with_backoff_until_success() {
    let env = env().await;
    env.plan("retry", json!([tool("s1", "flaky", &[])]), json!({}))
        .await;
    let counter = env.path("count");
    let tools = invokers(vec![(
        "flaky",
        script("flaky.sh", &[counter.to_str().unwrap(), "2"]),
    )]);
    let seen = Seen::default();
    let report = seen
        .attach(Executor::new(env.store.clone(), tools, config("n")))
        .run("retry")
        .await
        .unwrap();
    assert_eq!(report.state, RunState::Completed, "{report:?}");
    assert_eq!(report.steps[0].attempts, 3);
    assert_eq!(report.steps[0].result, Some(json!({"calls": 3})));
    assert_eq!(
        seen.kinds()
            .iter()
            .filter(|k| *k == "step_retrying")
            .count(),
        2
    );
    let keys: Vec<String> = env
        .store
        .exec_attempts("retry")
        .await
        .unwrap()
        .into_iter()
        .map(|a| format!("{} {}", a.idempotency_key, a.outcome))
        .collect();
    assert_eq!(
        keys,
        [
            "retry:1:s1:1 failed",
            "retry:1:s1:2 failed",
            "retry:1:s1:3 succeeded"
        ]
    );
}

/// OpenManus re-runs a failed step forever; here it is retried a bounded number of times,
/// then failed, and the run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openmanus_failing_step_is_bounded_and_the_run_ends() {
    let env = env().await;
    env.plan(
        "manus",
        json!([tool("s1", "broken", &[]), tool("s2", "broken", &["s1"])]),
        json!({"execution": {"retries": 3}}),
    )
    .await;
    let calls = env.path("calls");
    let tools = invokers(vec![(
        "broken",
        script("fail.sh", &["tool exploded", calls.to_str().unwrap()]),
    )]);
    let began = Instant::now();
    let report = Executor::new(env.store.clone(), tools, config("n"))
        .run("manus")
        .await
        .unwrap();
    assert!(began.elapsed() < Duration::from_secs(10));
    assert_eq!(report.state, RunState::Failed);
    assert_eq!(report.reason.as_deref(), Some("failed step(s): s1"));
    assert_eq!(report.steps[0].status, ExecStatus::Failed);
    assert_eq!(report.steps[0].attempts, 4);
    let error = report.steps[0].error.as_deref().unwrap();
    assert!(
        error.contains("tool exploded") && error.contains("attempt 4 of 4"),
        "{error}"
    );
    assert_eq!(lines(&calls).len(), 4, "exactly retries + 1 calls");
    assert_eq!(report.steps[1].status, ExecStatus::Skipped);
    let stored = env.store.get("manus").await.unwrap();
    assert_eq!(
        stored.plan.steps[0].status,
        plansmith_core::StepStatus::Failed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_marks_descendants_and_the_rest_runs() {
    let env = env().await;
    env.plan(
        "skip",
        json!([
            tool("s1", "broken", &[]),
            tool("s2", "ok", &["s1"]),
            tool("s3", "ok", &["s2"]),
            tool("s4", "ok", &[]),
            tool("s5", "ok", &["s4"])
        ]),
        json!({"execution": {"steps": {"s1": {"on_failure": "skip", "retries": 0}}}}),
    )
    .await;
    let tools = invokers(vec![
        ("broken", script("fail.sh", &[])),
        ("ok", script("items.sh", &[])),
    ]);
    let report = Executor::new(env.store.clone(), tools, config("n"))
        .run("skip")
        .await
        .unwrap();
    assert_eq!(report.state, RunState::Completed, "skipping is not failing");
    let statuses: Vec<(&str, ExecStatus, &str)> = report
        .steps
        .iter()
        .map(|s| (s.id.as_str(), s.status, s.note.as_str()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("s1", ExecStatus::Skipped, "skipped by policy"),
            ("s2", ExecStatus::Skipped, "dependency s1 skipped"),
            ("s3", ExecStatus::Skipped, "dependency s2 skipped"),
            ("s4", ExecStatus::Completed, ""),
            ("s5", ExecStatus::Completed, ""),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_stops_running_steps_and_starts_nothing_else() {
    let env = env().await;
    env.plan(
        "abort",
        json!([
            tool("s1", "broken", &[]),
            tool("s2", "slow", &[]),
            tool("s3", "ok", &["s2"])
        ]),
        json!({"execution": {"on_failure": "abort", "retries": 0}}),
    )
    .await;
    let tools = invokers(vec![
        ("broken", script("fail.sh", &[])),
        ("slow", script("sleep.sh", &["5"])),
        ("ok", script("items.sh", &[])),
    ]);
    let began = Instant::now();
    let report = Executor::new(env.store.clone(), tools, config("n"))
        .run("abort")
        .await
        .unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(4),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(report.state, RunState::Aborted);
    assert!(
        report.reason.as_deref().unwrap().contains("abort policy"),
        "{report:?}"
    );
    assert_eq!(report.steps[1].status, ExecStatus::Skipped);
    assert!(
        report.steps[1]
            .error
            .as_deref()
            .unwrap_or("")
            .starts_with("stopped"),
        "{report:?}"
    );
    assert_eq!(report.steps[2].status, ExecStatus::Skipped);
    assert_eq!(report.steps[2].attempts, 0);
}

/// A person stops a run while a step runs: the running step is stopped, nothing else starts,
/// and the run ends `aborted` with who stopped it and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_request_stops_a_running_run() {
    let env = env().await;
    env.plan(
        "stop",
        json!([tool("s1", "slow", &[]), tool("s2", "ok", &["s1"])]),
        json!({}),
    )
    .await;
    let refused = env.store.request_stop("stop", "", "me").await;
    assert!(
        matches!(&refused, Err(plansmith_store::StoreError::NotRunning { why, .. }) if why == "it never ran"),
        "{refused:?}"
    );
    let tools = invokers(vec![
        ("slow", script("sleep.sh", &["5"])),
        ("ok", script("items.sh", &[])),
    ]);
    let seen = Seen::default();
    let executor = seen.attach(Executor::new(env.store.clone(), tools, config("n")));
    let run = tokio::spawn({
        let executor = executor.clone();
        async move { executor.run("stop").await }
    });
    // Once s1 runs, ask the run to stop.
    for _ in 0..200 {
        let steps = env.store.exec_steps("stop").await.unwrap();
        if steps
            .iter()
            .any(|s| s.step_id == "s1" && s.status == ExecStatus::Running)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let began = Instant::now();
    env.store
        .request_stop("stop", "wrong city", "ann")
        .await
        .unwrap();
    let report = run.await.unwrap().unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "the stop took {:?}",
        began.elapsed()
    );
    assert_eq!(report.state, RunState::Aborted);
    assert_eq!(
        report.reason.as_deref(),
        Some("stopped by ann: wrong city"),
        "{report:?}"
    );
    assert_eq!(report.steps[0].status, ExecStatus::Skipped);
    assert!(
        report.steps[0]
            .error
            .as_deref()
            .unwrap_or("")
            .starts_with("stopped: stopped by ann"),
        "{report:?}"
    );
    assert_eq!(report.steps[1].status, ExecStatus::Skipped);
    assert_eq!(report.steps[1].attempts, 0);
    // Watchers (the review page's `step_status`) and the plan's document learn it too: both
    // used to show s1 running for good.
    let ended: Vec<String> = seen
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|event| match event {
            plansmith_exec::ExecEvent::StepEnded {
                step_id, status, ..
            } => Some(format!("{step_id} {}", status.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(ended, ["s1 skipped", "s2 skipped"]);
    let stored = env.store.get("stop").await.unwrap();
    assert_eq!(
        stored.plan.steps[0].status,
        plansmith_core::StepStatus::Skipped
    );
    assert!(
        stored.plan.steps[0]
            .error
            .as_deref()
            .unwrap_or("")
            .starts_with("stopped: stopped by ann"),
        "{:?}",
        stored.plan.steps[0]
    );
    // Over: nothing left to stop; a new run starts without the old request.
    let over = env.store.request_stop("stop", "", "me").await;
    assert!(
        matches!(&over, Err(plansmith_store::StoreError::NotRunning { why, .. }) if why == "its last run is aborted"),
        "{over:?}"
    );
    executor.start("stop").await.unwrap();
    assert_eq!(
        env.store.run_signal("stop").await.unwrap(),
        plansmith_store::RunSignal::Continue
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_plan_ends_its_run() {
    let env = env().await;
    env.plan(
        "gone",
        json!([tool("s1", "slow", &[]), tool("s2", "note", &["s1"])]),
        json!({}),
    )
    .await;
    let log = env.path("calls");
    let log_arg = log.to_str().unwrap();
    let tools = invokers(vec![
        ("slow", script("append.sh", &[log_arg, "5"])),
        ("note", script("append.sh", &[log_arg])),
    ]);
    let executor = Executor::new(env.store.clone(), tools, config("n"));
    let run = tokio::spawn({
        let executor = executor.clone();
        async move { executor.run("gone").await }
    });
    let mut started = false;
    for _ in 0..200 {
        if std::fs::read_to_string(&log).is_ok_and(|text| text.contains("start s1")) {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(started, "s1 never started");
    let began = Instant::now();
    env.store.delete("gone").await.unwrap();
    // Before, the run waited out the 5 s step, then two minutes for a run row that was gone.
    let ended = run.await.unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "the run took {:?} to notice",
        began.elapsed()
    );
    assert!(
        matches!(&ended, Err(plansmith_exec::ExecError::Deleted { id }) if id == "gone"),
        "{ended:?}"
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        !calls.contains("s2"),
        "s2 started after the deletion: {calls}"
    );
    assert!(env.store.exec_run("gone").await.unwrap().is_none());
    assert!(
        env.store.get("gone").await.is_err(),
        "nothing wrote the plan back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_waits_for_a_person_then_retries() {
    let env = env().await;
    env.plan(
        "ask",
        json!([tool("s1", "flaky", &[]), tool("s2", "ok", &["s1"])]),
        json!({"execution": {"on_failure": "ask", "retries": 0}}),
    )
    .await;
    let counter = env.path("count");
    let tools = || {
        invokers(vec![
            (
                "flaky",
                script("flaky.sh", &[counter.to_str().unwrap(), "1"]),
            ),
            ("ok", script("items.sh", &[])),
        ])
    };
    // No wait: the run pauses.
    let report = Executor::new(env.store.clone(), tools(), config("n"))
        .run("ask")
        .await
        .unwrap();
    assert_eq!(report.state, RunState::Waiting);
    assert_eq!(report.steps[0].status, ExecStatus::Blocked);
    assert!(report.reason.as_deref().unwrap().contains("s1"));
    let stored = env.store.get("ask").await.unwrap();
    assert_eq!(
        stored.plan.steps[0].status,
        plansmith_core::StepStatus::Blocked
    );

    // With a wait, a decision arriving meanwhile is applied.
    let mut waiting = config("n");
    waiting.wait_for_people = Duration::from_secs(10);
    let store = env.store.clone();
    let decide = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        store
            .decide_step("ask", "s1", StepVerdict::Retry, "try again", None, "alice")
            .await
            .unwrap();
    });
    let report = Executor::new(env.store.clone(), tools(), waiting)
        .resume("ask")
        .await
        .unwrap();
    decide.await.unwrap();
    assert_eq!(report.state, RunState::Completed, "{report:?}");
    assert_eq!(report.steps[0].attempts, 2);
}

/// A failure under `"siblings": "cancel"` stops the step running beside it (kept by
/// `isolate`, the default); the failed step's descendants are skipped with it as the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_cancels_or_isolates_its_running_siblings() {
    let env = env().await;
    let steps = serde_json::json!([
        {"id": "s1", "title": "long", "action": {"type": "tool", "name": "slow", "arguments": {}}},
        {"id": "s2", "title": "breaks", "action": {"type": "tool", "name": "fail", "arguments": {}}},
        {"id": "s3", "title": "after", "depends_on": ["s2"],
         "action": {"type": "tool", "name": "slow", "arguments": {}}}
    ]);
    let tools = || {
        invokers(vec![
            ("slow", script("sleep.sh", &["1.5"])),
            ("fail", script("fail.sh", &[])),
        ])
    };
    for (id, siblings) in [("cancel", "cancel"), ("isolate", "isolate")] {
        env.plan(
            id,
            steps.clone(),
            serde_json::json!({"execution": {"retries": 0, "siblings": siblings}}),
        )
        .await;
    }
    let began = std::time::Instant::now();
    let report = Executor::new(env.store.clone(), tools(), config("n"))
        .run("cancel")
        .await
        .unwrap();
    assert!(
        began.elapsed() < std::time::Duration::from_millis(1400),
        "{:?}",
        began.elapsed()
    );
    let by_id = |report: &plansmith_exec::RunReport, id: &str| {
        report.steps.iter().find(|s| s.id == id).cloned().unwrap()
    };
    assert_eq!(report.state, RunState::Failed, "{report:?}");
    let s1 = by_id(&report, "s1");
    assert_eq!(s1.status, ExecStatus::Skipped);
    assert_eq!(
        s1.error.as_deref(),
        Some("cancelled: step s2 failed"),
        "{report:?}"
    );
    let s3 = by_id(&report, "s3");
    assert_eq!(
        (s3.status, s3.note.as_str()),
        (ExecStatus::Skipped, "dependency s2 failed")
    );

    let report = Executor::new(env.store.clone(), tools(), config("n"))
        .run("isolate")
        .await
        .unwrap();
    assert_eq!(report.state, RunState::Failed, "{report:?}");
    assert_eq!(by_id(&report, "s1").status, ExecStatus::Completed);
    assert_eq!(
        by_id(&report, "s1").result,
        Some(serde_json::json!({"slept": 1.5}))
    );
}

/// `timeout_secs` stops an attempt that runs past it; the failure is retryable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_past_its_timeout_fails_and_is_retried() {
    let env = env().await;
    env.plan(
        "slow",
        serde_json::json!([
            {"id": "s1", "title": "slow", "action": {"type": "tool", "name": "slow", "arguments": {}}}
        ]),
        serde_json::json!({"execution": {"retries": 1, "steps": {"s1": {"timeout_secs": 0.3}}}}),
    )
    .await;
    let began = std::time::Instant::now();
    let report = Executor::new(
        env.store.clone(),
        invokers(vec![("slow", script("sleep.sh", &["5"]))]),
        config("n"),
    )
    .run("slow")
    .await
    .unwrap();
    assert!(
        began.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        began.elapsed()
    );
    let s1 = &report.steps[0];
    assert_eq!(
        (s1.status, s1.attempts),
        (ExecStatus::Failed, 2),
        "{report:?}"
    );
    assert!(
        s1.error
            .as_deref()
            .unwrap()
            .contains("timed out after 0.3 s"),
        "{report:?}"
    );
}
