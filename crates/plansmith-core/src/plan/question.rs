//! Clarifying questions a plan asks before it can run.

use serde::{Deserialize, Serialize};

/// A clarifying question the plan needs answered before it can run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Question {
    /// Identifier (`q1`, `q2`, …).
    pub id: String,
    /// The question, in the plan's locale.
    pub text: String,
    /// The step this answer unblocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The argument of that step this answer fills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<String>,
    /// Suggested answers, when the set is known (an enum, a yes/no confirmation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}
