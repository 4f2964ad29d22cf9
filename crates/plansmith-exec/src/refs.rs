//! Filling `$ref` arguments (`{"$ref": "s1.output.items[0].id"}`) from earlier results, and
//! checking results against a tool's declared `output_schema`.

use std::collections::HashMap;

use plansmith_core::StepRef;
use plansmith_core::plan::PathSegment;
use serde_json::Value;

/// Why a reference could not be filled: the plan expected something the results do not have
/// (a contradiction the replanner is told about).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RefError(pub String);

/// `value` with every `$ref` replaced by the referenced part of `results` (step id → result).
pub fn resolve(value: &Value, results: &HashMap<String, Value>) -> Result<Value, RefError> {
    resolve_depth(value, results, 0)
}

/// Deepest nesting of arguments walked (a bound against pathological documents).
const MAX_DEPTH: usize = 64;

fn resolve_depth(
    value: &Value,
    results: &HashMap<String, Value>,
    depth: usize,
) -> Result<Value, RefError> {
    if depth > MAX_DEPTH {
        return Err(RefError(format!("arguments nest deeper than {MAX_DEPTH}")));
    }
    if let Some(text) = StepRef::reference_in(value) {
        let reference = StepRef::parse(text).map_err(RefError)?;
        let Some(result) = results.get(&reference.step) else {
            return Err(RefError(format!(
                "`{text}` refers to step `{}`, which has no result",
                reference.step
            )));
        };
        return lookup(result, &reference).cloned().ok_or_else(|| {
            RefError(format!(
                "`{text}`: the result of `{}` has no such path (it is {})",
                reference.step,
                preview(result, 200)
            ))
        });
    }
    Ok(match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), resolve_depth(v, results, depth + 1)?)))
                .collect::<Result<_, RefError>>()?,
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| resolve_depth(v, results, depth + 1))
                .collect::<Result<_, RefError>>()?,
        ),
        other => other.clone(),
    })
}

fn lookup<'a>(result: &'a Value, reference: &StepRef) -> Option<&'a Value> {
    let mut at = result;
    for segment in &reference.path {
        at = match segment {
            PathSegment::Key(key) => at.get(key.as_str())?,
            PathSegment::Index(idx) => at.get(*idx)?,
        };
    }
    Some(at)
}

/// A short JSON rendering (at most `max_chars` characters).
pub fn preview(value: &Value, max_chars: usize) -> String {
    let text = value.to_string();
    if text.chars().count() <= max_chars {
        text
    } else {
        let cut: String = text.chars().take(max_chars).collect();
        format!("{cut}…")
    }
}

/// Checks `result` against `schema` (a tool's `output_schema`); the first problems, joined.
pub fn check_output(schema: &Value, result: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|err| format!("the tool's output_schema does not compile: {err}"))?;
    let problems: Vec<String> = validator
        .iter_errors(result)
        .take(3)
        .map(|err| format!("{} at `{}`", err, err.instance_path()))
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the result does not match the tool's output_schema: {}",
            problems.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refs_resolve_or_say_why() {
        let results: HashMap<String, Value> = [(
            "s1".to_owned(),
            json!({"items": [{"id": "a1"}, {"id": "a2"}], "n": 2}),
        )]
        .into_iter()
        .collect();
        let args = json!({"id": {"$ref": "s1.output.items[1].id"}, "all": [{"$ref": "s1.output.n"}], "k": 3});
        assert_eq!(
            resolve(&args, &results).unwrap(),
            json!({"id": "a2", "all": [2], "k": 3})
        );
        let missing = resolve(&json!({"$ref": "s1.output.items[5].id"}), &results).unwrap_err();
        assert!(missing.0.contains("no such path"), "{missing}");
        let no_step = resolve(&json!({"$ref": "s9.output"}), &results).unwrap_err();
        assert!(no_step.0.contains("s9"), "{no_step}");
    }

    #[test]
    fn output_schema_is_checked() {
        let schema = json!({"type": "object", "required": ["temp"], "properties": {"temp": {"type": "number"}}});
        assert!(check_output(&schema, &json!({"temp": 3.5})).is_ok());
        let err = check_output(&schema, &json!({"temp": "hot"})).unwrap_err();
        assert!(err.contains("/temp"), "{err}");
    }
}
