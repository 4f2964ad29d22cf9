//! plansmith's own MCP server, driven by rmcp's client over an in-memory duplex pipe (the
//! real third-party client, the Python SDK, drives the binary in the CLI's tests).

use std::sync::Arc;

use futures::StreamExt;
use plansmith_core::LanguageModel;
use plansmith_core::llm::{
    BoxFuture, BoxStream, Capabilities, Completion, CompletionRequest, LlmError, StreamEvent,
};
use plansmith_core::{Catalog, Planner, ScriptedModel};
use plansmith_mcp_server::PlansmithMcp;
use plansmith_service::{Planners, Service};
use plansmith_store::{Location, PlanStore};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest,
    ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

struct Session<H: ClientHandler = ()> {
    client: RunningService<RoleClient, H>,
    _dir: tempfile::TempDir,
}

impl<H: ClientHandler> Session<H> {
    async fn call(&self, tool: &str, arguments: Value) -> CallToolResult {
        self.client
            .call_tool(
                CallToolRequestParams::new(tool.to_owned())
                    .with_arguments(arguments.as_object().cloned().unwrap()),
            )
            .await
            .unwrap()
    }

    /// A successful call's structured content.
    async fn ok(&self, tool: &str, arguments: Value) -> Value {
        let result = self.call(tool, arguments.clone()).await;
        assert_ne!(
            result.is_error,
            Some(true),
            "{tool} {arguments}: {result:?}"
        );
        result.structured_content.unwrap()
    }

    /// A failed call's text.
    async fn fails(&self, tool: &str, arguments: Value) -> String {
        let result = self.call(tool, arguments.clone()).await;
        assert_eq!(
            result.is_error,
            Some(true),
            "{tool} {arguments}: {result:?}"
        );
        result.content[0].as_text().unwrap().text.clone()
    }
}

async fn start(turns: Vec<String>) -> Session {
    start_with(Arc::new(ScriptedModel::new(turns).streaming(8)), ()).await
}

/// plansmith's MCP server planning with `model`, and a client with `handler`.
async fn start_with<H: ClientHandler>(model: Arc<dyn LanguageModel>, handler: H) -> Session<H> {
    let catalog = Catalog::from_json(&json!([
        {"name": "get_weather", "description": "Weather for a city",
         "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
         "annotations": {"readOnlyHint": true}},
        {"name": "delete_files", "description": "Delete files",
         "input_schema": {"type": "object", "properties": {"glob": {"type": "string"}}, "required": ["glob"]},
         "annotations": {"destructiveHint": true}}
    ]))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = PlanStore::open(&Location::Sqlite(dir.path().join("plans.db")))
        .await
        .unwrap();
    let planner = Planner::new(catalog, model);
    let service = Service::new(store, Arc::new(Planners::new(Arc::new(planner))));
    let server = PlansmithMcp::new(service, "mcp-test");
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = handler.serve(client_io).await.unwrap();
    Session { client, _dir: dir }
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_feedback_and_planning_tools() {
    let first = json!({"title": "Tidy up", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "s2", "type": "tool", "name": "delete_files", "arguments": {"glob": "/tmp/*.log"}, "depends_on": ["s1"]}
    ]});
    let edited = json!({"title": "Weather only", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Lyon"}}
    ]});
    let s = start(vec![first.to_string(), edited.to_string()]).await;
    let tools = s.client.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names.len(), 5, "{names:?}");
    for name in ["plan", "planning", "feedback", "templates", "run"] {
        assert!(names.contains(&name.to_owned()), "{names:?}");
    }
    let plan_tool = tools.iter().find(|t| t.name == "plan").unwrap();
    assert_eq!(plan_tool.input_schema["required"], json!(["query"]));

    // plan → ready, stored for review; the destructive step is flagged for approval.
    let planned = s
        .ok(
            "plan",
            json!({"query": "Check the weather then delete old logs"}),
        )
        .await;
    assert_eq!(planned["status"], "ready", "{planned}");
    assert_eq!(planned["state"], "awaiting_review");
    assert_eq!(planned["needs_approval"], json!(["s2"]));
    assert_eq!(planned["plan"]["steps"][1]["requires_approval"], true);
    assert!(
        planned["diagnostics"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["code"] == "approval_required")
    );
    let id = planned["plan_id"].as_str().unwrap().to_owned();

    // feedback edit → replanned (second scripted turn), then accept.
    let replanned = s
        .ok(
            "feedback",
            json!({"plan_id": id, "action": "edit", "text": "Only the weather, in Lyon"}),
        )
        .await;
    assert_eq!(replanned["plan"]["title"], "Weather only", "{replanned}");
    assert_eq!(replanned["plan"]["version"], 2);
    // Accepting the version read before the replan is refused, and changes nothing.
    let stale = s
        .fails(
            "feedback",
            json!({"plan_id": id, "action": "accept", "expected_version": 1}),
        )
        .await;
    assert!(stale.contains("version 2, not 1"), "{stale}");
    let accepted = s
        .ok("feedback", json!({"plan_id": id, "action": "accept"}))
        .await;
    assert_eq!(accepted["state"], "accepted");
    let again = s
        .fails("feedback", json!({"plan_id": id, "action": "accept"}))
        .await;
    assert!(again.contains("it is accepted"), "{again}");
    let empty = s
        .fails("feedback", json!({"plan_id": id, "action": "answer"}))
        .await;
    assert!(empty.contains("`text` is required"), "{empty}");

    // planning: OpenManus's commands and their errors.
    let created = s
        .call("planning", json!({"command": "create", "plan_id": "trip", "title": "Trip", "steps": ["Book flights", "Book hotel", "Pack"]}))
        .await;
    let text = created.content[0].as_text().unwrap().text.clone();
    assert!(text.contains("Progress: 0/3 (0.0%)"), "{text}");
    let dup = s
        .fails(
            "planning",
            json!({"command": "create", "plan_id": "trip", "title": "T", "steps": ["x"]}),
        )
        .await;
    assert_eq!(
        dup,
        "A plan with ID 'trip' already exists. Use 'update' to modify existing plans."
    );
    let missing = s
        .fails(
            "planning",
            json!({"command": "create", "title": "T", "steps": ["x"]}),
        )
        .await;
    assert_eq!(
        missing,
        "Parameter `plan_id` is required for command: create"
    );
    // A hostile step list is refused before its steps are read, for create and update alike.
    let many: Vec<String> = (0..600).map(|i| format!("step {i}")).collect();
    for command in ["create", "update"] {
        let refused = s
            .fails(
                "planning",
                json!({"command": command, "plan_id": "trip", "title": "T", "steps": many}),
            )
            .await;
        assert!(refused.contains("at most 500"), "{command}: {refused}");
    }
    s.ok(
        "planning",
        json!({"command": "set_active", "plan_id": "trip"}),
    )
    .await;
    let marked = s
        .call("planning", json!({"command": "mark_step", "step_index": 0, "step_status": "completed", "step_notes": "AF123"}))
        .await;
    let text = marked.content[0].as_text().unwrap().text.clone();
    assert!(
        text.contains("Progress: 1/3 (33.3%)") && text.contains("[✓]"),
        "{text}"
    );
    let bad_index = s
        .fails("planning", json!({"command": "mark_step", "plan_id": "trip", "step_index": 7, "step_status": "completed"}))
        .await;
    assert!(
        bad_index.contains("valid indices range from 0 to 2"),
        "{bad_index}"
    );
    let bad_status = s
        .fails("planning", json!({"command": "mark_step", "plan_id": "trip", "step_index": 1, "step_status": "done-ish"}))
        .await;
    assert!(
        bad_status.contains("invalid step status `done-ish`"),
        "{bad_status}"
    );
    let updated = s
        .ok("planning", json!({"command": "update", "plan_id": "trip", "steps": ["Book flights", "Book a B&B", "Pack"]}))
        .await;
    assert_eq!(
        updated["plan"]["steps"][0]["status"], "completed",
        "unchanged step keeps its status"
    );
    assert_eq!(updated["plan"]["steps"][1]["title"], "Book a B&B");
    let active = s.ok("planning", json!({"command": "get"})).await;
    assert_eq!(active["plan"]["id"], "trip");
    let listed = s.ok("planning", json!({"command": "list"})).await;
    assert_eq!(listed["total"], 2);
    assert_eq!(listed["active"], "trip");
    s.ok("planning", json!({"command": "delete", "plan_id": "trip"}))
        .await;
    let gone = s
        .fails("planning", json!({"command": "get", "plan_id": "trip"}))
        .await;
    assert_eq!(gone, "no plan with id `trip`");
    let no_active = s.fails("planning", json!({"command": "get"})).await;
    assert!(no_active.starts_with("No active plan"), "{no_active}");
    // A bad command is rejected by the schema, as a protocol error or a tool error.
    let bad = s
        .client
        .call_tool(
            CallToolRequestParams::new("planning")
                .with_arguments(json!({"command": "explode"}).as_object().cloned().unwrap()),
        )
        .await;
    assert!(bad.is_err() || bad.unwrap().is_error == Some(true));
}

#[tokio::test(flavor = "multi_thread")]
async fn templates_tool_saves_and_instantiates() {
    let reply = json!({"title": "Weather in Paris", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}}
    ]});
    let s = start(vec![reply.to_string()]).await;
    let planned = s.ok("plan", json!({"query": "Weather in Paris"})).await;
    let id = planned["plan_id"].as_str().unwrap().to_owned();
    let saved = s
        .ok(
            "templates",
            json!({"command": "save", "name": "city-weather", "plan_id": id,
            "description": "Weather for a city",
            "parameters": [{"name": "city", "literal": "Paris", "description": "the city"}]}),
        )
        .await;
    assert_eq!(saved["version"], 1, "{saved}");
    assert_eq!(
        saved["plan"]["steps"][0]["action"]["arguments"]["city"],
        "{{city}}"
    );
    let listed = s.ok("templates", json!({"command": "list"})).await;
    assert_eq!(listed["templates"][0]["name"], "city-weather");
    let made = s
        .ok("templates", json!({"command": "instantiate", "name": "city-weather", "arguments": {"city": "Rome"}}))
        .await;
    assert_eq!(
        made["plan"]["steps"][0]["action"]["arguments"]["city"], "Rome",
        "{made}"
    );
    assert_eq!(made["state"], "awaiting_review");
    let new_id = made["plan"]["id"].as_str().unwrap();
    assert_ne!(new_id, id);
    let fetched = s
        .ok("planning", json!({"command": "get", "plan_id": new_id}))
        .await;
    assert_eq!(
        fetched["plan"]["title"],
        "Weather in {{city}}".replace("{{city}}", "Rome")
    );
    let missing = s
        .fails(
            "templates",
            json!({"command": "instantiate", "name": "city-weather"}),
        )
        .await;
    assert!(missing.contains("needs values for: city"), "{missing}");
    let unknown = s
        .fails("templates", json!({"command": "instantiate", "name": "city-weather", "arguments": {"city": "Rome", "unit": "c"}}))
        .await;
    assert!(unknown.contains("no parameters named: unit"), "{unknown}");
    let deleted = s
        .ok(
            "templates",
            json!({"command": "delete", "name": "city-weather"}),
        )
        .await;
    assert_eq!(deleted["deleted_versions"], 1);
    let gone = s
        .fails(
            "templates",
            json!({"command": "get", "name": "city-weather"}),
        )
        .await;
    assert!(gone.contains("city-weather"), "{gone}");
}

/// Records the progress notifications it gets.
#[derive(Clone, Default)]
struct Listener(Arc<std::sync::Mutex<Vec<ProgressNotificationParam>>>);

impl ClientHandler for Listener {
    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.0.lock().unwrap().push(params);
        std::future::ready(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn planning_reports_its_progress_to_a_client_that_asks() {
    let reply = json!({"title": "Weather", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "s2", "type": "reply", "text": "Here it is", "depends_on": ["s1"]}
    ]});
    let listener = Listener::default();
    // A model that writes as a real one does, a piece every 20 ms (a scripted one answers at
    // once, and the answer ends the progress).
    let model = Arc::new(Slow(ScriptedModel::new([reply.to_string()]).streaming(8)));
    let s = start_with(model, listener.clone()).await;
    // rmcp's client puts a progress token on every request.
    let planned = s.ok("plan", json!({"query": "Weather in Paris"})).await;
    assert_eq!(planned["status"], "ready", "{planned}");
    let heard = listener.0.lock().unwrap().clone();
    let messages: Vec<String> = heard.iter().filter_map(|p| p.message.clone()).collect();
    assert_eq!(
        messages.first().map(String::as_str),
        Some("attempt 1"),
        "{messages:?}"
    );
    for step in ["step s1: ", "step s2: "] {
        assert!(messages.iter().any(|m| m.starts_with(step)), "{messages:?}");
    }
    assert!(
        heard.windows(2).all(|w| w[0].progress < w[1].progress),
        "{heard:?}"
    );
}

/// A scripted model streaming a piece every 20 ms.
struct Slow(ScriptedModel);

impl LanguageModel for Slow {
    fn name(&self) -> String {
        "slow".into()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        self.0.complete(request)
    }

    fn stream(&self, request: CompletionRequest) -> BoxStream<'_, Result<StreamEvent, LlmError>> {
        Box::pin(self.0.stream(request).then(|item| async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            item
        }))
    }
}

/// A model that never answers, and says when its call was dropped.
struct Stalled(Arc<std::sync::atomic::AtomicBool>);

struct SetOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl LanguageModel for Stalled {
    fn name(&self) -> String {
        "stalled".into()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    fn complete(&self, _request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        let dropped = SetOnDrop(self.0.clone());
        Box::pin(async move {
            let _dropped = dropped;
            std::future::pending().await
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_call_stops_planning_and_replanning() {
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = start_with(Arc::new(Stalled(dropped.clone())), ()).await;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("plan")
            .with_arguments(json!({"query": "Weather"}).as_object().cloned().unwrap()),
    ));
    cancel_and_see_the_model_dropped(&s, request, &dropped).await;

    // So does a replanning feedback (an edit of a plan stored without the model).
    dropped.store(false, std::sync::atomic::Ordering::SeqCst);
    s.ok(
        "planning",
        json!({"command": "create", "plan_id": "p1", "title": "Trip", "steps": ["Book", "Pack"]}),
    )
    .await;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("feedback").with_arguments(
            json!({"plan_id": "p1", "action": "edit", "text": "add a step"})
                .as_object()
                .cloned()
                .unwrap(),
        ),
    ));
    cancel_and_see_the_model_dropped(&s, request, &dropped).await;
}

/// Sends `request`, cancels it after 300 ms, and waits (up to 10 s) until the model's call is
/// dropped.
async fn cancel_and_see_the_model_dropped(
    s: &Session,
    request: ClientRequest,
    dropped: &std::sync::atomic::AtomicBool,
) {
    let handle = s
        .client
        .peer()
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst));
    handle
        .cancel(Some("the user gave up".into()))
        .await
        .unwrap();
    // The model's call is dropped: the planner is free for the next request.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !dropped.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "planning went on after the cancel"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_takes_the_options_and_the_tools_of_its_caller() {
    let order = json!({"title": "Find the order", "steps": [
        {"id": "s1", "type": "tool", "name": "lookup_order", "arguments": {"order_id": "A-17"}},
        {"id": "s2", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}}
    ]});
    let replanned = json!({"title": "Find the other order", "steps": [
        {"id": "s1", "type": "tool", "name": "lookup_order", "arguments": {"order_id": "B-2"}}
    ]});
    let s = start(vec![
        order.to_string(),
        order.to_string(),
        replanned.to_string(),
    ])
    .await;
    let plan_tool = s
        .client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "plan")
        .unwrap();
    let properties = plan_tool.input_schema["properties"].as_object().unwrap();
    for name in ["options", "tools", "agents", "thread_id", "max_iterations"] {
        assert!(properties.contains_key(name), "{name}: {properties:?}");
    }
    let tools = json!({"tools": [{"name": "lookup_order", "description": "An order by id",
        "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}},
                        "required": ["order_id"]}}]});

    // The options reach the planner (one step at most, no repairs); the sent tool is planned
    // with, and the server's own tools are not in that catalog.
    let planned = s
        .ok(
            "plan",
            json!({"query": "Where is order A-17?", "tools": tools,
                   "options": {"max_steps": 1, "max_repairs": 0}}),
        )
        .await;
    let steps = planned["plan"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{planned}");
    assert_eq!(steps[0]["action"]["name"], "lookup_order", "{planned}");
    let id = planned["plan_id"].as_str().unwrap().to_owned();

    // Without the tools, the same reply names a tool the server does not have.
    let other = s
        .ok(
            "plan",
            json!({"query": "Where is order A-17?", "options": {"max_repairs": 0}}),
        )
        .await;
    assert_ne!(other["status"], "ready", "{other}");

    // A replan of the first plan still has the sent tool.
    let edited = s
        .ok(
            "feedback",
            json!({"plan_id": id, "action": "edit", "text": "It is B-2"}),
        )
        .await;
    assert_eq!(
        edited["plan"]["steps"][0]["action"]["arguments"]["order_id"], "B-2",
        "{edited}"
    );

    // A JSON Patch is validated against the plan's own catalog too; a step decision needs a
    // run that would read it.
    let patched = s
        .ok(
            "feedback",
            json!({"plan_id": id, "action": "patch", "patch": [{"op": "replace",
                   "path": "/steps/0/action/arguments/order_id", "value": "C-3"}]}),
        )
        .await;
    assert_eq!(
        patched["plan"]["steps"][0]["action"]["arguments"]["order_id"], "C-3",
        "{patched}"
    );
    let text = s
        .fails(
            "feedback",
            json!({"plan_id": id, "action": "step", "step": "s1", "verdict": "approve"}),
        )
        .await;
    assert!(text.contains("it never ran"), "{text}");
    let text = s
        .fails(
            "feedback",
            json!({"plan_id": id, "action": "step", "step": "s1", "verdict": "maybe"}),
        )
        .await;
    assert!(
        text.contains("approve, deny, retry, skip or abort"),
        "{text}"
    );

    // An argument the tool does not take is refused by name, as the HTTP API refuses it.
    for (tool, arguments) in [
        ("plan", json!({"query": "x", "max_step": 3})),
        (
            "feedback",
            json!({"plan_id": id, "action": "accept", "verison": 2}),
        ),
    ] {
        let refused = s
            .client
            .call_tool(
                CallToolRequestParams::new(tool.to_owned())
                    .with_arguments(arguments.as_object().cloned().unwrap()),
            )
            .await;
        let text = match refused {
            Err(err) => err.to_string(),
            Ok(result) => {
                assert_eq!(result.is_error, Some(true), "{tool}: {result:?}");
                result.content[0].as_text().unwrap().text.clone()
            }
        };
        let field = arguments
            .as_object()
            .unwrap()
            .keys()
            .find(|k| ["max_step", "verison"].contains(&k.as_str()))
            .unwrap()
            .clone();
        assert!(text.contains(&field), "{tool}: {text}");
    }

    // A broken catalog is refused, naming the tool and where it is wrong.
    let text = s
        .fails(
            "plan",
            json!({"query": "x", "tools": [{"name": "broken", "inputSchema": {"type": "nonsense"}}]}),
        )
        .await;
    assert!(
        text.contains("broken") && text.contains("/tools/0"),
        "{text}"
    );
}

/// `templates instantiate` takes the validation options as the HTTP route does: a two-step
/// template made with `max_steps: 1` is cut to one step.
#[tokio::test(flavor = "multi_thread")]
async fn templates_instantiate_takes_the_validation_options() {
    let reply = json!({"title": "Weather twice", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "s2", "type": "tool", "name": "get_weather", "arguments": {"city": "Lyon"}}
    ]});
    let s = start(vec![reply.to_string()]).await;
    let planned = s
        .ok("plan", json!({"query": "Weather in Paris and Lyon"}))
        .await;
    let id = planned["plan_id"].as_str().unwrap().to_owned();
    s.ok(
        "templates",
        json!({"command": "save", "name": "two-cities", "plan_id": id,
               "parameters": [{"name": "city", "literal": "Paris"}]}),
    )
    .await;
    for (options, steps) in [(json!(null), 2), (json!({"max_steps": 1}), 1)] {
        let made = s
            .ok(
                "templates",
                json!({"command": "instantiate", "name": "two-cities",
                       "arguments": {"city": "Rome"}, "options": options, "save": false}),
            )
            .await;
        assert_eq!(
            made["plan"]["steps"].as_array().unwrap().len(),
            steps,
            "{options}: {made}"
        );
    }
}

/// The conversation (chat history and earlier planning turns) and a previous plan to revise
/// reach the model as they do through `POST /v1/plans`; a malformed one is refused by name.
#[tokio::test(flavor = "multi_thread")]
async fn plan_takes_the_conversation_and_a_previous_plan() {
    let reply = json!({"title": "Weather", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Lyon"}}
    ]});
    let model = Arc::new(ScriptedModel::new(vec![reply.to_string()]));
    let s = start_with(model.clone(), ()).await;
    let mut previous = plansmith_core::Plan::new("p-old", "Weather in Paris?");
    previous.steps.push(plansmith_core::Step::new(
        "s1",
        "Paris weather",
        plansmith_core::Action::Tool {
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}).as_object().unwrap().clone(),
        },
    ));
    let planned = s
        .ok(
            "plan",
            json!({
                "query": "And in Lyon?",
                "history": [{"role": "user", "content": "I am packing for a trip to Marseille"}],
                "turns": [{"query": "Weather in Paris?", "plan": "get_weather(city=Paris)"}],
                "feedback": {"previous": previous, "text": "Lyon, not Paris"},
                "save": false,
            }),
        )
        .await;
    assert_eq!(planned["status"], "ready", "{planned}");
    let requests = model.requests();
    let prompt: String = requests[0]
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for expected in [
        "packing for a trip to Marseille",
        "Weather in Paris?",
        "Lyon, not Paris",
    ] {
        assert!(
            prompt.contains(expected),
            "`{expected}` is not in the prompt:\n{prompt}"
        );
    }
    for (field, value) in [
        ("history", json!([{"role": "narrator", "content": "x"}])),
        ("turns", json!("not a list")),
        ("feedback", json!({"previous": 3})),
    ] {
        let text = s
            .fails("plan", json!({"query": "x", field: value, "save": false}))
            .await;
        assert!(text.contains(&format!("`{field}`")), "{field}: {text}");
    }
}

/// `docs/reference/mcp-tools.json` is what the server's `tools/list` answers (name,
/// description, input and output schemas, annotations), the MCP contract beside the OpenAPI
/// document; `PLANSMITH_UPDATE_REFERENCE=1 cargo test -p plansmith-mcp-server reference` rewrites it.
#[tokio::test(flavor = "multi_thread")]
async fn the_checked_in_mcp_tools_reference_is_what_the_server_lists() {
    let s = start(Vec::new()).await;
    let mut tools: Vec<Value> = s
        .client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|tool| serde_json::to_value(tool).unwrap())
        .collect();
    tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let mut generated = serde_json::to_string_pretty(&json!({"tools": tools})).unwrap();
    generated.push('\n');
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/reference/mcp-tools.json");
    if std::env::var_os("PLANSMITH_UPDATE_REFERENCE").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is not what the MCP server lists: run \
         `PLANSMITH_UPDATE_REFERENCE=1 cargo test -p plansmith-mcp-server reference` and commit it",
        path.display()
    );
}

/// A server whose service has a runner (tools answer `{"summary": "sunny"}`, each call's tool
/// name recorded in the returned list), over a store holding `steps` as the accepted plan
/// `p-run`; and a client with `handler`.
async fn with_runner<H: ClientHandler>(
    steps: Value,
    handler: H,
) -> (Session<H>, PlanStore, Arc<std::sync::Mutex<Vec<String>>>) {
    use plansmith_exec::{ExecConfig, Executor, FnInvoker, Invokers};
    let dir = tempfile::tempdir().unwrap();
    let store = PlanStore::open(&Location::Sqlite(dir.path().join("plans.db")))
        .await
        .unwrap();
    let mut plan = plansmith_core::Plan::new("p-run", "Weather in three cities");
    plan.steps = serde_json::from_value(steps).unwrap();
    store
        .create(
            plan,
            plansmith_store::ReviewState::Accepted,
            plansmith_store::Review::default(),
            "test",
        )
        .await
        .unwrap();
    let called = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&called);
    let tools = FnInvoker::new(move |call| {
        if let plansmith_core::Action::Tool { name, .. } = &call.action {
            record.lock().unwrap().push(name.clone());
        }
        Ok(json!({"summary": "sunny"}))
    });
    let invokers = Invokers {
        tools: Some(Arc::new(tools)),
        ..Invokers::default()
    };
    let mut config = ExecConfig::new("mcp-test");
    config.poll_interval = std::time::Duration::from_millis(20);
    let executor = Executor::new(store.clone(), invokers, config);
    let planner = Planner::new(
        Catalog::empty(),
        Arc::new(ScriptedModel::new(Vec::<String>::new())),
    );
    let service = Service::new(store.clone(), Arc::new(Planners::new(Arc::new(planner))))
        .with_runner(plansmith_service::Runner::new(executor));
    let server = PlansmithMcp::new(service, "mcp-test");
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let session = Session {
        client: handler.serve(client_io).await.unwrap(),
        _dir: dir,
    };
    (session, store, called)
}

/// The `run` tool starts an accepted plan's run on the service's runner under the caller's
/// budget; its end, with the stop reason, shows in the plan's `last_run`.
#[tokio::test(flavor = "multi_thread")]
async fn run_takes_a_budget_and_the_plan_says_why_it_stopped() {
    let (s, store, _) = with_runner(
        json!([
            {"id": "s1", "title": "a", "action": {"type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "s2", "title": "b", "depends_on": ["s1"], "action": {"type": "tool", "name": "get_weather", "arguments": {"city": "Lyon"}}},
            {"id": "s3", "title": "c", "depends_on": ["s2"], "action": {"type": "tool", "name": "get_weather", "arguments": {"city": "Nice"}}}
        ]),
        (),
    )
    .await;
    let error = s
        .fails(
            "run",
            json!({"plan_id": "p-run", "budget": {"max_tool_calls": "two"}}),
        )
        .await;
    assert!(error.contains("budget"), "{error}");
    let started = s
        .ok(
            "run",
            json!({"plan_id": "p-run", "budget": {"max_tool_calls": 2}}),
        )
        .await;
    assert_eq!(started["state"], "running", "{started}");
    let mut last_run = Value::Null;
    for _ in 0..200 {
        last_run = store
            .get("p-run")
            .await
            .unwrap()
            .plan
            .metadata
            .get("last_run")
            .cloned()
            .unwrap_or_default();
        if last_run["stop_reason"].is_string() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(last_run["stop_reason"], "tool_calls_capped", "{last_run}");
    let error = s
        .fails(
            "run",
            json!({"plan_id": "p-run", "resume": true, "budget": {}}),
        )
        .await;
    assert!(error.contains("keeps the caps"), "{error}");
}

/// Answers every elicitation with `reply` (`approve`, `deny`, `decline`, `cancel`) and records
/// each message it was asked.
#[derive(Clone)]
struct Approver {
    reply: &'static str,
    asked: Arc<std::sync::Mutex<Vec<String>>>,
}

impl ClientHandler for Approver {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({"protocolVersion": "2025-06-18",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "approver", "version": "0"}}))
        .unwrap()
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        use rmcp::model::{ElicitResult, ElicitationAction};
        if let rmcp::model::ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.asked.lock().unwrap().push(message);
        }
        Ok(match self.reply {
            "approve" => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true}))
            }
            "deny" => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": false}))
            }
            "decline" => ElicitResult::new(ElicitationAction::Decline),
            _ => ElicitResult::new(ElicitationAction::Cancel),
        })
    }
}

/// For a client that takes elicitation, `run` follows the run and asks each approval it waits
/// for: approved, the gated call is made; declined, it is denied and skipped; cancelled, the
/// call answers with the run still waiting for a decision.
#[tokio::test(flavor = "multi_thread")]
async fn run_asks_the_approvals_through_elicitation() {
    let steps = json!([
        {"id": "s1", "title": "Clean up", "requires_approval": true,
         "action": {"type": "tool", "name": "delete_files", "arguments": {"glob": "*.tmp"}}},
        {"id": "s2", "title": "Weather",
         "action": {"type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}}}
    ]);
    for (reply, line, state, calls) in [
        (
            "approve",
            "s1: approved",
            "completed",
            vec!["delete_files", "get_weather"],
        ),
        (
            "decline",
            "s1: declined: denied",
            "completed",
            vec!["get_weather"],
        ),
        (
            "cancel",
            "s1: cancelled; the run waits for a decision",
            "waiting",
            vec!["get_weather"],
        ),
    ] {
        let approver = Approver {
            reply,
            asked: Arc::default(),
        };
        let (s, _store, called) = with_runner(steps.clone(), approver.clone()).await;
        let answer = s.ok("run", json!({"plan_id": "p-run"})).await;
        assert_eq!(answer["asked"], json!([line]), "{reply}: {answer}");
        assert_eq!(answer["state"], state, "{reply}: {answer}");
        let mut made = called.lock().unwrap().clone();
        made.sort();
        assert_eq!(made, calls, "{reply}");
        let asked = approver.asked.lock().unwrap().clone();
        assert!(
            asked.len() == 1 && asked[0].contains("delete_files") && asked[0].contains("*.tmp"),
            "{asked:?}"
        );
    }
}

/// A client that declares the tasks extension.
#[derive(Clone)]
struct TasksClient;

impl ClientHandler for TasksClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_tasks()
                .build(),
            rmcp::model::Implementation::new("tasks-client", "0"),
        )
    }
}

/// Polls task `id` until it is terminal (at most 10 s).
async fn settled(s: &Session<TasksClient>, id: &str) -> rmcp::model::DetailedTask {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let info = s
            .client
            .peer()
            .get_task(rmcp::model::GetTaskParams::new(id.to_owned()))
            .await
            .unwrap();
        if info.task.status().is_terminal() {
            return info.task;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "task {id} never ended"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The call of a tool as a task: its `CreateTaskResult`.
async fn task_of(s: &Session<TasksClient>, tool: &str, arguments: Value) -> String {
    let response = s
        .client
        .peer()
        .call_tool_once(
            CallToolRequestParams::new(tool.to_owned())
                .with_arguments(arguments.as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    match response {
        rmcp::model::CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("{tool} was not made a task: {other:?}"),
    }
}

/// A client with the tasks extension gets `plan` as a task: polled to its end, the task's
/// result is the tool's answer; cancelled, planning stops (the model's call is dropped) and the
/// task ends `cancelled`; another tool is answered at once, and an unknown task id is refused.
#[tokio::test(flavor = "multi_thread")]
async fn plan_runs_as_a_task_for_a_client_that_asks() {
    let reply = r#"{"thought": "t", "title": "Weather", "steps": [{"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}}]}"#;
    let s = start_with(
        Arc::new(ScriptedModel::new([reply.to_owned()])),
        TasksClient,
    )
    .await;
    let id = task_of(&s, "plan", json!({"query": "Weather in Paris"})).await;
    let task = settled(&s, &id).await;
    let rmcp::model::TaskPayload::Completed { result } = task.payload else {
        panic!("the task did not complete: {task:?}");
    };
    let result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    let answer = result.structured_content.unwrap();
    assert_eq!(answer["status"], "ready", "{answer}");
    assert_eq!(
        answer["plan"]["steps"][0]["action"]["arguments"]["city"],
        "Paris"
    );
    // `planning` is no task.
    let listed = s
        .client
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("planning")
                .with_arguments(json!({"command": "list"}).as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    assert!(matches!(listed, rmcp::model::CallToolResponse::Complete(_)));
    let unknown = s
        .client
        .peer()
        .get_task(rmcp::model::GetTaskParams::new("no-such-task".to_owned()))
        .await;
    assert!(unknown.is_err());

    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = start_with(Arc::new(Stalled(dropped.clone())), TasksClient).await;
    let id = task_of(&s, "plan", json!({"query": "Weather"})).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst));
    s.client
        .peer()
        .cancel_task(rmcp::model::CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    let task = settled(&s, &id).await;
    assert!(
        matches!(task.payload, rmcp::model::TaskPayload::Cancelled),
        "{task:?}"
    );
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
}
