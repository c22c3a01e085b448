//! `knox toolkit`: user toolkit manifests (`knox-toolkit/1`, `docs/toolkits.md`) —
//! check one and show what each tool may do, import a skeleton from OpenAI function
//! definitions, convert a legacy manifest (`tools.json` + needs file).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use knox_policy::toolkit::{ToolkitDoc, skeleton_from_openai};
use knox_policy::{Effect, ToolkitManifest};
use serde_json::json;

/// `knox toolkit` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ToolkitCommand {
    /// Validate a toolkit manifest (format, names, needs, annotations, every input
    /// schema against JSON Schema 2020-12) and print what each tool may do: its effect,
    /// what it needs, which parameters are prose and which are controlled, what it
    /// returns and discloses, and every guess still marked for review.
    #[command(after_help = knox_command::exit_codes!(
        "  0   valid, nothing left to review\n  1   valid, but guesses are still marked for review"
    ))]
    Check(CheckArgs),
    /// Write a manifest skeleton from tool definitions: every tool namespaced by the
    /// server, its effect guessed conservatively from its name and MCP hints (absent
    /// hints: MCP's defaults, so `disclose`), every guess marked for review.
    #[command(after_help = knox_command::exit_codes!("  0   written"))]
    Import(ImportArgs),
    /// Write a legacy manifest (InjecAgent's `tools.json` and a needs file; default: the
    /// last ones Knox shipped, frozen at a644880) as a `knox-toolkit/1` manifest.
    #[command(after_help = knox_command::exit_codes!("  0   written"))]
    Convert(ConvertArgs),
}

impl ToolkitCommand {
    /// Whether JSON output was asked for.
    pub fn json(&self) -> bool {
        matches!(self, Self::Check(a) if a.json)
    }
}

/// Arguments of `knox toolkit check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The manifest (`.toml` or `.json`).
    #[arg(value_parser = knox_command::files::path)]
    pub manifest: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `knox toolkit import`: one source of tool definitions.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["openai", "mcp_stdio", "mcp_http"])))]
pub struct ImportArgs {
    /// OpenAI function definitions (JSON: an array of `{"type": "function", "function":
    /// {...}}` or of bare definitions, or `{"tools": [...]}`).
    #[arg(value_parser = knox_command::files::path, long, value_name = "FUNCTIONS.json")]
    pub openai: Option<PathBuf>,
    /// A stdio MCP server's command line, split like a shell without being one (no
    /// operators, no expansion): the server runs confined in the kernel sandbox and is
    /// asked `tools/list`; written as a `knox-toolkit/1` manifest with every guess marked
    /// for review (docs/mcp.md).
    #[arg(long, value_name = "CMD ARGS…")]
    pub mcp_stdio: Option<String>,
    /// A Streamable-HTTP MCP server's endpoint, asked `tools/list`; nothing else is
    /// contacted.
    #[arg(long, value_name = "URL")]
    pub mcp_http: Option<String>,
    /// The server name: the tools' namespace (`SERVER.tool`).
    #[arg(long)]
    pub server: String,
    /// MCP stdio: grant the server read on PATH while importing (repeatable).
    #[arg(long = "read", value_name = "PATH", value_parser = knox_command::files::path, requires = "mcp_stdio")]
    pub read: Vec<PathBuf>,
    /// MCP: seconds the server has to start and answer.
    #[arg(long, default_value_t = 30)]
    pub timeout_secs: u64,
    /// MCP: directory for the server's workspace while it runs.
    #[arg(long, value_name = "DIR", value_parser = knox_command::files::path)]
    pub workspaces: Option<PathBuf>,
    /// MCP: also write the server's `servers.toml` entry (its command, environment and
    /// the needs it ran under, widened for its tools' effects; its `manifest` the file
    /// of `--out`), which `knox run --mcp` and `knox gateway mcp` serve it from as written.
    #[arg(long, value_name = "FILE", value_parser = knox_command::files::path, conflicts_with = "openai")]
    pub servers_out: Option<PathBuf>,
    /// MCP stdio: the server's environment variable `K=V` (repeatable; nothing else is
    /// inherited; `{workspace}` in V stands for its workspace).
    #[arg(long = "env", value_name = "K=V", requires = "mcp_stdio")]
    pub env: Vec<String>,
    /// Where to write the skeleton (`.json` writes JSON, anything else TOML).
    #[arg(value_parser = knox_command::files::path, long, short)]
    pub out: PathBuf,
}

/// Arguments of `knox toolkit convert`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// InjecAgent-style `tools.json` (default: InjecAgent's, as this build ships it).
    #[arg(value_parser = knox_command::files::path, long, requires = "needs")]
    pub tools: Option<PathBuf>,
    /// The legacy needs file (default: the last one Knox shipped, frozen at a644880, from
    /// which the shipped `data/manifests/injecagent.toolkit.json` was converted).
    #[arg(value_parser = knox_command::files::path, long)]
    pub needs: Option<PathBuf>,
    /// Where to write the manifest (`.json` writes JSON, anything else TOML).
    #[arg(value_parser = knox_command::files::path, long, short)]
    pub out: PathBuf,
}

/// Runs a `knox toolkit` subcommand.
pub fn run(c: &ToolkitCommand) -> Result<i32> {
    match c {
        ToolkitCommand::Check(a) => check(a),
        ToolkitCommand::Import(a) => import(a),
        ToolkitCommand::Convert(a) => convert(a),
    }
}

/// Loads a `knox-toolkit/1` manifest file; a bad one is "bad input" naming the file.
pub fn load(path: &Path) -> Result<ToolkitManifest> {
    let text = knox_command::files::read_text(path, knox_command::files::MANIFEST)?;
    ToolkitManifest::from_toolkit_text(&text)
        .map_err(|e| knox_command::files::bad_input(path, "a knox-toolkit/1 manifest", e))
}

fn check(a: &CheckArgs) -> Result<i32> {
    let m = load(&a.manifest)?;
    let Some(doc) = m.doc() else {
        return Err(knox_command::files::usage("not a knox-toolkit/1 manifest"));
    };
    let review = doc.pending_review();
    let mut tools: Vec<_> = m.tools().collect();
    tools.sort_by(|x, y| x.name.cmp(&y.name));
    if a.json {
        let rows: Vec<_> = tools
            .iter()
            .map(|t| {
                let (prose, controlled) = params(t);
                json!({
                    "tool": t.name, "server": t.toolkit, "effect": t.effect(),
                    "prose": prose, "controlled": controlled,
                    "sinks": t.annotations.sinks, "discloses": t.annotations.discloses,
                    "returns": t.annotations.returns, "needs": t.needs,
                    "review": review.iter().filter(|(n, _)| *n == t.name).map(|(_, r)| r).collect::<Vec<_>>(),
                })
            })
            .collect();
        knox_command::outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "manifest": m.hash().to_string(), "format": doc.format, "tools": rows,
                "pending_review": review.len(),
            }))?
        );
    } else {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: valid {} manifest, {} in {}, hash {}",
            a.manifest.display(),
            doc.format,
            count(tools.len(), "tool"),
            count(doc.servers.len(), "server"),
            m.hash()
        );
        for t in &tools {
            let (prose, controlled) = params(t);
            let _ = writeln!(s, "\n{} ({})", t.name, effect_words(t.effect()));
            let n = &t.needs;
            let endpoints: Vec<String> = n
                .endpoints
                .iter()
                .map(|e| format!("{}:{}", e.host, e.port))
                .collect();
            let _ = writeln!(
                s,
                "  needs: {} system calls, {} paths, endpoints [{}], {} cost units",
                n.syscalls.len(),
                n.paths.len(),
                endpoints.join(", "),
                n.cost
            );
            let _ = writeln!(s, "  controlled: {}", list(&controlled));
            let _ = writeln!(s, "  prose (the executor may compose): {}", list(&prose));
            if !t.annotations.sinks.is_empty() {
                let _ = writeln!(
                    s,
                    "  sinks (never from untrusted output): {}",
                    t.annotations.sinks.join(", ")
                );
            }
            if let Some(d) = &t.annotations.discloses {
                let _ = writeln!(
                    s,
                    "  discloses to {} the content of {}",
                    d.audience
                        .clone()
                        .unwrap_or_else(|| list(&d.recipient.iter().collect::<Vec<_>>())),
                    list(&d.content.iter().collect::<Vec<_>>())
                );
            }
            if let Some(r) = &t.annotations.returns {
                let _ = writeln!(
                    s,
                    "  returns {:?} data about {:?}, written by {:?}",
                    r.info_types, r.subject, r.source
                );
            }
            for (_, r) in review.iter().filter(|(n, _)| *n == t.name) {
                let _ = writeln!(s, "  REVIEW: {r}");
            }
        }
        if !review.is_empty() {
            let _ = writeln!(
                s,
                "\n{} guesses marked for review: check each and delete its `review` line",
                review.len()
            );
        }
        knox_command::out!("{s}");
    }
    Ok(i32::from(!review.is_empty()))
}

/// A tool's prose and controlled parameters.
fn params(t: &knox_policy::ToolEntry) -> (Vec<&String>, Vec<&String>) {
    t.spec
        .parameters
        .iter()
        .map(|p| &p.name)
        .partition(|p| t.annotations.prose.contains(p))
}

fn list(v: &[&String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
    }
}

fn effect_words(e: Effect) -> &'static str {
    match e {
        Effect::Read => "read: observes, may repeat",
        Effect::Write => "write: changes state",
        Effect::Disclose => "disclose: sends data out",
        Effect::Execute => "execute: runs code",
    }
}

/// Writes `doc` as JSON (a `.json` path) or TOML.
/// Writes `doc` to `out`: JSON for a `.json` file, TOML otherwise.
pub(crate) fn write_doc(out: &Path, doc: &ToolkitDoc) -> Result<()> {
    let json = out.extension().is_some_and(|e| e == "json");
    let text = if json {
        serde_json::to_string_pretty(doc)?
    } else {
        doc.to_toml().map_err(|e| {
            knox_command::files::usage(format!(
                "this manifest cannot be written as TOML: {e}; write it as JSON (`--out FILE.json`)"
            ))
        })?
    };
    knox_command::files::write_file(out, text.into_bytes())
}

/// `n` and `noun`, plural unless one.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn import(a: &ImportArgs) -> Result<i32> {
    let Some(openai) = &a.openai else {
        // The MCP sources: the same import as `knox mcp import`.
        return super::import(&super::ImportArgs {
            mcp_stdio: a.mcp_stdio.clone(),
            mcp_http: a.mcp_http.clone(),
            name: a.server.clone(),
            read: a.read.clone(),
            timeout_secs: a.timeout_secs,
            output: Some(a.out.clone()),
            workspaces: a.workspaces.clone(),
            servers_out: a.servers_out.clone(),
            env: a.env.clone(),
        });
    };
    knox_command::files::refuse_overwrite("--out", &a.out, &[openai])?;
    let text = knox_command::files::read_text(openai, knox_command::files::MANIFEST)?;
    let runtime = knox_policy::shipped::current()
        .map_err(|e| knox_command::error::fail(knox_command::error::Kind::Software, e.to_string()))?
        .needs()
        .runtime
        .clone();
    let doc = skeleton_from_openai(&a.server, &text, runtime)
        .map_err(|e| knox_command::files::bad_input(openai, "OpenAI function definitions", e))?;
    // The skeleton must load as it stands (names, schemas).
    ToolkitManifest::from_doc(doc.clone())
        .map_err(|e| knox_command::files::bad_input(openai, "tool definitions Knox can load", e))?;
    write_doc(&a.out, &doc)?;
    eprintln!(
        "{} tools written to {}; {} guesses marked for review (`knox toolkit check {}`)",
        doc.servers.iter().map(|s| s.tools.len()).sum::<usize>(),
        a.out.display(),
        doc.pending_review().len(),
        a.out.display()
    );
    Ok(0)
}

fn convert(a: &ConvertArgs) -> Result<i32> {
    let legacy = match (&a.tools, &a.needs) {
        (Some(t), Some(n)) => {
            let tools = knox_command::files::read_text(t, knox_command::files::MANIFEST)?;
            let needs = knox_command::files::read_text(n, knox_command::files::CONFIG)?;
            ToolkitManifest::from_sources(&tools, &needs)
                .map_err(|e| knox_command::files::bad_input(n, "a tools.json and needs file", e))?
        }
        (None, Some(n)) => {
            let needs = knox_command::files::read_text(n, knox_command::files::CONFIG)?;
            ToolkitManifest::from_sources(knox_policy::shipped::INJECAGENT_TOOLS_JSON, &needs)
                .map_err(|e| knox_command::files::bad_input(n, "a needs file", e))?
        }
        _ => knox_policy::shipped::legacy_a644880().map_err(|e| {
            knox_command::error::fail(knox_command::error::Kind::Software, e.to_string())
        })?,
    };
    let doc = ToolkitDoc::from_legacy(&legacy);
    let m = ToolkitManifest::from_doc(doc.clone()).map_err(|e| {
        knox_command::error::fail(knox_command::error::Kind::Software, e.to_string())
    })?;
    write_doc(&a.out, &doc)?;
    eprintln!(
        "{} tools written to {} (manifest hash {})",
        m.tools().count(),
        a.out.display(),
        m.hash()
    );
    Ok(0)
}
