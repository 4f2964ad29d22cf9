//! Stopping `plansmith serve` as a service manager or a user at a terminal does: SIGTERM or
//! Ctrl-C (SIGINT) shuts it down gracefully even while review pages and MCP clients hold
//! event streams open, a
//! request in flight is still answered and its plan stored, and a second signal stops it at
//! once. The model is a local stand-in OpenAI-compatible server that can be told to be slow.
//! And stopping it the hard way: SIGKILL under load loses no plan it acknowledged.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::{root, text};

/// An OpenAI chat completion whose content is a one-step plan.
const REPLY: &str = r#"{"choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"title\": \"Weather\", \"steps\": [{\"id\": \"s1\", \"type\": \"tool\", \"title\": \"Weather\", \"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}"#;

/// A stand-in model server: request `n` (from 0) is answered after `delays[n]` (the last delay
/// for every later one); each request is announced on the channel as it arrives.
fn model_server(delays: Vec<Duration>) -> (String, mpsc::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (arrived, arrivals) = mpsc::channel();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            let delay = delays.get(n).or(delays.last()).copied().unwrap_or_default();
            let arrived = arrived.clone();
            std::thread::spawn(move || answer(stream, n, delay, &arrived));
        }
    });
    (format!("http://{addr}/v1"), arrivals)
}

fn answer(stream: TcpStream, n: usize, delay: Duration, arrived: &mpsc::Sender<usize>) {
    crate::read_request(&stream);
    let _ = arrived.send(n);
    std::thread::sleep(delay);
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{REPLY}",
        REPLY.len()
    );
}

/// A child process, killed on drop (a failing test leaves no server behind).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `plansmith serve` over a fresh SQLite store at `store`, planning with the model at `url`;
/// its stderr is piped.
fn serve(store: &Path, url: &str) -> (Running, String) {
    serve_with(store, &format!("openai-compatible:{url}#tiny-model"))
}

/// `plansmith serve` over the SQLite store at `store` with `--model MODEL`; its stderr is piped.
fn serve_with(store: &Path, model: &str) -> (Running, String) {
    let addr = format!("127.0.0.1:{}", crate::free_port());
    let child = Running(
        Command::new(env!("CARGO_BIN_EXE_plansmith"))
            .args(["serve", "--addr", &addr, "--tools", "examples/tools.json"])
            .args(["--model", model])
            .arg("--store")
            .arg(format!("sqlite:{}", store.display()))
            .current_dir(root())
            .env_remove("PLANSMITH_MODEL")
            .env_remove("PLANSMITH_TOKENS")
            .env_remove("PLANSMITH_RATE_LIMIT")
            .env_remove("OPENAI_API_KEY")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while request(&addr, "GET /healthz", "").map(|r| r.0).ok() != Some(200) {
        assert!(Instant::now() < deadline, "plansmith serve did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, addr)
}

/// One HTTP/1.1 request (`"METHOD PATH"`, a JSON body or none); (status, body).
fn request(addr: &str, line: &str, body: &str) -> std::io::Result<(u16, String)> {
    crate::http_request(addr, line, "", body)
}

/// Plans a request in a thread; its (status, body) arrives on the channel.
fn plan_in_background(addr: &str) -> mpsc::Receiver<(u16, String)> {
    let (tx, rx) = mpsc::channel();
    let addr = addr.to_owned();
    std::thread::spawn(move || {
        let answer = request(&addr, "POST /v1/plans", r#"{"query": "Weather in Paris?"}"#)
            .unwrap_or((0, String::new()));
        let _ = tx.send(answer);
    });
    rx
}

/// The plan's event stream, read up to its `snapshot`.
fn watch(addr: &str, id: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /v1/plans/{id}/events HTTP/1.1\r\nhost: {addr}\r\n\r\n"
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !text(&seen).contains("event: snapshot") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the event stream ended before its snapshot");
        seen.extend_from_slice(&buf[..n]);
    }
    stream
}

/// An MCP client's session on `/mcp` (streamable HTTP: initialize, initialized) and its
/// standalone event stream (`GET /mcp`), read up to its first event.
fn mcp_stream(addr: &str) -> TcpStream {
    let post = |session: Option<&str>, body: &str| -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let session = session
            .map(|id| format!("mcp-session-id: {id}\r\nmcp-protocol-version: 2025-06-18\r\n"))
            .unwrap_or_default();
        write!(
            stream,
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\n{session}content-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        // The answer's head is enough (an SSE body may stay open).
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
            head.push(byte[0]);
        }
        text(&head)
    };
    let head = post(
        None,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}"#,
    );
    let session = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no MCP session id in:\n{head}"));
    let head = post(
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert!(head.starts_with("HTTP/1.1 202"), "{head}");
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /mcp HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\
         mcp-session-id: {session}\r\nmcp-protocol-version: 2025-06-18\r\n\r\n"
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !text(&seen).contains("\r\n\r\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the MCP stream ended at once: {}", text(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(text(&seen).starts_with("HTTP/1.1 200"), "{}", text(&seen));
    stream
}

fn signal(child: &Running, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.0.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// The exit status once the process ended, or `None` if it still runs after `within`.
fn exited(child: &mut Running, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts the process exits with 0 within `within`; its stderr.
fn exits_0(child: &mut Running, within: Duration) -> String {
    let code = exited(child, within);
    let err = stderr(child);
    assert!(
        code.is_some_and(|c| c.success()),
        "{code:?}; stderr:\n{err}"
    );
    err
}

fn stderr(child: &mut Running) -> String {
    let mut err = String::new();
    if let Some(mut pipe) = child.0.stderr.take() {
        let _ = pipe.read_to_string(&mut err);
    }
    err
}

fn plan_id(body: &str) -> String {
    let created: serde_json::Value = serde_json::from_str(body).unwrap();
    created["stored"]["plan"]["id"].as_str().unwrap().to_owned()
}

fn stops_gracefully(signal_name: &str) {
    // The first plan is answered at once, the second after 1.5 s.
    let (url, arrivals) = model_server(vec![Duration::ZERO, Duration::from_millis(1500)]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("plans.db");
    let (mut child, addr) = serve(&store, &url);
    let (status, body) = request(&addr, "POST /v1/plans", r#"{"query": "Weather?"}"#).unwrap();
    assert_eq!(status, 201, "{body}");
    let first = plan_id(&body);
    assert_eq!(arrivals.recv().unwrap(), 0);
    // A review page watching the plan, an MCP client's open session, and a request waiting
    // for the model.
    let mut events = watch(&addr, &first);
    let mut mcp = mcp_stream(&addr);
    let in_flight = plan_in_background(&addr);
    assert_eq!(
        arrivals.recv_timeout(Duration::from_secs(10)).unwrap(),
        1,
        "the second plan's model call did not arrive"
    );
    signal(&child, signal_name);
    // The event stream ends (before, it held the server up for as long as the page was open).
    let mut rest = Vec::new();
    events
        .read_to_end(&mut rest)
        .expect("the event stream did not end within 10 s of the signal");
    mcp.read_to_end(&mut rest)
        .expect("the MCP session's stream did not end within 10 s of the signal");
    // The request in flight is answered and its plan stored.
    let (status, body) = in_flight.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(status, 201, "the request in flight: {body}");
    let second = plan_id(&body);
    let err = exits_0(&mut child, Duration::from_secs(10));
    assert!(err.contains("shutting down"), "{err}");
    assert!(err.contains("plansmith serve: stopped"), "{err}");
    // Both plans are in the store; SQLite checkpointed its WAL on the way out.
    let listed = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(["plans", "list", "--store"])
        .arg(format!("sqlite:{}", store.display()))
        .output()
        .unwrap();
    let listed = text(&listed.stdout);
    assert!(
        listed.contains(&first) && listed.contains(&second),
        "{listed}"
    );
    assert!(
        !dir.path().join("plans.db-wal").exists(),
        "the WAL was left"
    );
}

#[test]
fn sigterm_stops_serve_gracefully() {
    stops_gracefully("TERM");
}

#[test]
fn ctrl_c_stops_serve_gracefully() {
    stops_gracefully("INT");
}

#[test]
fn a_second_signal_stops_serve_at_once() {
    // Every model call takes a minute.
    let (url, arrivals) = model_server(vec![Duration::from_secs(60)]);
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = serve(&dir.path().join("plans.db"), &url);
    let _in_flight = plan_in_background(&addr);
    arrivals.recv_timeout(Duration::from_secs(10)).unwrap();
    signal(&child, "INT");
    // It waits for the request in flight...
    assert_eq!(exited(&mut child, Duration::from_secs(1)), None);
    // ...until told again.
    signal(&child, "INT");
    let err = exits_0(&mut child, Duration::from_secs(5));
    assert!(err.contains("stopped at once"), "{err}");
}

/// SIGKILL while eight clients create plans as fast as they can (the writes go through group
/// commit): no destructor, no flush, no checkpoint runs. Every plan that was answered `201`
/// must be there when a new `serve` opens the same store, and the store must list them all.
#[test]
fn sigkill_under_load_loses_no_acknowledged_plan() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("plans.db");
    let model = "scripted:examples/replies/weather-email-repeat.json";
    let (mut child, addr) = serve_with(&store, model);
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (addr, acknowledged, stop) = (addr.clone(), acknowledged.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let body = r#"{"query": "Email Bob the weather in Paris"}"#;
                    match request(&addr, "POST /v1/plans", body) {
                        Ok((201, body)) => acknowledged.lock().unwrap().push(plan_id(&body)),
                        // The server is gone (killed): no answer, so nothing was promised.
                        _ => return,
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acknowledged.lock().unwrap().len() < 300 {
        assert!(Instant::now() < deadline, "fewer than 300 plans in 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Killed mid-stream: requests are in flight and a batch may be half written.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    let (_again, addr) = serve_with(&store, model);
    let missing: Vec<&String> = acknowledged
        .iter()
        .filter(|id| {
            request(&addr, &format!("GET /v1/plans/{id}"), "")
                .map(|r| r.0)
                .ok()
                != Some(200)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged plans are gone after SIGKILL: {missing:?}",
        missing.len(),
        acknowledged.len()
    );
    let (status, page) = request(&addr, "GET /v1/plans?limit=1&exact_total=true", "").unwrap();
    assert_eq!(status, 200, "{page}");
    let page: serde_json::Value = serde_json::from_str(&page).unwrap();
    let total = page["total"].as_u64().unwrap();
    assert!(
        total >= acknowledged.len() as u64,
        "{total} plans listed, {} acknowledged",
        acknowledged.len()
    );
}
