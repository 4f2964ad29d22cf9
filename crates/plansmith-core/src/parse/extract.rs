//! Finding the JSON in model output: reasoning and fences set aside, candidates cut out of the
//! prose by a bracket matcher, the most plan-like one kept, a cut-off output noticed.

use serde_json::Value;

use super::error::ParseError;
use super::fields::lookup;
use super::repair::{parse_candidate, read_as_written};
use super::text::{fenced_blocks, strip_think};
#[cfg(doc)]
use super::to_plan;
use crate::diagnostic::{Code, Diagnostic};
use crate::text::snippet;

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
pub(super) struct Extracted {
    pub(super) value: Value,
    /// Anything beyond `serde_json` on the extracted slice was needed.
    pub(super) repaired: bool,
    /// The candidate never closed: the output was cut off and closed by repair.
    truncated: bool,
    /// Whether the output was cut off inside the last step (see [`CutStep`]).
    pub(super) cut_step: CutStep,
    /// The JSON was a string holding JSON.
    double_encoded: bool,
}

impl Extracted {
    pub(super) fn diagnostics(&self) -> Vec<Diagnostic> {
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

pub(super) fn extract(raw: &str) -> Result<Extracted, ParseError> {
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
pub(super) enum CutStep {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
