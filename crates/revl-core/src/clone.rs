//! A parallel fork's new workspace (docs/architecture.md, "Parallel forks and comparing
//! alternatives"): the parent's workspace cloned the cheapest correct way the filesystem
//! offers. A file is cloned by reflink (`FICLONE`: XFS, btrfs, bcachefs share the blocks
//! until either side writes) where the filesystem supports it, else copied
//! (`copy_file_range` through `std::fs::copy`). Directories keep their modes, symlinks
//! their targets; FIFOs, sockets and devices are not cloned (revl never witnesses them).
//! Where the workspace is a btrfs subvolume and DIR's parent is on the same btrfs, one
//! subvolume snapshot replaces all of it (constant time, whatever the tree's size). The
//! result says which way was taken and how many bytes were copied.

use crate::error::{Error, Result};
use crate::failpoint::Failpoints;
use crate::statindex::StatIndex;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// How a workspace was cloned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cloned {
    /// `"snapshot"` (a btrfs subvolume snapshot), `"reflink"` when every file was cloned by
    /// reflink, else `"copy"`.
    pub how: &'static str,
    /// Bytes copied (not shared by reflink).
    pub bytes_copied: u64,
}

fn io(p: &Path, e: std::io::Error) -> Error {
    Error::io(p.display(), e)
}

/// Clone the tree at `src` into `dst` (absent, or an empty directory). An empty file named
/// `marker`, if given, is made in `dst` first (a snapshot: right after), so that a repair
/// can tell `dst` is revl's to remove; the caller removes it when the branch exists.
pub fn clone_tree(src: &Path, dst: &Path, fp: &Failpoints, marker: Option<&str>) -> Result<Cloned> {
    let mark = |d: &Path| match marker {
        Some(m) => fs::File::create(d.join(m)).map(drop).map_err(|e| io(d, e)),
        None => Ok(()),
    };
    #[cfg(target_os = "linux")]
    if btrfs::snapshot(src, dst) {
        mark(dst)?;
        fp.point("fork.mid-clone");
        crate::util::sync_tree(dst).map_err(|e| io(dst, e))?;
        return Ok(Cloned {
            how: "snapshot",
            bytes_copied: 0,
        });
    }
    let mut st = Walk::new(fp, None);
    st.tree(src, dst, mark)?;
    Ok(Cloned {
        how: if st.copied == 0 { "reflink" } else { "copy" },
        bytes_copied: st.bytes_copied,
    })
}

/// Copy the tree at `src` into `dst` (absent, or an empty directory) as [`clone_tree`]
/// copies it, for a layered fork's frozen lower layer (docs/architecture.md, "Layered
/// workspaces"): no snapshot or reflink is tried (layers are made where there is none), and
/// each regular file is hashed as its bytes are copied, its digest noted in `index` against
/// the copy's own stat ([`StatIndex::note_frozen`]). So the first scan of the new layer reads
/// none of its files back. A sparse file is copied hole for hole and left for a scan to read.
pub fn freeze_tree(src: &Path, dst: &Path, index: &StatIndex) -> Result<Cloned> {
    let fp = Failpoints::none();
    let mut st = Walk::new(&fp, Some((dst, index)));
    st.tree(src, dst, |_| Ok(()))?;
    Ok(Cloned {
        how: "copy",
        bytes_copied: st.bytes_copied,
    })
}

/// Copy the regular file open as `src` (whose `lstat` was `m`) to the new file `to`,
/// hashing the bytes as they are written: their digest. The copy gets `src`'s permission
/// bits.
fn copy_hashing(
    src: &mut fs::File,
    to: &Path,
    m: &fs::Metadata,
) -> std::io::Result<([u8; 32], u64)> {
    use std::io::{Read, Write};
    let mut dst = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; (m.len() as usize).clamp(1, 1 << 20)];
    let mut n = 0u64;
    loop {
        let got = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..got]);
        dst.write_all(&buf[..got])?;
        n += got as u64;
    }
    dst.set_permissions(m.permissions())?;
    Ok((*hasher.finalize().as_bytes(), n))
}

/// Can the filesystem share `src`'s blocks with a tree made at `dst` (absent, or an empty
/// directory)? A btrfs subvolume snapshot, or a reflink of a file of `src` into `dst`'s
/// filesystem (tried on one file, then removed). False: a clone would copy every byte.
pub fn shares(src: &Path, dst: &Path) -> bool {
    #[cfg(target_os = "linux")]
    if btrfs::can_snapshot(src, dst) {
        return true;
    }
    let Some(file) = first_file(src, &mut 0) else {
        return false;
    };
    let near = if dst.is_dir() {
        dst
    } else {
        match dst.parent() {
            Some(p) => p,
            None => return false,
        }
    };
    let probe = near.join(format!(".revl-reflink-probe-{}", crate::util::new_id()));
    let ok = (|| {
        let s = fs::File::open(&file).ok()?;
        let d = fs::File::create(&probe).ok()?;
        Some(rustix::fs::ioctl_ficlone(&d, &s).is_ok())
    })()
    .unwrap_or(false);
    let _ = fs::remove_file(&probe);
    ok
}

/// A non-empty regular file under `dir` (the first 10,000 entries looked at, at most).
fn first_file(dir: &Path, seen: &mut usize) -> Option<std::path::PathBuf> {
    for e in fs::read_dir(dir).ok()?.flatten() {
        *seen += 1;
        if *seen > 10_000 {
            return None;
        }
        let t = e.file_type().ok()?;
        if t.is_file() && e.metadata().is_ok_and(|m| m.len() > 0) {
            return Some(e.path());
        }
        if t.is_dir() {
            if let Some(f) = first_file(&e.path(), seen) {
                return Some(f);
            }
        }
    }
    None
}

struct Walk<'a> {
    /// Whether FICLONE works between these two trees (unknown until the first file).
    reflink_works: Option<bool>,
    reflinked: u64,
    copied: u64,
    bytes_copied: u64,
    fp: &'a Failpoints,
    files: u64,
    /// A freeze ([`freeze_tree`]): the copy's root, and where each copied file's digest is
    /// noted.
    noting: Option<(&'a Path, &'a StatIndex)>,
}

impl<'a> Walk<'a> {
    fn new(fp: &'a Failpoints, noting: Option<(&'a Path, &'a StatIndex)>) -> Self {
        Walk {
            // A freeze copies: layers are made where nothing shares blocks.
            reflink_works: noting.map(|_| false),
            reflinked: 0,
            copied: 0,
            bytes_copied: 0,
            fp,
            files: 0,
            noting,
        }
    }

    /// The whole tree: `dst` made if absent, `mark`ed, filled, given `src`'s mode, and
    /// durable before the branch that names it exists.
    fn tree(
        &mut self,
        src: &Path,
        dst: &Path,
        mark: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<()> {
        if !dst.exists() {
            fs::create_dir(dst).map_err(|e| io(dst, e))?;
        }
        mark(dst)?;
        self.dir(src, dst)?;
        let m = fs::metadata(src).map_err(|e| io(src, e))?;
        fs::set_permissions(dst, m.permissions()).map_err(|e| io(dst, e))?;
        crate::util::sync_tree(dst).map_err(|e| io(dst, e))
    }

    fn dir(&mut self, src: &Path, dst: &Path) -> Result<()> {
        let mut modes = Vec::new();
        for e in fs::read_dir(src).map_err(|e| io(src, e))? {
            let e = e.map_err(|e| io(src, e))?;
            let (from, to) = (e.path(), dst.join(e.file_name()));
            let m = fs::symlink_metadata(&from).map_err(|e| io(&from, e))?;
            let t = m.file_type();
            if t.is_dir() {
                fs::create_dir(&to).map_err(|e| io(&to, e))?;
                self.dir(&from, &to)?;
                modes.push((to, m.permissions().mode()));
            } else if t.is_symlink() {
                let target = fs::read_link(&from).map_err(|e| io(&from, e))?;
                std::os::unix::fs::symlink(target, &to).map_err(|e| io(&to, e))?;
            } else if t.is_file() {
                self.file(&from, &to, &m)?;
            }
        }
        // Modes after the content (a read-only directory is filled first).
        for (d, mode) in modes {
            fs::set_permissions(&d, fs::Permissions::from_mode(mode)).map_err(|e| io(&d, e))?;
        }
        Ok(())
    }

    fn file(&mut self, from: &Path, to: &Path, m: &fs::Metadata) -> Result<()> {
        let cloned = self.reflink_works != Some(false) && m.len() > 0 && {
            let src = fs::File::open(from).map_err(|e| io(from, e))?;
            let dst = fs::File::create(to).map_err(|e| io(to, e))?;
            let ok = rustix::fs::ioctl_ficlone(&dst, &src).is_ok();
            // The first file decides for the rest (one filesystem on each side).
            self.reflink_works.get_or_insert(ok);
            ok
        };
        // A file with holes (fewer blocks than its length fills) keeps them: copied as
        // below, its digest left for a scan.
        let sparse = m.blocks().saturating_mul(512) < m.len();
        if cloned {
            self.reflinked += 1;
            fs::set_permissions(to, m.permissions()).map_err(|e| io(to, e))?;
        } else if let (Some(_), true) = (self.noting, sparse) {
            let mut src = fs::File::open(from).map_err(|e| io(from, e))?;
            let mut dst = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(to)
                .map_err(|e| io(to, e))?;
            crate::util::copy_sparse(&mut src, &mut dst).map_err(|e| io(to, e))?;
            dst.set_permissions(m.permissions())
                .map_err(|e| io(to, e))?;
            self.copied += 1;
            self.bytes_copied += m.blocks().saturating_mul(512).min(m.len());
        } else if let (Some((root, index)), false) = (self.noting, sparse) {
            use std::os::unix::fs::OpenOptionsExt;
            let mut src = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(from)
                .map_err(|e| io(from, e))?;
            let (digest, n) = copy_hashing(&mut src, to, m).map_err(|e| io(to, e))?;
            if n > 0 {
                self.copied += 1;
                self.bytes_copied += n;
            }
            let copy = fs::symlink_metadata(to).map_err(|e| io(to, e))?;
            if let Ok(rel) = to.strip_prefix(root) {
                index.note_frozen(rel.as_os_str().as_bytes(), &copy, &digest);
            }
        } else {
            // copy_file_range, and the mode.
            let n = fs::copy(from, to).map_err(|e| io(to, e))?;
            if n > 0 {
                self.copied += 1;
                self.bytes_copied += n;
            }
        }
        self.files += 1;
        if self.files == 1 {
            self.fp.point("fork.mid-clone");
        }
        Ok(())
    }
}

/// A btrfs subvolume snapshot (`BTRFS_IOC_SNAP_CREATE_V2`, made in `revl-sandbox`, the
/// crate that holds revl's raw system calls).
#[cfg(target_os = "linux")]
mod btrfs {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    const SUPER_MAGIC: i64 = 0x9123_683E;
    /// A subvolume's root directory has this inode number.
    const FIRST_FREE_OBJECTID: u64 = 256;

    fn is_btrfs(p: &Path) -> bool {
        // `f_type`'s integer type differs between targets.
        #[allow(clippy::unnecessary_cast)]
        rustix::fs::statfs(p).is_ok_and(|s| s.f_type as i64 == SUPER_MAGIC)
    }

    /// Could `src` be snapshot as `dst`: a subvolume root, `dst`'s parent on btrfs.
    pub fn can_snapshot(src: &Path, dst: &Path) -> bool {
        let (Some(parent), Some(name)) = (dst.parent(), dst.file_name()) else {
            return false;
        };
        let root = std::fs::metadata(src).is_ok_and(|m| m.ino() == FIRST_FREE_OBJECTID);
        root && is_btrfs(src) && is_btrfs(parent) && name.len() <= revl_sandbox::fsioctl::NAME_MAX
    }

    /// Snapshot the subvolume `src` as `dst`; false (nothing done) when `src` is not a
    /// subvolume root, `dst`'s parent is not on btrfs, or the kernel refuses.
    pub fn snapshot(src: &Path, dst: &Path) -> bool {
        let (Some(parent), Some(name)) = (dst.parent(), dst.file_name()) else {
            return false;
        };
        if !can_snapshot(src, dst) {
            return false;
        }
        let (Ok(s), Ok(p)) = (std::fs::File::open(src), std::fs::File::open(parent)) else {
            return false;
        };
        // An empty directory given as DIR makes way for the snapshot of the same name.
        let existed = dst.is_dir();
        if existed && std::fs::remove_dir(dst).is_err() {
            return false;
        }
        let r = revl_sandbox::fsioctl::btrfs_snapshot(&s, &p, name.as_bytes());
        if r.is_err() && existed {
            let _ = std::fs::create_dir(dst);
        }
        r.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A freeze copies every file, mode and symlink, and notes each copied file's digest
    /// (the bytes it wrote) against the copy's own stat; a sparse file keeps its holes and is
    /// left for a scan to read.
    #[test]
    fn a_freeze_notes_the_digest_of_every_file_it_copies() {
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        fs::create_dir_all(src.join("d/e")).unwrap();
        fs::write(src.join("a"), b"alpha").unwrap();
        fs::write(src.join("d/e/b"), vec![7u8; 300_000]).unwrap();
        fs::write(src.join("empty"), b"").unwrap();
        fs::set_permissions(src.join("a"), fs::Permissions::from_mode(0o751)).unwrap();
        std::os::unix::fs::symlink("a", src.join("link")).unwrap();
        let sparse = fs::File::create(src.join("sparse")).unwrap();
        sparse.set_len(64 << 20).unwrap();
        let at = t.path().join("stat-index");
        let index = StatIndex::frozen(&at);
        let c = freeze_tree(&src, &dst, &index).unwrap();
        index.save().unwrap();
        assert_eq!(c.how, "copy");
        assert_eq!(fs::read(dst.join("a")).unwrap(), b"alpha");
        assert_eq!(fs::read(dst.join("d/e/b")).unwrap(), vec![7u8; 300_000]);
        assert_eq!(fs::read_link(dst.join("link")).unwrap(), Path::new("a"));
        let ma = fs::symlink_metadata(dst.join("a")).unwrap();
        assert_eq!(ma.mode() & 0o7777, 0o751);
        let ms = fs::symlink_metadata(dst.join("sparse")).unwrap();
        assert_eq!(ms.len(), 64 << 20);
        assert!(ms.blocks() * 512 < 1 << 20, "the holes stayed holes");
        let kept = StatIndex::load(&at);
        for (rel, body) in [
            ("a", b"alpha".to_vec()),
            ("d/e/b", vec![7u8; 300_000]),
            ("empty", Vec::new()),
        ] {
            let m = fs::symlink_metadata(dst.join(rel)).unwrap();
            assert_eq!(
                kept.digest(rel.as_bytes(), &m),
                Some(crate::util::blake3_hex(&body)),
                "{rel}"
            );
        }
        assert_eq!(
            kept.digest(b"sparse", &ms),
            None,
            "a sparse file is read by a scan"
        );
    }
}
