//! The seed behaviours as a user runs them: conversation memory across two
//! `plan --conversation --save` calls, plan templates end to end, and the README's ValueCell
//! worked example. (Background investigation from the CLI is in `investigate.rs`.)

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use super::{assert_exit, root, text};

fn run(store: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(args)
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .env("PLANSMITH_STORE", format!("sqlite:{}", store.display()))
        .output()
        .unwrap()
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "{err}: stdout\n{}\nstderr\n{}",
            text(&output.stdout),
            text(&output.stderr)
        )
    })
}

#[test]
fn a_conversation_remembers_its_earlier_plans() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("plans.db");
    let first = run(
        &db,
        &[
            "plan",
            "What's the weather in Paris?",
            "--tools",
            "examples/tools.json",
            "--conversation",
            "trip",
            "--save",
            "--model",
            "scripted:examples/replies/weather-paris.json",
        ],
    );
    assert_exit(&first, 0);
    assert!(
        !text(&first.stdout).contains("Memory:"),
        "the first turn has no memory"
    );
    let second = run(
        &db,
        &[
            "plan",
            "Now do the same for Berlin",
            "--tools",
            "examples/tools.json",
            "--conversation",
            "trip",
            "--save",
            "--model",
            "scripted:examples/replies/weather-berlin.json",
        ],
    );
    assert_exit(&second, 0);
    assert!(
        text(&second.stdout).contains("Memory: 1 earlier turn(s) shown, 0 summarised"),
        "{}",
        text(&second.stdout)
    );
    let listed = json(&run(
        &db,
        &["plans", "list", "--conversation", "trip", "--json"],
    ));
    let n = listed["plans"].as_array().map_or(0, Vec::len);
    assert_eq!(n, 2, "{listed}");
    // Another conversation starts empty.
    let other = run(
        &db,
        &[
            "plan",
            "What's the weather in Paris?",
            "--tools",
            "examples/tools.json",
            "--conversation",
            "other",
            "--outcome-json",
            "--model",
            "scripted:examples/replies/weather-paris.json",
        ],
    );
    assert!(json(&other)["diagnostics"]["memory"].is_null());
}

#[test]
fn templates_save_list_instantiate_and_a_changed_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("plans.db");
    let saved = run(
        &db,
        &[
            "plan",
            "What's the weather in Paris? Email it to bob@example.com",
            "--tools",
            "examples/tools.json",
            "--save",
            "--model",
            "scripted:examples/replies/weather-email.json",
        ],
    );
    assert_exit(&saved, 0);
    let stderr = text(&saved.stderr);
    let id = stderr
        .split_whitespace()
        .find(|w| w.starts_with("plan-"))
        .unwrap_or_else(|| panic!("{stderr}"))
        .to_owned();
    let save = |extra: &[&str]| {
        let mut args = vec![
            "templates",
            "save",
            "weather-mail",
            "--plan",
            &id,
            "--param",
            "city=Paris",
            "--param",
            "recipient=bob@example.com",
            "--default",
            "recipient=team@example.com",
        ];
        args.extend_from_slice(extra);
        run(&db, &args)
    };
    let v1 = save(&["--json"]);
    assert_exit(&v1, 0);
    let v1 = json(&v1);
    assert_eq!(v1["version"], 1);
    assert_eq!(
        v1["plan"]["steps"][0]["action"]["arguments"]["city"],
        "{{city}}"
    );
    assert_exit(&save(&["--description", "v2"]), 0);
    let list = json(&run(&db, &["templates", "list", "--json"]));
    assert_eq!(
        (list[0]["version"].clone(), list[0]["versions"].clone()),
        (2.into(), 2.into())
    );

    let made = run(
        &db,
        &[
            "templates",
            "instantiate",
            "weather-mail",
            "--version",
            "1",
            "--arg",
            "city=Berlin",
            "--tools",
            "examples/tools.json",
            "--json",
            "--save",
        ],
    );
    assert_exit(&made, 0);
    let plan = json(&made);
    assert_eq!(plan["steps"][0]["action"]["arguments"]["city"], "Berlin");
    assert_eq!(
        plan["steps"][1]["action"]["arguments"]["to"],
        "team@example.com"
    );
    assert!(text(&made.stderr).contains("saved plan plan-"));

    let missing = run(
        &db,
        &[
            "templates",
            "instantiate",
            "weather-mail",
            "--tools",
            "examples/tools.json",
        ],
    );
    assert_exit(&missing, 2);
    assert!(text(&missing.stderr).contains("needs values for: city"));
    let unknown = run(
        &db,
        &[
            "templates",
            "instantiate",
            "weather-mail",
            "--arg",
            "city=Rome",
            "--arg",
            "town=Rome",
            "--tools",
            "examples/tools.json",
        ],
    );
    assert_exit(&unknown, 2);
    assert!(text(&unknown.stderr).contains("no parameters named: town"));

    let mut tools: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("examples/tools.json")).unwrap())
            .unwrap();
    tools["tools"]
        .as_array_mut()
        .unwrap()
        .retain(|t| t["name"] != "send_email");
    let changed = dir.path().join("tools.json");
    std::fs::write(&changed, tools.to_string()).unwrap();
    let stale = run(
        &db,
        &[
            "templates",
            "instantiate",
            "weather-mail",
            "--arg",
            "city=Rome",
            "--tools",
            changed.to_str().unwrap(),
        ],
    );
    assert_exit(&stale, 1);
    let stderr = text(&stale.stderr);
    assert!(
        stderr.contains("error[unknown_tool] at /steps/1/action/name")
            && stderr.contains("is invalid against the catalog"),
        "{stderr}"
    );

    assert_exit(&run(&db, &["templates", "delete", "weather-mail"]), 0);
    assert_exit(&run(&db, &["templates", "show", "weather-mail"]), 4);
}

#[test]
fn readme_valuecell_recurring_agent_task() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("plans.db");
    let args = [
        "plan",
        "Send me NVDA news every morning at 9",
        "--shape",
        "agent_tasks",
        "--agents",
        "examples/agents.json",
        "--model",
        "scripted:examples/replies/agent-tasks.json",
    ];
    let unconfirmed = run(&db, &args);
    assert_exit(&unconfirmed, 10);
    let mut confirmed = args.to_vec();
    confirmed.push("--allow-recurring");
    let output = run(&db, &confirmed);
    assert_exit(&output, 0);
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("agent NewsAgent: Summarise today's most important news about NVIDIA")
            && stdout.contains("schedule: {\"type\":\"daily\",\"time\":\"09:00\"}"),
        "{stdout}"
    );
}
