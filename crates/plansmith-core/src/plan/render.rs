//! Plain-text renderings for people: a plan with its progress, and what each step does.

use serde_json::{Value, json};

use super::{Action, PLAIN_STEP, Plan, Step, StepRef, StepStatus, TaskKind};

impl Plan {
    /// A plain-text rendering with progress, e.g. `Progress: 1/3 (33.3%)` and `[✓] [→] [!] [ ]`:
    /// one line per step (OpenManus's shape), then its id, what it waits for and what it does
    /// ([`Step::action_lines`]), its notes, its result (on one line, cut to 300 characters) and its error.
    /// Steps are numbered from 1.
    pub fn render_text(&self) -> String {
        self.render_text_from(1)
    }

    /// [`Plan::render_text`] with the steps numbered from `first`: OpenManus's planning tool
    /// numbers them from 0, as its `mark_step` counts them.
    pub fn render_text_from(&self, first: usize) -> String {
        let total = self.steps.len();
        let done = self
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Completed)
            .count();
        let pct = if total == 0 {
            0.0
        } else {
            done as f64 * 100.0 / total as f64
        };
        let mut out = format!("Plan: {} (id {}, v{})\n", self.title, self.id, self.version);
        out.push_str(&format!("Progress: {done}/{total} ({pct:.1}%)\n"));
        for (idx, step) in self.steps.iter().enumerate() {
            out.push_str(&format!(
                "{}. {} {}\n",
                idx + first,
                step.status.marker(),
                step.title
            ));
            let mut about = Vec::new();
            if !step.depends_on.is_empty() {
                about.push(format!("after {}", step.depends_on.join(", ")));
            }
            if step.requires_approval {
                about.push("needs approval".to_owned());
            }
            let about = if about.is_empty() {
                String::new()
            } else {
                format!(" ({})", about.join("; "))
            };
            for (line, text) in step.action_lines().into_iter().enumerate() {
                match line {
                    0 => out.push_str(&format!("   {}{about}: {text}\n", step.id)),
                    _ => out.push_str(&format!("   {text}\n")),
                }
            }
            if !step.notes.is_empty() {
                out.push_str(&format!("   Notes: {}\n", step.notes));
            }
            if let Some(result) = &step.result {
                let result = match result {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                out.push_str(&format!(
                    "   Result: {}\n",
                    crate::text::snippet(&result, RESULT_CHARS)
                ));
            }
            if let Some(error) = &step.error {
                out.push_str(&format!("   Error: {error}\n"));
            }
        }
        out
    }
}

/// How much of a step's result [`Plan::render_text`] shows.
const RESULT_CHARS: usize = 300;

impl Step {
    /// What the step does, as text for people: `tool NAME` then one `  key = value` line per
    /// argument (a step reference reads as its path: `  body = s1.output.summary (from the
    /// output of s1)`), `agent NAME: task`, `research task, web search` then `  description`,
    /// or `reply: text`; then `  schedule: …` when it has one. Lines after the first are
    /// indented by two spaces. None for a step given as plain text ([`PLAIN_STEP`]), whose
    /// title says it all.
    pub fn action_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        match &self.action {
            Action::Tool { name, arguments } => {
                lines.push(format!("tool {name}"));
                for (key, value) in arguments {
                    lines.push(format!("  {key} = {}", argument_text(value)));
                }
            }
            Action::Agent { agent, query } => lines.push(format!("agent {agent}: {query}")),
            Action::Task {
                kind,
                need_web_search,
            } => {
                // A step given as plain text (OpenManus's plans) says all in its title.
                let plain = matches!(kind, TaskKind::Custom(name) if name == PLAIN_STEP)
                    && !*need_web_search
                    && self.description.is_empty()
                    && self.schedule.is_none();
                if plain {
                    return lines;
                }
                let web = if *need_web_search { ", web search" } else { "" };
                lines.push(format!("{kind} task{web}"));
                if !self.description.is_empty() {
                    lines.push(format!("  {}", self.description));
                }
            }
            Action::Reply { text } => lines.push(format!("reply: {text}")),
        }
        if let Some(schedule) = &self.schedule {
            let schedule = serde_json::to_string(schedule).unwrap_or_default();
            lines.push(format!("  schedule: {schedule}"));
        }
        lines
    }
}

/// An argument as text for people: its JSON, except a reference to an earlier step's output,
/// which reads as the path it takes the value from (as on the review page).
fn argument_text(value: &Value) -> String {
    match StepRef::reference_in(value).map(StepRef::parse) {
        Some(Ok(reference)) => format!("{reference} (from the output of {})", reference.step),
        _ => value.to_string(),
    }
}

/// A plan in the flat form the prompts ask for (and [`crate::parse`] reads), as compact JSON.
pub fn flat_plan_json(plan: &Plan) -> String {
    let steps: Vec<Value> = plan
        .steps
        .iter()
        .map(|step| {
            let mut flat = serde_json::Map::new();
            flat.insert("id".into(), json!(step.id));
            flat.insert("type".into(), json!(step.action.type_name()));
            flat.insert("title".into(), json!(step.title));
            match &step.action {
                Action::Tool { name, arguments } => {
                    flat.insert("name".into(), json!(name));
                    flat.insert("arguments".into(), Value::Object(arguments.clone()));
                }
                Action::Agent { agent, query } => {
                    flat.insert("agent".into(), json!(agent));
                    flat.insert("query".into(), json!(query));
                }
                Action::Task {
                    kind,
                    need_web_search,
                } => {
                    flat.insert("kind".into(), json!(kind.to_string()));
                    flat.insert("need_web_search".into(), json!(need_web_search));
                    if !step.description.is_empty() {
                        flat.insert("description".into(), json!(step.description));
                    }
                }
                Action::Reply { text } => {
                    flat.insert("text".into(), json!(text));
                }
            }
            if !step.depends_on.is_empty() {
                flat.insert("depends_on".into(), json!(step.depends_on));
            }
            if let Some(schedule) = &step.schedule {
                flat.insert(
                    "schedule".into(),
                    serde_json::to_value(schedule).unwrap_or(Value::Null),
                );
            }
            Value::Object(flat)
        })
        .collect();
    json!({"title": plan.title, "steps": steps}).to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;

    #[test]
    fn render_text_shows_progress() {
        let mut plan = Plan::new("p", "goal");
        plan.title = "Trip".into();
        for (idx, status) in [
            StepStatus::Completed,
            StepStatus::InProgress,
            StepStatus::NotStarted,
        ]
        .into_iter()
        .enumerate()
        {
            let mut step = Step::new(
                format!("s{}", idx + 1),
                format!("step {idx}"),
                Action::Reply { text: "x".into() },
            );
            step.status = status;
            plan.steps.push(step);
        }
        let text = plan.render_text();
        assert!(text.contains("Progress: 1/3 (33.3%)"), "{text}");
        assert!(
            text.contains("[✓] step 0") && text.contains("[→] step 1"),
            "{text}"
        );
    }

    #[test]
    fn render_text_shows_what_each_step_does() {
        let mut plan = Plan::new("p", "goal");
        let mut arguments = Map::new();
        arguments.insert("city".into(), json!("Paris"));
        let mut fetch = Step::new(
            "s1",
            "Fetch",
            Action::Tool {
                name: "get_weather".into(),
                arguments,
            },
        );
        fetch.status = StepStatus::Completed;
        fetch.result = Some(json!(format!("first\n{}", "x".repeat(400))));
        let mut arguments = Map::new();
        arguments.insert("body".into(), json!({"$ref": "s1.output.summary"}));
        arguments.insert("cc".into(), json!({"$ref": "not a reference"}));
        let mut mail = Step::new(
            "s2",
            "Mail",
            Action::Tool {
                name: "send_email".into(),
                arguments,
            },
        );
        mail.depends_on = vec!["s1".into()];
        mail.requires_approval = true;
        mail.status = StepStatus::Failed;
        mail.error = Some("smtp refused".into());
        let mut research = Step::new(
            "s3",
            "Look around",
            Action::Task {
                kind: TaskKind::Research,
                need_web_search: true,
            },
        );
        research.description = "Find the forecast".into();
        let mut plain = Step::new(
            "s4",
            "Pack",
            Action::Task {
                kind: TaskKind::Custom(PLAIN_STEP.into()),
                need_web_search: false,
            },
        );
        plain.depends_on = vec!["s3".into()];
        plan.steps = vec![fetch, mail, research, plain];
        let text = plan.render_text();
        let expected = [
            "1. [✓] Fetch",
            "   s1: tool get_weather",
            "     city = \"Paris\"",
            "2. [!] Mail",
            "   s2 (after s1; needs approval): tool send_email",
            "     body = s1.output.summary (from the output of s1)",
            "     cc = {\"$ref\":\"not a reference\"}",
            "   Error: smtp refused",
            "3. [ ] Look around",
            "   s3: research task, web search",
            "     Find the forecast",
        ];
        for line in expected {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in\n{text}"
            );
        }
        // A plain-text step (OpenManus) says all in its title: nothing under it.
        assert!(text.ends_with("4. [ ] Pack\n"), "{text}");
        // A long result is shown on one line, cut.
        let result = text.lines().find(|l| l.starts_with("   Result: ")).unwrap();
        assert!(result.starts_with("   Result: first xx"), "{result}");
        assert_eq!(
            result.chars().count(),
            "   Result: ".len() + RESULT_CHARS + 1
        );
        assert!(result.ends_with("xx…"), "{result}");
    }
}
