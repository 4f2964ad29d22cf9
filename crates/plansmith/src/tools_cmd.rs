//! `plansmith tools check` and `plansmith tools search`.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::Args;
use plansmith_core::{Catalog, CatalogError};

use crate::catalog::{load_catalog, read_json};
use crate::{CliError, Exit};

/// Arguments of `plansmith tools search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// What the tool should do.
    query: String,
    /// Catalog file.
    #[arg(long)]
    tools: PathBuf,
    /// How many tools to list.
    #[arg(long, default_value_t = plansmith_core::PlanOptions::default().top_k, value_parser = crate::at_least_one)]
    top_k: usize,
    /// Print the ranking as JSON.
    #[arg(long)]
    json: bool,
    /// The retriever (default: `PLANSMITH_RETRIEVER`, the config file, else hybrid: keyword
    /// search fused with the embedded sentence-embedding model).
    #[arg(long, value_enum)]
    retriever: Option<crate::retrieval::RetrieverKind>,
}

/// Loads a catalog and reports every problem; exit 2 when there is any.
pub fn check(path: &Path, json: bool) -> Result<Exit, CliError> {
    let document = read_json(path)?;
    let (catalog, problems) = Catalog::from_json_lenient(&document).map_err(|err| match err {
        CatalogError::Format(_) => CliError::input(anyhow!("{}: {err}", path.display())),
        other => CliError::input(other),
    })?;
    if json {
        let report = serde_json::json!({
            "file": path.display().to_string(),
            "valid_tools": catalog.len(),
            "problems": problems.iter().map(|p| serde_json::json!({
                "tool": p.name, "pointer": p.pointer, "message": p.message
            })).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(CliError::failed)?
        );
    } else {
        let destructive = catalog.tools().filter(|t| t.tool.is_destructive()).count();
        println!(
            "{}: {} valid tool(s), {} destructive",
            path.display(),
            catalog.len(),
            destructive
        );
        for problem in &problems {
            println!("  invalid: {problem}");
        }
    }
    Ok(if problems.is_empty() {
        Exit::Ok
    } else {
        Exit::BadInput
    })
}

/// Ranks the catalog's tools for a query.
pub fn search(args: SearchArgs) -> Result<Exit, CliError> {
    let catalog = load_catalog(Some(&args.tools), None)?;
    let kind = crate::retrieval::kind(args.retriever).map_err(CliError::input)?;
    let index = crate::retrieval::build(&catalog, kind);
    let ranked = index.rank(&args.query, args.top_k);
    if args.json {
        let rows: Vec<_> = ranked
            .iter()
            .filter_map(|hit| {
                catalog
                    .tool_at(hit.index)
                    .map(|t| serde_json::json!({"name": t.tool.name, "score": hit.score}))
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(CliError::failed)?
        );
        return Ok(Exit::Ok);
    }
    if ranked.is_empty() {
        println!("no tool matches `{}`", args.query);
    }
    for (rank, hit) in ranked.iter().enumerate() {
        if let Some(tool) = catalog.tool_at(hit.index) {
            let description =
                plansmith_core::prompts::short_description(&tool.tool.description, 90);
            println!(
                "{:>2}. {:<40} {:>7.4}  {description}",
                rank + 1,
                tool.tool.name,
                hit.score
            );
        }
    }
    Ok(Exit::Ok)
}
