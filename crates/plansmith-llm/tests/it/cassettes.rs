//! Recorded-traffic replays: each cassette's request must match what the client sends (the
//! request boundary), and its reply must become the expected outcome through the real
//! `Planner` (strategy, usage, steps).

use plansmith_core::{Action, Outcome, OutcomeStatus, PlanEvent, PlanRequest};
use serde_json::{Value, json};

use crate::support::{self, Cassette, Client, assert_strict, bodies, replay};

/// Replays a cassette and checks the outcome against its `expect` block.
async fn check(name: &str) -> (Cassette, Client, Outcome, Vec<Value>, Vec<PlanEvent>) {
    let cassette = support::load_cassette(name);
    let server = replay(&cassette).await;
    let client = support::cassette_client(&cassette, &server.uri());
    let planner = client.planner();
    let request = PlanRequest::new(cassette.query.clone());
    let streamed = cassette
        .interactions
        .iter()
        .any(|i| i.request.body.get("stream") == Some(&json!(true)));
    let mut events = Vec::new();
    let run = async {
        if streamed {
            let mut on_event = |event: PlanEvent| events.push(event);
            planner.plan_with_events(&request, &mut on_event).await
        } else {
            planner.plan(&request).await
        }
    };
    let result = tokio::time::timeout(support::BOUND, run)
        .await
        .unwrap_or_else(|_| panic!("{name}: timed out"));
    let sent = bodies(&server).await;
    // On a mismatch, show what the client sent: the request boundary is part of the contract.
    let outcome = result.unwrap_or_else(|e| {
        panic!(
            "{name}: {e}\nsent: {sent:#}",
            sent = Value::Array(sent.clone())
        )
    });
    let expect = &cassette.expect;
    assert_eq!(
        serde_json::to_value(&outcome.status).unwrap()["status"],
        expect["status"],
        "{name}: {:#?}",
        outcome.diagnostics
    );
    assert_eq!(
        outcome.diagnostics.strategy.map(|s| s.as_str()),
        expect["strategy"].as_str(),
        "{name}: strategy recorded in the diagnostics"
    );
    let usage = outcome.diagnostics.usage;
    assert_eq!(
        json!([usage.prompt_tokens, usage.completion_tokens]),
        expect["usage"],
        "{name}: usage"
    );
    assert_eq!(
        client.usage(),
        usage,
        "{name}: the client counts the same tokens"
    );
    let steps = expect["steps"].as_array().unwrap();
    assert_eq!(
        outcome.plan.steps.len(),
        steps.len(),
        "{name}: {:#?}",
        outcome.plan.steps
    );
    for (step, want) in outcome.plan.steps.iter().zip(steps) {
        match &step.action {
            Action::Tool {
                name: tool,
                arguments,
            } => {
                assert_eq!(tool, want["name"].as_str().unwrap(), "{name}");
                assert_eq!(
                    &Value::Object(arguments.clone()),
                    &want["arguments"],
                    "{name}: arguments (absent optionals must not come back as null)"
                );
            }
            Action::Reply { text } => assert_eq!(text, want["reply"].as_str().unwrap(), "{name}"),
            other => panic!("{name}: unexpected action {other:?}"),
        }
    }
    if let Some(refused) = expect.get("refused") {
        let got: Vec<&str> = client.refused().iter().map(|s| s.as_str()).collect();
        assert_eq!(json!(got), *refused, "{name}: refusals remembered");
    }
    if let Some(finish) = expect.get("finish") {
        assert_eq!(
            serde_json::to_value(outcome.diagnostics.attempts[0].finish).unwrap(),
            *finish,
            "{name}"
        );
    }
    let text = serde_json::to_string(&outcome).unwrap();
    assert!(
        !text.contains(support::KEY) && !text.contains(support::ANTHROPIC_KEY),
        "{name}: key in the outcome"
    );
    (cassette, client, outcome, sent, events)
}

#[tokio::test]
async fn openai_strict_json_schema() {
    let (_, _, _, sent, _) = check("openai/json_schema_strict.json").await;
    assert_eq!(sent.len(), 1);
    let format = &sent[0]["response_format"]["json_schema"];
    assert_eq!(format["strict"], true);
    assert_strict(&format["schema"], "schema");
    // Optional fields became nullable, the tool union and its argument schemas are intact.
    let schema = &format["schema"];
    assert_eq!(
        schema["properties"]["questions"]["anyOf"][1],
        json!({"type": "null"})
    );
    let branches = schema["properties"]["steps"]["items"]["anyOf"]
        .as_array()
        .unwrap();
    assert!(
        branches
            .iter()
            .any(|b| b["properties"]["name"]["const"] == "get_weather")
    );
    assert!(
        sent[0].get("max_tokens").is_none(),
        "OpenAI gets max_completion_tokens"
    );
    assert!(sent[0].get("tools").is_none());
}

#[tokio::test]
async fn anthropic_forced_tool_use() {
    let (_, _, _, sent, _) = check("anthropic/tool_use.json").await;
    let body = &sent[0];
    assert!(
        body["system"].as_str().unwrap().len() > 100,
        "system prompt goes in `system`"
    );
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    let schema = &body["tools"][0]["input_schema"];
    assert!(
        schema.to_string().contains("maxLength"),
        "tool schemas are sent whole"
    );
    assert!(body.get("response_format").is_none());
}

#[tokio::test]
async fn ollama_tool_calls() {
    let (_, _, outcome, sent, _) = check("ollama/tool_calls.json").await;
    assert!(sent[0].get("response_format").is_none());
    assert_eq!(sent[0]["tools"][0]["function"]["name"], "planning");
    assert!(
        outcome.diagnostics.attempts[0]
            .raw
            .contains("math.factorial"),
        "the tool arguments are the raw output"
    );
}

#[tokio::test]
async fn vllm_think_tags_missing_usage_unknown_finish_reason() {
    let (_, _, outcome, sent, _) = check("vllm/json_schema_think_abort.json").await;
    assert_eq!(sent[0]["max_tokens"], 2048);
    // A compatible server decodes with a grammar from the schema: the bounds that make the
    // reply end are kept, the rest is the strict subset.
    let schema = &sent[0]["response_format"]["json_schema"]["schema"];
    support::assert_strict_keeping_bounds(schema, "schema");
    assert!(
        schema["properties"]["thought"]["maxLength"].is_u64(),
        "free text keeps its bound: {}",
        schema["properties"]["thought"]
    );
    assert!(
        schema["properties"]["steps"]["maxItems"].is_u64(),
        "the steps keep their bound: {}",
        schema["properties"]["steps"]
    );
    assert!(
        outcome.diagnostics.attempts[0].raw.starts_with("<think>"),
        "raw output kept for diagnostics"
    );
}

#[tokio::test]
async fn deepseek_reasoner_falls_back_to_json_mode_and_drops_reasoning() {
    let (_, client, outcome, sent, _) = check("deepseek/reasoner_fallback_to_json_mode.json").await;
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[2]["response_format"], json!({"type": "json_object"}));
    assert!(sent[2].get("tools").is_none());
    assert!(
        !outcome.diagnostics.attempts[0].raw.contains("translation"),
        "reasoning_content stays out of the plan text"
    );
    let caps = client.model().capabilities();
    assert!(
        !caps.json_schema && !caps.tool_calling && caps.json_mode,
        "{caps:?}"
    );
}

#[tokio::test]
async fn openai_stream_reports_steps_before_the_reply_ends() {
    let (_, _, _, sent, events) = check("openai/stream_json_schema.json").await;
    assert_eq!(sent[0]["stream"], true);
    assert_strict(
        &sent[0]["response_format"]["json_schema"]["schema"],
        "schema",
    );
    early_steps(&events, 2);
}

#[tokio::test]
async fn anthropic_stream_reports_steps_before_the_reply_ends() {
    let (_, _, _, sent, events) = check("anthropic/stream_tool_use.json").await;
    assert_eq!(sent[0]["stream"], true);
    early_steps(&events, 2);
}

/// `n` step events, the first one before the last token, each without errors.
fn early_steps(events: &[PlanEvent], n: usize) {
    let step_at: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, PlanEvent::Step { .. }))
        .map(|(idx, _)| idx)
        .collect();
    let last_token = events
        .iter()
        .rposition(|e| matches!(e, PlanEvent::Token { .. }))
        .unwrap();
    assert_eq!(step_at.len(), n, "{events:#?}");
    assert!(
        step_at[0] < last_token,
        "the first step comes before the reply ends"
    );
    for event in events {
        if let PlanEvent::Step {
            diagnostics, step, ..
        } = event
        {
            assert!(
                diagnostics.iter().all(|d| !d.is_error()),
                "{step:?}: {diagnostics:?}"
            );
        }
    }
    assert!(matches!(
        events[0],
        PlanEvent::AttemptStarted { attempt: 0, .. }
    ));
    let n_tokens = events
        .iter()
        .filter(|e| matches!(e, PlanEvent::Token { .. }))
        .count();
    assert!(n_tokens > 10, "tokens are streamed: {n_tokens}");
}

#[test]
fn every_cassette_is_replayed_by_a_test() {
    let source = include_str!("cassettes.rs");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cassettes");
    for provider in std::fs::read_dir(&dir).unwrap() {
        let provider = provider.unwrap().path();
        for file in std::fs::read_dir(&provider).unwrap() {
            let file = file.unwrap().path();
            let name = format!(
                "{}/{}",
                provider.file_name().unwrap().to_string_lossy(),
                file.file_name().unwrap().to_string_lossy()
            );
            assert!(
                source.contains(&format!("\"{name}\"")),
                "cassette {name} is not used by any test"
            );
            let _ = support::load_cassette(&name);
        }
    }
    let _ = OutcomeStatus::Ready;
}
