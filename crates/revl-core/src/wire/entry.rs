//! The entries every report lists (docs/reference.md, "Report entries and the guarantee"),
//! owned: a report outlives the steps it names. The offline partition of a long tail
//! serialises the borrowed shapes of [`crate::classify`] instead (no copy per step); both
//! write the same members.

use crate::classify;
use crate::step::{Step, StepKind};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

/// A scope exactly as a tool (or revl, for its built-in effects) declared it: free JSON,
/// kept as recorded. What the scope gate reads of it is [`crate::step::ScopeClaim`].
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(transparent)]
pub struct Scope(pub Value);

impl Scope {
    /// The step's declared scope; `null` when none was declared.
    pub fn of(scope: Option<&Value>) -> Self {
        Scope(scope.cloned().unwrap_or(Value::Null))
    }
}

/// rewound `{index, kind, label, site, scope}`: an inverse that ran (or will run), or a
/// provision withdrawn.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RewoundEntry {
    pub index: u64,
    pub kind: String,
    pub label: String,
    pub site: String,
    pub scope: Scope,
}

impl RewoundEntry {
    pub fn of(s: &Step) -> Self {
        let r = classify::Rewound::of(s);
        RewoundEntry {
            index: r.index,
            kind: r.kind.into(),
            label: r.label.into(),
            site: r.site.into(),
            scope: Scope(r.scope.clone()),
        }
    }
}

/// The member a recorded detail holds, read as `T` (absent, or not a `T`: `None`, shown as
/// `null`).
fn member<T: serde::de::DeserializeOwned>(raw: Option<&serde_json::value::RawValue>) -> Option<T> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

/// A recorded detail member kept as recorded (`null` when absent).
fn free(raw: Option<&serde_json::value::RawValue>) -> Value {
    member(raw).unwrap_or(Value::Null)
}

/// An emission `{index, key, method, service, args, site, compensation?, connections?}`,
/// or a compensation that already ran `{index, kind: "compensation", label, for, tool,
/// args, site}`. `args` is the caller's tool arguments and `connections` an exec's
/// recorded connections, both kept as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum EmissionEntry {
    Emission {
        index: u64,
        key: Option<String>,
        method: Option<String>,
        service: Option<String>,
        args: Value,
        site: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        compensation: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        connections: Option<Value>,
    },
    CompensationRan {
        index: u64,
        kind: CompensationKind,
        label: String,
        #[serde(rename = "for")]
        for_: Option<u64>,
        tool: Option<String>,
        args: Value,
        site: String,
    },
}

/// The `kind` of a compensation entry: always `"compensation"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CompensationKind {
    Compensation,
}

impl EmissionEntry {
    pub fn of(s: &Step) -> Self {
        match classify::Emission::of(s) {
            classify::Emission::Emission {
                index,
                key,
                method,
                service,
                args,
                site,
                compensation,
                connections,
            } => EmissionEntry::Emission {
                index,
                key: member(key),
                method: member(method),
                service: member(service),
                args: free(args),
                site: site.into(),
                compensation,
                connections: connections.map(|c| free(Some(c))),
            },
            classify::Emission::CompensationRan {
                index,
                label,
                for_,
                tool,
                args,
                site,
                ..
            } => EmissionEntry::CompensationRan {
                index,
                kind: CompensationKind::Compensation,
                label: label.into(),
                for_: member(for_),
                tool: member(tool),
                args: free(args),
                site: site.into(),
            },
        }
    }
}

/// A compensation `abort` ran, and what can be said of its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CompensationRan {
    #[serde(flatten)]
    pub entry: EmissionEntry,
    pub outcome: String,
}

/// would-cross `{index, kind, label, scope, site, for?}`: an inverse a rewind never runs.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct WouldCrossEntry {
    pub index: u64,
    pub kind: String,
    pub label: String,
    pub scope: Scope,
    pub site: String,
    /// A compensation: the emission it compensates.
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_: Option<Value>,
}

impl WouldCrossEntry {
    pub fn of(s: &Step) -> Self {
        let w = classify::WouldCross::of(s);
        WouldCrossEntry {
            index: w.index,
            kind: w.kind.into(),
            label: w.label.into(),
            scope: Scope(w.scope.clone()),
            site: w.site.into(),
            for_: w.for_.cloned(),
        }
    }
}

/// unrestored `{index, kind, label, repr}`: nothing can restore it. `repr` is what the step
/// recorded of itself (a tool's or exec's description), kept as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct UnrestoredEntry {
    pub index: u64,
    pub kind: String,
    pub label: String,
    pub repr: Value,
}

impl UnrestoredEntry {
    pub fn of(s: &Step) -> Self {
        let u = classify::Unrestored::of(s);
        UnrestoredEntry {
            index: u.index,
            kind: u.kind.into(),
            label: u.label.into(),
            repr: u.repr,
        }
    }
}

/// Entries for the steps of `idx`, in that order.
pub fn entries<T>(steps: &[Step], idx: &[u64], f: impl Fn(&Step) -> T) -> Vec<T> {
    idx.iter().map(|&i| f(&steps[i as usize])).collect()
}

/// The steps of `ran` whose kind is one of `kinds`, as entries.
pub fn ran_of<T>(
    steps: &[Step],
    ran: &[u64],
    kinds: &[StepKind],
    f: impl Fn(&Step) -> T,
) -> Vec<T> {
    ran.iter()
        .map(|&i| &steps[i as usize])
        .filter(|s| kinds.contains(&s.kind))
        .map(f)
        .collect()
}

/// An axis a branch or a comparison does not carry, and why: `{axis, why}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Axis {
    pub axis: &'static str,
    pub why: &'static str,
}

/// A tool's failure as a report shows it: `{type, message}` (`exit`, `http`, `timeout`,
/// `connect`, `spawn`, `missing-tool`, `unconfirmed`, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ToolError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

impl ToolError {
    /// Read from the recorded `{type, message}` (a member that is not a string: empty).
    pub fn of(v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        ToolError {
            kind: s("type"),
            message: s("message"),
        }
    }
}

/// The body of an error document `{"error": {code, message, hint, step?}}`
/// (docs/reference.md, "Errors and exit codes").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ErrorBody {
    pub code: crate::error::Code,
    pub message: String,
    pub hint: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
}

/// An error document: `{"error": {code, message, hint, step?}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ErrorDoc {
    pub error: ErrorBody,
}

/// An emission of a comparison's tail, at its lineage position.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PositionedEmission {
    pub position: i64,
    #[serde(flatten)]
    pub entry: EmissionEntry,
}

/// A step of a comparison, at its lineage position: `{position, index, kind, label}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct BriefStep {
    pub position: i64,
    pub index: u64,
    pub kind: String,
    pub label: String,
}

/// Where two histories first differ: the position, and each side's step there (`None`:
/// that side's history ends before it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct FirstDifference {
    pub position: i64,
    pub left: Option<BriefStep>,
    pub right: Option<BriefStep>,
}

/// One thing for each side of a comparison: `{left, right}`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Sides<T> {
    pub left: T,
    pub right: T,
}

/// Why a fork at a step would be refused, or what a reader should know of the WAL:
/// `{finding, why, steps?}` (`not-live`, `committed-boundary`, `undone`, `opaque-tail`,
/// `non-idempotent-span`, `torn-tail`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Finding {
    pub finding: &'static str,
    pub why: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<u64>>,
}
