//! Background investigation chosen by the user: `plan --investigate CMD` (a command), or the
//! config file's `[investigate]` (a command, or a read-only tool of an MCP server), which
//! `plan`, `serve` and `mcp` all use ([`configured`]).
//!
//! ```toml
//! [investigate]
//! mcp = "servers.json"      # the MCP servers file (as --mcp) with the tool's server
//! tool = "search_nodes"     # a tool that declares readOnlyHint: true
//! argument = "query"        # which argument gets the request (default: its one string argument)
//! lookup = "terms"          # "request" (default): the whole request, once; "terms": each name
//!                           # or address of the request (a keyword search)
//! arguments = { limit = 5 } # fixed other arguments
//! # or: command = "./search.sh"
//! ```
//!
//! A configured investigation runs for every request; `every_request = false` leaves it to the
//! requests that ask (`options.investigate`).
//!
//! The command form:
//!
//! The command runs under `sh -c` with the query on standard input (and in `PLANSMITH_QUERY`).
//! It prints its findings on standard output: a JSON list of `{"source", "text"}`, an object
//! `{"findings": [...]}`, or plain text (one finding whose source is the command). It must finish
//! within the budget (`--investigate-timeout`), or it is killed; a non-zero exit, a kill or
//! unreadable output is an investigation failure that planning survives (a warning). Like tool
//! commands, it does not inherit the provider API keys, and a key it prints anyway is redacted
//! before its findings reach the prompt.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plansmith_core::llm::BoxFuture;
use plansmith_core::secrets::{ProviderKeys, redact_all};
use plansmith_core::{Finding, Investigator, Planner};
use serde_json::Value;

use crate::CliError;

/// The investigator the config file's `[investigate]` names, if any, and whether it runs for
/// every request. An MCP tool's server is connected here (call it inside the runtime that
/// plans): a server that does not answer, a missing tool or one that is not read-only is an
/// input error naming it.
pub async fn configured() -> Result<Option<(Arc<dyn Investigator>, bool)>, CliError> {
    let Some(config) = crate::config::current().investigate.clone() else {
        return Ok(None);
    };
    let bad = |message: String| CliError::input(anyhow::anyhow!("[investigate]: {message}"));
    let investigator: Arc<dyn Investigator> = match (&config.command, &config.mcp, &config.tool) {
        (Some(command), None, None) => Arc::new(CommandInvestigator::new(command.clone())),
        (None, Some(path), Some(tool)) => {
            let servers = plansmith_mcp::ServersConfig::load(path).map_err(CliError::input)?;
            let imported =
                plansmith_mcp::McpTools::connect(&servers, crate::catalog::client_options()).await;
            if let Some(problem) = imported.problems.first()
                && imported.catalog.tool(tool).is_none()
            {
                return Err(bad(problem.to_string()));
            }
            let fixed = config.arguments.clone().into_iter().collect();
            let lookup = match config.lookup {
                crate::config::LookupKind::Request => plansmith_mcp::Lookup::Request,
                crate::config::LookupKind::Terms => plansmith_mcp::Lookup::Terms,
            };
            Arc::new(
                plansmith_mcp::McpInvestigator::new(
                    Arc::new(imported.tools),
                    &imported.catalog,
                    tool,
                    config.argument.as_deref(),
                    fixed,
                    lookup,
                )
                .map_err(|err| bad(err.to_string()))?,
            )
        }
        (None, Some(_), None) => {
            return Err(bad("`mcp` needs the `tool` that investigates".into()));
        }
        (None, None, Some(_)) => {
            return Err(bad(
                "`tool` needs `mcp`, the servers file with its server".into()
            ));
        }
        (None, None, None) => return Err(bad("set `command`, or `mcp` and `tool`".into())),
        _ => {
            return Err(bad(
                "set either `command` or `mcp` and `tool`, not both".into()
            ));
        }
    };
    Ok(Some((investigator, config.every_request)))
}

/// `planner` with the configured investigator (see [`configured`]), when there is one.
pub async fn with_configured(planner: Planner) -> Result<Planner, CliError> {
    Ok(match configured().await? {
        Some((investigator, every_request)) => {
            let planner = planner.with_investigator(investigator);
            if every_request {
                planner.investigating_every_request()
            } else {
                planner
            }
        }
        None => planner,
    })
}

/// Runs one shell command per investigation.
#[derive(Debug)]
pub struct CommandInvestigator {
    command: String,
    keys: ProviderKeys,
}

impl CommandInvestigator {
    /// Investigates with `command` (a shell command line), withholding the configured
    /// provider keys from it.
    pub fn new(command: impl Into<String>) -> CommandInvestigator {
        CommandInvestigator {
            command: command.into(),
            keys: crate::config::provider_keys(),
        }
    }

    fn run(&self, query: &str, budget: Duration) -> Result<Vec<Finding>, String> {
        let mut command = Command::new("sh");
        for name in self.keys.variables() {
            command.env_remove(name);
        }
        let mut child = command
            .arg("-c")
            .arg(&self.command)
            .env("PLANSMITH_QUERY", query)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| format!("cannot start `{}`: {err}", self.command))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A command that does not read its input closes the pipe: not an error.
            let _ = stdin.write_all(query.as_bytes());
        }
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let mut err = String::new();
            if let Some(pipe) = stdout.as_mut() {
                let _ = pipe.read_to_string(&mut out);
            }
            if let Some(pipe) = stderr.as_mut() {
                let _ = pipe.read_to_string(&mut err);
            }
            (out, err)
        });
        let deadline = Instant::now() + budget;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "`{}` did not finish within {} ms and was stopped",
                        self.command,
                        budget.as_millis()
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(err) => return Err(format!("waiting for `{}`: {err}", self.command)),
            }
        };
        let (out, err) = reader.join().unwrap_or_default();
        if !status.success() {
            let err = err.trim();
            return Err(format!(
                "`{}` failed ({status}){}",
                self.command,
                if err.is_empty() {
                    String::new()
                } else {
                    format!(": {}", err.chars().take(300).collect::<String>())
                }
            ));
        }
        let secrets = self.keys.values();
        let findings = parse_findings(&out, &self.command)?;
        Ok(findings
            .into_iter()
            .map(|finding| Finding {
                source: redact_all(&finding.source, &secrets),
                text: redact_all(&finding.text, &secrets),
            })
            .collect())
    }
}

impl Investigator for CommandInvestigator {
    fn name(&self) -> String {
        format!("command:{}", self.command)
    }

    fn investigate<'a>(
        &'a self,
        query: &'a str,
        budget: Duration,
    ) -> BoxFuture<'a, Result<Vec<Finding>, String>> {
        Box::pin(async move { self.run(query, budget) })
    }
}

/// A command's output as findings (see the module docs for the accepted forms).
pub fn parse_findings(out: &str, command: &str) -> Result<Vec<Finding>, String> {
    let text = out.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let list = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => items,
        Ok(Value::Object(mut map)) => match map.remove("findings") {
            Some(Value::Array(items)) => items,
            _ => return Err("a JSON object without a `findings` list".into()),
        },
        _ => {
            return Ok(vec![Finding {
                source: command.to_owned(),
                text: text.to_owned(),
            }]);
        }
    };
    list.into_iter()
        .enumerate()
        .map(|(idx, item)| match item {
            Value::String(text) => Ok(Finding {
                source: command.to_owned(),
                text,
            }),
            Value::Object(map) => {
                let text = map
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("finding {idx} has no `text`"))?;
                let source = map.get("source").and_then(Value::as_str).unwrap_or(command);
                Ok(Finding {
                    source: source.to_owned(),
                    text: text.to_owned(),
                })
            }
            _ => Err(format!("finding {idx} is neither text nor an object")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_forms() {
        let list = parse_findings(r#"[{"source": "web", "text": "a"}, "b"]"#, "cmd").unwrap();
        assert_eq!(list[0].source, "web");
        assert_eq!(
            (list[1].source.as_str(), list[1].text.as_str()),
            ("cmd", "b")
        );
        let object = parse_findings(r#"{"findings": [{"text": "c"}]}"#, "cmd").unwrap();
        assert_eq!(object[0].text, "c");
        let plain = parse_findings("EV sales rose 20 %.\n", "cmd").unwrap();
        assert_eq!(plain[0].text, "EV sales rose 20 %.");
        assert!(parse_findings("", "cmd").unwrap().is_empty());
        assert!(parse_findings(r#"[{"source": "x"}]"#, "cmd").is_err());
        assert!(parse_findings(r#"{"items": []}"#, "cmd").is_err());
    }

    #[test]
    fn a_command_that_hangs_is_stopped_at_the_budget() {
        let started = Instant::now();
        let err = CommandInvestigator::new("sleep 5")
            .run("q", Duration::from_millis(200))
            .unwrap_err();
        assert!(err.contains("did not finish within 200 ms"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(4));
        let err = CommandInvestigator::new("echo down >&2; exit 3")
            .run("q", Duration::from_secs(5))
            .unwrap_err();
        assert!(err.contains("down"), "{err}");
        let found = CommandInvestigator::new("cat")
            .run("what is the weather", Duration::from_secs(5))
            .unwrap();
        assert_eq!(found[0].text, "what is the weather");
    }
}
