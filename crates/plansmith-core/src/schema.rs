//! The JSON Schema a model's output must follow, built per request from the selected tools and
//! agents and the options.
//!
//! Backends use it as a `json_schema` response format, as the parameters of a `planning` tool, or
//! as the grammar of constrained decoding. Every free string gets a `maxLength` and every array a
//! `maxItems`, so constrained decoding always ends. Object key order is
//! the order the model should write (`serde_json`'s `preserve_order`): `thought` before `steps`.
//!
//! The model writes the *flat* step form that [`crate::parse`] reads:
//! `{"id": "s1", "type": "tool", "title": …, "name": …, "arguments": {…}, "depends_on": […]}`.

use std::borrow::Cow;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use crate::catalog::{AgentCard, CatalogTool};
use crate::request::{PlanOptions, Shape};

pub use crate::request::DEFAULT_TEXT_MAX;
/// Longest title in the schema.
const TITLE_MAX: u64 = 120;
/// Bound for arrays inside tool arguments that declare none.
const ARRAY_MAX: u64 = 32;
/// Most dependencies of one step (independent of `max_steps`, so tool branches can be cached).
const DEPENDS_MAX: u64 = 16;
/// Most questions a plan may ask.
const QUESTIONS_MAX: u64 = 5;

/// Builds the output schema for one request.
pub fn plan_schema(tools: &[&CatalogTool], agents: &[&AgentCard], options: &PlanOptions) -> Value {
    let max_steps = u64::try_from(options.max_steps.max(1)).unwrap_or(u64::MAX);
    let text_max = u64::from(options.max_string_length.max(16));
    match options.shape {
        Shape::ToolSteps => tool_steps_schema(tools, agents, max_steps, text_max),
        Shape::Research => research_schema(max_steps, text_max),
        Shape::AgentTasks => agent_tasks_schema(agents, max_steps, text_max),
    }
}

/// Schemas built for earlier requests of one planner, keyed by what [`plan_schema`] depends on
/// (shape, bounds, and the names of the selected tools and agents: the planner's catalog is
/// fixed). A service planning similar requests builds each schema once instead of per request,
/// where building (cloning every tool's branch) was a quarter of a request's CPU.
#[derive(Debug, Default)]
pub(crate) struct SchemaCache {
    entries: Mutex<HashMap<String, Arc<Value>>>,
}

/// Distinct schemas kept; the cache starts over when full (top-K selections repeat, so a
/// small bound holds the working set).
const SCHEMA_CACHE_MAX: usize = 256;

impl SchemaCache {
    /// [`plan_schema`] for these arguments, built once.
    pub(crate) fn get(
        &self,
        tools: &[&CatalogTool],
        agents: &[&AgentCard],
        options: &PlanOptions,
    ) -> Arc<Value> {
        let mut key = format!(
            "{:?}\u{1f}{}\u{1f}{}",
            options.shape, options.max_steps, options.max_string_length
        );
        for tool in tools {
            key.push('\u{1e}');
            key.push_str(&tool.tool.name);
        }
        key.push('\u{1f}');
        for agent in agents {
            key.push('\u{1e}');
            key.push_str(&agent.name);
        }
        if let Ok(entries) = self.entries.lock()
            && let Some(schema) = entries.get(&key)
        {
            return Arc::clone(schema);
        }
        let schema = Arc::new(plan_schema(tools, agents, options));
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= SCHEMA_CACHE_MAX {
                entries.clear();
            }
            entries.insert(key, Arc::clone(&schema));
        }
        schema
    }
}

fn string(max: u64) -> Value {
    json!({"type": "string", "maxLength": max})
}

fn tool_steps_schema(
    tools: &[&CatalogTool],
    agents: &[&AgentCard],
    max_steps: u64,
    text_max: u64,
) -> Value {
    let mut branches: Vec<Value> = tools
        .iter()
        .map(|tool| model_step_schema(tool, text_max).into_owned())
        .collect();
    if !agents.is_empty() {
        let names: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
        branches.push(step_branch(
            "agent",
            [
                ("agent", json!({"enum": names})),
                ("query", string(text_max)),
            ],
        ));
    }
    branches.push(step_branch("reply", [("text", string(text_max))]));
    json!({
        "type": "object",
        "properties": {
            "thought": string(text_max),
            "title": string(TITLE_MAX),
            "steps": {"type": "array", "maxItems": max_steps, "items": {"anyOf": branches}},
            "questions": {
                "type": "array",
                "maxItems": QUESTIONS_MAX,
                "items": {
                    "type": "object",
                    "properties": {
                        "text": string(text_max),
                        "step": string(8),
                        "argument": string(64)
                    },
                    "required": ["text"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["thought", "title", "steps"],
        "additionalProperties": false
    })
}

/// A catalog tool's member of the plan schema's step union ([`tool_step_schema`]); kept with
/// the tool for the default string bound, since building it is most of the cost of a request's
/// schema.
pub fn model_step_schema(entry: &CatalogTool, text_max: u64) -> Cow<'_, Value> {
    let tool = &entry.tool;
    let build = || tool_step_schema(&tool.name, &tool.input_schema, text_max);
    if text_max == u64::from(DEFAULT_TEXT_MAX) {
        Cow::Borrowed(entry.model_schema_or(build))
    } else {
        Cow::Owned(build())
    }
}

/// The member of the step union for one tool: `name` is a const, `arguments` the tool's
/// model-facing schema ([`model_arguments_schema`]). Together the members make the tool names
/// an enum, each with its own argument schema.
pub fn tool_step_schema(name: &str, input_schema: &Value, text_max: u64) -> Value {
    step_branch(
        "tool",
        [
            ("name", json!({"const": name})),
            ("arguments", model_arguments_schema(input_schema, text_max)),
        ],
    )
}

/// One member of the step union: `id`, `type` (a const), `title`, the action fields, `depends_on`.
///
/// The title stays before the action, measured: with the action first (and the title after the
/// arguments, or not in the prompt's example) the 0.5B local model added a second call of the
/// same tool with other arguments to 4 of the first 20 BFCL `simple_python` cases (10 plans
/// right instead of 12).
fn step_branch<const N: usize>(kind: &str, fields: [(&str, Value); N]) -> Value {
    let mut properties = Map::new();
    properties.insert(
        "id".into(),
        json!({"type": "string", "pattern": "^s[0-9]{1,3}$"}),
    );
    properties.insert("type".into(), json!({"const": kind}));
    properties.insert("title".into(), string(TITLE_MAX));
    let mut required = vec![json!("id"), json!("type")];
    for (name, schema) in fields {
        properties.insert(name.into(), schema);
        required.push(json!(name));
    }
    properties.insert(
        "depends_on".into(),
        json!({"type": "array", "maxItems": DEPENDS_MAX, "items": {"type": "string", "pattern": "^s[0-9]{1,3}$"}}),
    );
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

fn research_schema(max_steps: u64, text_max: u64) -> Value {
    json!({
        "type": "object",
        "properties": {
            "locale": {"type": "string", "maxLength": 16},
            "has_enough_context": {"type": "boolean"},
            "thought": string(text_max),
            "title": string(TITLE_MAX),
            "steps": {
                "type": "array",
                "maxItems": max_steps,
                "items": {
                    "type": "object",
                    "properties": {
                        "need_web_search": {"type": "boolean"},
                        "title": string(TITLE_MAX),
                        "description": string(text_max),
                        "step_type": {"enum": ["research", "processing"]}
                    },
                    "required": ["need_web_search", "title", "description", "step_type"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["locale", "has_enough_context", "thought", "title", "steps"],
        "additionalProperties": false
    })
}

fn agent_tasks_schema(agents: &[&AgentCard], max_steps: u64, text_max: u64) -> Value {
    let agent_name = if agents.is_empty() {
        string(64)
    } else {
        json!({"enum": agents.iter().map(|a| a.name.as_str()).collect::<Vec<_>>()})
    };
    json!({
        "type": "object",
        "properties": {
            "adequate": {"type": "boolean"},
            "reason": string(text_max),
            "guidance_message": string(text_max),
            "title": string(TITLE_MAX),
            "tasks": {
                "type": "array",
                "maxItems": max_steps,
                "items": {
                    "type": "object",
                    "properties": {
                        "title": string(TITLE_MAX),
                        "query": string(text_max),
                        "agent_name": agent_name,
                        "pattern": {"enum": ["once", "recurring"]},
                        "schedule_config": {
                            "type": "object",
                            "properties": {
                                "interval_minutes": {"type": "integer", "minimum": 1, "maximum": 10080},
                                "daily_time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}
                            },
                            "additionalProperties": false
                        }
                    },
                    "required": ["title", "query", "agent_name", "pattern"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["adequate", "reason", "title", "tasks"],
        "additionalProperties": false
    })
}

/// The model-facing form of a tool's input schema: local `$ref`s inlined, strings and arrays
/// bounded, and each top-level property allowed to be a step reference `{"$ref": "s1.output…"}`.
/// Validation always uses the tool's original schema.
pub fn model_arguments_schema(input_schema: &Value, text_max: u64) -> Value {
    let mut schema = if contains_ref(input_schema) {
        // Recursive schemas cannot be inlined: fall back to a plain object; validation still
        // checks the original.
        jsonschema::dereference(input_schema).unwrap_or_else(|_| json!({"type": "object"}))
    } else {
        input_schema.clone()
    };
    if let Some(object) = schema.as_object_mut() {
        object.remove("$defs");
        object.remove("definitions");
        object.remove("$schema");
        object.remove("$id");
    }
    bound(&mut schema, text_max, true);
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for property in properties.values_mut() {
            let original = property.take();
            *property = json!({"anyOf": [original, step_ref_schema()]});
        }
    }
    if let Some(object) = schema.as_object_mut().filter(|o| !o.contains_key("type")) {
        object.insert("type".into(), json!("object"));
    }
    schema
}

/// A step reference: `s1.output`, then up to six `.key` or `[index]` segments. Anchored at
/// both ends and bounded, as grammar converters require.
pub const STEP_REF_PATTERN: &str =
    "^s[0-9]{1,3}\\.output(\\.[A-Za-z0-9_]{1,40}|\\[[0-9]{1,4}\\]){0,6}$";

/// Schema of a step reference argument.
pub fn step_ref_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"$ref": {"type": "string", "pattern": STEP_REF_PATTERN}},
        "required": ["$ref"],
        "additionalProperties": false
    })
}

fn contains_ref(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("$ref") || map.values().any(contains_ref),
        Value::Array(items) => items.iter().any(contains_ref),
        _ => false,
    }
}

/// Keywords that let an object hold properties besides its own `properties`: an object with
/// any of them is left open.
const OPENING_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "patternProperties",
    "unevaluatedProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "if",
    "dependentSchemas",
];

/// Adds `maxLength` to free strings and `maxItems` to arrays, and closes objects that list
/// their properties (`additionalProperties: false`), recursively. Closing keeps the model to
/// the arguments the prompt shows: JSON Schema allows undeclared keys by default, and a small
/// model under a grammar that follows the default writes some (`"depends_on"` inside the
/// arguments). Members of an `allOf` stay open (closed, they would contradict each other);
/// `close` is false for them.
fn bound(schema: &mut Value, text_max: u64, close: bool) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let lists_properties = object
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty());
    if close && lists_properties && !OPENING_KEYWORDS.iter().any(|k| object.contains_key(*k)) {
        object.insert("additionalProperties".into(), json!(false));
    }
    let types: Vec<String> = match object.get("type") {
        Some(Value::String(ty)) => vec![ty.clone()],
        Some(Value::Array(tys)) => tys
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    let constrained = ["enum", "const", "maxLength", "format", "pattern"]
        .iter()
        .any(|key| object.contains_key(*key));
    if types.iter().any(|t| t == "string") && !constrained {
        object.insert("maxLength".into(), json!(text_max));
    }
    if types.iter().any(|t| t == "array") && !object.contains_key("maxItems") {
        object.insert("maxItems".into(), json!(ARRAY_MAX));
    }
    for key in ["properties", "patternProperties"] {
        if let Some(children) = object.get_mut(key).and_then(Value::as_object_mut) {
            for child in children.values_mut() {
                bound(child, text_max, true);
            }
        }
    }
    // Subschemas, one or a list (`items` may be either). Under `not`, closing would widen what
    // is allowed instead of narrowing it; `allOf` members are read together (see above).
    for (key, close) in [
        ("items", true),
        ("additionalProperties", true),
        ("not", false),
        ("contains", true),
        ("anyOf", true),
        ("oneOf", true),
        ("allOf", false),
        ("prefixItems", true),
    ] {
        match object.get_mut(key) {
            Some(Value::Array(children)) => {
                for child in children {
                    bound(child, text_max, close);
                }
            }
            Some(child) => bound(child, text_max, close),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(name: &str, schema: Value) -> crate::catalog::Catalog {
        crate::catalog::Catalog::from_json(&json!([{"name": name, "input_schema": schema}]))
            .unwrap()
    }

    #[test]
    fn the_cache_builds_each_schema_once_and_keys_on_what_changes_it() {
        let catalog = crate::catalog::Catalog::from_json(&json!([
            {"name": "a", "input_schema": {"type": "object"}},
            {"name": "b", "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}}}
        ]))
        .unwrap();
        let (a, b) = (catalog.tool("a").unwrap(), catalog.tool("b").unwrap());
        let cache = SchemaCache::default();
        let options = PlanOptions::default();
        let first = cache.get(&[a, b], &[], &options);
        assert!(Arc::ptr_eq(&first, &cache.get(&[a, b], &[], &options)));
        assert_eq!(*first, plan_schema(&[a, b], &[], &options));
        // Other tools, another order, other bounds: other schemas, each equal to a fresh build.
        let fewer_steps = PlanOptions {
            max_steps: 2,
            ..PlanOptions::default()
        };
        for (tools, options) in [
            (vec![a], &options),
            (vec![b, a], &options),
            (vec![a, b], &fewer_steps),
        ] {
            let cached = cache.get(&tools, &[], options);
            assert!(!Arc::ptr_eq(&first, &cached));
            assert_eq!(*cached, plan_schema(&tools, &[], options));
        }
    }

    #[test]
    fn schema_is_valid_and_bounds_every_string() {
        let catalog = catalog(
            "get_weather",
            json!({"type": "object", "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "days": {"type": "array", "items": {"type": "string"}}
            }, "required": ["city"]}),
        );
        let options = PlanOptions {
            max_steps: 4,
            ..PlanOptions::default()
        };
        let weather = catalog.tool("get_weather").unwrap();
        let schema = plan_schema(&[weather], &[], &options);
        jsonschema::meta::validate(&schema).unwrap();
        let args = &schema["properties"]["steps"]["items"]["anyOf"][0]["properties"]["arguments"];
        assert_eq!(
            args["properties"]["city"]["anyOf"][0]["maxLength"],
            json!(1000)
        );
        assert!(
            args["properties"]["unit"]["anyOf"][0]
                .get("maxLength")
                .is_none()
        );
        assert_eq!(
            args["properties"]["days"]["anyOf"][0]["maxItems"],
            json!(32)
        );
        assert_eq!(
            args["properties"]["days"]["anyOf"][0]["items"]["maxLength"],
            json!(1000)
        );
        assert_eq!(schema["properties"]["steps"]["maxItems"], json!(4));

        let validator = jsonschema::validator_for(&schema).unwrap();
        let good = json!({"thought": "t", "title": "t", "steps": [
            {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}},
            {"id": "s2", "type": "tool", "name": "get_weather", "arguments": {"city": {"$ref": "s1.output.city"}}, "depends_on": ["s1"]},
            {"id": "s3", "type": "reply", "text": "ok"}
        ]});
        assert!(validator.is_valid(&good));
        for bad in [
            json!({"thought": "t", "title": "t", "steps": [{"id": "s1", "type": "tool", "name": "nope", "arguments": {}}]}),
            json!({"thought": "t", "title": "t", "steps": [{"id": "s1", "type": "tool", "name": "get_weather", "arguments": {}}]}),
            json!({"thought": "t", "title": "t", "steps": [{"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": 3}}]}),
            json!({"thought": "t", "title": "t", "steps": [{"id": "s1", "type": "reply", "text": "a"}, {"id": "s2", "type": "reply", "text": "a"},
                {"id": "s3", "type": "reply", "text": "a"}, {"id": "s4", "type": "reply", "text": "a"}, {"id": "s5", "type": "reply", "text": "a"}]}),
        ] {
            assert!(!validator.is_valid(&bad), "{bad}");
        }
    }

    #[test]
    fn local_refs_are_inlined() {
        let schema = json!({"type": "object", "$defs": {"c": {"type": "string"}}, "properties": {"city": {"$ref": "#/$defs/c"}}});
        let model = model_arguments_schema(&schema, 50);
        assert!(
            !contains_ref(&model["properties"]["city"]["anyOf"][0]),
            "{model}"
        );
        assert_eq!(
            model["properties"]["city"]["anyOf"][0]["maxLength"],
            json!(50)
        );
    }

    #[test]
    fn objects_that_list_their_properties_are_closed_to_the_model() {
        let schema = json!({"type": "object",
            "properties": {
                "to": {"type": "string"},
                "meta": {"type": "object", "properties": {"tag": {"type": "string"}}},
                "headers": {"type": "object"},
                "extra": {"type": "object", "properties": {"a": {"type": "integer"}},
                          "additionalProperties": {"type": "integer"}},
                "both": {"allOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}},
                    {"type": "object", "properties": {"b": {"type": "integer"}}}]},
                "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}}}}
            },
            "required": ["to"]});
        let model = model_arguments_schema(&schema, 50);
        let validator = jsonschema::validator_for(&model).unwrap();
        assert_eq!(model["additionalProperties"], json!(false), "{model}");
        // What the model may write: declared arguments, a free-form map, allOf members together.
        assert!(validator.is_valid(&json!({"to": "x", "headers": {"any": 1},
            "both": {"a": 1, "b": 2}, "extra": {"a": 1, "more": 2}})));
        // What it may not: an undeclared argument, at the top or nested.
        for wrong in [
            json!({"to": "x", "depends_on": ["s1"]}),
            json!({"to": "x", "meta": {"tag": "t", "other": 1}}),
            json!({"to": "x", "list": [{"x": 1, "y": 2}]}),
        ] {
            assert!(!validator.is_valid(&wrong), "{wrong} passed {model}");
        }
        // The tool's own schema is not changed: validation still uses it.
        assert!(
            jsonschema::validator_for(&schema)
                .unwrap()
                .is_valid(&json!({"to": "x", "depends_on": ["s1"]}))
        );
    }

    #[test]
    fn other_shapes_are_valid_schemas() {
        let agent = AgentCard {
            name: "ResearchAgent".into(),
            description: String::new(),
            skills: vec![],
            capabilities: Map::new(),
            passthrough: false,
        };
        for shape in [Shape::Research, Shape::AgentTasks] {
            let options = PlanOptions {
                shape,
                ..PlanOptions::default()
            };
            let schema = plan_schema(&[], &[&agent], &options);
            jsonschema::meta::validate(&schema).unwrap();
        }
    }
}
