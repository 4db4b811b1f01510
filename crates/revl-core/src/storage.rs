//! The storage seams (SPEC 21): what the rest of revl needs from where sessions live, as
//! three traits, with the local store as their first implementation. A fleet store (the
//! `revl-fleet` crate: S3-compatible object storage, a shared directory, PostgreSQL) moves
//! sessions between a local store and a remote one through these and nothing else, so the
//! core stays free of network code and every local guarantee is unchanged: the local WAL
//! stays the commit point.
//!
//! - [`Journal`]: a session's WAL as bytes: its length, and a range of it. A WAL only ever
//!   grows, so a remote copy is a sequence of immutable segments of it.
//! - [`BlobSource`]: content-addressed blobs by digest; every read is verified against it.
//! - [`SessionIndex`]: the sessions and their lineage (parent and fork step).

use crate::error::{Error, Result};
use crate::store::Store;
use std::io::{Read, Seek, SeekFrom};

/// A session's WAL, as bytes.
pub trait Journal {
    /// The length of the WAL's intact prefix: complete, CRC-correct records only (a torn
    /// last line is not part of it).
    fn intact_len(&self, session: &str) -> Result<u64>;
    /// The bytes `[from, to)` of the WAL.
    fn read_range(&self, session: &str, from: u64, to: u64) -> Result<Vec<u8>>;
}

/// Content-addressed blobs (blake3 hex of the content).
pub trait BlobSource {
    /// The blob's bytes, verified against its digest; `Ok(None)` when it is not held.
    fn get_blob(&self, digest: &str) -> Result<Option<Vec<u8>>>;
    /// Store bytes; returns their digest. Idempotent.
    fn put_blob(&self, bytes: &[u8]) -> Result<String>;
    /// Whether an intact blob of this digest is held.
    fn has_blob(&self, digest: &str) -> bool;
}

/// One session as the lineage knows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lineage {
    pub session: String,
    /// The parent session, for a branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The parent's step the branch was forked at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<i64>,
    /// live, frozen, committed, aborted.
    pub state: String,
    pub head: u64,
}

/// The sessions of a store and their lineage.
pub trait SessionIndex {
    /// Every session, sorted by id.
    fn lineage(&self) -> Result<Vec<Lineage>>;
}

impl Journal for Store {
    fn intact_len(&self, session: &str) -> Result<u64> {
        let read = crate::wal::read_wal(&self.wal_path(session))?;
        Ok(read.good_len)
    }

    fn read_range(&self, session: &str, from: u64, to: u64) -> Result<Vec<u8>> {
        let path = self.wal_path(session);
        let mut f = std::fs::File::open(&path).map_err(|e| Error::io(path.display(), e))?;
        let mut buf = vec![0u8; to.saturating_sub(from) as usize];
        f.seek(SeekFrom::Start(from))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| Error::io(path.display(), e))?;
        Ok(buf)
    }
}

impl BlobSource for Store {
    fn get_blob(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        if !self.blobs().path_of(digest).exists() {
            return Ok(None);
        }
        self.blobs().get(digest, None).map(Some)
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<String> {
        self.blobs().put(bytes)
    }

    fn has_blob(&self, digest: &str) -> bool {
        self.blobs().check(digest, None).is_ok()
    }
}

impl SessionIndex for Store {
    fn lineage(&self) -> Result<Vec<Lineage>> {
        let mut out = Vec::new();
        for id in self.session_ids()? {
            let Ok((st, _)) = crate::state::State::read(&self.wal_path(&id)) else {
                continue;
            };
            out.push(Lineage {
                session: id,
                parent: st.origin.as_ref().map(|o| o.parent.clone()),
                at: st.origin.as_ref().map(|o| o.at.to_i64()),
                state: st.life().as_str().to_string(),
                head: st.head(),
            });
        }
        Ok(out)
    }
}
