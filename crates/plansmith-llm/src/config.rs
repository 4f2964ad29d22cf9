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
        plansmith_core::secrets::redact(text, &self.0)
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

/// How a forced `planning` tool call is asked for (OpenAI-compatible servers differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// `{"type": "function", "function": {"name": …}}`: OpenAI's documented form; what
    /// llama-cpp-python's server needs (it answers `"required"` with a bare HTTP 500).
    Named,
    /// `"required"`: llama.cpp's own server reads only a string and treats the named object as
    /// `"auto"`; with one tool offered, `"required"` forces exactly that call.
    Required,
}

/// Everything a client needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
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
    /// How to force the tool call; `None`: named for OpenAI, `"required"` for compatible servers.
    pub tool_choice: Option<ToolChoice>,
    /// The server continues a conversation's final assistant message as the start of its reply
    /// ([`Capabilities::prefill`]): llama.cpp's server and Anthropic's API do, OpenAI's does not.
    pub prefill: bool,
}

/// Errors building a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required variable is unset.
    #[error("{0} is not set")]
    MissingEnv(String),
    /// The HTTP client could not be built.
    #[error("cannot build the model client: {0}")]
    Client(String),
    /// A config-file setting has a value a client cannot use.
    #[error("invalid setting `{key}`: {reason}")]
    BadSetting {
        /// The setting, e.g. `providers.openai.request_timeout_secs`.
        key: String,
        /// Why.
        reason: String,
    },
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
            tool_choice: None,
            prefill: false,
        }
    }

    /// The URL of the endpoint `path` (`/chat/completions`) under the base URL: the path goes
    /// before the base URL's query, which is kept (`https://host/v1?api-version=1` and
    /// `/chat/completions` give `https://host/v1/chat/completions?api-version=1`).
    pub fn endpoint(&self, path: &str) -> String {
        let (base, query) = match self.base_url.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (self.base_url.as_str(), None),
        };
        let base = base.trim_end_matches('/');
        match query {
            Some(query) => format!("{base}{path}?{query}"),
            None => format!("{base}{path}"),
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
        ClientConfig::openai_with(model, env, &ProviderSettings::default())
    }

    /// `openai:MODEL` with config-file `settings` under the environment: the key from
    /// `settings.api_key_env` (default `OPENAI_API_KEY`, required), the base URL from
    /// `OPENAI_BASE_URL`, else `settings.base_url`, else OpenAI's.
    pub fn openai_with(
        model: &str,
        env: &dyn Fn(&str) -> Option<String>,
        settings: &ProviderSettings,
    ) -> Result<ClientConfig, ConfigError> {
        settings.check("providers.openai")?;
        let (key, base) = settings.key_and_base(env, "OPENAI_API_KEY", "OPENAI_BASE_URL")?;
        let base = base.unwrap_or_else(|| OPENAI_BASE_URL.to_owned());
        let provider = if base.trim_end_matches('/') == OPENAI_BASE_URL {
            Provider::OpenAi
        } else {
            Provider::OpenAiCompatible
        };
        let mut config = ClientConfig::new(provider, base, non_empty_model(model, "openai:MODEL")?)
            .with_api_key(key);
        settings.apply(&mut config);
        Ok(config)
    }

    /// `openai-compatible:URL#MODEL`: the key from `OPENAI_API_KEY` when set (local servers
    /// usually need none).
    pub fn openai_compatible_from_spec(
        rest: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ClientConfig, ConfigError> {
        ClientConfig::openai_compatible_with(rest, env, &ProviderSettings::default())
    }

    /// `openai-compatible:URL#MODEL` with config-file `settings` (the URL of the spec wins over
    /// `settings.base_url`; the key, optional, from `settings.api_key_env` or `OPENAI_API_KEY`).
    pub fn openai_compatible_with(
        rest: &str,
        env: &dyn Fn(&str) -> Option<String>,
        settings: &ProviderSettings,
    ) -> Result<ClientConfig, ConfigError> {
        settings.check("providers.openai")?;
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
        if let Some(key) = env(settings.key_variable("OPENAI_API_KEY")) {
            config = config.with_api_key(key);
        }
        settings.apply(&mut config);
        Ok(config)
    }

    /// `anthropic:MODEL`: `ANTHROPIC_API_KEY` (required), `ANTHROPIC_BASE_URL` (optional).
    pub fn anthropic_from_env(
        model: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ClientConfig, ConfigError> {
        ClientConfig::anthropic_with(model, env, &ProviderSettings::default())
    }

    /// `anthropic:MODEL` with config-file `settings` under the environment (as
    /// [`ClientConfig::openai_with`]).
    pub fn anthropic_with(
        model: &str,
        env: &dyn Fn(&str) -> Option<String>,
        settings: &ProviderSettings,
    ) -> Result<ClientConfig, ConfigError> {
        settings.check("providers.anthropic")?;
        let (key, base) = settings.key_and_base(env, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")?;
        let base = base.unwrap_or_else(|| ANTHROPIC_BASE_URL.to_owned());
        let mut config = ClientConfig::new(
            Provider::Anthropic,
            base,
            non_empty_model(model, "anthropic:MODEL")?,
        )
        .with_api_key(key);
        settings.apply(&mut config);
        Ok(config)
    }
}

/// One provider's settings from a config file (`[providers.openai]`, `[providers.anthropic]`).
///
/// Every field is optional; a set field replaces the built-in default, and the environment
/// (`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`, the key variable) and the `--model` spec override the
/// file. Keys are never read from the file: `api_key_env` names the variable that holds one.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {
    /// Base URL used when the environment does not set one.
    pub base_url: Option<String>,
    /// The environment variable holding the API key (default `OPENAI_API_KEY` /
    /// `ANTHROPIC_API_KEY`).
    pub api_key_env: Option<String>,
    /// Seconds to establish a connection.
    pub connect_timeout_secs: Option<f64>,
    /// Seconds for one whole try (request, reply and body).
    pub request_timeout_secs: Option<f64>,
    /// Retries after the first try.
    pub max_retries: Option<u32>,
    /// Ask for OpenAI's strict JSON Schema subset.
    pub strict: Option<bool>,
    /// The structured-output strategies to offer, best first (`json_schema`, `tool_calling`,
    /// `json_mode`, `prompt_only`); the client still falls back past ones the server refuses.
    pub strategies: Option<Vec<plansmith_core::Strategy>>,
    /// How a forced tool call is asked for: `named` or `required` (see [`ToolChoice`]).
    pub tool_choice: Option<ToolChoice>,
    /// The server continues a final assistant message as the start of its reply (llama.cpp's
    /// server does): the planner's follow-ups then ask the model to write its answer on.
    pub prefill: Option<bool>,
}

/// Provider settings of a config file's `[providers]` table.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderTable {
    /// `openai:` and `openai-compatible:` models.
    #[serde(default)]
    pub openai: ProviderSettings,
    /// `anthropic:` models.
    #[serde(default)]
    pub anthropic: ProviderSettings,
}

impl ProviderSettings {
    /// Checks values a client cannot use (non-positive or non-finite timeouts, a base URL that is
    /// not http(s), an empty key variable name); `table` names the section in the message.
    pub fn check(&self, table: &str) -> Result<(), ConfigError> {
        let bad = |field: &str, reason: &str| ConfigError::BadSetting {
            key: format!("{table}.{field}"),
            reason: reason.to_owned(),
        };
        for (field, value) in [
            ("connect_timeout_secs", self.connect_timeout_secs),
            ("request_timeout_secs", self.request_timeout_secs),
        ] {
            if let Some(secs) = value
                && !(secs.is_finite() && secs > 0.0 && secs < 86_400.0)
            {
                return Err(bad(
                    field,
                    "must be a number of seconds above 0 and below a day",
                ));
            }
        }
        if let Some(url) = &self.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(bad("base_url", "must start with http:// or https://"));
        }
        if let Some(name) = &self.api_key_env
            && name.trim().is_empty()
        {
            return Err(bad("api_key_env", "must name an environment variable"));
        }
        if let Some(list) = &self.strategies
            && list.is_empty()
        {
            return Err(bad("strategies", "must list at least one strategy"));
        }
        Ok(())
    }

    /// The variable holding the key: `api_key_env`, else `default`.
    pub fn key_variable<'a>(&'a self, default: &'a str) -> &'a str {
        self.api_key_env
            .as_deref()
            .map(str::trim)
            .unwrap_or(default)
    }

    /// The API key (required) from the key variable, and the base URL from `base_env`, else
    /// the file's `base_url`.
    fn key_and_base(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        default_key_env: &str,
        base_env: &str,
    ) -> Result<(String, Option<String>), ConfigError> {
        let key_var = self.key_variable(default_key_env);
        let key = env(key_var)
            .filter(|k| !k.trim().is_empty())
            .ok_or_else(|| ConfigError::MissingEnv(key_var.to_owned()))?;
        let base = env(base_env)
            .filter(|b| !b.trim().is_empty())
            .or_else(|| self.base_url.clone());
        Ok((key, base))
    }

    /// Applies timeouts, retries, strictness and strategies onto `config`.
    pub fn apply(&self, config: &mut ClientConfig) {
        if let Some(secs) = self.connect_timeout_secs {
            config.connect_timeout = Duration::from_secs_f64(secs);
        }
        if let Some(secs) = self.request_timeout_secs {
            config.request_timeout = Duration::from_secs_f64(secs);
        }
        if let Some(retries) = self.max_retries {
            config.retry.max_retries = retries;
        }
        if let Some(strict) = self.strict {
            config.strict = strict;
        }
        if let Some(choice) = self.tool_choice {
            config.tool_choice = Some(choice);
        }
        if let Some(prefill) = self.prefill {
            config.prefill = prefill;
        }
        if let Some(list) = &self.strategies {
            let mut caps = Capabilities::default();
            for strategy in list {
                match strategy {
                    plansmith_core::Strategy::JsonSchema | plansmith_core::Strategy::Grammar => {
                        caps.json_schema = true
                    }
                    plansmith_core::Strategy::ToolCalling => caps.tool_calling = true,
                    plansmith_core::Strategy::JsonMode => caps.json_mode = true,
                    plansmith_core::Strategy::PromptOnly => {}
                }
            }
            config.capabilities = Some(caps);
        }
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
            ConfigError::MissingEnv("ANTHROPIC_API_KEY".into())
        );
        assert!(ClientConfig::openai_from_env("", &env).is_err());
    }

    #[test]
    fn file_settings_sit_under_the_environment() {
        let settings = ProviderSettings {
            base_url: Some("http://127.0.0.1:9000/v1".into()),
            api_key_env: Some("MY_GATEWAY_KEY".into()),
            connect_timeout_secs: Some(2.5),
            request_timeout_secs: Some(30.0),
            max_retries: Some(0),
            strict: Some(false),
            strategies: Some(vec![
                plansmith_core::Strategy::ToolCalling,
                plansmith_core::Strategy::JsonMode,
            ]),
            tool_choice: Some(ToolChoice::Named),
            prefill: Some(true),
        };
        let env = |name: &str| (name == "MY_GATEWAY_KEY").then(|| "gw-1".to_owned());
        let config = ClientConfig::openai_with("m", &env, &settings).unwrap();
        assert_eq!(config.base_url, "http://127.0.0.1:9000/v1");
        assert_eq!(config.provider, Provider::OpenAiCompatible);
        assert_eq!(config.api_key.as_ref().unwrap().expose(), "gw-1");
        assert_eq!(config.connect_timeout, Duration::from_millis(2500));
        assert_eq!(config.request_timeout, Duration::from_secs(30));
        assert_eq!(config.retry.max_retries, 0);
        assert!(!config.strict);
        assert_eq!(config.tool_choice, Some(ToolChoice::Named));
        assert!(config.prefill);
        // What the client offers: the listed strategies, and prefill.
        let client = crate::OpenAiClient::new(config.clone()).unwrap();
        let offered = plansmith_core::LanguageModel::capabilities(&client);
        assert!(offered.prefill && offered.tool_calling && !offered.json_schema);
        assert_eq!(
            config.capabilities,
            Some(Capabilities {
                tool_calling: true,
                json_mode: true,
                ..Capabilities::default()
            })
        );
        // The environment wins over the file; the file's key variable is the one read.
        let env = |name: &str| match name {
            "OPENAI_BASE_URL" => Some("http://10.0.0.1/v1".to_owned()),
            "OPENAI_API_KEY" => Some("sk-ignored".to_owned()),
            _ => None,
        };
        assert_eq!(
            ClientConfig::openai_with("m", &env, &settings).unwrap_err(),
            ConfigError::MissingEnv("MY_GATEWAY_KEY".into())
        );
        let plain = ProviderSettings::default();
        let config = ClientConfig::openai_with("m", &env, &plain).unwrap();
        assert_eq!(config.base_url, "http://10.0.0.1/v1");
        // The spec's URL wins over the file's for openai-compatible.
        let config =
            ClientConfig::openai_compatible_with("http://127.0.0.1:1/v1#q", &env, &settings)
                .unwrap();
        assert_eq!(config.base_url, "http://127.0.0.1:1/v1");
        assert!(config.api_key.is_none(), "MY_GATEWAY_KEY is unset");
    }

    #[test]
    fn unusable_settings_are_named() {
        let env = |_: &str| Some("k".to_owned());
        for (settings, key) in [
            (
                ProviderSettings {
                    request_timeout_secs: Some(0.0),
                    ..ProviderSettings::default()
                },
                "providers.anthropic.request_timeout_secs",
            ),
            (
                ProviderSettings {
                    connect_timeout_secs: Some(f64::NAN),
                    ..ProviderSettings::default()
                },
                "providers.anthropic.connect_timeout_secs",
            ),
            (
                ProviderSettings {
                    base_url: Some("ftp://x".into()),
                    ..ProviderSettings::default()
                },
                "providers.anthropic.base_url",
            ),
            (
                ProviderSettings {
                    api_key_env: Some(" ".into()),
                    ..ProviderSettings::default()
                },
                "providers.anthropic.api_key_env",
            ),
            (
                ProviderSettings {
                    strategies: Some(vec![]),
                    ..ProviderSettings::default()
                },
                "providers.anthropic.strategies",
            ),
        ] {
            match ClientConfig::anthropic_with("claude", &env, &settings) {
                Err(ConfigError::BadSetting { key: got, .. }) => assert_eq!(got, key),
                other => panic!("{key}: {other:?}"),
            }
        }
    }
}
