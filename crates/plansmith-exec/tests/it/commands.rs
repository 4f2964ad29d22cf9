use std::path::Path;
use std::time::{Duration, Instant};

use plansmith_exec::{Endpoint, Executor};
use plansmith_store::{ExecStatus, RunState};
use serde_json::json;

use crate::support::*;

fn step(id: &str, name: &str) -> serde_json::Value {
    json!({"id": id, "title": format!("{name} {id}"),
           "action": {"type": "tool", "name": name, "arguments": {}}})
}

/// `spawn.sh PIDFILE` (its child sleeps 60 s) with the call's timeout.
fn spawning(pidfile: &Path, timeout_ms: u64) -> Endpoint {
    let mut endpoint = script("spawn.sh", &[pidfile.to_str().unwrap()]);
    if let Endpoint::Command { timeout_ms: t, .. } = &mut endpoint {
        *t = Some(timeout_ms);
    }
    endpoint
}

/// Whether the process runs (a zombie, killed and waiting for its parent, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X'))
    })
}

/// The pid the tool's child wrote, once it is written (at most 10 s).
async fn child_of(pidfile: &Path) -> u32 {
    let began = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the tool never started its child"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the process is gone within 3 s.
async fn ends(pid: u32) -> bool {
    let began = Instant::now();
    while alive(pid) {
        if began.elapsed() > Duration::from_secs(3) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg(target_os = "linux")]
async fn a_timed_out_command_leaves_no_process_behind() {
    let env = env().await;
    env.plan(
        "timeout",
        json!([step("s1", "spawn")]),
        json!({"execution": {"retries": 0}}),
    )
    .await;
    let pidfile = env.path("child");
    let tools = invokers(vec![("spawn", spawning(&pidfile, 500))]);
    let report = Executor::new(env.store.clone(), tools, config("n"))
        .run("timeout")
        .await
        .unwrap();
    assert_eq!(report.state, RunState::Failed, "{report:?}");
    assert!(
        report.steps[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("timed out after 500 ms"),
        "{report:?}"
    );
    // Before, only the shell was killed: its `sleep 60` ran on, orphaned.
    let child = child_of(&pidfile).await;
    assert!(ends(child).await, "the tool's child {child} still runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg(target_os = "linux")]
async fn stopping_a_run_stops_what_its_commands_started() {
    let env = env().await;
    env.plan("stop", json!([step("s1", "spawn")]), json!({}))
        .await;
    let pidfile = env.path("child");
    let tools = invokers(vec![("spawn", spawning(&pidfile, 30_000))]);
    let executor = Executor::new(env.store.clone(), tools, config("n"));
    let run = tokio::spawn({
        let executor = executor.clone();
        async move { executor.run("stop").await }
    });
    let child = child_of(&pidfile).await;
    assert!(alive(child));
    env.store.request_stop("stop", "", "ann").await.unwrap();
    let report = run.await.unwrap().unwrap();
    assert_eq!(report.state, RunState::Aborted, "{report:?}");
    assert_eq!(report.steps[0].status, ExecStatus::Skipped);
    assert!(
        ends(child).await,
        "the stopped tool's child {child} still runs"
    );
}

/// A command printing more than the 16 MiB the invoker reads is stopped at once and fails
/// for good, saying so: it used to block on the full pipe until its timeout, then be retried
/// as if it had timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_over_the_limit_fails_at_once_and_is_not_retried() {
    let env = env().await;
    env.plan("big", json!([step("s1", "big")]), json!({})).await;
    let big = Endpoint::Command {
        command: ["sh", "-c", "head -c 20000000 /dev/zero"]
            .map(str::to_owned)
            .to_vec(),
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(20_000),
    };
    let began = Instant::now();
    let report = Executor::new(env.store.clone(), invokers(vec![("big", big)]), config("n"))
        .run("big")
        .await
        .unwrap();
    let elapsed = began.elapsed();
    assert_eq!(report.state, RunState::Failed, "{report:?}");
    let error = report.steps[0].error.as_deref().unwrap_or("");
    assert!(
        error.contains("output too large") && error.contains("16777216 bytes"),
        "{error}"
    );
    assert_eq!(report.steps[0].attempts, 1, "{report:?}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
}
