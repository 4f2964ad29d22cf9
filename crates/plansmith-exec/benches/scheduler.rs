//! Executor figures (a bench command, not criterion: the quantities are wall times of whole
//! runs, a few seconds each).
//!
//! 1. Parallel speed-up: 8 independent steps of a 200 ms command tool vs 1 such step
//!    (goal: ≤ 1.2×).
//! 2. Scheduler overhead per step: 1,000 steps of an instant in-process tool, independent
//!    and as one chain, with the plan document synced as steps end and without.
//!
//! `cargo bench -p plansmith-exec --bench scheduler` (SQLite in a temporary directory;
//! PostgreSQL too when `PLANSMITH_TEST_POSTGRES_URL` is set; `PLANSMITH_BENCH_REPEAT` runs
//! per figure, default 3, the median is printed).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use plansmith_core::{Action, Plan, Step};
use plansmith_exec::{
    CommandInvoker, Endpoint, ExecConfig, Executor, FnInvoker, Invokers, RunReport,
};
use plansmith_store::{Location, PlanStore, Review, ReviewState, RunState};
use serde_json::json;

fn plan(id: &str, n: usize, chain: bool) -> Plan {
    let mut plan = Plan::new(id, "bench");
    for i in 1..=n {
        let mut step = Step::new(
            format!("s{i}"),
            format!("step {i}"),
            Action::Tool {
                name: "t".into(),
                arguments: Default::default(),
            },
        );
        if chain && i > 1 {
            step.depends_on = vec![format!("s{}", i - 1)];
        }
        plan.steps.push(step);
    }
    plan
}

async fn run(
    store: &PlanStore,
    invokers: &Invokers,
    config: &ExecConfig,
    plan: Plan,
) -> (Duration, RunReport) {
    let id = plan.id.clone();
    store
        .create(plan, ReviewState::Accepted, Review::default(), "bench")
        .await
        .unwrap();
    let executor = Executor::new(store.clone(), invokers.clone(), config.clone());
    let began = Instant::now();
    let report = executor.run(&id).await.unwrap();
    let took = began.elapsed();
    assert_eq!(report.state, RunState::Completed, "{report:?}");
    (took, report)
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

async fn figures(store: PlanStore, label: &str, repeat: usize) {
    let mut seq = 0;
    let mut next_id = |prefix: &str| {
        seq += 1;
        format!("{prefix}-{seq}-{}", uuid::Uuid::new_v4().simple())
    };
    let sleeper = Invokers {
        tools: Some(Arc::new(CommandInvoker::new([(
            "t".to_owned(),
            Endpoint::Command {
                command: vec![
                    "sh".into(),
                    "-c".into(),
                    "cat >/dev/null; sleep 0.2; echo '{}'".into(),
                ],
                env: Default::default(),
                cwd: None,
                timeout_ms: None,
            },
        )]))),
        ..Invokers::default()
    };
    let mut config = ExecConfig::new("bench");
    config.concurrency = 8;
    config.poll_interval = Duration::from_millis(20);
    let mut one = Vec::new();
    let mut eight = Vec::new();
    for _ in 0..repeat {
        one.push(
            run(&store, &sleeper, &config, plan(&next_id("one"), 1, false))
                .await
                .0,
        );
        eight.push(
            run(&store, &sleeper, &config, plan(&next_id("eight"), 8, false))
                .await
                .0,
        );
    }
    let (one, eight) = (median(one), median(eight));
    println!(
        "[{label}] 8 × 200 ms steps, concurrency 8: {:.0} ms; 1 step: {:.0} ms; ratio {:.2}×",
        eight.as_secs_f64() * 1e3,
        one.as_secs_f64() * 1e3,
        eight.as_secs_f64() / one.as_secs_f64()
    );

    let instant = Invokers {
        tools: Some(Arc::new(FnInvoker::new(|_| Ok(json!({"ok": true}))))),
        ..Invokers::default()
    };
    for (shape, chain) in [("independent", false), ("chain", true)] {
        for sync in [true, false] {
            let mut config = config.clone();
            config.sync_document = sync;
            let mut times = Vec::new();
            let mut versions = 0;
            for _ in 0..repeat {
                let (took, report) = run(
                    &store,
                    &instant,
                    &config,
                    plan(&next_id(shape), 1000, chain),
                )
                .await;
                versions = store.history(&report.plan_id).await.unwrap().len();
                times.push(took);
            }
            let took = median(times);
            println!(
                "[{label}] 1,000 instant steps, {shape}, document sync {}: {:.0} ms total, {:.2} ms/step ({} plan versions)",
                if sync { "on" } else { "off" },
                took.as_secs_f64() * 1e3,
                took.as_secs_f64() * 1e3 / 1000.0,
                versions
            );
        }
    }
}

fn main() {
    let repeat: usize = std::env::var("PLANSMITH_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = PlanStore::open(&Location::Sqlite(dir.path().join("bench.db")))
            .await
            .unwrap();
        figures(store, "sqlite", repeat).await;
        if let Ok(url) = std::env::var("PLANSMITH_TEST_POSTGRES_URL") {
            let store = PlanStore::open(&Location::Postgres(url)).await.unwrap();
            figures(store, "postgres", repeat).await;
        }
    });
}
