use std::time::Duration;

use plansmith_exec::Executor;
use plansmith_store::{ExecStatus, RunState};
use serde_json::json;

use crate::support::*;

/// Two executors (nodes) share one run; then one dies mid-step and the other takes the
/// step over after the lease, with the same idempotency key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_a_run_and_a_dead_nodes_step_passes_on() {
    let env = env().await;
    let steps: Vec<_> = (1..=12)
        .map(|i| {
            json!({"id": format!("s{i}"), "title": format!("append {i}"),
                        "action": {"type": "tool", "name": "append", "arguments": {}}})
        })
        .collect();
    env.plan("shared", json!(steps), json!({})).await;
    let log = env.path("effects");
    let tools = || {
        invokers(vec![(
            "append",
            script("append.sh", &[log.to_str().unwrap(), "0.1"]),
        )])
    };
    let mut a_config = config("node-a");
    a_config.concurrency = 2;
    let mut b_config = config("node-b");
    b_config.concurrency = 2;
    let a = Executor::new(env.store.clone(), tools(), a_config);
    let b = Executor::new(env.store.clone(), tools(), b_config);
    a.start("shared").await.unwrap();
    let (ra, rb) = tokio::join!(a.join("shared"), b.join("shared"));
    let (ra, rb) = (ra.unwrap().unwrap(), rb.unwrap().unwrap());
    assert_eq!(ra.state, RunState::Completed);
    assert_eq!(rb.state, RunState::Completed);
    let done: Vec<String> = lines(&log)
        .into_iter()
        .filter(|l| l.starts_with("done"))
        .collect();
    assert_eq!(done.len(), 12, "{done:?}");
    let attempts = env.store.exec_attempts("shared").await.unwrap();
    assert_eq!(attempts.len(), 12);
    let nodes: std::collections::HashSet<&str> = attempts.iter().map(|a| a.node.as_str()).collect();
    assert_eq!(nodes.len(), 2, "both nodes ran steps: {attempts:?}");

    // A node that dies mid-step: its task is dropped while the tool sleeps.
    env.plan(
        "dies",
        json!([{"id": "s1", "title": "slow append",
        "action": {"type": "tool", "name": "append", "arguments": {}}}]),
        json!({}),
    )
    .await;
    let log2 = env.path("effects2");
    let slow = || {
        invokers(vec![(
            "append",
            script("append.sh", &[log2.to_str().unwrap(), "0.5"]),
        )])
    };
    let mut short = config("node-c");
    short.lease = Duration::from_millis(600);
    let c = Executor::new(env.store.clone(), slow(), short.clone());
    c.start("dies").await.unwrap();
    let dying = tokio::spawn(async move { c.join("dies").await });
    tokio::time::sleep(Duration::from_millis(250)).await;
    dying.abort();
    let _ = dying.await;
    short.node = "node-d".into();
    let d = Executor::new(env.store.clone(), slow(), short);
    let report = d.join("dies").await.unwrap().unwrap();
    assert_eq!(report.state, RunState::Completed);
    assert_eq!(report.steps[0].status, ExecStatus::Completed);
    let attempts = env.store.exec_attempts("dies").await.unwrap();
    assert_eq!(
        attempts.len(),
        1,
        "one attempt, re-run with its key: {attempts:?}"
    );
    assert_eq!(attempts[0].runs, 2);
    assert_eq!(attempts[0].node, "node-d");
    let lines = lines(&log2);
    let starts = lines.iter().filter(|l| l.starts_with("start")).count();
    let dones = lines.iter().filter(|l| l.starts_with("done")).count();
    assert_eq!((starts, dones), (2, 1), "{lines:?}");
}
