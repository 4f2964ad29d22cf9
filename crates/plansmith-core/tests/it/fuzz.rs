//! Parse + validate never panic, on arbitrary text and on mutations of valid model output.
//!
//! The default run uses proptest's case count (256 per property). The long run, documented in
//! the README, is `PROPTEST_CASES=200000 cargo test --release -p plansmith-core --test it fuzz`.

use chrono::Utc;
use plansmith_core::PlanOptions;
use plansmith_core::parse::{ParseDefaults, parse};
use plansmith_core::validate::validate;
use proptest::prelude::*;

use crate::pipeline::test_catalog;

const SEEDS: [&str; 5] = [
    r#"{"title": "W", "steps": [{"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}}, {"id": "s2", "type": "tool", "name": "send_email", "arguments": {"to": "a@b.co", "subject": "s", "body": {"$ref": "s1.output.hourly[0].temperature"}}, "depends_on": ["s1"]}, {"id": "s3", "type": "reply", "text": "ok"}]}"#,
    "```json\n{\"locale\": \"zh-CN\", \"has_enough_context\": false, \"thought\": \"想\", \"title\": \"研究\", \"steps\": [{\"need_web_search\": true, \"title\": \"查\", \"description\": \"查资料 🚀\", \"step_type\": \"research\"}]}\n```",
    r#"<think>plan it</think>{"adequate": true, "reason": "r", "tasks": [{"title": "t", "query": "q", "agent_name": "NewsAgent", "pattern": "recurring", "schedule_config": {"interval_minutes": 5, "daily_time": "25:99"}}]}"#,
    r#"[{"name": "math.factorial", "args": {"number": -1}}, {"name": "book_flight", "arguments": "{\"from\": \"PAR\"}"}]"#,
    r#"{"thought_process": "x", "execution_plan": [{"step": 1, "tool_to_use": "sql_execute", "tool_parameters": {"sql_query": "SELECT 1"}}]}"#,
];

fn check(raw: &str) {
    let defaults = ParseDefaults {
        plan_id: "p",
        goal: "g",
        locale: "en-US",
        now: Utc::now(),
    };
    if let Ok(parsed) = parse(raw, &defaults) {
        let catalog = test_catalog(true);
        let mut options = PlanOptions::default();
        options.max_steps = 3;
        let _ = validate(parsed.plan, &catalog, &options);
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Insert(usize, String),
    Delete(usize, usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (
            any::<usize>(),
            prop::sample::select(vec![
                "{", "}", "[", "]", "\"", ",", ":", "\\", "\\u", "$ref", "null", "s9", "```",
                "<think>", "😀", "/*", "'"
            ])
        )
            .prop_map(|(at, s)| Mutation::Insert(at, s.to_owned())),
        (any::<usize>(), 0usize..40).prop_map(|(at, len)| Mutation::Delete(at, len)),
        (any::<usize>(), 0usize..60).prop_map(|(at, len)| Mutation::Duplicate(at, len)),
    ]
}

fn boundary(text: &str, at: usize) -> usize {
    let at = at % (text.len() + 1);
    (0..=at)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

fn apply(mut text: String, mutations: &[Mutation]) -> String {
    for mutation in mutations {
        match mutation {
            Mutation::Truncate(at) => text.truncate(boundary(&text, *at)),
            Mutation::Insert(at, s) => text.insert_str(boundary(&text, *at), s),
            Mutation::Delete(at, len) => {
                let start = boundary(&text, *at);
                let end = boundary(&text, start + len).max(start);
                text.replace_range(start..end, "");
            }
            Mutation::Duplicate(at, len) => {
                let start = boundary(&text, *at);
                let end = boundary(&text, start + len).max(start);
                let piece = text[start..end].to_owned();
                text.insert_str(end, &piece);
            }
        }
    }
    text
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(raw in ".{0,400}") {
        check(&raw);
    }

    #[test]
    fn mutated_model_output_never_panics(seed in 0usize..SEEDS.len(), mutations in prop::collection::vec(mutation(), 1..6)) {
        let raw = apply(SEEDS[seed].to_owned(), &mutations);
        check(&raw);
    }

    #[test]
    fn arbitrary_json_never_panics(value in arb_json()) {
        check(&value.to_string());
        check(&serde_json::json!({"steps": [value.clone()]}).to_string());
        check(&serde_json::json!({"steps": [{"type": "tool", "name": "get_weather", "arguments": value}]}).to_string());
    }
}

pub fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        prop::sample::select(vec![
            "s1",
            "s1.output",
            "tool",
            "reply",
            "get_weather",
            "$ref",
            "research",
            "09:00",
            ""
        ])
        .prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "id",
                        "type",
                        "name",
                        "arguments",
                        "steps",
                        "depends_on",
                        "schedule",
                        "$ref",
                        "text",
                        "agent_name",
                        "step_type",
                        "tasks",
                        "plan",
                        "x"
                    ]),
                    inner
                ),
                0..6
            )
            .prop_map(|pairs| serde_json::Value::Object(
                pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
            )),
        ]
    })
}
