//! The review decision, one type for every front end, and the replans it makes.

use std::collections::HashMap;

use plansmith_core::pipeline::OnEvent;
use plansmith_core::{
    Answer, Assumption, Diagnostic, Feedback, OutcomeStatus, Planner, Question, answers_text,
    assumptions, record_assumptions,
};
use plansmith_store::review::initial_state;
use plansmith_store::{
    Change, Remember, ReviewAction, StepDecided, StepVerdict, StoreError, StoredPlan, Trigger,
    is_confirmation,
};
use serde_json::Value;

use crate::{Result, Service};

/// What a person decides about a stored plan.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Decision {
    /// Accept it as it is.
    Accept,
    /// Reject it, with an optional reason.
    Reject(Option<String>),
    /// Free-text feedback: replanned by the model with the plan's own catalog.
    Edit(String),
    /// Answers to the plan's questions: replanned likewise.
    Answer(String),
    /// Answers to the plan's questions by id, each given by a person or assumed (the
    /// question's recommended answer): replanned likewise, and the next version records the
    /// assumed ones in its `metadata.assumptions`.
    Answers(Vec<Answer>),
    /// A JSON Patch (RFC 6902) on the plan document, re-validated against the plan's catalog.
    Patch(Value),
    /// A decision about one step while the plan runs: approve or deny a gated step, or retry,
    /// skip or abort after a failure under the `ask` policy.
    Step {
        /// The step id.
        step: String,
        /// The decision.
        verdict: StepVerdict,
        /// A note for the log.
        note: String,
        /// How far an approval reaches: this run (the default), every run of this plan, or
        /// this exact call in any plan.
        remember: Remember,
    },
}

impl Decision {
    /// The review action this decision is (`None` for a step decision, which the run's state
    /// allows or not, not the review's).
    pub fn action(&self) -> Option<ReviewAction> {
        match self {
            Decision::Accept => Some(ReviewAction::Accept),
            Decision::Reject(_) => Some(ReviewAction::Reject),
            Decision::Edit(_) => Some(ReviewAction::Edit),
            Decision::Answer(_) | Decision::Answers(_) => Some(ReviewAction::Answer),
            Decision::Patch(_) => Some(ReviewAction::Patch),
            Decision::Step { .. } => None,
        }
    }
}

/// What a decision did.
#[derive(Debug)]
#[non_exhaustive]
pub struct Decided {
    /// The plan after it.
    pub stored: StoredPlan,
    /// The engine's warnings about a JSON Patch (empty otherwise).
    pub diagnostics: Vec<Diagnostic>,
    /// For a step decision: the decision as recorded, and whether the run was waiting for it.
    pub step_decision: Option<StepDecided>,
}

impl Decided {
    fn plan(stored: StoredPlan) -> Decided {
        Decided {
            stored,
            diagnostics: Vec::new(),
            step_decision: None,
        }
    }
}

/// A replan asked by a person.
struct Replan {
    /// What the model is told: the feedback, or the questions with their answers.
    text: String,
    /// The person confirmed the recurring schedule the plan asked about.
    confirm_schedule: bool,
    trigger: Trigger,
    /// Answers taken without a person, for the next version's `metadata.assumptions`.
    assumed: Vec<Assumption>,
}

impl Service {
    /// Applies `decision` to plan `id`. With `expected_version`, it is refused
    /// ([`StoreError::Conflict`]) unless the plan is still at the version the person decided
    /// on (for a step decision: unless that step is unchanged since). Edits and answers are
    /// replanned with the catalog the plan was made with, their planning events sent to
    /// `on_event`; at the plan's `max_iterations` its policy applies instead, without a model
    /// call, and the plan's note says the feedback was not applied.
    pub async fn decide(
        &self,
        id: &str,
        decision: Decision,
        expected_version: Option<u32>,
        actor: &str,
        on_event: Option<OnEvent<'_>>,
    ) -> Result<Decided> {
        let store = &self.store;
        let current = store.get(id).await?;
        // A step decision compares the step itself; accept and reject check again as they
        // write.
        if decision.action().is_some() {
            current.require_version(expected_version)?;
        }
        let replan = match decision {
            Decision::Accept => {
                return Ok(Decided::plan(
                    store.accept(id, expected_version, actor).await?,
                ));
            }
            Decision::Reject(text) => {
                return Ok(Decided::plan(
                    store
                        .reject(id, text.as_deref(), expected_version, actor)
                        .await?,
                ));
            }
            Decision::Patch(patch) => {
                let planner = self.planners.for_review(store, &current.review).await?;
                let (stored, diagnostics) =
                    store.patch(id, &patch, planner.catalog(), actor).await?;
                return Ok(Decided {
                    stored,
                    diagnostics,
                    step_decision: None,
                });
            }
            Decision::Step {
                step,
                verdict,
                note,
                remember,
            } => {
                // Checked before anything is recorded: only an approval of a tool call is
                // remembered past its run.
                let remembered = match remember {
                    Remember::Run => None,
                    _ if verdict != StepVerdict::Approve => {
                        return Err(StoreError::BadEdit(format!(
                            "only an approval can be remembered (`{}` was asked with `{}`)",
                            remember.as_str(),
                            verdict.as_str()
                        ))
                        .into());
                    }
                    _ => match current.plan.step(&step).map(|s| &s.action) {
                        Some(plansmith_core::Action::Tool { name, arguments }) => {
                            Some((name.clone(), Value::Object(arguments.clone())))
                        }
                        _ => {
                            return Err(StoreError::BadEdit(format!(
                                "step `{step}` calls no tool: only a tool call's approval can \
                                 be remembered past its run"
                            ))
                            .into());
                        }
                    },
                };
                let decided = store
                    .decide_step(id, &step, verdict, &note, expected_version, actor)
                    .await?;
                if let Some((tool, arguments)) = remembered {
                    store
                        .remember_approval(remember, id, &tool, &arguments, actor)
                        .await?;
                }
                self.decided(id, &decided);
                return Ok(Decided {
                    stored: store.get(id).await?,
                    diagnostics: Vec::new(),
                    step_decision: Some(decided),
                });
            }
            Decision::Edit(text) => {
                current.require(ReviewAction::Edit)?;
                if text.trim().is_empty() {
                    return Err(StoreError::BadEdit("the feedback is empty".into()).into());
                }
                Replan {
                    text,
                    confirm_schedule: false,
                    trigger: Trigger::Feedback,
                    assumed: Vec::new(),
                }
            }
            Decision::Answer(answers) => {
                current.require(ReviewAction::Answer)?;
                if answers.trim().is_empty() {
                    return Err(StoreError::BadEdit("the answer is empty".into()).into());
                }
                answer_replan(&current, &answers)
            }
            Decision::Answers(answers) => {
                current.require(ReviewAction::Answer)?;
                answers_replan(&current, &answers)?
            }
        };
        if let Some(capped) = store.cap_iterations(&current, actor).await? {
            return Ok(Decided::plan(capped));
        }
        let planner = self.planners.for_review(store, &current.review).await?;
        let stored = self
            .replan(current, replan, &planner, actor, on_event)
            .await?;
        Ok(Decided::plan(stored))
    }

    /// Replans `current` with a person's feedback and writes the new plan as the next version.
    /// A replan that fell back keeps a note saying so (the plan unchanged, or the fallback plan
    /// instead of one of the feedback).
    async fn replan(
        &self,
        current: StoredPlan,
        replan: Replan,
        planner: &Planner,
        actor: &str,
        on_event: Option<OnEvent<'_>>,
    ) -> Result<StoredPlan> {
        let request = current.replan_request(Feedback {
            previous: Some(current.plan.clone()),
            text: Some(replan.text),
            diagnostics: Vec::new(),
            observations: Vec::new(),
        });
        let mut review = current.review.clone();
        review.iteration = request.options.iteration;
        review.schedule_confirmed |= replan.confirm_schedule;
        let mut request = request;
        request.options.allow_recurring |= replan.confirm_schedule;
        // Nothing of the previous plan is kept: a person's replan is a new plan of the request.
        // A replan's failure reads "replanning failed: …", as it always has.
        let outcome = planner
            .replan(&request, &HashMap::new(), on_event)
            .await
            .map_err(StoreError::from)?
            .outcome;
        let state = initial_state(&outcome, &review);
        review.note = match &outcome.status {
            OutcomeStatus::Fallback { reason } if outcome.plan.steps == current.plan.steps => {
                Some(format!(
                    "replanning failed ({reason}): the plan is unchanged, and the feedback was \
                     not applied"
                ))
            }
            OutcomeStatus::Fallback { reason } => Some(format!(
                "replanning failed ({reason}): this version is the fallback plan, not a plan \
                 of the feedback"
            )),
            _ => None,
        };
        let mut plan = outcome.plan;
        record_assumptions(&mut plan.metadata, &replan.assumed);
        Ok(self
            .store
            .write(Change {
                expected_version: current.version(),
                plan,
                state,
                review,
                trigger: replan.trigger,
                actor: actor.to_owned(),
            })
            .await?)
    }
}

/// The replan of answers to `current`'s questions. When a question asks to confirm a recurring
/// schedule and the answer is a confirmation ([`is_confirmation`]), the replan allows recurring
/// schedules.
fn answer_replan(current: &StoredPlan, answers: &str) -> Replan {
    let questions = &current.plan.questions;
    let text = match questions.as_slice() {
        // One question: its answer, as answers by id are written.
        [only] => answers_text(
            questions,
            &[Answer {
                question: only.id.clone(),
                value: answers.trim().to_owned(),
                assumed: None,
            }],
        ),
        questions => {
            let mut text = String::from("Answers to the questions:\n");
            for question in questions {
                text.push_str(&format!("- {} ({})\n", question.text, question.id));
            }
            text.push_str(answers.trim());
            text
        }
    };
    Replan {
        text,
        confirm_schedule: is_confirmation(answers)
            && questions.iter().any(|q| confirms_schedule(current, q)),
        trigger: Trigger::Answer,
        assumed: Vec::new(),
    }
}

/// Whether `question` asks to confirm a recurring schedule of `current`'s plan (a question
/// about a step, not one of its arguments, whose step recurs).
fn confirms_schedule(current: &StoredPlan, question: &Question) -> bool {
    question.argument.is_none()
        && question
            .step
            .as_deref()
            .and_then(|s| current.plan.step(s))
            .and_then(|s| s.schedule.as_ref())
            .is_some_and(|s| s.is_recurring())
}

/// The longest answer to one question, in characters.
const MAX_ANSWER_CHARS: usize = 4_000;

/// The replan of answers by question id to `current`'s questions. Refused when there is no
/// answer or one names a question the plan does not ask. A confirmation given to a question
/// about a recurring schedule allows recurring schedules.
fn answers_replan(current: &StoredPlan, answers: &[Answer]) -> Result<Replan> {
    let questions = &current.plan.questions;
    if answers.is_empty() {
        return Err(StoreError::BadEdit("no answers were given".into()).into());
    }
    // Bounds: every answer goes into the replan's prompt.
    if answers.len() > questions.len().max(1) {
        return Err(StoreError::BadEdit(format!(
            "{} answers to {} question(s)",
            answers.len(),
            questions.len()
        ))
        .into());
    }
    if let Some(long) = answers
        .iter()
        .find(|a| a.value.chars().count() > MAX_ANSWER_CHARS)
    {
        return Err(StoreError::BadEdit(format!(
            "the answer to `{}` is longer than {MAX_ANSWER_CHARS} characters",
            long.question
        ))
        .into());
    }
    if let Some(unknown) = answers
        .iter()
        .find(|a| !questions.iter().any(|q| q.id == a.question))
    {
        let asked: Vec<&str> = questions.iter().map(|q| q.id.as_str()).collect();
        return Err(StoreError::BadEdit(format!(
            "the plan asks no question `{}` (it asks: {})",
            unknown.question,
            if asked.is_empty() {
                "nothing".to_owned()
            } else {
                asked.join(", ")
            }
        ))
        .into());
    }
    let confirm_schedule = answers.iter().any(|answer| {
        is_confirmation(&answer.value)
            && questions
                .iter()
                .any(|q| q.id == answer.question && confirms_schedule(current, q))
    });
    Ok(Replan {
        text: answers_text(questions, answers),
        confirm_schedule,
        trigger: Trigger::Answer,
        assumed: assumptions(questions, answers),
    })
}
