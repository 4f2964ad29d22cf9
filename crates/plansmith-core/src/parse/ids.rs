//! Step ids: the ids, positions and aliases the model used mapped to `s1, s2, …`, and
//! dependencies and `$ref`s rewritten to them.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::step::Draft;
use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Action, Step, StepRef, escape_pointer};

/// Maps the ids the model used to the normalised ones.
pub(super) struct IdMap {
    /// The model's id → the new id (the first step with that id).
    by_raw: HashMap<String, String>,
    /// 1-based position in the model's list → the new id.
    by_position: HashMap<usize, String>,
    /// Ids of the steps that were left out.
    dropped_raw: HashSet<String>,
    /// 1-based positions of the steps that were left out.
    dropped_positions: HashSet<usize>,
}

/// What a step reference resolves to.
pub(super) enum Resolved {
    /// A step of the plan, by its new id.
    Step(String),
    /// A step that was left out: after renumbering its old name may denote another step, so
    /// the reference must not be kept as is.
    Dropped,
    /// Nothing the model wrote: kept verbatim for validation to report.
    Unknown,
}

impl IdMap {
    /// `dropped` lists the steps left out: (position in the model's list, the model's id).
    pub(super) fn new(
        drafts: &[Draft],
        dropped: &[(usize, Option<String>)],
        diags: &mut Vec<Diagnostic>,
    ) -> IdMap {
        let mut by_raw: HashMap<String, String> = HashMap::new();
        let mut by_position = HashMap::new();
        for (out_idx, draft) in drafts.iter().enumerate() {
            by_position.insert(draft.input_idx + 1, draft.step.id.clone());
            let Some(raw) = &draft.raw_id else { continue };
            match by_raw.get(raw) {
                Some(first) => diags.push(
                    Diagnostic::warning(
                        Code::AutoFixed,
                        format!("/steps/{out_idx}/id"),
                        format!(
                            "duplicate step id `{raw}`; the step was renumbered and references to \
                             `{raw}` resolve to the first step with it ({first})"
                        ),
                    )
                    .with_step(&draft.step.id)
                    .with_value(Value::from(raw.as_str())),
                ),
                None => {
                    by_raw.insert(raw.clone(), draft.step.id.clone());
                }
            }
        }
        IdMap {
            by_raw,
            by_position,
            dropped_raw: dropped.iter().filter_map(|(_, raw)| raw.clone()).collect(),
            dropped_positions: dropped.iter().map(|(idx, _)| idx + 1).collect(),
        }
    }

    /// Resolves a step reference written as a string: a model id, `3`, `s3`, `step3`,
    /// `step_3`, `step 3`, `#3` (positions are 1-based). Model ids win over positions.
    fn resolve_str(&self, text: &str) -> Resolved {
        let text = text.trim();
        if let Some(id) = self.by_raw.get(text) {
            return Resolved::Step(id.clone());
        }
        if self.dropped_raw.contains(text) {
            return Resolved::Dropped;
        }
        let lower = text.to_ascii_lowercase();
        let digits = ["step_", "step-", "step ", "step", "s", "#"]
            .iter()
            .find_map(|prefix| lower.strip_prefix(prefix))
            .unwrap_or(&lower);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Resolved::Unknown;
        }
        match digits.parse::<usize>() {
            Ok(position) => match self.by_position.get(&position) {
                Some(id) => Resolved::Step(id.clone()),
                None if self.dropped_positions.contains(&position) => Resolved::Dropped,
                None => Resolved::Unknown,
            },
            Err(_) => Resolved::Unknown,
        }
    }

    /// Resolves a dependency given as a string or an integer.
    pub(super) fn resolve(&self, dep: &Value) -> (Resolved, String) {
        let verbatim = match dep {
            Value::String(text) => text.trim().to_owned(),
            other => other.to_string(),
        };
        let resolved = match dep {
            Value::String(_) | Value::Number(_) => self.resolve_str(&verbatim),
            _ => Resolved::Unknown,
        };
        (resolved, verbatim)
    }

    /// Finishes a draft: dependencies and `$ref`s remapped to the new ids. A dependency on a
    /// step that was left out is removed, with an error; unknown ones are kept verbatim.
    pub(super) fn finish(&self, draft: Draft, out_idx: usize, diags: &mut Vec<Diagnostic>) -> Step {
        let mut step = draft.step;
        for dep in &draft.raw_deps {
            let id = match self.resolve(dep) {
                (Resolved::Step(id), _) | (Resolved::Unknown, id) => id,
                (Resolved::Dropped, verbatim) => {
                    diags.push(
                        Diagnostic::error(
                            Code::UnknownDependency,
                            format!("/steps/{out_idx}/depends_on"),
                            format!("the step depended on `{verbatim}`, a step that was left out"),
                        )
                        .with_step(&step.id)
                        .with_value(dep.clone()),
                    );
                    continue;
                }
            };
            if !step.depends_on.contains(&id) {
                step.depends_on.push(id);
            }
        }
        if let Action::Tool { arguments, .. } = &mut step.action {
            for (key, value) in arguments.iter_mut() {
                let pointer =
                    || format!("/steps/{out_idx}/action/arguments/{}", escape_pointer(key));
                self.remap_refs(value, &pointer, &step.id, diags);
            }
        }
        step
    }

    /// Rewrites `{"$ref": "<old id>.output…"}` to the new id, in place. A reference to a step
    /// that was left out is kept with an error (its old id may now name another step).
    /// `pointer` gives the value's JSON pointer; it is built only for a diagnostic.
    fn remap_refs(
        &self,
        value: &mut Value,
        pointer: &dyn Fn() -> String,
        step: &str,
        diags: &mut Vec<Diagnostic>,
    ) {
        if let Some(reference) = StepRef::reference_in(value) {
            let split = reference.find(['.', '[']).unwrap_or(reference.len());
            let (old, rest) = reference.split_at(split);
            match self.resolve_str(old) {
                Resolved::Step(new) => {
                    let new_ref = format!("{new}{rest}");
                    if let Some(map) = value.as_object_mut() {
                        map.insert("$ref".to_owned(), Value::String(new_ref));
                    }
                }
                Resolved::Dropped => diags.push(
                    Diagnostic::error(
                        Code::InvalidRef,
                        pointer(),
                        format!("`{reference}` refers to a step that was left out"),
                    )
                    .with_step(step)
                    .with_value(value.clone()),
                ),
                Resolved::Unknown => {}
            }
            return;
        }
        match value {
            Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    let pointer = || format!("{}/{}", pointer(), escape_pointer(key));
                    self.remap_refs(child, &pointer, step, diags);
                }
            }
            Value::Array(items) => {
                for (idx, child) in items.iter_mut().enumerate() {
                    let pointer = || format!("{}/{idx}", pointer());
                    self.remap_refs(child, &pointer, step, diags);
                }
            }
            _ => {}
        }
    }
}
