//! What a decode of k tokens costs on this machine, with logits for the last token only (how
//! tokens forced by the grammar go through the model) or for every token (what verifying
//! guesses would need), against a one-token decode. The figures behind the engine's choice to
//! batch forced tokens (see `src/engine.rs`).
//!
//! `cargo run --release -p plansmith-local --example batch_cost -- MODEL.gguf THREADS`
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::num::NonZeroU32;
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;

/// Tokens already in the KV cache when the decodes are timed (about a planning prompt).
const CONTEXT: usize = 500;
/// Tokens decoded per measurement.
const TOKENS: usize = 40;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: batch_cost MODEL.gguf [THREADS]");
    let threads: i32 = args.next().and_then(|t| t.parse().ok()).unwrap_or(1);
    let backend = plansmith_local::backend().unwrap();
    let model = LlamaModel::load_from_file(backend, &path, &LlamaModelParams::default()).unwrap();
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(4096))
        .with_n_batch(512)
        .with_n_threads(threads)
        .with_n_threads_batch(threads);
    let mut ctx = model.new_context(backend, params).unwrap();
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(100);
    let tokens = model.vocab().tokenize(text.as_bytes(), true, true);
    let mut batch = LlamaBatch::new(512, 1);
    for (i, &t) in tokens.iter().take(CONTEXT).enumerate() {
        batch.add(t, i as i32, &[0], i + 1 == CONTEXT).unwrap();
    }
    ctx.decode(&mut batch).unwrap();
    let mut single = f64::NAN;
    for k in [1usize, 2, 3, 4, 8] {
        for all_logits in [false, true] {
            if k == 1 && all_logits {
                continue;
            }
            let decodes = TOKENS / k;
            ctx.clear_kv_cache_seq(Some(0), Some(CONTEXT as u32), None)
                .unwrap();
            let mut pos = CONTEXT;
            let started = Instant::now();
            for _ in 0..decodes {
                batch.clear();
                for j in 0..k {
                    let logits = all_logits || j + 1 == k;
                    let token = tokens[pos % tokens.len()];
                    batch.add(token, pos as i32, &[0], logits).unwrap();
                    pos += 1;
                }
                ctx.decode(&mut batch).unwrap();
            }
            let per_decode = started.elapsed().as_secs_f64() * 1000.0 / decodes as f64;
            if k == 1 {
                single = per_decode;
            }
            let extra = if k > 1 {
                format!(
                    ", each token after the first {:.0} % of a one-token decode",
                    100.0 * (per_decode - single) / ((k - 1) as f64 * single)
                )
            } else {
                String::new()
            };
            println!(
                "{k} token(s), logits for {}: {per_decode:.1} ms per decode{extra}",
                if all_logits { "all" } else { "the last" }
            );
        }
    }
}
