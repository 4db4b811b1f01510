//! Sessions: create, attach (rebuild from the WAL, repair interrupted operations), and the
//! verbs on a live session. Every public verb leaves the WAL durable before it returns.
//!
//! The session is split by responsibility; its fields are private to this module:
//! - [`journal`](self): appending to the WAL through `State::apply`, and the life checks;
//! - `repair`: attach-time repair (docs/architecture.md, "Attach and repair"), in order;
//! - `effects`: file effects, provisions, boundaries;
//! - `exec`: a command in the sandbox, its change set applied as one step (or unconfined);
//! - `read`: timeline, inspect, status, owed, verify;
//! - `calls`: manifest tool calls by class, and manifest inverses;
//! - `commit`: approvals, commit, resend, model decisions;
//! - `unwind`: THE executor of [`crate::unwind::plan`]: step-back, abort and their repairs;
//! - `fork`: fork, fork-confirm, the branch WAL and the fork repair.

mod calls;
mod checkpoint;
mod commit;
pub mod diff;
mod effects;
mod exec;
mod fork;
mod journal;
mod kept;
mod read;
pub mod remote;
mod repair;
mod settle;
mod turns;
mod unwind;
mod view;

pub use calls::ManifestSource;
pub use checkpoint::{Bound, CheckpointKey, CheckpointSaved, Position};
pub use exec::{parse_size, ExecLimits, ExecOptions, DEFAULT_TIMEOUT};
pub use fork::{not_preserved, HeldSendsByMode, NOT_YET};
pub use journal::{Access, ReadOnly};
pub use kept::Kept;
pub use turns::ForkTurn;
pub use unwind::{DriftPolicy, StepBackMode};

use crate::blobs::BlobStore;
use crate::error::{Code, Error, Remedy, Result};
use crate::failpoint::Failpoints;
use crate::state::{Life, State};
use crate::step::{Step, StepKind};
use crate::store::Store;
use crate::util::now_rfc3339;
use crate::wal::{Record, StepRecord};
use crate::workspace::Workspace;
use serde_json::json;
use std::fs::File;
use std::path::{Path, PathBuf};

/// What a rewind claims, and no more (docs/reference.md, "Report entries and the guarantee").
pub const GUARANTEE: &str = "The inverses of the unwound steps ran, newest first; for file effects the recorded preimage bytes, modes and kinds were restored. Nothing is claimed about anything outside the workspace.";

/// What a timeline claims: only what revl recorded (a timeline documents no rewind).
pub const TIMELINE_CLAIM: &str = "This lists what revl recorded, in order, each step durable before it was reported. It claims nothing about the world: a step marked undone had its inverse run; nothing else was reverted.";

/// An attached session: its lock is held for as long as this value lives.
pub struct Session {
    store: Store,
    id: String,
    /// The WAL: writer, state, lease and access mode.
    journal: journal::Journal,
    ws: Workspace,
    blobs: BlobStore,
    fp: Failpoints,
    /// What attaching repaired (docs/architecture.md, "Attach and repair"): every front end
    /// reports it.
    repairs: Vec<Repaired>,
    /// A repair that could not run (a full disk, say) when attached to read: the session is
    /// shown as its WAL stands; the next writing command repairs it.
    repair_blocked: Option<String>,
    /// A session a serial fork froze: the branches that hold its workspace since (its
    /// branch, that branch's, ...), read once, for the paths it never touched.
    heirs: std::sync::OnceLock<Vec<State>>,
    /// A copied session whose untouched files are its base tree: that tree by path, read
    /// once ([`Session::base_index`]).
    base: std::sync::OnceLock<Option<remote::BaseIndex>>,
    /// What revl expects the workspace to hold ([`crate::drift::Expected`]) as of a
    /// [`State::witness_version`]: built once for the scans of one call (a fork's
    /// enumeration and the check of its branch's DIR) and, through [`Kept`], for the next
    /// calls of a long-lived handle while only records that change nothing it expects
    /// (a fork's bookkeeping) were appended; any other record means it is built again.
    expected: std::sync::Mutex<Option<(usize, std::sync::Arc<crate::drift::Expected>)>>,
}

impl Drop for Session {
    /// Released: the index entry says what the WAL now says (written here, under the lock,
    /// which the `lock` field releases after this runs).
    fn drop(&mut self) {
        self.index();
    }
}

/// One repair attaching made: `{what, step?, detail}`. `what` is one of `torn-tail`,
/// `temp-removed`, `lost-writes-redone`, `fork-repaired`, `intent-rolled-forward`,
/// `intent-rolled-back`, `exec-voided`, `outcome-unknown`, `step-back-finished`,
/// `commit-finished`, `abort-finished`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Repaired {
    pub what: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    pub detail: String,
}

impl Session {
    /// What revl expects the workspace to hold now (built once per state: see the field).
    pub(crate) fn expected(&self) -> std::sync::Arc<crate::drift::Expected> {
        let records = self.journal.state.witness_version;
        let mut memo = self.expected.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, e)) = &*memo {
            if *at == records {
                return e.clone();
            }
        }
        let e = std::sync::Arc::new(crate::drift::Expected::of_in_with(
            &self.journal.state.steps,
            &self.blobs,
            self.journal.state.inherited(),
        ));
        *memo = Some((records, e.clone()));
        e
    }

    /// What attaching repaired, in order (empty when nothing needed repair).
    pub fn repairs(&self) -> &[Repaired] {
        &self.repairs
    }

    /// Why a repair could not run when this session was attached to read.
    pub fn repair_blocked(&self) -> Option<&str> {
        self.repair_blocked.as_deref()
    }

    pub(crate) fn repaired(
        &mut self,
        what: &'static str,
        step: Option<u64>,
        detail: impl Into<String>,
    ) {
        self.repairs.push(Repaired {
            what,
            step,
            detail: detail.into(),
        });
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).finish()
    }
}

fn created_by() -> String {
    format!("revl {}", env!("CARGO_PKG_VERSION"))
}

impl Store {
    /// `new --workspace DIR`: create a session (refusing a workspace that has, or is nested
    /// in or around, a live session) and return it attached.
    pub fn new_session(&self, workspace: &Path, manifest: Option<&Path>) -> Result<Session> {
        self.new_session_with(workspace, manifest, &[])
    }

    /// [`Store::new_session`] with Python function tools declared by a front end (docs/python.md),
    /// recorded in the session's manifest copy beside the file's tools.
    pub fn new_session_with(
        &self,
        workspace: &Path,
        manifest: Option<&Path>,
        python: &[crate::tools::DeclaredTool],
    ) -> Result<Session> {
        self.new_session_from(workspace, ManifestSource::FileOrWorkspace(manifest), python)
    }

    /// [`Store::new_session_with`] with the manifest's source said explicitly: a front end
    /// that must never read the workspace's own `revl.toml` (`revl mcp`, whose agent can
    /// write it) gives [`ManifestSource::Fixed`].
    pub fn new_session_from(
        &self,
        workspace: &Path,
        manifest: ManifestSource<'_>,
        python: &[crate::tools::DeclaredTool],
    ) -> Result<Session> {
        // Every check runs on the path the workspace will have, before anything is created.
        let ws = crate::store::resolve_future(workspace)?;
        if ws.exists() && !ws.is_dir() {
            return Err(Error::bad_args(
                format!("workspace {} is not a directory", ws.display()),
                "give a directory as the workspace",
            )
            .with_remedy(Remedy::GiveWorkspace));
        }
        crate::store::check_overlap(self.root(), &ws)?;
        let manifest_digest = self.import_manifest_from(manifest, &ws, python)?;
        let store_lock = self.store_lock()?;
        let mut holders = crate::index::Holders::near(self, &ws, &store_lock)?;
        for h in holders.found() {
            let (id, other) = (&h.id, Path::new(&h.workspace));
            if !(other.starts_with(&ws) || ws.starts_with(other)) {
                continue;
            }
            let Some(e) = &h.unreadable else {
                return Err(Error::new(
                    Code::WorkspaceBusy,
                    format!(
                        "workspace {} already has a live session {} (on {})",
                        ws.display(),
                        id,
                        other.display()
                    ),
                    format!("commit or abort session {id} first, or use it"),
                ));
            };
            // Its WAL cannot be read: it may be live. Never start a second session beside it.
            let hint = match e.code {
                Code::CorruptWal => format!("`revl status {id}` shows its intact records; `revl recover {id} --truncate-corrupt` keeps them and moves the unreadable rest aside (no byte is lost), then commit or abort it, or use it; or use another workspace"),
                Code::NewerWal => format!("use the newer revl that wrote session {id} (commit or abort it there); or use another workspace"),
                _ => format!("{} (then commit or abort session {id}); or use another workspace", e.hint),
            };
            return Err(Error::new(
                Code::WorkspaceBusy,
                format!(
                    "workspace {} may have a live session {id} (on {}) whose WAL cannot be read, so revl cannot tell that it is not live and does not start a second one: {}",
                    ws.display(),
                    other.display(),
                    e.message
                ),
                hint,
            ));
        }
        crate::util::create_dir_durable(&ws, None)
            .map_err(|e| Error::io(format!("cannot create workspace {}", ws.display()), e))?;
        let ws = std::fs::canonicalize(&ws)
            .map_err(|e| Error::io(format!("cannot open workspace {}", ws.display()), e))?;
        let id = crate::util::new_id();
        let dir = self.session_dir(&id);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(dir.display(), e))?;
        let ts = Some(now_rfc3339());
        let header = Record::Header {
            wal_version: crate::wal::WAL_VERSION,
            seq: 0,
            session: id.clone(),
            workspace: ws.display().to_string(),
            manifest_digest,
            created_by: created_by(),
            guarantee: GUARANTEE.into(),
            ts: ts.clone(),
        };
        crate::wal::create_journal(
            &*self.storage().journals,
            &id,
            &self.wal_path(&id),
            &[header, hinge_record(1, ts.as_deref())?],
            &self.fp,
        )?;
        // The new WAL's entry in sessions/ is durable before the session is acknowledged, and
        // so are the store's own entries (sessions/ and blobs/ in it, it in its parent), which
        // a process that died before its fsync may have left unsynced.
        let root = self.root();
        let sessions = root.join("sessions");
        for d in [root.parent().unwrap_or(root), root, &sessions] {
            File::open(d)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io(d.display(), e))?;
        }
        holders.hold(&id, &ws);
        drop(holders);
        self.attach(&id)
    }

    /// Attach to a session: take its lock, rebuild its state from the WAL, repair any
    /// interrupted operation (docs/architecture.md, "Attach and repair").
    pub fn attach(&self, id: &str) -> Result<Session> {
        self.attach_kept(id, None)
    }

    /// [`Store::attach`] for a long-lived handle: with what the handle kept of the session
    /// after its last call ([`Session::keep`]), only the records appended since are read
    /// and checked (docs/architecture.md, "Incremental attach"); the result is the same as
    /// reading the whole WAL, which is what happens when the WAL is not that prefix plus
    /// clean appended records.
    pub fn attach_kept(&self, id: &str, kept: Option<Kept>) -> Result<Session> {
        self.known_session_dir(id)?;
        let lock = self.lease(id)?;
        self.attach_with(id, Some(lock), Attach::Write, kept)
    }

    /// Attach to read (`status`, `timeline`, `inspect`, …): like [`Store::attach`] when the
    /// session is free; when another command holds its lock (a long tool call), the WAL as
    /// it is now, read like the offline readers do: no waiting, no repair, and the session
    /// refuses to write ([`Session::busy`] is true).
    pub fn attach_read(&self, id: &str) -> Result<Session> {
        self.attach_read_kept(id, None)
    }

    /// [`Store::attach_read`] with what a long-lived handle kept (see [`Store::attach_kept`]).
    pub fn attach_read_kept(&self, id: &str, kept: Option<Kept>) -> Result<Session> {
        self.known_session_dir(id)?;
        let lock = self.try_lease(id)?;
        self.attach_with(id, lock, Attach::Read, kept)
    }

    /// Attach to show (`status`, `timeline`): like [`Store::attach_read`], and a WAL
    /// corrupt past its header is read as far as it is intact instead of refused; the
    /// session then carries where it stops ([`Session::corrupt`]), is not repaired, and
    /// refuses to write.
    pub fn attach_prefix(&self, id: &str) -> Result<Session> {
        self.attach_prefix_kept(id, None)
    }

    /// [`Store::attach_prefix`] with what a long-lived handle kept (see
    /// [`Store::attach_kept`]).
    pub fn attach_prefix_kept(&self, id: &str, kept: Option<Kept>) -> Result<Session> {
        self.known_session_dir(id)?;
        let lock = self.try_lease(id)?;
        self.attach_with(id, lock, Attach::Prefix, kept)
    }

    /// The directory of session `id` (a full id, as [`Store::resolve`] gives), or
    /// `unknown-session` when the store holds no such session: a library caller that
    /// names a session directly gets the same refusal as the CLI, not an I/O error.
    fn known_session_dir(&self, id: &str) -> Result<PathBuf> {
        let dir = self.session_dir(id);
        let plain = id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit());
        if plain && dir.is_dir() {
            return Ok(dir);
        }
        // Not a stored session: resolve it for the one-line refusal (a malformed id, no
        // such session, or a prefix, which names a session only through `resolve`).
        let full = self.resolve(id)?;
        if full == id {
            return Ok(dir);
        }
        Err(Error::new(
            Code::UnknownSession,
            format!("{id:?} is a prefix of session {full}; attach takes the full id"),
            "resolve the id first (the CLI and Python accept prefixes and resolve them)",
        ))
    }

    fn attach_with(
        &self,
        id: &str,
        lock: Option<crate::storage::Lease>,
        how: Attach,
        kept: Option<Kept>,
    ) -> Result<Session> {
        let lenient = how == Attach::Prefix;
        let wal_path = self.wal_path(id);
        // What a handle kept is used only under the session's lock: a read while another
        // command writes reads the WAL as it stands, whole.
        let resumed = match kept {
            Some(k) if k.id() == id && lock.is_some() => k.resume(&wal_path),
            _ => None,
        };
        let mut expected = None;
        let (state, read, corrupt) = if let Some((state, read, exp)) = resumed {
            expected = exp;
            (state, read, None)
        } else if lenient {
            State::read_prefix(&wal_path)?
        } else {
            let (state, read) = State::read(&wal_path)?;
            (state, read, None)
        };
        let ws_root = self
            .copied_workspace(id)
            .unwrap_or_else(|| PathBuf::from(&state.workspace));
        // A layered branch workspace is mounted again where it is not (after a reboot or an
        // unmount: docs/architecture.md, "Layered workspaces"). A command that writes
        // needs it; a read goes on without it.
        if self.copied().is_none() {
            let mounted = self.layers().ensure_mounted(id);
            if how == Attach::Write {
                mounted?;
            }
        }
        let ws = Workspace::new(ws_root, self.fp.clone());
        // The access mode is decided here, once: a mirror's WALs are another store's (read as
        // they stand, never repaired or cut); a WAL read as far as it is intact is never
        // written; without the lock, the WAL is read as another command leaves it.
        let access = if let Some(c) = corrupt {
            Access::ReadOnly(ReadOnly::Corrupt(c))
        } else if self.copied().is_some_and(|c| !c.writable) {
            Access::ReadOnly(ReadOnly::Cache)
        } else if lock.is_none() {
            Access::ReadOnly(ReadOnly::Busy)
        } else {
            Access::Write
        };
        let journal = journal::Journal::new(
            wal_path,
            state,
            &read,
            self.fp.clone(),
            lock,
            access,
            self.storage().journals.clone(),
        );
        let mut s = Session {
            store: self.clone(),
            id: id.to_string(),
            journal,
            ws,
            blobs: self.blobs(),
            fp: self.fp.clone(),
            repairs: Vec::new(),
            repair_blocked: None,
            heirs: std::sync::OnceLock::new(),
            base: std::sync::OnceLock::new(),
            expected: std::sync::Mutex::new(expected),
        };
        // A command that writes cuts a torn last line before anything else (opening the
        // writer does it and says so), so the repair is reported with the others; a read
        // leaves it, reported as `torn` (docs/wal-format.md, "Torn tails and corruption").
        if s.journal.access() == &Access::ReadOnly(ReadOnly::Cache) {
            return Ok(s);
        }
        let writable = s.journal.access() == &Access::Write;
        if how == Attach::Write
            && writable
            && s.journal.torn
            && s.journal.state.life() == Life::Live
        {
            s.writer()?;
        }
        if writable {
            if let Err(e) = s.repair() {
                if how == Attach::Write {
                    return Err(e);
                }
                // Reads still work while a repair is blocked: the WAL as it stands, with
                // the repairs that did run before it.
                let mut again = self.attach_with(id, None, how, None)?;
                again.journal.set_lease(s.journal.take_lease());
                again.repairs = std::mem::take(&mut s.repairs);
                let then = if e.code == Code::Io {
                    "the next writing command tries again"
                } else {
                    "fix the cause first"
                };
                let why = format!(
                    "an interrupted operation could not be repaired ({}; {}): shown as the WAL stands; {then}",
                    e.message, e.hint
                );
                // Held, and still read only: nothing is written over an unrepaired WAL.
                again
                    .journal
                    .set_access(Access::ReadOnly(ReadOnly::Unrepaired(why.clone())));
                again.repair_blocked = Some(why);
                return Ok(again);
            }
        }
        Ok(s)
    }
}

/// How a session is attached: to write (repair must succeed), to read (a blocked repair
/// leaves the WAL as it stands), or to show a WAL corrupt past its header (its intact prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attach {
    Write,
    Read,
    Prefix,
}

/// A confirm's `--hash` is the whole SHA-256 the report printed (64 hex characters). Anything
/// else (a prefix, a typo'd length) is bad input, refused before it can count as a stale hash
/// (which would clear a pending fork).
pub(crate) fn require_full_hash(hash: &str, report: &str) -> Result<()> {
    if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(());
    }
    Err(Error::bad_args(
        format!(
            "--hash {hash:?} is not a full hash: give all 64 hex characters (a prefix is not accepted); nothing was changed"
        ),
        format!("copy the whole `hash` from the {report} report"),
    ))
}

/// Step 0 of every session and branch.
pub(crate) fn hinge_record(seq: u64, ts: Option<&str>) -> Result<Record> {
    let mut rec = StepRecord::new(
        seq,
        0,
        StepKind::Hinge,
        "session/hinge",
        "session",
        &json!({}),
    )?;
    rec.set_ts(ts)?;
    Ok(Record::Step(rec))
}

impl Session {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn state(&self) -> &State {
        &self.journal.state
    }

    pub fn steps(&self) -> &[Step] {
        &self.journal.state.steps
    }

    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    pub fn wal_path(&self) -> &Path {
        self.journal.path()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Read while another revl command held the session's lock: the WAL as it was then,
    /// with any operation that command is running not yet finished (nor repaired).
    pub fn busy(&self) -> bool {
        !self.journal.leased()
    }

    /// Where the WAL stops being readable, when it was read as far as it is intact
    /// ([`Store::attach_prefix`]): the state shown is that of the records before it.
    pub fn corrupt(&self) -> Option<&crate::wal::Corrupt> {
        match self.journal.access() {
            Access::ReadOnly(ReadOnly::Corrupt(c)) => Some(c),
            _ => None,
        }
    }
}
