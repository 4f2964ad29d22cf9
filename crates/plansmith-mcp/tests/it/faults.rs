//! Broken servers (`tests/fixtures/fault_server.py`): one that exits at start, one that hangs,
//! one that answers malformed JSON-RPC, one that lists a tool with an invalid schema, one that
//! pages its tools. Each failure is an error naming the server (and tool); the rest of the
//! catalog stays usable; timeouts bound the whole import.

use std::time::{Duration, Instant};

use plansmith_mcp::{ClientOptions, McpError, McpTools, ServersConfig};
use serde_json::{Map, Value, json};

fn fixture() -> String {
    crate::root()
        .join("crates/plansmith-mcp/tests/fixtures/fault_server.py")
        .display()
        .to_string()
}

fn server(mode: &str) -> Value {
    json!({"command": "python3", "args": [fixture(), mode]})
}

fn quick() -> ClientOptions {
    let mut options = ClientOptions::default();
    options.connect_timeout = Duration::from_secs(3);
    options.list_timeout = Duration::from_secs(3);
    options.call_timeout = Duration::from_secs(3);
    options.max_call = Duration::from_secs(3);
    options.max_pages = 100;
    options
}

fn word(text: &str) -> Map<String, Value> {
    json!({"word": text}).as_object().cloned().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn broken_servers_are_named_and_the_rest_loads() {
    let config = ServersConfig::from_json(&json!({"mcpServers": {
        "dies": server("exit"),
        "hangs": server("hang"),
        "garbage": server("garbage"),
        "badschema": server("badschema"),
        "paged": server("pages"),
        "missing": {"command": "/nonexistent/mcp-server"},
    }}))
    .unwrap();
    let started = Instant::now();
    let imported = McpTools::connect(&config, quick()).await;
    let elapsed = started.elapsed();
    // Concurrent, bounded: the two that never answer cost one connect timeout, not two.
    assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
    let problem = |server: &str| {
        imported
            .problems
            .iter()
            .filter(|p| p.server == server)
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let dies = problem("dies");
    assert!(
        dies.starts_with("server `dies`: initialize failed"),
        "{dies}"
    );
    assert!(!dies.contains("server `dies`: server"), "{dies}");
    assert!(dies.contains("missing API_KEY"), "stderr is quoted: {dies}");
    let hangs = problem("hangs");
    assert!(
        hangs.contains("server `hangs`") && hangs.contains("no answer to initialize within 3 s"),
        "{hangs}"
    );
    let garbage = problem("garbage");
    assert!(garbage.starts_with("server `garbage`"), "{garbage}");
    let missing = problem("missing");
    assert!(
        missing.contains("cannot start `/nonexistent/mcp-server`"),
        "{missing}"
    );
    let bad = imported
        .problems
        .iter()
        .find(|p| p.server == "badschema")
        .unwrap();
    assert_eq!(bad.tool.as_deref(), Some("broken_tool"));
    assert!(bad.message.contains("/properties/n/type"), "{bad}");
    assert!(
        bad.to_string().starts_with(
            "server `badschema`, tool `broken_tool`: at /inputSchema/properties/n/type"
        ),
        "{bad}"
    );
    assert_eq!(problem("paged"), "");
    assert_eq!(imported.problems.len(), 5, "{:?}", imported.problems);
    for problem in &imported.problems {
        println!("{problem}");
    }

    // The rest is usable: the valid tool beside the broken one, and all three pages.
    let catalog = &imported.catalog;
    assert!(catalog.tool("broken_tool").is_none());
    assert!(catalog.tool("ping").is_some());
    for page in 0..3 {
        for tool in 0..2 {
            assert!(catalog.tool(&format!("page{page}_tool{tool}")).is_some());
        }
    }
    assert_eq!(catalog.len(), 7);
    let pong = imported.tools.call("ping", word("hi")).await.unwrap();
    assert_eq!(pong.text, "pong hi");
    let err = imported
        .tools
        .call("broken_tool", word("x"))
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::UnknownTool(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_died_is_reconnected() {
    let config =
        ServersConfig::from_json(&json!({"mcpServers": {"flaky": server("badschema")}})).unwrap();
    let imported = McpTools::connect(&config, quick()).await;
    // "die" makes the fixture exit right after answering.
    let last = imported.tools.call("ping", word("die")).await.unwrap();
    assert_eq!(last.text, "pong die");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = imported.tools.call("ping", word("back")).await.unwrap();
    assert_eq!(again.text, "pong back", "a new server process answers");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_cannot_restart_gives_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // A copy of the fixture that is deleted once the catalog is loaded: reconnecting fails.
    let copy = dir.path().join("server.py");
    std::fs::copy(fixture(), &copy).unwrap();
    let config = ServersConfig::from_json(&json!({"mcpServers": {
        "gone": {"command": "python3", "args": [copy, "badschema"]}
    }}))
    .unwrap();
    let imported = McpTools::connect(&config, quick()).await;
    assert_eq!(imported.catalog.len(), 1);
    imported.tools.call("ping", word("die")).await.unwrap();
    std::fs::remove_file(&copy).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = imported
        .tools
        .call("ping", word("x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("server `gone`"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_hangs_times_out_naming_server_and_tool() {
    let config =
        ServersConfig::from_json(&json!({"mcpServers": {"slow": server("badschema")}})).unwrap();
    let imported = McpTools::connect(&config, quick()).await;
    let started = Instant::now();
    let err = imported
        .tools
        .call("ping", word("sleep"))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        err.to_string(),
        "server `slow`: no answer to tools/call `ping` within 3 s"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schema_that_is_not_an_object_is_named() {
    let config = ServersConfig::from_json(&json!({"mcpServers": {
        "strange": server("notobject"),
        "fine": server("pages"),
    }}))
    .unwrap();
    let imported = McpTools::connect(&config, quick()).await;
    let problems: Vec<String> = imported.problems.iter().map(ToString::to_string).collect();
    println!("{problems:?}");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("server `strange`"), "{problems:?}");
    assert_eq!(imported.catalog.len(), 6, "the other server's tools load");
}
