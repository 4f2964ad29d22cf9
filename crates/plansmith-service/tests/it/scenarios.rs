//! Data-driven lifecycle and human-in-the-loop scenarios (`tests/data/*.json`), run on both
//! backends. Each scenario is a request, scripted model turns (the only mock: the LLM
//! boundary), review settings, and a list of operations with what must hold after each.
//!
//! Operations (`"do"`): `submit`, `accept`, `edit` (`text`), `patch` (`patch`), `reject`
//! (`text`?), `answer` (`text`), `create` (`plan`), `update` (`plan`), `get`, `mark` (`step`,
//! `status`?, `notes`?, `expected`?), `list` (`filter`), `set_active` / `get_active`
//! (`conversation`), `delete`, `handoff` (`new_id`, `conversation`), `reopen` (close and open
//! the store again: state must survive a restart), `use` (`id`: the plan later operations use).
//!
//! Expectations (`"expect"`, all optional): `error` (substring of the error), `state`,
//! `version`, `trigger` (of the newest history row), `n_versions`, `rejection`, `iteration`,
//! `n_steps`, `step_titles`, `statuses` ({step id: status}), `notes` ({step id: notes}),
//! `n_questions`, `schedule_confirmed`, `model_calls` (requests the scripted model got so far),
//! `last_prompt_contains`, `render_contains`, `owner`, `conversation_id`, `thread_id`,
//! `metadata` ({key: value}), `note` (what the last edit or answer could not do, or null), `list_ids` (for `list`), `list_total`, `next_offset`,
//! `warnings` (codes of the diagnostics a patch returned).

use std::sync::Arc;

use plansmith_core::{Catalog, PlanRequest, Planner, ScriptedModel};
use plansmith_service::{Decision, Planners, Service, ServiceError};
use plansmith_store::{ListFilter, PlanStore, Review, StepKey, StoredPlan};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::{TestDb, both_backends, root};

#[derive(Debug, Deserialize)]
struct Scenario {
    name: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    agents: bool,
    #[serde(default)]
    request: Option<PlanRequest>,
    #[serde(default)]
    review: Option<Review>,
    /// Scripted model replies: a string, or a JSON value sent as its text.
    #[serde(default)]
    turns: Vec<Value>,
    ops: Vec<Op>,
}

#[derive(Debug, Deserialize)]
struct Op {
    #[serde(rename = "do")]
    action: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    patch: Option<Value>,
    #[serde(default)]
    plan: Option<Value>,
    #[serde(default)]
    step: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    notes: Option<String>,
    #[serde(default)]
    expected: Option<u32>,
    #[serde(default)]
    conversation: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    new_id: Option<String>,
    #[serde(default)]
    filter: Option<Value>,
    /// For `answers`: the answers by question id.
    #[serde(default)]
    answers: Option<Value>,
    #[serde(default)]
    expect: Value,
}

fn load(file: &str) -> Vec<Scenario> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn catalog(agents: bool) -> Catalog {
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(root().join("examples").join(name)).unwrap())
            .unwrap()
    };
    let catalog = Catalog::from_json(&read("tools.json")).unwrap();
    if agents {
        let cards = Catalog::agents_from_json(&read("agents.json")).unwrap();
        catalog.with_agents(cards).unwrap()
    } else {
        catalog
    }
}

/// What one operation produced.
enum Produced {
    Plan(Box<StoredPlan>, Vec<String>),
    List(plansmith_store::Page),
    Done,
}

async fn run_file(mut db: TestDb, file: &str) {
    let scenarios = load(file);
    assert!(!scenarios.is_empty(), "{file} has no scenarios");
    for scenario in scenarios {
        db = run_scenario(db, &scenario).await;
    }
}

async fn run_scenario(mut db: TestDb, scenario: &Scenario) -> TestDb {
    let turns = scenario.turns.iter().map(|turn| match turn {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    });
    let model = Arc::new(ScriptedModel::new(turns));
    let planners = Arc::new(Planners::new(Arc::new(Planner::new(
        catalog(scenario.agents),
        model.clone(),
    ))));
    let request = scenario
        .request
        .clone()
        .unwrap_or_else(|| PlanRequest::new("unused"));
    let review = scenario.review.clone().unwrap_or_default();
    let mut current: Option<String> = None;
    for (idx, op) in scenario.ops.iter().enumerate() {
        let at = format!(
            "{} ({}) op {idx} `{}`",
            scenario.name, scenario.source, op.action
        );
        let id = op
            .id
            .clone()
            .or_else(|| current.clone())
            .unwrap_or_default();
        let actor = "tester";
        let store: &PlanStore = &db.store;
        let service = Service::new(store.clone(), Arc::clone(&planners));
        let decide = |decision: Decision| {
            let (service, id) = (&service, &id);
            async move {
                service
                    .decide(id, decision, None, actor, None)
                    .await
                    .map(|decided| {
                        let codes = decided
                            .diagnostics
                            .iter()
                            .map(|d| d.code.as_str().to_owned())
                            .collect();
                        Produced::Plan(Box::new(decided.stored), codes)
                    })
            }
        };
        let text = || op.text.clone().unwrap_or_default();
        let result: Result<Produced, ServiceError> = match op.action.as_str() {
            "submit" => {
                let planned = service.plan(&request, None, None, None).await.unwrap();
                service
                    .submit(planned, &request, review.clone(), actor)
                    .await
                    .map(|p| Produced::Plan(Box::new(p.stored), vec![]))
            }
            "accept" => decide(Decision::Accept).await,
            "reject" => decide(Decision::Reject(op.text.clone())).await,
            "edit" => decide(Decision::Edit(text())).await,
            "answer" => decide(Decision::Answer(text())).await,
            "answers" => {
                let answers = serde_json::from_value(op.answers.clone().unwrap()).unwrap();
                decide(Decision::Answers(answers)).await
            }
            "patch" => decide(Decision::Patch(op.patch.clone().unwrap())).await,
            "create" => {
                let mut plan_json = op.plan.clone().unwrap();
                fill_plan_defaults(&mut plan_json);
                let plan = serde_json::from_value(plan_json).unwrap();
                store
                    .create(
                        plan,
                        plansmith_store::ReviewState::Draft,
                        review.clone(),
                        actor,
                    )
                    .await
                    .map(|p| Produced::Plan(Box::new(p), vec![]))
                    .map_err(ServiceError::from)
            }
            "update" => {
                let mut plan_json = op.plan.clone().unwrap();
                fill_plan_defaults(&mut plan_json);
                let plan = serde_json::from_value(plan_json).unwrap();
                store
                    .update(&id, plan, op.expected, actor)
                    .await
                    .map(|p| Produced::Plan(Box::new(p), vec![]))
                    .map_err(ServiceError::from)
            }
            "get" => store
                .get(&id)
                .await
                .map(|p| Produced::Plan(Box::new(p), vec![]))
                .map_err(ServiceError::from),
            "mark" => {
                let key: StepKey = op.step.as_deref().unwrap_or("0").parse().unwrap();
                store
                    .mark_step(
                        &id,
                        &key,
                        op.status.as_deref(),
                        op.notes.as_deref(),
                        op.expected,
                        actor,
                    )
                    .await
                    .map(|p| Produced::Plan(Box::new(p), vec![]))
                    .map_err(ServiceError::from)
            }
            "list" => {
                let f = op.filter.clone().unwrap_or(json!({}));
                let filter = ListFilter {
                    owner: f["owner"].as_str().map(str::to_owned),
                    conversation_id: f["conversation_id"].as_str().map(str::to_owned),
                    thread_id: f["thread_id"].as_str().map(str::to_owned),
                    state: f["state"].as_str().map(|s| s.parse().unwrap()),
                    limit: f["limit"].as_u64().map(|n| n as u32),
                    offset: f["offset"].as_u64().unwrap_or(0) as u32,
                    cursor: None,
                    total_cap: f["total_cap"].as_u64(),
                };
                store
                    .list(&filter)
                    .await
                    .map(Produced::List)
                    .map_err(ServiceError::from)
            }
            "set_active" => store
                .set_active(op.conversation.as_deref().unwrap(), &id)
                .await
                .map(|()| Produced::Done)
                .map_err(ServiceError::from),
            "get_active" => store
                .get_active(op.conversation.as_deref().unwrap())
                .await
                .map(|p| Produced::Plan(Box::new(p), vec![]))
                .map_err(ServiceError::from),
            "delete" => store
                .delete(&id)
                .await
                .map(|()| Produced::Done)
                .map_err(ServiceError::from),
            "handoff" => store
                .handoff(
                    &id,
                    op.new_id.as_deref().unwrap(),
                    op.conversation.as_deref().unwrap(),
                    actor,
                )
                .await
                .map(|p| Produced::Plan(Box::new(p), vec![]))
                .map_err(ServiceError::from),
            "reopen" => {
                db.reopen().await;
                Ok(Produced::Done)
            }
            "use" => Ok(Produced::Done),
            other => panic!("{at}: unknown operation `{other}`"),
        };
        let expect = op.expect.as_object().cloned().unwrap_or_default();
        let produced = match (result, expect.get("error")) {
            (Err(err), Some(want)) => {
                let want = want.as_str().unwrap();
                let text = err.to_string();
                assert!(text.contains(want), "{at}: error `{text}` lacks `{want}`");
                continue;
            }
            (Err(err), None) => panic!("{at}: unexpected error: {err}"),
            (Ok(_), Some(want)) => panic!("{at}: expected an error containing {want}"),
            (Ok(produced), None) => produced,
        };
        if let Produced::Plan(stored, _) = &produced {
            // The plan this scenario works on: the first one it made, or the one named by `use`.
            if current.is_none() || op.action == "use" {
                current = Some(stored.plan.id.clone());
            }
        }
        if op.action == "use" {
            current = op.id.clone();
        }
        let stored = match produced {
            Produced::Plan(stored, warnings) => {
                if let Some(want) = expect.get("warnings") {
                    assert_eq!(&json!(warnings), want, "{at}: warnings");
                }
                Some(*stored)
            }
            Produced::List(page) => {
                let ids: Vec<&str> = page.plans.iter().map(|p| p.plan.id.as_str()).collect();
                if let Some(want) = expect.get("list_ids") {
                    assert_eq!(&json!(ids), want, "{at}: list ids");
                }
                if let Some(want) = expect.get("list_total") {
                    assert_eq!(&json!(page.total), want, "{at}: list total");
                }
                if let Some(want) = expect.get("next_offset") {
                    assert_eq!(&json!(page.next_offset), want, "{at}: next offset");
                }
                None
            }
            Produced::Done => None,
        };
        // Everything else is checked against the store, not the returned value: it must be what
        // a reader (or a restarted process) sees.
        let needs_reload = expect.keys().any(|k| {
            !matches!(
                k.as_str(),
                "warnings"
                    | "list_ids"
                    | "list_total"
                    | "next_offset"
                    | "model_calls"
                    | "last_prompt_contains"
            )
        });
        if let Some(want) = expect.get("model_calls") {
            assert_eq!(&json!(model.requests().len()), want, "{at}: model calls");
        }
        if let Some(want) = expect.get("last_prompt_contains") {
            let requests = model.requests();
            let last = requests.last().unwrap();
            let prompt: String = last
                .messages
                .iter()
                .map(|m| m.content.clone())
                .collect::<Vec<_>>()
                .join("\n");
            assert!(
                prompt.contains(want.as_str().unwrap()),
                "{at}: last prompt lacks {want}:\n{prompt}"
            );
        }
        if !needs_reload {
            continue;
        }
        let target = stored
            .as_ref()
            .map(|s| s.plan.id.clone())
            .unwrap_or_else(|| id.clone());
        let fresh = db.store.get(&target).await.unwrap();
        if let Some(stored) = &stored {
            assert_eq!(
                stored, &fresh,
                "{at}: returned plan differs from the stored one"
            );
        }
        check_plan(&at, &db.store, &fresh, &expect).await;
    }
    assert_eq!(
        model.remaining(),
        0,
        "{}: unused scripted turns",
        scenario.name
    );
    db
}

async fn check_plan(
    at: &str,
    store: &PlanStore,
    fresh: &StoredPlan,
    expect: &serde_json::Map<String, Value>,
) {
    let plan = &fresh.plan;
    let history = store.history(&plan.id).await.unwrap();
    // Versions are 1..=n, each the child of the one before.
    for (idx, record) in history.iter().enumerate() {
        assert_eq!(record.version as usize, idx + 1, "{at}: history order");
        assert_eq!(
            record.parent_version,
            (idx > 0).then_some(idx as u32),
            "{at}: parent"
        );
    }
    assert_eq!(history.last().unwrap().version, plan.version, "{at}: head");
    for (key, want) in expect {
        let got: Value = match key.as_str() {
            "state" => json!(fresh.state.as_str()),
            "version" => json!(plan.version),
            "trigger" => json!(history.last().unwrap().trigger.as_str()),
            "n_versions" => json!(history.len()),
            "rejection" => json!(fresh.review.rejection),
            "iteration" => json!(fresh.review.iteration),
            "n_steps" => json!(plan.steps.len()),
            "step_titles" => json!(plan.steps.iter().map(|s| &s.title).collect::<Vec<_>>()),
            "statuses" => json!(
                plan.steps
                    .iter()
                    .map(|s| (s.id.clone(), json!(s.status.as_str())))
                    .collect::<serde_json::Map<_, _>>()
            ),
            "notes" => json!(
                plan.steps
                    .iter()
                    .filter(|s| !s.notes.is_empty())
                    .map(|s| (s.id.clone(), json!(s.notes)))
                    .collect::<serde_json::Map<_, _>>()
            ),
            "n_questions" => json!(plan.questions.len()),
            "schedule_confirmed" => json!(fresh.review.schedule_confirmed),
            "note" => json!(fresh.review.note),
            "owner" => json!(plan.owner),
            "conversation_id" => json!(plan.conversation_id),
            "thread_id" => json!(plan.thread_id),
            "title" => json!(plan.title),
            "metadata" => {
                for (mk, mv) in want.as_object().unwrap() {
                    assert_eq!(plan.metadata.get(mk), Some(mv), "{at}: metadata {mk}");
                }
                continue;
            }
            "render_contains" => {
                let text = fresh.render_text();
                for needle in want.as_array().unwrap() {
                    let needle = needle.as_str().unwrap();
                    assert!(
                        text.contains(needle),
                        "{at}: render lacks {needle:?}:\n{text}"
                    );
                }
                continue;
            }
            "warnings"
            | "list_ids"
            | "list_total"
            | "next_offset"
            | "model_calls"
            | "last_prompt_contains" => continue,
            other => panic!("{at}: unknown expectation `{other}`"),
        };
        assert_eq!(&got, want, "{at}: {key}");
    }
}

/// Lets table plans omit the fields every plan has.
fn fill_plan_defaults(plan: &mut Value) {
    let object = plan.as_object_mut().unwrap();
    object.entry("version").or_insert(json!(1));
    object.entry("goal").or_insert(json!("goal"));
    object.entry("title").or_insert(json!(""));
    object.entry("locale").or_insert(json!("en-US"));
    object.entry("ready").or_insert(json!(true));
    object
        .entry("created_at")
        .or_insert(json!("2026-11-22T10:00:00Z"));
    if let Some(steps) = object.get_mut("steps").and_then(Value::as_array_mut) {
        for (idx, step) in steps.iter_mut().enumerate() {
            let step = step.as_object_mut().unwrap();
            step.entry("id").or_insert(json!(format!("s{}", idx + 1)));
            let title = step.get("title").cloned().unwrap_or(json!("step"));
            step.entry("action")
                .or_insert(json!({"type": "reply", "text": title}));
        }
    }
}

async fn openmanus_lifecycle(db: TestDb) {
    run_file(db, "lifecycle.json").await;
}
async fn review_loops(db: TestDb) {
    run_file(db, "hitl.json").await;
}

both_backends!(lifecycle_table, super::openmanus_lifecycle);
both_backends!(hitl_table, super::review_loops);

/// A decision is accepted exactly when the plan's state lists it in
/// `ReviewState::actions` (what every stored plan's JSON offers clients as `actions`), and
/// the refusal names what the state allows.
async fn states_allow_exactly_their_actions(db: TestDb) {
    use plansmith_store::{ReviewAction, ReviewState, StoreError};
    let model =
        ScriptedModel::from_file(&root().join("examples/replies/weather-email-repeat.json"))
            .unwrap();
    let planner = Planner::new(catalog(false), Arc::new(model));
    let store = &db.store;
    let service = Service::new(store.clone(), Arc::new(Planners::new(Arc::new(planner))));
    let actions = [
        ReviewAction::Accept,
        ReviewAction::Reject,
        ReviewAction::Edit,
        ReviewAction::Patch,
        ReviewAction::Answer,
    ];
    for state in ReviewState::ALL {
        for action in actions {
            let id = format!("p-{state}-{}", action.as_str());
            let mut plan_json = json!({
                "id": id,
                "steps": [{"title": "Say hello"}],
                "questions": [{"id": "q1", "text": "Which city?"}],
            });
            fill_plan_defaults(&mut plan_json);
            let plan = serde_json::from_value(plan_json).unwrap();
            let stored = store
                .create(plan, state, Review::default(), "tester")
                .await
                .unwrap();
            let offered = serde_json::to_value(&stored).unwrap()["actions"].clone();
            let decision = match action {
                ReviewAction::Accept => Decision::Accept,
                ReviewAction::Reject => Decision::Reject(None),
                ReviewAction::Edit => Decision::Edit("shorter".into()),
                ReviewAction::Answer => Decision::Answer("Paris".into()),
                ReviewAction::Patch => Decision::Patch(json!([
                    {"op": "replace", "path": "/title", "value": "Hello"}
                ])),
                ReviewAction::Run => unreachable!("runs are the executor's"),
            };
            let result = service.decide(&id, decision, None, "tester", None).await;
            let at = format!("{} on a plan that is {state}", action.as_str());
            assert_eq!(
                offered
                    .as_array()
                    .unwrap()
                    .contains(&json!(action.as_str())),
                state.allows(action),
                "{at}: the JSON's actions {offered} disagree with the state's"
            );
            match result {
                Ok(_) => assert!(state.allows(action), "{at}: done, but not offered"),
                Err(ServiceError::Store(StoreError::InvalidState { .. }))
                    if !state.allows(action) =>
                {
                    let message = result.unwrap_err().to_string();
                    let names = state.action_names();
                    if names.is_empty() {
                        assert!(message.contains("nothing more can be done"), "{message}");
                    } else {
                        assert!(
                            message.ends_with(&format!("it allows {names}")),
                            "{message}"
                        );
                    }
                }
                Err(err) => panic!("{at}: {err}"),
            }
        }
    }
}

both_backends!(state_actions, super::states_allow_exactly_their_actions);
