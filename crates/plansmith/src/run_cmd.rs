//! `plansmith run PLAN_ID|plan.json`: runs a plan with the executor (`plansmith-exec`), with
//! live per-step progress on stderr and the final summary on stdout.
//!
//! Tools and agents run through `--commands FILE` (name → command or HTTP callback); tasks,
//! the summary and replanning use `--model` when one is given. Exit codes: 0 completed, 1
//! failed / aborted / stalled / deadlocked, 13 stopped at a cap of its budget (tool calls,
//! tokens, time, replans), 2 bad input, 4 no such plan, 5 a run of the plan is already in
//! progress (use `--resume`) or the plan's review state forbids running it, 10 waiting for a
//! person's decision (approve with `plansmith plans decide`, then `--resume`), 130 / 143
//! stopped by Ctrl-C / SIGTERM (the run is stopped as `plansmith plans stop` stops it; a second
//! signal quits at once).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow};
use chrono::Utc;
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use plansmith_core::PlanOptions;
use plansmith_core::parse::{self, ParseDefaults};
use plansmith_core::validate::validate;
use plansmith_exec::{
    CommandInvoker, CommandMap, ExecConfig, ExecError, ExecEvent, Executor, Invokers, OnFailure,
    RunReport, Siblings, StopReason, TaskInvoker,
};
use plansmith_service::{RunStart, Runner, ServiceError};
use plansmith_store::{
    Budget, ExecRun, ExecStatus, OnCap, PlanStore, Review, ReviewState, RunState, StoreError,
};

use crate::plans_cmd::{open, store_error};
use crate::signals::{Interrupt, Interrupts};
use crate::{CliError, Exit};

/// `plansmith run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A stored plan's id, or a plan file (JSON in any accepted shape; stored as accepted).
    plan: String,
    #[command(flatten)]
    store: crate::args::StoreArgs,
    /// Tools and agents: `{"tools": {"name": {"command": [...]} | {"url": "…"}}, "agents": {…}}`
    /// (JSON or TOML).
    #[arg(long)]
    commands: Option<PathBuf>,
    /// MCP servers (`mcpServers` JSON) whose tools the plan calls.
    #[arg(long)]
    mcp: Option<PathBuf>,
    /// Tool catalog: output schemas checked, destructive tools gated, replans validated.
    #[arg(long)]
    tools: Option<PathBuf>,
    /// Model for task steps, the final summary and replanning (none: task steps fail, the
    /// summary is a plain rendering, failures are not replanned).
    #[arg(long, env = "PLANSMITH_MODEL")]
    model: Option<String>,
    /// Continue the plan's unfinished run (after a crash, or after a decision).
    #[arg(long)]
    resume: bool,
    /// Approve every gated step.
    #[arg(long)]
    approve_all: bool,
    /// Also gate this step (repeatable).
    #[arg(long = "require-approval")]
    require_approval: Vec<String>,
    /// Steps running at once.
    #[arg(long, default_value_t = 4, value_parser = crate::at_least_one)]
    concurrency: usize,
    /// After the retries: fail, skip, abort, ask or replan.
    #[arg(long, default_value = "fail")]
    on_failure: String,
    /// Retries of a failed step.
    #[arg(long, default_value_t = 2)]
    retries: u32,
    /// When a step fails past its policy, the steps running beside it: `isolate` (run on,
    /// keep their results) or `cancel` (stopped, skipped; what finished is kept).
    #[arg(long, default_value = "isolate")]
    siblings: Siblings,
    /// Check the goal when the steps end: the model (`--model`) judges the results against the
    /// plan's goal; gaps are replanned (at most `--max-replans`), an unmet goal fails the run.
    #[arg(long)]
    goal_check: bool,
    /// What the goal check must also find true (implies `--goal-check`).
    #[arg(long)]
    rubric: Option<String>,
    /// Longest time of one attempt of a step, in seconds; past it the attempt is stopped and
    /// fails as retryable (plans and steps override it with `timeout_secs`).
    #[arg(long)]
    step_timeout_secs: Option<f64>,
    /// First retry delay in ms (doubled each time, at most 5 s).
    #[arg(long, default_value_t = 200)]
    backoff_ms: u64,
    /// Most replans of the run (default 2, or `max_replans` in the config file's `[budget]`).
    #[arg(long)]
    max_replans: Option<u32>,
    /// Most tool and agent calls of the run, retries included; at the cap nothing new starts
    /// and the run ends `tool_calls_capped` (exit 13).
    #[arg(long)]
    max_tool_calls: Option<u64>,
    /// Most model tokens of the run (task steps and replans); at the cap it ends
    /// `token_capped` (exit 13).
    #[arg(long)]
    max_tokens: Option<u64>,
    /// Most seconds of the run from its start, resumes included; then it ends `deadline`
    /// (exit 13).
    #[arg(long)]
    max_seconds: Option<u64>,
    /// At a cap, `finish` the running steps and keep their results (default), or `cancel`
    /// them.
    #[arg(long)]
    on_cap: Option<OnCap>,
    /// Lease of a running step in seconds (another process takes the step over after it).
    #[arg(long, default_value_t = 15)]
    lease_secs: u64,
    /// Wait this many seconds for people's decisions before pausing (exit 10).
    #[arg(long, default_value_t = 0)]
    wait_secs: u64,
    /// Print the run report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `plansmith run`.
pub fn run(args: RunArgs) -> Result<Exit, CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(CliError::failed)?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: RunArgs) -> Result<Exit, CliError> {
    let on_failure: OnFailure = args
        .on_failure
        .parse()
        .map_err(|e: String| CliError::input(anyhow!(e)))?;
    let catalog = crate::catalog::load_catalog(args.tools.as_deref(), None)?;
    let (catalog, mcp) = match &args.mcp {
        Some(path) => {
            let (catalog, tools) = crate::catalog::connect(catalog, path).await?;
            (catalog, Some(Arc::new(tools)))
        }
        None => (catalog, None),
    };
    let commands = args.commands.as_deref().map(read_commands).transpose()?;
    let store = open(args.store.store.as_deref()).await?;
    let plan_id = resolve_plan(&store, &args.plan, &catalog, commands.as_ref()).await?;

    let mut invokers = Invokers::default();
    if let Some(map) = commands {
        invokers.tools = Some(Arc::new(
            CommandInvoker::new(map.tools).with_provider_keys(crate::config::provider_keys()),
        ));
        invokers.agents = Some(Arc::new(
            CommandInvoker::new(map.agents).with_provider_keys(crate::config::provider_keys()),
        ));
    }
    let servers = mcp.clone();
    if let Some(tools) = mcp {
        let fallback = invokers.tools.take();
        invokers.tools = Some(Arc::new(
            plansmith_exec::mcp::McpInvoker::new(tools, fallback)
                .with_provider_keys(crate::config::provider_keys()),
        ));
    }
    let model = match &args.model {
        Some(spec) => Some(crate::model::load(Some(spec))?),
        None => None,
    };
    if let Some(model) = &model {
        invokers.tasks = Some(Arc::new(TaskInvoker::new(model.clone(), 1024)));
    }

    let mut config = ExecConfig::new(plansmith_exec::node_name());
    config.concurrency = args.concurrency;
    config.policy.on_failure = on_failure;
    config.policy.retries = args.retries;
    config.policy.siblings = args.siblings;
    config.goal_check = args.goal_check || args.rubric.is_some();
    config.rubric = args.rubric.clone();
    config.policy.timeout = match args.step_timeout_secs {
        Some(secs) if secs.is_finite() && secs > 0.0 => {
            Some(Duration::from_secs_f64(secs.min(1e9)))
        }
        Some(secs) => {
            return Err(CliError::input(anyhow!(
                "--step-timeout-secs must be a positive number of seconds, not {secs}"
            )));
        }
        None => None,
    };
    config.policy.backoff = Duration::from_millis(args.backoff_ms);
    let flags = Budget {
        max_tool_calls: args.max_tool_calls,
        max_tokens: args.max_tokens,
        max_seconds: args.max_seconds,
        max_replans: args.max_replans,
        on_cap: args.on_cap.unwrap_or_default(),
    };
    let start = RunStart::of(
        args.resume,
        (flags != Budget::default()).then(|| flags.clone()),
    )
    .map_err(|err| CliError::input(anyhow!(err)))?;
    let layered = crate::config::settings(
        crate::config::Settings {
            budget: Some(flags),
            ..Default::default()
        },
        crate::config::Scope::Command,
    )?;
    config.budget = layered.budget.unwrap_or_default();
    config.lease = Duration::from_secs(args.lease_secs.max(1));
    config.wait_for_people = Duration::from_secs(args.wait_secs);
    config.approve_all = args.approve_all;
    config.require_approval = args.require_approval.clone();

    let node = config.node.clone();
    let progress = Progress::new();
    let observer = progress.clone();
    // Whether the run has recorded its start (its first event comes after): a stop refused as
    // "not running" before that waits for the start; after it, the run ended meanwhile.
    let started = Arc::new(AtomicBool::new(false));
    let seen = started.clone();
    let mut executor = Executor::new(store.clone(), invokers, config)
        .with_catalog(catalog.clone())
        .with_observer(Arc::new(move |_plan, event| {
            seen.store(true, Ordering::Release);
            observer.show(event);
        }));
    let replanner = match &model {
        Some(model) => Some(Arc::new(crate::retrieval::planner(
            catalog.clone(),
            model.clone(),
        )?)),
        None => None,
    };
    // Without a catalog here, a plan made with its caller's catalog (over HTTP or MCP) runs
    // against that one.
    if args.tools.is_none() && args.mcp.is_none() {
        let base = replanner.clone().unwrap_or_else(|| {
            Arc::new(plansmith_core::Planner::new(
                catalog.clone(),
                Arc::new(plansmith_core::ScriptedModel::new(Vec::<String>::new())),
            ))
        });
        executor = executor.with_planners(Arc::new(plansmith_service::Planners::new(base)));
    }
    if let (Some(model), Some(replanner)) = (model, replanner) {
        executor = executor.with_planner(replanner).with_summary_model(model);
    }
    // Runs in this task, through the same service operation as every front end's runs.
    let service = crate::plans_cmd::plain_service(&store).with_runner(Runner::new(executor));
    let mut signals = Interrupts::install().map_err(CliError::failed)?;
    let run = service.run_here(&plan_id, start);
    // Boxed so that a second signal can drop it (and its running steps) before the leases go.
    let mut run = Box::pin(run);
    let mut interrupted = None;
    let mut deferred = false;
    // The first signal's stop, recorded while the run goes on: a slow or dead store must not
    // hold up the run, nor a second signal. With whether the run had started when it was asked.
    let mut stop: Option<StopRequest> = None;
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            signal = signals.next() => {
                if interrupted.is_some() {
                    progress.clear();
                    drop(run);
                    return Ok(quit_at_once(&store, &plan_id, &node, signal).await);
                }
                interrupted = Some(signal);
                progress.line("", format!(
                    "plansmith run: {}: stopping the run (its running steps and their processes \
                     are stopped, nothing else starts); signal again to quit at once",
                    signal.name()
                ));
                stop = Some(request_stop(&store, &plan_id, signal, &started, Duration::ZERO));
            }
            stopped = async {
                match stop.as_mut() {
                    Some(stopping) => {
                        let answer = stopping.request.as_mut().await.err();
                        (stopping.started, stopping.signal, answer)
                    }
                    None => (true, Interrupt::Interrupt, None),
                }
            }, if stop.is_some() => {
                stop = None;
                match stopped {
                    (_, _, None) => {}
                    // Not running, although the run had started: it ended meanwhile (its end
                    // is on its way).
                    (true, _, Some(StoreError::NotRunning { .. })) => {}
                    // Not running yet (its start waits for the store, say): asked again until
                    // it runs, so the stop lands as soon as it starts.
                    (false, signal, Some(StoreError::NotRunning { .. })) => {
                        if !deferred {
                            deferred = true;
                            progress.line("", "plansmith run: the run has not started yet; it is \
                                stopped as soon as it starts".to_owned());
                        }
                        stop = Some(request_stop(
                            &store, &plan_id, signal, &started, Duration::from_millis(100),
                        ));
                    }
                    (_, signal, Some(err)) => {
                        progress.clear();
                        eprintln!("plansmith run: cannot record the stop: {err}");
                        drop(run);
                        return Ok(quit_at_once(&store, &plan_id, &node, signal).await);
                    }
                }
            }
        }
    };
    progress.clear();
    // The MCP servers are closed as MCP asks before the command ends (a quit at once above
    // leaves them to the end of their stdin instead).
    if let Some(servers) = servers {
        servers.close().await;
    }
    let report = result.map_err(run_error)?;
    if args.json {
        let text = serde_json::to_string_pretty(&report).map_err(CliError::failed)?;
        println!("{text}");
    } else {
        print_report(&report);
    }
    // The run may have ended by itself as the signal came: then it was not stopped.
    if let Some(signal) = interrupted.filter(|_| report.state == RunState::Aborted) {
        eprintln!(
            "plansmith run: stopped ({}); `plansmith run {plan_id}` starts a new run of the \
             steps left (completed ones keep their results)",
            signal.name()
        );
        return Ok(signal.exit_code());
    }
    if report.stop_reason.is_some_and(StopReason::is_cap) {
        return Ok(Exit::Capped);
    }
    Ok(match report.state {
        RunState::Completed => Exit::Ok,
        RunState::Waiting | RunState::Running => Exit::NeedsInput,
        RunState::Failed | RunState::Aborted | RunState::Stalled => Exit::Failed,
    })
}

/// `3/8`, `40%` of a total of 100, or the bare count.
fn progress_text(progress: f64, total: Option<f64>) -> String {
    // Whole numbers without `.0`; others with at most two decimals.
    let number = |n: f64| {
        if n.fract() == 0.0 && n.abs() < 1e15 {
            format!("{n:.0}")
        } else {
            format!("{n:.2}")
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_owned()
        }
    };
    match total {
        Some(100.0) => format!("{}%", number(progress)),
        Some(total) if total > 0.0 => format!("{}/{}", number(progress), number(total)),
        _ => number(progress),
    }
}

/// A stop being recorded: the store's answer to come, whether the run had started when it
/// was asked (see `started` in [`run_async`]), and the signal that asked.
struct StopRequest {
    request: futures::future::BoxFuture<'static, Result<ExecRun, StoreError>>,
    started: bool,
    signal: Interrupt,
}

/// Asks the store to stop the plan's run, after `delay`.
fn request_stop(
    store: &PlanStore,
    plan_id: &str,
    signal: Interrupt,
    started: &AtomicBool,
    delay: Duration,
) -> StopRequest {
    // Read before the store is asked: a run that starts meanwhile is then asked again.
    let started = started.load(Ordering::Acquire);
    let store = store.clone();
    let plan_id = plan_id.to_owned();
    StopRequest {
        request: Box::pin(async move {
            tokio::time::sleep(delay).await;
            store.request_stop(&plan_id, signal.name(), "cli").await
        }),
        started,
        signal,
    }
}

/// A second signal, the run already dropped: `plansmith run` returns without waiting for
/// the run to record its end. The running steps' processes are killed as the runtime drops
/// their calls; their leases are given up, and the run stays in progress in the store, for
/// `--resume` to continue at once.
async fn quit_at_once(store: &PlanStore, plan_id: &str, node: &str, signal: Interrupt) -> Exit {
    // At once: a store that does not answer within a second keeps the leases until they expire.
    let released =
        tokio::time::timeout(Duration::from_secs(1), store.exec_release(plan_id, node)).await;
    let when = match released {
        Ok(Ok(_)) => "",
        _ => " once their leases expire",
    };
    eprintln!(
        "plansmith run: quit ({}): the running steps' processes were killed, the run was left \
         in progress; `plansmith run {plan_id} --resume` continues it{when}",
        signal.name()
    );
    signal.exit_code()
}

fn run_error(err: ServiceError) -> CliError {
    match err {
        ServiceError::Exec(err) => exec_error(err),
        other => crate::plans_cmd::service_error(other),
    }
}

fn exec_error(err: ExecError) -> CliError {
    match err {
        ExecError::Store(err @ StoreError::RunActive(_)) => CliError {
            code: Exit::Conflict,
            error: anyhow::Error::new(err).context("use --resume to continue it"),
        },
        ExecError::Store(err) => store_error(err),
        err @ ExecError::Deleted { .. } => CliError {
            code: Exit::NotFound,
            error: anyhow::Error::new(err),
        },
        other @ (ExecError::NotRunnable { .. } | ExecError::NothingToResume { .. }) => CliError {
            code: Exit::Conflict,
            error: anyhow::Error::new(other),
        },
        other => CliError::failed(other),
    }
}

/// The stored plan's id: `plan` itself, or the id of the plan file stored now (accepted).
///
/// A plan file is validated before it is stored, against `catalog` or, without one, against
/// what this run can call (the tools and agents of `commands`, with any arguments): a step no
/// part of the run could carry out, a dangling `$ref` or a cycle is refused before anything
/// runs. The file's own `id`, `goal`, `locale` and `title` are kept (our `plan --json` output
/// has them; a replan needs the goal), the id unless a stored plan already has it.
async fn resolve_plan(
    store: &PlanStore,
    plan: &str,
    catalog: &plansmith_core::Catalog,
    commands: Option<&CommandMap>,
) -> Result<String, CliError> {
    let path = Path::new(plan);
    if !path.is_file() {
        return Ok(plan.to_owned());
    }
    let text = crate::input::read_text(path).map_err(CliError::input)?;
    let document: Option<serde_json::Value> = serde_json::from_str(&text).ok();
    let field = |name: &str| {
        document
            .as_ref()
            .and_then(|d| d.get(name))
            .and_then(serde_json::Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let id = match field("id") {
        Some(id) if matches!(store.get(&id).await, Err(StoreError::NotFound(_))) => id,
        Some(id) => {
            let fresh = plansmith_core::Plan::new_id();
            eprintln!("a stored plan already has the file's id {id}: storing it as {fresh}");
            fresh
        }
        None => plansmith_core::Plan::new_id(),
    };
    let goal = field("goal").unwrap_or_default();
    let locale = field("locale").unwrap_or_else(|| "en-US".to_owned());
    let defaults = ParseDefaults {
        plan_id: &id,
        goal: &goal,
        locale: &locale,
        now: Utc::now(),
    };
    let parsed = parse::parse(&text, &defaults)
        .with_context(|| format!("{} is not a plan in any accepted shape", path.display()))
        .map_err(CliError::input)?;
    let mut parsed_plan = parsed.plan;
    parsed_plan.id = id;
    if parsed_plan.goal.is_empty() {
        parsed_plan.goal = goal;
    }
    if let Some(title) = field("title") {
        parsed_plan.title = title;
    }
    let reachable;
    let checking = if catalog.is_empty() {
        reachable = reachable_catalog(commands)?;
        &reachable
    } else {
        catalog
    };
    let (plan, diagnostics) = validate(parsed_plan, checking, &PlanOptions::default());
    let errors: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| format!("  {d}"))
        .collect();
    if !errors.is_empty() {
        return Err(CliError::input(anyhow!(
            "{} is not a valid plan:\n{}",
            path.display(),
            errors.join("\n")
        )));
    }
    let id = plan.id.clone();
    store
        .create(plan, ReviewState::Accepted, Review::default(), "cli")
        .await
        .map_err(store_error)?;
    eprintln!("stored plan {id}");
    Ok(id)
}

/// What a run without a catalog can call: the tools and agents of its commands file, each
/// taking any arguments.
fn reachable_catalog(commands: Option<&CommandMap>) -> Result<plansmith_core::Catalog, CliError> {
    let Some(commands) = commands else {
        return Ok(plansmith_core::Catalog::empty());
    };
    let tools = commands
        .tools
        .keys()
        .map(|name| plansmith_core::Tool {
            name: name.clone(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
            annotations: None,
        })
        .collect();
    let agents = commands
        .agents
        .keys()
        .map(|name| plansmith_core::AgentCard {
            name: name.clone(),
            description: String::new(),
            skills: Vec::new(),
            capabilities: serde_json::Map::new(),
            passthrough: false,
        })
        .collect();
    plansmith_core::Catalog::new(tools, agents)
        .context("the commands file's tool and agent names")
        .map_err(CliError::input)
}

/// Reads a commands file (JSON, or TOML by extension).
pub(crate) fn read_commands(path: &Path) -> Result<CommandMap, CliError> {
    let text = crate::input::read_text(path).map_err(CliError::input)?;
    let parsed = if path.extension().is_some_and(|e| e == "toml") {
        toml::from_str::<CommandMap>(&text).map_err(anyhow::Error::new)
    } else {
        serde_json::from_str::<CommandMap>(&text).map_err(anyhow::Error::new)
    };
    parsed
        .with_context(|| format!("{} is not a commands file", path.display()))
        .map_err(CliError::input)
}

/// Live progress: a spinner per running step on a terminal, else one line per event.
#[derive(Clone)]
struct Progress {
    bars: Option<MultiProgress>,
    running: Arc<Mutex<HashMap<String, ProgressBar>>>,
    titles: Arc<Mutex<HashMap<String, String>>>,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            bars: std::io::stderr().is_terminal().then(MultiProgress::new),
            running: Arc::default(),
            titles: Arc::default(),
        }
    }

    fn title(&self, id: &str) -> String {
        self.titles
            .lock()
            .ok()
            .and_then(|t| t.get(id).cloned())
            .unwrap_or_default()
    }

    /// A line that stays (the step `id`'s spinner, if any, gives way to it). On a terminal
    /// it goes above the spinners: a finished spinner kept in their place was erased by the
    /// next line printed, so a step's end could vanish from the screen.
    fn line(&self, id: &str, text: String) {
        let bar = self.running.lock().ok().and_then(|mut r| r.remove(id));
        match &self.bars {
            Some(bars) => {
                if let Some(bar) = bar {
                    bar.finish_and_clear();
                    bars.remove(&bar);
                }
                let _ = bars.println(crate::term::safe(&text));
            }
            None => eprintln!("{text}"),
        }
    }

    fn show(&self, event: &ExecEvent) {
        match event {
            ExecEvent::RunStarted {
                plan_id,
                resumed,
                steps,
                ..
            } => {
                if let Ok(mut titles) = self.titles.lock() {
                    titles.extend(steps.iter().cloned());
                }
                let verb = if *resumed { "resuming" } else { "running" };
                self.line("", format!("{verb} plan {plan_id} ({} steps)", steps.len()));
            }
            ExecEvent::StepStarted {
                step_id,
                attempt,
                rerun,
                ..
            } => {
                let text = format!(
                    "[{step_id}] {} — attempt {attempt}{}",
                    self.title(step_id),
                    if *rerun {
                        " (re-run after a lost lease)"
                    } else {
                        ""
                    }
                );
                match &self.bars {
                    Some(bars) => {
                        let bar = bars.add(ProgressBar::new_spinner());
                        bar.set_style(
                            ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                        );
                        bar.set_message(crate::term::safe(&text).into_owned());
                        bar.enable_steady_tick(Duration::from_millis(100));
                        if let Ok(mut running) = self.running.lock() {
                            running.insert(step_id.clone(), bar);
                        }
                    }
                    None => eprintln!("→ {text}"),
                }
            }
            // On a terminal, in the step's spinner; elsewhere (a log) not at all: the reports
            // come up to four times a second.
            ExecEvent::StepProgress {
                step_id,
                attempt,
                progress,
                total,
                message,
            } => {
                if let Ok(running) = self.running.lock()
                    && let Some(bar) = running.get(step_id)
                {
                    let mut text = format!(
                        "[{step_id}] {} — attempt {attempt} · {}",
                        self.title(step_id),
                        progress_text(*progress, *total)
                    );
                    if let Some(message) = message.as_deref().filter(|m| !m.trim().is_empty()) {
                        text.push_str(" · ");
                        text.push_str(message.trim());
                    }
                    bar.set_message(crate::term::safe(&text).into_owned());
                }
            }
            ExecEvent::StepCompleted {
                step_id,
                elapsed_ms,
                ..
            } => self.line(
                step_id,
                format!("✓ [{step_id}] {} ({elapsed_ms} ms)", self.title(step_id)),
            ),
            ExecEvent::StepRetrying {
                step_id,
                attempt,
                error,
                delay_ms,
            } => self.line(
                step_id,
                format!("↻ [{step_id}] attempt {attempt} failed: {error}; retry in {delay_ms} ms"),
            ),
            ExecEvent::StepEnded {
                step_id,
                status,
                reason,
            } => {
                let mark = match status {
                    ExecStatus::Skipped => "-",
                    ExecStatus::Blocked => "⏸",
                    _ => "✗",
                };
                self.line(
                    step_id,
                    format!(
                        "{mark} [{step_id}] {} {}: {reason}",
                        self.title(step_id),
                        status.as_str()
                    ),
                );
            }
            ExecEvent::Replanned {
                version,
                kept,
                added,
                steps,
                ..
            } => {
                // The new plan's titles: a changed step is shown by what it now does.
                if let Ok(mut titles) = self.titles.lock() {
                    titles.clear();
                    titles.extend(steps.iter().cloned());
                }
                self.line(
                    "",
                    format!(
                        "replanned as version {version}: kept {}, new {}",
                        kept.join(", "),
                        added.join(", ")
                    ),
                );
            }
            ExecEvent::RunFinished { .. } => {}
            _ => {}
        }
    }

    fn clear(&self) {
        if let Ok(mut running) = self.running.lock() {
            for (_, bar) in running.drain() {
                bar.finish_and_clear();
            }
        }
    }
}

fn print_report(report: &RunReport) {
    let done = report
        .steps
        .iter()
        .filter(|s| s.status == ExecStatus::Completed)
        .count();
    let stopped = match report.stop_reason {
        Some(reason) if reason.as_str() != report.state.as_str() => format!(" ({reason})"),
        _ => String::new(),
    };
    println!(
        "Run of {}: {}{stopped} · {done}/{} step(s) completed · {} replan(s) · {} ms",
        report.plan_id,
        report.state,
        report.steps.len(),
        report.replans,
        report.elapsed_ms
    );
    if let Some(budget) = &report.budget {
        let cap = |max: Option<u64>| max.map(|m| format!("/{m}")).unwrap_or_default();
        println!(
            "Spent: {}{} tool call(s) · {}{} model token(s)",
            budget.tool_calls,
            cap(budget.budget.max_tool_calls),
            budget.tokens,
            cap(budget.budget.max_tokens)
        );
    }
    if let Some(reason) = &report.reason {
        println!("Reason: {reason}");
    }
    if let Some(goal) = &report.goal_check {
        let verdict = serde_json::to_value(goal.verdict).unwrap_or_default();
        println!(
            "Goal check: {} — {}",
            verdict.as_str().unwrap_or_default(),
            goal.reason
        );
    }
    if !report.summary.is_empty() {
        println!("{}", report.summary.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::{Progress, progress_text};
    use plansmith_exec::ExecEvent;

    #[test]
    fn after_a_replan_steps_are_shown_by_their_new_titles() {
        let progress = Progress::new();
        progress.show(&ExecEvent::RunStarted {
            plan_id: "p".into(),
            base_version: 1,
            resumed: false,
            steps: vec![("s1".into(), "list".into()), ("s2".into(), "fetch".into())],
        });
        assert_eq!(progress.title("s2"), "fetch");
        progress.show(&ExecEvent::Replanned {
            version: 2,
            kept: vec!["s1".into()],
            added: vec!["s2".into()],
            steps: vec![
                ("s1".into(), "list".into()),
                ("s2".into(), "fetch from the mirror".into()),
            ],
            replans: 1,
        });
        assert_eq!(progress.title("s2"), "fetch from the mirror");
        assert_eq!(progress.title("s1"), "list");
    }

    #[test]
    fn progress_reads_as_a_fraction_a_percentage_or_a_count() {
        assert_eq!(progress_text(3.0, Some(8.0)), "3/8");
        assert_eq!(progress_text(0.6000000000000001, Some(60.0)), "0.6/60");
        assert_eq!(progress_text(40.0, Some(100.0)), "40%");
        assert_eq!(progress_text(12.5, None), "12.5");
        assert_eq!(progress_text(7.0, Some(0.0)), "7");
    }
}
