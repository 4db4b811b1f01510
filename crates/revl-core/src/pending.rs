//! The preimages an agent's edit tool call waits with between its `PreToolUse` and its
//! `PostToolUse` (docs/agents.md): `STORE/agents/pending/SESSION/KEY.json`, one file per
//! tool call, each `[[PATH, RESTORE-ENTRY], …]`. They are outside the WAL until the edit is
//! recorded, so `gc` reads them here: a blob a pending preimage names is reachable.

use crate::error::{Error, Result};
use crate::store::Store;
use crate::undo::RestoreEntry;
use std::path::PathBuf;

/// One session's pending edits.
#[derive(Debug, Clone)]
pub struct PendingEdits {
    dir: PathBuf,
}

/// The paths a tool call will change, each with its preimage.
pub type Preimages = Vec<(String, RestoreEntry)>;

impl Store {
    /// The pending edits of `session` (see [`PendingEdits`]).
    pub fn pending_edits(&self, session: &str) -> PendingEdits {
        PendingEdits {
            dir: self.root().join("agents").join("pending").join(session),
        }
    }
}

impl PendingEdits {
    /// The file of the tool call `key`: a plain id (letters, digits, `_` and `-`, up to 128).
    fn file(&self, key: &str) -> Result<PathBuf> {
        if key.is_empty()
            || key.len() > 128
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(Error::bad_args(
                format!(
                    "the tool-use id {} is not a plain id (letters, digits, _ and -, up to 128)",
                    crate::util::visible(key, false)
                ),
                "`revl hook` is run by the agent's hooks (docs/agents.md)",
            ));
        }
        Ok(self.dir.join(format!("{key}.json")))
    }

    /// Keep the preimages of the tool call `key` (durably, replacing any kept before).
    pub fn put(&self, key: &str, pre: &Preimages) -> Result<()> {
        let path = self.file(key)?;
        crate::util::write_durable(&path, &serde_json::to_vec(pre).unwrap_or_default())
            .map_err(|e| Error::io(path.display(), e))
    }

    /// The preimages the tool call `key` kept, if any (left in place: [`PendingEdits::remove`]
    /// once they are recorded).
    pub fn get(&self, key: &str) -> Result<Option<Preimages>> {
        let path = self.file(key)?;
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(path.display(), e)),
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::new(
                crate::error::Code::Io,
                format!(
                    "the kept preimages {} are unreadable ({e}): the edit is not recorded (`revl verify` lists it)",
                    path.display()
                ),
                "run the edit again through the agent",
            )
        })
    }

    /// Forget the preimages of the tool call `key`.
    pub fn remove(&self, key: &str) -> Result<()> {
        let path = self.file(key)?;
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path.display(), e)),
            _ => Ok(()),
        }
    }

    /// Every preimage kept now, of every tool call (an unreadable file is an error: gc
    /// cannot tell what it names).
    pub fn all(&self) -> Result<Vec<RestoreEntry>> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(self.dir.display(), e)),
        };
        let mut out = Vec::new();
        for f in rd {
            let f = f.map_err(|e| Error::io(self.dir.display(), e))?;
            let name = f.file_name().to_string_lossy().into_owned();
            let Some(key) = name.strip_suffix(".json") else {
                continue; // a temp file being written
            };
            if name.starts_with('.') {
                continue;
            }
            if let Some(pre) = self.get(key)? {
                out.extend(pre.into_iter().map(|(_, e)| e));
            }
        }
        Ok(out)
    }
}
