//! What a step does: a tool call, an agent's task, a research or processing task, or a reply.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[cfg(doc)]
use super::StepRef;

/// The task kind of a step given as plain text (an OpenManus step, a bare string in a model's
/// `steps`): `{"type": "task", "kind": "step"}`.
pub const PLAIN_STEP: &str = "step";

/// What a step does. Serialised with a `type` tag: `{"type": "tool", "name": …, "arguments": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    /// Call a tool of the catalog with arguments that match its input schema. An argument value
    /// may be a step reference, `{"$ref": "s1.output.items[0].id"}` (see [`StepRef`]).
    Tool {
        /// Tool name, as in the catalog.
        name: String,
        /// Arguments, validated against the tool's input schema.
        #[serde(default)]
        arguments: Map<String, Value>,
    },
    /// Hand a natural-language task to an agent.
    Agent {
        /// Agent name, as in the agent cards.
        agent: String,
        /// The task for the agent.
        query: String,
    },
    /// A research or processing task (deer-flow style), or a custom kind.
    Task {
        /// Kind of task.
        kind: TaskKind,
        /// Whether the task needs web search.
        #[serde(default)]
        need_web_search: bool,
    },
    /// Answer the user. Written before any tool ran, so it must not claim to know tool results.
    Reply {
        /// The reply text.
        text: String,
    },
}

impl Action {
    /// The tag used in JSON: `tool`, `agent`, `task` or `reply`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Action::Tool { .. } => "tool",
            Action::Agent { .. } => "agent",
            Action::Task { .. } => "task",
            Action::Reply { .. } => "reply",
        }
    }
}

/// Kind of a [`Action::Task`]: `research`, `processing`, or any other name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum TaskKind {
    /// Gather information.
    Research,
    /// Compute or transform what was gathered.
    Processing,
    /// A kind the caller defines.
    Custom(String),
}

/// In the API schema a task kind is a string (`research`, `processing` or a custom name).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for TaskKind {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some("`research`, `processing`, or any other name"))
            .examples(["research"])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for TaskKind {}

impl From<String> for TaskKind {
    fn from(value: String) -> TaskKind {
        match value.trim().to_ascii_lowercase().as_str() {
            "research" => TaskKind::Research,
            "processing" | "process" => TaskKind::Processing,
            _ => TaskKind::Custom(value),
        }
    }
}

impl From<TaskKind> for String {
    fn from(value: TaskKind) -> String {
        value.to_string()
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskKind::Research => f.write_str("research"),
            TaskKind::Processing => f.write_str("processing"),
            TaskKind::Custom(name) => f.write_str(name),
        }
    }
}
