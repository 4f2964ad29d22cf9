//! Tool steps: the tool's name (a near miss is corrected to the catalog's name), every argument
//! against the tool's JSON Schema with formats (a `$ref` is left to the reference checks), and
//! the approval a destructive tool needs before it runs. A date is first written the way the
//! argument's schema asks for it (`dates`).

use serde_json::{Value, json};

use crate::catalog::Catalog;
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Action, Step, collect_refs, escape_pointer};

/// Checks the tool step `step`, whose JSON pointer is `base`.
pub(super) fn check_tool(
    step: &mut Step,
    base: &str,
    catalog: &Catalog,
    diags: &mut Vec<Diagnostic>,
) {
    let step_id = step.id.clone();
    let Action::Tool { name, arguments } = &mut step.action else {
        return;
    };
    if catalog.tool(name).is_none() {
        match catalog.tool_near(name) {
            Some(near) => {
                diags.push(
                    Diagnostic::warning(
                        Code::AutoFixed,
                        format!("{base}/action/name"),
                        format!(
                            "tool `{name}` is not in the catalog; using `{}`",
                            near.tool.name
                        ),
                    )
                    .with_step(step_id.clone()),
                );
                *name = near.tool.name.clone();
            }
            None => {
                diags.push(
                    Diagnostic::error(
                        Code::UnknownTool,
                        format!("{base}/action/name"),
                        format!("tool `{name}` is not in the catalog"),
                    )
                    .with_step(step_id)
                    .with_value(json!(name)),
                );
                return;
            }
        }
    }
    let Some(entry) = catalog.tool(name) else {
        return;
    };
    for (key, was) in super::dates::conform(arguments, &entry.tool.input_schema) {
        let now = arguments.get(&key).cloned().unwrap_or(Value::Null);
        diags.push(
            Diagnostic::warning(
                Code::AutoFixed,
                format!("{base}/action/arguments/{}", escape_pointer(&key)),
                format!("`{key}` of tool `{name}` takes a date as its schema writes it: {was:?} is now {now}"),
            )
            .with_step(step_id.clone()),
        );
    }
    let mut refs = Vec::new();
    let args_value = Value::Object(std::mem::take(arguments));
    collect_refs(&args_value, "", &mut refs);
    for error in entry.validator().iter_errors(&args_value) {
        let path = error.instance_path().to_string();
        if refs.iter().any(|(ref_pointer, _)| {
            path == *ref_pointer || path.starts_with(&format!("{ref_pointer}/"))
        }) {
            continue;
        }
        let pointer = format!("{base}/action/arguments{path}");
        let diag = match error.kind() {
            jsonschema::error::ValidationErrorKind::Required { property } => {
                let argument = property.as_str().unwrap_or_default();
                Diagnostic::error(
                    Code::MissingArgument,
                    format!("{pointer}/{}", escape_pointer(argument)),
                    format!("tool `{name}` requires argument `{argument}`"),
                )
            }
            jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                Diagnostic::error(
                    Code::UnknownArgument,
                    pointer,
                    format!(
                        "tool `{name}` has no argument {}",
                        unexpected
                            .iter()
                            .map(|u| format!("`{u}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .with_value(json!(unexpected))
            }
            _ => Diagnostic::error(Code::InvalidArgument, pointer, error.to_string())
                .with_value(error.instance().clone().into_owned()),
        };
        diags.push(diag.with_step(step_id.clone()));
    }
    if let Value::Object(map) = args_value {
        *arguments = map;
    }
    if entry.tool.is_destructive() && !step.requires_approval {
        step.requires_approval = true;
        diags.push(
            Diagnostic::info(
                Code::ApprovalRequired,
                format!("{base}/requires_approval"),
                format!(
                    "tool `{name}` is marked destructive: the step needs approval before it runs"
                ),
            )
            .with_step(step_id),
        );
    }
}
