//! The OpenAI-compatible chat-completions client: OpenAI, DeepSeek, Qwen/DashScope, Groq,
//! OpenRouter, vLLM, Ollama, llama.cpp's server, LM Studio.
//!
//! Wire types are hand-written and lenient (every field optional, unknown fields and finish
//! reasons accepted, `content` as a string or a list of parts, tool-call `arguments` as a string
//! or an object, `reasoning_content` / `reasoning` kept out of the plan text).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use plansmith_core::llm::ToolCall;
use plansmith_core::llm::{BoxFuture, BoxStream, StreamEvent};
use plansmith_core::{
    Capabilities, Completion, CompletionRequest, LanguageModel, LlmError, Role, Strategy, Usage,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::{ClientConfig, Provider, ToolChoice};
use crate::http::{Failure, Reply, Transport, quote};
use crate::negotiate::{self, Refusals, Target};
use crate::sse::{self, Accumulate};
use crate::{refs, strict};

/// A chat-completions client.
#[derive(Debug)]
pub struct OpenAiClient {
    config: ClientConfig,
    transport: Transport,
    refused: Refusals,
    usage: Arc<Mutex<Usage>>,
    /// The server rejected `stream_options` once (older compatible servers do); later streams
    /// go without it (and without usage in the stream, when the server does not send it).
    no_stream_options: AtomicBool,
}

impl OpenAiClient {
    /// A client for this configuration.
    pub fn new(config: ClientConfig) -> Result<OpenAiClient, LlmError> {
        Ok(OpenAiClient {
            transport: Transport::new(&config)?,
            config,
            refused: Refusals::default(),
            usage: Arc::new(Mutex::new(Usage::default())),
            no_stream_options: AtomicBool::new(false),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Tokens used by every call of this client so far.
    pub fn usage(&self) -> Usage {
        self.usage.lock().map(|u| *u).unwrap_or_default()
    }

    /// The strategies the server refused so far (later calls skip them).
    pub fn refused(&self) -> Vec<Strategy> {
        self.refused.list()
    }

    fn offered(&self) -> Capabilities {
        let mut offered = self.config.capabilities.unwrap_or(Capabilities {
            json_schema: true,
            grammar: false,
            tool_calling: true,
            json_mode: true,
            prefill: false,
        });
        offered.prefill |= self.config.prefill;
        offered
    }

    fn url(&self) -> String {
        self.config.endpoint("/chat/completions")
    }

    fn headers(&self) -> Vec<(&'static str, String, bool)> {
        match &self.config.api_key {
            Some(key) => vec![("authorization", format!("Bearer {}", key.expose()), true)],
            None => Vec::new(),
        }
    }

    /// The request body for one strategy.
    fn body(
        &self,
        request: &CompletionRequest,
        strategy: Strategy,
        target: Option<&Target>,
        stream: bool,
    ) -> Value {
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| json!({"role": role(m.role), "content": m.content}))
            .collect();
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "temperature": request.temperature,
        });
        // OpenAI's own API wants `max_completion_tokens` (reasoning models reject `max_tokens`);
        // every compatible server knows `max_tokens`.
        let cap_key = if self.config.provider == Provider::OpenAi {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[cap_key] = json!(request.max_tokens);
        if stream {
            body["stream"] = json!(true);
            if !self.no_stream_options.load(Ordering::Relaxed) {
                body["stream_options"] = json!({"include_usage": true});
            }
        }
        match (strategy, target) {
            (Strategy::JsonSchema | Strategy::Grammar, Some(target)) => {
                let wire = refs::to_wire(&target.schema);
                // A compatible server builds a grammar from the schema: it keeps the bounds
                // that make the reply end. OpenAI's own API gets its strict subset.
                let keep = if self.config.provider == Provider::OpenAiCompatible {
                    strict::BOUNDS
                } else {
                    &[]
                };
                let strict_schema = (target.strict && self.config.strict)
                    .then(|| strict::to_strict_keeping(&wire, keep))
                    .flatten();
                let (schema, strict) = match strict_schema {
                    Some(schema) => (schema, true),
                    None => (wire, false),
                };
                body["response_format"] = json!({
                    "type": "json_schema",
                    "json_schema": {"name": target.schema_name, "schema": schema, "strict": strict}
                });
            }
            (Strategy::ToolCalling, Some(target)) => {
                body["tools"] = json!([{
                    "type": "function",
                    "function": {
                        "name": target.tool_name,
                        "description": target.description,
                        "parameters": refs::to_wire(&target.schema),
                    }
                }]);
                // One tool is offered, so "required" forces exactly that call. OpenAI's named
                // form is the documented one for OpenAI itself; compatible servers differ on it
                // (llama.cpp's server reads only a string and silently treats the object as
                // "auto"; llama-cpp-python's needs the object), so it is configurable.
                let choice = self
                    .config
                    .tool_choice
                    .unwrap_or(match self.config.provider {
                        Provider::OpenAi => ToolChoice::Named,
                        _ => ToolChoice::Required,
                    });
                body["tool_choice"] = match choice {
                    ToolChoice::Named => {
                        json!({"type": "function", "function": {"name": target.tool_name}})
                    }
                    ToolChoice::Required => json!("required"),
                };
            }
            (Strategy::JsonMode, _) => body["response_format"] = json!({"type": "json_object"}),
            _ => {}
        }
        body
    }

    /// Sends the request down the strategy ladder until the server accepts one.
    async fn open(
        &self,
        request: &CompletionRequest,
        stream: bool,
    ) -> Result<(Reply, Strategy, Option<Target>), LlmError> {
        let (asked, target) = negotiate::wanted(request.constraint.as_ref());
        let ladder = negotiate::ladder(
            asked,
            target.is_some(),
            self.offered(),
            &self.refused.list(),
        );
        let mut last_refusal = None;
        let mut ladder = ladder.into_iter().peekable();
        while let Some(&strategy) = ladder.peek() {
            let body = self.body(request, strategy, target.as_ref(), stream);
            match self
                .transport
                .post(&self.url(), &self.headers(), &body, stream)
                .await
            {
                Err(Failure::Status {
                    status, body: text, ..
                }) if body.get("stream_options").is_some()
                    && negotiate::rejects_stream_options(status, &text) =>
                {
                    // Same strategy again, without the option.
                    tracing::info!(
                        model = %self.config.model,
                        status,
                        "the server refused stream_options; streaming without usage reports"
                    );
                    self.no_stream_options.store(true, Ordering::Relaxed);
                }
                Ok(reply) => {
                    let target = matches!(strategy, Strategy::JsonSchema | Strategy::ToolCalling)
                        .then(|| target.clone())
                        .flatten();
                    return Ok((reply, strategy, target));
                }
                Err(Failure::Status { status, body, .. })
                    if negotiate::is_refusal(strategy, status, &body) =>
                {
                    tracing::info!(
                        model = %self.config.model,
                        refused = strategy.as_str(),
                        status,
                        "the server refused a structured-output strategy; trying the next"
                    );
                    self.refused.add(strategy);
                    last_refusal = Some(format!(
                        "HTTP {status}: {}",
                        self.transport.redact(&quote(&body))
                    ));
                    ladder.next();
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

fn role(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

impl LanguageModel for OpenAiClient {
    fn name(&self) -> String {
        let kind = match self.config.provider {
            Provider::OpenAi => "openai",
            _ => "openai-compatible",
        };
        format!("{kind}:{}", self.config.model)
    }

    fn capabilities(&self) -> Capabilities {
        self.refused.apply(self.offered())
    }

    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        Box::pin(async move {
            let (reply, strategy, target) = self.open(&request, false).await?;
            let bytes = match reply {
                Reply::Body(bytes) => bytes,
                Reply::Stream(response) => {
                    response.bytes().await.map(|b| b.to_vec()).map_err(|err| {
                        LlmError::Connection(self.transport.redact(&err.to_string()))
                    })?
                }
            };
            let mut completion = parse_reply(&bytes, strategy, target.as_ref())
                .map_err(|err| redact_error(&self.transport, err))?;
            if let Some(echo) = self.echo(&request) {
                strip_echo(&mut completion.text, &echo);
            }
            if let Ok(mut total) = self.usage.lock() {
                *total += completion.usage;
            }
            Ok(completion)
        })
    }

    fn stream(&self, request: CompletionRequest) -> BoxStream<'_, Result<StreamEvent, LlmError>> {
        let echo = self.echo(&request);
        let open: BoxFuture<'_, Result<(reqwest::Response, Accumulator), LlmError>> =
            Box::pin(async move {
                let (reply, strategy, target) = self.open(&request, true).await?;
                let Reply::Stream(response) = reply else {
                    return Err(LlmError::Protocol("expected a streamed reply".into()));
                };
                Ok((response, Accumulator::new(strategy, target)))
            });
        let stream = sse::drive(open, self.transport.timeout, Arc::clone(&self.usage));
        match echo {
            Some(echo) => without_echo(stream, echo),
            None => stream,
        }
    }
}

impl OpenAiClient {
    /// The prefilled text a reply may send back before its continuation: the final assistant
    /// message's, when prefill is on (llama.cpp's server sends it back; a completion is the
    /// continuation alone, as every prefilled completion's is).
    fn echo(&self, request: &CompletionRequest) -> Option<String> {
        let last = request.messages.last()?;
        (self.config.prefill
            && last.role == plansmith_core::Role::Assistant
            && !last.content.is_empty())
        .then(|| last.content.clone())
    }
}

/// `text` without `echo` in front, when it starts with it.
fn strip_echo(text: &mut String, echo: &str) {
    if let Some(rest) = text.strip_prefix(echo) {
        *text = rest.to_owned();
    }
}

/// A streamed reply without the prefilled text `echo` in front: its first deltas are held
/// while they could still be that text, then sent on without it (or whole, once they differ).
fn without_echo(
    stream: BoxStream<'_, Result<StreamEvent, LlmError>>,
    echo: String,
) -> BoxStream<'_, Result<StreamEvent, LlmError>> {
    use futures::StreamExt as _;
    let mut held = String::new();
    let mut decided = false;
    Box::pin(stream.filter_map(move |event| {
        let event = match event {
            Ok(StreamEvent::Delta(text)) if !decided => {
                held.push_str(&text);
                if held.len() >= echo.len() {
                    decided = true;
                    let mut out = std::mem::take(&mut held);
                    strip_echo(&mut out, &echo);
                    (!out.is_empty()).then_some(Ok(StreamEvent::Delta(out)))
                } else if echo.starts_with(held.as_str()) {
                    None
                } else {
                    decided = true;
                    Some(Ok(StreamEvent::Delta(std::mem::take(&mut held))))
                }
            }
            Ok(StreamEvent::Done(mut completion)) => {
                strip_echo(&mut completion.text, &echo);
                Some(Ok(StreamEvent::Done(completion)))
            }
            other => Some(other),
        };
        futures::future::ready(event)
    }))
}

fn redact_error(transport: &Transport, err: LlmError) -> LlmError {
    match err {
        LlmError::Backend(msg) => LlmError::Backend(transport.redact(&msg)),
        LlmError::Rejected(msg) => LlmError::Rejected(transport.redact(&msg)),
        LlmError::Connection(msg) => LlmError::Connection(transport.redact(&msg)),
        LlmError::Protocol(msg) => LlmError::Protocol(transport.redact(&msg)),
        LlmError::Status { status, message } => LlmError::Status {
            status,
            message: transport.redact(&message),
        },
        other => other,
    }
}

// ---------------------------------------------------------------------------------------------
// Wire types (lenient).

#[derive(Debug, Default, Deserialize)]
struct WireReply {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireChoice {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    delta: Option<WireMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<Value>,
    /// DeepSeek, Qwen, vLLM's reasoning parsers.
    #[serde(default)]
    reasoning_content: Option<String>,
    /// OpenRouter, newer vLLM, Ollama.
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    refusal: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireToolCall {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Debug, Default, Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    /// A JSON string (OpenAI) or an object (some Ollama versions).
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl WireUsage {
    fn usage(self) -> Usage {
        let clamp = |n: Option<u64>| u32::try_from(n.unwrap_or(0)).unwrap_or(u32::MAX);
        Usage {
            prompt_tokens: clamp(self.prompt_tokens),
            completion_tokens: clamp(self.completion_tokens),
        }
    }
}

/// Text of a `content` field: a string, or a list of `{type: text, text}` parts.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str).or_else(|| p.as_str()))
            .collect(),
        _ => String::new(),
    }
}

fn arguments_text(arguments: Option<&Value>) -> String {
    match arguments {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn error_text(error: &Value) -> String {
    error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| quote(&error.to_string()))
}

/// A non-streamed reply to a [`Completion`].
fn parse_reply(
    bytes: &[u8],
    strategy: Strategy,
    target: Option<&Target>,
) -> Result<Completion, LlmError> {
    let reply: WireReply = serde_json::from_slice(bytes).map_err(|err| {
        LlmError::Protocol(format!(
            "the server's reply is not a chat completion ({err}): {}",
            quote(&String::from_utf8_lossy(bytes))
        ))
    })?;
    let choices = reply.choices.unwrap_or_default();
    let Some(choice) = choices.into_iter().next() else {
        let why = reply
            .error
            .as_ref()
            .map(error_text)
            .unwrap_or_else(|| "the reply has no choices".into());
        return Err(LlmError::Backend(why));
    };
    let message = choice.message.or(choice.delta).unwrap_or_default();
    let mut text = content_text(message.content.as_ref());
    if text.trim().is_empty()
        && let Some(refusal) = message.refusal.as_deref().filter(|r| !r.trim().is_empty())
    {
        return Err(LlmError::Refused(refusal.to_owned()));
    }
    let reasoning = message.reasoning_content.or(message.reasoning);
    if let Some(reasoning) = &reasoning {
        tracing::debug!(
            chars = reasoning.len(),
            "reasoning kept out of the plan text"
        );
    }
    let tool_calls: Vec<ToolCall> = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .filter_map(|call| call.function)
        .map(|f| ToolCall {
            name: f.name.unwrap_or_default(),
            arguments: refs::restore_text(&arguments_text(f.arguments.as_ref())),
        })
        .collect();
    if strategy == Strategy::JsonSchema {
        text = map_back(&text, target);
    }
    Ok(Completion {
        text,
        tool_calls,
        usage: reply.usage.map(WireUsage::usage).unwrap_or_default(),
        finish: negotiate::finish_reason(choice.finish_reason.as_deref()),
        strategy: Some(strategy),
        queue_us: 0,
        stages: None,
    })
}

/// Drops the nulls a strict reply wrote for absent optional fields (text that is not plain
/// JSON is left to the core parser).
fn map_back(text: &str, target: Option<&Target>) -> String {
    let text = refs::restore_text(text);
    let Some(target) = target.filter(|t| t.strict) else {
        return text;
    };
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(mut value) => {
            strict::drop_absent_nulls(&mut value, &target.schema);
            value.to_string()
        }
        Err(_) => text.to_owned(),
    }
}

/// Streamed chunks to a [`Completion`].
struct Accumulator {
    strategy: Strategy,
    target: Option<Target>,
    text: String,
    calls: Vec<(String, String)>,
    finish: Option<String>,
    usage: Usage,
    done: bool,
    n_chunks: usize,
}

impl Accumulator {
    fn new(strategy: Strategy, target: Option<Target>) -> Accumulator {
        Accumulator {
            strategy,
            target,
            text: String::new(),
            calls: Vec::new(),
            finish: None,
            usage: Usage::default(),
            done: false,
            n_chunks: 0,
        }
    }
}

impl Accumulate for Accumulator {
    fn on_event(&mut self, _event: &str, data: &str) -> Result<Vec<String>, LlmError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        let chunk: WireReply = serde_json::from_str(data).map_err(|err| {
            LlmError::Protocol(format!(
                "a stream chunk is not JSON ({err}): {}",
                quote(data)
            ))
        })?;
        self.n_chunks += 1;
        if let Some(error) = &chunk.error {
            return Err(LlmError::Backend(format!(
                "the server reported an error mid-stream: {}",
                error_text(error)
            )));
        }
        if let Some(usage) = chunk.usage {
            self.usage = usage.usage();
        }
        let mut deltas = Vec::new();
        for choice in chunk.choices.unwrap_or_default() {
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(reason);
            }
            let Some(delta) = choice.delta.or(choice.message) else {
                continue;
            };
            let text = content_text(delta.content.as_ref());
            if !text.is_empty() {
                self.text.push_str(&text);
                deltas.push(text);
            }
            for call in delta.tool_calls.unwrap_or_default() {
                let idx = call.index.unwrap_or(self.calls.len().saturating_sub(1));
                while self.calls.len() <= idx {
                    self.calls.push((String::new(), String::new()));
                }
                let Some(function) = call.function else {
                    continue;
                };
                if let Some(name) = function.name {
                    self.calls[idx].0.push_str(&name);
                }
                let args = arguments_text(function.arguments.as_ref());
                if !args.is_empty() {
                    self.calls[idx].1.push_str(&args);
                    deltas.push(args);
                }
            }
        }
        Ok(deltas)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish(&mut self, ended_early: bool) -> Result<Completion, LlmError> {
        if ended_early && !self.done && self.finish.is_none() {
            return Err(LlmError::Connection(format!(
                "the reply stream ended before the reply was complete ({} chunks, {} characters received)",
                self.n_chunks,
                self.text.len() + self.calls.iter().map(|c| c.1.len()).sum::<usize>()
            )));
        }
        let mut text = std::mem::take(&mut self.text);
        if self.strategy == Strategy::JsonSchema {
            text = map_back(&text, self.target.as_ref());
        }
        Ok(Completion {
            text,
            tool_calls: self
                .calls
                .drain(..)
                .map(|(name, arguments)| ToolCall {
                    name,
                    arguments: refs::restore_text(&arguments),
                })
                .collect(),
            usage: self.usage,
            finish: negotiate::finish_reason(self.finish.as_deref()),
            strategy: Some(self.strategy),
            queue_us: 0,
            stages: None,
        })
    }
}
