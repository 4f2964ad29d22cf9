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

mod connection;
mod progress;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use plansmith_core::secrets::ProviderKeys;
use plansmith_core::{Catalog, CatalogProblem};
use serde::Serialize;
use serde_json::{Map, Value, json};

use self::connection::Connection;
use crate::McpError;
use crate::config::ServersConfig;
use crate::names::{self, Route};

/// Timeouts and limits of the client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// A task of this call that an earlier attempt started on the server (the tasks
    /// extension): it is polled to its end instead of calling the tool again.
    pub task: Option<String>,
    /// Told the task id when the server makes the call a task, before it is polled (must be
    /// quick): keep it to poll the same task after a restart.
    pub on_task: Option<&'a (dyn Fn(&str) + Send + Sync)>,
    /// With `task`: answers to the task's input requests (by key), sent with `tasks/update`
    /// before it is polled again.
    pub input_responses: Option<Map<String, Value>>,
}

impl fmt::Debug for CallExtras<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallExtras")
            .field("meta", &self.meta)
            .field("on_progress", &self.on_progress.is_some())
            .field("task", &self.task)
            .field("on_task", &self.on_task.is_some())
            .field("input_responses", &self.input_responses)
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

/// Longest [`McpTools::close`] waits for one server (rmcp gives a stdio server 3 s to exit
/// after its stdin closed, and 3 s more after `SIGTERM`).
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(8);
