//! The one table of error codes at the HTTP edge: code → HTTP status → JSON body
//! `{code, message, details}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use plansmith_core::PlanError;
use plansmith_store::StoreError;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};

/// Every error code the API answers with, and its HTTP status.
///
/// | code | status | when |
/// |---|---|---|
/// | `bad_request` | 400 | malformed JSON, query or path; a query parameter the route does not take; bad step index or status; bad edit |
/// | `unauthorized` | 401 | tokens are configured and the bearer token is missing or unknown |
/// | `forbidden` | 403 | without tokens, a `Host` that is not a loopback name or address; a browser `Origin` that is neither the server's own nor listed in `cors_origins` |
/// | `not_found` | 404 | no such plan, version or template (or the plan is another owner's) |
/// | `method_not_allowed` | 405 | the route exists but not with this method |
/// | `request_timeout` | 408 | the request body stalled: nothing came for the header timeout |
/// | `conflict` | 409 | stale version, taken id, or a review state that forbids the operation |
/// | `payload_too_large` | 413 | the body is over the configured limit |
/// | `unsupported_media_type` | 415 | a JSON body without `content-type: application/json` |
/// | `invalid_plan` | 422 | an edit made the plan invalid; `details` is the diagnostics list |
/// | `planning_failed` | 422 | no valid plan could be had; `details` is the engine's diagnostics |
/// | `rate_limited` | 429 | over the configured requests per second |
/// | `internal` | 500 | the store failed |
/// | `model_error` | 502 | the language model failed |
/// | `timeout` | 503 | the request took longer than the configured timeout |
/// | `unavailable` | 503 | the store does not answer (`GET /readyz`) |
pub const ERROR_TABLE: &[(&str, u16)] = &[
    ("bad_request", 400),
    ("unauthorized", 401),
    ("forbidden", 403),
    ("not_found", 404),
    ("method_not_allowed", 405),
    ("request_timeout", 408),
    ("conflict", 409),
    ("payload_too_large", 413),
    ("unsupported_media_type", 415),
    ("invalid_plan", 422),
    ("planning_failed", 422),
    ("rate_limited", 429),
    ("internal", 500),
    ("model_error", 502),
    ("timeout", 503),
    ("unavailable", 503),
];

/// The JSON body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// One of the codes of [`ERROR_TABLE`].
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// Structured details (diagnostics for `invalid_plan` / `planning_failed`), else `null`.
    pub details: Value,
}

impl utoipa::PartialSchema for ErrorBody {
    /// `{code, message, details}` with `code` one of [`ERROR_TABLE`]'s codes.
    fn schema() -> RefOr<Schema> {
        let codes: Vec<&str> = ERROR_TABLE.iter().map(|(code, _)| *code).collect();
        let table: Vec<String> = ERROR_TABLE
            .iter()
            .map(|(code, status)| format!("`{code}` {status}"))
            .collect();
        ObjectBuilder::new()
            .description(Some(format!(
                "Every error response. Codes and their HTTP status: {}.",
                table.join(", ")
            )))
            .property(
                "code",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(codes))
                    .description(Some("The error code (one per HTTP status, see the table)")),
            )
            .property(
                "message",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some("What went wrong, for people")),
            )
            .property(
                "details",
                ObjectBuilder::new()
                    .schema_type(SchemaType::AnyValue)
                    .description(Some(
                        "Structured details: for `invalid_plan` the engine's diagnostics list \
                     (`[{code, severity, pointer, step?, message, value?}]`), for \
                     `planning_failed` / `model_error` the planning call's diagnostics, else null",
                    )),
            )
            .required("code")
            .required("message")
            .required("details")
            .into()
    }
}

impl utoipa::ToSchema for ErrorBody {}

/// An error answered by the API.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// The code (a key of [`ERROR_TABLE`]).
    pub code: &'static str,
    /// The message.
    pub message: String,
    /// The details.
    pub details: Value,
}

impl ApiError {
    /// An error with this code and message and no details.
    pub fn new(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            details: Value::Null,
        }
    }

    /// Adds details.
    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = details;
        self
    }

    /// The HTTP status of the code (500 for a code missing from the table).
    pub fn status(&self) -> StatusCode {
        ERROR_TABLE
            .iter()
            .find(|(code, _)| *code == self.code)
            .and_then(|(_, status)| StatusCode::from_u16(*status).ok())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The not-found error for a plan id.
    pub fn plan_not_found(id: &str) -> ApiError {
        ApiError::new("not_found", format!("no plan with id `{id}`"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(code = self.code, message = %self.message, "request failed");
        }
        let body = ErrorBody {
            code: self.code.to_owned(),
            message: self.message,
            details: self.details,
        };
        (status, Json(body)).into_response()
    }
}

impl From<plansmith_service::ServiceError> for ApiError {
    fn from(err: plansmith_service::ServiceError) -> ApiError {
        use plansmith_service::ServiceError;
        let message = err.to_string();
        match err {
            ServiceError::Store(err) => err.into(),
            ServiceError::Plan(err) => err.into(),
            ServiceError::Template(_) => ApiError::new("bad_request", message),
            ServiceError::InvalidInstance { diagnostics, .. } => {
                ApiError::new("invalid_plan", message)
                    .with_details(serde_json::to_value(diagnostics).unwrap_or(Value::Null))
            }
            ServiceError::Exec(plansmith_exec::ExecError::Store(err)) => err.into(),
            // Not accepted, no steps, nothing to resume, deleted under the run.
            ServiceError::Exec(_) => ApiError::new("conflict", message),
            ServiceError::NoExecutor => ApiError::new(
                "bad_request",
                "this server has no executor: start it with --commands FILE or --mcp SERVERS",
            ),
            _ => ApiError::new("internal", message),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> ApiError {
        let message = err.to_string();
        match err {
            StoreError::NotFound(_)
            | StoreError::NoActivePlan(_)
            | StoreError::TemplateNotFound(_) => ApiError::new("not_found", message),
            StoreError::AlreadyExists(_)
            | StoreError::Conflict { .. }
            | StoreError::InvalidState { .. }
            | StoreError::EmptyPlan(_)
            | StoreError::NotDecidable { .. }
            | StoreError::NotRunning { .. } => ApiError::new("conflict", message),
            StoreError::InvalidStep { .. }
            | StoreError::InvalidStatus { .. }
            | StoreError::BadEdit(_)
            | StoreError::BadCursor(_) => ApiError::new("bad_request", message),
            StoreError::Invalid { diagnostics } => ApiError::new("invalid_plan", message)
                .with_details(serde_json::to_value(diagnostics).unwrap_or(Value::Null)),
            StoreError::Planning(plan_error) => ApiError::from(plan_error),
            StoreError::BadCatalog(catalog_error) => {
                let problems = match &catalog_error {
                    plansmith_core::CatalogError::Invalid(problems) => problems
                        .iter()
                        .map(
                            |p| json!({"name": p.name, "pointer": p.pointer, "message": p.message}),
                        )
                        .collect(),
                    _ => Vec::new(),
                };
                ApiError::new("bad_request", message).with_details(Value::Array(problems))
            }
            _ => ApiError::new("internal", message),
        }
    }
}

impl From<PlanError> for ApiError {
    fn from(err: PlanError) -> ApiError {
        let message = err.to_string();
        let details = err
            .diagnostics()
            .and_then(|d| serde_json::to_value(d).ok())
            .unwrap_or(Value::Null);
        match err {
            PlanError::Model { .. } => ApiError::new("model_error", message).with_details(details),
            PlanError::InvalidRequest(_) => ApiError::new("bad_request", message),
            PlanError::Prompt(_) => ApiError::new("internal", message),
            _ => ApiError::new("planning_failed", message).with_details(details),
        }
    }
}

/// Maps an axum extractor rejection (JSON body, query, path) to the table.
pub(crate) fn rejection(status: StatusCode, text: String) -> ApiError {
    let code = match status.as_u16() {
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        _ => "bad_request",
    };
    ApiError::new(code, text)
}
