//! What can go wrong: starting a local model ([`LocalError`]), and a failure while it runs (an
//! [`LlmError`] naming the stage).

use plansmith_core::LlmError;

/// Errors starting a local model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// llama.cpp could not be initialised.
    #[error("cannot initialise llama.cpp: {0}")]
    Backend(String),
    /// The model file could not be loaded.
    #[error("cannot load the model {path}: {message}")]
    Load {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The worker thread could not be started.
    #[error("cannot start the model thread: {0}")]
    Thread(String),
}

/// A local model failure: what failed, and why.
pub(super) fn backend_error(what: &str, err: impl std::fmt::Display) -> LlmError {
    LlmError::Backend(format!("local model: {what}: {err}"))
}
