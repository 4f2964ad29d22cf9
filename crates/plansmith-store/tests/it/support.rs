//! Test databases: a fresh SQLite file, or a fresh PostgreSQL database on the server named by
//! `PLANSMITH_TEST_POSTGRES_URL` (started by `.ci/setup.d/20-postgres.sh` in CI).

use std::io::Write;
use std::path::PathBuf;

use plansmith_store::{Location, PlanStore};

/// The environment variable naming the PostgreSQL server for tests.
pub const PG_URL_VAR: &str = "PLANSMITH_TEST_POSTGRES_URL";

/// A fresh, empty store and where it lives (kept alive by `_dir` for SQLite).
pub struct TestDb {
    pub store: PlanStore,
    pub location: Location,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// Closes and opens the store again, as a restarted process would.
    pub async fn reopen(&mut self) {
        self.store.close().await;
        self.store = PlanStore::open(&self.location).await.unwrap();
    }
}

pub async fn sqlite() -> TestDb {
    let dir = tempfile::tempdir().unwrap();
    let location = Location::Sqlite(dir.path().join("plans.db"));
    let store = PlanStore::open(&location).await.unwrap();
    TestDb {
        store,
        location,
        _dir: Some(dir),
    }
}

/// The base URL, or `None` (printing why) when PostgreSQL is not configured. Under `CI=true`
/// a missing URL fails the test: CI always starts PostgreSQL.
pub fn postgres_url(test: &str) -> Option<String> {
    match std::env::var(PG_URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(
                !ci,
                "{PG_URL_VAR} is not set under CI=true: the PostgreSQL half of `{test}` must run \
                 (.ci/setup.d/20-postgres.sh starts the server)"
            );
            // Straight to the process's stderr: libtest captures `eprintln!` of passing tests,
            // and this must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "NOTE: PostgreSQL half of `{test}` NOT RUN: set {PG_URL_VAR}=postgres://… \
                 (or source .ci/setup.d/20-postgres.sh)"
            );
            None
        }
    }
}

/// A URL for a fresh database on the server at `base`.
pub async fn fresh_postgres_url(base: &str) -> String {
    sqlx::any::install_default_drivers();
    let name = format!("plansmith_t_{}", uuid::Uuid::new_v4().simple());
    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(base)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    <sqlx::AnyConnection as sqlx::Connection>::close(conn)
        .await
        .unwrap();
    with_database(base, &name)
}

fn with_database(base: &str, name: &str) -> String {
    let (before_query, query) = match base.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (base, None),
    };
    let (scheme, rest) = before_query.split_once("://").unwrap();
    let authority = rest.split('/').next().unwrap();
    let mut url = format!("{scheme}://{authority}/{name}");
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    url
}

pub async fn postgres(test: &str) -> Option<TestDb> {
    let base = postgres_url(test)?;
    let url = fresh_postgres_url(&base).await;
    let location = Location::Postgres(url);
    let store = PlanStore::open(&location).await.unwrap();
    Some(TestDb {
        store,
        location,
        _dir: None,
    })
}

/// A plain sqlx connection to the database at `location`, for tests that look underneath the
/// store (the migrations table, query plans).
pub async fn raw_connection(location: &Location) -> sqlx::AnyConnection {
    sqlx::any::install_default_drivers();
    let url = match location {
        Location::Sqlite(path) => format!("sqlite://{}", path.display()),
        Location::Postgres(url) => url.clone(),
        other => panic!("unexpected location {other:?}"),
    };
    <sqlx::AnyConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap()
}

/// The workspace root (for `examples/`).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `$body` (an `async fn(TestDb)`) once per backend: `$name::sqlite` and `$name::postgres`.
macro_rules! both_backends {
    ($name:ident, $body:path) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                $body($crate::support::sqlite().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let test = concat!(stringify!($name), "::postgres");
                if let Some(db) = $crate::support::postgres(test).await {
                    $body(db).await;
                }
            }
        }
    };
}
pub(crate) use both_backends;
