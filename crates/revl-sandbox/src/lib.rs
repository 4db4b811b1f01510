//! Every raw system call revl makes, and nothing else: the rest of revl is
//! `#![forbid(unsafe_code)]` (docs/security.md, "Where the unsafe code is").
//!
//! Most of it is the exec sandbox's children (docs/architecture.md, "The exec sandbox"):
//! `std::process::Command` forks; in that child (before exec) [`arm`]'s hook makes the
//! namespaces and forks the namespace's first process (PID 1), which sets up the mounts and
//! forks the command (PID 2) as an ordinary process. PID 1 is a minimal init: it reaps
//! orphans, and when the command exits it writes the command's wait status to a page
//! shared with revl ([`Board`]) and exits, whereupon the kernel kills every process left in
//! the namespace. Each of the three dies with its parent (`PR_SET_PDEATHSIG`).
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
/// outlive the command's start (it is read after the command ends).
#[allow(unsafe_code)]
pub fn arm(cmd: &mut Command, plan: Plan, board: &Board) {
    let page = board.ptr.as_ptr() as usize;
    // SAFETY: `enter` makes only system calls on memory prepared before the fork (`plan`,
    // moved into the hook, and the shared page); it never allocates or takes a lock.
    unsafe {
        cmd.pre_exec(move || enter(&plan, &*(page as *const Page)));
    }
}

/// Runs in the child `Command` forked, before exec: the namespaces, PID 1 and its set-up,
/// then the command's own process, which returns to exec. The other two never return.
fn enter(p: &Plan, board: &Page) -> std::io::Result<()> {
    use rustix::process::{set_parent_process_death_signal, Signal};
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
    let init = namespaces::fork()?;
    if init > 0 {
        // Outside the namespace: wait for its PID 1, then exit as it did (0 after it
        // reported the command's status; else what killed it).
        fdpass::close_from(0, false);
        let st = namespaces::reap_until(init);
        namespaces::exit(if libc::WIFEXITED(st) {
            libc::WEXITSTATUS(st)
        } else {
            128 + libc::WTERMSIG(st)
        });
    }
    // PID 1.
    set_parent_process_death_signal(Some(Signal::KILL))?;
    if let Some(outer) = outer {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
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
    let cmd = if p.command_userns {
        namespaces::clone_into_userns()?
    } else {
        namespaces::fork()?
    };
    if cmd > 0 {
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
        let _ = rustix::io::write(&sync_w, b"1");
        drop(sync_w);
        fdpass::close_from(0, false);
        let status = namespaces::reap_until(cmd);
        board.status.store(status, Ordering::SeqCst);
        board.done.store(1, Ordering::SeqCst);
        // PID 1 exits: the kernel kills whatever the command left running.
        namespaces::exit(0);
    }
    // The command's process: exec follows.
    set_parent_process_death_signal(Some(Signal::KILL))?;
    // Wait for PID 1 (EOF: it failed and reported why).
    drop(sync_w);
    let mut b = [0u8; 1];
    if rustix::io::read(&sync_r, &mut b) != Ok(1) {
        namespaces::exit(125);
    }
    drop(sync_r);
    confine(p, &at)?;
    board.stage.store(STAGE_EXEC, Ordering::SeqCst);
    Ok(())
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
