//! `plan --investigate CMD`: a shell command as the background investigator.
//!
//! The command runs under `sh -c`, gets the query on stdin and as `$1` (and in
//! `PLANSMITH_QUERY`), and prints its findings on stdout: either JSON — a list of findings
//! `[{"source", "title", "content"}]` (or of plain strings), or `{"findings": [...]}` — or plain
//! text, where each paragraph (blank-line separated) is one finding. A non-zero exit, unreadable
//! output or the budget running out is an investigation failure; the planner then plans without
//! findings and says so. The child is killed when the budget runs out.

use std::process::Stdio;
use std::time::Duration;

use plansmith_core::llm::BoxFuture;
use plansmith_core::{Finding, InvestigateError, Investigator};
use serde_json::Value;
use tokio::io::AsyncWriteExt;

/// Longest output read from the command.
const OUTPUT_MAX: usize = 1 << 20;

/// Runs a shell command per investigation.
#[derive(Debug, Clone)]
pub struct CommandInvestigator {
    command: String,
}

impl CommandInvestigator {
    /// An investigator running `command` with `sh -c`.
    pub fn new(command: impl Into<String>) -> CommandInvestigator {
        CommandInvestigator {
            command: command.into(),
        }
    }

    async fn run(&self, query: &str, budget: Duration) -> Result<Vec<Finding>, InvestigateError> {
        let failed = |what: String| InvestigateError::Failed(what);
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .arg("plansmith-investigate")
            .arg(query)
            .env("PLANSMITH_QUERY", query)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| failed(format!("cannot start `{}`: {err}", self.command)))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A command that does not read stdin closes it early: not an error.
            let _ = stdin.write_all(query.as_bytes()).await;
            let _ = stdin.shutdown().await;
        }
        let output = match tokio::time::timeout(budget, child.wait_with_output()).await {
            Ok(output) => output.map_err(|err| failed(format!("`{}`: {err}", self.command)))?,
            // Dropping the future kills the child (kill_on_drop).
            Err(_) => return Err(InvestigateError::TimedOut(budget)),
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: String = stderr
                .trim()
                .chars()
                .rev()
                .take(300)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Err(failed(format!(
                "`{}` exited with {}{}",
                self.command,
                output.status,
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(": {tail}")
                }
            )));
        }
        let stdout = &output.stdout[..output.stdout.len().min(OUTPUT_MAX)];
        parse_findings(&String::from_utf8_lossy(stdout))
    }
}

impl Investigator for CommandInvestigator {
    fn name(&self) -> String {
        format!("command: {}", self.command)
    }

    fn investigate<'a>(
        &'a self,
        query: &'a str,
        budget: Duration,
    ) -> BoxFuture<'a, Result<Vec<Finding>, InvestigateError>> {
        Box::pin(self.run(query, budget))
    }
}

/// Findings from a command's output: JSON (a list, or `{"findings": [...]}`) when it parses as
/// JSON, else paragraphs (a paragraph may well start with `[source]`).
pub fn parse_findings(text: &str) -> Result<Vec<Finding>, InvestigateError> {
    let trimmed = text.trim();
    let Ok(value) = serde_json::from_str::<Value>(trimmed) else {
        // Plain text names its sources itself, if at all; the command is in the diagnostics.
        return Ok(trimmed
            .split("\n\n")
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(Finding::new)
            .collect());
    };
    let items = match value {
        Value::Array(items) => items,
        Value::Object(mut map) => match map.remove("findings") {
            Some(Value::Array(items)) => items,
            _ => {
                return Err(InvestigateError::Failed(
                    "a JSON object output needs a `findings` list".into(),
                ));
            }
        },
        other => vec![Value::String(other.to_string())],
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::String(content) => Ok(Finding::new(content)),
            other => serde_json::from_value::<Finding>(other)
                .map_err(|err| InvestigateError::Failed(format!("a finding is malformed: {err}"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(command: &str, budget_ms: u64) -> Result<Vec<Finding>, InvestigateError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(
            CommandInvestigator::new(command)
                .investigate("EV market 2026", Duration::from_millis(budget_ms)),
        )
    }

    #[test]
    fn the_query_arrives_on_stdin_and_as_an_argument() {
        let findings = run(
            r#"read -r q; printf 'stdin: %s\n\narg: %s\n' "$q" "$1""#,
            10_000,
        )
        .unwrap();
        let contents: Vec<&str> = findings.iter().map(|f| f.content.as_str()).collect();
        assert_eq!(contents, ["stdin: EV market 2026", "arg: EV market 2026"]);
        assert!(findings[0].source.is_empty());
    }

    #[test]
    fn json_output_in_both_forms() {
        let findings = run(
            r#"echo '{"findings": [{"source": "s", "title": "t", "content": "c"}, "plain"]}'"#,
            10_000,
        )
        .unwrap();
        assert_eq!(findings[0].source, "s");
        assert_eq!(findings[1].content, "plain");
        let err = run(r#"echo '{"results": []}'"#, 10_000).unwrap_err();
        assert!(err.to_string().contains("`findings` list"), "{err}");
        let err = run(r#"echo '[{"title": "no content"}]'"#, 10_000).unwrap_err();
        assert!(err.to_string().contains("malformed"), "{err}");
        // Text that only starts like JSON is text.
        let findings = run("printf '[src] a\\n\\n[src] b'", 10_000).unwrap();
        assert_eq!(findings.len(), 2, "{findings:?}");
        assert_eq!(findings[1].content, "[src] b");
    }

    #[test]
    fn a_failing_command_and_a_slow_one_are_errors() {
        let err = run("echo down >&2; exit 7", 10_000).unwrap_err();
        assert!(
            err.to_string().contains("exit status: 7") && err.to_string().contains("down"),
            "{err}"
        );
        let started = std::time::Instant::now();
        let err = run("sleep 30", 200).unwrap_err();
        assert_eq!(err, InvestigateError::TimedOut(Duration::from_millis(200)));
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
