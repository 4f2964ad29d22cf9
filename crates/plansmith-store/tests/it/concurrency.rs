//! Compare-and-swap under contention, on both backends.

use std::collections::BTreeSet;

use plansmith_core::{Action, Plan, Step, StepStatus};
use plansmith_store::{PlanStore, Review, ReviewState, StepKey, StoreError};

use crate::support::{TestDb, both_backends};

const N_WRITERS: usize = 24;

async fn plan_with_steps(store: &PlanStore, id: &str) {
    let mut plan = Plan::new(id, "many workers");
    for idx in 0..N_WRITERS {
        plan.steps.push(Step::new(
            format!("s{}", idx + 1),
            format!("step {idx}"),
            Action::Reply {
                text: format!("{idx}"),
            },
        ));
    }
    store
        .create(plan, ReviewState::Accepted, Review::default(), "setup")
        .await
        .unwrap();
}

/// Every task marks its own step, retrying on conflict: all land, none is lost, and the
/// versions they got are distinct and form the history 1..=N+1.
async fn workers_retrying_on_conflict(db: TestDb) {
    let store = db.store.clone();
    plan_with_steps(&store, "busy").await;
    let mut tasks = Vec::new();
    for idx in 0..N_WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0u32;
            loop {
                let seen = store.get("busy").await.unwrap().version();
                let result = store
                    .mark_step(
                        "busy",
                        &StepKey::Index(idx),
                        Some("completed"),
                        Some(&format!("worker {idx}")),
                        Some(seen),
                        &format!("worker-{idx}"),
                    )
                    .await;
                match result {
                    Ok(stored) => return (stored.version(), conflicts),
                    Err(StoreError::Conflict {
                        expected, actual, ..
                    }) => {
                        assert!(actual > expected, "a conflict means someone moved ahead");
                        conflicts += 1;
                    }
                    Err(other) => panic!("worker {idx}: neither landed nor conflicted: {other}"),
                }
            }
        }));
    }
    let mut versions = BTreeSet::new();
    let mut n_conflicts = 0;
    for task in tasks {
        let (version, conflicts) = task.await.unwrap();
        assert!(
            versions.insert(version),
            "two writers got version {version}"
        );
        n_conflicts += conflicts;
    }
    let expected: BTreeSet<u32> = (2..=(N_WRITERS as u32 + 1)).collect();
    assert_eq!(versions, expected);
    let final_plan = store.get("busy").await.unwrap();
    assert_eq!(final_plan.version(), N_WRITERS as u32 + 1);
    for (idx, step) in final_plan.plan.steps.iter().enumerate() {
        assert_eq!(step.status, StepStatus::Completed, "step {idx} lost");
        assert_eq!(step.notes, format!("worker {idx}"), "step {idx} notes lost");
    }
    let history = store.history("busy").await.unwrap();
    assert_eq!(history.len(), N_WRITERS + 1);
    for pair in history.windows(2) {
        assert_eq!(pair[1].version, pair[0].version + 1);
        assert_eq!(pair[1].parent_version, Some(pair[0].version));
        assert_eq!(pair[1].trigger, plansmith_store::Trigger::StepUpdate);
        // Each step update changed exactly one step: its status and notes.
        let ops = pair[1].diff.as_array().unwrap();
        let touched: BTreeSet<&str> = ops
            .iter()
            .filter_map(|op| op["path"].as_str())
            .filter(|p| p.starts_with("/steps/"))
            .map(|p| p.split('/').nth(2).unwrap())
            .collect();
        assert_eq!(touched.len(), 1, "diff {:?}", pair[1].diff);
    }
    eprintln!(
        "{:?}: {N_WRITERS} writers, {n_conflicts} conflicts retried",
        store.backend()
    );
}

/// All tasks write on the same version they all read: exactly one lands, every other gets a
/// conflict naming the version that won.
async fn stale_writers_conflict(db: TestDb) {
    let store = db.store.clone();
    plan_with_steps(&store, "race").await;
    let mut tasks = Vec::new();
    for idx in 0..N_WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .mark_step(
                    "race",
                    &StepKey::Index(idx),
                    Some("in_progress"),
                    None,
                    Some(1),
                    "racer",
                )
                .await
        }));
    }
    let mut landed = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(stored) => {
                assert_eq!(stored.version(), 2);
                landed += 1;
            }
            Err(StoreError::Conflict {
                expected: 1,
                actual: 2,
                ..
            }) => {}
            Err(other) => panic!("neither landed nor conflicted: {other}"),
        }
    }
    assert_eq!(landed, 1);
    let stored = store.get("race").await.unwrap();
    assert_eq!(stored.version(), 2);
    let n_in_progress = stored
        .plan
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::InProgress)
        .count();
    assert_eq!(n_in_progress, 1, "exactly the winner's change is stored");
}

both_backends!(retrying_writers, super::workers_retrying_on_conflict);
both_backends!(stale_writers, super::stale_writers_conflict);

/// Many processes opening the same fresh database at once (two `plansmith serve` starting
/// together once failed on PostgreSQL): every open succeeds and the schema is migrated once.
async fn concurrent_opens_migrate_once(location: plansmith_store::Location) {
    const N_OPENS: usize = 8;
    // Each open is its own pool, as in separate processes; all start together.
    let opens = (0..N_OPENS).map(|_| {
        let location = location.clone();
        tokio::spawn(async move { PlanStore::open(&location).await })
    });
    let mut stores = Vec::new();
    for result in futures::future::join_all(opens).await {
        stores.push(result.unwrap().expect("a concurrent open failed"));
    }
    // All of them work on the one schema.
    let first = &stores[0];
    first
        .create(
            Plan::new("shared", "opened together"),
            ReviewState::Draft,
            Review::default(),
            "t",
        )
        .await
        .unwrap();
    for store in &stores {
        assert_eq!(store.get("shared").await.unwrap().version(), 1);
    }
    let mut conn = crate::support::raw_connection(&location).await;
    let row = sqlx::query("SELECT COUNT(*), COUNT(DISTINCT version) FROM plansmith_migrations")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let (n, distinct): (i64, i64) = (sqlx::Row::get(&row, 0), sqlx::Row::get(&row, 1));
    assert!(
        n >= 1 && n == distinct,
        "each migration recorded once: {n} rows, {distinct} versions"
    );
    for store in stores {
        store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_opens_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    concurrent_opens_migrate_once(plansmith_store::Location::Sqlite(dir.path().join("p.db"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_opens_postgres() {
    let Some(base) = crate::support::postgres_url("concurrent_opens_postgres") else {
        return;
    };
    let url = crate::support::fresh_postgres_url(&base).await;
    concurrent_opens_migrate_once(plansmith_store::Location::Postgres(url)).await;
}

/// Group commit (what `plansmith serve` uses): many concurrent creates, some with the same id,
/// land in shared transactions; every distinct id is stored exactly once with its version 1,
/// and of the same-id creates exactly one succeeds while the others are told the id is taken.
async fn group_commit_creates(db: TestDb) {
    let store = db.store.clone().with_group_commit(16);
    let mut tasks = Vec::new();
    for idx in 0..120 {
        let store = store.clone();
        // Every tenth create reuses the id "dup".
        let id = if idx % 10 == 0 {
            "dup".to_owned()
        } else {
            format!("g{idx}")
        };
        tasks.push(tokio::spawn(async move {
            let mut plan = Plan::new(id.clone(), format!("plan {idx}"));
            plan.title = format!("title {idx}");
            let result = store
                .create(plan, ReviewState::Accepted, Review::default(), "group")
                .await;
            (id, result)
        }));
    }
    let (mut stored, mut taken) = (BTreeSet::new(), 0);
    for task in tasks {
        match task.await.unwrap() {
            (id, Ok(plan)) => {
                assert_eq!(plan.plan.id, id);
                assert_eq!(plan.version(), 1);
                assert!(stored.insert(id.clone()), "{id} stored twice");
            }
            (id, Err(StoreError::AlreadyExists(taken_id))) => {
                assert_eq!(id, "dup");
                assert_eq!(taken_id, "dup");
                taken += 1;
            }
            (id, Err(other)) => panic!("{id}: {other}"),
        }
    }
    assert_eq!(taken, 11, "12 creates of `dup`, one lands");
    assert_eq!(stored.len(), 109);
    // Every column lands where it belongs (the batches are multi-row INSERTs).
    for id in &stored {
        let plan = store.get(id).await.unwrap();
        assert_eq!(plan.version(), 1);
        assert_eq!(plan.state, ReviewState::Accepted);
        let title = plan.plan.title.clone();
        if id != "dup" {
            assert_eq!(title, format!("title {}", &id[1..]));
            assert_eq!(plan.plan.goal, format!("plan {}", &id[1..]));
        }
        assert_eq!(store.get_version(id, 1).await.unwrap().title, title);
        let history = store.history(id).await.unwrap();
        assert_eq!(history.len(), 1, "{id}");
        assert_eq!(history[0].trigger, plansmith_store::Trigger::Created);
        assert_eq!(history[0].actor, "group");
        assert_eq!(history[0].parent_version, None);
        assert_eq!(history[0].diff[0]["value"]["title"], title.as_str());
    }
    let page = store
        .list(&plansmith_store::ListFilter::default())
        .await
        .unwrap();
    assert_eq!(page.total, 109);
}

both_backends!(group_commit, super::group_commit_creates);

/// Group commit beside the store's other writes: on SQLite the group writer has a connection
/// of its own, and SQLite lets one writer in at a time, so creates in batches and step updates
/// through the pool take turns on the file's write lock. Every one of them lands (none fails
/// with "database is locked"), and each plan reads back whole.
async fn group_commit_beside_pool_writes(db: TestDb) {
    let store = db.store.clone().with_group_commit(8);
    plan_with_steps(&store, "marked").await;
    let creates = (0..200).map(|idx| {
        let store = store.clone();
        tokio::spawn(async move {
            let plan = Plan::new(format!("b{idx}"), format!("beside {idx}"));
            store
                .create(plan, ReviewState::Accepted, Review::default(), "group")
                .await
                .map(|_| ())
        })
    });
    let creates: Vec<_> = creates.collect();
    for idx in 0..N_WRITERS {
        let step = StepKey::Id(format!("s{}", idx + 1));
        store
            .mark_step("marked", &step, Some("completed"), None, None, "pool")
            .await
            .unwrap();
    }
    for create in creates {
        create.await.unwrap().unwrap();
    }
    let marked = store.get("marked").await.unwrap();
    assert_eq!(marked.version(), 1 + N_WRITERS as u32);
    assert!(
        marked
            .plan
            .steps
            .iter()
            .all(|step| step.status == StepStatus::Completed)
    );
    for idx in [0, 99, 199] {
        let plan = store.get(&format!("b{idx}")).await.unwrap();
        assert_eq!(plan.plan.goal, format!("beside {idx}"));
        assert_eq!(store.history(&plan.plan.id).await.unwrap().len(), 1);
    }
    let page = store
        .list(&plansmith_store::ListFilter::default())
        .await
        .unwrap();
    assert_eq!(page.total, 201);
}

both_backends!(group_commit_beside, super::group_commit_beside_pool_writes);

/// SQLite under group commit: the WAL is copied into the database file in the background as
/// plans are written (without it, the copying happened only inside the writer, past 1000 WAL
/// pages, stalling every caller of that batch). 320 small plans in full batches stay well
/// under SQLite's own 1000-page threshold, so only the background checkpoint can grow the
/// database file; and everything written is still read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_checkpoints_sqlite_in_the_background() {
    let db = crate::support::sqlite().await;
    let plansmith_store::Location::Sqlite(path) = db.location.clone() else {
        unreachable!("a SQLite test database");
    };
    let store = db.store.clone().with_group_commit(64);
    let before = std::fs::metadata(&path).unwrap().len();
    let creates = (0..320).map(|idx| {
        let store = store.clone();
        async move {
            let mut plan = Plan::new(format!("c{idx}"), "checkpointed");
            plan.thought = "x".repeat(600);
            store
                .create(plan, ReviewState::Accepted, Review::default(), "group")
                .await
                .unwrap();
        }
    });
    futures::future::join_all(creates).await;
    let wal = path.with_extension("db-wal");
    let wal_size = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert!(
        wal_size < 1000 * 4096,
        "the test must stay under SQLite's own threshold: {wal_size}"
    );
    let mut after = before;
    for _ in 0..100 {
        after = std::fs::metadata(&path).unwrap().len();
        if after >= before + 320 * 600 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        after >= before + 320 * 600,
        "the database file grew from {before} to {after} bytes only; the WAL holds {wal_size}"
    );
    assert_eq!(store.get("c319").await.unwrap().plan.thought.len(), 600);
}
