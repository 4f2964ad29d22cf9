//! plansmith-service: each operation on plans, written once for every front end.
//!
//! # Brief overview
//!
//! The HTTP API, the MCP server and the command line offer the same operations; a [`Service`]
//! is where each is written, so the three cannot disagree:
//!
//! - [`Service::plan`] plans a request with the caller's own catalog (tools and agents sent in
//!   any form a catalog is read in, compiled once and kept by content id) or the service's, and
//!   [`Service::submit`] stores the outcome for review, with the catalog it was made with;
//! - [`Service::decide`] applies one [`Decision`] — accept, reject, a free-text edit or answers
//!   (both replanned with the plan's own catalog), a JSON Patch (re-validated), a verdict on a
//!   step of a running plan (a run waiting for it is woken at once on the service's
//!   [`Runner`]);
//! - [`Service::check`] says what a JSON Patch would make of a plan, storing nothing;
//! - [`Service::run`] starts a plan's run (or resumes it) on the service's [`Runner`], in the
//!   background, and [`Service::run_here`] runs it in the caller's task;
//! - [`Service::stop`] asks a plan's run to stop, wherever it runs;
//! - [`Service::instantiate`] makes a plan of a stored template, validated against the
//!   service's catalog, and [`Service::submit_instance`] stores it for review when it is valid.
//!
//! The store ([`plansmith_store`]) keeps plans, versions and the review state, written by
//! compare-and-swap; it never calls the planner. The planner ([`plansmith_core::Planner`]) plans;
//! it never stores. This crate joins the two.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//!
//! use plansmith_core::{Catalog, PlanRequest, Planner, ScriptedModel};
//! use plansmith_service::{Decision, Planners, Service};
//! use plansmith_store::{Location, PlanStore, Review, ReviewState};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let dir = std::env::temp_dir().join(format!("plansmith-service-doc-{}", std::process::id()));
//! let store = PlanStore::open(&Location::Sqlite(dir.join("plans.db"))).await?;
//! let model = ScriptedModel::new([
//!     r#"{"title": "Greet", "steps": [{"id": "s1", "title": "Say hello", "action": {"type": "reply", "text": "Hello!"}}]}"#,
//! ]);
//! let planner = Planner::new(Catalog::default(), Arc::new(model));
//! let service = Service::new(store, Arc::new(Planners::new(Arc::new(planner))));
//!
//! let request = PlanRequest::new("Say hello");
//! let planned = service.plan(&request, None, None, None).await?;
//! let submitted = service.submit(planned, &request, Review::default(), "me").await?;
//! assert_eq!(submitted.stored.state, ReviewState::AwaitingReview);
//!
//! let id = submitted.stored.plan.id.clone();
//! let decided = service.decide(&id, Decision::Accept, Some(1), "me", None).await?;
//! assert_eq!(decided.stored.state, ReviewState::Accepted);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod approvals;
mod estimates;
mod planners;
mod review;
mod runs;
mod templates;

use std::sync::Arc;

use plansmith_core::pipeline::OnEvent;
use plansmith_core::{Diagnostic, Outcome, Plan, PlanError, PlanRequest, Planner};
use plansmith_store::{ExecRun, PlanStore, Review, RunState, StepDecided, StoreError, Submitted};
use serde_json::Value;

pub use approvals::PendingApproval;
pub use planners::Planners;
pub use review::{Decided, Decision};
pub use runs::{RunStart, Runner};
pub use templates::{Instance, Instantiation};

/// What an operation could not do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The store refused or failed (a stale version, a state that does not allow the action,
    /// an invalid edit, a replan that failed, …).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Planning a new request failed.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A run could not start or go on (a plan not accepted, without steps, with a run in
    /// progress, with nothing to resume; the store failing under the run).
    #[error(transparent)]
    Exec(#[from] plansmith_exec::ExecError),
    /// This service runs no plans: it was made without a [`Runner`].
    #[error("this service has no executor, so it runs no plans")]
    NoExecutor,
    /// A template's arguments do not fit it (missing or unknown parameters).
    #[error(transparent)]
    Template(plansmith_core::PlanTemplateError),
    /// The plan made from a template has errors against the catalog (a tool gone or changed
    /// since it was saved, an argument that does not fit); nothing was stored.
    #[error(
        "the plan from template {template} v{version} is invalid against the current catalog; nothing stored"
    )]
    InvalidInstance {
        /// The template.
        template: String,
        /// Its version.
        version: u32,
        /// Every finding, errors included.
        diagnostics: Vec<Diagnostic>,
    },
}

/// The result of a service operation.
pub type Result<T> = std::result::Result<T, ServiceError>;

/// A request planned, not stored yet: the planning outcome and the content id of the catalog the
/// caller sent (`None`: the service's own catalog).
#[derive(Debug)]
pub struct Planned {
    /// How planning ended, the plan, and what the engine did.
    pub outcome: Outcome,
    /// The content id of the caller's catalog, kept with the plan for its later operations.
    pub catalog: Option<String>,
}

/// plansmith's operations on plans over one store and the planners of its catalogs. Cheap to
/// clone: every front end of a process shares one.
#[derive(Clone)]
pub struct Service {
    store: PlanStore,
    planners: Arc<Planners>,
    runner: Option<Runner>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("planners", &self.planners)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// A service over `store`, planning with `planners` (the service's own catalog and those
    /// callers send).
    pub fn new(store: PlanStore, planners: Arc<Planners>) -> Service {
        Service {
            store,
            planners,
            runner: None,
        }
    }

    /// The store.
    pub fn store(&self) -> &PlanStore {
        &self.store
    }

    /// The planners.
    pub fn planners(&self) -> &Arc<Planners> {
        &self.planners
    }

    /// The planner for a request: the one of the caller's `tools` and/or `agents` (any catalog
    /// form; compiled on first sight and stored by content id, whose id comes with it), or the
    /// service's own. A sent document that does not load is [`StoreError::BadCatalog`].
    pub async fn planner_for(
        &self,
        tools: Option<&Value>,
        agents: Option<&Value>,
    ) -> Result<(Arc<Planner>, Option<String>)> {
        Ok(
            match self
                .planners
                .for_request(&self.store, tools, agents)
                .await?
            {
                Some((catalog, planner)) => (planner, Some(catalog)),
                None => (Arc::clone(self.planners.default_planner()), None),
            },
        )
    }

    /// Plans `request` with the caller's catalog or the service's ([`Service::planner_for`]),
    /// sending the planning's events to `on_event` as they happen.
    pub async fn plan(
        &self,
        request: &PlanRequest,
        tools: Option<&Value>,
        agents: Option<&Value>,
        on_event: Option<OnEvent<'_>>,
    ) -> Result<Planned> {
        let (planner, catalog) = self.planner_for(tools, agents).await?;
        let outcome = match on_event {
            Some(on_event) => planner.plan_with_events(request, on_event).await?,
            None => planner.plan(request).await?,
        };
        Ok(Planned { outcome, catalog })
    }

    /// Stores a planned request for review under `review` (its catalog kept for the plan's
    /// edits, checks, runs and replans); the plan's owner is the request's. Answered with the
    /// JSON written for it ([`Submitted`]), so that it is not encoded twice.
    pub async fn submit(
        &self,
        planned: Planned,
        request: &PlanRequest,
        review: Review,
        actor: &str,
    ) -> Result<Submitted> {
        let Planned {
            outcome: Outcome {
                mut plan, status, ..
            },
            catalog,
        } = planned;
        let mut review = review;
        if catalog.is_some() {
            review.catalog = catalog;
        }
        if request.owner.is_some() {
            plan.owner = request.owner.clone();
        }
        Ok(self
            .store
            .submit_plan(plan, &status, request, review, actor)
            .await?)
    }

    /// What the JSON Patch `patch` would make of plan `id`: the plan as it would be written,
    /// validated against the plan's own catalog, and every finding, errors included. Nothing is
    /// stored; refused like the edit itself when the plan's state does not allow edits.
    pub async fn check(&self, id: &str, patch: &Value) -> Result<(Plan, Vec<Diagnostic>)> {
        let current = self.store.get(id).await?;
        let planner = self
            .planners
            .for_review(&self.store, &current.review)
            .await?;
        Ok(self.store.check_patch(id, patch, planner.catalog()).await?)
    }

    /// Asks the run of plan `id` to stop: each process running it stops its running steps at
    /// its next turn, nothing else starts, and the run ends `aborted` with "stopped by ACTOR:
    /// NOTE"; a run paused for people is woken to stop. Answers the run as it was when the stop
    /// was recorded; [`StoreError::NotRunning`] when there is no run in progress.
    pub async fn stop(&self, id: &str, note: &str, actor: &str) -> Result<ExecRun> {
        let run = self.store.request_stop(id, note, actor).await?;
        if run.state == RunState::Waiting {
            self.wake(id);
        }
        Ok(run)
    }

    /// Wakes the run of plan `id`, paused for people, when the decision just recorded is for
    /// the step it waits on.
    fn decided(&self, id: &str, decided: &StepDecided) {
        if decided.applies == plansmith_store::Applies::Now {
            self.wake(id);
        }
    }
}
