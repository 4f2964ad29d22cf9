//! Prompt templates (minijinja): one system template per [`Shape`], a user template and a repair
//! template, built in and overridable from a directory.
//!
//! Template names: `tool_steps.system.j2`, `tool_calls.system.j2` (the tool-call format,
//! [`crate::calls`]), `research.system.j2`, `agent_tasks.system.j2`,
//! `user.j2`, `repair.j2`, `follow_up.j2` (in the tool-call format, the request for the calls of
//! a part of the request that the first answer left out), `triage.system.j2` (the optional
//! routing call before planning). A user directory holding a file of one of these names replaces the
//! built-in one; other files there are ignored. The context each template sees is
//! [`PromptContext`] (and [`RepairContext`] for `repair.j2`, [`FollowUpContext`] for
//! `follow_up.j2`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use minijinja::Environment;
use serde::Serialize;

use crate::request::Shape;

const BUILTIN: [(&str, &str); 8] = [
    (
        "tool_steps.system.j2",
        include_str!("../prompts/tool_steps.system.j2"),
    ),
    (
        "tool_calls.system.j2",
        include_str!("../prompts/tool_calls.system.j2"),
    ),
    (
        "research.system.j2",
        include_str!("../prompts/research.system.j2"),
    ),
    (
        "agent_tasks.system.j2",
        include_str!("../prompts/agent_tasks.system.j2"),
    ),
    ("user.j2", include_str!("../prompts/user.j2")),
    ("repair.j2", include_str!("../prompts/repair.j2")),
    ("follow_up.j2", include_str!("../prompts/follow_up.j2")),
    (
        "triage.system.j2",
        include_str!("../prompts/triage.system.j2"),
    ),
];

/// Errors from loading or rendering templates.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PromptError {
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

pub use crate::text::short_description;

/// Longest tool, agent and skill description shown in a prompt, in characters.
pub const DESCRIPTION_MAX: usize = 160;

/// How the prompt shows a catalog tool (name, short description, compact signature, the
/// function line of chat templates); built once per tool and kept with it, since a service
/// renders it for every request that selects the tool.
pub fn tool_view(entry: &crate::catalog::CatalogTool) -> &std::sync::Arc<ToolView> {
    entry.prompt_view_or(|| {
        let tool = &entry.tool;
        let description = short_description(&tool.description, DESCRIPTION_MAX);
        ToolView {
            name: tool.name.clone(),
            signature: signature(&tool.name, &tool.input_schema),
            function: crate::calls::function_line(
                &tool.name,
                &description,
                &short_parameter_descriptions(&tool.input_schema),
                tool.output_schema.as_ref(),
            ),
            description,
        }
    })
}

pub use crate::catalog::ToolView;

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
    pub tools: Vec<std::sync::Arc<ToolView>>,
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
    /// The output was in the tool-call format ([`crate::calls`]), and the repair asks for
    /// that format again.
    pub calls: bool,
}

/// What the follow-up template sees.
#[derive(Debug, Clone, Serialize)]
pub struct FollowUpContext {
    /// The part of the request that no call addresses yet, as the request words it.
    pub part: String,
    /// How many calls the answer so far has (`s1` to `sN`).
    pub calls: usize,
}

/// The fields of [`PromptContext`] that stay the same across requests that choose the same
/// tools and agents under the same profile, locale and step cap. A system template that reads
/// only these renders the same text for all such requests (the design keeps everything per
/// request out of the system prompt, so that KV and prompt caches reuse it), and its text is
/// kept instead of rendered again.
const STABLE_FIELDS: [&str; 5] = ["profile", "locale", "max_steps", "tools", "agents"];

/// The system templates: one per shape, and the tool-call format's.
const SYSTEM_TEMPLATES: [&str; 4] = [
    "tool_steps.system.j2",
    "tool_calls.system.j2",
    "research.system.j2",
    "agent_tasks.system.j2",
];

/// Most rendered system prompts kept; the cache starts over when it is full.
const SYSTEM_CACHE_MAX: usize = 256;

/// The template set.
#[derive(Debug)]
pub struct Prompts {
    env: Environment<'static>,
    /// The system templates whose text depends only on [`STABLE_FIELDS`].
    cacheable: Vec<&'static str>,
    /// Rendered system prompts of the cacheable templates, by [`stable_key`].
    rendered: Mutex<HashMap<String, String>>,
    /// The user template reads only [`PER_REQUEST_FIELDS`]: it is rendered from the request's
    /// own fields alone (turning the selected tools and their schemas into template values
    /// for a message that never shows them cost more than the rest of its rendering).
    user_per_request: bool,
}

/// The fields of [`PerRequest`].
const PER_REQUEST_FIELDS: [&str; 5] = ["query", "now", "context", "findings", "feedback"];

/// The fields of [`PromptContext`] that change with every request: what the built-in user
/// template reads.
#[derive(Serialize)]
struct PerRequest<'a> {
    query: &'a str,
    now: &'a str,
    context: &'a [String],
    findings: &'a [String],
    feedback: Option<&'a FeedbackView>,
}

impl Prompts {
    /// The built-in templates.
    pub fn builtin() -> Prompts {
        let mut env = Environment::new();
        for (name, source) in BUILTIN {
            // Built-in templates are tested to compile; a failure here would be a build defect,
            // and is reported on render instead of panicking.
            let _ = env.add_template(name, source);
        }
        Prompts::from_env(env)
    }

    fn from_env(env: Environment<'static>) -> Prompts {
        let cacheable = SYSTEM_TEMPLATES
            .into_iter()
            .filter(|name| reads_only(&env, name, &STABLE_FIELDS))
            .collect();
        let user_per_request = reads_only(&env, "user.j2", &PER_REQUEST_FIELDS);
        Prompts {
            env,
            cacheable,
            rendered: Mutex::new(HashMap::new()),
            user_per_request,
        }
    }

    /// Built-in templates, with any of the same names in `dir` taking their place.
    pub fn with_overrides(dir: &Path) -> Result<Prompts, PromptError> {
        let mut templates = Prompts::builtin();
        let shown = dir.display().to_string();
        let entries = std::fs::read_dir(dir).map_err(|source| PromptError::Io {
            path: shown.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| PromptError::Io {
                path: shown.clone(),
                source,
            })?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if !BUILTIN.iter().any(|(name, _)| *name == file_name) {
                continue;
            }
            let source =
                std::fs::read_to_string(entry.path()).map_err(|source| PromptError::Io {
                    path: entry.path().display().to_string(),
                    source,
                })?;
            templates
                .env
                .add_template_owned(file_name.clone(), source)
                .map_err(|source| PromptError::Template {
                    name: file_name,
                    source,
                })?;
        }
        Ok(Prompts::from_env(templates.env))
    }

    /// The system prompt for a shape.
    pub fn system(&self, shape: Shape, context: &PromptContext) -> Result<String, PromptError> {
        let name = match shape {
            Shape::ToolSteps => "tool_steps.system.j2",
            Shape::Research => "research.system.j2",
            Shape::AgentTasks => "agent_tasks.system.j2",
        };
        self.system_named(name, context)
    }

    /// The system prompt of the tool-call format ([`crate::calls`]): `tool_calls.system.j2`.
    pub fn calls_system(&self, context: &PromptContext) -> Result<String, PromptError> {
        self.system_named("tool_calls.system.j2", context)
    }

    fn system_named(
        &self,
        name: &'static str,
        context: &PromptContext,
    ) -> Result<String, PromptError> {
        if !self.cacheable.contains(&name) {
            return self.render(name, context);
        }
        let key = stable_key(name, context);
        if let Ok(rendered) = self.rendered.lock()
            && let Some(text) = rendered.get(&key)
        {
            return Ok(text.clone());
        }
        let text = self.render(name, context)?;
        if let Ok(mut rendered) = self.rendered.lock() {
            if rendered.len() >= SYSTEM_CACHE_MAX {
                rendered.clear();
            }
            rendered.insert(key, text.clone());
        }
        Ok(text)
    }

    /// The user message.
    pub fn user(&self, context: &PromptContext) -> Result<String, PromptError> {
        if !self.user_per_request {
            return self.render("user.j2", context);
        }
        let fields = PerRequest {
            query: &context.query,
            now: &context.now,
            context: &context.context,
            findings: &context.findings,
            feedback: context.feedback.as_ref(),
        };
        self.render("user.j2", &fields)
    }

    /// The system prompt of the optional triage call (answer / hand off / plan).
    pub fn triage(&self, context: &PromptContext) -> Result<String, PromptError> {
        self.render("triage.system.j2", context)
    }

    /// The repair message.
    pub fn repair(&self, context: &RepairContext) -> Result<String, PromptError> {
        self.render("repair.j2", context)
    }

    /// The follow-up message: asks for the calls of a part of the request that the answer so
    /// far leaves out.
    pub fn follow_up(&self, context: &FollowUpContext) -> Result<String, PromptError> {
        self.render("follow_up.j2", context)
    }

    fn render<S: Serialize>(&self, name: &str, context: &S) -> Result<String, PromptError> {
        let wrap = |source| PromptError::Template {
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

/// Whether template `name` reads nothing but `fields` of its context. A template that pulls
/// in another one (`include`, `import`, `from`, `extends`) is not checked further and counts
/// as reading anything, as does one whose variables cannot be listed.
fn reads_only(env: &Environment<'static>, name: &str, fields: &[&str]) -> bool {
    let Ok(template) = env.get_template(name) else {
        return false;
    };
    if pulls_in_templates(template.source()) {
        return false;
    }
    let variables = template.undeclared_variables(false);
    !variables.is_empty()
        && variables
            .iter()
            .all(|variable| fields.contains(&variable.as_str()))
}

/// Whether a block tag of `source` is `include`, `import`, `from` or `extends`.
fn pulls_in_templates(source: &str) -> bool {
    source.split("{%").skip(1).any(|tag| {
        let word = tag.trim_start_matches(['-', '+']).trim_start();
        ["include", "import", "from", "extends"]
            .iter()
            .any(|keyword| {
                word.strip_prefix(keyword)
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_whitespace()))
            })
    })
}

/// The cache key of a system prompt: the template and every [`STABLE_FIELDS`] value, each
/// string prefixed with its length so that no two contexts share a key.
fn stable_key(name: &str, context: &PromptContext) -> String {
    fn field(key: &mut String, text: &str) {
        key.push_str(&text.len().to_string());
        key.push(':');
        key.push_str(text);
    }
    let mut key = String::with_capacity(256 + 160 * context.tools.len());
    field(&mut key, name);
    match &context.profile {
        Some(profile) => {
            key.push('+');
            field(&mut key, profile);
        }
        None => key.push('-'),
    }
    field(&mut key, &context.locale);
    field(&mut key, &context.max_steps.to_string());
    field(&mut key, &context.tools.len().to_string());
    for tool in &context.tools {
        field(&mut key, &tool.name);
        field(&mut key, &tool.description);
        field(&mut key, &tool.signature);
        field(&mut key, &tool.function);
    }
    field(&mut key, &context.agents.len().to_string());
    for agent in &context.agents {
        field(&mut key, &agent.name);
        field(&mut key, &agent.description);
        field(&mut key, &agent.skills.len().to_string());
        for skill in &agent.skills {
            field(&mut key, &skill.name);
            field(&mut key, &skill.description);
        }
    }
    key
}

impl Default for Prompts {
    fn default() -> Prompts {
        Prompts::builtin()
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

/// Longest parameter description shown in a tool's function object, in characters.
pub const PARAMETER_DESCRIPTION_MAX: usize = 100;

/// `input_schema` with every `description` string cut to [`PARAMETER_DESCRIPTION_MAX`]
/// characters (a prompt lists several tools; their parameters' long descriptions would
/// crowd it).
pub fn short_parameter_descriptions(input_schema: &serde_json::Value) -> serde_json::Value {
    fn cut(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, item) in map.iter_mut() {
                    match item {
                        serde_json::Value::String(text) if key == "description" => {
                            *text = short_description(text, PARAMETER_DESCRIPTION_MAX);
                        }
                        other => cut(other),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(cut),
            _ => {}
        }
    }
    let mut schema = input_schema.clone();
    cut(&mut schema);
    schema
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn builtin_system_prompts_are_cached_and_match_a_fresh_render() {
        let templates = Prompts::builtin();
        assert_eq!(templates.cacheable, SYSTEM_TEMPLATES.to_vec());
        let fresh =
            |shape, context: &PromptContext| Prompts::builtin().system(shape, context).unwrap();
        let mut contexts = vec![context()];
        let mut other = context();
        std::sync::Arc::make_mut(&mut other.tools[0]).description = "Forecast for a city".into();
        contexts.push(other);
        let mut other = context();
        other.profile = None;
        contexts.push(other);
        let mut other = context();
        other.profile = Some(String::new());
        contexts.push(other);
        let mut other = context();
        other.max_steps = 6;
        other.locale = "de-DE".into();
        contexts.push(other);
        let mut other = context();
        other.agents.push(AgentView {
            name: "writer".into(),
            description: "Writes".into(),
            skills: vec![],
        });
        contexts.push(other);
        for shape in [Shape::ToolSteps, Shape::Research, Shape::AgentTasks] {
            for _ in 0..2 {
                for context in &contexts {
                    assert_eq!(
                        templates.system(shape, context).unwrap(),
                        fresh(shape, context)
                    );
                }
            }
        }
        let keys = templates.rendered.lock().unwrap().len();
        assert_eq!(keys, 3 * contexts.len());
        // The query, the time and the feedback are not part of the system prompt.
        let mut same = context();
        same.query = "Something else".into();
        same.now = "2027-01-01T00:00:00Z (Friday)".into();
        same.feedback = None;
        templates.system(Shape::ToolSteps, &same).unwrap();
        assert_eq!(templates.rendered.lock().unwrap().len(), keys);
    }

    #[test]
    fn an_override_that_reads_per_request_fields_is_rendered_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("tool_steps.system.j2", "Tools for {{ query }}", true),
            ("research.system.j2", "{% include 'user.j2' %}", true),
            (
                "agent_tasks.system.j2",
                "Plain text from nowhere, {{ locale }}",
                false,
            ),
        ];
        for (name, source, _) in cases {
            std::fs::write(dir.path().join(name), source).unwrap();
        }
        let templates = Prompts::with_overrides(dir.path()).unwrap();
        assert_eq!(
            templates.cacheable,
            vec!["tool_calls.system.j2", "agent_tasks.system.j2"]
        );
        let mut other = context();
        other.query = "Weather in Rome?".into();
        let first = templates.system(Shape::ToolSteps, &context()).unwrap();
        let second = templates.system(Shape::ToolSteps, &other).unwrap();
        assert_eq!(
            (first.as_str(), second.as_str()),
            ("Tools for Weather in Paris?", "Tools for Weather in Rome?")
        );
        let included = templates.system(Shape::Research, &other).unwrap();
        assert!(included.contains("Weather in Rome?"), "{included}");
    }

    fn context() -> PromptContext {
        PromptContext {
            query: "Weather in Paris?".into(),
            profile: Some("Be brief.".into()),
            locale: "fr-FR".into(),
            max_steps: 5,
            now: "2026-11-22T10:00:00Z (Sunday)".into(),
            tools: vec![std::sync::Arc::new(ToolView {
                name: "get_weather".into(),
                description: "Weather for a city".into(),
                signature: signature(
                    "get_weather",
                    &json!({"properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}),
                ),
                function: crate::calls::function_line(
                    "get_weather",
                    "Weather for a city",
                    &json!({"properties": {"city": {"type": "string"}}}),
                    None,
                ),
            })],
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
        let templates = Prompts::builtin();
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
                calls: false,
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
        let templates = Prompts::with_overrides(dir.path()).unwrap();
        assert_eq!(templates.user(&context()).unwrap(), "Q=Weather in Paris?");
        // An override that reads the tools or the locale is given the whole context.
        std::fs::write(
            dir.path().join("user.j2"),
            "{{ locale }}:{% for tool in tools %}{{ tool.name }}{% endfor %}:{{ query }}",
        )
        .unwrap();
        let templates = Prompts::with_overrides(dir.path()).unwrap();
        assert!(!templates.user_per_request);
        assert_eq!(
            templates.user(&context()).unwrap(),
            "fr-FR:get_weather:Weather in Paris?"
        );
        assert!(Prompts::builtin().user_per_request);
        std::fs::write(dir.path().join("repair.j2"), "{% if %}").unwrap();
        let err = Prompts::with_overrides(dir.path()).unwrap_err();
        assert!(err.to_string().contains("repair.j2"), "{err}");
    }

    #[test]
    fn descriptions_are_cut_at_words() {
        assert_eq!(short_description("one two three four", 9), "one two…");
        assert_eq!(short_description("short", 9), "short");
    }
}
