//! The content-addressed blob store (docs/reference.md, "The blob store"): preimages too
//! large to sit inline in an `intent`, directory-tree snapshots, and manifest copies. A
//! blob's name is the blake3 hex of its content (`blobs/ab/cdef…`). It is written to a temp
//! file, fsynced, renamed into place and its directory fsynced before any record names it.
//! Reads verify the hash. Shared by every session of a store; version 1 has no garbage
//! collection.

use crate::error::{Code, Error, Result};
use crate::failpoint::Failpoints;
use crate::storage::{Blobs, Durability};
use crate::util::blake3_hex;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The blob store as the rest of revl uses it: digests computed and checked here, bytes
/// kept by a [`Blobs`] implementation (docs/architecture.md, "Storage traits and their
/// guarantees").
#[derive(Debug, Clone)]
pub struct BlobStore {
    /// The directory of the blobs (gc and the blob paths a checkpoint names read it).
    root: PathBuf,
    backend: Arc<dyn Blobs>,
    fp: Failpoints,
}

impl BlobStore {
    /// The blobs of the directory `root`.
    pub fn new(root: PathBuf, fp: Failpoints) -> Self {
        let backend = Arc::new(crate::storage::LocalBlobs::new(root.clone()));
        BlobStore { root, backend, fp }
    }

    /// The blobs `backend` keeps, whose files are in `root`.
    pub fn over(root: PathBuf, backend: Arc<dyn Blobs>, fp: Failpoints) -> Self {
        BlobStore { root, backend, fp }
    }

    pub fn path_of(&self, digest: &str) -> PathBuf {
        let (a, b) = digest.split_at(2.min(digest.len()));
        self.root.join(a).join(b)
    }

    /// Store `bytes` durably and return their digest. Idempotent: an intact blob of the same
    /// content is left as it is (a damaged one is replaced).
    pub fn put(&self, bytes: &[u8]) -> Result<String> {
        self.put_with(bytes, Durability::Synced)
    }

    /// Store `bytes` without fsync: for a cache (a mirror of a remote, docs/fleet.md) whose every
    /// blob can be fetched again and is verified on each read, or for one of a batch made
    /// durable together by [`BlobStore::sync`] before a record names it. Returns the digest;
    /// a damaged blob of that digest is replaced, as [`BlobStore::put`] does.
    pub fn put_cached(&self, bytes: &[u8]) -> Result<String> {
        self.put_with(bytes, Durability::Cached)
    }

    fn put_with(&self, bytes: &[u8], durability: Durability) -> Result<String> {
        let digest = blake3_hex(bytes);
        self.fp
            .enospc()
            .and_then(|_| self.backend.put(&digest, bytes, durability))
            .map_err(|e| Error::io(format!("cannot write blob {digest}"), e))?;
        Ok(digest)
    }

    /// Store the content of the file at `path` durably, streamed (a chunk in memory at a
    /// time, whatever its size), and return its digest. Idempotent like [`BlobStore::put`].
    pub fn put_file(&self, path: &Path) -> Result<String> {
        self.fp
            .enospc()
            .and_then(|_| self.backend.put_file(path, Durability::Synced))
            .map_err(|e| Error::io(format!("cannot store {} as a blob", path.display()), e))
    }

    /// Store the content of the file at `path` without a sync of its own, streamed, and
    /// return its digest: one of many blobs made durable together by [`BlobStore::sync`]
    /// before any record names them (an exec's large preimages: one sync, not three fsyncs
    /// a blob).
    pub fn put_file_batched(&self, path: &Path) -> Result<String> {
        self.fp
            .enospc()
            .and_then(|_| self.backend.put_file(path, Durability::Cached))
            .map_err(|e| Error::io(format!("cannot store {} as a blob", path.display()), e))
    }

    /// Make every blob put so far durable (those of a batch included).
    pub fn sync(&self) -> Result<()> {
        self.backend
            .sync()
            .map_err(|e| Error::io("cannot make the blobs durable", e))
    }

    /// Keep the files `files` (path, the digest they were observed with) as blobs, durably,
    /// with one sync for them all: an exec's post-images (docs/reference.md, "Effects").
    /// A file whose bytes no longer have its digest is an error: nothing names a blob that
    /// does not hold what was recorded.
    pub fn keep_files(&self, files: &[(PathBuf, String)]) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        for (path, digest) in files {
            let got = self.put_file_batched(path)?;
            if got != *digest {
                return Err(Error::new(
                    Code::Io,
                    format!(
                        "{} changed while revl kept it (digest {got}, observed {digest})",
                        path.display()
                    ),
                    "run the command again",
                ));
            }
        }
        self.sync()
    }

    /// Whether a blob of that name is held (not that it is intact).
    pub fn contains(&self, digest: &str) -> Result<bool> {
        self.backend
            .contains(digest)
            .map_err(|e| Error::io(format!("cannot look up blob {digest}"), e))
    }

    /// The blob's stored bytes as a stream, or `missing-preimage` naming `who`.
    fn open(&self, digest: &str, who: &str) -> Result<Box<dyn Read + Send>> {
        let missing = |why: String| {
            Error::new(
                Code::MissingPreimage,
                format!("{who}preimage blob {digest} is missing ({why})"),
                "restore the store's blobs/ directory from a backup; nothing was run",
            )
        };
        match self.backend.open(digest) {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(missing("No such file or directory (os error 2)".into())),
            Err(e) => Err(missing(e.to_string())),
        }
    }

    /// Copy a blob into a new file `dest` (which must not exist), streamed and verified
    /// against its name; `dest` is removed if the blob turns out damaged.
    pub fn copy_out(&self, digest: &str, dest: &Path, step: Option<u64>) -> Result<()> {
        self.copy_out_with(digest, dest, step, Durability::Synced)
    }

    /// [`BlobStore::copy_out`], the new file synced or not ([`Durability::Cached`]: the
    /// caller makes a whole tree durable with one sync, as a mirror's base tree is).
    pub fn copy_out_with(
        &self,
        digest: &str,
        dest: &Path,
        step: Option<u64>,
        durability: Durability,
    ) -> Result<()> {
        let dst = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dest)
            .map_err(|e| Error::io(dest.display(), e))?;
        let what = dest.display().to_string();
        self.copy_hashed_into(digest, dst, &what, step, durability == Durability::Synced)
            .inspect_err(|_| {
                let _ = fs::remove_file(dest);
            })
    }

    /// [`BlobStore::copy_out`] into a file the caller opened (made through a directory
    /// handle): the blob's bytes, checked against its name as they stream. On an error the
    /// caller removes what it made; `what` names it in the message.
    pub fn copy_into(&self, digest: &str, dst: File, what: &str, step: Option<u64>) -> Result<()> {
        self.copy_hashed_into(digest, dst, what, step, true)
    }

    fn copy_hashed_into(
        &self,
        digest: &str,
        dst: File,
        what: &str,
        step: Option<u64>,
        sync: bool,
    ) -> Result<()> {
        // A second try writes the same file again from its start.
        let mut tries = 0;
        self.refetching(digest, || {
            let mut f = dst.try_clone().map_err(|e| Error::io(what, e))?;
            if tries > 0 {
                use std::io::{Seek, SeekFrom};
                f.set_len(0).map_err(|e| Error::io(what, e))?;
                f.seek(SeekFrom::Start(0)).map_err(|e| Error::io(what, e))?;
            }
            tries += 1;
            self.copy_hashed_once(digest, f, what, step, sync)
        })
    }

    /// `attempt`, and where it found the blob damaged (held, its bytes not matching its
    /// name) and this store is a cache of another (a remote's, whose blobs are not fsynced:
    /// [`Blobs::refetch`]), once more after the blob was fetched again and checked. A blob
    /// not held is not looked for (a step's bytes may be kept elsewhere: inline, in the
    /// WAL); a store whose blobs are its own keeps the first answer; an origin that holds
    /// the blob damaged too answers with its error.
    fn refetching<T>(&self, digest: &str, mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
        match attempt() {
            Err(e) if e.code == Code::MissingPreimage && self.contains(digest)? => {
                let fetched = self.backend.refetch(digest).map_err(|io| {
                    crate::storage::trait_error(
                        format_args!("cannot fetch blob {digest} again"),
                        io,
                    )
                })?;
                if fetched {
                    attempt()
                } else {
                    Err(e)
                }
            }
            r => r,
        }
    }

    fn copy_hashed_once(
        &self,
        digest: &str,
        dst: File,
        what: &str,
        step: Option<u64>,
        sync: bool,
    ) -> Result<()> {
        let who = step.map(|s| format!("step {s}: ")).unwrap_or_default();
        let mut src = self.open(digest, &who)?;
        match copy_hashing(&mut src, dst, sync) {
            Ok(d) if d == digest => Ok(()),
            Ok(_) => Err(Error::new(
                Code::MissingPreimage,
                format!(
                    "{who}preimage blob {digest} is damaged (its content does not match its name)"
                ),
                "restore the store's blobs/ directory from a backup",
            )),
            Err(e) => Err(Error::io(what, e)),
        }
    }

    /// The size of the blob as stored (unverified), `None` when it is not held or cannot
    /// be told.
    pub fn size(&self, digest: &str) -> Option<u64> {
        self.backend.size(digest).ok().flatten()
    }

    /// Read a blob and verify it. `step` names the step that needs it, for the error.
    pub fn get(&self, digest: &str, step: Option<u64>) -> Result<Vec<u8>> {
        self.refetching(digest, || self.get_once(digest, step))
    }

    fn get_once(&self, digest: &str, step: Option<u64>) -> Result<Vec<u8>> {
        let who = step.map(|s| format!("step {s}: ")).unwrap_or_default();
        let mut bytes = Vec::new();
        self.open(digest, &who)?
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(format!("cannot read blob {digest}"), e))?;
        if blake3_hex(&bytes) != digest {
            return Err(Error::new(
                Code::MissingPreimage,
                format!(
                    "{who}preimage blob {digest} is damaged (its content does not match its name)"
                ),
                "restore the store's blobs/ directory from a backup; nothing was run",
            ));
        }
        Ok(bytes)
    }

    /// The bytes of a blob a user asks for by digest (`revl blob`): `unknown-blob` when the
    /// store does not hold it, `bad-args` when it is not a digest at all.
    pub fn fetch(&self, digest: &str) -> Result<Vec<u8>> {
        if digest.len() != 64
            || !digest
                .bytes()
                .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(Error::bad_args(
                format!("{digest:?} is not a blob digest (64 lowercase hex characters)"),
                "give a digest from a preserved entry, a restore entry or a step's detail",
            ));
        }
        if !self.contains(digest)? {
            return Err(Error::new(
                Code::UnknownBlob,
                format!("the store holds no blob {digest}"),
                "check the digest (preserved entries list theirs) and the store",
            ));
        }
        self.get(digest, None)
    }

    /// Check a blob is present and intact without keeping its bytes (streamed).
    pub fn check(&self, digest: &str, step: Option<u64>) -> Result<()> {
        self.refetching(digest, || self.check_once(digest, step))
    }

    fn check_once(&self, digest: &str, step: Option<u64>) -> Result<()> {
        let who = step.map(|s| format!("step {s}: ")).unwrap_or_default();
        let f = self.open(digest, &who)?;
        match crate::util::blake3_reader(f) {
            Ok((d, _)) if d == digest => Ok(()),
            _ => Err(Error::new(
                Code::MissingPreimage,
                format!(
                    "{who}preimage blob {digest} is damaged (its content does not match its name)"
                ),
                "restore the store's blobs/ directory from a backup; nothing was run",
            )),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// Copy `src` into `dst` a chunk at a time, fsync `dst`, and return the blake3 hex of what
/// was copied.
pub(crate) fn copy_hashing(
    src: &mut dyn Read,
    mut dst: File,
    sync: bool,
) -> std::io::Result<String> {
    let mut h = blake3::Hasher::new();
    let mut total = 0u64;
    crate::util::with_chunk(|buf| -> std::io::Result<()> {
        loop {
            let k = match std::io::Read::read(src, buf) {
                Ok(0) => return Ok(()),
                Ok(k) => k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.update(&buf[..k]);
            // Blocks of zeros become holes: a sparse file stays sparse in the blob store and
            // when it is copied back out (the digest is of the bytes, holes read as zeros).
            for block in buf[..k].chunks(64 * 1024) {
                if block.iter().all(|b| *b == 0) {
                    std::io::Seek::seek(&mut dst, std::io::SeekFrom::Current(block.len() as i64))?;
                } else {
                    dst.write_all(block)?;
                }
            }
            total += k as u64;
        }
    })?;
    dst.set_len(total)?;
    if sync {
        dst.sync_all()?;
    }
    Ok(h.finalize().to_hex().to_string())
}
