//! Seed-shape round trips: a plan written in each replaced system's shape is read by `parse`,
//! rendered back by `export::render`, and comes out as it went in; what a shape cannot hold is
//! reported, never dropped silently.

use chrono::{TimeZone, Utc};
use plansmith_core::export::{SeedFormat, render};
use plansmith_core::parse::{ParseDefaults, SourceShape, parse};
use plansmith_core::{Action, Plan, Schedule, Step};
use serde_json::{Value, json};

fn read(value: &Value) -> (Plan, SourceShape) {
    let defaults = ParseDefaults {
        plan_id: "p-test",
        goal: "test",
        locale: "en-US",
        now: Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap(),
    };
    let parsed = parse(&value.to_string(), &defaults).unwrap();
    (parsed.plan, parsed.shape)
}

fn cases() -> Vec<(SeedFormat, SourceShape, Value)> {
    vec![
        (
            SeedFormat::Sage,
            SourceShape::Sage,
            json!([
                {"name": "get_weather", "description": "Weather in Paris", "args": {"city": "Paris"}},
                {"name": "send_email", "description": "Mail it to Bob",
                 "args": {"to": "bob@example.com", "subject": "Weather", "body": "Sunny"}}
            ]),
        ),
        (
            SeedFormat::DeerFlow,
            SourceShape::DeerFlow,
            json!({"locale": "en-US", "has_enough_context": false, "thought": "Need data.",
                "title": "EV market", "steps": [
                {"need_search": true, "title": "Collect sales", "description": "Collect 2025 EV sales by region", "step_type": "research"},
                {"need_search": false, "title": "Compare", "description": "Compute growth rates", "step_type": "processing"}]}),
        ),
        (
            SeedFormat::ValueCell,
            SourceShape::ValueCell,
            json!({"adequate": true, "reason": "Two agents cover it.", "tasks": [
                {"title": "Watch AAPL", "query": "Alert me when AAPL moves 5%", "agent_name": "MarketAgent",
                 "pattern": "recurring", "schedule_config": {"interval_minutes": 60}},
                {"title": "Morning brief", "query": "Summarise the news", "agent_name": "NewsAgent",
                 "pattern": "recurring", "schedule_config": {"daily_time": "09:00"}},
                {"title": "Explain", "query": "Explain the P/E ratio", "agent_name": "ResearchAgent",
                 "pattern": "once", "schedule_config": null}]}),
        ),
        (
            SeedFormat::OpenManus,
            SourceShape::OpenManus,
            json!({"plan_id": "plan_1700000000", "title": "Trip", "steps": ["Search flights", "Book hotel", "Write summary"],
                "step_statuses": ["completed", "in_progress", "not_started"],
                "step_notes": ["found 3 options", "", ""]}),
        ),
        (
            SeedFormat::Nl2Sql,
            SourceShape::Nl2Sql,
            json!({"thought_process": "Count, then report.", "execution_plan": [
                {"step": 1, "tool_to_use": "SQL_GENERATE_NODE",
                 "tool_parameters": {"instruction": "count users", "sql_query": "SELECT count(*) FROM users"}},
                {"step": 2, "tool_to_use": "REPORT_GENERATOR_NODE",
                 "tool_parameters": {"summary_and_recommendations": "one line"}}]}),
        ),
    ]
}

#[test]
fn every_seed_shape_round_trips() {
    for (format, shape, source) in cases() {
        let (plan, read_as) = read(&source);
        assert_eq!(read_as, shape, "{format}: read as {read_as:?}");
        let rendered = render(&plan, format);
        assert_eq!(rendered.value, source, "{format}: round trip");
        assert!(rendered.lost.is_empty(), "{format}: {:?}", rendered.lost);
        // And through plansmith's own document: render → read → render is stable.
        let (again, _) = read(&render(&plan, SeedFormat::Plansmith).value);
        assert_eq!(
            render(&again, format).value,
            source,
            "{format}: via plansmith"
        );
    }
}

#[test]
fn what_a_shape_cannot_hold_is_reported() {
    let mut plan = read(&json!({"title": "Mixed", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "s2", "type": "tool", "name": "get_weather", "arguments": {"city": "Rome"}},
        {"id": "s3", "type": "agent", "agent": "Writer", "query": "Compare", "depends_on": ["s1", "s2"]},
        {"id": "s4", "type": "reply", "text": "Done", "depends_on": ["s3"]}]}))
    .0;
    let sage = render(&plan, SeedFormat::Sage);
    assert_eq!(sage.value.as_array().unwrap().len(), 2);
    assert_eq!(sage.lost.len(), 3, "{:?}", sage.lost);
    assert!(sage.lost[0].contains("`s3`") && sage.lost[0].contains("tool calls only"));
    assert!(sage.lost[2].contains("no dependency graph"));
    let deer = render(&plan, SeedFormat::DeerFlow);
    assert_eq!(deer.value["steps"], json!([]));
    assert_eq!(deer.lost.len(), 5);
    let openmanus = render(&plan, SeedFormat::OpenManus);
    assert_eq!(
        openmanus.value["steps"][0],
        json!(format!(
            "{} [get_weather({{\"city\":\"Paris\"}})]",
            plan.steps[0].title
        ))
    );
    // A cron schedule has no ValueCell form.
    let mut step = Step::new(
        "s9",
        "Nightly",
        Action::Agent {
            agent: "A".into(),
            query: "q".into(),
        },
    );
    step.schedule = Some(Schedule::Cron {
        expr: "0 2 * * *".into(),
    });
    plan.steps = vec![step];
    let value_cell = render(&plan, SeedFormat::ValueCell);
    assert_eq!(value_cell.value["tasks"][0]["pattern"], "once");
    assert!(value_cell.lost[0].contains("cron"), "{:?}", value_cell.lost);
}

#[test]
fn format_names_parse_leniently_and_unknown_ones_are_named() {
    assert_eq!(
        "deer-flow".parse::<SeedFormat>().unwrap(),
        SeedFormat::DeerFlow
    );
    assert_eq!(
        "ValueCell".parse::<SeedFormat>().unwrap(),
        SeedFormat::ValueCell
    );
    assert_eq!("nl2sql".parse::<SeedFormat>().unwrap(), SeedFormat::Nl2Sql);
    let err = "langgraph".parse::<SeedFormat>().unwrap_err();
    assert!(err.to_string().contains("`langgraph`"), "{err}");
}
