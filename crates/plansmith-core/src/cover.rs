//! Coverage: the parts of a request that no call of a plan addresses.
//!
//! Small models answer a request that asks for several things ("What's the weather in Paris?
//! Email it to bob@example.com", "the weather in Paris and London") with the first call and
//! stop. The request is cut into parts (sentences, then `then` and `and` joints), and a part is
//! addressed when a call's arguments carry one of its particulars: an address, a link, a number,
//! or a capitalised name inside the part. A part without particulars ("and tell me when it is
//! done") cannot be checked and counts as addressed. The planner asks the model for the calls
//! of each part left (see `Planner::plan`), and keeps a call only when it carries one of that
//! part's particulars.

use serde_json::Value;

use crate::plan::{Action, Plan};

/// Joints that separate two things a request asks for, tried in this order inside a sentence.
const JOINTS: &[&str] = &[
    ", and then ",
    " and then ",
    ", then ",
    " then ",
    ", and ",
    " and ",
];

/// A part of a request, with the particulars a call that addresses it would carry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Part {
    /// The part as the request words it.
    pub text: String,
    /// Its particulars, lower-cased.
    pub particulars: Vec<String>,
}

/// The parts of `query`: its sentences, each cut at its joints; with each, whether it starts
/// a sentence.
fn parts(query: &str) -> Vec<(String, bool)> {
    let mut sentences = Vec::new();
    let mut current = String::new();
    let mut chars = query.chars().peekable();
    while let Some(c) = chars.next() {
        current.push(c);
        let ends = matches!(c, '.' | '?' | '!' | ';' | '\n');
        if ends && chars.peek().is_none_or(|next| next.is_whitespace()) {
            sentences.push(std::mem::take(&mut current));
        }
    }
    sentences.push(current);
    let mut out = Vec::new();
    for sentence in sentences {
        let mut pieces = vec![sentence];
        for joint in JOINTS {
            pieces = pieces
                .into_iter()
                .flat_map(|piece| split_ignoring_case(&piece, joint))
                .collect();
        }
        out.extend(
            pieces
                .into_iter()
                .enumerate()
                .map(|(i, piece)| (piece.trim().to_owned(), i == 0))
                .filter(|(piece, _)| !piece.is_empty()),
        );
    }
    out
}

fn split_ignoring_case(text: &str, joint: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    if lower.len() != text.len() {
        // Lower-casing changed byte offsets: cut nothing rather than mid-character.
        return vec![text.to_owned()];
    }
    let mut out = Vec::new();
    let mut start = 0;
    for (at, _) in lower.match_indices(joint) {
        if at >= start {
            out.push(text[start..at].to_owned());
            start = at + joint.len();
        }
    }
    out.push(text[start..].to_owned());
    out
}

/// The particulars of a part: words with `@` or `://`, words with a digit, and capitalised
/// words other than `I` and the first word of a sentence (which every sentence capitalises).
fn particulars(part: &str, starts_sentence: bool) -> Vec<String> {
    let mut out = Vec::new();
    for (i, word) in part.split_whitespace().enumerate() {
        let word = word.trim_matches(|c: char| !c.is_alphanumeric() && c != '@' && c != '/');
        let word = word.strip_suffix("'s").unwrap_or(word);
        if word.is_empty() {
            continue;
        }
        let address = word.contains('@') || word.contains("://");
        let number = word.chars().any(|c| c.is_ascii_digit());
        let name = (i > 0 || !starts_sentence)
            && word.chars().next().is_some_and(char::is_uppercase)
            && word != "I"
            && !word.starts_with("I'");
        if address || number || name {
            out.push(word.to_lowercase());
        }
    }
    out
}

/// The text of every tool call's arguments in `plan`, lower-cased.
fn arguments_text(plan: &Plan) -> String {
    let mut text = String::new();
    for step in &plan.steps {
        if let Action::Tool { arguments, .. } = &step.action {
            text.push_str(&Value::Object(arguments.clone()).to_string().to_lowercase());
            text.push('\n');
        }
    }
    text
}

/// Whether one of `part`'s particulars is in the arguments of `plan`'s calls.
pub(crate) fn addresses(plan: &Plan, part: &Part) -> bool {
    let text = arguments_text(plan);
    part.particulars.iter().any(|p| text.contains(p.as_str()))
}

/// The parts of `query` that have particulars and that no call of `plan` addresses, in the
/// request's order. Empty when the plan has no call (a reply or a question is its own answer).
pub(crate) fn unaddressed(query: &str, plan: &Plan) -> Vec<Part> {
    if !plan
        .steps
        .iter()
        .any(|step| matches!(step.action, Action::Tool { .. }))
    {
        return Vec::new();
    }
    let pieces = parts(query);
    if pieces.len() < 2 {
        return Vec::new();
    }
    pieces
        .into_iter()
        .map(|(text, starts_sentence)| Part {
            particulars: particulars(&text, starts_sentence),
            text,
        })
        .filter(|part| !part.particulars.is_empty() && !addresses(plan, part))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Step;
    use serde_json::json;

    fn plan(calls: &[(&str, Value)]) -> Plan {
        let mut plan = Plan::new("p1", "goal");
        for (i, (name, arguments)) in calls.iter().enumerate() {
            let Value::Object(arguments) = arguments.clone() else {
                panic!("arguments must be an object");
            };
            let action = Action::Tool {
                name: (*name).into(),
                arguments,
            };
            plan.steps
                .push(Step::new(format!("s{}", i + 1), *name, action));
        }
        plan
    }

    #[test]
    fn requests_are_cut_at_sentences_and_joints() {
        let texts =
            |query: &str| -> Vec<String> { parts(query).into_iter().map(|p| p.0).collect() };
        assert_eq!(
            texts("What's the weather in Paris? Email it to bob@example.com"),
            vec![
                "What's the weather in Paris?",
                "Email it to bob@example.com"
            ]
        );
        assert_eq!(
            texts("Check Berlin, then mail eve@example.com and tell me when it's done."),
            vec![
                "Check Berlin",
                "mail eve@example.com",
                "tell me when it's done."
            ]
        );
        // A dot inside a word is not a sentence end.
        assert_eq!(
            texts("Open example.com/a.b now"),
            vec!["Open example.com/a.b now"]
        );
    }

    #[test]
    fn a_part_no_call_carries_is_left() {
        let weather = plan(&[("get_weather", json!({"city": "Paris"}))]);
        let left = unaddressed(
            "What's the weather in Paris? Email it to bob@example.com",
            &weather,
        );
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].text, "Email it to bob@example.com");
        assert_eq!(left[0].particulars, vec!["bob@example.com"]);

        let left = unaddressed("What's the weather like in Paris and London?", &weather);
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].particulars, vec!["london"]);
    }

    #[test]
    fn parts_the_calls_carry_or_that_have_no_particulars_are_addressed() {
        let area = plan(&[("triangle_area", json!({"base": 10, "height": 5}))]);
        assert!(
            unaddressed("Find the area with a base of 10 and a height of 5.", &area).is_empty()
        );
        let both = plan(&[
            ("get_weather", json!({"city": "Berlin"})),
            ("send_email", json!({"to": "eve@example.com", "body": "x"})),
        ]);
        assert!(
            unaddressed(
                "Check the weather in Berlin, then email it to eve@example.com and tell me when it's done",
                &both
            )
            .is_empty()
        );
        let reply = Plan::new("p1", "goal");
        assert!(unaddressed("Paris? And London?", &reply).is_empty());
    }
}
