//! The mount tree the command sees (docs/security.md, "Filesystem"): the tree made private;
//! the overlay mounted and cloned (detached) while the host is still visible, with the
//! device nodes (cloned read-only); every mount made read-only at once
//! (`mount_setattr(AT_RECURSIVE)`); private tmpfs on `/tmp`, `/dev/shm` and `/run`; a tmpfs
//! `/dev` with the nodes (no `tty`); the overlay moved to the workspace's own path; a fresh
//! `/proc` whose host-wide parts are read-only and whose key lists are masked; last, the
//! hidden paths masked (a file's mask is a clone of an empty file opened before the private
//! `/tmp` may cover it).
//!
//! The new mount API goes through rustix (`open_tree`, `move_mount`, `mount`);
//! `mount_setattr`, which rustix does not wrap, is the one raw call here.

use crate::Stage;
use rustix::fs::{Mode, OFlags, CWD};
use rustix::mount::{MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags};
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// The device nodes the sandbox's `/dev` holds (bound read-only; no `tty`: the command has
/// no controlling terminal, docs/security.md).
pub const DEV_NODES: [&str; 5] = ["null", "zero", "full", "random", "urandom"];

/// The host-wide parts of `/proc` that a fresh `/proc` would leave writable (as bubblewrap
/// does, they are bound read-only over themselves): a sysctl needs no capability for uid 0.
const PROC_RO: [&CStr; 4] = [
    c"/proc/sys",
    c"/proc/sysrq-trigger",
    c"/proc/irq",
    c"/proc/bus",
];

/// Parts of `/proc` that name what the caller holds (every key it may view, and their
/// users, by name and description): masked by the sandbox's read-only `/dev/null`.
const PROC_MASKED: [&CStr; 2] = [c"/proc/keys", c"/proc/key-users"];

/// The mounts to make, prepared before the fork.
#[derive(Debug)]
pub struct Tree {
    /// Where the overlay is mounted first (in revl's scratch directory).
    pub merged: CString,
    /// The overlay's option string.
    pub overlay_opts: CString,
    /// The device nodes present on the host (each of [`DEV_NODES`] that exists).
    pub dev_nodes: Vec<CString>,
    /// Whether the host has a `/run` (then the sandbox gets a private one).
    pub run_exists: bool,
    /// The workspace and each of its ancestors, shortest first (made where missing, in the
    /// private /tmp for instance).
    pub ws_chain: Vec<CString>,
    pub workspace: CString,
    /// Masked paths: (path, is a directory, index reported while it is made), files first.
    pub hide: Vec<(CString, bool, i32)>,
    /// An empty read-only file of revl's, cloned and bound over each hidden file.
    pub empty: CString,
    /// The mount options of the private `/tmp` and `/dev/shm` (mode 1777) and `/run`
    /// (mode 755).
    pub tmpfs_sticky: CString,
    pub tmpfs_run: CString,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Make the mount at `path` (relative to `dir`; `""` with `AT_EMPTY_PATH`: `dir` itself)
/// read-only, with every mount beneath it when `recursive`.
#[allow(unsafe_code)]
fn read_only(dir: impl AsFd, path: &CStr, flags: libc::c_uint) -> std::io::Result<()> {
    let ro = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is a C string and `ro` a `struct mount_attr` of the size given; both
    // outlive the call, which only reads them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dir.as_fd().as_raw_fd(),
            path.as_ptr(),
            flags,
            &ro as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn clone_tree(dir: impl AsFd, path: &CStr, empty_path: bool) -> std::io::Result<OwnedFd> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    if empty_path {
        flags |= OpenTreeFlags::AT_EMPTY_PATH;
    }
    Ok(rustix::mount::open_tree(dir, path, flags)?)
}

fn place(tree: &OwnedFd, target: &CStr) -> std::io::Result<()> {
    rustix::mount::move_mount(
        tree,
        c"",
        CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?;
    Ok(())
}

fn tmpfs(target: &CStr, opts: &CStr, flags: MountFlags) -> std::io::Result<()> {
    rustix::mount::mount(c"tmpfs", target, c"tmpfs", flags, opts)?;
    Ok(())
}

/// Build the tree in PID 1 (in the new mount namespace), reporting each stage through `at`
/// and the hidden path under way through `hiding`.
pub fn build(t: &Tree, at: &dyn Fn(Stage), hiding: &AtomicI32) -> std::io::Result<()> {
    at(Stage::PrivateTree);
    rustix::mount::mount_change(
        c"/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )?;
    at(Stage::Overlay);
    // nosuid, nodev: a setuid file the command makes grants nothing, in here either (on
    // the host, its upper layer is out of other users' reach: a private scratch directory).
    rustix::mount::mount(
        c"overlay",
        t.merged.as_c_str(),
        c"overlay",
        MountFlags::NOSUID | MountFlags::NODEV,
        t.overlay_opts.as_c_str(),
    )?;
    at(Stage::CloneOverlay);
    let overlay = clone_tree(CWD, &t.merged, false)?;
    at(Stage::CloneDevices);
    // Up to five nodes; a fixed array, no allocation.
    let mut dev: [Option<OwnedFd>; DEV_NODES.len()] = Default::default();
    for (slot, host) in dev.iter_mut().zip(&t.dev_nodes) {
        let fd = clone_tree(CWD, host, false)?;
        // Read-only binds: the node still reads and writes, its inode (mode, owner,
        // times) cannot be changed.
        read_only(&fd, c"", libc::AT_EMPTY_PATH as libc::c_uint)?;
        *slot = Some(fd);
    }
    at(Stage::HostReadOnly);
    read_only(CWD, c"/", AT_RECURSIVE)?;
    // The mask of hidden files, held before the private /tmp (or /dev/shm) may cover it: a
    // store under /tmp is the README's own set-up.
    let empty = match t.hide.iter().find(|(_, dir, _)| !*dir) {
        Some((_, _, first)) => {
            at(Stage::Hide);
            hiding.store(*first, Ordering::SeqCst);
            Some(rustix::fs::open(
                t.empty.as_c_str(),
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
            )?)
        }
        None => None,
    };
    at(Stage::PrivateTmp);
    let private = MountFlags::NOSUID | MountFlags::NODEV;
    tmpfs(c"/tmp", &t.tmpfs_sticky, private)?;
    if t.run_exists {
        at(Stage::PrivateRun);
        tmpfs(c"/run", &t.tmpfs_run, private)?;
    }
    at(Stage::Dev);
    tmpfs(
        c"/dev",
        c"mode=755",
        MountFlags::NOSUID | MountFlags::NOEXEC,
    )?;
    at(Stage::DevNodes);
    for (fd, target) in dev.iter().zip(&t.dev_nodes) {
        let Some(fd) = fd else { break };
        drop(rustix::fs::open(
            target.as_c_str(),
            OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )?);
        place(fd, target)?;
    }
    drop(dev);
    at(Stage::DevShm);
    rustix::fs::mkdir(c"/dev/shm", Mode::from_raw_mode(0o755))?;
    tmpfs(c"/dev/shm", &t.tmpfs_sticky, private)?;
    at(Stage::PlaceWorkspace);
    for dir in &t.ws_chain {
        match rustix::fs::mkdir(dir.as_c_str(), Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
    }
    place(&overlay, &t.workspace)?;
    drop(overlay);
    at(Stage::Proc);
    rustix::mount::mount(
        c"proc",
        c"/proc",
        c"proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        c"",
    )?;
    at(Stage::ProcReadOnly);
    for path in PROC_RO {
        match rustix::mount::mount_bind_recursive(path, path) {
            Ok(()) => {}
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        }
        read_only(CWD, path, AT_RECURSIVE)?;
    }
    for path in PROC_MASKED {
        // /dev/null (the sandbox's own, read-only): reads as empty, and is always there.
        match rustix::mount::mount_bind(c"/dev/null", path) {
            Ok(()) => {}
            Err(rustix::io::Errno::NOENT) => continue, // a kernel without keys
            Err(e) => return Err(e.into()),
        }
        read_only(CWD, path, 0)?;
    }
    // The masks, last of the mounts (after /proc: a path under it is masked too). Each
    // failure is the exec's: a path that cannot be hidden runs nothing.
    at(Stage::Hide);
    for (path, dir, index) in &t.hide {
        hiding.store(*index, Ordering::SeqCst);
        if *dir {
            rustix::mount::mount(
                c"tmpfs",
                path.as_c_str(),
                c"tmpfs",
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                c"mode=555,size=4k,nr_inodes=1",
            )?;
            continue;
        }
        let Some(empty) = &empty else {
            return Err(std::io::Error::from_raw_os_error(libc::EBADF));
        };
        let mask = clone_tree(empty, c"", true)?;
        read_only(&mask, c"", libc::AT_EMPTY_PATH as libc::c_uint)?;
        place(&mask, path)?;
    }
    Ok(())
}
