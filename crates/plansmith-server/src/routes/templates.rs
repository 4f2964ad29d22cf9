//! Plan templates over HTTP: save (a plan document with `{{param}}` placeholders, or a stored
//! plan whose literal texts become placeholders), list, get, delete, and instantiate — the new
//! plan is validated again against the server's catalog and the engine's diagnostics come back.
//!
//! Templates are shared by every owner (like the catalog); the plans instantiated from them
//! belong to the caller.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use plansmith_core::{Diagnostic, Plan, PlanOptions, PlanTemplate, TemplateParameter};
use plansmith_service::Instantiation;
use plansmith_store::StoredPlan;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::routes::{ApiJson, ApiPath, ApiQuery, Caller, load};

/// One template in `GET /v1/templates`: its newest version and how many versions are stored.
#[derive(Debug, Serialize, ToSchema)]
struct TemplateSummary {
    /// The newest version.
    latest: PlanTemplate,
    /// How many versions are stored.
    versions: u32,
}

/// Answer of `GET /v1/templates`.
#[derive(Debug, Serialize, ToSchema)]
struct TemplateList {
    /// Every template, by name.
    templates: Vec<TemplateSummary>,
}

/// Body of `POST /v1/templates`: a name, the parameters, and either a plan document with
/// `{{param}}` placeholders or a stored plan whose literal texts become placeholders.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct SaveTemplate {
    /// Letters, digits, `_`, `-` and `.`; saving an existing name adds a version.
    name: String,
    /// What the template is for.
    #[serde(default)]
    description: String,
    /// The declared parameters: exactly the placeholders the plan uses.
    #[serde(default)]
    parameters: Vec<TemplateParameter>,
    /// The plan, with `{{param}}` placeholders (or give `plan_id`).
    #[serde(default)]
    plan: Option<Plan>,
    /// A stored plan to make the template of (or give `plan`).
    #[serde(default)]
    plan_id: Option<String>,
    /// For `plan_id`: parameter name → the literal text in the plan that becomes `{{name}}`.
    #[serde(default)]
    literals: BTreeMap<String, String>,
}

/// Query of the routes on one template.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct TemplateVersion {
    /// One version (default: the newest).
    version: Option<u32>,
}

/// Body of `POST /v1/templates/{name}/instantiate`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct Instantiate {
    /// Parameter → value (parameters with a default may be left out).
    #[serde(default)]
    arguments: BTreeMap<String, String>,
    /// The template version (default: the newest).
    #[serde(default)]
    version: Option<u32>,
    /// Validation options (`max_steps`, `allow_recurring`, …).
    #[serde(default)]
    options: Option<PlanOptions>,
    /// Conversation to record on the plan.
    #[serde(default)]
    conversation_id: Option<String>,
    /// Only show the plan and its diagnostics; store nothing (even when it has errors).
    #[serde(default)]
    dry_run: bool,
}

/// Answer of a dry run: the plan and the engine's diagnostics against the current catalog.
#[derive(Debug, Serialize, ToSchema)]
struct Preview {
    /// The instantiated plan (not stored).
    plan: Plan,
    /// The engine's diagnostics (errors mean it would not be stored).
    diagnostics: Vec<Diagnostic>,
}

/// Answer of an instantiation that was stored.
#[derive(Debug, Serialize, ToSchema)]
struct Instantiated {
    /// The new plan as stored (version 1, awaiting review).
    stored: StoredPlan,
    /// The engine's warnings against the current catalog.
    diagnostics: Vec<Diagnostic>,
}

fn bad_template(err: plansmith_core::PlanTemplateError) -> ApiError {
    ApiError::new("bad_request", err.to_string())
}

/// Lists the templates (newest version of each, by name).
#[utoipa::path(get, path = "/v1/templates", tag = "templates",
    responses((status = 200, description = "The templates", body = TemplateList)))]
async fn list_templates(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<TemplateList>, ApiError> {
    let templates = state
        .store
        .list_templates()
        .await?
        .into_iter()
        .map(|entry| TemplateSummary {
            latest: entry.latest,
            versions: entry.versions,
        })
        .collect();
    Ok(Json(TemplateList { templates }))
}

/// Saves a template: a new name is version 1, an existing name gets the next version.
#[utoipa::path(post, path = "/v1/templates", tag = "templates", request_body = SaveTemplate,
    responses(
        (status = 201, description = "Saved, with its version", body = PlanTemplate),
        (status = 404, description = "`not_found`: no stored plan `plan_id` (or another owner's)", body = ErrorBody),
    ))]
async fn save_template(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<SaveTemplate>,
) -> Result<Response, ApiError> {
    let plan = match (body.plan, &body.plan_id) {
        (Some(plan), None) => plan,
        (None, Some(id)) => {
            let stored = load(&state, &caller, id).await?;
            let literals: Vec<(String, String)> = body.literals.into_iter().collect();
            PlanTemplate::parameterize(&stored.plan, &literals)
        }
        _ => {
            return Err(ApiError::new(
                "bad_request",
                "give exactly one of `plan` (a document with {{param}} placeholders) and `plan_id`",
            ));
        }
    };
    let template = PlanTemplate::new(&body.name, &body.description, plan, body.parameters)
        .map_err(bad_template)?;
    let saved = state.store.save_template(template, &caller.actor()).await?;
    Ok((StatusCode::CREATED, Json(saved)).into_response())
}

/// One template: the newest version, or `?version=`.
#[utoipa::path(get, path = "/v1/templates/{name}", tag = "templates",
    params(("name" = String, Path, description = "The template name"), TemplateVersion),
    responses(
        (status = 200, description = "The template", body = PlanTemplate),
        (status = 404, description = "`not_found`: no such template or version", body = ErrorBody),
    ))]
async fn get_template(
    State(state): State<AppState>,
    _caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<TemplateVersion>,
) -> Result<Json<PlanTemplate>, ApiError> {
    Ok(Json(state.store.get_template(&name, query.version).await?))
}

/// Deletes a template: all its versions. One version is `DELETE /v1/templates/{name}/versions/{version}`;
/// a `?version=` here is refused (`400`, naming that route), so that a client meaning one version
/// never deletes all.
#[utoipa::path(delete, path = "/v1/templates/{name}", tag = "templates",
    params(("name" = String, Path, description = "The template name")),
    responses(
        (status = 204, description = "Deleted, every version"),
        (status = 400, description = "`bad_request`: a `version` query (delete one version at `/v1/templates/{name}/versions/{version}`)", body = ErrorBody),
        (status = 404, description = "`not_found`: no such template", body = ErrorBody),
    ))]
async fn delete_template(
    State(state): State<AppState>,
    _caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    // (`?version=` never gets here: the guard refuses the query parameters a route does not
    // take, and names the route that deletes one version.)
    state.store.delete_template(&name, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One version of a template.
#[utoipa::path(get, path = "/v1/templates/{name}/versions/{version}", tag = "templates",
    params(
        ("name" = String, Path, description = "The template name"),
        ("version" = u32, Path, description = "The version"),
    ),
    responses(
        (status = 200, description = "The template at that version", body = PlanTemplate),
        (status = 404, description = "`not_found`: no such template or version", body = ErrorBody),
    ))]
async fn get_template_version(
    State(state): State<AppState>,
    _caller: Caller,
    ApiPath((name, version)): ApiPath<(String, u32)>,
) -> Result<Json<PlanTemplate>, ApiError> {
    Ok(Json(state.store.get_template(&name, Some(version)).await?))
}

/// Deletes one version of a template; the others stay.
#[utoipa::path(delete, path = "/v1/templates/{name}/versions/{version}", tag = "templates",
    params(
        ("name" = String, Path, description = "The template name"),
        ("version" = u32, Path, description = "The version"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "`not_found`: no such template or version", body = ErrorBody),
    ))]
async fn delete_template_version(
    State(state): State<AppState>,
    _caller: Caller,
    ApiPath((name, version)): ApiPath<(String, u32)>,
) -> Result<StatusCode, ApiError> {
    state.store.delete_template(&name, Some(version)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Instantiates a template with arguments into a new plan, validated again against the
/// server's current catalog. Stored for review unless it has errors (`422 invalid_plan` with
/// the diagnostics) or `dry_run` is set (`200` with the plan and diagnostics).
#[utoipa::path(post, path = "/v1/templates/{name}/instantiate", tag = "templates",
    params(("name" = String, Path, description = "The template name")),
    request_body = Instantiate,
    responses(
        (status = 201, description = "The new plan, stored for review, and the engine's warnings", body = Instantiated),
        (status = 200, description = "`dry_run`: the plan and the engine's diagnostics, nothing stored", body = Preview),
        (status = 404, description = "`not_found`: no such template or version", body = ErrorBody),
        (status = 422, description = "`invalid_plan`: the plan has errors against the current catalog (a tool gone or changed, an argument that does not fit); `details` is the diagnostics list", body = ErrorBody),
    ))]
async fn instantiate(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<Instantiate>,
) -> Result<Response, ApiError> {
    let mut what = Instantiation::new(name, body.arguments);
    what.version = body.version;
    what.options = body.options.unwrap_or_default();
    what.conversation_id = body.conversation_id;
    what.owner = caller.0.clone();
    let instance = state.service.instantiate(&what).await?;
    if body.dry_run {
        return Ok(Json(Preview {
            plan: instance.plan,
            diagnostics: instance.diagnostics,
        })
        .into_response());
    }
    let diagnostics = instance.diagnostics.clone();
    let stored = state
        .service
        .submit_instance(instance, &caller.actor())
        .await?;
    crate::events::publish_stored(&state.bus, "plan_created", &stored);
    Ok((
        StatusCode::CREATED,
        Json(Instantiated {
            stored,
            diagnostics,
        }),
    )
        .into_response())
}

/// The template routes, for `routes::api()`.
pub(crate) fn api() -> utoipa_axum::router::OpenApiRouter<AppState> {
    use utoipa_axum::routes;
    utoipa_axum::router::OpenApiRouter::new()
        .routes(routes!(list_templates, save_template))
        .routes(routes!(get_template, delete_template))
        .routes(routes!(get_template_version, delete_template_version))
        .routes(routes!(instantiate))
}
