//! The `planning` tool's commands: OpenManus's PlanningTool on the plan store.

use plansmith_core::parse::{ParseDefaults, to_plan};
use plansmith_store::{ListFilter, Review, StepKey, StoreError};
use serde_json::{Value, json};

use super::PlansmithMcp;
use super::answer::stored_json;
use super::params::{PlanningCommand, PlanningParams};

/// Conversation of OpenManus's single active plan.
const DEFAULT_CONVERSATION: &str = "default";

impl PlansmithMcp {
    /// Runs one PlanningTool command for `owner`: the answer's JSON and text, or what is wrong.
    pub(super) async fn planning_command(
        &self,
        params: PlanningParams,
        owner: &Option<String>,
    ) -> Result<(Value, String), String> {
        let actor = self.actor_for(owner);
        let conversation = params
            .conversation_id
            .clone()
            .unwrap_or_else(|| DEFAULT_CONVERSATION.to_owned());
        let require_id = |command: &str| {
            params
                .plan_id
                .clone()
                .filter(|id| !id.trim().is_empty())
                .ok_or_else(|| format!("Parameter `plan_id` is required for command: {command}"))
        };
        let err = |err: StoreError| err.to_string();
        let stored = match params.command {
            PlanningCommand::Create => {
                let id = require_id("create")?;
                let title = params
                    .title
                    .clone()
                    .filter(|t| !t.trim().is_empty())
                    .ok_or("Parameter `title` is required for command: create")?;
                let steps = params.steps.clone().filter(|s| !s.is_empty()).ok_or(
                    "Parameter `steps` must be a non-empty list of strings for command: create",
                )?;
                let mut plan = openmanus_plan(&id, &title, &steps)?;
                plan.owner = owner.clone();
                plan.conversation_id = params.conversation_id.clone();
                self.store()
                    .create(plan, plansmith_store::ReviewState::Draft, Review::default(), &actor)
                    .await
                    .map_err(|e| match e {
                        StoreError::AlreadyExists(id) => format!(
                            "A plan with ID '{id}' already exists. Use 'update' to modify existing plans."
                        ),
                        other => other.to_string(),
                    })?
            }
            PlanningCommand::Update => {
                let id = require_id("update")?;
                let current = self.visible(&id, owner).await.map_err(err)?;
                let title = params.title.clone().unwrap_or(current.plan.title.clone());
                let mut plan = match &params.steps {
                    Some(steps) => openmanus_plan(&id, &title, steps)?,
                    None => current.plan.clone(),
                };
                plan.title = title;
                plan.owner = current.plan.owner.clone();
                plan.conversation_id = current.plan.conversation_id.clone();
                self.store()
                    .update(&id, plan, None, &actor)
                    .await
                    .map_err(err)?
            }
            PlanningCommand::List => {
                let page = self
                    .store()
                    .list(&ListFilter {
                        owner: owner.clone(),
                        conversation_id: params.conversation_id.clone(),
                        limit: Some(1000),
                        total_cap: Some(plansmith_store::store::DEFAULT_TOTAL_CAP),
                        ..ListFilter::default()
                    })
                    .await
                    .map_err(err)?;
                let active = self.store().get_active(&conversation).await.ok();
                let mut text = String::from("Available plans:\n");
                if page.plans.is_empty() {
                    text = "No plans available. Create a plan with the 'create' command.".into();
                }
                for stored in &page.plans {
                    let done = stored
                        .plan
                        .steps
                        .iter()
                        .filter(|s| s.status == plansmith_core::StepStatus::Completed)
                        .count();
                    let marker = if active.as_ref().is_some_and(|a| a.plan.id == stored.plan.id) {
                        " (active)"
                    } else {
                        ""
                    };
                    text.push_str(&format!(
                        "• {}{marker}: {} - {done}/{} steps completed\n",
                        stored.plan.id,
                        stored.plan.title,
                        stored.plan.steps.len()
                    ));
                }
                let value = json!({
                    "plans": page.plans.iter().map(|s| json!({
                        "plan_id": s.plan.id, "title": s.plan.title, "state": s.state,
                        "version": s.version(), "steps": s.plan.steps.len(),
                    })).collect::<Vec<_>>(),
                    "total": page.total,
                    "total_exact": page.total_exact,
                    "active": active.map(|a| a.plan.id),
                });
                return Ok((value, text));
            }
            PlanningCommand::Get => match &params.plan_id {
                Some(id) => self.visible(id, owner).await.map_err(err)?,
                None => {
                    let active = self.store().get_active(&conversation).await.map_err(|_| {
                        "No active plan. Please specify a plan_id or set an active plan.".to_owned()
                    })?;
                    self.visible(&active.plan.id, owner).await.map_err(err)?
                }
            },
            PlanningCommand::SetActive => {
                let id = require_id("set_active")?;
                self.visible(&id, owner).await.map_err(err)?;
                self.store()
                    .set_active(&conversation, &id)
                    .await
                    .map_err(err)?;
                let stored = self.store().get(&id).await.map_err(err)?;
                let text = format!(
                    "Plan '{id}' is now the active plan.\n\n{}",
                    stored.render_text_from(0)
                );
                return Ok((stored_json(&stored), text));
            }
            PlanningCommand::MarkStep => {
                let id = match &params.plan_id {
                    Some(id) => id.clone(),
                    None => {
                        self.store()
                            .get_active(&conversation)
                            .await
                            .map_err(|_| {
                                "No active plan. Please specify a plan_id or set an active plan."
                                    .to_owned()
                            })?
                            .plan
                            .id
                    }
                };
                let index = params
                    .step_index
                    .ok_or("Parameter `step_index` is required for command: mark_step")?;
                self.visible(&id, owner).await.map_err(err)?;
                let stored = self
                    .store()
                    .mark_step(
                        &id,
                        &StepKey::Index(index),
                        params.step_status.as_deref(),
                        params.step_notes.as_deref(),
                        None,
                        &actor,
                    )
                    .await
                    .map_err(err)?;
                let text = format!(
                    "Step {index} updated in plan '{id}'.\n\n{}",
                    stored.render_text_from(0)
                );
                return Ok((stored_json(&stored), text));
            }
            PlanningCommand::Delete => {
                let id = require_id("delete")?;
                self.visible(&id, owner).await.map_err(err)?;
                self.store().delete(&id).await.map_err(err)?;
                return Ok((
                    json!({"deleted": id}),
                    format!("Plan '{id}' has been deleted."),
                ));
            }
        };
        let text = stored.render_text_from(0);
        Ok((stored_json(&stored), text))
    }
}

/// A plan from OpenManus's `{plan_id, title, steps: [text]}`: sequential steps.
fn openmanus_plan(id: &str, title: &str, steps: &[String]) -> Result<plansmith_core::Plan, String> {
    if steps.iter().any(|s| s.trim().is_empty()) {
        return Err("Parameter `steps` must not contain empty strings".into());
    }
    let defaults = ParseDefaults {
        plan_id: id,
        goal: title,
        locale: "en-US",
        now: chrono::Utc::now(),
    };
    let document = json!({"plan_id": id, "title": title, "steps": steps});
    to_plan(document, &defaults)
        .map(|(plan, _, _)| plan)
        .map_err(|err| format!("invalid plan: {err}"))
}
