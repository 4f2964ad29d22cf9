//! What a grammar-constrained model (the embedded default) is sent in the tool-call format,
//! pinned for a fixed set of requests: the rendered system and user prompts, the follow-up
//! that asks for a part of the request no call addressed, and the call schema its grammar is
//! built from. A change to a template, the tool listing or the schema shows here as a snapshot
//! diff, to be judged against the evaluation figures (docs/perf.md) before it is accepted.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use plansmith_core::llm::{Capabilities, OutputConstraint, Script, ScriptedTurn};
use plansmith_core::{PlanFormat, PlanRequest, Planner, ScriptedModel};

use crate::pipeline::test_catalog;

/// Plans `query` with a grammar model that answers `turns` (written as the 0.5B writes them)
/// and renders every request it received (the call schema in full when `full_schema`); with
/// `prefill` the model continues an answer, as the embedded one does.
fn sent(query: &str, turns: &[&str], full_schema: bool, prefill: bool) -> String {
    let model = Arc::new(ScriptedModel::from_script(Script {
        capabilities: Capabilities {
            grammar: true,
            prefill,
            ..Capabilities::default()
        },
        turns: turns
            .iter()
            .map(|t| ScriptedTurn::Text((*t).to_owned()))
            .collect(),
        ..Script::default()
    }));
    let planner = Planner::new(test_catalog(false), model.clone());
    let mut request = PlanRequest::new(query);
    request.now = Some(Utc.with_ymd_and_hms(2026, 3, 2, 9, 30, 0).unwrap());
    request.options.format = PlanFormat::Calls;
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    let mut out = String::new();
    for (i, sent) in model.requests().iter().enumerate() {
        out.push_str(&format!(
            "=== request {} (max_tokens {})\n",
            i + 1,
            sent.max_tokens
        ));
        for message in &sent.messages {
            out.push_str(&format!("--- {:?}\n{}\n", message.role, message.content));
        }
        match &sent.constraint {
            Some(OutputConstraint::ToolCalls {
                schema,
                max_calls,
                max_text,
                ..
            }) => {
                out.push_str(&format!(
                    "--- constraint: at most {max_calls} calls or {max_text} characters of text; one call of "
                ));
                // The whole schema once (it is the catalog's, the same for every request);
                // elsewhere the functions it offers.
                if full_schema {
                    let pretty = serde_json::to_string_pretty(schema.as_ref()).unwrap();
                    out.push_str(&format!("this schema:\n{pretty}\n"));
                } else {
                    let names: Vec<&str> = schema["anyOf"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|call| call["properties"]["name"]["const"].as_str().unwrap())
                        .collect();
                    out.push_str(&format!("{}\n", names.join(", ")));
                }
            }
            Some(OutputConstraint::JsonSchema { name, .. }) => {
                out.push_str(&format!("--- constraint: JSON Schema {name} (one call)\n"));
            }
            other => out.push_str(&format!("--- constraint: {other:?}\n")),
        }
    }
    out.push_str(&format!(
        "=== outcome: {} with {} step(s)\n",
        outcome.status.name(),
        outcome.plan.steps.len()
    ));
    out
}

#[test]
fn the_tool_call_prompts_are_pinned() {
    let cases: [(&str, &str, &[&str]); 4] = [
        (
            "one_call",
            "Convert 250 US dollars to euros",
            &[
                "```json\n{\"name\": \"convert_currency\", \"arguments\": {\"amount\": 250, \"from_currency\": \"USD\", \"to_currency\": \"EUR\"}}\n```",
            ],
        ),
        (
            "two_independent_calls",
            "What is the factorial of 5 and of 10?",
            &[
                "<tool_call>\n{\"name\": \"math.factorial\", \"arguments\": {\"number\": 5}}\n</tool_call>\n<tool_call>\n{\"name\": \"math.factorial\", \"arguments\": {\"number\": 10}}\n</tool_call>",
            ],
        ),
        (
            // The first answer covers half the request: the follow-up asks for the rest, in
            // the same conversation.
            "chained_with_a_follow_up",
            "What's the weather in Paris? Email it to bob@example.com",
            &[
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                "<tool_call>\n{\"name\": \"send_email\", \"arguments\": {\"to\": \"bob@example.com\", \"subject\": \"Weather in Paris\", \"body\": {\"$ref\": \"s1.output.summary\"}}}\n</tool_call>",
            ],
        ),
        (
            "no_tool_fits",
            "Tell me a joke about cats",
            &["I can't tell jokes with these tools, but here is one: cats are purr-fect."],
        ),
    ];
    for (name, query, turns) in cases {
        insta::assert_snapshot!(name, sent(query, turns, name == "one_call", false));
    }
}

/// A model that continues an answer is first made to write its answer on, with the grammar of
/// one call; a part that the call written on does not do (here a repeat of the first call) is
/// then asked for by a question.
#[test]
fn a_model_that_continues_an_answer_writes_it_on_first() {
    let cases: [(&str, &str, &[&str]); 2] = [
        (
            "list_written_on",
            "What's the weather in Paris and in London?",
            &[
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"London\"}}",
            ],
        ),
        (
            "repeat_then_question",
            "What's the weather in Paris? Email it to bob@example.com",
            &[
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
                "<tool_call>\n{\"name\": \"send_email\", \"arguments\": {\"to\": \"bob@example.com\", \"subject\": \"Weather in Paris\", \"body\": {\"$ref\": \"s1.output.summary\"}}}\n</tool_call>",
            ],
        ),
    ];
    for (name, query, turns) in cases {
        let rendered = sent(query, turns, false, true);
        assert!(
            rendered.ends_with("=== outcome: ready with 2 step(s)\n"),
            "{name}: {rendered}"
        );
        insta::assert_snapshot!(name, rendered);
    }
}

/// A repair of an answer that made calls asks for calls only: offered plain text, small models
/// answer the repair by giving up and lose the plan they nearly had. A repair of a text answer
/// still may be text.
#[test]
fn a_repair_of_calls_is_calls_only() {
    let model = Arc::new(ScriptedModel::from_script(Script {
        capabilities: Capabilities {
            grammar: true,
            ..Capabilities::default()
        },
        turns: [
            // The 1.5B's first answer: the email refers to itself.
            "<tool_call>\n{\"name\": \"send_email\", \"arguments\": {\"to\": \"bob@example.com\", \"subject\": \"Rome\", \"body\": {\"$ref\": \"s1.output\"}}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"send_email\", \"arguments\": {\"to\": \"bob@example.com\", \"subject\": \"Rome\", \"body\": {\"$ref\": \"s1.output.summary\"}}}\n</tool_call>",
        ]
        .iter()
        .map(|t| ScriptedTurn::Text((*t).to_owned()))
        .collect(),
        ..Script::default()
    }));
    let planner = Planner::new(test_catalog(false), model.clone());
    let mut request = PlanRequest::new("Email bob@example.com the weather in Rome");
    request.options.format = PlanFormat::Calls;
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    assert_eq!(outcome.plan.steps.len(), 2, "{:?}", outcome.plan.steps);
    let max_text = |i: usize| match &model.requests()[i].constraint {
        Some(OutputConstraint::ToolCalls { max_text, .. }) => *max_text,
        other => panic!("{other:?}"),
    };
    assert!(max_text(0) > 0);
    assert_eq!(max_text(1), 0);
}

/// A part whose words name an offered tool that no call uses is written on with that tool;
/// when the request names none of the tools the first answer called, that answer was the
/// model's wrong pick, and the named tool's call takes its place instead of joining it.
#[test]
fn a_tool_the_request_names_replaces_a_call_it_does_not_name() {
    let catalog = plansmith_core::Catalog::from_json(&serde_json::json!([
        {"name": "mbti_analyse", "description": "Analyse a personality with the MBTI.",
         "inputSchema": {"type": "object", "properties": {"traits": {"type": "string"}},
                         "required": ["traits"]}},
        {"name": "five_factor_model_analyse",
         "description": "Analyse a personality with the five factor model.",
         "inputSchema": {"type": "object", "properties": {"talkative": {"type": "boolean"}},
                         "required": ["talkative"]}}
    ]))
    .unwrap();
    let model = Arc::new(ScriptedModel::from_script(Script {
        capabilities: Capabilities {
            grammar: true,
            prefill: true,
            ..Capabilities::default()
        },
        turns: [
            "<tool_call>\n{\"name\": \"mbti_analyse\", \"arguments\": {\"traits\": \"talkative\"}}\n</tool_call>",
            "{\"name\": \"five_factor_model_analyse\", \"arguments\": {\"talkative\": true}}",
        ]
        .iter()
        .map(|t| ScriptedTurn::Text((*t).to_owned()))
        .collect(),
        ..Script::default()
    }));
    let planner = Planner::new(catalog, model.clone());
    let mut request = PlanRequest::new(
        "Determine my personality type based on the five factor model: I'm talkative and I \
         have a forgiving nature.",
    );
    request.options.format = PlanFormat::Calls;
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    let names: Vec<String> = outcome
        .plan
        .steps
        .iter()
        .filter_map(|step| match &step.action {
            plansmith_core::Action::Tool { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        ["five_factor_model_analyse"],
        "{:?}",
        outcome.plan.steps
    );
    assert_eq!(outcome.plan.steps[0].id, "s1");
    // Written on under the grammar of the named tool's call alone.
    let requests = model.requests();
    let Some(OutputConstraint::JsonSchema { schema, .. }) = &requests[1].constraint else {
        panic!("{:?}", requests[1].constraint);
    };
    assert_eq!(
        schema["anyOf"].as_array().map(Vec::len),
        Some(1),
        "{schema}"
    );
    assert!(
        outcome
            .diagnostics
            .findings
            .iter()
            .chain(
                outcome
                    .diagnostics
                    .attempts
                    .iter()
                    .flat_map(|a| &a.diagnostics)
            )
            .any(|d| d.message.contains("in place of `mbti_analyse`")),
        "{:?}",
        outcome.diagnostics
    );
}
