//! AG-UI (the Agent–User Interaction protocol, 1.0) on a plan's events, beside plansmith's own
//! format, so an AG-UI front end can follow a plan and answer for it without custom glue.
//!
//! - `GET /v1/plans/{id}/events?protocol=ag-ui`: one AG-UI run that watches the plan.
//! - `POST /v1/plans/{id}/events` with a `RunAgentInput` (what AG-UI's `HttpAgent` sends): the
//!   input's `resume` entries are applied first, as the review decisions they stand for, then
//!   the same run is streamed (its `threadId` and `runId` are the input's).
//!
//! A run is `RUN_STARTED`, a `STATE_SNAPSHOT` of the plan (id, version, review state, title,
//! steps with their status, questions, last run), then, while the plan's run goes on,
//! `STEP_STARTED` / `STEP_FINISHED` (the step id as `stepName`), a `STATE_DELTA` for each step
//! status, and a new `STATE_SNAPSHOT` when a replan makes a new version. It ends with:
//!
//! - `RUN_FINISHED` with an interrupt outcome when a person must act, after a text message that
//!   says what for: the review of a plan awaiting it (`review@vN`), each question of a plan
//!   that needs input (`question:q1@vN`, its form as `responseSchema`), each approval the
//!   plan's run waits for (`approval:s2`) and each failed step it asks about (`decision:s2`);
//! - `RUN_FINISHED` with a success outcome when nothing is waited for: the plan is decided and
//!   not running, or its run completed or stopped at a cap (`result`: the run's state, stop
//!   reason and summary, the summary also as a text message);
//! - `RUN_ERROR` when the plan's run failed, was aborted, stalled or deadlocked (`code`: the stop
//!   reason), or the plan was deleted.
//!
//! A resume entry answers an interrupt by its id (`status: cancelled` leaves it unanswered):
//! `review@vN` with `{"decision": "accept" | "reject" | "edit", "text"?, "run"?}` (`run: true`
//! starts the accepted plan on the server's runner), `question:qK@vN` with the question's form,
//! `approval:sK` with `{"approve": bool, "remember"?}`, `decision:sK` with `{"verdict": "retry"
//! | "skip" | "abort", "note"?}` (the note of a retry answers a tool that asked a question). Each goes through the same [`Service::decide`] as the feedback route;
//! the answers of one run's questions make one replan. An id of an older version is a conflict.
//!
//! [`Service::decide`]: plansmith_service::Service::decide

use std::collections::BTreeSet;
use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use plansmith_core::{Answer, StepStatus};
use plansmith_service::{Decision, RunStart};
use plansmith_store::{ExecRun, Remember, ReviewState, RunState, StepVerdict, StoredPlan};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use utoipa::ToSchema;

use super::events::sse;
use super::extract::{ApiJson, ApiPath, Caller};
use super::plans::load;
use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::events::{PlanBusEvent, publish_stored};

/// What an AG-UI client sends to start a run (AG-UI 1.0's `RunAgentInput`): plansmith acts
/// on the ids and `resume`; the other fields are accepted and not used (the plan is the
/// state, and the review decisions are its messages).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunAgentInput {
    /// The conversation (echoed in the run's events).
    pub thread_id: String,
    /// This run (echoed in the run's events).
    pub run_id: String,
    /// Answers to the previous run's interrupts.
    #[serde(default)]
    pub resume: Vec<ResumeEntry>,
    /// The protocol version the client speaks (not used).
    #[serde(default)]
    #[allow(dead_code, reason = "accepted as AG-UI sends it, not used")]
    pub protocol_version: Option<String>,
    /// The run this one continues (not used).
    #[serde(default)]
    #[allow(dead_code, reason = "accepted as AG-UI sends it, not used")]
    pub parent_run_id: Option<String>,
    /// The client's state (not used).
    #[serde(default)]
    #[schema(value_type = Object)]
    #[allow(dead_code, reason = "accepted as AG-UI sends it, not used")]
    pub state: Value,
    /// The conversation's messages (not used).
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    #[allow(dead_code, reason = "accepted as AG-UI sends it, not used")]
    pub messages: Value,
    /// Tools the client offers (not used).
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    #[allow(dead_code, reason = "accepted as AG-UI sends it, not used")]
    pub tools: Value,
    /// Context entries (not used).
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    #[allow(dead_code, reason = "accepted as AG-UI sends it, not used")]
    pub context: Value,
    /// Anything else the client forwards (not used).
    #[serde(default)]
    #[schema(value_type = Object)]
    #[allow(dead_code, reason = "accepted as AG-UI sends it, not used")]
    pub forwarded_props: Value,
}

/// One answer to an interrupt.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeEntry {
    /// The interrupt's id.
    pub interrupt_id: String,
    /// `resolved` (answered) or `cancelled` (left unanswered).
    pub status: ResumeStatus,
    /// The answer, shaped by the interrupt's `responseSchema`.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub payload: Value,
    /// Envelope information (not used).
    #[serde(default)]
    #[schema(value_type = Object)]
    #[allow(dead_code, reason = "accepted as AG-UI sends it, not used")]
    pub metadata: Value,
}

/// Whether an interrupt was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResumeStatus {
    /// Answered.
    Resolved,
    /// Abandoned: nothing is decided.
    Cancelled,
}

/// An AG-UI run on the plan: the resume entries applied as review decisions, then the plan's
/// events as AG-UI events until a person must act or nothing more will happen (see the module
/// docs of the mapping).
#[utoipa::path(post, path = "/v1/plans/{id}/events", tag = "plans",
    params(("id" = String, Path, description = "The plan id")),
    request_body = RunAgentInput,
    responses(
        (status = 200, description = "AG-UI events over Server-Sent Events (`data:` lines only)", content_type = "text/event-stream", body = String),
        (status = 400, description = "`bad_request`: an unknown interrupt id, or a payload that does not answer it", body = ErrorBody),
        (status = 404, description = "`not_found`: no such plan", body = ErrorBody),
        (status = 409, description = "`conflict`: an interrupt of an older version of the plan, or a decision its state does not allow", body = ErrorBody),
    ))]
pub(super) async fn agui_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(input): ApiJson<RunAgentInput>,
) -> Result<Response, ApiError> {
    let stored = load(&state, &caller, &id).await?;
    // Subscribed before the decisions: the run a resume starts is seen from its first event.
    let receiver = subscribe(&state, &id)?;
    resume(&state, &caller, &stored, &input.resume).await?;
    Ok(stream(state, receiver, id, input.thread_id, input.run_id))
}

/// The AG-UI run of a plan's events, for `GET /v1/plans/{id}/events?protocol=ag-ui`.
pub(super) fn watch(state: AppState, id: String) -> Result<Response, ApiError> {
    let receiver = subscribe(&state, &id)?;
    let run_id = plansmith_core::Plan::new_id().replacen("plan-", "run-", 1);
    Ok(stream(state, receiver, id.clone(), id, run_id))
}

/// The plan's events from now on (subscribed before the plan is read, so none falls between).
fn subscribe(state: &AppState, id: &str) -> Result<broadcast::Receiver<PlanBusEvent>, ApiError> {
    state
        .bus
        .subscribe(id)
        .ok_or_else(|| ApiError::new("internal", "the event bus is unavailable"))
}

/// The AG-UI run over `receiver`'s events, written by a task of its own into the response.
fn stream(
    state: AppState,
    receiver: broadcast::Receiver<PlanBusEvent>,
    id: String,
    thread_id: String,
    run_id: String,
) -> Response {
    let (tx, rx) = mpsc::channel::<Value>(64);
    let run = AgRun {
        tx,
        thread_id,
        run_id,
        active: BTreeSet::new(),
        steps: Vec::new(),
        version: 0,
        messages: 0,
    };
    let driver = state.clone();
    tokio::spawn(async move {
        let closing = driver.clone();
        tokio::select! {
            () = run.drive(&driver, &id, receiver) => {}
            () = closing.closed() => {}
        }
    });
    let events = rx.map(|value| {
        let data = serde_json::to_string(&value).unwrap_or_else(|_| "null".to_owned());
        Ok::<_, Infallible>(Event::default().data(data))
    });
    sse(events).into_response()
}

/// How an AG-UI run ends.
enum End {
    Interrupt(Vec<Value>, String),
    Success(Value, String),
    Error(String, Option<String>),
}

/// One AG-UI run being written.
struct AgRun {
    tx: mpsc::Sender<Value>,
    thread_id: String,
    run_id: String,
    /// Steps started and not finished in this run.
    active: BTreeSet<String>,
    /// The snapshot's step ids, in order (a delta addresses a step by its index).
    steps: Vec<String>,
    version: u32,
    messages: u32,
}

impl AgRun {
    /// Sends one event; false when the client is gone.
    async fn send(&mut self, mut event: Value) -> bool {
        event["timestamp"] = json!(chrono::Utc::now().timestamp_millis());
        self.tx.send(event).await.is_ok()
    }

    async fn drive(
        mut self,
        state: &AppState,
        id: &str,
        mut receiver: broadcast::Receiver<PlanBusEvent>,
    ) {
        let started =
            json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id});
        if !self.send(started).await {
            return;
        }
        if !self.refresh(state, id, true).await {
            return;
        }
        loop {
            let event = match receiver.recv().await {
                Ok(event) => event,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if !self.refresh(state, id, true).await {
                        return;
                    }
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let goes_on = match event.kind.as_str() {
                "exec_step_started" => {
                    let step = event.data["step_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    if self.active.insert(step.clone()) {
                        self.send(json!({"type": "STEP_STARTED", "stepName": step}))
                            .await
                    } else {
                        true
                    }
                }
                "step_status" => self.step_status(&event.data).await,
                "plan_updated" if event.version.is_some_and(|v| v != self.version) => {
                    self.refresh(state, id, true).await
                }
                "exec_run_finished" | "review_requested" => self.refresh(state, id, false).await,
                "plan_deleted" => {
                    self.end(End::Error(
                        format!("plan `{id}` was deleted"),
                        Some("plan_deleted".into()),
                    ))
                    .await;
                    false
                }
                _ => true,
            };
            if !goes_on {
                return;
            }
        }
    }

    /// A step's new status: a delta on the snapshot, and its `STEP_FINISHED` when it ended.
    async fn step_status(&mut self, data: &Value) -> bool {
        let step = data["step"].as_str().unwrap_or_default().to_owned();
        let status = data["status"].clone();
        if let Some(index) = self.steps.iter().position(|s| *s == step) {
            let delta = json!({"type": "STATE_DELTA", "delta": [
                {"op": "replace", "path": format!("/steps/{index}/status"), "value": status}]});
            if !self.send(delta).await {
                return false;
            }
        }
        let ended = matches!(
            serde_json::from_value::<StepStatus>(status),
            Ok(StepStatus::Completed | StepStatus::Failed | StepStatus::Skipped)
        );
        if ended && self.active.remove(&step) {
            return self
                .send(json!({"type": "STEP_FINISHED", "stepName": step}))
                .await;
        }
        true
    }

    /// Reads the plan and its run again: a new snapshot when asked (or the version changed),
    /// then the run's end if it has come. False when the run ended or the client left.
    async fn refresh(&mut self, state: &AppState, id: &str, snapshot: bool) -> bool {
        let Ok(stored) = state.store.get(id).await else {
            self.end(End::Error(format!("plan `{id}` is gone"), None))
                .await;
            return false;
        };
        let exec = state.store.exec_run(id).await.ok().flatten();
        if (snapshot || stored.version() != self.version)
            && !self.snapshot(&stored, exec.as_ref()).await
        {
            return false;
        }
        match end_of(state, &stored, exec.as_ref()).await {
            Some(end) => {
                self.end(end).await;
                false
            }
            None => true,
        }
    }

    async fn snapshot(&mut self, stored: &StoredPlan, exec: Option<&ExecRun>) -> bool {
        self.version = stored.version();
        self.steps = stored.plan.steps.iter().map(|s| s.id.clone()).collect();
        let snapshot = json!({
            "plan_id": stored.plan.id,
            "version": stored.version(),
            "state": stored.state,
            "title": stored.plan.title,
            "steps": stored.plan.steps.iter().map(|s| json!({
                "id": s.id, "title": s.title, "status": s.status,
            })).collect::<Vec<_>>(),
            "questions": stored.plan.questions,
            "run": exec.map(|r| json!({"state": r.state, "stop_reason": r.stop_reason})),
        });
        self.send(json!({"type": "STATE_SNAPSHOT", "snapshot": snapshot}))
            .await
    }

    /// One assistant message.
    async fn say(&mut self, text: &str) -> bool {
        if text.trim().is_empty() {
            return true;
        }
        self.messages += 1;
        let message_id = format!("{}-m{}", self.run_id, self.messages);
        self.send(
            json!({"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"}),
        )
        .await
            && self
                .send(
                    json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": text}),
                )
                .await
            && self
                .send(json!({"type": "TEXT_MESSAGE_END", "messageId": message_id}))
                .await
    }

    /// Ends the run: the steps still open are finished in it, the message said, then the end.
    async fn end(&mut self, end: End) {
        for step in std::mem::take(&mut self.active) {
            if !self
                .send(json!({"type": "STEP_FINISHED", "stepName": step}))
                .await
            {
                return;
            }
        }
        let (thread_id, run_id) = (self.thread_id.clone(), self.run_id.clone());
        match end {
            End::Interrupt(interrupts, text) => {
                if self.say(&text).await {
                    self.send(json!({"type": "RUN_FINISHED", "threadId": thread_id,
                        "runId": run_id, "outcome": {"type": "interrupt", "interrupts": interrupts}}))
                        .await;
                }
            }
            End::Success(result, text) => {
                if self.say(&text).await {
                    self.send(json!({"type": "RUN_FINISHED", "threadId": thread_id,
                        "runId": run_id, "result": result, "outcome": {"type": "success"}}))
                        .await;
                }
            }
            End::Error(message, code) => {
                let mut event = json!({"type": "RUN_ERROR", "message": message});
                if let Some(code) = code {
                    event["code"] = json!(code);
                }
                self.send(event).await;
            }
        }
        self.tx.close_channel();
    }
}

/// How the AG-UI run ends for the plan as it is now, or `None` while its run goes on.
async fn end_of(state: &AppState, stored: &StoredPlan, exec: Option<&ExecRun>) -> Option<End> {
    let version = stored.version();
    match stored.state {
        ReviewState::AwaitingReview => {
            return Some(End::Interrupt(
                vec![review_interrupt(version)],
                format!(
                    "{}\nAccept, reject or change this plan?",
                    stored.render_text()
                ),
            ));
        }
        ReviewState::NeedsInput if !stored.plan.questions.is_empty() => {
            let interrupts = stored
                .plan
                .questions
                .iter()
                .map(|q| {
                    json!({"id": format!("question:{}@v{version}", q.id),
                        "reason": "plansmith/question", "message": q.text,
                        "responseSchema": q.answer_schema(),
                        "metadata": {"kind": q.kind, "input": q.input, "default": q.default}})
                })
                .collect();
            let asked: Vec<&str> = stored
                .plan
                .questions
                .iter()
                .map(|q| q.text.as_str())
                .collect();
            return Some(End::Interrupt(interrupts, asked.join("\n")));
        }
        ReviewState::NeedsInput => {
            return Some(End::Interrupt(
                vec![review_interrupt(version)],
                stored.render_text(),
            ));
        }
        _ => {}
    }
    let Some(exec) = exec else {
        return Some(End::Success(json!({"state": stored.state}), String::new()));
    };
    match exec.state {
        RunState::Running => None,
        RunState::Waiting => {
            let approvals = state
                .service
                .pending_approvals(&stored.plan.id)
                .await
                .unwrap_or_default();
            let mut interrupts: Vec<Value> = approvals
                .iter()
                .map(|a| {
                    json!({"id": format!("approval:{}", a.step_id), "reason": "tool_approval",
                        "message": format!("Run step {} \"{}\" ({})?", a.step_id, a.title, a.tool),
                        "responseSchema": {"type": "object", "properties": {
                            "approve": {"type": "boolean"},
                            "remember": {"type": "string", "enum": ["run", "plan", "call"]}},
                            "required": ["approve"]},
                        "metadata": {"tool": a.tool, "arguments": a.arguments}})
                })
                .collect();
            for step in &stored.plan.steps {
                let failed = step.status == StepStatus::Blocked
                    && !approvals.iter().any(|a| a.step_id == step.id);
                if failed {
                    // The step's error says why it waits: a failure, or its tool's question.
                    let why = step.error.as_deref().unwrap_or("it failed");
                    interrupts.push(json!({"id": format!("decision:{}", step.id),
                        "reason": "plansmith/step_failed",
                        "message": format!("Step {} \"{}\": {why}. Retry, skip or abort?", step.id, step.title),
                        "responseSchema": {"type": "object", "properties": {
                            "verdict": {"type": "string", "enum": ["retry", "skip", "abort"]},
                            "note": {"type": "string",
                                "description": "for a retry of a step whose tool asked a question: the answer"}},
                            "required": ["verdict"]}}));
                }
            }
            if interrupts.is_empty() {
                // The run records its pause before the decisions it waits for are readable.
                return None;
            }
            let text = interrupts
                .iter()
                .filter_map(|i| i["message"].as_str())
                .collect::<Vec<_>>()
                .join("\n");
            Some(End::Interrupt(interrupts, text))
        }
        run_state => {
            let summary = exec
                .outcome
                .as_ref()
                .and_then(|o| o["summary"].as_str())
                .unwrap_or_default()
                .to_owned();
            let result = json!({"state": run_state, "stop_reason": exec.stop_reason,
                "summary": summary});
            if matches!(run_state, RunState::Completed) {
                Some(End::Success(result, summary))
            } else {
                let code = exec
                    .stop_reason
                    .as_ref()
                    .and_then(|r| serde_json::to_value(r).ok())
                    .and_then(|v| v.as_str().map(str::to_owned));
                let reason = exec
                    .outcome
                    .as_ref()
                    .and_then(|o| o["reason"].as_str())
                    .unwrap_or("the run did not complete");
                Some(End::Error(reason.to_owned(), code))
            }
        }
    }
}

fn review_interrupt(version: u32) -> Value {
    json!({"id": format!("review@v{version}"), "reason": "plansmith/review",
        "message": "Accept, reject or change the plan?",
        "responseSchema": {"type": "object", "properties": {
            "decision": {"type": "string", "enum": ["accept", "reject", "edit"]},
            "text": {"type": "string", "description": "why (reject), or what to change (edit)"},
            "run": {"type": "boolean", "description": "run the plan once accepted"}},
            "required": ["decision"]}})
}

/// Most resume entries of one input (each may be a store write).
const MAX_RESUME: usize = 100;

/// Applies the resume entries as review decisions (see the module docs). Every entry is read
/// and checked against the plan before any decision is made; the service may still refuse one
/// (a step decision with no run to read it), and the decisions made before it stand.
async fn resume(
    state: &AppState,
    caller: &Caller,
    stored: &StoredPlan,
    entries: &[ResumeEntry],
) -> Result<(), ApiError> {
    let bad = |message: String| ApiError::new("bad_request", message);
    if entries.len() > MAX_RESUME {
        return Err(bad(format!(
            "{} resume entries; a run answers at most {MAX_RESUME}",
            entries.len()
        )));
    }
    let version = stored.version();
    let of_version = |rest: &str, id: &str| -> Result<String, ApiError> {
        let (name, v) = rest
            .rsplit_once("@v")
            .ok_or_else(|| bad(format!("interrupt `{id}`: no version (`@vN`)")))?;
        if v.parse::<u32>().ok() != Some(version) {
            return Err(ApiError::new(
                "conflict",
                format!(
                    "interrupt `{id}` is of another version of the plan (now version {version})"
                ),
            ));
        }
        Ok(name.to_owned())
    };
    let mut answers = Vec::new();
    let mut review = None;
    let mut steps = Vec::new();
    for entry in entries {
        let id = entry.interrupt_id.as_str();
        let payload = &entry.payload;
        if let Some(rest) = id.strip_prefix("question:") {
            let qid = of_version(rest, id)?;
            let question = stored
                .plan
                .questions
                .iter()
                .find(|q| q.id == qid)
                .ok_or_else(|| {
                    bad(format!(
                        "interrupt `{id}`: the plan asks no question `{qid}`"
                    ))
                })?;
            if entry.status == ResumeStatus::Cancelled {
                continue;
            }
            let value = match payload {
                Value::String(text) if !text.trim().is_empty() => Some(text.clone()),
                other => question.answer_from(other),
            }
            .ok_or_else(|| bad(format!("interrupt `{id}`: the payload holds no answer")))?;
            answers.push(Answer {
                question: qid,
                value,
                assumed: None,
            });
        } else if let Some(rest) = id.strip_prefix("review") {
            of_version(rest, id)?;
            if entry.status == ResumeStatus::Cancelled {
                continue;
            }
            let text = payload["text"].as_str().unwrap_or_default().to_owned();
            let decision = match payload["decision"].as_str() {
                Some("accept") => Decision::Accept,
                Some("reject") => Decision::Reject(Some(text).filter(|t| !t.trim().is_empty())),
                Some("edit") if !text.trim().is_empty() => Decision::Edit(text),
                Some("edit") => return Err(bad(format!("interrupt `{id}`: an edit needs `text`"))),
                _ => {
                    return Err(bad(format!(
                        "interrupt `{id}`: `decision` is accept, reject or edit"
                    )));
                }
            };
            let run = payload["run"].as_bool().unwrap_or(false);
            review = Some((decision, run));
        } else if let Some(step) = id.strip_prefix("approval:") {
            if entry.status == ResumeStatus::Cancelled {
                continue;
            }
            let approve = payload["approve"]
                .as_bool()
                .ok_or_else(|| bad(format!("interrupt `{id}`: `approve` (true or false)")))?;
            let remember = match payload["remember"].as_str() {
                Some(scope) => scope
                    .parse::<Remember>()
                    .map_err(|err| bad(format!("interrupt `{id}`: {err}")))?,
                None => Remember::Run,
            };
            let verdict = if approve {
                StepVerdict::Approve
            } else {
                StepVerdict::Deny
            };
            steps.push((step.to_owned(), verdict, remember, String::new()));
        } else if let Some(step) = id.strip_prefix("decision:") {
            if entry.status == ResumeStatus::Cancelled {
                continue;
            }
            let verdict = match payload["verdict"].as_str() {
                Some("retry") => StepVerdict::Retry,
                Some("skip") => StepVerdict::Skip,
                Some("abort") => StepVerdict::Abort,
                _ => {
                    return Err(bad(format!(
                        "interrupt `{id}`: `verdict` is retry, skip or abort"
                    )));
                }
            };
            let note = payload["note"].as_str().unwrap_or_default().to_owned();
            steps.push((step.to_owned(), verdict, Remember::Run, note));
        } else {
            return Err(bad(format!("no interrupt `{id}` of this plan")));
        }
    }
    let actor = caller.actor();
    let id = &stored.plan.id;
    for (step, verdict, remember, note) in steps {
        let decision = Decision::Step {
            step,
            verdict,
            note,
            remember,
        };
        state
            .service
            .decide(id, decision, None, &actor, None)
            .await?;
    }
    if !answers.is_empty() {
        let decided = state
            .service
            .decide(id, Decision::Answers(answers), Some(version), &actor, None)
            .await?;
        publish_stored(&state.bus, "plan_updated", &decided.stored);
    }
    if let Some((decision, run)) = review {
        let decided = state
            .service
            .decide(id, decision, Some(version), &actor, None)
            .await?;
        publish_stored(&state.bus, "plan_updated", &decided.stored);
        if run {
            // As `POST /v1/plans/{id}/run` with an empty body: under the server's caps.
            state.service.run(id, RunStart::of(false, None)?).await?;
        }
    }
    Ok(())
}
