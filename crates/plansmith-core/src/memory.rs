//! Conversation memory: earlier planning turns of a conversation as bounded history, so a
//! follow-up like "now do the same for Berlin" can be planned.
//!
//! [`history`] keeps the newest turns in full — each as the user's query and the plan that
//! answered it, in the flat form the prompts ask for — within a turn count and a token budget
//! (estimated as characters / 4), and folds every older turn into **one** summary message: a
//! plain, deterministic line per turn (query → title and actions), cut to fit. No model call.
//! The store gives the turns of a conversation (`PlanStore::conversation_plans` in
//! `plansmith-store`); [`Turn::from_plan`] makes a turn of a stored plan.

use serde::{Deserialize, Serialize};

use crate::llm::Message;
use crate::plan::{Action, Plan};
use crate::text::short_description;

/// One earlier planning turn: what was asked and the plan that answered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Turn {
    /// The user's request.
    pub query: String,
    /// The plan that answered it, as the model would have written it (flat JSON), or any text.
    pub plan: String,
    /// One line for the summary of older turns (title and actions); derived from `plan` when
    /// empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
}

impl Turn {
    /// The turn a plan answered: its goal, the plan in flat form, a one-line summary.
    pub fn from_plan(plan: &Plan) -> Turn {
        Turn {
            query: plan.goal.clone(),
            plan: crate::plan::flat_plan_json(plan),
            summary: plan_summary(plan),
        }
    }

    fn summary_line(&self) -> String {
        let answer = if self.summary.trim().is_empty() {
            short_description(&self.plan, 120)
        } else {
            short_description(&self.summary, 160)
        };
        format!("\"{}\" → {answer}", short_description(&self.query, 120))
    }
}

/// `title: tool get_weather(city=Paris); reply` — what a plan did, in one line.
pub fn plan_summary(plan: &Plan) -> String {
    let actions: Vec<String> = plan
        .steps
        .iter()
        .map(|step| match &step.action {
            Action::Tool { name, arguments } => {
                let args: Vec<String> = arguments
                    .iter()
                    .map(|(k, v)| match v.as_str() {
                        Some(text) => format!("{k}={}", short_description(text, 30)),
                        None => format!("{k}={}", short_description(&v.to_string(), 30)),
                    })
                    .collect();
                format!("tool {name}({})", args.join(", "))
            }
            Action::Agent { agent, query } => {
                format!("agent {agent}: {}", short_description(query, 40))
            }
            Action::Task { kind, .. } => format!("{kind}: {}", short_description(&step.title, 40)),
            Action::Reply { .. } => "reply".to_owned(),
        })
        .collect();
    let title = if plan.title.is_empty() {
        "plan"
    } else {
        &plan.title
    };
    format!("{title}: {}", actions.join("; "))
}

/// What [`history`] kept, in [`crate::Diagnostics::memory`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryReport {
    /// Turns shown in full.
    pub turns_kept: usize,
    /// Older turns folded into the summary message.
    pub turns_summarised: usize,
    /// Estimated tokens of the history messages.
    pub tokens: usize,
}

/// Estimated tokens of a text: characters / 4, rounded up.
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// The history messages for `turns` (oldest first): the newest turns in full — at most
/// `max_turns`, within `max_tokens` — each as a user message (the query) and an assistant
/// message (the plan); every older turn folded into one leading summary message, cut so the
/// whole stays within `max_tokens` (the summary is kept to at most a quarter of the budget when
/// turns are shown in full, so recent turns win). The newest turn is always kept in some form.
pub fn history(
    turns: &[Turn],
    max_turns: usize,
    max_tokens: usize,
) -> (Vec<Message>, MemoryReport) {
    let mut report = MemoryReport::default();
    if turns.is_empty() {
        return (Vec::new(), report);
    }
    let summary_reserve = max_tokens / 4;
    let mut used = 0usize;
    let mut kept: Vec<&Turn> = Vec::new();
    for turn in turns.iter().rev() {
        if kept.len() >= max_turns {
            break;
        }
        let cost = estimate_tokens(&turn.query) + estimate_tokens(&turn.plan);
        let older_left = turns.len() - kept.len() - 1 > 0;
        let limit = if older_left {
            max_tokens.saturating_sub(summary_reserve)
        } else {
            max_tokens
        };
        if used + cost > limit {
            break;
        }
        used += cost;
        kept.push(turn);
    }
    kept.reverse();
    let older = &turns[..turns.len() - kept.len()];
    let mut messages = Vec::new();
    if !older.is_empty() {
        let budget_chars = max_tokens.saturating_sub(used).max(40) * 4;
        let mut text = String::from("Earlier in this conversation (summarised):");
        for (idx, turn) in older.iter().enumerate() {
            text.push_str(&format!("\n{}. {}", idx + 1, turn.summary_line()));
        }
        if text.chars().count() > budget_chars {
            // The newest of the older turns matter most: cut from the front.
            let skip = text.chars().count() - budget_chars + 1;
            let tail: String = text.chars().skip(skip).collect();
            text = format!("Earlier in this conversation (summarised): …{tail}");
        }
        used += estimate_tokens(&text);
        messages.push(Message::user(text));
        messages.push(Message::assistant("Noted."));
    }
    for turn in &kept {
        messages.push(Message::user(turn.query.clone()));
        messages.push(Message::assistant(turn.plan.clone()));
    }
    report.turns_kept = kept.len();
    report.turns_summarised = older.len();
    report.tokens = used;
    (messages, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(n: usize) -> Turn {
        Turn {
            query: format!("query {n}"),
            plan: format!(
                "{{\"title\": \"plan {n}\", \"steps\": [{}]}}",
                "x".repeat(200)
            ),
            summary: format!("plan {n}: tool t{n}(city=C{n})"),
        }
    }

    #[test]
    fn within_budget_everything_is_kept_in_order() {
        let turns: Vec<Turn> = (1..=2).map(turn).collect();
        let (messages, report) = history(&turns, 6, 10_000);
        assert_eq!(report.turns_kept, 2);
        assert_eq!(report.turns_summarised, 0);
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[0].content, "query 1");
        assert!(messages[3].content.contains("plan 2"));
    }

    #[test]
    fn over_budget_older_turns_become_one_summary() {
        let turns: Vec<Turn> = (1..=5).map(turn).collect();
        let (messages, report) = history(&turns, 6, 200);
        assert_eq!(report.turns_kept, 2, "{messages:#?}");
        assert_eq!(report.turns_summarised, 3);
        assert!(report.tokens <= 200, "{report:?}");
        assert!(
            messages[0]
                .content
                .contains("\"query 3\" → plan 3: tool t3(city=C3)")
        );
        assert_eq!(messages[2].content, "query 4");
        let (messages, report) = history(&turns, 1, 10_000);
        assert_eq!((report.turns_kept, report.turns_summarised), (1, 4));
        assert!(messages[0].content.contains("1. \"query 1\""));
    }

    #[test]
    fn a_tiny_budget_still_says_what_came_before() {
        let turns: Vec<Turn> = (1..=40).map(turn).collect();
        let (messages, report) = history(&turns, 6, 10);
        assert_eq!(report.turns_kept, 0);
        assert_eq!(report.turns_summarised, 40);
        assert_eq!(messages.len(), 2);
        assert!(
            messages[0].content.contains("query 40"),
            "{}",
            messages[0].content
        );
        assert!(messages[0].content.chars().count() <= 40 * 4 + 60);
    }
}
