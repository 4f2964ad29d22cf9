//! Schedules: a daily time, a cron expression and an interval must be well-formed, and a
//! recurring schedule needs the user's confirmation unless the options allow it.

use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Schedule, Step};
use crate::request::PlanOptions;

pub(super) fn check_schedule(
    schedule: &Schedule,
    idx: usize,
    step: &Step,
    options: &PlanOptions,
    diags: &mut Vec<Diagnostic>,
) {
    let pointer = format!("/steps/{idx}/schedule");
    let problem = match schedule {
        Schedule::Once => None,
        Schedule::Interval { minutes } => {
            (*minutes == 0).then(|| "interval must be at least 1 minute".to_owned())
        }
        Schedule::Daily { time } => {
            (!valid_time_of_day(time)).then(|| format!("daily time `{time}` is not HH:MM"))
        }
        Schedule::Cron { expr } => {
            (!valid_cron(expr)).then(|| format!("`{expr}` is not a five-field cron expression"))
        }
    };
    if let Some(message) = problem {
        diags.push(
            Diagnostic::error(Code::InvalidSchedule, pointer.clone(), message)
                .with_step(step.id.clone()),
        );
        return;
    }
    if schedule.is_recurring() && !options.allow_recurring {
        diags.push(
            Diagnostic::warning(
                Code::ScheduleUnconfirmed,
                pointer,
                format!(
                    "step `{}` recurs; it needs the user's confirmation first",
                    step.id
                ),
            )
            .with_step(step.id.clone()),
        );
    }
}

fn valid_time_of_day(time: &str) -> bool {
    let Some((hours, minutes)) = time.trim().split_once(':') else {
        return false;
    };
    let hours_ok = hours.len() == 2 && hours.parse::<u8>().is_ok_and(|h| h < 24);
    let minutes_ok = minutes.len() == 2 && minutes.parse::<u8>().is_ok_and(|m| m < 60);
    hours_ok && minutes_ok
}

fn valid_cron(expr: &str) -> bool {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    fields.len() == 5
        && fields.iter().all(|field| {
            field
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "*/,-?".contains(c))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_crons() {
        for good in ["09:00", "23:59", "00:00"] {
            assert!(valid_time_of_day(good), "{good}");
        }
        for bad in ["9:00", "24:00", "12:60", "noon", ""] {
            assert!(!valid_time_of_day(bad), "{bad}");
        }
        assert!(valid_cron("0 9 * * 1-5"));
        assert!(!valid_cron("0 9 * *"));
        assert!(!valid_cron("0 9 * * $"));
    }
}
