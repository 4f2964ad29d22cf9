//! Group commit for new plans ([`PlanStore::with_group_commit`]).
//!
//! A new plan is two rows (the plan and its version 1) in one transaction, and each commit
//! waits for the disk (SQLite `synchronous=FULL`, PostgreSQL `synchronous_commit=on`): on this
//! project's 2-core machine that capped the service at ~450 plans/s however many clients
//! waited. With group commit, callers hand their prepared rows to one writer, which takes
//! whatever has queued (up to a bound) and writes it in a single transaction: one disk flush
//! for the whole batch. Each caller is answered only after the batch committed, so an
//! acknowledged plan is as durable as before.
//!
//! On PostgreSQL the writer is a task that writes each batch through the pool as one statement
//! (one round trip). On SQLite it is a thread of its own with its own connection
//! ([`rusqlite`], the same SQLite library as sqlx's), which writes a whole batch in one call
//! with the same single-row statements as [`insert_new`]: through sqlx every statement of the
//! batch (begin, the inserts, commit) was a round trip to sqlx's connection thread, and under
//! load each round trip waited for both threads to be scheduled, so the batch's wall time,
//! which every caller in it waits for, was mostly waiting.
//!
//! One failing row must not fail its neighbours: an id that is taken is reported to its caller
//! alone (`ON CONFLICT DO NOTHING` leaves the batch intact), and if the batch's transaction
//! fails for any other reason, each row is retried in its own transaction and answered with
//! its own result.

use std::collections::HashSet;
use std::path::Path;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Result, StoreError};
use crate::store::{
    INSERT_FIRST_VERSION, INSERT_NEW_PLAN, Location, NewPlan, Trigger, bind_plan_row, insert_new,
    timestamp,
};

/// How many new plans may wait for the writer before callers wait to enqueue.
const QUEUE: usize = 4096;

/// Handle to the writer; cloned with the store.
#[derive(Debug, Clone)]
pub(crate) struct GroupWriter {
    jobs: mpsc::Sender<Job>,
}

#[derive(Debug)]
struct Job {
    row: NewPlan,
    /// The row back, with `Ok(true)` stored or `Ok(false)` the id was taken.
    reply: oneshot::Sender<Result<(NewPlan, bool)>>,
}

impl GroupWriter {
    /// Starts the writer: on SQLite a thread with its own connection, on PostgreSQL a task on
    /// the current tokio runtime. `None` outside a runtime, or when SQLite's connection or
    /// thread cannot be had (each create then writes on its own, as without group commit).
    pub(crate) fn start(
        pool: sqlx::AnyPool,
        location: &Location,
        max_batch: usize,
    ) -> Option<GroupWriter> {
        let runtime = Handle::try_current().ok()?;
        let max_batch = max_batch.max(1);
        match location {
            Location::Sqlite(path) => start_sqlite(&pool, &runtime, path, max_batch),
            Location::Postgres(_) => {
                let (jobs, queue) = mpsc::channel(QUEUE);
                runtime.spawn(postgres_writer(pool, queue, max_batch));
                Some(GroupWriter { jobs })
            }
        }
    }

    /// Stores `row` in the next batch and gives it back, with `false` when its id is taken.
    /// `Err(row)` when the writer is gone (its runtime shut down): the caller writes it itself.
    pub(crate) async fn insert(
        &self,
        row: NewPlan,
    ) -> std::result::Result<Result<(NewPlan, bool)>, NewPlan> {
        let (reply, answer) = oneshot::channel();
        if let Err(mpsc::error::SendError(job)) = self.jobs.send(Job { row, reply }).await {
            return Err(job.row);
        }
        Ok(answer.await.unwrap_or(Err(StoreError::WriterStopped)))
    }
}

/// PostgreSQL: takes the queued rows in batches of at most `max_batch` until every handle is
/// dropped.
async fn postgres_writer(pool: sqlx::AnyPool, mut queue: mpsc::Receiver<Job>, max_batch: usize) {
    let mut batch = Vec::with_capacity(max_batch);
    while queue.recv_many(&mut batch, max_batch).await > 0 {
        commit_postgres(&pool, std::mem::take(&mut batch)).await;
        batch.reserve(max_batch);
    }
}

/// Plans written between two background checkpoints (about 0.5 MB of WAL).
const CHECKPOINT_EVERY: usize = 200;

/// SQLite: copies the WAL into the database in the background as plans are written.
///
/// Left to SQLite, the checkpoint runs in the connection that commits past 1000 WAL pages:
/// inside the writer, so every caller waiting for the next batch also waited for 4 MB to be
/// copied and flushed (the p99 of `POST /v1/plans` under load). A `PASSIVE` checkpoint on
/// another connection does most of that copying while the writer goes on; SQLite's own
/// checkpoint stays as it was (it is what resets the WAL, which a checkpoint beside a busy
/// writer cannot do) and copies only what was written since, then flushes the database: in the
/// load test's profile it still takes ~6 % of the server's CPU.
struct Checkpointer {
    /// Plans written since the last checkpoint started.
    since: usize,
    running: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The checkpoint runs on one of the pool's connections, as a task on this runtime (if it
    /// has shut down, the task is dropped and the next checkpoint is SQLite's own).
    pool: sqlx::AnyPool,
    runtime: Handle,
}

impl Checkpointer {
    fn new(pool: sqlx::AnyPool, runtime: Handle) -> Checkpointer {
        Checkpointer {
            since: 0,
            running: std::sync::Arc::default(),
            pool,
            runtime,
        }
    }

    /// `written` more plans were committed: starts a checkpoint when enough were, unless one
    /// is running.
    fn wrote(&mut self, written: usize) {
        use std::sync::atomic::Ordering;
        self.since += written;
        if self.since < CHECKPOINT_EVERY || self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        self.since = 0;
        let pool = self.pool.clone();
        let running = self.running.clone();
        self.runtime.spawn(async move {
            // A failed checkpoint loses nothing: the pages stay in the WAL for the next one.
            let _ = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&pool)
                .await;
            running.store(false, Ordering::Release);
        });
    }
}

/// Each row in a transaction of its own, each caller answered with its own result.
async fn write_each(pool: &sqlx::AnyPool, jobs: Vec<Job>) {
    for job in jobs {
        let result = write_one(pool, &job.row).await;
        let _ = job.reply.send(result.map(|stored| (job.row, stored)));
    }
}

/// The batch's rows split into the first row of each id and the rows that repeat an earlier
/// row's id (written on their own after the others, where they find the id taken).
fn split_repeats(batch: Vec<Job>) -> (Vec<Job>, Vec<Job>) {
    let mut seen = HashSet::with_capacity(batch.len());
    let first: Vec<bool> = batch
        .iter()
        .map(|job| seen.insert(job.row.plan.id.as_str()))
        .collect();
    let mut first = first.into_iter();
    batch
        .into_iter()
        .partition(|_| first.next().unwrap_or(true))
}

/// PostgreSQL: the batch's distinct ids in one statement ([`postgres_batch_sql`]), which is
/// atomic without a transaction around it: one round trip to the server per batch, where a
/// transaction of multi-row `INSERT`s took four (begin, two inserts, commit), each waiting for
/// the server's process to be scheduled, while every caller of the batch waited too. If it
/// fails nothing was written, and each row is written on its own (and answered with its own
/// error, if the row itself is the problem). A row whose id repeats an earlier row's in the
/// batch is written on its own after the others, and finds its id taken.
async fn commit_postgres(pool: &sqlx::AnyPool, batch: Vec<Job>) {
    let (distinct, repeats) = split_repeats(batch);
    let rows: Vec<&NewPlan> = distinct.iter().map(|job| &job.row).collect();
    match insert_postgres(pool, &rows).await {
        Ok(stored) => {
            for job in distinct {
                let was_stored = stored.contains(job.row.plan.id.as_str());
                let _ = job.reply.send(Ok((job.row, was_stored)));
            }
        }
        Err(_) => write_each(pool, distinct).await,
    }
    write_each(pool, repeats).await;
}

/// Writes `rows` (distinct ids) with their versions 1 in one statement; the ids stored (an id
/// that is taken is not).
async fn insert_postgres(pool: &sqlx::AnyPool, rows: &[&NewPlan]) -> Result<HashSet<String>> {
    use sqlx::Row;
    // Padded to a power of two with rows of NULLs (which the statement skips), so the
    // statement cache holds one statement per size class, not one per batch size.
    let slots = rows.len().next_power_of_two();
    let mut query = sqlx::query(sqlx::AssertSqlSafe(postgres_batch_sql(slots)));
    for row in rows {
        query = bind_plan_row(query, row)
            .bind(timestamp(row.at))
            .bind(row.actor.clone());
    }
    for _ in rows.len()..slots {
        for _ in 0..POSTGRES_COLUMNS {
            query = query.bind(None::<String>);
        }
    }
    let written = query.fetch_all(pool).await?;
    written
        .iter()
        .map(|row| Ok(row.try_get::<String, _>(0)?))
        .collect()
}

/// Parameters per row of [`postgres_batch_sql`].
const POSTGRES_COLUMNS: usize = 10;

/// One statement for `slots` new plans: the rows as `VALUES`, the plans inserted from them
/// (`ON CONFLICT DO NOTHING`: a taken id is skipped), and a version 1 for each plan that was,
/// whose ids it returns. Rows with a NULL id are padding.
fn postgres_batch_sql(slots: usize) -> String {
    let mut values = String::with_capacity(slots * POSTGRES_COLUMNS * 6);
    for slot in 0..slots {
        values.push_str(if slot == 0 { "(" } else { ", (" });
        for column in 0..POSTGRES_COLUMNS {
            if column > 0 {
                values.push_str(", ");
            }
            values.push('$');
            values.push_str(&(slot * POSTGRES_COLUMNS + column + 1).to_string());
        }
        values.push(')');
    }
    format!(
        "WITH v (id, state, owner, conversation_id, thread_id, title, document, review, at, actor)
              AS (VALUES {values}),
         p AS (INSERT INTO plans (id, version, state, owner, conversation_id, thread_id, title,
                                  document, review, created_at, updated_at)
               SELECT id, 1, state, owner, conversation_id, thread_id, title, document, review,
                      at, at
               FROM v WHERE id IS NOT NULL
               ON CONFLICT (id) DO NOTHING
               RETURNING id)
         INSERT INTO plan_versions (plan_id, version, parent_version, trigger_kind, actor,
                                    created_at, state, diff, document)
         SELECT v.id, 1, NULL, '{created}', v.actor, v.at, v.state, '', ''
         FROM v JOIN p ON p.id = v.id
         RETURNING plan_id",
        created = Trigger::Created.as_str(),
    )
}

async fn write_one(pool: &sqlx::AnyPool, row: &NewPlan) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let stored = insert_new(&mut tx, row).await?;
    tx.commit().await?;
    Ok(stored)
}

// ---------------------------------------------------------------------------------------------
// SQLite: a writer thread with its own connection
// ---------------------------------------------------------------------------------------------

/// Opens the writer's connection and starts its thread; `None` if either fails.
fn start_sqlite(
    pool: &sqlx::AnyPool,
    runtime: &Handle,
    path: &Path,
    max_batch: usize,
) -> Option<GroupWriter> {
    let conn = open_sqlite(path).ok()?;
    let (jobs, queue) = mpsc::channel(QUEUE);
    let checkpointer = Checkpointer::new(pool.clone(), runtime.clone());
    std::thread::Builder::new()
        .name("plansmith-sqlite-writer".to_owned())
        .spawn(move || sqlite_writer(conn, queue, max_batch, checkpointer))
        .ok()?;
    Some(GroupWriter { jobs })
}

/// The writer's connection, set up like the pool's (WAL, `synchronous=FULL`, a busy timeout:
/// the pool's connections write to the same file, and SQLite lets one writer in at a time).
fn open_sqlite(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

/// Takes the queued rows in batches of at most `max_batch` until every handle is dropped.
fn sqlite_writer(
    mut conn: rusqlite::Connection,
    mut queue: mpsc::Receiver<Job>,
    max_batch: usize,
    mut checkpointer: Checkpointer,
) {
    let mut batch = Vec::with_capacity(max_batch);
    while queue.blocking_recv_many(&mut batch, max_batch) > 0 {
        let written = batch.len();
        let rows: Vec<&NewPlan> = batch.iter().map(|job| &job.row).collect();
        match write_sqlite(&mut conn, &rows) {
            Ok(stored) => {
                for (job, stored) in batch.drain(..).zip(stored) {
                    let _ = job.reply.send(Ok((job.row, stored)));
                }
            }
            // The batch rolled back as a whole: each row again on its own, so every caller gets
            // its own answer (and its own error, if the row itself is the problem).
            Err(_) => {
                for job in batch.drain(..) {
                    let result = write_sqlite(&mut conn, &[&job.row])
                        .map(|stored| stored.first().copied().unwrap_or(false));
                    let _ = job.reply.send(result.map(|stored| (job.row, stored)));
                }
            }
        }
        checkpointer.wrote(written);
    }
}

/// `rows` in one transaction; per row, whether it was stored (`false`: its id is taken, by an
/// earlier plan or an earlier row of the same batch). The statements are [`insert_new`]'s,
/// prepared once and kept by the connection's cache.
fn write_sqlite(conn: &mut rusqlite::Connection, rows: &[&NewPlan]) -> Result<Vec<bool>> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut stored = Vec::with_capacity(rows.len());
    {
        let mut plan = tx.prepare_cached(INSERT_NEW_PLAN)?;
        let mut version = tx.prepare_cached(INSERT_FIRST_VERSION)?;
        for row in rows {
            let at = timestamp(row.at);
            let new = &row.plan;
            let written = plan.execute(rusqlite::params![
                new.id,
                row.state.as_str(),
                new.owner,
                new.conversation_id,
                new.thread_id,
                new.title,
                row.document.get(),
                row.review.get(),
                at,
            ])?;
            if written == 1 {
                version.execute(rusqlite::params![
                    new.id,
                    Trigger::Created.as_str(),
                    row.actor,
                    at,
                    row.state.as_str(),
                ])?;
            }
            stored.push(written == 1);
        }
    }
    tx.commit()?;
    Ok(stored)
}
