//! Planning overhead per request with the 1,853-tool BFCL catalog and an instant model:
//! everything but the model — select (BM25), render (templates + schema), parse, validate.
//!
//! A second group, `service_request`, is the request of the service's load test
//! (`scripts/load-test.sh`): the 11 example tools and the recorded three-step weather-and-email
//! reply, in its code fence.
//!
//! `cargo bench -p plansmith-core --bench planning`
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use chrono::Utc;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use plansmith_core::llm::{BoxFuture, Completion};
use plansmith_core::parse::{ParseDefaults, parse};
use plansmith_core::validate::validate;
use plansmith_core::{
    Capabilities, Catalog, CompletionRequest, LanguageModel, LlmError, PlanOptions, PlanRequest,
    Planner,
};
use serde_json::json;

const CATALOG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/eval/data/catalog.json"
);

/// Replies instantly with the same plan.
struct Instant(String);

impl LanguageModel for Instant {
    fn name(&self) -> String {
        "instant".into()
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            json_schema: true,
            ..Capabilities::default()
        }
    }
    fn complete(&self, _request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        let text = self.0.clone();
        Box::pin(async move {
            Ok(Completion {
                text,
                ..Completion::default()
            })
        })
    }
}

fn catalog() -> Catalog {
    let text = std::fs::read_to_string(CATALOG).unwrap_or_else(|_| {
        // Without the shared eval data, a synthetic catalog of the same size.
        let tools: Vec<_> = (0..1853)
            .map(|i| json!({"name": format!("tool_{i}"), "description": format!("Tool number {i} computes things"),
                "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}))
            .collect();
        serde_json::to_string(&tools).unwrap()
    });
    let (catalog, _) = Catalog::from_json_lenient(&serde_json::from_str(&text).unwrap()).unwrap();
    catalog
}

fn bench(c: &mut Criterion) {
    let catalog = catalog();
    let reply = if catalog.tool("calculate_triangle_area").is_some() {
        json!({"title": "Area", "thought": "Use the area tool.", "steps": [
            {"id": "s1", "type": "tool", "name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}},
            {"id": "s2", "type": "reply", "text": "Computing the area of the triangle.", "depends_on": ["s1"]}
        ]})
    } else {
        json!({"title": "T", "steps": [{"id": "s1", "type": "tool", "name": "tool_1", "arguments": {"x": 1}}]})
    }
    .to_string();
    let raw = format!("Here is the plan:\n```json\n{reply}\n```");
    let planner = Planner::new(catalog.clone(), Arc::new(Instant(raw.clone())));
    let mut request = PlanRequest::new(
        "Find the area of a triangle with a base of 10 units and height of 5 units.",
    );
    request.now = Some(Utc::now());
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    for _ in 0..200 {
        futures::executor::block_on(planner.plan(&request)).unwrap();
    }
    eprintln!(
        "TIMINGS {:?}",
        futures::executor::block_on(planner.plan(&request))
            .unwrap()
            .diagnostics
            .timings
    );
    assert_eq!(
        outcome.plan.steps.len(),
        2.min(outcome.plan.steps.len()).max(1)
    );

    let mut group = c.benchmark_group("planning_1853_tools");
    bench_stages(&mut group, &planner, &request, &raw, &catalog);
    let options = PlanOptions::default();
    let tools: Vec<_> = catalog.tools().take(8).collect();
    group.bench_function("schema_8_tools", |b| {
        b.iter(|| plansmith_core::schema::plan_schema(black_box(&tools), &[], &options))
    });
    group.finish();
}

/// The load test's request: `examples/tools.json`, the weather-and-email reply it replays.
fn bench_service_request(c: &mut Criterion) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let tools = std::fs::read_to_string(format!("{root}/examples/tools.json")).unwrap();
    let catalog = Catalog::from_json(&serde_json::from_str(&tools).unwrap()).unwrap();
    let script =
        std::fs::read_to_string(format!("{root}/examples/replies/weather-email-repeat.json"))
            .unwrap();
    let script: serde_json::Value = serde_json::from_str(&script).unwrap();
    let raw = script["turns"][0].as_str().unwrap().to_owned();
    let planner = Planner::new(catalog.clone(), Arc::new(Instant(raw.clone())));
    let request = PlanRequest::new("Email Bob the weather in Paris");
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    assert_eq!(outcome.plan.steps.len(), 3);
    assert!(outcome.diagnostics.attempts.len() == 1, "{outcome:?}");
    let mut group = c.benchmark_group("service_request");
    bench_stages(&mut group, &planner, &request, &raw, &catalog);
    group.finish();
}

/// A whole request through `planner`, then parsing `raw` and validating its plan alone.
fn bench_stages(
    group: &mut BenchmarkGroup<'_, WallTime>,
    planner: &Planner,
    request: &PlanRequest,
    raw: &str,
    catalog: &Catalog,
) {
    group.bench_function("plan_request_end_to_end", |b| {
        b.iter(|| futures::executor::block_on(planner.plan(black_box(request))).unwrap())
    });
    let defaults = ParseDefaults {
        plan_id: "p",
        goal: "g",
        locale: "en-US",
        now: Utc::now(),
    };
    group.bench_function("parse", |b| {
        b.iter(|| parse(black_box(raw), &defaults).unwrap())
    });
    let parsed = parse(raw, &defaults).unwrap();
    let options = PlanOptions::default();
    group.bench_function("validate", |b| {
        b.iter(|| validate(black_box(parsed.plan.clone()), catalog, &options))
    });
}

criterion_group!(benches, bench, bench_service_request);
criterion_main!(benches);
