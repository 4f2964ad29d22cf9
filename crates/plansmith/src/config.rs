//! The config file, the layer between the built-in defaults and the environment.
//!
//! Precedence, lowest first: built-in defaults → the config file → environment variables
//! (`PLANSMITH_MODEL`, `PLANSMITH_STORE`, `OPENAI_BASE_URL`, the API key variables, …) → flags.
//!
//! The file is `--config FILE` (or `PLANSMITH_CONFIG`); without either,
//! `$XDG_CONFIG_HOME/plansmith/config.toml` (`~/.config/plansmith/config.toml`) when it exists.
//! A named file that is missing or invalid is an error (exit 2); an unknown key is an error that
//! names it. API keys are never read from the file: `api_key_env` names the variable to read.
//!
//! ```toml
//! model = "openai:gpt-4o-mini"          # default for --model
//! store = "sqlite:/var/lib/plansmith/plans.db"
//! retriever = "hybrid"                  # bm25, dense or hybrid (PLANSMITH_RETRIEVER)
//!
//! [providers.openai]                   # openai: and openai-compatible: models
//! base_url = "http://127.0.0.1:8080/v1"
//! api_key_env = "GATEWAY_KEY"
//! request_timeout_secs = 60
//! max_retries = 2
//! strategies = ["tool_calling", "json_mode"]
//!
//! [providers.anthropic]
//! request_timeout_secs = 90
//!
//! [server]                             # plansmith serve
//! addr = "127.0.0.1:8080"
//! tokens = { "tok-alice" = "alice" }   # API token -> owner
//! ```

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, anyhow};
use plansmith_core::secrets::ProviderKeys;
use plansmith_llm::ProviderTable;
use serde::Deserialize;

use crate::CliError;

/// The settings a config file may hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Default model spec (see `--model`).
    pub model: Option<String>,
    /// Default plan store (see `--store`).
    pub store: Option<String>,
    /// Default tool retriever: `bm25`, `dense` or `hybrid` (see `PLANSMITH_RETRIEVER`).
    pub retriever: Option<crate::retrieval::RetrieverKind>,
    /// Provider client settings.
    #[serde(default)]
    pub providers: ProviderTable,
    /// `plansmith serve` settings (`[server]`: addr, tools, agents, tokens, rate_limit,
    /// max_body_bytes, timeout_secs; read by `serve_cmd`).
    #[serde(default)]
    pub server: Option<toml::Table>,
    /// Where the settings came from (`None`: no file).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

static CONFIG: OnceLock<FileConfig> = OnceLock::new();

/// Loads the config file (once per process) before any command runs.
pub fn init(explicit: Option<&Path>) -> Result<(), CliError> {
    let config = match explicit {
        Some(path) => read(path)?,
        None => match default_path().filter(|p| p.is_file()) {
            Some(path) => read(&path)?,
            None => FileConfig::default(),
        },
    };
    // A second init keeps the first: the file is read once per process.
    let _ = CONFIG.set(config);
    Ok(())
}

/// The loaded settings (defaults when [`init`] was not called or found no file).
pub fn current() -> &'static FileConfig {
    CONFIG.get_or_init(FileConfig::default)
}

/// The provider key variables that tool commands and MCP servers do not inherit and whose
/// values are redacted in tool results: `OPENAI_API_KEY`, `ANTHROPIC_API_KEY` and those the
/// file names (`api_key_env`).
pub fn provider_keys() -> ProviderKeys {
    let providers = &current().providers;
    ProviderKeys::default()
        .with_variable(providers.openai.key_variable("OPENAI_API_KEY"))
        .with_variable(providers.anthropic.key_variable("ANTHROPIC_API_KEY"))
}

/// `$XDG_CONFIG_HOME/plansmith/config.toml`, else `~/.config/plansmith/config.toml`.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("plansmith").join("config.toml"))
}

/// Reads and checks one file.
pub fn read(path: &Path) -> Result<FileConfig, CliError> {
    let text = crate::input::read_text_as(path, "the config file ").map_err(CliError::input)?;
    let mut config = parse(&text)
        .with_context(|| format!("invalid config file {}", path.display()))
        .map_err(CliError::input)?;
    config.source = Some(path.to_owned());
    Ok(config)
}

/// A numeric environment variable: `None` when unset (callers drop empty values first), an input
/// error naming the variable when the value is not a `T`.
pub fn env_number<T: std::str::FromStr>(
    name: &str,
    value: Option<String>,
) -> Result<Option<T>, CliError> {
    value
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| CliError::input(anyhow!("{name}=`{v}` is not a number")))
        })
        .transpose()
}

/// Parses and checks a config file's text.
pub fn parse(text: &str) -> anyhow::Result<FileConfig> {
    let config: FileConfig = toml::from_str(text).map_err(|err| {
        let message = err.to_string();
        if message.contains("api_key`") && !message.contains("api_key_env") {
            anyhow!(
                "{message}\nAPI keys are not read from the config file: set `api_key_env` to the \
                 name of the environment variable that holds the key"
            )
        } else {
            anyhow!(message)
        }
    })?;
    config.providers.openai.check("providers.openai")?;
    config.providers.anthropic.check("providers.anthropic")?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses() {
        let config = parse(
            r#"
model = "anthropic:claude-haiku"
store = "sqlite:/tmp/p.db"
[providers.openai]
base_url = "http://127.0.0.1:8080/v1"
strategies = ["tool_calling", "json_mode"]
[providers.anthropic]
request_timeout_secs = 90
"#,
        )
        .unwrap();
        assert_eq!(config.model.as_deref(), Some("anthropic:claude-haiku"));
        assert_eq!(config.store.as_deref(), Some("sqlite:/tmp/p.db"));
        assert_eq!(
            config.providers.openai.base_url.as_deref(),
            Some("http://127.0.0.1:8080/v1")
        );
        assert_eq!(config.providers.anthropic.request_timeout_secs, Some(90.0));
    }

    #[test]
    fn mistakes_are_named() {
        for (text, needle) in [
            ("modle = \"x\"", "modle"),
            ("[providers.openai]\napi_key = \"sk-1\"", "api_key_env"),
            (
                "[providers.openai]\nrequest_timeout_secs = -1",
                "request_timeout_secs",
            ),
            (
                "[providers.openai]\nstrategies = [\"telepathy\"]",
                "telepathy",
            ),
            ("[providers.mistral]\nbase_url = \"http://x\"", "mistral"),
            ("model = ", "model"),
        ] {
            let err = format!("{:#}", parse(text).unwrap_err());
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
