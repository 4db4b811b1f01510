//! Descriptors: the egress proxy's listening socket, made inside the sandbox's network
//! namespace and handed to revl over `SCM_RIGHTS` (rustix); closing what the caller left
//! open (`close_range`).

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

/// A connected pair of Unix sockets (close-on-exec): revl's end and the sandbox's.
pub fn socket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Receive the listening socket the sandbox sent (waiting at most 30 s).
pub fn receive_fd(sock: &OwnedFd) -> std::io::Result<OwnedFd> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut pfd = [PollFd::new(sock, PollFlags::IN)];
    let wait = Timespec {
        tv_sec: 30,
        tv_nsec: 0,
    };
    if rustix::event::poll(&mut pfd, Some(&wait))? == 0 {
        return Err(std::io::Error::other(
            "the sandbox did not hand over the egress proxy's socket",
        ));
    }
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if got.bytes == 0 {
        return Err(std::io::Error::other(
            "the sandbox closed before handing over the egress proxy's socket",
        ));
    }
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = msg {
            if let Some(fd) = fds.next() {
                return Ok(fd);
            }
        }
    }
    Err(std::io::Error::other(
        "the sandbox sent no socket for the egress proxy",
    ))
}

/// In PID 1, inside the sandbox's network namespace: listen on 127.0.0.1:`port` and send
/// the socket to revl over `sock` (the listener is then revl's alone: PID 1 closes its
/// copy, and `sock`).
pub fn send_listener(sock: RawFd, port: u16) -> std::io::Result<()> {
    let sock = own(sock);
    let l = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let _ = rustix::net::sockopt::set_socket_reuseaddr(&l, true);
    let addr = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port);
    rustix::net::bind(&l, &addr)?;
    rustix::net::listen(&l, 1024)?;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [l.as_fd()];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(
        &sock,
        &[IoSlice::new(&[1u8])],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// Write `data` to the descriptor `fd` (a cgroup's `tasks`), then close it.
pub fn write_and_close(fd: RawFd, data: &[u8]) -> std::io::Result<()> {
    let fd = own(fd);
    rustix::io::write(&fd, data)?;
    Ok(())
}

/// Take ownership of a descriptor the [`crate::Plan`] names (this process's copy).
#[allow(unsafe_code)]
fn own(fd: RawFd) -> OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: the plan's descriptors were open when the command was forked and nothing
    // else in this (forked) process owns its copy of them.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Close every descriptor from `first` on, or with `cloexec` mark them close-on-exec:
/// `close_range` (`CLOSE_RANGE_CLOEXEC`), or one by one up to the open-file limit where the
/// kernel (or a filter) lacks it.
#[allow(unsafe_code)]
pub fn close_from(first: u32, cloexec: bool) {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    let flags = if cloexec { CLOSE_RANGE_CLOEXEC } else { 0 };
    // SAFETY: closes (or marks) descriptors only; no memory is involved. What this process
    // held there is never used again (its owners are gone or exec follows).
    if unsafe { libc::syscall(libc::SYS_close_range, first, !0 as libc::c_uint, flags) } == 0 {
        return;
    }
    let max = crate::limits::hard(crate::limits::Resource::Nofile).map_or(1024, |m| m.min(1 << 20))
        as RawFd;
    for fd in first as RawFd..max {
        // SAFETY: as above, one descriptor at a time.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        if cloexec {
            if let Ok(f) = rustix::io::fcntl_getfd(fd) {
                let _ = rustix::io::fcntl_setfd(fd, f | rustix::io::FdFlags::CLOEXEC);
            }
        } else {
            // SAFETY: as above; a raw close, for most of these are not open (an `OwnedFd`
            // must own an open descriptor).
            unsafe { libc::close(fd.as_raw_fd()) };
        }
    }
}

use std::os::fd::AsRawFd;

/// Let `fd` survive the exec (clear its close-on-exec flag): the one descriptor above 2 the
/// command is meant to keep ([`crate::Plan::note_fd`]).
#[allow(unsafe_code)]
pub fn keep_open(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: changes a descriptor flag only; no memory is involved.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
