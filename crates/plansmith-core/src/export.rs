//! Renders a plan in the JSON shape of a system plansmith replaces, so its users can adopt
//! plansmith without changing the code that consumes plans. The reverse direction is
//! [`crate::parse`], which reads every one of these shapes.
//!
//! | format | shape | what it can hold |
//! |---|---|---|
//! | `plansmith` | the plan document | everything |
//! | `sage` | SAGE's step array `[{name, description, args}]` | tool steps |
//! | `deerflow` | deer-flow's `Plan` `{locale, has_enough_context, thought, title, steps: [{need_search, title, description, step_type}]}` | research / processing tasks |
//! | `valuecell` | ValueCell's `PlannerResponse` `{adequate, reason, guidance_message?, tasks: [{title, query, agent_name, pattern, schedule_config}]}` | agent tasks, schedules |
//! | `openmanus` | OpenManus' PlanningTool plan `{plan_id, title, steps: [text], step_statuses, step_notes}` | step texts, statuses, notes |
//! | `nl2sql` | Spring AI Alibaba nl2sql `{thought_process, execution_plan: [{step, tool_to_use, tool_parameters}]}` | tool steps |
//!
//! A step a shape cannot hold is left out, and [`Rendered::lost`] says which and why, so a
//! caller never loses part of a plan without being told.

use std::fmt;
use std::str::FromStr;

use serde_json::{Value, json};

use crate::plan::{Action, Plan, Schedule, Step, StepStatus, TaskKind};

/// A plan shape to render into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedFormat {
    /// plansmith's own plan document.
    Plansmith,
    /// SAGE's step array.
    Sage,
    /// deer-flow's `Plan`.
    DeerFlow,
    /// ValueCell's `PlannerResponse`.
    ValueCell,
    /// OpenManus' PlanningTool plan.
    OpenManus,
    /// Spring AI Alibaba nl2sql's `execution_plan`.
    Nl2Sql,
}

impl SeedFormat {
    /// Every format, in the order of the module table.
    pub const ALL: [SeedFormat; 6] = [
        SeedFormat::Plansmith,
        SeedFormat::Sage,
        SeedFormat::DeerFlow,
        SeedFormat::ValueCell,
        SeedFormat::OpenManus,
        SeedFormat::Nl2Sql,
    ];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            SeedFormat::Plansmith => "plansmith",
            SeedFormat::Sage => "sage",
            SeedFormat::DeerFlow => "deerflow",
            SeedFormat::ValueCell => "valuecell",
            SeedFormat::OpenManus => "openmanus",
            SeedFormat::Nl2Sql => "nl2sql",
        }
    }
}

impl fmt::Display for SeedFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown format name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown plan format `{0}`; expected plansmith, sage, deerflow, valuecell, openmanus or nl2sql"
)]
pub struct UnknownFormat(pub String);

impl FromStr for SeedFormat {
    type Err = UnknownFormat;

    fn from_str(text: &str) -> Result<SeedFormat, UnknownFormat> {
        let key: String = text
            .trim()
            .to_ascii_lowercase()
            .chars()
            .filter(|c| !matches!(c, '-' | '_'))
            .collect();
        SeedFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == key)
            .ok_or_else(|| UnknownFormat(text.to_owned()))
    }
}

/// A rendered plan and what the shape could not hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The plan in the requested shape.
    pub value: Value,
    /// One line per step (or field) left out, naming it and the reason.
    pub lost: Vec<String>,
}

/// Renders `plan` in `format`.
pub fn render(plan: &Plan, format: SeedFormat) -> Rendered {
    let mut lost = Vec::new();
    let value = match format {
        SeedFormat::Plansmith => serde_json::to_value(plan).unwrap_or(Value::Null),
        SeedFormat::Sage => Value::Array(
            plan.steps
                .iter()
                .filter_map(|step| match &step.action {
                    Action::Tool { name, arguments } => Some(json!({
                        "name": name,
                        "description": describe(step),
                        "args": arguments,
                    })),
                    _ => {
                        lost.push(left_out(step, "SAGE plans hold tool calls only"));
                        None
                    }
                })
                .collect(),
        ),
        SeedFormat::DeerFlow => {
            let steps: Vec<Value> = plan
                .steps
                .iter()
                .filter_map(|step| match &step.action {
                    Action::Task {
                        kind,
                        need_web_search,
                    } => {
                        let step_type = match kind {
                            TaskKind::Processing => "processing",
                            TaskKind::Research => "research",
                            TaskKind::Custom(_) if *need_web_search => "research",
                            TaskKind::Custom(_) => "processing",
                        };
                        Some(json!({
                            "need_search": need_web_search,
                            "title": step.title,
                            "description": describe(step),
                            "step_type": step_type,
                        }))
                    }
                    _ => {
                        lost.push(left_out(
                            step,
                            "deer-flow plans hold research and processing steps only",
                        ));
                        None
                    }
                })
                .collect();
            json!({
                "locale": plan.locale,
                "has_enough_context": plan.has_enough_context.unwrap_or(false),
                "thought": plan.thought,
                "title": plan.title,
                "steps": steps,
            })
        }
        SeedFormat::ValueCell => {
            let tasks: Vec<Value> = plan
                .steps
                .iter()
                .filter_map(|step| match &step.action {
                    Action::Agent { agent, query } => {
                        let (pattern, config) = value_cell_schedule(step.schedule.as_ref());
                        if let Some(Schedule::Cron { expr }) = &step.schedule {
                            lost.push(format!(
                                "step `{}`: cron schedule `{expr}` (ValueCell knows interval_minutes and daily_time)",
                                step.id
                            ));
                        }
                        Some(json!({
                            "title": step.title,
                            "query": query,
                            "agent_name": agent,
                            "pattern": pattern,
                            "schedule_config": config,
                        }))
                    }
                    _ => {
                        lost.push(left_out(step, "ValueCell plans hold agent tasks only"));
                        None
                    }
                })
                .collect();
            let adequate = plan.guidance.is_none() && plan.questions.is_empty();
            let mut out = json!({
                "adequate": adequate,
                "reason": plan.thought,
                "tasks": tasks,
            });
            let guidance = plan.guidance.clone().or_else(|| {
                (!plan.questions.is_empty()).then(|| {
                    plan.questions
                        .iter()
                        .map(|q| q.text.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
            });
            if let (Some(guidance), Value::Object(map)) = (guidance, &mut out) {
                map.insert("guidance_message".into(), json!(guidance));
            }
            out
        }
        SeedFormat::OpenManus => {
            let texts: Vec<Value> = plan
                .steps
                .iter()
                .map(|s| json!(openmanus_text(s)))
                .collect();
            let statuses: Vec<Value> = plan
                .steps
                .iter()
                .map(|s| json!(openmanus_status(s.status)))
                .collect();
            let notes: Vec<Value> = plan.steps.iter().map(|s| json!(s.notes)).collect();
            // A plan read from OpenManus keeps the id it had there.
            let plan_id = plan
                .metadata
                .get("source_plan_id")
                .and_then(Value::as_str)
                .unwrap_or(&plan.id);
            json!({
                "plan_id": plan_id,
                "title": plan.title,
                "steps": texts,
                "step_statuses": statuses,
                "step_notes": notes,
            })
        }
        SeedFormat::Nl2Sql => {
            let mut n = 0;
            let steps: Vec<Value> = plan
                .steps
                .iter()
                .filter_map(|step| match &step.action {
                    Action::Tool { name, arguments } => {
                        n += 1;
                        Some(json!({"step": n, "tool_to_use": name, "tool_parameters": arguments}))
                    }
                    _ => {
                        lost.push(left_out(
                            step,
                            "nl2sql execution plans hold tool steps only",
                        ));
                        None
                    }
                })
                .collect();
            json!({"thought_process": plan.thought, "execution_plan": steps})
        }
    };
    if format != SeedFormat::Plansmith {
        let with_deps = plan.steps.iter().any(|s| !s.depends_on.is_empty());
        let sequential = plan.steps.iter().enumerate().all(|(idx, s)| {
            s.depends_on.is_empty()
                || (idx > 0 && s.depends_on.len() == 1 && s.depends_on[0] == plan.steps[idx - 1].id)
        });
        if with_deps && !sequential {
            lost.push(format!(
                "dependencies: {} has no dependency graph; steps are listed in execution order",
                format.as_str()
            ));
        }
    }
    Rendered { value, lost }
}

fn describe(step: &Step) -> String {
    if step.description.is_empty() {
        step.title.clone()
    } else {
        step.description.clone()
    }
}

fn left_out(step: &Step, why: &str) -> String {
    format!(
        "step `{}` ({} `{}`): {why}",
        step.id,
        step.action.type_name(),
        step.title
    )
}

fn value_cell_schedule(schedule: Option<&Schedule>) -> (&'static str, Value) {
    match schedule {
        Some(Schedule::Interval { minutes }) => ("recurring", json!({"interval_minutes": minutes})),
        Some(Schedule::Daily { time }) => ("recurring", json!({"daily_time": time})),
        _ => ("once", Value::Null),
    }
}

/// OpenManus steps are text: the title, with the action in brackets when it is not plain.
fn openmanus_text(step: &Step) -> String {
    match &step.action {
        Action::Task {
            kind: TaskKind::Custom(_),
            ..
        } => step.title.clone(),
        Action::Tool { name, arguments } => {
            format!(
                "{} [{}({})]",
                step.title,
                name,
                Value::Object(arguments.clone())
            )
        }
        Action::Agent { agent, .. } => format!("{} [agent {agent}]", step.title),
        Action::Task { kind, .. } => format!("{} [{kind}]", step.title),
        Action::Reply { .. } => format!("{} [reply]", step.title),
    }
}

/// OpenManus knows not_started, in_progress, completed and blocked.
fn openmanus_status(status: StepStatus) -> &'static str {
    match status {
        StepStatus::NotStarted => "not_started",
        StepStatus::InProgress => "in_progress",
        StepStatus::Completed | StepStatus::Skipped => "completed",
        StepStatus::Blocked | StepStatus::Failed => "blocked",
    }
}
