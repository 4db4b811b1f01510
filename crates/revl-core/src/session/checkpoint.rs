//! Checkpoints of a front end bound to timeline positions (docs/langgraph.md).

use super::Session;
use crate::error::{Code, Error, Result};
use crate::state::Life;
use crate::wal::Record;
use serde::Serialize;

/// The answer of [`Session::bind`].
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Bound {
    pub session: String,
    pub checkpoint_id: String,
    pub position: u64,
}

impl Session {
    /// Bind `label` (a checkpoint id) to position `at` (default: the session's current
    /// position, its head), durably. Allowed on a live, committed or aborted session (a
    /// checkpoint written after the last tool committed binds to the final position);
    /// refused on a frozen one, whose line ended at its fork (its branch takes the
    /// checkpoint). `at` lets a front end that learns of a checkpoint late (LangGraph's
    /// `async` and `exit` durability modes) bind it where it stood before the effects made
    /// since.
    pub fn bind(&mut self, label: &str, at: Option<u64>) -> Result<Bound> {
        if let Life::Frozen { .. } = self.journal.state.life() {
            self.require_live()?;
        }
        check_label(label)?;
        let head = self.journal.state.head();
        let at = at.unwrap_or(head);
        if at > head {
            return Err(Error::bad_args(
                format!("bind: position {at} is past the head ({head})"),
                format!("give a position from 0 to {head}"),
            ));
        }
        self.append(
            Record::Bind {
                label: label.to_string(),
                at,
            },
            true,
        )?;
        Ok(Bound {
            session: self.id.clone(),
            checkpoint_id: label.to_string(),
            position: at,
        })
    }

    /// The checkpoints bound on this session, in the order they were bound.
    pub fn checkpoints(&self) -> &[(u64, String)] {
        &self.journal.state.checkpoints
    }
}

/// Where a session stands for a front end that binds checkpoints: its life, its head and
/// the checkpoints bound on it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Position {
    pub session: String,
    /// `live`, `frozen`, `committed` or `aborted`.
    pub state: &'static str,
    /// The last live step (see [`crate::state::State::position`]).
    pub head: crate::step::Pos,
    /// The serial branch that continues a frozen session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frozen_into: Option<String>,
    pub checkpoints: Vec<crate::log::LogCheckpoint>,
}

impl Session {
    /// The session's life, head and bound checkpoints (reads only).
    pub fn position(&self) -> Position {
        let life = self.journal.state.life();
        Position {
            session: self.id.clone(),
            state: life.as_str(),
            head: self.journal.state.position(),
            frozen_into: match life {
                Life::Frozen { branch, .. } => Some(branch),
                _ => None,
            },
            checkpoints: self
                .journal
                .state
                .checkpoints
                .iter()
                .map(|(position, id)| crate::log::LogCheckpoint {
                    position: *position,
                    checkpoint_id: id.clone(),
                })
                .collect(),
        }
    }
}

/// The answer of [`Session::save_checkpoint`] and the other checkpoint records: the record
/// written, and where a root checkpoint was bound.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointSaved {
    pub session: String,
    pub record: &'static str,
    /// The blob holding the content, if the record has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
    /// The position a root checkpoint was bound to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
}

impl crate::api::Answer for CheckpointSaved {}

/// What a front end's checkpoint is: its thread, namespace, id and parent.
#[derive(Debug, Clone)]
pub struct CheckpointKey {
    pub thread: String,
    pub ns: String,
    pub id: String,
    pub parent: Option<String>,
    /// The blobs of earlier checkpoints holding channel values this one uses (each must be
    /// in the store).
    pub uses: Vec<String>,
}

impl Session {
    /// Refuse checkpoint records on a frozen session (its branch takes them), as `bind`
    /// does; a live, committed or aborted one takes them.
    fn require_unfrozen(&self) -> Result<()> {
        if let Life::Frozen { .. } = self.journal.state.life() {
            self.require_live()?;
        }
        Ok(())
    }

    /// Keep a front end's checkpoint in the store (docs/langgraph.md): `content` (opaque) goes
    /// to the blob store, durably, then a `checkpoint` record naming it is fsynced. `bind`:
    /// the checkpoint is also bound to position `at` (default: the head), as [`Session::bind`]
    /// binds one.
    pub fn save_checkpoint(
        &mut self,
        key: CheckpointKey,
        content: &[u8],
        bind: bool,
        at: Option<u64>,
    ) -> Result<CheckpointSaved> {
        self.require_unfrozen()?;
        let at = if bind {
            check_label(&key.id)?;
            let head = self.journal.state.head();
            let at = at.unwrap_or(head);
            if at > head {
                return Err(Error::bad_args(
                    format!("checkpoint: position {at} is past the head ({head})"),
                    format!("give a position from 0 to {head}"),
                ));
            }
            Some(at)
        } else {
            None
        };
        for d in &key.uses {
            if !crate::saved::is_digest(d) || !self.blobs.path_of(d).exists() {
                return Err(Error::bad_args(
                    format!(
                        "checkpoint {}: it uses blob {d:?}, which the store does not hold",
                        key.id
                    ),
                    "name the blobs earlier checkpoints were kept in",
                ));
            }
        }
        let blob = self.blobs.put(content)?;
        self.append(
            Record::Checkpoint {
                thread: key.thread,
                ns: key.ns,
                id: key.id,
                parent: key.parent,
                blob: blob.clone(),
                uses: key.uses,
                at,
            },
            true,
        )?;
        Ok(self.saved("checkpoint", Some(blob), at))
    }

    /// Keep pending writes of checkpoint `checkpoint` (`content` opaque): blob, then a
    /// `checkpoint-writes` record, fsynced.
    pub fn save_checkpoint_writes(
        &mut self,
        thread: &str,
        ns: &str,
        checkpoint: &str,
        content: &[u8],
    ) -> Result<CheckpointSaved> {
        self.require_unfrozen()?;
        let blob = self.blobs.put(content)?;
        self.append(
            Record::CheckpointWrites {
                thread: thread.to_string(),
                ns: ns.to_string(),
                checkpoint: checkpoint.to_string(),
                blob: blob.clone(),
            },
            true,
        )?;
        Ok(self.saved("checkpoint-writes", Some(blob), None))
    }

    /// Forget checkpoints (a `checkpoint-forget` tombstone, fsynced; the WAL is never
    /// rewritten): `ids` of namespace `ns`, or with `ns` `None` every checkpoint of the
    /// thread recorded so far.
    pub fn forget_checkpoints(
        &mut self,
        thread: &str,
        ns: Option<&str>,
        ids: Vec<String>,
    ) -> Result<CheckpointSaved> {
        self.require_unfrozen()?;
        if ns.is_none() && !ids.is_empty() {
            return Err(Error::bad_args(
                "checkpoint-forget: ids need their namespace",
                "pass the namespace with the ids, or neither to forget the whole thread",
            ));
        }
        self.append(
            Record::CheckpointForget {
                thread: thread.to_string(),
                ns: ns.map(str::to_string),
                ids,
            },
            true,
        )?;
        Ok(self.saved("checkpoint-forget", None, None))
    }

    /// Record that `thread` now stands at checkpoint `id` (a `checkpoint-tip`, fsynced).
    pub fn checkpoint_tip(&mut self, thread: &str, id: &str) -> Result<CheckpointSaved> {
        self.require_unfrozen()?;
        self.append(
            Record::CheckpointTip {
                thread: thread.to_string(),
                id: id.to_string(),
            },
            true,
        )?;
        Ok(self.saved("checkpoint-tip", None, None))
    }

    fn saved(
        &self,
        record: &'static str,
        blob: Option<String>,
        position: Option<u64>,
    ) -> CheckpointSaved {
        CheckpointSaved {
            session: self.id.clone(),
            record,
            blob,
            position,
        }
    }
}

/// A checkpoint id that binds to a position: 1 to 1024 characters, none a control character.
fn check_label(label: &str) -> Result<()> {
    if label.is_empty() || label.len() > 1024 || label.chars().any(char::is_control) {
        return Err(Error::new(
            Code::Usage,
            "bind: a checkpoint id must be 1 to 1024 characters, none of them control characters",
            "pass the checkpoint's id as it is",
        ));
    }
    Ok(())
}
