//! A WAL long enough (over 4 MB) to be read in pieces and replayed on a thread of its own:
//! the streamed replay agrees with reading the whole file and replaying it, and a replay
//! error or a corrupt line is reported exactly as for a short WAL.

use revl_core::error::Code;
use revl_core::state::State;
use revl_core::wal::{encode_line, read_wal, Record, StepRecord};
use serde_json::json;

fn header() -> Record {
    Record::Header {
        wal_version: 1,
        seq: 0,
        session: "0".repeat(32),
        workspace: "/nonexistent".into(),
        manifest_digest: None,
        created_by: "test".into(),
        guarantee: "g".into(),
        ts: None,
    }
}

fn step(i: u64) -> Record {
    let (kind, detail, undo) = match i {
        0 => ("hinge", json!({}), None),
        _ if i.is_multiple_of(3) => (
            "provision",
            json!({"key": format!("k{}", i % 5), "value": "x".repeat(120), "previous": null}),
            Some(json!({"type": "withdraw", "key": format!("k{}", i % 5), "previous": null})),
        ),
        _ if i % 3 == 1 => (
            "emission",
            json!({"key": format!("key-{i}"), "service": "svc", "method": "call", "args": {"n": i, "pad": "y".repeat(100)}}),
            None,
        ),
        _ => ("boundary", json!({}), None),
    };
    let mut rec = StepRecord::new(
        i + 1,
        i,
        kind.into(),
        &format!("{kind} {i}"),
        "test",
        &detail,
    )
    .unwrap();
    let scope = (kind == "emission").then(|| json!({"caps": ["net"]}));
    rec.set_scope(scope.as_ref()).unwrap();
    rec.undo_idempotent = undo.as_ref().map(|_| true);
    rec.set_undo(undo.as_ref()).unwrap();
    rec.set_ts(Some("2026-12-02T00:00:00.000Z")).unwrap();
    Record::Step(rec)
}

/// (file bytes, byte offset where each line starts)
fn wal(n: u64) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = encode_line(&header());
    let mut starts = vec![0];
    for i in 0..n {
        starts.push(bytes.len());
        bytes.extend(encode_line(&step(i)));
    }
    (bytes, starts)
}

const N: u64 = 25_000;

#[test]
fn a_long_wal_streams_into_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.jsonl");
    let (bytes, _) = wal(N);
    assert!(bytes.len() > 4 << 20, "the WAL must take the threaded path");
    std::fs::write(&path, &bytes).unwrap();
    let (streamed, meta) = State::read(&path).unwrap();
    let whole = read_wal(&path).unwrap();
    assert_eq!(meta.records, whole.records.len());
    assert_eq!(
        (meta.torn, meta.good_len, meta.last_seq),
        (false, bytes.len() as u64, N)
    );
    let replayed = State::replay_owned(whole.records).unwrap();
    assert_eq!(streamed.steps.len(), N as usize);
    assert_eq!(streamed.steps, replayed.steps);
    assert_eq!(
        streamed.provisions_at(streamed.head_pos()),
        replayed.provisions_at(replayed.head_pos())
    );
}

/// `bytes` (from [`wal`]) with record `line` (1-based) replaced by the next step, which
/// skips an index: a record that reads but cannot be replayed.
fn skip_an_index(bytes: &[u8], starts: &[usize], line: usize) -> Vec<u8> {
    // Record `line` is step `line - 2`, with seq `line - 1`.
    let mut bad = step(line as u64 - 1);
    if let Record::Step(s) = &mut bad {
        s.seq = line as u64 - 1;
    }
    let mut out = bytes[..starts[line - 1]].to_vec();
    out.extend(encode_line(&bad));
    out.extend_from_slice(&bytes[starts[line]..]);
    out
}

/// Flip a bit inside line `line` (1-based): its CRC no longer matches.
fn corrupt_line(bytes: &mut [u8], starts: &[usize], line: usize) {
    bytes[starts[line - 1] + 20] ^= 0x01;
}

/// Write `bytes` and read them into a state: the `corrupt-wal` error's message.
fn corrupt_wal_message(path: &std::path::Path, bytes: &[u8]) -> String {
    std::fs::write(path, bytes).unwrap();
    let e = State::read(path).map(|_| ()).unwrap_err();
    assert_eq!(e.code, Code::CorruptWal);
    e.message
}

#[test]
fn a_replay_error_deep_in_a_long_wal_names_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, starts) = wal(N);
    let line = 20_002;
    let bytes = skip_an_index(&bytes, &starts, line);
    let e = corrupt_wal_message(&dir.path().join("wal.jsonl"), &bytes);
    assert!(e.contains(&format!("WAL record {line} (step)")), "{e}");
}

#[test]
fn a_corrupt_line_deep_in_a_long_wal_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let (mut bytes, starts) = wal(N);
    let line = 23_456;
    corrupt_line(&mut bytes, &starts, line);
    let e = corrupt_wal_message(&dir.path().join("wal.jsonl"), &bytes);
    assert!(e.contains(&format!("at line {line}:")), "{e}");
}

/// revl reads its own step lines with a decoder for the exact shape it writes; a line in any
/// other member order (as another tool might write it) goes through the general decoder and
/// must give the same timeline.
#[test]
fn step_lines_in_another_member_order_read_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let (canonical, _) = wal(N);
    let mut other = Vec::new();
    let mut rewritten = 0;
    for line in canonical.split_inclusive(|&b| b == b'\n') {
        let v: serde_json::Value = serde_json::from_slice(line).unwrap();
        if v["record"] != "step" {
            other.extend_from_slice(line);
            continue;
        }
        // Members sorted by name (detail before kind, ts before undo): not revl's order.
        let mut m = v.as_object().unwrap().clone();
        m.remove("record");
        m.remove("crc");
        let rest = serde_json::to_string(&m).unwrap();
        let body = format!("{{\"record\":\"step\",{}", &rest[1..rest.len() - 1]);
        assert_ne!(body.as_bytes(), &line[..body.len()]);
        let crc = crc32c::crc32c(body.as_bytes());
        other.extend(format!("{body},\"crc\":\"{crc:08x}\"}}\n").into_bytes());
        rewritten += 1;
    }
    assert_eq!(rewritten, N);
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    std::fs::write(&a, &canonical).unwrap();
    std::fs::write(&b, &other).unwrap();
    let (sa, ma) = State::read(&a).unwrap();
    let (sb, mb) = State::read(&b).unwrap();
    assert_eq!(ma.records, mb.records);
    assert_eq!(sa.steps.len(), N as usize);
    assert_eq!(sa.steps, sb.steps);
    assert_eq!(
        sa.steps.iter().map(|s| s.to_json()).collect::<Vec<_>>(),
        sb.steps.iter().map(|s| s.to_json()).collect::<Vec<_>>()
    );
}

/// A record that cannot be replayed before a line that cannot be read: the first error in
/// the file is the one reported, for a short WAL as for a long one.
#[test]
fn the_first_error_in_the_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    for n in [10u64, N] {
        let path = dir.path().join(format!("wal-{n}.jsonl"));
        let (mut bytes, starts) = wal(n);
        // Line 6 is corrupt; record 5 (step 3) skips an index; the rest is good. (Corrupt
        // first: `starts` are the offsets before the replacement.)
        corrupt_line(&mut bytes, &starts, 6);
        let bytes = skip_an_index(&bytes, &starts, 5);
        let e = corrupt_wal_message(&path, &bytes);
        assert!(e.contains("WAL record 5 (step)"), "{n}: {e}");
        // Reading alone (no replay) reports the corrupt line.
        let r = read_wal(&path).unwrap_err();
        assert!(r.message.contains("at line 6"), "{n}: {}", r.message);
    }
}
