//! `plansmith models list` and `plansmith models pull`.

use anyhow::anyhow;
use plansmith_local::acquire;

use crate::{CliError, Exit};

/// Lists the pinned models and whether each is installed.
pub fn list(json: bool) -> Result<Exit, CliError> {
    let dir = acquire::default_dir();
    // (name, default, installed, description, path): planning models, then retrieval models.
    let rows: Vec<_> = acquire::MODELS
        .iter()
        .enumerate()
        .map(|(idx, spec)| {
            (
                spec.name,
                idx == 0,
                acquire::is_installed(&dir, spec),
                spec.description,
                acquire::model_path(&dir, spec),
            )
        })
        .chain(acquire::FILE_SETS.iter().map(|set| {
            (
                set.name,
                true,
                acquire::file_set_installed(&dir, set),
                set.description,
                acquire::file_set_dir(&dir, set),
            )
        }))
        .collect();
    if json {
        let value: Vec<_> = rows
            .iter()
            .map(|(name, default, installed, description, path)| {
                serde_json::json!({
                    "name": name, "default": default, "installed": installed,
                    "description": description,
                    "path": path.display().to_string(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(CliError::failed)?
        );
        return Ok(Exit::Ok);
    }
    println!("models directory: {}", dir.display());
    for (name, default, installed, description, _) in rows {
        let mark = if installed { "installed" } else { "not pulled" };
        let default = if default { " (default)" } else { "" };
        println!("  {name:<22} {mark:<11} {description}{default}");
    }
    Ok(Exit::Ok)
}

/// Pulls a pinned model (the default planning and retrieval models when no name is given), then
/// verifies its hash.
pub fn pull(name: Option<&str>) -> Result<Exit, CliError> {
    let dir = acquire::default_dir();
    let set = match name {
        None => Some(acquire::MINILM_L6),
        Some(name) => acquire::find_file_set(name),
    };
    if let Some(set) = set {
        let path = crate::model::pull_file_set_with_progress(&set, &dir)?;
        acquire::verify_file_set(&dir, &set).map_err(CliError::model)?;
        println!("{} ready at {}", set.name, path.display());
        if name.is_some() {
            return Ok(Exit::Ok);
        }
    }
    let spec = match name {
        None => acquire::MODELS[0],
        Some(name) => acquire::find(name).ok_or_else(|| {
            CliError::input(anyhow!(acquire::AcquireError::Unknown(name.to_owned())))
        })?,
    };
    let path = crate::model::pull_with_progress(&spec, &dir)?;
    acquire::verify(&dir, &spec).map_err(CliError::model)?;
    println!("{} ready at {}", spec.name, path.display());
    Ok(Exit::Ok)
}
