//! The storage door (docs/architecture.md, "Storage traits and their guarantees"): every
//! byte a session writes to its store goes through two traits, and every lookup of what the
//! store holds through a third:
//!
//! - [`Journals`]: a session's WAL: created whole, read from an offset, appended under a
//!   [`Lease`] (the session's lock) through an [`Appender`];
//! - [`Blobs`]: content-addressed bytes: put with a [`Durability`], opened, tested for;
//! - [`SessionIndex`]: which sessions the store holds, which hold a workspace, and the store
//!   lease that serialises session creation.
//!
//! The local store implements them ([`LocalJournals`], [`LocalBlobs`], and the index on
//! [`Store`] itself); a store of sessions another store wrote is the same store with
//! [`Copied`] journals (docs/fleet.md), and the crash tests run the same code through
//! [`crate::faults::Faulty`], which can fail, tear or stop any of these operations. What each
//! promises is stated on the trait and in docs/architecture.md; the code above them relies on
//! nothing else.

use crate::error::{Code, Error, Result};
use crate::store::{Store, WorkspaceHolder};
use std::fmt::Debug;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How durable a write is when it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// On stable storage: a power cut after the call returns does not take it back.
    Synced,
    /// Visible to every reader now; durable only after a later sync, or never (a cache
    /// whose every entry can be fetched again and is verified on each read).
    Cached,
}

/// The right to append to one session's journal (or to create sessions, for the store's):
/// exclusive among processes while this value lives; released when it is dropped, also
/// when the process dies.
#[derive(Debug)]
pub struct Lease {
    _held: File,
    /// Where the WAL's commit ring ends, as the fold under this lease found it (local
    /// journals: docs/wal-format.md, "The commit ring").
    /// Taken by the first appender opened under the lease (a second would write over the
    /// first one's chunks).
    ring: std::sync::Mutex<Option<crate::ring::RingTail>>,
}

/// A session's WAL, as a journal of bytes that only grows.
pub trait Journals: Debug + Send + Sync {
    /// Create `id`'s journal holding exactly `bytes`. Atomic: after any crash the journal
    /// exists whole, or not at all (and then `id` is not a session of the store).
    fn create(&self, id: &str, bytes: &[u8]) -> std::io::Result<()>;

    /// The journal's bytes `[from, to)`. Bytes an appender wrote and synced are always
    /// read back; bytes written and not yet synced are read back by this process.
    fn read_range(&self, id: &str, from: u64, to: u64) -> std::io::Result<Vec<u8>>;

    /// Open `id`'s journal for appending under `lease`, first cutting it back to `keep`
    /// bytes, durably (a torn tail: a line no record was acknowledged for).
    fn appender(&self, id: &str, lease: &Lease, keep: u64) -> std::io::Result<Box<dyn Appender>>;

    /// Take `id`'s lease, waiting up to `wait`; `Ok(None)` when another holds it still.
    fn lease(&self, id: &str, wait: Duration) -> std::io::Result<Option<Lease>>;

    /// What differs when these journals are copies of sessions another store wrote.
    fn copied(&self) -> Option<&Copied> {
        None
    }
}

/// Appends to one journal. A failed append or sync may leave any prefix of what it was
/// given in the journal (a torn tail, which readers recognise and the next writer cuts);
/// the caller poisons itself and never retries a sync.
pub trait Appender: Send {
    /// Append `bytes` at the end; with [`Durability::Synced`] they, and everything appended
    /// before, are durable when this returns.
    fn append(&mut self, bytes: &[u8], durability: Durability) -> std::io::Result<()>;

    /// Make everything appended so far durable.
    fn sync(&mut self) -> std::io::Result<()>;
}

/// Content-addressed blobs: a blob's name is the blake3 hex of its bytes.
pub trait Blobs: Debug + Send + Sync {
    /// Store `bytes` under `digest` (the caller computed it). Atomic: a reader sees the
    /// whole blob or none; after a crash a blob is whole, absent, or (never named by a
    /// durable record) left for gc. Idempotent.
    fn put(&self, digest: &str, bytes: &[u8], durability: Durability) -> std::io::Result<()>;

    /// Store the content of the file at `path`, streamed, and return its digest; atomic and
    /// idempotent as [`Blobs::put`].
    fn put_file(&self, path: &Path, durability: Durability) -> std::io::Result<String>;

    /// Make every blob put so far durable (those put [`Durability::Cached`] included).
    fn sync(&self) -> std::io::Result<()>;

    /// The blob's bytes as stored, unverified (the caller checks them against the name);
    /// `Ok(None)` when it is not held.
    fn open(&self, digest: &str) -> std::io::Result<Option<Box<dyn Read + Send>>>;

    /// Whether a blob of that name is held (not that it is intact).
    fn contains(&self, digest: &str) -> std::io::Result<bool>;

    /// The directory that holds the blobs, when they are files of this machine (gc and
    /// the blob paths a `saved` checkpoint names).
    fn dir(&self) -> Option<&Path> {
        None
    }

    /// The size of the blob as stored, unverified; `Ok(None)` when it is not held. (By
    /// default its bytes are counted.)
    fn size(&self, digest: &str) -> std::io::Result<Option<u64>> {
        match self.open(digest)? {
            Some(mut r) => std::io::copy(&mut r, &mut std::io::sink()).map(Some),
            None => Ok(None),
        }
    }

    /// [`Blobs::contains`] of each of `digests` (one by one unless an implementation
    /// overlaps them, as a remote does).
    fn contains_many(&self, digests: &[String]) -> std::io::Result<Vec<bool>> {
        digests.iter().map(|d| self.contains(d)).collect()
    }

    /// Fetch again, from where this store's blobs come from, the blob `digest` found
    /// damaged here (its bytes no longer have its name), check it against its name, and
    /// store it in place of the damaged one: `Ok(true)` when that was done. A store that is
    /// no cache of another answers `Ok(false)` (the default): its blobs are its own, and the
    /// damage stands. An origin that itself holds the blob damaged (or no longer holds it)
    /// is an error of the origin's (a remote's: `corrupt-remote`, naming the object).
    fn refetch(&self, _digest: &str) -> std::io::Result<bool> {
        Ok(false)
    }

    /// [`Blobs::put`] of each `(digest, bytes)`, each atomic and idempotent as a put; for
    /// each, whether this call stored it (`false`: it was held already; an implementation
    /// that cannot tell says `true`). One by one unless an implementation overlaps them.
    fn put_many(
        &self,
        items: &[(String, Vec<u8>)],
        durability: Durability,
    ) -> std::io::Result<Vec<bool>> {
        items
            .iter()
            .map(|(d, b)| self.put(d, b, durability).map(|()| true))
            .collect()
    }

    /// [`Blobs::open`] of each of `digests`, in order. One by one unless an implementation
    /// overlaps them (a remote: its requests in flight together, a large blob streamed into
    /// a file rather than held).
    fn open_many(&self, digests: &[String]) -> Vec<std::io::Result<Option<Box<dyn Read + Send>>>> {
        digests.iter().map(|d| self.open(d)).collect()
    }

    /// Store what `r` reads, to its end, and return its digest; atomic and idempotent as
    /// [`Blobs::put`]. By default read whole, then put; a local store streams it.
    fn put_stream(&self, r: &mut dyn Read, durability: Durability) -> std::io::Result<String> {
        let mut b = Vec::new();
        r.read_to_end(&mut b)?;
        let digest = crate::util::blake3_hex(&b);
        self.put(&digest, &b, durability)?;
        Ok(digest)
    }
}

/// What a store knows about its sessions as a whole.
pub trait SessionIndex {
    /// Every session id the store holds, sorted.
    fn list(&self) -> Result<Vec<String>>;

    /// The sessions that hold `workspace`, one inside it or one around it (live ones, and
    /// ones whose WAL cannot be read, which may be live), found without reading every
    /// session of the store (docs/wal-format.md, "The holders file").
    fn holders(&self, workspace: &Path) -> Result<Vec<WorkspaceHolder>>;

    /// The store's lease: held while a session is created, so that two `new`s never both
    /// find a workspace free.
    fn lock(&self) -> Result<Lease>;
}

impl SessionIndex for Store {
    fn list(&self) -> Result<Vec<String>> {
        self.session_ids()
    }

    fn holders(&self, workspace: &Path) -> Result<Vec<WorkspaceHolder>> {
        crate::index::holders_near(self, workspace)
    }

    fn lock(&self) -> Result<Lease> {
        self.store_lock()
    }
}

/// Sessions another store wrote, copied into this one (docs/fleet.md): said by the journals
/// that hold them, never by a mode of the store.
#[derive(Debug, Clone)]
pub struct Copied {
    /// `<workspaces>/<id>` is session `id`'s workspace root (the other machine's path in its
    /// header names nothing here).
    pub workspaces: PathBuf,
    /// What holds the files no step of a copied session touched.
    pub untouched: Untouched,
    /// Whether verbs may write these journals (only the scratch store of a remote fork).
    pub writable: bool,
    /// The remote they were copied from: a branch made here names its parent there.
    pub remote: Option<String>,
}

/// Where a copied session's files that no step touched are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untouched {
    /// The files under `<workspaces>/<id>` (a remote fork's scratch store: the head it
    /// wrote there is the workspace the fork rewinds).
    Workspace,
    /// The session's base tree, each file by its digest in the blob store (a remote's
    /// mirror: nothing is written out; a path the tree does not name did not exist).
    BaseTree,
}

/// The open storage of a store: its journals and its blobs.
#[derive(Debug, Clone)]
pub struct Storage {
    pub journals: Arc<dyn Journals>,
    pub blobs: Arc<dyn Blobs>,
}

impl Storage {
    /// The local implementations over the store directory `root`.
    pub fn local(root: &Path) -> Storage {
        Storage {
            journals: Arc::new(LocalJournals::new(root)),
            blobs: Arc::new(LocalBlobs::new(root.join("blobs"))),
        }
    }
}

/// Journals as files: `sessions/<id>/wal.jsonl`, leased by `sessions/<id>/lock`.
#[derive(Debug, Clone)]
pub struct LocalJournals {
    sessions: PathBuf,
    copied: Option<Copied>,
}

impl LocalJournals {
    pub fn new(root: &Path) -> LocalJournals {
        LocalJournals {
            sessions: root.join("sessions"),
            copied: None,
        }
    }

    /// Journals of sessions another store wrote, copied into the store at `root`.
    pub fn copied(root: &Path, copied: Copied) -> LocalJournals {
        LocalJournals {
            sessions: root.join("sessions"),
            copied: Some(copied),
        }
    }

    fn wal(&self, id: &str) -> PathBuf {
        self.sessions.join(id).join("wal.jsonl")
    }
}

impl Journals for LocalJournals {
    /// By temp file, fsync, rename, and fsync of the directory.
    fn create(&self, id: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.wal(id);
        let dir = path.parent().expect("a WAL path has a parent");
        fs::create_dir_all(dir)?;
        let tmp = dir.join(".wal.jsonl.tmp");
        let res = (|| -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            // A ring left by a WAL that stood here before is never folded into this one.
            crate::ring::remove(&path)?;
            fs::rename(&tmp, &path)?;
            File::open(dir)?.sync_all()
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res
    }

    fn read_range(&self, id: &str, from: u64, to: u64) -> std::io::Result<Vec<u8>> {
        let mut f = File::open(self.wal(id))?;
        let mut buf = vec![0u8; to.saturating_sub(from) as usize];
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut buf)?;
        Ok(buf)
    }

    fn appender(&self, id: &str, lease: &Lease, keep: u64) -> std::io::Result<Box<dyn Appender>> {
        let path = self.wal(id);
        let mut file = fs::OpenOptions::new().read(true).write(true).open(&path)?;
        let cut = file.metadata()?.len() != keep;
        if cut {
            // Cut and synced first (the bytes kept may be durable only in the commit ring
            // until the WAL is synced), then the ring's chain, which may cover the bytes cut,
            // ends, so it is never folded over what is appended after the cut.
            file.set_len(keep)?;
            file.sync_all()?;
            crate::ring::invalidate(&path)?;
        }
        file.seek(SeekFrom::End(0))?;
        let tail = lease
            .ring
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .filter(|_| !cut);
        let ring = crate::ring::RingWriter::open(&path, &file, keep, tail);
        Ok(Box::new(FileAppender {
            file,
            len: keep,
            ring,
        }))
    }

    /// The lease, and then the WAL's commit ring folded back into it: whoever holds the
    /// lease reads a WAL that holds every byte an appender acknowledged.
    fn lease(&self, id: &str, wait: Duration) -> std::io::Result<Option<Lease>> {
        let Some(mut lease) = lease_file(&self.sessions.join(id).join("lock"), wait)? else {
            return Ok(None);
        };
        // A writable copy (a remote fork's scratch store) appends through rings too.
        lease.ring = std::sync::Mutex::new(crate::ring::fold(&self.wal(id))?);
        Ok(Some(lease))
    }

    fn copied(&self) -> Option<&Copied> {
        self.copied.as_ref()
    }
}

/// Take an exclusive lock on the file `path` (made mode 0600 if missing), waiting up to
/// `wait`; `None` when another still holds it.
pub(crate) fn lease_file(path: &Path, wait: Duration) -> std::io::Result<Option<Lease>> {
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    let _ = f.set_permissions(fs::Permissions::from_mode(0o600));
    let start = Instant::now();
    loop {
        match f.try_lock() {
            Ok(()) => {
                return Ok(Some(Lease {
                    _held: f,
                    ring: std::sync::Mutex::new(None),
                }))
            }
            Err(fs::TryLockError::WouldBlock) if start.elapsed() >= wait => return Ok(None),
            Err(fs::TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(5)),
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Appends to a WAL file; a durable append syncs a chunk of the commit ring, or the WAL
/// itself when the ring is full or not made yet (docs/wal-format.md, "The commit ring").
struct FileAppender {
    file: File,
    len: u64,
    ring: crate::ring::RingWriter,
}

impl Appender for FileAppender {
    fn append(&mut self, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        self.ring.appended(bytes);
        if durability == Durability::Synced {
            self.ring.make_durable(&self.file, self.len)?;
        }
        Ok(())
    }

    fn sync(&mut self) -> std::io::Result<()> {
        self.ring.make_durable(&self.file, self.len)
    }
}

/// Blobs as files: `blobs/ab/cdef…`, each written to a temp file, fsynced, renamed into
/// place, and its directory (and the blob root) fsynced for [`Durability::Synced`].
#[derive(Debug, Clone)]
pub struct LocalBlobs {
    root: PathBuf,
    /// Whether one `syncfs` makes this directory's writes durable (known at the first
    /// unsynced put): not on FUSE, where a blob put for a later [`Blobs::sync`] is fsynced
    /// at once instead.
    syncfs_works: std::sync::OnceLock<bool>,
}

impl LocalBlobs {
    pub fn new(root: PathBuf) -> LocalBlobs {
        LocalBlobs {
            root,
            syncfs_works: std::sync::OnceLock::new(),
        }
    }

    /// Whether a put of `durability` is fsynced: always when asked; and a put left for the
    /// batch's one `syncfs` too where that `syncfs` would persist nothing (FUSE: the kernel
    /// never forwards it), so that a record naming the blob never outlives its bytes.
    fn synced(&self, durability: Durability) -> bool {
        durability == Durability::Synced
            || !*self
                .syncfs_works
                .get_or_init(|| crate::util::syncfs_persists(&self.root))
    }

    fn path_of(&self, digest: &str) -> PathBuf {
        let (a, b) = digest.split_at(2.min(digest.len()));
        self.root.join(a).join(b)
    }
}

impl Blobs for LocalBlobs {
    fn put(&self, digest: &str, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
        let path = self.path_of(digest);
        if let Ok(existing) = fs::read(&path) {
            if crate::util::blake3_hex(&existing) == digest {
                return Ok(());
            }
        }
        let durable = self.synced(durability);
        let dir = path.parent().expect("blob path has a parent").to_path_buf();
        fs::create_dir_all(&dir)?;
        // Named for this call alone: two threads may put the same blob at once.
        static PUTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tmp = dir.join(format!(
            ".{}.{}.{}.tmp",
            digest.get(2..).unwrap_or_default(),
            std::process::id(),
            PUTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
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
    }

    fn put_file(&self, path: &Path, durability: Durability) -> std::io::Result<String> {
        self.put_stream(&mut File::open(path)?, durability)
    }

    fn put_stream(&self, r: &mut dyn Read, durability: Durability) -> std::io::Result<String> {
        fs::create_dir_all(&self.root)?;
        let tmp = self.root.join(format!(
            ".incoming.{}.{}.tmp",
            std::process::id(),
            crate::util::new_id()
        ));
        let synced = self.synced(durability);
        let digest = match crate::blobs::copy_hashing(r, File::create(&tmp)?, synced) {
            Ok(d) => d,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        let dest = self.path_of(&digest);
        let intact = File::open(&dest)
            .and_then(crate::util::blake3_reader)
            .is_ok_and(|(d, _)| d == digest);
        if intact {
            let _ = fs::remove_file(&tmp);
            return Ok(digest);
        }
        let dir = dest.parent().expect("blob path has a parent").to_path_buf();
        fs::create_dir_all(&dir)?;
        fs::rename(&tmp, &dest)?;
        if synced {
            File::open(&dir)?.sync_all()?;
            File::open(&self.root)?.sync_all()?;
        }
        Ok(digest)
    }

    /// One `syncfs` of the blob directory's filesystem: every file, name and directory
    /// written there is durable after it.
    fn sync(&self) -> std::io::Result<()> {
        let dir = File::open(&self.root)?;
        rustix::fs::syncfs(&dir).map_err(std::io::Error::from)
    }

    fn open(&self, digest: &str) -> std::io::Result<Option<Box<dyn Read + Send>>> {
        match File::open(self.path_of(digest)) {
            Ok(f) => Ok(Some(Box::new(f))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn contains(&self, digest: &str) -> std::io::Result<bool> {
        match fs::symlink_metadata(self.path_of(digest)) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn dir(&self) -> Option<&Path> {
        Some(&self.root)
    }

    fn size(&self, digest: &str) -> std::io::Result<Option<u64>> {
        match fs::metadata(self.path_of(digest)) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A session's WAL bytes `[from, to)` through the store's journals (what `push` copies).
pub fn read_range(store: &Store, id: &str, from: u64, to: u64) -> Result<Vec<u8>> {
    store
        .storage()
        .journals
        .read_range(id, from, to)
        .map_err(|e| Error::io(format!("cannot read WAL of session {id}"), e))
}

/// An error of a storage trait as the store's error: one an implementation made of a revl
/// error (a remote's refusal, a fenced write) is that error again; any other is an I/O
/// error of `what`.
pub fn trait_error(what: impl std::fmt::Display, e: std::io::Error) -> Error {
    match e.get_ref().and_then(|x| x.downcast_ref::<Error>()) {
        Some(inner) => inner.clone(),
        None => Error::io(what, e),
    }
}

/// The first `len` bytes of session `id`'s WAL copied from the journals `from` into the
/// journals `to` (made there whole or not at all): the one copy of a WAL between stores,
/// whatever they are: a remote's verified cache into a remote fork's scratch store, a
/// branch from there into this store, this store's session into a remote (`push`).
pub fn copy_journal(from: &dyn Journals, to: &dyn Journals, id: &str, len: u64) -> Result<()> {
    let bytes = from
        .read_range(id, 0, len)
        .map_err(|e| trait_error(format_args!("cannot read the WAL of session {id}"), e))?;
    to.create(id, &bytes)
        .map_err(|e| trait_error(format_args!("cannot write the WAL of session {id}"), e))
}

/// What [`copy_blobs`] stored.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BlobsCopied {
    /// Blobs the destination did not hold before.
    pub blobs: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A blob above this size is asked about first (`contains`) by [`copy_blobs`] when the
/// destination is a remote, so that its bytes are not sent again; a smaller one is put at
/// once (the put answers that itself).
pub const ASK_FIRST: u64 = 64 << 10;

/// The blobs `digests` copied from `from` into `to`, each verified against its name on the
/// way (a damaged one stops the copy, unless `from` is a cache that fetches it again,
/// verified, [`Blobs::refetch`]): a blob held in memory is put only once verified; one
/// streamed ([`STREAM_ABOVE`]) is stored by `to` under the digest of what it read, so it is
/// never believed under the name asked for unless that is its name. At most 64 blobs or
/// 64 MiB are held at a time; one `from` does not hold is skipped (a digest a WAL names may
/// be a small preimage held inline). `after_each` runs after each blob put (a failpoint).
pub fn copy_blobs(
    from: &dyn Blobs,
    to: &dyn Blobs,
    digests: &[String],
    durability: Durability,
    after_each: &mut dyn FnMut(),
) -> Result<BlobsCopied> {
    let mut done = BlobsCopied::default();
    let flush = |items: &mut Vec<(String, Vec<u8>)>,
                 done: &mut BlobsCopied,
                 after_each: &mut dyn FnMut()|
     -> Result<()> {
        let stored = to
            .put_many(items, durability)
            .map_err(|e| trait_error("cannot store blobs", e))?;
        for ((_, b), new) in items.iter().zip(stored) {
            if new {
                done.blobs += 1;
                done.bytes += b.len() as u64;
            }
            after_each();
        }
        items.clear();
        Ok(())
    };
    // Only a remote is asked: a local blob store's `contains` sees a file, not that it
    // is intact (a blob put unsynced may be damaged by a crash), and its put checks the
    // bytes it holds and replaces a damaged blob. A blob store of this machine takes a
    // blob above `STREAM_ABOVE` as it is read (never held whole); a remote takes blobs in
    // batches of overlapped puts.
    let ask = to.dir().is_none();
    let stream_above = if ask { 64 << 20 } else { STREAM_ABOVE };
    for chunk in digests.chunks(256) {
        let held: std::collections::BTreeSet<String> = if ask {
            let sizes = chunk
                .iter()
                .map(|d| from.size(d))
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(|e| Error::io("cannot read the blobs to copy", e))?;
            let large: Vec<String> = chunk
                .iter()
                .zip(&sizes)
                .filter(|(_, n)| n.is_some_and(|n| n > ASK_FIRST))
                .map(|(d, _)| d.clone())
                .collect();
            large
                .iter()
                .zip(
                    to.contains_many(&large)
                        .map_err(|e| trait_error("cannot ask which blobs are held", e))?,
                )
                .filter(|(_, there)| *there)
                .map(|(d, _)| d.clone())
                .collect()
        } else {
            Default::default()
        };
        let wanted: Vec<String> = chunk
            .iter()
            .filter(|d| !held.contains(*d))
            .cloned()
            .collect();
        let mut items = Vec::new();
        let mut bytes = 0usize;
        for (d, opened) in wanted.iter().zip(from.open_many(&wanted)) {
            let io = |e| trait_error(format_args!("cannot read blob {d}"), e);
            let Some(mut r) = opened.map_err(io)? else {
                continue;
            };
            let mut b = Vec::new();
            (&mut r)
                .take(stream_above + 1)
                .read_to_end(&mut b)
                .map_err(io)?;
            if b.len() as u64 > stream_above {
                let n = stream_verified(from, to, d, std::io::Cursor::new(b).chain(r), durability)?;
                done.blobs += 1;
                done.bytes += n;
                after_each();
                continue;
            }
            let Some(b) = verified(from, d, b)? else {
                continue;
            };
            bytes += b.len();
            items.push((d.clone(), b));
            if items.len() >= 64 || bytes >= 64 << 20 {
                flush(&mut items, &mut done, after_each)?;
                bytes = 0;
            }
        }
        flush(&mut items, &mut done, after_each)?;
    }
    Ok(done)
}

/// A blob of [`copy_blobs`] above this size, copied into a blob store of this machine, is
/// streamed into it (the size the fleet's fetches hold in memory at most, docs/fleet.md).
pub const STREAM_ABOVE: u64 = 256 << 10;

/// The blob `digest` that `r` reads from `from`, streamed into `to` and checked as it went
/// (what `to` stored is named by what it read): its size. Damaged in `from`, it is fetched
/// again there when `from` is a cache of another store ([`Blobs::refetch`]) and streamed
/// again; else the copy stops.
fn stream_verified(
    from: &dyn Blobs,
    to: &dyn Blobs,
    digest: &str,
    mut r: impl Read,
    durability: Durability,
) -> Result<u64> {
    let io = |e| trait_error(format_args!("cannot copy blob {digest}"), e);
    let mut counted = Counted(&mut r, 0);
    if to.put_stream(&mut counted, durability).map_err(io)? == digest {
        return Ok(counted.1);
    }
    let fetched = from
        .refetch(digest)
        .map_err(|e| trait_error(format_args!("cannot fetch blob {digest} again"), e))?;
    if fetched {
        if let Some(mut again) = from.open(digest).map_err(io)? {
            let mut counted = Counted(&mut again, 0);
            if to.put_stream(&mut counted, durability).map_err(io)? == digest {
                return Ok(counted.1);
            }
        }
    }
    Err(damaged(digest))
}

/// A reader that counts what it read.
struct Counted<R>(R, u64);

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        self.1 += n as u64;
        Ok(n)
    }
}

fn damaged(digest: &str) -> Error {
    Error::new(
        Code::MissingPreimage,
        format!("blob {digest} is damaged (its content does not match its name)"),
        "restore the store's blobs/ directory from a backup; nothing was copied past it",
    )
}

/// `b`, the bytes `from` holds as blob `digest`, if they are its. A damaged one is fetched
/// again when `from` is a cache of another store ([`Blobs::refetch`]: a remote's mirror,
/// whose blobs are not fsynced; a remote itself, which refuses it), and checked again; else
/// it stops the copy.
fn verified(from: &dyn Blobs, digest: &str, b: Vec<u8>) -> Result<Option<Vec<u8>>> {
    let intact = |b: &Vec<u8>| crate::util::blake3_hex(b) == digest;
    if intact(&b) {
        return Ok(Some(b));
    }
    drop(b);
    let fetched = from
        .refetch(digest)
        .map_err(|e| trait_error(format_args!("cannot fetch blob {digest} again"), e))?;
    if fetched {
        if let Some(b) = read_whole(from, digest)?.filter(intact) {
            return Ok(Some(b));
        }
    }
    Err(damaged(digest))
}

/// A blob's bytes from `blobs`, as held (unchecked); `None` when not held.
fn read_whole(blobs: &dyn Blobs, digest: &str) -> Result<Option<Vec<u8>>> {
    let io = |e| trait_error(format_args!("cannot read blob {digest}"), e);
    let Some(mut r) = blobs.open(digest).map_err(io)? else {
        return Ok(None);
    };
    let mut b = Vec::new();
    r.read_to_end(&mut b).map_err(io)?;
    Ok(Some(b))
}

/// A blob's bytes, verified against its digest; `Ok(None)` when the store does not hold it.
pub fn get_blob(store: &Store, digest: &str) -> Result<Option<Vec<u8>>> {
    let blobs = store.blobs();
    if !blobs.contains(digest)? {
        return Ok(None);
    }
    blobs.get(digest, None).map(Some)
}

/// The error a lease that could not be taken in time gives.
pub(crate) fn busy(what: &str, wait: Duration) -> Error {
    Error::new(
        Code::Busy,
        format!(
            "{what} is busy: another revl command held its lock for {}s",
            wait.as_secs()
        ),
        "wait for the other command to finish, then run this one again",
    )
}
