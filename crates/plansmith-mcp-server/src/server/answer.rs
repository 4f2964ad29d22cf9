//! A tool's answer: structured content with a text block, or a failure the caller can read.

use plansmith_store::StoredPlan;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

pub(super) type ToolAnswer = Result<CallToolResult, rmcp::ErrorData>;

/// A successful answer: the JSON as structured content, and a text block.
pub(super) fn answer(value: Value, text: String) -> ToolAnswer {
    let mut result = CallToolResult::structured(value);
    result.content = vec![ContentBlock::text(text)];
    Ok(result)
}

/// The answer to a command's outcome: its JSON and text, or its error message.
pub(super) fn respond(outcome: Result<(Value, String), String>) -> ToolAnswer {
    match outcome {
        Ok((value, text)) => answer(value, text),
        Err(message) => failure(message),
    }
}

/// A failed call the caller can read (`isError: true`).
pub(super) fn failure(message: impl Into<String>) -> ToolAnswer {
    Ok(CallToolResult::error(vec![ContentBlock::text(
        message.into(),
    )]))
}

pub(super) fn stored_json(stored: &StoredPlan) -> Value {
    serde_json::to_value(stored).unwrap_or(Value::Null)
}
