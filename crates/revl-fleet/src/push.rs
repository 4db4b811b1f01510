//! `revl push [SESSION]` (docs/fleet.md): blobs first, then the new WAL segment, then the manifest
//! by compare-and-swap, so a kill at any point leaves the remote as it was or extended, and
//! the next push resumes. A push with nothing new writes nothing.
//!
//! Fencing: the remote head must be a prefix of the local WAL (same length prefix, same
//! SHA-256); a push whose local history does not extend it is refused (`fenced`), and a
//! compare-and-swap that lost a race is re-read and judged the same way.

use crate::bucket::Bucket;
use crate::storage::{check_extends, Found, RemoteBlobs, RemoteJournals};
use crate::untrusted::rounds;
use crate::{blob_key, manifest_key, sha256_hex, Manifest};
use revl_core::storage::{copy_blobs, copy_journal, get_blob, read_range, Durability};
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

pub use crate::storage::Mode;

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
        let mut p = match push_one(store, bucket, &remote.name, &id, mode) {
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

/// Push one session; also returns the manifest it wrote (None: nothing new). A copy of the
/// session from this store's storage into the remote's, through the storage traits: its
/// blobs ([`copy_blobs`]), its base tree's pack, then its WAL ([`copy_journal`], which writes
/// the segment and then the manifest, the commit point).
fn push_one(
    store: &Store,
    bucket: &Bucket,
    remote: &str,
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
    let journals = RemoteJournals::written_by(bucket.clone(), remote, store)?;
    // The head as found: a push whose WAL does not extend it is refused before anything is
    // uploaded.
    let (prev, refused) = match journals.head(id, mode)? {
        Found::Head(m, _) => (Some(*m), false),
        Found::Absent => (None, false),
        Found::Refused(..) => (None, true),
    };
    if let Some(m) = &prev {
        check_extends(remote, id, m, &wal)?;
    }
    // --repair: what fails verification is uploaded again now; the manifest is rewritten
    // in any case (a new epoch: every reader that marked the session unreadable judges it
    // again, since an object may have been put right by hand).
    let mut repaired = Vec::new();
    let mut fresh = false;
    if mode == Mode::Repair {
        let (r, segments_wrong, lineage_wrong) =
            repair(store, bucket, id, &st, &wal, prev.as_ref())?;
        repaired.extend(r);
        // The manifest is listed when it was refused, or states segments or a lineage
        // that are not this store's WAL's (a lineage-only fix is a repair too).
        if refused || segments_wrong || lineage_wrong {
            repaired.push(manifest_key(id));
        }
        // --repair of a manifest whose segments are not this store's WAL's: the new one
        // names this store's WAL afresh (one segment from 0), never the segments it named.
        fresh = segments_wrong;
    }
    let base_new = store.base_of(id).is_some() && prev.as_ref().is_some_and(|m| m.base.is_none());
    if let Some(m) = prev
        .as_ref()
        .filter(|m| mode == Mode::Extend && m.wal_length == local_len && !base_new)
    {
        // Nothing new: no object is created or changed.
        return Ok((
            Pushed {
                session: id.to_string(),
                remote_head: crate::head_doc(m),
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
    let want: Vec<String> = store.blobs_of(id, &st)?.into_iter().collect();
    let copied = copy_blobs(
        &*store.storage().blobs,
        &RemoteBlobs::new(bucket.clone()),
        &want,
        Durability::Synced,
        &mut || fp.point("push.mid-blobs"),
    )?;
    upload_pack(store, bucket, id)?;
    fp.point("push.after-blobs");
    // 2. the new segment, 3. the manifest by compare-and-swap.
    let written = match mode {
        Mode::Extend => {
            copy_journal(&*store.storage().journals, &journals, id, local_len)?;
            journals.take_written(id).ok_or_else(|| {
                Error::new(
                    Code::Io,
                    format!("session {id}: the remote did not say what this push wrote"),
                    "run `revl push` again: it resumes where this one stopped",
                )
            })?
        }
        Mode::Repair => journals.write(id, &wal, Some(fresh))?,
    };
    Ok((
        Pushed {
            session: id.to_string(),
            remote_head: crate::head_doc(&written.head),
            segments: written.segments,
            blobs: copied.blobs,
            bytes: copied.bytes + written.bytes,
            records: written.records,
            indexed: None,
            repaired,
        },
        written.wrote.then_some(written.head),
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
    let blobs = &store.storage().blobs;
    let want: Vec<(String, u64)> = store
        .blobs_of(id, st)?
        .into_iter()
        .filter_map(|d| Some((d.clone(), blobs.size(&d).ok()??)))
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
