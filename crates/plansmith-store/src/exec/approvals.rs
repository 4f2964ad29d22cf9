//! Standing approvals (migration 10): a person's approval of a gated call that outlives the
//! run it was given in — for the tool in every run of one plan, or for the tool with exactly
//! these arguments in any plan. The executor looks one up before it blocks a gated step.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::Row;

use super::now;
use crate::error::{Result, StoreError};
use crate::store::{PlanStore, parse_time, timestamp};

/// How far an approval reaches.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Remember {
    /// This step, in this run only (the default).
    #[default]
    Run,
    /// This tool, in every run of this plan.
    Plan,
    /// This tool with exactly these arguments (as the plan writes them), in any plan.
    Call,
}

impl Remember {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Remember::Run => "run",
            Remember::Plan => "plan",
            Remember::Call => "call",
        }
    }
}

impl std::str::FromStr for Remember {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Remember, String> {
        match text.trim() {
            "run" => Ok(Remember::Run),
            "plan" => Ok(Remember::Plan),
            "call" => Ok(Remember::Call),
            other => Err(format!(
                "unknown approval scope `{other}`; expected run, plan or call"
            )),
        }
    }
}

/// An approval that outlives its run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StandingApproval {
    /// How far it reaches (`plan` or `call`).
    pub scope: Remember,
    /// The tool.
    pub tool: String,
    /// Who gave it.
    pub actor: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// The key of an approval of `tool` in plan `plan_id` (scope `plan`) or with `arguments`
/// (scope `call`): arguments by the SHA-256 of their canonical JSON (keys sorted).
fn key(scope: Remember, plan_id: &str, tool: &str, arguments: &Value) -> Option<String> {
    match scope {
        Remember::Run => None,
        Remember::Plan => Some(format!("plan\u{1f}{plan_id}\u{1f}{tool}")),
        Remember::Call => {
            // serde_json's maps are sorted unless `preserve_order` is on: sort to be sure.
            let canonical = canonical(arguments).to_string();
            let digest = Sha256::digest(canonical.as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            Some(format!("call\u{1f}{tool}\u{1f}{hex}"))
        }
    }
}

fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut sorted = serde_json::Map::new();
            for k in keys {
                sorted.insert(k.clone(), canonical(&map[k]));
            }
            Value::Object(sorted)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

impl PlanStore {
    /// Records a standing approval of `tool` (scope `plan`: in every run of `plan_id`; `call`:
    /// with exactly `arguments`, in any plan). Scope `run` records nothing here (a step
    /// decision is that).
    pub async fn remember_approval(
        &self,
        scope: Remember,
        plan_id: &str,
        tool: &str,
        arguments: &Value,
        actor: &str,
    ) -> Result<()> {
        let Some(key) = key(scope, plan_id, tool, arguments) else {
            return Ok(());
        };
        let owner = (scope == Remember::Plan).then(|| plan_id.to_owned());
        sqlx::query(
            "INSERT INTO standing_approvals (key, scope, plan_id, tool, actor, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (key) DO UPDATE SET actor = $5, created_at = $6",
        )
        .bind(key)
        .bind(scope.as_str())
        .bind(owner)
        .bind(tool.to_owned())
        .bind(actor.to_owned())
        .bind(timestamp(now()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The standing approval of a call of `tool` with `arguments` in plan `plan_id`, if any:
    /// one for the exact call first, then one for the tool in this plan.
    pub async fn standing_approval(
        &self,
        plan_id: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<Option<StandingApproval>> {
        for scope in [Remember::Call, Remember::Plan] {
            let Some(key) = key(scope, plan_id, tool, arguments) else {
                continue;
            };
            let row =
                sqlx::query("SELECT actor, created_at FROM standing_approvals WHERE key = $1")
                    .bind(key)
                    .fetch_optional(&self.pool)
                    .await?;
            if let Some(row) = row {
                let at: String = row.try_get("created_at")?;
                return Ok(Some(StandingApproval {
                    scope,
                    tool: tool.to_owned(),
                    actor: row.try_get("actor")?,
                    created_at: parse_time(plan_id, &at).map_err(|e| match e {
                        StoreError::Corrupt { reason, .. } => StoreError::Corrupt {
                            id: format!("standing approval of {tool}"),
                            reason,
                        },
                        other => other,
                    })?,
                }));
            }
        }
        Ok(None)
    }
}
