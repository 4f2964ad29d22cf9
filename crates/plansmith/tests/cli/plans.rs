//! `plansmith plans …`, `plan --save` and `plan --review` on a real store (SQLite in a
//! temporary directory; PostgreSQL too when `PLANSMITH_TEST_POSTGRES_URL` is set).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use super::{assert_exit, root, text};

const WEATHER_QUERY: &str = "What's the weather in Paris? Email it to bob@example.com";

/// Runs plansmith against `store`, feeding `stdin`.
fn run(store: &str, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(args)
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .env("PLANSMITH_STORE", store)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A scripted-model file replaying `turns`.
fn script(dir: &Path, name: &str, turns: &[serde_json::Value]) -> String {
    let texts: Vec<String> = turns.iter().map(|t| t.to_string()).collect();
    let path = dir.join(name);
    std::fs::write(&path, serde_json::json!({ "turns": texts }).to_string()).unwrap();
    format!("scripted:{}", path.display())
}

fn weather_v2() -> serde_json::Value {
    serde_json::json!({"title": "Paris weather to Bob, searched", "steps": [
        {"id": "s1", "type": "tool", "title": "Search the forecast", "name": "search_web", "arguments": {"query": "Paris forecast"}},
        {"id": "s2", "type": "tool", "title": "Get the weather in Paris", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "s3", "type": "reply", "title": "Tell the user", "text": "Done.", "depends_on": ["s1", "s2"]}]})
}

fn weather_v1() -> serde_json::Value {
    let text = std::fs::read_to_string(root().join("examples/replies/weather-email.json")).unwrap();
    let script: serde_json::Value = serde_json::from_str(&text).unwrap();
    let reply = script["turns"][0].as_str().unwrap();
    let json = reply
        .trim()
        .trim_start_matches("```json")
        .trim_end_matches("```");
    serde_json::from_str(json).unwrap()
}

fn digest() -> serde_json::Value {
    serde_json::json!({"adequate": true, "reason": "A daily digest.", "title": "NVDA daily digest", "tasks": [
        {"title": "NVDA news digest", "query": "Summarise today's news about NVIDIA.", "agent_name": "NewsAgent",
         "pattern": "recurring", "schedule_config": {"daily_time": "09:00"}}]})
}

/// The plan id from `saved plan ID (…)` on stderr.
fn saved_id(output: &Output) -> String {
    let stderr = text(&output.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("saved plan "))
        .unwrap_or_else(|| panic!("no `saved plan` line in\n{stderr}"));
    line["saved plan ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// Plans [`WEATHER_QUERY`] with `model` and saves it in `store`; the run succeeded.
fn save_weather(store: &str, model: &str) -> Output {
    let saved = run(
        store,
        &[
            "plan",
            WEATHER_QUERY,
            "--tools",
            "examples/tools.json",
            "--model",
            model,
            "--save",
        ],
        "",
    );
    assert_exit(&saved, 0);
    saved
}

fn lifecycle_on(store: &str) {
    let dir = tempfile::tempdir().unwrap();
    let model = script(dir.path(), "w.json", &[weather_v1()]);
    let saved = save_weather(store, &model);
    let id = saved_id(&saved);
    assert!(
        text(&saved.stderr).contains("(v1, awaiting_review)"),
        "{}",
        text(&saved.stderr)
    );

    let listed = run(store, &["plans", "list", "--json"], "");
    assert_exit(&listed, 0);
    let page: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(
        page["plans"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["plan"]["id"] == id.as_str()),
        "{page}"
    );
    let human = run(store, &["plans", "list", "--state", "awaiting_review"], "");
    assert_exit(&human, 0);
    assert!(text(&human.stdout).contains(&id));

    let shown = run(store, &["plans", "show", &id], "");
    assert_exit(&shown, 0);
    // A reviewer on the command line sees what each step does before accepting it.
    let out = text(&shown.stdout);
    for needle in [
        "Progress: 0/3 (0.0%)",
        "   s1: tool get_weather\n     city = \"Paris\"\n",
        "   s2 (after s1): tool send_email\n",
        "     body = s1.output.summary (from the output of s1)\n",
        "   s3 (after s2): reply: ",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }

    let marked = run(
        store,
        &[
            "plans",
            "mark",
            &id,
            "1",
            "--status",
            "completed",
            "--notes",
            "sunny",
        ],
        "",
    );
    assert_exit(&marked, 0);
    let out = text(&marked.stdout);
    assert!(
        out.contains("Progress: 1/3 (33.3%)") && out.contains("[✓] Get the weather in Paris"),
        "{out}"
    );
    assert!(out.contains("Notes: sunny"), "{out}");

    let bad_index = run(
        store,
        &["plans", "mark", &id, "9", "--status", "completed"],
        "",
    );
    assert_exit(&bad_index, 2);
    assert!(
        text(&bad_index.stderr).contains("has 3 step(s), numbered from 1: there is no step 9"),
        "{}",
        text(&bad_index.stderr)
    );
    // Steps are numbered as `plans show` lists them, from 1.
    let zero = run(
        store,
        &["plans", "mark", &id, "0", "--status", "completed"],
        "",
    );
    assert_exit(&zero, 2);
    assert!(text(&zero.stderr).contains("steps are numbered from 1"));
    let bad_status = run(store, &["plans", "mark", &id, "s2", "--status", "done"], "");
    assert_exit(&bad_status, 2);
    assert!(text(&bad_status.stderr).contains("valid statuses are"));
    let stale = run(
        store,
        &[
            "plans",
            "mark",
            &id,
            "s2",
            "--status",
            "in_progress",
            "--expected-version",
            "1",
        ],
        "",
    );
    assert_exit(&stale, 5);
    assert!(
        text(&stale.stderr).contains("is at version 2, not 1"),
        "{}",
        text(&stale.stderr)
    );
    // A replan without the catalog could call none of the plan's tools: refused, before the
    // model is loaded, rather than emptying the plan.
    let refused = run(
        store,
        &[
            "plans",
            "edit",
            &id,
            "shorter",
            "--model",
            "scripted:/no/such/script.json",
        ],
        "",
    );
    assert_exit(&refused, 2);
    assert!(
        text(&refused.stderr).contains("calls tools (get_weather, send_email)")
            && text(&refused.stderr).contains("--tools FILE"),
        "{}",
        text(&refused.stderr)
    );

    let patched = run(
        store,
        &[
            "plans",
            "edit",
            &id,
            "--tools",
            "examples/tools.json",
            "--patch",
            r#"[{"op": "replace", "path": "/steps/0/action/arguments/city", "value": "Lyon"}]"#,
        ],
        "",
    );
    assert_exit(&patched, 0);
    let invalid = run(
        store,
        &[
            "plans",
            "edit",
            &id,
            "--tools",
            "examples/tools.json",
            "--patch",
            r#"[{"op": "replace", "path": "/steps/0/action/arguments/unit", "value": "kelvin"}]"#,
        ],
        "",
    );
    assert_exit(&invalid, 2);
    assert!(
        text(&invalid.stderr).contains("the edited plan is invalid"),
        "{}",
        text(&invalid.stderr)
    );
    // Twenty copies that each double the steps: refused before the plan outgrows its bound,
    // at once, and nothing is stored.
    let doubling: Vec<serde_json::Value> = (0..20)
        .map(|_| serde_json::json!({"op": "copy", "from": "/steps", "path": "/steps/0"}))
        .collect();
    let started = std::time::Instant::now();
    let amplified = run(
        store,
        &[
            "plans",
            "edit",
            &id,
            "--tools",
            "examples/tools.json",
            "--patch",
            &serde_json::Value::Array(doubling).to_string(),
        ],
        "",
    );
    assert_exit(&amplified, 2);
    assert!(
        text(&amplified.stderr).contains("would make the plan larger than"),
        "{}",
        text(&amplified.stderr)
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let shown = run(store, &["plans", "show", &id, "--json"], "");
    assert_exit(&shown, 0);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(
        shown["plan"]["version"], 3,
        "only the valid edit was stored"
    );

    // The reviewer read version 2; version 3 is what is stored: refused, exit 5, unchanged.
    for stale in [
        &["plans", "accept", &id, "--expected-version", "2"][..],
        &["plans", "reject", &id, "--expected-version", "2"],
    ] {
        let refused = run(store, stale, "");
        assert_exit(&refused, 5);
        assert!(
            text(&refused.stderr).contains("is at version 3, not 2"),
            "{}",
            text(&refused.stderr)
        );
    }
    let accepted = run(
        store,
        &["plans", "accept", &id, "--expected-version", "3"],
        "",
    );
    assert_exit(&accepted, 0);
    assert!(text(&accepted.stdout).contains("State: accepted\nActions: run\n"));
    let again = run(store, &["plans", "accept", &id], "");
    assert_exit(&again, 5);
    // A replanning the state refuses is refused before the model is loaded: this model would
    // fail to load (and the embedded one would first be fetched, 469 MiB).
    for command in [&["answer", &id, "Paris"][..], &["edit", &id, "shorter"]] {
        let args: Vec<&str> = ["plans"]
            .iter()
            .chain(command)
            .chain(&["--model", "scripted:/no/such/script.json"])
            .copied()
            .collect();
        let refused = run(store, &args, "");
        assert_exit(&refused, 5);
        let stderr = text(&refused.stderr);
        assert!(
            stderr.contains(&format!("cannot {} plan", command[0]))
                && stderr.contains("it allows run"),
            "{stderr}"
        );
    }

    let history = run(store, &["plans", "history", &id], "");
    assert_exit(&history, 0);
    let out = text(&history.stdout);
    for needle in [
        "v1   created",
        "v2   step_update",
        "v3   human_edit",
        "v4   status",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }

    assert_exit(&run(store, &["plans", "delete", &id], ""), 0);
    assert_exit(&run(store, &["plans", "show", &id], ""), 4);
    assert_exit(&run(store, &["plans", "delete", &id], ""), 4);
}

#[test]
fn plans_lifecycle_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    lifecycle_on(&store);
}

#[test]
fn plans_lifecycle_on_postgres() {
    let Some(base) = std::env::var("PLANSMITH_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "PLANSMITH_TEST_POSTGRES_URL is not set under CI=true: the PostgreSQL CLI test must run"
        );
        eprintln!(
            "NOTE: PostgreSQL half of plans_lifecycle_on_postgres NOT RUN: set PLANSMITH_TEST_POSTGRES_URL"
        );
        return;
    };
    // A fresh database for this run (psql comes with the server the CI hook starts).
    let name = format!("plansmith_cli_{}", std::process::id());
    let created = Command::new("psql")
        .args([base.as_str(), "-qc", &format!("CREATE DATABASE {name}")])
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", text(&created.stderr));
    let (scheme, rest) = base.split_once("://").unwrap();
    let authority = rest.split(['/', '?']).next().unwrap();
    lifecycle_on(&format!("{scheme}://{authority}/{name}"));
}

#[test]
fn review_edit_then_accept_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let model = script(dir.path(), "w.json", &[weather_v1(), weather_v2()]);
    let output = run(
        &store,
        &[
            "plan",
            WEATHER_QUERY,
            "--tools",
            "examples/tools.json",
            "--model",
            &model,
            "--review",
        ],
        "edit Search the web for the forecast first\naccept\n",
    );
    assert_exit(&output, 0);
    let out = text(&output.stdout);
    assert!(
        out.contains("accept / edit <feedback> / reject [why] / quit:"),
        "{out}"
    );
    assert!(
        out.contains("Paris weather to Bob, searched") && out.contains("State: accepted"),
        "{out}"
    );
    let id = saved_id(&output);
    let history = run(&store, &["plans", "history", &id, "--json"], "");
    let records: serde_json::Value = serde_json::from_slice(&history.stdout).unwrap();
    let triggers: Vec<&str> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["trigger"].as_str().unwrap())
        .collect();
    assert_eq!(triggers, ["created", "feedback", "status"]);
}

/// An edit the review loop could not apply is said (stderr, the plan's `Note:` and the exit
/// code): at `--max-iterations` the plan is accepted as it stood (exit 11, not 0), and a replan
/// that failed shows the plan unchanged before the person decides again.
#[test]
fn review_says_when_an_edit_was_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let args = |model: &str, extra: &[&str]| -> Vec<String> {
        let mut args = vec![
            "plan".into(),
            WEATHER_QUERY.into(),
            "--tools".into(),
            "examples/tools.json".into(),
            "--model".into(),
            model.into(),
            "--review".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };

    // At the cap (0 rounds here) the edit is not applied: accepted as it stood, and said.
    let model = script(dir.path(), "cap.json", &[weather_v1()]);
    let capped_args = args(&model, &["--max-iterations", "0"]);
    let capped_args: Vec<&str> = capped_args.iter().map(String::as_str).collect();
    let capped = run(&store, &capped_args, "edit Search the web first\n");
    assert_exit(&capped, 11);
    let stderr = text(&capped.stderr);
    assert!(
        stderr.contains("max_iterations (0) reached: the feedback was not applied"),
        "{stderr}"
    );
    let out = text(&capped.stdout);
    assert!(
        out.contains("State: accepted") && out.contains("Note: max_iterations (0) reached"),
        "{out}"
    );

    // A replan that fails (the model answers no plan) keeps the plan, and says so; accepting
    // it afterwards is an ordinary success.
    let model = script(
        dir.path(),
        "failed.json",
        &[
            weather_v1(),
            serde_json::json!("I am not sure what you mean."),
        ],
    );
    let failed_args = args(
        &model,
        &["--fallback", "previous-or-fail", "--max-repairs", "0"],
    );
    let failed_args: Vec<&str> = failed_args.iter().map(String::as_str).collect();
    let failed = run(&store, &failed_args, "edit Use Fahrenheit\naccept\n");
    assert_exit(&failed, 0);
    let stderr = text(&failed.stderr);
    assert!(
        stderr.contains("replanning failed") && stderr.contains("the plan is unchanged"),
        "{stderr}"
    );
    assert!(text(&failed.stdout).contains("Note: replanning failed"));
}

#[test]
fn review_reject_without_text_and_end_of_input() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let model = script(dir.path(), "w.json", &[weather_v1()]);
    let args = [
        "plan",
        WEATHER_QUERY,
        "--tools",
        "examples/tools.json",
        "--model",
        &model,
        "--review",
    ];
    let rejected = run(&store, &args, "reject\n");
    assert_exit(&rejected, 1);
    assert!(text(&rejected.stdout).contains("State: rejected (plan rejected by user)"));
    let model = script(dir.path(), "w2.json", &[weather_v1()]);
    let args = [
        "plan",
        WEATHER_QUERY,
        "--tools",
        "examples/tools.json",
        "--model",
        &model,
        "--review",
    ];
    let left_open = run(&store, &args, "");
    assert_exit(&left_open, 10);
    let id = saved_id(&left_open);
    let shown = run(&store, &["plans", "show", &id], "");
    assert!(text(&shown.stdout).contains("State: awaiting_review"));
}

#[test]
fn recurring_schedule_waits_for_confirmation_in_chinese() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let model = script(dir.path(), "d.json", &[digest()]);
    let saved = run(
        &store,
        &[
            "plan",
            "每天早上9点给我NVDA新闻摘要",
            "--agents",
            "examples/agents.json",
            "--shape",
            "agent_tasks",
            "--locale",
            "zh-CN",
            "--model",
            &model,
            "--save",
        ],
        "",
    );
    assert_exit(&saved, 10);
    let id = saved_id(&saved);
    assert!(text(&saved.stderr).contains("needs_input"));
    let accept = run(&store, &["plans", "accept", &id], "");
    assert_exit(&accept, 5);
    let model = script(dir.path(), "d2.json", &[digest()]);
    let answered = run(
        &store,
        &[
            "plans",
            "answer",
            &id,
            "确认",
            "--agents",
            "examples/agents.json",
            "--model",
            &model,
        ],
        "",
    );
    assert_exit(&answered, 0);
    assert!(
        text(&answered.stdout).contains("State: awaiting_review"),
        "{}",
        text(&answered.stdout)
    );
    let shown = run(&store, &["plans", "show", &id, "--json"], "");
    let stored: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(stored["review"]["schedule_confirmed"], true);
    assert_eq!(stored["plan"]["steps"][0]["schedule"]["type"], "daily");
}

/// `plans answer` by question (`--to q1=VALUE`) or with the recommended answers
/// (`--recommended`): an unknown question is refused before the model is asked; the
/// recommended "no" to a daily schedule makes a one-off plan and is recorded as an assumption.
#[test]
fn plans_answer_by_question_or_with_the_recommended_answers() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let model = script(dir.path(), "d.json", &[digest()]);
    let base = ["--agents", "examples/agents.json", "--model"];
    let saved = run(
        &store,
        &[
            "plan",
            "Send me NVDA news every morning at 9",
            "--shape",
            "agent_tasks",
            base[0],
            base[1],
            base[2],
            &model,
            "--save",
        ],
        "",
    );
    assert_exit(&saved, 10);
    let id = saved_id(&saved);
    let shown = run(&store, &["plans", "show", &id, "--json"], "");
    let stored: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(stored["plan"]["questions"][0]["default"], "no", "{stored}");

    let unknown = run(
        &store,
        &[
            "plans", "answer", &id, "--to", "q9=yes", base[0], base[1], base[2], &model,
        ],
        "",
    );
    assert_exit(&unknown, 2);
    assert!(
        text(&unknown.stderr).contains("asks no question `q9`"),
        "{}",
        text(&unknown.stderr)
    );
    let mut once = digest();
    once["tasks"][0]["pattern"] = serde_json::json!("once");
    once["tasks"][0]
        .as_object_mut()
        .unwrap()
        .remove("schedule_config");
    let model = script(dir.path(), "once.json", &[once]);
    let answered = run(
        &store,
        &[
            "plans",
            "answer",
            &id,
            "--recommended",
            base[0],
            base[1],
            base[2],
            &model,
        ],
        "",
    );
    assert_exit(&answered, 0);
    let shown = run(&store, &["plans", "show", &id, "--json"], "");
    let stored: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(stored["state"], "awaiting_review", "{stored}");
    assert!(
        stored["plan"]["steps"][0].get("schedule").is_none(),
        "{stored}"
    );
    let assumed = &stored["plan"]["metadata"]["assumptions"][0];
    assert_eq!(assumed["answer"], "no", "{stored}");
    assert!(
        assumed["reason"]
            .as_str()
            .unwrap()
            .contains("--recommended")
    );
}

#[test]
fn bad_store_location_is_bad_input() {
    let output = run("mysql://nope", &["plans", "list"], "");
    assert_exit(&output, 2);
    assert!(text(&output.stderr).contains("bad store location"));
}

/// The list's count stops at 10,000 ("10000+"): counting a million plans for every page took
/// longer than the page; `--exact-total` counts them all.
#[test]
fn plans_list_total_stops_at_the_cap_unless_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let model = script(dir.path(), "w.json", &[weather_v1()]);
    saved_id(&save_weather(&store, &model));
    // 10,000 copies of that plan under new ids, written by SQL (planning each would take minutes).
    crate::execute_sql(
        &store,
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
         INSERT INTO plans (id, version, state, owner, conversation_id, thread_id, title,
                            document, review, created_at, updated_at)
         SELECT id || '-' || i, version, state, owner, conversation_id, thread_id, title,
                replace(document, id, id || '-' || i), review, created_at, updated_at
         FROM plans, n",
    );
    let capped = run(&store, &["plans", "list", "--limit", "3"], "");
    assert_exit(&capped, 0);
    assert_eq!(text(&capped.stdout).lines().count(), 3);
    assert!(
        text(&capped.stderr).starts_with("3 of 10000+ plan(s); next page: --cursor "),
        "{}",
        text(&capped.stderr)
    );
    let exact = run(
        &store,
        &["plans", "list", "--limit", "3", "--exact-total"],
        "",
    );
    assert_exit(&exact, 0);
    assert!(
        text(&exact.stderr).starts_with("3 of 10001 plan(s); next page"),
        "{}",
        text(&exact.stderr)
    );
    let json = run(&store, &["plans", "list", "--limit", "1", "--json"], "");
    let page: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(page["total"], 10_000);
    assert_eq!(page["total_exact"], false);
}

#[test]
fn plans_list_pages_by_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let model = script(dir.path(), "w.json", &[weather_v1()]);
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(saved_id(&save_weather(&store, &model)));
    }
    let first = run(&store, &["plans", "list", "--limit", "2"], "");
    assert_exit(&first, 0);
    let stderr = text(&first.stderr);
    let cursor = stderr
        .split("next page: --cursor ")
        .nth(1)
        .unwrap_or_else(|| panic!("no next cursor: {stderr}"))
        .trim()
        .to_owned();
    let second = run(
        &store,
        &["plans", "list", "--limit", "2", "--cursor", &cursor],
        "",
    );
    assert_exit(&second, 0);
    assert!(
        !text(&second.stderr).contains("next page"),
        "{}",
        text(&second.stderr)
    );
    // Newest first: the two newest on the first page, the oldest on the second.
    let listed = |out: &Output| -> Vec<String> {
        text(&out.stdout)
            .lines()
            .map(|line| line.split_whitespace().next().unwrap_or("").to_owned())
            .collect()
    };
    assert_eq!(listed(&first), [ids[2].clone(), ids[1].clone()]);
    assert_eq!(listed(&second), [ids[0].clone()]);

    let bad = run(&store, &["plans", "list", "--cursor", "nonsense"], "");
    assert_exit(&bad, 2);
    assert!(
        text(&bad.stderr).contains("bad list cursor"),
        "{}",
        text(&bad.stderr)
    );
}

/// A model that scores text and calls a tool that does not fit the request gets a question
/// instead of the call; the person's answer replans without the check, and the call comes back.
#[test]
fn a_call_that_does_not_fit_is_asked_about_and_an_answer_plans_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let model = |name: &str| {
        let path = dir.path().join(name);
        let script = serde_json::json!({
            "capabilities": {"grammar": true},
            "turns": [call],
            // The request is no likelier after get_weather's description than after a
            // content-free function's (-1 nat a word when no rule matches).
            "likelihoods": [{"context_contains": "A function: get_weather(", "per_token": -1.0}],
        });
        std::fs::write(&path, script.to_string()).unwrap();
        format!("scripted:{}", path.display())
    };
    let asked = run(
        &store,
        &[
            "plan",
            "What's the mass of an electron?",
            "--tools",
            "examples/tools.json",
            "--model",
            &model("first.json"),
            "--save",
        ],
        "",
    );
    assert_exit(&asked, 10);
    let stdout = text(&asked.stdout);
    assert!(stdout.contains("the closest is `get_weather`"), "{stdout}");
    assert!(stdout.contains("warning[no_tool_fits]"), "{stdout}");
    let id = saved_id(&asked);
    let shown = run(&store, &["plans", "show", &id, "--json"], "");
    let stored: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(
        stored["plan"]["metadata"]["unfitting_calls"][0]["action"]["name"],
        "get_weather"
    );

    let answered = run(
        &store,
        &[
            "plans",
            "answer",
            &id,
            "Yes, call get_weather anyway.",
            "--tools",
            "examples/tools.json",
            "--model",
            &model("second.json"),
        ],
        "",
    );
    assert_exit(&answered, 0);
    let shown = run(&store, &["plans", "show", &id, "--json"], "");
    let stored: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(stored["plan"]["version"], 2);
    assert_eq!(stored["plan"]["steps"][0]["action"]["name"], "get_weather");
}
