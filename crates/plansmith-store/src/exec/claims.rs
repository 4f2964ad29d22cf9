//! Claims and leases: which node runs a step, renewing and releasing leases, how an attempt
//! ended, and the attempts logged.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{AssertSqlSafe, Row};

use super::{AttemptRecord, Claim, ExecStatus, StepEnd, idempotency_key, now, to_text};
use crate::error::Result;
use crate::store::{Backend, PlanStore, parse_time, timestamp, to_u32};

/// The condition under which a step row may be claimed at time `$now` (bound as `$1`).
const CLAIMABLE: &str = "(status = 'pending' OR (status = 'retry_wait' AND not_before <= $1) \
                         OR (status = 'running' AND lease_until < $1))";

fn plus(at: DateTime<Utc>, lease: Duration) -> DateTime<Utc> {
    at + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(30))
}

impl PlanStore {
    /// Claims up to `limit` of `candidates` for `node` under a lease (see the module docs);
    /// returns the steps this node now runs, each with its attempt and idempotency key, and
    /// logs each attempt's start.
    pub async fn exec_claim(
        &self,
        plan_id: &str,
        base_version: u32,
        candidates: &[String],
        node: &str,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claim>> {
        if candidates.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let at = now();
        let mut tx = self.pool.begin().await?;
        let mut chosen: Vec<String> = candidates.to_vec();
        if self.backend() == Backend::Postgres {
            let placeholders: Vec<String> = (0..candidates.len())
                .map(|i| format!("${}", i + 3))
                .collect();
            let sql = format!(
                "SELECT step_id FROM exec_steps
                 WHERE {CLAIMABLE} AND plan_id = $2 AND step_id IN ({})
                 ORDER BY step_id LIMIT {limit} FOR UPDATE SKIP LOCKED",
                placeholders.join(", ")
            );
            let mut query = sqlx::query(AssertSqlSafe(sql))
                .bind(timestamp(at))
                .bind(plan_id.to_owned());
            for candidate in candidates {
                query = query.bind(candidate.clone());
            }
            chosen = query
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|row| row.try_get::<String, _>(0))
                .collect::<std::result::Result<Vec<_>, _>>()?;
        }
        let mut claims = Vec::new();
        let until = plus(at, lease);
        for step_id in chosen {
            if claims.len() >= limit {
                break;
            }
            let sql = format!(
                "UPDATE exec_steps SET
                    attempt = CASE WHEN status = 'running' THEN attempt ELSE attempt + 1 END,
                    reruns = CASE WHEN status = 'running' THEN reruns + 1 ELSE 0 END,
                    status = 'running', lease_owner = $2, lease_until = $3, not_before = NULL,
                    updated_at = $1
                 WHERE {CLAIMABLE} AND plan_id = $4 AND step_id = $5
                 RETURNING attempt, reruns"
            );
            let row = sqlx::query(AssertSqlSafe(sql))
                .bind(timestamp(at))
                .bind(node.to_owned())
                .bind(timestamp(until))
                .bind(plan_id.to_owned())
                .bind(step_id.clone())
                .fetch_optional(&mut *tx)
                .await?;
            let Some(row) = row else { continue };
            let attempt = to_u32(plan_id, row.try_get("attempt")?)?;
            let reruns: i64 = row.try_get("reruns")?;
            let key = idempotency_key(plan_id, base_version, &step_id, attempt);
            sqlx::query(
                "INSERT INTO exec_attempts (idempotency_key, plan_id, base_version, step_id,
                                            attempt, node, runs, outcome, started_at)
                 VALUES ($1, $2, $3, $4, $5, $6, 1, 'started', $7)
                 ON CONFLICT (idempotency_key) DO UPDATE SET node = $6, started_at = $7,
                    runs = exec_attempts.runs + 1, outcome = 'started'",
            )
            .bind(key.clone())
            .bind(plan_id.to_owned())
            .bind(i64::from(base_version))
            .bind(step_id.clone())
            .bind(i64::from(attempt))
            .bind(node.to_owned())
            .bind(timestamp(at))
            .execute(&mut *tx)
            .await?;
            let remote_task = if reruns > 0 {
                sqlx::query("SELECT task_id FROM exec_remote_tasks WHERE idempotency_key = $1")
                    .bind(key.clone())
                    .fetch_optional(&mut *tx)
                    .await?
                    .map(|row| row.try_get::<String, _>(0))
                    .transpose()?
            } else {
                None
            };
            claims.push(Claim {
                step_id,
                attempt,
                idempotency_key: key,
                rerun: reruns > 0,
                remote_task,
            });
        }
        tx.commit().await?;
        Ok(claims)
    }

    /// Records that the tool's server made the attempt with `idempotency_key` (of plan
    /// `plan_id`) a task with
    /// `task_id` (the MCP tasks extension); a rerun of that attempt gets it in its
    /// [`Claim::remote_task`].
    pub async fn exec_remember_task(
        &self,
        plan_id: &str,
        idempotency_key: &str,
        task_id: &str,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO exec_remote_tasks (idempotency_key, plan_id, task_id, created_at)
             VALUES ($1, $4, $2, $3)
             ON CONFLICT (idempotency_key) DO UPDATE SET task_id = $2, created_at = $3",
        )
        .bind(idempotency_key.to_owned())
        .bind(task_id.to_owned())
        .bind(timestamp(now()))
        .bind(plan_id.to_owned())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records that step `step_id` waits for a person: its tool's task `task_id` asks
    /// `requests` (the task's `inputRequests`). Replaces what the step asked before.
    pub async fn exec_task_asks(
        &self,
        plan_id: &str,
        step_id: &str,
        task_id: &str,
        requests: &Value,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO exec_task_inputs (plan_id, step_id, task_id, requests, answer, created_at)
             VALUES ($1, $2, $3, $4, NULL, $5)
             ON CONFLICT (plan_id, step_id) DO UPDATE SET task_id = $3, requests = $4,
                answer = NULL, created_at = $5",
        )
        .bind(plan_id.to_owned())
        .bind(step_id.to_owned())
        .bind(task_id.to_owned())
        .bind(requests.to_string())
        .bind(timestamp(now()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records a person's answer to what step `step_id`'s task asks; false when it asks nothing.
    pub async fn exec_task_answer(
        &self,
        plan_id: &str,
        step_id: &str,
        answer: &str,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE exec_task_inputs SET answer = $3 WHERE plan_id = $1 AND step_id = $2",
        )
        .bind(plan_id.to_owned())
        .bind(step_id.to_owned())
        .bind(answer.to_owned())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Takes (reads and forgets) the answered question of step `step_id`'s task: the task,
    /// its requests and the answer, for the attempt that answers it.
    pub async fn exec_take_task_input(
        &self,
        plan_id: &str,
        step_id: &str,
    ) -> Result<Option<(String, Value, String)>> {
        // One statement, no read-then-write transaction: SQLite refuses to upgrade a read
        // whose snapshot another writer has moved past, and the answer would seem absent.
        let row = sqlx::query(
            "DELETE FROM exec_task_inputs
             WHERE plan_id = $1 AND step_id = $2 AND answer IS NOT NULL
             RETURNING task_id, requests, answer",
        )
        .bind(plan_id.to_owned())
        .bind(step_id.to_owned())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let requests: String = row.try_get("requests")?;
        Ok(Some((
            row.try_get("task_id")?,
            serde_json::from_str(&requests).unwrap_or(Value::Null),
            row.try_get("answer")?,
        )))
    }

    /// Extends `node`'s leases on these running steps; returns how many it still holds.
    pub async fn exec_renew(
        &self,
        plan_id: &str,
        step_ids: &[String],
        node: &str,
        lease: Duration,
    ) -> Result<u64> {
        let until = timestamp(plus(now(), lease));
        let mut held = 0;
        for step_id in step_ids {
            let done = sqlx::query(
                "UPDATE exec_steps SET lease_until = $1
                 WHERE plan_id = $2 AND step_id = $3 AND lease_owner = $4 AND status = 'running'",
            )
            .bind(until.clone())
            .bind(plan_id.to_owned())
            .bind(step_id.clone())
            .bind(node.to_owned())
            .execute(&self.pool)
            .await?;
            held += done.rows_affected();
        }
        Ok(held)
    }

    /// Records how `node`'s attempt ended, with a note for people. Fenced: false (nothing
    /// written) when the node no longer holds the step's lease, because another node took the
    /// step over.
    pub async fn exec_finish(
        &self,
        plan_id: &str,
        claim: &Claim,
        node: &str,
        end: &StepEnd,
        note: &str,
    ) -> Result<bool> {
        let at = now();
        let (status, result, error, not_before, outcome) = match end {
            StepEnd::Completed(value) => (
                ExecStatus::Completed,
                Some(to_text(value)?),
                None,
                None,
                "succeeded",
            ),
            StepEnd::Retry { error, not_before } => (
                ExecStatus::RetryWait,
                None,
                Some(error.clone()),
                Some(timestamp(*not_before)),
                "failed",
            ),
            StepEnd::Failed(error) => (
                ExecStatus::Failed,
                None,
                Some(error.clone()),
                None,
                "failed",
            ),
            StepEnd::Skipped(error) => (
                ExecStatus::Skipped,
                None,
                Some(error.clone()),
                None,
                "failed",
            ),
            StepEnd::Blocked(error) => (
                ExecStatus::Blocked,
                None,
                Some(error.clone()),
                None,
                "failed",
            ),
        };
        let mut tx = self.pool.begin().await?;
        let updated = sqlx::query(
            "UPDATE exec_steps SET status = $1, result = $2, error = $3, not_before = $4,
                    lease_owner = NULL, lease_until = NULL, updated_at = $5, note = $10
             WHERE plan_id = $6 AND step_id = $7 AND lease_owner = $8 AND status = 'running'
               AND attempt = $9",
        )
        .bind(status.as_str())
        .bind(result.clone())
        .bind(error.clone())
        .bind(not_before)
        .bind(timestamp(at))
        .bind(plan_id.to_owned())
        .bind(claim.step_id.clone())
        .bind(node.to_owned())
        .bind(i64::from(claim.attempt))
        .bind(note.to_owned())
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query(
            "UPDATE exec_attempts SET outcome = $1, result = $2, error = $3, finished_at = $4
             WHERE idempotency_key = $5",
        )
        .bind(outcome)
        .bind(result)
        .bind(error)
        .bind(timestamp(at))
        .bind(claim.idempotency_key.clone())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Takes the run-level lease (for run decisions: replanning, the summary, the end state)
    /// for `node`; false when another node holds it.
    pub async fn exec_claim_run(&self, plan_id: &str, node: &str, lease: Duration) -> Result<bool> {
        let at = now();
        let updated = sqlx::query(
            "UPDATE exec_runs SET run_lease_owner = $1, run_lease_until = $2
             WHERE plan_id = $3 AND (run_lease_owner IS NULL OR run_lease_owner = $1
                                     OR run_lease_until < $4)",
        )
        .bind(node.to_owned())
        .bind(timestamp(plus(at, lease)))
        .bind(plan_id.to_owned())
        .bind(timestamp(at))
        .execute(&self.pool)
        .await?;
        Ok(updated.rows_affected() > 0)
    }

    /// Gives up `node`'s leases on the plan's run, for a node that stops taking part in it
    /// cleanly (a server shutting down, `plansmith run` quit by a second signal) after it
    /// dropped its running steps: another node may take those steps over at once (re-run with
    /// the same idempotency keys) instead of when the leases would have run out, and the
    /// run-level lease is released. Returns the steps whose leases it gave up. A renewal
    /// already under way when this runs only brings back the lease it renews: the takeover
    /// then waits for that lease, as it would have without this.
    pub async fn exec_release(&self, plan_id: &str, node: &str) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "UPDATE exec_steps SET lease_until = $1, updated_at = $1
             WHERE plan_id = $2 AND lease_owner = $3 AND status = 'running'
             RETURNING step_id",
        )
        .bind(timestamp(now()))
        .bind(plan_id.to_owned())
        .bind(node.to_owned())
        .fetch_all(&self.pool)
        .await?;
        // Each release stands alone: no transaction needed between the two.
        self.exec_release_run(plan_id, node).await?;
        let mut steps = rows
            .iter()
            .map(|row| row.try_get::<String, _>(0))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        steps.sort();
        Ok(steps)
    }

    /// Releases the run-level lease held by `node`.
    pub async fn exec_release_run(&self, plan_id: &str, node: &str) -> Result<()> {
        sqlx::query(
            "UPDATE exec_runs SET run_lease_owner = NULL, run_lease_until = NULL
             WHERE plan_id = $1 AND run_lease_owner = $2",
        )
        .bind(plan_id.to_owned())
        .bind(node.to_owned())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Every attempt of the plan's runs, in start order.
    pub async fn exec_attempts(&self, plan_id: &str) -> Result<Vec<AttemptRecord>> {
        let rows = sqlx::query(
            "SELECT idempotency_key, step_id, base_version, attempt, node, runs, outcome, error,
                    started_at, finished_at
             FROM exec_attempts WHERE plan_id = $1 ORDER BY started_at, idempotency_key",
        )
        .bind(plan_id.to_owned())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let finished: Option<String> = row.try_get("finished_at")?;
                Ok(AttemptRecord {
                    idempotency_key: row.try_get("idempotency_key")?,
                    step_id: row.try_get("step_id")?,
                    base_version: to_u32(plan_id, row.try_get("base_version")?)?,
                    attempt: to_u32(plan_id, row.try_get("attempt")?)?,
                    node: row.try_get("node")?,
                    runs: to_u32(plan_id, row.try_get("runs")?)?,
                    outcome: row.try_get("outcome")?,
                    error: row.try_get("error")?,
                    started_at: parse_time(plan_id, &row.try_get::<String, _>("started_at")?)?,
                    finished_at: finished.map(|t| parse_time(plan_id, &t)).transpose()?,
                })
            })
            .collect()
    }
}
