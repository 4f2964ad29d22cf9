//! The next version of a plan: a new plan of the same request under the old plan's identity,
//! with the old plan's completed steps kept. Every replan makes its version with
//! [`next_version`] (the planner's replans in [`crate::replan`], and a plan that took its
//! questions' recommended answers).

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{Action, Plan, StepStatus, rename_refs};

/// The merged plan and what happened to its steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    /// The plan to store as the next version.
    pub plan: Plan,
    /// Completed steps kept from the old plan.
    pub kept: Vec<String>,
    /// Steps still to run.
    pub added: Vec<String>,
}

/// The next version of `old` from `new`, a new plan of the same request: `new`'s content (title,
/// thought, questions, …) under `old`'s identity (id, creation time, owner when `new` names
/// none, and `old`'s `metadata.execution` when `new` has none), with `old`'s completed steps
/// (`completed`: id → result) kept in front of `new`'s
/// other steps. A new step that makes the same tool call as a completed one (tool and
/// arguments; models retitle steps when they replan), or that equals it (title, description,
/// action), is that step: the call is not made again; a new step whose id is taken gets the next free `sN`; dependencies and `$ref`s follow
/// the renames.
pub fn next_version(old: &Plan, completed: &HashMap<String, Value>, new: Plan) -> Merged {
    let mut steps = Vec::new();
    let mut kept = Vec::new();
    for step in &old.steps {
        if let Some(result) = completed.get(&step.id) {
            let mut step = step.clone();
            step.status = StepStatus::Completed;
            step.result = Some(result.clone());
            step.error = None;
            kept.push(step.id.clone());
            steps.push(step);
        }
    }
    let mut taken: HashSet<String> = kept.iter().cloned().collect();
    let mut next_n = old
        .steps
        .iter()
        .chain(new.steps.iter())
        .filter_map(|s| s.id.strip_prefix('s')?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
        + 1;
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut fresh = Vec::new();
    let mut new = new;
    for step in std::mem::take(&mut new.steps) {
        let same = steps.iter().find(|k| {
            k.action == step.action
                && (matches!(k.action, Action::Tool { .. })
                    || (k.title == step.title && k.description == step.description))
        });
        if let Some(same) = same {
            renamed.insert(step.id.clone(), same.id.clone());
            continue;
        }
        let id = if taken.contains(&step.id) {
            let id = format!("s{next_n}");
            next_n += 1;
            id
        } else {
            step.id.clone()
        };
        taken.insert(id.clone());
        renamed.insert(step.id.clone(), id);
        fresh.push(step);
    }
    let mut added = Vec::new();
    for mut step in fresh {
        step.id = renamed.get(&step.id).cloned().unwrap_or(step.id);
        for dep in &mut step.depends_on {
            if let Some(to) = renamed.get(dep) {
                *dep = to.clone();
            }
        }
        step.depends_on.dedup();
        if let Action::Tool { arguments, .. } = &mut step.action {
            for value in arguments.values_mut() {
                rename_refs(value, &renamed);
            }
        }
        step.status = StepStatus::NotStarted;
        step.result = None;
        step.error = None;
        added.push(step.id.clone());
        steps.push(step);
    }
    let mut plan = new;
    plan.id = old.id.clone();
    plan.created_at = old.created_at;
    if plan.owner.is_none() {
        plan.owner = old.owner.clone();
    }
    // How the plan runs (failure policies, approvals, the goal check) is the caller's, not
    // the model's: it stays unless the new plan sets its own.
    if let Some(execution) = old.metadata.get("execution")
        && !plan.metadata.contains_key("execution")
    {
        plan.metadata
            .insert("execution".to_owned(), execution.clone());
    }
    plan.steps = steps;
    Merged { plan, kept, added }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Step;
    use serde_json::json;

    fn tool(id: &str, name: &str, args: Value) -> Step {
        Step::new(
            id,
            name,
            Action::Tool {
                name: name.into(),
                arguments: args.as_object().cloned().unwrap_or_default(),
            },
        )
    }

    #[test]
    fn merge_keeps_completed_and_renames_collisions() {
        let mut old = Plan::new("p", "g");
        old.steps = vec![
            tool("s1", "fetch", json!({})),
            tool("s2", "parse", json!({"x": {"$ref": "s1.output"}})),
        ];
        let completed: HashMap<String, Value> = [("s1".to_owned(), json!({"v": 1}))].into();
        let mut new = Plan::new("p", "g");
        let mut s2 = tool("s2", "parse_v2", json!({"x": {"$ref": "s1.output.v"}}));
        s2.depends_on = vec!["s1".into()];
        let mut s1_new = tool("s1", "other", json!({}));
        s1_new.depends_on = vec![];
        // The model re-listed the completed fetch as s1, and put a new step under the taken id s1.
        new.steps = vec![tool("s1", "fetch", json!({})), s2];
        let merged = next_version(&old, &completed, new);
        assert_eq!(merged.kept, ["s1"]);
        assert_eq!(merged.added, ["s2"]);
        assert_eq!(merged.plan.steps[0].status, StepStatus::Completed);
        assert_eq!(merged.plan.steps[0].result, Some(json!({"v": 1})));

        let mut other = Plan::new("p", "g");
        let mut dep = tool("s2", "use", json!({"a": {"$ref": "s1.output"}}));
        dep.depends_on = vec!["s1".into()];
        other.steps = vec![s1_new, dep];
        let merged = next_version(&old, &completed, other);
        // New s1 collides with the kept s1: renamed to s3; its dependent follows.
        assert_eq!(merged.added, ["s3", "s2"]);
        let dep = merged.plan.step("s2").unwrap();
        assert_eq!(dep.depends_on, ["s3"]);
        let Action::Tool { arguments, .. } = &dep.action else {
            panic!()
        };
        assert_eq!(arguments["a"], json!({"$ref": "s3.output"}));
    }

    #[test]
    fn a_retitled_completed_call_is_not_made_again() {
        let mut old = Plan::new("p", "g");
        old.steps = vec![tool("s1", "fetch", json!({"q": "paris"}))];
        let completed: HashMap<String, Value> = [("s1".to_owned(), json!({"v": 1}))].into();
        let mut new = Plan::new("p", "g");
        let mut again = tool("s1", "fetch", json!({"q": "paris"}));
        again.title = "Fetch the Paris page again".into();
        let mut other_args = tool("s2", "fetch", json!({"q": "lyon"}));
        other_args.title = "fetch".into();
        let mut reply = Step::new(
            "s3",
            "Answer",
            Action::Reply {
                text: "done".into(),
            },
        );
        reply.depends_on = vec!["s1".into(), "s2".into()];
        new.steps = vec![again, other_args, reply];
        let merged = next_version(&old, &completed, new);
        assert_eq!(merged.kept, ["s1"]);
        // The same call under a new title is the completed step; other arguments are a new call.
        assert_eq!(merged.added, ["s2", "s3"]);
        assert_eq!(merged.plan.step("s3").unwrap().depends_on, ["s1", "s2"]);
    }

    /// With nothing completed (a person's edit), the next version is the new plan under the
    /// old identity.
    #[test]
    fn with_nothing_kept_the_new_plan_takes_the_old_identity() {
        let mut old = Plan::new("p-1", "g");
        old.owner = Some("alice".into());
        old.steps = vec![tool("s1", "fetch", json!({}))];
        let execution = json!({"retries": 0, "goal_check": true});
        old.metadata.insert("execution".into(), execution.clone());
        let mut new = Plan::new("other", "g");
        new.title = "Shorter".into();
        new.steps = vec![tool("s1", "fetch", json!({"q": 1}))];
        let merged = next_version(&old, &HashMap::new(), new);
        assert_eq!(merged.plan.id, "p-1");
        assert_eq!(merged.plan.created_at, old.created_at);
        assert_eq!(merged.plan.owner.as_deref(), Some("alice"));
        assert_eq!(merged.plan.title, "Shorter");
        // How it runs is kept: the model does not set it.
        assert_eq!(merged.plan.metadata["execution"], execution);
        assert!(merged.kept.is_empty());
        assert_eq!(merged.added, ["s1"]);
    }
}
