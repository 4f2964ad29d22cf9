//! Dates in the form a tool asks for. Many tools say how they want a date only in words ("The
//! date, in the format mm-dd-yyyy."), and small models write the form they know best, often the
//! ISO date and time of the prompt's clock (`2023-06-01T09:00:00Z`). A top-level string
//! argument whose schema names a day pattern (`yyyy-mm-dd`, `mm-dd-yyyy`, `dd/mm/yyyy`, … in its
//! description, or `"format": "date"`) and whose value is a year-first date in another form is
//! written again in that pattern: the day is the same, only its spelling changes. A value that
//! is not a year-first date (`06-01-2023`, where day and month could be either) is left alone.

use chrono::{Datelike, NaiveDate};
use serde_json::{Map, Value};

/// The parts of a day pattern, in the order the pattern writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Year,
    Month,
    Day,
}

/// A day pattern: three parts and the separator between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pattern {
    parts: [Part; 3],
    separator: char,
}

impl Pattern {
    /// The pattern a property's schema names, if any: `"format": "date"` is `yyyy-mm-dd`; else
    /// the first day pattern its description writes (`yyyy-mm-dd`, `MM/DD/YYYY`, …), unless a
    /// time follows it (`yyyy-mm-dd hh:mm` is a timestamp, not a day).
    fn of(schema: &Value) -> Option<Pattern> {
        if schema.get("format").and_then(Value::as_str) == Some("date") {
            return Some(Pattern {
                parts: [Part::Year, Part::Month, Part::Day],
                separator: '-',
            });
        }
        let description = schema.get("description")?.as_str()?.to_lowercase();
        let words: Vec<&str> = description
            .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')' | '\'' | '"'))
            .collect();
        for (idx, word) in words.iter().enumerate() {
            let word = word.trim_end_matches(['.', ':']);
            let Some(pattern) = Pattern::parse(word) else {
                continue;
            };
            let then = words.get(idx + 1).copied().unwrap_or_default();
            if then.starts_with("hh") {
                return None;
            }
            return Some(pattern);
        }
        None
    }

    /// `yyyy-mm-dd`, `dd/mm/yyyy`, `mm.dd.yyyy`, …: each part once, one separator.
    fn parse(word: &str) -> Option<Pattern> {
        let separator = word.chars().find(|c| matches!(c, '-' | '/' | '.'))?;
        let pieces: Vec<&str> = word.split(separator).collect();
        let [a, b, c] = pieces.as_slice() else {
            return None;
        };
        let part = |piece: &str| match piece {
            "yyyy" => Some(Part::Year),
            "mm" => Some(Part::Month),
            "dd" => Some(Part::Day),
            _ => None,
        };
        let parts = [part(a)?, part(b)?, part(c)?];
        let distinct = parts[0] != parts[1] && parts[1] != parts[2] && parts[0] != parts[2];
        distinct.then_some(Pattern { parts, separator })
    }

    fn write(&self, date: NaiveDate) -> String {
        let piece = |part: Part| match part {
            Part::Year => format!("{:04}", date.year()),
            Part::Month => format!("{:02}", date.month()),
            Part::Day => format!("{:02}", date.day()),
        };
        let sep = self.separator.to_string();
        [
            piece(self.parts[0]),
            piece(self.parts[1]),
            piece(self.parts[2]),
        ]
        .join(&sep)
    }
}

/// The day of a year-first date (`2023-06-01`, `2023/6/1`, `2023-06-01T09:00:00Z`,
/// `2023-06-01 09:00`), if `text` is one.
fn year_first(text: &str) -> Option<NaiveDate> {
    let text = text.trim();
    let day_end = text.find(['T', ' ']).unwrap_or(text.len());
    let (day, rest) = text.split_at(day_end);
    // What follows the day must be a time, not more words.
    if !rest.is_empty()
        && !rest[1..]
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, ':' | '.' | 'Z' | '+' | '-'))
    {
        return None;
    }
    let separator = day.chars().find(|c| matches!(c, '-' | '/' | '.'))?;
    let pieces: Vec<&str> = day.split(separator).collect();
    let [year, month, day] = pieces.as_slice() else {
        return None;
    };
    if year.len() != 4 || month.is_empty() || month.len() > 2 || day.is_empty() || day.len() > 2 {
        return None;
    }
    NaiveDate::from_ymd_opt(year.parse().ok()?, month.parse().ok()?, day.parse().ok()?)
}

/// Rewrites each top-level string argument that is a year-first date in another form than the
/// day pattern its property names; returns the arguments changed, with the value each had.
pub(super) fn conform(arguments: &mut Map<String, Value>, schema: &Value) -> Vec<(String, String)> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut changed = Vec::new();
    for (key, value) in arguments.iter_mut() {
        let Some(text) = value.as_str() else {
            continue;
        };
        let Some(pattern) = properties.get(key).and_then(Pattern::of) else {
            continue;
        };
        let Some(date) = year_first(text) else {
            continue;
        };
        let written = pattern.write(date);
        if written != text {
            changed.push((key.clone(), text.to_owned()));
            *value = Value::String(written);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn conformed(description: &str, value: &str) -> String {
        let schema =
            json!({"properties": {"date": {"type": "string", "description": description}}});
        let mut arguments = json!({"date": value})
            .as_object()
            .cloned()
            .unwrap_or_default();
        conform(&mut arguments, &schema);
        arguments["date"].as_str().unwrap_or_default().to_owned()
    }

    #[test]
    fn a_date_is_written_in_the_pattern_its_description_names() {
        let mmdd = "The date for the UV index, in the format mm-dd-yyyy.";
        assert_eq!(conformed(mmdd, "2023-06-01T09:00:00Z"), "06-01-2023");
        assert_eq!(conformed(mmdd, "2023-6-1"), "06-01-2023");
        assert_eq!(conformed("Date (DD/MM/YYYY)", "2024/12/25"), "25/12/2024");
        assert_eq!(
            conformed("Start date in YYYY-MM-DD format", "2024-03-05 10:00"),
            "2024-03-05"
        );
        // Already in the pattern, ambiguous, not a date, a timestamp pattern: as written.
        assert_eq!(conformed(mmdd, "06-01-2023"), "06-01-2023");
        assert_eq!(
            conformed("In format dd-mm-yyyy", "01-06-2023"),
            "01-06-2023"
        );
        assert_eq!(conformed(mmdd, "tomorrow"), "tomorrow");
        assert_eq!(conformed(mmdd, "2023-02-30"), "2023-02-30");
        assert_eq!(conformed(mmdd, "2023-06-01 at noon"), "2023-06-01 at noon");
        assert_eq!(
            conformed("Time in yyyy-mm-dd hh:mm:ss", "2023-06-01T09:00:00Z"),
            "2023-06-01T09:00:00Z"
        );
        assert_eq!(
            conformed("The day of the trip.", "2023-06-01T09:00:00Z"),
            "2023-06-01T09:00:00Z"
        );
    }

    #[test]
    fn a_date_format_is_a_day() {
        let schema = json!({"properties": {"on": {"type": "string", "format": "date"}}});
        let mut arguments = json!({"on": "2023-06-01T09:00:00Z", "n": 3})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let changed = conform(&mut arguments, &schema);
        assert_eq!(arguments["on"], "2023-06-01");
        assert_eq!(
            changed,
            vec![("on".to_owned(), "2023-06-01T09:00:00Z".to_owned())]
        );
    }
}
