//! The review states and settings stored with a plan: where a plan is in the review loop
//! ([`ReviewState`]), what each state allows ([`ReviewAction`]), the review's settings and
//! progress ([`Review`]), and the state a new plan starts in. The transitions are written by
//! [`crate::review`].

use std::str::FromStr;

use plansmith_core::{Outcome, OutcomeStatus, Plan, PlanRequest};
use serde::{Deserialize, Serialize};

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
    /// refuses everything else ([`StoreError::InvalidState`](crate::StoreError::InvalidState)), the executor refuses a run, and
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
pub(crate) fn state_of_new(plan: &Plan, status: &OutcomeStatus, review: &Review) -> ReviewState {
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
