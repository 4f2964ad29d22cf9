//! MCP `tools/call` as an [`Invoker`] (feature `mcp`): tools that the MCP servers export run
//! there, any other tool goes to a fallback invoker (commands).
//!
//! A tool result with `isError` is a failed attempt (retryable: the policy bounds it); its
//! text is the error. The result is the tool's `structuredContent` when it sends one, else
//! its text content (as JSON when the text is JSON). MCP's `tools/call` has no idempotency
//! slot: the key goes in the request's `_meta` (`plansmith/idempotency_key`, with
//! `plansmith/plan_id`, `plansmith/step_id`, `plansmith/attempt`) for servers that read it;
//! to the others an MCP call re-run after its node died is at-least-once. A server that makes
//! the call a task (the tasks extension) is polled; the task id is recorded with the attempt,
//! and a re-run of the attempt polls the same task instead of calling again. A task that asks
//! for input (`input_required`) leaves the step waiting for a person; their answer (the note
//! of a `retry` decision) goes to the task with `tasks/update`, and the next attempt follows it.
//!
//! A provider key's value ([`ProviderKeys`]) is `[redacted]` in a result or error, as for
//! commands; the servers themselves do not inherit the key variables
//! ([`plansmith_mcp::ClientOptions::provider_keys`]).

use std::sync::Arc;

use plansmith_core::Action;
use plansmith_core::llm::BoxFuture;
use plansmith_core::secrets::{self, ProviderKeys};
use plansmith_mcp::{CallExtras, McpError, McpTools, ToolProgress};
use serde_json::Value;

use crate::invoke::{Call, CallProgress, InvokeError, Invoker};

/// Calls MCP tools; other tools go to `fallback`.
pub struct McpInvoker {
    tools: Arc<McpTools>,
    fallback: Option<Arc<dyn Invoker>>,
    keys: ProviderKeys,
}

impl std::fmt::Debug for McpInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpInvoker")
            .field("fallback", &self.fallback.is_some())
            .finish_non_exhaustive()
    }
}

impl McpInvoker {
    /// MCP tools from connected servers, with an optional invoker for the other tools.
    pub fn new(tools: Arc<McpTools>, fallback: Option<Arc<dyn Invoker>>) -> McpInvoker {
        McpInvoker {
            tools,
            fallback,
            keys: ProviderKeys::default(),
        }
    }

    /// Redacts the values of `keys` (the configured `api_key_env` variables added to the
    /// defaults) instead of the default ones.
    pub fn with_provider_keys(mut self, keys: ProviderKeys) -> McpInvoker {
        self.keys = keys;
        self
    }
}

impl Invoker for McpInvoker {
    fn invoke<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<Value, InvokeError>> {
        self.invoke_reporting(call, &|_| {})
    }

    fn invoke_reporting<'a>(
        &'a self,
        call: &'a Call,
        progress: &'a (dyn Fn(CallProgress) + Send + Sync),
    ) -> BoxFuture<'a, Result<Value, InvokeError>> {
        Box::pin(async move {
            let Action::Tool { name, arguments } = &call.action else {
                return Err(InvokeError::permanent(
                    "an MCP invoker runs tool steps only",
                ));
            };
            if self.tools.route(name).is_none() {
                return match &self.fallback {
                    Some(fallback) => fallback.invoke_reporting(call, progress).await,
                    None => Err(InvokeError::permanent(format!(
                        "no MCP server exports `{name}`"
                    ))),
                };
            }
            let keys = self.keys.values();
            let report = |tool: ToolProgress| {
                progress(CallProgress {
                    progress: tool.progress,
                    total: tool.total,
                    message: tool.message.map(|text| secrets::redact_all(&text, &keys)),
                    task: None,
                });
            };
            // A server that makes the call a task: its id goes to the run, which keeps it.
            let on_task = |task: &str| {
                progress(CallProgress {
                    progress: 0.0,
                    total: None,
                    message: None,
                    task: Some(task.to_owned()),
                });
            };
            // MCP's `tools/call` has no idempotency slot: the key goes in `_meta`, for servers
            // that want it (as commands get it in their environment).
            let mut meta = serde_json::Map::new();
            meta.insert(
                "plansmith/idempotency_key".into(),
                call.idempotency_key.clone().into(),
            );
            meta.insert("plansmith/plan_id".into(), call.plan_id.clone().into());
            meta.insert("plansmith/step_id".into(), call.step_id.clone().into());
            meta.insert("plansmith/attempt".into(), call.attempt.into());
            let extras = CallExtras {
                meta,
                on_progress: Some(&report),
                task: call.remote_task.clone(),
                on_task: Some(&on_task),
                input_responses: call
                    .input
                    .as_ref()
                    .map(|input| responses(&input.requests, &input.answer)),
            };
            let output = self
                .tools
                .call_with(name, arguments.clone(), extras)
                .await
                .map_err(|err| match err {
                    McpError::UnknownTool(_) => InvokeError::permanent(err.to_string()),
                    McpError::InputRequired(asked) => InvokeError::asks(
                        secrets::redact_all(&format!("`{name}` asks: {}", asked.message), &keys),
                        crate::invoke::TaskInput {
                            task: asked.task,
                            requests: asked.requests,
                            answer: String::new(),
                        },
                    ),
                    other => InvokeError::transient(secrets::redact_all(&other.to_string(), &keys)),
                })?;
            if output.is_error {
                return Err(InvokeError::transient(secrets::redact_all(
                    &format!("`{name}` answered an error: {}", output.text.trim()),
                    &keys,
                )));
            }
            let result = match output.structured {
                Some(value) => value,
                None => serde_json::from_str(output.text.trim())
                    .unwrap_or_else(|_| Value::String(output.text)),
            };
            Ok(secrets::redact_json(result, &keys))
        })
    }
}

/// The answers to a task's elicitation requests (`requests`, by key) from a person's `answer`:
/// each form's first field takes it (a number or yes/no read as one). Requests of other kinds
/// (sampling) get no answer.
fn responses(requests: &Value, answer: &str) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    for (key, request) in requests.as_object().into_iter().flatten() {
        if request["method"] != "elicitation/create" {
            continue;
        }
        let properties = request["params"]["requestedSchema"]["properties"].as_object();
        let (field, schema) = properties
            .and_then(|p| p.iter().next())
            .map_or(("answer".to_owned(), Value::Null), |(k, v)| {
                (k.clone(), v.clone())
            });
        let value = match schema["type"].as_str() {
            Some("boolean") => serde_json::json!(matches!(
                answer.trim().to_lowercase().as_str(),
                "yes" | "y" | "true" | "ok"
            )),
            Some("number" | "integer") => answer.trim().parse::<f64>().map_or_else(
                |_| Value::String(answer.to_owned()),
                |n| serde_json::json!(n),
            ),
            _ => Value::String(answer.to_owned()),
        };
        let mut content = serde_json::Map::new();
        content.insert(field, value);
        out.insert(
            key.clone(),
            serde_json::json!({"action": "accept", "content": content}),
        );
    }
    out
}
