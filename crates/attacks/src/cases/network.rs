//! Network and exec attacks.

use super::super::{Case, CasePolicy, arg};
use super::{EPERM, case, denied, landlock, v};

const NET: &str = "network";
const EXEC: &str = "exec";
const CLIENT: CasePolicy = CasePolicy::NetworkClient;

/// Network: every socket family an offline tool might open, and the ways a
/// network client might reach a port nobody granted.
pub(super) fn cases() -> Vec<Case> {
    let mut out = sockets();
    out.extend(client());
    out.extend(exec());
    out
}

fn sockets() -> Vec<Case> {
    let socket = |id, description, args: fn(&super::CaseContext<'_>) -> Vec<String>| {
        case(id, NET, description, "socket", args, denied("socket"))
    };
    vec![
        socket(
            "net-socket-tcp4",
            "open an IPv4 TCP socket (offline tools have no sockets)",
            |_| v(["2", "1", "0"]),
        ),
        socket("net-socket-tcp6", "open an IPv6 TCP socket", |_| {
            v(["10", "1", "0"])
        }),
        socket("net-socket-udp4", "open an IPv4 UDP socket", |_| {
            v(["2", "2", "0"])
        }),
        socket("net-socket-udp6", "open an IPv6 UDP socket", |_| {
            v(["10", "2", "0"])
        }),
        socket("net-socket-raw-icmp", "open a raw ICMP socket", |_| {
            v(["2", "3", "1"])
        }),
        socket("net-socket-raw-icmpv6", "open a raw ICMPv6 socket", |_| {
            v(["10", "3", "58"])
        }),
        socket(
            "net-socket-netlink-route",
            "open a NETLINK_ROUTE socket (routes, links)",
            |_| v(["16", "3", "0"]),
        ),
        socket(
            "net-socket-netlink-audit",
            "open a NETLINK_AUDIT socket",
            |_| v(["16", "3", "9"]),
        ),
        socket(
            "net-socket-packet",
            "open an AF_PACKET socket (raw frames, all protocols)",
            |_| v(["17", "3", "768"]),
        ),
        socket(
            "net-socket-unix-dgram",
            "open a datagram UNIX socket",
            |_| v(["1", "2", "0"]),
        ),
        case(
            "net-connect-tcp4",
            NET,
            "connect to the fixture's 127.0.0.1 listener",
            "connect",
            |c| vec![c.fixture.tcp_port().to_string()],
            denied("socket"),
        ),
        case(
            "net-connect-tcp6",
            NET,
            "connect to the fixture's [::1] listener",
            "connect6",
            |c| vec![c.fixture.tcp6_port().unwrap_or(0).to_string()],
            denied("socket"),
        ),
    ]
}

fn client() -> Vec<Case> {
    vec![
        case(
            "net-client-connect-tcp4",
            NET,
            "a network client connects to an ungranted 127.0.0.1 port",
            "connect",
            |c| vec![c.fixture.tcp_port().to_string()],
            denied("connect"),
        )
        .under(CLIENT),
        case(
            "net-client-connect-tcp6",
            NET,
            "a network client connects to an ungranted [::1] port",
            "connect6",
            |c| vec![c.fixture.tcp6_port().unwrap_or(0).to_string()],
            denied("connect"),
        )
        .under(CLIENT),
        case(
            "net-client-udp-send",
            NET,
            "a network client sends a UDP datagram to the fixture's socket",
            "udp-send",
            |c| vec![c.fixture.udp_port().to_string()],
            denied("socket"),
        )
        .under(CLIENT),
        case(
            "net-client-socket-raw",
            NET,
            "a network client opens a raw socket",
            "socket",
            |_| v(["2", "3", "1"]),
            denied("socket"),
        )
        .under(CLIENT),
        case(
            "net-client-socket-netlink",
            NET,
            "a network client opens a netlink socket",
            "socket",
            |_| v(["16", "3", "0"]),
            denied("socket"),
        )
        .under(CLIENT),
        case(
            "net-client-socket-packet",
            NET,
            "a network client opens a packet socket",
            "socket",
            |_| v(["17", "3", "768"]),
            denied("socket"),
        )
        .under(CLIENT),
        case(
            "net-client-bind",
            NET,
            "a network client binds a loopback port",
            "bind",
            |_| v(["0"]),
            denied("bind"),
        )
        .under(CLIENT),
        case(
            "net-client-listen-autobind",
            NET,
            "listen on an unbound socket: the kernel binds a port without bind()",
            "listen-autobind",
            |_| Vec::new(),
            denied("listen"),
        )
        .under(CLIENT),
        case(
            "net-client-unix-connect",
            NET,
            "connect to the fixture's pathname UNIX socket (a daemon socket stands for it)",
            "unix-connect",
            |c| vec![arg(&c.fixture.unix_socket())],
            denied("connect"),
        )
        .under(CLIENT),
        case(
            "net-client-abstract-connect",
            NET,
            "connect to the fixture's abstract UNIX socket, outside the sandbox",
            "abstract-connect",
            |c| vec![c.fixture.abstract_name().to_owned()],
            landlock(EPERM),
        )
        .under(CLIENT),
        case(
            "net-python-socketpair-dgram",
            NET,
            "a UNIX datagram socket pair under the python profile (a datagram socket could sendto a pathname socket Landlock does not check)",
            "socketpair",
            |_| v(["1", "2"]),
            denied("socketpair"),
        )
        .under(CasePolicy::Python),
        case(
            "net-python-socketpair-inet",
            NET,
            "an AF_INET socket pair under the python profile",
            "socketpair",
            |_| v(["2", "1"]),
            denied("socketpair"),
        )
        .under(CasePolicy::Python),
        case(
            "net-client-fastopen",
            NET,
            "TCP Fast Open: sendto(MSG_FASTOPEN) connects without connect()",
            "fastopen",
            |c| vec![c.fixture.tcp_port().to_string()],
            denied("sendto"),
        )
        .under(CLIENT),
        case(
            "net-client-fastopen-sendmsg",
            NET,
            "TCP Fast Open through sendmsg(MSG_FASTOPEN)",
            "fastopen-sendmsg",
            |c| vec![c.fixture.tcp_port().to_string()],
            denied("sendmsg"),
        )
        .under(CLIENT),
        case(
            "net-client-mptcp",
            NET,
            "an MPTCP stream socket, which Landlock's TCP rules do not cover",
            "mptcp-connect",
            |c| vec![c.fixture.tcp_port().to_string()],
            denied("socket"),
        )
        .under(CLIENT),
    ]
}

fn exec() -> Vec<Case> {
    vec![
        case(
            "exec-unlisted-binary",
            EXEC,
            "execute a system binary no grant lists",
            "exec",
            |_| v(["/bin/true"]),
            denied("execve"),
        ),
        case(
            "exec-shell-c",
            EXEC,
            "run a command through /bin/sh -c",
            "exec",
            |_| v(["/bin/sh", "-c", "exit 0"]),
            denied("execve"),
        ),
        case(
            "exec-workspace-copy",
            EXEC,
            "execute a binary copied into the workspace",
            "exec",
            |c| vec![c.tool("true")],
            denied("execve"),
        ),
        case(
            "exec-workspace-script",
            EXEC,
            "execute a #! script in the workspace",
            "exec",
            |c| vec![c.tool("script.sh")],
            denied("execve"),
        ),
        case(
            "exec-proc-pid-exe",
            EXEC,
            "execute the victim's unlisted binary through its /proc/<pid>/exe link",
            "exec",
            |c| vec![format!("/proc/{}/exe", c.victim.pid)],
            denied("execve"),
        ),
        case(
            "exec-proc-self-root",
            EXEC,
            "execute an unlisted binary through /proc/self/root",
            "exec",
            |_| v(["/proc/self/root/bin/true"]),
            denied("execve"),
        ),
        case(
            "exec-elf-interpreter",
            EXEC,
            "run a workspace binary through the ELF interpreter (ld.so PROGRAM)",
            "exec",
            |c| vec!["/lib64/ld-linux-x86-64.so.2".to_owned(), c.tool("true")],
            denied("execve"),
        ),
        case(
            "exec-memfd",
            EXEC,
            "copy a binary into a memfd and fexecve it",
            "memfd-exec",
            |c| vec![c.tool("true")],
            denied("memfd_create"),
        ),
        case(
            "exec-memfd-execveat",
            EXEC,
            "fexecve a memfd when memfd_create is granted",
            "memfd-exec",
            |c| vec![c.tool("true")],
            denied("execveat"),
        )
        .under(CasePolicy::OfflineWith(&["memfd_create"])),
        case(
            "exec-execveat-dirfd",
            EXEC,
            "execveat relative to an O_PATH descriptor of /bin",
            "execveat",
            |_| v(["/bin", "true"]),
            denied("execveat"),
        ),
        case(
            "exec-execveat-empty-path",
            EXEC,
            "execveat(fd, \"\", AT_EMPTY_PATH) of a workspace binary",
            "exec-fd",
            |c| vec![c.tool("true")],
            denied("execveat"),
        ),
        case(
            "exec-terminal-shell",
            EXEC,
            "a terminal tool runs an unlisted shell",
            "exec",
            |_| v(["/bin/sh", "-c", "exit 0"]),
            denied("execve"),
        )
        .under(CasePolicy::Terminal),
    ]
}
