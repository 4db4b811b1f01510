//! Every record of docs/wal-format.md, "Records" (one serde enum) and the `step` record,
//! whose text members are packed in a [`StepText`].

use crate::error::{Error, Result};
use crate::step::{Pos, StepKind};
use crate::steptext::{Part, Parts, StepText};
use crate::undo::{FileKind, IntentAfter, Undo};
use crate::unwind::{Failed, OwedStep};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// Every record of docs/wal-format.md, "Records". Field names are camelCase on disk; the
/// discriminator is `"record"`. Optional fields are omitted when absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "record",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum Record {
    Header {
        wal_version: u64,
        seq: u64,
        session: String,
        workspace: String,
        manifest_digest: Option<String>,
        created_by: String,
        guarantee: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ts: Option<String>,
    },
    Intent {
        step: u64,
        kind: String,
        label: String,
        site: String,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            serialize_with = "crate::undo::sorted_opt"
        )]
        undo: Option<Undo>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preimage: Option<Value>,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            serialize_with = "crate::undo::sorted_opt"
        )]
        after: Option<IntentAfter>,
        /// v2 (docs/wal-format.md, "Durability order"): a small in-place write's new bytes,
        /// so that this intent's one fsync makes the write durable (see [`Redo`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        redo: Option<Redo>,
        /// v3 (docs/user-guide.md §8): an exec with declared egress: its whole argv, so
        /// that a repair after a crash mid-connection names the command in the emission it
        /// records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        argv: Option<Vec<String>>,
    },
    IntentVoid {
        step: u64,
        why: String,
    },
    Step(StepRecord),
    StepBack {
        to: Pos,
        mode: String,
        /// v4: drift on witnessed paths the tail never touched is left as it is
        /// (`--keep-drift`), not restored to step `to`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        keep_drift: bool,
    },
    StepBackDone {
        to: Pos,
        failed: Vec<Failed>,
        /// v2: crossing inverses a repaired compensating step-back did not run.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        owed: Vec<OwedStep>,
    },
    AbortBegin {},
    Undone {
        step: u64,
        by: String,
    },
    ReplayFence {
        step: u64,
    },
    DeferredEmission {
        seq: u64,
        tool: String,
        service: String,
        method: String,
        args: Value,
        after_step: u64,
    },
    DeferredDropped {
        seqs: Vec<u64>,
        by: String,
    },
    ApprovalRequested {
        ticket: String,
        tool: String,
        args_digest: String,
        /// v2 (docs/user-guide.md §7): the arguments that would be sent, so `revl
        /// approvals` can show a human what crosses (absent in v1 WALs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        args: Option<Value>,
    },
    ApprovalGranted {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ticket: Option<String>,
        tool: String,
        session: String,
        standing: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        args_digest: Option<String>,
    },
    ApprovalConsumed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ticket: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    CommitApproved {
        hash: String,
    },
    Flushed {
        seq: u64,
    },
    FlushResidue {
        seq: u64,
        error: Value,
    },
    Discharge {
        steps: Vec<u64>,
    },
    ActivationComplete {},
    Aborted {
        replayed: Vec<u64>,
        compensations_ran: Vec<u64>,
        dropped_deferred: Vec<u64>,
        failed: Vec<Failed>,
        owed: Vec<OwedStep>,
    },
    ForkPending {
        at: Pos,
        hash: Option<String>,
    },
    ForkBegin {
        parent: String,
        branch: String,
        at: Pos,
        crossed: Vec<u64>,
        would_cross: Vec<u64>,
        /// v2 (docs/user-guide.md §6): a parallel fork's new workspace; the parent is not rewound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        into: Option<String>,
        /// v2: revl made that directory (else it was an empty directory already).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        into_created: bool,
        /// v4: drift on witnessed paths the tail never touched is left as it is
        /// (`--keep-drift`), not restored to step `at`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        keep_drift: bool,
    },
    ForkFrozen {
        parent: String,
        branch: String,
        at: Pos,
        failed: Vec<Failed>,
    },
    ForkComplete {
        branch: String,
    },
    ForkBranch {
        branch: String,
        /// The parent session's id: with `parent_remote`, the session reference a branch names
        /// its parent by (docs/wal-format.md, "Parents by id").
        parent: String,
        at: Pos,
        /// walVersion 2: the remote the parent lives on (a branch of a remote session),
        /// absent for a parent in the branch's own store. Never in a walVersion-1 WAL.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_remote: Option<String>,
        /// walVersion 1 only (required there, never written since): the parent's WAL as an
        /// absolute path, or `remote NAME: sessions/<id>` for a remote parent. Readers take
        /// only the remote's name from it; the parent is found by `parent`, in the store.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_wal: Option<String>,
        preserved: Value,
        not_preserved: Value,
        crossed: Vec<u64>,
        would_cross: Vec<u64>,
        failed: Vec<Failed>,
        provisions: Value,
    },
    ForkAbandoned {
        at: Pos,
        why: String,
    },
    ModelDecision {
        step: u64,
        outcome: String,
        llm: Value,
    },
    /// v2 (docs/wal-format.md, "Durability order"): every in-place write up to step
    /// `through` is durable in its file (it was fsynced); repair after a power loss no
    /// longer needs those intents' `redo`.
    FilesSynced {
        through: u64,
    },
    /// v2 (docs/user-guide.md §3): drifted content saved to the blob store before an
    /// inverse ran over it.
    Preserved {
        step: u64,
        path: String,
        kind: FileKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
        digest: String,
    },
    /// v3 (docs/langgraph.md): a checkpoint of a front end (a LangGraph checkpoint id) bound to the
    /// timeline position `at` (the session's head when it was bound). Metadata only: it
    /// changes nothing in the workspace or the queue, and is allowed on a committed or
    /// aborted session (a graph may checkpoint after its last tool committed).
    Bind {
        label: String,
        at: u64,
    },
    /// v3 (docs/user-guide.md §8): a connection an exec's proxy is about to open (durable before it
    /// forwards a byte), or an attempt it refused (`denied`, with `why`; nothing forwarded).
    /// `step` is the exec's intent, `conn` numbers its connections from 1.
    NetConnect {
        step: u64,
        conn: u64,
        dest: String,
        port: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resolved: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        denied: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ts: Option<String>,
    },
    /// v3 (docs/user-guide.md §8): a forwarded connection closed, with what it carried each way.
    NetClose {
        step: u64,
        conn: u64,
        dest: String,
        port: u16,
        bytes_up: u64,
        bytes_down: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ts: Option<String>,
    },
    /// v4 (docs/langgraph.md, "What is kept where"): a LangGraph checkpoint of thread
    /// `thread`, namespace `ns`, whose serialized content (opaque to revl) is the blob
    /// `blob`, written durably before this record (`uses`: see below). `at`: a checkpoint of the root
    /// namespace is also bound to that timeline position, as a `bind` record binds one.
    /// Metadata only; allowed on a live, committed or aborted session, never on a frozen one.
    Checkpoint {
        thread: String,
        ns: String,
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<String>,
        blob: String,
        /// The blobs of earlier checkpoints that hold channel values this one still uses
        /// (kept, pushed and read back while this checkpoint is).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        uses: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<u64>,
    },
    /// v4: pending writes of checkpoint `checkpoint` (LangGraph's `put_writes`), their
    /// serialized content the blob `blob`.
    CheckpointWrites {
        thread: String,
        ns: String,
        checkpoint: String,
        blob: String,
    },
    /// v4: a tombstone: the checkpoints `ids` of namespace `ns` of `thread` (and their
    /// writes) are forgotten; with no `ns`, every checkpoint of the thread recorded so far.
    /// Their blobs may then be collected by `gc`.
    CheckpointForget {
        thread: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ns: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ids: Vec<String>,
    },
    /// v4: thread `thread` now stands at checkpoint `id` (a time travel); written on the
    /// session that continues the thread (the branch a travel made, or the same session).
    CheckpointTip {
        thread: String,
        id: String,
    },
}

/// The new bytes of a small in-place write, in its intent (v2, docs/wal-format.md,
/// "Durability order"). The write is acknowledged once the intent is fsynced and the bytes
/// are written (not yet fsynced): one ordered sync instead of three. The file is fsynced
/// later, in batches (`files-synced`). Repair rolls such an intent forward (never back),
/// and after a power loss (the machine's boot id differs from `boot`) writes the bytes
/// again wherever the file still shows its preimage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Redo {
    /// The new content, base64 (at most 4 KiB).
    #[serde(serialize_with = "crate::util::ser_plain_str")]
    pub content: String,
    /// `/proc/sys/kernel/random/boot_id` when the write was made.
    pub boot: String,
}

/// A `step` record: one timeline step, as it happened. Its text members (label, site, ts,
/// and the JSON of detail, scope, undoScope, undo) are held packed in a [`StepText`].
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    pub seq: u64,
    pub step: u64,
    pub kind: StepKind,
    pub text: StepText,
    pub undo_idempotent: Option<bool>,
    pub compensation: Option<u64>,
}

fn too_large() -> Error {
    Error::bad_args(
        "a step's label, site and JSON members are over 4 GiB together",
        "pass smaller arguments; large content belongs in files",
    )
}

impl StepRecord {
    /// A step with its label, site and detail; no scope, undo or timestamp yet.
    pub fn new(
        seq: u64,
        step: u64,
        kind: StepKind,
        label: &str,
        site: &str,
        detail: &Value,
    ) -> Result<StepRecord> {
        let detail = detail.to_string();
        let mut parts = Parts::default();
        parts.set(Part::Label, Some(label));
        parts.set(Part::Site, Some(site));
        parts.set(Part::Detail, Some(&detail));
        Ok(StepRecord {
            seq,
            step,
            kind,
            text: StepText::pack(parts).ok_or_else(too_large)?,
            undo_idempotent: None,
            compensation: None,
        })
    }

    fn set(&mut self, p: Part, v: Option<&str>) -> Result<()> {
        let mut parts = self.text.parts();
        parts.set(p, v);
        self.text = StepText::pack(parts).ok_or_else(too_large)?;
        Ok(())
    }

    pub fn set_ts(&mut self, ts: Option<&str>) -> Result<()> {
        self.set(Part::Ts, ts)
    }

    fn set_json(&mut self, p: Part, v: Option<&Value>) -> Result<()> {
        self.set(p, v.map(crate::util::json_text).as_deref())
    }

    pub fn set_scope(&mut self, v: Option<&Value>) -> Result<()> {
        self.set_json(Part::Scope, v)
    }

    pub fn set_undo_scope(&mut self, v: Option<&Value>) -> Result<()> {
        self.set_json(Part::UndoScope, v)
    }

    /// The inverse descriptor (an [`crate::undo::Undo`], or any JSON for hand-made WALs),
    /// written with its object keys sorted.
    pub fn set_undo<T: Serialize>(&mut self, v: Option<&T>) -> Result<()> {
        let v = v.map(crate::undo::to_value);
        self.set_json(Part::Undo, v.as_ref())
    }
}

/// A recorded JSON member, written verbatim.
struct RawMember<'a>(&'a str);

impl Serialize for RawMember<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        // Well-formed by construction; borrowed, so this checks without copying.
        serde_json::from_str::<&RawValue>(self.0)
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

/// Members in the one order revl writes (the step-line decoder reads this shape).
impl Serialize for StepRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let t = &self.text;
        let mut m = s.serialize_struct("StepRecord", 12)?;
        m.serialize_field("seq", &self.seq)?;
        m.serialize_field("step", &self.step)?;
        m.serialize_field("kind", &self.kind)?;
        m.serialize_field("label", t.label())?;
        m.serialize_field("site", t.site())?;
        m.serialize_field("detail", &RawMember(t.detail_raw()))?;
        for p in [Part::Scope, Part::UndoScope, Part::Undo] {
            if let Some(raw) = t.get(p) {
                m.serialize_field(p.name(), &RawMember(raw))?;
            }
        }
        if let Some(i) = self.undo_idempotent {
            m.serialize_field("undoIdempotent", &i)?;
        }
        if let Some(c) = self.compensation {
            m.serialize_field("compensation", &c)?;
        }
        if let Some(ts) = t.ts() {
            m.serialize_field("ts", ts)?;
        }
        m.end()
    }
}

/// The serde shape of a step record, for lines not in the canonical shape. (Unknown members
/// are ignored so a whole line, `record` and `crc` members included, parses in one pass.)
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StepWire<'a> {
    seq: u64,
    step: u64,
    kind: StepKind,
    label: String,
    site: String,
    #[serde(borrow)]
    detail: &'a RawValue,
    #[serde(default, borrow)]
    scope: Option<&'a RawValue>,
    #[serde(default, borrow)]
    undo_scope: Option<&'a RawValue>,
    #[serde(default, borrow)]
    undo: Option<&'a RawValue>,
    #[serde(default)]
    undo_idempotent: Option<bool>,
    #[serde(default)]
    compensation: Option<u64>,
    #[serde(default)]
    ts: Option<String>,
}

impl<'de> Deserialize<'de> for StepRecord {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let w = StepWire::deserialize(d)?;
        let raw = |v: Option<&'de RawValue>| v.map(RawValue::get);
        let parts = Parts([
            Some(&w.label),
            Some(&w.site),
            w.ts.as_deref(),
            Some(w.detail.get()),
            raw(w.scope),
            raw(w.undo_scope),
            raw(w.undo),
        ]);
        Ok(StepRecord {
            seq: w.seq,
            step: w.step,
            kind: w.kind,
            text: StepText::pack(parts).ok_or_else(|| {
                serde::de::Error::custom("a step's members are over 4 GiB together")
            })?,
            undo_idempotent: w.undo_idempotent,
            compensation: w.compensation,
        })
    }
}

/// The name of every record (`"record"` on disk), in declaration order. A unit test holds
/// it equal to the enum and to the record table of `docs/wal-format.md`.
pub const RECORD_NAMES: [&str; 36] = [
    "header",
    "intent",
    "intent-void",
    "step",
    "step-back",
    "step-back-done",
    "abort-begin",
    "undone",
    "replay-fence",
    "deferred-emission",
    "deferred-dropped",
    "approval-requested",
    "approval-granted",
    "approval-consumed",
    "commit-approved",
    "flushed",
    "flush-residue",
    "discharge",
    "activation-complete",
    "aborted",
    "fork-pending",
    "fork-begin",
    "fork-frozen",
    "fork-complete",
    "fork-branch",
    "fork-abandoned",
    "model-decision",
    "files-synced",
    "preserved",
    "bind",
    "net-connect",
    "net-close",
    "checkpoint",
    "checkpoint-writes",
    "checkpoint-forget",
    "checkpoint-tip",
];

impl Record {
    pub fn name(&self) -> &'static str {
        match self {
            Record::Header { .. } => "header",
            Record::Intent { .. } => "intent",
            Record::FilesSynced { .. } => "files-synced",
            Record::IntentVoid { .. } => "intent-void",
            Record::Step(_) => "step",
            Record::StepBack { .. } => "step-back",
            Record::StepBackDone { .. } => "step-back-done",
            Record::AbortBegin {} => "abort-begin",
            Record::Undone { .. } => "undone",
            Record::ReplayFence { .. } => "replay-fence",
            Record::DeferredEmission { .. } => "deferred-emission",
            Record::DeferredDropped { .. } => "deferred-dropped",
            Record::ApprovalRequested { .. } => "approval-requested",
            Record::ApprovalGranted { .. } => "approval-granted",
            Record::ApprovalConsumed { .. } => "approval-consumed",
            Record::CommitApproved { .. } => "commit-approved",
            Record::Flushed { .. } => "flushed",
            Record::FlushResidue { .. } => "flush-residue",
            Record::Discharge { .. } => "discharge",
            Record::ActivationComplete {} => "activation-complete",
            Record::Aborted { .. } => "aborted",
            Record::ForkPending { .. } => "fork-pending",
            Record::ForkBegin { .. } => "fork-begin",
            Record::ForkFrozen { .. } => "fork-frozen",
            Record::ForkComplete { .. } => "fork-complete",
            Record::ForkBranch { .. } => "fork-branch",
            Record::ForkAbandoned { .. } => "fork-abandoned",
            Record::ModelDecision { .. } => "model-decision",
            Record::Preserved { .. } => "preserved",
            Record::Bind { .. } => "bind",
            Record::NetConnect { .. } => "net-connect",
            Record::NetClose { .. } => "net-close",
            Record::Checkpoint { .. } => "checkpoint",
            Record::CheckpointWrites { .. } => "checkpoint-writes",
            Record::CheckpointForget { .. } => "checkpoint-forget",
            Record::CheckpointTip { .. } => "checkpoint-tip",
        }
    }

    /// The seq this record carries, if it is one that takes a seq.
    pub fn seq(&self) -> Option<u64> {
        match self {
            Record::Header { seq, .. } => Some(*seq),
            Record::Step(s) => Some(s.seq),
            Record::DeferredEmission { seq, .. } => Some(*seq),
            _ => None,
        }
    }
}
