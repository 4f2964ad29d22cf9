//! `plansmith serve` as a process: an OpenAPI-driven fuzz run (schemathesis, against the
//! server's own `/openapi.json`) followed by hostile bodies (JSON Patch amplification, the
//! longest step and tool lists the body limit allows), with zero 5xx answers, none slower than
//! 2 s and the server's memory under 500 MiB, without and with API tokens; two
//! processes on one PostgreSQL store.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, root, text};

/// A `plansmith serve` child, killed on drop.
struct Serve {
    child: Child,
    addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET; returns (status, body).
fn get(addr: &str, path: &str, token: Option<&str>) -> std::io::Result<(u16, String)> {
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    crate::http_request(addr, &format!("GET {path}"), &auth, "")
}

/// Starts `plansmith serve` on a free loopback port over a fresh SQLite store, with a scripted
/// model that answers instantly and never runs out.
fn serve(store: &Path, tokens: Option<&str>) -> Serve {
    serve_on(&format!("sqlite:{}", store.display()), tokens)
}

/// [`serve`] over the store named by `store` (`sqlite:…`, `postgres://…`).
fn serve_on(store: &str, tokens: Option<&str>) -> Serve {
    serve_with(store, tokens, &[], None)
}

/// [`serve_on`] with more environment variables, and its stderr in `log` if given.
fn serve_with(
    store: &str,
    tokens: Option<&str>,
    env: &[(&str, &str)],
    log: Option<&Path>,
) -> Serve {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut command = Command::new(env!("CARGO_BIN_EXE_plansmith"));
    command
        .args(["serve", "--addr", &addr, "--tools", "examples/tools.json"])
        .args([
            "--model",
            "scripted:examples/replies/weather-email-repeat.json",
        ])
        .args(["--store", store])
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .env_remove("PLANSMITH_TOKENS")
        .env_remove("PLANSMITH_RATE_LIMIT")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(tokens) = tokens {
        command.env("PLANSMITH_TOKENS", tokens);
    }
    command.envs(env.iter().copied());
    if let Some(log) = log {
        command.stderr(std::fs::File::create(log).unwrap());
    }
    let serve = Serve {
        child: command.spawn().unwrap(),
        addr,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&serve.addr, "/healthz", None).map(|r| r.0).ok() != Some(200) {
        assert!(Instant::now() < deadline, "plansmith serve did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    serve
}

fn schemathesis() -> Option<String> {
    match std::env::var("PLANSMITH_TEST_SCHEMATHESIS") {
        Ok(path) if !path.trim().is_empty() => Some(path),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but PLANSMITH_TEST_SCHEMATHESIS is not set (.ci/setup.d/45-schemathesis.sh)"
            );
            let _ = writeln!(
                std::io::stderr(),
                "NOTE: schemathesis fuzz run of plansmith serve NOT RUN (export \
                 PLANSMITH_TEST_SCHEMATHESIS=$(scripts/schemathesis.sh))"
            );
            None
        }
    }
}

/// 5xx answers the server itself counted (its per-route latency histogram has the status).
fn server_errors(addr: &str, token: Option<&str>) -> Vec<String> {
    let (status, metrics) = get(addr, "/metrics", token).unwrap();
    assert_eq!(status, 200);
    metrics
        .lines()
        .filter(|l| l.starts_with("plansmith_http_request_seconds_count"))
        .filter(|l| l.contains("status=\"5"))
        .map(str::to_owned)
        .collect()
}

/// Runs schemathesis against a running server; panics with its output unless it passed.
fn fuzz(tool: &str, serve: &Serve, token: Option<&str>, report: &Path) {
    let mut command = Command::new(tool);
    command
        .arg("run")
        .arg(format!("http://{}/openapi.json", serve.addr))
        // Every check: no 5xx, and status codes, content types, headers, bodies and SSE events
        // as documented, schema-violating requests rejected, stateful links followed. Except
        // `positive_data_acceptance`: JSON Schema counts `68624.0` as an integer and treats
        // `format` as an annotation, serde does not, so such bodies get a (documented) 400. And
        // `ensure_resource_availability`: it follows the link from `POST /v1/templates` to
        // `…/instantiate` but fills the body's own `version` at random, so a template created as
        // version 1 and asked for as version 3 is a right 404, reported as "created resource not
        // found" (seen once in CI).
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance,ensure_resource_availability",
        ])
        // The `examples` phase has nothing to use (the document has no examples) and trips on
        // a hypothesis cache error in this version.
        .args(["--phases", "coverage,fuzzing,stateful"])
        // The live event stream never ends by design (covered by the API tests).
        .args(["--exclude-path", "/v1/plans/{id}/events"])
        .args(["--max-examples", "40", "--max-time", "60"])
        // Every answer within 2 s, the largest bodies the schema allows (JSON Patch lists,
        // 500-step plans) included.
        .args(["--max-response-time", "2"])
        // One worker: with two, hypothesis parses lambda sources from two threads at once, and
        // CPython 3.11's parser is not thread-safe there ("SystemError: AST constructor
        // recursion depth mismatch", seen in a clean-clone CI run).
        .args(["--request-timeout", "10", "--workers", "1", "--seed", "7"])
        .args(["--suppress-health-check", "all", "--no-color"])
        .args(["--generation-database", "none"])
        .arg("--report-junit-path")
        .arg(report)
        .args(["--report", "junit"])
        // schemathesis keeps a cache (`.schemathesis/`) in its working directory: not the
        // source tree.
        .current_dir(report.parent().unwrap_or(&root()));
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let started = Instant::now();
    let output = command.output().unwrap();
    let stdout = text(&output.stdout);
    println!(
        "schemathesis ({:.0} s, token: {}):\n{}",
        started.elapsed().as_secs_f64(),
        token.is_some(),
        stdout
            .lines()
            .rev()
            .take(12)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The summary line: "N failures, M errors in T s" / "1 warning in T s". Any failure fails
    // the test. An error is schemathesis failing to run a case itself; the only one accepted
    // is hypothesis' internal cache error (`FlakyFailure` over a `KeyError` in its lambda
    // source cache) that this version hits on the larger request schemas.
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("===="))
        .unwrap_or_default()
        .to_owned();
    assert!(
        !summary.contains("failure"),
        "schemathesis found problems:\n{stdout}\n{}",
        text(&output.stderr)
    );
    if !output.status.success() {
        let internal = stdout.contains("hypothesis.errors.FlakyFailure")
            && stdout.contains("AST_LAMBDAS_CACHE");
        assert!(
            internal && summary.contains("error"),
            "schemathesis did not run cleanly:\n{stdout}\n{}",
            text(&output.stderr)
        );
        println!(
            "NOTE: schemathesis hit its internal hypothesis cache error on some cases: {summary}"
        );
    }
    hostile(serve, token);
    let errors = server_errors(&serve.addr, token);
    assert!(errors.is_empty(), "the server answered 5xx: {errors:#?}");
    if let Some(peak) = peak_resident_mib(serve.child.id()) {
        println!("plansmith serve peak resident memory: {peak} MiB");
        assert!(
            peak < 500,
            "the server's resident memory peaked at {peak} MiB"
        );
    }
}

/// The bodies an attacker sends that random generation from the schema rarely reaches: JSON
/// Patches of doubling copies and of too many operations (on the feedback and check routes),
/// and step and tool lists as long as the body limit allows (a plan template, a replan's
/// previous plan, a request's own catalog, a patch adding steps), and a body over the limit.
/// Each is answered within 2 s with the status it must get, never a 5xx; the caller then checks
/// the server's 5xx count and its peak memory, as after the fuzz run.
fn hostile(serve: &Serve, token: Option<&str>) {
    use serde_json::{Value, json};
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let send = |line: &str, body: &Value| {
        let body = body.to_string();
        let started = Instant::now();
        let (status, answer) = match crate::http_request(&serve.addr, line, &auth, &body) {
            Ok(answer) => answer,
            // A body over the limit is answered `413` before it is read, and the connection
            // closed: the rest of the upload then meets a closed socket, and the answer may
            // be lost to the reset. Refused unread either way.
            Err(err) if body.len() > (1 << 20) => {
                println!("hostile: {line}: connection closed during the upload ({err})");
                (413, String::new())
            }
            Err(err) => panic!("{line}: {err}"),
        };
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "{line} with a {} byte body took {took:?}",
            body.len()
        );
        assert!((200..500).contains(&status), "{line}: {status} {answer}");
        println!(
            "hostile: {line}, {} bytes: {status} in {} ms",
            body.len(),
            took.as_millis()
        );
        (status, answer)
    };
    let (status, created) = send(
        "POST /v1/plans",
        &json!({"query": "What's the weather in Paris? Email it to bob@example.com"}),
    );
    assert_eq!(status, 201, "{created}");
    let created: Value = serde_json::from_str(&created).unwrap();
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let plan = created["stored"]["plan"].clone();

    let doubling = |n: usize| -> Value {
        (0..n)
            .map(|_| json!({"op": "copy", "from": "/steps", "path": "/steps/0"}))
            .collect()
    };
    let step = |i: usize| json!({"id": format!("s{i}"), "title": "t", "action": {"type": "reply", "text": "ok"}});
    // As many steps or tools as fit in the default 1 MiB body.
    let steps: Vec<Value> = (1..=12_000).map(step).collect();
    let tools: Vec<Value> = (0..6_000)
        .map(|i| json!({"name": format!("t{i}"), "description": "d", "inputSchema": {"type": "object"}}))
        .collect();
    let adds: Vec<Value> = (0..900)
        .map(|i| json!({"op": "add", "path": "/steps/-", "value": step(10_000 + i)}))
        .collect();
    let tests: Vec<Value> = (0..5_000)
        .map(|_| json!({"op": "test", "path": "/id", "value": id}))
        .collect();
    let mut many = plan.clone();
    many["steps"] = Value::Array(steps.clone());
    let feedback = format!("POST /v1/plans/{id}/feedback");
    let check = format!("POST /v1/plans/{id}/check");
    let (plans, templates) = ("POST /v1/plans".to_owned(), "POST /v1/templates".to_owned());
    // Each with the status it must get: refused (400) by the patch bounds (operations, bytes
    // brought in, steps) and the step cap of every plan document, refused unread (413) over
    // the body limit; a request's own catalog of thousands of tools is planned with (201).
    let cases = [
        (
            &feedback,
            json!({"action": "patch", "patch": doubling(40)}),
            400,
        ),
        (&check, json!({"patch": doubling(40)}), 400),
        (&check, json!({"patch": tests}), 400),
        (&check, json!({"patch": adds}), 400),
        (
            &feedback,
            json!({"action": "patch", "patch": [{"op": "replace", "path": "/steps", "value": steps}]}),
            400,
        ),
        (&templates, json!({"name": "huge", "plan": many}), 400),
        (
            &plans,
            json!({"query": "again", "feedback": {"previous": many, "text": "shorter"}}),
            400,
        ),
        (&plans, json!({"query": "weather", "tools": tools}), 201),
        (&plans, json!({"query": "x".repeat(2 << 20)}), 413),
    ];
    for (line, body, expected) in &cases {
        let (status, answer) = send(line, body);
        assert_eq!(status, *expected, "{line}: {answer}");
    }
    let (_, current) = get(&serve.addr, &format!("/v1/plans/{id}"), token).unwrap();
    let current: Value = serde_json::from_str(&current).unwrap();
    assert_eq!(
        current["plan"]["version"], plan["version"],
        "no attack changed the plan"
    );
}

/// The peak resident memory of process `pid` (`VmHWM`), in MiB; `None` where `/proc` has no
/// such figure.
fn peak_resident_mib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

#[test]
fn schemathesis_finds_no_server_errors() {
    let Some(tool) = schemathesis() else {
        return;
    };
    let reports = root().join("target/schemathesis");
    std::fs::create_dir_all(&reports).unwrap();
    let dir = tempfile::tempdir().unwrap();

    let open = serve(&dir.path().join("open.db"), None);
    fuzz(&tool, &open, None, &reports.join("open.xml"));
    drop(open);

    let owned = serve(
        &dir.path().join("owned.db"),
        Some("fuzz-token:fuzzer,other:someone"),
    );
    let (status, _) = get(&owned.addr, "/v1/plans", None).unwrap();
    assert_eq!(status, 401, "tokens are enforced");
    fuzz(
        &tool,
        &owned,
        Some("fuzz-token"),
        &reports.join("tokens.xml"),
    );
}

/// Two `plansmith serve` processes on one fresh PostgreSQL database
/// (`scripts/two-serves-postgres.sh`): started at the same moment (the first migration under
/// the advisory lock), a plan created through one is read, accepted and marked through either,
/// a stale write is refused, the history agrees; and a page watching the plan's events through
/// either process sees every change once, in order, whichever process it was made through,
/// until the plan is deleted. Needs `PLANSMITH_TEST_POSTGRES_URL` (`NOTE … NOT RUN` without it,
/// a failure under `CI=true`).
#[test]
fn two_serves_share_plans_and_events_on_postgres() {
    let Some(url) = crate::fresh_postgres("two_serves_share_plans_and_events_on_postgres") else {
        return;
    };
    crate::run_script(
        "two-serves-postgres.sh",
        &url,
        &[
            ("PORT_A", free_port().to_string()),
            ("PORT_B", free_port().to_string()),
        ],
        "each page saw every change",
    );
}

/// `GET /readyz` follows the store: `200 ready` while PostgreSQL answers, `503 unavailable` once
/// the database is gone (dropped under the server), while `/healthz` (liveness) stays `200`.
/// Needs `PLANSMITH_TEST_POSTGRES_URL` (`NOTE … NOT RUN` without it, a failure under `CI=true`).
#[test]
fn readyz_follows_the_store() {
    let Some(url) = crate::fresh_postgres("readyz_follows_the_store") else {
        return;
    };
    let server = serve_on(&url, None);
    let (status, body) = get(&server.addr, "/readyz", None).unwrap();
    assert_eq!(status, 200, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["store"], "postgres");
    let (_, name) = url.rsplit_once('/').unwrap();
    let base = std::env::var("PLANSMITH_TEST_POSTGRES_URL").unwrap();
    crate::execute_sql(&base, &format!("DROP DATABASE {name} WITH (FORCE)"));
    let (status, body) = get(&server.addr, "/readyz", None).unwrap();
    assert_eq!(status, 503, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["code"], "unavailable", "{body}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("the store does not answer"),
        "{body}"
    );
    let (status, _) = get(&server.addr, "/healthz", None).unwrap();
    assert_eq!(status, 200, "liveness does not depend on the store");
}

/// CORS through the real binary (`PLANSMITH_CORS_ORIGINS`): a page on a listed origin reaches
/// the API and the MCP endpoint (an MCP client in the browser: the session id is readable),
/// a page on another origin does not.
#[test]
fn pages_on_listed_origins_reach_the_api_and_mcp() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let serve = serve_with(
        &store,
        None,
        &[(
            "PLANSMITH_CORS_ORIGINS",
            "http://app.example, http://other.example:3000",
        )],
        None,
    );
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"page","version":"1"}}}"#;
    let response = crate::http_exchange(
        &serve.addr,
        "POST /mcp",
        "origin: http://app.example\r\naccept: application/json, text/event-stream\r\n",
        initialize,
    )
    .unwrap();
    let head = response
        .split("\r\n\r\n")
        .next()
        .unwrap()
        .to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{response}");
    assert!(head.contains("\r\nmcp-session-id: "), "{head}");
    assert!(
        head.contains("\r\naccess-control-allow-origin: http://app.example\r\n"),
        "{head}"
    );
    assert!(
        head.lines().any(
            |l| l.starts_with("access-control-expose-headers:") && l.contains("mcp-session-id")
        ),
        "{head}"
    );
    let other = crate::http_exchange(
        &serve.addr,
        "GET /v1/plans",
        "origin: http://elsewhere.example\r\n",
        "",
    )
    .unwrap();
    // A page on an origin that is not listed is refused outright (it could otherwise make
    // the API act, though the browser would keep the answer from it).
    let head = other.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 403"), "{other}");
    assert!(!head.contains("access-control-allow-origin"), "{head}");
}

/// `/mcp` takes no body over `--max-body-bytes` (`PLANSMITH_MAX_BODY_BYTES`), like the REST
/// routes: `413 payload_too_large` in the API's error shape, and the server stays up; a body
/// within the limit still opens a session.
#[test]
fn mcp_bodies_are_bounded_like_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let serve = serve_with(&store, None, &[("PLANSMITH_MAX_BODY_BYTES", "4096")], None);
    let initialize = |name: &str| {
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": name, "version": "1"}}})
        .to_string()
    };
    let accept = "accept: application/json, text/event-stream\r\n";
    let (status, body) = crate::http_request(
        &serve.addr,
        "POST /mcp",
        accept,
        &initialize(&"x".repeat(8_000)),
    )
    .unwrap();
    assert_eq!(status, 413, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["code"], "payload_too_large", "{body}");
    let (status, _) = get(&serve.addr, "/healthz", None).unwrap();
    assert_eq!(status, 200);
    let (status, body) =
        crate::http_request(&serve.addr, "POST /mcp", accept, &initialize("small")).unwrap();
    assert_eq!(status, 200, "{body}");
}

/// The access log (`PLANSMITH_LOG=plansmith::http=info`): one line per answered request, named
/// by the request's id (the caller's, here), with the route, status, time and owner (never the
/// token).
#[test]
fn the_access_log_names_each_request() {
    let (line, stderr) = access_log_line(&[]);
    // serve's own messages stay plain lines without the JSON format.
    assert!(
        stderr.contains("plansmith serve: listening on http://127.0.0.1:"),
        "{stderr}"
    );
    for part in [
        "method=POST",
        "route=/v1/plans",
        "status=201",
        "owner=alice",
        "answered",
    ] {
        assert!(line.contains(part), "no `{part}` in {line}");
    }
    assert!(line.contains(" ms="), "{line}");
    assert!(!line.contains("secret-token"), "{line}");
    // Plain text in a file (colours are for a terminal).
    assert!(!line.contains('\u{1b}'), "{line:?}");
}

/// `PLANSMITH_LOG_FORMAT=json`: the same line as one JSON object, for a log shipper, and so is
/// every other line on stderr (serve's own messages, a failure to start); an unknown format is
/// refused at start.
#[test]
fn the_access_log_in_json() {
    let (line, stderr) = access_log_line(&[("PLANSMITH_LOG_FORMAT", "json")]);
    // Every line of stderr is JSON, serve's own messages too.
    let entries: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let listening = entries
        .iter()
        .find(|e| e["target"] == "plansmith::serve")
        .unwrap_or_else(|| panic!("no message of serve's own: {stderr}"));
    assert_eq!(listening["level"], "INFO", "{listening}");
    assert!(
        listening["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("listening on http://127.0.0.1:")),
        "{listening}"
    );
    let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(entry["level"], "INFO", "{entry}");
    assert_eq!(entry["target"], "plansmith::http", "{entry}");
    assert_eq!(entry["message"], "answered", "{entry}");
    assert_eq!(entry["request_id"], "trace-42", "{entry}");
    assert_eq!(entry["method"], "POST", "{entry}");
    assert_eq!(entry["route"], "/v1/plans", "{entry}");
    assert_eq!(entry["status"], 201, "{entry}");
    assert_eq!(entry["owner"], "alice", "{entry}");
    assert!(entry["ms"].as_f64().is_some_and(|ms| ms > 0.0), "{entry}");
    assert!(entry["timestamp"].is_string(), "{entry}");
    assert!(!line.contains("secret-token"), "{line}");

    let bad = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(["serve", "--addr", "127.0.0.1:1"])
        .env("PLANSMITH_LOG_FORMAT", "xml")
        .output()
        .unwrap();
    crate::assert_exit(&bad, 2);
    assert!(
        crate::text(&bad.stderr).contains("PLANSMITH_LOG_FORMAT is `xml`; it is `text`"),
        "{}",
        crate::text(&bad.stderr)
    );

    // A server that cannot start says why in JSON too.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let failed = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(["serve", "--addr", &addr, "--tools", "examples/tools.json"])
        .args([
            "--model",
            "scripted:examples/replies/weather-email-repeat.json",
        ])
        .current_dir(root())
        .env("PLANSMITH_LOG_FORMAT", "json")
        .env_remove("PLANSMITH_MODEL")
        .env_remove("PLANSMITH_TOKENS")
        .output()
        .unwrap();
    assert!(!failed.status.success());
    let stderr = crate::text(&failed.stderr);
    let error: serde_json::Value =
        serde_json::from_str(stderr.trim()).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(error["level"], "ERROR", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!("cannot listen on {addr}"))),
        "{error}"
    );
}

/// Starts `serve` with tokens, the access log on and `env`, plans once with
/// `x-request-id: trace-42` (checking it comes back), and gives that request's log line and
/// all of stderr up to it.
fn access_log_line(env: &[(&str, &str)]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let log = dir.path().join("stderr");
    let mut env = env.to_vec();
    env.push(("PLANSMITH_LOG", "plansmith::http=info"));
    let serve = serve_with(&store, Some("secret-token:alice"), &env, Some(&log));
    let response = crate::http_exchange(
        &serve.addr,
        "POST /v1/plans",
        "authorization: Bearer secret-token\r\nx-request-id: trace-42\r\n",
        r#"{"query": "Email Bob the weather in Paris"}"#,
    )
    .unwrap();
    assert!(response.starts_with("HTTP/1.1 201"), "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("\r\nx-request-id: trace-42\r\n"),
        "{response}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if let Some(line) = text.lines().find(|l| l.contains("trace-42")) {
            return (line.to_owned(), text.clone());
        }
        assert!(Instant::now() < deadline, "no access log line: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
