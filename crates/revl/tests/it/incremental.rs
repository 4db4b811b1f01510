//! Incremental attach and the session index (docs/architecture.md, "Incremental attach";
//! docs/wal-format.md, "The session index"): a long-lived handle that keeps a session's state
//! between calls sees what another process appended in between, and falls back to reading
//! the whole WAL when the file is not the prefix it read plus clean records; a missing,
//! garbled or stale index entry changes no answer of `sessions` or of the one live session
//! per workspace check.

use crate::common::{self, World};
use revl_core::{Failpoints, FileOp, Store};
use serde_json::{json, Value};
use std::path::Path;

fn open(w: &World) -> Store {
    Store::open(&w.store, Failpoints::none()).unwrap()
}

/// `(index, label, undone)` of every step, as a fresh attach (the whole WAL) sees them.
fn steps(s: &revl_core::Session) -> Vec<(u64, String, bool)> {
    s.steps()
        .iter()
        .map(|st| (st.index, st.label().to_string(), st.undone))
        .collect()
}

fn fresh(w: &World, id: &str) -> Vec<(u64, String, bool)> {
    steps(&open(w).attach_read(id).unwrap())
}

fn write(s: &mut revl_core::Session, path: &str, content: &[u8]) {
    s.file_effect(FileOp::Write {
        path: path.into(),
        content: content.to_vec(),
    })
    .unwrap();
}

#[test]
fn a_kept_session_sees_what_the_cli_appended_in_between() {
    let w = World::new();
    let st = open(&w);
    let mut s = st.new_session(&w.ws("ws"), None).unwrap();
    let id = s.id().to_string();
    write(&mut s, "a.txt", b"one");
    let kept = s
        .keep()
        .expect("a session attached to write keeps its state");
    assert_eq!(kept.id(), id);
    // Another process appends while the handle holds nothing.
    w.json(&["provide", &id, "K", "v"]).ok();
    w.json(&["write", &id, "b.txt", "--content", "two"]).ok();
    let mut s = st.attach_kept(&id, Some(kept)).unwrap();
    assert_eq!(
        steps(&s),
        fresh(&w, &id),
        "the kept state plus the appended records"
    );
    assert_eq!(s.state().provisions_at(s.state().head_pos())["K"], "v");
    // And the handle goes on writing after them, with seqs that still increase.
    write(&mut s, "c.txt", b"three");
    let kept = s.keep().unwrap();
    let s = st.attach_read_kept(&id, Some(kept)).unwrap();
    assert_eq!(s.steps().len(), 5, "hinge, a, K, b, c");
    assert_eq!(steps(&s), fresh(&w, &id));
    drop(s);
    common::check_wal(&w.wal(&id));
    let status = w.json(&["status", &id]).ok().clone();
    assert_eq!(status["head"], 4);
}

#[test]
fn a_kept_session_whose_wal_was_replaced_or_cut_reads_it_whole() {
    let w = World::new();
    let st = open(&w);
    let mut s = st.new_session(&w.ws("ws"), None).unwrap();
    let id = s.id().to_string();
    write(&mut s, "a.txt", b"one");
    let short = std::fs::read(w.wal(&id)).unwrap();
    write(&mut s, "b.txt", b"two");
    let kept = s.keep().unwrap();
    // Replaced (a new file renamed over it, as `recover` and a restore from backup do) by
    // the shorter WAL of one write: the handle must not show the write it kept.
    let tmp = w.wal(&id).with_extension("new");
    std::fs::write(&tmp, &short).unwrap();
    std::fs::rename(&tmp, w.wal(&id)).unwrap();
    // With its commit ring, as a restore must (docs/wal-format.md, "The commit ring": the
    // ring of the longer history would bring its records back).
    let _ = std::fs::remove_file(w.wal(&id).with_file_name("wal.ring"));
    let s = st.attach_kept(&id, Some(kept)).unwrap();
    assert_eq!(steps(&s).len(), 2, "hinge and a: {:?}", steps(&s));
    assert_eq!(steps(&s), fresh(&w, &id));
    let kept = s.keep().unwrap();
    // Cut in place to the header and hinge, then another process appends different records
    // past where the kept prefix ended: the kept prefix's end is no longer there.
    let lines: Vec<&[u8]> = short.split_inclusive(|b| *b == b'\n').collect();
    let two: usize = lines[..2].iter().map(|l| l.len()).sum();
    std::fs::OpenOptions::new()
        .write(true)
        .open(w.wal(&id))
        .unwrap()
        .set_len(two as u64)
        .unwrap();
    let long = "v".repeat(short.len());
    w.json(&["provide", &id, "K", &long]).ok();
    assert!(std::fs::metadata(w.wal(&id)).unwrap().len() > short.len() as u64);
    let s = st.attach_kept(&id, Some(kept)).unwrap();
    assert_eq!(steps(&s), fresh(&w, &id));
    assert!(
        steps(&s)
            .iter()
            .all(|(_, label, _)| !label.contains("a.txt")),
        "the cut write is gone: {:?}",
        steps(&s)
    );
}

#[test]
fn a_kept_session_refuses_a_corrupt_append_as_a_whole_read_does() {
    let w = World::new();
    let st = open(&w);
    let mut s = st.new_session(&w.ws("ws"), None).unwrap();
    let id = s.id().to_string();
    write(&mut s, "a.txt", b"one");
    let kept = s.keep().unwrap();
    w.json(&["provide", &id, "K", "v"]).ok();
    w.json(&["provide", &id, "L", "w"]).ok();
    // Flip a byte inside the first appended line: a bad line with a good one after it.
    let mut bytes = std::fs::read(w.wal(&id)).unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let at = text.find("\"K\"").expect("the provision of K");
    bytes[at + 1] = b'Q';
    std::fs::write(w.wal(&id), &bytes).unwrap();
    let whole = open(&w).attach(&id).unwrap_err();
    let kept_err = st.attach_kept(&id, Some(kept)).unwrap_err();
    assert_eq!(
        kept_err.code.as_str(),
        "corrupt-wal",
        "{}",
        kept_err.message
    );
    assert_eq!(kept_err.message, whole.message);
}

fn index_file(w: &World, id: &str) -> std::path::PathBuf {
    w.store.join("sessions").join(id).join("index.json")
}

fn sessions(w: &World) -> Value {
    w.json(&["sessions"]).ok().clone()
}

#[test]
fn the_session_index_is_written_and_a_missing_garbled_or_stale_entry_changes_no_answer() {
    let w = World::new();
    let ws = w.ws("ws");
    let id = w.new_session(&ws);
    w.json(&["provide", &id, "K", "v"]).ok();
    let listed = sessions(&w);
    // The journal (or the first reader) wrote the entry the docs describe.
    let entry: Value = serde_json::from_slice(&std::fs::read(index_file(&w, &id)).unwrap())
        .expect("index.json is JSON");
    assert_eq!(entry["session"], id.as_str());
    assert_eq!(entry["state"], "live");
    assert_eq!(entry["workspace"], ws.display().to_string());
    assert_eq!(entry["head"], 1);
    assert_eq!(
        entry["wal"]["len"],
        std::fs::metadata(w.wal(&id)).unwrap().len()
    );
    let stale = entry.clone();
    // Missing: rebuilt, same answer.
    std::fs::remove_file(index_file(&w, &id)).unwrap();
    assert_eq!(sessions(&w), listed);
    assert!(index_file(&w, &id).exists(), "rebuilt by the reader");
    // Garbled: same answer, and `new` on the workspace is still refused.
    std::fs::write(index_file(&w, &id), b"{\"session\": tru").unwrap();
    assert_eq!(sessions(&w), listed);
    let out = w.json(&["new", "--workspace", ws.to_str().unwrap()]);
    out.err(1, "workspace-busy");
    // Stale and lying: an entry of an older WAL claiming the session aborted. The WAL grew
    // since, so the entry is not used: the session is live and holds its workspace.
    w.json(&["provide", &id, "L", "w"]).ok();
    let mut lie = stale;
    lie["state"] = "aborted".into();
    std::fs::write(index_file(&w, &id), serde_json::to_vec(&lie).unwrap()).unwrap();
    let now = sessions(&w);
    assert_eq!(now["sessions"][0]["state"], "live");
    assert_eq!(now["sessions"][0]["head"], 2);
    w.json(&["new", "--workspace", ws.to_str().unwrap()])
        .err(1, "workspace-busy");
    // Another session's entry in its place is not used either.
    let other = w.new_session(&w.ws("other"));
    w.json(&["abort", &other]).ok();
    sessions(&w);
    std::fs::copy(index_file(&w, &other), index_file(&w, &id)).unwrap();
    let now = sessions(&w);
    let mine = now["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(mine["state"], "live");
    assert_eq!(mine["workspace"], ws.display().to_string());
    // An aborted session's workspace is free: `new` there works, from its index entry.
    assert!(Path::new(&index_file(&w, &other)).exists());
    let out = w.json(&["new", "--workspace", w.ws("other").to_str().unwrap()]);
    out.ok();
}

fn holders_file(w: &World) -> std::path::PathBuf {
    w.store.join("holders.json")
}

/// The holders file's document: its first line (the second is its CRC).
fn holders(w: &World) -> Value {
    let text = std::fs::read(holders_file(w)).expect("holders.json exists");
    let body = text.split(|&b| b == b'\n').next().unwrap();
    serde_json::from_slice(body).expect("holders.json's first line is JSON")
}

/// `(session, workspace)` pairs the holders file lists as holding a workspace.
fn held(w: &World) -> Vec<(String, String)> {
    serde_json::from_value(holders(w)["holders"].clone()).unwrap()
}

#[test]
fn the_holders_file_is_kept_and_a_missing_garbled_forged_or_stale_one_changes_no_answer() {
    let w = World::new();
    let ws = w.ws("ws");
    let a = w.new_session(&ws);
    let ws_s = ws.canonicalize().unwrap().display().to_string();
    // `new` recorded the session it made (docs/wal-format.md, "The holders file").
    assert_eq!(held(&w), vec![(a.clone(), ws_s.clone())]);
    let busy = |dir: &Path| {
        w.json(&["new", "--workspace", dir.to_str().unwrap()])
            .err(1, "workspace-busy");
    };
    let sub = ws.join("sub");
    // Missing: rebuilt from the WALs, same refusals (the workspace, one inside it).
    std::fs::remove_file(holders_file(&w)).unwrap();
    busy(&ws);
    busy(&sub);
    assert_eq!(held(&w), vec![(a.clone(), ws_s.clone())], "rebuilt");
    // Garbled: rebuilt.
    std::fs::write(holders_file(&w), b"{\"holdersVersion\": 2, \"ended\": [").unwrap();
    busy(&ws);
    // Forged: the live session moved to `ended`, a byte changed after revl wrote it (its
    // CRC no longer matches): not believed.
    let mut forged = holders(&w);
    forged["ended"] = json!([a]);
    forged["holders"] = json!([]);
    let old = std::fs::read(holders_file(&w)).unwrap();
    let crc_line = old.split(|&b| b == b'\n').nth(1).unwrap().to_vec();
    let mut text = serde_json::to_vec(&forged).unwrap();
    text.push(b'\n');
    text.extend(crc_line);
    text.push(b'\n');
    std::fs::write(holders_file(&w), text).unwrap();
    busy(&ws);
    busy(&sub);
    assert_eq!(held(&w), vec![(a.clone(), ws_s.clone())], "rebuilt");
    // Stale, missing a live session (a crash after the WAL was made, before the file was
    // updated): the directory it does not list is read.
    let before_b = std::fs::read(holders_file(&w)).unwrap();
    let ws2 = w.ws("ws2");
    let b = w.new_session(&ws2);
    std::fs::write(holders_file(&w), &before_b).unwrap();
    busy(&ws2);
    busy(&ws2.join("deeper/still"));
    // Around it too: a workspace holding ws2 inside it.
    let outer = w.ws("outer");
    let inner = w.new_session(&outer.join("in"));
    std::fs::write(holders_file(&w), &before_b).unwrap();
    busy(&outer);
    // Stale, naming a session that is no longer live (it was aborted after the file was
    // written): its WAL says it ended, so its workspace is free, not blocked for good.
    let with_a = std::fs::read(holders_file(&w)).unwrap();
    w.json(&["abort", &a]).ok();
    std::fs::write(holders_file(&w), &with_a).unwrap();
    let a2 = w.new_session(&ws);
    let doc = holders(&w);
    assert!(
        doc["ended"].as_array().unwrap().contains(&json!(a)),
        "{doc}"
    );
    let mut want = vec![
        (a2.clone(), ws_s.clone()),
        (b.clone(), ws2.canonicalize().unwrap().display().to_string()),
        (
            inner.clone(),
            outer
                .join("in")
                .canonicalize()
                .unwrap()
                .display()
                .to_string(),
        ),
    ];
    want.sort();
    let mut got = held(&w);
    got.sort();
    assert_eq!(got, want);
    // `sessions` agrees with the file, and the MCP server's lookup finds the live one.
    let listed = sessions(&w);
    let live: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["state"] == "live")
        .map(|s| s["session"].as_str().unwrap())
        .collect();
    assert_eq!(live.len(), 3, "{listed}");
    assert_eq!(
        open(&w).live_session_of(&ws).unwrap().as_deref(),
        Some(a2.as_str())
    );
}

#[test]
fn a_holders_file_that_lies_with_a_good_crc_is_removed_by_sessions() {
    let w = World::new();
    let ws = w.ws("ws");
    let a = w.new_session(&ws);
    // A lie that passes the file's own check: written in the format the docs give (field
    // order, no spaces, then the CRC line), naming the live session ended.
    let body =
        format!("{{\"holdersVersion\":2,\"ended\":[\"{a}\"],\"holders\":[],\"unknown\":[]}}\n");
    let crc = crc32c::crc32c(body.as_bytes());
    std::fs::write(holders_file(&w), format!("{body}crc32c {crc:08x}\n")).unwrap();
    // `sessions` reads every WAL and finds the file contradicts one: it removes it.
    let listed = sessions(&w);
    assert_eq!(listed["sessions"][0]["state"], "live");
    assert!(!holders_file(&w).exists(), "the lying file is removed");
    w.json(&["new", "--workspace", ws.to_str().unwrap()])
        .err(1, "workspace-busy");
}
