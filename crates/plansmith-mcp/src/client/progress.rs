//! Progress routing: the progress notifications of a connection's calls in flight, sent to
//! their callers by progress token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::ClientHandler;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{NotificationContext, RoleClient};
use tokio::sync::mpsc;

use super::ToolProgress;

/// Routes the progress notifications of the calls in flight on one connection to their
/// callers, by progress token (rmcp gives every request one). Also the connection's MCP client
/// handler, which does nothing else.
#[derive(Clone, Default)]
pub(super) struct ProgressRoutes(
    Arc<Mutex<HashMap<ProgressToken, mpsc::UnboundedSender<ToolProgress>>>>,
);

impl ProgressRoutes {
    /// Sends the progress of the request with `token` to the returned receiver until the
    /// guard is dropped.
    pub(super) fn route(
        &self,
        token: ProgressToken,
    ) -> (RouteGuard, mpsc::UnboundedReceiver<ToolProgress>) {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut routes) = self.0.lock() {
            routes.insert(token.clone(), tx);
        }
        (
            RouteGuard {
                routes: self.clone(),
                token,
            },
            rx,
        )
    }
}

/// Removes a route when its call ends.
pub(super) struct RouteGuard {
    routes: ProgressRoutes,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        if let Ok(mut routes) = self.routes.0.lock() {
            routes.remove(&self.token);
        }
    }
}

impl ClientHandler for ProgressRoutes {
    /// plansmith's client: it declares the tasks extension, so a server may answer a long
    /// call with a task, which the connection polls (and a resumed run polls again), and
    /// elicitation, which a task asks through its `inputRequests` for a person to answer (an
    /// elicitation sent as a request of its own is declined).
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_tasks()
                .enable_elicitation()
                .build(),
            rmcp::model::Implementation::new("plansmith", env!("CARGO_PKG_VERSION")),
        )
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        if let Ok(routes) = self.0.lock()
            && let Some(route) = routes.get(&params.progress_token)
        {
            let _ = route.send(ToolProgress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
        std::future::ready(())
    }
}
