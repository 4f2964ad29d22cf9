//! References to an earlier step's output inside tool arguments
//! (`{"$ref": "s1.output.items[0].id"}`), and the JSON pointers they are found at.

use std::collections::HashMap;
use std::fmt::{self, Write as _};

use serde_json::Value;

/// A reference to an earlier step's output inside tool arguments: `{"$ref": "s1.output.items[0].id"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRef {
    /// The referenced step id.
    pub step: String,
    /// Path inside the step's output.
    pub path: Vec<PathSegment>,
}

/// One segment of a [`StepRef`] path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    /// An object key.
    Key(String),
    /// An array index.
    Index(usize),
}

impl StepRef {
    /// If `value` is a `{"$ref": "…"}` object, its reference string.
    pub fn reference_in(value: &Value) -> Option<&str> {
        let object = value.as_object()?;
        if object.len() != 1 {
            return None;
        }
        object.get("$ref")?.as_str()
    }

    /// Parses `s1.output`, `s1.output.items[0].id`, `s2.output[3]`.
    pub fn parse(text: &str) -> Result<StepRef, String> {
        let text = text.trim();
        let (step, rest) = match text.find(['.', '[']) {
            Some(pos) => (&text[..pos], &text[pos..]),
            None => (text, ""),
        };
        if step.is_empty() {
            return Err(format!("`{text}` does not start with a step id"));
        }
        let rest = rest
            .strip_prefix(".output")
            .ok_or_else(|| format!("`{text}` must have the form `<step>.output[.path]`"))?;
        let mut path = Vec::new();
        let mut chars = rest.char_indices().peekable();
        while let Some((_, c)) = chars.next() {
            match c {
                '.' => {
                    let mut key = String::new();
                    while let Some(&(_, next)) = chars.peek() {
                        if next == '.' || next == '[' {
                            break;
                        }
                        key.push(next);
                        chars.next();
                    }
                    if key.is_empty() {
                        return Err(format!("`{text}` has an empty key"));
                    }
                    path.push(PathSegment::Key(key));
                }
                '[' => {
                    let mut digits = String::new();
                    let mut closed = false;
                    for (_, next) in chars.by_ref() {
                        if next == ']' {
                            closed = true;
                            break;
                        }
                        digits.push(next);
                    }
                    let index = digits
                        .trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|_| closed)
                        .ok_or_else(|| format!("`{text}` has a bad index `[{digits}`"))?;
                    path.push(PathSegment::Index(index));
                }
                other => return Err(format!("`{text}`: unexpected `{other}`")),
            }
        }
        Ok(StepRef {
            step: step.to_owned(),
            path,
        })
    }
}

impl fmt::Display for StepRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.output", self.step)?;
        for segment in &self.path {
            match segment {
                PathSegment::Key(key) => write!(f, ".{key}")?,
                PathSegment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// Points every `$ref` inside `value` whose step `renamed` maps at the new step id, its path
/// kept (`s1.output.id` becomes `s2.output.id` for `s1` → `s2`).
pub(crate) fn rename_refs(value: &mut Value, renamed: &HashMap<String, String>) {
    rename_refs_at(value, renamed, 0);
}

fn rename_refs_at(value: &mut Value, renamed: &HashMap<String, String>, depth: usize) {
    if depth > 64 {
        return;
    }
    if let Some(text) = StepRef::reference_in(value)
        && let Ok(mut reference) = StepRef::parse(text)
    {
        if let Some(to) = renamed.get(&reference.step) {
            reference.step = to.clone();
            *value = serde_json::json!({"$ref": reference.to_string()});
        }
        return;
    }
    match value {
        Value::Object(map) => map
            .values_mut()
            .for_each(|v| rename_refs_at(v, renamed, depth + 1)),
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| rename_refs_at(v, renamed, depth + 1)),
        _ => {}
    }
}

/// Every `$ref` inside `value`, with its JSON pointer relative to `value`.
pub fn collect_refs(value: &Value, pointer: &str, out: &mut Vec<(String, String)>) {
    let mut path = pointer.to_owned();
    collect_refs_at(value, &mut path, out);
}

/// [`collect_refs`] with one pointer buffer for the whole walk: a pointer is copied out only
/// for a `$ref` (every argument of every step is walked on each validation).
fn collect_refs_at(value: &Value, path: &mut String, out: &mut Vec<(String, String)>) {
    if let Some(reference) = StepRef::reference_in(value) {
        out.push((path.clone(), reference.to_owned()));
        return;
    }
    let len = path.len();
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                path.push('/');
                push_escaped(path, key);
                collect_refs_at(child, path, out);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            for (idx, child) in items.iter().enumerate() {
                // Writing to a `String` cannot fail.
                let _ = write!(path, "/{idx}");
                collect_refs_at(child, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Appends `token` to `path` escaped as one JSON-pointer token (see [`escape_pointer`]).
fn push_escaped(path: &mut String, token: &str) {
    for c in token.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

/// Escapes one JSON-pointer token (`~` → `~0`, `/` → `~1`).
pub fn escape_pointer(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    push_escaped(&mut out, token);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_refs_parse_and_print() {
        let cases = [
            ("s1.output", "s1", 0),
            ("s1.output.items[0].id", "s1", 3),
            ("s12.output[3]", "s12", 1),
        ];
        for (text, step, n_segments) in cases {
            let parsed = StepRef::parse(text).unwrap();
            assert_eq!(parsed.step, step, "{text}");
            assert_eq!(parsed.path.len(), n_segments, "{text}");
            assert_eq!(parsed.to_string(), text);
        }
        for bad in [
            "",
            ".output",
            "s1",
            "s1.result",
            "s1.output[x]",
            "s1.output[1",
            "s1.output..a",
        ] {
            assert!(StepRef::parse(bad).is_err(), "{bad} should not parse");
        }
    }
}
