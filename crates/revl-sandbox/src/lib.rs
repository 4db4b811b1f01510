//! Every raw system call revl makes, and nothing else: the rest of revl is
//! `#![forbid(unsafe_code)]` (docs/security.md, "Where the unsafe code is").
//!
//! Most of it is the exec sandbox's children (docs/architecture.md, "The exec sandbox"):
//! `std::process::Command` forks; in that child (before exec) [`arm`]'s hook makes the
//! namespaces and starts the namespace's first process (PID 1), which sets up the mounts and
//! starts the command's process (PID 2), which runs `execve`. PID 1 and PID 2 share the
//! memory of `Command`'s child instead of copying it (`CLONE_VM`, each on a stack of its
//! own: [`namespaces::spawn_vm`]), so an exec copies the caller's page tables once, not
//! three times. PID 1 is a minimal init: it reaps orphans, and when the command exits it
//! writes the command's wait status to a page shared with revl ([`Board`]) and exits,
//! whereupon the kernel kills every process left in the namespace. Each of the three dies
//! with its parent (`PR_SET_PDEATHSIG`).
//!
//! Everything between fork and exec is a system call on data prepared before the fork (a
//! [`Plan`]): no allocation, no lock, as `pre_exec` requires. The calls go through rustix
//! where it has them (capabilities, `prctl`, `setsid`, the new mount API, rlimits, `wait`,
//! `SCM_RIGHTS`), which makes the system call itself and allocates nothing for a `&CStr`
//! path; the rest (`clone` without the C library's fork handlers, `mount_setattr`,
//! Landlock, `close_range`, the loopback ioctl, the shared page) is raw `libc`, each block
//! with its `SAFETY` argument. Split by concern:
//!
//! - [`namespaces`]: `unshare`, the raw `clone`, the id maps, reaping, the loopback;
//! - [`mounts`]: the mount tree the command sees;
//! - [`landlock`]: the second fence on writes;
//! - [`caps`]: `no_new_privs`, the bounding, ambient and process capability sets;
//! - [`seccomp`]: the filter (built before the fork) and its installation;
//! - [`fdpass`]: descriptors: the egress proxy's socket handed over `SCM_RIGHTS`, closing
//!   what the caller left open;
//! - [`limits`]: rlimits, the effective uid;
//! - [`signals`]: the CLI's Ctrl-C handler;
//! - [`fsioctl`]: the btrfs snapshot ioctl (the one file-system call without a wrapper);
//! - [`layers`]: a layered branch workspace's overlay mount and its unmount.
//!
//! Which step of the set-up failed is written to the shared page, so a refusal can say which
//! part of the sandbox this machine does not allow ([`STAGES`]).
#![deny(unsafe_code)]
#![cfg(target_os = "linux")]

pub mod caps;
pub mod fdpass;
pub mod fsioctl;
pub mod landlock;
pub mod layers;
pub mod limits;
pub mod mounts;
pub mod namespaces;
pub mod seccomp;
pub mod signals;

use std::ffi::CString;
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

/// The steps of the set-up, in order; the shared page holds the one under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Stage {
    /// prepare the sandbox
    Prepare = 0,
    /// set the parent-death signal
    DeathSignal = 1,
    /// create the namespaces
    Namespaces = 2,
    /// map the user and group ids into the user namespace
    IdMaps = 3,
    /// start the namespace's first process
    Pid1 = 4,
    /// make the mount tree private
    PrivateTree = 5,
    /// mount the overlay over the workspace
    Overlay = 6,
    /// clone the overlay mount
    CloneOverlay = 7,
    /// clone the device nodes
    CloneDevices = 8,
    /// make the host read-only
    HostReadOnly = 9,
    /// mount a private /tmp
    PrivateTmp = 10,
    /// mount a private /run
    PrivateRun = 11,
    /// mount the minimal /dev
    Dev = 12,
    /// bind the device nodes into /dev
    DevNodes = 13,
    /// mount a private /dev/shm
    DevShm = 14,
    /// place the workspace at its own path
    PlaceWorkspace = 15,
    /// mount /proc
    Proc = 16,
    /// bring up the loopback interface
    Loopback = 17,
    /// enter the working directory
    Cwd = 18,
    /// drop capabilities
    DropCaps = 19,
    /// make /proc's host-wide files read-only
    ProcReadOnly = 20,
    /// start the command in its own user namespace
    CommandUserns = 21,
    /// start a new session without a controlling terminal
    Setsid = 22,
    /// clear the command's capabilities
    ClearCaps = 23,
    /// join a fresh session keyring
    Keyring = 24,
    /// install the seccomp filter
    Seccomp = 25,
    /// hide the store and the manifest's hidden paths
    Hide = 26,
    /// set the resource limits
    Rlimits = 27,
    /// join the pids cgroup
    Cgroup = 28,
    /// restrict writes with Landlock
    Landlock = 29,
    /// hand the egress proxy's listening socket to revl
    ProxySocket = 30,
}

/// What each [`Stage`] does, in words (what `sandbox-unavailable` names).
pub const STAGES: &[&str] = &[
    "prepare the sandbox",
    "set the parent-death signal",
    "create the namespaces",
    "map the user and group ids into the user namespace",
    "start the namespace's first process",
    "make the mount tree private",
    "mount the overlay over the workspace",
    "clone the overlay mount",
    "clone the device nodes",
    "make the host read-only",
    "mount a private /tmp",
    "mount a private /run",
    "mount the minimal /dev",
    "bind the device nodes into /dev",
    "mount a private /dev/shm",
    "place the workspace at its own path",
    "mount /proc",
    "bring up the loopback interface",
    "enter the working directory",
    "drop capabilities",
    "make /proc's host-wide files read-only",
    "start the command in its own user namespace",
    "start a new session without a controlling terminal",
    "clear the command's capabilities",
    "join a fresh session keyring",
    "install the seccomp filter",
    "hide the store and the manifest's hidden paths",
    "set the resource limits",
    "join the pids cgroup",
    "restrict writes with Landlock",
    "hand the egress proxy's listening socket to revl",
];

impl Stage {
    const ALL: [Stage; STAGES.len()] = [
        Stage::Prepare,
        Stage::DeathSignal,
        Stage::Namespaces,
        Stage::IdMaps,
        Stage::Pid1,
        Stage::PrivateTree,
        Stage::Overlay,
        Stage::CloneOverlay,
        Stage::CloneDevices,
        Stage::HostReadOnly,
        Stage::PrivateTmp,
        Stage::PrivateRun,
        Stage::Dev,
        Stage::DevNodes,
        Stage::DevShm,
        Stage::PlaceWorkspace,
        Stage::Proc,
        Stage::Loopback,
        Stage::Cwd,
        Stage::DropCaps,
        Stage::ProcReadOnly,
        Stage::CommandUserns,
        Stage::Setsid,
        Stage::ClearCaps,
        Stage::Keyring,
        Stage::Seccomp,
        Stage::Hide,
        Stage::Rlimits,
        Stage::Cgroup,
        Stage::Landlock,
        Stage::ProxySocket,
    ];

    /// The stage the shared page names (`None`: past the set-up, or not a stage).
    pub fn from_index(i: i32) -> Option<Stage> {
        usize::try_from(i)
            .ok()
            .and_then(|i| Stage::ALL.get(i).copied())
    }

    /// What it does, in words.
    pub fn text(self) -> &'static str {
        STAGES[self as usize]
    }

    /// Whether it needs user namespaces (the caller's, or the command's own as root).
    pub fn needs_user_namespaces(self) -> bool {
        matches!(
            self,
            Stage::Namespaces | Stage::IdMaps | Stage::CommandUserns
        )
    }
}

/// The stage reached once everything is set up: a failure from here on is the exec's own.
pub const STAGE_EXEC: i32 = STAGES.len() as i32;

/// Everything the children need, made before the fork.
#[derive(Debug)]
pub struct Plan {
    /// revl's pid (the parent of the first child).
    pub parent: i32,
    /// The namespaces to make (`CLONE_NEW*` flags for `unshare`).
    pub unshare: libc::c_int,
    /// `uid_map`, `gid_map` contents when a user namespace is made.
    pub maps: Option<(CString, CString)>,
    /// As root: the command's own user namespace (identity-mapped, made by PID 1, which
    /// writes its maps): uid 0 there holds no capability over the host or the sandbox's
    /// mounts, network and /proc.
    pub command_userns: bool,
    /// The seccomp filters ([`seccomp::programs`]; empty where seccompiler does not know
    /// the architecture).
    pub seccomp: Vec<seccompiler::BpfProgram>,
    pub mounts: mounts::Tree,
    /// The working directory.
    pub cwd: CString,
    /// `(resource, limit)` pairs for setrlimit ([`limits::Resource`]).
    pub rlimits: [(limits::Resource, Option<u64>); 5],
    /// `tasks` (v1) or `cgroup.procs` (v2) of the command's pids cgroup, open for writing
    /// (`None`: none). It must stay open until the command runs.
    pub cgroup_procs: Option<std::os::fd::RawFd>,
    /// Where writes stay allowed under Landlock (empty rules with ABI 0: none).
    pub landlock: landlock::Rules,
    /// The sandbox's end of the socket pair that carries the egress proxy's listening
    /// socket to revl (`None`: no network). It must stay open until the command runs.
    pub net_sock: Option<std::os::fd::RawFd>,
    /// The port the egress proxy listens on inside the sandbox (127.0.0.1).
    pub proxy_port: u16,
    /// The write end of a pipe revl reads after the command (`None`: none): the one
    /// descriptor above 2 the command keeps, at the same number (a wrapper's note to its
    /// caller, e.g. the directory it ended in; `REVL_NOTE_FD` names it).
    pub note_fd: Option<std::os::fd::RawFd>,
}

/// What the children tell revl through the shared page.
#[repr(C)]
struct Page {
    /// The set-up stage under way (an index of [`STAGES`]).
    stage: AtomicI32,
    /// 1 once `status` holds the command's wait status.
    done: AtomicI32,
    status: AtomicI32,
    /// While the masks are made: the index of the hidden path under way (else 0).
    hiding: AtomicI32,
}

/// A page shared with the children (it survives their fork): where the set-up stands, and
/// the command's wait status.
pub struct Board {
    ptr: std::ptr::NonNull<Page>,
}

// SAFETY: the page holds atomics only; it is unmapped only when the Board is dropped.
#[allow(unsafe_code)]
unsafe impl Send for Board {}
// SAFETY: as above: every access is an atomic operation.
#[allow(unsafe_code)]
unsafe impl Sync for Board {}

impl Board {
    /// Map a fresh (zeroed) page.
    #[allow(unsafe_code)]
    pub fn new() -> std::io::Result<Board> {
        // SAFETY: an anonymous shared mapping of one page, owned by the Board.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                4096,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
            )
        }?;
        let ptr = std::ptr::NonNull::new(p.cast::<Page>())
            .ok_or_else(|| std::io::Error::other("mmap returned no page"))?;
        Ok(Board { ptr })
    }

    #[allow(unsafe_code)]
    fn page(&self) -> &Page {
        // SAFETY: the page lives as long as `self` and was zeroed at mapping; atomics are
        // valid for any bits.
        unsafe { self.ptr.as_ref() }
    }

    /// The set-up stage under way (`None` once everything was set up: a failure from then
    /// on is the exec's own).
    pub fn stage(&self) -> Option<Stage> {
        Stage::from_index(self.page().stage.load(Ordering::SeqCst))
    }

    /// The command's wait status, once PID 1 reported it.
    pub fn status(&self) -> Option<i32> {
        (self.page().done.load(Ordering::SeqCst) != 0)
            .then(|| self.page().status.load(Ordering::SeqCst))
    }

    /// While (or when) the masks failed: the index of the hidden path under way.
    pub fn hiding(&self) -> i32 {
        self.page().hiding.load(Ordering::SeqCst)
    }
}

impl Drop for Board {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `new`; no reference to it outlives `self`
        // (the children hold their own copies of the mapping).
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), 4096);
        }
    }
}

/// Make `cmd` start in the sandbox `plan` describes, reporting to `board`. The board must
/// outlive the command's start (it is read after the command ends). The command's program,
/// arguments and environment are taken from `cmd` now (the sandbox's last process runs
/// `execve` itself; see [`Exec`]); an error: one of them holds a NUL byte.
#[allow(unsafe_code)]
pub fn arm(cmd: &mut Command, plan: Plan, board: &Board) -> std::io::Result<()> {
    let exec = Exec::of(cmd)?;
    let page = board.ptr.as_ptr() as usize;
    // SAFETY: `enter` makes only system calls on memory prepared before the fork (`plan`
    // and `exec`, moved into the hook, and the shared page); it never allocates or takes a
    // lock.
    unsafe {
        cmd.pre_exec(move || enter(&plan, &exec, &*(page as *const Page)));
    }
    Ok(())
}

/// The command's `execve`, prepared before the fork: the paths to try (the program itself
/// when it names a path, else each directory of the command's `PATH` in turn, as the C
/// library's `execvp` searches), and its argument and environment vectors (the caller's
/// environment with `cmd`'s changes, as `std::process::Command` would pass it).
///
/// A file found but not executable as a program (`ENOEXEC`: a script without `#!`) is an
/// error here, where `execvp` would run it with `/bin/sh`: revl runs a command never
/// through a shell.
pub struct Exec {
    paths: Vec<CString>,
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into `_strings`' heap buffers, owned by the same value and
// never changed; they are only read (by `execve`).
#[allow(unsafe_code)]
unsafe impl Send for Exec {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Sync for Exec {}

impl Exec {
    fn of(cmd: &Command) -> std::io::Result<Exec> {
        use std::os::unix::ffi::OsStrExt;
        let c = |s: &std::ffi::OsStr| {
            CString::new(s.as_bytes()).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a NUL byte in the command's program, arguments or environment",
                )
            })
        };
        let mut env: std::collections::BTreeMap<std::ffi::OsString, std::ffi::OsString> =
            std::env::vars_os().collect();
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => env.insert(k.to_owned(), v.to_owned()),
                None => env.remove(k),
            };
        }
        let prog = cmd.get_program();
        let paths = if prog.as_bytes().contains(&b'/') {
            vec![c(prog)?]
        } else {
            // The C library's default where PATH is unset (`confstr(_CS_PATH)`).
            let search = env
                .get(std::ffi::OsStr::new("PATH"))
                .map_or(&b"/bin:/usr/bin"[..], |p| p.as_bytes());
            let mut paths = Vec::new();
            for dir in search.split(|b| *b == b':') {
                // An empty entry is the working directory.
                let mut full = dir.to_vec();
                if !full.is_empty() {
                    full.push(b'/');
                }
                full.extend_from_slice(prog.as_bytes());
                paths.push(c(std::ffi::OsStr::from_bytes(&full))?);
            }
            paths
        };
        let mut strings = Vec::new();
        strings.push(c(prog)?);
        for a in cmd.get_args() {
            strings.push(c(a)?);
        }
        let argc = strings.len();
        for (k, v) in &env {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            strings.push(c(std::ffi::OsStr::from_bytes(&kv))?);
        }
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        let argv = ptrs(&strings[..argc]);
        let envp = ptrs(&strings[argc..]);
        Ok(Exec {
            paths,
            _strings: strings,
            argv,
            envp,
        })
    }

    /// Try each path; returns only if none could be run, with the error `execvp` would
    /// give: the first that is neither "not there" nor "not allowed" (which stops the
    /// search), else `EACCES` if some file was there but not allowed, else `ENOENT`.
    #[allow(unsafe_code)]
    fn run(&self) -> std::io::Error {
        let mut denied = false;
        for path in &self.paths {
            // SAFETY: NUL-terminated vectors of pointers into C strings this value owns.
            unsafe { libc::execve(path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr()) };
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EACCES) => denied = true,
                Some(
                    libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT,
                ) => {}
                _ => return e,
            }
        }
        std::io::Error::from_raw_os_error(if denied { libc::EACCES } else { libc::ENOENT })
    }
}

/// What PID 1 and the command's process are handed: pointers into the frame of the process
/// that starts them (it stays in that frame while they may read them).
struct Hand<'a> {
    plan: &'a Plan,
    exec: &'a Exec,
    board: &'a Page,
    /// The write end of the pipe a failure is told through (see [`enter`]).
    told: std::os::fd::RawFd,
    /// PID 1: a process descriptor of `Command`'s child (`-1`: none).
    outer: std::os::fd::RawFd,
    /// The command: the pipe PID 1's go-ahead comes through.
    sync: (std::os::fd::RawFd, std::os::fd::RawFd),
}

/// Tell `enter` why this process of the sandbox failed (the error number; a pipe write of
/// four bytes is atomic), then exit.
fn fail(told: std::os::fd::RawFd, e: &std::io::Error, code: i32) -> ! {
    let errno = e.raw_os_error().unwrap_or(libc::EINVAL);
    #[allow(unsafe_code)]
    // SAFETY: `told` is open in this process until it exits or execs.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(told) };
    let _ = rustix::io::write(fd, &errno.to_ne_bytes());
    namespaces::exit(code)
}

/// Runs in the child `Command` forked, before exec: the namespaces, then PID 1, which sets
/// up the mounts and starts the command's own process, which runs `execve`. PID 1 and the
/// command's process share this process's memory (`CLONE_VM`, [`namespaces::spawn_vm`]):
/// revl is copied once per exec, not three times.
///
/// None of the three returns into `Command`'s code but this one, and only with an error:
/// PID 1 and the command's process tell it theirs through a pipe (its error number), and it
/// returns that, so `Command::spawn` fails as it would had the error been its own. The pipe
/// is closed on exec: end of file means the command runs.
fn enter(p: &Plan, exec: &Exec, board: &Page) -> std::io::Result<()> {
    use rustix::process::{set_parent_process_death_signal, Signal};
    use std::os::fd::AsRawFd;
    let at = |s: Stage| board.stage.store(s as i32, Ordering::SeqCst);
    at(Stage::DeathSignal);
    set_parent_process_death_signal(Some(Signal::KILL))?;
    // revl may have died before the death signal was armed: then nothing may run.
    if rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()) != p.parent {
        namespaces::exit(125);
    }
    if let Some(procs) = p.cgroup_procs {
        // Into the pids cgroup before anything is forked. "0" (this very thread, which is
        // the whole process) is the one move the kernel makes without waiting for an RCU
        // grace period (~10 ms).
        at(Stage::Cgroup);
        fdpass::write_and_close(procs, b"0")?;
    }
    at(Stage::Namespaces);
    namespaces::unshare(p.unshare)?;
    if let Some((uid_map, gid_map)) = &p.maps {
        at(Stage::IdMaps);
        namespaces::write_own_maps(uid_map, gid_map)?;
    }
    at(Stage::Pid1);
    // PID 1 dies with this process, but revl killed just after the fork could take this
    // process with it before PID 1 arms its death signal: PID 1 would run on. It keeps a
    // process descriptor of this process and, once armed, leaves if this one has exited.
    let outer = rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    )
    .ok();
    let (told_r, told_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let stack = namespaces::Stack::new()?;
    let hand = Hand {
        plan: p,
        exec,
        board,
        told: told_w.as_raw_fd(),
        outer: outer.as_ref().map_or(-1, |o| o.as_raw_fd()),
        sync: (-1, -1),
    };
    // SAFETY: PID 1 keeps to `spawn_vm`'s rules (`pid1_run`: its stack, the plan, the
    // page, system calls, then `_exit`); `hand` stays in this frame until PID 1 has told a
    // failure (and exits) or the command runs (PID 1 is past its last read of it).
    #[allow(unsafe_code)]
    let init = unsafe { namespaces::spawn_vm(0, &stack, pid1, std::ptr::from_ref(&hand).cast()) }?;
    drop(told_w);
    // Until the command runs (end of file: every write end closed, the last by its exec)
    // or a process of the sandbox fails (its error number). This process only reads here:
    // it makes no call that sets `errno`, which the other two share with it.
    let mut got = [0u8; 4];
    let mut n = 0;
    while n < got.len() {
        match rustix::io::read(&told_r, &mut got[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if n > 0 {
        // PID 1 dies with this process (its death signal), and the kernel empties the
        // namespace with it.
        return Err(match n {
            4 => std::io::Error::from_raw_os_error(i32::from_ne_bytes(got)),
            _ => std::io::Error::from_raw_os_error(libc::EIO),
        });
    }
    // Outside the namespace: wait for its PID 1, then exit as it did (0 after it reported
    // the command's status; else what killed it).
    fdpass::close_from(0, false);
    let st = namespaces::reap_until(init);
    namespaces::exit(if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        128 + libc::WTERMSIG(st)
    });
}

/// The start of a process made by [`namespaces::spawn_vm`]: `run` on the [`Hand`] at `arg`,
/// which returns only with an error, told (then `_exit(code)`).
fn started(
    arg: *mut libc::c_void,
    run: fn(&Hand) -> std::io::Result<std::convert::Infallible>,
    code: i32,
) -> ! {
    // SAFETY: `arg` is the `Hand` in the frame of the process that started this one, which
    // stays in that frame while this one may read it (`enter` until the command runs or a
    // failure is told; PID 1 until the command exits) and never changes it.
    #[allow(unsafe_code)]
    let h = unsafe { &*arg.cast::<Hand>() };
    let e = match run(h) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    fail(h.told, &e, code)
}

/// PID 1 of the sandbox's namespaces, on a stack of its own in the memory of `Command`'s
/// child ([`enter`]): it sets up the mounts and starts the command, then only waits.
extern "C" fn pid1(arg: *mut libc::c_void) -> libc::c_int {
    started(arg, pid1_run, 125)
}

fn pid1_run(h: &Hand) -> std::io::Result<std::convert::Infallible> {
    use rustix::process::{set_parent_process_death_signal, Signal};
    use std::os::fd::AsRawFd;
    let (p, board) = (h.plan, h.board);
    let at = |s: Stage| board.stage.store(s as i32, Ordering::SeqCst);
    set_parent_process_death_signal(Some(Signal::KILL))?;
    if h.outer >= 0 {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        #[allow(unsafe_code)]
        // SAFETY: the descriptor `enter` opened, in this process's copy of its table.
        let outer = unsafe { std::os::fd::BorrowedFd::borrow_raw(h.outer) };
        let mut fds = [PollFd::new(&outer, PollFlags::IN)];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if poll(&mut fds, Some(&now)).is_ok_and(|n| n > 0) {
            namespaces::exit(125);
        }
    }
    mounts::build(&p.mounts, &at, &board.hiding)?;
    at(Stage::Loopback);
    namespaces::loopback_up()?;
    if let Some(sock) = p.net_sock {
        at(Stage::ProxySocket);
        fdpass::send_listener(sock, p.proxy_port)?;
    }
    at(Stage::Cwd);
    rustix::process::chdir(p.cwd.as_c_str())?;
    at(Stage::DropCaps);
    caps::drop_bounding()?;
    at(Stage::CommandUserns);
    // The command waits for PID 1's go-ahead: PID 1 writes the command's id maps (as
    // root) and confines itself first, so the command never runs beside an unconfined PID 1.
    let (sync_r, sync_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let stack = namespaces::Stack::new()?;
    let hand = Hand {
        sync: (sync_r.as_raw_fd(), sync_w.as_raw_fd()),
        ..*h
    };
    let flags = if p.command_userns {
        libc::CLONE_NEWUSER
    } else {
        0
    };
    // SAFETY: the command's process keeps to `spawn_vm`'s rules (`command_run`: its stack,
    // the plan, the page, system calls, then `execve` or `_exit`); `hand` stays in this
    // frame while PID 1 waits for it (PID 1 leaves this frame early only after killing it,
    // and a killed process completes no further system call).
    #[allow(unsafe_code)]
    let cmd =
        unsafe { namespaces::spawn_vm(flags, &stack, command, std::ptr::from_ref(&hand).cast()) }?;
    drop(sync_r);
    if p.command_userns {
        // The whole id range, as is: files keep their owners; the capabilities of
        // uid 0 there reach only that (empty) namespace.
        if let Err(e) = namespaces::write_identity_maps(cmd) {
            namespaces::kill(cmd);
            return Err(e);
        }
    }
    // PID 1 only waits from here on: a session of its own (out of revl's process
    // group: the command cannot signal the caller's shell through it), not dumpable (no
    // `/proc/1/mem` to write into), no capability, and the command's seccomp filter
    // (docs/security.md); then nothing open.
    let confined = (|| -> std::io::Result<()> {
        rustix::process::setsid()?;
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
        caps::drop_bounding()?;
        caps::clear()?;
        seccomp::install(&p.seccomp)
    })();
    if let Err(e) = confined {
        namespaces::kill(cmd);
        return Err(e);
    }
    // From here on PID 1 makes no call that sets `errno` (`close_range` succeeds on every
    // kernel the sandbox runs on; the rest is rustix's own system calls): the command,
    // now running beside it in the same memory, reads its own.
    let _ = rustix::io::write(&sync_w, b"1");
    drop(sync_w);
    fdpass::close_from(0, false);
    let status = namespaces::reap_until(cmd);
    board.status.store(status, Ordering::SeqCst);
    board.done.store(1, Ordering::SeqCst);
    // PID 1 exits: the kernel kills whatever the command left running.
    namespaces::exit(0);
}

/// The command's own process, on a stack of its own: it waits for PID 1's go-ahead,
/// confines itself and runs `execve`.
extern "C" fn command(arg: *mut libc::c_void) -> libc::c_int {
    started(arg, command_run, 127)
}

#[allow(unsafe_code)]
fn command_run(h: &Hand) -> std::io::Result<std::convert::Infallible> {
    use rustix::process::{set_parent_process_death_signal, Signal};
    let (p, board) = (h.plan, h.board);
    let at = |s: Stage| board.stage.store(s as i32, Ordering::SeqCst);
    set_parent_process_death_signal(Some(Signal::KILL))?;
    // This process's copies of the go-ahead pipe (its table is a copy of PID 1's): the
    // write end closes now, so PID 1's failure reads as an end.
    // SAFETY: both are open in this process's table and not used again once closed.
    let (sync_r, sync_w) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(h.sync.0),
            std::os::fd::OwnedFd::from_raw_fd(h.sync.1),
        )
    };
    drop(sync_w);
    let mut b = [0u8; 1];
    if rustix::io::read(&sync_r, &mut b) != Ok(1) {
        namespaces::exit(125);
    }
    drop(sync_r);
    confine(p, &at)?;
    board.stage.store(STAGE_EXEC, Ordering::SeqCst);
    Err(h.exec.run())
}

/// The command's own process, last before exec: a new session without a controlling
/// terminal (no TIOCSTI into the caller's terminal, no `kill(0, …)` reaching revl's
/// process group), nothing the caller holds, a fresh keyring, the limits, every capability
/// set cleared, Landlock, and the seccomp filter.
fn confine(p: &Plan, at: &dyn Fn(Stage)) -> std::io::Result<()> {
    at(Stage::Setsid);
    rustix::process::setsid()?;
    // Nothing the caller holds reaches the command: every descriptor above 2 (one revl's
    // caller left open without close-on-exec: a host file, a directory, a terminal) closes
    // at exec. Standard input is /dev/null unless revl feeds it; output goes to revl's pipes.
    fdpass::close_from(3, true);
    if let Some(fd) = p.note_fd {
        fdpass::keep_open(fd)?;
    }
    at(Stage::Keyring);
    namespaces::join_fresh_keyring()?;
    at(Stage::Rlimits);
    limits::apply(&p.rlimits)?;
    at(Stage::ClearCaps);
    caps::drop_bounding()?;
    caps::clear()?;
    if p.landlock.abi > 0 {
        at(Stage::Landlock);
        landlock::restrict(&p.landlock)?;
    }
    at(Stage::Seccomp);
    seccomp::install(&p.seccomp)?;
    Ok(())
}
