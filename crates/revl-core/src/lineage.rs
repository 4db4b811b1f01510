//! Offline readers (docs/reference.md, "branch" and "compare"): lineage, topology,
//! partition and comparison of branches from WAL files alone. They take no lock, repair
//! nothing and run nothing. The partition uses the same replay (`State`) and the same
//! classifier as the live fork, so the two agree by construction.

use crate::classify::{
    self, entries, partition, Emission, Partition, Rewound, Unrestored, WouldCross,
};
use crate::error::{Error, Result};
use crate::report::Residue;
use crate::state::State;
use crate::step::{Pos, Step, StepKind};
use crate::unwind::Failed;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub const SCHEMA_VERSION: &str = "1.0";

/// `revl.branch-lineage` (docs/reference.md, "branch"): one WAL's place in its lineage.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lineage {
    pub kind: &'static str,
    pub schema_version: &'static str,
    pub wal: String,
    pub role: &'static str,
    pub session: String,
    pub state: &'static str,
    pub steps: usize,
    pub complete: bool,
    pub torn: bool,
    /// A branch: its parent, where it diverged, what it kept and inherited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diverged_at: Option<Pos>,
    /// The remote the parent lives on (a branch of a remote session).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_remote: Option<String>,
    /// Where the parent's WAL was found, through the store (the checked document only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_wal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserved: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_preserved: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inherited_residue: Option<Residue>,
    /// A forked parent: its branch, where it froze (null while the fork is unfinished).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub child: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frozen_at: Option<Option<Pos>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fork_complete: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub residue: Option<Residue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mid_fork: Option<String>,
    /// v2 (docs/user-guide.md §6): the branches of this session's parallel forks, each in its own
    /// workspace (`frozenAt` appears only if a serial fork froze it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<crate::state::ParallelChild>,
}

/// One side of a comparison.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Side {
    pub wal: String,
    pub session: String,
    pub role: &'static str,
    pub steps: usize,
    pub emissions_crossed: Vec<u64>,
    pub model_decisions: Vec<Value>,
    /// The held sends this side has queued (they fire only if it commits), FIFO.
    pub held_sends: Vec<crate::state::Deferred>,
}

/// What the two sides share and where they part (lineage positions).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Delta {
    /// How many positions, from 1, both sides hold with the same kind, label and content.
    pub shared_prefix: usize,
    pub first_difference: Option<crate::wire::FirstDifference>,
    pub only_left: Vec<crate::wire::BriefStep>,
    pub only_right: Vec<crate::wire::BriefStep>,
    pub emissions: crate::wire::Sides<Vec<crate::wire::PositionedEmission>>,
    /// The model decisions each side recorded (`note-model`: free JSON, as given).
    pub model_decisions: crate::wire::Sides<Vec<Value>>,
    pub identical: bool,
}

/// `revl.branch-compare` (docs/reference.md, "compare").
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Compare {
    pub kind: &'static str,
    pub schema_version: &'static str,
    pub relation: &'static str,
    pub comparable: bool,
    pub diverged_at: Option<i64>,
    pub left: Side,
    pub right: Side,
    pub not_comparable: Vec<crate::wire::Axis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<Delta>,
}

/// An edge of a topology: `branch` forked from `parent` at `at`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Edge {
    pub parent: String,
    pub branch: String,
    pub at: Pos,
}

/// A branch whose parent WAL was not given, or a frozen parent whose branch WAL was not.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unclosed {
    pub wal: String,
    pub parent: String,
    pub branch: String,
    pub at: Pos,
    pub why: String,
}

/// A standalone WAL given to a topology.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unidentified {
    pub wal: String,
    pub why: &'static str,
}

/// `revl.branch-topology` (docs/reference.md, "branch").
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    pub kind: &'static str,
    pub schema_version: &'static str,
    pub sessions: Vec<Lineage>,
    pub edges: Vec<Edge>,
    pub children: BTreeMap<String, Vec<String>>,
    pub roots: Vec<String>,
    pub orphans: Vec<Unclosed>,
    pub dangling: Vec<Unclosed>,
    pub unidentified: Vec<Unidentified>,
}

impl Compare {
    /// Not comparable (exit 1, docs/reference.md, "compare").
    pub fn unclean(&self) -> bool {
        !self.comparable
    }
}

impl Topology {
    /// Orphans or dangling edges: the topology is not closed (exit 1).
    pub fn unclean(&self) -> bool {
        !self.orphans.is_empty() || !self.dangling.is_empty()
    }
}

impl Lineage {
    /// Residue that is not clean (exit 1, docs/reference.md, "branch").
    pub fn unclean(&self) -> bool {
        [&self.inherited_residue, &self.residue]
            .iter()
            .any(|r| r.as_ref().is_some_and(|r| !r.clean))
    }
}

/// `revl.branch-partition` (docs/reference.md, "branch").
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
    pub findings: Vec<crate::wire::Finding>,
    pub forkable: bool,
    pub residue: Residue,
    pub reader_note: &'static str,
}

impl PartitionDoc<'_> {
    /// Residue that is not clean (exit 1, docs/reference.md, "branch").
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
    /// Read as far as it is intact ([`open_prefix`]): where it stops being readable.
    pub corrupt: Option<crate::wal::Corrupt>,
}

pub fn open(path: &Path) -> Result<OfflineWal> {
    let (state, meta) = State::read(path)?;
    Ok(OfflineWal::of(path, state, meta, None))
}

/// Like [`open`], but a WAL corrupt past its header is read as far as it is intact (for
/// `log`, which marks it); see [`State::read_prefix`].
pub fn open_prefix(path: &Path) -> Result<OfflineWal> {
    let (state, meta, corrupt) = State::read_prefix(path)?;
    Ok(OfflineWal::of(path, state, meta, corrupt))
}

impl OfflineWal {
    fn of(
        path: &Path,
        state: State,
        meta: crate::wal::WalMeta,
        corrupt: Option<crate::wal::Corrupt>,
    ) -> OfflineWal {
        OfflineWal {
            path: path.to_path_buf(),
            committed_boundary: state.commit_approved.is_some() || !state.flushed.is_empty(),
            state,
            torn: meta.torn,
            corrupt,
        }
    }

    /// The WAL of this branch's parent, found through the store this WAL lives in by the
    /// session reference its `fork-branch` record names ([`SessionRef::wal_in`]): a store
    /// moved or copied whole reads the same, and never reads another store's WALs. `None`
    /// for a WAL that is no branch. A parent not there (or a file there that is another
    /// session, or a WAL outside a store) is an error naming the parent: what depends on the
    /// parent's history is never answered without it.
    pub fn parent_wal(&self) -> Result<Option<PathBuf>> {
        let Some(o) = &self.state.origin else {
            return Ok(None);
        };
        find_parent_wal(
            self.session(),
            &o.parent_ref(),
            o.at,
            store_of(&self.path).as_deref(),
        )
        .map(Some)
    }

    /// The lineage document, its parent's WAL found first ([`OfflineWal::parent_wal`]):
    /// a branch whose parent cannot be found is an error, never a guess.
    pub fn lineage_checked(&self) -> Result<Lineage> {
        let parent = self.parent_wal()?;
        let mut doc = self.lineage();
        if let Some(p) = parent {
            doc.parent_wal = Some(p.display().to_string());
        }
        Ok(doc)
    }
}

/// A session named by reference (docs/wal-format.md, "Parents by id"): its id, and the
/// remote it lives on (`None`: the store of the WAL that names it). Never a path, so a
/// store moved or copied whole reads the same.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionRef {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
}

impl SessionRef {
    /// The places this session's WAL may be in the store at `root`, in the order they are
    /// tried: `sessions/<id>/wal.jsonl`, then, for a session of remote NAME, the store's
    /// verified copy of it, `remotes/NAME/mirror/sessions/<id>/wal.jsonl`. Empty for a
    /// reference that is not a session id or names no valid remote (a hostile WAL's
    /// reference never builds a path outside the store).
    pub fn wal_in(&self, root: &Path) -> Vec<PathBuf> {
        if !crate::store::is_session_id(&self.id)
            || self.remote.as_deref().is_some_and(|r| !is_remote_name(r))
        {
            return Vec::new();
        }
        let mut out = vec![root.join("sessions").join(&self.id).join("wal.jsonl")];
        if let Some(r) = &self.remote {
            out.push(
                root.join("remotes")
                    .join(r)
                    .join("mirror")
                    .join("sessions")
                    .join(&self.id)
                    .join("wal.jsonl"),
            );
        }
        out
    }
}

impl std::fmt::Display for SessionRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.remote {
            Some(r) => write!(f, "{} (of remote {r})", self.id),
            None => f.write_str(&self.id),
        }
    }
}

/// A remote's name: letters, digits, `-` and `_`, at most 64 (`revl remote add`).
pub fn is_remote_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// What a walVersion-1 `parentWal` says, read as a reference: the remote it names
/// (`remote NAME: sessions/<id>`, whose id must be the record's `parent`), or none (an
/// absolute path: the parent is found by its id in the branch's store, wherever the store
/// was when the path was written). Anything else is no v1 `parentWal`.
pub fn v1_parent_remote(
    parent: &str,
    parent_wal: &str,
) -> std::result::Result<Option<String>, String> {
    const REMOTE: &str = "remote ";
    if let Some(rest) = parent_wal.strip_prefix(REMOTE) {
        return match rest.split_once(": sessions/") {
            Some((name, id)) if is_remote_name(name) && id == parent => Ok(Some(name.to_string())),
            _ => Err(format!(
                "parentWal {parent_wal:?} names no session {parent} of a remote"
            )),
        };
    }
    if parent_wal.starts_with('/') {
        Ok(None)
    } else {
        Err(format!(
            "parentWal {parent_wal:?} is neither an absolute path nor a remote's session"
        ))
    }
}

/// The store a WAL at `wal` belongs to: `<store>` when it is `<store>/sessions/<id>/wal.jsonl`.
fn store_of(wal: &Path) -> Option<PathBuf> {
    let dir = wal.parent()?;
    dir.file_name()
        .and_then(|n| n.to_str())
        .filter(|n| crate::store::is_session_id(n))?;
    let sessions = dir.parent()?;
    (sessions.file_name()? == "sessions").then(|| sessions.parent().map(Path::to_path_buf))?
}

/// The WAL of session `parent` (of `branch`, forked at `at`), through the store at `store`
/// ([`SessionRef::wal_in`]): the first place that exists and holds that session; else an
/// error that names the parent and the places looked at.
pub fn find_parent_wal(
    branch: &str,
    parent: &SessionRef,
    at: Pos,
    store: Option<&Path>,
) -> Result<PathBuf> {
    let holds = |p: &Path| p.is_file() && header_session(p).as_deref() == Some(parent.id.as_str());
    let places = store.map(|s| parent.wal_in(s)).unwrap_or_default();
    if let Some(p) = places.iter().find(|p| holds(p)) {
        return Ok(p.clone());
    }
    let (looked, hint) = match &places[..] {
        [] if store.is_none() => (
            "the branch's WAL is not inside a store (at <store>/sessions/<id>/wal.jsonl), and a parent is only looked for in the store that holds its branch".to_string(),
            format!("read the branch where its store keeps it (`--store DIR` and the session id), with its parent's session directory sessions/{} beside it", parent.id),
        ),
        [] => (
            "its reference is not a session id (or names no valid remote), so it names no place in a store".to_string(),
            "the branch's WAL was edited outside revl; restore it from a backup".to_string(),
        ),
        many => (
            format!(
                "no WAL of it is at {}",
                many.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" nor at ")
            ),
            format!("put the parent's session directory (sessions/{}) back into the store beside the branch, or give `--store` the store that holds both", parent.id),
        ),
    };
    Err(Error::new(
        crate::error::Code::Io,
        format!("the parent session {parent} of branch {branch} cannot be found: {looked}. The history the branch shares with it (its steps up to {at}) cannot be read, and nothing that depends on it is answered"),
        hint,
    ))
}

/// The `session` a WAL's first line names (read as plain JSON: enough to tell which
/// session's WAL a file is; reading it checks everything else).
fn header_session(wal: &Path) -> Option<String> {
    use std::io::{BufRead, Read};
    let f = std::fs::File::open(wal).ok()?;
    let mut line = Vec::new();
    std::io::BufReader::new(f)
        .take(1 << 20)
        .read_until(b'\n', &mut line)
        .ok()?;
    let v: Value = serde_json::from_slice(line.strip_suffix(b"\n")?).ok()?;
    (v.get("record")?.as_str()? == "header").then_some(())?;
    Some(v.get("session")?.as_str()?.to_string())
}

/// The residue a fork left: the parent's crossed and would-cross indices, and its failed
/// inverses.
fn residue_of(indices: &[u64], failed: &[Failed], what: &str) -> Residue {
    Residue::new(indices.iter().copied(), failed, |out| {
        if out.is_empty() {
            format!("{what}: no emission crossed, no inverse was left unfired and none failed")
        } else {
            format!("{what}: {} step(s) of the parent's history are outstanding (emissions that crossed and stay out in the world, steps whose inverse was not fired because it would cross, such as a declared compensation that never ran, or inverses that failed): {out:?}", out.len())
        }
    })
}

impl OfflineWal {
    pub fn session(&self) -> &str {
        &self.state.session
    }

    pub fn role(&self) -> &'static str {
        let is_branch = self.state.origin.is_some();
        let is_parent = self.state.fork_frozen.is_some()
            || self.state.fork_begun.is_some()
            || !self.state.parallel_children.is_empty();
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

    /// The child of this WAL's serial fork, and where.
    pub fn child(&self) -> Option<(String, Pos)> {
        if let Some(f) = &self.state.fork_frozen {
            return Some((f.branch.clone(), f.at));
        }
        self.state
            .fork_begun
            .as_ref()
            .filter(|f| f.into.is_none())
            .map(|f| (f.branch.clone(), f.at))
    }

    /// The lineage document (`revl.branch-lineage`).
    pub fn lineage(&self) -> Lineage {
        let st = &self.state;
        let mut doc = Lineage {
            kind: "revl.branch-lineage",
            schema_version: SCHEMA_VERSION,
            wal: self.path.display().to_string(),
            role: self.role(),
            session: st.session.clone(),
            state: st.life().as_str(),
            steps: st.steps.iter().filter(|s| !s.armed()).count(),
            complete: st.activation_complete,
            torn: self.torn,
            parent: None,
            diverged_at: None,
            parent_remote: None,
            parent_wal: None,
            preserved: None,
            not_preserved: None,
            inherited_residue: None,
            child: None,
            frozen_at: None,
            fork_complete: None,
            residue: None,
            mid_fork: None,
            children: st
                .parallel_children
                .iter()
                .filter(|c| c.complete)
                .cloned()
                .collect(),
        };
        if let Some(o) = &st.origin {
            let mut idx: Vec<u64> = o.crossed.iter().chain(&o.would_cross).copied().collect();
            idx.sort_unstable();
            doc.parent = Some(o.parent.clone());
            doc.diverged_at = Some(o.at);
            doc.parent_remote = o.parent_remote.clone();
            doc.preserved = Some(o.preserved.clone());
            doc.not_preserved = Some(o.not_preserved.clone());
            doc.inherited_residue = Some(residue_of(&idx, &o.failed, "inherited at the fork"));
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
            doc.child = Some(child);
            doc.frozen_at = Some(st.fork_frozen.is_some().then_some(at));
            doc.fork_complete = Some(st.fork_complete);
            doc.residue = Some(residue_of(&idx, &failed, "left behind by the fork"));
            if !st.fork_complete {
                doc.mid_fork = Some(format!("the fork at step {at} began but neither completed nor was abandoned: the workspace may be half rewound; any revl command on this session repairs it"));
            }
        }
        doc
    }

    /// The partition of the tail above k from the WAL alone (`revl.branch-partition`),
    /// typed: a long tail serialises straight to its output without an intermediate tree.
    pub fn partition_doc(&self, k: i64) -> Result<PartitionDoc<'_>> {
        let st = &self.state;
        let k = st.pos(k).ok_or_else(|| {
            Error::bad_args(
                format!(
                    "step {k} is out of range: this WAL has steps -1 to {}",
                    st.head()
                ),
                "give a step index from the timeline, or -1 (before every step)",
            )
        })?;
        let p = partition(&st.steps, k);
        let mut findings: Vec<crate::wire::Finding> = classify::fork_refusals(st, k, &p)
            .iter()
            .map(classify::Refusal::finding)
            .collect();
        let forkable = findings.is_empty();
        if self.torn {
            findings.push(crate::wire::Finding {
                finding: "torn-tail",
                why: "the last line of the WAL is torn (a crash mid-append); readers skip it and the next writer truncates it".to_string(),
                steps: None,
            });
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

    fn side(&self) -> Side {
        Side {
            wal: self.path.display().to_string(),
            session: self.state.session.clone(),
            role: self.role(),
            steps: self.state.steps.iter().filter(|s| !s.armed()).count(),
            emissions_crossed: self
                .state
                .steps
                .iter()
                .filter(|s| s.kind == StepKind::Emission)
                .map(|s| s.index)
                .collect(),
            model_decisions: self.state.model_decisions.clone(),
            held_sends: self.state.held_sends(),
        }
    }
}

/// The topology of several WALs (`revl.branch-topology`). The same WAL given twice counts once.
pub fn topology(paths: &[PathBuf]) -> Result<Topology> {
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
                    edges.push(Edge {
                        parent: parent.to_string(),
                        branch: w.session().to_string(),
                        at,
                    });
                    children
                        .entry(parent.to_string())
                        .or_default()
                        .push(w.session().to_string());
                } else {
                    roots.push(w.session().to_string());
                    orphans.push(Unclosed {
                        wal: wal.clone(),
                        parent: parent.to_string(),
                        branch: w.session().to_string(),
                        at,
                        why: format!("the parent's WAL ({parent}) was not given"),
                    });
                }
            }
            None => roots.push(w.session().to_string()),
        }
        for c in w.state.parallel_children.iter().filter(|c| c.complete) {
            if !ids.contains(&c.branch) {
                dangling.push(Unclosed {
                    wal: wal.clone(),
                    parent: w.session().to_string(),
                    why: format!("the parallel branch's WAL ({}) was not given", c.branch),
                    branch: c.branch.clone(),
                    at: c.at,
                });
            }
        }
        if let Some((child, at)) = w.child() {
            if !ids.contains(&child) {
                dangling.push(Unclosed {
                    wal: wal.clone(),
                    parent: w.session().to_string(),
                    why: format!("the branch's WAL ({child}) was not given"),
                    branch: child,
                    at,
                });
            }
        }
        if w.role() == "standalone" {
            unidentified.push(Unidentified {
                wal,
                why: "a standalone session: it has no fork record, so it belongs to no lineage",
            });
        }
    }
    for v in children.values_mut() {
        v.sort();
    }
    roots.sort();
    edges.sort_by(|a, b| (&a.parent, a.at).cmp(&(&b.parent, b.at)));
    Ok(Topology {
        kind: "revl.branch-topology",
        schema_version: SCHEMA_VERSION,
        sessions: wals.iter().map(OfflineWal::lineage).collect(),
        edges,
        children,
        roots,
        orphans,
        dangling,
        unidentified,
    })
}

/// A side's history by lineage position, hinges skipped: a root's step i sits at position
/// i; a branch's step i ≥ 1 at `at + i`, after its parent's history up to `at` (read from
/// the parent's WAL, found by [`OfflineWal::parent_wal`], recursively: siblings forked at
/// different steps then compare the parent's steps between them too). A parent that cannot
/// be found or read is an error: a history without it would compare as something else.
fn history(w: &OfflineWal) -> Result<Vec<(i64, Step)>> {
    Ok(history_depth(w, 0)?.0)
}

/// A session's whole history along its lineage, each step with its lineage position, and
/// the position of its own step 0 (a branch forked at its parent's step k sits at the
/// parent's position of k, whatever the parent's own base).
fn history_depth(w: &OfflineWal, depth: usize) -> Result<(Vec<(i64, Step)>, i64)> {
    let own = |base: i64| {
        w.state
            .steps
            .iter()
            .filter(|s| s.kind != StepKind::Hinge)
            .map(move |s| (base + s.index as i64, s.clone()))
    };
    let Some((_, at)) = w.parent() else {
        return Ok((own(0).collect(), 0));
    };
    // A branch forked before every step (-1) starts at its parent's start.
    let at = at.to_i64().max(0);
    if depth >= 64 {
        return Err(Error::bad_args(
            format!(
                "session {}: its lineage is more than 64 forks deep (or its WALs name each other in a loop)",
                w.session()
            ),
            "compare sessions nearer to each other in the lineage",
        ));
    }
    let (mut out, base) = match w.parent_wal()? {
        Some(path) => {
            let (parent, parent_base) = history_depth(&open(&path)?, depth + 1)?;
            let fork_pos = parent_base + at;
            let shared: Vec<(i64, Step)> =
                parent.into_iter().filter(|(p, _)| *p <= fork_pos).collect();
            (shared, fork_pos)
        }
        None => (Vec::new(), at),
    };
    out.extend(own(base));
    Ok((out, base))
}

/// What a step did, for comparison (docs/architecture.md, "Parallel forks and comparing
/// alternatives"): file and exec effects by their post-images, tool calls by their
/// arguments, provisions by their value.
fn content(s: &Step) -> Value {
    let d = s.detail();
    let pick = |keys: &[&str]| {
        let mut m = serde_json::Map::new();
        for k in keys {
            if let Some(v) = d.get(*k) {
                m.insert((*k).to_string(), v.clone());
            }
        }
        Value::Object(m)
    };
    match s.kind {
        StepKind::Effect => pick(&["path", "to", "after", "changes", "args"]),
        StepKind::Emission | StepKind::Compensation => pick(&["args"]),
        StepKind::Provision => pick(&["key", "value"]),
        _ => Value::Null,
    }
}

fn brief(pos: i64, s: &Step) -> crate::wire::BriefStep {
    crate::wire::BriefStep {
        position: pos,
        index: s.index,
        kind: s.kind.as_str().to_string(),
        label: s.label().to_string(),
    }
}

/// Compare two WALs (`revl.branch-compare`).
pub fn compare(left: &Path, right: &Path) -> Result<Compare> {
    let (l, r) = (open(left)?, open(right)?);
    let not_comparable = vec![
        crate::wire::Axis {
            axis: "decisionCause",
            why: "revl records what each side did, not why the model decided it: no prompt or response is recorded, so a difference cannot be attributed to a cause",
        },
        crate::wire::Axis {
            axis: "counterfactual",
            why: "each side ran once in its own world (clock, seeds, provider state): the comparison says what differed, not what the other side would have done",
        },
    ];
    let (relation, diverged): (&str, Option<i64>) = match (l.parent(), r.parent()) {
        _ if l.session() == r.session() => ("same", None),
        (Some((p, at)), _) if p == r.session() => ("parent-branch", Some(at.to_i64())),
        (_, Some((p, at))) if p == l.session() => ("parent-branch", Some(at.to_i64())),
        (Some((pl, al)), Some((pr, ar))) if pl == pr => {
            ("siblings", (al == ar).then(|| al.to_i64()))
        }
        _ => ("unrelated", None),
    };
    let mut doc = Compare {
        kind: "revl.branch-compare",
        schema_version: SCHEMA_VERSION,
        relation,
        comparable: relation != "unrelated",
        diverged_at: diverged,
        left: l.side(),
        right: r.side(),
        not_comparable,
        why: None,
        delta: None,
    };
    if relation == "unrelated" {
        doc.why = Some("neither WAL names the other as its parent and they share no parent: there is no divergence point to compare from");
        return Ok(doc);
    }
    // Both histories from position 1, step by step: the same kind, label and content, or
    // the first difference. What precedes the fork point is one history, read once per side.
    let (lh, rh) = (history(&l)?, history(&r)?);
    let n = lh.len().max(rh.len());
    let same = |a: Option<&(i64, Step)>, b: Option<&(i64, Step)>| match (a, b) {
        (Some((pa, x)), Some((pb, y))) => {
            pa == pb && x.kind == y.kind && x.label() == y.label() && content(x) == content(y)
        }
        _ => false,
    };
    let first = (0..n).find(|&i| !same(lh.get(i), rh.get(i)));
    let shared = first.unwrap_or(n);
    let first_doc = first.map(|i| {
        // The differing entry's own position (the same as `sharedPrefix + 1` when both
        // histories are whole from position 1).
        let pos = [lh.get(i), rh.get(i)]
            .into_iter()
            .flatten()
            .map(|(p, _)| *p)
            .min()
            .unwrap_or(shared as i64 + 1);
        crate::wire::FirstDifference {
            position: pos,
            left: lh.get(i).map(|(p, s)| brief(*p, s)),
            right: rh.get(i).map(|(p, s)| brief(*p, s)),
        }
    });
    let la: Vec<&(i64, Step)> = lh.iter().skip(shared).collect();
    let ra: Vec<&(i64, Step)> = rh.iter().skip(shared).collect();
    let emissions = |xs: &[&(i64, Step)]| -> Vec<crate::wire::PositionedEmission> {
        xs.iter()
            .filter(|(_, s)| s.kind == StepKind::Emission)
            .map(|(p, s)| crate::wire::PositionedEmission {
                position: *p,
                entry: classify::emission_entry(s),
            })
            .collect()
    };
    doc.delta = Some(Delta {
        shared_prefix: shared,
        first_difference: first_doc,
        only_left: la.iter().map(|(p, s)| brief(*p, s)).collect(),
        only_right: ra.iter().map(|(p, s)| brief(*p, s)).collect(),
        emissions: crate::wire::Sides {
            left: emissions(&la),
            right: emissions(&ra),
        },
        model_decisions: crate::wire::Sides {
            left: l.state.model_decisions.clone(),
            right: r.state.model_decisions.clone(),
        },
        identical: first.is_none(),
    });
    Ok(doc)
}
