//! Network attacks: any socket family, connects that dodge the port checks, listening without `bind`.

use std::net::Ipv4Addr;

use super::{arg, int, port, raw};
use crate::sys;
use crate::{Case, Res};

/// Rows; addresses are loopback, ports and socket names the caller's listeners.
pub const CASES: &[Case] = &[
    ("socket", "DOMAIN TYPE PROTOCOL", |a| {
        Ok(Res::sys(sys::socket(
            int(a, 0)? as i32,
            int(a, 1)? as i32,
            int(a, 2)? as i32,
        )))
    }),
    ("socketpair", "DOMAIN TYPE", |a| {
        let mut fds = [0i32; 2];
        let r = raw(
            libc::SYS_socketpair,
            [int(a, 0)?, int(a, 1)?, 0, fds.as_mut_ptr() as u64],
        );
        if r.is_ok() {
            sys::close(fds[0]);
            sys::close(fds[1]);
        }
        Ok(Res::sys(r))
    }),
    ("fastopen", "PORT", |a| fastopen(port(a)?, false)),
    ("fastopen-sendmsg", "PORT", |a| fastopen(port(a)?, true)),
    ("mptcp-connect", "PORT", mptcp_connect),
    ("listen-autobind", "", listen_autobind),
    ("abstract-connect", "NAME", abstract_connect),
];

/// `struct sockaddr_in` for 127.0.0.1:`port`.
fn loopback(port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    }
}

const SOCKADDR_IN_LEN: u64 = std::mem::size_of::<libc::sockaddr_in>() as u64;

/// A TCP Fast Open send: connects and sends in one `sendto` (or `sendmsg`) with
/// `MSG_FASTOPEN`, without a `connect` call.
fn fastopen(port: u16, msg: bool) -> Result<Res, String> {
    let fd = match raw(
        libc::SYS_socket,
        [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0],
    ) {
        Ok(fd) => fd,
        Err(e) => return Ok(Res::err(e).detail("socket")),
    };
    let addr = loopback(port);
    let data = b"knox";
    let flags = libc::MSG_FASTOPEN as u64;
    let sent = if msg {
        let mut iov = libc::iovec {
            iov_base: data.as_ptr().cast_mut().cast(),
            iov_len: data.len(),
        };
        let hdr = libc::msghdr {
            msg_name: (&addr as *const libc::sockaddr_in).cast_mut().cast(),
            msg_namelen: SOCKADDR_IN_LEN as u32,
            msg_iov: &mut iov,
            msg_iovlen: 1,
            msg_control: std::ptr::null_mut(),
            msg_controllen: 0,
            msg_flags: 0,
        };
        raw(
            libc::SYS_sendmsg,
            [fd as u64, &hdr as *const _ as u64, flags],
        )
    } else {
        raw(
            libc::SYS_sendto,
            [
                fd as u64,
                data.as_ptr() as u64,
                data.len() as u64,
                flags,
                &addr as *const _ as u64,
                SOCKADDR_IN_LEN,
            ],
        )
    };
    sys::close(fd as i32);
    Ok(Res::sys(sent))
}

/// An MPTCP stream socket connecting to 127.0.0.1:PORT.
fn mptcp_connect(a: &[String]) -> Result<Res, String> {
    let fd = match raw(
        libc::SYS_socket,
        [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 262],
    ) {
        Ok(fd) => fd,
        Err(e) => return Ok(Res::err(e).detail("socket")),
    };
    let addr = loopback(port(a)?);
    let r = raw(
        libc::SYS_connect,
        [fd as u64, &addr as *const _ as u64, SOCKADDR_IN_LEN],
    );
    sys::close(fd as i32);
    Ok(Res::sys(r))
}

/// `listen` on an unbound TCP socket: the kernel binds an ephemeral port itself.
fn listen_autobind(_: &[String]) -> Result<Res, String> {
    let fd = match raw(
        libc::SYS_socket,
        [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0],
    ) {
        Ok(fd) => fd,
        Err(e) => return Ok(Res::err(e).detail("socket")),
    };
    let r = raw(libc::SYS_listen, [fd as u64, 1]);
    sys::close(fd as i32);
    Ok(Res::sys(r))
}

/// Connects to the abstract UNIX socket `@NAME`.
fn abstract_connect(a: &[String]) -> Result<Res, String> {
    use std::os::linux::net::SocketAddrExt as _;
    let name = arg(a, 0)?;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| e.to_string())?;
    Ok(Res::io(std::os::unix::net::UnixStream::connect_addr(&addr)))
}
