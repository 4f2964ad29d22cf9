//! Catalogs that callers send with a request, stored by content and planned with.
//!
//! A service is started with one catalog, but several agents may share it, each with its own
//! tools. A request may carry its tools and agents (in any form [`Catalog::from_json`] reads);
//! the document is stored once in the `catalogs` table under its content id (SHA-256 of its
//! JSON), the plan's [`Review::catalog`] names that id, and every later operation on the plan
//! (replan after an edit or an answer, JSON Patch, run, replan after a failed step) plans and
//! validates against the same catalog, in this process or another one on the same store.
//!
//! The planners built for those catalogs are `plansmith-service`'s (its `Planners`); the store
//! keeps the documents.

use chrono::Utc;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::error::{Result, StoreError};
use crate::store::{PlanStore, timestamp};

impl PlanStore {
    /// Stores a catalog document under its content id and returns the id (`sha256:` and the
    /// hex digest of its JSON text). Storing the same document again changes nothing.
    pub async fn save_catalog(&self, document: &Value) -> Result<String> {
        let text = document.to_string();
        let id = catalog_id(&text);
        self.insert_catalog(&id, text).await?;
        Ok(id)
    }

    /// Stores `text`, a catalog document's JSON, under `id` (its [`catalog_id`]); storing it
    /// again changes nothing.
    pub async fn insert_catalog(&self, id: &str, text: String) -> Result<()> {
        sqlx::query(
            "INSERT INTO catalogs (id, document, created_at) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(id.to_owned())
        .bind(text)
        .bind(timestamp(Utc::now()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The catalog document stored under `id` ([`StoreError::CatalogNotFound`] when none is).
    pub async fn catalog_document(&self, id: &str) -> Result<Value> {
        let row = sqlx::query("SELECT document FROM catalogs WHERE id = $1")
            .bind(id.to_owned())
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::CatalogNotFound(id.to_owned()))?;
        let text: String = row.try_get(0)?;
        serde_json::from_str(&text).map_err(|err| StoreError::Corrupt {
            id: id.to_owned(),
            reason: format!("the stored catalog is not JSON: {err}"),
        })
    }
}

/// The content id of a catalog document's JSON text (`sha256:` and the hex digest of the text):
/// the id [`PlanStore::save_catalog`] stores it under.
pub fn catalog_id(text: &str) -> String {
    format!("sha256:{:x}", Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::catalog_id;

    #[test]
    fn the_same_text_has_the_same_id() {
        let one = catalog_id(r#"{"tools":[{"name":"a"}]}"#);
        assert_eq!(one, catalog_id(r#"{"tools":[{"name":"a"}]}"#));
        assert_ne!(one, catalog_id(r#"{"tools":[{"name":"a"}],"agents":[]}"#));
        assert!(one.starts_with("sha256:") && one.len() == 7 + 64, "{one}");
    }
}
