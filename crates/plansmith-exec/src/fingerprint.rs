//! The fingerprints that detect a stall during a run: the same failure, or the same failing
//! call, coming back after a replan.

use std::collections::BTreeMap;

use plansmith_core::Action;
use serde_json::Value;

/// What a step calls, independent of its id: the action type, name and canonical arguments.
pub fn call_fingerprint(action: &Action) -> String {
    match action {
        Action::Tool { name, arguments } => {
            let sorted: BTreeMap<&String, String> =
                arguments.iter().map(|(k, v)| (k, canonical(v))).collect();
            format!("tool:{name}:{sorted:?}")
        }
        Action::Agent { agent, query } => format!("agent:{agent}:{query}"),
        Action::Task { kind, .. } => format!("task:{kind}"),
        Action::Reply { text } => format!("reply:{text}"),
    }
}

fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, String> =
                map.iter().map(|(k, v)| (k, canonical(v))).collect();
            format!("{sorted:?}")
        }
        Value::Array(items) => format!("{:?}", items.iter().map(canonical).collect::<Vec<_>>()),
        other => other.to_string(),
    }
}

/// What failed and how, independent of ids, attempt numbers and timings: the action's name
/// and the error with digits removed.
pub fn failure_fingerprint(action: &Action, error: &str) -> String {
    let name = match action {
        Action::Tool { name, .. } => format!("tool:{name}"),
        Action::Agent { agent, .. } => format!("agent:{agent}"),
        Action::Task { kind, .. } => format!("task:{kind}"),
        Action::Reply { .. } => "reply".to_owned(),
    };
    let error: String = error
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    format!("{name}|{error}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprints_ignore_ids_digits_and_key_order() {
        let a = Action::Tool {
            name: "t".into(),
            arguments: json!({"a": 1, "b": {"y": 2, "x": 1}})
                .as_object()
                .cloned()
                .unwrap(),
        };
        let b = Action::Tool {
            name: "t".into(),
            arguments: json!({"b": {"x": 1, "y": 2}, "a": 1})
                .as_object()
                .cloned()
                .unwrap(),
        };
        assert_eq!(call_fingerprint(&a), call_fingerprint(&b));
        assert_eq!(
            failure_fingerprint(&a, "exit 3 after 120 ms"),
            failure_fingerprint(&b, "exit 4 after  7 ms")
        );
        assert_ne!(
            failure_fingerprint(&a, "timeout"),
            failure_fingerprint(&a, "refused")
        );
    }
}
