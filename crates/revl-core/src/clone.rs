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
use std::path::{Path, PathBuf};

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
        how: if st.counts.copied == 0 {
            "reflink"
        } else {
            "copy"
        },
        bytes_copied: st.counts.bytes_copied,
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
        bytes_copied: st.counts.bytes_copied,
    })
}

/// Copy the regular file open as `src` (whose `lstat` was `m`) to the new file `to`,
/// hashing the bytes as they are written: their digest, the bytes, and the copy's own stat
/// (taken on the open file, after its mode was set). The copy gets `src`'s permission bits.
fn copy_hashing(
    src: &mut fs::File,
    to: &Path,
    m: &fs::Metadata,
) -> std::io::Result<([u8; 32], u64, fs::Metadata)> {
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
    let copy = dst.metadata()?;
    Ok((*hasher.finalize().as_bytes(), n, copy))
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

/// Files are copied in batches of at most this many (the walk's memory stays bounded
/// whatever the tree's size), each batch spread over the cores ([`crate::util::par_map`]:
/// creating files is mostly the kernel's work, and in a tree search the other branches
/// wait for their first branch's copy, so a core would otherwise idle).
const BATCH: usize = 4096;

/// What copying some files did.
#[derive(Default, Clone, Copy)]
struct Counts {
    copied: u64,
    bytes_copied: u64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.copied += o.copied;
        self.bytes_copied += o.bytes_copied;
    }
}

struct Walk<'a> {
    /// Whether FICLONE works between these two trees (unknown until the first file with
    /// bytes, which is copied alone and decides for the rest).
    reflink_works: Option<bool>,
    counts: Counts,
    fp: &'a Failpoints,
    files: u64,
    /// A freeze ([`freeze_tree`]): the copy's root, and where each copied file's digest is
    /// noted.
    noting: Option<(&'a Path, &'a StatIndex)>,
    /// Files found by the walk and not copied yet: `(from, to, from's lstat)`.
    pending: Vec<(PathBuf, PathBuf, fs::Metadata)>,
    /// Directories made, in the order made, and the modes they get once everything under
    /// them is in place (a read-only directory is filled first).
    modes: Vec<(PathBuf, u32)>,
}

impl<'a> Walk<'a> {
    fn new(fp: &'a Failpoints, noting: Option<(&'a Path, &'a StatIndex)>) -> Self {
        Walk {
            // A freeze copies: layers are made where nothing shares blocks.
            reflink_works: noting.map(|_| false),
            counts: Counts::default(),
            fp,
            files: 0,
            noting,
            pending: Vec::new(),
            modes: Vec::new(),
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
        self.flush()?;
        // Children before their parents: the reverse of the order they were made in.
        for (d, mode) in std::mem::take(&mut self.modes).into_iter().rev() {
            fs::set_permissions(&d, fs::Permissions::from_mode(mode)).map_err(|e| io(&d, e))?;
        }
        let m = fs::metadata(src).map_err(|e| io(src, e))?;
        fs::set_permissions(dst, m.permissions()).map_err(|e| io(dst, e))?;
        crate::util::sync_tree(dst).map_err(|e| io(dst, e))
    }

    /// Make `src`'s directories and symlinks under `dst`; its files are queued ([`flush`]).
    fn dir(&mut self, src: &Path, dst: &Path) -> Result<()> {
        for e in fs::read_dir(src).map_err(|e| io(src, e))? {
            let e = e.map_err(|e| io(src, e))?;
            let (from, to) = (e.path(), dst.join(e.file_name()));
            let m = fs::symlink_metadata(&from).map_err(|e| io(&from, e))?;
            let t = m.file_type();
            if t.is_dir() {
                fs::create_dir(&to).map_err(|e| io(&to, e))?;
                self.modes.push((to.clone(), m.permissions().mode()));
                self.dir(&from, &to)?;
            } else if t.is_symlink() {
                let target = fs::read_link(&from).map_err(|e| io(&from, e))?;
                std::os::unix::fs::symlink(target, &to).map_err(|e| io(&to, e))?;
            } else if t.is_file() {
                self.pending.push((from, to, m));
                if self.pending.len() >= BATCH {
                    self.flush()?;
                }
            }
        }
        Ok(())
    }

    /// Copy the queued files: alone until the first file with bytes has decided whether
    /// reflinks work (the first file also passes the `fork.mid-clone` failpoint), the rest
    /// over the cores, each thread a contiguous run (a directory's files stay on one
    /// thread). The first error is returned; what was copied stays for the caller's
    /// clean-up.
    fn flush(&mut self) -> Result<()> {
        let batch = std::mem::take(&mut self.pending);
        let mut rest = &batch[..];
        while let Some(((from, to, m), tail)) = rest.split_first() {
            if self.reflink_works.is_some() && self.files > 0 {
                break;
            }
            let try_reflink = self.reflink_works != Some(false) && m.len() > 0;
            let (c, reflinked) = self.copy(from, to, m, try_reflink)?;
            if try_reflink {
                // The first file decides for the rest (one filesystem on each side).
                self.reflink_works = Some(reflinked);
            }
            self.counts.add(c);
            self.files += 1;
            if self.files == 1 {
                self.fp.point("fork.mid-clone");
            }
            rest = tail;
        }
        let reflink = self.reflink_works == Some(true);
        let this = &*self;
        let done = crate::util::par_map(rest, |(from, to, m)| {
            this.copy(from, to, m, reflink && m.len() > 0)
        });
        for d in done {
            self.counts.add(d?.0);
        }
        self.files += rest.len() as u64;
        Ok(())
    }

    /// Copy one file (reflinked if `reflink`, else copied; in a freeze hashed as copied and
    /// its digest noted). What it did, and whether the reflink worked.
    fn copy(
        &self,
        from: &Path,
        to: &Path,
        m: &fs::Metadata,
        reflink: bool,
    ) -> Result<(Counts, bool)> {
        let mut c = Counts::default();
        let cloned = reflink && {
            let src = fs::File::open(from).map_err(|e| io(from, e))?;
            let dst = fs::File::create(to).map_err(|e| io(to, e))?;
            rustix::fs::ioctl_ficlone(&dst, &src).is_ok()
        };
        // A file with holes (fewer blocks than its length fills) keeps them: copied as
        // below, its digest left for a scan.
        let sparse = m.blocks().saturating_mul(512) < m.len();
        if cloned {
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
            c.copied += 1;
            c.bytes_copied += m.blocks().saturating_mul(512).min(m.len());
        } else if let (Some((root, index)), false) = (self.noting, sparse) {
            use std::os::unix::fs::OpenOptionsExt;
            let mut src = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(from)
                .map_err(|e| io(from, e))?;
            let (digest, n, copy) = copy_hashing(&mut src, to, m).map_err(|e| io(to, e))?;
            if n > 0 {
                c.copied += 1;
                c.bytes_copied += n;
            }
            if let Ok(rel) = to.strip_prefix(root) {
                index.note_frozen(rel.as_os_str().as_bytes(), &copy, &digest);
            }
        } else {
            // copy_file_range, and the mode (a reflink tried and refused leaves the empty
            // file it made: `fs::copy` truncates it).
            let n = fs::copy(from, to).map_err(|e| io(to, e))?;
            if n > 0 {
                c.copied += 1;
                c.bytes_copied += n;
            }
        }
        Ok((c, cloned))
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

    /// A tree of more files than one batch, in nested directories (one of them read-only),
    /// is copied by several threads exactly: every file's bytes and mode, every symlink,
    /// every directory's mode (set once the threads are done), and a freeze notes every
    /// file's digest. A plain clone gives the same tree.
    #[test]
    fn a_tree_larger_than_a_batch_is_copied_whole_by_the_threads() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        let n = BATCH + BATCH / 2;
        for i in 0..n {
            let d = src.join(format!("d{}/e{}", i % 7, i % 3));
            fs::create_dir_all(&d).unwrap();
            let f = d.join(format!("f{i}"));
            fs::write(&f, format!("file {i}\n").repeat(i % 5)).unwrap();
            fs::set_permissions(
                &f,
                fs::Permissions::from_mode(0o600 + (i % 2) as u32 * 0o44),
            )
            .unwrap();
        }
        std::os::unix::fs::symlink("e0/f0", src.join("d0/link")).unwrap();
        fs::set_permissions(src.join("d3"), fs::Permissions::from_mode(0o555)).unwrap();
        fs::set_permissions(src.join("d4/e1"), fs::Permissions::from_mode(0o700)).unwrap();
        let tree = |root: &Path| {
            let mut out = Vec::new();
            let mut stack = vec![root.to_path_buf()];
            while let Some(d) = stack.pop() {
                for e in fs::read_dir(&d).unwrap() {
                    let p = e.unwrap().path();
                    let m = fs::symlink_metadata(&p).unwrap();
                    let rel = p.strip_prefix(root).unwrap().to_path_buf();
                    let body = if m.is_file() {
                        fs::read(&p).unwrap()
                    } else if m.file_type().is_symlink() {
                        fs::read_link(&p).unwrap().into_os_string().into_vec()
                    } else {
                        stack.push(p.clone());
                        Vec::new()
                    };
                    out.push((rel, m.mode(), body));
                }
            }
            out.sort();
            out
        };
        use std::os::unix::ffi::OsStringExt;
        let want = tree(&src);
        assert_eq!(want.len(), n + 7 + 21 + 1);
        let at = t.path().join("stat-index");
        let index = StatIndex::frozen(&at);
        let frozen = t.path().join("frozen");
        let c = freeze_tree(&src, &frozen, &index).unwrap();
        index.save().unwrap();
        assert_eq!(tree(&frozen), want, "the freeze");
        let bytes: u64 = want
            .iter()
            .filter(|e| e.1 & 0o170000 == 0o100000)
            .map(|e| e.2.len() as u64)
            .sum();
        assert_eq!(c.bytes_copied, bytes);
        let kept = StatIndex::load(&at);
        for (rel, mode, body) in &want {
            if mode & 0o170000 == 0o100000 {
                let m = fs::symlink_metadata(frozen.join(rel)).unwrap();
                let rel = rel.as_os_str().as_bytes();
                assert_eq!(kept.digest(rel, &m), Some(crate::util::blake3_hex(body)));
            }
        }
        let copy = t.path().join("copy");
        let c = clone_tree(&src, &copy, &Failpoints::none(), None).unwrap();
        assert_eq!(tree(&copy), want, "the clone");
        assert_eq!(c.bytes_copied, bytes);
    }
}
