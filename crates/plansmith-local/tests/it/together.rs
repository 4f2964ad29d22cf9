use std::sync::Arc;

use futures::FutureExt as _;
use plansmith_core::LanguageModel;
use plansmith_core::llm::Message;
use plansmith_local::LocalModel;
use serde_json::{Value, json};

use crate::model::{request, serial, smollm2};

/// SmolLM2 decoding up to `sequences` requests together.
fn together(sequences: usize) -> Arc<LocalModel> {
    let mut config = smollm2();
    config.sequences = sequences;
    Arc::new(LocalModel::load(config).expect("load SmolLM2"))
}

/// A grammar that cannot end before the token cap: a thousand numbers.
fn numbers() -> Value {
    json!({"type": "array", "items": {"type": "integer"}, "minItems": 1000, "maxItems": 1000})
}

/// With two sequences, a short request made while a long one decodes is answered before the
/// long one ends; with one, it waits for the whole long request.
#[test]
fn a_short_request_is_answered_while_a_long_one_decodes() {
    let _serial = serial();
    for (sequences, overtakes) in [(2, true), (1, false)] {
        let model = together(sequences);
        let mut long = Box::pin(model.complete(request(
            vec![Message::user("Write numbers.")],
            Some(numbers()),
            200,
        )));
        let short = model.complete(request(vec![Message::user("Say hi.")], None, 4));
        let short = futures::executor::block_on(short).unwrap();
        assert!(short.usage.completion_tokens > 0, "{short:?}");
        let ended_first = (&mut long).now_or_never();
        assert_eq!(
            ended_first.is_some(),
            !overtakes,
            "{sequences} sequence(s): had the long request ended when the short one did?"
        );
        let long = match ended_first {
            Some(long) => long,
            None => futures::executor::block_on(long),
        }
        .unwrap();
        assert_eq!(long.usage.completion_tokens, 200, "{long:?}");
        if overtakes {
            assert!(
                long.queue_us < 50_000 && short.queue_us < 50_000,
                "neither waited for a sequence: {} and {} µs",
                long.queue_us,
                short.queue_us
            );
        }
    }
}

/// Requests decoded together each keep their own grammar: every reply matches its own
/// schema, not another's.
#[test]
fn requests_decoded_together_each_follow_their_own_schema() {
    let _serial = serial();
    let model = together(3);
    let schemas = [
        json!({"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}},
            "required": ["colour"], "additionalProperties": false}),
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4}),
        json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
            "people": {"type": "integer"}}, "required": ["city", "people"],
            "additionalProperties": false}),
    ];
    let asks = [
        "Pick a colour, in JSON.",
        "Give me some numbers, in JSON.",
        "Name a city and how many people live there, in JSON.",
    ];
    let futures: Vec<_> = schemas
        .iter()
        .zip(asks)
        .map(|(schema, ask)| {
            model.complete(request(vec![Message::user(ask)], Some(schema.clone()), 60))
        })
        .collect();
    let replies = futures::executor::block_on(futures::future::join_all(futures));
    for (schema, reply) in schemas.iter().zip(replies) {
        let reply = reply.unwrap();
        let value: Value = serde_json::from_str(&reply.text)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {}", reply.text));
        let validator = jsonschema::validator_for(schema).unwrap();
        assert!(
            validator.is_valid(&value),
            "{} does not match {schema}",
            reply.text
        );
    }
}

/// A request whose caller stops waiting drops only its own sequence: the request beside it
/// decodes to its end, and the freed sequence serves the next request at once.
#[test]
fn an_abandoned_request_drops_only_its_own_sequence() {
    let _serial = serial();
    let model = together(2);
    let dropped = model.complete(request(
        vec![Message::user("Write numbers.")],
        Some(numbers()),
        2000,
    ));
    let mut kept = Box::pin(model.complete(request(
        vec![Message::user("Write more numbers.")],
        Some(numbers()),
        300,
    )));
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(dropped);
    // The next request gets the dropped one's sequence and ends before the kept one does.
    let next = futures::executor::block_on(model.complete(request(
        vec![Message::user("Say hi.")],
        None,
        4,
    )))
    .unwrap();
    assert!(next.usage.completion_tokens > 0, "{next:?}");
    assert!(
        (&mut kept).now_or_never().is_none(),
        "the kept request ended before the next one did"
    );
    let kept = futures::executor::block_on(kept).unwrap();
    assert_eq!(kept.usage.completion_tokens, 300, "{kept:?}");
    assert!(kept.text.starts_with('['), "{}", kept.text);
}

/// A request shares the prompt prefix another sequence holds: the system prompt is evaluated
/// once for two requests that start together after it.
#[test]
fn a_prompt_prefix_is_shared_between_sequences() {
    let _serial = serial();
    let model = together(2);
    let system = "You are a terse assistant. Answer every question in one word, the name of a \
                  city or a country, with no punctuation and no explanation.";
    let ask = |text: &str, max_tokens| {
        request(
            vec![Message::system(system), Message::user(text)],
            None,
            max_tokens,
        )
    };
    // The first request leaves the system prompt in its sequence.
    futures::executor::block_on(model.complete(ask("Capital of Italy?", 4))).unwrap();
    // Two at once: one goes where that prompt is, the other shares it from there.
    let (first, second) = futures::executor::block_on(futures::future::join(
        model.complete(ask("Capital of France?", 4)),
        model.complete(ask("Capital of Spain?", 4)),
    ));
    let (first, second) = (first.unwrap(), second.unwrap());
    for completion in [&first, &second] {
        let stages = completion
            .stages
            .expect("the local model reports its stages");
        assert!(
            stages.cached_tokens > 20,
            "the system prompt was evaluated again: {completion:?}"
        );
    }
}
