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
//!
//! A `run` task outlives the process: its id names the plan (`run.<plan id>.<nonce>`), and the
//! run itself is in the store, carried on by the next process on it (`serve`'s runner joins
//! the runs a dead process left). A `tasks/get` for such an id that this process did not give
//! out follows that plan's run again, for a caller who may see the plan, and answers as the
//! first task would have: `working` until the run ends, then its result. A `plan` task dies
//! with its process (planning starts again from the request).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CreateTaskResult};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskContext, TaskExit, TaskFuture, TaskManager, TaskOptions};
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

/// The prefix of a `run` task's id, before the plan's id.
const RUN_PREFIX: &str = "run.";

/// The server's tasks: each id it gave out, with its owner and the manager's task for it.
#[derive(Clone, Default)]
pub(super) struct Tasks {
    manager: TaskManager,
    known: Arc<Mutex<HashMap<String, Known>>>,
    /// The follower of each plan's run that a `tasks/get` revived: every id of that run
    /// shares it, so made-up ids cannot start more followers than there are runs.
    revived: Arc<Mutex<HashMap<String, String>>>,
    /// The internal tasks of calls asking in rounds (`rounds.rs`), with their owners.
    asking: Arc<Mutex<HashMap<String, Option<String>>>>,
}

/// A task id this process answers for.
#[derive(Clone)]
struct Known {
    owner: Option<String>,
    /// The id of the manager's task.
    managed: String,
}

impl Tasks {
    /// The manager's id for task `id`, when this process gave it out to `owner`.
    fn managed(&self, id: &str, owner: &Option<String>) -> Option<String> {
        let known = self.known.lock().ok()?;
        known
            .get(id)
            .filter(|known| &known.owner == owner)
            .map(|known| known.managed.clone())
    }

    /// Records task `id` of `owner` as the manager's task `managed`.
    fn remember(&self, id: String, owner: Option<String>, managed: String) {
        if let Ok(mut known) = self.known.lock() {
            // Tasks the manager has let go of (past their time to live) are forgotten here too;
            // ended ones stay, for their clients to read the result.
            make_room(&mut known, |_, known| {
                self.manager.get_task(&known.managed).is_ok()
            });
            known.insert(id, Known { owner, managed });
        }
    }

    /// Whether the manager's task `managed` is still at work (not ended, not let go of).
    fn at_work(&self, managed: &str) -> bool {
        self.manager
            .get_task(managed)
            .is_ok_and(|task| !task.status().is_terminal())
    }

    /// The revived follower of `plan_id`'s run, while it is still following.
    fn follower(&self, plan_id: &str) -> Option<String> {
        let revived = self.revived.lock().ok()?;
        let managed = revived.get(plan_id)?;
        self.at_work(managed).then(|| managed.clone())
    }

    /// Records `managed` as the revived follower of `plan_id`'s run.
    fn revive(&self, plan_id: &str, managed: &str) {
        if let Ok(mut revived) = self.revived.lock() {
            make_room(&mut revived, |_, managed| self.at_work(managed));
            revived.insert(plan_id.to_owned(), managed.to_owned());
        }
    }

    /// The manager's state of task `id` (whose manager id is `managed`), under the id the
    /// client knows.
    pub(super) fn get(
        &self,
        id: &str,
        managed: &str,
    ) -> Result<rmcp::model::DetailedTask, rmcp::ErrorData> {
        let mut task = self.manager.get_task(managed)?;
        task.task.task_id = id.to_owned();
        Ok(task)
    }

    /// The task manager.
    pub(super) fn manager(&self) -> &TaskManager {
        &self.manager
    }

    /// Records the internal task `managed` of `owner`'s call that asks in rounds.
    pub(super) fn start_asking(&self, managed: &str, owner: Option<String>) {
        if let Ok(mut asking) = self.asking.lock() {
            // Calls whose client never came back: their tasks ended (a question's time to
            // answer runs out) and are let go of.
            make_room(&mut asking, |managed, _| self.at_work(managed));
            asking.insert(managed.to_owned(), owner);
        }
    }

    /// Whether `managed` is a call of `owner` that asks in rounds.
    pub(super) fn asks_for(&self, managed: &str, owner: &Option<String>) -> bool {
        self.asking
            .lock()
            .is_ok_and(|asking| asking.get(managed) == Some(owner))
    }

    /// Forgets the call `managed` that asked in rounds (it answered).
    pub(super) fn stop_asking(&self, managed: &str) {
        if let Ok(mut asking) = self.asking.lock() {
            asking.remove(managed);
        }
    }
}

/// Makes room in `map` once it holds [`MAX_OWNED`] entries: keeps those `keep` says to.
fn make_room<V>(map: &mut HashMap<String, V>, mut keep: impl FnMut(&str, &V) -> bool) {
    if map.len() >= MAX_OWNED {
        map.retain(|key, value| keep(key, value));
    }
}

/// The plan a `run` task's id names (`run.<plan id>.<nonce>`).
fn run_plan(id: &str) -> Option<&str> {
    let rest = id.strip_prefix(RUN_PREFIX)?;
    let (plan_id, nonce) = rest.rsplit_once('.')?;
    (!plan_id.is_empty() && !nonce.is_empty()).then_some(plan_id)
}

/// The answer to a task id the caller has no task of.
fn no_task(id: &str) -> rmcp::ErrorData {
    rmcp::ErrorData::invalid_params(format!("no task with id `{id}`"), None)
}

/// The options of every task.
fn options() -> TaskOptions {
    TaskOptions::new()
        .with_poll_interval_ms(POLL_MS)
        .with_ttl_ms(TTL_MS)
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
        let plan_id = (request.name == "run")
            .then(|| request.arguments.as_ref()?.get("plan_id")?.as_str())
            .flatten()
            .map(str::to_owned);
        let mut task = self.spawn_task(context, self.tool_call(request));
        let managed = task.task_id.clone();
        if let Some(plan_id) = plan_id {
            task.task_id = format!("{RUN_PREFIX}{plan_id}.{managed}");
        }
        self.tasks.remember(task.task_id.clone(), owner, managed);
        CallToolResponse::Task(CreateTaskResult::new(task))
    }

    /// The work of a task that makes the tool call `request`: the tool's result, or its error.
    pub(super) fn tool_call(
        &self,
        request: CallToolRequestParams,
    ) -> impl FnOnce(RequestContext<RoleServer>) -> TaskFuture + use<> {
        let server = self.clone();
        move |context| {
            Box::pin(async move {
                match server
                    .tool_router
                    .call(ToolCallContext::new(&server, request, context))
                    .await
                {
                    Ok(CallToolResponse::Complete(result)) => Ok(result),
                    Ok(_) => Err(TaskExit::Error(rmcp::ErrorData::internal_error(
                        "the tool did not answer with a result",
                        None,
                    ))),
                    Err(err) => Err(TaskExit::Error(err)),
                }
            })
        }
    }

    /// Spawns `work` (given the request's context, with the task in its extensions) as a
    /// task that `tasks/cancel` stops as a client's cancellation stops a call; its seed state.
    pub(super) fn spawn_task(
        &self,
        context: RequestContext<RoleServer>,
        work: impl FnOnce(RequestContext<RoleServer>) -> TaskFuture,
    ) -> rmcp::model::Task {
        // The task outlives the request: its own cancellation, set by `tasks/cancel`.
        let mut context = context;
        let stop = CancellationToken::new();
        context.ct = stop.clone();
        self.tasks
            .manager
            .spawn(options(), move |task: TaskContext| {
                // Questions asked while the task runs go through its `inputRequests`.
                context.extensions.insert(task.clone());
                let work = work(context);
                Box::pin(async move {
                    tokio::select! {
                        answer = work => answer,
                        () = task.cancelled() => {
                            stop.cancel();
                            Err(TaskExit::Cancelled)
                        }
                    }
                })
            })
    }

    /// The manager's id of the caller's task `id`. A `run` task's id that this process did
    /// not give out (the process that did has ended) is answered by following that plan's run
    /// again, when the caller may see the plan and it has a run.
    pub(super) async fn task_of_caller(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<String, rmcp::ErrorData> {
        let owner = owner_of(context);
        if let Some(managed) = self.tasks.managed(id, &owner) {
            return Ok(managed);
        }
        let plan_id = run_plan(id).ok_or_else(|| no_task(id))?;
        let visible = self.visible(plan_id, &owner).await.is_ok();
        if !visible || !matches!(self.store().exec_run(plan_id).await, Ok(Some(_))) {
            return Err(no_task(id));
        }
        let managed = match self.tasks.follower(plan_id) {
            Some(managed) => managed,
            None => {
                let server = self.clone();
                let plan = plan_id.to_owned();
                let actor = self.actor_for(&owner);
                let task = self.spawn_task(context.clone(), move |context| {
                    Box::pin(async move {
                        server
                            .followed_answer(&plan, &context, &actor)
                            .await
                            .map_err(TaskExit::Error)
                    })
                });
                self.tasks.revive(plan_id, &task.task_id);
                task.task_id
            }
        };
        self.tasks.remember(id.to_owned(), owner, managed.clone());
        Ok(managed)
    }
}

#[cfg(test)]
mod tests {
    use super::run_plan;

    #[test]
    fn a_run_task_id_names_its_plan() {
        assert_eq!(run_plan("run.plan-01ab.5f3c-9d"), Some("plan-01ab"));
        // A plan id of the caller's own choosing may hold dots; the nonce has none.
        assert_eq!(run_plan("run.my.plan.5f3c"), Some("my.plan"));
        assert_eq!(run_plan("5f3c-9d"), None);
        assert_eq!(run_plan("run.5f3c"), None);
        assert_eq!(run_plan("run..5f3c"), None);
        assert_eq!(run_plan("run.plan."), None);
    }
}
