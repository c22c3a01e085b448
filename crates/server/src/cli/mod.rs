//! The store's commands, as the `knox` CLI runs them: `knox serve`, `knox submit`,
//! `knox login`, `knox report` (the regulator's evidence store and its clients),
//! `knox log` ([`log`]: an auditor's watch over the transparency log), and a run's live
//! stream into a store ([`Stream`], [`Sealing`]). The conventions (exit codes, file
//! handling) are `knox_verify_cli`'s, shared by every Knox command.

pub mod log;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::client::Client;
use crate::run::{ServeOptions, serve_blocking};
use crate::tlog;
use knox_attest::{PartyKey, keyfile};
use knox_verify_cli::error::{Kind, fail};

/// The default store and log key directory: `$XDG_DATA_HOME/knox/server` (absolute
/// only), else `$HOME/.local/share/knox/server`.
pub fn default_dir() -> Result<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(d) = absolute("XDG_DATA_HOME") {
        return Ok(d.join("knox").join("server"));
    }
    if let Some(h) = absolute("HOME") {
        return Ok(h.join(".local").join("share").join("knox").join("server"));
    }
    Err(knox_verify_cli::files::usage(
        "neither XDG_DATA_HOME nor HOME is set: give --db and --log-key",
    ))
}

/// Arguments of `knox serve`.
#[derive(Debug, clap::Args)]
#[command(after_help = knox_verify_cli::exit_codes!("  0   never: the server runs until stopped"))]
pub struct ServeArgs {
    /// The database: `sqlite:///path/store.db` or `postgres://user:pass@host/db`
    /// (default: an SQLite file `store.db` under `$XDG_DATA_HOME/knox/server`).
    #[arg(long, value_name = "URL")]
    pub db: Option<String>,
    /// Address to listen on (loopback by default).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8787")]
    pub listen: SocketAddr,
    /// Who may use the server: providers and regulators with their public keys, and
    /// each regulator's providers (TOML; see docs/server.md).
    #[arg(long, value_name = "TOML", value_parser = knox_verify_cli::files::path)]
    pub access: Option<PathBuf>,
    /// The transparency log's signing key (`knox keygen`; created, mode 0600, with its
    /// public half `log.pub` beside it, when absent; default: `log.key` beside the
    /// default database).
    #[arg(long, value_name = "KEY", value_parser = knox_verify_cli::files::path)]
    pub log_key: Option<PathBuf>,
    /// The log's name: the first line of its C2SP checkpoints and the name of its key,
    /// e.g. `regulator.example/knox` (default: the store's, else `knox.invalid/` and the
    /// log key's id). A store's log keeps the name it was first given.
    #[arg(long, value_name = "NAME")]
    pub log_origin: Option<String>,
    /// A witness whose cosignatures of the log's checkpoints are kept and served: its
    /// C2SP verifier key (`NAME+ID+BASE64`, type 0x04) or a file holding one. Repeatable.
    #[arg(long, value_name = "VKEY")]
    pub witness: Vec<String>,
    /// INSECURE, not recommended: accept simulated platform evidence as complete.
    #[arg(long)]
    pub allow_simulated: bool,
    /// The regulator's policy (TOML) every submission is verified under.
    #[arg(long, value_name = "TOML", value_parser = knox_verify_cli::files::path)]
    pub policy: Option<PathBuf>,
    /// The regulator's regulation policy set (default: the embedded one).
    #[arg(long, value_name = "DIR", value_parser = knox_verify_cli::files::path)]
    pub policy_set: Option<PathBuf>,
    /// Seconds without a delivery after which a streamed run that was never sealed is
    /// shown as the verified prefix it is (its monitor stopped or died) instead of in
    /// progress.
    #[arg(long, value_name = "SECS", default_value_t = crate::live::DEFAULT_STALE_SECS)]
    pub live_stale: u64,
}

/// The log key at `p`, created when absent; its public half (`.pub` beside it, for
/// auditors and `knox submit --log-key`) is written when absent.
fn load_or_create_log_key(p: &Path) -> Result<PartyKey> {
    let key = if p.symlink_metadata().is_ok() {
        knox_verify_cli::keys::load(p)?
    } else {
        match create_log_key(p)? {
            Some(key) => key,
            // Another server sharing the folder (a replica started at the same time)
            // created it first: the same log key for both.
            None => knox_verify_cli::keys::load(p)?,
        }
    };
    let public = p.with_extension("pub");
    if public.symlink_metadata().is_err() {
        knox_verify_cli::files::write_file(&public, serde_json::to_vec_pretty(&key.public_key())?)?;
    }
    Ok(key)
}

/// A new log key written at `p`; `None` when a file appeared there meanwhile.
fn create_log_key(p: &Path) -> Result<Option<PartyKey>> {
    if let Some(dir) = p.parent() {
        knox_verify_cli::files::create_dir(dir)?;
    }
    let key = PartyKey::generate()?;
    let opts = knox_verify_cli::files::WriteOptions {
        mode: 0o600,
        create_new: true,
    };
    match knox_verify_cli::files::write_atomic_with(p, keyfile::encode(&key)?.as_bytes(), opts) {
        Ok(()) => Ok(Some(key)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(fail(
            Kind::CantCreate,
            format!("cannot create the log key `{}`: {e}", p.display()),
        )),
    }
}

/// Runs the server.
pub fn serve(args: &ServeArgs) -> Result<i32> {
    let db_url = match &args.db {
        Some(u) => u.clone(),
        None => {
            let d = default_dir()?;
            knox_verify_cli::files::create_dir(&d)?;
            format!("sqlite://{}", d.join("store.db").display())
        }
    };
    let log_key_path = match &args.log_key {
        Some(p) => p.clone(),
        None => default_dir()?.join("log.key"),
    };
    let log_key = load_or_create_log_key(&log_key_path)?;
    let mut verifier = crate::Verifier::embedded(args.allow_simulated).map_err(|e| {
        fail(
            Kind::Software,
            format!("the embedded toolkit manifest: {e}"),
        )
    })?;
    if let Some(p) = &args.policy {
        let b = knox_verify_cli::files::read_input(p, knox_verify_cli::files::CONFIG)?;
        verifier.policy = Some(
            knox_hw::policy::RegulatorPolicy::from_toml(&b)
                .map_err(|e| knox_verify_cli::files::bad_input(p, "a regulator policy", e))?,
        );
    }
    if let Some(d) = &args.policy_set {
        verifier.norms = Some(knox_verify_cli::regulations::load(Some(d))?);
    }
    let access = match &args.access {
        Some(p) => {
            let text = knox_verify_cli::files::read_text(p, knox_verify_cli::files::CONFIG)?;
            let base = p.parent().map_or_else(PathBuf::new, Path::to_path_buf);
            Some((text, base))
        }
        None => None,
    };
    let engine = crate::Engine::of_url(&db_url)
        .map_err(|e| knox_verify_cli::files::usage(format!("--db: {e}")))?;
    let witnesses = args
        .witness
        .iter()
        .map(|w| log::read_vkey(w))
        .collect::<Result<Vec<_>>>()?;
    let opts = ServeOptions {
        db_url,
        listen: args.listen,
        access,
        verifier,
        log_key,
        log_origin: args.log_origin.clone(),
        witnesses,
        live_stale_secs: args.live_stale,
    };
    let simulated = args.allow_simulated;
    serve_blocking(opts, |addr, _, vkey| {
        // The log's verifier key, for auditors (`knox log --log-key`).
        let vkey_path = log_key_path.with_extension("vkey");
        if let Err(e) = knox_verify_cli::files::write_file(&vkey_path, format!("{vkey}\n")) {
            eprintln!("knox serve: cannot write {}: {e}", vkey_path.display());
        }
        eprintln!(
            "knox serve: listening on http://{addr} ({} store; log key {}; log `{}`, checkpoints at /tlog/checkpoint){}",
            engine.name(),
            log_key_path.display(),
            vkey.name(),
            if simulated {
                "; INSECURE: simulated platform evidence accepted"
            } else {
                ""
            }
        );
    })
    .map_err(|e| fail(Kind::Unavailable, e.to_string()))?;
    Ok(0)
}

/// Arguments of `knox submit`.
#[derive(Debug, clap::Args)]
#[command(after_help = knox_verify_cli::exit_codes!(
    "  0   every FILE stored and verified complete, each inclusion proof checked\
   \n  1   a FILE was stored but did not verify complete (tampered, prefix, refused)\
   \n  69  the server refused a FILE or could not be reached"
))]
pub struct SubmitArgs {
    /// Evidence bundles or journals.
    #[arg(required = true, value_name = "FILE", value_parser = knox_verify_cli::files::path)]
    pub files: Vec<PathBuf>,
    /// The server, `http://HOST:PORT`.
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// The provider's private key (`knox keygen`).
    #[arg(long, value_name = "KEY", value_parser = knox_verify_cli::files::path)]
    pub key: PathBuf,
    /// The log's public key (`.pub`) to pin: heads signed by another key are refused.
    #[arg(long, value_name = "PUB", value_parser = knox_verify_cli::files::path)]
    pub log_key: Option<PathBuf>,
    /// Print the answers (with their inclusion proofs) as JSON.
    #[arg(long)]
    pub json: bool,
}

fn pinned(p: Option<&Path>) -> Result<Option<knox_types::bundle::PublicKey>> {
    p.map(|p| {
        let text = knox_verify_cli::files::read_text(p, knox_verify_cli::files::KEY)?;
        serde_json::from_str(&text)
            .map_err(|e| knox_verify_cli::files::bad_input(p, "a public key", e))
    })
    .transpose()
}

/// Submits each file; checks each inclusion proof.
pub fn submit(args: &SubmitArgs) -> Result<i32> {
    let key = knox_verify_cli::keys::load(&args.key)?;
    let client =
        Client::new(&args.to, key).map_err(|e| knox_verify_cli::files::usage(e.to_string()))?;
    let pin = pinned(args.log_key.as_deref())?;
    let mut worst = 0;
    let mut out = Vec::new();
    for f in &args.files {
        let bytes = knox_verify_cli::files::read_input(f, knox_verify_cli::files::EVIDENCE)?;
        let r = client
            .submit(&bytes)
            .map_err(|e| fail(Kind::Unavailable, format!("`{}`: {e}", f.display())))?;
        let log_key = pin.clone().unwrap_or_else(|| r.inclusion.head.key.clone());
        tlog::check_inclusion(&r.inclusion, &log_key).map_err(|e| {
            fail(
                Kind::Unavailable,
                format!(
                    "`{}`: the server's inclusion proof does not hold: {e}",
                    f.display()
                ),
            )
        })?;
        if r.outcome != "complete" {
            worst = 1;
        }
        if args.json {
            out.push(serde_json::json!({
                "file": f.display().to_string(), "digest": r.digest, "run_id": r.run_id,
                "outcome": r.outcome, "reason": r.reason, "duplicate": r.duplicate,
                "inclusion": r.inclusion,
            }));
        } else {
            knox_verify_cli::outln!(
                "{}: {} {}{} — log entry {} of {}, root {} (inclusion proof checked)",
                f.display(),
                r.run_id,
                r.outcome.to_uppercase(),
                if r.duplicate { " (already stored)" } else { "" },
                r.inclusion.index,
                r.inclusion.head.tree_size,
                r.inclusion.head.root
            );
            if let Some(reason) = &r.reason {
                knox_verify_cli::outln!("  {reason}");
            }
        }
    }
    if args.json {
        knox_verify_cli::outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(worst)
}

/// Arguments of `knox login`.
#[derive(Debug, clap::Args)]
#[command(after_help = knox_verify_cli::exit_codes!("  0   the link is printed\n  69  the server refused or could not be reached"))]
pub struct LoginArgs {
    /// The server, `http://HOST:PORT`.
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Your private key (`knox keygen`).
    #[arg(long, value_name = "KEY", value_parser = knox_verify_cli::files::path)]
    pub key: PathBuf,
}

/// Prints a browser login link (15 minutes).
pub fn login(args: &LoginArgs) -> Result<i32> {
    let client = Client::new(&args.to, knox_verify_cli::keys::load(&args.key)?)
        .map_err(|e| knox_verify_cli::files::usage(e.to_string()))?;
    let link = client
        .login()
        .map_err(|e| fail(Kind::Unavailable, e.to_string()))?;
    knox_verify_cli::outln!("{link}");
    Ok(0)
}

/// Arguments of `knox report`.
#[derive(Debug, clap::Args)]
#[command(after_help = knox_verify_cli::exit_codes!("  0   the report is written\n  69  the server refused or could not be reached"))]
pub struct ReportArgs {
    /// The provider (a provider's own key needs no name).
    #[arg(long)]
    pub provider: Option<String>,
    /// Start of the period (Unix seconds).
    #[arg(long)]
    pub from: Option<i64>,
    /// End of the period (Unix seconds, exclusive).
    #[arg(long)]
    pub until: Option<i64>,
    /// The server, `http://HOST:PORT`.
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Your private key (`knox keygen`).
    #[arg(long, value_name = "KEY", value_parser = knox_verify_cli::files::path)]
    pub key: PathBuf,
    /// Write the report here.
    #[arg(long, value_name = "FILE", value_parser = knox_verify_cli::files::path)]
    pub out: PathBuf,
    /// The report as PDF (A4, the PDF standard fonts, each run linked back to its
    /// page on the server) instead of HTML.
    #[arg(long)]
    pub pdf: bool,
}

/// Fetches the exit report (HTML or PDF) and writes it.
pub fn report(args: &ReportArgs) -> Result<i32> {
    let key = knox_verify_cli::keys::load(&args.key)?;
    knox_verify_cli::files::refuse_input_as_output(&args.out)?;
    let client =
        Client::new(&args.to, key).map_err(|e| knox_verify_cli::files::usage(e.to_string()))?;
    let mut q = Vec::new();
    if let Some(p) = &args.provider {
        if !p
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(knox_verify_cli::files::usage(
                "--provider: letters, digits, `-`, `_`, `.`",
            ));
        }
        q.push(format!("provider={p}"));
    }
    q.extend(args.from.map(|v| format!("from={v}")));
    q.extend(args.until.map(|v| format!("to={v}")));
    if args.pdf {
        q.push("format=pdf".into());
    }
    let path = format!("/api/report?{}", q.join("&"));
    let (status, body) = client
        .request("GET", &path, b"")
        .map_err(|e| fail(Kind::Unavailable, e.to_string()))?;
    if status != 200 {
        return Err(fail(
            Kind::Unavailable,
            format!(
                "the server refused ({status}): {}",
                String::from_utf8_lossy(&body)
            ),
        ));
    }
    knox_verify_cli::files::write_file(&args.out, body)?;
    eprintln!("exit report written to {}", args.out.display());
    Ok(0)
}

/// `knox run --stream-to`: the run's journals followed and delivered as they grow, each
/// sealed bundle submitted. The run never waits for the store: a failed delivery is
/// retried at the next tick, a failed submission reported at the end.
#[derive(Debug)]
pub struct Stream {
    streamer: crate::stream::Streamer,
    client: Client,
    announced: u64,
    sealed: u64,
    errors: Vec<String>,
}

/// Writes an announcement to `<out>/key-<first 16 hex of its key id>.announcement.json`;
/// its bytes.
pub fn announcement_file(a: &knox_types::bundle::Announcement, out: &Path) -> Result<Vec<u8>> {
    let bytes = serde_json::to_vec_pretty(a)?;
    let id = knox_attest::key::key_id(&a.key.public_key.0).to_hex();
    let path = out.join(format!(
        "key-{}.announcement.json",
        id.get(..16).unwrap_or(&id)
    ));
    knox_verify_cli::files::write_file(&path, &bytes)?;
    Ok(bytes)
}

impl Stream {
    /// Starts following the journals of `dir`, signed with the key at `key`.
    pub fn start(url: &str, key: &Path, dir: &Path) -> Result<Self> {
        let client = |k| {
            Client::new(url, k)
                .map_err(|e| knox_verify_cli::files::usage(format!("--stream-to: {e}")))
        };
        let streamer = crate::stream::Streamer::watch(
            client(knox_verify_cli::keys::load(key)?)?,
            dir.to_owned(),
            std::time::Duration::from_millis(100),
        )
        .map_err(|e| fail(Kind::Software, format!("cannot start streaming: {e}")))?;
        Ok(Self {
            streamer,
            client: client(knox_verify_cli::keys::load(key)?)?,
            announced: 0,
            sealed: 0,
            errors: Vec::new(),
        })
    }

    /// Announces an in-TEE key before its first run (evidence format §6a, `a` the
    /// runtime's `announce()`): the announcement written to
    /// `<out>/key-<id>.announcement.json` (kept, to submit again by `knox submit` if the
    /// store is down) and submitted now, so that a process whose runs are all withheld
    /// shows in the store as a key announced and never followed. Its runs are then
    /// numbered from 1.
    pub fn announce(&mut self, a: &knox_types::bundle::Announcement, out: &Path) -> Result<()> {
        let bytes = announcement_file(a, out)?;
        self.submit_announcement(&bytes);
        Ok(())
    }

    /// Submits an announcement's bytes; a failure is reported at the end.
    fn submit_announcement(&mut self, bytes: &[u8]) {
        match self.client.submit(bytes) {
            Ok(_) => self.announced += 1,
            Err(e) => self
                .errors
                .push(format!("a key announcement was not submitted: {e}")),
        }
    }

    /// Submits a sealed bundle (the live run of the same id completes if it agrees).
    pub fn seal(&mut self, bundle: &[u8]) {
        match self.client.submit(bundle) {
            Ok(_) => self.sealed += 1,
            Err(e) => self
                .errors
                .push(format!("a sealed bundle was not submitted: {e}")),
        }
    }

    /// Delivers what is left and says what was streamed (on stderr).
    pub fn finish(self) {
        let stats = self.streamer.finish();
        eprintln!(
            "streamed to {}: {} key announcement{}, {} node lines in {} deliveries, {} sealed bundles submitted",
            self.client.base(),
            self.announced,
            if self.announced == 1 { "" } else { "s" },
            stats.lines,
            stats.deliveries,
            self.sealed
        );
        if let Some(e) = &stats.last_error {
            eprintln!(
                "  {} deliveries failed (retried); last: {e}",
                stats.failures
            );
        }
        for e in &self.errors {
            eprintln!("  {e}");
        }
    }
}

/// `knox gateway … --stream-to`: a [`Stream`] fed from other threads. A gateway seals
/// its sessions on threads of its own, as each ends; the bundle's path is handed over
/// with [`Sealing::sender`] and submitted from this stream's thread, in the order the
/// sessions were sealed (a session's key announcement, handed over when it opens,
/// before its bundle).
#[derive(Debug)]
pub struct Sealing {
    tx: std::sync::mpsc::Sender<Option<Handed>>,
    thread: std::thread::JoinHandle<()>,
}

/// What is handed to a [`Sealing`] stream.
#[derive(Debug)]
enum Handed {
    /// A key announcement's bytes.
    Announcement(Vec<u8>),
    /// A sealed bundle's path.
    Bundle(PathBuf),
}

/// Hands key announcements and sealed bundles to a [`Sealing`] stream.
#[derive(Debug, Clone)]
pub struct Sealed(std::sync::mpsc::Sender<Option<Handed>>);

impl Sealed {
    /// Submits the bundle at `path` (after what was handed over before it).
    pub fn submit(&self, path: PathBuf) {
        // After `Sealing::finish` nothing is submitted any more: the gateway has ended.
        let _ = self.0.send(Some(Handed::Bundle(path)));
    }

    /// Submits a key announcement (after what was handed over before it).
    pub fn announce(&self, bytes: Vec<u8>) {
        let _ = self.0.send(Some(Handed::Announcement(bytes)));
    }
}

impl Sealing {
    /// Starts following the journals of `dir` (see [`Stream::start`]).
    pub fn start(url: &str, key: &Path, dir: &Path) -> Result<Self> {
        let mut stream = Stream::start(url, key, dir)?;
        let (tx, rx) = std::sync::mpsc::channel::<Option<Handed>>();
        let thread = std::thread::Builder::new()
            .name("knox-stream-seal".into())
            .spawn(move || {
                while let Ok(Some(handed)) = rx.recv() {
                    match handed {
                        Handed::Announcement(bytes) => stream.submit_announcement(&bytes),
                        Handed::Bundle(path) => match std::fs::read(&path) {
                            Ok(bytes) => stream.seal(&bytes),
                            Err(e) => stream.errors.push(format!("{}: {e}", path.display())),
                        },
                    }
                }
                stream.finish();
            })
            .map_err(|e| fail(Kind::Software, format!("cannot start streaming: {e}")))?;
        Ok(Self { tx, thread })
    }

    /// Where key announcements and sealed bundles are handed over.
    pub fn sender(&self) -> Sealed {
        Sealed(self.tx.clone())
    }

    /// Submits what was handed over so far, delivers what is left of the journals and
    /// says what was streamed (on standard error).
    pub fn finish(self) {
        let _ = self.tx.send(None);
        if self.thread.join().is_err() {
            eprintln!("streaming: the thread submitting sealed bundles panicked");
        }
    }
}
