//! `revl-powercut`: a FUSE filesystem that simulates power loss, for crash
//! tests (modelled on LazyFS, as used by Jepsen).
//!
//! # Durability model
//!
//! The filesystem lives in memory. Every inode has two states:
//!
//! * **current** — what processes see through the mount;
//! * **durable** — what would survive a power cut.
//!
//! Only two requests make anything durable:
//!
//! * **`fsync(fd)` / `fdatasync(fd)` on a file** (FUSE `FSYNC`; both are
//!   treated as a full fsync) copies that inode's current data *and*
//!   attributes (size, mode, owner, times) to its durable state. It does
//!   **not** make the file's name durable.
//! * **`fsync(dirfd)` on a directory** (FUSE `FSYNCDIR`) copies that
//!   directory's current entry list (name → inode) and its attributes to its
//!   durable state. It does **not** make the contents of the children
//!   durable.
//!
//! Consequently `create`, `mknod`, `mkdir`, `symlink`, `link`, `unlink`,
//! `rmdir` and `rename` change only the current entries of the directories
//! involved until those directories are fsynced; a rename across two
//! directories becomes durable per directory as each is fsynced (after a cut
//! the inode may appear under both names or under neither — strict POSIX,
//! intended). A newly created inode's durable state is its state at creation
//! (empty file, empty directory; a symlink's target is durable at creation),
//! so "file fsynced, directory not" loses the file, and "directory fsynced,
//! file not" keeps an empty file. `O_SYNC`/`O_DSYNC` writes are durable
//! because the kernel turns them into an `FSYNC` request.
//!
//! **`sync(2)`, `syncfs(2)` and `sync -f` make nothing durable here**: FUSE
//! never forwards them to the filesystem. Nor does `close(2)` (a `FLUSH`) or
//! `msync` (its writes arrive as ordinary `WRITE`s; only a following `fsync`
//! counts).
//!
//! Inodes are never freed (test trees are small); a durable entry may point
//! at an inode that the current tree has unlinked. On [`Disk::power_cycle`]
//! every inode's current state is replaced by its durable state and link
//! counts are recomputed from the durable directory graph.
//!
//! # Cut points
//!
//! Every *mutating* request — `WRITE`, `SETATTR` (truncate, chmod, chown,
//! utimes), `CREATE`, `MKNOD`, `MKDIR`, `UNLINK`, `RMDIR`, `SYMLINK`, `LINK`,
//! `RENAME`, `FSYNC`, `FSYNCDIR`, `FALLOCATE` — increments an operation
//! counter ([`Disk::ops`]), whether it succeeds or fails. Note that one
//! `write(2)` larger than the kernel's maximum request size (1 MiB by
//! default) becomes several `WRITE` requests, and that the kernel itself may
//! add requests (e.g. `open(O_TRUNC)` of an existing file is an `OPEN`
//! followed by a `SETATTR`).
//!
//! [`Disk::arm_cut_after`]`(n)` arms a cut: once the n-th further mutating
//! request has been applied (including its durability effect if it is an
//! fsync), the durable state is frozen and **that request and every later
//! request, mutating or not, block in the handler without a reply**. The
//! process that issued request n therefore never learns whether it
//! succeeded — as with a real power cut in the middle of a syscall.
//!
//! A process whose request was read by the filesystem cannot be killed
//! before the reply comes (the kernel waits uninterruptibly), so a harness
//! does:
//!
//! 1. [`Disk::wait_cut`] — notice the cut;
//! 2. `SIGKILL` the processes under test;
//! 3. [`Disk::release`] — blocked and later requests fail with `EIO` (the
//!    killed processes die without running user code again); reap them;
//! 4. unmount ([`Mounted::unmount`] or drop), [`Disk::power_cycle`], mount
//!    again (fresh kernel caches) at the same mountpoint.
//!
//! Steps 3–4 are [`Mounted::cut_and_remount`]. **Between the cut and
//! `release()` the harness itself must not touch the mount** (not even
//! `stat`): it would block too.
//!
//! ```no_run
//! use std::time::Duration;
//! # fn main() -> std::io::Result<()> {
//! let dir = std::path::Path::new("/tmp/mnt");
//! let disk = revl_powercut::Disk::new();
//! let mnt = disk.mount(dir)?;
//! // ... populate through `dir`, then make it the durable baseline:
//! disk.sync_all();
//! disk.arm_cut_after(7);
//! let mut child = std::process::Command::new("/path/to/program").spawn()?;
//! if disk.wait_cut(Duration::from_secs(10)) {
//!     child.kill()?; // SIGKILL; the child stays blocked until release()
//! }
//! disk.release();
//! child.wait()?;
//! let mnt = mnt.cut_and_remount()?; // what survived the cut
//! # drop(mnt); Ok(()) }
//! ```
//!
//! # Mounting
//!
//! The mount uses `fuser`'s pure-Rust path: as root (or with
//! `CAP_SYS_ADMIN`) it calls `mount(2)` on `/dev/fuse` directly, so neither
//! libfuse nor `fusermount3` is needed. Options: `default_permissions` (the
//! kernel checks modes), `allow_other`, no writeback cache (every write
//! reaches the layer). File locks (`flock`, `fcntl`) are left to the
//! kernel's local emulation. Extended attributes are unsupported (`ENOSYS`,
//! which the kernel reports as `EOPNOTSUPP`); `copy_file_range` answers
//! `ENOSYS` so the kernel falls back to reads and writes; `fallocate`
//! supports mode 0 and `FALLOC_FL_KEEP_SIZE` only.
//!
//! Unmounting is a lazy detach (`umount2(MNT_DETACH)`), so it works while
//! files are still open; a session that is still serving a detached mount
//! answers `EIO` to everything and can never change the disk again.
//! Dropping a [`Mounted`] (also while panicking) unmounts.
#![forbid(unsafe_code)]

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, Config, MountOption, Session, SessionACL};

mod fuse;
mod tree;

use tree::Tree;

/// How long unmounting waits for the session thread to end before leaving
/// it behind (it then only answers EIO for a detached mount).
const JOIN_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct State {
    pub(crate) tree: Tree,
    /// Mutating requests applied so far (monotonic across power cycles).
    pub(crate) ops: u64,
    /// Cut once `ops` reaches this value.
    pub(crate) arm: Option<u64>,
    /// The durable state is frozen; requests block.
    pub(crate) cut: bool,
    /// Requests fail with EIO instead of blocking.
    pub(crate) released: bool,
    /// Generation of the live mount; bumped on mount and on unmount.
    pub(crate) gen: u64,
    pub(crate) mounted: bool,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) cv: Condvar,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// A simulated disk: the in-memory filesystem plus its power-cut controls.
/// Cloning gives another handle to the same disk.
#[derive(Clone)]
pub struct Disk {
    shared: Arc<Shared>,
}

impl Default for Disk {
    fn default() -> Self {
        Disk::new()
    }
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Disk")
            .field("ops", &st.ops)
            .field("arm", &st.arm)
            .field("cut", &st.cut)
            .field("released", &st.released)
            .field("mounted", &st.mounted)
            .finish()
    }
}

impl Disk {
    /// An empty disk: just a root directory (mode 0755, owned by root),
    /// durable.
    pub fn new() -> Disk {
        Disk {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    tree: Tree::new(),
                    ops: 0,
                    arm: None,
                    cut: false,
                    released: false,
                    gen: 0,
                    mounted: false,
                }),
                cv: Condvar::new(),
            }),
        }
    }

    /// Mount the disk at `dir` (an existing directory) and serve it from a
    /// background thread. Needs `/dev/fuse` and root (or `CAP_SYS_ADMIN`).
    /// One mount per disk at a time; refused after a cut until
    /// [`Disk::power_cycle`].
    pub fn mount(&self, dir: &Path) -> io::Result<Mounted> {
        let dir = dir.canonicalize().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("revl-powercut: mountpoint {}: {e}", dir.display()),
            )
        })?;
        if let Err(e) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
        {
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "revl-powercut: cannot open /dev/fuse ({e}); the power-cut layer needs the \
                     FUSE device and root or CAP_SYS_ADMIN (e.g. `docker run --device /dev/fuse \
                     --cap-add SYS_ADMIN`)"
                ),
            ));
        }
        let gen = {
            let mut st = self.shared.lock();
            if st.mounted {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "revl-powercut: this disk is already mounted",
                ));
            }
            if st.cut || st.released {
                return Err(io::Error::other(
                    "revl-powercut: the disk was cut; call power_cycle() before mounting",
                ));
            }
            st.gen += 1;
            st.mounted = true;
            st.gen
        };
        let fs = fuse::PowerFs {
            shared: Arc::clone(&self.shared),
            gen,
        };
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("revl-powercut".into()),
            MountOption::Subtype("revl-powercut".into()),
            MountOption::DefaultPermissions,
        ];
        config.acl = SessionACL::All;
        let session = Session::new(fs, &dir, &config).and_then(Session::spawn);
        match session {
            Ok(session) => Ok(Mounted {
                disk: self.clone(),
                dir,
                gen,
                session: Some(session),
            }),
            Err(e) => {
                let mut st = self.shared.lock();
                if st.gen == gen {
                    st.gen += 1;
                    st.mounted = false;
                }
                Err(io::Error::new(
                    e.kind(),
                    format!(
                        "revl-powercut: cannot mount FUSE at {}: {e} (needs root or \
                         CAP_SYS_ADMIN; fusermount3 is only tried as a fallback)",
                        dir.display()
                    ),
                ))
            }
        }
    }

    /// Arm a cut after the `n`-th further mutating request (see the crate
    /// docs); `n == 0` cuts now. Replaces an earlier arming.
    pub fn arm_cut_after(&self, n: u64) {
        if n == 0 {
            self.cut_now();
            return;
        }
        let mut st = self.shared.lock();
        st.arm = Some(st.ops + n);
    }

    /// Cancel an armed cut that has not happened yet.
    pub fn disarm(&self) {
        self.shared.lock().arm = None;
    }

    /// Cut now: freeze the durable state; requests block from now on.
    pub fn cut_now(&self) {
        let mut st = self.shared.lock();
        st.arm = None;
        st.cut = true;
        self.shared.cv.notify_all();
    }

    /// Whether the cut has happened (and no power cycle since).
    pub fn cut_happened(&self) -> bool {
        self.shared.lock().cut
    }

    /// Wait up to `timeout` for the cut; true if it happened.
    pub fn wait_cut(&self, timeout: Duration) -> bool {
        let st = self.shared.lock();
        let (st, _) = self
            .shared
            .cv
            .wait_timeout_while(st, timeout, |st| !st.cut)
            .unwrap_or_else(|poison| poison.into_inner());
        st.cut
    }

    /// Let blocked requests go: they, and every request until
    /// [`Disk::power_cycle`], fail with `EIO`. Implies a cut if none
    /// happened yet (the durable state stays frozen).
    pub fn release(&self) {
        let mut st = self.shared.lock();
        st.arm = None;
        st.cut = true;
        st.released = true;
        self.shared.cv.notify_all();
    }

    /// The power cycle: every inode's and directory's current state becomes
    /// its durable state (what was not durable is dropped); clears the cut
    /// and the release. The disk must be unmounted.
    pub fn power_cycle(&self) -> io::Result<()> {
        let mut st = self.shared.lock();
        if st.mounted {
            return Err(io::Error::other(
                "revl-powercut: power_cycle() needs the disk unmounted",
            ));
        }
        st.tree.power_cycle();
        st.arm = None;
        st.cut = false;
        st.released = false;
        self.shared.cv.notify_all();
        Ok(())
    }

    /// Make everything durable, like a clean shutdown (for test setup).
    /// Does nothing once the cut happened: the durable state is frozen.
    pub fn sync_all(&self) {
        let mut st = self.shared.lock();
        if !st.cut {
            st.tree.sync_all();
        }
    }

    /// Mutating requests served so far (monotonic, across power cycles).
    pub fn ops(&self) -> u64 {
        self.shared.lock().ops
    }
}

/// A live mount of a [`Disk`]. Dropping it unmounts (lazily, so open files
/// do not prevent it, and without hanging when requests are blocked).
pub struct Mounted {
    disk: Disk,
    dir: PathBuf,
    gen: u64,
    session: Option<BackgroundSession>,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mounted")
            .field("dir", &self.dir)
            .field("gen", &self.gen)
            .finish()
    }
}

impl Mounted {
    /// The mountpoint (canonicalized).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The disk behind this mount.
    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    /// Unmount. Requests still blocked on this mount fail with `EIO`.
    pub fn unmount(mut self) -> io::Result<()> {
        self.shutdown()
    }

    /// The whole power-cut cycle: cut now if the armed cut has not happened,
    /// [`Disk::release`], unmount, [`Disk::power_cycle`], mount again at the
    /// same place. Kill (and preferably reap) the processes under test
    /// before calling this.
    pub fn cut_and_remount(mut self) -> io::Result<Mounted> {
        let disk = self.disk.clone();
        let dir = self.dir.clone();
        disk.release();
        self.shutdown()?;
        disk.power_cycle()?;
        disk.mount(&dir)
    }

    fn shutdown(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        {
            // Fence this session: its blocked and future requests get EIO.
            let mut st = self.disk.shared.lock();
            if st.gen == self.gen {
                st.gen += 1;
                st.mounted = false;
            }
            self.disk.shared.cv.notify_all();
        }
        let res = detach(&self.dir);
        let deadline = Instant::now() + JOIN_TIMEOUT;
        while !session.guard.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if session.guard.is_finished() {
            // The thread's own result (e.g. ENODEV at the end) is not ours.
            let _ = session.join();
        } else {
            // Files are still open on the detached mount; the thread keeps
            // answering EIO until they are closed. Leave it behind.
            drop(session);
        }
        res
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// `umount2(dir, MNT_DETACH)`; "not mounted" counts as success.
fn detach(dir: &Path) -> io::Result<()> {
    let err: io::Error = match rustix::mount::unmount(dir, rustix::mount::UnmountFlags::DETACH) {
        Ok(()) | Err(rustix::io::Errno::INVAL) => return Ok(()),
        Err(e) => e.into(),
    };
    Err(io::Error::new(
        err.kind(),
        format!("revl-powercut: unmount {}: {err}", dir.display()),
    ))
}
