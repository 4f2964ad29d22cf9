//! Fault tests against local mock servers: each ends in a plan or a clear error, never a hang
//! or a panic, within a bounded time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use plansmith_core::llm::StreamEvent;
use plansmith_core::{
    CompletionRequest, LanguageModel, LlmError, Message, OutcomeStatus, PlanError, PlanEvent,
    PlanRequest, Planner, Strategy,
};
use plansmith_llm::{AnthropicClient, ClientConfig, OpenAiClient, Provider};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use wiremock::matchers::{body_partial_json, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::{self, PLAN, bodies, catalog, chat_reply, openai_config};

fn client(uri: &str) -> Arc<OpenAiClient> {
    Arc::new(OpenAiClient::new(openai_config(uri, Provider::OpenAiCompatible, "m")).unwrap())
}

async fn bounded<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(support::BOUND, future)
        .await
        .expect("the test hung")
}

fn json_reply(body: serde_json::Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

async fn plan(model: Arc<dyn LanguageModel>) -> Result<plansmith_core::Outcome, PlanError> {
    Planner::new(catalog(), model)
        .plan(&PlanRequest::new("Weather in Paris?"))
        .await
}

#[tokio::test]
async fn rate_limited_429_honours_retry_after_seconds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1")
                .set_body_json(json!({"error": {"message": "Rate limit reached"}})),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(json_reply(chat_reply(PLAN)))
        .mount(&server)
        .await;
    let started = Instant::now();
    let outcome = bounded(plan(client(&server.uri()))).await.unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Ready);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(950),
        "Retry-After: 1 was not honoured ({waited:?}; backoff alone is 10 ms)"
    );
    assert_eq!(bodies(&server).await.len(), 2);
}

#[tokio::test]
async fn rate_limited_429_honours_retry_after_http_date() {
    let server = MockServer::start().await;
    let when = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(2));
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", when.as_str()))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(json_reply(chat_reply(PLAN)))
        .mount(&server)
        .await;
    let started = Instant::now();
    let outcome = bounded(plan(client(&server.uri()))).await.unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Ready);
    // HTTP dates have whole-second resolution: at least ~1 s of the 2 s remains.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn retry_after_beyond_the_cap_fails_fast_with_a_clear_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "3600"))
        .mount(&server)
        .await;
    let started = Instant::now();
    let err = bounded(plan(client(&server.uri()))).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        err.to_string()
            .contains("rate limited: the server asks to wait 3600 s"),
        "{err}"
    );
    assert_eq!(bodies(&server).await.len(), 1);
}

#[tokio::test]
async fn server_error_then_success() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_string("upstream exploded"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(json_reply(chat_reply(PLAN)))
        .mount(&server)
        .await;
    let outcome = bounded(plan(client(&server.uri()))).await.unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Ready);
    assert_eq!(bodies(&server).await.len(), 2);
}

#[tokio::test]
async fn persistent_5xx_gives_up_after_the_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).set_body_string("overloaded"))
        .mount(&server)
        .await;
    let err = bounded(plan(client(&server.uri()))).await.unwrap_err();
    assert!(
        matches!(&err, PlanError::Model { source: source @ LlmError::Status { status: 503, message }, .. }
            if message.contains("after 2 retries") && source.is_retryable() && err.to_string().contains("HTTP 503")),
        "{err}"
    );
    assert_eq!(bodies(&server).await.len(), 3);
}

/// A redirect is not followed (the prompt would go wherever it points) and not retried.
#[tokio::test]
async fn a_redirect_to_another_host_is_refused_not_followed() {
    let elsewhere = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"choices": []})))
        .mount(&elsewhere)
        .await;
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(307).insert_header(
            "location",
            format!("{}/v1/chat/completions", elsewhere.uri()),
        ))
        .mount(&server)
        .await;
    let err = bounded(plan(client(&server.uri()))).await.unwrap_err();
    assert!(
        matches!(&err, PlanError::Model { source: source @ LlmError::Rejected(m), .. }
            if m.contains("HTTP 307") && m.contains("does not follow redirects") && !source.is_retryable()),
        "{err}"
    );
    assert_eq!(bodies(&server).await.len(), 1, "not retried");
    assert!(
        bodies(&elsewhere).await.is_empty(),
        "the prompt went to the redirect's host"
    );
}

#[tokio::test]
async fn other_4xx_is_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(404)
                .set_body_json(json!({"error": {"message": "The model `m` does not exist"}})),
        )
        .mount(&server)
        .await;
    let err = bounded(plan(client(&server.uri()))).await.unwrap_err();
    assert!(
        matches!(&err, PlanError::Model { source: source @ LlmError::Status { status: 404, message }, .. }
            if message.contains("does not exist") && !source.is_retryable()),
        "{err}"
    );
    assert_eq!(bodies(&server).await.len(), 1);
}

#[tokio::test]
async fn the_api_key_never_appears_in_errors_or_diagnostics() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({"error": {"message": format!("Incorrect API key provided: {}. You can find your API key at …", support::KEY)}})))
        .mount(&server)
        .await;
    let model = client(&server.uri());
    let err = bounded(plan(model.clone())).await.unwrap_err();
    let shown = format!("{err} {err:?} {:?} {model:?}", err.diagnostics());
    assert!(!shown.contains(support::KEY), "{shown}");
    assert!(
        shown.contains("Incorrect API key provided: [redacted]"),
        "{shown}"
    );
}

#[tokio::test]
async fn timeout_is_a_clear_error_after_bounded_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(json_reply(chat_reply(PLAN)).set_delay(Duration::from_secs(20)))
        .mount(&server)
        .await;
    let mut config = openai_config(&server.uri(), Provider::OpenAiCompatible, "m");
    config.request_timeout = Duration::from_millis(300);
    config.retry = support::fast_retry(1);
    let started = Instant::now();
    let err = bounded(plan(Arc::new(OpenAiClient::new(config).unwrap())))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            PlanError::Model {
                source: LlmError::Timeout(300),
                ..
            }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(bodies(&server).await.len(), 2);
}

#[tokio::test]
async fn dropping_the_call_cancels_it() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(json_reply(chat_reply(PLAN)).set_delay(Duration::from_secs(20)))
        .mount(&server)
        .await;
    let model = client(&server.uri());
    let started = Instant::now();
    let cut = tokio::time::timeout(Duration::from_millis(200), plan(model.clone())).await;
    assert!(cut.is_err());
    assert!(started.elapsed() < Duration::from_secs(2));
    // The client is still usable afterwards.
    assert_eq!(model.usage(), plansmith_core::Usage::default());
}

#[tokio::test]
async fn non_json_body_is_a_clear_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw("<html><body>502 Bad Gateway</body></html>", "text/html"),
        )
        .mount(&server)
        .await;
    let err = bounded(plan(client(&server.uri()))).await.unwrap_err();
    assert!(
        matches!(&err, PlanError::Model { source: LlmError::Protocol(m), .. } if m.contains("not a chat completion") && m.contains("502 Bad Gateway")),
        "{err}"
    );
}

#[tokio::test]
async fn rejected_response_format_falls_back_to_tools_then_json_mode_and_is_remembered() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"response_format": {"type": "json_schema"}})))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"object": "error", "message": "response_format of type json_schema is not supported", "type": "BadRequestError", "code": 400})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"tool_choice": "required"})))
        .respond_with(ResponseTemplate::new(400).set_body_json(
            json!({"error": {"message": "tool_choice is not supported for this model"}}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_partial_json(
            json!({"response_format": {"type": "json_object"}}),
        ))
        .respond_with(json_reply(chat_reply(PLAN)))
        .mount(&server)
        .await;
    let model = client(&server.uri());
    let outcome = bounded(plan(model.clone())).await.unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Ready);
    assert_eq!(outcome.diagnostics.strategy, Some(Strategy::JsonMode));
    assert_eq!(
        model.refused(),
        vec![Strategy::JsonSchema, Strategy::ToolCalling]
    );
    // The next plan goes straight to JSON mode.
    let outcome = bounded(plan(model.clone())).await.unwrap();
    assert_eq!(outcome.diagnostics.strategy, Some(Strategy::JsonMode));
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[3]["response_format"], json!({"type": "json_object"}));
}

#[tokio::test]
async fn rejected_response_format_falls_back_to_a_tool_call() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(
            json!({"response_format": {"type": "json_schema"}}),
        ))
        .respond_with(
            ResponseTemplate::new(422)
                .set_body_json(json!({"detail": "Unknown field: response_format.json_schema"})),
        )
        .mount(&server)
        .await;
    let tool_reply = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "I will call the planning tool.",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "planning", "arguments": PLAN}}]}, "finish_reason": "tool_calls"}]
    });
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"tool_choice": "required"})))
        .respond_with(json_reply(tool_reply))
        .mount(&server)
        .await;
    let outcome = bounded(plan(client(&server.uri()))).await.unwrap();
    assert_eq!(
        outcome.status,
        OutcomeStatus::Ready,
        "{:#?}",
        outcome.diagnostics
    );
    assert_eq!(outcome.diagnostics.strategy, Some(Strategy::ToolCalling));
    assert_eq!(
        outcome.diagnostics.attempts[0].raw, PLAN,
        "tool arguments are read even with text beside them"
    );
}

#[tokio::test]
async fn anthropic_refused_forced_tool_use_falls_back_to_prompt_only() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"tool_choice": {"type": "tool"}})))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"type": "error", "error": {"type": "invalid_request_error", "message": "Thinking may not be enabled when tool_choice forces tool use."}})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(json_reply(json!({"type": "message", "role": "assistant", "content": [{"type": "thinking", "thinking": "{no}"}, {"type": "text", "text": PLAN}], "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 4}})))
        .mount(&server)
        .await;
    let mut config =
        ClientConfig::new(Provider::Anthropic, server.uri(), "claude").with_api_key("sk-ant-x1234");
    config.retry = support::fast_retry(1);
    let outcome = bounded(plan(Arc::new(AnthropicClient::new(config).unwrap())))
        .await
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Ready);
    assert_eq!(outcome.diagnostics.strategy, Some(Strategy::PromptOnly));
    let sent = bodies(&server).await;
    assert!(sent[1].get("tools").is_none());
}

#[tokio::test]
async fn truncated_sse_stream_is_an_error_not_a_short_plan() {
    let server = MockServer::start().await;
    let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"{\\\"title\\\": \\\"W\\\", \\\"steps\\\": [\"}}]}\n\n";
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&server)
        .await;
    let planner = Planner::new(catalog(), client(&server.uri()));
    let mut n_tokens = 0;
    let mut on_event = |e: PlanEvent| n_tokens += usize::from(matches!(e, PlanEvent::Token { .. }));
    let err = bounded(planner.plan_with_events(&PlanRequest::new("Weather?"), &mut on_event))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("ended before the reply was complete"),
        "{err}"
    );
    assert_eq!(n_tokens, 1);
}

#[tokio::test]
async fn rejected_stream_options_is_dropped_and_the_stream_goes_on() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(
            json!({"stream_options": {"include_usage": true}}),
        ))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {
            "message": "Unrecognized request argument supplied: stream_options"}})))
        .mount(&server)
        .await;
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": PLAN}}]});
    let sse = format!("data: {chunk}\n\ndata: [DONE]\n\n");
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&server)
        .await;
    let model = client(&server.uri());
    let planner = Planner::new(catalog(), model.clone());
    let mut on_event = |_: PlanEvent| {};
    let outcome = bounded(planner.plan_with_events(&PlanRequest::new("Weather?"), &mut on_event))
        .await
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Ready);
    assert_eq!(outcome.diagnostics.strategy, Some(Strategy::JsonSchema));
    assert!(model.refused().is_empty(), "{:?}", model.refused());
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert!(sent[0].get("stream_options").is_some());
    assert!(sent[1].get("stream_options").is_none());
    assert_eq!(sent[1]["response_format"]["type"], "json_schema");
    // Remembered: the next stream goes without it at once.
    bounded(planner.plan_with_events(&PlanRequest::new("Weather?"), &mut on_event))
        .await
        .unwrap();
    assert_eq!(bodies(&server).await.len(), 3);
}

/// A raw TCP server: connection `i` gets `script(i)`; `None` resets the connection.
async fn tcp_server(script: fn(usize) -> Option<&'static [u8]>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let idx = seen.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ =
                    tokio::time::timeout(Duration::from_millis(200), socket.read(&mut buf)).await;
                match script(idx) {
                    None => {
                        let _ = socket.set_zero_linger();
                        drop(socket);
                    }
                    Some(bytes) => {
                        let _ = socket.write_all(bytes).await;
                        let _ = socket.shutdown().await;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), count)
}

#[tokio::test]
async fn connection_reset_is_retried_then_reported() {
    let (uri, count) = tcp_server(|_| None).await;
    let err = bounded(plan(client(&uri))).await.unwrap_err();
    assert!(
        matches!(&err, PlanError::Model { source: source @ LlmError::Connection(m), .. } if m.contains("connection failed") && source.is_retryable()),
        "{err}"
    );
    assert_eq!(count.load(Ordering::SeqCst), 3, "first try + 2 retries");
}

const OK_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 163\r\n\r\n{\"choices\":[{\"message\":{\"content\":\"{\\\"title\\\":\\\"W\\\",\\\"steps\\\":[{\\\"id\\\":\\\"s1\\\",\\\"type\\\":\\\"tool\\\",\\\"name\\\":\\\"get_weather\\\",\\\"arguments\\\":{\\\"city\\\":\\\"Paris\\\"}}]}\"}}]}";

#[tokio::test]
async fn connection_reset_then_success() {
    let (uri, count) = tcp_server(|i| (i > 0).then_some(OK_RESPONSE)).await;
    let outcome = bounded(plan(client(&uri))).await.unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Ready);
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

const CUT_STREAM: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n2f\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"{\"}}]}\n\n\r\n40\r\ndata: {\"choices\"";

#[tokio::test]
async fn stream_cut_mid_chunk_is_an_error() {
    let (uri, _) = tcp_server(|_| Some(CUT_STREAM)).await;
    let model = client(&uri);
    let request = CompletionRequest {
        messages: vec![Message::user("hi")],
        constraint: None,
        max_tokens: 10,
        temperature: 0.0,
    };
    let events: Vec<_> = bounded(model.stream(request).collect::<Vec<_>>()).await;
    let last = events.last().unwrap();
    assert!(
        matches!(last, Err(LlmError::Connection(m)) if m.contains("broke off") || m.contains("ended before")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Ok(StreamEvent::Delta(d)) if d == "{")),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_base_url_with_a_query_keeps_it_after_the_endpoint_path() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .and(wiremock::matchers::query_param("api-version", "2024-10-21"))
        .respond_with(json_reply(chat_reply(PLAN)))
        .mount(&server)
        .await;
    let mut config = ClientConfig::new(
        Provider::OpenAiCompatible,
        format!("{}/v1?api-version=2024-10-21", server.uri()),
        "m",
    );
    config.retry = support::fast_retry(0);
    let outcome = bounded(plan(Arc::new(OpenAiClient::new(config).unwrap())))
        .await
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Ready);
}

#[tokio::test]
async fn secrets_in_the_base_url_never_appear_in_errors() {
    // Nothing listens on port 1: the connection fails, and the error quotes the URL.
    let mut config = ClientConfig::new(
        Provider::OpenAiCompatible,
        "http://planner:url-password-42@127.0.0.1:1/v1?key=query-key-42",
        "m",
    );
    config.retry = support::fast_retry(0);
    let model = Arc::new(OpenAiClient::new(config).unwrap());
    let err = bounded(plan(model)).await.unwrap_err();
    let shown = format!("{err} {err:?} {:?}", err.diagnostics());
    assert!(!shown.contains("url-password-42"), "{shown}");
    assert!(!shown.contains("query-key-42"), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");
}
