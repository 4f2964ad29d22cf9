//! Argument groups several commands share, each flag written once (the catalog's are
//! [`crate::catalog::CatalogArgs`]).

use clap::Args;

/// Where the plan store is.
#[derive(Debug, Clone, Default, Args)]
pub struct StoreArgs {
    /// Plan store: `sqlite:PATH`, `postgres://…`, or a file path (default: SQLite in the data
    /// directory).
    #[arg(long, env = "PLANSMITH_STORE", global = true)]
    pub store: Option<String>,
}

/// Who makes a change, for the commands that change stored plans.
#[derive(Debug, Clone, Args)]
pub struct ActorArgs {
    /// Who makes the change, recorded in the plan's history.
    #[arg(long, env = "PLANSMITH_ACTOR", global = true, default_value = "cli")]
    pub actor: String,
}

/// The model that plans.
#[derive(Debug, Clone, Default, Args)]
pub struct ModelArgs {
    /// The model: `local` (default: the embedded model, pulled on first use), `local:NAME`,
    /// `local:PATH.gguf`, `openai:MODEL`, `openai-compatible:URL#MODEL`, `anthropic:MODEL`, or
    /// `scripted:FILE` (replays recorded replies).
    #[arg(long, env = "PLANSMITH_MODEL")]
    pub model: Option<String>,
}
