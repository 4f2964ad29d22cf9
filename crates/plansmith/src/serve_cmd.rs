//! `plansmith serve`: the HTTP service (see `plansmith-server`).
//!
//! Settings are layered as every command's are ([`crate::config::settings`]): defaults → the
//! config file (the global `--config` / `PLANSMITH_CONFIG`: its `[server]` table over its
//! top-level `model` and `store`) → `PLANSMITH_*` environment → flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use plansmith_core::Planner;
use plansmith_mcp_server::PlansmithMcp;
use plansmith_server::{AppState, ServerConfig};
use tracing::Level;

use crate::config::{Scope, Settings};
use crate::{CliError, Exit};

/// Most new plans written in one transaction by the server's store.
const GROUP_COMMIT_BATCH: usize = 256;

/// Arguments of `plansmith serve` (each overrides the file and the environment).
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (default 127.0.0.1:8080; env PLANSMITH_ADDR).
    #[arg(long)]
    addr: Option<String>,
    /// Plan store: `sqlite:PATH`, `postgres://…` (env PLANSMITH_STORE; default: SQLite in the
    /// data directory).
    #[arg(long)]
    store: Option<String>,
    /// The model, as for `plansmith plan` (env PLANSMITH_MODEL).
    #[arg(long)]
    model: Option<String>,
    /// Tool catalog (env PLANSMITH_TOOLS).
    #[arg(long)]
    tools: Option<PathBuf>,
    /// Agent cards (env PLANSMITH_AGENTS).
    #[arg(long)]
    agents: Option<PathBuf>,
    /// MCP servers whose tools join the catalog and run on them (env PLANSMITH_MCP): turns
    /// on plan execution (`POST /v1/plans/{id}/run`).
    #[arg(long)]
    mcp: Option<PathBuf>,
    /// Requests per second per owner, 0 for none (env PLANSMITH_RATE_LIMIT; default 0): each API
    /// token's owner has its own bucket; without tokens, all requests share one.
    #[arg(long)]
    rate_limit: Option<u32>,
    /// Largest request body in bytes (env PLANSMITH_MAX_BODY_BYTES; default 1048576, 1 MiB).
    #[arg(long)]
    max_body_bytes: Option<usize>,
    /// Request timeout in seconds (env PLANSMITH_TIMEOUT_SECS; default 120).
    #[arg(long)]
    timeout_secs: Option<u64>,
    /// Seconds a connection may take to send a request's headers, counted from when it is
    /// ready for the next request, so idle keep-alive connections close too (env
    /// PLANSMITH_HEADER_TIMEOUT_SECS; default 10).
    #[arg(long)]
    header_timeout_secs: Option<u64>,
    /// Most connections served at once; more wait until one closes (env
    /// PLANSMITH_MAX_CONNECTIONS; default 512).
    #[arg(long)]
    max_connections: Option<usize>,
    /// An origin (`scheme://host[:port]`, or `*`) whose pages may call the API from a browser
    /// (CORS); repeatable (env PLANSMITH_CORS_ORIGINS, comma-separated).
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
    #[command(flatten)]
    exec: ExecServeArgs,
}

/// Plan execution in the service (`POST /v1/plans/{id}/run`).
#[derive(Debug, Clone, Default, Args)]
pub struct ExecServeArgs {
    /// Run plans: tools and agents by command or HTTP callback (see `plansmith run`); also
    /// joins runs started by other processes on the same store. With `--mcp`, plans run too
    /// (MCP tools on their servers, other tools through these commands).
    #[arg(long, env = "PLANSMITH_COMMANDS")]
    commands: Option<PathBuf>,
    /// Steps this process runs at once.
    #[arg(long, default_value_t = 4)]
    exec_concurrency: usize,
    /// Lease of a running step in seconds (another process takes it over after it).
    #[arg(long, default_value_t = 15)]
    lease_secs: u64,
    /// How long a run waits for people's decisions (approvals) before it pauses, in seconds.
    #[arg(long, default_value_t = 3600)]
    wait_secs: u64,
}

/// The flags' layer of `serve`.
fn flags(args: &ServeArgs) -> Settings {
    Settings {
        addr: args.addr.clone(),
        store: args.store.clone(),
        model: args.model.clone(),
        tools: args.tools.clone(),
        agents: args.agents.clone(),
        mcp: args.mcp.clone(),
        rate_limit: args.rate_limit,
        max_body_bytes: args.max_body_bytes,
        timeout_secs: args.timeout_secs,
        header_timeout_secs: args.header_timeout_secs,
        max_connections: args.max_connections,
        cors_origins: (!args.cors_origins.is_empty()).then(|| args.cors_origins.clone()),
        ..Settings::default()
    }
}

/// Runs `plansmith serve` until Ctrl-C.
pub fn run(args: ServeArgs) -> Result<Exit, CliError> {
    let layer = crate::config::settings(flags(&args), Scope::Serve)?;
    let addr: SocketAddr = layer
        .addr
        .as_deref()
        .unwrap_or("127.0.0.1:8080")
        .parse()
        .context("--addr must be IP:PORT")
        .map_err(CliError::input)?;
    let defaults = ServerConfig::default();
    let mut config = defaults.clone();
    config.tokens = layer.tokens.clone().unwrap_or_default();
    config.max_body_bytes = layer.max_body_bytes.unwrap_or(defaults.max_body_bytes);
    config.rate_limit_per_sec = layer.rate_limit.unwrap_or(defaults.rate_limit_per_sec);
    config.request_timeout = layer
        .timeout_secs
        .map(Duration::from_secs)
        .unwrap_or(defaults.request_timeout);
    config.cors_origins = layer.cors_origins.clone().unwrap_or_default();
    config.header_timeout = layer
        .header_timeout_secs
        .map(Duration::from_secs)
        .unwrap_or(defaults.header_timeout);
    config.max_connections = layer.max_connections.unwrap_or(defaults.max_connections);
    config.check(addr).map_err(CliError::input)?;
    let catalog = crate::catalog::load_catalog(layer.tools.as_deref(), layer.agents.as_deref())?;
    // Several callers at once: the embedded model decodes their requests together.
    let model = crate::model::load_with(
        layer.model.as_deref(),
        crate::model::LocalOptions {
            parallel: crate::model::SERVER_PARALLEL,
            ..Default::default()
        },
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(CliError::failed)?;
    runtime.block_on(async move {
        // The MCP servers stay connected: the executor calls their tools.
        let (catalog, mcp_tools) = match layer.mcp.as_deref() {
            Some(path) => {
                let (catalog, tools) = crate::catalog::connect(catalog, path).await?;
                (catalog, Some(Arc::new(tools)))
            }
            None => (catalog, None),
        };
        // One retriever for both planners: a large catalog's vectors are loaded once.
        let retriever = crate::retrieval::build(
            &catalog,
            crate::retrieval::kind(None).map_err(CliError::input)?,
        );
        crate::retrieval::prepare_in_background(
            &retriever,
            catalog.len(),
            plansmith_core::PlanOptions::default().top_k,
        );
        let planner = Planner::with_retrieval(catalog.clone(), retriever.clone(), model.clone());
        let planner = crate::investigate_cmd::with_configured(planner).await?;
        // Many clients: new plans share transactions (group commit, see PlanStore).
        let store = crate::plans_cmd::open(layer.store.as_deref())
            .await?
            .with_group_commit(GROUP_COMMIT_BATCH);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))
            .map_err(CliError::failed)?;
        let local = listener.local_addr().map_err(CliError::failed)?;
        if config.tokens.is_empty() {
            say(
                Level::INFO,
                &format!("listening on http://{local} (no API tokens: loopback only, single user)"),
            );
        } else {
            say(
                Level::INFO,
                &format!(
                    "listening on http://{local} ({} API tokens)",
                    config.tokens.len()
                ),
            );
        }
        if !config.cors_origins.is_empty() {
            say(
                Level::INFO,
                &format!(
                    "pages from {} may call the API (CORS)",
                    config.cors_origins.join(", ")
                ),
            );
        }
        let tokens = config.tokens.clone();
        let state = AppState::new(store.clone(), planner, config);
        // Other processes on the same PostgreSQL store: their plan events reach this one's
        // subscribers, and this one's reach theirs. Without it the service still works; only
        // pages watching through another process miss what happens here.
        match state.bus.relay(&store).await {
            Ok(true) => say(
                Level::INFO,
                "plan events shared with the other processes on the store",
            ),
            Ok(false) => {}
            Err(err) => say(
                Level::WARN,
                &format!(
                    "warning: plan events are not shared with the other processes \
                 on the store (pages watching a plan through another process will not see \
                 changes made here): {err}"
                ),
            ),
        }
        let servers = mcp_tools.clone();
        let mut state = state;
        if args.exec.commands.is_some() || mcp_tools.is_some() {
            let mut invokers = plansmith_exec::Invokers {
                tasks: Some(Arc::new(plansmith_exec::TaskInvoker::new(
                    model.clone(),
                    1024,
                ))),
                ..plansmith_exec::Invokers::default()
            };
            if let Some(path) = &args.exec.commands {
                let map = crate::run_cmd::read_commands(path)?;
                invokers.tools = Some(Arc::new(
                    plansmith_exec::CommandInvoker::new(map.tools)
                        .with_provider_keys(crate::config::provider_keys()),
                ));
                invokers.agents = Some(Arc::new(
                    plansmith_exec::CommandInvoker::new(map.agents)
                        .with_provider_keys(crate::config::provider_keys()),
                ));
            }
            // MCP tools run on their servers; any other tool goes to the commands.
            if let Some(tools) = mcp_tools {
                let fallback = invokers.tools.take();
                invokers.tools = Some(Arc::new(
                    plansmith_exec::mcp::McpInvoker::new(tools, fallback)
                        .with_provider_keys(crate::config::provider_keys()),
                ));
            }
            let mut exec = plansmith_exec::ExecConfig::new(plansmith_exec::node_name());
            exec.concurrency = args.exec.exec_concurrency.max(1);
            exec.lease = Duration::from_secs(args.exec.lease_secs.max(1));
            exec.wait_for_people = Duration::from_secs(args.exec.wait_secs);
            exec.budget = layer.budget.clone().unwrap_or_default();
            say(Level::INFO, &format!("running plans as node {}", exec.node));
            let executor = plansmith_exec::Executor::new(store, invokers, exec)
                .with_catalog(catalog.clone())
                .with_planner(Arc::new(Planner::with_retrieval(
                    catalog,
                    retriever,
                    model.clone(),
                )))
                .with_summary_model(model);
            state = state.with_executor(executor, true);
        }
        // The same tools as `plansmith mcp`, over streamable HTTP at /mcp, through the HTTP
        // API's service: a step decided there resumes its waiting run here at once, as one
        // decided over HTTP does, and a catalog a caller sends is built once for both.
        let mcp_server = PlansmithMcp::new(state.service.clone(), "mcp");
        let mcp = plansmith_mcp_server::http_service(mcp_server, tokens);
        let mcp_sessions = mcp.clone();
        let state = state.with_mcp(mcp);
        let signals = stop_signals().map_err(CliError::failed)?;
        let store = state.store.clone();
        let runner = state.runner().cloned();
        let mut first = signals.clone();
        let mut second = signals;
        let stopped = plansmith_server::serve(listener, state, async move {
            let _ = first.wait_for(|count| *count >= 1).await;
            say(
                Level::INFO,
                "shutting down: answering the requests in flight (signal again to stop at once)",
            );
            // MCP clients' open streams end, as the plans' event streams do.
            mcp_sessions.close();
            // Runs do not end with the requests (a step may take minutes): they are left in
            // progress, before the store closes under them.
            if let Some(runner) = runner {
                let left = runner.shut_down().await;
                if !left.is_empty() {
                    say(
                        Level::WARN,
                        &format!(
                            "left {} run(s) in progress ({}): their running steps \
                         here were stopped and their leases given up; a server on this store \
                         carries them on (this one, when it starts again)",
                            left.len(),
                            left.join(", ")
                        ),
                    );
                }
            }
        });
        let outcome = tokio::select! {
            served = stopped => served.context("the server failed").map_err(CliError::failed)?,
            _ = second.wait_for(|count| *count >= 2) => {
                // Not even the store is closed: that would wait for the connections in use.
                // SQLite recovers its WAL at the next open; nothing acknowledged is lost.
                say(Level::WARN, "stopped at once; requests in flight were dropped");
                return Ok(Exit::Ok);
            }
        };
        if let plansmith_server::ShutdownOutcome::GaveUp(after) = outcome {
            say(
                Level::WARN,
                &format!(
                    "requests still running after {} s were dropped",
                    after.as_secs()
                ),
            );
        }
        // The MCP servers whose tools the runs called, closed as MCP asks (the runs were left
        // above, their calls stopped).
        if let Some(servers) = servers {
            servers.close().await;
        }
        // SQLite checkpoints its WAL as the last connection closes.
        store.close().await;
        say(Level::INFO, "stopped");
        Ok(Exit::Ok)
    })
}

/// One of `serve`'s own messages on stderr (plain, or JSON with the log: [`crate::notice`]).
fn say(level: Level, message: &str) {
    crate::notice::say(level, "plansmith::serve", "plansmith serve", message);
}

/// How many stop signals (SIGINT, i.e. Ctrl-C, or SIGTERM, what service managers send) have
/// arrived: the first shuts the server down gracefully, a second stops it at once. Once these
/// handlers are installed the signals no longer kill the process by themselves.
fn stop_signals() -> anyhow::Result<tokio::sync::watch::Receiver<u32>> {
    let mut signals = crate::signals::Interrupts::install()?;
    let (count, counted) = tokio::sync::watch::channel(0u32);
    tokio::spawn(async move {
        loop {
            signals.next().await;
            count.send_modify(|count| *count += 1);
        }
    });
    Ok(counted)
}
