//! Helpers shared by the store's SQL: timestamps as stored, JSON in and out of text columns,
//! versions as `BIGINT`.

use chrono::{DateTime, SecondsFormat, Utc};
use plansmith_core::Plan;

use crate::error::{Result, StoreError};

/// Fixed-width RFC 3339 (microseconds, `Z`), so text order is time order.
pub(crate) fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub(crate) fn parse_time(id: &str, text: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|err| StoreError::Corrupt {
            id: id.to_owned(),
            reason: format!("bad timestamp `{text}`: {err}"),
        })
}

pub(super) fn to_json(plan: &Plan) -> Result<String> {
    serde_json::to_string(plan).map_err(bad_json)
}

pub(crate) fn from_json<T: serde::de::DeserializeOwned>(id: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|err| StoreError::Corrupt {
        id: id.to_owned(),
        reason: err.to_string(),
    })
}

pub(super) fn bad_json(err: serde_json::Error) -> StoreError {
    StoreError::BadEdit(format!("cannot encode the plan: {err}"))
}

pub(crate) fn to_u32(id: &str, value: i64) -> Result<u32> {
    u32::try_from(value).map_err(|_| StoreError::Corrupt {
        id: id.to_owned(),
        reason: format!("version {value} out of range"),
    })
}
