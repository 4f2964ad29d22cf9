//! Coverage: the parts of a request that no call of a plan addresses.
//!
//! Small models answer a request that asks for several things ("What's the weather in Paris?
//! Email it to bob@example.com", "the weather in Paris and London") with the first call and
//! stop. The request is cut into parts (sentences, then `then` and `and` joints), and a part is
//! addressed when the calls' arguments carry its particulars: every number in it, and one of
//! its addresses, links or capitalised names; values it gives by name (`a = 1, b = 2`), when
//! the calls take arguments of those names, all in one call. A part without particulars ("and tell me when it
//! is done") cannot be checked and counts as addressed, unless it is the next item of a list
//! that a call began: in "the resistivity of copper and aluminum", a call that carries
//! `copper` makes `aluminum` a part of its own, whose every word a call must carry (see
//! [`list_items`]). A part whose words name a tool the planner offered and no call uses
//! ("find a bus … and book 2 tickets for me", with `BuyBusTicket` offered and only `FindBus`
//! called) is addressed only by a call of that tool, whatever the calls carry. The planner asks the
//! model for the calls of each part left (see `Planner::plan`), and keeps them only when they
//! carry one of that part's particulars (or call one of its tools).

use serde_json::Value;

use crate::plan::{Action, Plan, Step};

/// Month and day names: a call writes a date in its own form (`2019-12-13` for "December
/// 13, 2019"), so they are not particulars a call must carry.
const CALENDAR: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

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
    /// Whether a call must carry every particular, not only its numbers and one other: the
    /// item of a list is named by all its words ("rat hemoglobin" is not done by a call for
    /// "normal hemoglobin").
    pub every: bool,
    /// For a part that names what some offered tool does and no called tool does ("and book
    /// 2 tickets for me", with `BuyBusTicket` offered and `FindBus` called, which carries the
    /// `2`): those tools. Only a call of one of them addresses the part.
    pub tools: Vec<String>,
    /// The values the part gives by name (`a = 1, b = 2`): when it gives two or more and the
    /// calls take arguments of those names, one call must take them all.
    pub keyed: Vec<(String, f64)>,
}

impl Part {
    /// The piece `text` of a request as a part: its particulars and the values it gives by
    /// name, no tools.
    fn of(text: &str, starts_sentence: bool) -> Part {
        Part {
            text: text.to_owned(),
            particulars: particulars(text, starts_sentence),
            every: false,
            tools: Vec::new(),
            keyed: keyed_values(text),
        }
    }
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

/// The particulars of a part: words with `@` or `://`, numbers, words with a digit, and
/// capitalised words other than `I` and the first word of a sentence (which every sentence
/// capitalises). A number is written as a number (`$400,000` is `400000`, `4%` is `4`), and
/// a list run together (`5,10`) gives each of its numbers. In a formula, a term's particular
/// is its coefficient with the sign before it (`- 7x` is `-7`, `3x^2` is `3`, `x^2` has none),
/// and the `0` of `= 0` is the standard form's, not a value: a call for `3x^2 + 4x + 2 = 0`
/// carries `a: 3, b: 4, c: 2`.
fn particulars(part: &str, starts_sentence: bool) -> Vec<String> {
    let mut out = Vec::new();
    // A capitalised word right after a number is its unit ("5 Tesla", "20 Celsius"), which a
    // call carries in its argument's name or not at all.
    let mut after_number = false;
    let mut previous = "";
    for (i, word) in part.split_whitespace().enumerate() {
        let before = std::mem::replace(&mut previous, word);
        if before == "=" && word.trim_end_matches(|c: char| !c.is_alphanumeric()) == "0" {
            continue;
        }
        let sign = if before == "-" { "-" } else { "" };
        if let Some(coefficient) = term_coefficient(word) {
            if let Some(coefficient) = coefficient {
                out.push(format!("{sign}{coefficient}"));
            }
            continue;
        }
        // `- 7x`: a term of a formula, with its sign.
        let signed;
        let word = if sign.is_empty() || !is_linear_term(word) {
            word
        } else {
            signed = format!("-{word}");
            signed.as_str()
        };
        let unit = std::mem::take(&mut after_number);
        let keep = |c: char| c.is_alphanumeric() || c == '@' || c == '/';
        let word = word.trim_end_matches(|c: char| !keep(c));
        // A leading minus stays with its number (`-4`).
        let mut start = word.find(keep).unwrap_or(word.len());
        if word[..start].ends_with('-') && word[start..].starts_with(|c: char| c.is_ascii_digit()) {
            start -= 1;
        }
        let word = &word[start..];
        let word = word.strip_suffix("'s").unwrap_or(word);
        if word.is_empty() {
            continue;
        }
        // `a=1`: the value is the particular.
        let word = match word.rsplit_once('=') {
            Some((_, value)) if !value.is_empty() => value,
            _ => word,
        };
        if let Some(numbers) = numbers_of(word) {
            out.extend(numbers);
            after_number = true;
            continue;
        }
        if without_unit(word).parse::<f64>().is_ok() {
            // A number with its unit written on: kept whole, carried as the number or as text
            // (`3D` is a name more than a quantity).
            out.push(word.to_lowercase());
            continue;
        }
        let address = word.contains('@') || word.contains("://");
        let number = word.chars().any(|c| c.is_ascii_digit());
        let name = (i > 0 || !starts_sentence)
            && !unit
            && word.chars().next().is_some_and(char::is_uppercase)
            && word != "I"
            && !word.starts_with("I'")
            && !CALENDAR.contains(&word.to_lowercase().as_str());
        if address || number || name {
            out.push(word.to_lowercase());
        }
    }
    out
}

/// The coefficient of a formula's term with a power (`3x^2`, `2.5y^3`, `x^2`: `Some(None)`),
/// or `None` when `word` is no such term. A term without a power (`4x`) reads as a number with
/// a unit, which comes to the same.
fn term_coefficient(word: &str) -> Option<Option<&str>> {
    let word = word.trim_end_matches([',', '.', ';', ')']);
    let (base, power) = word.split_once('^')?;
    if power.is_empty() || !power.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let variable = base.chars().last().filter(char::is_ascii_alphabetic)?;
    let coefficient = &base[..base.len() - variable.len_utf8()];
    if coefficient.is_empty() {
        return Some(None);
    }
    coefficient
        .parse::<f64>()
        .is_ok()
        .then_some(Some(coefficient))
}

/// Whether `word` is a formula's term of the first degree: a number and one letter (`7x`).
fn is_linear_term(word: &str) -> bool {
    let word = word.trim_end_matches([',', '.', ';', ')']);
    let mut chars = word.chars();
    chars.next_back().is_some_and(|c| c.is_ascii_alphabetic())
        && !chars.as_str().is_empty()
        && chars.as_str().parse::<f64>().is_ok()
}

/// `word` without the unit written onto its number (`5m`, `0.01m²`, `100µF`, `300K` give
/// `5`, `0.01`, `100`, `300`): a call carries the number, its unit in the argument's name or
/// not at all. A word with more after its digits (`B12`, `v1.2.3`, `2020-12-13`) is left whole.
fn without_unit(word: &str) -> &str {
    let Some(at) = word.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | ',' | '-')))
    else {
        return word;
    };
    let (number, unit) = word.split_at(at);
    let unit_like = unit.chars().count() <= 3
        && unit
            .chars()
            .all(|c| c.is_alphabetic() || matches!(c, '²' | '³'));
    if number.chars().any(|c| c.is_ascii_digit()) && unit_like {
        number
    } else {
        word
    }
}

/// The numbers `word` writes (`400,000` → `400000`; `5,10` → `5`, `10`; `-3`, `2.5`), or
/// `None` when it is not made of numbers only.
fn numbers_of(word: &str) -> Option<Vec<String>> {
    let plain = |text: &str| {
        let digits = text.strip_prefix('-').unwrap_or(text);
        !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
            && digits.chars().next().is_some_and(|c| c.is_ascii_digit())
            && digits.matches('.').count() <= 1
            && text.parse::<f64>().is_ok()
    };
    let groups: Vec<&str> = word.split(',').collect();
    if !groups.iter().all(|group| plain(group)) {
        return None;
    }
    // `400,000`: thousands (groups of three after the first); else a list.
    let thousands = groups.len() > 1
        && groups[1..].iter().enumerate().all(|(i, group)| {
            let last = i + 2 == groups.len();
            let whole = group.split('.').next().unwrap_or_default();
            whole.len() == 3 && (last || !group.contains('.'))
        })
        && !groups[0].contains('.');
    Some(if thousands {
        vec![groups.concat()]
    } else {
        groups.into_iter().map(str::to_owned).collect()
    })
}

/// The text of every tool call's arguments in `steps`, lower-cased.
fn arguments_text(steps: &[Step]) -> String {
    let mut text = String::new();
    for step in steps {
        if let Action::Tool { arguments, .. } = &step.action {
            text.push_str(
                &serde_json::to_string(arguments)
                    .unwrap_or_default()
                    .to_lowercase(),
            );
            text.push('\n');
        }
    }
    text
}

/// Every number and string inside the arguments of every tool call in `steps`, at any depth.
fn argument_leaves(steps: &[Step]) -> Vec<&Value> {
    fn walk<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
        match value {
            Value::Array(items) => items.iter().for_each(|item| walk(item, out)),
            Value::Object(map) => map.values().for_each(|item| walk(item, out)),
            Value::Number(_) | Value::String(_) => out.push(value),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for step in steps {
        if let Action::Tool { arguments, .. } = &step.action {
            arguments.values().for_each(|value| walk(value, &mut out));
        }
    }
    out
}

/// The numbers in every tool call's arguments in `steps`: JSON numbers, and the numbers
/// written inside strings.
fn arguments_numbers(steps: &[Step]) -> Vec<f64> {
    let mut out = Vec::new();
    for value in argument_leaves(steps) {
        match value {
            Value::Number(number) => out.extend(number.as_f64()),
            Value::String(text) => out.extend(numbers_in(text)),
            _ => {}
        }
    }
    out
}

/// The numbers written in `text`: `2019-12-13` holds 2019, 12 and 13; `-4 and 2.5` holds -4
/// and 2.5 (a minus counts as a sign where no digit comes right before it).
fn numbers_in(text: &str) -> Vec<f64> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut previous = ' ';
    for c in text.chars().chain([' ']) {
        let starts_negative = c == '-' && !previous.is_ascii_digit() && current.is_empty();
        if c.is_ascii_digit() || (c == '.' && !current.is_empty()) || starts_negative {
            current.push(c);
        } else if !current.is_empty() {
            out.extend(current.trim_end_matches('.').parse::<f64>().ok());
            current.clear();
        }
        previous = c;
    }
    out
}

/// What the calls of a plan carry: their arguments' text and numbers.
struct Carried {
    text: String,
    numbers: Vec<f64>,
}

impl Carried {
    fn of(steps: &[Step]) -> Carried {
        Carried {
            text: arguments_text(steps),
            numbers: arguments_numbers(steps),
        }
    }

    /// Whether particular `p` is carried: a number as that number (or as a percentage of it:
    /// `0.04` for `4`), a number with its unit (`5m`) as the number, as text, or scaled when
    /// the unit may say so (`1m` as a million), anything else as text.
    fn has(&self, p: &str) -> bool {
        let number = without_unit(p);
        if number != p && self.text.contains(p) {
            return true;
        }
        // `1m` may be a million, `300k` three hundred thousand.
        let scale = match &p[number.len()..] {
            "k" => 1e3,
            "m" | "mn" => 1e6,
            "b" | "bn" => 1e9,
            _ => 1.0,
        };
        match number.parse::<f64>() {
            Ok(wanted) => self.numbers.iter().any(|&n| {
                (n - wanted).abs() < 1e-9
                    || (n * 100.0 - wanted).abs() < 1e-6
                    || (n - wanted * scale).abs() < 1e-6 * scale
            }),
            Err(_) => self.text.contains(p),
        }
    }
}

/// Whether `plan`'s calls address `part`: their arguments carry every number of the part,
/// and one of its other particulars when it has any. A list of numbers in one part ("a term
/// of 15, 20") needs them all; a name or an address needs to be there once.
pub(crate) fn addresses(plan: &Plan, part: &Part) -> bool {
    if !part.tools.is_empty() {
        return calls_one_of(&plan.steps, &part.tools);
    }
    if keyed_done(&plan.steps, &part.keyed) == Some(false) {
        return false;
    }
    let carried = Carried::of(&plan.steps);
    if part.every {
        return part.particulars.iter().all(|p| carried.has(p));
    }
    let (numbers, others): (Vec<&String>, Vec<&String>) = part
        .particulars
        .iter()
        .partition(|p| without_unit(p).parse::<f64>().is_ok());
    numbers.iter().all(|p| carried.has(p))
        && (others.is_empty() || others.iter().any(|p| carried.has(p)))
}

/// Whether the calls of `plan` after its first `n_before` do some of `part`: they carry one of
/// its particulars that none of the first `n_before` carries. A call that carries only what the
/// plan already had (a repeat of the first call, the same values under another function) adds
/// nothing the request asked for.
pub(crate) fn adds(plan: &Plan, n_before: usize, part: &Part) -> bool {
    let (before, added) = plan.steps.split_at(n_before.min(plan.steps.len()));
    if !part.tools.is_empty() {
        return calls_one_of(added, &part.tools);
    }
    if keyed_done(added, &part.keyed) == Some(true) && keyed_done(before, &part.keyed) != Some(true)
    {
        return true;
    }
    let (old, new) = (Carried::of(before), Carried::of(added));
    part.particulars.iter().any(|p| new.has(p) && !old.has(p))
}

/// The values `part` gives by name: `a = 1`, `a=1`, `a= 1`, `a =1` (a name of letters,
/// digits and `_` that starts with a letter, and a number).
fn keyed_values(part: &str) -> Vec<(String, f64)> {
    let spaced = part.replace('=', " = ");
    let words: Vec<&str> = spaced.split_whitespace().collect();
    let mut out = Vec::new();
    for window in words.windows(3) {
        let [key, "=", value] = window else {
            continue;
        };
        let key = key.trim_start_matches(['(', '\'', '"']);
        let key = key.trim_end_matches(['\'', '"']);
        let is_name = key.len() <= 30
            && key.starts_with(|c: char| c.is_ascii_alphabetic())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let value = value.trim_end_matches([',', '.', ';', ')', '?', '!']);
        if let (true, Ok(number)) = (is_name, value.parse::<f64>()) {
            out.push((key.to_lowercase(), number));
        }
    }
    out
}

/// An argument's value as a number: a JSON number, or a string that is one (`"2"`).
fn number_in(value: &Value) -> Option<f64> {
    value
        .as_f64()
        .or_else(|| value.as_str().and_then(|t| t.trim().parse().ok()))
}

/// Whether the tool call `step` takes `value` under the name `key` (`x`, `x_value`, `start_x`).
fn takes(step: &Step, key: &str, value: f64) -> bool {
    let Action::Tool { arguments, .. } = &step.action else {
        return false;
    };
    arguments.iter().any(|(name, given)| {
        let name = name.to_lowercase();
        let named = name == key
            || name.starts_with(&format!("{key}_"))
            || name.ends_with(&format!("_{key}"));
        named && number_in(given).is_some_and(|n| (n - value).abs() < 1e-9)
    })
}

/// For a part that gives two or more values by name: whether one of `steps` takes them all
/// under those names; `None` when it gives fewer, or no call takes an argument of those names
/// (the names are the request's, not the tool's).
fn keyed_done(steps: &[Step], keyed: &[(String, f64)]) -> Option<bool> {
    if keyed.len() < 2 {
        return None;
    }
    let mut named = false;
    for step in steps {
        let Action::Tool { arguments, .. } = &step.action else {
            continue;
        };
        let value_of = |key: &str| {
            arguments
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(key))
                .map(|(_, value)| value)
        };
        let mut all = true;
        for (key, wanted) in keyed {
            match value_of(key) {
                Some(value) => {
                    named = true;
                    all &= number_in(value).is_some_and(|n| (n - wanted).abs() < 1e-9);
                }
                None => all = false,
            }
        }
        if all {
            return Some(true);
        }
    }
    named.then_some(false)
}

/// Whether one of `steps` calls one of `tools`.
fn calls_one_of(steps: &[Step], tools: &[String]) -> bool {
    steps.iter().any(|step| match &step.action {
        Action::Tool { name, .. } => tools.contains(name),
        _ => false,
    })
}

/// Words of a request that say what a tool does but not which (`get`, `find`): a part is not
/// taken for a tool's by them alone.
const GENERIC_ACTIONS: &[&str] = &[
    "get",
    "find",
    "search",
    "look",
    "list",
    "show",
    "give",
    "fetch",
    "retrieve",
    "check",
    "tell",
    "help",
    "want",
    "need",
    "use",
    "make",
    "do",
    "run",
    "call",
    "let",
    "info",
    "information",
    "detail",
    "data",
    "result",
];

/// The offered tools that a part names and the called ones do not: the
/// tools whose names share the most of the part's words (as retrieval reads words: split,
/// stemmed, [`GENERIC_ACTIONS`] left out), when that is more than any called tool's name
/// shares. "book a ticket for me" names `Buses.BuyBusTicket`, not `Buses.FindBus`.
fn named_tools(part: &str, offered: &[&str], called: &[&str]) -> Vec<String> {
    use crate::retrieve::tokenize;
    let words: Vec<String> = tokenize(part)
        .into_iter()
        .filter(|w| !GENERIC_ACTIONS.contains(&w.as_str()))
        .collect();
    if words.is_empty() {
        return Vec::new();
    }
    let shared = |name: &str| {
        let name_words = tokenize(name);
        words.iter().filter(|w| name_words.contains(w)).count()
    };
    let called_best = called.iter().map(|name| shared(name)).max().unwrap_or(0);
    let scored: Vec<(&str, usize)> = offered
        .iter()
        .filter(|name| !called.contains(name))
        .map(|name| (*name, shared(name)))
        .collect();
    let best = scored.iter().map(|(_, n)| *n).max().unwrap_or(0);
    if best == 0 || best <= called_best {
        return Vec::new();
    }
    scored
        .into_iter()
        .filter(|(_, n)| *n == best)
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// Whether `query` names the tool `name`: a word of the name (read as [`named_tools`] reads
/// them) is a word of the request.
fn names_tool(query_words: &[String], name: &str) -> bool {
    crate::retrieve::tokenize(name)
        .iter()
        .any(|w| !GENERIC_ACTIONS.contains(&w.as_str()) && query_words.contains(w))
}

/// The tool steps among the first `judged` of `plan` (by index) that do nothing the request
/// asks for: after the first call, a call that carries no particular of the request (its
/// numbers, names, addresses, and values it gives by name under that name: `x=2` as `x` or
/// `x_value`) that the calls kept before it lack, and that repeats an earlier call's tool or
/// calls a tool the request does not name. Small models go on writing calls once the request is done (the
/// translation translated back and sent again; `generate_password` after
/// `generate_random_password` with the same values). A step that a kept step depends on is
/// kept. Empty when the request has no particulars to judge by.
pub(crate) fn redundant_calls(query: &str, plan: &Plan, judged: usize) -> Vec<usize> {
    let pieces = parts(query);
    let wanted: Vec<String> = pieces
        .iter()
        .flat_map(|(text, starts)| particulars(text, *starts))
        .collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let keyed: Vec<(String, f64)> = pieces
        .iter()
        .flat_map(|(text, _)| keyed_values(text))
        .collect();
    let query_words = crate::retrieve::tokenize(query);
    let mut kept: Vec<Step> = Vec::new();
    let mut dropped: Vec<usize> = Vec::new();
    for (idx, step) in plan.steps.iter().enumerate() {
        let Action::Tool { name, .. } = &step.action else {
            continue;
        };
        let called_before = kept
            .iter()
            .any(|k| matches!(&k.action, Action::Tool { name: n, .. } if n == name));
        let first = !kept.iter().any(|k| matches!(k.action, Action::Tool { .. }));
        let (before, this) = (Carried::of(&kept), Carried::of(std::slice::from_ref(step)));
        let adds = wanted.iter().any(|p| this.has(p) && !before.has(p))
            || keyed.iter().any(|(key, value)| {
                takes(step, key, *value) && !kept.iter().any(|k| takes(k, key, *value))
            });
        if idx < judged && !first && !adds && (called_before || !names_tool(&query_words, name)) {
            dropped.push(idx);
        } else {
            kept.push(step.clone());
        }
    }
    // A step that a kept one depends on stays, and then so do the steps it depends on.
    loop {
        let needed: Vec<usize> = dropped
            .iter()
            .copied()
            .filter(|&idx| {
                let id = &plan.steps[idx].id;
                plan.steps
                    .iter()
                    .enumerate()
                    .any(|(other, step)| !dropped.contains(&other) && step.depends_on.contains(id))
            })
            .collect();
        if needed.is_empty() {
            return dropped;
        }
        dropped.retain(|idx| !needed.contains(idx));
    }
}

/// Whether the calls of `plan` do a part of `query` other than the one worded `except`: a part
/// with particulars that they carry.
pub(crate) fn does_another_part(query: &str, plan: &Plan, except: &str) -> bool {
    parts(query).iter().any(|(text, starts)| {
        let part = Part::of(text, *starts);
        text != except && !part.particulars.is_empty() && addresses(plan, &part)
    })
}

/// Whether `query` names none of the tools that `plan` calls: no word of a called tool's name
/// (read as [`named_tools`] reads them) is a word of the request.
pub(crate) fn names_no_call(query: &str, plan: &Plan) -> bool {
    let words = crate::retrieve::tokenize(query);
    plan.steps.iter().all(|step| match &step.action {
        Action::Tool { name, .. } => !names_tool(&words, name),
        _ => true,
    })
}

/// The parts of `query` as the request words them: its sentences, each cut at its joints.
pub(crate) fn pieces(query: &str) -> Vec<String> {
    parts(query).into_iter().map(|(text, _)| text).collect()
}

/// The parts of `query` that have particulars and that no call of `plan` addresses, in the
/// request's order. Empty when the plan has no call (a reply or a question is its own answer).
pub(crate) fn unaddressed(query: &str, plan: &Plan, offered: &[&str]) -> Vec<Part> {
    let called = plan.called_tools();
    if called.is_empty() {
        return Vec::new();
    }
    let pieces = parts(query);
    let mut out: Vec<Part> = Vec::new();
    if pieces.len() >= 2 {
        out.extend(pieces.iter().map(|(text, starts_sentence)| Part {
            tools: named_tools(text, offered, &called),
            ..Part::of(text, *starts_sentence)
        }));
    }
    // A list's next items are parts of their own, also inside one piece ("human HbA1c,
    // normal hemoglobin"); an item that is a whole piece takes that piece's place.
    for item in list_items(&pieces, &string_values(&plan.steps)) {
        match out.iter_mut().find(|part| part.text == item.text) {
            Some(part) if part.particulars.is_empty() => *part = item,
            Some(_) => {}
            None => out.push(item),
        }
    }
    out.retain(|part| {
        (!part.particulars.is_empty() || !part.tools.is_empty()) && !addresses(plan, part)
    });
    // In the request's order.
    out.sort_by_key(|part| query.find(&part.text).unwrap_or(usize::MAX));
    out
}

/// Words that name no item of a list by themselves.
const ITEM_FILLERS: &[&str] = &[
    "a", "an", "the", "their", "its", "his", "her", "my", "our", "your", "of", "for", "in", "on",
    "to", "also", "both", "each", "all",
];

/// At most this many words make an item of a list; a longer piece is a request of its own.
const ITEM_WORDS: usize = 3;

/// The items of lists that a call began, as parts: a short piece (at most [`ITEM_WORDS`]
/// words, after `and` or a comma) that comes right after a value a call carries, or right after
/// such an item, and has no particular of its own (a name or number, which the parts check
/// already). "…of copper and aluminum" with a call carrying `copper` gives `aluminum`;
/// "human HbA1c, normal hemoglobin, and rat hemoglobin" with `HbA1c` gives the other two. The
/// value must end the piece before, so "Italian food and has vegan options" is no list.
fn list_items(pieces: &[(String, bool)], values: &[String]) -> Vec<Part> {
    let mut out = Vec::new();
    // Whether the last segment read ends a list's item or the value a call carries.
    let mut open = false;
    for (piece, starts_sentence) in pieces {
        if *starts_sentence {
            open = false;
        }
        for (j, segment) in piece.split(", ").enumerate() {
            let segment = segment.trim();
            let words = plain_words(segment);
            let lower = words.join(" ");
            let first = j == 0 && *starts_sentence;
            let item = open
                && !first
                && !words.is_empty()
                && words.len() <= ITEM_WORDS
                && particulars(segment, false).is_empty()
                && !values.iter().any(|v| contains_words(&lower, v));
            if item {
                let names: Vec<String> = words
                    .into_iter()
                    .filter(|w| !ITEM_FILLERS.contains(&w.as_str()))
                    .collect();
                if !names.is_empty() {
                    out.push(Part {
                        text: segment.to_owned(),
                        particulars: names,
                        every: true,
                        tools: Vec::new(),
                        keyed: Vec::new(),
                    });
                }
            }
            open = item || values.iter().any(|v| ends_with_words(&lower, v));
        }
    }
    out
}

/// Whether `text` holds the words of `value` as whole words.
fn contains_words(text: &str, value: &str) -> bool {
    text.match_indices(value).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + value.len()..].chars().next();
        before.is_none_or(|c| c == ' ') && after.is_none_or(|c| c == ' ')
    })
}

/// Whether `text` ends with the words of `value`.
fn ends_with_words(text: &str, value: &str) -> bool {
    text.strip_suffix(value)
        .is_some_and(|rest| rest.is_empty() || rest.ends_with(' '))
}

/// The string values of every tool call's arguments in `steps` (inside arrays and objects
/// too), lower-cased, as words separated by single spaces; values of one character or over
/// [`ITEM_WORDS`] words are left out (no list is named by them).
fn string_values(steps: &[Step]) -> Vec<String> {
    argument_leaves(steps)
        .into_iter()
        .filter_map(Value::as_str)
        .filter_map(|text| {
            let words = plain_words(text);
            let joined = words.join(" ");
            (joined.chars().count() > 1 && words.len() <= ITEM_WORDS).then_some(joined)
        })
        .collect()
}

/// The words of `text`, lower-cased, without the punctuation around them.
fn plain_words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// The parts of `query` (as the request words them) that have particulars (numbers, names,
/// addresses) none of which the tool calls of `plan` carry: what a plan, or the steps a run
/// completed, leaves undone that can be seen without a model. Empty for a plan without calls
/// or a request of one part.
pub fn unaddressed_parts(query: &str, plan: &Plan) -> Vec<String> {
    unaddressed(query, plan, &[])
        .into_iter()
        .map(|part| part.text)
        .collect()
}

/// The words of `query` a keyword search would look up: its names, addresses and words with
/// digits (the particulars of its parts, bare numbers left out), lower-cased, each once, in
/// the request's order. "Email Bob the report of Project Apollo" gives `bob`, `project`,
/// `apollo`.
pub fn search_terms(query: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (text, starts_sentence) in parts(query) {
        for term in particulars(&text, starts_sentence) {
            if numbers_of(&term).is_none() && !out.contains(&term) {
                out.push(term);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn search_terms_are_the_names_and_addresses_once() {
        assert_eq!(
            super::search_terms(
                "Email Bob the report of Project Apollo. Then ask Bob at bob@example.com about Q3"
            ),
            ["bob", "project", "apollo", "bob@example.com", "q3"]
        );
        assert!(super::search_terms("what is 2 plus 2").is_empty());
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
            &[],
        );
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].text, "Email it to bob@example.com");
        assert_eq!(left[0].particulars, vec!["bob@example.com"]);

        let left = unaddressed(
            "What's the weather like in Paris and London?",
            &weather,
            &[],
        );
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].particulars, vec!["london"]);
    }

    #[test]
    fn a_part_that_names_an_offered_tool_no_call_uses_is_left() {
        let offered = ["Buses.FindBus", "Buses.BuyBusTicket", "Hotels.SearchHotel"];
        let query = "Find me a bus from New York to Washington on 11/02/2024 and book a ticket \
                     for myself.";
        let find = plan(&[(
            "Buses.FindBus",
            json!({"origin": "New York", "destination": "Washington"}),
        )]);
        let left = unaddressed(query, &find, &offered);
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].text, "book a ticket for myself.");
        assert_eq!(left[0].tools, ["Buses.BuyBusTicket"]);
        let both = plan(&[
            ("Buses.FindBus", json!({"origin": "New York"})),
            ("Buses.BuyBusTicket", json!({"origin": "New York"})),
        ]);
        assert!(unaddressed(query, &both, &offered).is_empty());
        assert!(adds(&both, 1, &left[0]));
        assert!(!adds(
            &plan(&[("Buses.FindBus", json!({})), ("Buses.FindBus", json!({}))]),
            1,
            &left[0]
        ));
        // Words every tool could say name none; nor does a part the called tool's name shares.
        assert!(
            unaddressed(
                "Find a bus to Washington and get me the details",
                &find,
                &offered
            )
            .is_empty()
        );
        let left = unaddressed(
            "Find a bus to Washington and check the times of that bus",
            &find,
            &offered,
        );
        assert!(left.is_empty(), "{left:?}");
        // A part whose numbers the search carries still names the tool that books.
        let two = "Find a bus from Boston to New York on 5/1/2023 and book 2 tickets for me.";
        let find_two = plan(&[(
            "Buses.FindBus",
            json!({"origin": "Boston", "destination": "New York", "group_size": "2"}),
        )]);
        let left = unaddressed(two, &find_two, &offered);
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].tools, ["Buses.BuyBusTicket"]);
        // Without the tools offered, as the run's goal check reads it: nothing to name.
        assert!(unaddressed(query, &find, &[]).is_empty());
    }

    #[test]
    fn calls_that_add_nothing_the_request_asks_for_are_redundant() {
        let query = "Translate 'Hello, World!' from English to French and send it to \
                     1234567890, then run /path/to/program";
        let mut written = plan(&[
            (
                "translate_text",
                json!({"text": "Hello, World!", "source": "English", "target": "French"}),
            ),
            (
                "send_sms",
                json!({"to": "1234567890", "message": {"$ref": "s1.output"}}),
            ),
            ("execute_program", json!({"path": "/path/to/program"})),
            // Translated back and sent again: nothing the request gives is new.
            (
                "translate_text",
                json!({"text": {"$ref": "s3.output"}, "source": "fr", "target": "en"}),
            ),
            (
                "send_sms",
                json!({"to": "1234567890", "message": {"$ref": "s4.output"}}),
            ),
        ]);
        for (idx, step) in written.steps.iter_mut().enumerate() {
            step.id = format!("s{}", idx + 1);
        }
        written.steps[4].depends_on = vec!["s4".into()];
        assert_eq!(redundant_calls(query, &written, 5), [3, 4]);
        // A later call that a kept one depends on stays.
        written.steps[2].depends_on = vec!["s5".into()];
        assert_eq!(redundant_calls(query, &written, 5), Vec::<usize>::new());
        // Parallel calls each carry values of their own; a chained call whose tool the
        // request names stays though it carries nothing literal.
        let parallel = plan(&[("fact", json!({"n": 5})), ("fact", json!({"n": 7}))]);
        assert!(redundant_calls("the factorial of 5 and of 7", &parallel, 2).is_empty());
        let chained = plan(&[
            ("calculate_loan_emi", json!({"amount": 10000})),
            (
                "calculate_squared",
                json!({"number": {"$ref": "s1.output.emi"}}),
            ),
            ("get_password", json!({"length": 10000})),
        ]);
        assert_eq!(
            redundant_calls(
                "Calculate the EMI of a loan of 10000, then the square of it",
                &chained,
                3
            ),
            [2]
        );
        // Only the first answer's calls are judged: a follow-up's call did a part.
        assert!(
            redundant_calls(
                "Calculate the EMI of a loan of 10000, then the square of it",
                &chained,
                2
            )
            .is_empty()
        );
        // A value the request gives by name is new under that name, though the number is not.
        let derivative = plan(&[
            ("derive", json!({"function": "3x^3 - 2x^2", "x_value": 4})),
            ("derive", json!({"function": "3x^3 - 2x^2", "x_value": 2})),
        ]);
        let query = "Differentiate '3x^3 - 2x^2' at x=4, then again at x=2";
        assert!(redundant_calls(query, &derivative, 2).is_empty());
    }

    #[test]
    fn values_given_by_name_belong_to_one_call() {
        let query = "Solve these. The first has a = 2, b = 5 and c = 3. The second has a = 1, \
                     b = -3, and c = 2. The last one has a=1, b=2, and c=1.";
        let three = plan(&[
            ("solve", json!({"a": 2, "b": 5, "c": 3})),
            ("solve", json!({"a": 1, "b": -3, "c": 2})),
        ]);
        // Every number of the last one is carried, by calls for the others.
        let left = unaddressed(query, &three, &[]);
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].text.starts_with("The last one"), "{left:?}");
        assert_eq!(
            left[0].keyed,
            [("a".to_owned(), 1.0), ("b".to_owned(), 2.0)]
        );
        let four = plan(&[
            ("solve", json!({"a": 2, "b": 5, "c": 3})),
            ("solve", json!({"a": 1, "b": -3, "c": 2})),
            ("solve", json!({"a": 1, "b": 2, "c": 1})),
        ]);
        assert!(adds(&four, 2, &left[0]));
        assert!(unaddressed(query, &four, &[]).is_empty());
        // Names the tool does not take: read as numbers, as before.
        let other = plan(&[("solve", json!({"x": 2, "y": 5}))]);
        assert!(unaddressed("Solve it with p = 2, q = 5.", &other, &[]).is_empty());
    }

    #[test]
    fn calls_that_carry_another_part_do_it() {
        let query = "Find a music festival in Atlanta on 2024-10-10 and get me two tickets.";
        let find = plan(&[(
            "Events.FindEvents",
            json!({"city": "Atlanta", "date": "2024-10-10"}),
        )]);
        assert!(does_another_part(query, &find, "get me two tickets."));
        assert!(!does_another_part(
            query,
            &find,
            "Find a music festival in Atlanta on 2024-10-10"
        ));
    }

    #[test]
    fn a_formula_is_addressed_by_its_coefficients() {
        let query = "Find the roots of two equations. The first is 3x^2 + 4x + 2 = 0. \
                     The second is 5x^2 - 7x + 3 = 0, where 'a' is the coefficient of x^2.";
        let first = plan(&[("roots", json!({"a": 3, "b": 4, "c": 2}))]);
        let left = unaddressed(query, &first, &[]);
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].text.starts_with("The second"), "{left:?}");
        assert_eq!(left[0].particulars, vec!["5", "-7x", "3"]);
        let both = plan(&[
            ("roots", json!({"a": 3, "b": 4, "c": 2})),
            ("roots", json!({"a": 5, "b": -7, "c": 3})),
        ]);
        assert_eq!(unaddressed(query, &both, &[]), Vec::<Part>::new());
        // As text, the formula carries its terms too.
        let text = plan(&[("solve", json!({"equation": "3x^2 + 4x + 2 = 0"}))]);
        assert_eq!(
            unaddressed("Solve 3x^2 + 4x + 2 = 0.", &text, &[]),
            Vec::<Part>::new()
        );
    }

    #[test]
    fn the_next_items_of_a_list_a_call_began_are_parts() {
        let texts = |left: Vec<Part>| -> Vec<String> { left.into_iter().map(|p| p.text).collect() };
        let copper = plan(&[(
            "calculate_resistance",
            json!({"length": 5, "resistivity": "copper"}),
        )]);
        let query = "Calculate the resistance of a wire of 5 meters with the resistivity of copper and aluminum";
        let left = unaddressed(query, &copper, &[]);
        assert_eq!(texts(left.clone()), ["aluminum"]);
        assert!(left[0].every);
        let both = plan(&[
            (
                "calculate_resistance",
                json!({"length": 5, "resistivity": "copper"}),
            ),
            (
                "calculate_resistance",
                json!({"length": 5, "resistivity": "aluminum"}),
            ),
        ]);
        assert!(unaddressed(query, &both, &[]).is_empty());

        // Inside one piece, after a comma; every word of an item must be carried.
        let query =
            "Get the protein sequence of human HbA1c, normal hemoglobin, and rat hemoglobin";
        let first = plan(&[("get_protein", json!({"protein_name": "HbA1c"}))]);
        assert_eq!(
            texts(unaddressed(query, &first, &[])),
            ["normal hemoglobin", "rat hemoglobin"]
        );
        let two = plan(&[
            ("get_protein", json!({"protein_name": "HbA1c"})),
            ("get_protein", json!({"protein_name": "normal hemoglobin"})),
        ]);
        assert_eq!(texts(unaddressed(query, &two, &[])), ["rat hemoglobin"]);

        // No list: the value does not end the piece before, or nothing a call carries does;
        // a long piece is a request of its own.
        let food = plan(&[("find_restaurant", json!({"cuisine": "Italian"}))]);
        assert!(
            unaddressed(
                "Find a place that serves Italian food and has vegan options",
                &food,
                &[]
            )
            .is_empty()
        );
        let none = plan(&[("calculate", json!({"radius": 5}))]);
        assert!(
            unaddressed(
                "the area of a circle of radius 5 and its perimeter",
                &none,
                &[]
            )
            .is_empty()
        );
        assert!(
            unaddressed(
                "Find copper prices in the shop and tell me when it is done",
                &plan(&[("find", json!({"item": "copper"}))]),
                &[]
            )
            .is_empty()
        );
    }

    #[test]
    fn parts_the_calls_carry_or_that_have_no_particulars_are_addressed() {
        let area = plan(&[("triangle_area", json!({"base": 10, "height": 5}))]);
        assert!(
            unaddressed(
                "Find the area with a base of 10 and a height of 5.",
                &area,
                &[]
            )
            .is_empty()
        );
        let both = plan(&[
            ("get_weather", json!({"city": "Berlin"})),
            ("send_email", json!({"to": "eve@example.com", "body": "x"})),
        ]);
        assert!(
            unaddressed(
                "Check the weather in Berlin, then email it to eve@example.com and tell me when it's done",
                &both, &[])
            .is_empty()
        );
        let reply = Plan::new("p1", "goal");
        assert!(unaddressed("Paris? And London?", &reply, &[]).is_empty());
    }

    #[test]
    fn numbers_are_matched_as_numbers() {
        assert_eq!(numbers_of("400,000"), Some(vec!["400000".to_owned()]));
        assert_eq!(
            numbers_of("5,10"),
            Some(vec!["5".to_owned(), "10".to_owned()])
        );
        assert_eq!(numbers_of("-3"), Some(vec!["-3".to_owned()]));
        assert_eq!(numbers_of("2019-12-13"), None);
        assert_eq!(numbers_of("7:30"), None);

        let mortgage = plan(&[(
            "mortgage",
            json!({"loan_amount": 400000, "interest_rate": 0.04, "loan_term": 15}),
        )]);
        let left = unaddressed(
            "Calculate the monthly mortgage payment for a loan amount of $400,000, with an \
             annual interest rate of 4% and a loan term of 15, 20 and 30 years.",
            &mortgage,
            &[],
        );
        let texts: Vec<&str> = left.iter().map(|part| part.text.as_str()).collect();
        assert_eq!(texts, vec!["a loan term of 15, 20", "30 years."]);
        // A number inside a longer one is not that number.
        let fifteen = plan(&[("factorial", json!({"number": 15}))]);
        let left = unaddressed("Find the factorial of 5 and 15.", &fifteen, &[]);
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].particulars, vec!["5"]);
        assert_eq!(
            numbers_in("2019-12-13, -4 and 2.5."),
            vec![2019.0, 12.0, 13.0, -4.0, 2.5]
        );
        let roots = plan(&[("roots", json!({"a": 3, "b": -11, "c": -4}))]);
        assert!(unaddressed("Roots for a = 3, b = -11, and c = -4.", &roots, &[]).is_empty());
        let weather = plan(&[(
            "weather",
            json!({"coordinates": [46.603354, 1.888334], "date": "2019-12-13"}),
        )]);
        assert!(
            unaddressed(
                "What is the wind speed and temperature at 46.603354,1.8883340 on December 13, 2019?",
                &weather, &[])
            .is_empty()
        );
        // A capitalised unit after a number is not a name the call must carry.
        let force = plan(&[("em_force", json!({"b_field": 5, "area": 2, "d_time": 4}))]);
        let left = unaddressed(
            "Calculate the force for a field of 5 Tesla, area of 2 square meters and a time of 4 \
             seconds, then repeat with a time of 10 seconds.",
            &force,
            &[],
        );
        let texts: Vec<&str> = left.iter().map(|part| part.text.as_str()).collect();
        assert_eq!(texts, vec!["repeat with a time of 10 seconds."]);
        // A unit written onto its number leaves the number.
        assert_eq!(without_unit("0.01m²"), "0.01");
        assert_eq!(without_unit("100µF"), "100");
        assert_eq!(without_unit("B12"), "B12");
        assert_eq!(without_unit("v1.2.3"), "v1.2.3");
        assert_eq!(without_unit("12kilograms"), "12kilograms");
        let growth = plan(&[(
            "growth",
            json!({"start": 1000000, "end": 1200000, "from": 2019, "to": 2020}),
        )]);
        assert!(unaddressed("Revenues of $1M in 2019 and $1.2M in 2020", &growth, &[]).is_empty());
        let triangle = plan(&[("area", json!({"base": 6, "height": 10}))]);
        assert!(
            unaddressed(
                "The area given its base and height as 6cm and 10cm.",
                &triangle,
                &[]
            )
            .is_empty()
        );
        // `a=1` is the number 1.
        let roots = plan(&[("roots", json!({"a": 1, "b": -3, "c": 2}))]);
        assert!(unaddressed("Solve it with a=1, b=-3, c=2. Then stop.", &roots, &[]).is_empty());
    }

    #[test]
    fn added_calls_count_only_for_what_the_plan_did_not_carry() {
        let query = "Play Taylor Swift and Maroon 5 for 20 and 15 minutes, on Spotify.";
        let first = plan(&[("play", json!({"artist": "Taylor Swift", "duration": 20}))]);
        let left = unaddressed(query, &first, &[]);
        assert!(!left.is_empty(), "{left:?}");
        let taylor = ("play", json!({"artist": "Taylor Swift", "duration": 20}));
        let maroon = ("play", json!({"artist": "Maroon 5", "duration": 15}));
        let next = plan(&[taylor.clone(), maroon.clone()]);
        assert!(left.iter().any(|part| adds(&next, 1, part)));
        // A repeat of the first call, or its values again, add nothing.
        let repeat = plan(&[taylor.clone(), taylor.clone()]);
        assert!(!left.iter().any(|part| adds(&repeat, 1, part)));
        let both = plan(&[taylor.clone(), maroon.clone()]);
        let again = plan(&[
            taylor,
            maroon,
            ("play", json!({"artist": "Taylor Swift", "duration": 15})),
        ]);
        assert!(
            !unaddressed(query, &both, &[])
                .iter()
                .any(|part| adds(&again, 2, part)),
            "15 was carried already"
        );
    }
}
