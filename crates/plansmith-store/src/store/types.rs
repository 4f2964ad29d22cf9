//! The stored-plan types: [`StoredPlan`] and its JSON and text rendering, [`Submitted`],
//! [`Trigger`] and [`VersionRecord`].

use std::str::FromStr;

use chrono::{DateTime, Utc};
use plansmith_core::{Feedback, Plan, PlanRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::{Result, StoreError};
use crate::state::{Review, ReviewAction, ReviewState};

/// Why a version was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The first version.
    Created,
    /// The planner repaired the plan.
    Repaired,
    /// A person edited the plan (structured edit, or a lifecycle `update`).
    HumanEdit,
    /// A person's free-text feedback, replanned.
    Feedback,
    /// Answers to the plan's questions, replanned.
    Answer,
    /// A replan for another reason (execution observations).
    Replan,
    /// A step's status or notes changed.
    StepUpdate,
    /// The review state changed (accepted, rejected, stopped, handed off).
    Status,
}

impl Trigger {
    /// All triggers.
    pub const ALL: [Trigger; 8] = [
        Trigger::Created,
        Trigger::Repaired,
        Trigger::HumanEdit,
        Trigger::Feedback,
        Trigger::Answer,
        Trigger::Replan,
        Trigger::StepUpdate,
        Trigger::Status,
    ];

    /// The snake_case name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Created => "created",
            Trigger::Repaired => "repaired",
            Trigger::HumanEdit => "human_edit",
            Trigger::Feedback => "feedback",
            Trigger::Answer => "answer",
            Trigger::Replan => "replan",
            Trigger::StepUpdate => "step_update",
            Trigger::Status => "status",
        }
    }
}

impl FromStr for Trigger {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Trigger, String> {
        Trigger::ALL
            .into_iter()
            .find(|t| t.as_str() == text)
            .ok_or_else(|| format!("unknown trigger `{text}`"))
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plan as stored: the current version of the document, its review state and settings.
///
/// Its JSON also holds `actions`: what the review state allows ([`ReviewState::actions`]),
/// written from `state` each time (never stored, ignored when read back), so clients offer
/// exactly what the store accepts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StoredPlan {
    /// The current version of the plan (`plan.version` is the store version).
    pub plan: Plan,
    /// Where the plan is in the human-in-the-loop state machine.
    pub state: ReviewState,
    /// Review settings and progress (iteration, policy, rejection reason, the planning request).
    pub review: Review,
    /// When the plan was first stored.
    pub created_at: DateTime<Utc>,
    /// When the current version was written.
    pub updated_at: DateTime<Utc>,
    /// Whether a run of the plan was in progress (running, or waiting for people) when it was
    /// read through [`PlanStore::with_run`]: such a plan is not offered `run` again (the
    /// executor would refuse it). Not part of the stored document; false from other reads.
    ///
    /// [`PlanStore::with_run`]: super::PlanStore::with_run
    #[serde(default, skip_serializing)]
    pub run_active: bool,
    /// What a run of the plan will cost, when the reader estimated it (`plansmith_service`'s
    /// reads do): calls per tool, model calls, time along the critical path. Not part of the
    /// stored document; written in the JSON when present.
    #[serde(default)]
    pub estimate: Option<plansmith_core::estimate::Estimate>,
}

impl Serialize for StoredPlan {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        encode_stored(serializer, self, &self.plan, &self.review)
    }
}

/// A [`StoredPlan`]'s JSON, with `plan` and `review` given as they are to be written.
fn encode_stored<S: serde::Serializer>(
    serializer: S,
    stored: &StoredPlan,
    plan: &impl Serialize,
    review: &impl Serialize,
) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut out = serializer.serialize_struct("StoredPlan", 7)?;
    out.serialize_field("plan", plan)?;
    out.serialize_field("state", &stored.state)?;
    out.serialize_field("actions", &stored.actions())?;
    out.serialize_field("review", review)?;
    out.serialize_field("created_at", &stored.created_at)?;
    out.serialize_field("updated_at", &stored.updated_at)?;
    if let Some(estimate) = &stored.estimate {
        out.serialize_field("estimate", estimate)?;
    } else {
        out.skip_field("estimate")?;
    }
    out.end()
}

/// A plan just stored ([`PlanStore::submit_plan`]), with the JSON written for its document and
/// its review. It encodes as the [`StoredPlan`] would, reusing that JSON: the answer to a
/// request that stored a plan does not encode the plan a second time (under load, encoding the
/// answer's plan and review again was ~6 % of the server's time per plan).
///
/// [`PlanStore::submit_plan`]: super::PlanStore::submit_plan
#[derive(Debug, Clone)]
pub struct Submitted {
    /// The plan as stored.
    pub stored: StoredPlan,
    /// `stored.plan` as JSON, as written to the store.
    pub(super) document: Box<RawValue>,
    /// `stored.review` as JSON, as written to the store.
    pub(super) review: Box<RawValue>,
}

impl Serialize for Submitted {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        encode_stored(serializer, &self.stored, &self.document, &self.review)
    }
}

/// The OpenAPI schema of [`StoredPlan`]'s JSON (its fields and the derived `actions`).
#[cfg(feature = "openapi")]
mod stored_plan_schema {
    use std::borrow::Cow;

    use utoipa::openapi::{RefOr, schema::Schema};
    use utoipa::{PartialSchema, ToSchema};

    use super::*;

    /// A plan as stored: the current version of the document, its review state and settings.
    #[derive(ToSchema)]
    #[allow(dead_code)] // only its schema is used
    struct StoredPlanJson {
        /// The current version of the plan (`plan.version` is the store version).
        plan: Plan,
        /// Where the plan is in the human-in-the-loop state machine.
        state: ReviewState,
        /// What the review state allows now (derived from `state`; ignored in a request).
        actions: Vec<ReviewAction>,
        /// Review settings and progress (iteration, policy, rejection reason, the planning
        /// request).
        review: Review,
        /// When the plan was first stored.
        created_at: DateTime<Utc>,
        /// When the current version was written.
        updated_at: DateTime<Utc>,
        /// What a run of the plan will cost (in answers that read one plan).
        #[schema(nullable = false)]
        estimate: Option<plansmith_core::estimate::Estimate>,
    }

    impl PartialSchema for StoredPlan {
        fn schema() -> RefOr<Schema> {
            StoredPlanJson::schema()
        }
    }

    impl ToSchema for StoredPlan {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("StoredPlan")
        }

        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            StoredPlanJson::schemas(schemas);
        }
    }
}

impl StoredPlan {
    /// The current version number.
    pub fn version(&self) -> u32 {
        self.plan.version
    }

    /// `Ok` when the plan's review state allows `action` ([`ReviewState::actions`]), else the
    /// [`StoreError::InvalidState`] the store's operation would return. Lets a caller refuse
    /// before doing anything costly (loading a model to replan, say).
    pub fn require(&self, action: ReviewAction) -> Result<()> {
        if self.state.allows(action) {
            Ok(())
        } else {
            Err(StoreError::InvalidState {
                id: self.plan.id.clone(),
                operation: action.as_str(),
                state: self.state,
            })
        }
    }

    /// What can be done with the plan now: what its review state allows
    /// ([`ReviewState::actions`]), without `run` while a run of it is in progress.
    pub fn actions(&self) -> Vec<ReviewAction> {
        self.state
            .actions()
            .iter()
            .copied()
            .filter(|action| !(self.run_active && *action == ReviewAction::Run))
            .collect()
    }

    /// The request that replans this plan with `feedback` (the previous plan and what was said
    /// or observed about it), for a person's edit or answer and for a run's failure alike: the
    /// request the plan was made with (its options and context; the goal when none was kept),
    /// the plan's owner, conversation and thread, the next review round as
    /// `options.iteration`, and recurring schedules allowed once the person confirmed them.
    pub fn replan_request(&self, feedback: Feedback) -> PlanRequest {
        let mut request = self
            .review
            .request
            .clone()
            .unwrap_or_else(|| PlanRequest::new(self.plan.goal.clone()));
        // A plan from a file may have no request, and no goal either: its title says what it
        // is for.
        for said in [&self.plan.goal, &self.plan.title] {
            if request.query.trim().is_empty() {
                request.query = said.clone();
            }
        }
        request.owner = self.plan.owner.clone();
        request.conversation_id = self.plan.conversation_id.clone();
        request.thread_id = self.plan.thread_id.clone();
        request.options.iteration = self.review.iteration.saturating_add(1);
        request.options.allow_recurring |= self.review.schedule_confirmed;
        request.feedback = Some(feedback);
        request
    }

    /// `Ok` when the caller saw this version (or named none); else [`StoreError::Conflict`]:
    /// a reviewer who read version 3 must not accept the steps that version 4 added.
    pub fn require_version(&self, expected: Option<u32>) -> Result<()> {
        match expected {
            Some(expected) if expected != self.version() => Err(StoreError::Conflict {
                id: self.plan.id.clone(),
                expected,
                actual: self.version(),
            }),
            _ => Ok(()),
        }
    }

    /// Text rendering: [`Plan::render_text`] (progress and markers), then the review state, the
    /// note of the last edit or answer that could not be applied, what it allows (`Actions: accept, reject, …`), the estimate when it was read with one, and the questions; for a plan that lost steps
    /// when it was planned, what it lost.
    pub fn render_text(&self) -> String {
        self.render_text_from(1)
    }

    /// [`StoredPlan::render_text`] with the steps numbered from `first` (see
    /// [`Plan::render_text_from`]).
    pub fn render_text_from(&self, first: usize) -> String {
        let mut out = self.plan.render_text_from(first);
        if let Some(reason) = self
            .plan
            .metadata
            .get("incomplete")
            .and_then(|i| i.get("reason"))
            .and_then(serde_json::Value::as_str)
        {
            out.push_str(&format!("Incomplete when planned: {reason}\n"));
        }
        out.push_str(&format!("State: {}", self.state));
        if let Some(reason) = &self.review.rejection {
            out.push_str(&format!(" ({reason})"));
        }
        out.push('\n');
        if let Some(note) = &self.review.note {
            out.push_str(&format!("Note: {note}\n"));
        }
        let actions: Vec<&str> = self.actions().iter().map(|a| a.as_str()).collect();
        let actions = actions.join(", ");
        if !actions.is_empty() {
            out.push_str(&format!("Actions: {actions}\n"));
        }
        if let Some(estimate) = &self.estimate {
            out.push_str(&format!("Estimate: {estimate}\n"));
        }
        if !self.plan.questions.is_empty() {
            out.push_str("Questions:\n");
            for question in &self.plan.questions {
                out.push_str(&format!("  {}: {}\n", question.id, question.text));
            }
        }
        out
    }
}

/// One row of a plan's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VersionRecord {
    /// The plan.
    pub plan_id: String,
    /// This version.
    pub version: u32,
    /// The version it was derived from (none for the first).
    pub parent_version: Option<u32>,
    /// Why it was written.
    pub trigger: Trigger,
    /// Who wrote it (a user, a worker, `planner`).
    pub actor: String,
    /// When.
    pub created_at: DateTime<Utc>,
    /// The review state after this change.
    pub state: ReviewState,
    /// RFC 6902 JSON Patch from the parent document to this one (the whole document for v1).
    pub diff: Value,
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use plansmith_core::{Feedback, Plan, PlanRequest};

    use super::StoredPlan;
    use crate::state::{Review, ReviewState};

    /// A replan, whoever asks for it, starts from the request the plan was made with and
    /// carries what the review has settled since: the round, a confirmed schedule, and the
    /// plan's own owner, conversation and thread.
    #[test]
    fn a_replan_request_carries_the_review_so_far() {
        let mut plan = Plan::new("p1", "Send me NVDA news every morning");
        plan.owner = Some("alice".into());
        plan.conversation_id = Some("c2".into());
        plan.thread_id = Some("t3".into());
        let mut kept = PlanRequest::new("");
        kept.context = vec!["a note".into()];
        kept.options.max_steps = 3;
        let stored = StoredPlan {
            plan,
            state: ReviewState::Accepted,
            review: Review {
                iteration: 2,
                schedule_confirmed: true,
                request: Some(kept),
                ..Review::default()
            },
            created_at: Utc::now(),
            updated_at: Utc::now(),
            run_active: false,
            estimate: None,
        };
        let feedback = Feedback {
            text: Some("step s2 failed".into()),
            ..Feedback::default()
        };
        let request = stored.replan_request(feedback);
        assert_eq!(request.query, "Send me NVDA news every morning");
        assert_eq!(request.context, ["a note"]);
        assert_eq!(request.options.max_steps, 3);
        assert_eq!(request.options.iteration, 3);
        assert!(request.options.allow_recurring);
        assert_eq!(request.owner.as_deref(), Some("alice"));
        assert_eq!(request.conversation_id.as_deref(), Some("c2"));
        assert_eq!(request.thread_id.as_deref(), Some("t3"));
        assert_eq!(
            request.feedback.and_then(|f| f.text).as_deref(),
            Some("step s2 failed")
        );
    }
}
