//! The scheduler: [`Executor`] runs a stored plan as a DAG over the durable execution log.
//!
//! One loop per plan and node. Each turn it skips the descendants of failed or skipped steps,
//! applies people's decisions, finds the steps whose dependencies completed, blocks those that
//! need an approval, claims up to `concurrency − running` of the rest in the store (leases),
//! and starts them; then it waits for the next attempt to end (or a poll tick). An attempt's
//! end goes through the step's failure policy and into the store (fenced by the lease), and
//! the plan document follows through a coalescing writer (`DocSync`). When no step can
//! progress the run ends: replanned (failed steps under `replan`, or results contradicting the
//! plan), waiting for people, or finished with a summary. Every loop is bounded: attempts by
//! the policy and [`crate::policy::MAX_ATTEMPTS`], replans by `max_replans` and the stall
//! check, turns by [`MAX_TURNS`] and the run by `max_run_time`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use plansmith_core::validate::validate;
use plansmith_core::{
    Action, Catalog, Feedback, LanguageModel, Outcome, OutcomeStatus, Plan, PlanRequest, Planner,
};
use plansmith_store::{
    Change, Claim, ExecRun, ExecStatus, ExecStep, PlanStore, Planners, ReviewAction, ReviewState,
    RunSignal, RunState, StepEnd, StepSeed, StepVerdict, StoreError, StoredPlan, Trigger,
};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::events::{DocumentObserver, ExecEvent, Observer};
use crate::invoke::{Call, CallProgress, InvokeError, Invokers};
use crate::policy::{FailurePolicy, OnFailure, needs_approval, policy_for};
use crate::refs::{RefError, check_output, preview, resolve};
use crate::replan::{call_fingerprint, failure_fingerprint, merge};
use crate::summary;

/// Most scheduler turns of one run (each turn starts or ends at least one attempt, or waits
/// one poll interval).
pub const MAX_TURNS: u64 = 10_000_000;

/// Executor settings. Pass explicitly; [`ExecConfig::new`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecConfig {
    /// This node's name in leases and the attempt log (unique per process).
    pub node: String,
    /// Most attempts running at once on this node.
    pub concurrency: usize,
    /// The default failure policy (plans and steps override it in `metadata.execution`).
    pub policy: FailurePolicy,
    /// Most replans of one run.
    pub max_replans: u32,
    /// Lease of a claimed step; renewed every third of it while the step runs.
    pub lease: Duration,
    /// How often the store is polled while waiting for other nodes or for people.
    pub poll_interval: Duration,
    /// Longest a run waits for a person's decision before it pauses (`waiting`).
    pub wait_for_people: Duration,
    /// Longest run time; past it, nothing new starts and the run fails.
    pub max_run_time: Duration,
    /// Approve every gated step.
    pub approve_all: bool,
    /// Steps that need an approval in addition to those the plan flags.
    pub require_approval: Vec<String>,
    /// Write step statuses and results into the plan document as they happen.
    pub sync_document: bool,
}

impl ExecConfig {
    /// Defaults: 4 at once, 2 retries from 200 ms (max 5 s) then `fail`, 2 replans, 15 s
    /// leases, 200 ms polls, no wait for people, 24 h per run, document sync on.
    pub fn new(node: impl Into<String>) -> ExecConfig {
        ExecConfig {
            node: node.into(),
            concurrency: 4,
            policy: FailurePolicy {
                retries: 2,
                backoff: Duration::from_millis(200),
                max_backoff: Duration::from_secs(5),
                on_failure: OnFailure::Fail,
            },
            max_replans: 2,
            lease: Duration::from_secs(15),
            poll_interval: Duration::from_millis(200),
            wait_for_people: Duration::ZERO,
            max_run_time: Duration::from_secs(24 * 3600),
            approve_all: false,
            require_approval: Vec::new(),
            sync_document: true,
        }
    }
}

/// A node name for this process: `host-pid-random`.
pub fn node_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "node".to_owned());
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &tag[..6])
}

/// A run that could not happen (step failures are not errors: they are in the report).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The plan's review state forbids running it.
    #[error("plan `{id}` is {state}: {hint}")]
    NotRunnable {
        /// The plan.
        id: String,
        /// Its state.
        state: ReviewState,
        /// What to do.
        hint: &'static str,
    },
    /// The plan was deleted while it ran: its running steps were stopped (a command tool's
    /// process killed; a call already sent to an MCP or HTTP tool may still complete there),
    /// nothing else was started and nothing was recorded.
    #[error(
        "plan `{id}` was deleted while it ran: its running steps were stopped and nothing else was started"
    )]
    Deleted {
        /// The plan.
        id: String,
    },
    /// `resume` of a plan without an unfinished run.
    #[error("plan `{id}` has no run to resume ({why})")]
    NothingToResume {
        /// The plan.
        id: String,
        /// Why.
        why: String,
    },
}

/// One step in a [`RunReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    /// The step id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Where it ended.
    pub status: ExecStatus,
    /// Attempts made.
    pub attempts: u32,
    /// The result, if completed.
    pub result: Option<Value>,
    /// The last error.
    pub error: Option<String>,
    /// Why it was skipped or blocked.
    pub note: String,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// The plan.
    pub plan_id: String,
    /// The end state (`waiting` when it paused for people).
    pub state: RunState,
    /// Why it did not complete, if it did not.
    pub reason: Option<String>,
    /// The final answer, composed from the results.
    pub summary: String,
    /// Every step.
    pub steps: Vec<StepReport>,
    /// Replans made.
    pub replans: u32,
    /// The plan version the last steps came from.
    pub base_version: u32,
    /// Wall time of this node's part of the run.
    pub elapsed_ms: u64,
}

/// Runs stored plans. Cheap to clone.
#[derive(Clone)]
pub struct Executor {
    store: PlanStore,
    invokers: Invokers,
    catalog: Catalog,
    planner: Option<Arc<Planner>>,
    planners: Option<Arc<Planners>>,
    summary_model: Option<Arc<dyn LanguageModel>>,
    observer: Option<Observer>,
    on_document: Option<DocumentObserver>,
    config: Arc<ExecConfig>,
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
enum Entry {
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
    pub fn with_planners(mut self, planners: Arc<Planners>) -> Executor {
        self.planners = Some(planners);
        self
    }

    /// The model that writes the final summary (without one: the plain rendering).
    pub fn with_summary_model(mut self, model: Arc<dyn LanguageModel>) -> Executor {
        self.summary_model = Some(model);
        self
    }

    /// Receives every [`ExecEvent`].
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

    /// The store.
    pub fn store(&self) -> &PlanStore {
        &self.store
    }

    /// Starts a new run of the plan and runs it to its end (or until it waits for people).
    /// Steps the document already marks completed keep their result and do not run.
    pub async fn run(&self, plan_id: &str) -> Result<RunReport, ExecError> {
        self.start(plan_id).await?;
        self.drive(plan_id, Entry::Start).await
    }

    /// Records a new run of the plan without running it (a server starts it, then any node
    /// may [`Executor::join`]).
    pub async fn start(&self, plan_id: &str) -> Result<ExecRun, ExecError> {
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
            .exec_start(plan_id, stored.version(), &seeds, &self.config.node)
            .await?)
    }

    /// Continues an unfinished run (after a crash, or after people decided): completed steps
    /// are not run again; an attempt that was running when its node died is re-run with the
    /// same idempotency key once its lease expired.
    pub async fn resume(&self, plan_id: &str) -> Result<RunReport, ExecError> {
        match self.store.exec_run(plan_id).await? {
            None => Err(ExecError::NothingToResume {
                id: plan_id.to_owned(),
                why: "it never ran".into(),
            }),
            Some(run) if run.state.is_final() => Err(ExecError::NothingToResume {
                id: plan_id.to_owned(),
                why: format!("its last run is {}", run.state),
            }),
            Some(run) => {
                if run.state == RunState::Waiting {
                    self.store
                        .exec_set_run_state(plan_id, RunState::Running, None)
                        .await?;
                }
                self.drive(plan_id, Entry::Resume).await
            }
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

    async fn drive(&self, plan_id: &str, entry: Entry) -> Result<RunReport, ExecError> {
        let mut ctx = Ctx::load(self, plan_id).await?;
        ctx.emit(ExecEvent::RunStarted {
            plan_id: plan_id.to_owned(),
            base_version: ctx.base_version,
            resumed: entry != Entry::Start,
            steps: ctx
                .plan
                .steps
                .iter()
                .map(|s| (s.id.clone(), s.title.clone()))
                .collect(),
        });
        let renewer = spawn_renewer(
            self.store.clone(),
            plan_id.to_owned(),
            self.config.node.clone(),
            self.config.lease,
            ctx.running_ids.clone(),
        );
        let report = ctx.run_loop().await;
        drop(renewer);
        ctx.running.abort_all();
        ctx.sync.flush().await;
        report
    }
}

/// Aborts its task when dropped (also when the run's future is dropped mid-way).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews this node's leases on its running steps every third of the lease.
fn spawn_renewer(
    store: PlanStore,
    plan_id: String,
    node: String,
    lease: Duration,
    running: Arc<Mutex<HashSet<String>>>,
) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        let every = (lease / 3).max(Duration::from_millis(50));
        loop {
            tokio::time::sleep(every).await;
            let ids: Vec<String> = match running.lock() {
                Ok(set) => set.iter().cloned().collect(),
                Err(_) => return,
            };
            if !ids.is_empty()
                && let Err(err) = store.exec_renew(&plan_id, &ids, &node, lease).await
            {
                tracing::warn!("renewing leases of {plan_id}: {err}");
            }
        }
    }))
}

/// Why an attempt failed, as the scheduler sees it.
#[derive(Debug)]
struct Failure {
    message: String,
    retryable: bool,
    /// The plan expected something the results do not have: a replan trigger.
    contradiction: bool,
}

impl From<InvokeError> for Failure {
    fn from(err: InvokeError) -> Failure {
        Failure {
            message: err.message,
            retryable: err.retryable,
            contradiction: false,
        }
    }
}

impl From<RefError> for Failure {
    fn from(err: RefError) -> Failure {
        Failure {
            message: err.0,
            retryable: false,
            contradiction: true,
        }
    }
}

struct Finished {
    claim: Claim,
    outcome: Result<Value, Failure>,
    elapsed: Duration,
}

struct Ctx<'a> {
    ex: &'a Executor,
    /// The catalog of this plan: its own when it was made with one, or the executor's.
    catalog: Catalog,
    /// The planner that replans this plan, when the executor replans.
    planner: Option<Arc<Planner>>,
    plan_id: String,
    plan: Plan,
    base_version: u32,
    view: HashMap<String, ExecStep>,
    running: JoinSet<Finished>,
    running_ids: Arc<Mutex<HashSet<String>>>,
    approved: HashSet<String>,
    replans: u32,
    /// Failure fingerprint → the replan round it was first seen in.
    failures_seen: HashMap<String, u32>,
    /// Calls that failed past their policy.
    failed_calls: HashSet<String>,
    replan_wanted: Vec<String>,
    abort: Option<String>,
    stall: Option<String>,
    started: Instant,
    people_since: Option<Instant>,
    last_refresh: Instant,
    /// When a request to stop the run was last looked for (`None`: not yet).
    last_stop_check: Option<Instant>,
    sync: DocSync,
}

impl<'a> Ctx<'a> {
    async fn load(ex: &'a Executor, plan_id: &str) -> Result<Ctx<'a>, ExecError> {
        let run = ex
            .store
            .exec_run(plan_id)
            .await?
            .ok_or_else(|| ExecError::NothingToResume {
                id: plan_id.to_owned(),
                why: "it never ran".into(),
            })?;
        let stored = ex.store.get(plan_id).await?;
        let steps = ex.store.exec_steps(plan_id).await?;
        let (catalog, planner) = match (&ex.planners, &stored.review.catalog) {
            (Some(planners), Some(_)) => {
                let own = planners.for_review(&ex.store, &stored.review).await?;
                (own.catalog().clone(), ex.planner.as_ref().map(|_| own))
            }
            _ => (ex.catalog.clone(), ex.planner.clone()),
        };
        let mut ctx = Ctx {
            ex,
            catalog,
            planner,
            plan_id: plan_id.to_owned(),
            plan: stored.plan,
            base_version: run.base_version,
            view: steps.into_iter().map(|s| (s.step_id.clone(), s)).collect(),
            running: JoinSet::new(),
            running_ids: Arc::new(Mutex::new(HashSet::new())),
            approved: HashSet::new(),
            replans: run.replans,
            failures_seen: HashMap::new(),
            failed_calls: HashSet::new(),
            replan_wanted: Vec::new(),
            abort: None,
            stall: None,
            started: Instant::now(),
            people_since: None,
            last_refresh: Instant::now(),
            last_stop_check: None,
            sync: DocSync::spawn(
                ex.store.clone(),
                plan_id.to_owned(),
                format!("executor@{}", ex.config.node),
                ex.config.sync_document,
                ex.on_document.clone(),
            ),
        };
        ctx.restrict_to_view();
        Ok(ctx)
    }

    /// Steps of the document without a row (a document edited after the run started) are
    /// not part of the run.
    fn restrict_to_view(&mut self) {
        let view = &self.view;
        self.plan.steps.retain(|s| view.contains_key(&s.id));
    }

    fn emit(&self, event: ExecEvent) {
        if let Some(observer) = &self.ex.observer {
            observer(&self.plan_id, &event);
        }
    }

    fn status(&self, id: &str) -> Option<ExecStatus> {
        self.view.get(id).map(|s| s.status)
    }

    fn results(&self) -> HashMap<String, Value> {
        self.view
            .values()
            .filter(|s| s.status == ExecStatus::Completed)
            .map(|s| (s.step_id.clone(), s.result.clone().unwrap_or(Value::Null)))
            .collect()
    }

    async fn refresh(&mut self) -> Result<(), ExecError> {
        self.last_refresh = Instant::now();
        if let Some(run) = self.ex.store.exec_run(&self.plan_id).await?
            && run.base_version != self.base_version
        {
            // Another node replanned: take its plan.
            self.base_version = run.base_version;
            self.replans = run.replans;
            self.plan = self.ex.store.get(&self.plan_id).await?.plan;
        }
        let steps = self.ex.store.exec_steps(&self.plan_id).await?;
        let local: HashSet<String> = self
            .running_ids
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        for step in steps {
            // Our own running rows are ours to update.
            if !local.contains(&step.step_id) {
                self.view.insert(step.step_id.clone(), step);
            }
        }
        self.restrict_to_view();
        Ok(())
    }

    async fn set_status(
        &mut self,
        id: &str,
        status: ExecStatus,
        note: &str,
    ) -> Result<bool, ExecError> {
        let changed = self
            .ex
            .store
            .exec_set_status(&self.plan_id, id, status, note)
            .await?;
        if changed {
            if let Some(row) = self.view.get_mut(id) {
                row.status = status;
                row.note = note.to_owned();
            }
            self.sync.step(id, status, None, None, note);
            if matches!(
                status,
                ExecStatus::Skipped | ExecStatus::Blocked | ExecStatus::Failed
            ) {
                self.emit(ExecEvent::StepEnded {
                    step_id: id.to_owned(),
                    status,
                    reason: note.to_owned(),
                });
            }
        }
        Ok(changed)
    }

    async fn run_loop(&mut self) -> Result<RunReport, ExecError> {
        for _turn in 0..MAX_TURNS {
            if self.started.elapsed() > self.ex.config.max_run_time && self.abort.is_none() {
                self.abort = Some(format!(
                    "the run took longer than {} s",
                    self.ex.config.max_run_time.as_secs()
                ));
            }
            self.check_stop().await?;
            if self.abort.is_some() || self.stall.is_some() {
                return self.finish().await;
            }
            self.skip_descendants().await?;
            self.apply_decisions().await?;
            if self.abort.is_some() {
                continue;
            }
            let ready = self.ready().await?;
            let free = self
                .ex
                .config
                .concurrency
                .saturating_sub(self.running.len());
            if free > 0 && !ready.is_empty() && self.replan_wanted.is_empty() {
                self.claim_and_start(&ready, free).await?;
            }
            if self.running.is_empty() {
                if self.all_terminal() || !self.replan_wanted.is_empty() {
                    if !self.replan_wanted.is_empty()
                        && self.stall.is_none()
                        && self.replan().await?
                    {
                        continue;
                    }
                    return self.finish().await;
                }
                // Nothing runs here: wait for backoffs, other nodes or people.
                if let Some(report) = self.idle().await? {
                    return Ok(report);
                }
                continue;
            }
            self.people_since = None;
            let next =
                tokio::time::timeout(self.ex.config.poll_interval, self.running.join_next()).await;
            if let Ok(Some(joined)) = next {
                self.on_joined(joined).await?;
                // Take everything else that ended meanwhile in the same turn.
                while let Some(Some(more)) =
                    futures::FutureExt::now_or_never(self.running.join_next())
                {
                    self.on_joined(more).await?;
                }
            }
            if self.others_active() && self.last_refresh.elapsed() >= self.ex.config.poll_interval {
                self.refresh().await?;
            }
        }
        self.abort = Some("the scheduler reached its turn limit".into());
        self.finish().await
    }

    /// Looks (at most once per poll interval) for a request to stop the run
    /// (`PlanStore::request_stop`), which aborts the run, and for the plan's deletion.
    async fn check_stop(&mut self) -> Result<(), ExecError> {
        if self.abort.is_some()
            || self
                .last_stop_check
                .is_some_and(|at| at.elapsed() < self.ex.config.poll_interval)
        {
            return Ok(());
        }
        self.last_stop_check = Some(Instant::now());
        match self.ex.store.run_signal(&self.plan_id).await? {
            RunSignal::Continue => Ok(()),
            RunSignal::Stop(stop) => {
                self.abort = Some(if stop.note.is_empty() {
                    format!("stopped by {}", stop.actor)
                } else {
                    format!("stopped by {}: {}", stop.actor, stop.note)
                });
                Ok(())
            }
            RunSignal::Gone => Err(self.gone().await),
        }
    }

    /// The plan was deleted while it ran: stops the running steps (their tasks are dropped)
    /// and records nothing, there is nowhere to.
    async fn gone(&mut self) -> ExecError {
        self.stop_running().await;
        ExecError::Deleted {
            id: self.plan_id.clone(),
        }
    }

    /// Stops this process's running steps (their tasks are dropped: a command tool's process
    /// is killed) and returns their ids.
    async fn stop_running(&mut self) -> Vec<String> {
        self.running.abort_all();
        while self.running.join_next().await.is_some() {}
        self.running_ids
            .lock()
            .map(|mut ids| ids.drain().collect())
            .unwrap_or_default()
    }

    fn others_active(&self) -> bool {
        self.view.values().any(|s| {
            s.status == ExecStatus::Running
                && s.lease_owner.as_deref() != Some(self.ex.config.node.as_str())
        })
    }

    fn all_terminal(&self) -> bool {
        self.plan
            .steps
            .iter()
            .all(|s| self.status(&s.id).is_none_or(ExecStatus::is_terminal))
    }

    async fn on_joined(
        &mut self,
        joined: Result<Finished, tokio::task::JoinError>,
    ) -> Result<(), ExecError> {
        match joined {
            Ok(finished) => self.on_finished(finished).await,
            // A panicking invoker: its lease expires and the step is taken over; nothing to
            // record here (the claim is lost with the task).
            Err(err) => {
                tracing::error!("an invoker task ended abnormally: {err}");
                Ok(())
            }
        }
    }

    /// Skips steps whose dependency failed or was skipped.
    async fn skip_descendants(&mut self) -> Result<(), ExecError> {
        if !self.replan_wanted.is_empty()
            || !self
                .view
                .values()
                .any(|s| matches!(s.status, ExecStatus::Failed | ExecStatus::Skipped))
        {
            return Ok(());
        }
        for _ in 0..self.plan.steps.len().max(1) {
            // Read first (no clones of the steps), then write.
            let to_skip: Vec<(String, String)> = self
                .plan
                .steps
                .iter()
                .filter(|step| {
                    matches!(
                        self.status(&step.id),
                        Some(ExecStatus::Pending | ExecStatus::Blocked | ExecStatus::RetryWait)
                    )
                })
                .filter_map(|step| {
                    step.depends_on
                        .iter()
                        .find_map(|dep| match self.status(dep) {
                            Some(s @ (ExecStatus::Failed | ExecStatus::Skipped)) => {
                                Some((step.id.clone(), format!("dependency {dep} {}", s.as_str())))
                            }
                            _ => None,
                        })
                })
                .collect();
            let mut changed = false;
            for (id, note) in to_skip {
                changed |= self.set_status(&id, ExecStatus::Skipped, &note).await?;
            }
            if !changed {
                break;
            }
        }
        Ok(())
    }

    /// Applies people's decisions about blocked steps.
    async fn apply_decisions(&mut self) -> Result<(), ExecError> {
        let any_blocked = self.view.values().any(|s| s.status == ExecStatus::Blocked);
        if !any_blocked {
            return Ok(());
        }
        let decisions = self.ex.store.step_decisions(&self.plan_id).await?;
        for decision in decisions {
            if self.status(&decision.step_id) != Some(ExecStatus::Blocked) {
                continue;
            }
            let who = if decision.note.is_empty() {
                format!("by {}", decision.actor)
            } else {
                format!("by {}: {}", decision.actor, decision.note)
            };
            let id = decision.step_id.clone();
            match decision.verdict {
                StepVerdict::Approve => {
                    self.approved.insert(id.clone());
                    self.set_status(&id, ExecStatus::Pending, &format!("approved {who}"))
                        .await?;
                }
                StepVerdict::Retry => {
                    self.ex
                        .store
                        .consume_step_decision(&self.plan_id, &id)
                        .await?;
                    self.set_status(&id, ExecStatus::Pending, &format!("retry {who}"))
                        .await?;
                }
                StepVerdict::Deny | StepVerdict::Skip => {
                    let what = if decision.verdict == StepVerdict::Deny {
                        "denied"
                    } else {
                        "skipped"
                    };
                    self.set_status(&id, ExecStatus::Skipped, &format!("{what} {who}"))
                        .await?;
                }
                StepVerdict::Abort => {
                    self.set_status(&id, ExecStatus::Failed, &format!("aborted {who}"))
                        .await?;
                    self.abort = Some(format!("step {id} aborted {who}"));
                }
            }
        }
        Ok(())
    }

    /// Steps that may be claimed now, in plan order; gated ones without approval get blocked.
    async fn ready(&mut self) -> Result<Vec<String>, ExecError> {
        let now = Utc::now();
        let mut ready = Vec::new();
        let mut decisions: Option<Vec<plansmith_store::StepDecision>> = None;
        let candidates: Vec<usize> = self
            .plan
            .steps
            .iter()
            .enumerate()
            .filter(|(_, step)| {
                self.view.get(&step.id).is_some_and(|row| match row.status {
                    ExecStatus::Pending => true,
                    ExecStatus::RetryWait => row.not_before.is_none_or(|t| t <= now),
                    ExecStatus::Running => {
                        row.lease_owner.as_deref() != Some(self.ex.config.node.as_str())
                            && row.lease_until.is_some_and(|t| t < now)
                    }
                    _ => false,
                })
            })
            .map(|(idx, _)| idx)
            .collect();
        for idx in candidates {
            let Some(step) = self.plan.steps.get(idx).cloned() else {
                continue;
            };
            let step = &step;
            let Some(row) = self.view.get(&step.id) else {
                continue;
            };
            let claimable = match row.status {
                ExecStatus::Pending => true,
                ExecStatus::RetryWait => row.not_before.is_none_or(|t| t <= now),
                ExecStatus::Running => {
                    row.lease_owner.as_deref() != Some(self.ex.config.node.as_str())
                        && row.lease_until.is_some_and(|t| t < now)
                }
                _ => false,
            };
            if !claimable
                || !step
                    .depends_on
                    .iter()
                    .all(|d| self.status(d) == Some(ExecStatus::Completed))
            {
                continue;
            }
            if step.schedule.as_ref().is_some_and(|s| s.is_recurring()) {
                self.set_status(
                    &step.id,
                    ExecStatus::Skipped,
                    "recurring schedules are not run by the executor",
                )
                .await?;
                continue;
            }
            let gated = !self.ex.config.approve_all
                && row.status == ExecStatus::Pending
                && !self.approved.contains(&step.id)
                && needs_approval(&self.plan, &step.id, &self.ex.config.require_approval);
            if gated {
                if decisions.is_none() {
                    decisions = Some(self.ex.store.step_decisions(&self.plan_id).await?);
                }
                let decided = decisions
                    .as_ref()
                    .and_then(|d| d.iter().find(|d| d.step_id == step.id))
                    .map(|d| d.verdict);
                match decided {
                    Some(StepVerdict::Approve) => {
                        self.approved.insert(step.id.clone());
                    }
                    _ => {
                        // Blocked; a recorded denial is applied on the next turn.
                        self.set_status(&step.id, ExecStatus::Blocked, "waiting for approval")
                            .await?;
                        continue;
                    }
                }
            }
            ready.push(step.id.clone());
        }
        Ok(ready)
    }

    async fn claim_and_start(&mut self, ready: &[String], free: usize) -> Result<(), ExecError> {
        let claims = self
            .ex
            .store
            .exec_claim(
                &self.plan_id,
                self.base_version,
                ready,
                &self.ex.config.node,
                self.ex.config.lease,
                free,
            )
            .await?;
        if claims.len() < ready.len().min(free) {
            // Someone else holds some of them: look again soon.
            self.refresh().await?;
        }
        let results = self.results();
        for claim in claims {
            let Some(step) = self.plan.step(&claim.step_id).cloned() else {
                continue;
            };
            if let Some(row) = self.view.get_mut(&claim.step_id) {
                row.status = ExecStatus::Running;
                row.attempt = claim.attempt;
                row.lease_owner = Some(self.ex.config.node.clone());
            }
            if let Ok(mut ids) = self.running_ids.lock() {
                ids.insert(claim.step_id.clone());
            }
            self.sync.step(
                &claim.step_id,
                ExecStatus::Running,
                None,
                None,
                &format!("attempt {}", claim.attempt),
            );
            self.emit(ExecEvent::StepStarted {
                step_id: claim.step_id.clone(),
                attempt: claim.attempt,
                idempotency_key: claim.idempotency_key.clone(),
                rerun: claim.rerun,
            });
            let inputs: BTreeMap<String, Value> = step
                .depends_on
                .iter()
                .filter_map(|d| results.get(d).map(|r| (d.clone(), r.clone())))
                .collect();
            let prepared = self.prepare(&step, &results);
            let invokers = self.ex.invokers.clone();
            let output_schema = match &step.action {
                Action::Tool { name, .. } => self
                    .catalog
                    .tool(name)
                    .and_then(|t| t.tool.output_schema.clone()),
                _ => None,
            };
            let call = Call {
                plan_id: self.plan_id.clone(),
                step_id: step.id.clone(),
                title: step.title.clone(),
                description: step.description.clone(),
                attempt: claim.attempt,
                idempotency_key: claim.idempotency_key.clone(),
                action: step.action.clone(),
                goal: self.plan.goal.clone(),
                inputs,
            };
            let reporter = Reporter {
                observer: self.ex.observer.clone(),
                plan_id: self.plan_id.clone(),
                step_id: step.id.clone(),
                attempt: claim.attempt,
                last: Mutex::new(None),
            };
            self.running.spawn(async move {
                let begun = Instant::now();
                let outcome = match prepared {
                    Err(failure) => Err(failure),
                    Ok(action) => {
                        let call = Call { action, ..call };
                        let report = |progress: CallProgress| reporter.report(progress);
                        match invokers.invoke_reporting(&call, &report).await {
                            Ok(value) => match output_schema {
                                Some(schema) => check_output(&schema, &value)
                                    .map(|()| value)
                                    .map_err(|message| Failure {
                                        message,
                                        retryable: false,
                                        contradiction: true,
                                    }),
                                None => Ok(value),
                            },
                            Err(err) => Err(Failure::from(err)),
                        }
                    }
                };
                Finished {
                    claim,
                    outcome,
                    elapsed: begun.elapsed(),
                }
            });
        }
        Ok(())
    }

    /// The step's action with `$ref`s filled and, for catalog tools, checked arguments.
    fn prepare(
        &self,
        step: &plansmith_core::Step,
        results: &HashMap<String, Value>,
    ) -> Result<Action, Failure> {
        match &step.action {
            Action::Tool { name, arguments } => {
                let resolved = resolve(&Value::Object(arguments.clone()), results)?;
                if let Some(entry) = self.catalog.tool(name) {
                    let problems: Vec<String> = entry
                        .validator()
                        .iter_errors(&resolved)
                        .take(3)
                        .map(|e| format!("{e} at `{}`", e.instance_path()))
                        .collect();
                    if !problems.is_empty() {
                        return Err(Failure {
                            message: format!(
                                "arguments of `{name}` do not fit its input schema: {}",
                                problems.join("; ")
                            ),
                            retryable: false,
                            contradiction: true,
                        });
                    }
                }
                Ok(Action::Tool {
                    name: name.clone(),
                    arguments: resolved.as_object().cloned().unwrap_or_default(),
                })
            }
            other => Ok(other.clone()),
        }
    }

    async fn on_finished(&mut self, finished: Finished) -> Result<(), ExecError> {
        let Finished {
            claim,
            outcome,
            elapsed,
        } = finished;
        if let Ok(mut ids) = self.running_ids.lock() {
            ids.remove(&claim.step_id);
        }
        let step = self.plan.step(&claim.step_id).cloned();
        let Some(step) = step else {
            return Ok(());
        };
        let (end, event) = match outcome {
            Ok(value) => {
                let event = ExecEvent::StepCompleted {
                    step_id: claim.step_id.clone(),
                    attempt: claim.attempt,
                    elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                    preview: preview(&value, 200),
                };
                (StepEnd::Completed(value), event)
            }
            Err(failure) => self.on_failure(&step, &claim, failure),
        };
        let note = match &end {
            StepEnd::Completed(_) | StepEnd::Failed(_) => String::new(),
            StepEnd::Retry { .. } => format!("attempt {} failed", claim.attempt),
            StepEnd::Skipped(_) => "skipped by policy".to_owned(),
            StepEnd::Blocked(_) => "failed: decide retry, skip or abort".to_owned(),
        };
        self.record_end(&claim, end, note, event).await
    }

    /// Records how this node's attempt ended (fenced by its lease), then tells the view, the
    /// document and the observers (`event`). A write refused because the plan was deleted
    /// meanwhile ends the run ([`ExecError::Deleted`]); one refused because another node took
    /// the step over is only logged.
    async fn record_end(
        &mut self,
        claim: &Claim,
        end: StepEnd,
        note: String,
        event: ExecEvent,
    ) -> Result<(), ExecError> {
        let held = self
            .ex
            .store
            .exec_finish(&self.plan_id, claim, &self.ex.config.node, &end, &note)
            .await?;
        if !held {
            // Its row is gone with the plan when the plan was deleted while the step ran.
            if matches!(
                self.ex.store.run_signal(&self.plan_id).await?,
                RunSignal::Gone
            ) {
                return Err(self.gone().await);
            }
            tracing::warn!(
                "step {} of {}: lease lost before the attempt ended; another node owns it",
                claim.step_id,
                self.plan_id
            );
            self.refresh().await?;
            return Ok(());
        }
        let (status, result, error) = match &end {
            StepEnd::Completed(value) => (ExecStatus::Completed, Some(value.clone()), None),
            StepEnd::Retry { error, not_before } => {
                if let Some(row) = self.view.get_mut(&claim.step_id) {
                    row.not_before = Some(*not_before);
                }
                (ExecStatus::RetryWait, None, Some(error.clone()))
            }
            StepEnd::Failed(error) => (ExecStatus::Failed, None, Some(error.clone())),
            StepEnd::Skipped(error) => (ExecStatus::Skipped, None, Some(error.clone())),
            StepEnd::Blocked(error) => (ExecStatus::Blocked, None, Some(error.clone())),
        };
        if let Some(row) = self.view.get_mut(&claim.step_id) {
            row.status = status;
            row.result = result.clone();
            row.error = error.clone();
            row.note = note.clone();
            row.lease_owner = None;
            row.lease_until = None;
        }
        self.sync.step(&claim.step_id, status, result, error, &note);
        self.emit(event);
        Ok(())
    }

    /// Applies the step's policy to a failed attempt: the end to record and the event.
    fn on_failure(
        &mut self,
        step: &plansmith_core::Step,
        claim: &Claim,
        failure: Failure,
    ) -> (StepEnd, ExecEvent) {
        let (policy, problems) = policy_for(&self.plan, &step.id, self.ex.config.policy);
        for problem in problems {
            tracing::warn!("plan {}: ignoring {problem}", self.plan_id);
        }
        if failure.retryable && policy.may_retry(claim.attempt) {
            let delay = policy.delay(claim.attempt + 1);
            let not_before = Utc::now()
                + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::seconds(1));
            return (
                StepEnd::Retry {
                    error: failure.message.clone(),
                    not_before,
                },
                ExecEvent::StepRetrying {
                    step_id: step.id.clone(),
                    attempt: claim.attempt,
                    error: failure.message,
                    delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                },
            );
        }
        let error = format!(
            "{} (attempt {} of {})",
            failure.message,
            claim.attempt,
            policy.retries + 1
        );
        let fingerprint = failure_fingerprint(&step.action, &failure.message);
        if let Some(round) = self.failures_seen.get(&fingerprint)
            && *round < self.replans
        {
            self.stall = Some(format!(
                "stalled: step {} failed the same way as before the replan ({})",
                step.id, failure.message
            ));
        }
        self.failures_seen
            .entry(fingerprint)
            .or_insert(self.replans);
        self.failed_calls.insert(call_fingerprint(&step.action));
        let can_replan = self.planner.is_some() && self.replans < self.ex.config.max_replans;
        let action = if failure.contradiction && can_replan {
            OnFailure::Replan
        } else {
            policy.on_failure
        };
        let ended = |status: ExecStatus, reason: &str| ExecEvent::StepEnded {
            step_id: step.id.clone(),
            status,
            reason: reason.to_owned(),
        };
        match action {
            OnFailure::Skip => (
                StepEnd::Skipped(error.clone()),
                ended(ExecStatus::Skipped, &error),
            ),
            OnFailure::Ask => (
                StepEnd::Blocked(error.clone()),
                ended(ExecStatus::Blocked, &error),
            ),
            OnFailure::Abort => {
                self.abort = Some(format!(
                    "step {} failed under the abort policy: {error}",
                    step.id
                ));
                (
                    StepEnd::Failed(error.clone()),
                    ended(ExecStatus::Failed, &error),
                )
            }
            OnFailure::Replan if can_replan => {
                self.replan_wanted
                    .push(format!("step {} ({}) failed: {error}", step.id, step.title));
                (
                    StepEnd::Failed(error.clone()),
                    ended(ExecStatus::Failed, &error),
                )
            }
            OnFailure::Replan | OnFailure::Fail => (
                StepEnd::Failed(error.clone()),
                ended(ExecStatus::Failed, &error),
            ),
        }
    }

    /// Nothing runs on this node: waits for a backoff, other nodes or people. `Some(report)`
    /// when the run pauses waiting for people.
    async fn idle(&mut self) -> Result<Option<RunReport>, ExecError> {
        let now = Utc::now();
        let waits_on_people = self.view.values().any(|s| s.status == ExecStatus::Blocked);
        let progressing = self.view.values().any(|s| {
            matches!(s.status, ExecStatus::Running | ExecStatus::RetryWait)
                || (s.status == ExecStatus::Pending
                    && self.plan.step(&s.step_id).is_some_and(|step| {
                        step.depends_on
                            .iter()
                            .all(|d| self.status(d) != Some(ExecStatus::Failed))
                    }))
        });
        let only_people = waits_on_people
            && !self.view.values().any(|s| {
                matches!(s.status, ExecStatus::Running | ExecStatus::RetryWait)
                    || (s.status == ExecStatus::Pending && self.deps_met(&s.step_id))
            });
        if only_people {
            let since = *self.people_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= self.ex.config.wait_for_people {
                return self.pause().await.map(Some);
            }
        } else if !progressing {
            self.abort = Some("no step can progress".into());
            return Ok(None);
        }
        let next_retry = self
            .view
            .values()
            .filter(|s| s.status == ExecStatus::RetryWait)
            .filter_map(|s| s.not_before)
            .min()
            .map(|t| (t - now).to_std().unwrap_or(Duration::ZERO));
        let wait = next_retry.map_or(self.ex.config.poll_interval, |d| {
            d.min(self.ex.config.poll_interval)
        });
        tokio::time::sleep(wait).await;
        self.refresh().await?;
        Ok(None)
    }

    fn deps_met(&self, id: &str) -> bool {
        self.plan.step(id).is_some_and(|s| {
            s.depends_on
                .iter()
                .all(|d| self.status(d) == Some(ExecStatus::Completed))
        })
    }

    /// Replans the rest of the plan from the observations. False when it could not (the run
    /// then ends failed or stalled).
    async fn replan(&mut self) -> Result<bool, ExecError> {
        let Some(planner) = self.planner.clone() else {
            return Ok(false);
        };
        if !self
            .ex
            .store
            .exec_claim_run(&self.plan_id, &self.ex.config.node, self.ex.config.lease)
            .await?
        {
            // Another node decides; follow it.
            tokio::time::sleep(self.ex.config.poll_interval).await;
            self.refresh().await?;
            self.replan_wanted.clear();
            return Ok(true);
        }
        self.sync.flush().await;
        let observations = self.observations();
        let stored = self.ex.store.get(&self.plan_id).await?;
        let mut request = stored
            .review
            .request
            .clone()
            .unwrap_or_else(|| PlanRequest::new(self.plan.goal.clone()));
        let mut previous = self.plan.clone();
        for step in &mut previous.steps {
            if let Some(row) = self.view.get(&step.id) {
                step.status = row.status.step_status();
                step.result = row.result.clone();
                step.error = row.error.clone();
            }
        }
        request.feedback = Some(Feedback {
            previous: Some(previous),
            text: Some(
                "Some steps failed while the plan ran. The completed steps are kept with \
                 their results; plan only the remaining work, referring to completed steps \
                 by their ids."
                    .into(),
            ),
            diagnostics: Vec::new(),
            observations: observations.clone(),
        });
        request.options.iteration = request.options.iteration.saturating_add(1);
        let reason_prefix = self.replan_wanted.join("; ");
        self.replan_wanted.clear();
        let outcome = match planner.plan(&request).await {
            // A replan that lost steps would run less than the request asks, unreviewed.
            Ok(Outcome {
                status: OutcomeStatus::Incomplete { reason, .. },
                ..
            }) => {
                self.abort = Some(format!(
                    "{reason_prefix}; the replanned plan is incomplete: {reason}"
                ));
                self.release_run().await?;
                return Ok(false);
            }
            Ok(outcome) if !outcome.plan.steps.is_empty() => outcome,
            Ok(_) => {
                self.abort = Some(format!("{reason_prefix}; the replan produced no steps"));
                self.release_run().await?;
                return Ok(false);
            }
            Err(err) => {
                self.abort = Some(format!("{reason_prefix}; replanning failed: {err}"));
                self.release_run().await?;
                return Ok(false);
            }
        };
        let results = self.results();
        let merged = merge(&self.plan, &results, outcome.plan);
        let (checked, diagnostics) =
            validate(merged.plan.clone(), planner.catalog(), &request.options);
        if let Some(error) = diagnostics.iter().find(|d| d.is_error()) {
            self.abort = Some(format!(
                "{reason_prefix}; the replanned plan is invalid: {error}"
            ));
            self.release_run().await?;
            return Ok(false);
        }
        // Stall: the new plan repeats a call that already failed.
        if let Some(step) = checked.steps.iter().find(|s| {
            merged.added.contains(&s.id) && self.failed_calls.contains(&call_fingerprint(&s.action))
        }) {
            self.stall = Some(format!(
                "stalled: the replanned plan repeats the failed call of step {} ({})",
                step.id, step.title
            ));
            self.release_run().await?;
            return Ok(false);
        }
        let written = self
            .ex
            .store
            .write(Change {
                expected_version: stored.version(),
                plan: checked,
                state: stored.state,
                review: stored.review.clone(),
                trigger: Trigger::Replan,
                actor: format!("executor@{}", self.ex.config.node),
            })
            .await?;
        let seeds: Vec<StepSeed> = written
            .plan
            .steps
            .iter()
            .map(|s| StepSeed {
                step_id: s.id.clone(),
                completed: results.get(&s.id).cloned(),
            })
            .collect();
        self.ex
            .store
            .exec_replan(&self.plan_id, written.version(), &seeds)
            .await?;
        self.release_run().await?;
        self.replans += 1;
        self.base_version = written.version();
        self.plan = written.plan;
        self.approved.clear();
        self.view = self
            .ex
            .store
            .exec_steps(&self.plan_id)
            .await?
            .into_iter()
            .map(|s| (s.step_id.clone(), s))
            .collect();
        self.restrict_to_view();
        self.emit(ExecEvent::Replanned {
            version: self.base_version,
            kept: merged.kept,
            added: merged.added,
            steps: self
                .plan
                .steps
                .iter()
                .map(|s| (s.id.clone(), s.title.clone()))
                .collect(),
            replans: self.replans,
        });
        Ok(true)
    }

    async fn release_run(&self) -> Result<(), ExecError> {
        Ok(self
            .ex
            .store
            .exec_release_run(&self.plan_id, &self.ex.config.node)
            .await?)
    }

    fn observations(&self) -> Vec<String> {
        self.plan
            .steps
            .iter()
            .filter_map(|step| {
                let row = self.view.get(&step.id)?;
                let what = match (&step.action, row.status) {
                    (_, ExecStatus::Completed) => format!(
                        "completed; result: {}",
                        preview(row.result.as_ref().unwrap_or(&Value::Null), 400)
                    ),
                    (_, ExecStatus::Failed) => format!(
                        "failed after {} attempt(s): {}",
                        row.attempt,
                        row.error.as_deref().unwrap_or("unknown error")
                    ),
                    (_, status) => format!("{} {}", status.as_str(), row.note),
                };
                Some(format!("step {} \"{}\": {what}", step.id, step.title))
            })
            .collect()
    }

    /// The run pauses: only people can unblock it.
    async fn pause(&mut self) -> Result<RunReport, ExecError> {
        self.sync.flush().await;
        let blocked: Vec<String> = self
            .view
            .values()
            .filter(|s| s.status == ExecStatus::Blocked)
            .map(|s| s.step_id.clone())
            .collect();
        let reason = format!("waiting for a decision on {}", blocked.join(", "));
        let report = self.report(RunState::Waiting, Some(reason), String::new());
        let value = serde_json::to_value(&report).unwrap_or(Value::Null);
        self.ex
            .store
            .exec_set_run_state(&self.plan_id, RunState::Waiting, Some(&value))
            .await?;
        self.emit(ExecEvent::RunFinished {
            state: RunState::Waiting,
            reason: report.reason.clone(),
            summary: String::new(),
            counts: self.counts(),
        });
        Ok(report)
    }

    /// Ends the run: stops what runs, marks what is left, writes the summary and the state.
    async fn finish(&mut self) -> Result<RunReport, ExecError> {
        if self.abort.is_some() || self.stall.is_some() {
            let running = self.stop_running().await;
            let why = self
                .stall
                .clone()
                .or_else(|| self.abort.clone())
                .unwrap_or_default();
            for id in running {
                // Our own running attempt, stopped: record it as failed.
                if let Some(row) = self.view.get(&id) {
                    let claim = Claim {
                        step_id: id.clone(),
                        attempt: row.attempt,
                        idempotency_key: plansmith_store::idempotency_key(
                            &self.plan_id,
                            self.base_version,
                            &id,
                            row.attempt,
                        ),
                        rerun: false,
                    };
                    // Recorded as any attempt's end, so the document and the watchers
                    // learn it too (the step no longer shows as running).
                    let error = format!("stopped: {why}");
                    let event = ExecEvent::StepEnded {
                        step_id: id.clone(),
                        status: ExecStatus::Skipped,
                        reason: error.clone(),
                    };
                    self.record_end(&claim, StepEnd::Skipped(error), "stopped".into(), event)
                        .await?;
                }
            }
            self.refresh().await?;
            let open: Vec<String> = self
                .view
                .values()
                .filter(|s| !s.status.is_terminal())
                .map(|s| s.step_id.clone())
                .collect();
            for id in open {
                self.set_status(&id, ExecStatus::Skipped, &format!("not run: {why}"))
                    .await?;
            }
        }
        // Only one node finishes a run; the others read its report.
        let mut acquired = false;
        for _ in 0..600 {
            if self
                .ex
                .store
                .exec_claim_run(&self.plan_id, &self.ex.config.node, self.ex.config.lease)
                .await?
            {
                acquired = true;
                break;
            }
            match self.ex.store.exec_run(&self.plan_id).await? {
                Some(run) if run.state.is_final() => break,
                Some(_) => {}
                None => return Err(self.gone().await),
            }
            tokio::time::sleep(self.ex.config.poll_interval).await;
        }
        self.refresh().await?;
        let state = if self.stall.is_some() {
            RunState::Stalled
        } else if self.abort.is_some() {
            RunState::Aborted
        } else if self.view.values().any(|s| s.status == ExecStatus::Failed) {
            RunState::Failed
        } else {
            RunState::Completed
        };
        let reason = self
            .stall
            .clone()
            .or_else(|| self.abort.clone())
            .or_else(|| {
                (state == RunState::Failed).then(|| {
                    let failed: Vec<&str> = self
                        .view
                        .values()
                        .filter(|s| s.status == ExecStatus::Failed)
                        .map(|s| s.step_id.as_str())
                        .collect();
                    format!("failed step(s): {}", failed.join(", "))
                })
            });
        if !acquired
            && let Some(run) = self.ex.store.exec_run(&self.plan_id).await?
            && run.state.is_final()
            && let Some(outcome) = run.outcome
        {
            let summary = outcome
                .get("summary")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let reason = outcome
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_owned);
            return Ok(self.report(run.state, reason, summary));
        }
        let rows: Vec<ExecStep> = self.ordered_rows();
        let summary = summary::compose(self.ex.summary_model.as_ref(), &self.plan, &rows).await;
        let report = self.report(state, reason, summary);
        let value = serde_json::to_value(&report).unwrap_or(Value::Null);
        // The plan document first, the run's end state second: a node dying between the two
        // leaves the run `running`, so another node finishes it and writes both. (The other
        // order once left a run ended in the log but not in the plan, which nobody repaired.)
        self.sync.meta(
            "last_run",
            json!({"state": state, "reason": report.reason, "summary": report.summary}),
        );
        self.sync.flush().await;
        let first = self
            .ex
            .store
            .exec_set_run_state(&self.plan_id, state, Some(&value))
            .await?;
        self.release_run().await?;
        if first {
            self.emit(ExecEvent::RunFinished {
                state,
                reason: report.reason.clone(),
                summary: report.summary.clone(),
                counts: self.counts(),
            });
        }
        Ok(report)
    }

    fn ordered_rows(&self) -> Vec<ExecStep> {
        self.plan
            .steps
            .iter()
            .filter_map(|s| self.view.get(&s.id).cloned())
            .collect()
    }

    fn counts(&self) -> Value {
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for row in self.view.values() {
            *counts.entry(row.status.as_str()).or_default() += 1;
        }
        json!(counts)
    }

    fn report(&self, state: RunState, reason: Option<String>, summary: String) -> RunReport {
        RunReport {
            plan_id: self.plan_id.clone(),
            state,
            reason,
            summary,
            steps: self
                .plan
                .steps
                .iter()
                .filter_map(|step| {
                    let row = self.view.get(&step.id)?;
                    Some(StepReport {
                        id: step.id.clone(),
                        title: step.title.clone(),
                        status: row.status,
                        attempts: row.attempt,
                        result: row.result.clone(),
                        error: row.error.clone(),
                        note: row.note.clone(),
                    })
                })
                .collect(),
            replans: self.replans,
            base_version: self.base_version,
            elapsed_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// A change to the plan document: a step's status or a metadata entry.
enum SyncMsg {
    Step {
        id: String,
        status: ExecStatus,
        result: Option<Value>,
        error: Option<String>,
        note: String,
    },
    Meta(String, Value),
    Flush(oneshot::Sender<()>),
}

/// Writes step statuses and results into the plan document (trigger `step_update`) on a
/// background task, coalescing: changes that arrive while a write is in flight go into the
/// next version together. Conflicting writers are retried on the fresh version.
struct DocSync {
    sender: Option<mpsc::UnboundedSender<SyncMsg>>,
}

/// Attempts of one document write against concurrent writers.
const SYNC_ATTEMPTS: u32 = 16;

impl DocSync {
    fn spawn(
        store: PlanStore,
        plan_id: String,
        actor: String,
        enabled: bool,
        on_document: Option<DocumentObserver>,
    ) -> DocSync {
        if !enabled {
            return DocSync { sender: None };
        }
        let (sender, mut receiver) = mpsc::unbounded_channel::<SyncMsg>();
        tokio::spawn(async move {
            while let Some(first) = receiver.recv().await {
                let mut batch = vec![first];
                while let Ok(more) = receiver.try_recv() {
                    batch.push(more);
                }
                let mut waiters = Vec::new();
                let mut steps: Vec<SyncMsg> = Vec::new();
                for msg in batch {
                    match msg {
                        SyncMsg::Flush(done) => waiters.push(done),
                        other => steps.push(other),
                    }
                }
                if !steps.is_empty() {
                    match write_doc(&store, &plan_id, &actor, &steps).await {
                        Ok(stored) => {
                            if let Some(observer) = &on_document {
                                observer(&stored);
                            }
                        }
                        Err(err) => tracing::warn!(
                            "plan {plan_id}: step statuses not written to the document: {err}"
                        ),
                    }
                }
                for done in waiters {
                    let _ = done.send(());
                }
            }
        });
        DocSync {
            sender: Some(sender),
        }
    }

    fn step(
        &self,
        id: &str,
        status: ExecStatus,
        result: Option<Value>,
        error: Option<String>,
        note: &str,
    ) {
        if let Some(sender) = &self.sender {
            let _ = sender.send(SyncMsg::Step {
                id: id.to_owned(),
                status,
                result,
                error,
                note: note.to_owned(),
            });
        }
    }

    fn meta(&self, key: &str, value: Value) {
        if let Some(sender) = &self.sender {
            let _ = sender.send(SyncMsg::Meta(key.to_owned(), value));
        }
    }

    async fn flush(&self) {
        if let Some(sender) = &self.sender {
            let (done, wait) = oneshot::channel();
            if sender.send(SyncMsg::Flush(done)).is_ok() {
                let _ = wait.await;
            }
        }
    }
}

async fn write_doc(
    store: &PlanStore,
    plan_id: &str,
    actor: &str,
    changes: &[SyncMsg],
) -> Result<StoredPlan, StoreError> {
    let mut last = None;
    for _ in 0..SYNC_ATTEMPTS {
        let current = store.get(plan_id).await?;
        let mut plan = current.plan.clone();
        for change in changes {
            match change {
                SyncMsg::Step {
                    id,
                    status,
                    result,
                    error,
                    note,
                } => {
                    if let Some(step) = plan.steps.iter_mut().find(|s| &s.id == id) {
                        step.status = status.step_status();
                        if result.is_some() || *status != ExecStatus::Completed {
                            step.result = result.clone();
                        }
                        step.error = error.clone();
                        step.notes = note.clone();
                    }
                }
                SyncMsg::Meta(key, value) => {
                    plan.metadata.insert(key.clone(), value.clone());
                }
                SyncMsg::Flush(_) => {}
            }
        }
        let change = Change {
            expected_version: current.version(),
            plan,
            state: current.state,
            review: current.review,
            trigger: Trigger::StepUpdate,
            actor: actor.to_owned(),
        };
        match store.write(change).await {
            Ok(stored) => return Ok(stored),
            Err(err @ StoreError::Conflict { .. }) => last = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| StoreError::NotFound(plan_id.to_owned())))
}

/// Most [`ExecEvent::StepProgress`] events per step: one every this long (a tool may report
/// many times a second; the reports between are dropped).
pub const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Turns a running attempt's progress reports into [`ExecEvent::StepProgress`], at most one
/// per [`PROGRESS_EVERY`].
struct Reporter {
    observer: Option<Observer>,
    plan_id: String,
    step_id: String,
    attempt: u32,
    last: Mutex<Option<Instant>>,
}

impl Reporter {
    fn report(&self, progress: CallProgress) {
        let Some(observer) = &self.observer else {
            return;
        };
        if let Ok(mut last) = self.last.lock() {
            if last.is_some_and(|at| at.elapsed() < PROGRESS_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        observer(
            &self.plan_id,
            &ExecEvent::StepProgress {
                step_id: self.step_id.clone(),
                attempt: self.attempt,
                progress: progress.progress,
                total: progress.total,
                message: progress.message,
            },
        );
    }
}
