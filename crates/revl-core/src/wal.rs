//! The write-ahead log (SPEC 3): JSON Lines, one record per line, each line closed by a
//! CRC-32C member: `…,"crc":"hhhhhhhh"}\n`. The format is documented in `docs/wal-format.md`.
//!
//! Reading yields *unverified* records plus what the reader saw at the tail (`torn`); only
//! the session's replay (see `state.rs`) turns them into a trusted timeline.

use crate::error::{Code, Error, Result};
use crate::failpoint::Failpoints;
use crate::step::StepKind;
use crate::steptext::{Part, Parts, StepText};
use crate::undo::{IntentAfter, Undo};
use crate::unwind::{Failed, OwedStep};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const WAL_VERSION: u64 = 1;

/// Every record of SPEC 3.2. Field names are camelCase on disk; the discriminator is
/// `"record"`. Optional fields are omitted when absent.
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
    },
    IntentVoid {
        step: u64,
        why: String,
    },
    Step(StepRecord),
    StepBack {
        to: i64,
        mode: String,
    },
    StepBackDone {
        to: i64,
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
        at: i64,
        hash: Option<String>,
    },
    ForkBegin {
        parent: String,
        branch: String,
        at: i64,
        crossed: Vec<u64>,
        would_cross: Vec<u64>,
    },
    ForkFrozen {
        parent: String,
        branch: String,
        at: i64,
        failed: Vec<Failed>,
    },
    ForkComplete {
        branch: String,
    },
    ForkBranch {
        branch: String,
        parent: String,
        at: i64,
        parent_wal: String,
        preserved: Value,
        not_preserved: Value,
        crossed: Vec<u64>,
        would_cross: Vec<u64>,
        failed: Vec<Failed>,
        provisions: Value,
    },
    ForkAbandoned {
        at: i64,
        why: String,
    },
    ModelDecision {
        step: u64,
        outcome: String,
        llm: Value,
    },
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
        self.set(p, v.map(Value::to_string).as_deref())
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

impl Record {
    pub fn name(&self) -> &'static str {
        match self {
            Record::Header { .. } => "header",
            Record::Intent { .. } => "intent",
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

/// Encode one record as its WAL line, CRC member and newline included.
pub fn encode_line(rec: &Record) -> Vec<u8> {
    let mut buf = serde_json::to_vec(rec).expect("WAL records always serialise");
    // serde_json writes an object: it ends with '}'. The CRC covers everything before the
    // comma that introduces the crc member.
    debug_assert_eq!(buf.last(), Some(&b'}'));
    buf.pop();
    let crc = crc32c::crc32c(&buf);
    buf.extend_from_slice(format!(",\"crc\":\"{crc:08x}\"}}\n").as_bytes());
    buf
}

const CRC_SUFFIX_LEN: usize = 18; // ,"crc":"hhhhhhhh"}

/// Why one line failed to decode.
#[derive(Debug)]
enum LineError {
    Shape(&'static str),
    Crc { stored: String, computed: String },
    Json(String),
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineError::Shape(s) => write!(f, "{s}"),
            LineError::Crc { stored, computed } => {
                write!(f, "CRC mismatch (stored {stored}, computed {computed})")
            }
            LineError::Json(e) => write!(f, "not a valid record: {e}"),
        }
    }
}

/// Decode one line (without its newline).
fn decode_line(line: &[u8]) -> std::result::Result<Record, LineError> {
    if line.len() < CRC_SUFFIX_LEN + 2 || line[0] != b'{' {
        return Err(LineError::Shape("line is not a CRC-closed JSON object"));
    }
    let split = line.len() - CRC_SUFFIX_LEN;
    let (body, suffix) = line.split_at(split);
    if !suffix.starts_with(b",\"crc\":\"") || !suffix.ends_with(b"\"}") {
        return Err(LineError::Shape("line does not end with its crc member"));
    }
    let stored = &suffix[8..16];
    let computed = crc32c::crc32c(body);
    let matches = stored
        .iter()
        .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        && std::str::from_utf8(stored)
            .ok()
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            == Some(computed);
    if !matches {
        return Err(LineError::Crc {
            stored: String::from_utf8_lossy(stored).into_owned(),
            computed: format!("{computed:08x}"),
        });
    }
    // UTF-8 is checked once for the line (the parser then need not check each string).
    let line = std::str::from_utf8(line).map_err(|e| LineError::Json(e.to_string()))?;
    let body = &line[..split];
    // Hot path: step records are most of a WAL. Parse the whole line straight into the
    // struct (serde's internally tagged enums buffer every value first, which is slow).
    if body.starts_with("{\"record\":\"step\",") {
        if let Some(step) = crate::stepline::decode(body) {
            return Ok(Record::Step(step));
        }
        return serde_json::from_str::<StepRecord>(line)
            .map(Record::Step)
            .map_err(|e| LineError::Json(e.to_string()));
    }
    // Parse the body closed with '}' (the crc member is not part of the record).
    let mut obj = String::with_capacity(body.len() + 1);
    obj.push_str(body);
    obj.push('}');
    serde_json::from_str::<Record>(&obj).map_err(|e| LineError::Json(e.to_string()))
}

/// A WAL as read from disk: records in order, whether the last line was torn, and the byte
/// length of the intact prefix (where the next writer truncates to).
#[derive(Debug)]
pub struct WalRead {
    pub path: PathBuf,
    pub records: Vec<Record>,
    pub torn: bool,
    pub good_len: u64,
    pub last_seq: u64,
}

impl WalRead {
    fn new(path: &Path, records: Vec<Record>, meta: WalMeta) -> Self {
        WalRead {
            path: path.to_path_buf(),
            records,
            torn: meta.torn,
            good_len: meta.good_len,
            last_seq: meta.last_seq,
        }
    }

    pub fn header(&self) -> Option<&Record> {
        self.records.first()
    }
}

/// Read and check a WAL file. A torn last line is reported and skipped; a bad line followed
/// by any good line is corruption (`corrupt-wal`, naming the path and line); an unknown
/// `walVersion` is refused.
pub fn read_wal(path: &Path) -> Result<WalRead> {
    let mut records = Vec::new();
    let meta = read_wal_each(path, |mut block| {
        records.append(&mut block);
        Ok(())
    })?;
    Ok(WalRead::new(path, records, meta))
}

/// Parse WAL bytes (see [`read_wal`]).
pub fn parse_wal(path: &Path, bytes: &[u8]) -> Result<WalRead> {
    let mut records = Vec::new();
    let meta = parse_wal_each(path, bytes, |mut block| {
        records.append(&mut block);
        Ok(())
    })?;
    Ok(WalRead::new(path, records, meta))
}

/// What reading a WAL found, besides its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalMeta {
    pub torn: bool,
    /// Byte length of the intact prefix (where the next writer truncates to).
    pub good_len: u64,
    pub last_seq: u64,
    /// Intact records, header included.
    pub records: usize,
}

/// Lines decoded per block: each block is split across the cores, then handed to `sink` in
/// order, so a long WAL is never held as one vector of records.
const BLOCK_LINES: usize = 1 << 17;

/// Check WAL bytes and hand the intact records to `sink` in order, in blocks (the same
/// checks as [`read_wal`]). An error from `sink` stops the read and is returned as is. On a
/// read error, the records accepted before the bad line are handed over first; on any
/// error, records already handed over must be discarded by the caller.
pub fn parse_wal_each(
    path: &Path,
    bytes: &[u8],
    mut sink: impl FnMut(Vec<Record>) -> Result<()>,
) -> Result<WalMeta> {
    let mut p = LineChecker::new(path);
    p.feed(bytes, 0, &mut sink)?;
    p.finish()
}

/// Read a WAL file in pieces of about [`READ_CHUNK`] bytes, handing the intact records to
/// `sink` in blocks as in [`parse_wal_each`]: the file is never held whole, so reading a
/// long WAL touches little more memory than what the caller keeps.
pub fn read_wal_each(path: &Path, sink: impl FnMut(Vec<Record>) -> Result<()>) -> Result<WalMeta> {
    read_pieces(path, READ_CHUNK, sink)
}

fn read_pieces(
    path: &Path,
    chunk: usize,
    mut sink: impl FnMut(Vec<Record>) -> Result<()>,
) -> Result<WalMeta> {
    let cannot = |e| Error::io(format!("cannot read WAL {}", path.display()), e);
    let mut f = File::open(path).map_err(cannot)?;
    // A short WAL is read in one piece of its own size (the buffer is zero-filled).
    let len = f.metadata().map_or(chunk as u64, |m| m.len());
    let chunk = chunk.min(usize::try_from(len).unwrap_or(usize::MAX).saturating_add(1));
    let mut p = LineChecker::new(path);
    // `buf[..filled]` holds bytes read and not yet handed over; the rest is room. The
    // buffer is zeroed once when it grows, not before every read.
    let mut buf: Vec<u8> = Vec::new();
    let mut filled = 0usize;
    let mut base = 0u64;
    let mut eof = false;
    while !eof {
        // At least READ_CHUNK/2 of room, more when one line is longer. (Never zero room: a
        // read into no room would look like the end of the file.)
        if buf.len() - filled < chunk.div_ceil(2).max(1) {
            buf.resize(filled + chunk.max(filled).max(1), 0);
        }
        let n = loop {
            match f.read(&mut buf[filled..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(cannot(e)),
            }
        };
        filled += n;
        eof = n == 0;
        // Hand over the complete lines (all of it at the end of the file).
        let upto = if eof {
            filled
        } else {
            match memchr::memrchr(b'\n', &buf[..filled]) {
                Some(i) => i + 1,
                None => continue,
            }
        };
        p.feed(&buf[..upto], base, &mut sink)?;
        base += upto as u64;
        buf.copy_within(upto..filled, 0);
        filled -= upto;
    }
    p.finish()
}

/// Bytes read per piece by [`read_wal_each`].
const READ_CHUNK: usize = 16 << 20;

/// The torn/corrupt/header/seq rules of SPEC 3.1, applied to a WAL fed in pieces of whole
/// lines (the last piece may end with a line that has no newline).
struct LineChecker<'p> {
    path: &'p Path,
    meta: WalMeta,
    /// A bad line is a torn tail only if no good line follows it.
    bad: Option<(usize, String)>,
    line_no: usize,
    spans: Vec<(usize, usize, bool)>,
    cores: usize,
}

impl<'p> LineChecker<'p> {
    fn new(path: &'p Path) -> Self {
        LineChecker {
            path,
            meta: WalMeta {
                torn: false,
                good_len: 0,
                last_seq: 0,
                records: 0,
            },
            bad: None,
            line_no: 0,
            spans: Vec::new(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
        }
    }

    fn corrupt(&self, line_no: usize, why: String) -> Error {
        Error::new(
            Code::CorruptWal,
            format!("corrupt WAL {} at line {line_no}: {why}", self.path.display()),
            "the file was changed outside revl; restore it from a backup (nothing was written to it)",
        )
    }

    /// Check the lines of `bytes`, which start at file offset `base`.
    fn feed(
        &mut self,
        bytes: &[u8],
        base: u64,
        sink: &mut impl FnMut(Vec<Record>) -> Result<()>,
    ) -> Result<()> {
        /// A run of lines decoded: the good records in order, and the bad lines (by their
        /// index in the run). Records are moved as whole vectors from here on.
        #[derive(Default)]
        struct Decoded {
            records: Vec<Record>,
            bad: Vec<(usize, LineError)>,
        }
        let decode = |spans: &[(usize, usize, bool)]| -> Decoded {
            let mut d = Decoded {
                records: Vec::with_capacity(spans.len()),
                bad: Vec::new(),
            };
            for (i, span) in spans.iter().enumerate() {
                let r = if span.2 {
                    decode_line(&bytes[span.0..span.1])
                } else {
                    Err(LineError::Shape("last line has no newline"))
                };
                match r {
                    Ok(rec) => d.records.push(rec),
                    Err(e) => d.bad.push((i, e)),
                }
            }
            d
        };
        let mut pos = 0usize;
        while pos < bytes.len() {
            // Split the next block into lines (cheap) ...
            let mut spans = std::mem::take(&mut self.spans);
            spans.clear();
            while pos < bytes.len() && spans.len() < BLOCK_LINES {
                match memchr_nl(&bytes[pos..]) {
                    Some(i) => {
                        spans.push((pos, pos + i, true));
                        pos += i + 1;
                    }
                    None => {
                        spans.push((pos, bytes.len(), false));
                        pos = bytes.len();
                    }
                }
            }
            // ... decode it on every core (CRC + JSON is the cost) ...
            let threads = if spans.len() < 2_048 { 1 } else { self.cores };
            let per = spans.len().div_ceil(threads).max(1);
            let runs: Vec<Decoded> = if threads == 1 {
                vec![decode(&spans)]
            } else {
                std::thread::scope(|sc| {
                    let handles: Vec<_> = spans
                        .chunks(per)
                        .map(|c| sc.spawn(move || decode(c)))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_default())
                        .collect()
                })
            };
            let decoded: usize = runs.iter().map(|d| d.records.len() + d.bad.len()).sum();
            if decoded != spans.len() {
                return Err(self.corrupt(self.line_no + 1, "a decoder thread failed".into()));
            }
            // ... and walk the results in order, handing over each run whole.
            for (run, lines) in runs.into_iter().zip(spans.chunks(per)) {
                let Decoded { mut records, bad } = run;
                let mut bad = bad.into_iter().peekable();
                let mut good = 0usize;
                for (i, span) in lines.iter().enumerate() {
                    self.line_no += 1;
                    if let Some((_, e)) = bad.next_if(|(b, _)| *b == i) {
                        if let Some((n, why)) = self.bad.take() {
                            // Two bad lines: the first is not a torn tail.
                            records.truncate(good);
                            sink(records)?;
                            return Err(self.corrupt(n, why));
                        }
                        self.bad = Some((self.line_no, e.to_string()));
                        continue;
                    }
                    if let Err(e) = self.accept(&records[good]) {
                        records.truncate(good);
                        sink(records)?;
                        return Err(e);
                    }
                    good += 1;
                    self.meta.good_len = base + (span.1 + usize::from(span.2)) as u64;
                }
                if !records.is_empty() {
                    sink(records)?;
                }
            }
            self.spans = spans;
        }
        Ok(())
    }

    /// The checks on a good line: what came before it, the header, `seq`.
    fn accept(&mut self, rec: &Record) -> Result<()> {
        if let Some((n, why)) = self.bad.take() {
            return Err(self.corrupt(n, why));
        }
        if self.meta.records == 0 {
            match rec {
                Record::Header { wal_version, .. } if *wal_version == WAL_VERSION => {}
                Record::Header { wal_version, .. } => {
                    return Err(Error::new(
                        Code::CorruptWal,
                        format!(
                            "WAL {} has walVersion {wal_version}; this revl reads version {WAL_VERSION}",
                            self.path.display()
                        ),
                        "use the revl release that wrote this WAL",
                    ))
                }
                _ => return Err(self.corrupt(1, "first record is not a header".into())),
            }
        } else if let Some(s) = rec.seq() {
            // seq must strictly increase.
            if s <= self.meta.last_seq {
                return Err(self.corrupt(
                    self.line_no,
                    format!(
                        "seq {s} does not increase (previous {})",
                        self.meta.last_seq
                    ),
                ));
            }
        }
        if let Some(s) = rec.seq() {
            self.meta.last_seq = s;
        }
        self.meta.records += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<WalMeta> {
        self.meta.torn = self.bad.is_some();
        if self.meta.records == 0 {
            let why = if self.meta.torn {
                "the header line is torn"
            } else {
                "the file is empty"
            };
            return Err(self.corrupt(1, why.into()));
        }
        Ok(self.meta)
    }
}

fn memchr_nl(b: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', b)
}

/// Appends records to one WAL. After any failed write or fsync the writer is poisoned and
/// refuses further writes until the session is attached again (an fsync is never retried).
#[derive(Debug)]
pub struct WalWriter {
    file: File,
    path: PathBuf,
    next_seq: u64,
    records: usize,
    dirty: bool,
    poisoned: bool,
    fp: Failpoints,
}

impl WalWriter {
    /// Open for appending, truncating a torn tail first (the reader said where it ends).
    pub fn open(read: &WalRead, fp: Failpoints) -> Result<Self> {
        let path = read.path.clone();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("cannot open WAL {}", path.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(path.display(), e))?
            .len();
        if len != read.good_len {
            // The torn tail is the crash itself: cut it off, durably, before appending.
            file.set_len(read.good_len)
                .and_then(|_| file.sync_all())
                .map_err(|e| {
                    Error::io(
                        format!("cannot truncate torn tail of {}", path.display()),
                        e,
                    )
                })?;
        }
        file.seek(SeekFrom::End(0))
            .map_err(|e| Error::io(path.display(), e))?;
        Ok(WalWriter {
            file,
            path,
            next_seq: read.last_seq + 1,
            records: read.records.len(),
            dirty: false,
            poisoned: false,
            fp,
        })
    }

    /// The seq the next seq-taking record will carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Reserve a seq for a record about to be appended.
    pub fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn set_records(&mut self, n: usize) {
        self.records = n;
    }

    /// Number of records in the WAL (header included).
    pub fn records(&self) -> usize {
        self.records
    }

    /// Append one record. `durable` = fsync before returning (announcing records);
    /// otherwise the record is group-committed by the next [`WalWriter::sync`].
    pub fn append(&mut self, rec: &Record, durable: bool) -> Result<()> {
        self.append_many(std::slice::from_ref(rec), durable)
    }

    /// Append several records in one write (an emission and its compensation go out together).
    pub fn append_many(&mut self, recs: &[Record], durable: bool) -> Result<()> {
        if self.poisoned {
            return Err(Error::new(
                Code::Io,
                format!("an earlier write to {} failed", self.path.display()),
                "run the command again: revl re-reads the WAL and repairs before writing",
            ));
        }
        let mut buf = Vec::new();
        for r in recs {
            buf.extend(encode_line(r));
        }
        if self.fp.fires("wal.torn-append") {
            let half = buf.len() / 2;
            let _ = self.file.write_all(&buf[..half]);
            let _ = self.file.sync_all();
            crate::failpoint::crash("wal.torn-append");
        }
        let res = self
            .fp
            .enospc()
            .and_then(|_| self.file.write_all(&buf))
            .and_then(|_| {
                if durable {
                    self.file.sync_data()
                } else {
                    Ok(())
                }
            });
        if let Err(e) = res {
            self.poisoned = true;
            // Best effort: do not leave a partial line behind for the next writer to mistake
            // for a torn tail of an acknowledged record (it would be one anyway: unacknowledged).
            return Err(Error::io(
                format!("cannot append to WAL {}", self.path.display()),
                e,
            ));
        }
        self.records += recs.len();
        self.dirty = !durable;
        Ok(())
    }

    /// Make every appended record durable (group commit of outcome records).
    pub fn sync(&mut self) -> Result<()> {
        if self.poisoned {
            return Err(Error::new(
                Code::Io,
                format!("an earlier write to {} failed", self.path.display()),
                "run the command again: revl re-reads the WAL and repairs before writing",
            ));
        }
        if self.dirty {
            if let Err(e) = self.file.sync_data() {
                self.poisoned = true;
                return Err(Error::io(
                    format!("cannot fsync WAL {}", self.path.display()),
                    e,
                ));
            }
            self.dirty = false;
        }
        Ok(())
    }
}

/// Write a whole new WAL (header and first records) by temp file, fsync, rename, and fsync of
/// the directory: it appears complete or not at all.
pub fn create_wal(path: &Path, recs: &[Record], fp: &Failpoints) -> Result<()> {
    let dir = path.parent().expect("a WAL path has a parent");
    let tmp = dir.join(".wal.jsonl.tmp");
    let mut buf = Vec::new();
    for r in recs {
        buf.extend(encode_line(r));
    }
    let res = (|| -> std::io::Result<()> {
        fp.enospc()?;
        let mut f = File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    res.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(format!("cannot create WAL {}", path.display()), e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Record {
        Record::Header {
            wal_version: 1,
            seq: 0,
            session: "s".into(),
            workspace: "/w".into(),
            manifest_digest: None,
            created_by: "test".into(),
            guarantee: "g".into(),
            ts: None,
        }
    }

    #[test]
    fn line_roundtrip_and_crc_position() {
        let line = encode_line(&header());
        let s = std::str::from_utf8(&line).unwrap();
        assert!(s.starts_with("{\"record\":\"header\""));
        assert!(s.ends_with("\"}\n"));
        let crc_at = s.rfind(",\"crc\":\"").unwrap();
        let want = format!("{:08x}", crc32c::crc32c(&line[..crc_at]));
        assert_eq!(&s[crc_at + 8..crc_at + 16], want);
        let back = decode_line(&line[..line.len() - 1]).unwrap();
        assert_eq!(back, header());
    }

    #[test]
    fn torn_tail_vs_corruption() {
        let mut bytes = encode_line(&header());
        bytes.extend(encode_line(&Record::AbortBegin {}));
        let good = bytes.len();
        bytes.extend_from_slice(b"{\"record\":\"undo");
        let r = parse_wal(Path::new("w"), &bytes).unwrap();
        assert!(r.torn);
        assert_eq!(r.good_len as usize, good);
        assert_eq!(r.records.len(), 2);
        // A flipped byte in line 2 followed by a good line is corruption at line 2.
        let mut bytes = encode_line(&header());
        let mid = bytes.len() + 5;
        bytes.extend(encode_line(&Record::AbortBegin {}));
        bytes.extend(encode_line(&Record::ActivationComplete {}));
        bytes[mid] ^= 0x01;
        let e = parse_wal(Path::new("w"), &bytes).unwrap_err();
        assert_eq!(e.code, Code::CorruptWal);
        assert!(e.message.contains("line 2"), "{}", e.message);
    }

    /// A WAL longer than one decoding block: a bad line on either side of the block edge is
    /// still corruption when a good line follows it (in the next block), and a torn tail is
    /// still a torn tail.
    #[test]
    fn block_edges_keep_the_torn_and_corrupt_rules() {
        let mut bytes = encode_line(&header());
        let mut starts = vec![0usize];
        for _ in 0..BLOCK_LINES + 10 {
            starts.push(bytes.len());
            bytes.extend(encode_line(&Record::AbortBegin {}));
        }
        let whole = parse_wal(Path::new("w"), &bytes).unwrap();
        assert_eq!(whole.records.len(), BLOCK_LINES + 11);
        assert!(!whole.torn);
        for line in [BLOCK_LINES - 1, BLOCK_LINES, BLOCK_LINES + 1] {
            let mut bad = bytes.clone();
            bad[starts[line - 1] + 3] ^= 0x01;
            let e = parse_wal(Path::new("w"), &bad).unwrap_err();
            assert_eq!(e.code, Code::CorruptWal);
            assert!(
                e.message.contains(&format!("line {line}:")),
                "{}",
                e.message
            );
        }
        let mut torn = bytes.clone();
        torn.extend_from_slice(b"{\"record\":\"abo");
        let r = parse_wal(Path::new("w"), &torn).unwrap();
        assert!(r.torn);
        assert_eq!(r.good_len as usize, bytes.len());
        assert_eq!(r.records.len(), BLOCK_LINES + 11);
    }

    /// Reading in pieces (here a few bytes each, so every line straddles reads) finds the
    /// same records, the same torn tail and the same corruption as reading the whole file.
    #[test]
    fn reading_in_pieces_agrees_with_reading_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        let mut bytes = encode_line(&header());
        for _ in 0..40 {
            bytes.extend(encode_line(&Record::AbortBegin {}));
        }
        let mut torn = bytes.clone();
        torn.extend_from_slice(b"{\"record\":\"abo");
        let mut corrupt = bytes.clone();
        let at = corrupt.len() - 30;
        corrupt[at] ^= 0x01;
        corrupt.extend(encode_line(&Record::AbortBegin {}));
        for case in [&bytes, &torn, &corrupt, &Vec::new()] {
            std::fs::write(&path, case).unwrap();
            let whole = parse_wal(&path, case);
            for chunk in [1usize, 7, 64, 1 << 20] {
                let mut recs = Vec::new();
                let pieces = read_pieces(&path, chunk, |mut block| {
                    recs.append(&mut block);
                    Ok(())
                });
                match (&whole, pieces) {
                    (Ok(w), Ok(m)) => {
                        assert_eq!(w.records, recs, "chunk {chunk}");
                        assert_eq!(
                            (w.torn, w.good_len, w.last_seq),
                            (m.torn, m.good_len, m.last_seq)
                        );
                    }
                    (Err(a), Err(b)) => assert_eq!(a.message, b.message, "chunk {chunk}"),
                    (a, b) => panic!("chunk {chunk}: whole {a:?} vs pieces {b:?}"),
                }
            }
        }
    }
}
