//! Budgets and stop reasons as users meet them: `plansmith run` with `--max-*` flags and the
//! config file's `[budget]`, with real command tools and a real MCP server, and `plansmith
//! serve`'s `POST /v1/plans/{id}/run` with a budget in its body. Every run ends with its
//! `stop_reason` in `--json` (and the plan's `last_run`) and the documented exit code.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{http, mcp_server, tool, write};
use crate::{plansmith_with, text};

/// A temporary directory with a store, the script tools as commands, and plan files.
struct Setup {
    dir: tempfile::TempDir,
    store: String,
    commands: String,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let commands = dir.path().join("commands.json");
        write(
            &commands,
            &json!({"tools": {
                "echo": tool("echo.sh", &[]),
                "fail": tool("fail.sh", &["upstream said 503"]),
                "slow": tool("sleep.sh", &["5"]),
            }}),
        );
        Setup {
            store: format!("sqlite:{}", dir.path().join("plans.db").display()),
            commands: commands.display().to_string(),
            dir,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// `plansmith serve` on a free port over this store, with the script tools, `tools` and
    /// `model`, and no config file but one the test wrote; the server (killed when dropped),
    /// its address and its log's path, once it answers.
    fn serve(&self, tools: &str, model: &str) -> (super::Reaped, String, String) {
        let addr = format!("127.0.0.1:{}", crate::free_port());
        let log_path = self.path("serve.log");
        let child = Command::new(env!("CARGO_BIN_EXE_plansmith"))
            .args(["serve", "--addr", &addr, "--store", &self.store])
            .args([
                "--commands",
                &self.commands,
                "--tools",
                tools,
                "--model",
                model,
            ])
            .env_remove("PLANSMITH_MODEL")
            .env_remove("PLANSMITH_TOKENS")
            .env_remove("PLANSMITH_CONFIG")
            .env("XDG_CONFIG_HOME", self.dir.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap();
        let serve = super::Reaped(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(&addr).is_err() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            assert!(Instant::now() < deadline, "serve did not start:\n{log}");
            std::thread::sleep(Duration::from_millis(100));
        }
        (serve, addr, log_path)
    }

    /// A catalog of these script tools (any object as input), written next to the store;
    /// returns its path.
    fn catalog(&self, names: &[&str]) -> String {
        const WHAT: [(&str, &str); 3] = [
            ("echo", "Says it back."),
            ("slow", "Takes its time."),
            ("fail", "Fetches the page."),
        ];
        let tools: Vec<Value> = names
            .iter()
            .map(|name| {
                let description = WHAT.iter().find(|(n, _)| n == name).map_or("", |(_, d)| d);
                json!({"name": name, "description": description,
                       "inputSchema": {"type": "object"}})
            })
            .collect();
        let path = self.path("tools.json");
        write(Path::new(&path), &json!({ "tools": tools }));
        path
    }

    /// Writes a plan file with these steps; returns its path.
    fn plan(&self, name: &str, steps: Value) -> String {
        let path = self.path(name);
        write(Path::new(&path), &json!({"title": name, "steps": steps}));
        path
    }

    /// `plansmith run PLAN --json` with `args`; the exit code, the report and stderr.
    fn run(&self, plan: &str, args: &[&str], vars: &[(&str, &str)]) -> (i32, Value, String) {
        let mut all = vec![
            "run",
            plan,
            "--store",
            &self.store,
            "--commands",
            &self.commands,
            "--json",
            "--retries",
            "0",
        ];
        all.extend_from_slice(args);
        // No config file of the user's: the directory has none unless a test writes one.
        let home = self.dir.path().display().to_string();
        let mut vars = vars.to_vec();
        vars.push(("XDG_CONFIG_HOME", &home));
        let output = plansmith_with(&all, &vars);
        let report = serde_json::from_str(&text(&output.stdout)).unwrap_or(Value::Null);
        (
            output.status.code().unwrap_or(-1),
            report,
            text(&output.stderr),
        )
    }
}

/// `n` echo steps, each after the one before.
fn chain(n: usize) -> Value {
    Value::Array(
        (1..=n)
            .map(|i| {
                let depends: Vec<String> =
                    (i > 1).then(|| format!("s{}", i - 1)).into_iter().collect();
                json!({"id": format!("s{i}"), "type": "tool", "title": format!("echo {i}"),
                       "name": "echo", "arguments": {"i": i}, "depends_on": depends})
            })
            .collect(),
    )
}

fn step_statuses(report: &Value) -> Vec<String> {
    report["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .map(|s| s["status"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn one(name: &str) -> Value {
    json!([{"id": "s1", "type": "tool", "title": name, "name": name, "arguments": {}}])
}

/// A scripted model's replies, each with the tokens it reports.
fn replies(setup: &Setup, name: &str, turns: Value) -> String {
    let path = setup.path(name);
    write(
        Path::new(&path),
        &json!({"capabilities": {"json_schema": true}, "turns": turns}),
    );
    format!("scripted:{path}")
}

#[test]
fn runs_end_with_their_stop_reason_and_exit_code() {
    let setup = Setup::new();

    let (code, report, err) = setup.run(&setup.plan("ok.json", chain(2)), &[], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(report["stop_reason"], "completed");
    assert_eq!(report["budget"]["tool_calls"], 2, "{report}");

    let (code, report, err) = setup.run(&setup.plan("bad.json", one("fail")), &[], &[]);
    assert_eq!(
        (code, &report["stop_reason"]),
        (1, &json!("failed")),
        "{err}"
    );

    let (code, report, err) = setup.run(
        &setup.plan("abort.json", one("fail")),
        &["--on-failure", "abort"],
        &[],
    );
    assert_eq!(
        (code, &report["stop_reason"]),
        (1, &json!("aborted")),
        "{err}"
    );

    // The call cap: two of three steps run, their results kept; the third is not run.
    let (code, report, err) = setup.run(
        &setup.plan("capped.json", chain(3)),
        &["--max-tool-calls", "2"],
        &[],
    );
    assert_eq!(code, 13, "{err}\n{report}");
    assert_eq!(report["stop_reason"], "tool_calls_capped");
    assert_eq!(report["state"], "aborted");
    assert_eq!(
        step_statuses(&report),
        ["completed", "completed", "skipped"]
    );
    assert_eq!(report["steps"][1]["result"]["arguments"]["i"], 2);
    assert!(
        report["reason"].as_str().unwrap().contains("2 tool calls"),
        "{report}"
    );

    // The time cap, cancelling the running step (a 5 s tool) at 1 s.
    let began = Instant::now();
    let (code, report, err) = setup.run(
        &setup.plan("slow.json", one("slow")),
        &["--max-seconds", "1", "--on-cap", "cancel"],
        &[],
    );
    assert_eq!(
        (code, &report["stop_reason"]),
        (13, &json!("deadline")),
        "{err}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(4),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(step_statuses(&report), ["skipped"]);

    // A step's timeout stops its attempt: the step fails (not a cap), and a step running
    // beside a failed one is cancelled under `--siblings cancel`.
    let began = Instant::now();
    let both = json!([
        {"id": "s1", "type": "tool", "title": "slow", "name": "slow", "arguments": {}},
        {"id": "s2", "type": "tool", "title": "fail", "name": "fail", "arguments": {}}
    ]);
    let (code, report, err) = setup.run(
        &setup.plan("timeout.json", one("slow")),
        &["--step-timeout-secs", "0.5"],
        &[],
    );
    assert_eq!(
        (code, &report["stop_reason"]),
        (1, &json!("failed")),
        "{err}"
    );
    assert!(
        report["steps"][0]["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 0.5 s"),
        "{report}"
    );
    let (code, report, err) = setup.run(
        &setup.plan("siblings.json", both),
        &["--siblings", "cancel"],
        &[],
    );
    assert_eq!(
        (code, &report["stop_reason"]),
        (1, &json!("failed")),
        "{err}"
    );
    assert_eq!(step_statuses(&report), ["skipped", "failed"], "{report}");
    assert!(
        began.elapsed() < Duration::from_secs(4),
        "{:?}",
        began.elapsed()
    );

    // The token cap: task steps through a model that reports what they cost.
    let tasks = setup.plan(
        "tasks.json",
        json!([
            {"id": "s1", "type": "task", "title": "research", "kind": "research"},
            {"id": "s2", "type": "task", "title": "write up", "kind": "processing",
             "depends_on": ["s1"]}
        ]),
    );
    let turn =
        json!({"text": "found it", "usage": {"prompt_tokens": 300, "completion_tokens": 40}});
    let model = replies(&setup, "tasks-model.json", json!([turn, turn]));
    let (code, report, err) = setup.run(&tasks, &["--model", &model, "--max-tokens", "200"], &[]);
    assert_eq!(
        (code, &report["stop_reason"]),
        (13, &json!("token_capped")),
        "{err}\n{report}"
    );
    assert_eq!(step_statuses(&report), ["completed", "skipped"]);
    assert_eq!(report["budget"]["tokens"], 340);

    // A failure that asks for a replan past the cap on replans.
    let tools = setup.catalog(&["fail", "echo"]);
    let model = replies(&setup, "none.json", json!([]));
    let (code, report, err) = setup.run(
        &setup.plan("replan.json", one("fail")),
        &[
            "--on-failure",
            "replan",
            "--max-replans",
            "0",
            "--model",
            &model,
            "--tools",
            &tools,
        ],
        &[],
    );
    assert_eq!(
        (code, &report["stop_reason"]),
        (13, &json!("replans_capped")),
        "{err}\n{report}"
    );

    // A replan that repeats the failed call stalls.
    let again = json!({"title": "again", "steps": one("fail")}).to_string();
    let model = replies(&setup, "again.json", json!([again]));
    let (code, report, err) = setup.run(
        &setup.plan("stall.json", one("fail")),
        &[
            "--on-failure",
            "replan",
            "--model",
            &model,
            "--tools",
            &tools,
        ],
        &[],
    );
    assert_eq!(
        (code, &report["stop_reason"]),
        (1, &json!("stalled")),
        "{err}\n{report}"
    );

    // The goal check: a model that finds the goal not met fails the run, saying why.
    let verdict =
        json!({"verdict": "failed", "gaps": [], "reason": "nothing was sent"}).to_string();
    let model = replies(&setup, "judge.json", json!([verdict, "Summary."]));
    let (code, report, err) = setup.run(
        &setup.plan("goal.json", chain(1)),
        &["--model", &model, "--rubric", "the note was sent"],
        &[],
    );
    assert_eq!(
        (code, &report["stop_reason"]),
        (1, &json!("failed")),
        "{err}\n{report}"
    );
    assert_eq!(report["goal_check"]["verdict"], "failed", "{report}");
    assert!(
        report["reason"]
            .as_str()
            .unwrap()
            .contains("nothing was sent"),
        "{report}"
    );

    // Caps from the config file's `[budget]`; a flag overrides the file cap by cap.
    let config = setup.path("plansmith.toml");
    std::fs::write(&config, "[budget]\nmax_tool_calls = 1\n").unwrap();
    let (code, report, err) = setup.run(
        &setup.plan("file.json", chain(3)),
        &[],
        &[("PLANSMITH_CONFIG", &config)],
    );
    assert_eq!(code, 13, "{err}");
    assert_eq!(report["budget"]["budget"]["max_tool_calls"], 1, "{report}");
    assert_eq!(step_statuses(&report), ["completed", "skipped", "skipped"]);
    let (code, report, err) = setup.run(
        &setup.plan("flag.json", chain(3)),
        &["--max-tool-calls", "5"],
        &[("PLANSMITH_CONFIG", &config)],
    );
    assert_eq!(
        (code, &report["stop_reason"]),
        (0, &json!("completed")),
        "{err}"
    );

    // A resumed run keeps the caps it started with: new caps are refused, with what to do.
    let (code, _, err) = setup.run("ok", &["--resume", "--max-tool-calls", "3"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("caps are set when it starts"), "{err}");
}

/// The call cap counts the calls of a real MCP server's tools (the reference `time` server).
#[test]
fn calls_to_mcp_tools_count_against_the_cap() {
    let test = "calls_to_mcp_tools_count_against_the_cap";
    let Some(time) = mcp_server(test, "PLANSMITH_TEST_MCP_TIME") else {
        return;
    };
    let setup = Setup::new();
    let servers = setup.path("servers.json");
    write(
        Path::new(&servers),
        &json!({"mcpServers": {"time": {"command": time, "args": ["--local-timezone", "UTC"]}}}),
    );
    let zones = ["Europe/Paris", "Asia/Tokyo", "America/Lima"];
    let steps: Vec<Value> = zones
        .iter()
        .enumerate()
        .map(|(i, zone)| {
            let depends: Vec<String> = (i > 0).then(|| format!("s{i}")).into_iter().collect();
            json!({"id": format!("s{}", i + 1), "type": "tool", "title": zone,
                   "name": "get_current_time", "arguments": {"timezone": zone},
                   "depends_on": depends})
        })
        .collect();
    let plan = setup.plan("times.json", Value::Array(steps));
    let (code, report, err) = setup.run(&plan, &["--mcp", &servers, "--max-tool-calls", "2"], &[]);
    assert_eq!(code, 13, "{err}\n{report}");
    assert_eq!(report["stop_reason"], "tool_calls_capped");
    assert_eq!(
        step_statuses(&report),
        ["completed", "completed", "skipped"]
    );
    assert_eq!(
        report["steps"][1]["result"]["timezone"], "Asia/Tokyo",
        "{report}"
    );
}

/// `POST /v1/plans/{id}/run` under the server's `[server.budget]` and with a budget in its
/// body: the run ends with its stop reason in the plan's `last_run`; a resume with a budget
/// is a clear 400.
#[test]
fn http_runs_take_a_budget_and_report_their_stop_reason() {
    let setup = Setup::new();
    let tools = setup.catalog(&["echo", "slow", "fail"]);
    // One reply per plan made over HTTP, in the order they are asked for.
    let plans = [
        ("Echo four times", chain(4)),
        ("Take your time", one("slow")),
        ("Fetch the page", one("fail")),
        ("Echo once", chain(1)),
    ];
    // Each run's summary is the model's next reply: a plan's reply, then its run's summary.
    let turns: Vec<String> = plans
        .iter()
        .flat_map(|(title, steps)| {
            [
                json!({"thought": "As asked.", "title": title, "steps": steps}).to_string(),
                "Done as far as it went.".to_owned(),
            ]
        })
        .collect();
    let model = replies(&setup, "replies.json", json!(turns));
    // The server's own caps, from its config file: three tool calls a run (a failing step's
    // three attempts fit).
    std::fs::create_dir_all(setup.dir.path().join("plansmith")).unwrap();
    std::fs::write(
        setup.dir.path().join("plansmith/config.toml"),
        "[server.budget]\nmax_tool_calls = 3\n",
    )
    .unwrap();
    let (_serve, addr, log_path) = setup.serve(&tools, &model);
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    // The first run keeps to the server's cap; the second adds one of its own.
    let budgets = [
        json!({}),
        json!({"max_seconds": 1, "on_cap": "cancel"}),
        json!({}),
        json!({}),
    ];
    let expected = ["tool_calls_capped", "deadline", "failed", "completed"];
    for (((query, _), budget), expected) in plans.iter().zip(budgets).zip(expected) {
        let (status, created) = http(
            &addr,
            "POST",
            "/v1/plans",
            &json!({"query": query, "auto_accept": true}),
        );
        assert_eq!(status, 201, "{created}\n{}", log());
        let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
        let (status, started) = http(
            &addr,
            "POST",
            &format!("/v1/plans/{id}/run"),
            &json!({"budget": budget}),
        );
        assert_eq!(status, 202, "{started}\n{}", log());
        let last_run = ended_run(&addr, &id, &log);
        assert_eq!(last_run["stop_reason"], expected, "{query}: {last_run}");
        if expected == "failed" {
            // Nothing to resume; and a resume never takes new caps.
            let (status, body) = http(
                &addr,
                "POST",
                &format!("/v1/plans/{id}/run"),
                &json!({"resume": true, "budget": {"max_tool_calls": 9}}),
            );
            assert_eq!(status, 400, "{body}");
            assert!(
                body.to_string().contains("keeps the caps it started with"),
                "{body}"
            );
        }
    }
}

/// The plan's `last_run` once its run ended (at most 60 s).
fn ended_run(addr: &str, id: &str, log: &dyn Fn() -> String) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, stored) = http(addr, "GET", &format!("/v1/plans/{id}"), &json!({}));
        let last_run = &stored["plan"]["metadata"]["last_run"];
        if !last_run["state"].is_null() && last_run["state"] != "running" {
            return last_run.clone();
        }
        assert!(Instant::now() < deadline, "the run did not end:\n{}", log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `plans show` says what a run will cost before it runs; once steps of a kind have run, their
/// times are this store's, not the default.
#[test]
fn plans_show_estimates_the_run_before_it_runs() {
    let setup = Setup::new();
    let show = |id: &str| {
        let home = setup.dir.path().display().to_string();
        let vars = [("XDG_CONFIG_HOME", home.as_str())];
        let text_out = plansmith_with(&["plans", "show", id, "--store", &setup.store], &vars);
        let json_out = plansmith_with(
            &["plans", "show", id, "--store", &setup.store, "--json"],
            &vars,
        );
        let shown: Value = serde_json::from_str(&text(&json_out.stdout)).unwrap();
        (text(&text_out.stdout), shown["estimate"].clone())
    };
    // Stored without running: a cap of no calls stops the run before its first step.
    let (_, report, err) = setup.run(
        &setup.plan("first.json", chain(3)),
        &["--max-tool-calls", "0"],
        &[],
    );
    let id = report["plan_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{err}"))
        .to_owned();
    let (shown, estimate) = show(&id);
    assert!(
        shown.contains("Estimate: 3 tool call(s) (echo ×3; 0 read-only, 0 destructive) · 0 model call(s) · ~3 s along s1 → s2 → s3 (3 step(s) never timed, counted 1 s each)"),
        "{shown}"
    );
    assert_eq!(estimate["untimed_steps"], 3, "{estimate}");

    // After a run of the echo tool, its time is the store's mean (well under the 1 s default).
    let (code, _, err) = setup.run(&id, &[], &[]);
    assert_eq!(code, 0, "{err}");
    let (_, report, _) = setup.run(
        &setup.plan("second.json", chain(2)),
        &["--max-tool-calls", "0"],
        &[],
    );
    let (_, estimate) = show(report["plan_id"].as_str().unwrap());
    assert_eq!(estimate["timed_steps"], 2, "{estimate}");
    assert!(estimate["seconds"].as_f64().unwrap() < 2.0, "{estimate}");
}

/// `plans pending` shows every approval a paused run waits for; `plans decide ID all approve`
/// decides them in one go, and `--remember call` lets the same call through in a later plan.
#[test]
fn pending_approvals_are_listed_and_decided_at_once() {
    let setup = Setup::new();
    let home = setup.dir.path().display().to_string();
    let vars = [("XDG_CONFIG_HOME", home.as_str())];
    let plans = |args: &[&str]| {
        let mut all = vec!["plans"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--store", &setup.store]);
        plansmith_with(&all, &vars)
    };
    let two = json!([
        {"id": "s1", "type": "tool", "title": "first", "name": "echo", "arguments": {"n": 1}},
        {"id": "s2", "type": "tool", "title": "second", "name": "echo", "arguments": {"n": 2}}
    ]);
    let gates = ["--require-approval", "s1", "--require-approval", "s2"];
    let (code, report, err) = setup.run(&setup.plan("gated.json", two.clone()), &gates, &[]);
    assert_eq!(code, 10, "{err}");
    let id = report["plan_id"].as_str().unwrap().to_owned();

    let listed = plans(&["pending", &id]);
    let text_out = text(&listed.stdout);
    assert!(text_out.contains("s1  first  echo {\"n\":1}"), "{text_out}");
    assert!(
        text_out.contains("s2  second  echo {\"n\":2}"),
        "{text_out}"
    );
    let decided = plans(&["decide", &id, "all", "approve", "--remember", "call"]);
    assert_eq!(decided.status.code(), Some(0), "{}", text(&decided.stderr));
    assert!(
        text(&decided.stderr).contains("approve s1, s2"),
        "{}",
        text(&decided.stderr)
    );
    let (code, report, err) = setup.run(&id, &["--resume"], &[]);
    assert_eq!(
        (code, &report["stop_reason"]),
        (0, &json!("completed")),
        "{err}"
    );
    let none = plans(&["pending", &id]);
    assert!(text(&none.stdout).contains("no approval is pending"));

    // The same calls in another plan go through; a new call still waits.
    let (code, _, err) = setup.run(&setup.plan("again.json", two), &gates, &[]);
    assert_eq!(code, 0, "{err}");
    let other = json!([
        {"id": "s1", "type": "tool", "title": "third", "name": "echo", "arguments": {"n": 3}}
    ]);
    let (code, _, err) = setup.run(
        &setup.plan("other.json", other),
        &["--require-approval", "s1"],
        &[],
    );
    assert_eq!(code, 10, "{err}");
}

/// Over HTTP too: a run whose task steps spend their token cap ends `token_capped`; a failure
/// that asks for a replan past the cap ends `replans_capped`, and one whose replan repeats the
/// failed call ends `stalled` (the failure policy set by a JSON Patch before the plan is
/// accepted).
#[test]
fn http_runs_end_token_capped_replans_capped_or_stalled() {
    let setup = Setup::new();
    let tools = setup.catalog(&["fail"]);
    let tasks = json!({"thought": "Two tasks.", "title": "Research", "steps": [
        {"id": "s1", "type": "task", "title": "research the market", "kind": "research"},
        {"id": "s2", "type": "task", "title": "write it up", "kind": "processing",
         "depends_on": ["s1"]}
    ]});
    let fetch = json!({"thought": "One call.", "title": "Fetch", "steps": one("fail")});
    let task_answer =
        json!({"text": "found it", "usage": {"prompt_tokens": 300, "completion_tokens": 40}});
    // In the order they are asked for: a plan, its task, its summary; a plan, its summary; a
    // plan, its replan (the same failing call), its summary.
    let model = replies(
        &setup,
        "replies.json",
        json!([
            tasks.to_string(),
            task_answer,
            "Summary.",
            fetch.to_string(),
            "Summary.",
            fetch.to_string(),
            fetch.to_string(),
            "Summary."
        ]),
    );
    let (_serve, addr, log_path) = setup.serve(&tools, &model);
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let (status, created) = http(
        &addr,
        "POST",
        "/v1/plans",
        &json!({"query": "Research the market", "auto_accept": true}),
    );
    assert_eq!(status, 201, "{created}\n{}", log());
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let (status, body) = http(
        &addr,
        "POST",
        &format!("/v1/plans/{id}/run"),
        &json!({"budget": {"max_tokens": 200}}),
    );
    assert_eq!(status, 202, "{body}");
    assert_eq!(ended_run(&addr, &id, &log)["stop_reason"], "token_capped");

    // Stored for review, given the `replan` policy by a patch, accepted, then run: with no
    // replans allowed, then with a replan that repeats the failed call.
    for (budget, expected) in [
        (json!({"max_replans": 0}), "replans_capped"),
        (json!({}), "stalled"),
    ] {
        let (status, created) = http(
            &addr,
            "POST",
            "/v1/plans",
            &json!({"query": "Fetch the page"}),
        );
        assert_eq!(status, 201, "{created}\n{}", log());
        let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
        let patch = json!([{"op": "add", "path": "/metadata/execution",
                            "value": {"on_failure": "replan", "retries": 0}}]);
        for feedback in [
            json!({"action": "patch", "patch": patch}),
            json!({"action": "accept"}),
        ] {
            let (status, body) = http(
                &addr,
                "POST",
                &format!("/v1/plans/{id}/feedback"),
                &feedback,
            );
            assert_eq!(status, 200, "{body}");
        }
        let (status, body) = http(
            &addr,
            "POST",
            &format!("/v1/plans/{id}/run"),
            &json!({"budget": budget}),
        );
        assert_eq!(status, 202, "{body}");
        assert_eq!(
            ended_run(&addr, &id, &log)["stop_reason"],
            expected,
            "{}",
            log()
        );
    }
}
