//! The plan shapes parsing accepts, and recognising which one a JSON document is in and taking
//! out its step list.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::ParseError;
use super::fields::{describe, lookup, lookup_in};
#[cfg(doc)]
use super::to_plan;
use crate::diagnostic::{Code, Diagnostic};
use crate::text::snippet;

/// Where the JSON came from: which plan shape [`to_plan`] recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SourceShape {
    /// Our own plan document: steps with a nested `action` object.
    Plansmith,
    /// Flat steps, `{title?, thought?, questions?, steps: [...]}` (what our prompts ask for), a
    /// `{plan: ...}` wrapper around it, or a bare array of steps.
    Steps,
    /// A deer-flow research plan: `{locale, has_enough_context, thought, title, steps}` with
    /// `need_web_search` / `step_type` steps.
    DeerFlow,
    /// A ValueCell `PlannerResponse`: `{adequate, reason, guidance_message?, tasks}`.
    ValueCell,
    /// A SAGE plan: a bare array of `{name, description?, args}` tool calls.
    Sage,
    /// An OpenManus `PlanningTool` plan: `{plan_id?, title, steps: [strings], step_statuses?}`.
    OpenManus,
    /// A Spring AI Alibaba nl2sql plan: `{thought_process?, execution_plan: [...]}`.
    #[serde(rename = "nl2sql")]
    Nl2Sql,
}

impl SourceShape {
    /// The snake_case name used in JSON (`deer_flow`, `value_cell`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SourceShape::Plansmith => "plansmith",
            SourceShape::Steps => "steps",
            SourceShape::DeerFlow => "deer_flow",
            SourceShape::ValueCell => "value_cell",
            SourceShape::Sage => "sage",
            SourceShape::OpenManus => "open_manus",
            SourceShape::Nl2Sql => "nl2sql",
        }
    }
}

/// A recognised document: plan-level fields, the raw step items, and the shape.
pub(super) struct Doc {
    pub(super) fields: Map<String, Value>,
    pub(super) items: Vec<Value>,
    pub(super) shape: SourceShape,
}

/// Recognises the shape of `value` (see [`to_plan`]).
pub(super) fn recognise(
    value: Value,
    depth: u8,
    diags: &mut Vec<Diagnostic>,
) -> Result<Doc, ParseError> {
    match value {
        Value::String(text) if depth < 3 => match serde_json::from_str::<Value>(&text) {
            Ok(inner @ (Value::Object(_) | Value::Array(_))) => {
                diags.push(Diagnostic::info(
                    Code::AutoFixed,
                    "",
                    "the plan was a JSON string holding JSON; it was decoded once more",
                ));
                recognise(inner, depth + 1, diags)
            }
            _ => Err(ParseError::UnknownShape(format!(
                "a string (`{}`), not a plan",
                snippet(&text, 60)
            ))),
        },
        Value::Array(items) => recognise_array(Map::new(), items),
        Value::Object(map) => recognise_object(map, depth, diags),
        other => Err(ParseError::UnknownShape(format!(
            "{}, not a plan",
            describe(&other)
        ))),
    }
}

fn recognise_array(fields: Map<String, Value>, items: Vec<Value>) -> Result<Doc, ParseError> {
    if !items.is_empty() && items.iter().all(Value::is_string) {
        return Err(ParseError::UnknownShape(
            "an array of strings; expected an array of step objects".to_owned(),
        ));
    }
    let objects: Vec<&Map<String, Value>> = items.iter().filter_map(Value::as_object).collect();
    let shape = if objects
        .iter()
        .any(|item| lookup(item, "action").is_some_and(Value::is_object))
    {
        SourceShape::Plansmith
    } else if !objects.is_empty()
        && objects.iter().all(|item| {
            lookup(item, "type").is_none()
                && (lookup(item, "name").is_some() || lookup(item, "tool_name").is_some())
        })
    {
        SourceShape::Sage
    } else {
        SourceShape::Steps
    };
    Ok(Doc {
        fields,
        items,
        shape,
    })
}

fn recognise_object(
    mut map: Map<String, Value>,
    depth: u8,
    diags: &mut Vec<Diagnostic>,
) -> Result<Doc, ParseError> {
    let has_steps = ["steps", "tasks", "execution_plan"]
        .iter()
        .any(|key| lookup(&map, key).is_some());
    if !has_steps
        && depth < 3
        && let Some(inner) = map.remove("plan")
    {
        let inner = match inner {
            Value::String(text) => {
                serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text))
            }
            other => other,
        };
        return match inner {
            Value::Object(mut inner) => {
                // Outer fields (a title, a thought next to the wrapper) fill the gaps.
                for (key, value) in map {
                    inner.entry(key).or_insert(value);
                }
                recognise_object(inner, depth + 1, diags)
            }
            Value::Array(items) => {
                map.insert("steps".to_owned(), Value::Array(items));
                recognise_object(map, depth + 1, diags)
            }
            other => Err(ParseError::UnknownShape(format!(
                "`plan` is {}, expected an object or an array of steps",
                describe(&other)
            ))),
        };
    }

    if let Some(items) = take_array(&mut map, "execution_plan", diags)? {
        return Ok(Doc {
            fields: map,
            items,
            shape: SourceShape::Nl2Sql,
        });
    }
    if lookup(&map, "steps").is_none()
        && let Some(items) = take_array(&mut map, "tasks", diags)?
    {
        let value_cell = lookup(&map, "adequate").is_some()
            || items
                .iter()
                .any(|item| lookup_in(item, "agent_name").is_some());
        let shape = if value_cell {
            SourceShape::ValueCell
        } else {
            SourceShape::Steps
        };
        return Ok(Doc {
            fields: map,
            items,
            shape,
        });
    }
    if let Some(items) = take_array(&mut map, "steps", diags)? {
        let all_strings = items.iter().all(Value::is_string);
        let shape = if all_strings
            && (!items.is_empty()
                || lookup(&map, "plan_id").is_some()
                || lookup(&map, "step_statuses").is_some())
        {
            SourceShape::OpenManus
        } else if items
            .iter()
            .any(|item| lookup_in(item, "action").is_some_and(Value::is_object))
        {
            SourceShape::Plansmith
        } else if lookup(&map, "has_enough_context").is_some()
            || (!items.is_empty()
                && items.iter().all(|item| {
                    lookup_in(item, "type").is_none()
                        && (lookup_in(item, "step_type").is_some()
                            || lookup_in(item, "need_web_search").is_some()
                            || lookup_in(item, "need_search").is_some())
                }))
        {
            SourceShape::DeerFlow
        } else {
            SourceShape::Steps
        };
        return Ok(Doc {
            fields: map,
            items,
            shape,
        });
    }
    if lookup(&map, "adequate").is_some() {
        return Ok(Doc {
            fields: map,
            items: Vec::new(),
            shape: SourceShape::ValueCell,
        });
    }
    Err(ParseError::UnknownShape(describe(&Value::Object(map))))
}

/// Removes `map[key]` when it is an array (or a JSON string holding one).
fn take_array(
    map: &mut Map<String, Value>,
    key: &str,
    diags: &mut Vec<Diagnostic>,
) -> Result<Option<Vec<Value>>, ParseError> {
    match lookup(map, key) {
        None => return Ok(None),
        Some(Value::Array(_)) => {}
        Some(Value::String(text)) => {
            if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text) {
                map.remove(key);
                diags.push(Diagnostic::info(
                    Code::AutoFixed,
                    "/steps",
                    format!("`{key}` was a JSON string holding an array; it was decoded"),
                ));
                return Ok(Some(items));
            }
            return Err(ParseError::UnknownShape(format!(
                "`{key}` is a string, expected an array of steps"
            )));
        }
        Some(other) => {
            return Err(ParseError::UnknownShape(format!(
                "`{key}` is {}, expected an array of steps",
                describe(other)
            )));
        }
    }
    match map.remove(key) {
        Some(Value::Array(items)) => Ok(Some(items)),
        _ => Ok(None),
    }
}
