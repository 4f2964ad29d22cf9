//! Crash safety: a child process (this test binary, re-invoked) streams acknowledged writes and
//! is killed with SIGKILL mid-stream; every acknowledged write must then be in the store, and
//! SQLite's `PRAGMA integrity_check` must say `ok`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plansmith_core::{Action, Plan, Step};
use plansmith_store::{Location, PlanStore, Review, ReviewState, StepKey};

use crate::support::{TestDb, both_backends};

const CHILD_VAR: &str = "PLANSMITH_STORE_CRASH_CHILD";
/// Acknowledgements to wait for before the kill.
const KILL_AFTER: usize = 120;

fn url(location: &Location) -> String {
    match location {
        Location::Sqlite(path) => format!("sqlite:{}", path.display()),
        Location::Postgres(url) => url.clone(),
        other => panic!("unknown location {other}"),
    }
}

/// The child: only does something when started by `killed_writer` with `CHILD_VAR` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_writer() {
    let Ok(location) = std::env::var(CHILD_VAR) else {
        return;
    };
    let store = PlanStore::open_str(&location).await.unwrap();
    let mut plan = Plan::new("crash-main", "survive a crash");
    plan.steps.push(Step::new(
        "s1",
        "keep writing",
        Action::Reply { text: "x".into() },
    ));
    store
        .create(plan, ReviewState::Accepted, Review::default(), "child")
        .await
        .unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ack version 1").unwrap();
    out.flush().unwrap();
    let started = Instant::now();
    let mut idx = 0u64;
    // Bounded so an orphaned child cannot run forever.
    while started.elapsed() < Duration::from_secs(120) {
        idx += 1;
        if idx.is_multiple_of(3) {
            let id = format!("crash-{idx}");
            store
                .create(
                    Plan::new(id.clone(), "extra"),
                    ReviewState::Draft,
                    Review::default(),
                    "child",
                )
                .await
                .unwrap();
            writeln!(out, "ack create {id}").unwrap();
        } else {
            let stored = store
                .mark_step(
                    "crash-main",
                    &StepKey::Index(0),
                    None,
                    Some(&format!("note {idx}")),
                    None,
                    "child",
                )
                .await
                .unwrap();
            writeln!(out, "ack version {} note {idx}", stored.version()).unwrap();
        }
        out.flush().unwrap();
    }
}

async fn killed_writer(db: TestDb) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "crash::child_writer",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, url(&db.location))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut acks: Vec<String> = Vec::new();
    while acks.len() < KILL_AFTER {
        match lines.next() {
            Some(line) => {
                let line = line.unwrap();
                if line.starts_with("ack ") {
                    acks.push(line);
                }
            }
            None => panic!("the child stopped before the kill; acks: {acks:?}"),
        }
    }
    // SIGKILL: no destructors, no flush, no checkpoint.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child must have been killed");
    // Whatever the child printed before it died was acknowledged too.
    for line in lines {
        let line = line.unwrap();
        if line.starts_with("ack ") {
            acks.push(line);
        }
    }

    let mut db = db;
    db.reopen().await;
    let store = &db.store;
    assert_eq!(store.integrity_check().await.unwrap(), "ok");
    let main = store.get("crash-main").await.unwrap();
    let mut n_versions = 0;
    let mut n_creates = 0;
    for ack in &acks {
        let words: Vec<&str> = ack.split_whitespace().collect();
        match words.as_slice() {
            ["ack", "version", version, rest @ ..] => {
                let version: u32 = version.parse().unwrap();
                assert!(main.version() >= version, "acked version {version} lost");
                let plan = store.get_version("crash-main", version).await.unwrap();
                if let ["note", idx] = rest {
                    assert_eq!(plan.steps[0].notes, format!("note {idx}"), "{ack}");
                }
                n_versions += 1;
            }
            ["ack", "create", id] => {
                store.get(id).await.unwrap();
                n_creates += 1;
            }
            _ => panic!("unexpected line {ack}"),
        }
    }
    let history = store.history("crash-main").await.unwrap();
    for (idx, record) in history.iter().enumerate() {
        assert_eq!(record.version as usize, idx + 1);
    }
    eprintln!(
        "{:?}: killed after {} acks ({n_versions} versions, {n_creates} creates); store at v{}",
        store.backend(),
        acks.len(),
        main.version()
    );
    // The store still takes writes.
    store
        .mark_step(
            "crash-main",
            &StepKey::Index(0),
            Some("completed"),
            None,
            None,
            "after",
        )
        .await
        .unwrap();
}

both_backends!(sigkill_mid_stream, super::killed_writer);
