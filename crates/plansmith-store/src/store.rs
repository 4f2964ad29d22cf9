//! [`PlanStore`]: connection, schema migrations, versioned writes with compare-and-swap, and the
//! lifecycle operations of OpenManus's PlanningTool (create, update, get, list, set_active /
//! get_active, mark_step, delete).
//!
//! One code path serves both backends: sqlx's `AnyPool` with `$1` placeholders and portable SQL
//! (TEXT for JSON and RFC 3339 timestamps, BIGINT for versions).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use plansmith_core::{Plan, Step, StepStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::{RawValue, to_raw_value};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, AssertSqlSafe, Row};

use crate::error::{Result, StoreError};
use crate::group::GroupWriter;
use crate::review::{Review, ReviewAction, ReviewState};

/// Where a store lives: a SQLite file or a PostgreSQL URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A SQLite database file (created if missing), in WAL mode.
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL (`postgres://user@host:port/db`).
    Postgres(String),
}

impl Location {
    /// The default: `$XDG_DATA_HOME/plansmith/plans.db`, else `~/.local/share/plansmith/plans.db`.
    pub fn default_sqlite() -> Result<Location> {
        let base = std::env::var_os("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".local/share"))
            })
            .ok_or_else(|| StoreError::Location {
                location: "(default)".into(),
                reason: "neither XDG_DATA_HOME nor HOME is set".into(),
            })?;
        Ok(Location::Sqlite(base.join("plansmith").join("plans.db")))
    }

    /// Which backend this location uses.
    pub fn backend(&self) -> Backend {
        match self {
            Location::Sqlite(_) => Backend::Sqlite,
            Location::Postgres(_) => Backend::Postgres,
        }
    }
}

impl FromStr for Location {
    type Err = StoreError;

    /// `sqlite:PATH`, `sqlite://PATH`, `postgres://…` / `postgresql://…`, or a bare file path.
    fn from_str(text: &str) -> Result<Location> {
        let text = text.trim();
        if text.is_empty() {
            return Err(StoreError::Location {
                location: text.into(),
                reason: "empty".into(),
            });
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Location::Postgres(text.to_owned()));
        }
        if let Some(rest) = text.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            let path = path.split('?').next().unwrap_or(path);
            if path.is_empty() {
                return Err(StoreError::Location {
                    location: text.into(),
                    reason: "no file path after `sqlite:`".into(),
                });
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if text.contains("://") {
            return Err(StoreError::Location {
                location: text.into(),
                reason: "expected sqlite:PATH or postgres://…".into(),
            });
        }
        Ok(Location::Sqlite(PathBuf::from(text)))
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            Location::Postgres(url) => f.write_str(&redact_url(url)),
        }
    }
}

/// The URL without its password.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or(user);
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_owned(),
    }
}

/// The database behind a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// SQLite (embedded, one file, WAL).
    Sqlite,
    /// PostgreSQL (several nodes sharing one store).
    Postgres,
}

/// Why a version was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The first version.
    Created,
    /// The planner repaired the plan.
    Repaired,
    /// A person edited the plan (structured edit, or a lifecycle `update`).
    HumanEdit,
    /// A person's free-text feedback, replanned.
    Feedback,
    /// Answers to the plan's questions, replanned.
    Answer,
    /// A replan for another reason (execution observations).
    Replan,
    /// A step's status or notes changed.
    StepUpdate,
    /// The review state changed (accepted, rejected, stopped, handed off).
    Status,
}

impl Trigger {
    /// All triggers.
    pub const ALL: [Trigger; 8] = [
        Trigger::Created,
        Trigger::Repaired,
        Trigger::HumanEdit,
        Trigger::Feedback,
        Trigger::Answer,
        Trigger::Replan,
        Trigger::StepUpdate,
        Trigger::Status,
    ];

    /// The snake_case name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Created => "created",
            Trigger::Repaired => "repaired",
            Trigger::HumanEdit => "human_edit",
            Trigger::Feedback => "feedback",
            Trigger::Answer => "answer",
            Trigger::Replan => "replan",
            Trigger::StepUpdate => "step_update",
            Trigger::Status => "status",
        }
    }
}

impl FromStr for Trigger {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Trigger, String> {
        Trigger::ALL
            .into_iter()
            .find(|t| t.as_str() == text)
            .ok_or_else(|| format!("unknown trigger `{text}`"))
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plan as stored: the current version of the document, its review state and settings.
///
/// Its JSON also holds `actions`: what the review state allows ([`ReviewState::actions`]),
/// written from `state` each time (never stored, ignored when read back), so clients offer
/// exactly what the store accepts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StoredPlan {
    /// The current version of the plan (`plan.version` is the store version).
    pub plan: Plan,
    /// Where the plan is in the human-in-the-loop state machine.
    pub state: ReviewState,
    /// Review settings and progress (iteration, policy, rejection reason, the planning request).
    pub review: Review,
    /// When the plan was first stored.
    pub created_at: DateTime<Utc>,
    /// When the current version was written.
    pub updated_at: DateTime<Utc>,
    /// Whether a run of the plan was in progress (running, or waiting for people) when it was
    /// read through [`PlanStore::with_run`]: such a plan is not offered `run` again (the
    /// executor would refuse it). Not part of the stored document; false from other reads.
    #[serde(default, skip_serializing)]
    pub run_active: bool,
}

impl Serialize for StoredPlan {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        encode_stored(serializer, self, &self.plan, &self.review)
    }
}

/// A [`StoredPlan`]'s JSON, with `plan` and `review` given as they are to be written.
fn encode_stored<S: serde::Serializer>(
    serializer: S,
    stored: &StoredPlan,
    plan: &impl Serialize,
    review: &impl Serialize,
) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut out = serializer.serialize_struct("StoredPlan", 6)?;
    out.serialize_field("plan", plan)?;
    out.serialize_field("state", &stored.state)?;
    out.serialize_field("actions", &stored.actions())?;
    out.serialize_field("review", review)?;
    out.serialize_field("created_at", &stored.created_at)?;
    out.serialize_field("updated_at", &stored.updated_at)?;
    out.end()
}

/// A plan just stored ([`PlanStore::submit_plan`]), with the JSON written for its document and
/// its review. It encodes as the [`StoredPlan`] would, reusing that JSON: the answer to a
/// request that stored a plan does not encode the plan a second time (under load, encoding the
/// answer's plan and review again was ~6 % of the server's time per plan).
#[derive(Debug, Clone)]
pub struct Submitted {
    /// The plan as stored.
    pub stored: StoredPlan,
    /// `stored.plan` as JSON, as written to the store.
    document: Box<RawValue>,
    /// `stored.review` as JSON, as written to the store.
    review: Box<RawValue>,
}

impl Serialize for Submitted {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        encode_stored(serializer, &self.stored, &self.document, &self.review)
    }
}

/// The OpenAPI schema of [`StoredPlan`]'s JSON (its fields and the derived `actions`).
#[cfg(feature = "openapi")]
mod stored_plan_schema {
    use std::borrow::Cow;

    use utoipa::openapi::{RefOr, schema::Schema};
    use utoipa::{PartialSchema, ToSchema};

    use super::*;

    /// A plan as stored: the current version of the document, its review state and settings.
    #[derive(ToSchema)]
    #[allow(dead_code)] // only its schema is used
    struct StoredPlanJson {
        /// The current version of the plan (`plan.version` is the store version).
        plan: Plan,
        /// Where the plan is in the human-in-the-loop state machine.
        state: ReviewState,
        /// What the review state allows now (derived from `state`; ignored in a request).
        actions: Vec<ReviewAction>,
        /// Review settings and progress (iteration, policy, rejection reason, the planning
        /// request).
        review: Review,
        /// When the plan was first stored.
        created_at: DateTime<Utc>,
        /// When the current version was written.
        updated_at: DateTime<Utc>,
    }

    impl PartialSchema for StoredPlan {
        fn schema() -> RefOr<Schema> {
            StoredPlanJson::schema()
        }
    }

    impl ToSchema for StoredPlan {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("StoredPlan")
        }

        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            StoredPlanJson::schemas(schemas);
        }
    }
}

impl StoredPlan {
    /// The current version number.
    pub fn version(&self) -> u32 {
        self.plan.version
    }

    /// `Ok` when the plan's review state allows `action` ([`ReviewState::actions`]), else the
    /// [`StoreError::InvalidState`] the store's operation would return. Lets a caller refuse
    /// before doing anything costly (loading a model to replan, say).
    pub fn require(&self, action: ReviewAction) -> Result<()> {
        if self.state.allows(action) {
            Ok(())
        } else {
            Err(StoreError::InvalidState {
                id: self.plan.id.clone(),
                operation: action.as_str(),
                state: self.state,
            })
        }
    }

    /// What can be done with the plan now: what its review state allows
    /// ([`ReviewState::actions`]), without `run` while a run of it is in progress.
    pub fn actions(&self) -> Vec<ReviewAction> {
        self.state
            .actions()
            .iter()
            .copied()
            .filter(|action| !(self.run_active && *action == ReviewAction::Run))
            .collect()
    }

    /// `Ok` when the caller saw this version (or named none); else [`StoreError::Conflict`]:
    /// a reviewer who read version 3 must not accept the steps that version 4 added.
    pub fn require_version(&self, expected: Option<u32>) -> Result<()> {
        match expected {
            Some(expected) if expected != self.version() => Err(StoreError::Conflict {
                id: self.plan.id.clone(),
                expected,
                actual: self.version(),
            }),
            _ => Ok(()),
        }
    }

    /// Text rendering: [`Plan::render_text`] (progress and markers), then the review state, the
    /// note of the last edit or answer that could not be applied, what it allows (`Actions: accept, reject, …`) and the questions; for a plan that lost steps
    /// when it was planned, what it lost.
    pub fn render_text(&self) -> String {
        self.render_text_from(1)
    }

    /// [`StoredPlan::render_text`] with the steps numbered from `first` (see
    /// [`Plan::render_text_from`]).
    pub fn render_text_from(&self, first: usize) -> String {
        let mut out = self.plan.render_text_from(first);
        if let Some(reason) = self
            .plan
            .metadata
            .get("incomplete")
            .and_then(|i| i.get("reason"))
            .and_then(serde_json::Value::as_str)
        {
            out.push_str(&format!("Incomplete when planned: {reason}\n"));
        }
        out.push_str(&format!("State: {}", self.state));
        if let Some(reason) = &self.review.rejection {
            out.push_str(&format!(" ({reason})"));
        }
        out.push('\n');
        if let Some(note) = &self.review.note {
            out.push_str(&format!("Note: {note}\n"));
        }
        let actions: Vec<&str> = self.actions().iter().map(|a| a.as_str()).collect();
        let actions = actions.join(", ");
        if !actions.is_empty() {
            out.push_str(&format!("Actions: {actions}\n"));
        }
        if !self.plan.questions.is_empty() {
            out.push_str("Questions:\n");
            for question in &self.plan.questions {
                out.push_str(&format!("  {}: {}\n", question.id, question.text));
            }
        }
        out
    }
}

/// One row of a plan's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VersionRecord {
    /// The plan.
    pub plan_id: String,
    /// This version.
    pub version: u32,
    /// The version it was derived from (none for the first).
    pub parent_version: Option<u32>,
    /// Why it was written.
    pub trigger: Trigger,
    /// Who wrote it (a user, a worker, `planner`).
    pub actor: String,
    /// When.
    pub created_at: DateTime<Utc>,
    /// The review state after this change.
    pub state: ReviewState,
    /// RFC 6902 JSON Patch from the parent document to this one (the whole document for v1).
    pub diff: Value,
}

/// The cap on counted plans that the service, the MCP server and the CLI use for list totals
/// ([`ListFilter::total_cap`]) unless asked for an exact count.
pub const DEFAULT_TOTAL_CAP: u64 = 10_000;

/// Filters and paging for [`PlanStore::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only plans of this owner.
    pub owner: Option<String>,
    /// Only plans of this conversation.
    pub conversation_id: Option<String>,
    /// Only plans of this thread.
    pub thread_id: Option<String>,
    /// Only plans in this review state.
    pub state: Option<ReviewState>,
    /// Page size (default 50, at most 1000).
    pub limit: Option<u32>,
    /// Rows to skip. Costs time in proportion to the offset, and a plan updated while paging
    /// shifts the pages under it; prefer [`ListFilter::cursor`].
    pub offset: u32,
    /// Start after this position: a previous page's [`Page::next_cursor`]. Each page costs the
    /// same however deep it is. A plan updated while paging moves to the front, ahead of the
    /// pages already read, and the other plans are neither skipped nor shown twice. Only with
    /// `offset` 0.
    pub cursor: Option<String>,
    /// Count at most this many matching plans for [`Page::total`] (`None`: count them all). A
    /// full count reads every matching index entry, so its cost grows with the store (25 ms per
    /// page at a million plans on SQLite); a capped one stops at the cap.
    pub total_cap: Option<u64>,
}

/// One page of [`PlanStore::list`], most recently updated first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Page {
    /// The plans of this page.
    pub plans: Vec<StoredPlan>,
    /// How many plans match the filter in total, or the cap of [`ListFilter::total_cap`] when
    /// more do (then [`Page::total_exact`] is `false`).
    pub total: u64,
    /// Whether [`Page::total`] is the exact count (`false`: at least that many match).
    pub total_exact: bool,
    /// Offset of the next page, if there is one (not given when the page was asked for by
    /// cursor).
    pub next_offset: Option<u32>,
    /// Position of the next page, if there is one: pass it as the next request's cursor. Opaque.
    pub next_cursor: Option<String>,
}

/// Which step [`PlanStore::mark_step`] changes: a 0-based index (OpenManus) or a step id (`s2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepKey {
    /// 0-based position.
    Index(usize),
    /// Step id.
    Id(String),
}

impl FromStr for StepKey {
    type Err = std::convert::Infallible;

    /// Digits are an index; anything else is a step id.
    fn from_str(text: &str) -> std::result::Result<StepKey, Self::Err> {
        let text = text.trim();
        Ok(match text.parse::<usize>() {
            Ok(idx) => StepKey::Index(idx),
            Err(_) => StepKey::Id(text.to_owned()),
        })
    }
}

impl std::fmt::Display for StepKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepKey::Index(idx) => write!(f, "{idx}"),
            StepKey::Id(id) => f.write_str(id),
        }
    }
}

/// A change to write as the next version (see [`PlanStore::write`]).
#[derive(Debug, Clone)]
pub struct Change {
    /// The version the change is based on: the write fails with [`StoreError::Conflict`] unless
    /// it is still current.
    pub expected_version: u32,
    /// The new document (its id must be the plan's; version fields are set by the store).
    pub plan: Plan,
    /// The new review state.
    pub state: ReviewState,
    /// The new review settings and progress.
    pub review: Review,
    /// Why.
    pub trigger: Trigger,
    /// Who.
    pub actor: String,
}

/// A version's document in a query over `plan_versions v LEFT JOIN plans p ON p.id =
/// v.plan_id AND p.version = v.version`. The current version's document is stored once, in
/// `plans.document`, and its `plan_versions.document` is empty: a new plan wrote every document
/// twice, a quarter of its bytes on disk. [`PlanStore::write`] fills the old version's document
/// in when it stops being current. Rows written before this keep theirs, which is read first.
/// `NULL` when the document is empty and the version is not current (a corrupt row).
const VERSION_DOCUMENT: &str = "CASE WHEN v.document <> '' THEN v.document ELSE p.document END";

/// Why a version whose document [`VERSION_DOCUMENT`] reads as `NULL` is corrupt.
fn lost_document(version: u32) -> String {
    format!("version {version} keeps no document and is not the plan's current version")
}

/// The SQL schema, one migration per entry, applied in order and recorded in
/// `plansmith_migrations`. Portable between SQLite and PostgreSQL; every statement is
/// idempotent so two nodes starting at once cannot trip over each other.
const MIGRATIONS: &[(i64, &str, &[&str])] = &[
    (
        1,
        "plans, versions, active plans",
        &[
            "CREATE TABLE IF NOT EXISTS plans (
            id TEXT PRIMARY KEY,
            version BIGINT NOT NULL,
            state TEXT NOT NULL,
            owner TEXT,
            conversation_id TEXT,
            thread_id TEXT,
            title TEXT NOT NULL,
            document TEXT NOT NULL,
            review TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )",
            "CREATE INDEX IF NOT EXISTS plans_by_owner ON plans (owner, updated_at)",
            "CREATE INDEX IF NOT EXISTS plans_by_conversation ON plans (conversation_id, updated_at)",
            "CREATE INDEX IF NOT EXISTS plans_by_state ON plans (state, updated_at)",
            "CREATE TABLE IF NOT EXISTS plan_versions (
            plan_id TEXT NOT NULL,
            version BIGINT NOT NULL,
            parent_version BIGINT,
            trigger_kind TEXT NOT NULL,
            actor TEXT NOT NULL,
            created_at TEXT NOT NULL,
            state TEXT NOT NULL,
            diff TEXT NOT NULL,
            document TEXT NOT NULL,
            PRIMARY KEY (plan_id, version)
        )",
            "CREATE TABLE IF NOT EXISTS active_plans (
            conversation_id TEXT PRIMARY KEY,
            plan_id TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )",
        ],
    ),
    // There is no version 2: numbers are never reused, so the gap stays.
    (
        3,
        "plan templates",
        &["CREATE TABLE IF NOT EXISTS plan_templates (
            name TEXT NOT NULL,
            version BIGINT NOT NULL,
            description TEXT NOT NULL,
            document TEXT NOT NULL,
            actor TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (name, version)
        )"],
    ),
    (
        4,
        "execution runs, steps, attempts, step decisions",
        &[
            "CREATE TABLE IF NOT EXISTS exec_runs (
            plan_id TEXT PRIMARY KEY,
            base_version BIGINT NOT NULL,
            state TEXT NOT NULL,
            replans BIGINT NOT NULL,
            node TEXT NOT NULL,
            run_lease_owner TEXT,
            run_lease_until TEXT,
            outcome TEXT,
            started_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )",
            "CREATE INDEX IF NOT EXISTS exec_runs_by_state ON exec_runs (state, updated_at)",
            "CREATE TABLE IF NOT EXISTS exec_steps (
            plan_id TEXT NOT NULL,
            step_id TEXT NOT NULL,
            status TEXT NOT NULL,
            attempt BIGINT NOT NULL,
            reruns BIGINT NOT NULL,
            result TEXT,
            error TEXT,
            note TEXT NOT NULL,
            lease_owner TEXT,
            lease_until TEXT,
            not_before TEXT,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (plan_id, step_id)
        )",
            "CREATE TABLE IF NOT EXISTS exec_attempts (
            idempotency_key TEXT PRIMARY KEY,
            plan_id TEXT NOT NULL,
            base_version BIGINT NOT NULL,
            step_id TEXT NOT NULL,
            attempt BIGINT NOT NULL,
            node TEXT NOT NULL,
            runs BIGINT NOT NULL,
            outcome TEXT NOT NULL,
            result TEXT,
            error TEXT,
            started_at TEXT NOT NULL,
            finished_at TEXT
        )",
            "CREATE INDEX IF NOT EXISTS exec_attempts_by_plan ON exec_attempts (plan_id, started_at)",
            "CREATE TABLE IF NOT EXISTS exec_decisions (
            plan_id TEXT NOT NULL,
            step_id TEXT NOT NULL,
            verdict TEXT NOT NULL,
            note TEXT NOT NULL,
            actor TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (plan_id, step_id)
        )",
        ],
    ),
    (
        5,
        "owner and conversation indexes hold only plans that have one",
        // Most plans have no conversation, and a server without tokens gives none an owner: the
        // full indexes took an entry for every new plan that no filter can use (a filter is
        // `owner = $1` or `conversation_id = $1`, which implies NOT NULL, so both SQLite and
        // PostgreSQL use the partial index for it).
        &[
            "DROP INDEX IF EXISTS plans_by_owner",
            "DROP INDEX IF EXISTS plans_by_conversation",
            "CREATE INDEX IF NOT EXISTS plans_by_owner_set ON plans (owner, updated_at)
             WHERE owner IS NOT NULL",
            "CREATE INDEX IF NOT EXISTS plans_by_conversation_set ON plans (conversation_id, updated_at)
             WHERE conversation_id IS NOT NULL",
        ],
    ),
    (
        6,
        "plans by last update, for the unfiltered list",
        // `GET /v1/plans` with no filter (the review page's first view) sorted every plan to
        // show the newest 50: 130-220 ms with 38,000 plans, growing with the store. Read
        // backwards, this index hands out the page in order (`updated_at DESC, id DESC`). New
        // plans append to its last page, as they do to the time-ordered id indexes.
        &["CREATE INDEX IF NOT EXISTS plans_by_updated ON plans (updated_at, id)"],
    ),
    (
        7,
        "filtered lists read their page in order; plans by thread",
        // The filter indexes ended at `updated_at`, so a filtered list sorted each run of equal
        // times by id, and a deep page by state took 0.67 s with 267,000 plans. With the id
        // last, a filtered page is read in order like the unfiltered one, and a cursor (the
        // last plan's `updated_at` and id) is a place in the index to start from. The thread
        // filter had no index at all.
        &[
            "DROP INDEX IF EXISTS plans_by_state",
            "DROP INDEX IF EXISTS plans_by_owner_set",
            "DROP INDEX IF EXISTS plans_by_conversation_set",
            "CREATE INDEX IF NOT EXISTS plans_by_state_updated ON plans (state, updated_at, id)",
            "CREATE INDEX IF NOT EXISTS plans_by_owner_updated ON plans (owner, updated_at, id)
             WHERE owner IS NOT NULL",
            "CREATE INDEX IF NOT EXISTS plans_by_conversation_updated
             ON plans (conversation_id, updated_at, id) WHERE conversation_id IS NOT NULL",
            "CREATE INDEX IF NOT EXISTS plans_by_thread_updated ON plans (thread_id, updated_at, id)
             WHERE thread_id IS NOT NULL",
        ],
    ),
    (
        8,
        "the current version's document is stored once, in plans",
        // No statement: rows written before keep their copy and read as they did. Recorded so
        // that a later plansmith's newer schema is refused by this one (`NewerSchema`), not
        // misread; plansmith before this migration reads a current version's empty document
        // as a corrupt row (see `VERSION_DOCUMENT`).
        &[],
    ),
    (
        9,
        "catalogs sent with requests, by content id",
        // A plan made with a caller's tools keeps their id in its review; its replans and runs
        // read the document back from here, on any process on the store.
        &["CREATE TABLE IF NOT EXISTS catalogs (
            id TEXT PRIMARY KEY,
            document TEXT NOT NULL,
            created_at TEXT NOT NULL
        )"],
    ),
];

/// Key of the PostgreSQL advisory lock held while migrating (`"plansmth"` in ASCII): every
/// plansmith process uses the same key, so concurrent starts migrate one after the other.
pub const MIGRATION_LOCK: i64 = 0x706c_616e_736d_7468;

/// A plan store on SQLite or PostgreSQL. Cheap to clone (a connection pool).
#[derive(Debug, Clone)]
pub struct PlanStore {
    pub(crate) pool: AnyPool,
    location: Location,
    /// New plans go through this writer's batches (see [`PlanStore::with_group_commit`]).
    writer: Option<GroupWriter>,
}

const PLAN_COLUMNS: &str = "id, version, state, document, review, created_at, updated_at";

impl PlanStore {
    /// Opens (creating if needed) the store at `location` and runs the migrations.
    ///
    /// SQLite: the file and its directory are created; WAL journal, `synchronous=FULL`, a 5 s busy
    /// timeout. PostgreSQL: the database must exist.
    pub async fn open(location: &Location) -> Result<PlanStore> {
        sqlx::any::install_default_drivers();
        let pool = match location {
            Location::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|err| StoreError::Location {
                        location: location.to_string(),
                        reason: format!("cannot create {}: {err}", dir.display()),
                    })?;
                }
                let url = sqlite_url(path);
                AnyPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(30))
                    // An in-process database has no connection to lose: the ping before each
                    // acquire was one more round trip to sqlx's SQLite thread per transaction.
                    .test_before_acquire(false)
                    .after_connect(|conn, _meta| {
                        Box::pin(async move {
                            for pragma in [
                                "PRAGMA journal_mode = WAL",
                                "PRAGMA synchronous = FULL",
                                "PRAGMA busy_timeout = 10000",
                            ] {
                                sqlx::query(pragma).execute(&mut *conn).await?;
                            }
                            Ok(())
                        })
                    })
                    .connect(&url)
                    .await?
            }
            Location::Postgres(url) => {
                AnyPoolOptions::new()
                    .max_connections(8)
                    .acquire_timeout(Duration::from_secs(30))
                    .connect(url)
                    .await?
            }
        };
        let store = PlanStore {
            pool,
            location: location.clone(),
            writer: None,
        };
        store.migrate().await?;
        Ok(store)
    }

    /// The same store, with new plans written by group commit: concurrent
    /// [`PlanStore::create`] calls (and so [`PlanStore::submit`]) share one transaction, and
    /// one disk flush, per batch of at most `max_batch`; each call returns once its batch
    /// committed, so a returned plan is as durable as without it. For servers with many
    /// clients. Must be called inside a tokio runtime; outside one, the store is returned
    /// unchanged. On SQLite the writer is a thread with a connection of its own (it stops when
    /// the last clone of the store is dropped; if that connection cannot be opened, the store
    /// is returned unchanged); on PostgreSQL it is a task on the runtime, and once that runtime
    /// has shut down, creates write on their own again.
    pub fn with_group_commit(mut self, max_batch: usize) -> PlanStore {
        if let Some(writer) = GroupWriter::start(self.pool.clone(), &self.location, max_batch) {
            self.writer = Some(writer);
        }
        self
    }

    /// Opens the store named by `text` (see [`Location::from_str`]).
    pub async fn open_str(text: &str) -> Result<PlanStore> {
        PlanStore::open(&text.parse()?).await
    }

    /// Where this store lives.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Which backend this store uses.
    pub fn backend(&self) -> Backend {
        self.location.backend()
    }

    /// Whether the database answers a trivial query (`SELECT 1`, on a pooled connection or a
    /// new one). Waits as long as the pool's acquire timeout (30 s); callers that must answer
    /// fast bound it themselves.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes the pool, waiting for connections to finish (SQLite checkpoints its WAL).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// SQLite's `PRAGMA integrity_check` (`"ok"` when sound); PostgreSQL always answers `"ok"`
    /// (it has no single equivalent; its WAL guarantees committed transactions).
    pub async fn integrity_check(&self) -> Result<String> {
        match self.backend() {
            Backend::Sqlite => {
                let rows = sqlx::query("PRAGMA integrity_check")
                    .fetch_all(&self.pool)
                    .await?;
                let mut lines = Vec::new();
                for row in rows {
                    lines.push(row.try_get::<String, _>(0)?);
                }
                Ok(lines.join("\n"))
            }
            Backend::Postgres => Ok("ok".into()),
        }
    }

    /// Applies the missing migrations. Safe when several processes open the same database at
    /// once: on PostgreSQL the whole run is one transaction holding a transaction-level
    /// advisory lock ([`MIGRATION_LOCK`]), so a second node waits, then sees the migrations
    /// recorded and applies nothing. (Without the lock two nodes racing on
    /// `CREATE TABLE IF NOT EXISTS` can both pass the existence check and one fails on
    /// PostgreSQL's catalog unique index.) SQLite serialises writers on the file itself.
    async fn migrate(&self) -> Result<()> {
        let bootstrap = "CREATE TABLE IF NOT EXISTS plansmith_migrations (
            version BIGINT PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at TEXT NOT NULL
        )";
        let fail = |version: i64| move |source| StoreError::Migration { version, source };
        let mut tx = self.pool.begin().await.map_err(fail(0))?;
        if self.backend() == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(MIGRATION_LOCK)
                .execute(&mut *tx)
                .await
                .map_err(fail(0))?;
        }
        sqlx::query(bootstrap)
            .execute(&mut *tx)
            .await
            .map_err(fail(0))?;
        // A store migrated further than this build knows was written by a newer plansmith,
        // whose rows this one could misread: refuse it before anything is read or written.
        let known = MIGRATIONS
            .iter()
            .map(|(version, ..)| *version)
            .max()
            .unwrap_or(0);
        let found: Option<i64> = sqlx::query("SELECT MAX(version) FROM plansmith_migrations")
            .fetch_one(&mut *tx)
            .await
            .map_err(fail(0))?
            .try_get(0)?;
        if let Some(found) = found.filter(|found| *found > known) {
            tx.rollback().await.map_err(fail(0))?;
            return Err(StoreError::NewerSchema { found, known });
        }
        for (version, name, statements) in MIGRATIONS {
            let applied: Option<i64> =
                sqlx::query("SELECT version FROM plansmith_migrations WHERE version = $1")
                    .bind(*version)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(fail(*version))?
                    .map(|row| row.try_get::<i64, _>(0))
                    .transpose()?;
            if applied.is_some() {
                continue;
            }
            for statement in *statements {
                sqlx::query(AssertSqlSafe(*statement))
                    .execute(&mut *tx)
                    .await
                    .map_err(fail(*version))?;
            }
            sqlx::query(
                "INSERT INTO plansmith_migrations (version, name, applied_at) VALUES ($1, $2, $3)
                 ON CONFLICT (version) DO NOTHING",
            )
            .bind(*version)
            .bind(*name)
            .bind(timestamp(Utc::now()))
            .execute(&mut *tx)
            .await
            .map_err(fail(*version))?;
        }
        tx.commit().await.map_err(fail(0))?;
        Ok(())
    }

    // ---------------------------------------------------------------- lifecycle operations

    /// Stores a new plan as version 1 (trigger `created`). Errors with
    /// [`StoreError::AlreadyExists`] when the id is taken (OpenManus: "Plan already exists").
    pub async fn create(
        &self,
        plan: Plan,
        state: ReviewState,
        review: Review,
        actor: &str,
    ) -> Result<StoredPlan> {
        let submitted = self.create_encoded(plan, state, review, actor).await?;
        Ok(submitted.stored)
    }

    /// [`PlanStore::create`], answered with the JSON written for the plan and its review.
    pub(crate) async fn create_encoded(
        &self,
        plan: Plan,
        state: ReviewState,
        review: Review,
        actor: &str,
    ) -> Result<Submitted> {
        let mut plan = plan;
        if plan.id.trim().is_empty() {
            return Err(StoreError::BadEdit("a plan needs a non-empty id".into()));
        }
        plan.version = 1;
        plan.parent_version = None;
        let now = Utc::now().trunc_subsecs(6);
        let row = NewPlan {
            document: to_raw_value(&plan).map_err(bad_json)?,
            review: to_raw_value(&review).map_err(bad_json)?,
            plan,
            state,
            actor: actor.to_owned(),
            at: now,
        };
        let (row, stored) = self.insert_new(row).await?;
        if !stored {
            return Err(StoreError::AlreadyExists(row.plan.id));
        }
        Ok(Submitted {
            stored: StoredPlan {
                plan: row.plan,
                state,
                review,
                created_at: now,
                updated_at: now,
                run_active: false,
            },
            document: row.document,
            review: row.review,
        })
    }

    /// Writes a new plan's rows: through the group writer when there is one (see
    /// [`PlanStore::with_group_commit`]), else in a transaction of its own. Gives the row back
    /// with whether it was stored (`false`: the id is taken).
    async fn insert_new(&self, row: NewPlan) -> Result<(NewPlan, bool)> {
        let row = match &self.writer {
            Some(writer) => match writer.insert(row).await {
                Ok(answer) => return answer,
                // The writer's runtime is gone: write it here.
                Err(row) => row,
            },
            None => row,
        };
        let mut tx = self.pool.begin().await?;
        let stored = insert_new(&mut tx, &row).await?;
        tx.commit().await?;
        Ok((row, stored))
    }

    /// The current version of a plan; [`StoreError::NotFound`] if there is none.
    pub async fn get(&self, id: &str) -> Result<StoredPlan> {
        let sql = format!("SELECT {PLAN_COLUMNS} FROM plans WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_owned())
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        decode_plan(&row)
    }

    /// `stored` with [`StoredPlan::run_active`] filled in from the plan's last run: what a
    /// reader that offers the plan's actions calls. The run is looked up only when the review
    /// state allows `run` (no other action depends on it).
    pub async fn with_run(&self, mut stored: StoredPlan) -> Result<StoredPlan> {
        if stored.state.allows(ReviewAction::Run) {
            stored.run_active = self.exec_run(&stored.plan.id).await?.is_some_and(|run| {
                matches!(
                    run.state,
                    crate::exec::RunState::Running | crate::exec::RunState::Waiting
                )
            });
        }
        Ok(stored)
    }

    /// One version of a plan's document.
    pub async fn get_version(&self, id: &str, version: u32) -> Result<Plan> {
        let document = self.version_document(id, version).await?;
        from_json(id, &document)
    }

    /// The text of one version's document: its own, or the plan's for the current version
    /// (stored once, in `plans`: see [`VERSION_DOCUMENT`]).
    async fn version_document(&self, id: &str, version: u32) -> Result<String> {
        let sql = format!(
            "SELECT {VERSION_DOCUMENT} AS document
             FROM plan_versions v LEFT JOIN plans p ON p.id = v.plan_id AND p.version = v.version
             WHERE v.plan_id = $1 AND v.version = $2"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_owned())
            .bind(i64::from(version))
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("{id}@v{version}")))?;
        row.try_get::<Option<String>, _>("document")?
            .ok_or_else(|| StoreError::Corrupt {
                id: id.to_owned(),
                reason: lost_document(version),
            })
    }

    /// Writes `change` as the next version, if `change.expected_version` is still current
    /// (compare-and-swap): a stale writer gets [`StoreError::Conflict`], never a lost update.
    pub async fn write(&self, change: Change) -> Result<StoredPlan> {
        let Change {
            expected_version,
            mut plan,
            state,
            review,
            trigger,
            actor,
        } = change;
        let id = plan.id.clone();
        let parent = self.version_document(&id, expected_version).await;
        let parent_document = match parent {
            Ok(parent) => parent,
            Err(StoreError::NotFound(_)) => {
                // Either the plan is gone or the expected version never existed.
                let current = self.get(&id).await?;
                return Err(StoreError::Conflict {
                    id,
                    expected: expected_version,
                    actual: current.version(),
                });
            }
            Err(err) => return Err(err),
        };
        let parent: Plan = from_json(&id, &parent_document)?;
        let new_version = expected_version.saturating_add(1);
        plan.version = new_version;
        plan.parent_version = Some(expected_version);
        let now = Utc::now().trunc_subsecs(6);
        let before = serde_json::to_value(&parent).map_err(bad_json)?;
        let after = serde_json::to_value(&plan).map_err(bad_json)?;
        let diff = serde_json::to_string(&json_patch::diff(&before, &after)).map_err(bad_json)?;
        let document = to_json(&plan)?;
        let review_json = serde_json::to_string(&review).map_err(bad_json)?;
        let mut tx = self.pool.begin().await?;
        // The UPDATE comes first: on SQLite it takes the write lock before anything is read in
        // this transaction, so a busy writer waits instead of failing with a stale snapshot.
        // `RETURNING` answers what the answer needs in the same round trip.
        let updated = sqlx::query(
            "UPDATE plans SET version = $1, state = $2, owner = $3, conversation_id = $4,
                              thread_id = $5, title = $6, document = $7, review = $8,
                              updated_at = $9
             WHERE id = $10 AND version = $11
             RETURNING created_at",
        )
        .bind(i64::from(new_version))
        .bind(state.as_str())
        .bind(plan.owner.clone())
        .bind(plan.conversation_id.clone())
        .bind(plan.thread_id.clone())
        .bind(plan.title.clone())
        .bind(document.clone())
        .bind(review_json)
        .bind(timestamp(now))
        .bind(id.clone())
        .bind(i64::from(expected_version))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(updated) = updated else {
            tx.rollback().await?;
            let current = self.get(&id).await?;
            return Err(StoreError::Conflict {
                id,
                expected: expected_version,
                actual: current.version(),
            });
        };
        let created_at = parse_time(&id, &updated.try_get::<String, _>(0)?)?;
        // The parent stops being current: it keeps its document from now on, and the new
        // version's is the plan's (a row written before documents were stored once has its own
        // already, and keeps it).
        sqlx::query(
            "UPDATE plan_versions SET document = $1
             WHERE plan_id = $2 AND version = $3 AND document = ''",
        )
        .bind(parent_document)
        .bind(id.clone())
        .bind(i64::from(expected_version))
        .execute(&mut *tx)
        .await?;
        insert_version(&mut tx, &plan, trigger, &actor, now, state, &diff).await?;
        tx.commit().await?;
        Ok(StoredPlan {
            plan,
            state,
            review,
            created_at,
            updated_at: now,
            run_active: false,
        })
    }

    /// OpenManus `update`: replaces title, goal and steps. A new step whose title, description
    /// and action equal an old step's keeps that step's status, notes, result and error.
    /// `expected_version` of `None` means "whatever is current" (still checked at write time).
    pub async fn update(
        &self,
        id: &str,
        new_plan: Plan,
        expected_version: Option<u32>,
        actor: &str,
    ) -> Result<StoredPlan> {
        let current = self.get(id).await?;
        let expected = expected_version.unwrap_or(current.version());
        let mut plan = new_plan;
        plan.id = current.plan.id.clone();
        plan.created_at = current.plan.created_at;
        carry_step_progress(&current.plan.steps, &mut plan.steps);
        self.write(Change {
            expected_version: expected,
            plan,
            state: current.state,
            review: current.review,
            trigger: Trigger::HumanEdit,
            actor: actor.to_owned(),
        })
        .await
    }

    /// OpenManus `mark_step`: sets a step's status (by name: `completed`, …) and, if given, its
    /// notes. Bad index → [`StoreError::InvalidStep`]; bad status → [`StoreError::InvalidStatus`].
    pub async fn mark_step(
        &self,
        id: &str,
        step: &StepKey,
        status: Option<&str>,
        notes: Option<&str>,
        expected_version: Option<u32>,
        actor: &str,
    ) -> Result<StoredPlan> {
        let status = status.map(parse_status).transpose()?;
        let current = self.get(id).await?;
        let expected = expected_version.unwrap_or(current.version());
        let mut plan = current.plan.clone();
        let idx = step_index(&plan.steps, step)?;
        if let Some(target) = plan.steps.get_mut(idx) {
            if let Some(status) = status {
                target.status = status;
            }
            if let Some(notes) = notes {
                target.notes = notes.to_owned();
            }
        }
        self.write(Change {
            expected_version: expected,
            plan,
            state: current.state,
            review: current.review,
            trigger: Trigger::StepUpdate,
            actor: actor.to_owned(),
        })
        .await
    }

    /// OpenManus `list`, with filters and paging; most recently updated first (ties: the
    /// newest id first).
    pub async fn list(&self, filter: &ListFilter) -> Result<Page> {
        let mut conditions = Vec::new();
        let mut binds: Vec<String> = Vec::new();
        let mut push = |column: &str, value: &str| {
            binds.push(value.to_owned());
            conditions.push(format!("{column} = ${}", binds.len()));
        };
        if let Some(owner) = &filter.owner {
            push("owner", owner);
        }
        if let Some(conversation) = &filter.conversation_id {
            push("conversation_id", conversation);
        }
        if let Some(thread) = &filter.thread_id {
            push("thread_id", thread);
        }
        if let Some(state) = filter.state {
            push("state", state.as_str());
        }
        let where_clause = if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        };
        // Capped: one row past the cap tells that more match, without reading them all.
        let count_sql = match filter.total_cap {
            None => format!("SELECT COUNT(*) FROM plans{where_clause}"),
            Some(cap) => format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM plans{where_clause} LIMIT {}) AS capped",
                cap.saturating_add(1).min(i64::MAX as u64)
            ),
        };
        let mut count = sqlx::query(AssertSqlSafe(count_sql));
        for value in &binds {
            count = count.bind(value.clone());
        }
        let counted: i64 = count.fetch_one(&self.pool).await?.try_get(0)?;
        let counted = u64::try_from(counted).unwrap_or(0);
        let (total, total_exact) = match filter.total_cap {
            Some(cap) if counted > cap => (cap, false),
            _ => (counted, true),
        };
        let limit = filter.limit.unwrap_or(50).clamp(1, 1000);
        let after = match &filter.cursor {
            Some(_) if filter.offset > 0 => {
                return Err(StoreError::BadCursor(
                    "give a cursor or an offset, not both".to_owned(),
                ));
            }
            Some(cursor) => Some(Cursor::decode(cursor)?),
            None => None,
        };
        // The page in index order (`updated_at DESC, id DESC`), one row more than asked for to
        // know whether another page follows.
        let mut sql = format!("SELECT {PLAN_COLUMNS} FROM plans{where_clause}");
        if after.is_some() {
            sql.push_str(if conditions.is_empty() {
                " WHERE"
            } else {
                " AND"
            });
            sql.push_str(&format!(
                " (updated_at, id) < (${}, ${})",
                binds.len() + 1,
                binds.len() + 2
            ));
        }
        sql.push_str(&format!(
            " ORDER BY updated_at DESC, id DESC LIMIT {} OFFSET {}",
            limit + 1,
            filter.offset
        ));
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for value in &binds {
            query = query.bind(value.clone());
        }
        if let Some(after) = after {
            query = query.bind(after.updated_at).bind(after.id);
        }
        let mut rows = query.fetch_all(&self.pool).await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match rows.last() {
            Some(last) if more => Some(
                Cursor {
                    updated_at: last.try_get("updated_at")?,
                    id: last.try_get("id")?,
                }
                .encode(),
            ),
            _ => None,
        };
        let plans = rows.iter().map(decode_plan).collect::<Result<Vec<_>>>()?;
        let end = u64::from(filter.offset) + plans.len() as u64;
        let next_offset = (more && filter.cursor.is_none())
            .then(|| u32::try_from(end).ok())
            .flatten();
        Ok(Page {
            plans,
            total,
            total_exact,
            next_offset,
            next_cursor,
        })
    }

    /// The plans of a conversation in the order they were created (oldest first), at most the
    /// `limit` newest: the earlier turns for conversation memory
    /// ([`plansmith_core::Turn::from_plan`]).
    pub async fn conversation_plans(
        &self,
        conversation_id: &str,
        limit: u32,
    ) -> Result<Vec<StoredPlan>> {
        let sql = format!(
            "SELECT {PLAN_COLUMNS} FROM plans WHERE conversation_id = $1
             ORDER BY created_at DESC, id DESC LIMIT {}",
            limit.clamp(1, 1000)
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(conversation_id.to_owned())
            .fetch_all(&self.pool)
            .await?;
        let mut plans = rows.iter().map(decode_plan).collect::<Result<Vec<_>>>()?;
        plans.reverse();
        Ok(plans)
    }

    /// OpenManus `set_active`, per conversation: the plan must exist.
    pub async fn set_active(&self, conversation_id: &str, plan_id: &str) -> Result<()> {
        self.get(plan_id).await?;
        sqlx::query(
            "INSERT INTO active_plans (conversation_id, plan_id, updated_at) VALUES ($1, $2, $3)
             ON CONFLICT (conversation_id) DO UPDATE SET plan_id = $2, updated_at = $3",
        )
        .bind(conversation_id.to_owned())
        .bind(plan_id.to_owned())
        .bind(timestamp(Utc::now()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The active plan of a conversation; [`StoreError::NoActivePlan`] if none is set.
    pub async fn get_active(&self, conversation_id: &str) -> Result<StoredPlan> {
        let row = sqlx::query("SELECT plan_id FROM active_plans WHERE conversation_id = $1")
            .bind(conversation_id.to_owned())
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NoActivePlan(conversation_id.to_owned()))?;
        let plan_id: String = row.try_get(0)?;
        match self.get(&plan_id).await {
            Err(StoreError::NotFound(_)) => Err(StoreError::NoActivePlan(conversation_id.into())),
            other => other,
        }
    }

    /// OpenManus `delete`: removes the plan, its history and any active pointer to it.
    pub async fn delete(&self, id: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let deleted = sqlx::query("DELETE FROM plans WHERE id = $1")
            .bind(id.to_owned())
            .execute(&mut *tx)
            .await?;
        if deleted.rows_affected() == 0 {
            return Err(StoreError::NotFound(id.to_owned()));
        }
        sqlx::query("DELETE FROM plan_versions WHERE plan_id = $1")
            .bind(id.to_owned())
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM active_plans WHERE plan_id = $1")
            .bind(id.to_owned())
            .execute(&mut *tx)
            .await?;
        for table in ["exec_runs", "exec_steps", "exec_attempts", "exec_decisions"] {
            sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE plan_id = $1"
            )))
            .bind(id.to_owned())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every version of a plan, oldest first.
    pub async fn history(&self, id: &str) -> Result<Vec<VersionRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT v.plan_id, v.version, v.parent_version, v.trigger_kind, v.actor,
                        v.created_at, v.state, v.diff,
                        CASE WHEN v.diff = '' THEN {VERSION_DOCUMENT} END AS added
                 FROM plan_versions v
                 LEFT JOIN plans p ON p.id = v.plan_id AND p.version = v.version
                 WHERE v.plan_id = $1 ORDER BY v.version"
        )))
        .bind(id.to_owned())
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() {
            return Err(StoreError::NotFound(id.to_owned()));
        }
        rows.iter().map(|row| decode_version(id, row)).collect()
    }
}

/// The step `key` names, as an index.
fn step_index(steps: &[Step], key: &StepKey) -> Result<usize> {
    let invalid = || StoreError::InvalidStep {
        given: key.to_string(),
        max: match steps.len() {
            0 => "none".into(),
            n => (n - 1).to_string(),
        },
    };
    match key {
        StepKey::Index(idx) if *idx < steps.len() => Ok(*idx),
        StepKey::Index(_) => Err(invalid()),
        StepKey::Id(id) => steps.iter().position(|s| &s.id == id).ok_or_else(invalid),
    }
}

/// A status by name (OpenManus's names plus ours: `not_started`, `in_progress`, `completed`,
/// `blocked`, `failed`, `skipped`).
pub fn parse_status(text: &str) -> Result<StepStatus> {
    text.trim()
        .parse::<StepStatus>()
        .map_err(|_| StoreError::InvalidStatus {
            given: text.to_owned(),
            valid: StepStatus::ALL
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Copies status, notes, result and error from old steps to new steps with the same content.
pub fn carry_step_progress(old: &[Step], new: &mut [Step]) {
    let mut used = vec![false; old.len()];
    for step in new.iter_mut() {
        let same = old.iter().enumerate().find(|(idx, prev)| {
            !used[*idx]
                && prev.title == step.title
                && prev.description == step.description
                && prev.action == step.action
        });
        if let Some((idx, prev)) = same {
            used[idx] = true;
            step.status = prev.status;
            step.notes = prev.notes.clone();
            step.result = prev.result.clone();
            step.error = prev.error.clone();
        }
    }
}

/// A new plan's rows, encoded (by the caller, so the group writer only runs SQL).
#[derive(Debug)]
pub(crate) struct NewPlan {
    pub(crate) plan: Plan,
    pub(crate) state: ReviewState,
    /// The review settings, as JSON (what [`Submitted`] answers with).
    pub(crate) review: Box<RawValue>,
    /// The plan, as JSON (what [`Submitted`] answers with).
    pub(crate) document: Box<RawValue>,
    pub(crate) actor: String,
    pub(crate) at: DateTime<Utc>,
}

/// A new plan's row: version 1, parameters `$1`–`$8` as [`bind_plan_row`] binds them and `$9`
/// its time (created and updated); a taken id writes nothing. The group writer's SQLite
/// connection (rusqlite) runs the same text, binding by position.
pub(crate) const INSERT_NEW_PLAN: &str =
    "INSERT INTO plans (id, version, state, owner, conversation_id, thread_id, title,
                        document, review, created_at, updated_at)
     VALUES ($1, 1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
     ON CONFLICT (id) DO NOTHING";

/// A new plan's version 1: plan id, trigger, actor, time, state. Its diff and document are
/// stored empty: the diff is read back as an `add` of the document (`decode_version`), and the
/// document is the plan's while it is current ([`VERSION_DOCUMENT`]).
pub(crate) const INSERT_FIRST_VERSION: &str =
    "INSERT INTO plan_versions (plan_id, version, parent_version, trigger_kind, actor,
                                created_at, state, diff, document)
     VALUES ($1, 1, NULL, $2, $3, $4, $5, '', '')";

/// Inserts the plan and its version 1 in `tx`; `false` (and nothing written) when the id is
/// taken.
pub(crate) async fn insert_new(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    row: &NewPlan,
) -> Result<bool> {
    let at = timestamp(row.at);
    let written = bind_plan_row(sqlx::query(INSERT_NEW_PLAN), row)
        .bind(at.clone())
        .execute(&mut **tx)
        .await?
        .rows_affected();
    if written == 0 {
        return Ok(false);
    }
    sqlx::query(INSERT_FIRST_VERSION)
        .bind(row.plan.id.clone())
        .bind(Trigger::Created.as_str())
        .bind(row.actor.clone())
        .bind(at)
        .bind(row.state.as_str())
        .execute(&mut **tx)
        .await?;
    Ok(true)
}

/// A query with an `INSERT`'s parameters bound so far.
pub(crate) type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>;

/// Binds a new plan's `plans` columns from `id` to `review` (id, state, owner, conversation,
/// thread, title, document, review), in that order.
pub(crate) fn bind_plan_row<'q>(query: AnyQuery<'q>, row: &NewPlan) -> AnyQuery<'q> {
    let plan = &row.plan;
    query
        .bind(plan.id.clone())
        .bind(row.state.as_str())
        .bind(plan.owner.clone())
        .bind(plan.conversation_id.clone())
        .bind(plan.thread_id.clone())
        .bind(plan.title.clone())
        .bind(row.document.get().to_owned())
        .bind(row.review.get().to_owned())
}

/// Inserts `plan`'s new (current) version; its document is the plan's (stored empty, see
/// [`VERSION_DOCUMENT`]).
async fn insert_version(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    plan: &Plan,
    trigger: Trigger,
    actor: &str,
    at: DateTime<Utc>,
    state: ReviewState,
    diff: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO plan_versions (plan_id, version, parent_version, trigger_kind, actor,
                                    created_at, state, diff, document)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '')",
    )
    .bind(plan.id.clone())
    .bind(i64::from(plan.version))
    .bind(plan.parent_version.map(i64::from))
    .bind(trigger.as_str())
    .bind(actor.to_owned())
    .bind(timestamp(at))
    .bind(state.as_str())
    .bind(diff.to_owned())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// A position in the plan list: the last plan of a page, by the list's order
/// (`updated_at DESC, id DESC`). Written as `<updated_at>_<id>`: the stored timestamp (RFC 3339,
/// no `_` in it) and the id, which may hold anything.
#[derive(Debug, PartialEq, Eq)]
struct Cursor {
    updated_at: String,
    id: String,
}

impl Cursor {
    fn encode(&self) -> String {
        format!("{}_{}", self.updated_at, self.id)
    }

    fn decode(text: &str) -> Result<Cursor> {
        let bad = || {
            StoreError::BadCursor(format!(
                "`{}` is not a list cursor; pass a page's `next_cursor` as it is",
                text.chars().take(80).collect::<String>()
            ))
        };
        let (updated_at, id) = text.split_once('_').ok_or_else(bad)?;
        // The store compares times as text, so only the one form it writes (`timestamp`) is a
        // place in its order.
        let at = DateTime::parse_from_rfc3339(updated_at).map_err(|_| bad())?;
        if timestamp(at.with_timezone(&Utc)) != updated_at || id.is_empty() {
            return Err(bad());
        }
        Ok(Cursor {
            updated_at: updated_at.to_owned(),
            id: id.to_owned(),
        })
    }
}

/// Fixed-width RFC 3339 (microseconds, `Z`), so text order is time order.
pub(crate) fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub(crate) fn parse_time(id: &str, text: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|err| StoreError::Corrupt {
            id: id.to_owned(),
            reason: format!("bad timestamp `{text}`: {err}"),
        })
}

fn to_json(plan: &Plan) -> Result<String> {
    serde_json::to_string(plan).map_err(bad_json)
}

pub(crate) fn from_json<T: serde::de::DeserializeOwned>(id: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|err| StoreError::Corrupt {
        id: id.to_owned(),
        reason: err.to_string(),
    })
}

fn bad_json(err: serde_json::Error) -> StoreError {
    StoreError::BadEdit(format!("cannot encode the plan: {err}"))
}

pub(crate) fn to_u32(id: &str, value: i64) -> Result<u32> {
    u32::try_from(value).map_err(|_| StoreError::Corrupt {
        id: id.to_owned(),
        reason: format!("version {value} out of range"),
    })
}

fn decode_plan(row: &AnyRow) -> Result<StoredPlan> {
    let id: String = row.try_get("id")?;
    let version = to_u32(&id, row.try_get("version")?)?;
    let state_text: String = row.try_get("state")?;
    let state = state_text
        .parse::<ReviewState>()
        .map_err(|reason| StoreError::Corrupt {
            id: id.clone(),
            reason,
        })?;
    let mut plan: Plan = from_json(&id, &row.try_get::<String, _>("document")?)?;
    plan.version = version;
    let review: Review = from_json(&id, &row.try_get::<String, _>("review")?)?;
    let created_at = parse_time(&id, &row.try_get::<String, _>("created_at")?)?;
    let updated_at = parse_time(&id, &row.try_get::<String, _>("updated_at")?)?;
    Ok(StoredPlan {
        plan,
        state,
        review,
        created_at,
        updated_at,
        run_active: false,
    })
}

fn decode_version(id: &str, row: &AnyRow) -> Result<VersionRecord> {
    let parent: Option<i64> = row.try_get("parent_version")?;
    let trigger_text: String = row.try_get("trigger_kind")?;
    let state_text: String = row.try_get("state")?;
    let corrupt = |reason: String| StoreError::Corrupt {
        id: id.to_owned(),
        reason,
    };
    let version = to_u32(id, row.try_get("version")?)?;
    Ok(VersionRecord {
        plan_id: row.try_get("plan_id")?,
        version,
        parent_version: parent.map(|p| to_u32(id, p)).transpose()?,
        trigger: trigger_text.parse().map_err(corrupt)?,
        actor: row.try_get("actor")?,
        created_at: parse_time(id, &row.try_get::<String, _>("created_at")?)?,
        state: state_text.parse().map_err(corrupt)?,
        diff: match row.try_get::<Option<String>, _>("added")? {
            // Version 1 of a created plan: its diff adds the whole document (`insert_new`).
            Some(document) => {
                let document: Value = from_json(id, &document)?;
                serde_json::json!([{"op": "add", "path": "", "value": document}])
            }
            None => match row.try_get::<String, _>("diff")? {
                // Empty, and no document to read back as its `add` (see `VERSION_DOCUMENT`).
                diff if diff.is_empty() => {
                    return Err(corrupt(lost_document(version)));
                }
                diff => from_json(id, &diff)?,
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        let cases = [
            ("sqlite:/tmp/a.db", Location::Sqlite("/tmp/a.db".into())),
            ("sqlite:///tmp/a.db", Location::Sqlite("/tmp/a.db".into())),
            ("sqlite:rel.db?mode=rwc", Location::Sqlite("rel.db".into())),
            ("plans.db", Location::Sqlite("plans.db".into())),
            (
                "postgres://u:p@127.0.0.1:5433/db",
                Location::Postgres("postgres://u:p@127.0.0.1:5433/db".into()),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<Location>().unwrap(), want, "{text}");
        }
        for bad in ["", "sqlite:", "mysql://x"] {
            assert!(bad.parse::<Location>().is_err(), "{bad}");
        }
        assert_eq!(
            Location::Postgres("postgres://u:secret@h/db".into()).to_string(),
            "postgres://u@h/db"
        );
    }

    #[test]
    fn step_keys_and_statuses() {
        assert_eq!("2".parse::<StepKey>().unwrap(), StepKey::Index(2));
        assert_eq!("s2".parse::<StepKey>().unwrap(), StepKey::Id("s2".into()));
        let err = parse_status("done").unwrap_err().to_string();
        assert!(err.contains("valid statuses are: not_started"), "{err}");
    }
}
