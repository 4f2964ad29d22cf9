//! The CLI's own messages on stderr that a service's log collects: `plansmith serve`'s
//! (listening, stopping, runs left), warnings about MCP servers, the final error. As plain
//! lines by default; with `PLANSMITH_LOG_FORMAT=json`, one JSON object each, in the shape of the
//! log's own lines (`timestamp`, `level`, `message`, `target`), so that a log shipper can read
//! every line of stderr as JSON.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::Level;

static JSON: AtomicBool = AtomicBool::new(false);

/// Messages from now on are JSON lines (`PLANSMITH_LOG_FORMAT=json`).
pub fn use_json() {
    JSON.store(true, Ordering::Relaxed);
}

/// Writes `message` on stderr: `PREFIX: MESSAGE` as a plain line, or a JSON line at `level`
/// under `target` (without the prefix, which the target replaces). A stderr that is closed
/// (the reader went away) drops the line: a server goes on serving.
pub fn say(level: Level, target: &str, prefix: &str, message: &str) {
    let line = if JSON.load(Ordering::Relaxed) {
        json_line(level, target, message)
    } else {
        format!("{prefix}: {message}")
    };
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn json_line(level: Level, target: &str, message: &str) -> String {
    serde_json::json!({
        "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "level": level.as_str(),
        "message": message,
        "target": target,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_line_has_the_log_fields() {
        let line = json_line(Level::WARN, "plansmith::serve", "a \"quoted\"\nmessage");
        let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(entry["level"], "WARN");
        assert_eq!(entry["target"], "plansmith::serve");
        assert_eq!(entry["message"], "a \"quoted\"\nmessage");
        assert!(entry["timestamp"].as_str().unwrap().ends_with('Z'));
        assert!(!line.contains('\n'));
    }
}
