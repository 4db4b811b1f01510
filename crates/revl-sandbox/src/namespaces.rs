//! Namespaces and processes between fork and exec: `unshare`, a `clone` that shares memory
//! instead of copying it (and runs no fork handler), the user namespaces' id maps, reaping,
//! the loopback interface of the new network namespace, and a fresh session keyring.

use std::ffi::CStr;

fn check(r: libc::c_long) -> std::io::Result<libc::c_long> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `unshare(flags)`.
#[allow(unsafe_code)]
pub fn unshare(flags: libc::c_int) -> std::io::Result<()> {
    // SAFETY: the flags are namespace flags (no CLONE_FILES, CLONE_FS or CLONE_VM, which
    // would change what this process's memory and descriptors mean).
    check(unsafe { libc::unshare(flags) } as libc::c_long)?;
    Ok(())
}

/// A stack for a process made by [`spawn_vm`]: an anonymous private mapping (its pages are
/// only made as they are touched) with an inaccessible guard page below it, so an overflow
/// faults instead of writing into other memory. Made with a system call, not the
/// allocator (this runs between fork and exec); never unmapped (the processes that share
/// this memory exit or exec, and the memory goes with them).
pub struct Stack {
    top: *mut libc::c_void,
}

/// The size of a [`Stack`] above its guard page. The set-up needs a few kilobytes; this
/// leaves a debug build's deeper frames ample room, and costs only the pages used.
pub const STACK_SIZE: usize = 1 << 20;

const GUARD: usize = 4096;

impl Stack {
    #[allow(unsafe_code)]
    pub fn new() -> std::io::Result<Stack> {
        use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};
        // SAFETY: a fresh anonymous mapping nobody else refers to; its lowest page is then
        // made inaccessible (the stack grows down towards it).
        let base = unsafe {
            let base = rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                GUARD + STACK_SIZE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::STACK,
            )?;
            rustix::mm::mprotect(base, GUARD, MprotectFlags::empty())?;
            base
        };
        Ok(Stack {
            top: base.cast::<u8>().wrapping_add(GUARD + STACK_SIZE).cast(),
        })
    }
}

/// Start a child process that shares this process's memory (`CLONE_VM`, as `posix_spawn`
/// does) and runs `entry(arg)` on `stack`, plus `flags` (`CLONE_NEWUSER`: in a new user
/// namespace). Nothing is copied: a fork of revl copies its page tables, which costs about
/// 0.1 ms of CPU per MB of the caller's memory for the fork and its teardown
/// (docs/performance.md), and the sandbox starts two processes. The child's pid.
///
/// # Safety
///
/// Unlike a fork, parent and child now write the same memory. `entry` must touch only its
/// own stack, the shared page's atomics and data no process changes any more (the plan,
/// and what `arg` points to, which must stay where it is while the child may read it), and
/// must never return (it ends with `_exit` or `execve`). They also share the C library's
/// thread-local `errno`: the caller keeps the system calls that may set it out of the
/// child's way (see `crate::enter`).
#[allow(unsafe_code)]
pub unsafe fn spawn_vm(
    flags: libc::c_int,
    stack: &Stack,
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *const libc::c_void,
) -> std::io::Result<libc::pid_t> {
    // SAFETY: `stack.top` is the top of a mapping of STACK_SIZE writable bytes that only
    // the child uses; `arg` outlives the child's use of it (this function's contract); no
    // CLONE_THREAD, CLONE_FILES,
    // CLONE_FS or CLONE_SIGHAND: the child is a process of its own, with its own copy of
    // the descriptor table, working directory and signal handlers. The C library's `clone`
    // runs no fork handler.
    let r = unsafe {
        libc::clone(
            entry,
            stack.top,
            libc::CLONE_VM | libc::SIGCHLD | flags,
            arg.cast_mut(),
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `_exit(code)`: no destructor, no `atexit` handler (this is a copy of revl's process).
#[allow(unsafe_code)]
pub fn exit(code: i32) -> ! {
    // SAFETY: `_exit` ends the process; nothing of it runs after.
    unsafe { libc::_exit(code) }
}

/// `SIGKILL` to `pid`.
pub fn kill(pid: libc::pid_t) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Reap every child (orphans included) until `pid` exits; its wait status.
pub fn reap_until(pid: libc::pid_t) -> libc::c_int {
    loop {
        match rustix::process::wait(rustix::process::WaitOptions::empty()) {
            Ok(Some((p, st))) if p.as_raw_nonzero().get() == pid => return st.as_raw(),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return 0,
        }
    }
}

/// Write `data` to a file of /proc (an id map, `setgroups`).
pub fn write_proc(path: &CStr, data: &[u8]) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::io::write(&fd, data)?;
    Ok(())
}

/// In a user namespace this process made: map only the caller's uid and gid.
pub fn write_own_maps(uid_map: &CStr, gid_map: &CStr) -> std::io::Result<()> {
    write_proc(c"/proc/self/setgroups", b"deny")?;
    write_proc(c"/proc/self/uid_map", uid_map.to_bytes())?;
    write_proc(c"/proc/self/gid_map", gid_map.to_bytes())
}

/// The identity maps of the whole id range for the child `pid`'s user namespace (written
/// by its parent): files keep their owners.
pub fn write_identity_maps(pid: libc::pid_t) -> std::io::Result<()> {
    let full = b"0 0 4294967295\n";
    write_child_map(pid, b"uid_map\0", full)?;
    write_child_map(pid, b"gid_map\0", full)
}

/// `v` in decimal at the start of `buf`; its length.
fn decimal(mut v: u32, buf: &mut [u8; 12]) -> usize {
    let mut digits = [0u8; 12];
    let mut d = 0;
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..d {
        buf[i] = digits[d - 1 - i];
    }
    d
}

/// Write `/proc/PID/NAME` (a child's id map) from a stack buffer: no allocation.
fn write_child_map(pid: libc::pid_t, name: &[u8], data: &[u8]) -> std::io::Result<()> {
    let mut path = [0u8; 64];
    let mut n = 0;
    for b in b"/proc/" {
        path[n] = *b;
        n += 1;
    }
    let mut digits = [0u8; 12];
    let d = decimal(pid as u32, &mut digits);
    path[n..n + d].copy_from_slice(&digits[..d]);
    n += d;
    path[n] = b'/';
    n += 1;
    for b in name {
        path[n] = *b;
        n += 1;
    }
    // `path` is zeroed past `n`: a C string.
    let path = CStr::from_bytes_until_nul(&path)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    write_proc(path, data)
}

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Bring up the network namespace's loopback interface (its only one).
#[allow(unsafe_code)]
pub fn loopback_up() -> std::io::Result<()> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    use std::os::fd::AsRawFd;
    const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
    const SIOCSIFFLAGS: libc::c_ulong = 0x8914;
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let mut ifr = IfReq {
        name: [0; 16],
        flags: 0,
        _pad: [0; 22],
    };
    ifr.name[..2].copy_from_slice(b"lo");
    // SAFETY: both ioctls take a `struct ifreq` (40 bytes, as `IfReq` is) that outlives the
    // call, on a socket owned here.
    check(
        unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGIFFLAGS, &mut ifr as *mut IfReq) }
            as libc::c_long,
    )?;
    ifr.flags |= libc::IFF_UP as libc::c_short;
    // SAFETY: as above.
    check(
        unsafe { libc::ioctl(sock.as_raw_fd(), SIOCSIFFLAGS, &mut ifr as *mut IfReq) }
            as libc::c_long,
    )?;
    Ok(())
}

/// Join a new anonymous session keyring: the caller's session keyring (and, as root,
/// root's user keyring) is out of reach; the filter then refuses the keyring calls. A
/// kernel without keys has nothing to leave.
#[allow(unsafe_code)]
pub fn join_fresh_keyring() -> std::io::Result<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    // SAFETY: a NULL name: the kernel reads no memory of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            0 as libc::c_long,
        )
    };
    match check(r) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Ok(()),
        r => r.map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_writes_every_digit_in_order() {
        for v in [0u32, 7, 10, 4_294_967_295, 123_456] {
            let mut buf = [0u8; 12];
            let n = super::decimal(v, &mut buf);
            assert_eq!(std::str::from_utf8(&buf[..n]).unwrap(), v.to_string());
        }
    }
}
