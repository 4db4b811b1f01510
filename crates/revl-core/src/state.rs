//! Session state as a pure function of the WAL. `apply` is the only place a record changes
//! state: replay from zero and the live session after each append run the same code, so the
//! two cannot drift (a test replays and compares).

use crate::error::{Code, Error, Result};
use crate::step::{Pos, Step, StepKind};
use crate::undo::{IntentAfter, Undo};
use crate::unwind::{Failed, OwedStep};
use crate::wal::{Record, StepRecord};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// `live`, `frozen`, `committed`, `aborted` (docs/reference.md, "Concepts").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Life {
    Live,
    Frozen { branch: String, at: Pos },
    Committed,
    Aborted,
}

impl Life {
    pub fn as_str(&self) -> &'static str {
        match self {
            Life::Live => "live",
            Life::Frozen { .. } => "frozen",
            Life::Committed => "committed",
            Life::Aborted => "aborted",
        }
    }
}

/// A held send (class b). Serialised as reports list it: `{seq, tool, service, method,
/// args}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Deferred {
    pub seq: u64,
    pub tool: String,
    pub service: String,
    pub method: String,
    /// Shared, not copied, by every state and report that holds it: a held send's
    /// arguments may be large, and a report (`status`) lists them on every call.
    #[serde(serialize_with = "shared_value")]
    pub args: std::sync::Arc<Value>,
    #[serde(skip)]
    pub after_step: u64,
}

fn shared_value<S: serde::Serializer>(
    v: &std::sync::Arc<Value>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&**v, s)
}

/// An `intent` with neither `step` nor `intent-void` after it.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingIntent {
    pub step: u64,
    pub kind: String,
    pub label: String,
    pub site: String,
    pub undo: Option<Undo>,
    pub after: Option<IntentAfter>,
    pub redo: Option<crate::wal::Redo>,
    /// An exec with declared egress: its argv.
    pub argv: Option<Vec<String>>,
}

/// An in-place write whose file may not be durable yet (after the last `files-synced`): its
/// path's preimage, its post-image, and the bytes to write again after a power loss.
#[derive(Debug, Clone, PartialEq)]
pub struct Unsettled {
    pub step: u64,
    pub pre: crate::undo::RestoreEntry,
    pub post: crate::undo::Image,
    pub redo: crate::wal::Redo,
}

/// A parallel fork of this session: `{branch, at, into}`; `complete` once `fork-complete`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ParallelChild {
    pub branch: String,
    pub at: Pos,
    pub into: String,
    #[serde(skip)]
    pub complete: bool,
}

/// What the `fork-branch` record says about where a branch came from.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchOrigin {
    /// The parent's session id (with `parent_remote`, the reference [`BranchOrigin::parent_ref`]).
    pub parent: String,
    pub at: Pos,
    /// The remote the parent lives on: `parentRemote` (walVersion 2), or the remote a
    /// walVersion-1 `parentWal` names.
    pub parent_remote: Option<String>,
    pub preserved: Value,
    pub not_preserved: Value,
    pub crossed: Vec<u64>,
    pub would_cross: Vec<u64>,
    pub failed: Vec<Failed>,
    /// What the parent's witness said at the fork point of each path whose drift the fork
    /// left in place (`--keep-drift`; `preserved.keptDrift`): the branch expects these
    /// images, so its `verify` reports that drift and its rewinds preserve it.
    pub inherited: Vec<crate::undo::Image>,
}

impl BranchOrigin {
    /// The parent, as the session reference the branch names it by.
    pub fn parent_ref(&self) -> crate::lineage::SessionRef {
        crate::lineage::SessionRef {
            id: self.parent.clone(),
            remote: self.parent_remote.clone(),
        }
    }
}

/// A `fork-frozen` seen in this (parent) WAL: the branch that continues it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ForkFrozen {
    pub branch: String,
    pub at: Pos,
    pub failed: Vec<Failed>,
}

/// A `preserved` record: drifted content saved before an inverse ran over it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PreservedSeen {
    pub step: u64,
    pub path: String,
    pub digest: String,
}

/// A fork this WAL began: where, with which confirmed hash, into which directory (a
/// parallel fork), and its outcome: `begun` (unfinished), `complete`, `abandoned`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ForkSeen {
    pub branch: String,
    pub at: Pos,
    pub hash: Option<String>,
    pub mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub into: Option<String>,
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A `fork-begin` seen in this (parent) WAL.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkBegun {
    pub branch: String,
    /// A parallel fork's new workspace (and whether revl made that directory).
    pub into: Option<(String, bool)>,
    pub at: Pos,
    pub crossed: Vec<u64>,
    pub would_cross: Vec<u64>,
    /// Records in the WAL before `fork-begin` (lineage `walPosition`).
    pub wal_position: usize,
    pub head: u64,
    /// Drift beyond the rewound tail is kept (`--keep-drift`), not restored.
    pub keep_drift: bool,
}

#[derive(Debug, Clone, Default)]
pub struct State {
    /// The header's `walVersion` (docs/wal-format.md, "Versions and compatibility").
    pub wal_version: u64,
    pub session: String,
    pub workspace: String,
    pub manifest_digest: Option<String>,
    pub guarantee: String,
    pub steps: Vec<Step>,
    /// Spans stepped over by unwinds: (to, head at the time).
    pub spans: Vec<(Pos, u64)>,
    /// Provisions inherited at a fork: the branch's base layer.
    pub base_provisions: BTreeMap<String, String>,
    pub deferred: BTreeMap<u64, Deferred>,
    /// Held sends still queued, FIFO.
    pub queue: Vec<u64>,
    pub flushed: BTreeSet<u64>,
    pub residue: BTreeMap<u64, Value>,
    pub intent: Option<PendingIntent>,
    /// The `net-connect`/`net-close` records since the last intent (docs/user-guide.md §8): what an
    /// interrupted exec's proxy may have reached, for repair.
    pub net: Vec<Record>,
    /// An unfinished step-back: its target, mode, and whether it keeps drift.
    pub step_back_open: Option<(Pos, String, bool)>,
    pub abort_begun: bool,
    pub aborted: bool,
    /// Crossing inverses that repairs did not run (`aborted` and `step-back-done` records),
    /// in record order; see [`State::owed_steps`].
    pub owed: Vec<OwedStep>,
    pub commit_approved: Option<String>,
    pub discharged: bool,
    pub activation_complete: bool,
    pub fork_pending: Option<(Pos, Option<String>)>,
    /// In-place writes not yet known durable in their files (see [`Unsettled`]).
    pub unsettled: Vec<Unsettled>,
    pub fork_begun: Option<ForkBegun>,
    pub fork_frozen: Option<ForkFrozen>,
    pub fork_complete: bool,
    pub fork_abandoned: bool,
    /// Parallel forks (docs/user-guide.md §6), in order: branches that live in their own
    /// workspaces.
    pub parallel_children: Vec<ParallelChild>,
    pub origin: Option<BranchOrigin>,
    /// Approvals: ticket → (tool, argsDigest) requested; granted tickets; standing tools.
    pub tickets_requested: BTreeMap<String, (String, String)>,
    /// The args each ticket was requested for (v2 WALs record them), and the step after
    /// which it was requested.
    pub ticket_args: BTreeMap<String, (Option<Value>, u64)>,
    pub tickets_granted: BTreeMap<String, (String, Option<String>)>,
    pub tickets_consumed: BTreeSet<String>,
    pub standing: BTreeSet<String>,
    pub model_decisions: Vec<Value>,
    /// Checkpoints bound to positions (`bind` records, docs/langgraph.md), in WAL order:
    /// (at, label).
    pub checkpoints: Vec<(u64, String)>,
    /// A front end's checkpoints kept in the store (`checkpoint` records and the rest,
    /// docs/langgraph.md).
    pub saved: crate::saved::Saved,
    /// Drifted content preserved before a rewind (`preserved` records).
    pub preserved: Vec<PreservedSeen>,
    /// Every fork this WAL began, in order, with the hash that confirmed it and how it
    /// ended (for `log` and `view`; an abandoned one is reported by `status`).
    pub forks: Vec<ForkSeen>,
    /// Held sends dropped by an unwind: seq → the verb that dropped it.
    pub dropped: BTreeMap<u64, String>,
    pub records: usize,
    /// Counts the records that may change what revl expects of the workspace (every record
    /// but a fork's bookkeeping, `files-synced` and model decisions): two states with the
    /// same count over the same WAL expect the same (what a session's built `Expected` is
    /// kept by).
    pub witness_version: usize,
}

impl State {
    /// The witnessed images a branch inherited from its parent (see
    /// [`BranchOrigin::inherited`]); none for a session that is not a branch.
    pub fn inherited(&self) -> &[crate::undo::Image] {
        self.origin.as_ref().map_or(&[], |o| o.inherited.as_slice())
    }

    /// The held sends in the queue, FIFO.
    pub fn held_sends(&self) -> Vec<Deferred> {
        self.queue
            .iter()
            .filter_map(|q| self.deferred.get(q))
            .cloned()
            .collect()
    }

    /// Replay records from the start of a WAL.
    pub fn replay(records: &[Record]) -> Result<State> {
        Self::replay_owned(records.to_vec())
    }

    /// Read a WAL file and replay it as it is decoded (a long WAL is never held as a
    /// vector of records). The checks of [`crate::wal::read_wal`] and the replay of
    /// [`State::replay_owned`]; when a file has both a record that cannot be replayed and a
    /// line that cannot be read, the error reported is the one that comes first in the file.
    /// A long WAL is replayed on a thread of its own, block by block, while the next lines
    /// are decoded.
    pub fn read(path: &std::path::Path) -> Result<(State, crate::wal::WalMeta)> {
        let (state, meta, _) = Self::read_mode(path, false)?;
        Ok((state, meta))
    }

    /// Read a WAL as far as it is intact: like [`State::read`], but corruption after the
    /// header (a bad line with a good one after it, a `seq` that goes back, a record replay
    /// rejects) ends the read there instead of failing it. The state of the records before
    /// it comes back with where and why it stopped (for the readers that show the intact
    /// prefix, clearly marked; a writer never uses this). Every other refusal (an unreadable
    /// header, an unknown `walVersion`, a record of a newer revl) is still an error.
    pub fn read_prefix(
        path: &std::path::Path,
    ) -> Result<(State, crate::wal::WalMeta, Option<crate::wal::Corrupt>)> {
        Self::read_mode(path, true)
    }

    fn read_mode(
        path: &std::path::Path,
        lenient: bool,
    ) -> Result<(State, crate::wal::WalMeta, Option<crate::wal::Corrupt>)> {
        use crate::wal::{Corrupt, WalMeta};
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        // A step line is at least ~150 bytes: reserve once instead of growing by doubling.
        let apply_all = |blocks: &mut dyn Iterator<Item = Vec<Record>>| {
            Self::replay_from(blocks.flatten(), (len / 160) as usize, lenient)
        };
        let read_each = |sink: &mut dyn FnMut(Vec<Record>) -> Result<()>| {
            if lenient {
                crate::wal::read_wal_prefix_each(path, sink)
            } else {
                crate::wal::read_wal_each(path, sink).map(|m| (m, None))
            }
        };
        // A replay error is always at a record before any line the reader refused (the
        // reader hands over the records it accepted before stopping), so it is the first
        // error in the file and wins. Leniently, a record replay rejects ends the prefix
        // there (record n is line n: every line before it was intact).
        let first_error = |applied: Result<(State, Option<(usize, Error)>)>,
                           read: Result<(WalMeta, Option<Corrupt>)>| {
            match (applied, read) {
                (Err(e), _) => Err(e),
                (Ok((s, Some((line, e)))), _) => {
                    let meta = WalMeta {
                        torn: false,
                        good_len: 0,
                        last_seq: 0,
                        records: s.records,
                    };
                    let why = e.message.clone();
                    let path = path.display().to_string();
                    Ok((s, meta, Some(Corrupt { line, path, why })))
                }
                (Ok(_), Err(e)) => Err(e),
                (Ok((s, None)), Ok((meta, corrupt))) => Ok((s, meta, corrupt)),
            }
        };
        if len < (4 << 20) {
            let mut blocks = Vec::new();
            let read = read_each(&mut |block| {
                blocks.push(block);
                Ok(())
            });
            return first_error(apply_all(&mut blocks.into_iter()), read);
        }
        // Long WALs: blocks are replayed on their own thread while the next are decoded.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Record>>(4);
        std::thread::scope(|sc| {
            let applier = sc.spawn(move || apply_all(&mut rx.into_iter()));
            let read = read_each(&mut |block| {
                // The applier stopped on a replay error: stop reading; its error wins.
                tx.send(block).map_err(|_| {
                    Error::new(
                        Code::CorruptWal,
                        "the replay of this WAL stopped",
                        "the WAL was edited outside revl; restore it from a backup",
                    )
                })
            });
            drop(tx);
            let applied = applier.join().unwrap_or_else(|_| {
                Err(Error::new(
                    Code::Io,
                    "internal: the replay thread failed",
                    "report this as a bug",
                ))
            });
            first_error(applied, read)
        })
    }

    /// Replay, consuming the records (steps are moved, not cloned).
    pub fn replay_owned(records: Vec<Record>) -> Result<State> {
        let n = records.len();
        Self::replay_from(records.into_iter(), n, false).map(|(s, _)| s)
    }

    /// Replay records in order, with room for `steps` steps reserved up front. Leniently,
    /// a record replay rejects (not the header) ends the replay: the state of the records
    /// before it comes back with its number and the error (`apply` is all or nothing).
    fn replay_from(
        records: impl Iterator<Item = Record>,
        steps: usize,
        lenient: bool,
    ) -> Result<(State, Option<(usize, Error)>)> {
        let mut s = State::default();
        s.steps.reserve(steps);
        for (i, r) in records.enumerate() {
            let name = r.name();
            if let Err(why) = s.apply_owned(r) {
                let e = replay_error(i + 1, name, why);
                if lenient && i > 0 {
                    return Ok((s, Some((i + 1, e))));
                }
                return Err(e);
            }
        }
        Ok((s, None))
    }

    /// The highest step index (the hinge is 0).
    /// The forks a crash interrupted and repair abandoned (no branch exists for them).
    pub fn abandoned_forks(&self) -> Vec<ForkSeen> {
        self.forks
            .iter()
            .filter(|f| f.outcome == "abandoned")
            .cloned()
            .collect()
    }

    pub fn head(&self) -> u64 {
        self.steps.len().saturating_sub(1) as u64
    }

    pub fn next_index(&self) -> u64 {
        self.steps.len() as u64
    }

    /// A fork this session began is neither complete nor abandoned: the next command on it
    /// (or on the fork's branch, which repairs its parent first) finishes or abandons it.
    pub fn fork_unfinished(&self) -> bool {
        self.fork_begun.is_some() && !self.fork_complete && self.life() == Life::Live
            || self.fork_frozen.is_some() && !self.fork_complete
    }

    pub fn life(&self) -> Life {
        if let Some(f) = &self.fork_frozen {
            Life::Frozen {
                branch: f.branch.clone(),
                at: f.at,
            }
        } else if self.activation_complete {
            Life::Committed
        } else if self.aborted {
            Life::Aborted
        } else {
            Life::Live
        }
    }

    fn step_mut(&mut self, i: u64) -> std::result::Result<&mut Step, String> {
        self.steps
            .get_mut(i as usize)
            .ok_or_else(|| format!("names step {i}, which does not exist"))
    }

    /// Apply one record, by value (steps are moved into the timeline).
    pub fn apply_owned(&mut self, r: Record) -> std::result::Result<(), String> {
        match r {
            Record::Step(sr) => {
                self.push_step(sr)?;
                self.records += 1;
                self.witness_version += 1;
                Ok(())
            }
            other => self.apply(&other),
        }
    }

    /// Apply one record. The only state transition function. All or nothing: a record it
    /// rejects leaves the state as it was (so a reader can stop there and keep the prefix).
    pub fn apply(&mut self, r: &Record) -> std::result::Result<(), String> {
        if let Record::Step(sr) = r {
            self.push_step(sr.clone())?;
            self.records += 1;
            self.witness_version += 1;
            return Ok(());
        }
        self.apply_other(r)?;
        self.records += 1;
        if !matches!(
            r,
            Record::ForkPending { .. }
                | Record::ForkBegin { .. }
                | Record::ForkComplete { .. }
                | Record::ForkAbandoned { .. }
                | Record::FilesSynced { .. }
                | Record::ModelDecision { .. }
        ) {
            self.witness_version += 1;
        }
        Ok(())
    }

    /// Whether [`State::apply`] would accept `recs`, applied in order after this state,
    /// without changing anything: the journal asks before it writes (a record replay would
    /// reject must never reach the WAL). It mirrors every check `apply` makes, on the few
    /// facts they depend on, so it costs no copy of the state.
    pub fn check(&self, recs: &[Record]) -> std::result::Result<(), String> {
        let mut next = self.next_index();
        // The pending intent's step and undo (a batch's own intent replaces it).
        let mut intent: Option<(u64, Option<&Undo>)> =
            self.intent.as_ref().map(|i| (i.step, i.undo.as_ref()));
        let exists = |i: u64, next: u64| {
            if i < next {
                Ok(())
            } else {
                Err(format!("names step {i}, which does not exist"))
            }
        };
        for (i, r) in recs.iter().enumerate() {
            if let Some(well_formed) = crate::saved::Saved::check(r) {
                well_formed?;
            }
            match r {
                Record::Header { .. } if self.records + i != 0 => {
                    return Err("a second header".into())
                }
                Record::Intent { step, undo, .. } => {
                    if *step != next {
                        return Err(format!("intent for step {step}, expected {next}"));
                    }
                    intent = Some((*step, undo.as_ref()));
                }
                Record::IntentVoid { .. } => intent = None,
                Record::Undone { step, .. } | Record::ReplayFence { step } => exists(*step, next)?,
                Record::Bind { at, .. } => exists(*at, next)?,
                Record::Checkpoint { at: Some(at), .. } => exists(*at, next)?,
                Record::Step(sr) => {
                    if sr.step != next {
                        return Err(format!("step {} out of order (expected {next})", sr.step));
                    }
                    let from = intent.filter(|(i, _)| *i == sr.step).and_then(|(_, u)| u);
                    check_hydrate(sr, from).map_err(|why| format!("step {}: {why}", sr.step))?;
                    if sr.kind == StepKind::Compensation {
                        exists(compensation_for(sr)?, next)?;
                    }
                    next += 1;
                    if intent.is_some_and(|(i, _)| i <= sr.step) {
                        intent = None;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn apply_other(&mut self, r: &Record) -> std::result::Result<(), String> {
        match r {
            Record::Header {
                wal_version,
                session,
                workspace,
                manifest_digest,
                guarantee,
                ..
            } => {
                if self.records != 0 {
                    return Err("a second header".into());
                }
                self.wal_version = *wal_version;
                self.session = session.clone();
                self.workspace = workspace.clone();
                self.manifest_digest = manifest_digest.clone();
                self.guarantee = guarantee.clone();
            }
            Record::Intent {
                step,
                kind,
                label,
                site,
                undo,
                after,
                redo,
                argv,
                ..
            } => {
                if *step != self.next_index() {
                    return Err(format!(
                        "intent for step {step}, expected {}",
                        self.next_index()
                    ));
                }
                self.net.clear();
                self.intent = Some(PendingIntent {
                    step: *step,
                    kind: kind.clone(),
                    label: label.clone(),
                    site: site.clone(),
                    undo: undo.clone(),
                    after: after.clone(),
                    redo: redo.clone(),
                    argv: argv.clone(),
                });
                let pre = undo.as_ref().and_then(|u| u.entries().first().cloned());
                let post = after.as_ref().and_then(|a| a.images.first().cloned());
                if let (Some(redo), Some(pre), Some(post)) = (redo, pre, post) {
                    self.unsettled.push(Unsettled {
                        step: *step,
                        pre,
                        post,
                        redo: redo.clone(),
                    });
                }
            }
            Record::IntentVoid { step, .. } => {
                self.intent = None;
                self.unsettled.retain(|u| u.step != *step);
            }
            Record::FilesSynced { through } => self.unsettled.retain(|u| u.step > *through),
            Record::Step(_) => unreachable!("steps are applied above"),
            Record::StepBack {
                to,
                mode,
                keep_drift,
            } => {
                self.step_over(*to);
                self.step_back_open = Some((*to, mode.clone(), *keep_drift));
            }
            Record::StepBackDone { owed, .. } => {
                self.step_back_open = None;
                self.owed.extend(owed.iter().cloned());
            }
            Record::AbortBegin {} => self.abort_begun = true,
            Record::Undone { step, by } => {
                let head = self.head();
                let s = self.step_mut(*step)?;
                s.undone_at = Some(head);
                s.undone = true;
                s.undone_by = Some(by.clone());
                s.fenced = false;
            }
            Record::ReplayFence { step } => self.step_mut(*step)?.fenced = true,
            Record::DeferredEmission {
                seq,
                tool,
                service,
                method,
                args,
                after_step,
            } => {
                self.deferred.insert(
                    *seq,
                    Deferred {
                        seq: *seq,
                        tool: tool.clone(),
                        service: service.clone(),
                        method: method.clone(),
                        args: std::sync::Arc::new(args.clone()),
                        after_step: *after_step,
                    },
                );
                self.queue.push(*seq);
            }
            Record::DeferredDropped { seqs, by } => {
                self.queue.retain(|q| !seqs.contains(q));
                for q in seqs {
                    self.dropped.insert(*q, by.clone());
                }
            }
            Record::ApprovalRequested {
                ticket,
                tool,
                args_digest,
                args,
            } => {
                self.tickets_requested
                    .insert(ticket.clone(), (tool.clone(), args_digest.clone()));
                self.ticket_args
                    .insert(ticket.clone(), (args.clone(), self.head()));
            }
            Record::ApprovalGranted {
                ticket,
                tool,
                standing,
                args_digest,
                ..
            } => {
                if *standing {
                    self.standing.insert(tool.clone());
                } else if let Some(t) = ticket {
                    self.tickets_granted
                        .insert(t.clone(), (tool.clone(), args_digest.clone()));
                }
            }
            Record::ApprovalConsumed { ticket, .. } => {
                if let Some(t) = ticket {
                    self.tickets_consumed.insert(t.clone());
                }
            }
            Record::CommitApproved { hash } => self.commit_approved = Some(hash.clone()),
            Record::Flushed { seq } => {
                self.queue.retain(|q| q != seq);
                self.flushed.insert(*seq);
                self.residue.remove(seq);
            }
            Record::FlushResidue { seq, error } => {
                self.queue.retain(|q| q != seq);
                self.residue.insert(*seq, error.clone());
            }
            Record::Discharge { .. } => self.discharged = true,
            Record::ActivationComplete {} => self.activation_complete = true,
            Record::Aborted { owed, .. } => {
                self.aborted = true;
                self.owed.extend(owed.iter().cloned());
            }
            Record::ForkPending { at, hash } => self.fork_pending = Some((*at, hash.clone())),
            Record::ForkBegin {
                branch,
                at,
                crossed,
                would_cross,
                into,
                into_created,
                keep_drift,
                ..
            } => {
                self.fork_begun = Some(ForkBegun {
                    keep_drift: *keep_drift,
                    branch: branch.clone(),
                    into: into.clone().map(|d| (d, *into_created)),
                    at: *at,
                    crossed: crossed.clone(),
                    would_cross: would_cross.clone(),
                    wal_position: self.records,
                    head: self.head(),
                });
                self.forks.push(ForkSeen {
                    branch: branch.clone(),
                    at: *at,
                    hash: self.fork_pending.as_ref().and_then(|(_, h)| h.clone()),
                    mode: if into.is_some() { "parallel" } else { "serial" },
                    into: into.clone(),
                    outcome: "begun",
                    why: None,
                });
                self.fork_pending = None;
                self.fork_complete = false;
                self.fork_abandoned = false;
                if let Some(dir) = into {
                    self.parallel_children.push(ParallelChild {
                        branch: branch.clone(),
                        at: *at,
                        into: dir.clone(),
                        complete: false,
                    });
                }
                // A parallel fork rewinds the branch's new workspace, never the parent.
                if into.is_none() {
                    self.step_over(*at);
                }
            }
            Record::ForkFrozen {
                branch, at, failed, ..
            } => {
                self.fork_frozen = Some(ForkFrozen {
                    branch: branch.clone(),
                    at: *at,
                    failed: failed.clone(),
                })
            }
            Record::ForkComplete { branch } => {
                self.fork_complete = true;
                if let Some(f) = self.forks.iter_mut().rev().find(|f| &f.branch == branch) {
                    f.outcome = "complete";
                }
                if let Some(c) = self
                    .parallel_children
                    .iter_mut()
                    .find(|c| &c.branch == branch)
                {
                    c.complete = true;
                }
            }
            Record::ForkAbandoned { why, .. } => {
                self.fork_abandoned = true;
                if let Some(f) = self.forks.last_mut().filter(|f| f.outcome == "begun") {
                    f.outcome = "abandoned";
                    f.why = Some(why.clone());
                }
                if let Some(b) = &self.fork_begun {
                    let b = b.branch.clone();
                    self.parallel_children.retain(|c| c.branch != b);
                }
                self.fork_begun = None;
            }
            Record::ForkBranch {
                parent,
                at,
                parent_remote,
                parent_wal,
                preserved,
                not_preserved,
                crossed,
                would_cross,
                failed,
                provisions,
                ..
            } => {
                // walVersion 2 names the parent by reference; walVersion 1 by the path of its
                // WAL then, of which only a remote's name is kept (docs/wal-format.md).
                let parent_remote = match (self.wal_version, parent_remote, parent_wal) {
                    (1, None, Some(w)) => crate::lineage::v1_parent_remote(parent, w)?,
                    (1, _, _) => {
                        return Err(
                            "a walVersion-1 fork-branch names its parent by parentWal".into()
                        )
                    }
                    (_, _, Some(_)) => {
                        return Err(
                            "parentWal is walVersion 1 only: this WAL names its parent by id"
                                .into(),
                        )
                    }
                    (_, Some(r), None) if !crate::lineage::is_remote_name(r) => {
                        return Err(format!("parentRemote {r:?} is not a remote name"))
                    }
                    (_, r, None) => r.clone(),
                };
                self.origin = Some(BranchOrigin {
                    parent: parent.clone(),
                    at: *at,
                    parent_remote,
                    preserved: preserved.clone(),
                    not_preserved: not_preserved.clone(),
                    crossed: crossed.clone(),
                    would_cross: would_cross.clone(),
                    failed: failed.clone(),
                    inherited: preserved
                        .get("keptDrift")
                        .cloned()
                        .and_then(|v| serde_json::from_value(v).ok())
                        .unwrap_or_default(),
                });
                if let Value::Object(m) = provisions {
                    for (k, v) in m {
                        if let Some(v) = v.as_str() {
                            self.base_provisions.insert(k.clone(), v.to_string());
                        }
                    }
                }
            }
            Record::Preserved {
                step, path, digest, ..
            } => self.preserved.push(PreservedSeen {
                step: *step,
                path: path.clone(),
                digest: digest.clone(),
            }),
            Record::ModelDecision { step, outcome, llm } => self
                .model_decisions
                .push(json!({"step": step, "outcome": outcome, "llm": llm})),
            Record::Bind { label, at } => {
                if *at >= self.next_index() {
                    return Err(format!("bind names step {at}, which does not exist"));
                }
                self.checkpoints.push((*at, label.clone()));
            }
            Record::NetConnect { .. } | Record::NetClose { .. } => self.net.push(r.clone()),
            Record::Checkpoint { .. }
            | Record::CheckpointWrites { .. }
            | Record::CheckpointForget { .. }
            | Record::CheckpointTip { .. } => {
                crate::saved::Saved::check(r).unwrap_or(Ok(()))?;
                if let Record::Checkpoint {
                    id, at: Some(at), ..
                } = r
                {
                    if *at >= self.next_index() {
                        return Err(format!("checkpoint names step {at}, which does not exist"));
                    }
                    self.checkpoints.push((*at, id.clone()));
                }
                self.saved.apply(r);
            }
        }
        Ok(())
    }

    fn push_step(&mut self, mut sr: StepRecord) -> std::result::Result<(), String> {
        if sr.step != self.next_index() {
            return Err(format!(
                "step {} out of order (expected {})",
                sr.step,
                self.next_index()
            ));
        }
        let index = sr.step;
        // Only a file restore can name preimage bytes its intent holds: its step record
        // carries the slim descriptor; the intent just before it, the contents.
        let restore = match (&sr.kind, sr.text.undo_raw()) {
            (StepKind::Effect, Some(_)) => match sr.text.undo() {
                Some(Undo::Restore { entries }) => Some(entries),
                _ => None,
            },
            _ => None,
        };
        if let Some(entries) = restore {
            let slim = entries.iter().any(|e| {
                matches!(
                    e,
                    crate::undo::RestoreEntry::File {
                        content: None,
                        blob: None,
                        ..
                    }
                )
            });
            if slim {
                let intent = self.intent.as_mut().filter(|i| i.step == index);
                let from = intent.and_then(|i| i.undo.as_mut());
                // Checked whole before any content moves: a rejected step changes nothing.
                check_slim(entries, from.as_deref())
                    .map_err(|why| format!("step {index}: {why}"))?;
                let mut u = Undo::Restore {
                    entries: entries.clone(),
                };
                u.hydrate(from)
                    .map_err(|why| format!("step {index}: {why}"))?;
                sr.set_undo(Some(&u)).map_err(|e| e.message)?;
            }
        }
        if sr.kind == StepKind::Compensation {
            let f = compensation_for(&sr)?;
            self.step_mut(f)?.compensation = Some(sr.step);
        }
        self.steps.push(Step {
            index,
            kind: sr.kind,
            text: sr.text,
            undo_idempotent: sr.undo_idempotent,
            compensation: sr.compensation,
            undone: false,
            undone_by: None,
            undone_at: None,
            crossed: false,
            fenced: false,
        });
        if self.intent.as_ref().is_some_and(|i| i.step <= index) {
            self.intent = None;
        }
        Ok(())
    }

    /// An unwind to `to` stepped over the current tail: record the span and mark the
    /// emissions in it crossed.
    fn step_over(&mut self, to: Pos) {
        let head = self.head();
        self.spans.push((to, head));
        for s in self.steps.iter_mut().skip(to.first_above() as usize) {
            if s.kind == StepKind::Emission {
                s.crossed = true;
            }
        }
    }

    /// Provisions active at step k (base layer, then the provision steps ≤ k not undone).
    pub fn provisions_at(&self, k: Pos) -> BTreeMap<String, String> {
        let mut m = self.base_provisions.clone();
        for s in self.steps.iter().take(k.first_above() as usize) {
            if s.kind == StepKind::Provision && !s.undone {
                let key = s.detail().get("key").and_then(Value::as_str).unwrap_or("");
                match s.detail().get("value").and_then(Value::as_str) {
                    Some(v) => m.insert(key.to_string(), v.to_string()),
                    None => m.remove(key),
                };
            }
        }
        m
    }

    /// Crossing inverses a repair left owed and nothing has run since (an explicit abort
    /// runs them), in record order.
    pub fn owed_steps(&self) -> Vec<&OwedStep> {
        self.owed
            .iter()
            .filter(|o| !self.steps.get(o.index as usize).is_some_and(|s| s.undone))
            .collect()
    }

    /// The witnessed effects that stand (not undone), ascending: what a commit discharges.
    pub fn witnessed(&self) -> Vec<u64> {
        self.steps
            .iter()
            .filter(|s| s.kind == StepKind::Effect && !s.undone)
            .map(|s| s.index)
            .collect()
    }

    /// Indices of effect steps with an inverse and of provisions, not undone, ≤ k, newest first.
    pub fn accumulated(&self, k: Pos) -> Vec<u64> {
        self.steps
            .iter()
            .take(k.first_above() as usize)
            .rev()
            .filter(|s| {
                !s.undone
                    && ((s.kind == StepKind::Effect && s.undo().is_some())
                        || s.kind == StepKind::Provision)
            })
            .map(|s| s.index)
            .collect()
    }

    /// The label of step k ("(before every step)" for -1).
    pub fn label_at(&self, k: Pos) -> String {
        match k {
            Pos::Start => "(before every step)".into(),
            Pos::After(k) => self
                .steps
                .get(k as usize)
                .map(|s| s.label().to_owned())
                .unwrap_or_default(),
        }
    }

    /// The position after the newest step.
    pub fn head_pos(&self) -> Pos {
        Pos::After(self.head())
    }

    /// Where the session stands: its last live step. After a step-back to k (or the rewind
    /// of a serial fork at k) with no step run since, k; otherwise the last step. This is
    /// the `head` that `status`, `timeline` and a front end's position report.
    pub fn position(&self) -> Pos {
        match self.spans.last() {
            Some((to, h)) if *h == self.head() && !self.steps.is_empty() => *to,
            _ => {
                // An armed compensation is no step that happened: the head is its emission.
                let last = self.steps.iter().rev().find(|s| !s.armed());
                last.map_or(Pos::Start, |s| Pos::After(s.index))
            }
        }
    }

    /// A position given as an integer, checked against this timeline: `-1` or a step index
    /// in `[0, head]`.
    pub fn pos(&self, k: i64) -> Option<Pos> {
        Pos::from_i64(k).filter(|p| p.step().is_none_or(|i| i <= self.head()))
    }
}

/// Whether a step's restore descriptor can take back the inline contents its intent holds
/// (see [`Undo::hydrate`]), checked without moving anything.
fn check_hydrate(sr: &StepRecord, from: Option<&Undo>) -> std::result::Result<(), String> {
    if sr.kind != StepKind::Effect || sr.text.undo_raw().is_none() {
        return Ok(());
    }
    match sr.text.undo() {
        Some(Undo::Restore { entries }) => check_slim(entries, from),
        _ => Ok(()),
    }
}

/// Every file entry with neither `content` nor `blob` finds its bytes in the intent's entry
/// at the same position, with the same path and digest.
fn check_slim(
    entries: &[crate::undo::RestoreEntry],
    from: Option<&Undo>,
) -> std::result::Result<(), String> {
    use crate::undo::RestoreEntry;
    let from = match from {
        Some(Undo::Restore { entries }) => Some(entries),
        _ => None,
    };
    for (j, e) in entries.iter().enumerate() {
        let RestoreEntry::File {
            path,
            digest,
            content: None,
            blob: None,
            ..
        } = e
        else {
            continue;
        };
        let held = from.and_then(|f| f.get(j)).is_some_and(|i| {
            matches!(i, RestoreEntry::File { path: p, digest: d, content: Some(_), .. } if p == path && d == digest)
        });
        if !held {
            return Err(format!(
                "its restore entry for {path:?} has no content, and its intent holds none"
            ));
        }
    }
    Ok(())
}

fn replay_error(n: usize, name: &str, why: String) -> Error {
    Error::new(
        Code::CorruptWal,
        format!("WAL record {n} ({name}) cannot be replayed: {why}"),
        "the WAL was edited outside revl; restore it from a backup",
    )
}

/// The emission a compensation step offsets (`detail.for`).
fn compensation_for(sr: &StepRecord) -> std::result::Result<u64, String> {
    sr.text
        .detail()
        .get("for")
        .and_then(Value::as_u64)
        .ok_or_else(|| "a compensation without `for`".to_string())
}
