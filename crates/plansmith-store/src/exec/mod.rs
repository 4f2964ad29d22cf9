//! The durable execution log of `plansmith-exec` (migration 4): one run per plan
//! ([`ExecRun`]), one row per step ([`ExecStep`]: status, attempt, result, lease), one row per
//! attempt keyed by its idempotency key ([`AttemptRecord`]), and people's decisions about
//! steps ([`StepDecision`]: approve a gated step, or retry / skip / abort a failed one).
//!
//! **Claims and leases.** A step runs only on the node that claimed it:
//! [`PlanStore::exec_claim`] moves a claimable step (pending, a retry whose backoff is over,
//! or running under a lease that expired) to `running` with `lease_owner = node` and
//! `lease_until = now + lease`, in one conditional `UPDATE`; on PostgreSQL the candidates are
//! first locked with `SELECT … FOR UPDATE SKIP LOCKED`, so nodes claiming at once skip each
//! other's rows instead of queueing on them. A running node renews its leases
//! ([`PlanStore::exec_renew`]); when a node dies its leases expire and another node's claim
//! takes the step over. Every write about a running step is fenced by the lease owner: a node
//! that lost its lease cannot overwrite the step.
//!
//! **Idempotency.** Each attempt has the key `plan:base_version:step:attempt`
//! ([`idempotency_key`]). A claim of a step whose lease expired while its attempt was running
//! (the node crashed mid-call) keeps the attempt number, so the call is re-run with the
//! **same** key (`Claim::rerun` is true and the attempt row's `runs` grows); the invoker passes
//! the key on, so a tool that honours it does its side effect once. A completed step is never
//! claimed again: no SQL path moves a row out of `completed`.
//!
//! [`PlanStore::exec_claim`]: crate::PlanStore::exec_claim
//! [`PlanStore::exec_renew`]: crate::PlanStore::exec_renew

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::Value;

use crate::error::{Result, StoreError};

mod approvals;
mod budget;
mod claims;
mod decisions;
mod runs;
mod types;

pub use approvals::{Remember, StandingApproval};
pub use budget::{Budget, OnCap, RunBudget};
pub use decisions::{Applies, RUN_STOP, RunSignal, StepDecided, StepDecision, StepVerdict};
pub use runs::StepSeed;
pub use types::{
    AttemptRecord, Claim, ExecRun, ExecStatus, ExecStep, RunState, StepEnd, StopReason,
    idempotency_key,
};

fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

fn to_text(value: &Value) -> Result<String> {
    serde_json::to_string(value).map_err(|err| StoreError::BadEdit(err.to_string()))
}
