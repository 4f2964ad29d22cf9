//! The Anthropic Messages client. Its structured path is tool use with a forced `tool_choice`
//! (a JSON Schema constraint is sent the same way); when the server refuses forced tool use
//! (e.g. with extended thinking) the call falls back to prompt-only. `thinking` blocks are kept
//! out of the plan text.

use std::sync::{Arc, Mutex};

use plansmith_core::llm::{BoxFuture, BoxStream, StreamEvent, ToolCall};
use plansmith_core::{
    Capabilities, Completion, CompletionRequest, LanguageModel, LlmError, Role, Strategy, Usage,
};
use serde_json::{Value, json};

use crate::config::ClientConfig;
use crate::http::{Failure, Reply, Transport, quote};
use crate::negotiate::{self, Refusals, Target};
use crate::refs;
use crate::sse::{self, Accumulate};

/// The API version header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A Messages API client.
#[derive(Debug)]
pub struct AnthropicClient {
    config: ClientConfig,
    transport: Transport,
    refused: Refusals,
    usage: Arc<Mutex<Usage>>,
}

impl AnthropicClient {
    /// A client for this configuration.
    pub fn new(config: ClientConfig) -> Result<AnthropicClient, LlmError> {
        Ok(AnthropicClient {
            transport: Transport::new(&config)?,
            config,
            refused: Refusals::default(),
            usage: Arc::new(Mutex::new(Usage::default())),
        })
    }

    /// Tokens used by every call of this client so far.
    pub fn usage(&self) -> Usage {
        self.usage.lock().map(|u| *u).unwrap_or_default()
    }

    /// The strategies the server refused so far.
    pub fn refused(&self) -> Vec<Strategy> {
        self.refused.list()
    }

    fn offered(&self) -> Capabilities {
        let mut offered = self.config.capabilities.unwrap_or(Capabilities {
            tool_calling: true,
            ..Capabilities::default()
        });
        // No response_format and no JSON mode on this API: a schema goes through tool use.
        offered.json_schema = false;
        offered.json_mode = false;
        offered.prefill |= self.config.prefill;
        offered
    }

    fn headers(&self) -> Vec<(&'static str, String, bool)> {
        let mut headers = vec![("anthropic-version", ANTHROPIC_VERSION.to_owned(), false)];
        if let Some(key) = &self.config.api_key {
            headers.push(("x-api-key", key.expose().to_owned(), true));
        }
        headers
    }

    fn body(
        &self,
        request: &CompletionRequest,
        strategy: Strategy,
        target: Option<&Target>,
        stream: bool,
    ) -> Value {
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect();
        // The API wants user/assistant turns alternating, starting with the user.
        let mut turns: Vec<(Role, String)> = Vec::new();
        for message in request.messages.iter().filter(|m| m.role != Role::System) {
            match turns.last_mut() {
                Some((role, text)) if *role == message.role => {
                    text.push_str("\n\n");
                    text.push_str(&message.content);
                }
                _ => turns.push((message.role, message.content.clone())),
            }
        }
        if turns.first().is_none_or(|(role, _)| *role != Role::User) {
            turns.insert(0, (Role::User, "(continue)".into()));
        }
        let messages: Vec<Value> = turns
            .into_iter()
            .map(|(role, content)| {
                let role = if role == Role::Assistant {
                    "assistant"
                } else {
                    "user"
                };
                json!({"role": role, "content": content})
            })
            .collect();
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "messages": messages,
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if stream {
            body["stream"] = json!(true);
        }
        if let (Strategy::ToolCalling, Some(target)) = (strategy, target) {
            body["tools"] = json!([{
                "name": target.tool_name,
                "description": target.description,
                "input_schema": refs::to_wire(&target.schema),
            }]);
            body["tool_choice"] = json!({"type": "tool", "name": target.tool_name});
        }
        body
    }

    async fn open(
        &self,
        request: &CompletionRequest,
        stream: bool,
    ) -> Result<(Reply, Strategy), LlmError> {
        let (asked, target) = negotiate::wanted(request.constraint.as_ref());
        let asked = match asked {
            Strategy::JsonSchema | Strategy::Grammar => Strategy::ToolCalling,
            other => other,
        };
        let ladder = negotiate::ladder(
            asked,
            target.is_some(),
            self.offered(),
            &self.refused.list(),
        );
        let url = self.config.endpoint("/v1/messages");
        let mut last_refusal = None;
        for strategy in ladder {
            let body = self.body(request, strategy, target.as_ref(), stream);
            match self
                .transport
                .post(&url, &self.headers(), &body, stream)
                .await
            {
                Ok(reply) => return Ok((reply, strategy)),
                Err(Failure::Status { status, body, .. })
                    if negotiate::is_refusal(strategy, status, &body) =>
                {
                    tracing::info!(model = %self.config.model, refused = strategy.as_str(), status, "forced tool use refused; trying the next strategy");
                    self.refused.add(strategy);
                    last_refusal = Some(format!(
                        "HTTP {status}: {}",
                        self.transport.redact(&quote(&body))
                    ));
                }
                Err(failure) => return Err(self.transport.to_error(&failure)),
            }
        }
        Err(LlmError::Rejected(format!(
            "the server refused every structured-output strategy; last: {}",
            last_refusal.unwrap_or_default()
        )))
    }
}

impl LanguageModel for AnthropicClient {
    fn name(&self) -> String {
        format!("anthropic:{}", self.config.model)
    }

    fn capabilities(&self) -> Capabilities {
        self.refused.apply(self.offered())
    }

    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        Box::pin(async move {
            let (reply, strategy) = self.open(&request, false).await?;
            let bytes = match reply {
                Reply::Body(bytes) => bytes,
                Reply::Stream(response) => {
                    response.bytes().await.map(|b| b.to_vec()).map_err(|err| {
                        LlmError::Connection(self.transport.redact(&err.to_string()))
                    })?
                }
            };
            let completion = parse_reply(&bytes, strategy)?;
            if let Ok(mut total) = self.usage.lock() {
                *total += completion.usage;
            }
            Ok(completion)
        })
    }

    fn stream(&self, request: CompletionRequest) -> BoxStream<'_, Result<StreamEvent, LlmError>> {
        let open: BoxFuture<'_, Result<(reqwest::Response, Accumulator), LlmError>> =
            Box::pin(async move {
                let (reply, strategy) = self.open(&request, true).await?;
                let Reply::Stream(response) = reply else {
                    return Err(LlmError::Protocol("expected a streamed reply".into()));
                };
                Ok((response, Accumulator::new(strategy)))
            });
        sse::drive(open, self.transport.timeout, Arc::clone(&self.usage))
    }
}

fn usage_of(usage: Option<&Value>) -> (Option<u32>, Option<u32>) {
    let get = |key: &str| {
        usage
            .and_then(|u| u.get(key))
            .and_then(Value::as_u64)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    (get("input_tokens"), get("output_tokens"))
}

fn error_message(reply: &Value) -> Option<String> {
    let error = reply.get("error")?;
    Some(
        error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| quote(&error.to_string())),
    )
}

/// A non-streamed Messages reply to a [`Completion`].
fn parse_reply(bytes: &[u8], strategy: Strategy) -> Result<Completion, LlmError> {
    let reply: Value = serde_json::from_slice(bytes).map_err(|err| {
        LlmError::Protocol(format!(
            "the server's reply is not a Messages reply ({err}): {}",
            quote(&String::from_utf8_lossy(bytes))
        ))
    })?;
    if let Some(message) = error_message(&reply) {
        return Err(LlmError::Backend(message));
    }
    let Some(blocks) = reply.get("content").and_then(Value::as_array) else {
        return Err(LlmError::Protocol(format!(
            "the reply has no content: {}",
            quote(&reply.to_string())
        )));
    };
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => tool_calls.push(ToolCall {
                name: block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                arguments: refs::restore_text(
                    &block.get("input").map(Value::to_string).unwrap_or_default(),
                ),
            }),
            // `thinking` / `redacted_thinking` and anything newer stay out of the plan text.
            _ => {}
        }
    }
    let (input, output) = usage_of(reply.get("usage"));
    Ok(Completion {
        text,
        tool_calls,
        usage: Usage {
            prompt_tokens: input.unwrap_or(0),
            completion_tokens: output.unwrap_or(0),
        },
        finish: negotiate::finish_reason(reply.get("stop_reason").and_then(Value::as_str)),
        strategy: Some(strategy),
        queue_us: 0,
        stages: None,
    })
}

/// Streamed Messages events to a [`Completion`].
struct Accumulator {
    strategy: Strategy,
    text: String,
    /// Content block index → tool call (name, partial JSON).
    calls: Vec<(usize, String, String)>,
    stop_reason: Option<String>,
    usage: Usage,
    done: bool,
}

impl Accumulator {
    fn new(strategy: Strategy) -> Accumulator {
        Accumulator {
            strategy,
            text: String::new(),
            calls: Vec::new(),
            stop_reason: None,
            usage: Usage::default(),
            done: false,
        }
    }
}

impl Accumulate for Accumulator {
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<String>, LlmError> {
        if data.trim().is_empty() {
            return Ok(Vec::new());
        }
        let value: Value = serde_json::from_str(data).map_err(|err| {
            LlmError::Protocol(format!(
                "a stream event is not JSON ({err}): {}",
                quote(data)
            ))
        })?;
        let kind = value.get("type").and_then(Value::as_str).unwrap_or(event);
        let index = value.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        let mut deltas = Vec::new();
        match kind {
            "message_start" => {
                let (input, output) = usage_of(value.get("message").and_then(|m| m.get("usage")));
                self.usage.prompt_tokens = input.unwrap_or(0);
                self.usage.completion_tokens = output.unwrap_or(0);
            }
            "content_block_start" => {
                let block = value.get("content_block");
                if block.and_then(|b| b.get("type")).and_then(Value::as_str) == Some("tool_use") {
                    let name = block
                        .and_then(|b| b.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    self.calls.push((index, name, String::new()));
                }
            }
            "content_block_delta" => {
                let delta = value.get("delta");
                match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = delta
                            .and_then(|d| d.get("text"))
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        self.text.push_str(text);
                        deltas.push(text.to_owned());
                    }
                    Some("input_json_delta") => {
                        let part = delta
                            .and_then(|d| d.get("partial_json"))
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        if let Some(call) = self.calls.iter_mut().find(|c| c.0 == index) {
                            call.2.push_str(part);
                        }
                        deltas.push(part.to_owned());
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = value
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(reason.to_owned());
                }
                let (input, output) = usage_of(value.get("usage"));
                if let Some(input) = input {
                    self.usage.prompt_tokens = input;
                }
                if let Some(output) = output {
                    self.usage.completion_tokens = output;
                }
            }
            "message_stop" => self.done = true,
            "error" => {
                return Err(LlmError::Backend(format!(
                    "the server reported an error mid-stream: {}",
                    error_message(&value).unwrap_or_else(|| quote(data))
                )));
            }
            _ => {}
        }
        deltas.retain(|d| !d.is_empty());
        Ok(deltas)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish(&mut self, ended_early: bool) -> Result<Completion, LlmError> {
        if ended_early && !self.done {
            return Err(LlmError::Connection(format!(
                "the reply stream ended before message_stop ({} characters received)",
                self.text.len() + self.calls.iter().map(|c| c.2.len()).sum::<usize>()
            )));
        }
        Ok(Completion {
            text: std::mem::take(&mut self.text),
            tool_calls: self
                .calls
                .drain(..)
                .map(|(_, name, arguments)| ToolCall {
                    name,
                    arguments: if arguments.trim().is_empty() {
                        "{}".into()
                    } else {
                        refs::restore_text(&arguments)
                    },
                })
                .collect(),
            usage: self.usage,
            finish: negotiate::finish_reason(self.stop_reason.as_deref()),
            strategy: Some(self.strategy),
            queue_us: 0,
            stages: None,
        })
    }
}
