//! The event bus: one `tokio::sync::broadcast` channel per plan. The API publishes review and
//! step-status events into it; other crates (the executor) can publish their own kinds too.
//!
//! On a PostgreSQL store several processes serve the same plans, and a page watching a plan
//! through one of them must see what happens through the others (a step marked done through
//! another process, or run by another process's executor). [`EventBus::relay`] sends each
//! event to the other processes too (the store's `LISTEN`/`NOTIFY` channel) and delivers
//! theirs to its own subscribers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use plansmith_exec::{ExecEvent, Executor};
use plansmith_store::{ExecStatus, PlanStore, ReviewState, StoreError, StoredPlan};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

/// Events kept per plan for a slow subscriber before it starts skipping.
const CAPACITY: usize = 256;

/// The store channel the events of all plans travel on between processes.
const RELAY_CHANNEL: &str = "plansmith_plan_events";

/// Events waiting to be sent to the other processes; beyond this (the database is down or
/// slow) new ones are dropped for them, with a warning.
const RELAY_QUEUE: usize = 1024;

/// Kinds that are not relayed: `plan_created`, a plan's first event, which no other process
/// can have a subscriber for yet (a subscriber gets the plan in its `snapshot`; relaying it
/// would cost a notification per created plan); and `token`, a replanning's text as the model
/// writes it (a notification per token; the other processes' pages get each validated `step`).
const NOT_RELAYED: &[&str] = &["plan_created", "token"];

/// One event about a plan, as sent on `GET /v1/plans/{id}/events` (the SSE `event:` field is
/// `kind`, the `data:` field is this whole object as JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PlanBusEvent {
    /// What happened: `plan_updated`, `review_requested`, `step_status`, `plan_deleted`, …
    /// (open-ended: other crates add their own kinds).
    pub kind: String,
    /// The plan.
    pub plan_id: String,
    /// The plan's version after the change, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// The payload (depends on `kind`).
    pub data: Value,
}

/// Per-plan broadcast channels. Cheap to clone (shared, the relay too).
#[derive(Debug, Clone, Default)]
pub struct EventBus {
    channels: Arc<Mutex<HashMap<String, broadcast::Sender<PlanBusEvent>>>>,
    /// Events for the other processes ([`EventBus::relay`]).
    relay: Arc<OnceLock<mpsc::Sender<PlanBusEvent>>>,
    /// What the relay did (for `/metrics`).
    counts: Arc<RelayCounts>,
}

/// Events the relay sent, received, and could not send.
#[derive(Debug, Default)]
struct RelayCounts {
    sent: AtomicU64,
    received: AtomicU64,
    failed: AtomicU64,
}

/// What [`EventBus::relay`] did so far: events sent to the other processes, received from them,
/// and not sent (the database could not be reached, or the queue was full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayStats {
    /// Events sent.
    pub sent: u64,
    /// Events received and delivered here.
    pub received: u64,
    /// Events that could not be sent.
    pub failed: u64,
}

impl EventBus {
    /// An empty bus.
    pub fn new() -> EventBus {
        EventBus::default()
    }

    /// Relays events between this bus and the other processes on `store`: every event
    /// published here (but `plan_created` and `token`) is sent to them, and theirs are
    /// delivered to this bus's subscribers. Only PostgreSQL stores are shared; on SQLite this
    /// does nothing and answers `false`. Needs a tokio runtime (two tasks). Affects every
    /// clone of the bus; a second call does nothing.
    ///
    /// Delivery is best effort, like the bus itself: an event published while the database
    /// is unreachable is not seen by the other processes (a warning is logged), and a page
    /// that reconnects gets the current plan in its `snapshot`.
    pub async fn relay(&self, store: &PlanStore) -> Result<bool, StoreError> {
        if self.relay.get().is_some() {
            return Ok(true);
        }
        let Some((notifier, mut listener)) = store.broadcast(RELAY_CHANNEL).await? else {
            return Ok(false);
        };
        let (sender, mut queue) = mpsc::channel::<PlanBusEvent>(RELAY_QUEUE);
        if self.relay.set(sender).is_err() {
            return Ok(true);
        }
        // One task sends, in publishing order.
        let counts = self.counts.clone();
        tokio::spawn(async move {
            while let Some(event) = queue.recv().await {
                let Ok(text) = serde_json::to_string(&event) else {
                    continue;
                };
                if let Err(err) = notifier.send(&text).await {
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        plan = %event.plan_id,
                        kind = %event.kind,
                        %err,
                        "event not relayed to the other processes"
                    );
                } else {
                    counts.sent.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let bus = self.clone();
        tokio::spawn(async move {
            loop {
                match listener.recv().await {
                    Ok(text) => match serde_json::from_str::<PlanBusEvent>(&text) {
                        Ok(event) => {
                            bus.counts.received.fetch_add(1, Ordering::Relaxed);
                            bus.deliver(event);
                        }
                        Err(err) => tracing::warn!(%err, "unreadable relayed event, skipped"),
                    },
                    Err(err) => {
                        // sqlx connects again on the next call; do not spin meanwhile.
                        tracing::warn!(%err, "event relay: listening failed, retrying in 1 s");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(true)
    }

    /// Sends an event to the plan's subscribers (none listening: dropped), and to the other
    /// processes when the bus is relayed.
    pub fn publish(&self, event: PlanBusEvent) {
        if let Some(relay) = self.relay.get()
            && !NOT_RELAYED.contains(&event.kind.as_str())
            && let Err(err) = relay.try_send(event.clone())
        {
            self.counts.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%err, "event relay queue: event not relayed to the other processes");
        }
        self.deliver(event);
    }

    /// What the relay did so far; `None` when the bus is not relayed.
    pub fn relay_stats(&self) -> Option<RelayStats> {
        self.relay.get()?;
        Some(RelayStats {
            sent: self.counts.sent.load(Ordering::Relaxed),
            received: self.counts.received.load(Ordering::Relaxed),
            failed: self.counts.failed.load(Ordering::Relaxed),
        })
    }

    /// Sends an event to this process's subscribers of its plan. Channels without
    /// subscribers are removed.
    fn deliver(&self, event: PlanBusEvent) {
        let Ok(mut channels) = self.channels.lock() else {
            return;
        };
        if let Some(sender) = channels.get(&event.plan_id) {
            let id = event.plan_id.clone();
            if sender.send(event).is_err() {
                channels.remove(&id);
            }
        }
    }

    /// Whether an event of `kind` about the plan could reach anyone: a subscriber in this
    /// process, or (relayed kinds on a relayed bus) in another. A publisher skips building
    /// an event nobody would get (a new plan has no subscribers yet).
    pub fn has_subscribers(&self, plan_id: &str, kind: &str) -> bool {
        (self.relay.get().is_some() && !NOT_RELAYED.contains(&kind))
            || self
                .channels
                .lock()
                .map(|channels| channels.contains_key(plan_id))
                .unwrap_or(false)
    }

    /// Subscribes to a plan's events from now on.
    pub fn subscribe(&self, plan_id: &str) -> Option<broadcast::Receiver<PlanBusEvent>> {
        let mut channels = self.channels.lock().ok()?;
        Some(
            channels
                .entry(plan_id.to_owned())
                .or_insert_with(|| broadcast::channel(CAPACITY).0)
                .subscribe(),
        )
    }
}

/// Publishes a stored plan as a `kind` event (`plan_created`, `plan_updated`), and
/// `review_requested` when it waits for people; nothing when nobody listens.
pub(crate) fn publish_stored(bus: &EventBus, kind: &str, stored: &StoredPlan) {
    // Encoding the whole plan for nobody cost ~4 % of a create under load (perf).
    if !bus.has_subscribers(&stored.plan.id, kind) {
        return;
    }
    bus.publish(PlanBusEvent {
        kind: kind.to_owned(),
        plan_id: stored.plan.id.clone(),
        version: Some(stored.version()),
        data: serde_json::to_value(stored).unwrap_or(Value::Null),
    });
    if matches!(
        stored.state,
        ReviewState::AwaitingReview | ReviewState::NeedsInput
    ) {
        bus.publish(PlanBusEvent {
            kind: "review_requested".to_owned(),
            plan_id: stored.plan.id.clone(),
            version: Some(stored.version()),
            data: json!({"state": stored.state, "questions": stored.plan.questions}),
        });
    }
}

/// `executor` with its events published on `bus`, and each plan it writes (the steps'
/// statuses, results, errors and notes) as `plan_updated`, as every other writer of a plan
/// does.
pub(crate) fn observed(executor: Executor, bus: EventBus) -> Executor {
    let documents = bus.clone();
    executor
        .with_observer(Arc::new(move |plan_id, event| {
            publish(&bus, plan_id, event);
        }))
        .with_document_observer(Arc::new(move |stored| {
            publish_stored(&documents, "plan_updated", stored);
        }))
}

fn publish(bus: &EventBus, plan_id: &str, event: &ExecEvent) {
    let data = serde_json::to_value(event).unwrap_or(Value::Null);
    let status = match event {
        ExecEvent::StepStarted { step_id, .. } => Some((step_id, ExecStatus::Running)),
        ExecEvent::StepCompleted { step_id, .. } => Some((step_id, ExecStatus::Completed)),
        ExecEvent::StepEnded {
            step_id, status, ..
        } => Some((step_id, *status)),
        _ => None,
    };
    if let Some((step, status)) = status {
        bus.publish(PlanBusEvent {
            kind: "step_status".to_owned(),
            plan_id: plan_id.to_owned(),
            version: None,
            data: json!({"step": step, "status": status.step_status()}),
        });
    }
    bus.publish(PlanBusEvent {
        kind: format!("exec_{}", event.kind()),
        plan_id: plan_id.to_owned(),
        version: None,
        data,
    });
}
