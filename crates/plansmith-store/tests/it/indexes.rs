//! The owner and conversation indexes (migration 5) hold only plans that have one, and the
//! list filters still find their plans through them; the unfiltered list reads its page from
//! the `updated_at` index (migration 6) instead of sorting every plan.

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
        // Five rows: without this PostgreSQL would rightly scan the table.
        sqlx::query("SET enable_seqscan = off")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    for (condition, index) in [
        ("WHERE owner = 'x'", "plans_by_owner_set"),
        ("WHERE conversation_id = 'x'", "plans_by_conversation_set"),
        ("", "plans_by_updated"),
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
        if condition.is_empty() {
            assert!(
                !plan
                    .iter()
                    .any(|line| line.contains("TEMP B-TREE") || line.contains("Sort")),
                "the unfiltered list should not sort: {plan:?}"
            );
        }
    }
}

both_backends!(list_indexes, super::lists_use_their_indexes);
