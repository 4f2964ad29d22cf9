//! The dependency graph of a plan: step ids, unknown and self dependencies, cycles, and the
//! stable topological order the steps are put in.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use serde_json::json;

use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Plan, Step};

pub(super) fn check_ids(plan: &Plan, diags: &mut Vec<Diagnostic>) -> bool {
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
pub(super) fn check_graph(plan: &mut Plan, diags: &mut Vec<Diagnostic>) -> bool {
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
}
