//! The lifecycle operations of OpenManus's PlanningTool on top of the write path: `update`,
//! `mark_step` (with [`StepKey`]), `set_active` / `get_active` and `delete`.

use std::str::FromStr;

use chrono::Utc;
use plansmith_core::{Plan, Step, StepStatus};
use sqlx::{AssertSqlSafe, Row};

use super::sql::timestamp;
use super::{Change, PlanStore, StoredPlan, Trigger};
use crate::error::{Result, StoreError};

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

impl PlanStore {
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
        for table in [
            "exec_runs",
            "exec_steps",
            "exec_attempts",
            "exec_decisions",
            "exec_budgets",
            "exec_remote_tasks",
            "exec_task_inputs",
            "standing_approvals",
        ] {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_keys_and_statuses() {
        assert_eq!("2".parse::<StepKey>().unwrap(), StepKey::Index(2));
        assert_eq!("s2".parse::<StepKey>().unwrap(), StepKey::Id("s2".into()));
        let err = parse_status("done").unwrap_err().to_string();
        assert!(err.contains("valid statuses are: not_started"), "{err}");
    }
}
