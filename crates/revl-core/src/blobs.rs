//! The content-addressed blob store (docs/reference.md, "The blob store"): preimages too
//! large to sit inline in an `intent`, directory-tree snapshots, and manifest copies. A
//! blob's name is the blake3 hex of its content (`blobs/ab/cdef…`). It is written to a temp
//! file, fsynced, renamed into place and its directory fsynced before any record names it.
//! Reads verify the hash. Shared by every session of a store; version 1 has no garbage
//! collection.

use crate::error::{Code, Error, Result};
use crate::failpoint::Failpoints;
use crate::util::blake3_hex;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct BlobStore {
    root: PathBuf,
    fp: Failpoints,
}

impl BlobStore {
    pub fn new(root: PathBuf, fp: Failpoints) -> Self {
        BlobStore { root, fp }
    }

    pub fn path_of(&self, digest: &str) -> PathBuf {
        let (a, b) = digest.split_at(2.min(digest.len()));
        self.root.join(a).join(b)
    }

    /// Store `bytes` durably and return their digest. Idempotent: an intact blob of the same
    /// content is left as it is (a damaged one is replaced).
    pub fn put(&self, bytes: &[u8]) -> Result<String> {
        self.put_with(bytes, true)
    }

    /// Store `bytes` without fsync: for a cache (a mirror of a remote, docs/fleet.md) whose every
    /// blob can be fetched again and is verified on each read. Returns the digest; a damaged
    /// blob of that digest is replaced, as [`BlobStore::put`] does.
    pub fn put_cached(&self, bytes: &[u8]) -> Result<String> {
        self.put_with(bytes, false)
    }

    fn put_with(&self, bytes: &[u8], durable: bool) -> Result<String> {
        let digest = blake3_hex(bytes);
        let path = self.path_of(&digest);
        if let Ok(existing) = fs::read(&path) {
            if blake3_hex(&existing) == digest {
                return Ok(digest);
            }
        }
        let dir = path.parent().expect("blob path has a parent").to_path_buf();
        let res = (|| -> std::io::Result<()> {
            self.fp.enospc()?;
            fs::create_dir_all(&dir)?;
            let tmp = dir.join(format!(".{}.{}.tmp", &digest[2..], std::process::id()));
            let mut f = File::create(&tmp)?;
            let r = f
                .write_all(bytes)
                .and_then(|_| if durable { f.sync_all() } else { Ok(()) });
            if let Err(e) = r {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
            fs::rename(&tmp, &path)?;
            if durable {
                File::open(&dir)?.sync_all()?;
                File::open(&self.root)?.sync_all()?;
            }
            Ok(())
        })();
        res.map_err(|e| Error::io(format!("cannot write blob {digest}"), e))?;
        Ok(digest)
    }

    /// Store the content of the file at `path` durably, streamed (a chunk in memory at a
    /// time, whatever its size), and return its digest. Idempotent like [`BlobStore::put`].
    pub fn put_file(&self, path: &Path) -> Result<String> {
        let res = (|| -> std::io::Result<String> {
            self.fp.enospc()?;
            fs::create_dir_all(&self.root)?;
            let tmp = self.root.join(format!(
                ".incoming.{}.{}.tmp",
                std::process::id(),
                crate::util::new_id()
            ));
            let copied = copy_hashing(&mut File::open(path)?, File::create(&tmp)?);
            let digest = match copied {
                Ok(d) => d,
                Err(e) => {
                    let _ = fs::remove_file(&tmp);
                    return Err(e);
                }
            };
            let dest = self.path_of(&digest);
            if self.check(&digest, None).is_ok() {
                let _ = fs::remove_file(&tmp);
                return Ok(digest);
            }
            let dir = dest.parent().expect("blob path has a parent").to_path_buf();
            fs::create_dir_all(&dir)?;
            fs::rename(&tmp, &dest)?;
            File::open(&dir)?.sync_all()?;
            File::open(&self.root)?.sync_all()?;
            Ok(digest)
        })();
        res.map_err(|e| Error::io(format!("cannot store {} as a blob", path.display()), e))
    }

    /// Copy a blob into a new file `dest` (which must not exist), streamed and verified
    /// against its name; `dest` is removed if the blob turns out damaged.
    pub fn copy_out(&self, digest: &str, dest: &Path, step: Option<u64>) -> Result<()> {
        let dst = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dest)
            .map_err(|e| Error::io(dest.display(), e))?;
        self.copy_into(digest, dst, &dest.display().to_string(), step)
            .inspect_err(|_| {
                let _ = fs::remove_file(dest);
            })
    }

    /// [`BlobStore::copy_out`] into a file the caller opened (made through a directory
    /// handle): the blob's bytes, checked against its name as they stream. On an error the
    /// caller removes what it made; `what` names it in the message.
    pub fn copy_into(&self, digest: &str, dst: File, what: &str, step: Option<u64>) -> Result<()> {
        let who = step.map(|s| format!("step {s}: ")).unwrap_or_default();
        let mut src = File::open(self.path_of(digest)).map_err(|e| {
            Error::new(
                Code::MissingPreimage,
                format!("{who}preimage blob {digest} is missing ({e})"),
                "restore the store's blobs/ directory from a backup; nothing was run",
            )
        })?;
        match copy_hashing(&mut src, dst) {
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

    /// Read a blob and verify it. `step` names the step that needs it, for the error.
    pub fn get(&self, digest: &str, step: Option<u64>) -> Result<Vec<u8>> {
        let who = step.map(|s| format!("step {s}: ")).unwrap_or_default();
        let bytes = fs::read(self.path_of(digest)).map_err(|e| {
            Error::new(
                Code::MissingPreimage,
                format!("{who}preimage blob {digest} is missing ({e})"),
                "restore the store's blobs/ directory from a backup; nothing was run",
            )
        })?;
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
        if !self.path_of(digest).exists() {
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
        let who = step.map(|s| format!("step {s}: ")).unwrap_or_default();
        let f = File::open(self.path_of(digest)).map_err(|e| {
            Error::new(
                Code::MissingPreimage,
                format!("{who}preimage blob {digest} is missing ({e})"),
                "restore the store's blobs/ directory from a backup; nothing was run",
            )
        })?;
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
fn copy_hashing(src: &mut File, mut dst: File) -> std::io::Result<String> {
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; crate::util::STREAM_CHUNK];
    let mut total = 0u64;
    loop {
        let k = match std::io::Read::read(src, &mut buf) {
            Ok(0) => break,
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
    dst.set_len(total)?;
    dst.sync_all()?;
    Ok(h.finalize().to_hex().to_string())
}
