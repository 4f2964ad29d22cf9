//! Step references on the wire.
//!
//! A plan argument may be a step reference, `{"$ref": "s1.output.city"}`, and the plan schema
//! says so with a property *named* `$ref`. Servers that walk a schema treating every `$ref` key
//! as a JSON reference break on it: llama-cpp-python's schema-to-grammar converter raises on it
//! and silently falls back to unconstrained JSON. So the schemas sent to providers name that
//! property [`WIRE_KEY`] instead, and replies are mapped back before the core parser sees them.
//! Only keys of `properties` maps and entries of `required` lists are renamed: `$ref` keywords
//! (real references) are left alone.

use serde_json::Value;

/// The name a step reference's key has on the wire.
pub const WIRE_KEY: &str = "step_ref";

/// `schema` with every `properties.$ref` (and `required: ["$ref"]`) renamed to [`WIRE_KEY`].
pub fn to_wire(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let value = match (key.as_str(), value) {
                        ("properties", Value::Object(props)) => Value::Object(
                            props
                                .iter()
                                .map(|(name, sub)| {
                                    let name = if name == "$ref" { WIRE_KEY } else { name };
                                    (name.to_owned(), to_wire(sub))
                                })
                                .collect(),
                        ),
                        ("required", Value::Array(names)) => Value::Array(
                            names
                                .iter()
                                .map(|n| match n.as_str() {
                                    Some("$ref") => Value::from(WIRE_KEY),
                                    _ => n.clone(),
                                })
                                .collect(),
                        ),
                        _ => to_wire(value),
                    };
                    (key.clone(), value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(to_wire).collect()),
        other => other.clone(),
    }
}

/// Renames the key of every `{"step_ref": "<string>"}` object in `value` back to `$ref`.
pub fn restore(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.len() == 1
                && let Some(target) = map.get(WIRE_KEY).filter(|v| v.is_string()).cloned()
            {
                map.clear();
                map.insert("$ref".to_owned(), target);
                return;
            }
            map.values_mut().for_each(restore);
        }
        Value::Array(items) => items.iter_mut().for_each(restore),
        _ => {}
    }
}

/// [`restore`] on a reply's text when it is JSON; other text (prose around JSON, cut off) gets
/// the same renaming textually, for the core parser's tolerant reading.
pub fn restore_text(text: &str) -> String {
    if !text.contains(WIRE_KEY) {
        return text.to_owned();
    }
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(mut value) => {
            restore(&mut value);
            value.to_string()
        }
        Err(_) => text.replace(&format!("\"{WIRE_KEY}\""), "\"$ref\""),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn schemas_and_replies_round_trip() {
        let schema = json!({"type": "object", "properties": {
            "city": {"anyOf": [{"type": "string"}, {"type": "object",
                "properties": {"$ref": {"type": "string", "pattern": "^s1"}},
                "required": ["$ref"], "additionalProperties": false}]},
            "doc": {"$ref": "#/$defs/doc"}}});
        let wire = to_wire(&schema);
        let text = wire.to_string();
        assert!(!text.contains("\"properties\":{\"$ref\""), "{text}");
        assert_eq!(
            wire["properties"]["city"]["anyOf"][1]["required"],
            json!(["step_ref"])
        );
        assert_eq!(
            wire["properties"]["doc"]["$ref"], "#/$defs/doc",
            "real references are kept"
        );
        let mut reply = json!({"steps": [{"arguments": {"city": {"step_ref": "s1.output.city"},
            "filter": {"step_ref": "x", "other": 1}, "n": {"step_ref": 3}}}]});
        restore(&mut reply);
        assert_eq!(
            reply["steps"][0]["arguments"],
            json!({"city": {"$ref": "s1.output.city"},
                   "filter": {"step_ref": "x", "other": 1}, "n": {"step_ref": 3}})
        );
        assert_eq!(
            restore_text("Plan: {\"a\": {\"step_ref\": \"s1.output\"}"),
            "Plan: {\"a\": {\"$ref\": \"s1.output\"}"
        );
        assert_eq!(restore_text("no refs"), "no refs");
    }
}
