//! [`PlanStore`]: connection, schema migrations, versioned writes with compare-and-swap, and the
//! lifecycle operations of OpenManus's PlanningTool (create, update, get, list, set_active /
//! get_active, mark_step, delete).
//!
//! One code path serves both backends: sqlx's `AnyPool` with `$1` placeholders and portable SQL
//! (TEXT for JSON and RFC 3339 timestamps, BIGINT for versions).

use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Row};

use crate::error::{Result, StoreError};
use group::GroupWriter;
use location::sqlite_url;

mod group;
mod lifecycle;
mod location;
mod migrations;
mod read;
mod sql;
mod types;
mod write;

pub use lifecycle::{StepKey, carry_step_progress, parse_status};
pub use location::{Backend, Location};
pub use migrations::MIGRATION_LOCK;
pub use read::{DEFAULT_TOTAL_CAP, ListFilter, Page};
pub(crate) use sql::{from_json, parse_time, timestamp, to_u32};
pub use types::{StoredPlan, Submitted, Trigger, VersionRecord};
pub use write::Change;
pub(crate) use write::{INSERT_FIRST_VERSION, INSERT_NEW_PLAN, NewPlan, bind_plan_row, insert_new};

/// A plan store on SQLite or PostgreSQL. Cheap to clone (a connection pool).
#[derive(Debug, Clone)]
pub struct PlanStore {
    pub(crate) pool: AnyPool,
    location: Location,
    /// New plans go through this writer's batches (see [`PlanStore::with_group_commit`]).
    writer: Option<GroupWriter>,
}

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
    ///
    /// [`Location::from_str`]: Location#method.from_str
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
}
