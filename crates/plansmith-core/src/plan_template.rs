//! Plan templates (Spring AI Alibaba jmanus): a plan saved under a name, with declared
//! parameters written as `{{param}}` placeholders in its texts and tool arguments, instantiated
//! later with arguments into a new plan that is **validated again** against the catalog of the
//! day — a template whose tool disappeared or whose tool's schema changed gives the same
//! diagnostics as a model's plan would.
//!
//! Placeholders may appear in the plan's title and goal, in step titles and descriptions, in
//! tool arguments (string values, at any depth), agent queries, reply texts and questions. A
//! string argument that is exactly one placeholder takes the argument's JSON value when the
//! argument parses as a JSON number, boolean, array or object (`"{{days}}"` with `days=3`
//! becomes the integer `3`); everything else is substituted as text. Storage (names and
//! versions) is `plansmith-store`'s job; this module is the pure part.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::Catalog;
use crate::diagnostic::Diagnostic;
use crate::plan::{Action, Plan, StepStatus};
use crate::request::PlanOptions;
use crate::validate::validate;

/// One declared parameter of a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TemplateParameter {
    /// The name used in `{{name}}` (letters, digits, `_`, `-`).
    pub name: String,
    /// What the value is, for people choosing it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Used when instantiation gives no value; without it the parameter is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

impl TemplateParameter {
    /// A required parameter without description.
    pub fn new(name: impl Into<String>) -> TemplateParameter {
        TemplateParameter {
            name: name.into(),
            description: String::new(),
            default: None,
        }
    }
}

/// A named, versioned plan template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanTemplate {
    /// The template's name.
    pub name: String,
    /// Its version (1, 2, …; the store assigns it on save).
    pub version: u32,
    /// What it is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The declared parameters.
    pub parameters: Vec<TemplateParameter>,
    /// The plan, with `{{param}}` placeholders.
    pub plan: Plan,
    /// When this version was saved.
    pub created_at: DateTime<Utc>,
}

/// A template that cannot be made or instantiated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanTemplateError {
    /// The name is empty or has characters other than letters, digits, `_`, `-`, `.`.
    #[error("invalid template name `{0}`: use letters, digits, `_`, `-` and `.`")]
    InvalidName(String),
    /// A parameter name is malformed or declared twice.
    #[error("invalid parameter `{0}`: names are letters, digits, `_` and `-`, each declared once")]
    InvalidParameter(String),
    /// The plan uses placeholders that are not declared.
    #[error("the plan uses undeclared parameters: {}", .0.join(", "))]
    Undeclared(Vec<String>),
    /// Declared parameters that the plan never uses.
    #[error("declared parameters the plan never uses: {}", .0.join(", "))]
    Unused(Vec<String>),
    /// The plan lists more steps than any plan may hold ([`crate::parse::MAX_PLAN_STEPS`]).
    #[error("the plan lists {0} steps; a plan may hold at most {max}", max = crate::parse::MAX_PLAN_STEPS)]
    TooManySteps(usize),
    /// Instantiation without a value for required parameters.
    #[error("template `{template}` needs values for: {}", .missing.join(", "))]
    MissingArguments {
        /// The template.
        template: String,
        /// The parameters without value or default.
        missing: Vec<String>,
    },
    /// Instantiation with arguments the template does not declare.
    #[error("template `{template}` has no parameters named: {} (it has: {})", .unknown.join(", "), .declared.join(", "))]
    UnknownArguments {
        /// The template.
        template: String,
        /// The unknown names.
        unknown: Vec<String>,
        /// The declared names.
        declared: Vec<String>,
    },
}

impl PlanTemplate {
    /// A template (version 0 until stored) of `plan`, whose placeholders must be exactly the
    /// declared `parameters`, and whose steps are at most [`crate::parse::MAX_PLAN_STEPS`].
    /// The plan's progress (step status, notes, results) is cleared and its conversation
    /// fields dropped.
    pub fn new(
        name: &str,
        description: &str,
        plan: Plan,
        parameters: Vec<TemplateParameter>,
    ) -> Result<PlanTemplate, PlanTemplateError> {
        let name = name.trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(PlanTemplateError::InvalidName(name.to_owned()));
        }
        // Checked first: the placeholder scans below read every step.
        if plan.steps.len() > crate::parse::MAX_PLAN_STEPS {
            return Err(PlanTemplateError::TooManySteps(plan.steps.len()));
        }
        let mut declared = BTreeSet::new();
        for parameter in &parameters {
            if !valid_param(&parameter.name) || !declared.insert(parameter.name.clone()) {
                return Err(PlanTemplateError::InvalidParameter(parameter.name.clone()));
            }
        }
        let mut plan = plan;
        for step in &mut plan.steps {
            step.status = StepStatus::NotStarted;
            step.notes.clear();
            step.result = None;
            step.error = None;
        }
        plan.owner = None;
        plan.conversation_id = None;
        plan.thread_id = None;
        let used = placeholders(&plan);
        let undeclared: Vec<String> = used.difference(&declared).cloned().collect();
        if !undeclared.is_empty() {
            return Err(PlanTemplateError::Undeclared(undeclared));
        }
        let unused: Vec<String> = declared.difference(&used).cloned().collect();
        if !unused.is_empty() {
            return Err(PlanTemplateError::Unused(unused));
        }
        Ok(PlanTemplate {
            name: name.to_owned(),
            version: 0,
            description: description.trim().to_owned(),
            parameters,
            plan,
            created_at: Utc::now(),
        })
    }

    /// Turns a concrete plan into a template plan: every occurrence of each `(name, literal)`'s
    /// literal text (in the places placeholders may be) becomes `{{name}}`. Longer literals are
    /// replaced first, so `New York City` wins over `York`. Empty literals are ignored.
    pub fn parameterize(plan: &Plan, literals: &[(String, String)]) -> Plan {
        let mut ordered: Vec<&(String, String)> =
            literals.iter().filter(|(_, lit)| !lit.is_empty()).collect();
        ordered.sort_by_key(|(_, lit)| std::cmp::Reverse(lit.len()));
        let mut plan = plan.clone();
        // Placeholders first become private markers, so a later literal cannot match inside
        // an earlier placeholder's name.
        let marker = |idx: usize| format!("\u{1}{idx}\u{1}");
        for (idx, (_, literal)) in ordered.iter().enumerate() {
            map_plan_text(&mut plan, &mut |text| {
                text.replace(literal.as_str(), &marker(idx))
            });
        }
        for (idx, (name, _)) in ordered.iter().enumerate() {
            let placeholder = format!("{{{{{name}}}}}");
            map_plan_text(&mut plan, &mut |text| {
                text.replace(&marker(idx), &placeholder)
            });
        }
        plan
    }

    /// The plan for these arguments, validated against `catalog` with `options`: a new id,
    /// version 1, `created_at` = `now`. Errors when a required parameter has no value or an
    /// argument is not declared; the plan's own problems (a tool that no longer exists, an
    /// argument its schema no longer accepts) come back as diagnostics.
    pub fn instantiate(
        &self,
        arguments: &BTreeMap<String, String>,
        catalog: &Catalog,
        options: &PlanOptions,
        plan_id: &str,
        now: DateTime<Utc>,
    ) -> Result<(Plan, Vec<Diagnostic>), PlanTemplateError> {
        let declared: Vec<String> = self.parameters.iter().map(|p| p.name.clone()).collect();
        let unknown: Vec<String> = arguments
            .keys()
            .filter(|k| !declared.contains(k))
            .cloned()
            .collect();
        if !unknown.is_empty() {
            return Err(PlanTemplateError::UnknownArguments {
                template: self.name.clone(),
                unknown,
                declared,
            });
        }
        let mut values = BTreeMap::new();
        let mut missing = Vec::new();
        for parameter in &self.parameters {
            match arguments
                .get(&parameter.name)
                .or(parameter.default.as_ref())
            {
                Some(value) => {
                    values.insert(parameter.name.clone(), value.clone());
                }
                None => missing.push(parameter.name.clone()),
            }
        }
        if !missing.is_empty() {
            return Err(PlanTemplateError::MissingArguments {
                template: self.name.clone(),
                missing,
            });
        }
        let mut plan = self.plan.clone();
        substitute_plan(&mut plan, &values);
        plan.id = plan_id.to_owned();
        plan.version = 1;
        plan.parent_version = None;
        plan.created_at = now;
        plan.metadata.insert(
            "template".into(),
            serde_json::json!({"name": self.name, "version": self.version, "arguments": values}),
        );
        Ok(validate(plan, catalog, options))
    }
}

fn valid_param(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-'))
}

/// The `{{name}}` placeholders of a text (spaces inside the braces allowed).
fn placeholders_in(text: &str, out: &mut BTreeSet<String>) {
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            break;
        };
        let name = after[..end].trim();
        if valid_param(name) {
            out.insert(name.to_owned());
        }
        rest = &after[end + 2..];
    }
}

/// Every placeholder used in the plan.
pub fn placeholders(plan: &Plan) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut plan = plan.clone();
    map_plan_text(&mut plan, &mut |text| {
        placeholders_in(text, &mut found);
        text.to_owned()
    });
    found
}

/// `text` with each `{{name}}` of `values` replaced.
fn substitute_text(text: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => match values.get(after[..end].trim()) {
                Some(value) => {
                    out.push_str(value);
                    rest = &after[end + 2..];
                }
                None => {
                    out.push_str("{{");
                    rest = after;
                }
            },
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `{"$ref": "s1.output…"}`: a reference to another step's output, never a text to rewrite.
fn is_step_ref(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|map| map.len() == 1 && map.contains_key("$ref"))
}

fn substitute_value(value: &mut Value, values: &BTreeMap<String, String>) {
    if is_step_ref(value) {
        return;
    }
    match value {
        Value::String(text) => {
            let whole = text
                .trim()
                .strip_prefix("{{")
                .and_then(|t| t.strip_suffix("}}"))
                .map(str::trim)
                .and_then(|name| values.get(name));
            if let Some(raw) = whole
                && let Ok(parsed) = serde_json::from_str::<Value>(raw)
                && !parsed.is_string()
                && !parsed.is_null()
            {
                *value = parsed;
                return;
            }
            *text = substitute_text(text, values);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| substitute_value(v, values)),
        Value::Object(map) => map.values_mut().for_each(|v| substitute_value(v, values)),
        _ => {}
    }
}

fn substitute_plan(plan: &mut Plan, values: &BTreeMap<String, String>) {
    for step in &mut plan.steps {
        if let Action::Tool { arguments, .. } = &mut step.action {
            arguments
                .values_mut()
                .for_each(|v| substitute_value(v, values));
        }
    }
    map_plan_text(plan, &mut |text| substitute_text(text, values));
}

/// Applies `f` to every text of the plan where placeholders may be, tool arguments included
/// (string values at any depth).
fn map_plan_text(plan: &mut Plan, f: &mut dyn FnMut(&str) -> String) {
    plan.title = f(&plan.title);
    plan.goal = f(&plan.goal);
    if let Some(guidance) = &mut plan.guidance {
        *guidance = f(guidance);
    }
    for question in &mut plan.questions {
        question.text = f(&question.text);
    }
    for step in &mut plan.steps {
        step.title = f(&step.title);
        step.description = f(&step.description);
        match &mut step.action {
            Action::Tool { arguments, .. } => {
                arguments.values_mut().for_each(|v| map_value(v, f));
            }
            Action::Agent { query, .. } => *query = f(query),
            Action::Reply { text } => *text = f(text),
            Action::Task { .. } => {}
        }
    }
}

fn map_value(value: &mut Value, f: &mut dyn FnMut(&str) -> String) {
    if is_step_ref(value) {
        return;
    }
    match value {
        Value::String(text) => *text = f(text),
        Value::Array(items) => items.iter_mut().for_each(|v| map_value(v, f)),
        Value::Object(map) => map.values_mut().for_each(|v| map_value(v, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::Step;

    fn weather_plan() -> Plan {
        let mut plan = Plan::new("p1", "Weather in Paris for 3 days");
        plan.title = "Paris weather".into();
        let Value::Object(arguments) = json!({"city": "Paris", "days": 3}) else {
            unreachable!()
        };
        plan.steps.push(Step::new(
            "s1",
            "Forecast for Paris",
            Action::Tool {
                name: "get_forecast".into(),
                arguments,
            },
        ));
        plan
    }

    #[test]
    fn parameterize_then_collect_placeholders() {
        let plan = PlanTemplate::parameterize(
            &weather_plan(),
            &[("city".into(), "Paris".into()), ("x".into(), String::new())],
        );
        assert_eq!(plan.title, "{{city}} weather");
        // Step references are not texts: a literal that happens to match stays out of them.
        let mut with_ref = weather_plan();
        if let Action::Tool { arguments, .. } = &mut with_ref.steps[0].action {
            arguments.insert("from".into(), json!({"$ref": "s1.output"}));
        }
        let templated = PlanTemplate::parameterize(&with_ref, &[("step".into(), "s1".into())]);
        let Action::Tool { arguments, .. } = &templated.steps[0].action else {
            unreachable!()
        };
        assert_eq!(arguments["from"], json!({"$ref": "s1.output"}));
        assert_eq!(placeholders(&plan), BTreeSet::from(["city".to_owned()]));
        let err = PlanTemplate::new("t", "", plan.clone(), vec![]).unwrap_err();
        assert_eq!(err, PlanTemplateError::Undeclared(vec!["city".into()]));
        let err = PlanTemplate::new(
            "t",
            "",
            plan.clone(),
            vec![
                TemplateParameter::new("city"),
                TemplateParameter::new("unit"),
            ],
        )
        .unwrap_err();
        assert_eq!(err, PlanTemplateError::Unused(vec!["unit".into()]));
        assert!(matches!(
            PlanTemplate::new("bad name", "", plan, vec![]),
            Err(PlanTemplateError::InvalidName(_))
        ));
    }

    #[test]
    fn whole_placeholders_take_json_values() {
        let mut values = BTreeMap::new();
        values.insert("days".to_owned(), "3".to_owned());
        values.insert("city".to_owned(), "Berlin".to_owned());
        let mut value =
            json!({"days": "{{ days }}", "q": "in {{city}} ({{other}})", "n": ["{{city}}"]});
        substitute_value(&mut value, &values);
        assert_eq!(
            value,
            json!({"days": 3, "q": "in Berlin ({{other}})", "n": ["Berlin"]})
        );
    }
}
