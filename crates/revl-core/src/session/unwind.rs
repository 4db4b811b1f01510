//! The unwind executor and the verbs built on it: step-back, abort, and their repairs
//! (docs/reference.md, "Step back", "Commit and abort"; docs/architecture.md, "Attach and
//! repair"). What runs is decided by [`crate::unwind::plan`]; this file runs it, once for
//! every kind of unwind: fence, run, record `undone`, list what failed.

use super::{Session, GUARANTEE};
use crate::classify;
use crate::drift::{Drift, Expected};
use crate::error::{Code, Error, Result};
use crate::report::{AbortReport, BeyondTail, Preserved, StepBackReport};
use crate::state::{Deferred, Life};
use crate::step::{Pos, StepKind, BY_ABORT, BY_RECOVER, BY_STEP_BACK};
use crate::undo::Undo;
use crate::unwind::{self, Action, Context, Failed, Mode, Outcome, OwedStep, Plan};
use crate::wal::Record;
use crate::workspace::Workspace;

/// `step-back` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepBackMode {
    Scoped,
    Compensating { force: bool },
}

impl StepBackMode {
    fn name(self) -> &'static str {
        match self {
            StepBackMode::Scoped => "scoped",
            StepBackMode::Compensating { .. } => "compensating",
        }
    }

    fn unwind(self) -> Mode {
        match self {
            StepBackMode::Scoped => Mode::Scoped,
            StepBackMode::Compensating { .. } => Mode::Compensating,
        }
    }
}

/// What a fork or step-back does with drift on witnessed paths its tail never touched
/// (docs/user-guide.md, "Changes made outside revl").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DriftPolicy {
    /// Preserve what is there, then put the path back to its step-k image (the default:
    /// the workspace is then exactly what it was at step k).
    #[default]
    Restore,
    /// Leave it as it is and list it (`--keep-drift`); `verify` keeps reporting it.
    Keep,
}

impl DriftPolicy {
    pub fn keeping(keep: bool) -> Self {
        if keep {
            DriftPolicy::Keep
        } else {
            DriftPolicy::Restore
        }
    }

    pub fn keeps(self) -> bool {
        self == DriftPolicy::Keep
    }
}

/// What an executed plan did.
pub(crate) struct Unwound {
    /// Inverses that ran and got `undone`, in the order they ran.
    pub ran: Vec<u64>,
    pub failed: Vec<Failed>,
    /// Drifted content saved before an inverse ran over it (or before a path beyond the
    /// tail was restored).
    pub preserved: Vec<Preserved>,
    /// Drift on witnessed paths the tail never touched, and what became of it.
    pub beyond: Vec<BeyondTail>,
    /// The step-k images of the drift left in place (a branch inherits them).
    pub kept_images: Vec<crate::undo::Image>,
}

/// THE executor (docs/architecture.md, "The journal"): one rewind, over the timeline it
/// reads, in the one workspace it runs in. A rewind of the session's own workspace records
/// what it does in the session's journal; a parallel branch's rewind ([`Rewind::copy`]) gets
/// the parent's timeline read only and the branch's new copy as its workspace, and nothing
/// else of the parent: it cannot reach the parent's workspace or journal, so every inverse,
/// a manifest tool's included, runs in the copy.
pub(crate) struct Rewind<'a> {
    rec: Rec<'a>,
    id: &'a str,
    store: &'a crate::store::Store,
    blobs: &'a crate::blobs::BlobStore,
    fp: &'a crate::failpoint::Failpoints,
    ws: &'a Workspace,
    /// Where the digests its scan of every witnessed path reads are kept by stat
    /// (crate::statindex): the session's, or a layered DIR's lower layer's.
    index: Option<std::path::PathBuf>,
    /// A layered DIR's layers (a parallel fork's rewind there), scanned directly where DIR
    /// shows its lower layer unchanged.
    layered: Option<LayeredDir>,
    /// What revl expects of the workspace before the plan runs, where the caller built it
    /// already for the same timeline (a parallel fork's enumeration): the parent's timeline
    /// does not change while its branch's DIR is rewound.
    expected: Option<std::sync::Arc<Expected>>,
}

/// A layered DIR as its fork's rewind sees it (docs/architecture.md, "Layered workspaces"):
/// the lower layer's tree and the stat index of its files, and the branch's upper layer.
pub(crate) struct LayeredDir {
    pub tree: std::path::PathBuf,
    pub index: std::path::PathBuf,
    pub upper: std::path::PathBuf,
}

impl LayeredDir {
    /// Does DIR show exactly its lower layer? Its upper layer holds nothing but the fork's
    /// marker (no inverse wrote there, nothing was copied up, no whiteout): then a scan of
    /// the lower layer's tree finds what a scan of DIR would, without the overlay's cost
    /// per `lstat`.
    fn shows_lower(&self) -> bool {
        let Ok(rd) = std::fs::read_dir(&self.upper) else {
            return false;
        };
        rd.into_iter().all(|e| {
            e.is_ok_and(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with(".revl-fork-")
                    && name.ends_with(".making")
                    && e.file_type().is_ok_and(|t| t.is_file())
            })
        })
    }
}

/// Where a rewind records what it did.
enum Rec<'a> {
    /// This session's own workspace: an inverse is fenced where it needs it and recorded
    /// `undone`; drift is preserved (blob store, `preserved` records) before anything
    /// overwrites it.
    Own(&'a mut super::journal::Journal),
    /// A parallel branch's new copy (`fork --into DIR`): nothing is journaled (the parent's
    /// steps are not undone) and drift is not preserved, for the parent's workspace still
    /// holds those bytes. The parent's timeline, read only.
    Copy {
        state: &'a crate::state::State,
        wal: &'a std::path::Path,
    },
}

impl<'a> Rewind<'a> {
    /// A rewind of a parallel branch's copy `ws`, reading the parent's timeline through
    /// `parent` (its session read only): the parent's workspace and journal are not in it.
    pub(crate) fn copy(
        parent: super::view::View<'a>,
        fp: &'a crate::failpoint::Failpoints,
        ws: &'a Workspace,
        layered: Option<LayeredDir>,
        expected: std::sync::Arc<Expected>,
    ) -> Rewind<'a> {
        Rewind {
            rec: Rec::Copy {
                state: parent.state,
                wal: parent.wal,
            },
            id: parent.id,
            store: parent.store,
            blobs: parent.blobs,
            fp,
            ws,
            index: layered.as_ref().map(|l| l.index.clone()),
            layered,
            expected: Some(expected),
        }
    }

    fn state(&self) -> &crate::state::State {
        match &self.rec {
            Rec::Own(j) => &j.state,
            Rec::Copy { state, .. } => state,
        }
    }

    /// Whether what runs is journaled (and drift preserved first).
    fn journaled(&self) -> bool {
        matches!(self.rec, Rec::Own(_))
    }

    fn view(&self) -> super::view::View<'_> {
        let wal = match &self.rec {
            Rec::Own(j) => j.path(),
            Rec::Copy { wal, .. } => wal,
        };
        super::view::View {
            id: self.id,
            store: self.store,
            blobs: self.blobs,
            wal,
            state: self.state(),
        }
    }

    fn append(&mut self, rec: Record, durable: bool) -> Result<()> {
        self.append_many(vec![rec], durable)
    }

    fn append_many(&mut self, recs: Vec<Record>, durable: bool) -> Result<()> {
        match &mut self.rec {
            Rec::Own(j) => j.append_many(self.id, recs, durable),
            Rec::Copy { .. } => Err(Error::new(
                Code::Io,
                "internal: a parallel branch's rewind tried to write the parent's WAL",
                "report this as a bug",
            )),
        }
    }

    /// Run a plan: for each action in order, a fenced step is listed failed (outcome
    /// unknown); otherwise its inverse is fenced if [`unwind::needs_fence`], run, then
    /// recorded `undone`. `crash_point` is passed after each inverse ran, before its `undone`.
    /// The outer `Result` is a WAL failure (everything stops); an inverse's own failure is
    /// listed and the unwind goes on.
    pub(crate) fn execute(&mut self, plan: &Plan, by: &str, crash_point: &str) -> Result<Unwound> {
        let mut out = Unwound {
            ran: Vec::new(),
            failed: Vec::new(),
            preserved: Vec::new(),
            beyond: Vec::new(),
            kept_images: Vec::new(),
        };
        // What revl expects the workspace to hold, kept current as the inverses run.
        let mut expected: Option<Expected> = None;
        for action in &plan.actions {
            match *action {
                Action::Unknown(i) => out
                    .failed
                    .push(Failed::unknown(&self.state().steps[i as usize])),
                Action::Run(i) => {
                    let restore = match self.state().steps[i as usize].undo() {
                        Some(Undo::Restore { entries }) => Some(entries.clone()),
                        _ => None,
                    };
                    if let (Some(entries), true) = (&restore, self.journaled()) {
                        let exp = match &mut expected {
                            Some(e) => e,
                            None => expected.insert(Expected::of_in_with(
                                &self.state().steps,
                                self.blobs,
                                self.state().inherited(),
                            )),
                        };
                        let kept = self.preserve_drift(i, entries, exp)?;
                        out.preserved.extend(kept);
                    }
                    match self.run_inverse(i, by, crash_point)? {
                        Ok(()) => {
                            out.ran.push(i);
                            if let (Some(entries), Some(exp)) = (&restore, &mut expected) {
                                exp.undone(entries);
                            }
                        }
                        Err(f) => {
                            out.failed.push(f);
                            // What it left is unknown: rebuild from the disk's timeline next.
                            expected = None;
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Before step `i`'s file restore runs over `entries`: save every drifted file (and
    /// symlink target) under their paths to the blob store and record `preserved`, durably
    /// (docs/architecture.md, "Drift: what revl expects, exactly"); and keep the witnessed
    /// files it replaces in the blob store too. A path already showing what the entry
    /// restores (a repair re-running an inverse that had run) is not drift.
    pub(super) fn preserve_drift(
        &mut self,
        i: u64,
        entries: &[crate::undo::RestoreEntry],
        exp: &Expected,
    ) -> Result<Vec<Preserved>> {
        let mut kept = Vec::new();
        let mut records = Vec::new();
        for e in entries {
            let here = exp.drift_at(self.ws, e.path())?;
            // A restored directory's drift, entry by entry: only what changed there is drift.
            for d in exp.per_entry(here, self.ws, self.blobs) {
                if d.path == e.path() && e.image().shown_by(&d.actual) {
                    continue;
                }
                self.keep_what_is_there(i, d.actual, &mut kept, &mut records)?;
            }
        }
        // What revl did witness and the inverse replaces (the abandoned alternative) is kept
        // too, unrecorded: the blob store is content-addressed, a later reader finds it by
        // the digest its step recorded.
        for e in entries {
            for node in self.ws.observe_tree(e.path(), &|_| false)? {
                if node.kind == Some(crate::undo::FileKind::File)
                    && !kept.iter().any(|k| k.path == node.path)
                {
                    self.ws.keep(&node.path, self.blobs)?;
                }
            }
        }
        if !records.is_empty() {
            self.append_many(records, true)?;
        }
        Ok(kept)
    }

    /// After a rewind to `at` ran `plan`: every witnessed path the plan's restores did not
    /// reach is put back to its step-k image too (a hand edit of a path the tail never
    /// touched, a file made by hand in a directory revl made before k). What is there is
    /// preserved first (blob store, `preserved` records, durable before anything changes),
    /// unless `target` is a parallel branch's copy (the parent's workspace still holds those
    /// bytes). With `keep`, nothing changes: each is listed `kept`.
    pub(crate) fn restore_beyond_tail(
        &mut self,
        at: Pos,
        plan: &Plan,
        keep: bool,
    ) -> Result<(Vec<BeyondTail>, Vec<Preserved>, Vec<crate::undo::Image>)> {
        let lower = self
            .layered
            .as_ref()
            .filter(|l| l.shows_lower())
            .map(|l| Workspace::new(l.tree.clone(), self.fp.clone()));
        let scan =
            crate::statindex::Scan::of(lower.as_ref().unwrap_or(self.ws), self.index.as_deref());
        let steps = &self.state().steps;
        let drift = match &self.expected {
            Some(exp) => crate::drift::beyond_plan_from(exp, steps, plan, scan.ws(), self.blobs)?,
            None => crate::drift::beyond_plan(
                steps,
                self.state().inherited(),
                plan,
                scan.ws(),
                self.blobs,
            )?,
        };
        scan.done();
        let mut out = Vec::new();
        let mut kept_images = Vec::new();
        let mut kept = Vec::new();
        let mut records = Vec::new();
        let mut todo: Vec<(crate::undo::RestoreEntry, usize)> = Vec::new();
        let mut done_roots: Vec<String> = Vec::new();
        let step = at.first_above();
        let below = |p: &str| {
            let under = format!("{p}/");
            drift.iter().any(|x| x.path.starts_with(&under))
        };
        let dirs = |d: &Drift| {
            d.expected.kind == Some(crate::undo::FileKind::Dir)
                && d.actual.kind == Some(crate::undo::FileKind::Dir)
        };
        for d in &drift {
            let under = |root: &String| d.path.starts_with(&format!("{root}/"));
            if done_roots.iter().any(under) {
                continue;
            }
            // A directory whose content differs only by the entries listed below it: those
            // entries carry it (its own mode is put back when that changed too).
            let entries_carry = dirs(d) && below(&d.path);
            if entries_carry && (d.expected.mode.is_none() || d.expected.mode == d.actual.mode) {
                continue;
            }
            // `None`: kept as it is (`--keep-drift`).
            let entry = (!keep).then(|| self.entry_for(&d.expected, entries_carry));
            let (outcome, why) = match &entry {
                None => ("kept", None),
                Some(Ok(_)) => ("restored", None),
                Some(Err(why)) => ("unrestored", Some(why.to_string())),
            };
            out.push(BeyondTail {
                path: d.path.clone(),
                change: d.change.clone(),
                outcome,
                why,
            });
            let Some(Ok(entry)) = entry else {
                kept_images.push(d.expected.clone());
                continue;
            };
            done_roots.push(d.path.clone());
            if self.journaled() {
                self.keep_what_is_there(step, d.actual.clone(), &mut kept, &mut records)?;
            }
            todo.push((entry, out.len() - 1));
        }
        if !records.is_empty() {
            self.append_many(records, true)?;
        }
        for (entry, at_out) in todo {
            if let Err(e) = self
                .ws
                .restore(std::slice::from_ref(&entry), self.blobs, step)
            {
                out[at_out].outcome = "unrestored";
                out[at_out].why = Some(e.message);
            }
        }
        Ok((out, kept, kept_images))
    }

    /// The restore entry that puts a path back to the image revl expects there, or why it
    /// cannot (its bytes are kept nowhere revl can read).
    fn entry_for(
        &self,
        want: &crate::undo::Image,
        entries_carry: bool,
    ) -> std::result::Result<crate::undo::RestoreEntry, &'static str> {
        let ws = self.ws;
        use crate::undo::{FileKind, RestoreEntry};
        const NOWHERE: &str = "its step-k bytes are kept nowhere revl can read (a large file a step left, changed by hand since): left as it is";
        let path = want.path.clone();
        let actual = ws.lstat_rel(&path).ok().flatten();
        let mode = |default: u32| {
            want.mode
                .clone()
                .or_else(|| actual.map(|(_, m, _)| crate::workspace::mode_str(m)))
                .unwrap_or_else(|| crate::workspace::mode_str(default))
        };
        match (want.kind, &want.digest) {
            (Some(FileKind::Absent), _) => Ok(RestoreEntry::Absent { path }),
            // In the blob store: streamed out by the restore, never held in memory.
            (Some(FileKind::File), Some(d)) if self.blobs.check(d, None).is_ok() => {
                Ok(RestoreEntry::File {
                    path,
                    mode: mode(0o644),
                    digest: d.clone(),
                    content: None,
                    blob: Some(d.clone()),
                })
            }
            // Elsewhere (an inline preimage, bytes kept in an intent): small.
            (Some(FileKind::File), Some(d)) => {
                let bytes = self.view().bytes_by_digest(d, &path, self.ws).map_err(|_| NOWHERE)?;
                let (content, blob) = if bytes.len() <= crate::workspace::INLINE_MAX {
                    (Some(crate::workspace::b64(&bytes)), None)
                } else {
                    (None, Some(self.blobs.put(&bytes).map_err(|_| NOWHERE)?))
                };
                Ok(RestoreEntry::File {
                    path,
                    mode: mode(0o644),
                    digest: d.clone(),
                    content,
                    blob,
                })
            }
            (Some(FileKind::File), None) if matches!(actual, Some((FileKind::File, _, _))) => {
                Ok(RestoreEntry::Mode {
                    path,
                    mode: mode(0o644),
                })
            }
            (Some(FileKind::Symlink), Some(d)) => {
                // A target revl kept: preserved into the blob store, or recorded in a restore
                // entry of the timeline (its digest is the target's).
                let recorded = self.state().steps.iter().find_map(|s| match s.undo() {
                    Some(crate::undo::Undo::Restore { entries }) => {
                        entries.iter().find_map(|e| match e {
                            RestoreEntry::Symlink { target, .. }
                                if crate::util::blake3_hex(&crate::name::to_bytes(target))
                                    == *d =>
                            {
                                Some(target.clone())
                            }
                            _ => None,
                        })
                    }
                    _ => None,
                });
                let target = match recorded {
                    Some(t) => t,
                    None => {
                        let b = self.blobs.get(d, None).map_err(|_| NOWHERE)?;
                        crate::name::from_bytes(&b).into_owned()
                    }
                };
                Ok(RestoreEntry::Symlink { path, target })
            }
            (Some(FileKind::Dir), digest) => match actual {
                Some((FileKind::Dir, _, _))
                    if entries_carry
                        || digest.is_none()
                        || ws.observe(&path).ok().and_then(|i| i.digest) == *digest =>
                {
                    Ok(RestoreEntry::Mode {
                        path,
                        mode: mode(0o755),
                    })
                }
                Some((FileKind::Dir, _, _)) => Err("its step-k entries were recorded as one digest of the whole directory, not one by one: left as it is"),
                _ if digest.is_none()
                    || digest.as_deref() == Some(crate::workspace::empty_dir_digest()) =>
                {
                    let tree = self.blobs.put(b"[]").map_err(|_| NOWHERE)?;
                    Ok(RestoreEntry::Dir {
                        path,
                        mode: mode(0o755),
                        tree,
                        digest: crate::workspace::empty_dir_digest().to_string(),
                    })
                }
                _ => Err("its step-k entries were recorded as one digest of the whole directory, not one by one: left as it is"),
            },
            _ => Err(NOWHERE),
        }
    }

    /// Keep what is at a drifted path before a rewind runs over it: every file (and symlink
    /// target) of it, one by one (a directory's whole tree), in the blob store, each with a
    /// `preserved` record for `step` (appended by the caller, durably, before the rewind)
    /// and an entry in the report. A path already kept is not kept twice.
    fn keep_what_is_there(
        &self,
        step: u64,
        actual: crate::undo::Image,
        kept: &mut Vec<Preserved>,
        records: &mut Vec<Record>,
    ) -> Result<()> {
        let nodes = if actual.kind == Some(crate::undo::FileKind::Dir) {
            self.ws.observe_tree(&actual.path, &|_| false)?
        } else {
            vec![actual]
        };
        for node in nodes {
            if kept.iter().any(|k| k.path == node.path) {
                continue;
            }
            let Some(digest) = self.ws.keep(&node.path, self.blobs)? else {
                continue;
            };
            let kind = node.kind.unwrap_or(crate::undo::FileKind::File);
            records.push(Record::Preserved {
                step,
                path: node.path.clone(),
                kind,
                mode: node.mode.clone(),
                digest: digest.clone(),
            });
            kept.push(Preserved {
                path: node.path,
                kind,
                mode: node.mode,
                digest,
            });
        }
        Ok(())
    }

    /// Run one step's inverse and record `undone`.
    fn run_inverse(
        &mut self,
        i: u64,
        by: &str,
        crash_point: &str,
    ) -> Result<std::result::Result<(), Failed>> {
        let s = self.state().steps[i as usize].clone();
        // A Python inverse this process does not hold is not a failed undo: nothing is
        // recorded and the caller gets `tool-unavailable`. Live verbs refused earlier
        // (before anything ran); here it is a repair finishing a crashed rewind, which stays
        // pending (reads show it) until a process with the function attaches.
        self.view().check_inverse_tools(&[i])?;
        if unwind::needs_fence(&s) && self.journaled() {
            self.append(Record::ReplayFence { step: i }, true)?;
        }
        let outcome: Result<()> = match (&s.kind, s.undo()) {
            (StepKind::Provision, _) => Ok(()),
            (StepKind::Effect, Some(Undo::Restore { entries })) => {
                self.ws.restore(entries, self.blobs, i)
            }
            _ => self.view().run_tool_inverse(&s, self.ws),
        };
        self.fp.point(crash_point);
        match outcome {
            Ok(()) if !self.journaled() => Ok(Ok(())),
            Ok(()) => {
                self.append(
                    Record::Undone {
                        step: i,
                        by: by.into(),
                    },
                    false,
                )?;
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(Failed {
                error: e.message,
                index: i,
                label: s.label().into(),
                outcome: Outcome::Failed,
            })),
        }
    }

    /// The rewind of a fork over the tail above `k` (live, or finished at repair).
    pub(crate) fn fork(
        &mut self,
        k: Pos,
        ctx: Context,
        crash: &str,
        drift: DriftPolicy,
    ) -> Result<Unwound> {
        let tail = (k.first_above()..self.state().next_index()).rev();
        let plan = unwind::plan(&self.state().steps, tail, Mode::Scoped, ctx);
        let mut done = self.execute(&plan, crate::step::BY_FORK, crash)?;
        self.beyond_tail(k, &plan, drift, &mut done)?;
        Ok(done)
    }

    /// The last part of every rewind to `k`: drift beyond the tail restored (or kept).
    pub(crate) fn beyond_tail(
        &mut self,
        k: Pos,
        plan: &Plan,
        drift: DriftPolicy,
        done: &mut Unwound,
    ) -> Result<()> {
        let (beyond, kept, images) = self.restore_beyond_tail(k, plan, drift.keeps())?;
        done.beyond = beyond;
        done.preserved.extend(kept);
        done.kept_images = images;
        Ok(())
    }
}

impl Session {
    /// THE executor on this session's own workspace: what runs is journaled here.
    pub(crate) fn rewind(&mut self) -> Rewind<'_> {
        Rewind {
            rec: Rec::Own(&mut self.journal),
            id: &self.id,
            store: &self.store,
            blobs: &self.blobs,
            fp: &self.fp,
            ws: &self.ws,
            index: Some(self.store.stat_index(&self.id)),
            layered: None,
            expected: None,
        }
    }

    /// Refuse before anything runs if an inverse cannot: a blob it needs is gone
    /// (`missing-preimage`), or it is a Python function this process does not hold
    /// (`tool-unavailable`).
    pub(crate) fn check_preimages(&self, run: &[u64]) -> Result<()> {
        self.check_inverse_tools(run)?;
        for &i in run {
            let s = &self.journal.state.steps[i as usize];
            let Some(Undo::Restore { entries }) = s.undo() else {
                continue;
            };
            for e in entries {
                for b in Workspace::blobs_needed(e, &self.blobs) {
                    self.blobs.check(&b, Some(i)).map_err(|err| {
                        Error::new(
                            Code::MissingPreimage,
                            format!("step {i} ({}): {}", s.label(), err.message),
                            err.hint.clone(),
                        )
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Drop held sends matching `which`; returns them (FIFO).
    pub(crate) fn drop_deferred(
        &mut self,
        which: impl Fn(&Deferred) -> bool,
        by: &str,
    ) -> Result<Vec<Deferred>> {
        let dropped: Vec<Deferred> = self
            .journal
            .state
            .queue
            .iter()
            .filter_map(|q| self.journal.state.deferred.get(q))
            .filter(|d| which(d))
            .cloned()
            .collect();
        if !dropped.is_empty() {
            self.append(
                Record::DeferredDropped {
                    seqs: dropped.iter().map(|d| d.seq).collect(),
                    by: by.into(),
                },
                false,
            )?;
        }
        Ok(dropped)
    }

    /// Which steps are undone now (to tell, after a failure, what a rewind had run).
    fn undone_set(&self) -> Vec<bool> {
        self.journal.state.steps.iter().map(|s| s.undone).collect()
    }

    /// A rewind that failed after its first record (a full disk, an I/O error): the error
    /// says what had run, and that the next command on the session finishes it; never that
    /// nothing happened.
    fn stopped_part_way(&self, e: Error, verb: &str, before: &[bool]) -> Error {
        let ran: Vec<String> = self
            .journal
            .state
            .steps
            .iter()
            .filter(|s| s.undone && !before.get(s.index as usize).copied().unwrap_or(false))
            .map(|s| s.index.to_string())
            .collect();
        let done = if ran.is_empty() {
            "no inverse had run yet".to_string()
        } else {
            format!("the inverses of step(s) {} had run", ran.join(", "))
        };
        let hint = format!(
            "{done}; the {verb} is recorded as begun, and the next command on this session finishes it (`revl status {}`), listing what it preserved{}",
            self.id,
            if e.disk_full() {
                "; free some disk space first"
            } else {
                ""
            }
        );
        Error::new(
            e.code,
            format!("the {verb} stopped part-way: {}", e.message),
            hint,
        )
    }

    /// The steps of the tail above `k`, newest first.
    pub(crate) fn tail_above(&self, k: Pos) -> impl Iterator<Item = u64> + use<> {
        (k.first_above()..self.journal.state.next_index()).rev()
    }

    // ---- step-back (docs/reference.md, "Step back") ----

    pub fn step_back(&mut self, to: i64, mode: StepBackMode) -> Result<StepBackReport> {
        self.step_back_with(to, mode, DriftPolicy::Restore)
    }

    /// `step-back` with a choice of what becomes of drift beyond the tail.
    pub fn step_back_with(
        &mut self,
        to: i64,
        mode: StepBackMode,
        drift: DriftPolicy,
    ) -> Result<StepBackReport> {
        let part = self.rewind_target(to, "step back to")?;
        let to = part.at;
        let turns_unwound = self.turns_after(to);
        if let StepBackMode::Compensating { force: false } = mode {
            let bare: Vec<String> = part
                .emissions_crossed
                .iter()
                .map(|&i| &self.journal.state.steps[i as usize])
                .filter(|s| s.kind == StepKind::Emission)
                .map(|s| format!("{} ({})", s.index, s.label()))
                .collect();
            if !bare.is_empty() {
                return Err(Error::new(
                    Code::Irreversible,
                    format!(
                        "the tail holds emissions with no compensation: {}",
                        bare.join(", ")
                    ),
                    "force the compensating step-back to run the other inverses anyway, or step back in scoped mode",
                ));
            }
        }
        let plan = unwind::plan(
            &self.journal.state.steps,
            self.tail_above(to),
            mode.unwind(),
            Context::Live,
        );
        self.check_preimages(&plan.runs())?;
        self.append(
            Record::StepBack {
                to,
                mode: mode.name().into(),
                keep_drift: drift.keeps(),
            },
            true,
        )?;
        let before = self.undone_set();
        let (done, dropped) = (|| {
            let mut done = self
                .rewind()
                .execute(&plan, BY_STEP_BACK, "step-back.mid-replay")?;
            self.rewind().beyond_tail(to, &plan, drift, &mut done)?;
            let dropped = self.drop_deferred(|d| !to.covers(d.after_step), BY_STEP_BACK)?;
            self.append(
                Record::StepBackDone {
                    to,
                    failed: done.failed.clone(),
                    owed: Vec::new(),
                },
                false,
            )?;
            self.sync()?;
            Ok((done, dropped))
        })()
        .map_err(|e| self.stopped_part_way(e, "step-back", &before))?;
        let steps = &self.journal.state.steps;
        let scoped = mode == StepBackMode::Scoped;
        Ok(StepBackReport {
            to,
            to_label: self.journal.state.label_at(to),
            turns_unwound,
            compensate: scoped.then_some(false),
            inverses_ran: crate::wire::ran_of(
                steps,
                &done.ran,
                &[StepKind::Effect],
                classify::rewound_entry,
            ),
            provisions_withdrawn: crate::wire::ran_of(
                steps,
                &done.ran,
                &[StepKind::Provision],
                classify::rewound_entry,
            ),
            compensations_ran: (!scoped).then(|| {
                crate::wire::ran_of(
                    steps,
                    &done.ran,
                    &[StepKind::Compensation],
                    classify::emission_entry,
                )
            }),
            emissions_crossed: classify::entries(
                steps,
                &part.emissions_crossed,
                classify::emission_entry,
            ),
            emissions_compensated: classify::entries(
                steps,
                &part.emissions_compensated,
                classify::emission_entry,
            ),
            would_cross_on_rewind: scoped.then(|| {
                classify::entries(
                    steps,
                    &part.would_cross_on_rewind,
                    classify::would_cross_entry,
                )
            }),
            unrestored: classify::entries(steps, &part.unrestored, classify::unrestored_entry),
            failed: done.failed,
            preserved: done.preserved,
            beyond_tail: done.beyond,
            dropped_deferred: dropped,
            live: true,
            guarantee: GUARANTEE,
        })
    }

    /// Finish a step-back a crash interrupted (docs/architecture.md, "Attach and repair"):
    /// its host-confined inverses not yet `undone` run; a fenced one is `failed` (outcome
    /// unknown, never re-run); in `compensating` mode the crossing inverses not yet run are
    /// `owed`.
    pub(crate) fn finish_step_back(
        &mut self,
        to: Pos,
        mode: &str,
        drift: DriftPolicy,
    ) -> Result<Vec<Preserved>> {
        let head_then = self
            .journal
            .state
            .spans
            .last()
            .map(|s| s.1)
            .unwrap_or(self.journal.state.head());
        let mode = if mode == "compensating" {
            Mode::Compensating
        } else {
            Mode::Scoped
        };
        let tail = (to.first_above()..=head_then).rev();
        let plan = unwind::plan(&self.journal.state.steps, tail, mode, Context::Repair);
        let mut done = self.rewind().execute(&plan, BY_STEP_BACK, "repair.never")?;
        self.rewind().beyond_tail(to, &plan, drift, &mut done)?;
        let owed = self.owed_steps(&plan);
        self.drop_deferred(|d| !to.covers(d.after_step), BY_STEP_BACK)?;
        self.append(
            Record::StepBackDone {
                to,
                failed: done.failed,
                owed,
            },
            false,
        )?;
        self.sync()?;
        Ok(done.preserved)
    }

    fn owed_steps(&self, plan: &Plan) -> Vec<OwedStep> {
        plan.owed
            .iter()
            .map(|&i| OwedStep::of(&self.journal.state.steps[i as usize]))
            .collect()
    }

    // ---- abort (docs/reference.md, "Commit and abort") ----

    /// `abort`: drop the queue, run every remaining inverse newest first (effects and
    /// provisions, then compensations). On an aborted session with owed entries, run those.
    pub fn abort(&mut self) -> Result<AbortReport> {
        let owed_only = self.journal.state.life() == Life::Aborted
            && !self.journal.state.owed_steps().is_empty();
        if !owed_only {
            self.require_live()?;
        }
        let tail: Vec<u64> = if owed_only {
            self.journal
                .state
                .owed_steps()
                .iter()
                .map(|o| o.index)
                .collect()
        } else {
            self.tail_above(Pos::Start).collect()
        };
        let plan = unwind::plan(&self.journal.state.steps, tail, Mode::Abort, Context::Live);
        self.check_preimages(&plan.runs())?;
        if !owed_only {
            self.append(Record::AbortBegin {}, true)?;
        }
        let dropped = self.drop_deferred(|_| true, BY_ABORT)?;
        let done = self.rewind().execute(&plan, BY_ABORT, "abort.mid-replay")?;
        let (comps_ran, replayed): (Vec<u64>, Vec<u64>) =
            done.ran.iter().copied().partition(|&i| {
                self.journal.state.steps[i as usize].kind == StepKind::Compensation
            });
        self.append(
            Record::Aborted {
                replayed: replayed.clone(),
                compensations_ran: comps_ran.clone(),
                dropped_deferred: dropped.iter().map(|d| d.seq).collect(),
                failed: done.failed.clone(),
                owed: vec![],
            },
            false,
        )?;
        self.sync()?;
        // The session is over: no next exec will free what its last one replaced.
        let _ = crate::workspace::remove_any(&self.exec_spent());
        self.capture_base_at_close();
        let compensations_ran = comps_ran
            .iter()
            .map(|&i| crate::wire::CompensationRan {
                entry: classify::emission_entry(&self.journal.state.steps[i as usize]),
                outcome: "unconfirmable: a compensation is a second crossing; its effect out there cannot be checked from here".into(),
            })
            .collect();
        Ok(AbortReport {
            aborted: true,
            replayed,
            compensations_ran,
            dropped_deferred: dropped,
            failed: done.failed,
            preserved: done.preserved,
            removed: None,
        })
    }

    /// `abort --remove` of a parallel branch: refused before anything is aborted where the
    /// workspace is not the branch's own (a parallel fork did not make it); the branch is
    /// aborted (a branch aborted already is left as it is, nothing replayed), then its
    /// workspace is taken down and removed (`removed`). The one place the CLI and the
    /// Python package ask for it.
    pub fn abort_and_remove(&mut self) -> Result<AbortReport> {
        self.store.branch_workspace(&self.id)?;
        let settled = self.journal.state.life() == Life::Aborted
            && self.journal.state.owed_steps().is_empty();
        let mut r = if settled {
            AbortReport {
                aborted: true,
                replayed: Vec::new(),
                compensations_ran: Vec::new(),
                dropped_deferred: Vec::new(),
                failed: Vec::new(),
                preserved: Vec::new(),
                removed: None,
            }
        } else {
            self.abort()?
        };
        r.removed = Some(self.store.remove_branch_workspace(&self.id)?);
        Ok(r)
    }

    /// Finish an abort a crash interrupted (docs/architecture.md, "Attach and repair"): the
    /// queue is dropped, host-confined inverses finished, crossing ones listed `owed`;
    /// `aborted` is written. Never crosses.
    pub(crate) fn finish_abort(&mut self) -> Result<()> {
        let dropped = self.drop_deferred(|_| true, BY_RECOVER)?;
        let plan = unwind::plan(
            &self.journal.state.steps,
            self.tail_above(Pos::Start),
            Mode::Abort,
            Context::Repair,
        );
        let done = self.rewind().execute(&plan, BY_ABORT, "repair.never")?;
        let owed = self.owed_steps(&plan);
        self.append(
            Record::Aborted {
                replayed: done.ran,
                compensations_ran: vec![],
                dropped_deferred: dropped.iter().map(|d| d.seq).collect(),
                failed: done.failed,
                owed,
            },
            false,
        )?;
        self.sync()
    }
}
