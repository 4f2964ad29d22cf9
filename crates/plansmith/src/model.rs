//! `--model SPEC`: which [`LanguageModel`] a command uses.
//!
//! | spec | model |
//! |---|---|
//! | `scripted:FILE` | replays recorded replies ([`ScriptedModel`]) |
//!
//! Each backend crate adds its kinds here, one match arm each.

use std::path::Path;
use std::sync::Arc;

use anyhow::anyhow;
use plansmith_core::{LanguageModel, ScriptedModel};

use crate::CliError;

/// The model kinds this build knows, for error messages.
const KINDS: &str = "scripted:FILE";

/// Builds the model named by `spec` (from `--model` or `PLANSMITH_MODEL`).
pub fn load(spec: Option<&str>) -> Result<Arc<dyn LanguageModel>, CliError> {
    let spec = spec.map(str::trim).filter(|s| !s.is_empty()).ok_or_else(|| {
        CliError::model(anyhow!(
            "no model configured: pass --model scripted:FILE (a file of recorded replies, see examples/), \
             or set PLANSMITH_MODEL"
        ))
    })?;
    let (kind, rest) = spec.split_once(':').unwrap_or((spec, ""));
    match kind {
        "scripted" => {
            let model = ScriptedModel::from_file(Path::new(rest)).map_err(CliError::model)?;
            Ok(Arc::new(model))
        }
        other => Err(CliError::model(anyhow!(
            "unknown model kind `{other}` in `{spec}`; supported: {KINDS}"
        ))),
    }
}
