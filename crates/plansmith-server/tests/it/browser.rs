//! The review page in headless Chromium (driven by `scripts/review-page.mjs`): page through the
//! plans list (56 plans, 50 to a page) and filter it by state, open a plan,
//! answer its question (and see the replanning stream in, step by step), edit an argument and
//! see the diagnostic, accept, watch a step status
//! arrive live (in the step list and on the DAG), make a new plan whose steps stream in over
//! SSE. Screenshots go to `target/review-page-screenshots/`.

use std::time::Duration;

use reqwest::Method;

use crate::{call, create, reply, root, start};
use plansmith_server::ServerConfig;

#[tokio::test]
async fn review_page_in_headless_chromium() {
    let (Ok(playwright), Ok(chromium)) = (
        std::env::var("PLANSMITH_TEST_PLAYWRIGHT"),
        std::env::var("PLANSMITH_TEST_CHROMIUM"),
    ) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but PLANSMITH_TEST_PLAYWRIGHT / PLANSMITH_TEST_CHROMIUM are not set (.ci/setup.d/40-browser.sh)"
        );
        println!(
            "NOTE: review page browser test NOT RUN (run scripts/browser-setup.sh and export its env)"
        );
        return;
    };
    // 55 older plans (so the list has a second page), the plan the page works on, the answer's
    // replan, then the plan the page creates over SSE
    let mut turns = reply("weather-email.json", 55);
    turns.extend(reply("missing-recipient.json", 1));
    turns.extend(reply("weather-email.json", 2));
    let s = start(turns, ServerConfig::default()).await;
    for _ in 0..55 {
        create(&s, None).await;
    }
    let request = crate::needs_input();
    let (status, created) = call(&s, Method::POST, "/v1/plans", Some(request), None).await;
    assert_eq!(status, 201, "{created}");
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let shots = root().join("target/review-page-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut child = tokio::process::Command::new("node")
        .arg(root().join("scripts/review-page.mjs"))
        .arg(&s.base)
        .arg(&id)
        .arg(&shots)
        .env("PLANSMITH_TEST_PLAYWRIGHT", playwright)
        .env("PLANSMITH_TEST_CHROMIUM", chromium)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(90), child.wait())
        .await
        .expect("the browser test took over 90 s")
        .unwrap();
    assert!(status.success(), "scripts/review-page.mjs failed");
    let (_, plan) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(plan["state"], "accepted");
    assert_eq!(plan["plan"]["steps"][0]["status"], "in_progress");
    let (_, page) = call(&s, Method::GET, "/v1/plans", None, None).await;
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
