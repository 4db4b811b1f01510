//! THE classifier. The fork report, `step-back` (both modes), the offline `branch --at` and
//! `recover` all decide "which bucket does this step fall in" and "may this inverse run in a
//! rewind" here, through the same functions over the same step data (docs/reference.md,
//! "Step kinds and buckets").

use crate::step::{host_confined, Pos, Step, StepKind};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// Where one step of a tail lands (docs/reference.md, "Step kinds and buckets": the last column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bucket {
    /// An effect whose inverse is host-confined: a rewind runs it.
    InversesRan,
    /// A provision: a rewind withdraws it (host-confined by construction).
    ProvisionsWithdrawn,
    /// An emission without a compensation, or a compensation that already ran.
    EmissionsCrossed,
    /// An emission that has a compensation step.
    EmissionsCompensated,
    /// An inverse that would cross if run: never run by a rewind.
    WouldCrossOnRewind,
    /// Nothing can restore it (opaque, unknown kinds, an effect with no inverse).
    Unrestored,
    /// Provably empty: boundary, hinge.
    Empty,
    /// Already undone: nothing left to restore, never run again.
    Spent,
}

/// May a *rewind* (fork, scoped step-back, repair) run this effect's inverse? Only when its
/// recorded scope passes the gate and, for a manifest effect, its undo tool's scope too.
pub fn inverse_is_host_confined(step: &Step) -> bool {
    host_confined(step.scope()) && (step.has_builtin_undo() || host_confined(step.undo_scope()))
}

/// The bucket of one step (docs/reference.md, "Step kinds and buckets").
pub fn bucket(step: &Step) -> Bucket {
    match step.kind {
        StepKind::Effect if step.undone => Bucket::Spent,
        StepKind::Effect if step.undo().is_none() => Bucket::Unrestored,
        StepKind::Effect if inverse_is_host_confined(step) => Bucket::InversesRan,
        StepKind::Effect => Bucket::WouldCrossOnRewind,
        StepKind::Provision if step.undone => Bucket::Spent,
        StepKind::Provision => Bucket::ProvisionsWithdrawn,
        StepKind::Emission if step.compensation.is_some() => Bucket::EmissionsCompensated,
        StepKind::Emission => Bucket::EmissionsCrossed,
        // A compensation that already ran is itself a crossing that happened.
        StepKind::Compensation if step.undone => Bucket::EmissionsCrossed,
        StepKind::Compensation => Bucket::WouldCrossOnRewind,
        StepKind::Boundary | StepKind::Hinge => Bucket::Empty,
        StepKind::Opaque | StepKind::Other(_) => Bucket::Unrestored,
    }
}

/// The partition of the tail above `at`, as indices, each list newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub at: Pos,
    pub inverses_ran: Vec<u64>,
    pub provisions_withdrawn: Vec<u64>,
    pub emissions_crossed: Vec<u64>,
    pub emissions_compensated: Vec<u64>,
    pub would_cross_on_rewind: Vec<u64>,
    pub unrestored: Vec<u64>,
}

impl Partition {
    /// Indices that make residue not clean, sorted ascending (`residue.outstanding`).
    pub fn outstanding(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .emissions_crossed
            .iter()
            .chain(&self.emissions_compensated)
            .chain(&self.would_cross_on_rewind)
            .chain(&self.unrestored)
            .copied()
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The emissions of the tail that are out in the world (crossed or compensated), sorted
    /// ascending: what a fork records as `crossed`.
    pub fn crossed(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .emissions_crossed
            .iter()
            .chain(&self.emissions_compensated)
            .copied()
            .collect();
        v.sort_unstable();
        v
    }

    /// The bucket lists as the fork hash and lineage documents name them.
    pub fn buckets_json(&self) -> Value {
        json!({
            "inversesRan": self.inverses_ran,
            "provisionsWithdrawn": self.provisions_withdrawn,
            "emissionsCrossed": self.emissions_crossed,
            "emissionsCompensated": self.emissions_compensated,
            "wouldCrossOnRewind": self.would_cross_on_rewind,
            "unrestored": self.unrestored,
        })
    }
}

/// Partition the tail above `at` (steps with index > at, newest first). `steps[i].index == i`.
pub fn partition(steps: &[Step], at: Pos) -> Partition {
    let mut p = Partition {
        at,
        inverses_ran: Vec::new(),
        provisions_withdrawn: Vec::new(),
        emissions_crossed: Vec::new(),
        emissions_compensated: Vec::new(),
        would_cross_on_rewind: Vec::new(),
        unrestored: Vec::new(),
    };
    for s in steps.iter().skip(at.first_above() as usize).rev() {
        let list = match bucket(s) {
            Bucket::InversesRan => &mut p.inverses_ran,
            Bucket::ProvisionsWithdrawn => &mut p.provisions_withdrawn,
            Bucket::EmissionsCrossed => &mut p.emissions_crossed,
            Bucket::EmissionsCompensated => &mut p.emissions_compensated,
            Bucket::WouldCrossOnRewind => &mut p.would_cross_on_rewind,
            Bucket::Unrestored => &mut p.unrestored,
            Bucket::Empty | Bucket::Spent => continue,
        };
        list.push(s.index);
    }
    p
}

/// Why the step at `k` cannot be a rewind target, if it cannot (docs/reference.md, "Step
/// back"): K must be -1 or a live step: not undone, and not inside a span an earlier unwind
/// stepped over.
pub fn k_not_live(steps: &[Step], spans: &[(Pos, u64)], k: Pos) -> Option<String> {
    let ku = k.step()?;
    if steps.get(ku as usize).is_some_and(|s| s.undone) {
        return Some(format!("step {k} was undone"));
    }
    for &(to, head) in spans {
        if to < k && ku <= head {
            return Some(format!(
                "step {k} lies in the span of steps {} to {head} that an earlier unwind to {to} stepped over",
                to.first_above()
            ));
        }
    }
    None
}

/// Why a fork at k is refused (docs/reference.md: "Fork: enumerate", checks 1-4; "branch",
/// findings). One function decides them for the live fork (which refuses with the first)
/// and the offline partition (which lists them all): [`fork_refusals`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Frozen, committed or aborted.
    NotLive(crate::state::Life),
    /// A `flushed` or `commit-approved` record: a send already committed.
    CommittedBoundary,
    /// K is not a live step (the why of [`k_not_live`]).
    Undone(String),
    /// The tail holds steps nothing can restore.
    OpaqueTail(Vec<u64>),
    /// The rewind would run inverses declared not idempotent.
    NonIdempotentSpan(Vec<u64>),
}

/// Every refusal of a fork at `k` (in range) over partition `p` of `state`, in the order
/// of docs/reference.md, "Fork: enumerate".
pub fn fork_refusals(state: &crate::state::State, k: Pos, p: &Partition) -> Vec<Refusal> {
    let mut out = Vec::new();
    let life = state.life();
    if life != crate::state::Life::Live {
        out.push(Refusal::NotLive(life));
    }
    if state.commit_approved.is_some() || !state.flushed.is_empty() {
        out.push(Refusal::CommittedBoundary);
    }
    if let Some(why) = k_not_live(&state.steps, &state.spans, k) {
        out.push(Refusal::Undone(why));
    }
    if !p.unrestored.is_empty() {
        out.push(Refusal::OpaqueTail(p.unrestored.clone()));
    }
    let non_idem: Vec<u64> = p
        .inverses_ran
        .iter()
        .copied()
        .filter(|&i| state.steps[i as usize].undo_idempotent == Some(false))
        .collect();
    if !non_idem.is_empty() {
        out.push(Refusal::NonIdempotentSpan(non_idem));
    }
    out
}

impl Refusal {
    /// The offline finding `{finding, why, steps?}` (docs/reference.md, "branch").
    pub fn finding(&self) -> crate::wire::Finding {
        let (finding, why, steps) = match self {
            Refusal::NotLive(crate::state::Life::Frozen { branch, .. }) => (
                "not-live",
                format!("the session is frozen: it continues as branch {branch}"),
                None,
            ),
            Refusal::NotLive(l) => ("not-live", format!("the session is {}", l.as_str()), None),
            Refusal::CommittedBoundary => (
                "committed-boundary",
                "a commit was approved or a held send was flushed: a fork cannot rewind past a send that already committed".to_string(),
                None,
            ),
            Refusal::Undone(why) => ("undone", why.to_string(), None),
            Refusal::OpaqueTail(steps) => (
                "opaque-tail",
                "the tail holds steps nothing can restore (KIND_OPAQUE)".to_string(),
                Some(steps.clone()),
            ),
            Refusal::NonIdempotentSpan(steps) => (
                "non-idempotent-span",
                "the rewind would run inverses declared undo_idempotent = false".to_string(),
                Some(steps.clone()),
            ),
        };
        crate::wire::Finding {
            finding,
            why,
            steps,
        }
    }
}

// ---- entry shapes, shared by every report (docs/reference.md, "Report entries and the
// guarantee") ----
//
// Each shape is one typed, borrowing struct: reports that are built once (fork, step-back)
// turn them into `Value`s with the `*_entry` functions; the offline partition of a long tail
// serialises them directly.

static NULL: Value = Value::Null;

fn detail<'a>(s: &'a Step, k: &str) -> &'a Value {
    s.detail().get(k).unwrap_or(&NULL)
}

/// rewound `{index, kind, label, site, scope}`
#[derive(Debug, Serialize)]
pub struct Rewound<'a> {
    pub index: u64,
    pub kind: &'a str,
    pub label: &'a str,
    pub site: &'a str,
    pub scope: &'a Value,
}

impl<'a> Rewound<'a> {
    pub fn of(s: &'a Step) -> Self {
        Rewound {
            index: s.index,
            kind: s.kind.as_str(),
            label: s.label(),
            site: s.site(),
            scope: s.scope().unwrap_or(&NULL),
        }
    }
}

/// The members of an emission's or compensation's `detail` that its entry shows, borrowed
/// from the recorded text (no tree is built: a long tail has hundreds of thousands). They
/// are written exactly as recorded (compact, even inside a pretty-printed document); a
/// member that is absent shows as `null`.
#[derive(Debug, Default, Deserialize)]
struct SendDetail<'a> {
    #[serde(borrow, default)]
    key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    service: Option<&'a RawValue>,
    #[serde(borrow, default)]
    args: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "for")]
    for_: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool: Option<&'a RawValue>,
    #[serde(borrow, default)]
    connections: Option<&'a RawValue>,
}

/// emission `{index, key, method, service, args, site, compensation?}`; a compensation that
/// already ran: `{index, kind: "compensation", label, for, tool, args, site}`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Emission<'a> {
    Emission {
        index: u64,
        key: Option<&'a RawValue>,
        method: Option<&'a RawValue>,
        service: Option<&'a RawValue>,
        args: Option<&'a RawValue>,
        site: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        compensation: Option<u64>,
        /// An exec's network emission (docs/user-guide.md §8): the connections it made.
        #[serde(skip_serializing_if = "Option::is_none")]
        connections: Option<&'a RawValue>,
    },
    CompensationRan {
        index: u64,
        kind: &'static str,
        label: &'a str,
        #[serde(rename = "for")]
        for_: Option<&'a RawValue>,
        tool: Option<&'a RawValue>,
        args: Option<&'a RawValue>,
        site: &'a str,
    },
}

impl<'a> Emission<'a> {
    pub fn of(s: &'a Step) -> Self {
        // A detail that is not an object has none of the members.
        let d: SendDetail<'a> = serde_json::from_str(s.text.detail_raw()).unwrap_or_default();
        if s.kind == StepKind::Compensation {
            return Emission::CompensationRan {
                index: s.index,
                kind: "compensation",
                label: s.label(),
                for_: d.for_,
                tool: d.tool,
                args: d.args,
                site: s.site(),
            };
        }
        Emission::Emission {
            index: s.index,
            key: d.key,
            method: d.method,
            service: d.service,
            args: d.args,
            site: s.site(),
            compensation: s.compensation,
            connections: d.connections,
        }
    }
}

/// would-cross `{index, kind, label, scope, site, for?}`, plus `why` in offline documents.
#[derive(Debug, Serialize)]
pub struct WouldCross<'a> {
    pub index: u64,
    pub kind: &'a str,
    pub label: &'a str,
    pub scope: &'a Value,
    pub site: &'a str,
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl<'a> WouldCross<'a> {
    pub fn of(s: &'a Step) -> Self {
        WouldCross {
            index: s.index,
            kind: s.kind.as_str(),
            label: s.label(),
            scope: s.scope().unwrap_or(&NULL),
            site: s.site(),
            for_: (s.kind == StepKind::Compensation).then(|| detail(s, "for")),
            why: None,
        }
    }

    pub fn with_why(s: &'a Step) -> Self {
        WouldCross {
            why: Some(would_cross_why(s)),
            ..Self::of(s)
        }
    }
}

/// unrestored `{index, kind, label, repr}`
#[derive(Debug, Serialize)]
pub struct Unrestored<'a> {
    pub index: u64,
    pub kind: &'a str,
    pub label: &'a str,
    pub repr: Value,
}

impl<'a> Unrestored<'a> {
    pub fn of(s: &'a Step) -> Self {
        let repr = s
            .detail()
            .get("repr")
            .cloned()
            .unwrap_or_else(|| Value::String(format!("{} step: no inverse", s.kind.as_str())));
        Unrestored {
            index: s.index,
            kind: s.kind.as_str(),
            label: s.label(),
            repr,
        }
    }
}

pub fn rewound_entry(s: &Step) -> crate::wire::RewoundEntry {
    crate::wire::RewoundEntry::of(s)
}

pub fn emission_entry(s: &Step) -> crate::wire::EmissionEntry {
    crate::wire::EmissionEntry::of(s)
}

pub fn would_cross_entry(s: &Step) -> crate::wire::WouldCrossEntry {
    crate::wire::WouldCrossEntry::of(s)
}

pub fn unrestored_entry(s: &Step) -> crate::wire::UnrestoredEntry {
    crate::wire::UnrestoredEntry::of(s)
}

/// Why a would-cross step is not offered as rewindable (offline reader, docs/reference.md,
/// "branch").
pub fn would_cross_why(s: &Step) -> String {
    if s.kind == StepKind::Compensation {
        return "a compensation is a second crossing: it always crosses".into();
    }
    if s.scope().is_none() {
        return "no scope was declared: an absent scope is never assumed host-confined".into();
    }
    if !host_confined(s.scope()) {
        return format!(
            "its scope {} is not provably host-confined",
            crate::util::jcs(s.scope().unwrap_or(&Value::Null))
        );
    }
    match s.undo_scope() {
        None => {
            "its undo tool declares no scope: an absent scope is never assumed host-confined".into()
        }
        Some(u) => format!(
            "its undo tool's scope {} is not provably host-confined",
            crate::util::jcs(u)
        ),
    }
}

/// Render a list of indices with an entry shape.
pub fn entries<'a, T>(steps: &'a [Step], idx: &[u64], f: impl Fn(&'a Step) -> T) -> Vec<T> {
    idx.iter().map(|&i| f(&steps[i as usize])).collect()
}
