//! The fit check: does any tool the plan calls fit the request at all?
//!
//! Small models call a tool for every request, the ones no tool can do included ("What's the
//! mass of an electron?" becomes `calculate_current(voltage, resistance)` with invented
//! values), and asked whether a tool fits they answer yes. What they do tell apart is how well
//! a tool's description *predicts* the request: the request's likelihood after "A function:
//! `f(…)`: what it does. A user's request that this function answers:", against its
//! likelihood after the same sentence about a content-free function (`run(input)`: "Runs a
//! task."). The difference, per token of the request, is the tool's fit, in nats: the words
//! of a request a tool does become likelier once the model has read the tool (a tool of a plan
//! that calls several is also scored on each part of the request, and keeps its best). A plan
//! whose every called tool fits less than [`FIT_MIN`] is not returned as calls: the person is asked
//! instead, with the closest tool named, and the calls the model wrote are kept in the plan's
//! metadata (`unfitting_calls`). An answer (a replan with feedback) is planned without the
//! check, so "yes, use it" is heard.
//!
//! A tool that fits a request is also given what it needs by the request. A plan whose every
//! call fills at least half of its tool's required arguments with values the request does not
//! give (see `invented_values`) asks the same way, naming the values the model guessed; this
//! half needs no model, so it checks the plans of every model.
//!
//! The scoring needs a model that scores text ([`crate::LanguageModel::likelihood`]: the
//! embedded model does, remote providers do not) and costs two short evaluations per scored
//! text (the request, and its parts for a plan of several tools): one after the tool's
//! sentence, one after the content-free one, shared by the tools; it stops at the first tool
//! that fits.

use serde_json::{Value, json};

use super::call::{Call, Candidate, chinese, micros};
use crate::catalog::Tool;
use crate::diagnostic::{Code, Diagnostic};
use crate::llm::{LanguageModel, LlmError};
use crate::plan::{Action, Question, QuestionKind};
use crate::prompts::short_description;

/// A tool fits a request when the request is at least this much likelier per token after the
/// tool's description than after a content-free one (nats per token). Chosen on the 0.5B
/// default model, where it separated BFCL's requests that a given tool does from those it does
/// not better than any absolute similarity did (see docs/perf.md, "The fit check").
const FIT_MIN: f64 = 0.1;

/// Characters of a request that are scored (a long request's opening says what it wants).
const SCORED_CHARS: usize = 600;

/// A part of a request shorter than this many words is not scored on its own (too few tokens
/// for a mean to mean much: "and tell me").
const PART_WORDS: usize = 4;

/// Characters of a tool's description in its sentence.
const DESCRIPTION_CHARS: usize = 400;

/// The sentence about a content-free function every tool's fit is measured against.
const BASELINE: &str =
    "A function: run(input): Runs a task.\nA user's request that this function answers:";

/// The sentence about `tool` that a request is scored after.
fn sentence(tool: &Tool) -> String {
    let parameters: Vec<&str> = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let description = short_description(tool.description.trim(), DESCRIPTION_CHARS);
    format!(
        "A function: {}({}): {description}\nA user's request that this function answers:",
        tool.name,
        parameters.join(", ")
    )
}

/// A fit measured: the tool and its nats per token over the baseline.
struct Fit {
    tool: String,
    nats: f64,
}

/// What the scores say: a tool fits, or none does (each with its best fit).
enum Measured {
    Fits,
    NoneFits(Vec<Fit>),
}

/// The mean log-probability of a token of `text` after `context`; `None` when the model cannot
/// score.
async fn per_token(
    model: &dyn LanguageModel,
    context: &str,
    text: &str,
) -> Result<Option<f64>, LlmError> {
    Ok(model
        .likelihood(context.to_owned(), text.to_owned())
        .await?
        .filter(|scored| scored.tokens > 0)
        .map(|scored| scored.per_token()))
}

/// Scores each tool against the request, in order, until one fits. A plan that calls several
/// different tools answers a request that asks several things, and each tool does one of them:
/// such a tool is also scored against each part of the request ([`crate::cover`]'s sentences
/// and joints) of at least [`PART_WORDS`] words, and its fit is the best.
async fn measure(
    model: &dyn LanguageModel,
    catalog: &crate::catalog::Catalog,
    query: &str,
    tools: &[&str],
) -> Result<Option<Measured>, LlmError> {
    let mut texts = vec![format!(
        " {}",
        short_description(query.trim(), SCORED_CHARS)
    )];
    if tools.len() > 1 {
        for part in crate::cover::pieces(query) {
            let text = format!(" {}", short_description(&part, SCORED_CHARS));
            if part.split_whitespace().count() >= PART_WORDS && !texts.contains(&text) {
                texts.push(text);
            }
        }
    }
    let mut baselines: Vec<Option<f64>> = vec![None; texts.len()];
    let mut fits = Vec::new();
    for &name in tools {
        let Some(tool) = catalog.tool(name) else {
            continue;
        };
        let context = sentence(&tool.tool);
        let mut best = f64::NEG_INFINITY;
        for (text, baseline) in texts.iter().zip(baselines.iter_mut()) {
            let base = match baseline {
                Some(base) => *base,
                None => match per_token(model, BASELINE, text).await? {
                    Some(base) => *baseline.insert(base),
                    None => return Ok(None),
                },
            };
            let Some(scored) = per_token(model, &context, text).await? else {
                return Ok(None);
            };
            let nats = scored - base;
            tracing::debug!(tool = name, text = %text, nats, "fit");
            if nats >= FIT_MIN {
                return Ok(Some(Measured::Fits));
            }
            best = best.max(nats);
        }
        fits.push(Fit {
            tool: name.to_owned(),
            nats: best,
        });
    }
    Ok(Some(Measured::NoneFits(fits)))
}

/// Checks that some tool the candidate calls fits the request; when none does, the calls are
/// replaced by a question. A model that cannot score, a failed scoring (a warning), a replan
/// with feedback, a plan without tool calls or with errors: the candidate is returned as is.
pub(super) async fn check(call: &mut Call<'_>, candidate: Candidate) -> Candidate {
    let request = call.request;
    if !request.options.check_fit
        || request.feedback.is_some()
        || candidate.diagnostics.iter().any(Diagnostic::is_error)
    {
        return candidate;
    }
    let mut tools: Vec<&str> = Vec::new();
    for step in &candidate.plan.steps {
        if let Action::Tool { name, .. } = &step.action
            && !tools.contains(&name.as_str())
        {
            tools.push(name);
        }
    }
    if tools.is_empty() {
        return candidate;
    }
    let started = std::time::Instant::now();
    let measured = measure(call.model, call.catalog, &request.query, &tools).await;
    call.diagnostics.timings.fit_us += micros(started);
    match measured {
        Ok(Some(Measured::NoneFits(fits))) => {
            let Some(closest) = fits.iter().max_by(|a, b| a.nats.total_cmp(&b.nats)) else {
                return candidate;
            };
            let zh = chinese(&candidate.plan.locale);
            let text = if zh {
                format!(
                    "现有的工具似乎都做不了这件事：最接近的是 `{}`。要照样调用它，还是换一个工具？",
                    closest.tool
                )
            } else {
                format!(
                    "None of the tools I can use seems to do this; the closest is `{}`. Should I \
                     call it anyway, or which tool should do it?",
                    closest.tool
                )
            };
            let call_it = if zh {
                format!("照样调用 `{}`", closest.tool)
            } else {
                format!("call `{}` anyway", closest.tool)
            };
            let scores: Vec<String> = fits
                .iter()
                .map(|f| format!("`{}` {:.2}", f.tool, f.nats))
                .collect();
            let finding = Diagnostic::warning(
                Code::NoToolFits,
                "/steps",
                format!(
                    "no called tool fits the request (nats per token over a content-free \
                     function: {}; a fit needs {FIT_MIN}); the calls became a question and are \
                     kept in the plan's metadata as `unfitting_calls`",
                    scores.join(", ")
                ),
            )
            .with_value(json!(fits.iter().map(|f| &f.tool).collect::<Vec<_>>()));
            return ask(candidate, text, call_it, finding);
        }
        Ok(Some(Measured::Fits) | None) => {}
        Err(err) => {
            call.diagnostics.findings.push(Diagnostic::warning(
                Code::ModelError,
                "",
                format!("the fit check could not score the request, so it was skipped: {err}"),
            ));
        }
    }
    invented_values(call, candidate)
}

/// The second half of the fit check, which needs no model: a tool fits a request that gives
/// it what it needs. A plan whose every call fills at least half of its tool's required
/// arguments with values the request does not give ([`crate::ground::unstated`]: "the
/// population growth of deer" as `current_population: 100000, birth_rate: 0.05`) asks
/// instead, naming the values it would have used. Such a request is either for another tool
/// (small models fill any tool's arguments) or misses what the person must say.
fn invented_values(call: &Call<'_>, candidate: Candidate) -> Candidate {
    let mut invented: Vec<(String, Vec<(String, Value)>)> = Vec::new();
    let given = crate::ground::Given::of(call.request);
    for step in &candidate.plan.steps {
        let Action::Tool { name, arguments } = &step.action else {
            continue;
        };
        let Some(tool) = call.catalog.tool(name) else {
            return candidate;
        };
        let (unstated, filled) = crate::ground::unstated(arguments, &tool.tool, &given);
        if unstated.is_empty() || unstated.len() * 2 < filled {
            return candidate;
        }
        let values = unstated
            .into_iter()
            .map(|key| {
                let value = arguments.get(&key).cloned().unwrap_or(Value::Null);
                (key, value)
            })
            .collect();
        invented.push((name.clone(), values));
    }
    let Some((tool, values)) = invented.first() else {
        return candidate;
    };
    let shown: Vec<String> = values
        .iter()
        .map(|(key, value)| format!("`{key}` = {value}"))
        .collect();
    let zh = chinese(&candidate.plan.locale);
    let text = if zh {
        format!(
            "请求里没有给出 `{tool}` 需要的这些值：{}。要用这些值调用它，还是告诉我该用什么值？",
            shown.join("，")
        )
    } else {
        format!(
            "The request does not say what `{tool}` needs: I would guess {}. Should I call it \
             with these values, or what should they be?",
            shown.join(", ")
        )
    };
    let call_it = if zh {
        format!("用这些值调用 `{tool}`")
    } else {
        format!("call `{tool}` with these values")
    };
    let listed: Vec<String> = invented
        .iter()
        .map(|(tool, values)| {
            let keys: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
            format!("`{tool}` ({})", keys.join(", "))
        })
        .collect();
    let finding = Diagnostic::warning(
        Code::InventedArguments,
        "/steps",
        format!(
            "every call fills at least half of its tool's required arguments with values the \
             request does not give: {}; the calls became a question and are kept in the plan's \
             metadata as `unfitting_calls`",
            listed.join(", ")
        ),
    )
    .with_value(json!(invented.iter().map(|(t, _)| t).collect::<Vec<_>>()));
    ask(candidate, text, call_it, finding)
}

/// Replaces the candidate's calls by `text`, a choice between `call_it` and a reply without a
/// tool (recommended: the safe answer to assume is not to call a tool that may not fit), and
/// keeps the calls in the plan's metadata as `unfitting_calls`.
fn ask(mut candidate: Candidate, text: String, call_it: String, finding: Diagnostic) -> Candidate {
    let plan = &mut candidate.plan;
    let calls: Vec<Value> = plan
        .steps
        .iter()
        .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
        .collect();
    let reply = if chinese(&plan.locale) {
        "不调用工具，直接回复".to_owned()
    } else {
        "reply without calling a tool".to_owned()
    };
    plan.steps.clear();
    plan.metadata
        .insert("unfitting_calls".into(), Value::Array(calls));
    plan.questions.push(
        Question::new(String::new(), text)
            .of_kind(QuestionKind::ApproachChoice)
            .choice(vec![call_it, reply.clone()])
            .recommend(reply),
    );
    candidate.diagnostics.push(finding);
    candidate
}
