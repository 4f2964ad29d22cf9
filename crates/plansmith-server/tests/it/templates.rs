//! Plan templates over HTTP: save (from a document or a stored plan), list, get, instantiate
//! (re-validated against the server's catalog, diagnostics in the answer), delete.

use reqwest::Method;
use serde_json::json;

use crate::{assert_error, call, create, reply, start, tokens};
use plansmith_server::ServerConfig;

/// Version 1 of the test's template, named by query.
const WEATHER_V1_QUERY: &str = "/v1/templates/weather-mail?version=1";

#[tokio::test]
async fn save_list_get_instantiate_delete() {
    let s = start(reply("weather-email.json", 1), ServerConfig::default()).await;
    let created = create(&s, None).await;
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();

    // from a stored plan: the literal "Paris" becomes {{city}}
    let save = json!({"name": "weather-mail", "description": "weather to someone",
        "plan_id": id, "literals": {"city": "Paris"},
        "parameters": [{"name": "city", "default": "Paris"}]});
    let (status, saved) = call(&s, Method::POST, "/v1/templates", Some(save), None).await;
    assert_eq!(status, 201, "{saved}");
    assert_eq!(saved["version"], 1);
    assert_eq!(
        saved["plan"]["steps"][0]["action"]["arguments"]["city"],
        "{{city}}"
    );
    // saving again adds a version; the list shows the newest and the count
    let doc = json!({"name": "weather-mail", "plan": saved["plan"],
        "parameters": [{"name": "city"}]});
    let (status, v2) = call(&s, Method::POST, "/v1/templates", Some(doc), None).await;
    assert_eq!(status, 201, "{v2}");
    assert_eq!(v2["version"], 2);
    let (status, list) = call(&s, Method::GET, "/v1/templates", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(list["templates"][0]["latest"]["version"], 2);
    assert_eq!(list["templates"][0]["versions"], 2);
    let (status, got) = call(
        &s,
        Method::GET,
        "/v1/templates/weather-mail?version=1",
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(got["parameters"][0]["default"], "Paris");

    // instantiate: stored for review, with the template recorded
    let path = "/v1/templates/weather-mail/instantiate";
    let (status, made) = call(
        &s,
        Method::POST,
        path,
        Some(json!({"arguments": {"city": "Lyon"}})),
        None,
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["stored"]["state"], "awaiting_review");
    assert_eq!(
        made["stored"]["plan"]["steps"][0]["action"]["arguments"]["city"],
        "Lyon"
    );
    assert_eq!(made["stored"]["plan"]["metadata"]["template"]["version"], 2);
    let new_id = made["stored"]["plan"]["id"].as_str().unwrap();
    let (status, _) = call(&s, Method::GET, &format!("/v1/plans/{new_id}"), None, None).await;
    assert_eq!(status, 200);
    // an argument the tool's schema refuses: the engine's diagnostics, nothing stored
    let (_, before) = call(&s, Method::GET, "/v1/plans", None, None).await;
    let body = json!({"version": 1, "arguments": {"city": "Lyon"}});
    let mut broken = saved["plan"].clone();
    broken["steps"][0]["action"]["arguments"]["unit"] = json!("kelvin");
    let (status, _) = call(
        &s,
        Method::POST,
        "/v1/templates",
        Some(json!({"name": "broken", "plan": broken, "parameters": [{"name": "city"}]})),
        None,
    )
    .await;
    assert_eq!(status, 201);
    let (status, err) = call(
        &s,
        Method::POST,
        "/v1/templates/broken/instantiate",
        Some(body),
        None,
    )
    .await;
    assert_eq!(status, 422, "{err}");
    assert_eq!(err["code"], "invalid_plan");
    let diagnostics = err["details"].as_array().unwrap();
    assert!(
        diagnostics
            .iter()
            .any(|d| d["pointer"].as_str().unwrap().contains("unit")),
        "{err}"
    );
    let (_, after) = call(&s, Method::GET, "/v1/plans", None, None).await;
    assert_eq!(before["total"], after["total"], "nothing stored");
    // a dry run shows the plan and the same diagnostics
    let (status, preview) = call(
        &s,
        Method::POST,
        "/v1/templates/broken/instantiate",
        Some(json!({"arguments": {"city": "Lyon"}, "dry_run": true})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["diagnostics"], err["details"]);
    // missing and unknown arguments, unknown templates, bad names
    let (status, err) = call(
        &s,
        Method::POST,
        "/v1/templates/broken/instantiate",
        Some(json!({})),
        None,
    )
    .await;
    assert_error(status, &err, 400, "bad_request");
    let (status, err) = call(
        &s,
        Method::POST,
        path,
        Some(json!({"arguments": {"town": "x"}})),
        None,
    )
    .await;
    assert_error(status, &err, 400, "bad_request");
    let (status, err) = call(
        &s,
        Method::POST,
        path,
        Some(json!({"options": [], "conversation_id": null})),
        None,
    )
    .await;
    assert_error(status, &err, 400, "bad_request");
    let (status, err) = call(&s, Method::GET, "/v1/templates/nope", None, None).await;
    assert_error(status, &err, 404, "not_found");
    let (status, err) = call(
        &s,
        Method::POST,
        "/v1/templates",
        Some(json!({"name": "bad name!", "plan": saved["plan"], "parameters": [{"name": "city"}]})),
        None,
    )
    .await;
    assert_error(status, &err, 400, "bad_request");

    // a `?version=` on the whole-template DELETE is refused, and deletes nothing
    let (status, err) = call(&s, Method::DELETE, WEATHER_V1_QUERY, None, None).await;
    assert_error(status, &err, 400, "bad_request");
    let message = err["message"].as_str().unwrap();
    assert_eq!(
        message,
        "unknown query parameter `version` for DELETE /v1/templates/{name}: it takes none (it \
         deletes every version; to delete version 1 only, use DELETE \
         /v1/templates/{name}/versions/1)",
        "{err}"
    );
    // then: version 1 is there, is deleted, is gone (both ways of naming it), and deleting it
    // again is a 404; version 2, the newest, stays (deleting a version is not deleting the
    // template); a version that is not a number is a 400
    let v1 = "/v1/templates/weather-mail/versions/1";
    for (method, path, expected, version) in [
        (Method::GET, v1, 200, Some(1)),
        (Method::DELETE, v1, 204, None),
        (Method::GET, v1, 404, None),
        (Method::GET, WEATHER_V1_QUERY, 404, None),
        (Method::DELETE, v1, 404, None),
        (Method::GET, "/v1/templates/weather-mail", 200, Some(2)),
        (
            Method::GET,
            "/v1/templates/weather-mail/versions/2",
            200,
            Some(2),
        ),
        (
            Method::GET,
            "/v1/templates/weather-mail/versions/two",
            400,
            None,
        ),
    ] {
        let (status, got) = call(&s, method.clone(), path, None, None).await;
        assert_eq!(status, expected, "{method} {path}: {got}");
        if let Some(version) = version {
            assert_eq!(got["version"], version, "{method} {path}: {got}");
        }
    }
    let (status, _) = call(&s, Method::DELETE, "/v1/templates/weather-mail", None, None).await;
    assert_eq!(status, 204);
    let (status, _) = call(&s, Method::GET, "/v1/templates/weather-mail", None, None).await;
    assert_eq!(status, 404);
    let (status, _) = call(&s, Method::DELETE, "/v1/templates/weather-mail", None, None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn instantiated_plans_belong_to_the_caller() {
    let s = start(
        reply("weather-email.json", 1),
        tokens(&[("ta", "alice"), ("tb", "bob")]),
    )
    .await;
    let (status, _) = call(&s, Method::GET, "/v1/templates", None, None).await;
    assert_eq!(status, 401);
    let (_, created) = call(
        &s,
        Method::POST,
        "/v1/plans",
        Some(json!({"query": "Email Bob the weather in Paris"})),
        Some("ta"),
    )
    .await;
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    // bob cannot make a template of alice's plan
    let save = json!({"name": "w", "plan_id": id, "literals": {"city": "Paris"}, "parameters": [{"name": "city"}]});
    let (status, _) = call(
        &s,
        Method::POST,
        "/v1/templates",
        Some(save.clone()),
        Some("tb"),
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = call(&s, Method::POST, "/v1/templates", Some(save), Some("ta")).await;
    assert_eq!(status, 201);
    // templates are shared; bob's instance is bob's
    let (status, made) = call(
        &s,
        Method::POST,
        "/v1/templates/w/instantiate",
        Some(json!({"arguments": {"city": "Rome"}})),
        Some("tb"),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["stored"]["plan"]["owner"], "bob");
    let (_, mine) = call(&s, Method::GET, "/v1/plans", None, Some("ta")).await;
    assert_eq!(mine["total"], 1);
}
