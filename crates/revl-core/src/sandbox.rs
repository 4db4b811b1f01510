//! The exec sandbox (docs/architecture.md, "The exec sandbox"): a command runs in fresh
//! mount, network, IPC, PID and UTS namespaces (plus a user namespace when revl is not
//! root), sees the host read-only and the workspace through an overlay whose upper layer is
//! revl's scratch directory, and is killed with everything it started when its main process
//! ends or times out. The real workspace does not change while it runs: revl reads the
//! change set from the upper layer afterwards.
//!
//! How it is built. `std::process::Command` forks; in that child (before exec) revl makes
//! the namespaces and forks the namespace's first process (PID 1), which sets up the mounts
//! and forks the command (PID 2) as an ordinary process (signals to itself work). PID 1 is a
//! minimal init: it reaps orphans, and when the command exits it writes the command's wait
//! status to a page shared with revl and exits, whereupon the kernel kills every process
//! left in the namespace. Each of the three dies with its parent (`PR_SET_PDEATHSIG`), so a
//! timeout (revl kills the first) or revl's own death takes the whole tree. The mounts: the
//! tree is made private; the overlay is mounted and cloned (detached) while the host is
//! still visible, with five device nodes (cloned read-only); every mount is made read-only
//! at once (`mount_setattr(AT_RECURSIVE)`); private tmpfs on `/tmp`, `/dev/shm` and `/run`;
//! a tmpfs `/dev` with the nodes (no `tty`); the overlay moved to the workspace's own path;
//! a fresh `/proc` whose `sys`, `sysrq-trigger`, `irq` and `bus` are read-only; the store,
//! `file://` remotes and `[exec] hide` masked, last (a file's mask is a clone of an empty
//! file opened before the private `/tmp` may cover it); the loopback interface up. As root
//! the command is cloned into a user namespace of its own (identity maps written by PID 1),
//! so its uid 0 holds no host capability. Last, in the command's process: `setsid`, a fresh
//! session keyring, the rlimits, every capability set cleared with `no_new_privs`, Landlock,
//! and the seccomp filter (docs/security.md).
//!
//! Everything the child does between fork and exec is a raw system call (through `libc`) on
//! data prepared before the fork: no allocation, no lock, as `pre_exec` requires. Which step
//! failed is written to a shared page, so a refusal can say which part of the sandbox this
//! machine does not allow (`sandbox-unavailable`).

use crate::proc::{run_command_watched, OutputSink, Ran};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// What to run, and where.
#[derive(Debug, Clone)]
pub struct Spec<'a> {
    pub argv: &'a [String],
    /// The workspace, canonical: the overlay's lower layer, and the path the command sees it at.
    pub workspace: &'a Path,
    /// The working directory: the workspace or a directory inside it (absolute).
    pub cwd: &'a Path,
    /// Extra environment (the caller's is inherited).
    pub env: &'a [(String, String)],
    pub timeout: Option<Duration>,
    /// An empty directory of revl's on a filesystem that can hold an overlay upper layer,
    /// outside the workspace: `upper/`, `work/` and `merged/` are made in it.
    pub scratch: &'a Path,
    /// Paths the command must not read (the store, a `file://` remote, the manifest's
    /// `[exec] hide`): each is masked inside the sandbox by an empty read-only tmpfs (a
    /// directory) or an empty read-only file (a file), wherever revl's store lives. A path
    /// that does not exist, or that lies where the sandbox has its own filesystem (`/tmp`,
    /// `/dev`, `/dev/shm`, `/run`, outside the workspace), is out of the command's sight
    /// already; any other that cannot be masked (it holds the workspace, it cannot be
    /// resolved, its mask fails) is [`Failure::CannotHide`] and nothing runs.
    pub hide: &'a [PathBuf],
    pub limits: Limits,
    /// Declared egress (docs/user-guide.md §8): where to put the listening socket the
    /// sandbox makes at [`crate::egress::PROXY_ADDR`] inside its network namespace (handed
    /// to revl over a socket pair before the command starts, and there when `started`
    /// runs). `None`: no network at all.
    pub net_listener: Option<&'a std::sync::Mutex<Option<std::os::fd::OwnedFd>>>,
}

/// Resource limits (docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `RLIMIT_AS` of each process.
    pub memory: Option<u64>,
    /// Processes at once: a `pids` cgroup where revl may make one, else `RLIMIT_NPROC`
    /// (which the kernel does not apply to uid 0).
    pub pids: u64,
    /// `RLIMIT_CPU` of each process.
    pub cpu_seconds: Option<u64>,
    /// What the upper layer may hold (the bytes of its files); each file is also capped by
    /// `RLIMIT_FSIZE` just past it.
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory: None,
            pids: 4096,
            cpu_seconds: None,
            max_bytes: 16 << 30,
        }
    }
}

/// A command that ran: its outcome, and the upper layer holding what it wrote.
#[derive(Debug)]
pub struct Outcome {
    pub ran: Ran,
    pub upper: PathBuf,
    /// The prefix of the overlay's own extended attributes in `upper` (`trusted.` as root,
    /// `user.` in a user namespace).
    pub xattr_prefix: &'static str,
    /// The limit that stopped the command, where revl can tell: `timeout`, `cpu`
    /// (`SIGXCPU`), `bytes` (a file past `--max-bytes`: `SIGXFSZ`), `pids` (the pids
    /// cgroup refused a fork). A memory limit shows only as the program's own failure.
    pub limit: Option<&'static str>,
    /// How `--pids` was enforced: `cgroup`, `rlimit` (`RLIMIT_NPROC`, counted in the
    /// sandbox's user namespace), or `none` (root without a pids cgroup: the kernel does not
    /// apply `RLIMIT_NPROC` to uid 0).
    pub pids_limit: &'static str,
}

/// Why nothing ran.
#[derive(Debug)]
pub enum Failure {
    /// The sandbox could not be set up: which part failed, and the system's reason.
    Unavailable(String),
    /// The sandbox was ready but the program could not be started (not found, not
    /// executable).
    NotStarted(std::io::Error),
    /// It was running when the caller's `started` failed (it was killed), or waiting for it
    /// failed.
    Started(std::io::Error),
    /// It went past `--max-bytes` and was stopped: which limit, and by how much.
    LimitExceeded(String),
    /// `Spec::hide[index]` cannot be hidden from the command (why): nothing ran.
    CannotHide { index: usize, why: String },
}

/// The steps of the set-up, in order; the shared page holds the index of the one under way.
const STAGES: &[&str] = &[
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
const STAGE_EXEC: i32 = STAGES.len() as i32;
/// The index of "hide the store and the manifest's hidden paths" in [`STAGES`].
const STAGE_HIDE: i32 = 26;
const _: () = assert!(matches!(
    STAGES[STAGE_HIDE as usize].as_bytes(),
    [b'h', b'i', b'd', b'e', ..]
));

/// The open-file limit of every process of a command (`RLIMIT_NOFILE`): a command cannot
/// hold more of the host's file handles than this at once.
pub const OPEN_FILES: u64 = 4096;

/// What each of the sandbox's private tmpfs (`/tmp`, `/dev/shm`, `/run`) may hold: a third
/// of `--memory` when it is given (their pages are memory the command pins), else 512 MiB;
/// never less than 4 MiB. Inodes: at most 65,536 each.
pub fn tmpfs_size(memory: Option<u64>) -> u64 {
    memory.map_or(512 << 20, |m| m / 3).max(4 << 20)
}

/// [`OPEN_FILES`], or the caller's own hard limit where that is lower (a limit can only be
/// lowered without privilege).
fn open_files() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if got == 0 {
        OPEN_FILES.min(lim.rlim_max)
    } else {
        OPEN_FILES
    }
}

fn tmpfs_opts(mode: &str, memory: Option<u64>) -> std::io::Result<CString> {
    CString::new(format!(
        "mode={mode},size={}k,nr_inodes=65536",
        tmpfs_size(memory) >> 10
    ))
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "tmpfs options"))
}

/// The device nodes the sandbox's `/dev` holds (bound read-only; no `tty`: the command has
/// no controlling terminal, docs/security.md).
const DEV_NODES: [&str; 5] = ["null", "zero", "full", "random", "urandom"];

/// The host-wide parts of `/proc` that a fresh `/proc` would leave writable (as bubblewrap
/// does, they are bound read-only over themselves): a sysctl needs no capability for uid 0.
const PROC_RO: [&std::ffi::CStr; 4] = [
    c"/proc/sys",
    c"/proc/sysrq-trigger",
    c"/proc/irq",
    c"/proc/bus",
];

/// Parts of `/proc` that name what the caller holds (every key it may view, and their
/// users, by name and description): masked by the sandbox's read-only `/dev/null`.
const PROC_MASKED: [&std::ffi::CStr; 2] = [c"/proc/keys", c"/proc/key-users"];

/// What the children tell revl through the shared page.
#[repr(C)]
struct Board {
    /// The set-up stage under way (an index of [`STAGES`]).
    stage: AtomicI32,
    /// 1 once `status` holds the command's wait status.
    done: AtomicI32,
    status: AtomicI32,
    /// While the masks are made: the index in `Spec::hide` of the one under way (else 0).
    hiding: AtomicI32,
}

/// A page shared with the children (it survives their fork).
struct Shared {
    ptr: *mut Board,
}

impl Shared {
    fn new() -> std::io::Result<Shared> {
        // SAFETY: an anonymous shared mapping of one page; checked for failure below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Shared {
            ptr: p.cast::<Board>(),
        })
    }

    fn board(&self) -> &Board {
        // SAFETY: the page lives as long as `self` and is zeroed at mapping; atomics are
        // valid for any bits.
        unsafe { &*self.ptr }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `new`; no reference to it outlives `self`.
        unsafe {
            libc::munmap(self.ptr.cast(), 4096);
        }
    }
}

/// Everything the children need, made before the fork.
struct Prepared {
    /// Address of the shared [`Board`] (a usize so the closure is Send).
    board: usize,
    /// revl's pid (the parent of the first child).
    parent: libc::pid_t,
    unshare: libc::c_int,
    /// `uid_map`, `gid_map` contents when a user namespace is made.
    maps: Option<(CString, CString)>,
    /// As root: the command's own user namespace (identity-mapped, made by PID 1, which
    /// writes its maps): uid 0 there holds no capability over the host or the sandbox's
    /// mounts, network and /proc.
    command_userns: bool,
    /// The seccomp filters (built before the fork; empty where seccompiler does not know
    /// the architecture).
    seccomp: Vec<seccompiler::BpfProgram>,
    merged: CString,
    overlay_opts: CString,
    dev_host: Vec<CString>,
    dev_target: Vec<CString>,
    run_exists: bool,
    /// The workspace and each of its ancestors, shortest first (made where missing, in the
    /// private /tmp for instance).
    ws_chain: Vec<CString>,
    workspace: CString,
    cwd: CString,
    /// Masked paths: (path, is a directory, index in `Spec::hide`), files first.
    hide: Vec<(CString, bool, i32)>,
    /// An empty read-only file of revl's, cloned (opened before the private `/tmp` may
    /// cover it) and bound over each hidden file.
    empty: CString,
    /// `(resource, limit)` pairs for setrlimit.
    rlimits: [(libc::__rlimit_resource_t, u64); 5],
    /// The mount options of the private `/tmp` and `/dev/shm` (mode 1777) and `/run` (mode
    /// 755): each bounded (see [`tmpfs_size`]).
    tmpfs_sticky: CString,
    tmpfs_run: CString,
    /// `tasks` (v1) or `cgroup.procs` (v2) of the command's pids cgroup, open for writing
    /// (-1: none).
    cgroup_procs: libc::c_int,
    /// The kernel's Landlock ABI (0: none), and where writes stay allowed under it.
    landlock_abi: i32,
    landlock_rules: Vec<(CString, u64)>,
    /// The sandbox's end of the socket pair that carries the egress proxy's listening socket
    /// to revl (-1: no network).
    net_sock: libc::c_int,
}

// Landlock (a second fence on writes, docs/security.md): the filesystem rights revl handles.
const LL_WRITE_FILE: u64 = 1 << 1;
const LL_REMOVE_DIR: u64 = 1 << 4;
const LL_REMOVE_FILE: u64 = 1 << 5;
const LL_MAKE_CHAR: u64 = 1 << 6;
const LL_MAKE_DIR: u64 = 1 << 7;
const LL_MAKE_REG: u64 = 1 << 8;
const LL_MAKE_SOCK: u64 = 1 << 9;
const LL_MAKE_FIFO: u64 = 1 << 10;
const LL_MAKE_BLOCK: u64 = 1 << 11;
const LL_MAKE_SYM: u64 = 1 << 12;
const LL_REFER: u64 = 1 << 13;
const LL_TRUNCATE: u64 = 1 << 14;

/// The write rights Landlock ABI `abi` knows.
fn landlock_writes(abi: i32) -> u64 {
    let mut r = LL_WRITE_FILE
        | LL_REMOVE_DIR
        | LL_REMOVE_FILE
        | LL_MAKE_CHAR
        | LL_MAKE_DIR
        | LL_MAKE_REG
        | LL_MAKE_SOCK
        | LL_MAKE_FIFO
        | LL_MAKE_BLOCK
        | LL_MAKE_SYM;
    if abi >= 2 {
        r |= LL_REFER;
    }
    if abi >= 3 {
        r |= LL_TRUNCATE;
    }
    r
}

/// The Landlock ABI version of this kernel (0: none, or disabled).
pub fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the version query reads no memory (NULL attribute, size 0).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    v.max(0) as i32
}

fn cstr(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path holds NUL"))
}

/// Escape a path for the overlay's option string (`,` separates options, `:` lower layers).
fn overlay_path(p: &Path) -> String {
    let mut out = String::new();
    for c in p.to_string_lossy().chars() {
        if matches!(c, '\\' | ',' | ':') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Is revl running as root (then no user namespace is needed, and none is made)?
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The prefix of the overlay's extended attributes for the current user.
pub fn xattr_prefix() -> &'static str {
    if is_root() {
        "trusted."
    } else {
        "user."
    }
}

/// What the entries of `dir` take (a file's apparent size or its blocks, whichever is more:
/// a sparse file counts whole, as a copy of it might; every directory and symlink too, with
/// [`ENTRY_OVERHEAD`] each), stopping early past `cap`.
fn tree_bytes(dir: &Path, cap: u64) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            // Every entry counts what it takes on disk: its bytes or its blocks, whichever
            // is more, plus an inode's worth of metadata (directories and symlinks
            // included: a command cannot fill the disk with them under the limit).
            let used = m.len().max(m.blocks().saturating_mul(512));
            total = total.saturating_add(used).saturating_add(ENTRY_OVERHEAD);
            if m.is_dir() {
                stack.push(e.path());
            }
            if total > cap {
                return total;
            }
        }
    }
    total
}

/// What each entry of the upper layer counts against `--max-bytes` beyond its own bytes or
/// blocks: an inode and a directory entry (docs/security.md, "Limits").
pub const ENTRY_OVERHEAD: u64 = 256;

/// A `pids` cgroup of revl's own for one command (cgroup v2 where the controller is
/// delegated to revl's cgroup, else the v1 `pids` hierarchy), removed when dropped.
pub struct PidsCgroup {
    dir: PathBuf,
    procs: std::fs::File,
}

impl PidsCgroup {
    /// Make one holding at most `max` tasks; `None` where revl may not.
    pub fn new(max: u64) -> Option<PidsCgroup> {
        let base = pids_cgroup_base()?;
        sweep_stale(&base);
        let dir = base.join(format!(
            "revl-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir(&dir).ok()?;
        let made = (|| {
            std::fs::write(dir.join("pids.max"), max.to_string())?;
            // v1: the first child (one thread) moves itself through `tasks`, which spares
            // the RCU grace period a whole-process move through `cgroup.procs` waits for.
            let tasks = dir.join("tasks");
            let file = if tasks.exists() {
                tasks
            } else {
                dir.join("cgroup.procs")
            };
            std::fs::OpenOptions::new().write(true).open(file)
        })();
        match made {
            Ok(procs) => Some(PidsCgroup { dir, procs }),
            Err(_) => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }
}

impl PidsCgroup {
    /// Whether the cgroup refused a fork at its limit (`pids.events`: `max N`, N > 0).
    pub fn hit_max(&self) -> bool {
        std::fs::read_to_string(self.dir.join("pids.events")).is_ok_and(|e| {
            e.lines().any(|l| {
                l.strip_prefix("max ")
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .is_some_and(|n| n > 0)
            })
        })
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // Its last tasks may still be exiting: a few tries.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Remove the empty cgroups a revl that was killed (no `Drop`) left: `revl-PID-…` whose
/// PID is gone. A cgroup still holding a task refuses the removal.
fn sweep_stale(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("revl-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// Where revl's own cgroup of a `pids` controller lies, if it may make children there.
fn pids_cgroup_base() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // v2: the unified hierarchy, with pids enabled for revl's cgroup's children.
    if let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) {
        for m in mounts.lines() {
            let f: Vec<&str> = m.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            if f.get(sep + 1) == Some(&"cgroup2") {
                let base = Path::new(f[4]).join(path.trim_start_matches('/'));
                let ctl = std::fs::read_to_string(base.join("cgroup.subtree_control"))
                    .unwrap_or_default();
                if ctl.split_whitespace().any(|c| c == "pids") {
                    return Some(base);
                }
            }
        }
    }
    // v1: the pids hierarchy.
    let path = own.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, ctl, path) = (it.next()?, it.next()?, it.next()?);
        ctl.split(',').any(|c| c == "pids").then_some(path)
    })?;
    for m in mounts.lines() {
        let f: Vec<&str> = m.split(' ').collect();
        let Some(sep) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        if f.get(sep + 1) == Some(&"cgroup")
            && f.get(sep + 3)
                .is_some_and(|o| o.split(',').any(|c| c == "pids"))
        {
            let base = Path::new(f[4]).join(path.trim_start_matches('/'));
            return base.is_dir().then_some(base);
        }
    }
    None
}

/// How the limits are enforced here: `"cgroup"` where revl may make a pids cgroup, else
/// `"rlimit"`.
pub fn limits_mode() -> &'static str {
    if is_root() && PidsCgroup::new(1).is_some() {
        "cgroup"
    } else {
        "rlimit"
    }
}

/// Where the sandbox mounts a filesystem of its own before the masks: what lies under them
/// on the host is out of the command's sight (but for the workspace and the device nodes,
/// placed there).
fn sandbox_own(real: &Path, workspace: &Path) -> bool {
    if real.starts_with(workspace) {
        return false;
    }
    if DEV_NODES.iter().any(|n| real == Path::new("/dev").join(n)) {
        return false;
    }
    let run = Path::new("/run").is_dir();
    ["/tmp", "/dev"].iter().any(|d| real.starts_with(d)) || (run && real.starts_with("/run"))
}

/// The masks to make: each path of `spec.hide` resolved on the host (a symlink is masked
/// where it leads), files first; what needs no mask is left out (absent, or out of sight);
/// what cannot be hidden is refused.
fn hidden(spec: &Spec) -> Result<Vec<(CString, bool, i32)>, Failure> {
    let mut hide = Vec::new();
    for (index, h) in spec.hide.iter().enumerate() {
        let refuse = |why: String| Failure::CannotHide { index, why };
        let real = match h.canonicalize() {
            Ok(r) => r,
            // Nothing there (the host is read-only to the command: nothing can appear).
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                continue
            }
            Err(e) => return Err(refuse(format!("it cannot be resolved: {e}"))),
        };
        if spec.workspace.starts_with(&real) {
            return Err(refuse(format!(
                "it holds the workspace {}",
                spec.workspace.display()
            )));
        }
        if sandbox_own(&real, spec.workspace) {
            continue;
        }
        let path = cstr(&real).map_err(|e| refuse(e.to_string()))?;
        hide.push((path, real.is_dir(), index as i32));
    }
    hide.sort_by_key(|(_, dir, _)| *dir);
    Ok(hide)
}

fn prepare(
    spec: &Spec,
    board: usize,
    cgroup: Option<&PidsCgroup>,
    net_sock: libc::c_int,
    hide: Vec<(CString, bool, i32)>,
) -> std::io::Result<(Prepared, PathBuf)> {
    let root = is_root();
    let upper = spec.scratch.join("upper");
    let work = spec.scratch.join("work");
    let merged = spec.scratch.join("merged");
    for d in [&upper, &work, &merged] {
        std::fs::create_dir_all(d)?;
    }
    let mut opts = format!(
        "lowerdir={},upperdir={},workdir={},redirect_dir=nofollow,metacopy=off,index=off,xino=off,volatile",
        overlay_path(spec.workspace),
        overlay_path(&upper),
        overlay_path(&work)
    );
    if !root {
        opts.push_str(",userxattr");
    }
    let mut unshare = libc::CLONE_NEWNS
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWUTS;
    let maps = if root {
        None
    } else {
        unshare |= libc::CLONE_NEWUSER;
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Some((
            CString::new(format!("{uid} {uid} 1\n")).expect("digits"),
            CString::new(format!("{gid} {gid} 1\n")).expect("digits"),
        ))
    };
    let mut ws_chain = Vec::new();
    let mut at = PathBuf::from("/");
    for c in spec.workspace.components().skip(1) {
        at.push(c);
        ws_chain.push(cstr(&at)?);
    }
    let empty = spec.scratch.join("empty");
    std::fs::write(&empty, b"")?;
    std::fs::set_permissions(&empty, std::os::unix::fs::PermissionsExt::from_mode(0o444))?;
    // Writes stay allowed in the workspace view and the sandbox's private /tmp, /dev/shm
    // and /run; to the device nodes (not making or removing any); nowhere else.
    let abi = landlock_abi();
    let all = landlock_writes(abi);
    let mut landlock_rules = vec![
        (cstr(spec.workspace)?, all),
        (c"/tmp".to_owned(), all),
        (c"/dev/shm".to_owned(), all),
        (c"/dev".to_owned(), all & (LL_WRITE_FILE | LL_TRUNCATE)),
    ];
    if Path::new("/run").is_dir() {
        landlock_rules.push((c"/run".to_owned(), all));
    }
    let mut dev_host = Vec::new();
    let mut dev_target = Vec::new();
    for n in DEV_NODES {
        let p = Path::new("/dev").join(n);
        if p.exists() {
            dev_target.push(cstr(&p)?);
            dev_host.push(cstr(&p)?);
        }
    }
    Ok((
        Prepared {
            board,
            // SAFETY: getpid cannot fail.
            parent: unsafe { libc::getpid() },
            unshare,
            maps,
            command_userns: root,
            seccomp: crate::seccomp::programs().unwrap_or_default(),
            merged: cstr(&merged)?,
            overlay_opts: CString::new(opts).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path holds NUL")
            })?,
            dev_host,
            dev_target,
            run_exists: Path::new("/run").is_dir(),
            ws_chain,
            workspace: cstr(spec.workspace)?,
            cwd: cstr(spec.cwd)?,
            hide,
            empty: cstr(&empty)?,
            rlimits: [
                (
                    libc::RLIMIT_AS,
                    spec.limits.memory.unwrap_or(libc::RLIM_INFINITY),
                ),
                (libc::RLIMIT_NPROC, spec.limits.pids),
                (
                    libc::RLIMIT_CPU,
                    spec.limits.cpu_seconds.unwrap_or(libc::RLIM_INFINITY),
                ),
                (libc::RLIMIT_FSIZE, spec.limits.max_bytes.saturating_add(1)),
                (libc::RLIMIT_NOFILE, open_files()),
            ],
            tmpfs_sticky: tmpfs_opts("1777", spec.limits.memory)?,
            tmpfs_run: tmpfs_opts("755", spec.limits.memory)?,
            cgroup_procs: cgroup.map_or(-1, |c| {
                use std::os::fd::AsRawFd;
                c.procs.as_raw_fd()
            }),
            landlock_abi: abi,
            landlock_rules,
            net_sock,
        },
        upper,
    ))
}

/// Run the command in the sandbox. The caller's scratch directory must be empty. `started`
/// runs once the command is running (revl records its intent there); its error kills the
/// command and is returned as [`Failure::Started`].
pub fn run(
    spec: &Spec,
    started: &mut dyn FnMut() -> std::io::Result<()>,
) -> Result<Outcome, Failure> {
    run_to(spec, started, None)
}

/// [`run`], the command's outputs also given to `sink` as they are read.
pub fn run_to(
    spec: &Spec,
    started: &mut dyn FnMut() -> std::io::Result<()>,
    sink: Option<OutputSink>,
) -> Result<Outcome, Failure> {
    let shared = Shared::new().map_err(|e| Failure::Unavailable(format!("{}: {e}", STAGES[0])))?;
    // As root, the pids limit is a cgroup's (the kernel does not apply RLIMIT_NPROC to
    // uid 0); unprivileged, RLIMIT_NPROC counts the sandbox's own user namespace.
    let cgroup = if is_root() {
        PidsCgroup::new(spec.limits.pids)
    } else {
        None
    };
    let mut pair = match spec.net_listener {
        Some(_) => {
            Some(socket_pair().map_err(|e| Failure::Unavailable(format!("{}: {e}", STAGES[0])))?)
        }
        None => None,
    };
    let net_sock = pair.as_ref().map_or(-1, |(_, theirs)| {
        use std::os::fd::AsRawFd;
        theirs.as_raw_fd()
    });
    let hide = hidden(spec)?;
    let (prepared, upper) = prepare(spec, shared.ptr as usize, cgroup.as_ref(), net_sock, hide)
        .map_err(|e| Failure::Unavailable(format!("{}: {e}", STAGES[0])))?;
    let Some((prog, args)) = spec.argv.split_first() else {
        return Err(Failure::NotStarted(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty argv",
        )));
    };
    let mut cmd = Command::new(prog);
    cmd.args(args);
    for (k, v) in spec.env {
        cmd.env(k, v);
    }
    // SAFETY: `enter` makes only raw system calls on memory prepared before the fork (see
    // the module documentation); it never allocates or takes a lock.
    unsafe {
        cmd.pre_exec(move || enter(&prepared));
    }
    let mut said = false;
    let mut started = || {
        if let (Some((ours, theirs)), Some(slot)) = (pair.take(), spec.net_listener) {
            // The sandbox's end is closed here, so a sandbox that died reads as an end.
            drop(theirs);
            let fd = receive_fd(&ours)?;
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(fd);
        }
        said = true;
        started()
    };
    let max = spec.limits.max_bytes;
    let watched = upper.clone();
    let mut over = None;
    let mut stop = || {
        let n = tree_bytes(&watched, max);
        if n > max {
            over = Some(n);
        }
        n > max
    };
    let result = run_command_watched(cmd, None, spec.timeout, &mut started, &mut stop, sink);
    let pids_hit = cgroup.as_ref().is_some_and(PidsCgroup::hit_max);
    let pids_limit = match (&cgroup, is_root()) {
        (Some(_), _) => "cgroup",
        (None, false) => "rlimit",
        (None, true) => "none",
    };
    drop(cgroup);
    if result.is_ok() && over.is_none() {
        // What it wrote after the last look.
        let n = tree_bytes(&upper, max);
        if n > max {
            over = Some(n);
        }
    }
    if let Some(n) = over {
        return Err(Failure::LimitExceeded(format!(
            "--max-bytes {max}: the command wrote more than {max} bytes ({n} seen)"
        )));
    }
    match result {
        Ok(mut ran) => {
            let b = shared.board();
            if !ran.timed_out && b.done.load(Ordering::SeqCst) == 0 {
                // PID 1 died before it could report (killed from outside, out of memory):
                // the command was killed with it.
                let sig = ran
                    .code
                    .filter(|c| *c > 128)
                    .map_or(libc::SIGKILL, |c| c - 128);
                (ran.code, ran.signal) = (None, Some(sig));
            } else if !ran.timed_out {
                // The command's own status (what revl waited for was the namespace's set-up
                // process).
                let st = b.status.load(Ordering::SeqCst);
                (ran.code, ran.signal) = if libc::WIFEXITED(st) {
                    (Some(libc::WEXITSTATUS(st)), None)
                } else {
                    (None, Some(libc::WTERMSIG(st)))
                };
            }
            let limit = if ran.timed_out {
                Some("timeout")
            } else if ran.signal == Some(libc::SIGXCPU)
                || (ran.signal == Some(libc::SIGKILL) && spec.limits.cpu_seconds.is_some())
            {
                Some("cpu")
            } else if ran.signal == Some(libc::SIGXFSZ) {
                Some("bytes")
            } else if pids_hit {
                Some("pids")
            } else {
                None
            };
            Ok(Outcome {
                ran,
                upper,
                xattr_prefix: xattr_prefix(),
                limit,
                pids_limit,
            })
        }
        Err(e) if said => Err(Failure::Started(e)),
        Err(e) => {
            let st = shared.board().stage.load(Ordering::SeqCst);
            if st >= STAGE_EXEC {
                Err(Failure::NotStarted(e))
            } else if st == STAGE_HIDE {
                Err(Failure::CannotHide {
                    index: shared.board().hiding.load(Ordering::SeqCst).max(0) as usize,
                    why: format!("its mask failed in the sandbox: {e}"),
                })
            } else {
                let what = STAGES.get(st.max(0) as usize).copied().unwrap_or("set up");
                Err(Failure::Unavailable(format!("{what}: {e}")))
            }
        }
    }
}

/// Catch the first SIGINT (Ctrl-C) of this process: instead of dying mid-step, revl stops
/// the command it is running ([`crate::proc::interrupt`]) and records what it had done by
/// then, then says so. The handler only stores an atomic flag (async-signal-safe) and is
/// reset by the first delivery (`SA_RESETHAND`): a second Ctrl-C ends revl at once (every
/// operation is crash-safe; the next command repairs it).
pub fn catch_interrupt() {
    extern "C" fn on_sigint(_: libc::c_int) {
        crate::proc::interrupt();
    }
    // SAFETY: installs a handler that performs one atomic store; the sigaction struct is
    // zeroed and filled before the call, which reads it only.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

/// Does the sandbox work here? Runs `true` (or `/bin/sh -c :`) in it over an empty
/// workspace under `dir`; `Err(why)` when it cannot be set up.
pub fn probe(dir: &Path) -> Result<(), String> {
    let ws = dir.join("workspace");
    let scratch = dir.join("scratch");
    std::fs::create_dir_all(&ws).map_err(|e| format!("cannot make {}: {e}", ws.display()))?;
    std::fs::create_dir_all(&scratch)
        .map_err(|e| format!("cannot make {}: {e}", scratch.display()))?;
    let ws = ws
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", ws.display()))?;
    let argv = ["/bin/sh".to_string(), "-c".to_string(), ":".to_string()];
    let spec = Spec {
        argv: &argv,
        workspace: &ws,
        cwd: &ws,
        env: &[],
        timeout: Some(Duration::from_secs(30)),
        scratch: &scratch,
        hide: &[],
        limits: Limits::default(),
        net_listener: None,
    };
    match run(&spec, &mut || Ok(())) {
        Ok(o) if o.ran.code == Some(0) => Ok(()),
        Ok(o) => Err(format!(
            "a probe command in the sandbox failed ({}): {}",
            o.ran.code.map_or_else(
                || format!("signal {:?}", o.ran.signal),
                |c| format!("exit {c}")
            ),
            String::from_utf8_lossy(&o.ran.stderr).trim()
        )),
        Err(Failure::Unavailable(why)) => Err(why),
        Err(Failure::NotStarted(e)) => Err(format!("cannot start /bin/sh in the sandbox: {e}")),
        Err(Failure::Started(e)) => Err(format!("waiting for the probe failed: {e}")),
        Err(Failure::LimitExceeded(why)) => Err(why),
        Err(Failure::CannotHide { why, .. }) => Err(why),
    }
}

// ---- the children: raw system calls only ----

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCSIFFLAGS: libc::c_ulong = 0x8914;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

fn fail() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Check a raw call's result.
fn ok(r: libc::c_long) -> std::io::Result<libc::c_long> {
    if r < 0 {
        Err(fail())
    } else {
        Ok(r)
    }
}

/// Write `data` to a file of /proc (the id maps).
///
/// # Safety
/// Raw system calls only.
unsafe fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    let fd = ok(libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) as libc::c_long)?
        as libc::c_int;
    let n = libc::write(fd, data.as_ptr().cast(), data.len());
    libc::close(fd);
    if n < 0 {
        return Err(fail());
    }
    Ok(())
}

/// A raw fork (not glibc's: no fork handlers, which might take locks another thread of
/// revl held when `Command` forked). Returns the child's pid, or 0 in the child.
///
/// # Safety
/// Raw system calls only.
unsafe fn raw_fork() -> std::io::Result<libc::pid_t> {
    raw_clone(0)
}

/// [`raw_fork`] with extra clone flags (a new user namespace).
///
/// # Safety
/// Raw system calls only.
unsafe fn raw_clone(flags: libc::c_int) -> std::io::Result<libc::pid_t> {
    ok(libc::syscall(
        libc::SYS_clone,
        (libc::SIGCHLD | flags) as libc::c_long,
        0 as libc::c_long,
        0 as libc::c_long,
        0 as libc::c_long,
        0 as libc::c_long,
    ))
    .map(|p| p as libc::pid_t)
}

/// Runs in the child `Command` forked, before exec: the namespaces, PID 1 and its set-up,
/// then the command's own process, which returns to exec. The other two never return.
///
/// # Safety
/// Called between fork and exec: raw system calls only, on `p` prepared before the fork.
unsafe fn enter(p: &Prepared) -> std::io::Result<()> {
    let board = &*(p.board as *const Board);
    let at = |i: i32| board.stage.store(i, Ordering::SeqCst);
    at(1);
    ok(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) as libc::c_long)?;
    // revl may have died before the death signal was armed: then nothing may run.
    if libc::getppid() != p.parent {
        libc::_exit(125);
    }
    if p.cgroup_procs >= 0 {
        // Into the pids cgroup before anything is forked. "0" (this very thread, which is
        // the whole process) is the one move the kernel makes without waiting for an RCU
        // grace period (~10 ms).
        at(28);
        ok(libc::write(p.cgroup_procs, b"0".as_ptr().cast(), 1) as libc::c_long)?;
        libc::close(p.cgroup_procs);
    }
    at(2);
    ok(libc::unshare(p.unshare) as libc::c_long)?;
    if let Some((uid_map, gid_map)) = &p.maps {
        at(3);
        write_proc(c"/proc/self/setgroups", b"deny")?;
        write_proc(c"/proc/self/uid_map", uid_map.as_bytes())?;
        write_proc(c"/proc/self/gid_map", gid_map.as_bytes())?;
    }
    at(4);
    let init = raw_fork()?;
    if init > 0 {
        // Outside the namespace: wait for its PID 1, then exit as it did (0 after it
        // reported the command's status; else what killed it).
        close_all();
        let st = reap_until(init);
        libc::_exit(if libc::WIFEXITED(st) {
            libc::WEXITSTATUS(st)
        } else {
            128 + libc::WTERMSIG(st)
        });
    }
    // PID 1.
    ok(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) as libc::c_long)?;
    setup(p, &at)?;
    at(21);
    // The command waits for PID 1's go-ahead: PID 1 writes the command's id maps (as
    // root) and confines itself first, so the command never runs beside an unconfined PID 1.
    let mut sync = [-1 as libc::c_int; 2];
    ok(libc::pipe2(sync.as_mut_ptr(), libc::O_CLOEXEC) as libc::c_long)?;
    let cmd = if p.command_userns {
        raw_clone(libc::CLONE_NEWUSER)?
    } else {
        raw_fork()?
    };
    if cmd > 0 {
        libc::close(sync[0]);
        if p.command_userns {
            // The whole id range, as is: files keep their owners; the capabilities of
            // uid 0 there reach only that (empty) namespace.
            let full = b"0 0 4294967295\n";
            if let Err(e) = write_child_map(cmd, b"uid_map\0", full)
                .and_then(|_| write_child_map(cmd, b"gid_map\0", full))
            {
                libc::kill(cmd, libc::SIGKILL);
                return Err(e);
            }
        }
        // PID 1 only waits from here on: a session of its own (out of revl's process
        // group: the command cannot signal the caller's shell through it), not dumpable (no
        // `/proc/1/mem` to write into), no capability, and the command's seccomp filter
        // (docs/security.md); then nothing open.
        let confined = (|| -> std::io::Result<()> {
            ok(libc::setsid() as libc::c_long)?;
            ok(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) as libc::c_long)?;
            drop_bounding()?;
            clear_caps()?;
            crate::seccomp::install(&p.seccomp)
        })();
        if let Err(e) = confined {
            libc::kill(cmd, libc::SIGKILL);
            return Err(e);
        }
        libc::write(sync[1], b"1".as_ptr().cast(), 1);
        close_all();
        let status = reap_until(cmd);
        board.status.store(status, Ordering::SeqCst);
        board.done.store(1, Ordering::SeqCst);
        // PID 1 exits: the kernel kills whatever the command left running.
        libc::_exit(0);
    }
    // The command's process: exec follows.
    ok(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) as libc::c_long)?;
    // Wait for PID 1 (EOF: it failed and reported why).
    libc::close(sync[1]);
    let mut b = 0u8;
    if libc::read(sync[0], (&mut b as *mut u8).cast(), 1) != 1 {
        libc::_exit(125);
    }
    libc::close(sync[0]);
    confine(p, &at)?;
    at(STAGE_EXEC);
    Ok(())
}

/// The command's own process, last before exec: a new session without a controlling
/// terminal (no TIOCSTI into the caller's terminal, no `kill(0, …)` reaching revl's
/// process group), and every capability set cleared.
///
/// # Safety
/// Raw system calls only.
unsafe fn confine(p: &Prepared, at: &dyn Fn(i32)) -> std::io::Result<()> {
    at(22);
    ok(libc::setsid() as libc::c_long)?;
    // Nothing the caller holds reaches the command: every descriptor above 2 (one revl's
    // caller left open without close-on-exec: a host file, a directory, a terminal) closes
    // at exec. Standard input is /dev/null unless revl feeds it; output goes to revl's pipes.
    cloexec_above_stderr();
    at(24);
    // A new anonymous session keyring: the caller's session keyring (and, as root, root's
    // user keyring) is out of reach; the filter then refuses the keyring calls.
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    if libc::syscall(
        libc::SYS_keyctl,
        KEYCTL_JOIN_SESSION_KEYRING,
        0 as libc::c_long,
    ) < 0
        && *libc::__errno_location() != libc::ENOSYS
    {
        return Err(fail());
    }
    at(27);
    for (res, lim) in p.rlimits {
        if lim != libc::RLIM_INFINITY {
            // CPU: SIGXCPU at the limit (the result names it), SIGKILL a second later for a
            // command that ignores it.
            let max = if res == libc::RLIMIT_CPU {
                lim.saturating_add(1)
            } else {
                lim
            };
            let r = libc::rlimit {
                rlim_cur: lim,
                rlim_max: max,
            };
            ok(libc::setrlimit(res, &r) as libc::c_long)?;
        }
    }
    at(23);
    drop_bounding()?;
    clear_caps()?;
    if p.landlock_abi > 0 {
        at(29);
        landlock(p)?;
    }
    at(25);
    crate::seccomp::install(&p.seccomp)?;
    Ok(())
}

/// Landlock: the write rights are handled, and granted only beneath `p.landlock_rules`.
///
/// # Safety
/// Raw system calls only (`no_new_privs` is set).
unsafe fn landlock(p: &Prepared) -> std::io::Result<()> {
    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
    }
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    let attr = RulesetAttr {
        handled_access_fs: landlock_writes(p.landlock_abi),
    };
    let ruleset = ok(libc::syscall(
        libc::SYS_landlock_create_ruleset,
        &attr as *const RulesetAttr,
        std::mem::size_of::<RulesetAttr>(),
        0 as libc::c_uint,
    ))? as libc::c_int;
    for (path, access) in &p.landlock_rules {
        let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        if fd < 0 {
            continue; // not in this sandbox (no /run): nothing to allow
        }
        let rule = PathBeneath {
            allowed_access: *access,
            parent_fd: fd,
        };
        const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
        let r = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &rule as *const PathBeneath,
            0 as libc::c_uint,
        );
        libc::close(fd);
        ok(r)?;
    }
    let r = libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0 as libc::c_uint);
    libc::close(ruleset);
    ok(r)?;
    Ok(())
}

/// Drop every capability from the bounding set and clear the ambient set, and set
/// `no_new_privs`.
///
/// # Safety
/// Raw system calls only.
unsafe fn drop_bounding() -> std::io::Result<()> {
    ok(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long)?;
    for cap in 0..64 {
        // EINVAL past the last capability this kernel knows.
        if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) < 0
            && *libc::__errno_location() != libc::EINVAL
        {
            return Err(fail());
        }
    }
    ok(libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL,
        0,
        0,
        0,
    ) as libc::c_long)?;
    Ok(())
}

/// Clear the effective, permitted and inheritable sets (what revl inherited included).
///
/// # Safety
/// Raw system calls only.
unsafe fn clear_caps() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let h = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let d = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    ok(libc::syscall(
        libc::SYS_capset,
        &h as *const Header,
        d.as_ptr(),
    ))?;
    Ok(())
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
///
/// # Safety
/// Raw system calls only.
unsafe fn write_child_map(pid: libc::pid_t, name: &[u8], data: &[u8]) -> std::io::Result<()> {
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
    write_proc(
        std::ffi::CStr::from_bytes_until_nul(&path).map_err(|_| fail())?,
        data,
    )
}

/// Mark every descriptor above 2 close-on-exec: `Command`'s own exec-error pipe stays usable
/// until the exec, everything else is gone after it.
///
/// # Safety
/// Raw system calls only.
unsafe fn cloexec_above_stderr() {
    close_from(3, true);
}

/// Hold nothing open: not the command's output pipes, not `Command`'s exec-error pipe.
///
/// # Safety
/// Raw system calls only.
unsafe fn close_all() {
    close_from(0, false);
}

/// Close every descriptor from `first` on, or with `cloexec` mark them close-on-exec:
/// `close_range` (`CLOSE_RANGE_CLOEXEC`), or one by one up to the open-file limit where the
/// kernel (or a filter) lacks it.
///
/// # Safety
/// Raw system calls only.
unsafe fn close_from(first: libc::c_uint, cloexec: bool) {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    let flags = if cloexec { CLOSE_RANGE_CLOEXEC } else { 0 };
    if libc::syscall(libc::SYS_close_range, first, !0 as libc::c_uint, flags) == 0 {
        return;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
        lim.rlim_cur.min(1 << 20) as libc::c_int
    } else {
        1024
    };
    for fd in first as libc::c_int..max {
        if cloexec {
            let f = libc::fcntl(fd, libc::F_GETFD);
            if f >= 0 {
                libc::fcntl(fd, libc::F_SETFD, f | libc::FD_CLOEXEC);
            }
        } else {
            libc::close(fd);
        }
    }
}

/// Reap every child (orphans included) until `pid` exits; its wait status.
///
/// # Safety
/// Raw system calls only.
unsafe fn reap_until(pid: libc::pid_t) -> libc::c_int {
    loop {
        let mut status: libc::c_int = 0;
        let r = libc::waitpid(-1, &mut status, 0);
        if r == pid {
            return status;
        }
        if r < 0 && *libc::__errno_location() != libc::EINTR {
            return 0;
        }
    }
}

/// The mounts, the network, the working directory and the capabilities of PID 1.
///
/// # Safety
/// Raw system calls only.
unsafe fn setup(p: &Prepared, at: &dyn Fn(i32)) -> std::io::Result<()> {
    let null = std::ptr::null::<libc::c_char>();
    at(5);
    ok(libc::mount(
        null,
        c"/".as_ptr(),
        null,
        libc::MS_REC | libc::MS_PRIVATE,
        std::ptr::null(),
    ) as libc::c_long)?;
    at(6);
    // nosuid, nodev: a setuid file the command makes grants nothing, in here either (on
    // the host, its upper layer is out of other users' reach: a private scratch directory).
    ok(libc::mount(
        c"overlay".as_ptr(),
        p.merged.as_ptr(),
        c"overlay".as_ptr(),
        libc::MS_NOSUID | libc::MS_NODEV,
        p.overlay_opts.as_ptr().cast(),
    ) as libc::c_long)?;
    at(7);
    let clone_flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
    let overlay = ok(libc::syscall(
        libc::SYS_open_tree,
        libc::AT_FDCWD,
        p.merged.as_ptr(),
        clone_flags,
    ))? as libc::c_int;
    at(8);
    // Up to six nodes; a fixed array, no allocation.
    let mut dev_fds = [-1 as libc::c_int; DEV_NODES.len()];
    for (i, host) in p.dev_host.iter().enumerate() {
        dev_fds[i] = ok(libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            host.as_ptr(),
            clone_flags,
        ))? as libc::c_int;
    }
    let ro = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    for fd in dev_fds.iter().take(p.dev_host.len()) {
        // Read-only binds: the node still reads and writes, its inode (mode, owner,
        // times) cannot be changed.
        ok(libc::syscall(
            libc::SYS_mount_setattr,
            *fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &ro as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ))?;
    }
    at(9);
    ok(libc::syscall(
        libc::SYS_mount_setattr,
        libc::AT_FDCWD,
        c"/".as_ptr(),
        AT_RECURSIVE,
        &ro as *const MountAttr,
        std::mem::size_of::<MountAttr>(),
    ))?;
    let tmpfs = |target: &std::ffi::CStr, opts: &std::ffi::CStr, flags: libc::c_ulong| {
        ok(libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            flags,
            opts.as_ptr().cast(),
        ) as libc::c_long)
    };
    // The mask of hidden files, held before the private /tmp (or /dev/shm) may cover it: a
    // store under /tmp is the README's own set-up.
    let empty = if let Some((_, _, first)) = p.hide.iter().find(|(_, dir, _)| !*dir) {
        at(STAGE_HIDE);
        (*(p.board as *const Board))
            .hiding
            .store(*first, Ordering::SeqCst);
        ok(libc::open(p.empty.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) as libc::c_long)?
            as libc::c_int
    } else {
        -1
    };
    at(10);
    tmpfs(c"/tmp", &p.tmpfs_sticky, libc::MS_NOSUID | libc::MS_NODEV)?;
    if p.run_exists {
        at(11);
        tmpfs(c"/run", &p.tmpfs_run, libc::MS_NOSUID | libc::MS_NODEV)?;
    }
    at(12);
    tmpfs(c"/dev", c"mode=755", libc::MS_NOSUID | libc::MS_NOEXEC)?;
    at(13);
    for (i, target) in p.dev_target.iter().enumerate() {
        let fd = ok(libc::open(
            target.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o666,
        ) as libc::c_long)? as libc::c_int;
        libc::close(fd);
        ok(libc::syscall(
            libc::SYS_move_mount,
            dev_fds[i],
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        ))?;
        libc::close(dev_fds[i]);
    }
    at(14);
    ok(libc::mkdir(c"/dev/shm".as_ptr(), 0o755) as libc::c_long)?;
    tmpfs(
        c"/dev/shm",
        &p.tmpfs_sticky,
        libc::MS_NOSUID | libc::MS_NODEV,
    )?;
    at(15);
    for dir in &p.ws_chain {
        if libc::mkdir(dir.as_ptr(), 0o755) < 0 && *libc::__errno_location() != libc::EEXIST {
            return Err(fail());
        }
    }
    ok(libc::syscall(
        libc::SYS_move_mount,
        overlay,
        c"".as_ptr(),
        libc::AT_FDCWD,
        p.workspace.as_ptr(),
        MOVE_MOUNT_F_EMPTY_PATH,
    ))?;
    libc::close(overlay);
    at(16);
    ok(libc::mount(
        c"proc".as_ptr(),
        c"/proc".as_ptr(),
        c"proc".as_ptr(),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        std::ptr::null(),
    ) as libc::c_long)?;
    at(20);
    for path in PROC_RO {
        if libc::mount(
            path.as_ptr(),
            path.as_ptr(),
            null,
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        ) < 0
        {
            if *libc::__errno_location() == libc::ENOENT {
                continue;
            }
            return Err(fail());
        }
        ok(libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            AT_RECURSIVE,
            &ro as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ))?;
    }
    for path in PROC_MASKED {
        // /dev/null (the sandbox's own, read-only): reads as empty, and is always there.
        if libc::mount(
            c"/dev/null".as_ptr(),
            path.as_ptr(),
            null,
            libc::MS_BIND,
            std::ptr::null(),
        ) < 0
        {
            if *libc::__errno_location() == libc::ENOENT {
                continue; // a kernel without keys: nothing to mask
            }
            return Err(fail());
        }
        ok(libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            0 as libc::c_uint,
            &ro as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ))?;
    }
    // The masks, last of the mounts (after /proc: a path under it is masked too). Each
    // failure is the exec's: a path that cannot be hidden runs nothing.
    at(STAGE_HIDE);
    let board = &*(p.board as *const Board);
    for (path, dir, index) in &p.hide {
        board.hiding.store(*index, Ordering::SeqCst);
        if *dir {
            ok(libc::mount(
                c"tmpfs".as_ptr(),
                path.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"mode=555,size=4k,nr_inodes=1".as_ptr().cast(),
            ) as libc::c_long)?;
            continue;
        }
        let mask = ok(libc::syscall(
            libc::SYS_open_tree,
            empty,
            c"".as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint,
        ))? as libc::c_int;
        ok(libc::syscall(
            libc::SYS_mount_setattr,
            mask,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &ro as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ))?;
        ok(libc::syscall(
            libc::SYS_move_mount,
            mask,
            c"".as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        ))?;
        libc::close(mask);
    }
    if empty >= 0 {
        libc::close(empty);
    }
    at(17);
    let sock =
        ok(libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) as libc::c_long)?
            as libc::c_int;
    let mut ifr = IfReq {
        name: [0; 16],
        flags: 0,
        _pad: [0; 22],
    };
    ifr.name[..2].copy_from_slice(b"lo");
    ok(libc::ioctl(sock, SIOCGIFFLAGS, &mut ifr as *mut IfReq) as libc::c_long)?;
    ifr.flags |= libc::IFF_UP as libc::c_short;
    ok(libc::ioctl(sock, SIOCSIFFLAGS, &mut ifr as *mut IfReq) as libc::c_long)?;
    libc::close(sock);
    if p.net_sock >= 0 {
        at(30);
        send_listener(p.net_sock)?;
    }
    at(18);
    ok(libc::chdir(p.cwd.as_ptr()) as libc::c_long)?;
    at(19);
    drop_bounding()?;
    Ok(())
}

// ---- declared egress: the proxy's listening socket, made inside, served outside ----

/// A connected pair of Unix sockets (close-on-exec): revl's end and the sandbox's.
fn socket_pair() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [-1 as libc::c_int; 2];
    // SAFETY: socketpair fills the two-element array; checked.
    ok(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } as libc::c_long)?;
    // SAFETY: both descriptors were just made and are owned by nothing else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

/// Receive the listening socket the sandbox sent (waiting at most 30 s).
fn receive_fd(sock: &std::os::fd::OwnedFd) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd owned here.
    let r = unsafe { libc::poll(&mut pfd, 1, 30_000) };
    if r <= 0 {
        return Err(std::io::Error::other(
            "the sandbox did not hand over the egress proxy's socket",
        ));
    }
    let mut byte = 0u8;
    let mut iov = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; its pointers are set to live buffers below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: recvmsg into the buffers above, which outlive the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n <= 0 {
        return Err(std::io::Error::other(
            "the sandbox closed before handing over the egress proxy's socket",
        ));
    }
    // SAFETY: the control buffer was filled by recvmsg; CMSG_* walk it within its length.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(std::io::Error::other(
                "the sandbox sent no socket for the egress proxy",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
        Ok(std::os::fd::OwnedFd::from_raw_fd(fd))
    }
}

/// In PID 1, inside the sandbox's network namespace: listen on 127.0.0.1:3128 and send
/// the socket to revl over `sock` (the listener is then revl's alone: PID 1 closes its copy).
///
/// # Safety
/// Raw system calls only, on the stack.
unsafe fn send_listener(sock: libc::c_int) -> std::io::Result<()> {
    let l =
        ok(libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) as libc::c_long)?
            as libc::c_int;
    let one: libc::c_int = 1;
    libc::setsockopt(
        l,
        libc::SOL_SOCKET,
        libc::SO_REUSEADDR,
        (&one as *const libc::c_int).cast(),
        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
    );
    let mut addr: libc::sockaddr_in = std::mem::zeroed();
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_port = crate::egress::PROXY_PORT.to_be();
    addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
    ok(libc::bind(
        l,
        (&addr as *const libc::sockaddr_in).cast(),
        std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
    ) as libc::c_long)?;
    ok(libc::listen(l, 1024) as libc::c_long)?;
    let mut byte = 1u8;
    let mut iov = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let mut cbuf = [0u64; 8];
    let mut msg: libc::msghdr = std::mem::zeroed();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
    let c = libc::CMSG_FIRSTHDR(&msg);
    (*c).cmsg_level = libc::SOL_SOCKET;
    (*c).cmsg_type = libc::SCM_RIGHTS;
    (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), l);
    let r = libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL);
    libc::close(l);
    libc::close(sock);
    ok(r as libc::c_long)?;
    Ok(())
}
