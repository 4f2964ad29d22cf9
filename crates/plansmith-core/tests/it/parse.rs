//! Parse stage: model output → plan. One data-driven table, `tests/data/parse/cases.txt`.
//!
//! The table is plain text so that model output can be written verbatim (no JSON escaping of
//! backslashes, quotes or fences). Each case is
//!
//! ```text
//! === name
//! <raw model output, any number of lines>
//! --- expect
//! {"shape": "deer_flow", "n_steps": 2, ...}
//! ```
//!
//! Expectation keys (all optional):
//!
//! * `ok` (default true); `error_kind` (`no_json`, `unrepairable`, `unknown_shape`); `error`, a
//!   substring of the error message.
//! * `shape`, `repaired`, `ready`, `n_steps`, `types` (action types in order), `ids`.
//! * `plan`: `{"<JSON pointer into the serialised plan>": <expected value>}`.
//! * `json`: the same, into the extracted JSON.
//! * `absent`: pointers that must not exist in the plan.
//! * `diags`: each `{code, severity?, pointer?, step?, message?}` must match some diagnostic
//!   (`message` is a substring); `n_diags`: the exact number of diagnostics;
//!   `no_errors`: no error-level diagnostic.

use std::fmt::Write as _;

use chrono::{TimeZone, Utc};
use plansmith_core::parse::{ParseDefaults, ParseError, extract_json, parse};
use serde_json::{Map, Value};

const CASES: &str = include_str!("../data/parse/cases.txt");

struct Case {
    name: String,
    input: String,
    expect: Map<String, Value>,
}

fn load_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for chunk in CASES.split("\n=== ").skip(1) {
        let (name, rest) = chunk.split_once('\n').unwrap_or((chunk, ""));
        let (input, expect) = match rest.strip_prefix("--- expect\n") {
            Some(expect) => ("", expect),
            None => rest
                .split_once("\n--- expect\n")
                .unwrap_or_else(|| panic!("case `{name}` has no `--- expect` line")),
        };
        let expect: Value = serde_json::from_str(expect.trim())
            .unwrap_or_else(|err| panic!("case `{name}`: bad expectation JSON: {err}"));
        let Value::Object(expect) = expect else {
            panic!("case `{name}`: expectation not an object")
        };
        cases.push(Case {
            name: name.trim().to_owned(),
            input: input.to_owned(),
            expect,
        });
    }
    cases
}

fn defaults() -> ParseDefaults<'static> {
    ParseDefaults {
        plan_id: "p1",
        goal: "Plan a weekend trip to Paris and check the weather there before booking anything",
        locale: "en-US",
        now: Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap(),
    }
}

fn error_kind(err: &ParseError) -> &'static str {
    match err {
        ParseError::NoJson => "no_json",
        ParseError::Unrepairable(_) => "unrepairable",
        ParseError::UnknownShape(_) => "unknown_shape",
        _ => "other",
    }
}

/// Checks one case; returns every mismatch.
fn check(case: &Case) -> Vec<String> {
    let mut problems = Vec::new();
    let expect = &case.expect;
    let want_ok = expect.get("ok").and_then(Value::as_bool).unwrap_or(true);
    let result = parse(&case.input, &defaults());
    let parsed = match (result, want_ok) {
        (Ok(parsed), true) => parsed,
        (Ok(parsed), false) => {
            problems.push(format!(
                "expected an error, got a plan: {}",
                parsed.plan.render_text()
            ));
            return problems;
        }
        (Err(err), true) => {
            problems.push(format!("expected a plan, got error: {err}"));
            return problems;
        }
        (Err(err), false) => {
            if let Some(kind) = expect.get("error_kind").and_then(Value::as_str)
                && error_kind(&err) != kind
            {
                problems.push(format!(
                    "error kind {} (`{err}`), expected {kind}",
                    error_kind(&err)
                ));
            }
            if let Some(text) = expect.get("error").and_then(Value::as_str)
                && !err.to_string().contains(text)
            {
                problems.push(format!("error `{err}` does not contain `{text}`"));
            }
            return problems;
        }
    };

    // extract_json agrees with parse.
    match extract_json(&case.input) {
        Ok((json, repaired)) => {
            if json != parsed.json || repaired != parsed.repaired {
                problems.push("extract_json disagrees with parse".to_owned());
            }
        }
        Err(err) => problems.push(format!("extract_json failed where parse worked: {err}")),
    }

    let plan = serde_json::to_value(&parsed.plan).unwrap();
    fn eq(problems: &mut Vec<String>, what: &str, got: Value, want: &Value) {
        if &got != want {
            problems.push(format!("{what}: got {got}, expected {want}"));
        }
    }
    if let Some(want) = expect.get("shape") {
        eq(
            &mut problems,
            "shape",
            serde_json::to_value(parsed.shape).unwrap(),
            want,
        );
    }
    if let Some(want) = expect.get("repaired") {
        eq(
            &mut problems,
            "repaired",
            Value::Bool(parsed.repaired),
            want,
        );
    }
    if let Some(want) = expect.get("ready") {
        eq(&mut problems, "ready", Value::Bool(parsed.plan.ready), want);
    }
    if let Some(want) = expect.get("n_steps") {
        eq(
            &mut problems,
            "n_steps",
            Value::from(parsed.plan.steps.len()),
            want,
        );
    }
    if let Some(want) = expect.get("types") {
        let types: Vec<Value> = parsed
            .plan
            .steps
            .iter()
            .map(|s| Value::from(s.action.type_name()))
            .collect();
        eq(&mut problems, "types", Value::Array(types), want);
    }
    if let Some(want) = expect.get("ids") {
        let ids: Vec<Value> = parsed
            .plan
            .steps
            .iter()
            .map(|s| Value::from(s.id.as_str()))
            .collect();
        eq(&mut problems, "ids", Value::Array(ids), want);
    }
    for (key, doc) in [("plan", &plan), ("json", &parsed.json)] {
        if let Some(Value::Object(pointers)) = expect.get(key) {
            for (pointer, want) in pointers {
                match doc.pointer(pointer) {
                    Some(got) => eq(
                        &mut problems,
                        &format!("{key} {pointer}"),
                        got.clone(),
                        want,
                    ),
                    None => problems.push(format!("{key} {pointer}: missing, expected {want}")),
                }
            }
        }
    }
    if let Some(Value::Array(pointers)) = expect.get("absent") {
        for pointer in pointers.iter().filter_map(Value::as_str) {
            if let Some(got) = plan.pointer(pointer) {
                problems.push(format!("plan {pointer}: expected absent, got {got}"));
            }
        }
    }

    let diags: Vec<Value> = parsed
        .diagnostics
        .iter()
        .map(|d| serde_json::to_value(d).unwrap())
        .collect();
    let listing = || {
        parsed.diagnostics.iter().fold(String::new(), |mut out, d| {
            let _ = write!(out, "\n      {d}");
            out
        })
    };
    if let Some(Value::Array(wanted)) = expect.get("diags") {
        for want in wanted.iter().filter_map(Value::as_object) {
            let matches = |got: &Value| {
                want.iter()
                    .all(|(key, value)| match (key.as_str(), got.get(key)) {
                        ("message", Some(Value::String(msg))) => {
                            value.as_str().is_some_and(|sub| msg.contains(sub))
                        }
                        (_, Some(got)) => got == value,
                        (_, None) => false,
                    })
            };
            if !diags.iter().any(matches) {
                problems.push(format!(
                    "no diagnostic matches {}; got:{}",
                    Value::Object(want.clone()),
                    listing()
                ));
            }
        }
    }
    if let Some(want) = expect.get("n_diags").and_then(Value::as_u64)
        && parsed.diagnostics.len() as u64 != want
    {
        problems.push(format!(
            "{} diagnostics, expected {want}:{}",
            parsed.diagnostics.len(),
            listing()
        ));
    }
    if expect.get("no_errors").and_then(Value::as_bool) == Some(true)
        && parsed.diagnostics.iter().any(|d| d.is_error())
    {
        problems.push(format!("unexpected error diagnostics:{}", listing()));
    }
    problems
}

#[test]
fn parse_cases() {
    let cases = load_cases();
    assert!(cases.len() >= 35, "only {} cases loaded", cases.len());
    let mut names = std::collections::HashSet::new();
    let mut report = String::new();
    let mut failed = 0;
    for case in &cases {
        assert!(
            names.insert(case.name.as_str()),
            "duplicate case name `{}`",
            case.name
        );
        let problems = check(case);
        if !problems.is_empty() {
            failed += 1;
            let _ = writeln!(report, "\n--- {}", case.name);
            for problem in problems {
                let _ = writeln!(report, "    {problem}");
            }
        }
    }
    assert!(
        failed == 0,
        "{failed} of {} parse cases failed:{report}",
        cases.len()
    );
}

/// Every prefix of every case parses or fails cleanly: no panic on output cut anywhere.
#[test]
fn every_prefix_of_every_case_is_handled() {
    for case in load_cases() {
        let input = case.input.as_str();
        for (idx, _) in input.char_indices().step_by(3) {
            let _ = parse(&input[..idx], &defaults());
        }
    }
}
