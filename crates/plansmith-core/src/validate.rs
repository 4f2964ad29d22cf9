//! Checks a parsed plan against the **full** catalog and the options, and fixes what can be fixed
//! without guessing. Returns the plan and every finding — partial success is not an error.
//!
//! Checks, in order: step ids; the dependency graph (unknown ids, cycles, topological order);
//! `max_steps` (keeping the closing reply); each action (tool names, every argument against the
//! tool's JSON Schema with formats, agent names, empty texts); `$ref`s (well-formed, an ancestor,
//! and a path that fits the tool's `output_schema`); schedules; approval policy.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use serde_json::{Value, json};

use crate::catalog::Catalog;
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{
    Action, PathSegment, Plan, Schedule, Step, StepRef, collect_refs, escape_pointer,
};
use crate::request::PlanOptions;

/// Validates `plan`; see the module docs for what is checked and fixed.
pub fn validate(
    mut plan: Plan,
    catalog: &Catalog,
    options: &PlanOptions,
) -> (Plan, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let answered = plan.has_enough_context == Some(true);
    if plan.steps.is_empty() && plan.questions.is_empty() && plan.guidance.is_none() && !answered {
        diags.push(Diagnostic::error(
            Code::EmptyPlan,
            "/steps",
            "the plan has no steps",
        ));
        return (plan, diags);
    }
    // Every step's action is checked even when the ids or the graph are broken: a caller that
    // drops the steps blamed for a graph error must not keep an unchecked step beside them.
    let graph_ok = check_ids(&plan, &mut diags) && check_graph(&mut plan, &mut diags);
    if graph_ok {
        merge_duplicates(&mut plan, &mut diags);
        enforce_max_steps(&mut plan, options.max_steps, &mut diags);
    }
    for idx in 0..plan.steps.len() {
        check_action(&mut plan, idx, catalog, &mut diags);
    }
    if !graph_ok {
        return (plan, diags);
    }
    check_refs(&mut plan, catalog, &mut diags);
    check_questions(&mut plan, catalog, &mut diags);
    for (idx, step) in plan.steps.iter().enumerate() {
        if let Some(schedule) = &step.schedule {
            check_schedule(schedule, idx, step, options, &mut diags);
        }
    }
    (plan, diags)
}

fn step_pointer(idx: usize) -> String {
    format!("/steps/{idx}")
}

fn check_ids(plan: &Plan, diags: &mut Vec<Diagnostic>) -> bool {
    let mut seen = HashSet::new();
    let mut ok = true;
    for (idx, step) in plan.steps.iter().enumerate() {
        if step.id.trim().is_empty() {
            diags.push(Diagnostic::error(
                Code::InvalidStep,
                format!("/steps/{idx}/id"),
                "step has an empty id",
            ));
            ok = false;
        } else if !seen.insert(step.id.as_str()) {
            diags.push(
                Diagnostic::error(
                    Code::DuplicateStepId,
                    format!("/steps/{idx}/id"),
                    format!("step id `{}` is used twice", step.id),
                )
                .with_step(step.id.clone()),
            );
            ok = false;
        }
    }
    ok
}

/// The dependency graph: an edge from a step to itself is removed (a warning); an unknown
/// dependency is an error on the step that names it, and its edge is removed too; a cycle is a
/// plan-level error (`false`); steps out of dependency order are reordered (stable topological
/// sort).
fn check_graph(plan: &mut Plan, diags: &mut Vec<Diagnostic>) -> bool {
    let ids: HashSet<String> = plan.steps.iter().map(|s| s.id.clone()).collect();
    for (idx, step) in plan.steps.iter_mut().enumerate() {
        let mut kept = Vec::new();
        for (dep_idx, dep) in step.depends_on.iter().enumerate() {
            if kept.contains(dep) {
                continue;
            }
            if dep == &step.id {
                // A step listing itself says nothing about order (a small model's frequent
                // glitch): the edge goes, with a warning.
                diags.push(
                    Diagnostic::warning(
                        Code::AutoFixed,
                        format!("/steps/{idx}/depends_on/{dep_idx}"),
                        format!("step `{}` listed itself in depends_on; removed", step.id),
                    )
                    .with_step(step.id.clone()),
                );
                continue;
            }
            if !ids.contains(dep) {
                diags.push(
                    Diagnostic::error(
                        Code::UnknownDependency,
                        format!("/steps/{idx}/depends_on/{dep_idx}"),
                        format!(
                            "step `{}` depends on `{dep}`, which is not a step of this plan",
                            step.id
                        ),
                    )
                    .with_step(step.id.clone())
                    .with_value(json!(dep)),
                );
                // The error blames this step; the edge itself goes, so the rest of the graph
                // (order, cycles) and every other check still run.
                continue;
            }
            kept.push(dep.clone());
        }
        step.depends_on = kept;
    }
    match topological_order(&plan.steps) {
        Ok(order) => {
            if order.iter().enumerate().any(|(pos, &idx)| pos != idx) {
                let mut slots: Vec<Option<Step>> = plan.steps.drain(..).map(Some).collect();
                plan.steps = order
                    .iter()
                    .filter_map(|&idx| slots.get_mut(idx).and_then(Option::take))
                    .collect();
                diags.push(Diagnostic::info(
                    Code::AutoFixed,
                    "/steps",
                    "steps were reordered so that every step comes after its dependencies",
                ));
            }
            true
        }
        Err(cycle) => {
            diags.push(
                Diagnostic::error(
                    Code::Cycle,
                    "/steps",
                    format!(
                        "the dependencies form a cycle through {}",
                        cycle.join(" → ")
                    ),
                )
                .with_value(json!(cycle)),
            );
            false
        }
    }
}

/// Kahn's algorithm, stable (ready steps in their original order). On a cycle, the ids on it.
fn topological_order(steps: &[Step]) -> Result<Vec<usize>, Vec<String>> {
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut indegree: Vec<usize> = steps.iter().map(|s| s.depends_on.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    for (idx, step) in steps.iter().enumerate() {
        for dep in &step.depends_on {
            if let Some(list) = index
                .get(dep.as_str())
                .and_then(|&dep_idx| dependents.get_mut(dep_idx))
            {
                list.push(idx);
            }
        }
    }
    // Kahn's algorithm, always taking the first ready step in plan order: a heap of the ready
    // ones keeps that order in O(n log n) (a scan for the next one was quadratic: 10 s for a
    // hostile plan of 30k steps).
    let mut ready: BinaryHeap<Reverse<usize>> = indegree
        .iter()
        .enumerate()
        .filter(|(_, n)| **n == 0)
        .map(|(i, _)| Reverse(i))
        .collect();
    let mut order = Vec::with_capacity(steps.len());
    let mut done = vec![false; steps.len()];
    while let Some(Reverse(next)) = ready.pop() {
        if let Some(flag) = done.get_mut(next) {
            *flag = true;
        }
        order.push(next);
        for &dependent in dependents.get(next).map_or(&[][..], Vec::as_slice) {
            if let Some(n) = indegree.get_mut(dependent)
                && *n > 0
            {
                *n -= 1;
                if *n == 0 {
                    ready.push(Reverse(dependent));
                }
            }
        }
    }
    if order.len() < steps.len() {
        let cycle = steps
            .iter()
            .zip(&done)
            .filter(|(_, done)| !**done)
            .map(|(s, _)| s.id.clone())
            .collect();
        return Err(cycle);
    }
    Ok(order)
}

/// Cuts the plan to `max_steps`, keeping the first steps and the closing reply.
/// Merges a step that repeats an earlier one exactly (a small model's frequent glitch: the
/// same call twice) into the first: dependents and `$ref`s are pointed at the kept step.
/// A repeat is the same action and schedule with the same dependencies, or one that waits for
/// the step it repeats and otherwise only for that step's own dependencies (`s2` = `s1` again,
/// `depends_on: ["s1"]`): its arguments cannot use `s1`'s result (they equal `s1`'s), so it
/// would make the same call on the same inputs once `s1` is done. Neither kind of merge can
/// close a cycle, and every dependent still waits for what the repeat waited for.
/// Replies are left alone (two identical replies are harmless and rare). A research or
/// processing task says what it does in its title and description, so tasks are duplicates
/// only when those match too.
fn merge_duplicates(plan: &mut Plan, diags: &mut Vec<Diagnostic>) {
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut kept: Vec<Step> = Vec::with_capacity(plan.steps.len());
    for mut step in plan.steps.drain(..) {
        rename_deps(&mut step, &renamed);
        let original = (!matches!(step.action, Action::Reply { .. }))
            .then(|| {
                kept.iter().find(|k| {
                    k.action == step.action
                        && k.schedule == step.schedule
                        && (same_set(&k.depends_on, &step.depends_on) || waits_only_for(&step, k))
                        && (!matches!(step.action, Action::Task { .. })
                            || (k.title == step.title && k.description == step.description))
                })
            })
            .flatten();
        match original {
            Some(original) => {
                diags.push(
                    Diagnostic::warning(
                        Code::DuplicateStep,
                        "/steps",
                        format!(
                            "step `{}` repeated step `{}` exactly and was merged into it",
                            step.id, original.id
                        ),
                    )
                    .with_step(step.id.clone()),
                );
                renamed.insert(step.id, original.id.clone());
            }
            None => kept.push(step),
        }
    }
    plan.steps = kept;
}

/// `step` depends on `earlier`, and on nothing `earlier` does not depend on itself.
fn waits_only_for(step: &Step, earlier: &Step) -> bool {
    step.depends_on.contains(&earlier.id)
        && step
            .depends_on
            .iter()
            .all(|dep| *dep == earlier.id || earlier.depends_on.contains(dep))
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// Points `step`'s dependencies and `$ref`s at the steps that duplicates were merged into.
fn rename_deps(step: &mut Step, renamed: &HashMap<String, String>) {
    if renamed.is_empty() {
        return;
    }
    let mut deps: Vec<String> = Vec::with_capacity(step.depends_on.len());
    for dep in step.depends_on.drain(..) {
        let dep = renamed.get(&dep).cloned().unwrap_or(dep);
        if !deps.contains(&dep) {
            deps.push(dep);
        }
    }
    step.depends_on = deps;
    if let Action::Tool { arguments, .. } = &mut step.action {
        arguments.values_mut().for_each(|v| rename_refs(v, renamed));
    }
}

fn rename_refs(value: &mut Value, renamed: &HashMap<String, String>) {
    match value {
        Value::Object(map) => {
            if map.len() == 1
                && let Some(Value::String(path)) = map.get_mut("$ref")
            {
                let head = path.split(['.', '[']).next().unwrap_or_default().to_owned();
                if let Some(to) = renamed.get(&head) {
                    *path = format!("{to}{}", &path[head.len()..]);
                }
                return;
            }
            map.values_mut().for_each(|v| rename_refs(v, renamed));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename_refs(v, renamed)),
        _ => {}
    }
}

fn enforce_max_steps(plan: &mut Plan, max_steps: usize, diags: &mut Vec<Diagnostic>) {
    let max_steps = max_steps.max(1);
    if plan.steps.len() <= max_steps {
        return;
    }
    let closing_reply = match plan.steps.last() {
        Some(step) if matches!(step.action, Action::Reply { .. }) => plan.steps.pop(),
        _ => None,
    };
    let keep = if closing_reply.is_some() {
        max_steps - 1
    } else {
        max_steps
    };
    let dropped: Vec<String> = plan
        .steps
        .drain(keep.min(plan.steps.len())..)
        .map(|s| s.id)
        .collect();
    if let Some(reply) = closing_reply {
        plan.steps.push(reply);
    }
    for step in &mut plan.steps {
        step.depends_on.retain(|dep| !dropped.contains(dep));
    }
    diags.push(
        Diagnostic::warning(
            Code::MaxStepsExceeded,
            "/steps",
            format!(
                "the plan had more than {max_steps} steps; dropped {}",
                dropped.join(", ")
            ),
        )
        .with_value(json!(dropped)),
    );
}

fn check_action(plan: &mut Plan, idx: usize, catalog: &Catalog, diags: &mut Vec<Diagnostic>) {
    let Some(step) = plan.steps.get_mut(idx) else {
        return;
    };
    let base = step_pointer(idx);
    let step_id = step.id.clone();
    match &mut step.action {
        Action::Tool { name, arguments } => {
            if catalog.tool(name).is_none() {
                match catalog.tool_near(name) {
                    Some(near) => {
                        diags.push(
                            Diagnostic::warning(
                                Code::AutoFixed,
                                format!("{base}/action/name"),
                                format!(
                                    "tool `{name}` is not in the catalog; using `{}`",
                                    near.tool.name
                                ),
                            )
                            .with_step(step_id.clone()),
                        );
                        *name = near.tool.name.clone();
                    }
                    None => {
                        diags.push(
                            Diagnostic::error(
                                Code::UnknownTool,
                                format!("{base}/action/name"),
                                format!("tool `{name}` is not in the catalog"),
                            )
                            .with_step(step_id)
                            .with_value(json!(name)),
                        );
                        return;
                    }
                }
            }
            let Some(entry) = catalog.tool(name) else {
                return;
            };
            let mut refs = Vec::new();
            let args_value = Value::Object(std::mem::take(arguments));
            collect_refs(&args_value, "", &mut refs);
            for error in entry.validator().iter_errors(&args_value) {
                let path = error.instance_path().to_string();
                if refs.iter().any(|(ref_pointer, _)| {
                    path == *ref_pointer || path.starts_with(&format!("{ref_pointer}/"))
                }) {
                    continue;
                }
                let pointer = format!("{base}/action/arguments{path}");
                let diag = match error.kind() {
                    jsonschema::error::ValidationErrorKind::Required { property } => {
                        let argument = property.as_str().unwrap_or_default();
                        Diagnostic::error(
                            Code::MissingArgument,
                            format!("{pointer}/{}", escape_pointer(argument)),
                            format!("tool `{name}` requires argument `{argument}`"),
                        )
                    }
                    jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                        Diagnostic::error(
                            Code::UnknownArgument,
                            pointer,
                            format!(
                                "tool `{name}` has no argument {}",
                                unexpected
                                    .iter()
                                    .map(|u| format!("`{u}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                        .with_value(json!(unexpected))
                    }
                    _ => Diagnostic::error(Code::InvalidArgument, pointer, error.to_string())
                        .with_value(error.instance().clone().into_owned()),
                };
                diags.push(diag.with_step(step_id.clone()));
            }
            if let Value::Object(map) = args_value {
                *arguments = map;
            }
            if entry.tool.is_destructive() && !step.requires_approval {
                step.requires_approval = true;
                diags.push(
                    Diagnostic::info(
                        Code::ApprovalRequired,
                        format!("{base}/requires_approval"),
                        format!("tool `{name}` is marked destructive: the step needs approval before it runs"),
                    )
                    .with_step(step_id),
                );
            }
        }
        Action::Agent { agent, query } => {
            if catalog.agent(agent).is_none() {
                let available: Vec<&str> =
                    catalog.agents().iter().map(|a| a.name.as_str()).collect();
                let message = if available.is_empty() {
                    format!("agent `{agent}` is not available: no agents are configured")
                } else {
                    format!(
                        "agent `{agent}` is not available; available agents: {}",
                        available.join(", ")
                    )
                };
                diags.push(
                    Diagnostic::error(Code::UnknownAgent, format!("{base}/action/agent"), message)
                        .with_step(step_id.clone())
                        .with_value(json!(agent)),
                );
            }
            if query.trim().is_empty() {
                diags.push(
                    Diagnostic::error(
                        Code::InvalidStep,
                        format!("{base}/action/query"),
                        "agent task has an empty query",
                    )
                    .with_step(step_id),
                );
            }
        }
        Action::Reply { text } => {
            if text.trim().is_empty() {
                diags.push(
                    Diagnostic::error(
                        Code::InvalidStep,
                        format!("{base}/action/text"),
                        "reply step has an empty text",
                    )
                    .with_step(step_id),
                );
            }
        }
        Action::Task { .. } => {
            if step.title.trim().is_empty() && step.description.trim().is_empty() {
                diags.push(
                    Diagnostic::error(
                        Code::InvalidStep,
                        base,
                        "task step has neither title nor description",
                    )
                    .with_step(step_id),
                );
            }
        }
    }
}

fn check_refs(plan: &mut Plan, catalog: &Catalog, diags: &mut Vec<Diagnostic>) {
    for idx in 0..plan.steps.len() {
        let Some(step) = plan.steps.get(idx) else {
            continue;
        };
        let Action::Tool { name, arguments } = &step.action else {
            continue;
        };
        let mut refs = Vec::new();
        for (key, value) in arguments {
            collect_refs(value, &format!("/{}", escape_pointer(key)), &mut refs);
        }
        let step_id = step.id.clone();
        let tool_name = name.clone();
        for (pointer, text) in refs {
            let full_pointer = format!("/steps/{idx}/action/arguments{pointer}");
            let error = |message: String| {
                Diagnostic::error(Code::InvalidRef, full_pointer.clone(), message)
                    .with_step(step_id.clone())
                    .with_value(json!({"$ref": text}))
            };
            let reference = match StepRef::parse(&text) {
                Ok(reference) => reference,
                Err(message) => {
                    diags.push(error(message));
                    continue;
                }
            };
            let Some(target_idx) = plan.step_index(&reference.step) else {
                diags.push(error(format!(
                    "`$ref` names step `{}`, which is not in the plan",
                    reference.step
                )));
                continue;
            };
            if target_idx >= idx {
                diags.push(error(format!(
                    "`$ref` names step `{}`, which does not come before step `{step_id}`",
                    reference.step
                )));
                continue;
            }
            if !plan.ancestors(&step_id).contains(&reference.step.as_str()) {
                if let Some(step) = plan.steps.get_mut(idx) {
                    step.depends_on.push(reference.step.clone());
                }
                diags.push(
                    Diagnostic::warning(
                        Code::AutoFixed,
                        format!("/steps/{idx}/depends_on"),
                        format!(
                            "step `{step_id}` uses the output of `{}`; added it to depends_on",
                            reference.step
                        ),
                    )
                    .with_step(step_id.clone()),
                );
            }
            if let Some(message) =
                check_ref_type(plan, catalog, &tool_name, &pointer, target_idx, &reference)
            {
                diags.push(
                    Diagnostic::error(Code::RefTypeMismatch, full_pointer.clone(), message)
                        .with_step(step_id.clone())
                        .with_value(json!({"$ref": text})),
                );
            }
        }
    }
}

/// Where a path leads inside a schema.
enum SchemaAt<'a> {
    Found(&'a Value),
    Unknown,
    Missing(String),
}

fn schema_at<'a>(schema: &'a Value, path: &[PathSegment]) -> SchemaAt<'a> {
    let mut current = schema;
    for segment in path {
        let next = match segment {
            PathSegment::Key(key) => {
                if let Some(child) = current.get("properties").and_then(|p| p.get(key)) {
                    Some(child)
                } else if current.get("additionalProperties") == Some(&Value::Bool(false))
                    || current
                        .get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| t != "object")
                {
                    return SchemaAt::Missing(format!("no field `{key}`"));
                } else {
                    current
                        .get("additionalProperties")
                        .filter(|v| v.is_object())
                }
            }
            PathSegment::Index(index) => {
                if current
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t != "array")
                {
                    return SchemaAt::Missing(format!("`[{index}]` indexes a non-array"));
                }
                current
                    .get("prefixItems")
                    .and_then(|p| p.get(*index))
                    .or_else(|| current.get("items").filter(|v| v.is_object()))
            }
        };
        match next {
            Some(child) => current = child,
            None => return SchemaAt::Unknown,
        }
    }
    SchemaAt::Found(current)
}

fn schema_types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(ty)) => vec![ty.as_str()],
        Some(Value::Array(tys)) => tys.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Checks a reference against the referenced tool's `output_schema` and the argument's schema;
/// returns what does not fit.
fn check_ref_type(
    plan: &Plan,
    catalog: &Catalog,
    tool_name: &str,
    arg_pointer: &str,
    target_idx: usize,
    reference: &StepRef,
) -> Option<String> {
    let target = plan.steps.get(target_idx)?;
    let Action::Tool {
        name: target_tool, ..
    } = &target.action
    else {
        return None;
    };
    let output_schema = catalog.tool(target_tool)?.tool.output_schema.as_ref()?;
    let produced = match schema_at(output_schema, &reference.path) {
        SchemaAt::Found(schema) => schema,
        SchemaAt::Unknown => return None,
        SchemaAt::Missing(why) => {
            return Some(format!(
                "`{reference}` does not fit the output schema of `{target_tool}`: {why}"
            ));
        }
    };
    let input_schema = &catalog.tool(tool_name)?.tool.input_schema;
    let arg_path: Vec<PathSegment> = arg_pointer
        .split('/')
        .skip(1)
        .map(|token| match token.parse::<usize>() {
            Ok(index) => PathSegment::Index(index),
            Err(_) => PathSegment::Key(token.replace("~1", "/").replace("~0", "~")),
        })
        .collect();
    let SchemaAt::Found(expected) = schema_at(input_schema, &arg_path) else {
        return None;
    };
    let expected_types = schema_types(expected);
    let produced_types = schema_types(produced);
    if expected_types.is_empty() || produced_types.is_empty() {
        return None;
    }
    let fits = produced_types.iter().any(|p| {
        expected_types.contains(p) || (*p == "integer" && expected_types.contains(&"number"))
    });
    (!fits).then(|| {
        format!(
            "`{reference}` is {} but the argument expects {}",
            produced_types.join("|"),
            expected_types.join("|")
        )
    })
}

/// A question must unblock something: when it names a step and an argument, the step must be a
/// tool step whose tool has that parameter and has no value for it yet. Questions that fail this
/// are dropped with a warning (small models ask about values they already wrote).
fn check_questions(plan: &mut Plan, catalog: &Catalog, diags: &mut Vec<Diagnostic>) {
    let mut kept = Vec::new();
    let mut dropped_any = false;
    for (idx, question) in std::mem::take(&mut plan.questions).into_iter().enumerate() {
        let moot = match (&question.step, &question.argument) {
            (Some(step_id), Some(argument)) => match plan.step(step_id).map(|s| &s.action) {
                None => Some(format!("names step `{step_id}`, which is not in the plan")),
                Some(Action::Tool { name, arguments }) => {
                    let known = catalog
                        .tool(name)
                        .is_none_or(|t| t.tool.parameter_names().contains(&argument.as_str()));
                    if !known {
                        Some(format!(
                            "asks for `{argument}`, which tool `{name}` does not take"
                        ))
                    } else if arguments.contains_key(argument) {
                        Some(format!(
                            "asks for `{argument}`, which step `{step_id}` already has"
                        ))
                    } else {
                        None
                    }
                }
                Some(_) => None,
            },
            (Some(step_id), None) if plan.step(step_id).is_none() => {
                Some(format!("names step `{step_id}`, which is not in the plan"))
            }
            _ => None,
        };
        match moot {
            Some(why) => {
                dropped_any = true;
                diags.push(
                    Diagnostic::warning(
                        Code::AutoFixed,
                        format!("/questions/{idx}"),
                        format!("dropped a question that {why}"),
                    )
                    .with_value(json!(question.text)),
                );
            }
            None => kept.push(question),
        }
    }
    plan.questions = kept;
    if dropped_any && plan.questions.is_empty() && plan.guidance.is_none() {
        plan.ready = true;
    }
}

fn check_schedule(
    schedule: &Schedule,
    idx: usize,
    step: &Step,
    options: &PlanOptions,
    diags: &mut Vec<Diagnostic>,
) {
    let pointer = format!("/steps/{idx}/schedule");
    let problem = match schedule {
        Schedule::Once => None,
        Schedule::Interval { minutes } => {
            (*minutes == 0).then(|| "interval must be at least 1 minute".to_owned())
        }
        Schedule::Daily { time } => {
            (!valid_time_of_day(time)).then(|| format!("daily time `{time}` is not HH:MM"))
        }
        Schedule::Cron { expr } => {
            (!valid_cron(expr)).then(|| format!("`{expr}` is not a five-field cron expression"))
        }
    };
    if let Some(message) = problem {
        diags.push(
            Diagnostic::error(Code::InvalidSchedule, pointer.clone(), message)
                .with_step(step.id.clone()),
        );
        return;
    }
    if schedule.is_recurring() && !options.allow_recurring {
        diags.push(
            Diagnostic::warning(
                Code::ScheduleUnconfirmed,
                pointer,
                format!(
                    "step `{}` recurs; it needs the user's confirmation first",
                    step.id
                ),
            )
            .with_step(step.id.clone()),
        );
    }
}

fn valid_time_of_day(time: &str) -> bool {
    let Some((hours, minutes)) = time.trim().split_once(':') else {
        return false;
    };
    let hours_ok = hours.len() == 2 && hours.parse::<u8>().is_ok_and(|h| h < 24);
    let minutes_ok = minutes.len() == 2 && minutes.parse::<u8>().is_ok_and(|m| m < 60);
    hours_ok && minutes_ok
}

fn valid_cron(expr: &str) -> bool {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    fields.len() == 5
        && fields.iter().all(|field| {
            field
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "*/,-?".contains(c))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(id: &str, deps: &[&str]) -> Step {
        let mut step = Step::new(
            id,
            id,
            crate::Action::Reply {
                text: String::new(),
            },
        );
        step.depends_on = deps.iter().map(|d| (*d).to_owned()).collect();
        step
    }

    #[test]
    fn topological_order_takes_the_first_ready_step_and_names_a_cycle() {
        let steps = [
            step("s1", &["s3"]),
            step("s2", &[]),
            step("s3", &[]),
            step("s4", &["s1", "s2"]),
        ];
        assert_eq!(topological_order(&steps), Ok(vec![1, 2, 0, 3]));
        let cycle = [step("a", &["b"]), step("b", &["a"]), step("c", &[])];
        assert_eq!(
            topological_order(&cycle),
            Err(vec!["a".to_owned(), "b".to_owned()])
        );
        // A long chain is ordered in one pass (the scan for the next step was quadratic).
        let chain: Vec<Step> = (0..20_000)
            .map(|i| {
                let deps = if i == 0 {
                    vec![]
                } else {
                    vec![format!("s{i}")]
                };
                let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
                step(&format!("s{}", i + 1), &deps)
            })
            .collect();
        assert_eq!(topological_order(&chain).map(|o| o.len()), Ok(20_000));
    }

    #[test]
    fn times_and_crons() {
        for good in ["09:00", "23:59", "00:00"] {
            assert!(valid_time_of_day(good), "{good}");
        }
        for bad in ["9:00", "24:00", "12:60", "noon", ""] {
            assert!(!valid_time_of_day(bad), "{bad}");
        }
        assert!(valid_cron("0 9 * * 1-5"));
        assert!(!valid_cron("0 9 * *"));
        assert!(!valid_cron("0 9 * * $"));
    }
}
