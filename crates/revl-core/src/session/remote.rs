//! What a session needs to be branched on another machine (docs/fleet.md): its base tree (the
//! workspace as `new` found it, captured into the blob store) and a workspace materialised
//! from the base and the WAL alone, at any step. No network here: the fleet crate moves the
//! bytes; this module only reads and writes the local store.

use super::Session;
use crate::error::{Error, Result};
use crate::step::{Pos, StepKind};
use crate::store::Store;
use crate::undo::{FileKind, Image, RestoreEntry, TreeItem, Undo};
use std::collections::{BTreeMap, BTreeSet, HashMap};
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
        let blobs = self.blobs();
        let mut found: Vec<(String, fs::Metadata, std::path::PathBuf)> = Vec::new();
        walk(workspace, "", &mut |rel, meta, abs| {
            found.push((rel.to_string(), meta.clone(), abs.to_path_buf()));
            Ok(())
        })?;
        // Each file's bytes stored, over the cores. Small files unsynced, one sync of the
        // blob store below (a base of 10,000 files would otherwise cost 30,000 fsyncs);
        // large ones streamed.
        let digests = crate::util::par_map(&found, |(_, meta, abs)| {
            if !meta.file_type().is_file() {
                return Ok(None);
            }
            if meta.len() <= 1 << 20 {
                let b = fs::read(abs).map_err(|e| Error::io(abs.display(), e))?;
                blobs.put_cached(&b).map(Some)
            } else {
                blobs.put_file(abs).map(Some)
            }
        });
        let mut items = Vec::new();
        let (mut files, mut bytes) = (0u64, 0u64);
        for ((rel, meta, abs), digest) in found.iter().zip(digests) {
            let mode = Some(crate::workspace::mode_str(meta.permissions().mode()));
            let ft = meta.file_type();
            let item = if ft.is_dir() {
                TreeItem {
                    content: None,
                    digest: None,
                    kind: FileKind::Dir,
                    mode,
                    path: rel.clone(),
                    target: None,
                }
            } else if ft.is_file() {
                files += 1;
                bytes += meta.len();
                TreeItem {
                    content: None,
                    digest: digest?,
                    kind: FileKind::File,
                    mode,
                    path: rel.clone(),
                    target: None,
                }
            } else if ft.is_symlink() {
                let t = fs::read_link(abs).map_err(|e| Error::io(abs.display(), e))?;
                TreeItem {
                    content: None,
                    digest: None,
                    kind: FileKind::Symlink,
                    mode: None,
                    path: rel.clone(),
                    target: Some(crate::name::from_os(t.as_os_str()).into_owned()),
                }
            } else {
                continue;
            };
            items.push(item);
        }
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
}

/// A base tree by path: what a remote's mirror reads for the paths no step touched
/// ([`crate::storage::Untouched::BaseTree`]), instead of a directory written out.
pub(crate) struct BaseIndex(BTreeMap<String, TreeItem>);

impl BaseIndex {
    fn of(items: Vec<TreeItem>) -> BaseIndex {
        BaseIndex(items.into_iter().map(|i| (i.path.clone(), i)).collect())
    }

    /// The image `rel` has in the tree: what [`crate::workspace::Workspace::observe`] would
    /// read from the tree written out (a directory's digest is its listing's).
    fn image(&self, rel: &str) -> Image {
        let Some(it) = self.0.get(rel) else {
            return Image::absent(rel);
        };
        let digest = match it.kind {
            FileKind::File => it.digest.clone(),
            FileKind::Symlink => it
                .target
                .as_deref()
                .map(|t| crate::util::blake3_hex(crate::name::to_os(t).as_encoded_bytes())),
            FileKind::Dir => Some(crate::workspace::listing_digest(&self.listing(rel))),
            _ => None,
        };
        Image {
            digest,
            kind: Some(it.kind),
            mode: if it.kind == FileKind::Symlink {
                None
            } else {
                it.mode.clone()
            },
            path: rel.to_string(),
        }
    }

    /// The entries below directory `dir`, relative to it, in the order a walk of the
    /// directory lists them (names sorted within each directory, depth first).
    fn listing(&self, dir: &str) -> Vec<TreeItem> {
        let prefix = format!("{dir}/");
        let mut out: Vec<TreeItem> = self
            .0
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .map(|(p, it)| TreeItem {
                content: None,
                digest: (it.kind == FileKind::File)
                    .then(|| it.digest.clone())
                    .flatten(),
                kind: it.kind,
                mode: (it.kind != FileKind::Symlink)
                    .then(|| it.mode.clone())
                    .flatten(),
                path: p[prefix.len()..].to_string(),
                target: (it.kind == FileKind::Symlink)
                    .then(|| it.target.clone())
                    .flatten(),
            })
            .collect();
        out.sort_by(|a, b| a.path.split('/').cmp(b.path.split('/')));
        out
    }

    /// The target of the symlink the tree names at `rel`.
    fn target(&self, rel: &str) -> Option<&str> {
        self.0
            .get(rel)
            .filter(|i| i.kind == FileKind::Symlink)
            .and_then(|i| i.target.as_deref())
    }
}

/// A tree from another store is a tree: each path named once, and nothing named below a
/// path the tree makes a file or a symlink (which a copy would otherwise write through).
fn check_tree_shape(items: &[TreeItem]) -> Result<()> {
    let mut kinds: HashMap<&str, FileKind> = HashMap::with_capacity(items.len());
    for it in items {
        if kinds.insert(it.path.as_str(), it.kind).is_some() {
            return Err(named_twice(&it.path));
        }
    }
    for it in items {
        let mut up = it.path.as_str();
        while let Some((parent, _)) = up.rsplit_once('/') {
            if let Some(k) = kinds.get(parent).filter(|k| **k != FileKind::Dir) {
                return Err(Error::new(
                    crate::error::Code::PathOutside,
                    format!(
                        "path {:?} lies below {parent:?}, which the tree makes a {}; revl never writes through a symlink or below a file",
                        it.path,
                        k.as_str()
                    ),
                    "a recorded tree names directories above the paths it holds",
                ));
            }
            up = parent;
        }
    }
    Ok(())
}

fn named_twice(rel: &str) -> Error {
    Error::new(
        crate::error::Code::PathOutside,
        format!(
            "path {rel:?} is named twice; revl writes each path once and never through a symlink"
        ),
        "a recorded tree names each path once",
    )
}

/// A recorded path in the normal form revl writes (relative, no empty, `.` or `..`
/// component, no NUL), checked without touching the disk.
fn normal(rel: &str) -> Result<()> {
    if rel.is_empty()
        || rel.starts_with('/')
        || rel.contains('\0')
        || rel
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(not_normal(rel));
    }
    Ok(())
}

fn not_normal(rel: &str) -> Error {
    Error::new(
        crate::error::Code::PathOutside,
        format!("path {rel:?} is not a relative path in normal form"),
        "a recorded path is relative, without a leading `/`, `.`, `..` or empty components",
    )
}

/// A file made at `abs` holding `bytes`, with `mode` set through its descriptor: created,
/// never opened through what is there (no symlink followed). Returns its size.
fn create_file(abs: &Path, bytes: &[u8], mode: Option<u32>) -> Result<u64> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        // Without a recorded mode, as a new file is made here (the umask applies).
        .mode(if mode.is_some() { 0o600 } else { 0o666 })
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(abs)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            match mode {
                Some(m) => f.set_permissions(fs::Permissions::from_mode(m)),
                None => Ok(()),
            }
        })
        .map_err(|e| Error::io(abs.display(), e))?;
    Ok(bytes.len() as u64)
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
    /// the WAL, the blob store and what holds the session's untouched files (a mirror's:
    /// its base tree): each path the base or any step names gets the image
    /// [`Session::read_at`] reads, so the two agree byte for byte.
    ///
    /// The paths come from another store: each is in normal form, named once, and written
    /// only below directories this call made (never through a symlink or below a file it
    /// wrote); `dir` must be empty, so nothing else is there to follow. Files are created,
    /// never opened through what is there, and given their mode through their descriptor.
    pub fn materialise_at(&self, k: i64, dir: &Path) -> Result<Materialised> {
        let k: Pos = self.check_range(k)?;
        fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        let root = fs::canonicalize(dir).map_err(|e| Error::io(dir.display(), e))?;
        if fs::read_dir(&root)
            .map_err(|e| Error::io(root.display(), e))?
            .next()
            .is_some()
        {
            return Err(Error::new(
                crate::error::Code::BadArgs,
                format!("{} is not empty", root.display()),
                "materialise into an empty or absent directory",
            ));
        }
        let exp = self.expected_at(k);
        let paths = self.paths_named()?;
        let mut out = Materialised::default();
        // What this call made below `root`, by path.
        let mut made: HashMap<String, FileKind> = HashMap::new();
        let mut dir_modes = Vec::new();
        // (where, path, its bytes or their digest, its mode)
        type File<'a> = (
            std::path::PathBuf,
            &'a String,
            std::result::Result<Vec<u8>, String>,
            Option<u32>,
        );
        let mut files: Vec<File> = Vec::new();
        for rel in &paths {
            let (img, inline) = self.image_in(&exp, rel, k)?;
            let Some(kind @ (FileKind::Dir | FileKind::File | FileKind::Symlink)) = img.kind else {
                continue;
            };
            normal(rel)?;
            // Its directories: made here, or made by this call already as directories.
            let mut at = 0;
            while let Some(i) = rel[at..].find('/') {
                let parent = &rel[..at + i];
                match made.get(parent) {
                    Some(FileKind::Dir) => {}
                    Some(k) => {
                        return Err(Error::new(
                            crate::error::Code::PathOutside,
                            format!(
                                "path {rel:?} lies below {parent:?}, which is a {}; revl never writes through a symlink or below a file",
                                k.as_str()
                            ),
                            "a recorded tree names directories above the paths it holds",
                        ))
                    }
                    None => {
                        let p = root.join(crate::name::to_os(parent));
                        fs::create_dir(&p).map_err(|e| Error::io(p.display(), e))?;
                        made.insert(parent.to_string(), FileKind::Dir);
                    }
                }
                at += i + 1;
            }
            match made.get(rel.as_str()) {
                Some(FileKind::Dir) if kind == FileKind::Dir => {}
                Some(_) => return Err(named_twice(rel)),
                None => {}
            }
            let abs = root.join(crate::name::to_os(rel));
            match kind {
                FileKind::Dir => {
                    if !made.contains_key(rel.as_str()) {
                        fs::create_dir(&abs).map_err(|e| Error::io(abs.display(), e))?;
                        out.dirs += 1;
                    }
                    dir_modes.push(TreeItem {
                        content: None,
                        digest: None,
                        kind,
                        mode: img.mode.clone(),
                        path: rel.clone(),
                        target: None,
                    });
                }
                FileKind::File => {
                    let mode = img
                        .mode
                        .as_deref()
                        .and_then(|m| crate::workspace::parse_mode(m).ok());
                    match (inline, img.digest) {
                        (Some(b), _) => files.push((abs, rel, Ok(b), mode)),
                        (None, Some(d)) => files.push((abs, rel, Err(d), mode)),
                        (None, None) => continue,
                    }
                }
                _ => {
                    // The WAL keeps a symlink's target digest only; the base tree (or the
                    // workspace) keeps the target of those the session never changed.
                    let target = match self.base_index()? {
                        Some(b) => b.target(rel).map(|t| crate::name::to_os(t).into_owned()),
                        None => fs::read_link(self.ws.abs(rel))
                            .ok()
                            .map(|t| t.into_os_string()),
                    };
                    let Some(t) = target.filter(|t| {
                        img.digest.as_deref()
                            == Some(&crate::util::blake3_hex(t.as_encoded_bytes()))
                    }) else {
                        continue;
                    };
                    std::os::unix::fs::symlink(&t, &abs)
                        .map_err(|e| Error::io(abs.display(), e))?;
                }
            }
            made.insert(rel.clone(), kind);
        }
        // The files, over the cores (each read from the blob store by its digest, checked
        // against it; only small ones, so that the threads never hold more than one large
        // blob's worth between them); one the blob store does not hold, or a large one, is
        // written after, one at a time.
        let blobs = &self.blobs;
        let written = crate::util::par_map(&files, |(abs, _, bytes, mode)| match bytes {
            Ok(b) => create_file(abs, b, *mode).map(Some),
            Err(d) if blobs.size(d).is_some_and(|n| n <= 1 << 20) => match blobs.get(d, None) {
                Ok(b) => create_file(abs, &b, *mode).map(Some),
                Err(_) => Ok(None),
            },
            Err(_) => Ok(None),
        });
        for ((abs, rel, bytes, mode), w) in files.iter().zip(written) {
            let n = match (w?, bytes) {
                (Some(n), _) => n,
                (None, Err(d)) => create_file(abs, &self.bytes_by_digest(d, rel)?, *mode)?,
                (None, Ok(_)) => continue,
            };
            out.files += 1;
            out.bytes += n;
        }
        set_modes(&root, &dir_modes);
        Ok(out)
    }

    /// Every path the session's base tree and WAL name, each checked as a local write is
    /// ([`Workspace::confine`](crate::workspace::Workspace::confine) against the session's
    /// workspace, in normal form): a copy of another store's session is refused before
    /// anything is written at a path it names. The base tree first ([`Session::check_base`]).
    pub fn check_paths(&self) -> Result<()> {
        self.check_base()?;
        for rel in self.paths_named()? {
            self.check_path(&rel)?;
        }
        Ok(())
    }

    /// The session's base tree alone, if it has one: a tree (each path once, nothing below a
    /// file or symlink it makes), and each of its paths as [`Session::check_paths`] checks
    /// them.
    pub fn check_base(&self) -> Result<()> {
        if let Some(base) = self.store.base_of(&self.id) {
            let items = self.store.base_items(&base)?;
            check_tree_shape(&items)?;
            for it in &items {
                self.check_path(&it.path)?;
            }
        }
        Ok(())
    }

    fn check_path(&self, rel: &str) -> Result<()> {
        if rel.starts_with('/')
            || rel
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            // The refusal a local write gets (`..`, outside), else the form's.
            self.ws.confine(rel, false)?;
            return Err(not_normal(rel));
        }
        // The path itself may be a symlink (kept as a link, never followed); nothing on
        // the way to it may be one.
        if let Some((parent, _)) = rel.rsplit_once('/') {
            if self.ws.confine(parent, false)? != parent {
                return Err(not_normal(rel));
            }
        }
        Ok(())
    }

    /// A branch made from a remote session gets its base tree at its first push, while it
    /// is live; one closed before that gets it as it closes (committed: its workspace holds,
    /// for every path it never touched, what it held when the branch was made; aborted:
    /// rewound to that point), so it can still be branched elsewhere once pushed. The
    /// session is closed already: a capture that fails leaves it without a base tree (its
    /// remote branch then gets the files its WAL names), never undoes the close.
    pub(crate) fn capture_base_at_close(&self) {
        let from_remote = self
            .journal
            .state
            .origin
            .as_ref()
            .is_some_and(|o| o.parent_remote.is_some());
        if from_remote && self.store.copied().is_none() && self.store.base_of(&self.id).is_none() {
            let _ = self.store.capture_base(&self.id, self.ws.root());
        }
    }

    /// The session's base tree by path, when its store reads untouched files from it
    /// ([`crate::storage::Untouched::BaseTree`]) and one was captured (read once per attach).
    pub(crate) fn base_index(&self) -> Result<Option<&BaseIndex>> {
        use crate::storage::Untouched;
        if !self
            .store
            .copied()
            .is_some_and(|c| c.untouched == Untouched::BaseTree)
        {
            return Ok(None);
        }
        if let Some(b) = self.base.get() {
            return Ok(b.as_ref());
        }
        let index = match self.store.base_of(&self.id) {
            Some(base) => Some(BaseIndex::of(self.store.base_items(&base)?)),
            None => Some(BaseIndex::of(Vec::new())),
        };
        Ok(self.base.get_or_init(|| index).as_ref())
    }

    /// The image of a path no step touched, where the base tree holds those
    /// ([`Session::base_index`]); `None` where the workspace does.
    pub(crate) fn untouched_in_base(&self, rel: &str) -> Result<Option<Image>> {
        Ok(self.base_index()?.map(|b| b.image(rel)))
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
