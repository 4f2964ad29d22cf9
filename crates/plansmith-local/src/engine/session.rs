//! One request on the worker: the prompt restored from the KV or disk cache or evaluated, then
//! the reply decoded token by token, under the grammar when there is one.

use std::time::Instant;

use futures::channel::mpsc as stream_mpsc;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;
use llguidance::ParserFactory;
use plansmith_core::llm::{Completion, FinishReason, Role, Strategy};
use plansmith_core::{CompletionRequest, Likelihood, LlmError, OutputConstraint, Usage};

use super::config::{LocalConfig, MIN_CACHED_PREFIX};
use super::error::backend_error;
use super::grammar::{
    best_token, calls_grammar, constrained_choice, grammar_matcher, json_grammar, token_id,
};
use super::reply::Reply;
use super::stats::Stats;

pub(super) struct Session<'m, 'c> {
    pub(super) model: &'m LlamaModel,
    pub(super) ctx: &'c mut LlamaContext<'m>,
    pub(super) template: LlamaChatTemplate,
    /// Tokens whose keys and values are in the KV cache, in order.
    pub(super) cached: Vec<LlamaToken>,
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
        return Err(LlmError::Backend(
            "local model: the caller stopped waiting; decoding stopped".into(),
        ));
    }
    Ok(())
}

impl Session<'_, '_> {
    /// Decodes the reply to `request`, sending its text to `text` (a streamed request) as it
    /// grows.
    pub(super) fn complete(
        &mut self,
        request: &CompletionRequest,
        stats: &mut Stats,
        abandoned: &dyn Fn() -> bool,
        text: Option<&stream_mpsc::UnboundedSender<String>>,
    ) -> Result<Completion, LlmError> {
        stop_if_abandoned(abandoned, stats)?;
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
                earlier,
            }) => Some(calls_grammar(schema, *max_calls, *max_text, *earlier)),
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
        // Scored in sequence 1 of the shared KV buffer, from an empty sequence, and cleared
        // after: the completions' cached prompt in sequence 0 stays for the next request.
        let _ = self.ctx.clear_kv_cache_seq(Some(SCORING_SEQ), None, None);
        let scored = self.score(&tokens, head, abandoned, &mut stats);
        let _ = self.ctx.clear_kv_cache_seq(Some(SCORING_SEQ), None, None);
        let log_prob = scored?;
        Ok(Likelihood {
            log_prob,
            tokens: u32::try_from(tokens.len() - head).unwrap_or(u32::MAX),
        })
    }

    /// The sum of the log-probabilities of `tokens[head..]`, each after the tokens before it,
    /// evaluated in batches in [`SCORING_SEQ`]: every token from the context's last one on gets
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
                    .add(token, pos, &[SCORING_SEQ_ID], logits)
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

    /// Loads the prompt cache's entry that shares the most with `tokens`, when it shares more
    /// than the `common` tokens already in the KV cache. Anything amiss (no entry, a damaged
    /// one, llama.cpp refusing it) leaves an empty KV cache and a debug log.
    pub(super) fn restore(&mut self, tokens: &[LlamaToken], common: usize, stats: &mut Stats) {
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
    pub(super) fn save(&mut self) {
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
    pub(super) fn batch_size(&self) -> usize {
        usize::try_from(self.config.batch.max(1)).unwrap_or(512)
    }

    /// Runs `tokens` through the model after the cached ones, in batches; only the last token
    /// gets logits. Returns that token's index in the last batch. Stops between batches when
    /// the caller has stopped waiting (a long prompt takes several seconds a batch).
    pub(super) fn evaluate(
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

/// The KV sequence likelihoods are scored in (completions use sequence 0).
const SCORING_SEQ: u32 = 1;
/// The same, as a batch takes it.
const SCORING_SEQ_ID: i32 = 1;

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
