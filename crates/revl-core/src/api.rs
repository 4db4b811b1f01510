//! What every front end (the CLI, the MCP server, the Python package) takes from the core,
//! so that none of them decides anything: where the default store is, what a verb's answer
//! is (a result, or one of the two refusals that have their own document), the repairs an
//! attach made, and the `new` document. Front ends format these; they never read a JSON
//! document back to tell a refusal from a result.

use crate::error::{Code, Error, Result};
use crate::report::{to_json, CallResult, CommitResult, ForkReport};
use crate::session::{Repaired, Session};
use crate::store::Store;
use serde::Serialize;
use serde_json::Value;
use std::path::PathBuf;

/// The store a front end uses when none is given: `$REVL_STORE`, else
/// `$XDG_STATE_HOME/revl`, else `~/.local/state/revl`.
pub fn default_store_root() -> Result<PathBuf> {
    if let Some(s) = std::env::var_os("REVL_STORE").filter(|s| !s.is_empty()) {
        return Ok(PathBuf::from(s));
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()) {
        return Ok(PathBuf::from(x).join("revl"));
    }
    match std::env::var_os("HOME").filter(|s| !s.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".local/state/revl")),
        None => Err(Error::new(
            Code::Usage,
            "no store: HOME is not set",
            "pass --store DIR or set REVL_STORE",
        )),
    }
}

/// Open (creating) the store at `root` as every front end does: crash points from
/// `REVL_FAILPOINT` (tests), the lock wait from `REVL_LOCK_WAIT_MS` (tests of `busy`). With
/// `new_workspace`, for `new` on it: an overlapping store and workspace are refused before
/// anything is created.
pub fn open_store(
    root: &std::path::Path,
    new_workspace: Option<&std::path::Path>,
) -> Result<Store> {
    let fp = crate::Failpoints::from_env();
    let mut store = match new_workspace {
        Some(ws) => Store::open_for(root, ws, fp)?,
        None => Store::open(root, fp)?,
    };
    if let Some(ms) = std::env::var("REVL_LOCK_WAIT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        store = store.with_lock_wait(std::time::Duration::from_millis(ms));
    }
    Ok(store)
}

/// A verb's own-shape refusal (docs/reference.md, "Errors and exit codes"): its document
/// says what happened; front ends map it to exit 1 (CLI), `isError: true` (MCP), or an
/// exception carrying the document (Python). It carries its own words ([`Refusal::message`],
/// [`Refusal::hint`]): the CLI's stderr line and the Python exception say the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A commit or fork confirm whose hash no longer matches (`refused: true`): nothing ran.
    /// `reason` is the document's.
    StaleHash { reason: String },
    /// An emission without a usable approval (`approvalRequired: true`): nothing fired.
    /// `tool`, `ticket` and `hint` are the document's.
    ApprovalRequired {
        ticket: String,
        tool: String,
        hint: String,
    },
}

impl Refusal {
    /// The error code the refusal goes by (`stale-hash`, `approval-required`).
    pub fn code(&self) -> &'static str {
        self.kind().code()
    }

    pub fn kind(&self) -> RefusalKind {
        match self {
            Refusal::StaleHash { .. } => RefusalKind::StaleHash,
            Refusal::ApprovalRequired { .. } => RefusalKind::ApprovalRequired,
        }
    }

    /// What happened, in one line.
    pub fn message(&self) -> String {
        match self {
            Refusal::StaleHash { reason } => reason.clone(),
            Refusal::ApprovalRequired { ticket, tool, .. } => {
                format!("approval required for {tool} (ticket {ticket}): nothing was sent")
            }
        }
    }

    /// What to do next.
    pub fn hint(&self) -> String {
        match self {
            Refusal::StaleHash { .. } => {
                "ask again (commit, or fork at the step) and confirm with the new hash".into()
            }
            Refusal::ApprovalRequired { hint, .. } => hint.clone(),
        }
    }

    /// The approval ticket, for an approval required.
    pub fn ticket(&self) -> Option<&str> {
        match self {
            Refusal::ApprovalRequired { ticket, .. } => Some(ticket),
            Refusal::StaleHash { .. } => None,
        }
    }
}

/// The two refusals by name (`docs/schema/wire.json` lists their codes beside the error
/// codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalKind {
    StaleHash,
    ApprovalRequired,
}

impl RefusalKind {
    pub const ALL: [RefusalKind; 2] = [RefusalKind::StaleHash, RefusalKind::ApprovalRequired];

    pub fn code(self) -> &'static str {
        match self {
            RefusalKind::StaleHash => "stale-hash",
            RefusalKind::ApprovalRequired => "approval-required",
        }
    }
}

/// A verb's typed result: its JSON document (the CLI's `--json`), and whether it is a
/// refusal.
pub trait Answer: Serialize {
    /// `Some` when the verb refused with its own document.
    fn refusal(&self) -> Option<Refusal> {
        None
    }

    fn document(&self) -> Value
    where
        Self: Sized,
    {
        to_json(self)
    }
}

impl Answer for CallResult {
    fn refusal(&self) -> Option<Refusal> {
        match self {
            CallResult::ApprovalRequired {
                ticket, tool, hint, ..
            } => Some(Refusal::ApprovalRequired {
                ticket: ticket.clone(),
                tool: tool.clone(),
                hint: hint.clone(),
            }),
            _ => None,
        }
    }
}

impl Answer for CommitResult {
    fn refusal(&self) -> Option<Refusal> {
        match self {
            CommitResult::Refused { reason, .. } => Some(Refusal::StaleHash {
                reason: (*reason).to_string(),
            }),
            CommitResult::Committed { .. } => None,
        }
    }
}

impl Answer for ForkReport {
    fn refusal(&self) -> Option<Refusal> {
        (self.refused == Some(true)).then(|| Refusal::StaleHash {
            reason: self
                .reason
                .clone()
                .unwrap_or_else(|| "stale hash: nothing ran".into()),
        })
    }
}

macro_rules! plain_answers {
    ($($t:ty),* $(,)?) => { $(impl Answer for $t {})* };
}

plain_answers!(
    crate::report::Stepped,
    crate::report::ExecReport,
    crate::report::Timeline,
    crate::report::Inspect,
    crate::report::Status,
    crate::report::Verify,
    crate::report::CommitPlan,
    crate::report::StepBackReport,
    crate::report::AbortReport,
    crate::report::ReadAt,
    crate::report::FileRead,
    crate::report::Listing,
    crate::report::Sessions,
    crate::report::Approval,
    crate::report::Resent,
    crate::report::ModelNote,
    crate::log::Log,
    crate::log::Approvals,
    crate::lineage::Compare,
    crate::session::diff::DiffReport,
    crate::session::Bound,
    crate::session::Position,
    Created,
);

/// `new`: the session made, its workspace and its WAL.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Created {
    pub session: String,
    pub workspace: String,
    pub wal: String,
}

impl Created {
    pub fn of(s: &Session) -> Created {
        Created {
            session: s.id().to_string(),
            workspace: s.state().workspace.clone(),
            wal: s.wal_path().display().to_string(),
        }
    }
}

/// A verb's document with what attaching repaired (`repaired: [...]`): a repair is durable
/// even when nobody asked for it, and whoever called must be told.
pub fn with_repairs(mut doc: Value, repaired: &[Repaired]) -> Value {
    if let (false, Value::Object(m)) = (repaired.is_empty(), &mut doc) {
        m.insert("repaired".into(), to_json(&repaired.to_vec()));
    }
    doc
}
