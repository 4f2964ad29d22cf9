//! The owner, conversation and thread indexes hold only plans that have one, and the list
//! filters still find their plans through them. Every list, filtered or not, reads its page
//! from an index in order (`updated_at`, then `id`; migrations 6 and 7) instead of sorting, and
//! so does a page that starts at a cursor.

use plansmith_core::Plan;
use plansmith_store::{ListFilter, Location, Review, ReviewState};

use crate::support::{TestDb, both_backends, raw_connection};

async fn lists_use_their_indexes(db: TestDb) {
    for (idx, (owner, conversation)) in [
        (None, None),
        (Some("ann"), None),
        (None, Some("c1")),
        (Some("ann"), Some("c1")),
        (Some("bob"), None),
    ]
    .into_iter()
    .enumerate()
    {
        let mut plan = Plan::new(format!("p{idx}"), "goal");
        plan.owner = owner.map(str::to_owned);
        plan.conversation_id = conversation.map(str::to_owned);
        db.store
            .create(plan, ReviewState::Draft, Review::default(), "t")
            .await
            .unwrap();
    }
    let ids = |page: plansmith_store::Page| {
        let mut ids: Vec<String> = page.plans.into_iter().map(|p| p.plan.id).collect();
        ids.sort();
        ids
    };
    let by_owner = ListFilter {
        owner: Some("ann".into()),
        ..ListFilter::default()
    };
    assert_eq!(ids(db.store.list(&by_owner).await.unwrap()), ["p1", "p3"]);
    let by_conversation = ListFilter {
        conversation_id: Some("c1".into()),
        ..ListFilter::default()
    };
    assert_eq!(
        ids(db.store.list(&by_conversation).await.unwrap()),
        ["p2", "p3"]
    );
    let all = db.store.list(&ListFilter::default()).await.unwrap();
    assert_eq!(all.total, 5);
    // Newest first (created one after the other; a tie in time goes to the larger id).
    let order: Vec<&str> = all.plans.iter().map(|p| p.plan.id.as_str()).collect();
    assert_eq!(order, ["p4", "p3", "p2", "p1", "p0"]);

    let explain = match db.location {
        Location::Postgres(_) => "EXPLAIN",
        _ => "EXPLAIN QUERY PLAN",
    };
    let mut conn = raw_connection(&db.location).await;
    if matches!(db.location, Location::Postgres(_)) {
        // Five rows: without these PostgreSQL would rightly scan the table, or take the rows
        // from the index in any order and sort them.
        for setting in ["SET enable_seqscan = off", "SET enable_bitmapscan = off"] {
            sqlx::query(setting).execute(&mut conn).await.unwrap();
        }
    }
    for (condition, index) in [
        ("WHERE owner = 'x'", "plans_by_owner_updated"),
        (
            "WHERE conversation_id = 'x'",
            "plans_by_conversation_updated",
        ),
        ("WHERE thread_id = 'x'", "plans_by_thread_updated"),
        ("WHERE state = 'draft'", "plans_by_state_updated"),
        ("", "plans_by_updated"),
        // A page after a cursor (`PlanStore::list` with `cursor`).
        (
            "WHERE (updated_at, id) < ('2026-01-01T00:00:00.000000Z', 'p')",
            "plans_by_updated",
        ),
        (
            "WHERE state = 'draft' AND (updated_at, id) < ('2026-01-01T00:00:00.000000Z', 'p')",
            "plans_by_state_updated",
        ),
    ] {
        // The list's own query (`PlanStore::list`).
        let sql = format!(
            "{explain} SELECT id FROM plans {condition} ORDER BY updated_at DESC, id DESC LIMIT 50"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&mut conn)
            .await
            .unwrap();
        let plan: Vec<String> = rows
            .iter()
            .map(|row| {
                let last = sqlx::Row::len(row) - 1;
                sqlx::Row::get::<String, _>(row, last)
            })
            .collect();
        assert!(
            plan.iter().any(|line| line.contains(index)),
            "`{condition}` should use {index}: {plan:?}"
        );
        assert!(
            !plan
                .iter()
                .any(|line| line.contains("TEMP B-TREE") || line.contains("Sort")),
            "`{condition}` should read its page in order, not sort: {plan:?}"
        );
    }
}

both_backends!(list_indexes, super::lists_use_their_indexes);
