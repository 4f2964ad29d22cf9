//! The goal check: a run completes only when the model finds the goal met; gaps are replanned
//! (bounded by the cap on replans), a goal that cannot be met ends the run failed.

use std::sync::Arc;

use plansmith_core::{Catalog, Planner, ScriptedModel};
use plansmith_exec::{Executor, StopReason, Verdict};
use plansmith_store::{Budget, ExecStatus, RunState};
use serde_json::{Value, json};

use crate::support::*;

fn catalog() -> Catalog {
    let object = json!({"type": "object", "properties": {"to": {"type": "string"}}});
    Catalog::from_json(&json!([
        {"name": "lookup", "description": "Look the weather up.", "input_schema": {"type": "object"}},
        {"name": "notify", "description": "Send a note to someone.", "input_schema": object}
    ]))
    .unwrap()
}

fn verdict(verdict: &str, gaps: &[&str]) -> String {
    json!({"verdict": verdict, "gaps": gaps, "reason": format!("judged {verdict}")}).to_string()
}

/// The executor of these tests: `lookup` and `notify` echo, `model` plans and judges.
fn goal_executor(env: &Env, model: &Arc<ScriptedModel>) -> Executor {
    Executor::new(
        env.store.clone(),
        invokers(vec![
            ("lookup", script("echo.sh", &[])),
            ("notify", script("echo.sh", &[])),
        ]),
        config("n"),
    )
    .with_catalog(catalog())
    .with_planner(Arc::new(Planner::new(catalog(), model.clone())))
}

/// A run of `lookup` whose goal also asks to notify Bob, judged by `turns`.
async fn judged(
    id: &str,
    turns: Vec<String>,
    budget: Budget,
) -> (plansmith_exec::RunReport, Arc<ScriptedModel>) {
    let env = env().await;
    env.plan(
        id,
        json!([{"id": "s1", "title": "look up", "action": {"type": "tool", "name": "lookup", "arguments": {}}}]),
        json!({"execution": {"goal_check": {"rubric": "Bob was told"}}}),
    )
    .await;
    let model = Arc::new(ScriptedModel::new(turns));
    let executor = goal_executor(&env, &model);
    let report = executor.run_with(id, &budget).await.unwrap();
    // Keep the store alive until the report is read.
    drop(env);
    (report, model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_is_replanned_and_the_run_completes_once_the_goal_is_met() {
    let replan: Value = json!({"title": "tell Bob", "steps": [
        {"id": "s1", "type": "tool", "title": "look up", "name": "lookup", "arguments": {}},
        {"id": "s2", "type": "tool", "title": "tell Bob", "name": "notify",
         "arguments": {"to": "bob"}, "depends_on": ["s1"]}
    ]});
    let (report, model) = judged(
        "gap",
        vec![
            verdict("needs_revision", &["Bob was not told"]),
            replan.to_string(),
            verdict("satisfied", &[]),
        ],
        Budget::default(),
    )
    .await;
    assert_eq!(
        report.stop_reason,
        Some(StopReason::Completed),
        "{report:?}"
    );
    assert_eq!(report.replans, 1);
    let statuses: Vec<(&str, ExecStatus)> = report
        .steps
        .iter()
        .map(|s| (s.id.as_str(), s.status))
        .collect();
    assert_eq!(
        statuses,
        [("s1", ExecStatus::Completed), ("s2", ExecStatus::Completed)]
    );
    assert_eq!(
        report.goal_check.as_ref().unwrap().verdict,
        Verdict::Satisfied
    );
    // The judge saw the request, the rubric and the results; the replan was asked for the gap.
    let requests = model.requests();
    let judge: String = requests[0]
        .messages
        .iter()
        .map(|m| m.content.clone())
        .collect();
    assert!(
        judge.contains("Bob was told") && judge.contains("look up"),
        "{judge}"
    );
    let replanning: String = requests[1]
        .messages
        .iter()
        .map(|m| m.content.clone())
        .collect();
    assert!(replanning.contains("Bob was not told"), "{replanning}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_that_cannot_be_met_or_a_gap_past_the_cap_ends_the_run_failed() {
    let (report, _) = judged("failed", vec![verdict("failed", &[])], Budget::default()).await;
    assert_eq!(report.state, RunState::Failed, "{report:?}");
    assert_eq!(report.stop_reason, Some(StopReason::Failed));
    assert!(
        report.reason.as_deref().unwrap().contains("cannot be met"),
        "{report:?}"
    );
    // Its steps' results are still reported.
    assert_eq!(report.steps[0].status, ExecStatus::Completed);

    let budget = Budget {
        max_replans: Some(0),
        ..Budget::default()
    };
    let (report, _) = judged(
        "capped",
        vec![verdict("needs_revision", &["Bob was not told"])],
        budget,
    )
    .await;
    assert_eq!(
        report.stop_reason,
        Some(StopReason::ReplansCapped),
        "{report:?}"
    );
    assert!(
        report
            .reason
            .as_deref()
            .unwrap()
            .contains("Bob was not told"),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_met_goal_completes_the_run() {
    let (report, model) = judged("met", vec![verdict("satisfied", &[])], Budget::default()).await;
    assert_eq!(
        report.stop_reason,
        Some(StopReason::Completed),
        "{report:?}"
    );
    assert_eq!(report.goal_check.unwrap().verdict, Verdict::Satisfied);
    assert_eq!(model.requests().len(), 1);
    // The judge's tokens count in the run's budget.
    assert!(report.budget.unwrap().tokens > 0);
}

/// A part of the request whose names no completed call carries is a gap without asking the
/// model (small models call such a run satisfied): it is replanned, then the model judges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_no_completed_call_carries_is_a_gap_without_asking() {
    let env = env().await;
    let mut plan = plansmith_core::Plan::new("seen", "Look up the weather in Rome and tell Bob");
    plan.steps = serde_json::from_value(json!([
        {"id": "s1", "title": "look up", "action": {"type": "tool", "name": "lookup", "arguments": {"city": "Rome"}}}
    ]))
    .unwrap();
    plan.metadata
        .insert("execution".into(), json!({"goal_check": true}));
    env.store
        .create(
            plan,
            plansmith_store::ReviewState::Accepted,
            plansmith_store::Review::default(),
            "test",
        )
        .await
        .unwrap();
    let replan = json!({"title": "tell Bob", "steps": [
        {"id": "s1", "type": "tool", "title": "look up", "name": "lookup", "arguments": {"city": "Rome"}},
        {"id": "s2", "type": "tool", "title": "tell Bob", "name": "notify",
         "arguments": {"to": "Bob"}, "depends_on": ["s1"]}
    ]});
    let model = Arc::new(ScriptedModel::new([
        replan.to_string(),
        verdict("satisfied", &[]),
    ]));
    let report = goal_executor(&env, &model).run("seen").await.unwrap();
    assert_eq!(
        report.stop_reason,
        Some(StopReason::Completed),
        "{report:?}"
    );
    assert_eq!(report.replans, 1);
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "the replan, then one judgement");
    let replanning: String = requests[0]
        .messages
        .iter()
        .map(|m| m.content.clone())
        .collect();
    assert!(replanning.contains("tell Bob"), "{replanning}");
}
