//! Follow-ups for the tool-call format: a part of the request that no call addresses gets
//! more calls, and the calls that come back are added when they do address it.
//!
//! Two ways to ask, in this order. A model that continues an answer (see
//! [`crate::Capabilities::prefill`]) under a grammar is first asked to write its answer on:
//! the calls it wrote, then `<tool_call>`, and the grammar of one call. Small models stop after
//! the first item of a list ("the weather in Chicago, Sacramento and Portland") but, made to go
//! on, write the next one, as they were trained to write parallel calls. When that call does
//! not do the part (a repeat, a call for something else), the part is asked for by a question
//! in the same conversation, which works for a later step of a chain ("… and email it to
//! Bob") better than for the next item of a list, where the model repeats its first call.
//!
//! A part whose words name an offered tool that no call uses ("… and book 2 tickets for me":
//! `BuyBusTicket` after a `FindBus` call; see [`crate::cover`]) is left too; writing on is
//! then held to those tools, and only a call of one of them does the part.
//!
//! The other way round, calls of the first answer that do nothing the request asks for are
//! left out once the follow-ups are done (`without_redundant`): small models go on writing
//! calls after the request is done, repeating a tool or calling one the request does not name
//! with nothing of the request's that the calls before lack.
//!
//! A follow-up is a guess at a part the first answer left out, so a call to a destructive tool
//! (`destructiveHint`) is added only when the part asks for it by the tool's verb ("delete the
//! file …" for `delete_file`); otherwise it is dropped with a `step_dropped` warning.

use std::sync::Arc;
use std::time::Instant;

use super::call::{Call, Candidate, micros};
use super::prompt::Prompt;
use crate::calls::{CALL_CLOSE, CALL_OPEN};
use crate::cover::Part;
use crate::diagnostic::{Code, Diagnostic};
use crate::llm::{CompletionRequest, Message, OutputConstraint};
use crate::parse;
use crate::plan::Action;
use crate::prompts::FollowUpContext;

/// At most this many parts of a request are followed up per plan.
const FOLLOW_UPS_MAX: usize = 3;

/// For each part of the request that no call of `candidate` addresses (see [`crate::cover`]),
/// asks the model for that part's calls, on from its answer and then by a question, and adds
/// them when they address the part and the plan with them has no more errors; anything else
/// (a failed call, a text answer, calls for something else) leaves the candidate as it was.
/// Only a candidate without errors is followed up, and never past `max_steps`.
pub(super) async fn follow_up(
    call: &mut Call<'_>,
    prompt: &Prompt,
    mut candidate: Candidate,
) -> Candidate {
    let request = call.request;
    if candidate.diagnostics.iter().any(Diagnostic::is_error) {
        return candidate;
    }
    // Writing on needs a model that continues an answer, and the grammar of one call, which
    // may reference the calls before it; for a part that names its tools, a call of one of
    // them.
    let prefill = call.model.capabilities().prefill;
    let one_call = |earlier: usize, part: &Part| match &prompt.constraint {
        Some(OutputConstraint::ToolCalls { schema, .. }) if prefill => {
            let schema = crate::calls::only_tools(schema, &part.tools);
            Some(OutputConstraint::JsonSchema {
                name: "tool_call".to_owned(),
                schema: Arc::new(crate::calls::call_schema_at(&schema, earlier)),
                strict: true,
            })
        }
        _ => None,
    };
    // The calls a follow-up question adds come after the plan's.
    let more_calls = |earlier: usize| {
        let mut constraint = prompt.constraint.clone();
        if let Some(OutputConstraint::ToolCalls {
            earlier: before, ..
        }) = constraint.as_mut()
        {
            *before = u32::try_from(earlier).unwrap_or(u32::MAX);
        }
        constraint
    };
    let offered: Vec<&str> = call.selected.iter().map(|t| t.tool.name.as_str()).collect();
    let parts = crate::cover::unaddressed(&request.query, &candidate.plan, &offered);
    for part in parts.into_iter().take(FOLLOW_UPS_MAX) {
        let n_steps = candidate.plan.steps.len();
        if n_steps >= request.options.max_steps {
            break;
        }
        if crate::cover::addresses(&candidate.plan, &part) {
            continue;
        }
        // The calls so far, in tagged form (the first answer may have written them bare).
        let Some((written, _)) = crate::calls::tagged(&candidate.raw) else {
            break;
        };
        if let Some(constraint) = one_call(n_steps, &part) {
            let mut messages = prompt.base_messages.to_vec();
            messages.push(Message::assistant(format!("{written}\n{CALL_OPEN}\n")));
            let Some(text) = ask(call, messages, Some(constraint)).await else {
                break;
            };
            let added = format!("{CALL_OPEN}\n{}\n{CALL_CLOSE}", text.trim());
            if let Some(next) = adopt_or_replace(
                call,
                &candidate.plan,
                &written,
                &added,
                &part,
                "wrote its answer on",
            ) {
                candidate = next;
                continue;
            }
        }
        let Ok(question) = call.templates.follow_up(&FollowUpContext {
            part: part.text.clone(),
            calls: n_steps,
        }) else {
            break;
        };
        let mut messages = prompt.base_messages.to_vec();
        messages.push(Message::assistant(candidate.raw.clone()));
        messages.push(Message::user(question));
        let Some(text) = ask(call, messages, more_calls(n_steps)).await else {
            break;
        };
        let Some((added, n_added)) = crate::calls::tagged(&text) else {
            continue;
        };
        if n_added == 0 {
            continue;
        }
        if let Some(next) = adopt_or_replace(
            call,
            &candidate.plan,
            &written,
            &added,
            &part,
            "asked for it",
        ) {
            candidate = next;
        }
    }
    candidate
}

/// A first call that fills an argument with a result no call produces, while an offered tool
/// that nobody calls returns it ([`crate::ground::missing_producer`]): the model is asked
/// for a call of that tool, on a model that continues an answer under the grammar of one call,
/// and the first answer's calls follow it. Grounding then passes the producer's field by
/// `$ref`. Adopted only when the plan has no error and the argument did become that `$ref`
/// (then `true`); otherwise the candidate stays as it was.
pub(super) async fn producer_first(
    call: &mut Call<'_>,
    prompt: &Prompt,
    candidate: Candidate,
) -> (Candidate, bool) {
    if candidate.diagnostics.iter().any(Diagnostic::is_error) || !call.model.capabilities().prefill
    {
        return (candidate, false);
    }
    let Some(OutputConstraint::ToolCalls { schema, .. }) = &prompt.constraint else {
        return (candidate, false);
    };
    let offered: Vec<&crate::catalog::Tool> = call.selected.iter().map(|t| &t.tool).collect();
    let Some((key, producer)) =
        crate::ground::missing_producer(&candidate.plan, call.request, call.catalog, &offered)
    else {
        return (candidate, false);
    };
    let producer = producer.name.clone();
    let constraint = OutputConstraint::JsonSchema {
        name: "tool_call".to_owned(),
        schema: Arc::new(crate::calls::call_schema_at(
            &crate::calls::only_tools(schema, std::slice::from_ref(&producer)),
            0,
        )),
        strict: true,
    };
    let mut messages = prompt.base_messages.to_vec();
    messages.push(Message::assistant(format!("{CALL_OPEN}\n")));
    let Some(text) = ask(call, messages, Some(constraint)).await else {
        return (candidate, false);
    };
    let Some((written, _)) = crate::calls::tagged_after(&candidate.raw, 1) else {
        return (candidate, false);
    };
    let raw = format!("{CALL_OPEN}\n{}\n{CALL_CLOSE}\n{written}", text.trim());
    let Ok(parsed) = parse::parse_calls_for_pipeline(&raw, &call.defaults()) else {
        return (candidate, false);
    };
    let (plan, mut all) = call.checked(parsed);
    // (Repeats the grounding made equal are merged: the plan may have fewer steps than calls.)
    let passed =
        plan.steps.first().is_some_and(
            |step| matches!(&step.action, Action::Tool { name, .. } if *name == producer),
        ) && plan.steps.get(1).is_some_and(|step| match &step.action {
            Action::Tool { arguments, .. } => arguments
                .get(&key)
                .and_then(|value| value.get("$ref"))
                .and_then(serde_json::Value::as_str)
                .is_some_and(|target| target == "s1" || target.starts_with("s1.")),
            _ => false,
        });
    if all.iter().any(Diagnostic::is_error) || !passed {
        return (candidate, false);
    }
    all.push(Diagnostic::info(
        Code::AutoFixed,
        "/steps",
        format!(
            "the first call needed `{key}` from `{producer}`, which no call made; asked for \
             that call first (s1) and passed its `{key}` on"
        ),
    ));
    let rebuilt = Candidate {
        plan,
        diagnostics: all,
        raw,
    };
    (rebuilt, true)
}

/// The candidate without the calls among its first `judged` (the first answer's) that do
/// nothing the request asks for ([`crate::cover::redundant_calls`]), each with a
/// `step_dropped` warning. A candidate with errors is returned as it is.
pub(super) fn without_redundant(query: &str, mut candidate: Candidate, judged: usize) -> Candidate {
    if candidate.diagnostics.iter().any(Diagnostic::is_error) {
        return candidate;
    }
    let dropped = crate::cover::redundant_calls(query, &candidate.plan, judged);
    if dropped.is_empty() {
        return candidate;
    }
    let mut steps = std::mem::take(&mut candidate.plan.steps);
    for idx in dropped.into_iter().rev() {
        let step = steps.remove(idx);
        let name = match &step.action {
            Action::Tool { name, .. } => name.as_str(),
            _ => "",
        };
        candidate
            .diagnostics
            .retain(|d| d.step.as_deref() != Some(step.id.as_str()));
        candidate.diagnostics.push(
            Diagnostic::warning(
                Code::StepDropped,
                format!("/steps/{idx}"),
                format!(
                    "step `{}` (`{name}`) does nothing the request asks for: it carries none of \
                     the request's values that the calls before it lack, and repeats a tool or \
                     calls one the request does not name; it was left out",
                    step.id
                ),
            )
            .with_step(step.id.clone()),
        );
    }
    candidate.plan.steps = steps;
    candidate
}

/// One model call of a follow-up; `None` when it failed (a warning says so).
async fn ask(
    call: &mut Call<'_>,
    messages: Vec<Message>,
    constraint: Option<OutputConstraint>,
) -> Option<String> {
    let stage = Instant::now();
    let completion = call
        .model
        .complete(CompletionRequest {
            messages,
            constraint,
            max_tokens: call.request.options.max_tokens,
            temperature: 0.0,
        })
        .await;
    call.diagnostics.timings.generate_us += micros(stage);
    match completion {
        Ok(completion) => {
            call.diagnostics.usage += completion.usage;
            Some(completion.text)
        }
        Err(err) => {
            call.diagnostics.findings.push(Diagnostic::warning(
                Code::ModelError,
                "",
                format!("asking for the calls of a part of the request failed: {err}"),
            ));
            None
        }
    }
}

/// [`adopt`]; but when the part names its tools, the request names none of the tools the plan
/// so far calls (`MBTI.analyse` for "my personality type based on the five factor model"),
/// and those calls do no other part of the request (carry none of another part's
/// particulars), the first answer was the model's wrong pick, not a part of the request: the
/// calls `added` replace it, when they stand on their own (no `$ref` to the calls they
/// replace).
fn adopt_or_replace(
    call: &mut Call<'_>,
    before: &crate::plan::Plan,
    written: &str,
    added: &str,
    part: &Part,
    how: &str,
) -> Option<Candidate> {
    let query = &call.request.query;
    if !part.tools.is_empty()
        && crate::cover::names_no_call(query, before)
        && !crate::cover::does_another_part(query, before, &part.text)
    {
        let mut replaced: Vec<&str> = Vec::new();
        for step in &before.steps {
            if let Action::Tool { name, .. } = &step.action
                && !replaced.contains(&name.as_str())
            {
                replaced.push(name);
            }
        }
        let replaced: Vec<String> = replaced.iter().map(|name| format!("`{name}`")).collect();
        let how = format!(
            "{how} with a tool the request names, in place of {} (which it does not name),",
            replaced.join(", ")
        );
        if let Some(alone) = adopt(call, "", added, 0, part, &how) {
            return Some(alone);
        }
    }
    adopt(call, written, added, before.steps.len(), part, how)
}

/// The candidate with the calls `added` after the `n_steps` calls `written` (both tagged),
/// when they parse, the plan has no error and the new calls carry one of `part`'s
/// particulars that the calls before them do not; the calls are numbered on as if the model
/// had written them all at once.
fn adopt(
    call: &mut Call<'_>,
    written: &str,
    added: &str,
    n_steps: usize,
    part: &Part,
    how: &str,
) -> Option<Candidate> {
    let raw = if written.is_empty() {
        added.to_owned()
    } else {
        format!("{written}\n{added}")
    };
    let parsed = parse::parse_calls_for_pipeline(&raw, &call.defaults()).ok()?;
    let (plan, mut all) = call.checked(parsed);
    if all.iter().any(Diagnostic::is_error) || plan.steps.len() <= n_steps {
        return None;
    }
    let added_steps = plan.steps.get(n_steps..).unwrap_or_default();
    // A follow-up guesses at a part the first answer left out; a guess that deletes, sends or
    // overwrites something is not added unless the part asks for that.
    if let Some(name) = added_steps.iter().find_map(|step| match &step.action {
        Action::Tool { name, .. }
            if call
                .catalog
                .tool(name)
                .is_some_and(|t| t.tool.is_destructive())
                && !asks_for(&part.text, name) =>
        {
            Some(name.clone())
        }
        _ => None,
    }) {
        call.diagnostics.findings.push(Diagnostic::warning(
            Code::StepDropped,
            "/steps",
            format!(
                "the call for \"{}\" that the model {how} uses `{name}`, a destructive tool \
                 the request does not ask for; it was not added",
                part.text
            ),
        ));
        return None;
    }
    if !crate::cover::adds(&plan, n_steps, part) {
        return None;
    }
    let ids: Vec<&str> = added_steps.iter().map(|s| s.id.as_str()).collect();
    all.push(Diagnostic::info(
        Code::AutoFixed,
        "/steps",
        format!(
            "the first answer had no call for \"{}\"; {how} and added {}",
            part.text,
            ids.join(", ")
        ),
    ));
    Some(Candidate {
        plan,
        diagnostics: all,
        raw,
    })
}

/// Verbs of tools that delete, stop or overwrite something.
const DESTRUCTIVE_VERBS: [&str; 22] = [
    "delete",
    "remove",
    "drop",
    "erase",
    "wipe",
    "destroy",
    "purge",
    "clear",
    "reset",
    "cancel",
    "revoke",
    "terminate",
    "kill",
    "uninstall",
    "truncate",
    "overwrite",
    "unlink",
    "rm",
    "del",
    "disable",
    "shutdown",
    "format",
];

/// Whether `part` asks for what the tool `name` does: a word of the name that is a verb of
/// [`DESTRUCTIVE_VERBS`] (else the name's first word) is a word of the part, both read as
/// retrieval reads them ([`crate::retrieve::tokenize`]: identifiers split, words stemmed, so
/// "deleting" is `delete_file`'s "delete").
fn asks_for(part: &str, name: &str) -> bool {
    use crate::retrieve::tokenize;
    let words = tokenize(name);
    let verbs: Vec<&String> = words
        .iter()
        .filter(|w| {
            DESTRUCTIVE_VERBS
                .iter()
                .any(|v| tokenize(v).first() == Some(*w))
        })
        .collect();
    let wanted: Vec<&String> = if verbs.is_empty() {
        words.first().into_iter().collect()
    } else {
        verbs
    };
    let part = tokenize(part);
    wanted.iter().any(|verb| part.contains(verb))
}

#[cfg(test)]
mod tests {
    use super::asks_for;

    #[test]
    fn a_destructive_tool_is_asked_for_by_its_verb() {
        assert!(asks_for("then delete report.txt", "delete_file"));
        assert!(asks_for("and deleting the old logs", "delete_file"));
        assert!(asks_for("remove the draft", "fileRemove"));
        assert!(asks_for("send $5 to Bob", "send_money"));
        assert!(!asks_for("email it to sales@example.com", "delete_file"));
        assert!(!asks_for("and tell me the time", "drop_table"));
        assert!(!asks_for("the format of the date", "rm"));
    }
}
