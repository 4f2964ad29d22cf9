//! The seed scenarios that belong to planning (each peer's planner behaviour we match), as data: `tests/data/scenarios/*.json`.
//!
//! Each case gives a request, the scripted model's turns (shaped like real model output), and
//! what must come out: the outcome status, steps (a partial match on the flat step view),
//! questions, guidance, fallback reason, findings, what the prompts sent to the model contained,
//! and how many model calls were made. One `check` runs them all and reports every failing case.

use std::path::Path;
use std::sync::Arc;

use plansmith_core::llm::Script;
use plansmith_core::pipeline::Triage;
use plansmith_core::{
    Catalog, Completion, CompletionRequest, Finding, LanguageModel, LlmError, OutcomeStatus,
    PlanRequest, Planner, ScriptedInvestigator, ScriptedModel, Step,
};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
struct Scenario {
    name: String,
    #[serde(default)]
    agents: bool,
    request: PlanRequest,
    script: Script,
    /// Answers of a scripted background investigator, one per call: `{"findings": […]}` or
    /// `{"error": "…"}`. Absent: the planner has no investigator.
    #[serde(default)]
    investigation: Option<Vec<InvestigationAnswer>>,
    expect: Expect,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct InvestigationAnswer {
    #[serde(default)]
    findings: Vec<Finding>,
    error: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Expect {
    status: String,
    error_contains: Option<String>,
    n_requests: Option<usize>,
    n_steps: Option<usize>,
    steps: Option<Vec<Value>>,
    questions: Option<Vec<Value>>,
    guidance_contains: Vec<String>,
    reason_contains: Vec<String>,
    title: Option<String>,
    plan_id: Option<String>,
    has_enough_context: Option<bool>,
    findings: Vec<String>,
    prompt_contains: Vec<PromptNeedle>,
    repairs: Option<u32>,
    strategy: Option<String>,
    constraint: Option<String>,
    selected_tools: Option<Vec<String>>,
    triage: Option<Triage>,
    triage_reason: Option<String>,
    /// Findings that went into the prompt (after trimming), as `[source] text`.
    investigated: Option<Vec<String>>,
    investigation_error_contains: Option<String>,
    /// How many requests the scripted investigator got.
    investigator_calls: Option<usize>,
    /// Partial match on `diagnostics.memory`.
    memory: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct PromptNeedle {
    request: usize,
    text: String,
}

pub fn data_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data"))
}

pub fn test_catalog(with_agents: bool) -> Catalog {
    let read = |name: &str| -> Value {
        let text = std::fs::read_to_string(data_dir().join("catalogs").join(name)).unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let catalog = Catalog::from_json(&read("tools.json")).unwrap();
    if with_agents {
        catalog
            .with_agents(Catalog::agents_from_json(&read("agents.json")).unwrap())
            .unwrap()
    } else {
        catalog
    }
}

/// A step as one flat object: the step's fields with the action's fields merged in.
fn step_view(step: &Step) -> Value {
    let mut view = serde_json::to_value(step).unwrap();
    let action = view.as_object_mut().unwrap().remove("action").unwrap();
    for (key, value) in action.as_object().unwrap() {
        view[key] = value.clone();
    }
    view
}

/// Every key of `expected` must match `actual`: `*_contains` keys by substring, others equal.
fn partial_match(actual: &Value, expected: &Value) -> Result<(), String> {
    for (key, want) in expected.as_object().unwrap() {
        if let Some(field) = key.strip_suffix("_contains") {
            let got = actual
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or_default();
            let needle = want.as_str().unwrap();
            if !got.contains(needle) {
                return Err(format!("{field} = {got:?} does not contain {needle:?}"));
            }
            continue;
        }
        let got = actual.get(key).cloned().unwrap_or(Value::Null);
        let got = if got.is_null() && want.as_array().is_some_and(Vec::is_empty) {
            json!([])
        } else {
            got
        };
        if &got != want {
            return Err(format!("{key} = {got} but expected {want}"));
        }
    }
    Ok(())
}

fn constraint_kind(request: &CompletionRequest) -> String {
    match &request.constraint {
        Some(c) => serde_json::to_value(c).unwrap()["kind"]
            .as_str()
            .unwrap()
            .to_owned(),
        None => "none".into(),
    }
}

fn run(scenario: &Scenario) -> Result<(), Vec<String>> {
    let model = Arc::new(ScriptedModel::from_script(scenario.script.clone()));
    let mut planner = Planner::new(test_catalog(scenario.agents), model.clone());
    let mut investigator = None;
    if let Some(answers) = &scenario.investigation {
        let answers = answers
            .iter()
            .map(|a| match &a.error {
                Some(error) => Err(error.clone()),
                None => Ok(a.findings.clone()),
            })
            .collect();
        let scripted = Arc::new(ScriptedInvestigator::new(answers));
        planner = planner.with_investigator(scripted.clone());
        investigator = Some(scripted);
    }
    let result = futures::executor::block_on(planner.plan(&scenario.request));
    let expect = &scenario.expect;
    let requests = model.requests();
    let mut failures = Vec::new();
    let mut fail = |message: String| failures.push(message);

    if let Some(n) = expect.n_requests
        && requests.len() != n
    {
        fail(format!("{} model requests, expected {n}", requests.len()));
    }
    for needle in &expect.prompt_contains {
        match requests.get(needle.request) {
            None => fail(format!("no model request #{}", needle.request)),
            Some(request) => {
                if !request
                    .messages
                    .iter()
                    .any(|m| m.content.contains(&needle.text))
                {
                    let all: Vec<&str> = request
                        .messages
                        .iter()
                        .map(|m| m.content.as_str())
                        .collect();
                    fail(format!(
                        "request #{} lacks {:?}; messages: {all:#?}",
                        needle.request, needle.text
                    ));
                }
            }
        }
    }
    if let Some(kind) = &expect.constraint {
        match requests.first() {
            Some(request) if &constraint_kind(request) == kind => {}
            Some(request) => fail(format!(
                "constraint {} expected {kind}",
                constraint_kind(request)
            )),
            None => fail("no request to check the constraint of".into()),
        }
    }

    let outcome = match result {
        Err(err) => {
            if expect.status != "error" {
                fail(format!(
                    "planning failed: {err}, expected status {}",
                    expect.status
                ));
            } else if let Some(needle) = &expect.error_contains
                && !err.to_string().contains(needle)
            {
                fail(format!("error `{err}` lacks {needle:?}"));
            }
            return if failures.is_empty() {
                Ok(())
            } else {
                Err(failures)
            };
        }
        Ok(outcome) => outcome,
    };
    let status = outcome.status.name();
    if status != expect.status {
        fail(format!(
            "status {status}, expected {}; outcome: {}",
            expect.status,
            serde_json::to_string_pretty(&outcome).unwrap()
        ));
    }
    let plan = &outcome.plan;
    if let Some(n) = expect.n_steps
        && plan.steps.len() != n
    {
        fail(format!("{} steps, expected {n}", plan.steps.len()));
    }
    if let Some(steps) = &expect.steps {
        if plan.steps.len() < steps.len() {
            fail(format!(
                "{} steps, expected at least {}",
                plan.steps.len(),
                steps.len()
            ));
        }
        for (idx, (step, want)) in plan.steps.iter().zip(steps).enumerate() {
            if let Err(why) = partial_match(&step_view(step), want) {
                fail(format!("step {idx}: {why}"));
            }
        }
    }
    if let Some(questions) = &expect.questions {
        if plan.questions.len() != questions.len() {
            fail(format!(
                "{} questions, expected {}: {:?}",
                plan.questions.len(),
                questions.len(),
                plan.questions
            ));
        }
        for (idx, (question, want)) in plan.questions.iter().zip(questions).enumerate() {
            if let Err(why) = partial_match(&serde_json::to_value(question).unwrap(), want) {
                fail(format!("question {idx}: {why}"));
            }
        }
    }
    let guidance = plan.guidance.clone().unwrap_or_default();
    for needle in &expect.guidance_contains {
        if !guidance.contains(needle) {
            fail(format!("guidance {guidance:?} lacks {needle:?}"));
        }
    }
    let reason = match &outcome.status {
        OutcomeStatus::Fallback { reason } => reason.clone(),
        _ => String::new(),
    };
    for needle in &expect.reason_contains {
        if !reason.contains(needle) {
            fail(format!("fallback reason {reason:?} lacks {needle:?}"));
        }
    }
    if let Some(title) = &expect.title
        && &plan.title != title
    {
        fail(format!("title {:?}, expected {title:?}", plan.title));
    }
    if let Some(id) = &expect.plan_id
        && &plan.id != id
    {
        fail(format!("plan id {}, expected {id}", plan.id));
    }
    if expect.has_enough_context.is_some() && plan.has_enough_context != expect.has_enough_context {
        fail(format!(
            "has_enough_context {:?}, expected {:?}",
            plan.has_enough_context, expect.has_enough_context
        ));
    }
    let codes: Vec<&str> = outcome
        .diagnostics
        .findings
        .iter()
        .map(|d| d.code.as_str())
        .collect();
    for code in &expect.findings {
        if !codes.contains(&code.as_str()) {
            fail(format!("findings {codes:?} lack {code}"));
        }
    }
    if let Some(repairs) = expect.repairs
        && outcome.diagnostics.repairs != repairs
    {
        fail(format!(
            "{} repairs, expected {repairs}",
            outcome.diagnostics.repairs
        ));
    }
    if let Some(strategy) = &expect.strategy {
        let got = outcome
            .diagnostics
            .strategy
            .map(|s| s.as_str())
            .unwrap_or("none");
        if got != strategy {
            fail(format!("strategy {got}, expected {strategy}"));
        }
    }
    if let Some(selected) = &expect.selected_tools
        && &outcome.diagnostics.selected_tools != selected
    {
        fail(format!(
            "selected {:?}, expected {selected:?}",
            outcome.diagnostics.selected_tools
        ));
    }
    if expect.triage_reason.is_some() && outcome.diagnostics.triage_reason != expect.triage_reason {
        fail(format!(
            "triage reason {:?}, expected {:?}",
            outcome.diagnostics.triage_reason, expect.triage_reason
        ));
    }
    if let Some(triage) = expect.triage
        && outcome.diagnostics.triage != triage
    {
        fail(format!(
            "triage {:?}, expected {triage:?}",
            outcome.diagnostics.triage
        ));
    }
    let investigation = outcome.diagnostics.investigation.as_ref();
    if let Some(expected) = &expect.investigated {
        let got: Vec<String> = investigation
            .map(|i| {
                i.findings
                    .iter()
                    .map(|f| format!("[{}] {}", f.source, f.text))
                    .collect()
            })
            .unwrap_or_default();
        if &got != expected {
            fail(format!("investigated {got:?}, expected {expected:?}"));
        }
    }
    if let Some(expected) = expect.investigator_calls {
        let got = investigator.as_ref().map_or(0, |i| i.queries().len());
        if got != expected {
            fail(format!(
                "the investigator got {got} request(s), expected {expected}"
            ));
        }
    }
    if let Some(needle) = &expect.investigation_error_contains {
        let error = investigation
            .and_then(|i| i.error.clone())
            .unwrap_or_default();
        if !error.contains(needle.as_str()) {
            fail(format!("investigation error {error:?} lacks {needle:?}"));
        }
    }
    if let Some(expected) = &expect.memory {
        let actual = serde_json::to_value(&outcome.diagnostics.memory).unwrap();
        if actual.is_null() {
            fail("no memory in the diagnostics".to_owned());
        } else if let Err(why) = partial_match(&actual, expected) {
            fail(format!("memory: {why}"));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures)
    }
}

/// An investigator that answers after the budget: its findings are dropped with a warning and
/// the plan is made without them.
#[test]
fn a_late_investigation_is_dropped_and_planning_goes_on() {
    struct Slow;
    impl plansmith_core::Investigator for Slow {
        fn name(&self) -> String {
            "slow".into()
        }
        fn investigate<'a>(
            &'a self,
            _query: &'a str,
            _budget: std::time::Duration,
        ) -> plansmith_core::llm::BoxFuture<'a, Result<Vec<Finding>, String>> {
            Box::pin(async {
                std::thread::sleep(std::time::Duration::from_millis(60));
                Ok(vec![Finding {
                    source: "slow".into(),
                    text: "stale".into(),
                }])
            })
        }
    }
    let reply = r#"{"thought": "t", "title": "Reply", "steps": [{"id": "s1", "type": "reply", "text": "ok"}]}"#;
    let model = Arc::new(ScriptedModel::from_script(
        serde_json::from_value(json!({"turns": [reply]})).unwrap(),
    ));
    let planner =
        Planner::new(test_catalog(false), model.clone()).with_investigator(Arc::new(Slow));
    let mut request = PlanRequest::new("Say ok");
    request.options.investigate = true;
    request.options.investigation_budget_ms = 10;
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Ready);
    let investigation = outcome.diagnostics.investigation.unwrap();
    assert!(investigation.findings.is_empty());
    assert!(
        investigation
            .error
            .unwrap()
            .contains("past the 10 ms budget"),
        "late answers are named as such"
    );
    assert!(
        outcome
            .diagnostics
            .findings
            .iter()
            .any(|d| d.code.as_str() == "investigation_failed")
    );
    let prompt: String = model.requests()[0]
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert!(!prompt.contains("stale"), "{prompt}");
}

/// Time a call waited for the model (for a free sequence of the embedded model) is
/// reported as its own stage, not as generation.
#[test]
fn time_waiting_for_the_model_is_not_counted_as_generation() {
    /// Takes 80 ms, of which it says 60 were spent waiting for its turn.
    struct Queued;
    impl LanguageModel for Queued {
        fn name(&self) -> String {
            "queued".into()
        }
        fn capabilities(&self) -> plansmith_core::Capabilities {
            plansmith_core::Capabilities::default()
        }
        fn complete(
            &self,
            _request: CompletionRequest,
        ) -> plansmith_core::llm::BoxFuture<'_, Result<Completion, LlmError>> {
            Box::pin(async {
                std::thread::sleep(std::time::Duration::from_millis(80));
                Ok(Completion {
                    text: r#"{"thought": "t", "title": "Reply", "steps": [{"id": "s1", "type": "reply", "text": "ok"}]}"#.into(),
                    queue_us: 60_000,
                    ..Completion::default()
                })
            })
        }
    }
    let planner = Planner::new(test_catalog(false), Arc::new(Queued));
    let outcome = futures::executor::block_on(planner.plan(&PlanRequest::new("Say ok"))).unwrap();
    let timings = outcome.diagnostics.timings;
    assert_eq!(timings.queue_us, 60_000, "{timings:?}");
    assert!(
        (20_000..60_000).contains(&timings.generate_us),
        "generation is the call's time without the wait: {timings:?}"
    );
    let attempt = &outcome.diagnostics.attempts[0];
    assert_eq!(attempt.queue_ms, 60);
    assert!((20..60).contains(&attempt.generate_ms), "{attempt:?}");
}

/// A first call that fills `business_id` with a value the request does not give, while an
/// offered tool that no call uses returns `business_id` (the lookup a chain starts with, which
/// small models skip): the planner asks for that tool's call first, writing on under the
/// grammar of one call of it, and passes its field on by `$ref`.
#[test]
fn a_skipped_lookup_is_asked_for_first_and_its_result_passed_on() {
    use plansmith_core::llm::{Capabilities, Message, OutputConstraint, ScriptedTurn};
    let catalog = Catalog::from_json(&json!([
        {"name": "search_businesses", "description": "Search for local businesses by a query.",
         "input_schema": {"type": "object", "properties": {"query": {"type": "string"}},
                          "required": ["query"]},
         "output_schema": {"type": "object", "properties": {
             "business_id": {"type": "string"}, "name": {"type": "string"}}}},
        {"name": "business_reviews", "description": "The reviews of a business.",
         "input_schema": {"type": "object", "properties": {
             "business_id": {"type": "string"}, "limit": {"type": "integer"}},
             "required": ["business_id"]}}
    ]))
    .unwrap();
    let model = Arc::new(ScriptedModel::from_script(Script {
        capabilities: Capabilities {
            grammar: true,
            prefill: true,
            ..Capabilities::default()
        },
        turns: vec![
            ScriptedTurn::Text(
                "<tool_call>\n{\"name\": \"business_reviews\", \"arguments\": \
                 {\"business_id\": \"12345\", \"limit\": 10}}\n</tool_call>"
                    .into(),
            ),
            ScriptedTurn::Text(
                "{\"name\": \"search_businesses\", \"arguments\": {\"query\": \"gyms in London\"}}"
                    .into(),
            ),
        ],
        ..Script::default()
    }));
    let planner = Planner::new(catalog, model.clone());
    let mut request = PlanRequest::new("Locate gyms in London and show me their reviews");
    request.options.format = plansmith_core::PlanFormat::Calls;
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    let plan = &outcome.plan;
    let views: Vec<Value> = plan.steps.iter().map(step_view).collect();
    let expected = [
        json!({"id": "s1", "name": "search_businesses", "arguments": {"query": "gyms in London"}}),
        json!({"id": "s2", "name": "business_reviews", "depends_on": ["s1"],
               "arguments": {"business_id": {"$ref": "s1.output.business_id"}, "limit": 10}}),
    ];
    assert_eq!(views.len(), expected.len(), "{views:?}");
    for (view, want) in views.iter().zip(&expected) {
        partial_match(view, want).unwrap();
    }
    // The second request wrote on from an empty answer, held to one call of the producer.
    let asked = &model.requests()[1];
    assert_eq!(
        asked.messages.last().map(|m: &Message| m.content.as_str()),
        Some("<tool_call>\n")
    );
    let Some(OutputConstraint::JsonSchema { schema, .. }) = &asked.constraint else {
        panic!("one call's grammar: {:?}", asked.constraint);
    };
    let schema = schema.to_string();
    assert!(
        schema.contains("search_businesses") && !schema.contains("business_reviews"),
        "{schema}"
    );
}

#[test]
fn seed_scenarios() {
    let dir = data_dir().join("scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut n_cases = 0;
    let mut report = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let scenarios: Vec<Scenario> =
            serde_json::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", file.display()));
        for scenario in &scenarios {
            n_cases += 1;
            if let Err(failures) = run(scenario) {
                report.push(format!("{}:\n  {}", scenario.name, failures.join("\n  ")));
            }
        }
    }
    assert!(
        n_cases >= 30,
        "only {n_cases} scenarios found in {}",
        dir.display()
    );
    assert!(
        report.is_empty(),
        "{} of {n_cases} scenarios failed:\n{}",
        report.len(),
        report.join("\n")
    );
}

/// Two requests that are shown the same tools share the whole system prompt (tools in catalog
/// order, the time in the user message), so the local model's KV cache and providers' prompt
/// caches reuse it.
#[test]
fn requests_with_the_same_tools_share_the_system_prompt() {
    let catalog = test_catalog(false);
    let reply = r#"{"steps": [{"id": "s1", "type": "reply", "text": "ok"}]}"#;
    let model = Arc::new(ScriptedModel::new([reply, reply]));
    let planner = Planner::new(catalog.clone(), model.clone());
    for query in [
        "Email bob@example.com the stock price of ACME",
        "What's the weather in Paris?",
    ] {
        let mut request = PlanRequest::new(query);
        request.options.top_k = catalog.len();
        request.options.max_repairs = 0;
        futures::executor::block_on(planner.plan(&request)).unwrap();
    }
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let system = |n: usize| requests[n].messages[0].content.clone();
    assert_eq!(system(0), system(1));
    assert!(
        requests[1]
            .messages
            .last()
            .unwrap()
            .content
            .contains("Current time:")
    );
}

/// A caller that asked not to be asked gets the recommended answer of each question that has
/// one: a second planning call with that answer, the same plan's next version, and the answer
/// recorded as an assumption; a question without a recommended answer is still asked.
#[test]
fn no_questions_takes_the_recommended_answers_and_records_them() {
    let recurring = r#"{"adequate": true, "reason": "daily news", "title": "NVDA news", "tasks": [{"title": "Daily NVDA news", "query": "Summarise today's NVDA news", "agent_name": "NewsAgent", "pattern": "recurring", "schedule_config": {"daily_time": "09:00"}}]}"#;
    let once = r#"{"adequate": true, "reason": "news once", "title": "NVDA news", "tasks": [{"title": "NVDA news", "query": "Summarise today's NVDA news", "agent_name": "NewsAgent", "pattern": "once"}]}"#;
    let model = Arc::new(ScriptedModel::new([recurring, once]));
    let planner = Planner::new(test_catalog(true), model.clone());
    let mut request = PlanRequest::new("Send me NVDA news every morning at 9");
    request.options.shape = plansmith_core::Shape::AgentTasks;
    request.options.no_questions = true;
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Ready, "{:?}", outcome.plan);
    assert!(outcome.plan.questions.is_empty());
    assert!(outcome.plan.steps.iter().all(|s| s.schedule.is_none()));
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let second: String = requests[1]
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert!(
        second.contains("recurring schedule?: no (assumed"),
        "the replan is told the assumed answer: {second}"
    );
    let assumed = &outcome.plan.metadata["assumptions"];
    assert_eq!(assumed[0]["kind"], "risk_confirmation");
    assert_eq!(assumed[0]["answer"], "no");
    assert!(assumed[0]["text"].as_str().unwrap().contains("09:00"));

    // Without a recommended answer nothing is assumed: one call, the question stays.
    let model = Arc::new(ScriptedModel::new([
        r#"{"thought": "t", "title": "Q", "questions": ["Which city?"], "steps": []}"#,
    ]));
    let planner = Planner::new(test_catalog(false), model.clone());
    let mut request = PlanRequest::new("What's the weather?");
    request.options.no_questions = true;
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    assert_eq!(model.requests().len(), 1);
    assert_eq!(outcome.plan.questions.len(), 1);
    assert!(outcome.plan.metadata.get("assumptions").is_none());
}
