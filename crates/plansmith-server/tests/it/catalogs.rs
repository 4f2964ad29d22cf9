//! Plans made with the caller's own tools: planned, checked, patched and replanned against
//! them, not against the server's catalog.

use reqwest::Method;
use serde_json::{Value, json};

use crate::{assert_error, call, start};
use plansmith_server::ServerConfig;

/// A tool the server's catalog does not have, in the OpenAI `tools` form.
fn order_tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "lookup_order",
        "description": "Look an order up by its id",
        "parameters": {"type": "object",
            "properties": {"order_id": {"type": "string", "pattern": "^[A-Z]-[0-9]+$"}},
            "required": ["order_id"]}}}])
}

/// A model reply that looks order `id` up and then answers.
fn order_plan(id: &str) -> String {
    let plan = json!({"title": "Find the order", "steps": [
        {"id": "s1", "type": "tool", "title": "Look the order up", "name": "lookup_order",
         "arguments": {"order_id": id}},
        {"id": "s2", "type": "reply", "title": "Tell the user", "text": "Here is your order.",
         "depends_on": ["s1"]}]});
    format!("```json\n{plan}\n```")
}

#[tokio::test]
async fn a_plan_keeps_the_catalog_its_caller_sent() {
    let turns = vec![order_plan("A-17"), order_plan("A-17"), order_plan("B-2")];
    let s = start(turns, ServerConfig::default()).await;

    // Planned with the sent tool; the plan records which catalog it was made with.
    let request = json!({"query": "Where is order A-17?", "tools": order_tools(),
        "options": {"max_repairs": 0}});
    let (status, created) = call(&s, Method::POST, "/v1/plans", Some(request), None).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"], "ready", "{created}");
    let stored = &created["stored"];
    assert_eq!(stored["plan"]["steps"][0]["action"]["name"], "lookup_order");
    let catalog = stored["review"]["catalog"].as_str().unwrap_or_default();
    assert!(catalog.starts_with("sha256:"), "{stored}");
    let id = stored["plan"]["id"].as_str().unwrap().to_owned();

    // The same reply without the tools: the server's catalog has no such tool.
    let request = json!({"query": "Where is order A-17?", "options": {"max_repairs": 0}});
    let (status, other) = call(&s, Method::POST, "/v1/plans", Some(request), None).await;
    assert_eq!(status, 201, "{other}");
    assert_ne!(other["status"], "ready", "{other}");
    assert!(
        other["stored"]["review"].get("catalog").is_none(),
        "{other}"
    );

    // Checks and patches validate against the plan's own catalog: its schema's pattern holds.
    let check = |value: &str| {
        json!({"patch": [{"op": "replace",
        "path": "/steps/0/action/arguments/order_id", "value": value}]})
    };
    let path = format!("/v1/plans/{id}/check");
    let (status, checked) = call(&s, Method::POST, &path, Some(check("order 17")), None).await;
    assert_eq!(status, 200, "{checked}");
    assert_eq!(checked["valid"], false, "{checked}");
    let (status, checked) = call(&s, Method::POST, &path, Some(check("C-3")), None).await;
    assert_eq!(status, 200, "{checked}");
    assert_eq!(checked["valid"], true, "{checked}");
    let feedback = format!("/v1/plans/{id}/feedback");
    let mut patch = check("C-3");
    patch["action"] = json!("patch");
    let (status, patched) = call(&s, Method::POST, &feedback, Some(patch), None).await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(
        patched["plan"]["steps"][0]["action"]["arguments"]["order_id"],
        "C-3"
    );

    // A replan after an edit plans with the same catalog: the tool is still there.
    let edit = json!({"action": "edit", "text": "It is order B-2"});
    let (status, edited) = call(&s, Method::POST, &feedback, Some(edit), None).await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(
        edited["plan"]["steps"][0]["action"]["arguments"]["order_id"], "B-2",
        "{edited}"
    );
    assert_eq!(edited["review"]["catalog"], catalog, "{edited}");
}

#[tokio::test]
async fn a_broken_sent_catalog_is_refused_naming_the_tool_and_the_place() {
    let s = start(Vec::new(), ServerConfig::default()).await;
    let mut tools = order_tools();
    tools
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "broken", "inputSchema": {"type": "object",
            "properties": {"n": {"type": "nonsense"}}}}));
    let request = json!({"query": "Where is order A-17?", "tools": tools});
    let (status, body) = call(&s, Method::POST, "/v1/plans", Some(request), None).await;
    assert_error(status, &body, 400, "bad_request");
    let problems = body["details"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{body}");
    assert_eq!(problems[0]["name"], "broken", "{body}");
    let pointer = problems[0]["pointer"].as_str().unwrap();
    assert!(pointer.starts_with("/tools/1"), "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("broken"),
        "{body}"
    );

    // Agent cards alone are a catalog too; a card without a name is refused the same way.
    let request = json!({"query": "Plan my trip", "agents": [{"description": "no name"}]});
    let (status, body) = call(&s, Method::POST, "/v1/plans", Some(request), None).await;
    assert_error(status, &body, 400, "bad_request");
    assert!(
        body["details"][0]["pointer"]
            .as_str()
            .unwrap()
            .starts_with("/agents/0"),
        "{body}"
    );
}
