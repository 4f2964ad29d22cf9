//! plansmith-llm: provider clients behind plansmith's [`LanguageModel`] boundary.
//!
//! # Brief overview
//!
//! - [`OpenAiClient`]: OpenAI-compatible chat completions (OpenAI, DeepSeek, Qwen/DashScope,
//!   Groq, OpenRouter, vLLM, Ollama, llama.cpp's server, LM Studio).
//! - [`AnthropicClient`]: Anthropic's Messages API.
//!
//! Both negotiate the structured-output strategy and fall back when the server refuses one:
//! `json_schema` with `strict` (the plan schema rewritten to OpenAI's strict subset by
//! [`strict::to_strict`] — an OpenAI-compatible server keeps the length and item bounds,
//! [`strict::to_strict_keeping`] — the reply mapped back by [`strict::drop_absent_nulls`]) → a forced
//! `planning` tool call → JSON mode → prompt only. A refusal is a 400/422/501 whose body names
//! the feature; each client remembers what was refused, so later calls (and
//! [`LanguageModel::capabilities`]) skip it, and every `Completion` says in `strategy` which
//! one was used — the pipeline records it in its diagnostics. Anthropic's structured path is
//! forced tool use.
//!
//! Both stream (server-sent events) with the same strategies, retry 429/5xx/connection
//! failures/timeouts with jittered exponential backoff honouring `Retry-After` (bounded by
//! [`RetryPolicy`]), never retry other 4xx, stop when the future or stream is dropped, and count
//! tokens per call and per client. API keys are [`Secret`]s: never in `Debug`, logs, errors or
//! diagnostics. Provider wire types stay in this crate.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use plansmith_core::{Catalog, PlanRequest, Planner};
//! use plansmith_llm::{ClientConfig, OpenAiClient, Provider};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ClientConfig::new(Provider::OpenAiCompatible, "http://127.0.0.1:8080/v1", "qwen2.5")
//!     .with_api_key("sk-…");
//! let model = Arc::new(OpenAiClient::new(config)?);
//! let planner = Planner::new(Catalog::from_json(&serde_json::json!([]))?, model);
//! let outcome = planner.plan(&PlanRequest::new("Weather in Paris?")).await?;
//! println!("{:?} via {:?}", outcome.status, outcome.diagnostics.strategy);
//! # Ok(()) }
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod anthropic;
pub mod config;
mod http;
mod negotiate;
mod openai;
mod refs;
mod sse;
pub mod strict;

use std::sync::Arc;

pub use anthropic::AnthropicClient;
pub use config::{
    ClientConfig, ConfigError, Provider, ProviderSettings, ProviderTable, RetryPolicy, Secret,
    ToolChoice,
};
pub use http::{backoff, parse_retry_after};
pub use openai::OpenAiClient;
use plansmith_core::LanguageModel;

/// The `--model` kinds this crate serves.
pub const KINDS: &str = "openai:MODEL, openai-compatible:URL#MODEL, anthropic:MODEL";

/// Builds a client from a `--model` spec split at its first `:` (`kind` = `openai`,
/// `openai-compatible` or `anthropic`), reading keys and base URLs through `env`. `Ok(None)`:
/// the kind is not one of this crate's.
pub fn from_spec(
    kind: &str,
    rest: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Arc<dyn LanguageModel>>, ConfigError> {
    from_spec_with(kind, rest, env, &ProviderTable::default())
}

/// Like [`from_spec`], with a config file's `[providers]` settings under the environment.
pub fn from_spec_with(
    kind: &str,
    rest: &str,
    env: &dyn Fn(&str) -> Option<String>,
    providers: &ProviderTable,
) -> Result<Option<Arc<dyn LanguageModel>>, ConfigError> {
    let client_error = |err: plansmith_core::LlmError| ConfigError::Client(err.to_string());
    let model: Arc<dyn LanguageModel> = match kind {
        "openai" => Arc::new(
            OpenAiClient::new(ClientConfig::openai_with(rest, env, &providers.openai)?)
                .map_err(client_error)?,
        ),
        "openai-compatible" => Arc::new(
            OpenAiClient::new(ClientConfig::openai_compatible_with(
                rest,
                env,
                &providers.openai,
            )?)
            .map_err(client_error)?,
        ),
        "anthropic" => Arc::new(
            AnthropicClient::new(ClientConfig::anthropic_with(
                rest,
                env,
                &providers.anthropic,
            )?)
            .map_err(client_error)?,
        ),
        _ => return Ok(None),
    };
    Ok(Some(model))
}
