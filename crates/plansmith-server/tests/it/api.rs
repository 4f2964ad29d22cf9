use std::sync::Arc;

use plansmith_core::ScriptedModel;
use plansmith_server::ServerConfig;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    assert_error, call, create, read_sse, reply, start, start_with, tokens, watch, weather,
};

#[tokio::test]
async fn plan_get_list_history_delete() {
    let s = start(reply("weather-email.json", 3), ServerConfig::default()).await;
    let created = create(&s, None).await;
    assert_eq!(created["status"], "ready");
    assert_eq!(created["stored"]["state"], "awaiting_review");
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        created["stored"]["plan"]["steps"].as_array().unwrap().len(),
        3
    );

    let (status, got) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(status, 200);
    assert_eq!(got["plan"]["id"], id.as_str());

    create(&s, None).await;
    let (status, page) = call(&s, Method::GET, "/v1/plans?limit=1", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(page["total"], 2);
    assert_eq!(page["total_exact"], true);
    assert_eq!(page["plans"].as_array().unwrap().len(), 1);
    assert_eq!(page["next_offset"], 1);
    // The next page by cursor holds the other plan, and is the last.
    let newest = page["plans"][0]["plan"]["id"].as_str().unwrap().to_owned();
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let (status, next) = call(
        &s,
        Method::GET,
        &format!("/v1/plans?limit=1&cursor={cursor}"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);
    let older = next["plans"][0]["plan"]["id"].as_str().unwrap();
    assert_ne!(older, newest);
    assert_eq!(next["next_cursor"], Value::Null);
    assert_eq!(next["next_offset"], Value::Null);
    for bad in ["nonsense", &format!("{cursor}&offset=1")] {
        let (status, body) = call(
            &s,
            Method::GET,
            &format!("/v1/plans?cursor={bad}"),
            None,
            None,
        )
        .await;
        assert_error(status, &body, 400, "bad_request");
        assert!(
            body["message"].as_str().unwrap().contains("cursor"),
            "{body}"
        );
    }
    let (_, page) = call(&s, Method::GET, "/v1/plans?state=accepted", None, None).await;
    assert_eq!(page["total"], 0);
    let (status, body) = call(&s, Method::GET, "/v1/plans?state=nonsense", None, None).await;
    assert_error(status, &body, 400, "bad_request");

    let (status, h) = call(
        &s,
        Method::GET,
        &format!("/v1/plans/{id}/history"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(h["versions"].as_array().unwrap().len(), 1);
    assert_eq!(h["versions"][0]["trigger"], "created");

    let (status, v1) = call(
        &s,
        Method::GET,
        &format!("/v1/plans/{id}?version=1"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(v1["version"], 1);
    let (status, body) = call(
        &s,
        Method::GET,
        &format!("/v1/plans/{id}?version=9"),
        None,
        None,
    )
    .await;
    assert_error(status, &body, 404, "not_found");

    let (status, _) = call(&s, Method::DELETE, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(status, 204);
    let (status, body) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_error(status, &body, 404, "not_found");
    let (status, body) = call(&s, Method::DELETE, &format!("/v1/plans/{id}"), None, None).await;
    assert_error(status, &body, 404, "not_found");
}

/// A plan whose email step could not be planned is not "ready": it says what it lost, keeps
/// no reply that promised the email, and waits for a person even under `auto_accept`.
#[tokio::test]
async fn a_plan_that_lost_a_step_waits_for_review_even_under_auto_accept() {
    let lossy = json!({"title": "Weather mail", "steps": [
        {"id": "s1", "type": "tool", "title": "Weather", "name": "get_weather",
         "arguments": {"city": "Paris"}},
        {"id": "s2", "type": "tool", "title": "Email Bob", "name": "send_email",
         "arguments": {"to": 42, "subject": "Weather", "body": "Sunny"}},
        {"id": "s3", "type": "reply", "title": "Tell the user",
         "text": "I'll email Bob the weather."}]})
    .to_string();
    // The first answer and every repair lose the same step.
    let s = start(vec![lossy; 4], ServerConfig::default()).await;
    let mut request = weather();
    request["auto_accept"] = true.into();
    let (status, created) = call(&s, Method::POST, "/v1/plans", Some(request), None).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"], "incomplete", "{created}");
    assert_eq!(created["dropped"], json!(["s2", "s3"]), "{created}");
    assert!(
        created["reason"].as_str().unwrap().contains("`s2`"),
        "{created}"
    );
    let stored = &created["stored"];
    assert_eq!(stored["state"], "awaiting_review", "{created}");
    assert_eq!(stored["plan"]["ready"], false);
    let steps: Vec<&str> = stored["plan"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["s1"]);
    // Stored with the plan, for the review page and any later reader.
    let id = stored["plan"]["id"].as_str().unwrap();
    let (_, got) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(
        got["plan"]["metadata"]["incomplete"]["dropped"],
        json!(["s2", "s3"]),
        "{got}"
    );
}

#[tokio::test]
async fn feedback_accept_reject_patch_answer() {
    let mut turns = reply("weather-email.json", 2);
    turns.extend(reply("missing-recipient.json", 1));
    turns.extend(reply("weather-email.json", 1));
    let s = start(turns, ServerConfig::default()).await;
    let id = |v: &Value| v["stored"]["plan"]["id"].as_str().unwrap().to_owned();

    // accept, then accepting again is a conflict; each answer lists what the state allows
    let created = create(&s, None).await;
    assert_eq!(
        created["stored"]["actions"],
        json!(["accept", "reject", "edit", "patch"])
    );
    let a = id(&created);
    let path = format!("/v1/plans/{a}/feedback");
    // A reviewer who read version 1 does not accept version 2 (a step changed in between).
    let patch = json!({"action": "patch", "expected_version": 1, "patch": [
        {"op": "replace", "path": "/steps/0/action/arguments/city", "value": "Lyon"}]});
    let (status, body) = call(&s, Method::POST, &path, Some(patch), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["plan"]["version"], 2);
    for stale in [
        json!({"action": "accept", "expected_version": 1}),
        json!({"action": "reject", "expected_version": 1}),
        json!({"action": "edit", "text": "x", "expected_version": 1}),
    ] {
        let (status, body) = call(&s, Method::POST, &path, Some(stale.clone()), None).await;
        assert_error(status, &body, 409, "conflict");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("version 2, not 1"),
            "{stale}: {body}"
        );
    }
    let (_, got) = call(&s, Method::GET, &format!("/v1/plans/{a}"), None, None).await;
    assert_eq!(got["state"], "awaiting_review", "{got}");
    assert_eq!(got["plan"]["version"], 2, "{got}");
    let (status, body) = call(
        &s,
        Method::POST,
        &path,
        Some(json!({"action": "accept", "expected_version": 2})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "accepted");
    assert_eq!(body["actions"], json!(["run"]));
    let (status, body) = call(
        &s,
        Method::POST,
        &path,
        Some(json!({"action": "accept"})),
        None,
    )
    .await;
    assert_error(status, &body, 409, "conflict");
    assert!(
        body["message"].as_str().unwrap().ends_with("it allows run"),
        "{body}"
    );
    let (_, got) = call(&s, Method::GET, &format!("/v1/plans/{a}"), None, None).await;
    assert_eq!(got["actions"], json!(["run"]));

    // structured edit: a valid argument change is stored, an unknown tool is refused with
    // the engine's diagnostics
    let b = id(&create(&s, None).await);
    let path = format!("/v1/plans/{b}/feedback");
    let patch = json!({"action": "patch", "patch": [
        {"op": "replace", "path": "/steps/0/action/arguments/city", "value": "Lyon"}]});
    let (status, body) = call(&s, Method::POST, &path, Some(patch), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["plan"]["steps"][0]["action"]["arguments"]["city"],
        "Lyon"
    );
    assert_eq!(body["plan"]["version"], 2);
    let bad = json!({"action": "patch", "patch": [
        {"op": "replace", "path": "/steps/0/action/name", "value": "no_such_tool"}]});
    let (status, body) = call(&s, Method::POST, &path, Some(bad), None).await;
    assert_error(status, &body, 422, "invalid_plan");
    let diagnostics = body["details"].as_array().unwrap();
    assert!(!diagnostics.is_empty());
    assert!(
        diagnostics
            .iter()
            .all(|d| d["code"].is_string() && d["severity"].is_string()),
        "{body}"
    );
    let (status, body) = call(
        &s,
        Method::POST,
        &path,
        Some(json!({"action": "patch", "patch": 5})),
        None,
    )
    .await;
    assert_error(status, &body, 400, "bad_request");

    // checking an edit stores nothing: the findings of the plan as the patch would make it
    let check = format!("/v1/plans/{b}/check");
    let kelvin = json!({"patch": [
        {"op": "replace", "path": "/steps/0/action/arguments/unit", "value": "kelvin"}]});
    let (status, body) = call(&s, Method::POST, &check, Some(kelvin), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["valid"], false);
    assert_eq!(
        body["plan"]["steps"][0]["action"]["arguments"]["unit"],
        "kelvin"
    );
    let errors: Vec<&Value> = body["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == "error")
        .collect();
    assert!(
        errors
            .iter()
            .any(|d| d["pointer"].as_str().unwrap().ends_with("/arguments/unit")),
        "{body}"
    );
    let paris = json!({"patch": [
        {"op": "replace", "path": "/steps/0/action/arguments/city", "value": "Paris"}]});
    let (status, body) = call(&s, Method::POST, &check, Some(paris), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["valid"], true, "{body}");
    assert_eq!(
        body["plan"]["steps"][0]["action"]["arguments"]["city"],
        "Paris"
    );
    let (_, current) = call(&s, Method::GET, &format!("/v1/plans/{b}"), None, None).await;
    assert_eq!(current["plan"]["version"], 2, "a check stores nothing");
    assert_eq!(
        current["plan"]["steps"][0]["action"]["arguments"]["city"],
        "Lyon"
    );
    for (body, code, want) in [
        (json!({"patch": 5}), 400, "bad_request"),
        (
            json!({"patch": [{"op": "remove", "path": "/nope/0"}]}),
            400,
            "bad_request",
        ),
        (json!({}), 400, "bad_request"),
    ] {
        let (status, answer) = call(&s, Method::POST, &check, Some(body), None).await;
        assert_error(status, &answer, code, want);
    }
    let (status, answer) = call(
        &s,
        Method::POST,
        "/v1/plans/no-such-plan/check",
        Some(json!({"patch": []})),
        None,
    )
    .await;
    assert_error(status, &answer, 404, "not_found");

    let (status, body) = call(
        &s,
        Method::POST,
        &path,
        Some(json!({"action": "reject", "text": "no"})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "rejected");
    // a rejected plan may not be edited, so an edit to it is not checked either
    let (status, answer) = call(&s, Method::POST, &check, Some(json!({"patch": []})), None).await;
    assert_error(status, &answer, 409, "conflict");

    // a plan with a question: answer it, the replan is stored for review
    let request = crate::needs_input();
    let (status, c) = call(&s, Method::POST, "/v1/plans", Some(request), None).await;
    assert_eq!(status, 201, "{c}");
    assert_eq!(c["stored"]["state"], "needs_input", "{c}");
    assert!(
        !c["stored"]["plan"]["questions"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let path = format!("/v1/plans/{}/feedback", id(&c));
    // Answers by question id: one the plan does not ask is refused, naming those it asks.
    let (status, body) = call(
        &s,
        Method::POST,
        &path,
        Some(json!({"action": "answers", "answers": [{"question": "q9", "value": "x"}]})),
        None,
    )
    .await;
    assert_error(status, &body, 400, "bad_request");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("asks no question `q9` (it asks: q1)"),
        "{body}"
    );
    let (status, body) = call(
        &s,
        Method::POST,
        &path,
        Some(json!({"action": "answers", "answers": [{"question": "q1", "value": "bob@example.com"}]})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "awaiting_review");
    let (status, body) = call(
        &s,
        Method::POST,
        &path,
        Some(json!({"action": "dance"})),
        None,
    )
    .await;
    assert_error(status, &body, 400, "bad_request");
}

/// Feedback that replans (an answer, a free-text edit) streams the replanning on the plan's
/// events as it happens: the attempt, the model's text as `token`s (the scripted model streams
/// it in pieces here), each validated step; then the new version.
#[tokio::test]
async fn replanning_progress_on_the_plan_events() {
    let mut turns = reply("missing-recipient.json", 1);
    let replan = reply("weather-email.json", 1).remove(0);
    turns.extend([replan.clone(), replan.clone()]);
    let model = ScriptedModel::new(turns).streaming(16);
    let s = start_with(Arc::new(model), ServerConfig::default()).await;
    let (status, created) = call(
        &s,
        Method::POST,
        "/v1/plans",
        Some(crate::needs_input()),
        None,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["stored"]["state"], "needs_input");
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    for (action, text) in [("answer", "bob@example.com"), ("edit", "Say hi to Bob too")] {
        let reader = watch(&s, &id, |kind, _| kind == "plan_updated").await;
        let (status, body) = call(
            &s,
            Method::POST,
            &format!("/v1/plans/{id}/feedback"),
            Some(json!({"action": action, "text": text})),
            None,
        )
        .await;
        assert_eq!(status, 200, "{action}: {body}");
        let seen = reader.await.unwrap();
        let kinds: Vec<&str> = seen.iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(kinds.first(), Some(&"snapshot"), "{kinds:?}");
        assert_eq!(
            kinds.get(1),
            Some(&"attempt_started"),
            "{action}: {kinds:?}"
        );
        // Each step of the new plan arrived before the plan itself.
        let streamed: Vec<&str> = seen
            .iter()
            .filter(|(kind, _)| kind == "step")
            .map(|(_, event)| event["data"]["step"]["id"].as_str().unwrap())
            .collect();
        assert_eq!(streamed, ["s1", "s2", "s3"], "{action}: {kinds:?}");
        let written: String = seen
            .iter()
            .filter(|(kind, _)| kind == "token")
            .map(|(_, event)| event["data"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(written, replan, "{action}: {kinds:?}");
        let (_, updated) = seen.last().unwrap();
        assert_eq!(updated["version"], body["plan"]["version"]);
        assert!(
            seen.iter()
                .all(|(_, event)| event["plan_id"] == id || event["plan"]["id"] == id)
        );
    }
}

#[tokio::test]
async fn step_updates_and_live_events() {
    let s = start(reply("weather-email.json", 1), ServerConfig::default()).await;
    let created = create(&s, None).await;
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();

    let reader = watch(&s, &id, |kind, _| kind == "step_status").await;

    let (status, body) = call(
        &s,
        Method::PATCH,
        &format!("/v1/plans/{id}/steps/s1"),
        Some(json!({"status": "in_progress", "notes": "fetching", "result": {"temp": 21}})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["plan"]["steps"][0]["status"], "in_progress");
    assert_eq!(body["plan"]["steps"][0]["result"]["temp"], 21);

    let seen = reader.await.unwrap();
    assert_eq!(seen[0].0, "snapshot");
    let (_, last) = seen.last().unwrap();
    assert_eq!(last["data"]["step"], "s1");
    assert_eq!(last["data"]["status"], "in_progress");
    assert_eq!(last["version"], 2);

    let path = format!("/v1/plans/{id}/steps/1");
    let (status, body) = call(
        &s,
        Method::PATCH,
        &path,
        Some(json!({"status": "done-ish"})),
        None,
    )
    .await;
    assert_error(status, &body, 400, "bad_request");
    let (status, body) = call(
        &s,
        Method::PATCH,
        &format!("/v1/plans/{id}/steps/99"),
        Some(json!({"status": "completed"})),
        None,
    )
    .await;
    assert_error(status, &body, 404, "not_found");
    assert!(
        body["message"].as_str().unwrap().starts_with(&format!(
            "plan `{id}` has no step 99: valid indices range from 0 to"
        )),
        "{body}"
    );
    let (status, body) = call(
        &s,
        Method::PATCH,
        &format!("/v1/plans/{id}/steps/s9"),
        Some(json!({"status": "completed"})),
        None,
    )
    .await;
    assert_error(status, &body, 404, "not_found");
    let (status, body) = call(
        &s,
        Method::PATCH,
        &path,
        Some(json!({"status": "completed", "expected_version": 1})),
        None,
    )
    .await;
    assert_error(status, &body, 409, "conflict");
    let (status, body) = call(
        &s,
        Method::PATCH,
        &path,
        Some(json!({"status": "completed", "expected_version": 2})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["plan"]["steps"][1]["status"], "completed");
    assert_eq!(body["plan"]["version"], 3);
    let (status, body) = call(&s, Method::GET, "/v1/plans/nope/events", None, None).await;
    assert_error(status, &body, 404, "not_found");

    // Repeating what the step already says (a worker's report sent again after a lost answer)
    // makes no version and no event: the first event after it is the next real change.
    let reader = watch(&s, &id, |kind, _| kind == "step_status").await;
    for repeat in [
        json!({"status": "completed"}),
        json!({"status": "completed", "expected_version": 3}),
    ] {
        let (status, body) = call(&s, Method::PATCH, &path, Some(repeat), None).await;
        assert_eq!(
            (status, body["plan"]["version"].clone()),
            (200, json!(3)),
            "{body}"
        );
    }
    // still a conflict when the version it names is stale
    let (status, body) = call(
        &s,
        Method::PATCH,
        &path,
        Some(json!({"status": "completed", "expected_version": 2})),
        None,
    )
    .await;
    assert_error(status, &body, 409, "conflict");
    let (status, body) = call(
        &s,
        Method::PATCH,
        &path,
        Some(json!({"notes": "sent"})),
        None,
    )
    .await;
    assert_eq!(
        (status, body["plan"]["version"].clone()),
        (200, json!(4)),
        "{body}"
    );
    let seen = reader.await.unwrap();
    let changes: Vec<_> = seen
        .iter()
        .filter(|(kind, _)| kind == "step_status")
        .collect();
    assert_eq!(changes.len(), 1, "{seen:?}");
    assert_eq!(changes[0].1["data"]["notes"], "sent");
    assert_eq!(changes[0].1["version"], 4);
    let (_, history) = call(
        &s,
        Method::GET,
        &format!("/v1/plans/{id}/history"),
        None,
        None,
    )
    .await;
    assert_eq!(
        history["versions"].as_array().unwrap().len(),
        4,
        "{history}"
    );

    // An update that names nothing to change is refused.
    for empty in [json!({}), json!({"expected_version": 4})] {
        let (status, body) = call(&s, Method::PATCH, &path, Some(empty), None).await;
        assert_error(status, &body, 400, "bad_request");
        assert_eq!(
            body["message"],
            "nothing to update: give the step's `status`, `notes` or `result`"
        );
    }
}

/// Asks for the weather plan as an event stream; checks the stream was opened.
async fn stream_plan(s: &crate::Server) -> reqwest::Response {
    let response = s
        .client
        .post(format!("{}/v1/plans?stream=true", s.base))
        .header("content-type", "application/json")
        .body(weather().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    response
}

#[tokio::test]
async fn streaming_plan_sends_steps_then_the_outcome() {
    let s = start(reply("weather-email.json", 1), ServerConfig::default()).await;
    let response = stream_plan(&s).await;
    let events = read_sse(response, |kind, _| kind == "outcome" || kind == "error").await;
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert!(kinds.contains(&"attempt_started"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "step").count(),
        3,
        "{kinds:?}"
    );
    let (kind, outcome) = events.last().unwrap();
    assert_eq!(kind, "outcome");
    assert_eq!(outcome["status"], "ready");
    let id = outcome["stored"]["plan"]["id"].as_str().unwrap();
    let (status, _) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(status, 200, "the streamed plan is stored");
}

/// A model that streams (the scripted one in pieces of 16 characters, as a provider's deltas
/// arrive): its text comes as `token` events, whole and in order, and each step is sent as soon
/// as the model has written it, while the rest of the reply is still coming.
#[tokio::test]
async fn streaming_plan_sends_the_model_text_as_tokens_and_steps_as_they_complete() {
    let text = reply("weather-email.json", 1).remove(0);
    let model = ScriptedModel::new([text.clone()]).streaming(16);
    let s = start_with(Arc::new(model), ServerConfig::default()).await;
    let response = stream_plan(&s).await;
    let events = read_sse(response, |kind, _| kind == "outcome" || kind == "error").await;
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    let written: String = events
        .iter()
        .filter(|(kind, _)| kind == "token")
        .map(|(_, data)| data["text"].as_str().unwrap())
        .collect();
    assert_eq!(written, text, "{kinds:?}");
    assert!(
        kinds.iter().filter(|k| **k == "token").count() >= text.chars().count() / 16,
        "{kinds:?}"
    );
    let first_step = kinds.iter().position(|k| *k == "step").unwrap();
    let last_token = kinds.iter().rposition(|k| *k == "token").unwrap();
    assert!(
        first_step < last_token,
        "s1 arrives while the model still writes: {kinds:?}"
    );
    let steps: Vec<&str> = events
        .iter()
        .filter(|(kind, _)| kind == "step")
        .map(|(_, data)| data["step"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["s1", "s2", "s3"]);
    let (kind, outcome) = events.last().unwrap();
    assert_eq!(kind, "outcome", "{outcome}");
    assert_eq!(outcome["status"], "ready");
}

/// A model that never answers and records when the pipeline gives up on its call (drops it).
struct Hanging {
    dropped: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

struct SetOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl plansmith_core::LanguageModel for Hanging {
    fn name(&self) -> String {
        "hanging".into()
    }

    fn capabilities(&self) -> plansmith_core::Capabilities {
        plansmith_core::Capabilities::default()
    }

    fn complete(
        &self,
        _request: plansmith_core::CompletionRequest,
    ) -> futures::future::BoxFuture<'_, Result<plansmith_core::Completion, plansmith_core::LlmError>>
    {
        let guard = SetOnDrop(self.dropped.clone());
        Box::pin(async move {
            let _guard = guard;
            std::future::pending().await
        })
    }
}

/// A client that closes a plan's event stream stops the planning: the model's call is dropped
/// (a local model then stops generating), as for a plain request whose client went away.
#[tokio::test]
async fn closing_a_streamed_plan_stops_the_model() {
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let model = Hanging {
        dropped: dropped.clone(),
    };
    let s = crate::start_with(std::sync::Arc::new(model), ServerConfig::default()).await;
    let response = stream_plan(&s).await;
    let events = read_sse(response, |kind, _| kind == "attempt_started").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        !dropped.load(std::sync::atomic::Ordering::SeqCst),
        "the model is still asked while the client listens"
    );
    // `read_sse` consumed and dropped the response: the connection is closed.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !dropped.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the model was still asked 10 s after the client closed the stream"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (_, page) = call(&s, Method::GET, "/v1/plans", None, None).await;
    assert_eq!(page["total"], 0, "nothing was planned, nothing is stored");
    let metrics = metrics_text(&s).await;
    let needle = "plansmith_plans_total{outcome=\"abandoned\"} 1";
    assert!(metrics.contains(needle), "missing {needle} in\n{metrics}");
}

async fn metrics_text(s: &crate::Server) -> String {
    let response = s.client.get(format!("{}/metrics", s.base)).send().await;
    response.unwrap().text().await.unwrap()
}

/// The list's `total` stops at the server's cap (`total_exact: false`) unless the request asks
/// for `exact_total`; filters apply to the count either way.
#[tokio::test]
async fn list_totals_stop_at_the_cap_unless_asked_for_exact() {
    let mut config = ServerConfig::default();
    config.list_total_cap = 2;
    let s = start(reply("weather-email.json", 3), config).await;
    for _ in 0..3 {
        create(&s, None).await;
    }
    for (query, total, exact) in [
        ("limit=1", 2, false),
        ("limit=1&exact_total=true", 3, true),
        ("limit=1&exact_total=false", 2, false),
        ("state=accepted", 0, true),
        ("state=awaiting_review&exact_total=true", 3, true),
    ] {
        let (status, page) = call(&s, Method::GET, &format!("/v1/plans?{query}"), None, None).await;
        assert_eq!(status, 200, "{query}: {page}");
        assert_eq!(
            (page["total"].as_u64(), page["total_exact"].as_bool()),
            (Some(total), Some(exact)),
            "{query}: {page}"
        );
    }
    let (status, body) = call(&s, Method::GET, "/v1/plans?exact_total=maybe", None, None).await;
    assert_error(status, &body, 400, "bad_request");
}

#[tokio::test]
async fn error_table_at_the_edge() {
    let mut config = ServerConfig::default();
    config.max_body_bytes = 2048;
    let s = start(Vec::new(), config).await;
    let post = |body: &'static str, ct: Option<&'static str>| {
        let mut req = s.client.post(format!("{}/v1/plans", s.base)).body(body);
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        req.send()
    };
    let read = |r: reqwest::Response| async move {
        let status = r.status().as_u16();
        (
            status,
            serde_json::from_str::<Value>(&r.text().await.unwrap()).unwrap(),
        )
    };
    let (status, body) = read(post("{not json", Some("application/json")).await.unwrap()).await;
    assert_error(status, &body, 400, "bad_request");
    let (status, body) = read(post("{}", Some("application/json")).await.unwrap()).await;
    assert_error(status, &body, 400, "bad_request");
    let (status, body) = read(post("{\"query\": \"x\"}", None).await.unwrap()).await;
    assert_error(status, &body, 415, "unsupported_media_type");
    let big = format!("{{\"query\": \"{}\"}}", "x".repeat(10_000));
    let (status, body) = read(
        s.client
            .post(format!("{}/v1/plans", s.base))
            .header("content-type", "application/json")
            .body(big)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(status, &body, 413, "payload_too_large");
    // A locale that is not a language tag is refused before the model is asked (it has no
    // turns: asking it would be a 502); it planned in whatever language the model guessed.
    let (status, body) = call(
        &s,
        Method::POST,
        "/v1/plans",
        Some(json!({"query": "x", "locale": "xx-invalid-!!"})),
        None,
    )
    .await;
    assert_error(status, &body, 400, "bad_request");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(r#"`locale` "xx-invalid-!!" is not a language tag"#),
        "{body}"
    );
    // the scripted model has no turns left: the model failed
    let (status, body) = call(&s, Method::POST, "/v1/plans", Some(weather()), None).await;
    assert_error(status, &body, 502, "model_error");
    let mut tagged = weather();
    tagged["locale"] = json!("zh-Hans-CN");
    let (status, body) = call(&s, Method::POST, "/v1/plans", Some(tagged), None).await;
    assert_error(status, &body, 502, "model_error");
    let (status, body) = call(&s, Method::GET, "/v2/nothing", None, None).await;
    assert_error(status, &body, 404, "not_found");
    let (status, body) = call(&s, Method::PUT, "/v1/plans", None, None).await;
    assert_error(status, &body, 405, "method_not_allowed");
    let (status, body) = call(&s, Method::GET, "/v1/plans?limit=-3", None, None).await;
    assert_error(status, &body, 400, "bad_request");
    // a body serde would read but the OpenAPI document forbids (found by schemathesis: a
    // struct read out of an array) is refused with the schema's words, before any planning
    let (status, body) = call(
        &s,
        Method::POST,
        "/v1/plans",
        Some(json!({"query": "x", "options": []})),
        None,
    )
    .await;
    assert_error(status, &body, 400, "bad_request");
    assert!(
        body["message"].as_str().unwrap().contains("/options"),
        "{body}"
    );
    assert_eq!(body["details"]["problems"][0]["path"], "/options", "{body}");
    // The body itself is named as such, and the message counts the problems it does not spell
    // out.
    let (status, body) = call(
        &s,
        Method::POST,
        "/v1/plans",
        Some(json!({"options": {"max_steps": -1, "top_k": "many"}})),
        None,
    )
    .await;
    assert_error(status, &body, 400, "bad_request");
    assert_eq!(body["details"]["problems"].as_array().unwrap().len(), 3);
    assert_eq!(
        body["message"],
        r#"invalid request body at `/options/max_steps`: -1 is less than the minimum of 0 (2 more problems in `details.problems`)"#,
        "{body}"
    );
    // A valid field is not counted as unknown because another one is wrong.
    assert_eq!(
        body["details"]["problems"][2]["message"],
        r#""query" is a required property"#
    );
    // every code of the table maps to its status
    for (code, status) in plansmith_server::ERROR_TABLE {
        let err = plansmith_server::ApiError::new(code, "x");
        assert_eq!(err.status().as_u16(), *status, "{code}");
    }
}

/// A query parameter a route does not take is refused by name, before the handler runs: a
/// misspelt filter does not list every plan, a `?version=` does not turn deleting one version
/// into deleting the plan, a misspelt `stream` does not plan.
#[tokio::test]
async fn query_parameters_a_route_does_not_take_are_refused() {
    let s = start(reply("weather-email.json", 2), ServerConfig::default()).await;
    let created = create(&s, None).await;
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();

    let (status, body) = call(&s, Method::GET, "/v1/plans?status=accepted", None, None).await;
    assert_error(status, &body, 400, "bad_request");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("unknown query parameter `status` for GET /v1/plans: it takes "),
        "{body}"
    );
    assert!(message.contains("`state`"), "{body}");
    assert_eq!(body["details"]["unknown_parameters"], json!(["status"]));
    // The parameters it takes still work, together.
    let (status, page) = call(
        &s,
        Method::GET,
        "/v1/plans?limit=1&state=awaiting_review&exact_total=true",
        None,
        None,
    )
    .await;
    assert_eq!((status, page["total"].clone()), (200, json!(1)), "{page}");

    // Deleting "one version" of a plan is refused, and deletes nothing.
    let path = format!("/v1/plans/{id}?version=1");
    let (status, body) = call(&s, Method::DELETE, &path, None, None).await;
    assert_error(status, &body, 400, "bad_request");
    assert_eq!(
        body["message"],
        "unknown query parameter `version` for DELETE /v1/plans/{id}: it takes none",
        "{body}"
    );
    let (status, _) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(status, 200, "the plan is still there");
    let (status, got) = call(&s, Method::GET, &path, None, None).await;
    assert_eq!((status, got["version"].clone()), (200, json!(1)), "{got}");

    // Every unknown name is listed once; nothing is planned (the model's last turn is left
    // for the next request).
    let (status, body) = call(
        &s,
        Method::POST,
        "/v1/plans?streem=true&auto_accept=true&streem=1",
        Some(weather()),
        None,
    )
    .await;
    assert_error(status, &body, 400, "bad_request");
    assert_eq!(
        body["details"]["unknown_parameters"],
        json!(["streem", "auto_accept"])
    );
    create(&s, None).await;

    // Routes outside the API (probes, the page) are not checked.
    let (status, _) = call(&s, Method::GET, "/healthz?probe=lb", None, None).await;
    assert_eq!(status, 200);

    // Under tokens, a caller without a valid one hears that, not the route's parameters.
    let s = start(Vec::new(), tokens(&[("ta", "alice")])).await;
    let (status, body) = call(&s, Method::GET, "/v1/plans?status=x", None, Some("wrong")).await;
    assert_error(status, &body, 401, "unauthorized");
    let (status, body) = call(&s, Method::GET, "/v1/plans?status=x", None, Some("ta")).await;
    assert_error(status, &body, 400, "bad_request");
}

/// A body that breaks a union of the schema (a tagged feedback, an optional enum) is
/// explained by the values or types that would do, at the place that is wrong, not by
/// "not valid under any of the schemas listed in the 'oneOf' keyword".
#[tokio::test]
async fn body_errors_name_what_would_do() {
    let s = start(reply("weather-email.json", 1), ServerConfig::default()).await;
    let created = create(&s, None).await;
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let feedback = format!("/v1/plans/{id}/feedback");
    let step = format!("/v1/plans/{id}/steps/s1");
    let cases = [
        (
            Method::POST,
            feedback.as_str(),
            json!({"action": "fly"}),
            "/action",
            r#""fly" is not one of "accept", "reject", "edit", "patch", "answer", "answers", "step""#,
        ),
        (
            Method::POST,
            &feedback,
            json!({"action": "edit"}),
            "",
            r#""text" is a required property"#,
        ),
        (
            Method::POST,
            &feedback,
            json!({"action": "step", "step": "s1", "verdict": "maybe"}),
            "/verdict",
            r#""maybe" is not one of "approve", "deny", "retry", "skip", "abort""#,
        ),
        (
            Method::POST,
            &feedback,
            json!({"action": "answer", "text": 5}),
            "/text",
            r#"5 is not of type "string""#,
        ),
        (
            Method::PATCH,
            &step,
            json!({"status": "done"}),
            "/status",
            r#""done" is not one of "not_started", "in_progress", "completed", "blocked", "failed", "skipped""#,
        ),
        (
            Method::PATCH,
            &step,
            json!({"status": 7}),
            "/status",
            r#"7 is not of type "string" or "null""#,
        ),
        (
            Method::POST,
            "/v1/plans",
            json!({"query": "x", "history": [{"role": "robot", "content": "hi"}]}),
            "/history/0/role",
            r#""robot" is not one of "system", "user", "assistant""#,
        ),
        // A misspelt field is refused by name (it was ignored: the plan waited for review).
        (
            Method::POST,
            "/v1/plans",
            json!({"query": "x", "auto_acept": true}),
            "",
            r#"unknown field "auto_acept" (the body's schema is in /openapi.json)"#,
        ),
        // So is a misspelt planning knob (it planned with the default).
        (
            Method::POST,
            "/v1/plans",
            json!({"query": "x", "options": {"max_step": 2}}),
            "/options",
            r#"unknown field "max_step" (the body's schema is in /openapi.json)"#,
        ),
        (
            Method::POST,
            &feedback,
            json!({"action": "reject", "reason": "too long", "why": 1}),
            "",
            r#"unknown fields "reason", "why" (the body's schema is in /openapi.json)"#,
        ),
    ];
    for (method, path, body, at, message) in cases {
        let (status, answer) = call(&s, method, path, Some(body.clone()), None).await;
        assert_error(status, &answer, 400, "bad_request");
        let problem = &answer["details"]["problems"][0];
        assert_eq!(
            (problem["path"].as_str(), problem["message"].as_str()),
            (Some(at), Some(message)),
            "{body}: {answer}"
        );
    }
}

#[tokio::test]
async fn rate_limit_answers_429() {
    let mut config = ServerConfig::default();
    config.rate_limit_per_sec = 3;
    let s = start(Vec::new(), config).await;
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let (status, body) = call(&s, Method::GET, "/v1/plans", None, None).await;
        if status == 429 {
            assert_error(status, &body, 429, "rate_limited");
        }
        statuses.push(status);
    }
    assert!(
        statuses.contains(&200) && statuses.contains(&429),
        "{statuses:?}"
    );
}

/// The probes are not rate limited: a flood of requests with bad tokens empties the bucket
/// they share with every caller without a valid token, and `/healthz` and `/readyz` (which
/// take no token) still answer `200` while an API route answers `429`.
#[tokio::test]
async fn probes_answer_while_bad_tokens_are_rate_limited() {
    let mut config = tokens(&[("ta", "alice")]);
    config.rate_limit_per_sec = 2;
    let s = start(Vec::new(), config).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let (status, _) = call(&s, Method::GET, "/v1/plans", None, Some("wrong")).await;
        statuses.push(status);
    }
    assert_eq!(statuses, [401, 401, 429, 429]);
    for _ in 0..3 {
        for probe in ["/healthz", "/readyz"] {
            let (status, body) = call(&s, Method::GET, probe, None, None).await;
            assert_eq!(status, 200, "{probe}: {body}");
        }
    }
    let (status, body) = call(&s, Method::GET, "/v1/plans", None, Some("wrong")).await;
    assert_error(status, &body, 429, "rate_limited");
}

#[tokio::test]
async fn rate_limit_is_per_owner_with_retry_after() {
    let mut config = tokens(&[("ta", "alice"), ("tb", "bob")]);
    config.rate_limit_per_sec = 2;
    let s = start(Vec::new(), config).await;
    let get = |token: Option<&'static str>| {
        let mut req = s.client.get(format!("{}/v1/plans", s.base));
        if let Some(token) = token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        req.send()
    };
    // alice spends her burst of 2, then is limited with Retry-After and the table's body
    for _ in 0..2 {
        assert_eq!(get(Some("ta")).await.unwrap().status().as_u16(), 200);
    }
    let limited = get(Some("ta")).await.unwrap();
    assert_eq!(limited.status().as_u16(), 429);
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    let body: Value = serde_json::from_str(&limited.text().await.unwrap()).unwrap();
    assert_error(429, &body, 429, "rate_limited");
    assert_eq!(body["details"]["retry_after_secs"], retry);
    // bob is not affected by alice's traffic
    for _ in 0..2 {
        assert_eq!(get(Some("tb")).await.unwrap().status().as_u16(), 200);
    }
    // requests without a valid token share their own bucket: 401 until it is empty, then 429
    let mut anonymous = Vec::new();
    for token in [None, Some("wrong"), None] {
        anonymous.push(get(token).await.unwrap().status().as_u16());
    }
    assert_eq!(anonymous, [401, 401, 429]);
    // after Retry-After, alice is admitted again
    tokio::time::sleep(std::time::Duration::from_secs(retry)).await;
    assert_eq!(get(Some("ta")).await.unwrap().status().as_u16(), 200);
}

#[tokio::test]
async fn tokens_map_to_owners_and_owners_see_only_their_plans() {
    let s = start(
        reply("weather-email.json", 2),
        tokens(&[("ta", "alice"), ("tb", "bob")]),
    )
    .await;
    let (status, body) = call(&s, Method::GET, "/v1/plans", None, None).await;
    assert_error(status, &body, 401, "unauthorized");
    let (status, body) = call(&s, Method::GET, "/v1/plans", None, Some("wrong")).await;
    assert_error(status, &body, 401, "unauthorized");
    // The metrics count every owner's plans: a token is needed for them too (the probes, the
    // API description and the static review page hold no data and are served without one).
    let (status, body) = call(&s, Method::GET, "/metrics", None, None).await;
    assert_error(status, &body, 401, "unauthorized");
    let metrics = s
        .client
        .get(format!("{}/metrics", s.base))
        .bearer_auth("ta")
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    for open in ["/healthz", "/openapi.json", "/"] {
        let response = s
            .client
            .get(format!("{}{open}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{open}");
    }

    let created = create(&s, Some("ta")).await;
    assert_eq!(created["stored"]["plan"]["owner"], "alice");
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let (_, mine) = call(&s, Method::GET, "/v1/plans", None, Some("ta")).await;
    assert_eq!(mine["total"], 1);
    let (_, theirs) = call(&s, Method::GET, "/v1/plans?owner=alice", None, Some("tb")).await;
    assert_eq!(theirs["total"], 0, "bob cannot list alice's plans");
    for (method, path, body) in [
        (Method::GET, format!("/v1/plans/{id}"), None),
        (Method::GET, format!("/v1/plans/{id}/history"), None),
        (Method::GET, format!("/v1/plans/{id}/events"), None),
        (
            Method::POST,
            format!("/v1/plans/{id}/feedback"),
            Some(json!({"action": "accept"})),
        ),
        (
            Method::PATCH,
            format!("/v1/plans/{id}/steps/0"),
            Some(json!({"status": "completed"})),
        ),
        (Method::DELETE, format!("/v1/plans/{id}"), None),
    ] {
        let (status, body) = call(&s, method, &path, body, Some("tb")).await;
        assert_error(status, &body, 404, "not_found");
    }
    let (status, _) = call(
        &s,
        Method::GET,
        &format!("/v1/plans/{id}"),
        None,
        Some("ta"),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn metrics_health_and_page() {
    let s = start(reply("weather-email.json", 1), ServerConfig::default()).await;
    create(&s, None).await;
    let (status, health) = call(&s, Method::GET, "/healthz", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    let text = metrics_text(&s).await;
    for needle in [
        "plansmith_plans_total{outcome=\"ready\"} 1",
        "plansmith_ready_ratio 1",
        "plansmith_steps_per_plan_count 1",
        "plansmith_stage_seconds_count{stage=\"total\"} 1",
        "plansmith_stage_seconds_count{stage=\"queue\"} 1",
        "plansmith_http_request_seconds_count{route=\"/v1/plans\",status=\"201\"} 1",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    let page = s.client.get(format!("{}/", s.base)).send().await.unwrap();
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(page.text().await.unwrap().contains("plansmith"));
}

#[test]
fn no_tokens_means_loopback_only() {
    let config = ServerConfig::default();
    assert!(config.check_bind("0.0.0.0:8080".parse().unwrap()).is_err());
    assert!(config.check_bind("127.0.0.1:8080".parse().unwrap()).is_ok());
    assert!(
        tokens(&[("t", "o")])
            .check_bind("0.0.0.0:8080".parse().unwrap())
            .is_ok()
    );
}

/// A page on a listed origin calls the API with its token (CORS): the preflight is answered
/// without a token and without spending the rate limit, the answers (errors too) carry the
/// origin, and a page on another origin gets no permission.
#[tokio::test]
async fn listed_origins_may_call_the_api_from_a_browser() {
    let app = "http://app.example:3000";
    let mut config = tokens(&[("ta", "alice")]);
    config.cors_origins = vec![app.to_owned()];
    config.rate_limit_per_sec = 1;
    let s = start(reply("weather-email.json", 3), config).await;
    let allowed = |response: &reqwest::Response| {
        response
            .headers()
            .get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let preflight = |origin: &'static str| {
        s.client
            .request(Method::OPTIONS, format!("{}/v1/plans", s.base))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
            .send()
    };
    // Several preflights, over a rate limit of one request per second: none is refused.
    for _ in 0..3 {
        let answer = preflight(app).await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(allowed(&answer).as_deref(), Some(app));
        let headers = answer.headers();
        let list = |name: &str| headers[name].to_str().unwrap().to_ascii_lowercase();
        assert!(list("access-control-allow-methods").contains("post"));
        assert!(list("access-control-allow-headers").contains("authorization"));
        assert_eq!(list("access-control-max-age"), "3600");
    }
    let created = s
        .client
        .post(format!("{}/v1/plans", s.base))
        .header("origin", app)
        .bearer_auth("ta")
        .header("content-type", "application/json")
        .body(weather().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(allowed(&created).as_deref(), Some(app));
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    // An error answer carries it too: the page can read why.
    let refused = s
        .client
        .get(format!("{}/v1/plans", s.base))
        .header("origin", app)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(allowed(&refused).as_deref(), Some(app));
    let exposed = refused.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("retry-after"), "{exposed}");
    assert!(exposed.contains("x-request-id"), "{exposed}");
    // A browser-based MCP client on the page may use `/mcp` (streamable HTTP's headers).
    let mcp = s
        .client
        .request(Method::OPTIONS, format!("{}/mcp", s.base))
        .header("origin", app)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type, mcp-session-id, mcp-protocol-version, last-event-id",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 200);
    let allowed_headers = mcp.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for name in ["mcp-session-id", "mcp-protocol-version", "last-event-id"] {
        assert!(allowed_headers.contains(name), "{allowed_headers}");
    }
    assert!(exposed.contains("mcp-session-id"), "{exposed}");
    // Another origin: no permission (the browser then keeps the answer from the page).
    let other = preflight("http://elsewhere.example").await.unwrap();
    assert_eq!(allowed(&other), None);
}

/// Every answer names its request in `x-request-id` (errors and refusals too): the caller's
/// own id when a log can carry it as is, else a new one, different each time.
#[tokio::test]
async fn every_answer_names_its_request() {
    let mut config = ServerConfig::default();
    config.rate_limit_per_sec = 1;
    let limited = start(reply("weather-email.json", 1), config).await;
    let open = start(reply("weather-email.json", 1), ServerConfig::default()).await;
    let fresh = |id: &str| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit());
    let (status, first) = named(&limited, "/v1/plans", None).await;
    assert_eq!(status, 200);
    assert!(fresh(&first), "{first}");
    // Over the rate limit (one a second): refused, and named all the same.
    let (status, second) = named(&limited, "/v1/plans", None).await;
    assert_eq!(status, 429);
    assert!(fresh(&second) && second != first, "{second} after {first}");
    let (status, echoed) = named(&open, "/v1/plans/nope", Some("trace-42.a_b:c")).await;
    assert_eq!(status, 404);
    assert_eq!(echoed, "trace-42.a_b:c");
    for unusable in ["has space", &"x".repeat(129), "quote\""] {
        let (_, id) = named(&open, "/healthz", Some(unusable)).await;
        assert!(fresh(&id), "{unusable} gave {id}");
    }
}

/// `GET path` with `x-request-id: id`: the status and the answer's `x-request-id`.
async fn named(s: &crate::Server, path: &str, id: Option<&str>) -> (u16, String) {
    let mut request = s.client.get(format!("{}{path}", s.base));
    if let Some(id) = id {
        request = request.header("x-request-id", id);
    }
    let answer = request.send().await.unwrap();
    let id = answer.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    (answer.status().as_u16(), id)
}

/// Without origins configured (the default) nothing is allowed across origins: no CORS
/// headers, and a request from another origin, a preflight too, is refused. With `*`, any
/// origin.
#[tokio::test]
async fn no_cross_origin_calls_unless_configured() {
    let s = start(reply("weather-email.json", 1), ServerConfig::default()).await;
    let preflight = s
        .client
        .request(Method::OPTIONS, format!("{}/v1/plans", s.base))
        .header("origin", "http://app.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 403);
    assert!(
        preflight
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    let get = s
        .client
        .get(format!("{}/healthz", s.base))
        .header("origin", "http://app.example")
        .send()
        .await
        .unwrap();
    assert!(get.headers().get("access-control-allow-origin").is_none());

    let mut any = ServerConfig::default();
    any.cors_origins = vec!["*".to_owned()];
    let s = start(reply("weather-email.json", 1), any).await;
    let get = s
        .client
        .get(format!("{}/healthz", s.base))
        .header("origin", "http://anything.example")
        .send()
        .await
        .unwrap();
    assert_eq!(get.headers()["access-control-allow-origin"], "*");
}

/// An origin a browser could never send is refused at start, with what is wrong.
#[test]
fn cors_origins_are_checked_at_start() {
    let addr = "127.0.0.1:8080".parse().unwrap();
    let with = |origin: &str| {
        let mut config = ServerConfig::default();
        config.cors_origins = vec![origin.to_owned()];
        config
    };
    for good in ["*", "http://localhost:3000", "https://app.example.com"] {
        assert!(with(good).check(addr).is_ok(), "{good}");
    }
    for (bad, why) in [
        ("http://localhost:3000/", "has a path (or a trailing slash)"),
        ("localhost:3000", "has no scheme"),
        ("ftp://files.example", "is not http or https"),
        ("https://", "has no host"),
    ] {
        let err = with(bad).check(addr).unwrap_err().to_string();
        assert!(err.contains(why), "{bad}: {err}");
        assert!(err.contains("e.g. http://localhost:3000"), "{err}");
    }
    // `check` includes the loopback rule.
    assert!(
        ServerConfig::default()
            .check("0.0.0.0:8080".parse().unwrap())
            .is_err()
    );
}

/// A reader that falls further behind than the bus holds (256 events) gets the plan as it is
/// now in a new `snapshot`, then the events still held, in order.
#[tokio::test]
async fn a_lagging_event_reader_gets_a_new_snapshot() {
    use plansmith_server::PlanBusEvent;
    use plansmith_store::{Location, PlanStore};

    let dir = tempfile::tempdir().unwrap();
    let store = PlanStore::open(&Location::Sqlite(dir.path().join("plans.db")))
        .await
        .unwrap();
    let model = std::sync::Arc::new(plansmith_core::ScriptedModel::new(reply(
        "weather-email.json",
        1,
    )));
    let state = crate::app_state(store, model, ServerConfig::default());
    let s = crate::serve_state(state.clone(), dir).await;
    let created = create(&s, None).await;
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let reader = watch(&s, &id, |kind, event| {
        kind == "burst" && event["data"]["n"] == 599
    })
    .await;
    crate::complete_in_store(&state.store, &id, 0).await;
    // 600 events at once: this test's runtime has one thread, so the stream cannot read any
    // of them before the last is published.
    for n in 0..600 {
        state.bus.publish(PlanBusEvent {
            kind: "burst".to_owned(),
            plan_id: id.clone(),
            version: Some(2),
            data: json!({"n": n}),
        });
    }
    let seen = reader.await.unwrap();
    let kinds: Vec<&str> = seen.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(kinds[..2], ["snapshot", "snapshot"], "{kinds:?}");
    assert_eq!(seen[0].1["plan"]["version"], 1);
    assert_eq!(seen[1].1["plan"]["version"], 2);
    assert_eq!(seen[1].1["plan"]["steps"][0]["status"], "completed");
    let numbers: Vec<u64> = seen[2..]
        .iter()
        .map(|(kind, event)| {
            assert_eq!(kind, "burst");
            event["data"]["n"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(numbers, (344..600).collect::<Vec<u64>>());
}
