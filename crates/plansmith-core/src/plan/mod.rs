//! The plan document: [`Plan`], [`Step`], [`Action`], [`Schedule`], [`StepStatus`], [`Question`].
//!
//! A plan is a wire document: it comes out of a language model as JSON, goes out over HTTP and
//! MCP, and into the store. Its JSON shape is a public contract, pinned by snapshot tests
//! (`tests/it/snapshots`). See the crate documentation for an annotated example.

mod action;
mod next;
mod question;
mod render;
mod schedule;
mod step;
mod step_ref;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use action::{Action, PLAIN_STEP, TaskKind};
pub use next::{Merged, next_version};
pub use question::{
    Answer, Assumption, InputMode, Question, QuestionKind, answers_text, assumptions,
    recommended_answers, record_assumptions,
};
pub use render::flat_plan_json;
pub use schedule::Schedule;
pub use step::{Step, StepStatus};
pub(crate) use step_ref::rename_refs;
pub use step_ref::{PathSegment, StepRef, collect_refs, escape_pointer};

/// The most steps a plan document may list, whoever wrote it (a model, an edit, a client of
/// the API or MCP): far above any real plan, and low enough that reading, validating and
/// storing a hostile one stays cheap.
pub const MAX_PLAN_STEPS: usize = 500;

/// A typed, validated plan: what to do for one request, as steps with dependencies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Plan {
    /// Stable identifier of the plan (all versions share it).
    pub id: String,
    /// Version number, starting at 1; every change is a new version.
    pub version: u32,
    /// The version this one was derived from (a repair, an edit, a replan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_version: Option<u32>,
    /// Short title of the plan.
    pub title: String,
    /// The goal the plan serves: the user's request, restated.
    pub goal: String,
    /// Locale of the user-facing texts (`en-US`, `zh-CN`, …).
    pub locale: String,
    /// The model's reasoning about the plan, if it gave one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thought: String,
    /// True when the plan can proceed without more input from the user.
    pub ready: bool,
    /// Research plans (deer-flow): the model judged that the context already answers the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_enough_context: Option<bool>,
    /// Clarifying questions; non-empty means the plan waits for answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub questions: Vec<Question>,
    /// A message for the user when the request cannot be planned as asked (ValueCell guidance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guidance: Option<String>,
    /// The steps, in a topological order of `depends_on`.
    pub steps: Vec<Step>,
    /// When this version was created.
    pub created_at: DateTime<Utc>,
    /// Owner (user or tenant) of the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Conversation the plan belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Thread within the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// Free-form metadata (`fallback_reason`, the source shape, …).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

impl Plan {
    /// A fresh plan id, `plan-` and 32 hex digits: a UUIDv7, so ids made later sort later (the
    /// process guarantees the order). Stores index plans by id, and a random id (UUIDv4) put
    /// every new plan on a random leaf page of that index: each commit rewrote one 4 KiB page
    /// per plan per index, which halved the service's persisted plans per second (docs/guide/service.md, "Load test").
    pub fn new_id() -> String {
        format!("plan-{}", uuid::Uuid::now_v7().simple())
    }

    /// The names of the tools its steps call, in step order (repeats kept).
    pub fn called_tools(&self) -> Vec<&str> {
        self.steps
            .iter()
            .filter_map(|step| match &step.action {
                Action::Tool { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// A new version-1 plan with no steps, created now.
    pub fn new(id: impl Into<String>, goal: impl Into<String>) -> Plan {
        let goal = goal.into();
        Plan {
            id: id.into(),
            version: 1,
            parent_version: None,
            title: String::new(),
            goal,
            locale: "en-US".to_owned(),
            thought: String::new(),
            ready: true,
            has_enough_context: None,
            questions: Vec::new(),
            guidance: None,
            steps: Vec::new(),
            created_at: Utc::now(),
            owner: None,
            conversation_id: None,
            thread_id: None,
            metadata: Map::new(),
        }
    }

    /// The step with this id.
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|step| step.id == id)
    }

    /// Position of the step with this id.
    pub fn step_index(&self, id: &str) -> Option<usize> {
        self.steps.iter().position(|step| step.id == id)
    }

    /// All steps that `id` depends on, directly or transitively.
    pub fn ancestors(&self, id: &str) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        let mut stack: Vec<&str> = match self.step(id) {
            Some(step) => step.depends_on.iter().map(String::as_str).collect(),
            None => return seen,
        };
        while let Some(next) = stack.pop() {
            if seen.contains(&next) || next == id {
                continue;
            }
            seen.push(next);
            if let Some(step) = self.step(next) {
                stack.extend(step.depends_on.iter().map(String::as_str));
            }
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_sort_in_the_order_they_were_made() {
        let ids: Vec<String> = (0..2000).map(|_| Plan::new_id()).collect();
        for id in &ids {
            assert!(id.starts_with("plan-") && id.len() == 37, "{id}");
            assert!(id[5..].bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} then {}", pair[0], pair[1]);
        }
    }
}
