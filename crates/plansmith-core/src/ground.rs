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
//! A value counts as invented when it is the value of a required, free-form top-level argument
//! (no `enum`, `const` or `format`; a string, number or integer), it is not a date or a time (a
//! planner resolves "tomorrow" itself), and either it holds a number that the request does not
//! hold, or, for text of at least three content words, most of its words occur nowhere in the
//! request. Optional arguments are left alone: they are knobs (`max_results`, `unit`) that a
//! planner may set without being told, not data passed along.
//!
//! The producer is an earlier tool step whose output fits the argument's type: the whole output
//! when the tool declares no output schema or a schema of a fitting type, else the output field
//! of a fitting type that shares the most words with the argument (its name and description).
//! Among several producers the one whose tool shares the most words with the value and the
//! argument wins, then the nearest. Nothing changes when no earlier step fits: the value stays
//! as written. Every change is an `auto_fixed` warning that quotes the value it replaced.

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

/// A date, a time or a moment, in the forms plans write them.
fn is_date_or_time(text: &str) -> bool {
    let text = text.trim();
    chrono::DateTime::parse_from_rfc3339(text).is_ok()
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
            (words.len() >= 3 && unknown >= 2 && unknown * 2 >= words.len())
                .then_some("words the request does not have")
        }
        _ => None,
    }
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
        if let Some((_, name)) = best {
            let plain = name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
            if plain {
                return Some(format!(".{name}"));
            }
        }
    }
    fits(&produced, expected).then(String::new)
}

/// Replaces invented argument values of `plan`'s tool steps by references to the earlier step
/// that produces them; returns one warning per replaced value.
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
            if !required.contains(&key.as_str()) || StepRef::reference_in(value).is_some() {
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
            let free_form = ["string", "number", "integer"];
            if !expected.is_empty() && !expected.iter().any(|t| free_form.contains(t)) {
                continue;
            }
            let known = known.get_or_insert_with(|| Known::of(request));
            let Some(why) = invented(value, known) else {
                continue;
            };
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
                let Some(producer) = catalog.tool(producer).map(|t| &t.tool) else {
                    continue;
                };
                let Some(path) =
                    output_path(producer.output_schema.as_ref(), &expected, &argument_words)
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
            if let Some((_, producer_idx, path)) = best {
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
    fn numbers_are_read_as_people_write_them() {
        assert_eq!(
            numbers_in("$1,250.50 on 2023-01-31, 20% of 3.5k, v1.2.3"),
            vec![1250.5, 2023.0, 1.0, 31.0, 20.0, 3.5, 1.2, 3.0]
        );
        let known = Known {
            numbers: numbers_in("an annual rate of 5% for 1,5 and 10 years"),
            words: HashSet::new(),
        };
        assert!(known.has_number(0.05) && known.has_number(5.0) && known.has_number(10.0));
        assert!(!known.has_number(0.5) && !known.has_number(50.0));
        assert!(is_date_or_time("2026-12-03"));
        assert!(is_date_or_time("19:30"));
        assert!(!is_date_or_time("12 mm"));
    }
}
