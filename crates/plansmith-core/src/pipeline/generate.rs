//! The attempt loop: generate → parse → ground → validate, and on errors a repair prompt
//! quoting them and the rejected output, for a bounded number of rounds. With a listener, the
//! reply is streamed and each step reported as soon as it is complete.

use std::time::Instant;

use serde_json::{Value, json};

use super::call::{Call, Candidate, cut, micros};
use super::prompt::Prompt;
use super::report::{Attempt, PlanError, PlanEvent};
use crate::diagnostic::{Code, Diagnostic};
use crate::llm::{
    Completion, CompletionRequest, FinishReason, LlmError, Message, OutputConstraint, Strategy,
    StreamEvent,
};
use crate::parse;
use crate::plan::Action;
use crate::prompts::RepairContext;
use crate::stream::StepScanner;
use crate::validate::validate;

/// Longest raw output kept per attempt in the diagnostics.
const RAW_KEEP: usize = 16_000;
/// Longest rejected output quoted in a repair prompt.
const REJECTED_QUOTE: usize = 6_000;

/// Generates and checks until an attempt is clean or the repairs run out, keeping the best
/// candidate, the last unreadable output and a failed repair call in `call`. A failed first
/// call is an error: there is nothing to fall back on.
pub(super) async fn attempts(call: &mut Call<'_>, prompt: &Prompt) -> Result<(), PlanError> {
    let request = call.request;
    let calls = prompt.calls;
    let mut messages = prompt.base_messages.clone();
    let mut constraint = prompt.constraint.clone();
    for attempt_index in 0..=request.options.max_repairs {
        let stage = Instant::now();
        call.emit(PlanEvent::AttemptStarted {
            attempt: attempt_index,
            strategy: prompt.strategy,
        });
        let completion_request = CompletionRequest {
            messages: messages.clone(),
            constraint: constraint.clone(),
            max_tokens: request.options.max_tokens,
            temperature: 0.0,
        };
        let generated = if call.on_event.is_some() {
            generate_streamed(call, completion_request, attempt_index, calls).await
        } else {
            call.model.complete(completion_request).await
        };
        let completion = match generated {
            Ok(completion) => completion,
            Err(source) => {
                call.diagnostics.timings.generate_us += micros(stage);
                if attempt_index == 0 {
                    call.diagnostics.timings.total_us = micros(call.started);
                    return Err(PlanError::Model {
                        source,
                        diagnostics: Box::new(std::mem::take(&mut call.diagnostics)),
                    });
                }
                call.model_failure = Some(source);
                break;
            }
        };
        let diagnostics = &mut call.diagnostics;
        let elapsed = micros(stage);
        let queue_us = completion.queue_us.min(elapsed);
        let generate_us = elapsed - queue_us;
        diagnostics.timings.generate_us += generate_us;
        diagnostics.timings.queue_us += queue_us;
        diagnostics.usage += completion.usage;
        if let Some(used) = completion.strategy {
            diagnostics.strategy = Some(used);
        }
        if attempt_index > 0 {
            diagnostics.repairs += 1;
        }
        // A backend may have fallen back to another strategy than the one asked for.
        let used = completion.strategy.unwrap_or(prompt.strategy);
        let raw = match completion.tool_calls.first() {
            Some(tool_call)
                if completion.text.trim().is_empty() || used == Strategy::ToolCalling =>
            {
                tool_call.arguments.clone()
            }
            _ => completion.text.clone(),
        };
        let mut attempt = Attempt {
            index: attempt_index,
            raw: cut(&raw, RAW_KEEP),
            finish: completion.finish,
            shape: None,
            json_repaired: false,
            diagnostics: Vec::new(),
            usage: completion.usage,
            generate_ms: generate_us / 1000,
            queue_ms: queue_us / 1000,
            stages: completion.stages,
        };
        if completion.finish == FinishReason::Length {
            attempt.diagnostics.push(Diagnostic::warning(
                Code::Truncated,
                "",
                format!(
                    "the model stopped at its token limit ({} tokens)",
                    request.options.max_tokens
                ),
            ));
        }

        let stage = Instant::now();
        let parsed = if calls {
            parse::parse_calls_for_pipeline(&raw, &call.defaults())
        } else {
            parse::parse_for_pipeline(&raw, &call.defaults())
        };
        call.diagnostics.timings.parse_us += micros(stage);
        let parsed = match parsed {
            Ok(parsed) => parsed,
            Err(err) => {
                let message = err.to_string();
                attempt
                    .diagnostics
                    .push(Diagnostic::error(Code::ParseError, "", message.clone()));
                call.diagnostics.attempts.push(attempt);
                call.last_failure = Some((message.clone(), raw.clone()));
                call.emit(PlanEvent::Repair {
                    attempt: attempt_index,
                    problems: vec![message.clone()],
                });
                let repair = call.templates.repair(&RepairContext {
                    diagnostics: Vec::new(),
                    parse_error: Some(message),
                    rejected: cut(&raw, REJECTED_QUOTE),
                    calls,
                })?;
                messages = repair_messages(&prompt.base_messages, &raw, repair);
                continue;
            }
        };
        attempt.shape = Some(parsed.shape);
        attempt.json_repaired = parsed.repaired;

        let stage = Instant::now();
        let (plan, all) = call.checked(parsed);
        call.diagnostics.timings.validate_us += micros(stage);
        attempt.diagnostics.extend(all.iter().cloned());
        call.diagnostics.attempts.push(attempt);

        let n_errors = all.iter().filter(|d| d.is_error()).count();
        let clean = n_errors == 0;
        let made_calls = plan
            .steps
            .iter()
            .any(|s| matches!(s.action, Action::Tool { .. } | Action::Agent { .. }));
        let better = call
            .best
            .as_ref()
            .is_none_or(|b| n_errors <= b.diagnostics.iter().filter(|d| d.is_error()).count());
        let problems = repair_prompt_items(&all);
        if better {
            call.best = Some(Candidate {
                plan,
                diagnostics: all,
                raw: raw.clone(),
            });
        }
        if clean {
            break;
        }
        call.emit(PlanEvent::Repair {
            attempt: attempt_index,
            problems: problems.clone(),
        });
        let repair = call.templates.repair(&RepairContext {
            diagnostics: problems,
            parse_error: None,
            rejected: cut(&raw, REJECTED_QUOTE),
            calls,
        })?;
        messages = repair_messages(&prompt.base_messages, &raw, repair);
        // The answer made calls and only their details were wrong: the repair is calls too.
        // Offered the plain-text way out, small models answer a repair by giving up ("I can't
        // do that with the tools I have") and lose the plan they nearly had.
        if made_calls
            && let Some(OutputConstraint::ToolCalls { max_text, .. }) = constraint.as_mut()
        {
            *max_text = 0;
        }
    }
    Ok(())
}

/// One streamed generation: tokens and each complete step go to the call's listener as they
/// arrive.
async fn generate_streamed(
    call: &mut Call<'_>,
    completion_request: CompletionRequest,
    attempt: u32,
    calls: bool,
) -> Result<Completion, LlmError> {
    use futures::StreamExt;
    let model = call.model;
    let mut stream = model.stream(completion_request);
    let mut scanner = StepScanner::new();
    let mut steps: Vec<Value> = Vec::new();
    // The tool-call format: the text so far, read again for calls that have closed.
    let mut written = String::new();
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::Delta(text) => {
                let found = if calls {
                    written.push_str(&text);
                    crate::calls::complete_steps(&written)
                        .into_iter()
                        .skip(steps.len())
                        .collect()
                } else {
                    scanner.feed(&text)
                };
                call.emit(PlanEvent::Token { attempt, text });
                for step in found {
                    steps.push(step);
                    emit_step(call, &steps, attempt);
                }
            }
            StreamEvent::Done(completion) => {
                // A backend that does not stream gives everything at once: its steps are
                // still reported, before the outcome.
                if calls {
                    let rest: Vec<Value> = crate::calls::complete_steps(&completion.text)
                        .into_iter()
                        .skip(steps.len())
                        .collect();
                    for step in rest {
                        steps.push(step);
                        emit_step(call, &steps, attempt);
                    }
                } else if scanner.text().is_empty() {
                    let whole = match completion.tool_calls.first() {
                        Some(tool_call) if completion.text.trim().is_empty() => {
                            &tool_call.arguments
                        }
                        _ => &completion.text,
                    };
                    for step in scanner.feed(whole) {
                        steps.push(step);
                        emit_step(call, &steps, attempt);
                    }
                }
                return Ok(completion);
            }
        }
    }
    Err(LlmError::Protocol(
        "the model's stream ended without a reply".into(),
    ))
}

/// Parses and validates the steps seen so far and reports the last one.
fn emit_step(call: &mut Call<'_>, steps: &[Value], attempt: u32) {
    // A strict JSON Schema reply writes `null` for absent optional fields; the client maps
    // the final reply back, and this early preview drops them the same way.
    let steps: Vec<Value> = steps.iter().cloned().map(drop_nulls).collect();
    let text = json!({"steps": steps}).to_string();
    let Ok(parsed) = parse::parse_for_pipeline(&text, &call.defaults()) else {
        return;
    };
    let Some(last_id) = parsed.plan.steps.last().map(|s| s.id.clone()) else {
        return;
    };
    let mut written = parsed.plan;
    let mut findings = crate::ground::ground(&mut written, call.request, call.catalog);
    let (plan, mut checked) = validate(written, call.catalog, &call.request.options);
    findings.append(&mut checked);
    let Some(step) = plan.steps.iter().find(|s| s.id == last_id) else {
        return;
    };
    let diagnostics = findings
        .into_iter()
        .filter(|d| d.step.as_deref() == Some(step.id.as_str()))
        .collect();
    call.emit(PlanEvent::Step {
        attempt,
        step: Box::new(step.clone()),
        diagnostics,
    });
}

/// `value` without object members that are `null`, recursively.
fn drop_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, drop_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(drop_nulls).collect()),
        other => other,
    }
}

/// The errors, one line each, as the repair prompt quotes them.
fn repair_prompt_items(diagnostics: &[Diagnostic]) -> Vec<String> {
    diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string().replace('\n', " "))
        .collect()
}

/// The base conversation, the rejected output, and the repair request. Earlier failed attempts
/// are not replayed, so repair prompts stay bounded.
fn repair_messages(base: &[Message], raw: &str, repair: String) -> Vec<Message> {
    let mut messages = base.to_vec();
    messages.push(Message::assistant(cut(raw, REJECTED_QUOTE)));
    messages.push(Message::user(repair));
    messages
}
