//! Provider API keys kept away from tools: the environment variables that hold them, which
//! tool commands and MCP servers do not inherit ([`ProviderKeys`]), and the redaction of a
//! key's value wherever text shows it anyway ([`redact`], the same for model errors and tool
//! output).
//!
//! ```
//! use plansmith_core::secrets::{ProviderKeys, redact};
//!
//! let keys = ProviderKeys::default().with_variable("GATEWAY_KEY");
//! assert!(keys.variables().any(|name| name == "OPENAI_API_KEY"));
//! assert!(keys.variables().any(|name| name == "GATEWAY_KEY"));
//! assert_eq!(redact("key sk-123456 refused", "sk-123456"), "key [redacted] refused");
//! ```

use serde_json::Value;

/// What a redacted key reads as.
pub const REDACTED: &str = "[redacted]";

/// The variables that hold provider keys when the configuration names no other.
pub const DEFAULT_KEY_VARIABLES: [&str; 2] = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

/// Replaces every occurrence of `secret` in `text` with [`REDACTED`]. A secret shorter than
/// 4 bytes is left alone: it would match everywhere and hide nothing.
pub fn redact(text: &str, secret: &str) -> String {
    if secret.len() < 4 {
        return text.to_owned();
    }
    text.replace(secret, REDACTED)
}

/// [`redact`] for each of `secrets`.
pub fn redact_all(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_owned(), |text, secret| redact(&text, secret))
}

/// [`redact_all`] in every string of a JSON value, object keys included.
pub fn redact_json(value: Value, secrets: &[String]) -> Value {
    if secrets.is_empty() {
        return value;
    }
    match value {
        Value::String(text) => Value::String(redact_all(&text, secrets)),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|item| redact_json(item, secrets))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, item)| (redact_all(&key, secrets), redact_json(item, secrets)))
                .collect(),
        ),
        other => other,
    }
}

/// The environment variables that hold provider API keys: tool processes do not inherit
/// them, and their values are redacted in what tools return. By default
/// [`DEFAULT_KEY_VARIABLES`]; add the variables a configuration names (`api_key_env`) with
/// [`ProviderKeys::with_variable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderKeys {
    variables: Vec<String>,
}

impl Default for ProviderKeys {
    fn default() -> ProviderKeys {
        ProviderKeys {
            variables: DEFAULT_KEY_VARIABLES.map(str::to_owned).to_vec(),
        }
    }
}

impl ProviderKeys {
    /// Also withholds and redacts `name` (a blank name or one already listed changes
    /// nothing).
    pub fn with_variable(mut self, name: impl Into<String>) -> ProviderKeys {
        let name = name.into().trim().to_owned();
        if !name.is_empty() && !self.variables.contains(&name) {
            self.variables.push(name);
        }
        self
    }

    /// The variables' names.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.variables.iter().map(String::as_str)
    }

    /// The keys the variables hold in this process's environment now (trimmed, as the
    /// clients read them; unset and empty ones left out).
    pub fn values(&self) -> Vec<String> {
        self.variables
            .iter()
            .filter_map(|name| std::env::var(name).ok())
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_redacted_in_text_and_json() {
        let secrets = vec!["sk-abcdef".to_owned(), "xy".to_owned()];
        assert_eq!(
            redact_all("sk-abcdef, xy and sk-abcdef", &secrets),
            "[redacted], xy and [redacted]"
        );
        assert_eq!(
            redact_json(
                json!({"k": ["sk-abcdef", 1, {"sk-abcdef": "a sk-abcdef b"}]}),
                &secrets
            ),
            json!({"k": ["[redacted]", 1, {"[redacted]": "a [redacted] b"}]})
        );
    }

    #[test]
    fn configured_variables_join_the_defaults_once() {
        let keys = ProviderKeys::default()
            .with_variable(" GATEWAY_KEY ")
            .with_variable("OPENAI_API_KEY")
            .with_variable("  ");
        assert_eq!(
            keys.variables().collect::<Vec<_>>(),
            ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GATEWAY_KEY"]
        );
    }
}
