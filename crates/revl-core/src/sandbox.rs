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
//! This module decides and prepares (a [`revl_sandbox::Plan`], made before the fork) and
//! reads the outcome; everything between fork and exec is in the `revl-sandbox` crate
//! (system calls only, on the plan: no allocation, no lock, as `pre_exec` requires), the one
//! place in revl with unsafe code. Which step failed is written to a shared page, so a
//! refusal can say which part of the sandbox this machine does not allow
//! (`sandbox-unavailable`).

use crate::proc::{run_command_watched, OutputSink, Ran};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
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
    /// Give the command a pipe to write a note to its caller on (its descriptor number in
    /// `REVL_NOTE_FD`): what it wrote there, up to [`NOTE_CAP`] bytes, is
    /// [`Outcome::note`].
    pub note: bool,
}

/// How much of what a command writes on its note pipe revl keeps (the rest is read and
/// dropped, so a writer never blocks).
pub const NOTE_CAP: usize = 4096;

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
    /// What the command wrote on its note pipe ([`Spec::note`]; `None`: no pipe was asked for).
    pub note: Option<Vec<u8>>,
}

/// Why the sandbox cannot be set up: the stage that failed (where one did) and why.
#[derive(Debug, Clone)]
pub struct Unavailable {
    pub stage: Option<Stage>,
    pub why: String,
}

impl Unavailable {
    fn at(stage: Stage, e: impl std::fmt::Display) -> Unavailable {
        Unavailable {
            stage: Some(stage),
            why: e.to_string(),
        }
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.stage {
            Some(s) => write!(f, "{}: {}", s.text(), self.why),
            None => f.write_str(&self.why),
        }
    }
}

/// Why nothing ran.
#[derive(Debug)]
pub enum Failure {
    /// The sandbox could not be set up: which part failed, and the system's reason.
    Unavailable(Unavailable),
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

pub use revl_sandbox::Stage;
use revl_sandbox::{Board, Plan};

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
    revl_sandbox::limits::hard(revl_sandbox::limits::Resource::Nofile)
        .map_or(OPEN_FILES, |hard| OPEN_FILES.min(hard))
}

fn tmpfs_opts(mode: &str, memory: Option<u64>) -> std::io::Result<CString> {
    CString::new(format!(
        "mode={mode},size={}k,nr_inodes=65536",
        tmpfs_size(memory) >> 10
    ))
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "tmpfs options"))
}

/// The Landlock ABI version of this kernel (0: none, or disabled).
pub fn landlock_abi() -> i32 {
    revl_sandbox::landlock::abi()
}

fn cstr(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path holds NUL"))
}

/// Escape a path for the overlay's option string (`,` separates options, `:` lower layers).
pub(crate) fn overlay_path(p: &Path) -> String {
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
    revl_sandbox::limits::is_root()
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
    if revl_sandbox::mounts::DEV_NODES
        .iter()
        .any(|n| real == Path::new("/dev").join(n))
    {
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
    cgroup: Option<&PidsCgroup>,
    net_sock: Option<std::os::fd::RawFd>,
    note_fd: Option<std::os::fd::RawFd>,
    hide: Vec<(CString, bool, i32)>,
) -> std::io::Result<(Plan, PathBuf)> {
    use revl_sandbox::landlock;
    use revl_sandbox::limits::Resource;
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
        let (uid, gid) = revl_sandbox::limits::ids();
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
    let all = landlock::writes(abi);
    let mut beneath = vec![
        (cstr(spec.workspace)?, all),
        (c"/tmp".to_owned(), all),
        (c"/dev/shm".to_owned(), all),
        (
            c"/dev".to_owned(),
            all & (landlock::WRITE_FILE | landlock::TRUNCATE),
        ),
    ];
    let run_exists = Path::new("/run").is_dir();
    if run_exists {
        beneath.push((c"/run".to_owned(), all));
    }
    let mut dev_nodes = Vec::new();
    for n in revl_sandbox::mounts::DEV_NODES {
        let p = Path::new("/dev").join(n);
        if p.exists() {
            dev_nodes.push(cstr(&p)?);
        }
    }
    let nul = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path holds NUL");
    Ok((
        Plan {
            parent: revl_sandbox::limits::pid(),
            unshare,
            maps,
            command_userns: root,
            seccomp: revl_sandbox::seccomp::programs().unwrap_or_default(),
            mounts: revl_sandbox::mounts::Tree {
                merged: cstr(&merged)?,
                overlay_opts: CString::new(opts).map_err(|_| nul())?,
                dev_nodes,
                run_exists,
                ws_chain,
                workspace: cstr(spec.workspace)?,
                hide,
                empty: cstr(&empty)?,
                tmpfs_sticky: tmpfs_opts("1777", spec.limits.memory)?,
                tmpfs_run: tmpfs_opts("755", spec.limits.memory)?,
            },
            cwd: cstr(spec.cwd)?,
            rlimits: [
                (Resource::As, spec.limits.memory),
                (Resource::Nproc, Some(spec.limits.pids)),
                (Resource::Cpu, spec.limits.cpu_seconds),
                (
                    Resource::Fsize,
                    Some(spec.limits.max_bytes.saturating_add(1)),
                ),
                (Resource::Nofile, Some(open_files())),
            ],
            cgroup_procs: cgroup.map(|c| {
                use std::os::fd::AsRawFd;
                c.procs.as_raw_fd()
            }),
            landlock: landlock::Rules { abi, beneath },
            net_sock,
            proxy_port: crate::egress::PROXY_PORT,
            note_fd,
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
    let board =
        Board::new().map_err(|e| Failure::Unavailable(Unavailable::at(Stage::Prepare, e)))?;
    // As root, the pids limit is a cgroup's (the kernel does not apply RLIMIT_NPROC to
    // uid 0); unprivileged, RLIMIT_NPROC counts the sandbox's own user namespace.
    let cgroup = if is_root() {
        PidsCgroup::new(spec.limits.pids)
    } else {
        None
    };
    let mut pair = match spec.net_listener {
        Some(_) => Some(
            revl_sandbox::fdpass::socket_pair()
                .map_err(|e| Failure::Unavailable(Unavailable::at(Stage::Prepare, e)))?,
        ),
        None => None,
    };
    let net_sock = pair.as_ref().map(|(_, theirs)| {
        use std::os::fd::AsRawFd;
        theirs.as_raw_fd()
    });
    let hide = hidden(spec)?;
    let mut note_pipe = match spec.note {
        true => Some(
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| {
                Failure::Unavailable(Unavailable::at(Stage::Prepare, std::io::Error::from(e)))
            })?,
        ),
        false => None,
    };
    let note_fd = note_pipe.as_ref().map(|(_, w)| {
        use std::os::fd::AsRawFd;
        w.as_raw_fd()
    });
    let (plan, upper) = prepare(spec, cgroup.as_ref(), net_sock, note_fd, hide)
        .map_err(|e| Failure::Unavailable(Unavailable::at(Stage::Prepare, e)))?;
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
    if let Some(fd) = note_fd {
        cmd.env("REVL_NOTE_FD", fd.to_string());
    }
    revl_sandbox::arm(&mut cmd, plan, &board).map_err(Failure::NotStarted)?;
    let mut said = false;
    let mut note_reader = None;
    let mut started = || {
        if let Some((r, w)) = note_pipe.take() {
            // Our copy of the write end closes now: the note ends when the command's do.
            drop(w);
            note_reader = Some(std::thread::spawn(move || read_note(r)));
        }
        if let (Some((ours, theirs)), Some(slot)) = (pair.take(), spec.net_listener) {
            // The sandbox's end is closed here, so a sandbox that died reads as an end.
            drop(theirs);
            let fd = revl_sandbox::fdpass::receive_fd(&ours)?;
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
    // The sandbox is gone (every process of it killed): the pipe has no writer left.
    let note = note_reader.map(|t| t.join().unwrap_or_default());
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
            let status = board.status();
            if !ran.timed_out && status.is_none() {
                // PID 1 died before it could report (killed from outside, out of memory):
                // the command was killed with it.
                let sig = ran
                    .code
                    .filter(|c| *c > 128)
                    .map_or(libc::SIGKILL, |c| c - 128);
                (ran.code, ran.signal) = (None, Some(sig));
            } else if let (false, Some(st)) = (ran.timed_out, status) {
                // The command's own status (what revl waited for was the namespace's set-up
                // process).
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
                note,
            })
        }
        Err(e) if said => Err(Failure::Started(e)),
        Err(e) => match board.stage() {
            None => Err(Failure::NotStarted(e)),
            Some(Stage::Hide) => Err(Failure::CannotHide {
                index: board.hiding().max(0) as usize,
                why: format!("its mask failed in the sandbox: {e}"),
            }),
            Some(stage) => Err(Failure::Unavailable(Unavailable::at(stage, e))),
        },
    }
}

/// Read a command's note pipe to its end: the first [`NOTE_CAP`] bytes are kept.
fn read_note(r: std::os::fd::OwnedFd) -> Vec<u8> {
    use std::io::Read;
    let mut f = std::fs::File::from(r);
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return kept,
            Ok(n) => {
                let room = NOTE_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return kept,
        }
    }
}

/// Catch the first SIGINT (Ctrl-C) of this process: instead of dying mid-step, revl stops
/// the command it is running ([`crate::proc::interrupt`]) and records what it had done by
/// then, then says so. The handler only stores an atomic flag (async-signal-safe) and is
/// reset by the first delivery (`SA_RESETHAND`): a second Ctrl-C ends revl at once (every
/// operation is crash-safe; the next command repairs it).
pub fn catch_interrupt() {
    revl_sandbox::signals::catch_first_sigint(crate::proc::interrupt);
}

/// [`catch_interrupt`] for a command revl runs on another program's behalf (an agent's
/// shell tool, docs/agents.md): that program ending revl (SIGTERM, SIGHUP) or dying (revl
/// asks the kernel for a SIGTERM when its parent goes) stops the sandboxed tree the way
/// Ctrl-C does, and what it did by then is recorded as the step.
pub fn stop_with_caller() {
    revl_sandbox::signals::catch_first(
        &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP],
        crate::proc::interrupt,
    );
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM));
}

/// Does the sandbox work here? Runs `true` (or `/bin/sh -c :`) in it over an empty
/// workspace under `dir`; why (and at which stage, where one failed) when it cannot be set
/// up.
pub fn probe(dir: &Path) -> Result<(), Unavailable> {
    let no_stage = |why: String| Unavailable { stage: None, why };
    let ws = dir.join("workspace");
    let scratch = dir.join("scratch");
    std::fs::create_dir_all(&ws)
        .map_err(|e| no_stage(format!("cannot make {}: {e}", ws.display())))?;
    std::fs::create_dir_all(&scratch)
        .map_err(|e| no_stage(format!("cannot make {}: {e}", scratch.display())))?;
    let ws = ws
        .canonicalize()
        .map_err(|e| no_stage(format!("cannot resolve {}: {e}", ws.display())))?;
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
        note: false,
    };
    match run(&spec, &mut || Ok(())) {
        Ok(o) if o.ran.code == Some(0) => Ok(()),
        Ok(o) => Err(no_stage(format!(
            "a probe command in the sandbox failed ({}): {}",
            o.ran.code.map_or_else(
                || format!("signal {:?}", o.ran.signal),
                |c| format!("exit {c}")
            ),
            String::from_utf8_lossy(&o.ran.stderr).trim()
        ))),
        Err(Failure::Unavailable(u)) => Err(u),
        Err(Failure::NotStarted(e)) => Err(no_stage(format!(
            "cannot start /bin/sh in the sandbox: {e}"
        ))),
        Err(Failure::Started(e)) => Err(no_stage(format!("waiting for the probe failed: {e}"))),
        Err(Failure::LimitExceeded(why)) | Err(Failure::CannotHide { why, .. }) => {
            Err(no_stage(why))
        }
    }
}
