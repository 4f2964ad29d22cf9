//! A plan's questions asked through the client (MCP elicitation).
//!
//! When the client declared the form elicitation capability, `plan` and `feedback` ask each of
//! a stored plan's questions with `elicitation/create` (the question's text as the message,
//! [`Question::answer_schema`] as the form) and replan with the answers, as `feedback answer`
//! would; a replan that asks again is asked again, at most [`MAX_ROUNDS`] times. What each
//! reply does:
//!
//! - **accept**: the form's content is the answer;
//! - **decline** (or an empty form, or no reply within [`QUESTION_TIMEOUT`]): the question's
//!   recommended answer is taken and recorded as an assumption in the plan's
//!   `metadata.assumptions`; a question without one stays unanswered;
//! - **cancel**: nothing more is asked and nothing is replanned; the plan waits for answers as
//!   it was, and the tool's answer says so.
//!
//! A call running as a task asks through the task's `inputRequests` instead, and so does a
//! 2026-07-28 client's call, run as an internal task whose questions go out in rounds
//! (`rounds.rs`). A client without the capability, or a plan that was not stored
//! (`save: false`), gets the questions in the tool's answer, as before.
//!
//! The `run` tool, for such a client, follows the run to its end ([`PlansmithMcp::follow_run`])
//! and asks each approval the run waits for as soon as the step waits, before the run pauses
//! (`{"approve": bool, "remember"?}`): accept decides it as the form says; decline or no answer
//! in time denies it (the step is skipped: the safe answer for a call that needs approval);
//! cancel leaves the run waiting for a decision through `feedback`, and the tool answers at
//! once.

use std::time::Duration;

use plansmith_core::Answer;
use plansmith_service::Decision;
use plansmith_store::{ExecRun, Remember, RunState, StepVerdict, StoredPlan};
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, InputRequest,
};
use rmcp::service::{ElicitationMode, RequestContext, RoleServer};
use rmcp::task_manager::TaskContext;
use serde_json::json;

use super::PlansmithMcp;

/// Rounds of questions at most: a replan that asks again is asked again, this many times.
const MAX_ROUNDS: usize = 3;

/// How long a person has to answer one question before its recommended answer is taken.
pub(super) const QUESTION_TIMEOUT: Duration = Duration::from_secs(600);

/// What asking did.
#[derive(Debug, Default)]
pub(super) struct Asked {
    /// One line per question asked: its id and what became of it.
    pub(super) log: Vec<String>,
    /// The person cancelled: the plan was left waiting for answers.
    pub(super) cancelled: bool,
}

impl Asked {
    /// Adds what was asked to a tool's answer: `asked` and `cancelled` in its JSON, and an
    /// `Asked …` line per question at the end of its text.
    pub(super) fn report(&self, value: &mut serde_json::Value, text: &mut String) {
        value["asked"] = json!(self.log);
        value["cancelled"] = json!(self.cancelled);
        for line in &self.log {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("Asked {line}\n"));
        }
    }
}

/// How often a followed run is read again.
const RUN_POLL: Duration = Duration::from_millis(100);

/// Every how many reads of a running run its pending approvals are looked for.
const APPROVALS_EVERY: u64 = 5;

/// One elicitation's reply.
enum Reply {
    /// A question's answer, as the planner reads it.
    Answer(String),
    /// An accepted form's content.
    Content(serde_json::Value),
    /// Declined, empty or too late: the recommended answer when there is one.
    Declined(&'static str),
    Cancelled,
    /// The client could not be asked (an error on the connection or the protocol).
    Unreachable(String),
}

impl PlansmithMcp {
    /// Asks `stored`'s questions through the client when it takes form elicitation, and
    /// replans with the answers (see the module docs). Answers the plan as it ends up and what
    /// was asked; a failed replan leaves the plan as it was, its error in the log.
    pub(super) async fn ask_questions(
        &self,
        mut stored: StoredPlan,
        context: &RequestContext<RoleServer>,
        actor: &str,
    ) -> (StoredPlan, Asked) {
        let mut asked = Asked::default();
        if !can_elicit(context) {
            return (stored, asked);
        }
        for round in 0..MAX_ROUNDS {
            if stored.plan.questions.is_empty() {
                break;
            }
            let mut answers = Vec::new();
            for question in &stored.plan.questions {
                let key = format!("{}-{round}", question.id);
                let reply = elicit(&question.text, question.answer_schema(), &key, context).await;
                // The form's content as the planner reads answers; an empty one is a decline.
                let reply = match reply {
                    Reply::Content(content) => question
                        .answer_from(&content)
                        .map_or(Reply::Declined("gave an empty answer"), Reply::Answer),
                    other => other,
                };
                match reply {
                    Reply::Answer(value) => {
                        asked.log.push(format!("{}: answered", question.id));
                        answers.push(Answer {
                            question: question.id.clone(),
                            value,
                            assumed: None,
                        });
                    }
                    Reply::Declined(why) => match &question.default {
                        Some(default) => {
                            asked.log.push(format!(
                                "{}: {why}; assumed the recommended answer \"{default}\"",
                                question.id
                            ));
                            answers.push(Answer {
                                question: question.id.clone(),
                                value: default.clone(),
                                assumed: Some(format!("the person {why}")),
                            });
                        }
                        None => asked
                            .log
                            .push(format!("{}: {why}; left unanswered", question.id)),
                    },
                    // (A form's content was read as the answer above.)
                    Reply::Content(_) | Reply::Cancelled => {
                        asked.log.push(format!(
                            "{}: cancelled; the plan waits for answers",
                            question.id
                        ));
                        asked.cancelled = true;
                        return (stored, asked);
                    }
                    Reply::Unreachable(err) => {
                        asked
                            .log
                            .push(format!("{}: could not be asked ({err})", question.id));
                        return (stored, asked);
                    }
                }
            }
            if answers.is_empty() {
                break;
            }
            let decided = self
                .service
                .decide(
                    &stored.plan.id,
                    Decision::Answers(answers),
                    Some(stored.version()),
                    actor,
                    None,
                )
                .await;
            match decided {
                Ok(decided) => stored = decided.stored,
                Err(err) => {
                    asked
                        .log
                        .push(format!("replanning with the answers failed: {err}"));
                    break;
                }
            }
        }
        (stored, asked)
    }
}

impl PlansmithMcp {
    /// The answer of `run` that follows the run of plan `id` to its end ([`Self::follow_run`]):
    /// its state, stop reason and what was asked on the way.
    pub(super) async fn followed_answer(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
        actor: &str,
    ) -> super::answer::ToolAnswer {
        let (run, asked) = self.follow_run(id, context, actor).await;
        let state = run.as_ref().map(|r| r.state);
        let stop_reason = run.as_ref().and_then(|r| r.stop_reason);
        let mut text = format!(
            "Run of plan {id}: {}",
            state.map_or("unknown", |s| s.as_str())
        );
        let mut value = json!({"plan_id": id, "state": state, "stop_reason": stop_reason});
        asked.report(&mut value, &mut text);
        super::answer::answer(value, text)
    }

    /// Follows plan `id`'s run until it ends (or the client cancels the call), asking each
    /// approval it waits for through the client (see the module docs). Answers the run as it
    /// was last read and what was asked.
    pub(super) async fn follow_run(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
        actor: &str,
    ) -> (Option<ExecRun>, Asked) {
        let mut asked = Asked::default();
        let mut decided = std::collections::HashSet::new();
        let mut poll = 0u64;
        loop {
            let run = match self.store().exec_run(id).await {
                Ok(run) => run,
                Err(err) => {
                    asked.log.push(format!("the run could not be read: {err}"));
                    return (None, asked);
                }
            };
            let Some(current) = run else {
                return (None, asked);
            };
            if current.state.is_final() || context.ct.is_cancelled() {
                return (Some(current), asked);
            }
            // A running run waits for people too (until it pauses, after the runner's time to
            // wait): its approvals are asked as soon as they are pending, looked for every
            // few polls; a paused run's at every poll.
            let waiting = current.state == RunState::Waiting;
            if waiting || poll.is_multiple_of(APPROVALS_EVERY) {
                let pending = self.service.pending_approvals(id).await.unwrap_or_default();
                let fresh: Vec<_> = pending
                    .into_iter()
                    .filter(|p| !decided.contains(&p.step_id))
                    .collect();
                if waiting && fresh.is_empty() && decided.is_empty() {
                    // Waiting on something else (a failed step under `ask`): for `feedback`.
                    asked
                        .log
                        .push("the run waits for a decision on a failed step".into());
                    return (Some(current), asked);
                }
                for approval in fresh {
                    let schema = json!({"type": "object", "properties": {
                        "approve": {"type": "boolean", "title": "Approve",
                            "description": "run this step (false: skip it)"},
                        "remember": {"type": "string", "title": "Remember",
                            "enum": ["run", "plan", "call"], "default": "run",
                            "description": "for this run, every run of this plan, or this exact call"}},
                        "required": ["approve"]});
                    let message = format!(
                        "Run step {} \"{}\": {} {}?",
                        approval.step_id, approval.title, approval.tool, approval.arguments
                    );
                    let (verdict, remember, line) = match elicit(
                        &message,
                        schema,
                        &format!("approve-{}", approval.step_id),
                        context,
                    )
                    .await
                    {
                        Reply::Content(content) => {
                            let approve = content["approve"].as_bool().unwrap_or(false);
                            let remember = content["remember"]
                                .as_str()
                                .and_then(|r| r.parse::<Remember>().ok())
                                .unwrap_or(Remember::Run);
                            if approve {
                                (StepVerdict::Approve, remember, "approved")
                            } else {
                                (StepVerdict::Deny, Remember::Run, "denied")
                            }
                        }
                        Reply::Declined(_) | Reply::Answer(_) => {
                            (StepVerdict::Deny, Remember::Run, "declined: denied")
                        }
                        Reply::Cancelled => {
                            asked.log.push(format!(
                                "{}: cancelled; the run waits for a decision",
                                approval.step_id
                            ));
                            asked.cancelled = true;
                            return (Some(current), asked);
                        }
                        Reply::Unreachable(_) => {
                            asked.log.push(format!(
                                "{}: could not be asked; the run waits for a decision",
                                approval.step_id
                            ));
                            return (Some(current), asked);
                        }
                    };
                    let decision = Decision::Step {
                        step: approval.step_id.clone(),
                        verdict,
                        note: "asked through the MCP client".into(),
                        remember,
                    };
                    if let Err(err) = self.service.decide(id, decision, None, actor, None).await {
                        asked
                            .log
                            .push(format!("{}: the decision failed: {err}", approval.step_id));
                        return (Some(current), asked);
                    }
                    asked.log.push(format!("{}: {line}", approval.step_id));
                    decided.insert(approval.step_id);
                }
            }
            poll = poll.wrapping_add(1);
            tokio::time::sleep(RUN_POLL).await;
        }
    }
}

/// One elicitation with `schema`: the accepted form's content, a decline (an empty form and
/// no answer in time count as one), a cancel, or why the client could not be asked.
async fn elicit(
    message: &str,
    schema: serde_json::Value,
    key: &str,
    context: &RequestContext<RoleServer>,
) -> Reply {
    let params = json!({"mode": "form", "message": message, "requestedSchema": schema});
    let params: ElicitRequestParams = match serde_json::from_value(params) {
        Ok(params) => params,
        Err(err) => return Reply::Unreachable(format!("the form is not valid: {err}")),
    };
    match send(params, key, context).await {
        Ok(result) => match result.action {
            ElicitationAction::Accept => match result.content.filter(|c| c.is_object()) {
                Some(content) => Reply::Content(content),
                None => Reply::Declined("gave an empty answer"),
            },
            ElicitationAction::Decline => Reply::Declined("declined to answer"),
            // Cancel, and any action a later protocol adds: ask nothing more.
            _ => Reply::Cancelled,
        },
        Err(rmcp::service::ServiceError::Timeout { .. }) => {
            Reply::Declined("did not answer in time")
        }
        Err(err) => Reply::Unreachable(err.to_string()),
    }
}

/// Whether the client takes form elicitation requests.
///
/// A call that runs as a task asks through the task's `inputRequests`, which every protocol
/// version allows: the capabilities are the request's own (a 2026-07-28 client sends them with
/// each request and has no handshake). Outside a task a question is a request to the client,
/// which only a client that declared elicitation in its handshake takes.
pub(super) fn can_elicit(context: &RequestContext<RoleServer>) -> bool {
    if context.extensions.get::<TaskContext>().is_none() {
        return context
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form);
    }
    declares_forms(context)
}

/// Whether the capabilities the request carries (or its session's handshake) take form
/// elicitation; as rmcp reads the handshake, a capability naming no mode takes forms.
pub(super) fn declares_forms(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|caps| caps.elicitation)
        .is_some_and(|modes| modes.form.is_some() || modes.url.is_none())
}

/// Sends one elicitation: through the task's `inputRequests` when the call runs as a task
/// (answered with `tasks/update`), else as a request to the client.
async fn send(
    params: ElicitRequestParams,
    key: &str,
    context: &RequestContext<RoleServer>,
) -> Result<ElicitResult, rmcp::service::ServiceError> {
    if let Some(task) = context.extensions.get::<TaskContext>() {
        let request = InputRequest::Elicitation(ElicitRequest::new(params));
        let answered = tokio::time::timeout(QUESTION_TIMEOUT, task.request_input(key, request))
            .await
            .map_err(|_| rmcp::service::ServiceError::Timeout {
                timeout: QUESTION_TIMEOUT,
            })?;
        return match answered {
            Ok(value) => serde_json::from_value(value)
                .map_err(|_| rmcp::service::ServiceError::UnexpectedResponse),
            Err(_) => Err(rmcp::service::ServiceError::UnexpectedResponse),
        };
    }
    context
        .peer
        .create_elicitation_with_timeout(params, Some(QUESTION_TIMEOUT))
        .await
}
