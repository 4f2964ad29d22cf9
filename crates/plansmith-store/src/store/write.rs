//! The write path: new plans as version 1 (alone or by group commit) and every later version
//! written by compare-and-swap, with its diff in the plan's history.

use chrono::{DateTime, SubsecRound, Utc};
use plansmith_core::Plan;
use serde_json::value::{RawValue, to_raw_value};
use sqlx::Row;

use super::sql::{bad_json, from_json, parse_time, timestamp, to_json};
use super::{PlanStore, StoredPlan, Submitted, Trigger};
use crate::error::{Result, StoreError};
use crate::state::{Review, ReviewState};

/// A change to write as the next version (see [`PlanStore::write`]).
#[derive(Debug, Clone)]
pub struct Change {
    /// The version the change is based on: the write fails with [`StoreError::Conflict`] unless
    /// it is still current.
    pub expected_version: u32,
    /// The new document (its id must be the plan's; version fields are set by the store).
    pub plan: Plan,
    /// The new review state.
    pub state: ReviewState,
    /// The new review settings and progress.
    pub review: Review,
    /// Why.
    pub trigger: Trigger,
    /// Who.
    pub actor: String,
}

impl PlanStore {
    /// Stores a new plan as version 1 (trigger `created`). Errors with
    /// [`StoreError::AlreadyExists`] when the id is taken (OpenManus: "Plan already exists").
    pub async fn create(
        &self,
        plan: Plan,
        state: ReviewState,
        review: Review,
        actor: &str,
    ) -> Result<StoredPlan> {
        let submitted = self.create_encoded(plan, state, review, actor).await?;
        Ok(submitted.stored)
    }

    /// [`PlanStore::create`], answered with the JSON written for the plan and its review.
    pub(crate) async fn create_encoded(
        &self,
        plan: Plan,
        state: ReviewState,
        review: Review,
        actor: &str,
    ) -> Result<Submitted> {
        let mut plan = plan;
        if plan.id.trim().is_empty() {
            return Err(StoreError::BadEdit("a plan needs a non-empty id".into()));
        }
        plan.version = 1;
        plan.parent_version = None;
        let now = Utc::now().trunc_subsecs(6);
        let row = NewPlan {
            document: to_raw_value(&plan).map_err(bad_json)?,
            review: to_raw_value(&review).map_err(bad_json)?,
            plan,
            state,
            actor: actor.to_owned(),
            at: now,
        };
        let (row, stored) = self.insert_new(row).await?;
        if !stored {
            return Err(StoreError::AlreadyExists(row.plan.id));
        }
        Ok(Submitted {
            stored: StoredPlan {
                plan: row.plan,
                state,
                review,
                created_at: now,
                updated_at: now,
                run_active: false,
                estimate: None,
            },
            document: row.document,
            review: row.review,
        })
    }

    /// Writes a new plan's rows: through the group writer when there is one (see
    /// [`PlanStore::with_group_commit`]), else in a transaction of its own. Gives the row back
    /// with whether it was stored (`false`: the id is taken).
    async fn insert_new(&self, row: NewPlan) -> Result<(NewPlan, bool)> {
        let row = match &self.writer {
            Some(writer) => match writer.insert(row).await {
                Ok(answer) => return answer,
                // The writer's runtime is gone: write it here.
                Err(row) => row,
            },
            None => row,
        };
        let mut tx = self.pool.begin().await?;
        let stored = insert_new(&mut tx, &row).await?;
        tx.commit().await?;
        Ok((row, stored))
    }

    /// Writes `change` as the next version, if `change.expected_version` is still current
    /// (compare-and-swap): a stale writer gets [`StoreError::Conflict`], never a lost update.
    pub async fn write(&self, change: Change) -> Result<StoredPlan> {
        let Change {
            expected_version,
            mut plan,
            state,
            review,
            trigger,
            actor,
        } = change;
        let id = plan.id.clone();
        let parent = self.version_document(&id, expected_version).await;
        let parent_document = match parent {
            Ok(parent) => parent,
            Err(StoreError::NotFound(_)) => {
                // Either the plan is gone or the expected version never existed.
                let current = self.get(&id).await?;
                return Err(StoreError::Conflict {
                    id,
                    expected: expected_version,
                    actual: current.version(),
                });
            }
            Err(err) => return Err(err),
        };
        let parent: Plan = from_json(&id, &parent_document)?;
        let new_version = expected_version.saturating_add(1);
        plan.version = new_version;
        plan.parent_version = Some(expected_version);
        let now = Utc::now().trunc_subsecs(6);
        let before = serde_json::to_value(&parent).map_err(bad_json)?;
        let after = serde_json::to_value(&plan).map_err(bad_json)?;
        let diff = serde_json::to_string(&json_patch::diff(&before, &after)).map_err(bad_json)?;
        let document = to_json(&plan)?;
        let review_json = serde_json::to_string(&review).map_err(bad_json)?;
        let mut tx = self.pool.begin().await?;
        // The UPDATE comes first: on SQLite it takes the write lock before anything is read in
        // this transaction, so a busy writer waits instead of failing with a stale snapshot.
        // `RETURNING` answers what the answer needs in the same round trip.
        let updated = sqlx::query(
            "UPDATE plans SET version = $1, state = $2, owner = $3, conversation_id = $4,
                              thread_id = $5, title = $6, document = $7, review = $8,
                              updated_at = $9
             WHERE id = $10 AND version = $11
             RETURNING created_at",
        )
        .bind(i64::from(new_version))
        .bind(state.as_str())
        .bind(plan.owner.clone())
        .bind(plan.conversation_id.clone())
        .bind(plan.thread_id.clone())
        .bind(plan.title.clone())
        .bind(document.clone())
        .bind(review_json)
        .bind(timestamp(now))
        .bind(id.clone())
        .bind(i64::from(expected_version))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(updated) = updated else {
            tx.rollback().await?;
            let current = self.get(&id).await?;
            return Err(StoreError::Conflict {
                id,
                expected: expected_version,
                actual: current.version(),
            });
        };
        let created_at = parse_time(&id, &updated.try_get::<String, _>(0)?)?;
        // The parent stops being current: it keeps its document from now on, and the new
        // version's is the plan's (a row written before documents were stored once has its own
        // already, and keeps it).
        sqlx::query(
            "UPDATE plan_versions SET document = $1
             WHERE plan_id = $2 AND version = $3 AND document = ''",
        )
        .bind(parent_document)
        .bind(id.clone())
        .bind(i64::from(expected_version))
        .execute(&mut *tx)
        .await?;
        insert_version(&mut tx, &plan, trigger, &actor, now, state, &diff).await?;
        tx.commit().await?;
        Ok(StoredPlan {
            plan,
            state,
            review,
            created_at,
            updated_at: now,
            run_active: false,
            estimate: None,
        })
    }
}

/// A new plan's rows, encoded (by the caller, so the group writer only runs SQL).
#[derive(Debug)]
pub(crate) struct NewPlan {
    pub(crate) plan: Plan,
    pub(crate) state: ReviewState,
    /// The review settings, as JSON (what [`Submitted`] answers with).
    pub(crate) review: Box<RawValue>,
    /// The plan, as JSON (what [`Submitted`] answers with).
    pub(crate) document: Box<RawValue>,
    pub(crate) actor: String,
    pub(crate) at: DateTime<Utc>,
}

/// A new plan's row: version 1, parameters `$1`–`$8` as [`bind_plan_row`] binds them and `$9`
/// its time (created and updated); a taken id writes nothing. The group writer's SQLite
/// connection (rusqlite) runs the same text, binding by position.
pub(crate) const INSERT_NEW_PLAN: &str =
    "INSERT INTO plans (id, version, state, owner, conversation_id, thread_id, title,
                        document, review, created_at, updated_at)
     VALUES ($1, 1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
     ON CONFLICT (id) DO NOTHING";

/// A new plan's version 1: plan id, trigger, actor, time, state. Its diff and document are
/// stored empty: the diff is read back as an `add` of the document (`decode_version`), and the
/// document is the plan's while it is current ([`VERSION_DOCUMENT`]).
///
/// [`VERSION_DOCUMENT`]: super::read::VERSION_DOCUMENT
pub(crate) const INSERT_FIRST_VERSION: &str =
    "INSERT INTO plan_versions (plan_id, version, parent_version, trigger_kind, actor,
                                created_at, state, diff, document)
     VALUES ($1, 1, NULL, $2, $3, $4, $5, '', '')";

/// Inserts the plan and its version 1 in `tx`; `false` (and nothing written) when the id is
/// taken.
pub(crate) async fn insert_new(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    row: &NewPlan,
) -> Result<bool> {
    let at = timestamp(row.at);
    let written = bind_plan_row(sqlx::query(INSERT_NEW_PLAN), row)
        .bind(at.clone())
        .execute(&mut **tx)
        .await?
        .rows_affected();
    if written == 0 {
        return Ok(false);
    }
    sqlx::query(INSERT_FIRST_VERSION)
        .bind(row.plan.id.clone())
        .bind(Trigger::Created.as_str())
        .bind(row.actor.clone())
        .bind(at)
        .bind(row.state.as_str())
        .execute(&mut **tx)
        .await?;
    Ok(true)
}

/// A query with an `INSERT`'s parameters bound so far.
pub(crate) type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>;

/// Binds a new plan's `plans` columns from `id` to `review` (id, state, owner, conversation,
/// thread, title, document, review), in that order.
pub(crate) fn bind_plan_row<'q>(query: AnyQuery<'q>, row: &NewPlan) -> AnyQuery<'q> {
    let plan = &row.plan;
    query
        .bind(plan.id.clone())
        .bind(row.state.as_str())
        .bind(plan.owner.clone())
        .bind(plan.conversation_id.clone())
        .bind(plan.thread_id.clone())
        .bind(plan.title.clone())
        .bind(row.document.get().to_owned())
        .bind(row.review.get().to_owned())
}

/// Inserts `plan`'s new (current) version; its document is the plan's (stored empty, see
/// [`VERSION_DOCUMENT`]).
///
/// [`VERSION_DOCUMENT`]: super::read::VERSION_DOCUMENT
async fn insert_version(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    plan: &Plan,
    trigger: Trigger,
    actor: &str,
    at: DateTime<Utc>,
    state: ReviewState,
    diff: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO plan_versions (plan_id, version, parent_version, trigger_kind, actor,
                                    created_at, state, diff, document)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '')",
    )
    .bind(plan.id.clone())
    .bind(i64::from(plan.version))
    .bind(plan.parent_version.map(i64::from))
    .bind(trigger.as_str())
    .bind(actor.to_owned())
    .bind(timestamp(at))
    .bind(state.as_str())
    .bind(diff.to_owned())
    .execute(&mut **tx)
    .await?;
    Ok(())
}
