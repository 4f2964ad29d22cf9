//! The goal check: once every step ended and none failed, the parts of the request whose
//! particulars (names, numbers, addresses) no completed call carries are gaps without asking;
//! else the model judges what the run returned against the request (and the caller's rubric,
//! if any) and answers a verdict as JSON. `satisfied` completes the run; `needs_revision` replans only the gaps it names
//! (bounded by the run's cap on replans) and checks again after; `failed` ends the run failed,
//! saying why.

use std::sync::Arc;

use plansmith_core::{CompletionRequest, Message, OutputConstraint};
use plansmith_store::ExecStep;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::state::Ctx;
use crate::summary;

/// What the goal check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The results meet the request.
    Satisfied,
    /// Parts of the request are not done yet: the gaps say which.
    NeedsRevision,
    /// The request cannot be met with what the run did and can do.
    Failed,
}

/// The goal check's answer, as the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalVerdict {
    /// The verdict.
    pub verdict: Verdict,
    /// What is missing (with `needs_revision`).
    #[serde(default)]
    pub gaps: Vec<String>,
    /// Why, in a sentence.
    #[serde(default)]
    pub reason: String,
}

/// Most characters of the run's results shown to the judge.
const MAX_SHOWN: usize = 6000;

fn verdict_schema() -> Value {
    json!({
        "type": "object",
        // In the order a model writes them: what it finds first, the verdict last, so that the
        // verdict follows from the gaps rather than the gaps from a verdict already written.
        "properties": {
            "reason": {"type": "string", "maxLength": 300},
            "gaps": {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 4},
            "verdict": {"type": "string", "enum": ["satisfied", "needs_revision", "failed"]}
        },
        "required": ["reason", "gaps", "verdict"],
        "additionalProperties": false
    })
}

impl Ctx<'_> {
    /// Whether this run checks its goal: the plan's `metadata.execution.goal_check` (true, or
    /// `{"rubric": "…"}`), else the executor's setting; and the rubric, if any.
    pub(super) fn goal_check_wanted(&self) -> Option<Option<String>> {
        let execution = self.plan.metadata.get("execution");
        let (on, rubric) = match execution.and_then(|e| e.get("goal_check")) {
            Some(Value::Bool(on)) => (*on, None),
            Some(Value::Object(o)) => (
                true,
                o.get("rubric").and_then(Value::as_str).map(str::to_owned),
            ),
            _ => (self.ex.config.goal_check, None),
        };
        on.then(|| rubric.or_else(|| self.ex.config.rubric.clone()))
    }

    /// Asks the model for a verdict on what the run returned, with the tokens it spent. `None`
    /// when there is no model or its answer is unusable (the run then ends as its steps say,
    /// with a warning in the log).
    pub(super) async fn check_goal(&self, rubric: Option<&str>) -> (Option<GoalVerdict>, u64) {
        let model = self
            .ex
            .summary_model
            .clone()
            .or_else(|| self.planner.as_ref().map(|p| Arc::clone(p.model())));
        let Some(model) = model else {
            tracing::warn!("goal check of {}: no model to judge it", self.plan_id);
            return (None, 0);
        };
        let rows: Vec<ExecStep> = self
            .plan
            .steps
            .iter()
            .filter_map(|s| self.view.get(&s.id).cloned())
            .collect();
        let mut shown = summary::plain(&self.plan, &rows);
        if shown.len() > MAX_SHOWN {
            let mut cut = MAX_SHOWN;
            while !shown.is_char_boundary(cut) {
                cut -= 1;
            }
            shown.truncate(cut);
            shown.push_str("\n…");
        }
        let mut prompt = format!("Request: {}\n", self.request_text());
        if let Some(rubric) = rubric {
            prompt.push_str(&format!(
                "Rubric, every point of which must hold: {rubric}\n"
            ));
        }
        prompt.push_str(&format!("What the run did and returned:\n{shown}\n"));
        let completion = model
            .complete(CompletionRequest {
                messages: vec![
                    Message::system(
                        "You check whether a finished run did what the user asked. Compare \
                         each thing the request asks for with the steps that completed and \
                         their results. `reason`: one sentence on what was done. `gaps`: each \
                         thing asked for that no completed step did, in a few words (empty \
                         when everything was done). `verdict`: `satisfied` when `gaps` is \
                         empty; `needs_revision` when more steps could do the gaps; `failed` \
                         only when nothing could.",
                    ),
                    Message::user(prompt),
                ],
                constraint: Some(OutputConstraint::JsonSchema {
                    name: "goal_verdict".into(),
                    schema: Arc::new(verdict_schema()),
                    strict: true,
                }),
                max_tokens: 256,
                temperature: 0.0,
            })
            .await;
        let completion = match completion {
            Ok(completion) => completion,
            Err(err) => {
                tracing::warn!("goal check of {}: the model failed: {err}", self.plan_id);
                return (None, 0);
            }
        };
        let tokens = u64::from(completion.usage.prompt_tokens)
            + u64::from(completion.usage.completion_tokens);
        // Read as plans are: a fenced or lightly broken object is still the model's verdict.
        let verdict = plansmith_core::parse::extract_json(&completion.text)
            .map_err(|err| err.to_string())
            .and_then(|(value, _)| {
                serde_json::from_value::<GoalVerdict>(value).map_err(|err| err.to_string())
            });
        match verdict {
            Ok(verdict) => (Some(verdict), tokens),
            Err(err) => {
                tracing::warn!(
                    "goal check of {}: the model's verdict is unusable ({err}): {}",
                    self.plan_id,
                    completion.text.trim()
                );
                (None, tokens)
            }
        }
    }

    /// The parts of the request that the completed tool calls leave undone, by their
    /// particulars ([`plansmith_core::unaddressed_parts`]).
    fn visible_gaps(&self) -> Vec<String> {
        let mut done = self.plan.clone();
        done.steps.retain(|step| {
            self.view
                .get(&step.id)
                .is_some_and(|row| row.status == plansmith_store::ExecStatus::Completed)
        });
        plansmith_core::unaddressed_parts(&self.request_text(), &done)
    }

    /// What was asked: the plan's goal, else its title.
    fn request_text(&self) -> String {
        if self.plan.goal.trim().is_empty() {
            self.plan.title.clone()
        } else {
            self.plan.goal.clone()
        }
    }

    /// Whether the goal is to be checked now: wanted, every step ended and none failed, and
    /// this version of the plan not judged yet.
    pub(super) fn goal_check_due(&self) -> bool {
        self.goal_check_wanted().is_some()
            && self.abort.is_none()
            && self.stall.is_none()
            && self.capped.is_none()
            && self.replan_wanted.is_empty()
            && !self
                .view
                .values()
                .any(|s| s.status == plansmith_store::ExecStatus::Failed)
            && self
                .goal
                .as_ref()
                .is_none_or(|(v, _)| *v != self.base_version)
    }

    /// Checks the goal; true when its gaps were replanned (the run goes on with the new
    /// steps).
    pub(super) async fn judge_goal(&mut self) -> Result<bool, super::report::ExecError> {
        let rubric = self.goal_check_wanted().flatten();
        // Parts of the request whose names, numbers and addresses no completed call carries
        // are not done, whatever a model says (small models call a run with a part missing
        // satisfied): they are the gaps, without asking.
        let (verdict, tokens) = match self.visible_gaps() {
            gaps if !gaps.is_empty() => (
                Some(GoalVerdict {
                    verdict: Verdict::NeedsRevision,
                    reason: format!(
                        "no completed call carries the names, numbers or addresses of: {}",
                        gaps.join("; ")
                    ),
                    gaps,
                }),
                0,
            ),
            _ => self.check_goal(rubric.as_deref()).await,
        };
        self.spend_tokens(tokens).await?;
        let Some(verdict) = verdict else {
            return Ok(false);
        };
        self.goal = Some((self.base_version, verdict.clone()));
        match verdict.verdict {
            Verdict::Satisfied => Ok(false),
            Verdict::Failed => {
                self.goal_unmet = Some(format!(
                    "the goal check found the request cannot be met: {}",
                    verdict.reason
                ));
                Ok(false)
            }
            Verdict::NeedsRevision => {
                let gaps = if verdict.gaps.is_empty() {
                    verdict.reason.clone()
                } else {
                    verdict.gaps.join("; ")
                };
                let why = format!("the goal check found parts of the request not done: {gaps}");
                if self.planner.is_none() || self.replans >= self.max_replans() {
                    self.replans_capped = self.planner.is_some();
                    self.goal_unmet = Some(why);
                    return Ok(false);
                }
                self.replan_wanted.push(why);
                self.goal_gaps = Some(verdict.gaps);
                self.replan().await
            }
        }
    }
}
