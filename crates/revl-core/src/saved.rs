//! A front end's checkpoints kept in the store (docs/langgraph.md, "What is kept where"): the
//! `checkpoint`, `checkpoint-writes`, `checkpoint-forget` and `checkpoint-tip` records of a
//! session's WAL (docs/wal-format.md), their content in the blob store. revl never reads
//! that content; it keeps it durable, checks it against its digest when it is read, keeps
//! the blobs of the checkpoints not forgotten from `gc` (whatever the session's life), and
//! `push` carries them like any blob.

use crate::error::{Code, Error, Result};
use crate::state::State;
use crate::store::Store;
use crate::wal::Record;
use serde::Serialize;
use std::collections::BTreeMap;

/// What the checkpoint records of one WAL say: every one, in order, and the blobs of those
/// no later `checkpoint-forget` of the same WAL dropped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Saved {
    /// The checkpoint records, in WAL order.
    pub records: Vec<Record>,
    /// (thread, ns, checkpoint id) → the blobs of its latest `checkpoint` record (its own,
    /// then those it `uses`).
    live: BTreeMap<(String, String, String), Vec<String>>,
    /// (thread, ns, checkpoint id) → the blobs of its `checkpoint-writes` records.
    writes: BTreeMap<(String, String, String), Vec<String>>,
}

/// A blake3 digest as the blob store names blobs: 64 lowercase hex characters.
pub fn is_digest(d: &str) -> bool {
    d.len() == 64 && d.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

impl Saved {
    /// Whether `r` is a checkpoint record, and if so whether its members are well formed.
    pub(crate) fn check(r: &Record) -> Option<std::result::Result<(), String>> {
        let named: Vec<&String> = match r {
            Record::Checkpoint { blob, uses, .. } => std::iter::once(blob).chain(uses).collect(),
            Record::CheckpointWrites { blob, .. } => vec![blob],
            Record::CheckpointForget { .. } | Record::CheckpointTip { .. } => return Some(Ok(())),
            _ => return None,
        };
        Some(match named.into_iter().find(|b| !is_digest(b)) {
            None => Ok(()),
            Some(b) => Err(format!(
                "{} names blob {b:?}, which is not a digest",
                r.name()
            )),
        })
    }

    /// Take one checkpoint record (checked by [`Saved::check`]).
    pub(crate) fn apply(&mut self, r: &Record) {
        match r {
            Record::Checkpoint {
                thread,
                ns,
                id,
                blob,
                uses,
                ..
            } => {
                let blobs = std::iter::once(blob).chain(uses).cloned().collect();
                self.live
                    .insert((thread.clone(), ns.clone(), id.clone()), blobs);
            }
            Record::CheckpointWrites {
                thread,
                ns,
                checkpoint,
                blob,
            } => self
                .writes
                .entry((thread.clone(), ns.clone(), checkpoint.clone()))
                .or_default()
                .push(blob.clone()),
            Record::CheckpointForget { thread, ns, ids } => {
                let gone = |k: &(String, String, String)| {
                    &k.0 == thread
                        && match ns {
                            None => true,
                            Some(ns) => &k.1 == ns && ids.contains(&k.2),
                        }
                };
                self.live.retain(|k, _| !gone(k));
                self.writes.retain(|k, _| !gone(k));
            }
            Record::CheckpointTip { .. } => {}
            _ => return,
        }
        self.records.push(r.clone());
    }

    /// The blobs of the checkpoints and writes not forgotten (what `gc` keeps and `push`
    /// carries).
    pub fn blobs(&self) -> impl Iterator<Item = &String> {
        self.live.values().chain(self.writes.values()).flatten()
    }
}

/// One session's checkpoint records, as a front end reads them back.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedSession {
    pub session: String,
    /// `live`, `frozen`, `committed` or `aborted`.
    pub state: &'static str,
    /// The session this one is a branch of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The serial branch that continues a frozen session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frozen_into: Option<String>,
    /// The records, in WAL order.
    pub records: Vec<Record>,
    /// The content of each record's blob that no `checkpoint-forget` of this WAL dropped
    /// (`None` for the others and for records without a blob), verified against its digest.
    #[serde(skip)]
    pub contents: Vec<Option<Vec<u8>>>,
}

impl SavedSession {
    /// The checkpoint records of a session state, with the contents of the blobs still named.
    pub fn of(id: &str, st: &State, blobs: &crate::blobs::BlobStore) -> Result<SavedSession> {
        let held: std::collections::BTreeSet<&String> = st.saved.blobs().collect();
        let mut contents = Vec::with_capacity(st.saved.records.len());
        for r in &st.saved.records {
            let blob = match r {
                Record::Checkpoint { blob, .. } | Record::CheckpointWrites { blob, .. } => {
                    Some(blob)
                }
                _ => None,
            };
            contents.push(match blob {
                Some(d) if held.contains(d) => Some(read_blob(blobs, id, r, d)?),
                _ => None,
            });
        }
        let life = st.life();
        Ok(SavedSession {
            session: id.to_string(),
            state: life.as_str(),
            parent: st.origin.as_ref().map(|o| o.parent.clone()),
            frozen_into: match life {
                crate::state::Life::Frozen { branch, .. } => Some(branch),
                _ => None,
            },
            records: st.saved.records.clone(),
            contents,
        })
    }
}

/// A checkpoint blob's bytes, verified against its name: a missing or damaged one is an
/// error naming the session, the record and the blob, never skipped.
fn read_blob(
    blobs: &crate::blobs::BlobStore,
    session: &str,
    r: &Record,
    digest: &str,
) -> Result<Vec<u8>> {
    let what = match r {
        Record::Checkpoint { thread, id, .. } => format!("checkpoint {id} of thread {thread:?}"),
        Record::CheckpointWrites {
            thread, checkpoint, ..
        } => format!("the writes of checkpoint {checkpoint} of thread {thread:?}"),
        _ => r.name().to_string(),
    };
    let bytes = std::fs::read(blobs.path_of(digest)).map_err(|e| {
        Error::new(
            Code::UnknownBlob,
            format!("{what} (session {session}) names blob {digest}, which the store does not hold ({e})"),
            "restore the store's blobs/ directory from a backup (or pull the session again); nothing was read",
        )
    })?;
    if crate::util::blake3_hex(&bytes) != digest {
        return Err(Error::new(
            Code::CorruptWal,
            format!("{what} (session {session}): blob {digest} is damaged (its content does not match its name)"),
            "restore the store's blobs/ directory from a backup (or pull the session again); nothing was read",
        ));
    }
    Ok(bytes)
}

impl Store {
    /// The checkpoint records of every session of the store that has any (sessions in the
    /// order the store lists them), with the contents of their blobs: what a front end's
    /// saver reads back when it starts. A WAL that cannot be read is an error naming it.
    pub fn saved_sessions(&self) -> Result<Vec<SavedSession>> {
        let blobs = self.blobs();
        let mut out = Vec::new();
        for id in self.session_ids()? {
            let (st, _) = State::read(&self.wal_path(&id))?;
            if st.saved.records.is_empty() {
                continue;
            }
            out.push(SavedSession::of(&id, &st, &blobs)?);
        }
        Ok(out)
    }
}
