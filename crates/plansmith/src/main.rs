//! `plansmith`: the command line front end of the planning engine.
//!
//! Exit codes (also in `docs/guide/commands.md`):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success; for `plan`, a ready plan |
//! | 1 | planning failed (no valid plan, and the fallback policy says to fail) |
//! | 2 | bad input: usage, unreadable file, invalid tool schema, bad option |
//! | 3 | no model configured, or the model could not be called |
//! | 4 | `plans`, `templates`: no such plan (or no active plan), no such template |
//! | 5 | `plans`, `templates`: conflict — the plan changed since `--expected-version`, its id is taken, or its review state forbids the operation |
//! | 10 | `plan`: the plan needs input (questions or guidance for the user) |
//! | 11 | `plan`: a fallback plan was returned (the reason is printed) |
//! | 12 | `plan`: the plan is incomplete: a step the request asked for could not be planned and was left out |
//!
//! `run`: 0 completed, 1 failed / aborted / stalled, 5 a run is in progress (use `--resume`)
//! or the plan may not run in its review state, 10 paused waiting for a person's decision.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::path::PathBuf;
use std::process::ExitCode;

// The CLI's own print macros, for every module below: what they print has its control
// characters made visible, and a closed pipe ends the output, not the process (see `term`).
macro_rules! print {
    ($($arg:tt)*) => { $crate::term::out(&::std::format!($($arg)*)) };
}
macro_rules! println {
    () => { $crate::term::out("\n") };
    ($($arg:tt)*) => { $crate::term::out(&::std::format!("{}\n", ::std::format_args!($($arg)*))) };
}
macro_rules! eprintln {
    () => { $crate::term::err("\n") };
    ($($arg:tt)*) => { $crate::term::err(&::std::format!("{}\n", ::std::format_args!($($arg)*))) };
}

use clap::{Args, Parser, Subcommand};

/// mimalloc instead of glibc's allocator: a served request allocates and frees thousands of small
/// strings and JSON nodes across threads, and glibc's malloc/free (with its consolidation of
/// freed chunks) took ~17 % of the server's CPU under load; see docs/guide/service.md, "Load test".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod args;
mod catalog;
mod config;
mod eval;
mod exit;

pub use exit::Exit;
mod input;
mod investigate_cmd;
mod mcp_cmd;
mod model;
#[cfg(feature = "local")]
mod models_cmd;
mod notice;
mod plan_cmd;
mod plan_progress;
mod plan_review;
mod plans_cmd;
#[cfg(test)]
mod reference;
mod retrieval;
mod run_cmd;
mod serve_cmd;
mod signals;
mod templates_cmd;
mod term;
mod tools_cmd;
mod validate_cmd;

/// A count flag that must be at least 1 (`--top-k 0` would show the model no tool, and
/// `--max-steps 0` allow no plan).
pub(crate) fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(err) => Err(format!("not a count: {err}")),
    }
}

/// The single-threaded Tokio runtime the one-shot commands plan and store on (provider
/// clients need its reactor).
pub(crate) fn current_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// An error with the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    code: Exit,
    error: anyhow::Error,
}

impl CliError {
    /// Bad input (exit 2).
    pub fn input(error: impl Into<anyhow::Error>) -> CliError {
        CliError {
            code: Exit::BadInput,
            error: error.into(),
        }
    }
    /// A model problem (exit 3).
    pub fn model(error: impl Into<anyhow::Error>) -> CliError {
        CliError {
            code: Exit::Model,
            error: error.into(),
        }
    }
    /// Planning failed (exit 1).
    pub fn failed(error: impl Into<anyhow::Error>) -> CliError {
        CliError {
            code: Exit::Failed,
            error: error.into(),
        }
    }
}

/// plansmith: turn a request and a tool catalog into a validated, executable plan.
#[derive(Debug, Parser)]
#[command(name = "plansmith", version, about, long_about = None)]
struct Cli {
    /// Config file (TOML: default model, store, provider settings); default
    /// `$XDG_CONFIG_HOME/plansmith/config.toml` when it exists.
    #[arg(long, global = true, env = "PLANSMITH_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Plan a request against a tool catalog.
    Plan(Box<plan_cmd::PlanArgs>),
    /// Validate a plan file in any accepted shape against a catalog; print it in any shape.
    Validate(validate_cmd::ValidateArgs),
    /// Stored plans: list, show, history, accept, reject, edit, answer, mark, delete.
    Plans(plans_cmd::PlansArgs),
    /// Run a plan: steps in parallel as their dependencies complete, failure policies,
    /// approval gates, replanning, resumable after a crash.
    Run(Box<run_cmd::RunArgs>),
    /// Serve the HTTP API, live events and the review page (and MCP at /mcp).
    Serve(serve_cmd::ServeArgs),
    /// Serve plansmith over MCP on stdio: the tools plan, planning and feedback.
    Mcp(mcp_cmd::McpArgs),
    /// Plan templates: save a plan with `{{param}}` placeholders, list, show, delete,
    /// instantiate with arguments (re-validated against the catalog).
    Templates(templates_cmd::TemplatesArgs),
    /// Inspect tool catalogs.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Evaluation commands.
    #[command(subcommand)]
    Eval(EvalCommand),
    /// Local models: list the pinned ones, pull one.
    #[cfg(feature = "local")]
    #[command(subcommand)]
    Models(ModelsCommand),
}

#[cfg(feature = "local")]
#[derive(Debug, Subcommand)]
enum ModelsCommand {
    /// List the pinned local models and whether they are installed.
    List {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Download, assemble and verify a pinned model (default: the default model).
    Pull {
        /// Model name (see `plansmith models list`).
        name: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum ToolsCommand {
    /// Load a catalog and report every invalid tool (name and JSON pointer).
    Check {
        /// Catalog file (MCP tools/list result, list, OpenAI tools, or {name: tool} map).
        file: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rank the tools of a catalog for a query (BM25).
    Search(tools_cmd::SearchArgs),
    /// List the tools of MCP servers (`--mcp servers.json`) and/or a catalog file.
    List(mcp_cmd::ListArgs),
}

#[derive(Debug, Subcommand)]
enum EvalCommand {
    /// Rank tools for every case and write `{"id", "ranked"}` lines for `score.py retrieval`.
    Retrieval(RetrievalArgs),
    /// Plan every case and write `{"id", "plan"}` lines for `score.py plan`.
    Plan(EvalPlanArgs),
}

#[derive(Debug, Args)]
struct EvalPlanArgs {
    /// Cases, JSON lines `{"id", "category", "messages", "tools", …}` (e.g. bfcl_cases.jsonl).
    #[arg(long)]
    cases: PathBuf,
    /// Where to write the predictions (JSON lines).
    #[arg(long)]
    out: PathBuf,
    /// At most this many cases per category.
    #[arg(long)]
    limit: Option<usize>,
    /// Only these categories (repeatable).
    #[arg(long = "category")]
    categories: Vec<String>,
    #[command(flatten)]
    model: args::ModelArgs,
    /// Local models: decode without the JSON-Schema grammar.
    #[arg(long)]
    unconstrained: bool,
    /// Keep the predictions already in `--out` and run only the cases missing there.
    #[arg(long)]
    resume: bool,
    /// The current time every case is planned at (RFC 3339). The prompt carries the time and the
    /// reply depends on it, so a fixed time makes a run repeatable.
    #[arg(long, default_value = eval::EVAL_NOW)]
    now: chrono::DateTime<chrono::Utc>,
    /// How the model writes its plans: `calls` (its own tool-call format), `json` (one plan
    /// document), or `auto` (calls on the embedded model, else json).
    #[arg(long = "plan-format", default_value = "auto")]
    format: plansmith_core::PlanFormat,
    /// Directory of prompts overriding the built-in ones, by file name (`--templates` is an
    /// older name of this flag).
    #[arg(long = "prompts", alias = "templates", value_name = "DIR")]
    prompts: Option<PathBuf>,
    /// Show the model at most this many of a case's tools, the retriever's best (default: all
    /// of them, as BFCL intends; a case that carries a whole library, as NESTFUL's do, needs a
    /// bound to fit the context).
    #[arg(long = "top-k", value_parser = clap::value_parser!(u16).range(1..))]
    top_k: Option<u16>,
    /// Plan every case against this catalog instead of the case's own tools (any catalog form
    /// `--tools` reads, e.g. BFCL's whole `catalog.json`): the retriever picks `--top-k` tools
    /// (default 8) from it, as for a user's large catalog.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// Return the model's calls even when no called tool seems to fit or they guess their values
    /// (as `plan --no-fit-check`).
    #[arg(long)]
    no_fit_check: bool,
}

#[derive(Debug, Args)]
struct RetrievalArgs {
    /// Catalog file.
    #[arg(long)]
    catalog: PathBuf,
    /// Cases, JSON lines `{"id", "query", "relevant": [...]}`.
    #[arg(long)]
    cases: PathBuf,
    /// Where to write the predictions (JSON lines).
    #[arg(long)]
    out: PathBuf,
    /// Length of each ranked list.
    #[arg(long, default_value_t = 50)]
    top: usize,
    /// The retriever to score (default: `PLANSMITH_RETRIEVER`, the config file, else hybrid).
    #[arg(long, value_enum)]
    retriever: Option<retrieval::RetrieverKind>,
}

/// Logs on stderr: `PLANSMITH_LOG` filters (any `tracing` filter, default `warn`);
/// `PLANSMITH_LOG_FORMAT` is `text` (the default; colours only on a terminal: a log file or
/// journald got the escape codes) or `json` (one object per line, for a log shipper).
fn init_logs() -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PLANSMITH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // A log line that cannot be written (stderr closed by whoever read it) is dropped: by
    // default the subscriber would report that on stderr too, which panics the task that
    // logged, a run's driver among them.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    match std::env::var("PLANSMITH_LOG_FORMAT").ok().as_deref() {
        None | Some("" | "text") => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        Some("json") => {
            notice::use_json();
            logs.json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .init();
        }
        Some(other) => {
            return Err(format!(
                "PLANSMITH_LOG_FORMAT is `{other}`; it is `text` (the default) or `json`"
            ));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(message) = init_logs() {
        eprintln!("plansmith: {message}");
        return Exit::BadInput.into();
    }
    let result = match config::init(cli.config.as_deref()) {
        Err(err) => Err(err),
        Ok(()) => dispatch(cli.command),
    };
    match result {
        Ok(code) => code.into(),
        Err(CliError { code, error }) => {
            let broken_pipe = error
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe);
            if broken_pipe {
                return ExitCode::SUCCESS;
            }
            notice::say(
                tracing::Level::ERROR,
                "plansmith",
                "error",
                &describe(&error),
            );
            code.into()
        }
    }
}

/// The error and its causes, `: `-joined, each cause once: many errors already quote their
/// cause in their own message ("model call failed: {cause}"), and `{:#}` would print it again.
fn describe(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

/// Runs one command.
fn dispatch(command: Command) -> Result<Exit, CliError> {
    match command {
        Command::Plan(args) => plan_cmd::run(*args),
        Command::Plans(args) => plans_cmd::run(args),
        Command::Run(args) => run_cmd::run(*args),
        Command::Serve(args) => serve_cmd::run(args),
        Command::Mcp(args) => mcp_cmd::serve(args),
        Command::Tools(ToolsCommand::List(args)) => mcp_cmd::list(args),
        Command::Templates(args) => templates_cmd::run(args),
        Command::Tools(ToolsCommand::Check { file, json }) => tools_cmd::check(&file, json),
        Command::Validate(args) => validate_cmd::run(args),
        #[cfg(feature = "local")]
        Command::Models(ModelsCommand::List { json }) => models_cmd::list(json),
        #[cfg(feature = "local")]
        Command::Models(ModelsCommand::Pull { name }) => models_cmd::pull(name.as_deref()),
        Command::Tools(ToolsCommand::Search(args)) => tools_cmd::search(args),
        Command::Eval(EvalCommand::Plan(args)) => model::load_with(
            args.model.model.as_deref(),
            model::LocalOptions {
                unconstrained: args.unconstrained,
                independent: true,
                ..Default::default()
            },
        )
            .and_then(|model| {
                let run = eval::PlanRun {
                    limit_per_category: args.limit,
                    categories: args.categories.clone(),
                    resume: args.resume,
                    now: args.now,
                    format: args.format,
                    templates: args.prompts.clone(),
                    top_k: args.top_k.map(usize::from),
                    catalog: args.catalog.clone(),
                    check_fit: !args.no_fit_check,
                };
                eval::plan(&args.cases, &args.out, model, &run).map_err(CliError::input)
            })
            .map(|summary| {
                println!(
                    "{} cases in {:.0} s ({:.1} s/case): {} parsed on the first reply, {} valid as first written, {} ready, {} errors; wrote {}",
                    summary.n_cases,
                    summary.seconds,
                    summary.seconds / summary.n_cases.max(1) as f64,
                    summary.n_parsed_first,
                    summary.n_valid_first,
                    summary.n_ready,
                    summary.n_errors,
                    args.out.display()
                );
                let file = &summary.file;
                if args.resume {
                    println!(
                        "whole file: {} predictions; of the {} with per-case flags, {} parsed on the first reply, {} valid as first written, {} ready",
                        file.n_lines, file.n_flagged, file.n_parsed_first, file.n_valid_first, file.n_ready
                    );
                }
                Exit::Ok
            }),
        Command::Eval(EvalCommand::Retrieval(args)) => {
            let kind = retrieval::kind(args.retriever).map_err(CliError::input)?;
            eval::retrieval(&args.catalog, &args.cases, &args.out, args.top, kind)
                .map(|summary| {
                    println!(
                        "{} cases over {} tools ({} invalid catalog entries skipped), {}; wrote {}",
                        summary.n_cases,
                        summary.n_tools,
                        summary.n_catalog_problems,
                        kind.name(),
                        args.out.display()
                    );
                    let recalls: Vec<String> = eval::RECALL_AT
                        .iter()
                        .zip(summary.recall)
                        .map(|(k, r)| format!("R@{k} {r:.3}"))
                        .collect();
                    println!("{} · MRR {:.3}", recalls.join(" · "), summary.mrr);
                    Exit::Ok
                })
                .map_err(CliError::input)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::describe;

    /// An error that quotes its cause and also returns it as its source.
    #[derive(Debug)]
    struct Quoting {
        source: std::io::Error,
    }

    impl std::fmt::Display for Quoting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot read template directory /x: {}", self.source)
        }
    }

    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_the_message_quotes_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory");
        let error = anyhow::Error::new(Quoting { source: io }).context("cannot load the templates");
        assert_eq!(
            describe(&error),
            "cannot load the templates: cannot read template directory /x: no such directory"
        );
        // A cause that is not quoted is still shown.
        let error = anyhow::anyhow!("disk full").context("cannot save the plan");
        assert_eq!(describe(&error), "cannot save the plan: disk full");
    }
}
