//! The journal: every append goes through `State::apply`, so the live state and a replay
//! of the WAL cannot drift; and the life checks every writing verb passes first.

use super::Session;
use crate::error::{Code, Error, Remedy, Result};
use crate::state::Life;
use crate::util::now_rfc3339;
use crate::wal::{Record, StepRecord, WalRead, WalWriter};
use serde_json::Value;

impl Session {
    // ---- writing the WAL: every append also goes through State::apply ----

    pub(super) fn writer(&mut self) -> Result<&mut WalWriter> {
        if let Some(c) = &self.corrupt {
            // Read as far as it is intact: nothing is ever written after a corrupt line.
            return Err(crate::wal::corrupt_error(
                std::path::Path::new(&c.path),
                c.line,
                &c.why,
            ));
        }
        if self.store.mirror().is_some_and(|m| m.read_only) {
            return Err(Error::new(
                Code::Usage,
                format!(
                    "session {} was pushed from another store: this copy is read-only",
                    self.id
                ),
                "branch it here with `revl fork --remote NAME SESSION --at K`, or run the verb on the store that wrote it",
            ));
        }
        if self.busy() {
            return Err(Error::new(
                Code::Busy,
                format!(
                    "session {} is busy: another revl command holds its lock",
                    self.id
                ),
                "wait for the other command to finish, then run this one again",
            ));
        }
        if self.writer.is_none() {
            let (good_len, last_seq, records) = self.read_tail;
            if self.torn {
                let len = std::fs::metadata(&self.wal_path).map_or(good_len, |m| m.len());
                self.repaired(
                    "torn-tail",
                    None,
                    format!(
                        "removed an incomplete last WAL line ({} bytes) and kept the {records} whole records before it: that line never reached the disk whole (a write interrupted before revl acknowledged it, or a file that lost its end after it was written; revl cannot tell which); `revl timeline` shows what the kept records say",
                        len.saturating_sub(good_len)
                    ),
                );
            }
            let read = WalRead {
                path: self.wal_path.clone(),
                records: Vec::new(),
                torn: self.torn,
                good_len,
                last_seq,
            };
            let mut w = WalWriter::open(&read, self.fp.clone())?;
            w.set_records(records);
            self.writer = Some(w);
            self.torn = false;
        }
        Ok(self.writer.as_mut().expect("writer just opened"))
    }

    pub(crate) fn append(&mut self, rec: Record, durable: bool) -> Result<()> {
        self.append_many(vec![rec], durable)
    }

    pub(crate) fn append_many(&mut self, recs: Vec<Record>, durable: bool) -> Result<()> {
        let recs = if self.riders.is_empty() {
            recs
        } else {
            let mut all = std::mem::take(&mut self.riders);
            all.extend(recs);
            all
        };
        // Validate, then write, then apply: a record replay would reject must never reach
        // the WAL (it would make the session unreadable for good).
        if let Err(why) = self.state.check(&recs) {
            let what = recs.iter().map(Record::name).collect::<Vec<_>>().join(", ");
            return Err(Error::new(
                Code::CorruptWal,
                format!(
                    "cannot record {what} in WAL {}: replay would reject it ({why}); nothing was written",
                    self.wal_path.display()
                ),
                "the WAL's records before this one disagree with it (a WAL edited outside revl, or a bug in revl): `revl timeline` shows what the WAL holds; restore the WAL from a backup, or report this with the WAL",
            ));
        }
        self.writer()?.append_many(&recs, durable)?;
        self.apply_written(recs)
    }

    /// Write the session's index entry (docs/wal-format.md, "The session index") for the WAL
    /// as this session wrote it: once, when the session is released (dropped or kept), not
    /// after every append. Under the lock nobody else writes, so the file is what the state
    /// is the replay of, when its length is the writer's. A session that wrote nothing
    /// (no writer) leaves the entry as it is.
    pub(super) fn index(&self) {
        let Some(w) = self.writer.as_ref() else {
            return;
        };
        let Some(stamp) = crate::index::WalStamp::now(&self.wal_path) else {
            return;
        };
        if stamp.len() == w.byte_len() && w.records() == self.state.records {
            crate::index::write(&self.store, &self.id, &self.state, stamp);
        }
    }

    /// Apply records already in the WAL to the state (the writer wrote them: here, or
    /// lent to an exec's egress proxy).
    pub(super) fn apply_written(&mut self, recs: Vec<Record>) -> Result<()> {
        for r in recs {
            if let Err(why) = self.state.apply_owned(r) {
                // Written records replay: only a disagreement between check and replay, or
                // a bug in a writer, can get here.
                return Err(Error::new(
                    Code::CorruptWal,
                    format!("internal: a record written to the WAL was rejected by replay: {why}"),
                    "report this as a bug, with the WAL",
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn sync(&mut self) -> Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.sync(),
            None => Ok(()),
        }
    }

    pub(crate) fn take_seq(&mut self) -> Result<u64> {
        Ok(self.writer()?.take_seq())
    }

    /// Records in the WAL so far (header included).
    pub fn record_count(&self) -> usize {
        self.state.records
    }

    pub(crate) fn step_record(
        &mut self,
        step: u64,
        kind: &str,
        label: &str,
        site: &str,
        detail: Value,
    ) -> Result<StepRecord> {
        let mut rec = StepRecord::new(self.take_seq()?, step, kind.into(), label, site, &detail)?;
        rec.set_ts(Some(&now_rfc3339()))?;
        Ok(rec)
    }

    // ---- life checks ----

    /// Refuse a verb that would write the WAL or the workspace unless the session is live.
    pub fn require_live(&self) -> Result<()> {
        match self.state.life() {
            Life::Live => Ok(()),
            Life::Frozen { branch, at } => Err(Error::new(
                Code::Frozen,
                format!("session {} is frozen: it was forked at step {at} and continues as branch {branch}", self.id),
                format!("act on the branch {branch} instead (reads still work here)"),
            )),
            Life::Committed => Err(Error::new(
                Code::NotLive,
                format!("session {} is committed: it stands behind a committed boundary and takes no more effects", self.id),
                "start a new session",
            )
            .with_remedy(Remedy::NewSession)),
            Life::Aborted => Err(Error::new(
                Code::NotLive,
                format!("session {} is aborted and takes no more effects", self.id),
                "start a new session",
            )
            .with_remedy(Remedy::NewSession)),
        }
    }
}

/// A session's journal lent for the length of one command (the egress proxy's threads
/// append to it while the command runs): the writer and the state travel together, so a
/// lent record is checked against the state before it is written and applied after, exactly
/// as the session's own appends are. [`Session::lend`] makes one; [`Session::take_back`]
/// returns both.
pub(crate) struct Lent {
    writer: WalWriter,
    state: crate::state::State,
}

impl Lent {
    /// Check, write (durably with `durable`), apply; `Err` says why nothing was written.
    pub(crate) fn append(&mut self, rec: Record, durable: bool) -> std::result::Result<(), String> {
        let recs = std::slice::from_ref(&rec);
        self.state.check(recs).map_err(|why| {
            format!(
                "replay would reject {}: {why}; nothing was written",
                rec.name()
            )
        })?;
        self.writer.append(&rec, durable).map_err(|e| e.message)?;
        self.state
            .apply_owned(rec)
            .map_err(|why| format!("internal: a checked record was rejected by replay: {why}"))
    }

    /// The state with every lent record applied (what the proxy recorded is read from it).
    pub(crate) fn state(&self) -> &crate::state::State {
        &self.state
    }
}

impl Session {
    /// Lend the journal (writer and state) for the length of a command. Until
    /// [`Session::take_back`], this session neither writes nor reads its state.
    pub(crate) fn lend(&mut self) -> Result<Lent> {
        self.writer()?;
        let writer = self.writer.take().expect("the writer was just opened");
        Ok(Lent {
            writer,
            state: std::mem::take(&mut self.state),
        })
    }

    /// Take the journal back after the command: what was appended meanwhile is in its state.
    pub(crate) fn take_back(&mut self, lent: Lent) {
        self.writer = Some(lent.writer);
        self.state = lent.state;
    }
}
