//! What `plansmith plan` shows on stderr while it plans: the model at work (a spinner with the
//! characters written so far and the time), each step as soon as the model finished writing
//! it, and each rejected attempt with the problems its repair quotes. The embedded model takes
//! seconds for a plan; without this the command printed nothing until it was done.
//!
//! On a terminal it is live (`auto`, the default); `--progress always` prints plain lines when
//! stderr is not a terminal (logs, CI), and `never` prints nothing. The plan itself still goes
//! to stdout, as before.

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use plansmith_core::{Action, Diagnostic, PlanEvent, Step};

/// When `plansmith plan` shows its progress on stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// Live on a terminal, nothing otherwise.
    #[default]
    Auto,
    /// Live on a terminal, plain lines otherwise.
    Always,
    /// Nothing.
    Never,
}

/// Shows planning events on stderr (see the module docs).
pub struct PlanProgress {
    /// The spinner on a terminal; `None`: plain lines.
    bar: Option<ProgressBar>,
    model: String,
    /// Characters the model wrote in the current attempt.
    written: usize,
}

impl PlanProgress {
    /// A reporter for planning with `model`, or `None` when `mode` shows nothing here.
    pub fn new(mode: ProgressMode, model: String) -> Option<PlanProgress> {
        let terminal = std::io::stderr().is_terminal();
        let bar = match (mode, terminal) {
            (ProgressMode::Never, _) | (ProgressMode::Auto, false) => return None,
            (_, true) => {
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.enable_steady_tick(Duration::from_millis(100));
                Some(bar)
            }
            (ProgressMode::Always, false) => None,
        };
        Some(PlanProgress {
            bar,
            model,
            written: 0,
        })
    }

    /// Shows one event.
    pub fn show(&mut self, event: PlanEvent) {
        match event {
            PlanEvent::AttemptStarted { attempt, .. } => {
                self.written = 0;
                let text = if attempt == 0 {
                    format!("planning with {}", self.model)
                } else {
                    format!("attempt {}: repairing with {}", attempt + 1, self.model)
                };
                match &self.bar {
                    Some(bar) => bar.set_message(crate::term::safe(&text).into_owned()),
                    None => eprintln!("{text}"),
                }
            }
            PlanEvent::Token { attempt, text } => {
                self.written += text.chars().count();
                if let Some(bar) = &self.bar {
                    let what = if attempt == 0 {
                        "planning"
                    } else {
                        "repairing"
                    };
                    bar.set_message(format!(
                        "{what} with {}: {} characters written",
                        self.model, self.written
                    ));
                }
            }
            PlanEvent::Step {
                step, diagnostics, ..
            } => self.line(step_line(&step, &diagnostics)),
            PlanEvent::Repair { attempt, problems } => {
                let first = problems.first().map_or("", String::as_str);
                let more = match problems.len() {
                    0 | 1 => String::new(),
                    n => format!(" (and {} more)", n - 1),
                };
                self.line(format!("attempt {} rejected: {first}{more}", attempt + 1));
            }
        }
    }

    /// Removes the spinner (before the plan is printed).
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }

    fn line(&self, text: String) {
        match &self.bar {
            Some(bar) => bar.println(crate::term::safe(&text)),
            None => eprintln!("{text}"),
        }
    }
}

/// `  s1 get_weather: Get the weather in Paris`, with the step's first error if it has one.
fn step_line(step: &Step, diagnostics: &[Diagnostic]) -> String {
    let what = match &step.action {
        Action::Tool { name, .. } => name.as_str(),
        Action::Agent { agent, .. } => agent.as_str(),
        Action::Task { .. } => "task",
        Action::Reply { .. } => "reply",
    };
    let mut line = format!("  {} {what}: {}", step.id, step.title);
    let errors: Vec<&Diagnostic> = diagnostics.iter().filter(|d| d.is_error()).collect();
    if let Some(first) = errors.first() {
        line.push_str(&format!(" ({}", first.message));
        if errors.len() > 1 {
            line.push_str(&format!("; {} more problems", errors.len() - 1));
        }
        line.push(')');
    }
    line
}
