//! Reviewing a plan: feedback (accept, reject, edits, answers, JSON Patch, step decisions) and
//! checking a structured edit without storing it.

use axum::Json;
use axum::extract::State;
use plansmith_core::{Diagnostic, Plan};
use plansmith_service::{Decided, Decision};
use plansmith_store::StoredPlan;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::events::replan_events;
use super::extract::{ApiJson, ApiPath, Caller};
use super::plans::load;
use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::events::publish_stored;

/// Body of `POST /v1/plans/{id}/feedback`. (Its schema is `ReviewFeedback`: core's replanning
/// `Feedback` already has the name `Feedback` in the document.)
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = ReviewFeedback)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Feedback {
    /// Accept the plan.
    Accept {
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// Reject it, with an optional reason.
    Reject {
        /// Why.
        #[serde(default)]
        text: Option<String>,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// Free-text feedback: replanned by the model.
    Edit {
        /// The feedback.
        text: String,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// A structured edit: an RFC 6902 JSON Patch on the plan document, re-validated.
    Patch {
        /// The operations.
        #[schema(value_type = Vec<Object>)]
        patch: Value,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// Answers to the plan's questions: replanned by the model.
    Answer {
        /// The answers.
        text: String,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// Answers to the plan's questions by id (`[{"question": "q1", "value": "Paris"}]`):
    /// replanned by the model, as the `answer` action.
    Answers {
        /// The answers; each names a question the plan asks.
        answers: Vec<plansmith_core::Answer>,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
    /// A decision about one step of a running plan: `approve` / `deny` a gated step, or
    /// `retry` / `skip` / `abort` after a failure under the `ask` policy.
    Step {
        /// The step id.
        step: String,
        /// `approve`, `deny`, `retry`, `skip` or `abort`.
        verdict: plansmith_store::StepVerdict,
        /// A note for the log.
        #[serde(default)]
        note: String,
        /// How far an approval reaches: `run` (this step in this run, the default), `plan`
        /// (this tool in every run of this plan) or `call` (this tool with exactly these
        /// arguments, in any plan).
        #[serde(default)]
        remember: plansmith_store::Remember,
        /// Apply only if the plan is still at this version, the one the reviewer read
        /// (else `conflict`).
        #[serde(default)]
        expected_version: Option<u32>,
    },
}

impl Feedback {
    /// The decision, and the version the reviewer read.
    fn into_decision(self) -> (Decision, Option<u32>) {
        match self {
            Feedback::Accept { expected_version } => (Decision::Accept, expected_version),
            Feedback::Reject {
                text,
                expected_version,
            } => (Decision::Reject(text), expected_version),
            Feedback::Edit {
                text,
                expected_version,
            } => (Decision::Edit(text), expected_version),
            Feedback::Patch {
                patch,
                expected_version,
            } => (Decision::Patch(patch), expected_version),
            Feedback::Answer {
                text,
                expected_version,
            } => (Decision::Answer(text), expected_version),
            Feedback::Answers {
                answers,
                expected_version,
            } => (Decision::Answers(answers), expected_version),
            Feedback::Step {
                step,
                verdict,
                note,
                remember,
                expected_version,
            } => (
                Decision::Step {
                    step,
                    verdict,
                    note,
                    remember,
                },
                expected_version,
            ),
        }
    }
}

/// Answer of the feedback and step routes: the stored plan and the warnings of a patch.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Updated {
    #[serde(flatten)]
    pub(super) stored: StoredPlan,
    /// The engine's warnings about a structured edit (empty otherwise).
    pub(super) diagnostics: Vec<Diagnostic>,
    /// For the `step` action: the decision as recorded, and whether the step was waiting for
    /// it (`applies: now`) or the run applies it when it reaches the step (`when_reached`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) step_decision: Option<plansmith_store::StepDecided>,
}

/// Review feedback: accept, reject, free-text edit (replanned), structured edit (an RFC 6902
/// JSON Patch, re-validated against the catalog), or answers to the plan's questions.
#[utoipa::path(post, path = "/v1/plans/{id}/feedback", tag = "plans",
    params(("id" = String, Path, description = "The plan id")), request_body = Feedback,
    responses(
        (status = 200, description = "The plan after the feedback", body = Updated),
        (status = 409, description = "`conflict`: the plan is no longer at `expected_version`, the review state does not allow this action, or a step decision that no run would read (no run in progress, or a step the run is done with)", body = ErrorBody),
        (status = 422, description = "`invalid_plan` (the edit broke the plan; `details` is the diagnostics list) or `planning_failed`", body = ErrorBody),
        (status = 502, description = "`model_error`: the replan's model call failed", body = ErrorBody),
    ))]
pub(super) async fn feedback(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<Feedback>,
) -> Result<Json<Updated>, ApiError> {
    load(&state, &caller, &id).await?;
    let (decision, expected_version) = body.into_decision();
    let mut on_event = replan_events(&state, &id);
    let decided = state
        .service
        .decide(
            &id,
            decision,
            expected_version,
            &caller.actor(),
            Some(&mut on_event),
        )
        .await?;
    let Decided {
        stored,
        diagnostics,
        step_decision,
        ..
    } = decided;
    publish_stored(&state.bus, "plan_updated", &stored);
    Ok(Json(Updated {
        stored,
        diagnostics,
        step_decision,
    }))
}

/// Body of `POST /v1/plans/{id}/check`: a structured edit to check.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The operations, as for the `patch` feedback action (RFC 6902 JSON Patch).
    #[schema(value_type = Vec<Object>)]
    patch: Value,
}

/// Answer of `POST /v1/plans/{id}/check`.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Checked {
    /// True when no finding is an error: the `patch` feedback action would store the edit.
    valid: bool,
    /// The plan as the edit would make it, validated (argument defaults filled in, etc.).
    plan: Plan,
    /// Every finding of the engine's validation, errors included.
    diagnostics: Vec<Diagnostic>,
}

/// Checks a structured edit without storing it: the engine's diagnostics of the plan as the
/// `patch` feedback action would make it. The review page calls it while an argument is
/// typed. Refused like the edit itself when the plan may not be edited.
#[utoipa::path(post, path = "/v1/plans/{id}/check", tag = "plans",
    params(("id" = String, Path, description = "The plan id")), request_body = Check,
    responses(
        (status = 200, description = "The edit's findings; nothing was stored", body = Checked),
        (status = 409, description = "`conflict`: the review state does not allow edits", body = ErrorBody),
    ))]
pub(super) async fn check_edit(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<Check>,
) -> Result<Json<Checked>, ApiError> {
    load(&state, &caller, &id).await?;
    let (plan, diagnostics) = state.service.check(&id, &body.patch).await?;
    Ok(Json(Checked {
        valid: !diagnostics.iter().any(Diagnostic::is_error),
        plan,
        diagnostics,
    }))
}
