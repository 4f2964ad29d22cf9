//! Group commit for new plans ([`PlanStore::with_group_commit`]).
//!
//! A new plan is two rows (the plan and its version 1) in one transaction, and each commit
//! waits for the disk (SQLite `synchronous=FULL`, PostgreSQL `synchronous_commit=on`): on this
//! project's 2-core machine that capped the service at ~450 plans/s however many clients
//! waited. With group commit, callers hand their prepared rows to one writer task, which takes
//! whatever has queued (up to a bound) and writes it in a single transaction: one disk flush
//! for the whole batch. Each caller is answered only after the batch committed, so an
//! acknowledged plan is as durable as before.
//!
//! One failing row must not fail its neighbours: an id that is taken is reported to its caller
//! alone (`ON CONFLICT DO NOTHING` leaves the batch intact), and if the batch's transaction
//! fails for any other reason, each row is retried in its own transaction and answered with
//! its own result.

use tokio::sync::{mpsc, oneshot};

use crate::error::{Result, StoreError};
use crate::store::{NewPlan, insert_new};

/// How many new plans may wait for the writer before callers wait to enqueue.
const QUEUE: usize = 4096;

/// Handle to the writer task; cloned with the store.
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
    /// Starts the writer on the current tokio runtime; `None` outside one.
    pub(crate) fn start(pool: sqlx::AnyPool, max_batch: usize) -> Option<GroupWriter> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (jobs, queue) = mpsc::channel(QUEUE);
        runtime.spawn(writer(pool, queue, max_batch.max(1)));
        Some(GroupWriter { jobs })
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

/// Takes the queued rows in batches of at most `max_batch` until every handle is dropped.
async fn writer(pool: sqlx::AnyPool, mut queue: mpsc::Receiver<Job>, max_batch: usize) {
    let mut batch = Vec::with_capacity(max_batch);
    while queue.recv_many(&mut batch, max_batch).await > 0 {
        commit(&pool, std::mem::take(&mut batch)).await;
        batch.reserve(max_batch);
    }
}

async fn commit(pool: &sqlx::AnyPool, batch: Vec<Job>) {
    match write_batch(pool, &batch).await {
        Ok(stored) => {
            for (job, stored) in batch.into_iter().zip(stored) {
                let _ = job.reply.send(Ok((job.row, stored)));
            }
        }
        // The batch rolled back as a whole: each row again on its own, so every caller gets
        // its own answer (and its own error, if the row itself is the problem).
        Err(_) => {
            for job in batch {
                let result = write_one(pool, &job.row).await;
                let _ = job.reply.send(result.map(|stored| (job.row, stored)));
            }
        }
    }
}

/// The batch in one transaction; per row, whether it was stored (`false`: id taken).
async fn write_batch(pool: &sqlx::AnyPool, batch: &[Job]) -> Result<Vec<bool>> {
    let mut tx = pool.begin().await?;
    let mut stored = Vec::with_capacity(batch.len());
    for job in batch {
        stored.push(insert_new(&mut tx, &job.row).await?);
    }
    tx.commit().await?;
    Ok(stored)
}

async fn write_one(pool: &sqlx::AnyPool, row: &NewPlan) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let stored = insert_new(&mut tx, row).await?;
    tx.commit().await?;
    Ok(stored)
}
