//! The outcome: the best candidate becomes a plan to return, with questions for missing
//! arguments and unconfirmed schedules and invalid steps dropped, or the fallback policy decides
//! when nothing usable is left.

use serde_json::{Value, json};

use super::call::{Call, Candidate, chinese, cut};
use super::report::{Outcome, OutcomeStatus, PlanError};
use crate::catalog::Tool;
use crate::diagnostic::{Code, Diagnostic, Severity};
use crate::plan::{Action, Question, QuestionKind, Step, StepStatus, TaskKind};
use crate::prompts::short_description;
use crate::request::FallbackPolicy;
use crate::validate::validate;

/// Turns the best candidate into an outcome: questions for missing arguments and unconfirmed
/// schedules, invalid steps dropped, or the fallback policy when nothing usable is left.
pub(super) fn finish(mut call: Call<'_>) -> Result<Outcome, PlanError> {
    let request = call.request;
    if let Some(err) = &call.model_failure {
        call.diagnostics.findings.push(Diagnostic::warning(
            Code::ModelError,
            "",
            format!("a repair call failed, so the best earlier attempt is used: {err}"),
        ));
    }
    let Some(Candidate {
        mut plan,
        diagnostics: findings,
        raw,
    }) = call.best.take()
    else {
        let (message, raw) = call
            .last_failure
            .take()
            .unwrap_or_else(|| ("the model gave no output".into(), String::new()));
        let reason = format!("no plan could be read from the model output: {message}");
        return fallback(call, reason, Some(&raw));
    };
    let zh = chinese(&plan.locale);

    // Plan-level errors (no step to blame) make the whole candidate unusable.
    // A step that parsing had to leave out (unreadable, cut off) is reported without a step
    // id: it is a dropped step, not a plan-level error.
    let left_out = |d: &Diagnostic| d.is_error() && d.step.is_none() && d.code == Code::InvalidStep;
    let plan_errors: Vec<&Diagnostic> = findings
        .iter()
        .filter(|d| d.is_error() && d.step.is_none() && !left_out(d))
        .collect();
    if !plan_errors.is_empty() {
        let reason = plan_errors
            .iter()
            .map(|d| d.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        call.diagnostics.findings.extend(findings.iter().cloned());
        return fallback(call, reason, Some(&raw));
    }
    // A missing argument is asked of the user, unless the caller chose to fail when the
    // repairs run out (`fail`, `previous_or_fail`): then that policy decides, as for any
    // other error. (The nl2sql shape's SQL is the model's to write, not the user's.)
    if matches!(
        request.options.fallback,
        FallbackPolicy::Fail | FallbackPolicy::PreviousOrFail
    ) {
        let missing: Vec<&str> = findings
            .iter()
            .filter(|d| d.is_error() && d.code == Code::MissingArgument)
            .map(|d| d.message.as_str())
            .collect();
        if !missing.is_empty() {
            let reason = missing.join("; ");
            call.diagnostics.findings.extend(findings.iter().cloned());
            return fallback(call, reason, Some(&raw));
        }
    }

    let mut questions: Vec<Question> = Vec::new();
    let mut dropped: Vec<String> = Vec::new();
    let mut kept_findings: Vec<Diagnostic> = Vec::new();
    let step_ids: Vec<String> = plan.steps.iter().map(|s| s.id.clone()).collect();
    for step_id in &step_ids {
        let errors: Vec<&Diagnostic> = findings
            .iter()
            .filter(|d| d.is_error() && d.step.as_deref() == Some(step_id))
            .collect();
        if errors.is_empty() {
            continue;
        }
        if errors.iter().all(|d| d.code == Code::MissingArgument) {
            let Some(step) = plan.steps.iter_mut().find(|s| &s.id == step_id) else {
                continue;
            };
            step.status = StepStatus::Blocked;
            for diag in errors {
                let argument = diag
                    .pointer
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .replace("~1", "/")
                    .replace("~0", "~");
                let tool = match &step.action {
                    Action::Tool { name, .. } => name.clone(),
                    _ => String::new(),
                };
                let argument_schema = call
                    .catalog
                    .tool(&tool)
                    .and_then(|t| argument_schema(&t.tool, &argument));
                let text = if zh {
                    format!(
                        "步骤「{}」（{tool}）需要参数 `{argument}`，请提供它的值。",
                        step.title
                    )
                } else {
                    format!(
                        "What should `{argument}` be for step \"{}\" ({tool})?",
                        step.title
                    )
                };
                questions.push(
                    Question::new(String::new(), text)
                        .about(step_id.clone(), Some(argument.clone()))
                        .for_argument(&argument, argument_schema.as_ref()),
                );
                kept_findings.push(Diagnostic {
                    severity: Severity::Warning,
                    message: format!("{} — asked the user", diag.message),
                    ..(*diag).clone()
                });
            }
        } else {
            dropped.push(step_id.clone());
        }
    }
    // Steps that depend on a dropped step cannot run either.
    let mut changed = true;
    while changed {
        changed = false;
        for step in &plan.steps {
            if !dropped.contains(&step.id) && step.depends_on.iter().any(|d| dropped.contains(d)) {
                if matches!(step.action, Action::Reply { .. }) {
                    continue;
                }
                dropped.push(step.id.clone());
                changed = true;
            }
        }
    }
    let mut n_left_out = 0;
    // A reply speaks of the plan as the model wrote it ("I'll email Bob"): once a step of
    // that plan is gone, a reply would promise what the plan no longer does.
    let lost_steps = !dropped.is_empty() || findings.iter().any(left_out);
    if lost_steps {
        for step in &plan.steps {
            if matches!(step.action, Action::Reply { .. }) && !dropped.contains(&step.id) {
                dropped.push(step.id.clone());
            }
        }
    }
    for diag in &findings {
        let on_dropped = diag.step.as_ref().is_some_and(|s| dropped.contains(s));
        if left_out(diag) {
            n_left_out += 1;
            kept_findings.push(Diagnostic {
                code: Code::StepDropped,
                severity: Severity::Warning,
                ..diag.clone()
            });
        } else if !diag.is_error() || on_dropped {
            kept_findings.push(diag.clone());
        }
    }
    let mut lost: Vec<String> = Vec::new();
    for step_id in &dropped {
        let reasons: Vec<&str> = findings
            .iter()
            .filter(|d| d.is_error() && d.step.as_deref() == Some(step_id))
            .map(|d| d.message.as_str())
            .collect();
        let is_reply = plan
            .step(step_id)
            .is_some_and(|s| matches!(s.action, Action::Reply { .. }));
        let why = if !reasons.is_empty() {
            reasons.join("; ")
        } else if is_reply {
            "a reply to the plan as written, which lost steps".to_owned()
        } else {
            "it depends on a dropped step".to_owned()
        };
        lost.push(format!("`{step_id}` ({why})"));
        kept_findings.push(
            Diagnostic::warning(
                Code::StepDropped,
                "/steps",
                format!("dropped step `{step_id}`: {why}"),
            )
            .with_step(step_id.clone()),
        );
    }
    plan.steps.retain(|s| !dropped.contains(&s.id));
    for step in &mut plan.steps {
        step.depends_on.retain(|d| !dropped.contains(d));
    }
    // Errors on dropped steps stay in the attempt diagnostics; in the findings they are
    // reported as the drop itself.
    kept_findings
        .retain(|d| !(d.is_error() && d.step.as_ref().is_some_and(|s| dropped.contains(s))));

    let has_work = plan
        .steps
        .iter()
        .any(|s| !matches!(s.action, Action::Reply { .. }));
    if lost_steps && !has_work && questions.is_empty() && plan.questions.is_empty() {
        let reason = findings
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        call.diagnostics.findings.extend(kept_findings);
        return fallback(call, reason, Some(&raw));
    }

    for diag in findings
        .iter()
        .filter(|d| d.code == Code::ScheduleUnconfirmed)
    {
        let Some(step) = plan
            .steps
            .iter_mut()
            .find(|s| Some(&s.id) == diag.step.as_ref())
        else {
            continue;
        };
        step.status = StepStatus::Blocked;
        let when = match &step.schedule {
            Some(crate::plan::Schedule::Interval { minutes }) => {
                format!("every {minutes} minutes")
            }
            Some(crate::plan::Schedule::Daily { time }) => format!("every day at {time}"),
            Some(crate::plan::Schedule::Cron { expr }) => format!("on the schedule `{expr}`"),
            _ => "repeatedly".to_owned(),
        };
        let text = if zh {
            format!(
                "步骤「{}」将按计划重复执行（{when}）。确认设置这个定时任务吗？",
                step.title
            )
        } else {
            format!(
                "Step \"{}\" will run {when}. Shall I set up this recurring schedule?",
                step.title
            )
        };
        // Declining is the safe answer to assume: the steps run once, not on a schedule.
        let (confirm, decline) = if zh {
            ("确认", "取消")
        } else {
            ("yes", "no")
        };
        questions.push(
            Question::new(String::new(), text)
                .of_kind(QuestionKind::RiskConfirmation)
                .about(step.id.clone(), None)
                .choice(vec![confirm.into(), decline.into()])
                .recommend(decline),
        );
    }

    // The model may have asked already: keep its wording, do not ask twice.
    questions.retain(|q| {
        !plan
            .questions
            .iter()
            .any(|asked| asked.step == q.step && asked.argument == q.argument)
    });
    plan.questions.extend(questions);
    for (idx, question) in plan.questions.iter_mut().enumerate() {
        question.id = format!("q{}", idx + 1);
    }
    if !plan.questions.is_empty() {
        plan.ready = false;
    }
    let answered = plan.has_enough_context == Some(true);
    if plan.steps.is_empty() && plan.questions.is_empty() && plan.guidance.is_none() && !answered {
        call.diagnostics.findings.extend(kept_findings);
        return fallback(call, "the plan has no usable steps".into(), Some(&raw));
    }
    // The last line of defence for "never an invalid plan": a candidate that had errors is
    // validated again as it is about to be returned. The only errors it may still have are
    // the missing arguments that became questions (their steps wait, blocked); anything else
    // means a step above was kept that should not have been, and the plan is not returned.
    if findings.iter().any(Diagnostic::is_error) {
        let (_, recheck) = validate(plan.clone(), call.catalog, &request.options);
        let blocked = |d: &Diagnostic| {
            d.code == Code::MissingArgument
                && plan
                    .steps
                    .iter()
                    .any(|s| Some(&s.id) == d.step.as_ref() && s.status == StepStatus::Blocked)
        };
        let left: Vec<Diagnostic> = recheck
            .into_iter()
            .filter(|d| d.is_error() && !blocked(d))
            .collect();
        if !left.is_empty() {
            let reason = format!(
                "the plan left after dropping invalid steps is still invalid: {}",
                left.iter()
                    .map(|d| d.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            call.diagnostics.findings.extend(kept_findings);
            call.diagnostics.findings.extend(left);
            return fallback(call, reason, Some(&raw));
        }
    }
    call.diagnostics.findings.extend(kept_findings);
    // A plan that lost steps is marked so wherever it is stored (its metadata), and its
    // status says so unless it waits for answers first (answering replans it anyway).
    let incomplete = lost_steps.then(|| {
        if n_left_out > 0 {
            lost.push(format!(
                "{n_left_out} step(s) that could not be read from the model output"
            ));
        }
        let reason = format!(
            "left out of the plan, so it does not do all the request asked: {}",
            lost.join("; ")
        );
        plan.ready = false;
        plan.metadata.insert(
            "incomplete".into(),
            json!({"reason": reason, "dropped": dropped}),
        );
        reason
    });
    let status = match incomplete {
        _ if !plan.questions.is_empty() => OutcomeStatus::NeedsInput,
        Some(reason) => OutcomeStatus::Incomplete { reason, dropped },
        None if plan.ready => OutcomeStatus::Ready,
        None => OutcomeStatus::NeedsInput,
    };
    Ok(Outcome {
        status,
        plan,
        diagnostics: call.diagnostics,
    })
}

/// The JSON Schema of `argument` in `tool`'s input schema, when it has one.
fn argument_schema(tool: &Tool, argument: &str) -> Option<Value> {
    tool.input_schema
        .get("properties")
        .and_then(|p| p.get(argument))
        .cloned()
}

/// Applies the fallback policy.
fn fallback(call: Call<'_>, reason: String, raw: Option<&str>) -> Result<Outcome, PlanError> {
    let request = call.request;
    let zh = chinese(request.locale());
    let mut plan = call.new_plan();
    plan.metadata
        .insert("fallback_reason".into(), json!(reason));
    match &request.options.fallback {
        FallbackPolicy::Guidance => {
            plan.ready = false;
            let mut text = if zh {
                format!("无法为这个请求制定计划：{reason}")
            } else {
                format!("I could not make a plan for this request: {reason}")
            };
            if let Some(raw) = raw.filter(|r| !r.trim().is_empty()) {
                text.push_str(if zh {
                    "\n模型的原始输出：\n"
                } else {
                    "\nThe planner's raw output:\n"
                });
                text.push_str(&cut(raw.trim(), 2_000));
            }
            plan.guidance = Some(text);
        }
        FallbackPolicy::Reply { text } => {
            let text = text.clone().unwrap_or_else(|| {
                if zh {
                    "（计划不可用）".to_owned()
                } else {
                    "(plan unavailable)".to_owned()
                }
            });
            plan.steps.push(Step::new(
                "s1",
                if zh { "回复" } else { "Reply" },
                Action::Reply { text },
            ));
        }
        FallbackPolicy::DefaultPlan => {
            plan.title = format!("Plan for: {}", short_description(&request.query, 80));
            for (idx, title) in ["Analyze request", "Execute task", "Verify results"]
                .into_iter()
                .enumerate()
            {
                let mut step = Step::new(
                    format!("s{}", idx + 1),
                    title,
                    Action::Task {
                        kind: TaskKind::Custom(crate::plan::PLAIN_STEP.into()),
                        need_web_search: false,
                    },
                );
                if idx > 0 {
                    step.depends_on.push(format!("s{idx}"));
                }
                plan.steps.push(step);
            }
        }
        FallbackPolicy::PreviousOrFail => {
            let previous = request.feedback.as_ref().and_then(|f| f.previous.as_ref());
            match previous {
                Some(previous) if request.options.iteration > 0 => {
                    plan = previous.clone();
                    plan.metadata
                        .insert("fallback_reason".into(), json!(reason));
                }
                _ => {
                    return Err(PlanError::Failed {
                        reason,
                        diagnostics: Box::new(call.diagnostics),
                    });
                }
            }
        }
        FallbackPolicy::Fail => {
            return Err(PlanError::Failed {
                reason,
                diagnostics: Box::new(call.diagnostics),
            });
        }
    }
    Ok(Outcome {
        status: OutcomeStatus::Fallback { reason },
        plan,
        diagnostics: call.diagnostics,
    })
}
