//! Concurrency: many `revl` processes at once on one session (the per-session lock
//! serialises them) and on different sessions of one store (the store lock serialises
//! `new`). No acknowledged step is lost or duplicated, `seq` strictly increases in every WAL,
//! each process reads its own writes, and `busy` (after the lock wait) is the only failure
//! allowed.

use crate::common;

use common::{check_wal, World};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const PROCS: usize = 8;
const WRITES: usize = 25;

/// `seq` strictly increases over the seq-taking records (docs/wal-format.md, "seq").
fn assert_seq_increasing(recs: &[Value]) {
    let mut last: Option<u64> = None;
    for r in recs {
        if !matches!(
            r["record"].as_str(),
            Some("header" | "step" | "deferred-emission")
        ) {
            continue;
        }
        let s = r["seq"].as_u64().expect("a seq");
        if let Some(l) = last {
            assert!(s > l, "seq {s} after {l}");
        }
        last = Some(s);
    }
}

/// What one worker got acknowledged: (step index, label), and the content it last wrote
/// to each of its paths.
#[derive(Default)]
struct Acked {
    steps: Vec<(u64, String)>,
    last: BTreeMap<String, String>,
    busy: usize,
}

fn ack_or_busy(out: &common::Out, acked: &mut Acked) -> Option<Value> {
    match out.code {
        Some(0) => Some(out.doc().clone()),
        Some(1) => {
            out.err(1, "busy");
            acked.busy += 1;
            None
        }
        _ => panic!("only `busy` may fail under contention\n{}", out.dump()),
    }
}

#[test]
fn eight_processes_on_one_session_lose_and_duplicate_nothing() {
    let w = Arc::new(World::new());
    let (sid, ws) = w.session();
    let handles: Vec<_> = (0..PROCS)
        .map(|p| {
            let (w, sid) = (w.clone(), sid.clone());
            std::thread::spawn(move || {
                let mut acked = Acked::default();
                for j in 0..WRITES {
                    let path = format!("p{p}/f{}", j % 3);
                    let content = format!("proc {p} write {j}");
                    let out = w.json(&["write", &sid, &path, "--content", &content]);
                    if let Some(doc) = ack_or_busy(&out, &mut acked) {
                        assert_eq!(doc["label"], format!("fs.write {path}"));
                        acked
                            .steps
                            .push((doc["step"].as_u64().unwrap(), format!("fs.write {path}")));
                        acked.last.insert(path.clone(), content);
                    }
                    if p % 2 == 0 {
                        // Readers see their own acknowledged writes, whatever the others do.
                        if let Some(want) = acked.last.get(&path).cloned() {
                            let out = w.json(&["read", &sid, &path]);
                            if let Some(doc) = ack_or_busy(&out, &mut acked) {
                                assert_eq!(doc["content"], want.as_str(), "read-your-writes");
                            }
                        }
                    }
                    if j % 4 == 3 {
                        let key = format!("k{p}");
                        let out = w.json(&["provide", &sid, &key, &j.to_string()]);
                        if let Some(doc) = ack_or_busy(&out, &mut acked) {
                            acked
                                .steps
                                .push((doc["step"].as_u64().unwrap(), format!("provide {key}")));
                        }
                    }
                }
                acked
            })
        })
        .collect();
    let results: Vec<Acked> = handles.into_iter().map(|h| h.join().unwrap()).collect();

    let tl = w.timeline(&sid);
    let steps = tl["steps"].as_array().unwrap();
    let mut seen = BTreeSet::new();
    let mut total = 0;
    let mut busy = 0;
    for a in &results {
        busy += a.busy;
        for (i, label) in &a.steps {
            assert!(seen.insert(*i), "two acknowledged commands got step {i}");
            assert_eq!(
                steps[*i as usize]["label"],
                label.as_str(),
                "step {i} is not what was acknowledged"
            );
            total += 1;
        }
    }
    // Nothing but the hinge and the acknowledged steps: no duplicate, no phantom.
    assert_eq!(
        steps.len(),
        total + 1,
        "the timeline holds unacknowledged steps"
    );
    assert_eq!(tl["head"], total as u64);
    let recs = check_wal(&w.wal(&sid));
    assert_seq_increasing(&recs);
    for a in &results {
        for (path, content) in &a.last {
            assert_eq!(
                std::fs::read_to_string(ws.join(path)).unwrap(),
                *content,
                "{path} does not hold its last acknowledged write"
            );
        }
    }
    assert!(
        busy == 0,
        "{busy} commands were busy within the default 30 s lock wait"
    );
    println!(
        "concurrency: {PROCS} processes, {total} acknowledged steps on one session, {} WAL records",
        recs.len()
    );
}

#[test]
fn eight_processes_on_eight_sessions_of_one_store() {
    let w = Arc::new(World::new());
    let handles: Vec<_> = (0..PROCS)
        .map(|p| {
            let w = w.clone();
            std::thread::spawn(move || {
                // Every `new` races for the store lock; each gets its own session.
                let ws = w.ws(&format!("ws{p}"));
                let sid = w.new_session(&ws);
                let mut acked = Acked::default();
                for j in 0..WRITES {
                    let path = format!("d/f{}", j % 4);
                    let content = format!("session {p} write {j}");
                    let out = w.json(&["write", &sid, &path, "--content", &content]);
                    if let Some(doc) = ack_or_busy(&out, &mut acked) {
                        acked
                            .steps
                            .push((doc["step"].as_u64().unwrap(), format!("fs.write {path}")));
                        acked.last.insert(path, content);
                    }
                    if j % 3 == 0 {
                        let out = w.json(&["boundary", &sid]);
                        if let Some(doc) = ack_or_busy(&out, &mut acked) {
                            acked
                                .steps
                                .push((doc["step"].as_u64().unwrap(), "turn/boundary".into()));
                        }
                        // A store-wide reader runs alongside the writers.
                        let out = w.json(&["sessions"]);
                        assert_eq!(out.code, Some(0), "{}", out.dump());
                    }
                    if j == WRITES / 2 {
                        // A step-back in the middle: the later writes take new indices.
                        let out = w.json(&["step-back", &sid, "--to", "0"]);
                        if ack_or_busy(&out, &mut acked).is_some() {
                            acked.last.clear();
                        }
                    }
                }
                (sid, ws, acked)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let list = w.json(&["sessions"]).ok().clone();
    assert_eq!(list["sessions"].as_array().unwrap().len(), PROCS);
    let mut total = 0;
    for (sid, ws, acked) in &results {
        assert_eq!(acked.busy, 0);
        let tl = w.timeline(sid);
        let steps = tl["steps"].as_array().unwrap();
        assert_eq!(
            steps.len(),
            acked.steps.len() + 1,
            "session {sid}: lost or duplicated steps"
        );
        for (i, label) in &acked.steps {
            assert_eq!(steps[*i as usize]["label"], label.as_str());
        }
        let recs = check_wal(&w.wal(sid));
        assert_seq_increasing(&recs);
        for (path, content) in &acked.last {
            assert_eq!(std::fs::read_to_string(ws.join(path)).unwrap(), *content);
        }
        total += acked.steps.len();
    }
    println!("concurrency: {PROCS} sessions of one store, {total} acknowledged steps");
}

/// With a short lock wait, a command that cannot get the lock says `busy` on one line, exit
/// 1, and changes nothing.
#[test]
fn a_held_lock_is_busy_and_changes_nothing() {
    let w = World::new();
    let (sid, ws) = w.session();
    let lock = w.store.join("sessions").join(&sid).join("lock");
    let f = std::fs::File::options().write(true).open(&lock).unwrap();
    f.lock().unwrap();
    let before = w.wal(&sid);
    let wal_before = std::fs::read(&before).unwrap();
    let out = w.json_env(
        &["write", &sid, "x", "--content", "y"],
        &[("REVL_LOCK_WAIT_MS", "300")],
    );
    out.err(1, "busy");
    assert!(!ws.join("x").exists());
    assert_eq!(std::fs::read(&before).unwrap(), wal_before);
    f.unlock().unwrap();
    w.json(&["write", &sid, "x", "--content", "y"]).ok();
}
