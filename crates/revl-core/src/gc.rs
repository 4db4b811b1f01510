//! Blob store housekeeping (`revl gc`, docs/user-guide.md §3): the blobs no live or frozen
//! session can reach any more. A dry run by default: it says what it would free.
//!
//! Reachable from a session: its manifest copy; every preimage blob and directory tree (and
//! the files a tree names) of its restore descriptors, the pending intent's included; the
//! post-image digests of its file effects (what a rewind kept so `read --at` finds it); the
//! digests it `preserved`; the blobs of its front end's checkpoints and writes that no
//! `checkpoint-forget` dropped; the preimages an agent's edit keeps between its two hooks
//! (`STORE/agents/pending/`, outside the WAL until the edit is recorded). Committed and aborted sessions hold nothing but those
//! checkpoints and what they preserved (content made outside revl is never garbage: any session's `preserved` record
//! keeps its blob, listed apart): their other blobs can be collected (`read --at` on them then finds only what the workspace or an inline preimage
//! still holds). A WAL that cannot be read makes `--apply` refuse: nothing is guessed.
//! `--apply` holds the store lock and the lock of every live session, so no operation that
//! writes a blob before naming it is in flight. It also removes the temp files of blob
//! writes a killed writer left (`blobs/.incoming.*.tmp`, `blobs/<ab>/.*.tmp`), once nothing
//! has written to them for ten minutes ([`ABANDONED_AFTER`]); a dry run lists them.

use crate::error::{Code, Error, Result};
use crate::state::{Life, State};
use crate::store::Store;
use crate::undo::{RestoreEntry, TreeItem};
use serde::Serialize;
use std::collections::BTreeSet;

/// `gc`'s result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcReport {
    /// Sessions whose blobs count as reachable (live or frozen).
    pub sessions_kept: usize,
    /// Committed or aborted sessions, whose blobs may go.
    pub sessions_closed: usize,
    pub blobs: usize,
    pub reachable: usize,
    /// Blobs no live or frozen session reaches.
    pub unreachable: usize,
    /// Their bytes.
    pub unreachable_bytes: u64,
    /// True when they were removed (`--apply`).
    pub applied: bool,
    /// Blobs that hold content made outside revl and preserved by a rewind (`preserved`
    /// records), in any session, committed and aborted ones included: never garbage while
    /// a record names them. Counted apart from `reachable`; never removed.
    pub preserved: Vec<PreservedBlob>,
    /// Layered branch workspaces (docs/architecture.md, "Layered workspaces"): those of
    /// aborted branches taken down, and the lower layers no branch uses collected.
    pub layers: crate::layers::LayersGc,
    /// Temp files of blob writes that never finished (the writer was killed):
    /// `blobs/.incoming.*.tmp` and `blobs/<ab>/.*.tmp` not written to for
    /// [`ABANDONED_AFTER`], so no live writer owns them. Removed with `--apply`.
    pub abandoned_temp_files: Vec<String>,
    /// Their bytes.
    pub abandoned_temp_bytes: u64,
}

/// How long a temp file of a blob write goes unwritten before `gc` takes it for one a killed
/// writer left: ten minutes (a writer streams into its file, or writes it whole at once, and
/// renames it into place as soon as it is done; the fleet's fetches sweep their spill files
/// by the same rule, docs/fleet.md).
pub const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// Whether the file `e` was last written more than [`ABANDONED_AFTER`] ago.
pub fn abandoned(e: &std::fs::DirEntry) -> bool {
    e.metadata()
        .ok()
        .and_then(|m| m.modified().ok())
        .is_some_and(|t| t.elapsed().is_ok_and(|d| d > ABANDONED_AFTER))
}

/// A blob kept because a `preserved` record names it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreservedBlob {
    pub digest: String,
    pub session: String,
    pub step: u64,
    pub path: String,
    pub bytes: u64,
}

impl Store {
    /// Find (and with `apply`, remove) the blobs no live or frozen session can reach.
    pub fn gc(&self, apply: bool) -> Result<GcReport> {
        let _store_lock = if apply {
            Some(self.store_lock()?)
        } else {
            None
        };
        let blobs = self.blobs();
        let mut reachable: BTreeSet<String> = BTreeSet::new();
        let (mut kept, mut closed) = (0, 0);
        let mut locks = Vec::new();
        // Hand-made bytes a rewind preserved: never garbage, whatever the session's state.
        let mut hand_made: std::collections::BTreeMap<String, (String, u64, String)> =
            Default::default();
        let ids = self.session_ids()?;
        let mut aborted = BTreeSet::new();
        for id in &ids {
            let id = id.clone();
            // The lease first: taking it folds the WAL's commit ring back in
            // (docs/wal-format.md, "The commit ring"), so after a power cut the WAL read here
            // names every blob an acknowledged record does. A dry run takes it if it is free.
            let lease = if apply {
                Some(self.lease(&id)?)
            } else {
                self.try_lease(&id).ok().flatten()
            };
            let st = match State::read(&self.wal_path(&id)) {
                Ok((st, _)) => st,
                Err(e) if apply => {
                    return Err(Error::new(
                        Code::CorruptWal,
                        format!(
                            "session {id} cannot be read ({}): gc cannot tell what it reaches",
                            e.message
                        ),
                        "repair or remove that session first; nothing was removed",
                    ))
                }
                // A dry run counts what it can.
                Err(_) => continue,
            };
            for p in &st.preserved {
                hand_made
                    .entry(p.digest.clone())
                    .or_insert_with(|| (id.clone(), p.step, p.path.clone()));
            }
            // Records `recover --truncate-corrupt` moved aside still name hand-made bytes.
            for (step, path, digest) in moved_aside_preserved(&self.session_dir(&id)) {
                hand_made
                    .entry(digest)
                    .or_insert_with(|| (id.clone(), step, path));
            }
            // A front end's checkpoints not forgotten: kept whatever the session's life (a
            // graph checkpoints after its last tool committed the session).
            reachable.extend(st.saved.blobs().cloned());
            match st.life() {
                Life::Committed | Life::Aborted => {
                    if st.life() == Life::Aborted {
                        aborted.insert(id.clone());
                    }
                    closed += 1;
                    // What the session's last exec replaced (freed by a next exec that
                    // will never come): garbage that no record names.
                    if apply {
                        let spent = self.root().join("scratch").join(format!("{id}.spent"));
                        let _ = crate::workspace::remove_any(&spent);
                        // Its commit ring, folded back by the lease just taken: a closed
                        // session never appends again.
                        crate::ring::retire(&self.wal_path(&id)).map_err(|e| {
                            Error::io(format_args!("cannot retire the commit ring of {id}"), e)
                        })?;
                    }
                    continue;
                }
                Life::Live if apply => locks.extend(lease),
                _ => {}
            }
            kept += 1;
            // An agent's edit between its PreToolUse and PostToolUse: its preimages wait
            // outside the WAL, and the edit is recorded with them.
            let pending = match self.pending_edits(&id).all() {
                Ok(p) => p,
                Err(e) if apply => {
                    return Err(Error::new(
                        e.code,
                        format!("session {id}'s pending agent edits cannot be read ({}): gc cannot tell what they reach", e.message),
                        "remove the unreadable file under STORE/agents/pending/SESSION first (its edit is not recorded); nothing was removed",
                    ))
                }
                // A dry run counts what it can.
                Err(_) => Vec::new(),
            };
            for e in &pending {
                entry_blobs(e, &blobs, &mut reachable);
            }
            // The WAL's blobs and the base tree a remote branch is made from.
            reachable.extend(self.blobs_of(&id, &st).map_err(|e| {
                Error::new(
                    e.code,
                    format!("session {id}'s base tree cannot be read ({}): gc cannot tell what it reaches", e.message),
                    "repair or remove that session first; nothing was removed",
                )
            })?);
        }
        let (mut total, mut gone, mut bytes) = (0usize, Vec::new(), 0u64);
        let mut preserved = Vec::new();
        // Temp files of blob writes a killed writer left (one still being written is
        // younger than ABANDONED_AFTER, and left alone).
        let (mut temps, mut temp_bytes) = (Vec::new(), 0u64);
        let mut temp = |f: &std::fs::DirEntry| {
            let name = f.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && name.ends_with(".tmp") && abandoned(f) {
                temp_bytes += f.metadata().map_or(0, |m| m.len());
                temps.push(f.path());
            }
        };
        for dir in
            std::fs::read_dir(blobs.root()).map_err(|e| Error::io(blobs.root().display(), e))?
        {
            let entry = dir.map_err(|e| Error::io(blobs.root().display(), e))?;
            let dir = entry.path();
            let Some(prefix) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
                continue;
            };
            if !dir.is_dir() {
                // `.incoming.<pid>.<n>.tmp`: a file being stored as a blob (streamed).
                if prefix.starts_with(".incoming.") {
                    temp(&entry);
                }
                continue;
            }
            for f in std::fs::read_dir(&dir).map_err(|e| Error::io(dir.display(), e))? {
                let f = f.map_err(|e| Error::io(dir.display(), e))?;
                let name = f.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') {
                    // `.<rest of the digest>.<pid>.<n>.tmp`: a blob being written.
                    temp(&f);
                    continue;
                }
                total += 1;
                let digest = format!("{prefix}{name}");
                if reachable.contains(&digest) {
                    continue;
                }
                let size = f.metadata().map_or(0, |m| m.len());
                if let Some((session, step, path)) = hand_made.get(&digest) {
                    preserved.push(PreservedBlob {
                        digest,
                        session: session.clone(),
                        step: *step,
                        path: path.clone(),
                        bytes: size,
                    });
                } else {
                    bytes += size;
                    gone.push(f.path());
                }
            }
        }
        if apply {
            for p in &gone {
                std::fs::remove_file(p).map_err(|e| Error::io(p.display(), e))?;
            }
            for p in &temps {
                match std::fs::remove_file(p) {
                    Ok(()) => {}
                    // Renamed into place or removed meanwhile: nothing left to remove.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(p.display(), e)),
                }
            }
        }
        drop(locks);
        // An aborted branch's layered workspace, or one whose session is gone, goes; but
        // never one written since its fork (by hand, or by its own steps): its upper layer
        // holds those bytes, and only what the fork wrote can be made again.
        let layers = self.layers();
        let written: Vec<(String, std::path::PathBuf)> = aborted
            .iter()
            .filter(|b| layers.written_since_fork(b))
            .filter_map(|b| Some((b.clone(), layers.entry(b).ok()??.dir)))
            .collect();
        let mut report = layers.gc(apply, |b| {
            (aborted.contains(b) && !written.iter().any(|(w, _)| w == b))
                || !ids.iter().any(|i| i == b)
        })?;
        report.kept = written
            .iter()
            .map(|(b, dir)| {
                format!(
                    "{}: written since its fork; `revl abort {b} --remove` removes it",
                    dir.display()
                )
            })
            .collect();
        let layers = report;
        Ok(GcReport {
            sessions_kept: kept,
            sessions_closed: closed,
            blobs: total,
            reachable: total - gone.len() - preserved.len(),
            unreachable: gone.len(),
            unreachable_bytes: bytes,
            applied: apply,
            preserved,
            layers,
            abandoned_temp_files: temps.iter().map(|p| p.display().to_string()).collect(),
            abandoned_temp_bytes: temp_bytes,
        })
    }
}

/// Every blob digest the session state `st` names, directory snapshots' entries included as
/// far as `blobs` holds those snapshots (docs/fleet.md: what a push uploads and a mirror fetches;
/// call again after fetching snapshots to reach their entries).
pub fn blobs_named(st: &State, blobs: &crate::blobs::BlobStore) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    reachable_from(st, blobs, &mut out);
    out
}

/// Every blob digest a session's WAL names.
fn reachable_from(st: &State, blobs: &crate::blobs::BlobStore, out: &mut BTreeSet<String>) {
    out.extend(st.manifest_digest.clone());
    out.extend(st.preserved.iter().map(|p| p.digest.clone()));
    // A front end's checkpoints and writes not forgotten (docs/langgraph.md).
    out.extend(st.saved.blobs().cloned());
    // A pending intent's post-images (a large write's bytes, stored before the intent):
    // repair may roll it forward.
    if let Some(after) = st.intent.as_ref().and_then(|i| i.after.as_ref()) {
        out.extend(after.images.iter().filter_map(|i| i.digest.clone()));
    }
    let pending = st.intent.as_ref().and_then(|i| i.undo.as_ref());
    let undos = st.steps.iter().filter_map(|s| s.undo()).chain(pending);
    for u in undos {
        for e in u.entries() {
            entry_blobs(e, blobs, out);
        }
    }
    // Post-images: what a rewind kept of a file revl wrote.
    for s in st.steps.iter().filter(|s| s.has_builtin_undo()) {
        out.extend(
            crate::drift::after_images(s)
                .into_iter()
                .filter_map(|i| i.digest),
        );
    }
}

/// The `preserved` records in the files `recover --truncate-corrupt` moved aside next to a
/// session's WAL (`wal.jsonl.unreadable-from-line-N`): `(step, path, digest)` of each line
/// that parses as one. Hand-made bytes stay kept while any record names them.
fn moved_aside_preserved(dir: &std::path::Path) -> Vec<(u64, String, String)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("wal.jsonl.unreadable-from-line-") {
            continue;
        }
        let Ok(text) = std::fs::read(e.path()) else {
            continue;
        };
        for line in text.split(|b| *b == b'\n') {
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
                continue;
            };
            if v["record"] != "preserved" {
                continue;
            }
            if let (Some(step), Some(path), Some(d)) =
                (v["step"].as_u64(), v["path"].as_str(), v["digest"].as_str())
            {
                out.push((step, path.to_string(), d.to_string()));
            }
        }
    }
    out
}

/// The blobs a restore entry needs: a large file's bytes, a directory's tree and its files.
fn entry_blobs(e: &RestoreEntry, blobs: &crate::blobs::BlobStore, out: &mut BTreeSet<String>) {
    match e {
        RestoreEntry::File { digest, blob, .. } => {
            out.insert(digest.clone());
            out.extend(blob.clone());
        }
        RestoreEntry::Dir { tree, .. } => {
            out.insert(tree.clone());
            let items: Vec<TreeItem> = blobs
                .get(tree, None)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            out.extend(items.into_iter().filter_map(|i| i.digest));
        }
        _ => {}
    }
}
