//! Reads: a plan, a version, the history, a conversation's plans, and the list with its
//! filters, pages and cursors.

use chrono::{DateTime, Utc};
use plansmith_core::Plan;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::sql::{from_json, parse_time, timestamp, to_u32};
use super::{PlanStore, StoredPlan, VersionRecord};
use crate::error::{Result, StoreError};
use crate::state::{Review, ReviewState};

/// The cap on counted plans that the service, the MCP server and the CLI use for list totals
/// ([`ListFilter::total_cap`]) unless asked for an exact count.
pub const DEFAULT_TOTAL_CAP: u64 = 10_000;

/// Filters and paging for [`PlanStore::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only plans of this owner.
    pub owner: Option<String>,
    /// Only plans of this conversation.
    pub conversation_id: Option<String>,
    /// Only plans of this thread.
    pub thread_id: Option<String>,
    /// Only plans in this review state.
    pub state: Option<ReviewState>,
    /// Page size (default 50, at most 1000).
    pub limit: Option<u32>,
    /// Rows to skip. Costs time in proportion to the offset, and a plan updated while paging
    /// shifts the pages under it; prefer [`ListFilter::cursor`].
    pub offset: u32,
    /// Start after this position: a previous page's [`Page::next_cursor`]. Each page costs the
    /// same however deep it is. A plan updated while paging moves to the front, ahead of the
    /// pages already read, and the other plans are neither skipped nor shown twice. Only with
    /// `offset` 0.
    pub cursor: Option<String>,
    /// Count at most this many matching plans for [`Page::total`] (`None`: count them all). A
    /// full count reads every matching index entry, so its cost grows with the store (25 ms per
    /// page at a million plans on SQLite); a capped one stops at the cap.
    pub total_cap: Option<u64>,
}

/// One page of [`PlanStore::list`], most recently updated first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Page {
    /// The plans of this page.
    pub plans: Vec<StoredPlan>,
    /// How many plans match the filter in total, or the cap of [`ListFilter::total_cap`] when
    /// more do (then [`Page::total_exact`] is `false`).
    pub total: u64,
    /// Whether [`Page::total`] is the exact count (`false`: at least that many match).
    pub total_exact: bool,
    /// Offset of the next page, if there is one (not given when the page was asked for by
    /// cursor).
    pub next_offset: Option<u32>,
    /// Position of the next page, if there is one: pass it as the next request's cursor. Opaque.
    pub next_cursor: Option<String>,
}

/// A version's document in a query over `plan_versions v LEFT JOIN plans p ON p.id =
/// v.plan_id AND p.version = v.version`. The current version's document is stored once, in
/// `plans.document`, and its `plan_versions.document` is empty: a new plan wrote every document
/// twice, a quarter of its bytes on disk. [`PlanStore::write`] fills the old version's document
/// in when it stops being current. Rows written before this keep theirs, which is read first.
/// `NULL` when the document is empty and the version is not current (a corrupt row).
pub(super) const VERSION_DOCUMENT: &str =
    "CASE WHEN v.document <> '' THEN v.document ELSE p.document END";

/// Why a version whose document [`VERSION_DOCUMENT`] reads as `NULL` is corrupt.
fn lost_document(version: u32) -> String {
    format!("version {version} keeps no document and is not the plan's current version")
}

const PLAN_COLUMNS: &str = "id, version, state, document, review, created_at, updated_at";

impl PlanStore {
    /// The current version of a plan; [`StoreError::NotFound`] if there is none.
    pub async fn get(&self, id: &str) -> Result<StoredPlan> {
        let sql = format!("SELECT {PLAN_COLUMNS} FROM plans WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_owned())
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        decode_plan(&row)
    }

    /// One version of a plan's document.
    pub async fn get_version(&self, id: &str, version: u32) -> Result<Plan> {
        let document = self.version_document(id, version).await?;
        from_json(id, &document)
    }

    /// The text of one version's document: its own, or the plan's for the current version
    /// (stored once, in `plans`: see [`VERSION_DOCUMENT`]).
    pub(super) async fn version_document(&self, id: &str, version: u32) -> Result<String> {
        let sql = format!(
            "SELECT {VERSION_DOCUMENT} AS document
             FROM plan_versions v LEFT JOIN plans p ON p.id = v.plan_id AND p.version = v.version
             WHERE v.plan_id = $1 AND v.version = $2"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_owned())
            .bind(i64::from(version))
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("{id}@v{version}")))?;
        row.try_get::<Option<String>, _>("document")?
            .ok_or_else(|| StoreError::Corrupt {
                id: id.to_owned(),
                reason: lost_document(version),
            })
    }

    /// OpenManus `list`, with filters and paging; most recently updated first (ties: the
    /// newest id first).
    pub async fn list(&self, filter: &ListFilter) -> Result<Page> {
        let mut conditions = Vec::new();
        let mut binds: Vec<String> = Vec::new();
        let mut push = |column: &str, value: &str| {
            binds.push(value.to_owned());
            conditions.push(format!("{column} = ${}", binds.len()));
        };
        if let Some(owner) = &filter.owner {
            push("owner", owner);
        }
        if let Some(conversation) = &filter.conversation_id {
            push("conversation_id", conversation);
        }
        if let Some(thread) = &filter.thread_id {
            push("thread_id", thread);
        }
        if let Some(state) = filter.state {
            push("state", state.as_str());
        }
        let where_clause = if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        };
        // Capped: one row past the cap tells that more match, without reading them all.
        let count_sql = match filter.total_cap {
            None => format!("SELECT COUNT(*) FROM plans{where_clause}"),
            Some(cap) => format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM plans{where_clause} LIMIT {}) AS capped",
                cap.saturating_add(1).min(i64::MAX as u64)
            ),
        };
        let mut count = sqlx::query(AssertSqlSafe(count_sql));
        for value in &binds {
            count = count.bind(value.clone());
        }
        let counted: i64 = count.fetch_one(&self.pool).await?.try_get(0)?;
        let counted = u64::try_from(counted).unwrap_or(0);
        let (total, total_exact) = match filter.total_cap {
            Some(cap) if counted > cap => (cap, false),
            _ => (counted, true),
        };
        let limit = filter.limit.unwrap_or(50).clamp(1, 1000);
        let after = match &filter.cursor {
            Some(_) if filter.offset > 0 => {
                return Err(StoreError::BadCursor(
                    "give a cursor or an offset, not both".to_owned(),
                ));
            }
            Some(cursor) => Some(Cursor::decode(cursor)?),
            None => None,
        };
        // The page in index order (`updated_at DESC, id DESC`), one row more than asked for to
        // know whether another page follows.
        let mut sql = format!("SELECT {PLAN_COLUMNS} FROM plans{where_clause}");
        if after.is_some() {
            sql.push_str(if conditions.is_empty() {
                " WHERE"
            } else {
                " AND"
            });
            sql.push_str(&format!(
                " (updated_at, id) < (${}, ${})",
                binds.len() + 1,
                binds.len() + 2
            ));
        }
        sql.push_str(&format!(
            " ORDER BY updated_at DESC, id DESC LIMIT {} OFFSET {}",
            limit + 1,
            filter.offset
        ));
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for value in &binds {
            query = query.bind(value.clone());
        }
        if let Some(after) = after {
            query = query.bind(after.updated_at).bind(after.id);
        }
        let mut rows = query.fetch_all(&self.pool).await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match rows.last() {
            Some(last) if more => Some(
                Cursor {
                    updated_at: last.try_get("updated_at")?,
                    id: last.try_get("id")?,
                }
                .encode(),
            ),
            _ => None,
        };
        let plans = rows.iter().map(decode_plan).collect::<Result<Vec<_>>>()?;
        let end = u64::from(filter.offset) + plans.len() as u64;
        let next_offset = (more && filter.cursor.is_none())
            .then(|| u32::try_from(end).ok())
            .flatten();
        Ok(Page {
            plans,
            total,
            total_exact,
            next_offset,
            next_cursor,
        })
    }

    /// The plans of a conversation in the order they were created (oldest first), at most the
    /// `limit` newest: the earlier turns for conversation memory
    /// ([`plansmith_core::Turn::from_plan`]).
    pub async fn conversation_plans(
        &self,
        conversation_id: &str,
        limit: u32,
    ) -> Result<Vec<StoredPlan>> {
        let sql = format!(
            "SELECT {PLAN_COLUMNS} FROM plans WHERE conversation_id = $1
             ORDER BY created_at DESC, id DESC LIMIT {}",
            limit.clamp(1, 1000)
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(conversation_id.to_owned())
            .fetch_all(&self.pool)
            .await?;
        let mut plans = rows.iter().map(decode_plan).collect::<Result<Vec<_>>>()?;
        plans.reverse();
        Ok(plans)
    }

    /// Every version of a plan, oldest first.
    pub async fn history(&self, id: &str) -> Result<Vec<VersionRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT v.plan_id, v.version, v.parent_version, v.trigger_kind, v.actor,
                        v.created_at, v.state, v.diff,
                        CASE WHEN v.diff = '' THEN {VERSION_DOCUMENT} END AS added
                 FROM plan_versions v
                 LEFT JOIN plans p ON p.id = v.plan_id AND p.version = v.version
                 WHERE v.plan_id = $1 ORDER BY v.version"
        )))
        .bind(id.to_owned())
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() {
            return Err(StoreError::NotFound(id.to_owned()));
        }
        rows.iter().map(|row| decode_version(id, row)).collect()
    }
}

/// A position in the plan list: the last plan of a page, by the list's order
/// (`updated_at DESC, id DESC`). Written as `<updated_at>_<id>`: the stored timestamp (RFC 3339,
/// no `_` in it) and the id, which may hold anything.
#[derive(Debug, PartialEq, Eq)]
struct Cursor {
    updated_at: String,
    id: String,
}

impl Cursor {
    fn encode(&self) -> String {
        format!("{}_{}", self.updated_at, self.id)
    }

    fn decode(text: &str) -> Result<Cursor> {
        let bad = || {
            StoreError::BadCursor(format!(
                "`{}` is not a list cursor; pass a page's `next_cursor` as it is",
                text.chars().take(80).collect::<String>()
            ))
        };
        let (updated_at, id) = text.split_once('_').ok_or_else(bad)?;
        // The store compares times as text, so only the one form it writes (`timestamp`) is a
        // place in its order.
        let at = DateTime::parse_from_rfc3339(updated_at).map_err(|_| bad())?;
        if timestamp(at.with_timezone(&Utc)) != updated_at || id.is_empty() {
            return Err(bad());
        }
        Ok(Cursor {
            updated_at: updated_at.to_owned(),
            id: id.to_owned(),
        })
    }
}

fn decode_plan(row: &AnyRow) -> Result<StoredPlan> {
    let id: String = row.try_get("id")?;
    let version = to_u32(&id, row.try_get("version")?)?;
    let state_text: String = row.try_get("state")?;
    let state = state_text
        .parse::<ReviewState>()
        .map_err(|reason| StoreError::Corrupt {
            id: id.clone(),
            reason,
        })?;
    let mut plan: Plan = from_json(&id, &row.try_get::<String, _>("document")?)?;
    plan.version = version;
    let review: Review = from_json(&id, &row.try_get::<String, _>("review")?)?;
    let created_at = parse_time(&id, &row.try_get::<String, _>("created_at")?)?;
    let updated_at = parse_time(&id, &row.try_get::<String, _>("updated_at")?)?;
    Ok(StoredPlan {
        plan,
        state,
        review,
        created_at,
        updated_at,
        run_active: false,
        estimate: None,
    })
}

fn decode_version(id: &str, row: &AnyRow) -> Result<VersionRecord> {
    let parent: Option<i64> = row.try_get("parent_version")?;
    let trigger_text: String = row.try_get("trigger_kind")?;
    let state_text: String = row.try_get("state")?;
    let corrupt = |reason: String| StoreError::Corrupt {
        id: id.to_owned(),
        reason,
    };
    let version = to_u32(id, row.try_get("version")?)?;
    Ok(VersionRecord {
        plan_id: row.try_get("plan_id")?,
        version,
        parent_version: parent.map(|p| to_u32(id, p)).transpose()?,
        trigger: trigger_text.parse().map_err(corrupt)?,
        actor: row.try_get("actor")?,
        created_at: parse_time(id, &row.try_get::<String, _>("created_at")?)?,
        state: state_text.parse().map_err(corrupt)?,
        diff: match row.try_get::<Option<String>, _>("added")? {
            // Version 1 of a created plan: its diff adds the whole document (`insert_new`).
            Some(document) => {
                let document: Value = from_json(id, &document)?;
                serde_json::json!([{"op": "add", "path": "", "value": document}])
            }
            None => match row.try_get::<String, _>("diff")? {
                // Empty, and no document to read back as its `add` (see `VERSION_DOCUMENT`).
                diff if diff.is_empty() => {
                    return Err(corrupt(lost_document(version)));
                }
                diff => from_json(id, &diff)?,
            },
        },
    })
}
