//! The server configuration file, in the common `mcpServers` JSON form (Claude Desktop, Cursor,
//! VS Code and most agent frameworks read the same shape):
//!
//! ```json
//! {"mcpServers": {
//!     "time":  {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"], "env": {"TZ": "UTC"}},
//!     "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
//!     "remote": {"url": "http://127.0.0.1:8080/mcp", "headers": {"Authorization": "Bearer …"}}
//! }}
//! ```
//!
//! A server is either spawned (`command`, optional `args`, `env`, `cwd`) and spoken to over
//! stdio, or reached over streamable HTTP (`url`, optional `headers`). `disabled: true` skips a
//! server. Unknown keys are ignored (other clients add their own, e.g. `type`, `autoApprove`).
//!
//! Two keys of plansmith's own bound a server's tool calls (seconds, any positive number):
//! `call_timeout_secs`, how long a call may go with neither its answer nor a progress
//! notification (default [`ClientOptions::call_timeout`](crate::ClientOptions), 60 s: a tool
//! that reports progress may run longer), and `max_call_secs`, the most a call may take
//! whatever it reports (default [`ClientOptions::max_call`](crate::ClientOptions), one hour).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::McpError;

/// How to reach one MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// Spawn `command args…` and speak JSON-RPC over its stdin / stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables (added to ours, which lack the provider key variables).
        env: BTreeMap<String, String>,
        /// Working directory, if not ours.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP at this URL.
    Http {
        /// The endpoint (`http://host:port/mcp`).
        url: String,
        /// Extra headers sent with every request (e.g. `Authorization`).
        headers: BTreeMap<String, String>,
    },
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// The server's name (the key in `mcpServers`); also the namespace of its clashing tools.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Longest a tool call may go without an answer or a progress notification
    /// (`call_timeout_secs`); `None`: the client's default.
    pub call_timeout: Option<Duration>,
    /// Longest a tool call may take in all (`max_call_secs`); `None`: the client's default.
    pub max_call: Option<Duration>,
}

/// The servers of a configuration file, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServersConfig {
    /// The enabled servers.
    pub servers: Vec<ServerSpec>,
}

#[derive(Debug, Deserialize)]
struct RawServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    disabled: bool,
    call_timeout_secs: Option<f64>,
    max_call_secs: Option<f64>,
}

impl ServersConfig {
    /// Reads a configuration file.
    pub fn load(path: &Path) -> Result<ServersConfig, McpError> {
        let text = std::fs::read_to_string(path).map_err(|err| McpError::Config {
            source_name: path.display().to_string(),
            message: format!("cannot read it: {err}"),
        })?;
        let document: Value = serde_json::from_str(&text).map_err(|err| McpError::Config {
            source_name: path.display().to_string(),
            message: format!("not valid JSON: {err}"),
        })?;
        ServersConfig::from_json(&document).map_err(|err| match err {
            McpError::Config { message, .. } => McpError::Config {
                source_name: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// Reads the `{"mcpServers": {name: {...}}}` document (a bare `{name: {...}}` map is
    /// accepted too). Every problem names the server.
    pub fn from_json(document: &Value) -> Result<ServersConfig, McpError> {
        let config_error = |message: String| McpError::Config {
            source_name: "servers config".into(),
            message,
        };
        let map = match document
            .get("mcpServers")
            .or_else(|| document.get("servers"))
        {
            Some(Value::Object(map)) => map,
            Some(other) => {
                return Err(config_error(format!(
                    "`mcpServers` must be an object of servers, got {other}"
                )));
            }
            None => match document {
                Value::Object(map) if map.values().all(Value::is_object) => map,
                _ => {
                    return Err(config_error(
                        "expected {\"mcpServers\": {\"name\": {\"command\": …} | {\"url\": …}}}"
                            .into(),
                    ));
                }
            },
        };
        let mut servers = Vec::new();
        for (name, entry) in map {
            if name.trim().is_empty() {
                return Err(config_error("a server has an empty name".into()));
            }
            let raw: RawServer = serde_json::from_value(entry.clone())
                .map_err(|err| config_error(format!("server `{name}`: {err}")))?;
            if raw.disabled {
                continue;
            }
            let transport = match (raw.command, raw.url) {
                (Some(command), None) if !command.trim().is_empty() => Transport::Stdio {
                    command,
                    args: raw.args,
                    env: raw.env,
                    cwd: raw.cwd,
                },
                (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
                    Transport::Http {
                        url,
                        headers: raw.headers,
                    }
                }
                (None, Some(url)) => {
                    return Err(config_error(format!(
                        "server `{name}`: url `{url}` is not http:// or https://"
                    )));
                }
                (Some(_), Some(_)) => {
                    return Err(config_error(format!(
                        "server `{name}` has both `command` and `url`; give one"
                    )));
                }
                _ => {
                    return Err(config_error(format!(
                        "server `{name}` needs a non-empty `command` (stdio) or a `url` (streamable HTTP)"
                    )));
                }
            };
            let seconds = |key: &str, value: Option<f64>| {
                match value {
                None => Ok(None),
                Some(secs) => Duration::try_from_secs_f64(secs)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .map(Some)
                    .ok_or_else(|| {
                        config_error(format!(
                            "server `{name}`: `{key}` must be a positive number of seconds, got {secs}"
                        ))
                    }),
            }
            };
            servers.push(ServerSpec {
                name: name.clone(),
                transport,
                call_timeout: seconds("call_timeout_secs", raw.call_timeout_secs)?,
                max_call: seconds("max_call_secs", raw.max_call_secs)?,
            });
        }
        Ok(ServersConfig { servers })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_stdio_and_http_servers_in_order() {
        let config = ServersConfig::from_json(&json!({"mcpServers": {
            "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"], "env": {"TZ": "UTC"}},
            "off": {"command": "x", "disabled": true},
            "remote": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer t"}, "type": "http"}
        }}))
        .unwrap();
        assert_eq!(config.servers.len(), 2);
        assert_eq!(config.servers[0].name, "time");
        assert_eq!(config.servers[0].call_timeout, None);
        assert_eq!(config.servers[0].max_call, None);
        let Transport::Stdio { args, env, .. } = &config.servers[0].transport else {
            panic!("{config:?}")
        };
        assert_eq!(args, &["--local-timezone", "UTC"]);
        assert_eq!(env.get("TZ").map(String::as_str), Some("UTC"));
        assert!(matches!(
            &config.servers[1].transport,
            Transport::Http { url, headers } if url == "http://127.0.0.1:1/mcp" && headers.len() == 1
        ));
    }

    #[test]
    fn call_bounds_per_server() {
        let config = ServersConfig::from_json(&json!({"mcpServers": {
            "slow": {"command": "x", "call_timeout_secs": 300, "max_call_secs": 0.5},
        }}))
        .unwrap();
        assert_eq!(
            config.servers[0].call_timeout,
            Some(Duration::from_secs(300))
        );
        assert_eq!(config.servers[0].max_call, Some(Duration::from_millis(500)));
    }

    #[test]
    fn errors_name_the_server() {
        for (doc, needle) in [
            (
                json!({"mcpServers": {"a": {"args": []}}}),
                "server `a` needs",
            ),
            (
                json!({"mcpServers": {"b": {"command": "x", "url": "http://h/"}}}),
                "server `b` has both",
            ),
            (
                json!({"mcpServers": {"c": {"url": "ftp://h/"}}}),
                "server `c`: url",
            ),
            (json!({"mcpServers": {"d": {"command": 3}}}), "server `d`:"),
            (
                json!({"mcpServers": {"e": {"command": "x", "call_timeout_secs": 0}}}),
                "server `e`: `call_timeout_secs` must be a positive number of seconds, got 0",
            ),
            (
                json!({"mcpServers": {"f": {"command": "x", "max_call_secs": -1}}}),
                "server `f`: `max_call_secs` must be",
            ),
            (
                json!({"mcpServers": {"g": {"command": "x", "max_call_secs": "1h"}}}),
                "server `g`:",
            ),
            (json!({"mcpServers": []}), "must be an object"),
            (json!([1]), "expected"),
        ] {
            let err = ServersConfig::from_json(&doc).unwrap_err().to_string();
            assert!(err.contains(needle), "{err} should contain {needle}");
        }
    }
}
