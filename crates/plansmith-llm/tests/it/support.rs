//! Shared helpers: the example catalog, clients pointed at a mock server, cassette replay.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use plansmith_core::{Capabilities, Catalog, LanguageModel, Planner};
use plansmith_llm::{AnthropicClient, ClientConfig, OpenAiClient, Provider, RetryPolicy};
use serde::Deserialize;
use serde_json::Value;
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Every test ends within this.
pub const BOUND: Duration = Duration::from_secs(30);

/// The key the tests use (it must never show up in errors or diagnostics).
pub const KEY: &str = "sk-test-cassette";
pub const ANTHROPIC_KEY: &str = "sk-ant-test-cassette";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The small example catalog (`examples/tools.json`).
pub fn catalog() -> Catalog {
    let text = std::fs::read_to_string(repo_root().join("examples/tools.json")).unwrap();
    Catalog::from_json(&serde_json::from_str(&text).unwrap()).unwrap()
}

/// Fast retries so fault tests stay short.
pub fn fast_retry(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(100),
        max_retry_after: Duration::from_secs(5),
    }
}

/// An OpenAI-compatible config for a mock server at `uri`.
pub fn openai_config(uri: &str, provider: Provider, model: &str) -> ClientConfig {
    let mut config = ClientConfig::new(provider, format!("{uri}/v1"), model).with_api_key(KEY);
    config.retry = fast_retry(2);
    config.request_timeout = Duration::from_secs(10);
    config
}

/// A client of either kind, kept concrete so tests can look at usage and refusals.
#[derive(Clone)]
pub enum Client {
    OpenAi(Arc<OpenAiClient>),
    Anthropic(Arc<AnthropicClient>),
}

impl Client {
    pub fn model(&self) -> Arc<dyn LanguageModel> {
        match self {
            Client::OpenAi(c) => c.clone(),
            Client::Anthropic(c) => c.clone(),
        }
    }
    pub fn planner(&self) -> Planner {
        Planner::new(catalog(), self.model())
    }
    pub fn refused(&self) -> Vec<plansmith_core::Strategy> {
        match self {
            Client::OpenAi(c) => c.refused(),
            Client::Anthropic(c) => c.refused(),
        }
    }
    pub fn usage(&self) -> plansmith_core::Usage {
        match self {
            Client::OpenAi(c) => c.usage(),
            Client::Anthropic(c) => c.usage(),
        }
    }
}

/// A recorded exchange (see `tests/README.md`).
#[derive(Debug, Deserialize)]
pub struct Cassette {
    pub provider: String,
    pub model: String,
    pub config: CassetteConfig,
    pub query: String,
    pub interactions: Vec<Interaction>,
    pub expect: Value,
}

#[derive(Debug, Deserialize)]
pub struct CassetteConfig {
    pub provider: String,
    #[serde(default)]
    pub capabilities: Option<Capabilities>,
}

#[derive(Debug, Deserialize)]
pub struct Interaction {
    pub request: RecordedRequest,
    pub response: RecordedResponse,
}

#[derive(Debug, Deserialize)]
pub struct RecordedRequest {
    pub path: String,
    #[serde(default)]
    pub headers: serde_json::Map<String, Value>,
    pub body: Value,
}

#[derive(Debug, Deserialize)]
pub struct RecordedResponse {
    pub status: u16,
    #[serde(default)]
    pub headers: serde_json::Map<String, Value>,
    #[serde(default)]
    pub body: Option<Value>,
    #[serde(default)]
    pub body_text: Option<String>,
}

pub fn load_cassette(name: &str) -> Cassette {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cassettes")
        .join(name);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Mounts the cassette's interactions: each answers exactly once, only to a request whose body
/// contains the recorded request body (and headers), and must be used (checked on drop).
pub async fn replay(cassette: &Cassette) -> MockServer {
    let server = MockServer::start().await;
    for (idx, interaction) in cassette.interactions.iter().enumerate() {
        let recorded = &interaction.response;
        let mut response = ResponseTemplate::new(recorded.status);
        for (name, value) in &recorded.headers {
            if name != "content-type" {
                response =
                    response.insert_header(name.as_str(), value.as_str().unwrap_or_default());
            }
        }
        let content_type = recorded
            .headers
            .get("content-type")
            .and_then(Value::as_str)
            .unwrap_or("application/json");
        let body = match (&recorded.body_text, &recorded.body) {
            (Some(text), _) => text.clone().into_bytes(),
            (None, Some(body)) => serde_json::to_vec(body).unwrap(),
            (None, None) => Vec::new(),
        };
        response = response.set_body_raw(body, content_type);
        let mut mock = Mock::given(method("POST"))
            .and(path(interaction.request.path.as_str()))
            .and(body_partial_json(&interaction.request.body));
        for (name, value) in &interaction.request.headers {
            mock = mock.and(header(name.as_str(), value.as_str().unwrap_or_default()));
        }
        mock.respond_with(response)
            .up_to_n_times(1)
            .expect(1)
            .named(format!("{} #{idx}", cassette.provider))
            .mount(&server)
            .await;
    }
    server
}

/// The client a cassette was recorded with, pointed at the replay server.
pub fn cassette_client(cassette: &Cassette, uri: &str) -> Client {
    let mut config = match cassette.config.provider.as_str() {
        "openai" => openai_config(uri, Provider::OpenAi, &cassette.model),
        "openai-compatible" => openai_config(uri, Provider::OpenAiCompatible, &cassette.model),
        "anthropic" => {
            let mut config = ClientConfig::new(Provider::Anthropic, uri, &cassette.model)
                .with_api_key(ANTHROPIC_KEY);
            config.retry = fast_retry(2);
            config
        }
        other => panic!("unknown cassette provider {other}"),
    };
    config.capabilities = cassette.config.capabilities;
    match config.provider {
        Provider::Anthropic => Client::Anthropic(Arc::new(AnthropicClient::new(config).unwrap())),
        _ => Client::OpenAi(Arc::new(OpenAiClient::new(config).unwrap())),
    }
}

/// Checks a schema is in OpenAI's strict subset: every object closed with every property
/// required, no refused keywords.
pub fn assert_strict(schema: &Value, at: &str) {
    check_strict(schema, at, &[]);
}

/// [`assert_strict`] for an OpenAI-compatible server: the length and item bounds may stay
/// (`plansmith_llm::strict::BOUNDS`), everything else is in the strict subset.
pub fn assert_strict_keeping_bounds(schema: &Value, at: &str) {
    check_strict(schema, at, plansmith_llm::strict::BOUNDS);
}

fn check_strict(schema: &Value, at: &str, allowed: &[&str]) {
    match schema {
        Value::Object(map) => {
            for keyword in [
                "maxLength",
                "minLength",
                "pattern",
                "format",
                "maxItems",
                "minimum",
                "oneOf",
            ] {
                if allowed.contains(&keyword) {
                    continue;
                }
                assert!(
                    !map.contains_key(keyword),
                    "{at}: `{keyword}` left in a strict schema"
                );
            }
            if let Some(Value::Object(properties)) = map.get("properties") {
                assert_eq!(
                    map.get("additionalProperties"),
                    Some(&Value::Bool(false)),
                    "{at}"
                );
                let required: Vec<&str> = map["required"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
                let keys: Vec<&str> = properties.keys().map(String::as_str).collect();
                assert_eq!(required, keys, "{at}: every property must be required");
            }
            for (key, value) in map {
                check_strict(value, &format!("{at}/{key}"), allowed);
            }
        }
        Value::Array(items) => {
            for (idx, item) in items.iter().enumerate() {
                check_strict(item, &format!("{at}/{idx}"), allowed);
            }
        }
        _ => {}
    }
}

/// A chat-completions reply with this content.
pub fn chat_reply(content: &str) -> Value {
    serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    })
}

/// A small valid plan for the example catalog.
pub const PLAN: &str = r#"{"title": "Weather", "steps": [{"id": "s1", "type": "tool", "title": "Weather", "name": "get_weather", "arguments": {"city": "Paris"}}]}"#;

/// The bodies of the requests a mock server received.
pub async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}
