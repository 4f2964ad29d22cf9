//! "Never an invalid plan", as a property of the whole pipeline: whatever the model replies, the
//! plan that comes out validates against the catalog, except for the missing arguments that
//! became questions (their steps wait, blocked).
//!
//! Replies are built from the parts that break plans in practice — unknown and misspelt tools,
//! wrong and missing arguments, dependencies on steps that do not exist or on the step itself,
//! `$ref`s to absent or later steps — plus the mutated and arbitrary replies of `fuzz`.

use std::sync::Arc;

use plansmith_core::validate::validate;
use plansmith_core::{
    Code, Diagnostic, LanguageModel, Outcome, PlanRequest, Planner, ScriptedModel, StepStatus,
};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::pipeline::test_catalog;

/// Plans `reply` (one model turn, no repair) and checks the outcome's plan.
fn check(reply: &str) -> Result<(), TestCaseError> {
    let catalog = test_catalog(true);
    let model: Arc<dyn LanguageModel> = Arc::new(ScriptedModel::new([reply.to_owned()]));
    let planner = Planner::new(catalog.clone(), model);
    let mut request = PlanRequest::new("weather in Paris, mail it to a@b.co, then reply");
    request.options.max_repairs = 0;
    request.options.max_steps = 4;
    let Ok(outcome) = futures::executor::block_on(planner.plan(&request)) else {
        return Ok(());
    };
    let left = errors_left(&outcome, &catalog, &request);
    prop_assert!(
        left.is_empty(),
        "the pipeline returned a plan that does not validate.\nreply: {reply}\nplan: {}\nerrors: {left:#?}",
        serde_json::to_string(&outcome.plan.steps).unwrap_or_default()
    );
    Ok(())
}

fn errors_left(
    outcome: &Outcome,
    catalog: &plansmith_core::Catalog,
    request: &PlanRequest,
) -> Vec<Diagnostic> {
    let plan = &outcome.plan;
    let (_, findings) = validate(plan.clone(), catalog, &request.options);
    findings
        .into_iter()
        .filter(Diagnostic::is_error)
        .filter(|d| {
            !(d.code == Code::MissingArgument
                && plan
                    .steps
                    .iter()
                    .any(|s| Some(&s.id) == d.step.as_ref() && s.status == StepStatus::Blocked))
        })
        .collect()
}

fn tool_name() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "get_weather",
        "send_email",
        "search_web",
        "math.factorial",
        "slope",
        "get_wether",
        "",
    ])
}

fn argument_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            "Paris",
            "a@b.co",
            "not an email",
            "celsius",
            "kelvin",
            ""
        ])
        .prop_map(Value::from),
        (-3i64..30).prop_map(Value::from),
        Just(Value::Null),
        Just(json!(["x"])),
        prop::sample::select(vec![
            "s1.output",
            "s2.output.temperature",
            "s9.output",
            "s1"
        ])
        .prop_map(|r| json!({"$ref": r})),
    ]
}

fn step() -> impl Strategy<Value = Value> {
    let id = prop::sample::select(vec!["s1", "s2", "s3", "s4", "s9"]);
    let deps = prop::collection::vec(prop::sample::select(vec!["s1", "s2", "s3", "s9"]), 0..3);
    let arguments = prop::collection::btree_map(
        prop::sample::select(vec![
            "city", "unit", "to", "subject", "body", "query", "number",
        ]),
        argument_value(),
        0..4,
    );
    (id, deps, prop::bool::weighted(0.8), tool_name(), arguments).prop_map(
        |(id, deps, is_tool, name, arguments)| {
            if is_tool {
                json!({"id": id, "type": "tool", "name": name, "arguments": arguments, "depends_on": deps})
            } else {
                json!({"id": id, "type": "reply", "text": "done", "depends_on": deps})
            }
        },
    )
}

proptest! {
    #[test]
    fn built_replies_never_yield_an_invalid_plan(steps in prop::collection::vec(step(), 1..6)) {
        check(&json!({"title": "t", "steps": steps}).to_string())?;
    }

    #[test]
    fn arbitrary_replies_never_yield_an_invalid_plan(value in crate::fuzz::arb_json()) {
        check(&json!({"steps": [value]}).to_string())?;
        check(&value.to_string())?;
    }
}

#[test]
fn a_broken_dependency_does_not_shield_an_unknown_tool() {
    // Seen in the BFCL evaluation (irrelevance_3, unconstrained 0.5B): the reply depended on a
    // step that does not exist, validation stopped at the graph, and the unknown tool `slope`
    // came out in a ready plan.
    for deps in [json!(["s9"]), json!(["s2"])] {
        let reply = json!({"steps": [
            {"id": "s1", "type": "tool", "name": "slope", "arguments": {"y": 3, "x": 1}},
            {"id": "s2", "type": "reply", "text": "-1/3", "depends_on": deps},
        ]});
        check(&reply.to_string()).unwrap();
        let catalog = test_catalog(false);
        let model: Arc<dyn LanguageModel> = Arc::new(ScriptedModel::new([reply.to_string()]));
        let mut request = PlanRequest::new("slope of the perpendicular to y = 3x + 2");
        request.options.max_repairs = 0;
        let outcome =
            futures::executor::block_on(Planner::new(catalog, model).plan(&request)).unwrap();
        assert!(
            outcome.plan.steps.iter().all(|s| !matches!(&s.action, plansmith_core::Action::Tool { name, .. } if name == "slope")),
            "{:?}",
            outcome.plan.steps
        );
    }
}

#[test]
fn a_step_listing_itself_loses_that_edge_and_stays() {
    // SmolLM2 through llama-server wrote `"depends_on": ["s1", …]` on step s1: the edge says
    // nothing about order, so it goes with a warning and the step is kept.
    let reply = json!({"steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}, "depends_on": ["s1"]},
        {"id": "s2", "type": "reply", "text": "on its way", "depends_on": ["s2"]},
    ]});
    check(&reply.to_string()).unwrap();
    let model: Arc<dyn LanguageModel> = Arc::new(ScriptedModel::new([reply.to_string()]));
    let mut request = PlanRequest::new("weather in Paris");
    request.options.max_repairs = 0;
    let outcome =
        futures::executor::block_on(Planner::new(test_catalog(false), model).plan(&request))
            .unwrap();
    assert_eq!(outcome.plan.steps.len(), 2, "{:#?}", outcome.diagnostics);
    assert!(outcome.plan.steps.iter().all(|s| s.depends_on.is_empty()));
    assert!(
        outcome
            .diagnostics
            .findings
            .iter()
            .any(|d| d.code == Code::AutoFixed && d.message.contains("listed itself"))
    );
}
