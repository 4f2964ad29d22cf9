//! Tools and agents a plan may use: [`Tool`], [`AgentCard`], [`Catalog`].
//!
//! A catalog is loaded from any of the common JSON forms (see [`Catalog::from_json`]); every
//! input schema is compiled once on load, so a broken schema is reported with the tool's name
//! and the JSON pointer of the problem, never discovered at planning time.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::plan::escape_pointer;

/// A tool in the MCP shape: name, description, JSON Schema of its input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// Unique name.
    pub name: String,
    /// What the tool does.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
    /// JSON Schema of the result, when the tool declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// MCP behaviour hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
}

/// MCP tool annotations (behaviour hints).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// Human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not change its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling the tool twice with the same arguments has no extra effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world (e.g. the web).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl Tool {
    /// True when the tool is marked destructive and not read-only: its steps need approval.
    pub fn is_destructive(&self) -> bool {
        self.annotations
            .as_ref()
            .is_some_and(|a| a.destructive_hint == Some(true) && a.read_only_hint != Some(true))
    }

    /// Names of the top-level parameters, in schema order.
    pub fn parameter_names(&self) -> Vec<&str> {
        self.input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| props.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// Names of the required top-level parameters.
    pub fn required_parameters(&self) -> Vec<&str> {
        self.input_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|req| req.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }
}

/// An agent that takes a natural-language task (ValueCell / A2A agent card).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCard {
    /// Unique name.
    pub name: String,
    /// What the agent does.
    #[serde(default)]
    pub description: String,
    /// Skills the agent advertises.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<AgentSkill>,
    /// Capabilities (`streaming`, `push_notifications`, …).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub capabilities: Map<String, Value>,
    /// Requests targeted at this agent go to it as one task, without planning.
    #[serde(default)]
    pub passthrough: bool,
}

/// One skill of an [`AgentCard`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSkill {
    /// Skill name.
    pub name: String,
    /// What the skill does.
    #[serde(default)]
    pub description: String,
    /// Example requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    /// Tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// A problem found while loading a catalog: which tool or agent, where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogProblem {
    /// Name of the tool or agent, or `#N` when the entry has no usable name.
    pub name: String,
    /// JSON pointer into the loaded document.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for CatalogProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` at {}: {}", self.name, self.pointer, self.message)
    }
}

/// Errors from loading a catalog.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// The document is not in any accepted form.
    #[error("unrecognised catalog document: {0}")]
    Format(String),
    /// One or more tools or agents are invalid; every problem is listed.
    #[error("{} invalid catalog entr{}: {}", .0.len(), if .0.len() == 1 { "y" } else { "ies" },
        .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<CatalogProblem>),
}

/// A tool as the prompt shows it: compact ([`crate::prompts::tool_view`]).
#[derive(Debug, Clone, Serialize)]
pub struct ToolView {
    /// Tool name.
    pub name: String,
    /// Description, cut to a sentence or two.
    pub description: String,
    /// `name(city*: string, unit: "c"|"f")`.
    pub signature: String,
    /// The tool as chat templates list it for tool calling: a one-line JSON function object
    /// (see [`crate::calls::function_line`]).
    pub function: String,
}

/// A tool with its compiled input validator.
#[derive(Debug)]
pub struct CatalogTool {
    /// The tool.
    pub tool: Tool,
    validator: jsonschema::Validator,
    /// The tool's member of the plan schema's step union at the default string bound, built on
    /// first use.
    model_schema: OnceLock<Value>,
    /// How the prompt shows the tool, built on first use.
    prompt_view: OnceLock<Arc<ToolView>>,
}

impl CatalogTool {
    /// The prompt's view of the tool, built by `build` on first use and kept
    /// ([`crate::prompts::tool_view`]).
    pub(crate) fn prompt_view_or(&self, build: impl FnOnce() -> ToolView) -> &Arc<ToolView> {
        self.prompt_view.get_or_init(|| Arc::new(build()))
    }

    /// The compiled validator of the tool's input schema (formats are checked).
    pub(crate) fn validator(&self) -> &jsonschema::Validator {
        &self.validator
    }

    /// What is wrong with `arguments` against the tool's input schema: at most `limit`
    /// problems, each a message ending with the JSON pointer of the value at fault; empty when
    /// they fit.
    pub fn argument_problems(&self, arguments: &Value, limit: usize) -> Vec<String> {
        self.validator
            .iter_errors(arguments)
            .take(limit)
            .map(|e| format!("{e} at `{}`", e.instance_path()))
            .collect()
    }

    /// The tool's member of the plan schema's step union at the default string bound, built
    /// by `build` on first use and kept ([`crate::schema::model_step_schema`]).
    pub(crate) fn model_schema_or(&self, build: impl FnOnce() -> Value) -> &Value {
        self.model_schema.get_or_init(build)
    }
}

/// The tools and agents a plan may use, indexed by name. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    inner: Arc<CatalogInner>,
}

#[derive(Debug, Default)]
struct CatalogInner {
    tools: Vec<CatalogTool>,
    agents: Vec<AgentCard>,
    tool_index: HashMap<String, usize>,
    agent_index: HashMap<String, usize>,
}

impl Catalog {
    /// An empty catalog.
    pub fn empty() -> Catalog {
        Catalog::default()
    }

    /// Builds a catalog from tools and agents; fails with every problem found
    /// (invalid schema, duplicate name, empty name).
    pub fn new(tools: Vec<Tool>, agents: Vec<AgentCard>) -> Result<Catalog, CatalogError> {
        let pointers = (0..tools.len())
            .map(|idx| (format!("/{idx}"), format!("/{idx}/input_schema")))
            .collect();
        let (catalog, problems) = Catalog::build(tools, pointers, agents);
        if problems.is_empty() {
            Ok(catalog)
        } else {
            Err(CatalogError::Invalid(problems))
        }
    }

    /// Loads tools from a JSON document in any accepted form (strict: any problem is an error).
    ///
    /// Accepted forms:
    /// - an MCP `tools/list` result: `{"tools": [{"name", "description", "inputSchema", …}]}`;
    /// - a list of tools (`input_schema` or `inputSchema` or `parameters`);
    /// - OpenAI `tools`: `[{"type": "function", "function": {"name", "description", "parameters"}}]`;
    /// - SAGE's dict form: `{"tool_name": {"description", "input_schema"}}`.
    pub fn from_json(document: &Value) -> Result<Catalog, CatalogError> {
        let (catalog, problems) = Catalog::from_json_lenient(document)?;
        if problems.is_empty() {
            Ok(catalog)
        } else {
            Err(CatalogError::Invalid(problems))
        }
    }

    /// Like [`Catalog::from_json`], but keeps every valid tool and returns the problems beside
    /// the catalog. Fails only when the document is in no accepted form.
    pub fn from_json_lenient(
        document: &Value,
    ) -> Result<(Catalog, Vec<CatalogProblem>), CatalogError> {
        let (tools, pointers, mut problems) = read_tools(document)?;
        let (catalog, more) = Catalog::build(tools, pointers, Vec::new());
        problems.extend(more);
        Ok((catalog, problems))
    }

    /// Reads agent cards from a list, or from `{"agents": [...]}`.
    pub fn agents_from_json(document: &Value) -> Result<Vec<AgentCard>, CatalogError> {
        let (items, base) = match document {
            Value::Array(items) => (items, String::new()),
            Value::Object(map) => match map.get("agents") {
                Some(Value::Array(items)) => (items, "/agents".to_owned()),
                _ => {
                    return Err(CatalogError::Format(
                        "expected a list of agent cards or {\"agents\": [...]}".into(),
                    ));
                }
            },
            _ => {
                return Err(CatalogError::Format(
                    "expected a list of agent cards".into(),
                ));
            }
        };
        let mut agents = Vec::new();
        let mut problems = Vec::new();
        for (idx, item) in items.iter().enumerate() {
            let name = item
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match serde_json::from_value::<AgentCard>(item.clone()) {
                Ok(card) if !card.name.trim().is_empty() => agents.push(card),
                Ok(_) => problems.push(CatalogProblem {
                    name: format!("#{idx}"),
                    pointer: format!("{base}/{idx}/name"),
                    message: "agent card has an empty name".into(),
                }),
                Err(err) => problems.push(CatalogProblem {
                    name: if name.is_empty() {
                        format!("#{idx}")
                    } else {
                        name
                    },
                    pointer: format!("{base}/{idx}"),
                    message: format!("not a valid agent card: {err}"),
                }),
            }
        }
        if problems.is_empty() {
            Ok(agents)
        } else {
            Err(CatalogError::Invalid(problems))
        }
    }

    /// The same tools with these agents added; fails on an empty or duplicate agent name.
    pub fn with_agents(&self, agents: Vec<AgentCard>) -> Result<Catalog, CatalogError> {
        let tools: Vec<Tool> = self.tools().map(|t| t.tool.clone()).collect();
        let mut all_agents = self.inner.agents.clone();
        all_agents.extend(agents);
        Catalog::new(tools, all_agents)
    }

    /// `pointers`: each tool's place in the loaded document, and its input schema's (under the
    /// key the document used: `inputSchema`, `function/parameters`, …).
    fn build(
        tools: Vec<Tool>,
        pointers: Vec<(String, String)>,
        agents: Vec<AgentCard>,
    ) -> (Catalog, Vec<CatalogProblem>) {
        let mut inner = CatalogInner::default();
        let mut problems = Vec::new();
        for (tool, (pointer, schema_at)) in tools.into_iter().zip(pointers) {
            if tool.name.trim().is_empty() {
                problems.push(CatalogProblem {
                    name: format!("#{}", inner.tools.len()),
                    pointer: format!("{pointer}/name"),
                    message: "tool has an empty name".into(),
                });
                continue;
            }
            if inner.tool_index.contains_key(&tool.name) {
                problems.push(CatalogProblem {
                    name: tool.name.clone(),
                    pointer: format!("{pointer}/name"),
                    message: "duplicate tool name".into(),
                });
                continue;
            }
            match compile_input_schema(&tool.input_schema) {
                Ok(validator) => {
                    inner
                        .tool_index
                        .insert(tool.name.clone(), inner.tools.len());
                    inner.tools.push(CatalogTool {
                        tool,
                        validator,
                        model_schema: OnceLock::new(),
                        prompt_view: OnceLock::new(),
                    });
                }
                Err((schema_pointer, message)) => problems.push(CatalogProblem {
                    name: tool.name.clone(),
                    pointer: format!("{schema_at}{schema_pointer}"),
                    message,
                }),
            }
        }
        for (idx, agent) in agents.into_iter().enumerate() {
            if agent.name.trim().is_empty() || inner.agent_index.contains_key(&agent.name) {
                problems.push(CatalogProblem {
                    name: if agent.name.is_empty() {
                        format!("#{idx}")
                    } else {
                        agent.name.clone()
                    },
                    pointer: format!("/agents/{idx}/name"),
                    message: if agent.name.trim().is_empty() {
                        "agent card has an empty name".into()
                    } else {
                        "duplicate agent name".into()
                    },
                });
                continue;
            }
            inner
                .agent_index
                .insert(agent.name.clone(), inner.agents.len());
            inner.agents.push(agent);
        }
        (
            Catalog {
                inner: Arc::new(inner),
            },
            problems,
        )
    }

    /// All tools, in load order.
    pub fn tools(&self) -> impl ExactSizeIterator<Item = &CatalogTool> {
        self.inner.tools.iter()
    }

    /// The tool at this position.
    pub fn tool_at(&self, idx: usize) -> Option<&CatalogTool> {
        self.inner.tools.get(idx)
    }

    /// The tool with this name.
    pub fn tool(&self, name: &str) -> Option<&CatalogTool> {
        self.inner
            .tool_index
            .get(name)
            .and_then(|&idx| self.inner.tools.get(idx))
    }

    /// Position of the tool with this name.
    pub fn tool_position(&self, name: &str) -> Option<usize> {
        self.inner.tool_index.get(name).copied()
    }

    /// All agent cards.
    pub fn agents(&self) -> &[AgentCard] {
        &self.inner.agents
    }

    /// The agent with this name.
    pub fn agent(&self, name: &str) -> Option<&AgentCard> {
        self.inner
            .agent_index
            .get(name)
            .and_then(|&idx| self.inner.agents.get(idx))
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.inner.tools.len()
    }

    /// True when the catalog has neither tools nor agents.
    pub fn is_empty(&self) -> bool {
        self.inner.tools.is_empty() && self.inner.agents.is_empty()
    }

    /// Finds a tool whose name differs only by case or separators (`math_factorial` for
    /// `math.factorial`), for auto-fixing near-miss names from a model.
    pub fn tool_near(&self, name: &str) -> Option<&CatalogTool> {
        let wanted = fold_name(name);
        let mut found = self.tools().filter(|t| fold_name(&t.tool.name) == wanted);
        let first = found.next()?;
        if found.next().is_some() {
            None
        } else {
            Some(first)
        }
    }
}

fn fold_name(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '.' | '_' | '-' | ' ' | '/'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Compiles an input schema; on failure returns the JSON pointer inside the schema and a message.
fn compile_input_schema(schema: &Value) -> Result<jsonschema::Validator, (String, String)> {
    let Some(object) = schema.as_object() else {
        return Err((
            String::new(),
            format!("input schema must be a JSON object, got {schema}"),
        ));
    };
    match object.get("type") {
        None => {}
        Some(Value::String(ty)) if ty == "object" => {}
        Some(other) => {
            return Err((
                "/type".into(),
                format!("input schema must have type \"object\", got {other}"),
            ));
        }
    }
    if let Err(err) = jsonschema::meta::validate(schema) {
        return Err((err.instance_path().to_string(), err.to_string()));
    }
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|err| (err.instance_path().to_string(), err.to_string()))
}

/// Reads tools from any accepted form; returns tools, their pointers in the document (the
/// entry's and its input schema's), and the problems with entries that could not be read at all.
#[allow(clippy::type_complexity)]
fn read_tools(
    document: &Value,
) -> Result<(Vec<Tool>, Vec<(String, String)>, Vec<CatalogProblem>), CatalogError> {
    let mut tools = Vec::new();
    let mut pointers = Vec::new();
    let mut problems = Vec::new();
    let mut push = |entry: Result<(Tool, String), CatalogProblem>, pointer: String| match entry {
        Ok((tool, schema_at)) => {
            tools.push(tool);
            pointers.push((pointer, schema_at));
        }
        Err(problem) => problems.push(problem),
    };
    match document {
        Value::Array(items) => {
            for (idx, item) in items.iter().enumerate() {
                let pointer = format!("/{idx}");
                push(tool_from_entry(item, None, &pointer, idx), pointer);
            }
        }
        Value::Object(map) if map.get("tools").is_some_and(Value::is_array) => {
            let items = map
                .get("tools")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            for (idx, item) in items.iter().enumerate() {
                let pointer = format!("/tools/{idx}");
                push(tool_from_entry(item, None, &pointer, idx), pointer);
            }
        }
        Value::Object(map) if map.contains_key("name") && map.values().any(Value::is_string) => {
            return Err(CatalogError::Format(
                "a single tool object: wrap it in a list, `[{...}]`".into(),
            ));
        }
        Value::Object(map) => {
            for (idx, (name, item)) in map.iter().enumerate() {
                let pointer = format!("/{}", escape_pointer(name));
                push(tool_from_entry(item, Some(name), &pointer, idx), pointer);
            }
        }
        _ => {
            return Err(CatalogError::Format(
                "expected a list of tools, an MCP tools/list result, OpenAI tools, or a {name: tool} map"
                    .into(),
            ));
        }
    }
    Ok((tools, pointers, problems))
}

/// One tool entry in any form: plain (snake or camel case keys), OpenAI function, or SAGE value;
/// with the pointer of its input schema in the document.
fn tool_from_entry(
    item: &Value,
    dict_name: Option<&str>,
    pointer: &str,
    idx: usize,
) -> Result<(Tool, String), CatalogProblem> {
    let problem = |name: &str, message: String| CatalogProblem {
        name: if name.is_empty() {
            format!("#{idx}")
        } else {
            name.to_owned()
        },
        pointer: pointer.to_owned(),
        message,
    };
    let Some(object) = item.as_object() else {
        return Err(problem(
            dict_name.unwrap_or(""),
            format!("expected a tool object, got {item}"),
        ));
    };
    let (object, inner_pointer) = match object.get("function").and_then(Value::as_object) {
        Some(function)
            if object
                .get("type")
                .and_then(Value::as_str)
                .is_none_or(|t| t == "function") =>
        {
            (function, "/function")
        }
        _ => (object, ""),
    };
    let name = object
        .get("name")
        .and_then(Value::as_str)
        .or(dict_name)
        .unwrap_or_default()
        .to_owned();
    if name.is_empty() {
        return Err(CatalogProblem {
            name: format!("#{idx}"),
            pointer: format!("{pointer}{inner_pointer}/name"),
            message: "tool has no name".into(),
        });
    }
    let description = match object.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => {
            return Err(problem(
                &name,
                format!("description must be a string, got {other}"),
            ));
        }
    };
    let (schema_key, input_schema) = ["input_schema", "inputSchema", "parameters"]
        .iter()
        .find_map(|key| object.get(*key).map(|schema| (*key, schema.clone())))
        .unwrap_or_else(|| {
            (
                "input_schema",
                serde_json::json!({"type": "object", "properties": {}}),
            )
        });
    let output_schema = ["output_schema", "outputSchema"]
        .iter()
        .find_map(|key| object.get(*key))
        .cloned();
    let annotations = match object.get("annotations") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            serde_json::from_value::<ToolAnnotations>(value.clone())
                .map_err(|err| problem(&name, format!("bad annotations: {err}")))?,
        ),
    };
    let tool = Tool {
        name,
        description,
        input_schema,
        output_schema,
        annotations,
    };
    Ok((tool, format!("{pointer}{inner_pointer}/{schema_key}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn weather() -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    }

    #[test]
    fn loads_every_accepted_form() {
        let forms = [
            json!([{"name": "get_weather", "description": "d", "input_schema": weather()}]),
            json!({"tools": [{"name": "get_weather", "description": "d", "inputSchema": weather()}]}),
            json!([{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": weather()}}]),
            json!({"get_weather": {"description": "d", "input_schema": weather()}}),
        ];
        for form in forms {
            let catalog = Catalog::from_json(&form).unwrap();
            let tool = catalog.tool("get_weather").unwrap();
            assert_eq!(tool.tool.description, "d", "{form}");
            assert_eq!(tool.tool.required_parameters(), ["city"], "{form}");
        }
    }

    #[test]
    fn problems_name_the_tool_and_pointer() {
        let doc = json!({"tools": [
            {"name": "ok", "inputSchema": weather()},
            {"name": "bad", "inputSchema": {"type": "object", "properties": {"x": {"type": "strng"}}}},
            {"name": "ok", "inputSchema": weather()},
            {"description": "nameless"}
        ]});
        let err = Catalog::from_json(&doc).unwrap_err();
        let CatalogError::Invalid(problems) = err else {
            panic!("{err}")
        };
        assert_eq!(problems.len(), 3, "{problems:?}");
        let bad = problems.iter().find(|p| p.name == "bad").unwrap();
        // The pointer follows the document's own keys.
        assert_eq!(bad.pointer, "/tools/1/inputSchema/properties/x/type");
        let openai = json!([{"type": "function", "function": {"name": "f",
            "parameters": {"type": "object", "properties": {"x": {"type": "strng"}}}}}]);
        let Err(CatalogError::Invalid(openai_problems)) = Catalog::from_json(&openai) else {
            panic!("a broken schema must not load")
        };
        assert_eq!(
            openai_problems[0].pointer,
            "/0/function/parameters/properties/x/type"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.name == "ok" && p.message.contains("duplicate"))
        );
        assert!(problems.iter().any(|p| p.pointer == "/tools/3/name"));
        let (catalog, problems) = Catalog::from_json_lenient(&doc).unwrap();
        assert_eq!(catalog.len(), 1);
        assert_eq!(problems.len(), 3);
    }

    #[test]
    fn near_names_fold_case_and_separators() {
        let doc = json!([{"name": "math.factorial", "input_schema": {"type": "object"}}]);
        let catalog = Catalog::from_json(&doc).unwrap();
        assert_eq!(
            catalog.tool_near("Math_Factorial").unwrap().tool.name,
            "math.factorial"
        );
        assert!(catalog.tool_near("factorial").is_none());
    }
}
