//! [`StoreError`]: everything a store operation can fail with.

use plansmith_core::{CatalogError, Diagnostic, PlanError};

use crate::state::ReviewState;

/// A store operation that did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No plan with this id.
    #[error("no plan with id `{0}`")]
    NotFound(String),
    /// The store's group-commit writer stopped before answering (its runtime is shutting
    /// down); the plan may or may not have been stored: look it up by id.
    #[error("the store's writer stopped before answering: look the plan up by its id")]
    WriterStopped,
    /// `create` with an id that is taken.
    #[error("a plan with id `{0}` already exists")]
    AlreadyExists(String),
    /// A list cursor that no page gave out (or a cursor together with an offset).
    #[error("bad list cursor: {0}")]
    BadCursor(String),
    /// Compare-and-swap failed: someone else wrote a newer version first. Reload and retry.
    #[error("plan `{id}` is at version {actual}, not {expected}: it changed since it was read")]
    Conflict {
        /// The plan.
        id: String,
        /// The version the writer based its change on.
        expected: u32,
        /// The version in the store.
        actual: u32,
    },
    /// `mark_step` with an index or id that is not in the plan.
    #[error("invalid step {given}: valid indices range from 0 to {max} (or a step id)")]
    InvalidStep {
        /// What was given.
        given: String,
        /// The last valid index (`-1` spelled as `none` when the plan has no steps).
        max: String,
    },
    /// `mark_step` with an unknown status.
    #[error("invalid step status `{given}`; valid statuses are: {valid}")]
    InvalidStatus {
        /// What was given.
        given: String,
        /// The valid names, comma-separated.
        valid: String,
    },
    /// The operation does not apply in the plan's review state (e.g. `answer` on an accepted plan).
    #[error("cannot {operation} plan `{id}`: it is {state}; {}", allowed(*.state))]
    InvalidState {
        /// The plan.
        id: String,
        /// What was tried.
        operation: &'static str,
        /// The state it is in.
        state: ReviewState,
    },
    /// No plan template with this name (or not this version of it: `name@v2`).
    #[error("no plan template `{0}`")]
    TemplateNotFound(String),
    /// No active plan for this conversation.
    #[error("no active plan for conversation `{0}`")]
    NoActivePlan(String),
    /// A structured edit made the plan invalid; nothing was stored.
    #[error("the edited plan is invalid: {}", summary(.diagnostics))]
    Invalid {
        /// The validation findings (errors first).
        diagnostics: Vec<Diagnostic>,
    },
    /// A JSON Patch that does not apply, or a patched document that is not a plan.
    #[error("bad edit: {0}")]
    BadEdit(String),
    /// A caller's tool catalog (or agent cards) that does not load: each problem names the
    /// tool or agent and the JSON pointer into what was sent.
    #[error("invalid catalog: {0}")]
    BadCatalog(CatalogError),
    /// A plan names a stored catalog that is not in the store.
    #[error("plan catalog `{0}` is not in the store")]
    CatalogNotFound(String),
    /// Replanning failed.
    #[error("replanning failed: {0}")]
    Planning(#[from] PlanError),
    /// The store location is unusable (bad URL, no data directory).
    #[error("bad store location `{location}`: {reason}")]
    Location {
        /// What was given.
        location: String,
        /// Why it is unusable.
        reason: String,
    },
    /// A stored document that does not decode (written by a newer version, or damaged).
    #[error("stored data for plan `{id}` is unreadable: {reason}")]
    Corrupt {
        /// The plan.
        id: String,
        /// Why.
        reason: String,
    },
    /// Running the schema migrations failed.
    #[error("cannot migrate the store schema (migration {version}): {source}")]
    Migration {
        /// The migration that failed.
        version: i64,
        /// The cause.
        source: DatabaseError,
    },
    /// The store was migrated by a newer plansmith: this one would misread what that one
    /// writes, so it does not open the store.
    #[error(
        "the store's schema is at migration {found}, from a newer plansmith (this one knows \
         migrations up to {known}): upgrade plansmith to use this store"
    )]
    NewerSchema {
        /// The newest migration recorded in the store.
        found: i64,
        /// The newest migration this build knows.
        known: i64,
    },
    /// Accepting a plan with no steps (and no finding that none are needed).
    #[error(
        "plan `{0}` has no steps: there is nothing to accept; replan it (with the tools it needs) or reject it"
    )]
    EmptyPlan(String),
    /// `exec_start` while a run of the plan is still running or waiting (resume it instead).
    #[error("plan `{0}` has a run in progress: resume it, or wait until it ends")]
    RunActive(String),
    /// A step decision that no run would apply: the plan has no run in progress, or the run
    /// is done with the step ([`PlanStore::decide_step`](crate::PlanStore::decide_step)).
    #[error("cannot decide step `{step}` of plan `{id}`: {reason}")]
    NotDecidable {
        /// The plan.
        id: String,
        /// The step.
        step: String,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A request to stop a run when the plan has no run in progress.
    #[error("plan `{id}` has no run in progress to stop: {why}")]
    NotRunning {
        /// The plan.
        id: String,
        /// What its last run did (or that it never ran).
        why: String,
    },
    /// The database reported an error.
    #[error("database error: {0}")]
    Database(DatabaseError),
}

/// An error the database reported, as text and as the source chain of [`StoreError::Database`].
/// Opaque: the database drivers' types are not part of this crate's API, so a driver upgrade is
/// not a breaking change for its callers.
#[derive(Debug)]
pub struct DatabaseError(Box<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for DatabaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl From<sqlx::Error> for DatabaseError {
    fn from(err: sqlx::Error) -> DatabaseError {
        DatabaseError(Box::new(err))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> StoreError {
        StoreError::Database(err.into())
    }
}

/// SQLite's errors on the group-commit writer's own connection.
impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> StoreError {
        StoreError::Database(DatabaseError(Box::new(err)))
    }
}

fn summary(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Result of a store operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What a state allows, for [`StoreError::InvalidState`]'s message.
fn allowed(state: ReviewState) -> String {
    match state.action_names() {
        names if names.is_empty() => "nothing more can be done with it".to_owned(),
        names => format!("it allows {names}"),
    }
}
