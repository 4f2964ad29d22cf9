//! Reading one step item, in any accepted shape, into a [`Step`] with its action, status, notes
//! and schedule; what cannot be read is reported and left out.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::fields::{as_bool, describe, lookup, scalar_string, str_field};
use super::repair::parse_candidate;
use super::schedule::read_schedule;
use super::shape::SourceShape;
use super::text::truncate_title;
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Action, PLAIN_STEP, Step, StepStatus, TaskKind};

/// A converted step, before ids are normalised.
pub(super) struct Draft {
    /// Position in the model's list.
    pub(super) input_idx: usize,
    /// The id the model gave.
    pub(super) raw_id: Option<String>,
    /// `depends_on` as the model gave it.
    pub(super) raw_deps: Vec<Value>,
    /// The step, with its normalised id already set.
    pub(super) step: Step,
}

const TOOL_NAME_KEYS: &[&str] = &["name", "tool", "tool_name", "function", "tool_to_use"];
/// Keys that name a tool even without arguments (`name` alone may be a step title).
const TOOL_ONLY_KEYS: &[&str] = &["tool", "tool_name", "function", "tool_to_use"];
const ARGUMENT_KEYS: &[&str] = &[
    "arguments",
    "args",
    "parameters",
    "params",
    "input",
    "tool_input",
    "tool_parameters",
    "action_input",
];
const AGENT_KEYS: &[&str] = &["agent", "agent_name"];
const QUERY_KEYS: &[&str] = &["query", "task", "instruction", "prompt"];
const KIND_KEYS: &[&str] = &["kind", "step_type", "task_type"];
const TEXT_KEYS: &[&str] = &["text", "reply", "content", "answer", "message", "response"];
const DEPENDENCY_KEYS: &[&str] = &[
    "depends_on",
    "dependencies",
    "deps",
    "dependency",
    "depends",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepType {
    Tool,
    Agent,
    Task,
    Reply,
}

impl StepType {
    fn name(self) -> &'static str {
        match self {
            StepType::Tool => "tool",
            StepType::Agent => "agent",
            StepType::Task => "task",
            StepType::Reply => "reply",
        }
    }

    /// A `type` value, with the aliases models use.
    fn from_name(name: &str) -> Option<StepType> {
        match name.trim().to_ascii_lowercase().as_str() {
            "tool" | "tool_call" | "function" | "function_call" | "call" => Some(StepType::Tool),
            "agent" | "agent_call" | "delegate" => Some(StepType::Agent),
            "task" | "research" | "processing" => Some(StepType::Task),
            "reply" | "answer" | "respond" | "response" | "final_answer" | "message" => {
                Some(StepType::Reply)
            }
            _ => None,
        }
    }
}

/// Converts one step item; `None` (with an error diagnostic) when it cannot be read.
pub(super) fn convert_step(
    item: &Value,
    input_idx: usize,
    out_idx: usize,
    shape: SourceShape,
    diags: &mut Vec<Diagnostic>,
) -> Option<Draft> {
    let id = format!("s{}", out_idx + 1);
    let at = format!("/steps/{out_idx}");
    let leave_out = |diags: &mut Vec<Diagnostic>, message: String| {
        diags.push(
            Diagnostic::error(
                Code::InvalidStep,
                format!("/steps/{input_idx}"),
                format!("step {} was left out: {message}", input_idx + 1),
            )
            .with_value(item.clone()),
        );
    };
    // Only lifting a nested `action` or `function` changes the step object; without one it is
    // read in place.
    let obj: Cow<'_, Map<String, Value>> = match item {
        Value::Object(map)
            if lookup(map, "action").is_some() || lookup(map, "function").is_some() =>
        {
            let mut owned = map.clone();
            lift_nested_action(&mut owned);
            Cow::Owned(owned)
        }
        Value::Object(map) => Cow::Borrowed(map),
        Value::String(text) if !text.trim().is_empty() => {
            let kind = TaskKind::Custom(PLAIN_STEP.to_owned());
            let action = Action::Task {
                kind,
                need_web_search: false,
            };
            let step = Step::new(id, text.trim(), action);
            return Some(Draft {
                input_idx,
                raw_id: None,
                raw_deps: Vec::new(),
                step,
            });
        }
        other => {
            leave_out(
                diags,
                format!("it is {}, not a step object", describe(other)),
            );
            return None;
        }
    };
    let tool_name = str_field(&obj, TOOL_NAME_KEYS).map(|(_, name)| name.to_owned());
    let args_value = ARGUMENT_KEYS.iter().find_map(|key| lookup(&obj, key));
    let agent = str_field(&obj, AGENT_KEYS).map(|(_, agent)| agent.to_owned());
    let kind = str_field(&obj, KIND_KEYS).map(|(_, kind)| kind.to_owned());
    // deer-flow renamed `need_web_search` to `need_search`; both are read.
    let need_web_search = lookup(&obj, "need_web_search")
        .or_else(|| lookup(&obj, "need_search"))
        .and_then(as_bool);
    let text = str_field(&obj, TEXT_KEYS).map(|(_, text)| text.to_owned());
    let description =
        str_field(&obj, &["description", "desc", "details"]).map(|(_, d)| d.to_owned());
    let has_any = |keys: &[&str]| {
        keys.iter()
            .any(|key| lookup(&obj, key).is_some_and(|v| !v.is_null()))
    };

    let explicit = lookup(&obj, "type").map(|ty| (ty.as_str().and_then(StepType::from_name), ty));
    let inferred = if tool_name.is_some() && args_value.is_some() {
        Some(StepType::Tool)
    } else if agent.is_some() {
        Some(StepType::Agent)
    } else if kind.is_some() || need_web_search.is_some() {
        Some(StepType::Task)
    } else if text.is_some() {
        Some(StepType::Reply)
    } else if has_any(TOOL_ONLY_KEYS) {
        Some(StepType::Tool)
    } else if shape == SourceShape::DeerFlow {
        Some(StepType::Task)
    } else {
        None
    };
    let step_type = match (explicit, inferred) {
        (Some((Some(ty), _)), _) => ty,
        (Some((None, given)), Some(ty)) => {
            diags.push(
                Diagnostic::warning(
                    Code::AutoFixed,
                    format!("{at}/action/type"),
                    format!(
                        "unknown step type {given}; `{}` was inferred from its fields",
                        ty.name()
                    ),
                )
                .with_step(&id)
                .with_value(given.clone()),
            );
            ty
        }
        (Some((None, given)), None) => {
            leave_out(
                diags,
                format!(
                    "unknown step type {given}; expected `tool` (name + arguments), `agent` \
                     (agent + query), `task` (kind) or `reply` (text)"
                ),
            );
            return None;
        }
        (None, Some(ty)) => ty,
        (None, None) => {
            leave_out(
                diags,
                "it has no `type` and no recognisable action; give `type` and its fields: `tool` \
                 (name + arguments), `agent` (agent + query), `task` (kind) or `reply` (text)"
                    .to_owned(),
            );
            return None;
        }
    };
    // `"type": "research"` is a `step_type` in the wrong field.
    let mut kind = kind;
    if step_type == StepType::Task
        && kind.is_none()
        && let Some(Value::String(given)) = lookup(&obj, "type")
    {
        let lower = given.trim().to_ascii_lowercase();
        if lower == "research" || lower == "processing" {
            kind = Some(lower);
        }
    }

    let action = match step_type {
        StepType::Tool => {
            let Some(name) = tool_name.clone() else {
                leave_out(diags, "a tool step needs the tool's `name`".to_owned());
                return None;
            };
            let arguments = match args_value {
                None | Some(Value::Null) => {
                    if !has_any(ARGUMENT_KEYS) && explicit.is_none() {
                        diags.push(
                            Diagnostic::info(
                                Code::AutoFixed,
                                format!("{at}/action/arguments"),
                                "the tool step has no arguments; none are assumed",
                            )
                            .with_step(&id),
                        );
                    }
                    Map::new()
                }
                Some(Value::Object(map)) => map.clone(),
                Some(Value::String(text)) => match decode_arguments(text) {
                    Some(map) => {
                        diags.push(
                            Diagnostic::info(
                                Code::AutoFixed,
                                format!("{at}/action/arguments"),
                                "the arguments were a JSON string; it was decoded",
                            )
                            .with_step(&id),
                        );
                        map
                    }
                    None => {
                        leave_out(
                            diags,
                            format!(
                                "the arguments of tool `{name}` are a string that does not hold a \
                                 JSON object; give an object"
                            ),
                        );
                        return None;
                    }
                },
                Some(other) => {
                    leave_out(
                        diags,
                        format!(
                            "the arguments of tool `{name}` are {}; give an object",
                            describe(other)
                        ),
                    );
                    return None;
                }
            };
            Action::Tool { name, arguments }
        }
        StepType::Agent => {
            let Some(agent) = agent.clone() else {
                leave_out(
                    diags,
                    "an agent step needs the agent's name (`agent`)".to_owned(),
                );
                return None;
            };
            let query = match str_field(&obj, QUERY_KEYS) {
                Some((_, query)) => query.to_owned(),
                None => {
                    let Some(fallback) = description
                        .clone()
                        .or_else(|| str_field(&obj, &["title"]).map(|(_, t)| t.to_owned()))
                    else {
                        leave_out(
                            diags,
                            format!("the agent step for `{agent}` has no `query`"),
                        );
                        return None;
                    };
                    diags.push(
                        Diagnostic::info(
                            Code::AutoFixed,
                            format!("{at}/action/query"),
                            "the agent step has no `query`; its description was used",
                        )
                        .with_step(&id),
                    );
                    fallback
                }
            };
            Action::Agent { agent, query }
        }
        StepType::Task => {
            let kind = match kind {
                Some(kind) => TaskKind::from(kind),
                None => {
                    let (kind, why) = if need_web_search == Some(true) {
                        (TaskKind::Research, "it needs web search")
                    } else if need_web_search == Some(false) {
                        (TaskKind::Processing, "it needs no web search")
                    } else {
                        (TaskKind::Processing, "nothing says it needs web search")
                    };
                    diags.push(
                        Diagnostic::info(
                            Code::AutoFixed,
                            format!("{at}/action/kind"),
                            format!("the step has no `step_type`; `{kind}` was set because {why}"),
                        )
                        .with_step(&id),
                    );
                    kind
                }
            };
            Action::Task {
                kind,
                need_web_search: need_web_search.unwrap_or(false),
            }
        }
        StepType::Reply => {
            let Some(text) = text.clone() else {
                leave_out(diags, "a reply step needs its `text`".to_owned());
                return None;
            };
            Action::Reply { text }
        }
    };

    let title = match str_field(&obj, &["title"]) {
        Some((_, title)) => title.to_owned(),
        None => match &action {
            Action::Tool { name, .. } => name.clone(),
            Action::Agent { query, .. } => truncate_title(query, 60),
            Action::Task { .. } => str_field(&obj, &["name", "step_name"])
                .map(|(_, name)| name.to_owned())
                .or_else(|| description.as_deref().map(|d| truncate_title(d, 60)))
                .unwrap_or_else(|| format!("Step {}", out_idx + 1)),
            Action::Reply { .. } => "Reply".to_owned(),
        },
    };
    let mut step = Step::new(id.clone(), title, action);
    step.description = description.unwrap_or_default();
    if step.description.is_empty()
        && shape == SourceShape::Nl2Sql
        && let Action::Tool { arguments, .. } = &step.action
        && let Some(Value::String(text)) = lookup(arguments, "description")
    {
        step.description = text.clone();
    }

    if let Some(status) = lookup(&obj, "status") {
        step.status = read_status(status, &at, &id, diags);
    }
    if let Some((_, notes)) = str_field(&obj, &["notes", "note"]) {
        step.notes = notes.to_owned();
    }
    step.requires_approval = lookup(&obj, "requires_approval")
        .and_then(as_bool)
        .unwrap_or(false);
    step.result = lookup(&obj, "result").filter(|v| !v.is_null()).cloned();
    step.error = str_field(&obj, &["error"]).map(|(_, e)| e.to_owned());

    match read_schedule(&obj) {
        Ok(schedule) => step.schedule = schedule,
        Err((message, value)) => {
            let mut diag =
                Diagnostic::error(Code::InvalidSchedule, format!("{at}/schedule"), message)
                    .with_step(&id);
            if let Some(value) = value {
                diag = diag.with_value(value);
            }
            diags.push(diag);
        }
    }

    let raw_id = raw_step_id(item);
    let raw_deps = match DEPENDENCY_KEYS.iter().find_map(|key| lookup(&obj, key)) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(deps)) => deps.clone(),
        Some(dep @ (Value::String(_) | Value::Number(_))) => vec![dep.clone()],
        Some(other) => {
            diags.push(
                Diagnostic::warning(
                    Code::InvalidStep,
                    format!("{at}/depends_on"),
                    "`depends_on` must be a list of step ids; it was ignored",
                )
                .with_step(&id)
                .with_value(other.clone()),
            );
            Vec::new()
        }
    };
    Some(Draft {
        input_idx,
        raw_id,
        raw_deps,
        step,
    })
}

/// The id the model gave a step item (`id`, `step_id`, or nl2sql's `step` number).
pub(super) fn raw_step_id(item: &Value) -> Option<String> {
    let obj = item.as_object()?;
    ["id", "step_id", "step"]
        .iter()
        .find_map(|key| lookup(obj, key).and_then(scalar_string))
}

/// Moves the fields of a nested `action` object (our shape) or an OpenAI-style `function` object
/// up into the step, so one reader handles every shape. A string `action` (ReAct's
/// `action`/`action_input`) names a tool.
fn lift_nested_action(obj: &mut Map<String, Value>) {
    match obj.remove("action") {
        Some(Value::Object(action)) => {
            for (key, value) in action {
                obj.insert(key, value);
            }
        }
        Some(Value::String(name)) => {
            obj.entry("tool").or_insert(Value::String(name));
        }
        Some(other) => {
            obj.insert("action".to_owned(), other);
        }
        None => {}
    }
    if let Some(Value::Object(function)) = lookup(obj, "function").cloned() {
        obj.remove("function");
        if let Some(name) = lookup(&function, "name") {
            obj.entry("tool").or_insert(name.clone());
        }
        if let Some(arguments) = lookup(&function, "arguments") {
            obj.entry("arguments").or_insert(arguments.clone());
        }
    }
}

/// Arguments given as a JSON string holding an object.
fn decode_arguments(text: &str) -> Option<Map<String, Value>> {
    if text.trim().is_empty() {
        return Some(Map::new());
    }
    match parse_candidate(text.trim()) {
        Ok((Value::Object(map), _)) => Some(map),
        _ => None,
    }
}

/// A step status, with common aliases; unknown strings become `not_started` with a warning.
fn read_status(value: &Value, at: &str, id: &str, diags: &mut Vec<Diagnostic>) -> StepStatus {
    let status = value
        .as_str()
        .map(|s| s.trim().to_ascii_lowercase().replace([' ', '-'], "_"));
    let known = status.as_deref().and_then(|s| match s {
        "" | "pending" | "todo" | "not_started" | "notstarted" | "open" => {
            Some(StepStatus::NotStarted)
        }
        "in_progress" | "running" | "active" | "started" | "doing" => Some(StepStatus::InProgress),
        "completed" | "complete" | "done" | "finished" | "success" | "succeeded" => {
            Some(StepStatus::Completed)
        }
        "blocked" | "waiting" => Some(StepStatus::Blocked),
        "failed" | "error" => Some(StepStatus::Failed),
        "skipped" | "cancelled" | "canceled" => Some(StepStatus::Skipped),
        _ => None,
    });
    match known {
        Some(status) => status,
        None => {
            diags.push(
                Diagnostic::warning(
                    Code::InvalidStep,
                    format!("{at}/status"),
                    "unknown step status; `not_started` was assumed (expected not_started, \
                     in_progress, completed, blocked, failed or skipped)",
                )
                .with_step(id)
                .with_value(value.clone()),
            );
            StepStatus::NotStarted
        }
    }
}

/// Applies OpenManus `step_statuses` and `step_notes` (parallel arrays) to the steps.
pub(super) fn apply_statuses_and_notes(
    fields: &Map<String, Value>,
    drafts: &mut [Draft],
    diags: &mut Vec<Diagnostic>,
) {
    let statuses = lookup(fields, "step_statuses").and_then(Value::as_array);
    let notes = lookup(fields, "step_notes").and_then(Value::as_array);
    for (out_idx, draft) in drafts.iter_mut().enumerate() {
        let at = format!("/steps/{out_idx}");
        if let Some(status) = statuses.and_then(|all| all.get(draft.input_idx)) {
            draft.step.status = read_status(status, &at, &draft.step.id, diags);
        }
        if let Some(Value::String(note)) = notes.and_then(|all| all.get(draft.input_idx)) {
            draft.step.notes = note.clone();
        }
    }
}
