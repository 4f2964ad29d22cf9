//! Each version's document is stored once: the current version's lives in `plans`, and a
//! version gets its own copy when it stops being current. Rows written before that layout (a
//! copy in every version) still read and write, and a row that breaks the layout is reported,
//! not guessed at.

use plansmith_core::Plan;
use plansmith_store::{Review, ReviewState, StepKey, StoreError};
use serde_json::{Value, json};
use sqlx::Row;

use crate::support::{TestDb, both_backends, raw_connection};

/// `(version, document length)` of every `plan_versions` row of `id`, oldest first.
async fn stored_documents(db: &TestDb, id: &str) -> Vec<(i64, usize)> {
    let mut conn = raw_connection(&db.location).await;
    let rows = sqlx::query(
        "SELECT version, document FROM plan_versions WHERE plan_id = $1 ORDER BY version",
    )
    .bind(id.to_owned())
    .fetch_all(&mut conn)
    .await
    .unwrap();
    rows.iter()
        .map(|row| {
            let document: String = row.try_get("document").unwrap();
            (row.try_get("version").unwrap(), document.len())
        })
        .collect()
}

async fn execute(db: &TestDb, sql: &str, binds: &[&str]) {
    let mut conn = raw_connection(&db.location).await;
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()));
    for bind in binds {
        query = query.bind(bind.to_string());
    }
    query.execute(&mut conn).await.unwrap();
}

fn titled(id: &str, title: &str) -> Plan {
    let mut plan = Plan::new(id, "goal");
    plan.title = title.into();
    plan
}

/// Creates plan `id` titled `titles[0]`, then writes one version per further title.
async fn create_versions(db: &TestDb, id: &str, titles: &[&str]) {
    db.store
        .create(
            titled(id, titles[0]),
            ReviewState::Draft,
            Review::default(),
            "t",
        )
        .await
        .unwrap();
    for (at, title) in titles.iter().enumerate().skip(1) {
        db.store
            .update(id, titled(id, title), Some(at as u32), "t")
            .await
            .unwrap();
    }
}

async fn documents_are_stored_once(db: TestDb) {
    let store = &db.store;
    create_versions(&db, "p", &["one"]).await;
    // A new plan: its version 1 keeps no copy of the document.
    assert_eq!(stored_documents(&db, "p").await, [(1, 0)]);
    assert_eq!(store.get_version("p", 1).await.unwrap().title, "one");
    let history = store.history("p").await.unwrap();
    assert_eq!(history[0].diff[0]["op"], "add");
    assert_eq!(history[0].diff[0]["value"]["title"], "one");

    for (version, title) in [(1, "two"), (2, "three")] {
        store
            .update("p", titled("p", title), Some(version), "t")
            .await
            .unwrap();
    }
    // Superseded versions got their own copy; the current one still has none.
    let stored = stored_documents(&db, "p").await;
    assert_eq!(stored.len(), 3);
    assert!(stored[0].1 > 0 && stored[1].1 > 0, "{stored:?}");
    assert_eq!(stored[2], (3, 0));
    for (version, title) in [(1, "one"), (2, "two"), (3, "three")] {
        assert_eq!(store.get_version("p", version).await.unwrap().title, title);
    }
    // Version 1 is still read back as the `add` of its own document, not of the current one.
    let history = store.history("p").await.unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(history[0].diff[0]["value"]["title"], "one");
    assert!(
        history[2]
            .diff
            .as_array()
            .unwrap()
            .contains(&json!({"op": "replace", "path": "/title", "value": "three"})),
        "{:?}",
        history[2].diff
    );

    // A step mark is a version too: the one it supersedes keeps its statuses.
    let mut plan = titled("q", "steps");
    plan.steps.push(plansmith_core::Step::new(
        "s1",
        "reply",
        plansmith_core::Action::Reply { text: "hi".into() },
    ));
    store
        .create(plan, ReviewState::Draft, Review::default(), "t")
        .await
        .unwrap();
    store
        .mark_step("q", &StepKey::Index(0), Some("completed"), None, None, "t")
        .await
        .unwrap();
    let status = |plan: Plan| serde_json::to_value(plan.steps[0].status).unwrap();
    assert_eq!(
        status(store.get_version("q", 1).await.unwrap()),
        "not_started"
    );
    assert_eq!(
        status(store.get_version("q", 2).await.unwrap()),
        "completed"
    );
}

both_backends!(
    version_documents_are_stored_once,
    super::documents_are_stored_once
);

async fn rows_with_a_copy_in_every_version_still_work(db: TestDb) {
    let store = &db.store;
    create_versions(&db, "old", &["one"]).await;
    // As a store before this layout wrote it: version 1 has its own copy of the document.
    execute(
        &db,
        "UPDATE plan_versions SET document = (SELECT document FROM plans WHERE id = $1)
         WHERE plan_id = $1",
        &["old"],
    )
    .await;
    let copy = stored_documents(&db, "old").await[0].1;
    assert!(copy > 0);
    store
        .update("old", titled("old", "two"), Some(1), "t")
        .await
        .unwrap();
    assert_eq!(stored_documents(&db, "old").await, [(1, copy), (2, 0)]);
    assert_eq!(store.get_version("old", 1).await.unwrap().title, "one");
    assert_eq!(store.get_version("old", 2).await.unwrap().title, "two");
    assert_eq!(store.history("old").await.unwrap().len(), 2);
}

both_backends!(
    version_documents_written_before_still_work,
    super::rows_with_a_copy_in_every_version_still_work
);

async fn a_lost_document_is_reported(db: TestDb) {
    let store = &db.store;
    create_versions(&db, "bad", &["one", "two"]).await;
    // Version 1 is not current and has lost its document.
    execute(
        &db,
        "UPDATE plan_versions SET document = '' WHERE plan_id = $1 AND version = 1",
        &["bad"],
    )
    .await;
    match store.get_version("bad", 1).await {
        Err(StoreError::Corrupt { id, reason }) => {
            assert_eq!(id, "bad");
            assert!(reason.contains("version 1 keeps no document"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    match store.history("bad").await {
        Err(StoreError::Corrupt { reason, .. }) => {
            assert!(reason.contains("version 1 keeps no document"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // The current version, and writes on top of it, are not affected.
    assert_eq!(store.get_version("bad", 2).await.unwrap().title, "two");
    let written = store
        .update("bad", titled("bad", "three"), Some(2), "t")
        .await
        .unwrap();
    assert_eq!(written.plan.version, 3);
    let value: Value = serde_json::to_value(store.get_version("bad", 2).await.unwrap()).unwrap();
    assert_eq!(value["title"], "two");
}

both_backends!(
    version_document_lost_is_reported,
    super::a_lost_document_is_reported
);

async fn a_newer_schema_is_refused(mut db: TestDb) {
    create_versions(&db, "kept", &["one", "two"]).await;
    // As a later plansmith would leave it: one migration more than this build knows.
    execute(
        &db,
        "INSERT INTO plansmith_migrations (version, name, applied_at)
         VALUES (999, $1, '2030-01-01T00:00:00.000000Z')",
        &["from the future"],
    )
    .await;
    db.store.close().await;
    match plansmith_store::PlanStore::open(&db.location).await {
        Err(err @ StoreError::NewerSchema { found: 999, known }) => {
            assert!(known >= 8, "{known}");
            let message = err.to_string();
            assert!(
                message.contains("migration 999") && message.contains("upgrade plansmith"),
                "{message}"
            );
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    // Nothing was lost: without the newer migration the store opens with its plan.
    execute(
        &db,
        "DELETE FROM plansmith_migrations WHERE version = 999",
        &[],
    )
    .await;
    db.reopen().await;
    assert_eq!(db.store.get_version("kept", 1).await.unwrap().title, "one");
    assert_eq!(db.store.get("kept").await.unwrap().plan.title, "two");
}

both_backends!(newer_schema_is_refused, super::a_newer_schema_is_refused);

/// `submit_plan` answers with the JSON it wrote: encoded as the stored plan is, byte for byte,
/// and as the plan reads back.
async fn a_submitted_plan_encodes_as_stored(db: TestDb) {
    let mut plan = titled("sub", "Café \"quoted\" \u{1F600}\n<tab>\t");
    plan.goal = "ünïcode and \\ backslashes".into();
    let mut request = plansmith_core::PlanRequest::new("Email Bob the weather");
    request.options.allow_recurring = true;
    let review = Review {
        max_iterations: 5,
        ..Review::default()
    };
    let submitted = db
        .store
        .submit_plan(
            plan,
            &plansmith_core::OutcomeStatus::Ready,
            &request,
            review,
            "t",
        )
        .await
        .unwrap();
    let stored = &submitted.stored;
    assert_eq!(stored.state, ReviewState::AwaitingReview);
    assert!(stored.review.schedule_confirmed);
    assert_eq!(stored.plan.version, 1);
    let answer = serde_json::to_string(&submitted).unwrap();
    assert_eq!(answer, serde_json::to_string(stored).unwrap());
    let read_back = db.store.get("sub").await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&answer).unwrap(),
        serde_json::to_value(&read_back).unwrap()
    );
    // Taken ids are refused as `create` refuses them, and nothing is overwritten.
    let again = db
        .store
        .submit_plan(
            titled("sub", "other"),
            &plansmith_core::OutcomeStatus::NeedsInput,
            &request,
            Review::default(),
            "t",
        )
        .await;
    assert!(
        matches!(again, Err(StoreError::AlreadyExists(_))),
        "{again:?}"
    );
    assert_eq!(
        db.store.get("sub").await.unwrap().plan.title,
        stored.plan.title
    );
}

both_backends!(
    submitted_plan_encodes_as_stored,
    super::a_submitted_plan_encodes_as_stored
);
