//! The fit check: a plan whose every called tool fits the request less than a content-free
//! function does is returned as a question naming the closest tool, with the calls kept in the
//! plan's metadata; a plan with one fitting tool, an answer to that question, or a model that
//! cannot score keeps its calls.

use std::sync::Arc;

use plansmith_core::llm::{Capabilities, Script, ScriptedLikelihood, ScriptedTurn};
use plansmith_core::{
    Action, Code, Feedback, Outcome, OutcomeStatus, PlanFormat, PlanRequest, Planner, ScriptedModel,
};

use crate::pipeline::test_catalog;

const WEATHER: &str =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

/// Plans `query` with a grammar model that answers `turn` and scores a context that mentions
/// a tool by `likelihoods`, the first that matches (a content-free one gets -1 nat a word).
fn plan(
    query: &str,
    turn: &str,
    likelihoods: &[(&str, f64)],
    edit: impl FnOnce(&mut PlanRequest),
) -> (Outcome, Arc<ScriptedModel>) {
    let model = Arc::new(
        ScriptedModel::from_script(Script {
            capabilities: Capabilities {
                grammar: true,
                ..Capabilities::default()
            },
            turns: vec![ScriptedTurn::Text(turn.to_owned())],
            ..Script::default()
        })
        .scoring(
            likelihoods
                .iter()
                .map(|(rule, per_token)| {
                    // `tool` for every text, `tool|words` for texts with those words.
                    let (tool, text) = rule
                        .split_once('|')
                        .map_or((*rule, None), |(t, w)| (t, Some(w.to_owned())));
                    ScriptedLikelihood {
                        context_contains: format!("A function: {tool}("),
                        text_contains: text,
                        per_token: *per_token,
                    }
                })
                .collect(),
        ),
    );
    let planner = Planner::new(test_catalog(false), model.clone());
    let mut request = PlanRequest::new(query);
    request.options.format = PlanFormat::Calls;
    edit(&mut request);
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    (outcome, model)
}

/// The weather call, then an email of its summary to `to`.
fn weather_then_email(to: &str) -> String {
    format!(
        "{WEATHER}\n<tool_call>\n{{\"name\": \"send_email\", \"arguments\": {{\"to\": \"{to}\", \"subject\": \"Weather\", \"body\": {{\"$ref\": \"s1.output.summary\"}}}}}}\n</tool_call>"
    )
}

/// The outcome is the two-step plan as the model wrote it.
fn kept_both(outcome: &Outcome) {
    assert_eq!(
        outcome.status,
        OutcomeStatus::Ready,
        "{:?}",
        outcome.diagnostics.findings
    );
    assert_eq!(tools(outcome), ["get_weather", "send_email"]);
}

fn tools(outcome: &Outcome) -> Vec<&str> {
    outcome
        .plan
        .steps
        .iter()
        .filter_map(|s| match &s.action {
            Action::Tool { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_call_to_a_tool_that_does_not_fit_becomes_a_question() {
    let (outcome, _) = plan(
        "What's the mass of an electron?",
        WEATHER,
        &[("get_weather", -0.98)],
        |_| {},
    );
    assert_eq!(outcome.status, OutcomeStatus::NeedsInput);
    assert!(outcome.plan.steps.is_empty(), "{:?}", outcome.plan.steps);
    let question = &outcome.plan.questions[0];
    assert_eq!(question.id, "q1");
    assert!(question.text.contains("`get_weather`"), "{}", question.text);
    // The calls the model wrote are not lost.
    let kept = &outcome.plan.metadata["unfitting_calls"];
    assert_eq!(kept[0]["action"]["name"], "get_weather", "{kept}");
    let finding = outcome
        .diagnostics
        .findings
        .iter()
        .find(|d| d.code == Code::NoToolFits)
        .expect("a no_tool_fits warning");
    assert!(
        finding.message.contains("`get_weather` 0.02"),
        "{}",
        finding.message
    );
    assert_eq!(outcome.diagnostics.attempts.len(), 1);
    assert!(
        outcome
            .diagnostics
            .findings
            .iter()
            .all(|d| d.code != Code::ModelError)
    );
}

#[test]
fn a_tool_that_fits_keeps_the_plan() {
    let (outcome, _) = plan(
        "What's the weather in Paris?",
        WEATHER,
        &[("get_weather", -0.4)],
        |_| {},
    );
    assert_eq!(outcome.status, OutcomeStatus::Ready);
    assert_eq!(tools(&outcome), ["get_weather"]);
    assert!(outcome.plan.metadata.get("unfitting_calls").is_none());
    assert!(
        outcome
            .diagnostics
            .findings
            .iter()
            .all(|d| d.code != Code::NoToolFits)
    );
}

#[test]
fn one_fitting_tool_is_enough() {
    let two = weather_then_email("bob@example.com");
    let (outcome, _) = plan(
        "What's the weather in Paris? Email it to bob@example.com",
        &two,
        &[("get_weather", -1.0), ("send_email", -0.5)],
        |_| {},
    );
    kept_both(&outcome);
}

#[test]
fn an_answer_or_the_option_off_keeps_the_calls() {
    let answered = |request: &mut PlanRequest| {
        request.feedback = Some(Feedback {
            text: Some("Yes, call get_weather anyway.".into()),
            ..Feedback::default()
        });
    };
    let off = |request: &mut PlanRequest| request.options.check_fit = false;
    for edit in [&answered as &dyn Fn(&mut PlanRequest), &off] {
        let (outcome, _) = plan(
            "What's the mass of an electron?",
            WEATHER,
            &[("get_weather", -1.0)],
            edit,
        );
        assert_eq!(tools(&outcome), ["get_weather"]);
    }
    // A model that cannot score (no rules) keeps them too.
    let (outcome, _) = plan("What's the mass of an electron?", WEATHER, &[], |_| {});
    assert_eq!(tools(&outcome), ["get_weather"]);
}

/// A plan of several tools answers a request of several parts: each tool is also scored on each
/// part, so a tool that fits only its own part keeps the plan.
#[test]
fn a_tool_that_fits_its_part_of_the_request_keeps_the_plan() {
    let two = weather_then_email("eve@example.com");
    let query = "Check the weather in Berlin, then email it to eve@example.com";
    // get_weather fits the part that does not mention the address, and nothing else fits.
    let rules = [("get_weather|eve@example.com", -1.0), ("get_weather", -0.5)];
    let (outcome, _) = plan(query, &two, &rules, |_| {});
    kept_both(&outcome);
    // A plan of one tool is scored on the whole request only: the same rules ask.
    let (outcome, _) = plan(query, WEATHER, &rules, |_| {});
    assert_eq!(outcome.status, OutcomeStatus::NeedsInput);
    assert!(
        outcome
            .diagnostics
            .findings
            .iter()
            .any(|d| d.code == Code::NoToolFits)
    );
}

/// A call whose required values the request does not give asks too, with the guessed values
/// named, also for a model that cannot score; values the request gives (as digits or words)
/// keep the call, and so does an answer.
#[test]
fn a_call_of_values_the_request_does_not_give_becomes_a_question() {
    let factorial = |n: u32| {
        format!(
            "<tool_call>\n{{\"name\": \"math.factorial\", \"arguments\": {{\"number\": {n}}}}}\n</tool_call>"
        )
    };
    let (outcome, _) = plan(
        "What is the factorial of my age?",
        &factorial(37),
        &[],
        |_| {},
    );
    assert_eq!(outcome.status, OutcomeStatus::NeedsInput);
    assert!(outcome.plan.steps.is_empty(), "{:?}", outcome.plan.steps);
    let question = &outcome.plan.questions[0];
    assert!(question.text.contains("`number` = 37"), "{}", question.text);
    assert_eq!(
        question.default.as_deref(),
        Some("reply without calling a tool")
    );
    assert_eq!(
        outcome.plan.metadata["unfitting_calls"][0]["action"]["arguments"]["number"],
        37
    );
    let finding = outcome
        .diagnostics
        .findings
        .iter()
        .find(|d| d.code == Code::InventedArguments)
        .expect("an invented_arguments warning");
    assert!(
        finding.message.contains("`math.factorial` (number)"),
        "{}",
        finding.message
    );

    for (query, n) in [
        ("What is the factorial of 7?", 7),
        ("What is the factorial of three?", 3),
    ] {
        let (outcome, _) = plan(query, &factorial(n), &[], |_| {});
        assert_eq!(tools(&outcome), ["math.factorial"], "{query}");
    }
    let answered = |request: &mut PlanRequest| {
        request.feedback = Some(Feedback {
            text: Some("Call it with these values.".into()),
            ..Feedback::default()
        });
    };
    let (outcome, _) = plan(
        "What is the factorial of my age?",
        &factorial(37),
        &[],
        answered,
    );
    assert_eq!(tools(&outcome), ["math.factorial"]);
}

/// Text the planner composes (a body, a query) is not a value the request should have given,
/// and a call that guesses fewer than half of its required values keeps its plan.
#[test]
fn composed_text_and_a_minority_of_guesses_keep_the_call() {
    let mail = "<tool_call>\n{\"name\": \"send_email\", \"arguments\": {\"to\": \"bob@example.com\", \"subject\": \"Quarterly Planning Sync\", \"body\": \"Hi Bob, could we meet on Monday to go over the plans for the next quarter?\"}}\n</tool_call>";
    let (outcome, _) = plan("Ask bob@example.com for a meeting", mail, &[], |_| {});
    assert_eq!(
        tools(&outcome),
        ["send_email"],
        "{:?}",
        outcome.diagnostics.findings
    );
}

/// Numbers given with a scale word or by naming a period are given.
#[test]
fn scaled_numbers_and_named_periods_are_given() {
    let factorial = |n: u64| {
        format!(
            "<tool_call>\n{{\"name\": \"math.factorial\", \"arguments\": {{\"number\": {n}}}}}\n</tool_call>"
        )
    };
    for (query, n) in [
        ("The factorial of 2 million", 2_000_000),
        ("The factorial of the days in a week", 7),
    ] {
        let (outcome, _) = plan(query, &factorial(n), &[], |_| {});
        assert_eq!(
            tools(&outcome),
            ["math.factorial"],
            "{query}: {:?}",
            outcome.diagnostics.findings
        );
    }
    // Not any number: a million is not 3 million.
    let (outcome, _) = plan(
        "The factorial of a million",
        &factorial(3_000_000),
        &[],
        |_| {},
    );
    assert!(tools(&outcome).is_empty());
}
