//! Budgets and stop reasons: each cap ends the run with its reason and keeps what ran; nodes
//! sharing a run share its budget; steps that can never start end the run `deadlocked`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use plansmith_core::{Catalog, Planner, ScriptedModel};
use plansmith_exec::{Executor, Invokers, OnFailure, RunReport, StopReason, TaskInvoker};
use plansmith_store::{Budget, ExecStatus, OnCap, RunState};
use serde_json::{Value, json};

use crate::support::*;

/// `n` echo steps, each after the one before.
fn chain(n: usize) -> Value {
    Value::Array(
        (1..=n)
            .map(|i| {
                let depends: Vec<String> =
                    (i > 1).then(|| format!("s{}", i - 1)).into_iter().collect();
                json!({"id": format!("s{i}"), "title": format!("echo {i}"), "depends_on": depends,
                       "action": {"type": "tool", "name": "echo", "arguments": {"i": i}}})
            })
            .collect(),
    )
}

fn statuses(report: &RunReport) -> Vec<ExecStatus> {
    report.steps.iter().map(|s| s.status).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_cap_stops_new_steps_and_keeps_the_results() {
    let env = env().await;
    env.plan("calls", chain(4), json!({})).await;
    let executor = Executor::new(
        env.store.clone(),
        invokers(vec![("echo", script("echo.sh", &[]))]),
        config("n"),
    );
    let budget = Budget {
        max_tool_calls: Some(2),
        ..Budget::default()
    };
    let report = executor.run_with("calls", &budget).await.unwrap();
    assert_eq!(
        report.stop_reason,
        Some(StopReason::ToolCallsCapped),
        "{report:?}"
    );
    assert_eq!(report.state, RunState::Aborted);
    assert_eq!(
        statuses(&report),
        [
            ExecStatus::Completed,
            ExecStatus::Completed,
            ExecStatus::Skipped,
            ExecStatus::Skipped
        ]
    );
    assert_eq!(
        report.steps[1].result.as_ref().unwrap()["arguments"]["i"],
        2
    );
    assert!(report.steps[2].note.contains("tool calls"), "{report:?}");
    let spent = report.budget.unwrap();
    assert_eq!(
        (spent.tool_calls, spent.budget.max_tool_calls),
        (2, Some(2))
    );
    // The attempt log agrees: two calls were made.
    assert_eq!(env.store.exec_attempts("calls").await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_run_share_its_call_cap() {
    let env = env().await;
    // Eight independent steps, two nodes taking them at once.
    let steps: Vec<Value> = (1..=8)
        .map(|i| {
            json!({"id": format!("s{i}"), "title": "sleep",
                        "action": {"type": "tool", "name": "sleep", "arguments": {}}})
        })
        .collect();
    env.plan("shared", Value::Array(steps), json!({})).await;
    let node = |name: &str| {
        Executor::new(
            env.store.clone(),
            invokers(vec![("sleep", script("sleep.sh", &["0.2"]))]),
            config(name),
        )
    };
    let (a, b) = (node("a"), node("b"));
    a.start_with(
        "shared",
        &Budget {
            max_tool_calls: Some(5),
            ..Budget::default()
        },
    )
    .await
    .unwrap();
    let (ra, rb) = tokio::join!(a.join("shared"), b.join("shared"));
    let report = ra.unwrap().or(rb.unwrap()).unwrap();
    assert_eq!(
        report.stop_reason,
        Some(StopReason::ToolCallsCapped),
        "{report:?}"
    );
    // Never past the cap; what is counted is what ran (calls taken for a step the other
    // node claimed first were given back). A node that reached the cap ends the run, so the
    // last call the other node could still have taken may not be made.
    let attempts = env.store.exec_attempts("shared").await.unwrap();
    assert!((4..=5).contains(&attempts.len()), "{attempts:?}");
    let counted = env
        .store
        .exec_budget("shared")
        .await
        .unwrap()
        .unwrap()
        .tool_calls;
    assert_eq!(counted, attempts.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_cancels_or_lets_running_steps_finish() {
    let env = env().await;
    let steps = json!([
        {"id": "s1", "title": "slow", "action": {"type": "tool", "name": "slow", "arguments": {}}},
        {"id": "s2", "title": "after", "depends_on": ["s1"],
         "action": {"type": "tool", "name": "slow", "arguments": {}}}
    ]);
    let tools = || invokers(vec![("slow", script("sleep.sh", &["1.5"]))]);
    let cap = |on_cap| Budget {
        max_seconds: Some(1),
        on_cap,
        ..Budget::default()
    };

    env.plan("cancel", steps.clone(), json!({})).await;
    let began = Instant::now();
    let report = Executor::new(env.store.clone(), tools(), config("n"))
        .run_with("cancel", &cap(OnCap::Cancel))
        .await
        .unwrap();
    assert_eq!(report.stop_reason, Some(StopReason::Deadline), "{report:?}");
    assert!(
        began.elapsed() < Duration::from_millis(1450),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(
        statuses(&report),
        [ExecStatus::Skipped, ExecStatus::Skipped]
    );
    assert!(
        report.steps[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("stopped"),
        "{report:?}"
    );

    env.plan("finish", steps, json!({})).await;
    let report = Executor::new(env.store.clone(), tools(), config("n"))
        .run_with("finish", &cap(OnCap::Finish))
        .await
        .unwrap();
    assert_eq!(report.stop_reason, Some(StopReason::Deadline), "{report:?}");
    assert_eq!(
        statuses(&report),
        [ExecStatus::Completed, ExecStatus::Skipped]
    );
    assert_eq!(report.steps[0].result, Some(json!({"slept": 1.5})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_tokens_of_task_steps_reach_their_cap() {
    let env = env().await;
    env.plan(
        "tokens",
        json!([
            {"id": "s1", "title": "research", "action": {"type": "task", "kind": "research"}},
            {"id": "s2", "title": "write up", "depends_on": ["s1"],
             "action": {"type": "task", "kind": "processing"}}
        ]),
        json!({}),
    )
    .await;
    let usage = |p: u32, c: u32| json!({"text": "found it", "usage": {"prompt_tokens": p, "completion_tokens": c}});
    let model = ScriptedModel::from_script(
        serde_json::from_value(json!({"turns": [usage(300, 40), usage(300, 40)]})).unwrap(),
    );
    let invokers = Invokers {
        tasks: Some(Arc::new(TaskInvoker::new(Arc::new(model), 64))),
        ..Invokers::default()
    };
    let report = Executor::new(env.store.clone(), invokers, config("n"))
        .run_with(
            "tokens",
            &Budget {
                max_tokens: Some(200),
                ..Budget::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        report.stop_reason,
        Some(StopReason::TokenCapped),
        "{report:?}"
    );
    assert_eq!(
        statuses(&report),
        [ExecStatus::Completed, ExecStatus::Skipped]
    );
    assert_eq!(report.budget.unwrap().tokens, 340);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replan_past_the_cap_ends_replans_capped() {
    let env = env().await;
    env.plan(
        "re",
        json!([{"id": "s1", "title": "fetch", "action": {"type": "tool", "name": "broken", "arguments": {}}}]),
        json!({"execution": {"retries": 0}}),
    )
    .await;
    let catalog = Catalog::from_json(&json!([
        {"name": "broken", "description": "fetch", "input_schema": {"type": "object"}}
    ]))
    .unwrap();
    let mut config = config("n");
    config.policy.on_failure = OnFailure::Replan;
    let executor = Executor::new(
        env.store.clone(),
        invokers(vec![("broken", script("fail.sh", &["503"]))]),
        config,
    )
    .with_catalog(catalog.clone())
    .with_planner(Arc::new(Planner::new(
        catalog,
        Arc::new(ScriptedModel::new(Vec::<String>::new())),
    )));
    let budget = Budget {
        max_replans: Some(0),
        ..Budget::default()
    };
    let report = executor.run_with("re", &budget).await.unwrap();
    assert_eq!(
        report.stop_reason,
        Some(StopReason::ReplansCapped),
        "{report:?}"
    );
    assert_eq!(report.state, RunState::Failed);
    assert!(
        report
            .reason
            .as_deref()
            .unwrap()
            .contains("cap of 0 replans"),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_that_can_never_start_end_the_run_deadlocked() {
    let env = env().await;
    // s2 waits on a step that is not part of the run (the store keeps what it is given; a
    // validated plan cannot say this, an edited or hand-written store row can).
    env.plan(
        "stuck",
        json!([
            {"id": "s1", "title": "one", "action": {"type": "tool", "name": "echo", "arguments": {}}},
            {"id": "s2", "title": "two", "depends_on": ["s1", "ghost"],
             "action": {"type": "tool", "name": "echo", "arguments": {}}}
        ]),
        json!({}),
    )
    .await;
    let executor = Executor::new(
        env.store.clone(),
        invokers(vec![("echo", script("echo.sh", &[]))]),
        config("n"),
    );
    let report = tokio::time::timeout(Duration::from_secs(20), executor.run("stuck"))
        .await
        .expect("a deadlocked run must end, not hang")
        .unwrap();
    assert_eq!(
        report.stop_reason,
        Some(StopReason::Deadlocked),
        "{report:?}"
    );
    assert!(
        report.reason.as_deref().unwrap().contains("s2"),
        "{report:?}"
    );
    assert_eq!(
        statuses(&report),
        [ExecStatus::Completed, ExecStatus::Skipped]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_failed_and_aborted_runs_say_so() {
    let env = env().await;
    let one = |name: &str| json!([{"id": "s1", "title": "t", "action": {"type": "tool", "name": name, "arguments": {}}}]);
    env.plan("ok", one("echo"), json!({})).await;
    env.plan("bad", one("fail"), json!({"execution": {"retries": 0}}))
        .await;
    env.plan(
        "stop",
        one("fail"),
        json!({"execution": {"retries": 0, "on_failure": "abort"}}),
    )
    .await;
    let executor = Executor::new(
        env.store.clone(),
        invokers(vec![
            ("echo", script("echo.sh", &[])),
            ("fail", script("fail.sh", &[])),
        ]),
        config("n"),
    );
    for (id, reason) in [
        ("ok", StopReason::Completed),
        ("bad", StopReason::Failed),
        ("stop", StopReason::Aborted),
    ] {
        let report = executor.run(id).await.unwrap();
        assert_eq!(report.stop_reason, Some(reason), "{report:?}");
        // The stored outcome and the document carry it too.
        let run = env.store.exec_run(id).await.unwrap().unwrap();
        assert_eq!(run.stop_reason, Some(reason));
        assert_eq!(run.outcome.unwrap()["stop_reason"], json!(reason.as_str()));
        let stored = env.store.get(id).await.unwrap();
        assert_eq!(
            stored.plan.metadata["last_run"]["stop_reason"],
            json!(reason.as_str())
        );
    }
}
