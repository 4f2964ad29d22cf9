//! The text analysis shared by indexing and queries ([`tokenize`]): words and identifiers split,
//! CJK bigrams, stop words dropped, light English stemming.

/// Words that carry no meaning for tool choice. Short on purpose: BM25's idf already discounts
/// common words, and verbs such as `get`, `set`, `find` or `send` are part of many tool names.
fn is_stop_word(word: &str) -> bool {
    matches!(
        word,
        "a" | "an"
            | "and"
            | "are"
            | "as"
            | "at"
            | "be"
            | "by"
            | "can"
            | "could"
            | "do"
            | "does"
            | "for"
            | "from"
            | "has"
            | "have"
            | "how"
            | "i"
            | "in"
            | "into"
            | "is"
            | "it"
            | "its"
            | "me"
            | "my"
            | "of"
            | "on"
            | "or"
            | "please"
            | "should"
            | "some"
            | "than"
            | "that"
            | "the"
            | "their"
            | "them"
            | "then"
            | "there"
            | "these"
            | "this"
            | "to"
            | "was"
            | "we"
            | "what"
            | "when"
            | "where"
            | "which"
            | "will"
            | "with"
            | "would"
            | "you"
            | "your"
            | "s"
            | "t"
    )
}

/// Splits text into the terms [`Bm25Index`] indexes and searches.
///
/// - Words are runs of letters and digits (any script); everything else separates them.
///   Identifiers are split at `.`, `_`, `-`, `/` and camelCase boundaries, acronyms included
///   (`HTTPRequest` → `http`, `request`).
/// - Chinese, Japanese and Korean text, written without spaces, becomes overlapping character
///   bigrams (`天气预报` → `天气`, `气预`, `预报`); a lone character is kept as it is.
/// - Everything is lower-cased; a short list of English stop words is dropped.
/// - A light stemmer folds English plurals and `-ing`/`-ed` forms: `cities` → `city`,
///   `boxes` → `box`, `running` → `run`, `created` and `creates` → `creat`.
///
/// [`Bm25Index`]: super::Bm25Index
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    analyze(text, false, &mut out);
    out
}

/// Query terms: [`tokenize`], plus each identifier written in the query (`get_weather`,
/// `sendEmail`) folded into one word, as tool names are indexed.
pub(super) fn query_tokens(query: &str) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in query.split_whitespace() {
        analyze(chunk, true, &mut out);
    }
    out
}

/// Appends the terms of `text` to `out`. With `compound`, text made of two or more words joined
/// only by identifier separators or case changes also yields the whole of it as one term
/// (`math.factorial` → `math`, `factorial`, `mathfactorial`).
pub(super) fn analyze(text: &str, compound: bool, out: &mut Vec<String>) {
    let start = out.len();
    let mut word = String::new();
    let mut cjk: Vec<char> = Vec::new();
    for c in text.chars() {
        if is_cjk(c) {
            push_words(&word, out);
            word.clear();
            cjk.push(c);
        } else {
            push_cjk(&cjk, out);
            cjk.clear();
            if c.is_alphanumeric() {
                word.push(c);
            } else {
                push_words(&word, out);
                word.clear();
            }
        }
    }
    push_words(&word, out);
    push_cjk(&cjk, out);
    if compound && out.len() > start + 1 && is_identifier(text) {
        let whole: String = text
            .chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect();
        out.push(stem(whole));
    }
}

/// True for a single identifier: letters and digits with `.`, `_`, `-`, `/` inside.
fn is_identifier(text: &str) -> bool {
    let text = text.trim_matches(|c: char| !c.is_alphanumeric());
    !text.is_empty()
        && text
            .chars()
            .all(|c| (c.is_alphanumeric() && !is_cjk(c)) || matches!(c, '.' | '_' | '-' | '/'))
}

/// Splits one run of letters and digits at case changes and appends its terms.
fn push_words(run: &str, out: &mut Vec<String>) {
    let mut piece_start = 0;
    let mut prev: Option<(usize, char)> = None;
    let mut before_prev: Option<char> = None;
    for (offset, cur) in run.char_indices() {
        if let Some((prev_offset, prev_char)) = prev {
            if cur.is_uppercase() && (prev_char.is_lowercase() || prev_char.is_numeric()) {
                push_term(&run[piece_start..offset], out);
                piece_start = offset;
            } else if cur.is_lowercase()
                && prev_char.is_uppercase()
                && before_prev.is_some_and(char::is_uppercase)
                && prev_offset > piece_start
            {
                // The last capital of an acronym starts the next word: `HTTPRequest` → `HTTP`, `Request`.
                push_term(&run[piece_start..prev_offset], out);
                piece_start = prev_offset;
            }
        }
        before_prev = prev.map(|(_, c)| c);
        prev = Some((offset, cur));
    }
    push_term(&run[piece_start..], out);
}

fn push_term(piece: &str, out: &mut Vec<String>) {
    let word = if piece.is_ascii() {
        piece.to_ascii_lowercase()
    } else {
        piece.to_lowercase()
    };
    if word.is_empty() || is_stop_word(&word) {
        return;
    }
    out.push(stem(word));
}

fn push_cjk(chars: &[char], out: &mut Vec<String>) {
    match chars {
        [] => {}
        [single] => out.push(single.to_string()),
        _ => out.extend(chars.windows(2).map(|pair| pair.iter().collect::<String>())),
    }
}

/// Chinese, Japanese and Korean characters: scripts written without spaces between words.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF     // Hiragana, Katakana
        | 0x3400..=0x4DBF   // CJK Extension A
        | 0x4E00..=0x9FFF   // CJK Unified Ideographs
        | 0xAC00..=0xD7AF   // Hangul syllables
        | 0xF900..=0xFAFF   // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F // CJK Extensions B-F, Compatibility Supplement
    )
}

/// Light English stemming, the same for tools and queries: plurals (`-ies`, `-es` after a
/// sibilant, `-s`), then `-ing` or `-ed` (undoubling a final consonant: `running` → `run`), then
/// a final `-e`, so `create`, `creates`, `created` and `creating` all become `creat`. Words of up
/// to three letters and words outside ASCII are kept as they are.
fn stem(mut word: String) -> String {
    if word.len() <= 3 || !word.is_ascii() {
        return word;
    }
    strip_plural(&mut word);
    let len = word.len();
    let stripped = if word.ends_with("ied") && len >= 5 {
        word.truncate(len - 3);
        word.push('y');
        false
    } else if word.ends_with("ing") && len >= 6 {
        word.truncate(len - 3);
        true
    } else if word.ends_with("ed") && len >= 5 && !word.ends_with("eed") {
        word.truncate(len - 2);
        true
    } else {
        false
    };
    let bytes = word.as_bytes();
    if stripped
        && let [.., before, last] = bytes
        && before == last
        && bytes.len() >= 3
        && !b"aeiouylsz".contains(last)
    {
        word.pop();
    }
    if word.len() >= 4 && word.ends_with('e') && !word.ends_with("ee") {
        word.pop();
    }
    word
}

/// `cities` → `city`, `boxes` → `box`, `tools` → `tool`; `class`, `status`, `analysis` stay.
fn strip_plural(word: &mut String) {
    let len = word.len();
    if word.ends_with("ies") && len >= 5 {
        word.truncate(len - 3);
        word.push('y');
        return;
    }
    if let Some(base) = word.strip_suffix("es")
        && ["ss", "x", "z", "ch", "sh"]
            .iter()
            .any(|end| base.ends_with(end))
    {
        word.truncate(len - 2);
        return;
    }
    if word.ends_with('s')
        && !word.ends_with("ss")
        && !word.ends_with("us")
        && !word.ends_with("is")
    {
        word.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_table() {
        let table: &[(&str, &[&str])] = &[
            ("get_weather", &["get", "weather"]),
            ("sendEmail", &["send", "email"]),
            ("math.factorial", &["math", "factorial"]),
            ("HTTPRequest", &["http", "request"]),
            ("parseJSONToXML", &["pars", "json", "xml"]),
            ("ipv4Address", &["ipv4", "address"]),
            ("kebab-case/path", &["kebab", "cas", "path"]),
            (
                "Find the cities with boxes of tools",
                &["find", "city", "box", "tool"],
            ),
            ("Über-Straße", &["über", "straße"]),
            ("天气预报", &["天气", "气预", "预报"]),
            (
                "北京的天气 weather",
                &["北京", "京的", "的天", "天气", "weather"],
            ),
            ("東京 tokyo", &["東京", "tokyo"]),
            ("a", &[]),
            ("", &[]),
        ];
        for (text, expected) in table {
            assert_eq!(tokenize(text), *expected, "{text}");
        }
    }

    #[test]
    fn identifiers_in_queries_also_fold_whole() {
        assert_eq!(
            query_tokens("call get_weather."),
            ["call", "get", "weather", "getweather"]
        );
        assert_eq!(
            query_tokens("sendEmail now"),
            ["send", "email", "sendemail", "now"]
        );
        assert_eq!(query_tokens("weather"), ["weather"]);
    }

    #[test]
    fn stemmer_table() {
        let table = [
            ("cities", "city"),
            ("boxes", "box"),
            ("matches", "match"),
            ("classes", "class"),
            ("tools", "tool"),
            ("class", "class"),
            ("status", "status"),
            ("analysis", "analysis"),
            ("bus", "bus"),
            ("uses", "use"),
            ("running", "run"),
            ("create", "creat"),
            ("creates", "creat"),
            ("created", "creat"),
            ("creating", "creat"),
            ("studied", "study"),
            ("free", "free"),
            ("calling", "call"),
            ("need", "need"),
        ];
        for (word, expected) in table {
            assert_eq!(stem(word.to_owned()), expected, "{word}");
        }
    }
}
