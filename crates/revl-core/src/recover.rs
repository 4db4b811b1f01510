//! `recover (SESSION | --wal FILE) [--force]`: the operator's verdict on a dead session
//! (docs/reference.md, "recover"). The verdict is decided from the WAL as it stands after
//! the fork repair and before the commit, abort and step-back repairs; then the repairs
//! run, then the verdict.

use crate::error::{Code, Error, Result};
use crate::report::{AbortReport, Owed, Residue};
use crate::state::State;
use crate::store::{is_session_id, Store};
use crate::unwind::Failed;
use crate::wal::Corrupt;
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
    // The header is enough (a WAL corrupt further on is still located, for
    // `--truncate-corrupt`).
    let mut id = None;
    crate::wal::read_wal_prefix_each(&wal, |block| {
        if let Some(crate::wal::Record::Header { session, .. }) = block.first() {
            id.get_or_insert_with(|| session.clone());
        }
        Ok(())
    })?;
    let id = id.ok_or_else(|| {
        Error::new(
            Code::CorruptWal,
            format!("WAL {} has no header", wal.display()),
            "give the path of a session's wal.jsonl",
        )
    })?;
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

/// `recover`'s result (docs/reference.md, "recover").
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

/// `recover --truncate-corrupt`: what was kept, and where the unreadable rest went.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TruncateReport {
    pub session: String,
    /// `truncated`.
    pub verdict: &'static str,
    /// Where the WAL stopped being readable.
    pub corrupt: Corrupt,
    /// The intact records kept (header included) and their bytes: the WAL now.
    pub kept_records: usize,
    pub kept_bytes: u64,
    /// The file next to the WAL that holds every byte from the first unreadable line on.
    pub moved_to: String,
    pub moved_bytes: u64,
    /// The session as its kept records say.
    pub state: &'static str,
    pub head: u64,
    pub note: &'static str,
}

impl Store {
    /// `recover SESSION --truncate-corrupt`: a WAL corrupt past its header keeps its intact
    /// records; every byte from the first unreadable line on is moved into a new file next
    /// to it (`wal.jsonl.unreadable-from-line-N`, written and fsynced before the WAL is cut),
    /// so nothing is lost and the session can be read and attached again. Under the
    /// session's lock; nothing else runs (the next command on the session repairs what the
    /// cut left open, docs/architecture.md, "Attach and repair"). Refused for an intact WAL
    /// and for any other refusal (an unreadable header, a newer revl's record).
    pub fn truncate_corrupt(&self, id: &str) -> Result<TruncateReport> {
        let dir = self.session_dir(id);
        let _lock = self.lease(id)?;
        let wal = self.wal_path(id);
        let (st, _, corrupt) = State::read_prefix(&wal)?;
        let Some(corrupt) = corrupt else {
            return Err(Error::bad_args(
                format!("the WAL of session {id} is intact: --truncate-corrupt has nothing to cut; nothing was changed"),
                format!("`revl recover {id}` without --truncate-corrupt gives its verdict"),
            ));
        };
        let io = |what: &str, e| Error::io(format!("{what} {}", wal.display()), e);
        let cut = line_offset(&wal, corrupt.line).map_err(|e| io("cannot read", e))?;
        let len = std::fs::metadata(&wal)
            .map_err(|e| io("cannot read", e))?
            .len();
        let moved_to = aside_path(&dir, corrupt.line);
        // The rest first, durably, in a file of its own: the cut never loses a byte.
        (|| -> std::io::Result<()> {
            use std::io::{Read, Seek, SeekFrom, Write};
            let tmp = dir.join(".unreadable.tmp");
            let mut src = std::fs::File::open(&wal)?;
            src.seek(SeekFrom::Start(cut))?;
            let mut f = std::fs::File::create(&tmp)?;
            if std::io::copy(&mut src.take(len - cut), &mut f)? != len - cut {
                return Err(std::io::Error::other("the WAL changed while it was read"));
            }
            f.flush()?;
            f.sync_all()?;
            // A link never replaces an existing file (rename would).
            std::fs::hard_link(&tmp, &moved_to)?;
            std::fs::remove_file(&tmp)?;
            std::fs::File::open(&dir)?.sync_all()?;
            // The commit ring was folded in when the lease was taken; the WAL is synced (what
            // it keeps may have been durable only in the ring), then the ring is set aside
            // before the cut, so the cut bytes are never folded back.
            let w = std::fs::OpenOptions::new().write(true).open(&wal)?;
            w.sync_data()?;
            crate::ring::set_aside(&wal)?;
            w.set_len(cut)?;
            w.sync_all()
        })()
        .map_err(|e| io("cannot move the unreadable rest of", e))?;
        // What stands now is what every command reads.
        let (now, _) = State::read(&wal)?;
        debug_assert_eq!(now.records, st.records);
        Ok(TruncateReport {
            session: id.to_string(),
            verdict: "truncated",
            kept_records: now.records,
            kept_bytes: cut,
            moved_to: moved_to.display().to_string(),
            moved_bytes: len - cut,
            state: now.life().as_str(),
            head: now.head(),
            corrupt,
            note: "the session reads and attaches again at its intact records; the next command on it repairs any operation the cut left open (docs/architecture.md, \"Attach and repair\"). What the moved records did to the workspace is no longer witnessed: revl cannot tell it from a hand edit. Only where it changed a path a kept step witnessed does `revl verify` report drift (and a rewind preserve it first); a path only the moved records touched is not reported at all. The moved records stay in the file named above for a person to read. Blobs only they name are not kept by `revl gc`",
        })
    }

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
            let mut lineage = json!({"role": "branch", "parent": o.parent, "divergedAt": o.at});
            if let Some(r) = &o.parent_remote {
                lineage["parentRemote"] = json!(r);
            }
            out.lineage = Some(lineage);
            out.note = Some(format!("this is a branch of {} forked at step {}: a roll-back lands at the fork point (the parent's step {} content), not at an empty workspace", o.parent, o.at, o.at));
        }
        Ok(out)
    }
}

/// The byte offset where 1-based `line` of the file at `path` starts.
fn line_offset(path: &Path, line: usize) -> std::io::Result<u64> {
    use std::io::BufRead;
    let mut r = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let mut at = 0u64;
    let mut buf = Vec::new();
    for _ in 1..line {
        buf.clear();
        let n = r.read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        at += n as u64;
    }
    Ok(at)
}

/// A new name next to the WAL for its unreadable rest: `wal.jsonl.unreadable-from-line-N`,
/// with `.2`, `.3`, … when an earlier cut already used it.
fn aside_path(dir: &Path, line: usize) -> PathBuf {
    let base = format!("wal.jsonl.unreadable-from-line-{line}");
    let mut p = dir.join(&base);
    let mut n = 1;
    while p.exists() {
        n += 1;
        p = dir.join(format!("{base}.{n}"));
    }
    p
}
