//! Grounding: a later step's argument that states a result no step has returned yet is turned
//! into a reference to the earlier step that will return it.
//!
//! A plan is written before anything runs, so the only values a planner can know are the ones in
//! the request: the query, the profile, the context, the conversation and, when replanning, the
//! feedback and the previous plan. Small models still write what they expect a tool to return
//! (`"body": "The weather in Paris is sunny, 22°C"` after a `get_weather` call, `"amount": 120`
//! after the tip was computed) instead of `{"$ref": "s1.output"}`, and the plan then sends the
//! invented text. This pass finds such values and points them at the earlier step's output.
//!
//! Three signs tell such a value:
//!
//! - **Invented**: the value of a required, free-form top-level argument (no `enum`, `const` or
//!   `format`; a string, number or integer) that is not a date or a time (a planner resolves
//!   "tomorrow" itself), and either holds a number that the request does not hold, or is text
//!   whose content words are mostly new to the request (at least two of three or more, or both
//!   of two). Optional arguments are left alone here: they are knobs (`max_results`, `unit`) that
//!   a planner may set without being told. The producer is an earlier step of another tool (the
//!   same tool called again, as in parallel calls, takes values of its own) whose output
//!   fits the argument's type: the whole output when the tool declares no output schema or a
//!   schema of a fitting type, else the output field of a fitting type that shares the most
//!   words with the argument (its name and description). Among several producers the one whose
//!   tool shares the most words with the value and the argument wins, then the nearest.
//! - **Named result**: a value the request does not state word for word, for an argument (required
//!   or not) named like a field that an earlier step of another tool declares in its output
//!   (`business_id` after a search that returns `business_id`, a made-up `hotel_name` after a
//!   hotel search). The name says the value is that step's result.
//! - **Copied input**: a number an earlier step of another tool takes under another name, written
//!   again although the request writes it fewer times than the plan uses it, where that step
//!   declares an output field whose name or description shares a word with the argument's name
//!   (`amount: 100` after a tip computed from `bill_total: 100` that returns `total_amount`); a
//!   field sharing it by name goes first. The model wrote the input it
//!   knew for the result it could not know.
//!
//! Nothing changes when no earlier step fits: the value stays as written. Every change is an
//! `auto_fixed` warning that quotes the value it replaced.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::catalog::Catalog;
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Action, Plan, StepRef, escape_pointer};
use crate::request::PlanRequest;

/// Words too common to tell an invented text from one taken from the request.
const STOP_WORDS: &[&str] = &[
    "the", "and", "for", "with", "that", "this", "are", "was", "were", "has", "have", "had", "you",
    "your", "our", "its", "his", "her", "their", "them", "they", "not", "but", "from", "into",
    "about", "will", "would", "can", "could", "should", "please", "here", "there", "what", "which",
    "who", "when", "where", "how", "all", "any", "some", "also", "just", "than", "then", "now",
    "one", "out", "get", "see", "let", "know", "thanks", "thank", "dear", "best", "regards",
    "hello", "hey", "very", "much", "more", "most", "like", "been", "being", "these", "those",
    "over", "only", "such", "each", "per", "via",
];

/// What the request lets a planner know: its numbers and its words.
struct Known {
    numbers: Vec<f64>,
    words: HashSet<String>,
    /// All of it, lower-cased.
    text: String,
}

impl Known {
    fn of(request: &PlanRequest) -> Known {
        let mut text = String::new();
        let mut add = |part: &str| {
            text.push_str(part);
            text.push('\n');
        };
        add(&request.query);
        if let Some(profile) = &request.profile {
            add(profile);
        }
        for part in &request.context {
            add(part);
        }
        for message in &request.history {
            add(&message.content);
        }
        for turn in &request.turns {
            add(&turn.query);
            add(&turn.plan);
        }
        if let Some(feedback) = &request.feedback {
            if let Some(said) = &feedback.text {
                add(said);
            }
            for observation in &feedback.observations {
                add(observation);
            }
            if let Some(previous) = &feedback.previous
                && let Ok(previous) = serde_json::to_string(&previous.steps)
            {
                add(&previous);
            }
        }
        Known {
            numbers: numbers_in(&text),
            words: words_in(&text).into_iter().collect(),
            text: text.to_lowercase(),
        }
    }

    /// How many times the request writes `number` (as itself or as a percentage).
    fn times_written(&self, number: f64) -> usize {
        let close = |known: f64, n: f64| (known - n).abs() <= 1e-9 * known.max(1.0);
        let number = number.abs();
        self.numbers
            .iter()
            .filter(|&&known| close(known, number) || close(known, number * 100.0))
            .count()
    }

    /// Whether the request states `value` as it is: a number it writes, or text it holds word
    /// for word (case aside).
    fn states(&self, value: &Value) -> bool {
        match value {
            Value::Number(number) => number.as_f64().is_some_and(|n| self.has_number(n)),
            Value::String(text) => {
                let text = text.trim().to_lowercase();
                !text.is_empty() && self.text.contains(&text)
            }
            _ => true,
        }
    }

    /// A number is known when the request writes it, or writes it as a percentage (`5%` is
    /// also `0.05`).
    fn has_number(&self, number: f64) -> bool {
        let close = |known: f64, n: f64| (known - n).abs() <= 1e-9 * known.max(1.0);
        let number = number.abs();
        self.numbers
            .iter()
            .any(|&known| close(known, number) || close(known, number * 100.0))
    }

    /// A word is known when the request has it, or a word with the same stem (the longer one
    /// starts with all but the last three letters of the shorter, at least four of them).
    fn has_word(&self, word: &str) -> bool {
        self.words.contains(word) || self.words.iter().any(|known| same_stem(known, word))
    }
}

fn same_stem(a: &str, b: &str) -> bool {
    let (short, long) = if a.chars().count() <= b.chars().count() {
        (a, b)
    } else {
        (b, a)
    };
    let n = short.chars().count().saturating_sub(3).max(4);
    if short.chars().count() < n {
        return false;
    }
    let stem: String = short.chars().take(n).collect();
    long.starts_with(&stem)
}

/// The numbers written in `text`, as absolute values: `$1,250.50` is 1250.5, `2023-01-31` is
/// 2023, 1 and 31, `20%` is 20.
fn numbers_in(text: &str) -> Vec<f64> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let mut digits = String::new();
        while i < chars.len() {
            let c = chars[i];
            let next_is_digit = chars.get(i + 1).is_some_and(char::is_ascii_digit);
            if c.is_ascii_digit() {
                digits.push(c);
            } else if c == ','
                && chars.get(i + 1..i + 4).is_some_and(|group| {
                    group.iter().all(char::is_ascii_digit)
                        && !chars.get(i + 4).is_some_and(char::is_ascii_digit)
                })
            {
                // A thousands separator: `1,250`.
            } else if c == '.' && next_is_digit && !digits.contains('.') {
                digits.push(c);
            } else {
                break;
            }
            i += 1;
        }
        if let Ok(number) = digits.parse::<f64>() {
            out.push(number);
        }
    }
    out
}

/// The content words of `text`, lower-cased: runs of letters of three or more, less the
/// [`STOP_WORDS`].
fn words_in(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphabetic())
        .filter(|word| word.chars().count() >= 3)
        .map(str::to_lowercase)
        .filter(|word| !STOP_WORDS.contains(&word.as_str()))
        .collect()
}

/// The day forms tools ask for besides ISO 8601's (`mm-dd-yyyy` and the like, see
/// `validate::dates`).
const DAY_FORMS: &[&str] = &[
    "%m-%d-%Y", "%d-%m-%Y", "%m/%d/%Y", "%d/%m/%Y", "%Y/%m/%d", "%d.%m.%Y",
];

/// A date, a time or a moment, in the forms plans write them.
fn is_date_or_time(text: &str) -> bool {
    let text = text.trim();
    DAY_FORMS
        .iter()
        .any(|form| chrono::NaiveDate::parse_from_str(text, form).is_ok())
        || chrono::DateTime::parse_from_rfc3339(text).is_ok()
        || chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok()
        || chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").is_ok()
        || chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M").is_ok()
        || chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").is_ok()
        || chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M").is_ok()
        || chrono::NaiveTime::parse_from_str(text, "%H:%M").is_ok()
        || chrono::NaiveTime::parse_from_str(text, "%H:%M:%S").is_ok()
}

/// The JSON types a schema admits (empty: any).
fn types_of(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(ty)) => vec![ty.as_str()],
        Some(Value::Array(types)) => types.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Whether a value of `produced` types may fill an argument of `expected` types.
fn fits(produced: &[&str], expected: &[&str]) -> bool {
    produced.is_empty()
        || expected.is_empty()
        || produced
            .iter()
            .any(|p| expected.contains(p) || (*p == "integer" && expected.contains(&"number")))
}

/// What [`invented`] says of text whose words are mostly new to the request.
const NEW_WORDS: &str = "words the request does not have";

/// Why `value` cannot have come from the request, or `None` when it may have.
fn invented(value: &Value, known: &Known) -> Option<&'static str> {
    match value {
        Value::Number(number) => {
            let number = number.as_f64()?;
            (!known.has_number(number)).then_some("a number the request does not give")
        }
        Value::String(text) => {
            if text.trim().is_empty() || is_date_or_time(text) {
                return None;
            }
            if numbers_in(text).iter().any(|n| !known.has_number(*n)) {
                return Some("a number the request does not give");
            }
            let words = words_in(text);
            let unknown = words.iter().filter(|word| !known.has_word(word)).count();
            let mostly_new = words.len() >= 3 && unknown >= 2 && unknown * 2 >= words.len();
            // Two words, both new: a short result such as a translation ("Bonjour, le monde").
            let all_new = words.len() == 2 && unknown == 2;
            (mostly_new || all_new).then_some(NEW_WORDS)
        }
        _ => None,
    }
}

/// Numbers a request writes as words ("three countries", "a dozen eggs").
const NUMBER_WORDS: &[(&str, f64)] = &[
    ("zero", 0.0),
    ("one", 1.0),
    ("two", 2.0),
    ("three", 3.0),
    ("four", 4.0),
    ("five", 5.0),
    ("six", 6.0),
    ("seven", 7.0),
    ("eight", 8.0),
    ("nine", 9.0),
    ("ten", 10.0),
    ("eleven", 11.0),
    ("twelve", 12.0),
    ("twenty", 20.0),
    ("thirty", 30.0),
    ("fifty", 50.0),
    ("hundred", 100.0),
    ("thousand", 1e3),
    ("million", 1e6),
    ("billion", 1e9),
    ("dozen", 12.0),
    ("twice", 2.0),
    ("double", 2.0),
    ("triple", 3.0),
    ("half", 0.5),
];

/// Lengths a request gives by naming a period ("the next week" is 7 days, "the past decade"
/// 10 years): the numbers a planner may take from the word.
const PERIOD_WORDS: &[(&str, &[f64])] = &[
    ("minute", &[60.0]),
    ("hour", &[60.0]),
    ("day", &[24.0]),
    ("week", &[7.0]),
    ("weekly", &[7.0]),
    ("fortnight", &[14.0]),
    ("month", &[30.0]),
    ("monthly", &[30.0]),
    ("quarter", &[3.0]),
    ("year", &[12.0, 52.0, 365.0]),
    ("yearly", &[12.0, 365.0]),
    ("annual", &[12.0, 365.0]),
    ("decade", &[10.0]),
    ("century", &[100.0]),
];

/// Words that scale the number before them ("213 million").
const SCALE_WORDS: &[(&str, f64)] = &[
    ("thousand", 1e3),
    ("million", 1e6),
    ("billion", 1e9),
    ("trillion", 1e12),
];

/// Text of more words than this is composed by the planner (a body, a query), not a name or a
/// value the request should have given.
const NAME_WORDS: usize = 4;

/// What a request gives a tool call's values, for [`unstated`]: what it [`Known`]s, with the
/// numbers it writes as words ("three"), with a scale ("213 million") or as a period's lengths
/// ("next week": 7), 0 and 1 (a planner's neutral values) and the current year. Read once per
/// plan.
pub(crate) struct Given(Known);

impl Given {
    /// What `request` gives.
    pub(crate) fn of(request: &PlanRequest) -> Given {
        let mut known = Known::of(request);
        let words: HashSet<String> = known
            .text
            .split(|c: char| !c.is_alphabetic())
            .map(str::to_owned)
            .collect();
        known.numbers.extend(
            NUMBER_WORDS
                .iter()
                .filter(|(word, _)| words.contains(*word))
                .map(|(_, n)| *n),
        );
        for (word, lengths) in PERIOD_WORDS {
            if words.contains(*word) || words.contains(&format!("{word}s")) {
                known.numbers.extend(lengths.iter().copied());
            }
        }
        // "213 million" is 213000000.
        let tokens: Vec<&str> = known.text.split_whitespace().collect();
        let mut scaled = Vec::new();
        for pair in tokens.windows(2) {
            let scale = SCALE_WORDS
                .iter()
                .find(|(word, _)| pair[1].trim_matches(|c: char| !c.is_alphabetic()) == *word);
            if let Some((_, scale)) = scale {
                scaled.extend(numbers_in(pair[0]).into_iter().map(|n| n * scale));
            }
        }
        known.numbers.extend(scaled);
        known.numbers.extend([0.0, 1.0]);
        if let Some(now) = request.now {
            known.numbers.push(f64::from(chrono::Datelike::year(&now)));
        }
        Given(known)
    }
}

/// The required arguments of a call to `tool` with `arguments` whose values the request does
/// not give ([`invented`]: a number it does not write, a name whose words are mostly new to
/// it), by name; and how many required arguments the call fills. Only free-form values count (a
/// string, number or integer with no `enum`, `const` or `format`, not a date or time, not a
/// `$ref`, and text of at most [`NAME_WORDS`] words), and lists of numbers the request gives
/// none of; what is given is [`Given`].
pub(crate) fn unstated(
    arguments: &serde_json::Map<String, Value>,
    tool: &crate::catalog::Tool,
    given: &Given,
) -> (Vec<String>, usize) {
    let required = tool.required_parameters();
    let properties = tool.input_schema.get("properties");
    let known = &given.0;
    let mut filled = 0;
    let mut out = Vec::new();
    for key in required {
        let Some(value) = arguments.get(key) else {
            continue;
        };
        filled += 1;
        if StepRef::reference_in(value).is_some() {
            continue;
        }
        let schema = properties.and_then(|p| p.get(key)).unwrap_or(&Value::Null);
        if ["enum", "const", "format"]
            .iter()
            .any(|k| schema.get(k).is_some())
        {
            continue;
        }
        let expected = types_of(schema);
        // A list of numbers none of which the request gives (`features: [100000, 100000, …]`
        // for "the average house price in California") is guessed as a whole.
        if let Some(items) = value.as_array()
            && (expected.is_empty() || expected.contains(&"array"))
        {
            if !items.is_empty()
                && items
                    .iter()
                    .all(|item| item.is_number() && invented(item, known).is_some())
            {
                out.push(key.to_owned());
            }
            continue;
        }
        if !expected.is_empty()
            && !expected
                .iter()
                .any(|t| ["string", "number", "integer"].contains(t))
        {
            continue;
        }
        // Longer text is composed, not given: a message's body, a query, code.
        let composed = value
            .as_str()
            .is_some_and(|text| text.split_whitespace().count() > NAME_WORDS);
        if !composed && invented(value, known).is_some() {
            out.push(key.to_owned());
        }
    }
    (out, filled)
}

/// How many of `words` occur, by stem, in `other`.
fn overlap(words: &[String], other: &[String]) -> usize {
    words
        .iter()
        .filter(|word| other.iter().any(|o| o == *word || same_stem(o, word)))
        .count()
}

/// The words that name and describe a schema field: its name split at `_` and case changes,
/// and its description.
fn field_words(name: &str, schema: &Value) -> Vec<String> {
    let mut spaced = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            spaced.push(' ');
        }
        spaced.push(if c == '_' || c == '.' || c == '-' {
            ' '
        } else {
            c
        });
    }
    let mut words = words_in(&spaced);
    if let Some(description) = schema.get("description").and_then(Value::as_str) {
        words.extend(words_in(description));
    }
    words
}

/// Where an output that fills an argument of `expected` types is found in the output of a
/// tool with `output_schema`: the path after `output`, or `None` when nothing there fits.
fn output_path(
    output_schema: Option<&Value>,
    expected: &[&str],
    argument_words: &[String],
) -> Option<String> {
    let Some(schema) = output_schema else {
        return Some(String::new());
    };
    let produced = types_of(schema);
    let properties = schema.get("properties").and_then(Value::as_object);
    let is_object = produced.is_empty() || produced.contains(&"object");
    if let Some(properties) = properties.filter(|_| is_object) {
        let mut best: Option<(usize, &String)> = None;
        for (name, field) in properties {
            if !fits(&types_of(field), expected) {
                continue;
            }
            let score = overlap(argument_words, &field_words(name, field));
            if best.is_none_or(|(top, _)| score > top) {
                best = Some((score, name));
            }
        }
        if let Some((_, name)) = best.filter(|(_, name)| plain_path(name)) {
            return Some(format!(".{name}"));
        }
    }
    fits(&produced, expected).then(String::new)
}

/// A field name with case, `_`, `-` and `.` set aside: `hotel_name` and `hotelName` are one.
fn plain_name(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The output fields of a tool's declared output schema that are objects' properties.
fn output_fields(tool: &crate::catalog::Tool) -> Option<&serde_json::Map<String, Value>> {
    let schema = tool.output_schema.as_ref()?;
    let types = types_of(schema);
    if !types.is_empty() && !types.contains(&"object") {
        return None;
    }
    schema.get("properties").and_then(Value::as_object)
}

/// Whether a field name can follow `.` in a reference path as it is.
fn plain_path(name: &str) -> bool {
    name.chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// The earlier tool steps of `plan` before `idx`, nearest first, with their tools; steps of the
/// tool `except` are left out (a tool's output seldom feeds the same tool, while the same tool
/// called twice often takes the same values).
fn earlier_tools<'a>(
    plan: &'a Plan,
    idx: usize,
    catalog: &'a Catalog,
    except: &'a str,
) -> impl Iterator<
    Item = (
        usize,
        &'a serde_json::Map<String, Value>,
        &'a crate::catalog::Tool,
    ),
> + 'a {
    plan.steps
        .iter()
        .enumerate()
        .take(idx)
        .rev()
        .filter_map(move |(earlier_idx, step)| {
            let Action::Tool { name, arguments } = &step.action else {
                return None;
            };
            if name == except {
                return None;
            }
            let tool = catalog.tool(name).map(|t| &t.tool)?;
            Some((earlier_idx, arguments, tool))
        })
}

/// A value the request does not state, for an argument named like a field an earlier step
/// returns (`hotel_name` after a hotel search returning `hotel_name`): that step's result, not a
/// value of the planner's own. Optional arguments count too, since the name says it is data.
fn named_result(
    plan: &Plan,
    idx: usize,
    catalog: &Catalog,
    consumer: &str,
    key: &str,
    expected: &[&str],
) -> Option<(usize, String)> {
    earlier_tools(plan, idx, catalog, consumer).find_map(|(earlier_idx, _, producer)| {
        field_named(producer, key, expected).map(|name| (earlier_idx, format!(".{name}")))
    })
}

/// The output field of `producer` named like the argument `key` (case and separators aside,
/// [`plain_name`]) whose type fits `expected`, when a reference path can name it as it is.
fn field_named<'a>(
    producer: &'a crate::catalog::Tool,
    key: &str,
    expected: &[&str],
) -> Option<&'a String> {
    let wanted = plain_name(key);
    output_fields(producer)?
        .iter()
        .find(|(name, field)| {
            plain_name(name) == wanted && plain_path(name) && fits(&types_of(field), expected)
        })
        .map(|(name, _)| name)
}

/// The tool the plan's first call needs a result of, but which no call calls: the first call
/// fills an argument with a value the request does not give ([`invented`]: a number it does
/// not write, text mostly new to it, never a date or a time; a made-up `business_id` for
/// "find gyms in London and show me their reviews"), and another of the `offered` tools,
/// called nowhere in the plan, returns a field of that name and type. Optional arguments
/// count, as for a named result: the name says the value is data. Small models skip the
/// lookup a chain starts with and invent its result. The argument's name and the producer's.
pub(crate) fn missing_producer<'a>(
    plan: &Plan,
    request: &PlanRequest,
    catalog: &Catalog,
    offered: &[&'a crate::catalog::Tool],
) -> Option<(String, &'a crate::catalog::Tool)> {
    let first = plan.steps.first()?;
    let Action::Tool { name, arguments } = &first.action else {
        return None;
    };
    let consumer = catalog.tool(name).map(|t| &t.tool)?;
    let called = plan.called_tools();
    let known = Known::of(request);
    let properties = consumer.input_schema.get("properties");
    arguments.iter().find_map(|(key, value)| {
        if known.states(value) || invented(value, &known).is_none() {
            return None;
        }
        let schema = properties
            .and_then(|p| p.get(key.as_str()))
            .unwrap_or(&Value::Null);
        if ["enum", "const", "format"]
            .iter()
            .any(|k| schema.get(k).is_some())
        {
            return None;
        }
        let expected = types_of(schema);
        let wanted = plain_name(key);
        offered
            .iter()
            .find(|producer| {
                producer.name != consumer.name
                    && !called.contains(&producer.name.as_str())
                    // A tool that takes the field itself (a sibling search by location id)
                    // passes it through; it does not find it.
                    && !producer
                        .required_parameters()
                        .iter()
                        .any(|input| plain_name(input) == wanted)
                    && field_named(producer, key, &expected).is_some()
            })
            .map(|producer| (key.clone(), *producer))
    })
}

/// A number an earlier step takes as one of its inputs (under another name), written again as
/// this argument although the request writes it fewer times than the plan uses it, where that
/// step returns a field named like the argument (`amount` after a tip computed from the bill
/// returns `total_amount`): the model copied the input for the result it could not know.
fn copied_input(
    plan: &Plan,
    idx: usize,
    catalog: &Catalog,
    consumer: &str,
    (key, schema): (&str, &Value),
    number: f64,
    known: &Known,
) -> Option<(usize, String)> {
    let same = |value: &Value| value.as_f64().is_some_and(|n| (n - number).abs() < 1e-9);
    let uses: usize = plan.steps[..=idx]
        .iter()
        .filter_map(|step| match &step.action {
            Action::Tool { arguments, .. } => Some(arguments.values().filter(|v| same(v)).count()),
            _ => None,
        })
        .sum();
    if uses <= known.times_written(number) {
        return None;
    }
    let expected = types_of(schema);
    let key_words = field_words(key, &Value::Null);
    let argument_words = field_words(key, schema);
    earlier_tools(plan, idx, catalog, consumer).find_map(|(earlier_idx, inputs, producer)| {
        if !inputs.iter().any(|(name, v)| name != key && same(v)) {
            return None;
        }
        let mut best: Option<((usize, usize, usize), &String)> = None;
        for (name, field) in output_fields(producer)? {
            if !plain_path(name) || !fits(&types_of(field), &expected) {
                continue;
            }
            let by_name = overlap(&key_words, &field_words(name, &Value::Null));
            let described = overlap(&key_words, &field_words(name, field));
            if described == 0 {
                continue;
            }
            let score = (
                by_name,
                described,
                overlap(&argument_words, &field_words(name, field)),
            );
            if best.is_none_or(|(top, _)| score > top) {
                best = Some((score, name));
            }
        }
        best.map(|(_, name)| (earlier_idx, format!(".{name}")))
    })
}

/// The earlier step whose output an invented value of a required argument most likely states,
/// and where in that output.
fn producer_of(
    plan: &Plan,
    idx: usize,
    catalog: &Catalog,
    consumer: &str,
    (key, schema): (&str, &Value),
    value: &Value,
) -> Option<(usize, String)> {
    let expected = types_of(schema);
    let argument_words = field_words(key, schema);
    let mut value_words = argument_words.clone();
    if let Value::String(text) = value {
        value_words.extend(words_in(text));
    }
    let mut best: Option<(usize, usize, String)> = None;
    for (earlier_idx, earlier) in plan.steps.iter().enumerate().take(idx) {
        let Action::Tool { name: producer, .. } = &earlier.action else {
            continue;
        };
        // The same tool called again takes values of its own (parallel calls), not the
        // earlier call's result.
        if producer == consumer {
            continue;
        }
        let Some(producer) = catalog.tool(producer).map(|t| &t.tool) else {
            continue;
        };
        let Some(path) = output_path(producer.output_schema.as_ref(), &expected, &argument_words)
        else {
            continue;
        };
        let mut producer_words = field_words(&producer.name, &Value::Null);
        producer_words.extend(words_in(&producer.description));
        let score = overlap(&value_words, &producer_words);
        if best.as_ref().is_none_or(|(top, _, _)| score >= *top) {
            best = Some((score, earlier_idx, path));
        }
    }
    best.map(|(_, idx, path)| (idx, path))
}

/// Replaces the argument values of `plan`'s tool steps that state an earlier step's result by
/// references to that step; returns one warning per replaced value.
///
/// Three signs tell such a value, tried in turn: a required argument's value that the request
/// cannot have given ([`invented`]); a value the request does not state for an argument named
/// like a field an earlier step returns ([`named_result`]); a number copied from an earlier
/// step's inputs ([`copied_input`]).
pub(crate) fn ground(plan: &mut Plan, request: &PlanRequest, catalog: &Catalog) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut known: Option<Known> = None;
    for idx in 1..plan.steps.len() {
        let Some(Action::Tool { name, arguments }) = plan.steps.get(idx).map(|s| &s.action) else {
            continue;
        };
        let Some(tool) = catalog.tool(name).map(|t| &t.tool) else {
            continue;
        };
        let required = tool.required_parameters();
        let properties = tool.input_schema.get("properties");
        let mut replacements = Vec::new();
        for (key, value) in arguments {
            if StepRef::reference_in(value).is_some() {
                continue;
            }
            let schema = properties.and_then(|p| p.get(key)).unwrap_or(&Value::Null);
            if ["enum", "const"].iter().any(|k| schema.get(k).is_some()) {
                continue;
            }
            let expected = types_of(schema);
            let free_form = ["string", "number", "integer"];
            if !expected.is_empty() && !expected.iter().any(|t| free_form.contains(t)) {
                continue;
            }
            let known = known.get_or_insert_with(|| Known::of(request));
            let invented = (required.contains(&key.as_str()) && schema.get("format").is_none())
                .then(|| invented(value, known))
                .flatten();
            let found = if let Some(why) = invented {
                producer_of(plan, idx, catalog, name, (key, schema), value)
                    .map(|found| (found, why))
            } else {
                None
            };
            let found = found.or_else(|| {
                (!known.states(value))
                    .then(|| named_result(plan, idx, catalog, name, key, &expected))
                    .flatten()
                    .map(|found| (found, "a result an earlier step returns by that name"))
            });
            let found = found.or_else(|| {
                let number = value.as_f64()?;
                copied_input(plan, idx, catalog, name, (key, schema), number, known)
                    .map(|found| (found, "an earlier step's input copied for its result"))
            });
            if let Some(((producer_idx, path), why)) = found {
                let producer_id = plan.steps[producer_idx].id.clone();
                replacements.push((key.clone(), format!("{producer_id}.output{path}"), why));
            }
        }
        let Some(step) = plan.steps.get_mut(idx) else {
            continue;
        };
        let Action::Tool { arguments, .. } = &mut step.action else {
            continue;
        };
        for (key, reference, why) in replacements {
            let Some(slot) = arguments.get_mut(&key) else {
                continue;
            };
            let written = std::mem::replace(slot, json!({ "$ref": reference }));
            diags.push(
                Diagnostic::warning(
                    Code::AutoFixed,
                    format!("/steps/{idx}/action/arguments/{}", escape_pointer(&key)),
                    format!(
                        "step `{}` wrote `{key}` as a result no step has returned yet ({why}); \
                         it now takes `{reference}`",
                        step.id
                    ),
                )
                .with_step(step.id.clone())
                .with_value(written),
            );
        }
    }
    let known = known.unwrap_or_else(|| Known::of(request));
    diags.extend(drop_invented_options(plan, &known, catalog));
    diags.extend(drop_unasked_items(plan, &known, catalog));
    diags
}

/// Drops the items of a list drawn from a closed set (`items.enum`) that the request does not
/// mention, when it mentions some of them. Small models list every choice the schema offers
/// (`add_ons: ["Backstage Pass", "VIP Seating", "Parking Pass"]` for "the one with backstage
/// access"), which asks the tool for what nobody wanted. An item is mentioned when the request
/// has it as a phrase or has one of its content words (a stem will do), outside the words
/// another argument's value takes (the `history` of "Natural History Museum" names the
/// museum, not a feature). A list none of whose items is mentioned ("everything about the
/// museum") stays as written.
fn drop_unasked_items(plan: &mut Plan, known: &Known, catalog: &Catalog) -> Vec<Diagnostic> {
    let request = tokens_in(&known.text);
    let mut diags = Vec::new();
    for (idx, step_id, name, arguments, tool) in tool_steps(plan, catalog) {
        let properties = tool.input_schema.get("properties");
        let mut pruned = Vec::new();
        for (key, value) in arguments.iter() {
            let closed = properties
                .and_then(|p| p.get(key.as_str()))
                .and_then(|schema| schema.get("items"))
                .is_some_and(|items| items.get("enum").is_some());
            let Some(items) = value.as_array().filter(|items| closed && items.len() >= 2) else {
                continue;
            };
            let Some(texts) = items.iter().map(Value::as_str).collect::<Option<Vec<_>>>() else {
                continue;
            };
            let taken = taken_by_others(&request, arguments, key);
            let (kept, dropped): (Vec<&str>, Vec<&str>) = texts
                .iter()
                .partition(|item| mentions(&request, &taken, item));
            if !kept.is_empty() && !dropped.is_empty() {
                pruned.push((key.clone(), json!(kept), json!(dropped)));
            }
        }
        for (key, kept, dropped) in pruned {
            let Some(slot) = arguments.get_mut(&key) else {
                continue;
            };
            let written = std::mem::replace(slot, kept);
            diags.push(
                Diagnostic::warning(
                    Code::AutoFixed,
                    format!("/steps/{idx}/action/arguments/{}", escape_pointer(&key)),
                    format!(
                        "step `{step_id}` listed {dropped} in `{key}` of `{name}`, which the \
                         request does not ask for; they were left out"
                    ),
                )
                .with_step(step_id.clone())
                .with_value(written),
            );
        }
    }
    diags
}

/// Each tool step of `plan` whose tool `catalog` has: its index, id, tool name, arguments (to
/// change) and tool.
fn tool_steps<'a>(
    plan: &'a mut Plan,
    catalog: &'a Catalog,
) -> impl Iterator<
    Item = (
        usize,
        String,
        &'a str,
        &'a mut serde_json::Map<String, Value>,
        &'a crate::catalog::Tool,
    ),
> {
    plan.steps.iter_mut().enumerate().filter_map(|(idx, step)| {
        let step_id = step.id.clone();
        let Action::Tool { name, arguments } = &mut step.action else {
            return None;
        };
        let tool = catalog.tool(name).map(|t| &t.tool)?;
        Some((idx, step_id, name.as_str(), arguments, tool))
    })
}

/// The words of `text`, lower-cased: runs of letters and digits, stop words included (a
/// phrase is matched word for word).
fn tokens_in(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether two words are the same word (or share a stem, [`same_stem`]).
fn same_word(a: &str, b: &str) -> bool {
    a == b || same_stem(a, b)
}

/// Where `phrase` starts in `words`, each of its words matching in turn.
fn phrase_starts(words: &[String], phrase: &[String]) -> Vec<usize> {
    if phrase.is_empty() || phrase.len() > words.len() {
        return Vec::new();
    }
    (0..=words.len() - phrase.len())
        .filter(|&start| {
            phrase
                .iter()
                .enumerate()
                .all(|(i, word)| same_word(&words[start + i], word))
        })
        .collect()
}

/// The positions of the request's words that the values of `arguments` other than `key` take.
fn taken_by_others(
    request: &[String],
    arguments: &serde_json::Map<String, Value>,
    key: &str,
) -> HashSet<usize> {
    let mut taken = HashSet::new();
    for (other, value) in arguments {
        if other == key {
            continue;
        }
        let texts: Vec<&str> = match value {
            Value::String(text) => vec![text.as_str()],
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        for text in texts {
            let phrase = tokens_in(text);
            for start in phrase_starts(request, &phrase) {
                taken.extend(start..start + phrase.len());
            }
        }
    }
    taken
}

/// Whether the request mentions `item` outside the `taken` words: as a phrase, or by one of
/// its content words.
fn mentions(request: &[String], taken: &HashSet<usize>, item: &str) -> bool {
    let phrase = tokens_in(item);
    let free = |start: usize, len: usize| (start..start + len).all(|i| !taken.contains(&i));
    phrase_starts(request, &phrase)
        .into_iter()
        .any(|start| free(start, phrase.len()))
        || words_in(item).iter().any(|word| {
            request
                .iter()
                .enumerate()
                .any(|(i, known)| !taken.contains(&i) && same_word(known, word))
        })
}

/// Drops each optional argument whose value is a name the request does not give: text of at
/// most [`NAME_WORDS`] words, mostly new to the request ([`invented`]), for a free-form string
/// (no `enum`, `const` or `format`). Small models fill optional filters with a guess (`title:
/// "The Great Gatsby"` for "a historical fiction book at the New York library"), which narrows
/// what the tool returns to something nobody asked for; left out, the tool's default applies.
/// Knobs of one word or a number (`unit: "cm"`, `max_results: 10`) stay.
fn drop_invented_options(plan: &mut Plan, known: &Known, catalog: &Catalog) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    for (idx, step_id, name, arguments, tool) in tool_steps(plan, catalog) {
        let required = tool.required_parameters();
        let properties = tool.input_schema.get("properties");
        let guessed: Vec<String> = arguments
            .iter()
            .filter(|(key, value)| {
                let Some(text) = value.as_str() else {
                    return false;
                };
                let schema = properties
                    .and_then(|p| p.get(key.as_str()))
                    .unwrap_or(&Value::Null);
                let expected = types_of(schema);
                !required.contains(&key.as_str())
                    && ["enum", "const", "format"]
                        .iter()
                        .all(|k| schema.get(k).is_none())
                    && (expected.is_empty() || expected.contains(&"string"))
                    && text.split_whitespace().count() <= NAME_WORDS
                    && invented(value, known) == Some(NEW_WORDS)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in guessed {
            let Some(value) = arguments.shift_remove(&key) else {
                continue;
            };
            diags.push(
                Diagnostic::warning(
                    Code::AutoFixed,
                    format!("/steps/{idx}/action/arguments/{}", escape_pointer(&key)),
                    format!(
                        "step `{step_id}` set the optional `{key}` of `{name}` to {value}, which \
                         the request does not give; it was left out, so the tool's default applies"
                    ),
                )
                .with_step(step_id.clone())
                .with_value(value),
            );
        }
    }
    diags
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Tool;
    use crate::plan::Step;

    fn tool(name: &str, description: &str, input: Value, output: Option<Value>) -> Tool {
        Tool {
            name: name.into(),
            description: description.into(),
            input_schema: input,
            output_schema: output,
            annotations: None,
        }
    }

    /// A catalog of one tool, `name`, that takes `input` and declares no output.
    fn one_tool(name: &str, input: Value) -> Catalog {
        Catalog::new(vec![tool(name, "A tool.", input, None)], Vec::new()).unwrap()
    }

    fn catalog() -> Catalog {
        Catalog::new(
            vec![
                tool(
                    "get_weather",
                    "Get the current weather for a city.",
                    json!({"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}),
                    None,
                ),
                tool(
                    "send_email",
                    "Send an email message to a recipient.",
                    json!({"type": "object", "properties": {
                        "to": {"type": "string", "format": "email"},
                        "subject": {"type": "string"}, "body": {"type": "string"},
                        "priority": {"type": "integer"}},
                        "required": ["to", "subject", "body"]}),
                    None,
                ),
                tool(
                    "calculate_tip",
                    "Calculate the tip for a bill.",
                    json!({"type": "object", "properties": {
                        "bill": {"type": "number"}, "percent": {"type": "number"}},
                        "required": ["bill", "percent"]}),
                    Some(json!({"type": "object", "properties": {
                        "tip_amount": {"type": "number", "description": "The tip"},
                        "total_amount": {"type": "number", "description": "Bill and tip"},
                        "note": {"type": "string"}}})),
                ),
                tool(
                    "create_invoice",
                    "Create an invoice for a client.",
                    json!({"type": "object", "properties": {
                        "client": {"type": "string"},
                        "total_amount": {"type": "number", "description": "Amount due"},
                        "due": {"type": "string"}},
                        "required": ["client", "total_amount", "due"]}),
                    None,
                ),
            ],
            Vec::new(),
        )
        .unwrap()
    }

    fn plan(steps: &[(&str, &str, Value)]) -> Plan {
        let mut plan = Plan::new("p1", "goal");
        for (id, name, arguments) in steps {
            let Value::Object(arguments) = arguments.clone() else {
                panic!("arguments must be an object");
            };
            let action = Action::Tool {
                name: (*name).into(),
                arguments,
            };
            plan.steps.push(Step::new(*id, *name, action));
        }
        plan
    }

    fn arguments(plan: &Plan, idx: usize) -> Value {
        match &plan.steps[idx].action {
            Action::Tool { arguments, .. } => Value::Object(arguments.clone()),
            _ => Value::Null,
        }
    }

    #[test]
    fn a_result_written_out_becomes_a_reference_to_the_step_that_returns_it() {
        let request = PlanRequest::new("What's the weather in Paris? Email it to bob@example.com");
        let mut plan = plan(&[
            ("s1", "get_weather", json!({"city": "Paris"})),
            (
                "s2",
                "send_email",
                json!({"to": "bob@example.com", "subject": "Weather in Paris",
                       "body": "The weather in Paris is sunny, 22°C."}),
            ),
        ]);
        let diags = ground(&mut plan, &request, &catalog());
        assert_eq!(
            arguments(&plan, 1),
            json!({"to": "bob@example.com", "subject": "Weather in Paris",
                   "body": {"$ref": "s1.output"}})
        );
        assert_eq!(diags.len(), 1);
        assert_eq!(diags[0].code, Code::AutoFixed);
        assert_eq!(diags[0].pointer, "/steps/1/action/arguments/body");
        assert_eq!(
            diags[0].value,
            Some(json!("The weather in Paris is sunny, 22°C."))
        );
        assert!(
            diags[0].message.contains("`s1.output`"),
            "{}",
            diags[0].message
        );
    }

    #[test]
    fn a_list_of_numbers_the_request_does_not_give_is_guessed() {
        let predict = tool(
            "predict",
            "Predict with a regression model.",
            json!({"type": "object", "properties": {
                "features": {"type": "array", "items": {"type": "number"}},
                "model": {"type": "object"}},
                "required": ["features", "model"]}),
            None,
        );
        let unstated_of = |query: &str, features: Value| {
            let arguments = json!({"features": features, "model": {"type": "linear"}});
            let given = Given::of(&PlanRequest::new(query));
            unstated(
                arguments.as_object().unwrap_or(&serde_json::Map::new()),
                &predict,
                &given,
            )
        };
        let guessed = unstated_of(
            "The average house price in California",
            json!([100000, 250000]),
        );
        assert_eq!(guessed, (vec!["features".to_owned()], 2));
        // One number the request gives, or none at all: not a guess.
        let some = unstated_of("Predict for 3 rooms", json!([3, 120]));
        assert_eq!(some, (Vec::new(), 2));
        assert_eq!(unstated_of("Predict", json!([])), (Vec::new(), 2));
    }

    #[test]
    fn an_optional_name_the_request_does_not_give_is_left_out() {
        let books = one_tool(
            "search_books",
            json!({"type": "object", "properties": {
                "location": {"type": "string"}, "genre": {"type": "string"},
                "title": {"type": "string"}, "author": {"type": "string"},
                "sort": {"type": "string"}, "note": {"type": "string"},
                "format": {"type": "string", "enum": ["paper back", "hard cover"]}},
                "required": ["location"]}),
        );
        let request = PlanRequest::new(
            "Can I find a historical fiction book at the New York public library?",
        );
        let mut plan = plan(&[(
            "s1",
            "search_books",
            json!({"location": "Bay Area Ridge", "genre": "historical fiction",
                   "title": "The Great Gatsby", "sort": "newest", "author": "New York Times",
                   "note": "anything set in the past that reads well", "format": "hard cover"}),
        )]);
        let diags = ground(&mut plan, &request, &books);
        // A required value and words the request has stay; so do a one-word knob, composed
        // text and an enum.
        assert_eq!(
            arguments(&plan, 0),
            json!({"location": "Bay Area Ridge", "genre": "historical fiction",
                   "sort": "newest", "author": "New York Times",
                   "note": "anything set in the past that reads well", "format": "hard cover"})
        );
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert_eq!(diags[0].pointer, "/steps/0/action/arguments/title");
        assert_eq!(diags[0].value, Some(json!("The Great Gatsby")));
    }

    #[test]
    fn items_of_a_closed_list_the_request_does_not_ask_for_are_left_out() {
        let shop = one_tool(
            "order_pizza",
            json!({"type": "object", "properties": {
                "shop": {"type": "string"},
                "toppings": {"type": "array", "items": {"type": "string",
                    "enum": ["mushrooms", "olives", "pepperoni", "onions", "Wi-Fi menu"]}},
                "sides": {"type": "array", "items": {"type": "string",
                    "enum": ["fries", "salad"]}},
                "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["shop"]}),
        );
        let request = PlanRequest::new(
            "Order a pizza with mushroom and olives from Onions Corner, and something on the side",
        );
        let mut ordered = plan(&[(
            "s1",
            "order_pizza",
            json!({"shop": "Onions Corner",
                   "toppings": ["mushrooms", "olives", "pepperoni", "onions"],
                   "sides": ["fries", "salad"], "tags": ["quick", "cheap"]}),
        )]);
        let diags = ground(&mut ordered, &request, &shop);
        // A stem will do ("mushroom"); the shop's name does not ask for onions; a list none of
        // whose items the request names, and a list that is not a closed set, stay.
        assert_eq!(
            arguments(&ordered, 0),
            json!({"shop": "Onions Corner", "toppings": ["mushrooms", "olives"],
                   "sides": ["fries", "salad"], "tags": ["quick", "cheap"]})
        );
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert_eq!(diags[0].pointer, "/steps/0/action/arguments/toppings");
        assert!(
            diags[0].message.contains("[\"pepperoni\",\"onions\"]"),
            "{diags:?}"
        );

        // An item of short words counts as a phrase ("Wi-Fi").
        let request = PlanRequest::new("A pizza with olives from a shop with a wi-fi menu");
        let mut ordered = plan(&[(
            "s1",
            "order_pizza",
            json!({"shop": "any", "toppings": ["olives", "Wi-Fi menu", "onions"]}),
        )]);
        ground(&mut ordered, &request, &shop);
        assert_eq!(
            arguments(&ordered, 0)["toppings"],
            json!(["olives", "Wi-Fi menu"])
        );
    }

    #[test]
    fn text_without_numbers_counts_when_most_of_its_words_are_new() {
        let request = PlanRequest::new("Check the weather in Oslo and mail it to ann@example.com");
        let mut plan = plan(&[
            ("s1", "get_weather", json!({"city": "Oslo"})),
            (
                "s2",
                "send_email",
                json!({"to": "ann@example.com", "subject": "Oslo weather",
                       "body": "Expect sunshine and mild breezes in Oslo."}),
            ),
        ]);
        ground(&mut plan, &request, &catalog());
        assert_eq!(arguments(&plan, 1)["body"], json!({"$ref": "s1.output"}));
    }

    #[test]
    fn a_computed_number_takes_the_output_field_that_fits_the_argument() {
        let request = PlanRequest::new(
            "Calculate a 20% tip on a bill of $100, then invoice John Doe for the total \
             amount including the tip, due 2023-01-31",
        );
        let mut plan = plan(&[
            ("s1", "calculate_tip", json!({"bill": 100, "percent": 20})),
            (
                "s2",
                "create_invoice",
                json!({"client": "John Doe", "total_amount": 120, "due": "2023-01-31"}),
            ),
        ]);
        let diags = ground(&mut plan, &request, &catalog());
        assert_eq!(
            arguments(&plan, 1),
            json!({"client": "John Doe", "total_amount": {"$ref": "s1.output.total_amount"},
                   "due": "2023-01-31"})
        );
        assert_eq!(diags.len(), 1, "{diags:?}");
    }

    #[test]
    fn values_the_request_gives_stay_as_written() {
        let request = PlanRequest::new(
            "Get the weather in Rome, and email carol@example.com that the meeting moved \
             to 3pm on Friday",
        );
        let written = json!({"to": "carol@example.com", "subject": "Meeting moved",
                             "body": "Hi Carol, the meeting moved to 3pm on Friday.",
                             "priority": 5});
        let mut plan = plan(&[
            ("s1", "get_weather", json!({"city": "Rome"})),
            ("s2", "send_email", written.clone()),
        ]);
        let diags = ground(&mut plan, &request, &catalog());
        // `priority` is optional: a knob, not data passed along.
        assert_eq!(arguments(&plan, 1), written);
        assert!(diags.is_empty(), "{diags:?}");
    }

    #[test]
    fn without_an_earlier_step_or_a_fitting_output_nothing_changes() {
        let request = PlanRequest::new("Email ann@example.com the forecast");
        let lone = json!({"to": "ann@example.com", "subject": "Forecast",
                          "body": "Rain expected tomorrow with 12 mm."});
        let mut alone = plan(&[("s1", "send_email", lone.clone())]);
        assert!(ground(&mut alone, &request, &catalog()).is_empty());
        assert_eq!(arguments(&alone, 0), lone);

        // The tip's output has a string field only for text; a number argument takes a number
        // field, and a text argument the one string field.
        let request = PlanRequest::new("Tip 15% on 80 and email the note to ann@example.com");
        let mut plan = plan(&[
            ("s1", "calculate_tip", json!({"bill": 80, "percent": 15})),
            (
                "s2",
                "send_email",
                json!({"to": "ann@example.com", "subject": "Tip", "body": "The tip is 12."}),
            ),
        ]);
        ground(&mut plan, &request, &catalog());
        assert_eq!(
            arguments(&plan, 1)["body"],
            json!({"$ref": "s1.output.note"})
        );
    }

    #[test]
    fn a_replan_knows_what_the_run_observed() {
        let mut request = PlanRequest::new("Weather in Paris, emailed to bob@example.com");
        request.feedback = Some(crate::request::Feedback {
            observations: vec!["s1 returned: sunny, 22°C in Paris".into()],
            ..Default::default()
        });
        let written = json!({"to": "bob@example.com", "subject": "Paris",
                             "body": "Paris: sunny, 22°C"});
        let mut plan = plan(&[
            ("s1", "get_weather", json!({"city": "Paris"})),
            ("s2", "send_email", written.clone()),
        ]);
        assert!(ground(&mut plan, &request, &catalog()).is_empty());
        assert_eq!(arguments(&plan, 1), written);
    }

    #[test]
    fn a_short_result_with_only_new_words_is_passed_along() {
        let request = PlanRequest::new(
            "Translate 'Hello, World!' from English to French and text it to 1234567890",
        );
        let mut plan = plan(&[
            (
                "s1",
                "translate",
                json!({"text": "Hello, World!", "target": "French"}),
            ),
            (
                "s2",
                "send_sms",
                json!({"phone_number": "1234567890", "message": "Bonjour, le monde!"}),
            ),
        ]);
        ground(&mut plan, &request, &results_catalog());
        assert_eq!(
            arguments(&plan, 1)["message"],
            json!({"$ref": "s1.output.translated_text"})
        );
        assert_eq!(arguments(&plan, 1)["phone_number"], json!("1234567890"));
    }

    #[test]
    fn an_argument_named_like_an_earlier_result_takes_it_unless_the_request_states_it() {
        let request =
            PlanRequest::new("Find hair salons in Paris and show me the reviews of the first one");
        let mut written = plan(&[
            (
                "s1",
                "find_places",
                json!({"query": "hair salons in Paris"}),
            ),
            (
                "s2",
                "place_reviews",
                json!({"business_id": "1234567890", "limit": 20}),
            ),
        ]);
        let diags = ground(&mut written, &request, &results_catalog());
        // `business_id` is optional, yet named like the search's result; `limit` is a knob.
        assert_eq!(
            arguments(&written, 1),
            json!({"business_id": {"$ref": "s1.output.business_id"}, "limit": 20})
        );
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert!(
            diags[0].message.contains("by that name"),
            "{}",
            diags[0].message
        );

        // The person named the business: their value stays.
        let request = PlanRequest::new(
            "Find hair salons in Paris and show me the reviews of business ChIJ42",
        );
        let mut written = plan(&[
            (
                "s1",
                "find_places",
                json!({"query": "hair salons in Paris"}),
            ),
            ("s2", "place_reviews", json!({"business_id": "ChIJ42"})),
        ]);
        assert!(ground(&mut written, &request, &results_catalog()).is_empty());
        assert_eq!(arguments(&written, 1)["business_id"], json!("ChIJ42"));
    }

    #[test]
    fn an_input_copied_for_the_result_becomes_a_reference() {
        let request = PlanRequest::new(
            "Calculate a 20% tip on a bill of $100 and invoice John Doe the total",
        );
        let mut written = plan(&[
            ("s1", "calculate_tip", json!({"bill": 100, "percent": 20})),
            (
                "s2",
                "bill_client",
                json!({"client": "John Doe", "amount": 100}),
            ),
        ]);
        let diags = ground(&mut written, &request, &results_catalog());
        assert_eq!(diags.len(), 1, "{diags:?}");
        let reference = arguments(&written, 1)["amount"]["$ref"].clone();
        assert!(
            reference == json!("s1.output.tip_amount")
                || reference == json!("s1.output.total_amount"),
            "{reference}"
        );

        // The request writes the number twice: both uses are the person's.
        let request = PlanRequest::new(
            "Calculate a 20% tip on a bill of $100 and invoice John Doe 100 for the room",
        );
        let mut written = plan(&[
            ("s1", "calculate_tip", json!({"bill": 100, "percent": 20})),
            (
                "s2",
                "bill_client",
                json!({"client": "John Doe", "amount": 100}),
            ),
        ]);
        assert!(ground(&mut written, &request, &results_catalog()).is_empty());

        // The same tool twice takes the same values on purpose.
        let request = PlanRequest::new("Tip 20% and 15% on a bill of $100");
        let mut written = plan(&[
            ("s1", "calculate_tip", json!({"bill": 100, "percent": 20})),
            ("s2", "calculate_tip", json!({"bill": 100, "percent": 15})),
        ]);
        assert!(ground(&mut written, &request, &results_catalog()).is_empty());
    }

    #[test]
    fn parallel_calls_of_one_tool_keep_their_own_values() {
        let request = PlanRequest::new("Weather in LA and NYC, please");
        let written = [json!({"city": "Los Angeles"}), json!({"city": "New York"})];
        let mut calls = plan(&[
            ("s1", "get_weather", written[0].clone()),
            ("s2", "get_weather", written[1].clone()),
        ]);
        assert!(ground(&mut calls, &request, &catalog()).is_empty());
        assert_eq!(arguments(&calls, 1), written[1]);
    }

    #[test]
    fn a_copied_input_takes_the_field_its_description_names() {
        let request =
            PlanRequest::new("Work out the monthly payment on a 10000 loan and bill John Doe");
        let mut calls = plan(&[
            ("s1", "loan_payment", json!({"principal": 10000})),
            (
                "s2",
                "bill_client",
                json!({"client": "John Doe", "amount": 10000}),
            ),
        ]);
        ground(&mut calls, &request, &results_catalog());
        assert_eq!(
            arguments(&calls, 1)["amount"],
            json!({"$ref": "s1.output.monthly_payment"})
        );
    }

    /// Tools that declare the fields they return.
    fn results_catalog() -> Catalog {
        let object = |properties: Value, required: &[&str]| json!({"type": "object", "properties": properties, "required": required});
        Catalog::new(
            vec![
                tool(
                    "translate",
                    "Translate text into another language.",
                    object(json!({"text": {"type": "string"}, "target": {"type": "string"}}), &["text", "target"]),
                    Some(object(json!({"translated_text": {"type": "string"}}), &[])),
                ),
                tool(
                    "send_sms",
                    "Send a text message.",
                    object(
                        json!({"phone_number": {"type": "string"}, "message": {"type": "string"}}),
                        &["phone_number", "message"],
                    ),
                    None,
                ),
                tool(
                    "find_places",
                    "Search local businesses.",
                    object(json!({"query": {"type": "string"}}), &["query"]),
                    Some(object(
                        json!({"business_id": {"type": "string"}, "name": {"type": "string"}}),
                        &[],
                    )),
                ),
                tool(
                    "place_reviews",
                    "Reviews of a business.",
                    object(
                        json!({"business_id": {"type": "string"}, "limit": {"type": "integer"}}),
                        &[],
                    ),
                    None,
                ),
                tool(
                    "calculate_tip",
                    "Calculate the tip for a bill.",
                    object(
                        json!({"bill": {"type": "number"}, "percent": {"type": "number"}}),
                        &["bill", "percent"],
                    ),
                    Some(object(
                        json!({"tip_amount": {"type": "number"}, "total_amount": {"type": "number"}}),
                        &[],
                    )),
                ),
                tool(
                    "loan_payment",
                    "Monthly payment of a loan.",
                    object(json!({"principal": {"type": "number"}}), &["principal"]),
                    Some(object(
                        json!({"monthly_payment": {"type": "number",
                                "description": "The monthly payment amount"}}),
                        &[],
                    )),
                ),
                tool(
                    "bill_client",
                    "Bill a client.",
                    object(
                        json!({"client": {"type": "string"}, "amount": {"type": "number"}}),
                        &["client", "amount"],
                    ),
                    None,
                ),
            ],
            Vec::new(),
        )
        .unwrap()
    }

    #[test]
    fn numbers_are_read_as_people_write_them() {
        assert_eq!(
            numbers_in("$1,250.50 on 2023-01-31, 20% of 3.5k, v1.2.3"),
            vec![1250.5, 2023.0, 1.0, 31.0, 20.0, 3.5, 1.2, 3.0]
        );
        let known = Known {
            numbers: numbers_in("an annual rate of 5% for 1,5 and 10 years"),
            words: HashSet::new(),
            text: String::new(),
        };
        assert!(known.has_number(0.05) && known.has_number(5.0) && known.has_number(10.0));
        assert!(!known.has_number(0.5) && !known.has_number(50.0));
        assert!(is_date_or_time("2026-12-03"));
        assert!(is_date_or_time("19:30"));
        assert!(!is_date_or_time("12 mm"));
        assert!(is_date_or_time("06-01-2023"));
        assert!(is_date_or_time("25/12/2024"));
        assert!(!is_date_or_time("13-45-2023"));
    }

    #[test]
    fn a_first_call_that_invents_another_tools_result_names_its_producer() {
        let search = tool(
            "search_businesses",
            "Search for businesses.",
            json!({"type": "object", "properties": {"query": {"type": "string"}}}),
            Some(json!({"type": "object", "properties": {
                "business_id": {"type": "string"}, "name": {"type": "string"}}})),
        );
        let reviews = tool(
            "business_reviews",
            "Reviews of a business.",
            json!({"type": "object", "properties": {
                "business_id": {"type": "string"}, "limit": {"type": "integer"}}}),
            None,
        );
        let catalog = Catalog::new(vec![search.clone(), reviews.clone()], Vec::new()).unwrap();
        let offered = [&search, &reviews];
        let gyms = PlanRequest::new("Locate gyms in London and show me their reviews");
        let invented = plan(&[(
            "s1",
            "business_reviews",
            json!({"business_id": "12345", "limit": 10}),
        )]);
        let (key, producer) = missing_producer(&invented, &gyms, &catalog, &offered).unwrap();
        assert_eq!(
            (key.as_str(), producer.name.as_str()),
            ("business_id", "search_businesses")
        );
        // A value the request gives is no result to produce, nor is a date written another way.
        let given = PlanRequest::new("Show me the reviews of business 12345");
        assert!(missing_producer(&invented, &given, &catalog, &offered).is_none());
        let dated = plan(&[(
            "s1",
            "business_reviews",
            json!({"business_id": "2023-05-01T09:00:00Z"}),
        )]);
        let on_a_day = PlanRequest::new("Show me the reviews of gyms in London on 5/1/2023");
        assert!(missing_producer(&dated, &on_a_day, &catalog, &offered).is_none());
        // Nor when the producer is called already, or not offered, or takes the field itself.
        let sibling = tool(
            "business_photos",
            "Photos of a business.",
            json!({"type": "object", "properties": {"business_id": {"type": "string"}},
                   "required": ["business_id"]}),
            Some(json!({"type": "object", "properties": {"business_id": {"type": "string"}}})),
        );
        let with_sibling =
            Catalog::new(vec![reviews.clone(), sibling.clone()], Vec::new()).unwrap();
        assert!(missing_producer(&invented, &gyms, &with_sibling, &[&reviews, &sibling]).is_none());
        let both = plan(&[
            ("s1", "business_reviews", json!({"business_id": "12345"})),
            (
                "s2",
                "search_businesses",
                json!({"query": "gyms in London"}),
            ),
        ]);
        assert!(missing_producer(&both, &gyms, &catalog, &offered).is_none());
        assert!(missing_producer(&invented, &gyms, &catalog, &[&reviews]).is_none());
    }
}
