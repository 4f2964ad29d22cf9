//! `plansmith plan --save` and `--review`: the plan stored for review, and the review in the
//! terminal (accept, edit with feedback, answer questions, reject), one reply per line. After
//! `--review` the exit code is 0 for an accepted plan, 1 for a rejected or stopped one, 10 when
//! the review was left open (quit or end of input), 11 when it was accepted as it stood at
//! `--max-iterations`, the last edit not applied.

use std::io::{BufRead, Write};

use clap::Args;
use plansmith_core::{Outcome, PlanRequest, Planner};
use plansmith_service::{Decision, Planned, Service, ServiceError};
use plansmith_store::{MaxIterationsPolicy, Review, ReviewState, StoreError, StoredPlan};

use crate::plans_cmd::{not_applied, open, runtime, service, service_error, store_error};
use crate::{CliError, Exit};

/// `plan` flags for storing and reviewing what was planned.
#[derive(Debug, Clone, Args)]
pub struct SaveArgs {
    /// Store the plan (see `plansmith plans`); its id is printed on stderr.
    #[arg(long)]
    pub save: bool,
    /// Review the plan in the terminal: accept, edit with feedback, answer questions, reject
    /// (implies --save). Reads the replies from stdin, one per line.
    #[arg(long)]
    pub review: bool,
    /// Accept the plan without review (questions still wait for answers).
    #[arg(long)]
    pub auto_accept: bool,
    /// Review rounds (edits, answers) before the plan is used as is (or stopped, with
    /// --stop-at-max-iterations).
    #[arg(long, default_value_t = 3)]
    pub max_iterations: u32,
    /// At --max-iterations, stop instead of using the plan as is.
    #[arg(long)]
    pub stop_at_max_iterations: bool,
    #[command(flatten)]
    pub store: crate::args::StoreArgs,
}

/// Opens the store `--save` or `--review` will write to, and closes it again: a store that
/// cannot be opened is an error before planning, not after it.
pub fn check_store(args: &SaveArgs) -> Result<(), CliError> {
    if !args.save && !args.review {
        return Ok(());
    }
    runtime()?.block_on(async {
        let store = open(args.store.store.as_deref()).await?;
        store.close().await;
        Ok(())
    })
}

/// After `plansmith plan`: stores the outcome (`--save`) and runs the terminal review
/// (`--review`). Returns the exit code to use; `code` is the one planning gave.
pub fn after_plan(
    args: &SaveArgs,
    planner: Planner,
    request: &PlanRequest,
    outcome: Outcome,
    code: Exit,
) -> Result<Exit, CliError> {
    if !args.save && !args.review {
        return Ok(code);
    }
    let runtime = runtime()?;
    runtime.block_on(async {
        let store = open(args.store.store.as_deref()).await?;
        let review = Review {
            auto_accept: args.auto_accept,
            max_iterations: args.max_iterations,
            on_max_iterations: if args.stop_at_max_iterations {
                MaxIterationsPolicy::Stop
            } else {
                MaxIterationsPolicy::UseAsIs
            },
            ..Review::default()
        };
        let actor = std::env::var("PLANSMITH_ACTOR").unwrap_or_else(|_| "cli".into());
        let service = service(&store, planner);
        let planned = Planned {
            outcome,
            catalog: None,
        };
        let stored = service
            .submit(planned, request, review, &actor)
            .await
            .map_err(service_error)?
            .stored;
        crate::plans_cmd::say_saved(&stored, &store);
        let result = if args.review {
            review_loop(&service, stored, &actor).await
        } else {
            Ok(code)
        };
        store.close().await;
        result
    })
}

/// Earlier plans of a conversation loaded for `plan --conversation`.
const MEMORY_LOAD: u32 = 20;

/// The earlier turns of `conversation` (its stored plans, oldest first) for
/// `plan --conversation`. A conversation with no plans yet has no turns.
pub fn conversation_turns(
    store: Option<&str>,
    conversation: &str,
) -> Result<Vec<plansmith_core::Turn>, CliError> {
    runtime()?.block_on(async {
        let store = open(store).await?;
        let plans = store
            .conversation_plans(conversation, MEMORY_LOAD)
            .await
            .map_err(store_error);
        store.close().await;
        Ok(plans?
            .iter()
            .map(|stored| plansmith_core::Turn::from_plan(&stored.plan))
            .collect())
    })
}

/// The interactive review: shows the plan, reads one reply per line from stdin.
async fn review_loop(
    service: &Service,
    mut stored: StoredPlan,
    actor: &str,
) -> Result<Exit, CliError> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        match stored.state {
            // Accepted as it stood at max_iterations: the last edit was not applied.
            ReviewState::Accepted => {
                println!("{}", stored.render_text().trim_end());
                return Ok(not_applied(&stored).unwrap_or(Exit::Ok));
            }
            ReviewState::Rejected | ReviewState::Stopped => {
                println!("{}", stored.render_text().trim_end());
                return Ok(Exit::Failed);
            }
            _ => {}
        }
        println!("{}", stored.render_text().trim_end());
        let prompt = if stored.state == ReviewState::NeedsInput {
            "Answer the questions (or: reject [why] / quit):"
        } else {
            "accept / edit <feedback> / reject [why] / quit:"
        };
        println!("{prompt}");
        std::io::stdout().flush().map_err(CliError::failed)?;
        let Some(line) = lines.next() else {
            eprintln!(
                "end of input: plan {} left {}",
                stored.plan.id, stored.state
            );
            return Ok(Exit::NeedsInput);
        };
        let line = line.map_err(CliError::failed)?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (word, rest) = match line.split_once(char::is_whitespace) {
            Some((word, rest)) => (word.to_lowercase(), rest.trim()),
            None => (line.to_lowercase(), ""),
        };
        // The version shown above is the one decided on.
        let decision = match (word.as_str(), stored.state) {
            ("q" | "quit" | "exit", _) => {
                eprintln!("plan {} left {}", stored.plan.id, stored.state);
                return Ok(Exit::NeedsInput);
            }
            ("r" | "reject", _) => {
                Decision::Reject(Some(rest.to_owned()).filter(|r| !r.is_empty()))
            }
            ("answer", _) => Decision::Answer(rest.to_owned()),
            (_, ReviewState::NeedsInput) => Decision::Answer(line.to_owned()),
            ("a" | "accept" | "y" | "yes", _) => Decision::Accept,
            ("e" | "edit", _) => Decision::Edit(rest.to_owned()),
            // Anything else is feedback for the planner.
            _ => Decision::Edit(line.to_owned()),
        };
        // Accept and reject name the version shown, which the person decided on.
        let shown =
            matches!(decision, Decision::Accept | Decision::Reject(_)).then(|| stored.version());
        let result = service
            .decide(&stored.plan.id, decision, shown, actor, None)
            .await
            .map(|decided| decided.stored);
        match result {
            Ok(next) => {
                stored = next;
                // A failed replan is said before the plan is shown again (its note is in it).
                if stored.state != ReviewState::Accepted
                    && let Some(note) = &stored.review.note
                {
                    eprintln!("plansmith: {note}");
                }
            }
            Err(ServiceError::Store(
                err @ (StoreError::BadEdit(_)
                | StoreError::InvalidState { .. }
                | StoreError::EmptyPlan(_)
                | StoreError::Invalid { .. }),
            )) => eprintln!("{err}"),
            // Someone else changed the plan since it was shown: show it again, decide again.
            Err(ServiceError::Store(err @ StoreError::Conflict { .. })) => {
                eprintln!("{err}; here it is as it is now");
                stored = service
                    .store()
                    .get(&stored.plan.id)
                    .await
                    .map_err(store_error)?;
            }
            Err(err) => return Err(service_error(err)),
        }
    }
}
