//! Reading loosely typed JSON fields: aliases, strings that should be numbers or booleans, and
//! short descriptions of values for messages.

use serde_json::{Map, Value};

/// A short description of a JSON value for error messages.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(_) => "a boolean".to_owned(),
        Value::Number(_) => "a number".to_owned(),
        Value::String(_) => "a string".to_owned(),
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::Object(map) if map.is_empty() => "an empty object".to_owned(),
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().take(8).map(|key| format!("`{key}`")).collect();
            let more = if map.len() > 8 { ", …" } else { "" };
            format!(
                "an object with keys {}{more}; expected `steps`, `plan`, `tasks` or \
                 `execution_plan`",
                keys.join(", ")
            )
        }
    }
}

/// The first of `keys` that holds a non-blank string, trimmed.
pub(super) fn str_field<'m>(
    map: &'m Map<String, Value>,
    keys: &[&'static str],
) -> Option<(&'static str, &'m str)> {
    keys.iter().find_map(|key| {
        lookup(map, key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|text| !text.is_empty())
            .map(|text| (*key, text))
    })
}

/// `map[key]`. A step object has a handful of keys and the parser asks it for dozens of
/// aliases, most of them absent: comparing a few short keys is several times cheaper than
/// hashing each alias with the map's SipHash, so small maps are scanned.
pub(super) fn lookup<'m>(map: &'m Map<String, Value>, key: &str) -> Option<&'m Value> {
    const SCAN_MAX: usize = 12;
    if map.len() <= SCAN_MAX {
        map.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        map.get(key)
    }
}

/// [`lookup`] in an object; `None` for any other value.
pub(super) fn lookup_in<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    value.as_object().and_then(|map| lookup(map, key))
}

/// A string or a number, as a string.
pub(super) fn scalar_string(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if !text.trim().is_empty() => Some(text.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A boolean, also when written as a string.
pub(super) fn as_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::String(text) => match text.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" => Some(true),
            "false" | "no" => Some(false),
            _ => None,
        },
        _ => None,
    }
}
