//! Server-sent events to [`StreamEvent`]s: one driver for both providers, each provider
//! supplying an [`Accumulate`] that turns its events into text deltas and a final
//! [`Completion`]. The whole stream shares one deadline; a stream that ends before the provider
//! said it was complete is an error, never a silently short plan.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use plansmith_core::llm::{BoxFuture, BoxStream, StreamEvent};
use plansmith_core::{Completion, LlmError, Usage};

use crate::http::error_chain;

/// A provider's view of its event stream.
pub(crate) trait Accumulate: Send {
    /// One event (`event:` name, `data:` text); returns the text deltas it carries.
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<String>, LlmError>;
    /// The provider said the reply is complete.
    fn is_done(&self) -> bool;
    /// The reply so far; `complete` is false when the stream ended early.
    fn finish(&mut self, ended_early: bool) -> Result<Completion, LlmError>;
}

type Events = Pin<
    Box<
        dyn Stream<
                Item = Result<
                    eventsource_stream::Event,
                    eventsource_stream::EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;

enum Phase<'a, A> {
    Opening(BoxFuture<'a, Result<(reqwest::Response, A), LlmError>>),
    Reading { events: Events, acc: A },
    Finished,
}

struct State<'a, A> {
    phase: Phase<'a, A>,
    pending: VecDeque<String>,
    deadline: Option<tokio::time::Instant>,
    timeout: Duration,
    usage: Arc<Mutex<Usage>>,
}

/// Streams a reply: `open` negotiates and returns the open response with its accumulator.
pub(crate) fn drive<'a, A: Accumulate + 'a>(
    open: BoxFuture<'a, Result<(reqwest::Response, A), LlmError>>,
    timeout: Duration,
    usage: Arc<Mutex<Usage>>,
) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
    let state = State {
        phase: Phase::Opening(open),
        pending: VecDeque::new(),
        deadline: None,
        timeout,
        usage,
    };
    Box::pin(futures::stream::unfold(state, |mut st| async move {
        let timeout_ms = u64::try_from(st.timeout.as_millis()).unwrap_or(u64::MAX);
        let deadline = *st
            .deadline
            .get_or_insert_with(|| tokio::time::Instant::now() + st.timeout);
        loop {
            if let Some(delta) = st.pending.pop_front() {
                return Some((Ok(StreamEvent::Delta(delta)), st));
            }
            match std::mem::replace(&mut st.phase, Phase::Finished) {
                Phase::Finished => return None,
                Phase::Opening(open) => match tokio::time::timeout_at(deadline, open).await {
                    Err(_) => return Some((Err(LlmError::Timeout(timeout_ms)), st)),
                    Ok(Err(err)) => return Some((Err(err), st)),
                    Ok(Ok((response, acc))) => {
                        st.phase = Phase::Reading {
                            events: Box::pin(response.bytes_stream().eventsource()),
                            acc,
                        };
                    }
                },
                Phase::Reading {
                    mut events,
                    mut acc,
                } => {
                    if acc.is_done() {
                        let done = acc.finish(false);
                        return Some((st.done(done), st));
                    }
                    match tokio::time::timeout_at(deadline, events.next()).await {
                        Err(_) => return Some((Err(LlmError::Timeout(timeout_ms)), st)),
                        Ok(None) => {
                            let done = acc.finish(true);
                            return Some((st.done(done), st));
                        }
                        Ok(Some(Err(err))) => {
                            return Some((
                                Err(LlmError::Connection(format!(
                                    "the reply stream broke off: {}",
                                    error_chain(&err)
                                ))),
                                st,
                            ));
                        }
                        Ok(Some(Ok(event))) => {
                            match acc.on_event(&event.event, &event.data) {
                                Ok(deltas) => st.pending.extend(deltas),
                                Err(err) => return Some((Err(err), st)),
                            }
                            st.phase = Phase::Reading { events, acc };
                        }
                    }
                }
            }
        }
    }))
}

impl<A> State<'_, A> {
    fn done(&self, done: Result<Completion, LlmError>) -> Result<StreamEvent, LlmError> {
        let completion = done?;
        if let Ok(mut total) = self.usage.lock() {
            *total += completion.usage;
        }
        Ok(StreamEvent::Done(completion))
    }
}
