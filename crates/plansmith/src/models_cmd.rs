//! `plansmith models list` and `plansmith models pull`.

use anyhow::anyhow;
use plansmith_local::acquire;

use crate::{CliError, EXIT_OK};

/// Lists the pinned models and whether each is installed.
pub fn list(json: bool) -> Result<u8, CliError> {
    let dir = acquire::default_dir();
    let rows: Vec<_> = acquire::MODELS
        .iter()
        .enumerate()
        .map(|(idx, spec)| (idx == 0, spec, acquire::is_installed(&dir, spec)))
        .collect();
    if json {
        let value: Vec<_> = rows
            .iter()
            .map(|(default, spec, installed)| {
                serde_json::json!({
                    "name": spec.name, "default": default, "installed": installed,
                    "description": spec.description,
                    "path": acquire::model_path(&dir, spec).display().to_string(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(CliError::failed)?
        );
        return Ok(EXIT_OK);
    }
    println!("models directory: {}", dir.display());
    for (default, spec, installed) in rows {
        let mark = if installed { "installed" } else { "not pulled" };
        let default = if default { " (default)" } else { "" };
        println!(
            "  {:<22} {:<11} {}{default}",
            spec.name, mark, spec.description
        );
    }
    Ok(EXIT_OK)
}

/// Pulls a pinned model (the default when no name is given), then verifies its hash.
pub fn pull(name: Option<&str>) -> Result<u8, CliError> {
    let spec = match name {
        None => acquire::MODELS[0],
        Some(name) => acquire::find(name).ok_or_else(|| {
            CliError::input(anyhow!(acquire::AcquireError::Unknown(name.to_owned())))
        })?,
    };
    let dir = acquire::default_dir();
    let path = crate::model::pull_with_progress(&spec, &dir)?;
    acquire::verify(&dir, &spec).map_err(CliError::model)?;
    println!("{} ready at {}", spec.name, path.display());
    Ok(EXIT_OK)
}
