//! Fork (docs/reference.md, "Fork: enumerate", "Fork: confirm"): enumerate with a hash,
//! confirm, scope-gated rewind, frozen parent, branch, and the repair of a fork interrupted
//! at any point. What the rewind runs is decided by [`crate::unwind::plan`]; every bucket
//! by `classify` (the one classifier).

use super::{DriftPolicy, Session, GUARANTEE};
use crate::classify::{self, Partition, Refusal};
use crate::drift::Drift;
use crate::error::{Code, Error, Remedy, Result};
use crate::layers::Made;
use crate::report::{ForkLineage, ForkReport, Residue, Rewound};
use crate::step::{Pos, StepKind, BY_FORK};
use crate::unwind::{Context, Failed};
use crate::util::{new_id, now_rfc3339, sha256_jcs};
use crate::wal::{read_wal, Record};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// What `begin_fork` settled: the branch id, the residue indices, where the parent's WAL
/// stood, the provisions at k.
struct Begun {
    branch: String,
    crossed: Vec<u64>,
    would_cross: Vec<u64>,
    wal_position: usize,
    provisions: std::collections::BTreeMap<String, String>,
}

/// A confirm that may go ahead (the partition, the drift, k), or the refusal of a stale hash.
type Confirmable = std::result::Result<(Partition, Vec<Drift>, Pos), Box<ForkReport>>;

/// The file that marks DIR as being made by the parallel fork to `branch`.
fn marker_name(branch: &str) -> String {
    format!(".revl-fork-{branch}.making")
}

/// Remove what a parallel fork to `branch` made at DIR (DIR itself if revl made it, else its
/// content), only where DIR still holds the fork's marker: a directory that is not the
/// fork's (made later by someone else, or never made) is left alone. A layered DIR is
/// unmounted and its upper layer removed (with the lower layer, if no branch uses it).
fn remove_made(store: &crate::store::Store, dir: &Path, existed: bool, branch: &str) {
    if let Ok(Some(_)) = store.layers().take_down(branch, !existed) {
        return;
    }
    if !dir.join(marker_name(branch)).exists() {
        return;
    }
    if existed {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let _ = crate::workspace::remove_any(&e.path());
            }
        }
    } else {
        let _ = crate::workspace::remove_any(dir);
    }
}

/// A branch inherits the step-k images of the drift its fork left in place
/// (`preserved.keptDrift`), so its `verify` reports that drift and its rewinds preserve it.
fn inherit(preserved: &mut Value, kept: &[crate::undo::Image]) {
    if !kept.is_empty() {
        preserved["keptDrift"] = crate::undo::to_value(&kept);
    }
}

/// The three axes a branch does not preserve, in this order (docs/reference.md, "Fork: confirm").
pub fn not_preserved() -> Vec<crate::wire::Axis> {
    use crate::wire::Axis;
    vec![
        Axis { axis: "providerVersions", why: "revl records no model-provider or runtime version per step, so a branch cannot pin the versions the parent ran with" },
        Axis { axis: "seedsAndClock", why: "records carry wall-clock times for audit only; the agent's own random seeds and clock are not captured, so a branch is a divergent continuation, not a bit-exact replay" },
        Axis { axis: "modelDecisions", why: "the branch's WAL does not copy the parent's model-decision records, and no prompt or response is ever recorded" },
    ]
}

/// `warning_emissions` for a partition: what of the tail is out in the world after the
/// fork, each kind in its own words. An emission crossed; an effect whose undo would cross
/// changed something outside and stays done; a declared compensation never fired (it is a
/// promise of a second crossing, not a crossing).
fn warning_emissions(p: &Partition, steps: &[crate::step::Step]) -> String {
    let crossed = p.crossed();
    let (mut comps, mut effects): (Vec<u64>, Vec<u64>) =
        p.would_cross_on_rewind.iter().partition(|&&i| {
            steps
                .get(i as usize)
                .is_some_and(|s| s.kind == StepKind::Compensation)
        });
    comps.sort_unstable();
    effects.sort_unstable();
    let mut parts = Vec::new();
    if !crossed.is_empty() {
        parts.push(format!(
            "{} emission(s) crossed and stay out in the world after the fork: {crossed:?}",
            crossed.len()
        ));
    }
    if !effects.is_empty() {
        parts.push(format!(
            "{} step(s) changed something outside the machine and stay done (their undo would cross, so it is not fired): {effects:?}",
            effects.len()
        ));
    }
    if !comps.is_empty() {
        parts.push(format!(
            "{} declared compensation(s) were not fired (firing one would cross again; it never ran): {comps:?}",
            comps.len()
        ));
    }
    if parts.is_empty() {
        "nothing from this tail is out in the world: no emission crossed and no step with a crossing undo stays done".to_string()
    } else {
        parts.join("; ")
    }
}

/// What a fork enumeration says in place of a guarantee: nothing has run yet.
pub const NOT_YET: &str = "Nothing has run yet: this report enumerates what a confirm would do. After a confirm, revl claims only that the listed host-confined inverses ran, newest first, restoring the recorded preimage bytes, modes and kinds of file effects; nothing about anything outside the workspace.";

/// What each kind of fork does with the parent's held sends (an enumeration serves both).
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct HeldSendsByMode {
    /// `fork-confirm` without `--into`: the parent's whole queue is dropped (never sent).
    pub serial: String,
    /// `fork-confirm --into DIR`: the parent keeps its queue; the branch starts with none.
    pub parallel: String,
}

fn held_sends_by_mode(queue: &[u64]) -> HeldSendsByMode {
    if queue.is_empty() {
        return HeldSendsByMode {
            serial: "no held sends: nothing is dropped".into(),
            parallel: "no held sends: the parent's queue stays empty".into(),
        };
    }
    HeldSendsByMode {
        serial: format!(
            "a serial fork drops the parent's held sends (send seq {queue:?}): they never cross"
        ),
        parallel: format!(
            "a parallel fork (--into DIR) keeps the held sends (send seq {queue:?}) in the parent's queue (they fire if the parent commits); the branch starts with none"
        ),
    }
}

impl Session {
    /// The checks of docs/reference.md, "Fork: enumerate", in order; returns the partition
    /// of the tail above k. The refusals are [`classify::fork_refusals`], the same function
    /// the offline reader uses.
    fn fork_checks(&self, k: i64) -> Result<Partition> {
        self.require_live()?;
        let k = self.check_range(k)?;
        let p = classify::partition(&self.journal.state.steps, k);
        if let Some(r) = classify::fork_refusals(&self.journal.state, k, &p)
            .into_iter()
            .next()
        {
            return Err(self.refusal_error(k, r));
        }
        self.check_preimages(&p.inverses_ran)?;
        Ok(p)
    }

    /// A fork refusal as the live fork's error (docs/reference.md, "Fork: enumerate").
    fn refusal_error(&self, k: Pos, r: Refusal) -> Error {
        let labels = |idx: &[u64]| -> String {
            idx.iter()
                .map(|&i| format!("{i} {}", self.journal.state.steps[i as usize].label()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match r {
            Refusal::NotLive(_) | Refusal::CommittedBoundary => match self.require_live() {
                Err(e) => e,
                Ok(()) => Error::new(
                    Code::NotLive,
                    format!("session {} stands behind a committed boundary", self.id),
                    "start a new session",
                )
                .with_remedy(Remedy::NewSession),
            },
            Refusal::Undone(why) => Error::new(
                Code::Undone,
                format!("cannot fork at {k}: {why}"),
                "pick a live step from the timeline",
            )
            .with_remedy(Remedy::Timeline),
            Refusal::OpaqueTail(idx) => Error::new(
                Code::KindOpaque,
                format!(
                    "KIND_OPAQUE: the tail above step {k} holds steps nothing can restore: {}",
                    labels(&idx)
                ),
                "fork at or after the last opaque step, or abort the session",
            ),
            Refusal::NonIdempotentSpan(idx) => Error::new(
                Code::NonIdempotent,
                format!("non-idempotent: the rewind would run inverses declared undo_idempotent = false: {}", labels(&idx)),
                "fork at a later step, or step back in compensating mode, which fences them",
            ),
        }
    }

    /// The hash of docs/reference.md, "Fork: enumerate"; with drift, also each drifted path
    /// and what it shows now, so new drift after the enumeration makes the hash stale.
    fn fork_hash(&self, p: &Partition, drift: &[Drift]) -> String {
        let mut doc = json!({
            "session": self.id, "at": p.at, "head": self.journal.state.head(),
            "buckets": p.buckets_json(), "droppedDeferred": self.journal.state.queue,
        });
        if !drift.is_empty() {
            doc["drift"] = drift
                .iter()
                .map(|d| json!({"path": d.path, "actual": crate::undo::to_value(&d.actual)}))
                .collect();
        }
        sha256_jcs(&doc)
    }

    /// The drift the fork's rewind to `p.at` meets (nothing changes): what its inverses
    /// would run over, then every other witnessed path that is not at its step-k image.
    fn fork_drift(&self, p: &Partition) -> Result<Vec<Drift>> {
        let plan = crate::unwind::plan(
            &self.journal.state.steps,
            self.tail_above(p.at),
            crate::unwind::Mode::Scoped,
            Context::Live,
        );
        let steps = &self.journal.state.steps;
        let exp = self.expected();
        let scan = crate::statindex::Scan::of(&self.ws, Some(&self.store.stat_index(&self.id)));
        let mut drift = crate::drift::of_plan_from(&exp, steps, &plan, scan.ws(), &self.blobs)?;
        for d in crate::drift::beyond_plan_from(&exp, steps, &plan, scan.ws(), &self.blobs)? {
            if !drift.iter().any(|x| x.path == d.path) {
                drift.push(d);
            }
        }
        scan.done();
        Ok(drift)
    }

    /// The fork report without its hash. `ran` = what actually ran (after a confirm).
    fn fork_report(
        &self,
        p: &Partition,
        ran: Option<&[u64]>,
        failed: &[Failed],
        drift: Vec<Drift>,
    ) -> ForkReport {
        let steps = &self.journal.state.steps;
        let rewind_list: Vec<u64> = match ran {
            Some(r) => r.to_vec(),
            None => p
                .inverses_ran
                .iter()
                .chain(&p.provisions_withdrawn)
                .copied()
                .collect(),
        };
        let of_kind = |k: StepKind| -> Vec<crate::wire::RewoundEntry> {
            let mut idx: Vec<u64> = rewind_list
                .iter()
                .copied()
                .filter(|&i| steps[i as usize].kind == k)
                .collect();
            idx.sort_unstable_by(|a, b| b.cmp(a));
            classify::entries(steps, &idx, classify::rewound_entry)
        };
        ForkReport {
            forked: false,
            at: p.at,
            at_label: self.journal.state.label_at(p.at),
            parent: self.id.clone(),
            rewound: Rewound {
                inverses_ran: of_kind(StepKind::Effect),
                provisions_withdrawn: of_kind(StepKind::Provision),
            },
            dropped_deferred: self.journal.state.held_sends(),
            emissions_crossed: classify::entries(
                steps,
                &p.emissions_crossed,
                classify::emission_entry,
            ),
            emissions_compensated: classify::entries(
                steps,
                &p.emissions_compensated,
                classify::emission_entry,
            ),
            would_cross_on_rewind: classify::entries(
                steps,
                &p.would_cross_on_rewind,
                classify::would_cross_entry,
            ),
            unrestored: classify::entries(steps, &p.unrestored, classify::unrestored_entry),
            drift,
            preserved: None,
            beyond_tail: Vec::new(),
            residue: Residue::of_partition(p, failed),
            warning_emissions: warning_emissions(p, steps),
            held_sends_by_mode: Some(held_sends_by_mode(&self.journal.state.queue)),
            guarantee: NOT_YET,
            hash: None,
            refused: None,
            reason: None,
            branch: None,
            lineage: None,
            failed: None,
            parallel: None,
        }
    }

    /// `fork --at K`: enumerate; changes nothing in the workspace; records `fork-pending`.
    pub fn fork(&mut self, k: i64) -> Result<ForkReport> {
        let p = self.fork_checks(k)?;
        let k = p.at;
        let drift = self.fork_drift(&p)?;
        let hash = self.fork_hash(&p, &drift);
        let mut report = self.fork_report(&p, None, &[], drift);
        report.hash = Some(hash.clone());
        self.append(
            Record::ForkPending {
                at: k,
                hash: Some(hash),
            },
            true,
        )?;
        Ok(report)
    }

    /// `fork --at K` without recording `fork-pending`: the same checks and the same report
    /// (with its hash), and nothing written, so a front end can apply its own policy to the
    /// report (`on_crossed`, docs/langgraph.md) before it asks for the fork. A later `fork(k)`
    /// records the pending fork whose hash `fork_confirm` checks.
    pub fn fork_preview(&mut self, k: i64) -> Result<ForkReport> {
        let p = self.fork_checks(k)?;
        let drift = self.fork_drift(&p)?;
        let hash = self.fork_hash(&p, &drift);
        let mut report = self.fork_report(&p, None, &[], drift);
        report.hash = Some(hash);
        Ok(report)
    }

    /// The confirm's checks (docs/reference.md, "Fork: confirm"): a pending fork, the
    /// enumeration's checks again, and a hash that is both the pending one and a fresh
    /// enumeration's. `Err(report)` is the refusal of a stale hash (the pending fork is
    /// cleared).
    fn confirm_checks(&mut self, hash: &str) -> Result<Confirmable> {
        let pending = match &self.journal.state.fork_pending {
            Some((at, Some(h))) => Some((*at, h.clone())),
            _ => None,
        };
        let Some((k, _)) = pending else {
            self.require_live()?;
            return Err(Error::new(
                Code::NoPendingFork,
                format!("session {} has no pending fork", self.id),
                "enumerate the fork first, read the report, then confirm its hash",
            ));
        };
        super::require_full_hash(hash, "`fork`")?;
        let p = self.fork_checks(k.to_i64())?;
        let drift = self.fork_drift(&p)?;
        let fresh = self.fork_hash(&p, &drift);
        let pending_hash = self
            .journal
            .state
            .fork_pending
            .as_ref()
            .and_then(|f| f.1.clone())
            .unwrap_or_default();
        if hash != fresh || hash != pending_hash {
            let mut report = self.fork_report(&p, None, &[], drift);
            report.refused = Some(true);
            report.reason = Some("stale hash: the session changed since `fork` enumerated (or the hash is wrong); nothing was rewound; call `revl fork` again and read the new report".into());
            self.append(Record::ForkPending { at: k, hash: None }, true)?;
            return Ok(Err(Box::new(report)));
        }
        Ok(Ok((p, drift, k)))
    }

    /// `fork-confirm --hash H` (docs/reference.md, "Fork: confirm").
    pub fn fork_confirm(&mut self, hash: &str) -> Result<ForkReport> {
        self.fork_confirm_with(hash, None, DriftPolicy::Restore)
    }

    /// `fork-confirm --hash H [--into DIR] [--keep-drift]`: a serial fork, or with `into` a
    /// parallel one, with a choice of what becomes of drift beyond the rewound tail.
    pub fn fork_confirm_with(
        &mut self,
        hash: &str,
        into: Option<&Path>,
        drift: DriftPolicy,
    ) -> Result<ForkReport> {
        match into {
            Some(dir) => self.confirm_parallel(hash, dir, drift),
            None => self.confirm_serial(hash, drift),
        }
    }

    fn confirm_serial(&mut self, hash: &str, policy: DriftPolicy) -> Result<ForkReport> {
        let (p, drift, k) = match self.confirm_checks(hash)? {
            Ok(x) => x,
            Err(refused) => return Ok(*refused),
        };
        // 1. fork-begin, durable, before the rewind touches anything.
        let Begun {
            branch,
            crossed,
            would_cross,
            wal_position,
            provisions,
        } = self.begin_fork(k, &p, None, policy)?;
        // 2. the scoped rewind: host-confined inverses and provision withdrawals, newest first;
        // then every other witnessed path back at step k (or its drift kept, listed).
        let done = self
            .rewind()
            .fork(k, Context::Live, "fork.mid-rewind", policy)?;
        let (ran, failed, kept) = (done.ran, done.failed, done.preserved);
        let (beyond, kept_images) = (done.beyond, done.kept_images);
        self.sync()?;
        self.fp.point("fork.after-rewind");
        // 3. the whole queue is dropped: those sends never crossed.
        let dropped = self.drop_deferred(|_| true, BY_FORK)?;
        self.sync()?;
        // 4. the branch's WAL, complete or absent.
        let mut preserved = json!({
            "at": k,
            "workspace": self.journal.state.workspace,
            "manifestDigest": self.journal.state.manifest_digest,
            "capabilities": self.manifest()?.capabilities(),
            "walPosition": wal_position,
        });
        inherit(&mut preserved, &kept_images);
        let workspace = self.journal.state.workspace.clone();
        self.write_branch_wal(
            &branch,
            &workspace,
            k,
            preserved.clone(),
            crossed,
            would_cross,
            failed.clone(),
            &provisions,
        )?;
        self.fp.point("fork.after-branch");
        // 5. freeze the parent.
        self.append(
            Record::ForkFrozen {
                parent: self.id.clone(),
                branch: branch.clone(),
                at: k,
                failed: failed.clone(),
            },
            true,
        )?;
        self.fp.point("fork.after-frozen");
        self.append(
            Record::ForkComplete {
                branch: branch.clone(),
            },
            true,
        )?;
        let mut report = self.fork_report(&p, Some(&ran), &failed, drift);
        report.guarantee = GUARANTEE;
        report.held_sends_by_mode = None;
        report.preserved = Some(kept);
        report.beyond_tail = beyond;
        report.forked = true;
        report.dropped_deferred = dropped;
        report.branch = Some(branch);
        report.lineage = Some(ForkLineage {
            preserved,
            not_preserved: not_preserved(),
        });
        report.failed = Some(failed);
        Ok(report)
    }

    /// `fork-confirm --hash H --into DIR` (docs/user-guide.md §6): the branch gets DIR, a
    /// copy of the parent's workspace rewound to step k there; the parent stays live, its
    /// workspace, queue, approvals and head untouched.
    pub fn fork_confirm_into(&mut self, hash: &str, into: &Path) -> Result<ForkReport> {
        self.fork_confirm_with(hash, Some(into), DriftPolicy::Restore)
    }

    /// A parallel branch at step `k` in `into`, enumerated and confirmed in one call: for a
    /// front end that decides on the enumeration itself (`RevlSaver.branch`,
    /// docs/langgraph.md). The WAL gets what `fork` and then `fork-confirm --into` write
    /// (`fork-pending`, then the confirm's records). The workspace is scanned once: the
    /// confirm's checks are this call's enumeration. The session's lock is held from one to
    /// the other, so no record can come between them, and a hand edit of the workspace can
    /// come after the scan as it can after a confirm's own check. With `require_clean`, an
    /// enumeration whose residue is not clean is returned as it is (no `branch`): the fork
    /// stays pending, unconfirmed, as after `fork`, and nothing is made. Otherwise `into` is
    /// checked as the confirm checks it, then its missing parent directories are made.
    pub fn fork_branch(&mut self, k: i64, into: &Path, require_clean: bool) -> Result<ForkReport> {
        self.require_live()?;
        let p = self.fork_checks(k)?;
        let k = p.at;
        let drift = self.fork_drift(&p)?;
        let hash = self.fork_hash(&p, &drift);
        self.append(
            Record::ForkPending {
                at: k,
                hash: Some(hash.clone()),
            },
            true,
        )?;
        if require_clean {
            let mut report = self.fork_report(&p, None, &[], drift.clone());
            if !report.residue.clean {
                report.hash = Some(hash);
                return Ok(report);
            }
        }
        // Checked first (never inside or around a live workspace or the store), then its
        // missing parents made.
        let (dir, existed) = self.check_into(into)?;
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent.display(), e))?;
        }
        self.parallel_from(&dir, existed, p, drift, k, DriftPolicy::Restore)
    }

    fn confirm_parallel(
        &mut self,
        hash: &str,
        into: &Path,
        policy: DriftPolicy,
    ) -> Result<ForkReport> {
        self.require_live()?;
        let (dir, existed) = self.check_into(into)?;
        let (p, drift, k) = match self.confirm_checks(hash)? {
            Ok(x) => x,
            Err(refused) => return Ok(*refused),
        };
        self.parallel_from(&dir, existed, p, drift, k, policy)
    }

    /// The confirmed parallel fork, from its checked enumeration: fork-begin, DIR and the
    /// branch, fork-complete, the report.
    fn parallel_from(
        &mut self,
        dir: &Path,
        existed: bool,
        p: Partition,
        drift: Vec<Drift>,
        k: Pos,
        policy: DriftPolicy,
    ) -> Result<ForkReport> {
        // 1. fork-begin names DIR, durable, before anything is made there.
        let into = (dir.display().to_string(), !existed);
        let begun = self.begin_fork(k, &p, Some(into), policy)?;
        let branch = begun.branch.clone();
        // 2-4. DIR, then the branch. Anything failing on the way: what revl made in DIR is
        // removed and the fork abandoned (the parent was never touched).
        let made = self.make_parallel_branch(dir, k, begun, policy, &drift);
        let (made, into_str, preserved, done) = match made {
            Ok(x) => x,
            Err(e) => {
                remove_made(&self.store, dir, existed, &branch);
                self.append(
                    Record::ForkAbandoned {
                        at: k,
                        why: format!(
                            "the parallel fork failed while its branch was made: {}",
                            e.message
                        ),
                    },
                    true,
                )?;
                return Err(e);
            }
        };
        crate::util::remove_file_durable(&dir.join(marker_name(&branch)))
            .map_err(|e| Error::io(dir.display(), e))?;
        self.fp.point("fork.after-branch");
        // 5. the parent is not frozen.
        self.append(
            Record::ForkComplete {
                branch: branch.clone(),
            },
            true,
        )?;
        let mut report = self.fork_report(&p, Some(&done.ran), &done.failed, drift);
        report.guarantee = GUARANTEE;
        report.held_sends_by_mode = None;
        report.preserved = Some(done.preserved);
        report.beyond_tail = done.beyond;
        report.forked = true;
        report.dropped_deferred = Vec::new();
        report.branch = Some(branch);
        report.lineage = Some(ForkLineage {
            preserved,
            not_preserved: not_preserved(),
        });
        report.failed = Some(done.failed);
        report.parallel = Some(crate::report::Parallel::of(
            into_str,
            self.journal.state.queue.clone(),
            &made,
        ));
        Ok(report)
    }

    /// A parallel fork's DIR and branch: the marker that says revl is making DIR (repair
    /// removes DIR's content only where it finds it), the clone, THE executor's rewind run
    /// in DIR (nothing journaled here: the parent's steps are not undone), the branch's WAL.
    fn make_parallel_branch(
        &mut self,
        dir: &Path,
        k: Pos,
        m: Begun,
        policy: DriftPolicy,
        drift: &[Drift],
    ) -> Result<(Made, String, Value, crate::session::unwind::Unwound)> {
        let made = self.make_workspace(dir, &m, drift)?;
        let dir = std::fs::canonicalize(dir).map_err(|e| Error::io(dir.display(), e))?;
        let target = crate::workspace::Workspace::new(dir.clone(), self.fp.clone());
        // The branch's own workspace, through THE executor, with the parent read only and
        // what the enumeration built of what revl expects. A layered DIR shows its lower
        // layer's files: their digests are kept by stat with that layer, so a further
        // branch from the same point reads none of them again, and while DIR shows only
        // that layer the scan walks its tree, not the overlay.
        let layered = match &made {
            Made::Layers { lower, .. } => {
                let layers = self.store.layers();
                Some(super::unwind::LayeredDir {
                    tree: layers.tree(lower),
                    index: layers.stat_index(lower),
                    upper: layers.upper(&m.branch),
                })
            }
            _ => None,
        };
        let mut rewind =
            super::unwind::Rewind::copy(self.view(), &self.fp, &target, layered, self.expected());
        let done = rewind.fork(k, Context::Live, "fork.mid-rewind", policy)?;
        self.fp.point("fork.after-rewind");
        let into_str = dir.display().to_string();
        let mut preserved = json!({
            "at": k,
            "workspace": into_str,
            "manifestDigest": self.journal.state.manifest_digest,
            "capabilities": self.manifest()?.capabilities(),
            "walPosition": m.wal_position,
            "made": made.name(),
        });
        inherit(&mut preserved, &done.kept_images);
        self.write_branch_wal(
            &m.branch,
            &into_str,
            k,
            preserved.clone(),
            m.crossed,
            m.would_cross,
            done.failed.clone(),
            &m.provisions,
        )?;
        if let Made::Layers { .. } = made {
            self.store.layers().mark_forked(&m.branch)?;
        }
        Ok((made, into_str, preserved, done))
    }

    /// DIR, made the cheapest correct way (docs/architecture.md, "Layered workspaces"): a
    /// btrfs snapshot or reflinks where the filesystem shares blocks; else layers over the
    /// parent's workspace frozen at this point (made once, shared by every later branch
    /// from the same point); else, where no overlay can be mounted, a copy that says why.
    fn make_workspace(&self, dir: &Path, m: &Begun, drift: &[Drift]) -> Result<Made> {
        let marker = marker_name(&m.branch);
        let mut fallback = None;
        if !crate::clone::shares(self.ws.root(), dir) {
            if !crate::util::syncfs_persists(self.store.root()) {
                // The store on FUSE: the kernel's overlay does not take a FUSE upper layer
                // (and no syncfs reaches its server).
                fallback = Some(
                    "the store is on a FUSE filesystem, which cannot hold an overlay's upper layer"
                        .to_string(),
                );
            } else if let Some(copied) = self.store.copied() {
                // A remote session's fork runs in a scratch copy of its store, removed once
                // the branch moves out: nothing there would keep the layers.
                let why = "the fork runs in a scratch copy of a remote session's store, which is removed afterwards: layers need the store that keeps them";
                // Its workspace was made for this fork alone and goes with the scratch store:
                // moved into DIR, not copied and then removed.
                if copied.writable {
                    if let Some(made) = self.move_scratch_workspace(dir, &marker, why)? {
                        return Ok(made);
                    }
                }
                fallback = Some(why.to_string());
            } else {
                match self.make_layers(dir, m, drift, &marker)? {
                    Ok(made) => return Ok(made),
                    Err(why) => fallback = Some(why),
                }
            }
        }
        let c = crate::clone::clone_tree(self.ws.root(), dir, &self.fp, Some(&marker))?;
        Ok(match c.how {
            "snapshot" => Made::Snapshot,
            "reflink" => Made::Reflink,
            _ => Made::Copy {
                bytes_copied: c.bytes_copied,
                fallback,
            },
        })
    }

    /// The workspace of a session in a remote fork's scratch store, moved (renamed) to DIR
    /// when DIR does not exist and is on its filesystem: the fork's marker is made in it
    /// first (so it arrives with it, and a failed fork removes DIR as it removes a copy),
    /// and DIR is durable before the branch names it. `None`: it could not be moved (the
    /// caller copies); the scratch workspace is then as it was.
    fn move_scratch_workspace(&self, dir: &Path, marker: &str, why: &str) -> Result<Option<Made>> {
        let src = self.ws.root();
        if std::fs::symlink_metadata(dir).is_ok() {
            return Ok(None);
        }
        let mark = src.join(marker);
        std::fs::File::create(&mark)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(mark.display(), e))?;
        if std::fs::rename(src, dir).is_err() {
            let _ = std::fs::remove_file(&mark);
            return Ok(None);
        }
        self.fp.point("fork.mid-clone");
        crate::util::sync_tree(dir).map_err(|e| Error::io(dir.display(), e))?;
        Ok(Some(Made::Copy {
            bytes_copied: 0,
            fallback: Some(format!(
                "{why}; the workspace made for this fork was moved here whole (nothing copied)"
            )),
        }))
    }

    /// Layers at DIR: the lower layer of this point (reused, or frozen now), the branch's
    /// upper layer, the mount, the fork's marker. `Ok(Err(why))`: no overlay could be
    /// mounted here (nothing is left of the attempt; the caller copies).
    fn make_layers(
        &self,
        dir: &Path,
        m: &Begun,
        drift: &[Drift],
        marker: &str,
    ) -> Result<std::result::Result<Made, String>> {
        let layers = self.store.layers();
        let _lock = layers.lock()?;
        let end = self.journal.end();
        let point = crate::layers::Point {
            parent: self.id.clone(),
            records: m.wal_position,
            drift: sha256_jcs(&serde_json::to_value(drift).unwrap_or(Value::Null)),
            end: end.map(|(len, seq, records)| crate::layers::WalEnd { len, seq, records }),
        };
        let wal_path = self.store.wal_path(&self.id);
        let records = || read_wal(&wal_path).ok().map(|r| r.records);
        let mut wal = None;
        // The records written since a point's fork-begin, read from where the WAL ended then
        // (they must end where it ends now); `None` where that cannot be told so.
        let since = |p: &crate::layers::Point| -> Option<bool> {
            let (e, (_, _, now)) = (p.end?, end?);
            if e.records != p.records + 1 {
                return None;
            }
            let mut f = std::fs::File::open(&wal_path).ok()?;
            let from = crate::wal::WalMeta {
                torn: false,
                good_len: e.len,
                last_seq: e.seq,
                records: e.records,
            };
            let (recs, meta) = crate::wal::read_wal_after(&wal_path, &mut f, from).ok()?;
            (!meta.torn && meta.records == now).then(|| crate::layers::unchanged_since(&recs))
        };
        let reuse = layers.points_of(&self.id).into_iter().rev().find(|(_, p)| {
            if p.drift != point.drift || p.records > point.records {
                return false;
            }
            if let Some(unchanged) = since(p) {
                return unchanged;
            }
            let recs = wal.get_or_insert_with(records);
            recs.as_ref().is_some_and(|r| {
                point.records <= r.len()
                    && crate::layers::unchanged_since(&r[p.records..point.records])
            })
        });
        let (lower, shared, bytes_copied) = match reuse {
            Some((id, _)) => (id, true, 0),
            None => {
                // The copy comes with its digests, so DIR's scan reads none of its files
                // (docs/architecture.md, "Layered workspaces").
                let (id, bytes) = layers.freeze(self.ws.root(), &point)?;
                (id, false, bytes)
            }
        };
        let driver = match layers.mount_new(&m.branch, &lower, dir) {
            Ok(d) => d,
            Err(e) => {
                if !shared {
                    layers.collect_unused()?;
                }
                return Ok(Err(e.message));
            }
        };
        std::fs::File::create(dir.join(marker))
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(dir.display(), e))?;
        self.fp.point("fork.mid-clone");
        // The marker's entry is durable before the branch that names DIR (an fsync
        // reaches the upper layer; a tree sync of a FUSE mount would visit every file).
        std::fs::File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(dir.display(), e))?;
        Ok(Ok(Made::Layers {
            driver,
            lower,
            shared,
            bytes_copied,
        }))
    }

    /// The checks of DIR (docs/user-guide.md §6): absent or an empty directory, not inside
    /// or around the store or any live workspace (this session's included). Returns DIR
    /// resolved, and whether it existed.
    fn check_into(&self, into: &Path) -> Result<(PathBuf, bool)> {
        let dir = crate::store::resolve_future(into)?;
        let outside = |why: String| {
            Error::new(
                Code::PathOutside,
                why,
                "give a new directory, or an empty one, outside the store and every live workspace",
            )
        };
        let existed = match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {
                let empty = std::fs::read_dir(&dir)
                    .map_err(|e| Error::io(dir.display(), e))?
                    .next()
                    .is_none();
                if !empty {
                    return Err(outside(format!("{} is not empty", dir.display())));
                }
                true
            }
            Ok(_) => {
                return Err(outside(format!(
                    "{} exists and is not a directory",
                    dir.display()
                )))
            }
            Err(_) => false,
        };
        self.store.check_branch_dir(&dir)?;
        probe_into(&dir, existed)?;
        Ok((dir, existed))
    }

    /// Mint the branch id and write `fork-begin` (with DIR for a parallel fork), durably.
    fn begin_fork(
        &mut self,
        k: Pos,
        p: &Partition,
        into: Option<(String, bool)>,
        policy: DriftPolicy,
    ) -> Result<Begun> {
        let branch = new_id();
        let crossed = p.crossed();
        let mut would_cross = p.would_cross_on_rewind.clone();
        would_cross.sort_unstable();
        // The branch inherits the workspace at k with none of this WAL's redo bytes: every
        // in-place write is made durable in its file first.
        self.settle(true)?;
        let provisions = self.journal.state.provisions_at(k);
        let (into, into_created) = match into {
            Some((d, made)) => (Some(d), made),
            None => (None, false),
        };
        self.append(
            Record::ForkBegin {
                parent: self.id.clone(),
                branch: branch.clone(),
                at: k,
                crossed: crossed.clone(),
                would_cross: would_cross.clone(),
                into,
                into_created,
                keep_drift: policy.keeps(),
            },
            true,
        )?;
        self.fp.point("fork.after-begin");
        // The records before `fork-begin`, counted after it went out: a `files-synced` the
        // settle above queued went out first.
        let wal_position = self.record_count() - 1;
        Ok(Begun {
            branch,
            crossed,
            would_cross,
            wal_position,
            provisions,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn write_branch_wal(
        &self,
        branch: &str,
        workspace: &str,
        k: Pos,
        preserved: Value,
        crossed: Vec<u64>,
        would_cross: Vec<u64>,
        failed: Vec<Failed>,
        provisions: &std::collections::BTreeMap<String, String>,
    ) -> Result<()> {
        let dir = self.store.session_dir(branch);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(dir.display(), e))?;
        let ts = Some(now_rfc3339());
        let recs = vec![
            Record::Header {
                wal_version: crate::wal::WAL_VERSION,
                seq: 0,
                session: branch.into(),
                workspace: workspace.into(),
                manifest_digest: self.journal.state.manifest_digest.clone(),
                created_by: format!(
                    "revl {} (fork of {} at step {k})",
                    env!("CARGO_PKG_VERSION"),
                    self.id
                ),
                guarantee: GUARANTEE.into(),
                ts: ts.clone(),
            },
            Record::ForkBranch {
                branch: branch.into(),
                parent: self.id.clone(),
                at: k,
                // By reference, never by path (docs/wal-format.md, "Parents by id"): the
                // parent is found through whichever store holds the branch, wherever it is.
                parent_remote: self.store.copied().and_then(|c| c.remote.clone()),
                parent_wal: None,
                preserved,
                not_preserved: crate::undo::to_value(&not_preserved()),
                crossed,
                would_cross,
                failed,
                provisions: json!(provisions),
            },
            crate::session::hinge_record(1, ts.as_deref())?,
        ];
        crate::wal::create_journal(
            &*self.store.storage().journals,
            branch,
            &self.store.wal_path(branch),
            &recs,
            &self.fp,
        )?;
        std::fs::File::open(self.store.root().join("sessions"))
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io("sessions/", e))
    }

    /// Repair an interrupted fork in this (parent) WAL (docs/architecture.md, "Attach and
    /// repair"). Never crosses.
    pub(super) fn repair_fork(&mut self) -> Result<()> {
        let Some(begun) = self.journal.state.fork_begun.clone() else {
            return Ok(());
        };
        if self.journal.state.fork_complete {
            return Ok(());
        }
        if let Some((into, created)) = &begun.into {
            return self.repair_parallel_fork(&begun.branch, begun.at, Path::new(into), *created);
        }
        if self.journal.state.fork_frozen.is_some() {
            return self.append(
                Record::ForkComplete {
                    branch: begun.branch,
                },
                true,
            );
        }
        let branch_wal = self.store.wal_path(&begun.branch);
        let branch_read = read_wal(&branch_wal).ok().filter(|r| {
            r.records
                .iter()
                .any(|x| matches!(x, Record::ForkBranch { .. }))
        });
        if let Some(r) = branch_read {
            // The branch exists: roll forward.
            let failed = r
                .records
                .iter()
                .find_map(|x| match x {
                    Record::ForkBranch { failed, .. } => Some(failed.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            self.append(
                Record::ForkFrozen {
                    parent: self.id.clone(),
                    branch: begun.branch.clone(),
                    at: begun.at,
                    failed,
                },
                true,
            )?;
            return self.append(
                Record::ForkComplete {
                    branch: begun.branch,
                },
                true,
            );
        }
        // No branch: finish the rewind of the acknowledged span, drop the queue, abandon.
        let _ = std::fs::remove_file(self.store.session_dir(&begun.branch).join(".wal.jsonl.tmp"));
        let _ = std::fs::remove_dir(self.store.session_dir(&begun.branch));
        let failed = self
            .rewind()
            .fork(
                begun.at,
                Context::Repair,
                "repair.never",
                DriftPolicy::keeping(begun.keep_drift),
            )?
            .failed;
        self.drop_deferred(|_| true, BY_FORK)?;
        let why = if failed.is_empty() {
            "the fork died before its branch existed; its rewind was completed at repair and the session is live at the fork point".to_string()
        } else {
            format!("the fork died before its branch existed; its rewind was completed at repair, except {} inverse(s) whose outcome is unknown", failed.len())
        };
        self.append(Record::ForkAbandoned { at: begun.at, why }, true)
    }

    /// Repair an interrupted parallel fork: the branch's WAL exists → `fork-complete`; else
    /// what revl made in DIR is removed and the fork abandoned. The parent was never rewound:
    /// its workspace, queue and head are as they were.
    fn repair_parallel_fork(
        &mut self,
        branch: &str,
        at: Pos,
        into: &Path,
        created: bool,
    ) -> Result<()> {
        let exists = read_wal(&self.store.wal_path(branch)).is_ok_and(|r| {
            r.records
                .iter()
                .any(|x| matches!(x, Record::ForkBranch { .. }))
        });
        if exists {
            crate::util::remove_file_durable(&into.join(marker_name(branch)))
                .map_err(|e| Error::io(into.display(), e))?;
            return self.append(
                Record::ForkComplete {
                    branch: branch.into(),
                },
                true,
            );
        }
        let _ = std::fs::remove_file(self.store.session_dir(branch).join(".wal.jsonl.tmp"));
        let _ = std::fs::remove_dir(self.store.session_dir(branch));
        remove_made(&self.store, into, !created, branch);
        self.append(
            Record::ForkAbandoned {
                at,
                why: format!("the parallel fork died before its branch existed; what it made in {} was removed; the parent was never rewound", into.display()),
            },
            true,
        )
    }

    /// Before attaching to a branch, repair its parent's fork (either side repairs a fork).
    pub(super) fn repair_parent_fork(&self) -> Result<()> {
        let Some(origin) = &self.journal.state.origin else {
            return Ok(());
        };
        let parent = &origin.parent;
        // The parent's index entry says so where it still describes the parent's WAL: a
        // branch of a large session does not read the parent's whole WAL at every call.
        if crate::index::fork_unfinished(&self.store, parent) == Some(false) {
            return Ok(());
        }
        let Ok((st, _)) = crate::state::State::read(&self.store.wal_path(parent)) else {
            return Ok(());
        };
        if st.fork_unfinished() {
            drop(self.store.attach(parent)?);
        }
        Ok(())
    }
}

/// Can revl make the branch's workspace at `dir`? Tried before anything is recorded (a
/// directory that cannot be made must not cost the pending fork or leave a mark): an
/// existing DIR takes a new entry, an absent one can be created. What the probe made is
/// removed again.
fn probe_into(dir: &Path, existed: bool) -> Result<()> {
    let cannot = |e: std::io::Error| {
        Error::new(
            Code::BadArgs,
            format!(
                "cannot make the branch's workspace at {}: {e}",
                dir.display()
            ),
            "give a directory revl can create (its parent must exist and be writable), or an empty writable one; nothing was done and the pending fork stands",
        )
    };
    if existed {
        let probe = dir.join(format!(".revl-probe-{}", new_id()));
        std::fs::create_dir(&probe).map_err(cannot)?;
        let _ = std::fs::remove_dir(&probe);
        return Ok(());
    }
    // The directories the probe creates, outermost first, to remove them again.
    let mut made = Vec::new();
    let mut at = Some(dir);
    while let Some(p) = at {
        if std::fs::symlink_metadata(p).is_ok() {
            break;
        }
        made.push(p.to_path_buf());
        at = p.parent();
    }
    let r = std::fs::create_dir_all(dir);
    for p in &made {
        let _ = std::fs::remove_dir(p);
    }
    r.map_err(cannot)
}

impl crate::store::Store {
    /// The workspace of session `id` when a parallel fork made it (`fork-confirm --into`):
    /// `abort --remove` removes only such a directory. Refused (nothing done) for any other
    /// session: its workspace is the user's.
    pub fn branch_workspace(&self, id: &str) -> Result<PathBuf> {
        let (st, _) = crate::state::State::read(&self.wal_path(id))?;
        let made = st.origin.as_ref().is_some_and(|o| {
            o.preserved.get("made").is_some_and(Value::is_string)
                || crate::state::State::read(&self.wal_path(&o.parent))
                    .is_ok_and(|(p, _)| p.parallel_children.iter().any(|c| c.branch == id))
        });
        if !made {
            return Err(Error::new(
                Code::BadArgs,
                format!(
                    "session {id}'s workspace {} was not made by a parallel fork: --remove removes only a branch's own directory",
                    st.workspace
                ),
                "abort without --remove (the workspace is yours to keep or delete); nothing was done",
            ));
        }
        Ok(PathBuf::from(st.workspace))
    }

    /// `abort --remove`'s second half, after the abort: take the branch's workspace down
    /// (a layered one unmounted, its upper layer removed, lower layers no branch uses
    /// collected) and remove its directory.
    pub fn remove_branch_workspace(&self, id: &str) -> Result<crate::report::Removed> {
        let dir = self.branch_workspace(id)?;
        if let Some(t) = self.layers().take_down(id, true)? {
            return Ok(crate::report::Removed {
                dir: dir.display().to_string(),
                clone: "layers".into(),
                lowers_collected: t.lowers_collected,
            });
        }
        crate::workspace::remove_any(&dir)?;
        let (st, _) = crate::state::State::read(&self.wal_path(id))?;
        let clone = st
            .origin
            .as_ref()
            .and_then(|o| o.preserved.get("made")?.as_str().map(String::from))
            .unwrap_or_else(|| "copy".into());
        Ok(crate::report::Removed {
            dir: dir.display().to_string(),
            clone,
            lowers_collected: Vec::new(),
        })
    }

    /// A parallel branch's new workspace `dir` (resolved) must not overlap this store or
    /// the workspace of any of its live sessions (`path-outside`). A remote fork, made in a
    /// scratch store, asks the store it will live in too.
    pub fn check_branch_dir(&self, dir: &Path) -> Result<()> {
        let outside = |why: String| {
            Error::new(
                Code::PathOutside,
                why,
                "give a new directory, or an empty one, outside the store and every live workspace",
            )
        };
        let store = self.root();
        if store.starts_with(dir) || dir.starts_with(store) {
            return Err(outside(format!(
                "{} and the store {} overlap",
                dir.display(),
                store.display()
            )));
        }
        for (id, ws) in self.live_workspaces()? {
            let ws = Path::new(&ws);
            if ws.starts_with(dir) || dir.starts_with(ws) {
                return Err(outside(format!(
                    "{} and the workspace {} of live session {id} overlap",
                    dir.display(),
                    ws.display()
                )));
            }
        }
        Ok(())
    }
}
