//! What a session needs to be branched on another machine (docs/fleet.md): its base tree (the
//! workspace as `new` found it, captured into the blob store) and a workspace materialised
//! from the base and the WAL alone, at any step. No network here: the fleet crate moves the
//! bytes; this module only reads and writes the local store.

use super::Session;
use crate::error::{Error, Result};
use crate::step::{Pos, StepKind};
use crate::store::Store;
use crate::undo::{FileKind, RestoreEntry, TreeItem, Undo};
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// `sessions/<id>/base.json`: the digest of the base tree blob (a JSON list of
/// [`TreeItem`]s, one per entry below the workspace root, files by digest).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct BaseTree {
    pub tree: String,
    pub files: u64,
    pub bytes: u64,
}

impl Store {
    /// The base tree captured for session `id`, if one was.
    pub fn base_of(&self, id: &str) -> Option<BaseTree> {
        let b = fs::read(self.session_dir(id).join("base.json")).ok()?;
        serde_json::from_slice(&b).ok()
    }

    /// Record `base` as session `id`'s base tree (a mirror copies the pushed one).
    pub fn set_base(&self, id: &str, base: &BaseTree) -> Result<()> {
        let dir = self.session_dir(id);
        let bytes = serde_json::to_vec(base).expect("a base tree serialises");
        crate::util::write_durable(&dir.join("base.json"), &bytes)
            .map_err(|e| Error::io(format!("cannot write {}/base.json", dir.display()), e))
    }

    /// Capture session `id`'s workspace as it is now into the blob store (every file's bytes,
    /// then the tree), and record it as the session's base (`new --capture-base`).
    pub fn capture_base(&self, id: &str, workspace: &Path) -> Result<BaseTree> {
        self.capture_base_sharing(id, workspace, None)
    }

    /// [`Store::capture_base`], sharing the files of `donor` (a remote's verified cache on
    /// this filesystem) for the small blobs it holds: a branch made from a remote captures
    /// its workspace without writing again the blobs it was made from
    /// ([`crate::blobs::BlobStore::put_shared`]).
    pub fn capture_base_sharing(
        &self,
        id: &str,
        workspace: &Path,
        donor: Option<&crate::blobs::BlobStore>,
    ) -> Result<BaseTree> {
        let blobs = self.blobs();
        let mut items = Vec::new();
        let (mut files, mut bytes) = (0u64, 0u64);
        walk(workspace, "", &mut |rel, meta, abs| {
            let mode = Some(crate::workspace::mode_str(meta.permissions().mode()));
            let ft = meta.file_type();
            let item = if ft.is_dir() {
                TreeItem {
                    content: None,
                    digest: None,
                    kind: FileKind::Dir,
                    mode,
                    path: rel.to_string(),
                    target: None,
                }
            } else if ft.is_file() {
                files += 1;
                bytes += meta.len();
                // Small files unsynced, one sync of the blob store below (a base of 10,000
                // files would otherwise cost 30,000 fsyncs); large ones streamed.
                let digest = if meta.len() <= 1 << 20 {
                    let b = fs::read(abs).map_err(|e| Error::io(abs.display(), e))?;
                    match donor {
                        Some(d) => blobs.put_shared(&b, d)?,
                        None => blobs.put_cached(&b)?,
                    }
                } else {
                    blobs.put_file(abs)?
                };
                TreeItem {
                    content: None,
                    digest: Some(digest),
                    kind: FileKind::File,
                    mode,
                    path: rel.to_string(),
                    target: None,
                }
            } else if ft.is_symlink() {
                let t = fs::read_link(abs).map_err(|e| Error::io(abs.display(), e))?;
                TreeItem {
                    content: None,
                    digest: None,
                    kind: FileKind::Symlink,
                    mode: None,
                    path: rel.to_string(),
                    target: Some(crate::name::from_os(t.as_os_str()).into_owned()),
                }
            } else {
                return Ok(());
            };
            items.push(item);
            Ok(())
        })?;
        let root = self.root().join("blobs");
        crate::util::sync_tree(&root).map_err(|e| Error::io(root.display(), e))?;
        let tree = blobs.put(&serde_json::to_vec(&items).expect("a tree serialises"))?;
        let base = BaseTree { tree, files, bytes };
        self.set_base(id, &base)?;
        Ok(base)
    }

    /// Every blob session `id` needs: what its WAL names ([`crate::gc::blobs_named`]), and
    /// its base tree with the tree's files when one was captured (a push carries them; gc
    /// keeps them).
    pub fn blobs_of(
        &self,
        id: &str,
        st: &crate::state::State,
    ) -> Result<std::collections::BTreeSet<String>> {
        let mut out = crate::gc::blobs_named(st, &self.blobs());
        if let Some(base) = self.base_of(id) {
            for it in self.base_items(&base)? {
                out.extend(it.digest);
            }
            out.insert(base.tree);
        }
        Ok(out)
    }

    /// The entries of a base tree blob (verified against its digest).
    pub fn base_items(&self, base: &BaseTree) -> Result<Vec<TreeItem>> {
        let b = self.blobs().get(&base.tree, None)?;
        serde_json::from_slice(&b).map_err(|e| {
            Error::new(
                crate::error::Code::CorruptWal,
                format!("base tree {} does not parse: {e}", base.tree),
                "push the session again from the store that wrote it",
            )
        })
    }

    /// Write session `id`'s base tree into `dir` (created; must be empty or absent). The
    /// tree may come from another store: each entry passes the checks a local write passes
    /// ([`confined`]) before anything is written at it, and nothing is written through a
    /// symlink. The files are written unsynced and made durable by one sync of the tree at
    /// the end (a base of 10,000 files would otherwise cost 10,000 fsyncs).
    pub fn materialise_base(&self, id: &str, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        let Some(base) = self.base_of(id) else {
            return Ok(());
        };
        let dest = destination(dir)?;
        let blobs = self.blobs();
        let items = self.base_items(&base)?;
        for it in &items {
            let abs = confined(&dest, &it.path)?;
            if let Some(p) = abs.parent() {
                fs::create_dir_all(p).map_err(|e| Error::io(p.display(), e))?;
            }
            match it.kind {
                FileKind::Dir => {
                    fs::create_dir(&abs).map_err(|e| Error::io(abs.display(), e))?;
                }
                FileKind::File => {
                    let d = it.digest.as_deref().unwrap_or_default();
                    blobs.copy_out_with(d, &abs, None, crate::storage::Durability::Cached)?;
                }
                FileKind::Symlink => {
                    let t = it.target.as_deref().unwrap_or_default();
                    std::os::unix::fs::symlink(crate::name::to_os(t), &abs)
                        .map_err(|e| Error::io(abs.display(), e))?;
                }
                _ => {}
            }
        }
        set_modes(dir, &items);
        crate::util::sync_tree(dir).map_err(|e| Error::io(dir.display(), e))
    }
}

fn not_normal(rel: &str) -> Error {
    Error::new(
        crate::error::Code::PathOutside,
        format!("path {rel:?} is not a relative path in normal form"),
        "a recorded path is relative, without a leading `/`, `.`, `..` or empty components",
    )
}

/// `dir` as the root of a workspace the copy writes into (its canonical path, as the
/// workspace's checks need).
fn destination(dir: &Path) -> Result<crate::workspace::Workspace> {
    let root = fs::canonicalize(dir).map_err(|e| Error::io(dir.display(), e))?;
    Ok(crate::workspace::Workspace::new(
        root,
        crate::failpoint::Failpoints::none(),
    ))
}

/// Where a path another store recorded may be written in `dest`: it passes the checks a local
/// write passes ([`crate::workspace::Workspace::confine`]: relative, no `..`, no symlink on
/// the way or leading out), it is in the normal form revl records, and nothing is there yet
/// (each entry is written once, never through a symlink an earlier entry made).
pub fn confined(dest: &crate::workspace::Workspace, rel: &str) -> Result<std::path::PathBuf> {
    if dest.confine(rel, false)? != rel {
        return Err(not_normal(rel));
    }
    let abs = dest.abs(rel);
    if fs::symlink_metadata(&abs).is_ok() {
        return Err(Error::new(
            crate::error::Code::PathOutside,
            format!("path {rel:?} is named twice; revl writes each path once and never through a symlink"),
            "a recorded tree names each path once",
        ));
    }
    Ok(abs)
}

fn set_modes(dir: &Path, items: &[TreeItem]) {
    // Deepest first, so a read-only directory does not stop its entries' modes.
    for it in items.iter().rev() {
        if let (Some(m), FileKind::File | FileKind::Dir) = (&it.mode, it.kind) {
            if let Ok(m) = crate::workspace::parse_mode(m) {
                // Only what the copy wrote, and never through a symlink (a chmod follows one).
                let abs = dir.join(crate::name::to_os(&it.path));
                if !abs.starts_with(dir)
                    || it
                        .path
                        .split('/')
                        .any(|c| c.is_empty() || c == "." || c == "..")
                    || !matches!(fs::symlink_metadata(&abs), Ok(md) if !md.file_type().is_symlink())
                {
                    continue;
                }
                let _ = fs::set_permissions(abs, fs::Permissions::from_mode(m));
            }
        }
    }
}

/// Every entry below `root`, in path order, with its metadata (symlinks not followed).
fn walk(
    root: &Path,
    rel: &str,
    f: &mut dyn FnMut(&str, &fs::Metadata, &Path) -> Result<()>,
) -> Result<()> {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(crate::name::to_os(rel))
    };
    let mut names: Vec<_> = match fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| crate::name::from_os(&e.file_name()).into_owned())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && rel.is_empty() => return Ok(()),
        Err(e) => return Err(Error::io(dir.display(), e)),
    };
    names.sort();
    for n in names {
        let r = if rel.is_empty() {
            n.clone()
        } else {
            format!("{rel}/{n}")
        };
        let abs = root.join(crate::name::to_os(&r));
        let meta = fs::symlink_metadata(&abs).map_err(|e| Error::io(abs.display(), e))?;
        f(&r, &meta, &abs)?;
        if meta.is_dir() {
            walk(root, &r, f)?;
        }
    }
    Ok(())
}

/// What [`Session::materialise_at`] wrote.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Materialised {
    pub files: u64,
    pub dirs: u64,
    pub bytes: u64,
}

impl Session {
    /// Write the workspace as it was right after step `k` into `dir` (empty or absent), from
    /// the WAL, the blob store and the session's workspace directory (a mirror's: its base
    /// tree) alone: each path the base or any step names gets the image [`Session::read_at`]
    /// reads, so the two agree byte for byte.
    pub fn materialise_at(&self, k: i64, dir: &Path) -> Result<Materialised> {
        let k: Pos = self.check_range(k)?;
        fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        let dest = destination(dir)?;
        let paths = self.paths_named()?;
        let mut out = Materialised::default();
        let mut modes = Vec::new();
        for rel in &paths {
            let (img, inline) = self.image_at(rel, k)?;
            let abs = match img.kind {
                Some(FileKind::Dir | FileKind::File | FileKind::Symlink) => confined(&dest, rel),
                _ => continue,
            };
            // A directory a deeper path made already is fine; anything else is checked.
            let abs = match abs {
                Ok(a) => a,
                Err(_)
                    if img.kind == Some(FileKind::Dir)
                        && dest.confine(rel, false).is_ok()
                        && fs::symlink_metadata(dest.abs(rel)).is_ok_and(|m| m.is_dir()) =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            };
            match img.kind {
                Some(FileKind::Dir) => {
                    fs::create_dir_all(&abs).map_err(|e| Error::io(abs.display(), e))?;
                    out.dirs += 1;
                }
                Some(FileKind::File) => {
                    let bytes = match (inline, &img.digest) {
                        (Some(b), _) => b,
                        (None, Some(d)) => self.bytes_by_digest(d, rel)?,
                        (None, None) => continue,
                    };
                    if let Some(p) = abs.parent() {
                        fs::create_dir_all(p).map_err(|e| Error::io(p.display(), e))?;
                    }
                    // Created, never opened through what is there (no symlink followed).
                    use std::io::Write;
                    fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&abs)
                        .and_then(|mut f| f.write_all(&bytes))
                        .map_err(|e| Error::io(abs.display(), e))?;
                    out.files += 1;
                    out.bytes += bytes.len() as u64;
                }
                Some(FileKind::Symlink) => {
                    // The WAL keeps a symlink's target digest only; the base tree keeps the
                    // target of those the session never changed.
                    let src = self.ws.abs(rel);
                    if let Ok(t) = fs::read_link(&src) {
                        if img.digest.as_deref()
                            == Some(&crate::util::blake3_hex(t.as_os_str().as_encoded_bytes()))
                        {
                            if let Some(p) = abs.parent() {
                                let _ = fs::create_dir_all(p);
                            }
                            let _ = std::os::unix::fs::symlink(&t, &abs);
                        }
                    }
                    continue;
                }
                _ => continue,
            }
            modes.push(TreeItem {
                content: None,
                digest: None,
                kind: img.kind.unwrap_or(FileKind::File),
                mode: img.mode.clone(),
                path: rel.clone(),
                target: None,
            });
        }
        set_modes(dir, &modes);
        Ok(out)
    }

    /// Every path the session's base tree and WAL name, each checked as a local write is
    /// ([`Workspace::confine`](crate::workspace::Workspace::confine) against the session's
    /// workspace, in normal form): a copy of another store's session is refused before
    /// anything is written at a path it names.
    pub fn check_paths(&self) -> Result<()> {
        for rel in self.paths_named()? {
            if rel.starts_with('/')
                || rel
                    .split('/')
                    .any(|c| c.is_empty() || c == "." || c == "..")
            {
                // The refusal a local write gets (`..`, outside), else the form's.
                self.ws.confine(&rel, false)?;
                return Err(not_normal(&rel));
            }
            // The path itself may be a symlink (kept as a link, never followed); nothing on
            // the way to it may be one.
            if let Some((parent, _)) = rel.rsplit_once('/') {
                if self.ws.confine(parent, false)? != parent {
                    return Err(not_normal(&rel));
                }
            }
        }
        Ok(())
    }

    /// Every path the base tree or any step names (directory snapshots' entries included).
    fn paths_named(&self) -> Result<BTreeSet<String>> {
        let mut paths: BTreeSet<String> = BTreeSet::new();
        if let Some(base) = self.store.base_of(&self.id) {
            paths.extend(self.store.base_items(&base)?.into_iter().map(|i| i.path));
        }
        for s in &self.journal.state.steps {
            if s.kind != StepKind::Effect {
                continue;
            }
            if let Some(Undo::Restore { entries }) = s.undo() {
                for e in entries {
                    paths.insert(e.path().to_string());
                    if let RestoreEntry::Dir { tree, .. } = e {
                        let items: Vec<TreeItem> = self
                            .blobs
                            .get(tree, Some(s.index))
                            .ok()
                            .and_then(|b| serde_json::from_slice(&b).ok())
                            .unwrap_or_default();
                        let p = e.path();
                        paths.extend(items.into_iter().map(|i| format!("{p}/{}", i.path)));
                    }
                }
            }
            paths.extend(crate::drift::after_images(s).into_iter().map(|i| i.path));
        }
        Ok(paths)
    }
}
