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

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{
    Action, PLAIN_STEP, Plan, Question, Schedule, Step, StepRef, StepStatus, TaskKind,
    escape_pointer,
};

/// Where the JSON came from: which plan shape [`to_plan`] recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SourceShape {
    /// Our own plan document: steps with a nested `action` object.
    Plansmith,
    /// Flat steps, `{title?, thought?, questions?, steps: [...]}` (what our prompts ask for), a
    /// `{plan: ...}` wrapper around it, or a bare array of steps.
    Steps,
    /// A deer-flow research plan: `{locale, has_enough_context, thought, title, steps}` with
    /// `need_web_search` / `step_type` steps.
    DeerFlow,
    /// A ValueCell `PlannerResponse`: `{adequate, reason, guidance_message?, tasks}`.
    ValueCell,
    /// A SAGE plan: a bare array of `{name, description?, args}` tool calls.
    Sage,
    /// An OpenManus `PlanningTool` plan: `{plan_id?, title, steps: [strings], step_statuses?}`.
    OpenManus,
    /// A Spring AI Alibaba nl2sql plan: `{thought_process?, execution_plan: [...]}`.
    #[serde(rename = "nl2sql")]
    Nl2Sql,
}

impl SourceShape {
    /// The snake_case name used in JSON (`deer_flow`, `value_cell`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SourceShape::Plansmith => "plansmith",
            SourceShape::Steps => "steps",
            SourceShape::DeerFlow => "deer_flow",
            SourceShape::ValueCell => "value_cell",
            SourceShape::Sage => "sage",
            SourceShape::OpenManus => "open_manus",
            SourceShape::Nl2Sql => "nl2sql",
        }
    }
}

/// Why model output could not be parsed into a plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// No JSON value was found at all.
    #[error("no JSON found in the model output")]
    NoJson,
    /// JSON was found but could not be repaired; the message says where it broke.
    #[error("the model output holds JSON that could not be repaired: {0}")]
    Unrepairable(String),
    /// Valid JSON in no known plan shape; the message describes what was found.
    #[error("the JSON is in no known plan shape: {0}")]
    UnknownShape(String),
    /// The document lists more steps than any plan may hold ([`MAX_PLAN_STEPS`]); it is
    /// refused before its steps are read.
    #[error("the plan lists {0} steps; a plan may hold at most {MAX_PLAN_STEPS}")]
    TooManySteps(usize),
}

/// The most steps a plan document may list, whoever wrote it (a model, an edit, a client of
/// the API or MCP): far above any real plan, and low enough that reading, validating and
/// storing a hostile one stays cheap.
pub const MAX_PLAN_STEPS: usize = 500;

impl ParseError {
    /// The diagnostic code for this error ([`Code::ParseError`] or [`Code::UnknownShape`]).
    pub fn code(&self) -> Code {
        match self {
            ParseError::NoJson | ParseError::Unrepairable(_) => Code::ParseError,
            ParseError::UnknownShape(_) => Code::UnknownShape,
            ParseError::TooManySteps(_) => Code::MaxStepsExceeded,
        }
    }
}

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

// ---------------------------------------------------------------------------------------------
// Extraction
// ---------------------------------------------------------------------------------------------

/// Finds the JSON value in model output; the flag is true when repair was needed.
///
/// In order:
///
/// * `<think>…</think>` and `<thinking>…</thinking>` blocks are dropped (any case, several of
///   them). Text before a closing tag that has no opening tag is reasoning too and is dropped; an
///   opening tag that is never closed is dropped alone, so JSON after it is still found.
/// * A text that is one JSON value from its first byte to its last, read as written (raw line
///   breaks inside strings allowed), and looks like a plan is taken whole: a line inside one of
///   its strings that starts with ```` ``` ```` is not a fence.
/// * Markdown code fences (any or no language tag, a missing closing fence): the first fence that
///   holds a JSON object or array wins.
/// * Otherwise the whole text is scanned: at each `{` or `[`, a string- and escape-aware bracket
///   matcher cuts out a candidate (up to the end of the text if it never closes, i.e. the output
///   was cut at a token limit). The first candidate that parses and looks like a plan (an object
///   with a plan key, or an array of objects) wins; a candidate that does not parse even after
///   repair is skipped and the next `{`/`[` is tried.
/// * A text that is one JSON string holding JSON (a double-encoded plan) is decoded once more.
///
/// A candidate is read with `serde_json` first. If that fails, an escape pre-pass runs (see
/// below), then [`jsonrepair_rs::jsonrepair`], which handles trailing commas, single quotes,
/// unquoted keys, comments, Python `True`/`False`/`None`, missing commas and truncated
/// arrays/objects/strings.
///
/// The pre-pass exists because jsonrepair-rs 0.2.6 mishandles three kinds of escape inside
/// double-quoted strings, all seen in model output (LaTeX, regexes, Windows paths):
///
/// * `\u` not followed by four hex digits (`\upcite{x}`, `\users`): jsonrepair fails with
///   "Invalid unicode character". The pre-pass writes `\\u`, keeping the text.
/// * any other invalid escape (`\d`, `\s`, `\e`): jsonrepair drops the backslash (`\d+` becomes
///   `d+`). The pre-pass writes `\\d`, keeping the backslash.
/// * a lone UTF-16 surrogate (`\uD800` without its pair): serde_json and jsonrepair both reject
///   it. The pre-pass writes `\uFFFD`.
///
/// `\'` becomes `'`. Single-quoted strings are left to jsonrepair (which drops the backslash of
/// an invalid escape there). A raw control character inside a string (a line break in a
/// multi-line value) is escaped too, and that alone does not count as a repair: the text has
/// one reading.
pub fn extract_json(raw: &str) -> Result<(Value, bool), ParseError> {
    let extracted = extract(raw)?;
    Ok((extracted.value, extracted.repaired))
}

/// Most candidates tried per region of text: bounds the work on pathological input.
const MAX_CANDIDATES: usize = 64;

/// The extracted JSON and how it was obtained.
#[derive(Debug)]
struct Extracted {
    value: Value,
    /// Anything beyond `serde_json` on the extracted slice was needed.
    repaired: bool,
    /// The candidate never closed: the output was cut off and closed by repair.
    truncated: bool,
    /// Whether the output was cut off inside the last step (see [`CutStep`]).
    cut_step: CutStep,
    /// The JSON was a string holding JSON.
    double_encoded: bool,
}

impl Extracted {
    fn diagnostics(&self) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        if self.double_encoded {
            out.push(Diagnostic::info(
                Code::AutoFixed,
                "",
                "the plan was a JSON string holding JSON; it was decoded once more",
            ));
        }
        if self.truncated {
            out.push(Diagnostic::warning(
                Code::AutoFixed,
                "",
                "the JSON was cut off (unclosed brackets, the output may have hit its token \
                 limit) and was closed automatically",
            ));
        } else if self.repaired && !self.double_encoded {
            out.push(Diagnostic::info(
                Code::AutoFixed,
                "",
                "the JSON was malformed and was repaired leniently",
            ));
        }
        out
    }
}

/// How plausible a parsed candidate is as a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tier {
    /// An array of scalars (`[1]`, a markdown `[link]` after repair).
    Scalar,
    /// Some object, or an empty array.
    Object,
    /// An object with a plan key, or an array of objects: taken at once.
    Plan,
}

/// Keys that make an object look like a plan in one of the known shapes.
const PLAN_KEYS: &[&str] = &[
    "steps",
    "plan",
    "tasks",
    "execution_plan",
    "has_enough_context",
    "adequate",
];

fn tier(value: &Value) -> Tier {
    match value {
        Value::Object(map) if PLAN_KEYS.iter().any(|key| lookup(map, key).is_some()) => Tier::Plan,
        Value::Object(_) => Tier::Object,
        Value::Array(items) if items.is_empty() => Tier::Object,
        Value::Array(items) if items.iter().all(Value::is_object) => Tier::Plan,
        _ => Tier::Scalar,
    }
}

fn extract(raw: &str) -> Result<Extracted, ParseError> {
    let text = strip_think(raw);
    if let Some(whole) = whole_plan(&text) {
        return Ok(whole);
    }
    let mut best: Option<(Tier, Extracted)> = None;
    let mut first_error: Option<String> = None;
    let mut consider = |found: RegionResult, best: &mut Option<(Tier, Extracted)>| -> bool {
        match found {
            RegionResult::Found(tier, extracted) => {
                if tier == Tier::Plan {
                    *best = Some((tier, extracted));
                    return true;
                }
                if best.as_ref().is_none_or(|(old, _)| tier > *old) {
                    *best = Some((tier, extracted));
                }
            }
            RegionResult::Failed(message) => {
                first_error.get_or_insert(message);
            }
            RegionResult::Nothing => {}
        }
        false
    };
    for block in fenced_blocks(&text) {
        if consider(extract_region(block, 0), &mut best) {
            break;
        }
    }
    if best.as_ref().is_none_or(|(tier, _)| *tier != Tier::Plan) {
        consider(extract_region(&text, 0), &mut best);
    }
    match (best, first_error) {
        (Some((_, extracted)), _) => Ok(extracted),
        (None, Some(message)) => Err(ParseError::Unrepairable(message)),
        (None, None) => Err(ParseError::NoJson),
    }
}

/// The text as one JSON value that looks like a plan, read as written from its first byte to its
/// last (raw control characters inside strings allowed, see [`read_as_written`]); `None`
/// otherwise, and the fences and candidates are searched.
///
/// Checked before the fences because a line inside a string that starts with ```` ``` ```` is
/// not a fence: strict JSON escapes a line break in a string, but constrained decoding may let a
/// model write it raw (llama-cpp-python's grammar does), and a model that echoes markdown into a
/// string then leaves fences there, around text that can hold a bracketed array of objects.
fn whole_plan(text: &str) -> Option<Extracted> {
    let trimmed = text.trim();
    // A fenced reply, prose around the JSON or output cut off cannot be one value: no reading
    // (and no escape pre-pass) is spent on them here.
    if !(trimmed.starts_with('{') && trimmed.ends_with('}')
        || trimmed.starts_with('[') && trimmed.ends_with(']'))
    {
        return None;
    }
    let value = read_as_written(trimmed)?;
    (tier(&value) == Tier::Plan).then_some(Extracted {
        value,
        repaired: false,
        truncated: false,
        cut_step: CutStep::Outside,
        double_encoded: false,
    })
}

/// What one region of text yielded.
enum RegionResult {
    /// A value; the best one of the region.
    Found(Tier, Extracted),
    /// Something that looked like JSON but could not be read.
    Failed(String),
    /// No JSON at all.
    Nothing,
}

/// Scans one region (the whole text, or a code fence) for its best JSON candidate.
fn extract_region(text: &str, depth: u8) -> RegionResult {
    let trimmed = text.trim_start();
    if trimmed.starts_with('"')
        && depth < 2
        && let Some(result) = double_encoded(trimmed, depth)
    {
        return result;
    }
    // The usual case: the region is one JSON value and nothing else (a strict structured-output
    // reply, a fenced block). Its first candidate would be all of it, read as written.
    if trimmed.starts_with(['{', '['])
        && let Ok(value) = serde_json::from_str::<Value>(trimmed)
    {
        let tier = tier(&value);
        return RegionResult::Found(
            tier,
            Extracted {
                value,
                repaired: false,
                truncated: false,
                cut_step: CutStep::Outside,
                double_encoded: false,
            },
        );
    }
    let mut best: Option<(Tier, Extracted)> = None;
    let mut first_error: Option<String> = None;
    let mut pos = 0;
    let mut tried = 0;
    while tried < MAX_CANDIDATES {
        let Some(start) = find_open(text, pos) else {
            break;
        };
        tried += 1;
        let cut = match_brackets(text, start);
        let slice = text.get(start..cut.end).unwrap_or("");
        match parse_candidate(slice) {
            Ok((value, repaired)) => {
                let tier = tier(&value);
                // Repair turns any bracketed prose into an array of strings; only keep those
                // arrays when they were valid JSON to begin with.
                let acceptable = tier > Tier::Scalar || !repaired;
                if acceptable && best.as_ref().is_none_or(|(old, _)| tier > *old) {
                    let extracted = Extracted {
                        value,
                        repaired,
                        truncated: !cut.complete,
                        cut_step: if cut.complete {
                            CutStep::Outside
                        } else {
                            cut.step
                        },
                        double_encoded: false,
                    };
                    if tier == Tier::Plan {
                        return RegionResult::Found(tier, extracted);
                    }
                    best = Some((tier, extracted));
                }
                // A value was read: its nested brackets are not candidates of their own.
                pos = if acceptable { cut.end } else { start + 1 };
            }
            Err(message) => {
                if looks_like_json(text, start) {
                    first_error
                        .get_or_insert_with(|| format!("{message} (in `{}`)", snippet(slice, 80)));
                }
                pos = start + 1;
            }
        }
    }
    match (best, first_error) {
        (Some((tier, extracted)), _) => RegionResult::Found(tier, extracted),
        (None, Some(message)) => RegionResult::Failed(message),
        (None, None) => RegionResult::Nothing,
    }
}

/// A region that starts with a JSON string: if the string holds JSON, decode it once more.
fn double_encoded(trimmed: &str, depth: u8) -> Option<RegionResult> {
    let end = string_end(trimmed)?;
    let inner: String = serde_json::from_str(trimmed.get(..end)?).ok()?;
    let inner_trimmed = inner.trim_start();
    if !(inner_trimmed.starts_with('{') || inner_trimmed.starts_with('[')) {
        return None;
    }
    match extract_region(&inner, depth + 1) {
        RegionResult::Found(tier, mut extracted) => {
            extracted.repaired = true;
            extracted.double_encoded = true;
            Some(RegionResult::Found(tier, extracted))
        }
        _ => None,
    }
}

/// End (exclusive) of the JSON string that starts `text`, which begins with `"`.
fn string_end(text: &str) -> Option<usize> {
    let mut escaped = false;
    for (idx, byte) in text.bytes().enumerate().skip(1) {
        if escaped {
            escaped = false;
        } else if byte == b'\\' {
            escaped = true;
        } else if byte == b'"' {
            return Some(idx + 1);
        }
    }
    None
}

/// Next `{` or `[` at or after `from`.
fn find_open(text: &str, from: usize) -> Option<usize> {
    let rest = text.as_bytes().get(from..)?;
    rest.iter()
        .position(|&b| b == b'{' || b == b'[')
        .map(|offset| from + offset)
}

/// True when the bracket at `start` is followed by something JSON can start with, so that a
/// failure to read it is worth reporting (as opposed to `{name}` or `[sic]` in prose).
fn looks_like_json(text: &str, start: usize) -> bool {
    let next = text
        .get(start + 1..)
        .and_then(|rest| rest.chars().find(|c| !c.is_whitespace()));
    matches!(
        next,
        Some('"' | '\'' | '{' | '[' | '}' | ']' | '-' | '0'..='9')
    )
}

/// Keys whose array holds the steps, in the shapes [`to_plan`] knows.
const STEP_LIST_KEYS: &[&str] = &["steps", "tasks", "execution_plan", "plan"];

/// Step fields holding prose: a step cut off inside one of them is still usable.
const PROSE_KEYS: &[&str] = &["title", "description", "desc", "details", "notes", "note"];

/// Where a candidate ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cut {
    /// End of the candidate (exclusive).
    end: usize,
    /// The value closed; otherwise it runs to the end of the text.
    complete: bool,
    /// For a value that did not close: whether the text ends inside an element of the step list
    /// (the root array, or the array under a `steps`-like key).
    step: CutStep,
}

/// How the last step fared when the output was cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CutStep {
    /// The cut is not inside a step (between steps, or after the list).
    Outside,
    /// The cut is inside a prose field of the step (`description`, `title`, `notes`) or inside
    /// a step that is a plain string: the step is kept, its text ends where the output did.
    Prose,
    /// The cut is anywhere else in the step (its action, a key, an argument value): repair
    /// would close it with half a name or a wrong value, so the step is left out.
    Broken,
}

/// Cuts the JSON value starting at `start` (a `{` or `[`). Brackets inside strings are ignored;
/// a mismatched closer closes the innermost matching opener (what repair would do); an unclosed
/// value runs to the end of the text.
fn match_brackets(text: &str, start: usize) -> Cut {
    let bytes = text.as_bytes();
    // Open containers, each with the key it is the value of (for arrays: is it a step list?).
    let mut stack: Vec<(u8, bool)> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut string_start = 0;
    let mut last_string: Option<(usize, usize)> = None;
    let mut pending_key: Option<(usize, usize)> = None;
    for (idx, &byte) in bytes.iter().enumerate().skip(start) {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
                last_string = Some((string_start + 1, idx));
            }
            continue;
        }
        match byte {
            b'"' => {
                in_string = true;
                string_start = idx;
            }
            b':' => pending_key = last_string.take(),
            b',' => pending_key = None,
            b'{' | b'[' => {
                let key = pending_key.take().and_then(|(from, to)| text.get(from..to));
                let step_list = byte == b'['
                    && (stack.is_empty() || key.is_some_and(|key| STEP_LIST_KEYS.contains(&key)));
                stack.push((byte, step_list));
            }
            b'}' | b']' => {
                let opener = if byte == b'}' { b'{' } else { b'[' };
                if let Some(at) = stack.iter().rposition(|&(open, _)| open == opener) {
                    stack.truncate(at);
                    if stack.is_empty() {
                        return Cut {
                            end: idx + 1,
                            complete: true,
                            step: CutStep::Outside,
                        };
                    }
                }
            }
            _ => {}
        }
    }
    // `pending_key` is still set while the value after a `:` is being written.
    let prose_value = in_string
        && pending_key
            .and_then(|(from, to)| text.get(from..to))
            .is_some_and(|key| PROSE_KEYS.contains(&key));
    let step = match stack.iter().position(|&(_, step_list)| step_list) {
        Some(list) if stack.len() == list + 1 && in_string => CutStep::Prose,
        Some(list) if stack.len() == list + 2 && prose_value => CutStep::Prose,
        Some(list) if stack.len() > list + 1 => CutStep::Broken,
        _ => CutStep::Outside,
    };
    Cut {
        end: bytes.len(),
        complete: false,
        step,
    }
}

/// `text` as one JSON value, read as written: strict JSON, except that raw control characters
/// inside strings stand for themselves (see [`extract_json`]); `None` when anything else would
/// have to be guessed. For checking what a server's constrained decoding produced.
pub fn read_as_written(text: &str) -> Option<Value> {
    match read_escaped(text) {
        Ok((value, false)) => Some(value),
        _ => None,
    }
}

/// Reads one candidate: [`read_escaped`], then jsonrepair on what the pre-pass left.
fn parse_candidate(slice: &str) -> Result<(Value, bool), String> {
    let text = match read_escaped(slice) {
        Ok(read) => return Ok(read),
        Err(text) => text,
    };
    let repaired = jsonrepair_rs::jsonrepair(&text).map_err(|err| err.to_string())?;
    serde_json::from_str::<Value>(&repaired)
        .map(|value| (value, true))
        .map_err(|err| format!("repair produced invalid JSON: {err}"))
}

/// `serde_json`, then the escape pre-pass and `serde_json` again: the value and whether it was
/// repaired, or the text (escaped where the pre-pass could) for jsonrepair.
fn read_escaped(slice: &str) -> Result<(Value, bool), Cow<'_, str>> {
    if let Ok(value) = serde_json::from_str::<Value>(slice) {
        return Ok((value, false));
    }
    match escape_invalid_escapes(slice) {
        Some((text, repaired)) => match serde_json::from_str::<Value>(&text) {
            Ok(value) => Ok((value, repaired)),
            Err(_) => Err(Cow::Owned(text)),
        },
        None => Err(Cow::Borrowed(slice)),
    }
}

/// The escape pre-pass (see [`extract_json`] for why it exists): inside double-quoted strings,
/// an invalid escape `\x` becomes `\\x`, `\'` becomes `'`, a lone surrogate escape becomes
/// `\uFFFD`, and a raw control character (a line break in a multi-line value) is escaped.
/// Returns `None` when nothing changed, else the text and whether it was repaired: escaping a
/// raw control character is not a repair, since the text has one reading (Python's
/// `json.loads(strict=False)` reads it the same way), while the others guess.
fn escape_invalid_escapes(text: &str) -> Option<(String, bool)> {
    let mut out = String::with_capacity(text.len() + 8);
    let mut changed = false;
    let mut controls = false;
    let mut in_string = false;
    let mut chars = text.char_indices().peekable();
    while let Some((idx, c)) = chars.next() {
        if !in_string {
            in_string = c == '"';
            out.push(c);
            continue;
        }
        match c {
            '"' => {
                in_string = false;
                out.push(c);
            }
            '\\' => match chars.peek().map(|&(_, next)| next) {
                Some(next @ ('"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't')) => {
                    out.push('\\');
                    out.push(next);
                    chars.next();
                }
                Some('\'') => {
                    out.push('\'');
                    chars.next();
                    changed = true;
                }
                Some('u') => match hex4(text, idx + 2) {
                    Some(unit) if (0xD800..=0xDBFF).contains(&unit) => {
                        let low = text
                            .get(idx + 6..idx + 8)
                            .filter(|s| *s == "\\u")
                            .and_then(|_| hex4(text, idx + 8))
                            .filter(|low| (0xDC00..=0xDFFF).contains(low));
                        let (copy, skip) = match low {
                            Some(_) => (text.get(idx..idx + 12).unwrap_or("\\uFFFD"), 11),
                            None => {
                                changed = true;
                                ("\\uFFFD", 5)
                            }
                        };
                        out.push_str(copy);
                        for _ in 0..skip {
                            chars.next();
                        }
                    }
                    Some(unit) if (0xDC00..=0xDFFF).contains(&unit) => {
                        out.push_str("\\uFFFD");
                        changed = true;
                        for _ in 0..5 {
                            chars.next();
                        }
                    }
                    Some(_) => {
                        out.push_str(text.get(idx..idx + 6).unwrap_or("\\uFFFD"));
                        for _ in 0..5 {
                            chars.next();
                        }
                    }
                    None => {
                        out.push_str("\\\\");
                        changed = true;
                    }
                },
                // A backslash before a line break is a line continuation; jsonrepair drops it.
                Some(next @ ('\n' | '\r')) => {
                    out.push('\\');
                    out.push(next);
                    chars.next();
                }
                None => out.push('\\'),
                Some(_) => {
                    out.push_str("\\\\");
                    changed = true;
                }
            },
            '\n' => push_control(&mut out, "\\n", &mut controls),
            '\r' => push_control(&mut out, "\\r", &mut controls),
            '\t' => push_control(&mut out, "\\t", &mut controls),
            c if c < '\u{20}' => {
                let escape = format!("\\u{:04x}", u32::from(c));
                push_control(&mut out, &escape, &mut controls);
            }
            _ => out.push(c),
        }
    }
    (changed || controls).then_some((out, changed))
}

fn push_control(out: &mut String, escape: &str, controls: &mut bool) {
    out.push_str(escape);
    *controls = true;
}

/// The four hex digits at byte `at`, as a UTF-16 code unit.
fn hex4(text: &str, at: usize) -> Option<u16> {
    let digits = text.get(at..at + 4)?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(digits, 16).ok()
}

/// Removes `<think>`/`<thinking>` blocks (see [`extract_json`]); the text itself when it has
/// no such tag (most replies), without copying it.
fn strip_think(raw: &str) -> Cow<'_, str> {
    let bytes = raw.as_bytes();
    let has_tag = bytes.iter().enumerate().any(|(idx, &byte)| {
        byte == b'<' && {
            let rest = bytes.get(idx + 1..).unwrap_or_default();
            let rest = rest.strip_prefix(b"/").unwrap_or(rest);
            rest.get(..5)
                .is_some_and(|word| word.eq_ignore_ascii_case(b"think"))
        }
    });
    if !has_tag {
        return Cow::Borrowed(raw);
    }
    Cow::Owned(strip_think_tags(raw))
}

fn strip_think_tags(raw: &str) -> String {
    const OPEN: [&str; 2] = ["<thinking>", "<think>"];
    const CLOSE: [&str; 2] = ["</thinking>", "</think>"];
    // ASCII lowercasing keeps every byte offset, so positions in `lower` are positions in `raw`.
    let lower = raw.to_ascii_lowercase();
    let find = |tags: &[&str], from: usize| -> Option<(usize, usize)> {
        let hay = lower.get(from..)?;
        tags.iter()
            .filter_map(|tag| hay.find(tag).map(|at| (from + at, tag.len())))
            .min_by_key(|&(at, len)| (at, usize::MAX - len))
    };
    let mut out = String::with_capacity(raw.len());
    let mut pos = 0;
    loop {
        let open = find(&OPEN, pos);
        let close = find(&CLOSE, pos);
        match (open, close) {
            (_, Some((close_at, close_len))) if open.is_none_or(|(at, _)| close_at < at) => {
                // A closing tag without an opening one: what came before was reasoning.
                pos = close_at + close_len;
            }
            (Some((open_at, open_len)), _) => {
                out.push_str(raw.get(pos..open_at).unwrap_or(""));
                match find(&CLOSE, open_at + open_len) {
                    Some((close_at, close_len)) => pos = close_at + close_len,
                    // Never closed: drop the tag alone, JSON may follow the reasoning.
                    None => pos = open_at + open_len,
                }
            }
            _ => {
                out.push_str(raw.get(pos..).unwrap_or(""));
                return out;
            }
        }
    }
}

/// Contents of the markdown code fences in `text`, in order. A fence opens with ```` ``` ```` at
/// the start of a line, followed by an optional language tag; it closes with ```` ``` ```` at
/// the start or the end of a line, or at the end of the text. Inside a JSON string a line break
/// is escaped, so a fence quoted in a string is never taken for one.
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut line_start = 0;
    let mut open: Option<usize> = None;
    while line_start <= text.len() {
        let line_end = text
            .get(line_start..)
            .and_then(|rest| rest.find('\n'))
            .map_or(text.len(), |at| line_start + at);
        let line = text.get(line_start..line_end).unwrap_or("");
        // Spaces and tabs first, byte by byte: a pretty-printed reply is mostly indentation,
        // and `trim_start` decodes it character by character (twice, it was).
        let ascii = line
            .bytes()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
        let unindented = line.get(ascii..).unwrap_or("").trim_start();
        let indent = line.len() - unindented.len();
        let starts_fence = unindented.starts_with("```");
        match open {
            None if starts_fence => {
                let after = line_start + indent + 3;
                let rest = text.get(after..line_end).unwrap_or("");
                let tag_len = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "_-+.".contains(c)))
                    .unwrap_or(rest.len());
                let content_start = after + tag_len;
                // An inline fence: ```json {...}``` on one line.
                let inline = text.get(content_start..line_end).unwrap_or("");
                if let Some(close) = inline.trim_end().strip_suffix("```")
                    && !close.trim().is_empty()
                {
                    blocks.push(close);
                    line_start = line_end + 1;
                    continue;
                }
                open = Some(content_start);
            }
            Some(content_start) => {
                let trimmed = line.trim_end();
                if starts_fence {
                    blocks.push(text.get(content_start..line_start).unwrap_or(""));
                    open = None;
                } else if let Some(before) = trimmed.strip_suffix("```") {
                    let end = line_start + before.len();
                    blocks.push(text.get(content_start..end).unwrap_or(""));
                    open = None;
                }
            }
            None => {}
        }
        line_start = line_end + 1;
    }
    if let Some(content_start) = open {
        blocks.push(text.get(content_start..).unwrap_or(""));
    }
    blocks
}

/// The first `max` characters of `text`, on one line.
pub(crate) fn snippet(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max).collect();
    cut.push('…');
    cut
}

// ---------------------------------------------------------------------------------------------
// Shape recognition and normalisation
// ---------------------------------------------------------------------------------------------

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

/// A recognised document: plan-level fields, the raw step items, and the shape.
struct Doc {
    fields: Map<String, Value>,
    items: Vec<Value>,
    shape: SourceShape,
}

/// Recognises the shape of `value` (see [`to_plan`]).
fn recognise(value: Value, depth: u8, diags: &mut Vec<Diagnostic>) -> Result<Doc, ParseError> {
    match value {
        Value::String(text) if depth < 3 => match serde_json::from_str::<Value>(&text) {
            Ok(inner @ (Value::Object(_) | Value::Array(_))) => {
                diags.push(Diagnostic::info(
                    Code::AutoFixed,
                    "",
                    "the plan was a JSON string holding JSON; it was decoded once more",
                ));
                recognise(inner, depth + 1, diags)
            }
            _ => Err(ParseError::UnknownShape(format!(
                "a string (`{}`), not a plan",
                snippet(&text, 60)
            ))),
        },
        Value::Array(items) => recognise_array(Map::new(), items),
        Value::Object(map) => recognise_object(map, depth, diags),
        other => Err(ParseError::UnknownShape(format!(
            "{}, not a plan",
            describe(&other)
        ))),
    }
}

fn recognise_array(fields: Map<String, Value>, items: Vec<Value>) -> Result<Doc, ParseError> {
    if !items.is_empty() && items.iter().all(Value::is_string) {
        return Err(ParseError::UnknownShape(
            "an array of strings; expected an array of step objects".to_owned(),
        ));
    }
    let objects: Vec<&Map<String, Value>> = items.iter().filter_map(Value::as_object).collect();
    let shape = if objects
        .iter()
        .any(|item| lookup(item, "action").is_some_and(Value::is_object))
    {
        SourceShape::Plansmith
    } else if !objects.is_empty()
        && objects.iter().all(|item| {
            lookup(item, "type").is_none()
                && (lookup(item, "name").is_some() || lookup(item, "tool_name").is_some())
        })
    {
        SourceShape::Sage
    } else {
        SourceShape::Steps
    };
    Ok(Doc {
        fields,
        items,
        shape,
    })
}

fn recognise_object(
    mut map: Map<String, Value>,
    depth: u8,
    diags: &mut Vec<Diagnostic>,
) -> Result<Doc, ParseError> {
    let has_steps = ["steps", "tasks", "execution_plan"]
        .iter()
        .any(|key| lookup(&map, key).is_some());
    if !has_steps
        && depth < 3
        && let Some(inner) = map.remove("plan")
    {
        let inner = match inner {
            Value::String(text) => {
                serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text))
            }
            other => other,
        };
        return match inner {
            Value::Object(mut inner) => {
                // Outer fields (a title, a thought next to the wrapper) fill the gaps.
                for (key, value) in map {
                    inner.entry(key).or_insert(value);
                }
                recognise_object(inner, depth + 1, diags)
            }
            Value::Array(items) => {
                map.insert("steps".to_owned(), Value::Array(items));
                recognise_object(map, depth + 1, diags)
            }
            other => Err(ParseError::UnknownShape(format!(
                "`plan` is {}, expected an object or an array of steps",
                describe(&other)
            ))),
        };
    }

    if let Some(items) = take_array(&mut map, "execution_plan", diags)? {
        return Ok(Doc {
            fields: map,
            items,
            shape: SourceShape::Nl2Sql,
        });
    }
    if lookup(&map, "steps").is_none()
        && let Some(items) = take_array(&mut map, "tasks", diags)?
    {
        let value_cell = lookup(&map, "adequate").is_some()
            || items
                .iter()
                .any(|item| lookup_in(item, "agent_name").is_some());
        let shape = if value_cell {
            SourceShape::ValueCell
        } else {
            SourceShape::Steps
        };
        return Ok(Doc {
            fields: map,
            items,
            shape,
        });
    }
    if let Some(items) = take_array(&mut map, "steps", diags)? {
        let all_strings = items.iter().all(Value::is_string);
        let shape = if all_strings
            && (!items.is_empty()
                || lookup(&map, "plan_id").is_some()
                || lookup(&map, "step_statuses").is_some())
        {
            SourceShape::OpenManus
        } else if items
            .iter()
            .any(|item| lookup_in(item, "action").is_some_and(Value::is_object))
        {
            SourceShape::Plansmith
        } else if lookup(&map, "has_enough_context").is_some()
            || (!items.is_empty()
                && items.iter().all(|item| {
                    lookup_in(item, "type").is_none()
                        && (lookup_in(item, "step_type").is_some()
                            || lookup_in(item, "need_web_search").is_some()
                            || lookup_in(item, "need_search").is_some())
                }))
        {
            SourceShape::DeerFlow
        } else {
            SourceShape::Steps
        };
        return Ok(Doc {
            fields: map,
            items,
            shape,
        });
    }
    if lookup(&map, "adequate").is_some() {
        return Ok(Doc {
            fields: map,
            items: Vec::new(),
            shape: SourceShape::ValueCell,
        });
    }
    Err(ParseError::UnknownShape(describe(&Value::Object(map))))
}

/// Removes `map[key]` when it is an array (or a JSON string holding one).
fn take_array(
    map: &mut Map<String, Value>,
    key: &str,
    diags: &mut Vec<Diagnostic>,
) -> Result<Option<Vec<Value>>, ParseError> {
    match lookup(map, key) {
        None => return Ok(None),
        Some(Value::Array(_)) => {}
        Some(Value::String(text)) => {
            if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text) {
                map.remove(key);
                diags.push(Diagnostic::info(
                    Code::AutoFixed,
                    "/steps",
                    format!("`{key}` was a JSON string holding an array; it was decoded"),
                ));
                return Ok(Some(items));
            }
            return Err(ParseError::UnknownShape(format!(
                "`{key}` is a string, expected an array of steps"
            )));
        }
        Some(other) => {
            return Err(ParseError::UnknownShape(format!(
                "`{key}` is {}, expected an array of steps",
                describe(other)
            )));
        }
    }
    match map.remove(key) {
        Some(Value::Array(items)) => Ok(Some(items)),
        _ => Ok(None),
    }
}

/// A short description of a JSON value for error messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(_) => "a boolean".to_owned(),
        Value::Number(_) => "a number".to_owned(),
        Value::String(_) => "a string".to_owned(),
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::Object(map) if map.is_empty() => "an empty object".to_owned(),
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().take(8).map(|key| format!("`{key}`")).collect();
            let more = if map.len() > 8 { ", …" } else { "" };
            format!(
                "an object with keys {}{more}; expected `steps`, `plan`, `tasks` or \
                 `execution_plan`",
                keys.join(", ")
            )
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------------------------

/// A converted step, before ids are normalised.
struct Draft {
    /// Position in the model's list.
    input_idx: usize,
    /// The id the model gave.
    raw_id: Option<String>,
    /// `depends_on` as the model gave it.
    raw_deps: Vec<Value>,
    /// The step, with its normalised id already set.
    step: Step,
}

const TOOL_NAME_KEYS: &[&str] = &["name", "tool", "tool_name", "function", "tool_to_use"];
/// Keys that name a tool even without arguments (`name` alone may be a step title).
const TOOL_ONLY_KEYS: &[&str] = &["tool", "tool_name", "function", "tool_to_use"];
const ARGUMENT_KEYS: &[&str] = &[
    "arguments",
    "args",
    "parameters",
    "params",
    "input",
    "tool_input",
    "tool_parameters",
    "action_input",
];
const AGENT_KEYS: &[&str] = &["agent", "agent_name"];
const QUERY_KEYS: &[&str] = &["query", "task", "instruction", "prompt"];
const KIND_KEYS: &[&str] = &["kind", "step_type", "task_type"];
const TEXT_KEYS: &[&str] = &["text", "reply", "content", "answer", "message", "response"];
const DEPENDENCY_KEYS: &[&str] = &[
    "depends_on",
    "dependencies",
    "deps",
    "dependency",
    "depends",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepType {
    Tool,
    Agent,
    Task,
    Reply,
}

impl StepType {
    fn name(self) -> &'static str {
        match self {
            StepType::Tool => "tool",
            StepType::Agent => "agent",
            StepType::Task => "task",
            StepType::Reply => "reply",
        }
    }

    /// A `type` value, with the aliases models use.
    fn from_name(name: &str) -> Option<StepType> {
        match name.trim().to_ascii_lowercase().as_str() {
            "tool" | "tool_call" | "function" | "function_call" | "call" => Some(StepType::Tool),
            "agent" | "agent_call" | "delegate" => Some(StepType::Agent),
            "task" | "research" | "processing" => Some(StepType::Task),
            "reply" | "answer" | "respond" | "response" | "final_answer" | "message" => {
                Some(StepType::Reply)
            }
            _ => None,
        }
    }
}

/// Converts one step item; `None` (with an error diagnostic) when it cannot be read.
fn convert_step(
    item: &Value,
    input_idx: usize,
    out_idx: usize,
    shape: SourceShape,
    diags: &mut Vec<Diagnostic>,
) -> Option<Draft> {
    let id = format!("s{}", out_idx + 1);
    let at = format!("/steps/{out_idx}");
    let leave_out = |diags: &mut Vec<Diagnostic>, message: String| {
        diags.push(
            Diagnostic::error(
                Code::InvalidStep,
                format!("/steps/{input_idx}"),
                format!("step {} was left out: {message}", input_idx + 1),
            )
            .with_value(item.clone()),
        );
    };
    // Only lifting a nested `action` or `function` changes the step object; without one it is
    // read in place.
    let obj: Cow<'_, Map<String, Value>> = match item {
        Value::Object(map)
            if lookup(map, "action").is_some() || lookup(map, "function").is_some() =>
        {
            let mut owned = map.clone();
            lift_nested_action(&mut owned);
            Cow::Owned(owned)
        }
        Value::Object(map) => Cow::Borrowed(map),
        Value::String(text) if !text.trim().is_empty() => {
            let kind = TaskKind::Custom(PLAIN_STEP.to_owned());
            let action = Action::Task {
                kind,
                need_web_search: false,
            };
            let step = Step::new(id, text.trim(), action);
            return Some(Draft {
                input_idx,
                raw_id: None,
                raw_deps: Vec::new(),
                step,
            });
        }
        other => {
            leave_out(
                diags,
                format!("it is {}, not a step object", describe(other)),
            );
            return None;
        }
    };
    let tool_name = str_field(&obj, TOOL_NAME_KEYS).map(|(_, name)| name.to_owned());
    let args_value = ARGUMENT_KEYS.iter().find_map(|key| lookup(&obj, key));
    let agent = str_field(&obj, AGENT_KEYS).map(|(_, agent)| agent.to_owned());
    let kind = str_field(&obj, KIND_KEYS).map(|(_, kind)| kind.to_owned());
    // deer-flow renamed `need_web_search` to `need_search`; both are read.
    let need_web_search = lookup(&obj, "need_web_search")
        .or_else(|| lookup(&obj, "need_search"))
        .and_then(as_bool);
    let text = str_field(&obj, TEXT_KEYS).map(|(_, text)| text.to_owned());
    let description =
        str_field(&obj, &["description", "desc", "details"]).map(|(_, d)| d.to_owned());
    let has_any = |keys: &[&str]| {
        keys.iter()
            .any(|key| lookup(&obj, key).is_some_and(|v| !v.is_null()))
    };

    let explicit = lookup(&obj, "type").map(|ty| (ty.as_str().and_then(StepType::from_name), ty));
    let inferred = if tool_name.is_some() && args_value.is_some() {
        Some(StepType::Tool)
    } else if agent.is_some() {
        Some(StepType::Agent)
    } else if kind.is_some() || need_web_search.is_some() {
        Some(StepType::Task)
    } else if text.is_some() {
        Some(StepType::Reply)
    } else if has_any(TOOL_ONLY_KEYS) {
        Some(StepType::Tool)
    } else if shape == SourceShape::DeerFlow {
        Some(StepType::Task)
    } else {
        None
    };
    let step_type = match (explicit, inferred) {
        (Some((Some(ty), _)), _) => ty,
        (Some((None, given)), Some(ty)) => {
            diags.push(
                Diagnostic::warning(
                    Code::AutoFixed,
                    format!("{at}/action/type"),
                    format!(
                        "unknown step type {given}; `{}` was inferred from its fields",
                        ty.name()
                    ),
                )
                .with_step(&id)
                .with_value(given.clone()),
            );
            ty
        }
        (Some((None, given)), None) => {
            leave_out(
                diags,
                format!(
                    "unknown step type {given}; expected `tool` (name + arguments), `agent` \
                     (agent + query), `task` (kind) or `reply` (text)"
                ),
            );
            return None;
        }
        (None, Some(ty)) => ty,
        (None, None) => {
            leave_out(
                diags,
                "it has no `type` and no recognisable action; give `type` and its fields: `tool` \
                 (name + arguments), `agent` (agent + query), `task` (kind) or `reply` (text)"
                    .to_owned(),
            );
            return None;
        }
    };
    // `"type": "research"` is a `step_type` in the wrong field.
    let mut kind = kind;
    if step_type == StepType::Task
        && kind.is_none()
        && let Some(Value::String(given)) = lookup(&obj, "type")
    {
        let lower = given.trim().to_ascii_lowercase();
        if lower == "research" || lower == "processing" {
            kind = Some(lower);
        }
    }

    let action = match step_type {
        StepType::Tool => {
            let Some(name) = tool_name.clone() else {
                leave_out(diags, "a tool step needs the tool's `name`".to_owned());
                return None;
            };
            let arguments = match args_value {
                None | Some(Value::Null) => {
                    if !has_any(ARGUMENT_KEYS) && explicit.is_none() {
                        diags.push(
                            Diagnostic::info(
                                Code::AutoFixed,
                                format!("{at}/action/arguments"),
                                "the tool step has no arguments; none are assumed",
                            )
                            .with_step(&id),
                        );
                    }
                    Map::new()
                }
                Some(Value::Object(map)) => map.clone(),
                Some(Value::String(text)) => match decode_arguments(text) {
                    Some(map) => {
                        diags.push(
                            Diagnostic::info(
                                Code::AutoFixed,
                                format!("{at}/action/arguments"),
                                "the arguments were a JSON string; it was decoded",
                            )
                            .with_step(&id),
                        );
                        map
                    }
                    None => {
                        leave_out(
                            diags,
                            format!(
                                "the arguments of tool `{name}` are a string that does not hold a \
                                 JSON object; give an object"
                            ),
                        );
                        return None;
                    }
                },
                Some(other) => {
                    leave_out(
                        diags,
                        format!(
                            "the arguments of tool `{name}` are {}; give an object",
                            describe(other)
                        ),
                    );
                    return None;
                }
            };
            Action::Tool { name, arguments }
        }
        StepType::Agent => {
            let Some(agent) = agent.clone() else {
                leave_out(
                    diags,
                    "an agent step needs the agent's name (`agent`)".to_owned(),
                );
                return None;
            };
            let query = match str_field(&obj, QUERY_KEYS) {
                Some((_, query)) => query.to_owned(),
                None => {
                    let Some(fallback) = description
                        .clone()
                        .or_else(|| str_field(&obj, &["title"]).map(|(_, t)| t.to_owned()))
                    else {
                        leave_out(
                            diags,
                            format!("the agent step for `{agent}` has no `query`"),
                        );
                        return None;
                    };
                    diags.push(
                        Diagnostic::info(
                            Code::AutoFixed,
                            format!("{at}/action/query"),
                            "the agent step has no `query`; its description was used",
                        )
                        .with_step(&id),
                    );
                    fallback
                }
            };
            Action::Agent { agent, query }
        }
        StepType::Task => {
            let kind = match kind {
                Some(kind) => TaskKind::from(kind),
                None => {
                    let (kind, why) = if need_web_search == Some(true) {
                        (TaskKind::Research, "it needs web search")
                    } else if need_web_search == Some(false) {
                        (TaskKind::Processing, "it needs no web search")
                    } else {
                        (TaskKind::Processing, "nothing says it needs web search")
                    };
                    diags.push(
                        Diagnostic::info(
                            Code::AutoFixed,
                            format!("{at}/action/kind"),
                            format!("the step has no `step_type`; `{kind}` was set because {why}"),
                        )
                        .with_step(&id),
                    );
                    kind
                }
            };
            Action::Task {
                kind,
                need_web_search: need_web_search.unwrap_or(false),
            }
        }
        StepType::Reply => {
            let Some(text) = text.clone() else {
                leave_out(diags, "a reply step needs its `text`".to_owned());
                return None;
            };
            Action::Reply { text }
        }
    };

    let title = match str_field(&obj, &["title"]) {
        Some((_, title)) => title.to_owned(),
        None => match &action {
            Action::Tool { name, .. } => name.clone(),
            Action::Agent { query, .. } => truncate_title(query, 60),
            Action::Task { .. } => str_field(&obj, &["name", "step_name"])
                .map(|(_, name)| name.to_owned())
                .or_else(|| description.as_deref().map(|d| truncate_title(d, 60)))
                .unwrap_or_else(|| format!("Step {}", out_idx + 1)),
            Action::Reply { .. } => "Reply".to_owned(),
        },
    };
    let mut step = Step::new(id.clone(), title, action);
    step.description = description.unwrap_or_default();
    if step.description.is_empty()
        && shape == SourceShape::Nl2Sql
        && let Action::Tool { arguments, .. } = &step.action
        && let Some(Value::String(text)) = lookup(arguments, "description")
    {
        step.description = text.clone();
    }

    if let Some(status) = lookup(&obj, "status") {
        step.status = read_status(status, &at, &id, diags);
    }
    if let Some((_, notes)) = str_field(&obj, &["notes", "note"]) {
        step.notes = notes.to_owned();
    }
    step.requires_approval = lookup(&obj, "requires_approval")
        .and_then(as_bool)
        .unwrap_or(false);
    step.result = lookup(&obj, "result").filter(|v| !v.is_null()).cloned();
    step.error = str_field(&obj, &["error"]).map(|(_, e)| e.to_owned());

    match read_schedule(&obj) {
        Ok(schedule) => step.schedule = schedule,
        Err((message, value)) => {
            let mut diag =
                Diagnostic::error(Code::InvalidSchedule, format!("{at}/schedule"), message)
                    .with_step(&id);
            if let Some(value) = value {
                diag = diag.with_value(value);
            }
            diags.push(diag);
        }
    }

    let raw_id = raw_step_id(item);
    let raw_deps = match DEPENDENCY_KEYS.iter().find_map(|key| lookup(&obj, key)) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(deps)) => deps.clone(),
        Some(dep @ (Value::String(_) | Value::Number(_))) => vec![dep.clone()],
        Some(other) => {
            diags.push(
                Diagnostic::warning(
                    Code::InvalidStep,
                    format!("{at}/depends_on"),
                    "`depends_on` must be a list of step ids; it was ignored",
                )
                .with_step(&id)
                .with_value(other.clone()),
            );
            Vec::new()
        }
    };
    Some(Draft {
        input_idx,
        raw_id,
        raw_deps,
        step,
    })
}

/// The id the model gave a step item (`id`, `step_id`, or nl2sql's `step` number).
fn raw_step_id(item: &Value) -> Option<String> {
    let obj = item.as_object()?;
    ["id", "step_id", "step"]
        .iter()
        .find_map(|key| lookup(obj, key).and_then(scalar_string))
}

/// Moves the fields of a nested `action` object (our shape) or an OpenAI-style `function` object
/// up into the step, so one reader handles every shape. A string `action` (ReAct's
/// `action`/`action_input`) names a tool.
fn lift_nested_action(obj: &mut Map<String, Value>) {
    match obj.remove("action") {
        Some(Value::Object(action)) => {
            for (key, value) in action {
                obj.insert(key, value);
            }
        }
        Some(Value::String(name)) => {
            obj.entry("tool").or_insert(Value::String(name));
        }
        Some(other) => {
            obj.insert("action".to_owned(), other);
        }
        None => {}
    }
    if let Some(Value::Object(function)) = lookup(obj, "function").cloned() {
        obj.remove("function");
        if let Some(name) = lookup(&function, "name") {
            obj.entry("tool").or_insert(name.clone());
        }
        if let Some(arguments) = lookup(&function, "arguments") {
            obj.entry("arguments").or_insert(arguments.clone());
        }
    }
}

/// Arguments given as a JSON string holding an object.
fn decode_arguments(text: &str) -> Option<Map<String, Value>> {
    if text.trim().is_empty() {
        return Some(Map::new());
    }
    match parse_candidate(text.trim()) {
        Ok((Value::Object(map), _)) => Some(map),
        _ => None,
    }
}

/// A step status, with common aliases; unknown strings become `not_started` with a warning.
fn read_status(value: &Value, at: &str, id: &str, diags: &mut Vec<Diagnostic>) -> StepStatus {
    let status = value
        .as_str()
        .map(|s| s.trim().to_ascii_lowercase().replace([' ', '-'], "_"));
    let known = status.as_deref().and_then(|s| match s {
        "" | "pending" | "todo" | "not_started" | "notstarted" | "open" => {
            Some(StepStatus::NotStarted)
        }
        "in_progress" | "running" | "active" | "started" | "doing" => Some(StepStatus::InProgress),
        "completed" | "complete" | "done" | "finished" | "success" | "succeeded" => {
            Some(StepStatus::Completed)
        }
        "blocked" | "waiting" => Some(StepStatus::Blocked),
        "failed" | "error" => Some(StepStatus::Failed),
        "skipped" | "cancelled" | "canceled" => Some(StepStatus::Skipped),
        _ => None,
    });
    match known {
        Some(status) => status,
        None => {
            diags.push(
                Diagnostic::warning(
                    Code::InvalidStep,
                    format!("{at}/status"),
                    "unknown step status; `not_started` was assumed (expected not_started, \
                     in_progress, completed, blocked, failed or skipped)",
                )
                .with_step(id)
                .with_value(value.clone()),
            );
            StepStatus::NotStarted
        }
    }
}

/// Applies OpenManus `step_statuses` and `step_notes` (parallel arrays) to the steps.
fn apply_statuses_and_notes(
    fields: &Map<String, Value>,
    drafts: &mut [Draft],
    diags: &mut Vec<Diagnostic>,
) {
    let statuses = lookup(fields, "step_statuses").and_then(Value::as_array);
    let notes = lookup(fields, "step_notes").and_then(Value::as_array);
    for (out_idx, draft) in drafts.iter_mut().enumerate() {
        let at = format!("/steps/{out_idx}");
        if let Some(status) = statuses.and_then(|all| all.get(draft.input_idx)) {
            draft.step.status = read_status(status, &at, &draft.step.id, diags);
        }
        if let Some(Value::String(note)) = notes.and_then(|all| all.get(draft.input_idx)) {
            draft.step.notes = note.clone();
        }
    }
}

/// The schedule of a step: ours (`{"type": "interval", "minutes": 5}`), ValueCell's
/// (`schedule_config: {interval_minutes | daily_time}` with `pattern`), or a cron string. The
/// error carries the message and the offending value.
fn read_schedule(obj: &Map<String, Value>) -> Result<Option<Schedule>, (String, Option<Value>)> {
    let recurring = lookup(obj, "pattern")
        .and_then(Value::as_str)
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("recurring"));
    let given = ["schedule", "schedule_config"]
        .iter()
        .find_map(|key| lookup(obj, key).filter(|v| !v.is_null()));
    let schedule = match given {
        None => None,
        Some(value) => schedule_from(value).map_err(|message| (message, Some(value.clone())))?,
    };
    if recurring && schedule.as_ref().is_none_or(|s| !s.is_recurring()) {
        return Err((
            "a recurring task needs exactly one of interval_minutes or daily_time".to_owned(),
            given.cloned(),
        ));
    }
    Ok(schedule)
}

fn schedule_from(value: &Value) -> Result<Option<Schedule>, String> {
    match value {
        Value::String(text) => {
            let text = text.trim();
            if text.is_empty() || text.eq_ignore_ascii_case("once") {
                Ok(Some(Schedule::Once))
            } else if text.split_whitespace().count() == 5 {
                Ok(Some(Schedule::Cron {
                    expr: text.to_owned(),
                }))
            } else {
                Err(format!(
                    "unreadable schedule `{text}`; give a five-field cron expression"
                ))
            }
        }
        Value::Object(map) if lookup(map, "type").is_some() => {
            serde_json::from_value::<Schedule>(value.clone())
                .map(Some)
                .map_err(|err| {
                    format!(
                        "malformed schedule: {err}; expected once, interval {{minutes}}, daily \
                     {{time}} or cron {{expr}}"
                    )
                })
        }
        Value::Object(map) => {
            let interval = lookup(map, "interval_minutes").or_else(|| lookup(map, "minutes"));
            let interval = interval.filter(|v| !v.is_null());
            let daily = lookup(map, "daily_time")
                .or_else(|| lookup(map, "time"))
                .filter(|v| !v.is_null());
            let cron = lookup(map, "cron")
                .or_else(|| lookup(map, "expr"))
                .filter(|v| !v.is_null());
            match (interval, daily, cron) {
                (Some(_), Some(_), _) => {
                    Err("exactly one of interval_minutes or daily_time may be set".to_owned())
                }
                (Some(minutes), None, None) => match as_minutes(minutes) {
                    Some(minutes) => Ok(Some(Schedule::Interval { minutes })),
                    None => Err("interval_minutes must be a whole number of minutes".to_owned()),
                },
                (None, Some(time), None) => match time.as_str() {
                    Some(time) => Ok(Some(Schedule::Daily {
                        time: time.trim().to_owned(),
                    })),
                    None => Err("daily_time must be a string `HH:MM`".to_owned()),
                },
                (None, None, Some(expr)) => match expr.as_str() {
                    Some(expr) => Ok(Some(Schedule::Cron {
                        expr: expr.trim().to_owned(),
                    })),
                    None => Err("cron must be a string".to_owned()),
                },
                (None, None, None) => Ok(None),
                _ => Err("give only one of interval_minutes, daily_time or cron".to_owned()),
            }
        }
        other => Err(format!(
            "the schedule is {}, expected an object",
            describe(other)
        )),
    }
}

fn as_minutes(value: &Value) -> Option<u32> {
    match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= f64::from(u32::MAX))
                .map(|f| f as u64)
        }),
        Value::String(text) => text.trim().parse::<u64>().ok(),
        _ => None,
    }
    .and_then(|n| u32::try_from(n).ok())
}

// ---------------------------------------------------------------------------------------------
// Ids, dependencies, references
// ---------------------------------------------------------------------------------------------

/// Maps the ids the model used to the normalised ones.
struct IdMap {
    /// The model's id → the new id (the first step with that id).
    by_raw: HashMap<String, String>,
    /// 1-based position in the model's list → the new id.
    by_position: HashMap<usize, String>,
    /// Ids of the steps that were left out.
    dropped_raw: HashSet<String>,
    /// 1-based positions of the steps that were left out.
    dropped_positions: HashSet<usize>,
}

/// What a step reference resolves to.
enum Resolved {
    /// A step of the plan, by its new id.
    Step(String),
    /// A step that was left out: after renumbering its old name may denote another step, so
    /// the reference must not be kept as is.
    Dropped,
    /// Nothing the model wrote: kept verbatim for validation to report.
    Unknown,
}

impl IdMap {
    /// `dropped` lists the steps left out: (position in the model's list, the model's id).
    fn new(
        drafts: &[Draft],
        dropped: &[(usize, Option<String>)],
        diags: &mut Vec<Diagnostic>,
    ) -> IdMap {
        let mut by_raw: HashMap<String, String> = HashMap::new();
        let mut by_position = HashMap::new();
        for (out_idx, draft) in drafts.iter().enumerate() {
            by_position.insert(draft.input_idx + 1, draft.step.id.clone());
            let Some(raw) = &draft.raw_id else { continue };
            match by_raw.get(raw) {
                Some(first) => diags.push(
                    Diagnostic::warning(
                        Code::AutoFixed,
                        format!("/steps/{out_idx}/id"),
                        format!(
                            "duplicate step id `{raw}`; the step was renumbered and references to \
                             `{raw}` resolve to the first step with it ({first})"
                        ),
                    )
                    .with_step(&draft.step.id)
                    .with_value(Value::from(raw.as_str())),
                ),
                None => {
                    by_raw.insert(raw.clone(), draft.step.id.clone());
                }
            }
        }
        IdMap {
            by_raw,
            by_position,
            dropped_raw: dropped.iter().filter_map(|(_, raw)| raw.clone()).collect(),
            dropped_positions: dropped.iter().map(|(idx, _)| idx + 1).collect(),
        }
    }

    /// Resolves a step reference written as a string: a model id, `3`, `s3`, `step3`,
    /// `step_3`, `step 3`, `#3` (positions are 1-based). Model ids win over positions.
    fn resolve_str(&self, text: &str) -> Resolved {
        let text = text.trim();
        if let Some(id) = self.by_raw.get(text) {
            return Resolved::Step(id.clone());
        }
        if self.dropped_raw.contains(text) {
            return Resolved::Dropped;
        }
        let lower = text.to_ascii_lowercase();
        let digits = ["step_", "step-", "step ", "step", "s", "#"]
            .iter()
            .find_map(|prefix| lower.strip_prefix(prefix))
            .unwrap_or(&lower);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Resolved::Unknown;
        }
        match digits.parse::<usize>() {
            Ok(position) => match self.by_position.get(&position) {
                Some(id) => Resolved::Step(id.clone()),
                None if self.dropped_positions.contains(&position) => Resolved::Dropped,
                None => Resolved::Unknown,
            },
            Err(_) => Resolved::Unknown,
        }
    }

    /// Resolves a dependency given as a string or an integer.
    fn resolve(&self, dep: &Value) -> (Resolved, String) {
        let verbatim = match dep {
            Value::String(text) => text.trim().to_owned(),
            other => other.to_string(),
        };
        let resolved = match dep {
            Value::String(_) | Value::Number(_) => self.resolve_str(&verbatim),
            _ => Resolved::Unknown,
        };
        (resolved, verbatim)
    }

    /// Finishes a draft: dependencies and `$ref`s remapped to the new ids. A dependency on a
    /// step that was left out is removed, with an error; unknown ones are kept verbatim.
    fn finish(&self, draft: Draft, out_idx: usize, diags: &mut Vec<Diagnostic>) -> Step {
        let mut step = draft.step;
        for dep in &draft.raw_deps {
            let id = match self.resolve(dep) {
                (Resolved::Step(id), _) | (Resolved::Unknown, id) => id,
                (Resolved::Dropped, verbatim) => {
                    diags.push(
                        Diagnostic::error(
                            Code::UnknownDependency,
                            format!("/steps/{out_idx}/depends_on"),
                            format!("the step depended on `{verbatim}`, a step that was left out"),
                        )
                        .with_step(&step.id)
                        .with_value(dep.clone()),
                    );
                    continue;
                }
            };
            if !step.depends_on.contains(&id) {
                step.depends_on.push(id);
            }
        }
        if let Action::Tool { arguments, .. } = &mut step.action {
            for (key, value) in arguments.iter_mut() {
                let pointer =
                    || format!("/steps/{out_idx}/action/arguments/{}", escape_pointer(key));
                self.remap_refs(value, &pointer, &step.id, diags);
            }
        }
        step
    }

    /// Rewrites `{"$ref": "<old id>.output…"}` to the new id, in place. A reference to a step
    /// that was left out is kept with an error (its old id may now name another step).
    /// `pointer` gives the value's JSON pointer; it is built only for a diagnostic.
    fn remap_refs(
        &self,
        value: &mut Value,
        pointer: &dyn Fn() -> String,
        step: &str,
        diags: &mut Vec<Diagnostic>,
    ) {
        if let Some(reference) = StepRef::reference_in(value) {
            let split = reference.find(['.', '[']).unwrap_or(reference.len());
            let (old, rest) = reference.split_at(split);
            match self.resolve_str(old) {
                Resolved::Step(new) => {
                    let new_ref = format!("{new}{rest}");
                    if let Some(map) = value.as_object_mut() {
                        map.insert("$ref".to_owned(), Value::String(new_ref));
                    }
                }
                Resolved::Dropped => diags.push(
                    Diagnostic::error(
                        Code::InvalidRef,
                        pointer(),
                        format!("`{reference}` refers to a step that was left out"),
                    )
                    .with_step(step)
                    .with_value(value.clone()),
                ),
                Resolved::Unknown => {}
            }
            return;
        }
        match value {
            Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    let pointer = || format!("{}/{}", pointer(), escape_pointer(key));
                    self.remap_refs(child, &pointer, step, diags);
                }
            }
            Value::Array(items) => {
                for (idx, child) in items.iter_mut().enumerate() {
                    let pointer = || format!("{}/{idx}", pointer());
                    self.remap_refs(child, &pointer, step, diags);
                }
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Questions and small helpers
// ---------------------------------------------------------------------------------------------

/// Clarifying questions: plain strings or `{text|question, id?, step?, argument?, options?}`.
fn convert_questions(
    value: Option<&Value>,
    ids: &IdMap,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Question> {
    let items: Vec<&Value> = match value {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(single @ Value::String(_)) => vec![single],
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    for (idx, item) in items.into_iter().enumerate() {
        let default_id = format!("q{}", out.len() + 1);
        let question = match item {
            Value::String(text) if !text.trim().is_empty() => Some(Question {
                id: default_id,
                text: text.trim().to_owned(),
                step: None,
                argument: None,
                options: Vec::new(),
            }),
            Value::Object(map) => str_field(map, &["text", "question"]).map(|(_, text)| Question {
                id: lookup(map, "id")
                    .and_then(scalar_string)
                    .unwrap_or(default_id),
                text: text.to_owned(),
                step: lookup(map, "step").and_then(|step| match step {
                    Value::Null => None,
                    other => match ids.resolve(other) {
                        (Resolved::Step(id), _) | (Resolved::Unknown, id) => Some(id),
                        // The step was left out; its old id may now name another step.
                        (Resolved::Dropped, _) => None,
                    },
                }),
                argument: str_field(map, &["argument", "arg"]).map(|(_, a)| a.to_owned()),
                options: match lookup(map, "options") {
                    Some(Value::Array(options)) => options
                        .iter()
                        .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_owned))
                        .collect(),
                    _ => Vec::new(),
                },
            }),
            _ => None,
        };
        match question {
            Some(question) => out.push(question),
            None => diags.push(
                Diagnostic::warning(
                    Code::InvalidStep,
                    format!("/questions/{idx}"),
                    "a question without text was left out",
                )
                .with_value(item.clone()),
            ),
        }
    }
    out
}

/// The first of `keys` that holds a non-blank string, trimmed.
fn str_field<'m>(
    map: &'m Map<String, Value>,
    keys: &[&'static str],
) -> Option<(&'static str, &'m str)> {
    keys.iter().find_map(|key| {
        lookup(map, key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|text| !text.is_empty())
            .map(|text| (*key, text))
    })
}

/// `map[key]`. A step object has a handful of keys and the parser asks it for dozens of
/// aliases, most of them absent: comparing a few short keys is several times cheaper than
/// hashing each alias with the map's SipHash, so small maps are scanned.
fn lookup<'m>(map: &'m Map<String, Value>, key: &str) -> Option<&'m Value> {
    const SCAN_MAX: usize = 12;
    if map.len() <= SCAN_MAX {
        map.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        map.get(key)
    }
}

/// [`lookup`] in an object; `None` for any other value.
fn lookup_in<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    value.as_object().and_then(|map| lookup(map, key))
}

/// A string or a number, as a string.
fn scalar_string(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if !text.trim().is_empty() => Some(text.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A boolean, also when written as a string.
fn as_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::String(text) => match text.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" => Some(true),
            "false" | "no" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A title from the goal: its first line, at most ~60 characters.
fn derive_title(goal: &str) -> String {
    let title = truncate_title(goal, 60);
    if title.is_empty() {
        "Untitled plan".to_owned()
    } else {
        title
    }
}

/// The first line of `text`, cut to `max` characters (at a word boundary when there is one).
fn truncate_title(text: &str, max: usize) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let cut: String = line.chars().take(max).collect();
    let at_word = match cut.rfind(char::is_whitespace) {
        Some(pos) if pos >= cut.len() / 2 => cut.get(..pos).unwrap_or(&cut),
        _ => &cut,
    };
    format!("{}…", at_word.trim_end())
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
    fn escape_pre_pass_fixes_what_jsonrepair_gets_wrong() {
        let cases: &[(&str, Option<&str>)] = &[
            (r#"{"a": "ok \n \" \\ \/ \u00e9"}"#, None),
            (r#"{"a": "\upcite{x}"}"#, Some(r#"{"a": "\\upcite{x}"}"#)),
            (r#"{"a": "\u12zz"}"#, Some(r#"{"a": "\\u12zz"}"#)),
            (r#"{"a": "\d+\s"}"#, Some(r#"{"a": "\\d+\\s"}"#)),
            (r#"{"a": "it\'s"}"#, Some(r#"{"a": "it's"}"#)),
            (r#"{"a": "\uD83D x"}"#, Some(r#"{"a": "\uFFFD x"}"#)),
            (r#"{"a": "\uDE80"}"#, Some(r#"{"a": "\uFFFD"}"#)),
            (r#"{"a": "\uD83D\uDE80"}"#, None),
            // Outside strings nothing is touched.
            (r#"{\d: 1}"#, None),
            // A trailing backslash (output cut off) is left for jsonrepair.
            (r#"{"a": "x\"#, None),
        ];
        for (input, want) in cases {
            let got = escape_invalid_escapes(input);
            assert_eq!(
                got.as_ref().map(|(text, _)| text.as_str()),
                *want,
                "{input}"
            );
            assert!(got.is_none_or(|(_, repaired)| repaired), "{input}");
        }
        // jsonrepair alone fails or loses the backslash on these; with the pre-pass they survive.
        assert!(jsonrepair_rs::jsonrepair(r#"{"a": "\upcite"}"#).is_err());
        let (value, repaired) = parse_candidate(r#"{"a": "\upcite{x} \d"}"#).unwrap();
        assert!(repaired);
        assert_eq!(value["a"], r"\upcite{x} \d");
    }

    #[test]
    fn raw_control_characters_in_strings_are_read_as_written() {
        // Small models (and servers whose JSON grammar allows it) write multi-line values with
        // raw line breaks; the text has one reading, so it is not a repair.
        let (value, repaired) =
            parse_candidate("{\"a\": \"line 1\nline 2\tend\u{1}\",\n \"b\": 2}").unwrap();
        assert!(!repaired);
        assert_eq!(value["a"], "line 1\nline 2\tend\u{1}");
        assert_eq!(value["b"], 2);
        // With a guessed fix beside it, it is a repair.
        let (value, repaired) = parse_candidate("{\"a\": \"x\ny \\d\"}").unwrap();
        assert!(repaired);
        assert_eq!(value["a"], "x\ny \\d");
        // A backslash before a line break is still left to jsonrepair, as before.
        assert!(parse_candidate("{\"a\": \"x\\\ny\"}").unwrap().1);
        assert_eq!(
            read_as_written("{\"a\": \"x\ny\"}"),
            Some(serde_json::json!({"a": "x\ny"}))
        );
        assert_eq!(read_as_written("{\"a\": \"\\d\"}"), None);
        assert_eq!(read_as_written("{\"a\": 1,}"), None);
        // The whole path: a plan with a multi-line thought is read as written.
        let raw = "{\"thought\": \"first\nsecond\", \"steps\": [{\"id\": \"s1\", \"type\": \"reply\", \"text\": \"hi\"}]}";
        let (value, repaired) = extract_json(raw).unwrap();
        assert!(!repaired);
        assert_eq!(value["thought"], "first\nsecond");
    }

    #[test]
    fn bracket_matcher_respects_strings_and_reports_cuts() {
        let text = r#"x {"a": "}]\"{", "b": [1, {"c": 2}]} tail"#;
        let cut = match_brackets(text, 2);
        assert!(cut.complete);
        assert_eq!(&text[2..cut.end], r#"{"a": "}]\"{", "b": [1, {"c": 2}]}"#);

        let cases = [
            (r#"{"steps": [{"name": "a"}, {"name": "b"#, CutStep::Broken),
            (r#"{"steps": [{"name": "a"}, "#, CutStep::Outside),
            (
                r#"{"steps": [{"name": "a"}], "thought": "abc"#,
                CutStep::Outside,
            ),
            (r#"[{"name": "a"}, {"args": {"x": [1"#, CutStep::Broken),
            (
                r#"[{"name": "a", "args": {"description": "x"#,
                CutStep::Broken,
            ),
            (r#"[{"name": "a", "description": "x"#, CutStep::Prose),
            (
                r#"[{"name": "a", "description": "x", "args"#,
                CutStep::Broken,
            ),
            (r#"[{"name": "a", "descrip"#, CutStep::Broken),
            (r#"{"plan": {"steps": [{"title": "x\"#, CutStep::Prose),
            (r#"{"title": "t", "steps": ["one", "tw"#, CutStep::Prose),
            (r#"{"questions": [{"text": "wh"#, CutStep::Outside),
        ];
        for (text, step) in cases {
            let cut = match_brackets(text, 0);
            assert!(!cut.complete, "{text}");
            assert_eq!(cut.end, text.len(), "{text}");
            assert_eq!(cut.step, step, "{text}");
        }
        // A mismatched closer closes the matching opener.
        let cut = match_brackets(r#"{"a": [1, 2} and more"#, 0);
        assert!(cut.complete);
        assert_eq!(cut.end, 12);
    }

    #[test]
    fn think_blocks_are_stripped() {
        let cases = [
            ("<think>a</think>b", "b"),
            ("x<THINK>a</Think>y<thinking>b</thinking>z", "xyz"),
            ("<think>never closed {\"a\": 1}", "never closed {\"a\": 1}"),
            ("reasoning only </think> answer", " answer"),
            ("no tags", "no tags"),
            ("a < b </thin> <t", "a < b </thin> <t"),
            ("x</THINK>y", "y"),
            ("é<think>ü</think>🚀", "é🚀"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_think(input), want, "{input}");
        }
    }

    #[test]
    fn code_fences_are_found() {
        let text =
            "a\n```json\n{\"x\": 1}\n```\nb\n  ```\n[2]\n```\n```python {\"y\": 3}```\n```\nopen";
        assert_eq!(
            fenced_blocks(text),
            ["\n{\"x\": 1}\n", "\n[2]\n", " {\"y\": 3}", "\nopen"]
        );
        // A fence quoted inside a JSON string is no fence: its line break is escaped.
        assert!(fenced_blocks(r#"{"t": "```python\nx\n```"}"#).is_empty());
    }

    #[test]
    fn titles_are_cut_on_char_boundaries() {
        assert_eq!(truncate_title("short", 60), "short");
        assert_eq!(truncate_title("line one\nline two", 60), "line one");
        let cjk = "巴".repeat(80);
        assert_eq!(truncate_title(&cjk, 60), format!("{}…", "巴".repeat(60)));
        assert_eq!(truncate_title("aaaa bbbb cccc", 12), "aaaa bbbb…");
        assert_eq!(derive_title("  "), "Untitled plan");
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
