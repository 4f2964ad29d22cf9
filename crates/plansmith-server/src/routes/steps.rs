//! Marking a step of a plan: its status, notes and result.

use axum::Json;
use axum::extract::State;
use plansmith_core::StepStatus;
use plansmith_store::store::parse_status;
use plansmith_store::{Change, Trigger};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::extract::{ApiJson, ApiPath, Caller};
use super::feedback::Updated;
use super::plans::load;
use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::events::PlanBusEvent;

/// Body of `PATCH /v1/plans/{id}/steps/{step}` (step: 0-based index or step id).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepUpdate {
    /// New status: `not_started`, `in_progress`, `completed`, `blocked`, `failed`, `skipped`.
    #[serde(default)]
    #[schema(value_type = Option<StepStatus>)]
    pub status: Option<String>,
    /// New notes.
    #[serde(default)]
    pub notes: Option<String>,
    /// The step's result.
    #[serde(default)]
    pub result: Option<Value>,
    /// Write only if the plan is still at this version (else `conflict`).
    #[serde(default)]
    pub expected_version: Option<u32>,
}

/// Marks a step: status, notes, result (a new version, trigger `step_update`; subscribers get
/// `step_status`). An update that changes nothing answers the plan as it is, with no new
/// version and no event, so a client may repeat it; an empty one is a `bad_request`.
#[utoipa::path(patch, path = "/v1/plans/{id}/steps/{step}", tag = "plans",
    params(("id" = String, Path, description = "The plan id"),
           ("step" = String, Path, description = "0-based step index or step id")),
    request_body = StepUpdate,
    responses(
        (status = 200, description = "The plan after the change", body = Updated),
        (status = 409, description = "`conflict`: `expected_version` is stale", body = ErrorBody),
    ))]
pub(super) async fn update_step(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, step)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<StepUpdate>,
) -> Result<Json<Updated>, ApiError> {
    if body.status.is_none() && body.notes.is_none() && body.result.is_none() {
        return Err(ApiError::new(
            "bad_request",
            "nothing to update: give the step's `status`, `notes` or `result`",
        ));
    }
    let current = load(&state, &caller, &id).await?;
    let status: Option<StepStatus> = body.status.as_deref().map(parse_status).transpose()?;
    let mut plan = current.plan.clone();
    let index = match step.parse::<usize>() {
        Ok(i) if i < plan.steps.len() => Some(i),
        Ok(_) => None,
        Err(_) => plan.steps.iter().position(|s| s.id == step),
    };
    // A step the plan does not have is a missing resource, as a missing plan is.
    let Some(target) = index.and_then(|i| plan.steps.get_mut(i)) else {
        return Err(ApiError::new(
            "not_found",
            format!(
                "plan `{id}` has no step {step}: valid indices range from 0 to {} (or a step id)",
                plan.steps.len().saturating_sub(1)
            ),
        ));
    };
    if let Some(status) = status {
        target.status = status;
    }
    if let Some(notes) = &body.notes {
        target.notes = notes.clone();
    }
    if let Some(result) = &body.result {
        target.result = Some(result.clone());
    }
    // What the step already says (a worker repeating its report after a lost answer) makes no
    // new version and no event; a stale `expected_version` is still a conflict, below.
    let unchanged = index.and_then(|i| current.plan.steps.get(i)) == Some(&*target);
    if unchanged
        && body
            .expected_version
            .is_none_or(|expected| expected == current.version())
    {
        return Ok(Json(Updated {
            stored: current,
            diagnostics: Vec::new(),
            step_decision: None,
        }));
    }
    let event = json!({
        "step": target.id, "status": target.status, "notes": target.notes, "result": target.result,
    });
    let stored = state
        .store
        .write(Change {
            expected_version: body.expected_version.unwrap_or(current.version()),
            plan,
            state: current.state,
            review: current.review,
            trigger: Trigger::StepUpdate,
            actor: caller.actor(),
        })
        .await?;
    state.bus.publish(PlanBusEvent {
        kind: "step_status".to_owned(),
        plan_id: id,
        version: Some(stored.version()),
        data: event,
    });
    Ok(Json(Updated {
        stored,
        diagnostics: Vec::new(),
        step_decision: None,
    }))
}
