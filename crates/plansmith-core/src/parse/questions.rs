//! Reading the plan's clarifying questions.

use serde_json::Value;

use super::fields::{lookup, scalar_string, str_field};
use super::ids::{IdMap, Resolved};
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{InputMode, Question};

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
            Value::String(text) if !text.trim().is_empty() => {
                Some(Question::new(default_id, text.trim()))
            }
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
                options: options(map),
                // A kind the model names is kept; any other reads as missing information.
                kind: lookup(map, "kind")
                    .and_then(Value::as_str)
                    .and_then(|k| k.parse().ok())
                    .unwrap_or_default(),
                input: if options(map).is_empty() {
                    InputMode::Text
                } else {
                    InputMode::Choice
                },
                schema: None,
                // The model's recommended answer, when it gives one (`default`, `recommended`).
                default: ["default", "recommended"]
                    .iter()
                    .find_map(|key| lookup(map, key).and_then(scalar_string))
                    .filter(|d| !d.trim().is_empty()),
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

/// A question's `options`, each as text.
fn options(map: &serde_json::Map<String, Value>) -> Vec<String> {
    match lookup(map, "options") {
        Some(Value::Array(options)) => options
            .iter()
            .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}
