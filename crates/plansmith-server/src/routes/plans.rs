//! Reading plans: listing them, one plan or one of its versions, its history; and deleting one.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use plansmith_core::Plan;
use plansmith_store::{ListFilter, Page, ReviewState, StoredPlan, VersionRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::extract::{ApiPath, ApiQuery, Caller};
use crate::AppState;
use crate::error::ApiError;
use crate::events::PlanBusEvent;

/// Largest page of `GET /v1/plans`.
const MAX_LIMIT: u32 = 500;

/// Loads a plan the caller may see (another owner's plan is `not_found`).
pub(crate) async fn load(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<StoredPlan, ApiError> {
    let stored = state.store.get(id).await?;
    if let Some(owner) = &caller.0
        && stored.plan.owner.as_deref() != Some(owner.as_str())
    {
        return Err(ApiError::plan_not_found(id));
    }
    Ok(stored)
}

/// Filters and paging of `GET /v1/plans`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ListQuery {
    /// Only this owner's plans (ignored under tokens: an owner lists only its own).
    owner: Option<String>,
    /// Only plans of this conversation.
    conversation_id: Option<String>,
    /// Only plans of this thread.
    thread_id: Option<String>,
    /// Only plans in this review state.
    state: Option<ReviewState>,
    /// Page size (default 50, clamped to 1..=500).
    limit: Option<u32>,
    /// Plans to skip (the cost grows with it; prefer `cursor`).
    #[serde(default)]
    offset: u32,
    /// Start after this place: the `next_cursor` of the previous page. Every page costs the
    /// same however deep, and plans updated meanwhile do not shift the pages. Not with `offset`.
    cursor: Option<String>,
    /// Count every matching plan for `total`. By default the count stops at 10,000 (the
    /// server's cap; `total_exact` is then `false`), so that a page costs the same however many
    /// plans are stored; an exact count reads them all.
    #[serde(default)]
    exact_total: bool,
}

/// Lists plans, most recently updated first.
#[utoipa::path(get, path = "/v1/plans", tag = "plans", params(ListQuery),
    responses((status = 200, description = "One page of plans", body = Page)))]
pub(super) async fn list_plans(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Page>, ApiError> {
    let filter = ListFilter {
        owner: caller.0.clone().or(query.owner),
        conversation_id: query.conversation_id,
        thread_id: query.thread_id,
        state: query.state,
        limit: Some(query.limit.unwrap_or(50).clamp(1, MAX_LIMIT)),
        offset: query.offset,
        cursor: query.cursor,
        total_cap: (!query.exact_total).then_some(state.config.list_total_cap),
    };
    Ok(Json(state.store.list(&filter).await?))
}

/// Query of `GET /v1/plans/{id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct VersionQuery {
    /// One version's document instead of the current plan.
    version: Option<u32>,
}

/// Answer of `GET /v1/plans/{id}`: the current plan, or one version's document.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum PlanOrVersion {
    /// Without `version`: the current plan with its review state.
    Current(Box<StoredPlan>),
    /// With `version`: that version's document.
    Version(Box<VersionDocument>),
}

/// One version's document.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct VersionDocument {
    /// The plan as it was at that version.
    plan: Plan,
    /// The version.
    version: u32,
}

/// Answer of `GET /v1/plans/{id}/history`.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct History {
    /// Every version, oldest first.
    versions: Vec<VersionRecord>,
}

/// The current plan with its review state, or one version's document.
#[utoipa::path(get, path = "/v1/plans/{id}", tag = "plans",
    params(("id" = String, Path, description = "The plan id"), VersionQuery),
    responses((status = 200, description = "The plan", body = PlanOrVersion)))]
pub(super) async fn get_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<VersionQuery>,
) -> Result<Json<PlanOrVersion>, ApiError> {
    let stored = load(&state, &caller, &id).await?;
    match query.version {
        None => {
            // While a run is in progress, `run` is not offered (starting one would be refused).
            let stored = state.store.with_run(stored).await?;
            let stored = state.service.estimated(stored).await?;
            Ok(Json(PlanOrVersion::Current(Box::new(stored))))
        }
        Some(version) if version == 0 || version > stored.version() => Err(ApiError::new(
            "not_found",
            format!("plan `{id}` has no version {version}"),
        )),
        Some(version) => {
            let plan = state.store.get_version(&id, version).await?;
            let document = VersionDocument { plan, version };
            Ok(Json(PlanOrVersion::Version(Box::new(document))))
        }
    }
}

/// Every version of a plan: trigger, actor, time, review state and JSON diff.
#[utoipa::path(get, path = "/v1/plans/{id}/history", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    responses((status = 200, description = "The versions, oldest first", body = History)))]
pub(super) async fn history(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<History>, ApiError> {
    load(&state, &caller, &id).await?;
    let versions = state.store.history(&id).await?;
    Ok(Json(History { versions }))
}

/// Deletes a plan and all its versions (subscribers get `plan_deleted`, then their stream ends).
#[utoipa::path(delete, path = "/v1/plans/{id}", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    responses((status = 204, description = "Deleted")))]
pub(super) async fn delete_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    load(&state, &caller, &id).await?;
    state.store.delete(&id).await?;
    state.bus.publish(PlanBusEvent {
        kind: "plan_deleted".to_owned(),
        plan_id: id,
        version: None,
        data: Value::Null,
    });
    Ok(StatusCode::NO_CONTENT)
}
