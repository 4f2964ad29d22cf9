//! Questions to a 2026-07-28 client in rounds (multi round-trip requests).
//!
//! A 2026-07-28 client has no handshake and takes no request from the server in the middle of a
//! call: a server that needs the user answers the call with `InputRequiredResult` (the
//! questions as `inputRequests`, and an opaque `requestState`), and the client calls again with
//! the answers (`inputResponses`) and the state. For such a client that declares form
//! elicitation, `plan`, `feedback` and `run` run as an internal task ([`PlansmithMcp::spawn_task`])
//! whose questions come out as the task's input requests (`elicit.rs` asks through the task, as
//! for a tasks client): the call waits until the task ends (its answer is the call's) or asks
//! (the call answers `InputRequiredResult`, its state naming the task). The next call with that
//! state hands the answers to the waiting task and waits again. The tool runs once, with what
//! it asks in between, and answers exactly as it answers a client that takes elicitation
//! requests.
//!
//! The state is the internal task's id, kept with its owner in this process: another owner's
//! state, a made-up one, or one from before a restart is refused with an error saying to call
//! again without it. A person who never answers is treated as for any elicitation: after the
//! question's time to answer, the recommended answer is taken.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResponse, InputRequiredResult, TaskPayload};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

use super::PlansmithMcp;
use super::answer::failure;
use super::http::owner_of;

/// The tools that ask in rounds.
const ASKING_TOOLS: &[&str] = &["plan", "feedback", "run"];

/// The prefix of a round's `requestState`, before the internal task's id.
const STATE_PREFIX: &str = "ask.";

/// How often a waiting call looks at its task.
const LOOK_EVERY: Duration = Duration::from_millis(50);

impl PlansmithMcp {
    /// Whether the call asks in rounds: a tool that asks, called over a protocol without a
    /// handshake (2026-07-28 on) by a client that declares form elicitation with the request.
    pub(super) fn asks_in_rounds(
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> bool {
        ASKING_TOOLS.contains(&request.name.as_ref())
            && context
                .protocol_version()
                .is_some_and(|version| !version.has_initialize())
            && super::elicit::declares_forms(context)
    }

    /// The first call: starts the tool as an internal task and answers as [`Self::next_round`].
    pub(super) async fn first_round(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let owner = owner_of(&context);
        let cancelled = context.ct.clone();
        let task = self.spawn_task(context, self.tool_call(request));
        self.tasks.start_asking(&task.task_id, owner);
        self.next_round(&task.task_id, &cancelled).await
    }

    /// A call again with `state` and the answers: hands them to the waiting task and answers
    /// as [`Self::next_round`].
    pub(super) async fn later_round(
        &self,
        request: CallToolRequestParams,
        state: &str,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let owner = owner_of(&context);
        let Some(managed) = state
            .strip_prefix(STATE_PREFIX)
            .filter(|managed| self.tasks.asks_for(managed, &owner))
        else {
            return Err(rmcp::ErrorData::invalid_params(
                "`requestState` names no questions this server is asking you (it may have \
                 restarted since): call the tool again without it",
                None,
            ));
        };
        if let Some(responses) = request.input_responses {
            self.tasks.manager().update_task(managed, responses)?;
        }
        self.next_round(managed, &context.ct).await
    }

    /// Waits until the task `managed` ends (its answer) or asks (`InputRequiredResult` with
    /// its questions and the state that names it). A client that cancels the call cancels the
    /// task.
    async fn next_round(
        &self,
        managed: &str,
        cancelled: &tokio_util::sync::CancellationToken,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let manager = self.tasks.manager();
        loop {
            match manager.get_task(managed)?.payload {
                TaskPayload::Completed { result } => {
                    self.tasks.stop_asking(managed);
                    return serde_json::from_value(Value::Object(result))
                        .map(CallToolResponse::Complete)
                        .map_err(|err| rmcp::ErrorData::internal_error(err.to_string(), None));
                }
                TaskPayload::Failed { error } => {
                    self.tasks.stop_asking(managed);
                    return Err(serde_json::from_value(Value::Object(error)).unwrap_or_else(
                        |_| rmcp::ErrorData::internal_error("the tool failed", None),
                    ));
                }
                TaskPayload::InputRequired { input_requests } => {
                    return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                        Some(input_requests),
                        Some(format!("{STATE_PREFIX}{managed}")),
                    )));
                }
                TaskPayload::Cancelled => {
                    self.tasks.stop_asking(managed);
                    return failure("cancelled by the client").map(Into::into);
                }
                // (`Working`, and any state a later rmcp adds: look again.)
                _ => {}
            }
            tokio::select! {
                () = tokio::time::sleep(LOOK_EVERY) => {}
                () = cancelled.cancelled() => {
                    let _ = manager.cancel_task(managed);
                    self.tasks.stop_asking(managed);
                    return failure("cancelled by the client").map(Into::into);
                }
            }
        }
    }
}
