//! `servers.toml`: the MCP servers a run may use, how each is reached, and what each
//! stdio server needs from the kernel (see `docs/mcp.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use knox_types::apm::{Access, Endpoint, PathGrant};
use serde::{Deserialize, Serialize};

use crate::McpError;

/// Version of `servers.toml` this crate reads.
pub const SERVERS_VERSION: u32 = 1;

/// Largest `servers.toml` read, in bytes.
pub const MAX_SERVERS_BYTES: u64 = 1 << 20;

/// Default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest per-call timeout a server may declare.
pub const MAX_TIMEOUT_SECS: u64 = 3600;

/// The parsed `servers.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServersFile {
    /// [`SERVERS_VERSION`].
    pub version: u32,
    /// The servers, in the order declared.
    #[serde(default, rename = "server")]
    pub servers: Vec<ServerSpec>,
}

/// One MCP server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// Its name, `[A-Za-z0-9_-]{1,64}`: the server's tools are called `NAME.TOOL`.
    pub name: String,
    /// Stdio server: the program (absolute, or looked up on `PATH` when the file is
    /// loaded). Exactly one of `command` and `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Stdio server: its arguments, passed verbatim but for `{workspace}`, replaced
    /// by the run's workspace of the server (its working directory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Stdio server: its whole environment (nothing is inherited from Knox's);
    /// `{workspace}` in a value is replaced as in `args`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Streamable-HTTP server: its one endpoint (`http://` or `https://`); Knox sends
    /// nothing anywhere else (no redirects, no proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Seconds one tool call may take (default 30); past it a stdio server's whole
    /// process tree is killed and restarted at the next call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// The toolkit manifest of the server's tools (relative to this file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<PathBuf>,
    /// The directories Knox answers `roots/list` with; each must lie within a path the
    /// needs grant read on. Default: none (an empty list: a server then keeps what
    /// its arguments say, which the kernel still confines to the needs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots: Option<Vec<String>>,
    /// Knox tool names served by this server under another MCP name (`KnoxName =
    /// "mcp_name"`), for manifests whose tool names are not `SERVER.TOOL`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, String>,
    /// What a stdio server's process may do; ignored (must be absent) for HTTP.
    #[serde(default)]
    pub needs: Needs,
}

/// A stdio server's kernel needs: everything else is denied, and each denied system
/// call is recorded.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Needs {
    /// Seccomp families on top of the runtime baseline (`offline`,
    /// `network-client`, `terminal`).
    #[serde(default)]
    pub profile: BTreeSet<knox_sandbox::Family>,
    /// System calls beyond the baseline and the families.
    #[serde(default)]
    pub syscalls: BTreeSet<String>,
    /// Path grants (absolute paths). The program gets read and execute implicitly.
    #[serde(default)]
    pub paths: Vec<PathGrant>,
    /// TCP endpoints the server may connect to (the port is what the kernel enforces).
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// Resource limits over the server's whole life (default: [`default_limits`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<knox_types::apm::Limits>,
}

/// Limits of a server process that declares none: a long-lived interpreter (node,
/// python) needs more threads and CPU over a run than one tool call.
pub fn default_limits() -> knox_types::apm::Limits {
    knox_types::apm::Limits {
        max_processes: 64,
        max_file_bytes: 64 << 20,
        max_memory_bytes: 1 << 30,
        cpu_seconds: 600,
        max_open_files: 1024,
    }
}

/// How a server is reached, once validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// A process Knox starts in the kernel sandbox.
    Stdio {
        /// Absolute program path.
        program: PathBuf,
        /// Arguments.
        args: Vec<String>,
        /// Environment.
        env: Vec<(String, String)>,
    },
    /// A Streamable-HTTP endpoint.
    Http {
        /// The URL.
        url: String,
    },
}

/// A validated server.
#[derive(Clone, Debug, PartialEq)]
pub struct Server {
    /// Its name.
    pub name: String,
    /// How it is reached.
    pub reach: Reach,
    /// Per-call timeout.
    pub timeout: Duration,
    /// Kernel needs (stdio).
    pub needs: Needs,
    /// What `roots/list` answers, as absolute directory paths.
    pub roots: Vec<String>,
    /// The manifest path, resolved against the file's directory.
    pub manifest: Option<PathBuf>,
    /// Knox tool name → the server's tool name.
    pub aliases: BTreeMap<String, String>,
}

/// Whether `name` is a valid server name.
pub fn valid_server_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `path` is absolute and normalized (no `.`, `..`, `//`, trailing `/`).
fn normalized_absolute(path: &str) -> bool {
    path == "/"
        || (path.starts_with('/')
            && !path.ends_with('/')
            && path
                .split('/')
                .skip(1)
                .all(|c| !c.is_empty() && c != "." && c != ".."))
}

/// `path` (absolute) with `.`, `..` and empty components resolved lexically.
fn lexically_normal(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Whether `inner` is `outer` or beneath it (component-wise).
pub fn within(inner: &str, outer: &str) -> bool {
    outer == "/"
        || inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Looks `program` up on `PATH` unless it is absolute.
fn resolve_program(program: &str) -> Result<PathBuf, McpError> {
    let p = Path::new(program);
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    if program.contains('/') || program.is_empty() {
        return Err(McpError::Config(format!(
            "command `{program}` must be absolute or a bare name found on PATH"
        )));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|c| c.is_file())
        .ok_or_else(|| McpError::Config(format!("command `{program}` is not on PATH")))
}

impl ServersFile {
    /// Parses `servers.toml` text.
    pub fn parse(text: &str) -> Result<Self, McpError> {
        let file: Self = toml::from_str(text).map_err(|e| McpError::Config(e.to_string()))?;
        if file.version != SERVERS_VERSION {
            return Err(McpError::Config(format!(
                "version {} is not supported (expected {SERVERS_VERSION})",
                file.version
            )));
        }
        Ok(file)
    }

    /// The file as `servers.toml` text.
    pub fn to_toml(&self) -> Result<String, McpError> {
        toml::to_string(self).map_err(|e| McpError::Config(e.to_string()))
    }

    /// Reads and validates `servers.toml`; relative manifest paths are resolved
    /// against its directory. Read with Knox's one capped reader: a FIFO, a device or a
    /// directory is refused at once (never waited on), at most [`MAX_SERVERS_BYTES`]
    /// are read, and every error names the file.
    pub fn load(path: &Path) -> Result<Vec<Server>, McpError> {
        let named =
            |e: &dyn std::fmt::Display| McpError::Config(format!("`{}`: {e}", path.display()));
        let bytes = knox_files::read_capped(path, MAX_SERVERS_BYTES)
            .map_err(|e| McpError::Config(e.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|_| named(&"not UTF-8 text"))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text)
            .and_then(|f| f.validate(base))
            .map_err(|e| match e {
                McpError::Config(why) => named(&why),
                other => other,
            })
    }

    /// Checks every server and resolves programs and manifests.
    pub fn validate(self, base: &Path) -> Result<Vec<Server>, McpError> {
        let mut seen = BTreeSet::new();
        self.servers
            .into_iter()
            .map(|s| {
                if !seen.insert(s.name.clone()) {
                    return Err(McpError::Config(format!("server `{}` twice", s.name)));
                }
                for alias in s.tools.keys() {
                    if !seen.insert(format!("tool:{alias}")) {
                        return Err(McpError::Config(format!(
                            "tool `{alias}` is served by two servers"
                        )));
                    }
                }
                s.validate(base)
            })
            .collect()
    }
}

impl ServerSpec {
    /// A stdio server spec with the given needs.
    pub fn stdio(name: &str, command: &str, args: &[String], needs: Needs) -> Self {
        Self {
            name: name.to_owned(),
            command: Some(command.to_owned()),
            args: args.to_vec(),
            env: BTreeMap::new(),
            url: None,
            timeout_secs: None,
            manifest: None,
            roots: None,
            tools: BTreeMap::new(),
            needs,
        }
    }

    /// A Streamable-HTTP server spec.
    pub fn http(name: &str, url: &str) -> Self {
        Self {
            name: name.to_owned(),
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            url: Some(url.to_owned()),
            timeout_secs: None,
            manifest: None,
            roots: None,
            tools: BTreeMap::new(),
            needs: Needs::default(),
        }
    }

    /// `{dir}` in the command, the arguments, the environment's values, the needs'
    /// paths and the roots replaced by `dir` (the directory of `servers.toml`, absolute
    /// and normalized); a needs path or root written with `{dir}` is then normalized
    /// lexically (`{dir}/../x`), so a `servers.toml` shipped beside what it runs works
    /// from any checkout.
    fn expand_dir(mut self, dir: &str) -> Self {
        const DIR: &str = "{dir}";
        let expand = |s: &mut String| {
            if s.contains(DIR) {
                *s = s.replace(DIR, dir);
                true
            } else {
                false
            }
        };
        if let Some(c) = self.command.as_mut() {
            expand(c);
        }
        self.args.iter_mut().for_each(|a| {
            expand(a);
        });
        self.env.values_mut().for_each(|v| {
            expand(v);
        });
        for g in &mut self.needs.paths {
            if expand(&mut g.path) {
                g.path = lexically_normal(&g.path);
            }
        }
        for r in self.roots.iter_mut().flatten() {
            if expand(r) {
                *r = lexically_normal(r);
            }
        }
        self
    }

    /// Validates one server (`base`: the directory of its `servers.toml`).
    pub fn validate(self, base: &Path) -> Result<Server, McpError> {
        // The directory itself, links resolved: `{dir}/../x` then names the same place
        // for the kernel's grants as for the server's command line.
        let dir = std::fs::canonicalize(base)
            .or_else(|_| std::path::absolute(base))
            .map(|d| lexically_normal(&d.to_string_lossy()))
            .map_err(|e| McpError::Config(format!("`{}`: {e}", base.display())))?;
        let this = self.expand_dir(&dir);
        this.validate_expanded(base)
    }

    fn validate_expanded(self, base: &Path) -> Result<Server, McpError> {
        let name = self.name;
        let bad = |why: String| McpError::Config(format!("server `{name}`: {why}"));
        if !valid_server_name(&name) {
            return Err(McpError::Config(format!(
                "server name `{name}` is not 1-64 of [A-Za-z0-9_-]"
            )));
        }
        let timeout_secs = self
            .timeout_secs
            .unwrap_or(DEFAULT_TIMEOUT.as_secs())
            .clamp(1, MAX_TIMEOUT_SECS);
        for g in &self.needs.paths {
            if !normalized_absolute(&g.path) {
                return Err(bad(format!(
                    "path `{}` is not absolute and normalized",
                    g.path
                )));
            }
        }
        for s in &self.needs.syscalls {
            if knox_sandbox::filter::syscall_number(s).is_none() {
                return Err(bad(format!("unknown system call `{s}`")));
            }
        }
        let reach = match (self.command, self.url) {
            (Some(cmd), None) => {
                let program = resolve_program(&cmd).map_err(|e| bad(e.to_string()))?;
                if let Some(k) = self.env.keys().find(|k| k.is_empty() || k.contains('=')) {
                    return Err(bad(format!("environment variable name `{k}`")));
                }
                Reach::Stdio {
                    program,
                    args: self.args,
                    env: self.env.into_iter().collect(),
                }
            }
            (None, Some(url)) => {
                check_url(&url).map_err(bad)?;
                if self.needs != Needs::default() || !self.args.is_empty() {
                    return Err(bad(
                        "an HTTP server runs elsewhere: no `needs` or `args`".into()
                    ));
                }
                Reach::Http { url }
            }
            _ => return Err(bad("exactly one of `command` and `url`".into())),
        };
        let granted: Vec<&str> = self
            .needs
            .paths
            .iter()
            .filter(|g| g.access.contains(&Access::Read))
            .map(|g| g.path.as_str())
            .collect();
        let roots = match self.roots {
            None => Vec::new(),
            Some(asked) => {
                for r in &asked {
                    if !normalized_absolute(r) || !granted.iter().any(|g| within(r, g)) {
                        return Err(bad(format!(
                            "root `{r}` is not within a path the needs grant read on"
                        )));
                    }
                }
                asked
            }
        };
        if let Some((k, v)) = self
            .tools
            .iter()
            .find(|(k, v)| k.is_empty() || v.is_empty() || k.len() > 128 || v.len() > 128)
        {
            return Err(bad(format!("tool alias `{k}` = `{v}`")));
        }
        Ok(Server {
            aliases: self.tools,
            name,
            reach,
            timeout: Duration::from_secs(timeout_secs),
            needs: self.needs,
            roots,
            manifest: self.manifest.map(|m| base.join(m)),
        })
    }
}

/// Accepts `http://HOST[:PORT]/…` and `https://…` URLs without credentials.
pub fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("url `{url}` is not http:// or https://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') || url.chars().any(char::is_whitespace) {
        return Err(format!("url `{url}` has no host, or carries credentials"));
    }
    Ok(())
}

/// The TCP endpoint an `http(s)://` URL reaches: its host (an IPv6 address without
/// brackets) and its port, or the scheme's.
pub fn endpoint_of(url: &str) -> Result<Endpoint, String> {
    check_url(url)?;
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("url `{url}`: {e}"))?;
    match (parsed.host_str(), parsed.port_or_known_default()) {
        (Some(host), Some(port)) => Ok(Endpoint {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
        }),
        _ => Err(format!("url `{url}` names no host and port")),
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]
mod tests {
    use super::*;

    /// `servers.toml` read as any other input: a FIFO with no writer, a device and an
    /// oversized file are refused at once, and every error names the file.
    #[test]
    fn servers_toml_is_read_capped_without_blocking_and_errors_name_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = |p: &Path| match ServersFile::load(p) {
            Err(McpError::Config(why)) => why,
            other => panic!("{}: {other:?}", p.display()),
        };
        let fifo = dir.path().join("servers.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let why = err(&fifo);
        assert!(
            why.contains("FIFO") && why.contains("servers.fifo"),
            "{why}"
        );
        let why = err(Path::new("/dev/zero"));
        assert!(why.contains("/dev/zero") && why.contains("device"), "{why}");
        let big = dir.path().join("big.toml");
        std::fs::write(
            &big,
            vec![b'#'; usize::try_from(MAX_SERVERS_BYTES).unwrap() + 1],
        )
        .unwrap();
        let why = err(&big);
        assert!(why.contains("big.toml") && why.contains("larger"), "{why}");
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "version = 2").unwrap();
        let why = err(&bad);
        assert!(
            why.contains("bad.toml") && why.contains("version 2"),
            "{why}"
        );
        let missing = dir.path().join("missing.toml");
        assert!(err(&missing).contains("missing.toml"));
    }

    #[test]
    fn an_http_url_reaches_its_host_and_port() {
        for (url, host, port) in [
            ("http://127.0.0.1:3001/mcp", "127.0.0.1", 3001),
            ("https://mcp.example/v1", "mcp.example", 443),
            ("http://[::1]/mcp", "::1", 80),
        ] {
            let e = endpoint_of(url).unwrap();
            assert_eq!((e.host.as_str(), e.port), (host, port), "{url}");
        }
        assert!(endpoint_of("ftp://x/").is_err());
        assert!(endpoint_of("http://u:p@x/").is_err());
    }

    #[test]
    fn parses_and_validates_a_servers_file() {
        let text = r#"
version = 1
[[server]]
name = "fs"
command = "/usr/bin/true"
args = ["/srv/a"]
roots = ["/srv/a/docs"]
timeout_secs = 5
[server.needs]
profile = ["offline"]
syscalls = ["epoll_create1"]
paths = [{ path = "/srv/a", access = ["read"] }, { path = "/srv/b", access = ["write"] }]

[[server]]
name = "web"
url = "http://127.0.0.1:9/mcp"
manifest = "web.toml"
"#;
        let servers = ServersFile::parse(text)
            .unwrap()
            .validate(Path::new("/etc/knox"))
            .unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].roots, ["/srv/a/docs"]);
        assert!(servers[1].roots.is_empty());
        assert_eq!(servers[0].timeout, Duration::from_secs(5));
        assert_eq!(
            servers[1].manifest.as_deref(),
            Some(Path::new("/etc/knox/web.toml"))
        );
        assert!(matches!(servers[1].reach, Reach::Http { .. }));
    }

    /// `{dir}` makes a `servers.toml` shipped beside its server work from any checkout;
    /// a hand-written path is still refused unless normalized.
    #[test]
    fn dir_stands_for_the_files_directory() {
        let text = r#"version = 1
[[server]]
name = "notes"
command = "{dir}/../bin/python"
args = ["{dir}/server.py", "{dir}/docs"]
env = { HOME = "{dir}" }
roots = ["{dir}/docs"]
needs = { paths = [{ path = "{dir}/docs", access = ["read", "write"] }, { path = "{dir}/../venv", access = ["read"] }] }
"#;
        let s = ServersFile::parse(text)
            .unwrap()
            .validate(Path::new("/srv/knox/examples/notes/"))
            .unwrap();
        let Reach::Stdio { program, args, env } = &s[0].reach else {
            panic!("stdio");
        };
        assert_eq!(program, Path::new("/srv/knox/examples/notes/../bin/python"));
        assert_eq!(
            args,
            &[
                "/srv/knox/examples/notes/server.py",
                "/srv/knox/examples/notes/docs"
            ]
        );
        assert_eq!(
            env,
            &[("HOME".to_owned(), "/srv/knox/examples/notes".to_owned())]
        );
        assert_eq!(s[0].roots, ["/srv/knox/examples/notes/docs"]);
        let paths: Vec<&str> = s[0].needs.paths.iter().map(|g| g.path.as_str()).collect();
        assert_eq!(
            paths,
            ["/srv/knox/examples/notes/docs", "/srv/knox/examples/venv"]
        );
        let hand = r#"version = 1
[[server]]
name = "a"
command = "/usr/bin/true"
needs = { paths = [{ path = "/srv/../etc", access = ["read"] }] }
"#;
        assert!(
            ServersFile::parse(hand)
                .unwrap()
                .validate(Path::new("/"))
                .is_err()
        );
    }

    #[test]
    fn refuses_what_would_widen_or_confuse() {
        let one = |body: &str| {
            ServersFile::parse(&format!("version = 1\n[[server]]\n{body}"))
                .and_then(|f| f.validate(Path::new("/")))
        };
        // A root outside the grants.
        let e = one(r#"name = "a"
command = "/usr/bin/true"
roots = ["/etc"]
needs = { paths = [{ path = "/srv", access = ["read"] }] }"#)
        .unwrap_err();
        assert!(e.to_string().contains("root `/etc`"), "{e}");
        // `/srvx` is not within `/srv`.
        assert!(
            one(r#"name = "a"
command = "/usr/bin/true"
roots = ["/srvx"]
needs = { paths = [{ path = "/srv", access = ["read"] }] }"#)
            .is_err()
        );
        assert!(
            one(r#"name = "a.b"
command = "/usr/bin/true""#)
            .is_err()
        );
        assert!(
            one(r#"name = "a"
command = "/usr/bin/true"
url = "http://x/""#)
            .is_err()
        );
        assert!(
            one(r#"name = "a"
url = "file:///etc/passwd""#)
            .is_err()
        );
        assert!(
            one(r#"name = "a"
url = "http://user:pw@host/""#)
            .is_err()
        );
        assert!(
            one(r#"name = "a"
command = "/usr/bin/true"
needs = { paths = [{ path = "/srv/../etc", access = ["read"] }] }"#)
            .is_err()
        );
        assert!(
            one(r#"name = "a"
command = "/usr/bin/true"
needs = { syscalls = ["not_a_call"] }"#)
            .is_err()
        );
        assert!(
            one(r#"name = "a"
command = "/usr/bin/true"
surprise = 1"#)
            .is_err()
        );
        assert!(ServersFile::parse("version = 2").is_err());
        assert!(ServersFile::parse("not toml [").is_err());
    }

    #[test]
    fn within_is_component_wise() {
        assert!(within("/a/b", "/a"));
        assert!(within("/a", "/a"));
        assert!(!within("/ab", "/a"));
        assert!(within("/x", "/"));
    }
}
