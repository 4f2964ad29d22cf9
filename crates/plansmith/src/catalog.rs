//! Reading a catalog on the command line: the shared catalog flags ([`CatalogArgs`]), the
//! tools and agents files, and the tools of MCP servers (`--mcp servers.json`, for `plan`,
//! `validate`, `templates`, `serve`, `mcp`, `run` and `tools list`).
//!
//! An MCP server that fails, or a tool of it with an invalid schema, is a warning on stderr
//! naming it; the other servers' tools are used.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use plansmith_core::{Catalog, Tool};
use plansmith_mcp::{ClientOptions, McpTools, Route, ServerProblem, ServersConfig};

use crate::CliError;

/// The catalog a command plans with: tools, agent cards, and the tools of MCP servers.
#[derive(Debug, Clone, Default, Args)]
pub struct CatalogArgs {
    /// Tool catalog (MCP tools/list result, list, OpenAI tools, or {name: tool} map).
    #[arg(long)]
    pub tools: Option<PathBuf>,
    /// Agent cards (a list, or {"agents": [...]}).
    #[arg(long)]
    pub agents: Option<PathBuf>,
    /// MCP servers whose tools join the catalog (`{"mcpServers": {name: {command, args, env}
    /// | {url}}}`); a server that fails is a warning naming it.
    #[arg(long)]
    pub mcp: Option<PathBuf>,
}

impl CatalogArgs {
    /// The tools and agents files, read and checked (the MCP servers are not contacted yet:
    /// see [`CatalogArgs::with_mcp`]).
    pub fn files(&self) -> Result<Catalog, CliError> {
        load_catalog(self.tools.as_deref(), self.agents.as_deref())
    }

    /// `catalog` with the tools of the MCP servers added.
    pub fn with_mcp(&self, catalog: Catalog) -> Result<Catalog, CliError> {
        extend(catalog, self.mcp.as_deref())
    }

    /// The whole catalog: the files, then the MCP servers' tools (which start their own
    /// runtime: call this outside one).
    pub fn load(&self) -> Result<Catalog, CliError> {
        self.with_mcp(self.files()?)
    }
}

/// Loads the tool catalog and agent cards (strict: any invalid tool is an error naming it).
pub fn load_catalog(tools: Option<&Path>, agents: Option<&Path>) -> Result<Catalog, CliError> {
    let catalog = match tools {
        Some(path) => {
            let document = read_json(path)?;
            Catalog::from_json(&document)
                .with_context(|| format!("invalid tool catalog {}", path.display()))
                .map_err(CliError::input)?
        }
        None => Catalog::empty(),
    };
    match agents {
        Some(path) => {
            let document = read_json(path)?;
            let cards = Catalog::agents_from_json(&document)
                .with_context(|| format!("invalid agent cards {}", path.display()))
                .map_err(CliError::input)?;
            catalog.with_agents(cards).map_err(CliError::input)
        }
        None => Ok(catalog),
    }
}

/// Reads and parses a JSON file.
pub fn read_json(path: &Path) -> Result<serde_json::Value, CliError> {
    let text = crate::input::read_text(path).map_err(CliError::input)?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))
        .map_err(CliError::input)
}

/// Reads the servers file.
fn read_config(path: &Path) -> Result<ServersConfig, CliError> {
    ServersConfig::load(path).map_err(CliError::input)
}

/// The client's options: the defaults, and the configured provider key variables withheld
/// from the servers it spawns.
pub fn client_options() -> ClientOptions {
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
    joined(&catalog, &imported, &problems, path)
}

/// `catalog` plus the tools of the MCP servers in `path`, with the live connections kept for
/// running them (`plansmith run --mcp`, `plansmith serve --mcp`). Must be called inside the
/// runtime that will use the connections. Each problem is a warning on stderr; a name in both
/// is an error naming it.
pub async fn connect(catalog: Catalog, path: &Path) -> Result<(Catalog, McpTools), CliError> {
    let config = read_config(path)?;
    let imported = McpTools::connect(&config, client_options()).await;
    let catalog = joined(&catalog, &imported.catalog, &imported.problems, path)?;
    Ok((catalog, imported.tools))
}

/// `catalog` with the tools imported from the MCP servers of `path`, each of their problems a
/// warning on stderr; a name in both is an error naming it.
fn joined(
    catalog: &Catalog,
    imported: &Catalog,
    problems: &[ServerProblem],
    path: &Path,
) -> Result<Catalog, CliError> {
    for problem in problems {
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
