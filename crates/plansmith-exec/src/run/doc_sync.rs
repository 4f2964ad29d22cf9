//! The plan document follows the run: step statuses and results are written into it by a
//! coalescing background writer ([`DocSync`]).

use plansmith_store::{Change, ExecStatus, PlanStore, StoreError, StoredPlan, Trigger};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::events::DocumentObserver;

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
pub(super) struct DocSync {
    sender: Option<mpsc::UnboundedSender<SyncMsg>>,
}

/// Attempts of one document write against concurrent writers.
const SYNC_ATTEMPTS: u32 = 16;

impl DocSync {
    pub(super) fn spawn(
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

    pub(super) fn step(
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

    pub(super) fn meta(&self, key: &str, value: Value) {
        if let Some(sender) = &self.sender {
            let _ = sender.send(SyncMsg::Meta(key.to_owned(), value));
        }
    }

    pub(super) async fn flush(&self) {
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
