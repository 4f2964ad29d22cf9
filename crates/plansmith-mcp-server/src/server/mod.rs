//! plansmith as an MCP server: the tools `plan`, `planning`, `feedback` and `templates`.
//!
//! - `plan`: a request (query, profile, context, locale, conversation, thread, time, target
//!   agent, the planning `options` as `POST /v1/plans` takes them, and optionally the caller's
//!   own `tools` and `agents`) → the outcome (`ready` / `needs_input` / `fallback`), the plan
//!   with its questions, and the diagnostics (findings, attempts, repairs, strategy). A plan
//!   made with the caller's tools keeps them for its replans and runs. The plan is stored for review unless
//!   `save: false`, so `feedback` and `planning` can reach it by id. Planning reports its
//!   progress to a client that sends a progress token. Any tool call ends when its client
//!   cancels it.
//! - `planning`: OpenManus's PlanningTool, one command for one: `create` (plan_id, title,
//!   steps), `update`, `list`, `get` (the conversation's active plan without plan_id),
//!   `set_active`, `mark_step` (step_index, step_status, step_notes), `delete`, with its error
//!   cases; the answer is the text rendering (`Progress: 1/3 (33.3%)`, `[✓] [→] [!] [ ]`).
//! - `feedback`: `accept`, `edit` (free text → replan), `answer` (answers to the questions →
//!   replan), `reject`.
//! - `templates`: plan templates in the store: `list`, `get`, `save` (a stored plan with
//!   `{{param}}` parameters), `delete`, `instantiate` (arguments → a new plan, validated
//!   against the catalog and stored for review). Templates are shared by all owners.
//!
//! A client that declares the tasks extension gets `plan` and `run` as tasks (`tasks.rs`); a
//! 2026-07-28 client (no handshake) that declares elicitation is asked in rounds (`rounds.rs`).
//!
//! Every answer carries `structuredContent` (the JSON) and a text block; a failure is a tool
//! result with `isError: true` and a message naming what is wrong, never a protocol error.
//! Arguments a tool does not take (a misspelt `max_step`) are refused by name, as the HTTP API
//! refuses them: the call's answer is an invalid-params error naming the field.
//!
//! Over streamable HTTP, [`http_service`] checks bearer tokens (when configured) and each call
//! acts for the token's owner: plans of other owners answer "no plan with id …".

mod answer;
mod elicit;
mod http;
mod params;
mod planning;
mod progress;
mod rounds;
mod tasks;
mod templates;
mod tools;

use plansmith_service::Service;
use plansmith_store::{PlanStore, StoreError, StoredPlan};
use rmcp::ServiceExt;
use rmcp::handler::server::router::tool::ToolRouter;

use crate::ServeError;

pub use http::{McpHttpService, http_service};

/// The plansmith MCP server: the tools over a [`Service`]. Cheap to clone.
#[derive(Clone)]
pub struct PlansmithMcp {
    service: Service,
    actor: String,
    tool_router: ToolRouter<PlansmithMcp>,
    tasks: tasks::Tasks,
}

impl std::fmt::Debug for PlansmithMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlansmithMcp")
            .field("actor", &self.actor)
            .finish_non_exhaustive()
    }
}

impl PlansmithMcp {
    /// A server over `service` (shared with an HTTP API in the same process, so that the
    /// catalogs callers send are built once and a step decision resumes its waiting run at
    /// once, on the service's runner); `actor` is recorded in the plans' history.
    pub fn new(service: Service, actor: impl Into<String>) -> PlansmithMcp {
        PlansmithMcp {
            service,
            actor: actor.into(),
            tool_router: PlansmithMcp::tool_router(),
            tasks: tasks::Tasks::default(),
        }
    }

    fn store(&self) -> &PlanStore {
        self.service.store()
    }

    fn actor_for(&self, owner: &Option<String>) -> String {
        owner.clone().unwrap_or_else(|| self.actor.clone())
    }

    /// The plan, if the caller may see it (another owner's plan is "not found").
    async fn visible(&self, id: &str, owner: &Option<String>) -> Result<StoredPlan, StoreError> {
        let stored = self.store().get(id).await?;
        match owner {
            Some(owner) if stored.plan.owner.as_deref() != Some(owner.as_str()) => {
                Err(StoreError::NotFound(id.to_owned()))
            }
            _ => Ok(stored),
        }
    }
}

/// Serves `server` over stdin / stdout until the client disconnects. Only JSON-RPC is written
/// to stdout; logs go to stderr.
/// A line that is not a JSON-RPC message MCP knows is answered with its JSON-RPC error
/// instead of being dropped.
pub async fn serve_stdio(server: PlansmithMcp) -> Result<(), ServeError> {
    let (transport, lines) = crate::stdio::guard(tokio::io::stdin(), tokio::io::stdout());
    let running = server
        .serve(transport)
        .await
        .map_err(|err| ServeError(format!("initialize over stdio failed: {err}")))?;
    let ended = running
        .waiting()
        .await
        .map_err(|err| ServeError(err.to_string()));
    // The last answers are written before the process goes on to exit.
    let _ = lines.await;
    ended?;
    Ok(())
}
