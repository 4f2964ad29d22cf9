//! The stop signals the long-running commands handle (`run`, `serve`).

use anyhow::Context;

/// The stop signals of `plansmith run` and `plansmith serve`: SIGINT (Ctrl-C) and SIGTERM
/// (what service managers and `kill` send). Once installed they no longer kill the process:
/// the command stops what it runs (a command tool runs in its own process group and does not
/// get the terminal's Ctrl-C itself).
pub(crate) struct Interrupts {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

/// Which stop signal arrived.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Interrupt {
    /// SIGINT.
    Interrupt,
    /// SIGTERM.
    Terminate,
}

impl Interrupt {
    /// How the command reports it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Interrupt::Interrupt => "interrupted (Ctrl-C)",
            Interrupt::Terminate => "terminated (SIGTERM)",
        }
    }

    /// 128 + the signal's number, as a shell reports a process the signal ended.
    pub(crate) fn exit_code(self) -> crate::Exit {
        match self {
            Interrupt::Interrupt => crate::Exit::Interrupted,
            Interrupt::Terminate => crate::Exit::Terminated,
        }
    }
}

impl Interrupts {
    /// Installs the handlers.
    pub(crate) fn install() -> anyhow::Result<Interrupts> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Interrupts {
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
        })
    }

    /// The next signal.
    pub(crate) async fn next(&mut self) -> Interrupt {
        tokio::select! {
            _ = self.interrupt.recv() => Interrupt::Interrupt,
            _ = self.terminate.recv() => Interrupt::Terminate,
        }
    }
}
