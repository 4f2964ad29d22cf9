//! The plan document: [`Plan`], [`Step`], [`Action`], [`Schedule`], [`StepStatus`], [`Question`].
//!
//! A plan is a wire document: it comes out of a language model as JSON, goes out over HTTP and
//! MCP, and into the store. Its JSON shape is a public contract, pinned by snapshot tests
//! (`tests/it/snapshots`). See the crate documentation for an annotated example.

use std::fmt::{self, Write as _};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

    /// A plain-text rendering with progress, e.g. `Progress: 1/3 (33.3%)` and `[✓] [→] [!] [ ]`:
    /// one line per step (OpenManus's shape), then its id, what it waits for and what it does
    /// ([`Step::action_lines`]), its notes, its result (on one line, cut to 300 characters) and its error.
    /// Steps are numbered from 1.
    pub fn render_text(&self) -> String {
        self.render_text_from(1)
    }

    /// [`Plan::render_text`] with the steps numbered from `first`: OpenManus's planning tool
    /// numbers them from 0, as its `mark_step` counts them.
    pub fn render_text_from(&self, first: usize) -> String {
        let total = self.steps.len();
        let done = self
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Completed)
            .count();
        let pct = if total == 0 {
            0.0
        } else {
            done as f64 * 100.0 / total as f64
        };
        let mut out = format!("Plan: {} (id {}, v{})\n", self.title, self.id, self.version);
        out.push_str(&format!("Progress: {done}/{total} ({pct:.1}%)\n"));
        for (idx, step) in self.steps.iter().enumerate() {
            out.push_str(&format!(
                "{}. {} {}\n",
                idx + first,
                step.status.marker(),
                step.title
            ));
            let mut about = Vec::new();
            if !step.depends_on.is_empty() {
                about.push(format!("after {}", step.depends_on.join(", ")));
            }
            if step.requires_approval {
                about.push("needs approval".to_owned());
            }
            let about = if about.is_empty() {
                String::new()
            } else {
                format!(" ({})", about.join("; "))
            };
            for (line, text) in step.action_lines().into_iter().enumerate() {
                match line {
                    0 => out.push_str(&format!("   {}{about}: {text}\n", step.id)),
                    _ => out.push_str(&format!("   {text}\n")),
                }
            }
            if !step.notes.is_empty() {
                out.push_str(&format!("   Notes: {}\n", step.notes));
            }
            if let Some(result) = &step.result {
                let result = match result {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                out.push_str(&format!(
                    "   Result: {}\n",
                    crate::parse::snippet(&result, RESULT_CHARS)
                ));
            }
            if let Some(error) = &step.error {
                out.push_str(&format!("   Error: {error}\n"));
            }
        }
        out
    }
}

/// The task kind of a step given as plain text (an OpenManus step, a bare string in a model's
/// `steps`): `{"type": "task", "kind": "step"}`.
pub const PLAIN_STEP: &str = "step";

/// How much of a step's result [`Plan::render_text`] shows.
const RESULT_CHARS: usize = 300;

/// A clarifying question the plan needs answered before it can run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Question {
    /// Identifier (`q1`, `q2`, …).
    pub id: String,
    /// The question, in the plan's locale.
    pub text: String,
    /// The step this answer unblocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The argument of that step this answer fills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<String>,
    /// Suggested answers, when the set is known (an enum, a yes/no confirmation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Step {
    /// Identifier, unique in the plan: `s1`, `s2`, …
    pub id: String,
    /// Short title.
    pub title: String,
    /// What the step does and why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// What runs.
    pub action: Action,
    /// Ids of the steps that must complete first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// When the step runs; absent means once, now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// Execution status.
    #[serde(default)]
    pub status: StepStatus,
    /// Set by policy: a person must approve the step before it runs (e.g. a destructive tool).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_approval: bool,
    /// Notes added while reviewing or executing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
    /// Result of the step once it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Error of the step if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Step {
    /// A not-started step with no dependencies.
    pub fn new(id: impl Into<String>, title: impl Into<String>, action: Action) -> Step {
        Step {
            id: id.into(),
            title: title.into(),
            description: String::new(),
            action,
            depends_on: Vec::new(),
            schedule: None,
            status: StepStatus::NotStarted,
            requires_approval: false,
            notes: String::new(),
            result: None,
            error: None,
        }
    }

    /// What the step does, as text for people: `tool NAME` then one `  key = value` line per
    /// argument (a step reference reads as its path: `  body = s1.output.summary (from the
    /// output of s1)`), `agent NAME: task`, `research task, web search` then `  description`,
    /// or `reply: text`; then `  schedule: …` when it has one. Lines after the first are
    /// indented by two spaces. None for a step given as plain text ([`PLAIN_STEP`]), whose
    /// title says it all.
    pub fn action_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        match &self.action {
            Action::Tool { name, arguments } => {
                lines.push(format!("tool {name}"));
                for (key, value) in arguments {
                    lines.push(format!("  {key} = {}", argument_text(value)));
                }
            }
            Action::Agent { agent, query } => lines.push(format!("agent {agent}: {query}")),
            Action::Task {
                kind,
                need_web_search,
            } => {
                // A step given as plain text (OpenManus's plans) says all in its title.
                let plain = matches!(kind, TaskKind::Custom(name) if name == PLAIN_STEP)
                    && !*need_web_search
                    && self.description.is_empty()
                    && self.schedule.is_none();
                if plain {
                    return lines;
                }
                let web = if *need_web_search { ", web search" } else { "" };
                lines.push(format!("{kind} task{web}"));
                if !self.description.is_empty() {
                    lines.push(format!("  {}", self.description));
                }
            }
            Action::Reply { text } => lines.push(format!("reply: {text}")),
        }
        if let Some(schedule) = &self.schedule {
            let schedule = serde_json::to_string(schedule).unwrap_or_default();
            lines.push(format!("  schedule: {schedule}"));
        }
        lines
    }
}

/// An argument as text for people: its JSON, except a reference to an earlier step's output,
/// which reads as the path it takes the value from (as on the review page).
fn argument_text(value: &Value) -> String {
    match StepRef::reference_in(value).map(StepRef::parse) {
        Some(Ok(reference)) => format!("{reference} (from the output of {})", reference.step),
        _ => value.to_string(),
    }
}

/// What a step does. Serialised with a `type` tag: `{"type": "tool", "name": …, "arguments": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    /// Call a tool of the catalog with arguments that match its input schema. An argument value
    /// may be a step reference, `{"$ref": "s1.output.items[0].id"}` (see [`StepRef`]).
    Tool {
        /// Tool name, as in the catalog.
        name: String,
        /// Arguments, validated against the tool's input schema.
        #[serde(default)]
        arguments: Map<String, Value>,
    },
    /// Hand a natural-language task to an agent.
    Agent {
        /// Agent name, as in the agent cards.
        agent: String,
        /// The task for the agent.
        query: String,
    },
    /// A research or processing task (deer-flow style), or a custom kind.
    Task {
        /// Kind of task.
        kind: TaskKind,
        /// Whether the task needs web search.
        #[serde(default)]
        need_web_search: bool,
    },
    /// Answer the user. Written before any tool ran, so it must not claim to know tool results.
    Reply {
        /// The reply text.
        text: String,
    },
}

impl Action {
    /// The tag used in JSON: `tool`, `agent`, `task` or `reply`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Action::Tool { .. } => "tool",
            Action::Agent { .. } => "agent",
            Action::Task { .. } => "task",
            Action::Reply { .. } => "reply",
        }
    }
}

/// Kind of a [`Action::Task`]: `research`, `processing`, or any other name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum TaskKind {
    /// Gather information.
    Research,
    /// Compute or transform what was gathered.
    Processing,
    /// A kind the caller defines.
    Custom(String),
}

/// In the API schema a task kind is a string (`research`, `processing` or a custom name).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for TaskKind {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some("`research`, `processing`, or any other name"))
            .examples(["research"])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for TaskKind {}

impl From<String> for TaskKind {
    fn from(value: String) -> TaskKind {
        match value.trim().to_ascii_lowercase().as_str() {
            "research" => TaskKind::Research,
            "processing" | "process" => TaskKind::Processing,
            _ => TaskKind::Custom(value),
        }
    }
}

impl From<TaskKind> for String {
    fn from(value: TaskKind) -> String {
        value.to_string()
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskKind::Research => f.write_str("research"),
            TaskKind::Processing => f.write_str("processing"),
            TaskKind::Custom(name) => f.write_str(name),
        }
    }
}

/// When a step runs. Recurring schedules need the user's explicit confirmation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Schedule {
    /// Run once, now.
    Once,
    /// Run every `minutes` minutes.
    Interval {
        /// Period in minutes, at least 1.
        minutes: u32,
    },
    /// Run every day at `time` (`HH:MM`, 24-hour, in the plan's time zone).
    Daily {
        /// Time of day, `HH:MM`.
        time: String,
    },
    /// Run on a cron expression (five fields).
    Cron {
        /// The expression, e.g. `0 9 * * 1-5`.
        expr: String,
    },
}

impl Schedule {
    /// True for schedules that run more than once.
    pub fn is_recurring(&self) -> bool {
        !matches!(self, Schedule::Once)
    }
}

/// Execution status of a step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started yet.
    #[default]
    NotStarted,
    /// Running.
    InProgress,
    /// Finished successfully.
    Completed,
    /// Waiting on something (an answer, an approval).
    Blocked,
    /// Failed.
    Failed,
    /// Not run (its dependency failed, or a person skipped it).
    Skipped,
}

impl StepStatus {
    /// All statuses, in lifecycle order.
    pub const ALL: [StepStatus; 6] = [
        StepStatus::NotStarted,
        StepStatus::InProgress,
        StepStatus::Completed,
        StepStatus::Blocked,
        StepStatus::Failed,
        StepStatus::Skipped,
    ];

    /// The marker used in text renderings: `[✓]`, `[→]`, `[!]`, `[ ]`, `[-]`.
    pub fn marker(self) -> &'static str {
        match self {
            StepStatus::Completed => "[✓]",
            StepStatus::InProgress => "[→]",
            StepStatus::Blocked | StepStatus::Failed => "[!]",
            StepStatus::NotStarted => "[ ]",
            StepStatus::Skipped => "[-]",
        }
    }

    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::NotStarted => "not_started",
            StepStatus::InProgress => "in_progress",
            StepStatus::Completed => "completed",
            StepStatus::Blocked => "blocked",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
        }
    }
}

impl std::str::FromStr for StepStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<StepStatus, String> {
        StepStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = StepStatus::ALL.iter().map(|s| s.as_str()).collect();
                format!(
                    "unknown step status `{s}`; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// A reference to an earlier step's output inside tool arguments: `{"$ref": "s1.output.items[0].id"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRef {
    /// The referenced step id.
    pub step: String,
    /// Path inside the step's output.
    pub path: Vec<PathSegment>,
}

/// One segment of a [`StepRef`] path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    /// An object key.
    Key(String),
    /// An array index.
    Index(usize),
}

impl StepRef {
    /// If `value` is a `{"$ref": "…"}` object, its reference string.
    pub fn reference_in(value: &Value) -> Option<&str> {
        let object = value.as_object()?;
        if object.len() != 1 {
            return None;
        }
        object.get("$ref")?.as_str()
    }

    /// Parses `s1.output`, `s1.output.items[0].id`, `s2.output[3]`.
    pub fn parse(text: &str) -> Result<StepRef, String> {
        let text = text.trim();
        let (step, rest) = match text.find(['.', '[']) {
            Some(pos) => (&text[..pos], &text[pos..]),
            None => (text, ""),
        };
        if step.is_empty() {
            return Err(format!("`{text}` does not start with a step id"));
        }
        let rest = rest
            .strip_prefix(".output")
            .ok_or_else(|| format!("`{text}` must have the form `<step>.output[.path]`"))?;
        let mut path = Vec::new();
        let mut chars = rest.char_indices().peekable();
        while let Some((_, c)) = chars.next() {
            match c {
                '.' => {
                    let mut key = String::new();
                    while let Some(&(_, next)) = chars.peek() {
                        if next == '.' || next == '[' {
                            break;
                        }
                        key.push(next);
                        chars.next();
                    }
                    if key.is_empty() {
                        return Err(format!("`{text}` has an empty key"));
                    }
                    path.push(PathSegment::Key(key));
                }
                '[' => {
                    let mut digits = String::new();
                    let mut closed = false;
                    for (_, next) in chars.by_ref() {
                        if next == ']' {
                            closed = true;
                            break;
                        }
                        digits.push(next);
                    }
                    let index = digits
                        .trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|_| closed)
                        .ok_or_else(|| format!("`{text}` has a bad index `[{digits}`"))?;
                    path.push(PathSegment::Index(index));
                }
                other => return Err(format!("`{text}`: unexpected `{other}`")),
            }
        }
        Ok(StepRef {
            step: step.to_owned(),
            path,
        })
    }
}

impl fmt::Display for StepRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.output", self.step)?;
        for segment in &self.path {
            match segment {
                PathSegment::Key(key) => write!(f, ".{key}")?,
                PathSegment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// Every `$ref` inside `value`, with its JSON pointer relative to `value`.
pub fn collect_refs(value: &Value, pointer: &str, out: &mut Vec<(String, String)>) {
    let mut path = pointer.to_owned();
    collect_refs_at(value, &mut path, out);
}

/// [`collect_refs`] with one pointer buffer for the whole walk: a pointer is copied out only
/// for a `$ref` (every argument of every step is walked on each validation).
fn collect_refs_at(value: &Value, path: &mut String, out: &mut Vec<(String, String)>) {
    if let Some(reference) = StepRef::reference_in(value) {
        out.push((path.clone(), reference.to_owned()));
        return;
    }
    let len = path.len();
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                path.push('/');
                push_escaped(path, key);
                collect_refs_at(child, path, out);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            for (idx, child) in items.iter().enumerate() {
                // Writing to a `String` cannot fail.
                let _ = write!(path, "/{idx}");
                collect_refs_at(child, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Appends `token` to `path` escaped as one JSON-pointer token (see [`escape_pointer`]).
fn push_escaped(path: &mut String, token: &str) {
    for c in token.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

/// Escapes one JSON-pointer token (`~` → `~0`, `/` → `~1`).
pub fn escape_pointer(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    push_escaped(&mut out, token);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn step_refs_parse_and_print() {
        let cases = [
            ("s1.output", "s1", 0),
            ("s1.output.items[0].id", "s1", 3),
            ("s12.output[3]", "s12", 1),
        ];
        for (text, step, n_segments) in cases {
            let parsed = StepRef::parse(text).unwrap();
            assert_eq!(parsed.step, step, "{text}");
            assert_eq!(parsed.path.len(), n_segments, "{text}");
            assert_eq!(parsed.to_string(), text);
        }
        for bad in [
            "",
            ".output",
            "s1",
            "s1.result",
            "s1.output[x]",
            "s1.output[1",
            "s1.output..a",
        ] {
            assert!(StepRef::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn status_round_trips_and_rejects_unknown() {
        for status in StepStatus::ALL {
            assert_eq!(status.as_str().parse::<StepStatus>().unwrap(), status);
        }
        let err = "done".parse::<StepStatus>().unwrap_err();
        assert!(err.contains("not_started"), "{err}");
    }

    #[test]
    fn render_text_shows_progress() {
        let mut plan = Plan::new("p", "goal");
        plan.title = "Trip".into();
        for (idx, status) in [
            StepStatus::Completed,
            StepStatus::InProgress,
            StepStatus::NotStarted,
        ]
        .into_iter()
        .enumerate()
        {
            let mut step = Step::new(
                format!("s{}", idx + 1),
                format!("step {idx}"),
                Action::Reply { text: "x".into() },
            );
            step.status = status;
            plan.steps.push(step);
        }
        let text = plan.render_text();
        assert!(text.contains("Progress: 1/3 (33.3%)"), "{text}");
        assert!(
            text.contains("[✓] step 0") && text.contains("[→] step 1"),
            "{text}"
        );
    }

    #[test]
    fn render_text_shows_what_each_step_does() {
        let mut plan = Plan::new("p", "goal");
        let mut arguments = Map::new();
        arguments.insert("city".into(), json!("Paris"));
        let mut fetch = Step::new(
            "s1",
            "Fetch",
            Action::Tool {
                name: "get_weather".into(),
                arguments,
            },
        );
        fetch.status = StepStatus::Completed;
        fetch.result = Some(json!(format!("first\n{}", "x".repeat(400))));
        let mut arguments = Map::new();
        arguments.insert("body".into(), json!({"$ref": "s1.output.summary"}));
        arguments.insert("cc".into(), json!({"$ref": "not a reference"}));
        let mut mail = Step::new(
            "s2",
            "Mail",
            Action::Tool {
                name: "send_email".into(),
                arguments,
            },
        );
        mail.depends_on = vec!["s1".into()];
        mail.requires_approval = true;
        mail.status = StepStatus::Failed;
        mail.error = Some("smtp refused".into());
        let mut research = Step::new(
            "s3",
            "Look around",
            Action::Task {
                kind: TaskKind::Research,
                need_web_search: true,
            },
        );
        research.description = "Find the forecast".into();
        let mut plain = Step::new(
            "s4",
            "Pack",
            Action::Task {
                kind: TaskKind::Custom(PLAIN_STEP.into()),
                need_web_search: false,
            },
        );
        plain.depends_on = vec!["s3".into()];
        plan.steps = vec![fetch, mail, research, plain];
        let text = plan.render_text();
        let expected = [
            "1. [✓] Fetch",
            "   s1: tool get_weather",
            "     city = \"Paris\"",
            "2. [!] Mail",
            "   s2 (after s1; needs approval): tool send_email",
            "     body = s1.output.summary (from the output of s1)",
            "     cc = {\"$ref\":\"not a reference\"}",
            "   Error: smtp refused",
            "3. [ ] Look around",
            "   s3: research task, web search",
            "     Find the forecast",
        ];
        for line in expected {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in\n{text}"
            );
        }
        // A plain-text step (OpenManus) says all in its title: nothing under it.
        assert!(text.ends_with("4. [ ] Pack\n"), "{text}");
        // A long result is shown on one line, cut.
        let result = text.lines().find(|l| l.starts_with("   Result: ")).unwrap();
        assert!(result.starts_with("   Result: first xx"), "{result}");
        assert_eq!(
            result.chars().count(),
            "   Result: ".len() + RESULT_CHARS + 1
        );
        assert!(result.ends_with("xx…"), "{result}");
    }
}
