//! Everything the CLI prints goes through here: the crate's `print!`, `println!`, `eprint!` and
//! `eprintln!` (defined in `main.rs`, shadowing the standard ones) call [`out`] and [`err`].
//!
//! - **Control characters are made visible.** Model replies, requests and tool results reach
//!   the terminal in plan renderings, summaries and errors; a raw ESC or OSC sequence in them
//!   could retitle the window, hide text or rewrite what the user reads. Every control
//!   character but newline and tab is printed as a `\u00XX` escape instead ([`safe`]), a
//!   form that is also a valid escape inside a JSON string, so `--json` output stays JSON.
//! - **A closed pipe is not a crash.** `plansmith plans list | head -1` closes stdout early;
//!   the standard macros panic then. Here the rest of the output is dropped and the command
//!   goes on to finish its work (a plan it was storing is stored) and exits with its own code.

use std::borrow::Cow;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// `text` with every control character except `\n` and `\t` replaced by `\u00XX`.
pub fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn is_unsafe(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// Writes to stdout, made [`safe`]; once the reader has gone, nothing more is written.
pub fn out(text: &str) {
    write_to(&mut std::io::stdout().lock(), &STDOUT_CLOSED, text);
}

/// Writes to stderr, made [`safe`]; once the reader has gone, nothing more is written.
pub fn err(text: &str) {
    write_to(&mut std::io::stderr().lock(), &STDERR_CLOSED, text);
}

fn write_to(stream: &mut dyn Write, closed: &AtomicBool, text: &str) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    let result = stream
        .write_all(safe(text).as_bytes())
        .and_then(|()| stream.flush());
    if result.is_err() {
        // A broken pipe, or a full disk behind a redirect: the output cannot be delivered, and
        // the command still finishes its work.
        closed.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_visible_and_json_stays_json() {
        assert_eq!(safe("plain\ttext\n"), "plain\ttext\n");
        assert!(matches!(safe("plain"), Cow::Borrowed(_)));
        let hostile = "\u{1b}]0;pwned\u{7}title\u{1b}[2J\rgone\u{9b}31m\u{7f}";
        let shown = safe(hostile);
        assert_eq!(
            shown,
            "\\u001b]0;pwned\\u0007title\\u001b[2J\\u000dgone\\u009b31m\\u007f"
        );
        assert!(!shown.chars().any(|c| c.is_control()));
        // serde_json leaves DEL and C1 characters raw in strings; escaped, it still parses.
        let json = serde_json::to_string(&serde_json::json!({"t": "a\u{9b}b\u{7f}"})).unwrap();
        let value: serde_json::Value = serde_json::from_str(&safe(&json)).unwrap();
        assert_eq!(value["t"], "a\u{9b}b\u{7f}");
    }
}
