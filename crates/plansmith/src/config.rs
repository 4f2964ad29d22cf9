//! The config file, and the one path every command's settings take ([`settings`]).
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
//! [investigate]                        # background investigation (plan, serve, mcp)
//! mcp = "servers.json"                 # a read-only tool of an MCP server, or command = "…"
//! tool = "search_nodes"
//!
//! [server]                             # plansmith serve
//! addr = "127.0.0.1:8080"
//! tokens = { "tok-alice" = "alice" }   # API token -> owner
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, anyhow};
use plansmith_core::secrets::ProviderKeys;
use plansmith_llm::ProviderTable;
use plansmith_store::Budget;
use serde::Deserialize;
use serde_json::Value;

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
    pub retriever: Option<RetrieverKind>,
    /// Provider client settings.
    #[serde(default)]
    pub providers: ProviderTable,
    /// `plansmith serve` settings (`[server]`: addr, tools, agents, tokens, rate_limit,
    /// max_body_bytes, timeout_secs; read by `serve_cmd`).
    #[serde(default)]
    pub server: Option<toml::Table>,
    /// Caps of every run (`[budget]`: max_tool_calls, max_tokens, max_seconds, max_replans,
    /// on_cap), for `run` and `serve`; `serve` also reads `[server.budget]` over it.
    #[serde(default)]
    pub budget: Option<Budget>,
    /// Background investigation for `plan`, `serve` and `mcp` (`[investigate]`: a command, or
    /// a read-only MCP tool; see `investigate_cmd`).
    #[serde(default)]
    pub investigate: Option<InvestigateConfig>,
    /// Where the settings came from (`None`: no file).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// The config file's `[investigate]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvestigateConfig {
    /// A shell command, as `plan --investigate` takes it.
    pub command: Option<String>,
    /// The MCP servers file (the `--mcp` format) with the server of `tool`.
    pub mcp: Option<PathBuf>,
    /// The read-only tool that investigates.
    pub tool: Option<String>,
    /// The argument that gets the request (default: the tool's one string argument).
    pub argument: Option<String>,
    /// Fixed other arguments.
    #[serde(default)]
    pub arguments: BTreeMap<String, Value>,
    /// What the tool is called with: `request` (the default) or `terms`.
    #[serde(default)]
    pub lookup: LookupKind,
    /// Investigate every request (the default), not only those that ask.
    #[serde(default = "yes")]
    pub every_request: bool,
}

fn yes() -> bool {
    true
}

/// What a configured MCP tool is called with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LookupKind {
    /// The whole request, once.
    #[default]
    Request,
    /// Each name or address of the request.
    Terms,
}

/// A tool retrieval method (see `crate::retrieval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetrieverKind {
    /// BM25F keyword search over names, descriptions and parameters.
    Bm25,
    /// The sentence-embedding model alone (cosine similarity).
    Dense,
    /// Both, by reciprocal-rank fusion (the default).
    Hybrid,
}

impl RetrieverKind {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            RetrieverKind::Bm25 => "bm25",
            RetrieverKind::Dense => "dense",
            RetrieverKind::Hybrid => "hybrid",
        }
    }
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

/// One layer of the settings that the defaults, the file, the environment and the flags may
/// each set: every field optional, the upper layer winning field by field.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The model spec (`--model`, `PLANSMITH_MODEL`, `model`).
    pub model: Option<String>,
    /// The plan store (`--store`, `PLANSMITH_STORE`, `store`).
    pub store: Option<String>,
    /// The tool retriever (`--retriever`, `PLANSMITH_RETRIEVER`, `retriever`); not in `[server]`.
    #[serde(skip)]
    pub retriever: Option<RetrieverKind>,
    /// `serve`: the address to listen on.
    pub addr: Option<String>,
    /// `serve`: the tool catalog.
    pub tools: Option<PathBuf>,
    /// `serve`: the agent cards.
    pub agents: Option<PathBuf>,
    /// `serve`: the MCP servers.
    pub mcp: Option<PathBuf>,
    /// `serve`: API token → owner.
    pub tokens: Option<HashMap<String, String>>,
    /// `serve`: requests per second per owner.
    pub rate_limit: Option<u32>,
    /// `serve`: the largest request body.
    pub max_body_bytes: Option<usize>,
    /// `serve`: the request timeout.
    pub timeout_secs: Option<u64>,
    /// `serve`: the header-read timeout.
    pub header_timeout_secs: Option<u64>,
    /// `serve`: most connections at once.
    pub max_connections: Option<usize>,
    /// `serve`: origins whose pages may call the API (CORS).
    pub cors_origins: Option<Vec<String>>,
    /// Caps of every run (`[budget]`; `run`'s `--max-*` flags), merged cap by cap.
    pub budget: Option<Budget>,
}

/// `over`'s caps over `under`'s, cap by cap.
fn merged(under: Option<Budget>, over: Option<Budget>) -> Option<Budget> {
    match (under, over) {
        (Some(under), Some(over)) => Some(under.then(&over)),
        (under, over) => over.or(under),
    }
}

impl Settings {
    /// `self` with `over`'s values where it has them.
    fn then(self, over: Settings) -> Settings {
        Settings {
            addr: over.addr.or(self.addr),
            store: over.store.or(self.store),
            model: over.model.or(self.model),
            retriever: over.retriever.or(self.retriever),
            tools: over.tools.or(self.tools),
            agents: over.agents.or(self.agents),
            mcp: over.mcp.or(self.mcp),
            tokens: over.tokens.or(self.tokens),
            rate_limit: over.rate_limit.or(self.rate_limit),
            max_body_bytes: over.max_body_bytes.or(self.max_body_bytes),
            timeout_secs: over.timeout_secs.or(self.timeout_secs),
            header_timeout_secs: over.header_timeout_secs.or(self.header_timeout_secs),
            max_connections: over.max_connections.or(self.max_connections),
            cors_origins: over.cors_origins.or(self.cors_origins),
            budget: merged(self.budget, over.budget),
        }
    }

    /// The `PLANSMITH_*` variables `scope` reads: the model, store and retriever for every
    /// command, and `serve`'s own (`PLANSMITH_TOKENS` is `token:owner,token:owner`) for `serve`
    /// only, so that a bad `serve` variable is not an error of another command.
    fn from_env(env: &dyn Fn(&str) -> Option<String>, scope: Scope) -> Result<Settings, CliError> {
        let retriever = match env("PLANSMITH_RETRIEVER") {
            None => None,
            Some(value) => Some(
                <RetrieverKind as clap::ValueEnum>::from_str(value.trim(), true).map_err(|_| {
                    CliError::input(anyhow!(
                        "PLANSMITH_RETRIEVER=`{value}`: the retriever is bm25, dense or hybrid"
                    ))
                })?,
            ),
        };
        let common = Settings {
            store: env("PLANSMITH_STORE"),
            model: env("PLANSMITH_MODEL"),
            retriever,
            ..Settings::default()
        };
        if scope == Scope::Command {
            return Ok(common);
        }
        let tokens = match env("PLANSMITH_TOKENS") {
            None => None,
            Some(text) => {
                let mut map = HashMap::new();
                for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let (token, owner) = pair.split_once(':').ok_or_else(|| {
                        CliError::input(anyhow!("PLANSMITH_TOKENS: `{pair}` is not token:owner"))
                    })?;
                    map.insert(token.to_owned(), owner.to_owned());
                }
                Some(map)
            }
        };
        Ok(Settings {
            addr: env("PLANSMITH_ADDR"),
            tools: env("PLANSMITH_TOOLS").map(PathBuf::from),
            agents: env("PLANSMITH_AGENTS").map(PathBuf::from),
            mcp: env("PLANSMITH_MCP").map(PathBuf::from),
            tokens,
            rate_limit: env_number("PLANSMITH_RATE_LIMIT", env("PLANSMITH_RATE_LIMIT"))?,
            max_body_bytes: env_number(
                "PLANSMITH_MAX_BODY_BYTES",
                env("PLANSMITH_MAX_BODY_BYTES"),
            )?,
            timeout_secs: env_number("PLANSMITH_TIMEOUT_SECS", env("PLANSMITH_TIMEOUT_SECS"))?,
            header_timeout_secs: env_number(
                "PLANSMITH_HEADER_TIMEOUT_SECS",
                env("PLANSMITH_HEADER_TIMEOUT_SECS"),
            )?,
            max_connections: env_number(
                "PLANSMITH_MAX_CONNECTIONS",
                env("PLANSMITH_MAX_CONNECTIONS"),
            )?,
            cors_origins: env("PLANSMITH_CORS_ORIGINS").map(|text| {
                text.split(',')
                    .map(str::trim)
                    .filter(|o| !o.is_empty())
                    .map(str::to_owned)
                    .collect()
            }),
            ..common
        })
    }
}

/// Which settings of the file a command reads: every command its top-level ones, `serve` its
/// `[server]` table over them too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Any command but `serve`.
    Command,
    /// `plansmith serve`.
    Serve,
}

/// The settings of every command, layered in one order: built-in defaults → the config file →
/// `PLANSMITH_*` environment variables → `flags` (what the command line gave; clap's own
/// `env =` values count as flags, being the same variables).
pub fn settings(flags: Settings, scope: Scope) -> Result<Settings, CliError> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    layered(file_settings(current(), scope)?, &env, flags, scope)
}

/// [`settings`] over a given file layer and environment.
fn layered(
    file: Settings,
    env: &dyn Fn(&str) -> Option<String>,
    flags: Settings,
    scope: Scope,
) -> Result<Settings, CliError> {
    let defaults = Settings {
        addr: Some("127.0.0.1:8080".into()),
        retriever: Some(RetrieverKind::Hybrid),
        ..Settings::default()
    };
    Ok(defaults
        .then(file)
        .then(Settings::from_env(env, scope)?)
        .then(flags))
}

/// The config file's layer: its top-level `model`, `store` and `retriever`, and for `serve` its
/// `[server]` table over them.
fn file_settings(file: &FileConfig, scope: Scope) -> Result<Settings, CliError> {
    let mut layer: Settings = match (&file.server, scope) {
        (Some(table), Scope::Serve) => toml::Value::Table(table.clone())
            .try_into()
            .map_err(|err| {
                let source = file
                    .source
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                anyhow!("invalid [server] table in the config file {source}: {err}")
            })
            .map_err(CliError::input)?,
        _ => Settings::default(),
    };
    layer.model = layer.model.or_else(|| file.model.clone());
    layer.store = layer.store.or_else(|| file.store.clone());
    layer.retriever = file.retriever;
    layer.budget = merged(file.budget.clone(), layer.budget);
    Ok(layer)
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

    #[test]
    fn defaults_then_file_then_env_then_flags() {
        let file = parse(
            "store = \"sqlite:/top.db\"\nretriever = \"dense\"\n[server]\n\
             addr = \"127.0.0.1:9000\"\nstore = \"sqlite:/f.db\"\nrate_limit = 5\n\
             timeout_secs = 7\ncors_origins = [\"http://file:3000\"]\n",
        )
        .unwrap();
        let serving = file_settings(&file, Scope::Serve).unwrap();
        let env = move |name: &str| match name {
            "PLANSMITH_STORE" => Some("sqlite:/env.db".into()),
            "PLANSMITH_RATE_LIMIT" => Some("9".into()),
            "PLANSMITH_TOKENS" => Some("t1:alice, t2:bob".into()),
            "PLANSMITH_CORS_ORIGINS" => Some("http://a:1, https://b".into()),
            _ => None,
        };
        let flags = Settings {
            rate_limit: Some(11),
            ..Settings::default()
        };
        let layer = layered(serving.clone(), &env, flags, Scope::Serve).unwrap();
        assert_eq!(
            layer.addr.as_deref(),
            Some("127.0.0.1:9000"),
            "file over default"
        );
        assert_eq!(
            layer.store.as_deref(),
            Some("sqlite:/env.db"),
            "env over file"
        );
        assert_eq!(layer.rate_limit, Some(11), "flag over env");
        assert_eq!(layer.timeout_secs, Some(7));
        assert_eq!(
            layer.retriever,
            Some(RetrieverKind::Dense),
            "file over default"
        );
        assert_eq!(
            layer.cors_origins.as_deref(),
            Some(&["http://a:1".to_owned(), "https://b".to_owned()][..]),
            "env over file"
        );
        let cors_flag = Settings {
            cors_origins: Some(vec!["http://flag".into()]),
            ..Settings::default()
        };
        let layer = layered(serving.clone(), &env, cors_flag, Scope::Serve).unwrap();
        assert_eq!(layer.cors_origins, Some(vec!["http://flag".to_owned()]));
        let none = |_: &str| None;
        assert_eq!(
            layered(serving.clone(), &none, Settings::default(), Scope::Serve)
                .unwrap()
                .cors_origins,
            Some(vec!["http://file:3000".to_owned()])
        );
        let tokens = layer.tokens.unwrap();
        assert_eq!(tokens.get("t2").map(String::as_str), Some("bob"));
        let defaults = layered(
            Settings::default(),
            &none,
            Settings::default(),
            Scope::Serve,
        )
        .unwrap();
        assert_eq!(defaults.addr.as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(defaults.retriever, Some(RetrieverKind::Hybrid));
        let bad = |name: &str| (name == "PLANSMITH_TOKENS").then(|| "nocolon".to_owned());
        assert!(layered(Settings::default(), &bad, Settings::default(), Scope::Serve).is_err());
        // Another command does not read serve's variables, a bad one included.
        assert!(
            layered(
                Settings::default(),
                &bad,
                Settings::default(),
                Scope::Command
            )
            .is_ok()
        );
        let bad = |name: &str| (name == "PLANSMITH_RETRIEVER").then(|| "grep".to_owned());
        assert!(layered(Settings::default(), &bad, Settings::default(), Scope::Serve).is_err());
        // Other commands read the top level only; `serve` reads [server] over it.
        let command = file_settings(&file, Scope::Command).unwrap();
        assert_eq!(command.store.as_deref(), Some("sqlite:/top.db"));
        assert_eq!(command.addr, None);
        let top = parse("store = \"sqlite:/top.db\"\n[server]\n").unwrap();
        assert_eq!(
            file_settings(&top, Scope::Serve).unwrap().store.as_deref(),
            Some("sqlite:/top.db")
        );
        let wrong = parse("[server]\nadr = \"x\"\n").unwrap();
        assert!(
            file_settings(&wrong, Scope::Serve).is_err(),
            "unknown [server] keys are named"
        );
    }
}
