//! The commands that evaluate and exercise Knox, as the `knox` CLI runs them: `knox
//! eval` ([`eval`]), `knox bench` ([`bench`]), `knox corpus` ([`corpus`]), `knox
//! regulations` ([`regulations`]: deciding flows given from outside a run, analysing
//! the policy set, and the regulation flags of every run), `knox contract` and `knox
//! demo contracts` ([`contract`]: authoring, checking and approving capability
//! contracts, the flags that bound a run by one, and the contract demo), and the glue
//! every command that runs sessions shares ([`session`]: the platform flags, sessions
//! over the embedded suites, their failures classified for exit codes).

pub mod bench;
pub mod contract;
pub mod corpus;
pub mod eval;
pub mod regulations;
pub mod session;

use knox_command::files::Cap;

/// `eval --pool`.
pub const POOL: Cap = Cap {
    what: "eval --pool",
    bytes: crate::pool::MAX_POOL_BYTES,
};

/// A progress bar of `total` steps on standard error, labelled `msg`: drawn only when
/// standard error is a terminal (indicatif hides it otherwise), so piped and `--json`
/// output stay clean.
pub fn progress_bar(total: u64, msg: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} (eta {eta})",
    ) {
        pb.set_style(style);
    }
    pb.set_message(msg.to_owned());
    pb
}

/// An evaluation's progress on a bar on standard error (drawn only on a terminal).
#[derive(Debug)]
pub struct Bar(indicatif::ProgressBar);

impl Bar {
    /// A bar with no steps yet: each phase sets its own.
    pub fn new() -> Self {
        Self(progress_bar(0, ""))
    }
}

impl Default for Bar {
    fn default() -> Self {
        Self::new()
    }
}

impl crate::Progress for Bar {
    fn begin(&self, phase: &str, total: u64) {
        self.0.set_length(total);
        self.0.set_position(0);
        self.0.set_message(phase.to_string());
    }
    fn advance(&self, n: u64) {
        self.0.inc(n);
    }
    fn note(&self, line: &str) {
        self.0.println(line);
    }
    fn end(&self) {
        self.0.finish_and_clear();
    }
}
