//! The journal (docs/architecture.md, "The journal"): one value owns a session's WAL: the
//! writer, the state replayed from it, the lease (the session's lock) and an explicit access
//! mode. Every append goes through `State::check` then `State::apply`, so the live state and
//! a replay of the WAL cannot drift, whoever writes (a lent journal's holder too); and the
//! life checks every writing verb passes first.

use super::Session;
use crate::error::{Code, Error, Remedy, Result};
use crate::failpoint::Failpoints;
use crate::state::{Life, State};
use crate::storage::{Journals, Lease};
use crate::util::now_rfc3339;
use crate::wal::{Record, StepRecord, WalRead, WalWriter};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a session's journal may do, said once when it is opened (never a flag consulted
/// here and there): write, or only read and why, or nothing while it is lent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Attached with the session's lock held: appends are checked, written, applied.
    Write,
    /// Read only; the reason is what a verb that writes is told.
    ReadOnly(ReadOnly),
    /// Lent for the length of one command ([`Session::lend`]): the holder appends, checked
    /// the same way; the session neither writes nor reads its state until it is given back.
    Lent,
}

/// Why a journal is read only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOnly {
    /// Another revl command held the session's lock: the WAL as it stood then.
    Busy,
    /// Read as far as it is intact: nothing is ever written after a corrupt line.
    Corrupt(crate::wal::Corrupt),
    /// A copy of a session another store wrote (docs/fleet.md): its own store writes it.
    Cache,
    /// Attached to read while an interrupted operation could not be repaired (why): the next
    /// command attached to write repairs it first.
    Unrepaired(String),
}

/// A session's WAL, its state and its lease.
pub(crate) struct Journal {
    path: PathBuf,
    pub(super) state: State,
    /// The WAL ends in an incomplete line (cut, and reported, when the writer opens).
    pub(super) torn: bool,
    writer: Option<WalWriter>,
    /// Where the intact WAL prefix ends and which seq came last (to open the writer lazily).
    read_tail: (u64, u64, usize),
    fp: Failpoints,
    /// Outcome records that go out with the next append (in the same write): a
    /// `files-synced` waits for the record whose fsync will carry it.
    pub(super) riders: Vec<Record>,
    /// The session's lease (`None`: read while another command holds it).
    lease: Option<Lease>,
    /// The store's journals, which this one is.
    journals: Arc<dyn Journals>,
    access: Access,
    /// A torn tail the writer cut when it opened, for the session to report as a repair.
    pub(super) cut: Option<String>,
}

impl Journal {
    pub(super) fn new(
        path: PathBuf,
        state: State,
        read: &crate::wal::WalMeta,
        fp: Failpoints,
        lease: Option<Lease>,
        access: Access,
        journals: Arc<dyn Journals>,
    ) -> Journal {
        Journal {
            path,
            state,
            torn: read.torn,
            writer: None,
            read_tail: (read.good_len, read.last_seq, read.records),
            fp,
            riders: Vec::new(),
            lease,
            journals,
            access,
            cut: None,
        }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn access(&self) -> &Access {
        &self.access
    }

    /// The lease (the session's lock) is held.
    pub(super) fn leased(&self) -> bool {
        self.lease.is_some()
    }

    /// Give up the lease to another journal of the same session (a read re-done after a
    /// blocked repair keeps the lock the first attach took).
    pub(super) fn take_lease(&mut self) -> Option<Lease> {
        self.lease.take()
    }

    pub(super) fn set_lease(&mut self, lease: Option<Lease>) {
        self.lease = lease;
    }

    pub(super) fn set_access(&mut self, access: Access) {
        self.access = access;
    }

    /// Where the WAL ends as this journal knows it: `(byte length, last seq, records)`;
    /// `None` after a failed write.
    pub(super) fn end(&self) -> Option<(u64, u64, usize)> {
        match &self.writer {
            Some(w) => w.end(),
            None => Some(self.read_tail),
        }
    }

    pub(super) fn wrote(&self) -> Option<&WalWriter> {
        self.writer.as_ref()
    }

    pub(super) fn writer(&mut self, id: &str) -> Result<&mut WalWriter> {
        match &self.access {
            Access::Write => {}
            Access::ReadOnly(ReadOnly::Corrupt(c)) => {
                return Err(crate::wal::corrupt_error(
                    Path::new(&c.path),
                    c.line,
                    &c.why,
                ));
            }
            Access::ReadOnly(ReadOnly::Cache) => {
                return Err(Error::new(
                    Code::Usage,
                    format!("session {id} was pushed from another store: this copy is read-only"),
                    "branch it here with `revl fork --remote NAME SESSION --at K`, or run the verb on the store that wrote it",
                ));
            }
            Access::ReadOnly(ReadOnly::Unrepaired(why)) => {
                return Err(Error::new(
                    Code::Busy,
                    format!("session {id} was attached to read: {why}"),
                    "run the command again: a command that writes repairs the session first",
                ));
            }
            Access::ReadOnly(ReadOnly::Busy) => {
                return Err(Error::new(
                    Code::Busy,
                    format!("session {id} is busy: another revl command holds its lock"),
                    "wait for the other command to finish, then run this one again",
                ));
            }
            Access::Lent => {
                return Err(Error::new(
                    Code::Busy,
                    format!("internal: session {id}'s journal is lent to a running command"),
                    "report this as a bug",
                ));
            }
        }
        if self.writer.is_none() {
            let (good_len, last_seq, records) = self.read_tail;
            if self.torn {
                let len = std::fs::metadata(&self.path).map_or(good_len, |m| m.len());
                self.cut = Some(format!(
                    "removed an incomplete last WAL line ({} bytes) and kept the {records} whole records before it: that line never reached the disk whole (a write interrupted before revl acknowledged it, or a file that lost its end after it was written; revl cannot tell which); `revl timeline` shows what the kept records say",
                    len.saturating_sub(good_len)
                ));
            }
            let read = WalRead {
                path: self.path.clone(),
                records: Vec::new(),
                torn: self.torn,
                good_len,
                last_seq,
            };
            let lease = self.lease.as_ref().ok_or_else(|| {
                Error::new(
                    Code::Busy,
                    format!("internal: session {id}'s journal is written without its lease"),
                    "report this as a bug",
                )
            })?;
            let out = self.journals.appender(id, lease, good_len).map_err(|e| {
                let what = if self.torn {
                    "cannot truncate torn tail of"
                } else {
                    "cannot open WAL"
                };
                Error::io(format!("{what} {}", self.path.display()), e)
            })?;
            let mut w = WalWriter::over(&read, out, self.fp.clone());
            w.set_records(records);
            self.writer = Some(w);
            self.torn = false;
        }
        Ok(self.writer.as_mut().expect("writer just opened"))
    }

    pub(super) fn append_many(&mut self, id: &str, recs: Vec<Record>, durable: bool) -> Result<()> {
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
                    self.path.display()
                ),
                "the WAL's records before this one disagree with it (a WAL edited outside revl, or a bug in revl): `revl timeline` shows what the WAL holds; restore the WAL from a backup, or report this with the WAL",
            ));
        }
        self.writer(id)?.append_many(&recs, durable)?;
        self.apply_written(recs)
    }

    /// Apply records already in the WAL to the state.
    fn apply_written(&mut self, recs: Vec<Record>) -> Result<()> {
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

    pub(super) fn sync(&mut self) -> Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.sync(),
            None => Ok(()),
        }
    }

    /// Lend the writer and the state for the length of a command; until [`Journal::take_back`]
    /// this journal neither writes nor reads its state (its access says `Lent`).
    fn lend(&mut self, id: &str) -> Result<Lent> {
        self.writer(id)?;
        let writer = self.writer.take().expect("the writer was just opened");
        self.access = Access::Lent;
        Ok(Lent {
            writer,
            state: std::mem::take(&mut self.state),
        })
    }

    fn take_back(&mut self, lent: Lent) {
        self.writer = Some(lent.writer);
        self.state = lent.state;
        self.access = Access::Write;
    }

    /// Take the state out (the journal is being released: [`Session::keep`]).
    pub(super) fn take_state(&mut self) -> State {
        std::mem::take(&mut self.state)
    }
}

impl Session {
    // ---- writing the WAL: every append goes through the journal ----

    pub(super) fn writer(&mut self) -> Result<&mut WalWriter> {
        self.journal.writer(&self.id)?;
        self.report_cut();
        self.journal.writer(&self.id)
    }

    /// A torn tail the journal's writer cut is reported with the other repairs.
    fn report_cut(&mut self) {
        if let Some(detail) = self.journal.cut.take() {
            self.repaired("torn-tail", None, detail);
        }
    }

    /// How this session's journal may be used.
    pub fn access(&self) -> &Access {
        self.journal.access()
    }

    pub(crate) fn append(&mut self, rec: Record, durable: bool) -> Result<()> {
        self.append_many(vec![rec], durable)
    }

    pub(crate) fn append_many(&mut self, recs: Vec<Record>, durable: bool) -> Result<()> {
        let r = self.journal.append_many(&self.id, recs, durable);
        self.report_cut();
        r
    }

    /// Write the session's index entry (docs/wal-format.md, "The session index") for the WAL
    /// as this session wrote it: once, when the session is released (dropped or kept), not
    /// after every append. Under the lock nobody else writes, so the file is what the state
    /// is the replay of, when its length is the writer's. A session that wrote nothing
    /// (no writer) leaves the entry as it is.
    pub(super) fn index(&self) {
        let Some(w) = self.journal.wrote() else {
            return;
        };
        let Some(stamp) = crate::index::WalStamp::now(self.journal.path()) else {
            return;
        };
        if stamp.len() == w.byte_len() && w.records() == self.journal.state.records {
            crate::index::write(&self.store, &self.id, &self.journal.state, stamp);
        }
    }

    pub(crate) fn sync(&mut self) -> Result<()> {
        self.journal.sync()
    }

    pub(crate) fn take_seq(&mut self) -> Result<u64> {
        Ok(self.writer()?.take_seq())
    }

    /// Records in the WAL so far (header included).
    pub fn record_count(&self) -> usize {
        self.journal.state.records
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
        match self.journal.state.life() {
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
    state: State,
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
    pub(crate) fn state(&self) -> &State {
        &self.state
    }
}

impl Session {
    /// Lend the journal (writer and state) for the length of a command. Until
    /// [`Session::take_back`], this session neither writes nor reads its state.
    pub(crate) fn lend(&mut self) -> Result<Lent> {
        let r = self.journal.lend(&self.id);
        self.report_cut();
        r
    }

    /// Take the journal back after the command: what was appended meanwhile is in its state.
    pub(crate) fn take_back(&mut self, lent: Lent) {
        self.journal.take_back(lent);
    }
}
