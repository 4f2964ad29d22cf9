use std::time::Duration;

use plansmith_core::Catalog;
use plansmith_exec::Executor;
use plansmith_store::{ExecStatus, PlanStore, RunState, StepVerdict};
use serde_json::json;

use crate::support::*;

fn steps() -> serde_json::Value {
    json!([
        {"id": "s1", "title": "list", "action": {"type": "tool", "name": "items", "arguments": {}}},
        {"id": "s2", "title": "delete", "depends_on": ["s1"], "requires_approval": true,
         "action": {"type": "tool", "name": "delete_file", "arguments": {"path": "/tmp/x"}}},
        {"id": "s3", "title": "other", "action": {"type": "tool", "name": "items", "arguments": {}}}
    ])
}

/// A person's verdict on step s2 of plan `id`, as every front end records it.
async fn decide(store: &PlanStore, id: &str, verdict: StepVerdict, actor: &str) {
    store
        .decide_step(id, "s2", verdict, "", None, actor)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_step_waits_for_approval_through_the_feedback_path() {
    let env = env().await;
    env.plan("gate", steps(), json!({})).await;
    let deleted = env.path("deleted");
    let tools = || {
        invokers(vec![
            ("items", script("items.sh", &[])),
            (
                "delete_file",
                script("append.sh", &[deleted.to_str().unwrap()]),
            ),
        ])
    };
    let report = Executor::new(env.store.clone(), tools(), config("n"))
        .run("gate")
        .await
        .unwrap();
    assert_eq!(report.state, RunState::Waiting);
    let by_id = |id: &str| report.steps.iter().find(|s| s.id == id).unwrap().clone();
    assert_eq!(by_id("s1").status, ExecStatus::Completed);
    assert_eq!(
        by_id("s3").status,
        ExecStatus::Completed,
        "ungated work goes on"
    );
    assert_eq!(by_id("s2").status, ExecStatus::Blocked);
    assert_eq!(by_id("s2").note, "waiting for approval");
    assert!(
        lines(&deleted).is_empty(),
        "the gated tool ran without approval"
    );

    decide(&env.store, "gate", StepVerdict::Approve, "alice").await;
    let report = Executor::new(env.store.clone(), tools(), config("n"))
        .resume("gate")
        .await
        .unwrap();
    assert_eq!(report.state, RunState::Completed, "{report:?}");
    assert_eq!(lines(&deleted).len(), 2, "start + done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destructive_tools_are_gated_and_a_denial_skips() {
    let env = env().await;
    let mut plan_steps = steps();
    plan_steps[1]["requires_approval"] = json!(false);
    env.plan("deny", plan_steps, json!({})).await;
    // The catalog marks delete_file destructive; validation flags such steps when planning.
    let catalog = Catalog::from_json(&json!([
        {"name": "items", "input_schema": {"type": "object"}},
        {"name": "delete_file", "input_schema": {"type": "object"}, "annotations": {"destructiveHint": true}}
    ]))
    .unwrap();
    let (checked, _) = plansmith_core::validate::validate(
        env.store.get("deny").await.unwrap().plan,
        &catalog,
        &Default::default(),
    );
    assert!(checked.steps[1].requires_approval);
    env.store
        .update("deny", checked, None, "planner")
        .await
        .unwrap();

    let mut waiting = config("n");
    waiting.wait_for_people = Duration::from_secs(10);
    let store = env.store.clone();
    let decide = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        decide(&store, "deny", StepVerdict::Deny, "bob").await;
    });
    let tools = invokers(vec![
        ("items", script("items.sh", &[])),
        ("delete_file", script("fail.sh", &["must not run"])),
    ]);
    let report = Executor::new(env.store.clone(), tools, waiting)
        .run("deny")
        .await
        .unwrap();
    decide.await.unwrap();
    assert_eq!(report.state, RunState::Completed, "{report:?}");
    let s2 = &report.steps[1];
    assert_eq!((s2.status, s2.attempts), (ExecStatus::Skipped, 0));
    assert_eq!(s2.note, "denied by bob");

    // --approve-all: no gate.
    env.plan("all", steps(), json!({})).await;
    let mut approve_all = config("n");
    approve_all.approve_all = true;
    let tools = invokers(vec![
        ("items", script("items.sh", &[])),
        ("delete_file", script("items.sh", &[])),
    ]);
    let report = Executor::new(env.store.clone(), tools, approve_all)
        .run("all")
        .await
        .unwrap();
    assert_eq!(report.state, RunState::Completed);
}

/// An accepted plan with no steps is not "run" to a completed 0/0: it is refused before a
/// run is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_with_no_steps_does_not_run() {
    let env = env().await;
    env.plan("empty", json!([]), json!({})).await;
    let refused = Executor::new(env.store.clone(), invokers(vec![]), config("n"))
        .run("empty")
        .await;
    let Err(err) = refused else {
        panic!("an empty plan ran: {refused:?}")
    };
    assert!(err.to_string().contains("it has no steps"), "{err}");
    assert!(env.store.exec_run("empty").await.unwrap().is_none());
}

/// An approval that outlives its run: for the exact call in any plan, or for the tool in
/// every run of one plan. A call with other arguments, or the tool in another plan, still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standing_approvals_let_gated_calls_through_in_later_runs() {
    let env = env().await;
    let deleted = env.path("deleted");
    let run = |id: &'static str| {
        let tools = invokers(vec![
            ("items", script("items.sh", &[])),
            (
                "delete_file",
                script("append.sh", &[deleted.to_str().unwrap()]),
            ),
        ]);
        let executor = Executor::new(env.store.clone(), tools, config("n"));
        async move { executor.run(id).await.unwrap() }
    };
    let with_path = |path: &str| {
        let mut steps = steps();
        steps[1]["action"]["arguments"]["path"] = json!(path);
        steps
    };
    // This exact call is approved anywhere; another path is not.
    env.store
        .remember_approval(
            plansmith_store::Remember::Call,
            "elsewhere",
            "delete_file",
            &json!({"path": "/tmp/x"}),
            "alice",
        )
        .await
        .unwrap();
    env.plan("same-call", with_path("/tmp/x"), json!({})).await;
    env.plan("other-call", with_path("/tmp/y"), json!({})).await;
    assert_eq!(run("same-call").await.state, RunState::Completed);
    assert_eq!(run("other-call").await.state, RunState::Waiting);

    // The tool in every run of one plan (any arguments); another plan still waits.
    env.store
        .remember_approval(
            plansmith_store::Remember::Plan,
            "approved-plan",
            "delete_file",
            &json!({"path": "/tmp/y"}),
            "alice",
        )
        .await
        .unwrap();
    env.plan("approved-plan", with_path("/tmp/z"), json!({}))
        .await;
    env.plan("another-plan", with_path("/tmp/z"), json!({}))
        .await;
    assert_eq!(run("approved-plan").await.state, RunState::Completed);
    assert_eq!(run("another-plan").await.state, RunState::Waiting);
    let done: Vec<String> = lines(&deleted)
        .into_iter()
        .filter(|l| l.starts_with("done"))
        .collect();
    assert_eq!(done.len(), 2, "{done:?}");
    assert!(done[1].contains("approved-plan"), "{done:?}");
}
