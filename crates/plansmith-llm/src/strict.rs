//! OpenAI's strict JSON Schema subset, and the way back.
//!
//! Strict structured outputs require every property to be listed in `required` and
//! `additionalProperties: false` on every object, and refuse some keywords. [`to_strict`]
//! rewrites a schema to fit: a property that was optional becomes required but nullable
//! (`anyOf: [T, {"type": "null"}]`), keywords in [`UNSUPPORTED`] are removed (plansmith's
//! validator still checks them against the full schema afterwards), `oneOf` becomes `anyOf`.
//! A free-form object (no `properties`, e.g. a tool whose arguments have no schema) cannot be
//! expressed strictly: [`to_strict`] then returns `None` and the caller sends the original
//! schema with `strict: false`.
//!
//! [`drop_absent_nulls`] maps a strict reply back: a `null` for a property the original schema
//! did not require means "absent" and is removed, so the plan reads as if the model had left it
//! out.

use serde_json::{Map, Value, json};

/// Keywords removed for the strict subset (OpenAI rejects or ignores them in strict mode on many
/// deployments and OpenAI-compatible servers).
pub const UNSUPPORTED: &[&str] = &[
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "maxItems",
    "minItems",
    "uniqueItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "patternProperties",
    "minProperties",
    "maxProperties",
    "default",
    "examples",
    "$schema",
    "$id",
];

/// The bounds on lengths and item counts. A server that decodes with a grammar built from the
/// schema (llama.cpp's server, vLLM) needs them to be sure the reply ends: without `maxItems` SmolLM2 once wrote `depends_on` entries until the token cap.
pub const BOUNDS: &[&str] = &["maxLength", "minLength", "maxItems", "minItems"];

/// The strict form of `schema`, or `None` when it cannot be expressed strictly.
pub fn to_strict(schema: &Value) -> Option<Value> {
    to_strict_keeping(schema, &[])
}

/// [`to_strict`], but the keywords in `keep` stay even where [`UNSUPPORTED`] lists them (an
/// OpenAI-compatible server keeps [`BOUNDS`]).
pub fn to_strict_keeping(schema: &Value, keep: &[&str]) -> Option<Value> {
    let mut out = schema.clone();
    strictify(&mut out, keep).then_some(out)
}

/// Rewrites in place; `false` when some part cannot be made strict.
fn strictify(schema: &mut Value, keep: &[&str]) -> bool {
    let Value::Object(map) = schema else {
        return true;
    };
    for keyword in UNSUPPORTED {
        if !keep.contains(keyword) {
            map.remove(*keyword);
        }
    }
    if let Some(one_of) = map.remove("oneOf") {
        map.insert("anyOf".into(), one_of);
    }
    let mut ok = true;
    for key in ["anyOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(members)) = map.get_mut(key) {
            for member in members {
                ok &= strictify(member, keep);
            }
        }
    }
    if let Some(items) = map.get_mut("items") {
        ok &= strictify(items, keep);
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = map.get_mut(key) {
            for def in defs.values_mut() {
                ok &= strictify(def, keep);
            }
        }
    }
    let is_object =
        map.get("type").and_then(Value::as_str) == Some("object") || map.contains_key("properties");
    if !is_object {
        return ok;
    }
    if !matches!(map.get("properties"), Some(Value::Object(_))) {
        // A free-form object: strict mode has no way to say "any keys".
        return false;
    }
    let required: Vec<String> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let Some(Value::Object(properties)) = map.get_mut("properties") else {
        return false;
    };
    let mut all = Vec::with_capacity(properties.len());
    for (name, property) in properties.iter_mut() {
        ok &= strictify(property, keep);
        if !required.contains(name) && !allows_null(property) {
            let inner = std::mem::take(property);
            *property = json!({"anyOf": [inner, {"type": "null"}]});
        }
        all.push(Value::String(name.clone()));
    }
    map.insert("required".into(), Value::Array(all));
    map.insert("additionalProperties".into(), Value::Bool(false));
    ok
}

fn allows_null(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        _ => schema
            .get("anyOf")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(allows_null)),
    }
}

/// Removes the `null`s a strict reply wrote for properties the original `schema` leaves
/// optional. Follows `properties`, `items` and `anyOf`/`oneOf` (the member whose `const`
/// properties match the value).
pub fn drop_absent_nulls(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(fields) => {
            let schema = pick_member(fields, schema);
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let properties = schema.get("properties").and_then(Value::as_object);
            fields.retain(|name, field| {
                !(field.is_null()
                    && !required.contains(&name.as_str())
                    && properties.is_some_and(|p| p.get(name).is_none_or(|s| !allows_null(s))))
            });
            if let Some(properties) = properties {
                for (name, field) in fields.iter_mut() {
                    if let Some(sub) = properties.get(name) {
                        drop_absent_nulls(field, sub);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    drop_absent_nulls(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

/// The union member an object value belongs to (the schema itself when it is no union).
fn pick_member<'a>(fields: &Map<String, Value>, schema: &'a Value) -> &'a Value {
    let members = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array);
    let Some(members) = members else {
        return schema;
    };
    let fits = |member: &Value| {
        let Some(properties) = member.get("properties").and_then(Value::as_object) else {
            return false;
        };
        properties.iter().all(|(name, sub)| match sub.get("const") {
            Some(constant) => fields.get(name) == Some(constant),
            None => true,
        })
    };
    members
        .iter()
        .find(|m| fits(m))
        .or_else(|| members.iter().find(|m| m.get("properties").is_some()))
        .unwrap_or(schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_becomes_nullable_and_everything_is_closed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 120},
                "steps": {"type": "array", "maxItems": 3, "items": {"anyOf": [
                    {"type": "object", "properties": {"type": {"const": "tool"}, "name": {"const": "a"},
                        "arguments": {"type": "object", "properties": {"to": {"type": "string", "format": "email"}, "cc": {"type": "string"}}, "required": ["to"]}},
                     "required": ["type", "name", "arguments"]}
                ]}}
            },
            "required": ["title", "steps"]
        });
        let strict = to_strict(&schema).unwrap();
        assert_eq!(strict["additionalProperties"], false);
        assert_eq!(strict["properties"]["title"], json!({"type": "string"}));
        let branch = &strict["properties"]["steps"]["items"]["anyOf"][0];
        assert_eq!(branch["additionalProperties"], false);
        let arguments = &branch["properties"]["arguments"];
        assert_eq!(arguments["required"], json!(["to", "cc"]));
        assert_eq!(
            arguments["properties"]["cc"],
            json!({"anyOf": [{"type": "string"}, {"type": "null"}]})
        );
        assert_eq!(arguments["properties"]["to"], json!({"type": "string"}));
        assert!(!strict.to_string().contains("maxItems"));

        let mut reply = json!({"title": "T", "steps": [{"type": "tool", "name": "a", "arguments": {"to": "x@y.z", "cc": null}}]});
        drop_absent_nulls(&mut reply, &schema);
        assert_eq!(reply["steps"][0]["arguments"], json!({"to": "x@y.z"}));
    }

    #[test]
    fn bounds_stay_when_asked_and_other_keywords_still_go() {
        let schema = json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 120, "pattern": "^t"},
                "steps": {"type": "array", "maxItems": 3, "items": {"type": "string", "format": "email"}}
            },
            "required": ["title"]
        });
        let strict = to_strict_keeping(&schema, BOUNDS).unwrap();
        assert_eq!(
            strict["properties"]["title"],
            json!({"type": "string", "maxLength": 120})
        );
        // Optional, so nullable; the bound is kept inside.
        assert_eq!(
            strict["properties"]["steps"],
            json!({"anyOf": [{"type": "array", "maxItems": 3, "items": {"type": "string"}}, {"type": "null"}]})
        );
    }

    #[test]
    fn free_form_objects_cannot_be_strict() {
        let schema = json!({"type": "object", "properties": {"arguments": {"type": "object"}}});
        assert_eq!(to_strict(&schema), None);
    }

    #[test]
    fn explicit_nulls_and_required_nulls_stay() {
        let schema = json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}, "b": {"type": "string"}}, "required": ["b"]});
        let mut reply = json!({"a": null, "b": null});
        drop_absent_nulls(&mut reply, &schema);
        assert_eq!(reply, json!({"a": null, "b": null}));
    }
}
