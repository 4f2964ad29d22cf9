//! Background investigation (deer-flow's background investigator, Spring AI Alibaba
//! deepresearch): before planning, read-only tools are run with the query, and what they find is
//! trimmed and put into the planning context, so the plan starts from facts instead of guesses.
//!
//! The planner calls one [`Investigator`] when [`PlanOptions::investigate`] is on. The
//! investigator owns its I/O (a command, an MCP search tool, a retrieval index) and must give up
//! by the budget it is handed; the planner still measures the time and drops an answer that came
//! late. A failure, a late answer or no investigator at all is a warning
//! ([`Code::InvestigationFailed`]) and planning goes on without findings: investigation never
//! makes a plan fail. What was found, from where and how long it took is in
//! [`Diagnostics::investigation`](crate::Diagnostics).
//!
//! [`PlanOptions::investigate`]: crate::PlanOptions
//! [`Code::InvestigationFailed`]: crate::Code

use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::llm::BoxFuture;

/// One piece of background information.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Finding {
    /// Where it came from (a tool name, a URL, a document id).
    pub source: String,
    /// What it says.
    pub text: String,
}

/// Runs read-only lookups with the query before planning.
pub trait Investigator: Send + Sync {
    /// A name for diagnostics (e.g. `command:./search.sh`, `mcp:search/web_search`).
    fn name(&self) -> String;

    /// Looks `query` up; must answer (or give up with an error) within `budget`.
    fn investigate<'a>(
        &'a self,
        query: &'a str,
        budget: Duration,
    ) -> BoxFuture<'a, Result<Vec<Finding>, String>>;
}

/// What background investigation did, for the diagnostics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Investigation {
    /// The investigator's name (empty when none was configured).
    pub investigator: String,
    /// The findings as they went into the prompt (after trimming).
    pub findings: Vec<Finding>,
    /// Characters cut to stay within the budget.
    pub trimmed_chars: usize,
    /// Time taken, in milliseconds.
    pub elapsed_ms: u64,
    /// Why there are no findings, when investigation failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Keeps findings in order until `max_chars` characters of text are used; the finding that
/// crosses the limit is cut (on a character boundary, with `…`), later ones are dropped, and
/// empty ones are skipped. Returns the kept findings and how many characters were cut.
pub fn trim(findings: Vec<Finding>, max_chars: usize) -> (Vec<Finding>, usize) {
    let mut left = max_chars;
    let mut cut = 0usize;
    let mut kept = Vec::new();
    for finding in findings {
        let text = finding.text.trim();
        let n_chars = text.chars().count();
        if n_chars == 0 {
            continue;
        }
        if left == 0 {
            cut += n_chars;
            continue;
        }
        if n_chars <= left {
            left -= n_chars;
            kept.push(Finding {
                source: finding.source,
                text: text.to_owned(),
            });
        } else {
            let mut short: String = text.chars().take(left).collect();
            short.push('…');
            cut += n_chars - left;
            left = 0;
            kept.push(Finding {
                source: finding.source,
                text: short,
            });
        }
    }
    (kept, cut)
}

/// An [`Investigator`] with fixed answers, in order, for tests (the last one repeats).
#[derive(Debug)]
pub struct ScriptedInvestigator {
    answers: Vec<Result<Vec<Finding>, String>>,
    next: Mutex<usize>,
    queries: Mutex<Vec<String>>,
}

impl ScriptedInvestigator {
    /// Answers with `answers`, one per call.
    pub fn new(answers: Vec<Result<Vec<Finding>, String>>) -> ScriptedInvestigator {
        ScriptedInvestigator {
            answers,
            next: Mutex::new(0),
            queries: Mutex::new(Vec::new()),
        }
    }

    /// The queries it was asked.
    pub fn queries(&self) -> Vec<String> {
        self.queries.lock().map(|q| q.clone()).unwrap_or_default()
    }
}

impl Investigator for ScriptedInvestigator {
    fn name(&self) -> String {
        "scripted".into()
    }

    fn investigate<'a>(
        &'a self,
        query: &'a str,
        _budget: Duration,
    ) -> BoxFuture<'a, Result<Vec<Finding>, String>> {
        if let Ok(mut queries) = self.queries.lock() {
            queries.push(query.to_owned());
        }
        let idx = match self.next.lock() {
            Ok(mut next) => {
                let idx = *next;
                *next += 1;
                idx
            }
            Err(_) => 0,
        };
        let answer = self
            .answers
            .get(idx)
            .or(self.answers.last())
            .cloned()
            .unwrap_or_else(|| Err("no scripted answer".into()));
        Box::pin(async move { answer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(text: &str) -> Finding {
        Finding {
            source: "s".into(),
            text: text.into(),
        }
    }

    #[test]
    fn trimming_keeps_order_cuts_the_crossing_one_and_drops_the_rest() {
        let (kept, cut) = trim(
            vec![
                finding("abcd"),
                finding("  "),
                finding("éfghij"),
                finding("xyz"),
            ],
            7,
        );
        assert_eq!(
            kept.iter().map(|f| f.text.as_str()).collect::<Vec<_>>(),
            ["abcd", "éfg…"]
        );
        assert_eq!(cut, 3 + 3);
        let (kept, cut) = trim(vec![finding("ab")], 10);
        assert_eq!((kept.len(), cut), (1, 0));
    }
}
