//! `knox toolkit import --mcp-stdio` / `--mcp-http`: a manifest skeleton from a
//! server's `tools/list`, every guess marked for review.
//!
//! The importer works on its own small types ([`Skeleton`], [`ImportedTool`]); the
//! one function that knows the user manifest format is [`to_toolkit`], so that the
//! format can change without touching what is learned from the server.

use knox_types::payload::KernelEvent;
use rmcp::model::Tool;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use knox_policy::manifest::Effect;
pub use knox_policy::toolkit::McpHints;

/// One tool as imported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImportedTool {
    /// `SERVER.TOOL`.
    pub name: String,
    /// The server's description (untrusted text: review it).
    pub description: String,
    /// The `inputSchema` as sent.
    pub input_schema: Value,
    /// The `outputSchema` as sent, when it is an object schema (MCP requires one).
    pub output_schema: Option<Value>,
    /// The effect guessed from its name and hints (`knox_policy::toolkit::guess_effect`).
    pub effect: Effect,
    /// The hints it was guessed from, as the server sent them (absent: none).
    pub hints: Option<McpHints>,
    /// Every guess made for this tool, for a person to check.
    pub review: Vec<String>,
}

/// Everything the importer learned from one server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skeleton {
    /// The server's name (the tools' namespace).
    pub server: String,
    /// How it was reached: `stdio: CMD ARGS…` or `http: URL`.
    pub source: String,
    /// Its tools.
    pub tools: Vec<ImportedTool>,
    /// What the kernel denied while the server was listing its tools.
    pub kernel: Vec<KernelEvent>,
}

/// The tools of `server`, namespaced and annotated.
pub fn imported(server: &str, tools: &[Tool]) -> Vec<ImportedTool> {
    tools
        .iter()
        .map(|t| {
            let hints = t.annotations.as_ref().map(|a| McpHints {
                read_only_hint: a.read_only_hint,
                destructive_hint: a.destructive_hint,
                idempotent_hint: a.idempotent_hint,
                open_world_hint: a.open_world_hint,
            });
            let (effect, why) = knox_policy::toolkit::guess_effect(&t.name, hints);
            let mut review = vec![why];
            if t.annotations.is_none() {
                review.push("no annotations: MCP's defaults assumed".into());
            }
            review.push(
                "sinks, output labels and disclosure fields are not inferred: declare them".into(),
            );
            if !valid_tool_name(&t.name) {
                review.push(format!(
                    "tool name `{}` is outside [A-Za-z0-9_.-]{{1,128}}: rename it",
                    t.name
                ));
            }
            let output_schema = match t.output_schema.as_deref() {
                Some(o) if o.get("type").and_then(Value::as_str) == Some("object") => {
                    Some(Value::Object(o.clone()))
                }
                Some(_) => {
                    review.push("outputSchema dropped: not an object schema".into());
                    None
                }
                None => None,
            };
            ImportedTool {
                name: format!("{server}.{}", t.name),
                description: t.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object((*t.input_schema).clone()),
                output_schema,
                effect,
                hints,
                review,
            }
        })
        .collect()
}

/// Whether `name` is a tool name as MCP and OpenAI write them.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// The review note every imported tool carries about its server's needs.
pub const NEEDS_REVIEW: &str = "needs: the server's needs are those it was imported under \
     (stdio: the starter needs it ran confined with; HTTP: its URL's host and port); tighten \
     them to what its tools need";

/// Where an imported server runs, as its manifest entry says.
#[derive(Clone, Debug)]
pub enum Locality<'a> {
    /// A stdio server, run locally: the needs it was imported under.
    Stdio(&'a crate::config::Needs),
    /// A Streamable-HTTP server, run elsewhere: the endpoint its URL names.
    Http(knox_types::apm::Endpoint),
}

/// FORMAT BOUNDARY: the skeleton as a user manifest (`knox-toolkit/1`, which
/// `knox_policy::ToolkitManifest::from_doc` loads): one server as imported — a stdio
/// server local, needing what it ran under; an HTTP server `remote`, reaching its URL's
/// host and port only — whose tools carry their guessed effect, the server's hints and
/// every guess in `review` (`knox toolkit check` exits 1 until the entries are deleted).
/// `runtime` is what every tool worker needs (the shipped manifest's runtime).
pub fn to_toolkit(
    skeleton: &Skeleton,
    locality: &Locality<'_>,
    runtime: knox_policy::manifest::RuntimeNeeds,
) -> knox_policy::toolkit::ToolkitDoc {
    use knox_policy::manifest::Profile;
    use knox_policy::toolkit::{Server, ServerNeeds, Tool, ToolkitDoc};
    use knox_sandbox::Family;
    let tools = skeleton
        .tools
        .iter()
        .map(|t| {
            let mut review = t.review.clone();
            review.push(NEEDS_REVIEW.into());
            Tool {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: if t.input_schema.is_object() {
                    t.input_schema.clone()
                } else {
                    json!({"type": "object"})
                },
                output_schema: t.output_schema.clone(),
                effect: Some(t.effect),
                hints: t.hints.filter(|h| *h != McpHints::default()),
                discloses: None,
                returns: None,
                sinks: vec![],
                prose: vec![],
                trusted: vec![],
                review,
            }
        })
        .collect();
    let (remote, needs) = match locality {
        Locality::Stdio(n) => (
            false,
            ServerNeeds {
                profile: if n.profile.contains(&Family::Terminal) {
                    Profile::Terminal
                } else if n.profile.contains(&Family::NetworkClient) {
                    Profile::NetworkClient
                } else {
                    Profile::Offline
                },
                // The runtime families (`node`, `python`) have no manifest profile:
                // their system calls are listed, so the manifest's needs are complete.
                syscalls: n
                    .profile
                    .iter()
                    .filter(|f| matches!(f, Family::Node | Family::Python))
                    .filter_map(|f| knox_sandbox::Profile::family(*f).ok())
                    .flat_map(|p| p.syscalls().clone())
                    .chain(n.syscalls.iter().cloned())
                    .collect(),
                paths: n.paths.clone(),
                endpoints: n.endpoints.clone(),
                limits: n.limits,
            },
        ),
        Locality::Http(endpoint) => (
            true,
            ServerNeeds {
                profile: Profile::NetworkClient,
                syscalls: Default::default(),
                paths: vec![],
                endpoints: vec![endpoint.clone()],
                limits: None,
            },
        ),
    };
    ToolkitDoc {
        format: knox_policy::toolkit::FORMAT.into(),
        description: format!(
            "imported by knox toolkit import from {}: review every `review` entry",
            skeleton.source
        ),
        runtime,
        servers: vec![Server {
            name: skeleton.server.clone(),
            description: skeleton.source.clone(),
            remote,
            needs,
            cost: 1,
            tools,
        }],
    }
}

/// System calls of an interpreter's event loop (node's libuv, Python's asyncio)
/// beyond the baseline and the `offline` and `network-client` families: what a server
/// of an unknown runtime is imported under (a node or Python server gets its runtime's
/// family instead).
pub const EVENT_LOOP_SYSCALLS: [&str; 7] = [
    "capget",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "eventfd2",
    "socketpair",
];

/// The runtime family of a server's program: `node`, or a Python interpreter (a
/// `python3…` binary, or one in a virtual environment).
pub fn runtime_family(program: &std::path::Path) -> Option<knox_sandbox::Family> {
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let name = |p: &std::path::Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
            .unwrap_or_default()
    };
    let (given, resolved) = (name(program), name(&real));
    if given == "node" || resolved == "node" {
        return Some(knox_sandbox::Family::Node);
    }
    let in_venv = program
        .parent()
        .and_then(std::path::Path::parent)
        .is_some_and(|v| v.join("pyvenv.cfg").is_file());
    (given.starts_with("python3") || resolved.starts_with("python3") || in_venv)
        .then_some(knox_sandbox::Family::Python)
}

/// The directories a server's command line names as its data (an existing absolute
/// directory within no `node_modules` and no virtual environment): the server-filesystem
/// server's allowed directories, say.
fn data_dirs(args: &[String]) -> Vec<std::path::PathBuf> {
    args.iter()
        .map(std::path::Path::new)
        .filter(|p| p.is_absolute() && p.is_dir())
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
        .filter(|p| {
            !p.ancestors().any(|a| {
                a.file_name().is_some_and(|n| n == "node_modules") || a.join("pyvenv.cfg").is_file()
            })
        })
        .collect()
}

/// The needs `knox toolkit import --mcp-stdio` runs a server under when the user
/// names none: the `offline` family and the runtime's (`node`, `python`; for a program
/// of another runtime, `network-client` and an event loop's calls — no TCP port is
/// granted, so nothing is reachable), read on `extra_reads`, and read on what the
/// command line points at — for an argument that is an existing absolute path, the
/// enclosing `node_modules` or virtual environment if there is one, else its directory
/// — and, for a Python interpreter, its standard library and virtual environment;
/// node's OpenSSL configuration. Every grant is written into the skeleton for review;
/// [`with_effects`] widens the data directories' grants once the tools are known.
pub fn starter_needs(
    program: &std::path::Path,
    args: &[String],
    extra_reads: &[std::path::PathBuf],
) -> crate::config::Needs {
    use std::path::{Path, PathBuf};
    let mut reads: Vec<PathBuf> = extra_reads.to_vec();
    let package_root = |p: &Path| -> PathBuf {
        let mut best = None;
        for a in p.ancestors() {
            if a.file_name().is_some_and(|n| n == "node_modules") || a.join("pyvenv.cfg").is_file()
            {
                best = Some(a.to_path_buf());
            }
        }
        best.unwrap_or_else(|| {
            if p.is_dir() {
                p.to_path_buf()
            } else {
                p.parent()
                    .map_or_else(|| p.to_path_buf(), Path::to_path_buf)
            }
        })
    };
    for a in args {
        let p = Path::new(a);
        if p.is_absolute() && p.exists() {
            reads.push(package_root(
                &std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()),
            ));
        }
    }
    // A venv's interpreter: the venv itself, and the real interpreter's library.
    if program
        .parent()
        .and_then(Path::parent)
        .is_some_and(|v| v.join("pyvenv.cfg").is_file())
        && let Some(venv) = program.parent().and_then(Path::parent)
    {
        reads.push(venv.to_path_buf());
    }
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    if let Some(name) = real.file_name().and_then(|n| n.to_str())
        && name.starts_with("python3")
        && let Some(prefix) = real.parent().and_then(Path::parent)
    {
        let lib = prefix.join("lib").join(name);
        if lib.is_dir() {
            reads.push(lib);
        }
    }
    let openssl = Path::new("/etc/ssl/openssl.cnf");
    if real.file_name().is_some_and(|n| n == "node") && openssl.is_file() {
        reads.push(openssl.to_path_buf());
    }
    reads.sort();
    reads.dedup();
    let (families, syscalls) = match runtime_family(program) {
        Some(f) => (vec![knox_sandbox::Family::Offline, f], Vec::new()),
        None => (
            vec![
                knox_sandbox::Family::Offline,
                knox_sandbox::Family::NetworkClient,
            ],
            EVENT_LOOP_SYSCALLS.to_vec(),
        ),
    };
    crate::config::Needs {
        profile: families.into_iter().collect(),
        syscalls: syscalls.into_iter().map(str::to_owned).collect(),
        paths: reads
            .into_iter()
            .filter_map(|p| p.to_str().map(str::to_owned))
            .map(|path| knox_types::apm::PathGrant {
                path,
                access: [knox_types::apm::Access::Read].into_iter().collect(),
            })
            .collect(),
        endpoints: Vec::new(),
        limits: None,
    }
}

/// The needs once the server's tools are known: when one of them writes (effect
/// `write`, or an MCP `destructiveHint`), the data directories its command line names
/// are granted `read`, `write`, `create` and `replace` — a write creates files and
/// overwrites them as servers do, by renaming a new file over the old — instead of
/// `read`. Nothing is widened for a server whose tools only read.
pub fn with_effects(
    mut needs: crate::config::Needs,
    args: &[String],
    tools: &[ImportedTool],
) -> crate::config::Needs {
    use knox_types::apm::Access;
    let writes = tools.iter().any(|t| {
        t.effect == Effect::Write || t.hints.as_ref().and_then(|h| h.destructive_hint) == Some(true)
    });
    if !writes {
        return needs;
    }
    for dir in data_dirs(args) {
        let Some(path) = dir.to_str() else { continue };
        let full: std::collections::BTreeSet<Access> =
            [Access::Read, Access::Write, Access::Create, Access::Replace].into();
        match needs.paths.iter_mut().find(|g| g.path == path) {
            Some(g) => g.access.extend(full),
            None => needs.paths.push(knox_types::apm::PathGrant {
                path: path.to_owned(),
                access: full,
            }),
        }
    }
    needs
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn starter_needs_cover_the_package_and_nothing_wide() {
        let dir = std::env::temp_dir().join(format!("knox-mcp-starter-{}", std::process::id()));
        let script = dir.join("node_modules/@x/server/dist/index.js");
        std::fs::create_dir_all(script.parent().unwrap_or(&dir)).ok();
        std::fs::write(&script, "").ok();
        let needs = starter_needs(
            std::path::Path::new("/usr/bin/node"),
            &[
                script.to_string_lossy().into_owned(),
                "relative".into(),
                "/no/such/path".into(),
            ],
            &[],
        );
        let paths: Vec<&str> = needs.paths.iter().map(|g| g.path.as_str()).collect();
        let modules = std::fs::canonicalize(dir.join("node_modules")).unwrap_or_default();
        assert!(
            paths.contains(&modules.to_string_lossy().as_ref()),
            "{paths:?}"
        );
        assert!(
            !paths.iter().any(|p| *p == "/" || p.starts_with("/no/")),
            "{paths:?}"
        );
        assert!(needs.endpoints.is_empty());
        assert!(needs.paths.iter().all(|g| g.access.len() == 1));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_skeleton_is_a_manifest_that_loads_with_every_guess_to_review() {
        let skeleton = Skeleton {
            server: "fs".into(),
            source: "stdio: node index.js /srv".into(),
            tools: vec![ImportedTool {
                name: "fs.read_text_file".into(),
                description: "Read a file".into(),
                input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}},
                    "required": ["path"]}),
                output_schema: None,
                effect: Effect::Read,
                hints: Some(McpHints {
                    read_only_hint: Some(true),
                    open_world_hint: Some(false),
                    ..McpHints::default()
                }),
                review: vec!["effect `read` from the hints".into()],
            }],
            kernel: vec![],
        };
        let runtime = knox_policy::shipped::current()
            .unwrap()
            .needs()
            .runtime
            .clone();
        let needs = crate::config::Needs {
            profile: [knox_sandbox::Family::Offline].into(),
            syscalls: ["epoll_wait".to_string()].into(),
            paths: vec![knox_types::apm::PathGrant {
                path: "/srv".into(),
                access: [knox_types::apm::Access::Read].into(),
            }],
            endpoints: vec![],
            limits: None,
        };
        let stdio = to_toolkit(&skeleton, &Locality::Stdio(&needs), runtime.clone());
        let m = knox_policy::ToolkitManifest::from_doc(stdio.clone()).unwrap();
        let t = m.tool("fs.read_text_file").unwrap();
        assert_eq!(t.effect(), knox_policy::manifest::Effect::Read);
        let server = &stdio.servers[0];
        assert!(!server.remote);
        assert_eq!(
            server.needs.profile,
            knox_policy::manifest::Profile::Offline
        );
        assert_eq!(server.needs.paths[0].path, "/srv");
        let review = stdio.pending_review();
        assert_eq!(review.len(), 2, "{review:?}");
        let http = to_toolkit(
            &skeleton,
            &Locality::Http(crate::config::endpoint_of("https://mcp.example/v1").unwrap()),
            runtime,
        );
        knox_policy::ToolkitManifest::from_doc(http.clone()).unwrap();
        assert!(http.servers[0].remote);
        assert_eq!(http.servers[0].needs.endpoints[0].host, "mcp.example");
    }

    #[test]
    fn tool_names_as_mcp_writes_them() {
        assert!(valid_tool_name("github.create_issue"));
        assert!(valid_tool_name("send-money_2"));
        assert!(!valid_tool_name("a b"));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name(&"x".repeat(129)));
    }
}
