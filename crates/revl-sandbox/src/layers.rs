//! A layered branch workspace's mount (docs/architecture.md, "Layered workspaces"): the
//! kernel overlay mounted at the branch's directory in revl's own mount namespace (so every
//! process of the machine sees it), and its unmount. Both are rustix's safe wrappers.

use rustix::mount::{MountFlags, UnmountFlags};
use std::ffi::CStr;
use std::path::Path;

/// Mount an overlay at `target` with the option string `opts` (`lowerdir=…,upperdir=…,
/// workdir=…`, paths escaped by the caller).
pub fn overlay(target: &Path, opts: &CStr) -> std::io::Result<()> {
    rustix::mount::mount(c"overlay", target, c"overlay", MountFlags::empty(), opts)?;
    Ok(())
}

/// Unmount `target`; with `detach`, lazily (`MNT_DETACH`: gone from the tree now, freed
/// when the last user lets go).
pub fn unmount(target: &Path, detach: bool) -> std::io::Result<()> {
    let flags = if detach {
        UnmountFlags::DETACH
    } else {
        UnmountFlags::empty()
    };
    rustix::mount::unmount(target, flags)?;
    Ok(())
}
