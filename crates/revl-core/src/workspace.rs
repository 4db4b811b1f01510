//! The workspace: path confinement and witnessed file effects with exact inverses.
//!
//! Confinement rules (checked before anything changes):
//! - `..` anywhere, and absolute paths not under the workspace root, are refused;
//! - an intermediate component that is a symlink is refused (a path *through* a symlink is
//!   never followed: if it leads out the code is `path-outside`, else `bad-args`);
//! - a last component that is a symlink is acted on as the link itself (a write replaces the
//!   link, never writes through it), and refused if the link leads out of the workspace.
//!
//! Every effect captures a preimage first (content, mode, kind, or absence) and records an
//! undo descriptor of type `restore`: a list of "put this path back to this state" entries,
//! applied in order. Applying it twice equals applying it once (idempotent).

use crate::blobs::BlobStore;
use crate::error::{Code, Error, Remedy, Result};
use crate::failpoint::Failpoints;
use crate::name;
use crate::undo::{self, FileDetail, FileKind, Image, RestoreEntry, TreeItem, Undo};
use crate::util::{blake3_hex, jcs};
use base64::Engine as _;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Preimages up to this size sit inline in the `intent` (docs/wal-format.md, "Records");
/// larger ones are blobs.
pub const INLINE_MAX: usize = 4096;
/// Content limit per call (docs/reference.md, "Effects").
pub const CONTENT_MAX: usize = 16 * 1024 * 1024;

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn unb64(s: &str) -> Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| {
            Error::bad_args(
                format!("invalid base64 content: {e}"),
                "send standard base64 (RFC 4648) with padding",
            )
        })
}

pub fn mode_str(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// Parse an octal mode such as `644`, `0755` or `0o600`.
pub fn parse_mode(s: &str) -> Result<u32> {
    let t = s.trim();
    let t = t.strip_prefix("0o").unwrap_or(t);
    match u32::from_str_radix(t, 8) {
        Ok(m) if m <= 0o7777 && !t.is_empty() => Ok(m),
        _ => Err(Error::bad_args(
            format!("mode {s:?} is not an octal mode between 0000 and 7777"),
            "give the mode in octal, e.g. 644 or 0755",
        )),
    }
}

/// The process umask, read from /proc (no unsafe code needed); 022 when unknown.
pub fn umask() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// A built-in file operation, validated against the workspace.
#[derive(Debug, Clone)]
pub enum FileOp {
    Write { path: String, content: Vec<u8> },
    Delete { path: String },
    Rename { from: String, to: String },
    Mkdir { path: String },
    Chmod { path: String, mode: u32 },
}

/// What a file effect will be recorded as, computed before anything changes.
#[derive(Debug, Clone)]
pub struct Planned {
    pub op: FileOp,
    pub label: String,
    pub site: String,
    /// The step's detail.
    pub detail: FileDetail,
    /// The restore of the preimage.
    pub undo: Undo,
    /// The intended post-images: repair rolls a change forward when the workspace shows
    /// all of them.
    pub after: Vec<Image>,
}

#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    fp: Failpoints,
    /// Digests known by stat, for a scan of many files (`with_index`); none by default.
    index: Option<std::sync::Arc<crate::statindex::StatIndex>>,
}

fn io(what: &Path, e: std::io::Error) -> Error {
    Error::io(what.display(), e)
}

/// Write all of `bytes` at offset 0 (a short write goes on where it stopped).
fn pwrite_all(
    fd: &rustix::fd::OwnedFd,
    bytes: &[u8],
) -> std::result::Result<(), rustix::io::Errno> {
    let mut at = 0usize;
    while at < bytes.len() {
        match rustix::io::pwrite(fd, &bytes[at..], at as u64)? {
            0 => return Err(rustix::io::Errno::NOSPC),
            n => at += n,
        }
    }
    Ok(())
}

/// One rule for a path that is not there, whichever verb names it (read, list, delete,
/// rename): bad input (`bad-args`, exit 2), with where to look. Other failures are I/O.
fn missing_or_io(rel: &str, abs: &Path, e: std::io::Error) -> Error {
    use std::io::ErrorKind::{NotADirectory, NotFound};
    if matches!(e.kind(), NotFound | NotADirectory) {
        let rel = if rel.is_empty() { "." } else { rel };
        return Error::bad_args(format!("{rel} does not exist"), "check the path")
            .with_remedy(Remedy::ListPath);
    }
    io(abs, e)
}

fn lstat(p: &Path) -> Result<Option<fs::Metadata>> {
    match fs::symlink_metadata(p) {
        Ok(m) => Ok(Some(m)),
        // A component on the way is not a directory: nothing can be there.
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) =>
        {
            Ok(None)
        }
        Err(e) => Err(io(p, e)),
    }
}

pub(crate) fn kind_of(m: &fs::Metadata) -> FileKind {
    let t = m.file_type();
    if t.is_symlink() {
        FileKind::Symlink
    } else if t.is_dir() {
        FileKind::Dir
    } else if t.is_file() {
        FileKind::File
    } else {
        FileKind::Special
    }
}

/// The blake3 of a file's content (`len` bytes by its `lstat`), streamed.
fn hash_file(p: &Path, len: u64) -> Result<String> {
    let f = File::open(p).map_err(|e| io(p, e))?;
    crate::util::blake3_reader_sized(f, len)
        .map(|(d, _)| d)
        .map_err(|e| io(p, e))
}

fn fsync_dir(p: &Path) -> Result<()> {
    File::open(p)
        .and_then(|f| f.sync_all())
        .map_err(|e| io(p, e))
}

impl Workspace {
    /// `root` must already be canonical (the session fixed it at creation).
    pub fn new(root: PathBuf, fp: Failpoints) -> Self {
        Workspace {
            root,
            fp,
            index: None,
        }
    }

    /// This workspace, its files' digests taken from `index` where their stat is as an
    /// earlier scan saw it, and what it reads noted there (crate::statindex).
    pub fn with_index(&self, index: std::sync::Arc<crate::statindex::StatIndex>) -> Self {
        Workspace {
            index: Some(index),
            ..self.clone()
        }
    }

    /// The digest of the file at `abs` whose `lstat` is `m`: known by its stat, or read.
    fn file_digest(&self, abs: &Path, m: &fs::Metadata) -> Result<String> {
        use std::os::unix::ffi::OsStrExt;
        let Some(idx) = &self.index else {
            return hash_file(abs, m.len());
        };
        let rel = abs
            .strip_prefix(&self.root)
            .unwrap_or(abs)
            .as_os_str()
            .as_bytes();
        if let Some(d) = idx.digest(rel, m) {
            return Ok(d);
        }
        let d = hash_file(abs, m.len())?;
        idx.note(rel, m, &d);
        Ok(d)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn abs(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(name::to_os(rel))
        }
    }

    /// Confine a user-given path: the normalised relative path, or a refusal.
    /// `allow_root`: whether the workspace root itself is acceptable (for `list`).
    pub fn confine(&self, p: &str, allow_root: bool) -> Result<String> {
        if p.is_empty() {
            return Err(Error::bad_args(
                "the path is empty",
                "give a path inside the workspace",
            ));
        }
        if p.contains('\0') {
            return Err(Error::bad_args(
                "the path contains a NUL byte",
                "give a path inside the workspace",
            ));
        }
        let outside = |why: String| {
            Error::new(
                Code::PathOutside,
                format!("path {p:?} {why}"),
                format!("give a path inside the workspace {}", self.root.display()),
            )
        };
        let os = name::to_os(p);
        let path = Path::new(&*os);
        let rel_path: PathBuf = if path.is_absolute() {
            match path.strip_prefix(&self.root) {
                Ok(r) => r.to_path_buf(),
                Err(_) => return Err(outside("is outside the workspace".into())),
            }
        } else {
            path.to_path_buf()
        };
        let mut parts: Vec<String> = Vec::new();
        for c in rel_path.components() {
            match c {
                // Any name is data: one that is not UTF-8 travels in its escaped form.
                Component::Normal(s) => parts.push(name::from_os(s).into_owned()),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(outside("uses `..`, which could leave the workspace".into()))
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(outside("is outside the workspace".into()))
                }
            }
        }
        if parts.is_empty() && !allow_root {
            return Err(Error::bad_args(
                format!("path {p:?} names the workspace root itself"),
                "give a file or directory inside the workspace",
            ));
        }
        // Walk the existing prefix with lstat: no component may be a symlink, except the last,
        // which must not lead out.
        let mut cur = self.root.clone();
        for (i, part) in parts.iter().enumerate() {
            cur.push(name::to_os(part));
            let last = i + 1 == parts.len();
            let Some(m) = lstat(&cur)? else { break };
            if m.file_type().is_symlink() {
                let inside = fs::canonicalize(&cur)
                    .map(|t| t.starts_with(&self.root))
                    .unwrap_or(false);
                if !inside {
                    return Err(outside(format!(
                        "{} symlink {} that leads out of the workspace",
                        if last { "is a" } else { "goes through the" },
                        parts[..=i].join("/")
                    )));
                }
                if !last {
                    return Err(Error::bad_args(
                        format!(
                            "path {p:?} goes through the symlink {}; revl does not follow symlinks",
                            parts[..=i].join("/")
                        ),
                        "use the real path inside the workspace",
                    ));
                }
            } else if !last && !m.is_dir() {
                return Err(Error::bad_args(
                    format!("{} is not a directory", parts[..=i].join("/")),
                    "check the path",
                ));
            }
        }
        Ok(parts.join("/"))
    }

    /// The topmost ancestor of `rel` (or `rel` itself) that does not exist, if any parent is
    /// missing; errors if an ancestor exists but is not a directory.
    pub(crate) fn topmost_absent_parent(&self, rel: &str) -> Result<Option<String>> {
        let parts: Vec<&str> = rel.split('/').collect();
        let mut cur = self.root.clone();
        for (i, part) in parts[..parts.len() - 1].iter().enumerate() {
            cur.push(name::to_os(part));
            match lstat(&cur)? {
                None => return Ok(Some(parts[..=i].join("/"))),
                Some(m) if m.is_dir() => {}
                Some(_) => {
                    return Err(Error::bad_args(
                        format!("{} exists and is not a directory", parts[..=i].join("/")),
                        "delete or rename it first",
                    ))
                }
            }
        }
        Ok(None)
    }

    /// The kind, permission bits and link count of `rel`, not following a symlink; `None`
    /// when absent.
    pub(crate) fn lstat_rel(&self, rel: &str) -> Result<Option<(FileKind, u32, u64)>> {
        Ok(self
            .lstat_meta(rel)?
            .map(|m| (kind_of(&m), m.permissions().mode() & 0o7777, m.nlink())))
    }

    /// The `lstat` of `rel`; `None` when absent.
    pub(crate) fn lstat_meta(&self, rel: &str) -> Result<Option<fs::Metadata>> {
        lstat(&self.abs(rel))
    }

    /// Observe one path: its kind, digest and mode (a directory's digest covers the whole
    /// tree, a symlink's its target).
    pub fn observe(&self, rel: &str) -> Result<Image> {
        let abs = self.abs(rel);
        let Some(m) = lstat(&abs)? else {
            return Ok(Image::absent(rel));
        };
        self.observe_stat(rel, &abs, &m)
    }

    /// [`Workspace::observe`] of `rel` (at `abs`) whose `lstat` is `m`.
    fn observe_stat(&self, rel: &str, abs: &Path, m: &fs::Metadata) -> Result<Image> {
        let abs = abs.to_path_buf();
        let mode = Some(mode_str(m.permissions().mode()));
        let kind = kind_of(m);
        let (digest, mode) = match kind {
            FileKind::File => (Some(self.file_digest(&abs, m)?), mode),
            FileKind::Dir => {
                let listing = self.listing(&abs, false, None)?;
                (Some(listing_digest(&listing)), mode)
            }
            FileKind::Symlink => {
                let t = fs::read_link(&abs).map_err(|e| io(&abs, e))?;
                (Some(blake3_hex(t.as_os_str().as_encoded_bytes())), None)
            }
            _ => (None, None),
        };
        Ok(Image {
            digest,
            kind: Some(kind),
            mode,
            path: rel.to_string(),
        })
    }

    /// Observe a directory `rel` and every entry below it (one walk): its image, whose
    /// digest covers the whole tree, and each entry's image in path order (a file's digest
    /// and mode, a symlink's target digest, a directory's mode). With `keep`, the bytes of
    /// small files (at most [`INLINE_MAX`] each) are returned too, while their sum fits.
    pub fn observe_entries(
        &self,
        rel: &str,
        mut keep: Option<&mut KeptBytes>,
    ) -> Result<(Image, Vec<Image>)> {
        let abs = self.abs(rel);
        let listing = self.listing(&abs, false, None)?;
        let m = lstat(&abs)?.ok_or_else(|| io(&abs, std::io::ErrorKind::NotFound.into()))?;
        let dir = Image {
            digest: Some(listing_digest(&listing)),
            kind: Some(FileKind::Dir),
            mode: Some(mode_str(m.permissions().mode())),
            path: rel.to_string(),
        };
        let mut entries = Vec::with_capacity(listing.len());
        for it in listing {
            let path = format!("{rel}/{}", it.path);
            let digest = match it.kind {
                FileKind::Symlink => it.target.as_deref().map(|t| blake3_hex(&name::to_bytes(t))),
                _ => it.digest,
            };
            if let (Some(k), FileKind::File, Some(d)) = (keep.as_deref_mut(), it.kind, &digest) {
                k.offer(&self.abs(&path), d);
            }
            entries.push(Image {
                digest,
                kind: Some(it.kind),
                mode: it.mode,
                path,
            });
        }
        Ok((dir, entries))
    }

    /// Observe `rel` and, when it is a directory, everything below it, in path order. Files
    /// are hashed once each; a directory's digest (which covers its whole tree) is computed
    /// only where `dir_digest(path)` asks for it.
    pub fn observe_tree(&self, rel: &str, dir_digest: &dyn Fn(&str) -> bool) -> Result<Vec<Image>> {
        let mut out = Vec::new();
        self.observe_into(rel, dir_digest, &mut out)?;
        Ok(out)
    }

    fn observe_into(
        &self,
        rel: &str,
        dir_digest: &dyn Fn(&str) -> bool,
        out: &mut Vec<Image>,
    ) -> Result<()> {
        let abs = self.abs(rel);
        let Some(m) = lstat(&abs)? else {
            return Ok(());
        };
        if kind_of(&m) != FileKind::Dir {
            out.push(self.observe_stat(rel, &abs, &m)?);
            return Ok(());
        }
        let digest = if dir_digest(rel) {
            Some(listing_digest(&self.listing(&abs, false, None)?))
        } else {
            None
        };
        out.push(Image {
            digest,
            kind: Some(FileKind::Dir),
            mode: Some(mode_str(m.permissions().mode())),
            path: rel.to_string(),
        });
        let mut names: Vec<String> = Vec::new();
        for e in fs::read_dir(&abs).map_err(|e| io(&abs, e))? {
            let e = e.map_err(|e| io(&abs, e))?;
            names.push(name::from_os(&e.file_name()).into_owned());
        }
        names.sort();
        for n in names {
            self.observe_into(&format!("{rel}/{n}"), dir_digest, out)?;
        }
        Ok(())
    }

    /// Keep what is at `rel` in the blob store (a file's content, streamed; a symlink's
    /// target) and return its digest; `None` for anything else.
    pub fn keep(&self, rel: &str, blobs: &BlobStore) -> Result<Option<String>> {
        let abs = self.abs(rel);
        match lstat(&abs)?.map(|m| kind_of(&m)) {
            Some(FileKind::File) => blobs.put_file(&abs).map(Some),
            Some(FileKind::Symlink) => {
                let t = fs::read_link(&abs).map_err(|e| io(&abs, e))?;
                blobs.put(t.as_os_str().as_encoded_bytes()).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The bytes of a file (its content) or a symlink (its target).
    pub fn bytes_of(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        let abs = self.abs(rel);
        match lstat(&abs)?.map(|m| kind_of(&m)) {
            Some(FileKind::File) => fs::read(&abs).map(Some).map_err(|e| io(&abs, e)),
            Some(FileKind::Symlink) => fs::read_link(&abs)
                .map(|t| Some(t.into_os_string().into_encoded_bytes()))
                .map_err(|e| io(&abs, e)),
            _ => Ok(None),
        }
    }

    /// Does the workspace show this post-image? Every member it names must match.
    pub fn shows(&self, after: &Image) -> Result<bool> {
        Ok(after.shown_by(&self.observe(&after.path)?))
    }

    /// A directory listing, sorted, recursive. With `blobs`, file contents are captured
    /// (inline up to 4 KiB, else as blobs); without, only their digests.
    fn listing(
        &self,
        dir: &Path,
        capture: bool,
        blobs: Option<&BlobStore>,
    ) -> Result<Vec<TreeItem>> {
        let mut out = Vec::new();
        self.walk(dir, "", capture, blobs, &mut out)?;
        Ok(out)
    }

    fn walk(
        &self,
        dir: &Path,
        prefix: &str,
        capture: bool,
        blobs: Option<&BlobStore>,
        out: &mut Vec<TreeItem>,
    ) -> Result<()> {
        let mut names = Vec::new();
        for e in fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let e = e.map_err(|e| io(dir, e))?;
            names.push(name::from_os(&e.file_name()).into_owned());
        }
        names.sort();
        for name in names {
            let abs = dir.join(name::to_os(&name));
            let rel = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let m = fs::symlink_metadata(&abs).map_err(|e| io(&abs, e))?;
            let mode = mode_str(m.permissions().mode());
            let item = |kind, mode, digest, content, target| TreeItem {
                content,
                digest,
                kind,
                mode,
                path: rel.clone(),
                target,
            };
            match kind_of(&m) {
                FileKind::Dir => {
                    out.push(item(FileKind::Dir, Some(mode), None, None, None));
                    self.walk(&abs, &rel, capture, blobs, out)?;
                }
                FileKind::File => {
                    let (digest, content) = match (capture, blobs) {
                        (true, Some(b)) if m.len() > INLINE_MAX as u64 => (b.put_file(&abs)?, None),
                        (true, _) if m.len() <= INLINE_MAX as u64 => {
                            let bytes = fs::read(&abs).map_err(|e| io(&abs, e))?;
                            (blake3_hex(&bytes), Some(b64(&bytes)))
                        }
                        _ => (self.file_digest(&abs, &m)?, None),
                    };
                    out.push(item(
                        FileKind::File,
                        Some(mode),
                        Some(digest),
                        content,
                        None,
                    ));
                }
                FileKind::Symlink => {
                    let t = fs::read_link(&abs).map_err(|e| io(&abs, e))?;
                    let t = name::from_os(t.as_os_str()).into_owned();
                    out.push(item(FileKind::Symlink, None, None, None, Some(t)));
                }
                k => return Err(unwitnessed(&rel, k)),
            }
        }
        Ok(())
    }

    /// Capture the preimage of `rel` (its state now) as a restore entry.
    pub fn capture(&self, rel: &str, blobs: &BlobStore) -> Result<RestoreEntry> {
        let abs = self.abs(rel);
        let path = rel.to_string();
        let Some(m) = lstat(&abs)? else {
            return Ok(RestoreEntry::Absent { path });
        };
        let mode = mode_str(m.permissions().mode());
        match kind_of(&m) {
            FileKind::File => {
                // Small preimages sit inline; large ones are streamed into the blob store.
                let (digest, content, blob) = if m.len() <= INLINE_MAX as u64 {
                    let bytes = fs::read(&abs).map_err(|e| io(&abs, e))?;
                    (blake3_hex(&bytes), Some(b64(&bytes)), None)
                } else {
                    let d = blobs.put_file(&abs)?;
                    (d.clone(), None, Some(d))
                };
                Ok(RestoreEntry::File {
                    path,
                    mode,
                    digest,
                    content,
                    blob,
                })
            }
            FileKind::Dir => {
                let listing = self.listing(&abs, true, Some(blobs))?;
                let tree = blobs.put(jcs(&undo::to_value(&listing)).as_bytes())?;
                // The observable digest covers digests only, not inline contents.
                let plain = self.listing(&abs, false, None)?;
                Ok(RestoreEntry::Dir {
                    path,
                    mode,
                    tree,
                    digest: listing_digest(&plain),
                })
            }
            FileKind::Symlink => {
                let t = fs::read_link(&abs).map_err(|e| io(&abs, e))?;
                Ok(RestoreEntry::Symlink {
                    path,
                    target: name::from_os(t.as_os_str()).into_owned(),
                })
            }
            k => Err(unwitnessed(rel, k)),
        }
    }

    /// Every blob a restore entry needs, for the `missing-preimage` check before a rewind.
    pub fn blobs_needed(entry: &RestoreEntry, blobs: &BlobStore) -> Vec<String> {
        match entry {
            RestoreEntry::File { blob: Some(b), .. } => vec![b.clone()],
            RestoreEntry::Dir { tree, .. } => {
                let mut out = vec![tree.clone()];
                let items = blobs
                    .get(tree, None)
                    .ok()
                    .and_then(|bytes| serde_json::from_slice::<Vec<TreeItem>>(&bytes).ok());
                for it in items.into_iter().flatten() {
                    if let (FileKind::File, None, Some(d)) = (it.kind, &it.content, it.digest) {
                        out.push(d);
                    }
                }
                out
            }
            _ => Vec::new(),
        }
    }

    /// Plan a file effect: validate, capture the preimage, compute the intended post-image.
    /// Nothing in the workspace changes.
    pub fn plan(&self, op: FileOp, blobs: &BlobStore) -> Result<Planned> {
        // Read only when a new file or directory needs it: it costs a read of /proc.
        let um = umask;
        match op {
            FileOp::Write { path, content } => {
                let rel = self.confine(&path, false)?;
                if content.len() > CONTENT_MAX {
                    return Err(Error::bad_args(
                        format!(
                            "content is {} bytes; the limit is 16 MiB per call",
                            content.len()
                        ),
                        "put it in place with a sandboxed command (exec, e.g. argv [\"cp\", SOURCE, PATH]): one rewindable step of any size",
                    ));
                }
                let abs = self.abs(&rel);
                let existing = lstat(&abs)?;
                if existing.as_ref().is_some_and(|m| m.is_dir()) {
                    return Err(Error::bad_args(
                        format!("{rel} is a directory"),
                        "write to a file path",
                    ));
                }
                let pre = match self.topmost_absent_parent(&rel)? {
                    Some(top) => RestoreEntry::Absent { path: top },
                    None => self.capture(&rel, blobs)?,
                };
                let mode = match &existing {
                    Some(m) if m.is_file() => m.permissions().mode() & 0o7777,
                    _ => 0o644 & !um(),
                };
                let after = Image {
                    digest: Some(blake3_hex(&content)),
                    kind: Some(FileKind::File),
                    mode: Some(mode_str(mode)),
                    path: rel.clone(),
                };
                Ok(Planned {
                    label: format!("fs.write {rel}"),
                    site: "write".into(),
                    detail: detail(&rel, None, &after),
                    undo: restore(vec![pre]),
                    after: vec![after],
                    op: FileOp::Write { path: rel, content },
                })
            }
            FileOp::Delete { path } => {
                let rel = self.confine(&path, false)?;
                if lstat(&self.abs(&rel))?.is_none() {
                    return Err(
                        Error::bad_args(format!("{rel} does not exist"), "check the path")
                            .with_remedy(Remedy::ListPath),
                    );
                }
                let pre = self.capture(&rel, blobs)?;
                let after = Image::absent(rel.clone());
                Ok(Planned {
                    label: format!("fs.delete {rel}"),
                    site: "delete".into(),
                    detail: detail(&rel, None, &after),
                    undo: restore(vec![pre]),
                    after: vec![after],
                    op: FileOp::Delete { path: rel },
                })
            }
            FileOp::Rename { from, to } => {
                let rf = self.confine(&from, false)?;
                let rt = self.confine(&to, false)?;
                let Some(fm) = lstat(&self.abs(&rf))? else {
                    return Err(
                        Error::bad_args(format!("{rf} does not exist"), "check the path")
                            .with_remedy(Remedy::ListPath),
                    );
                };
                if rf == rt {
                    return Err(Error::bad_args(
                        "rename source and target are the same path",
                        "give two different paths",
                    ));
                }
                if rt.starts_with(&format!("{rf}/")) {
                    return Err(Error::bad_args(
                        format!("cannot move {rf} inside itself"),
                        "choose a target outside the source",
                    ));
                }
                let tm = lstat(&self.abs(&rt))?;
                if let Some(tm) = &tm {
                    if tm.is_dir() {
                        let empty = fs::read_dir(self.abs(&rt))
                            .map_err(|e| io(&self.abs(&rt), e))?
                            .next()
                            .is_none();
                        if !empty {
                            return Err(Error::bad_args(
                                format!("target {rt} is a non-empty directory"),
                                "delete it first or choose another target",
                            ));
                        }
                        if !fm.is_dir() {
                            return Err(Error::bad_args(
                                format!("target {rt} is a directory and {rf} is not"),
                                "choose a file path as target",
                            ));
                        }
                    } else if fm.is_dir() {
                        return Err(Error::bad_args(
                            format!("{rf} is a directory and target {rt} is not"),
                            "choose a new path as target",
                        ));
                    }
                }
                let pre_to = match self.topmost_absent_parent(&rt)? {
                    Some(top) => RestoreEntry::Absent { path: top },
                    None => self.capture(&rt, blobs)?,
                };
                let pre_from = self.capture(&rf, blobs)?;
                let moved = self.observe(&rf)?.at(rt.clone());
                let gone = Image::absent(rf.clone());
                Ok(Planned {
                    label: format!("fs.rename {rf} -> {rt}"),
                    site: "rename".into(),
                    detail: detail(&rf, Some(&rt), &moved),
                    undo: restore(vec![pre_to, pre_from]),
                    after: vec![moved, gone],
                    op: FileOp::Rename { from: rf, to: rt },
                })
            }
            FileOp::Mkdir { path } => {
                let rel = self.confine(&path, false)?;
                if let Some(m) = lstat(&self.abs(&rel))? {
                    return Err(Error::bad_args(
                        format!("{rel} already exists ({})", kind_of(&m).as_str()),
                        "mkdir creates a new directory; choose another path",
                    ));
                }
                let top = self
                    .topmost_absent_parent(&rel)?
                    .unwrap_or_else(|| rel.clone());
                let after = Image {
                    digest: Some(empty_dir_digest().to_string()),
                    kind: Some(FileKind::Dir),
                    mode: Some(mode_str(0o777 & !um())),
                    path: rel.clone(),
                };
                Ok(Planned {
                    label: format!("fs.mkdir {rel}"),
                    site: "mkdir".into(),
                    detail: detail(&rel, None, &after),
                    undo: restore(vec![RestoreEntry::Absent { path: top }]),
                    after: vec![after],
                    op: FileOp::Mkdir { path: rel },
                })
            }
            FileOp::Chmod { path, mode } => {
                let rel = self.confine(&path, false)?;
                let Some(m) = lstat(&self.abs(&rel))? else {
                    return Err(
                        Error::bad_args(format!("{rel} does not exist"), "check the path")
                            .with_remedy(Remedy::ListPath),
                    );
                };
                if m.file_type().is_symlink() {
                    return Err(Error::bad_args(
                        format!("{rel} is a symlink; chmod would change its target"),
                        "chmod the real path",
                    ));
                }
                // A mode belongs to the inode: with other hard links (possibly outside the
                // workspace) a chmod would change them too, and nothing proves they are inside.
                if m.is_file() && m.nlink() > 1 {
                    return Err(Error::new(
                        Code::PathOutside,
                        format!("{rel} has {} hard links; a chmod would change every one of them, and revl cannot prove they are inside the workspace", m.nlink()),
                        "write the file to a new name first (a write replaces the name, never the shared inode)",
                    ));
                }
                let kind = kind_of(&m);
                let pre = RestoreEntry::Mode {
                    path: rel.clone(),
                    mode: mode_str(m.permissions().mode()),
                };
                let after = Image {
                    kind: Some(kind),
                    mode: Some(mode_str(mode)),
                    path: rel.clone(),
                    ..Image::default()
                };
                Ok(Planned {
                    label: format!("fs.chmod {rel}"),
                    site: "chmod".into(),
                    detail: detail(&rel, None, &after),
                    undo: restore(vec![pre]),
                    after: vec![after],
                    op: FileOp::Chmod { path: rel, mode },
                })
            }
        }
    }

    /// The deterministic temp file a write of step `step` stages its content in: at the
    /// workspace root, so that the next attach can always find and remove a leftover (even when
    /// the intent that would have named it was torn).
    pub fn temp_for(&self, step: u64) -> PathBuf {
        self.root.join(format!(".revl-{step}.tmp"))
    }

    /// Stage a write: its content in the deterministic temp file (not yet fsynced: the caller
    /// fsyncs the returned file while the intent is fsynced, so the two overlap). Nothing
    /// witnessed changes (attach removes a leftover temp). `None` when not a write.
    pub fn stage(&self, p: &Planned, step: u64) -> Result<Option<File>> {
        let FileOp::Write { path, content } = &p.op else {
            return Ok(None);
        };
        if in_place(p) {
            return Ok(None);
        }
        let tmp = self.temp_for(step);
        let res = (|| -> std::io::Result<File> {
            let _ = fs::remove_file(&tmp);
            self.fp.enospc()?;
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(content)?;
            f.set_permissions(fs::Permissions::from_mode(
                write_mode(p).map_err(|e| std::io::Error::other(e.message))?,
            ))?;
            Ok(f)
        })();
        res.map(Some).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            io(&self.abs(path), e)
        })
    }

    /// Perform a planned change (after its intent is durable).
    ///
    /// The change is made through directory handles, never by path: every component from the
    /// workspace root down is opened with `O_NOFOLLOW | O_DIRECTORY`, so a component swapped
    /// for a symlink after `confine` checked it makes the change fail (`path-outside`) instead
    /// of landing outside the workspace. A write renames its staged temp file into place and
    /// fsyncs the directories involved; other changes fsync their directory here too.
    ///
    /// Returns true when the change was a small overwrite made in place and, as asked
    /// (`defer_sync`: its intent carries the bytes), not fsynced.
    pub fn apply(&self, p: &Planned, step: u64, staged: bool, defer_sync: bool) -> Result<bool> {
        if let FileOp::Write { path, content } = &p.op {
            if !staged && in_place(p) {
                let (parent, name) = split_rel(path);
                let name = &*name;
                let dir = self.dir_beneath(parent, true)?;
                if self.overwrite_in_place(&dir, name, path, content, p, !defer_sync)? {
                    return Ok(defer_sync);
                }
            }
        }
        self.apply_change(p, step, staged).map(|()| false)
    }

    fn apply_change(&self, p: &Planned, step: u64, staged: bool) -> Result<()> {
        use rustix::fs::{
            fchmod, fsync, mkdirat, openat, renameat, statat, unlinkat, AtFlags, FileType, Mode,
            OFlags,
        };
        let sys =
            |what: &str, e: rustix::io::Errno| io(&self.root.join(what), std::io::Error::from(e));
        match &p.op {
            FileOp::Write { path, content } => {
                let (parent, name) = split_rel(path);
                let name = &*name;
                let dir = self.dir_beneath(parent, true)?;
                let root = self.dir_beneath("", false)?;
                let tmp_name = format!(".revl-{step}.tmp");
                if !staged {
                    self.write_temp(
                        &self.temp_for(step),
                        &self.abs(path),
                        content,
                        write_mode(p)?,
                    )?;
                }
                if let Ok(st) = statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                        self.remove_beneath(&dir, name, step)?;
                    }
                }
                match renameat(&root, tmp_name.as_str(), &dir, name) {
                    // The new entry, and the temp's gone from the root, are made durable here:
                    // the WAL's own fsync commits them only on filesystems whose journal
                    // holds every metadata change (ext4, xfs), not on btrfs or under POSIX.
                    Ok(()) => {
                        fsync(&dir).map_err(|e| sys(path, e))?;
                        if !split_rel(path).0.is_empty() {
                            fsync(&root).map_err(|e| sys(path, e))?;
                        }
                        Ok(())
                    }
                    // A mount point inside the workspace: write the temp next to the target.
                    Err(rustix::io::Errno::XDEV) => {
                        let _ = unlinkat(&root, tmp_name.as_str(), AtFlags::empty());
                        self.replace_beside(&dir, name, path, &tmp_name, content, write_mode(p)?)
                    }
                    Err(e) => Err(sys(path, e)),
                }
            }
            FileOp::Delete { path } => {
                let (parent, name) = split_rel(path);
                let name = &*name;
                let dir = self.dir_beneath(parent, false)?;
                self.remove_beneath(&dir, name, step)?;
                fsync(&dir).map_err(|e| sys(path, e))
            }
            FileOp::Rename { from, to } => {
                let (fparent, fname) = split_rel(from);
                let (tparent, tname) = split_rel(to);
                let from_dir = self.dir_beneath(fparent, false)?;
                let to_dir = self.dir_beneath(tparent, true)?;
                self.fp.enospc().map_err(|e| io(&self.abs(to), e))?;
                renameat(&from_dir, fname, &to_dir, tname).map_err(|e| match e {
                    // fuse-overlayfs (an unprivileged user's layered branch) cannot rename a
                    // directory of its lower layer.
                    rustix::io::Errno::XDEV => Error::new(
                        Code::Io,
                        format!(
                            "{from} cannot be renamed here: it is a directory this workspace's filesystem cannot move (a directory of a fuse-overlayfs branch's lower layer): nothing changed"
                        ),
                        "move it with a command instead (revl exec SESSION -- mv FROM TO), which copies it",
                    ),
                    e => sys(from, e),
                })?;
                fsync(&to_dir).map_err(|e| sys(to, e))?;
                fsync(&from_dir).map_err(|e| sys(from, e))
            }
            FileOp::Mkdir { path } => {
                let (parent, name) = split_rel(path);
                let name = &*name;
                self.fp.enospc().map_err(|e| io(&self.abs(path), e))?;
                let dir = self.dir_beneath(parent, true)?;
                mkdirat(&dir, name, Mode::from_raw_mode(0o777)).map_err(|e| sys(path, e))?;
                fsync(&dir).map_err(|e| sys(path, e))
            }
            FileOp::Chmod { path, mode } => {
                let (parent, name) = split_rel(path);
                let name = &*name;
                let dir = self.dir_beneath(parent, false)?;
                let fd = openat(
                    &dir,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| self.beneath_error(path, e))?;
                fchmod(&fd, Mode::from_raw_mode(*mode)).map_err(|e| sys(path, e))?;
                fsync(&fd).map_err(|e| sys(path, e))
            }
        }
    }

    /// Open the directory `rel_dir` (relative to the root; "" is the root) component by
    /// component without following any symlink, creating missing components when `create`.
    fn dir_beneath(&self, rel_dir: &str, create: bool) -> Result<rustix::fd::OwnedFd> {
        use rustix::fs::{fsync, mkdirat, openat, Mode, OFlags, CWD};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut fd =
            openat(CWD, &self.root, flags, Mode::empty()).map_err(|e| io(&self.root, e.into()))?;
        for comp in rel_dir.split('/').filter(|c| !c.is_empty()) {
            let comp = &*name::to_os(comp);
            let next = match openat(&fd, comp, flags | OFlags::NOFOLLOW, Mode::empty()) {
                Err(rustix::io::Errno::NOENT) if create => {
                    self.fp.enospc().map_err(|e| io(&self.abs(rel_dir), e))?;
                    match mkdirat(&fd, comp, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(io(&self.abs(rel_dir), e.into())),
                    }
                    fsync(&fd).map_err(|e| io(&self.abs(rel_dir), e.into()))?;
                    openat(&fd, comp, flags | OFlags::NOFOLLOW, Mode::empty())
                }
                r => r,
            };
            fd = next.map_err(|e| self.beneath_error(rel_dir, e))?;
        }
        Ok(fd)
    }

    fn beneath_error(&self, rel: &str, e: rustix::io::Errno) -> Error {
        match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => Error::new(
                Code::PathOutside,
                format!("a component of {rel:?} is now a symlink or not a directory; revl does not follow it"),
                "something changed the workspace while revl worked in it; check it, then run the command again",
            ),
            e => io(&self.abs(rel), e.into()),
        }
    }

    /// Remove what the removal of a tree by step `step` left at the root, if anything.
    pub fn remove_trash(&self, step: u64) -> Result<()> {
        remove_any(&self.root.join(format!(".revl-trash-{step}")))
    }

    /// Remove `name` in `dir` (a file, a link, or a whole tree) without following symlinks: a
    /// tree is first moved, by handle, to a trash name at the root, then removed (std's
    /// remove_dir_all does not follow symlinks).
    fn remove_beneath(
        &self,
        dir: &rustix::fd::OwnedFd,
        name: &std::ffi::OsStr,
        step: u64,
    ) -> Result<()> {
        use rustix::fs::{renameat, statat, unlinkat, AtFlags, FileType};
        let st = match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(io(&self.root.join(name), e.into())),
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return unlinkat(dir, name, AtFlags::empty())
                .map_err(|e| io(&self.root.join(name), e.into()));
        }
        let root = self.dir_beneath("", false)?;
        let trash = format!(".revl-trash-{step}");
        remove_any(&self.root.join(&trash))?;
        match renameat(dir, name, &root, trash.as_str()) {
            Ok(()) => {}
            // A directory of an overlay's lower layer that the overlay cannot move
            // (fuse-overlayfs, in a layered branch's DIR): removed where it stands, through
            // the handle. A crash part-way leaves part of the tree; the repair runs the
            // removal again.
            Err(rustix::io::Errno::XDEV) => {
                return remove_tree_at(dir, name).map_err(|e| io(&self.root.join(name), e));
            }
            Err(e) => return Err(io(&self.root.join(name), e.into())),
        }
        self.fp.point("effect.mid-remove");
        remove_any(&self.root.join(&trash))
    }

    /// Overwrite a small regular file in place: one `pwrite` of at most a page, a truncate
    /// when it shrank, one `fdatasync`. Safe because the intent before it holds the whole
    /// preimage inline and the intended post-image digest: a crash part-way leaves a file
    /// that shows neither, and repair puts the preimage back (docs/architecture.md, "Attach
    /// and repair"). False (nothing written) when the target is no longer a small regular
    /// file with one link, so a hard link never carries a change outside the workspace: the
    /// caller stages and renames.
    fn overwrite_in_place(
        &self,
        dir: &rustix::fd::OwnedFd,
        name: &std::ffi::OsStr,
        path: &str,
        content: &[u8],
        p: &Planned,
        sync: bool,
    ) -> Result<bool> {
        use rustix::fs::{fchmod, fdatasync, fstat, ftruncate, openat, FileType, Mode, OFlags};
        let sys = |e: rustix::io::Errno| io(&self.abs(path), std::io::Error::from(e));
        let fd = match openat(
            dir,
            name,
            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(_) => return Ok(false),
        };
        let st = fstat(&fd).map_err(sys)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_nlink != 1
            || st.st_size as u64 > INLINE_MAX as u64
        {
            return Ok(false);
        }
        self.fp.enospc().map_err(|e| io(&self.abs(path), e))?;
        let torn = self.fp.fires("effect.torn-write");
        let body = if torn {
            &content[..content.len() / 2]
        } else {
            content
        };
        pwrite_all(&fd, body).map_err(sys)?;
        if !torn && st.st_size as u64 > content.len() as u64 {
            ftruncate(&fd, content.len() as u64).map_err(sys)?;
        }
        let mode = write_mode(p)?;
        let chmod = st.st_mode & 0o7777 != mode;
        if chmod {
            // Changed since the plan: put the planned mode back.
            fchmod(&fd, Mode::from_raw_mode(mode)).map_err(sys)?;
        }
        // Unless the intent carries the bytes (then repair can write them again), make them
        // durable now; fdatasync would not carry a mode.
        if sync && chmod {
            rustix::fs::fsync(&fd).map_err(sys)?;
        } else if sync {
            fdatasync(&fd).map_err(sys)?;
        }
        if torn {
            crate::failpoint::crash("effect.torn-write");
        }
        Ok(true)
    }

    /// Replace `name` in `dir` by a new file with `content` and `mode`: written to `tmp_name`
    /// next to it, fsynced, renamed over it, the directory fsynced. Used where the staged temp
    /// at the root cannot be renamed (a mount point inside the workspace) and where a file
    /// must not be written in place (it has another hard link).
    fn replace_beside(
        &self,
        dir: &rustix::fd::OwnedFd,
        name: &std::ffi::OsStr,
        path: &str,
        tmp_name: &str,
        content: &[u8],
        mode: u32,
    ) -> Result<()> {
        use rustix::fs::{fsync, openat, renameat, unlinkat, AtFlags, Mode, OFlags};
        let sys = |e: rustix::io::Errno| io(&self.abs(path), std::io::Error::from(e));
        let _ = unlinkat(dir, tmp_name, AtFlags::empty());
        let f = openat(
            dir,
            tmp_name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(sys)?;
        let mut file = File::from(f);
        self.fp.enospc().map_err(|e| io(&self.abs(path), e))?;
        let written = file
            .write_all(content)
            .and_then(|_| file.set_permissions(fs::Permissions::from_mode(mode)))
            .and_then(|_| file.sync_all());
        if let Err(e) = written {
            let _ = unlinkat(dir, tmp_name, AtFlags::empty());
            return Err(io(&self.abs(path), e));
        }
        renameat(dir, tmp_name, dir, name).map_err(|e| {
            let _ = unlinkat(dir, tmp_name, AtFlags::empty());
            sys(e)
        })?;
        fsync(dir).map_err(sys)
    }

    /// Write a small file's bytes and mode again, durably (repair of an in-place write a
    /// power loss undid, docs/wal-format.md, "Durability order"), reached through directory
    /// handles like every change: in place, or by rename when the file has another hard
    /// link (a write through it could land outside the workspace). False, and nothing
    /// written, when the path is no longer a regular file (removed, or replaced by a
    /// directory or a symlink since): revl does not recreate what a person removed;
    /// `verify` reports it.
    pub fn rewrite_small(&self, path: &str, content: &[u8], mode: &str, step: u64) -> Result<bool> {
        use rustix::fs::{fchmod, fstat, fsync, ftruncate, openat, FileType, Mode, OFlags};
        let sys = |e: rustix::io::Errno| io(&self.abs(path), std::io::Error::from(e));
        let mode = parse_mode(mode)?;
        match fs::symlink_metadata(self.abs(path)) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Ok(false),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(false)
            }
            Err(e) => return Err(io(&self.abs(path), e)),
        }
        let (parent, name) = split_rel(path);
        let name = &*name;
        let dir = self.dir_beneath(parent, false)?;
        let fd = match openat(
            &dir,
            name,
            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP | rustix::io::Errno::ISDIR) => {
                return Ok(false)
            }
            Err(e) => return Err(self.beneath_error(path, e)),
        };
        let st = fstat(&fd).map_err(sys)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Ok(false);
        }
        if st.st_nlink != 1 {
            drop(fd);
            let tmp = format!(".revl-{step}.tmp");
            self.replace_beside(&dir, name, path, &tmp, content, mode)?;
            return Ok(true);
        }
        pwrite_all(&fd, content).map_err(sys)?;
        ftruncate(&fd, content.len() as u64).map_err(sys)?;
        fchmod(&fd, Mode::from_raw_mode(mode)).map_err(sys)?;
        fsync(&fd).map_err(sys)?;
        Ok(true)
    }

    /// fsync these files (several at once), skipping any that is gone: the in-place writes
    /// of [`crate::state::Unsettled`] become durable in their files.
    pub fn sync_files(&self, paths: &[&str]) -> Result<()> {
        let lanes = paths.len().clamp(1, 8);
        let lane = |lane: usize| -> Result<()> {
            for p in paths.iter().skip(lane).step_by(lanes) {
                let abs = self.abs(p);
                match File::open(&abs).and_then(|f| f.sync_all()) {
                    Ok(()) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                        ) => {}
                    Err(e) => return Err(io(&abs, e)),
                }
            }
            Ok(())
        };
        // One file (a session rewriting the same file): no thread to start for it.
        if lanes == 1 {
            return lane(0);
        }
        std::thread::scope(|sc| {
            let handles: Vec<_> = (0..lanes).map(|l| sc.spawn(move || lane(l))).collect();
            handles.into_iter().try_for_each(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::new(
                        Code::Io,
                        "an fsync thread panicked",
                        "run the command again",
                    ))
                })
            })
        })
    }

    fn write_temp(&self, tmp: &Path, dest: &Path, content: &[u8], mode: u32) -> Result<()> {
        let res = (|| -> std::io::Result<()> {
            let _ = fs::remove_file(tmp);
            self.fp.enospc()?;
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(tmp)?;
            f.write_all(content)?;
            f.set_permissions(fs::Permissions::from_mode(mode))?;
            f.sync_all()?;
            Ok(())
        })();
        if let Err(e) = res {
            let _ = fs::remove_file(tmp);
            return Err(io(dest, e));
        }
        Ok(())
    }

    /// Run a file restore: put every listed path back to its recorded state, in order.
    /// Idempotent. Intermediate components must still be real directories.
    pub fn restore(&self, entries: &[RestoreEntry], blobs: &BlobStore, step: u64) -> Result<()> {
        // A tree this restore was removing when a crash stopped it sits at the root under
        // its trash name: a repair running the restore again removes it first.
        self.remove_trash(step)?;
        for e in entries {
            self.restore_entry(e, blobs, step)?;
        }
        Ok(())
    }

    /// Move `tmp` (a file or symlink revl staged at the workspace root) to `rel`, replacing
    /// what is there (a directory is removed first), through directory handles; the
    /// directory is fsynced. Across a mount point inside the workspace, by path.
    fn place_beneath(&self, tmp: &Path, rel: &str, step: u64) -> Result<()> {
        use rustix::fs::{fsync, renameat, statat, AtFlags, FileType};
        let (prel, name) = split_rel(rel);
        let name = &*name;
        let tmp_name = tmp.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let placed = (|| {
            let dir = self.dir_beneath(prel, true)?;
            if let Ok(st) = statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                    self.remove_beneath(&dir, name, step)?;
                }
            }
            let root = self.dir_beneath("", false)?;
            match renameat(&root, tmp_name, &dir, name) {
                Ok(()) => fsync(&dir).map_err(|e| io(&self.abs(rel), e.into())),
                Err(rustix::io::Errno::XDEV) => {
                    // Across a mount point: copied next to its place, through the directory
                    // handle, into a name made here (O_EXCL | O_NOFOLLOW: whatever was at
                    // that name, a planted symlink included, is removed, never followed).
                    let abs = self.abs(rel);
                    let staged = format!(".revl-restore-{step}.tmp");
                    stage_copy_at(&dir, &staged, tmp).map_err(|e| io(&abs, e))?;
                    let _ = fs::remove_file(tmp);
                    renameat(&dir, staged.as_str(), &dir, name).map_err(|e| io(&abs, e.into()))?;
                    fsync(&dir).map_err(|e| io(&abs, e.into()))
                }
                Err(e) => Err(io(&self.abs(rel), e.into())),
            }
        })();
        if placed.is_err() {
            let _ = fs::remove_file(tmp);
        }
        placed
    }

    /// The absolute path of a recorded path, checked: well formed, and no component on the
    /// way to it a symlink (something may have planted one since revl wrote there).
    fn checked_abs(&self, rel: &str, step: u64) -> Result<PathBuf> {
        if rel.is_empty() || rel.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(Error::new(
                Code::CorruptWal,
                format!("step {step}: a recorded path is malformed ({rel:?})"),
                "the WAL was edited outside revl",
            ));
        }
        // No intermediate symlink may have appeared since.
        let parts: Vec<&str> = rel.split('/').collect();
        let mut cur = self.root.clone();
        for part in &parts[..parts.len() - 1] {
            cur.push(name::to_os(part));
            if lstat(&cur)?.is_some_and(|m| m.file_type().is_symlink()) {
                return Err(Error::new(
                    Code::PathOutside,
                    format!(
                        "step {step}: {} became a symlink; refusing to write through it",
                        cur.display()
                    ),
                    "remove the symlink outside revl, then run the command again",
                ));
            }
        }
        Ok(self.abs(rel))
    }

    /// Put the file, symlink or directory tree at `src` (revl's own scratch) at `rel`,
    /// replacing what is there: moved by a rename where `src` is on the workspace's
    /// filesystem, else copied. The caller has made `src` durable; this fsyncs nothing.
    ///
    /// A file or link replaced by a file or link trades places with `src` (one atomic
    /// `renameat2(RENAME_EXCHANGE)`): what was there is left at `src`, to be freed with the
    /// scratch, so the rename does not free its blocks (on ext4 that is most of a rename's
    /// cost). Where the filesystem cannot exchange, a plain rename replaces it.
    pub(crate) fn move_in(&self, rel: &str, src: &Path, step: u64) -> Result<()> {
        let abs = self.checked_abs(rel, step)?;
        let src_dir = lstat(src)?.is_some_and(|m| m.is_dir());
        if let Some(m) = lstat(&abs)? {
            // A rename replaces a file or a link atomically, never a directory or by one.
            if m.is_dir() || src_dir {
                remove_any(&abs)?;
            } else {
                use rustix::fs::{renameat_with, RenameFlags, CWD};
                use rustix::io::Errno;
                match renameat_with(CWD, src, CWD, &abs, RenameFlags::EXCHANGE) {
                    Ok(()) => return Ok(()),
                    // Not on this filesystem (or not across these two): as before.
                    Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP | Errno::XDEV) => {}
                    Err(e) => return Err(io(&abs, e.into())),
                }
            }
        }
        match fs::rename(src, &abs) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) => {
                let tmp = abs.with_file_name(format!(".revl-{step}.tmp"));
                remove_any(&tmp)?;
                // A copy that fails (a full disk) leaves nothing half-made behind.
                copy_any(src, &tmp)
                    .and_then(|_| fs::rename(&tmp, &abs).map_err(|e| io(&abs, e)))
                    .inspect_err(|_| {
                        let _ = remove_any(&tmp);
                    })
            }
            Err(e) => Err(io(&abs, e)),
        }
    }

    /// Remove what is at `rel` (a file, a link, a whole tree).
    pub(crate) fn remove_at(&self, rel: &str, step: u64) -> Result<()> {
        remove_any(&self.checked_abs(rel, step)?)
    }

    /// Set the mode of what is at `rel` (never through a symlink).
    pub(crate) fn chmod_at(&self, rel: &str, mode: u32, step: u64) -> Result<()> {
        let abs = self.checked_abs(rel, step)?;
        if lstat(&abs)?.is_some_and(|m| !m.file_type().is_symlink()) {
            fs::set_permissions(&abs, fs::Permissions::from_mode(mode)).map_err(|e| io(&abs, e))?;
        }
        Ok(())
    }

    fn restore_entry(&self, e: &RestoreEntry, blobs: &BlobStore, step: u64) -> Result<()> {
        let rel = e.path();
        let abs = self.checked_abs(rel, step)?;
        let parent = abs.parent().unwrap_or(&self.root).to_path_buf();
        match e {
            // The final change to each path goes through directory handles opened from the
            // root with O_NOFOLLOW: a component swapped for a symlink since the check above
            // fails the restore (path-outside) instead of letting it write outside.
            RestoreEntry::Absent { .. } => {
                let (prel, name) = split_rel(rel);
                let name = &*name;
                match self.dir_beneath(prel, false) {
                    Ok(dir) => {
                        self.remove_beneath(&dir, name, step)?;
                        rustix::fs::fsync(&dir).map_err(|e| io(&parent, e.into()))?;
                    }
                    // No parent: nothing to remove.
                    Err(_) if lstat(&parent)?.is_none() => {}
                    Err(e) => return Err(e),
                }
            }
            RestoreEntry::Mode { mode, .. } => {
                use rustix::fs::{chmodat, statat, AtFlags, FileType, Mode};
                let mode = parse_mode(mode)?;
                let (prel, name) = split_rel(rel);
                let name = &*name;
                let dir = self.dir_beneath(prel, false)?;
                if let Ok(st) = statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                        chmodat(&dir, name, Mode::from_raw_mode(mode), AtFlags::empty())
                            .map_err(|e| io(&abs, e.into()))?;
                    }
                }
            }
            RestoreEntry::File {
                mode,
                content,
                blob,
                ..
            } => {
                let mode = parse_mode(mode)?;
                // Staged at the root (no component to swap), then renamed into place.
                let tmp = self.root.join(format!(".revl-restore-{step}.tmp"));
                let _ = fs::remove_file(&tmp);
                match (content, blob) {
                    (Some(c), _) => self.write_temp(&tmp, &abs, &unb64(c)?, mode)?,
                    // Streamed from the blob store: a large preimage never sits in memory.
                    (None, Some(b)) => {
                        blobs.copy_out(b, &tmp, Some(step))?;
                        fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))
                            .map_err(|e| io(&abs, e))?;
                    }
                    (None, None) => {
                        return Err(Error::new(
                            Code::MissingPreimage,
                            format!(
                                "step {step}: the preimage of {rel} has neither content nor blob"
                            ),
                            "the WAL was edited outside revl; restore it from a backup",
                        ))
                    }
                }
                self.place_beneath(&tmp, rel, step)?;
            }
            RestoreEntry::Symlink { target, .. } => {
                let tmp = self.root.join(format!(".revl-restore-{step}.tmp"));
                let _ = fs::remove_file(&tmp);
                std::os::unix::fs::symlink(name::to_os(target), &tmp).map_err(|e| io(&abs, e))?;
                self.place_beneath(&tmp, rel, step)?;
            }
            RestoreEntry::Dir { mode, tree, .. } => {
                let mode = parse_mode(mode)?;
                let listing: Vec<TreeItem> = serde_json::from_slice(&blobs.get(tree, Some(step))?)
                    .map_err(|_| {
                        Error::new(
                            Code::MissingPreimage,
                            format!("step {step}: tree blob {tree} is not a listing"),
                            "restore the store's blobs/ from a backup",
                        )
                    })?;
                self.restore_tree(rel, mode, &listing, blobs, step)?;
            }
        }
        Ok(())
    }

    /// Put a directory back from its listing, through directory handles only: the
    /// directory is made and opened (`O_NOFOLLOW`) beneath the root, and every entry made
    /// relative to its parent's handle. A concurrent writer that swaps a directory being
    /// rebuilt for a symlink changes nothing outside: revl keeps writing into the directory
    /// it made, never through the name. Modes are set through the handles, deepest first.
    fn restore_tree(
        &self,
        rel: &str,
        mode: u32,
        listing: &[TreeItem],
        blobs: &BlobStore,
        step: u64,
    ) -> Result<()> {
        use rustix::fs::{fchmod, fsync, mkdirat, openat, symlinkat, Mode, OFlags};
        use std::collections::HashMap;
        let abs = self.abs(rel);
        let sys = |p: &Path, e: rustix::io::Errno| io(p, std::io::Error::from(e));
        let (prel, name) = split_rel(rel);
        let name = &*name;
        let parent = self.dir_beneath(prel, true)?;
        self.remove_beneath(&parent, name, step)?;
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        mkdirat(&parent, name, Mode::from_raw_mode(0o700)).map_err(|e| sys(&abs, e))?;
        let top = openat(&parent, name, dir_flags, Mode::empty())
            .map_err(|e| self.beneath_error(rel, e))?;
        // Each directory made so far, by its path in the listing ("" is the top).
        let mut dirs: HashMap<String, rustix::fd::OwnedFd> = HashMap::new();
        let mut modes: Vec<(String, u32)> = vec![(String::new(), mode)];
        dirs.insert(String::new(), top);
        for it in listing {
            let p = abs.join(name::to_os(&it.path));
            let (within, leaf) = split_rel(&it.path);
            let Some(pfd) = dirs.get(within) else {
                return Err(Error::new(
                    Code::CorruptWal,
                    format!(
                        "step {step}: tree blob {} lists {:?} before its directory",
                        it.path, within
                    ),
                    "restore the store's blobs/ from a backup",
                ));
            };
            let m = it
                .mode
                .as_deref()
                .map(parse_mode)
                .transpose()?
                .unwrap_or(0o644);
            match it.kind {
                FileKind::Dir => {
                    mkdirat(pfd, &*leaf, Mode::from_raw_mode(0o700)).map_err(|e| sys(&p, e))?;
                    let fd = openat(pfd, &*leaf, dir_flags, Mode::empty())
                        .map_err(|e| self.beneath_error(&it.path, e))?;
                    dirs.insert(it.path.clone(), fd);
                    modes.push((it.path.clone(), m));
                }
                FileKind::File => {
                    let fd = openat(
                        pfd,
                        &*leaf,
                        OFlags::WRONLY
                            | OFlags::CREATE
                            | OFlags::EXCL
                            | OFlags::NOFOLLOW
                            | OFlags::CLOEXEC,
                        Mode::from_raw_mode(0o600),
                    )
                    .map_err(|e| sys(&p, e))?;
                    let f = File::from(fd);
                    match &it.content {
                        Some(c) => {
                            let mut f = f;
                            f.write_all(&unb64(c)?)
                                .and_then(|_| f.set_permissions(fs::Permissions::from_mode(m)))
                                .and_then(|_| f.sync_all())
                                .map_err(|e| io(&p, e))?;
                        }
                        None => {
                            let d = it.digest.as_deref().unwrap_or("");
                            let keep = f.try_clone().map_err(|e| io(&p, e))?;
                            blobs.copy_into(d, f, &p.display().to_string(), Some(step))?;
                            keep.set_permissions(fs::Permissions::from_mode(m))
                                .and_then(|_| keep.sync_all())
                                .map_err(|e| io(&p, e))?;
                        }
                    }
                }
                FileKind::Symlink => {
                    let target = it.target.as_deref().unwrap_or("");
                    symlinkat(&*name::to_os(target), pfd, &*leaf).map_err(|e| sys(&p, e))?;
                }
                FileKind::Absent | FileKind::Special => {}
            }
        }
        // Modes deepest first (a read-only directory is set after its contents).
        for (d, m) in modes.iter().rev() {
            let fd = &dirs[d];
            fsync(fd).map_err(|e| sys(&abs, e))?;
            fchmod(fd, Mode::from_raw_mode(*m)).map_err(|e| sys(&abs, e))?;
        }
        fsync(&parent).map_err(|e| sys(&abs, e))
    }

    /// `read PATH` → `{path, mode, content | contentBase64}`
    pub fn read(&self, path: &str) -> Result<crate::report::FileRead> {
        let rel = self.confine(path, false)?;
        let abs = self.abs(&rel);
        let m = fs::metadata(&abs).map_err(|e| {
            use std::io::ErrorKind::{NotADirectory, NotFound};
            if matches!(e.kind(), NotFound | NotADirectory) {
                // The same answer as `read --at` for a path that is not there.
                Error::new(
                    Code::Absent,
                    format!("{rel} does not exist in the workspace now"),
                    "`revl list` shows what is there; `revl read --at K` reads what a step left",
                )
                .with_remedy(Remedy::ListPath)
            } else {
                io(&abs, e)
            }
        })?;
        if !m.is_file() {
            return Err(Error::bad_args(
                format!("{rel} is not a file"),
                "use `list` for directories",
            ));
        }
        if m.len() as usize > CONTENT_MAX {
            return Err(Error::bad_args(
                format!("{rel} is {} bytes; `read` returns at most 16 MiB", m.len()),
                format!(
                    "reads record nothing: read it where it is, {}",
                    abs.display()
                ),
            ));
        }
        let bytes = fs::read(&abs).map_err(|e| io(&abs, e))?;
        let (content, content_base64) = match String::from_utf8(bytes) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(b64(e.as_bytes()))),
        };
        Ok(crate::report::FileRead {
            path: rel,
            mode: mode_str(m.permissions().mode()),
            content,
            content_base64,
        })
    }

    /// `list [PATH]` → `{path, entries: [{name, kind, mode, size?}]}`
    pub fn list(&self, path: Option<&str>) -> Result<crate::report::Listing> {
        let rel = match path {
            Some(p) => self.confine(p, true)?,
            None => String::new(),
        };
        let abs = self.abs(&rel);
        let mut entries = Vec::new();
        for e in fs::read_dir(&abs).map_err(|e| missing_or_io(&rel, &abs, e))? {
            let e = e.map_err(|e| io(&abs, e))?;
            let name = name::from_os(&e.file_name()).into_owned();
            let m = fs::symlink_metadata(e.path()).map_err(|err| io(&e.path(), err))?;
            entries.push(crate::report::ListEntry {
                name,
                kind: kind_of(&m),
                mode: mode_str(m.permissions().mode()),
                size: m.is_file().then_some(m.len()),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(crate::report::Listing { path: rel, entries })
    }
}

/// ("a/b/c") → ("a/b", "c"); ("c") → ("", "c"): the parent as text, the last name as the
/// OS name it stands for (see [`crate::name`]).
fn split_rel(rel: &str) -> (&str, std::borrow::Cow<'_, std::ffi::OsStr>) {
    let (parent, last) = rel.rsplit_once('/').unwrap_or(("", rel));
    (parent, name::to_os(last))
}

/// The mode a planned write gives its file.
/// Is this write small enough to be made in place: new content and preimage each at most
/// [`INLINE_MAX`], the preimage a file held inline in the intent? Larger writes are staged
/// in a temp file and renamed, so readers never see them half written.
pub fn in_place(p: &Planned) -> bool {
    let FileOp::Write { content, .. } = &p.op else {
        return false;
    };
    content.len() <= INLINE_MAX
        && matches!(
            p.undo.entries().first(),
            Some(RestoreEntry::File {
                content: Some(_),
                ..
            })
        )
}

fn write_mode(p: &Planned) -> Result<u32> {
    Ok(p.after[0]
        .mode
        .as_deref()
        .map(parse_mode)
        .transpose()?
        .unwrap_or(0o644))
}

fn restore(entries: Vec<RestoreEntry>) -> Undo {
    Undo::Restore { entries }
}

/// A file effect's detail: the primary post-image, without its path.
fn detail(path: &str, to: Option<&str>, after: &Image) -> FileDetail {
    FileDetail {
        after: after.at(""),
        path: path.to_string(),
        to: to.map(str::to_string),
        origin: None,
    }
}

/// The digest of a directory: blake3 of the JCS of its plain listing.
/// The digest of an empty directory (what a mkdir makes).
pub(crate) fn empty_dir_digest() -> &'static str {
    static EMPTY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| listing_digest(&[]))
}

pub(crate) fn listing_digest(listing: &[TreeItem]) -> String {
    blake3_hex(jcs(&undo::to_value(&listing)).as_bytes())
}

fn unwitnessed(rel: &str, k: FileKind) -> Error {
    Error::bad_args(
        format!(
            "{rel} is a {} file; revl witnesses only files, directories and symlinks",
            k.as_str()
        ),
        "remove it outside revl first",
    )
}

/// Copy the file or symlink `src` into `name` of the directory `dir`: what is at `name`
/// is unlinked (never followed), the copy is made with `O_CREAT | O_EXCL | O_NOFOLLOW`
/// (sparse-aware: holes stay holes), gets `src`'s mode and is made durable.
fn stage_copy_at(dir: &std::os::fd::OwnedFd, name: &str, src: &Path) -> std::io::Result<()> {
    use rustix::fs::{openat, symlinkat, unlinkat, AtFlags, Mode, OFlags};
    match unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let m = fs::symlink_metadata(src)?;
    if m.file_type().is_symlink() {
        return symlinkat(fs::read_link(src)?, dir, name).map_err(Into::into);
    }
    let fd = openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let mut to = File::from(fd);
    let mut from = File::open(src)?;
    crate::util::copy_sparse(&mut from, &mut to)?;
    to.set_permissions(fs::Permissions::from_mode(m.permissions().mode() & 0o7777))?;
    to.sync_all()
}

/// Copy a file (content and mode), a symlink or a whole tree from `src` to `dst` (absent).
fn copy_any(src: &Path, dst: &Path) -> Result<()> {
    let m = fs::symlink_metadata(src).map_err(|e| io(src, e))?;
    let t = m.file_type();
    if t.is_symlink() {
        let target = fs::read_link(src).map_err(|e| io(src, e))?;
        std::os::unix::fs::symlink(target, dst).map_err(|e| io(dst, e))
    } else if t.is_dir() {
        fs::create_dir(dst).map_err(|e| io(dst, e))?;
        for e in fs::read_dir(src).map_err(|e| io(src, e))? {
            let e = e.map_err(|e| io(src, e))?;
            copy_any(&e.path(), &dst.join(e.file_name()))?;
        }
        fsync_dir(dst)?;
        fs::set_permissions(dst, m.permissions()).map_err(|e| io(dst, e))
    } else {
        // Holes stay holes: a sparse file is not made dense.
        (|| {
            let mut from = File::open(src)?;
            let mut to = File::create_new(dst)?;
            crate::util::copy_sparse(&mut from, &mut to)?;
            to.set_permissions(m.permissions())?;
            to.sync_all()
        })()
        .map_err(|e| io(dst, e))
    }
}

/// Remove the tree `name` in `dir` where it stands, through directory handles, never
/// following a symlink and never into another filesystem mounted inside it; a directory
/// without read, write or search permission for its owner is opened up first.
fn remove_tree_at(dir: &rustix::fd::OwnedFd, name: &std::ffi::OsStr) -> std::io::Result<()> {
    use rustix::fs::{
        chmodat, fstat, openat, statat, unlinkat, AtFlags, Dir, FileType, Mode, OFlags,
    };
    use std::os::unix::ffi::OsStrExt;
    // Opened up before it is opened: a directory its owner may not read (an overlay's work
    // directory is mode 0) could not be listed.
    let mode = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?.st_mode;
    if mode & 0o700 != 0o700 {
        chmodat(
            dir,
            name,
            Mode::from_raw_mode((mode | 0o700) & 0o7777),
            AtFlags::empty(),
        )?;
    }
    let sub = openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // Another filesystem mounted inside the tree: never emptied from here (the rename aside
    // this stands in for would have refused it too).
    if fstat(&sub)?.st_dev != fstat(dir)?.st_dev {
        return Err(std::io::Error::other(
            "a filesystem is mounted there: revl does not remove what another filesystem holds (unmount it, then run the command again)",
        ));
    }
    // Names first, removal after: a directory is not changed while it is being read.
    let mut entries = Vec::new();
    for e in Dir::read_from(&sub)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        entries.push((
            std::ffi::OsStr::from_bytes(n).to_owned(),
            e.file_type() == FileType::Directory,
        ));
    }
    for (n, is_dir) in entries {
        if is_dir {
            remove_tree_at(&sub, &n)?;
        } else {
            match unlinkat(&sub, n.as_os_str(), AtFlags::empty()) {
                // d_type unknown on some filesystems: a directory is then removed as one.
                Err(rustix::io::Errno::ISDIR) | Err(rustix::io::Errno::PERM) => {
                    remove_tree_at(&sub, &n)?
                }
                r => r?,
            }
        }
    }
    drop(sub);
    unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    Ok(())
}

pub(crate) fn remove_any(p: &Path) -> Result<()> {
    match lstat(p)? {
        None => Ok(()),
        // Through handles, stopping at another filesystem mounted inside the tree (std's
        // remove_dir_all empties it), read-only directories opened up on the way.
        Some(m) if m.is_dir() => {
            let (parent, name) = match (p.parent(), p.file_name()) {
                (Some(d), Some(n)) => (d, n),
                _ => return Err(io(p, std::io::Error::other("not a removable path"))),
            };
            let dir = rustix::fs::open(
                parent,
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| io(parent, e.into()))?;
            remove_tree_at(&dir, name).map_err(|e| io(p, e))
        }
        Some(_) => fs::remove_file(p).map_err(|e| io(p, e)),
    }
}

/// Post-image bytes kept in an intent (`after.kept`, digest -> base64): small files only,
/// at most [`INLINE_MAX`] bytes each and a budget in all, so that `read --at` can return
/// the content a step left even after the file was changed outside revl.
#[derive(Debug, Default)]
pub struct KeptBytes {
    pub kept: std::collections::BTreeMap<String, String>,
    budget: usize,
}

impl KeptBytes {
    pub fn with_budget(budget: usize) -> Self {
        KeptBytes {
            kept: Default::default(),
            budget,
        }
    }

    /// Keep the bytes of the file at `abs` (whose digest is `digest`) if they fit.
    pub fn offer(&mut self, abs: &Path, digest: &str) {
        if self.kept.contains_key(digest) {
            return;
        }
        let Ok(m) = fs::symlink_metadata(abs) else {
            return;
        };
        if !m.is_file() || m.len() > INLINE_MAX as u64 || m.len() as usize > self.budget {
            return;
        }
        if let Ok(bytes) = fs::read(abs) {
            if blake3_hex(&bytes) == digest {
                self.budget -= bytes.len();
                self.kept.insert(digest.to_string(), b64(&bytes));
            }
        }
    }

    /// Keep bytes already in hand.
    pub fn add(&mut self, bytes: &[u8]) {
        if bytes.len() <= INLINE_MAX && bytes.len() <= self.budget {
            let digest = blake3_hex(bytes);
            if !self.kept.contains_key(&digest) {
                self.budget -= bytes.len();
                self.kept.insert(digest, b64(bytes));
            }
        }
    }
}
