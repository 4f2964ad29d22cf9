//! The execution log (migration 4): claims under leases, fencing, takeover after a lease
//! expires with the same idempotency key, completed steps never claimed again, concurrent
//! claimers each getting distinct steps, replans keeping completed rows, step decisions.

use std::time::Duration;

use plansmith_core::{Action, Plan, Step};
use plansmith_store::{
    Applies, ExecStatus, RUN_STOP, Review, ReviewState, RunSignal, RunState, StepEnd, StepSeed,
    StepVerdict, StoreError,
};
use serde_json::json;

use crate::support::{TestDb, both_backends};

fn seeds(ids: &[&str]) -> Vec<StepSeed> {
    ids.iter()
        .map(|id| StepSeed {
            step_id: (*id).to_owned(),
            completed: None,
        })
        .collect()
}

async fn stored_plan(db: &TestDb, id: &str, n_steps: usize) {
    let mut plan = Plan::new(id, "goal");
    for idx in 1..=n_steps {
        plan.steps.push(Step::new(
            format!("s{idx}"),
            format!("step {idx}"),
            Action::Reply { text: "x".into() },
        ));
    }
    db.store
        .create(plan, ReviewState::Accepted, Review::default(), "t")
        .await
        .unwrap();
}

async fn claims_leases_and_fencing(db: TestDb) {
    let store = &db.store;
    stored_plan(&db, "p", 3).await;
    let run = store
        .exec_start("p", 1, &seeds(&["s1", "s2", "s3"]), "a")
        .await
        .unwrap();
    assert_eq!(run.state, RunState::Running);
    // A second start while running is refused.
    let again = store.exec_start("p", 1, &seeds(&["s1"]), "b").await;
    assert!(matches!(again, Err(StoreError::RunActive(_))), "{again:?}");

    let ids: Vec<String> = ["s1", "s2"].iter().map(|s| s.to_string()).collect();
    let lease = Duration::from_millis(300);
    let claims = store.exec_claim("p", 1, &ids, "a", lease, 8).await.unwrap();
    assert_eq!(claims.len(), 2);
    assert_eq!(claims[0].idempotency_key, "p:1:s1:1");
    assert!(!claims[0].rerun);
    // Node b sees them leased.
    assert!(
        store
            .exec_claim("p", 1, &ids, "b", lease, 8)
            .await
            .unwrap()
            .is_empty()
    );

    // s1 completes on a.
    let ok = store
        .exec_finish(
            "p",
            &claims[0],
            "a",
            &StepEnd::Completed(json!({"n": 1})),
            "",
        )
        .await
        .unwrap();
    assert!(ok);
    // a's call of s2 became a task on the tool's server; a dies holding s2: after the lease, b
    // takes it over with the same attempt and key, and the task to poll.
    assert_eq!(claims[1].remote_task, None);
    store
        .exec_remember_task("p", &claims[1].idempotency_key, "task-7")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let taken = store.exec_claim("p", 1, &ids, "b", lease, 8).await.unwrap();
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0].step_id, "s2");
    assert_eq!(taken[0].idempotency_key, "p:1:s2:1");
    assert!(taken[0].rerun);
    assert_eq!(taken[0].remote_task.as_deref(), Some("task-7"));
    // a comes back too late: its write is fenced off.
    let late = store
        .exec_finish("p", &claims[1], "a", &StepEnd::Completed(json!("late")), "")
        .await
        .unwrap();
    assert!(!late);
    // b fails it with a retry later; a claim before not_before gets nothing.
    let retry_at = chrono::Utc::now() + chrono::Duration::milliseconds(300);
    assert!(
        store
            .exec_finish(
                "p",
                &taken[0],
                "b",
                &StepEnd::Retry {
                    error: "boom".into(),
                    not_before: retry_at
                },
                "retry"
            )
            .await
            .unwrap()
    );
    assert!(
        store
            .exec_claim("p", 1, &ids, "b", lease, 8)
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    let second = store.exec_claim("p", 1, &ids, "a", lease, 8).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].idempotency_key, "p:1:s2:2");
    assert!(!second[0].rerun);
    // A new attempt is a new call: no task of the earlier one.
    assert_eq!(second[0].remote_task, None);

    // Completed never changes.
    assert!(
        !store
            .exec_set_status("p", "s1", ExecStatus::Skipped, "no")
            .await
            .unwrap()
    );
    let steps = store.exec_steps("p").await.unwrap();
    assert_eq!(steps[0].status, ExecStatus::Completed);
    assert_eq!(steps[0].result, Some(json!({"n": 1})));

    let attempts = store.exec_attempts("p").await.unwrap();
    let s2_first = attempts
        .iter()
        .find(|a| a.idempotency_key == "p:1:s2:1")
        .unwrap();
    assert_eq!(s2_first.runs, 2, "{attempts:?}");
    assert_eq!(s2_first.outcome, "failed");
}
both_backends!(claims_leases_and_fencing, super::claims_leases_and_fencing);

async fn concurrent_claimers_get_distinct_steps(db: TestDb) {
    stored_plan(&db, "q", 40).await;
    let ids: Vec<String> = (1..=40).map(|i| format!("s{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    db.store
        .exec_start("q", 1, &seeds(&refs), "n0")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for node in 0..4 {
        let store = db.store.clone();
        let ids = ids.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..40 {
                let got = store
                    .exec_claim(
                        "q",
                        1,
                        &ids,
                        &format!("n{node}"),
                        Duration::from_secs(60),
                        3,
                    )
                    .await
                    .unwrap();
                if got.is_empty() {
                    break;
                }
                mine.extend(got.into_iter().map(|c| c.step_id));
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(before, all.len(), "a step was claimed twice");
    assert_eq!(all.len(), 40);
}
both_backends!(
    concurrent_claimers_get_distinct_steps,
    super::concurrent_claimers_get_distinct_steps
);

async fn replan_keeps_completed_and_decisions(db: TestDb) {
    let store = &db.store;
    stored_plan(&db, "r", 3).await;
    store
        .exec_start("r", 1, &seeds(&["s1", "s2", "s3"]), "a")
        .await
        .unwrap();
    let claims = store
        .exec_claim("r", 1, &["s1".to_owned()], "a", Duration::from_secs(5), 1)
        .await
        .unwrap();
    store
        .exec_finish("r", &claims[0], "a", &StepEnd::Completed(json!(7)), "")
        .await
        .unwrap();

    let bad = store
        .decide_step("r", "s9", StepVerdict::Approve, "", None, "me")
        .await;
    assert!(
        matches!(bad, Err(StoreError::InvalidStep { .. })),
        "{bad:?}"
    );
    // s1 is done: refused. s2 has not been reached: kept for when it is.
    let done = store
        .decide_step("r", "s1", StepVerdict::Retry, "", None, "me")
        .await;
    assert!(
        matches!(&done, Err(StoreError::NotDecidable { reason, .. })
            if reason.contains("the run is done with it (completed)")),
        "{done:?}"
    );
    let decided = store
        .decide_step("r", "s2", StepVerdict::Approve, "ok", None, "me")
        .await
        .unwrap();
    assert_eq!(decided.applies, Applies::WhenReached);
    assert_eq!(decided.decision.note, "ok");
    let decisions = store.step_decisions("r").await.unwrap();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].verdict, StepVerdict::Approve);
    store.consume_step_decision("r", "s2").await.unwrap();
    assert!(store.step_decisions("r").await.unwrap().is_empty());
    // A request to stop the run is kept beside the step decisions, under no step.
    assert_eq!(store.run_signal("r").await.unwrap(), RunSignal::Continue);
    let run = store.request_stop("r", "enough", "ann").await.unwrap();
    assert_eq!(run.state, RunState::Running);
    let RunSignal::Stop(stop) = store.run_signal("r").await.unwrap() else {
        panic!("no stop signal")
    };
    assert_eq!(
        (stop.actor.as_str(), stop.note.as_str(), stop.verdict),
        ("ann", "enough", StepVerdict::Abort)
    );
    assert!(
        store.step_decisions("r").await.unwrap().is_empty(),
        "a stop is no step's decision"
    );
    store.consume_step_decision("r", RUN_STOP).await.unwrap();

    let run = store
        .exec_replan(
            "r",
            4,
            &[
                StepSeed {
                    step_id: "s1".into(),
                    completed: Some(json!("ignored")),
                },
                StepSeed {
                    step_id: "s4".into(),
                    completed: None,
                },
            ],
        )
        .await
        .unwrap();
    assert_eq!((run.base_version, run.replans), (4, 1));
    let steps = store.exec_steps("r").await.unwrap();
    let ids: Vec<&str> = steps.iter().map(|s| s.step_id.as_str()).collect();
    assert_eq!(ids, ["s1", "s4"]);
    assert_eq!(steps[0].result, Some(json!(7)));
    // s2 is in the plan but no longer in the run: a decision about it would never be read.
    let gone = store
        .decide_step("r", "s2", StepVerdict::Approve, "ok", None, "me")
        .await;
    assert!(
        matches!(&gone, Err(StoreError::NotDecidable { reason, .. })
            if reason.contains("not part of the run in progress")),
        "{gone:?}"
    );
    assert!(store.step_decisions("r").await.unwrap().is_empty());

    assert!(
        store
            .exec_set_run_state("r", RunState::Completed, Some(&json!({"ok": true})))
            .await
            .unwrap()
    );
    // Over: not reopened by a late writer; a new run may start.
    assert!(
        !store
            .exec_set_run_state("r", RunState::Failed, None)
            .await
            .unwrap()
    );
    let run = store.exec_run("r").await.unwrap().unwrap();
    assert_eq!(run.state, RunState::Completed);
    assert_eq!(run.outcome, Some(json!({"ok": true})));
    let stop = store.request_stop("r", "", "me").await;
    assert!(
        matches!(&stop, Err(StoreError::NotRunning { why, .. }) if why == "its last run is completed"),
        "{stop:?}"
    );
    let late = store
        .decide_step("r", "s1", StepVerdict::Approve, "", None, "me")
        .await;
    assert!(
        matches!(&late, Err(StoreError::NotDecidable { reason, .. })
            if reason.starts_with("its last run is completed")),
        "{late:?}"
    );
    store
        .exec_start("r", 5, &seeds(&["s1"]), "b")
        .await
        .unwrap();
    // Deleting the plan removes its log; a process still running it is told the run is gone.
    assert_eq!(store.run_signal("r").await.unwrap(), RunSignal::Continue);
    store.delete("r").await.unwrap();
    assert!(store.exec_run("r").await.unwrap().is_none());
    assert_eq!(store.run_signal("r").await.unwrap(), RunSignal::Gone);
}
both_backends!(
    replan_keeps_completed_and_decisions,
    super::replan_keeps_completed_and_decisions
);

/// A plan with no steps is never accepted (it would "run" as completed 0/0), by a person or
/// by `auto_accept`.
async fn an_empty_plan_is_not_accepted(db: TestDb) {
    let store = &db.store;
    let plan = Plan::new("empty", "goal");
    store
        .create(plan, ReviewState::AwaitingReview, Review::default(), "t")
        .await
        .unwrap();
    let refused = store.accept("empty", None, "me").await;
    assert!(
        matches!(&refused, Err(StoreError::EmptyPlan(id)) if id == "empty"),
        "{refused:?}"
    );
    assert_eq!(
        store.get("empty").await.unwrap().state,
        ReviewState::AwaitingReview
    );
    let outcome = plansmith_core::Outcome {
        status: plansmith_core::OutcomeStatus::Ready,
        plan: Plan::new("empty-auto", "goal"),
        diagnostics: plansmith_core::Diagnostics::default(),
    };
    let review = Review {
        auto_accept: true,
        ..Review::default()
    };
    assert_eq!(
        plansmith_store::review::initial_state(&outcome, &review),
        ReviewState::AwaitingReview
    );
}
both_backends!(
    an_empty_plan_is_not_accepted,
    super::an_empty_plan_is_not_accepted
);

/// A step decision names the version its person read: refused when that step changed since
/// (a replan), kept when only the run's progress made new versions.
async fn a_step_decision_on_a_changed_step_is_stale(db: TestDb) {
    let store = &db.store;
    stored_plan(&db, "v", 3).await;
    store
        .exec_start("v", 1, &seeds(&["s1", "s2", "s3"]), "a")
        .await
        .unwrap();
    // The run's own write (s1's status): version 2, the steps' definitions unchanged.
    let key = plansmith_store::StepKey::Id("s1".into());
    store
        .mark_step("v", &key, Some("completed"), None, None, "run")
        .await
        .unwrap();
    let decided = store
        .decide_step("v", "s2", StepVerdict::Approve, "", Some(1), "me")
        .await
        .unwrap();
    assert_eq!(decided.applies, Applies::WhenReached);
    // A person edits s2 (version 3): a decision made on version 2 is about another step.
    let mut plan = store.get("v").await.unwrap().plan;
    plan.steps[1].title = "step 2, changed".into();
    let stored = store.update("v", plan, Some(2), "bob").await.unwrap();
    assert_eq!(stored.version(), 3);
    let stale = store
        .decide_step("v", "s2", StepVerdict::Approve, "", Some(2), "me")
        .await;
    assert!(
        matches!(
            stale,
            Err(StoreError::Conflict {
                expected: 2,
                actual: 3,
                ..
            })
        ),
        "{stale:?}"
    );
    // s3 did not change; a version that never existed is stale.
    store
        .decide_step("v", "s3", StepVerdict::Approve, "", Some(2), "me")
        .await
        .unwrap();
    let future = store
        .decide_step("v", "s3", StepVerdict::Approve, "", Some(9), "me")
        .await;
    assert!(
        matches!(future, Err(StoreError::Conflict { expected: 9, .. })),
        "{future:?}"
    );
    let decisions = store.step_decisions("v").await.unwrap();
    let ids: Vec<&str> = decisions.iter().map(|d| d.step_id.as_str()).collect();
    assert_eq!(ids, ["s2", "s3"]);
}
both_backends!(
    a_step_decision_on_a_changed_step_is_stale,
    super::a_step_decision_on_a_changed_step_is_stale
);

async fn run_lease_is_exclusive(db: TestDb) {
    let store = &db.store;
    stored_plan(&db, "l", 1).await;
    store
        .exec_start("l", 1, &seeds(&["s1"]), "a")
        .await
        .unwrap();
    let lease = Duration::from_millis(200);
    assert!(store.exec_claim_run("l", "a", lease).await.unwrap());
    assert!(!store.exec_claim_run("l", "b", lease).await.unwrap());
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(store.exec_claim_run("l", "b", lease).await.unwrap());
    store.exec_release_run("l", "b").await.unwrap();
    assert!(store.exec_claim_run("l", "a", lease).await.unwrap());
}
both_backends!(run_lease_is_exclusive, super::run_lease_is_exclusive);

/// A node that stops cleanly gives its leases up: another takes its running steps over at
/// once, as re-runs with the same keys, and the run-level lease is free.
async fn released_leases_are_taken_over_at_once(db: TestDb) {
    let store = &db.store;
    stored_plan(&db, "g", 3).await;
    store
        .exec_start("g", 1, &seeds(&["s1", "s2", "s3"]), "a")
        .await
        .unwrap();
    let ids: Vec<String> = ["s1", "s2", "s3"].iter().map(|s| s.to_string()).collect();
    let lease = Duration::from_secs(60);
    let claims = store.exec_claim("g", 1, &ids, "a", lease, 2).await.unwrap();
    assert_eq!(claims.len(), 2);
    assert!(store.exec_claim_run("g", "a", lease).await.unwrap());
    // Only a's running steps are given up, and only by a.
    assert_eq!(
        store.exec_release("g", "b").await.unwrap(),
        Vec::<String>::new()
    );
    let taken = store.exec_claim("g", 1, &ids, "b", lease, 8).await.unwrap();
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0].step_id, "s3");
    assert_eq!(store.exec_release("g", "a").await.unwrap(), ["s1", "s2"]);
    let taken = store.exec_claim("g", 1, &ids, "b", lease, 8).await.unwrap();
    let keys: Vec<(&str, bool)> = taken
        .iter()
        .map(|c| (c.idempotency_key.as_str(), c.rerun))
        .collect();
    assert_eq!(keys, [("g:1:s1:1", true), ("g:1:s2:1", true)]);
    assert!(store.exec_claim_run("g", "b", lease).await.unwrap());
    // a holds nothing now.
    assert_eq!(
        store.exec_release("g", "a").await.unwrap(),
        Vec::<String>::new()
    );
}
both_backends!(
    released_leases_are_taken_over_at_once,
    super::released_leases_are_taken_over_at_once
);

/// What a step's task asks a person: recorded, answered, then taken once by the attempt that
/// answers it; an answer to a step that asks nothing is not recorded.
async fn a_task_question_is_answered_and_taken_once(db: TestDb) {
    let store = &db.store;
    let asks = json!({"q1-0": {"method": "elicitation/create", "params": {"message": "To whom?"}}});
    assert!(!store.exec_task_answer("p", "s1", "bob").await.unwrap());
    store
        .exec_task_asks("p", "s1", "task-1", &asks)
        .await
        .unwrap();
    // Not answered yet: nothing to take.
    assert_eq!(store.exec_take_task_input("p", "s1").await.unwrap(), None);
    assert!(store.exec_task_answer("p", "s1", "bob").await.unwrap());
    assert_eq!(
        store.exec_take_task_input("p", "s1").await.unwrap(),
        Some(("task-1".to_owned(), asks, "bob".to_owned()))
    );
    assert_eq!(store.exec_take_task_input("p", "s1").await.unwrap(), None);
}

both_backends!(
    a_task_question_is_answered_and_taken_once,
    super::a_task_question_is_answered_and_taken_once
);
