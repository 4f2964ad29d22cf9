//! The exit codes of every command, in one place (the commands guide lists them for users).

use std::process::ExitCode;

/// How a command ended, as its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// A ready plan, or another success.
    Ok = 0,
    /// Planning or the command failed; a run that failed or was aborted; a rejected or stopped
    /// review.
    Failed = 1,
    /// Bad input: arguments, files, a plan the catalog rejects.
    BadInput = 2,
    /// The model could not be loaded or called.
    Model = 3,
    /// The plan (or the conversation's active plan, or the template) does not exist.
    NotFound = 4,
    /// A conflict: the plan changed since the given version, its id is taken, or its state does
    /// not allow the operation.
    Conflict = 5,
    /// The plan needs input: questions for the user, a review left open, a run waiting for a
    /// decision.
    NeedsInput = 10,
    /// A fallback plan, or an edit or answer that could not be applied.
    Fallback = 11,
    /// A plan was made, but steps the model wrote could not be planned and were left out (it is
    /// stored for review, never accepted by itself).
    Incomplete = 12,
    /// A run stopped at a cap of its budget (tool calls, model tokens, time or replans); the
    /// results of the steps that ran are kept.
    Capped = 13,
    /// Interrupted by SIGINT (128 + 2, as a shell reports it).
    Interrupted = 130,
    /// Terminated by SIGTERM (128 + 15).
    Terminated = 143,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
    }
}
