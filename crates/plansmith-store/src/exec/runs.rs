//! Runs and their step rows: starting a run, replanning it, its state, and reading them back.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::{Budget, ExecRun, ExecStatus, ExecStep, RunState, now, to_text};
use crate::error::{Result, StoreError};
use crate::state::ReviewAction;
use crate::store::{PlanStore, StoredPlan, from_json, parse_time, timestamp, to_u32};

/// A step of a new run or a replan: its id, and its result when it is already completed.
#[derive(Debug, Clone, PartialEq)]
pub struct StepSeed {
    /// The step id.
    pub step_id: String,
    /// `Some(result)` for a step that is completed already (kept from an earlier run).
    pub completed: Option<Value>,
}

const STEP_COLUMNS: &str = "step_id, status, attempt, reruns, result, error, note, lease_owner, \
                            lease_until, not_before";

impl PlanStore {
    /// `stored` with [`StoredPlan::run_active`] filled in from the plan's last run: what a
    /// reader that offers the plan's actions calls. The run is looked up only when the review
    /// state allows `run` (no other action depends on it).
    pub async fn with_run(&self, mut stored: StoredPlan) -> Result<StoredPlan> {
        if stored.state.allows(ReviewAction::Run) {
            stored.run_active = self
                .exec_run(&stored.plan.id)
                .await?
                .is_some_and(|run| matches!(run.state, RunState::Running | RunState::Waiting));
        }
        Ok(stored)
    }

    /// Starts a run of `plan_id` from `base_version` with these steps (completed ones keep
    /// their result and are never run). Fails with [`StoreError::RunActive`] when a run of
    /// the plan is still running or waiting; an old finished run's log is replaced.
    pub async fn exec_start(
        &self,
        plan_id: &str,
        base_version: u32,
        steps: &[StepSeed],
        node: &str,
    ) -> Result<ExecRun> {
        self.exec_start_with(plan_id, base_version, steps, node, &Budget::default())
            .await
    }

    /// [`PlanStore::exec_start`] with the run's budget, recorded in the same transaction (so a
    /// node that joins the run at once reads its caps), with nothing spent.
    pub async fn exec_start_with(
        &self,
        plan_id: &str,
        base_version: u32,
        steps: &[StepSeed],
        node: &str,
        budget: &Budget,
    ) -> Result<ExecRun> {
        let at = now();
        let mut tx = self.pool.begin().await?;
        // The write comes first (SQLite takes its write lock here, see `write`).
        let replaced = sqlx::query(
            "UPDATE exec_runs SET base_version = $1, state = 'running', replans = 0, node = $2,
                    run_lease_owner = NULL, run_lease_until = NULL, outcome = NULL,
                    started_at = $3, updated_at = $3
             WHERE plan_id = $4 AND state <> 'running' AND state <> 'waiting'",
        )
        .bind(i64::from(base_version))
        .bind(node.to_owned())
        .bind(timestamp(at))
        .bind(plan_id.to_owned())
        .execute(&mut *tx)
        .await?;
        if replaced.rows_affected() == 0 {
            let inserted = sqlx::query(
                "INSERT INTO exec_runs (plan_id, base_version, state, replans, node, started_at,
                                        updated_at)
                 VALUES ($1, $2, 'running', 0, $3, $4, $4)
                 ON CONFLICT (plan_id) DO NOTHING",
            )
            .bind(plan_id.to_owned())
            .bind(i64::from(base_version))
            .bind(node.to_owned())
            .bind(timestamp(at))
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                tx.rollback().await?;
                return Err(StoreError::RunActive(plan_id.to_owned()));
            }
        }
        sqlx::query("DELETE FROM exec_steps WHERE plan_id = $1")
            .bind(plan_id.to_owned())
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM exec_decisions WHERE plan_id = $1")
            .bind(plan_id.to_owned())
            .execute(&mut *tx)
            .await?;
        insert_steps(&mut tx, plan_id, steps, at).await?;
        super::budget::record(&mut tx, plan_id, budget, at).await?;
        tx.commit().await?;
        self.exec_run(plan_id)
            .await?
            .ok_or_else(|| StoreError::NotFound(plan_id.to_owned()))
    }

    /// Replaces the steps that are not completed by `steps` (a replan): completed rows stay,
    /// every other row is removed, the run's base version becomes `base_version` and its
    /// replan count grows by one. Seeds for steps that are completed already are ignored.
    pub async fn exec_replan(
        &self,
        plan_id: &str,
        base_version: u32,
        steps: &[StepSeed],
    ) -> Result<ExecRun> {
        let at = now();
        let mut tx = self.pool.begin().await?;
        let updated = sqlx::query(
            "UPDATE exec_runs SET base_version = $1, replans = replans + 1, state = 'running',
                    updated_at = $2
             WHERE plan_id = $3",
        )
        .bind(i64::from(base_version))
        .bind(timestamp(at))
        .bind(plan_id.to_owned())
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            tx.rollback().await?;
            return Err(StoreError::NotFound(plan_id.to_owned()));
        }
        let kept = sqlx::query(
            "SELECT step_id FROM exec_steps WHERE plan_id = $1 AND status = 'completed'",
        )
        .bind(plan_id.to_owned())
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|row| row.try_get::<String, _>(0))
        .collect::<std::result::Result<Vec<_>, _>>()?;
        sqlx::query("DELETE FROM exec_steps WHERE plan_id = $1 AND status <> 'completed'")
            .bind(plan_id.to_owned())
            .execute(&mut *tx)
            .await?;
        let fresh: Vec<StepSeed> = steps
            .iter()
            .filter(|seed| !kept.contains(&seed.step_id))
            .cloned()
            .collect();
        insert_steps(&mut tx, plan_id, &fresh, at).await?;
        tx.commit().await?;
        self.exec_run(plan_id)
            .await?
            .ok_or_else(|| StoreError::NotFound(plan_id.to_owned()))
    }

    /// The plan's run, if it ever ran.
    pub async fn exec_run(&self, plan_id: &str) -> Result<Option<ExecRun>> {
        let row = sqlx::query(
            "SELECT plan_id, base_version, state, replans, node, outcome, started_at, updated_at
             FROM exec_runs WHERE plan_id = $1",
        )
        .bind(plan_id.to_owned())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| decode_run(&row)).transpose()
    }

    /// Runs in `running` state, oldest first (what a worker node may join).
    pub async fn exec_active_runs(&self, limit: u32) -> Result<Vec<ExecRun>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT plan_id, base_version, state, replans, node, outcome, started_at, updated_at
             FROM exec_runs WHERE state = 'running' ORDER BY started_at, plan_id LIMIT {}",
            limit.clamp(1, 1000)
        )))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(decode_run).collect()
    }

    /// Runs paused for people (`waiting`) that someone has decided about since they paused
    /// (a step decision recorded at or after the pause), oldest pause first: what a worker
    /// resumes. A decision older than the pause does not count, so a run that paused again
    /// with nothing new decided is not picked up over and over.
    pub async fn exec_decided_runs(&self, limit: u32) -> Result<Vec<ExecRun>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT r.plan_id, r.base_version, r.state, r.replans, r.node, r.outcome,
                    r.started_at, r.updated_at
             FROM exec_runs r
             WHERE r.state = 'waiting'
               AND EXISTS (SELECT 1 FROM exec_decisions d
                           WHERE d.plan_id = r.plan_id AND d.created_at >= r.updated_at)
             ORDER BY r.updated_at, r.plan_id LIMIT {}",
            limit.clamp(1, 1000)
        )))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(decode_run).collect()
    }

    /// Every step row of the plan's run.
    pub async fn exec_steps(&self, plan_id: &str) -> Result<Vec<ExecStep>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {STEP_COLUMNS} FROM exec_steps WHERE plan_id = $1 ORDER BY step_id"
        )))
        .bind(plan_id.to_owned())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|row| decode_step(plan_id, row)).collect()
    }

    /// Sets a step that is not running and not completed to `status` with `note` (skip a
    /// descendant, block for approval, release after approval). Returns false when the row is
    /// completed, running, or missing: completed steps never change.
    pub async fn exec_set_status(
        &self,
        plan_id: &str,
        step_id: &str,
        status: ExecStatus,
        note: &str,
    ) -> Result<bool> {
        let updated = sqlx::query(
            "UPDATE exec_steps SET status = $1, note = $2, updated_at = $3
             WHERE plan_id = $4 AND step_id = $5 AND status <> 'completed' AND status <> 'running'",
        )
        .bind(status.as_str())
        .bind(note.to_owned())
        .bind(timestamp(now()))
        .bind(plan_id.to_owned())
        .bind(step_id.to_owned())
        .execute(&self.pool)
        .await?;
        Ok(updated.rows_affected() > 0)
    }

    /// Sets the run's state (and its final report). A run that is over is not reopened here;
    /// returns false then.
    pub async fn exec_set_run_state(
        &self,
        plan_id: &str,
        state: RunState,
        outcome: Option<&Value>,
    ) -> Result<bool> {
        let outcome = outcome.map(to_text).transpose()?;
        let updated = sqlx::query(
            "UPDATE exec_runs SET state = $1, outcome = COALESCE($2, outcome), updated_at = $3
             WHERE plan_id = $4 AND (state = 'running' OR state = 'waiting')",
        )
        .bind(state.as_str())
        .bind(outcome)
        .bind(timestamp(now()))
        .bind(plan_id.to_owned())
        .execute(&self.pool)
        .await?;
        Ok(updated.rows_affected() > 0)
    }
}

async fn insert_steps(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    plan_id: &str,
    steps: &[StepSeed],
    at: DateTime<Utc>,
) -> Result<()> {
    for seed in steps {
        let (status, result) = match &seed.completed {
            Some(value) => (ExecStatus::Completed, Some(to_text(value)?)),
            None => (ExecStatus::Pending, None),
        };
        sqlx::query(
            "INSERT INTO exec_steps (plan_id, step_id, status, attempt, reruns, result, note,
                                     updated_at)
             VALUES ($1, $2, $3, 0, 0, $4, '', $5)",
        )
        .bind(plan_id.to_owned())
        .bind(seed.step_id.clone())
        .bind(status.as_str())
        .bind(result)
        .bind(timestamp(at))
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

fn decode_run(row: &AnyRow) -> Result<ExecRun> {
    let plan_id: String = row.try_get("plan_id")?;
    let state: String = row.try_get("state")?;
    let outcome: Option<String> = row.try_get("outcome")?;
    let outcome: Option<Value> = outcome.map(|t| from_json(&plan_id, &t)).transpose()?;
    Ok(ExecRun {
        stop_reason: outcome
            .as_ref()
            .and_then(|o| o.get("stop_reason"))
            .and_then(|r| serde_json::from_value(r.clone()).ok()),
        base_version: to_u32(&plan_id, row.try_get("base_version")?)?,
        state: state.parse().map_err(|reason| StoreError::Corrupt {
            id: plan_id.clone(),
            reason,
        })?,
        replans: to_u32(&plan_id, row.try_get("replans")?)?,
        node: row.try_get("node")?,
        outcome,
        started_at: parse_time(&plan_id, &row.try_get::<String, _>("started_at")?)?,
        updated_at: parse_time(&plan_id, &row.try_get::<String, _>("updated_at")?)?,
        plan_id,
    })
}

fn decode_step(plan_id: &str, row: &AnyRow) -> Result<ExecStep> {
    let status: String = row.try_get("status")?;
    let result: Option<String> = row.try_get("result")?;
    let time = |column: &str| -> Result<Option<DateTime<Utc>>> {
        let text: Option<String> = row.try_get(column)?;
        text.map(|t| parse_time(plan_id, &t)).transpose()
    };
    Ok(ExecStep {
        step_id: row.try_get("step_id")?,
        status: status.parse().map_err(|reason| StoreError::Corrupt {
            id: plan_id.to_owned(),
            reason,
        })?,
        attempt: to_u32(plan_id, row.try_get("attempt")?)?,
        reruns: to_u32(plan_id, row.try_get("reruns")?)?,
        result: result.map(|t| from_json(plan_id, &t)).transpose()?,
        error: row.try_get("error")?,
        note: row.try_get("note")?,
        lease_owner: row.try_get("lease_owner")?,
        lease_until: time("lease_until")?,
        not_before: time("not_before")?,
    })
}
