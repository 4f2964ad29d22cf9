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

use plansmith_core::validate::validate;
use plansmith_core::{
    Catalog, Code, Diagnostic, Outcome, OutcomeStatus, Plan, PlanRequest, Question, QuestionKind,
    StepStatus,
};
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::state::state_of_new;
pub use crate::state::{
    MaxIterationsPolicy, REJECTED_WITHOUT_TEXT, Review, ReviewAction, ReviewState, initial_state,
    is_confirmation,
};
use crate::store::{Change, PlanStore, StoredPlan, Submitted, Trigger};

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
        // Declining is the safe answer to assume: the step runs once, not on a schedule.
        let decline = options[1].clone();
        plan.questions.push(
            Question::new(format!("q{}", plan.questions.len() + 1), text)
                .of_kind(QuestionKind::RiskConfirmation)
                .about(step_id, None)
                .choice(options)
                .recommend(decline),
        );
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
