//! `plansmith plan`: load the catalog, the model and the request, plan, print.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::Args;
use plansmith_core::{
    FallbackPolicy, Outcome, OutcomeStatus, PlanError, PlanOptions, PlanRequest, Prompts, Severity,
    Shape,
};

use crate::plan_progress::{PlanProgress, ProgressMode};
use crate::{CliError, Exit};

/// Arguments of `plansmith plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The request to plan.
    query: String,
    #[command(flatten)]
    catalog: crate::catalog::CatalogArgs,
    /// System prompt / persona / constraints: text, or @FILE.
    #[arg(long)]
    profile: Option<String>,
    /// Background context: text, or @FILE (repeatable).
    #[arg(long)]
    context: Vec<String>,
    /// Locale of user-facing texts.
    #[arg(long, default_value = "en-US")]
    locale: String,
    /// Address the request to this agent (a passthrough agent gets it without planning).
    #[arg(long)]
    target_agent: Option<String>,
    /// Most steps in the plan.
    #[arg(long, default_value_t = PlanOptions::default().max_steps, value_parser = crate::at_least_one)]
    max_steps: usize,
    /// Tools shown to the model (validation always uses the whole catalog).
    #[arg(long, default_value_t = PlanOptions::default().top_k, value_parser = crate::at_least_one)]
    top_k: usize,
    /// Tools always shown to the model (repeatable).
    #[arg(long = "pin")]
    pinned: Vec<String>,
    /// Repair rounds after the first generation.
    #[arg(long, default_value_t = PlanOptions::default().max_repairs)]
    max_repairs: u32,
    /// Plan shape: tool_steps, research, agent_tasks.
    #[arg(long, default_value = PlanOptions::default().shape.as_str())]
    shape: String,
    /// When no valid plan can be had: guidance, reply, default-plan, previous-or-fail, fail.
    #[arg(long, default_value = PlanOptions::default().fallback.name())]
    fallback: String,
    /// The user confirmed recurring schedules.
    #[arg(long)]
    allow_recurring: bool,
    /// Ask the model first whether to answer directly, hand off to an agent, or plan.
    #[arg(long)]
    triage: bool,
    /// Return the model's calls even when no called tool seems to fit the request, or every call
    /// guesses half of its required values (by default the planner checks, and asks instead).
    #[arg(long)]
    no_fit_check: bool,
    /// Do not wait for answers: a question with a recommended answer (a risk to confirm, a
    /// choice of approach) is answered with it and recorded in the plan's
    /// `metadata.assumptions`; questions without one are still asked.
    #[arg(long)]
    no_questions: bool,
    /// Background investigation before planning: a shell command that gets the query on stdin
    /// (and in `PLANSMITH_QUERY`) and prints findings (JSON `[{"source","text"}]` or plain text).
    /// If it fails or runs out of time, planning goes on without it (a warning says so).
    #[arg(long, value_name = "CMD")]
    investigate: Option<String>,
    /// Time the investigation may take, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = PlanOptions::default().investigation_budget_ms)]
    investigate_timeout: u64,
    /// Characters of findings put into the prompt.
    #[arg(long, value_name = "N", default_value_t = PlanOptions::default().max_findings_chars)]
    max_findings_chars: usize,
    /// Conversation id: the plan is recorded in it, and the conversation's earlier plans in the
    /// store (saved with `--save`) are shown to the model as memory.
    #[arg(long)]
    conversation: Option<String>,
    /// Most earlier turns of the conversation shown in full (older ones are summarised).
    #[arg(long, default_value_t = PlanOptions::default().memory_turns)]
    memory_turns: usize,
    /// Token budget for the conversation memory (estimated as characters / 4).
    #[arg(long, default_value_t = PlanOptions::default().memory_tokens)]
    memory_tokens: usize,
    /// Directory of prompts overriding the built-in ones, by file name (`--templates` is an
    /// older name of this flag).
    #[arg(long = "prompts", alias = "templates", value_name = "DIR")]
    prompts: Option<PathBuf>,
    #[command(flatten)]
    model: crate::args::ModelArgs,
    /// Print the plan document as JSON.
    #[arg(long)]
    json: bool,
    /// Print the whole outcome (status, plan, diagnostics) as JSON.
    #[arg(long, conflicts_with = "json")]
    outcome_json: bool,
    /// Print the plan as JSON in a replaced system's shape: plansmith, sage, deerflow,
    /// valuecell, openmanus, nl2sql (what the shape cannot hold is listed on stderr).
    #[arg(long, conflicts_with_all = ["json", "outcome_json"])]
    format: Option<plansmith_core::export::SeedFormat>,
    /// Print every diagnostic, not just a summary.
    #[arg(long, short)]
    verbose: bool,
    /// Show the planning on stderr as it happens (the model writing, each step as soon as it
    /// is written, rejected attempts): `auto` on a terminal, `always` also as plain lines when
    /// stderr is not a terminal, `never`.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    progress: ProgressMode,
    /// `--save`, `--review` and the store (see `plansmith plans`).
    #[command(flatten)]
    save: crate::plan_review::SaveArgs,
}

/// Runs `plansmith plan`.
pub fn run(args: PlanArgs) -> Result<Exit, CliError> {
    // Every input is checked before the model is loaded and asked: a bad templates directory
    // or store fails at once, the same way every time, and not after the plan was made.
    let catalog = args.catalog.files()?;
    let templates = args
        .prompts
        .as_deref()
        .map(Prompts::with_overrides)
        .transpose()
        .map_err(CliError::input)?;
    crate::plan_review::check_store(&args.save)?;
    let catalog = args.catalog.with_mcp(catalog)?;
    let mut planner = crate::retrieval::planner_loading(catalog, args.top_k, || {
        crate::model::load(args.model.model.as_deref())
    })?;
    let model_name = planner.model().name();
    if let Some(templates) = templates {
        planner = planner.with_prompts(templates);
    }
    let runtime = crate::plans_cmd::runtime()?;
    // `--investigate CMD` wins over the config file's `[investigate]`.
    planner = match &args.investigate {
        Some(command) => planner.with_investigator(std::sync::Arc::new(
            crate::investigate_cmd::CommandInvestigator::new(command.clone()),
        )),
        None => runtime.block_on(crate::investigate_cmd::with_configured(planner))?,
    };
    let mut request = build_request(&args)?;
    if let Some(conversation) = &args.conversation {
        request.turns =
            crate::plan_review::conversation_turns(args.save.store.store.as_deref(), conversation)?;
    }
    let planned = match PlanProgress::new(args.progress, model_name) {
        Some(mut progress) => {
            let planned = runtime
                .block_on(planner.plan_with_events(&request, &mut |event| progress.show(event)));
            progress.finish();
            planned
        }
        None => runtime.block_on(planner.plan(&request)),
    };
    match planned {
        Ok(outcome) => {
            let code = print_outcome(&outcome, &args)?;
            crate::plan_review::after_plan(&args.save, planner, &request, outcome, code)
        }
        Err(err) => {
            if let Some(diagnostics) = err
                .diagnostics()
                .filter(|_| args.verbose || args.outcome_json)
            {
                for attempt in &diagnostics.attempts {
                    eprintln!("attempt {}: {}", attempt.index, attempt.raw);
                    for diag in &attempt.diagnostics {
                        eprintln!("  {diag}");
                    }
                }
            }
            Err(match err {
                PlanError::Model { .. } => CliError::model(err),
                PlanError::InvalidRequest(_) => CliError::input(err),
                _ => CliError::failed(err),
            })
        }
    }
}

/// `text` or `@FILE`.
fn text_or_file(value: &str) -> Result<String, CliError> {
    match value.strip_prefix('@') {
        Some(path) => crate::input::read_text(Path::new(path)).map_err(CliError::input),
        None => Ok(value.to_owned()),
    }
}

fn build_request(args: &PlanArgs) -> Result<PlanRequest, CliError> {
    let shape: Shape = args
        .shape
        .parse()
        .map_err(|e: String| CliError::input(anyhow!(e)))?;
    let fallback = match args.fallback.replace('_', "-").as_str() {
        "guidance" => FallbackPolicy::Guidance,
        "reply" => FallbackPolicy::Reply { text: None },
        "default-plan" => FallbackPolicy::DefaultPlan,
        "previous-or-fail" => FallbackPolicy::PreviousOrFail,
        "fail" => FallbackPolicy::Fail,
        other => {
            return Err(CliError::input(anyhow!(
                "unknown fallback `{other}`; expected guidance, reply, default-plan, previous-or-fail or fail"
            )));
        }
    };
    let mut request = PlanRequest::new(args.query.clone());
    request.profile = args.profile.as_deref().map(text_or_file).transpose()?;
    request.context = args
        .context
        .iter()
        .map(|c| text_or_file(c))
        .collect::<Result<_, _>>()?;
    request.locale = Some(args.locale.clone());
    request.target_agent = args.target_agent.clone();
    request.options = PlanOptions::default();
    request.options.max_steps = args.max_steps;
    request.options.top_k = args.top_k;
    request.options.pinned_tools = args.pinned.clone();
    request.options.max_repairs = args.max_repairs;
    request.options.shape = shape;
    request.options.fallback = fallback;
    request.options.allow_recurring = args.allow_recurring;
    request.options.triage = args.triage;
    request.options.check_fit = !args.no_fit_check;
    request.options.no_questions = args.no_questions;
    request.options.investigate = args.investigate.is_some();
    request.options.investigation_budget_ms = args.investigate_timeout;
    request.options.max_findings_chars = args.max_findings_chars;
    request.options.memory_turns = args.memory_turns;
    request.options.memory_tokens = args.memory_tokens;
    request.conversation_id = args.conversation.clone();
    Ok(request)
}

fn print_outcome(outcome: &Outcome, args: &PlanArgs) -> Result<Exit, CliError> {
    let code = match &outcome.status {
        OutcomeStatus::Ready => Exit::Ok,
        OutcomeStatus::NeedsInput => Exit::NeedsInput,
        OutcomeStatus::Fallback { .. } => Exit::Fallback,
        OutcomeStatus::Incomplete { .. } => Exit::Incomplete,
    };
    if args.outcome_json {
        let text = serde_json::to_string_pretty(outcome).map_err(CliError::failed)?;
        println!("{text}");
        return Ok(code);
    }
    if let Some(format) = args.format {
        crate::validate_cmd::print_rendered(&outcome.plan, format)?;
        eprintln!("{}", summary_line(outcome));
        return Ok(code);
    }
    if args.json {
        let text = serde_json::to_string_pretty(&outcome.plan).map_err(CliError::failed)?;
        println!("{text}");
        eprintln!("{}", summary_line(outcome));
        return Ok(code);
    }
    print!("{}", render_outcome(outcome, args.verbose));
    Ok(code)
}

fn summary_line(outcome: &Outcome) -> String {
    let diags = &outcome.diagnostics;
    let count = |severity| {
        diags
            .findings
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    };
    format!(
        "{} · {} step(s) · {} attempt(s), {} repair(s) · strategy {} · {} warning(s), {} note(s) · {} ms",
        match &outcome.status {
            OutcomeStatus::Ready => "ready",
            OutcomeStatus::NeedsInput => "needs input",
            OutcomeStatus::Fallback { .. } => "fallback",
            OutcomeStatus::Incomplete { .. } => "incomplete",
        },
        outcome.plan.steps.len(),
        diags.attempts.len(),
        diags.repairs,
        diags.strategy.map(|s| s.as_str()).unwrap_or("none"),
        count(Severity::Warning),
        count(Severity::Info),
        diags.timings.total_us / 1000,
    )
}

/// The human-readable rendering: title, numbered steps with arguments, questions, diagnostics.
fn render_outcome(outcome: &Outcome, verbose: bool) -> String {
    let plan = &outcome.plan;
    let mut out = String::new();
    out.push_str(&format!(
        "{}\n",
        if plan.title.is_empty() {
            "Plan"
        } else {
            &plan.title
        }
    ));
    match &outcome.status {
        OutcomeStatus::Fallback { reason } => out.push_str(&format!("Fallback: {reason}\n")),
        OutcomeStatus::Incomplete { reason, .. } => {
            out.push_str(&format!("Incomplete: {reason}\n"));
        }
        _ => {}
    }
    if let Some(guidance) = &plan.guidance {
        out.push_str(&format!("Guidance: {guidance}\n"));
    }
    for (idx, step) in plan.steps.iter().enumerate() {
        let after = if step.depends_on.is_empty() {
            String::new()
        } else {
            format!(" (after {})", step.depends_on.join(", "))
        };
        let mut flag = String::new();
        if step.status != plansmith_core::StepStatus::NotStarted {
            flag.push_str(&format!(" [{}]", step.status.as_str()));
        }
        if step.requires_approval {
            flag.push_str(" [needs approval]");
        }
        out.push_str(&format!(
            "{:>2}. [{}] {}{after}{flag}\n",
            idx + 1,
            step.id,
            step.title
        ));
        for line in step.action_lines() {
            out.push_str(&format!("      {line}\n"));
        }
    }
    if !plan.questions.is_empty() {
        out.push_str("Questions:\n");
        for question in &plan.questions {
            let options = if question.options.is_empty() {
                String::new()
            } else {
                format!(" [{}]", question.options.join(" / "))
            };
            let recommended = question
                .default
                .as_ref()
                .map(|d| format!(" (recommended: {d})"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {}: {}{options}{recommended}\n",
                question.id, question.text
            ));
        }
    }
    let assumed: Vec<plansmith_core::Assumption> = plan
        .metadata
        .get("assumptions")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .unwrap_or_default();
    if !assumed.is_empty() {
        out.push_str("Assumed (not asked):\n");
        for assumption in &assumed {
            out.push_str(&format!(
                "  {} {} ({})\n",
                assumption.text, assumption.answer, assumption.reason
            ));
        }
    }
    let shown: Vec<_> = outcome
        .diagnostics
        .findings
        .iter()
        .filter(|d| verbose || d.severity >= Severity::Warning)
        .collect();
    if let Some(investigation) = &outcome.diagnostics.investigation {
        // A failed investigation shows as its `investigation_failed` diagnostic below.
        if investigation.error.is_none() {
            out.push_str(&format!(
                "Background investigation ({}, {} ms):\n",
                investigation.investigator, investigation.elapsed_ms
            ));
            for finding in &investigation.findings {
                out.push_str(&format!("  [{}] {}\n", finding.source, finding.text));
            }
            if investigation.trimmed_chars > 0 {
                out.push_str(&format!(
                    "  ({} characters cut to fit the prompt)\n",
                    investigation.trimmed_chars
                ));
            }
        }
    }
    if !shown.is_empty() {
        out.push_str("Diagnostics:\n");
        for diag in shown {
            out.push_str(&format!("  {diag}\n"));
        }
    }
    if let Some(memory) = &outcome.diagnostics.memory {
        out.push_str(&format!(
            "Memory: {} earlier turn(s) shown, {} summarised\n",
            memory.turns_kept, memory.turns_summarised
        ));
    }
    if verbose {
        for attempt in &outcome.diagnostics.attempts {
            out.push_str(&format!(
                "Attempt {} raw output:\n{}\n",
                attempt.index, attempt.raw
            ));
            for diag in &attempt.diagnostics {
                out.push_str(&format!("  {diag}\n"));
            }
        }
    }
    out.push_str(&format!("-- {}\n", summary_line(outcome)));
    out
}
