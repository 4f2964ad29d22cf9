//! Reading the plan's clarifying questions.

use serde_json::Value;

use super::fields::{lookup, scalar_string, str_field};
use super::ids::{IdMap, Resolved};
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::Question;

/// Clarifying questions: plain strings or `{text|question, id?, step?, argument?, options?}`.
pub(super) fn convert_questions(
    value: Option<&Value>,
    ids: &IdMap,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Question> {
    let items: Vec<&Value> = match value {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(single @ Value::String(_)) => vec![single],
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    for (idx, item) in items.into_iter().enumerate() {
        let default_id = format!("q{}", out.len() + 1);
        let question = match item {
            Value::String(text) if !text.trim().is_empty() => Some(Question {
                id: default_id,
                text: text.trim().to_owned(),
                step: None,
                argument: None,
                options: Vec::new(),
            }),
            Value::Object(map) => str_field(map, &["text", "question"]).map(|(_, text)| Question {
                id: lookup(map, "id")
                    .and_then(scalar_string)
                    .unwrap_or(default_id),
                text: text.to_owned(),
                step: lookup(map, "step").and_then(|step| match step {
                    Value::Null => None,
                    other => match ids.resolve(other) {
                        (Resolved::Step(id), _) | (Resolved::Unknown, id) => Some(id),
                        // The step was left out; its old id may now name another step.
                        (Resolved::Dropped, _) => None,
                    },
                }),
                argument: str_field(map, &["argument", "arg"]).map(|(_, a)| a.to_owned()),
                options: match lookup(map, "options") {
                    Some(Value::Array(options)) => options
                        .iter()
                        .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_owned))
                        .collect(),
                    _ => Vec::new(),
                },
            }),
            _ => None,
        };
        match question {
            Some(question) => out.push(question),
            None => diags.push(
                Diagnostic::warning(
                    Code::InvalidStep,
                    format!("/questions/{idx}"),
                    "a question without text was left out",
                )
                .with_value(item.clone()),
            ),
        }
    }
    out
}
