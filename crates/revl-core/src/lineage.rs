//! Offline readers (SPEC 7.2, 7.3): lineage, topology, partition and comparison of branches
//! from WAL files alone. They take no lock, repair nothing and run nothing. The partition
//! uses the same replay (`State`) and the same classifier as the live fork, so the two
//! agree by construction.

use crate::classify::{
    self, entries, partition, Emission, Partition, Rewound, Unrestored, WouldCross,
};
use crate::error::{Error, Result};
use crate::report::Residue;
use crate::state::State;
use crate::step::{Pos, Step, StepKind};
use crate::unwind::Failed;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub const SCHEMA_VERSION: &str = "1.0";

/// `revl.branch-partition` (SPEC 7.2).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionDoc<'a> {
    pub kind: &'static str,
    pub schema_version: &'static str,
    pub wal: String,
    pub session: &'a str,
    pub at: Pos,
    pub at_label: String,
    pub performed: bool,
    pub would_rewind: Vec<Rewound<'a>>,
    pub would_withdraw: Vec<Rewound<'a>>,
    pub emissions_crossed: Vec<Emission<'a>>,
    pub emissions_compensated: Vec<Emission<'a>>,
    pub would_cross_on_rewind: Vec<WouldCross<'a>>,
    pub unrestored: Vec<Unrestored<'a>>,
    pub findings: Vec<Value>,
    pub forkable: bool,
    pub residue: Residue,
    pub reader_note: &'static str,
}

/// Does an offline document report something that is not clean (exit 1, SPEC 7.2, 7.3)?
/// A lineage or partition with residue that is not clean, a topology with orphans or
/// dangling edges, two WALs that cannot be compared.
pub fn unclean(doc: &Value) -> bool {
    let nonempty = |k: &str| doc[k].as_array().is_some_and(|a| !a.is_empty());
    match doc["kind"].as_str() {
        Some("revl.branch-topology") => nonempty("orphans") || nonempty("dangling"),
        Some("revl.branch-compare") => doc["comparable"] != Value::Bool(true),
        _ => ["inheritedResidue", "residue"].iter().any(|k| {
            doc.get(*k)
                .is_some_and(|r| r["clean"] == Value::Bool(false))
        }),
    }
}

impl PartitionDoc<'_> {
    /// The same rule as [`unclean`], on the typed partition document.
    pub fn unclean(&self) -> bool {
        !self.residue.clean
    }
}

/// A WAL read for offline use: its replayed state and a few facts replay does not keep.
pub struct OfflineWal {
    pub path: PathBuf,
    pub state: State,
    pub torn: bool,
    /// A `flushed` or `commit-approved` record exists: a send committed.
    pub committed_boundary: bool,
}

pub fn open(path: &Path) -> Result<OfflineWal> {
    let (state, meta) = State::read(path)?;
    Ok(OfflineWal {
        path: path.to_path_buf(),
        committed_boundary: state.commit_approved.is_some() || !state.flushed.is_empty(),
        state,
        torn: meta.torn,
    })
}

/// The residue a fork left: the parent's crossed and would-cross indices, and its failed
/// inverses.
fn residue_of(indices: &[u64], failed: &[Failed], what: &str) -> Value {
    crate::report::to_json(&Residue::new(indices.iter().copied(), failed, |out| {
        if out.is_empty() {
            format!("{what}: no emission crossed, no inverse was left unfired and none failed")
        } else {
            format!("{what}: {} step(s) of the parent's history stay out in the world or unrestored (crossed emissions, inverses that would cross, failed inverses): {out:?}", out.len())
        }
    }))
}

impl OfflineWal {
    pub fn session(&self) -> &str {
        &self.state.session
    }

    pub fn role(&self) -> &'static str {
        let is_branch = self.state.origin.is_some();
        let is_parent = self.state.fork_frozen.is_some() || self.state.fork_begun.is_some();
        match (is_branch, is_parent) {
            (true, true) => "forked-branch",
            (true, false) => "branch",
            (false, true) => "forked-parent",
            (false, false) => "standalone",
        }
    }

    /// The parent's fork point, if this WAL is a branch.
    pub fn parent(&self) -> Option<(&str, Pos)> {
        self.state
            .origin
            .as_ref()
            .map(|o| (o.parent.as_str(), o.at))
    }

    /// The child this WAL forked into, and where.
    pub fn child(&self) -> Option<(String, Pos)> {
        if let Some(f) = &self.state.fork_frozen {
            return Some((f.branch.clone(), f.at));
        }
        self.state
            .fork_begun
            .as_ref()
            .map(|f| (f.branch.clone(), f.at))
    }

    /// The lineage document (`revl.branch-lineage`).
    pub fn lineage(&self) -> Value {
        let st = &self.state;
        let mut m = Map::new();
        m.insert("kind".into(), "revl.branch-lineage".into());
        m.insert("schemaVersion".into(), SCHEMA_VERSION.into());
        m.insert("wal".into(), self.path.display().to_string().into());
        m.insert("role".into(), self.role().into());
        m.insert("session".into(), st.session.clone().into());
        m.insert("state".into(), st.life().as_str().into());
        m.insert("steps".into(), st.steps.len().into());
        m.insert("complete".into(), st.activation_complete.into());
        m.insert("torn".into(), self.torn.into());
        if let Some(o) = &st.origin {
            let mut idx: Vec<u64> = o.crossed.iter().chain(&o.would_cross).copied().collect();
            idx.sort_unstable();
            m.insert("parent".into(), o.parent.clone().into());
            m.insert("divergedAt".into(), o.at.into());
            m.insert("parentWal".into(), o.parent_wal.clone().into());
            m.insert("preserved".into(), o.preserved.clone());
            m.insert("notPreserved".into(), o.not_preserved.clone());
            m.insert(
                "inheritedResidue".into(),
                residue_of(&idx, &o.failed, "inherited at the fork"),
            );
        }
        if let Some((child, at)) = self.child() {
            let begun = st.fork_begun.as_ref();
            let mut idx: Vec<u64> = begun
                .map(|b| b.crossed.iter().chain(&b.would_cross).copied().collect())
                .unwrap_or_default();
            idx.sort_unstable();
            let failed = st
                .fork_frozen
                .as_ref()
                .map(|f| f.failed.clone())
                .unwrap_or_default();
            m.insert("child".into(), child.into());
            m.insert(
                "frozenAt".into(),
                if st.fork_frozen.is_some() {
                    at.into()
                } else {
                    Value::Null
                },
            );
            m.insert("forkComplete".into(), st.fork_complete.into());
            m.insert(
                "residue".into(),
                residue_of(&idx, &failed, "left behind by the fork"),
            );
            if !st.fork_complete {
                m.insert("midFork".into(), format!("the fork at step {at} began but neither completed nor was abandoned: the workspace may be half rewound; any revl command on this session repairs it").into());
            }
        }
        Value::Object(m)
    }

    /// The partition of the tail above k from the WAL alone (`revl.branch-partition`),
    /// typed: a long tail serialises straight to its output without an intermediate tree.
    pub fn partition_doc(&self, k: i64) -> Result<PartitionDoc<'_>> {
        let st = &self.state;
        let k = st.pos(k).ok_or_else(|| {
            Error::bad_args(
                format!(
                    "step {k} is out of range: this WAL has steps -1..={}",
                    st.head()
                ),
                "give a step index from the timeline, or -1 (before every step)",
            )
        })?;
        let p = partition(&st.steps, k);
        let mut findings: Vec<Value> = classify::fork_refusals(st, k, &p)
            .iter()
            .map(classify::Refusal::finding)
            .collect();
        let forkable = findings.is_empty();
        if self.torn {
            findings.push(json!({"finding": "torn-tail", "why": "the last line of the WAL is torn (a crash mid-append); readers skip it and the next writer truncates it"}));
        }
        let steps = &st.steps;
        let res = Residue::of_partition(&p, &[]);
        // The emissions (their details are parsed) are built on a second core meanwhile.
        let (emissions, rest) = std::thread::scope(|sc| {
            let emissions = sc.spawn(|| {
                (
                    entries(steps, &p.emissions_crossed, Emission::of),
                    entries(steps, &p.emissions_compensated, Emission::of),
                )
            });
            let rest = (
                entries(steps, &p.inverses_ran, Rewound::of),
                entries(steps, &p.provisions_withdrawn, Rewound::of),
                entries(steps, &p.would_cross_on_rewind, WouldCross::with_why),
                entries(steps, &p.unrestored, Unrestored::of),
            );
            (emissions.join().ok(), rest)
        });
        // A failed thread must not pass for "no emissions".
        let (emissions_crossed, emissions_compensated) = emissions.ok_or_else(|| {
            Error::new(
                crate::error::Code::Io,
                "internal: building the emission entries failed",
                "report this as a bug, with the WAL",
            )
        })?;
        let (would_rewind, would_withdraw, would_cross_on_rewind, unrestored) = rest;
        Ok(PartitionDoc {
            kind: "revl.branch-partition",
            schema_version: SCHEMA_VERSION,
            wal: self.path.display().to_string(),
            session: &st.session,
            at: k,
            at_label: st.label_at(k),
            performed: false,
            would_rewind,
            would_withdraw,
            emissions_crossed,
            emissions_compensated,
            would_cross_on_rewind,
            unrestored,
            findings,
            forkable,
            residue: res,
            reader_note: "computed from the WAL alone, performing nothing; a step whose scope is absent is never offered as rewindable (an unproven scope is treated as crossing)",
        })
    }

    /// The partition document as a `Value` (see [`OfflineWal::partition_doc`]).
    pub fn partition(&self, k: i64) -> Result<Value> {
        Ok(
            serde_json::to_value(self.partition_doc(k)?)
                .expect("the partition document serialises"),
        )
    }

    /// The partition as indices (for agreement checks).
    pub fn partition_indices(&self, k: Pos) -> Partition {
        partition(&self.state.steps, k)
    }

    fn side(&self) -> Value {
        let emissions: Vec<u64> = self
            .state
            .steps
            .iter()
            .filter(|s| s.kind == StepKind::Emission)
            .map(|s| s.index)
            .collect();
        json!({"wal": self.path.display().to_string(), "session": self.state.session, "role": self.role(),
               "steps": self.state.steps.len(), "emissionsCrossed": emissions, "modelDecisions": self.state.model_decisions})
    }
}

/// The topology of several WALs (`revl.branch-topology`). The same WAL given twice counts once.
pub fn topology(paths: &[PathBuf]) -> Result<Value> {
    let mut seen = BTreeSet::new();
    let mut wals = Vec::new();
    for p in paths {
        let canon = std::fs::canonicalize(p).map_err(|e| {
            Error::bad_args(
                format!("cannot open WAL {}: {e}", p.display()),
                "give paths of session WALs",
            )
        })?;
        if seen.insert(canon.clone()) {
            wals.push(open(&canon)?);
        }
    }
    let ids: BTreeSet<String> = wals.iter().map(|w| w.session().to_string()).collect();
    let (mut edges, mut roots, mut orphans, mut dangling, mut unidentified) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut children: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for w in &wals {
        let wal = w.path.display().to_string();
        match w.parent() {
            Some((parent, at)) => {
                if ids.contains(parent) {
                    edges.push(json!({"parent": parent, "branch": w.session(), "at": at}));
                    children
                        .entry(parent.to_string())
                        .or_default()
                        .push(w.session().to_string());
                } else {
                    roots.push(w.session().to_string());
                    orphans.push(json!({"wal": wal, "branch": w.session(), "parent": parent, "at": at, "why": format!("the parent's WAL ({parent}) was not given")}));
                }
            }
            None => roots.push(w.session().to_string()),
        }
        if let Some((child, at)) = w.child() {
            if !ids.contains(&child) {
                dangling.push(json!({"wal": wal, "parent": w.session(), "branch": child, "at": at, "why": format!("the branch's WAL ({child}) was not given")}));
            }
        }
        if w.role() == "standalone" {
            unidentified.push(json!({"wal": wal, "why": "a standalone session: it has no fork record, so it belongs to no lineage"}));
        }
    }
    for v in children.values_mut() {
        v.sort();
    }
    roots.sort();
    edges.sort_by(|a, b| {
        (a["parent"].as_str(), a["at"].as_i64()).cmp(&(b["parent"].as_str(), b["at"].as_i64()))
    });
    Ok(json!({
        "kind": "revl.branch-topology",
        "schemaVersion": SCHEMA_VERSION,
        "sessions": wals.iter().map(OfflineWal::lineage).collect::<Vec<_>>(),
        "edges": edges,
        "children": children,
        "roots": roots,
        "orphans": orphans,
        "dangling": dangling,
        "unidentified": unidentified,
    }))
}

/// A side's steps by lineage position: a branch's step i ≥ 1 sits at position at+i; a root's
/// step i at position i. Hinges are skipped.
fn positioned(w: &OfflineWal) -> Vec<(i64, &Step)> {
    let base = w.parent().map(|(_, at)| at.to_i64()).unwrap_or(0);
    w.state
        .steps
        .iter()
        .filter(|s| s.kind != StepKind::Hinge)
        .map(|s| {
            (
                if w.parent().is_some() {
                    base + s.index as i64
                } else {
                    s.index as i64
                },
                s,
            )
        })
        .collect()
}

fn brief(pos: i64, s: &Step) -> Value {
    json!({"position": pos, "index": s.index, "kind": s.kind.as_str(), "label": s.label()})
}

/// Compare two WALs (`revl.branch-compare`).
pub fn compare(left: &Path, right: &Path) -> Result<Value> {
    let (l, r) = (open(left)?, open(right)?);
    let not_comparable = json!([
        {"axis": "decisionCause", "why": "revl records what each side did, not why the model decided it: no prompt or response is recorded, so a difference cannot be attributed to a cause"},
        {"axis": "counterfactual", "why": "each side ran once in its own world (clock, seeds, provider state): the comparison says what differed, not what the other side would have done"},
    ]);
    let (relation, diverged): (&str, Option<i64>) = match (l.parent(), r.parent()) {
        (Some((p, at)), _) if p == r.session() => ("parent-branch", Some(at.to_i64())),
        (_, Some((p, at))) if p == l.session() => ("parent-branch", Some(at.to_i64())),
        (Some((pl, al)), Some((pr, ar))) if pl == pr => {
            ("siblings", (al == ar).then(|| al.to_i64()))
        }
        _ => ("unrelated", None),
    };
    let mut doc = json!({
        "kind": "revl.branch-compare",
        "schemaVersion": SCHEMA_VERSION,
        "relation": relation,
        "comparable": relation != "unrelated",
        "divergedAt": diverged,
        "left": l.side(),
        "right": r.side(),
        "notComparable": not_comparable,
    });
    if relation == "unrelated" {
        doc["why"] = "neither WAL names the other as its parent and they share no parent: there is no divergence point to compare from".into();
        return Ok(doc);
    }
    // Positions at or below the divergence point are shared; siblings forked at different
    // steps share the parent's history up to the earlier one.
    let cut = match diverged {
        Some(k) => k,
        None => l
            .parent()
            .map(|p| p.1.to_i64())
            .unwrap_or(0)
            .min(r.parent().map(|p| p.1.to_i64()).unwrap_or(0)),
    };
    let (lp, rp) = (positioned(&l), positioned(&r));
    let shared = lp
        .iter()
        .filter(|(p, _)| *p <= cut)
        .count()
        .max(rp.iter().filter(|(p, _)| *p <= cut).count());
    let la: Vec<&(i64, &Step)> = lp.iter().filter(|(p, _)| *p > cut).collect();
    let ra: Vec<&(i64, &Step)> = rp.iter().filter(|(p, _)| *p > cut).collect();
    let mut first = None;
    let n = la.len().max(ra.len());
    for i in 0..n {
        let (a, b) = (la.get(i), ra.get(i));
        let same = matches!((a, b), (Some((_, x)), Some((_, y))) if x.kind == y.kind && x.label() == y.label());
        if !same {
            first = Some(i);
            break;
        }
    }
    let first_doc = first.map(|i| {
        let pos = la.get(i).map(|(p, _)| *p).or(ra.get(i).map(|(p, _)| *p)).unwrap_or(cut + 1);
        json!({"position": pos, "left": la.get(i).map(|(p, s)| brief(*p, s)), "right": ra.get(i).map(|(p, s)| brief(*p, s))})
    });
    let from = first.unwrap_or(n);
    let emissions = |xs: &[&(i64, &Step)]| -> Vec<Value> {
        xs.iter()
            .filter(|(_, s)| s.kind == StepKind::Emission)
            .map(|(p, s)| {
                let mut e = classify::emission_entry(s);
                e["position"] = (*p).into();
                e
            })
            .collect()
    };
    doc["delta"] = json!({
        "sharedPrefix": {"through": cut, "steps": shared},
        "firstDifference": first_doc,
        "onlyLeft": la.iter().skip(from).map(|(p, s)| brief(*p, s)).collect::<Vec<_>>(),
        "onlyRight": ra.iter().skip(from).map(|(p, s)| brief(*p, s)).collect::<Vec<_>>(),
        "emissions": {"left": emissions(&la), "right": emissions(&ra)},
        "modelDecisions": {"left": l.state.model_decisions, "right": r.state.model_decisions},
        "identical": first.is_none(),
    });
    Ok(doc)
}
