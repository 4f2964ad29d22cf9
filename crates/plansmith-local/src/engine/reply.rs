//! One reply as it is decoded: its tokens and text, what the grammar forces next, and where the
//! JSON it writes stands (inside a string or not).

use std::time::Instant;

use futures::channel::mpsc as stream_mpsc;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::vocab::LlamaVocab;
use llguidance::Matcher;
use llguidance::toktrie::TokenId;
use plansmith_core::LlmError;

use super::error::backend_error;
use super::grammar::{llama_token, token_id};
use super::stats::Stats;

/// The reply being decoded.
#[derive(Default)]
pub(super) struct Reply {
    /// Its text so far.
    pub(super) bytes: Vec<u8>,
    /// Tokens chosen or forced but not yet run through the model.
    pub(super) pending: Vec<LlamaToken>,
    /// Tokens in the reply (chosen and forced).
    pub(super) generated: usize,
    /// Where the reply's text stands in the JSON it writes (inside a string or not).
    pub(super) json: JsonLexState,
    /// How many of `bytes` were handed out by [`Reply::unsent`].
    pub(super) sent: usize,
}

/// Whether a point in JSON text is inside a string, and just after a backslash there.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct JsonLexState {
    pub(super) in_string: bool,
    pub(super) escaped: bool,
}

impl JsonLexState {
    /// The state after `bytes`.
    pub(super) fn after(mut self, bytes: &[u8]) -> Self {
        for &b in bytes {
            match (self.in_string, self.escaped, b) {
                (true, true, _) => self.escaped = false,
                (true, false, b'\\') => self.escaped = true,
                (_, _, b'"') => self.in_string = !self.in_string,
                _ => {}
            }
        }
        self
    }
}

impl Reply {
    /// Sends the text added since the last send to `text`, if the request is streamed (a
    /// reader that stopped reading also dropped the answer, and `abandoned` ends the request).
    pub(super) fn send_unsent(&mut self, text: Option<&stream_mpsc::UnboundedSender<String>>) {
        if let Some(sender) = text
            && let Some(piece) = self.unsent()
        {
            let _ = sender.unbounded_send(piece);
        }
    }

    /// The text added since the last call, up to its last whole UTF-8 character (a token can
    /// end inside one); `None` when there is none.
    pub(super) fn unsent(&mut self) -> Option<String> {
        let new = self.bytes.get(self.sent..).unwrap_or_default();
        let whole = match std::str::from_utf8(new) {
            Ok(text) => text,
            Err(err) => match err.error_len() {
                // Cut inside a character: the rest comes with the next token.
                None => std::str::from_utf8(&new[..err.valid_up_to()]).unwrap_or_default(),
                // Bytes that will never be UTF-8: sent as the final text will show them.
                Some(_) => {
                    let text = String::from_utf8_lossy(new).into_owned();
                    self.sent = self.bytes.len();
                    return Some(text);
                }
            },
        };
        if whole.is_empty() {
            return None;
        }
        let text = whole.to_owned();
        self.sent += text.len();
        Some(text)
    }

    /// Appends one token to the reply; it goes through the model with the next batch.
    pub(super) fn push(&mut self, token: LlamaToken, vocab: &LlamaVocab<'_>) {
        let piece = vocab.token_to_piece(token, false, None);
        self.json = self.json.after(&piece);
        self.bytes.extend(piece);
        self.generated += 1;
        self.pending.push(token);
    }

    /// Appends the tokens the grammar forces next (keys, punctuation: no choice to make), as
    /// many as the token cap leaves room for (it keeps the reply inside the context).
    pub(super) fn force(
        &mut self,
        matcher: &mut Matcher,
        max_tokens: usize,
        vocab: &LlamaVocab<'_>,
        stats: &mut Stats,
    ) -> Result<(), LlmError> {
        let started = Instant::now();
        let forced = matcher.compute_ff_tokens();
        self.take(matcher, forced, max_tokens, vocab, stats)?;
        let held_back = self.held_back(matcher, vocab)?;
        self.take(matcher, held_back, max_tokens, vocab, stats)?;
        stats.grammar_time += started.elapsed();
        Ok(())
    }

    /// The bytes the grammar forces but [`Matcher::compute_ff_tokens`] holds back because a
    /// longer token might start with them, as tokens, when they end with the quote that opens a
    /// string (a value, or a key the model chooses): Qwen's vocabulary has ` "$`, ` ""`, …, so
    /// the ` "` is held back. Left to the model, each cost a sampled decode with the full output
    /// layer, 10 of the 78 sampled tokens of the bench's 3-step plan, where the model chose
    /// exactly these tokens. The price: a string that starts with punctuation is written ` "` +
    /// `$…` instead of ` "$…`, a split the model rarely sees.
    pub(super) fn held_back(
        &self,
        matcher: &mut Matcher,
        vocab: &LlamaVocab<'_>,
    ) -> Result<Vec<TokenId>, LlmError> {
        let bytes = matcher.compute_ff_bytes();
        // Only a run that ends with the quote opening a string: what follows is string text,
        // which the tokenizer splits from the quote anyway when it starts with a letter or a
        // digit. Any other held-back run (a lone ` ` or ` [`, the `t` of a key that may be
        // `title` or `text`, the closing `"` of `"}`) forced on its own splits what the model
        // writes as one token, and the 0.5B model then lost its way (measured: a plan that
        // called the wrong tool, or ended its steps early).
        let Some((&b'"', run)) = bytes.split_last() else {
            return Ok(Vec::new());
        };
        if self.json.after(run).in_string {
            return Ok(Vec::new());
        }
        vocab
            .tokenize(&bytes, false, false)
            .into_iter()
            .map(token_id)
            .collect()
    }

    /// Appends `ids` as forced tokens, as many as the token cap leaves room for (it keeps the
    /// reply inside the context) and the grammar takes.
    pub(super) fn take(
        &mut self,
        matcher: &mut Matcher,
        mut ids: Vec<TokenId>,
        max_tokens: usize,
        vocab: &LlamaVocab<'_>,
        stats: &mut Stats,
    ) -> Result<(), LlmError> {
        ids.truncate(max_tokens.saturating_sub(self.generated));
        if ids.is_empty() {
            return Ok(());
        }
        let taken = matcher
            .try_consume_tokens(&ids)
            .map_err(|err| backend_error("grammar", err))?;
        stats.forced_tokens += taken;
        for &id in ids.get(..taken).unwrap_or_default() {
            self.push(llama_token(id)?, vocab);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::JsonLexState;

    pub(super) fn in_string(text: &str) -> bool {
        JsonLexState::default().after(text.as_bytes()).in_string
    }

    #[test]
    pub(super) fn json_lex_state_tracks_strings_and_escapes() {
        assert!(!in_string(r#"{"thought": "#));
        assert!(in_string(r#"{"thought": ""#));
        assert!(!in_string(r#"{"a": "b""#));
        // An escaped quote does not end the string; an escaped backslash before a quote does.
        assert!(in_string(r#"{"a": "say \"hi"#));
        assert!(!in_string(r#"{"a": "dir\\""#));
        // Fed in pieces, as tokens arrive: the escape carries over a piece boundary.
        let state = JsonLexState::default().after(br#"{"a": "x\"#);
        assert!(state.in_string && state.escaped);
        assert!(state.after(br#"""#).in_string);
    }
}
