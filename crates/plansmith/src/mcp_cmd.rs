//! MCP commands: `plansmith tools list` (the tools of MCP servers, read by
//! [`crate::catalog`]) and `plansmith mcp` (plansmith as an MCP server over stdio). On stdio,
//! stdout carries nothing but JSON-RPC: warnings and logs go to stderr.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use plansmith_core::{Catalog, Tool};
use plansmith_mcp::Route;
use plansmith_mcp_server::PlansmithMcp;

use crate::catalog::{Import, import};
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
    /// The model of the `plan` tool and of replans.
    #[command(flatten)]
    model: crate::args::ModelArgs,
    #[command(flatten)]
    store: crate::args::StoreArgs,
    #[command(flatten)]
    catalog: crate::catalog::CatalogArgs,
    /// Who the plans' history records as the author of changes.
    #[arg(long, env = "PLANSMITH_ACTOR", default_value = "mcp")]
    actor: String,
}

/// `plansmith tools list`: every tool with its server, flags and a short description; exit 2
/// when a server or tool had a problem (the others are still listed).
pub fn list(args: ListArgs) -> Result<Exit, CliError> {
    let base = crate::catalog::load_catalog(args.tools.as_deref(), None)?;
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
    // Several callers at once: the embedded model decodes their requests together.
    let planner = crate::retrieval::planner_loading(
        catalog,
        plansmith_core::PlanOptions::default().top_k,
        || {
            crate::model::load_with(
                args.model.model.as_deref(),
                crate::model::LocalOptions {
                    parallel: crate::model::SERVER_PARALLEL,
                    ..Default::default()
                },
            )
        },
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(CliError::failed)?;
    runtime.block_on(async {
        let planner = Arc::new(crate::investigate_cmd::with_configured(planner).await?);
        let store = crate::plans_cmd::open(args.store.store.as_deref()).await?;
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
