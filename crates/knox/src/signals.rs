//! The process's stop signals, installed before a run does any work: SIGUSR1,
//! SIGTERM and SIGINT all set one flag, which the run's stop guard watches (every agent
//! is interrupted at its next proposal, with an attested interrupt node; bundles are
//! sealed and the summary written). A second SIGTERM or SIGINT ends the process at
//! once (exit 128 + the signal), for a run that does not stop by itself.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::Result;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};

use crate::error::{Kind, KindExt as _};

/// The flags the handlers set: stop requested, a terminating signal seen, the last
/// signal.
struct Flags {
    stop: Arc<AtomicBool>,
    terminate: Arc<AtomicBool>,
    last: Arc<AtomicUsize>,
}

fn flags() -> &'static Flags {
    static FLAGS: OnceLock<Flags> = OnceLock::new();
    FLAGS.get_or_init(|| Flags {
        stop: Arc::new(AtomicBool::new(false)),
        terminate: Arc::new(AtomicBool::new(false)),
        last: Arc::new(AtomicUsize::new(0)),
    })
}

/// Installs the handlers (once per process; again is harmless but registers twice).
pub fn install() -> Result<()> {
    let f = flags();
    let context = || "installing the signal handlers".to_string();
    for sig in [SIGTERM, SIGINT] {
        // Runs first: exits only when an earlier SIGTERM/SIGINT already asked to stop.
        let code = 128 + sig;
        signal_hook::flag::register_conditional_shutdown(sig, code, f.terminate.clone())
            .kind_context(Kind::Software, context)?;
        signal_hook::flag::register(sig, f.terminate.clone())
            .kind_context(Kind::Software, context)?;
    }
    for sig in [SIGTERM, SIGINT, SIGUSR1] {
        signal_hook::flag::register_usize(sig, f.last.clone(), sig as usize)
            .kind_context(Kind::Software, context)?;
        signal_hook::flag::register(sig, f.stop.clone()).kind_context(Kind::Software, context)?;
    }
    Ok(())
}

/// The stop flag the handlers set (for `StopSignal::from_flag`).
pub fn stop_flag() -> Arc<AtomicBool> {
    flags().stop.clone()
}

/// The name of the signal that asked the run to stop, if one did.
pub fn received() -> Option<&'static str> {
    match i32::try_from(flags().last.load(Ordering::Acquire)).ok()? {
        SIGTERM => Some("SIGTERM"),
        SIGINT => Some("SIGINT"),
        SIGUSR1 => Some("SIGUSR1"),
        _ => None,
    }
}
