//! Text around and inside the JSON: `<think>` blocks and markdown code fences set aside before
//! extraction, snippets and titles cut to length.

use std::borrow::Cow;

/// Removes `<think>`/`<thinking>` blocks (see [`extract_json`](super::extract_json)); the text
/// itself when it has no such tag (most replies), without copying it.
pub(super) fn strip_think(raw: &str) -> Cow<'_, str> {
    let bytes = raw.as_bytes();
    let has_tag = bytes.iter().enumerate().any(|(idx, &byte)| {
        byte == b'<' && {
            let rest = bytes.get(idx + 1..).unwrap_or_default();
            let rest = rest.strip_prefix(b"/").unwrap_or(rest);
            rest.get(..5)
                .is_some_and(|word| word.eq_ignore_ascii_case(b"think"))
        }
    });
    if !has_tag {
        return Cow::Borrowed(raw);
    }
    Cow::Owned(strip_think_tags(raw))
}

fn strip_think_tags(raw: &str) -> String {
    const OPEN: [&str; 2] = ["<thinking>", "<think>"];
    const CLOSE: [&str; 2] = ["</thinking>", "</think>"];
    // ASCII lowercasing keeps every byte offset, so positions in `lower` are positions in `raw`.
    let lower = raw.to_ascii_lowercase();
    let find = |tags: &[&str], from: usize| -> Option<(usize, usize)> {
        let hay = lower.get(from..)?;
        tags.iter()
            .filter_map(|tag| hay.find(tag).map(|at| (from + at, tag.len())))
            .min_by_key(|&(at, len)| (at, usize::MAX - len))
    };
    let mut out = String::with_capacity(raw.len());
    let mut pos = 0;
    loop {
        let open = find(&OPEN, pos);
        let close = find(&CLOSE, pos);
        match (open, close) {
            (_, Some((close_at, close_len))) if open.is_none_or(|(at, _)| close_at < at) => {
                // A closing tag without an opening one: what came before was reasoning.
                pos = close_at + close_len;
            }
            (Some((open_at, open_len)), _) => {
                out.push_str(raw.get(pos..open_at).unwrap_or(""));
                match find(&CLOSE, open_at + open_len) {
                    Some((close_at, close_len)) => pos = close_at + close_len,
                    // Never closed: drop the tag alone, JSON may follow the reasoning.
                    None => pos = open_at + open_len,
                }
            }
            _ => {
                out.push_str(raw.get(pos..).unwrap_or(""));
                return out;
            }
        }
    }
}

/// Contents of the markdown code fences in `text`, in order. A fence opens with ```` ``` ```` at
/// the start of a line, followed by an optional language tag; it closes with ```` ``` ```` at
/// the start or the end of a line, or at the end of the text. Inside a JSON string a line break
/// is escaped, so a fence quoted in a string is never taken for one.
pub(super) fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut line_start = 0;
    let mut open: Option<usize> = None;
    while line_start <= text.len() {
        let line_end = text
            .get(line_start..)
            .and_then(|rest| rest.find('\n'))
            .map_or(text.len(), |at| line_start + at);
        let line = text.get(line_start..line_end).unwrap_or("");
        // Spaces and tabs first, byte by byte: a pretty-printed reply is mostly indentation,
        // and `trim_start` decodes it character by character (twice, it was).
        let ascii = line
            .bytes()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
        let unindented = line.get(ascii..).unwrap_or("").trim_start();
        let indent = line.len() - unindented.len();
        let starts_fence = unindented.starts_with("```");
        match open {
            None if starts_fence => {
                let after = line_start + indent + 3;
                let rest = text.get(after..line_end).unwrap_or("");
                let tag_len = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "_-+.".contains(c)))
                    .unwrap_or(rest.len());
                let content_start = after + tag_len;
                // An inline fence: ```json {...}``` on one line.
                let inline = text.get(content_start..line_end).unwrap_or("");
                if let Some(close) = inline.trim_end().strip_suffix("```")
                    && !close.trim().is_empty()
                {
                    blocks.push(close);
                    line_start = line_end + 1;
                    continue;
                }
                open = Some(content_start);
            }
            Some(content_start) => {
                let trimmed = line.trim_end();
                if starts_fence {
                    blocks.push(text.get(content_start..line_start).unwrap_or(""));
                    open = None;
                } else if let Some(before) = trimmed.strip_suffix("```") {
                    let end = line_start + before.len();
                    blocks.push(text.get(content_start..end).unwrap_or(""));
                    open = None;
                }
            }
            None => {}
        }
        line_start = line_end + 1;
    }
    if let Some(content_start) = open {
        blocks.push(text.get(content_start..).unwrap_or(""));
    }
    blocks
}

/// A title from the goal: its first line, at most ~60 characters.
pub(super) fn derive_title(goal: &str) -> String {
    let title = truncate_title(goal, 60);
    if title.is_empty() {
        "Untitled plan".to_owned()
    } else {
        title
    }
}

/// The first line of `text`, cut to `max` characters (at a word boundary when there is one).
pub(super) fn truncate_title(text: &str, max: usize) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let cut: String = line.chars().take(max).collect();
    let at_word = match cut.rfind(char::is_whitespace) {
        Some(pos) if pos >= cut.len() / 2 => cut.get(..pos).unwrap_or(&cut),
        _ => &cut,
    };
    format!("{}…", at_word.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn think_blocks_are_stripped() {
        let cases = [
            ("<think>a</think>b", "b"),
            ("x<THINK>a</Think>y<thinking>b</thinking>z", "xyz"),
            ("<think>never closed {\"a\": 1}", "never closed {\"a\": 1}"),
            ("reasoning only </think> answer", " answer"),
            ("no tags", "no tags"),
            ("a < b </thin> <t", "a < b </thin> <t"),
            ("x</THINK>y", "y"),
            ("é<think>ü</think>🚀", "é🚀"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_think(input), want, "{input}");
        }
    }

    #[test]
    fn code_fences_are_found() {
        let text =
            "a\n```json\n{\"x\": 1}\n```\nb\n  ```\n[2]\n```\n```python {\"y\": 3}```\n```\nopen";
        assert_eq!(
            fenced_blocks(text),
            ["\n{\"x\": 1}\n", "\n[2]\n", " {\"y\": 3}", "\nopen"]
        );
        // A fence quoted inside a JSON string is no fence: its line break is escaped.
        assert!(fenced_blocks(r#"{"t": "```python\nx\n```"}"#).is_empty());
    }

    #[test]
    fn titles_are_cut_on_char_boundaries() {
        assert_eq!(truncate_title("short", 60), "short");
        assert_eq!(truncate_title("line one\nline two", 60), "line one");
        let cjk = "巴".repeat(80);
        assert_eq!(truncate_title(&cjk, 60), format!("{}…", "巴".repeat(60)));
        assert_eq!(truncate_title("aaaa bbbb cccc", 12), "aaaa bbbb…");
        assert_eq!(derive_title("  "), "Untitled plan");
    }
}
