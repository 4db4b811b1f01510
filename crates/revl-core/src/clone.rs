//! A parallel fork's new workspace (SPEC 14): the parent's workspace cloned the cheapest
//! correct way the filesystem offers. A file is cloned by reflink (`FICLONE`: XFS, btrfs,
//! bcachefs share the blocks until either side writes) where the filesystem supports it,
//! else copied (`copy_file_range` through `std::fs::copy`). Directories keep their modes,
//! symlinks their targets; FIFOs, sockets and devices are not cloned (revl never witnesses
//! them). The result says which way was taken and how many bytes were copied.

use crate::error::{Error, Result};
use crate::failpoint::Failpoints;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// How a workspace was cloned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cloned {
    /// `"reflink"` when every file was cloned by reflink, else `"copy"`.
    pub how: &'static str,
    /// Bytes copied (not shared by reflink).
    pub bytes_copied: u64,
}

fn io(p: &Path, e: std::io::Error) -> Error {
    Error::io(p.display(), e)
}

/// Clone the tree at `src` into `dst` (absent, or an empty directory).
pub fn clone_tree(src: &Path, dst: &Path, fp: &Failpoints) -> Result<Cloned> {
    let mut st = Walk {
        reflinked: 0,
        copied: 0,
        bytes_copied: 0,
        fp,
        files: 0,
    };
    if !dst.exists() {
        fs::create_dir(dst).map_err(|e| io(dst, e))?;
    }
    st.dir(src, dst)?;
    let m = fs::metadata(src).map_err(|e| io(src, e))?;
    fs::set_permissions(dst, m.permissions()).map_err(|e| io(dst, e))?;
    // The copy is durable before the branch that names it exists.
    let f = fs::File::open(dst).map_err(|e| io(dst, e))?;
    rustix::fs::syncfs(&f).map_err(|e| io(dst, e.into()))?;
    Ok(Cloned {
        how: if st.copied == 0 { "reflink" } else { "copy" },
        bytes_copied: st.bytes_copied,
    })
}

struct Walk<'a> {
    reflinked: u64,
    copied: u64,
    bytes_copied: u64,
    fp: &'a Failpoints,
    files: u64,
}

impl Walk<'_> {
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
        let src = fs::File::open(from).map_err(|e| io(from, e))?;
        let dst = fs::File::create(to).map_err(|e| io(to, e))?;
        if m.len() == 0 {
            // Nothing to share or copy.
        } else if rustix::fs::ioctl_ficlone(&dst, &src).is_ok() {
            self.reflinked += 1;
        } else {
            drop(dst);
            let n = fs::copy(from, to).map_err(|e| io(to, e))?;
            self.copied += 1;
            self.bytes_copied += n;
        }
        fs::set_permissions(to, m.permissions()).map_err(|e| io(to, e))?;
        self.files += 1;
        if self.files == 1 {
            self.fp.point("fork.mid-clone");
        }
        Ok(())
    }
}
