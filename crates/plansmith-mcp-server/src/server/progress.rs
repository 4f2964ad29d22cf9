//! Planning for an MCP client, reporting its progress to a client that asked for it.

use plansmith_core::pipeline::OnEvent;
use plansmith_core::{PlanEvent, PlanRequest};
use plansmith_service::{Planned, Service, ServiceError};
use rmcp::model::ProgressNotificationParam;
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

/// Plans `request` for an MCP client. A client that asked for progress (a `progressToken`)
/// hears how it goes: each attempt, each step as it is written, each repair, and the text
/// written so far at most four times a second in between. That also keeps alive a call whose
/// timeout restarts on progress (slow local planning). (A cancelled call stops planning with
/// every other tool call: see `call_tool`.)
pub(super) async fn plan_for(
    service: &Service,
    (tools, agents): (Option<&Value>, Option<&Value>),
    request: &PlanRequest,
    context: &RequestContext<RoleServer>,
) -> Result<Planned, ServiceError> {
    let Some(token) = context.meta.get_progress_token() else {
        return service.plan(request, tools, agents, None).await;
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PlanEvent>();
    let mut on_event = move |event: PlanEvent| {
        let _ = tx.send(event);
    };
    let on_event: OnEvent<'_> = &mut on_event;
    let planning = service.plan(request, tools, agents, Some(on_event));
    let peer = context.peer.clone();
    let report = async move {
        let mut count = 0u32;
        let mut written = 0usize;
        let mut last: Option<std::time::Instant> = None;
        while let Some(event) = rx.recv().await {
            count += 1;
            let message = match event {
                PlanEvent::AttemptStarted { attempt, .. } => format!("attempt {}", attempt + 1),
                PlanEvent::Step { step, .. } => format!("step {}: {}", step.id, step.title),
                PlanEvent::Repair { problems, .. } => {
                    format!("repairing: {}", problems.join("; "))
                }
                PlanEvent::Token { text, .. } => {
                    written += text.chars().count();
                    if last.is_some_and(|at| at.elapsed() < PROGRESS_EVERY) {
                        continue;
                    }
                    format!("writing ({written} characters)")
                }
            };
            last = Some(std::time::Instant::now());
            let mut progress = ProgressNotificationParam::new(token.clone(), f64::from(count));
            progress.message = Some(message);
            // A client that went away is the cancellation's business.
            let _ = peer.notify_progress(progress).await;
        }
    };
    // The callback lives as long as `planning`, so `report` never ends first.
    tokio::pin!(planning);
    tokio::select! {
        outcome = &mut planning => outcome,
        () = report => planning.await,
    }
}

/// At most one "writing" progress notification this often while the model writes.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
