//! The run's budget as the loop keeps to it: tool calls taken before their steps start, model
//! tokens added as attempts and replans spend them, the deadline looked at every turn; a cap
//! reached sets [`Ctx::capped`], after which nothing new starts.

use chrono::Utc;
use plansmith_core::Action;
use plansmith_store::OnCap;

use super::report::ExecError;
use super::state::Ctx;
use plansmith_store::StopReason;

impl Ctx<'_> {
    /// Most replans of this run: its budget's cap, else the executor's.
    pub(super) fn max_replans(&self) -> u32 {
        self.budget
            .as_ref()
            .and_then(|b| b.budget.max_replans)
            .unwrap_or(self.ex.config.max_replans)
    }

    /// Whether a cap was reached with the running steps to be cancelled.
    pub(super) fn cancelled_by_cap(&self) -> bool {
        self.capped.is_some()
            && self
                .budget
                .as_ref()
                .is_some_and(|b| b.budget.on_cap == OnCap::Cancel)
    }

    fn cap(&mut self, reason: StopReason, why: String) {
        if self.capped.is_none() {
            tracing::info!("run of {}: {why}", self.plan_id);
            self.capped = Some((reason, why));
        }
    }

    /// Looks at the time caps: the run's deadline and the executor's longest run time.
    pub(super) fn check_deadline(&mut self) {
        if let Some(deadline) = self.budget.as_ref().and_then(|b| b.deadline())
            && Utc::now() >= deadline
        {
            let seconds = self
                .budget
                .as_ref()
                .and_then(|b| b.budget.max_seconds)
                .unwrap_or_default();
            self.cap(
                StopReason::Deadline,
                format!("the run reached its time cap of {seconds} s"),
            );
        }
        if self.started.elapsed() > self.ex.config.max_run_time {
            let seconds = self.ex.config.max_run_time.as_secs();
            self.cap(
                StopReason::Deadline,
                format!("the run took longer than {seconds} s"),
            );
        }
    }

    /// Adds model tokens the run spent; caps the run when they reach its cap.
    pub(super) async fn spend_tokens(&mut self, tokens: u64) -> Result<(), ExecError> {
        let Some(budget) = self.budget.as_mut() else {
            return Ok(());
        };
        if tokens > 0 {
            match self
                .ex
                .store
                .exec_spend_tokens(&self.plan_id, tokens)
                .await?
            {
                Some(total) => budget.tokens = total,
                None => budget.tokens += tokens,
            }
        }
        if let Some(max) = budget.budget.max_tokens
            && budget.tokens >= max
        {
            let spent = budget.tokens;
            self.cap(
                StopReason::TokenCapped,
                format!("the run spent {spent} model tokens, its cap is {max}"),
            );
        }
        Ok(())
    }

    /// The first `free` of the `ready` steps that the budget lets start: a tool or agent call
    /// takes one call from it first (in the store, so nodes taking calls at once never exceed
    /// the cap); when none is left the run is capped and no further step starts.
    pub(super) async fn allowed(
        &mut self,
        ready: &[String],
        free: usize,
    ) -> Result<Vec<String>, ExecError> {
        let Some(budget) = self.budget.clone() else {
            return Ok(ready.iter().take(free).cloned().collect());
        };
        let mut allowed = Vec::new();
        for id in ready.iter().take(free) {
            if self.is_call(id) {
                let max = budget.budget.max_tool_calls;
                if !self
                    .ex
                    .store
                    .exec_take_tool_call(&self.plan_id, max)
                    .await?
                {
                    let max = max.unwrap_or_default();
                    self.cap(
                        StopReason::ToolCallsCapped,
                        format!("the run made {max} tool calls, its cap"),
                    );
                    break;
                }
            }
            allowed.push(id.clone());
        }
        Ok(allowed)
    }

    /// Whether step `id` calls a tool or an agent: what the cap on tool calls counts.
    fn is_call(&self, id: &str) -> bool {
        self.plan
            .step(id)
            .is_some_and(|s| matches!(s.action, Action::Tool { .. } | Action::Agent { .. }))
    }

    /// Gives back the calls taken for steps this node did not get to claim.
    pub(super) async fn return_untaken(&mut self, not_claimed: &[String]) -> Result<(), ExecError> {
        let calls = not_claimed.iter().filter(|id| self.is_call(id)).count() as u64;
        if calls > 0 && self.budget.is_some() {
            self.ex
                .store
                .exec_return_tool_calls(&self.plan_id, calls)
                .await?;
            // The cap may have been reached only by calls taken for steps this node did not
            // get: with them given back, it is looked at again on the next step.
            if matches!(self.capped, Some((StopReason::ToolCallsCapped, _))) {
                self.capped = None;
            }
        }
        Ok(())
    }
}
