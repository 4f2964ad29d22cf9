//! [`ScriptedModel`], the one mock of the language-model boundary: turns in order, requests
//! recorded, likelihoods by rules.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{
    BoxFuture, BoxStream, Capabilities, Completion, CompletionRequest, LanguageModel, Likelihood,
    LlmError, StreamEvent, Usage,
};

/// One scripted turn: a reply, or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScriptedTurn {
    /// Plain text reply.
    Text(String),
    /// A failure (listed before `Completion`: untagged enums try variants in order, and every
    /// `Completion` field has a default).
    Error {
        /// Error message, returned as [`LlmError::Backend`], or as [`LlmError::Status`] with
        /// `status`.
        error: String,
        /// The HTTP status a provider would have answered with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    },
    /// A full reply.
    Completion(Completion),
}

/// One rule of a scripted model's [`LanguageModel::likelihood`]: a context that contains
/// `context_contains` (and a text that contains `text_contains`, when given) gives each
/// whitespace-separated word of the text `per_token` nats. The first rule that matches is used;
/// when none does, -1 nat a word.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptedLikelihood {
    /// A substring of the context.
    pub context_contains: String,
    /// A substring of the text, when the rule is for some texts only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_contains: Option<String>,
    /// The log-probability of each word of the text, in nats.
    pub per_token: f64,
}

/// The file form of a scripted model (`--model scripted:FILE`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Script {
    /// What the model claims to support (default: nothing, i.e. prompt-only).
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Replies, in order.
    pub turns: Vec<ScriptedTurn>,
    /// What [`LanguageModel::likelihood`] answers; empty (the default), the model cannot score.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub likelihoods: Vec<ScriptedLikelihood>,
    /// After the last turn, start again from the first: a model that never runs out (load
    /// tests, fuzzing a server). Requests are then counted but not kept, so memory stays flat.
    #[serde(default)]
    pub repeat: bool,
    /// Streams each reply in pieces of this many characters, as a provider's deltas arrive
    /// (the text, or the first tool call's arguments when there is no text); 0, the default,
    /// gives each reply whole, as a model that does not stream.
    #[serde(default)]
    pub stream_chunk: usize,
}

/// A model that replays scripted turns in order and records every request.
#[derive(Debug, Default)]
pub struct ScriptedModel {
    capabilities: Capabilities,
    turns: Mutex<VecDeque<ScriptedTurn>>,
    requests: Mutex<Vec<CompletionRequest>>,
    repeat: bool,
    stream_chunk: usize,
    likelihoods: Vec<ScriptedLikelihood>,
}

/// Errors loading a script.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a script.
    #[error("{path} is not a scripted-model file ({{\"turns\": [...]}}): {source}")]
    Format {
        /// The path.
        path: String,
        /// The cause.
        source: serde_json::Error,
    },
}

impl ScriptedModel {
    /// A prompt-only model that replies with these texts in order.
    pub fn new<I, S>(turns: I) -> ScriptedModel
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ScriptedModel::from_script(Script {
            capabilities: Capabilities::default(),
            turns: turns
                .into_iter()
                .map(|t| ScriptedTurn::Text(t.into()))
                .collect(),
            ..Script::default()
        })
    }

    /// A model from a script.
    pub fn from_script(script: Script) -> ScriptedModel {
        ScriptedModel {
            capabilities: script.capabilities,
            turns: Mutex::new(script.turns.into()),
            requests: Mutex::new(Vec::new()),
            repeat: script.repeat,
            stream_chunk: script.stream_chunk,
            likelihoods: script.likelihoods,
        }
    }

    /// The same model, scoring texts by these rules (see [`ScriptedLikelihood`]).
    #[must_use]
    pub fn scoring(mut self, likelihoods: Vec<ScriptedLikelihood>) -> ScriptedModel {
        self.likelihoods = likelihoods;
        self
    }

    /// The same model, streaming each reply in pieces of `chars` characters (see
    /// [`Script::stream_chunk`]; 0 turns streaming off).
    #[must_use]
    pub fn streaming(mut self, chars: usize) -> ScriptedModel {
        self.stream_chunk = chars;
        self
    }

    /// Loads a script file: `{"capabilities": {...}, "turns": ["text", {"text": ..., "usage": ...}, {"error": "..."}]}`
    /// or just a list of turns.
    pub fn from_file(path: &Path) -> Result<ScriptedModel, ScriptError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Io {
            path: shown.clone(),
            source,
        })?;
        let script = match serde_json::from_str::<Script>(&text) {
            Ok(script) => script,
            Err(err) => match serde_json::from_str::<Vec<ScriptedTurn>>(&text) {
                Ok(turns) => Script {
                    turns,
                    ..Script::default()
                },
                Err(_) => {
                    return Err(ScriptError::Format {
                        path: shown,
                        source: err,
                    });
                }
            },
        };
        Ok(ScriptedModel::from_script(script))
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<CompletionRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Turns not used yet.
    pub fn remaining(&self) -> usize {
        self.turns.lock().map(|t| t.len()).unwrap_or(0)
    }
}

impl LanguageModel for ScriptedModel {
    fn name(&self) -> String {
        "scripted".to_owned()
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        let n_request = match self.requests.lock() {
            Ok(_) if self.repeat => 0,
            Ok(mut requests) => {
                requests.push(request);
                requests.len()
            }
            Err(_) => 0,
        };
        let turn = self.turns.lock().ok().and_then(|mut turns| {
            let turn = turns.pop_front()?;
            if self.repeat {
                turns.push_back(turn.clone());
            }
            Some(turn)
        });
        Box::pin(async move {
            match turn {
                None => Err(LlmError::ScriptExhausted(n_request)),
                Some(ScriptedTurn::Error {
                    error,
                    status: Some(status),
                }) => Err(LlmError::Status {
                    status,
                    message: error,
                }),
                Some(ScriptedTurn::Error { error, .. }) => Err(LlmError::Backend(error)),
                Some(ScriptedTurn::Text(text)) => Ok(Completion {
                    usage: Usage {
                        prompt_tokens: 0,
                        completion_tokens: u32::try_from(text.len() / 4).unwrap_or(u32::MAX),
                    },
                    text,
                    ..Completion::default()
                }),
                Some(ScriptedTurn::Completion(completion)) => Ok(completion),
            }
        })
    }

    fn stream(&self, request: CompletionRequest) -> BoxStream<'_, Result<StreamEvent, LlmError>> {
        let chunk = self.stream_chunk;
        let completion = self.complete(request);
        let events = async move {
            let completion = match completion.await {
                Ok(completion) => completion,
                Err(err) => return vec![Err(err)],
            };
            let written = match completion.tool_calls.first() {
                Some(call) if completion.text.is_empty() => call.arguments.as_str(),
                _ => completion.text.as_str(),
            };
            let mut events: Vec<_> = pieces(written, chunk)
                .map(|piece| Ok(StreamEvent::Delta(piece.to_owned())))
                .collect();
            events.push(Ok(StreamEvent::Done(completion)));
            events
        };
        Box::pin(futures::StreamExt::flatten(futures::StreamExt::map(
            futures::stream::once(events),
            futures::stream::iter,
        )))
    }

    fn likelihood(
        &self,
        context: String,
        text: String,
    ) -> BoxFuture<'_, Result<Option<Likelihood>, LlmError>> {
        let scored = (!self.likelihoods.is_empty()).then(|| {
            let per_token = self
                .likelihoods
                .iter()
                .find(|rule| {
                    context.contains(&rule.context_contains)
                        && rule
                            .text_contains
                            .as_ref()
                            .is_none_or(|part| text.contains(part.as_str()))
                })
                .map_or(-1.0, |rule| rule.per_token);
            let tokens = u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX);
            Likelihood {
                log_prob: per_token * f64::from(tokens),
                tokens,
            }
        });
        Box::pin(async move { Ok(scored) })
    }
}

/// `text` in consecutive pieces of `chars` characters (the last may be shorter); none when
/// `chars` is 0 (no streaming).
fn pieces(text: &str, chars: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() || chars == 0 {
            return None;
        }
        let end = rest
            .char_indices()
            .nth(chars)
            .map_or(rest.len(), |(at, _)| at);
        let (piece, after) = rest.split_at(end);
        rest = after;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{FinishReason, Message};

    #[test]
    fn scripted_model_replays_and_records() {
        let model = ScriptedModel::new(["one", "two"]);
        let request = CompletionRequest {
            messages: vec![Message::user("hi")],
            constraint: None,
            max_tokens: 10,
            temperature: 0.0,
        };
        let first = futures::executor::block_on(model.complete(request.clone())).unwrap();
        assert_eq!(first.text, "one");
        let second = futures::executor::block_on(model.complete(request.clone())).unwrap();
        assert_eq!(second.text, "two");
        let err = futures::executor::block_on(model.complete(request)).unwrap_err();
        assert!(matches!(err, LlmError::ScriptExhausted(3)), "{err}");
        assert_eq!(model.requests().len(), 3);
    }

    #[test]
    fn repeating_script_never_runs_out() {
        let model = ScriptedModel::from_script(Script {
            capabilities: Capabilities::default(),
            turns: vec![
                ScriptedTurn::Text("a".into()),
                ScriptedTurn::Text("b".into()),
            ],
            repeat: true,
            ..Script::default()
        });
        let request = CompletionRequest {
            messages: vec![Message::user("hi")],
            constraint: None,
            max_tokens: 10,
            temperature: 0.0,
        };
        let texts: Vec<String> = (0..5)
            .map(|_| {
                futures::executor::block_on(model.complete(request.clone()))
                    .unwrap()
                    .text
            })
            .collect();
        assert_eq!(texts, ["a", "b", "a", "b", "a"]);
        assert!(
            model.requests().is_empty(),
            "a repeating script keeps no requests"
        );
        assert_eq!(model.remaining(), 2);
    }

    #[test]
    fn default_stream_yields_one_done_event() {
        use futures::StreamExt;
        let model = ScriptedModel::new(["whole reply"]);
        let request = CompletionRequest {
            messages: vec![],
            constraint: None,
            max_tokens: 10,
            temperature: 0.0,
        };
        let events: Vec<_> = futures::executor::block_on(model.stream(request).collect::<Vec<_>>());
        assert_eq!(events.len(), 1);
        assert!(matches!(&events[0], Ok(StreamEvent::Done(c)) if c.text == "whole reply"));
    }

    #[test]
    fn streaming_script_sends_the_reply_in_pieces_then_done() {
        use futures::StreamExt;
        let request = CompletionRequest {
            messages: vec![],
            constraint: None,
            max_tokens: 10,
            temperature: 0.0,
        };
        let model = ScriptedModel::new(["héllo wörld", "x"]).streaming(4);
        let events: Vec<_> =
            futures::executor::block_on(model.stream(request.clone()).collect::<Vec<_>>());
        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|event| match event {
                Ok(StreamEvent::Delta(text)) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, ["héll", "o wö", "rld"]);
        assert!(matches!(events.last(), Some(Ok(StreamEvent::Done(c))) if c.text == "héllo wörld"));
        // A tool call streams its arguments; an error is the stream's only item.
        let script: Script = serde_json::from_str(
            r#"{"stream_chunk": 8, "turns": [{"tool_calls": [{"name": "plan", "arguments": "{\"steps\": []}"}]}, {"error": "boom"}]}"#,
        )
        .unwrap();
        let model = ScriptedModel::from_script(script);
        let events: Vec<_> =
            futures::executor::block_on(model.stream(request.clone()).collect::<Vec<_>>());
        assert!(matches!(&events[0], Ok(StreamEvent::Delta(t)) if t == "{\"steps\""));
        assert!(matches!(&events[1], Ok(StreamEvent::Delta(t)) if t == ": []}"));
        assert!(matches!(&events[2], Ok(StreamEvent::Done(c)) if c.tool_calls.len() == 1));
        let events: Vec<_> = futures::executor::block_on(model.stream(request).collect::<Vec<_>>());
        assert!(matches!(&events[..], [Err(LlmError::Backend(e))] if e == "boom"));
    }

    #[test]
    fn script_turns_deserialize_in_every_form() {
        let script: Script = serde_json::from_str(
            r#"{"capabilities": {"json_schema": true}, "turns": ["a", {"text": "b", "finish": "length"}, {"error": "boom"}]}"#,
        )
        .unwrap();
        assert!(script.capabilities.json_schema);
        assert!(matches!(&script.turns[0], ScriptedTurn::Text(t) if t == "a"));
        assert!(
            matches!(&script.turns[1], ScriptedTurn::Completion(c) if c.finish == FinishReason::Length)
        );
        assert!(matches!(&script.turns[2], ScriptedTurn::Error { error, .. } if error == "boom"));
    }
}
