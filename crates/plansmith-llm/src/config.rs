//! Client configuration: endpoint, key, model, timeouts, retries — from code, flags or the
//! environment. The key is a [`Secret`]: it never shows in `Debug`, logs, errors or diagnostics.

use std::fmt;
use std::time::Duration;

use plansmith_core::Capabilities;

/// An API key. `Debug` and `Display` print `Secret(***)`; only [`Secret::expose`] gives the
/// value, and the clients call it only to set the request header.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a key.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The key itself (for the request header only).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the key in `text` (an error body that echoes it back).
    pub fn redact(&self, text: &str) -> String {
        if self.0.len() < 4 {
            return text.to_owned();
        }
        text.replace(&self.0, "[redacted]")
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Retries with jittered exponential backoff (429, 5xx, connection errors, timeouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first try (0: no retry).
    pub max_retries: u32,
    /// Delay before the first retry; doubled each time, then jittered.
    pub base_delay: Duration,
    /// Largest computed delay.
    pub max_delay: Duration,
    /// Longest `Retry-After` honoured; a server asking for more ends the call with an error
    /// instead of a long hang.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// Which wire protocol a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI's own API (`api.openai.com`).
    OpenAi,
    /// Any OpenAI-compatible chat-completions server (vLLM, Ollama, llama.cpp, DeepSeek, Groq, …).
    OpenAiCompatible,
    /// Anthropic's Messages API.
    Anthropic,
}

/// Everything a client needs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The protocol.
    pub provider: Provider,
    /// Base URL, e.g. `https://api.openai.com/v1` (the client appends `/chat/completions`) or
    /// `https://api.anthropic.com` (the client appends `/v1/messages`).
    pub base_url: String,
    /// The API key, if the server wants one.
    pub api_key: Option<Secret>,
    /// The model name sent to the server.
    pub model: String,
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Time for one whole try (request, reply and body; for a stream, the whole stream).
    pub request_timeout: Duration,
    /// Retries.
    pub retry: RetryPolicy,
    /// What to try first; the client drops what the server refuses. `None`: the provider's
    /// default (OpenAI-compatible: JSON Schema, tools, JSON mode; Anthropic: tools).
    pub capabilities: Option<Capabilities>,
    /// Ask for OpenAI's strict JSON Schema subset (the plan schema is transformed to fit).
    pub strict: bool,
}

/// Errors building a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required variable is unset.
    #[error("{0} is not set")]
    MissingEnv(&'static str),
    /// The HTTP client could not be built.
    #[error("cannot build the model client: {0}")]
    Client(String),
    /// A spec could not be read.
    #[error("invalid model spec `{spec}`: {reason}")]
    BadSpec {
        /// The spec.
        spec: String,
        /// Why.
        reason: String,
    },
}

/// The default OpenAI endpoint.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The default Anthropic endpoint.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

impl ClientConfig {
    /// A configuration with the defaults: connect 10 s, 120 s per try, 3 retries, strict.
    pub fn new(
        provider: Provider,
        base_url: impl Into<String>,
        model: impl Into<String>,
    ) -> ClientConfig {
        ClientConfig {
            provider,
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            model: model.into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
            capabilities: None,
            strict: true,
        }
    }

    /// Sets the key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> ClientConfig {
        let key = key.into();
        self.api_key = (!key.trim().is_empty()).then(|| Secret::new(key.trim()));
        self
    }

    /// `openai:MODEL`: `OPENAI_API_KEY` (required), `OPENAI_BASE_URL` (optional).
    pub fn openai_from_env(
        model: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ClientConfig, ConfigError> {
        let key = env("OPENAI_API_KEY")
            .filter(|k| !k.trim().is_empty())
            .ok_or(ConfigError::MissingEnv("OPENAI_API_KEY"))?;
        let base = env("OPENAI_BASE_URL")
            .filter(|b| !b.trim().is_empty())
            .unwrap_or_else(|| OPENAI_BASE_URL.to_owned());
        let provider = if base.trim_end_matches('/') == OPENAI_BASE_URL {
            Provider::OpenAi
        } else {
            Provider::OpenAiCompatible
        };
        Ok(
            ClientConfig::new(provider, base, non_empty_model(model, "openai:MODEL")?)
                .with_api_key(key),
        )
    }

    /// `openai-compatible:URL#MODEL`: the key from `OPENAI_API_KEY` when set (local servers
    /// usually need none).
    pub fn openai_compatible_from_spec(
        rest: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ClientConfig, ConfigError> {
        let (url, model) = rest.rsplit_once('#').ok_or_else(|| ConfigError::BadSpec {
            spec: rest.to_owned(),
            reason: "expected openai-compatible:URL#MODEL".into(),
        })?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ConfigError::BadSpec {
                spec: rest.to_owned(),
                reason: "the URL must start with http:// or https://".into(),
            });
        }
        let mut config = ClientConfig::new(
            Provider::OpenAiCompatible,
            url,
            non_empty_model(model, "openai-compatible:URL#MODEL")?,
        );
        if let Some(key) = env("OPENAI_API_KEY") {
            config = config.with_api_key(key);
        }
        Ok(config)
    }

    /// `anthropic:MODEL`: `ANTHROPIC_API_KEY` (required), `ANTHROPIC_BASE_URL` (optional).
    pub fn anthropic_from_env(
        model: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ClientConfig, ConfigError> {
        let key = env("ANTHROPIC_API_KEY")
            .filter(|k| !k.trim().is_empty())
            .ok_or(ConfigError::MissingEnv("ANTHROPIC_API_KEY"))?;
        let base = env("ANTHROPIC_BASE_URL")
            .filter(|b| !b.trim().is_empty())
            .unwrap_or_else(|| ANTHROPIC_BASE_URL.to_owned());
        Ok(ClientConfig::new(
            Provider::Anthropic,
            base,
            non_empty_model(model, "anthropic:MODEL")?,
        )
        .with_api_key(key))
    }
}

fn non_empty_model<'a>(model: &'a str, form: &str) -> Result<&'a str, ConfigError> {
    let model = model.trim();
    if model.is_empty() {
        return Err(ConfigError::BadSpec {
            spec: model.to_owned(),
            reason: format!("no model name; expected {form}"),
        });
    }
    Ok(model)
}

/// Reads a process environment variable (the `env` argument of the `*_from_env` constructors).
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let config = ClientConfig::new(Provider::OpenAi, OPENAI_BASE_URL, "gpt-4o-mini")
            .with_api_key("sk-very-secret-123");
        let shown = format!(
            "{config:?} {} {:?}",
            config.api_key.as_ref().unwrap(),
            config.api_key
        );
        assert!(!shown.contains("sk-very-secret-123"), "{shown}");
        assert!(shown.contains("Secret(***)"), "{shown}");
        let key = config.api_key.unwrap();
        assert_eq!(
            key.redact("Incorrect API key provided: sk-very-secret-123."),
            "Incorrect API key provided: [redacted]."
        );
    }

    #[test]
    fn specs_and_env() {
        let env = |name: &str| match name {
            "OPENAI_API_KEY" => Some("sk-1".to_owned()),
            "OPENAI_BASE_URL" => Some("http://127.0.0.1:8080/v1/".to_owned()),
            _ => None,
        };
        let config = ClientConfig::openai_from_env("gpt-4o-mini", &env).unwrap();
        assert_eq!(config.base_url, "http://127.0.0.1:8080/v1");
        assert_eq!(config.provider, Provider::OpenAiCompatible);
        assert_eq!(config.api_key.unwrap().expose(), "sk-1");
        let config = ClientConfig::openai_compatible_from_spec(
            "http://localhost:11434/v1#qwen2.5:0.5b",
            &env,
        )
        .unwrap();
        assert_eq!(
            (config.base_url.as_str(), config.model.as_str()),
            ("http://localhost:11434/v1", "qwen2.5:0.5b")
        );
        assert!(ClientConfig::openai_compatible_from_spec("localhost#m", &env).is_err());
        assert!(ClientConfig::openai_compatible_from_spec("http://x/v1", &env).is_err());
        assert_eq!(
            ClientConfig::anthropic_from_env("claude", &env).unwrap_err(),
            ConfigError::MissingEnv("ANTHROPIC_API_KEY")
        );
        assert!(ClientConfig::openai_from_env("", &env).is_err());
    }
}
