//! Several requests decoded together. Each request has its own sequence of the KV cache, its
//! own grammar and its own reply; one llama.cpp batch per round carries every sequence's next
//! tokens: the token each writing sequence chose (with what its grammar forces after it), then
//! as much of a waiting prompt as the batch has room for, the oldest prompt first. On a CPU the
//! weights are read once per batch, not once per sequence, so the writing side gains from
//! company; a prompt gains nothing (it is already a batch), and goes through whole before the
//! next one starts, so the first of several requests is not slowed to the pace of all.
//!
//! With one sequence, a round is exactly what one request did before several could share the
//! model: the same batches in the same order, hence the same replies.

use std::collections::VecDeque;
use std::time::Instant;

use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::vocab::LlamaVocab;
use llguidance::Matcher;
use plansmith_core::llm::{Completion, FinishReason, Strategy};
use plansmith_core::{LlmError, Usage};

use super::Job;
use super::error::backend_error;
use super::grammar::{best_token, constrained_choice, token_id};
use super::reply::Reply;
use super::session::{Session, abandoned_error};
use super::stats::Stats;

/// A request being decoded in its sequence.
pub(super) struct Active {
    pub(super) job: Job,
    /// Its sequence in the KV cache.
    pub(super) seq: usize,
    pub(super) stats: Stats,
    /// Tokens in its prompt.
    pub(super) prompt_len: usize,
    pub(super) matcher: Option<Matcher>,
    pub(super) reply: Reply,
    pub(super) max_tokens: usize,
    /// The schema had no grammar, so the reply is decoded without one.
    pub(super) unconstrained_instead: bool,
    /// Prompt tokens not yet evaluated, in parts each evaluated in batches of its own: the
    /// system part to save to the prompt cache (when it is not cached yet), then the rest with
    /// the tokens the grammar forces at the reply's start.
    pub(super) segments: VecDeque<Vec<LlamaToken>>,
    /// The sequence's length at which to save it to the prompt cache (the system part's end).
    pub(super) save_at: Option<usize>,
    /// When the request got its sequence.
    pub(super) started: Instant,
    /// When its prompt was through and the reply began.
    pub(super) generating: Option<Instant>,
}

/// A request's tokens in this round's batch.
struct Member {
    /// Its slot.
    slot: usize,
    tokens: Vec<LlamaToken>,
    /// The index in the batch of the token whose logits it chooses from.
    logits: Option<i32>,
}

/// A request that ended this round, and its answer.
pub(super) type Ended = (Active, Result<Completion, LlmError>);

impl Session<'_, '_> {
    /// One round: the requests whose callers stopped waiting end, then one batch goes through
    /// the model, then each request with logits chooses its next token. Returns the requests
    /// that ended; their slots are empty.
    pub(super) fn round(&mut self, slots: &mut [Option<Active>]) -> Vec<Ended> {
        let mut ended = Vec::new();
        for slot in slots.iter_mut() {
            if let Some(mut active) = slot.take_if(|active| active.job.reply.is_canceled()) {
                active.stats.abandoned = true;
                ended.push((active, Err(abandoned_error())));
            }
        }
        let batch_size = self.batch_size();
        let mut batch = LlamaBatch::new(batch_size, 1);
        let mut members = Vec::new();
        let mut failed = Vec::new();
        let mut room = batch_size;
        // Writing sequences first: a token or a few each.
        for (slot, active) in slots.iter_mut().enumerate() {
            let Some(active) = active.as_mut() else {
                continue;
            };
            let pending = active.reply.pending.len();
            if active.generating.is_none() || pending == 0 || room == 0 {
                continue;
            }
            // A forced run longer than the room left goes in pieces; the logits come with its
            // last piece.
            let taken = pending.min(room);
            let tokens: Vec<LlamaToken> = active.reply.pending.drain(..taken).collect();
            let whole = active.reply.pending.is_empty();
            match self.add(&mut batch, active.seq, &tokens, whole) {
                Ok(logits) => members.push(Member {
                    slot,
                    tokens,
                    logits,
                }),
                Err(err) => failed.push((slot, err)),
            }
            room -= taken;
        }
        // Then prompts, the oldest first, in what room is left.
        let mut waiting: Vec<(Instant, usize)> = slots
            .iter()
            .enumerate()
            .filter_map(|(slot, active)| {
                let active = active.as_ref()?;
                active
                    .generating
                    .is_none()
                    .then_some((active.started, slot))
            })
            .collect();
        waiting.sort();
        for (_, slot) in waiting {
            let Some(active) = slots.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            if room == 0 {
                break;
            }
            let Some(part) = active.segments.front_mut() else {
                continue;
            };
            let tokens: Vec<LlamaToken> = part.drain(..part.len().min(room)).collect();
            if part.is_empty() {
                active.segments.pop_front();
            }
            let last = active.segments.is_empty();
            room -= tokens.len();
            match self.add(&mut batch, active.seq, &tokens, last) {
                Ok(logits) => members.push(Member {
                    slot,
                    tokens,
                    logits,
                }),
                Err(err) => failed.push((slot, err)),
            }
        }
        // A request whose tokens did not fit the batch ends; what of them did fit is not
        // counted as held, so its sequence starts afresh.
        for (slot, err) in failed {
            if let Some(active) = slots.get_mut(slot).and_then(Option::take) {
                self.forget(active.seq);
                ended.push((active, Err(err)));
            }
        }
        if members.is_empty() {
            return ended;
        }
        if let Err(err) = self.ctx.decode(&mut batch) {
            // What the failed batch left in these sequences is unknown: they start afresh.
            for member in members {
                if let Some(active) = slots.get_mut(member.slot).and_then(Option::take) {
                    self.forget(active.seq);
                    let what = if active.generating.is_some() {
                        "generation"
                    } else {
                        "prompt evaluation"
                    };
                    ended.push((active, Err(backend_error(what, &err))));
                }
            }
            return ended;
        }
        for member in members {
            let Some(active) = slots.get_mut(member.slot).and_then(Option::as_mut) else {
                continue;
            };
            let Some(cached) = self.cached.get_mut(active.seq) else {
                continue;
            };
            cached.extend_from_slice(&member.tokens);
            let length = cached.len();
            if active.save_at == Some(length) {
                active.save_at = None;
                self.save(active.seq);
            }
            let Some(index) = member.logits else {
                continue;
            };
            let prompt_end = active.generating.is_none();
            if prompt_end {
                active.stats.prompt_time = active.started.elapsed();
                active.generating = Some(Instant::now());
            }
            let answer = match self.advance(active, index, prompt_end) {
                Ok(None) => continue,
                Ok(Some(finish)) => Ok(finished(active, finish)),
                Err(err) => Err(err),
            };
            if let Some(active) = slots.get_mut(member.slot).and_then(Option::take) {
                ended.push((active, answer));
            }
        }
        ended
    }

    /// Adds `tokens` of sequence `seq` to the batch, after what the sequence holds; with
    /// `logits`, the last token gets them. Returns that token's index in the batch.
    fn add(
        &self,
        batch: &mut LlamaBatch<'_>,
        seq: usize,
        tokens: &[LlamaToken],
        logits: bool,
    ) -> Result<Option<i32>, LlmError> {
        let held = self.cached.get(seq).map_or(0, Vec::len);
        let seq_id = i32::try_from(seq).map_err(|err| backend_error("batch", err))?;
        for (offset, &token) in tokens.iter().enumerate() {
            let pos = i32::try_from(held + offset).map_err(|err| backend_error("batch", err))?;
            let last = logits && offset + 1 == tokens.len();
            batch
                .add(token, pos, &[seq_id], last)
                .map_err(|err| backend_error("batch", err))?;
        }
        Ok(logits.then(|| batch.n_tokens() - 1))
    }

    /// Chooses the request's next token from the logits at `index` (after the prompt's end,
    /// first what the grammar forces, as the reply's first round did), then what the grammar
    /// forces after it. Returns how the reply ends, when it does.
    fn advance(
        &self,
        active: &mut Active,
        index: i32,
        prompt_end: bool,
    ) -> Result<Option<FinishReason>, LlmError> {
        let vocab = self.model.vocab();
        if prompt_end {
            if let Some(finish) = next_round(active, &vocab)? {
                return Ok(Some(finish));
            }
            if !active.reply.pending.is_empty() {
                return Ok(None);
            }
        }
        let logits = self.ctx.get_logits_ith(index);
        let first =
            best_token(logits, |_| true).ok_or_else(|| backend_error("sampling", "no logits"))?;
        let grammar_started = Instant::now();
        let token = match active.matcher.as_mut() {
            None => first,
            Some(matcher) => constrained_choice(
                matcher,
                first,
                logits,
                |t| vocab.is_eog(t),
                &mut active.stats,
            )?,
        };
        if vocab.is_eog(token) {
            return Ok(Some(FinishReason::Stop));
        }
        if let Some(matcher) = active.matcher.as_mut() {
            matcher
                .consume_token(token_id(token)?)
                .map_err(|err| backend_error("grammar", err))?;
            active.stats.grammar_time += grammar_started.elapsed();
        }
        active.reply.push(token, &vocab);
        next_round(active, &vocab)
    }
}

/// What the grammar forces after the last token, and whether the reply ends there: the token
/// cap is reached, or the grammar is complete.
fn next_round(
    active: &mut Active,
    vocab: &LlamaVocab<'_>,
) -> Result<Option<FinishReason>, LlmError> {
    active.stats.generated_tokens = active.reply.generated;
    if active.reply.generated >= active.max_tokens {
        return Ok(Some(FinishReason::Length));
    }
    if let Some(matcher) = active.matcher.as_mut() {
        active
            .reply
            .force(matcher, active.max_tokens, vocab, &mut active.stats)?;
    }
    // What was chosen and what the grammar forced after it, as it stands.
    active.reply.send_unsent(active.job.text.as_ref());
    if let Some(matcher) = active.matcher.as_ref() {
        if matcher.is_stopped() {
            return Ok(Some(FinishReason::Stop));
        }
        if active.reply.generated >= active.max_tokens {
            return Ok(Some(FinishReason::Length));
        }
    }
    Ok(None)
}

/// The completion of a request whose reply ended with `finish`.
fn finished(active: &mut Active, finish: FinishReason) -> Completion {
    active.reply.send_unsent(active.job.text.as_ref());
    let stats = &mut active.stats;
    stats.generate_time = active.generating.map(|at| at.elapsed()).unwrap_or_default();
    stats.generated_tokens = active.reply.generated;
    let reply = std::mem::take(&mut active.reply);
    Completion {
        text: String::from_utf8_lossy(&reply.bytes).into_owned(),
        tool_calls: Vec::new(),
        usage: Usage {
            prompt_tokens: u32::try_from(active.prompt_len).unwrap_or(u32::MAX),
            completion_tokens: u32::try_from(reply.generated).unwrap_or(u32::MAX),
        },
        finish,
        strategy: active.unconstrained_instead.then_some(Strategy::PromptOnly),
        queue_us: 0,
        stages: None,
    }
}
