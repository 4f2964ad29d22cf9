//! `plansmith eval`: run the retriever over an evaluation set and write its rankings.
//!
//! The official figures come from `shared/eval/score.py`, which reads the file written here;
//! the summary computed in Rust is a quick look for the command line (same definitions:
//! recall@k averages the share of a case's relevant tools found in the top k, MRR the
//! reciprocal rank of the first relevant tool).

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, bail};
use plansmith_core::catalog::Catalog;
use serde::Deserialize;
use serde_json::json;

/// The cut-offs of [`RetrievalSummary::recall`].
pub const RECALL_AT: [usize; 4] = [1, 3, 6, 10];

/// Quick figures of one retrieval run.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalSummary {
    /// Tools in the catalog.
    pub n_tools: usize,
    /// Catalog entries that were skipped because they are invalid.
    pub n_catalog_problems: usize,
    /// Cases ranked.
    pub n_cases: usize,
    /// Mean recall at each cut-off of [`RECALL_AT`], in that order.
    pub recall: [f64; 4],
    /// Mean reciprocal rank of the first relevant tool (0 when none is ranked).
    pub mrr: f64,
}

/// One line of a retrieval cases file.
#[derive(Debug, Deserialize)]
struct Case {
    id: String,
    query: String,
    #[serde(default)]
    relevant: Vec<String>,
}

/// Ranks every case of `cases_path` (JSONL `{"id", "query", "relevant": [tool names]}`) against
/// the catalog at `catalog_path` with the retriever `kind`, keeping the `top` best tools.
///
/// Writes one `{"id", "ranked": [tool names, best first]}` line per case to `out_path` and
/// returns the summary. The catalog may be in any form `Catalog::from_json_lenient` accepts;
/// invalid entries are skipped and counted in [`RetrievalSummary::n_catalog_problems`].
/// Blank lines in the cases file are skipped; a malformed line is an error naming its number.
pub fn retrieval(
    catalog_path: &Path,
    cases_path: &Path,
    out_path: &Path,
    top: usize,
    kind: crate::retrieval::RetrieverKind,
) -> anyhow::Result<RetrievalSummary> {
    let (catalog, problems) = read_catalog(catalog_path)?;

    let text = fs::read_to_string(cases_path)
        .with_context(|| format!("failed to read cases {}", cases_path.display()))?;
    let mut cases = Vec::new();
    for (line_idx, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let case: Case = serde_json::from_str(line).with_context(|| {
            format!(
                "{}:{}: not a retrieval case",
                cases_path.display(),
                line_idx + 1
            )
        })?;
        cases.push(case);
    }
    if cases.is_empty() {
        bail!("{}: no retrieval cases", cases_path.display());
    }

    let index = crate::retrieval::build(&catalog, kind);
    let file = fs::File::create(out_path)
        .with_context(|| format!("failed to create {}", out_path.display()))?;
    let mut out = BufWriter::new(file);
    let mut recall = [0f64; 4];
    let mut mrr = 0f64;
    for case in &cases {
        let ranked: Vec<&str> = index
            .rank(&case.query, top)
            .iter()
            .filter_map(|scored| catalog.tool_at(scored.index))
            .map(|tool| tool.tool.name.as_str())
            .collect();
        serde_json::to_writer(&mut out, &json!({"id": case.id, "ranked": ranked}))
            .with_context(|| format!("failed to write {}", out_path.display()))?;
        out.write_all(b"\n")
            .with_context(|| format!("failed to write {}", out_path.display()))?;

        if !case.relevant.is_empty() {
            let is_relevant = |name: &str| case.relevant.iter().any(|r| r == name);
            for (sum, k) in recall.iter_mut().zip(RECALL_AT) {
                let hits = ranked
                    .iter()
                    .take(k)
                    .filter(|name| is_relevant(name))
                    .count();
                *sum += hits as f64 / case.relevant.len() as f64;
            }
            if let Some(rank) = ranked.iter().position(|name| is_relevant(name)) {
                mrr += 1.0 / (rank + 1) as f64;
            }
        }
    }
    out.flush()
        .with_context(|| format!("failed to write {}", out_path.display()))?;

    let n_cases = cases.len();
    Ok(RetrievalSummary {
        n_tools: catalog.len(),
        n_catalog_problems: problems.len(),
        n_cases,
        recall: recall.map(|sum| sum / n_cases as f64),
        mrr: mrr / n_cases as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_cases_and_reports_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = dir.path().join("catalog.json");
        let cases = dir.path().join("cases.jsonl");
        let out = dir.path().join("preds.jsonl");
        fs::write(
            &catalog,
            r#"[{"name": "get_weather", "description": "Weather forecast for a city"},
                {"name": "sendEmail", "description": "Send an email"},
                {"name": "broken", "input_schema": {"type": "string"}}]"#,
        )
        .unwrap();
        fs::write(
            &cases,
            "{\"id\": \"a\", \"query\": \"weather in Oslo\", \"relevant\": [\"get_weather\"]}\n\n\
             {\"id\": \"b\", \"query\": \"email Bob\", \"relevant\": [\"get_weather\"]}\n",
        )
        .unwrap();
        let summary = retrieval(
            &catalog,
            &cases,
            &out,
            5,
            crate::retrieval::RetrieverKind::Bm25,
        )
        .unwrap();
        assert_eq!(
            (summary.n_tools, summary.n_catalog_problems, summary.n_cases),
            (2, 1, 2)
        );
        assert_eq!(summary.recall, [0.5, 0.5, 0.5, 0.5]);
        assert_eq!(summary.mrr, 0.5);
        let written = fs::read_to_string(&out).unwrap();
        assert_eq!(
            written,
            "{\"id\":\"a\",\"ranked\":[\"get_weather\"]}\n{\"id\":\"b\",\"ranked\":[\"sendEmail\"]}\n"
        );

        fs::write(&cases, "{\"id\": \"a\", \"query\": \"x\"}\n\nnot json\n").unwrap();
        let err = retrieval(
            &catalog,
            &cases,
            &out,
            5,
            crate::retrieval::RetrieverKind::Bm25,
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("cases.jsonl:3:"), "{err:#}");
    }

    #[test]
    fn plan_cases_are_planned_at_a_fixed_time_so_runs_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let cases = dir.path().join("cases.jsonl");
        let out = dir.path().join("preds.jsonl");
        fs::write(
            &cases,
            r#"{"id": "a", "category": "simple", "query": "weather in Oslo", "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]}"#,
        )
        .unwrap();
        let reply = r#"{"steps": [{"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Oslo"}}]}"#;
        let model = std::sync::Arc::new(plansmith_core::ScriptedModel::new([reply; 3]));
        let default_now: chrono::DateTime<chrono::Utc> = EVAL_NOW.parse().unwrap();
        let mut run = PlanRun {
            limit_per_category: None,
            categories: Vec::new(),
            resume: false,
            now: default_now,
            format: plansmith_core::PlanFormat::Json,
            templates: None,
            top_k: None,
            catalog: None,
            check_fit: true,
        };
        for _ in 0..2 {
            plan(&cases, &out, model.clone(), &run).unwrap();
        }
        run.now = "2027-03-01T18:30:00Z".parse().unwrap();
        plan(&cases, &out, model.clone(), &run).unwrap();
        // The user message of every call.
        let prompts: Vec<String> = model
            .requests()
            .iter()
            .filter_map(|request| request.messages.last().map(|m| m.content.clone()))
            .collect();
        assert_eq!(prompts.len(), 3, "{prompts:?}");
        assert_eq!(prompts[0], prompts[1]);
        assert!(
            prompts[0].contains("Current time: 2026-01-05T09:00:00Z (Monday)"),
            "{}",
            prompts[0]
        );
        assert!(
            prompts[2].contains("Current time: 2027-03-01T18:30:00Z (Monday)"),
            "{}",
            prompts[2]
        );
        // Each line names the tools the model was shown, so a baseline can be shown the same.
        let line: serde_json::Value =
            serde_json::from_str(fs::read_to_string(&out).unwrap().lines().next().unwrap())
                .unwrap();
        assert_eq!(line["plan"][0]["name"], "get_weather");
        assert_eq!(line["tools"], serde_json::json!(["get_weather"]));
        assert_eq!(line["tools_shown"], 1);
    }
}

/// One line of a plan-evaluation cases file (`bfcl_cases.jsonl`).
#[derive(Debug, Deserialize)]
struct PlanCase {
    id: String,
    #[serde(default)]
    category: String,
    query: String,
    #[serde(default)]
    messages: Vec<plansmith_core::Message>,
    #[serde(default)]
    tools: serde_json::Value,
}

/// What one case's prediction line records beside its plan.
#[derive(Debug, Default)]
struct CaseFlags {
    status: &'static str,
    parsed_first: bool,
    valid_first: bool,
    attempts: usize,
    /// The tools the model was shown, by name (the retriever's pick when the case has more
    /// than `--top-k`): a baseline can be shown the same ones.
    tools_shown: Vec<String>,
    /// The plan's warnings, as `code: message`: what the engine changed or refused (a
    /// follow-up added or dropped, a value grounded, a fit check), for a per-case diagnosis.
    warnings: Vec<String>,
}

/// Figures of one plan-evaluation run (the official scores come from `score.py plan`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanSummary {
    /// Cases run.
    pub n_cases: usize,
    /// Cases whose first model reply parsed as a plan.
    pub n_parsed_first: usize,
    /// Cases whose first model reply was a valid plan as it stood: parsed without JSON repair,
    /// and no error-level finding (schema, catalog or reference) on it.
    pub n_valid_first: usize,
    /// Cases that ended ready.
    pub n_ready: usize,
    /// Cases that ended in a planning error.
    pub n_errors: usize,
    /// Total seconds.
    pub seconds: f64,
    /// The whole output file after the run (with `--resume`, earlier runs' lines too).
    pub file: FileTotals,
}

/// Counts over every prediction line of an output file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FileTotals {
    /// Prediction lines.
    pub n_lines: usize,
    /// Lines that carry the per-case flags (written by this version or later).
    pub n_flagged: usize,
    /// Flagged lines whose first reply parsed.
    pub n_parsed_first: usize,
    /// Flagged lines whose first reply was valid as written.
    pub n_valid_first: usize,
    /// Flagged lines that ended ready.
    pub n_ready: usize,
}

impl FileTotals {
    /// Reads the totals of the prediction file at `path`.
    pub fn read(path: &Path) -> anyhow::Result<FileTotals> {
        let text = fs::read_to_string(path)
            .with_context(|| format!("failed to read {}", path.display()))?;
        let mut totals = FileTotals::default();
        for line in text.lines() {
            let Ok(row) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            totals.n_lines += 1;
            let flag = |key: &str| row.get(key).and_then(serde_json::Value::as_bool);
            let (Some(parsed), Some(valid)) = (flag("parsed_first"), flag("valid_first")) else {
                continue;
            };
            totals.n_flagged += 1;
            totals.n_parsed_first += usize::from(parsed);
            totals.n_valid_first += usize::from(valid);
            totals.n_ready +=
                usize::from(row.get("status").and_then(|s| s.as_str()) == Some("ready"));
        }
        Ok(totals)
    }
}

/// The time `eval plan` plans every case at unless told otherwise: fixed, so that the prompts,
/// and with them a local model's replies, are the same from run to run.
pub const EVAL_NOW: &str = "2026-01-05T09:00:00Z";

/// Which cases [`plan`] runs, and how.
#[derive(Debug, Clone)]
pub struct PlanRun {
    /// At most this many cases per category.
    pub limit_per_category: Option<usize>,
    /// Only these categories (all when empty).
    pub categories: Vec<String>,
    /// Keep the predictions already written and run only the missing cases.
    pub resume: bool,
    /// The time every case is planned at.
    pub now: chrono::DateTime<chrono::Utc>,
    /// How the model writes its plans.
    pub format: plansmith_core::PlanFormat,
    /// Prompt templates overriding the built-in ones (a directory), to evaluate a change to them.
    pub templates: Option<std::path::PathBuf>,
    /// At most this many of a case's tools in the prompt (all of them when `None`).
    pub top_k: Option<usize>,
    /// One catalog every case is planned against instead of its own tools.
    pub catalog: Option<std::path::PathBuf>,
    /// The planner's fit check ([`plansmith_core::PlanOptions::check_fit`]).
    pub check_fit: bool,
}

/// A catalog file read leniently (a tool that does not load is a problem, not an error), with
/// its problems.
fn read_catalog(path: &Path) -> anyhow::Result<(Catalog, Vec<plansmith_core::CatalogProblem>)> {
    let text = crate::input::read_text_as(path, "the catalog ")?;
    let document: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("catalog {} is not valid JSON", path.display()))?;
    Catalog::from_json_lenient(&document)
        .with_context(|| format!("failed to load catalog {}", path.display()))
}

/// Runs every case (its messages and tools) through the pipeline with `model` at time `now` and writes
/// `{"id", "plan": [steps]}` lines for `score.py plan`: tool steps as
/// `{"type": "tool", "name", "arguments"}`, replies as `{"type": "reply", "text"}`. Each line also
/// records `status` (ready, needs_input, fallback, error), `parsed_first`, `valid_first`,
/// `attempts`, `tools_shown` (how many) and `tools` (their names), `warnings` and `seconds`,
/// which `score.py` ignores.
pub fn plan(
    cases_path: &Path,
    out_path: &Path,
    model: std::sync::Arc<dyn plansmith_core::LanguageModel>,
    run: &PlanRun,
) -> anyhow::Result<PlanSummary> {
    use plansmith_core::{Action, PlanRequest, Planner};
    let PlanRun {
        limit_per_category,
        categories,
        resume,
        now,
        format,
        templates,
        top_k,
        catalog: shared_catalog,
        check_fit,
    } = run;
    let retriever_kind = crate::retrieval::kind(None)?;
    // A planner over a catalog, with its index and the overriding templates.
    let planner_for = |catalog: Catalog| -> anyhow::Result<Planner> {
        let retriever = crate::retrieval::build(&catalog, retriever_kind);
        let planner = Planner::with_retrieval(catalog, retriever, model.clone());
        Ok(match templates {
            Some(dir) => planner.with_prompts(
                plansmith_core::Prompts::with_overrides(dir)
                    .context("cannot load the templates")?,
            ),
            None => planner,
        })
    };
    // Read once here, so a bad directory fails before the first case.
    if let Some(dir) = templates {
        plansmith_core::Prompts::with_overrides(dir).context("cannot load the templates")?;
    }
    // A shared catalog is read and indexed once; every case is planned against it.
    let shared = match shared_catalog {
        Some(path) => Some(planner_for(read_catalog(path)?.0)?),
        None => None,
    };
    let (limit_per_category, resume, now) = (*limit_per_category, *resume, *now);

    // With `resume`, the cases already in `out_path` are kept and not run again (an evaluation
    // of hundreds of cases takes hours on a CPU; an interrupted one goes on where it stopped).
    let done: std::collections::HashSet<String> = if resume && out_path.exists() {
        fs::read_to_string(out_path)
            .with_context(|| format!("failed to read {}", out_path.display()))?
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter_map(|v| v.get("id").and_then(|id| id.as_str()).map(str::to_owned))
            .collect()
    } else {
        std::collections::HashSet::new()
    };

    let text = fs::read_to_string(cases_path)
        .with_context(|| format!("failed to read cases {}", cases_path.display()))?;
    let mut cases: Vec<PlanCase> = Vec::new();
    let mut per_category: std::collections::HashMap<String, usize> =
        std::collections::HashMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let case: PlanCase = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not a plan case", cases_path.display(), n + 1))?;
        if !categories.is_empty() && !categories.contains(&case.category) {
            continue;
        }
        let seen = per_category.entry(case.category.clone()).or_default();
        if limit_per_category.is_some_and(|limit| *seen >= limit) {
            continue;
        }
        *seen += 1;
        if !done.contains(&case.id) {
            cases.push(case);
        }
    }
    let file = if resume {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out_path)
    } else {
        fs::File::create(out_path)
    }
    .with_context(|| format!("cannot create {}", out_path.display()))?;
    let mut out = BufWriter::new(file);
    let bar = indicatif::ProgressBar::new(cases.len() as u64);
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:30} {pos}/{len} {elapsed_precise} eta {eta} {msg}",
    ) {
        bar.set_style(style);
    }
    let runtime = crate::current_thread_runtime()?;
    let started = std::time::Instant::now();
    let mut summary = PlanSummary {
        n_cases: cases.len(),
        ..PlanSummary::default()
    };
    for case in cases {
        bar.set_message(case.id.clone());
        let own;
        let (planner, n_tools) = match &shared {
            Some(planner) => (
                planner,
                top_k.unwrap_or(plansmith_core::PlanOptions::default().top_k),
            ),
            None => {
                let (catalog, _) = Catalog::from_json_lenient(&case.tools).unwrap_or_default();
                let n_tools = catalog.len();
                own = planner_for(catalog)?;
                (&own, n_tools)
            }
        };
        let mut request = PlanRequest::new(case.query.clone());
        if let Some((last, earlier)) = case.messages.split_last() {
            request.query = last.content.clone();
            request.history = earlier.to_vec();
        }
        request.options.top_k = top_k.unwrap_or(n_tools).clamp(1, n_tools.max(1));
        request.options.max_steps = 6;
        request.options.max_repairs = 1;
        request.options.max_string_length = 300;
        request.options.max_tokens = 600;
        request.options.format = *format;
        request.options.check_fit = *check_fit;
        request.now = Some(now);
        let case_started = std::time::Instant::now();
        // Per case, beside the plan: how it ended and whether the first reply was usable as
        // written, so that a run resumed across processes keeps every figure.
        let mut flags = CaseFlags::default();
        let steps: Vec<serde_json::Value> = match runtime.block_on(planner.plan(&request)) {
            Ok(outcome) => {
                let first = outcome.diagnostics.attempts.first();
                flags.parsed_first = first.is_some_and(|a| a.shape.is_some());
                flags.valid_first = first.is_some_and(|a| {
                    a.shape.is_some()
                        && !a.json_repaired
                        && !a
                            .diagnostics
                            .iter()
                            .any(|d| d.severity == plansmith_core::Severity::Error)
                });
                flags.attempts = outcome.diagnostics.attempts.len();
                flags.tools_shown = outcome.diagnostics.selected_tools.clone();
                flags.status = outcome.status.name();
                flags.warnings = outcome
                    .diagnostics
                    .findings
                    .iter()
                    .filter(|d| d.severity != plansmith_core::Severity::Error)
                    .map(|d| format!("{}: {}", d.code.as_str(), d.message))
                    .collect();
                outcome
                    .plan
                    .steps
                    .iter()
                    .filter_map(|step| match &step.action {
                        Action::Tool { name, arguments } => Some(json!({
                            "id": step.id,
                            "type": "tool",
                            "name": name,
                            "arguments": arguments,
                            "depends_on": step.depends_on,
                        })),
                        Action::Reply { text } => {
                            Some(json!({"id": step.id, "type": "reply", "text": text}))
                        }
                        _ => None,
                    })
                    .collect()
            }
            Err(err) => {
                flags.status = "error";
                tracing::warn!("{}: {err}", case.id);
                Vec::new()
            }
        };
        summary.n_parsed_first += usize::from(flags.parsed_first);
        summary.n_valid_first += usize::from(flags.valid_first);
        summary.n_ready += usize::from(flags.status == "ready");
        summary.n_errors += usize::from(flags.status == "error");
        let line = json!({
            "id": case.id,
            "plan": steps,
            "status": flags.status,
            "parsed_first": flags.parsed_first,
            "valid_first": flags.valid_first,
            "attempts": flags.attempts,
            "tools_shown": flags.tools_shown.len(),
            "tools": flags.tools_shown,
            "warnings": flags.warnings,
            "seconds": (case_started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        });
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .with_context(|| format!("cannot write {}", out_path.display()))?;
        bar.inc(1);
    }
    out.flush()
        .with_context(|| format!("cannot write {}", out_path.display()))?;
    bar.finish_and_clear();
    summary.seconds = started.elapsed().as_secs_f64();
    summary.file = FileTotals::read(out_path)?;
    Ok(summary)
}
