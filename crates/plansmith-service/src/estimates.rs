//! Estimates: what a run of a stored plan will cost, from its own catalog, the store's step
//! times and the runner's caps ([`Service::estimated`]).

use plansmith_core::estimate::{Estimate, history_key};
use plansmith_store::StoredPlan;

use crate::{Result, Service};

impl Service {
    /// `stored` with its [`Estimate`] filled in: calls per tool (read-only and destructive
    /// ones apart, by the plan's own catalog), model calls (task steps, the runner's summary,
    /// its cap on replans), task tokens, and wall time under the runner's concurrency from
    /// this store's history of past steps.
    pub async fn estimated(&self, mut stored: StoredPlan) -> Result<StoredPlan> {
        let planner = self
            .planners
            .for_review(&self.store, &stored.review)
            .await?;
        let keys: Vec<String> = stored
            .plan
            .steps
            .iter()
            .filter_map(|s| history_key(&s.action))
            .collect();
        let history = self.store.exec_step_history(&keys).await?;
        // Without a runner here, the run is estimated as a default executor would make it
        // (`plansmith run`'s concurrency), without the replans and summary a model adds.
        let (replans, summary, concurrency) = match &self.runner {
            Some(runner) => {
                let config = runner.executor().config();
                let replans = config.budget.max_replans.unwrap_or(config.max_replans);
                (replans, runner.executor().summarises(), config.concurrency)
            }
            None => (
                0,
                false,
                plansmith_exec::ExecConfig::new("estimate").concurrency,
            ),
        };
        stored.estimate = Some(Estimate::of(
            &stored.plan,
            planner.catalog(),
            &history,
            replans,
            summary,
            concurrency,
        ));
        Ok(stored)
    }
}
