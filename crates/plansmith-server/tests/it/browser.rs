//! The review page in headless Chromium, driven by two scripts:
//!
//! * `scripts/review-page.mjs`: page through the plans list (56 plans, 50 to a page) and filter
//!   it by state, open a plan and answer its question with the keyboard alone (the focus stays
//!   in the plan after the redraw; the replanning streams in, step by step), read what each
//!   step does (the tool it calls, the reply's words; every kind of step), edit an argument
//!   and see the diagnostic, remove steps (one refused: another depends on it), ask for changes
//!   in free text (replanned), keep typing through another reviewer's edit, accept (the plan is
//!   no longer offered for editing), watch a step status arrive live (in the step list and on
//!   the DAG), make a new plan whose steps stream in over SSE.
//! * `scripts/review-page-reconnect.mjs`: with API tokens, enter a token, see that owner's
//!   plans (and a plan made elsewhere join the list), follow one live; the server restarts
//!   while a step changes, and the page reconnects and shows the change; a deletion stops the
//!   following.
//! * `scripts/review-page-run.mjs`: run an accepted plan from the page on a server with an
//!   executor; a step's result shows, a step that needs approval waits with its buttons (and
//!   no "Run" is offered, also after the page is reloaded), the approval resumes the run, and
//!   the run completes with every result shown.
//!
//! All three audit the page with axe-core (WCAG 2.1 A and AA, axe's best practices) at seven
//! states between them, and fail on any violation. Screenshots go to
//! `target/review-page-screenshots/`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use plansmith_core::{LanguageModel, ScriptedModel};
use plansmith_server::{AppState, ServerConfig, ShutdownOutcome};
use plansmith_store::{Location, PlanStore};
use reqwest::Method;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{Server, app_state, call, create, reply, root, start_with};

/// Where Playwright and Chromium are (`PLANSMITH_TEST_PLAYWRIGHT`, `PLANSMITH_TEST_CHROMIUM`);
/// `None` (the test is not run, and says so) outside CI when they are not set.
fn browser_env(test: &str) -> Option<(String, String)> {
    let (Ok(playwright), Ok(chromium)) = (
        std::env::var("PLANSMITH_TEST_PLAYWRIGHT"),
        std::env::var("PLANSMITH_TEST_CHROMIUM"),
    ) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but PLANSMITH_TEST_PLAYWRIGHT / PLANSMITH_TEST_CHROMIUM are not set (.ci/setup.d/40-browser.sh)"
        );
        println!("NOTE: {test} NOT RUN (run scripts/browser-setup.sh and export its env)");
        return None;
    };
    Some((playwright, chromium))
}

/// Runs `scripts/NAME` in node with these arguments and the browser `env`; fails the test when
/// it fails or takes over 90 s.
async fn run_page_script(name: &str, args: &[&str], env: &(String, String)) {
    let mut child = tokio::process::Command::new("node")
        .arg(root().join("scripts").join(name))
        .args(args)
        .env("PLANSMITH_TEST_PLAYWRIGHT", &env.0)
        .env("PLANSMITH_TEST_CHROMIUM", &env.1)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(90), child.wait())
        .await
        .unwrap_or_else(|_| panic!("scripts/{name} took over 90 s"))
        .unwrap();
    assert!(status.success(), "scripts/{name} failed");
}

fn screenshots() -> std::path::PathBuf {
    let shots = root().join("target/review-page-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

#[tokio::test]
async fn review_page_in_headless_chromium() {
    let Some(env) = browser_env("review page browser test") else {
        return;
    };
    // 55 older plans (so the list has a second page), the plan the page works on, the answer's
    // replan, the free-text edit's replan, then the plan the page creates over SSE
    let mut turns = reply("weather-email.json", 55);
    turns.extend(reply("missing-recipient.json", 1));
    turns.extend(reply("weather-email.json", 3));
    // The list's total stops at 55 of the 56 plans: the page shows "55+".
    let mut config = ServerConfig::default();
    config.list_total_cap = 55;
    // Streaming, as a provider's model does: the page shows the model's text as it comes.
    let model = ScriptedModel::new(turns).streaming(16);
    let s = start_with(Arc::new(model), config).await;
    for _ in 0..55 {
        create(&s, None).await;
    }
    let request = crate::needs_input();
    let (status, created) = call(&s, Method::POST, "/v1/plans", Some(request), None).await;
    assert_eq!(status, 201, "{created}");
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let shots = screenshots();
    run_page_script(
        "review-page.mjs",
        &[&s.base, &id, &shots.display().to_string()],
        &env,
    )
    .await;
    let (_, plan) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(plan["state"], "accepted");
    assert_eq!(plan["plan"]["steps"][0]["status"], "in_progress");
    let (_, page) = call(&s, Method::GET, "/v1/plans?exact_total=true", None, None).await;
    assert_eq!(page["total"], 57, "the page created one more plan: {page}");
    for name in [
        "1-question.png",
        "2-diagnostic.png",
        "3-live-status.png",
        "4-streamed-plan-dag.png",
    ] {
        assert!(shots.join(name).metadata().unwrap().len() > 1000, "{name}");
    }
}

/// Serves `state` until `stop` is sent (a graceful shutdown, as on SIGTERM).
fn serve_until(
    listener: tokio::net::TcpListener,
    state: AppState,
) -> (
    oneshot::Sender<()>,
    JoinHandle<std::io::Result<ShutdownOutcome>>,
) {
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(plansmith_server::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    (stop, served)
}

#[tokio::test]
async fn review_page_follows_a_plan_with_a_token_across_a_restart() {
    let Some((playwright, chromium)) = browser_env("review page reconnect test") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let location = Location::Sqlite(dir.path().join("plans.db"));
    let config = || crate::tokens(&[("alice-token", "alice"), ("bob-token", "bob")]);
    let model = || -> Arc<dyn LanguageModel> {
        // alice's plan and bob's, then the one the page sees join its list
        Arc::new(ScriptedModel::new(reply("weather-email.json", 3)))
    };
    let store = PlanStore::open(&location).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let (stop, served) = serve_until(listener, app_state(store.clone(), model(), config()));
    let s = Server::at(addr, dir);
    let alice = create(&s, Some("alice-token")).await;
    create(&s, Some("bob-token")).await;
    let id = alice["stored"]["plan"]["id"].as_str().unwrap().to_owned();

    let mut child = tokio::process::Command::new("node")
        .arg(root().join("scripts/review-page-reconnect.mjs"))
        .arg(&s.base)
        .arg(&id)
        .arg("alice-token")
        .arg(screenshots())
        .env("PLANSMITH_TEST_PLAYWRIGHT", playwright)
        .env("PLANSMITH_TEST_CHROMIUM", chromium)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut to_page = child.stdin.take().unwrap();
    let mut from_page = BufReader::new(child.stdout.take().unwrap()).lines();
    let said = tokio::time::timeout(Duration::from_secs(60), from_page.next_line())
        .await
        .expect("the page did not ask for the restart within 60 s")
        .unwrap();
    assert_eq!(
        said.as_deref(),
        Some("restart"),
        "the page script stopped early"
    );

    // The server stops (its event streams end) ...
    stop.send(()).unwrap();
    let outcome = served.await.unwrap().unwrap();
    assert_eq!(outcome, ShutdownOutcome::Drained);
    // ... s2 is completed while no server runs, so no event can tell the page ...
    crate::complete_in_store(&store, &id, 1).await;
    store.close().await;
    // ... and a new server starts on the same address and store file.
    let store = PlanStore::open(&location).await.unwrap();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let _server = serve_until(listener, app_state(store, model(), config()));
    to_page.write_all(b"restarted\n").await.unwrap();
    to_page.flush().await.unwrap();

    let status = tokio::time::timeout(Duration::from_secs(90), child.wait())
        .await
        .expect("the browser test took over 90 s")
        .unwrap();
    assert!(status.success(), "scripts/review-page-reconnect.mjs failed");
    assert_eq!(
        from_page.next_line().await.unwrap().as_deref(),
        Some("review page across a restart: OK")
    );
    let (status, _) = call(
        &s,
        Method::GET,
        &format!("/v1/plans/{id}"),
        None,
        Some("alice-token"),
    )
    .await;
    assert_eq!(status, 404, "the page deleted the plan");
    for name in ["5-reconnecting.png", "6-reconnected.png"] {
        assert!(
            screenshots().join(name).metadata().unwrap().len() > 1000,
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_page_runs_a_plan_and_takes_an_approval() {
    let Some(env) = browser_env("review page run test") else {
        return;
    };
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (s, store) = crate::run::start_with(calls.clone(), vec!["s2".to_owned()], true).await;
    let mut request = crate::weather();
    request["auto_accept"] = true.into();
    let (status, created) = call(&s, Method::POST, "/v1/plans", Some(request), None).await;
    assert_eq!(status, 201, "{created}");
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    // The same plan under a second id, for the page to run and stop (the scripted model plans
    // once).
    let mut copy = store.get(&id).await.unwrap().plan;
    copy.id = format!("{id}-stop");
    let stop_id = copy.id.clone();
    store
        .create(
            copy,
            plansmith_store::ReviewState::Accepted,
            plansmith_store::Review::default(),
            "test",
        )
        .await
        .unwrap();
    let shots = screenshots();
    run_page_script(
        "review-page-run.mjs",
        &[&s.base, &id, &shots.display().to_string(), &stop_id],
        &env,
    )
    .await;
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls[1].starts_with("send_email") && calls[1].contains("Sunny, 21 °C"),
        "{calls:?}"
    );
    assert!(
        calls[2].starts_with("get_weather"),
        "the stopped run sent no email: {calls:?}"
    );
    let run = store.exec_run(&stop_id).await.unwrap().unwrap();
    assert_eq!(run.state, plansmith_store::RunState::Aborted);
    for name in ["7-approval.png", "8-run-completed.png", "9-run-stopped.png"] {
        assert!(shots.join(name).metadata().unwrap().len() > 1000, "{name}");
    }
}
