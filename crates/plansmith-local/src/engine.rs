//! The embedded model: a GGUF file run in-process by llama.cpp, behind [`LanguageModel`].
//!
//! One worker thread owns the model and one context for the life of the [`LocalModel`]: the
//! model is loaded once, requests run one at a time, and the KV cache of the previous prompt
//! is kept, so a request that shares its prefix (system prompt + tool manifest) with the last
//! one only evaluates the new tokens. A request whose caller stops waiting (its future is
//! dropped: a server timeout, a closed connection) is not decoded any further: the worker checks
//! between two tokens, and between two prompt batches, so the next request does not queue
//! behind a reply nobody will read. A streamed request ([`LanguageModel::stream`]) gets the
//! reply's text after each decoding round, so the pipeline reports tokens and each finished
//! step while the model still writes.
//!
//! A new process has no KV cache to reuse; with a [`PromptCache`] it starts from the disk
//! instead. A prompt's leading system messages (instructions, profile, tool manifest: most of a
//! planning prompt) are evaluated on their own and their state saved; the next process loads
//! the entry that shares the longest prefix with its prompt and evaluates only the rest. Both
//! split the prompt at the same place, so they reply alike. Each completion reports its
//! [`Stages`]: the model's load (on the process's first call), the restore, the prompt and the
//! generation.
//!
//! With an output constraint the plan's JSON Schema becomes a grammar (llguidance, compiled
//! per request; the vocabulary is indexed once per model), and decoding is greedy-first: the
//! best token is checked against the grammar alone, and the grammar's mask of the whole
//! vocabulary (the costly part of constrained decoding) is computed only when it is rejected — so every reply
//! parses and matches the schema. The JSON is written compact with fixed separators
//! (`{"a": 1, "b": [2]}`), so the keys and punctuation between values are forced: the grammar
//! hands them out as whole tokens, and they go through the model in one batch with the token
//! chosen before them (the reply's opening `{"thought": "` with the prompt's last batch),
//! without logits and without sampling. The ` "` that opens a string, which the grammar engine
//! holds back (a longer token could start with it), is forced too ([`Reply::held_back`]). About
//! half the tokens of a plan are forced (87 of 160 for the bench's 3-step plan), and a forced
//! token costs ~45–75 % of a sampled one (no output layer; batched with its neighbour), which
//! makes constrained decoding faster than unconstrained: the warm 3-step plan went from 3.7 to
//! 3.3–3.5 s at 2 threads with forced tokens, and from 3.19 to 2.94 s with the ` "` forced.
//!
//! Keep one [`LocalModel`] per process when it runs more than one generation thread. llama.cpp
//! (built with OpenMP) gives each thread that drives it a team of worker threads, kept for the
//! life of that thread; once the teams of a process hold more threads than there are cores,
//! libgomp waits at ggml's per-operation barriers with ~100 spins instead of ~300,000 before it
//! sleeps, and generation drops by a third (measured on 2 cores: 42 → 30 tok/s at 2 threads
//! while a second, idle team of 2 threads was alive in the process).
//!
//! Guessing ahead does not pay here, measured. Prompt-lookup speculative decoding (decode the
//! chosen token together with the tokens that followed its latest occurrence in the prompt or
//! the reply, keep the guesses the model would have chosen) gave the same replies with half the
//! decodes, but on this 2-core CPU a decode of a few tokens costs nearly a decode per token:
//! each extra token cost 45 % (1 thread) to 80 % (2 threads) of a one-token decode, so with
//! 30–70 % of guesses kept, the warm 3-step plan took as long or longer (2 threads: 3.7 s one
//! by one, 4.4 s guessing 1 ahead, 5.8 s guessing 2). Generation on CPU is compute-bound, not
//! weight-bandwidth-bound, for a 0.5B Q4_K model.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::channel::{mpsc as stream_mpsc, oneshot};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::vocab::LlamaVocab;
use llguidance::api::TopLevelGrammar;
use llguidance::earley::SlicedBiasComputer;
use llguidance::toktrie::{
    InferenceCapabilities, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv,
};
use llguidance::{Matcher, ParserFactory};
use plansmith_core::llm::{
    BoxFuture, BoxStream, Completion, FinishReason, Role, Strategy, StreamEvent,
};
use plansmith_core::{
    Capabilities, CompletionRequest, LanguageModel, LlmError, OutputConstraint, Stages, Usage,
};
use serde_json::{Value, json};

use crate::prompt_cache::PromptCache;

/// The shortest system prompt worth a prompt-cache entry, in tokens.
const MIN_CACHED_PREFIX: usize = 64;

/// How to run a local model.
#[derive(Debug, Clone)]
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
}

impl LocalConfig {
    /// Defaults for a model file: a generation thread per idle physical core, every available CPU
    /// for the prompt, 4096 tokens, constrained decoding on, no prompt cache.
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
        }
    }
}

/// Timing of the last request, for benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens that were already in the KV cache (reused prefix), from this process or
    /// restored from the prompt cache.
    pub cached_tokens: usize,
    /// Of the cached tokens, those restored from the on-disk prompt cache for this request.
    pub restored_tokens: usize,
    /// Time reading the restored tokens' state from the prompt cache.
    pub restore_time: Duration,
    /// Time evaluating the new prompt tokens.
    pub prompt_time: Duration,
    /// Tokens generated (chosen by the model or forced by the grammar).
    pub generated_tokens: usize,
    /// Of the generated tokens, those the grammar forced (decoded in a batch with the token
    /// chosen before them, without sampling).
    pub forced_tokens: usize,
    /// Time in the grammar engine (building the matcher, forced tokens, checks and masks),
    /// part of the prompt and generation times.
    pub grammar_time: Duration,
    /// Time generating.
    pub generate_time: Duration,
    /// Tokens the grammar rejected as the greedy choice (each cost a full-vocabulary mask).
    pub grammar_rejections: usize,
    /// The caller stopped waiting (its future was dropped: a timeout, a closed connection), so
    /// decoding stopped early, or never started when the request was still queued.
    pub abandoned: bool,
}

impl Stats {
    /// Prompt evaluation speed, tokens per second.
    pub fn prompt_tok_s(&self) -> f64 {
        per_second(self.prompt_tokens - self.cached_tokens, self.prompt_time)
    }

    /// Generation speed, tokens per second.
    pub fn generate_tok_s(&self) -> f64 {
        per_second(self.generated_tokens, self.generate_time)
    }
}

fn millis(time: Duration) -> u64 {
    u64::try_from(time.as_millis()).unwrap_or(u64::MAX)
}

fn per_second(n: usize, time: Duration) -> f64 {
    let secs = time.as_secs_f64();
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// Errors starting a local model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// llama.cpp could not be initialised.
    #[error("cannot initialise llama.cpp: {0}")]
    Backend(String),
    /// The model file could not be loaded.
    #[error("cannot load the model {path}: {message}")]
    Load {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The worker thread could not be started.
    #[error("cannot start the model thread: {0}")]
    Thread(String),
}

struct Job {
    request: CompletionRequest,
    reply: oneshot::Sender<Result<Completion, LlmError>>,
    /// Where the reply's text goes as it is decoded, for a streamed request.
    text: Option<stream_mpsc::UnboundedSender<String>>,
    /// When the request was queued: the wait until the worker takes it is the completion's
    /// [`Completion::queue_us`].
    queued_at: Instant,
}

/// A GGUF model run in-process (see the module docs).
pub struct LocalModel {
    name: String,
    constrained: bool,
    jobs: Mutex<mpsc::Sender<Job>>,
    stats: Arc<Mutex<Stats>>,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("name", &self.name)
            .finish()
    }
}

/// llama.cpp's backend: process-global, initialised once (logs off unless
/// `PLANSMITH_LLAMA_LOG` is set). Code that drives llama.cpp directly beside a [`LocalModel`]
/// must use this one.
pub fn backend() -> Result<&'static LlamaBackend, LocalError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let mut backend = LlamaBackend::init().map_err(|err| err.to_string())?;
            if std::env::var_os("PLANSMITH_LLAMA_LOG").is_none() {
                backend.void_logs();
            }
            Ok(backend)
        })
        .as_ref()
        .map_err(|err| LocalError::Backend(err.clone()))
}

impl LocalModel {
    /// Loads the model (once) on its worker thread; returns when it is ready.
    pub fn load(config: LocalConfig) -> Result<LocalModel, LocalError> {
        let backend = backend()?;
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), LocalError>>();
        let stats = Arc::new(Mutex::new(Stats::default()));
        let worker_stats = stats.clone();
        let name = config.name.clone();
        let constrained = config.constrained;
        std::thread::Builder::new()
            .name("plansmith-local".into())
            .spawn(move || worker(backend, config, inbox, ready_tx, worker_stats))
            .map_err(|err| LocalError::Thread(err.to_string()))?;
        ready_rx
            .recv()
            .map_err(|_| LocalError::Thread("the model thread stopped while loading".into()))??;
        Ok(LocalModel {
            name,
            constrained,
            jobs: Mutex::new(jobs),
            stats,
        })
    }

    /// Timing of the last request.
    pub fn last_stats(&self) -> Stats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }
}

impl LanguageModel for LocalModel {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            grammar: self.constrained,
            ..Capabilities::default()
        }
    }

    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        let answer = self.submit(request, None);
        Box::pin(answer)
    }

    /// The reply's text as it is decoded (each decoding round's new text, cut at whole UTF-8
    /// characters), then the whole completion. Dropping the stream stops decoding, as for
    /// [`LanguageModel::complete`].
    fn stream(&self, request: CompletionRequest) -> BoxStream<'_, Result<StreamEvent, LlmError>> {
        let (text, deltas) = stream_mpsc::unbounded();
        let answer = self.submit(request, Some(text));
        // The worker drops its sender when the request ends, which ends the deltas.
        let done = futures::stream::once(async move { answer.await.map(StreamEvent::Done) });
        Box::pin(deltas.map(|text| Ok(StreamEvent::Delta(text))).chain(done))
    }
}

impl LocalModel {
    /// Queues a request for the worker; the future gives its answer.
    fn submit(
        &self,
        request: CompletionRequest,
        text: Option<stream_mpsc::UnboundedSender<String>>,
    ) -> impl std::future::Future<Output = Result<Completion, LlmError>> + Send + 'static {
        let (reply, answer) = oneshot::channel();
        let sent = self
            .jobs
            .lock()
            .map_err(|_| LlmError::Backend("the local model is poisoned".into()))
            .and_then(|jobs| {
                jobs.send(Job {
                    request,
                    reply,
                    text,
                    queued_at: Instant::now(),
                })
                .map_err(|_| LlmError::Backend("the local model thread has stopped".into()))
            });
        async move {
            sent?;
            answer.await.map_err(|_| {
                LlmError::Backend("the local model thread stopped mid-request".into())
            })?
        }
    }
}

/// The worker: owns the model and its context; serves jobs until the [`LocalModel`] is dropped.
fn worker(
    backend: &'static LlamaBackend,
    config: LocalConfig,
    inbox: mpsc::Receiver<Job>,
    ready: mpsc::Sender<Result<(), LocalError>>,
    stats: Arc<Mutex<Stats>>,
) {
    let started = Instant::now();
    let load_error = |message: String| LocalError::Load {
        path: config.path.display().to_string(),
        message,
    };
    if !config.path.is_file() {
        let _ = ready.send(Err(load_error("no such file".into())));
        return;
    }
    let model =
        match LlamaModel::load_from_file(backend, &config.path, &LlamaModelParams::default()) {
            Ok(model) => Arc::new(model),
            Err(err) => {
                let _ = ready.send(Err(load_error(err.to_string())));
                return;
            }
        };
    // The grammar engine needs the vocabulary as bytes (a few hundred ms for 150k tokens):
    // built once, when constrained decoding can be asked for.
    let factory = if config.constrained {
        match grammar_factory(&model) {
            Ok(factory) => Some(factory),
            Err(err) => {
                let _ = ready.send(Err(load_error(format!(
                    "cannot prepare constrained decoding: {err}"
                ))));
                return;
            }
        }
    } else {
        None
    };
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(config.context))
        .with_n_batch(config.batch)
        .with_n_threads(config.threads.max(1))
        .with_n_threads_batch(config.threads_batch.max(1));
    let mut ctx = match model.new_context(backend, params) {
        Ok(ctx) => ctx,
        Err(err) => {
            let _ = ready.send(Err(load_error(format!("cannot create a context: {err}"))));
            return;
        }
    };
    let template = match model.chat_template(None) {
        Ok(template) => template,
        Err(_) => match LlamaChatTemplate::new(&config.fallback_template) {
            Ok(template) => template,
            Err(err) => {
                let _ = ready.send(Err(load_error(format!(
                    "bad fallback chat template: {err}"
                ))));
                return;
            }
        },
    };
    let _ = ready.send(Ok(()));
    // The first request of the process reports the load it waited behind.
    let mut load = Some(started.elapsed());
    let identity = config
        .prompt_cache
        .as_ref()
        .filter(|_| config.reuse_prefix)
        .map(|_| PromptCache::identity(&config.path, config.context));
    let mut session = Session {
        model: &model,
        ctx: &mut ctx,
        template,
        cached: Vec::new(),
        config: &config,
        factory,
        identity,
    };
    for job in inbox {
        let mut run_stats = Stats::default();
        // A caller that stopped waiting gets nothing more: its request is not decoded (or no
        // further), so the model is free for the next one at once.
        let abandoned = || job.reply.is_canceled();
        let queue_us = u64::try_from(job.queued_at.elapsed().as_micros()).unwrap_or(u64::MAX);
        let result = session
            .complete(&job.request, &mut run_stats, &abandoned, job.text.as_ref())
            .map(|completion| Completion {
                queue_us,
                stages: Some(Stages {
                    load_ms: load.take().map_or(0, millis),
                    cached_tokens: u32::try_from(run_stats.cached_tokens).unwrap_or(u32::MAX),
                    restored_tokens: u32::try_from(run_stats.restored_tokens).unwrap_or(u32::MAX),
                    restore_ms: millis(run_stats.restore_time),
                    prompt_ms: millis(run_stats.prompt_time),
                    generate_ms: millis(run_stats.generate_time),
                }),
                ..completion
            });
        if let Ok(mut shared) = stats.lock() {
            *shared = run_stats;
        }
        let _ = job.reply.send(result);
    }
}

/// The reply being decoded.
#[derive(Default)]
struct Reply {
    /// Its text so far.
    bytes: Vec<u8>,
    /// Tokens chosen or forced but not yet run through the model.
    pending: Vec<LlamaToken>,
    /// Tokens in the reply (chosen and forced).
    generated: usize,
    /// Where the reply's text stands in the JSON it writes (inside a string or not).
    json: JsonLexState,
    /// How many of `bytes` were handed out by [`Reply::unsent`].
    sent: usize,
}

/// Whether a point in JSON text is inside a string, and just after a backslash there.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct JsonLexState {
    in_string: bool,
    escaped: bool,
}

impl JsonLexState {
    /// The state after `bytes`.
    fn after(mut self, bytes: &[u8]) -> Self {
        for &b in bytes {
            match (self.in_string, self.escaped, b) {
                (true, true, _) => self.escaped = false,
                (true, false, b'\\') => self.escaped = true,
                (_, _, b'"') => self.in_string = !self.in_string,
                _ => {}
            }
        }
        self
    }
}

impl Reply {
    /// Sends the text added since the last send to `text`, if the request is streamed (a
    /// reader that stopped reading also dropped the answer, and `abandoned` ends the request).
    fn send_unsent(&mut self, text: Option<&stream_mpsc::UnboundedSender<String>>) {
        if let Some(sender) = text
            && let Some(piece) = self.unsent()
        {
            let _ = sender.unbounded_send(piece);
        }
    }

    /// The text added since the last call, up to its last whole UTF-8 character (a token can
    /// end inside one); `None` when there is none.
    fn unsent(&mut self) -> Option<String> {
        let new = self.bytes.get(self.sent..).unwrap_or_default();
        let whole = match std::str::from_utf8(new) {
            Ok(text) => text,
            Err(err) => match err.error_len() {
                // Cut inside a character: the rest comes with the next token.
                None => std::str::from_utf8(&new[..err.valid_up_to()]).unwrap_or_default(),
                // Bytes that will never be UTF-8: sent as the final text will show them.
                Some(_) => {
                    let text = String::from_utf8_lossy(new).into_owned();
                    self.sent = self.bytes.len();
                    return Some(text);
                }
            },
        };
        if whole.is_empty() {
            return None;
        }
        let text = whole.to_owned();
        self.sent += text.len();
        Some(text)
    }

    /// Appends one token to the reply; it goes through the model with the next batch.
    fn push(&mut self, token: LlamaToken, vocab: &LlamaVocab<'_>) {
        let piece = vocab.token_to_piece(token, false, None);
        self.json = self.json.after(&piece);
        self.bytes.extend(piece);
        self.generated += 1;
        self.pending.push(token);
    }

    /// Appends the tokens the grammar forces next (keys, punctuation: no choice to make), as
    /// many as the token cap leaves room for (it keeps the reply inside the context).
    fn force(
        &mut self,
        matcher: &mut Matcher,
        max_tokens: usize,
        vocab: &LlamaVocab<'_>,
        stats: &mut Stats,
    ) -> Result<(), LlmError> {
        let started = Instant::now();
        let forced = matcher.compute_ff_tokens();
        self.take(matcher, forced, max_tokens, vocab, stats)?;
        let held_back = self.held_back(matcher, vocab)?;
        self.take(matcher, held_back, max_tokens, vocab, stats)?;
        stats.grammar_time += started.elapsed();
        Ok(())
    }

    /// The bytes the grammar forces but [`Matcher::compute_ff_tokens`] holds back because a
    /// longer token might start with them, as tokens, when they end with the quote that opens a
    /// string (a value, or a key the model chooses): Qwen's vocabulary has ` "$`, ` ""`, …, so
    /// the ` "` is held back. Left to the model, each cost a sampled decode with the full output
    /// layer, 10 of the 78 sampled tokens of the bench's 3-step plan, where the model chose
    /// exactly these tokens. The price: a string that starts with punctuation is written ` "` +
    /// `$…` instead of ` "$…`, a split the model rarely sees.
    fn held_back(
        &self,
        matcher: &mut Matcher,
        vocab: &LlamaVocab<'_>,
    ) -> Result<Vec<TokenId>, LlmError> {
        let bytes = matcher.compute_ff_bytes();
        // Only a run that ends with the quote opening a string: what follows is string text,
        // which the tokenizer splits from the quote anyway when it starts with a letter or a
        // digit. Any other held-back run (a lone ` ` or ` [`, the `t` of a key that may be
        // `title` or `text`, the closing `"` of `"}`) forced on its own splits what the model
        // writes as one token, and the 0.5B model then lost its way (measured: a plan that
        // called the wrong tool, or ended its steps early).
        let Some((&b'"', run)) = bytes.split_last() else {
            return Ok(Vec::new());
        };
        if self.json.after(run).in_string {
            return Ok(Vec::new());
        }
        vocab
            .tokenize(&bytes, false, false)
            .into_iter()
            .map(token_id)
            .collect()
    }

    /// Appends `ids` as forced tokens, as many as the token cap leaves room for (it keeps the
    /// reply inside the context) and the grammar takes.
    fn take(
        &mut self,
        matcher: &mut Matcher,
        mut ids: Vec<TokenId>,
        max_tokens: usize,
        vocab: &LlamaVocab<'_>,
        stats: &mut Stats,
    ) -> Result<(), LlmError> {
        ids.truncate(max_tokens.saturating_sub(self.generated));
        if ids.is_empty() {
            return Ok(());
        }
        let taken = matcher
            .try_consume_tokens(&ids)
            .map_err(|err| backend_error("grammar", err))?;
        stats.forced_tokens += taken;
        for &id in ids.get(..taken).unwrap_or_default() {
            self.push(llama_token(id)?, vocab);
        }
        Ok(())
    }
}

struct Session<'m, 'c> {
    model: &'m LlamaModel,
    ctx: &'c mut LlamaContext<'m>,
    template: LlamaChatTemplate,
    /// Tokens whose keys and values are in the KV cache, in order.
    cached: Vec<LlamaToken>,
    config: &'c LocalConfig,
    /// Builds a grammar matcher per constrained request (None when decoding is unconstrained).
    factory: Option<ParserFactory>,
    /// The prompt cache's identity of this model and build, when the cache is on.
    identity: Option<[u8; 32]>,
}

/// Ends a request whose caller stopped waiting: marks the stats, and gives an error that nobody
/// reads (it is for the worker's own bookkeeping).
fn stop_if_abandoned(abandoned: &dyn Fn() -> bool, stats: &mut Stats) -> Result<(), LlmError> {
    if abandoned() {
        stats.abandoned = true;
        return Err(LlmError::Backend(
            "local model: the caller stopped waiting; decoding stopped".into(),
        ));
    }
    Ok(())
}

fn backend_error(what: &str, err: impl std::fmt::Display) -> LlmError {
    LlmError::Backend(format!("local model: {what}: {err}"))
}

impl Session<'_, '_> {
    /// Decodes the reply to `request`, sending its text to `text` (a streamed request) as it
    /// grows.
    fn complete(
        &mut self,
        request: &CompletionRequest,
        stats: &mut Stats,
        abandoned: &dyn Fn() -> bool,
        text: Option<&stream_mpsc::UnboundedSender<String>>,
    ) -> Result<Completion, LlmError> {
        stop_if_abandoned(abandoned, stats)?;
        let messages = request
            .messages
            .iter()
            .map(|m| {
                let role = match m.role {
                    Role::System => "system",
                    Role::User => "user",
                    Role::Assistant => "assistant",
                };
                LlamaChatMessage::new(role.to_owned(), m.content.replace('\0', ""))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| backend_error("bad message", err))?;
        let prompt = self
            .model
            .apply_chat_template(&self.template, &messages, true)
            .map_err(|err| backend_error("chat template", err))?;
        tracing::trace!(%prompt, "prompt");
        let tokens = self.model.vocab().tokenize(prompt.as_bytes(), true, true);
        let max_tokens = usize::try_from(request.max_tokens.max(1)).unwrap_or(usize::MAX);
        let context = usize::try_from(self.config.context).unwrap_or(usize::MAX);
        if tokens.len() + 1 >= context {
            return Err(LlmError::Rejected(format!(
                "the prompt has {} tokens, more than the local model's context of {context}; \
                 lower --top-k or shorten the context",
                tokens.len()
            )));
        }
        let max_tokens = max_tokens.min(context - tokens.len() - 1);

        // A schema the grammar engine cannot compile (an unsatisfiable tool schema, say) is not
        // the end of the request: the reply is decoded without a grammar and the pipeline's
        // validation and repair take over, as for any model without constrained decoding.
        let grammar_started = Instant::now();
        let grammar = match &request.constraint {
            Some(OutputConstraint::JsonSchema { schema, .. })
            | Some(OutputConstraint::ToolCall {
                parameters: schema, ..
            }) => Some(json_grammar(schema)),
            Some(OutputConstraint::ToolCalls {
                schema,
                max_calls,
                max_text,
            }) => Some(calls_grammar(schema, *max_calls, *max_text)),
            _ => None,
        };
        let mut unconstrained_instead = false;
        let mut matcher = match (grammar, &self.factory) {
            (Some(grammar), Some(factory)) => match grammar_matcher(factory, grammar) {
                Ok(matcher) => Some(matcher),
                Err(err) => {
                    tracing::warn!(
                        model = %self.config.name,
                        error = %err,
                        "the output schema has no grammar; decoding without one"
                    );
                    unconstrained_instead = true;
                    None
                }
            },
            _ => None,
        };
        stats.grammar_time = grammar_started.elapsed();

        // Reuse the longest prefix already in the KV cache; always re-evaluate at least one
        // token, so there are logits to sample from.
        let shared = |cached: &[LlamaToken]| {
            cached
                .iter()
                .zip(&tokens)
                .take_while(|(a, b)| a == b)
                .count()
                .min(tokens.len() - 1)
        };
        let mut common = if self.config.reuse_prefix {
            shared(&self.cached)
        } else {
            0
        };
        // The system part's end, when the prompt cache is on and the part is worth an entry.
        let system = self
            .identity
            .and_then(|_| self.system_part(request, &messages, &tokens))
            .filter(|&end| end >= MIN_CACHED_PREFIX && end < tokens.len());
        if system.is_some_and(|end| common < end) {
            self.restore(&tokens, common, stats);
            common = shared(&self.cached);
        }
        let common_u32 = u32::try_from(common).unwrap_or(0);
        if self
            .ctx
            .clear_kv_cache_seq(Some(0), Some(common_u32), None)
            .is_err()
            || common == 0
        {
            self.ctx.clear_kv_cache();
        }
        self.cached.truncate(common);
        stats.prompt_tokens = tokens.len();
        stats.cached_tokens = common;

        let vocab = self.model.vocab();
        let mut reply = Reply::default();
        // The tokens the grammar forces at the start of the reply (`{"thought": "`) go through
        // the model in the prompt's last batch: one decode fewer.
        let started = Instant::now();
        if let Some(matcher) = matcher.as_mut() {
            reply.force(matcher, max_tokens, &vocab, stats)?;
        }
        let mut batch = LlamaBatch::new(self.batch_size(), 1);
        // A system part not yet cached is evaluated on its own and saved, then the rest.
        let mut rest = common;
        if let Some(end) = system.filter(|&end| common < end) {
            let part = tokens.get(common..end).unwrap_or_default();
            self.evaluate(&mut batch, part, "prompt evaluation", abandoned, stats)?;
            self.save();
            rest = end;
        }
        let mut prompt_and_forced = tokens.get(rest..).unwrap_or_default().to_vec();
        prompt_and_forced.append(&mut reply.pending);
        let mut last_index = self.evaluate(
            &mut batch,
            &prompt_and_forced,
            "prompt evaluation",
            abandoned,
            stats,
        )?;
        stats.prompt_time = started.elapsed();

        // Each round: the tokens the grammar forces next join the token chosen before them, and
        // all go through the model in one batch (only the last needs logits), then the next
        // token is chosen from those logits. A grammar that is complete ends the reply.
        let started = Instant::now();
        let mut finish = FinishReason::Length;
        while reply.generated < max_tokens {
            stats.generated_tokens = reply.generated;
            stop_if_abandoned(abandoned, stats)?;
            if let Some(matcher) = matcher.as_mut() {
                reply.force(matcher, max_tokens, &vocab, stats)?;
            }
            // What the last round chose and the grammar forced after it, as it stands.
            reply.send_unsent(text);
            if let Some(matcher) = matcher.as_mut() {
                if matcher.is_stopped() {
                    finish = FinishReason::Stop;
                    break;
                }
                if reply.generated >= max_tokens {
                    break;
                }
            }
            if !reply.pending.is_empty() {
                last_index =
                    self.evaluate(&mut batch, &reply.pending, "generation", abandoned, stats)?;
                reply.pending.clear();
            }
            let logits = self.ctx.get_logits_ith(last_index);
            let first = best_token(logits, |_| true)
                .ok_or_else(|| backend_error("sampling", "no logits"))?;
            let grammar_started = Instant::now();
            let token = match matcher.as_mut() {
                None => first,
                Some(matcher) => {
                    constrained_choice(matcher, first, logits, |t| vocab.is_eog(t), stats)?
                }
            };
            if vocab.is_eog(token) {
                finish = FinishReason::Stop;
                break;
            }
            if let Some(matcher) = matcher.as_mut() {
                matcher
                    .consume_token(token_id(token)?)
                    .map_err(|err| backend_error("grammar", err))?;
                stats.grammar_time += grammar_started.elapsed();
            }
            reply.push(token, &vocab);
        }
        reply.send_unsent(text);
        stats.generate_time = started.elapsed();
        let Reply {
            bytes, generated, ..
        } = reply;
        stats.generated_tokens = generated;
        Ok(Completion {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            tool_calls: Vec::new(),
            usage: Usage {
                prompt_tokens: u32::try_from(tokens.len()).unwrap_or(u32::MAX),
                completion_tokens: u32::try_from(generated).unwrap_or(u32::MAX),
            },
            finish,
            strategy: unconstrained_instead.then_some(Strategy::PromptOnly),
            queue_us: 0,
            stages: None,
        })
    }

    /// Where the prompt's leading system messages end in `tokens`: they rendered alone must
    /// tokenize to a prefix of the whole prompt (true of chat templates that close a message
    /// before the next one starts).
    fn system_part(
        &self,
        request: &CompletionRequest,
        messages: &[LlamaChatMessage],
        tokens: &[LlamaToken],
    ) -> Option<usize> {
        let count = request
            .messages
            .iter()
            .take_while(|m| m.role == Role::System)
            .count();
        let system = self
            .model
            .apply_chat_template(&self.template, messages.get(..count)?, false)
            .ok()?;
        let prefix = self.model.vocab().tokenize(system.as_bytes(), true, true);
        (count > 0 && tokens.starts_with(&prefix)).then_some(prefix.len())
    }

    /// Loads the prompt cache's entry that shares the most with `tokens`, when it shares more
    /// than the `common` tokens already in the KV cache. Anything amiss (no entry, a damaged
    /// one, llama.cpp refusing it) leaves an empty KV cache and a debug log.
    fn restore(&mut self, tokens: &[LlamaToken], common: usize, stats: &mut Stats) {
        let (Some(cache), Some(identity)) = (self.config.prompt_cache.as_ref(), self.identity)
        else {
            return;
        };
        let started = Instant::now();
        let prompt: Vec<i32> = tokens.iter().map(|t| t.0).collect();
        let at_least = (common + 1).max(MIN_CACHED_PREFIX);
        let Some(candidate) = cache.best(&identity, &prompt, at_least) else {
            return;
        };
        let ctx = &mut *self.ctx;
        let restored = cache.restore(&candidate, |path| {
            ctx.clear_kv_cache();
            ctx.state_seq_load_file(path, 0, candidate.tokens.len())
                .map(|(tokens, _)| tokens.into_iter().map(|t| t.0).collect())
                .map_err(|err| err.to_string())
        });
        match restored {
            Ok(()) => {
                self.cached = candidate.tokens.iter().map(|&t| LlamaToken(t)).collect();
                stats.restored_tokens = candidate.common.min(tokens.len() - 1);
            }
            Err(err) => {
                tracing::debug!(dir = %cache.dir().display(), error = %err, "prompt cache: entry not used");
                self.ctx.clear_kv_cache();
                self.cached.clear();
            }
        }
        stats.restore_time = started.elapsed();
    }

    /// Saves the state of the tokens in the KV cache (a system part) to the prompt cache (its
    /// time is part of the prompt's).
    fn save(&mut self) {
        let (Some(cache), Some(identity)) = (self.config.prompt_cache.as_ref(), self.identity)
        else {
            return;
        };
        let tokens: Vec<i32> = self.cached.iter().map(|t| t.0).collect();
        let ctx = &*self.ctx;
        let cached = &self.cached;
        cache.store(&identity, &tokens, |path| {
            ctx.state_seq_save_file(path, 0, cached)
                .map(|_| ())
                .map_err(|err| err.to_string())
        });
    }

    /// Tokens per llama.cpp batch (the prompt is evaluated in batches of this size).
    fn batch_size(&self) -> usize {
        usize::try_from(self.config.batch.max(1)).unwrap_or(512)
    }

    /// Runs `tokens` through the model after the cached ones, in batches; only the last token
    /// gets logits. Returns that token's index in the last batch. Stops between batches when
    /// the caller has stopped waiting (a long prompt takes several seconds a batch).
    fn evaluate(
        &mut self,
        batch: &mut LlamaBatch<'_>,
        tokens: &[LlamaToken],
        what: &str,
        abandoned: &dyn Fn() -> bool,
        stats: &mut Stats,
    ) -> Result<i32, LlmError> {
        let batch_size = self.batch_size();
        let mut last_index = 0;
        for (chunk_idx, chunk) in tokens.chunks(batch_size).enumerate() {
            if chunk_idx > 0 {
                stop_if_abandoned(abandoned, stats)?;
            }
            batch.clear();
            let is_last_chunk = (chunk_idx + 1) * batch_size >= tokens.len();
            for (offset, &token) in chunk.iter().enumerate() {
                let pos = i32::try_from(self.cached.len() + offset).unwrap_or(i32::MAX);
                let logits = is_last_chunk && offset + 1 == chunk.len();
                batch
                    .add(token, pos, &[0], logits)
                    .map_err(|err| backend_error("batch", err))?;
            }
            self.ctx
                .decode(batch)
                .map_err(|err| backend_error(what, err))?;
            last_index = batch.n_tokens() - 1;
            self.cached.extend_from_slice(chunk);
        }
        Ok(last_index)
    }
}

/// The vocabulary as llguidance sees it: each token's bytes (special tokens marked with a
/// leading 0xFF, as llguidance expects), tokenized back by llama.cpp's own tokenizer, which is
/// canonical, so llguidance may force whole tokens.
struct LlamaTokEnv {
    trie: TokTrie,
    model: Arc<LlamaModel>,
}

impl TokenizerEnv for LlamaTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.tokenize_with(s, false)
    }

    fn tokenize_bytes_special(&self, s: &[u8]) -> Vec<TokenId> {
        self.tokenize_with(s, true)
    }

    fn tokenize_is_canonical(&self) -> bool {
        true
    }
}

impl LlamaTokEnv {
    fn tokenize_with(&self, s: &[u8], special: bool) -> Vec<TokenId> {
        self.model
            .vocab()
            .tokenize(s, false, special)
            .into_iter()
            .filter_map(|t| TokenId::try_from(t.0).ok())
            .collect()
    }
}

/// The grammar engine for one model: its vocabulary and llguidance's token-mask slices.
fn grammar_factory(model: &Arc<LlamaModel>) -> Result<ParserFactory, String> {
    let vocab = model.vocab();
    let n_vocab = u32::try_from(model.n_vocab()).map_err(|err| err.to_string())?;
    let eot = vocab.eot();
    let end = if eot.0 == -1 { vocab.eos() } else { eot };
    let end = token_id(end).map_err(|err| err.to_string())?;
    let mut eog = vec![end];
    let mut words = Vec::with_capacity(usize::try_from(n_vocab).unwrap_or(0));
    for id in 0..n_vocab {
        let token = LlamaToken(i32::try_from(id).map_err(|err| err.to_string())?);
        if vocab.is_eog(token) && id != end {
            eog.push(id);
        }
        let piece = vocab.token_to_piece(token, false, None);
        if piece.is_empty() {
            let special = vocab.token_to_piece(token, true, None);
            if special.is_empty() {
                words.push(Vec::new());
            } else {
                let mut marked = Vec::with_capacity(special.len() + 1);
                marked.push(0xFF);
                marked.extend(special);
                words.push(marked);
            }
        } else {
            words.push(piece);
        }
    }
    let trie = TokTrie::from(&TokRxInfo::new(n_vocab, end), &words).with_eos_tokens(&eog);
    let env: TokEnv = Arc::new(LlamaTokEnv {
        trie,
        model: Arc::clone(model),
    });
    let capabilities = InferenceCapabilities {
        ff_tokens: true,
        ..InferenceCapabilities::default()
    };
    let mut factory = ParserFactory::new(&env, capabilities, &SlicedBiasComputer::general_slices())
        .map_err(|err| err.to_string())?;
    factory.quiet();
    Ok(factory)
}

/// How the model writes JSON under the grammar: compact and fixed (`{"a": 1, "b": [2, 3]}`),
/// the way these models write it unprompted; fixed separators make the punctuation and the
/// keys between values forced tokens. Keywords the grammar cannot express are ignored
/// (`lenient`): every argument is validated against its tool's schema afterwards anyway.
/// Separators without their spaces (`{"a":1}`, the prompt's example written the same way) would
/// cut the structural tokens, but the 0.5B model then wrote a 1-step plan with a question for
/// the bench's 3-step request (weather, email, reply): measured, and dropped.
fn guidance_options() -> Value {
    json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        "lenient": true
    })
}

/// The grammar of a JSON Schema, written as [`guidance_options`] says.
fn json_grammar(schema: &Value) -> TopLevelGrammar {
    TopLevelGrammar::from_json_schema(guided(schema))
}

/// `schema` with [`guidance_options`].
fn guided(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(object) = schema.as_object_mut() {
        object.insert("x-guidance".to_owned(), guidance_options());
    }
    schema
}

/// The grammar of the tool-call format (`plansmith_core::calls`): one to `max_calls` calls
/// joined by line breaks, each a JSON object matching `call_schema`, tagged as the Qwen /
/// Hermes chat templates write them (`<tool_call>\n{JSON}\n</tool_call>`), in a Markdown
/// JSON fence, or bare: small models that saw less of the tags write the other two
/// (Qwen2.5-Coder-0.5B answers llama.cpp's own tool-calling prompt with a fenced object), and
/// a grammar that forbids the form a model prefers makes it write text instead. Or plain text
/// of at most about `max_text` characters (bounded in tokens: a token is at least one
/// character) that does not start with `<`, `{`, `[`, `` ` `` or white space, so the first
/// token decides between a reply and calls.
fn calls_grammar(call_schema: &Value, max_calls: u32, max_text: u32) -> TopLevelGrammar {
    TopLevelGrammar::from_lark(calls_lark(call_schema, max_calls, max_text))
}

/// The Lark text of [`calls_grammar`].
fn calls_lark(call_schema: &Value, max_calls: u32, max_text: u32) -> String {
    let calls = match max_calls.max(1) - 1 {
        0 => "call".to_owned(),
        more => format!("call (\"\\n\" call){{0,{more}}}"),
    };
    let text_tokens = max_text.max(1);
    let schema = guided(call_schema);
    format!(
        "start: reply | calls\n\
         calls: {calls}\n\
         call: \"<tool_call>\\n\" call_json \"\\n</tool_call>\" \
             | \"```json\\n\" call_json \"\\n```\" | call_json\n\
         call_json: %json {schema}\n\
         reply[max_tokens={text_tokens}]: /[^<{{\\[`\\s][^<`]*/\n"
    )
}

/// A matcher for one request's grammar, or why it cannot be had (an unsatisfiable schema).
fn grammar_matcher(factory: &ParserFactory, grammar: TopLevelGrammar) -> Result<Matcher, String> {
    let matcher = Matcher::new(factory.create_parser(grammar));
    match matcher.get_error() {
        Some(err) => Err(err),
        None => Ok(matcher),
    }
}

fn token_id(token: LlamaToken) -> Result<TokenId, LlmError> {
    TokenId::try_from(token.0).map_err(|_| backend_error("sampling", "negative token id"))
}

fn llama_token(id: TokenId) -> Result<LlamaToken, LlmError> {
    i32::try_from(id)
        .map(LlamaToken)
        .map_err(|_| backend_error("grammar", "token id out of range"))
}

/// The token with the highest logit among those `allowed` (by index).
fn best_token(logits: &[f32], allowed: impl Fn(usize) -> bool) -> Option<LlamaToken> {
    let mut best: Option<(usize, f32)> = None;
    for (idx, &logit) in logits.iter().enumerate() {
        if !logit.is_nan() && best.is_none_or(|(_, b)| logit > b) && allowed(idx) {
            best = Some((idx, logit));
        }
    }
    best.and_then(|(idx, _)| i32::try_from(idx).ok())
        .map(LlamaToken)
}

/// Greedy under the grammar: `first`, the greedy token, is checked alone; the grammar's mask of
/// the whole vocabulary is computed only when it is rejected.
fn constrained_choice(
    matcher: &mut Matcher,
    first: LlamaToken,
    logits: &[f32],
    is_end: impl Fn(LlamaToken) -> bool,
    stats: &mut Stats,
) -> Result<LlamaToken, LlmError> {
    let grammar_error = |err| backend_error("grammar", err);
    let fits = if is_end(first) {
        matcher.is_accepting().map_err(grammar_error)?
    } else {
        matcher
            .validate_tokens(&[token_id(first)?])
            .map_err(grammar_error)?
            == 1
    };
    if fits {
        return Ok(first);
    }
    stats.grammar_rejections += 1;
    let mask = matcher.compute_mask().map_err(grammar_error)?;
    best_token(logits, |idx| {
        TokenId::try_from(idx).is_ok_and(|id| mask.is_allowed(id))
    })
    .ok_or_else(|| backend_error("grammar", "no token fits the grammar"))
}

#[cfg(test)]
mod tests {
    use super::JsonLexState;

    /// The tool-call grammar, pinned: the first decision is between a reply (text that
    /// cannot start a call) and calls, each tagged, fenced or bare; the call's JSON follows
    /// the call schema with the lenient whitespace of `guidance_options`. A change here moves
    /// the evaluation figures (docs/perf.md) and must be measured.
    #[test]
    fn the_tool_call_grammar_is_pinned() {
        let schema = serde_json::json!({"type": "object", "properties": {"name": {"const": "f"}}});
        let lark = super::calls_lark(&schema, 3, 200);
        let expected = concat!(
            "start: reply | calls\n",
            "calls: call (\"\\n\" call){0,2}\n",
            "call: \"<tool_call>\\n\" call_json \"\\n</tool_call>\" ",
            "| \"```json\\n\" call_json \"\\n```\" | call_json\n",
            "call_json: %json {\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"f\"}},",
            "\"x-guidance\":{\"whitespace_flexible\":false,",
            "\"item_separator\":\", \",\"key_separator\":\": \",\"lenient\":true}}\n",
            "reply[max_tokens=200]: /[^<{\\[`\\s][^<`]*/\n",
        );
        assert_eq!(lark, expected);
        assert_eq!(
            super::calls_lark(&schema, 1, 0).lines().nth(1),
            Some("calls: call"),
            "one call at most: no repetition"
        );
    }

    fn in_string(text: &str) -> bool {
        JsonLexState::default().after(text.as_bytes()).in_string
    }

    #[test]
    fn json_lex_state_tracks_strings_and_escapes() {
        assert!(!in_string(r#"{"thought": "#));
        assert!(in_string(r#"{"thought": ""#));
        assert!(!in_string(r#"{"a": "b""#));
        // An escaped quote does not end the string; an escaped backslash before a quote does.
        assert!(in_string(r#"{"a": "say \"hi"#));
        assert!(!in_string(r#"{"a": "dir\\""#));
        // Fed in pieces, as tokens arrive: the escape carries over a piece boundary.
        let state = JsonLexState::default().after(br#"{"a": "x\"#);
        assert!(state.in_string && state.escaped);
        assert!(state.after(br#"""#).in_string);
    }
}
