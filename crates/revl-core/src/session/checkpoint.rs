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
        if let Life::Frozen { .. } = self.state.life() {
            self.require_live()?;
        }
        if label.is_empty() || label.len() > 1024 || label.chars().any(char::is_control) {
            return Err(Error::new(
                Code::Usage,
                "bind: a checkpoint id must be 1 to 1024 characters, none of them control characters",
                "pass the checkpoint's id as it is",
            ));
        }
        let head = self.state.head();
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
        &self.state.checkpoints
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
        let life = self.state.life();
        Position {
            session: self.id.clone(),
            state: life.as_str(),
            head: self.state.position(),
            frozen_into: match life {
                Life::Frozen { branch, .. } => Some(branch),
                _ => None,
            },
            checkpoints: self
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
