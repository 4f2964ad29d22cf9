//! The tool-call plan format: the model answers the way its chat template taught it to call
//! tools, and the answer is read as a plan.
//!
//! Instruction-tuned models (Qwen2.5, Hermes, Llama 3.x, …) were trained to answer a request
//! either with text or with one or more calls,
//!
//! ```text
//! <tool_call>
//! {"name": "get_weather", "arguments": {"city": "Paris"}}
//! </tool_call>
//! <tool_call>
//! {"name": "send_email", "arguments": {"to": "bob@example.com", "body": {"$ref": "s1.output.summary"}}}
//! </tool_call>
//! ```
//!
//! A plan in this format is the calls in order: call N is step `sN`, and an argument that
//! needs an earlier call's result says so with `{"$ref": "sK.output…"}` (its `depends_on` is
//! derived from those references). An answer without calls is a plan of one `reply` step:
//! "no tool fits" is the model's first decision, not a rare branch of a JSON document.
//!
//! On a model with constrained decoding the answer follows a grammar built from
//! [`calls_schema`] (every call's name one of the offered tools, its arguments that tool's
//! model-facing schema); any other model is asked for the same format in the prompt, and its
//! text is read by [`to_plan_json`].

use serde_json::{Map, Value, json};

use crate::catalog::CatalogTool;
use crate::schema::{STEP_REF_PATTERN, model_arguments_schema, step_ref_schema};

/// The tag that opens a call.
pub const CALL_OPEN: &str = "<tool_call>";
/// The tag that closes a call.
pub const CALL_CLOSE: &str = "</tool_call>";

/// The JSON Schema of one call of any of `tools`: `{"name": <const>, "arguments": <the tool's
/// model-facing schema>}`, one member per tool.
pub fn calls_schema(tools: &[&CatalogTool], text_max: u64) -> Value {
    let members: Vec<Value> = tools
        .iter()
        .map(|tool| {
            json!({
                "type": "object",
                "properties": {
                    "name": {"const": tool.tool.name},
                    "arguments": model_arguments_schema(&tool.tool.input_schema, text_max),
                },
                "required": ["name", "arguments"],
                "additionalProperties": false
            })
        })
        .collect();
    json!({"anyOf": members})
}

/// The schema of a call of one of `tools` only (a [`calls_schema`] narrowed); all of
/// `schema` when none of them is in it.
pub fn only_tools(schema: &Value, tools: &[String]) -> Value {
    let Some(members) = schema.get("anyOf").and_then(Value::as_array) else {
        return schema.clone();
    };
    let kept: Vec<Value> = members
        .iter()
        .filter(|member| {
            member["properties"]["name"]["const"]
                .as_str()
                .is_some_and(|name| tools.iter().any(|t| t == name))
        })
        .cloned()
        .collect();
    if kept.is_empty() {
        return schema.clone();
    }
    json!({"anyOf": kept})
}

/// The schema of a call that has `earlier` calls before it (in this answer, or in the plan
/// the answer writes on): its `$ref`s may name only those calls' steps, so the first call has
/// none. A small model that writes `{"$ref": "s1.output"}` into call 1 for a value it does not
/// have yet (the total of four circumferences, before any is computed) is made to write the
/// value the request gives instead. From ten earlier calls on, any step may be named, as in
/// `schema`; validation still rejects a reference that does not come before its step.
pub fn call_schema_at(schema: &Value, earlier: usize) -> Value {
    let pattern = match earlier {
        0 => None,
        1..=9 => Some(STEP_REF_PATTERN.replacen("^s[0-9]{1,3}", &format!("^s[1-{earlier}]"), 1)),
        _ => return schema.clone(),
    };
    let mut schema = schema.clone();
    restrict_refs(&mut schema, pattern.as_deref());
    schema
}

/// Rewrites each `{"anyOf": [original, <step reference>]}` that
/// [`model_arguments_schema`] made: to `original` when `pattern` is `None`, else with the
/// reference's pattern replaced.
fn restrict_refs(value: &mut Value, pattern: Option<&str>) {
    match value {
        Value::Object(object) => {
            let is_ref_choice = object.len() == 1
                && object
                    .get("anyOf")
                    .and_then(Value::as_array)
                    .is_some_and(|choices| choices.len() == 2 && choices[1] == step_ref_schema());
            if is_ref_choice {
                let Some(Value::Array(mut choices)) = object.remove("anyOf") else {
                    return;
                };
                match pattern {
                    None => {
                        *value = choices.swap_remove(0);
                        restrict_refs(value, pattern);
                    }
                    Some(pattern) => {
                        choices[1]["properties"]["$ref"]["pattern"] = json!(pattern);
                        restrict_refs(&mut choices[0], Some(pattern));
                        object.insert("anyOf".to_owned(), Value::Array(choices));
                    }
                }
                return;
            }
            for child in object.values_mut() {
                restrict_refs(child, pattern);
            }
        }
        Value::Array(items) => {
            for item in items {
                restrict_refs(item, pattern);
            }
        }
        _ => {}
    }
}

/// How the format shows one tool to the model: the function object of the chat templates'
/// tools section (`{"type": "function", "function": {name, description, parameters}}`), on
/// one line. A declared output schema is described after the description (`Returns {…}`), so
/// a `$ref` can name one of its fields.
pub fn function_line(
    name: &str,
    description: &str,
    input_schema: &Value,
    output_schema: Option<&Value>,
) -> String {
    let mut description = description.trim().to_owned();
    if let Some(returns) = output_schema.and_then(returns_text) {
        if !description.is_empty() && !description.ends_with('.') {
            description.push('.');
        }
        if !description.is_empty() {
            description.push(' ');
        }
        description.push_str(&returns);
    }
    let mut parameters = input_schema.clone();
    if let Some(object) = parameters.as_object_mut() {
        for noise in ["$schema", "$id", "title"] {
            object.shift_remove(noise);
        }
    }
    let function = json!({
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters}
    });
    // serde_json's compact text has no spaces; the chat templates' `tojson` writes ", " and
    // ": " (Python's json.dumps), which is what the models saw in training.
    spaced_json(&function)
}

/// `Returns {summary: string, temperature: number}` for an object output schema, `Returns a
/// string` for a scalar one; `None` when the schema says nothing useful.
fn returns_text(schema: &Value) -> Option<String> {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        if properties.is_empty() {
            return None;
        }
        let fields: Vec<String> = properties
            .iter()
            .take(12)
            .map(
                |(field, schema)| match schema.get("type").and_then(Value::as_str) {
                    Some(ty) => format!("{field}: {ty}"),
                    None => field.clone(),
                },
            )
            .collect();
        let more = if properties.len() > 12 { ", …" } else { "" };
        return Some(format!(
            "Returns {{{}{more}}}: pass a field on as {{\"$ref\": \"sN.output.FIELD\"}}.",
            fields.join(", ")
        ));
    }
    let ty = schema.get("type").and_then(Value::as_str)?;
    Some(format!(
        "Returns a {ty}: pass it on as {{\"$ref\": \"sN.output\"}}."
    ))
}

/// JSON text with `, ` and `: ` between items, as Python's `json.dumps` writes it.
fn spaced_json(value: &Value) -> String {
    let mut out = String::new();
    write_spaced(value, &mut out);
    out
}

fn write_spaced(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (idx, item) in items.iter().enumerate() {
                if idx > 0 {
                    out.push_str(", ");
                }
                write_spaced(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (idx, (key, item)) in map.iter().enumerate() {
                if idx > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push_str(": ");
                write_spaced(item, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Reads an answer in the tool-call format as a plan document (`{"steps": [...]}`, the
/// ordinary plan shape the parser reads): each call a tool step `sN` with the `depends_on`
/// its `$ref`s name; an answer without a call one reply step with its text. `None` when the
/// answer has neither (empty), or a call whose JSON cannot be read even leniently, so the
/// usual parse and repair take over.
pub fn to_plan_json(raw: &str) -> Option<Value> {
    let raw = strip_thinking(raw);
    let mut steps: Vec<Value> = Vec::new();
    let mut rest = raw;
    while let Some(start) = rest.find(CALL_OPEN) {
        let body_start = start + CALL_OPEN.len();
        let after = &rest[body_start..];
        let (body, next, cut_off) = match after.find(CALL_CLOSE) {
            Some(end) => (&after[..end], &after[end + CALL_CLOSE.len()..], false),
            // A reply cut off inside its last call: what was written is read, leniently.
            None => (after, "", true),
        };
        let call = match read_call(body) {
            Some(call) => call,
            // Too little of it to read: the calls before it stand (the token limit is
            // reported on its own).
            None if cut_off && !steps.is_empty() => break,
            None => return None,
        };
        let id = format!("s{}", steps.len() + 1);
        steps.push(tool_step(&id, call, steps.len()));
        rest = next;
    }
    if steps.is_empty() {
        let text = raw.trim();
        if let Some(calls) = bare_calls(text) {
            for call in calls {
                let id = format!("s{}", steps.len() + 1);
                steps.push(tool_step(&id, call, steps.len()));
            }
        } else if text.is_empty() || text.starts_with(['{', '[', '`']) {
            return None;
        } else {
            steps.push(json!({"id": "s1", "type": "reply", "text": text}));
        }
    }
    Some(json!({"steps": steps}))
}

/// The calls of an answer in the tool-call format, each written again inside its tags (however
/// the answer wrote them), with how many there are; `None` when the answer cannot be read.
pub fn tagged(raw: &str) -> Option<(String, usize)> {
    tagged_after(raw, 0)
}

/// [`tagged`], each `$ref` renumbered for `before` more calls written ahead of these
/// (`s1.output` becomes `s2.output` for one), so the calls can follow new ones.
pub fn tagged_after(raw: &str, before: usize) -> Option<(String, usize)> {
    let plan = to_plan_json(raw)?;
    let steps = plan["steps"].as_array().map_or(&[][..], Vec::as_slice);
    let renamed: std::collections::HashMap<String, String> = (1..=steps.len())
        .map(|n| (format!("s{n}"), format!("s{}", n + before)))
        .collect();
    let mut out = String::new();
    let mut n = 0;
    for step in steps {
        if step["type"] == "tool" {
            let mut arguments = step["arguments"].clone();
            crate::plan::rename_refs(&mut arguments, &renamed);
            let call = json!({"name": step["name"], "arguments": arguments});
            if n > 0 {
                out.push('\n');
            }
            out.push_str(&format!("{CALL_OPEN}\n{call}\n{CALL_CLOSE}"));
            n += 1;
        }
    }
    Some((out, n))
}

/// Calls written without their tags: one or more `{"name", "arguments"}` objects in a row
/// (white space between them), perhaps inside a Markdown code fence, as small models write
/// them. `None` unless every value is such a call.
fn bare_calls(text: &str) -> Option<Vec<Map<String, Value>>> {
    let text = text.trim();
    // Each call in a fence of its own, or all of them in one: the fence lines go.
    let unfenced: String;
    let text = if text.starts_with("```") {
        unfenced = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("```"))
            .collect::<Vec<_>>()
            .join("\n");
        unfenced.as_str()
    } else {
        text
    };
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let mut calls = Vec::new();
    for value in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
        match value.ok()? {
            Value::Object(call)
                if call.get("name").is_some_and(Value::is_string)
                    && call.keys().all(|key| key == "name" || key == "arguments") =>
            {
                calls.push(call);
            }
            _ => return None,
        }
    }
    (!calls.is_empty()).then_some(calls)
}

/// The steps of the calls that are complete so far in a streamed answer, as [`to_plan_json`]
/// makes them: a call counts once its JSON object has closed (and its tag, when tagged). A
/// text answer has no steps until it ends.
pub fn complete_steps(partial: &str) -> Vec<Value> {
    let text = strip_thinking(partial);
    let mut body = String::new();
    let mut rest = text;
    if rest.trim_start().starts_with(CALL_OPEN) {
        while let Some(start) = rest.find(CALL_OPEN) {
            let after = &rest[start + CALL_OPEN.len()..];
            let Some(end) = after.find(CALL_CLOSE) else {
                break;
            };
            body.push_str(&after[..end]);
            body.push('\n');
            rest = &after[end + CALL_CLOSE.len()..];
        }
    } else {
        body = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("```"))
            .collect::<Vec<_>>()
            .join("\n");
    }
    if !body.trim_start().starts_with('{') {
        return Vec::new();
    }
    let mut steps = Vec::new();
    for value in serde_json::Deserializer::from_str(&body).into_iter::<Value>() {
        match value {
            Ok(Value::Object(call)) if call.get("name").is_some_and(Value::is_string) => {
                let id = format!("s{}", steps.len() + 1);
                steps.push(tool_step(&id, call, steps.len()));
            }
            _ => break,
        }
    }
    steps
}

/// The answer without a leading `<think>…</think>` block (reasoning models).
fn strip_thinking(raw: &str) -> &str {
    match raw.find("</think>") {
        Some(end) if raw.trim_start().starts_with("<think>") => &raw[end + "</think>".len()..],
        _ => raw,
    }
}

/// One call's `{"name", "arguments"}` object, read strictly, else leniently; `None` when it
/// is not an object with a name.
fn read_call(body: &str) -> Option<Map<String, Value>> {
    let body = body.trim();
    let value: Value = serde_json::from_str(body).ok().or_else(|| {
        jsonrepair_rs::jsonrepair(body)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
    })?;
    let mut call = match value {
        Value::Object(call) => call,
        _ => return None,
    };
    call.get("name").and_then(Value::as_str)?;
    // Some models write the arguments as a JSON string.
    if let Some(Value::String(text)) = call.get("arguments")
        && let Ok(parsed @ Value::Object(_)) = serde_json::from_str::<Value>(text)
    {
        call.insert("arguments".into(), parsed);
    }
    Some(call)
}

/// The tool step for call `call`, numbered `id`, with the earlier steps (of `earlier`) that
/// its arguments reference as its `depends_on`.
fn tool_step(id: &str, mut call: Map<String, Value>, earlier: usize) -> Value {
    let name = call.remove("name").unwrap_or(Value::Null);
    let arguments = call
        .remove("arguments")
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let mut depends_on: Vec<String> = Vec::new();
    referenced_steps(&arguments, &mut depends_on);
    depends_on.retain(|step| {
        step.strip_prefix('s')
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| (1..=earlier).contains(&n))
    });
    let mut step = json!({
        "id": id,
        "type": "tool",
        "title": name.as_str().unwrap_or_default().replace(['_', '.'], " "),
        "name": name,
        "arguments": arguments,
    });
    if !depends_on.is_empty() {
        step["depends_on"] = json!(depends_on);
    }
    step
}

/// The step ids (`s1` of `s1.output.x`) of every `{"$ref": …}` inside `value`, once each.
fn referenced_steps(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                let step = reference.split(['.', '[']).next().unwrap_or_default();
                if !step.is_empty() && !out.iter().any(|s| s == step) {
                    out.push(step.to_owned());
                }
            }
            map.values().for_each(|item| referenced_steps(item, out));
        }
        Value::Array(items) => items.iter().for_each(|item| referenced_steps(item, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_and_fenced_calls_are_written_again_in_their_tags() {
        let bare = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
        let (text, n) = tagged(bare).unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            text,
            "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>"
        );
        let (again, _) = tagged(&format!("```json\n{bare}\n```")).unwrap();
        assert_eq!(again, text);
        // Two answers in tagged form read as one, numbered on.
        let both = to_plan_json(&format!("{text}\n{text}")).unwrap();
        assert_eq!(both["steps"][1]["id"], "s2");
        assert_eq!(tagged("No function can do that."), Some((String::new(), 0)));
        assert_eq!(tagged(""), None);
    }

    #[test]
    fn a_reply_cut_off_early_in_its_last_call_keeps_the_calls_before_it() {
        let whole =
            "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"gyms\"}}\n</tool_call>";
        let cut = format!("{whole}\n<tool_call>\n{{\"na");
        let plan = to_plan_json(&cut).unwrap();
        assert_eq!(plan["steps"].as_array().unwrap().len(), 1, "{plan}");
        assert_eq!(plan["steps"][0]["name"], "search");
        // Cut off alone, it is nothing to read; a broken call that was closed is not a cut.
        assert_eq!(to_plan_json("<tool_call>\n{\"na"), None);
        assert_eq!(
            to_plan_json(&format!(
                "{whole}\n<tool_call>\n{{\"name\": ]\n</tool_call>"
            )),
            None
        );
    }

    #[test]
    fn calls_written_after_others_have_their_references_renumbered() {
        let raw = "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"gyms\"}}\n</tool_call>\n\
                   <tool_call>\n{\"name\": \"reviews\", \"arguments\": {\"ids\": \
                   [{\"$ref\": \"s1.output.id\"}], \"page\": {\"$ref\": \"s2.output[0]\"}, \"note\": \"s1\"}}\n</tool_call>";
        let (text, n) = tagged_after(raw, 1).unwrap();
        assert_eq!(n, 2);
        let plan = to_plan_json(&text).unwrap();
        let args = &plan["steps"][1]["arguments"];
        assert_eq!(args["ids"][0]["$ref"], "s2.output.id");
        assert_eq!(args["page"]["$ref"], "s3.output[0]");
        assert_eq!(args["note"], "s1", "only references move");
        assert_eq!(tagged_after(raw, 0), tagged(raw));
    }

    #[test]
    fn a_call_may_reference_only_the_calls_before_it() {
        let arguments = model_arguments_schema(
            &json!({"type": "object", "properties": {"radius": {"type": "integer"}},
                    "required": ["radius"]}),
            100,
        );
        let schema = json!({"anyOf": [{"type": "object", "properties": {
            "name": {"const": "circumference"}, "arguments": arguments}}]});
        let call =
            |radius: Value| json!({"name": "circumference", "arguments": {"radius": radius}});
        let valid = |earlier: usize, radius: Value| {
            jsonschema::is_valid(&call_schema_at(&schema, earlier), &call(radius))
        };
        assert!(valid(0, json!(5)));
        assert!(
            !valid(0, json!({"$ref": "s1.output"})),
            "the first call names nothing"
        );
        assert!(valid(1, json!({"$ref": "s1.output"})));
        assert!(!valid(1, json!({"$ref": "s2.output"})), "not itself");
        assert!(valid(3, json!({"$ref": "s3.output.total"})));
        assert!(!valid(3, json!({"$ref": "s4.output"})));
        assert!(
            valid(12, json!({"$ref": "s12.output"})),
            "from ten on, as the schema says"
        );
        assert!(jsonschema::is_valid(
            &schema,
            &call(json!({"$ref": "s1.output"}))
        ));
    }

    #[test]
    fn calls_become_steps_with_their_dependencies() {
        let raw = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"send_email\", \"arguments\": {\"to\": \"bob@example.com\", \"body\": {\"$ref\": \"s1.output.summary\"}, \"cc\": {\"$ref\": \"s9.output\"}}}\n</tool_call>";
        let plan = to_plan_json(raw).unwrap();
        assert_eq!(
            plan,
            json!({"steps": [
                {"id": "s1", "type": "tool", "title": "get weather", "name": "get_weather",
                 "arguments": {"city": "Paris"}},
                {"id": "s2", "type": "tool", "title": "send email", "name": "send_email",
                 "arguments": {"to": "bob@example.com", "body": {"$ref": "s1.output.summary"},
                               "cc": {"$ref": "s9.output"}},
                 "depends_on": ["s1"]}
            ]})
        );
    }

    #[test]
    fn text_is_a_reply_and_broken_calls_are_read_leniently() {
        assert_eq!(
            to_plan_json("  No tool can do that.  ").unwrap(),
            json!({"steps": [{"id": "s1", "type": "reply", "text": "No tool can do that."}]})
        );
        let cut = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1,";
        assert_eq!(
            to_plan_json(cut).unwrap()["steps"][0]["arguments"],
            json!({"x": 1})
        );
        let stringly =
            "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 2}\"}</tool_call>";
        assert_eq!(
            to_plan_json(stringly).unwrap()["steps"][0]["arguments"],
            json!({"x": 2})
        );
        let bare = "{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n{\"name\": \"g\", \"arguments\": {\"y\": {\"$ref\": \"s1.output\"}}}";
        let plan = to_plan_json(bare).unwrap();
        assert_eq!(plan["steps"][1]["name"], "g");
        assert_eq!(plan["steps"][1]["depends_on"], json!(["s1"]));
        let partial =
            "```json\n{\"name\": \"f\", \"arguments\": {}}\n```\n```json\n{\"name\": \"g\", \"argu";
        assert_eq!(complete_steps(partial).len(), 1);
        assert_eq!(complete_steps("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\"").len(), 1);
        assert_eq!(complete_steps("Sure, I").len(), 0);
        let fenced = "```json\n{\"name\": \"f\", \"arguments\": {}}\n```";
        assert_eq!(to_plan_json(fenced).unwrap()["steps"][0]["name"], "f");
        let fences = "```json\n{\"name\": \"f\", \"arguments\": {}}\n```\n```json\n{\"name\": \"g\", \"arguments\": {}}\n```";
        let plan = to_plan_json(fences).unwrap();
        assert_eq!(
            (
                plan["steps"][0]["name"].as_str(),
                plan["steps"][1]["name"].as_str()
            ),
            (Some("f"), Some("g"))
        );
        assert_eq!(to_plan_json(""), None);
        assert_eq!(to_plan_json("{\"steps\": []}"), None);
        assert_eq!(to_plan_json("<tool_call>[1]</tool_call>"), None);
    }

    #[test]
    fn functions_are_shown_as_chat_templates_show_them() {
        let line = function_line(
            "get_weather",
            "Current weather",
            &json!({"type": "object", "title": "x", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            Some(&json!({"type": "object", "properties": {"summary": {"type": "string"}}})),
        );
        assert_eq!(
            line,
            r#"{"type": "function", "function": {"name": "get_weather", "description": "Current weather. Returns {summary: string}: pass a field on as {\"$ref\": \"sN.output.FIELD\"}.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}"#
        );
    }
}
