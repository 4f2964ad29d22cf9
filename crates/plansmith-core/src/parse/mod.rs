//! Parsing model output into plans: the parse stage of the pipeline (see ARCHITECTURE.md).
//!
//! A language model answers with text, not with a [`Plan`]. [`parse`] turns that text into a
//! plan in two stages, each usable on its own:
//!
//! 1. [`extract_json`] finds the JSON in the text: it drops `<think>…</think>` blocks, prefers
//!    the first markdown code fence that holds an object or array, cuts the first complete JSON
//!    value out of surrounding prose with a string-aware bracket matcher, and repairs what
//!    `serde_json` rejects (trailing commas, single quotes, unquoted keys, comments, Python
//!    literals, output cut at a token limit, invalid escapes, double-encoded JSON).
//! 2. [`to_plan`] recognises which plan shape the JSON is in ([`SourceShape`]: our own document,
//!    flat steps, deer-flow, ValueCell, SAGE, OpenManus, nl2sql) and normalises it: step ids
//!    become `s1, s2, …`, dependencies and `$ref`s are remapped to them, missing step types are
//!    inferred, schedules and questions are brought into our shape.
//!
//! Parsing is lenient and never panics: anything it fixes is reported as a
//! [`Code::AutoFixed`] diagnostic, a step it cannot read becomes a [`Code::InvalidStep`] error
//! and is left out, the other steps are kept. Checking names, arguments and the dependency graph
//! is the job of validation, which runs next.
//!
//! # Example
//!
//! ```
//! use plansmith_core::parse::{parse, ParseDefaults, SourceShape};
//! use plansmith_core::plan::Action;
//!
//! let raw = "<think>The user wants the weather.</think>\nHere is the plan:\n```json\n\
//!     {\"steps\": [{\"id\": \"weather\", \"name\": \"get_weather\", \"arguments\": {\"city\": 'Paris'},},\n\
//!     {\"type\": \"reply\", \"text\": \"Looking it up.\", \"depends_on\": [\"weather\"]}]}\n```";
//! let defaults = ParseDefaults {
//!     plan_id: "p1",
//!     goal: "What's the weather in Paris?",
//!     locale: "en-US",
//!     now: chrono::Utc::now(),
//! };
//! let parsed = parse(raw, &defaults)?;
//! assert_eq!(parsed.shape, SourceShape::Steps);
//! assert!(parsed.repaired); // single quotes and a trailing comma
//! let plan = parsed.plan;
//! assert!(matches!(&plan.steps[0].action, Action::Tool { name, .. } if name == "get_weather"));
//! assert_eq!(plan.steps[1].depends_on, ["s1"]);
//! # Ok::<(), plansmith_core::parse::ParseError>(())
//! ```

mod error;
mod extract;
mod fields;
mod ids;
mod questions;
mod repair;
mod schedule;
mod shape;
mod step;
mod text;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Plan, Step};

pub use error::{MAX_PLAN_STEPS, ParseError};
pub use extract::extract_json;
use extract::{CutStep, extract};
use fields::{as_bool, lookup, scalar_string, str_field};
use ids::IdMap;
use questions::convert_questions;
pub use repair::read_as_written;
pub use shape::SourceShape;
use shape::recognise;
use step::{apply_statuses_and_notes, convert_step, raw_step_id};
use text::derive_title;

/// Defaults for the plan fields the model may leave out.
#[derive(Debug, Clone, Copy)]
pub struct ParseDefaults<'a> {
    /// Id of the plan being created.
    pub plan_id: &'a str,
    /// The user's request; becomes `plan.goal`, and the title when the model gives none.
    pub goal: &'a str,
    /// Locale used when the JSON has no `locale`.
    pub locale: &'a str,
    /// Creation time of the plan.
    pub now: DateTime<Utc>,
}

/// A parsed, not yet validated, plan.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The normalised plan.
    pub plan: Plan,
    /// The shape the JSON was in.
    pub shape: SourceShape,
    /// The JSON extracted from the model output, before normalisation.
    pub json: Value,
    /// True when lenient repair was needed to read the JSON.
    pub repaired: bool,
    /// What was fixed automatically ([`Code::AutoFixed`], info or warning) and step-level
    /// problems ([`Code::InvalidStep`] and [`Code::InvalidSchedule`] errors). Pointers refer to
    /// the normalised plan document (`/steps/N/...`), except for a step that was left out, whose
    /// pointer is its position in the model's list.
    pub diagnostics: Vec<Diagnostic>,
}

/// Parses model output into a plan: [`extract_json`], then [`to_plan`].
///
/// Extraction fixes (repair, truncation, double encoding) come first in
/// [`Parsed::diagnostics`].
pub fn parse(raw: &str, defaults: &ParseDefaults<'_>) -> Result<Parsed, ParseError> {
    parse_impl(raw, defaults, true)
}

/// [`parse`] for the pipeline, which never reads [`Parsed::json`]: it is left `Null`, which
/// saves a copy of the whole extracted document per attempt.
pub(crate) fn parse_for_pipeline(
    raw: &str,
    defaults: &ParseDefaults<'_>,
) -> Result<Parsed, ParseError> {
    parse_impl(raw, defaults, false)
}

/// [`parse_for_pipeline`] for an answer in the tool-call format ([`crate::calls`]): its calls
/// (or its text, as a reply) read as a plan; an answer that is neither goes the usual way.
pub(crate) fn parse_calls_for_pipeline(
    raw: &str,
    defaults: &ParseDefaults<'_>,
) -> Result<Parsed, ParseError> {
    let Some(document) = crate::calls::to_plan_json(raw) else {
        return parse_impl(raw, defaults, false);
    };
    let (plan, shape, diagnostics) = to_plan_impl(document, defaults, CutStep::Outside)?;
    Ok(Parsed {
        plan,
        shape,
        json: Value::Null,
        repaired: false,
        diagnostics,
    })
}

fn parse_impl(
    raw: &str,
    defaults: &ParseDefaults<'_>,
    keep_json: bool,
) -> Result<Parsed, ParseError> {
    let extracted = extract(raw)?;
    let mut diagnostics = extracted.diagnostics();
    let (value, json) = if keep_json {
        (extracted.value.clone(), extracted.value)
    } else {
        (extracted.value, Value::Null)
    };
    let (plan, shape, more) = to_plan_impl(value, defaults, extracted.cut_step)?;
    diagnostics.extend(more);
    Ok(Parsed {
        plan,
        shape,
        json,
        repaired: extracted.repaired,
        diagnostics,
    })
}

/// Recognises the plan shape of `json` and normalises it into a [`Plan`] (see the module docs).
///
/// The plan gets `defaults.plan_id`, version 1, `defaults.now` and `defaults.goal`; the locale
/// and title come from the JSON when it has them. The plan is `ready` unless ValueCell said
/// `adequate: false`, the JSON said `ready: false`, or it has clarifying questions. The source
/// shape is recorded in `metadata.source_shape`.
pub fn to_plan(
    json: Value,
    defaults: &ParseDefaults<'_>,
) -> Result<(Plan, SourceShape, Vec<Diagnostic>), ParseError> {
    to_plan_impl(json, defaults, CutStep::Outside)
}

/// [`to_plan`], told how the output's cut-off affected the last step item: a
/// [`CutStep::Broken`] step is left out, a [`CutStep::Prose`] one is kept with a warning.
fn to_plan_impl(
    json: Value,
    defaults: &ParseDefaults<'_>,
    cut_step: CutStep,
) -> Result<(Plan, SourceShape, Vec<Diagnostic>), ParseError> {
    let mut diags = Vec::new();
    let mut doc = recognise(json, 0, &mut diags)?;
    if doc.items.len() > MAX_PLAN_STEPS {
        return Err(ParseError::TooManySteps(doc.items.len()));
    }
    let cut_item = match cut_step {
        CutStep::Broken => doc.items.pop(),
        CutStep::Prose | CutStep::Outside => None,
    };
    if let Some(item) = &cut_item {
        let idx = doc.items.len();
        diags.push(
            Diagnostic::error(
                Code::InvalidStep,
                format!("/steps/{idx}"),
                format!(
                    "step {} was cut off where the output ended (token limit?) and was left out",
                    idx + 1
                ),
            )
            .with_value(item.clone()),
        );
    }
    let shape = doc.shape;
    let fields = &doc.fields;

    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for (input_idx, item) in doc.items.iter().enumerate() {
        match convert_step(item, input_idx, drafts.len(), shape, &mut diags) {
            Some(draft) => drafts.push(draft),
            None => dropped.push((input_idx, raw_step_id(item))),
        }
    }
    if let Some(item) = &cut_item {
        dropped.push((doc.items.len(), raw_step_id(item)));
    }
    let last_kept = drafts
        .last()
        .is_some_and(|d| d.input_idx + 1 == doc.items.len());
    if cut_step == CutStep::Prose && last_kept {
        let out_idx = drafts.len().saturating_sub(1);
        diags.push(
            Diagnostic::warning(
                Code::AutoFixed,
                format!("/steps/{out_idx}"),
                "the output was cut off inside this step's text, which ends where the output did",
            )
            .with_step(format!("s{}", out_idx + 1)),
        );
    }
    if shape == SourceShape::OpenManus {
        apply_statuses_and_notes(fields, &mut drafts, &mut diags);
    }
    let ids = IdMap::new(&drafts, &dropped, &mut diags);
    let mut steps: Vec<Step> = drafts
        .into_iter()
        .enumerate()
        .map(|(out_idx, draft)| ids.finish(draft, out_idx, &mut diags))
        .collect();
    // OpenManus and nl2sql plans are sequences: each step runs after the one before it.
    let sequential = matches!(shape, SourceShape::OpenManus | SourceShape::Nl2Sql);
    if sequential && steps.iter().all(|step| step.depends_on.is_empty()) {
        let ids: Vec<String> = steps.iter().map(|step| step.id.clone()).collect();
        for (step, previous) in steps.iter_mut().skip(1).zip(ids) {
            step.depends_on.push(previous);
        }
    }

    let mut plan = Plan::new(defaults.plan_id, defaults.goal);
    plan.created_at = defaults.now;
    plan.title = match str_field(fields, &["title", "plan_title"]) {
        Some((_, title)) => title.to_owned(),
        None => derive_title(defaults.goal),
    };
    plan.locale = str_field(fields, &["locale"])
        .map_or(defaults.locale, |(_, locale)| locale)
        .to_owned();
    let thought_keys: &[&str] = if shape == SourceShape::ValueCell {
        &["thought", "reason"]
    } else {
        &["thought", "thought_process", "reasoning"]
    };
    plan.thought = str_field(fields, thought_keys)
        .map(|(_, t)| t.to_owned())
        .unwrap_or_default();
    plan.has_enough_context = lookup(fields, "has_enough_context").and_then(as_bool);
    plan.questions = convert_questions(lookup(fields, "questions"), &ids, &mut diags);
    plan.guidance = str_field(fields, &["guidance"]).map(|(_, g)| g.to_owned());
    let adequate = lookup(fields, "adequate").and_then(as_bool).unwrap_or(true);
    if !adequate {
        plan.guidance = str_field(fields, &["guidance_message", "guidance", "reason"])
            .map(|(_, g)| g.to_owned());
    }
    let stated_ready = lookup(fields, "ready").and_then(as_bool).unwrap_or(true);
    plan.ready = stated_ready && adequate && plan.questions.is_empty();
    if let Some(Value::Object(metadata)) = lookup(fields, "metadata") {
        plan.metadata = metadata.clone();
    }
    plan.metadata
        .insert("source_shape".to_owned(), Value::from(shape.as_str()));
    if let Some(source_id) = lookup(fields, "plan_id").and_then(scalar_string) {
        plan.metadata
            .entry("source_plan_id")
            .or_insert(Value::from(source_id));
    }
    plan.steps = steps;
    Ok((plan, shape, diags))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> ParseDefaults<'static> {
        ParseDefaults {
            plan_id: "p",
            goal: "goal",
            locale: "en-US",
            now: Utc::now(),
        }
    }

    #[test]
    fn step_references_resolve_by_id_then_position() {
        let value = serde_json::json!({"steps": [
            {"id": "2", "type": "reply", "text": "a"},
            {"id": "x", "type": "reply", "text": "b", "depends_on": ["2", 1, "#1", "step 2", "S1", "zz"]}
        ]});
        let (plan, _, diags) = to_plan(value, &defaults()).unwrap();
        assert!(diags.is_empty(), "{diags:?}");
        // "2" is the first step's own id; 1 and #1 are positions; "step 2" is the second step.
        assert_eq!(plan.steps[1].depends_on, ["s1", "s2", "zz"]);
    }

    #[test]
    fn parse_errors_map_to_codes() {
        assert_eq!(
            parse("nothing", &defaults()).unwrap_err().code(),
            Code::ParseError
        );
        assert_eq!(
            parse("{\"x\": 1}", &defaults()).unwrap_err().code(),
            Code::UnknownShape
        );
        assert_eq!(SourceShape::Nl2Sql.as_str(), "nl2sql");
        assert_eq!(
            serde_json::to_value(SourceShape::DeerFlow).unwrap(),
            "deer_flow"
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_json_like_noise(text in r#"[{}\[\]"'\\:,a-z0-9 \n`<>/éü巴🚀-]{0,120}"#) {
            let _ = parse(&text, &defaults());
        }

        #[test]
        fn never_panics_on_cut_plans(cut in 0usize..400) {
            let text = "<think>x</think>```json\n{\"title\": \"巴黎 🚀\", \"steps\": [{\"id\": \"a\", \
                \"type\": \"tool\", \"name\": \"t\", \"arguments\": {\"q\": \"\\u00e9\\d\"}}, \
                {\"type\": \"reply\", \"text\": \"ok\", \"depends_on\": [\"a\"]}]}\n```";
            let end = text.char_indices().map(|(i, _)| i).nth(cut).unwrap_or(text.len());
            let _ = parse(&text[..end], &defaults());
        }
    }
}
