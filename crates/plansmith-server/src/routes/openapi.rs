//! The OpenAPI 3.1 document of the API, generated from the code: every route is registered
//! through utoipa-axum (`routes!`), so each handler's `#[utoipa::path]` and the schemas of its
//! types (derived with `utoipa::ToSchema`, in core and the store under their `openapi`
//! feature) make up the document. The error responses every operation can give come from the
//! one error table ([`crate::ERROR_TABLE`]) and are added here, so they are never forgotten
//! on a route.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, HeaderBuilder, InfoBuilder, OpenApi, OpenApiBuilder,
    PathItem, Ref, RefOr, ResponseBuilder, SecurityRequirement, Tag,
};
use utoipa::openapi::{ObjectBuilder, Type, path::Operation};
use utoipa::{PartialSchema, ToSchema};

use crate::error::ErrorBody;
use crate::events::PlanBusEvent;

/// The document before the routes are added: info, tags, the bearer scheme, shared schemas.
pub(crate) fn base() -> OpenApi {
    let mut info = InfoBuilder::new()
        .title("plansmith")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "A planning engine for LLM agents as an HTTP service: plan a request, review it \
             (accept, reject, edit, answer questions), mark steps, follow live events. Every error \
             is `{code, message, details}` (see the `ErrorBody` schema for the codes). Every \
             answer carries `x-request-id`: the request's own (1 to 128 letters, digits, `.`, \
             `_`, `:`, `-`) or a new one; the server's access log names requests by it.",
        ))
        .build();
    info.license = Some(utoipa::openapi::License::new(env!("CARGO_PKG_LICENSE")));
    let components = ComponentsBuilder::new()
        .schema(ErrorBody::name(), ErrorBody::schema())
        .schema(PlanBusEvent::name(), PlanBusEvent::schema())
        // The data of the `exec_run` event, with why the run stopped.
        .schema(
            plansmith_store::ExecRun::name(),
            plansmith_store::ExecRun::schema(),
        )
        .schema(
            plansmith_store::StopReason::name(),
            plansmith_store::StopReason::schema(),
        )
        .security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API token from the server's configuration; it names the owner whose \
                         plans the caller sees. Not needed when the server has no tokens \
                         (loopback, single user).",
                    ))
                    .build(),
            ),
        )
        .build();
    OpenApiBuilder::new()
        .info(info)
        .components(Some(components))
        // Either no credentials (server without tokens) or a bearer token.
        .security(Some([
            SecurityRequirement::default(),
            SecurityRequirement::new("bearer", Vec::<String>::new()),
        ]))
        .tags(Some([
            tag("plans", "Plans: create, review, mark, follow"),
            tag(
                "templates",
                "Plan templates: save, list, get, delete, instantiate",
            ),
            tag("service", "Health, metrics, this document, the review page"),
        ]))
        .build()
}

fn tag(name: &str, description: &str) -> Tag {
    let mut tag = Tag::new(name);
    tag.description = Some(description.to_owned());
    tag
}

/// The whole document, as served at `/openapi.json`: the routes' operations, the error
/// responses of the table, and unsigned integers bounded as the server reads them.
pub fn document() -> Value {
    let mut spec = crate::routes::api().into_openapi();
    for (path, item) in spec.paths.paths.iter_mut() {
        for operation in operations(item) {
            add_error_responses(path, operation);
        }
    }
    let mut value = serde_json::to_value(&spec).unwrap_or(Value::Null);
    bound_unsigned(&mut value);
    plain_descriptions(&mut value);
    closed_request_bodies(&mut value);
    value
}

/// An `allOf` of plain objects (a struct with a flattened struct) as one closed object: the
/// members' properties and required names together, nothing else allowed. `None` when a member
/// is anything else. (`unevaluatedProperties: false` on the `allOf` would close it too, but a
/// member that fails, say for a missing `query`, then counts all its fields as unknown.)
fn merged_all_of(document: &Value, schema: &Value) -> Option<serde_json::Map<String, Value>> {
    let members = schema.get("allOf")?.as_array()?;
    let mut properties = serde_json::Map::new();
    let mut required: Vec<Value> = Vec::new();
    for member in members {
        let member = match member.get("$ref").and_then(Value::as_str) {
            Some(reference) => document.pointer(reference.strip_prefix('#')?)?,
            None => member,
        };
        let object = member.as_object()?;
        let plain = object.get("type").and_then(Value::as_str) == Some("object")
            && object.keys().all(|key| {
                matches!(
                    key.as_str(),
                    "type" | "description" | "properties" | "required" | "additionalProperties"
                )
            });
        if !plain {
            return None;
        }
        if let Some(Value::Object(more)) = object.get("properties") {
            properties.extend(more.clone());
        }
        if let Some(Value::Array(names)) = object.get("required") {
            required.extend(names.iter().cloned());
        }
    }
    let mut merged = serde_json::Map::new();
    merged.insert("type".into(), Value::from("object"));
    if let Some(description) = schema.get("description") {
        merged.insert("description".into(), description.clone());
    }
    if !required.is_empty() {
        merged.insert("required".into(), Value::Array(required));
    }
    merged.insert("properties".into(), Value::Object(properties));
    merged.insert("additionalProperties".into(), Value::Bool(false));
    Some(merged)
}

/// The names of the schemas of the JSON request bodies (`#/components/schemas/NAME`).
fn request_body_schemas(document: &Value) -> Vec<String> {
    let Some(paths) = document.get("paths").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut names: Vec<String> = paths
        .values()
        .filter_map(Value::as_object)
        .flat_map(|item| item.values())
        .filter_map(|operation| {
            operation
                .pointer("/requestBody/content/application~1json/schema/$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Objects inside request bodies that are closed too: the planning knobs (`options`), where a
/// misspelt `max_step` planned with the default. (Only in the document, which the bodies are
/// checked against: the engine still reads a stored request with a knob it no longer has. The
/// other nested objects, messages, turns and feedback, carry data clients copy from elsewhere
/// and stay open.)
const CLOSED_NESTED: [&str; 1] = ["PlanOptions"];

/// A request body names every field it takes: a field it does not know (a misspelt
/// `auto_acept`, silently ignored before) is refused with its name. utoipa closes a plain
/// struct with `deny_unknown_fields`, but not a struct with a flattened part (written as
/// `allOf`) nor the variants of a tagged enum (`oneOf`); both are closed here.
fn closed_request_bodies(document: &mut Value) {
    for name in CLOSED_NESTED {
        if let Some(schema) = document
            .pointer_mut(&format!("/components/schemas/{name}"))
            .and_then(Value::as_object_mut)
            .filter(|schema| schema.contains_key("properties"))
        {
            schema
                .entry("additionalProperties")
                .or_insert(Value::Bool(false));
        }
    }
    for name in request_body_schemas(document) {
        let pointer = format!("/components/schemas/{name}");
        let merged = document
            .pointer(&pointer)
            .and_then(|schema| merged_all_of(document, schema));
        let Some(schema) = document
            .pointer_mut(&pointer)
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        if let Some(merged) = merged {
            *schema = merged;
        }
        if let Some(Value::Array(variants)) = schema.get_mut("oneOf") {
            for variant in variants.iter_mut().filter_map(Value::as_object_mut) {
                if variant.contains_key("properties") {
                    variant
                        .entry("additionalProperties")
                        .or_insert(Value::Bool(false));
                }
            }
        }
    }
}

/// The document, built once for the server's own uses (served, bodies checked, query
/// parameters checked).
fn built() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(document)
}

/// The document as JSON, written once.
pub(crate) fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| built().to_string())
}

/// Validators of the JSON request bodies, by the name of their schema in the document, built
/// once. serde reads more than the document allows (a struct out of an array: `"options": []`
/// filled every option with its default, found by schemathesis), so every body is checked
/// against the schema the clients were given before serde reads it.
pub(crate) fn body_validators() -> &'static HashMap<String, jsonschema::Validator> {
    static VALIDATORS: OnceLock<HashMap<String, jsonschema::Validator>> = OnceLock::new();
    VALIDATORS.get_or_init(|| {
        let document = built();
        let mut validators = HashMap::new();
        for name in request_body_schemas(document) {
            let reference = format!("#/components/schemas/{name}");
            // The root carries the document's components so that every `$ref` inside resolves.
            let schema = serde_json::json!({
                "$ref": reference,
                "components": document.get("components").cloned().unwrap_or(Value::Null),
            });
            match jsonschema::validator_for(&schema) {
                Ok(validator) => {
                    validators.insert(name, validator);
                }
                // A schema utoipa wrote that the validator cannot compile: the body is then
                // only read by serde; the test `every_request_body_has_a_validator` catches it.
                Err(err) => tracing::warn!(%name, %err, "request body schema does not compile"),
            }
        }
        validators
    })
}

/// The query parameters each API operation takes, by method and path as the router matches
/// them (`GET /v1/plans` → `owner`, `state`, …; `DELETE /v1/plans/{id}` → none), read once
/// from the document. The guard refuses any other name: a misspelt filter would otherwise list
/// every plan, and `DELETE /v1/plans/{id}?version=2` would delete all the versions.
pub(crate) fn query_parameters() -> &'static HashMap<(String, String), Vec<String>> {
    static PARAMETERS: OnceLock<HashMap<(String, String), Vec<String>>> = OnceLock::new();
    PARAMETERS.get_or_init(|| query_parameters_of(built()))
}

fn query_parameters_of(document: &Value) -> HashMap<(String, String), Vec<String>> {
    let mut table = HashMap::new();
    let Some(paths) = document.get("paths").and_then(Value::as_object) else {
        return table;
    };
    for (path, item) in paths {
        let Some(item) = item.as_object() else {
            continue;
        };
        for (method, operation) in item {
            if !["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                continue;
            }
            let names = operation
                .get("parameters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|parameter| parameter.get("in").and_then(Value::as_str) == Some("query"))
                .filter_map(|parameter| parameter.get("name").and_then(Value::as_str))
                .map(str::to_owned)
                .collect();
            table.insert((method.to_ascii_uppercase(), path.clone()), names);
        }
    }
    table
}

/// utoipa writes `u32` as `{"type": "integer", "format": "int32", "minimum": 0}`, which
/// clients read as at most 2^31 - 1, and `u64` / `usize` without an upper bound; the server
/// reads the whole unsigned range and refuses more. Say so: drop the signed format and give
/// the real maximum (found by a schemathesis run: `offset=2147483648` was "schema-violating"
/// yet accepted).
fn bound_unsigned(value: &mut Value) {
    each_object(value, &mut |map| {
        let unsigned = map.get("type").and_then(Value::as_str) == Some("integer")
            && map.get("minimum").and_then(Value::as_i64) == Some(0)
            && !map.contains_key("maximum");
        if unsigned {
            let max = match map.get("format").and_then(Value::as_str) {
                Some("int32") => Some(Value::from(u32::MAX)),
                Some("int64") | None => Some(Value::from(u64::MAX)),
                Some(_) => None,
            };
            if let Some(max) = max {
                map.remove("format");
                map.insert("maximum".to_owned(), max);
            }
        }
    });
}

/// The descriptions come from doc comments, whose rustdoc links (``[`Page::total`]``) mean
/// nothing to a client in another language: each becomes the code span of its last segment
/// (`` `total` ``), the JSON name where it names a field.
fn plain_descriptions(value: &mut Value) {
    each_object(value, &mut |map| {
        if let Some(Value::String(text)) = map.get_mut("description") {
            *text = without_doc_links(text);
        }
    });
}

/// Calls `visit` on every object in `value`, outermost first.
fn each_object(value: &mut Value, visit: &mut impl FnMut(&mut serde_json::Map<String, Value>)) {
    match value {
        Value::Object(map) => {
            visit(map);
            map.values_mut().for_each(|child| each_object(child, visit));
        }
        Value::Array(items) => items.iter_mut().for_each(|item| each_object(item, visit)),
        _ => {}
    }
}

/// ``[`a::b::C`]`` → `` `C` ``; a link with a target (``[`C`](url)``) is left alone.
fn without_doc_links(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("[`") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("`]") {
            Some(end) if !after[end + 2..].starts_with('(') && !after[..end].contains('`') => {
                let path = &after[..end];
                let name = path.rsplit("::").next().unwrap_or(path);
                out.push('`');
                out.push_str(name);
                out.push('`');
                rest = &after[end + 2..];
            }
            _ => {
                out.push_str("[`");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.patch.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// Adds the error responses an operation can give because of where it sits (the guard, the
/// extractors, tenancy), unless the operation documents that status itself.
fn add_error_responses(path: &str, operation: &mut Operation) {
    // The API and the metrics (counts of every owner's plans) need a token when tokens are
    // configured; the probes, this document and the review page (static, no data) do not.
    let api = path.starts_with("/v1/") || path == "/metrics";
    let has_input = operation.request_body.is_some()
        || operation
            .parameters
            .as_ref()
            .is_some_and(|params| !params.is_empty());
    let has_body = operation.request_body.is_some();
    let mut codes: Vec<(&str, &str)> = Vec::new();
    if has_input || api {
        codes.push((
            "400",
            "`bad_request`: malformed JSON, query or path parameter, or a query parameter the \
             operation does not take",
        ));
    }
    if api {
        codes.push((
            "401",
            "`unauthorized`: tokens are configured and the bearer token is missing or unknown",
        ));
    }
    // Every route: the guard refuses a request from the wrong site before anything else.
    codes.push((
        "403",
        "`forbidden`: without tokens, a `Host` that is not a loopback name (DNS rebinding); or \
         a browser `Origin` that is neither this server's nor listed in `cors_origins`",
    ));
    if path.contains("{step}") {
        codes.push((
            "404",
            "`not_found`: no such plan or version (or another owner's), or no such step in it",
        ));
    } else if path.contains("{id}") || path.contains("{name}") {
        codes.push((
            "404",
            "`not_found`: no such plan or version (or another owner's)",
        ));
    }
    if has_body {
        codes.push((
            "408",
            "`request_timeout`: the body stalled (nothing for the header timeout)",
        ));
        codes.push(("413", "`payload_too_large`: the body is over the limit"));
        codes.push((
            "415",
            "`unsupported_media_type`: the body is not `application/json`",
        ));
    }
    codes.push((
        "429",
        "`rate_limited`: over the owner's requests per second; see `Retry-After`",
    ));
    if api {
        codes.push(("500", "`internal`: the store failed"));
    }
    codes.push((
        "503",
        "`timeout`: no answer within the configured request timeout",
    ));
    for (status, description) in codes {
        if operation.responses.responses.contains_key(status) {
            continue;
        }
        let mut response = ResponseBuilder::new().description(description).content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(ErrorBody::name())))
                .build(),
        );
        if status == "429" {
            response = response.header(
                "Retry-After",
                HeaderBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::Integer)))
                    .description(Some("Seconds until a request is admitted again"))
                    .build(),
            );
        }
        operation
            .responses
            .responses
            .insert(status.to_owned(), RefOr::T(response.build()));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// `docs/reference/openapi.json` is the document the server serves at `/openapi.json`;
    /// `PLANSMITH_UPDATE_REFERENCE=1 cargo test -p plansmith-server reference` rewrites it.
    #[test]
    fn the_checked_in_openapi_reference_is_what_the_server_serves() {
        let mut generated = serde_json::to_string_pretty(&document()).unwrap();
        generated.push('\n');
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/reference/openapi.json");
        if std::env::var_os("PLANSMITH_UPDATE_REFERENCE").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "{} is not the document the server serves: run \
             `PLANSMITH_UPDATE_REFERENCE=1 cargo test -p plansmith-server reference` and commit it",
            path.display()
        );
    }

    #[test]
    fn descriptions_carry_no_rustdoc_links() {
        assert_eq!(
            without_doc_links("capped by [`ListFilter::total_cap`] (see [`Page`]); [`x`](u) [`"),
            "capped by `total_cap` (see `Page`); [`x`](u) [`"
        );
        let document = document();
        let text = document.to_string();
        // Before, 11 schemas said things like [`Page::total`] to clients in any language.
        assert!(!text.contains("[`"), "a rustdoc link in the document");
        // `Page::total`'s description, whose links named `ListFilter::total_cap` and
        // `Page::total_exact`, keeps their names.
        let total = document["components"]["schemas"]["Page"]["properties"]["total"]["description"]
            .as_str()
            .unwrap_or_default();
        assert!(
            total
                .ends_with("the cap of `total_cap` when\nmore do (then `total_exact` is `false`)."),
            "the links' names went missing: {total}"
        );
    }

    #[test]
    fn every_request_body_has_a_validator() {
        let document = document();
        let mut bodies = 0;
        for item in document["paths"]
            .as_object()
            .into_iter()
            .flat_map(|p| p.values())
        {
            for operation in item.as_object().into_iter().flat_map(|o| o.values()) {
                let Some(body) = operation.get("requestBody") else {
                    continue;
                };
                let reference = body
                    .pointer("/content/application~1json/schema/$ref")
                    .and_then(Value::as_str)
                    .unwrap_or_else(|| panic!("a JSON body without a named schema: {body}"));
                let name = reference.trim_start_matches("#/components/schemas/");
                assert!(
                    body_validators().contains_key(name),
                    "no validator for {name}"
                );
                bodies += 1;
            }
        }
        assert!(bodies >= 6, "only {bodies} request bodies in the document");
        // and the validators are as strict as the document: a nested struct is an object
        let create = &body_validators()["CreatePlan"];
        assert!(create.is_valid(&serde_json::json!({"query": "x", "options": {}})));
        assert!(!create.is_valid(&serde_json::json!({"query": "x", "options": []})));
    }

    #[test]
    fn every_request_body_refuses_fields_it_does_not_know() {
        let validators = body_validators();
        let known = [
            (
                "CreatePlan",
                json!({"query": "x", "auto_accept": true, "locale": "fr"}),
            ),
            ("ReviewFeedback", json!({"action": "reject", "text": "no"})),
            ("StepUpdate", json!({"status": "completed"})),
            ("RunRequest", json!({})),
        ];
        for (name, body) in known {
            let validator = &validators[name];
            assert!(validator.is_valid(&body), "{name}: {body}");
            let mut with_typo = body.clone();
            with_typo["auto_acept"] = json!(true);
            let errors: Vec<String> = validator
                .iter_errors(&with_typo)
                .map(|e| e.to_string())
                .collect();
            assert!(
                errors.iter().any(|e| e.contains("auto_acept")),
                "{name} took an unknown field: {errors:?}"
            );
        }
        // Every body is closed one way or another.
        let document = document();
        for name in request_body_schemas(&document) {
            let schema = &document["components"]["schemas"][&name];
            let closed = schema["additionalProperties"] == json!(false)
                || schema["oneOf"].as_array().is_some_and(|variants| {
                    variants
                        .iter()
                        .all(|v| v["additionalProperties"] == json!(false))
                });
            assert!(closed, "{name} is open: {schema}");
        }
    }
}
