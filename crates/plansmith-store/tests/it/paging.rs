//! Paging the plan list with cursors: pages in the list's order (`updated_at DESC, id DESC`,
//! ties broken by id), filters kept, plans updated meanwhile not shifting the pages, and bad
//! cursors refused with their own error. The list's total, counted in full or up to a cap.

use plansmith_core::Plan;
use plansmith_store::{ListFilter, Page, Review, ReviewState, StoreError};

use crate::support::{TestDb, both_backends, raw_connection};

fn ids(page: &Page) -> Vec<String> {
    page.plans.iter().map(|p| p.plan.id.clone()).collect()
}

/// Every page from the first, following `next_cursor`; checks each page's own fields.
async fn walk(db: &TestDb, filter: &ListFilter) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let page = db
            .store
            .list(&ListFilter {
                cursor: cursor.clone(),
                ..filter.clone()
            })
            .await
            .unwrap();
        assert!(page.plans.len() <= filter.limit.unwrap_or(50) as usize);
        if cursor.is_some() {
            assert_eq!(
                page.next_offset, None,
                "a page by cursor has no next offset"
            );
        }
        pages.push(ids(&page));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return pages,
        }
        assert!(pages.len() < 20, "the walk does not end: {pages:?}");
    }
}

/// Plans p0…p6, created in that order; the odd ones are ann's.
async fn seven_plans(db: &TestDb) {
    for idx in 0..7 {
        let mut plan = Plan::new(format!("p{idx}"), "goal");
        if idx % 2 == 1 {
            plan.owner = Some("ann".into());
        }
        db.store
            .create(plan, ReviewState::Draft, Review::default(), "t")
            .await
            .unwrap();
    }
}

async fn cursor_pages(db: TestDb) {
    seven_plans(&db).await;
    // Three plans updated at the same instant, long ago: their order is by id alone.
    let mut conn = raw_connection(&db.location).await;
    sqlx::query(
        "UPDATE plans SET updated_at = '2026-01-01T00:00:00.000000Z'
         WHERE id IN ('p2', 'p3', 'p4')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let all = db.store.list(&ListFilter::default()).await.unwrap();
    assert_eq!(ids(&all), ["p6", "p5", "p1", "p0", "p4", "p3", "p2"]);
    assert_eq!(all.next_cursor, None, "one page holds them all");

    let by_two = ListFilter {
        limit: Some(2),
        ..ListFilter::default()
    };
    assert_eq!(
        walk(&db, &by_two).await,
        [
            vec!["p6", "p5"],
            vec!["p1", "p0"],
            vec!["p4", "p3"],
            vec!["p2"]
        ]
    );
    // An exact fit: the last full page says there is no next one.
    let by_seven = ListFilter {
        limit: Some(7),
        ..ListFilter::default()
    };
    assert_eq!(walk(&db, &by_seven).await.len(), 1);
    let anns = ListFilter {
        owner: Some("ann".into()),
        limit: Some(1),
        ..ListFilter::default()
    };
    assert_eq!(walk(&db, &anns).await, [vec!["p5"], vec!["p1"], vec!["p3"]]);
    // The first page by offset still says where the next starts, both ways.
    let first = db.store.list(&by_two).await.unwrap();
    assert_eq!(first.next_offset, Some(2));
    assert!(first.next_cursor.is_some());

    // A plan updated while paging moves to the front; the pages after the cursor neither skip
    // nor repeat any other plan (paging by offset would skip one here).
    let page1 = db.store.list(&by_two).await.unwrap();
    assert_eq!(ids(&page1), ["p6", "p5"]);
    let p3 = db.store.get("p3").await.unwrap();
    db.store
        .update("p3", p3.plan.clone(), None, "t")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let mut cursor = page1.next_cursor;
    while let Some(at) = cursor {
        let page = db
            .store
            .list(&ListFilter {
                cursor: Some(at),
                ..by_two.clone()
            })
            .await
            .unwrap();
        rest.extend(ids(&page));
        cursor = page.next_cursor;
    }
    assert_eq!(rest, ["p1", "p0", "p4", "p2"]);
    let again = db.store.list(&by_two).await.unwrap();
    assert_eq!(ids(&again), ["p3", "p6"]);

    // Cursors no page gave out.
    for (cursor, offset) in [
        ("garbage", 0),
        ("2026-01-01T00:00:00Z_p3", 0),
        ("2026-13-01T00:00:00.000000Z_p3", 0),
        ("2026-01-01T00:00:00.000000Z_", 0),
        ("2026-01-01T00:00:00.000000Z_p3", 2),
    ] {
        let err = db
            .store
            .list(&ListFilter {
                cursor: Some(cursor.into()),
                offset,
                ..ListFilter::default()
            })
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::BadCursor(_)),
            "`{cursor}` (offset {offset}): {err}"
        );
    }
    // A well-formed cursor is a place in the order, whether or not its plan still exists.
    let after = db
        .store
        .list(&ListFilter {
            cursor: Some("2026-01-01T00:00:00.000000Z_p35".into()),
            ..ListFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&after), ["p2"]);
}

both_backends!(list_cursor_pages, super::cursor_pages);

/// `total_cap`: the count stops one past the cap and says it is not exact; under the cap, or
/// without one, it is the exact count. With a filter, what is counted is what matches it.
async fn capped_totals(db: TestDb) {
    seven_plans(&db).await;
    let cases: [(Option<&str>, Option<u64>, u64, bool); 8] = [
        (None, None, 7, true),
        (None, Some(0), 0, false),
        (None, Some(5), 5, false),
        (None, Some(6), 6, false),
        (None, Some(7), 7, true),
        (None, Some(u64::MAX), 7, true),
        (Some("ann"), Some(2), 2, false),
        (Some("ann"), Some(3), 3, true),
    ];
    for (owner, total_cap, total, exact) in cases {
        let page = db
            .store
            .list(&ListFilter {
                owner: owner.map(str::to_owned),
                limit: Some(2),
                total_cap,
                ..ListFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(
            (page.total, page.total_exact),
            (total, exact),
            "owner {owner:?}, cap {total_cap:?}"
        );
        assert_eq!(page.plans.len(), 2, "the cap does not change the page");
    }
}

both_backends!(list_capped_totals, super::capped_totals);
