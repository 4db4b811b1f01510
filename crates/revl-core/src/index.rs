//! The session index (docs/wal-format.md, "The session index"): per session, a small file
//! `sessions/<id>/index.json` saying what its WAL says of it (life, workspace, head, parent,
//! manifest, and what `log` shows), and which WAL bytes say so. `sessions`, `log` and the
//! one-live-session check read it instead of replaying every WAL. And the store's holders
//! file ([`Holders`], docs/wal-format.md, "The holders file"): which sessions may hold which
//! workspace, so `new` reads only the sessions near its workspace.
//!
//! The WAL stays the only truth. An entry is used only when the WAL file is the one it was
//! made from and has not changed since: same device and inode, same length, same
//! modification and change times (any write to the file changes them). Anything else (no
//! entry, an entry that does not parse or names another session, a WAL that grew, shrank
//! or was replaced, a torn tail) reads the WAL, and writes the entry again. So the entry
//! needs no fsync: a power loss can leave it old, half written or missing, and each of
//! those only costs one full read. A mirror store's sessions have no entries (their WALs
//! are another store's).

use crate::log::{Facts, FactsOrigin, LogCheckpoint};
use crate::state::{ForkSeen, Life, State};
use crate::step::Pos;
use crate::store::{SessionInfo, Store, WorkspaceHolder};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The index file in a session's directory.
pub const INDEX_FILE: &str = "index.json";

/// An entry larger than this is not one revl wrote: read the WAL instead.
const MAX_ENTRY: u64 = 1 << 20;

/// What identifies the WAL bytes an entry was made from (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WalStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl WalStamp {
    pub(crate) fn of(m: &std::fs::Metadata) -> WalStamp {
        WalStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        }
    }

    /// The stamp of the WAL at `path` now.
    pub(crate) fn now(path: &Path) -> Option<WalStamp> {
        std::fs::metadata(path).ok().map(|m| WalStamp::of(&m))
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

/// One entry, as the file holds it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    index_version: u32,
    session: String,
    state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    branch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frozen_at: Option<Pos>,
    workspace: String,
    head: Pos,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    manifest_digest: Option<String>,
    /// A fork the session began is neither complete nor abandoned
    /// ([`State::fork_unfinished`]): a branch's commands repair their parent's fork only
    /// where this says so (or the entry no longer describes the WAL).
    fork_unfinished: bool,
    wal: WalStamp,
    /// What `log` shows beyond the above (absent: `log` reads the WAL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    log: Option<LogPart>,
}

const INDEX_VERSION: u32 = 3;

/// An entry whose `log` part would list more items than this (checkpoints, forks, residue)
/// has none: it stays small, and `log` reads that session's WAL.
const MAX_LOG_ITEMS: usize = 256;

/// The part of an entry `log` reads ([`Facts`]); `head`, `state`, `workspace` and `parent`
/// are the entry's own.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LogPart {
    /// A branch: where it diverged, whether its parent is remote, what its fork left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    origin: Option<OriginPart>,
    /// `[branch, mode]` of each fork this session began.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    forks: Vec<(String, String)>,
    /// `[position, checkpointId]` of each bound checkpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    checkpoints: Vec<(u64, String)>,
    queued: usize,
    pending_approvals: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mid_fork: Option<Pos>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    abandoned_forks: Vec<AbandonedPart>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OriginPart {
    at: Pos,
    remote: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    outstanding: Vec<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AbandonedPart {
    branch: String,
    at: Pos,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hash: Option<String>,
    mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    into: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    why: Option<String>,
}

/// The fork modes revl writes, as the state holds them.
fn fork_mode(m: &str) -> Option<&'static str> {
    match m {
        "serial" => Some("serial"),
        "parallel" => Some("parallel"),
        _ => None,
    }
}

impl LogPart {
    /// `None` when the facts are too many to keep in the entry, or not what an intact WAL
    /// of session `id` gives.
    fn of(id: &str, f: &Facts) -> Option<LogPart> {
        let items = f.forks.len()
            + f.checkpoints.len()
            + f.abandoned_forks.len()
            + f.origin.as_ref().map_or(0, |o| o.outstanding.len());
        if items > MAX_LOG_ITEMS || f.session != id || f.torn || f.corrupt.is_some() {
            return None;
        }
        Some(LogPart {
            origin: f.origin.as_ref().map(|o| OriginPart {
                at: o.at,
                remote: o.remote,
                outstanding: o.outstanding.clone(),
            }),
            forks: f
                .forks
                .iter()
                .map(|(b, m)| (b.clone(), m.to_string()))
                .collect(),
            checkpoints: f
                .checkpoints
                .iter()
                .map(|c| (c.position, c.checkpoint_id.clone()))
                .collect(),
            queued: f.queued,
            pending_approvals: f.pending_approvals,
            mid_fork: f.mid_fork,
            abandoned_forks: f
                .abandoned_forks
                .iter()
                .map(|a| AbandonedPart {
                    branch: a.branch.clone(),
                    at: a.at,
                    hash: a.hash.clone(),
                    mode: a.mode.to_string(),
                    into: a.into.clone(),
                    why: a.why.clone(),
                })
                .collect(),
        })
    }

    fn facts(self, info: SessionInfo) -> Option<Facts> {
        let origin = match (self.origin, info.parent) {
            (Some(o), Some(parent)) => Some(FactsOrigin {
                parent,
                at: o.at,
                remote: o.remote,
                outstanding: o.outstanding,
            }),
            (None, None) => None,
            _ => return None,
        };
        let mut forks = Vec::with_capacity(self.forks.len());
        for (b, m) in self.forks {
            forks.push((b, fork_mode(&m)?));
        }
        let mut abandoned_forks = Vec::with_capacity(self.abandoned_forks.len());
        for a in self.abandoned_forks {
            abandoned_forks.push(ForkSeen {
                branch: a.branch,
                at: a.at,
                hash: a.hash,
                mode: fork_mode(&a.mode)?,
                into: a.into,
                outcome: "abandoned",
                why: a.why,
            });
        }
        Some(Facts {
            session: info.id,
            state: info.state.as_str(),
            head: info.head,
            workspace: info.workspace,
            origin,
            forks,
            checkpoints: self
                .checkpoints
                .into_iter()
                .map(|(position, checkpoint_id)| LogCheckpoint {
                    position,
                    checkpoint_id,
                })
                .collect(),
            queued: self.queued,
            pending_approvals: self.pending_approvals,
            mid_fork: self.mid_fork,
            abandoned_forks,
            torn: false,
            corrupt: None,
        })
    }
}

impl Entry {
    fn info(self) -> Option<SessionInfo> {
        self.split().map(|(info, _)| info)
    }

    fn split(self) -> Option<(SessionInfo, Option<LogPart>)> {
        if self.index_version != INDEX_VERSION {
            return None;
        }
        let state = match (self.state.as_str(), self.branch, self.frozen_at) {
            ("live", None, None) => Life::Live,
            ("committed", None, None) => Life::Committed,
            ("aborted", None, None) => Life::Aborted,
            ("frozen", Some(branch), Some(at)) => Life::Frozen { branch, at },
            _ => return None,
        };
        let info = SessionInfo {
            id: self.session,
            state,
            workspace: self.workspace,
            head: self.head,
            parent: self.parent,
            manifest_digest: self.manifest_digest,
        };
        Some((info, self.log))
    }
}

/// Session `id`'s entry, if there is one that still describes its WAL as it is now.
pub(crate) fn read(store: &Store, id: &str) -> Option<SessionInfo> {
    entry(store, id)?.info()
}

/// What `log` shows of session `id`, from its entry, if there is one that still describes
/// its WAL as it is now and has the part `log` reads.
pub(crate) fn read_log(store: &Store, id: &str) -> Option<Facts> {
    let (info, log) = entry(store, id)?.split()?;
    log?.facts(info)
}

/// Whether session `id` has a fork it began and has not finished, from its entry, if
/// there is one of this version that still describes its WAL as it is now.
pub(crate) fn fork_unfinished(store: &Store, id: &str) -> Option<bool> {
    let e = entry(store, id)?;
    (e.index_version == INDEX_VERSION).then_some(e.fork_unfinished)
}

fn entry(store: &Store, id: &str) -> Option<Entry> {
    if store.copied().is_some() {
        return None;
    }
    let dir = store.session_dir(id);
    let mut text = Vec::new();
    std::fs::File::open(dir.join(INDEX_FILE))
        .ok()?
        .take(MAX_ENTRY)
        .read_to_end(&mut text)
        .ok()?;
    let entry: Entry = serde_json::from_slice(&text).ok()?;
    if entry.session != id || WalStamp::now(&store.wal_path(id))? != entry.wal {
        return None;
    }
    Some(entry)
}

/// Write session `id`'s entry: `st` is the replay of the WAL bytes stamped `wal`. Best
/// effort (an entry that cannot be written is read from the WAL next time): a temp file of
/// this process renamed over the entry, never fsynced (see the module's documentation).
pub(crate) fn write(store: &Store, id: &str, st: &State, wal: WalStamp) {
    if store.copied().is_some() {
        return;
    }
    let info = SessionInfo::of(id, st);
    let (state, branch, frozen_at) = match &info.state {
        Life::Frozen { branch, at } => ("frozen", Some(branch.clone()), Some(*at)),
        other => (other.as_str(), None, None),
    };
    let entry = Entry {
        index_version: INDEX_VERSION,
        session: id.to_string(),
        state: state.to_string(),
        branch,
        frozen_at,
        workspace: info.workspace.clone(),
        head: info.head,
        parent: info.parent.clone(),
        manifest_digest: info.manifest_digest.clone(),
        fork_unfinished: st.fork_unfinished(),
        wal,
        log: LogPart::of(id, &Facts::of(st, false, None)),
    };
    let Ok(mut text) = serde_json::to_vec(&entry) else {
        return;
    };
    text.push(b'\n');
    replace_file(&store.session_dir(id), INDEX_FILE, &text);
}

/// Put `text` in `dir/name` by a temp file of this process renamed over it, never fsynced.
/// Best effort: a file that cannot be written is rebuilt by its reader.
fn replace_file(dir: &Path, name: &str, text: &[u8]) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(text))
        .and_then(|_| std::fs::rename(&tmp, dir.join(name)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The store's record of which sessions hold a workspace (docs/wal-format.md, "The
/// holders file"), in the store's root.
pub const HOLDERS_FILE: &str = "holders.json";

const HOLDERS_VERSION: u32 = 2;

/// A holders file larger than this is not one revl wrote: it is rebuilt.
const MAX_HOLDERS: u64 = 64 << 20;

/// The holders file, as it holds it. Every session directory of `sessions/` at the time it
/// was written is in exactly one of the three lists.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HoldersDoc {
    holders_version: u32,
    /// Sessions whose WAL ends them (committed, aborted, frozen by a fork): a session never
    /// comes back to life, so these hold no workspace for good.
    ended: Vec<String>,
    /// `[session, workspace]`: sessions that may hold their workspace (live, or whose WAL
    /// cannot be read but may be live). The workspace is the one its WAL's header names,
    /// which never changes.
    holders: Vec<(String, String)>,
    /// Sessions with no workspace known yet (no WAL yet, or a header that cannot be read):
    /// read again every time.
    unknown: Vec<String>,
}

/// The file's last line: `crc32c XXXXXXXX` over every byte before it, so that a file
/// changed by anything but revl (a torn write, a flipped byte, an edit) is rebuilt; computed
/// over the bytes as read and as written (never by serialising the document again).
const CRC_LINE: &[u8] = b"crc32c ";

/// What a session's WAL says of its hold on its workspace.
pub(crate) enum Hold {
    /// It holds it (live, or unreadable but maybe live).
    Holds(WorkspaceHolder),
    /// It never will again.
    Ended,
    /// No workspace is known (no WAL, or no readable header).
    Unknown,
}

impl HoldersDoc {
    /// The file, if it is one revl wrote (any doubt: `None`, and it is rebuilt).
    fn load(store: &Store) -> Option<HoldersDoc> {
        let mut text = Vec::new();
        std::fs::File::open(store.root().join(HOLDERS_FILE))
            .ok()?
            .take(MAX_HOLDERS)
            .read_to_end(&mut text)
            .ok()?;
        // `<json>\ncrc32c XXXXXXXX\n`: the CRC of everything up to and with the first newline.
        let end = text.iter().position(|&b| b == b'\n')? + 1;
        let (body, trailer) = text.split_at(end);
        let hex = trailer.strip_prefix(CRC_LINE)?.strip_suffix(b"\n")?;
        let stored = u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
        if hex.len() != 8 || crc32c::crc32c(body) != stored {
            return None;
        }
        let doc: HoldersDoc = serde_json::from_slice(body).ok()?;
        if doc.holders_version != HOLDERS_VERSION {
            return None;
        }
        let mut seen = std::collections::HashSet::new();
        let ids = doc
            .ended
            .iter()
            .chain(doc.holders.iter().map(|(id, _)| id))
            .chain(&doc.unknown);
        for id in ids {
            if !crate::store::is_session_id(id) || !seen.insert(id.as_str()) {
                return None;
            }
        }
        if doc
            .holders
            .iter()
            .any(|(_, ws)| !Path::new(ws).is_absolute())
        {
            return None;
        }
        Some(doc)
    }

    fn store(&self, store: &Store) {
        let Ok(mut text) = serde_json::to_vec(self) else {
            return;
        };
        text.push(b'\n');
        let crc = crc32c::crc32c(&text);
        text.extend_from_slice(CRC_LINE);
        text.extend_from_slice(format!("{crc:08x}\n").as_bytes());
        replace_file(store.root(), HOLDERS_FILE, &text);
    }
}

/// Whether workspaces `a` and `b` are the same directory or one is inside the other.
fn overlap(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The sessions that hold a workspace overlapping `ws` (the same directory, or one inside
/// the other), each read from its own WAL (through its index entry): the one-live-session
/// check, at a cost that does not grow with the sessions that hold other workspaces or
/// ended (docs/wal-format.md, "The holders file").
///
/// The holders file says which sessions may hold which workspace. It is believed only as
/// far as it cannot be wrong: a session directory it does not list (made after it was
/// written: a crash before it was updated, a fork, a copy) is read; one it lists as
/// holding a workspace near `ws` is read (it may have ended); one it lists as ended stays
/// ended (a WAL never takes that back, and it was recorded only once durable). A file
/// missing, garbled or of another version is rebuilt by reading every session.
pub struct Holders<'a> {
    store: &'a Store,
    found: Vec<WorkspaceHolder>,
    doc: HoldersDoc,
    /// The file is to be written (what was read differs from what it says), when dropped.
    changed: bool,
    /// Under the store lock: the file may be written.
    locked: bool,
}

impl<'a> Holders<'a> {
    /// The holders near `ws` (resolved). `_store_lock`: the store lock, under which alone
    /// the file is written.
    pub(crate) fn near(
        store: &'a Store,
        ws: &Path,
        _store_lock: &crate::storage::Lease,
    ) -> crate::error::Result<Holders<'a>> {
        let mut h = Holders::scan(store, ws)?;
        h.locked = true;
        Ok(h)
    }

    fn scan(store: &'a Store, ws: &Path) -> crate::error::Result<Holders<'a>> {
        if store.copied().is_some() {
            // A mirror's sessions have no index: every WAL is read.
            let found = store
                .workspace_holders()?
                .into_iter()
                .filter(|h| overlap(Path::new(&h.workspace), ws))
                .collect();
            return Ok(Holders {
                store,
                found,
                doc: HoldersDoc::default(),
                changed: false,
                locked: false,
            });
        }
        let old = HoldersDoc::load(store);
        let mut known: std::collections::HashMap<&str, Option<&str>> =
            std::collections::HashMap::new();
        if let Some(d) = &old {
            for id in &d.ended {
                known.insert(id, None);
            }
            for (id, w) in &d.holders {
                known.insert(id, Some(w));
            }
        }
        let mut doc = HoldersDoc {
            holders_version: HOLDERS_VERSION,
            ..HoldersDoc::default()
        };
        let mut found = Vec::new();
        for id in store.session_names()? {
            let hold = match known.get(id.as_str()) {
                Some(None) => Hold::Ended,
                Some(Some(w)) if !overlap(Path::new(w), ws) => {
                    doc.holders.push((id, w.to_string()));
                    continue;
                }
                _ => match store.hold_of(&id) {
                    // Recorded as ended only once the WAL that says so is on disk: a power
                    // loss must not leave the file saying ended and the WAL live.
                    Hold::Ended if !durable(&store.wal_path(&id)) => Hold::Unknown,
                    h => h,
                },
            };
            match hold {
                Hold::Ended => doc.ended.push(id),
                Hold::Unknown => doc.unknown.push(id),
                Hold::Holds(h) => {
                    doc.holders.push((id, h.workspace.clone()));
                    if overlap(Path::new(&h.workspace), ws) {
                        found.push(h);
                    }
                }
            }
        }
        let changed = old.as_ref() != Some(&doc);
        Ok(Holders {
            store,
            found,
            doc,
            changed,
            locked: false,
        })
    }

    /// The sessions holding a workspace near the one asked about, as their WALs say.
    pub fn found(&self) -> &[WorkspaceHolder] {
        &self.found
    }

    /// Record session `id`, just created on `ws` (under the same store lock); the file is
    /// written when this is dropped.
    pub(crate) fn hold(&mut self, id: &str, ws: &Path) {
        self.doc
            .holders
            .push((id.to_string(), ws.display().to_string()));
        self.changed = true;
    }
}

impl Drop for Holders<'_> {
    /// Write what was read (a refused `new` too: the next one need not read it again).
    fn drop(&mut self) {
        if self.changed && self.locked && self.store.copied().is_none() {
            self.doc.store(self.store);
        }
    }
}

/// The holders near `ws`, without the store lock: the file is read, never written.
pub(crate) fn holders_near(store: &Store, ws: &Path) -> crate::error::Result<Vec<WorkspaceHolder>> {
    Ok(std::mem::take(&mut Holders::scan(store, ws)?.found))
}

/// The WAL at `path` is on disk (an fsync of it returned).
fn durable(path: &Path) -> bool {
    std::fs::File::open(path).and_then(|f| f.sync_all()).is_ok()
}

/// `sessions` read every session: if the holders file says of one what its WAL contradicts
/// (ended while it is not, or another workspace), the file is removed, to be rebuilt.
pub(crate) fn audit_holders(store: &Store, read: &[(String, Option<(Life, String)>)]) {
    if store.copied().is_some() {
        return;
    }
    let Some(doc) = HoldersDoc::load(store) else {
        return;
    };
    let ended: std::collections::HashSet<&str> = doc.ended.iter().map(|s| s.as_str()).collect();
    let held: std::collections::HashMap<&str, &str> = doc
        .holders
        .iter()
        .map(|(id, w)| (id.as_str(), w.as_str()))
        .collect();
    let wrong = read.iter().any(|(id, r)| match r {
        Some((Life::Live, ws)) => {
            ended.contains(id.as_str()) || held.get(id.as_str()).is_some_and(|w| w != ws)
        }
        Some(_) => false,
        // Unreadable: the file may not say it ended.
        None => ended.contains(id.as_str()),
    });
    if wrong {
        let _ = std::fs::remove_file(store.root().join(HOLDERS_FILE));
    }
}
