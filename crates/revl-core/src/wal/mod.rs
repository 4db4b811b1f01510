//! The write-ahead log (docs/wal-format.md): JSON Lines, one record per line, each line closed by a
//! CRC-32C member: `…,"crc":"hhhhhhhh"}\n`. The format is documented in `docs/wal-format.md`.
//!
//! Reading yields *unverified* records plus what the reader saw at the tail (`torn`); only
//! the session's replay (see `state.rs`) turns them into a trusted timeline.
//!
//! One folder, one direction of use (no cycle):
//! - [`record`](self): every record of docs/wal-format.md ("Records"), and the `step` record;
//! - `stepline`: the fast decoder of step lines in revl's own canonical shape;
//! - `line`: one line: encode (CRC member included) and decode;
//! - `read`: a whole WAL: torn tail, corruption, header and seq rules, read in blocks;
//! - `write`: the appending writer and atomic WAL creation.
//!
//! record ← stepline ← line ← read, write.

mod line;
mod read;
mod record;
mod stepline;
mod write;

pub use line::encode_line;
pub(crate) use read::corrupt_error;
pub use read::{
    parse_wal, parse_wal_each, read_wal, read_wal_after, read_wal_each, read_wal_prefix_each,
    Corrupt, WalMeta, WalRead,
};
pub use record::{Record, Redo, StepRecord, RECORD_NAMES};
pub use write::{create_journal, create_wal, encode_records, WalWriter};

/// The walVersion this revl writes in every new WAL (docs/wal-format.md, "Versions and
/// compatibility"). Version 2 names a branch's parent by id, never by path.
pub const WAL_VERSION: u64 = 2;

/// The oldest walVersion this revl reads: it reads every version from this one to
/// [`WAL_VERSION`], and appends to a WAL in the version its header states.
pub const OLDEST_WAL_VERSION: u64 = 1;

#[cfg(test)]
mod tests {
    use super::line::decode_line;
    use super::read::{read_pieces, BLOCK_LINES};
    use super::*;
    use crate::error::Code;
    use std::path::Path;

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

/// The record table of `docs/wal-format.md` is the code's: the same records, in the same
/// order, with the same fields (every optional one set in a sample of each record).
#[cfg(test)]
mod doc_table {
    use super::*;
    use crate::step::Pos;
    use crate::undo::{EffectDetail, FileDetail, Image, IntentAfter, Undo};
    use crate::unwind::{Failed, Outcome, OwedStep};
    use serde_json::{json, Value};
    use std::collections::BTreeSet;

    fn samples() -> Vec<Record> {
        let failed = || {
            vec![Failed {
                error: "e".into(),
                index: 1,
                label: "l".into(),
                outcome: Outcome::Failed,
            }]
        };
        let mut step = StepRecord::new(1, 1, "effect".into(), "l", "s", &json!({})).unwrap();
        step.set_scope(Some(&json!({"caps": []}))).unwrap();
        step.set_undo_scope(Some(&json!({"caps": []}))).unwrap();
        step.set_undo(Some(&Undo::Tool { tool: "t".into() }))
            .unwrap();
        step.set_ts(Some("t")).unwrap();
        step.undo_idempotent = Some(true);
        step.compensation = Some(2);
        let s = || "s".to_string();
        vec![
            Record::Header {
                wal_version: 1,
                seq: 0,
                session: s(),
                workspace: s(),
                manifest_digest: Some(s()),
                created_by: s(),
                guarantee: s(),
                ts: Some(s()),
            },
            Record::Intent {
                step: 1,
                kind: s(),
                label: s(),
                site: s(),
                undo: Some(Undo::Restore { entries: vec![] }),
                preimage: Some(json!({})),
                after: Some(IntentAfter {
                    detail: EffectDetail::File(FileDetail {
                        after: Image::default(),
                        path: s(),
                        to: None,
                        origin: None,
                    }),
                    images: vec![],
                    kept: Default::default(),
                }),
                redo: None,
                argv: Some(vec![s()]),
            },
            Record::IntentVoid { step: 1, why: s() },
            Record::Step(step),
            Record::StepBack {
                to: Pos::from_i64(-1).unwrap(),
                mode: s(),
                keep_drift: true,
            },
            Record::StepBackDone {
                to: Pos::from_i64(-1).unwrap(),
                failed: failed(),
                owed: vec![OwedStep {
                    index: 1,
                    kind: s(),
                    label: s(),
                    why: s(),
                }],
            },
            Record::AbortBegin {},
            Record::Undone { step: 1, by: s() },
            Record::ReplayFence { step: 1 },
            Record::DeferredEmission {
                seq: 1,
                tool: s(),
                service: s(),
                method: s(),
                args: json!({}),
                after_step: 1,
            },
            Record::DeferredDropped {
                seqs: vec![1],
                by: s(),
            },
            Record::ApprovalRequested {
                ticket: s(),
                tool: s(),
                args_digest: s(),
                args: Some(json!({"to": "a@b.c"})),
            },
            Record::ApprovalGranted {
                ticket: Some(s()),
                tool: s(),
                session: s(),
                standing: false,
                args_digest: Some(s()),
            },
            Record::ApprovalConsumed {
                ticket: Some(s()),
                tool: Some(s()),
            },
            Record::CommitApproved { hash: s() },
            Record::Flushed { seq: 1 },
            Record::FlushResidue {
                seq: 1,
                error: json!({}),
            },
            Record::Discharge { steps: vec![] },
            Record::ActivationComplete {},
            Record::Aborted {
                replayed: vec![],
                compensations_ran: vec![],
                dropped_deferred: vec![],
                failed: failed(),
                owed: vec![],
            },
            Record::ForkPending {
                at: Pos::from_i64(1).unwrap(),
                hash: Some(s()),
            },
            Record::ForkBegin {
                parent: s(),
                branch: s(),
                at: Pos::from_i64(1).unwrap(),
                crossed: vec![],
                would_cross: vec![],
                into: Some(s()),
                into_created: true,
                keep_drift: true,
            },
            Record::ForkFrozen {
                parent: s(),
                branch: s(),
                at: Pos::from_i64(1).unwrap(),
                failed: failed(),
            },
            Record::ForkComplete { branch: s() },
            Record::ForkBranch {
                branch: s(),
                parent: s(),
                at: Pos::from_i64(1).unwrap(),
                parent_remote: Some(s()),
                parent_wal: Some(s()),
                preserved: json!({}),
                not_preserved: json!([]),
                crossed: vec![],
                would_cross: vec![],
                failed: failed(),
                provisions: json!({}),
            },
            Record::ForkAbandoned {
                at: Pos::from_i64(1).unwrap(),
                why: s(),
            },
            Record::ModelDecision {
                step: 1,
                outcome: s(),
                llm: json!({}),
            },
            Record::FilesSynced { through: 3 },
            Record::Preserved {
                step: 1,
                path: s(),
                kind: crate::undo::FileKind::File,
                mode: Some(s()),
                digest: s(),
            },
            Record::Bind { label: s(), at: 2 },
            Record::NetConnect {
                step: 3,
                conn: 1,
                dest: s(),
                port: 443,
                resolved: Some(s()),
                denied: true,
                why: Some(s()),
                ts: Some(s()),
            },
            Record::NetClose {
                step: 3,
                conn: 1,
                dest: s(),
                port: 443,
                bytes_up: 1,
                bytes_down: 2,
                error: Some(s()),
                ts: Some(s()),
            },
            Record::Checkpoint {
                thread: s(),
                ns: s(),
                id: s(),
                parent: Some(s()),
                blob: "ab".repeat(32),
                uses: vec!["cd".repeat(32)],
                at: Some(2),
            },
            Record::CheckpointWrites {
                thread: s(),
                ns: s(),
                checkpoint: s(),
                blob: "ab".repeat(32),
            },
            Record::CheckpointForget {
                thread: s(),
                ns: Some(s()),
                ids: vec![s()],
            },
            Record::CheckpointTip {
                thread: s(),
                id: s(),
            },
        ]
    }

    /// `(record, fields)` rows of the table headed `| record | fields | meaning |`.
    fn doc_rows() -> Vec<(String, BTreeSet<String>)> {
        let doc = include_str!("../../../../docs/wal-format.md");
        // Backticked names, outside parentheses (which hold values and notes).
        let ticks = |cell: &str| -> Vec<String> {
            let mut plain = String::new();
            let mut depth = 0usize;
            for c in cell.chars() {
                match c {
                    '(' => depth += 1,
                    ')' => depth = depth.saturating_sub(1),
                    c if depth == 0 => plain.push(c),
                    _ => {}
                }
            }
            plain
                .split('`')
                .skip(1)
                .step_by(2)
                .map(|t| {
                    let word = t.split([' ', '(']).next().unwrap_or("");
                    word.trim_end_matches('?').to_string()
                })
                .collect()
        };
        doc.lines()
            .skip_while(|l| !l.starts_with("| record | fields |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').collect();
                let name = ticks(cells[1]).remove(0);
                (name, ticks(cells[2]).into_iter().collect())
            })
            .collect()
    }

    #[test]
    fn the_wal_format_table_is_the_code() {
        // RECORD_NAMES is the enum: serde's own list of variants.
        let err = serde_json::from_str::<Record>(r#"{"record":"no-such-record"}"#)
            .unwrap_err()
            .to_string();
        let listed: Vec<&str> = err
            .split("expected one of ")
            .nth(1)
            .expect("serde names the variants")
            .split('`')
            .skip(1)
            .step_by(2)
            .collect();
        assert_eq!(listed, RECORD_NAMES, "RECORD_NAMES differs from the enum");
        let samples = samples();
        let names: Vec<&str> = samples.iter().map(Record::name).collect();
        assert_eq!(names, RECORD_NAMES, "a record has no sample here");
        let rows = doc_rows();
        let doc_names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            doc_names, RECORD_NAMES,
            "docs/wal-format.md lists other records"
        );
        for (rec, (name, doc_fields)) in samples.iter().zip(&rows) {
            let Value::Object(m) = serde_json::to_value(rec).unwrap() else {
                panic!("{name} is not an object")
            };
            let fields: BTreeSet<String> = m.keys().filter(|k| *k != "record").cloned().collect();
            assert_eq!(
                &fields, doc_fields,
                "the fields of `{name}` in docs/wal-format.md"
            );
        }
    }
}
