//! Why model output could not be parsed into a plan, and the bound on a plan's size.

use crate::diagnostic::Code;

/// Why model output could not be parsed into a plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// No JSON value was found at all.
    #[error("no JSON found in the model output")]
    NoJson,
    /// JSON was found but could not be repaired; the message says where it broke.
    #[error("the model output holds JSON that could not be repaired: {0}")]
    Unrepairable(String),
    /// Valid JSON in no known plan shape; the message describes what was found.
    #[error("the JSON is in no known plan shape: {0}")]
    UnknownShape(String),
    /// The document lists more steps than any plan may hold ([`MAX_PLAN_STEPS`]); it is
    /// refused before its steps are read.
    #[error("the plan lists {0} steps; a plan may hold at most {MAX_PLAN_STEPS}")]
    TooManySteps(usize),
}

pub use crate::plan::MAX_PLAN_STEPS;

impl ParseError {
    /// The diagnostic code for this error ([`Code::ParseError`] or [`Code::UnknownShape`]).
    pub fn code(&self) -> Code {
        match self {
            ParseError::NoJson | ParseError::Unrepairable(_) => Code::ParseError,
            ParseError::UnknownShape(_) => Code::UnknownShape,
            ParseError::TooManySteps(_) => Code::MaxStepsExceeded,
        }
    }
}
