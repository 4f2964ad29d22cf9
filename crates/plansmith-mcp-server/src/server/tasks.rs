//! `plan` and `run` as MCP tasks (the tasks extension, `io.modelcontextprotocol/tasks`).
//!
//! A client that declares the extension gets a task for each call of `plan` or `run` instead of
//! waiting on the call: the answer is `CreateTaskResult`, the client polls `tasks/get` until the
//! task is terminal (its result is the tool's answer, inlined), and may `tasks/cancel` it (the
//! tool stops as a cancelled call does). Planning with the embedded model, or a run that waits
//! for its approvals, outlives a client's request timeout this way. Other tools, and clients
//! without the extension, are answered as before.
//!
//! Tasks live in this server process (rmcp's `TaskManager`); a task id is tied to the owner
//! that created it, and another owner's `tasks/get` answers "no such task".

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CreateTaskResult};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use tokio_util::sync::CancellationToken;

use super::PlansmithMcp;
use super::http::owner_of;

/// The tools a tasks client gets as tasks.
const TASK_TOOLS: &[&str] = &["plan", "run"];

/// Task ids kept with their owner before the expired ones are swept.
const MAX_OWNED: usize = 4096;

/// How long a task lives, in milliseconds: past its questions' time to answer (10 minutes
/// each) and a run it follows.
const TTL_MS: u64 = 6 * 60 * 60 * 1000;

/// How often a client is told to poll, in milliseconds.
const POLL_MS: u64 = 500;

/// The server's tasks and who owns each.
#[derive(Clone, Default)]
pub(super) struct Tasks {
    manager: TaskManager,
    owners: Arc<Mutex<HashMap<String, Option<String>>>>,
}

impl Tasks {
    /// The task manager, when `id` is a task of the caller of `context`.
    pub(super) fn of_caller(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<&TaskManager, rmcp::ErrorData> {
        let owner = owner_of(context);
        let known = self
            .owners
            .lock()
            .map(|owners| owners.get(id) == Some(&owner))
            .unwrap_or(false);
        if known {
            Ok(&self.manager)
        } else {
            Err(rmcp::ErrorData::invalid_params(
                format!("no task with id `{id}`"),
                None,
            ))
        }
    }
}

impl PlansmithMcp {
    /// Whether the call is made a task: the tool is one of [`TASK_TOOLS`] and the client
    /// declared the tasks extension.
    pub(super) fn wants_task(
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> bool {
        TASK_TOOLS.contains(&request.name.as_ref())
            && context
                .client_capabilities()
                .is_some_and(|caps| caps.supports_tasks())
    }

    /// Starts the call as a task; its `CreateTaskResult`.
    pub(super) fn start_task(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let owner = owner_of(&context);
        let server = self.clone();
        // The task outlives the request: its own cancellation, set by `tasks/cancel`.
        let mut context = context;
        let stop = CancellationToken::new();
        context.ct = stop.clone();
        let task = self.tasks.manager.spawn(
            TaskOptions::new()
                .with_poll_interval_ms(POLL_MS)
                .with_ttl_ms(TTL_MS),
            move |task| {
                // Questions asked while the task runs go through its `inputRequests`.
                context.extensions.insert(task.clone());
                Box::pin(async move {
                    let call = server
                        .tool_router
                        .call(ToolCallContext::new(&server, request, context));
                    tokio::select! {
                        answer = call => match answer {
                            Ok(CallToolResponse::Complete(result)) => Ok(result),
                            Ok(_) => Err(TaskExit::Error(rmcp::ErrorData::internal_error(
                                "the tool did not answer with a result", None))),
                            Err(err) => Err(TaskExit::Error(err)),
                        },
                        () = task.cancelled() => {
                            stop.cancel();
                            Err(TaskExit::Cancelled)
                        }
                    }
                })
            },
        );
        if let Ok(mut owners) = self.tasks.owners.lock() {
            // Tasks the manager has let go of (past their time to live) are forgotten here too.
            if owners.len() >= MAX_OWNED {
                let manager = &self.tasks.manager;
                owners.retain(|id, _| manager.get_task(id).is_ok());
            }
            owners.insert(task.task_id.clone(), owner);
        }
        CallToolResponse::Task(CreateTaskResult::new(task))
    }
}
