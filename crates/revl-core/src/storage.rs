//! The storage seams (docs/fleet.md): what a fleet store (the `revl-fleet` crate: S3-compatible
//! object storage, a shared directory, PostgreSQL) reads from a local store when it pushes,
//! as two traits with the local store as their implementation, so the core stays free of
//! network code and every local guarantee is unchanged: the local WAL stays the commit
//! point. The other direction goes through mirror stores ([`Store::open_mirror`]): a
//! remote's sessions are copied, verified, into a store directory of their own, where the
//! same readers read them.
//!
//! - [`Journal`]: a range of a session's WAL, as bytes. A WAL only ever grows, so a remote
//!   copy is a sequence of immutable segments of it.
//! - [`BlobSource`]: content-addressed blobs by digest; every read is verified against it.

use crate::error::{Error, Result};
use crate::store::Store;
use std::io::{Read, Seek, SeekFrom};

/// A session's WAL, as bytes.
pub trait Journal {
    /// The bytes `[from, to)` of the WAL.
    fn read_range(&self, session: &str, from: u64, to: u64) -> Result<Vec<u8>>;
}

/// Content-addressed blobs (blake3 hex of the content).
pub trait BlobSource {
    /// The blob's bytes, verified against its digest; `Ok(None)` when it is not held.
    fn get_blob(&self, digest: &str) -> Result<Option<Vec<u8>>>;
}

impl Journal for Store {
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
}
