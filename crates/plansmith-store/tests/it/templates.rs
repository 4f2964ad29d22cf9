//! Plan templates (migration 3) on both backends: versions per name, newest by default,
//! list, delete, and instantiation against a catalog that changed since the template was saved.

use std::collections::BTreeMap;

use chrono::Utc;
use plansmith_core::{
    Action, Catalog, Code, Plan, PlanOptions, PlanTemplate, PlanTemplateError, Step,
    TemplateParameter,
};
use plansmith_store::StoreError;
use serde_json::json;

use crate::support::{TestDb, both_backends, root};

fn weather_template(description: &str) -> PlanTemplate {
    let mut plan = Plan::new("p1", "Weather in Paris, emailed to bob@example.com");
    plan.title = "Paris weather to Bob".into();
    let serde_json::Value::Object(weather) = json!({"city": "Paris", "unit": "celsius"}) else {
        unreachable!()
    };
    let serde_json::Value::Object(email) = json!({
        "to": "bob@example.com", "subject": "Weather in Paris", "body": {"$ref": "s1.output.summary"}
    }) else {
        unreachable!()
    };
    let mut s1 = Step::new(
        "s1",
        "Get the weather in Paris",
        Action::Tool {
            name: "get_weather".into(),
            arguments: weather,
        },
    );
    s1.status = plansmith_core::StepStatus::Completed;
    let mut s2 = Step::new(
        "s2",
        "Email the forecast",
        Action::Tool {
            name: "send_email".into(),
            arguments: email,
        },
    );
    s2.depends_on = vec!["s1".into()];
    plan.steps = vec![s1, s2];
    let plan = PlanTemplate::parameterize(
        &plan,
        &[
            ("city".into(), "Paris".into()),
            ("recipient".into(), "bob@example.com".into()),
        ],
    );
    let mut recipient = TemplateParameter::new("recipient");
    recipient.default = Some("team@example.com".into());
    PlanTemplate::new(
        "weather-mail",
        description,
        plan,
        vec![TemplateParameter::new("city"), recipient],
    )
    .unwrap()
}

fn catalog() -> Catalog {
    let text = std::fs::read_to_string(root().join("examples/tools.json")).unwrap();
    Catalog::from_json(&serde_json::from_str(&text).unwrap()).unwrap()
}

fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

async fn save_list_get_delete(db: TestDb) {
    let store = &db.store;
    let v1 = store
        .save_template(weather_template("first"), "alice")
        .await
        .unwrap();
    let v2 = store
        .save_template(weather_template("second"), "bob")
        .await
        .unwrap();
    assert_eq!((v1.version, v2.version), (1, 2));
    assert_eq!(
        v1.plan.steps[0].status,
        plansmith_core::StepStatus::NotStarted,
        "progress is not part of a template"
    );
    assert_eq!(
        store
            .get_template("weather-mail", None)
            .await
            .unwrap()
            .description,
        "second"
    );
    let first = store.get_template("weather-mail", Some(1)).await.unwrap();
    assert_eq!(first.description, "first");
    assert_eq!(first.plan, v1.plan);
    assert_eq!(first.parameters, v1.parameters);

    let list = store.list_templates().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!((list[0].latest.version, list[0].versions), (2, 2));

    // Templates survive a restart.
    let mut db = db;
    db.reopen().await;
    let store = &db.store;
    assert_eq!(
        store
            .delete_template("weather-mail", Some(2))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .get_template("weather-mail", None)
            .await
            .unwrap()
            .version,
        1
    );
    assert!(matches!(
        store.get_template("weather-mail", Some(2)).await,
        Err(StoreError::TemplateNotFound(name)) if name == "weather-mail@v2"
    ));
    // The next save after a deleted newest version takes the next free number.
    assert_eq!(
        store
            .save_template(weather_template("third"), "c")
            .await
            .unwrap()
            .version,
        2
    );
    assert_eq!(
        store.delete_template("weather-mail", None).await.unwrap(),
        2
    );
    assert!(store.list_templates().await.unwrap().is_empty());
    assert!(matches!(
        store.delete_template("weather-mail", None).await,
        Err(StoreError::TemplateNotFound(_))
    ));
}
both_backends!(templates_save_list_get_delete, super::save_list_get_delete);

async fn concurrent_saves_get_distinct_versions(db: TestDb) {
    let mut tasks = Vec::new();
    for idx in 0..8 {
        let store = db.store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .save_template(weather_template(&format!("writer {idx}")), "w")
                .await
                .unwrap()
                .version
        }));
    }
    let mut versions = Vec::new();
    for task in tasks {
        versions.push(task.await.unwrap());
    }
    versions.sort_unstable();
    assert_eq!(versions, (1..=8).collect::<Vec<u32>>());
}
both_backends!(
    templates_concurrent_saves,
    super::concurrent_saves_get_distinct_versions
);

async fn instantiate_against_current_and_changed_catalogs(db: TestDb) {
    let store = &db.store;
    store
        .save_template(weather_template(""), "a")
        .await
        .unwrap();
    let template = store.get_template("weather-mail", None).await.unwrap();
    let options = PlanOptions::default();

    let (plan, diagnostics) = template
        .instantiate(
            &args(&[("city", "Berlin")]),
            &catalog(),
            &options,
            "new",
            Utc::now(),
        )
        .unwrap();
    assert!(!diagnostics.iter().any(|d| d.is_error()), "{diagnostics:?}");
    assert_eq!(plan.id, "new");
    assert_eq!(plan.title, "Berlin weather to Bob");
    let Action::Tool { arguments, .. } = &plan.steps[0].action else {
        panic!()
    };
    assert_eq!(arguments["city"], json!("Berlin"));
    let Action::Tool { arguments, .. } = &plan.steps[1].action else {
        panic!()
    };
    assert_eq!(
        arguments["to"],
        json!("team@example.com"),
        "the default is used"
    );
    assert_eq!(arguments["body"], json!({"$ref": "s1.output.summary"}));
    assert_eq!(plan.metadata["template"]["version"], json!(1));

    // Missing and unknown arguments are errors, not plans.
    let err = template
        .instantiate(&args(&[]), &catalog(), &options, "x", Utc::now())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "template `weather-mail` needs values for: city"
    );
    let err = template
        .instantiate(
            &args(&[("city", "Rome"), ("town", "Rome")]),
            &catalog(),
            &options,
            "x",
            Utc::now(),
        )
        .unwrap_err();
    assert!(
        matches!(err, PlanTemplateError::UnknownArguments { ref unknown, .. } if unknown == &["town"])
    );
    assert!(err.to_string().contains("it has: city, recipient"), "{err}");

    // The catalog changed: send_email is gone, get_weather now requires `country`.
    let text = std::fs::read_to_string(root().join("examples/tools.json")).unwrap();
    let mut tools: serde_json::Value = serde_json::from_str(&text).unwrap();
    let list = tools["tools"].as_array_mut().unwrap();
    list.retain(|t| t["name"] != "send_email");
    for tool in list.iter_mut().filter(|t| t["name"] == "get_weather") {
        let schema = &mut tool["inputSchema"];
        schema["properties"]["country"] = json!({"type": "string"});
        schema["required"] = json!(["city", "country"]);
    }
    let changed = Catalog::from_json(&tools).unwrap();
    let (_, diagnostics) = template
        .instantiate(
            &args(&[("city", "Berlin")]),
            &changed,
            &options,
            "y",
            Utc::now(),
        )
        .unwrap();
    let errors: Vec<(Code, Option<&str>)> = diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| (d.code, d.step.as_deref()))
        .collect();
    assert!(
        errors.contains(&(Code::UnknownTool, Some("s2"))),
        "{diagnostics:#?}"
    );
    assert!(
        errors.contains(&(Code::MissingArgument, Some("s1"))),
        "{diagnostics:#?}"
    );
}
both_backends!(
    templates_instantiate,
    super::instantiate_against_current_and_changed_catalogs
);
