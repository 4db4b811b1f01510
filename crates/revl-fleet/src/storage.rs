//! A remote as storage (docs/architecture.md, "Storage traits and their guarantees";
//! docs/fleet.md): the remote implements the store's [`Journals`] and [`Blobs`] over its
//! [`Bucket`], so that `push` is a copy between stores through the same traits and the same
//! copy code as every other copy of sessions ([`revl_core::storage::copy_journal`],
//! [`revl_core::storage::copy_blobs`]).
//!
//! - A session's journal is its pushed segments and its manifest: [`Journals::create`] makes
//!   the remote head the given WAL (the segment past the head the remote holds, created
//!   only if absent, then the manifest by compare-and-swap: the commit point), only when the
//!   remote head is a prefix of it (else `fenced`); [`Journals::read_range`] reads the
//!   segments the manifest names, each checked against its SHA-256.
//! - A blob is the object `blobs/<digest>`, created only if absent, read at most
//!   [`MAX_OBJECT`] bytes.
//! - What a remote cannot do is refused (`Unsupported`): it is never appended to under a
//!   lease (a remote is written only by `revl push`), and journals opened for reading
//!   ([`RemoteJournals::reading`]) are never written.

use crate::bucket::{Bucket, Fetched, Put, Version};
use crate::untrusted::{MAX_FIELD, MAX_MANIFEST, MAX_OBJECT, MAX_WAL_READ};
use crate::{blob_key, manifest_key, segment_key, sha256_hex, tampered, Manifest, Segment};
use revl_core::storage::{Appender, Blobs, Durability, Journals, Lease};
use revl_core::{Code, Error, Result, Store};
use sha2::Digest;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// The largest epoch a manifest may state (what the lineage index's bigint holds).
pub(crate) const MAX_EPOCH: u64 = MAX_FIELD;

/// How a write treats what the remote already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Upload what the bucket lacks; trust that what it holds under a content name is
    /// that content (checked by every reader).
    Extend,
    /// `push --repair`: verify every object of the session the bucket holds (the manifest
    /// and its lineage, each segment, each blob, the base tree's pack) and upload again
    /// those that fail, then write a new epoch of the manifest so that every reader judges
    /// the session again.
    Repair,
}

/// The sessions of a remote, as journals: written by one store's `push`, read by anyone.
pub struct RemoteJournals {
    bucket: Bucket,
    remote: String,
    writer: Option<Writer>,
    written: Mutex<BTreeMap<String, Written>>,
}

/// The store a push copies from: its id is the manifests' writer, its base trees theirs.
struct Writer {
    store: Store,
    id: String,
}

/// What one write of a remote session's WAL did.
#[derive(Debug, Clone)]
pub struct Written {
    /// The remote head now (the one found, when nothing was written).
    pub head: Manifest,
    /// Whether a new manifest was written.
    pub wrote: bool,
    /// Segments uploaded (0 or 1).
    pub segments: u64,
    /// Bytes of the segment uploaded.
    pub bytes: u64,
    /// WAL records past the head the remote held.
    pub records: u64,
}

impl std::fmt::Debug for RemoteJournals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteJournals({})", self.bucket.describe())
    }
}

/// A revl error carried through a storage trait (turned back by
/// [`revl_core::storage::trait_error`]).
fn carried(e: Error) -> std::io::Error {
    std::io::Error::other(e)
}

fn unsupported(remote: &str, what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!("remote {remote} cannot {what}: a remote is written only by `revl push`"),
    )
}

impl RemoteJournals {
    /// The sessions of `remote` (its name, for messages) in `bucket`, for reading only.
    pub fn reading(bucket: Bucket, remote: &str) -> RemoteJournals {
        RemoteJournals {
            bucket,
            remote: remote.to_string(),
            writer: None,
            written: Mutex::default(),
        }
    }

    /// The sessions of `remote` in `bucket` as `store` pushes them (its id the writer of
    /// the manifests it writes, its base trees theirs).
    pub fn written_by(bucket: Bucket, remote: &str, store: &Store) -> Result<RemoteJournals> {
        Ok(RemoteJournals {
            writer: Some(Writer {
                id: crate::config::store_id(store)?,
                store: store.clone(),
            }),
            ..RemoteJournals::reading(bucket, remote)
        })
    }

    /// What the last [`Journals::create`] of session `id` did (taken: asked once).
    pub fn take_written(&self, id: &str) -> Option<Written> {
        self.written.lock().ok()?.remove(id)
    }

    /// The manifest of session `id` as found (`mode`: whether a refused one is an answer).
    pub(crate) fn head(&self, id: &str, mode: Mode) -> Result<Found> {
        found(&self.bucket, &self.remote, id, mode)
    }

    /// Make the remote head of session `id` the WAL `wal`: the segment past the head the
    /// remote holds (created only if absent), then the manifest by compare-and-swap from
    /// the head read (a lost race is read and judged again, up to 5 times). A remote head
    /// `wal` does not extend is refused (`fenced`); a head already `wal` is left as it is.
    /// `repair`: `push --repair` (whose refused manifest is replaced, and whose manifest is
    /// rewritten in any case with a new epoch); `Some(true)`: the manifest's segments were
    /// not this WAL's, the new one names it afresh from byte 0.
    pub(crate) fn write(&self, id: &str, wal: &[u8], repair: Option<bool>) -> Result<Written> {
        let Some(w) = &self.writer else {
            return Err(Error::io(
                format_args!("cannot write session {id}"),
                unsupported(
                    &self.remote,
                    "be written through journals opened for reading",
                ),
            ));
        };
        let remote = self.remote.as_str();
        let bucket = &self.bucket;
        let fp = w.store.failpoints().clone();
        let st = state_of(id, wal)?;
        let base = w.store.base_of(id);
        let mode = if repair.is_some() {
            Mode::Repair
        } else {
            Mode::Extend
        };
        let local_len = wal.len() as u64;
        for _attempt in 0..5 {
            let (current, refused) = match found(bucket, remote, id, mode)? {
                Found::Head(m, v) => (Some((*m, v)), None),
                Found::Absent => (None, None),
                Found::Refused(v, epoch) => (None, Some((v, epoch))),
            };
            let prev = current.as_ref().map(|(m, _)| m.clone());
            if let Some(m) = &prev {
                check_extends(remote, id, m, wal)?;
            }
            let fresh = repair == Some(true);
            let base_len = match &prev {
                Some(m) if !fresh => m.wal_length,
                _ => 0,
            };
            let base_new = base.is_some() && prev.as_ref().is_some_and(|m| m.base.is_none());
            if let Some(m) = prev
                .clone()
                .filter(|m| m.wal_length == local_len && !base_new && repair.is_none())
            {
                // Nothing new: no object is created or changed.
                return Ok(Written {
                    head: m,
                    wrote: false,
                    segments: 0,
                    bytes: 0,
                    records: 0,
                });
            }
            // The new segment (immutable; a rerun after a kill finds it there).
            let seg_bytes = &wal[base_len as usize..];
            let mut segments = prev
                .as_ref()
                .filter(|_| !fresh)
                .map(|m| m.segments.clone())
                .unwrap_or_default();
            let mut bytes = 0;
            if !seg_bytes.is_empty() || segments.is_empty() {
                let sha = sha256_hex(seg_bytes);
                let seg = Segment {
                    key: segment_key(id, base_len, local_len, &sha),
                    from: base_len,
                    to: local_len,
                    sha256: sha,
                };
                if bucket.put(&seg.key, seg_bytes, None)? == Put::Done {
                    bytes += seg_bytes.len() as u64;
                }
                segments.push(seg);
            }
            fp.point("push.after-segment");
            // The manifest, by compare-and-swap from the head read above.
            let m = Manifest {
                kind: crate::MANIFEST_KIND.into(),
                schema_version: "1.0".into(),
                session: id.to_string(),
                epoch: match (&prev, &refused) {
                    (Some(m), _) if m.epoch >= MAX_EPOCH => {
                        return Err(Error::new(
                            Code::CorruptRemote,
                            format!("session {id} in remote {remote} has remote head epoch {}, the largest there is: no push can follow it", m.epoch),
                            "push the session to a new remote (`revl remote add`), or remove its manifest from the bucket and `revl push --repair` it",
                        ))
                    }
                    (Some(m), _) => m.epoch + 1,
                    (None, Some((_, e))) => e + 1,
                    (None, None) => 1,
                },
                writer: w.id.clone(),
                wal_length: local_len,
                wal_sha256: sha256_hex(wal),
                segments,
                base: base.clone(),
                parent: st.origin.as_ref().map(|o| o.parent.clone()),
                at: st.origin.as_ref().map(|o| o.at.to_i64()),
                state: st.life().as_str().to_string(),
                head: st.head(),
                workspace: st.workspace.clone(),
                pushed_at: revl_core::util::now_rfc3339(),
            };
            let body = serde_json::to_vec_pretty(&m).expect("a manifest serialises");
            fp.point("push.before-manifest");
            let key = manifest_key(id);
            let put = match (&current, &refused) {
                (Some((_, v)), _) => bucket.put(&key, &body, Some(v))?,
                (None, Some((Some(v), _))) => bucket.put(&key, &body, Some(v))?,
                // A refused manifest that could not even be read (too large, not a regular
                // file): replaced.
                (None, Some((None, _))) => {
                    bucket.replace(&key, &body)?;
                    Put::Done
                }
                (None, None) => bucket.put(&key, &body, None)?,
            };
            if put == Put::Conflict {
                // Another writer moved the head since it was read: judge again from the new one.
                continue;
            }
            fp.point("push.after-manifest");
            return Ok(Written {
                head: m,
                wrote: true,
                segments: u64::from(!seg_bytes.is_empty()),
                bytes,
                records: seg_bytes.iter().filter(|&&c| c == b'\n').count() as u64,
            });
        }
        Err(Error::new(
            Code::Io,
            format!("session {id}: the remote head kept changing while this push ran"),
            "another store is pushing this session: check which store writes it",
        ))
    }

    /// Session `id`'s WAL bytes `[from, to)` as the remote states them: read from the
    /// segments of its manifest that hold them, each streamed whole (a segment is checked
    /// against its SHA-256, which needs every byte of it) and checked, and the whole WAL
    /// against the manifest's when the segments read are all of them; only the bytes asked
    /// for are kept, so memory holds them and one chunk of a segment at a time, never a
    /// whole segment (up to 5 GiB).
    fn read_checked(&self, id: &str, from: u64, to: u64) -> Result<Vec<u8>> {
        let (name, mkey) = (&self.remote, manifest_key(id));
        let Some((raw, _)) = self.bucket.get_limited(&mkey, MAX_MANIFEST)? else {
            return Err(Error::new(
                Code::UnknownSession,
                format!("no session {id} in remote {name}"),
                "push it from the store that ran it (`revl push SESSION`)",
            ));
        };
        let m = crate::parse_manifest(&raw, id, name)?;
        if from > to || to > m.wal_length {
            return Err(Error::new(
                Code::Usage,
                format!(
                    "bytes {from}..{to} of session {id} are not in remote {name} (its WAL there is {} bytes)",
                    m.wal_length
                ),
                "read within the remote head (`revl remote lineage NAME` shows it)",
            ));
        }
        if to - from > MAX_WAL_READ {
            return Err(crate::untrusted::refused(
                name,
                &mkey,
                &format!("{} bytes of its WAL were asked for, more than revl reads of a remote WAL ({MAX_WAL_READ} bytes)", to - from),
            ));
        }
        let mut at = 0;
        let mut need = Vec::new();
        for s in &m.segments {
            if s.from != at || s.to < s.from {
                return Err(tampered(name, &mkey, "its segments do not tile the WAL"));
            }
            at = s.to;
            if s.to > from && s.from < to {
                need.push(s);
            }
        }
        if at != m.wal_length {
            return Err(tampered(name, &mkey, "its segments do not tile the WAL"));
        }
        // The whole WAL is checked too when the segments read are every one of them.
        let start = need.first().map_or(from, |s| s.from);
        let end = need.last().map_or(from, |s| s.to);
        let whole = start == 0 && end == m.wal_length;
        let mut wal_sha = sha2::Sha256::new();
        let mut out = Vec::with_capacity((to - from) as usize);
        for s in need {
            let mut sha = sha2::Sha256::new();
            let mut at = s.from;
            let got = self
                .bucket
                .read_streamed(&s.key, s.to - s.from, &mut |chunk| {
                    sha.update(chunk);
                    if whole {
                        wal_sha.update(chunk);
                    }
                    // What of this chunk, `[at, at + len)` of the WAL, lies in `[from, to)`.
                    let next = at + chunk.len() as u64;
                    let (lo, hi) = (from.max(at), to.min(next));
                    if lo < hi {
                        out.extend_from_slice(&chunk[(lo - at) as usize..(hi - at) as usize]);
                    }
                    at = next;
                    Ok(())
                })?;
            let Some(n) = got else {
                return Err(tampered(name, &s.key, "it is missing"));
            };
            if n != s.to - s.from || hex::encode(sha.finalize()) != s.sha256 {
                return Err(tampered(name, &s.key, "its SHA-256 is not the manifest's"));
            }
        }
        if whole && hex::encode(wal_sha.finalize()) != m.wal_sha256 {
            return Err(tampered(
                name,
                &mkey,
                "the WAL its segments make does not have its SHA-256",
            ));
        }
        Ok(out)
    }
}

impl Journals for RemoteJournals {
    /// The remote head becomes `bytes` ([`RemoteJournals::write`]): atomic as the manifest's
    /// compare-and-swap is (a reader finds the old head or the new one, never a part); a
    /// segment uploaded by a write cut short is named by no manifest, and the next push
    /// finds it there.
    fn create(&self, id: &str, bytes: &[u8]) -> std::io::Result<()> {
        let w = self.write(id, bytes, None).map_err(carried)?;
        if let Ok(mut all) = self.written.lock() {
            all.insert(id.to_string(), w);
        }
        Ok(())
    }

    fn read_range(&self, id: &str, from: u64, to: u64) -> std::io::Result<Vec<u8>> {
        self.read_checked(id, from, to).map_err(carried)
    }

    fn appender(
        &self,
        _id: &str,
        _lease: &Lease,
        _keep: u64,
    ) -> std::io::Result<Box<dyn Appender>> {
        Err(unsupported(&self.remote, "be appended to"))
    }

    fn lease(&self, _id: &str, _wait: Duration) -> std::io::Result<Option<Lease>> {
        Err(unsupported(&self.remote, "lend a session's lease"))
    }
}

/// A WAL's state, read from its bytes (what a manifest states of it).
fn state_of(id: &str, wal: &[u8]) -> Result<revl_core::state::State> {
    let path = format!("sessions/{id}/wal");
    let read = revl_core::wal::parse_wal(Path::new(&path), wal)?;
    revl_core::state::State::replay_owned(read.records)
}

/// The blobs of a remote: `blobs/<digest>`, shared by every session, created once.
pub struct RemoteBlobs {
    bucket: Bucket,
    /// Set when the blobs are read (a cache filled from them, docs/fleet.md, "Reading a
    /// remote"): the remote's name (for its refusals), and where a large blob streams.
    reading: Option<(String, std::path::PathBuf)>,
}

impl RemoteBlobs {
    pub fn new(bucket: Bucket) -> RemoteBlobs {
        RemoteBlobs {
            bucket,
            reading: None,
        }
    }

    /// The blobs of the remote `name` through `bucket`, to be read: many at once, up to 32
    /// requests in flight, a blob above [`crate::pull::FETCH_SMALL`] streamed into a file
    /// of `spill` (removed once opened) instead of held; one that does not match its name is
    /// refused (`corrupt-remote`, naming the object).
    pub fn reading(bucket: Bucket, name: &str, spill: &Path) -> RemoteBlobs {
        RemoteBlobs {
            bucket,
            reading: Some((name.to_string(), spill.to_path_buf())),
        }
    }
}

impl std::fmt::Debug for RemoteBlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteBlobs({})", self.bucket.describe())
    }
}

impl Blobs for RemoteBlobs {
    /// Created only if absent: one the bucket holds under that name is left as it is
    /// (every reader checks a blob against its name; `push --repair` replaces a bad one).
    /// Durable as the server makes an acknowledged write, whatever `durability` asks.
    fn put(&self, digest: &str, bytes: &[u8], _durability: Durability) -> std::io::Result<()> {
        self.bucket
            .put(&blob_key(digest), bytes, None)
            .map(|_| ())
            .map_err(carried)
    }

    fn put_file(&self, path: &Path, durability: Durability) -> std::io::Result<String> {
        let bytes = std::fs::read(path)?;
        let digest = revl_core::util::blake3_hex(&bytes);
        self.put(&digest, &bytes, durability)?;
        Ok(digest)
    }

    /// Nothing to do: each put is acknowledged once the server holds it.
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn open(&self, digest: &str) -> std::io::Result<Option<Box<dyn Read + Send>>> {
        let got = self
            .bucket
            .get_limited(&blob_key(digest), MAX_OBJECT)
            .map_err(carried)?;
        Ok(got.map(|(b, _)| Box::new(std::io::Cursor::new(b)) as Box<dyn Read + Send>))
    }

    fn contains(&self, digest: &str) -> std::io::Result<bool> {
        self.bucket.exists(&blob_key(digest)).map_err(carried)
    }

    /// Up to 32 requests in flight.
    fn contains_many(&self, digests: &[String]) -> std::io::Result<Vec<bool>> {
        let keys: Vec<String> = digests.iter().map(|d| blob_key(d)).collect();
        self.bucket.exists_many(&keys).map_err(carried)
    }

    fn open_many(&self, digests: &[String]) -> Vec<std::io::Result<Option<Box<dyn Read + Send>>>> {
        let Some((_, spill)) = &self.reading else {
            return digests.iter().map(|d| self.open(d)).collect();
        };
        let keys: Vec<String> = digests.iter().map(|d| blob_key(d)).collect();
        let got = self
            .bucket
            .fetch_each(&keys, MAX_OBJECT, crate::pull::FETCH_SMALL, spill);
        got.into_iter()
            .map(|g| match g.map_err(carried)? {
                None => Ok(None),
                Some(Fetched::Bytes(b)) => Ok(Some(Box::new(std::io::Cursor::new(b)) as _)),
                Some(Fetched::File { path, .. }) => {
                    // Read through the open file; its name goes at once.
                    let f = std::fs::File::open(&path);
                    let _ = std::fs::remove_file(&path);
                    Ok(Some(Box::new(f?) as _))
                }
            })
            .collect()
    }

    /// A remote holds its blobs; one read from it that does not match its name is refused.
    fn refetch(&self, digest: &str) -> std::io::Result<bool> {
        let name = self.reading.as_ref().map_or("", |(n, _)| n.as_str());
        Err(carried(tampered(
            name,
            &blob_key(digest),
            "its content does not match its digest",
        )))
    }

    /// Up to 32 requests in flight, each created only if absent.
    fn put_many(
        &self,
        items: &[(String, Vec<u8>)],
        _durability: Durability,
    ) -> std::io::Result<Vec<bool>> {
        let items: Vec<(String, Vec<u8>)> = items
            .iter()
            .map(|(d, b)| (blob_key(d), b.clone()))
            .collect();
        let put = self.bucket.create_many(&items).map_err(carried)?;
        Ok(put.into_iter().map(|p| p == Put::Done).collect())
    }
}

/// The manifest as a write finds it: believed, absent, or refused (`--repair` replaces a
/// refused one: its version when it could be read, and the epoch it claims).
pub(crate) enum Found {
    Head(Box<Manifest>, Version),
    Absent,
    Refused(Option<Version>, u64),
}

fn found(bucket: &Bucket, remote: &str, id: &str, mode: Mode) -> Result<Found> {
    let refused = |e: Error| -> Result<()> {
        if e.code != Code::CorruptRemote {
            return Err(e);
        }
        match mode {
            Mode::Repair => Ok(()),
            Mode::Extend => Err(Error::new(
                e.code,
                e.message,
                format!("if this store writes session {id}, `revl push --repair {id}` uploads its objects again and replaces the manifest"),
            )),
        }
    };
    match bucket.get_limited(&manifest_key(id), MAX_MANIFEST) {
        Ok(None) => Ok(Found::Absent),
        Ok(Some((b, v))) => match crate::parse_manifest(&b, id, remote) {
            Ok(m) => Ok(Found::Head(Box::new(m), v)),
            Err(e) => {
                refused(e)?;
                // The epoch it claims, if any: the repaired manifest's is higher, so that an
                // index row of it is replaced (capped: the next epoch still fits the index's
                // bigint and passes the manifest checks).
                let epoch = serde_json::from_slice::<serde_json::Value>(&b)
                    .ok()
                    .and_then(|j| j["epoch"].as_u64())
                    .unwrap_or(0);
                Ok(Found::Refused(Some(v), epoch.min(MAX_EPOCH - 1)))
            }
        },
        Err(e) => {
            refused(e)?;
            Ok(Found::Refused(None, 0))
        }
    }
}

/// Whether the WAL `wal` extends the remote head `m` (same length prefix, same SHA-256):
/// a write of one that does not is refused (`fenced`).
pub(crate) fn check_extends(remote: &str, id: &str, m: &Manifest, wal: &[u8]) -> Result<()> {
    let local_len = wal.len() as u64;
    if m.wal_length > local_len || sha256_hex(&wal[..m.wal_length as usize]) != m.wal_sha256 {
        let why = if m.wal_length > local_len {
            "the remote holds more of this session than this store (another store pushed it further)"
        } else {
            "this store's WAL does not extend the remote one (another store wrote this session)"
        };
        return Err(fenced(remote, id, m, why));
    }
    Ok(())
}

fn fenced(remote: &str, id: &str, m: &Manifest, why: &str) -> Error {
    Error::new(
        Code::Fenced,
        format!(
            "session {id} in remote {remote} has remote head epoch {} ({} WAL bytes, sha256 {}, written by store {}): {why}; nothing was pushed and nothing local changed",
            m.epoch, m.wal_length, &m.wal_sha256[..m.wal_sha256.len().min(16)], m.writer
        ),
        "one store writes a session: keep working in the store that pushed that head (or branch the session here with `revl fork --remote`)",
    )
}
