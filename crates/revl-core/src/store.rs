//! The store (docs/reference.md, "Concepts"): `sessions/<id>/` (WAL and lock), the shared
//! blob store, and the store lock that serialises session creation (one live session per
//! workspace).

use crate::blobs::BlobStore;
use crate::error::{Code, Error, Remedy, Result};
use crate::failpoint::Failpoints;
use crate::state::{Life, State};
use crate::storage::{Copied, Lease, LocalBlobs, LocalJournals, Storage};
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a command waits for a lock before giving up with `busy` (docs/reference.md,
/// "Concepts").
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    pub(crate) fp: Failpoints,
    pub(crate) lock_wait: Duration,
    /// The process's runner of Python function tools (docs/python.md), if it has one.
    host: Option<Host>,
    /// Where its journals and blobs are kept (docs/architecture.md, "Storage traits and
    /// their guarantees").
    storage: Storage,
}

/// Mode 0700 for a directory of the store that revl's user owns and that holds others' bits
/// (group, other). A directory another user owns, or a shared sticky one (`/tmp` given as
/// the store), is left as it is: revl keeps what must be private in [`private_dir`]s of its
/// own. Absent: nothing to do. A read-only filesystem is left as it is.
fn tighten(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !m.is_dir()
        || m.mode() & 0o077 == 0
        || m.mode() & 0o1000 != 0
        || m.uid() != rustix::process::geteuid().as_raw()
    {
        return Ok(());
    }
    match fs::set_permissions(dir, fs::Permissions::from_mode(0o700)) {
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => Ok(()),
        r => r,
    }
}

/// Make `dir` (and its missing parents) a directory that only revl's user reaches: mode
/// 0700, owned by revl's effective user, not a symlink, whatever was there before (an
/// exec's upper layer lives in one: a setuid file the command makes sits there while it
/// runs, docs/security.md).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let m = fs::symlink_metadata(dir)?;
    let euid = rustix::process::geteuid().as_raw();
    if !m.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    if m.uid() != euid {
        return Err(std::io::Error::other(format!(
            "{} belongs to uid {}, not to revl's user (uid {euid})",
            dir.display(),
            m.uid()
        )));
    }
    if m.mode() & 0o7777 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// A [`ToolHost`](crate::tools::ToolHost), shared by the sessions of a store handle.
#[derive(Clone)]
struct Host(std::sync::Arc<dyn crate::tools::ToolHost>);

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolHost")
    }
}

/// Summary of one session, as `sessions` lists it.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub id: String,
    pub state: Life,
    pub workspace: String,
    pub head: crate::step::Pos,
    pub parent: Option<String>,
    /// The digest of the manifest copy its header names (`None`: no manifest).
    pub manifest_digest: Option<String>,
}

impl Store {
    /// Open (creating with mode 0700 if missing) the store at `root`.
    pub fn open(root: &Path, fp: Failpoints) -> Result<Store> {
        // Made durable, parents included: a power loss must not take back a store that
        // acknowledged sessions live in.
        if !root.exists() {
            crate::util::create_dir_durable(root, Some(0o700))
                .map_err(|e| Error::io(format!("cannot create store {}", root.display()), e))?;
        }
        let root = fs::canonicalize(root)
            .map_err(|e| Error::io(format!("cannot open store {}", root.display()), e))?;
        if !root.is_dir() {
            return Err(Error::new(
                Code::Usage,
                format!("store {} is not a directory", root.display()),
                "give a directory as the store",
            )
            .with_remedy(Remedy::GiveStore));
        }
        for sub in ["sessions", "blobs"] {
            let p = root.join(sub);
            if !p.exists() {
                crate::util::create_dir_durable(&p, Some(0o700))
                    .map_err(|e| Error::io(p.display(), e))?;
            }
        }
        // Only revl's user reaches what the store holds (docs/security.md): the store made
        // with a looser mode, by hand or by an older revl, is tightened.
        for p in [
            root.clone(),
            root.join("sessions"),
            root.join("blobs"),
            root.join("scratch"),
        ] {
            tighten(&p)
                .map_err(|e| Error::io(format!("cannot make {} private", p.display()), e))?;
        }
        Ok(Store {
            fp,
            lock_wait: LOCK_WAIT,
            host: None,
            storage: Storage::local(&root),
            root,
        })
    }

    /// Open (creating) a store at `root` of sessions another store wrote (docs/fleet.md),
    /// read with the offline readers as if they were local: its journals say so
    /// ([`Copied`]); its blobs are those of `blobs` when given (another store's `blobs/`).
    pub fn open_copy(root: &Path, copied: Copied, blobs: Option<PathBuf>) -> Result<Store> {
        let mut s = Store::open(root, Failpoints::none())?;
        s.storage = Storage {
            journals: std::sync::Arc::new(LocalJournals::copied(&s.root, copied)),
            blobs: std::sync::Arc::new(LocalBlobs::new(
                blobs.unwrap_or_else(|| s.root.join("blobs")),
            )),
        };
        Ok(s)
    }

    /// The same store, its journals and blobs kept by `storage` (the crash tests wrap the
    /// local ones in [`crate::faults::Faulty`]).
    pub fn with_storage(mut self, storage: Storage) -> Self {
        self.storage = storage;
        self
    }

    /// Where this store's journals and blobs are kept.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// What differs when this store holds sessions another store wrote.
    pub fn copied(&self) -> Option<&Copied> {
        self.storage.journals.copied()
    }

    /// The directory that stands for session `id`'s workspace, when it was written elsewhere.
    pub(crate) fn copied_workspace(&self, id: &str) -> Option<PathBuf> {
        self.copied().map(|c| c.workspaces.join(id))
    }

    /// Open (creating) the store at `root` to make a session on `workspace`: a store inside
    /// the workspace, or a workspace inside the store, is refused before anything is created.
    pub fn open_for(root: &Path, workspace: &Path, fp: Failpoints) -> Result<Store> {
        check_overlap(&resolve_future(root)?, &resolve_future(workspace)?)?;
        Store::open(root, fp)
    }

    /// The same store, whose sessions run Python function tools through `host`.
    pub fn with_tool_host(mut self, host: std::sync::Arc<dyn crate::tools::ToolHost>) -> Self {
        self.host = Some(Host(host));
        self
    }

    /// The runner of Python function tools of this store handle, if any.
    pub fn tool_host(&self) -> Option<&dyn crate::tools::ToolHost> {
        self.host.as_ref().map(|h| &*h.0)
    }

    /// The live session whose workspace is `dir` (canonical paths compared), if any. A
    /// workspace directory that was deleted still names its session (by the path it had).
    /// Asks the holders file, then the WALs of the sessions it names near `dir`
    /// (docs/wal-format.md, "The holders file").
    pub fn live_session_of(&self, dir: &Path) -> Result<Option<String>> {
        let canon = match fs::canonicalize(dir) {
            Ok(c) => c,
            Err(_) => resolve_future(dir)?,
        };
        Ok(crate::index::holders_near(self, &canon)?
            .into_iter()
            .find(|h| h.unreadable.is_none() && Path::new(&h.workspace) == canon)
            .map(|h| h.id))
    }

    /// Override the lock wait (tests of `busy`).
    pub fn with_lock_wait(mut self, d: Duration) -> Self {
        self.lock_wait = d;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn failpoints(&self) -> &Failpoints {
        &self.fp
    }

    pub fn blobs(&self) -> BlobStore {
        let dir = self
            .storage
            .blobs
            .dir()
            .map_or_else(|| self.root.join("blobs"), Path::to_path_buf);
        BlobStore::over(dir, self.storage.blobs.clone(), self.fp.clone())
    }

    /// The directories of this store's `file://` remotes (docs/fleet.md; `remotes.toml`,
    /// `[remotes.NAME] url = "file:///DIR"`), which the exec sandbox hides as it hides the
    /// store. A `remotes.toml` that does not parse is an error: what it names cannot be
    /// hidden.
    pub fn file_remote_dirs(&self) -> Result<Vec<PathBuf>> {
        let p = self.root.join("remotes.toml");
        let text = match fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(p.display(), e)),
        };
        let doc: toml::Table = toml::from_str(&text).map_err(|e| {
            Error::new(
                Code::Usage,
                format!("{} does not parse: {e}", p.display()),
                "fix or remove that file, then `revl remote add NAME URL` again",
            )
        })?;
        let mut out = Vec::new();
        if let Some(remotes) = doc.get("remotes").and_then(|r| r.as_table()) {
            for r in remotes.values() {
                let url = r.get("url").and_then(|u| u.as_str()).unwrap_or_default();
                if let Some(dir) = url.strip_prefix("file://").map(PathBuf::from) {
                    // A relative one is refused when the remote is added (it names nothing).
                    if dir.is_absolute() {
                        out.push(dir);
                    }
                }
            }
        }
        Ok(out)
    }

    pub fn session_dir(&self, id: &str) -> PathBuf {
        self.root.join("sessions").join(id)
    }

    /// Where the digests of session `id`'s workspace files are kept by stat for its scans
    /// of every witnessed path (crate::statindex; a cache).
    pub fn stat_index(&self, id: &str) -> PathBuf {
        self.session_dir(id).join("stat-index")
    }

    pub fn wal_path(&self, id: &str) -> PathBuf {
        self.session_dir(id).join("wal.jsonl")
    }

    /// The names of `sessions/` that are session ids, sorted, whether or not they hold a
    /// WAL yet: one directory read, nothing opened.
    pub(crate) fn session_names(&self) -> Result<Vec<String>> {
        let dir = self.root.join("sessions");
        let mut ids = Vec::new();
        for e in fs::read_dir(&dir).map_err(|e| Error::io(dir.display(), e))? {
            let e = e.map_err(|e| Error::io(dir.display(), e))?;
            if let Some(name) = e.file_name().to_str() {
                if is_session_id(name) {
                    ids.push(name.to_string());
                }
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Every session id in the store (directories holding a WAL), sorted.
    pub fn session_ids(&self) -> Result<Vec<String>> {
        let dir = self.root.join("sessions");
        let mut ids = Vec::new();
        for e in fs::read_dir(&dir).map_err(|e| Error::io(dir.display(), e))? {
            let e = e.map_err(|e| Error::io(dir.display(), e))?;
            if let Some(name) = e.file_name().to_str() {
                if is_session_id(name) && e.path().join("wal.jsonl").exists() {
                    ids.push(name.to_string());
                }
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Resolve a full id or a unique prefix of at least 6 hex characters.
    pub fn resolve(&self, given: &str) -> Result<String> {
        let g = given.trim().to_ascii_lowercase();
        if g.len() < 6 || g.len() > 32 || !g.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(Error::new(
                Code::UnknownSession,
                format!("{given:?} is not a session id (32 hex characters, or a unique prefix of at least 6)"),
                "check the session id",
            )
            .with_remedy(Remedy::ListSessions));
        }
        let matches: Vec<String> = self
            .session_ids()?
            .into_iter()
            .filter(|id| id.starts_with(&g))
            .collect();
        match matches.len() {
            1 => Ok(matches.into_iter().next().expect("one match")),
            0 => Err(Error::new(
                Code::UnknownSession,
                format!("no session {given} in store {}", self.root.display()),
                "check the session id and the store",
            )
            .with_remedy(Remedy::ListSessions)),
            n => Err(Error::new(
                Code::AmbiguousSession,
                format!("{given} matches {n} sessions"),
                "give more characters of the id",
            )),
        }
    }

    /// `(id, workspace)` of every session that holds its workspace: every live session,
    /// and every session whose WAL cannot be read but may be live (see
    /// [`Store::workspace_holders`]).
    pub fn live_workspaces(&self) -> Result<Vec<(String, String)>> {
        Ok(self
            .workspace_holders()?
            .into_iter()
            .map(|h| (h.id, h.workspace))
            .collect())
    }

    /// Every session that holds its workspace (one live session per workspace): the live
    /// ones, and those whose WAL cannot be read (corrupt, or written by a newer revl) unless
    /// its intact records already end it (frozen, committed, aborted). An unreadable WAL
    /// whose workspace is known (its header line names it) holds it, with the error that
    /// keeps it from being read: revl cannot tell that it is not live. One whose header
    /// names no workspace holds none (`sessions` lists it unreadable).
    pub fn workspace_holders(&self) -> Result<Vec<WorkspaceHolder>> {
        let mut out = Vec::new();
        for id in self.session_ids()? {
            if let crate::index::Hold::Holds(h) = self.hold_of(&id) {
                out.push(h);
            }
        }
        Ok(out)
    }

    /// What session `id`'s WAL says of its hold on its workspace (see
    /// [`Store::workspace_holders`]).
    pub(crate) fn hold_of(&self, id: &str) -> crate::index::Hold {
        use crate::index::Hold;
        let e = match self.info(id) {
            Ok(info) if info.state == Life::Live => {
                return Hold::Holds(WorkspaceHolder {
                    id: id.to_string(),
                    workspace: info.workspace,
                    unreadable: None,
                })
            }
            Ok(_) => return Hold::Ended,
            Err(e) => e,
        };
        let workspace = match self.info_prefix(id) {
            Ok((info, _)) if info.state != Life::Live => return Hold::Ended,
            Ok((info, _)) => Some(info.workspace),
            Err(_) => header_workspace(&self.wal_path(id)),
        };
        match workspace {
            Some(workspace) => Hold::Holds(WorkspaceHolder {
                id: id.to_string(),
                workspace,
                unreadable: Some(e),
            }),
            None => Hold::Unknown,
        }
    }

    /// Read-only summary of one session (no lock, no repair): from the session index when
    /// its entry still describes the WAL, else from the WAL, writing the entry again
    /// (docs/wal-format.md, "The session index").
    pub fn info(&self, id: &str) -> Result<SessionInfo> {
        if let Some(info) = crate::index::read(self, id) {
            return Ok(info);
        }
        let path = self.wal_path(id);
        let before = crate::index::WalStamp::now(&path);
        let (st, meta) = State::read(&path)?;
        let info = SessionInfo::of(id, &st);
        // Indexed only when the WAL did not change while it was read (a writer appending
        // meanwhile), and read whole (a torn tail waits for the writer that cuts it).
        if let Some(stamp) = before {
            if !meta.torn
                && meta.good_len == stamp.len()
                && crate::index::WalStamp::now(&path) == Some(stamp)
            {
                crate::index::write(self, id, &st, stamp);
            }
        }
        Ok(info)
    }

    /// Like [`Store::info`], read as far as the WAL is intact ([`State::read_prefix`]),
    /// with where it stops being readable.
    pub fn info_prefix(&self, id: &str) -> Result<(SessionInfo, Option<crate::wal::Corrupt>)> {
        let (st, _, corrupt) = State::read_prefix(&self.wal_path(id))?;
        Ok((SessionInfo::of(id, &st), corrupt))
    }

    /// `sessions` → `{sessions: [{session, state, workspace, head, parent?, corrupt?}]}`. A
    /// WAL corrupt past its header is listed as its intact records say, with `corrupt`
    /// (`{line, path, why}`); one that cannot be read at all is listed with `state:
    /// "unreadable"` and its error instead of hiding the others.
    pub fn sessions(&self) -> Result<crate::report::Sessions> {
        use crate::report::SessionEntry;
        let mut sessions = Vec::new();
        let mut seen = Vec::new();
        for id in self.session_ids()? {
            // An intact WAL reads the same both ways; the index answers for it.
            let read = match self.info(&id) {
                Ok(info) => Ok((info, None)),
                Err(_) => self.info_prefix(&id),
            };
            seen.push((
                id.clone(),
                read.as_ref()
                    .ok()
                    .map(|(i, _)| (i.state.clone(), i.workspace.clone())),
            ));
            sessions.push(match read {
                Ok((info, corrupt)) => SessionEntry::Known {
                    session: info.id,
                    state: info.state.as_str(),
                    workspace: info.workspace,
                    head: info.head,
                    parent: info.parent,
                    corrupt,
                },
                Err(e) => SessionEntry::Unreadable {
                    session: id,
                    state: "unreadable",
                    error: e.body(),
                },
            });
        }
        // Every session was just read: a holders file that says otherwise goes.
        crate::index::audit_holders(self, &seen);
        Ok(crate::report::Sessions { sessions })
    }

    /// Take session `id`'s lease if it is free now; `None` if another holds it.
    pub(crate) fn try_lease(&self, id: &str) -> Result<Option<Lease>> {
        self.storage
            .journals
            .lease(id, Duration::ZERO)
            .map_err(|e| Error::io(self.session_dir(id).join("lock").display(), e))
    }

    /// Take session `id`'s lease, waiting up to the store's lock wait.
    pub(crate) fn lease(&self, id: &str) -> Result<Lease> {
        self.storage
            .journals
            .lease(id, self.lock_wait)
            .map_err(|e| Error::io(self.session_dir(id).join("lock").display(), e))?
            .ok_or_else(|| crate::storage::busy(&format!("session {id}"), self.lock_wait))
    }

    pub(crate) fn store_lock(&self) -> Result<Lease> {
        let p = self.root.join("store.lock");
        crate::storage::lease_file(&p, self.lock_wait)
            .map_err(|e| Error::io(p.display(), e))?
            .ok_or_else(|| crate::storage::busy("the store", self.lock_wait))
    }
}

/// A session that holds its workspace ([`Store::workspace_holders`]); `unreadable`: why its
/// WAL cannot be read (it may be live).
#[derive(Debug, Clone)]
pub struct WorkspaceHolder {
    pub id: String,
    pub workspace: String,
    pub unreadable: Option<Error>,
}

impl SessionInfo {
    pub(crate) fn of(id: &str, st: &State) -> SessionInfo {
        SessionInfo {
            id: id.to_string(),
            state: st.life(),
            workspace: st.workspace.clone(),
            head: st.position(),
            parent: st.origin.as_ref().map(|o| o.parent.clone()),
            manifest_digest: st.manifest_digest.clone(),
        }
    }
}

/// The workspace a WAL's first line names, read as plain JSON (no CRC, no version check):
/// enough to know which workspace an unreadable session may hold, never to act on it.
fn header_workspace(wal: &Path) -> Option<String> {
    use std::io::{BufRead, Read};
    let f = File::open(wal).ok()?;
    let mut line = Vec::new();
    std::io::BufReader::new(f)
        .take(1 << 20)
        .read_until(b'\n', &mut line)
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(line.strip_suffix(b"\n")?).ok()?;
    if v.get("record")?.as_str()? != "header" {
        return None;
    }
    Some(v.get("workspace")?.as_str()?.to_string())
}

pub fn is_session_id(s: &str) -> bool {
    s.len() == 32 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

/// The canonical path `p` will have once created: the canonical deepest existing ancestor
/// joined with the missing components. Creates nothing.
pub fn resolve_future(p: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(p).map_err(|e| Error::io(p.display(), e))?;
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    loop {
        match fs::canonicalize(existing) {
            Ok(c) => {
                let mut out = c;
                for part in rest.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(_) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    existing = parent;
                }
                _ => {
                    return Err(Error::bad_args(
                        format!("cannot resolve {}", p.display()),
                        "give a path with an existing ancestor",
                    ))
                }
            },
        }
    }
}

/// A store inside a workspace, or a workspace inside a store, is refused
/// (docs/reference.md, "Concepts").
pub fn check_overlap(store: &Path, workspace: &Path) -> Result<()> {
    if store.starts_with(workspace) || workspace.starts_with(store) {
        return Err(Error::new(
            Code::StoreInWorkspace,
            format!(
                "the store {} and the workspace {} overlap",
                store.display(),
                workspace.display()
            ),
            "put the store outside the workspace",
        )
        .with_remedy(Remedy::GiveStore));
    }
    Ok(())
}
