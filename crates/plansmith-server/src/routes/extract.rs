//! The extractors: a JSON body checked against its schema in the OpenAPI document, a query
//! string, path parameters and the caller, each rejected through the error table.

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, rejection};

/// Schema problems of a request body listed in the error's details.
const MAX_BODY_PROBLEMS: usize = 20;

/// A JSON body whose rejections come out of the error table.
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<T: DeserializeOwned + ToSchema, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let value = match Json::<serde_json::Value>::from_request(req, state).await {
            Ok(Json(value)) => value,
            Err(err) => return Err(rejection(err.status(), err.body_text())),
        };
        read_body(value).map(ApiJson)
    }
}

/// Reads a request body of type `T` out of its JSON, checked against its OpenAPI schema.
fn read_body<T: DeserializeOwned + ToSchema>(value: Value) -> Result<T, ApiError> {
    // Every body of this API is a JSON object: serde would also read a struct out of an
    // array (`[]` fills an all-optional struct), which the OpenAPI document does not allow.
    if !value.is_object() {
        return Err(ApiError::new(
            "bad_request",
            "the request body must be a JSON object",
        ));
    }
    // The body must match the schema the clients were given, also where serde is laxer
    // (a nested struct read out of an array).
    if let Some(validator) = crate::routes::openapi::body_validators().get(T::name().as_ref()) {
        let problems: Vec<(String, String)> = validator
            .iter_errors(&value)
            .take(MAX_BODY_PROBLEMS)
            .map(|err| explain(&err))
            .collect();
        if let Some(message) = body_problems_message(&problems) {
            let problems: Vec<Value> = problems
                .iter()
                .map(|(path, message)| json!({"path": path, "message": message}))
                .collect();
            return Err(
                ApiError::new("bad_request", message).with_details(json!({ "problems": problems }))
            );
        }
    }
    serde_json::from_value(value)
        .map_err(|err| ApiError::new("bad_request", format!("invalid request body: {err}")))
}

/// The error message for a body's schema problems: the first, where it is (a place in the
/// body, or the body itself), and how many more `details.problems` lists.
fn body_problems_message(problems: &[(String, String)]) -> Option<String> {
    let (path, message) = problems.first()?;
    let mut text = match path.as_str() {
        "" => format!("invalid request body: {message}"),
        path => format!("invalid request body at `{path}`: {message}"),
    };
    match problems.len() - 1 {
        0 => {}
        1 => text.push_str(" (1 more problem in `details.problems`)"),
        more => text.push_str(&format!(" ({more} more problems in `details.problems`)")),
    }
    Some(text)
}

/// Where a body breaks its schema, and how, in words a client can act on. A value that none
/// of a `oneOf`/`anyOf` union's members accepts (a feedback `action`, a step `status`) is
/// explained by the union, not by the keyword. The union's tag is the place where most members
/// want a fixed value (`const` or `enum`): when every member rejected the value there, the
/// allowed values are listed; otherwise the member that came closest speaks — one whose tag
/// matched, not of another JSON type altogether, with the fewest problems.
fn explain(err: &jsonschema::ValidationError<'_>) -> (String, String) {
    use jsonschema::error::ValidationErrorKind as Kind;
    let here = err.instance_path().to_string();
    let members = match err.kind() {
        Kind::OneOfNotValid { context } | Kind::AnyOf { context } => context,
        // jsonschema names two options and counts the rest: all of them help more.
        Kind::Enum { options } => {
            let options: Vec<String> = options
                .as_array()
                .map(|all| all.iter().map(Value::to_string).collect())
                .unwrap_or_default();
            return (
                here,
                format!("{} is not one of {}", err.instance(), options.join(", ")),
            );
        }
        // "Additional / Unevaluated properties are not allowed" is the schema's jargon.
        Kind::AdditionalProperties { unexpected } | Kind::UnevaluatedProperties { unexpected } => {
            let names: Vec<String> = unexpected
                .iter()
                .map(|n| Value::from(n.as_str()).to_string())
                .collect();
            let noun = if names.len() == 1 { "field" } else { "fields" };
            return (
                here,
                format!(
                    "unknown {noun} {} (the body's schema is in /openapi.json)",
                    names.join(", ")
                ),
            );
        }
        _ => return (here, err.to_string()),
    };
    let fixed = |error: &jsonschema::ValidationError<'_>| match error.kind() {
        Kind::Constant { expected_value } => Some(vec![(**expected_value).clone()]),
        Kind::Enum { options } => Some(options.as_array().cloned().unwrap_or_default()),
        _ => None,
    };
    let mut wanted_at: Vec<(String, usize)> = Vec::new();
    for member in members {
        let mut paths: Vec<String> = member
            .iter()
            .filter(|error| fixed(error).is_some())
            .map(|error| error.instance_path().to_string())
            .collect();
        paths.sort_unstable();
        paths.dedup();
        for path in paths {
            match wanted_at.iter_mut().find(|(at, _)| *at == path) {
                Some((_, n)) => *n += 1,
                None => wanted_at.push((path, 1)),
            }
        }
    }
    let tag = wanted_at
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(at, _)| at);
    let at_tag = |member: &[jsonschema::ValidationError<'static>]| -> Option<usize> {
        member.iter().position(|error| {
            fixed(error).is_some() && Some(error.instance_path().to_string()) == tag
        })
    };
    if let Some(tag) = &tag
        && !members.is_empty()
        && members.iter().all(|member| at_tag(member).is_some())
    {
        let mut allowed: Vec<Value> = Vec::new();
        let mut got = None;
        let at_tags = members
            .iter()
            .filter_map(|member| at_tag(member).and_then(|idx| member.get(idx)));
        for error in at_tags {
            got.get_or_insert_with(|| error.instance().clone().into_owned());
            for value in fixed(error).unwrap_or_default() {
                if !allowed.contains(&value) {
                    allowed.push(value);
                }
            }
        }
        let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        let got = got.unwrap_or(Value::Null);
        return (
            tag.clone(),
            format!("{got} is not one of {}", allowed.join(", ")),
        );
    }
    let other_type = |member: &[jsonschema::ValidationError<'static>]| {
        member.iter().any(|error| {
            matches!(error.kind(), Kind::Type { .. }) && error.instance_path().to_string() == here
        })
    };
    // No member takes a value of this JSON type: say which types they take.
    let mut types: Vec<&'static str> = Vec::new();
    for error in members.iter().flatten() {
        if let Kind::Type { kind } = error.kind()
            && error.instance_path().to_string() == here
        {
            let names: Vec<&'static str> = match kind {
                jsonschema::error::TypeKind::Single(one) => vec![one.as_str()],
                jsonschema::error::TypeKind::Multiple(set) => {
                    set.iter().map(|t| t.as_str()).collect()
                }
            };
            for name in names {
                if !types.contains(&name) {
                    types.push(name);
                }
            }
        }
    }
    if !members.is_empty() && members.iter().all(|member| other_type(member)) {
        return (
            here,
            format!(
                "{} is not of type \"{}\"",
                err.instance(),
                types.join("\" or \"")
            ),
        );
    }
    let closest = members
        .iter()
        .filter(|member| !member.is_empty())
        .min_by_key(|member| (other_type(member), at_tag(member).is_some(), member.len()));
    match closest.and_then(|member| member.first()) {
        Some(error) => explain(error),
        None => (here, err.to_string()),
    }
}

/// A query string whose rejections come out of the error table.
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(ApiQuery(value)),
            Err(err) => Err(rejection(err.status(), err.body_text())),
        }
    }
}

/// Path parameters whose rejections come out of the error table.
pub(crate) struct ApiPath<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(err) => Err(rejection(err.status(), err.body_text())),
        }
    }
}

/// Who calls: the owner its token maps to, or `None` without tokens (single user, sees all).
pub(crate) struct Caller(pub(crate) Option<String>);

impl Caller {
    pub(crate) fn actor(&self) -> String {
        self.0.clone().unwrap_or_else(|| "api".to_owned())
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state.owner_of(&parts.headers).map(Caller).map_err(|()| {
            ApiError::new(
                "unauthorized",
                "a valid `Authorization: Bearer TOKEN` header is required",
            )
        })
    }
}

/// A body that may be left out (empty: the defaults), else read as [`ApiJson`] reads one.
pub(super) fn optional_body<T: DeserializeOwned + ToSchema + Default>(
    body: &[u8],
    what: &str,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let value = serde_json::from_slice(body)
        .map_err(|err| ApiError::new("bad_request", format!("invalid {what}: {err}")))?;
    read_body(value)
}
