//! A sandboxed exec's change set (docs/architecture.md, "The exec sandbox"): read from the
//! overlay's upper layer (what the command wrote, and nothing else), compared with the real
//! workspace when it is applied (which is when the preimages are read), then applied as one
//! step.
//!
//! The upper layer holds exactly the paths the command wrote: files it created or modified
//! (copied up whole: `metacopy=off`), symlinks, directories it made, directories it replaced
//! (marked opaque), and a whiteout (a 0/0 character device) for each path it deleted.
//! Directories it only entered were copied up with their mode. Directory renames are not
//! redirected (`redirect_dir=nofollow`): a command that renames a directory copies it, so the
//! upper layer shows a new tree and a whiteout. Reading it costs what the command changed,
//! not the size of the workspace.

use crate::blobs::BlobStore;
use crate::error::Result;
use crate::undo::{ExecChange, FileKind, Image, RestoreEntry};
use crate::util::blake3_hex;
use crate::workspace::{b64, mode_str, unb64, KeptBytes, Workspace, INLINE_MAX};
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Preimages inline in the intent up to this many bytes in all; beyond, in the blob store
/// (a command that rewrites ten thousand small files must not write a 50 MB WAL record).
const INLINE_BUDGET: usize = 1 << 20;

/// How one change is applied.
#[derive(Debug, Clone)]
pub enum How {
    /// Move what the upper layer holds at this path into the workspace.
    Move(PathBuf),
    /// Remove the path.
    Remove,
    /// Set the mode (a file or directory whose content did not change).
    Chmod(u32),
}

/// One change: its entry in the step's detail, its preimage, and how it is applied.
#[derive(Debug, Clone)]
pub struct Item {
    pub path: String,
    pub change: &'static str,
    pub pre: RestoreEntry,
    /// The post-image, with its path.
    pub after: Image,
    pub how: How,
}

/// The change set, paths sorted.
#[derive(Debug, Default)]
pub struct Planned {
    pub items: Vec<Item>,
    pub ignored: Vec<ExecChange>,
    /// Every entry inside a new tree (a `dir-created` item), recorded one by one so that
    /// drift inside it, `read --at` and `diff` see each path; moved in with its tree.
    pub inside: Vec<ExecChange>,
    /// Small post-images, kept in the intent for `read --at`.
    pub kept: KeptBytes,
    /// What was removed from an entry before it was applied, by path: metadata the command
    /// set that revl neither records nor rewinds (shown as the change's `why`).
    pub stripped: std::collections::BTreeMap<String, String>,
    /// Preimage blobs were put without a sync of their own: [`BlobStore::sync`] makes them
    /// durable before the intent names them.
    pub batched: bool,
}

impl Planned {
    /// The `changes` of the step's detail: applied and ignored entries, sorted by path.
    pub fn changes(&self) -> Vec<ExecChange> {
        let mut out: Vec<ExecChange> = self
            .items
            .iter()
            .map(|i| ExecChange {
                after: Some(Image {
                    path: String::new(),
                    ..i.after.clone()
                }),
                change: i.change.to_string(),
                path: i.path.clone(),
                why: self.stripped.get(&i.path).cloned(),
            })
            .collect();
        out.extend(self.ignored.iter().cloned());
        out.extend(self.inside.iter().cloned().map(|mut c| {
            c.why = c.why.or_else(|| self.stripped.get(&c.path).cloned());
            c
        }));
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    /// The files the apply will move in, whose data must be durable first.
    /// The post-images not kept in the intent (larger than it keeps, or past its budget):
    /// each regular file of the change set as it stands in the upper layer `upper`, with
    /// the digest it was observed with, once per digest. The exec keeps them as blobs so
    /// that every step's content is somewhere (docs/reference.md, "Effects").
    pub fn post_images(&self, upper: &Path) -> Vec<(PathBuf, String)> {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for c in self.changes() {
            let Some(after) = &c.after else { continue };
            let (Some(FileKind::File), Some(d)) = (after.kind, after.digest.as_deref()) else {
                continue;
            };
            if self.kept.kept.contains_key(d) || !seen.insert(d.to_string()) {
                continue;
            }
            let abs = upper.join(crate::name::to_os(&c.path));
            if fs::symlink_metadata(&abs).is_ok_and(|m| m.is_file()) {
                out.push((abs, d.to_string()));
            }
        }
        out
    }

    pub fn files_to_sync(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for i in &self.items {
            if let How::Move(src) = &i.how {
                collect_files(src, &mut out);
            }
        }
        out
    }
}

fn collect_files(p: &Path, out: &mut Vec<PathBuf>) {
    let Ok(m) = fs::symlink_metadata(p) else {
        return;
    };
    if m.is_file() {
        out.push(p.to_path_buf());
    } else if m.is_dir() {
        out.push(p.to_path_buf());
        for e in fs::read_dir(p).into_iter().flatten().flatten() {
            collect_files(&e.path(), out);
        }
    }
}

fn io(p: &Path, e: std::io::Error) -> crate::Error {
    crate::Error::io(p.display(), e)
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

fn ignored(path: String, why: impl Into<String>) -> ExecChange {
    ExecChange {
        after: None,
        change: "ignored".into(),
        path,
        why: Some(why.into()),
    }
}

/// Why a special file is not applied.
fn special_why(t: &fs::FileType) -> &'static str {
    if t.is_fifo() {
        "a FIFO is not applied to the workspace (revl witnesses files, directories and symlinks)"
    } else if t.is_socket() {
        "a socket is not applied to the workspace (revl witnesses files, directories and symlinks)"
    } else {
        "a device node is not applied to the workspace (revl witnesses files, directories and symlinks)"
    }
}

/// Names beginning `.revl-` are revl's own (staging and temporary files): a command's are
/// never applied, and never deleted from the workspace.
fn reserved(name: &str) -> bool {
    name.starts_with(".revl-")
}

const RESERVED_WHY: &str =
    "names beginning .revl- are reserved for revl's own temporary files; it is not applied";

fn remove(abs: &Path) -> Result<()> {
    fs::remove_dir_all(abs)
        .or_else(|_| fs::remove_file(abs))
        .map_err(|e| io(abs, e))
}

/// The names of the extended attributes of `p` (not following a symlink): one call where
/// they fit in a page.
fn xattr_names(p: &Path) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    let n = match rustix::fs::llistxattr(p, &mut buf[..]) {
        Ok(n) => n,
        Err(rustix::io::Errno::RANGE) => {
            let Ok(size) = rustix::fs::llistxattr_query(p) else {
                return Vec::new();
            };
            buf = vec![0u8; size];
            rustix::fs::llistxattr(p, &mut buf[..]).unwrap_or(0)
        }
        Err(_) => return Vec::new(),
    };
    buf[..n]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// An upper-layer entry once tidied ([`tidy`]).
struct Tidied {
    /// Its metadata, as it now is.
    m: fs::Metadata,
    /// A directory the overlay marked opaque (it replaced what was there).
    opaque: bool,
    /// What was removed, in words ("" for nothing).
    note: String,
    /// A regular file, open for reading (its bytes are read through it, not by path again).
    file: Option<fs::File>,
}

/// Tidy the upper-layer entry `abs` (whose real counterpart in the workspace is `real`)
/// in one pass over its extended attributes:
///
/// - What a command leaves never grants privileges in the workspace: the setuid and setgid
///   bits of a file (and the setuid bit of a directory, which means nothing) are cleared,
///   and a file's `security.capability` is removed. A directory keeps its setgid bit: it
///   grants nothing (new entries take the directory's group).
/// - The overlay's own attributes (`prefix` + `overlay.`: `opaque`, `origin`, `impure`)
///   mean nothing in the workspace: removed (a directory's `opaque` is read first).
/// - What the command set that revl neither records nor rewinds is removed unless `real`
///   already holds the same: every other extended attribute (user attributes, ACLs,
///   `user.overlay.*` as root) and inode flag (`chattr`), so nothing reaches the workspace
///   silently; the note says what went.
///
/// A whiteout is left as it is. Each call is made only where there is something to do: one
/// listing of the attributes, one open and one flags read of a file or directory.
fn tidy(abs: &Path, real: &Path, prefix: &str) -> Result<Tidied> {
    let mut m = fs::symlink_metadata(abs).map_err(|e| io(abs, e))?;
    let t = m.file_type();
    let mut out = Tidied {
        m: m.clone(),
        opaque: false,
        note: String::new(),
        file: None,
    };
    if is_whiteout(&m) {
        return Ok(out);
    }
    let (file, dir) = (t.is_file(), t.is_dir());
    let mode = m.permissions().mode() & 0o7777;
    let strip = if dir { 0o4000 } else { 0o6000 };
    if (file || dir) && mode & strip != 0 {
        fs::set_permissions(abs, fs::Permissions::from_mode(mode & !strip))
            .map_err(|e| io(abs, e))?;
        m = fs::symlink_metadata(abs).map_err(|e| io(abs, e))?;
    }
    let value = |p: &Path, name: &std::ffi::CStr| -> Option<Vec<u8>> {
        let size = rustix::fs::lgetxattr(p, name, &mut [0u8; 0][..]).ok()?;
        let mut v = vec![0u8; size];
        let n = rustix::fs::lgetxattr(p, name, &mut v[..]).ok()?;
        v.truncate(n);
        Some(v)
    };
    let own = format!("{prefix}overlay.");
    let mut gone: Vec<String> = Vec::new();
    for name in xattr_names(abs) {
        let Ok(c) = std::ffi::CString::new(name.clone()) else {
            continue;
        };
        if name.starts_with(own.as_bytes()) {
            if dir && name == format!("{own}opaque").as_bytes() {
                out.opaque = value(abs, &c).is_some_and(|v| v == b"y");
            }
            let _ = rustix::fs::lremovexattr(abs, c.as_c_str());
            continue;
        }
        if file && name == b"security.capability" {
            let _ = rustix::fs::lremovexattr(abs, c.as_c_str());
            continue;
        }
        if value(abs, &c).is_some_and(|v| value(real, &c) == Some(v)) {
            continue;
        }
        if rustix::fs::lremovexattr(abs, c.as_c_str()).is_ok() {
            gone.push(String::from_utf8_lossy(&name).into_owned());
        }
    }
    // Only a regular file or a directory is opened (never a device or a FIFO).
    let open = |p: &Path| -> Option<rustix::fd::OwnedFd> {
        use rustix::fs::{Mode, OFlags};
        rustix::fs::open(
            p,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
    };
    if file || dir {
        if let Some(fd) = open(abs) {
            if let Ok(f) = rustix::fs::ioctl_getflags(&fd) {
                let mut extra = f & meaningful_flags();
                if !extra.is_empty() {
                    // The real path's flags are read only where the command's entry has any.
                    let had = fs::symlink_metadata(real)
                        .ok()
                        .filter(|r| r.is_file() || r.is_dir())
                        .and_then(|_| open(real))
                        .and_then(|fd| rustix::fs::ioctl_getflags(&fd).ok())
                        .unwrap_or(rustix::fs::IFlags::empty());
                    extra &= !had;
                }
                if !extra.is_empty() && rustix::fs::ioctl_setflags(&fd, f & !extra).is_ok() {
                    gone.push(format!("inode flags {extra:?}"));
                }
            }
            if file {
                out.file = Some(fs::File::from(fd));
            }
        }
    }
    out.m = m;
    if !gone.is_empty() {
        out.note = format!(
            "not applied: {} (revl neither records nor rewinds them)",
            gone.join(", ")
        );
    }
    Ok(out)
}

/// Inode flags a command may set that change what others can do with the file (append
/// only, immutable, no dump, no atime, synchronous, no copy-on-write, ...): none is recorded
/// or rewound, so none is applied unless the real path already had it.
fn meaningful_flags() -> rustix::fs::IFlags {
    use rustix::fs::IFlags;
    IFlags::APPEND
        | IFlags::IMMUTABLE
        | IFlags::NODUMP
        | IFlags::NOATIME
        | IFlags::SYNC
        | IFlags::DIRSYNC
        | IFlags::NOCOW
        | IFlags::JOURNALING
        | IFlags::NOTAIL
        | IFlags::TOPDIR
        | IFlags::UNRM
        | IFlags::SECURE_REMOVAL
        | IFlags::PROJECT_INHERIT
        | IFlags::COMPRESSED
}

/// A whiteout: the overlay's mark of a deleted path.
fn is_whiteout(m: &fs::Metadata) -> bool {
    m.file_type().is_char_device() && m.rdev() == 0
}

/// Read the change set from `upper` and compare it with the workspace; capture every
/// preimage (large ones durably in the blob store). Nothing in the workspace changes; the
/// upper layer is tidied (overlay attributes stripped, special files removed from new trees,
/// hard links split) so that what is moved in is exactly what is recorded.
pub fn plan(upper: &Path, prefix: &str, ws: &Workspace, blobs: &BlobStore) -> Result<Planned> {
    let up = Workspace::new(upper.to_path_buf(), crate::Failpoints::none());
    let mut out = Planned {
        kept: KeptBytes::with_budget(INLINE_BUDGET),
        ..Planned::default()
    };
    let mut budget = INLINE_BUDGET;
    walk(upper, "", prefix, &up, ws, blobs, &mut out, &mut budget)?;
    out.items.sort_by(|a, b| a.path.cmp(&b.path));
    out.ignored.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn sorted_entries(dir: &Path) -> Result<Vec<OsString>> {
    let mut names: Vec<OsString> = fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .map(|e| e.map(|e| e.file_name()).map_err(|e| io(dir, e)))
        .collect::<Result<_>>()?;
    names.sort();
    Ok(names)
}

#[allow(clippy::too_many_arguments)]
fn walk(
    dir: &Path,
    rel_dir: &str,
    prefix: &str,
    up: &Workspace,
    ws: &Workspace,
    blobs: &BlobStore,
    out: &mut Planned,
    budget: &mut usize,
) -> Result<()> {
    for name in sorted_entries(dir)? {
        let abs = dir.join(&name);
        // Any name is data: one that is not UTF-8 is recorded in its escaped form.
        let name = crate::name::from_os(&name);
        let rel = join(rel_dir, &name);
        if reserved(&name) {
            out.ignored.push(ignored(rel, RESERVED_WHY));
            continue;
        }
        let real_abs = ws.abs(&rel);
        let tidied = tidy(&abs, &real_abs, prefix)?;
        if !tidied.note.is_empty() {
            out.stripped.insert(rel.clone(), tidied.note.clone());
        }
        let m = &tidied.m;
        let t = m.file_type();
        let real_meta = ws.lstat_meta(&rel)?;
        let real = real_meta.as_ref().map(|r| {
            (
                crate::workspace::kind_of(r),
                r.permissions().mode() & 0o7777,
                r.nlink(),
            )
        });
        let real_kind = real.as_ref().map_or(FileKind::Absent, |(k, _, _)| *k);
        let mut batched = false;
        let mut add = |change: &'static str,
                       after: Image,
                       how: How,
                       small: Option<(&Image, &[u8])>,
                       budget: &mut usize| {
            let pre = capture(ws, &rel, small, blobs, budget, &mut batched)?;
            out.items.push(Item {
                path: rel.clone(),
                change,
                pre,
                after,
                how,
            });
            Ok::<(), crate::Error>(())
        };
        if is_whiteout(m) {
            match real_kind {
                FileKind::Absent => {}
                FileKind::Dir => add(
                    "dir-deleted",
                    Image::absent(&rel),
                    How::Remove,
                    None,
                    budget,
                )?,
                _ => add("deleted", Image::absent(&rel), How::Remove, None, budget)?,
            }
        } else if t.is_dir() {
            if real_kind == FileKind::Dir && !tidied.opaque {
                // A directory the command entered: its own mode, then what it wrote inside.
                let (_, real_mode, _) = real.expect("a directory");
                let mode = m.permissions().mode() & 0o7777;
                if mode != real_mode {
                    out.items
                        .push(mode_item(&rel, FileKind::Dir, real_mode, mode));
                }
                walk(&abs, &rel, prefix, up, ws, blobs, out, budget)?;
            } else {
                // A new tree (or one that replaced what was there): applied whole.
                tidy_tree(&abs, &rel, prefix, &mut out.ignored, &mut out.stripped)?;
                let (after, entries) = up.observe_entries(&rel, Some(&mut out.kept))?;
                if ws.observe(&rel)? != after {
                    add("dir-created", after, How::Move(abs.clone()), None, budget)?;
                    out.inside.extend(entries.into_iter().map(|img| {
                        ExecChange {
                            change: match img.kind {
                                Some(FileKind::Dir) => "dir-created",
                                Some(FileKind::Symlink) => "symlink",
                                _ => "created",
                            }
                            .to_string(),
                            path: img.path.clone(),
                            after: Some(Image {
                                path: String::new(),
                                ..img
                            }),
                            why: None,
                        }
                    }));
                }
            }
        } else if t.is_file() || t.is_symlink() {
            let mut file = tidied.file;
            if t.is_file() && m.nlink() > 1 {
                split_link(&abs)?;
                file = None;
            }
            // Each side is read once: the post-image (kept inline when small) and, for a
            // small regular file, the real bytes that are both its image and its preimage.
            let (after, bytes) = if t.is_file() {
                read_image(&abs, &rel, m, file)?
            } else {
                (up.observe(&rel)?, None)
            };
            let (now, real_bytes) = match &real_meta {
                Some(r) if r.is_file() && r.len() <= INLINE_MAX as u64 => {
                    read_image(&real_abs, &rel, r, None)?
                }
                _ => (ws.observe(&rel)?, None),
            };
            if now == after {
                continue;
            }
            let same_bytes = now.kind == after.kind && now.digest == after.digest;
            let single = real.as_ref().is_some_and(|(_, _, nlink)| *nlink == 1);
            if t.is_file() && same_bytes && single {
                // Only the mode changed: set it (the file's inode stays, with no other name).
                let (_, real_mode, _) = real.expect("a file");
                let mode = m.permissions().mode() & 0o7777;
                out.items
                    .push(mode_item(&rel, FileKind::File, real_mode, mode));
            } else {
                let change = match (t.is_symlink(), real_kind, same_bytes) {
                    (true, _, _) => "symlink",
                    (false, _, true) => "mode",
                    (false, FileKind::File, _) => "modified",
                    _ => "created",
                };
                if let Some(b) = &bytes {
                    out.kept.add(b);
                }
                let small = real_bytes.as_deref().map(|b| (&now, b));
                add(change, after, How::Move(abs.clone()), small, budget)?;
            }
        } else {
            out.ignored.push(ignored(rel, special_why(&t)));
        }
        out.batched |= batched;
    }
    Ok(())
}

/// The image of the regular file at `abs` (recorded as `rel`) whose `lstat` is `m`, read
/// once (through `file` when it is open already, else opened without following a symlink
/// that appeared since): with its bytes when they are small enough to sit inline
/// ([`INLINE_MAX`]), else hashed as they stream.
fn read_image(
    abs: &Path,
    rel: &str,
    m: &fs::Metadata,
    file: Option<fs::File>,
) -> Result<(Image, Option<Vec<u8>>)> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = match file {
        Some(f) => f,
        None => fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(abs)
            .map_err(|e| io(abs, e))?,
    };
    let (digest, bytes) = if m.len() <= INLINE_MAX as u64 {
        // Read into a buffer one byte larger than it may be (`read_to_end` would ask the
        // file its size and position again): a file that grew past the inline size while
        // it was read is hashed whole and kept by its digest.
        let mut bytes = vec![0u8; INLINE_MAX + 1];
        let mut n = 0;
        while n < bytes.len() {
            match f.read(&mut bytes[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(abs, e)),
            }
        }
        if n > INLINE_MAX {
            let mut h = blake3::Hasher::new();
            h.update(&bytes[..n]);
            h.update_reader(&mut f).map_err(|e| io(abs, e))?;
            (h.finalize().to_hex().to_string(), None)
        } else {
            bytes.truncate(n);
            (blake3_hex(&bytes), Some(bytes))
        }
    } else {
        let (d, _) = crate::util::blake3_reader_sized(f, m.len()).map_err(|e| io(abs, e))?;
        (d, None)
    };
    Ok((
        Image {
            digest: Some(digest),
            kind: Some(FileKind::File),
            mode: Some(mode_str(m.permissions().mode())),
            path: rel.to_string(),
        },
        bytes,
    ))
}

/// A mode change of what stays otherwise as it is: applied by chmod, undone by the old mode.
fn mode_item(rel: &str, kind: FileKind, old: u32, new: u32) -> Item {
    Item {
        path: rel.to_string(),
        change: "mode",
        pre: RestoreEntry::Mode {
            path: rel.to_string(),
            mode: mode_str(old),
        },
        after: Image {
            kind: Some(kind),
            mode: Some(mode_str(new)),
            path: rel.to_string(),
            ..Image::default()
        },
        how: How::Chmod(new),
    }
}

/// The preimage of `rel`, small files inline while the budget lasts, else in the blob
/// store; `small` is its image and bytes where they were read already. Blobs are put
/// without a sync of their own (`batched` is set): the exec makes them durable together
/// before its intent names them.
fn capture(
    ws: &Workspace,
    rel: &str,
    small: Option<(&Image, &[u8])>,
    blobs: &BlobStore,
    budget: &mut usize,
    batched: &mut bool,
) -> Result<RestoreEntry> {
    let mut e = match small {
        Some((img, bytes)) => RestoreEntry::File {
            path: rel.to_string(),
            mode: img.mode.clone().unwrap_or_default(),
            digest: img.digest.clone().unwrap_or_default(),
            content: Some(b64(bytes)),
            blob: None,
        },
        None => match ws.lstat_meta(rel)? {
            Some(m) if m.is_file() && m.len() > INLINE_MAX as u64 => {
                let d = blobs.put_file_batched(&ws.abs(rel))?;
                *batched = true;
                RestoreEntry::File {
                    path: rel.to_string(),
                    mode: mode_str(m.permissions().mode()),
                    digest: d.clone(),
                    content: None,
                    blob: Some(d),
                }
            }
            _ => ws.capture(rel, blobs)?,
        },
    };
    if let RestoreEntry::File { content, blob, .. } = &mut e {
        if let Some(c) = content.as_ref() {
            if c.len() > *budget {
                let bytes = unb64(c)?;
                *blob = Some(blobs.put_cached(&bytes)?);
                *batched = true;
                *content = None;
            } else {
                *budget -= c.len();
            }
        }
    }
    Ok(e)
}

/// Give a hard-linked file a separate inode (a copy renamed over it): hard links are
/// captured as separate files (docs/architecture.md, "The exec sandbox").
fn split_link(p: &Path) -> Result<()> {
    // A name the command did not make (the upper layer is revl's own from here on).
    let mut n = 0u32;
    let tmp = loop {
        let t = p.with_file_name(format!(".revl-link-{n}.tmp"));
        if fs::symlink_metadata(&t).is_err() {
            break t;
        }
        n += 1;
    };
    (|| {
        let mut from = fs::File::open(p)?;
        let mut to = fs::File::create_new(&tmp)?;
        crate::util::copy_sparse(&mut from, &mut to)?;
        to.set_permissions(from.metadata()?.permissions())
    })()
    .map_err(|e| io(p, e))?;
    fs::rename(&tmp, p).map_err(|e| io(p, e))
}

/// Make a new tree of the upper layer hold only what is applied: special files and
/// whiteouts dropped (nothing below a new
/// tree is deleted), hard links split, overlay attributes stripped.
fn tidy_tree(
    dir: &Path,
    rel_dir: &str,
    prefix: &str,
    ignored_out: &mut Vec<ExecChange>,
    stripped: &mut std::collections::BTreeMap<String, String>,
) -> Result<()> {
    for name in sorted_entries(dir)? {
        let abs = dir.join(&name);
        let m = fs::symlink_metadata(&abs).map_err(|e| io(&abs, e))?;
        let name = crate::name::from_os(&name);
        let rel = join(rel_dir, &name);
        if reserved(&name) && !is_whiteout(&m) {
            remove(&abs)?;
            ignored_out.push(ignored(rel, RESERVED_WHY));
            continue;
        }
        // A new tree: nothing real to compare with; whatever the command set goes.
        let tidied = tidy(&abs, Path::new("/nonexistent/revl"), prefix)?;
        if !tidied.note.is_empty() {
            stripped.insert(rel.clone(), tidied.note);
        }
        let m = tidied.m;
        let t = m.file_type();
        if is_whiteout(&m) {
            fs::remove_file(&abs).map_err(|e| io(&abs, e))?;
        } else if t.is_dir() {
            tidy_tree(&abs, &rel, prefix, ignored_out, stripped)?;
        } else if t.is_file() {
            if m.nlink() > 1 {
                split_link(&abs)?;
            }
        } else if !t.is_symlink() {
            fs::remove_file(&abs).map_err(|e| io(&abs, e))?;
            ignored_out.push(ignored(rel, special_why(&t)));
        }
    }
    Ok(())
}
