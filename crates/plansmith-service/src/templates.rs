//! Plan templates made into plans: the arguments filled in, the plan validated against the
//! service's catalog, and stored for review only when nothing in it is an error.

use std::collections::BTreeMap;

use plansmith_core::{Diagnostic, Plan, PlanOptions, Severity};
use plansmith_store::{Review, ReviewState, StoredPlan};

use crate::{Result, Service, ServiceError};

/// A template to make a plan of.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Instantiation {
    /// The template's name.
    pub name: String,
    /// Its version (`None`: the newest).
    pub version: Option<u32>,
    /// Parameter → value (parameters with a default may be left out).
    pub arguments: BTreeMap<String, String>,
    /// Validation options (`max_steps`, `allow_recurring`, …).
    pub options: PlanOptions,
    /// The conversation to record on the plan.
    pub conversation_id: Option<String>,
    /// The plan's owner.
    pub owner: Option<String>,
}

impl Instantiation {
    /// Template `name` (its newest version) with these arguments and the default options.
    pub fn new(name: impl Into<String>, arguments: BTreeMap<String, String>) -> Instantiation {
        Instantiation {
            name: name.into(),
            arguments,
            ..Instantiation::default()
        }
    }
}

/// A plan made from a template, not stored yet.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Instance {
    /// The template's name.
    pub template: String,
    /// The template's version.
    pub version: u32,
    /// The plan, validated.
    pub plan: Plan,
    /// The engine's findings against the catalog; an error means the plan is not stored.
    pub diagnostics: Vec<Diagnostic>,
}

impl Instance {
    /// True when no finding is an error: [`Service::submit_instance`] stores it.
    pub fn is_valid(&self) -> bool {
        !self
            .diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }
}

impl Service {
    /// Makes a plan of a stored template: the arguments substituted, the plan validated against
    /// the service's catalog (a tool gone or changed since the template was saved is an error
    /// finding). Nothing is stored. Missing or unknown arguments are
    /// [`ServiceError::Template`].
    pub async fn instantiate(&self, what: &Instantiation) -> Result<Instance> {
        let template = self.store.get_template(&what.name, what.version).await?;
        let (mut plan, diagnostics) = template
            .instantiate(
                &what.arguments,
                self.planners.default_planner().catalog(),
                &what.options,
                &Plan::new_id(),
                chrono::Utc::now(),
            )
            .map_err(ServiceError::Template)?;
        plan.conversation_id = what.conversation_id.clone();
        plan.owner = what.owner.clone();
        Ok(Instance {
            template: template.name,
            version: template.version,
            plan,
            diagnostics,
        })
    }

    /// Stores an instance for review (`awaiting_review`); one with an error finding is refused
    /// with [`ServiceError::InvalidInstance`] and nothing is stored.
    pub async fn submit_instance(&self, instance: Instance, actor: &str) -> Result<StoredPlan> {
        if !instance.is_valid() {
            return Err(ServiceError::InvalidInstance {
                template: instance.template,
                version: instance.version,
                diagnostics: instance.diagnostics,
            });
        }
        Ok(self
            .store
            .create(
                instance.plan,
                ReviewState::AwaitingReview,
                Review::default(),
                actor,
            )
            .await?)
    }
}
