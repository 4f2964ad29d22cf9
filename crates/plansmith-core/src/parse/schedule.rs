//! Reading a step's schedule: ours, ValueCell's `schedule_config`, or a cron string.

use serde_json::{Map, Value};

use super::fields::{describe, lookup};
use crate::plan::Schedule;

/// The schedule of a step: ours (`{"type": "interval", "minutes": 5}`), ValueCell's
/// (`schedule_config: {interval_minutes | daily_time}` with `pattern`), or a cron string. The
/// error carries the message and the offending value.
pub(super) fn read_schedule(
    obj: &Map<String, Value>,
) -> Result<Option<Schedule>, (String, Option<Value>)> {
    let recurring = lookup(obj, "pattern")
        .and_then(Value::as_str)
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("recurring"));
    let given = ["schedule", "schedule_config"]
        .iter()
        .find_map(|key| lookup(obj, key).filter(|v| !v.is_null()));
    let schedule = match given {
        None => None,
        Some(value) => schedule_from(value).map_err(|message| (message, Some(value.clone())))?,
    };
    if recurring && schedule.as_ref().is_none_or(|s| !s.is_recurring()) {
        return Err((
            "a recurring task needs exactly one of interval_minutes or daily_time".to_owned(),
            given.cloned(),
        ));
    }
    Ok(schedule)
}

fn schedule_from(value: &Value) -> Result<Option<Schedule>, String> {
    match value {
        Value::String(text) => {
            let text = text.trim();
            if text.is_empty() || text.eq_ignore_ascii_case("once") {
                Ok(Some(Schedule::Once))
            } else if text.split_whitespace().count() == 5 {
                Ok(Some(Schedule::Cron {
                    expr: text.to_owned(),
                }))
            } else {
                Err(format!(
                    "unreadable schedule `{text}`; give a five-field cron expression"
                ))
            }
        }
        Value::Object(map) if lookup(map, "type").is_some() => {
            serde_json::from_value::<Schedule>(value.clone())
                .map(Some)
                .map_err(|err| {
                    format!(
                        "malformed schedule: {err}; expected once, interval {{minutes}}, daily \
                     {{time}} or cron {{expr}}"
                    )
                })
        }
        Value::Object(map) => {
            let interval = lookup(map, "interval_minutes").or_else(|| lookup(map, "minutes"));
            let interval = interval.filter(|v| !v.is_null());
            let daily = lookup(map, "daily_time")
                .or_else(|| lookup(map, "time"))
                .filter(|v| !v.is_null());
            let cron = lookup(map, "cron")
                .or_else(|| lookup(map, "expr"))
                .filter(|v| !v.is_null());
            match (interval, daily, cron) {
                (Some(_), Some(_), _) => {
                    Err("exactly one of interval_minutes or daily_time may be set".to_owned())
                }
                (Some(minutes), None, None) => match as_minutes(minutes) {
                    Some(minutes) => Ok(Some(Schedule::Interval { minutes })),
                    None => Err("interval_minutes must be a whole number of minutes".to_owned()),
                },
                (None, Some(time), None) => match time.as_str() {
                    Some(time) => Ok(Some(Schedule::Daily {
                        time: time.trim().to_owned(),
                    })),
                    None => Err("daily_time must be a string `HH:MM`".to_owned()),
                },
                (None, None, Some(expr)) => match expr.as_str() {
                    Some(expr) => Ok(Some(Schedule::Cron {
                        expr: expr.trim().to_owned(),
                    })),
                    None => Err("cron must be a string".to_owned()),
                },
                (None, None, None) => Ok(None),
                _ => Err("give only one of interval_minutes, daily_time or cron".to_owned()),
            }
        }
        other => Err(format!(
            "the schedule is {}, expected an object",
            describe(other)
        )),
    }
}

fn as_minutes(value: &Value) -> Option<u32> {
    match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= f64::from(u32::MAX))
                .map(|f| f as u64)
        }),
        Value::String(text) => text.trim().parse::<u64>().ok(),
        _ => None,
    }
    .and_then(|n| u32::try_from(n).ok())
}
