//! Plan templates (Spring AI Alibaba jmanus): [`plansmith_core::PlanTemplate`]s stored by name
//! and version in the `plan_templates` table (migration 3). Saving a template under a name
//! that exists adds the next version; older versions stay instantiable. Substitution and
//! re-validation against the catalog are `plansmith-core`'s
//! ([`plansmith_core::PlanTemplate::instantiate`]).

use chrono::{SubsecRound, Utc};
use plansmith_core::PlanTemplate;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::error::{Result, StoreError};
use crate::store::{PlanStore, parse_time, timestamp};

/// Attempts at taking the next version number when writers race.
const SAVE_ATTEMPTS: u32 = 16;

/// One template in [`PlanStore::list_templates`]: its newest version and how many there are.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateEntry {
    /// The newest version.
    pub latest: PlanTemplate,
    /// How many versions are stored.
    pub versions: u32,
}

impl PlanStore {
    /// Stores `template` as the next version of its name (1 for a new name) and returns it
    /// with that version and the time it was saved. Concurrent saves of one name each get
    /// their own version.
    pub async fn save_template(&self, template: PlanTemplate, actor: &str) -> Result<PlanTemplate> {
        let mut template = template;
        template.created_at = Utc::now().trunc_subsecs(6);
        for _ in 0..SAVE_ATTEMPTS {
            let row =
                sqlx::query("SELECT COALESCE(MAX(version), 0) FROM plan_templates WHERE name = $1")
                    .bind(template.name.clone())
                    .fetch_one(&self.pool)
                    .await?;
            let current: i64 = row.try_get(0)?;
            template.version = u32::try_from(current + 1).map_err(|_| StoreError::Corrupt {
                id: template.name.clone(),
                reason: format!("template version {current} out of range"),
            })?;
            let document = serde_json::to_string(&template)
                .map_err(|err| StoreError::BadEdit(format!("cannot encode the template: {err}")))?;
            let inserted = sqlx::query(
                "INSERT INTO plan_templates (name, version, description, document, actor, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (name, version) DO NOTHING",
            )
            .bind(template.name.clone())
            .bind(i64::from(template.version))
            .bind(template.description.clone())
            .bind(document)
            .bind(actor.to_owned())
            .bind(timestamp(template.created_at))
            .execute(&self.pool)
            .await?;
            if inserted.rows_affected() == 1 {
                return Ok(template);
            }
        }
        Err(StoreError::Conflict {
            id: template.name.clone(),
            expected: template.version,
            actual: template.version,
        })
    }

    /// A template: the given version, or the newest. [`StoreError::TemplateNotFound`] when
    /// there is none.
    pub async fn get_template(&self, name: &str, version: Option<u32>) -> Result<PlanTemplate> {
        let row = match version {
            Some(version) => {
                sqlx::query(
                    "SELECT name, version, document, created_at FROM plan_templates
                     WHERE name = $1 AND version = $2",
                )
                .bind(name.to_owned())
                .bind(i64::from(version))
                .fetch_optional(&self.pool)
                .await?
            }
            None => {
                sqlx::query(
                    "SELECT name, version, document, created_at FROM plan_templates
                     WHERE name = $1 ORDER BY version DESC LIMIT 1",
                )
                .bind(name.to_owned())
                .fetch_optional(&self.pool)
                .await?
            }
        };
        let row = row.ok_or_else(|| StoreError::TemplateNotFound(shown(name, version)))?;
        decode(&row)
    }

    /// Every template's newest version, by name.
    pub async fn list_templates(&self) -> Result<Vec<TemplateEntry>> {
        let rows = sqlx::query(
            "SELECT t.name, t.version, t.document, t.created_at,
                    (SELECT COUNT(*) FROM plan_templates c WHERE c.name = t.name) AS versions
             FROM plan_templates t
             WHERE t.version = (SELECT MAX(m.version) FROM plan_templates m WHERE m.name = t.name)
             ORDER BY t.name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let versions: i64 = row.try_get("versions")?;
                Ok(TemplateEntry {
                    latest: decode(row)?,
                    versions: u32::try_from(versions).unwrap_or(u32::MAX),
                })
            })
            .collect()
    }

    /// Deletes one version of a template, or all of them; returns how many were deleted.
    /// [`StoreError::TemplateNotFound`] when nothing matched.
    pub async fn delete_template(&self, name: &str, version: Option<u32>) -> Result<u64> {
        let deleted = match version {
            Some(version) => {
                sqlx::query("DELETE FROM plan_templates WHERE name = $1 AND version = $2")
                    .bind(name.to_owned())
                    .bind(i64::from(version))
                    .execute(&self.pool)
                    .await?
            }
            None => {
                sqlx::query("DELETE FROM plan_templates WHERE name = $1")
                    .bind(name.to_owned())
                    .execute(&self.pool)
                    .await?
            }
        };
        match deleted.rows_affected() {
            0 => Err(StoreError::TemplateNotFound(shown(name, version))),
            n => Ok(n),
        }
    }
}

fn shown(name: &str, version: Option<u32>) -> String {
    match version {
        Some(version) => format!("{name}@v{version}"),
        None => name.to_owned(),
    }
}

fn decode(row: &AnyRow) -> Result<PlanTemplate> {
    let name: String = row.try_get("name")?;
    let version: i64 = row.try_get("version")?;
    let document: String = row.try_get("document")?;
    let created_at: String = row.try_get("created_at")?;
    let mut template: PlanTemplate =
        serde_json::from_str(&document).map_err(|err| StoreError::Corrupt {
            id: format!("template {name}"),
            reason: err.to_string(),
        })?;
    template.name = name.clone();
    template.version = u32::try_from(version).map_err(|_| StoreError::Corrupt {
        id: format!("template {name}"),
        reason: format!("version {version} out of range"),
    })?;
    template.created_at = parse_time(&name, &created_at)?;
    Ok(template)
}
