//! Invokers: what actually runs a step. One trait, [`Invoker`], and the implementations:
//!
//! - [`CommandInvoker`]: a map of tool (or agent) names to commands or HTTP callbacks
//!   ([`Endpoint`]); the call goes to the command's stdin as JSON, its stdout is the result
//!   (JSON, else the text), a non-zero exit is a failure. Tools and agent tasks use the same
//!   one.
//! - [`TaskInvoker`]: research / processing tasks through a [`LanguageModel`] call.
//! - [`FnInvoker`]: an in-process function (embedding applications, benchmarks).
//! - MCP `tools/call` is one more implementation, in the MCP crate's adapter.
//!
//! [`Invokers`] routes a step's action to the right one by its type; reply steps need no
//! invoker (their result is their text).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use plansmith_core::llm::BoxFuture;
use plansmith_core::secrets::{self, ProviderKeys};
use plansmith_core::{Action, CompletionRequest, LanguageModel, Message};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest stdout or stderr read from a command (bytes); more is an error.
const MAX_OUTPUT_BYTES: usize = 16 << 20;

/// One call of a step, with its arguments already resolved (no `$ref` left).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    /// The plan.
    pub plan_id: String,
    /// The step.
    pub step_id: String,
    /// The step's title.
    pub title: String,
    /// The step's description.
    pub description: String,
    /// The attempt number (1 for the first).
    pub attempt: u32,
    /// `plan:base_version:step:attempt`; the same key when an attempt is re-run after its
    /// node crashed. Pass it on to anything with side effects.
    pub idempotency_key: String,
    /// The action, `$ref`s replaced by the referenced values.
    pub action: Action,
    /// The plan's goal.
    pub goal: String,
    /// Results of the step's dependencies, by step id.
    pub inputs: BTreeMap<String, Value>,
    /// Where an invoker that calls a model adds the tokens it spent (the run's budget counts
    /// them).
    #[serde(skip)]
    pub tokens: TokenMeter,
    /// For an attempt re-run after its node died: the task its tool's server made of the
    /// first run's call (reported through [`CallProgress::task`]); an invoker that knows it
    /// follows that task instead of calling again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_task: Option<String>,
    /// A person's answer to the task that an earlier attempt of this step left asking
    /// ([`InvokeError::asks`]): the invoker sends it to the task and follows the task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<TaskInput>,
}

/// Model tokens spent by one call, added by the invoker as it spends them. Clones share the
/// count.
#[derive(Debug, Clone, Default)]
pub struct TokenMeter(Arc<std::sync::atomic::AtomicU64>);

impl TokenMeter {
    /// Adds a model call's tokens, prompt and completion.
    pub fn add(&self, usage: plansmith_core::Usage) {
        let tokens = u64::from(usage.prompt_tokens) + u64::from(usage.completion_tokens);
        self.0
            .fetch_add(tokens, std::sync::atomic::Ordering::Relaxed);
    }

    /// The tokens added so far.
    pub fn spent(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A meter is not part of what a call is: any two compare equal.
impl PartialEq for TokenMeter {
    fn eq(&self, _other: &TokenMeter) -> bool {
        true
    }
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct InvokeError {
    /// What went wrong, for people and for the replanner.
    pub message: String,
    /// Whether another attempt may succeed (a crash, a timeout, a non-zero exit); false for
    /// a call that cannot work as written (no such tool, bad arguments).
    pub retryable: bool,
    /// The call did not fail: its tool waits for a person's answer (an MCP task in
    /// `input_required`). The task and its requests; the step waits for a decision whose note
    /// is the answer, and the next attempt answers the task and follows it.
    pub asks: Option<Box<TaskInput>>,
}

/// An MCP task that asks for input, and, once a person answered, the answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskInput {
    /// The task.
    pub task: String,
    /// Its `inputRequests`, by key.
    pub requests: Value,
    /// The person's answer (empty until they give it).
    pub answer: String,
}

impl InvokeError {
    /// A failure another attempt may fix.
    pub fn transient(message: impl Into<String>) -> InvokeError {
        InvokeError {
            message: message.into(),
            retryable: true,
            asks: None,
        }
    }

    /// A failure no retry fixes.
    pub fn permanent(message: impl Into<String>) -> InvokeError {
        InvokeError {
            message: message.into(),
            retryable: false,
            asks: None,
        }
    }

    /// The tool waits for a person's answer to `input` (see [`InvokeError::asks`]).
    pub fn asks(message: impl Into<String>, input: TaskInput) -> InvokeError {
        InvokeError {
            message: message.into(),
            retryable: false,
            asks: Some(Box::new(input)),
        }
    }
}

/// Runs calls. In the spirit of `tower::Service`: one required method, no `Clone`
/// supertrait; share it behind an `Arc`.
pub trait Invoker: Send + Sync {
    /// Runs one call and returns its result.
    fn invoke<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<Value, InvokeError>>;

    /// [`Invoker::invoke`], telling `progress` how far the call has come whenever the tool
    /// says (an MCP tool's progress notifications). By default it says nothing.
    fn invoke_reporting<'a>(
        &'a self,
        call: &'a Call,
        progress: &'a (dyn Fn(CallProgress) + Send + Sync),
    ) -> BoxFuture<'a, Result<Value, InvokeError>> {
        let _ = progress;
        self.invoke(call)
    }
}

/// How far a call has come, as its tool reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallProgress {
    /// The progress so far.
    pub progress: f64,
    /// The progress at which the call is done, when the tool knows it.
    pub total: Option<f64>,
    /// What the tool is doing, when it says.
    pub message: Option<String>,
    /// The call became a task on its server with this id (the MCP tasks extension): the run
    /// records it, so a re-run of the attempt follows the task instead of calling again.
    pub task: Option<String>,
}

/// The invokers of an executor, by action type.
#[derive(Clone, Default)]
pub struct Invokers {
    /// Tool steps (`tool {name, arguments}`).
    pub tools: Option<Arc<dyn Invoker>>,
    /// Agent steps (`agent {agent, query}`).
    pub agents: Option<Arc<dyn Invoker>>,
    /// Task steps (`task {kind}`).
    pub tasks: Option<Arc<dyn Invoker>>,
}

impl std::fmt::Debug for Invokers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invokers")
            .field("tools", &self.tools.is_some())
            .field("agents", &self.agents.is_some())
            .field("tasks", &self.tasks.is_some())
            .finish()
    }
}

impl Invokers {
    /// Runs `call` with the invoker for its action; a reply step's result is `{"text": …}`.
    pub async fn invoke(&self, call: &Call) -> Result<Value, InvokeError> {
        self.invoke_reporting(call, &|_| {}).await
    }

    /// [`Invokers::invoke`] with the call's progress reports to `progress`
    /// ([`Invoker::invoke_reporting`]).
    pub async fn invoke_reporting(
        &self,
        call: &Call,
        progress: &(dyn Fn(CallProgress) + Send + Sync),
    ) -> Result<Value, InvokeError> {
        let (invoker, what) = match &call.action {
            Action::Reply { text } => return Ok(json!({ "text": text })),
            Action::Tool { .. } => (&self.tools, "tool"),
            Action::Agent { .. } => (&self.agents, "agent"),
            Action::Task { .. } => (&self.tasks, "task"),
        };
        match invoker {
            Some(invoker) => invoker.invoke_reporting(call, progress).await,
            None => Err(InvokeError::permanent(format!(
                "no invoker is configured for {what} steps"
            ))),
        }
    }
}

/// How one tool or agent is reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Endpoint {
    /// A command: argv, the call as JSON on stdin, the result on stdout.
    Command {
        /// Program and arguments.
        command: Vec<String>,
        /// Extra environment variables (added to ours, which lack the provider key
        /// variables: see [`CommandInvoker`]).
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Working directory (default: the executor's).
        #[serde(default)]
        cwd: Option<PathBuf>,
        /// Longest run before the call fails (default 300,000 ms).
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// An HTTP callback: the call is POSTed as JSON, a 2xx body is the result.
    Http {
        /// The URL.
        url: String,
        /// Longest wait for the answer (default 300,000 ms).
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
}

/// The file that maps names to endpoints (`plansmith run --commands FILE`):
/// `{"tools": {"name": {"command": ["sh", "x.sh"]}}, "agents": {"Name": {"url": "http://…"}}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandMap {
    /// Tool name → endpoint.
    #[serde(default)]
    pub tools: BTreeMap<String, Endpoint>,
    /// Agent name → endpoint.
    #[serde(default)]
    pub agents: BTreeMap<String, Endpoint>,
}

/// Runs tools or agents through commands and HTTP callbacks. The JSON sent is
/// `{"plan_id", "step_id", "attempt", "idempotency_key", "goal", "inputs", …}` plus
/// `"tool", "arguments"` for a tool or `"agent", "query"` for an agent; commands also get
/// `PLANSMITH_IDEMPOTENCY_KEY`, `PLANSMITH_ATTEMPT`, `PLANSMITH_PLAN_ID` and
/// `PLANSMITH_STEP_ID` in their environment.
///
/// Commands do not inherit the provider key variables ([`ProviderKeys`]; a command's own
/// `env` may still set one), and a key's value is `[redacted]` in whatever a command or
/// callback returns, result or error.
#[derive(Debug, Clone)]
pub struct CommandInvoker {
    endpoints: HashMap<String, Endpoint>,
    http: reqwest::Client,
    keys: ProviderKeys,
}

impl CommandInvoker {
    /// An invoker over `endpoints` (name → endpoint), withholding the default provider key
    /// variables.
    pub fn new(endpoints: impl IntoIterator<Item = (String, Endpoint)>) -> CommandInvoker {
        CommandInvoker {
            endpoints: endpoints.into_iter().collect(),
            http: reqwest::Client::new(),
            keys: ProviderKeys::default(),
        }
    }

    /// Withholds and redacts `keys` (the configured `api_key_env` variables added to the
    /// defaults) instead of the default ones.
    pub fn with_provider_keys(mut self, keys: ProviderKeys) -> CommandInvoker {
        self.keys = keys;
        self
    }

    /// The names it can run.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.endpoints.keys().map(String::as_str)
    }
}

impl Invoker for CommandInvoker {
    fn invoke<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<Value, InvokeError>> {
        Box::pin(async move {
            let (name, payload) = match &call.action {
                Action::Tool { name, arguments } => {
                    (name.as_str(), json!({"tool": name, "arguments": arguments}))
                }
                Action::Agent { agent, query } => {
                    (agent.as_str(), json!({"agent": agent, "query": query}))
                }
                other => {
                    return Err(InvokeError::permanent(format!(
                        "a command invoker runs tools and agents, not {} steps",
                        other.type_name()
                    )));
                }
            };
            let endpoint = self.endpoints.get(name).ok_or_else(|| {
                InvokeError::permanent(format!("no command or URL is configured for `{name}`"))
            })?;
            let mut body = json!({
                "plan_id": call.plan_id,
                "step_id": call.step_id,
                "attempt": call.attempt,
                "idempotency_key": call.idempotency_key,
                "goal": call.goal,
                "inputs": call.inputs,
            });
            if let (Some(body), Some(extra)) = (body.as_object_mut(), payload.as_object()) {
                body.extend(extra.clone());
            }
            let result = match endpoint {
                Endpoint::Command {
                    command,
                    env,
                    cwd,
                    timeout_ms,
                } => {
                    run_command(
                        call,
                        command,
                        env,
                        &self.keys,
                        cwd.as_ref(),
                        *timeout_ms,
                        &body,
                    )
                    .await
                }
                Endpoint::Http { url, timeout_ms } => {
                    post_json(&self.http, url, *timeout_ms, &call.idempotency_key, &body).await
                }
            };
            // A tool that prints a key anyway (it read it elsewhere, or its own `env` set
            // it) does not get it into the run's results, events and errors.
            let keys = self.keys.values();
            result
                .map(|value| secrets::redact_json(value, &keys))
                .map_err(|err| InvokeError {
                    message: secrets::redact_all(&err.message, &keys),
                    ..err
                })
        })
    }
}

/// Runs `command` with its own `env` and without the `withheld` variables.
async fn run_command(
    call: &Call,
    command: &[String],
    env: &BTreeMap<String, String>,
    withheld: &ProviderKeys,
    cwd: Option<&PathBuf>,
    timeout_ms: Option<u64>,
    body: &Value,
) -> Result<Value, InvokeError> {
    let Some((program, args)) = command.split_first() else {
        return Err(InvokeError::permanent("empty command"));
    };
    let mut cmd = tokio::process::Command::new(program);
    // Removed first, so that the command's own `env` may still set one on purpose.
    for name in withheld.variables() {
        cmd.env_remove(name);
    }
    cmd.args(args)
        .envs(env)
        .env("PLANSMITH_IDEMPOTENCY_KEY", &call.idempotency_key)
        .env("PLANSMITH_ATTEMPT", call.attempt.to_string())
        .env("PLANSMITH_PLAN_ID", &call.plan_id)
        .env("PLANSMITH_STEP_ID", &call.step_id)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own process group, so that stopping the call stops whatever the command started
    // (`sh tool.sh` runs its work in children of the shell), not the shell alone.
    #[cfg(unix)]
    cmd.process_group(0);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd
        .spawn()
        .map_err(|err| InvokeError::permanent(format!("cannot start `{program}`: {err}")))?;
    let group = GroupGuard::new(child.id());
    let input = serde_json::to_vec(body).map_err(|err| InvokeError::permanent(err.to_string()))?;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let timeout = Duration::from_millis(timeout_ms.unwrap_or(300_000));
    let write = async {
        if let Some(mut pipe) = stdin.take() {
            // A command that does not read its stdin closes the pipe: not an error.
            let _ = pipe.write_all(&input).await;
            let _ = pipe.shutdown().await;
        }
    };
    let read = async {
        // Output over the limit ends the reading at once: the command, blocked on the pipe
        // nobody reads any more, is then killed as `group` is dropped.
        let (out, err) = tokio::try_join!(
            read_bounded(program, "stdout", stdout.as_mut()),
            read_bounded(program, "stderr", stderr.as_mut())
        )?;
        let status = child
            .wait()
            .await
            .map_err(|err| InvokeError::transient(format!("`{program}`: {err}")))?;
        Ok::<_, InvokeError>((out, err, status))
    };
    // Writing stops when the reading ends (a command may exit without reading its input).
    let work = async {
        tokio::pin!(read);
        tokio::select! {
            output = &mut read => output,
            () = write => read.await,
        }
    };
    // On a timeout or an error `group` kills the command's processes as it is dropped; so it
    // does when this call is dropped (the step was stopped, the run aborted, the plan deleted).
    let (out, err, status) = tokio::time::timeout(timeout, work).await.map_err(|_| {
        InvokeError::transient(format!(
            "`{program}` timed out after {} ms",
            timeout.as_millis()
        ))
    })??;
    // The command ended by itself: what it left running on purpose stays.
    group.disarm();
    if !status.success() {
        let stderr_text = String::from_utf8_lossy(&err);
        let tail: String = tail(stderr_text.trim(), 400);
        return Err(InvokeError::transient(format!(
            "`{program}` exited with {}{}",
            status
                .code()
                .map_or_else(|| "a signal".to_owned(), |c| format!("status {c}")),
            if tail.is_empty() {
                String::new()
            } else {
                format!(": {tail}")
            }
        )));
    }
    Ok(parse_output(&out))
}

/// Kills a command's process group (the command and every process it started that did not
/// leave the group) when dropped before [`GroupGuard::disarm`]: when the call ended before
/// the command did. The command's own process is also killed by tokio's `kill_on_drop`, but
/// that signal does not reach its children.
struct GroupGuard {
    /// The group's id (the command's pid, as it leads its group); `None` once disarmed.
    #[cfg_attr(not(unix), allow(dead_code))]
    group: Option<u32>,
}

impl GroupGuard {
    fn new(pid: Option<u32>) -> GroupGuard {
        GroupGuard { group: pid }
    }

    fn disarm(mut self) {
        self.group = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(group) = self.group.and_then(|id| i32::try_from(id).ok()) {
            use nix::sys::signal::{Signal, killpg};
            // Fails only when no process of the group is left (ESRCH): nothing to do then.
            // The group's id cannot be reused while any of its processes lives.
            if let Err(err) = killpg(nix::unistd::Pid::from_raw(group), Signal::SIGKILL)
                && err != nix::errno::Errno::ESRCH
            {
                tracing::warn!("cannot stop the processes of command group {group}: {err}");
            }
        }
    }
}

async fn read_bounded<R: tokio::io::AsyncRead + Unpin>(
    program: &str,
    what: &str,
    pipe: Option<&mut R>,
) -> Result<Vec<u8>, InvokeError> {
    let mut buf = Vec::new();
    if let Some(pipe) = pipe {
        let limit = u64::try_from(MAX_OUTPUT_BYTES + 1).unwrap_or(u64::MAX);
        pipe.take(limit)
            .read_to_end(&mut buf)
            .await
            .map_err(|err| InvokeError::transient(format!("reading output: {err}")))?;
        if buf.len() > MAX_OUTPUT_BYTES {
            return Err(InvokeError::permanent(format!(
                "`{program}` output too large: its {what} is over {MAX_OUTPUT_BYTES} bytes ({} MiB), \
                 the most read from a command",
                MAX_OUTPUT_BYTES >> 20
            )));
        }
    }
    Ok(buf)
}

/// Output as JSON when it is JSON, else the trimmed text as a string.
fn parse_output(bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    let trimmed = text.trim();
    serde_json::from_str(trimmed).unwrap_or_else(|_| Value::String(trimmed.to_owned()))
}

fn tail(text: &str, max_chars: usize) -> String {
    let n = text.chars().count();
    text.chars().skip(n.saturating_sub(max_chars)).collect()
}

async fn post_json(
    http: &reqwest::Client,
    url: &str,
    timeout_ms: Option<u64>,
    key: &str,
    body: &Value,
) -> Result<Value, InvokeError> {
    let timeout = Duration::from_millis(timeout_ms.unwrap_or(300_000));
    let bytes = serde_json::to_vec(body).map_err(|err| InvokeError::permanent(err.to_string()))?;
    let response = http
        .post(url)
        .timeout(timeout)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(bytes)
        .send()
        .await
        .map_err(|err| InvokeError::transient(format!("POST {url}: {err}")))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|err| InvokeError::transient(format!("POST {url}: {err}")))?;
    if !status.is_success() {
        let message = format!("POST {url} answered {status}: {}", tail(text.trim(), 400));
        // 4xx (other than 408/429) will not change on retry.
        return Err(
            if status.is_client_error() && status != 408 && status != 429 {
                InvokeError::permanent(message)
            } else {
                InvokeError::transient(message)
            },
        );
    }
    Ok(parse_output(text.as_bytes()))
}

/// Research and processing tasks through a language model: the task, the goal and the
/// dependencies' results go in, the model's text is the result (`{"text": …}`).
pub struct TaskInvoker {
    model: Arc<dyn LanguageModel>,
    max_tokens: u32,
}

impl std::fmt::Debug for TaskInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskInvoker")
            .field("model", &self.model.name())
            .finish()
    }
}

impl TaskInvoker {
    /// Tasks through `model`, at most `max_tokens` per answer.
    pub fn new(model: Arc<dyn LanguageModel>, max_tokens: u32) -> TaskInvoker {
        TaskInvoker { model, max_tokens }
    }
}

impl Invoker for TaskInvoker {
    fn invoke<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<Value, InvokeError>> {
        Box::pin(async move {
            let Action::Task {
                kind,
                need_web_search,
            } = &call.action
            else {
                return Err(InvokeError::permanent(
                    "a task invoker runs task steps only",
                ));
            };
            let inputs = serde_json::to_string_pretty(&call.inputs).unwrap_or_default();
            let mut prompt = format!(
                "Goal: {}\nTask ({kind}): {}\n{}\n",
                call.goal, call.title, call.description
            );
            if !call.inputs.is_empty() {
                prompt.push_str(&format!("Results of earlier steps:\n{inputs}\n"));
            }
            if *need_web_search {
                prompt.push_str("No web search is available: say what could not be checked.\n");
            }
            let request = CompletionRequest {
                messages: vec![
                    Message::system(
                        "You carry out one step of a plan. Answer with the step's result only, \
                         based on the results given; do not invent results of steps not shown.",
                    ),
                    Message::user(prompt),
                ],
                constraint: None,
                max_tokens: self.max_tokens,
                temperature: 0.0,
            };
            let completion = self
                .model
                .complete(request)
                .await
                .map_err(|err| InvokeError {
                    // A rejected request or a refusal fails the same way on every attempt.
                    retryable: err.is_retryable(),
                    message: err.to_string(),
                    asks: None,
                })?;
            call.tokens.add(completion.usage);
            Ok(json!({ "text": completion.text.trim() }))
        })
    }
}

/// The signature of the function behind an [`FnInvoker`].
pub type InvokeFn = dyn Fn(&Call) -> Result<Value, InvokeError> + Send + Sync;

/// An in-process invoker: a function of the call (for applications that embed the executor
/// with their own tools, and for measuring the scheduler without process start-up).
#[derive(Clone)]
pub struct FnInvoker {
    function: Arc<InvokeFn>,
}

impl std::fmt::Debug for FnInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FnInvoker")
    }
}

impl FnInvoker {
    /// An invoker calling `function`.
    pub fn new(
        function: impl Fn(&Call) -> Result<Value, InvokeError> + Send + Sync + 'static,
    ) -> FnInvoker {
        FnInvoker {
            function: Arc::new(function),
        }
    }
}

impl Invoker for FnInvoker {
    fn invoke<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<Value, InvokeError>> {
        let result = (self.function)(call);
        Box::pin(async move { result })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_json_or_text() {
        assert_eq!(parse_output(b" {\"a\": 1}\n"), json!({"a": 1}));
        assert_eq!(parse_output(b"hello\n"), json!("hello"));
        assert_eq!(parse_output(b""), json!(""));
    }

    #[test]
    fn command_map_reads_both_endpoint_kinds() {
        let map: CommandMap = serde_json::from_value(json!({
            "tools": {"a": {"command": ["sh", "-c", "echo 1"], "timeout_ms": 5}},
            "agents": {"B": {"url": "http://127.0.0.1:9/x"}}
        }))
        .unwrap();
        assert!(matches!(map.tools["a"], Endpoint::Command { .. }));
        assert!(matches!(map.agents["B"], Endpoint::Http { .. }));
        assert!(serde_json::from_value::<CommandMap>(json!({"tool": {}})).is_err());
    }

    /// A task whose model call failed is retried only when the failure may pass: a rate limit
    /// or a server error, not a request the provider rejected.
    #[test]
    fn a_task_is_retried_only_after_a_model_failure_that_may_pass() {
        let script: plansmith_core::llm::Script = serde_json::from_value(json!({"turns": [
            {"error": "overloaded", "status": 503},
            {"error": "rate limited", "status": 429},
            {"error": "context_length_exceeded", "status": 400},
            {"error": "engine stopped"},
        ]}))
        .unwrap();
        let invoker = TaskInvoker::new(
            Arc::new(plansmith_core::ScriptedModel::from_script(script)),
            64,
        );
        let call = Call {
            plan_id: "p".into(),
            step_id: "s1".into(),
            title: "Summarise".into(),
            description: String::new(),
            attempt: 1,
            idempotency_key: "p:1:s1:1".into(),
            remote_task: None,
            input: None,
            action: Action::Task {
                kind: plansmith_core::TaskKind::Processing,
                need_web_search: false,
            },
            goal: "Summarise the news".into(),
            inputs: BTreeMap::new(),
            tokens: TokenMeter::default(),
        };
        let retryable: Vec<(bool, String)> = (0..4)
            .map(|_| {
                let err = futures::executor::block_on(invoker.invoke(&call)).unwrap_err();
                (err.retryable, err.message)
            })
            .collect();
        assert_eq!(
            retryable.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
            [true, true, false, false],
            "{retryable:?}"
        );
        assert!(retryable[2].1.contains("HTTP 400"), "{retryable:?}");
    }
}
