use std::sync::Arc;

use plansmith_core::{Catalog, Planner, ScriptedModel};
use plansmith_exec::{Executor, OnFailure, StopReason};
use plansmith_store::{ExecStatus, RunState, Trigger};
use serde_json::{Value, json};

use crate::support::*;

fn catalog() -> Catalog {
    let object = json!({"type": "object", "properties": {"id": {"type": "string"}, "x": {"type": "integer"}}});
    Catalog::from_json(&json!([
        {"name": "items", "description": "list items", "input_schema": {"type": "object"}},
        {"name": "broken", "description": "old fetch", "input_schema": object},
        {"name": "fixed", "description": "new fetch", "input_schema": object}
    ]))
    .unwrap()
}

async fn failing_plan(env: &Env, id: &str) {
    env.plan(
        id,
        json!([
            {"id": "s1", "title": "list", "action": {"type": "tool", "name": "items", "arguments": {}}},
            {"id": "s2", "title": "fetch", "depends_on": ["s1"],
             "action": {"type": "tool", "name": "broken", "arguments": {"id": {"$ref": "s1.output.items[0].id"}}}},
            {"id": "s3", "title": "answer", "depends_on": ["s2"], "action": {"type": "reply", "text": "fetched"}}
        ]),
        json!({"execution": {"retries": 0}}),
    )
    .await;
}

/// The model's reply: a plan in our shape, steps in the flat form models write.
fn reply(steps: Value) -> String {
    json!({"title": "replanned", "steps": steps}).to_string()
}

/// An executor that replans once a step failed, with the three tools' commands.
fn replanning(env: &Env) -> Executor {
    let mut config = config("n");
    config.policy.on_failure = OnFailure::Replan;
    config.policy.retries = 0;
    let tools = invokers(vec![
        ("items", script("items.sh", &[])),
        ("broken", script("fail.sh", &["upstream said 503"])),
        ("fixed", script("echo.sh", &[])),
    ]);
    Executor::new(env.store.clone(), tools, config)
}

fn executor(env: &Env, model: Arc<ScriptedModel>) -> (Executor, Seen) {
    let planner = Planner::new(catalog(), model);
    let seen = Seen::default();
    let executor = seen.attach(
        replanning(env)
            .with_catalog(catalog())
            .with_planner(Arc::new(planner)),
    );
    (executor, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replan_keeps_completed_steps_and_runs_the_new_rest() {
    let env = env().await;
    failing_plan(&env, "re").await;
    let model = Arc::new(ScriptedModel::new([reply(json!([
        {"id": "s1", "type": "tool", "title": "list", "name": "items", "arguments": {}},
        {"id": "s2", "type": "tool", "title": "fetch again", "name": "fixed",
         "arguments": {"id": {"$ref": "s1.output.items[0].id"}}, "depends_on": ["s1"]},
        {"id": "s3", "type": "reply", "title": "answer", "text": "fetched", "depends_on": ["s2"]}
    ]))]));
    let (executor, seen) = executor(&env, model.clone());
    let report = executor.run("re").await.unwrap();
    assert_eq!(report.state, RunState::Completed, "{report:?}");
    assert_eq!(report.stop_reason, Some(StopReason::Completed));
    // The replan's tokens count in the run's budget.
    assert!(report.budget.as_ref().unwrap().tokens > 0, "{report:?}");
    assert_eq!(report.replans, 1);
    let ids: Vec<(&str, &str, ExecStatus)> = report
        .steps
        .iter()
        .map(|s| (s.id.as_str(), s.title.as_str(), s.status))
        .collect();
    assert_eq!(
        ids,
        [
            ("s1", "list", ExecStatus::Completed),
            ("s2", "fetch again", ExecStatus::Completed),
            ("s3", "answer", ExecStatus::Completed)
        ]
    );
    assert_eq!(
        report.steps[1].result.as_ref().unwrap()["arguments"]["id"],
        json!("a1")
    );
    // s1 ran once: kept, not re-run.
    let attempts = env.store.exec_attempts("re").await.unwrap();
    let s1_runs: Vec<_> = attempts.iter().filter(|a| a.step_id == "s1").collect();
    assert_eq!(s1_runs.len(), 1, "{attempts:?}");
    // The new plan is a version with trigger `replan`, and new keys carry its version.
    let history = env.store.history("re").await.unwrap();
    let replan = history
        .iter()
        .find(|v| v.trigger == Trigger::Replan)
        .unwrap();
    assert_eq!(report.base_version, replan.version);
    assert!(
        attempts
            .iter()
            .any(|a| a.idempotency_key == format!("re:{}:s2:1", replan.version))
    );
    // The model saw the observations.
    let prompt: String = model.requests()[0]
        .messages
        .iter()
        .map(|m| m.content.clone())
        .collect();
    assert!(prompt.contains("upstream said 503"), "{prompt}");
    assert!(prompt.contains("completed; result"), "{prompt}");
    assert!(seen.kinds().contains(&"replanned".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replan_that_repeats_the_failed_call_stalls() {
    let env = env().await;
    failing_plan(&env, "same").await;
    let model = Arc::new(ScriptedModel::new([reply(json!([
        {"id": "s1", "type": "tool", "title": "list", "name": "items", "arguments": {}},
        {"id": "s2", "type": "tool", "title": "fetch, retitled", "name": "broken",
         "arguments": {"id": {"$ref": "s1.output.items[0].id"}}, "depends_on": ["s1"]}
    ]))]));
    let (executor, _) = executor(&env, model);
    let report = executor.run("same").await.unwrap();
    assert_eq!(report.state, RunState::Stalled, "{report:?}");
    assert_eq!(report.stop_reason, Some(StopReason::Stalled));
    assert!(
        report
            .reason
            .as_deref()
            .unwrap()
            .contains("repeats the failed call"),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_failure_after_a_replan_stalls() {
    let env = env().await;
    failing_plan(&env, "fp").await;
    // A different call of the same tool fails with the same error: the same fingerprint.
    let model = Arc::new(ScriptedModel::new([
        reply(json!([
            {"id": "s1", "type": "tool", "title": "list", "name": "items", "arguments": {}},
            {"id": "s2", "type": "tool", "title": "fetch by number", "name": "broken", "arguments": {"x": 7}, "depends_on": ["s1"]}
        ])),
        reply(json!([
            {"id": "s1", "type": "reply", "title": "never", "text": "never"}
        ])),
    ]));
    let (executor, _) = executor(&env, model.clone());
    let report = executor.run("fp").await.unwrap();
    assert_eq!(report.state, RunState::Stalled, "{report:?}");
    assert_eq!(report.stop_reason, Some(StopReason::Stalled));
    assert!(
        report
            .reason
            .as_deref()
            .unwrap()
            .contains("failed the same way"),
        "{report:?}"
    );
    assert_eq!(model.remaining(), 1, "no second replan after a stall");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_made_with_its_callers_catalog_replans_with_it() {
    let env = env().await;
    // The plan's own catalog is stored; the executor's planners know none of its tools.
    let document = json!({"tools": [
        {"name": "items", "description": "list items", "input_schema": {"type": "object"}},
        {"name": "broken", "description": "old fetch", "input_schema": {"type": "object"}},
        {"name": "fixed", "description": "new fetch", "input_schema": {"type": "object",
            "properties": {"id": {"type": "string"}}, "required": ["id"]}}
    ]});
    let catalog_id = env.store.save_catalog(&document).await.unwrap();
    failing_plan(&env, "own").await;
    let stored = env.store.get("own").await.unwrap();
    let mut review = stored.review.clone();
    review.catalog = Some(catalog_id);
    env.store
        .write(plansmith_store::Change {
            expected_version: stored.version(),
            plan: stored.plan.clone(),
            state: stored.state,
            review,
            trigger: Trigger::StepUpdate,
            actor: "test".to_owned(),
        })
        .await
        .unwrap();
    let model = Arc::new(ScriptedModel::new([reply(json!([
        {"id": "s1", "type": "tool", "title": "list", "name": "items", "arguments": {}},
        {"id": "s2", "type": "tool", "title": "fetch again", "name": "fixed",
         "arguments": {"id": {"$ref": "s1.output.items[0].id"}}, "depends_on": ["s1"]}
    ]))]));
    let empty = Arc::new(Planner::new(Catalog::empty(), model));
    let executor = replanning(&env)
        .with_planner(empty.clone())
        .with_planners(Arc::new(StoredCatalogs(empty)));
    let report = executor.run("own").await.unwrap();
    // Against the executor's empty catalog the replan would name unknown tools and fail.
    assert_eq!(report.state, RunState::Completed, "{report:?}");
    assert_eq!(report.replans, 1);
    assert_eq!(report.steps[1].title, "fetch again", "{report:?}");
}

/// Plans made with a sent catalog replan with it: the planner over the document the store keeps
/// under the plan's catalog id (the service's `Planners` also caches it).
struct StoredCatalogs(Arc<Planner>);

impl plansmith_exec::PlannerSource for StoredCatalogs {
    fn for_review<'a>(
        &'a self,
        store: &'a plansmith_store::PlanStore,
        review: &'a plansmith_store::Review,
    ) -> plansmith_core::llm::BoxFuture<'a, Result<Arc<Planner>, plansmith_store::StoreError>> {
        Box::pin(async move {
            let Some(id) = review.catalog.as_deref() else {
                return Ok(Arc::clone(&self.0));
            };
            let document = store.catalog_document(id).await?;
            let catalog = Catalog::from_json(&document["tools"]).unwrap();
            Ok(Arc::new(self.0.for_catalog(catalog)))
        })
    }
}
