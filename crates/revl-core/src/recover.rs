//! `recover (SESSION | --wal FILE) [--force]`: the operator's verdict on a dead session
//! (SPEC 7.1). The verdict is decided from the WAL as it stands after the fork repair and
//! before the commit, abort and step-back repairs; then the repairs run, then the verdict.

use crate::error::{Code, Error, Result};
use crate::report::{AbortReport, Owed, Residue};
use crate::state::State;
use crate::store::{is_session_id, Store};
use crate::unwind::Failed;
use crate::wal::read_wal;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Find the store and session id of a WAL at `<store>/sessions/<id>/wal.jsonl`, or read the
/// id from its header when `store` is given.
pub fn locate_wal(wal: &Path, store: Option<&Store>) -> Result<(PathBuf, String)> {
    let wal = std::fs::canonicalize(wal).map_err(|e| {
        Error::bad_args(
            format!("cannot open WAL {}: {e}", wal.display()),
            "give the path of a session's wal.jsonl",
        )
    })?;
    let read = read_wal(&wal)?;
    let id = match read.header() {
        Some(crate::wal::Record::Header { session, .. }) => session.clone(),
        _ => unreachable!("read_wal checks the header"),
    };
    let dir = wal.parent().and_then(Path::parent).and_then(Path::parent);
    let from_place = dir.filter(|_| {
        wal.parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .is_some_and(is_session_id)
    });
    match (store, from_place) {
        (Some(s), _) => Ok((s.root().to_path_buf(), id)),
        (None, Some(root)) => Ok((root.to_path_buf(), id)),
        (None, None) => Err(Error::new(
            Code::Usage,
            format!(
                "{} is not at <store>/sessions/<id>/wal.jsonl",
                wal.display()
            ),
            "say which store holds it",
        )
        .with_remedy(crate::error::Remedy::GiveStore)),
    }
}

/// `recover`'s result (SPEC 7.1).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoverReport {
    pub session: String,
    pub verdict: &'static str,
    pub residue: Residue,
    pub owed: Vec<Owed>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<crate::step::Pos>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fork_complete: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<Vec<Failed>>,
    /// The abort a `--force` on a live session ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<AbortReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lineage: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Store {
    pub fn recover(&self, id: &str, force: bool) -> Result<RecoverReport> {
        let (pre, _) = State::read(&self.wal_path(id))?;
        // The fork repair rolls a fork forward when the branch WAL exists.
        let fork_rolls_forward = pre.fork_frozen.is_none()
            && pre.fork_begun.as_ref().is_some_and(|f| {
                crate::wal::read_wal(&self.wal_path(&f.branch)).is_ok_and(|r| r.records.len() >= 2)
            });
        let verdict = if pre.fork_frozen.is_some() || fork_rolls_forward {
            "fork-retired"
        } else if pre.activation_complete {
            "rolled-forward"
        } else if pre.aborted || pre.abort_begun {
            "already-aborted"
        } else if pre.commit_approved.is_some() {
            "committed"
        } else {
            "live"
        };
        if verdict == "live" && !force {
            return Err(Error::new(
                Code::Live,
                format!("session {id} is live: recover does not roll back a live session"),
                "abort it (or recover with force to roll it back like an abort)",
            ));
        }
        let mut s = self.attach(id)?;
        let mut out = RecoverReport {
            session: id.to_string(),
            verdict: if verdict == "live" {
                "rolled-back"
            } else {
                verdict
            },
            residue: Residue::new([], &[], |_| String::new()),
            owed: Vec::new(),
            at: None,
            branch: None,
            fork_complete: None,
            failed: None,
            rolled_back: None,
            lineage: None,
            note: None,
        };
        match verdict {
            "fork-retired" => {
                let st = s.state();
                let frozen = st.fork_frozen.clone().unwrap_or_default();
                let begun = st.fork_begun.clone();
                out.residue = Residue::new(
                    begun
                        .iter()
                        .flat_map(|b| b.crossed.iter().chain(&b.would_cross).copied()),
                    &frozen.failed,
                    |_| {
                        "the session was forked and retired; what crossed before the fork stays out in the world; nothing ran now".into()
                    },
                );
                out.at = Some(frozen.at);
                out.branch = Some(frozen.branch);
                out.fork_complete = Some(st.fork_complete);
                out.failed = Some(frozen.failed);
            }
            "live" => {
                let r = s.abort()?;
                out.residue = Residue::new([], &r.failed, |_| {
                    "rolled back like an abort: held sends dropped, inverses run newest first"
                        .into()
                });
                out.rolled_back = Some(r);
            }
            _ => {
                let owed = s.owed();
                out.residue = Residue::new(owed.iter().map(Owed::position), &[], |_| {
                    match verdict {
                    "committed" => "the commit was interrupted and completed at repair; sends without an outcome are owed and never re-fired (use `revl resend`)",
                    "already-aborted" => "the abort is finished without crossing; crossing inverses not yet run are owed (an explicit `revl abort` runs them)",
                    _ => "the session had committed",
                }.into()
                });
            }
        }
        out.owed = s.owed();
        if let Some(o) = &s.state().origin {
            out.lineage = Some(
                json!({"role": "branch", "parent": o.parent, "divergedAt": o.at, "parentWal": o.parent_wal}),
            );
            out.note = Some(format!("this is a branch of {} forked at step {}: a roll-back lands at the fork point (the parent's step {} content), not at an empty workspace", o.parent, o.at, o.at));
        }
        Ok(out)
    }
}
