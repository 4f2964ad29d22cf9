//! MCP on the command line: `--mcp servers.json` (tools imported from MCP servers, for `plan`,
//! `serve`, `mcp` and `tools list`), `plansmith tools list`, and `plansmith mcp` (plansmith as
//! an MCP server over stdio).
//!
//! An MCP server that fails, or a tool of it with an invalid schema, is a warning on stderr
//! naming it; the other servers' tools are used. On stdio, stdout carries nothing but
//! JSON-RPC: warnings and logs go to stderr.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use plansmith_core::{Catalog, Tool};
use plansmith_mcp::{ClientOptions, McpTools, Route, ServerProblem, ServersConfig};
use plansmith_mcp_server::PlansmithMcp;

use crate::{CliError, Exit};

/// Arguments of `plansmith tools list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// MCP servers file (`{"mcpServers": {name: {command, args, env} | {url}}}`).
    #[arg(long)]
    mcp: Option<PathBuf>,
    /// Catalog file, listed too.
    #[arg(long)]
    tools: Option<PathBuf>,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `plansmith mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The model, as for `plansmith plan` (used by the `plan` tool and by replans).
    #[arg(long, env = "PLANSMITH_MODEL")]
    model: Option<String>,
    /// Plan store: `sqlite:PATH`, `postgres://…` (default: SQLite in the data directory).
    #[arg(long, env = "PLANSMITH_STORE")]
    store: Option<String>,
    #[command(flatten)]
    catalog: crate::args::CatalogArgs,
    /// Who the plans' history records as the author of changes.
    #[arg(long, env = "PLANSMITH_ACTOR", default_value = "mcp")]
    actor: String,
}

/// Reads the servers file.
fn read_config(path: &Path) -> Result<ServersConfig, CliError> {
    ServersConfig::load(path).map_err(CliError::input)
}

/// The client's options: the defaults, and the configured provider key variables withheld
/// from the servers it spawns.
fn client_options() -> ClientOptions {
    let mut options = ClientOptions::default();
    options.provider_keys = crate::config::provider_keys();
    options
}

/// The tools imported from MCP servers.
pub struct Import {
    /// The valid tools.
    pub catalog: Catalog,
    /// Servers and tools that failed.
    pub problems: Vec<ServerProblem>,
    /// Catalog name → (server, name on the server).
    pub routes: HashMap<String, Route>,
}

/// Imports the tools of every server in `path`. The connections are closed afterwards
/// (planning needs the tools' descriptions, not the servers).
pub fn import(path: &Path) -> Result<Import, CliError> {
    let config = read_config(path)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(CliError::failed)?;
    Ok(runtime.block_on(async {
        let imported = McpTools::connect(&config, client_options()).await;
        let routes = imported
            .tools
            .routes()
            .map(|(name, route)| (name.to_owned(), route.clone()))
            .collect();
        // Planning needs the descriptions, not the servers.
        imported.tools.close().await;
        Import {
            catalog: imported.catalog,
            problems: imported.problems,
            routes,
        }
    }))
}

/// `catalog` plus the tools of the MCP servers in `mcp` (if given); each problem is a warning
/// on stderr. A name in both is an error naming it.
pub fn extend(catalog: Catalog, mcp: Option<&Path>) -> Result<Catalog, CliError> {
    let Some(path) = mcp else {
        return Ok(catalog);
    };
    let Import {
        catalog: imported,
        problems,
        ..
    } = import(path)?;
    for problem in &problems {
        crate::notice::say(
            tracing::Level::WARN,
            "plansmith::mcp",
            "warning",
            &problem.to_string(),
        );
    }
    let tools: Vec<Tool> = catalog
        .tools()
        .chain(imported.tools())
        .map(|t| t.tool.clone())
        .collect();
    Catalog::new(tools, catalog.agents().to_vec())
        .with_context(|| format!("the tools of {} and the catalog", path.display()))
        .map_err(CliError::input)
}

/// `catalog` plus the tools of the MCP servers in `path`, with the live connections kept for
/// running them (`plansmith run --mcp`, `plansmith serve --mcp`). Must be called inside the
/// runtime that will use the connections. Each problem is a warning on stderr; a name in both
/// is an error naming it.
pub async fn connect(catalog: Catalog, path: &Path) -> Result<(Catalog, McpTools), CliError> {
    let config = read_config(path)?;
    let imported = McpTools::connect(&config, client_options()).await;
    for problem in &imported.problems {
        crate::notice::say(
            tracing::Level::WARN,
            "plansmith::mcp",
            "warning",
            &problem.to_string(),
        );
    }
    let tools: Vec<Tool> = catalog
        .tools()
        .chain(imported.catalog.tools())
        .map(|t| t.tool.clone())
        .collect();
    let catalog = Catalog::new(tools, catalog.agents().to_vec())
        .with_context(|| format!("the tools of {} and the catalog", path.display()))
        .map_err(CliError::input)?;
    Ok((catalog, imported.tools))
}

/// `plansmith tools list`: every tool with its server, flags and a short description; exit 2
/// when a server or tool had a problem (the others are still listed).
pub fn list(args: ListArgs) -> Result<Exit, CliError> {
    let base = crate::plan_cmd::load_catalog(args.tools.as_deref(), None)?;
    let Import {
        catalog: mcp_catalog,
        problems,
        routes,
    } = match &args.mcp {
        Some(path) => import(path)?,
        None => Import {
            catalog: Catalog::empty(),
            problems: Vec::new(),
            routes: HashMap::new(),
        },
    };
    let rows: Vec<(&Tool, Option<&Route>)> = base
        .tools()
        .map(|t| (&t.tool, None))
        .chain(
            mcp_catalog
                .tools()
                .map(|t| (&t.tool, routes.get(&t.tool.name))),
        )
        .collect();
    if args.json {
        let report = serde_json::json!({
            "tools": rows.iter().map(|(tool, route)| serde_json::json!({
                "name": tool.name,
                "server": route.map(|r| &r.server),
                "server_tool": route.map(|r| &r.tool),
                "description": tool.description,
                "destructive": tool.is_destructive(),
                "read_only": tool.annotations.as_ref().and_then(|a| a.read_only_hint),
                "has_output_schema": tool.output_schema.is_some(),
                "input_schema": tool.input_schema,
            })).collect::<Vec<_>>(),
            "problems": problems,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(CliError::failed)?
        );
    } else {
        for (tool, route) in &rows {
            let origin = match route {
                Some(route) if route.tool != tool.name => {
                    format!("[{}: {}]", route.server, route.tool)
                }
                Some(route) => format!("[{}]", route.server),
                None => "[file]".into(),
            };
            let mut flags = String::new();
            if tool.is_destructive() {
                flags.push_str(" destructive");
            }
            if tool
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false)
            {
                flags.push_str(" read-only");
            }
            let description = plansmith_core::prompts::short_description(&tool.description, 70);
            println!("{:<32} {origin}{flags}  {description}", tool.name);
        }
        println!("{} tool(s), {} problem(s)", rows.len(), problems.len());
        for problem in &problems {
            eprintln!("problem: {problem}");
        }
    }
    Ok(if problems.is_empty() {
        Exit::Ok
    } else {
        Exit::BadInput
    })
}

/// `plansmith mcp`: serve the `plan`, `planning` and `feedback` tools over stdio until the
/// client disconnects.
pub fn serve(args: McpArgs) -> Result<Exit, CliError> {
    let catalog = args.catalog.load()?;
    let model = crate::model::load(args.model.as_deref())?;
    let planner = Arc::new(crate::retrieval::planner(catalog, model)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(CliError::failed)?;
    runtime.block_on(async {
        let store = crate::plans_cmd::open(args.store.as_deref()).await?;
        eprintln!(
            "plansmith mcp: serving plan, planning, feedback on stdio (store {})",
            store.location()
        );
        let service = plansmith_service::Service::new(
            store.clone(),
            Arc::new(plansmith_service::Planners::new(planner)),
        );
        let server = PlansmithMcp::new(service, args.actor.clone());
        let result = plansmith_mcp_server::serve_stdio(server).await;
        store.close().await;
        result.map_err(CliError::failed)?;
        Ok(Exit::Ok)
    })
}
