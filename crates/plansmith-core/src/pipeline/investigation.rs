//! Background investigation: read-only lookups before planning, whose findings go into the
//! prompt.

use std::time::{Duration, Instant};

use super::call::Call;
use crate::diagnostic::{Code, Diagnostic};
use crate::investigate::{self, Finding, Investigation};

/// Background investigation: runs the investigator within the request's budget and returns
/// the trimmed findings. Nothing here fails the plan: no investigator, an error or a late
/// answer is an `investigation_failed` warning and no findings.
pub(super) async fn investigate(call: &mut Call<'_>) -> Vec<Finding> {
    let request = call.request;
    let diagnostics = &mut call.diagnostics;
    let budget = Duration::from_millis(request.options.investigation_budget_ms);
    let started = Instant::now();
    let mut report = Investigation::default();
    let answer = match call.investigator {
        None => Err("no investigator is configured".to_owned()),
        Some(investigator) => {
            report.investigator = investigator.name();
            investigator.investigate(&request.query, budget).await
        }
    };
    let elapsed = started.elapsed();
    report.elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    let answer = match answer {
        Ok(_) if elapsed > budget => Err(format!(
            "the answer came after {} ms, past the {} ms budget",
            report.elapsed_ms,
            budget.as_millis()
        )),
        other => other,
    };
    match answer {
        Ok(found) => {
            let (kept, cut) = investigate::trim(found, request.options.max_findings_chars);
            report.findings = kept;
            report.trimmed_chars = cut;
        }
        Err(why) => {
            diagnostics.findings.push(Diagnostic::warning(
                Code::InvestigationFailed,
                "/investigation",
                format!("background investigation failed ({why}); planned without it"),
            ));
            report.error = Some(why);
        }
    }
    let findings = report.findings.clone();
    diagnostics.investigation = Some(report);
    findings
}
