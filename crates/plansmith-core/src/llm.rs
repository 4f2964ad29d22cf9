//! The language-model boundary: [`LanguageModel`], its request and reply types, and
//! [`ScriptedModel`], the one mock (turns in order, requests recorded).
//!
//! In the spirit of `tower::Service` and rig's `CompletionModel`: two required methods, no
//! `Clone` supertrait, and a provider's own wire types stay on the provider's side.

use std::collections::VecDeque;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A boxed, sendable future (what [`LanguageModel::complete`] returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A boxed, sendable stream (what [`LanguageModel::stream`] returns).
pub type BoxStream<'a, T> = Pin<Box<dyn futures::Stream<Item = T> + Send + 'a>>;

/// One event of a streamed reply.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// More text (or tool-call argument text) as the model writes it.
    Delta(String),
    /// The reply is complete: the whole text, tool calls, usage and finish reason.
    Done(Completion),
}

/// Who said a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Message {
        Message {
            role: Role::System,
            content: content.into(),
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Message {
        Message {
            role: Role::User,
            content: content.into(),
        }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Message {
        Message {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// How the output is constrained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OutputConstraint {
    /// Output must match this JSON Schema (response format, or a grammar on a local model).
    JsonSchema {
        /// Name of the schema.
        name: String,
        /// The schema (shared: it is sent again with every repair).
        schema: Arc<Value>,
        /// Ask for strict adherence where the backend supports it.
        strict: bool,
    },
    /// Output comes as a call of this tool, whose parameters are the schema.
    ToolCall {
        /// Tool name.
        name: String,
        /// Tool description.
        description: String,
        /// JSON Schema of the parameters (shared: it is sent again with every repair).
        parameters: Arc<Value>,
    },
    /// Output is the model's own tool-call format ([`crate::calls`]): one to `max_calls`
    /// `<tool_call>` blocks, each a JSON object matching `schema`, or plain text of at most
    /// `max_text` characters (no call). A backend without constrained decoding sends no
    /// constraint: the prompt asks for the format and the text is read as it comes.
    ToolCalls {
        /// JSON Schema of one call (`{"name", "arguments"}`, one member per tool; shared: it
        /// is sent again with every repair).
        schema: Arc<Value>,
        /// Most calls in one answer.
        max_calls: u32,
        /// Longest plain-text answer, in characters.
        max_text: u32,
    },
    /// Output must be a JSON object (no schema).
    JsonObject,
}

/// What a backend supports, so the pipeline can pick a structured-output strategy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    /// JSON Schema response formats.
    pub json_schema: bool,
    /// Grammar-constrained decoding from a JSON Schema (the output always matches).
    pub grammar: bool,
    /// Tool / function calling.
    pub tool_calling: bool,
    /// JSON mode (an object, no schema).
    pub json_mode: bool,
    /// Continues a conversation that ends with an assistant message: the reply goes on from
    /// that message's text (prefill) instead of starting a new turn.
    pub prefill: bool,
}

/// The structured-output strategy used for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Grammar-constrained decoding from the plan schema.
    Grammar,
    /// JSON Schema response format.
    JsonSchema,
    /// A `planning` tool whose parameters are the plan schema.
    ToolCalling,
    /// JSON mode.
    JsonMode,
    /// The prompt describes the format; parsing is tolerant.
    PromptOnly,
}

impl Strategy {
    /// The best strategy the capabilities allow.
    pub fn negotiate(capabilities: Capabilities) -> Strategy {
        if capabilities.grammar {
            Strategy::Grammar
        } else if capabilities.json_schema {
            Strategy::JsonSchema
        } else if capabilities.tool_calling {
            Strategy::ToolCalling
        } else if capabilities.json_mode {
            Strategy::JsonMode
        } else {
            Strategy::PromptOnly
        }
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Grammar => "grammar",
            Strategy::JsonSchema => "json_schema",
            Strategy::ToolCalling => "tool_calling",
            Strategy::JsonMode => "json_mode",
            Strategy::PromptOnly => "prompt_only",
        }
    }
}

/// One completion request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// How the output is constrained, if at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<OutputConstraint>,
    /// Token cap for the reply.
    pub max_tokens: u32,
    /// Sampling temperature (planning uses 0).
    pub temperature: f32,
}

/// A tool call in a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Tool name.
    pub name: String,
    /// Arguments, as the model wrote them (JSON text).
    pub arguments: String,
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Generated tokens.
    pub completion_tokens: u32,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished.
    #[default]
    Stop,
    /// The token cap was hit: the output may be truncated.
    Length,
    /// The model called a tool.
    ToolCalls,
    /// Anything else the backend reported.
    Other,
}

/// How likely a model finds a text after a context ([`LanguageModel::likelihood`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Likelihood {
    /// The sum of the text's token log-probabilities, in nats (at most 0).
    pub log_prob: f64,
    /// How many tokens the text is.
    pub tokens: u32,
}

impl Likelihood {
    /// The mean log-probability of a token of the text (0 for an empty text).
    pub fn per_token(&self) -> f64 {
        if self.tokens == 0 {
            0.0
        } else {
            self.log_prob / f64::from(self.tokens)
        }
    }
}

/// A model's reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// Text content.
    #[serde(default)]
    pub text: String,
    /// Tool calls, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Token counts.
    #[serde(default)]
    pub usage: Usage,
    /// Why generation stopped.
    #[serde(default)]
    pub finish: FinishReason,
    /// The strategy the backend actually used, when it differs from the one asked for (a
    /// server that refused a JSON Schema response format and fell back to tool calling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// Microseconds the request waited before the backend started on it (the embedded model
    /// runs one request at a time: a request made while another decodes waits for it). Part of
    /// the call's time, which the pipeline reports apart from the generation itself.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queue_us: u64,
    /// Where the backend's time went, stage by stage, when it can tell (the embedded model
    /// can; a remote API does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<Stages>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// One model call's time inside the backend, stage by stage: what a reply waits for before
/// its first token, and after.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Stages {
    /// Loading the model, reported on the first call of the process that loaded it: the
    /// cost a cold process pays once, before this call could start.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub load_ms: u64,
    /// Prompt tokens whose state the backend already held (reused from the call before, or
    /// restored from its on-disk prompt cache).
    #[serde(default)]
    pub cached_tokens: u32,
    /// Of the cached tokens, those restored from the on-disk prompt cache for this call.
    #[serde(default)]
    pub restored_tokens: u32,
    /// Reading the restored tokens' state.
    #[serde(default)]
    pub restore_ms: u64,
    /// Evaluating the prompt tokens that were not cached (and saving the prompt cache).
    #[serde(default)]
    pub prompt_ms: u64,
    /// Writing the reply.
    #[serde(default)]
    pub generate_ms: u64,
}

/// Errors at the model boundary, typed so that a caller can tell what to do: retry
/// ([`LlmError::is_retryable`]), fix the request or the configuration, or give up.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The backend could not be reached, or the connection broke before the reply was whole
    /// (after the client's own retries).
    #[error("model backend unreachable: {0}")]
    Connection(String),
    /// The backend answered with an HTTP error status (after the client's own retries where
    /// the status allows them).
    #[error("model backend failed: HTTP {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// What the backend said, quoted and cut, secrets redacted.
        message: String,
    },
    /// The backend refused the request as it was made (a redirect, every structured-output
    /// strategy refused, a prompt longer than the context): it will not succeed on retry.
    #[error("model backend rejected the request: {0}")]
    Rejected(String),
    /// The model declined to answer (a safety refusal).
    #[error("the model refused: {0}")]
    Refused(String),
    /// The backend's answer does not follow its protocol (not JSON, no choices, a stream that
    /// was not asked for).
    #[error("model backend broke its protocol: {0}")]
    Protocol(String),
    /// The call timed out.
    #[error("model call timed out after {0} ms")]
    Timeout(u64),
    /// The backend failed otherwise: an error it reported in its reply, or a local model's
    /// engine.
    #[error("model backend failed: {0}")]
    Backend(String),
    /// A scripted model ran out of turns.
    #[error("scripted model has no turn left for request #{0}")]
    ScriptExhausted(usize),
}

impl LlmError {
    /// The HTTP status the backend answered with, if it answered with an error status.
    pub fn status(&self) -> Option<u16> {
        match self {
            LlmError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the same request may succeed later: a connection problem, a timeout, a rate
    /// limit (429), a request timeout (408) or a server error (5xx). False for what no retry
    /// fixes (a rejected request, a refusal, a protocol problem, other 4xx).
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Connection(_) | LlmError::Timeout(_) => true,
            LlmError::Status { status, .. } => matches!(status, 408 | 429 | 500..=599),
            _ => false,
        }
    }
}

/// A language model backend.
pub trait LanguageModel: Send + Sync {
    /// A short name for diagnostics (`scripted`, `openai:gpt-4o-mini`, …).
    fn name(&self) -> String;

    /// What structured output the backend supports.
    fn capabilities(&self) -> Capabilities;

    /// One completion.
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>>;

    /// One completion, streamed: zero or more [`StreamEvent::Delta`]s, then one
    /// [`StreamEvent::Done`]. Backends that cannot stream keep this default, which yields the
    /// whole reply as a single `Done`.
    fn stream(&self, request: CompletionRequest) -> BoxStream<'_, Result<StreamEvent, LlmError>> {
        let completion = self.complete(request);
        Box::pin(futures::stream::once(async move {
            completion.await.map(StreamEvent::Done)
        }))
    }

    /// How likely the model finds `text` right after `context`, both plain text read as they
    /// are (no chat template, no turn markers): the planner's fit check compares a request's
    /// likelihood after a tool's description with its likelihood after a content-free one.
    /// Backends that cannot score a given text (remote providers) keep this default, `None`.
    fn likelihood(
        &self,
        context: String,
        text: String,
    ) -> BoxFuture<'_, Result<Option<Likelihood>, LlmError>> {
        let _ = (context, text);
        Box::pin(async { Ok(None) })
    }
}

/// One scripted turn: a reply, or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScriptedTurn {
    /// Plain text reply.
    Text(String),
    /// A failure (listed before `Completion`: untagged enums try variants in order, and every
    /// `Completion` field has a default).
    Error {
        /// Error message, returned as [`LlmError::Backend`], or as [`LlmError::Status`] with
        /// `status`.
        error: String,
        /// The HTTP status a provider would have answered with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    },
    /// A full reply.
    Completion(Completion),
}

/// One rule of a scripted model's [`LanguageModel::likelihood`]: a context that contains
/// `context_contains` (and a text that contains `text_contains`, when given) gives each
/// whitespace-separated word of the text `per_token` nats. The first rule that matches is used;
/// when none does, -1 nat a word.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptedLikelihood {
    /// A substring of the context.
    pub context_contains: String,
    /// A substring of the text, when the rule is for some texts only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_contains: Option<String>,
    /// The log-probability of each word of the text, in nats.
    pub per_token: f64,
}

/// The file form of a scripted model (`--model scripted:FILE`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Script {
    /// What the model claims to support (default: nothing, i.e. prompt-only).
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Replies, in order.
    pub turns: Vec<ScriptedTurn>,
    /// What [`LanguageModel::likelihood`] answers; empty (the default), the model cannot score.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub likelihoods: Vec<ScriptedLikelihood>,
    /// After the last turn, start again from the first: a model that never runs out (load
    /// tests, fuzzing a server). Requests are then counted but not kept, so memory stays flat.
    #[serde(default)]
    pub repeat: bool,
    /// Streams each reply in pieces of this many characters, as a provider's deltas arrive
    /// (the text, or the first tool call's arguments when there is no text); 0, the default,
    /// gives each reply whole, as a model that does not stream.
    #[serde(default)]
    pub stream_chunk: usize,
}

/// A model that replays scripted turns in order and records every request.
#[derive(Debug, Default)]
pub struct ScriptedModel {
    capabilities: Capabilities,
    turns: Mutex<VecDeque<ScriptedTurn>>,
    requests: Mutex<Vec<CompletionRequest>>,
    repeat: bool,
    stream_chunk: usize,
    likelihoods: Vec<ScriptedLikelihood>,
}

/// Errors loading a script.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a script.
    #[error("{path} is not a scripted-model file ({{\"turns\": [...]}}): {source}")]
    Format {
        /// The path.
        path: String,
        /// The cause.
        source: serde_json::Error,
    },
}

impl ScriptedModel {
    /// A prompt-only model that replies with these texts in order.
    pub fn new<I, S>(turns: I) -> ScriptedModel
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ScriptedModel::from_script(Script {
            capabilities: Capabilities::default(),
            turns: turns
                .into_iter()
                .map(|t| ScriptedTurn::Text(t.into()))
                .collect(),
            ..Script::default()
        })
    }

    /// A model from a script.
    pub fn from_script(script: Script) -> ScriptedModel {
        ScriptedModel {
            capabilities: script.capabilities,
            turns: Mutex::new(script.turns.into()),
            requests: Mutex::new(Vec::new()),
            repeat: script.repeat,
            stream_chunk: script.stream_chunk,
            likelihoods: script.likelihoods,
        }
    }

    /// The same model, scoring texts by these rules (see [`ScriptedLikelihood`]).
    #[must_use]
    pub fn scoring(mut self, likelihoods: Vec<ScriptedLikelihood>) -> ScriptedModel {
        self.likelihoods = likelihoods;
        self
    }

    /// The same model, streaming each reply in pieces of `chars` characters (see
    /// [`Script::stream_chunk`]; 0 turns streaming off).
    #[must_use]
    pub fn streaming(mut self, chars: usize) -> ScriptedModel {
        self.stream_chunk = chars;
        self
    }

    /// Loads a script file: `{"capabilities": {...}, "turns": ["text", {"text": ..., "usage": ...}, {"error": "..."}]}`
    /// or just a list of turns.
    pub fn from_file(path: &Path) -> Result<ScriptedModel, ScriptError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Io {
            path: shown.clone(),
            source,
        })?;
        let script = match serde_json::from_str::<Script>(&text) {
            Ok(script) => script,
            Err(err) => match serde_json::from_str::<Vec<ScriptedTurn>>(&text) {
                Ok(turns) => Script {
                    turns,
                    ..Script::default()
                },
                Err(_) => {
                    return Err(ScriptError::Format {
                        path: shown,
                        source: err,
                    });
                }
            },
        };
        Ok(ScriptedModel::from_script(script))
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<CompletionRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Turns not used yet.
    pub fn remaining(&self) -> usize {
        self.turns.lock().map(|t| t.len()).unwrap_or(0)
    }
}

impl LanguageModel for ScriptedModel {
    fn name(&self) -> String {
        "scripted".to_owned()
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        let n_request = match self.requests.lock() {
            Ok(_) if self.repeat => 0,
            Ok(mut requests) => {
                requests.push(request);
                requests.len()
            }
            Err(_) => 0,
        };
        let turn = self.turns.lock().ok().and_then(|mut turns| {
            let turn = turns.pop_front()?;
            if self.repeat {
                turns.push_back(turn.clone());
            }
            Some(turn)
        });
        Box::pin(async move {
            match turn {
                None => Err(LlmError::ScriptExhausted(n_request)),
                Some(ScriptedTurn::Error {
                    error,
                    status: Some(status),
                }) => Err(LlmError::Status {
                    status,
                    message: error,
                }),
                Some(ScriptedTurn::Error { error, .. }) => Err(LlmError::Backend(error)),
                Some(ScriptedTurn::Text(text)) => Ok(Completion {
                    usage: Usage {
                        prompt_tokens: 0,
                        completion_tokens: u32::try_from(text.len() / 4).unwrap_or(u32::MAX),
                    },
                    text,
                    ..Completion::default()
                }),
                Some(ScriptedTurn::Completion(completion)) => Ok(completion),
            }
        })
    }

    fn stream(&self, request: CompletionRequest) -> BoxStream<'_, Result<StreamEvent, LlmError>> {
        let chunk = self.stream_chunk;
        let completion = self.complete(request);
        let events = async move {
            let completion = match completion.await {
                Ok(completion) => completion,
                Err(err) => return vec![Err(err)],
            };
            let written = match completion.tool_calls.first() {
                Some(call) if completion.text.is_empty() => call.arguments.as_str(),
                _ => completion.text.as_str(),
            };
            let mut events: Vec<_> = pieces(written, chunk)
                .map(|piece| Ok(StreamEvent::Delta(piece.to_owned())))
                .collect();
            events.push(Ok(StreamEvent::Done(completion)));
            events
        };
        Box::pin(futures::StreamExt::flatten(futures::StreamExt::map(
            futures::stream::once(events),
            futures::stream::iter,
        )))
    }

    fn likelihood(
        &self,
        context: String,
        text: String,
    ) -> BoxFuture<'_, Result<Option<Likelihood>, LlmError>> {
        let scored = (!self.likelihoods.is_empty()).then(|| {
            let per_token = self
                .likelihoods
                .iter()
                .find(|rule| {
                    context.contains(&rule.context_contains)
                        && rule
                            .text_contains
                            .as_ref()
                            .is_none_or(|part| text.contains(part.as_str()))
                })
                .map_or(-1.0, |rule| rule.per_token);
            let tokens = u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX);
            Likelihood {
                log_prob: per_token * f64::from(tokens),
                tokens,
            }
        });
        Box::pin(async move { Ok(scored) })
    }
}

/// `text` in consecutive pieces of `chars` characters (the last may be shorter); none when
/// `chars` is 0 (no streaming).
fn pieces(text: &str, chars: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() || chars == 0 {
            return None;
        }
        let end = rest
            .char_indices()
            .nth(chars)
            .map_or(rest.len(), |(at, _)| at);
        let (piece, after) = rest.split_at(end);
        rest = after;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_model_replays_and_records() {
        let model = ScriptedModel::new(["one", "two"]);
        let request = CompletionRequest {
            messages: vec![Message::user("hi")],
            constraint: None,
            max_tokens: 10,
            temperature: 0.0,
        };
        let first = futures::executor::block_on(model.complete(request.clone())).unwrap();
        assert_eq!(first.text, "one");
        let second = futures::executor::block_on(model.complete(request.clone())).unwrap();
        assert_eq!(second.text, "two");
        let err = futures::executor::block_on(model.complete(request)).unwrap_err();
        assert!(matches!(err, LlmError::ScriptExhausted(3)), "{err}");
        assert_eq!(model.requests().len(), 3);
    }

    #[test]
    fn repeating_script_never_runs_out() {
        let model = ScriptedModel::from_script(Script {
            capabilities: Capabilities::default(),
            turns: vec![
                ScriptedTurn::Text("a".into()),
                ScriptedTurn::Text("b".into()),
            ],
            repeat: true,
            ..Script::default()
        });
        let request = CompletionRequest {
            messages: vec![Message::user("hi")],
            constraint: None,
            max_tokens: 10,
            temperature: 0.0,
        };
        let texts: Vec<String> = (0..5)
            .map(|_| {
                futures::executor::block_on(model.complete(request.clone()))
                    .unwrap()
                    .text
            })
            .collect();
        assert_eq!(texts, ["a", "b", "a", "b", "a"]);
        assert!(
            model.requests().is_empty(),
            "a repeating script keeps no requests"
        );
        assert_eq!(model.remaining(), 2);
    }

    #[test]
    fn default_stream_yields_one_done_event() {
        use futures::StreamExt;
        let model = ScriptedModel::new(["whole reply"]);
        let request = CompletionRequest {
            messages: vec![],
            constraint: None,
            max_tokens: 10,
            temperature: 0.0,
        };
        let events: Vec<_> = futures::executor::block_on(model.stream(request).collect::<Vec<_>>());
        assert_eq!(events.len(), 1);
        assert!(matches!(&events[0], Ok(StreamEvent::Done(c)) if c.text == "whole reply"));
    }

    #[test]
    fn streaming_script_sends_the_reply_in_pieces_then_done() {
        use futures::StreamExt;
        let request = CompletionRequest {
            messages: vec![],
            constraint: None,
            max_tokens: 10,
            temperature: 0.0,
        };
        let model = ScriptedModel::new(["héllo wörld", "x"]).streaming(4);
        let events: Vec<_> =
            futures::executor::block_on(model.stream(request.clone()).collect::<Vec<_>>());
        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|event| match event {
                Ok(StreamEvent::Delta(text)) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, ["héll", "o wö", "rld"]);
        assert!(matches!(events.last(), Some(Ok(StreamEvent::Done(c))) if c.text == "héllo wörld"));
        // A tool call streams its arguments; an error is the stream's only item.
        let script: Script = serde_json::from_str(
            r#"{"stream_chunk": 8, "turns": [{"tool_calls": [{"name": "plan", "arguments": "{\"steps\": []}"}]}, {"error": "boom"}]}"#,
        )
        .unwrap();
        let model = ScriptedModel::from_script(script);
        let events: Vec<_> =
            futures::executor::block_on(model.stream(request.clone()).collect::<Vec<_>>());
        assert!(matches!(&events[0], Ok(StreamEvent::Delta(t)) if t == "{\"steps\""));
        assert!(matches!(&events[1], Ok(StreamEvent::Delta(t)) if t == ": []}"));
        assert!(matches!(&events[2], Ok(StreamEvent::Done(c)) if c.tool_calls.len() == 1));
        let events: Vec<_> = futures::executor::block_on(model.stream(request).collect::<Vec<_>>());
        assert!(matches!(&events[..], [Err(LlmError::Backend(e))] if e == "boom"));
    }

    #[test]
    fn script_turns_deserialize_in_every_form() {
        let script: Script = serde_json::from_str(
            r#"{"capabilities": {"json_schema": true}, "turns": ["a", {"text": "b", "finish": "length"}, {"error": "boom"}]}"#,
        )
        .unwrap();
        assert!(script.capabilities.json_schema);
        assert!(matches!(&script.turns[0], ScriptedTurn::Text(t) if t == "a"));
        assert!(
            matches!(&script.turns[1], ScriptedTurn::Completion(c) if c.finish == FinishReason::Length)
        );
        assert!(matches!(&script.turns[2], ScriptedTurn::Error { error, .. } if error == "boom"));
    }
}
