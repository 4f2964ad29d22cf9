//! The client against the protocol's reference servers, installed from npm and PyPI at pinned
//! versions by `scripts/mcp-servers.sh` (`@modelcontextprotocol/server-everything`,
//! `@modelcontextprotocol/server-filesystem`, `mcp-server-time`): list their tools, plan
//! against them, call tools.

use std::sync::Arc;

use plansmith_core::{Action, OutcomeStatus, PlanRequest, Planner, ScriptedModel};
use plansmith_mcp::{ClientOptions, McpTools, ServersConfig};
use serde_json::{Map, Value, json};

use crate::installed;

fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn reference_servers_list_plan_and_call() {
    let test = "reference_servers_list_plan_and_call";
    let (Some(everything), Some(filesystem), Some(time)) = (
        installed("PLANSMITH_TEST_MCP_EVERYTHING", test),
        installed("PLANSMITH_TEST_MCP_FILESYSTEM", test),
        installed("PLANSMITH_TEST_MCP_TIME", test),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let config = ServersConfig::from_json(&json!({"mcpServers": {
        "everything": {"command": everything, "args": ["stdio"]},
        "files": {"command": filesystem, "args": [root]},
        "time": {"command": time, "args": ["--local-timezone", "UTC"]},
    }}))
    .unwrap();
    let imported = McpTools::connect(&config, ClientOptions::default()).await;
    assert!(imported.problems.is_empty(), "{:?}", imported.problems);
    let catalog = &imported.catalog;
    // No name clashes among these three: every tool keeps its own name.
    for name in [
        "echo",
        "get-sum",
        "write_file",
        "read_text_file",
        "get_current_time",
    ] {
        assert!(catalog.tool(name).is_some(), "{name} missing");
    }
    assert!(catalog.len() >= 25, "{} tools", catalog.len());
    let route = imported.tools.route("write_file").unwrap();
    assert_eq!(
        (route.server.as_str(), route.tool.as_str()),
        ("files", "write_file")
    );
    // outputSchema and annotations come through.
    let time_tool = &catalog.tool("get_current_time").unwrap().tool;
    assert!(time_tool.output_schema.is_some());
    assert_eq!(
        time_tool.annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );
    assert!(catalog.tool("write_file").unwrap().tool.is_destructive());
    assert!(
        !catalog
            .tool("read_text_file")
            .unwrap()
            .tool
            .is_destructive()
    );
    assert!(
        !catalog
            .tool("create_directory")
            .unwrap()
            .tool
            .is_destructive()
    );

    // Call: a PyPI server, an npm server with structured output, and a write then a read.
    let now = imported
        .tools
        .call(
            "get_current_time",
            args(json!({"timezone": "Europe/Paris"})),
        )
        .await
        .unwrap();
    assert!(!now.is_error, "{now:?}");
    assert_eq!(
        now.structured.as_ref().unwrap()["timezone"],
        "Europe/Paris",
        "{now:?}"
    );
    let echo = imported
        .tools
        .call("echo", args(json!({"message": "hello from plansmith"})))
        .await
        .unwrap();
    assert!(echo.text.contains("hello from plansmith"), "{echo:?}");
    let sum = imported
        .tools
        .call("get-sum", args(json!({"a": 2, "b": 40})))
        .await
        .unwrap();
    assert!(sum.text.contains("42"), "{sum:?}");
    let file = root.join("note.txt");
    let wrote = imported
        .tools
        .call(
            "write_file",
            args(json!({"path": file, "content": "planned by plansmith"})),
        )
        .await
        .unwrap();
    assert!(!wrote.is_error, "{wrote:?}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "planned by plansmith"
    );
    let read = imported
        .tools
        .call("read_text_file", args(json!({"path": file})))
        .await
        .unwrap();
    assert!(read.text.contains("planned by plansmith"), "{read:?}");
    // A tool error is a result with is_error, not a failure of the connection.
    let outside = imported
        .tools
        .call("read_text_file", args(json!({"path": "/etc/passwd"})))
        .await
        .unwrap();
    assert!(outside.is_error, "{outside:?}");
    let again = imported
        .tools
        .call("get_current_time", args(json!({"timezone": "UTC"})))
        .await
        .unwrap();
    assert!(!again.is_error);

    // Plan against the imported catalog: the destructive write needs approval, the read-only
    // time lookup does not; arguments are validated against the servers' schemas.
    let reply = json!({"title": "Timestamp note", "steps": [
        {"id": "s1", "type": "tool", "name": "get_current_time", "arguments": {"timezone": "UTC"}},
        {"id": "s2", "type": "tool", "name": "write_file", "depends_on": ["s1"],
         "arguments": {"path": file, "content": {"$ref": "s1.output.datetime"}}},
        {"id": "s3", "type": "reply", "text": "I'll write the current time to note.txt.", "depends_on": ["s2"]}
    ]});
    let planner = Planner::new(
        catalog.clone(),
        Arc::new(ScriptedModel::new([reply.to_string()])),
    );
    let outcome = planner
        .plan(&PlanRequest::new(
            "Write the current UTC time into note.txt",
        ))
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        OutcomeStatus::Ready,
        "{:?}",
        outcome.diagnostics.findings
    );
    let steps = &outcome.plan.steps;
    assert!(matches!(&steps[1].action, Action::Tool { name, .. } if name == "write_file"));
    assert!(!steps[0].requires_approval);
    assert!(
        steps[1].requires_approval,
        "destructiveHint must flag the step"
    );
    assert!(
        outcome
            .diagnostics
            .findings
            .iter()
            .any(|d| d.code.as_str() == "approval_required" && d.message.contains("write_file")),
        "{:?}",
        outcome.diagnostics.findings
    );
    // A wrong argument against an imported schema is caught (and, with no repair left, the
    // step is dropped or the plan falls back).
    let bad = json!({"steps": [{"id": "s1", "type": "tool", "name": "get-sum", "arguments": {"a": "two", "b": 1}}]});
    let planner = Planner::new(
        catalog.clone(),
        Arc::new(ScriptedModel::new([bad.to_string()])),
    );
    let mut request = PlanRequest::new("Add two and one");
    request.options.max_repairs = 0;
    let outcome = planner.plan(&request).await.unwrap();
    assert_ne!(outcome.status, OutcomeStatus::Ready);
    assert!(
        outcome.diagnostics.attempts[0]
            .diagnostics
            .iter()
            .any(|d| d.pointer.contains("arguments/a")),
        "{:?}",
        outcome.diagnostics.attempts
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn clashing_names_are_namespaced_and_routed() {
    let test = "clashing_names_are_namespaced_and_routed";
    let (Some(everything), Some(time)) = (
        installed("PLANSMITH_TEST_MCP_EVERYTHING", test),
        installed("PLANSMITH_TEST_MCP_TIME", test),
    ) else {
        return;
    };
    let config = ServersConfig::from_json(&json!({"mcpServers": {
        "alpha": {"command": everything, "args": ["stdio"]},
        "beta.v2": {"command": everything, "args": ["stdio"]},
        "time": {"command": time},
    }}))
    .unwrap();
    let imported = McpTools::connect(&config, ClientOptions::default()).await;
    assert!(imported.problems.is_empty(), "{:?}", imported.problems);
    let catalog = &imported.catalog;
    assert!(
        catalog.tool("echo").is_none(),
        "a clashing name is never bare"
    );
    assert!(catalog.tool("alpha__echo").is_some());
    assert!(
        catalog.tool("beta_v2__get-sum").is_some(),
        "`.` is not allowed in function names"
    );
    assert!(
        catalog.tool("get_current_time").is_some(),
        "no clash, no namespace"
    );
    for tool in catalog.tools() {
        let name = &tool.tool.name;
        assert!(
            name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{name}"
        );
    }
    let route = imported.tools.route("beta_v2__echo").unwrap();
    assert_eq!(
        (route.server.as_str(), route.tool.as_str()),
        ("beta.v2", "echo")
    );
    let echo = imported
        .tools
        .call("beta_v2__echo", args(json!({"message": "routed"})))
        .await
        .unwrap();
    assert!(echo.text.contains("routed"), "{echo:?}");
}

/// A tool that a 2025-11-25 server (the TypeScript SDK's, in `server-everything`) runs only as
/// a task (`execution.taskSupport: "required"`): the plain call is refused with -32601, the
/// client calls it again as a task, is told the task id, polls `tasks/get` and fetches the
/// result with `tasks/result`. Asked for input (`ambiguous`), the task's elicitation is declined
/// and the tool goes on with its default.
#[tokio::test(flavor = "multi_thread")]
async fn task_only_tools_of_a_2025_server_run_as_tasks() {
    let test = "task_only_tools_of_a_2025_server_run_as_tasks";
    let Some(everything) = installed("PLANSMITH_TEST_MCP_EVERYTHING", test) else {
        return;
    };
    let config = ServersConfig::from_json(&json!({"mcpServers": {
        "everything": {"command": everything, "args": ["stdio"]},
    }}))
    .unwrap();
    let imported = McpTools::connect(&config, ClientOptions::default()).await;
    assert!(imported.problems.is_empty(), "{:?}", imported.problems);
    for (topic, ambiguous) in [("tidal power", false), ("python", true)] {
        let tasks = std::sync::Mutex::new(Vec::<String>::new());
        let on_task = |task: &str| tasks.lock().unwrap().push(task.to_owned());
        let extras = plansmith_mcp::CallExtras {
            on_task: Some(&on_task),
            ..Default::default()
        };
        let output = imported
            .tools
            .call_with(
                "simulate-research-query",
                args(json!({"topic": topic, "ambiguous": ambiguous})),
                extras,
            )
            .await
            .unwrap();
        assert!(!output.is_error, "{output:?}");
        assert!(
            output.text.contains(&format!("# Research Report: {topic}")),
            "{}",
            output.text
        );
        assert!(
            output.text.contains("Stage 4: Generating report"),
            "{}",
            output.text
        );
        if ambiguous {
            assert!(output.text.contains("User declined"), "{}", output.text);
        }
        let tasks = tasks.into_inner().unwrap();
        assert_eq!(tasks.len(), 1, "told the task id once: {tasks:?}");
        assert!(!tasks[0].is_empty());
    }
}
