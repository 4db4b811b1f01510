//! The session index (docs/wal-format.md, "The session index"): per session, a small file
//! `sessions/<id>/index.json` saying what its WAL says of it (life, workspace, head, parent,
//! manifest), and which WAL bytes say so. `new`, `sessions` and the one-live-session check
//! read it instead of replaying every WAL.
//!
//! The WAL stays the only truth. An entry is used only when the WAL file is the one it was
//! made from and has not changed since: same device and inode, same length, same
//! modification and change times (any write to the file changes them). Anything else (no
//! entry, an entry that does not parse or names another session, a WAL that grew, shrank
//! or was replaced, a torn tail) reads the WAL, and writes the entry again. So the entry
//! needs no fsync: a power loss can leave it old, half written or missing, and each of
//! those only costs one full read. A mirror store's sessions have no entries (their WALs
//! are another store's).

use crate::state::Life;
use crate::step::Pos;
use crate::store::{SessionInfo, Store};
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
    wal: WalStamp,
}

const INDEX_VERSION: u32 = 1;

impl Entry {
    fn info(self) -> Option<SessionInfo> {
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
        Some(SessionInfo {
            id: self.session,
            state,
            workspace: self.workspace,
            head: self.head,
            parent: self.parent,
            manifest_digest: self.manifest_digest,
        })
    }
}

/// Session `id`'s entry, if there is one that still describes its WAL as it is now.
pub(crate) fn read(store: &Store, id: &str) -> Option<SessionInfo> {
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
    entry.info()
}

/// Write session `id`'s entry: `info` is what the WAL bytes stamped `wal` say. Best effort
/// (an entry that cannot be written is read from the WAL next time): a temp file of this
/// process renamed over the entry, never fsynced (see the module's documentation).
pub(crate) fn write(store: &Store, id: &str, info: &SessionInfo, wal: WalStamp) {
    if store.copied().is_some() {
        return;
    }
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
        wal,
    };
    let Ok(mut text) = serde_json::to_vec(&entry) else {
        return;
    };
    text.push(b'\n');
    let dir = store.session_dir(id);
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{INDEX_FILE}.{}.{n}.tmp", std::process::id()));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(&text))
        .and_then(|_| std::fs::rename(&tmp, dir.join(INDEX_FILE)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
