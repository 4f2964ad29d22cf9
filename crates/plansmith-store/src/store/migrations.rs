//! The SQL schema, one migration per entry, and how a store applies the missing ones on open.

use chrono::Utc;
use sqlx::{AssertSqlSafe, Row};

use super::sql::timestamp;
use super::{Backend, PlanStore};
use crate::error::{Result, StoreError};

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
    (
        10,
        "run budgets: caps and what a run spent; step times for estimates; standing approvals",
        // Beside `exec_runs` rather than in it: a new table is idempotent to create, and a run
        // recorded before it simply has no budget. Step times are kept per kind of step (a tool,
        // `agent:NAME`, `task:KIND`) as running sums, so an estimate reads one row per tool.
        &[
            "CREATE TABLE IF NOT EXISTS exec_budgets (
            plan_id TEXT PRIMARY KEY,
            budget TEXT NOT NULL,
            started_at TEXT NOT NULL,
            tool_calls BIGINT NOT NULL,
            tokens BIGINT NOT NULL
        )",
            "CREATE TABLE IF NOT EXISTS exec_step_times (
            step_key TEXT PRIMARY KEY,
            calls BIGINT NOT NULL,
            total_ms BIGINT NOT NULL,
            total_tokens BIGINT NOT NULL
        )",
            "CREATE TABLE IF NOT EXISTS standing_approvals (
            key TEXT PRIMARY KEY,
            scope TEXT NOT NULL,
            plan_id TEXT,
            tool TEXT NOT NULL,
            actor TEXT NOT NULL,
            created_at TEXT NOT NULL
        )",
        ],
    ),
    (
        11,
        "remote tasks of attempts",
        // The task an MCP server made of an attempt's tool call (the tasks extension), by the
        // attempt's idempotency key: a rerun of the attempt after its node died polls that task
        // instead of calling the tool again.
        &[
            "CREATE TABLE IF NOT EXISTS exec_remote_tasks (
            idempotency_key TEXT PRIMARY KEY,
            plan_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            created_at TEXT NOT NULL
        )",
            "CREATE INDEX IF NOT EXISTS exec_remote_tasks_by_plan ON exec_remote_tasks (plan_id)",
        ],
    ),
    (
        12,
        "tasks that ask a person",
        // A step whose tool's task waits for input (`input_required`): the task, what it asks,
        // and the answer a person gave with a retry decision, until the next attempt takes it.
        &["CREATE TABLE IF NOT EXISTS exec_task_inputs (
            plan_id TEXT NOT NULL,
            step_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            requests TEXT NOT NULL,
            answer TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (plan_id, step_id)
        )"],
    ),
];

/// Key of the PostgreSQL advisory lock held while migrating (`"plansmth"` in ASCII): every
/// plansmith process uses the same key, so concurrent starts migrate one after the other.
pub const MIGRATION_LOCK: i64 = 0x706c_616e_736d_7468;

impl PlanStore {
    /// Applies the missing migrations. Safe when several processes open the same database at
    /// once: on PostgreSQL the whole run is one transaction holding a transaction-level
    /// advisory lock ([`MIGRATION_LOCK`]), so a second node waits, then sees the migrations
    /// recorded and applies nothing. (Without the lock two nodes racing on
    /// `CREATE TABLE IF NOT EXISTS` can both pass the existence check and one fails on
    /// PostgreSQL's catalog unique index.) SQLite serialises writers on the file itself.
    pub(super) async fn migrate(&self) -> Result<()> {
        let bootstrap = "CREATE TABLE IF NOT EXISTS plansmith_migrations (
            version BIGINT PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at TEXT NOT NULL
        )";
        let fail = |version: i64| {
            move |source: sqlx::Error| StoreError::Migration {
                version,
                source: source.into(),
            }
        };
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
}
