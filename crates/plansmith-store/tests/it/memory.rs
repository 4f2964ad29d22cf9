//! Conversation memory through the store, on both backends: a scripted two-turn conversation
//! where the second planning call sees the first turn (asserted on the request the model got),
//! and a long conversation whose older turns are summarised.

use std::sync::Arc;

use plansmith_core::{Catalog, PlanRequest, Planner, ScriptedModel, Turn};
use plansmith_store::Review;
use serde_json::json;

use crate::support::{TestDb, both_backends, root};

fn catalog() -> Catalog {
    let text = std::fs::read_to_string(root().join("examples/tools.json")).unwrap();
    Catalog::from_json(&serde_json::from_str(&text).unwrap()).unwrap()
}

fn weather_reply(city: &str) -> String {
    json!({"title": format!("Weather in {city}"), "steps": [
        {"id": "s1", "type": "tool", "title": format!("Get the weather in {city}"),
         "name": "get_weather", "arguments": {"city": city}}
    ]})
    .to_string()
}

async fn plan_turn(
    db: &TestDb,
    conversation: &str,
    query: &str,
    reply: String,
) -> Arc<ScriptedModel> {
    let earlier = db.store.conversation_plans(conversation, 20).await.unwrap();
    let model = Arc::new(ScriptedModel::new([reply]));
    let planner = Planner::new(catalog(), model.clone());
    let mut request = PlanRequest::new(query);
    request.conversation_id = Some(conversation.into());
    request.turns = earlier.iter().map(|s| Turn::from_plan(&s.plan)).collect();
    request.options.memory_tokens = 400;
    request.options.memory_turns = 3;
    let outcome = planner.plan(&request).await.unwrap();
    db.store
        .submit(&outcome, &request, Review::default(), "me")
        .await
        .unwrap();
    model
}

async fn two_turns_then_summary(db: TestDb) {
    plan_turn(
        &db,
        "c1",
        "What's the weather in Paris?",
        weather_reply("Paris"),
    )
    .await;
    // Another conversation must not leak in.
    plan_turn(&db, "other", "Stock price of ACME?", weather_reply("Oslo")).await;
    let model = plan_turn(
        &db,
        "c1",
        "Now do the same for Berlin",
        weather_reply("Berlin"),
    )
    .await;
    let request = &model.requests()[0];
    let texts: Vec<&str> = request
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(texts[1], "What's the weather in Paris?", "{texts:#?}");
    assert!(texts[2].contains("\"city\":\"Paris\""), "{texts:#?}");
    assert!(
        texts
            .last()
            .unwrap()
            .ends_with("Now do the same for Berlin")
    );
    assert!(!texts.iter().any(|t| t.contains("ACME")), "{texts:#?}");

    let plans = db.store.conversation_plans("c1", 20).await.unwrap();
    let goals: Vec<&str> = plans.iter().map(|p| p.plan.goal.as_str()).collect();
    assert_eq!(
        goals,
        ["What's the weather in Paris?", "Now do the same for Berlin"]
    );

    for city in ["Rome", "Madrid", "Lisbon", "Vienna"] {
        plan_turn(&db, "c1", &format!("And {city}?"), weather_reply(city)).await;
    }
    let model = plan_turn(&db, "c1", "And Prague?", weather_reply("Prague")).await;
    let request = &model.requests()[0];
    let summary = &request.messages[1].content;
    assert!(
        summary.starts_with("Earlier in this conversation (summarised):")
            && summary.contains("Weather in Berlin: tool get_weather(city=Berlin)"),
        "{summary}"
    );
    let last_plans = db.store.conversation_plans("c1", 2).await.unwrap();
    assert_eq!(last_plans[1].plan.goal, "And Prague?");
    assert_eq!(last_plans[0].plan.goal, "And Vienna?");
}
both_backends!(memory_conversation, super::two_turns_then_summary);
