//! Human in the loop: the review state machine, stored with the plan so pending
//! reviews and questions survive restarts.
//!
//! ```text
//! submit ─┬─ questions ──────────▶ needs_input ── answer ──▶ (replan) ─┐
//!         ├─ auto_accept ────────▶ accepted (not a plan that lost steps) │
//!         └─────────────────────▶ awaiting_review ◀───────────────────┘
//!                                   │ accept ──────────────▶ accepted
//!                                   │ edit (free text) ────▶ (replan) ─▶ awaiting_review | needs_input
//!                                   │ edit (JSON Patch) ───▶ validated ─▶ awaiting_review
//!                                   │ reject ──────────────▶ rejected ("plan rejected by user")
//!                                   └ max_iterations reached: accepted as is | stopped (policy)
//! ```
//!
//! The store keeps the state and writes its transitions; the replans themselves (free-text edit,
//! answer) are made by `plansmith-service`, which writes their plans here. Recurring schedules
//! wait for an explicit confirmation (ValueCell's gate, confirmations in English and Chinese: see
//! [`is_confirmation`]).

use std::str::FromStr;

use plansmith_core::validate::validate;
use plansmith_core::{
    Catalog, Code, Diagnostic, Outcome, OutcomeStatus, Plan, PlanRequest, Question, StepStatus,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::store::{Change, PlanStore, StoredPlan, Submitted, Trigger};

/// The rejection reason when the person gave no text (Spring AI Alibaba).
pub const REJECTED_WITHOUT_TEXT: &str = "plan rejected by user";

/// Where a plan is in the review loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReviewState {
    /// Stored, not yet submitted for review (lifecycle `create` without review).
    Draft,
    /// Waiting for a person to accept, edit or reject it.
    AwaitingReview,
    /// Waiting for answers to its questions.
    NeedsInput,
    /// Accepted: ready to run.
    Accepted,
    /// Rejected by a person.
    Rejected,
    /// Stopped: the review loop hit `max_iterations` under the `stop` policy.
    Stopped,
}

impl ReviewState {
    /// All states.
    pub const ALL: [ReviewState; 6] = [
        ReviewState::Draft,
        ReviewState::AwaitingReview,
        ReviewState::NeedsInput,
        ReviewState::Accepted,
        ReviewState::Rejected,
        ReviewState::Stopped,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewState::Draft => "draft",
            ReviewState::AwaitingReview => "awaiting_review",
            ReviewState::NeedsInput => "needs_input",
            ReviewState::Accepted => "accepted",
            ReviewState::Rejected => "rejected",
            ReviewState::Stopped => "stopped",
        }
    }

    /// True when no more review is expected (accepted, rejected, stopped).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            ReviewState::Accepted | ReviewState::Rejected | ReviewState::Stopped
        )
    }

    /// What a plan in this state may have done to it. The one place the rules live: the store
    /// refuses everything else ([`StoreError::InvalidState`]), the executor refuses a run, and
    /// every stored plan carries the list (`actions` in its JSON) so a client offers exactly
    /// these.
    pub fn actions(self) -> &'static [ReviewAction] {
        use ReviewAction::{Accept, Answer, Edit, Patch, Reject, Run};
        match self {
            // A draft was stored without review: it may be reviewed, or run as it is.
            ReviewState::Draft => &[Accept, Reject, Edit, Patch, Run],
            ReviewState::AwaitingReview => &[Accept, Reject, Edit, Patch],
            // Answering replans; a structured edit may fill in what the questions ask.
            ReviewState::NeedsInput => &[Reject, Answer, Patch],
            // Run again after a run has ended: a new run starts from the document.
            ReviewState::Accepted => &[Run],
            ReviewState::Rejected | ReviewState::Stopped => &[],
        }
    }

    /// The names of [`ReviewState::actions`], comma-separated (`accept, reject, edit, patch`);
    /// empty when nothing more can be done.
    pub fn action_names(self) -> String {
        let names: Vec<&str> = self.actions().iter().map(|a| a.as_str()).collect();
        names.join(", ")
    }

    /// Whether this state allows `action` (see [`ReviewState::actions`]).
    pub fn allows(self, action: ReviewAction) -> bool {
        self.actions().contains(&action)
    }
}

/// Something a person or client may do with a stored plan; which ones a plan allows depends on
/// its review state (listed as the plan's `actions`; `ReviewState::actions` in Rust). The names
/// are those of the feedback actions (`POST /v1/plans/{id}/feedback`), plus `run`
/// (`POST /v1/plans/{id}/run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReviewAction {
    /// Accept the plan as it is.
    Accept,
    /// Reject it (with an optional reason).
    Reject,
    /// Free-text changes: the model replans with them.
    Edit,
    /// A structured edit (JSON Patch), validated against the catalog.
    Patch,
    /// Answer its questions: the model replans with the answers.
    Answer,
    /// Start a run of its steps.
    Run,
}

impl ReviewAction {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewAction::Accept => "accept",
            ReviewAction::Reject => "reject",
            ReviewAction::Edit => "edit",
            ReviewAction::Patch => "patch",
            ReviewAction::Answer => "answer",
            ReviewAction::Run => "run",
        }
    }
}

impl FromStr for ReviewState {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<ReviewState, String> {
        ReviewState::ALL
            .into_iter()
            .find(|s| s.as_str() == text.trim())
            .ok_or_else(|| {
                let names: Vec<&str> = ReviewState::ALL.iter().map(|s| s.as_str()).collect();
                format!(
                    "unknown state `{text}`; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl std::fmt::Display for ReviewState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens when the review loop reaches `max_iterations`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum MaxIterationsPolicy {
    /// Accept the current plan as is (deer-flow goes on to the reporter).
    #[default]
    UseAsIs,
    /// Stop: the plan is not run (nl2sql / Spring AI's repair cap).
    Stop,
}

/// Review settings and progress, stored with the plan.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Review {
    /// Accept plans without asking (deer-flow `auto_accepted_plan`); questions still wait.
    pub auto_accept: bool,
    /// Most edit / answer rounds before the policy applies (deer-flow `max_plan_iterations`).
    pub max_iterations: u32,
    /// What happens at the cap.
    pub on_max_iterations: MaxIterationsPolicy,
    /// Review rounds so far (edits and answers that replanned).
    pub iteration: u32,
    /// The user confirmed recurring schedules.
    pub schedule_confirmed: bool,
    /// Why the plan was rejected or stopped.
    pub rejection: Option<String>,
    /// The planning request the plan came from (replans reuse its options and context).
    pub request: Option<PlanRequest>,
    /// The catalog the plan was made with when its caller sent one: its content id in the
    /// store's catalogs (`sha256:` and the digest); none: the service's own. Replans, patches
    /// and runs of the plan use this catalog.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog: Option<String>,
    /// What the last edit or answer could not do, for the person who gave it: its replan
    /// failed (this version is the fallback, or the plan as it was), or `max_iterations` was
    /// reached and it was not applied. Cleared by the next review action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Default for Review {
    fn default() -> Review {
        Review {
            auto_accept: false,
            max_iterations: 3,
            on_max_iterations: MaxIterationsPolicy::UseAsIs,
            iteration: 0,
            schedule_confirmed: false,
            rejection: None,
            request: None,
            catalog: None,
            note: None,
        }
    }
}

impl PartialEq for Review {
    /// Field by field; the request (which has no `PartialEq`) by its JSON form.
    fn eq(&self, other: &Review) -> bool {
        self.auto_accept == other.auto_accept
            && self.max_iterations == other.max_iterations
            && self.on_max_iterations == other.on_max_iterations
            && self.iteration == other.iteration
            && self.schedule_confirmed == other.schedule_confirmed
            && self.rejection == other.rejection
            && self.catalog == other.catalog
            && self.note == other.note
            && serde_json::to_value(&self.request).ok() == serde_json::to_value(&other.request).ok()
    }
}

/// True for an explicit confirmation: `yes`, `y`, `ok`, `okay`, `confirm`, `confirmed`, `sure`,
/// `确认`, `好`, `好的`, `可以`, `是`, `行`, `同意` (trimmed, case-insensitive, trailing
/// punctuation ignored). Anything else — including `no`, `取消`, or a longer sentence — is not.
pub fn is_confirmation(text: &str) -> bool {
    let cleaned: String = text
        .trim()
        .trim_end_matches(['.', '!', '。', '！', '~', ' '])
        .to_lowercase();
    const WORDS: [&str; 16] = [
        "yes",
        "y",
        "ok",
        "okay",
        "confirm",
        "confirmed",
        "sure",
        "yes please",
        "确认",
        "好",
        "好的",
        "可以",
        "是",
        "行",
        "同意",
        "确定",
    ];
    WORDS.contains(&cleaned.as_str())
}

/// The initial state of a freshly planned outcome under `review`.
pub fn initial_state(outcome: &Outcome, review: &Review) -> ReviewState {
    state_of_new(&outcome.plan, &outcome.status, review)
}

/// [`initial_state`] of a plan that planning ended with `status`.
fn state_of_new(plan: &Plan, status: &OutcomeStatus, review: &Review) -> ReviewState {
    if !plan.questions.is_empty() || *status == OutcomeStatus::NeedsInput {
        ReviewState::NeedsInput
    } else if review.auto_accept
        && !matches!(status, OutcomeStatus::Incomplete { .. })
        && (!plan.steps.is_empty() || plan.has_enough_context == Some(true))
    {
        // A plan that lost steps the request asked for, or has none, waits for a person even
        // so (who cannot accept an empty one either: see `accept`).
        ReviewState::Accepted
    } else {
        ReviewState::AwaitingReview
    }
}

impl PlanStore {
    /// Stores a planning outcome for review (trigger `created`): `needs_input` when it has
    /// questions, `accepted` under `auto_accept`, else `awaiting_review`. The request is kept
    /// for replans.
    pub async fn submit(
        &self,
        outcome: &Outcome,
        request: &PlanRequest,
        review: Review,
        actor: &str,
    ) -> Result<StoredPlan> {
        let submitted = self
            .submit_plan(
                outcome.plan.clone(),
                &outcome.status,
                request,
                review,
                actor,
            )
            .await?;
        Ok(submitted.stored)
    }

    /// [`PlanStore::submit`] for a plan the caller gives up (`status`: how its planning ended),
    /// answered with the JSON written for it (see [`Submitted`]): what a service that answers
    /// with the stored plan calls, so that the plan is neither copied nor encoded twice.
    pub async fn submit_plan(
        &self,
        plan: Plan,
        status: &OutcomeStatus,
        request: &PlanRequest,
        review: Review,
        actor: &str,
    ) -> Result<Submitted> {
        let mut review = review;
        let mut kept = request.clone();
        kept.feedback = None;
        review.schedule_confirmed |= request.options.allow_recurring;
        review.request = Some(kept);
        let state = state_of_new(&plan, status, &review);
        self.create_encoded(plan, state, review, actor).await
    }

    /// `awaiting_review` (or `draft`) → `accepted` (trigger `status`). With
    /// `expected_version`, only if the plan is still at that version (the one the reviewer
    /// read), else [`StoreError::Conflict`]; the write itself is conditional on it too.
    pub async fn accept(
        &self,
        id: &str,
        expected_version: Option<u32>,
        actor: &str,
    ) -> Result<StoredPlan> {
        let current = self.get(id).await?;
        current.require_version(expected_version)?;
        current.require(ReviewAction::Accept)?;
        // (A research plan may have none because the context already answers the request.)
        if current.plan.steps.is_empty() && current.plan.has_enough_context != Some(true) {
            return Err(StoreError::EmptyPlan(id.to_owned()));
        }
        self.transition(current, ReviewState::Accepted, None, None, actor)
            .await
    }

    /// → `rejected`, with the person's text or [`REJECTED_WITHOUT_TEXT`]; `expected_version`
    /// as for [`PlanStore::accept`].
    pub async fn reject(
        &self,
        id: &str,
        text: Option<&str>,
        expected_version: Option<u32>,
        actor: &str,
    ) -> Result<StoredPlan> {
        let current = self.get(id).await?;
        current.require_version(expected_version)?;
        current.require(ReviewAction::Reject)?;
        let reason = text
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .unwrap_or(REJECTED_WITHOUT_TEXT)
            .to_owned();
        self.transition(current, ReviewState::Rejected, Some(reason), None, actor)
            .await
    }

    /// A structured edit: an RFC 6902 JSON Patch on the plan document (add / remove / reorder /
    /// change steps or arguments), re-validated against `catalog` with the plan's options.
    /// With any error-level finding nothing is stored and [`StoreError::Invalid`] carries the
    /// diagnostics; otherwise the validated plan is the next version (trigger `human_edit`,
    /// state `awaiting_review`) and the warnings are returned with it.
    pub async fn patch(
        &self,
        id: &str,
        patch: &Value,
        catalog: &Catalog,
        actor: &str,
    ) -> Result<(StoredPlan, Vec<Diagnostic>)> {
        let current = self.get(id).await?;
        let (plan, diagnostics) = patched_off_runtime(&current, patch, catalog).await?;
        if diagnostics.iter().any(Diagnostic::is_error) {
            return Err(StoreError::Invalid { diagnostics });
        }
        let state = if plan.questions.is_empty() {
            ReviewState::AwaitingReview
        } else {
            ReviewState::NeedsInput
        };
        let mut review = current.review.clone();
        review.note = None;
        let stored = self
            .write(Change {
                expected_version: current.version(),
                plan,
                state,
                review,
                trigger: Trigger::HumanEdit,
                actor: actor.to_owned(),
            })
            .await?;
        Ok((stored, diagnostics))
    }

    /// What [`PlanStore::patch`] would make of `patch`, without storing anything: the plan as
    /// it would be written and every finding, errors included (where `patch` fails with
    /// [`StoreError::Invalid`]). Refused like `patch` when the plan may not be edited. For
    /// checking an edit while it is typed.
    pub async fn check_patch(
        &self,
        id: &str,
        patch: &Value,
        catalog: &Catalog,
    ) -> Result<(Plan, Vec<Diagnostic>)> {
        patched_off_runtime(&self.get(id).await?, patch, catalog).await
    }

    /// ValueCell's handoff: a copy of the plan under `new_id` in a new conversation, keeping the
    /// parent's thread id (and owner); the copy records `handoff_from` in its metadata.
    pub async fn handoff(
        &self,
        id: &str,
        new_id: &str,
        new_conversation_id: &str,
        actor: &str,
    ) -> Result<StoredPlan> {
        let current = self.get(id).await?;
        let mut plan = current.plan.clone();
        plan.id = new_id.to_owned();
        plan.conversation_id = Some(new_conversation_id.to_owned());
        plan.metadata
            .insert("handoff_from".into(), Value::String(id.to_owned()));
        if let Some(conversation) = &current.plan.conversation_id {
            plan.metadata.insert(
                "parent_conversation_id".into(),
                Value::String(conversation.clone()),
            );
        }
        let mut review = current.review.clone();
        if let Some(request) = review.request.as_mut() {
            request.conversation_id = Some(new_conversation_id.to_owned());
        }
        self.create(plan, current.state, review, actor).await
    }

    /// Applies the `max_iterations` policy when a plan's reviews reached the cap, before a
    /// replan would start: the plan is accepted as it stands or the review stops (by
    /// [`Review::on_max_iterations`]), with a note saying the feedback was not applied. `None`
    /// when the cap is not reached.
    pub async fn cap_iterations(
        &self,
        current: &StoredPlan,
        actor: &str,
    ) -> Result<Option<StoredPlan>> {
        if current.review.iteration < current.review.max_iterations {
            return Ok(None);
        }
        let note = format!("max_iterations ({}) reached", current.review.max_iterations);
        let (capped, state, reason, outcome) = match current.review.on_max_iterations {
            MaxIterationsPolicy::UseAsIs => {
                let mut accepted = current.clone();
                accepted
                    .plan
                    .metadata
                    .insert("review_note".into(), Value::String(note.clone()));
                (
                    accepted,
                    ReviewState::Accepted,
                    None,
                    "the plan was accepted as it stood",
                )
            }
            MaxIterationsPolicy::Stop => (
                current.clone(),
                ReviewState::Stopped,
                Some(note.clone()),
                "the review stopped",
            ),
        };
        let note = format!("{note}: the feedback was not applied, and {outcome}");
        Ok(Some(
            self.transition(capped, state, reason, Some(note), actor)
                .await?,
        ))
    }

    /// A change of review state alone, with the rejection `reason` and the `note` it leaves
    /// (none but at the iteration cap: an accept or reject clears the last edit's note).
    async fn transition(
        &self,
        current: StoredPlan,
        state: ReviewState,
        reason: Option<String>,
        note: Option<String>,
        actor: &str,
    ) -> Result<StoredPlan> {
        let mut review = current.review.clone();
        review.rejection = reason;
        review.note = note;
        self.write(Change {
            expected_version: current.version(),
            plan: current.plan,
            state,
            review,
            trigger: Trigger::Status,
            actor: actor.to_owned(),
        })
        .await
    }
}

/// A recurring schedule the user has not confirmed blocks its step and becomes a question, as
/// the planner does for generated plans (ValueCell's gate holds for edits too).
fn ask_schedule_confirmations(plan: &mut Plan, diagnostics: &[Diagnostic]) {
    let zh = plan.locale.to_ascii_lowercase().starts_with("zh");
    for diag in diagnostics
        .iter()
        .filter(|d| d.code == Code::ScheduleUnconfirmed)
    {
        let Some(step_id) = diag.step.clone() else {
            continue;
        };
        if plan
            .questions
            .iter()
            .any(|q| q.step.as_deref() == Some(&step_id) && q.argument.is_none())
        {
            continue;
        }
        let Some(step) = plan.steps.iter_mut().find(|s| s.id == step_id) else {
            continue;
        };
        step.status = StepStatus::Blocked;
        let (text, options) = if zh {
            (
                format!(
                    "步骤「{}」将按计划重复执行。确认设置这个定时任务吗？",
                    step.title
                ),
                vec!["确认".to_owned(), "取消".to_owned()],
            )
        } else {
            (
                format!(
                    "Step \"{}\" will run repeatedly. Shall I set up this recurring schedule?",
                    step.title
                ),
                vec!["yes".to_owned(), "no".to_owned()],
            )
        };
        plan.questions.push(Question {
            id: format!("q{}", plan.questions.len() + 1),
            text,
            step: Some(step_id),
            argument: None,
            options,
        });
    }
    if !plan.questions.is_empty() {
        plan.ready = false;
    }
}

/// [`patched`] on a blocking thread: applying and validating a patch is CPU work that grows
/// with the plan, and must not hold up the async workers (and the other requests on them).
async fn patched_off_runtime(
    current: &StoredPlan,
    patch: &Value,
    catalog: &Catalog,
) -> Result<(Plan, Vec<Diagnostic>)> {
    current.require(ReviewAction::Patch)?;
    let (current, patch, catalog) = (current.clone(), patch.clone(), catalog.clone());
    tokio::task::spawn_blocking(move || patched(&current, &patch, &catalog))
        .await
        .map_err(|err| StoreError::BadEdit(format!("the edit could not be checked: {err}")))?
}

/// `patch` applied to `current`'s plan (within the bounds of [`crate::patch`]) and validated
/// against `catalog` with the plan's options: the plan [`PlanStore::patch`] would write (if no
/// finding is an error) and the findings. Only plans under review may be edited.
fn patched(
    current: &StoredPlan,
    patch: &Value,
    catalog: &Catalog,
) -> Result<(Plan, Vec<Diagnostic>)> {
    current.require(ReviewAction::Patch)?;
    let mut document =
        serde_json::to_value(&current.plan).map_err(|err| StoreError::BadEdit(err.to_string()))?;
    crate::patch::apply(&mut document, patch)?;
    if let Some(steps) = document.get("steps").and_then(Value::as_array) {
        crate::patch::check_steps(steps.len())?;
    }
    let edited: Plan = serde_json::from_value(document)
        .map_err(|err| StoreError::BadEdit(format!("the result is not a plan: {err}")))?;
    let mut options = current
        .review
        .request
        .as_ref()
        .map(|r| r.options.clone())
        .unwrap_or_default();
    options.allow_recurring |= current.review.schedule_confirmed;
    let (mut plan, diagnostics) = validate(edited, catalog, &options);
    plan.id = current.plan.id.clone();
    ask_schedule_confirmations(&mut plan, &diagnostics);
    Ok((plan, diagnostics))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirmations() {
        for yes in [
            "确认",
            "好",
            "可以",
            "好的",
            "yes",
            "OK",
            "Confirm",
            "ok!",
            "确认。",
        ] {
            assert!(is_confirmation(yes), "{yes}");
        }
        for no in [
            "no",
            "取消",
            "不",
            "",
            "maybe later",
            "yes but change the time",
        ] {
            assert!(!is_confirmation(no), "{no}");
        }
    }

    #[test]
    fn states_round_trip() {
        for state in ReviewState::ALL {
            assert_eq!(state.as_str().parse::<ReviewState>().unwrap(), state);
        }
        assert!("done".parse::<ReviewState>().is_err());
    }
}
