//! Incremental parsing of a streamed plan: [`StepScanner`] is fed the model's text as it
//! arrives and hands out each step object as soon as its closing brace is written, long before
//! the whole plan is complete.
//!
//! It tracks just enough JSON lexing state (strings, escapes, nesting, the key each array is
//! the value of) to find the elements of a `"steps"` array at any depth (`{"steps": […]}`,
//! `{"plan": {"steps": […]}}`) or of a top-level array (`[{…}, {…}]`). Text before the JSON
//! (prose, a code fence, a `<think>…</think>` block) is skipped. The scanner never fails: text
//! it cannot follow simply yields no early steps, and the final parse ([`crate::parse`]) still
//! reads the whole reply.
//!
//! # Example
//!
//! ```
//! use plansmith_core::stream::StepScanner;
//!
//! let mut scanner = StepScanner::new();
//! assert!(scanner.feed(r#"<think>{not json}</think>{"title": "T", "steps": [{"id": "s1", "na"#).is_empty());
//! let steps = scanner.feed(r#"me": "x"}, {"id": "s2""#);
//! assert_eq!(steps.len(), 1);
//! assert_eq!(steps[0]["name"], "x");
//! ```

use serde_json::Value;

/// What a nesting level is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// An object.
    Object,
    /// An array; `true` when its elements are steps.
    Array(bool),
}

/// Finds complete step objects in a growing JSON text.
#[derive(Debug, Default, Clone)]
pub struct StepScanner {
    buffer: String,
    /// Byte offset of the next character to lex.
    pos: usize,
    /// Lexing has begun (the prefix before the JSON was skipped).
    started: bool,
    in_string: bool,
    escaped: bool,
    string_start: usize,
    last_string: Option<String>,
    pending_key: Option<String>,
    stack: Vec<Frame>,
    /// Start of the step object being read, and the depth of its array.
    step_start: Option<(usize, usize)>,
    /// Steps handed out so far.
    n_steps: usize,
}

impl StepScanner {
    /// An empty scanner.
    pub fn new() -> StepScanner {
        StepScanner::default()
    }

    /// The text received so far.
    pub fn text(&self) -> &str {
        &self.buffer
    }

    /// How many steps were handed out.
    pub fn steps_seen(&self) -> usize {
        self.n_steps
    }

    /// Adds a chunk of text; returns the step objects completed by it, in order.
    pub fn feed(&mut self, chunk: &str) -> Vec<Value> {
        self.buffer.push_str(chunk);
        if !self.started && !self.skip_prefix() {
            return Vec::new();
        }
        let mut found = Vec::new();
        let bytes = self.buffer.as_bytes();
        let mut idx = self.pos;
        while idx < bytes.len() {
            let byte = bytes[idx];
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.in_string = false;
                    self.last_string = self.buffer.get(self.string_start..idx).map(str::to_owned);
                }
                idx += 1;
                continue;
            }
            match byte {
                b'"' => {
                    self.in_string = true;
                    self.string_start = idx + 1;
                }
                b':' => self.pending_key = self.last_string.take(),
                b',' => {
                    self.pending_key = None;
                    self.last_string = None;
                }
                b'{' => {
                    if self.step_start.is_none()
                        && matches!(self.stack.last(), Some(Frame::Array(true)))
                    {
                        self.step_start = Some((idx, self.stack.len()));
                    }
                    self.stack.push(Frame::Object);
                    self.pending_key = None;
                    self.last_string = None;
                }
                b'[' => {
                    let is_steps =
                        self.stack.is_empty() || self.pending_key.as_deref() == Some("steps");
                    let is_steps = is_steps && self.step_start.is_none();
                    self.stack.push(Frame::Array(is_steps));
                    self.pending_key = None;
                    self.last_string = None;
                }
                b'}' | b']' => {
                    self.stack.pop();
                    if byte == b'}'
                        && let Some((start, depth)) = self.step_start
                        && self.stack.len() == depth
                    {
                        self.step_start = None;
                        if let Some(text) = self.buffer.get(start..=idx)
                            && let Ok(value @ Value::Object(_)) =
                                serde_json::from_str::<Value>(text)
                        {
                            self.n_steps += 1;
                            found.push(value);
                        }
                    }
                }
                _ => {}
            }
            idx += 1;
        }
        self.pos = idx;
        found
    }

    /// Skips prose, fences and a leading think block; `true` once the JSON has begun.
    fn skip_prefix(&mut self) -> bool {
        let mut from = 0;
        let trimmed = self.buffer.trim_start();
        if trimmed.starts_with("<think>") || "<think>".starts_with(trimmed) {
            match self.buffer.find("</think>") {
                Some(end) => from = end + "</think>".len(),
                None => return false,
            }
        }
        let Some(offset) = self.buffer[from..].find(['{', '[']) else {
            return false;
        };
        self.started = true;
        self.pos = from + offset;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps_of(chunks: &[&str]) -> Vec<(usize, Value)> {
        let mut scanner = StepScanner::new();
        let mut out = Vec::new();
        for (idx, chunk) in chunks.iter().enumerate() {
            for step in scanner.feed(chunk) {
                out.push((idx, step));
            }
        }
        out
    }

    #[test]
    fn steps_come_out_when_their_brace_closes() {
        let text = r#"{"thought": "a {brace} in \"text\"", "title": "T", "steps": [{"id": "s1", "arguments": {"q": "]}"}}, {"id": "s2"}], "questions": [{"text": "not a step"}]}"#;
        let chunks: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
        let out = steps_of(&refs);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].1["arguments"]["q"], "]}");
        assert_eq!(out[1].1["id"], "s2");
        let s1_end = text.find(r#""]}"}}"#).unwrap() + 5;
        assert_eq!(out[0].0, s1_end, "s1 is handed out at its closing brace");
    }

    #[test]
    fn top_level_arrays_nested_plans_and_prefixes() {
        let out = steps_of(&[
            "Sure:\n```json\n[{\"id\": \"s1\"}",
            ", {\"id\": \"s2\"}]\n```",
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].0, 0);
        let out = steps_of(&[r#"{"plan": {"steps": [{"id": "s1", "depends_on": []}]}}"#]);
        assert_eq!(out.len(), 1);
        let out = steps_of(&[
            "<thi",
            "nk>[{\"x\": 1}]</think>",
            "{\"steps\": [{\"id\": \"s1\"}]}",
        ]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1["id"], "s1");
    }

    #[test]
    fn garbage_and_truncation_yield_nothing_and_never_panic() {
        for text in [
            "",
            "no json",
            "{\"steps\": [{\"id\": \"s1\"",
            "}}]]{{",
            "\"\\",
            "[[[[",
            "{\"steps\": [1, \"a\", {\"id\": \"é\"}]}",
        ] {
            let mut scanner = StepScanner::new();
            let n: usize = text
                .chars()
                .map(|c| scanner.feed(&c.to_string()).len())
                .sum();
            assert!(n <= 1, "{text}");
        }
    }
}

#[cfg(test)]
mod pipeline_tests {
    use std::sync::Arc;

    use crate::pipeline::PlanEvent;
    use crate::{Catalog, OutcomeStatus, PlanRequest, Planner, ScriptedModel};

    #[test]
    fn plan_with_events_reports_steps_of_a_model_that_does_not_stream() {
        let catalog = Catalog::from_json(&serde_json::json!([{
            "name": "get_weather", "description": "Weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        }]))
        .unwrap();
        let model = Arc::new(ScriptedModel::new([
            r#"{"title": "W", "steps": [{"id": "s1", "type": "tool", "name": "nope", "arguments": {}}]}"#,
            r#"{"title": "W", "steps": [{"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}}, {"id": "s2", "type": "reply", "text": "ok", "depends_on": ["s1"]}]}"#,
        ]));
        let planner = Planner::new(catalog, model);
        let mut events = Vec::new();
        let mut on_event = |event: PlanEvent| events.push(event);
        let outcome = futures::executor::block_on(
            planner.plan_with_events(&PlanRequest::new("Weather in Paris?"), &mut on_event),
        )
        .unwrap();
        assert_eq!(outcome.status, OutcomeStatus::Ready);
        let kinds: Vec<String> = events
            .iter()
            .map(|e| match e {
                PlanEvent::AttemptStarted { attempt, .. } => format!("start{attempt}"),
                PlanEvent::Token { .. } => "token".into(),
                PlanEvent::Step {
                    attempt,
                    step,
                    diagnostics,
                } => format!(
                    "step{attempt}:{}:{}",
                    step.id,
                    diagnostics.iter().filter(|d| d.is_error()).count()
                ),
                PlanEvent::Repair { attempt, .. } => format!("repair{attempt}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "start0",
                "step0:s1:1",
                "repair0",
                "start1",
                "step1:s1:0",
                "step1:s2:0"
            ],
            "{events:#?}"
        );
    }
}
