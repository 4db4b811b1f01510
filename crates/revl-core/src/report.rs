//! Typed verb results. Each verb that rewinds returns one of these; the CLI renders it by
//! field and prints its JSON, the MCP server returns its JSON. [`to_json`] writes object
//! keys sorted, as every revl document has always been written.

use crate::classify::Partition;
use crate::state::Deferred;
use crate::step::Pos;
use crate::unwind::{Failed, OwedStep};
use serde::Serialize;
use serde_json::Value;

/// A report as a JSON value (object keys sorted).
pub fn to_json<T: Serialize>(report: &T) -> Value {
    serde_json::to_value(report).expect("reports serialise")
}

/// `residue {clean, outstanding, proof}`: what an unwind left out in the world or
/// unrestored. The one builder: every report and lineage document makes it here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
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

/// `step-back` (SPEC 4.3). Scoped reports carry `compensate: false` and
/// `wouldCrossOnRewind`; compensating ones `compensationsRan`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepBackReport {
    pub to: Pos,
    pub to_label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compensate: Option<bool>,
    pub inverses_ran: Vec<Value>,
    pub provisions_withdrawn: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compensations_ran: Option<Vec<Value>>,
    pub emissions_crossed: Vec<Value>,
    pub emissions_compensated: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_cross_on_rewind: Option<Vec<Value>>,
    pub unrestored: Vec<Value>,
    pub failed: Vec<Failed>,
    pub dropped_deferred: Vec<Deferred>,
    pub live: bool,
    pub guarantee: &'static str,
}

/// `abort` (SPEC 4.4).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AbortReport {
    pub aborted: bool,
    pub replayed: Vec<u64>,
    /// Compensation entries, each with the `outcome` a second crossing has.
    pub compensations_ran: Vec<Value>,
    pub dropped_deferred: Vec<Deferred>,
    pub failed: Vec<Failed>,
}

/// `rewound` of a fork report: what ran (after a confirm) or will run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rewound {
    pub inverses_ran: Vec<Value>,
    pub provisions_withdrawn: Vec<Value>,
}

/// What a branch keeps and does not keep of its parent (`lineage` of a confirmed fork).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkLineage {
    pub preserved: Value,
    pub not_preserved: Value,
}

/// `fork` and `fork-confirm` (SPEC 6.1, 6.2). `hash` on an enumeration; `refused` and
/// `reason` on a stale confirm; `branch`, `lineage` and `failed` on a performed fork.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkReport {
    pub forked: bool,
    pub at: Pos,
    pub at_label: String,
    pub parent: String,
    pub rewound: Rewound,
    pub dropped_deferred: Vec<Deferred>,
    pub emissions_crossed: Vec<Value>,
    pub emissions_compensated: Vec<Value>,
    pub would_cross_on_rewind: Vec<Value>,
    pub unrestored: Vec<Value>,
    pub residue: Residue,
    #[serde(rename = "warning_emissions")]
    pub warning_emissions: String,
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
}

/// The owed entries of `status` (SPEC 6.4): crossing inverses a repair did not run, and
/// held sends whose outcome is unknown after a crash during a commit.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
