//! `knox gateway mcp --shared`: a stdio launch served by the one gateway serving
//! `--out`. The launch finds that gateway by `<out>/gateway.addr` (its URL, its process
//! and a digest of its configuration) and `<out>/session-token`, starts one in the
//! background when none answers, and bridges its stdio session into it
//! (`knox_gateway::mcp::bridge`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use knox_gateway::mcp::bridge::{self, Target};
use knox_types::digest::Digest;
use serde_json::{Value, json};

use super::McpGatewayArgs;
use crate::cmd::{self, usage};
use crate::error::{Kind, fail};

/// The file an HTTP gateway names itself in, in its `--out`.
pub(super) const FOUND: &str = "gateway.addr";

/// How long a launch waits for a gateway to answer (one it started included).
const START_WITHIN: Duration = Duration::from_secs(60);

/// Removes its files when dropped (the gateway's `gateway.addr` and session token).
pub(super) struct RemoveOnDrop(pub(super) Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The digest of what a gateway serves: its manifest's and servers' bytes and the
/// options every session inherits. A launch uses a gateway only when this matches its
/// own.
pub(super) fn config(args: &McpGatewayArgs) -> Result<String> {
    // A file by where it is (`{dir}` in servers.toml makes its place matter) and what it
    // holds.
    let file = |p: &Option<PathBuf>| -> Result<Value> {
        Ok(match p {
            Some(p) => json!({
                "path": std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()),
                "sha256": Digest::sha256(&cmd::read_input(p, cmd::MANIFEST)?).to_hex(),
            }),
            None => Value::Null,
        })
    };
    let c = json!({
        "manifest": file(&args.manifest)?,
        "mcp": file(&args.mcp)?,
        "stream_key": args.stream_key,
        "collateral": args.platform.collateral,
        "configfs": args.platform.configfs,
        "gpus": args.platform.gpus,
        "trajectory": args.trajectory.as_ref().map(|t| t.as_str()),
        "max_calls": args.max_calls,
        "idle_timeout_secs": args.idle_timeout_secs,
        "max_message_bytes": args.max_message_bytes,
        "max_actions": args.max_actions,
        "nonce": args.nonce,
        "platform": format!("{:?}", args.platform.platform),
        "stream_to": args.stream_to,
    });
    Ok(Digest::sha256(c.to_string().as_bytes()).to_hex())
}

/// Writes `gateway.addr` (atomically: a launch never reads half of it; the temporary
/// file is new, never one a link points at).
pub(super) fn publish(file: &Path, url: &str, config: &str) {
    use std::io::Write as _;
    let body = json!({"url": url, "pid": std::process::id(), "config": config});
    let tmp = file.with_extension(format!("addr.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(body.to_string().as_bytes()));
    if written.is_ok() {
        let _ = std::fs::rename(&tmp, file);
    } else {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// This process's effective uid (the owner of what it creates).
fn own_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// Whether `path` is a regular file of this uid (not a link, nothing another user
/// planted in a shared `--out`).
fn ours(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && Some(m.uid()) == own_uid())
}

/// The gateway named in `out`, when one answers there: its target and the digest of
/// its configuration.
fn found(out: &Path) -> Option<(Target, String)> {
    let (addr, token) = (out.join(FOUND), out.join("session-token"));
    if !ours(&addr) || !ours(&token) {
        return None;
    }
    let v: Value = serde_json::from_slice(&std::fs::read(&addr).ok()?).ok()?;
    let token = std::fs::read_to_string(&token).ok()?;
    let target = Target {
        url: v.get("url")?.as_str()?.to_owned(),
        token: token.trim().to_owned(),
    };
    let config = v.get("config")?.as_str()?.to_owned();
    bridge::answers(&target).then_some((target, config))
}

/// The arguments a background gateway for `args` is started with.
fn gateway_args(args: &McpGatewayArgs) -> Result<Vec<std::ffi::OsString>> {
    let mut a: Vec<std::ffi::OsString> = Vec::new();
    let mut push = |s: &str| a.push(s.into());
    for s in ["gateway", "mcp", "--http", "127.0.0.1:0"] {
        push(s);
    }
    push("--exit-when-idle-secs");
    push(&args.shared_idle_secs.max(1).to_string());
    push("--idle-timeout-secs");
    push(&args.idle_timeout_secs.to_string());
    push("--max-message-bytes");
    push(&args.max_message_bytes.to_string());
    push("--max-calls");
    push(&args.max_calls.to_string());
    if let Some(t) = &args.trajectory {
        push("--trajectory");
        push(t.as_str());
    }
    if let Some(n) = args.max_actions {
        push("--max-actions");
        push(&n.to_string());
    }
    if !args.nonce.is_empty() {
        push("--nonce");
        push(&args.nonce);
    }
    let platform = clap::ValueEnum::to_possible_value(&args.platform.platform)
        .map(|v| v.get_name().to_owned())
        .ok_or_else(|| usage("--platform: no name"))?;
    push("--platform");
    push(&platform);
    if args.platform.gpus {
        push("--gpus");
    }
    let paths: [(&str, Option<&PathBuf>); 6] = [
        ("--manifest", args.manifest.as_ref()),
        ("--mcp", args.mcp.as_ref()),
        ("--out", Some(&args.out)),
        ("--collateral", args.platform.collateral.as_ref()),
        ("--configfs", Some(&args.platform.configfs)),
        ("--stream-key", args.stream_key.as_ref()),
    ];
    for (flag, p) in paths {
        if let Some(p) = p {
            a.push(flag.into());
            a.push(std::path::absolute(p)?.into_os_string());
        }
    }
    if let Some(url) = &args.stream_to {
        a.push("--stream-to".into());
        a.push(url.into());
    }
    Ok(a)
}

/// Starts a background gateway serving `args.out`: its own process group (a client
/// that kills its launch's group does not end it), its output in `<out>/gateway.log`.
fn start(args: &McpGatewayArgs) -> Result<std::process::Child> {
    use std::os::unix::process::CommandExt as _;
    cmd::create_dir(&args.out)?;
    let log_path = args.out.join("gateway.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| fail(Kind::CantCreate, format!("{}: {e}", log_path.display())))?;
    let exe = std::env::current_exe()?;
    std::process::Command::new(exe)
        .args(gateway_args(args)?)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| {
            fail(
                Kind::Unavailable,
                format!("cannot start the shared gateway: {e}"),
            )
        })
}

/// The last lines of the background gateway's log, for an error.
fn log_tail(out: &Path) -> String {
    let text = std::fs::read_to_string(out.join("gateway.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .get(lines.len().saturating_sub(5)..)
        .unwrap_or_default()
        .join("\n")
}

/// The gateway serving `args.out` with this configuration: one that answers, else one
/// started now (a launch starting at the same moment may start it instead: whichever
/// holds `--out` serves both).
fn target(args: &McpGatewayArgs) -> Result<Target> {
    let config = config(args)?;
    let deadline = Instant::now() + START_WITHIN;
    let mut started: Option<std::process::Child> = None;
    let mut starts = 0;
    loop {
        if let Some((target, theirs)) = found(&args.out) {
            if theirs != config {
                return Err(usage(format!(
                    "the gateway serving `{}` ({}) runs another configuration (manifest, servers or options): give this launch its own --out, or end that gateway",
                    args.out.display(),
                    target.url
                )));
            }
            return Ok(target);
        }
        // None answers: start one, or again when the one started ended (it found
        // `--out` held by a gateway then ending, say), a few times at most.
        let ended = started
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some());
        if (started.is_none() || ended) && starts < 3 {
            started = Some(start(args)?);
            starts += 1;
        }
        if Instant::now() > deadline {
            let exited = started
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .map_or_else(
                    || "it is still starting".to_owned(),
                    |s| format!("it ended: {s}"),
                );
            return Err(fail(
                Kind::Unavailable,
                format!(
                    "no gateway answered for `{}` within {} s ({exited}); `{}` ends with:\n{}",
                    args.out.display(),
                    START_WITHIN.as_secs(),
                    args.out.join("gateway.log").display(),
                    log_tail(&args.out)
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs a `--shared` launch: its session served by the gateway serving `--out`.
pub(super) fn run(args: &McpGatewayArgs) -> Result<i32> {
    if args.prompt.is_empty() || args.plan.is_none() {
        return Err(usage(
            "--shared serves the launch's --prompt with its --plan: give both",
        ));
    }
    if args.bound.contract.is_some()
        || args.planner.is_some()
        || !args.regulation.regulations.is_empty()
    {
        return Err(usage(
            "--shared takes --manifest, --mcp, --prompt and --plan (no --contract, --planner or regulations): run those gateways on their own",
        ));
    }
    if args.manifest.is_none() || args.mcp.is_none() {
        return Err(usage("--shared needs --manifest and --mcp"));
    }
    let plan_path = args.plan.as_deref().unwrap_or(Path::new(""));
    let plan: Value = serde_json::from_str(&cmd::read_text(plan_path, cmd::MANIFEST)?)
        .map_err(|e| cmd::bad_input(plan_path, "a plan (JSON)", e))?;
    let refused = |e: knox_gateway::mcp::GatewayError| match e {
        knox_gateway::mcp::GatewayError::BadRequest(m) => usage(m),
        other => fail(Kind::Unavailable, other.to_string()),
    };
    // A gateway found just as it ends (idle) refuses the session: find or start one
    // again, a few times.
    let mut attempt = 0;
    let (target, opened) = loop {
        let target = target(args)?;
        match bridge::open(&target, &args.prompt, Some(&plan)) {
            Ok(opened) => break (target, opened),
            Err(e @ knox_gateway::mcp::GatewayError::BadRequest(_)) => return Err(refused(e)),
            Err(e) if attempt >= 2 => return Err(refused(e)),
            Err(_) => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    };
    let stop = crate::signals::stop_flag();
    let end = bridge::relay(
        &target,
        &opened,
        Box::new(std::io::BufReader::new(std::io::stdin())),
        Box::new(std::io::stdout()),
        &move || stop.load(std::sync::atomic::Ordering::Acquire),
    )
    .map_err(refused)?;
    // Standard output is the MCP channel: the summary goes to standard error.
    eprintln!("{end}");
    let complete = end.get("verified").and_then(Value::as_str) == Some("complete");
    Ok(if complete { 0 } else { 1 })
}
