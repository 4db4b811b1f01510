//! Typed verb results. Each verb that rewinds returns one of these; the CLI renders it by
//! field and prints its JSON, the MCP server returns its JSON. [`to_json`] writes object
//! keys sorted, as every revl document has always been written.

use crate::classify::Partition;
use crate::state::Deferred;
use crate::step::Pos;
use crate::unwind::{Failed, OwedStep};
use crate::wire::entry::{
    Axis, CompensationRan, EmissionEntry, RewoundEntry, ToolError, UnrestoredEntry, WouldCrossEntry,
};
use serde::Serialize;
use serde_json::Value;

/// A report as a JSON value (object keys sorted).
pub fn to_json<T: Serialize>(report: &T) -> Value {
    serde_json::to_value(report).expect("reports serialise")
}

/// `residue {clean, outstanding, proof}`: what an unwind left out in the world or
/// unrestored. The one builder: every report and lineage document makes it here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Residue {
    pub clean: bool,
    pub outstanding: Vec<u64>,
    pub proof: String,
}

impl Residue {
    /// Residue over `indices` plus the failed inverses (sorted, once); `proof` is given the
    /// outstanding list to describe it.
    pub fn new(
        indices: impl IntoIterator<Item = u64>,
        failed: &[Failed],
        proof: impl FnOnce(&[u64]) -> String,
    ) -> Self {
        let mut outstanding: Vec<u64> = indices.into_iter().collect();
        outstanding.extend(crate::unwind::failed_indices(failed));
        outstanding.sort_unstable();
        outstanding.dedup();
        Residue {
            clean: outstanding.is_empty(),
            proof: proof(&outstanding),
            outstanding,
        }
    }

    /// The residue of a rewind to `p.at` over partition `p` (fork reports, offline partition).
    pub fn of_partition(p: &Partition, failed: &[Failed]) -> Self {
        let crossed = p.emissions_crossed.len() + p.emissions_compensated.len();
        Residue::new(p.outstanding(), failed, |_| {
            format!(
                "{crossed} emission(s) crossed and cannot be undone; {} inverse(s) were enumerated but not fired because they would cross; {} step(s) could not be restored{}; only the host-confined state (workspace files under revl's witness) and provisions are claimed to be back at step {}.",
                p.would_cross_on_rewind.len(),
                p.unrestored.len(),
                if failed.is_empty() { String::new() } else { format!("; {} inverse(s) failed", failed.len()) },
                p.at
            )
        })
    }
}

/// `step-back` (docs/reference.md, "Step back"). Scoped reports carry `compensate: false` and
/// `wouldCrossOnRewind`; compensating ones `compensationsRan`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepBackReport {
    pub to: Pos,
    pub to_label: String,
    /// The agents' turns it went back over (their boundaries' labels, docs/agents.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub turns_unwound: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compensate: Option<bool>,
    pub inverses_ran: Vec<RewoundEntry>,
    pub provisions_withdrawn: Vec<RewoundEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compensations_ran: Option<Vec<EmissionEntry>>,
    pub emissions_crossed: Vec<EmissionEntry>,
    pub emissions_compensated: Vec<EmissionEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_cross_on_rewind: Option<Vec<WouldCrossEntry>>,
    pub unrestored: Vec<UnrestoredEntry>,
    pub failed: Vec<Failed>,
    /// Drifted content saved before the inverses ran over it.
    pub preserved: Vec<Preserved>,
    /// Witnessed paths the tail never touched that changed outside revl: restored to step
    /// k (preserved first) or, with `--keep-drift`, kept.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub beyond_tail: Vec<BeyondTail>,
    pub dropped_deferred: Vec<Deferred>,
    pub live: bool,
    pub guarantee: &'static str,
}

/// `abort` (docs/reference.md, "Commit and abort").
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbortReport {
    pub aborted: bool,
    pub replayed: Vec<u64>,
    /// Compensation entries, each with the `outcome` a second crossing has.
    pub compensations_ran: Vec<CompensationRan>,
    pub dropped_deferred: Vec<Deferred>,
    pub failed: Vec<Failed>,
    pub preserved: Vec<Preserved>,
    /// `abort --remove` of a parallel branch: its workspace, taken down and removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<Removed>,
}

/// What `abort --remove` removed: the branch's directory (`dir`), how it had been made
/// (`clone`), and the lower layers collected because no branch uses them any more.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Removed {
    pub dir: String,
    pub clone: String,
    pub lowers_collected: Vec<String>,
}

/// `rewound` of a fork report: what ran (after a confirm) or will run.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rewound {
    pub inverses_ran: Vec<RewoundEntry>,
    pub provisions_withdrawn: Vec<RewoundEntry>,
}

/// What a branch keeps and does not keep of its parent (`lineage` of a confirmed fork).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForkLineage {
    /// What the branch keeps of its parent, as the `fork-branch` record holds it.
    pub preserved: Value,
    pub not_preserved: Vec<Axis>,
}

/// `fork` and `fork-confirm` (docs/reference.md, "Fork: enumerate" and "Fork: confirm").
/// `hash` on an enumeration; `refused` and `reason` on a stale confirm; `branch`, `lineage`
/// and `failed` on a performed fork.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForkReport {
    pub forked: bool,
    pub at: Pos,
    pub at_label: String,
    pub parent: String,
    pub rewound: Rewound,
    pub dropped_deferred: Vec<Deferred>,
    pub emissions_crossed: Vec<EmissionEntry>,
    pub emissions_compensated: Vec<EmissionEntry>,
    pub would_cross_on_rewind: Vec<WouldCrossEntry>,
    pub unrestored: Vec<UnrestoredEntry>,
    /// Paths the rewind would run over that changed outside revl (enumeration: what it
    /// will preserve; the hash covers it).
    pub drift: Vec<crate::drift::Drift>,
    /// After a confirm: what the rewind preserved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserved: Option<Vec<Preserved>>,
    /// After a confirm: what the rewind did with drift on witnessed paths the tail never
    /// touched (see [`BeyondTail`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub beyond_tail: Vec<BeyondTail>,
    pub residue: Residue,
    #[serde(rename = "warning_emissions")]
    pub warning_emissions: String,
    /// On an enumeration: what a serial and a parallel confirm each do with the parent's
    /// held sends (`droppedDeferred` is the serial fork's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_sends_by_mode: Option<crate::session::HeldSendsByMode>,
    /// A performed fork: what the rewind claims. An enumeration: that nothing ran yet.
    pub guarantee: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lineage: Option<ForkLineage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<Vec<Failed>>,
    /// A parallel fork's own fields (docs/user-guide.md §6).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<Parallel>,
}

/// `{mode: "parallel", into, parentKeeps: {queue}, clone, bytesCopied, layers?, fallback?}`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Parallel {
    pub mode: &'static str,
    pub into: String,
    pub parent_keeps: ParentKeeps,
    /// How DIR was made: `"snapshot"` (a btrfs subvolume snapshot), `"reflink"`, `"layers"`
    /// (an overlay of a shared lower layer and the branch's own upper layer) or `"copy"`.
    pub clone: &'static str,
    pub bytes_copied: u64,
    /// With `clone: "layers"`: what mounts DIR and which lower layer it shares.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers: Option<LayersUsed>,
    /// With `clone: "copy"` where layers were tried: why they could not be mounted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// A layered branch workspace: `{driver, lower, sharedLower}`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LayersUsed {
    /// `"overlayfs"` (the kernel's) or `"fuse-overlayfs"`.
    pub driver: crate::layers::Driver,
    /// The lower layer's id (`<store>/layers/lower/<id>`).
    pub lower: String,
    /// True when an earlier branch from the same point made the lower layer: this fork
    /// copied nothing.
    pub shared_lower: bool,
}

impl Parallel {
    /// The report's fields for a DIR made as `made`.
    pub fn of(into: String, queue: Vec<u64>, made: &crate::layers::Made) -> Parallel {
        use crate::layers::Made;
        let (layers, fallback) = match made {
            Made::Layers {
                driver,
                lower,
                shared,
                ..
            } => (
                Some(LayersUsed {
                    driver: *driver,
                    lower: lower.clone(),
                    shared_lower: *shared,
                }),
                None,
            ),
            Made::Copy { fallback, .. } => (None, fallback.clone()),
            _ => (None, None),
        };
        Parallel {
            mode: "parallel",
            into,
            parent_keeps: ParentKeeps { queue },
            clone: made.name(),
            bytes_copied: made.bytes_copied(),
            layers,
            fallback,
        }
    }
}

/// What stays with the parent of a parallel fork: its held sends (seqs), FIFO.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ParentKeeps {
    pub queue: Vec<u64>,
}

/// The owed entries of `status` (docs/architecture.md, "Attach and repair"): crossing
/// inverses a repair did not run, and held sends whose outcome is unknown after a crash
/// during a commit.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Owed {
    Step(OwedStep),
    HeldSend {
        args: Value,
        kind: &'static str,
        method: String,
        seq: u64,
        service: String,
        tool: String,
        why: &'static str,
    },
}

impl Owed {
    /// The step index or the held send's seq.
    pub fn position(&self) -> u64 {
        match self {
            Owed::Step(o) => o.index,
            Owed::HeldSend { seq, .. } => *seq,
        }
    }
}

/// A verb that recorded one step (a file effect, `provide`, `boundary`): `{step, seq, label}`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Stepped {
    pub step: u64,
    pub seq: u64,
    pub label: String,
}

/// `exec` (docs/reference.md, "Effects"): the step it recorded and the command's outcome.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecReport {
    pub step: u64,
    /// `None` when a signal killed it.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// What a sandboxed exec adds (docs/user-guide.md, "Shell commands: `revl exec`");
    /// absent for `--unconfined` (v1's result).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub sandboxed: Option<Sandboxed>,
}

/// The fields of a sandboxed exec's result beyond v1's.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sandboxed {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Interrupted by the person at the terminal (Ctrl-C): revl stopped the command and
    /// recorded what it had changed by then as this step.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The limit that stopped the command, where revl can tell (`timeout`, `cpu`, `bytes`,
    /// `pids`; docs/security.md, "Limits").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<&'static str>,
    /// How `--pids` held where no pids cgroup could be made: `rlimit` or `none` (absent:
    /// a cgroup).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<&'static str>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub changes: Vec<crate::undo::ExecChange>,
    pub sandbox: bool,
    /// docs/user-guide.md §8: the emission step recording the connections the command made (the
    /// effect, `step`, follows it); absent when nothing was forwarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_step: Option<u64>,
    /// What the egress proxy forwarded and refused; absent when the exec asked for no
    /// network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net: Option<crate::egress::NetSummary>,
    /// What the command wrote on its note pipe (`ExecOptions::note`), bytes as written; not
    /// part of the document (a wrapper's message to the program that ran `exec`).
    #[serde(skip)]
    #[schemars(skip)]
    pub note: Option<Vec<u8>>,
}

/// `timeline` (docs/reference.md, "Reading a session").
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Timeline {
    pub session: String,
    pub state: &'static str,
    /// The last live step (after a step-back to k with nothing run since: k).
    pub head: Pos,
    pub torn: bool,
    pub steps: Vec<StepView>,
    pub accumulated: Vec<u64>,
    pub guarantee: &'static str,
    /// Read while another revl command held the session (the WAL as it was then).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
    /// The WAL is corrupt from this line on: the steps are those of the intact records
    /// before it (`{line, path, why}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrupt: Option<crate::wal::Corrupt>,
}

/// `inspect --at K` (docs/reference.md, "Reading a session").
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Inspect {
    pub at: Pos,
    pub at_label: String,
    pub active_provisions: std::collections::BTreeMap<String, String>,
    pub accumulated: Vec<u64>,
    pub ahead_of_here: Vec<u64>,
    pub emissions_so_far: Vec<u64>,
}

/// `status` (docs/reference.md, "Reading a session").
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub session: String,
    pub state: &'static str,
    pub workspace: String,
    pub wal: String,
    /// The last live step (after a step-back to k with nothing run since: k).
    pub head: Pos,
    pub torn: bool,
    /// Active now, the inherited base layer included.
    pub provisions: std::collections::BTreeMap<String, String>,
    /// Held sends, FIFO.
    pub queue: Vec<Deferred>,
    pub owed: Vec<Owed>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forked_at: Option<Pos>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frozen_at: Option<Pos>,
    /// Forks a crash interrupted and repair abandoned: no branch exists for them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub abandoned_forks: Vec<crate::state::ForkSeen>,
    /// Read while another revl command held the session (the WAL as it was then; an
    /// operation it runs is not finished yet).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
    /// An interrupted operation whose repair could not run yet (a full disk): why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair_pending: Option<String>,
    /// The WAL is corrupt from this line on: this is the state of the intact records
    /// before it (`{line, path, why}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrupt: Option<crate::wal::Corrupt>,
}

/// `verify` (docs/reference.md, "Reading a session").
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Verify {
    pub session: String,
    pub drift: Vec<crate::drift::Drift>,
    pub note: &'static str,
    /// Checked while another revl command held the session: a change it is making (not yet
    /// recorded) shows as drift until it is done.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
}

/// The witnessed steps a commit keeps.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Witnessed {
    pub count: usize,
    pub steps: Vec<u64>,
}

/// `commit` (docs/reference.md, "Commit and abort"): the plan; nothing fires.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CommitPlan {
    pub session: String,
    pub deferred: Vec<Deferred>,
    pub witnessed: Witnessed,
    pub hash: String,
}

/// A held send that failed at the flush `{seq, type, message}`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FlushFailure {
    pub seq: u64,
    #[serde(flatten)]
    pub error: ToolError,
}

/// `commit-confirm` (docs/reference.md, "Commit and abort"): committed, or refused over a
/// stale hash (nothing fired).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum CommitResult {
    #[serde(rename_all = "camelCase")]
    Committed {
        committed: bool,
        flushed: Vec<u64>,
        flush_residue: Vec<FlushFailure>,
        discharged: Vec<u64>,
    },
    Refused {
        committed: bool,
        refused: bool,
        reason: &'static str,
        plan: CommitPlan,
    },
}

/// A step as `timeline` shows it (docs/reference.md, "Step kinds and buckets"): its
/// recorded members, and what became of it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepView {
    pub index: u64,
    pub kind: String,
    pub label: String,
    pub site: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo_scope: Option<Value>,
    pub detail: Value,
    /// The inverse descriptor exactly as recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo_idempotent: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compensation: Option<u64>,
    /// A declared compensation that has not run (see [`crate::step::Step::armed`]): it
    /// fires only in a compensating rewind; nothing happened at this index.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub armed: bool,
    pub undone: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undone_by: Option<String>,
    /// Which operation rewound it, in words (a serial fork names its branch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewound_by: Option<String>,
    /// On an emission: stepped over by an unwind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crossed: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<String>,
}

impl StepView {
    pub fn of(s: &crate::step::Step) -> Self {
        StepView {
            index: s.index,
            kind: s.kind.as_str().into(),
            label: s.label().into(),
            site: s.site().into(),
            scope: s.scope().cloned(),
            undo_scope: s.undo_scope().cloned(),
            detail: s.detail().clone(),
            undo: s
                .text
                .undo_raw()
                .map(|u| serde_json::from_str(u).unwrap_or(Value::Null)),
            undo_idempotent: s.undo_idempotent,
            compensation: s.compensation,
            armed: s.armed(),
            undone: s.undone,
            undone_by: s.undone_by.clone(),
            rewound_by: None,
            crossed: (s.kind == crate::step::StepKind::Emission).then_some(s.crossed),
            ts: s.text.ts().map(str::to_string),
        }
    }
}

/// A witnessed path the rewound tail never touched that changed outside revl, and what the
/// rewind did with it: `restored` (its bytes preserved first, then put back to its step-k
/// image), `kept` (`--keep-drift`: left as it is; `verify` reports it), or `unrestored`
/// (its step-k bytes are kept nowhere revl can read; `why` says so; left as it is).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct BeyondTail {
    pub path: String,
    pub change: String,
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// Drifted content a rewind saved before an inverse ran over it (docs/architecture.md,
/// "Drift: what revl expects, exactly"): `{path, kind, mode?, digest}`; `revl blob DIGEST`
/// gives its bytes back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Preserved {
    pub path: String,
    pub kind: crate::undo::FileKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    pub digest: String,
}

/// `read PATH --at K` (docs/user-guide.md §3): the content PATH had right after step K ran.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadAt {
    pub path: String,
    pub at: Pos,
    pub mode: Option<String>,
    pub digest: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_base64: Option<String>,
}

/// `call TOOL` (docs/reference.md, "Effects" and "Approvals"): by the tool's class.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum CallResult {
    /// A class (b) held send: enqueued, nothing ran.
    #[serde(rename_all = "camelCase")]
    Queued {
        seq: u64,
        queued: bool,
        after_step: u64,
        note: &'static str,
    },
    /// A class (c) call without a usable approval: nothing fired (exit 1 / `isError`).
    #[serde(rename_all = "camelCase")]
    ApprovalRequired {
        approval_required: bool,
        ticket: String,
        tool: String,
        args_digest: String,
        hint: String,
    },
    /// A tool that ran and was recorded (effect, emission, opaque).
    #[serde(rename_all = "camelCase")]
    Ran {
        step: u64,
        seq: u64,
        label: String,
        /// An emission's idempotency key.
        #[serde(skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        exit_code: Option<i32>,
        stdout: String,
        stderr: String,
        witness: Value,
    },
}

impl CallResult {
    /// A tool that ran and was recorded as step `step`.
    pub fn ran(
        step: u64,
        seq: u64,
        label: String,
        key: Option<String>,
        run: crate::tools::ToolRun,
    ) -> Self {
        CallResult::Ran {
            step,
            seq,
            label,
            key,
            exit_code: run.exit_code,
            stdout: run.stdout,
            stderr: run.stderr,
            witness: run.witness,
        }
    }
}

/// `approve` (docs/reference.md, "Approvals"): the grant.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub approved: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_digest: Option<String>,
    pub tool: String,
    pub standing: bool,
    pub session: String,
}

/// `resend --seq S`: the send fired once more, and how it ended.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Resent {
    pub resent: bool,
    pub seq: u64,
    pub flushed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

/// `note-model` (docs/reference.md, "Model decisions"): what was recorded.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ModelNote {
    pub recorded: bool,
    pub step: u64,
    pub outcome: String,
    pub llm: Value,
}

/// `read PATH` (docs/reference.md, "Reading a session"): the file as it is now.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileRead {
    pub path: String,
    pub mode: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_base64: Option<String>,
}

/// One entry of `list`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ListEntry {
    pub name: String,
    pub kind: crate::undo::FileKind,
    pub mode: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// `list [PATH]` (docs/reference.md, "Reading a session").
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Listing {
    pub path: String,
    pub entries: Vec<ListEntry>,
}

/// One session of `sessions`: what its WAL says, or why it cannot be read.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum SessionEntry {
    Known {
        session: String,
        state: &'static str,
        workspace: String,
        head: Pos,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent: Option<String>,
        /// The WAL is corrupt from this line on: this is what its intact records say.
        #[serde(skip_serializing_if = "Option::is_none")]
        corrupt: Option<crate::wal::Corrupt>,
    },
    Unreadable {
        session: String,
        state: &'static str,
        error: crate::wire::entry::ErrorBody,
    },
}

/// `sessions` (docs/reference.md, "Reading a session").
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Sessions {
    pub sessions: Vec<SessionEntry>,
}
