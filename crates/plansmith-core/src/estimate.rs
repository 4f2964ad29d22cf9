//! What a plan will cost when it runs, said before it runs ([`Estimate`]): its calls per tool
//! (read-only and destructive ones counted apart), its model calls, and its wall time along the
//! DAG's critical path, with each step's time (and a task step's tokens) taken from the history
//! of past runs where there is one ([`StepHistory`]).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::plan::{Action, Plan, StepStatus};

/// What a step is assumed to take when nothing like it ran before: one second for a call or a
/// task, nothing for a reply.
pub const UNTIMED_STEP_MS: f64 = 1000.0;

/// Past runs of one kind of step (a tool, `agent:NAME` or `task:KIND`), as a store keeps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepHistory {
    /// Attempts that completed.
    pub calls: u64,
    /// Their mean wall time, in milliseconds.
    pub mean_ms: f64,
    /// Their mean model tokens (task steps).
    pub mean_tokens: f64,
}

/// Model calls a run of the plan makes.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCalls {
    /// One per task step.
    pub task_steps: u32,
    /// The final summary (when the runner has a model).
    pub summary: u32,
    /// Replans, at most (the runner's cap): each is one planning call, with repairs.
    pub replans_at_most: u32,
}

/// A plan's cost before it runs.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Tool and agent calls if every step succeeds at its first attempt (a retry is one more).
    pub tool_calls: u32,
    /// Calls per tool (agents as `agent:NAME`).
    pub per_tool: BTreeMap<String, u32>,
    /// Calls of tools annotated read-only (`readOnlyHint`).
    pub read_only_calls: u32,
    /// Calls of tools annotated destructive (`destructiveHint`) or that need an approval.
    pub destructive_calls: u32,
    /// Model calls of a run.
    pub model_calls: ModelCalls,
    /// Model tokens of the task steps, from the history of past task steps of the same kinds;
    /// `None` when a task step's kind never ran.
    pub task_tokens: Option<u64>,
    /// Wall time, in seconds: steps start as soon as their dependencies completed and one of
    /// the runner's `concurrency` slots is free (never less than the critical path).
    pub seconds: f64,
    /// The steps of the critical path, in order.
    pub critical_path: Vec<String>,
    /// Steps whose time comes from past runs.
    pub timed_steps: u32,
    /// Steps nothing like which ran before: assumed to take [`UNTIMED_STEP_MS`].
    pub untimed_steps: u32,
}

/// The history key of a step's action: the tool's name, `agent:NAME` or `task:KIND`; `None`
/// for a reply.
pub fn history_key(action: &Action) -> Option<String> {
    match action {
        Action::Tool { name, .. } => Some(name.clone()),
        Action::Agent { agent, .. } => Some(format!("agent:{agent}")),
        Action::Task { kind, .. } => Some(format!("task:{kind}")),
        Action::Reply { .. } => None,
    }
}

impl Estimate {
    /// Estimates a run of `plan`: the tools' annotations from `catalog`, step times and task
    /// tokens from `history` (by [`history_key`]), at most `replans` replans, a summary call
    /// when `summary` is set, and at most `concurrency` steps at once. Steps already completed
    /// cost nothing more.
    pub fn of(
        plan: &Plan,
        catalog: &Catalog,
        history: &HashMap<String, StepHistory>,
        replans: u32,
        summary: bool,
        concurrency: usize,
    ) -> Estimate {
        let mut estimate = Estimate {
            model_calls: ModelCalls {
                task_steps: 0,
                summary: u32::from(summary),
                replans_at_most: replans,
            },
            task_tokens: Some(0),
            ..Estimate::default()
        };
        // Each step's own time, in milliseconds.
        let mut own: HashMap<&str, f64> = HashMap::new();
        for step in &plan.steps {
            if step.status == StepStatus::Completed {
                own.insert(&step.id, 0.0);
                continue;
            }
            let key = history_key(&step.action);
            let past = key
                .as_ref()
                .and_then(|k| history.get(k))
                .filter(|h| h.calls > 0);
            match &step.action {
                Action::Tool { name, .. } => {
                    estimate.tool_calls += 1;
                    *estimate.per_tool.entry(name.clone()).or_default() += 1;
                    let tool = catalog.tool(name).map(|t| &t.tool);
                    let read_only = tool
                        .and_then(|t| t.annotations.as_ref())
                        .is_some_and(|a| a.read_only_hint == Some(true));
                    if read_only {
                        estimate.read_only_calls += 1;
                    }
                    if step.requires_approval || tool.is_some_and(|t| t.is_destructive()) {
                        estimate.destructive_calls += 1;
                    }
                }
                Action::Agent { agent, .. } => {
                    estimate.tool_calls += 1;
                    *estimate
                        .per_tool
                        .entry(format!("agent:{agent}"))
                        .or_default() += 1;
                }
                Action::Task { .. } => {
                    estimate.model_calls.task_steps += 1;
                    estimate.task_tokens = match (estimate.task_tokens, past) {
                        (Some(sum), Some(past)) => Some(sum + past.mean_tokens.round() as u64),
                        _ => None,
                    };
                }
                Action::Reply { .. } => {}
            }
            let ms = match (&key, past) {
                (None, _) => 0.0,
                (Some(_), Some(past)) => {
                    estimate.timed_steps += 1;
                    past.mean_ms
                }
                (Some(_), None) => {
                    estimate.untimed_steps += 1;
                    UNTIMED_STEP_MS
                }
            };
            own.insert(&step.id, ms);
        }
        // The longest path: a step ends at its own time after its latest dependency. Steps
        // are taken until none changes; a valid plan is acyclic, so that is at most one round
        // per step, and the bound keeps a cyclic one (never valid) from looping.
        let mut end: HashMap<&str, (f64, Option<&str>)> = HashMap::new();
        for _ in 0..=plan.steps.len() {
            let mut changed = false;
            for step in &plan.steps {
                let (start, via) = step
                    .depends_on
                    .iter()
                    .filter_map(|d| end.get(d.as_str()).map(|(t, _)| (*t, Some(d.as_str()))))
                    .fold(
                        (0.0, None),
                        |best, next| if next.0 > best.0 { next } else { best },
                    );
                let finish = start + own.get(step.id.as_str()).copied().unwrap_or(0.0);
                if end.get(step.id.as_str()).is_none_or(|(t, _)| finish > *t) {
                    end.insert(&step.id, (finish, via));
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // The step that ends last (the last in plan order among equals).
        let last = plan
            .steps
            .iter()
            .filter_map(|s| end.get(s.id.as_str()).map(|(t, _)| (s.id.as_str(), *t)))
            .fold(None, |best: Option<(&str, f64)>, next| match best {
                Some(best) if best.1 > next.1 => Some(best),
                _ => Some(next),
            });
        if let Some((mut id, total)) = last {
            estimate.seconds = total.round() / 1000.0;
            let mut path = vec![id.to_owned()];
            while let Some((_, Some(previous))) = end.get(id) {
                if path.len() > plan.steps.len() {
                    break;
                }
                path.push((*previous).to_owned());
                id = previous;
            }
            path.reverse();
            estimate.critical_path = path;
        }
        estimate.seconds = estimate
            .seconds
            .max(makespan(plan, &own, concurrency.max(1)).round() / 1000.0);
        if estimate.model_calls.task_steps == 0 {
            estimate.task_tokens = Some(0);
        }
        estimate
    }
}

/// When the last step ends, in milliseconds, when ready steps start in plan order as soon as
/// one of `slots` is free (as the executor starts them).
fn makespan(plan: &Plan, own: &HashMap<&str, f64>, slots: usize) -> f64 {
    let mut ended: HashMap<&str, f64> = HashMap::new();
    // Running steps and when they end.
    let mut running: Vec<(&str, f64)> = Vec::new();
    let mut now = 0.0_f64;
    // Each round starts what it can, then lets the first running step end; every step starts
    // once, so the rounds are bounded by twice the steps.
    for _ in 0..=(2 * plan.steps.len() + 1) {
        for step in &plan.steps {
            if running.len() >= slots {
                break;
            }
            let id = step.id.as_str();
            if ended.contains_key(id) || running.iter().any(|(r, _)| *r == id) {
                continue;
            }
            // A dependency that is not a step of the plan never holds a step back here.
            let ready = step
                .depends_on
                .iter()
                .all(|d| ended.contains_key(d.as_str()) || !plan.steps.iter().any(|s| &s.id == d));
            if ready {
                running.push((id, now + own.get(id).copied().unwrap_or(0.0)));
            }
        }
        let Some(first) = running
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.1.total_cmp(&b.1.1))
            .map(|(i, _)| i)
        else {
            break;
        };
        let (id, at) = running.swap_remove(first);
        now = at;
        ended.insert(id, at);
    }
    ended.values().copied().fold(0.0, f64::max)
}

/// One line: `3 tool call(s) (search ×2, delete ×1; 2 read-only, 1 destructive) · 1 model
/// call(s) + up to 2 replan(s) · ~3.5 s along s1 → s3 → s4 (1 step(s) untimed)`.
impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tools: Vec<String> = self
            .per_tool
            .iter()
            .map(|(tool, n)| format!("{tool} ×{n}"))
            .collect();
        write!(f, "{} tool call(s)", self.tool_calls)?;
        if !tools.is_empty() {
            write!(
                f,
                " ({}; {} read-only, {} destructive)",
                tools.join(", "),
                self.read_only_calls,
                self.destructive_calls
            )?;
        }
        let calls = self.model_calls.task_steps + self.model_calls.summary;
        write!(f, " · {calls} model call(s)")?;
        if let Some(tokens) = self.task_tokens.filter(|t| *t > 0) {
            write!(f, " (~{tokens} tokens)")?;
        }
        if self.model_calls.replans_at_most > 0 {
            write!(f, " + up to {} replan(s)", self.model_calls.replans_at_most)?;
        }
        write!(f, " · ~{} s", self.seconds)?;
        if self.critical_path.len() > 1 {
            write!(f, " along {}", self.critical_path.join(" → "))?;
        }
        if self.untimed_steps > 0 {
            write!(
                f,
                " ({} step(s) never timed, counted {} s each)",
                self.untimed_steps,
                UNTIMED_STEP_MS / 1000.0
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn plan(steps: serde_json::Value) -> Plan {
        let mut plan = Plan::new("p", "goal");
        plan.steps = serde_json::from_value(steps).unwrap();
        plan
    }

    #[test]
    fn calls_and_the_critical_path_come_from_the_dag_and_the_history() {
        let catalog = Catalog::from_json(&json!([
            {"name": "search", "description": "Search.", "input_schema": {"type": "object"},
             "annotations": {"readOnlyHint": true}},
            {"name": "delete", "description": "Delete.", "input_schema": {"type": "object"},
             "annotations": {"destructiveHint": true}}
        ]))
        .unwrap();
        // s1 → s3 and s2 → s3: s3 waits for the slower of the two.
        let plan = plan(json!([
            {"id": "s1", "title": "a", "action": {"type": "tool", "name": "search", "arguments": {}}},
            {"id": "s2", "title": "b", "action": {"type": "tool", "name": "search", "arguments": {}}},
            {"id": "s3", "title": "c", "depends_on": ["s1", "s2"],
             "action": {"type": "task", "kind": "research"}},
            {"id": "s4", "title": "d", "depends_on": ["s3"],
             "action": {"type": "tool", "name": "delete", "arguments": {}}},
            {"id": "s5", "title": "e", "depends_on": ["s4"], "action": {"type": "reply", "text": "ok"}}
        ]));
        let history = HashMap::from([
            (
                "search".to_owned(),
                StepHistory {
                    calls: 3,
                    mean_ms: 2000.0,
                    mean_tokens: 0.0,
                },
            ),
            (
                "task:research".to_owned(),
                StepHistory {
                    calls: 2,
                    mean_ms: 500.0,
                    mean_tokens: 300.0,
                },
            ),
        ]);
        let estimate = Estimate::of(&plan, &catalog, &history, 2, true, 4);
        assert_eq!(estimate.tool_calls, 3);
        assert_eq!(estimate.per_tool["search"], 2);
        assert_eq!(
            (estimate.read_only_calls, estimate.destructive_calls),
            (2, 1)
        );
        assert_eq!(
            estimate.model_calls,
            ModelCalls {
                task_steps: 1,
                summary: 1,
                replans_at_most: 2
            }
        );
        assert_eq!(estimate.task_tokens, Some(300));
        // 2 s (search) + 0.5 s (task) + 1 s (delete: never ran) + 0 (reply).
        assert_eq!(estimate.seconds, 3.5);
        assert_eq!(estimate.critical_path, ["s1", "s3", "s4", "s5"]);
        assert_eq!((estimate.timed_steps, estimate.untimed_steps), (3, 1));
        assert_eq!(
            estimate.to_string(),
            "3 tool call(s) (delete ×1, search ×2; 2 read-only, 1 destructive) · 2 model \
             call(s) (~300 tokens) + up to 2 replan(s) · ~3.5 s along s1 → s3 → s4 → s5 \
             (1 step(s) never timed, counted 1 s each)"
        );

        // Without history for the task's kind its tokens are unknown.
        let estimate = Estimate::of(&plan, &catalog, &HashMap::new(), 0, false, 4);
        assert_eq!(estimate.task_tokens, None);
        assert_eq!(estimate.seconds, 3.0);
    }

    #[test]
    fn steps_past_the_runners_concurrency_wait_for_a_slot() {
        let steps: Vec<serde_json::Value> = (1..=6)
            .map(|i| {
                json!({"id": format!("s{i}"), "title": "t",
                            "action": {"type": "tool", "name": "x", "arguments": {"i": i}}})
            })
            .collect();
        let plan = plan(serde_json::Value::Array(steps));
        let at = |slots| Estimate::of(&plan, &Catalog::empty(), &HashMap::new(), 0, false, slots);
        // Six one-second steps: one wave with six slots, two with four, six with one.
        assert_eq!(at(6).seconds, 1.0);
        assert_eq!(at(4).seconds, 2.0);
        assert_eq!(at(1).seconds, 6.0);
    }

    #[test]
    fn completed_steps_cost_nothing_more() {
        let mut plan = plan(json!([
            {"id": "s1", "title": "a", "action": {"type": "tool", "name": "x", "arguments": {}}},
            {"id": "s2", "title": "b", "depends_on": ["s1"],
             "action": {"type": "tool", "name": "x", "arguments": {}}}
        ]));
        plan.steps[0].status = StepStatus::Completed;
        let estimate = Estimate::of(&plan, &Catalog::empty(), &HashMap::new(), 0, false, 4);
        assert_eq!((estimate.tool_calls, estimate.seconds), (1, 1.0));
    }
}
