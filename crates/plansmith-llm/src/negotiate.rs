//! Structured-output negotiation: the ladder of strategies a call may try, what counts as a
//! server refusing one, and the per-client memory of refusals.

use std::sync::{Arc, Mutex};

use plansmith_core::llm::FinishReason;
use plansmith_core::{Capabilities, OutputConstraint, Strategy};
use serde_json::Value;

/// The strategies in the order they are tried.
pub const LADDER: [Strategy; 4] = [
    Strategy::JsonSchema,
    Strategy::ToolCalling,
    Strategy::JsonMode,
    Strategy::PromptOnly,
];

/// The schema a constraint carries, with the names to send it under.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) schema_name: String,
    pub(crate) tool_name: String,
    pub(crate) description: String,
    pub(crate) schema: Arc<Value>,
    pub(crate) strict: bool,
}

/// The strategy a constraint asks for, and its schema.
pub(crate) fn wanted(constraint: Option<&OutputConstraint>) -> (Strategy, Option<Target>) {
    match constraint {
        Some(OutputConstraint::JsonSchema {
            name,
            schema,
            strict,
        }) => (
            Strategy::JsonSchema,
            Some(Target {
                schema_name: name.clone(),
                tool_name: "planning".into(),
                description: "Submit the plan for the user's request.".into(),
                schema: Arc::clone(schema),
                strict: *strict,
            }),
        ),
        Some(OutputConstraint::ToolCall {
            name,
            description,
            parameters,
        }) => (
            Strategy::ToolCalling,
            Some(Target {
                schema_name: name.clone(),
                tool_name: name.clone(),
                description: description.clone(),
                schema: Arc::clone(parameters),
                strict: false,
            }),
        ),
        Some(OutputConstraint::JsonObject) => (Strategy::JsonMode, None),
        // The prompt asks for the tool-call format; the reply's text is read as it comes.
        Some(OutputConstraint::ToolCalls { .. }) | None => (Strategy::PromptOnly, None),
    }
}

/// The strategies to try, best first: from the one asked for down the ladder, skipping those
/// the backend does not offer, those already refused, and those needing a schema when there is
/// none. Prompt-only is always last.
pub(crate) fn ladder(
    asked: Strategy,
    has_schema: bool,
    offered: Capabilities,
    refused: &[Strategy],
) -> Vec<Strategy> {
    let asked = if asked == Strategy::Grammar {
        Strategy::JsonSchema
    } else {
        asked
    };
    LADDER
        .iter()
        .copied()
        .skip_while(|s| *s != asked)
        .filter(|s| match s {
            Strategy::JsonSchema => offered.json_schema && has_schema,
            Strategy::ToolCalling => offered.tool_calling && has_schema,
            Strategy::JsonMode => offered.json_mode,
            _ => true,
        })
        .filter(|s| *s == Strategy::PromptOnly || !refused.contains(s))
        .collect()
}

/// Whether an error reply means "this server does not do `strategy`" (so the next one is
/// tried) rather than "this request is wrong". Only 400, 422 and 501 qualify, and the body must
/// name the feature: OpenAI (`Invalid schema for response_format`), vLLM and llama.cpp
/// (`response_format` / `json_schema` / `grammar`), Ollama (`does not support tools`), DeepSeek
/// (`does not support Function Calling`, `This response_format type is unavailable now`), Groq
/// (`json mode … tool`), Anthropic (`tool_choice` with thinking). A 500 qualifies too when its
/// body is a request-validation report ([`is_validation_error`]): llama-cpp-python's server
/// answers an unknown `response_format` type that way.
pub(crate) fn is_refusal(strategy: Strategy, status: u16, body: &str) -> bool {
    let validation_500 = status == 500 && is_validation_error(body);
    if !(matches!(status, 400 | 422 | 501) || validation_500) {
        return false;
    }
    let body = body.to_ascii_lowercase();
    let words: &[&str] = match strategy {
        Strategy::JsonSchema | Strategy::Grammar => &[
            "response_format",
            "json_schema",
            "structured output",
            "structured_output",
            "guided_json",
            "grammar",
            "strict",
        ],
        Strategy::ToolCalling => &["tool", "function"],
        Strategy::JsonMode => &["response_format", "json_object", "json mode", "json_mode"],
        Strategy::PromptOnly => &[],
    };
    words.iter().any(|w| body.contains(w))
}

/// True when an error body is a request-validation report rather than a server fault, however
/// the server labels it: llama-cpp-python's server (FastAPI/pydantic) answers a `response_format`
/// it does not know with HTTP 500 and `1 validation error: {'type': 'literal_error', 'loc':
/// ('body', 'response_format', 'type'), …}`. Such a reply is the same on every try, so it is not
/// retried.
pub(crate) fn is_validation_error(body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    body.contains("validation error") && (body.contains("'loc'") || body.contains("\"loc\""))
}

/// True when a 400/422 says the server does not know `stream_options` (older OpenAI-compatible
/// servers validate fields strictly); the request is sent again without it.
pub(crate) fn rejects_stream_options(status: u16, body: &str) -> bool {
    matches!(status, 400 | 422) && body.to_ascii_lowercase().contains("stream_options")
}

/// What a client's server refused so far (remembered for later calls).
#[derive(Debug, Default)]
pub(crate) struct Refusals(Mutex<Vec<Strategy>>);

impl Refusals {
    pub(crate) fn list(&self) -> Vec<Strategy> {
        self.0.lock().map(|r| r.clone()).unwrap_or_default()
    }

    pub(crate) fn add(&self, strategy: Strategy) {
        if let Ok(mut refused) = self.0.lock()
            && !refused.contains(&strategy)
        {
            refused.push(strategy);
        }
    }

    /// `offered` minus what was refused.
    pub(crate) fn apply(&self, mut offered: Capabilities) -> Capabilities {
        for strategy in self.list() {
            match strategy {
                Strategy::JsonSchema => offered.json_schema = false,
                Strategy::ToolCalling => offered.tool_calling = false,
                Strategy::JsonMode => offered.json_mode = false,
                _ => {}
            }
        }
        offered
    }
}

/// A provider's finish reason, leniently: unknown values (vLLM's `abort`, `content_filter`) are
/// [`FinishReason::Other`], a missing one is a normal stop.
pub(crate) fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        None | Some("stop" | "end_turn" | "stop_sequence" | "eos") => FinishReason::Stop,
        Some("length" | "max_tokens" | "model_length") => FinishReason::Length,
        Some("tool_calls" | "function_call" | "tool_use") => FinishReason::ToolCalls,
        Some(_) => FinishReason::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_skips_what_is_missing_or_refused() {
        let all = Capabilities {
            json_schema: true,
            tool_calling: true,
            json_mode: true,
            grammar: false,
            prefill: false,
        };
        assert_eq!(
            ladder(Strategy::JsonSchema, true, all, &[]),
            LADDER.to_vec()
        );
        assert_eq!(
            ladder(
                Strategy::JsonSchema,
                true,
                all,
                &[Strategy::JsonSchema, Strategy::PromptOnly]
            ),
            vec![
                Strategy::ToolCalling,
                Strategy::JsonMode,
                Strategy::PromptOnly
            ]
        );
        assert_eq!(
            ladder(Strategy::JsonMode, false, all, &[]),
            vec![Strategy::JsonMode, Strategy::PromptOnly]
        );
        assert_eq!(
            ladder(
                Strategy::JsonSchema,
                true,
                Capabilities {
                    tool_calling: true,
                    ..Capabilities::default()
                },
                &[]
            ),
            vec![Strategy::ToolCalling, Strategy::PromptOnly]
        );
    }

    #[test]
    fn refusals_need_the_right_status_and_words() {
        assert!(is_refusal(
            Strategy::JsonSchema,
            400,
            r#"{"error":{"message":"Invalid schema for response_format 'plan'"}}"#
        ));
        assert!(is_refusal(
            Strategy::ToolCalling,
            400,
            r#"{"error":"registry.ollama.ai/library/gemma:2b does not support tools"}"#
        ));
        assert!(!is_refusal(
            Strategy::JsonSchema,
            400,
            r#"{"error":{"message":"The model `gpt-9` does not exist"}}"#
        ));
        assert!(!is_refusal(Strategy::JsonSchema, 500, "response_format"));
        assert!(!is_refusal(Strategy::PromptOnly, 400, "tool"));
        // llama-cpp-python's server: a validation report sent as HTTP 500 (recorded reply).
        let llama_cpp_python = r#"{"error":{"message":"1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or 'json_object'\"}}\n\n  File \"/venv/lib/python3.11/site-packages/llama_cpp/server/app.py\", line 376, in create_chat_completion\n    POST /v1/chat/completions","type":"internal_server_error","param":null,"code":null}}"#;
        assert!(is_validation_error(llama_cpp_python));
        assert!(is_refusal(Strategy::JsonSchema, 500, llama_cpp_python));
        // An ordinary 500 is a fault to retry, not a refusal.
        let plain_500 = r#"{"error":{"message":"","type":"internal_server_error"}}"#;
        assert!(!is_validation_error(plain_500));
        assert!(!is_refusal(Strategy::ToolCalling, 500, plain_500));
    }

    #[test]
    fn finish_reasons_are_lenient() {
        assert_eq!(finish_reason(Some("abort")), FinishReason::Other);
        assert_eq!(finish_reason(None), FinishReason::Stop);
        assert_eq!(finish_reason(Some("max_tokens")), FinishReason::Length);
    }
}
