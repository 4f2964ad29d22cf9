//! The durable execution log of `plansmith-exec` (migration 4): one run per plan
//! ([`ExecRun`]), one row per step ([`ExecStep`]: status, attempt, result, lease), one row per
//! attempt keyed by its idempotency key ([`AttemptRecord`]), and people's decisions about
//! steps ([`StepDecision`]: approve a gated step, or retry / skip / abort a failed one).
//!
//! **Claims and leases.** A step runs only on the node that claimed it:
//! [`PlanStore::exec_claim`] moves a claimable step (pending, a retry whose backoff is over,
//! or running under a lease that expired) to `running` with `lease_owner = node` and
//! `lease_until = now + lease`, in one conditional `UPDATE`; on PostgreSQL the candidates are
//! first locked with `SELECT … FOR UPDATE SKIP LOCKED`, so nodes claiming at once skip each
//! other's rows instead of queueing on them. A running node renews its leases
//! ([`PlanStore::exec_renew`]); when a node dies its leases expire and another node's claim
//! takes the step over. Every write about a running step is fenced by the lease owner: a node
//! that lost its lease cannot overwrite the step.
//!
//! **Idempotency.** Each attempt has the key `plan:base_version:step:attempt`
//! ([`idempotency_key`]). A claim of a step whose lease expired while its attempt was running
//! (the node crashed mid-call) keeps the attempt number, so the call is re-run with the
//! **same** key (`Claim::rerun` is true and the attempt row's `runs` grows); the invoker passes
//! the key on, so a tool that honours it does its side effect once. A completed step is never
//! claimed again: no SQL path moves a row out of `completed`.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use crate::error::{Result, StoreError};
use crate::store::{Backend, PlanStore, from_json, parse_time, timestamp, to_u32};

/// The idempotency key of one attempt: `plan:base_version:step:attempt`.
pub fn idempotency_key(plan_id: &str, base_version: u32, step_id: &str, attempt: u32) -> String {
    format!("{plan_id}:{base_version}:{step_id}:{attempt}")
}

/// Where a run is.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Steps are being run (by one or more nodes).
    Running,
    /// Nothing can progress until a person decides (an approval, or a failed step under `ask`).
    Waiting,
    /// Every step completed or was skipped by policy; the summary is written.
    Completed,
    /// A step failed past its policy and no replan was possible.
    Failed,
    /// A step's policy (or a person) aborted the run.
    Aborted,
    /// Replanning repeated the same failure or the same call: stopped.
    Stalled,
}

impl RunState {
    /// All states.
    pub const ALL: [RunState; 6] = [
        RunState::Running,
        RunState::Waiting,
        RunState::Completed,
        RunState::Failed,
        RunState::Aborted,
        RunState::Stalled,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Waiting => "waiting",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Aborted => "aborted",
            RunState::Stalled => "stalled",
        }
    }

    /// True when the run is over (a new run may start).
    pub fn is_final(self) -> bool {
        !matches!(self, RunState::Running | RunState::Waiting)
    }
}

impl std::str::FromStr for RunState {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<RunState, String> {
        RunState::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| format!("unknown run state `{text}`"))
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a step is in the execution log (finer than the document's `StepStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecStatus {
    /// Not started; runs once its dependencies completed.
    Pending,
    /// Claimed by a node (under a lease).
    Running,
    /// Failed; another attempt may be claimed after `not_before`.
    RetryWait,
    /// Done, with a result. Never left.
    Completed,
    /// Failed past its policy.
    Failed,
    /// Not run: skipped by policy, or a dependency failed or was skipped.
    Skipped,
    /// Waiting for a person: an approval, or a decision about a failure.
    Blocked,
}

impl ExecStatus {
    /// All statuses.
    pub const ALL: [ExecStatus; 7] = [
        ExecStatus::Pending,
        ExecStatus::Running,
        ExecStatus::RetryWait,
        ExecStatus::Completed,
        ExecStatus::Failed,
        ExecStatus::Skipped,
        ExecStatus::Blocked,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecStatus::Pending => "pending",
            ExecStatus::Running => "running",
            ExecStatus::RetryWait => "retry_wait",
            ExecStatus::Completed => "completed",
            ExecStatus::Failed => "failed",
            ExecStatus::Skipped => "skipped",
            ExecStatus::Blocked => "blocked",
        }
    }

    /// True for completed, failed and skipped.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ExecStatus::Completed | ExecStatus::Failed | ExecStatus::Skipped
        )
    }

    /// The plan document's status for this one.
    pub fn step_status(self) -> plansmith_core::StepStatus {
        use plansmith_core::StepStatus;
        match self {
            ExecStatus::Pending => StepStatus::NotStarted,
            ExecStatus::Running | ExecStatus::RetryWait => StepStatus::InProgress,
            ExecStatus::Completed => StepStatus::Completed,
            ExecStatus::Failed => StepStatus::Failed,
            ExecStatus::Skipped => StepStatus::Skipped,
            ExecStatus::Blocked => StepStatus::Blocked,
        }
    }
}

impl std::str::FromStr for ExecStatus {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<ExecStatus, String> {
        ExecStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| format!("unknown execution status `{text}`"))
    }
}

/// One plan's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecRun {
    /// The plan.
    pub plan_id: String,
    /// The plan version the current steps come from (the run's start, or its last replan);
    /// part of every idempotency key.
    pub base_version: u32,
    /// Where the run is.
    pub state: RunState,
    /// Replans so far.
    pub replans: u32,
    /// The node that started the run.
    pub node: String,
    /// The final report, once the run is over.
    pub outcome: Option<Value>,
    /// When the run started.
    pub started_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// One step's row in the execution log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecStep {
    /// The step id.
    pub step_id: String,
    /// Where it is.
    pub status: ExecStatus,
    /// The last attempt number claimed (0: never claimed).
    pub attempt: u32,
    /// How many times the current attempt was re-run after its node lost the lease.
    pub reruns: u32,
    /// The result, once completed.
    pub result: Option<Value>,
    /// The last error.
    pub error: Option<String>,
    /// A note for people (why it was skipped, what it waits for).
    pub note: String,
    /// The node holding the lease while running.
    pub lease_owner: Option<String>,
    /// When the lease expires.
    pub lease_until: Option<DateTime<Utc>>,
    /// Earliest time of the next attempt (retry backoff).
    pub not_before: Option<DateTime<Utc>>,
}

/// A step claimed by [`PlanStore::exec_claim`]: run it with this attempt and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The step.
    pub step_id: String,
    /// The attempt number (1 for the first).
    pub attempt: u32,
    /// `plan:base_version:step:attempt`.
    pub idempotency_key: String,
    /// True when this attempt already started on a node that lost its lease (crashed): the
    /// call is repeated with the same key.
    pub rerun: bool,
}

/// How an attempt ended, for [`PlanStore::exec_finish`].
#[derive(Debug, Clone, PartialEq)]
pub enum StepEnd {
    /// Succeeded with a result.
    Completed(Value),
    /// Failed; another attempt may run from `not_before` on.
    Retry {
        /// The error.
        error: String,
        /// When the next attempt may start.
        not_before: DateTime<Utc>,
    },
    /// Failed past its policy.
    Failed(String),
    /// Failed; skipped by policy.
    Skipped(String),
    /// Failed; waits for a person (`ask`).
    Blocked(String),
}

/// One attempt in the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// `plan:base_version:step:attempt`.
    pub idempotency_key: String,
    /// The step.
    pub step_id: String,
    /// The plan version of the run segment.
    pub base_version: u32,
    /// The attempt number.
    pub attempt: u32,
    /// The node that ran it last.
    pub node: String,
    /// How many times it was started (more than 1 after a crash mid-call).
    pub runs: u32,
    /// `started`, `succeeded` or `failed`.
    pub outcome: String,
    /// The error of a failed attempt.
    pub error: Option<String>,
    /// When it (last) started.
    pub started_at: DateTime<Utc>,
    /// When it finished.
    pub finished_at: Option<DateTime<Utc>>,
}

/// What a person decided about a step.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepVerdict {
    /// Let a gated step run.
    Approve,
    /// Do not run a gated step (it is skipped, and its descendants).
    Deny,
    /// Try a failed step again.
    Retry,
    /// Skip a failed step (and its descendants).
    Skip,
    /// Abort the run.
    Abort,
}

impl StepVerdict {
    /// All verdicts.
    pub const ALL: [StepVerdict; 5] = [
        StepVerdict::Approve,
        StepVerdict::Deny,
        StepVerdict::Retry,
        StepVerdict::Skip,
        StepVerdict::Abort,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepVerdict::Approve => "approve",
            StepVerdict::Deny => "deny",
            StepVerdict::Retry => "retry",
            StepVerdict::Skip => "skip",
            StepVerdict::Abort => "abort",
        }
    }
}

impl std::str::FromStr for StepVerdict {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<StepVerdict, String> {
        StepVerdict::ALL
            .into_iter()
            .find(|s| s.as_str() == text.trim())
            .ok_or_else(|| {
                format!(
                    "unknown step decision `{text}`; expected approve, deny, retry, skip or abort"
                )
            })
    }
}

/// A person's decision about a step, waiting for the executor to pick it up.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepDecision {
    /// The step.
    pub step_id: String,
    /// The decision.
    pub verdict: StepVerdict,
    /// Their note.
    pub note: String,
    /// Who.
    pub actor: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// What a run's process should do at its next turn ([`PlanStore::run_signal`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RunSignal {
    /// Go on.
    Continue,
    /// Stop: someone asked ([`PlanStore::request_stop`]).
    Stop(StepDecision),
    /// The run is gone: the plan was deleted while it ran.
    Gone,
}

/// The `step_id` under which a request to stop the whole run ([`PlanStore::request_stop`]) is
/// kept with the step decisions: no step has an empty id, so the executor's step-by-step
/// reading of the decisions never matches it.
pub const RUN_STOP: &str = "";

/// A decision [`PlanStore::decide_step`] recorded, and when the run applies it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepDecided {
    /// The decision as recorded.
    #[serde(flatten)]
    pub decision: StepDecision,
    /// Whether the step was waiting for it.
    pub applies: Applies,
}

/// When the run applies a recorded step decision.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Applies {
    /// The step was waiting for a person (an approval, or a decision about its failure): the
    /// run goes on with it at its next turn.
    Now,
    /// The run has not reached the step's gate (or its failure) yet: the decision is kept and
    /// applied then, as a pre-approval. Replaced by a later decision about the same step.
    WhenReached,
}

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

/// The condition under which a step row may be claimed at time `$now` (bound as `$1`).
const CLAIMABLE: &str = "(status = 'pending' OR (status = 'retry_wait' AND not_before <= $1) \
                         OR (status = 'running' AND lease_until < $1))";

fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

fn plus(at: DateTime<Utc>, lease: Duration) -> DateTime<Utc> {
    at + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(30))
}

fn to_text(value: &Value) -> Result<String> {
    serde_json::to_string(value).map_err(|err| StoreError::BadEdit(err.to_string()))
}

impl PlanStore {
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
            claims.push(Claim {
                step_id,
                attempt,
                idempotency_key: key,
                rerun: reruns > 0,
            });
        }
        tx.commit().await?;
        Ok(claims)
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

    /// Records a person's decision about a step of the plan's run in progress (replacing an
    /// earlier one that was not picked up yet), and says whether the step was waiting for it.
    ///
    /// A decision belongs to a run: starting a run clears the decisions left from before, so
    /// one given while no run is in progress would be dropped unused, and one about a step that
    /// the run is done with would never be read. Both are refused
    /// ([`StoreError::NotDecidable`]) rather than recorded for nothing. A decision about a step
    /// the run has not reached yet is kept, and applied when the step reaches its gate (or
    /// fails under the `ask` policy): a pre-approval.
    ///
    /// With `expected_version` (the version the person read), the decision is refused
    /// ([`StoreError::Conflict`]) when the step itself changed since: its title, description,
    /// action, dependencies, schedule or gate. The run's own writes of other steps' results
    /// make new versions too; they do not make the decision stale.
    pub async fn decide_step(
        &self,
        plan_id: &str,
        step_id: &str,
        verdict: StepVerdict,
        note: &str,
        expected_version: Option<u32>,
        actor: &str,
    ) -> Result<StepDecided> {
        let stored = self.get(plan_id).await?;
        if let Some(expected) = expected_version
            && expected != stored.version()
        {
            let stale = || StoreError::Conflict {
                id: plan_id.to_owned(),
                expected,
                actual: stored.version(),
            };
            let seen = match self.get_version(plan_id, expected).await {
                Ok(seen) => seen,
                Err(StoreError::NotFound(_)) => return Err(stale()),
                Err(err) => return Err(err),
            };
            /// What a decision about a step is about (not its progress).
            #[allow(clippy::type_complexity)]
            fn definition(
                step: &plansmith_core::Step,
            ) -> (
                &str,
                &str,
                &plansmith_core::Action,
                &[String],
                Option<&plansmith_core::Schedule>,
                bool,
            ) {
                (
                    &step.title,
                    &step.description,
                    &step.action,
                    &step.depends_on,
                    step.schedule.as_ref(),
                    step.requires_approval,
                )
            }
            if seen.step(step_id).map(definition) != stored.plan.step(step_id).map(definition) {
                return Err(stale());
            }
        }
        if stored.plan.step(step_id).is_none() {
            return Err(StoreError::InvalidStep {
                given: step_id.to_owned(),
                max: stored
                    .plan
                    .steps
                    .iter()
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let refuse = |reason: String| StoreError::NotDecidable {
            id: plan_id.to_owned(),
            step: step_id.to_owned(),
            reason,
        };
        if let Err(why) = self.run_in_progress(plan_id).await? {
            return Err(refuse(format!(
                "{why}; decisions apply during a run: start one first (a step that needs \
                 approval then waits for its decision)"
            )));
        }
        let status = self
            .exec_steps(plan_id)
            .await?
            .into_iter()
            .find(|s| s.step_id == step_id)
            .map(|s| s.status);
        let applies = match status {
            Some(ExecStatus::Blocked) => Applies::Now,
            Some(ExecStatus::Pending | ExecStatus::Running | ExecStatus::RetryWait) => {
                Applies::WhenReached
            }
            Some(done @ (ExecStatus::Completed | ExecStatus::Failed | ExecStatus::Skipped)) => {
                return Err(refuse(format!(
                    "the run is done with it ({}); a decision applies to a step that waits for \
                     one or has not run yet",
                    done.as_str()
                )));
            }
            None => {
                return Err(refuse(
                    "it is not part of the run in progress (the plan changed since the run \
                     started)"
                        .to_owned(),
                ));
            }
        };
        let at = self
            .record_decision(plan_id, step_id, verdict, note, actor)
            .await?;
        Ok(StepDecided {
            decision: StepDecision {
                step_id: step_id.to_owned(),
                verdict,
                note: note.to_owned(),
                actor: actor.to_owned(),
                created_at: at,
            },
            applies,
        })
    }

    /// The pending decisions about the plan's steps.
    pub async fn step_decisions(&self, plan_id: &str) -> Result<Vec<StepDecision>> {
        // A request to stop the run shares the table but is no step's decision.
        let rows = sqlx::query(
            "SELECT step_id, verdict, note, actor, created_at FROM exec_decisions
             WHERE plan_id = $1 AND step_id <> $2 ORDER BY step_id",
        )
        .bind(plan_id.to_owned())
        .bind(RUN_STOP)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let verdict: String = row.try_get("verdict")?;
                Ok(StepDecision {
                    step_id: row.try_get("step_id")?,
                    verdict: verdict.parse().map_err(|reason| StoreError::Corrupt {
                        id: plan_id.to_owned(),
                        reason,
                    })?,
                    note: row.try_get("note")?,
                    actor: row.try_get("actor")?,
                    created_at: parse_time(plan_id, &row.try_get::<String, _>("created_at")?)?,
                })
            })
            .collect()
    }

    /// Asks the plan's run in progress to stop, whatever its steps are doing: each node that
    /// runs it stops its running steps at its next turn (they are recorded as skipped,
    /// "stopped: …"), the steps left are not run, and the run ends `aborted`. A paused run
    /// (`waiting`) stops when it is resumed, as any decision resumes it. Kept with the step
    /// decisions (under [`RUN_STOP`]), so the next run's start clears it too. Refused
    /// ([`StoreError::NotRunning`]) when the plan has no run in progress.
    pub async fn request_stop(&self, plan_id: &str, note: &str, actor: &str) -> Result<ExecRun> {
        self.get(plan_id).await?;
        let run = self
            .run_in_progress(plan_id)
            .await?
            .map_err(|why| StoreError::NotRunning {
                id: plan_id.to_owned(),
                why,
            })?;
        self.record_decision(plan_id, RUN_STOP, StepVerdict::Abort, note, actor)
            .await?;
        Ok(run)
    }

    /// The plan's run when it is in progress (running or waiting); otherwise why not: "it
    /// never ran" or "its last run is STATE".
    async fn run_in_progress(&self, plan_id: &str) -> Result<std::result::Result<ExecRun, String>> {
        Ok(match self.exec_run(plan_id).await? {
            None => Err("it never ran".to_owned()),
            Some(run) if run.state.is_final() => Err(format!("its last run is {}", run.state)),
            Some(run) => Ok(run),
        })
    }

    /// Writes a decision (replacing the step's earlier one); returns its time.
    async fn record_decision(
        &self,
        plan_id: &str,
        step_id: &str,
        verdict: StepVerdict,
        note: &str,
        actor: &str,
    ) -> Result<DateTime<Utc>> {
        let at = now();
        sqlx::query(
            "INSERT INTO exec_decisions (plan_id, step_id, verdict, note, actor, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (plan_id, step_id) DO UPDATE SET verdict = $3, note = $4, actor = $5,
                created_at = $6",
        )
        .bind(plan_id.to_owned())
        .bind(step_id.to_owned())
        .bind(verdict.as_str())
        .bind(note.to_owned())
        .bind(actor.to_owned())
        .bind(timestamp(at))
        .execute(&self.pool)
        .await?;
        Ok(at)
    }

    /// What the process running the plan should do at its next turn, in one read: go on; stop,
    /// because someone asked ([`PlanStore::request_stop`]: who, when, and their note); or give
    /// up, because the run is gone (the plan was deleted while it ran).
    pub async fn run_signal(&self, plan_id: &str) -> Result<RunSignal> {
        let row = sqlx::query(
            "SELECT d.note, d.actor, d.created_at FROM exec_runs r
             LEFT JOIN exec_decisions d ON d.plan_id = r.plan_id AND d.step_id = $2
             WHERE r.plan_id = $1",
        )
        .bind(plan_id.to_owned())
        .bind(RUN_STOP)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(RunSignal::Gone);
        };
        let Some(actor) = row.try_get::<Option<String>, _>("actor")? else {
            return Ok(RunSignal::Continue);
        };
        Ok(RunSignal::Stop(StepDecision {
            step_id: RUN_STOP.to_owned(),
            verdict: StepVerdict::Abort,
            note: row
                .try_get::<Option<String>, _>("note")?
                .unwrap_or_default(),
            actor,
            created_at: parse_time(
                plan_id,
                &row.try_get::<Option<String>, _>("created_at")?
                    .unwrap_or_default(),
            )?,
        }))
    }

    /// Removes a decision once acted on (a `retry` is used once).
    pub async fn consume_step_decision(&self, plan_id: &str, step_id: &str) -> Result<()> {
        sqlx::query("DELETE FROM exec_decisions WHERE plan_id = $1 AND step_id = $2")
            .bind(plan_id.to_owned())
            .bind(step_id.to_owned())
            .execute(&self.pool)
            .await?;
        Ok(())
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
    Ok(ExecRun {
        base_version: to_u32(&plan_id, row.try_get("base_version")?)?,
        state: state.parse().map_err(|reason| StoreError::Corrupt {
            id: plan_id.clone(),
            reason,
        })?,
        replans: to_u32(&plan_id, row.try_get("replans")?)?,
        node: row.try_get("node")?,
        outcome: outcome.map(|t| from_json(&plan_id, &t)).transpose()?,
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
