//! The commands of toolkits and MCP tool servers, as the `knox` CLI runs them:
//! [`toolkit`] (`knox toolkit check|import|convert`), `import` (`knox toolkit import
//! --mcp-stdio|--mcp-http`, also reachable as `knox mcp import`), and the `--mcp
//! servers.toml` tool host of `run` and the gateway.
//!
//! `knox toolkit import --mcp-stdio "CMD ARGS…"` / `--mcp-http URL` runs the server
//! (a stdio one confined in the kernel sandbox), asks `tools/list` and writes a
//! manifest skeleton with effects from the MCP annotations and every guess marked for
//! review: a `knox-toolkit/1` manifest (`crate::import::to_toolkit`) that loads as it
//! stands and that `knox toolkit check` passes once the review entries are deleted.

pub mod toolkit;

use std::path::PathBuf;

use crate::config::{ServerSpec, valid_server_name};
use crate::{McpHost, import};
use anyhow::Result;

use knox_command::error::{Kind, fail};
use knox_command::files::{path, usage};

/// `knox mcp …`.
#[derive(Debug, clap::Subcommand)]
pub enum McpCommand {
    /// Run an MCP server (stdio: confined), ask `tools/list`, write a manifest skeleton.
    Import(ImportArgs),
}

/// Arguments of the MCP import (`knox toolkit import --mcp-stdio|--mcp-http`).
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// A stdio server's command line, split like a shell without being one (no
    /// operators, no expansion); the program absolute or found on PATH.
    #[arg(
        long,
        value_name = "CMD ARGS…",
        conflicts_with = "mcp_http",
        required_unless_present = "mcp_http"
    )]
    pub mcp_stdio: Option<String>,
    /// A Streamable-HTTP server's endpoint; nothing else is contacted.
    #[arg(long, value_name = "URL")]
    pub mcp_http: Option<String>,
    /// The server's name: the namespace of its tools (`NAME.TOOL`).
    #[arg(long, default_value = "server")]
    pub name: String,
    /// Grant the server read on PATH while importing (repeatable), beyond what
    /// its command line points at.
    #[arg(long = "read", value_name = "PATH", value_parser = path)]
    pub read: Vec<PathBuf>,
    /// Seconds the server has to start and answer.
    #[arg(long, default_value_t = 30)]
    pub timeout_secs: u64,
    /// Where the manifest is written (`.json`: JSON, anything else TOML; default: JSON on
    /// standard output).
    #[arg(long, short, value_name = "FILE", value_parser = path)]
    pub output: Option<PathBuf>,
    /// Directory for the server's workspace while it runs.
    #[arg(long, value_name = "DIR", value_parser = path)]
    pub workspaces: Option<PathBuf>,
    /// Also write the server's `servers.toml` entry (stdio: its command, environment and
    /// the needs it ran under, widened for its tools' effects; its `manifest` the file
    /// of `-o`): with the manifest, what `knox run --mcp` and `knox gateway mcp` serve
    /// it from as written.
    #[arg(long, value_name = "FILE", value_parser = path)]
    pub servers_out: Option<PathBuf>,
    /// The stdio server's environment variable `K=V` (repeatable; nothing else is
    /// inherited). `{workspace}` in V stands for its workspace, as in `servers.toml`
    /// (`MEMORY_FILE_PATH={workspace}/memory.jsonl`).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
}

/// Runs the import; prints where the skeleton went and what needs review.
pub fn import(a: &ImportArgs) -> Result<i32> {
    if !valid_server_name(&a.name) {
        return Err(usage(format!("--name `{}`: 1-64 of [A-Za-z0-9_-]", a.name)));
    }
    let mut stdio_args: Vec<String> = Vec::new();
    let (mut spec, source, needs) = match (&a.mcp_stdio, &a.mcp_http) {
        (Some(cmdline), None) => {
            let argv = knox_broker::worker::split_command(cmdline)
                .map_err(|e| usage(format!("--mcp-stdio: {e}")))?;
            let Some((program, args)) = argv.split_first() else {
                return Err(usage("--mcp-stdio: empty command"));
            };
            // `./venv/bin/python`: relative to the current directory; a bare name is
            // looked up on PATH.
            let program = if program.contains('/') {
                path(program)
                    .map_err(|e| usage(format!("--mcp-stdio: {e}")))?
                    .to_string_lossy()
                    .into_owned()
            } else {
                program.clone()
            };
            let program = &program;
            let probe = ServerSpec::stdio(&a.name, program, args, crate::Needs::default())
                .validate(std::path::Path::new("/"))
                .map_err(|e| usage(e.to_string()))?;
            let crate::Reach::Stdio { program, .. } = &probe.reach else {
                return Err(usage("--mcp-stdio: not a stdio server"));
            };
            let needs = import::starter_needs(program, args, &a.read);
            stdio_args = args.to_vec();
            (
                ServerSpec::stdio(&a.name, &program.to_string_lossy(), args, needs.clone()),
                format!("stdio: {cmdline}"),
                needs,
            )
        }
        (None, Some(url)) => (
            ServerSpec::http(&a.name, url),
            format!("http: {url}"),
            crate::Needs::default(),
        ),
        _ => return Err(usage("exactly one of --mcp-stdio and --mcp-http")),
    };
    spec.timeout_secs = Some(a.timeout_secs);
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| usage(format!("--env `{kv}`: expected K=V")))?;
        if a.mcp_http.is_some() {
            return Err(usage("--env: an HTTP server runs elsewhere"));
        }
        spec.env.insert(k.to_owned(), v.to_owned());
    }
    let server = spec
        .clone()
        .validate(std::path::Path::new("/"))
        .map_err(|e| usage(e.to_string()))?;
    let workspaces = a
        .workspaces
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("knox-mcp-import"));
    let host = McpHost::new(
        vec![server.clone()],
        workspaces,
        knox_sandbox::SandboxConfig::default(),
    )
    .map_err(|e| fail(Kind::Unavailable, e.to_string()))?;
    let (tools, kernel) = host
        .list_tools(&server)
        .map_err(|e| fail(Kind::Unavailable, e.to_string()))?;
    let skeleton = import::Skeleton {
        server: a.name.clone(),
        source,
        tools: import::imported(&a.name, &tools),
        kernel,
    };
    // The needs widened for what the tools do (a server whose tools write gets write,
    // create and replace on the directories it serves).
    let needs = import::with_effects(needs, &stdio_args, &skeleton.tools);
    let locality = match &server.reach {
        crate::Reach::Http { url } => import::Locality::Http(
            crate::config::endpoint_of(url).map_err(|e| usage(format!("--mcp-http: {e}")))?,
        ),
        crate::Reach::Stdio { .. } => import::Locality::Stdio(&needs),
    };
    let runtime = knox_policy::shipped::current()
        .map_err(|e| fail(Kind::Software, e.to_string()))?
        .needs()
        .runtime
        .clone();
    let doc = import::to_toolkit(&skeleton, &locality, runtime);
    // It should load as it stands (names, schemas, needs), so that only its `review`
    // entries stand between it and a run; a server whose tools do not fit (a name
    // outside the pattern) still gets its file, with the fault named and exit 1.
    let fault = knox_policy::ToolkitManifest::from_doc(doc.clone()).err();
    match &a.output {
        Some(p) => {
            toolkit::write_doc(p, &doc)?;
            eprintln!(
                "{} tools of `{}` written to {}: {} guesses marked for review (`knox toolkit check {}`)",
                skeleton.tools.len(),
                a.name,
                p.display(),
                doc.pending_review().len(),
                p.display()
            );
        }
        None => {
            let mut bytes = serde_json::to_vec_pretty(&doc)?;
            bytes.push(b'\n');
            knox_command::cli::write_stdout(&bytes)?;
        }
    }
    if let Some(f) = &a.servers_out {
        if a.mcp_stdio.is_some() {
            spec.needs = needs.clone();
        }
        spec.manifest = a.output.as_ref().map(|o| manifest_from(f, o));
        let file = crate::config::ServersFile {
            version: crate::config::SERVERS_VERSION,
            servers: vec![spec],
        };
        let text = format!(
            "# Written by knox toolkit import ({}): review the needs before use.\n{}",
            skeleton.source,
            file.to_toml()
                .map_err(|e| fail(Kind::Software, e.to_string()))?
        );
        std::fs::write(f, text)
            .map_err(|e| fail(Kind::CantCreate, format!("{}: {e}", f.display())))?;
        eprintln!("its servers.toml entry written to {}", f.display());
    }
    for d in &skeleton.kernel {
        eprintln!(
            "note: the kernel denied {} while the server listed its tools{}",
            d.syscall.as_deref().unwrap_or(&d.event),
            d.detail
                .as_deref()
                .map(|x| format!(" ({x})"))
                .unwrap_or_default()
        );
    }
    if let Some(e) = fault {
        eprintln!(
            "error: the manifest does not load as it stands: {e} (the tools' `review` entries name what to change)"
        );
        return Ok(1);
    }
    Ok(0)
}

/// How `servers.toml` at `servers` names the manifest at `manifest`: relative to its
/// directory when the manifest lies beneath it, else absolute.
fn manifest_from(servers: &std::path::Path, manifest: &std::path::Path) -> PathBuf {
    let abs = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (s, m) = (abs(servers), abs(manifest));
    s.parent()
        .and_then(|dir| m.strip_prefix(dir).ok())
        .map_or(m.clone(), std::path::Path::to_path_buf)
}

/// The tool host of `knox run --mcp servers.toml`: every server of the file, each
/// run's server workspaces under `workspaces`. The run command hands it to
/// `knox_engine::SessionBuilder::host`.
pub fn host(servers: &std::path::Path, workspaces: PathBuf) -> Result<McpHost> {
    McpHost::from_file(servers, workspaces).map_err(|e| fail(Kind::DataErr, e.to_string()))
}
