//! Shrinking a plan whose graph is sound: a step that repeats an earlier one is merged into it,
//! and a plan over `max_steps` is cut, keeping its closing reply.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Action, Plan, Step};

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
pub(super) fn merge_duplicates(plan: &mut Plan, diags: &mut Vec<Diagnostic>) {
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

/// Cuts the plan to `max_steps`, keeping the first steps and the closing reply.
pub(super) fn enforce_max_steps(plan: &mut Plan, max_steps: usize, diags: &mut Vec<Diagnostic>) {
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
