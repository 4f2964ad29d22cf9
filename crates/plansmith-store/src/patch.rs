//! JSON Patch (RFC 6902) on a plan document, within bounds.
//!
//! A patch is a list of operations, and some of them grow the document by a copy of part of
//! it: twenty `{"op": "copy", "from": "/steps", "path": "/steps/0"}` in a body of 1.3 KB
//! double the steps twenty times over. So a patch is applied one operation at a time, each
//! checked before it runs: at most [`MAX_PATCH_OPERATIONS`] of them, and the bytes each one
//! adds (an `add` or `replace` value, or the part a `copy` copies) counted against
//! [`MAX_PATCHED_PLAN_BYTES`]. Removals are not credited back, so the count is an upper bound
//! of the document's size and the work done is bounded by twice the limit, however the
//! operations are mixed. The patched plan may then hold at most [`MAX_PATCHED_STEPS`] steps,
//! checked before it is validated.

use std::io;

use serde_json::Value;

use crate::error::{Result, StoreError};

/// The most operations one JSON Patch may hold.
pub const MAX_PATCH_OPERATIONS: usize = 1_000;

/// The largest plan document (compact JSON, in bytes) a patch may make, unless the plan was
/// larger before it; a patch that would go over is refused before the operation that would.
pub const MAX_PATCHED_PLAN_BYTES: usize = 4 << 20;

/// The most steps a patched plan may hold; validation time grows with the steps, and no plan
/// a person reviews needs more.
pub const MAX_PATCHED_STEPS: usize = plansmith_core::parse::MAX_PLAN_STEPS;

/// Applies `patch` to `document` within the bounds of the module docs. On an error the
/// document is left part-patched: callers patch a copy.
pub(crate) fn apply(document: &mut Value, patch: &Value) -> Result<()> {
    let count = match patch {
        Value::Array(operations) => operations.len(),
        _ => {
            return Err(bad(
                "not a JSON Patch: a JSON Patch is an array of operations",
            ));
        }
    };
    if count > MAX_PATCH_OPERATIONS {
        return Err(bad(format!(
            "a JSON Patch may hold at most {MAX_PATCH_OPERATIONS} operations; this one holds {count}"
        )));
    }
    let operations: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|err| bad(format!("not a JSON Patch: {err}")))?;
    let start = compact_len(document, usize::MAX).unwrap_or(usize::MAX);
    let limit = MAX_PATCHED_PLAN_BYTES.max(start);
    let mut size = start;
    for (idx, operation) in operations.iter().enumerate() {
        use json_patch::PatchOperation as Op;
        let added = match operation {
            Op::Add(op) => Some(&op.value),
            Op::Replace(op) => Some(&op.value),
            // A `from` that does not exist adds nothing: the operation then fails below.
            Op::Copy(op) => document.pointer(op.from.as_str()),
            Op::Remove(_) | Op::Move(_) | Op::Test(_) => None,
        };
        if let Some(value) = added {
            let room = limit - size;
            match compact_len(value, room) {
                Some(n) => size += n,
                None => {
                    return Err(bad(format!(
                        "operation {idx} ({}) would make the plan larger than {limit} bytes",
                        describe(operation)
                    )));
                }
            }
        }
        json_patch::patch(document, std::slice::from_ref(operation))
            .map_err(|err| bad(format!("operation {idx} ({}): {err}", describe(operation))))?;
    }
    Ok(())
}

/// Refuses a patched plan with more than [`MAX_PATCHED_STEPS`] steps.
pub(crate) fn check_steps(steps: usize) -> Result<()> {
    if steps > MAX_PATCHED_STEPS {
        return Err(bad(format!(
            "the patched plan has {steps} steps; a plan may hold at most {MAX_PATCHED_STEPS}"
        )));
    }
    Ok(())
}

fn bad(message: impl Into<String>) -> StoreError {
    StoreError::BadEdit(message.into())
}

/// `op path` of an operation, for messages.
fn describe(operation: &json_patch::PatchOperation) -> String {
    use json_patch::PatchOperation as Op;
    let (op, path) = match operation {
        Op::Add(op) => ("add", op.path.as_str()),
        Op::Remove(op) => ("remove", op.path.as_str()),
        Op::Replace(op) => ("replace", op.path.as_str()),
        Op::Move(op) => ("move", op.path.as_str()),
        Op::Copy(op) => ("copy", op.path.as_str()),
        Op::Test(op) => ("test", op.path.as_str()),
    };
    let path: String = path.chars().take(80).collect();
    format!("{op} at `{path}`")
}

/// The length of `value` as compact JSON, or `None` once it passes `cap` bytes (the count
/// stops there, so the cost is bounded by `cap`).
fn compact_len(value: &Value, cap: usize) -> Option<usize> {
    struct Counter {
        len: usize,
        cap: usize,
    }
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.len = self.len.saturating_add(buf.len());
            if self.len > self.cap {
                return Err(io::Error::other("over the cap"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { len: 0, cap };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.len)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn lengths_stop_at_the_cap() {
        let value = json!({"a": [1, 2, 3], "b": "xyz"});
        let len = value.to_string().len();
        assert_eq!(compact_len(&value, usize::MAX), Some(len));
        assert_eq!(compact_len(&value, len), Some(len));
        assert_eq!(compact_len(&value, len - 1), None);
    }

    #[test]
    fn doubling_copies_are_refused_before_they_run() {
        let mut document = json!({"steps": ["x".repeat(1000)]});
        let patch: Vec<Value> = (0..40)
            .map(|_| json!({"op": "copy", "from": "/steps", "path": "/steps/0"}))
            .collect();
        let err = apply(&mut document, &Value::Array(patch)).unwrap_err();
        assert!(
            err.to_string()
                .contains("would make the plan larger than 4194304 bytes"),
            "{err}"
        );
        // Refused at the operation that would have passed the limit, not after.
        assert!(compact_len(&document, usize::MAX).unwrap() <= MAX_PATCHED_PLAN_BYTES);
    }

    #[test]
    fn operation_count_is_bounded() {
        let mut document = json!({"steps": []});
        let patch: Vec<Value> = (0..=MAX_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "/steps", "value": []}))
            .collect();
        let err = apply(&mut document, &Value::Array(patch)).unwrap_err();
        assert!(err.to_string().contains("at most 1000 operations"), "{err}");
    }

    #[test]
    fn ordinary_patches_apply_and_errors_name_the_operation() {
        let mut document = json!({"title": "a", "steps": [{"id": "s1"}]});
        let patch = json!([
            {"op": "replace", "path": "/title", "value": "b"},
            {"op": "copy", "from": "/steps/0", "path": "/steps/-"},
            {"op": "remove", "path": "/steps/0"},
        ]);
        apply(&mut document, &patch).unwrap();
        assert_eq!(document, json!({"title": "b", "steps": [{"id": "s1"}]}));
        let err = apply(&mut document, &json!([{"op": "remove", "path": "/nope"}])).unwrap_err();
        assert!(
            err.to_string().contains("operation 0 (remove at `/nope`)"),
            "{err}"
        );
        let err = apply(&mut document, &json!({"op": "remove"})).unwrap_err();
        assert!(err.to_string().contains("an array of operations"), "{err}");
    }
}
