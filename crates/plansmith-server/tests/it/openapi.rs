//! `GET /openapi.json`: an OpenAPI 3.1 document generated from the code, fetched over real
//! HTTP; every route the router serves is in it (and nothing else), every operation documents
//! the error table's body, and real responses validate against its schemas.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::Method;
use serde_json::{Value, json};

use crate::{call, create, reply, start};
use plansmith_server::{ERROR_TABLE, ServerConfig};

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// Every `$ref` in the document, recursively.
fn refs(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                if key == "$ref" {
                    if let Some(r) = value.as_str() {
                        out.insert(r.to_owned());
                    }
                } else {
                    refs(value, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// Validates `instance` against `#/components/schemas/{name}` of `spec`.
fn check_schema(spec: &Value, name: &str, instance: &Value) {
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/components/schemas/{name}"),
        "components": spec["components"],
    });
    let validator = jsonschema::validator_for(&root).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:#?}\n{instance:#}");
}

#[tokio::test]
async fn openapi_document_covers_every_route() {
    let s = start(reply("weather-email.json", 2), ServerConfig::default()).await;
    let response = s
        .client
        .get(format!("{}/openapi.json", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let spec: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    std::fs::create_dir_all(crate::root().join("target")).unwrap();
    std::fs::write(
        crate::root().join("target/openapi.json"),
        serde_json::to_string_pretty(&spec).unwrap(),
    )
    .unwrap();
    assert!(
        spec["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        spec["openapi"]
    );

    // The routes and methods the document lists.
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in METHODS {
            if item.get(method).is_some() {
                documented
                    .entry(path.clone())
                    .or_default()
                    .insert(method.to_owned());
            }
        }
    }
    let expected: BTreeMap<String, BTreeSet<String>> = [
        ("/", &["get"][..]),
        ("/healthz", &["get"]),
        ("/readyz", &["get"]),
        ("/metrics", &["get"]),
        ("/openapi.json", &["get"]),
        ("/v1/plans", &["get", "post"]),
        ("/v1/plans/{id}", &["delete", "get"]),
        ("/v1/plans/{id}/approvals", &["get", "post"]),
        ("/v1/plans/{id}/check", &["post"]),
        ("/v1/plans/{id}/events", &["get", "post"]),
        ("/v1/plans/{id}/feedback", &["post"]),
        ("/v1/plans/{id}/history", &["get"]),
        ("/v1/plans/{id}/run", &["post"]),
        ("/v1/plans/{id}/run/stop", &["post"]),
        ("/v1/plans/{id}/steps/{step}", &["patch"]),
        ("/v1/templates", &["get", "post"]),
        ("/v1/templates/{name}", &["delete", "get"]),
        ("/v1/templates/{name}/instantiate", &["post"]),
        (
            "/v1/templates/{name}/versions/{version}",
            &["delete", "get"],
        ),
    ]
    .into_iter()
    .map(|(p, m)| (p.to_owned(), m.iter().map(|m| (*m).to_owned()).collect()))
    .collect();
    assert_eq!(documented, expected);

    // Over real HTTP: on every documented path, each method is served exactly when the
    // document lists it (the router's 405 fallback answers the others), and no documented
    // route hits the 404 route fallback.
    let created = create(&s, None).await;
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    for (path, methods) in &documented {
        let concrete = path
            .replace("{id}", &id)
            .replace("{step}", "s9")
            .replace("{name}", "no-such-template");
        for method in METHODS {
            // DELETE would remove the plan the other probes use; it is probed last below.
            if method == "delete" && methods.contains(method) {
                continue;
            }
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let response = s
                .client
                .request(m, format!("{}{concrete}", s.base))
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body: Value = if response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
            {
                serde_json::from_str(&response.text().await.unwrap()).unwrap()
            } else {
                Value::Null
            };
            if methods.contains(method) {
                assert_ne!(status, 405, "{method} {path} is documented but not served");
                assert!(
                    !(status == 404 && body["message"] == "no such route"),
                    "{method} {path} is documented but not routed"
                );
            } else {
                assert_eq!(status, 405, "{method} {path} is served but not documented");
                assert_eq!(body["code"], "method_not_allowed");
            }
        }
    }
    let (status, _) = call(&s, Method::DELETE, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(status, 204);

    // Every reference resolves; the error body's codes are the table's.
    let mut all = BTreeSet::new();
    refs(&spec, &mut all);
    for r in &all {
        let name = r.strip_prefix("#/components/schemas/").unwrap();
        assert!(
            spec["components"]["schemas"].get(name).is_some(),
            "dangling {r}"
        );
    }
    let codes: Vec<&str> = spec["components"]["schemas"]["ErrorBody"]["properties"]["code"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let table: Vec<&str> = ERROR_TABLE.iter().map(|(c, _)| *c).collect();
    assert_eq!(codes, table);

    // Two types named `Feedback` (core's replanning input, the review route's body) must not
    // overwrite each other: the route's body is its own schema, with the `action` tag.
    let body = &spec["paths"]["/v1/plans/{id}/feedback"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"]["$ref"];
    assert_eq!(body, "#/components/schemas/ReviewFeedback");
    let review = spec["components"]["schemas"]["ReviewFeedback"].to_string();
    assert!(
        review.contains("\"action\"") && review.contains("answer"),
        "{review}"
    );
    // Unsigned integers carry their real range (u32: not int32's 2^31 - 1).
    let version = &spec["components"]["schemas"]["Plan"]["properties"]["version"];
    assert_eq!(version["maximum"], u32::MAX, "{version}");
    assert!(version.get("format").is_none(), "{version}");

    // Every operation documents its error statuses with the error body; 429 with Retry-After.
    let mut statuses = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            assert!(
                op["description"].as_str().is_some_and(|d| !d.is_empty())
                    || op["summary"].is_string(),
                "{method} {path} has no description"
            );
            for (status, response) in op["responses"].as_object().unwrap() {
                statuses.insert(status.parse::<u16>().unwrap());
                if status.starts_with('4') || status.starts_with('5') {
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/ErrorBody",
                        "{method} {path} {status}"
                    );
                }
            }
            assert!(
                op["responses"]["429"]["headers"]["Retry-After"].is_object(),
                "{method} {path}"
            );
            if path.starts_with("/v1/") {
                assert!(op["responses"]["401"].is_object(), "{method} {path}");
            }
        }
    }
    for (code, status) in ERROR_TABLE {
        if *code != "method_not_allowed" {
            assert!(
                statuses.contains(status),
                "no operation documents {status} ({code})"
            );
        }
    }
}

#[tokio::test]
async fn responses_validate_against_the_document() {
    let mut turns = reply("weather-email.json", 1);
    turns.extend(reply("missing-recipient.json", 1));
    let s = start(turns, ServerConfig::default()).await;
    let (_, spec) = call(&s, Method::GET, "/openapi.json", None, None).await;
    let (status, created) = call(
        &s,
        Method::POST,
        "/v1/plans",
        Some(json!({"query": "Email Bob the weather in Paris", "conversation_id": "c1"})),
        None,
    )
    .await;
    assert_eq!(status, 201);
    check_schema(&spec, "Created", &created);
    let (_, needs) = call(
        &s,
        Method::POST,
        "/v1/plans",
        Some(crate::needs_input()),
        None,
    )
    .await;
    check_schema(&spec, "Created", &needs);
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let (_, got) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    check_schema(&spec, "PlanOrVersion", &got);
    check_schema(&spec, "StoredPlan", &got);
    let (_, v1) = call(
        &s,
        Method::GET,
        &format!("/v1/plans/{id}?version=1"),
        None,
        None,
    )
    .await;
    check_schema(&spec, "PlanOrVersion", &v1);
    let (_, page) = call(&s, Method::GET, "/v1/plans", None, None).await;
    check_schema(&spec, "Page", &page);
    let (_, updated) = call(
        &s,
        Method::PATCH,
        &format!("/v1/plans/{id}/steps/0"),
        Some(json!({"status": "completed", "notes": "n", "result": [1]})),
        None,
    )
    .await;
    check_schema(&spec, "Updated", &updated);
    let (_, history) = call(
        &s,
        Method::GET,
        &format!("/v1/plans/{id}/history"),
        None,
        None,
    )
    .await;
    check_schema(&spec, "History", &history);
    let (_, health) = call(&s, Method::GET, "/healthz", None, None).await;
    check_schema(&spec, "Health", &health);
    let (status, ready) = call(&s, Method::GET, "/readyz", None, None).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["status"], "ready");
    check_schema(&spec, "Health", &ready);
    let (status, error) = call(&s, Method::GET, "/v1/plans/nope", None, None).await;
    assert_eq!(status, 404);
    check_schema(&spec, "ErrorBody", &error);
    // A body that breaks the schema is caught (the check can fail).
    let broken = json!({"code": "no_such_code", "message": "x", "details": null});
    let root = json!({"$ref": "#/components/schemas/ErrorBody", "components": spec["components"]});
    assert!(!jsonschema::validator_for(&root).unwrap().is_valid(&broken));
}
