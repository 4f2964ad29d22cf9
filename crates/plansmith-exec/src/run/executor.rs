//! The [`Executor`]: its builder, and the ways into a run (start, resume, join).

use std::sync::Arc;

use plansmith_core::{Catalog, LanguageModel, Planner};
use plansmith_store::{Budget, ExecRun, PlanStore, ReviewAction, ReviewState, RunState, StepSeed};
use serde_json::Value;

use super::config::ExecConfig;
use super::report::{ExecError, RunReport};
use crate::events::{DocumentObserver, Observer};
use crate::invoke::Invokers;

/// Runs stored plans. Cheap to clone.
#[derive(Clone)]
pub struct Executor {
    pub(super) store: PlanStore,
    pub(super) invokers: Invokers,
    pub(super) catalog: Catalog,
    pub(super) planner: Option<Arc<Planner>>,
    pub(super) planners: Option<Arc<dyn PlannerSource>>,
    pub(super) summary_model: Option<Arc<dyn LanguageModel>>,
    pub(super) observer: Option<Observer>,
    pub(super) on_document: Option<DocumentObserver>,
    pub(super) config: Arc<ExecConfig>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("invokers", &self.invokers)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How [`Executor`] enters a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    Start,
    Resume,
    Join,
}

impl Executor {
    /// An executor over `store` with these invokers and settings.
    pub fn new(store: PlanStore, invokers: Invokers, config: ExecConfig) -> Executor {
        Executor {
            store,
            invokers,
            catalog: Catalog::empty(),
            planner: None,
            planners: None,
            summary_model: None,
            observer: None,
            on_document: None,
            config: Arc::new(config),
        }
    }

    /// The catalog: `output_schema` checks of results, input checks of resolved arguments.
    pub fn with_catalog(mut self, catalog: Catalog) -> Executor {
        self.catalog = catalog;
        self
    }

    /// The planner used to replan from observations.
    pub fn with_planner(mut self, planner: Arc<Planner>) -> Executor {
        self.planner = Some(planner);
        self
    }

    /// Where a plan made with its caller's own catalog finds it: such a plan's runs check
    /// arguments and results against that catalog, and replan with it (when this executor
    /// replans at all, [`Executor::with_planner`]), not with [`Executor::with_catalog`]'s.
    pub fn with_planners(mut self, planners: Arc<dyn PlannerSource>) -> Executor {
        self.planners = Some(planners);
        self
    }

    /// The model that writes the final summary (without one: the plain rendering).
    pub fn with_summary_model(mut self, model: Arc<dyn LanguageModel>) -> Executor {
        self.summary_model = Some(model);
        self
    }

    /// Receives every [`ExecEvent`](crate::events::ExecEvent).
    pub fn with_observer(mut self, observer: Observer) -> Executor {
        self.observer = Some(observer);
        self
    }

    /// Receives the plan each time the run writes its steps' statuses and results into the
    /// document (in the order of the writes), as another writer would publish its change.
    pub fn with_document_observer(mut self, observer: DocumentObserver) -> Executor {
        self.on_document = Some(observer);
        self
    }

    /// The settings.
    pub fn config(&self) -> &ExecConfig {
        &self.config
    }

    /// Whether a model writes the runs' summaries (one model call at the end of each run).
    pub fn summarises(&self) -> bool {
        self.summary_model.is_some()
    }

    /// The store.
    pub fn store(&self) -> &PlanStore {
        &self.store
    }

    /// Starts a new run of the plan and runs it to its end (or until it waits for people).
    /// Steps the document already marks completed keep their result and do not run.
    pub async fn run(&self, plan_id: &str) -> Result<RunReport, ExecError> {
        self.run_with(plan_id, &Budget::default()).await
    }

    /// [`Executor::run`] with caps of this run's own over the executor's
    /// ([`ExecConfig::budget`]).
    pub async fn run_with(&self, plan_id: &str, budget: &Budget) -> Result<RunReport, ExecError> {
        self.start_with(plan_id, budget).await?;
        self.drive(plan_id, Entry::Start).await
    }

    /// Records a new run of the plan without running it (a server starts it, then any node
    /// may [`Executor::join`]).
    pub async fn start(&self, plan_id: &str) -> Result<ExecRun, ExecError> {
        self.start_with(plan_id, &Budget::default()).await
    }

    /// [`Executor::start`] with caps of this run's own over the executor's
    /// ([`ExecConfig::budget`]); they are stored with the run, so every node and every resume
    /// keeps to them.
    pub async fn start_with(&self, plan_id: &str, budget: &Budget) -> Result<ExecRun, ExecError> {
        let stored = self.store.get(plan_id).await?;
        if !stored.state.allows(ReviewAction::Run) {
            let hint = match stored.state {
                ReviewState::AwaitingReview => "accept it first (plansmith plans accept)",
                ReviewState::NeedsInput => "answer its questions first",
                _ => "it will not run",
            };
            return Err(ExecError::NotRunnable {
                id: plan_id.to_owned(),
                state: stored.state,
                hint,
            });
        }
        if stored.plan.steps.is_empty() {
            return Err(ExecError::NotRunnable {
                id: plan_id.to_owned(),
                state: stored.state,
                hint: "it has no steps, so there is nothing to run (replan it with its tools)",
            });
        }
        let seeds: Vec<StepSeed> = stored
            .plan
            .steps
            .iter()
            .map(|step| StepSeed {
                step_id: step.id.clone(),
                completed: (step.status == plansmith_core::StepStatus::Completed)
                    .then(|| step.result.clone().unwrap_or(Value::Null)),
            })
            .collect();
        Ok(self
            .store
            .exec_start_with(
                plan_id,
                stored.version(),
                &seeds,
                &self.config.node,
                &self.config.budget.then(budget),
            )
            .await?)
    }

    /// Continues an unfinished run (after a crash, or after people decided): completed steps
    /// are not run again; an attempt that was running when its node died is re-run with the
    /// same idempotency key once its lease expired.
    pub async fn resume(&self, plan_id: &str) -> Result<RunReport, ExecError> {
        let run = self.unfinished_run(plan_id).await?;
        if run.state == RunState::Waiting {
            self.store
                .exec_set_run_state(plan_id, RunState::Running, None)
                .await?;
        }
        self.drive(plan_id, Entry::Resume).await
    }

    /// The plan's unfinished run, the one [`Executor::resume`] continues;
    /// [`ExecError::NothingToResume`] when it never ran or its last run ended.
    pub async fn unfinished_run(&self, plan_id: &str) -> Result<ExecRun, ExecError> {
        match self.store.exec_run(plan_id).await? {
            None => Err(ExecError::NothingToResume {
                id: plan_id.to_owned(),
                why: "it never ran".into(),
            }),
            Some(run) if run.state.is_final() => Err(ExecError::NothingToResume {
                id: plan_id.to_owned(),
                why: format!("its last run is {}", run.state),
            }),
            Some(run) => Ok(run),
        }
    }

    /// Takes part in a running run started elsewhere (another node); `None` when it is not
    /// running.
    pub async fn join(&self, plan_id: &str) -> Result<Option<RunReport>, ExecError> {
        match self.store.exec_run(plan_id).await? {
            Some(run) if run.state == RunState::Running => {
                self.drive(plan_id, Entry::Join).await.map(Some)
            }
            _ => Ok(None),
        }
    }
}

/// Where a run finds the planner of the catalog its plan was made with, when the plan's caller
/// sent its own (`plansmith_service::Planners` is one: it builds each sent catalog once).
pub trait PlannerSource: Send + Sync {
    /// The planner for a plan with this review record: the one of the catalog it names
    /// (`Review::catalog`), loaded from `store` when it was not built yet.
    fn for_review<'a>(
        &'a self,
        store: &'a PlanStore,
        review: &'a plansmith_store::Review,
    ) -> plansmith_core::llm::BoxFuture<'a, Result<Arc<Planner>, plansmith_store::StoreError>>;
}
