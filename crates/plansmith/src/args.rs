//! Argument groups several commands share, each flag written once.

use std::path::PathBuf;

use clap::Args;
use plansmith_core::Catalog;

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
        crate::plan_cmd::load_catalog(self.tools.as_deref(), self.agents.as_deref())
    }

    /// `catalog` with the tools of the MCP servers added.
    pub fn with_mcp(&self, catalog: Catalog) -> Result<Catalog, CliError> {
        crate::mcp_cmd::extend(catalog, self.mcp.as_deref())
    }

    /// The whole catalog: the files, then the MCP servers' tools (which start their own
    /// runtime: call this outside one).
    pub fn load(&self) -> Result<Catalog, CliError> {
        self.with_mcp(self.files()?)
    }
}
