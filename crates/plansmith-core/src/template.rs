//! Prompt templates (minijinja): one system template per [`Shape`], a user template and a repair
//! template, built in and overridable from a directory.
//!
//! Template names: `tool_steps.system.j2`, `research.system.j2`, `agent_tasks.system.j2`,
//! `user.j2`, `repair.j2`, `triage.system.j2` (the optional routing call before planning). A user directory holding a file of one of these names replaces the
//! built-in one; other files there are ignored. The context each template sees is
//! [`PromptContext`] (and [`RepairContext`] for `repair.j2`).

use std::path::Path;

use minijinja::Environment;
use serde::Serialize;

use crate::request::Shape;

const BUILTIN: [(&str, &str); 6] = [
    (
        "tool_steps.system.j2",
        include_str!("../templates/tool_steps.system.j2"),
    ),
    (
        "research.system.j2",
        include_str!("../templates/research.system.j2"),
    ),
    (
        "agent_tasks.system.j2",
        include_str!("../templates/agent_tasks.system.j2"),
    ),
    ("user.j2", include_str!("../templates/user.j2")),
    ("repair.j2", include_str!("../templates/repair.j2")),
    (
        "triage.system.j2",
        include_str!("../templates/triage.system.j2"),
    ),
];

/// Errors from loading or rendering templates.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The override directory could not be read.
    #[error("cannot read template directory {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A template does not compile or render.
    #[error("template `{name}`: {source}")]
    Template {
        /// Template name.
        name: String,
        /// The cause.
        source: minijinja::Error,
    },
}

/// Longest tool, agent and skill description shown in a prompt, in characters.
pub const DESCRIPTION_MAX: usize = 160;

/// A tool as the prompt shows it: compact.
#[derive(Debug, Clone, Serialize)]
pub struct ToolView {
    /// Tool name.
    pub name: String,
    /// Description, cut to a sentence or two.
    pub description: String,
    /// `name(city*: string, unit: "c"|"f")`.
    pub signature: String,
}

/// A skill of an agent as the prompt shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SkillView {
    /// Skill name.
    pub name: String,
    /// Description.
    pub description: String,
}

/// An agent as the prompt shows it.
#[derive(Debug, Clone, Serialize)]
pub struct AgentView {
    /// Agent name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Skills.
    pub skills: Vec<SkillView>,
}

/// Feedback as the prompt shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FeedbackView {
    /// The previous plan as JSON.
    pub previous: Option<String>,
    /// What the person said.
    pub text: Option<String>,
    /// Problems, rendered.
    pub diagnostics: Vec<String>,
    /// Observations from execution.
    pub observations: Vec<String>,
}

/// What the system and user templates see.
#[derive(Debug, Clone, Serialize)]
pub struct PromptContext {
    /// The request.
    pub query: String,
    /// Profile / persona / constraints.
    pub profile: Option<String>,
    /// Locale.
    pub locale: String,
    /// Step cap.
    pub max_steps: usize,
    /// Current time, RFC 3339 with the weekday.
    pub now: String,
    /// Selected tools.
    pub tools: Vec<ToolView>,
    /// Agents.
    pub agents: Vec<AgentView>,
    /// Background context.
    pub context: Vec<String>,
    /// Background investigation findings (trimmed), rendered as `[source] text`.
    pub findings: Vec<String>,
    /// Feedback for replanning.
    pub feedback: Option<FeedbackView>,
}

/// What the repair template sees.
#[derive(Debug, Clone, Serialize)]
pub struct RepairContext {
    /// Every problem, rendered (`error[missing_argument] at /steps/0/…: …`).
    pub diagnostics: Vec<String>,
    /// The parse error, when the output was not JSON.
    pub parse_error: Option<String>,
    /// The rejected output (cut when very long).
    pub rejected: String,
}

/// The template set.
#[derive(Debug)]
pub struct Templates {
    env: Environment<'static>,
}

impl Templates {
    /// The built-in templates.
    pub fn builtin() -> Templates {
        let mut env = Environment::new();
        for (name, source) in BUILTIN {
            // Built-in templates are tested to compile; a failure here would be a build defect,
            // and is reported on render instead of panicking.
            let _ = env.add_template(name, source);
        }
        Templates { env }
    }

    /// Built-in templates, with any of the same names in `dir` taking their place.
    pub fn with_overrides(dir: &Path) -> Result<Templates, TemplateError> {
        let mut templates = Templates::builtin();
        let shown = dir.display().to_string();
        let entries = std::fs::read_dir(dir).map_err(|source| TemplateError::Io {
            path: shown.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| TemplateError::Io {
                path: shown.clone(),
                source,
            })?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if !BUILTIN.iter().any(|(name, _)| *name == file_name) {
                continue;
            }
            let source =
                std::fs::read_to_string(entry.path()).map_err(|source| TemplateError::Io {
                    path: entry.path().display().to_string(),
                    source,
                })?;
            templates
                .env
                .add_template_owned(file_name.clone(), source)
                .map_err(|source| TemplateError::Template {
                    name: file_name,
                    source,
                })?;
        }
        Ok(templates)
    }

    /// The system prompt for a shape.
    pub fn system(&self, shape: Shape, context: &PromptContext) -> Result<String, TemplateError> {
        let name = match shape {
            Shape::ToolSteps => "tool_steps.system.j2",
            Shape::Research => "research.system.j2",
            Shape::AgentTasks => "agent_tasks.system.j2",
        };
        self.render(name, context)
    }

    /// The user message.
    pub fn user(&self, context: &PromptContext) -> Result<String, TemplateError> {
        self.render("user.j2", context)
    }

    /// The system prompt of the optional triage call (answer / hand off / plan).
    pub fn triage(&self, context: &PromptContext) -> Result<String, TemplateError> {
        self.render("triage.system.j2", context)
    }

    /// The repair message.
    pub fn repair(&self, context: &RepairContext) -> Result<String, TemplateError> {
        self.render("repair.j2", context)
    }

    fn render<S: Serialize>(&self, name: &str, context: &S) -> Result<String, TemplateError> {
        let wrap = |source| TemplateError::Template {
            name: name.to_owned(),
            source,
        };
        let template = self.env.get_template(name).map_err(wrap)?;
        let text = template
            .render(minijinja::Value::from(minijinja::value::Serde(context)))
            .map_err(wrap)?;
        Ok(text.trim().to_owned())
    }
}

impl Default for Templates {
    fn default() -> Templates {
        Templates::builtin()
    }
}

/// A compact signature: `get_weather(city*: string, unit: "c"|"f", days: integer)`.
pub fn signature(name: &str, input_schema: &serde_json::Value) -> String {
    let required: Vec<&str> = input_schema
        .get("required")
        .and_then(serde_json::Value::as_array)
        .map(|r| r.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    let params: Vec<String> = input_schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
        .map(|props| {
            props
                .iter()
                .map(|(param, schema)| {
                    let star = if required.contains(&param.as_str()) {
                        "*"
                    } else {
                        ""
                    };
                    format!("{param}{star}: {}", type_label(schema))
                })
                .collect()
        })
        .unwrap_or_default();
    format!("{name}({})", params.join(", "))
}

fn type_label(schema: &serde_json::Value) -> String {
    if let Some(values) = schema.get("enum").and_then(serde_json::Value::as_array) {
        let shown: Vec<String> = values.iter().take(8).map(ToString::to_string).collect();
        let more = if values.len() > 8 { "|…" } else { "" };
        return format!("{}{more}", shown.join("|"));
    }
    match schema.get("type") {
        Some(serde_json::Value::String(ty)) if ty == "array" => {
            let item = schema
                .get("items")
                .map(type_label)
                .unwrap_or_else(|| "any".into());
            format!("{item}[]")
        }
        Some(serde_json::Value::String(ty)) => {
            match schema.get("format").and_then(serde_json::Value::as_str) {
                Some(format) => format!("{ty} ({format})"),
                None => ty.clone(),
            }
        }
        Some(serde_json::Value::Array(tys)) => tys
            .iter()
            .filter_map(serde_json::Value::as_str)
            .collect::<Vec<_>>()
            .join("|"),
        _ => "any".into(),
    }
}

/// Cuts a description to `max` characters at a word boundary.
pub fn short_description(text: &str, max: usize) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= max {
        return text;
    }
    let cut: String = text.chars().take(max).collect();
    let at = cut.rfind(' ').unwrap_or(cut.len());
    format!("{}…", cut[..at].trim_end_matches([',', ';', ':']))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn context() -> PromptContext {
        PromptContext {
            query: "Weather in Paris?".into(),
            profile: Some("Be brief.".into()),
            locale: "fr-FR".into(),
            max_steps: 5,
            now: "2026-11-22T10:00:00Z (Sunday)".into(),
            tools: vec![ToolView {
                name: "get_weather".into(),
                description: "Weather for a city".into(),
                signature: signature(
                    "get_weather",
                    &json!({"properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}),
                ),
            }],
            agents: vec![],
            context: vec!["The user lives in Lyon.".into()],
            findings: vec!["[web_search] Paris: 12 °C, light rain".into()],
            feedback: Some(FeedbackView {
                text: Some("add a step".into()),
                ..FeedbackView::default()
            }),
        }
    }

    #[test]
    fn builtin_templates_render_every_variable() {
        let templates = Templates::builtin();
        let ctx = context();
        let system = templates.system(Shape::ToolSteps, &ctx).unwrap();
        for needle in [
            "get_weather(city*: string, unit: \"c\"|\"f\")",
            "at most 5 steps",
            "fr-FR",
            "Be brief.",
        ] {
            assert!(system.contains(needle), "missing {needle:?} in\n{system}");
        }
        // The time changes with every request: it goes in the user message, so that the system
        // prompt (and the tool list) stays one prefix that a KV cache or a provider's prompt
        // cache can reuse.
        for shape in [Shape::ToolSteps, Shape::Research, Shape::AgentTasks] {
            let text = templates.system(shape, &ctx).unwrap();
            assert!(text.contains("fr-FR"), "{text}");
            assert!(!text.contains("2026-11-22"), "{text}");
        }
        let triage = templates.triage(&ctx).unwrap();
        assert!(!triage.contains("2026-11-22"), "{triage}");
        let user = templates.user(&ctx).unwrap();
        assert!(
            user.contains("Current time: 2026-11-22T10:00:00Z (Sunday)")
                && user.contains("Lyon")
                && user.contains("- [web_search] Paris: 12 °C, light rain")
                && user.contains("add a step")
                && user.contains("## Background investigation")
                && user.ends_with("Weather in Paris?"),
            "{user}"
        );
        let repair = templates
            .repair(&RepairContext {
                diagnostics: vec![
                    "error[missing_argument] at /steps/0/action/arguments/city: x".into(),
                ],
                parse_error: None,
                rejected: "{\"steps\": []}".into(),
            })
            .unwrap();
        assert!(
            repair.contains("missing_argument") && repair.contains("{\"steps\": []}"),
            "{repair}"
        );
    }

    #[test]
    fn a_directory_overrides_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("user.j2"), "Q={{ query }}").unwrap();
        std::fs::write(dir.path().join("unrelated.txt"), "{{ broken").unwrap();
        let templates = Templates::with_overrides(dir.path()).unwrap();
        assert_eq!(templates.user(&context()).unwrap(), "Q=Weather in Paris?");
        std::fs::write(dir.path().join("repair.j2"), "{% if %}").unwrap();
        let err = Templates::with_overrides(dir.path()).unwrap_err();
        assert!(err.to_string().contains("repair.j2"), "{err}");
    }

    #[test]
    fn descriptions_are_cut_at_words() {
        assert_eq!(short_description("one two three four", 9), "one two…");
        assert_eq!(short_description("short", 9), "short");
    }
}
