//! When a step runs: once, at an interval, daily, or on a cron expression.

use serde::{Deserialize, Serialize};

/// When a step runs. Recurring schedules need the user's explicit confirmation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Schedule {
    /// Run once, now.
    Once,
    /// Run every `minutes` minutes.
    Interval {
        /// Period in minutes, at least 1.
        minutes: u32,
    },
    /// Run every day at `time` (`HH:MM`, 24-hour, in the plan's time zone).
    Daily {
        /// Time of day, `HH:MM`.
        time: String,
    },
    /// Run on a cron expression (five fields).
    Cron {
        /// The expression, e.g. `0 9 * * 1-5`.
        expr: String,
    },
}

impl Schedule {
    /// True for schedules that run more than once.
    pub fn is_recurring(&self) -> bool {
        !matches!(self, Schedule::Once)
    }
}
