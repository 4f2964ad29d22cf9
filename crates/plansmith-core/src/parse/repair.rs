//! Reading one JSON candidate leniently: `serde_json` first, then an escape pre-pass, then
//! jsonrepair for what is still malformed.

use std::borrow::Cow;

use serde_json::Value;

/// `text` as one JSON value, read as written: strict JSON, except that raw control characters
/// inside strings stand for themselves (see [`extract_json`](super::extract_json)); `None` when
/// anything else would have to be guessed. For checking what a server's constrained decoding
/// produced.
pub fn read_as_written(text: &str) -> Option<Value> {
    match read_escaped(text) {
        Ok((value, false)) => Some(value),
        _ => None,
    }
}

/// Reads one candidate: [`read_escaped`], then jsonrepair on what the pre-pass left.
pub(super) fn parse_candidate(slice: &str) -> Result<(Value, bool), String> {
    let text = match read_escaped(slice) {
        Ok(read) => return Ok(read),
        Err(text) => text,
    };
    let repaired = jsonrepair_rs::jsonrepair(&text).map_err(|err| err.to_string())?;
    serde_json::from_str::<Value>(&repaired)
        .map(|value| (value, true))
        .map_err(|err| format!("repair produced invalid JSON: {err}"))
}

/// `serde_json`, then the escape pre-pass and `serde_json` again: the value and whether it was
/// repaired, or the text (escaped where the pre-pass could) for jsonrepair.
fn read_escaped(slice: &str) -> Result<(Value, bool), Cow<'_, str>> {
    if let Ok(value) = serde_json::from_str::<Value>(slice) {
        return Ok((value, false));
    }
    match escape_invalid_escapes(slice) {
        Some((text, repaired)) => match serde_json::from_str::<Value>(&text) {
            Ok(value) => Ok((value, repaired)),
            Err(_) => Err(Cow::Owned(text)),
        },
        None => Err(Cow::Borrowed(slice)),
    }
}

/// The escape pre-pass (see [`extract_json`](super::extract_json) for why it exists): inside
/// double-quoted strings, an invalid escape `\x` becomes `\\x`, `\'` becomes `'`, a lone surrogate
/// escape becomes `\uFFFD`, and a raw control character (a line break in a multi-line value) is
/// escaped. Returns `None` when nothing changed, else the text and whether it was repaired:
/// escaping a raw control character is not a repair, since the text has one reading (Python's
/// `json.loads(strict=False)` reads it the same way), while the others guess.
fn escape_invalid_escapes(text: &str) -> Option<(String, bool)> {
    let mut out = String::with_capacity(text.len() + 8);
    let mut changed = false;
    let mut controls = false;
    let mut in_string = false;
    let mut chars = text.char_indices().peekable();
    while let Some((idx, c)) = chars.next() {
        if !in_string {
            in_string = c == '"';
            out.push(c);
            continue;
        }
        match c {
            '"' => {
                in_string = false;
                out.push(c);
            }
            '\\' => match chars.peek().map(|&(_, next)| next) {
                Some(next @ ('"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't')) => {
                    out.push('\\');
                    out.push(next);
                    chars.next();
                }
                Some('\'') => {
                    out.push('\'');
                    chars.next();
                    changed = true;
                }
                Some('u') => match hex4(text, idx + 2) {
                    Some(unit) if (0xD800..=0xDBFF).contains(&unit) => {
                        let low = text
                            .get(idx + 6..idx + 8)
                            .filter(|s| *s == "\\u")
                            .and_then(|_| hex4(text, idx + 8))
                            .filter(|low| (0xDC00..=0xDFFF).contains(low));
                        let (copy, skip) = match low {
                            Some(_) => (text.get(idx..idx + 12).unwrap_or("\\uFFFD"), 11),
                            None => {
                                changed = true;
                                ("\\uFFFD", 5)
                            }
                        };
                        out.push_str(copy);
                        for _ in 0..skip {
                            chars.next();
                        }
                    }
                    Some(unit) if (0xDC00..=0xDFFF).contains(&unit) => {
                        out.push_str("\\uFFFD");
                        changed = true;
                        for _ in 0..5 {
                            chars.next();
                        }
                    }
                    Some(_) => {
                        out.push_str(text.get(idx..idx + 6).unwrap_or("\\uFFFD"));
                        for _ in 0..5 {
                            chars.next();
                        }
                    }
                    None => {
                        out.push_str("\\\\");
                        changed = true;
                    }
                },
                // A backslash before a line break is a line continuation; jsonrepair drops it.
                Some(next @ ('\n' | '\r')) => {
                    out.push('\\');
                    out.push(next);
                    chars.next();
                }
                None => out.push('\\'),
                Some(_) => {
                    out.push_str("\\\\");
                    changed = true;
                }
            },
            '\n' => push_control(&mut out, "\\n", &mut controls),
            '\r' => push_control(&mut out, "\\r", &mut controls),
            '\t' => push_control(&mut out, "\\t", &mut controls),
            c if c < '\u{20}' => {
                let escape = format!("\\u{:04x}", u32::from(c));
                push_control(&mut out, &escape, &mut controls);
            }
            _ => out.push(c),
        }
    }
    (changed || controls).then_some((out, changed))
}

fn push_control(out: &mut String, escape: &str, controls: &mut bool) {
    out.push_str(escape);
    *controls = true;
}

/// The four hex digits at byte `at`, as a UTF-16 code unit.
fn hex4(text: &str, at: usize) -> Option<u16> {
    let digits = text.get(at..at + 4)?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::extract_json;

    #[test]
    fn escape_pre_pass_fixes_what_jsonrepair_gets_wrong() {
        let cases: &[(&str, Option<&str>)] = &[
            (r#"{"a": "ok \n \" \\ \/ \u00e9"}"#, None),
            (r#"{"a": "\upcite{x}"}"#, Some(r#"{"a": "\\upcite{x}"}"#)),
            (r#"{"a": "\u12zz"}"#, Some(r#"{"a": "\\u12zz"}"#)),
            (r#"{"a": "\d+\s"}"#, Some(r#"{"a": "\\d+\\s"}"#)),
            (r#"{"a": "it\'s"}"#, Some(r#"{"a": "it's"}"#)),
            (r#"{"a": "\uD83D x"}"#, Some(r#"{"a": "\uFFFD x"}"#)),
            (r#"{"a": "\uDE80"}"#, Some(r#"{"a": "\uFFFD"}"#)),
            (r#"{"a": "\uD83D\uDE80"}"#, None),
            // Outside strings nothing is touched.
            (r#"{\d: 1}"#, None),
            // A trailing backslash (output cut off) is left for jsonrepair.
            (r#"{"a": "x\"#, None),
        ];
        for (input, want) in cases {
            let got = escape_invalid_escapes(input);
            assert_eq!(
                got.as_ref().map(|(text, _)| text.as_str()),
                *want,
                "{input}"
            );
            assert!(got.is_none_or(|(_, repaired)| repaired), "{input}");
        }
        // jsonrepair alone fails or loses the backslash on these; with the pre-pass they survive.
        assert!(jsonrepair_rs::jsonrepair(r#"{"a": "\upcite"}"#).is_err());
        let (value, repaired) = parse_candidate(r#"{"a": "\upcite{x} \d"}"#).unwrap();
        assert!(repaired);
        assert_eq!(value["a"], r"\upcite{x} \d");
    }

    #[test]
    fn raw_control_characters_in_strings_are_read_as_written() {
        // Small models (and servers whose JSON grammar allows it) write multi-line values with
        // raw line breaks; the text has one reading, so it is not a repair.
        let (value, repaired) =
            parse_candidate("{\"a\": \"line 1\nline 2\tend\u{1}\",\n \"b\": 2}").unwrap();
        assert!(!repaired);
        assert_eq!(value["a"], "line 1\nline 2\tend\u{1}");
        assert_eq!(value["b"], 2);
        // With a guessed fix beside it, it is a repair.
        let (value, repaired) = parse_candidate("{\"a\": \"x\ny \\d\"}").unwrap();
        assert!(repaired);
        assert_eq!(value["a"], "x\ny \\d");
        // A backslash before a line break is still left to jsonrepair, as before.
        assert!(parse_candidate("{\"a\": \"x\\\ny\"}").unwrap().1);
        assert_eq!(
            read_as_written("{\"a\": \"x\ny\"}"),
            Some(serde_json::json!({"a": "x\ny"}))
        );
        assert_eq!(read_as_written("{\"a\": \"\\d\"}"), None);
        assert_eq!(read_as_written("{\"a\": 1,}"), None);
        // The whole path: a plan with a multi-line thought is read as written.
        let raw = "{\"thought\": \"first\nsecond\", \"steps\": [{\"id\": \"s1\", \"type\": \"reply\", \"text\": \"hi\"}]}";
        let (value, repaired) = extract_json(raw).unwrap();
        assert!(!repaired);
        assert_eq!(value["thought"], "first\nsecond");
    }
}
