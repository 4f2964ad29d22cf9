//! `plansmith templates …`: plan templates (Spring AI Alibaba jmanus). Save a stored plan or a
//! plan file as a named, versioned template with `{{param}}` placeholders; list, show, delete;
//! instantiate with arguments into a new plan, validated again against the catalog given.
//!
//! Exit codes, besides the common ones: 4 when the template (or the plan to save) does not
//! exist; `instantiate` exits 1 when the new plan has errors against the catalog (a tool that
//! disappeared, an argument its schema no longer accepts) — the diagnostics are printed and
//! nothing is saved — and 2 for missing or unknown template arguments.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, anyhow};
use chrono::Utc;
use clap::{Args, Subcommand};
use plansmith_core::parse::{self, ParseDefaults};
use plansmith_core::{Plan, PlanOptions, PlanTemplate, Severity, TemplateParameter};
use plansmith_service::Instantiation;
use plansmith_store::PlanStore;

use crate::args::{ActorArgs, StoreArgs};
use crate::catalog::CatalogArgs;
use crate::plans_cmd::{open, runtime, store_error};
use crate::{CliError, Exit};
use plansmith_core::Catalog;

/// Arguments of `plansmith templates`.
#[derive(Debug, Args)]
pub struct TemplatesArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    actor: ActorArgs,
    #[command(subcommand)]
    command: TemplatesCommand,
}

#[derive(Debug, Subcommand)]
enum TemplatesCommand {
    /// Save a plan as the next version of a named template.
    Save(SaveArgs),
    /// List the templates (newest version of each).
    List {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a template.
    Show {
        /// Template name.
        name: String,
        /// This version (default: the newest).
        #[arg(long)]
        version: Option<u32>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a template (every version, or one).
    Delete {
        /// Template name.
        name: String,
        /// Only this version.
        #[arg(long)]
        version: Option<u32>,
    },
    /// Make a new plan from a template and arguments, validated against the catalog.
    Instantiate(InstantiateArgs),
}

#[derive(Debug, Args)]
struct SaveArgs {
    /// Template name (letters, digits, `_`, `-`, `.`).
    name: String,
    /// The stored plan to save (see `plansmith plans list`).
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    plan: Option<String>,
    /// A plan file in any accepted shape, with `{{param}}` placeholders or not.
    #[arg(long)]
    file: Option<PathBuf>,
    /// A parameter: `NAME` (the plan already has `{{NAME}}`), or `NAME=TEXT` (every `TEXT` in
    /// the plan becomes `{{NAME}}`). Repeatable.
    #[arg(long = "param", value_name = "NAME[=TEXT]")]
    params: Vec<String>,
    /// A default value: `NAME=VALUE` (the parameter becomes optional). Repeatable.
    #[arg(long = "default", value_name = "NAME=VALUE")]
    defaults: Vec<String>,
    /// What a parameter means: `NAME=TEXT`. Repeatable.
    #[arg(long = "describe", value_name = "NAME=TEXT")]
    descriptions: Vec<String>,
    /// What the template is for.
    #[arg(long, default_value = "")]
    description: String,
    /// Print the saved template as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct InstantiateArgs {
    /// Template name.
    name: String,
    /// This version (default: the newest).
    #[arg(long)]
    version: Option<u32>,
    /// A template argument `NAME=VALUE` (repeatable).
    #[arg(long = "arg", value_name = "NAME=VALUE")]
    args: Vec<String>,
    /// The catalog the new plan is validated against.
    #[command(flatten)]
    catalog: CatalogArgs,
    /// The user confirmed recurring schedules.
    #[arg(long)]
    allow_recurring: bool,
    /// Most steps.
    #[arg(long, default_value_t = PlanOptions::default().max_steps)]
    max_steps: usize,
    /// Store the new plan (awaiting review); its id is printed on stderr.
    #[arg(long)]
    save: bool,
    /// Record the new plan in this conversation.
    #[arg(long)]
    conversation: Option<String>,
    /// Print the plan document as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `plansmith templates`.
pub fn run(args: TemplatesArgs) -> Result<Exit, CliError> {
    // The catalog a new plan is validated against is read, and its MCP servers asked for their
    // tools (on a runtime of their own), before the store's runtime starts.
    let catalog = match &args.command {
        TemplatesCommand::Instantiate(instantiate) => Some(instantiate.catalog.load()?),
        _ => None,
    };
    let runtime = runtime()?;
    runtime.block_on(async {
        let store = open(args.store.store.as_deref()).await?;
        let result = dispatch(&store, args.command, &args.actor.actor, catalog).await;
        store.close().await;
        result
    })
}

async fn dispatch(
    store: &PlanStore,
    command: TemplatesCommand,
    actor: &str,
    catalog: Option<Catalog>,
) -> Result<Exit, CliError> {
    match command {
        TemplatesCommand::Save(args) => save(store, args, actor).await,
        TemplatesCommand::List { json } => {
            let entries = store.list_templates().await.map_err(store_error)?;
            if json {
                let list: Vec<serde_json::Value> = entries
                    .iter()
                    .map(|e| {
                        serde_json::json!({
                            "name": e.latest.name,
                            "version": e.latest.version,
                            "versions": e.versions,
                            "description": e.latest.description,
                            "parameters": e.latest.parameters,
                            "created_at": e.latest.created_at,
                        })
                    })
                    .collect();
                print_json(&list)?;
            } else if entries.is_empty() {
                println!("no templates");
            } else {
                for entry in &entries {
                    let t = &entry.latest;
                    let params: Vec<&str> = t.parameters.iter().map(|p| p.name.as_str()).collect();
                    println!(
                        "{} v{} ({} version(s)) [{}] {}",
                        t.name,
                        t.version,
                        entry.versions,
                        params.join(", "),
                        t.description
                    );
                }
            }
            Ok(Exit::Ok)
        }
        TemplatesCommand::Show {
            name,
            version,
            json,
        } => {
            let template = store
                .get_template(&name, version)
                .await
                .map_err(store_error)?;
            if json {
                print_json(&template)?;
            } else {
                print!("{}", render(&template));
            }
            Ok(Exit::Ok)
        }
        TemplatesCommand::Delete { name, version } => {
            let n = store
                .delete_template(&name, version)
                .await
                .map_err(store_error)?;
            eprintln!("deleted {n} version(s) of template {name}");
            Ok(Exit::Ok)
        }
        TemplatesCommand::Instantiate(args) => {
            instantiate(store, args, actor, catalog.unwrap_or_default()).await
        }
    }
}

async fn save(store: &PlanStore, args: SaveArgs, actor: &str) -> Result<Exit, CliError> {
    let plan = match (&args.plan, &args.file) {
        (Some(id), _) => store.get(id).await.map_err(store_error)?.plan,
        (None, Some(file)) => read_plan(file)?,
        (None, None) => return Err(CliError::input(anyhow!("give --plan ID or --file FILE"))),
    };
    let mut literals = Vec::new();
    let mut parameters = Vec::new();
    for param in &args.params {
        let (name, literal) = match param.split_once('=') {
            Some((name, literal)) => (name.trim(), Some(literal)),
            None => (param.trim(), None),
        };
        if let Some(literal) = literal {
            literals.push((name.to_owned(), literal.to_owned()));
        }
        parameters.push(TemplateParameter::new(name));
    }
    for (list, what) in [
        (&args.defaults, "default"),
        (&args.descriptions, "describe"),
    ] {
        for item in list {
            let (name, value) = pair(item, what)?;
            let parameter = parameters
                .iter_mut()
                .find(|p| p.name == name)
                .ok_or_else(|| {
                    CliError::input(anyhow!("--{what} {name}: no --param {name} was given"))
                })?;
            if what == "default" {
                parameter.default = Some(value);
            } else {
                parameter.description = value;
            }
        }
    }
    let plan = PlanTemplate::parameterize(&plan, &literals);
    let template = PlanTemplate::new(&args.name, &args.description, plan, parameters)
        .map_err(CliError::input)?;
    let saved = store
        .save_template(template, actor)
        .await
        .map_err(store_error)?;
    if args.json {
        print_json(&saved)?;
    } else {
        print!("{}", render(&saved));
    }
    eprintln!("saved template {} v{}", saved.name, saved.version);
    Ok(Exit::Ok)
}

async fn instantiate(
    store: &PlanStore,
    args: InstantiateArgs,
    actor: &str,
    catalog: Catalog,
) -> Result<Exit, CliError> {
    let mut arguments = BTreeMap::new();
    for item in &args.args {
        let (name, value) = pair(item, "arg")?;
        arguments.insert(name, value);
    }
    let service = crate::plans_cmd::service(store, crate::plans_cmd::modelless(catalog));
    let mut what = Instantiation::new(args.name.clone(), arguments);
    what.version = args.version;
    what.options.max_steps = args.max_steps;
    what.options.allow_recurring = args.allow_recurring;
    what.conversation_id = args.conversation.clone();
    let instance = service
        .instantiate(&what)
        .await
        .map_err(crate::plans_cmd::service_error)?;
    for diagnostic in &instance.diagnostics {
        eprintln!("{diagnostic}");
    }
    if !instance.is_valid() {
        let errors = instance
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        eprintln!(
            "the plan from template {} v{} is invalid against the catalog (a tool gone or changed, or an argument that does not fit): {errors} error(s); nothing saved",
            instance.template, instance.version
        );
        return Ok(Exit::Failed);
    }
    if args.json {
        print_json(&instance.plan)?;
    } else {
        print!("{}", instance.plan.render_text());
    }
    if args.save {
        let stored = service
            .submit_instance(instance, actor)
            .await
            .map_err(crate::plans_cmd::service_error)?;
        crate::plans_cmd::say_saved(&stored, store);
    }
    Ok(Exit::Ok)
}

fn pair(item: &str, what: &str) -> Result<(String, String), CliError> {
    item.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| CliError::input(anyhow!("--{what} `{item}`: expected NAME=VALUE")))
}

fn read_plan(path: &std::path::Path) -> Result<Plan, CliError> {
    let text = crate::input::read_text(path).map_err(CliError::input)?;
    let plan_id = plansmith_core::Plan::new_id();
    let defaults = ParseDefaults {
        plan_id: &plan_id,
        goal: "",
        locale: "en-US",
        now: Utc::now(),
    };
    parse::parse(&text, &defaults)
        .map(|parsed| parsed.plan)
        .with_context(|| format!("{} is not a plan in any accepted shape", path.display()))
        .map_err(CliError::input)
}

fn render(template: &PlanTemplate) -> String {
    let mut out = format!("Template {} v{}", template.name, template.version);
    if !template.description.is_empty() {
        out.push_str(&format!(" — {}", template.description));
    }
    out.push('\n');
    for parameter in &template.parameters {
        out.push_str(&format!("  param {{{{{}}}}}", parameter.name));
        if let Some(default) = &parameter.default {
            out.push_str(&format!(" (default {default:?})"));
        }
        if !parameter.description.is_empty() {
            out.push_str(&format!(": {}", parameter.description));
        }
        out.push('\n');
    }
    out.push_str(&template.plan.render_text());
    out
}

fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(CliError::failed)?;
    println!("{text}");
    Ok(())
}
