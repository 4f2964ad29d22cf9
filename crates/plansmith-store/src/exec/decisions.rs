//! People's decisions about the steps of a run in progress, and requests to stop the whole run
//! that the running process reads as a [`RunSignal`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::Row;

use super::{ExecRun, ExecStatus, now};
use crate::error::{Result, StoreError};
use crate::store::{PlanStore, parse_time, timestamp};

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

impl PlanStore {
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
