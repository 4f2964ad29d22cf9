//! Step references in tool arguments: each `$ref` must be well-formed, name an earlier step
//! (which becomes a dependency when it is not one yet), and follow a path that fits the
//! referenced tool's `output_schema` and the argument's type.

use serde_json::{Value, json};

use crate::catalog::Catalog;
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Action, PathSegment, Plan, StepRef, collect_refs, escape_pointer};

pub(super) fn check_refs(plan: &mut Plan, catalog: &Catalog, diags: &mut Vec<Diagnostic>) {
    for idx in 0..plan.steps.len() {
        let Some(step) = plan.steps.get(idx) else {
            continue;
        };
        let Action::Tool { name, arguments } = &step.action else {
            continue;
        };
        let mut refs = Vec::new();
        for (key, value) in arguments {
            collect_refs(value, &format!("/{}", escape_pointer(key)), &mut refs);
        }
        let step_id = step.id.clone();
        let tool_name = name.clone();
        for (pointer, text) in refs {
            let full_pointer = format!("/steps/{idx}/action/arguments{pointer}");
            let error = |message: String| {
                Diagnostic::error(Code::InvalidRef, full_pointer.clone(), message)
                    .with_step(step_id.clone())
                    .with_value(json!({"$ref": text}))
            };
            let reference = match StepRef::parse(&text) {
                Ok(reference) => reference,
                Err(message) => {
                    diags.push(error(message));
                    continue;
                }
            };
            let Some(target_idx) = plan.step_index(&reference.step) else {
                diags.push(error(format!(
                    "`$ref` names step `{}`, which is not in the plan",
                    reference.step
                )));
                continue;
            };
            if target_idx >= idx {
                diags.push(error(format!(
                    "`$ref` names step `{}`, which does not come before step `{step_id}`",
                    reference.step
                )));
                continue;
            }
            if !plan.ancestors(&step_id).contains(&reference.step.as_str()) {
                if let Some(step) = plan.steps.get_mut(idx) {
                    step.depends_on.push(reference.step.clone());
                }
                diags.push(
                    Diagnostic::warning(
                        Code::AutoFixed,
                        format!("/steps/{idx}/depends_on"),
                        format!(
                            "step `{step_id}` uses the output of `{}`; added it to depends_on",
                            reference.step
                        ),
                    )
                    .with_step(step_id.clone()),
                );
            }
            if let Some(mismatch) =
                check_ref_type(plan, catalog, &tool_name, &pointer, target_idx, &reference)
            {
                // The whole output where one of its fields fits: that field is meant
                // (`body: s1.output` after a tool returning `{temperature, summary}`).
                if let [field] = mismatch.fitting.as_slice()
                    && reference.path.is_empty()
                {
                    let narrowed = format!("{text}.{field}");
                    if let Some(Action::Tool { arguments, .. }) =
                        plan.steps.get_mut(idx).map(|s| &mut s.action)
                        && let Some(slot) = pointer_mut(arguments, &pointer)
                    {
                        *slot = json!({ "$ref": narrowed });
                        diags.push(
                            Diagnostic::warning(
                                Code::AutoFixed,
                                full_pointer.clone(),
                                format!(
                                    "{}; the one field of it that fits is taken: `{narrowed}`",
                                    mismatch.message
                                ),
                            )
                            .with_step(step_id.clone())
                            .with_value(json!({"$ref": text})),
                        );
                        continue;
                    }
                }
                diags.push(
                    Diagnostic::error(
                        Code::RefTypeMismatch,
                        full_pointer.clone(),
                        mismatch.message,
                    )
                    .with_step(step_id.clone())
                    .with_value(json!({"$ref": text})),
                );
            }
        }
    }
}

/// Where a path leads inside a schema.
enum SchemaAt<'a> {
    Found(&'a Value),
    Unknown,
    Missing(String),
}

fn schema_at<'a>(schema: &'a Value, path: &[PathSegment]) -> SchemaAt<'a> {
    let mut current = schema;
    for segment in path {
        let next = match segment {
            PathSegment::Key(key) => {
                if let Some(child) = current.get("properties").and_then(|p| p.get(key)) {
                    Some(child)
                } else if current.get("additionalProperties") == Some(&Value::Bool(false))
                    || current
                        .get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| t != "object")
                {
                    return SchemaAt::Missing(format!("no field `{key}`"));
                } else {
                    current
                        .get("additionalProperties")
                        .filter(|v| v.is_object())
                }
            }
            PathSegment::Index(index) => {
                if current
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t != "array")
                {
                    return SchemaAt::Missing(format!("`[{index}]` indexes a non-array"));
                }
                current
                    .get("prefixItems")
                    .and_then(|p| p.get(*index))
                    .or_else(|| current.get("items").filter(|v| v.is_object()))
            }
        };
        match next {
            Some(child) => current = child,
            None => return SchemaAt::Unknown,
        }
    }
    SchemaAt::Found(current)
}

fn schema_types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(ty)) => vec![ty.as_str()],
        Some(Value::Array(tys)) => tys.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// A reference whose value does not fit its argument.
struct Mismatch {
    /// What does not fit.
    message: String,
    /// The fields of the referenced value (an object) whose type fits the argument.
    fitting: Vec<String>,
}

/// The value at JSON Pointer `pointer` (`/body`, `/items/0`) inside a step's arguments.
fn pointer_mut<'a>(
    arguments: &'a mut serde_json::Map<String, Value>,
    pointer: &str,
) -> Option<&'a mut Value> {
    let mut tokens = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"));
    let first = tokens.next()?;
    let mut current = arguments.get_mut(&first)?;
    for token in tokens {
        current = match current {
            Value::Object(map) => map.get_mut(&token)?,
            Value::Array(items) => items.get_mut(token.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(current)
}

/// Checks a reference against the referenced tool's `output_schema` and the argument's schema;
/// returns what does not fit.
fn check_ref_type(
    plan: &Plan,
    catalog: &Catalog,
    tool_name: &str,
    arg_pointer: &str,
    target_idx: usize,
    reference: &StepRef,
) -> Option<Mismatch> {
    let target = plan.steps.get(target_idx)?;
    let Action::Tool {
        name: target_tool, ..
    } = &target.action
    else {
        return None;
    };
    let output_schema = catalog.tool(target_tool)?.tool.output_schema.as_ref()?;
    let produced = match schema_at(output_schema, &reference.path) {
        SchemaAt::Found(schema) => schema,
        SchemaAt::Unknown => return None,
        SchemaAt::Missing(why) => {
            return Some(Mismatch {
                message: format!(
                    "`{reference}` does not fit the output schema of `{target_tool}`: {why}"
                ),
                fitting: Vec::new(),
            });
        }
    };
    let input_schema = &catalog.tool(tool_name)?.tool.input_schema;
    let arg_path: Vec<PathSegment> = arg_pointer
        .split('/')
        .skip(1)
        .map(|token| match token.parse::<usize>() {
            Ok(index) => PathSegment::Index(index),
            Err(_) => PathSegment::Key(token.replace("~1", "/").replace("~0", "~")),
        })
        .collect();
    let SchemaAt::Found(expected) = schema_at(input_schema, &arg_path) else {
        return None;
    };
    let expected_types = schema_types(expected);
    let produced_types = schema_types(produced);
    if expected_types.is_empty() || produced_types.is_empty() {
        return None;
    }
    let fits = |produced: &[&str]| {
        produced.iter().any(|p| {
            expected_types.contains(p) || (*p == "integer" && expected_types.contains(&"number"))
        })
    };
    if fits(&produced_types) {
        return None;
    }
    let fitting = produced
        .get("properties")
        .and_then(Value::as_object)
        .map(|fields| {
            fields
                .iter()
                .filter(|(name, field)| {
                    fits(&schema_types(field))
                        && name
                            .chars()
                            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
                })
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default();
    Some(Mismatch {
        message: format!(
            "`{reference}` is {} but the argument expects {}",
            produced_types.join("|"),
            expected_types.join("|")
        ),
        fitting,
    })
}
