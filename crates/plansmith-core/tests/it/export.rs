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

/// The other direction: a plan made natively (plansmith's document, holding only what the
/// shape can hold) is exported to each seed shape, read back, and keeps what that shape
/// carries: the actions and schedules, and per shape its plan-level fields and step progress.
#[test]
fn native_plans_survive_each_seed_shape() {
    let native = |steps: Value, extra: Value| -> Plan {
        let mut doc = json!({"id": "p-native", "version": 1, "title": "Native", "goal": "g",
            "locale": "de-DE", "thought": "Why this plan.", "ready": true, "steps": steps,
            "created_at": "2026-11-22T10:00:00Z"});
        for (key, value) in extra.as_object().unwrap() {
            doc[key] = value.clone();
        }
        let (plan, shape) = read(&doc);
        assert_eq!(shape, SourceShape::Plansmith, "{doc}");
        plan
    };
    let step = |id: &str, title: &str, description: &str, action: Value| {
        json!({"id": id, "title": title, "description": description, "action": action,
            "depends_on": [], "status": "not_started", "requires_approval": false, "notes": ""})
    };
    let tools = json!([
        step(
            "s1",
            "Weather",
            "Weather in Paris",
            json!({"type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}})
        ),
        step(
            "s2",
            "Mail",
            "Mail it to Bob",
            json!({"type": "tool", "name": "send_email",
            "arguments": {"to": "bob@example.com", "subject": "Weather", "body": "Sunny"}})
        ),
    ]);
    let tasks = json!([
        step(
            "s1",
            "Collect sales",
            "Collect 2025 EV sales",
            json!({"type": "task", "kind": "research", "need_web_search": true})
        ),
        step(
            "s2",
            "Compare",
            "Compute growth",
            json!({"type": "task", "kind": "processing", "need_web_search": false})
        ),
    ]);
    let mut agents = json!([
        step(
            "s1",
            "Watch AAPL",
            "",
            json!({"type": "agent", "agent": "MarketAgent", "query": "Alert me when AAPL moves 5%"})
        ),
        step(
            "s2",
            "Morning brief",
            "",
            json!({"type": "agent", "agent": "NewsAgent", "query": "Summarise the news"})
        ),
        step(
            "s3",
            "Explain",
            "",
            json!({"type": "agent", "agent": "ResearchAgent", "query": "Explain P/E"})
        ),
    ]);
    agents[0]["schedule"] = json!({"type": "interval", "minutes": 60});
    agents[1]["schedule"] = json!({"type": "daily", "time": "09:00"});
    let mut progress = tasks.clone();
    progress[0]["status"] = json!("completed");
    progress[0]["notes"] = json!("found 3 sources");
    progress[1]["status"] = json!("in_progress");

    let cases = [
        (SeedFormat::Sage, native(tools.clone(), json!({}))),
        (SeedFormat::Nl2Sql, native(tools, json!({}))),
        (
            SeedFormat::DeerFlow,
            native(tasks, json!({"has_enough_context": false})),
        ),
        (SeedFormat::ValueCell, native(agents, json!({}))),
        (SeedFormat::OpenManus, native(progress, json!({}))),
    ];
    for (format, plan) in cases {
        let rendered = render(&plan, format);
        assert!(rendered.lost.is_empty(), "{format}: {:?}", rendered.lost);
        let (back, _) = read(&rendered.value);
        assert_eq!(
            back.steps.len(),
            plan.steps.len(),
            "{format}: {}",
            rendered.value
        );
        for (got, want) in back.steps.iter().zip(&plan.steps) {
            match format {
                SeedFormat::OpenManus => {
                    assert!(got.title.starts_with(&want.title), "{format}: {got:?}");
                    assert_eq!(
                        (got.status, &got.notes),
                        (want.status, &want.notes),
                        "{format}"
                    );
                }
                _ => {
                    assert_eq!(got.action, want.action, "{format}");
                    assert_eq!(got.schedule, want.schedule, "{format}");
                }
            }
        }
        match format {
            SeedFormat::DeerFlow => {
                assert_eq!(
                    (
                        &back.title,
                        &back.thought,
                        &back.locale,
                        back.has_enough_context
                    ),
                    (&plan.title, &plan.thought, &plan.locale, Some(false)),
                );
                let titles: Vec<(&str, &str)> = back
                    .steps
                    .iter()
                    .map(|s| (s.title.as_str(), s.description.as_str()))
                    .collect();
                assert_eq!(
                    titles,
                    [
                        ("Collect sales", "Collect 2025 EV sales"),
                        ("Compare", "Compute growth")
                    ]
                );
            }
            SeedFormat::ValueCell | SeedFormat::Nl2Sql => {
                assert_eq!(back.thought, plan.thought, "{format}")
            }
            SeedFormat::OpenManus => assert_eq!(back.title, plan.title),
            _ => {}
        }
        // Exporting what was read back gives the same document again.
        assert_eq!(
            render(&back, format).value,
            rendered.value,
            "{format}: stable"
        );
    }
}
