//! The `templates` tool's commands: list, get, save, delete and instantiate plan templates.

use plansmith_core::Severity;
use plansmith_core::plan_template::{PlanTemplate, TemplateParameter};
use plansmith_service::Instantiation;
use plansmith_store::StoreError;
use serde_json::{Value, json};

use super::PlansmithMcp;
use super::answer::stored_json;
use super::params::{TemplatesCommand, TemplatesParams};

impl PlansmithMcp {
    /// Runs one `templates` command for `owner`: the answer's JSON and text, or what is wrong.
    pub(super) async fn templates_command(
        &self,
        params: TemplatesParams,
        owner: &Option<String>,
    ) -> Result<(Value, String), String> {
        let err = |err: StoreError| err.to_string();
        let name = || {
            params
                .name
                .clone()
                .filter(|n| !n.trim().is_empty())
                .ok_or_else(|| "Parameter `name` is required for this command".to_owned())
        };
        match params.command {
            TemplatesCommand::List => {
                let entries = self.store().list_templates().await.map_err(err)?;
                let mut text = String::new();
                for entry in &entries {
                    let t = &entry.latest;
                    let names: Vec<&str> = t.parameters.iter().map(|p| p.name.as_str()).collect();
                    text.push_str(&format!(
                        "{} v{} [{}] {}\n",
                        t.name,
                        t.version,
                        names.join(", "),
                        t.description
                    ));
                }
                if entries.is_empty() {
                    text.push_str("No templates.");
                }
                let list: Vec<Value> = entries
                    .iter()
                    .map(|e| {
                        json!({"name": e.latest.name, "version": e.latest.version,
                        "versions": e.versions, "description": e.latest.description,
                        "parameters": e.latest.parameters})
                    })
                    .collect();
                Ok((json!({ "templates": list }), text))
            }
            TemplatesCommand::Get => {
                let template = self
                    .store()
                    .get_template(&name()?, params.version)
                    .await
                    .map_err(err)?;
                let text = format!(
                    "Template {} v{}\n{}",
                    template.name,
                    template.version,
                    template.plan.render_text()
                );
                Ok((serde_json::to_value(&template).unwrap_or(Value::Null), text))
            }
            TemplatesCommand::Save => {
                let name = name()?;
                let plan_id = params
                    .plan_id
                    .clone()
                    .ok_or("Parameter `plan_id` is required for command: save")?;
                let stored = self.visible(&plan_id, owner).await.map_err(err)?;
                let literals: Vec<(String, String)> = params
                    .parameters
                    .iter()
                    .filter_map(|p| p.literal.clone().map(|l| (p.name.clone(), l)))
                    .collect();
                let parameters = params
                    .parameters
                    .iter()
                    .map(|p| {
                        let mut parameter = TemplateParameter::new(p.name.clone());
                        parameter.description = p.description.clone().unwrap_or_default();
                        parameter.default = p.default.clone();
                        parameter
                    })
                    .collect();
                let plan = PlanTemplate::parameterize(&stored.plan, &literals);
                let template = PlanTemplate::new(
                    &name,
                    params.description.as_deref().unwrap_or_default(),
                    plan,
                    parameters,
                )
                .map_err(|e| e.to_string())?;
                let saved = self
                    .store()
                    .save_template(template, &self.actor_for(owner))
                    .await
                    .map_err(err)?;
                let text = format!("Saved template {} v{}", saved.name, saved.version);
                Ok((serde_json::to_value(&saved).unwrap_or(Value::Null), text))
            }
            TemplatesCommand::Delete => {
                let name = name()?;
                let deleted = self
                    .store()
                    .delete_template(&name, params.version)
                    .await
                    .map_err(err)?;
                Ok((
                    json!({"name": name, "deleted_versions": deleted}),
                    format!("Deleted {deleted} version(s) of template {name}"),
                ))
            }
            TemplatesCommand::Instantiate => {
                let mut what = Instantiation::new(name()?, params.arguments.clone());
                what.version = params.version;
                what.conversation_id = params.conversation_id.clone();
                what.options = params.options.clone().unwrap_or_default();
                what.owner = owner.clone();
                let instance = self
                    .service
                    .instantiate(&what)
                    .await
                    .map_err(|e| e.to_string())?;
                let errors: Vec<String> = instance
                    .diagnostics
                    .iter()
                    .filter(|d| d.severity == Severity::Error)
                    .map(ToString::to_string)
                    .collect();
                if !errors.is_empty() {
                    return Err(format!(
                        "the plan from template {} v{} is invalid against the catalog; nothing saved: {}",
                        instance.template,
                        instance.version,
                        errors.join("; ")
                    ));
                }
                if params.save.unwrap_or(true) {
                    let diagnostics = instance.diagnostics.clone();
                    let stored = self
                        .service
                        .submit_instance(instance, &self.actor_for(owner))
                        .await
                        .map_err(|e| e.to_string())?;
                    let mut value = stored_json(&stored);
                    value["diagnostics"] = json!(diagnostics);
                    Ok((value, stored.render_text()))
                } else {
                    let text = instance.plan.render_text();
                    Ok((
                        json!({"plan": instance.plan, "diagnostics": instance.diagnostics}),
                        text,
                    ))
                }
            }
        }
    }
}
