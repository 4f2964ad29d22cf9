//! Write throughput of each backend: plans created per second, step updates per second (one
//! writer on one plan, and 8 writers on 8 plans), and plans created per second by 64 concurrent
//! callers under group commit (what `plansmith serve` does; 10× the operations).
//!
//! `cargo bench -p plansmith-store --bench throughput` — SQLite always; PostgreSQL when
//! `PLANSMITH_TEST_POSTGRES_URL` names a server (a fresh database is created on it).
//! `PLANSMITH_BENCH_N` sets the operations per measurement (default 1000).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Instant;

use plansmith_core::{Action, Plan, Step};
use plansmith_store::{Location, PlanStore, Review, ReviewState, StepKey};

fn plan(id: &str) -> Plan {
    let mut plan = Plan::new(id, "benchmark");
    plan.title = "Benchmark plan".into();
    plan.owner = Some("bench".into());
    for idx in 0..5 {
        plan.steps.push(Step::new(
            format!("s{}", idx + 1),
            format!("step {idx}"),
            Action::Tool {
                name: "get_weather".into(),
                arguments: serde_json::json!({"city": "Paris"})
                    .as_object()
                    .cloned()
                    .unwrap(),
            },
        ));
    }
    plan
}

/// Creates the plan `id` in `state`.
async fn create(store: &PlanStore, id: &str, state: ReviewState) {
    store
        .create(plan(id), state, Review::default(), "bench")
        .await
        .unwrap();
}

async fn measure(name: &str, store: PlanStore, n: usize) {
    let started = Instant::now();
    for idx in 0..n {
        create(&store, &format!("p{idx}"), ReviewState::Draft).await;
    }
    let creates = n as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    for idx in 0..n {
        store
            .mark_step(
                "p0",
                &StepKey::Index(idx % 5),
                Some(if idx.is_multiple_of(2) {
                    "in_progress"
                } else {
                    "completed"
                }),
                Some(&format!("update {idx}")),
                None,
                "bench",
            )
            .await
            .unwrap();
    }
    let updates = n as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for idx in 0..n / 8 {
                store
                    .mark_step(
                        &format!("p{}", worker + 1),
                        &StepKey::Index(idx % 5),
                        Some("completed"),
                        None,
                        None,
                        "bench",
                    )
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let parallel = (n / 8 * 8) as f64 / started.elapsed().as_secs_f64();
    let grouped = group_commit_creates(&store, n * 10).await;
    println!(
        "{name:<10} creates/s {creates:>8.0} · step updates/s (1 writer) {updates:>8.0} · step updates/s (8 writers, 8 plans) {parallel:>8.0} · group-commit creates/s (64 callers) {grouped:>8.0}   [n = {n}]"
    );
    store.close().await;
}

/// `n` creates from 64 concurrent callers through group commit; plans per second.
async fn group_commit_creates(store: &PlanStore, n: usize) -> f64 {
    const CALLERS: usize = 64;
    let store = store.clone().with_group_commit(256);
    let started = Instant::now();
    let tasks: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let store = store.clone();
            tokio::spawn(async move {
                for idx in 0..n / CALLERS {
                    create(
                        &store,
                        &format!("g{caller}-{idx}"),
                        ReviewState::AwaitingReview,
                    )
                    .await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    (n / CALLERS * CALLERS) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let n: usize = std::env::var("PLANSMITH_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
        .max(8);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = PlanStore::open(&Location::Sqlite(dir.path().join("bench.db")))
            .await
            .unwrap();
        measure("sqlite", store, n).await;
        match std::env::var("PLANSMITH_TEST_POSTGRES_URL") {
            Ok(base) if !base.is_empty() => {
                sqlx::any::install_default_drivers();
                let db = format!("plansmith_bench_{}", uuid::Uuid::new_v4().simple());
                let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&base)
                    .await
                    .unwrap();
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let (scheme, rest) = base.split_once("://").unwrap();
                let authority = rest.split(['/', '?']).next().unwrap();
                let url = format!("{scheme}://{authority}/{db}");
                let store = PlanStore::open(&Location::Postgres(url)).await.unwrap();
                measure("postgres", store, n).await;
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {db}")))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            _ => println!("postgres   not run: set PLANSMITH_TEST_POSTGRES_URL"),
        }
    });
}
