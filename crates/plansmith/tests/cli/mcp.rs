//! MCP on the command line: `plansmith mcp` over stdio and `plansmith serve`'s
//! `/mcp` driven by the official Python MCP SDK (a client we did not write); `tools list` and
//! `plan --mcp` against the reference servers, with a dead server beside them. The servers and
//! the SDK are installed by `scripts/mcp-servers.sh` (env `PLANSMITH_TEST_MCP_*`); without
//! them these tests print NOTE … NOT RUN, and fail under CI=true.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::{assert_exit, plansmith, root, text};

fn installed(name: &str, test: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but {name} is not set (.ci/setup.d/30-mcp-servers.sh)"
            );
            println!("NOTE: {test} NOT RUN: set {name} (eval \"$(scripts/mcp-servers.sh)\")");
            None
        }
    }
}

/// Runs `scripts/mcp-client.py` (the Python SDK) with these arguments; its JSON report.
fn python_client(python: &str, args: &[&str]) -> (Output, Value) {
    let output = Command::new(python)
        .arg(root().join("scripts/mcp-client.py"))
        .args(args)
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .output()
        .unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output, report)
}

/// What every session of the Python client must have seen.
fn check_session(report: &Value) {
    assert_eq!(report["server"], "plansmith", "{report}");
    assert_eq!(
        report["tools"],
        json!(["feedback", "plan", "planning", "run", "templates"])
    );
    assert_eq!(report["plan_required"], json!(["query"]));
    let plan = &report["plan"];
    assert_eq!(plan["is_error"], false, "{plan}");
    assert_eq!(plan["structured"]["status"], "ready");
    assert_eq!(plan["structured"]["state"], "awaiting_review");
    assert_eq!(
        plan["structured"]["plan"]["steps"][1]["action"]["name"],
        "send_email"
    );
    assert!(
        plan["text"]
            .as_str()
            .unwrap()
            .contains("Progress: 0/3 (0.0%)")
    );
    let id = plan["structured"]["plan_id"].as_str().unwrap();
    assert_eq!(report["get"]["structured"]["plan"]["id"], id);
    let mark = report["mark"]["text"].as_str().unwrap();
    // OpenManus's view: steps numbered from 0, as `step_index` counts them (0 was marked).
    assert!(
        mark.contains("Progress: 1/3 (33.3%)")
            && mark.contains("\n0. [✓] ")
            && mark.contains("\n1. [ ] "),
        "{mark}"
    );
    assert_eq!(report["accept"]["structured"]["state"], "accepted");
    assert_eq!(report["accept"]["structured"]["plan"]["version"], 3);
    assert_eq!(report["accept_again"]["is_error"], true);
    assert!(
        report["accept_again"]["text"]
            .as_str()
            .unwrap()
            .contains("it is accepted")
    );
    assert_eq!(
        report["unknown"]["text"], "no plan with id `no-such-plan`",
        "{report}"
    );
}

#[test]
fn mcp_stdio_with_the_python_sdk() {
    let Some(python) = installed("PLANSMITH_TEST_MCP_PYTHON", "mcp_stdio_with_the_python_sdk")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let mut args = vec!["stdio", env!("CARGO_BIN_EXE_plansmith")];
    args.extend(mcp_stdio_args(&store));
    let (output, report) = python_client(&python, &args);
    assert_exit(&output, 0);
    check_session(&report);
    assert_eq!(report["list"]["structured"]["total"], 1);
    // The plan is in the store `plansmith plans` reads.
    let listed = plansmith(&["plans", "--store", &store, "list", "--state", "accepted"]);
    assert_exit(&listed, 0);
    assert!(text(&listed.stdout).contains("Paris weather to Bob"));
}

/// `plansmith mcp` over the example tools, the scripted weather reply and `store`.
fn mcp_stdio_args(store: &str) -> [&str; 7] {
    [
        "mcp",
        "--tools",
        "examples/tools.json",
        "--model",
        "scripted:examples/replies/weather-email.json",
        "--store",
        store,
    ]
}

#[test]
fn mcp_stdio_answers_a_malformed_message_with_its_error() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(mcp_stdio_args(&store))
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let lines = [
        "this is not JSON".to_owned(),
        json!({"id": 7, "hello": "world"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": "oops"}).to_string(),
        initialize.to_string(),
    ];
    for line in &lines {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    // Read on a thread: a server that drops a line never answers it, and the test must fail
    // then, not hang.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let (sender, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..4 {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let _ = sender.send(line);
        }
    });
    let mut answers: Vec<Value> = Vec::new();
    for _ in 0..4 {
        let Ok(line) = answered.recv_timeout(std::time::Duration::from_secs(30)) else {
            let _ = child.kill();
            panic!("only these answers came to 4 messages: {answers:?}");
        };
        answers.push(serde_json::from_str(&line).unwrap_or_else(|err| panic!("{err}: {line}")));
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let by_id = |id: Value| answers.iter().find(|a| a["id"] == id).cloned();
    assert_eq!(
        by_id(Value::Null).unwrap()["error"]["code"],
        -32700,
        "{answers:?}"
    );
    assert_eq!(
        by_id(json!(7)).unwrap()["error"]["code"],
        -32600,
        "{answers:?}"
    );
    assert_eq!(
        by_id(json!(8)).unwrap()["error"]["code"],
        -32600,
        "{answers:?}"
    );
    assert!(
        by_id(json!(1)).unwrap()["result"]["serverInfo"].is_object(),
        "{answers:?}"
    );
}

/// `plansmith serve` on a free port; returns the child and its base URL.
fn serve(store: &str, model: &str, tokens: Option<&str>) -> (std::process::Child, String) {
    serve_with(&[], store, model, tokens)
}

/// [`serve`] with global options (`--config FILE`) before the command.
fn serve_with(
    global: &[&str],
    store: &str,
    model: &str,
    tokens: Option<&str>,
) -> (std::process::Child, String) {
    started(serve_command(
        global,
        "examples/tools.json",
        store,
        model,
        tokens,
    ))
}

/// The command of [`serve_with`] over the catalog `tools`, to add options to.
fn serve_command(
    global: &[&str],
    tools: &str,
    store: &str,
    model: &str,
    tokens: Option<&str>,
) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_plansmith"));
    command
        .args(global)
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--tools",
            tools,
            "--model",
            model,
            "--store",
            store,
        ])
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(tokens) = tokens {
        command.env("PLANSMITH_TOKENS", tokens);
    }
    command
}

/// Spawns a `serve` command; the child and its base URL. Only stderr's first line is read,
/// then the pipe is closed: the server must go on (and finish its runs) with nobody reading
/// its logs, as under a supervisor that went away.
fn started(mut command: Command) -> (std::process::Child, String) {
    let mut child = command.spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line}"))
        .to_owned();
    (child, base)
}

#[test]
fn mcp_over_streamable_http_with_the_python_sdk() {
    let Some(python) = installed(
        "PLANSMITH_TEST_MCP_PYTHON",
        "mcp_over_streamable_http_with_the_python_sdk",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    // Two sessions plan once each: the recorded reply, twice.
    let script: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("examples/replies/weather-email.json")).unwrap(),
    )
    .unwrap();
    let turn = script["turns"][0].clone();
    let model = write(
        dir.path(),
        "twice.json",
        &json!({"capabilities": script["capabilities"], "turns": [turn.clone(), turn]}),
    );
    // Tokens: alice and bob are owners; each sees only their own plans over MCP too.
    let (mut child, base) = serve(
        &store,
        &format!("scripted:{model}"),
        Some("t-alice:alice,t-bob:bob"),
    );
    let url = format!("{base}/mcp");
    let (alice, report) = python_client(&python, &["http", &url, "t-alice"]);
    let (bob, bob_report) = python_client(&python, &["http", &url, "t-bob"]);
    let (nobody, _) = python_client(&python, &["http", &url]);
    let raw = raw_post(&base, "/mcp", None);
    let raw_ok = raw_post(&base, "/mcp", Some("t-alice"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_exit(&alice, 0);
    check_session(&report);
    assert_eq!(
        report["plan"]["structured"]["plan"]["owner"], "alice",
        "{report}"
    );
    // Bob's session made one plan of his own; alice's is not visible to him.
    assert_exit(&bob, 0);
    assert_eq!(bob_report["list"]["structured"]["total"], 1, "{bob_report}");
    let bob_id = bob_report["plan"]["structured"]["plan_id"]
        .as_str()
        .unwrap();
    let alice_id = report["plan"]["structured"]["plan_id"].as_str().unwrap();
    assert_ne!(bob_id, alice_id);
    assert_eq!(
        bob_report["list"]["structured"]["plans"][0]["plan_id"],
        bob_id
    );
    // Without a token the endpoint answers 401 (in the error table's shape) and the client
    // gives up; with one, the request reaches the MCP service.
    assert_ne!(nobody.status.code(), Some(0));
    assert!(
        text(&nobody.stderr).contains("Server returned an error response"),
        "{}",
        text(&nobody.stderr)
    );
    assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    assert!(raw.contains(r#""code":"unauthorized""#), "{raw}");
    assert!(raw_ok.starts_with("HTTP/1.1 200"), "{raw_ok}");
}

/// A bare HTTP/1.1 `initialize` POST (no client library), the whole response as text.
fn raw_post(base: &str, path: &str, token: Option<&str>) -> String {
    use std::io::{Read, Write};
    let host = base.trim_start_matches("http://");
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    // An SSE answer stays open after the first event: read what arrives within the timeout.
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&response).contains("serverInfo") {
            break;
        }
    }
    String::from_utf8_lossy(&response).into_owned()
}

fn write(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(value).unwrap()).unwrap();
    path.display().to_string()
}

#[test]
fn tools_list_and_plan_with_mcp_servers() {
    let test = "tools_list_and_plan_with_mcp_servers";
    let (Some(filesystem), Some(time)) = (
        installed("PLANSMITH_TEST_MCP_FILESYSTEM", test),
        installed("PLANSMITH_TEST_MCP_TIME", test),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().canonicalize().unwrap();
    let fixture = root().join("crates/plansmith-mcp/tests/fixtures/fault_server.py");
    let servers = write(
        dir.path(),
        "servers.json",
        &json!({"mcpServers": {
            "files": {"command": filesystem, "args": [files]},
            "time": {"command": time, "args": ["--local-timezone", "UTC"]},
            "dead": {"command": "python3", "args": [fixture, "exit"]},
        }}),
    );
    let listed = plansmith(&["tools", "list", "--mcp", &servers]);
    assert_exit(&listed, 2);
    let stdout = text(&listed.stdout);
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} not in\n{stdout}"))
            .to_owned()
    };
    assert!(
        line("write_file").contains("[files] destructive"),
        "{stdout}"
    );
    assert!(
        line("get_current_time").contains("[time] read-only"),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 problem(s)") || stdout.contains("1 problem(s)"),
        "{stdout}"
    );
    let stderr = text(&listed.stderr);
    assert!(
        stderr.contains("problem: server `dead`: initialize failed")
            && stderr.contains("missing API_KEY"),
        "{stderr}"
    );
    let json_list = plansmith(&["tools", "list", "--mcp", &servers, "--json"]);
    let report: Value = serde_json::from_slice(&json_list.stdout).unwrap();
    let write_file = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "write_file")
        .unwrap();
    assert_eq!(write_file["server"], "files");
    assert_eq!(write_file["destructive"], true);
    assert_eq!(report["problems"][0]["server"], "dead");

    // Plan against the live servers: the write is flagged for approval; the dead server is a
    // warning and planning goes on.
    let note = files.join("note.txt");
    let reply = json!({"title": "Time note", "steps": [
        {"id": "s1", "type": "tool", "name": "get_current_time", "arguments": {"timezone": "UTC"}},
        {"id": "s2", "type": "tool", "name": "write_file", "depends_on": ["s1"],
         "arguments": {"path": note, "content": {"$ref": "s1.output.datetime"}}}
    ]});
    let model = write(
        dir.path(),
        "reply.json",
        &json!({"capabilities": {"json_schema": true}, "turns": [reply.to_string()]}),
    );
    let planned = plansmith(&[
        "plan",
        "Write the current UTC time to note.txt",
        "--mcp",
        &servers,
        "--model",
        &format!("scripted:{model}"),
    ]);
    assert_exit(&planned, 0);
    let stdout = text(&planned.stdout);
    assert!(
        stdout.contains("[s2] write_file (after s1) [needs approval]")
            || stdout.contains("(after s1) [needs approval]"),
        "{stdout}"
    );
    assert!(stdout.contains("tool get_current_time"), "{stdout}");
    assert!(
        text(&planned.stderr).contains("warning: server `dead`"),
        "{}",
        text(&planned.stderr)
    );

    // `validate` checks a plan against the same servers' tools; without them the tools are
    // unknown.
    let plan_file = write(dir.path(), "plan.json", &reply);
    let checked = plansmith(&["validate", &plan_file, "--mcp", &servers]);
    assert_exit(&checked, 0);
    let unchecked = plansmith(&["validate", &plan_file, "--json"]);
    assert_exit(&unchecked, 1);
    assert!(
        text(&unchecked.stdout).contains("unknown_tool"),
        "{}",
        text(&unchecked.stdout)
    );
}

/// The scripted turns of the elicitation scenario: a plan that lacks the recipient, the plan
/// with it; a plan on a daily schedule, the plan without; the recipient missing again.
fn elicitation_script(dir: &Path) -> String {
    let weather_email: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("examples/replies/weather-email.json")).unwrap(),
    )
    .unwrap();
    let no_recipient = json!({"title": "Paris weather to a friend", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "s2", "type": "tool", "name": "send_email", "depends_on": ["s1"],
         "arguments": {"subject": "Weather", "body": {"$ref": "s1.output.summary"}}}]})
    .to_string();
    let daily = json!({"title": "Paris weather every morning", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"},
         "schedule": {"type": "daily", "time": "09:00"}}]})
    .to_string();
    let once = json!({"title": "Paris weather", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}}]})
    .to_string();
    write(
        dir,
        "elicit.json",
        &json!({"capabilities": weather_email["capabilities"], "turns": [
            no_recipient, weather_email["turns"][0], daily, once, no_recipient]}),
    )
}

/// The Python client's scenario `flag` (`--elicit`, `--tasks`) over stdio, against `plansmith
/// mcp` with `model` on `store`.
fn python_over_stdio(python: &str, flag: &str, store: &str, model: &str) -> (Output, Value) {
    let mut args = vec![flag, "stdio", env!("CARGO_BIN_EXE_plansmith")];
    let mut server = mcp_stdio_args(store);
    server[4] = model;
    args.extend(server);
    python_client(python, &args)
}

/// What the elicitation scenario must have seen, over either transport.
fn check_elicitation(report: &Value) {
    // Accepted: the form's answer fills the recipient, and the replan is the plan's version 2.
    let answered = &report["answered"]["structured"];
    assert_eq!(answered["status"], "ready", "{report}");
    assert_eq!(answered["plan"]["version"], 2, "{answered}");
    assert_eq!(
        answered["plan"]["steps"][1]["action"]["arguments"]["to"],
        "bob@example.com"
    );
    assert_eq!(answered["asked"], json!(["q1: answered"]));
    let asked = &report["asked"];
    assert_eq!(
        asked[0]["schema"]["properties"]["to"]["format"], "email",
        "a missing email is asked as a typed form field: {asked}"
    );
    // Declined: the recommended answer ("no" to a recurring schedule) is taken and recorded.
    let declined = &report["declined"]["structured"];
    assert_eq!(declined["status"], "ready", "{report}");
    assert!(declined["plan"]["steps"][0].get("schedule").is_none());
    let assumption = &declined["plan"]["metadata"]["assumptions"][0];
    assert_eq!(assumption["answer"], "no", "{declined}");
    assert_eq!(assumption["kind"], "risk_confirmation");
    assert!(
        assumption["reason"].as_str().unwrap().contains("declined"),
        "{assumption}"
    );
    assert_eq!(
        asked[1]["schema"]["properties"]["answer"]["enum"],
        json!(["yes", "no"])
    );
    // Cancelled: nothing replanned, the plan waits for answers.
    let cancelled = &report["cancelled"]["structured"];
    assert_eq!(cancelled["cancelled"], true, "{report}");
    assert_eq!(cancelled["status"], "needs_input");
    assert_eq!(cancelled["plan"]["version"], 1);
    assert_eq!(cancelled["plan"]["questions"][0]["argument"], "to");
    assert_eq!(asked.as_array().map(Vec::len), Some(3), "{asked}");
}

#[test]
fn mcp_questions_asked_through_elicitation_with_the_python_sdk() {
    let test = "mcp_questions_asked_through_elicitation_with_the_python_sdk";
    let Some(python) = installed("PLANSMITH_TEST_MCP_PYTHON", test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let model = format!("scripted:{}", elicitation_script(dir.path()));

    // Over stdio.
    let store = format!("sqlite:{}", dir.path().join("stdio.db").display());
    let (output, report) = python_over_stdio(&python, "--elicit", &store, &model);
    assert_exit(&output, 0);
    check_elicitation(&report);
    // The answer is in the plan's history, as a replan of answers.
    let id = report["declined"]["structured"]["plan_id"]
        .as_str()
        .unwrap();
    let history = plansmith(&["plans", "--store", &store, "history", id]);
    assert_exit(&history, 0);
    assert!(
        text(&history.stdout).contains("answer"),
        "{}",
        text(&history.stdout)
    );

    // Over `plansmith serve`'s streamable HTTP.
    let store = format!("sqlite:{}", dir.path().join("http.db").display());
    let (mut child, base) = serve(&store, &model, None);
    let url = format!("{base}/mcp");
    let (output, report) = python_client(&python, &["--elicit", "http", &url]);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_exit(&output, 0);
    check_elicitation(&report);
}

/// The config file's `[investigate]` names a read-only tool of a real MCP server (the memory
/// server's `search_nodes`, a keyword search, so each name in the request is looked up):
/// `plan`, `serve` and `mcp` all investigate with it before planning, and a tool that is not
/// read-only is refused by name.
#[test]
fn plan_serve_and_mcp_investigate_with_a_read_only_mcp_tool() {
    let test = "plan_serve_and_mcp_investigate_with_a_read_only_mcp_tool";
    let (Some(memory), Some(python)) = (
        installed("PLANSMITH_TEST_MCP_MEMORY", test),
        installed("PLANSMITH_TEST_MCP_PYTHON", test),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("memory.jsonl");
    std::fs::write(
        &graph,
        [
            json!({"type": "entity", "name": "Bob", "entityType": "person",
                   "observations": ["email address: bob@example.com", "lives in Lyon"]}),
            json!({"type": "entity", "name": "Carol", "entityType": "person",
                   "observations": ["email address: carol@example.com"]}),
        ]
        .map(|line| line.to_string())
        .join("\n"),
    )
    .unwrap();
    let servers = write(
        dir.path(),
        "servers.json",
        &json!({"mcpServers": {"memory": {"command": memory,
            "env": {"MEMORY_FILE_PATH": graph.display().to_string()}}}}),
    );
    let config = |tool: &str| {
        let path = dir.path().join(format!("{tool}.toml"));
        std::fs::write(
            &path,
            format!("[investigate]\nmcp = {servers:?}\ntool = \"{tool}\"\nlookup = \"terms\"\n"),
        )
        .unwrap();
        path.display().to_string()
    };
    let good = config("search_nodes");
    let script: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("examples/replies/weather-email.json")).unwrap(),
    )
    .unwrap();
    let model = format!(
        "scripted:{}",
        write(
            dir.path(),
            "model.json",
            &json!({"capabilities": script["capabilities"], "turns": [script["turns"][0]],
                    "repeat": true}),
        )
    );
    let query = "What's the weather in Paris? Email it to Bob";
    let found_bob = |investigation: &Value| {
        let findings = investigation["findings"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(investigation["investigator"], "mcp:memory/search_nodes");
        assert!(
            findings
                .iter()
                .any(|f| f["source"] == "memory/search_nodes \"bob\""
                    && f["text"].as_str().unwrap().contains("bob@example.com")),
            "{investigation}"
        );
        assert!(
            !findings
                .iter()
                .any(|f| f["text"].as_str().unwrap().contains("carol")),
            "only what the request names is looked up: {investigation}"
        );
    };

    // plan
    let planned = plansmith(&[
        "--config",
        &good,
        "plan",
        query,
        "--tools",
        "examples/tools.json",
        "--model",
        &model,
        "--outcome-json",
    ]);
    assert_exit(&planned, 0);
    let outcome: Value = serde_json::from_slice(&planned.stdout).unwrap();
    found_bob(&outcome["diagnostics"]["investigation"]);

    // mcp, driven by the Python SDK
    let store = format!("sqlite:{}", dir.path().join("mcp.db").display());
    let (output, report) = python_client(
        &python,
        &[
            "--plan",
            query,
            "stdio",
            env!("CARGO_BIN_EXE_plansmith"),
            "--config",
            &good,
            "mcp",
            "--tools",
            "examples/tools.json",
            "--model",
            &model,
            "--store",
            &store,
        ],
    );
    assert_exit(&output, 0);
    found_bob(&report["plan"]["structured"]["diagnostics"]["investigation"]);

    // serve
    let store = format!("sqlite:{}", dir.path().join("serve.db").display());
    let (mut child, base) = serve_with(&["--config", &good], &store, &model, None);
    let addr = base.trim_start_matches("http://");
    let (status, response) = crate::http_request(
        addr,
        "POST /v1/plans",
        "",
        &json!({"query": query}).to_string(),
    )
    .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(status, 201, "{response}");
    let body: Value = serde_json::from_str(&response).unwrap();
    found_bob(&body["diagnostics"]["investigation"]);

    // A tool that writes is refused, by name, before anything is planned.
    let bad = config("create_entities");
    let refused = plansmith(&[
        "--config",
        &bad,
        "plan",
        query,
        "--tools",
        "examples/tools.json",
        "--model",
        &model,
    ]);
    assert_exit(&refused, 2);
    assert!(
        text(&refused.stderr).contains("`create_entities` does not declare `readOnlyHint: true`"),
        "{}",
        text(&refused.stderr)
    );
}

/// What a session of `mcp-client.py --tasks` or `--rounds` must have seen: the elicitation
/// scenario; with tasks, each `plan` call a task that asked its question through
/// `input_required` and completed, and without, no task at all.
fn check_rounds(mode: &str, report: &Value) {
    check_elicitation(report);
    assert!(
        report["made_up_state"]
            .as_str()
            .is_some_and(|e| e.contains("names no questions this server is asking you")),
        "{report}"
    );
    let tasks = report["tasks"].as_array().cloned().unwrap_or_default();
    let plans: Vec<&Value> = tasks.iter().filter(|t| t["tool"] == "plan").collect();
    if mode == "--rounds" {
        assert!(tasks.is_empty(), "{report}");
        return;
    }
    assert_eq!(plans.len(), 3, "{report}");
    for task in plans {
        assert_eq!(
            task["statuses"],
            json!(["working", "input_required", "completed"]),
            "{task}"
        );
        assert_eq!(task["answered"].as_array().map(Vec::len), Some(1), "{task}");
    }
}

/// The Python SDK's high-level client (2026-07-28) asks and answers the same questions two
/// ways: with the tasks extension (written in `mcp-client.py` on the SDK's extension hooks),
/// each `plan` call is a task whose question comes back as the task's `input_required`; without
/// it, the call answers `InputRequiredResult` and the SDK calls again with the answer (rounds).
/// Either way, over stdio and `/mcp`, the questions are answered (accepted, declined, cancelled)
/// through the client's elicitation callback; over `/mcp` the answered plan is then run to its
/// end, its destructive mail step approved through the client the same way, and the mail
/// carries the weather by `$ref`.
#[test]
fn mcp_questions_through_tasks_and_rounds_with_the_python_sdk() {
    let test = "mcp_questions_through_tasks_and_rounds_with_the_python_sdk";
    let Some(python) = installed("PLANSMITH_TEST_MCP_PYTHON", test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let model = format!("scripted:{}", elicitation_script(dir.path()));
    // The example tools, the mail marked destructive: a run asks before it sends.
    let mut tools: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("examples/tools.json")).unwrap())
            .unwrap();
    for tool in tools["tools"].as_array_mut().unwrap() {
        if tool["name"] == "send_email" {
            tool["annotations"] = json!({"destructiveHint": true});
        }
    }
    let tools = write(dir.path(), "tools.json", &tools);
    for mode in ["--tasks", "--rounds"] {
        let store = format!(
            "sqlite:{}",
            dir.path().join(format!("stdio{mode}.db")).display()
        );
        let (output, report) = python_over_stdio(&python, mode, &store, &model);
        assert_exit(&output, 0);
        assert_eq!(report["protocol"], "2026-07-28", "{report}");
        check_rounds(mode, &report);

        let store = format!(
            "sqlite:{}",
            dir.path().join(format!("http{mode}.db")).display()
        );
        let outbox = dir.path().join(format!("outbox{mode}.jsonl"));
        let mut command = serve_command(&[], &tools, &store, &model, None);
        command
            .args(["--commands", "examples/commands.json"])
            .env("PLANSMITH_OUTBOX", &outbox);
        let (mut child, base) = started(command);
        let url = format!("{base}/mcp");
        let (output, report) = python_client(&python, &[mode, "--run", "http", &url]);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_exit(&output, 0);
        check_rounds(mode, &report);
        let run = &report["run"]["structured"];
        assert_eq!(run["state"], "completed", "{report}");
        assert_eq!(run["stop_reason"], "completed");
        assert!(
            run["asked"].as_array().is_some_and(|asked| asked
                .iter()
                .any(|a| a.as_str().is_some_and(|a| a.starts_with("s2: approved")))),
            "the mail step is approved through the client: {run}"
        );
        let run_asked = &report["run_asked"];
        assert_eq!(run_asked.as_array().map(Vec::len), Some(1), "{report}");
        assert!(
            run_asked[0]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Run step s2")),
            "{run_asked}"
        );
        if mode == "--tasks" {
            let last = &report["tasks"][3];
            assert_eq!(last["tool"], "run", "{report}");
            let prefix = format!("run.{}.", run["plan_id"].as_str().unwrap());
            assert!(
                last["task_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with(&prefix)),
                "{last}"
            );
            assert_eq!(
                last["statuses"],
                json!(["working", "input_required", "completed"]),
                "{last}"
            );
        }
        let mails = std::fs::read_to_string(&outbox).unwrap();
        let mail: Value = serde_json::from_str(mails.lines().next().unwrap()).unwrap();
        assert_eq!(mails.lines().count(), 1, "{mails}");
        assert_eq!(mail["to"], "bob@example.com");
        assert!(
            mail["body"]
                .as_str()
                .unwrap()
                .contains("No forecast for Paris"),
            "the weather step's summary, by $ref: {mail}"
        );
    }
}

/// A `run` task outlives the server that made it: the Python SDK's client starts `run` as a
/// task on `serve`'s `/mcp`, the server is killed (SIGKILL) while the run's slow first step
/// works, and the same task id, polled on a new `serve` over the same store, follows the run
/// that the new process carried on to its end; the mail is sent once. Another owner's poll of
/// that id, and an id naming no plan, answer "no task".
#[test]
fn a_run_task_survives_a_restart_of_serve_with_the_python_sdk() {
    let test = "a_run_task_survives_a_restart_of_serve_with_the_python_sdk";
    let Some(python) = installed("PLANSMITH_TEST_MCP_PYTHON", test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let outbox = dir.path().join("outbox.jsonl");
    let started_weather = dir.path().join("weather-started");
    // The weather step takes 4 s: time to kill the server while it works.
    let commands = write(
        dir.path(),
        "commands.json",
        &json!({"tools": {
            "get_weather": {"command": ["sh", "-c", format!(
                "touch {}; sleep 4; exec python3 examples/tools/get_weather.py",
                started_weather.display())], "timeout_ms": 30000},
            "send_email": {"command": ["python3", "examples/tools/send_email.py"],
                "timeout_ms": 10000}}}),
    );
    let tokens = "t-alice:alice,t-bob:bob";
    let server = || {
        let mut command = serve_command(
            &[],
            "examples/tools.json",
            &store,
            "scripted:examples/replies/weather-email.json",
            Some(tokens),
        );
        command
            .args(["--commands", &commands, "--lease-secs", "1"])
            .env("PLANSMITH_OUTBOX", &outbox);
        started(command)
    };

    let (mut first, base) = server();
    let url = format!("{base}/mcp");
    let (output, report) = python_client(
        &python,
        &["--tasks", "--start-run", "http", &url, "t-alice"],
    );
    if output.status.success() {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !started_weather.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    first.kill().unwrap();
    first.wait().unwrap();
    assert_exit(&output, 0);
    assert_eq!(report["status"], "working", "{report}");
    assert!(
        started_weather.exists(),
        "the run's first step never started"
    );
    let id = report["task_id"].as_str().unwrap().to_owned();
    let plan_id = report["plan"]["structured"]["plan_id"].as_str().unwrap();
    assert!(id.starts_with(&format!("run.{plan_id}.")), "{id}");

    let (mut second, base) = server();
    let url = format!("{base}/mcp");
    let (bob, bobs) = python_client(&python, &["--tasks", "--await", &id, "http", &url, "t-bob"]);
    let (made_up, made_ups) = python_client(
        &python,
        &[
            "--tasks",
            "--await",
            "run.no-such-plan.1",
            "http",
            &url,
            "t-alice",
        ],
    );
    let (output, report) = python_client(
        &python,
        &["--tasks", "--await", &id, "http", &url, "t-alice"],
    );
    second.kill().unwrap();
    second.wait().unwrap();
    for (output, report) in [(&bob, &bobs), (&made_up, &made_ups)] {
        assert_exit(output, 0);
        assert!(
            report["answer"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("no task with id")),
            "{report}"
        );
    }
    assert_exit(&output, 0);
    let answer = &report["answer"]["structured"];
    assert_eq!(answer["state"], "completed", "{report}");
    assert_eq!(answer["plan_id"], plan_id);
    assert_eq!(
        report["tasks"][0]["statuses"],
        json!(["working", "completed"]),
        "{report}"
    );
    let mails = std::fs::read_to_string(&outbox).unwrap();
    assert_eq!(mails.lines().count(), 1, "{mails}");
}
