//! Where a store lives ([`Location`]: a SQLite file or a PostgreSQL URL) and its [`Backend`].

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// Where a store lives: a SQLite file or a PostgreSQL URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A SQLite database file (created if missing), in WAL mode.
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL (`postgres://user@host:port/db`).
    Postgres(String),
}

impl Location {
    /// The default: `$XDG_DATA_HOME/plansmith/plans.db`, else `~/.local/share/plansmith/plans.db`.
    pub fn default_sqlite() -> Result<Location> {
        let base = std::env::var_os("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".local/share"))
            })
            .ok_or_else(|| StoreError::Location {
                location: "(default)".into(),
                reason: "neither XDG_DATA_HOME nor HOME is set".into(),
            })?;
        Ok(Location::Sqlite(base.join("plansmith").join("plans.db")))
    }

    /// Which backend this location uses.
    pub fn backend(&self) -> Backend {
        match self {
            Location::Sqlite(_) => Backend::Sqlite,
            Location::Postgres(_) => Backend::Postgres,
        }
    }
}

impl FromStr for Location {
    type Err = StoreError;

    /// `sqlite:PATH`, `sqlite://PATH`, `postgres://…` / `postgresql://…`, or a bare file path.
    fn from_str(text: &str) -> Result<Location> {
        let text = text.trim();
        if text.is_empty() {
            return Err(StoreError::Location {
                location: text.into(),
                reason: "empty".into(),
            });
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Location::Postgres(text.to_owned()));
        }
        if let Some(rest) = text.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            let path = path.split('?').next().unwrap_or(path);
            if path.is_empty() {
                return Err(StoreError::Location {
                    location: text.into(),
                    reason: "no file path after `sqlite:`".into(),
                });
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if text.contains("://") {
            return Err(StoreError::Location {
                location: text.into(),
                reason: "expected sqlite:PATH or postgres://…".into(),
            });
        }
        Ok(Location::Sqlite(PathBuf::from(text)))
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            Location::Postgres(url) => f.write_str(&redact_url(url)),
        }
    }
}

/// The URL without its password.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or(user);
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_owned(),
    }
}

/// The database behind a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// SQLite (embedded, one file, WAL).
    Sqlite,
    /// PostgreSQL (several nodes sharing one store).
    Postgres,
}

pub(super) fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        let cases = [
            ("sqlite:/tmp/a.db", Location::Sqlite("/tmp/a.db".into())),
            ("sqlite:///tmp/a.db", Location::Sqlite("/tmp/a.db".into())),
            ("sqlite:rel.db?mode=rwc", Location::Sqlite("rel.db".into())),
            ("plans.db", Location::Sqlite("plans.db".into())),
            (
                "postgres://u:p@127.0.0.1:5433/db",
                Location::Postgres("postgres://u:p@127.0.0.1:5433/db".into()),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<Location>().unwrap(), want, "{text}");
        }
        for bad in ["", "sqlite:", "mysql://x"] {
            assert!(bad.parse::<Location>().is_err(), "{bad}");
        }
        assert_eq!(
            Location::Postgres("postgres://u:secret@h/db".into()).to_string(),
            "postgres://u@h/db"
        );
    }
}
