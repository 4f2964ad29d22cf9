//! `plansmith validate`: reads a plan in any accepted shape (plansmith's document, flat steps,
//! SAGE, deer-flow, ValueCell, OpenManus, nl2sql), validates it against a catalog with the same
//! rules as planning, and prints the diagnostics with the plan, in any shape.

use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::Utc;
use clap::Args;
use plansmith_core::export::{self, SeedFormat};
use plansmith_core::parse::{self, ParseDefaults};
use plansmith_core::validate::validate;
use plansmith_core::{Plan, PlanOptions, Severity};
use serde_json::json;

use crate::catalog::CatalogArgs;
use crate::{CliError, Exit};

/// `plansmith validate` arguments.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Plan file (JSON in any accepted shape), or `-` for standard input.
    file: PathBuf,
    /// The catalog the plan's tool steps and agent tasks are checked against.
    #[command(flatten)]
    catalog: CatalogArgs,
    /// Most steps (longer plans are cut, keeping a closing reply).
    #[arg(long, default_value_t = PlanOptions::default().max_steps)]
    max_steps: usize,
    /// The user confirmed recurring schedules.
    #[arg(long)]
    allow_recurring: bool,
    /// Print the validated plan in this shape (plansmith, sage, deerflow, valuecell,
    /// openmanus, nl2sql).
    #[arg(long)]
    format: Option<SeedFormat>,
    /// Print `{shape, valid, plan, diagnostics}` as JSON.
    #[arg(long, conflicts_with = "format")]
    json: bool,
}

/// Runs `plansmith validate`: exit 0 when the plan has no errors, 1 when it has.
pub fn run(args: ValidateArgs) -> Result<Exit, CliError> {
    let text = read_input(&args.file).map_err(CliError::input)?;
    let catalog = args.catalog.load()?;
    let plan_id = plansmith_core::Plan::new_id();
    let defaults = ParseDefaults {
        plan_id: &plan_id,
        goal: "",
        locale: "en-US",
        now: Utc::now(),
    };
    let parsed = parse::parse(&text, &defaults)
        .with_context(|| {
            format!(
                "{} is not a plan in any accepted shape",
                args.file.display()
            )
        })
        .map_err(CliError::input)?;
    let mut options = PlanOptions::default();
    options.max_steps = args.max_steps;
    options.allow_recurring = args.allow_recurring;
    let (plan, found) = validate(parsed.plan, &catalog, &options);
    let mut diagnostics = parsed.diagnostics;
    diagnostics.extend(found);
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    let code = if errors == 0 { Exit::Ok } else { Exit::Failed };
    if args.json {
        let out = json!({
            "shape": parsed.shape.as_str(),
            "valid": errors == 0,
            "plan": plan,
            "diagnostics": diagnostics,
        });
        let text = serde_json::to_string_pretty(&out).map_err(CliError::failed)?;
        println!("{text}");
        return Ok(code);
    }
    if let Some(format) = args.format {
        print_rendered(&plan, format)?;
    }
    for diagnostic in &diagnostics {
        eprintln!("{diagnostic}");
    }
    eprintln!(
        "{} · read as {} · {} step(s) · {errors} error(s), {} other finding(s)",
        if errors == 0 { "valid" } else { "invalid" },
        parsed.shape.as_str(),
        plan.steps.len(),
        diagnostics.len() - errors,
    );
    Ok(code)
}

/// Prints `plan` as JSON in `format`; what the shape cannot hold goes to stderr.
pub fn print_rendered(plan: &Plan, format: SeedFormat) -> Result<(), CliError> {
    let rendered = export::render(plan, format);
    let text = serde_json::to_string_pretty(&rendered.value).map_err(CliError::failed)?;
    println!("{text}");
    for line in &rendered.lost {
        eprintln!("warning: not in the {format} shape: {line}");
    }
    Ok(())
}

fn read_input(path: &Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        return crate::input::read_bounded(std::io::stdin(), "the plan from standard input");
    }
    crate::input::read_text(path)
}
