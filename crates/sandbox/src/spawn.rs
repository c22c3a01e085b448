//! `Sandbox`: configuration, policy preparation, and `spawn`.

use std::collections::BTreeSet;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cgroup::Lease;
use crate::cgroup::{CgroupError, CgroupPool, CgroupVersion};
use crate::child::{ConfinedChild, Enforcement};
use crate::filter::{self, Fallbacks, FilterError, MEDIATED, SIGNAL_CALLS};
use crate::frame::FrameError;
use crate::launch::{Launch, Started};
use crate::layers::{self, Layers};
use crate::policy::{Limits, PolicyError, SandboxPolicy};
use crate::ruleset::{self, LandlockError, LandlockRuleset, ResolvedPaths};
use crate::supervisor::Mediation;
use crate::sys::{self, ChildStep, Resource, Rlimit, UserNamespaceMaps};
use crate::worker::Worker;
use crate::workers::Workers;

/// Whether spawns are placed in cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CgroupMode {
    /// Required when running as root (rlimits cannot cap root's processes);
    /// otherwise used when the caller may create cgroups, else `RLIMIT_NPROC` in a
    /// user namespace and `RLIMIT_AS` replace them.
    Auto,
    /// Always required; [`Sandbox::new`] fails without them.
    Required,
    /// Never used, even as root: process and memory caps are then NOT enforced
    /// for root. For development only.
    DangerousDisabled,
}

/// How a [`Sandbox`] runs tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Cgroup use.
    pub cgroups: CgroupMode,
    /// A delegated cgroup to nest the pool under (v2); default: this process's own cgroup.
    pub cgroup_parent: Option<PathBuf>,
    /// Cgroups created up front.
    pub pool_prefill: usize,
    /// Free cgroups kept for reuse.
    pub pool_capacity: usize,
    /// Wall-clock limit of one run; the whole process tree is killed past it.
    pub timeout: Duration,
    /// Bytes of stdout and of stderr kept (the rest is read and dropped).
    pub max_output_bytes: usize,
    /// Ask Landlock (ABI ≥ 7) to audit denials made by the executed tool.
    pub audit_landlock_denials: bool,
    /// Use at most this Landlock ABI even if the kernel has a newer one (to run
    /// as on an older kernel). Default: the `KNOX_LANDLOCK_ABI_MAX` environment
    /// variable if it holds a number, else none.
    pub landlock_abi_max: Option<u8>,
    /// When the caller is root: the unprivileged uid and gid tools run as (no
    /// supplementary groups, no capabilities). `None` keeps uid 0 with every
    /// capability dropped. Ignored (with a note) for other callers, whose tools
    /// already run under the caller's own uid.
    pub run_as: Option<crate::identity::RunAs>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            cgroups: CgroupMode::Auto,
            cgroup_parent: None,
            pool_prefill: 2,
            pool_capacity: 16,
            timeout: Duration::from_secs(60),
            max_output_bytes: 16 << 20,
            audit_landlock_denials: true,
            landlock_abi_max: std::env::var(layers::ABI_CAP_ENV)
                .ok()
                .and_then(|v| v.trim().parse().ok()),
            run_as: None,
        }
    }
}

/// Why a sandbox could not be set up or a tool could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The policy is invalid.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// Landlock cannot enforce the policy.
    #[error(transparent)]
    Landlock(#[from] LandlockError),
    /// The seccomp filter could not be built.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// Cgroups are required but unusable.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// `argv` is empty.
    #[error("argv is empty")]
    EmptyArgv,
    /// An environment variable name is empty or contains `=`.
    #[error("environment variable name `{0}` is empty or contains `=`")]
    EnvKey(String),
    /// A string contains a NUL byte.
    #[error("`{0}` contains a NUL byte")]
    Nul(String),
    /// The program is not beneath any path the policy grants execute on.
    #[error("program `{program}` is not authorized for execute")]
    ProgramNotAuthorized {
        /// The program path.
        program: PathBuf,
    },
    /// A step of the child's setup failed.
    #[error("child setup failed at {step:?}: {source}")]
    ChildSetup {
        /// The step.
        step: ChildStep,
        /// The errno it reported.
        source: std::io::Error,
    },
    /// The child died or spoke nonsense before finishing its setup.
    #[error("child setup protocol: {0}")]
    Protocol(&'static str),
    /// The worker has exited (or was killed) by an earlier call; spawn another.
    #[error("the worker has exited")]
    WorkerExited,
    /// A worker request could not be framed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The configured `run_as` identity is unusable.
    #[error("run_as: {0}")]
    RunAs(String),
    /// A system call in the parent failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

pub(crate) fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |source| SandboxError::Io { what, source }
}

/// Starts confined tools. Holds the cgroup pool; dropping it kills what is left.
#[derive(Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    pool: Option<CgroupPool>,
    euid: u32,
    egid: u32,
    /// The identity tools run as (root callers with `run_as`).
    identity: Option<crate::identity::RunAs>,
    notes: Vec<String>,
    workers: Workers,
    idmaps: crate::idmap::Idmaps,
}

impl Sandbox {
    /// Detects the kernel's facilities and creates the cgroup pool.
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        let euid = sys::geteuid();
        let mut notes = Vec::new();
        let identity = match config.run_as {
            Some(ids) if euid == 0 => {
                ids.validate().map_err(SandboxError::RunAs)?;
                Some(ids)
            }
            Some(ids) => {
                notes.push(format!(
                    "run_as {}:{} not applied: tools run as the caller's uid {euid}",
                    ids.uid, ids.gid
                ));
                None
            }
            None => None,
        };
        let pool = match config.cgroups {
            CgroupMode::DangerousDisabled => {
                notes.push("cgroups disabled by configuration (dangerous)".to_owned());
                None
            }
            mode => {
                let made = CgroupPool::new(
                    config.cgroup_parent.as_deref(),
                    config.pool_prefill,
                    config.pool_capacity,
                );
                match made {
                    Ok(pool) => Some(pool),
                    Err(e) if mode == CgroupMode::Auto && euid != 0 => {
                        notes.push(format!(
                            "no cgroups ({e}): RLIMIT_NPROC in a user namespace, RLIMIT_AS"
                        ));
                        None
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        Ok(Self {
            config,
            pool,
            euid,
            egid: sys::getegid(),
            identity,
            notes,
            workers: Workers::new(),
            idmaps: crate::idmap::Idmaps::default(),
        })
    }

    /// The uid and gid tools run as, when not the caller's own (root with `run_as`).
    pub fn tool_identity(&self) -> Option<crate::identity::RunAs> {
        self.identity
    }

    /// The cgroup interface enforcing process and memory caps, if any.
    pub fn cgroup_version(&self) -> Option<CgroupVersion> {
        self.pool.as_ref().map(CgroupPool::version)
    }

    /// Cgroup pools of dead owners (a Knox process killed before it could remove
    /// its own) that creating this sandbox killed and removed.
    pub fn reclaimed_cgroups(&self) -> &[PathBuf] {
        self.pool.as_ref().map_or(&[], CgroupPool::reclaimed)
    }

    /// The directories holding this sandbox's cgroup pool (removed on drop).
    pub fn cgroup_pool_dirs(&self) -> Vec<PathBuf> {
        self.pool.as_ref().map(CgroupPool::dirs).unwrap_or_default()
    }

    /// Validates and compiles a policy once (Landlock ruleset, BPF program) so that
    /// many spawns can share it.
    pub fn prepare(&self, policy: &SandboxPolicy) -> Result<PreparedPolicy, SandboxError> {
        PreparedPolicy::new(
            policy,
            self.config.audit_landlock_denials,
            self.config.landlock_abi_max,
        )
    }

    /// Prepares `policy` and spawns `argv` under it.
    pub fn spawn<S: AsRef<OsStr>>(
        &self,
        policy: &SandboxPolicy,
        argv: &[S],
        env: &[(String, String)],
        stdin: &[u8],
    ) -> Result<ConfinedChild, SandboxError> {
        self.spawn_prepared(&self.prepare(policy)?, argv, env, stdin)
    }

    /// Spawns `argv` (`argv[0]` an absolute path under an execute grant) with exactly
    /// the environment `env`, feeding it `stdin`.
    pub fn spawn_prepared<S: AsRef<OsStr>>(
        &self,
        prepared: &PreparedPolicy,
        argv: &[S],
        env: &[(String, String)],
        stdin: &[u8],
    ) -> Result<ConfinedChild, SandboxError> {
        let (started, lease, enforcement) = self.launch(prepared, argv, env)?;
        let limits = &prepared.policy.limits;
        Ok(ConfinedChild::assemble(
            started,
            lease,
            limits,
            enforcement,
            stdin,
            &self.config,
            &self.workers,
        ))
    }

    /// Spawns `argv` under `prepared` as a long-lived worker that serves many
    /// requests of one run, framed on its standard input and output (see
    /// [`crate::frame`]). Confinement cannot be undone, so every request sees the
    /// same policy; the rlimits (CPU seconds included) and cgroup caps apply to the
    /// worker's whole life, each request is bounded by its own timeout.
    pub fn spawn_worker<S: AsRef<OsStr>>(
        &self,
        prepared: &PreparedPolicy,
        argv: &[S],
        env: &[(String, String)],
    ) -> Result<Worker, SandboxError> {
        let (started, lease, enforcement) = self.launch(prepared, argv, env)?;
        let (child, stdin, stdout) = ConfinedChild::assemble_worker(
            started,
            lease,
            &prepared.policy.limits,
            enforcement,
            &self.config,
            &self.workers,
        );
        let stdout = stdout.ok_or(SandboxError::Protocol("worker stdout was not kept"))?;
        Worker::new(child, stdin, stdout, self.config.max_output_bytes)
    }

    /// Spawns `argv` under `prepared` as a long-lived process speaking its own
    /// protocol on its standard input and output (an MCP server over stdio, say),
    /// which are handed back as the write end of its stdin and the read end of its
    /// stdout (blocking pipes); standard error is collected into the
    /// [`crate::Outcome`]. Denials stream through [`ConfinedChild::denied_events`];
    /// the process is killed when the returned child is dropped.
    pub fn spawn_piped<S: AsRef<OsStr>>(
        &self,
        prepared: &PreparedPolicy,
        argv: &[S],
        env: &[(String, String)],
    ) -> Result<(ConfinedChild, std::fs::File, std::fs::File), SandboxError> {
        let (started, lease, enforcement) = self.launch(prepared, argv, env)?;
        let (child, stdin, stdout) = ConfinedChild::assemble_worker(
            started,
            lease,
            &prepared.policy.limits,
            enforcement,
            &self.config,
            &self.workers,
        );
        let stdout = stdout.ok_or(SandboxError::Protocol("stdout was not kept"))?;
        Ok((child, stdin, stdout))
    }

    /// Spawns the program open at `program` — a descriptor the caller opened and
    /// checked (for example hashed against a pinned digest) — with `argv` (`argv[0]`
    /// is only the name the tool sees) under `prepared`. The child executes **that
    /// descriptor** (through `/proc/self/fd/N`, as `fexecve` does): no path is looked
    /// up again between the caller's check and the `execve`, so a file swapped at the
    /// path meanwhile is not what runs. The file must still be under an execute grant
    /// of the policy: Landlock and the supervisor check the file the descriptor names.
    pub fn spawn_fd<S: AsRef<OsStr>>(
        &self,
        prepared: &PreparedPolicy,
        program: OwnedFd,
        argv: &[S],
        env: &[(String, String)],
        stdin: &[u8],
    ) -> Result<ConfinedChild, SandboxError> {
        let path = prepared.command_fd(&program)?;
        let argv = argv
            .iter()
            .map(|a| cstring(a.as_ref().as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        if argv.is_empty() {
            return Err(SandboxError::EmptyArgv);
        }
        let (started, lease, enforcement) =
            self.launch_with(prepared, path, argv, env, Some(program))?;
        Ok(ConfinedChild::assemble(
            started,
            lease,
            &prepared.policy.limits,
            enforcement,
            stdin,
            &self.config,
            &self.workers,
        ))
    }

    /// Authorizes `argv`, leases a cgroup and starts the confined child.
    fn launch<S: AsRef<OsStr>>(
        &self,
        prepared: &PreparedPolicy,
        argv: &[S],
        env: &[(String, String)],
    ) -> Result<(Started, Option<Lease>, Enforcement), SandboxError> {
        let (program, argv) = prepared.command(argv)?;
        self.launch_with(prepared, program, argv, env, None)
    }

    /// Leases a cgroup and starts the confined child running `program` (already
    /// authorized), or the descriptor `given` when there is one.
    fn launch_with(
        &self,
        prepared: &PreparedPolicy,
        program: CString,
        argv: Vec<CString>,
        env: &[(String, String)],
        given: Option<OwnedFd>,
    ) -> Result<(Started, Option<Lease>, Enforcement), SandboxError> {
        let envp = envp(env)?;
        let lease = self.lease(&prepared.policy.limits)?;
        let user_namespace = self.euid != 0 && lease.is_none();
        let mut notes: Vec<String> = self
            .notes
            .iter()
            .chain(&prepared.paths.notes)
            .cloned()
            .collect();
        let mounts = match self.identity {
            Some(ids) => {
                let workspace = Path::new(OsStr::from_bytes(prepared.workspace.as_bytes()));
                self.idmaps
                    .mounts(ids, &prepared.paths.rules, workspace, &mut notes)
            }
            None => Vec::new(),
        };
        let enforcement = Enforcement {
            landlock_abi_required: prepared.policy.min_landlock_abi.unwrap_or(layers::MIN_ABI),
            landlock_abi: prepared.ruleset.kernel_abi,
            layers: Some(prepared.layers.clone()),
            cgroup: lease.as_ref().and(self.cgroup_version()),
            user_namespace,
            capabilities_dropped: self.euid == 0 || user_namespace,
            run_as: self.identity,
            seccomp_instructions: prepared.filter.len(),
            notes,
        };
        let rlimits = rlimits(&prepared.policy.limits, lease.is_some(), user_namespace);
        let (uid_map, gid_map) = (self.id_map(self.euid), self.id_map(self.egid));
        // Opened as root: the tool's uid executes it through this descriptor.
        let program_fd = match (given, self.identity) {
            (Some(fd), _) => Some(fd),
            (None, Some(_)) => Some(open_path(&program)?),
            (None, None) => None,
        };
        let launch = Launch {
            program: &program,
            argv: &argv,
            envp: &envp,
            rlimits: &rlimits,
            lease: lease.as_ref(),
            identity: self.identity.map(|r| (r.uid, r.gid)),
            program_fd: program_fd.as_ref().map(AsFd::as_fd),
            mounts: &mounts,
        };
        let userns = user_namespace.then_some(UserNamespaceMaps {
            uid_map: uid_map.as_bytes(),
            gid_map: gid_map.as_bytes(),
        });
        let caps = enforcement.capabilities_dropped;
        let started = launch.start(prepared, &self.workers, userns, caps)?;
        Ok((started, lease, enforcement))
    }

    /// DANGEROUS, NOT A SANDBOX: runs `argv` with only resource caps — a cgroup
    /// lease with `limits`, the rlimits, a timeout — and in new mount (all mounts
    /// private), UTS and IPC namespaces, but with no Landlock, no seccomp filter
    /// and every capability kept. The attack corpus's unconfined baseline runs
    /// through this so that it cannot exhaust the machine and its privileged
    /// calls cannot reach the host's mounts, host name or IPC objects; callers
    /// without root get a user namespace as well (and `RLIMIT_NPROC`, `RLIMIT_AS`
    /// without cgroups).
    pub fn dangerous_spawn_limits_only<S: AsRef<OsStr>>(
        &self,
        workspace: &Path,
        limits: &Limits,
        argv: &[S],
        env: &[(String, String)],
    ) -> Result<ConfinedChild, SandboxError> {
        let first = argv.first().ok_or(SandboxError::EmptyArgv)?;
        let program = cstring(first.as_ref().as_bytes())?;
        let argv = argv
            .iter()
            .map(|a| cstring(a.as_ref().as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = envp(env)?;
        let cwd = cstring(workspace.as_os_str().as_bytes())?;
        let lease = self.lease(limits)?;
        let user_namespace = self.euid != 0;
        let rlimits = rlimits(limits, lease.is_some(), user_namespace);
        let (uid_map, gid_map) = (self.id_map(self.euid), self.id_map(self.egid));
        let launch = Launch {
            program: &program,
            argv: &argv,
            envp: &envp,
            rlimits: &rlimits,
            lease: lease.as_ref(),
            identity: None,
            program_fd: None,
            mounts: &[],
        };
        let userns = user_namespace.then_some(UserNamespaceMaps {
            uid_map: uid_map.as_bytes(),
            gid_map: gid_map.as_bytes(),
        });
        let namespaces = libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::CLONE_NEWIPC;
        let started = launch.dangerous_start_limits_only(&cwd, userns, namespaces)?;
        let enforcement = Enforcement {
            landlock_abi_required: layers::MIN_ABI,
            landlock_abi: 0,
            layers: None,
            cgroup: lease.as_ref().and(self.cgroup_version()),
            user_namespace,
            capabilities_dropped: false,
            run_as: None,
            seccomp_instructions: 0,
            notes: vec![
                "DANGEROUS baseline: no Landlock, no seccomp, capabilities kept; \
                 cgroup, rlimits and private mount/UTS/IPC namespaces only"
                    .to_owned(),
            ],
        };
        let stdin = b"";
        Ok(ConfinedChild::assemble(
            started,
            lease,
            limits,
            enforcement,
            stdin,
            &self.config,
            &self.workers,
        ))
    }

    fn lease(&self, limits: &Limits) -> Result<Option<Lease>, SandboxError> {
        match &self.pool {
            Some(pool) => Ok(Some(
                pool.lease(limits.max_processes, limits.max_memory_bytes)?,
            )),
            None => Ok(None),
        }
    }

    /// A one-line uid or gid map for a new user namespace: `id` maps to itself.
    fn id_map(&self, id: u32) -> String {
        format!("{id} {id} 1\n")
    }
}

/// The program opened `O_PATH` (close-on-exec): executed as `/proc/self/fd/N`, it
/// needs execute permission on the file only, not search on the directories above.
fn open_path(program: &CString) -> Result<OwnedFd, SandboxError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(OsStr::from_bytes(program.as_bytes()))
        .map(OwnedFd::from)
        .map_err(io("opening the program"))
}

fn envp(env: &[(String, String)]) -> Result<Vec<CString>, SandboxError> {
    if let Some((key, _)) = env.iter().find(|(k, _)| k.is_empty() || k.contains('=')) {
        return Err(SandboxError::EnvKey(key.clone()));
    }
    env.iter()
        .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
        .collect()
}

/// A policy compiled for the kernel: the Landlock ruleset and the BPF program.
#[derive(Debug)]
pub struct PreparedPolicy {
    pub(crate) policy: SandboxPolicy,
    pub(crate) workspace: CString,
    pub(crate) paths: ResolvedPaths,
    pub(crate) ruleset: LandlockRuleset,
    pub(crate) filter: sys::BpfProgram,
    pub(crate) mediation: Arc<Mediation>,
    pub(crate) layers: Layers,
    /// The reader of Landlock's audit records, when they are read (ABI ≥ 7).
    pub(crate) audit: Option<Arc<crate::audit::Tap>>,
}

impl PreparedPolicy {
    fn new(policy: &SandboxPolicy, audit: bool, abi_cap: Option<u8>) -> Result<Self, SandboxError> {
        policy.validate()?;
        let workspace =
            std::fs::canonicalize(&policy.workspace).map_err(|source| PolicyError::Workspace {
                path: policy.workspace.clone(),
                source,
            })?;
        let mut paths = ruleset::resolve(policy, &workspace);
        let (kernel, abi) =
            layers::abi_in_use(sys::landlock_abi(), abi_cap).map_err(LandlockError::from)?;
        let tap = crate::audit::for_abi(audit, abi, &mut paths.notes);
        let layers = layers::plan(
            kernel,
            abi_cap,
            abi,
            policy.min_landlock_abi,
            &policy.degraded,
            &paths,
            tap.is_some(),
        )
        .map_err(LandlockError::from)?;
        let ruleset = ruleset::build(
            &paths,
            &policy.tcp_connect_ports,
            &policy.tcp_bind_ports,
            audit,
            abi,
        )?;
        let fallbacks = Fallbacks {
            truncate: layers.truncate_by_seccomp(),
            scope: layers.scope_by_supervisor(),
        };
        let filter = filter::compile(&policy.syscalls, fallbacks)?;
        let listed: BTreeSet<&'static str> = MEDIATED
            .into_iter()
            .chain(SIGNAL_CALLS)
            .filter(|m| policy.syscalls.contains(*m))
            .collect();
        let mediation = Mediation {
            listed,
            exec_roots: paths.exec_roots().map(Path::to_path_buf).collect(),
            connect_ports: policy.tcp_connect_ports.clone(),
            bind_ports: policy.tcp_bind_ports.clone(),
            tcp_by_supervisor: layers.tcp_by_supervisor(),
            scope_by_supervisor: layers.scope_by_supervisor(),
        };
        let workspace = cstring(workspace.as_os_str().as_bytes())?;
        Ok(Self {
            policy: policy.clone(),
            workspace,
            paths,
            ruleset,
            filter,
            mediation: Arc::new(mediation),
            layers,
            audit: tap,
        })
    }

    /// The policy this was prepared from.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    /// Notes on skipped paths and implicit grants.
    pub fn notes(&self) -> &[String] {
        &self.paths.notes
    }

    /// Landlock ABI of the running kernel.
    pub fn landlock_abi(&self) -> i32 {
        self.ruleset.kernel_abi
    }

    /// The Landlock ABI in use and the layer enforcing each protection.
    pub fn layers(&self) -> &Layers {
        &self.layers
    }

    /// Resolves and authorizes `argv[0]`; returns the program to execute and argv.
    /// The canonical path of the file open at `program`, when it is under an
    /// execute grant of the policy.
    fn command_fd(&self, program: &OwnedFd) -> Result<CString, SandboxError> {
        use std::os::fd::AsRawFd as _;
        let link = PathBuf::from(format!("/proc/self/fd/{}", program.as_raw_fd()));
        let canonical = std::fs::read_link(&link)
            .ok()
            .filter(|c| c.is_absolute())
            .filter(|c| self.mediation.exec_roots.iter().any(|r| c.starts_with(r)))
            .ok_or(SandboxError::ProgramNotAuthorized { program: link })?;
        cstring(canonical.as_os_str().as_bytes())
    }

    fn command<S: AsRef<OsStr>>(
        &self,
        argv: &[S],
    ) -> Result<(CString, Vec<CString>), SandboxError> {
        let first = argv.first().ok_or(SandboxError::EmptyArgv)?;
        let given = Path::new(first.as_ref());
        let canonical = std::fs::canonicalize(given)
            .ok()
            .filter(|_| given.is_absolute())
            .filter(|c| self.mediation.exec_roots.iter().any(|r| c.starts_with(r)))
            .ok_or_else(|| SandboxError::ProgramNotAuthorized {
                program: given.to_path_buf(),
            })?;
        let argv = argv
            .iter()
            .map(|a| cstring(a.as_ref().as_bytes()))
            .collect::<Result<_, _>>()?;
        Ok((cstring(canonical.as_os_str().as_bytes())?, argv))
    }
}

/// The rlimits for one spawn. `RLIMIT_CPU` soft is one second below hard so the
/// tool gets `SIGXCPU` first; `RLIMIT_AS` replaces the memory cgroup when there is none.
fn rlimits(l: &Limits, cgroup: bool, user_namespace: bool) -> Vec<Rlimit> {
    let same = |resource, v| Rlimit {
        resource,
        soft: v,
        hard: v,
    };
    let mut out = vec![
        Rlimit {
            resource: Resource::Cpu,
            soft: l.cpu_seconds,
            hard: l.cpu_seconds + 1,
        },
        same(Resource::FileSize, l.max_file_bytes),
        same(Resource::OpenFiles, l.max_open_files),
        same(Resource::Core, 0),
    ];
    match (l.max_address_space_bytes, cgroup) {
        (Some(v), _) => out.push(same(Resource::AddressSpace, v)),
        (None, false) => out.push(same(Resource::AddressSpace, l.max_memory_bytes)),
        (None, true) => {}
    }
    if !cgroup || user_namespace {
        out.push(same(Resource::Processes, u64::from(l.max_processes)));
    }
    out
}

pub(crate) fn cstring(bytes: &[u8]) -> Result<CString, SandboxError> {
    CString::new(bytes).map_err(|_| SandboxError::Nul(String::from_utf8_lossy(bytes).into_owned()))
}
