//! Background investigation (deer-flow's background investigator, Spring AI Alibaba
//! deepresearch): an optional stage before planning that runs a read-only tool — a web search,
//! a retrieval index, an MCP tool — with the query, and puts what it found into the planning
//! prompt.
//!
//! The tool is behind one small trait, [`Investigator`]; this crate does no I/O itself. The
//! planner calls it when [`crate::PlanOptions::investigate`] is on and **enforces the time
//! budget itself** ([`with_deadline`]): an implementation that hangs cannot hold planning up.
//! The budget is also handed to the implementation so it can stop its own work in time (kill a
//! child process, cancel a request). A failure, a timeout or a missing investigator is never an
//! error of the planning call: planning goes on without findings and says so with an
//! `investigation_failed` warning. What was found, after trimming to
//! [`crate::PlanOptions::investigate_max_chars`], is recorded in
//! [`crate::Diagnostics::investigation`].

use std::time::Duration;

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::llm::BoxFuture;

/// One thing the investigation found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Where it came from: a URL, a document id, a tool name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// A title, if the source has one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// The text found (a snippet, a summary).
    pub content: String,
}

impl Finding {
    /// A finding with only content.
    pub fn new(content: impl Into<String>) -> Finding {
        Finding {
            source: String::new(),
            title: String::new(),
            content: content.into(),
        }
    }

    /// One line for the prompt: `[source] title: content`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.source.is_empty() {
            out.push_str(&format!("[{}] ", self.source));
        }
        if !self.title.is_empty() {
            out.push_str(&self.title);
            out.push_str(": ");
        }
        out.push_str(self.content.trim());
        out
    }
}

/// Why an investigation gave nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvestigateError {
    /// The tool ran and failed (it is down, it exited with an error, its output was unreadable).
    #[error("{0}")]
    Failed(String),
    /// The tool did not answer within the budget.
    #[error("no answer within {} ms", .0.as_millis())]
    TimedOut(Duration),
}

/// A read-only tool run before planning. Implementations do the I/O (a child process in the
/// CLI, an MCP tool call in `plansmith-mcp`); they should give up by themselves at `budget`,
/// but the planner does not rely on it.
pub trait Investigator: Send + Sync {
    /// A short name for the diagnostics (`command: search.sh`, `mcp: tavily/search`).
    fn name(&self) -> String;

    /// Looks `query` up; `budget` is the time the planner will wait.
    fn investigate<'a>(
        &'a self,
        query: &'a str,
        budget: Duration,
    ) -> BoxFuture<'a, Result<Vec<Finding>, InvestigateError>>;
}

/// What the investigation stage did, in [`crate::Diagnostics::investigation`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Investigation {
    /// The investigator's name (empty when none was configured).
    pub investigator: String,
    /// The findings as put into the prompt (after trimming).
    pub findings: Vec<Finding>,
    /// How many findings the tool returned before trimming.
    pub n_returned: usize,
    /// Some findings were cut or left out to fit the size budget.
    pub trimmed: bool,
    /// Why there are no findings, when the tool failed or timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Time the stage took.
    pub elapsed_ms: u64,
}

/// Trims `findings` to at most `max_chars` characters of content in all, in order: a finding
/// that does not fit whole is cut at a word boundary (when at least 40 characters are left for
/// it) and the rest are left out. Empty findings are dropped. Returns the kept findings and
/// whether anything was cut or left out.
pub fn trim_findings(findings: Vec<Finding>, max_chars: usize) -> (Vec<Finding>, bool) {
    let mut left = max_chars;
    let mut kept = Vec::new();
    let mut trimmed = false;
    for mut finding in findings {
        let content = finding
            .content
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if content.is_empty() {
            continue;
        }
        let n = content.chars().count();
        if n <= left {
            left -= n;
            finding.content = content;
            kept.push(finding);
            continue;
        }
        trimmed = true;
        if left >= 40 {
            finding.content = crate::template::short_description(&content, left - 1);
            kept.push(finding);
        }
        break;
    }
    (kept, trimmed)
}

/// Runs `future`, giving up after `budget` with [`InvestigateError::TimedOut`]. The timer is a
/// helper thread (this crate has no async runtime), which ends as soon as `future` does.
pub async fn with_deadline<T>(
    future: impl std::future::Future<Output = Result<T, InvestigateError>>,
    budget: Duration,
) -> Result<T, InvestigateError> {
    let (fire, fired) = futures::channel::oneshot::channel::<()>();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let timer = std::thread::Builder::new()
        .name("plansmith-deadline".into())
        .spawn(move || {
            // Woken early (disconnected) when the caller drops `stop`: the future finished.
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(budget) {
                let _ = fire.send(());
            }
        });
    if timer.is_err() {
        // No thread for the timer: run without a deadline rather than not at all.
        return future.await;
    }
    let future = std::pin::pin!(future.fuse());
    let fired = fired.fuse();
    let result = match futures::future::select(future, fired).await {
        futures::future::Either::Left((result, _)) => result,
        futures::future::Either::Right(_) => Err(InvestigateError::TimedOut(budget)),
    };
    drop(stop);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimming_keeps_order_and_cuts_at_the_budget() {
        let findings = vec![
            Finding::new("a".repeat(50)),
            Finding::new("   "),
            Finding::new("word ".repeat(40)),
            Finding::new("never shown"),
        ];
        let (kept, trimmed) = trim_findings(findings, 120);
        assert!(trimmed);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].content.len(), 50);
        assert!(kept[1].content.ends_with('…') && kept[1].content.chars().count() <= 70);
        let (kept, trimmed) = trim_findings(vec![Finding::new("short")], 120);
        assert!(!trimmed && kept.len() == 1);
    }

    #[test]
    fn the_deadline_ends_a_future_that_never_finishes() {
        let started = std::time::Instant::now();
        let result = futures::executor::block_on(with_deadline(
            futures::future::pending::<Result<(), InvestigateError>>(),
            Duration::from_millis(50),
        ));
        assert_eq!(
            result,
            Err(InvestigateError::TimedOut(Duration::from_millis(50)))
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        let quick = futures::executor::block_on(with_deadline(
            async { Ok::<_, InvestigateError>(7) },
            Duration::from_secs(30),
        ));
        assert_eq!(quick, Ok(7));
    }
}
