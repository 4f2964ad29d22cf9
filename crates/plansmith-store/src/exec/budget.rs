//! A run's budget (migration 10): the caps it was started with and what it has spent so far,
//! one row per plan beside its run, so that every node taking part in the run and every resume
//! reads the same caps and adds to the same totals. And the store's step times, by kind of
//! step, that estimates read.

use chrono::{DateTime, Utc};
use plansmith_core::estimate::StepHistory;
use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::error::{Result, StoreError};
use crate::store::{PlanStore, from_json, parse_time, timestamp};

/// What a run does with the steps running when a cap is reached. New steps never start.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnCap {
    /// Let them end and keep their results (the default).
    #[default]
    Finish,
    /// Stop them at once (recorded as skipped, "stopped: …").
    Cancel,
}

impl std::str::FromStr for OnCap {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<OnCap, String> {
        match text.trim() {
            "finish" => Ok(OnCap::Finish),
            "cancel" => Ok(OnCap::Cancel),
            other => Err(format!(
                "unknown cap action `{other}` (expected `finish` or `cancel`)"
            )),
        }
    }
}

/// Caps on one run; `None` is no cap.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Most tool and agent calls (every attempt is a call, retries included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u64>,
    /// Most model tokens (prompt and completion) spent by the run's model calls: task steps
    /// and replans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Most wall time of the run, in seconds from its start (resumes included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seconds: Option<u64>,
    /// Most replans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replans: Option<u32>,
    /// What happens to running steps when a cap is reached.
    #[serde(default)]
    pub on_cap: OnCap,
}

impl Budget {
    /// `self` with `over`'s caps where it sets them (and its cap action when it sets any cap or
    /// asks to cancel).
    pub fn then(&self, over: &Budget) -> Budget {
        Budget {
            max_tool_calls: over.max_tool_calls.or(self.max_tool_calls),
            max_tokens: over.max_tokens.or(self.max_tokens),
            max_seconds: over.max_seconds.or(self.max_seconds),
            max_replans: over.max_replans.or(self.max_replans),
            on_cap: if over.on_cap == OnCap::Cancel {
                OnCap::Cancel
            } else {
                self.on_cap
            },
        }
    }
}

/// A run's budget as stored: its caps, when it started, and what it spent.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunBudget {
    /// The caps.
    pub budget: Budget,
    /// When the run started (its deadline is `max_seconds` after).
    pub started_at: DateTime<Utc>,
    /// Tool and agent calls started so far.
    pub tool_calls: u64,
    /// Model tokens spent so far.
    pub tokens: u64,
}

impl RunBudget {
    /// When the run must end, if it has a time cap.
    pub fn deadline(&self) -> Option<DateTime<Utc>> {
        let seconds = i64::try_from(self.budget.max_seconds?).unwrap_or(i64::MAX);
        self.started_at
            .checked_add_signed(chrono::TimeDelta::try_seconds(seconds)?)
            .or(Some(DateTime::<Utc>::MAX_UTC))
    }
}

fn count(plan_id: &str, value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt {
        id: plan_id.to_owned(),
        reason: format!("budget count {value} out of range"),
    })
}

fn cap(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Records the budget of the plan's run that starts at `at`, with nothing spent (replacing the
/// last run's), in the run's start transaction.
pub(super) async fn record(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    plan_id: &str,
    budget: &Budget,
    at: DateTime<Utc>,
) -> Result<()> {
    let text = serde_json::to_string(budget).map_err(|err| StoreError::BadEdit(err.to_string()))?;
    sqlx::query(
        "INSERT INTO exec_budgets (plan_id, budget, started_at, tool_calls, tokens)
         VALUES ($1, $2, $3, 0, 0)
         ON CONFLICT (plan_id) DO UPDATE SET budget = $2, started_at = $3, tool_calls = 0,
                                             tokens = 0",
    )
    .bind(plan_id.to_owned())
    .bind(text)
    .bind(timestamp(at))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl PlanStore {
    /// The budget of the plan's run; `None` for a run recorded without one.
    pub async fn exec_budget(&self, plan_id: &str) -> Result<Option<RunBudget>> {
        let row = sqlx::query(
            "SELECT budget, started_at, tool_calls, tokens FROM exec_budgets WHERE plan_id = $1",
        )
        .bind(plan_id.to_owned())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let budget: String = row.try_get("budget")?;
        let started_at: String = row.try_get("started_at")?;
        Ok(Some(RunBudget {
            budget: from_json(plan_id, &budget)?,
            started_at: parse_time(plan_id, &started_at)?,
            tool_calls: count(plan_id, row.try_get("tool_calls")?)?,
            tokens: count(plan_id, row.try_get("tokens")?)?,
        }))
    }

    /// Takes one tool call from the run's budget: false, with nothing taken, when its cap is
    /// reached. One conditional `UPDATE`, so nodes taking calls at once never exceed the cap.
    pub async fn exec_take_tool_call(&self, plan_id: &str, max: Option<u64>) -> Result<bool> {
        let updated = sqlx::query(
            "UPDATE exec_budgets SET tool_calls = tool_calls + 1
             WHERE plan_id = $1 AND tool_calls < $2",
        )
        .bind(plan_id.to_owned())
        .bind(max.map_or(i64::MAX, cap))
        .execute(&self.pool)
        .await?;
        Ok(updated.rows_affected() > 0)
    }

    /// Gives back `n` tool calls taken for steps that another node claimed first.
    pub async fn exec_return_tool_calls(&self, plan_id: &str, n: u64) -> Result<()> {
        sqlx::query(
            "UPDATE exec_budgets SET tool_calls = tool_calls - $1
             WHERE plan_id = $2 AND tool_calls >= $1",
        )
        .bind(cap(n))
        .bind(plan_id.to_owned())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Adds `tokens` to what the run spent; returns the new total (`None`: no budget row).
    pub async fn exec_spend_tokens(&self, plan_id: &str, tokens: u64) -> Result<Option<u64>> {
        let row = sqlx::query(
            "UPDATE exec_budgets SET tokens = tokens + $1 WHERE plan_id = $2 RETURNING tokens",
        )
        .bind(cap(tokens))
        .bind(plan_id.to_owned())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| count(plan_id, row.try_get("tokens")?))
            .transpose()
    }

    /// Adds a completed attempt of a kind of step (`plansmith_core::estimate::history_key`) to the
    /// store's step times: what estimates of later plans read.
    pub async fn exec_record_time(&self, step_key: &str, ms: u64, tokens: u64) -> Result<()> {
        sqlx::query(
            "INSERT INTO exec_step_times (step_key, calls, total_ms, total_tokens)
             VALUES ($1, 1, $2, $3)
             ON CONFLICT (step_key) DO UPDATE SET calls = exec_step_times.calls + 1,
                 total_ms = exec_step_times.total_ms + $2,
                 total_tokens = exec_step_times.total_tokens + $3",
        )
        .bind(step_key.to_owned())
        .bind(cap(ms))
        .bind(cap(tokens))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The step times of these kinds of step, for an estimate; kinds that never ran are left
    /// out.
    pub async fn exec_step_history(
        &self,
        keys: &[String],
    ) -> Result<std::collections::HashMap<String, StepHistory>> {
        let keys: std::collections::BTreeSet<&String> = keys.iter().collect();
        let mut history = std::collections::HashMap::new();
        if keys.is_empty() {
            return Ok(history);
        }
        // One query for the plan's kinds of step: a plan has a handful (a validated one at
        // most `MAX_PLAN_STEPS`), each a bound parameter.
        let placeholders: Vec<String> = (1..=keys.len()).map(|i| format!("${i}")).collect();
        let mut query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT step_key, calls, total_ms, total_tokens FROM exec_step_times
             WHERE step_key IN ({})",
            placeholders.join(", ")
        )));
        for key in &keys {
            query = query.bind((*key).clone());
        }
        for row in query.fetch_all(&self.pool).await? {
            let key: String = row.try_get("step_key")?;
            let key = &key;
            let calls = count(key, row.try_get("calls")?)?;
            if calls == 0 {
                continue;
            }
            let (ms, tokens) = (
                count(key, row.try_get("total_ms")?)?,
                count(key, row.try_get("total_tokens")?)?,
            );
            history.insert(
                key.clone(),
                StepHistory {
                    calls,
                    mean_ms: ms as f64 / calls as f64,
                    mean_tokens: tokens as f64 / calls as f64,
                },
            );
        }
        Ok(history)
    }
}
