//! One server's connection: spawning or reaching it, listing its tools page by page, calling
//! them, reconnecting when the connection died, and closing it.

use std::collections::{HashSet, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use process_wrap::tokio::CommandWrap;
#[cfg(unix)]
use process_wrap::tokio::ProcessGroup;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelTaskParams, CancelledNotificationParam,
    ClientRequest, CustomRequest, ErrorCode, PaginatedRequestParams, RequestId, RequestMetaObject,
    ServerResult, TaskPayload, UpdateTaskParams,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value};
use tokio::io::AsyncBufReadExt;

use super::progress::ProgressRoutes;
use super::{CLOSE_TIMEOUT, CallExtras, ClientOptions, ServerProblem, ToolOutput};
use crate::McpError;
use crate::config::{ServerSpec, Transport};

type Client = RunningService<RoleClient, ProgressRoutes>;

/// The service loop ended or its transport closed (the server exited, the HTTP session died).
fn is_dead(client: &Client) -> bool {
    client.is_closed() || client.peer().is_transport_closed()
}

/// Lines of a server's stderr kept for error messages.
const STDERR_LINES: usize = 12;

/// One server: its spec, the live client (if any) and the tail of its stderr.
///
/// The lock guards connecting, not calling: a call clones the client out and runs without it,
/// so calls to one server run at the same time (MCP requests are multiplexed by id).
pub(super) struct Connection {
    pub(super) spec: ServerSpec,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// Shared by the connection's successive clients.
    progress: ProgressRoutes,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Tools of this server that answered a plain call with "requires task augmentation".
    task_tools: Mutex<HashSet<String>>,
}

impl Connection {
    pub(super) fn new(spec: ServerSpec) -> Connection {
        Connection {
            spec,
            client: tokio::sync::Mutex::new(None),
            progress: ProgressRoutes::default(),
            stderr: Arc::new(Mutex::new(VecDeque::new())),
            task_tools: Mutex::new(HashSet::new()),
        }
    }

    fn name(&self) -> &str {
        &self.spec.name
    }

    /// The last lines the server wrote on stderr, for an error message.
    fn stderr_tail(&self) -> String {
        let lines = self
            .stderr
            .lock()
            .map(|lines| lines.iter().cloned().collect::<Vec<_>>().join(" | "))
            .unwrap_or_default();
        if lines.is_empty() {
            String::new()
        } else {
            format!(" (stderr: {lines})")
        }
    }

    /// Spawns or reaches the server and runs the `initialize` handshake, bounded.
    async fn open(&self, options: &ClientOptions) -> Result<Client, McpError> {
        let server = self.name().to_owned();
        let handshake =
            async {
                match &self.spec.transport {
                    Transport::Stdio {
                        command,
                        args,
                        env,
                        cwd,
                    } => {
                        let mut cmd = tokio::process::Command::new(command);
                        // Removed first, so that the server's own `env` may still set one.
                        for name in options.provider_keys.variables() {
                            cmd.env_remove(name);
                        }
                        cmd.args(args).envs(env);
                        if let Some(cwd) = cwd {
                            cmd.current_dir(cwd);
                        }
                        let mut cmd = CommandWrap::from(cmd);
                        // Its own process group: a terminal's Ctrl-C (SIGINT to the foreground
                        // group) reaches plansmith, which stops the calls and then closes the
                        // server; the server dying under a call in flight would fail the call.
                        // rmcp's SIGTERM and kill then reach whatever the server started too.
                        #[cfg(unix)]
                        cmd.wrap(ProcessGroup::leader());
                        let (transport, stderr) = TokioChildProcess::builder(cmd)
                            .stderr(Stdio::piped())
                            .spawn()
                            .map_err(|err| McpError::Spawn {
                                server: server.clone(),
                                message: format!("cannot start `{command}`: {err}"),
                            })?;
                        if let Some(stderr) = stderr {
                            self.collect_stderr(stderr);
                        }
                        self.progress.clone().serve(transport).await.map_err(|err| {
                            McpError::Protocol {
                                server: server.clone(),
                                message: format!("initialize failed: {err}"),
                            }
                        })
                    }
                    Transport::Http { url, headers } => {
                        let transport = http_transport(&server, url, headers)?;
                        self.progress.clone().serve(transport).await.map_err(|err| {
                            McpError::Protocol {
                                server: server.clone(),
                                message: format!("initialize failed: {err}"),
                            }
                        })
                    }
                }
            };
        match tokio::time::timeout(options.connect_timeout, handshake).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(err)) => Err(self.with_stderr(err).await),
            Err(_) => Err(self
                .with_stderr(McpError::Timeout {
                    server,
                    operation: "initialize".into(),
                    after: options.connect_timeout,
                })
                .await),
        }
    }

    /// Adds the stderr tail to a spawn or protocol error (after a moment for the pipe to
    /// drain: a server that exits at start usually says why just before).
    async fn with_stderr(&self, err: McpError) -> McpError {
        if !matches!(self.spec.transport, Transport::Stdio { .. }) {
            return err;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let tail = self.stderr_tail();
        match err {
            McpError::Protocol { server, message } => McpError::Protocol {
                server,
                message: format!("{message}{tail}"),
            },
            McpError::Timeout {
                server,
                operation,
                after,
            } if !tail.is_empty() => McpError::Protocol {
                server,
                message: format!(
                    "no answer to {operation} within {} s{tail}",
                    after.as_secs_f64()
                ),
            },
            other => other,
        }
    }

    fn collect_stderr(&self, stderr: tokio::process::ChildStderr) {
        let lines = Arc::clone(&self.stderr);
        let server = self.name().to_owned();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                tracing::debug!(server = %server, "stderr: {line}");
                if let Ok(mut lines) = lines.lock() {
                    if lines.len() == STDERR_LINES {
                        lines.pop_front();
                    }
                    lines.push_back(line.chars().take(300).collect());
                }
            }
        });
    }

    /// The live client, connecting (again) if there is none or it has closed.
    async fn ensure(&self, options: &ClientOptions) -> Result<Arc<Client>, McpError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            if !is_dead(client) {
                return Ok(Arc::clone(client));
            }
            tracing::info!(server = %self.name(), "connection closed; reconnecting");
            *slot = None;
        }
        let client = Arc::new(self.open(options).await?);
        *slot = Some(Arc::clone(&client));
        Ok(client)
    }

    /// Forgets `client` if it is still the live one (it died: the next call reconnects).
    async fn forget(&self, client: &Arc<Client>) {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_some_and(|live| Arc::ptr_eq(live, client)) {
            *slot = None;
        }
    }

    /// Closes the connection (see [`McpTools::close`](super::McpTools::close)).
    pub(super) async fn close(&self) {
        let Some(client) = self.client.lock().await.take() else {
            return;
        };
        match Arc::try_unwrap(client) {
            Ok(mut client) => {
                if !matches!(client.close_with_timeout(CLOSE_TIMEOUT).await, Ok(Some(_))) {
                    tracing::warn!(server = %self.name(), "the server did not close in time");
                }
            }
            // A call is in flight: end the session under it, without waiting.
            Err(shared) => shared.cancellation_token().cancel(),
        }
    }

    /// `tools/list`, every page (bounded), as JSON documents (`name`, `inputSchema`, …).
    pub(super) async fn list_tools(
        &self,
        options: &ClientOptions,
    ) -> Result<(Vec<Value>, Vec<ServerProblem>), McpError> {
        let client = self.ensure(options).await?;
        let mut tools = Vec::new();
        let mut problems = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen_cursors = std::collections::HashSet::new();
        for page in 0.. {
            if page == options.max_pages {
                problems.push(ServerProblem {
                    server: self.name().to_owned(),
                    tool: None,
                    message: format!(
                        "tools/list still had more pages after {page}; the rest was not read"
                    ),
                });
                break;
            }
            let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
            let result =
                tokio::time::timeout(options.list_timeout, client.list_tools(Some(params)))
                    .await
                    .map_err(|_| McpError::Timeout {
                        server: self.name().to_owned(),
                        operation: "tools/list".into(),
                        after: options.list_timeout,
                    })?
                    .map_err(|err| self.service_error("tools/list", err))?;
            for tool in result.tools {
                match serde_json::to_value(&tool) {
                    Ok(value) => tools.push(value),
                    Err(err) => problems.push(ServerProblem {
                        server: self.name().to_owned(),
                        tool: Some(tool.name.to_string()),
                        message: format!("cannot read the tool: {err}"),
                    }),
                }
            }
            match result.next_cursor {
                Some(next) if seen_cursors.insert(next.clone()) => cursor = Some(next),
                Some(next) => {
                    problems.push(ServerProblem {
                        server: self.name().to_owned(),
                        tool: None,
                        message: format!("tools/list repeated the cursor `{next}`; stopped there"),
                    });
                    break;
                }
                None => break,
            }
        }
        Ok((tools, problems))
    }

    pub(super) async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        options: &ClientOptions,
        extras: CallExtras<'_>,
    ) -> Result<ToolOutput, McpError> {
        let client = self.ensure(options).await?;
        let operation = format!("tools/call `{tool}`");
        let total = self.spec.max_call.unwrap_or(options.max_call);
        // A task an earlier attempt started is polled, not called again.
        if let Some(task) = &extras.task {
            if let Some(responses) = extras.input_responses.clone() {
                client
                    .peer()
                    .update_task(UpdateTaskParams::new(
                        task.clone(),
                        responses.into_iter().collect(),
                    ))
                    .await
                    .map_err(|err| self.service_error(&format!("task `{task}`"), err))?;
            }
            let result = self.await_task(&client, task, None, total).await?;
            return Ok(tool_output(result));
        }
        // A tool an earlier call found to require a task is called as one at once.
        let known_task = self
            .task_tools
            .lock()
            .is_ok_and(|tools| tools.contains(tool));
        let mut answer = self
            .send_call(&client, tool, &arguments, known_task, options, &extras)
            .await;
        if !known_task && needs_task(&answer) {
            // A 2025-11-25 server refuses a plain call of a tool whose `execution.taskSupport`
            // is `required` (a field rmcp's `Tool` does not keep) and runs nothing; the call is
            // sent again with `task`. A server without tasks ignores that field.
            let retried = self
                .send_call(&client, tool, &arguments, true, options, &extras)
                .await;
            if legacy_task(&retried).is_some()
                && let Ok(mut tools) = self.task_tools.lock()
            {
                tools.insert(tool.to_owned());
            }
            if !needs_task(&retried) {
                answer = retried;
            }
        }
        if let Some((task, poll_ms)) = legacy_task(&answer) {
            if let Some(on_task) = extras.on_task {
                on_task(&task);
            }
            let result = self.await_task(&client, &task, poll_ms, total).await?;
            return Ok(tool_output(result));
        }
        let result = match answer {
            Ok(ServerResult::CallToolResult(result)) => result,
            Ok(ServerResult::CreateTaskResult(created)) => {
                let task = created.task.task_id.clone();
                if let Some(on_task) = extras.on_task {
                    on_task(&task);
                }
                self.await_task(&client, &task, created.task.poll_interval_ms, total)
                    .await?
            }
            Ok(ServerResult::InputRequiredResult(_)) => {
                return Err(McpError::Protocol {
                    server: self.name().to_owned(),
                    message: format!(
                        "{operation}: the tool asked for input (elicitation or sampling), \
                         which plansmith does not answer"
                    ),
                });
            }
            Ok(_) => {
                return Err(McpError::Protocol {
                    server: self.name().to_owned(),
                    message: format!("{operation}: the answer is not a tool result"),
                });
            }
            Err(ServiceError::Timeout { timeout }) => {
                return Err(McpError::Timeout {
                    server: self.name().to_owned(),
                    operation,
                    after: timeout,
                });
            }
            Err(err) => {
                if is_dead(&client) {
                    // Reconnected on the next call; this one may have run, so it is not repeated.
                    self.forget(&client).await;
                }
                return Err(self.service_error(&operation, err));
            }
        };
        Ok(tool_output(result))
    }

    /// Sends `tools/call` for `tool`; `as_task` adds the 2025-11-25 `task` field (with a
    /// time to live of the call's longest duration), which rmcp's typed request cannot carry.
    /// Bounded by the time without an answer or a progress notification, and by a total. Past
    /// either, rmcp sends `notifications/cancelled`; given up by the caller (a step stopped),
    /// `Abandoned` does.
    async fn send_call(
        &self,
        client: &Client,
        tool: &str,
        arguments: &Map<String, Value>,
        as_task: bool,
        options: &ClientOptions,
        extras: &CallExtras<'_>,
    ) -> Result<ServerResult, ServiceError> {
        let total = self.spec.max_call.unwrap_or(options.max_call);
        let bounds = PeerRequestOptions::with_timeout(
            self.spec.call_timeout.unwrap_or(options.call_timeout),
        )
        .reset_timeout_on_progress()
        .with_max_total_timeout(total);
        let bounds = if extras.meta.is_empty() {
            bounds
        } else {
            bounds.with_meta(RequestMetaObject::from(extras.meta.clone()))
        };
        let request = if as_task {
            let ttl = u64::try_from(total.as_millis()).unwrap_or(u64::MAX);
            ClientRequest::CustomRequest(CustomRequest::new(
                "tools/call",
                Some(serde_json::json!({
                    "name": tool,
                    "arguments": arguments,
                    "task": {"ttl": ttl},
                })),
            ))
        } else {
            let params =
                CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone());
            ClientRequest::CallToolRequest(CallToolRequest::new(params))
        };
        let handle = client
            .peer()
            .send_request_with_option(request, bounds)
            .await?;
        let mut abandoned = Abandoned::new(client.peer(), handle.id.clone());
        // (A report sent before the route exists is missed; the next one comes through.)
        let (_route, mut reports) = self.progress.route(handle.progress_token.clone());
        let answer = handle.await_response();
        tokio::pin!(answer);
        let answer = loop {
            tokio::select! {
                answer = &mut answer => break answer,
                Some(report) = reports.recv() => {
                    if let Some(on_progress) = extras.on_progress {
                        on_progress(report);
                    }
                }
            }
        };
        abandoned.disarm();
        answer
    }

    /// Polls task `task` (the tasks extension) until it ends, at the interval the server
    /// suggests (within 100 ms and 5 s), for at most `total`; its tool result. Dropped before
    /// the end (the step was stopped), the task is cancelled on the server.
    async fn await_task(
        &self,
        client: &Client,
        task: &str,
        poll_ms: Option<u64>,
        total: Duration,
    ) -> Result<rmcp::model::CallToolResult, McpError> {
        let operation = format!("task `{task}`");
        let poll = Duration::from_millis(poll_ms.unwrap_or(500).clamp(100, 5_000));
        let started = tokio::time::Instant::now();
        let mut guard = TaskGuard {
            peer: Some(client.peer().clone()),
            task: task.to_owned(),
        };
        let failed = |message: String| McpError::Protocol {
            server: self.name().to_owned(),
            message: format!("{operation}: {message}"),
        };
        loop {
            // Sent untyped: a 2025-11-25 server's answer (a task without its result) is not
            // rmcp's `GetTaskResult`, and comes back as the JSON it is.
            let answer = self
                .task_request(client, "tasks/get", task)
                .await
                .map_err(|err| self.service_error(&operation, err))?;
            let payload = match answer {
                ServerResult::GetTaskResult(info) => info.task.payload,
                other => {
                    let value = serde_json::to_value(&other).unwrap_or(Value::Null);
                    match value.get("status").and_then(Value::as_str) {
                        // 2025-11-25: the result (or the call's error) is fetched with
                        // `tasks/result`; an `input_required` task waits there for the
                        // elicitation it queued, which this client declines.
                        Some("completed" | "failed" | "input_required") => {
                            let left = total.saturating_sub(started.elapsed());
                            let result = self.task_result(client, task, left).await;
                            guard.disarm();
                            return result;
                        }
                        Some("working") => TaskPayload::Working,
                        Some("cancelled") => {
                            guard.disarm();
                            return Err(failed("cancelled on the server".into()));
                        }
                        _ => return Err(failed(format!("its status is not a task: {value}"))),
                    }
                }
            };
            match payload {
                TaskPayload::Completed { result } => {
                    guard.disarm();
                    return serde_json::from_value(Value::Object(result))
                        .map_err(|err| failed(format!("its result is not a tool result: {err}")));
                }
                TaskPayload::Failed { error } => {
                    guard.disarm();
                    let message = error
                        .get("message")
                        .and_then(Value::as_str)
                        .map_or_else(|| Value::Object(error.clone()).to_string(), str::to_owned);
                    return Err(failed(format!("failed: {message}")));
                }
                TaskPayload::Cancelled => {
                    guard.disarm();
                    return Err(failed("cancelled on the server".into()));
                }
                TaskPayload::InputRequired { input_requests } => {
                    // The task waits for a person; it lives on, to be answered and polled again.
                    guard.disarm();
                    let requests = serde_json::to_value(&input_requests).unwrap_or(Value::Null);
                    let message = requests
                        .as_object()
                        .map(|all| {
                            all.values()
                                .filter_map(|r| r["params"]["message"].as_str())
                                .collect::<Vec<_>>()
                                .join(" / ")
                        })
                        .filter(|m| !m.is_empty())
                        .unwrap_or_else(|| "input the tool needs".to_owned());
                    return Err(McpError::InputRequired(Box::new(crate::TaskQuestion {
                        server: self.name().to_owned(),
                        task: task.to_owned(),
                        message,
                        requests,
                    })));
                }
                _ => {}
            }
            if started.elapsed() >= total {
                return Err(McpError::Timeout {
                    server: self.name().to_owned(),
                    operation,
                    after: total,
                });
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Sends a `tasks/*` request naming `task`, untyped.
    async fn task_request(
        &self,
        client: &Client,
        method: &str,
        task: &str,
    ) -> Result<ServerResult, ServiceError> {
        let request = CustomRequest::new(method, Some(serde_json::json!({"taskId": task})));
        client
            .peer()
            .send_request(ClientRequest::CustomRequest(request))
            .await
    }

    /// A 2025-11-25 task's outcome, by `tasks/result` (which the server answers when the task
    /// ends, within `left`): the tool's result, or the error the call ended with.
    async fn task_result(
        &self,
        client: &Client,
        task: &str,
        left: Duration,
    ) -> Result<rmcp::model::CallToolResult, McpError> {
        let operation = format!("task `{task}`");
        let answer = tokio::time::timeout(left, self.task_request(client, "tasks/result", task))
            .await
            .map_err(|_| McpError::Timeout {
                server: self.name().to_owned(),
                operation: operation.clone(),
                after: left,
            })?;
        match answer {
            Ok(ServerResult::CallToolResult(result)) => Ok(result),
            Ok(other) => Err(McpError::Protocol {
                server: self.name().to_owned(),
                message: format!(
                    "{operation}: its result is not a tool result: {}",
                    serde_json::to_value(&other).unwrap_or(Value::Null)
                ),
            }),
            Err(err) => Err(self.service_error(&operation, err)),
        }
    }

    fn service_error(&self, operation: &str, err: ServiceError) -> McpError {
        let message = match &err {
            ServiceError::TransportClosed => {
                format!(
                    "{operation}: the server closed the connection{}",
                    self.stderr_tail()
                )
            }
            other => format!("{operation}: {other}"),
        };
        McpError::Protocol {
            server: self.name().to_owned(),
            message,
        }
    }
}

/// Whether the answer to a plain `tools/call` is the refusal the 2025-11-25 protocol
/// prescribes for a tool that runs only as a task: the error -32601 (Method not found). The
/// TypeScript SDK's servers send it as a tool error result whose text starts
/// `MCP error -32601:` and names task augmentation; only that form counts, so that a tool that
/// ran and failed is never called twice.
fn needs_task(answer: &Result<ServerResult, ServiceError>) -> bool {
    match answer {
        Err(ServiceError::McpError(err)) => err.code == ErrorCode::METHOD_NOT_FOUND,
        Ok(ServerResult::CallToolResult(result)) if result.is_error == Some(true) => {
            result.content.iter().any(|block| {
                block.as_text().is_some_and(|text| {
                    text.text.starts_with("MCP error -32601:") && text.text.contains("task")
                })
            })
        }
        _ => false,
    }
}

/// The task a 2025-11-25 server made of a call (`{"task": {"taskId": …}}`, which rmcp reads
/// as no result it knows), with the poll interval it suggests.
fn legacy_task(answer: &Result<ServerResult, ServiceError>) -> Option<(String, Option<u64>)> {
    let other = match answer {
        Ok(ServerResult::CallToolResult(_) | ServerResult::CreateTaskResult(_)) | Err(_) => {
            return None;
        }
        Ok(other) => other,
    };
    let value = serde_json::to_value(other).ok()?;
    let task = value.get("task")?;
    let id = task.get("taskId")?.as_str()?.to_owned();
    Some((id, task.get("pollInterval").and_then(Value::as_u64)))
}

/// A call's result as plansmith reads it: the text blocks joined, the structured content, every
/// block as sent.
fn tool_output(result: rmcp::model::CallToolResult) -> ToolOutput {
    let content: Vec<Value> = result
        .content
        .iter()
        .filter_map(|block| serde_json::to_value(block).ok())
        .collect();
    let text = content
        .iter()
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    ToolOutput {
        is_error: result.is_error.unwrap_or(false),
        text,
        structured: result.structured_content,
        content,
    }
}

/// Sends `tasks/cancel` for a task given up before its end, unless disarmed.
struct TaskGuard {
    peer: Option<Peer<RoleClient>>,
    task: String,
}

impl TaskGuard {
    fn disarm(&mut self) {
        self.peer = None;
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if let Some(peer) = self.peer.take() {
            let task = std::mem::take(&mut self.task);
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = peer.cancel_task(CancelTaskParams::new(task)).await;
                });
            }
        }
    }
}

/// Sends `notifications/cancelled` for a request dropped before its answer, unless disarmed
/// (rmcp does the same for its own calls; a call with bounds goes through a lower-level API).
struct Abandoned {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl Abandoned {
    fn new(peer: &Peer<RoleClient>, id: RequestId) -> Abandoned {
        Abandoned {
            peer: Some(peer.clone()),
            id,
        }
    }

    fn disarm(&mut self) {
        self.peer = None;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let (Some(peer), Ok(runtime)) = (self.peer.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let id = self.id.clone();
        runtime.spawn(async move {
            let reason = Some("the caller gave up the call".to_owned());
            let _ = peer
                .notify_cancelled(CancelledNotificationParam::new(Some(id), reason))
                .await;
        });
    }
}

/// A streamable HTTP transport with the configured headers (`Authorization: Bearer …` is sent
/// as the bearer token).
fn http_transport(
    server: &str,
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, McpError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("authorization") {
            let token = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
                .unwrap_or(value);
            config.auth_header = Some(token.to_owned());
            continue;
        }
        let bad = |what: &str| McpError::Config {
            source_name: format!("server `{server}`"),
            message: format!("header `{name}`: invalid {what}"),
        };
        let header_name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad("name"))?;
        let header_value = http::HeaderValue::from_str(value).map_err(|_| bad("value"))?;
        config.custom_headers.insert(header_name, header_value);
    }
    Ok(StreamableHttpClientTransport::from_config(config))
}
