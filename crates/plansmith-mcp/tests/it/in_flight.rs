//! Calls in flight, against a real stdio server built on the official Python SDK
//! (`tests/fixtures/slow_server.py`): calls to one server run at the same time, an abandoned
//! call is cancelled on the server, a call that reports progress outlives the call timeout
//! (bounded by the total), the server runs in a process group of its own (a terminal's Ctrl-C
//! reaches plansmith, not the server), and closing ends the servers.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plansmith_mcp::{CallExtras, ClientOptions, McpError, McpTools, ServersConfig};
use serde_json::{Map, Value, json};

use crate::installed;

/// The slow server, logging to `log`, with `more` keys in its entry; `None` (after a NOTE)
/// without the Python SDK.
fn slow_server(test: &str, log: &Path, more: Value) -> Option<ServersConfig> {
    let python = installed("PLANSMITH_TEST_MCP_PYTHON", test)?;
    let script = crate::root().join("crates/plansmith-mcp/tests/fixtures/slow_server.py");
    let mut entry = json!({"command": python, "args": [script], "env": {"SLOW_SERVER_LOG": log}});
    entry
        .as_object_mut()
        .unwrap()
        .extend(more.as_object().cloned().unwrap_or_default());
    let config = ServersConfig::from_json(&json!({"mcpServers": {"slow": entry}})).unwrap();
    Some(config)
}

fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

fn log_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits (up to 15 s) for a log line starting with `prefix`; the whole line.
fn wait_for(log: &Path, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(line) = log_lines(log).into_iter().find(|l| l.starts_with(prefix)) {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "no `{prefix}` in the server's log: {:?}",
            log_lines(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pid_of(line: &str) -> u32 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|s| !s.starts_with(" Z"))
    })
}

/// The process group of `pid` (`/proc/PID/stat`, the third field after the name).
fn group_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = stat.rsplit(')').next().unwrap();
    after_name
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap()
}

struct Setup {
    _dir: tempfile::TempDir,
    log: PathBuf,
    config: ServersConfig,
}

fn setup(test: &str) -> Option<Setup> {
    setup_with(test, Value::Null)
}

fn setup_with(test: &str, more: Value) -> Option<Setup> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let config = slow_server(test, &log, more)?;
    Some(Setup {
        _dir: dir,
        log,
        config,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_to_one_server_run_at_the_same_time() {
    let Some(setup) = setup("calls_to_one_server_run_at_the_same_time") else {
        return;
    };
    let imported = McpTools::connect(&setup.config, ClientOptions::default()).await;
    assert!(imported.problems.is_empty(), "{:?}", imported.problems);
    let tools = imported.tools;
    // Each `meet` waits (up to 10 s) for a second one in flight: two calls made one after the
    // other would each answer "alone".
    let (a, b) = tokio::join!(
        tools.call("meet", args(json!({"tag": "a"}))),
        tools.call("meet", args(json!({"tag": "b"}))),
    );
    assert_eq!(a.unwrap().text, "met");
    assert_eq!(b.unwrap().text, "met");
    tools.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_call_is_cancelled_on_the_server() {
    let Some(setup) = setup("an_abandoned_call_is_cancelled_on_the_server") else {
        return;
    };
    let mut options = ClientOptions::default();
    options.call_timeout = Duration::from_secs(2);
    let imported = McpTools::connect(&setup.config, options).await;
    assert!(imported.problems.is_empty(), "{:?}", imported.problems);
    let tools = imported.tools;

    // Dropped by its caller (a stopped step): the server hears of it.
    let call = tools.call("wait", args(json!({"seconds": 60, "tag": "dropped"})));
    let dropped = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            _ = call => panic!("the call answered"),
            () = async {
                while !log_lines(&setup.log).iter().any(|l| l.starts_with("started dropped")) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            } => {}
        }
    });
    dropped.await.unwrap();
    wait_for(&setup.log, "cancelled dropped");

    // Past the call timeout: an error naming the timeout, and the server hears of it too.
    let err = tools
        .call("wait", args(json!({"seconds": 60, "tag": "late"})))
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Timeout { .. }), "{err}");
    wait_for(&setup.log, "cancelled late");

    // The connection is still good.
    let quick = tools
        .call("wait", args(json!({"seconds": 0, "tag": "quick"})))
        .await
        .unwrap();
    assert_eq!(quick.text, "waited");
    assert!(
        !log_lines(&setup.log)
            .iter()
            .any(|l| l.starts_with("finished dropped") || l.starts_with("finished late")),
        "{:?}",
        log_lines(&setup.log)
    );
    tools.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_server_has_its_own_process_group_and_close_ends_it() {
    let Some(setup) = setup("a_stdio_server_has_its_own_process_group_and_close_ends_it") else {
        return;
    };
    let imported = McpTools::connect(&setup.config, ClientOptions::default()).await;
    assert!(imported.problems.is_empty(), "{:?}", imported.problems);
    let tools = imported.tools;
    let answer = tools
        .call("wait", args(json!({"seconds": 0, "tag": "one"})))
        .await
        .unwrap();
    assert_eq!(answer.text, "waited");
    let pid = pid_of(&wait_for(&setup.log, "started one"));
    // Its own group: a terminal's Ctrl-C (SIGINT to the foreground group) reaches plansmith,
    // which stops the calls, and not the server, which would die under a call in flight.
    assert_eq!(group_of(pid), pid);
    assert_ne!(group_of(pid), group_of(std::process::id()));

    let started = Instant::now();
    tools.close().await;
    // Closed as MCP asks: stdin closed, the server ends by itself (it logs its exit).
    assert_eq!(pid_of(&wait_for(&setup.log, "exit ")), pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(pid), "the server outlived close");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_keeps_a_call_alive_up_to_its_total_bound() {
    // 1 s without an answer or progress ends a call; 6 s ends it whatever it reports.
    let Some(setup) = setup_with(
        "progress_keeps_a_call_alive_up_to_its_total_bound",
        json!({"call_timeout_secs": 1, "max_call_secs": 6}),
    ) else {
        return;
    };
    let imported = McpTools::connect(&setup.config, ClientOptions::default()).await;
    assert!(imported.problems.is_empty(), "{:?}", imported.problems);
    let tools = imported.tools;

    // 3 s with progress every 0.2 s: past the call timeout, and answered; the caller hears
    // each report as it comes.
    let reports = std::sync::Mutex::new(Vec::new());
    let answer = tools
        .call_with(
            "wait",
            args(json!({"seconds": 3, "tag": "reported", "progress_every": 0.2})),
            CallExtras {
                on_progress: Some(&|report| reports.lock().unwrap().push(report)),
                ..CallExtras::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(answer.text, "waited");
    let reports = reports.into_inner().unwrap();
    assert!(reports.len() >= 10, "{reports:?}");
    assert!(
        reports.windows(2).all(|w| w[0].progress < w[1].progress),
        "{reports:?}"
    );
    assert!(reports.iter().all(|r| r.total == Some(3.0)), "{reports:?}");

    // 3 s in silence: the server's own 1 s bound ends it, and the server hears of it.
    let err = tools
        .call("wait", args(json!({"seconds": 3, "tag": "silent"})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, McpError::Timeout { after, .. } if *after == Duration::from_secs(1)),
        "{err}"
    );
    wait_for(&setup.log, "cancelled silent");

    // Progress forever: the total bound ends it.
    let err = tools
        .call(
            "wait",
            args(json!({"seconds": 60, "tag": "endless", "progress_every": 0.2})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, McpError::Timeout { after, .. } if *after == Duration::from_secs(6)),
        "{err}"
    );
    assert!(err.to_string().contains("within 6 s"), "{err}");
    wait_for(&setup.log, "cancelled endless");
    tools.close().await;
}
