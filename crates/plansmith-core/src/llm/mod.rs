//! The language-model boundary: [`LanguageModel`], its request and reply types, and
//! [`ScriptedModel`], the one mock (turns in order, requests recorded).
//!
//! In the spirit of `tower::Service` and rig's `CompletionModel`: two required methods, no
//! `Clone` supertrait, and a provider's own wire types stay on the provider's side.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod scripted;

pub use scripted::{Script, ScriptError, ScriptedLikelihood, ScriptedModel, ScriptedTurn};

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
    /// `max_text` characters (no call; `max_text` 0: calls only, as a repair of calls asks). A backend without constrained decoding sends no
    /// constraint: the prompt asks for the format and the text is read as it comes.
    ToolCalls {
        /// JSON Schema of one call (`{"name", "arguments"}`, one member per tool; shared: it
        /// is sent again with every repair).
        schema: Arc<Value>,
        /// Most calls in one answer.
        max_calls: u32,
        /// Longest plain-text answer, in characters.
        max_text: u32,
        /// Calls of the plan before this answer's first (an answer that adds calls to a plan
        /// has some): call N of the answer may reference, by `$ref`, only the steps of the
        /// `earlier + N - 1` calls before it ([`crate::calls::call_schema_at`]).
        #[serde(default)]
        earlier: u32,
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
