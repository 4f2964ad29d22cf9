use std::time::Instant;

use plansmith_core::{Catalog, StepStatus};
use plansmith_exec::Executor;
use plansmith_store::{ExecStatus, RunState, Trigger};
use serde_json::json;

use crate::support::*;

fn sleeper(id: &str, deps: &[&str]) -> serde_json::Value {
    json!({"id": id, "title": format!("sleep {id}"), "depends_on": deps,
           "action": {"type": "tool", "name": "sleep", "arguments": {}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_steps_run_in_parallel() {
    let env = env().await;
    let one = env
        .plan("one", json!([sleeper("s1", &[])]), json!({}))
        .await;
    let steps: Vec<_> = (1..=8).map(|i| sleeper(&format!("s{i}"), &[])).collect();
    env.plan("eight", json!(steps), json!({})).await;
    let tools = || invokers(vec![("sleep", script("sleep.sh", &["0.3"]))]);

    let began = Instant::now();
    let report = Executor::new(env.store.clone(), tools(), config("n"))
        .run(&one.id)
        .await
        .unwrap();
    let single = began.elapsed();
    assert_eq!(report.state, RunState::Completed);

    let began = Instant::now();
    let report = Executor::new(env.store.clone(), tools(), config("n"))
        .run("eight")
        .await
        .unwrap();
    let eight = began.elapsed();
    assert_eq!(report.state, RunState::Completed, "{report:?}");
    assert!(
        report
            .steps
            .iter()
            .all(|s| s.status == ExecStatus::Completed)
    );
    // Sequential would be 8 × 300 ms = 2.4 s.
    assert!(
        eight.as_secs_f64() < single.as_secs_f64() * 1.6,
        "8 parallel steps took {eight:?}, one took {single:?}"
    );

    // The concurrency limit holds: 8 steps 2 at a time take 4 rounds.
    let steps: Vec<_> = (1..=8).map(|i| sleeper(&format!("s{i}"), &[])).collect();
    env.plan("limited", json!(steps), json!({})).await;
    let mut limited = config("n");
    limited.concurrency = 2;
    let began = Instant::now();
    Executor::new(env.store.clone(), tools(), limited)
        .run("limited")
        .await
        .unwrap();
    assert!(
        began.elapsed().as_secs_f64() >= 1.2,
        "{:?}",
        began.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refs_are_filled_and_statuses_reach_the_document() {
    let env = env().await;
    env.plan(
        "refs",
        json!([
            {"id": "s1", "title": "list", "action": {"type": "tool", "name": "items", "arguments": {}}},
            {"id": "s2", "title": "use", "depends_on": ["s1"],
             "action": {"type": "tool", "name": "echo", "arguments": {"id": {"$ref": "s1.output.items[1].id"}, "all": {"$ref": "s1.output.items"}}}},
            {"id": "s3", "title": "reply", "depends_on": ["s2"], "action": {"type": "reply", "text": "done"}}
        ]),
        json!({}),
    )
    .await;
    let tools = invokers(vec![
        ("items", script("items.sh", &[])),
        ("echo", script("echo.sh", &[])),
    ]);
    let seen = Seen::default();
    let executor = seen.attach(Executor::new(env.store.clone(), tools, config("n")));
    let report = executor.run("refs").await.unwrap();
    assert_eq!(report.state, RunState::Completed, "{report:?}");
    let echoed = report.steps[1].result.clone().unwrap();
    assert_eq!(echoed["arguments"]["id"], json!("a2"));
    assert_eq!(echoed["arguments"]["all"][0]["id"], json!("a1"));
    assert_eq!(echoed["idempotency_key"], json!("refs:1:s2:1"));
    assert_eq!(echoed["inputs"]["s1"]["items"][0]["id"], json!("a1"));
    assert_eq!(report.steps[2].result, Some(json!({"text": "done"})));
    assert!(
        report.summary.contains("[s3] reply (completed): done"),
        "{}",
        report.summary
    );

    // The document carries every status and result, written as step_update versions.
    let stored = env.store.get("refs").await.unwrap();
    assert!(
        stored
            .plan
            .steps
            .iter()
            .all(|s| s.status == StepStatus::Completed)
    );
    assert_eq!(stored.plan.steps[1].result, Some(echoed));
    assert_eq!(
        stored.plan.metadata["last_run"]["state"],
        json!("completed")
    );
    let history = env.store.history("refs").await.unwrap();
    assert!(history.len() >= 3, "{history:?}");
    assert!(
        history[1..]
            .iter()
            .all(|v| v.trigger == Trigger::StepUpdate)
    );
    let kinds = seen.kinds();
    assert_eq!(kinds.first().map(String::as_str), Some("run_started"));
    assert_eq!(kinds.last().map(String::as_str), Some("run_finished"));
    assert_eq!(kinds.iter().filter(|k| *k == "step_completed").count(), 3);
    // A finished plan does not resume; a completed step is not re-run by a new run.
    assert!(executor.resume("refs").await.is_err());
    let again = executor.run("refs").await.unwrap();
    assert_eq!(again.state, RunState::Completed);
    let attempts = env.store.exec_attempts("refs").await.unwrap();
    assert_eq!(attempts.len(), 3, "completed steps ran again: {attempts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_against_the_output_schema_fails_the_step() {
    let env = env().await;
    env.plan(
        "schema",
        json!([
            {"id": "s1", "title": "list", "action": {"type": "tool", "name": "items", "arguments": {}}},
            {"id": "s2", "title": "after", "depends_on": ["s1"], "action": {"type": "reply", "text": "x"}}
        ]),
        json!({}),
    )
    .await;
    let catalog = Catalog::from_json(&json!([{
        "name": "items", "description": "list", "input_schema": {"type": "object"},
        "output_schema": {"type": "object", "required": ["count"]}
    }]))
    .unwrap();
    let tools = invokers(vec![("items", script("items.sh", &[]))]);
    let report = Executor::new(env.store.clone(), tools, config("n"))
        .with_catalog(catalog)
        .run("schema")
        .await
        .unwrap();
    assert_eq!(report.state, RunState::Failed);
    let s1 = &report.steps[0];
    assert_eq!(s1.status, ExecStatus::Failed);
    assert_eq!(s1.attempts, 1, "a schema mismatch is not retried");
    assert!(
        s1.error.as_deref().unwrap().contains("output_schema"),
        "{s1:?}"
    );
    assert_eq!(report.steps[1].status, ExecStatus::Skipped);
    assert_eq!(report.steps[1].note, "dependency s1 failed");
}
