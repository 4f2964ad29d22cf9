//! plansmith-store: plans that outlive the process.
//!
//! # Brief overview
//!
//! A [`PlanStore`] keeps plans in SQLite (the embedded default, one WAL file in the user's data
//! directory) or PostgreSQL (by URL, for several nodes sharing one store); the schema is
//! migrated on open. Every change is a new **version** row — parent version, [`Trigger`],
//! actor, time and an RFC 6902 JSON diff — and the current plan is the latest version. Writes
//! are compare-and-swap on the version number: a stale writer gets [`StoreError::Conflict`],
//! never a lost update.
//!
//! On top of it:
//!
//! - the lifecycle operations of OpenManus's PlanningTool, one for one, with their error cases:
//!   [`PlanStore::create`] (duplicate id), [`PlanStore::update`] (unchanged steps keep status and
//!   notes), [`PlanStore::get`], [`PlanStore::list`] (owner / conversation / state filters,
//!   pages), [`PlanStore::set_active`] / [`PlanStore::get_active`] per conversation,
//!   [`PlanStore::mark_step`] (bad index, bad status), [`PlanStore::delete`], and
//!   [`StoredPlan::render_text`] (`Progress: 1/3 (33.3%)`, `[✓] [→] [!] [ ]`);
//! - the human-in-the-loop state machine in [`review`]: what each state allows, accept,
//!   structured edit (JSON Patch, re-validated), reject, `auto_accept`, `max_iterations` with a
//!   policy, recurring schedules only after an explicit confirmation, ownership and thread ids
//!   (the replans of a free-text edit or an answer are `plansmith-service`'s; the store writes
//!   their plans);
//!
//! - plan templates ([`PlanStore::save_template`]): named, versioned plans with `{{param}}` placeholders
//!   ([`plansmith_core::PlanTemplate`]), saved, listed, fetched and deleted; instantiation
//!   (substitution and re-validation) is core's;
//! - conversation memory: [`PlanStore::conversation_plans`] gives a conversation's earlier
//!   plans, oldest first;
//! - messages between the processes sharing a PostgreSQL store
//!   ([`PlanStore::broadcast`]: `LISTEN`/`NOTIFY`, messages of any size).
//!
//! This is the only crate of the workspace that speaks SQL.
//!
//! # Example
//!
//! ```
//! use plansmith_core::{Action, Plan, Step};
//! use plansmith_store::{Location, PlanStore, Review, ReviewState, StepKey};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let dir = std::env::temp_dir().join(format!("plansmith-doc-{}", std::process::id()));
//! let store = PlanStore::open(&Location::Sqlite(dir.join("plans.db"))).await?;
//! let mut plan = Plan::new("trip", "Plan a trip");
//! plan.title = "Trip".into();
//! for (id, title) in [("s1", "Book flights"), ("s2", "Book hotel"), ("s3", "Pack")] {
//!     plan.steps.push(Step::new(id, title, Action::Reply { text: title.into() }));
//! }
//! store.create(plan, ReviewState::Draft, Review::default(), "me").await?;
//! let stored = store
//!     .mark_step("trip", &StepKey::Index(0), Some("completed"), None, None, "me")
//!     .await?;
//! assert_eq!(stored.version(), 2);
//! assert!(stored.render_text().contains("Progress: 1/3 (33.3%)"));
//! // A writer that read version 1 is too late now.
//! let stale = store
//!     .mark_step("trip", &StepKey::Index(1), Some("completed"), None, Some(1), "other")
//!     .await;
//! assert!(matches!(stale, Err(plansmith_store::StoreError::Conflict { .. })));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod catalogs;
mod error;
mod exec;
mod notify;
mod patch;
pub mod review;
mod state;
pub mod store;
mod templates;

pub use catalogs::catalog_id;
pub use error::{DatabaseError, Result, StoreError};
pub use exec::{
    Applies, AttemptRecord, Budget, Claim, ExecRun, ExecStatus, ExecStep, OnCap, RUN_STOP,
    Remember, RunBudget, RunSignal, RunState, StandingApproval, StepDecided, StepDecision, StepEnd,
    StepSeed, StepVerdict, StopReason, idempotency_key,
};
pub use notify::{Listener, Notifier};
pub use review::{
    MaxIterationsPolicy, REJECTED_WITHOUT_TEXT, Review, ReviewAction, ReviewState, is_confirmation,
};
pub use store::{
    Backend, Change, ListFilter, Location, Page, PlanStore, StepKey, StoredPlan, Submitted,
    Trigger, VersionRecord,
};
pub use templates::TemplateEntry;
