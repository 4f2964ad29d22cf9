//! A read-only MCP tool as the planner's background investigator.
//!
//! [`McpInvestigator`] calls one tool of a connected server with the request before planning:
//! the whole request as one argument (a web or document search), or, for a keyword search
//! ([`Lookup::Terms`]), once per name or address in the request (`plansmith_core::search_terms`:
//! a knowledge graph's `search_nodes`, a code search), the calls made together. Only a tool that
//! declares `readOnlyHint: true` is accepted: investigation runs before anyone has seen the
//! plan, so it must not change anything.
//!
//! Each result is a finding whose source is `server/tool` (and the term): the structured
//! content as JSON when the tool returned one, else its text. A result with nothing in it (an
//! empty text, or JSON whose every list and object is empty) is no finding; a call that fails
//! or times out is an error only when every call did (the planner then plans without findings,
//! with a warning).

use std::sync::Arc;
use std::time::Duration;

use plansmith_core::llm::BoxFuture;
use plansmith_core::{Catalog, Finding, Investigator};
use serde_json::{Map, Value};

use crate::{McpError, McpTools};

/// What the tool is called with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Lookup {
    /// The whole request, once.
    #[default]
    Request,
    /// Each name or address of the request, at most [`MAX_TERMS`] calls.
    Terms,
}

/// The most calls one investigation makes with [`Lookup::Terms`].
pub const MAX_TERMS: usize = 6;

/// Investigates with one read-only tool of a connected MCP server.
pub struct McpInvestigator {
    tools: Arc<McpTools>,
    tool: String,
    source: String,
    argument: String,
    fixed: Map<String, Value>,
    lookup: Lookup,
}

impl std::fmt::Debug for McpInvestigator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpInvestigator")
            .field("tool", &self.source)
            .field("argument", &self.argument)
            .field("lookup", &self.lookup)
            .finish_non_exhaustive()
    }
}

impl McpInvestigator {
    /// Investigates with `tool` of `catalog` (the catalog `tools` imported), putting the request
    /// (or each term) in `argument` beside the `fixed` arguments. Without `argument`, the tool's
    /// only required string argument (or its only string argument) takes it.
    ///
    /// Refused, naming the tool, when the catalog has no such tool, the tool does not declare
    /// `readOnlyHint: true`, or no argument can carry the request.
    pub fn new(
        tools: Arc<McpTools>,
        catalog: &Catalog,
        tool: &str,
        argument: Option<&str>,
        fixed: Map<String, Value>,
        lookup: Lookup,
    ) -> Result<McpInvestigator, McpError> {
        let refuse = |message: String| McpError::Config {
            source_name: "investigation".into(),
            message,
        };
        let Some(entry) = catalog.tool(tool) else {
            let mut names: Vec<&str> = catalog.tools().map(|t| t.tool.name.as_str()).collect();
            names.sort_unstable();
            return Err(refuse(format!(
                "no tool `{tool}` on the configured servers (they have: {})",
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )));
        };
        let read_only = entry
            .tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        if !read_only {
            return Err(refuse(format!(
                "`{tool}` does not declare `readOnlyHint: true`; investigation runs before anyone \
                 has seen the plan, so it uses only read-only tools"
            )));
        }
        let schema = &entry.tool.input_schema;
        let properties = schema.get("properties").and_then(Value::as_object);
        let argument = match argument {
            Some(name) if properties.is_some_and(|p| p.contains_key(name)) => name.to_owned(),
            Some(name) => {
                return Err(refuse(format!("`{tool}` takes no argument `{name}`")));
            }
            None => string_argument(schema).ok_or_else(|| {
                refuse(format!(
                    "say which argument of `{tool}` takes the request (`argument`): it has no \
                     single string argument"
                ))
            })?,
        };
        let source = tools.route(tool).map_or_else(
            || tool.to_owned(),
            |route| format!("{}/{}", route.server, route.tool),
        );
        Ok(McpInvestigator {
            tools,
            tool: tool.to_owned(),
            source,
            argument,
            fixed,
            lookup,
        })
    }

    /// One call with `text` in the argument; its finding, if it found anything.
    async fn look_up(&self, text: String) -> Result<Option<Finding>, String> {
        let mut arguments = self.fixed.clone();
        arguments.insert(self.argument.clone(), Value::String(text.clone()));
        let output = self
            .tools
            .call(&self.tool, arguments)
            .await
            .map_err(|err| err.to_string())?;
        if output.is_error {
            return Err(format!("`{}` failed: {}", self.source, output.text.trim()));
        }
        let text_found = match &output.structured {
            Some(structured) if holds_something(structured) => structured.to_string(),
            Some(_) => String::new(),
            None if holds_text(&output.text) => output.text.trim().to_owned(),
            None => String::new(),
        };
        if text_found.is_empty() {
            return Ok(None);
        }
        let source = match self.lookup {
            Lookup::Request => self.source.clone(),
            Lookup::Terms => format!("{} \"{text}\"", self.source),
        };
        Ok(Some(Finding {
            source,
            text: text_found,
        }))
    }
}

impl Investigator for McpInvestigator {
    fn name(&self) -> String {
        format!("mcp:{}", self.source)
    }

    fn investigate<'a>(
        &'a self,
        query: &'a str,
        budget: Duration,
    ) -> BoxFuture<'a, Result<Vec<Finding>, String>> {
        Box::pin(async move {
            let lookups: Vec<String> = match self.lookup {
                Lookup::Request => vec![query.trim().to_owned()],
                Lookup::Terms => plansmith_core::search_terms(query)
                    .into_iter()
                    .take(MAX_TERMS)
                    .collect(),
            };
            if lookups.is_empty() {
                return Ok(Vec::new());
            }
            let calls = futures::future::join_all(lookups.into_iter().map(|l| self.look_up(l)));
            let answers = tokio::time::timeout(budget, calls).await.map_err(|_| {
                format!(
                    "`{}` did not answer within {} ms",
                    self.source,
                    budget.as_millis()
                )
            })?;
            let n_calls = answers.len();
            let mut findings = Vec::new();
            let mut errors = Vec::new();
            for answer in answers {
                match answer {
                    Ok(Some(finding)) => findings.push(finding),
                    Ok(None) => {}
                    Err(err) => errors.push(err),
                }
            }
            if errors.len() == n_calls {
                return Err(errors.join("; "));
            }
            Ok(findings)
        })
    }
}

/// The tool's only required string argument, else its only string argument.
fn string_argument(schema: &Value) -> Option<String> {
    let properties = schema.get("properties")?.as_object()?;
    let strings: Vec<&String> = properties
        .iter()
        .filter(|(_, p)| p.get("type").and_then(Value::as_str) == Some("string"))
        .map(|(name, _)| name)
        .collect();
    let required: Vec<&String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .filter_map(|name| strings.iter().copied().find(|s| s.as_str() == name))
                .collect()
        })
        .unwrap_or_default();
    match (required.as_slice(), strings.as_slice()) {
        ([only], _) | ([], [only]) => Some((*only).clone()),
        _ => None,
    }
}

/// Whether a JSON result holds anything: a scalar, or a list or object with something in it.
fn holds_something(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Array(items) => items.iter().any(holds_something),
        Value::Object(map) => map.values().any(holds_something),
        Value::String(text) => !text.trim().is_empty(),
        _ => true,
    }
}

/// Whether a text result holds anything: not blank, and not JSON that holds nothing.
fn holds_text(text: &str) -> bool {
    let text = text.trim();
    !text.is_empty()
        && serde_json::from_str::<Value>(text)
            .map(|value| holds_something(&value))
            .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{holds_something, holds_text, string_argument};

    #[test]
    fn the_request_goes_in_the_single_string_argument() {
        let one =
            json!({"properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}});
        assert_eq!(string_argument(&one).as_deref(), Some("query"));
        let required = json!({"properties": {"q": {"type": "string"}, "lang": {"type": "string"}},
                              "required": ["q"]});
        assert_eq!(string_argument(&required).as_deref(), Some("q"));
        let two =
            json!({"properties": {"path": {"type": "string"}, "pattern": {"type": "string"}}});
        assert_eq!(string_argument(&two), None);
    }

    #[test]
    fn empty_results_are_no_findings() {
        assert!(!holds_something(&json!({"entities": [], "relations": []})));
        assert!(holds_something(&json!({"entities": [{"name": "Bob"}]})));
        assert!(!holds_text("  "));
        assert!(!holds_text("{\"entities\": []}"));
        assert!(holds_text("Bob lives in Paris"));
    }
}
