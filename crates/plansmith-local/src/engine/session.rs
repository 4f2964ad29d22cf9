//! The worker's model state: a context whose KV cache holds one sequence per request decoded at
//! once (and one for likelihoods), and how a request gets its sequence: its prompt rendered and
//! tokenized, its grammar built, its prompt's prefix shared from another sequence or restored
//! from the disk cache. The decoding itself is in [`super::rounds`].

use std::collections::VecDeque;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;
use llguidance::{Matcher, ParserFactory};
use plansmith_core::llm::Role;
use plansmith_core::{CompletionRequest, Likelihood, LlmError, OutputConstraint};

use super::Job;
use super::config::{LocalConfig, MIN_CACHED_PREFIX};
use super::error::backend_error;
use super::grammar::{calls_grammar, grammar_matcher, json_grammar};
use super::reply::Reply;
use super::rounds::Active;
use super::stats::Stats;

pub(super) struct Session<'m, 'c> {
    pub(super) model: &'m LlamaModel,
    pub(super) ctx: &'c mut LlamaContext<'m>,
    pub(super) template: LlamaChatTemplate,
    /// Per sequence of the KV cache, the tokens whose keys and values it holds, in order. A
    /// sequence keeps them after its request ends, for the next request that shares a prefix.
    pub(super) cached: Vec<Vec<LlamaToken>>,
    pub(super) config: &'c LocalConfig,
    /// Builds a grammar matcher per constrained request (None when decoding is unconstrained).
    pub(super) factory: Option<ParserFactory>,
    /// The prompt cache's identity of this model and build, when the cache is on.
    pub(super) identity: Option<[u8; 32]>,
}

/// Ends a request whose caller stopped waiting: marks the stats, and gives an error that nobody
/// reads (it is for the worker's own bookkeeping).
pub(super) fn stop_if_abandoned(
    abandoned: &dyn Fn() -> bool,
    stats: &mut Stats,
) -> Result<(), LlmError> {
    if abandoned() {
        stats.abandoned = true;
        return Err(abandoned_error());
    }
    Ok(())
}

/// The error an abandoned request ends with (nobody reads it).
pub(super) fn abandoned_error() -> LlmError {
    LlmError::Backend("local model: the caller stopped waiting; decoding stopped".into())
}

/// A request's prompt, tokenized, and what decoding it needs; not yet given a sequence.
pub(super) struct Prepared {
    pub(super) tokens: Vec<LlamaToken>,
    /// Where the prompt's leading system messages end, when the prompt cache is on and they are
    /// worth an entry.
    system: Option<usize>,
    matcher: Option<Matcher>,
    max_tokens: usize,
    unconstrained_instead: bool,
}

impl Session<'_, '_> {
    /// Renders and tokenizes `request`'s prompt and builds its grammar.
    pub(super) fn prepare(
        &self,
        request: &CompletionRequest,
        stats: &mut Stats,
    ) -> Result<Prepared, LlmError> {
        // A conversation that ends with an assistant message is continued from that message's
        // text (prefill): the template renders the turns before it and opens the assistant's
        // turn, and the text follows as the start of the reply.
        let (history, prefill) = match request.messages.split_last() {
            Some((last, history)) if last.role == Role::Assistant => {
                (history, Some(last.content.replace('\0', "")))
            }
            _ => (request.messages.as_slice(), None),
        };
        let messages = history
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
        let mut prompt = self
            .model
            .apply_chat_template(&self.template, &messages, true)
            .map_err(|err| backend_error("chat template", err))?;
        if let Some(prefill) = prefill {
            prompt.push_str(&prefill);
        }
        tracing::trace!(%prompt, "prompt");
        let tokens = self.model.vocab().tokenize(prompt.as_bytes(), true, true);
        let max_tokens = usize::try_from(request.max_tokens.max(1)).unwrap_or(usize::MAX);
        let context = usize::try_from(self.config.context).unwrap_or(usize::MAX);
        if tokens.is_empty() || tokens.len() + 1 >= context {
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
                earlier,
            }) => Some(calls_grammar(schema, *max_calls, *max_text, *earlier)),
            _ => None,
        };
        let mut unconstrained_instead = false;
        let matcher = match (grammar, &self.factory) {
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
        // The system part's end, when the prompt cache is on and the part is worth an entry.
        let system = self
            .identity
            .and_then(|_| self.system_part(request, &messages, &tokens))
            .filter(|&end| end >= MIN_CACHED_PREFIX && end < tokens.len());
        Ok(Prepared {
            tokens,
            system,
            matcher,
            max_tokens,
            unconstrained_instead,
        })
    }

    /// How many leading tokens of `tokens` sequence `seq` holds (at most all but the last: a
    /// prompt always evaluates one token, for logits to choose from).
    fn shared(&self, seq: usize, tokens: &[LlamaToken]) -> usize {
        self.cached
            .get(seq)
            .map_or(0, |cached| {
                cached
                    .iter()
                    .zip(tokens)
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .min(tokens.len().saturating_sub(1))
    }

    /// Of the sequences in `free`, the one that loses the fewest cached tokens to `tokens` (it
    /// keeps only the prefix it shares with them), then the one that shares the most, then the
    /// first. An empty sequence loses nothing, so a request whose prompt starts otherwise (a
    /// follow-up's instructions) leaves the others' prompts for the next requests like theirs;
    /// it still shares their common prefix ([`Session::begin`]).
    pub(super) fn best_free(&self, free: &[usize], tokens: &[LlamaToken]) -> Option<usize> {
        free.iter().copied().min_by_key(|&seq| {
            let held = self.cached.get(seq).map_or(0, Vec::len);
            let shared = self.shared(seq, tokens);
            (held.saturating_sub(shared), std::cmp::Reverse(shared), seq)
        })
    }

    /// Sets sequence `seq` up for `prepared`: the longest prefix another sequence (or this one)
    /// holds is shared (its cells gain this sequence: no copy, no evaluation), or the prompt
    /// cache's entry on disk when it is longer; the rest is left to evaluate.
    pub(super) fn begin(
        &mut self,
        prepared: Prepared,
        seq: usize,
        job: Job,
        mut stats: Stats,
    ) -> Result<Active, Box<(Job, Stats, LlmError)>> {
        let Prepared {
            tokens,
            system,
            mut matcher,
            max_tokens,
            unconstrained_instead,
        } = prepared;
        let started = Instant::now();
        let mut common = 0;
        if self.config.reuse_prefix {
            let source = (0..self.cached.len())
                .filter(|&other| other != seq)
                .max_by_key(|&other| self.shared(other, &tokens))
                .filter(|&other| self.shared(other, &tokens) > self.shared(seq, &tokens));
            common = match source {
                Some(other) => self.share(other, seq, &tokens),
                None => self.shared(seq, &tokens),
            };
        }
        if system.is_some_and(|end| common < end) {
            self.restore(seq, &tokens, common, &mut stats);
            common = self.shared(seq, &tokens);
        }
        self.keep(seq, common);
        stats.prompt_tokens = tokens.len();
        stats.cached_tokens = common;

        let vocab = self.model.vocab();
        let mut reply = Reply::default();
        // The tokens the grammar forces at the start of the reply (`{"thought": "`) go through
        // the model in the prompt's last batch: one decode fewer.
        if let Some(matcher) = matcher.as_mut()
            && let Err(err) = reply.force(matcher, max_tokens, &vocab, &mut stats)
        {
            return Err(Box::new((job, stats, err)));
        }
        // A system part not yet cached is evaluated on its own and saved, then the rest.
        let mut segments = VecDeque::new();
        let mut rest = common;
        let save_at = system.filter(|&end| common < end);
        if let Some(end) = save_at {
            segments.push_back(tokens.get(common..end).unwrap_or_default().to_vec());
            rest = end;
        }
        let mut prompt_and_forced = tokens.get(rest..).unwrap_or_default().to_vec();
        prompt_and_forced.append(&mut reply.pending);
        segments.push_back(prompt_and_forced);
        Ok(Active {
            job,
            seq,
            stats,
            prompt_len: tokens.len(),
            matcher,
            reply,
            max_tokens,
            unconstrained_instead,
            segments,
            save_at,
            started,
            generating: None,
        })
    }

    /// Makes sequence `to` hold the prefix of `tokens` that sequence `from` holds; returns its
    /// length.
    fn share(&mut self, from: usize, to: usize, tokens: &[LlamaToken]) -> usize {
        let common = self.shared(from, tokens);
        let (Ok(from_id), Ok(to_id), Ok(end)) = (
            i32::try_from(from),
            i32::try_from(to),
            u32::try_from(common),
        ) else {
            return self.shared(to, tokens);
        };
        self.forget(to);
        if self
            .ctx
            .copy_kv_cache_seq(from_id, to_id, None, Some(end))
            .is_err()
        {
            self.forget(to);
            return 0;
        }
        if let Some(cached) = self.cached.get_mut(to) {
            *cached = tokens.get(..common).unwrap_or_default().to_vec();
        }
        common
    }

    /// Keeps the first `common` tokens of sequence `seq` and drops the rest.
    fn keep(&mut self, seq: usize, common: usize) {
        let kept = u32::try_from(seq).ok().zip(u32::try_from(common).ok());
        let cleared = kept.is_some_and(|(seq, common)| {
            self.ctx
                .clear_kv_cache_seq(Some(seq), Some(common), None)
                .unwrap_or(false)
        });
        if !cleared || common == 0 {
            self.forget(seq);
        } else if let Some(cached) = self.cached.get_mut(seq) {
            cached.truncate(common);
        }
    }

    /// Empties sequence `seq`. With no other sequence holding anything, the whole KV cache is
    /// cleared, which also puts the next prompt at the buffer's start.
    pub(super) fn forget(&mut self, seq: usize) {
        if let Some(cached) = self.cached.get_mut(seq) {
            cached.clear();
        }
        if self.cached.iter().all(Vec::is_empty) {
            self.ctx.clear_kv_cache();
        } else if let Ok(seq) = u32::try_from(seq) {
            let _ = self.ctx.clear_kv_cache_seq(Some(seq), None, None);
        }
    }

    /// How likely the model finds `text` right after `context`, both tokenized as plain text
    /// (see [`plansmith_core::LanguageModel::likelihood`]), each next token's log-probability
    /// read from the logits of the token before it.
    pub(super) fn likelihood(
        &mut self,
        context: &str,
        text: &str,
        abandoned: &dyn Fn() -> bool,
    ) -> Result<Likelihood, LlmError> {
        let mut stats = Stats::default();
        stop_if_abandoned(abandoned, &mut stats)?;
        let vocab = self.model.vocab();
        let mut tokens = vocab.tokenize(context.replace('\0', "").as_bytes(), false, false);
        let head = tokens.len();
        if head == 0 {
            return Err(LlmError::Rejected(
                "a likelihood needs a context to score the text after".into(),
            ));
        }
        tokens.extend(vocab.tokenize(text.replace('\0', "").as_bytes(), false, false));
        let context_size = usize::try_from(self.config.context).unwrap_or(usize::MAX);
        if tokens.len() + 1 >= context_size {
            return Err(LlmError::Rejected(format!(
                "the text to score has {} tokens, more than the local model's context of \
                 {context_size}",
                tokens.len()
            )));
        }
        // Scored in the sequence after the completions' in the shared KV buffer, from an empty
        // sequence, and cleared after: the completions' cached prompts stay for the next
        // requests.
        let seq = self.scoring_seq();
        let _ = self.ctx.clear_kv_cache_seq(Some(seq), None, None);
        let scored = self.score(&tokens, head, abandoned, &mut stats);
        let _ = self.ctx.clear_kv_cache_seq(Some(seq), None, None);
        let log_prob = scored?;
        Ok(Likelihood {
            log_prob,
            tokens: u32::try_from(tokens.len() - head).unwrap_or(u32::MAX),
        })
    }

    /// The sum of the log-probabilities of `tokens[head..]`, each after the tokens before it,
    /// evaluated in batches in the scoring sequence: every token from the context's last one on gets
    /// logits.
    fn score(
        &mut self,
        tokens: &[LlamaToken],
        head: usize,
        abandoned: &dyn Fn() -> bool,
        stats: &mut Stats,
    ) -> Result<f64, LlmError> {
        let batch_size = self.batch_size();
        let mut batch = LlamaBatch::new(batch_size, 1);
        let seq = i32::try_from(self.scoring_seq()).unwrap_or(i32::MAX);
        let mut log_prob = 0.0_f64;
        let mut start = 0;
        while start < tokens.len() {
            stop_if_abandoned(abandoned, stats)?;
            let end = (start + batch_size).min(tokens.len());
            let chunk = tokens.get(start..end).unwrap_or_default();
            batch.clear();
            for (offset, &token) in chunk.iter().enumerate() {
                let at = start + offset;
                let pos = i32::try_from(at).unwrap_or(i32::MAX);
                // Logits for the tokens whose successor is a token of the text.
                let logits = at + 1 >= head && at + 1 < tokens.len();
                batch
                    .add(token, pos, &[seq], logits)
                    .map_err(|err| backend_error("batch", err))?;
            }
            self.ctx
                .decode(&mut batch)
                .map_err(|err| backend_error("likelihood", err))?;
            for (offset, at) in (start..end).enumerate() {
                if at + 1 < head {
                    continue;
                }
                let Some(&next) = tokens.get(at + 1) else {
                    continue;
                };
                let index = i32::try_from(offset).unwrap_or(i32::MAX);
                log_prob += log_softmax_at(self.ctx.get_logits_ith(index), next);
            }
            start = end;
        }
        Ok(log_prob)
    }

    /// Where the prompt's leading system messages end in `tokens`: they rendered alone must
    /// tokenize to a prefix of the whole prompt (true of chat templates that close a message
    /// before the next one starts).
    pub(super) fn system_part(
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

    /// Loads into sequence `seq` the prompt cache's entry that shares the most with `tokens`,
    /// when it shares more than the `common` tokens the sequence could start from. Anything
    /// amiss (no entry, a damaged one, llama.cpp refusing it) leaves the sequence empty and a
    /// debug log.
    fn restore(&mut self, seq: usize, tokens: &[LlamaToken], common: usize, stats: &mut Stats) {
        let (Some(cache), Some(identity), Ok(seq_id)) = (
            self.config.prompt_cache.as_ref(),
            self.identity,
            i32::try_from(seq),
        ) else {
            return;
        };
        let started = Instant::now();
        let prompt: Vec<i32> = tokens.iter().map(|t| t.0).collect();
        let at_least = (common + 1).max(MIN_CACHED_PREFIX);
        let Some(candidate) = cache.best(&identity, &prompt, at_least) else {
            return;
        };
        self.forget(seq);
        let ctx = &mut *self.ctx;
        let restored = cache.restore(&candidate, |path| {
            ctx.state_seq_load_file(path, seq_id, candidate.tokens.len())
                .map(|(tokens, _)| tokens.into_iter().map(|t| t.0).collect())
                .map_err(|err| err.to_string())
        });
        match restored {
            Ok(()) => {
                if let Some(cached) = self.cached.get_mut(seq) {
                    *cached = candidate.tokens.iter().map(|&t| LlamaToken(t)).collect();
                }
                stats.restored_tokens = candidate.common.min(tokens.len() - 1);
            }
            Err(err) => {
                tracing::debug!(dir = %cache.dir().display(), error = %err, "prompt cache: entry not used");
                self.forget(seq);
            }
        }
        stats.restore_time = started.elapsed();
    }

    /// Saves the state of the tokens sequence `seq` holds (a system part) to the prompt cache
    /// (its time is part of the prompt's).
    pub(super) fn save(&mut self, seq: usize) {
        let (Some(cache), Some(identity), Some(cached), Ok(seq_id)) = (
            self.config.prompt_cache.as_ref(),
            self.identity,
            self.cached.get(seq),
            i32::try_from(seq),
        ) else {
            return;
        };
        let tokens: Vec<i32> = cached.iter().map(|t| t.0).collect();
        let ctx = &*self.ctx;
        cache.store(&identity, &tokens, |path| {
            ctx.state_seq_save_file(path, seq_id, cached)
                .map(|_| ())
                .map_err(|err| err.to_string())
        });
    }

    /// The KV sequence likelihoods are scored in: the one after the completions'.
    fn scoring_seq(&self) -> u32 {
        u32::try_from(self.cached.len()).unwrap_or(u32::MAX)
    }

    /// Tokens per llama.cpp batch (the prompt is evaluated in batches of this size).
    pub(super) fn batch_size(&self) -> usize {
        usize::try_from(self.config.batch.max(1)).unwrap_or(512)
    }
}

/// The log-probability of `token` under these logits (a log-softmax read at one index); a
/// token out of the vocabulary's range is impossible (negative infinity).
fn log_softmax_at(logits: &[f32], token: LlamaToken) -> f64 {
    let Some(&chosen) = usize::try_from(token.0).ok().and_then(|i| logits.get(i)) else {
        return f64::NEG_INFINITY;
    };
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    f64::from(chosen - max) - sum.ln()
}
