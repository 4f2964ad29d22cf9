//! Tool names across servers: a tool keeps its own name unless another server lists the same
//! name; then **every** tool of that name is renamed `server__tool` (two underscores).
//!
//! The namespaced name must satisfy both MCP's tool-name rule (`[A-Za-z0-9_.-]`, 1–128
//! characters) and the providers' function-name rule (`^[a-zA-Z0-9_-]{1,64}$`), so any other
//! character of the server or tool name becomes `_`, and a name longer than 64 characters is
//! cut to 55 and ends in `_` plus 8 hex digits of a hash of `server/tool` (stable across runs).
//! Names that are still equal after that get `_2`, `_3`, … . The catalog keeps a [`Route`] per
//! name back to `(server, original name)` for `tools/call`.

use std::collections::{BTreeMap, HashMap, HashSet};

/// Where a catalog tool lives: the server and the tool's own name there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    /// The server's name in the configuration.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
}

/// Separator between the server and the tool in a namespaced name.
pub const SEPARATOR: &str = "__";
/// Longest name providers accept for a function.
pub const MAX_NAME: usize = 64;

/// Assigns catalog names to `(server, tool)` pairs given in order; returns one name per pair.
pub fn assign(pairs: &[(String, String)]) -> Vec<String> {
    let mut servers_of: HashMap<&str, HashSet<&str>> = HashMap::new();
    for (server, tool) in pairs {
        servers_of.entry(tool).or_default().insert(server);
    }
    let mut taken: HashSet<String> = pairs
        .iter()
        .filter(|(_, tool)| servers_of.get(tool.as_str()).is_some_and(|s| s.len() == 1))
        .map(|(_, tool)| tool.clone())
        .collect();
    let mut names = Vec::with_capacity(pairs.len());
    let mut counters: BTreeMap<String, u32> = BTreeMap::new();
    for (server, tool) in pairs {
        let clashes = servers_of.get(tool.as_str()).is_some_and(|s| s.len() > 1);
        if !clashes {
            names.push(tool.clone());
            continue;
        }
        let base = namespaced(server, tool);
        let mut name = base.clone();
        while taken.contains(&name) {
            let n = counters.entry(base.clone()).or_insert(1);
            *n += 1;
            let suffix = format!("_{n}");
            let keep = MAX_NAME.saturating_sub(suffix.len()).min(base.len());
            name = format!("{}{suffix}", &base[..keep]);
        }
        taken.insert(name.clone());
        names.push(name);
    }
    names
}

/// `server__tool`, sanitised and bounded (see the module docs).
pub fn namespaced(server: &str, tool: &str) -> String {
    let full = format!("{}{SEPARATOR}{}", sanitize(server), sanitize(tool));
    if full.len() <= MAX_NAME {
        return full;
    }
    let hash = fnv1a(format!("{server}/{tool}").as_bytes());
    // Every character is ASCII after `sanitize`, so byte slicing is on char boundaries.
    format!("{}_{hash:08x}", &full[..MAX_NAME - 9])
}

fn sanitize(text: &str) -> String {
    let out: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() { "_".into() } else { out }
}

/// 32-bit FNV-1a: small, stable across runs and platforms.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(s, t)| ((*s).to_owned(), (*t).to_owned()))
            .collect()
    }

    #[test]
    fn only_clashing_names_are_namespaced() {
        let names = assign(&pairs(&[
            ("files", "read_file"),
            ("files", "echo"),
            ("everything", "echo"),
            ("time", "get_current_time"),
        ]));
        assert_eq!(
            names,
            [
                "read_file",
                "files__echo",
                "everything__echo",
                "get_current_time"
            ]
        );
    }

    #[test]
    fn names_fit_the_provider_rule() {
        let long_server = "my.server with spaces";
        let long_tool = "t".repeat(80);
        let names = assign(&pairs(&[
            (long_server, &long_tool),
            ("other", &long_tool),
            ("a.b", "x"),
            ("a_b", "x"),
        ]));
        for name in &names {
            assert!(name.len() <= MAX_NAME, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                "{name}"
            );
        }
        assert!(names[0].starts_with("my_server_with_spaces__ttt"));
        assert_ne!(names[0], names[1]);
        // `a.b` and `a_b` both sanitise to `a_b__x`: the second gets a suffix.
        assert_eq!(names[2], "a_b__x");
        assert_eq!(names[3], "a_b__x_2");
        let unique: HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        // Stable across runs.
        assert_eq!(namespaced(long_server, &long_tool), names[0]);
    }
}
