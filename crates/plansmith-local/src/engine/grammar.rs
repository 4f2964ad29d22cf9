//! Grammars for constrained decoding: the model's vocabulary for llguidance, the plan's JSON
//! Schema and the tool-call format as grammars, and the choice of the next token under one.

use std::sync::Arc;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llguidance::api::TopLevelGrammar;
use llguidance::earley::SlicedBiasComputer;
use llguidance::toktrie::{
    InferenceCapabilities, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv,
};
use llguidance::{Matcher, ParserFactory};
use plansmith_core::LlmError;
use plansmith_core::calls::call_schema_at;
use serde_json::{Value, json};

use super::error::backend_error;
use super::stats::Stats;

/// The vocabulary as llguidance sees it: each token's bytes (special tokens marked with a
/// leading 0xFF, as llguidance expects), tokenized back by llama.cpp's own tokenizer, which is
/// canonical, so llguidance may force whole tokens.
pub(super) struct LlamaTokEnv {
    pub(super) trie: TokTrie,
    pub(super) model: Arc<LlamaModel>,
}

impl TokenizerEnv for LlamaTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.tokenize_with(s, false)
    }

    fn tokenize_bytes_special(&self, s: &[u8]) -> Vec<TokenId> {
        self.tokenize_with(s, true)
    }

    fn tokenize_is_canonical(&self) -> bool {
        true
    }
}

impl LlamaTokEnv {
    pub(super) fn tokenize_with(&self, s: &[u8], special: bool) -> Vec<TokenId> {
        self.model
            .vocab()
            .tokenize(s, false, special)
            .into_iter()
            .filter_map(|t| TokenId::try_from(t.0).ok())
            .collect()
    }
}

/// The grammar engine for one model: its vocabulary and llguidance's token-mask slices.
pub(super) fn grammar_factory(model: &Arc<LlamaModel>) -> Result<ParserFactory, String> {
    let vocab = model.vocab();
    let n_vocab = u32::try_from(model.n_vocab()).map_err(|err| err.to_string())?;
    let eot = vocab.eot();
    let end = if eot.0 == -1 { vocab.eos() } else { eot };
    let end = token_id(end).map_err(|err| err.to_string())?;
    let mut eog = vec![end];
    let mut words = Vec::with_capacity(usize::try_from(n_vocab).unwrap_or(0));
    for id in 0..n_vocab {
        let token = LlamaToken(i32::try_from(id).map_err(|err| err.to_string())?);
        if vocab.is_eog(token) && id != end {
            eog.push(id);
        }
        let piece = vocab.token_to_piece(token, false, None);
        if piece.is_empty() {
            let special = vocab.token_to_piece(token, true, None);
            if special.is_empty() {
                words.push(Vec::new());
            } else {
                let mut marked = Vec::with_capacity(special.len() + 1);
                marked.push(0xFF);
                marked.extend(special);
                words.push(marked);
            }
        } else {
            words.push(piece);
        }
    }
    let trie = TokTrie::from(&TokRxInfo::new(n_vocab, end), &words).with_eos_tokens(&eog);
    let env: TokEnv = Arc::new(LlamaTokEnv {
        trie,
        model: Arc::clone(model),
    });
    let capabilities = InferenceCapabilities {
        ff_tokens: true,
        ..InferenceCapabilities::default()
    };
    let mut factory = ParserFactory::new(&env, capabilities, &SlicedBiasComputer::general_slices())
        .map_err(|err| err.to_string())?;
    factory.quiet();
    Ok(factory)
}

/// How the model writes JSON under the grammar: compact and fixed (`{"a": 1, "b": [2, 3]}`),
/// the way these models write it unprompted; fixed separators make the punctuation and the
/// keys between values forced tokens. Keywords the grammar cannot express are ignored
/// (`lenient`): every argument is validated against its tool's schema afterwards anyway.
/// Separators without their spaces (`{"a":1}`, the prompt's example written the same way) would
/// cut the structural tokens, but the 0.5B model then wrote a 1-step plan with a question for
/// the bench's 3-step request (weather, email, reply): measured, and dropped.
pub(super) fn guidance_options() -> Value {
    json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        "lenient": true
    })
}

/// The grammar of a JSON Schema, written as [`guidance_options`] says.
pub(super) fn json_grammar(schema: &Value) -> TopLevelGrammar {
    TopLevelGrammar::from_json_schema(guided(schema))
}

/// `schema` with [`guidance_options`].
pub(super) fn guided(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(object) = schema.as_object_mut() {
        object.insert("x-guidance".to_owned(), guidance_options());
    }
    schema
}

/// The grammar of the tool-call format (`plansmith_core::calls`): one to `max_calls` calls
/// joined by line breaks, each a JSON object matching `call_schema` with its `$ref`s limited
/// to the calls before it (the answer's, and `earlier` more of the plan it adds to:
/// [`call_schema_at`]), tagged as the Qwen / Hermes chat templates write them
/// (`<tool_call>\n{JSON}\n</tool_call>`), in a Markdown JSON fence, or bare: small models that
/// saw less of the tags write the other two (Qwen2.5-Coder-0.5B answers llama.cpp's own
/// tool-calling prompt with a fenced object), and a grammar that forbids the form a model
/// prefers makes it write text instead. Or plain text of at most about `max_text` characters
/// (bounded in tokens: a token is at least one character) that does not start with `<`, `{`,
/// `[`, `` ` `` or white space, so the first token decides between a reply and calls.
/// `max_text` 0 leaves the reply out.
pub(super) fn calls_grammar(
    call_schema: &Value,
    max_calls: u32,
    max_text: u32,
    earlier: u32,
) -> TopLevelGrammar {
    TopLevelGrammar::from_lark(calls_lark(call_schema, max_calls, max_text, earlier))
}

/// The Lark text of [`calls_grammar`]: call N is rule `call_N`, and the calls after it are
/// optional within it (`calls: call_1 ("\n" call_2 ("\n" call_3)?)?`), so each position has
/// its own schema. Positions whose schemas are the same (from ten earlier calls on) share one.
pub(super) fn calls_lark(
    call_schema: &Value,
    max_calls: u32,
    max_text: u32,
    earlier: u32,
) -> String {
    let n_calls = max_calls.max(1);
    let mut rules = String::new();
    let mut names: Vec<String> = Vec::new();
    let mut last_schema: Option<Value> = None;
    for position in 0..n_calls {
        let before = usize::try_from(earlier.saturating_add(position)).unwrap_or(usize::MAX);
        let schema = call_schema_at(call_schema, before);
        if last_schema.as_ref() == Some(&schema)
            && let Some(name) = names.last().cloned()
        {
            names.push(name);
            continue;
        }
        let name = format!("call_{}", position + 1);
        rules.push_str(&format!(
            "{name}: \"<tool_call>\\n\" {name}_json \"\\n</tool_call>\" \
             | \"```json\\n\" {name}_json \"\\n```\" | {name}_json\n\
             {name}_json: %json {}\n",
            guided(&schema)
        ));
        names.push(name);
        last_schema = Some(schema);
    }
    let mut calls = String::new();
    for (idx, name) in names.iter().enumerate().rev() {
        calls = if idx + 1 == names.len() {
            name.clone()
        } else {
            format!("{name} (\"\\n\" {calls})?")
        };
    }
    let text_tokens = max_text.max(1);
    // No plain text at all: calls only.
    let start = if max_text == 0 {
        "calls"
    } else {
        "reply | calls"
    };
    format!(
        "start: {start}\n\
         calls: {calls}\n\
         {rules}\
         reply[max_tokens={text_tokens}]: /[^<{{\\[`\\s][^<`]*/\n"
    )
}

/// A matcher for one request's grammar, or why it cannot be had (an unsatisfiable schema).
pub(super) fn grammar_matcher(
    factory: &ParserFactory,
    grammar: TopLevelGrammar,
) -> Result<Matcher, String> {
    let matcher = Matcher::new(factory.create_parser(grammar));
    match matcher.get_error() {
        Some(err) => Err(err),
        None => Ok(matcher),
    }
}

pub(super) fn token_id(token: LlamaToken) -> Result<TokenId, LlmError> {
    TokenId::try_from(token.0).map_err(|_| backend_error("sampling", "negative token id"))
}

pub(super) fn llama_token(id: TokenId) -> Result<LlamaToken, LlmError> {
    i32::try_from(id)
        .map(LlamaToken)
        .map_err(|_| backend_error("grammar", "token id out of range"))
}

/// The token with the highest logit among those `allowed` (by index).
pub(super) fn best_token(logits: &[f32], allowed: impl Fn(usize) -> bool) -> Option<LlamaToken> {
    let mut best: Option<(usize, f32)> = None;
    for (idx, &logit) in logits.iter().enumerate() {
        if !logit.is_nan() && best.is_none_or(|(_, b)| logit > b) && allowed(idx) {
            best = Some((idx, logit));
        }
    }
    best.and_then(|(idx, _)| i32::try_from(idx).ok())
        .map(LlamaToken)
}

/// Greedy under the grammar: `first`, the greedy token, is checked alone; the grammar's mask of
/// the whole vocabulary is computed only when it is rejected.
pub(super) fn constrained_choice(
    matcher: &mut Matcher,
    first: LlamaToken,
    logits: &[f32],
    is_end: impl Fn(LlamaToken) -> bool,
    stats: &mut Stats,
) -> Result<LlamaToken, LlmError> {
    let grammar_error = |err| backend_error("grammar", err);
    let fits = if is_end(first) {
        matcher.is_accepting().map_err(grammar_error)?
    } else {
        matcher
            .validate_tokens(&[token_id(first)?])
            .map_err(grammar_error)?
            == 1
    };
    if fits {
        return Ok(first);
    }
    stats.grammar_rejections += 1;
    let mask = matcher.compute_mask().map_err(grammar_error)?;
    best_token(logits, |idx| {
        TokenId::try_from(idx).is_ok_and(|id| mask.is_allowed(id))
    })
    .ok_or_else(|| backend_error("grammar", "no token fits the grammar"))
}

#[cfg(test)]
mod tests {

    /// The tool-call grammar, pinned: the first decision is between a reply (text that
    /// cannot start a call) and calls, each tagged, fenced or bare; the call's JSON follows
    /// the call schema with the lenient whitespace of `guidance_options`. Calls whose
    /// schemas are the same share a rule. A change here moves the evaluation figures
    /// (docs/perf.md) and must be measured.
    #[test]
    pub(super) fn the_tool_call_grammar_is_pinned() {
        let schema = serde_json::json!({"type": "object", "properties": {"name": {"const": "f"}}});
        let lark = super::calls_lark(&schema, 3, 200, 0);
        let expected = concat!(
            "start: reply | calls\n",
            "calls: call_1 (\"\\n\" call_1 (\"\\n\" call_1)?)?\n",
            "call_1: \"<tool_call>\\n\" call_1_json \"\\n</tool_call>\" ",
            "| \"```json\\n\" call_1_json \"\\n```\" | call_1_json\n",
            "call_1_json: %json {\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"f\"}},",
            "\"x-guidance\":{\"whitespace_flexible\":false,",
            "\"item_separator\":\", \",\"key_separator\":\": \",\"lenient\":true}}\n",
            "reply[max_tokens=200]: /[^<{\\[`\\s][^<`]*/\n",
        );
        assert_eq!(lark, expected);
        assert_eq!(
            super::calls_lark(&schema, 1, 0, 0).lines().nth(1),
            Some("calls: call_1"),
            "one call at most: no repetition"
        );
        assert_eq!(
            super::calls_lark(&schema, 1, 0, 0).lines().next(),
            Some("start: calls"),
            "no text: calls only"
        );
    }

    /// Each call has the rule of its position: the first references nothing, the second
    /// only `s1`, and an answer that adds to a plan of two calls starts at `s1`–`s2`.
    #[test]
    fn each_call_references_only_the_calls_before_it() {
        let arguments = plansmith_core::schema::model_arguments_schema(
            &serde_json::json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
            100,
        );
        let schema = serde_json::json!({"type": "object", "properties": {"arguments": arguments}});
        let lark = super::calls_lark(&schema, 3, 0, 0);
        assert!(lark.contains("calls: call_1 (\"\\n\" call_2 (\"\\n\" call_3)?)?\n"));
        let json_line = |name: &str| {
            lark.lines()
                .find(|line| line.starts_with(&format!("{name}_json:")))
                .unwrap_or_default()
                .to_owned()
        };
        assert!(!json_line("call_1").contains("$ref"), "{lark}");
        assert!(json_line("call_2").contains("^s[1-1]\\\\.output"), "{lark}");
        assert!(json_line("call_3").contains("^s[1-2]\\\\.output"), "{lark}");
        let on = super::calls_lark(&schema, 1, 0, 2);
        assert!(on.contains("^s[1-2]\\\\.output"), "{on}");
    }
}
