//! `knox log`: an auditor's watch over a transparency log served in the C2SP formats
//! (`knox serve`'s at `/tlog`, or any other tlog-tiles log): keep a checkpoint, and
//! check later that the log still extends it.

use std::path::{Path, PathBuf};

use crate::tlog::audit::{AuditError, Auditor, Observed};
use crate::tlog::note::{Note, NoteKey};
use anyhow::Result;
use knox_types::digest::Digest;

use knox_verify_cli::error::{Kind, fail};

/// The exit codes of every `knox log` command.
macro_rules! exit {
    () => {
        "  0   the checkpoint verifies (and extends the kept one, with every --entry in it)\
   \n  1   the log misbehaved: a fork, a rollback, a checkpoint that does not extend the kept one,\
   \n      a bad signature, a malformed tile, an --entry not in the log\
   \n  2   fewer pinned witnesses cosigned the checkpoint than --quorum"
    };
}

/// `knox log` commands.
#[derive(Debug, clap::Subcommand)]
pub enum LogCommand {
    /// Fetch the log's checkpoint, check its signatures, and keep it in a file.
    #[command(after_help = knox_verify_cli::exit_codes!(exit!()))]
    Head(HeadArgs),
    /// Check that the log's newest checkpoint extends a kept one (and holds given entries).
    #[command(after_help = knox_verify_cli::exit_codes!(exit!()))]
    Verify(VerifyArgs),
    /// Check the log every interval, keeping each checkpoint that extends the last.
    #[command(after_help = knox_verify_cli::exit_codes!(exit!()))]
    Watch(WatchArgs),
}

/// Which log, and whose signatures count.
#[derive(Debug, clap::Args)]
pub struct LogSource {
    /// The log's URL prefix: `http://HOST:PORT/tlog` for `knox serve`.
    #[arg(long, value_name = "URL")]
    pub log: String,
    /// The log's key, pinned: a C2SP verifier key (`NAME+ID+BASE64`) or a file holding
    /// one (`knox serve` writes `log.vkey` beside its log key).
    #[arg(long, value_name = "VKEY")]
    pub log_key: String,
    /// A witness whose cosignature counts, as a verifier key or a file (repeatable).
    #[arg(long, value_name = "VKEY")]
    pub witness: Vec<String>,
    /// How many of the witnesses must have cosigned each checkpoint (default: all).
    #[arg(long, value_name = "N")]
    pub quorum: Option<usize>,
}

/// Arguments of `knox log head`.
#[derive(Debug, clap::Args)]
pub struct HeadArgs {
    #[command(flatten)]
    pub source: LogSource,
    /// Where to keep the checkpoint (replaced).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// Arguments of `knox log verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub source: LogSource,
    /// The kept checkpoint (`knox log head --out`).
    #[arg(long, value_name = "FILE", value_parser = knox_verify_cli::files::path)]
    pub from: PathBuf,
    /// An entry that must be in the log: `INDEX:SHA256` (a receipt's index and the
    /// submission's digest). Repeatable.
    #[arg(long, value_name = "INDEX:SHA256")]
    pub entry: Vec<String>,
    /// Keep the newer checkpoint in `--from` once it is checked.
    #[arg(long)]
    pub update: bool,
}

/// Arguments of `knox log watch`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub source: LogSource,
    /// The kept checkpoint, replaced by each newer one that extends it.
    #[arg(long, value_name = "FILE", value_parser = knox_verify_cli::files::path)]
    pub from: PathBuf,
    /// Seconds between checks.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub interval: u64,
    /// Stop after this many checks (default: watch until stopped or the log misbehaves).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// Runs a `knox log` command.
pub fn run(c: &LogCommand) -> Result<i32> {
    match c {
        LogCommand::Head(a) => {
            let auditor = auditor(&a.source)?;
            let seen = match auditor.checkpoint() {
                Ok(seen) => seen,
                Err(e) => return judged(e),
            };
            keep(&a.out, &seen)?;
            println!(
                "kept the checkpoint of `{}` at size {} in {}{}",
                seen.checkpoint.origin,
                seen.checkpoint.size,
                a.out.display(),
                cosigners(&seen)
            );
            Ok(0)
        }
        LogCommand::Verify(a) => {
            let mut auditor = auditor(&a.source)?;
            let entries = a
                .entry
                .iter()
                .map(|e| parse_entry(e))
                .collect::<Result<Vec<_>>>()?;
            check(&mut auditor, &a.from, &entries, a.update)
        }
        LogCommand::Watch(a) => {
            let mut auditor = auditor(&a.source)?;
            let mut n = 0;
            loop {
                let code = check(&mut auditor, &a.from, &[], true)?;
                n += 1;
                if code != 0 || a.count.is_some_and(|c| n >= c) {
                    return Ok(code);
                }
                std::thread::sleep(std::time::Duration::from_secs(a.interval));
            }
        }
    }
}

/// A verifier key given as text or as a file holding it.
pub fn read_vkey(arg: &str) -> Result<NoteKey> {
    let p = Path::new(arg);
    let text = if p.is_file() {
        knox_verify_cli::files::read_text(p, knox_verify_cli::files::KEY)?
    } else {
        arg.to_owned()
    };
    NoteKey::parse(&text).map_err(|e| knox_verify_cli::files::usage(format!("`{arg}`: {e}")))
}

fn auditor(s: &LogSource) -> Result<Auditor> {
    let witnesses = s
        .witness
        .iter()
        .map(|w| read_vkey(w))
        .collect::<Result<Vec<_>>>()?;
    let quorum = s.quorum.unwrap_or(witnesses.len());
    if quorum > witnesses.len() {
        return Err(knox_verify_cli::files::usage(format!(
            "--quorum {quorum} with {} --witness",
            witnesses.len()
        )));
    }
    Auditor::new(&s.log, read_vkey(&s.log_key)?, witnesses, quorum)
        .map_err(|e| knox_verify_cli::files::usage(e.to_string()))
}

fn parse_entry(e: &str) -> Result<(u64, Digest)> {
    let bad = || knox_verify_cli::files::usage(format!("--entry `{e}`: not INDEX:SHA256"));
    let (i, d) = e.split_once(':').ok_or_else(bad)?;
    Ok((
        i.parse().map_err(|_| bad())?,
        Digest::from_hex(d).map_err(|_| bad())?,
    ))
}

/// The exit status for what the audit found (an unreachable log is an error).
fn judged(e: AuditError) -> Result<i32> {
    match e {
        AuditError::Url(_) => Err(knox_verify_cli::files::usage(e.to_string())),
        AuditError::Fetch { .. } => Err(fail(Kind::Unavailable, e.to_string())),
        AuditError::Quorum { .. } => {
            eprintln!("knox log: {e}");
            Ok(2)
        }
        _ => {
            eprintln!("knox log: MISBEHAVIOUR: {e}");
            Ok(1)
        }
    }
}

fn read_kept(p: &Path) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let cap = knox_verify_cli::files::SMALL.bytes;
    let mut out = Vec::new();
    std::fs::File::open(p)
        .and_then(|f| f.take(cap + 1).read_to_end(&mut out))
        .map_err(|e| fail(Kind::NoInput, format!("cannot read `{}`: {e}", p.display())))?;
    if out.len() as u64 > cap {
        return Err(knox_verify_cli::files::bad_input(
            p,
            "a checkpoint",
            "larger than 1 MiB",
        ));
    }
    Ok(out)
}

fn keep(p: &Path, seen: &Observed) -> Result<()> {
    knox_verify_cli::files::write_file(p, seen.note.to_text())
}

fn cosigners(seen: &Observed) -> String {
    if seen.cosigned.is_empty() {
        String::new()
    } else {
        let names: Vec<_> = seen.cosigned.iter().map(|(n, _)| n.as_str()).collect();
        format!("; cosigned by {}", names.join(", "))
    }
}

/// One check: the kept checkpoint (its signature again), the newest, their consistency,
/// the entries; the newer one kept when `update`.
fn check(
    auditor: &mut Auditor,
    from: &Path,
    entries: &[(u64, Digest)],
    update: bool,
) -> Result<i32> {
    // The kept checkpoint is this command's state, replaced in place by `--update` and
    // `watch`: read directly, not as an input (inputs are never written over).
    let text = read_kept(from)?;
    let kept = Note::parse(&text)
        .and_then(|n| auditor.kept(&n))
        .map_err(|e| knox_verify_cli::files::bad_input(from, "a checkpoint of this log", e))?;
    let seen = match auditor.checkpoint() {
        Ok(s) => s,
        Err(e) => return judged(e),
    };
    if let Err(e) = auditor.check_extends(&kept, &seen.checkpoint) {
        return judged(e);
    }
    for (i, d) in entries {
        if let Err(e) = auditor.check_entry(&seen.checkpoint, *i, d) {
            return judged(e);
        }
    }
    if update {
        keep(from, &seen)?;
    }
    println!(
        "the log `{}` at size {} extends the kept checkpoint of size {}{}{}",
        seen.checkpoint.origin,
        seen.checkpoint.size,
        kept.size,
        if entries.is_empty() {
            String::new()
        } else {
            format!("; {} entries included", entries.len())
        },
        cosigners(&seen)
    );
    Ok(0)
}
