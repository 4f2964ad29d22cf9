//! The embedded model: a GGUF file run in-process by llama.cpp, behind [`LanguageModel`].
//!
//! One worker thread owns the model and one context for the life of the [`LocalModel`]: the
//! model is loaded once, and each request decodes in a sequence of the context's KV cache
//! ([`LocalConfig::sequences`] of them: one by default, several for a server), in rounds that
//! put every sequence's next tokens in one batch ([`rounds`]). A request waits for a free
//! sequence, oldest first. A sequence keeps the KV cache of its last prompt, and a request that
//! shares a prefix (system prompt + tool manifest) with what any sequence holds shares those
//! cells and only evaluates the new tokens. A request whose caller stops waiting (its future is
//! dropped: a server timeout, a closed connection) is not decoded any further: the worker checks
//! every round, so its sequence is free for the next request at once and the others go on. A
//! streamed request ([`LanguageModel::stream`]) gets the reply's text after each round, so the
//! pipeline reports tokens and each finished step while the model still writes.
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

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use futures::StreamExt as _;
use futures::channel::{mpsc as stream_mpsc, oneshot};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatTemplate, LlamaModel};
use plansmith_core::llm::{BoxFuture, BoxStream, Completion, StreamEvent};
use plansmith_core::{
    Capabilities, CompletionRequest, LanguageModel, Likelihood, LlmError, Stages,
};

use crate::prompt_cache::PromptCache;

mod config;
mod error;
mod grammar;
mod reply;
mod rounds;
mod session;
mod stats;

pub use config::LocalConfig;
pub use error::LocalError;
pub use stats::Stats;

use grammar::grammar_factory;
use session::Session;
use stats::millis;

/// What the worker is asked: a completion, or a text's likelihood.
enum Work {
    Complete(Job),
    Likelihood(Scoring),
}

/// A likelihood to compute ([`LanguageModel::likelihood`]).
struct Scoring {
    context: String,
    text: String,
    reply: oneshot::Sender<Result<Likelihood, LlmError>>,
}

struct Job {
    request: CompletionRequest,
    reply: oneshot::Sender<Result<Completion, LlmError>>,
    /// Where the reply's text goes as it is decoded, for a streamed request.
    text: Option<stream_mpsc::UnboundedSender<String>>,
    /// When the request was queued: the wait until it gets a sequence is the completion's
    /// [`Completion::queue_us`].
    queued_at: Instant,
    /// That wait, once it is over.
    queue_us: u64,
}

/// A GGUF model run in-process (see the module docs).
pub struct LocalModel {
    name: String,
    constrained: bool,
    jobs: Mutex<mpsc::Sender<Work>>,
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
        let (jobs, inbox) = mpsc::channel::<Work>();
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
            prefill: true,
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

    /// Scored on the worker, between completions; dropping the future stops it between two
    /// batches.
    fn likelihood(
        &self,
        context: String,
        text: String,
    ) -> BoxFuture<'_, Result<Option<Likelihood>, LlmError>> {
        let answer = self.queue(|reply| {
            Work::Likelihood(Scoring {
                context,
                text,
                reply,
            })
        });
        Box::pin(async move { answer.await.map(Some) })
    }
}

impl LocalModel {
    /// Queues a request for the worker; the future gives its answer.
    fn submit(
        &self,
        request: CompletionRequest,
        text: Option<stream_mpsc::UnboundedSender<String>>,
    ) -> impl std::future::Future<Output = Result<Completion, LlmError>> + Send + 'static {
        self.queue(|reply| {
            Work::Complete(Job {
                request,
                reply,
                text,
                queued_at: Instant::now(),
                queue_us: 0,
            })
        })
    }

    /// Sends the worker the work `make` builds around a reply channel; the future gives the
    /// reply.
    fn queue<T: Send + 'static>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, LlmError>>) -> Work,
    ) -> impl std::future::Future<Output = Result<T, LlmError>> + Send + 'static {
        let (reply, answer) = oneshot::channel();
        let sent = self
            .jobs
            .lock()
            .map_err(|_| LlmError::Backend("the local model is poisoned".into()))
            .and_then(|jobs| {
                jobs.send(make(reply))
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
    inbox: mpsc::Receiver<Work>,
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
    // One unified KV buffer: a sequence per request decoded at once, whose cached prompt the
    // next request reuses (and another sequence shares, without a copy), and one more in which
    // a likelihood is scored and cleared, so it leaves those caches alone. Each sequence may
    // grow to the configured context.
    let sequences = config.sequences.max(1);
    let seq_max = u32::try_from(sequences + 1).unwrap_or(u32::MAX);
    let n_ctx = u32::try_from(sequences)
        .ok()
        .and_then(|n| config.context.checked_mul(n))
        .unwrap_or(config.context);
    let params = LlamaContextParams::default()
        .with_n_seq_max(seq_max)
        .with_kv_unified(true)
        .with_n_ctx(NonZeroU32::new(n_ctx))
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
        cached: vec![Vec::new(); sequences],
        config: &config,
        factory,
        identity,
    };
    let mut slots: Vec<Option<rounds::Active>> = (0..sequences).map(|_| None).collect();
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let mut open = true;
    loop {
        // Nothing to decode: wait for work (or the end, when the model is dropped).
        if slots.iter().all(Option::is_none) && waiting.is_empty() {
            match inbox.recv() {
                Ok(work) => take(work, &mut session, &mut waiting),
                Err(_) => return,
            }
        }
        // Work sent meanwhile joins at the next round.
        while open {
            match inbox.try_recv() {
                Ok(work) => take(work, &mut session, &mut waiting),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => open = false,
            }
        }
        // Free sequences take the oldest waiting requests.
        while slots.iter().any(Option::is_none) {
            let Some(mut job) = waiting.pop_front() else {
                break;
            };
            let mut run_stats = Stats::default();
            // A caller that stopped waiting gets nothing more: its request is not decoded.
            if job.reply.is_canceled() {
                run_stats.abandoned = true;
                report(&stats, run_stats);
                continue;
            }
            job.queue_us = u64::try_from(job.queued_at.elapsed().as_micros()).unwrap_or(u64::MAX);
            let prepared = match session.prepare(&job.request, &mut run_stats) {
                Ok(prepared) => prepared,
                Err(err) => {
                    report(&stats, run_stats);
                    let _ = job.reply.send(Err(err));
                    continue;
                }
            };
            let free: Vec<usize> = (0..slots.len())
                .filter(|&slot| slots.get(slot).is_some_and(Option::is_none))
                .collect();
            let Some(seq) = session.best_free(&free, &prepared.tokens) else {
                waiting.push_front(job);
                break;
            };
            match session.begin(prepared, seq, job, run_stats) {
                Ok(active) => {
                    if let Some(slot) = slots.get_mut(seq) {
                        *slot = Some(active);
                    }
                }
                Err(failed) => {
                    let (job, run_stats, err) = *failed;
                    report(&stats, run_stats);
                    let _ = job.reply.send(Err(err));
                }
            }
        }
        for (active, result) in session.round(&mut slots) {
            let rounds::Active {
                job,
                stats: run_stats,
                ..
            } = active;
            let result = result.map(|completion| Completion {
                queue_us: job.queue_us,
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
            report(&stats, run_stats);
            let _ = job.reply.send(result);
        }
    }
}

/// Takes work from the inbox: a completion waits for a sequence; a likelihood is scored at
/// once, between two rounds.
fn take(work: Work, session: &mut Session<'_, '_>, waiting: &mut VecDeque<Job>) {
    match work {
        Work::Complete(job) => waiting.push_back(job),
        Work::Likelihood(scoring) => {
            let abandoned = || scoring.reply.is_canceled();
            let result = session.likelihood(&scoring.context, &scoring.text, &abandoned);
            let _ = scoring.reply.send(result);
        }
    }
}

/// Keeps a finished request's timing for [`LocalModel::last_stats`].
fn report(shared: &Mutex<Stats>, stats: Stats) {
    if let Ok(mut shared) = shared.lock() {
        *shared = stats;
    }
}
