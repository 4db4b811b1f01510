//! Layered workspaces (docs/architecture.md, "Layered workspaces"): where neither a btrfs
//! snapshot nor a reflink copy is to be had, a parallel branch's DIR is an overlay of a
//! read-only lower layer, the parent's workspace frozen at the fork point and shared by
//! every branch made from that point, and the branch's own upper layer. Both are kept in
//! the store:
//!
//! ```text
//! <store>/layers/.lock                       held while layers are made, mounted or removed
//! <store>/layers/lower/<id>/tree/            a frozen point: the parent's workspace, copied once
//! <store>/layers/lower/<id>/point.json       which point it is; written last (no file: unfinished)
//! <store>/layers/lower/<id>/stat-index       its files' digests known by stat (a cache)
//! <store>/layers/branch/<branch>/upper/      the branch's own changes
//! <store>/layers/branch/<branch>/work/       the overlay's scratch directory
//! <store>/layers/branch/<branch>/mount.json  {lower, dir, driver}: what to mount where
//! ```
//!
//! The mount is the kernel's overlayfs where revl may mount it (as root), else
//! fuse-overlayfs (a FUSE daemon, unprivileged); where neither mounts, the fork copies and
//! says why. A lower layer no branch names any more is collected by `abort --remove` and
//! `gc --apply`.

use crate::error::{Code, Error, Result};
use crate::store::Store;
use crate::util::new_id;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What mounts a layered workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Driver {
    /// The kernel's overlay filesystem (needs the right to mount: root).
    #[serde(rename = "overlayfs")]
    Kernel,
    /// fuse-overlayfs, a FUSE daemon per branch (any user with /dev/fuse).
    #[serde(rename = "fuse-overlayfs")]
    Fuse,
}

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::Kernel => "overlayfs",
            Driver::Fuse => "fuse-overlayfs",
        }
    }
}

/// How a parallel branch's workspace was made (the report's `clone`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Made {
    /// One btrfs subvolume snapshot.
    Snapshot,
    /// Every file cloned by reflink (blocks shared until written).
    Reflink,
    /// A copy of every file. `fallback` says why layers were not used, where they were tried.
    Copy {
        bytes_copied: u64,
        fallback: Option<String>,
    },
    /// An overlay of the frozen point `lower` and the branch's own upper layer.
    Layers {
        driver: Driver,
        lower: String,
        /// The lower layer existed (another branch was made from the same point): nothing
        /// was copied.
        shared: bool,
        /// What making the lower layer copied (0 when shared).
        bytes_copied: u64,
    },
}

impl Made {
    /// The report's `clone`: `snapshot`, `reflink`, `copy` or `layers`.
    pub fn name(&self) -> &'static str {
        match self {
            Made::Snapshot => "snapshot",
            Made::Reflink => "reflink",
            Made::Copy { .. } => "copy",
            Made::Layers { .. } => "layers",
        }
    }

    pub fn bytes_copied(&self) -> u64 {
        match self {
            Made::Snapshot | Made::Reflink => 0,
            Made::Copy { bytes_copied, .. } | Made::Layers { bytes_copied, .. } => *bytes_copied,
        }
    }
}

/// Which point of the parent a lower layer holds: the parent, how many of its WAL records
/// were written when it was frozen, and the drift the fork found then. A later fork reuses
/// it only while the parent wrote nothing since that changes its workspace (see
/// [`unchanged_since`]) and finds the same drift.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Point {
    pub parent: String,
    pub records: usize,
    pub drift: String,
    /// Where the parent's WAL ended once the freezing fork's `fork-begin` was written: a
    /// later fork reads only the records after it to tell whether the workspace changed
    /// since (absent in a layer frozen before it was kept: the whole WAL is read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<WalEnd>,
}

/// A WAL's end: its byte length, last seq and record count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WalEnd {
    pub len: u64,
    pub seq: u64,
    pub records: usize,
}

/// What `mount.json` says about a branch's layered workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mounted {
    pub lower: String,
    pub dir: PathBuf,
    pub driver: Driver,
}

/// What taking a layered workspace down did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TakenDown {
    /// Lower layers removed because no branch names them any more.
    pub lowers_collected: Vec<String>,
}

/// Records a parent may write after a point without changing its workspace: the fork
/// bookkeeping of parallel forks, `files-synced`, model decisions.
pub fn unchanged_since(records: &[crate::wal::Record]) -> bool {
    use crate::wal::Record as R;
    records.iter().all(|r| match r {
        R::ForkBegin { into, .. } => into.is_some(),
        R::ForkPending { .. }
        | R::ForkComplete { .. }
        | R::ForkAbandoned { .. }
        | R::FilesSynced { .. }
        | R::ModelDecision { .. } => true,
        _ => false,
    })
}

fn io(p: &Path, e: std::io::Error) -> Error {
    Error::io(p.display(), e)
}

/// A store's layers directory.
pub struct Layers {
    root: PathBuf,
    wait: std::time::Duration,
}

impl Store {
    /// The store's layered workspaces.
    pub fn layers(&self) -> Layers {
        Layers {
            root: self.root().join("layers"),
            wait: self.lock_wait,
        }
    }
}

impl Layers {
    /// Held while layers are made, mounted or removed, so a lower layer is never collected
    /// while a fork is about to use it.
    pub fn lock(&self) -> Result<crate::storage::Lease> {
        std::fs::create_dir_all(&self.root).map_err(|e| io(&self.root, e))?;
        let p = self.root.join(".lock");
        crate::storage::lease_file(&p, self.wait)
            .map_err(|e| io(&p, e))?
            .ok_or_else(|| crate::storage::busy("the store's layers", self.wait))
    }

    fn lower(&self, id: &str) -> PathBuf {
        self.root.join("lower").join(id)
    }

    /// Lower layer `id`'s tree: the parent's workspace as it was frozen.
    pub fn tree(&self, id: &str) -> PathBuf {
        self.lower(id).join("tree")
    }

    /// Where the digests of lower layer `id`'s files, as its branches' DIRs show them, are
    /// kept by stat (crate::statindex; removed with the layer).
    pub fn stat_index(&self, id: &str) -> PathBuf {
        self.lower(id).join("stat-index")
    }

    /// Branch `id`'s upper layer: what its DIR changed over the lower layer.
    pub fn upper(&self, id: &str) -> PathBuf {
        self.branch(id).join("upper")
    }

    fn branch(&self, id: &str) -> PathBuf {
        self.root.join("branch").join(id)
    }

    /// The lower layers that hold a point of `parent` (newest last); unfinished ones and
    /// unreadable `point.json` files are passed over.
    pub fn points_of(&self, parent: &str) -> Vec<(String, Point)> {
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(self.root.join("lower")) else {
            return out;
        };
        for e in rd.flatten() {
            let Some(id) = e.file_name().to_str().map(String::from) else {
                continue;
            };
            let p = std::fs::read(e.path().join("point.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Point>(&b).ok());
            if let Some(p) = p.filter(|p| p.parent == parent) {
                out.push((id, p));
            }
        }
        out.sort_by_key(|(_, p)| p.records);
        out
    }

    /// Freeze `ws` as a new lower layer for `point` (a copy; the first branch from a point
    /// pays it once), with the digest of every file it copied in the layer's stat index
    /// (hashed as it was written), so no scan of the layer reads its files back. Returns its
    /// id and the bytes copied.
    pub fn freeze(&self, ws: &Path, point: &Point) -> Result<(String, u64)> {
        let id = new_id();
        let dir = self.lower(&id);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let tree = dir.join("tree");
        let index = crate::statindex::StatIndex::frozen(&self.stat_index(&id));
        let r = crate::clone::freeze_tree(ws, &tree, &index);
        let cloned = match r {
            Ok(c) => c,
            Err(e) => {
                let _ = remove_tree(&dir);
                return Err(e);
            }
        };
        // A cache: where it cannot be written, the first scan reads the files.
        let _ = index.save();
        let json = serde_json::to_vec(point).expect("a point serializes");
        crate::util::write_durable(&dir.join("point.json"), &json).map_err(|e| io(&dir, e))?;
        Ok((id, cloned.bytes_copied))
    }

    /// Make branch `branch`'s upper layer over lower `lower` and mount the two at `dir`
    /// (an existing empty directory). `mount.json` is durable before the mount, so a crash
    /// after it leaves what a repair or gc can find and take down.
    pub fn mount_new(&self, branch: &str, lower: &str, dir: &Path) -> Result<Driver> {
        let b = self.branch(branch);
        for d in [b.join("upper"), b.join("work")] {
            std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
        }
        // The overlay's root takes the upper layer's root mode: the lower's.
        let tree = self.lower(lower).join("tree");
        let m = std::fs::metadata(&tree).map_err(|e| io(&tree, e))?;
        std::fs::set_permissions(b.join("upper"), m.permissions())
            .map_err(|e| io(&b.join("upper"), e))?;
        let mut entry = Mounted {
            lower: lower.into(),
            dir: dir.to_path_buf(),
            driver: Driver::Kernel,
        };
        self.write_entry(branch, &entry)?;
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
            // DIR's entry is durable before the branch that names it.
            if let Some(parent) = dir.parent() {
                std::fs::File::open(parent)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| io(parent, e))?;
            }
        }
        match self.mount(branch, &entry) {
            Ok(driver) => {
                if driver != entry.driver {
                    entry.driver = driver;
                    self.write_entry(branch, &entry)?;
                }
                Ok(driver)
            }
            Err(why) => {
                let _ = remove_tree(&b);
                Err(Error::new(Code::Io, why, "the fork copies instead"))
            }
        }
    }

    /// Stamp that the fork finished writing `branch`'s DIR (its rewind to step k included):
    /// what the upper layer holds up to this stamp, a fork can make again.
    pub fn mark_forked(&self, branch: &str) -> Result<()> {
        let p = self.branch(branch).join("forked");
        crate::util::write_durable(&p, b"").map_err(|e| io(&p, e))
    }

    /// Whether anything in `branch`'s upper layer changed after its fork finished (an entry
    /// whose change time is later than the stamp's, on the same filesystem's clock): bytes
    /// the branch's own steps or a hand wrote, which taking the layers down would destroy.
    /// `true` where there is no stamp or the upper layer cannot be read (nothing is proven).
    pub fn written_since_fork(&self, branch: &str) -> bool {
        use std::os::unix::fs::MetadataExt;
        let b = self.branch(branch);
        let Ok(stamp) = std::fs::symlink_metadata(b.join("forked")) else {
            return true;
        };
        let at = (stamp.ctime(), stamp.ctime_nsec());
        let mut stack = vec![b.join("upper")];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                return true;
            };
            for e in rd {
                let Ok(m) = e.and_then(|e| {
                    let p = e.path();
                    std::fs::symlink_metadata(&p).map(|m| (p, m))
                }) else {
                    return true;
                };
                if (m.1.ctime(), m.1.ctime_nsec()) > at {
                    return true;
                }
                if m.1.is_dir() {
                    stack.push(m.0);
                }
            }
        }
        false
    }

    fn write_entry(&self, branch: &str, m: &Mounted) -> Result<()> {
        let p = self.branch(branch).join("mount.json");
        let json = serde_json::to_vec(m).expect("an entry serializes");
        crate::util::write_durable(&p, &json).map_err(|e| io(&p, e))
    }

    /// The layered workspace of `branch`, if it has one. A `mount.json` that cannot be read
    /// is refused with what to do.
    pub fn entry(&self, branch: &str) -> Result<Option<Mounted>> {
        let p = self.branch(branch).join("mount.json");
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&p, e)),
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::new(
                Code::CorruptWal,
                format!("{} cannot be read: {e}", p.display()),
                "the branch's layered workspace cannot be mounted; restore the file, or abort the branch and remove its directory",
            )
        })
    }

    /// Mount the two layers at `m.dir`: the kernel's overlay, else fuse-overlayfs. `Err`
    /// says why neither mounted.
    ///
    /// fuse-overlayfs cannot rename a directory of its lower layer (`EXDEV`): the
    /// workspace's removal of a tree then removes it where it stands (workspace.rs).
    fn mount(&self, branch: &str, m: &Mounted) -> std::result::Result<Driver, String> {
        let b = self.branch(branch);
        let (lower, upper, work) = (
            self.lower(&m.lower).join("tree"),
            b.join("upper"),
            b.join("work"),
        );
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            crate::sandbox::overlay_path(&lower),
            crate::sandbox::overlay_path(&upper),
            crate::sandbox::overlay_path(&work)
        );
        // Directories renamed inside the branch (a delete moves its target aside first)
        // need redirect_dir; metacopy and index stay off (plain copy-up).
        let kernel =
            std::ffi::CString::new(format!("{opts},redirect_dir=on,index=off,metacopy=off"))
                .map_err(|e| e.to_string())
                .and_then(|c| {
                    revl_sandbox::layers::overlay(&m.dir, &c)
                        .map_err(|e| format!("kernel overlayfs: {e}"))
                });
        let kernel_why = match kernel {
            Ok(()) => return Ok(Driver::Kernel),
            Err(e) => e,
        };
        let fuse = std::process::Command::new("fuse-overlayfs")
            .arg("-o")
            .arg(&opts)
            .arg(&m.dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output();
        match fuse {
            Ok(o) if o.status.success() => Ok(Driver::Fuse),
            Ok(o) => Err(format!(
                "neither could mount the layers ({kernel_why}; fuse-overlayfs: {})",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!(
                "neither could mount the layers ({kernel_why}; fuse-overlayfs: {e}; install the fuse-overlayfs package)"
            )),
        }
    }

    /// Mount `branch`'s layered workspace again where it is not mounted (after a reboot, an
    /// unmount, or a FUSE daemon that died); nothing for a branch without layers.
    pub fn ensure_mounted(&self, branch: &str) -> Result<()> {
        let Some(mut m) = self.entry(branch)? else {
            return Ok(());
        };
        match mount_state(&m.dir) {
            MountState::Mounted => return Ok(()),
            MountState::Stale => {
                let _ = unmount(&m.dir, true);
            }
            MountState::Absent => {}
        }
        let _lock = self.lock()?;
        if matches!(mount_state(&m.dir), MountState::Mounted) {
            return Ok(());
        }
        if !self.lower(&m.lower).join("point.json").is_file() {
            return Err(Error::new(
                Code::Io,
                format!(
                    "the layered workspace {} cannot be mounted again: its lower layer {} is not in the store",
                    m.dir.display(),
                    m.lower
                ),
                "abort the branch (revl abort SESSION --remove); its upper layer is kept until then",
            ));
        }
        std::fs::create_dir_all(&m.dir).map_err(|e| io(&m.dir, e))?;
        let driver = self.mount(branch, &m).map_err(|why| {
            Error::new(
                Code::Io,
                format!(
                    "the layered workspace {} cannot be mounted again: {why}",
                    m.dir.display()
                ),
                "run revl as the user that made the branch (root mounts overlayfs), or install fuse-overlayfs",
            )
        })?;
        if driver != m.driver {
            m.driver = driver;
            self.write_entry(branch, &m)?;
        }
        Ok(())
    }

    /// Take `branch`'s layered workspace down: unmount it, remove its upper layer, remove
    /// `dir` itself when `remove_dir` (else leave it as the empty directory it was), and
    /// collect the lower layers no branch names any more. Nothing for a branch without
    /// layers (`Ok(None)`).
    pub fn take_down(&self, branch: &str, remove_dir: bool) -> Result<Option<TakenDown>> {
        let _lock = self.lock()?;
        let Some(m) = self.entry(branch)? else {
            return Ok(None);
        };
        if !matches!(mount_state(&m.dir), MountState::Absent) {
            unmount(&m.dir, false).map_err(|e| {
                Error::new(
                    Code::Io,
                    format!(
                        "cannot unmount the layered workspace {}: {e}",
                        m.dir.display()
                    ),
                    "stop the processes that use it (fuser -m DIR), then run the command again",
                )
            })?;
        }
        if remove_dir {
            match std::fs::remove_dir(&m.dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&m.dir, e)),
            }
        }
        remove_tree(&self.branch(branch))?;
        Ok(Some(TakenDown {
            lowers_collected: self.collect_unused()?,
        }))
    }

    /// The branches that have a layered workspace.
    pub fn branches(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(self.root.join("branch")) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .collect()
    }

    /// Remove every lower layer no branch names, and unfinished ones (no `point.json`).
    /// Call with the lock held.
    pub(crate) fn collect_unused(&self) -> Result<Vec<String>> {
        let mut used = std::collections::BTreeSet::new();
        for b in self.branches() {
            match self.entry(&b) {
                Ok(Some(m)) => {
                    used.insert(m.lower);
                }
                // A branch directory without a readable entry (a crash before mount.json,
                // or a damaged one): it names nothing this can prove, so nothing goes.
                Ok(None) => {}
                Err(_) => return Ok(Vec::new()),
            }
        }
        let mut gone = Vec::new();
        let Ok(rd) = std::fs::read_dir(self.root.join("lower")) else {
            return Ok(gone);
        };
        for e in rd.flatten() {
            let Some(id) = e.file_name().to_str().map(String::from) else {
                continue;
            };
            if !used.contains(&id) {
                remove_tree(&e.path())?;
                gone.push(id);
            }
        }
        Ok(gone)
    }

    /// `gc`'s part: the layered workspaces of branches that are aborted or no longer in
    /// the store (`doomed`), taken down (their directories removed where empty), and the
    /// lower layers no branch names. With `apply` false, only what would go.
    pub fn gc(&self, apply: bool, doomed: impl Fn(&str) -> bool) -> Result<LayersGc> {
        let mut out = LayersGc::default();
        let branches: Vec<String> = self.branches().into_iter().filter(|b| doomed(b)).collect();
        for b in &branches {
            if let Ok(Some(m)) = self.entry(b) {
                out.workspaces.push(m.dir.display().to_string());
            }
        }
        if !apply {
            let mut used = std::collections::BTreeSet::new();
            for b in self.branches().iter().filter(|b| !branches.contains(b)) {
                if let Ok(Some(m)) = self.entry(b) {
                    used.insert(m.lower);
                }
            }
            if let Ok(rd) = std::fs::read_dir(self.root.join("lower")) {
                for e in rd.flatten() {
                    if let Some(id) = e.file_name().to_str().filter(|i| !used.contains(*i)) {
                        out.lowers.push(id.to_string());
                    }
                }
            }
            return Ok(out);
        }
        for b in &branches {
            // The directory goes only where it is empty once unmounted (revl made it).
            let t = self
                .take_down(b, true)
                .or_else(|_| self.take_down(b, false))?;
            out.lowers
                .extend(t.into_iter().flat_map(|t| t.lowers_collected));
        }
        let _lock = self.lock()?;
        out.lowers.extend(self.collect_unused()?);
        out.applied = true;
        Ok(out)
    }
}

/// `gc`'s account of layered workspaces.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LayersGc {
    /// The directories of aborted (or vanished) branches' layered workspaces taken down.
    pub workspaces: Vec<String>,
    /// Lower layers no branch names.
    pub lowers: Vec<String>,
    /// Aborted branches' layered workspaces left as they are, each with why: their upper
    /// layer was written after the fork (by hand, or by the branch's own steps), and taking
    /// it down would destroy those bytes; `abort --remove` removes one when that is what the
    /// user wants.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
    pub applied: bool,
}

enum MountState {
    Mounted,
    /// A FUSE mount whose daemon is gone ("transport endpoint is not connected").
    Stale,
    Absent,
}

/// Is an overlay (kernel or FUSE) mounted at `dir`? Its filesystem type, and a device that
/// differs from its parent's.
fn mount_state(dir: &Path) -> MountState {
    use std::os::unix::fs::MetadataExt;
    const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    let st = match rustix::fs::statfs(dir) {
        Ok(s) => s,
        Err(rustix::io::Errno::NOTCONN) => return MountState::Stale,
        Err(_) => return MountState::Absent,
    };
    // `f_type`'s integer type differs between targets.
    #[allow(clippy::unnecessary_cast)]
    let t = st.f_type as i64;
    let parent = dir.parent().unwrap_or(Path::new("/"));
    let other_dev = match (std::fs::metadata(dir), std::fs::metadata(parent)) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    };
    if (t == OVERLAYFS_SUPER_MAGIC || t == FUSE_SUPER_MAGIC) && other_dev {
        MountState::Mounted
    } else {
        MountState::Absent
    }
}

/// Unmount `dir`: the system call (root), else fusermount (a user's FUSE mount); a busy
/// mount is refused unless `lazy`.
fn unmount(dir: &Path, lazy: bool) -> std::io::Result<()> {
    match revl_sandbox::layers::unmount(dir, lazy) {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() != Some(libc::EPERM) => return Err(e),
        Err(_) => {}
    }
    let mut last = std::io::Error::other("fusermount3 and fusermount are not installed");
    for tool in ["fusermount3", "fusermount"] {
        let mut c = std::process::Command::new(tool);
        c.arg(if lazy { "-uz" } else { "-u" }).arg(dir);
        match c.output() {
            Ok(o) if o.status.success() => return Ok(()),
            Ok(o) => {
                last = std::io::Error::other(String::from_utf8_lossy(&o.stderr).trim().to_string())
            }
            Err(_) => {}
        }
    }
    Err(last)
}

/// Remove a tree revl made in the store (read-only directories opened up first).
fn remove_tree(p: &Path) -> Result<()> {
    crate::workspace::remove_any(p)
}
