//! `plansmith plans …`: the stored plans (list, show, history, accept, reject, edit, answer,
//! mark, decide, stop, delete), and the store every command opens.
//!
//! The store is `--store sqlite:PATH | postgres://…`, else `PLANSMITH_STORE`, else SQLite in
//! the data directory (`$XDG_DATA_HOME/plansmith/plans.db` or
//! `~/.local/share/plansmith/plans.db`).
//!
//! Exit codes ([`Exit`]): 4 when the plan (or the conversation's active plan) does not exist, 5
//! on a conflict: the plan changed since the given `--expected-version`, its id is taken, or its
//! review state does not allow the operation (accepting an accepted plan).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::{Args, Subcommand};
use plansmith_core::{Catalog, PlanError, Planner, Prompts};
use plansmith_service::{Decision, Planners, Service, ServiceError};
use plansmith_store::{
    ListFilter, Location, PlanStore, Remember, ReviewAction, ReviewState, StepKey, StepVerdict,
    StoreError, StoredPlan,
};

use crate::args::{ActorArgs, StoreArgs};
use crate::{CliError, Exit};

/// Arguments of `plansmith plans`.
#[derive(Debug, Args)]
pub struct PlansArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    actor: ActorArgs,
    #[command(subcommand)]
    command: PlansCommand,
}

#[derive(Debug, Subcommand)]
enum PlansCommand {
    /// List stored plans, most recently changed first.
    List {
        /// Only this owner's plans.
        #[arg(long)]
        owner: Option<String>,
        /// Only this conversation's plans.
        #[arg(long)]
        conversation: Option<String>,
        /// Only this thread's plans.
        #[arg(long)]
        thread: Option<String>,
        /// Only plans in this state (draft, awaiting_review, needs_input, accepted, rejected,
        /// stopped).
        #[arg(long)]
        state: Option<String>,
        /// Page size.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Rows to skip (slower the deeper; prefer --cursor).
        #[arg(long, default_value_t = 0, conflicts_with = "cursor")]
        offset: u32,
        /// Start after this place: the cursor the previous page printed.
        #[arg(long)]
        cursor: Option<String>,
        /// Count every matching plan (by default the count stops at 10,000: "10000+").
        #[arg(long)]
        exact_total: bool,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a plan: its progress, each step with its id, what it waits for and what it does (tool
    /// and arguments, agent, task or reply), its notes, result and error; then what its state
    /// allows.
    Show {
        /// Plan id.
        id: String,
        /// Show this version instead of the current one.
        #[arg(long)]
        version: Option<u32>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The versions of a plan: trigger, actor, time, and the JSON diff.
    History {
        /// Plan id.
        id: String,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Accept a plan under review.
    Accept {
        /// Plan id.
        id: String,
        /// Fail with exit 5 unless the plan is still at this version (the one you read).
        #[arg(long)]
        expected_version: Option<u32>,
    },
    /// Reject a plan (no text: "plan rejected by user").
    Reject {
        /// Plan id.
        id: String,
        /// Why.
        text: Option<String>,
        /// Fail with exit 5 unless the plan is still at this version (the one you read).
        #[arg(long)]
        expected_version: Option<u32>,
    },
    /// Edit a plan: free-text feedback (replanned by the model), or a JSON Patch (--patch).
    Edit {
        /// Plan id.
        id: String,
        /// Feedback for the planner.
        text: Option<String>,
        /// RFC 6902 JSON Patch on the plan document: JSON text or @FILE. Re-validated.
        #[arg(long, conflicts_with = "text")]
        patch: Option<String>,
        #[command(flatten)]
        planner: PlannerArgs,
    },
    /// Answer a plan's questions (replanned by the model).
    Answer {
        /// Plan id.
        id: String,
        /// The answers, in free text (or give them by question with `--to`, or take the
        /// recommended ones with `--recommended`).
        #[arg(required_unless_present_any = ["to", "recommended"], conflicts_with_all = ["to", "recommended"])]
        text: Option<String>,
        /// One question's answer, `QUESTION=VALUE` (`q1=Paris`); repeat for each.
        #[arg(long, value_name = "QUESTION=VALUE", conflicts_with = "recommended")]
        to: Vec<String>,
        /// Take each question's recommended answer (recorded as an assumption in the plan's
        /// `metadata.assumptions`); questions without one stay open.
        #[arg(long)]
        recommended: bool,
        #[command(flatten)]
        planner: PlannerArgs,
    },
    /// Set a step's status and notes (step: its number as `plans show` lists it, or its id).
    Mark {
        /// Plan id.
        id: String,
        /// Step: its number as `plans show` lists it (from 1), or its id (`s2`).
        step: String,
        /// New status: not_started, in_progress, completed, blocked, failed, skipped.
        #[arg(long)]
        status: Option<String>,
        /// Notes.
        #[arg(long)]
        notes: Option<String>,
        /// Fail with exit 5 unless the plan is still at this version.
        #[arg(long)]
        expected_version: Option<u32>,
    },
    /// Decide about a step while the plan runs: approve or deny a gated step, retry, skip or
    /// abort after a failure under the `ask` policy (`plansmith run --resume` picks it up).
    Decide {
        /// Plan id.
        id: String,
        /// Step id (`s2`), or `all`: every approval the run waits for (`plans pending`).
        step: String,
        /// approve, deny, retry, skip or abort.
        verdict: String,
        /// A note for the log.
        #[arg(long, default_value = "")]
        note: String,
        /// How far an approval reaches: `run` (this step in this run), `plan` (this tool in
        /// every run of this plan) or `call` (this tool with exactly these arguments, in any
        /// plan).
        #[arg(long, default_value = "run")]
        remember: Remember,
        /// Fail with exit 5 unless the plan is still at this version (the one you read).
        #[arg(long)]
        expected_version: Option<u32>,
    },
    /// The approvals the plan's run waits for, all at once: each gated step with its tool and
    /// arguments (decide them together with `plans decide ID all approve`).
    Pending {
        /// Plan id.
        id: String,
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop the plan's run in progress: its running steps are stopped, nothing else starts,
    /// and the run ends `aborted` (a `plansmith run` or `plansmith serve` running it stops at
    /// its next turn; a paused run stops when resumed).
    Stop {
        /// Plan id.
        id: String,
        /// Why (the run's reason becomes "stopped by ACTOR: NOTE").
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Delete a plan and its history.
    Delete {
        /// Plan id.
        id: String,
    },
}

/// What a replanning command needs: the catalog and the model.
#[derive(Debug, Args)]
struct PlannerArgs {
    /// The catalog of plans made without one of their own (a plan made with its caller's
    /// catalog, over HTTP or MCP, replans with that one).
    #[command(flatten)]
    catalog: crate::catalog::CatalogArgs,
    /// Directory of prompts overriding the built-in ones, by file name (`--templates` is an
    /// older name of this flag).
    #[arg(long = "prompts", alias = "templates", value_name = "DIR")]
    prompts: Option<PathBuf>,
    #[command(flatten)]
    model: crate::args::ModelArgs,
}

impl PlannerArgs {
    fn planner(&self) -> Result<Planner, CliError> {
        let catalog = self.catalog.load()?;
        let mut planner = crate::retrieval::planner_loading(
            catalog,
            plansmith_core::PlanOptions::default().top_k,
            || crate::model::load(self.model.model.as_deref()),
        )?;
        if let Some(dir) = &self.prompts {
            planner = planner.with_prompts(Prompts::with_overrides(dir).map_err(CliError::input)?);
        }
        Ok(planner)
    }

    fn catalog_planner(&self) -> Result<Planner, CliError> {
        // Validation needs only the catalog; no model is loaded for a JSON Patch.
        let catalog = self.catalog.files()?;
        Ok(modelless(catalog))
    }
}

/// A planner that never calls a model, for the operations that only validate (a JSON Patch)
/// or plan nothing (accept, reject, step decisions).
pub(crate) fn modelless(catalog: Catalog) -> Planner {
    Planner::new(
        catalog,
        Arc::new(plansmith_core::ScriptedModel::new(Vec::<String>::new())),
    )
}

/// The operations on `store`'s plans, planning with `planner`'s catalog for plans made without
/// one of their own (a plan made with its caller's catalog, over HTTP or MCP, keeps it).
pub(crate) fn service(store: &PlanStore, planner: Planner) -> Service {
    Service::new(store.clone(), Arc::new(Planners::new(Arc::new(planner))))
}

/// Maps a service error to its exit code.
pub fn service_error(err: ServiceError) -> CliError {
    match err {
        ServiceError::Store(err) => store_error(err),
        ServiceError::Plan(err @ PlanError::Model { .. }) => CliError::model(err),
        ServiceError::Plan(err @ PlanError::InvalidRequest(_)) => CliError::input(err),
        // Missing or unknown template arguments.
        err @ ServiceError::Template(_) => CliError::input(err),
        err => CliError::failed(err),
    }
}

/// The operations on `store`'s plans that plan nothing (accept, reject, step decisions, stop).
pub(crate) fn plain_service(store: &PlanStore) -> Service {
    service(store, modelless(Catalog::default()))
}

/// Says on stderr where a plan was saved (`plan --save`, `templates instantiate --save`).
pub(crate) fn say_saved(stored: &StoredPlan, store: &PlanStore) {
    eprintln!(
        "saved plan {} (v{}, {}) in {}",
        stored.plan.id,
        stored.version(),
        stored.state,
        store.location()
    );
}

/// Maps a store error to its exit code.
pub fn store_error(err: StoreError) -> CliError {
    let code = match &err {
        StoreError::NotFound(_) | StoreError::NoActivePlan(_) | StoreError::TemplateNotFound(_) => {
            Exit::NotFound
        }
        StoreError::Conflict { .. }
        | StoreError::AlreadyExists(_)
        | StoreError::InvalidState { .. }
        | StoreError::EmptyPlan(_)
        | StoreError::NotDecidable { .. }
        | StoreError::NotRunning { .. } => Exit::Conflict,
        StoreError::InvalidStep { .. }
        | StoreError::InvalidStatus { .. }
        | StoreError::Invalid { .. }
        | StoreError::BadEdit(_)
        | StoreError::BadCursor(_)
        | StoreError::Location { .. }
        | StoreError::NewerSchema { .. } => Exit::BadInput,
        StoreError::Planning(PlanError::Model { .. }) => Exit::Model,
        _ => Exit::Failed,
    };
    let error = match err {
        StoreError::Invalid { diagnostics } => {
            let lines: Vec<String> = diagnostics.iter().map(|d| format!("  {d}")).collect();
            anyhow!("the edited plan is invalid:\n{}", lines.join("\n"))
        }
        other => anyhow::Error::new(other),
    };
    CliError { code, error }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    crate::current_thread_runtime().map_err(CliError::failed)
}

fn location(store: Option<&str>) -> Result<Location, CliError> {
    let flags = crate::config::Settings {
        store: store
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        ..crate::config::Settings::default()
    };
    let store = crate::config::settings(flags, crate::config::Scope::Command)?.store;
    match store.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        Some(text) => text.parse().map_err(store_error),
        None => Location::default_sqlite().map_err(store_error),
    }
}

pub(crate) async fn open(store: Option<&str>) -> Result<PlanStore, CliError> {
    let location = location(store)?;
    PlanStore::open(&location)
        .await
        .map_err(store_error)
        .map_err(|e| CliError {
            code: e.code,
            error: e
                .error
                .context(format!("cannot open the plan store {location}")),
        })
}

fn print_json(value: &impl serde::Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(CliError::failed)?;
    println!("{text}");
    Ok(())
}

/// Runs `plansmith plans …`.
pub fn run(args: PlansArgs) -> Result<Exit, CliError> {
    let runtime = runtime()?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: PlansArgs) -> Result<Exit, CliError> {
    let store = open(args.store.store.as_deref()).await?;
    let actor = args.actor.actor.as_str();
    let result = match args.command {
        PlansCommand::List {
            owner,
            conversation,
            thread,
            state,
            limit,
            offset,
            cursor,
            exact_total,
            json,
        } => {
            let state = state
                .map(|s| s.parse::<ReviewState>())
                .transpose()
                .map_err(|e| CliError::input(anyhow!(e)))?;
            let page = store
                .list(&ListFilter {
                    owner,
                    conversation_id: conversation,
                    thread_id: thread,
                    state,
                    limit: Some(limit),
                    offset,
                    cursor,
                    total_cap: (!exact_total).then_some(plansmith_store::store::DEFAULT_TOTAL_CAP),
                })
                .await
                .map_err(store_error)?;
            if json {
                print_json(&page)?;
            } else {
                for stored in &page.plans {
                    let plan = &stored.plan;
                    let done = plan
                        .steps
                        .iter()
                        .filter(|s| s.status == plansmith_core::StepStatus::Completed)
                        .count();
                    println!(
                        "{}  v{}  {:<15}  {}/{} done  {}  {}",
                        plan.id,
                        plan.version,
                        stored.state.as_str(),
                        done,
                        plan.steps.len(),
                        stored.updated_at.format("%Y-%m-%d %H:%M"),
                        plan.title
                    );
                }
                let shown = page.plans.len();
                eprintln!(
                    "{shown} of {}{} plan(s){}",
                    page.total,
                    if page.total_exact { "" } else { "+" },
                    page.next_cursor
                        .map(|c| format!("; next page: --cursor {c}"))
                        .unwrap_or_default()
                );
            }
            Ok(Exit::Ok)
        }
        PlansCommand::Show { id, version, json } => {
            match version {
                Some(version) => {
                    let plan = store.get_version(&id, version).await.map_err(store_error)?;
                    if json {
                        print_json(&plan)?;
                    } else {
                        print!("{}", plan.render_text());
                    }
                }
                None => {
                    let stored = store.get(&id).await.map_err(store_error)?;
                    let stored = store.with_run(stored).await.map_err(store_error)?;
                    let stored = plain_service(&store)
                        .estimated(stored)
                        .await
                        .map_err(service_error)?;
                    if json {
                        print_json(&stored)?;
                    } else {
                        print!("{}", stored.render_text());
                    }
                }
            }
            Ok(Exit::Ok)
        }
        PlansCommand::History { id, json } => {
            let history = store.history(&id).await.map_err(store_error)?;
            if json {
                print_json(&history)?;
            } else {
                for record in &history {
                    let n_ops = record.diff.as_array().map_or(0, Vec::len);
                    println!(
                        "v{:<3} {:<12} {:<15} {:<10} {}  {n_ops} change(s)",
                        record.version,
                        record.trigger.as_str(),
                        record.state.as_str(),
                        record.actor,
                        record.created_at.format("%Y-%m-%d %H:%M:%S"),
                    );
                }
            }
            Ok(Exit::Ok)
        }
        PlansCommand::Accept {
            id,
            expected_version,
        } => {
            // What the accepted plan will cost is shown with it.
            let service = plain_service(&store);
            let accepted = match service
                .decide(&id, Decision::Accept, expected_version, actor, None)
                .await
            {
                Ok(decided) => service.estimated(decided.stored).await,
                Err(err) => Err(err),
            };
            show_result(accepted)
        }
        PlansCommand::Pending { id, json } => {
            let pending = plain_service(&store)
                .pending_approvals(&id)
                .await
                .map_err(service_error)?;
            if json {
                print_json(&pending)?;
            } else if pending.is_empty() {
                println!("plan {id}: no approval is pending");
            } else {
                for approval in &pending {
                    println!(
                        "{}  {}  {} {}{}",
                        approval.step_id,
                        approval.title,
                        approval.tool,
                        approval.arguments,
                        if approval.flagged {
                            "  (destructive)"
                        } else {
                            ""
                        }
                    );
                }
                eprintln!(
                    "decide them: plansmith plans decide {id} all approve|deny \
                     [--remember plan|call]"
                );
            }
            Ok(Exit::Ok)
        }
        PlansCommand::Decide {
            id,
            step,
            verdict,
            note,
            remember,
            expected_version,
        } => {
            if step == "all" {
                let verdict: StepVerdict = verdict
                    .parse()
                    .map_err(|e: String| CliError::input(anyhow!(e)))?;
                if !matches!(verdict, StepVerdict::Approve | StepVerdict::Deny)
                    || expected_version.is_some()
                {
                    return Err(CliError::input(anyhow!(
                        "`all` decides the pending approvals: approve or deny them (without \
                         --expected-version)"
                    )));
                }
                let decided = plain_service(&store)
                    .decide_pending(&id, None, verdict, remember, &note, actor)
                    .await
                    .map_err(service_error)?;
                let steps: Vec<String> = decided
                    .iter()
                    .filter_map(|d| d.step_decision.as_ref().map(|s| s.decision.step_id.clone()))
                    .collect();
                if steps.is_empty() {
                    eprintln!("plan {id}: no approval is pending");
                } else {
                    eprintln!(
                        "{} {}: the run goes on with `plansmith run {id} --resume` (a `plansmith \
                         serve` running the plan goes on by itself)",
                        verdict.as_str(),
                        steps.join(", ")
                    );
                }
                return Ok(Exit::Ok);
            }
            let verdict = verdict
                .parse()
                .map_err(|e: String| CliError::input(anyhow!(e)))?;
            let decision = Decision::Step {
                step: step.clone(),
                verdict,
                note,
                remember,
            };
            let decided = plain_service(&store)
                .decide(&id, decision, expected_version, actor, None)
                .await
                .map_err(service_error)?;
            print!("{}", decided.stored.render_text());
            let Some(step_decision) = decided.step_decision else {
                return Err(CliError::failed(anyhow!(
                    "the step decision was not recorded"
                )));
            };
            eprintln!(
                "{} {step}: {}",
                verdict.as_str(),
                match step_decision.applies {
                    plansmith_store::Applies::Now => format!(
                        "the step was waiting for it; the run goes on with `plansmith run {id} \
                         --resume` (a `plansmith serve` running the plan goes on by itself)"
                    ),
                    plansmith_store::Applies::WhenReached => {
                        "recorded; the run applies it when it reaches the step".to_owned()
                    }
                }
            );
            Ok(Exit::Ok)
        }
        PlansCommand::Stop { id, note } => {
            let run = plain_service(&store)
                .stop(&id, &note, actor)
                .await
                .map_err(service_error)?;
            println!(
                "stop requested for plan {id} (its run is {}): a process running it stops at \
                 its next turn{}",
                run.state,
                if run.state == plansmith_store::RunState::Waiting {
                    format!("; a paused run stops when resumed (`plansmith run {id} --resume`)")
                } else {
                    String::new()
                }
            );
            Ok(Exit::Ok)
        }
        PlansCommand::Reject {
            id,
            text,
            expected_version,
        } => show_result(
            plain_service(&store)
                .decide(&id, Decision::Reject(text), expected_version, actor, None)
                .await
                .map(|decided| decided.stored),
        ),
        PlansCommand::Edit {
            id,
            text,
            patch,
            planner,
        } => match (text, patch) {
            (_, Some(patch)) => {
                let patch_text = match patch.strip_prefix('@') {
                    Some(path) => crate::input::read_text(std::path::Path::new(path))
                        .map_err(CliError::input)?,
                    None => patch,
                };
                let patch: serde_json::Value = serde_json::from_str(&patch_text)
                    .context("the patch is not JSON")
                    .map_err(CliError::input)?;
                let decided = service(&store, planner.catalog_planner()?)
                    .decide(&id, Decision::Patch(patch), None, actor, None)
                    .await
                    .map_err(service_error)?;
                for diag in &decided.diagnostics {
                    eprintln!("  {diag}");
                }
                print!("{}", decided.stored.render_text());
                Ok(Exit::Ok)
            }
            (Some(text), None) => {
                refuse_early(&store, &id, ReviewAction::Edit, &planner).await?;
                show_replanned(
                    service(&store, planner.planner()?)
                        .decide(&id, Decision::Edit(text), None, actor, None)
                        .await,
                )
            }
            (None, None) => Err(CliError::input(anyhow!(
                "give feedback text or --patch JSON"
            ))),
        },
        PlansCommand::Answer {
            id,
            text,
            to,
            recommended,
            planner,
        } => {
            refuse_early(&store, &id, ReviewAction::Answer, &planner).await?;
            let decision = match text {
                Some(text) => Decision::Answer(text),
                None if recommended => {
                    let current = store.get(&id).await.map_err(store_error)?;
                    let answers = plansmith_core::recommended_answers(
                        &current.plan.questions,
                        "taken with `plans answer --recommended`",
                    );
                    if answers.is_empty() {
                        return Err(CliError::input(anyhow!(
                            "no question of plan `{id}` has a recommended answer: answer them \
                             with TEXT or --to QUESTION=VALUE"
                        )));
                    }
                    Decision::Answers(answers)
                }
                None => Decision::Answers(
                    to.iter()
                        .map(|pair| match pair.split_once('=') {
                            Some((question, value)) if !question.trim().is_empty() => {
                                Ok(plansmith_core::Answer {
                                    question: question.trim().to_owned(),
                                    value: value.to_owned(),
                                    assumed: None,
                                })
                            }
                            _ => Err(CliError::input(anyhow!(
                                "--to `{pair}`: write QUESTION=VALUE (`q1=Paris`)"
                            ))),
                        })
                        .collect::<Result<_, _>>()?,
                ),
            };
            show_replanned(
                service(&store, planner.planner()?)
                    .decide(&id, decision, None, actor, None)
                    .await,
            )
        }
        PlansCommand::Mark {
            id,
            step,
            status,
            notes,
            expected_version,
        } => {
            let key = step_key(step)?;
            if let StepKey::Index(index) = key {
                let steps = store.get(&id).await.map_err(store_error)?.plan.steps.len();
                if index >= steps {
                    return Err(CliError::input(anyhow!(
                        "plan {id} has {steps} step(s), numbered from 1: there is no step {}",
                        index + 1
                    )));
                }
            }
            show_result(
                store
                    .mark_step(
                        &id,
                        &key,
                        status.as_deref(),
                        notes.as_deref(),
                        expected_version,
                        actor,
                    )
                    .await
                    .map_err(ServiceError::from),
            )
        }
        PlansCommand::Delete { id } => {
            store.delete(&id).await.map_err(store_error)?;
            println!("deleted {id}");
            Ok(Exit::Ok)
        }
    };
    store.close().await;
    result
}

/// Refuses what the plan's state does not allow before the model is loaded (the embedded
/// model may first have to be fetched: 469 MiB, only to be told the plan is accepted), and a
/// replan of a plan that calls tools without a catalog: it could call none of them, and the
/// plan would silently lose its steps.
async fn refuse_early(
    store: &PlanStore,
    id: &str,
    action: ReviewAction,
    planner: &PlannerArgs,
) -> Result<(), CliError> {
    let stored = store.get(id).await.map_err(store_error)?;
    stored.require(action).map_err(store_error)?;
    // A plan made with its caller's catalog replans with that one.
    if planner.catalog.tools.is_none()
        && planner.catalog.mcp.is_none()
        && stored.review.catalog.is_none()
    {
        let mut tools: Vec<&str> = stored
            .plan
            .steps
            .iter()
            .filter_map(|step| match &step.action {
                plansmith_core::Action::Tool { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        tools.sort_unstable();
        tools.dedup();
        if !tools.is_empty() {
            return Err(CliError::input(anyhow!(
                "plan {id} calls tools ({}): give the tool catalog it was planned with \
                 (--tools FILE); without one the replan could call no tool",
                tools.join(", ")
            )));
        }
    }
    Ok(())
}

/// A step as the CLI names it: the number `plans show` lists it under (from 1), or its id.
fn step_key(step: String) -> Result<StepKey, CliError> {
    match step.trim().parse::<usize>() {
        Ok(0) => Err(CliError::input(anyhow!(
            "steps are numbered from 1, as `plans show` lists them (or name the step by its id)"
        ))),
        Ok(number) => Ok(StepKey::Index(number - 1)),
        Err(_) => Ok(StepKey::Id(step)),
    }
}

fn show_result(result: Result<StoredPlan, ServiceError>) -> Result<Exit, CliError> {
    let stored = result.map_err(service_error)?;
    print!("{}", stored.render_text());
    Ok(Exit::Ok)
}

/// [`show_result`] after an edit or answer: when it could not be applied (its replan failed,
/// or the review reached `max_iterations`), says so on stderr and exits with
/// [`Exit::Fallback`].
fn show_replanned(
    result: Result<plansmith_service::Decided, ServiceError>,
) -> Result<Exit, CliError> {
    let stored = result.map_err(service_error)?.stored;
    print!("{}", stored.render_text());
    Ok(not_applied(&stored).unwrap_or(Exit::Ok))
}

/// [`Exit::Fallback`], with the note said on stderr, when the last edit or answer of `stored`
/// could not be applied.
pub(crate) fn not_applied(stored: &StoredPlan) -> Option<Exit> {
    let note = stored.review.note.as_deref()?;
    eprintln!("plansmith: {note}");
    Some(Exit::Fallback)
}
