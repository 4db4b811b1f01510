//! THE unwind engine's plan: the one place where a rewind decides what runs.
//!
//! Every way of walking a tail back — a fork's rewind, a scoped or compensating step-back,
//! an abort, `recover --force`, and the repair of each of them after a crash
//! (docs/architecture.md, "Attach and repair") — asks [`plan`] which inverses run, in which
//! order, which are owed and which have an unknown outcome. [`plan`] decides from the one
//! classifier ([`crate::classify::bucket`]) and two facts about the walk: its [`Mode`]
//! (which buckets it may run) and its [`Context`] (a repair never crosses). The session's
//! executor (`Session::execute_unwind`) then fences, runs, records `undone` and lists
//! failures, the same way for all of them.
//!
//! The rules, once:
//! - host-confined inverses (`inversesRan`) and provision withdrawals run in every mode;
//! - crossing inverses (`wouldCrossOnRewind`: outbound undos and compensations) run only in
//!   a compensating step-back or an abort, and never in a repair, which lists them `owed`;
//! - an abort runs effects and provisions newest first, then compensations newest first;
//! - a step whose inverse was fenced (`replay-fence`) and has no `undone` is never run again:
//!   its outcome is unknown and it is listed `failed`;
//! - an inverse is fenced before it runs when it is declared not idempotent or when it
//!   crosses ([`needs_fence`]), so a crash while it is in flight never makes it run twice.

use crate::classify::{bucket, Bucket};
use crate::step::{Step, StepKind};
use serde::{Deserialize, Serialize};

/// Which buckets a walk may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A fork's rewind and a scoped step-back: host-confined inverses and provision
    /// withdrawals only; nothing crosses.
    Scoped,
    /// A compensating step-back: every inverse newest first, crossing ones included.
    Compensating,
    /// An abort (and `recover --force`): effects and provisions newest first, then
    /// compensations newest first.
    Abort,
}

/// Who walks: a verb a caller asked for, or the repair of one a crash interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Live,
    /// Repair never crosses: a crossing inverse not yet run is owed, not run.
    Repair,
}

/// One decision of a plan, in the order the executor meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Run this step's inverse (fencing it first when [`needs_fence`]).
    Run(u64),
    /// Fenced earlier with no `undone`: its outcome is unknown; never run again.
    Unknown(u64),
}

/// What an unwind runs, what it leaves owed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// Crossing inverses a repair did not run, newest first.
    pub owed: Vec<u64>,
}

impl Plan {
    /// The steps whose inverses will run (for the missing-preimage check).
    pub fn runs(&self) -> Vec<u64> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::Run(i) => Some(*i),
                Action::Unknown(_) => None,
            })
            .collect()
    }
}

/// Plan an unwind over `tail` (step indices, newest first). `steps[i].index == i`.
pub fn plan(steps: &[Step], tail: impl IntoIterator<Item = u64>, mode: Mode, ctx: Context) -> Plan {
    let mut plan = Plan::default();
    let mut compensations = Vec::new();
    for i in tail {
        let Some(s) = steps.get(i as usize) else {
            continue;
        };
        let crossing = match bucket(s) {
            Bucket::InversesRan | Bucket::ProvisionsWithdrawn => false,
            Bucket::WouldCrossOnRewind if mode != Mode::Scoped => true,
            _ => continue,
        };
        let action = if s.fenced {
            Action::Unknown(i)
        } else if crossing && ctx == Context::Repair {
            plan.owed.push(i);
            continue;
        } else {
            Action::Run(i)
        };
        if mode == Mode::Abort && s.kind == StepKind::Compensation {
            compensations.push(action);
        } else {
            plan.actions.push(action);
        }
    }
    plan.actions.extend(compensations);
    plan
}

/// Is a `replay-fence` written before this step's inverse runs? When it is declared not
/// idempotent (running it twice could differ from once), or when it crosses
/// (docs/reference.md, "Step back": the one in flight at a crash is then `failed`, outcome
/// unknown, never owed or re-run).
pub fn needs_fence(s: &Step) -> bool {
    s.undo_idempotent == Some(false) || bucket(s) == Bucket::WouldCrossOnRewind
}

/// How an inverse that did not complete ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It ran and reported an error.
    Failed,
    /// A crash interrupted it after its fence: it may or may not have taken effect.
    Unknown,
}

/// A failed inverse `{index, label, error, outcome}` (docs/reference.md, "Report entries
/// and the guarantee"), as reports list it and the WAL records it (`step-back-done`,
/// `aborted`, `fork-frozen`, `fork-branch`). Fields are in the order the WAL has always
/// written them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Failed {
    pub error: String,
    pub index: u64,
    pub label: String,
    pub outcome: Outcome,
}

impl Failed {
    /// A fenced inverse without `undone`, met again after a crash.
    pub fn unknown(s: &Step) -> Self {
        Failed {
            error: "interrupted after its replay fence".into(),
            index: s.index,
            label: s.label().into(),
            outcome: Outcome::Unknown,
        }
    }
}

/// A crossing inverse a repair did not run `{index, kind, label, why}`: only an explicit
/// `abort` (or `recover --force`) runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OwedStep {
    pub index: u64,
    pub kind: String,
    pub label: String,
    pub why: String,
}

impl OwedStep {
    pub fn of(s: &Step) -> Self {
        OwedStep {
            index: s.index,
            kind: s.kind.as_str().into(),
            label: s.label().into(),
            why: "its inverse crosses: repair never crosses; an explicit `revl abort` runs it"
                .into(),
        }
    }
}

/// The indices of a list of failed inverses.
pub fn failed_indices(failed: &[Failed]) -> impl Iterator<Item = u64> + '_ {
    failed.iter().map(|f| f.index)
}
