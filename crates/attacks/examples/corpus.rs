//! Runs the attack corpus and prints one line per case: `cargo run --example corpus -- [confined|unconfined|both] [ID...]`.
//!
//! The probe is looked up next to the example's own directory (`target/*/knox-probe`);
//! build it first (`cargo build -p knox-attacks`). The unconfined baseline runs under
//! its harness (see `knox_attacks`) and needs root for its namespaces' sake.

use knox_attacks::{self as corpus, Fixture, Mode};
use knox_sandbox::{Sandbox, SandboxConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let modes = match args.first().map(String::as_str) {
        Some("unconfined") => vec![Mode::DangerousUnconfined],
        Some("both") => vec![Mode::Confined, Mode::DangerousUnconfined],
        _ => vec![Mode::Confined],
    };
    let only: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let exe = std::env::current_exe()?;
    let probe = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("knox-probe"))
        .ok_or("no probe path")?;
    let fixture = Fixture::new(probe)?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    for case in corpus::cases() {
        if !only.is_empty() && !only.contains(&case.id) {
            continue;
        }
        for mode in &modes {
            let r = corpus::run_case(&fixture, &sandbox, &case, *mode)?;
            println!(
                "{:<11} {:<32} {:<20} succeeded={:<5} recorded={:<5} as_expected={:<5} {} {}{}",
                case.category,
                case.id,
                format!("{mode:?}"),
                r.attack_succeeded,
                r.recorded,
                r.as_expected,
                r.stand_in.unwrap_or_default(),
                r.detail,
                r.landlock_audit
                    .map(|a| format!(" landlock_audit={a:?}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}
