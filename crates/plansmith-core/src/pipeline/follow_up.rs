//! Follow-up questions for the tool-call format: a part of the request that no call addresses
//! is asked for once more, and the calls that come back are added when they do address it.

use std::time::Instant;

use super::call::{Call, Candidate, micros};
use super::prompt::Prompt;
use crate::diagnostic::{Code, Diagnostic};
use crate::llm::{CompletionRequest, Message};
use crate::parse;
use crate::prompts::FollowUpContext;

/// At most this many follow-up questions per plan.
const FOLLOW_UPS_MAX: usize = 3;

/// Asks the model, once per part of the request that no call of `candidate` addresses (see
/// [`crate::cover`]), for that part's calls, and adds them when they address the part and
/// the plan with them has no more errors; anything else (a failed call, a text answer,
/// calls for something else) leaves the candidate as it was. Only a candidate without
/// errors is followed up, and never past `max_steps`.
pub(super) async fn follow_up(
    call: &mut Call<'_>,
    prompt: &Prompt,
    mut candidate: Candidate,
) -> Candidate {
    let request = call.request;
    if candidate.diagnostics.iter().any(Diagnostic::is_error) {
        return candidate;
    }
    let parts = crate::cover::unaddressed(&request.query, &candidate.plan);
    for part in parts.into_iter().take(FOLLOW_UPS_MAX) {
        let n_steps = candidate.plan.steps.len();
        if n_steps >= request.options.max_steps {
            break;
        }
        if crate::cover::addresses(&candidate.plan, &part) {
            continue;
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
        let stage = Instant::now();
        let completion = call
            .model
            .complete(CompletionRequest {
                messages,
                constraint: prompt.constraint.clone(),
                max_tokens: request.options.max_tokens,
                temperature: 0.0,
            })
            .await;
        call.diagnostics.timings.generate_us += micros(stage);
        let completion = match completion {
            Ok(completion) => completion,
            Err(err) => {
                call.diagnostics.findings.push(Diagnostic::warning(
                    Code::ModelError,
                    "",
                    format!("asking for the calls of a part of the request failed: {err}"),
                ));
                break;
            }
        };
        call.diagnostics.usage += completion.usage;
        // Both answers in tagged form, one after the other: the calls are numbered on as
        // if the model had written them all at once (the first may have been bare calls).
        let (Some((written, _)), Some((added, n_added))) = (
            crate::calls::tagged(&candidate.raw),
            crate::calls::tagged(&completion.text),
        ) else {
            continue;
        };
        if n_added == 0 {
            continue;
        }
        let raw = format!("{written}\n{added}");
        let Ok(parsed) = parse::parse_calls_for_pipeline(&raw, &call.defaults()) else {
            continue;
        };
        let (plan, mut all) = call.checked(parsed);
        if all.iter().any(Diagnostic::is_error) || plan.steps.len() <= n_steps {
            continue;
        }
        let mut new_steps = plan.clone();
        new_steps.steps.drain(..n_steps);
        if !crate::cover::touches(&new_steps, &part) {
            continue;
        }
        let ids: Vec<&str> = new_steps.steps.iter().map(|s| s.id.as_str()).collect();
        all.push(Diagnostic::info(
            Code::AutoFixed,
            "/steps",
            format!(
                "the first answer had no call for \"{}\"; asked for it and added {}",
                part.text,
                ids.join(", ")
            ),
        ));
        candidate = Candidate {
            plan,
            diagnostics: all,
            raw,
        };
    }
    candidate
}
