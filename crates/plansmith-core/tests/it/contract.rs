//! The plan document's JSON shape is a public contract: these snapshots pin it.
//! Ids, timestamps and latencies are redacted where they vary.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use plansmith_core::{
    Action, OutcomeStatus, Plan, PlanRequest, Planner, Question, QuestionKind, Schedule,
    ScriptedModel, Step, StepStatus, TaskKind,
};
use serde_json::json;

use crate::pipeline::test_catalog;

fn every_kind_of_step() -> Plan {
    let mut plan = Plan::new(
        "plan-0001",
        "Weather in Paris, then mail it to Bob every morning",
    );
    plan.created_at = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
    plan.title = "Morning weather mail".into();
    plan.thought = "Fetch, research, mail, confirm.".into();
    plan.owner = Some("alice".into());
    plan.conversation_id = Some("conv-1".into());
    let mut weather = Step::new(
        "s1",
        "Get the weather",
        Action::Tool {
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}).as_object().unwrap().clone(),
        },
    );
    weather.status = StepStatus::Completed;
    weather.result = Some(json!({"temperature": 12.5, "summary": "cloudy"}));
    let mut research = Step::new(
        "s2",
        "Find clothing advice",
        Action::Task {
            kind: TaskKind::Research,
            need_web_search: true,
        },
    );
    research.description = "What to wear at 12 °C".into();
    let mut mail = Step::new(
        "s3",
        "Mail Bob",
        Action::Tool {
            name: "send_email".into(),
            arguments: json!({"to": "bob@example.com", "subject": "Weather", "body": {"$ref": "s1.output.summary"}})
                .as_object()
                .unwrap()
                .clone(),
        },
    );
    mail.depends_on = vec!["s1".into(), "s2".into()];
    mail.schedule = Some(Schedule::Daily {
        time: "08:00".into(),
    });
    mail.status = StepStatus::Blocked;
    let agent = Step::new(
        "s4",
        "Ask the news agent",
        Action::Agent {
            agent: "NewsAgent".into(),
            query: "Paris news today".into(),
        },
    );
    let reply = Step::new(
        "s5",
        "Reply",
        Action::Reply {
            text: "I will mail Bob the weather every morning.".into(),
        },
    );
    plan.steps = vec![weather, research, mail, agent, reply];
    plan.ready = false;
    plan.questions.push(
        Question::new(
            "q1",
            "Step \"Mail Bob\" will run every day at 08:00. Shall I set up this recurring schedule?",
        )
        .of_kind(QuestionKind::RiskConfirmation)
        .about("s3", None)
        .choice(vec!["yes".into(), "no".into()])
        .recommend("no"),
    );
    plan
}

#[test]
fn plan_document_shape() {
    let plan = every_kind_of_step();
    insta::assert_json_snapshot!("plan_document", plan);
    let text = serde_json::to_string(&plan).unwrap();
    let back: Plan = serde_json::from_str(&text).unwrap();
    assert_eq!(back, plan, "the plan document must round-trip");
}

#[test]
fn outcome_document_shape() {
    let model = Arc::new(ScriptedModel::new([json!({"title": "Weather mail", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "s2", "type": "tool", "name": "send_email", "arguments": {"subject": "Weather", "body": {"$ref": "s1.output.summary"}}, "depends_on": ["s1"]}
    ]})
    .to_string()]));
    let planner = Planner::new(test_catalog(false), model);
    let mut request = PlanRequest::new("Mail the Paris weather to my boss");
    request.now = Some(Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap());
    request.options.max_repairs = 0;
    let outcome = futures::executor::block_on(planner.plan(&request)).unwrap();
    assert_eq!(outcome.status, OutcomeStatus::NeedsInput);
    // What changes from run to run (the plan's id, timings) is replaced by a placeholder.
    let mut document = serde_json::to_value(&outcome).unwrap();
    if let Some(id) = document.pointer_mut("/plan/id") {
        *id = json!("[plan-id]");
    }
    if let Some(timings) = document
        .pointer_mut("/diagnostics/timings")
        .and_then(serde_json::Value::as_object_mut)
    {
        timings.values_mut().for_each(|t| *t = json!("[us]"));
    }
    if let Some(attempts) = document
        .pointer_mut("/diagnostics/attempts")
        .and_then(serde_json::Value::as_array_mut)
    {
        for attempt in attempts {
            if let Some(ms) = attempt.get_mut("generate_ms") {
                *ms = json!("[ms]");
            }
        }
    }
    insta::assert_json_snapshot!("outcome_needs_input", document);
}
