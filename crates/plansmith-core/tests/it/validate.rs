//! The validation case table (`tests/data/validate/cases.json`), beside the parse table: a
//! plan's steps in, every diagnostic out as `severity code at pointer`, and the steps left.
//! Together the cases cover every code validation gives; the other codes come from parsing
//! (the parse table) and from the pipeline (the scenarios). `PLANSMITH_UPDATE_VALIDATE=1`
//! rewrites the expectations from what the code does, to be read before they are committed.

use std::collections::BTreeSet;

use plansmith_core::{Code, Plan, PlanOptions, validate::validate};
use serde_json::{Value, json};

use crate::pipeline::test_catalog;

/// The codes `validate` gives; each must appear in the table.
const VALIDATION_CODES: [Code; 18] = [
    Code::EmptyPlan,
    Code::DuplicateStepId,
    Code::UnknownDependency,
    Code::Cycle,
    Code::UnknownTool,
    Code::UnknownAgent,
    Code::MissingArgument,
    Code::UnknownArgument,
    Code::InvalidArgument,
    Code::InvalidRef,
    Code::RefTypeMismatch,
    Code::InvalidSchedule,
    Code::ScheduleUnconfirmed,
    Code::MaxStepsExceeded,
    Code::DuplicateStep,
    Code::AutoFixed,
    Code::ApprovalRequired,
    Code::InvalidStep,
];

fn path() -> std::path::PathBuf {
    crate::pipeline::data_dir().join("validate/cases.json")
}

/// What validating `case` gives: its diagnostics and the ids of the steps left.
fn outcome(case: &Value) -> Value {
    let catalog = test_catalog(true);
    let mut options = PlanOptions::default();
    if let Some(n) = case["max_steps"].as_u64() {
        options.max_steps = n as usize;
    }
    options.allow_recurring = case["allow_recurring"].as_bool().unwrap_or(false);
    let plan: Plan = serde_json::from_value(json!({
        "id": "plan-1", "version": 1, "title": "t", "goal": case["name"], "locale": "en-US",
        "ready": true, "steps": case["steps"], "created_at": "2026-03-02T09:30:00Z"
    }))
    .unwrap_or_else(|err| panic!("{}: not a plan: {err}", case["name"]));
    let (plan, diagnostics) = validate(plan, &catalog, &options);
    let found: Vec<String> = diagnostics
        .iter()
        .map(|d| {
            let severity = serde_json::to_value(d.severity).unwrap();
            format!("{} {} at {}", severity.as_str().unwrap(), d.code, d.pointer)
        })
        .collect();
    let steps: Vec<&str> = plan.steps.iter().map(|s| s.id.as_str()).collect();
    json!({"diagnostics": found, "steps": steps})
}

#[test]
fn the_validation_table() {
    let text = std::fs::read_to_string(path()).unwrap();
    let mut cases: Vec<Value> = serde_json::from_str(&text).unwrap();
    if std::env::var_os("PLANSMITH_UPDATE_VALIDATE").is_some() {
        for case in &mut cases {
            case["expect"] = outcome(case);
        }
        let mut out = String::from("[\n");
        for (i, case) in cases.iter().enumerate() {
            out.push_str("  ");
            out.push_str(&serde_json::to_string(case).unwrap());
            out.push_str(if i + 1 < cases.len() { ",\n" } else { "\n" });
        }
        out.push_str("]\n");
        std::fs::write(path(), out).unwrap();
        return;
    }
    let mut failures = Vec::new();
    let mut seen = BTreeSet::new();
    for case in &cases {
        let got = outcome(case);
        for line in got["diagnostics"].as_array().unwrap() {
            let code = line.as_str().unwrap().split(' ').nth(1).unwrap().to_owned();
            seen.insert(code);
        }
        if got != case["expect"] {
            failures.push(format!(
                "{}:\n  expected {}\n  got      {got}",
                case["name"], case["expect"]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let missing: Vec<&str> = VALIDATION_CODES
        .iter()
        .map(|c| c.as_str())
        .filter(|c| !seen.contains(*c))
        .collect();
    assert!(
        missing.is_empty(),
        "no case of the table gives: {missing:?}"
    );
}
