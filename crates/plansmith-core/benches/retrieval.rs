//! Retrieval benchmarks: BM25 index build and query latency at 1k, 10k and 100k tools.
//!
//! The catalogs are the BFCL dev catalog (`shared/eval/data/catalog.json`, 1,853 tools) cycled
//! with suffixed names (`name__17`), so the vocabulary and posting lengths stay realistic; when
//! the file is absent, generated tools stand in so the bench always runs.
//!
//! `cargo bench -p plansmith-core --bench retrieval -- --warm-up-time 1 --measurement-time 3`
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use plansmith_core::catalog::{Catalog, Tool};
use plansmith_core::retrieve::{Bm25Index, Bm25Params, Retriever};
use serde_json::json;

const CATALOG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/eval/data/catalog.json"
);

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

const QUERIES: [&str; 8] = [
    "Find the area of a triangle with a base of 10 units and height of 5 units.",
    "What's the weather forecast for Paris this weekend?",
    "Convert 100 US dollars to euros at today's exchange rate.",
    "Get the last match result of Manchester United in the Premier League.",
    "sendEmail to the project team with the quarterly report attached",
    "Calculate compound interest on 5000 at 4% for 10 years, compounded monthly.",
    "List the open issues of the repository and close the stale ones",
    "天气预报 北京",
];

fn base_tools() -> Vec<Tool> {
    let loaded = std::fs::read_to_string(CATALOG)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .and_then(|document| Catalog::from_json_lenient(&document).ok())
        .map(|(catalog, _)| catalog.tools().map(|t| t.tool.clone()).collect::<Vec<_>>())
        .filter(|tools| !tools.is_empty());
    loaded.unwrap_or_else(generated_tools)
}

/// Stand-in tools built from a small vocabulary, for machines without the eval data.
fn generated_tools() -> Vec<Tool> {
    let verbs = [
        "get",
        "list",
        "create",
        "update",
        "delete",
        "search",
        "calculate",
        "convert",
    ];
    let nouns = [
        "weather",
        "email",
        "invoice",
        "customer",
        "flight",
        "hotel",
        "stock_price",
        "triangle_area",
        "exchange_rate",
        "repository",
        "issue",
        "calendar_event",
        "playlist",
        "recipe",
        "order",
    ];
    let mut tools = Vec::new();
    for verb in verbs {
        for noun in nouns {
            tools.push(Tool {
                name: format!("{verb}_{noun}"),
                description: format!(
                    "{verb} the {} records for a user, with optional filters and paging.",
                    noun.replace('_', " ")
                ),
                input_schema: json!({"type": "object", "properties": {
                    "id": {"type": "string", "description": format!("Identifier of the {noun}")},
                    "limit": {"type": "integer", "description": "Maximum number of results"}
                }}),
                output_schema: None,
                annotations: None,
            });
        }
    }
    tools
}

fn catalog_of(base: &[Tool], n_tools: usize) -> Vec<Tool> {
    (0..n_tools)
        .map(|idx| {
            let mut tool = base[idx % base.len()].clone();
            let copy = idx / base.len();
            if copy > 0 {
                tool.name = format!("{}__{copy}", tool.name);
            }
            tool
        })
        .collect()
}

fn bench_build(c: &mut Criterion) {
    let base = base_tools();
    let mut group = c.benchmark_group("retrieval/build");
    group.sample_size(10);
    for n_tools in SIZES {
        let tools = catalog_of(&base, n_tools);
        group.bench_with_input(BenchmarkId::from_parameter(n_tools), &tools, |b, tools| {
            b.iter(|| Bm25Index::from_tools(black_box(tools), Bm25Params::default()))
        });
    }
    group.finish();
}

fn bench_query(c: &mut Criterion) {
    let base = base_tools();
    let mut group = c.benchmark_group("retrieval/query_top10");
    for n_tools in SIZES {
        let index = Bm25Index::from_tools(&catalog_of(&base, n_tools), Bm25Params::default());
        group.bench_with_input(BenchmarkId::from_parameter(n_tools), &index, |b, index| {
            let mut next = 0;
            b.iter(|| {
                next = (next + 1) % QUERIES.len();
                index.rank(black_box(QUERIES[next]), 10)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_build, bench_query);
criterion_main!(benches);
