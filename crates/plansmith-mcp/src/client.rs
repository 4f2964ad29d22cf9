//! The MCP client: connect to the configured servers, import their tools into a [`Catalog`],
//! call them.
//!
//! Every server is connected concurrently and every step is bounded by a timeout
//! ([`ClientOptions`]), so a server that exits at start, hangs or answers garbage costs at most
//! its timeouts and becomes a [`ServerProblem`] naming it; the other servers' tools load. A tool
//! whose schema does not compile is left out with a problem naming the server and the tool.
//! Names that clash across servers are namespaced ([`crate::names`]); [`McpTools::call`] maps
//! a catalog name back to its server and original name. A server whose connection died is
//! reconnected on the next call.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plansmith_core::secrets::ProviderKeys;
use plansmith_core::{Catalog, CatalogProblem};
use process_wrap::tokio::CommandWrap;
#[cfg(unix)]
use process_wrap::tokio::ProcessGroup;
use rmcp::ClientHandler;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, RequestId, RequestMetaObject,
    ServerResult,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::McpError;
use crate::config::{ServerSpec, ServersConfig, Transport};
use crate::names::{self, Route};

/// Timeouts and limits of the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Spawning (or reaching) a server and the `initialize` handshake.
    pub connect_timeout: Duration,
    /// One `tools/list` page.
    pub list_timeout: Duration,
    /// One `tools/call` with neither its answer nor a progress notification (a server's
    /// `call_timeout_secs` overrides it).
    pub call_timeout: Duration,
    /// One `tools/call` in all, progress or not (a server's `max_call_secs` overrides it).
    pub max_call: Duration,
    /// Most `tools/list` pages read from one server (a server that keeps handing out cursors
    /// is cut off there, with a problem).
    pub max_pages: usize,
    /// The provider key variables a spawned server does not inherit (a server's own `env`
    /// may still set one).
    pub provider_keys: ProviderKeys,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            connect_timeout: Duration::from_secs(20),
            list_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(60),
            max_call: Duration::from_secs(3600),
            max_pages: 100,
            provider_keys: ProviderKeys::default(),
        }
    }
}

/// Something that went wrong with one server or one of its tools; the rest is still usable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerProblem {
    /// The server's name.
    pub server: String,
    /// The tool's name on that server, when the problem is one tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ServerProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tool {
            Some(tool) => write!(
                f,
                "server `{}`, tool `{tool}`: {}",
                self.server, self.message
            ),
            None => write!(f, "server `{}`: {}", self.server, self.message),
        }
    }
}

/// The result of a `tools/call`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolOutput {
    /// The server said the call failed (`isError`).
    pub is_error: bool,
    /// The text of the result's text blocks, joined by newlines.
    pub text: String,
    /// `structuredContent`, when the tool returned one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Every content block as sent.
    pub content: Vec<Value>,
}

/// How far a tool call has come, as its server reports it (`notifications/progress`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolProgress {
    /// The progress so far (grows with each report).
    pub progress: f64,
    /// The progress at which the call is done, when the server knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What the tool is doing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Routes the progress notifications of the calls in flight on one connection to their
/// callers, by progress token (rmcp gives every request one). Also the connection's MCP client
/// handler, which does nothing else.
#[derive(Clone, Default)]
struct ProgressRoutes(Arc<Mutex<HashMap<ProgressToken, mpsc::UnboundedSender<ToolProgress>>>>);

impl ProgressRoutes {
    /// Sends the progress of the request with `token` to the returned receiver until the
    /// guard is dropped.
    fn route(&self, token: ProgressToken) -> (RouteGuard, mpsc::UnboundedReceiver<ToolProgress>) {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut routes) = self.0.lock() {
            routes.insert(token.clone(), tx);
        }
        (
            RouteGuard {
                routes: self.clone(),
                token,
            },
            rx,
        )
    }
}

/// Removes a route when its call ends.
struct RouteGuard {
    routes: ProgressRoutes,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        if let Ok(mut routes) = self.routes.0.lock() {
            routes.remove(&self.token);
        }
    }
}

impl ClientHandler for ProgressRoutes {
    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        if let Ok(routes) = self.0.lock()
            && let Some(route) = routes.get(&params.progress_token)
        {
            let _ = route.send(ToolProgress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
        std::future::ready(())
    }
}

/// Connections to the configured MCP servers and the routes of their tools.
pub struct McpTools {
    connections: HashMap<String, Arc<Connection>>,
    routes: HashMap<String, Route>,
    options: ClientOptions,
}

impl fmt::Debug for McpTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTools")
            .field("servers", &self.connections.keys().collect::<Vec<_>>())
            .field("tools", &self.routes.len())
            .finish_non_exhaustive()
    }
}

/// What [`McpTools::connect`] returns: the clients, the imported catalog and every problem.
#[derive(Debug)]
pub struct Imported {
    /// The connections, for calling tools.
    pub tools: McpTools,
    /// Every valid tool of every server that answered, namespaced where names clash.
    pub catalog: Catalog,
    /// Servers that failed and tools that were left out, each naming its server (and tool).
    pub problems: Vec<ServerProblem>,
}

impl McpTools {
    /// Connects to every server of `config` concurrently and imports their tools.
    ///
    /// Never fails as a whole: a server that cannot be reached, times out or answers garbage,
    /// and a tool with an invalid schema, become [`Imported::problems`].
    pub async fn connect(config: &ServersConfig, options: ClientOptions) -> Imported {
        let listed = futures::future::join_all(config.servers.iter().map(|spec| {
            let options = options.clone();
            async move {
                let connection = Arc::new(Connection::new(spec.clone()));
                let tools = connection.list_tools(&options).await;
                (connection, tools)
            }
        }))
        .await;
        let mut problems = Vec::new();
        let mut connections = HashMap::new();
        let mut pairs = Vec::new();
        let mut documents = Vec::new();
        for (connection, tools) in listed {
            let server = connection.spec.name.clone();
            match tools {
                Ok((tools, more)) => {
                    problems.extend(more);
                    for tool in tools {
                        let original = tool
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        pairs.push((server.clone(), original));
                        documents.push(tool);
                    }
                }
                Err(err) => {
                    let text = err.to_string();
                    let prefix = format!("server `{server}`: ");
                    problems.push(ServerProblem {
                        server: server.clone(),
                        tool: None,
                        message: text.strip_prefix(&prefix).unwrap_or(&text).to_owned(),
                    });
                }
            }
            connections.insert(server, connection);
        }
        let catalog_names = names::assign(&pairs);
        let mut routes = HashMap::new();
        for ((document, name), (server, original)) in
            documents.iter_mut().zip(&catalog_names).zip(&pairs)
        {
            if let Some(object) = document.as_object_mut() {
                object.insert("name".into(), Value::String(name.clone()));
            }
            routes.insert(
                name.clone(),
                Route {
                    server: server.clone(),
                    tool: original.clone(),
                },
            );
        }
        let catalog = match Catalog::from_json_lenient(&json!({ "tools": documents })) {
            Ok((catalog, catalog_problems)) => {
                problems.extend(
                    catalog_problems
                        .into_iter()
                        .map(|problem| tool_problem(problem, &pairs)),
                );
                catalog
            }
            Err(err) => {
                problems.push(ServerProblem {
                    server: "*".into(),
                    tool: None,
                    message: err.to_string(),
                });
                Catalog::empty()
            }
        };
        routes.retain(|name, _| catalog.tool(name).is_some());
        Imported {
            tools: McpTools {
                connections,
                routes,
                options,
            },
            catalog,
            problems,
        }
    }

    /// Closes every server's connection as MCP asks (stdin closed, then `SIGTERM`, then a kill,
    /// each after a grace period; an HTTP session is ended), and waits for that, bounded by
    /// [`CLOSE_TIMEOUT`] per server. Dropping the tools without it also ends the servers, but
    /// only if the runtime outlives the drop: a program should close before it exits.
    /// A call still in flight loses its connection.
    pub async fn close(&self) {
        futures::future::join_all(self.connections.values().map(|c| c.close())).await;
    }

    /// Where the catalog tool `name` lives.
    pub fn route(&self, name: &str) -> Option<&Route> {
        self.routes.get(name)
    }

    /// Every catalog name with its route.
    pub fn routes(&self) -> impl Iterator<Item = (&str, &Route)> {
        self.routes
            .iter()
            .map(|(name, route)| (name.as_str(), route))
    }

    /// Calls the catalog tool `name` with `arguments` on its server (`tools/call` with the
    /// tool's original name). A dead connection is re-established first; a connection that
    /// dies during the call is re-established for the next one, but the call is not repeated
    /// (it may have run).
    pub async fn call(
        &self,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<ToolOutput, McpError> {
        self.call_with(name, arguments, CallExtras::default()).await
    }

    /// [`McpTools::call`] with a `_meta` for the request and a receiver of the call's progress
    /// notifications.
    pub async fn call_with(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        extras: CallExtras<'_>,
    ) -> Result<ToolOutput, McpError> {
        let route = self
            .routes
            .get(name)
            .ok_or_else(|| McpError::UnknownTool(name.to_owned()))?;
        let connection = self
            .connections
            .get(&route.server)
            .ok_or_else(|| McpError::UnknownTool(name.to_owned()))?;
        connection
            .call(&route.tool, arguments, &self.options, extras)
            .await
    }
}

/// What goes with a tool call besides its arguments ([`McpTools::call_with`]).
#[derive(Default)]
pub struct CallExtras<'a> {
    /// Entries for the request's `_meta` (keys with a prefix, `plansmith/attempt`), beside
    /// the progress token the client sets.
    pub meta: Map<String, Value>,
    /// Receives each progress notification of the call as it comes (must be quick).
    pub on_progress: Option<&'a (dyn Fn(ToolProgress) + Send + Sync)>,
}

impl fmt::Debug for CallExtras<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallExtras")
            .field("meta", &self.meta)
            .field("on_progress", &self.on_progress.is_some())
            .finish()
    }
}

/// Maps a catalog problem (named by catalog name, pointer `/tools/N/…`) to its server and tool.
fn tool_problem(problem: CatalogProblem, pairs: &[(String, String)]) -> ServerProblem {
    let index = problem
        .pointer
        .strip_prefix("/tools/")
        .and_then(|rest| rest.split('/').next())
        .and_then(|n| n.parse::<usize>().ok());
    match index.and_then(|idx| pairs.get(idx)) {
        Some((server, tool)) => {
            let inner = problem
                .pointer
                .splitn(4, '/')
                .nth(3)
                .map(|rest| format!("/{rest}"))
                .unwrap_or_default();
            ServerProblem {
                server: server.clone(),
                tool: Some(tool.clone()),
                message: if inner.is_empty() {
                    problem.message
                } else {
                    format!("at {inner}: {}", problem.message)
                },
            }
        }
        None => ServerProblem {
            server: "*".into(),
            tool: Some(problem.name),
            message: problem.message,
        },
    }
}

type Client = RunningService<RoleClient, ProgressRoutes>;

/// The service loop ended or its transport closed (the server exited, the HTTP session died).
fn is_dead(client: &Client) -> bool {
    client.is_closed() || client.peer().is_transport_closed()
}

/// Lines of a server's stderr kept for error messages.
const STDERR_LINES: usize = 12;

/// Longest [`McpTools::close`] waits for one server (rmcp gives a stdio server 3 s to exit
/// after its stdin closed, and 3 s more after `SIGTERM`).
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(8);

/// One server: its spec, the live client (if any) and the tail of its stderr.
///
/// The lock guards connecting, not calling: a call clones the client out and runs without it,
/// so calls to one server run at the same time (MCP requests are multiplexed by id).
struct Connection {
    spec: ServerSpec,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// Shared by the connection's successive clients.
    progress: ProgressRoutes,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

impl Connection {
    fn new(spec: ServerSpec) -> Connection {
        Connection {
            spec,
            client: tokio::sync::Mutex::new(None),
            progress: ProgressRoutes::default(),
            stderr: Arc::new(Mutex::new(VecDeque::new())),
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

    /// Closes the connection (see [`McpTools::close`]).
    async fn close(&self) {
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
    async fn list_tools(
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

    async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        options: &ClientOptions,
        extras: CallExtras<'_>,
    ) -> Result<ToolOutput, McpError> {
        let client = self.ensure(options).await?;
        let operation = format!("tools/call `{tool}`");
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        // Bounded by the time without an answer or a progress notification, and by a total.
        // Past either, rmcp sends `notifications/cancelled`; given up by the caller (a step
        // stopped), `Abandoned` does.
        let bounds = PeerRequestOptions::with_timeout(
            self.spec.call_timeout.unwrap_or(options.call_timeout),
        )
        .reset_timeout_on_progress()
        .with_max_total_timeout(self.spec.max_call.unwrap_or(options.max_call));
        let bounds = if extras.meta.is_empty() {
            bounds
        } else {
            bounds.with_meta(RequestMetaObject::from(extras.meta))
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let answer = match client
            .peer()
            .send_request_with_option(request, bounds)
            .await
        {
            Ok(handle) => {
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
            Err(err) => Err(err),
        };
        let result = match answer {
            Ok(ServerResult::CallToolResult(result)) => result,
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
        Ok(ToolOutput {
            is_error: result.is_error.unwrap_or(false),
            text,
            structured: result.structured_content,
            content,
        })
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
