//! The event bus: one `tokio::sync::broadcast` channel per plan. The API publishes review and
//! step-status events into it; other crates (the executor) can publish their own kinds too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

/// Events kept per plan for a slow subscriber before it starts skipping.
const CAPACITY: usize = 256;

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

/// Per-plan broadcast channels. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct EventBus {
    channels: Arc<Mutex<HashMap<String, broadcast::Sender<PlanBusEvent>>>>,
}

impl EventBus {
    /// An empty bus.
    pub fn new() -> EventBus {
        EventBus::default()
    }

    /// Sends an event to the plan's subscribers (none listening: dropped). Channels without
    /// subscribers are removed.
    pub fn publish(&self, event: PlanBusEvent) {
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

    /// Whether anyone listens to the plan's events (so a publisher can skip building an event
    /// nobody would get: a new plan has no subscribers yet).
    pub fn has_subscribers(&self, plan_id: &str) -> bool {
        self.channels
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
