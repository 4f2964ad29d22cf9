//! How to run a local model.

use std::path::PathBuf;

use crate::prompt_cache::PromptCache;

/// The shortest system prompt worth a prompt-cache entry, in tokens.
pub(super) const MIN_CACHED_PREFIX: usize = 64;

/// How to run a local model.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LocalConfig {
    /// The GGUF file.
    pub path: PathBuf,
    /// Name shown in diagnostics (`local:qwen2.5-coder-0.5b`).
    pub name: String,
    /// Threads for generation: by default the physical cores this process may use (its CPU
    /// affinity and cgroup quota counted) that other work leaves idle (less the load average),
    /// at least 1. A thread on a core another process keeps busy slows every other thread
    /// down: llama.cpp's threads wait for the slowest at every barrier.
    pub threads: i32,
    /// Threads for prompt evaluation (batched, benefits from more cores).
    pub threads_batch: i32,
    /// Context size in tokens (prompt + reply).
    pub context: u32,
    /// Batch size for prompt evaluation.
    pub batch: u32,
    /// Apply grammar-constrained decoding when the request carries a JSON Schema.
    pub constrained: bool,
    /// Chat template to use when the GGUF has none (`chatml`).
    pub fallback_template: String,
    /// Reuse the KV cache of the previous prompt's shared prefix (on by default). Off, every
    /// prompt is evaluated from scratch: slower, but a reply no longer depends on the request
    /// before it. llama.cpp's numbers differ slightly with how a prompt is split into batches,
    /// and a reused prefix splits it differently, which can change a greedy reply; evaluations
    /// turn reuse off so that each case's reply is the same alone, in a run, or on resume.
    pub reuse_prefix: bool,
    /// Keep the KV state of each prompt's system part on disk, and start from the longest one
    /// that begins a new prompt ([`PromptCache`]): a new process then skips evaluating the
    /// system prompt it has seen before. Off by default; used only with `reuse_prefix`.
    pub prompt_cache: Option<PromptCache>,
    /// Requests decoded together (1 by default: one after another). Each has its own sequence
    /// in one KV buffer of `context` tokens per sequence, which a request's prompt prefix can
    /// share with another's; a batch per round carries the next tokens of them all. Worth it for
    /// a server answering several callers; the KV buffer's memory grows with it.
    pub sequences: usize,
}

impl LocalConfig {
    /// Defaults for a model file: a generation thread per idle physical core, every available CPU
    /// for the prompt, 4096 tokens, constrained decoding on, no prompt cache, one request at a
    /// time.
    pub fn new(path: PathBuf, name: impl Into<String>) -> LocalConfig {
        let count = |n: usize| i32::try_from(n).unwrap_or(1).max(1);
        LocalConfig {
            path,
            name: name.into(),
            threads: count(crate::cores::idle_physical()),
            threads_batch: count(crate::cores::available()),
            context: 4096,
            batch: 512,
            constrained: true,
            fallback_template: "chatml".to_owned(),
            reuse_prefix: true,
            prompt_cache: None,
            sequences: 1,
        }
    }
}
