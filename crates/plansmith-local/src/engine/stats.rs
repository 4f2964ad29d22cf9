//! What a request cost: tokens and time per stage.

use std::time::Duration;

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

pub(super) fn millis(time: Duration) -> u64 {
    u64::try_from(time.as_millis()).unwrap_or(u64::MAX)
}

fn per_second(n: usize, time: Duration) -> f64 {
    let secs = time.as_secs_f64();
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}
