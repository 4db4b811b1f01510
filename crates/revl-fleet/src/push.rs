//! `revl push [SESSION]` (docs/fleet.md): blobs first, then the new WAL segment, then the manifest
//! by compare-and-swap, so a kill at any point leaves the remote as it was or extended, and
//! the next push resumes. A push with nothing new writes nothing.
//!
//! Fencing: the remote head must be a prefix of the local WAL (same length prefix, same
//! SHA-256); a push whose local history does not extend it is refused (`fenced`), and a
//! compare-and-swap that lost a race is re-read and judged the same way.

use crate::bucket::{Bucket, Put, Version};
use crate::untrusted::rounds;
use crate::{blob_key, manifest_key, segment_key, sha256_hex, Manifest, Segment};
use revl_core::storage::{get_blob, read_range};
use revl_core::{Code, Error, Result, Store};
use std::collections::BTreeSet;

/// One session's push.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pushed {
    pub session: String,
    pub remote_head: serde_json::Value,
    /// WAL segments uploaded by this push (0 or 1).
    pub segments: u64,
    /// Blobs uploaded by this push (those already in the bucket are not counted).
    pub blobs: u64,
    /// Bytes uploaded (segments and blobs).
    pub bytes: u64,
    /// WAL records the new segment holds.
    pub records: u64,
    /// Whether the lineage index took the new head (absent: no index configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indexed: Option<bool>,
    /// `push --repair`: the objects whose bucket copy failed verification (altered,
    /// missing, or not what the session's WAL says), uploaded again from this store.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repaired: Vec<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PushReport {
    pub remote: String,
    pub pushed: Vec<Pushed>,
}

/// The largest epoch a manifest may state (what the lineage index's bigint holds).
const MAX_EPOCH: u64 = crate::untrusted::MAX_FIELD;

/// Blobs up to this size are pushed by a create-only PUT without a HEAD first.
const ASK_FIRST: u64 = 64 << 10;

/// How a push treats what the bucket already holds.
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

/// Push `sessions` (every session of the store when empty) to `remote`.
pub fn push(store: &Store, remote: &crate::Remote, sessions: &[String]) -> Result<PushReport> {
    push_with(
        store,
        remote,
        &Bucket::open(&remote.url)?,
        sessions,
        Mode::Extend,
    )
}

/// [`push`] through `bucket`, in `mode`.
pub fn push_with(
    store: &Store,
    remote: &crate::Remote,
    bucket: &Bucket,
    sessions: &[String],
    mode: Mode,
) -> Result<PushReport> {
    let writer = crate::config::store_id(store)?;
    let ids = if sessions.is_empty() {
        store.session_ids()?
    } else {
        sessions.to_vec()
    };
    let mut index = match &remote.index {
        Some(url) => crate::index::Index::connect(url).ok(),
        None => None,
    };
    let mut pushed = Vec::new();
    let mut refused = Vec::new();
    for id in ids {
        let mut p = match push_one(store, bucket, &remote.name, &writer, &id, mode) {
            Ok(p) => p,
            // One copied session must not keep the store's other sessions off the remote:
            // they are pushed, then the refusal is the answer.
            Err(e) if sessions.is_empty() && e.code == Code::Fenced => {
                refused.push(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        if remote.index.is_some() {
            let ok = match (&mut index, &p.1) {
                (Some(ix), Some(m)) => ix.upsert(&remote.name, m).is_ok(),
                (Some(_), None) => true,
                (None, _) => false,
            };
            p.0.indexed = Some(ok);
        }
        pushed.push(p.0);
    }
    if let Some(first) = refused.first() {
        let others = match refused.len() {
            1 => String::new(),
            n => format!(
                " ({} more session(s) of this store were refused the same way)",
                n - 1
            ),
        };
        return Err(Error::new(
            Code::Fenced,
            format!(
                "{}{others}; the store's other {} session(s) were pushed",
                first.message,
                pushed.len()
            ),
            first.hint.clone(),
        ));
    }
    Ok(PushReport {
        remote: remote.name.clone(),
        pushed,
    })
}

/// The manifest a remote holds for `id`, with its version.
pub fn remote_manifest(
    bucket: &Bucket,
    remote: &str,
    id: &str,
) -> Result<Option<(Manifest, crate::bucket::Version)>> {
    match bucket.get_limited(&manifest_key(id), crate::untrusted::MAX_MANIFEST)? {
        Some((b, v)) => Ok(Some((crate::parse_manifest(&b, id, remote)?, v))),
        None => Ok(None),
    }
}

/// The manifest as a push finds it: believed, absent, or refused (`--repair` replaces a
/// refused one: its version when it could be read, and the epoch it claims).
enum Found {
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
    match bucket.get_limited(&manifest_key(id), crate::untrusted::MAX_MANIFEST) {
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

/// Push one session; also returns the manifest it wrote (None: nothing new).
fn push_one(
    store: &Store,
    bucket: &Bucket,
    remote: &str,
    writer: &str,
    id: &str,
    mode: Mode,
) -> Result<(Pushed, Option<Manifest>)> {
    let fp = store.failpoints().clone();
    // One read: the state and the bytes pushed are the same prefix of the WAL (a live
    // session may be appending meanwhile).
    let (st, meta) = revl_core::state::State::read(&store.wal_path(id))?;
    let wal = read_range(store, id, 0, meta.good_len)?;
    let local_len = wal.len() as u64;
    // A live session made before the store had a remote has no base tree yet: its
    // workspace now holds, for every path revl never touched, what it held at `new` (paths
    // revl touched are read from the WAL), so a capture now serves a remote branch as well.
    let ws = std::path::Path::new(&st.workspace);
    if store.base_of(id).is_none() && st.life() == revl_core::state::Life::Live && ws.is_dir() {
        store.capture_base(id, ws)?;
    }
    let mut uploaded_blobs = 0u64;
    let mut bytes = 0u64;
    let mut blobs_done = false;
    // --repair of a manifest whose segments are not this store's WAL's: the new one names
    // this store's WAL afresh (one segment from 0), never the segments it named.
    let mut fresh = false;
    let mut repaired = Vec::new();
    for _attempt in 0..5 {
        let (current, refused) = match found(bucket, remote, id, mode)? {
            Found::Head(m, v) => (Some((*m, v)), None),
            Found::Absent => (None, None),
            Found::Refused(v, epoch) => (None, Some((v, epoch))),
        };
        let (mut base_len, prev) = match &current {
            Some((m, _)) => {
                if m.wal_length > local_len
                    || sha256_hex(&wal[..m.wal_length as usize]) != m.wal_sha256
                {
                    let why = if m.wal_length > local_len {
                        "the remote holds more of this session than this store (another store pushed it further)"
                    } else {
                        "this store's WAL does not extend the remote one (another store wrote this session)"
                    };
                    return Err(fenced(remote, id, m, why));
                }
                (m.wal_length, Some(m.clone()))
            }
            None => (0, None),
        };
        let base_new =
            store.base_of(id).is_some() && prev.as_ref().is_some_and(|m| m.base.is_none());
        // --repair: what fails verification is uploaded again now; the manifest is
        // rewritten when it was refused, states what the WAL does not, or anything was.
        let mut rewrite = refused.is_some();
        if mode == Mode::Repair && !blobs_done {
            let (r, segments_wrong, lineage_wrong) =
                repair(store, bucket, id, &st, &wal, prev.as_ref())?;
            repaired.extend(r);
            // The manifest is listed when it was refused, or states segments or a lineage
            // that are not this store's WAL's (a lineage-only fix is a repair too).
            if refused.is_some() || segments_wrong || lineage_wrong {
                repaired.push(manifest_key(id));
            }
            fresh = segments_wrong;
            // A new epoch whatever was found: every reader that marked the session
            // unreadable judges it again (an object may have been put right by hand).
            rewrite = true;
        }
        if fresh {
            base_len = 0;
        }
        if base_len == local_len && !base_new && !rewrite {
            // Nothing new: no object is created or changed.
            let m = prev.expect("a remote head of the local length");
            return Ok((
                Pushed {
                    session: id.to_string(),
                    remote_head: crate::head_doc(&m),
                    segments: 0,
                    blobs: 0,
                    bytes: 0,
                    records: 0,
                    indexed: None,
                    repaired,
                },
                None,
            ));
        }
        // 1. blobs, each once for the whole bucket.
        if !blobs_done {
            let want: Vec<String> = store.blobs_of(id, &st)?.into_iter().collect();
            let blobs = store.blobs();
            for chunk in want.chunks(256) {
                // A small blob is created without asking first whether the bucket holds
                // it: the create-only PUT answers that itself (412), one request instead
                // of two. A larger one is asked about first (its bytes are not sent again).
                let small = |d: &String| {
                    std::fs::metadata(blobs.path_of(d)).is_ok_and(|m| m.len() <= ASK_FIRST)
                };
                let large: Vec<String> = chunk.iter().filter(|d| !small(d)).cloned().collect();
                let keys: Vec<String> = large.iter().map(|d| blob_key(d)).collect();
                let held: BTreeSet<&String> = large
                    .iter()
                    .zip(bucket.exists_many(&keys)?)
                    .filter_map(|(d, there)| there.then_some(d))
                    .collect();
                let mut items = Vec::new();
                for d in chunk {
                    if held.contains(d) {
                        continue;
                    }
                    if let Some(b) = get_blob(store, d)? {
                        items.push((blob_key(d), b));
                    }
                    // Bounded memory: at most 64 blobs or 64 MiB in flight.
                    let held: usize = items.iter().map(|(_, b)| b.len()).sum();
                    if items.len() >= 64 || held >= 64 << 20 {
                        upload(bucket, &mut items, &mut uploaded_blobs, &mut bytes, &fp)?;
                    }
                }
                upload(bucket, &mut items, &mut uploaded_blobs, &mut bytes, &fp)?;
            }
            upload_pack(store, bucket, id)?;
            blobs_done = true;
            fp.point("push.after-blobs");
        }
        // 2. the new segment (immutable; a rerun after a kill finds it there).
        let seg_bytes = &wal[base_len as usize..];
        let mut segments = prev
            .as_ref()
            .filter(|_| !fresh)
            .map(|m| m.segments.clone())
            .unwrap_or_default();
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
        // 3. the manifest, by compare-and-swap from the head read above.
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
            writer: writer.to_string(),
            wal_length: local_len,
            wal_sha256: sha256_hex(&wal),
            segments,
            base: store.base_of(id),
            parent: st.origin.as_ref().map(|o| o.parent.clone()),
            at: st.origin.as_ref().map(|o| o.at.to_i64()),
            state: st.life().as_str().to_string(),
            head: st.head(),
            workspace: st.workspace.clone(),
            pushed_at: revl_core::util::now_rfc3339(),
        };
        let body = serde_json::to_vec_pretty(&m).expect("a manifest serialises");
        fp.point("push.before-manifest");
        let put = match (&current, &refused) {
            (Some((_, v)), _) => bucket.put(&manifest_key(id), &body, Some(v))?,
            (None, Some((Some(v), _))) => bucket.put(&manifest_key(id), &body, Some(v))?,
            // A refused manifest that could not even be read (too large, not a regular
            // file): replaced.
            (None, Some((None, _))) => {
                bucket.replace(&manifest_key(id), &body)?;
                Put::Done
            }
            (None, None) => bucket.put(&manifest_key(id), &body, None)?,
        };
        if put == Put::Conflict {
            // Another writer moved the head since it was read: judge again from the new one.
            continue;
        }
        fp.point("push.after-manifest");
        let records = seg_bytes.iter().filter(|&&c| c == b'\n').count() as u64;
        return Ok((
            Pushed {
                session: id.to_string(),
                remote_head: crate::head_doc(&m),
                segments: u64::from(!seg_bytes.is_empty()),
                blobs: uploaded_blobs,
                bytes,
                records,
                indexed: None,
                repaired,
            },
            Some(m),
        ));
    }
    Err(Error::new(
        Code::Io,
        format!("session {id}: the remote head kept changing while this push ran"),
        "another store is pushing this session: check which store writes it",
    ))
}

/// `push --repair`: every object of session `id` the bucket holds, verified against this
/// store's copy: each segment the manifest `m` names (its bytes are the local WAL's range
/// when its SHA-256 is), each blob the session needs (by its blake3), the base tree's pack
/// (each entry by its digest). Those that fail (or are missing) are uploaded again. Returns
/// their keys, and whether the manifest must be rewritten: its segments are not this
/// store's WAL's; its lineage is not.
fn repair(
    store: &Store,
    bucket: &Bucket,
    id: &str,
    st: &revl_core::state::State,
    wal: &[u8],
    m: Option<&Manifest>,
) -> Result<(Vec<String>, bool, bool)> {
    let mut fixed = Vec::new();
    let (mut segments, mut lineage) = (false, false);
    if let Some(m) = m {
        // Only a segment this store's WAL holds is read, and at most its length: one it
        // does not hold is not this store's WAL's (the manifest is rewritten), whatever
        // size it states.
        let mut held = Vec::new();
        for s in &m.segments {
            let local = usize::try_from(s.from)
                .ok()
                .zip(usize::try_from(s.to).ok())
                .and_then(|(from, to)| wal.get(from..to));
            match local.filter(|b| sha256_hex(b) == s.sha256) {
                Some(b) => held.push((s, b)),
                None => segments = true,
            }
        }
        for round in rounds(&held, |(_, b)| b.len() as u64) {
            let keys: Vec<(String, u64)> = round
                .iter()
                .map(|(s, b)| (s.key.clone(), b.len() as u64))
                .collect();
            for ((s, b), got) in round.iter().zip(bucket.get_each_limited(&keys)) {
                if !verified(got, |got| sha256_hex(got) == s.sha256)? {
                    bucket.replace(&s.key, b)?;
                    fixed.push(s.key.clone());
                }
            }
        }
        if m.wal_length == wal.len() as u64 {
            let stated = (
                st.origin.as_ref().map(|o| o.parent.clone()),
                st.origin.as_ref().map(|o| o.at.to_i64()),
                st.life().as_str(),
                st.head(),
            );
            lineage = stated != (m.parent.clone(), m.at, m.state.as_str(), m.head);
        }
    }
    // Each blob the session needs that this store holds, read at most its local size (a
    // digest the WAL names may be held inline, a small preimage: not a blob, not read).
    let blobs = store.blobs();
    let want: Vec<(String, u64)> = store
        .blobs_of(id, st)?
        .into_iter()
        .filter_map(|d| {
            let len = std::fs::metadata(blobs.path_of(&d)).ok()?.len();
            Some((d, len))
        })
        .collect();
    for round in rounds(&want, |(_, len)| *len) {
        let keys: Vec<(String, u64)> = round.iter().map(|(d, len)| (blob_key(d), *len)).collect();
        for ((d, _), got) in round.iter().zip(bucket.get_each_limited(&keys)) {
            if verified(got, |b| revl_core::util::blake3_hex(b) == *d)? {
                continue;
            }
            if let Some(b) = get_blob(store, d)? {
                bucket.replace(&blob_key(d), &b)?;
                fixed.push(blob_key(d));
            }
        }
    }
    if let Some(base) = store.base_of(id) {
        let key = crate::pack_key(&base.tree);
        let got = bucket.get_limited(&key, crate::untrusted::MAX_PACK);
        // A pack is a shortcut: one the bucket lacks is not put there by a repair.
        let absent = matches!(got, Ok(None));
        let ok = verified(got.map(|o| o.map(|(b, _)| b)), |b| {
            crate::unpack(b).is_some_and(|entries| {
                entries
                    .iter()
                    .all(|(d, b)| revl_core::util::blake3_hex(b) == *d)
            })
        })?;
        if !ok && !absent {
            bucket.replace(&key, &pack_of(store, &base)?)?;
            fixed.push(key);
        }
    }
    Ok((fixed, segments, lineage))
}

/// Whether an object read for `push --repair` passes `check`: `false` when it is missing,
/// refused (`corrupt-remote`: too large, not a regular file) or fails the check; an error
/// that is no verdict on the object (the server cannot be reached, a timeout) stops the
/// repair, so nothing is uploaded again that was not found wrong.
fn verified(got: Result<Option<Vec<u8>>>, check: impl FnOnce(&[u8]) -> bool) -> Result<bool> {
    match got {
        Ok(Some(b)) => Ok(check(&b)),
        Ok(None) => Ok(false),
        Err(e) if e.code == Code::CorruptRemote => Ok(false),
        Err(e) => Err(e),
    }
}

/// Create the blobs of `items` in the bucket (each only if absent), then empty `items`.
fn upload(
    bucket: &Bucket,
    items: &mut Vec<(String, Vec<u8>)>,
    count: &mut u64,
    bytes: &mut u64,
    fp: &revl_core::Failpoints,
) -> Result<()> {
    for ((_, b), put) in items.iter().zip(bucket.create_many(items)?) {
        if put == Put::Done {
            *count += 1;
            *bytes += b.len() as u64;
        }
        fp.point("push.mid-blobs");
    }
    items.clear();
    Ok(())
}

/// The session's base tree packed into one object, once (see [`crate::pack_key`]): the
/// tree listing and its files up to [`crate::PACK_MAX_BLOB`], at most
/// [`crate::PACK_MAX_BYTES`] in all.
fn upload_pack(store: &Store, bucket: &Bucket, id: &str) -> Result<()> {
    let Some(base) = store.base_of(id) else {
        return Ok(());
    };
    let key = crate::pack_key(&base.tree);
    if bucket.exists(&key)? {
        return Ok(());
    }
    bucket.create_many(&[(key, pack_of(store, &base)?)])?;
    Ok(())
}

/// The pack of base tree `base`: its listing and its files up to [`crate::PACK_MAX_BLOB`],
/// at most [`crate::PACK_MAX_BYTES`] in all.
fn pack_of(store: &Store, base: &revl_core::session::remote::BaseTree) -> Result<Vec<u8>> {
    let mut digests = BTreeSet::from([base.tree.clone()]);
    for it in store.base_items(base)? {
        digests.extend(it.digest);
    }
    let (mut items, mut total) = (Vec::new(), 0usize);
    for d in digests {
        if let Some(b) = get_blob(store, &d)? {
            if b.len() <= crate::PACK_MAX_BLOB && total + b.len() <= crate::PACK_MAX_BYTES {
                total += b.len();
                items.push((d, b));
            }
        }
    }
    Ok(crate::pack(&items))
}
