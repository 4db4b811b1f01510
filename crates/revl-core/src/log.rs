//! `revl log`, `revl approvals` and the data `revl view` draws (docs/user-guide.md §7).
//! Like the offline readers they read the WALs alone: no lock is taken (a long tool call on
//! one session never makes them wait), nothing is repaired, nothing runs. A session in the
//! middle of an operation is shown as its WAL says now.

use crate::error::Result;
use crate::lineage::{self, OfflineWal};
use crate::report::Residue;
use crate::state::ForkSeen;
use crate::step::Pos;
use crate::store::Store;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// One WAL of the store, read (or the error that kept it from being read).
pub struct Loaded {
    pub id: String,
    pub wal: Result<OfflineWal>,
}

/// Every session of the store, read without locks, in id order.
pub fn load(store: &Store) -> Result<Vec<Loaded>> {
    load_with(store, lineage::open)
}

fn load_with(
    store: &Store,
    open: fn(&std::path::Path) -> Result<OfflineWal>,
) -> Result<Vec<Loaded>> {
    Ok(store
        .session_ids()?
        .into_iter()
        .map(|id| Loaded {
            wal: open(&store.wal_path(&id)),
            id,
        })
        .collect())
}

/// A session as `log` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogSession {
    pub session: String,
    /// `live`, `frozen`, `committed`, `aborted`, or `unreadable` (then `error` says why).
    pub state: &'static str,
    pub head: crate::step::Pos,
    pub workspace: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<Pos>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
    /// A branch: whether its lineage left nothing out in the world or unrestored: neither
    /// the fork that made it nor any fork above it (what an ancestor's fork left out there
    /// is still out there for every branch below it). See [`lineage_residue`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub residue_clean: Option<bool>,
    /// The forks of its lineage that did leave something, nearest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub residue_forks: Vec<ResidueFork>,
    /// Checkpoints bound to positions of this session (docs/langgraph.md), in the order bound.
    pub checkpoints: Vec<LogCheckpoint>,
    /// Held sends still queued.
    pub queued: usize,
    /// Approval tickets requested and not yet granted.
    pub pending_approvals: usize,
    /// A fork of this session that began and neither completed nor was abandoned yet (any
    /// command on the session repairs it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mid_fork: Option<Pos>,
    /// Forks a crash interrupted and repair abandoned (no branch was made).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub abandoned_forks: Vec<ForkSeen>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub torn: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The WAL is corrupt from this line on: this is what its intact records say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrupt: Option<crate::wal::Corrupt>,
}

/// A checkpoint id bound to a position of a session's timeline (a `bind` record).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogCheckpoint {
    pub position: u64,
    pub checkpoint_id: String,
}

/// A fork that left steps of its parent's history out in the world or unrestored (crossed
/// emissions, inverses that would cross, failed inverses): `outstanding`.
#[derive(Debug, Clone, Serialize)]
pub struct ResidueFork {
    pub parent: String,
    pub branch: String,
    pub at: Pos,
    pub outstanding: Vec<u64>,
}

/// What a branch's lineage left out in the world.
#[derive(Debug, Clone)]
pub struct LineageResidue {
    /// No fork of the lineage left anything.
    pub clean: bool,
    /// The forks that did, nearest first: the one that made the branch (when it left
    /// anything), then its parent's, and so on up.
    pub forks: Vec<ResidueFork>,
}

/// What `log` shows of one session: from its WAL, or from its index entry when that still
/// describes the WAL (docs/wal-format.md, "The session index"). Both are made by
/// [`Facts::of`] from the session's state, so the two roads give the same log.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    /// The id its header names.
    pub(crate) session: String,
    pub(crate) state: &'static str,
    pub(crate) head: Pos,
    pub(crate) workspace: String,
    /// A branch: the fork that made it.
    pub(crate) origin: Option<FactsOrigin>,
    /// `(branch, mode)` of each fork this session began, in order.
    pub(crate) forks: Vec<(String, &'static str)>,
    pub(crate) checkpoints: Vec<LogCheckpoint>,
    pub(crate) queued: usize,
    pub(crate) pending_approvals: usize,
    pub(crate) mid_fork: Option<Pos>,
    pub(crate) abandoned_forks: Vec<ForkSeen>,
    pub(crate) torn: bool,
    pub(crate) corrupt: Option<crate::wal::Corrupt>,
}

/// The fork that made a branch, as `log` needs it.
#[derive(Debug, Clone)]
pub(crate) struct FactsOrigin {
    pub(crate) parent: String,
    pub(crate) at: Pos,
    /// Its parent lives on a remote.
    pub(crate) remote: bool,
    /// What that fork left out in the world or unrestored (empty: nothing).
    pub(crate) outstanding: Vec<u64>,
}

impl Facts {
    pub(crate) fn of(
        st: &crate::state::State,
        torn: bool,
        corrupt: Option<crate::wal::Corrupt>,
    ) -> Facts {
        Facts {
            session: st.session.clone(),
            state: st.life().as_str(),
            head: st.position(),
            workspace: st.workspace.clone(),
            origin: st.origin.as_ref().map(|o| FactsOrigin {
                parent: o.parent.clone(),
                at: o.at,
                remote: o.parent_remote.is_some(),
                outstanding: Residue::new(
                    o.crossed.iter().chain(&o.would_cross).copied(),
                    &o.failed,
                    |_| String::new(),
                )
                .outstanding,
            }),
            forks: st
                .forks
                .iter()
                .map(|f| (f.branch.clone(), f.mode))
                .collect(),
            checkpoints: st
                .checkpoints
                .iter()
                .map(|(position, id)| LogCheckpoint {
                    position: *position,
                    checkpoint_id: id.clone(),
                })
                .collect(),
            queued: st.queue.len(),
            pending_approvals: pending_tickets(st).count(),
            mid_fork: st
                .forks
                .last()
                .filter(|f| f.outcome == "begun" && !st.fork_complete)
                .map(|f| f.at),
            abandoned_forks: st.abandoned_forks(),
            torn,
            corrupt,
        }
    }

    fn of_wal(w: &OfflineWal) -> Facts {
        Facts::of(&w.state, w.torn, w.corrupt.clone())
    }
}

/// THE residue of a branch as `log` and `view` show it: the fork that made it and every
/// fork above it, as far as the store's WALs go. A crossing is out in the world for good,
/// so a branch inherits what its ancestors' forks left, whatever its own fork did. `None`
/// for a session that is no branch.
pub fn lineage_residue(byid: &BTreeMap<&str, &OfflineWal>, id: &str) -> Option<LineageResidue> {
    let facts: BTreeMap<&str, Facts> = byid.iter().map(|(k, w)| (*k, Facts::of_wal(w))).collect();
    let refs: BTreeMap<&str, &Facts> = facts.iter().map(|(k, f)| (*k, f)).collect();
    residue_of(&refs, id)
}

fn residue_of(byid: &BTreeMap<&str, &Facts>, id: &str) -> Option<LineageResidue> {
    let mut w = *byid.get(id)?;
    w.origin.as_ref()?;
    let mut forks = Vec::new();
    let mut seen = BTreeSet::new();
    while let Some(o) = &w.origin {
        if !seen.insert(w.session.as_str()) {
            break; // a forged cycle; real WALs cannot make one
        }
        if !o.outstanding.is_empty() {
            forks.push(ResidueFork {
                parent: o.parent.clone(),
                branch: w.session.clone(),
                at: o.at,
                outstanding: o.outstanding.clone(),
            });
        }
        match byid.get(o.parent.as_str()) {
            Some(p) => w = p,
            None => break,
        }
    }
    Some(LineageResidue {
        clean: forks.is_empty(),
        forks,
    })
}

/// `branch` forked from `parent` at `at`, `serial` or `parallel`.
#[derive(Debug, Clone, Serialize)]
pub struct LogEdge {
    pub parent: String,
    pub branch: String,
    pub at: Pos,
    pub mode: &'static str,
}

/// `revl log --json`: `{sessions, edges}`.
#[derive(Debug, Clone, Serialize)]
pub struct Log {
    pub sessions: Vec<LogSession>,
    pub edges: Vec<LogEdge>,
}

/// The mode of the fork that made `branch` (from its parent's WAL when it can be read; else
/// a branch of a remote session, made into a workspace of its own, is parallel, and a
/// branch in its parent's workspace serial).
fn fork_mode(byid: &BTreeMap<&str, &Facts>, w: &Facts) -> Option<&'static str> {
    let o = w.origin.as_ref()?;
    if let Some(p) = byid.get(o.parent.as_str()) {
        if let Some((_, mode)) = p.forks.iter().find(|(b, _)| *b == w.session) {
            return Some(mode);
        }
        return Some(if p.workspace == w.workspace {
            "serial"
        } else {
            "parallel"
        });
    }
    Some(if o.remote { "parallel" } else { "serial" })
}

/// The ids of SESSION's family: its root ancestor (as far as the WALs go) and every
/// descendant of that root.
fn family(byid: &BTreeMap<&str, &Facts>, edges: &[LogEdge], id: &str) -> BTreeSet<String> {
    let mut root = id.to_string();
    let mut seen = BTreeSet::new();
    while let Some(p) = byid
        .get(root.as_str())
        .and_then(|w| w.origin.as_ref())
        .map(|o| o.parent.clone())
    {
        if !seen.insert(root.clone()) || !byid.contains_key(p.as_str()) {
            break;
        }
        root = p;
    }
    let mut out = BTreeSet::from([root]);
    let mut grew = true;
    while grew {
        grew = false;
        for e in edges {
            if out.contains(&e.parent) && out.insert(e.branch.clone()) {
                grew = true;
            }
        }
    }
    out
}

/// `revl log [SESSION]`: the lineage tree of the store, or of SESSION's family. A WAL
/// corrupt past its header shows as far as it is intact, marked `corrupt`. Each session is
/// read from its index entry when that still describes its WAL, else from the WAL (which
/// writes the entry again): docs/wal-format.md, "The session index".
pub fn log(store: &Store, session: Option<&str>) -> Result<Log> {
    let only = session.map(|s| store.resolve(s)).transpose()?;
    let facts: Vec<(String, std::result::Result<Facts, Value>)> = store
        .session_ids()?
        .into_iter()
        .map(|id| {
            let f = facts_of(store, &id);
            (id, f)
        })
        .collect();
    Ok(log_of_facts(&facts, only.as_deref()))
}

/// One session's facts: its index entry, or its WAL read as far as it is intact.
fn facts_of(store: &Store, id: &str) -> std::result::Result<Facts, Value> {
    if let Some(f) = crate::index::read_log(store, id) {
        return Ok(f);
    }
    let path = store.wal_path(id);
    let before = crate::index::WalStamp::now(&path);
    let (st, meta, corrupt) =
        crate::state::State::read_prefix(&path).map_err(|e| e.to_json()["error"].clone())?;
    // Indexed only when read whole and unchanged meanwhile (as `Store::info` does).
    if let Some(stamp) = before {
        if corrupt.is_none()
            && !meta.torn
            && meta.good_len == stamp.len()
            && crate::index::WalStamp::now(&path) == Some(stamp)
        {
            crate::index::write(store, id, &st, stamp);
        }
    }
    Ok(Facts::of(&st, meta.torn, corrupt))
}

/// The log of WALs already read (`view` reads them once for both).
pub fn log_of(loaded: &[Loaded], only: Option<&str>) -> Log {
    let facts: Vec<(String, std::result::Result<Facts, Value>)> = loaded
        .iter()
        .map(|l| {
            let f = match &l.wal {
                Ok(w) => Ok(Facts::of_wal(w)),
                Err(e) => Err(e.to_json()["error"].clone()),
            };
            (l.id.clone(), f)
        })
        .collect();
    log_of_facts(&facts, only)
}

fn log_of_facts(all: &[(String, std::result::Result<Facts, Value>)], only: Option<&str>) -> Log {
    let byid: BTreeMap<&str, &Facts> = all
        .iter()
        .filter_map(|(id, f)| f.as_ref().ok().map(|f| (id.as_str(), f)))
        .collect();
    let mut sessions = Vec::new();
    let mut edges = Vec::new();
    for (id, f) in all {
        let w = match f {
            Ok(w) => w,
            Err(e) => {
                sessions.push(LogSession {
                    session: id.clone(),
                    state: "unreadable",
                    head: crate::step::Pos::After(0),
                    workspace: String::new(),
                    parent: None,
                    at: None,
                    mode: None,
                    residue_clean: None,
                    residue_forks: Vec::new(),
                    checkpoints: Vec::new(),
                    queued: 0,
                    pending_approvals: 0,
                    mid_fork: None,
                    abandoned_forks: Vec::new(),
                    torn: false,
                    error: Some(e.clone()),
                    corrupt: None,
                });
                continue;
            }
        };
        let mode = fork_mode(&byid, w);
        let residue = residue_of(&byid, id);
        if let Some(o) = &w.origin {
            edges.push(LogEdge {
                parent: o.parent.clone(),
                branch: id.clone(),
                at: o.at,
                mode: mode.unwrap_or("serial"),
            });
        }
        sessions.push(LogSession {
            session: id.clone(),
            state: w.state,
            head: w.head,
            workspace: w.workspace.clone(),
            parent: w.origin.as_ref().map(|o| o.parent.clone()),
            at: w.origin.as_ref().map(|o| o.at),
            mode: w.origin.as_ref().and(mode),
            residue_clean: residue.as_ref().map(|r| r.clean),
            residue_forks: residue.map(|r| r.forks).unwrap_or_default(),
            checkpoints: w.checkpoints.clone(),
            queued: w.queued,
            pending_approvals: w.pending_approvals,
            mid_fork: w.mid_fork,
            abandoned_forks: w.abandoned_forks.clone(),
            torn: w.torn,
            error: None,
            corrupt: w.corrupt.clone(),
        });
    }
    if let Some(id) = only {
        let keep = family(&byid, &edges, id);
        sessions.retain(|s| keep.contains(&s.session));
        edges.retain(|e| keep.contains(&e.branch));
    }
    edges.sort_by(|a, b| (&a.parent, a.at, &a.branch).cmp(&(&b.parent, b.at, &b.branch)));
    Log { sessions, edges }
}

/// Tickets requested and neither granted nor consumed (a live session's only).
fn pending_tickets(st: &crate::state::State) -> impl Iterator<Item = (&String, &String)> {
    let live = st.life() == crate::state::Life::Live;
    st.tickets_requested
        .iter()
        .filter(move |(t, _)| {
            live && !st.tickets_granted.contains_key(*t) && !st.tickets_consumed.contains(*t)
        })
        .map(|(t, (tool, _))| (t, tool))
}

/// One pending approval ticket.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ticket {
    pub session: String,
    pub ticket: String,
    pub tool: String,
    /// The arguments that would be sent; null for a ticket a v1 WAL recorded without them.
    pub args: Value,
    pub args_digest: String,
    /// The step after which the emission asked.
    pub after_step: u64,
    /// The command that approves it.
    pub approve: String,
}

/// The pending tickets of one session, with the args each would send.
pub fn pending(id: &str, st: &crate::state::State) -> Vec<Ticket> {
    pending_tickets(st)
        .map(|(ticket, tool)| {
            let (args, after) = st.ticket_args.get(ticket).cloned().unwrap_or((None, 0));
            Ticket {
                session: id.to_string(),
                ticket: ticket.clone(),
                tool: tool.clone(),
                args: args.unwrap_or(Value::Null),
                args_digest: st.tickets_requested[ticket].1.clone(),
                after_step: after,
                approve: format!("revl approve {id} --ticket {ticket}"),
            }
        })
        .collect()
}

/// `revl approvals [SESSION]`.
#[derive(Debug, Clone, Serialize)]
pub struct Approvals {
    pub tickets: Vec<Ticket>,
}

pub fn approvals(store: &Store, session: Option<&str>) -> Result<Approvals> {
    let only = session.map(|s| store.resolve(s)).transpose()?;
    let mut tickets = Vec::new();
    for id in store.session_ids()? {
        if only.as_ref().is_some_and(|o| o != &id) {
            continue;
        }
        // A session whose index entry says it has no pending ticket is not replayed.
        if crate::index::read_log(store, &id).is_some_and(|f| f.pending_approvals == 0) {
            continue;
        }
        let l = Loaded {
            wal: lineage::open(&store.wal_path(&id)),
            id,
        };
        let w = match l.wal {
            Ok(w) => w,
            // Asked for this one session: its error is the answer.
            Err(e) if only.is_some() => return Err(e),
            Err(_) => continue,
        };
        tickets.extend(pending(&l.id, &w.state));
    }
    tickets.sort_by(|a, b| (&a.session, a.after_step).cmp(&(&b.session, b.after_step)));
    Ok(Approvals { tickets })
}
