//! Runs as a service operation: [`Service::run`] in the background, [`Service::run_here`] in
//! the caller's task, and what each refuses before anything runs.

use std::sync::Arc;
use std::time::Duration;

use plansmith_core::{Action, Catalog, Plan, Planner, ScriptedModel, Step};
use plansmith_exec::{ExecConfig, ExecError, Executor, FnInvoker, Invokers};
use plansmith_service::{Planners, RunStart, Runner, Service, ServiceError};
use plansmith_store::{Budget, Review, ReviewState, RunState, StoreError};
use serde_json::json;

use crate::support::{TestDb, both_backends};

fn service(db: &TestDb) -> Service {
    let planner = Planner::new(
        Catalog::default(),
        Arc::new(ScriptedModel::new(Vec::<String>::new())),
    );
    Service::new(db.store.clone(), Arc::new(Planners::new(Arc::new(planner))))
}

async fn store_plan(db: &TestDb, id: &str, state: ReviewState) {
    let mut plan = Plan::new(id, "Count");
    plan.steps.push(Step::new(
        "s1",
        "Count",
        Action::Tool {
            name: "count".into(),
            arguments: Default::default(),
        },
    ));
    db.store
        .create(plan, state, Review::default(), "tester")
        .await
        .unwrap();
}

async fn runs(db: TestDb) {
    // Without a runner nothing runs, and the refusal says why.
    store_plan(&db, "p-run", ReviewState::Accepted).await;
    let bare = service(&db);
    assert!(matches!(
        bare.run("p-run", RunStart::New(Budget::default())).await,
        Err(ServiceError::NoExecutor)
    ));

    let tools = FnInvoker::new(|_call| {
        std::thread::sleep(Duration::from_millis(300));
        Ok(json!({"n": 1}))
    });
    let invokers = Invokers {
        tools: Some(Arc::new(tools)),
        ..Invokers::default()
    };
    let executor = Executor::new(db.store.clone(), invokers, ExecConfig::new("test"));
    let service = service(&db).with_runner(Runner::new(executor));

    // Refused before anything runs: a plan not accepted, a run that never was.
    store_plan(&db, "p-review", ReviewState::AwaitingReview).await;
    assert!(matches!(
        service
            .run("p-review", RunStart::New(Budget::default()))
            .await,
        Err(ServiceError::Exec(ExecError::NotRunnable { .. }))
    ));
    assert!(matches!(
        service.run("p-run", RunStart::Resume).await,
        Err(ServiceError::Exec(ExecError::NothingToResume { .. }))
    ));

    // A background run is recorded before the call returns, so a second start is refused.
    let started = service
        .run("p-run", RunStart::New(Budget::default()))
        .await
        .unwrap();
    assert_eq!(started.state, RunState::Running);
    assert!(matches!(
        service.run("p-run", RunStart::New(Budget::default())).await,
        Err(ServiceError::Exec(ExecError::Store(StoreError::RunActive(
            _
        ))))
    ));
    let mut state = RunState::Running;
    for _ in 0..100 {
        state = db.store.exec_run("p-run").await.unwrap().unwrap().state;
        if state.is_final() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state, RunState::Completed);

    // The ended run has nothing to resume; a new run in this task goes to its end.
    let err = service
        .run_here("p-run", RunStart::Resume)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("its last run is completed"),
        "{err}"
    );
    let report = service
        .run_here("p-run", RunStart::New(Budget::default()))
        .await
        .unwrap();
    assert_eq!(report.state, RunState::Completed);
    assert_eq!(report.steps[0].result, Some(json!({"n": 1})));
}

both_backends!(run_operations, super::runs);
