//! Foundation integration tests, through the `revl` binary: JSON shapes, file effects and
//! their exact rewind, provisions, exec, reads, verify, the error document, path
//! confinement, WAL integrity, and crash/repair at every effect failpoint.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::fs;
use std::path::Path;

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    k.sort();
    k
}

fn has_keys(v: &Value, want: &[&str]) {
    for k in want {
        assert!(v.get(*k).is_some(), "missing member {k:?} in {v}");
    }
}

fn is_hex32(s: &str) -> bool {
    s.len() == 32 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

fn indices(list: &Value) -> Vec<u64> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|e| e["index"].as_u64().expect("index"))
        .collect()
}

fn step(tl: &Value, i: u64) -> &Value {
    tl["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["index"] == i)
        .unwrap_or_else(|| panic!("no step {i} in {tl}"))
}

/// Run an effect that must succeed as the next step; returns its step index.
#[track_caller]
fn effect(w: &World, args: &[&str]) -> u64 {
    let sid = args[1];
    let next = w.next_index(sid);
    let out = w.json(args);
    let doc = out.ok();
    let k = doc["step"]
        .as_u64()
        .unwrap_or_else(|| panic!("no step\n{}", out.dump()));
    assert_eq!(k, next, "an effect takes the next index\n{}", out.dump());
    assert_eq!(w.head(sid), k as i64, "the new step is the head");
    k
}

#[track_caller]
fn step_back(w: &World, sid: &str, to: i64) -> Value {
    let out = w.json(&["step-back", sid, "--to", &to.to_string()]);
    let doc = out.ok().clone();
    assert_eq!(doc["to"], to, "{}", out.dump());
    assert_eq!(
        doc["failed"],
        json!([]),
        "no inverse may fail\n{}",
        out.dump()
    );
    doc
}

/// Snapshot, run the effect, check it changed something, step back to just before it and
/// check the tree is back exactly. Returns (before, after) snapshots.
#[track_caller]
fn roundtrip(w: &World, ws: &Path, args: &[&str]) -> (Snapshot, Snapshot) {
    let sid = args[1];
    // A boundary is a live anchor to step back to (earlier round trips left undone steps,
    // which are not rewind targets).
    let anchor = effect(w, &["boundary", sid, "--label", "anchor"]);
    let before = snapshot(ws);
    let k = effect(w, args);
    let after = snapshot(ws);
    assert_ne!(before, after, "{args:?} changed nothing");
    let rep = step_back(w, sid, anchor as i64);
    assert_eq!(indices(&rep["inversesRan"]), vec![k], "{rep}");
    assert_snap_eq(
        &before,
        &snapshot(ws),
        &format!("after step-back over {args:?}"),
    );
    assert!(
        temp_leftovers(ws).is_empty(),
        "temp files left: {:?}",
        temp_leftovers(ws)
    );
    (before, after)
}

// ---------------------------------------------------------------- shapes and indices

#[test]
fn new_sessions_status_timeline_shapes() {
    let w = World::new();
    let ws_path = w.path("fresh/ws"); // does not exist yet: `new` creates it
    let out = w.json(&["new", "--workspace", ws_path.to_str().unwrap()]);
    let doc = out.ok();
    assert_eq!(keys(doc), ["session", "wal", "workspace"], "{doc}");
    let sid = doc["session"].as_str().unwrap().to_string();
    assert!(is_hex32(&sid), "session id {sid}");
    let ws = fs::canonicalize(&ws_path).expect("workspace created");
    assert!(ws.is_dir());
    assert_eq!(doc["workspace"], ws.to_str().unwrap());
    let wal = Path::new(doc["wal"].as_str().unwrap());
    assert!(wal.is_file(), "wal {wal:?} exists");
    assert!(
        wal.starts_with(fs::canonicalize(&w.store).unwrap()),
        "wal lives in the store"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&w.store).unwrap().permissions().mode() & 0o777,
        0o700,
        "store is created 0700"
    );

    let sessions = w.json(&["sessions"]).ok().clone();
    assert_eq!(keys(&sessions), ["sessions"]);
    let list = sessions["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["session"], sid.as_str());
    assert_eq!(list[0]["state"], "live");
    assert_eq!(list[0]["workspace"], ws.to_str().unwrap());
    assert_eq!(list[0]["head"], 0);
    assert!(list[0].get("parent").is_none());

    let st = w.json(&["status", &sid]).ok().clone();
    has_keys(
        &st,
        &[
            "session",
            "state",
            "workspace",
            "wal",
            "head",
            "torn",
            "provisions",
            "queue",
            "owed",
        ],
    );
    assert_eq!(st["session"], sid.as_str());
    assert_eq!(st["state"], "live");
    assert_eq!(st["workspace"], ws.to_str().unwrap());
    assert_eq!(Path::new(st["wal"].as_str().unwrap()), wal);
    assert_eq!(st["head"], 0);
    assert_eq!(st["torn"], false);
    assert_eq!(st["provisions"], json!({}));
    assert_eq!(st["queue"], json!([]));
    assert_eq!(st["owed"], json!([]));
    for k in ["parent", "forkedAt", "branch", "frozenAt"] {
        assert!(st.get(k).is_none(), "a fresh session has no {k}: {st}");
    }

    let tl = w.timeline(&sid);
    assert_eq!(
        keys(&tl),
        [
            "accumulated",
            "guarantee",
            "head",
            "session",
            "state",
            "steps",
            "torn"
        ],
        "{tl}"
    );
    assert_eq!(tl["session"], sid.as_str());
    assert_eq!(tl["state"], "live");
    assert_eq!(tl["head"], 0);
    assert_eq!(tl["torn"], false);
    assert_eq!(tl["accumulated"], json!([]));
    assert!(!tl["guarantee"].as_str().unwrap().is_empty());
    let steps = tl["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1);
    let hinge = &steps[0];
    assert_eq!(hinge["index"], 0);
    assert_eq!(hinge["kind"], "hinge");
    assert_eq!(hinge["label"], "session/hinge");
    assert_eq!(hinge["site"], "session");
    assert_eq!(hinge["detail"], json!({}));
    assert_eq!(hinge["undone"], false);
    assert!(hinge.get("undo").is_none() && hinge.get("scope").is_none());

    // A prefix of at least 6 characters names the session; the human output works too.
    let st2 = w.json(&["status", &sid[..8]]).ok().clone();
    assert_eq!(st2["session"], sid.as_str());
    let human = w.run(&["status", &sid]);
    assert_eq!(human.code, Some(0), "{}", human.dump());
    assert!(human.stdout.contains(&sid) && serde_json::from_str::<Value>(&human.stdout).is_err());
    // `--json` may appear after the command too.
    let late = w.run(&["timeline", &sid, "--json"]);
    assert_eq!(late.code, Some(0));
    assert_eq!(
        serde_json::from_str::<Value>(&late.stdout).unwrap()["head"],
        0
    );
}

#[test]
fn the_store_is_flag_then_revl_store_then_xdg_then_home() {
    let w = World::new();
    let wal_of = |out: Out| Path::new(out.ok()["wal"].as_str().unwrap()).to_path_buf();
    let under = |p: &Path, dir: &Path| p.starts_with(fs::canonicalize(dir).unwrap());
    // Nothing set: ~/.local/state/revl under the (temp) HOME.
    let ws = w.ws("ws1");
    let wal = wal_of(w.run_raw(&["--json", "new", "--workspace", ws.to_str().unwrap()], &[]));
    assert!(under(&wal, &w.home.join(".local/state/revl")), "{wal:?}");
    // XDG_STATE_HOME/revl.
    let xdg = w.path("xdg");
    let ws = w.ws("ws2");
    let wal = wal_of(w.run_raw(
        &["--json", "new", "--workspace", ws.to_str().unwrap()],
        &[("XDG_STATE_HOME", xdg.to_str().unwrap())],
    ));
    assert!(under(&wal, &xdg.join("revl")), "{wal:?}");
    // REVL_STORE beats XDG_STATE_HOME.
    let env_store = w.path("env-store");
    let ws = w.ws("ws3");
    let wal = wal_of(w.run_raw(
        &["--json", "new", "--workspace", ws.to_str().unwrap()],
        &[
            ("XDG_STATE_HOME", xdg.to_str().unwrap()),
            ("REVL_STORE", env_store.to_str().unwrap()),
        ],
    ));
    assert!(under(&wal, &env_store), "{wal:?}");
    // --store beats REVL_STORE.
    let ws = w.ws("ws4");
    let wal = wal_of(w.run_env(
        &["--json", "new", "--workspace", ws.to_str().unwrap()],
        &[("REVL_STORE", env_store.to_str().unwrap())],
    ));
    assert!(under(&wal, &w.store), "{wal:?}");
}

#[test]
fn effect_steps_have_the_spec_fields() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("old.txt"), b"old", 0o600);
    let k1 = effect(&w, &["write", &sid, "a.txt", "--content", "hello"]);
    let k2 = effect(&w, &["rename", &sid, "a.txt", "b.txt"]);
    let tl = w.timeline(&sid);
    let s1 = step(&tl, k1);
    assert_eq!(s1["kind"], "effect");
    assert_eq!(s1["label"], "fs.write a.txt");
    assert_eq!(s1["site"], "write");
    assert_eq!(s1["scope"], json!({"caps": ["fs"]}));
    assert_eq!(s1["undoIdempotent"], true);
    assert_eq!(s1["undone"], false);
    assert!(
        s1["undo"].is_object(),
        "a file effect has an inverse descriptor: {s1}"
    );
    assert_eq!(s1["detail"]["path"], "a.txt");
    assert_eq!(s1["detail"]["after"]["kind"], "file");
    assert!(s1["detail"]["after"]["digest"]
        .as_str()
        .is_some_and(|d| d.len() == 64));
    assert_eq!(
        s1["detail"]["after"]["mode"],
        format!("{:04o}", 0o666 & !0o022 & 0o644)
    );
    let ts = s1["ts"].as_str().expect("ts");
    assert!(
        ts.len() >= 20 && ts.as_bytes()[4] == b'-' && ts.contains('T'),
        "RFC 3339 ts: {ts}"
    );
    let s2 = step(&tl, k2);
    assert_eq!(s2["label"], "fs.rename a.txt -> b.txt");
    assert_eq!(s2["site"], "rename");
    assert_eq!(s2["detail"]["path"], "a.txt");
    assert_eq!(s2["detail"]["to"], "b.txt");
    assert_eq!(s2["detail"]["after"]["kind"], "file");
    assert_eq!(
        tl["accumulated"],
        json!([k2, k1]),
        "effects with an inverse, newest first"
    );
    for (args, label, site) in [
        (vec!["mkdir", &sid, "d/e"], "fs.mkdir d/e", "mkdir"),
        (
            vec!["chmod", &sid, "old.txt", "644"],
            "fs.chmod old.txt",
            "chmod",
        ),
        (
            vec!["delete", &sid, "old.txt"],
            "fs.delete old.txt",
            "delete",
        ),
    ] {
        let k = effect(&w, &args);
        let s = step(&w.timeline(&sid), k).clone();
        assert_eq!(s["label"], label);
        assert_eq!(s["site"], site);
        assert_eq!(s["kind"], "effect");
    }
}

#[test]
fn head_grows_by_one_and_indices_are_never_reused() {
    let w = World::new();
    let (sid, ws) = w.session();
    let mut seqs = Vec::new();
    let mut run = |args: &[&str]| {
        let head = w.head(&sid);
        let doc = w.json(args).ok().clone();
        assert_eq!(doc["step"], head + 1, "{doc}");
        seqs.push(doc["seq"].as_u64().expect("seq"));
        doc["step"].as_u64().unwrap()
    };
    assert_eq!(run(&["write", &sid, "a.txt", "--content", "1"]), 1);
    assert_eq!(run(&["provide", &sid, "k", "v"]), 2);
    assert_eq!(run(&["boundary", &sid, "--label", "turn1"]), 3);
    assert_eq!(run(&["write", &sid, "b.txt", "--content", "2"]), 4);
    assert!(
        seqs.windows(2).all(|p| p[0] < p[1]),
        "seq strictly increases: {seqs:?}"
    );

    let rep = step_back(&w, &sid, 2);
    assert_eq!(rep["toLabel"], "provide k");
    assert_eq!(indices(&rep["inversesRan"]), vec![4]);
    assert!(!ws.join("b.txt").exists());
    assert!(ws.join("a.txt").exists());

    // The next effect takes head+1 = 5, never 3 or 4 again.
    let doc = w
        .json(&["write", &sid, "c.txt", "--content", "3"])
        .ok()
        .clone();
    assert_eq!(doc["step"], 5);
    let tl = w.timeline(&sid);
    assert_eq!(tl["head"], 5);
    let idx: Vec<u64> = tl["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["index"].as_u64().unwrap())
        .collect();
    assert_eq!(
        idx,
        vec![0, 1, 2, 3, 4, 5],
        "undone steps stay in the timeline"
    );
    let s4 = step(&tl, 4);
    assert_eq!(s4["undone"], true);
    assert_eq!(s4["undoneBy"], "step_back");
    assert_eq!(s4["label"], "fs.write b.txt");
    assert_eq!(step(&tl, 3)["kind"], "boundary");
    assert_eq!(step(&tl, 3)["label"], "turn1/boundary");
    for i in [1, 2, 5] {
        assert_eq!(step(&tl, i)["undone"], false, "step {i} is live");
        assert!(step(&tl, i).get("undoneBy").is_none());
    }
    assert_eq!(
        tl["accumulated"],
        json!([5, 2, 1]),
        "undone steps are not accumulated"
    );

    // Steps inside the stepped-over span are not rewind targets.
    for k in ["3", "4"] {
        let msg = w.json(&["step-back", &sid, "--to", k]).err(1, "undone");
        assert!(msg.contains(k), "{msg}");
    }
    // A step-back to -1 undoes everything that is left, newest first.
    let rep = step_back(&w, &sid, -1);
    assert_eq!(rep["toLabel"], "(before every step)");
    assert_eq!(indices(&rep["inversesRan"]), vec![5, 1]);
    assert_eq!(indices(&rep["provisionsWithdrawn"]), vec![2]);
    assert!(snapshot(&ws).is_empty());
    assert_eq!(w.json(&["boundary", &sid]).ok()["step"], 6);
}

#[test]
fn step_back_report_shape() {
    let w = World::new();
    let (sid, _ws) = w.session();
    effect(&w, &["write", &sid, "a.txt", "--content", "x"]);
    effect(&w, &["provide", &sid, "k", "v"]);
    effect(&w, &["boundary", &sid]);
    let rep = step_back(&w, &sid, 0);
    assert_eq!(
        keys(&rep),
        [
            "compensate",
            "droppedDeferred",
            "emissionsCompensated",
            "emissionsCrossed",
            "failed",
            "guarantee",
            "inversesRan",
            "live",
            "preserved",
            "provisionsWithdrawn",
            "to",
            "toLabel",
            "unrestored",
            "wouldCrossOnRewind"
        ]
    );
    assert_eq!(rep["toLabel"], "session/hinge");
    assert_eq!(rep["compensate"], false);
    assert_eq!(rep["live"], true);
    assert_eq!(
        rep["inversesRan"],
        json!([{"index": 1, "kind": "effect", "label": "fs.write a.txt", "site": "write", "scope": {"caps": ["fs"]}}])
    );
    assert_eq!(indices(&rep["provisionsWithdrawn"]), vec![2]);
    assert_eq!(rep["provisionsWithdrawn"][0]["kind"], "provision");
    for k in [
        "emissionsCrossed",
        "emissionsCompensated",
        "wouldCrossOnRewind",
        "unrestored",
        "droppedDeferred",
    ] {
        assert_eq!(rep[k], json!([]), "{k}");
    }
}

// ---------------------------------------------------------------- effects and their rewind

#[test]
fn write_then_step_back_restores_bytes_modes_and_absence() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("keep.txt"), b"untouched", 0o640);
    put(&ws.join("ro.txt"), b"read only", 0o444);
    put(&ws.join("exec.sh"), b"#!/bin/sh\n", 0o755);

    // A new file with missing parents: the inverse removes the parents it created.
    let (_, after) = roundtrip(
        &w,
        &ws,
        &["write", &sid, "a/b/c/new.txt", "--content", "fresh"],
    );
    assert_eq!(after["a/b/c/new.txt"].2, b"fresh");
    assert_eq!(after["a"].0, Kind::Dir);
    assert!(!ws.join("a").exists(), "the created parents are gone");
    // Below an existing parent: only the new subtree goes.
    fs::create_dir(ws.join("p")).unwrap();
    roundtrip(&w, &ws, &["write", &sid, "p/q/r.txt", "--content", "x"]);
    assert!(ws.join("p").is_dir() && !ws.join("p/q").exists());

    // Overwrites keep the mode and are undone exactly.
    let (_, after) = roundtrip(&w, &ws, &["write", &sid, "ro.txt", "--content", "changed"]);
    assert_eq!(
        after["ro.txt"],
        (Kind::File, 0o444, b"changed".to_vec()),
        "mode kept"
    );
    let (_, after) = roundtrip(&w, &ws, &["write", &sid, "exec.sh", "--content", ""]);
    assert_eq!(
        after["exec.sh"],
        (Kind::File, 0o755, Vec::new()),
        "empty content, mode kept"
    );

    // Binary, non-UTF-8 and > 4 KiB contents, through --from, over a > 4 KiB file.
    let big_old: Vec<u8> = (0..9000u32).map(|i| (i * 31 % 251) as u8).collect();
    put(&ws.join("big.bin"), &big_old, 0o600);
    let big_new: Vec<u8> = (0..7000u32).map(|i| 0xff - (i % 7) as u8).collect();
    let payload = w.path("payload.bin");
    fs::write(&payload, &big_new).unwrap();
    let (before, after) = roundtrip(
        &w,
        &ws,
        &[
            "write",
            &sid,
            "big.bin",
            "--from",
            payload.to_str().unwrap(),
        ],
    );
    assert_eq!(after["big.bin"], (Kind::File, 0o600, big_new.clone()));
    assert_eq!(before["big.bin"].2, big_old);
    let bin = vec![0u8, 0xc3, 0x28, 0xff, 0xfe, b'\n', 0];
    fs::write(&payload, &bin).unwrap();
    let (_, after) = roundtrip(
        &w,
        &ws,
        &[
            "write",
            &sid,
            "new.bin",
            "--from",
            payload.to_str().unwrap(),
        ],
    );
    assert_eq!(after["new.bin"].2, bin);

    // Writing over a symlink replaces the link itself; the rewind puts the link back.
    std::os::unix::fs::symlink("keep.txt", ws.join("ln")).unwrap();
    let (_, after) = roundtrip(&w, &ws, &["write", &sid, "ln", "--content", "not through"]);
    assert_eq!(after["ln"].0, Kind::File);
    assert_eq!(
        after["keep.txt"].2, b"untouched",
        "never writes through a link"
    );
    assert_eq!(
        snapshot(&ws)["ln"],
        (Kind::Symlink, 0, b"keep.txt".to_vec())
    );
}

#[test]
fn delete_of_a_file_and_of_a_tree_is_undone_exactly() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("f.txt"), b"file", 0o640);
    put(&ws.join("big.bin"), &vec![0xabu8; 5000], 0o600);
    put(&ws.join("t/a.txt"), b"a", 0o644);
    put(&ws.join("t/empty"), b"", 0o444);
    put(&ws.join("t/s/b.bin"), &[0, 1, 2, 0xff], 0o755);
    put(
        &ws.join("t/s/large.bin"),
        &(0..6000u32).map(|i| i as u8).collect::<Vec<_>>(),
        0o600,
    );
    fs::create_dir_all(ws.join("t/s/deep/er")).unwrap();
    std::os::unix::fs::symlink("../a.txt", ws.join("t/s/ln")).unwrap();
    chmod(&ws.join("t/s"), 0o750);
    chmod(&ws.join("t/s/deep"), 0o700);
    chmod(&ws.join("t"), 0o711);

    let (_, after) = roundtrip(&w, &ws, &["delete", &sid, "f.txt"]);
    assert!(!after.contains_key("f.txt"));
    roundtrip(&w, &ws, &["delete", &sid, "big.bin"]);
    let (before, after) = roundtrip(&w, &ws, &["delete", &sid, "t"]);
    assert!(after.keys().all(|k| !k.starts_with('t')), "{after:?}");
    assert_eq!(before["t"].1, 0o711);
    // An empty directory, and a subtree.
    roundtrip(&w, &ws, &["delete", &sid, "t/s/deep/er"]);
    roundtrip(&w, &ws, &["delete", &sid, "t/s"]);
    // Deleting what is absent is refused and is no step.
    let head = w.head(&sid);
    w.json(&["delete", &sid, "nope"]).err(2, "bad-args");
    assert_eq!(w.head(&sid), head);
}

#[test]
fn rename_replaces_a_file_target_and_refuses_a_non_empty_dir() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("a.txt"), b"aaa", 0o600);
    put(&ws.join("b.txt"), b"bbb", 0o644);
    put(&ws.join("d/x"), b"x", 0o644);
    fs::create_dir(ws.join("empty")).unwrap();
    put(&ws.join("full/y"), b"y", 0o644);

    // To a new path with missing parents.
    let (_, after) = roundtrip(&w, &ws, &["rename", &sid, "a.txt", "n/m/a.txt"]);
    assert_eq!(after["n/m/a.txt"], (Kind::File, 0o600, b"aaa".to_vec()));
    assert!(!after.contains_key("a.txt"));
    // Replacing an existing file: both preimages are kept.
    let (before, after) = roundtrip(&w, &ws, &["rename", &sid, "a.txt", "b.txt"]);
    assert_eq!(after["b.txt"], (Kind::File, 0o600, b"aaa".to_vec()));
    assert_eq!(before["b.txt"], (Kind::File, 0o644, b"bbb".to_vec()));
    // A directory, onto an empty directory, and to a new name.
    roundtrip(&w, &ws, &["rename", &sid, "d", "empty"]);
    roundtrip(&w, &ws, &["rename", &sid, "d", "e"]);

    // A non-empty directory target is refused; nothing changes, no step.
    let head = w.head(&sid);
    let before = snapshot(&ws);
    w.json(&["rename", &sid, "d", "full"]).err(2, "bad-args");
    w.json(&["rename", &sid, "a.txt", "full"])
        .err(2, "bad-args");
    w.json(&["rename", &sid, "missing", "z"]).err(2, "bad-args");
    assert_eq!(w.head(&sid), head);
    assert_snap_eq(&before, &snapshot(&ws), "refused renames");
}

#[test]
fn mkdir_and_chmod_are_undone_exactly() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("f.txt"), b"f", 0o644);
    fs::create_dir(ws.join("d")).unwrap();
    chmod(&ws.join("d"), 0o750);

    let (_, after) = roundtrip(&w, &ws, &["mkdir", &sid, "new"]);
    assert_eq!(after["new"].0, Kind::Dir);
    let (_, after) = roundtrip(&w, &ws, &["mkdir", &sid, "x/y/z"]);
    assert!(after.contains_key("x/y/z"));
    assert!(!ws.join("x").exists());
    roundtrip(&w, &ws, &["mkdir", &sid, "d/sub"]);
    assert!(ws.join("d").is_dir());

    // An existing directory (or file) is an error (exit 2), no step.
    let head = w.head(&sid);
    w.json(&["mkdir", &sid, "d"]).err(2, "bad-args");
    w.json(&["mkdir", &sid, "f.txt"]).err(2, "bad-args");
    assert_eq!(w.head(&sid), head);

    let (_, after) = roundtrip(&w, &ws, &["chmod", &sid, "f.txt", "0755"]);
    assert_eq!(after["f.txt"].1, 0o755);
    let (_, after) = roundtrip(&w, &ws, &["chmod", &sid, "f.txt", "600"]);
    assert_eq!(after["f.txt"].1, 0o600);
    let (_, after) = roundtrip(&w, &ws, &["chmod", &sid, "d", "700"]);
    assert_eq!(after["d"].1, 0o700);
    assert_eq!(snapshot(&ws)["d"].1, 0o750);
    w.json(&["chmod", &sid, "f.txt", "9z"]).err(2, "bad-args");
    w.json(&["chmod", &sid, "absent", "644"]).err(2, "bad-args");
    assert_eq!(
        w.head(&sid),
        head + 6,
        "only the three chmod round trips (and their anchors) are steps"
    );
}

#[test]
fn a_long_sequence_steps_back_to_every_earlier_point() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("seed.txt"), b"seed", 0o644);
    let mut snaps = vec![(0u64, snapshot(&ws))];
    let script: Vec<Vec<&str>> = vec![
        vec!["write", "a.txt", "--content", "one"],
        vec!["mkdir", "d/e"],
        vec!["write", "d/e/f.bin", "--content", "\u{1}\u{2}"],
        vec!["chmod", "a.txt", "444"],
        vec!["rename", "a.txt", "d/a.txt"],
        vec!["write", "seed.txt", "--content", "reseeded"],
        vec!["delete", "d"],
    ];
    for s in &script {
        let mut args = vec![s[0], &sid];
        args.extend_from_slice(&s[1..]);
        let k = effect(&w, &args);
        snaps.push((k, snapshot(&ws)));
    }
    // Walk back one point at a time, checking every intermediate tree.
    for (k, snap) in snaps.iter().rev().skip(1) {
        step_back(&w, &sid, *k as i64);
        assert_snap_eq(snap, &snapshot(&ws), &format!("at step {k}"));
    }
    step_back(&w, &sid, -1);
    assert_snap_eq(&snaps[0].1, &snapshot(&ws), "at -1");
}

// ---------------------------------------------------------------- provisions

#[test]
fn provide_inspect_and_withdraw() {
    let w = World::new();
    let (sid, _ws) = w.session();
    assert_eq!(effect(&w, &["provide", &sid, "token", "v1"]), 1);
    assert_eq!(effect(&w, &["provide", &sid, "token", "v2"]), 2);
    assert_eq!(effect(&w, &["write", &sid, "f", "--content", "x"]), 3);
    assert_eq!(effect(&w, &["provide", &sid, "region", "eu"]), 4);

    let tl = w.timeline(&sid);
    let p2 = step(&tl, 2);
    assert_eq!(p2["kind"], "provision");
    assert_eq!(p2["label"], "provide token");
    assert_eq!(p2["site"], "provide");
    assert_eq!(
        p2["detail"],
        json!({"key": "token", "value": "v2", "previous": "v1"})
    );
    assert_eq!(step(&tl, 1)["detail"]["previous"], Value::Null);

    let inspect = |k: &str| w.json(&["inspect", &sid, "--at", k]).ok().clone();
    let at = inspect("-1");
    assert_eq!(
        keys(&at),
        [
            "accumulated",
            "aheadOfHere",
            "at",
            "atLabel",
            "activeProvisions",
            "emissionsSoFar"
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    assert_eq!(at["at"], -1);
    assert_eq!(at["atLabel"], "(before every step)");
    assert_eq!(at["activeProvisions"], json!({}));
    assert_eq!(at["aheadOfHere"], json!([0, 1, 2, 3, 4]));
    assert_eq!(inspect("0")["activeProvisions"], json!({}));
    assert_eq!(inspect("0")["atLabel"], "session/hinge");
    assert_eq!(inspect("1")["activeProvisions"], json!({"token": "v1"}));
    let at2 = inspect("2");
    assert_eq!(at2["activeProvisions"], json!({"token": "v2"}));
    assert_eq!(at2["atLabel"], "provide token");
    assert_eq!(at2["aheadOfHere"], json!([3, 4]));
    assert_eq!(at2["accumulated"], json!([2, 1]));
    assert_eq!(at2["emissionsSoFar"], json!([]));
    assert_eq!(
        inspect("4")["activeProvisions"],
        json!({"token": "v2", "region": "eu"})
    );
    assert_eq!(inspect("4")["accumulated"], json!([4, 3, 2, 1]));
    assert_eq!(
        w.json(&["status", &sid]).ok()["provisions"],
        json!({"token": "v2", "region": "eu"})
    );

    let rep = step_back(&w, &sid, 1);
    assert_eq!(
        indices(&rep["provisionsWithdrawn"]),
        vec![4, 2],
        "newest first"
    );
    assert_eq!(indices(&rep["inversesRan"]), vec![3]);
    assert_eq!(
        w.json(&["status", &sid]).ok()["provisions"],
        json!({"token": "v1"})
    );
    assert_eq!(inspect("1")["activeProvisions"], json!({"token": "v1"}));
    let tl = w.timeline(&sid);
    for i in [2, 4] {
        assert_eq!(step(&tl, i)["undone"], true);
        assert_eq!(step(&tl, i)["undoneBy"], "step_back");
    }
    step_back(&w, &sid, -1);
    assert_eq!(w.json(&["status", &sid]).ok()["provisions"], json!({}));
    w.json(&["provide", &sid, "", "v"]).err(2, "bad-args");
}

// ---------------------------------------------------------------- exec

#[test]
fn unconfined_exec_records_an_opaque_step_and_never_uses_a_shell() {
    let w = World::new();
    let (sid, ws) = w.session();
    let out = w.json(&[
        "exec",
        &sid,
        "--unconfined",
        "--",
        "echo",
        "$HOME;ls",
        "*",
        "`id`",
    ]);
    let doc = out.ok();
    assert_eq!(doc["step"], 1);
    assert_eq!(doc["exitCode"], 0);
    assert_eq!(
        doc["stdout"], "$HOME;ls * `id`\n",
        "the argv reaches the program literally"
    );
    assert_eq!(doc["stderr"], "");

    // A failing command: revl still exits 0, and the status is in the result.
    let doc = w
        .json(&["exec", &sid, "--unconfined", "--", "false"])
        .ok()
        .clone();
    assert_eq!(doc["exitCode"], 1);
    assert_eq!(doc["step"], 2);
    let doc = w
        .json(&[
            "exec",
            &sid,
            "--unconfined",
            "--",
            "sh",
            "-c",
            "echo err >&2; exit 7",
        ])
        .ok()
        .clone();
    assert_eq!(doc["exitCode"], 7);
    assert_eq!(doc["stderr"], "err\n");
    // It runs in the workspace.
    let doc = w
        .json(&["exec", &sid, "--unconfined", "--", "pwd"])
        .ok()
        .clone();
    assert_eq!(
        doc["stdout"].as_str().unwrap().trim_end(),
        ws.to_str().unwrap()
    );
    // Human output also exits 0 for a failing command.
    assert_eq!(
        w.run(&["exec", &sid, "--unconfined", "--", "false"]).code,
        Some(0)
    );

    let tl = w.timeline(&sid);
    let s = step(&tl, 1);
    assert_eq!(s["kind"], "opaque");
    assert_eq!(s["label"], "exec/opaque");
    assert_eq!(s["site"], "exec");
    assert!(s.get("undo").is_none(), "an opaque step has no inverse");
    let repr = s["detail"]["repr"].as_str().expect("repr");
    assert!(repr.contains("echo") && repr.contains("$HOME;ls"), "{repr}");
    assert!(
        step(&tl, 2)["detail"]["repr"]
            .as_str()
            .unwrap()
            .contains('1'),
        "the repr carries the exit status"
    );
    assert_eq!(
        tl["accumulated"],
        json!([]),
        "opaque steps are not accumulated"
    );

    // A command that cannot start is an error, and no step.
    let head = w.head(&sid);
    w.json(&["exec", &sid, "--unconfined", "--", "/nonexistent/program"])
        .err(1, "exec-failed");
    assert_eq!(w.head(&sid), head);

    // A rewind over it lists it as unrestored, with its repr.
    let rep = step_back(&w, &sid, 0);
    let un = rep["unrestored"].as_array().unwrap();
    assert_eq!(
        indices(&rep["unrestored"]),
        (1..=head as u64).rev().collect::<Vec<_>>()
    );
    assert_eq!(un.last().unwrap()["repr"], repr);
    assert_eq!(un[0]["kind"], "opaque");
}

// ---------------------------------------------------------------- reads record nothing

#[test]
fn read_list_and_other_readers_record_nothing() {
    let w = World::new();
    let (sid, ws) = w.session();
    effect(&w, &["write", &sid, "d/t.txt", "--content", "text"]);
    put(&ws.join("d/b.bin"), &[0xff, 0xfe, 0], 0o600);
    let wal = w.wal(&sid);
    let before = fs::read(&wal).unwrap();

    let r = w.json(&["read", &sid, "d/t.txt"]).ok().clone();
    assert_eq!(r["path"], "d/t.txt");
    assert_eq!(r["content"], "text");
    assert_eq!(r["mode"], "0644");
    let r = w.json(&["read", &sid, "d/b.bin"]).ok().clone();
    assert_eq!(r["contentBase64"], "//4A");
    assert_eq!(r["mode"], "0600");
    assert!(r.get("content").is_none());
    let l = w.json(&["list", &sid]).ok().clone();
    assert_eq!(
        l["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["d"]
    );
    assert_eq!(l["entries"][0]["kind"], "dir");
    let l = w.json(&["list", &sid, "d"]).ok().clone();
    let names: Vec<&str> = l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["b.bin", "t.txt"]);
    assert_eq!(l["entries"][1]["size"], 4);
    for args in [
        vec!["status", &sid],
        vec!["timeline", &sid],
        vec!["inspect", &sid, "--at", "1"],
        vec!["sessions"],
    ] {
        w.json(&args).ok();
    }
    // d/b.bin was put by hand inside d, which revl created: drift, so verify exits 1.
    let v = w.json(&["verify", &sid]);
    assert_eq!(v.code, Some(1), "{}", v.dump());
    assert_eq!(v.doc()["drift"][0]["path"], "d/b.bin");
    w.json(&["read", &sid, "nope"]).err(1, "absent");
    assert_eq!(w.head(&sid), 1);
    assert_eq!(
        fs::read(&wal).unwrap(),
        before,
        "readers never write the WAL"
    );
}

// ---------------------------------------------------------------- verify

#[test]
fn verify_reports_drift_from_outside_changes_only() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("pre.txt"), b"pre", 0o644);
    effect(&w, &["write", &sid, "a.txt", "--content", "A"]);
    effect(&w, &["write", &sid, "d/b.txt", "--content", "B"]);
    effect(&w, &["chmod", &sid, "pre.txt", "600"]);
    effect(&w, &["mkdir", &sid, "m"]);
    let v = w.json(&["verify", &sid]).ok().clone();
    assert_eq!(
        v["drift"],
        json!([]),
        "no drift before any outside change: {v}"
    );

    // Changes outside revl: content, mode, removal.
    fs::write(ws.join("a.txt"), "tampered").unwrap();
    chmod(&ws.join("d/b.txt"), 0o777);
    fs::remove_dir(ws.join("m")).unwrap();
    let out = w.json(&["verify", &sid]);
    assert_eq!(out.code, Some(1), "verify exits 1 on drift\n{}", out.dump());
    let v = out.doc().clone();
    let drift = v["drift"].as_array().unwrap();
    let mut paths: Vec<&str> = drift.iter().map(|d| d["path"].as_str().unwrap()).collect();
    paths.sort_unstable();
    assert_eq!(paths, vec!["a.txt", "d/b.txt", "m"], "{v}");
    for d in drift {
        has_keys(d, &["path", "expected", "actual"]);
        assert_ne!(d["expected"], d["actual"]);
    }
    let a = drift.iter().find(|d| d["path"] == "a.txt").unwrap();
    assert_eq!(a["actual"]["kind"], "file");
    assert_ne!(a["expected"]["digest"], a["actual"]["digest"]);
    assert_eq!(
        drift.iter().find(|d| d["path"] == "m").unwrap()["actual"]["kind"],
        "absent"
    );
    // An unwitnessed file is not drift.
    fs::write(ws.join("other.txt"), "x").unwrap();
    assert_eq!(
        w.json(&["verify", &sid]).doc()["drift"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Put things back as revl left them: no drift again.
    fs::write(ws.join("a.txt"), "A").unwrap();
    chmod(&ws.join("a.txt"), 0o644);
    chmod(&ws.join("d/b.txt"), 0o644);
    fs::create_dir(ws.join("m")).unwrap();
    chmod(&ws.join("m"), 0o755);
    assert_eq!(w.json(&["verify", &sid]).ok()["drift"], json!([]));
    // After a rewind the expectation is the restored preimage.
    step_back(&w, &sid, 1);
    assert_eq!(
        w.json(&["verify", &sid]).ok()["drift"],
        json!([]),
        "no drift right after a step-back"
    );
    step_back(&w, &sid, -1);
    assert_eq!(
        w.json(&["verify", &sid]).ok()["drift"],
        json!([]),
        "no drift right after a step-back to -1"
    );
}

/// `verify` after `mkdir x` then `write x/f`: the directory's post-image digest recorded by
/// the mkdir is superseded by the later write below it; revl itself made both changes.
#[test]
fn verify_after_mkdir_then_a_write_inside_it() {
    let w = World::new();
    let (sid, _ws) = w.session();
    effect(&w, &["mkdir", &sid, "x"]);
    effect(&w, &["write", &sid, "x/f", "--content", "hi"]);
    assert_no_drift(&w, &sid);
}

/// `verify` after a step-back and a new effect on the same path: the newer step's
/// post-image is the expectation, not the older undone step's preimage.
#[test]
fn verify_after_step_back_then_a_new_effect_on_the_same_path() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("d/c"), b"c", 0o644);
    effect(&w, &["write", &sid, "a.txt", "--content", "first"]);
    effect(&w, &["delete", &sid, "d"]);
    step_back(&w, &sid, -1);
    effect(&w, &["write", &sid, "a.txt", "--content", "second"]);
    effect(&w, &["delete", &sid, "d"]);
    assert_no_drift(&w, &sid);
}

/// `verify` after rewinding a chmod of a file and the delete of its parent directory: the
/// directory's expected digest must reflect the child's restored mode.
#[test]
fn verify_after_rewinding_a_chmod_under_a_deleted_dir() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("d/c"), b"c", 0o644);
    effect(&w, &["chmod", &sid, "d/c", "755"]);
    effect(&w, &["delete", &sid, "d"]);
    step_back(&w, &sid, -1);
    assert_eq!(snapshot(&ws)["d/c"].1, 0o644, "the rewind itself is right");
    assert_no_drift(&w, &sid);
}

/// TEXT and VALUE arguments that start with `-` (a negative number, a flag-like string) are
/// ordinary values for `write --content TEXT` and `provide KEY VALUE`.
#[test]
fn values_that_start_with_a_dash() {
    let w = World::new();
    let (sid, ws) = w.session();
    effect(&w, &["write", &sid, "n.txt", "--content", "-1"]);
    assert_eq!(fs::read(ws.join("n.txt")).unwrap(), b"-1");
    effect(&w, &["provide", &sid, "offset", "-5"]);
    assert_eq!(
        w.json(&["status", &sid]).ok()["provisions"],
        json!({"offset": "-5"})
    );
}

// ---------------------------------------------------------------- the error document

#[test]
fn error_documents_and_exit_codes() {
    let w = World::new();
    let (sid, ws) = w.session();
    effect(&w, &["write", &sid, "a", "--content", "1"]);
    effect(&w, &["write", &sid, "b", "--content", "2"]);

    // Unknown session: exit 2.
    let msg = w
        .json(&["status", "0123456789abcdef0123456789abcdef"])
        .err(2, "unknown-session");
    assert!(msg.contains("0123456789abcdef0123456789abcdef"), "{msg}");
    // The CLI words the core's remedy in its own commands.
    let out = w.json(&["status", "0123456789abcdef0123456789abcdef"]);
    let hint = out.doc()["error"]["hint"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(hint.contains("`revl sessions`"), "{hint}");
    w.json(&["timeline", "abc"]).err(2, "unknown-session");
    w.json(&["write", "nothex!!", "f", "--content", "x"])
        .err(2, "unknown-session");

    // Bad K: exit 2 `bad-args`.
    for k in ["abc", "1.5", "99", "-2", "3"] {
        w.json(&["step-back", &sid, "--to", k]).err(2, "bad-args");
        w.json(&["inspect", &sid, "--at", k]).err(2, "bad-args");
    }
    // Usage errors are documents too.
    w.json(&["step-back", &sid]).err(2, "usage");
    w.json(&["frobnicate"]).err(2, "usage");
    w.json(&["write", &sid, "f"]).err(2, "usage");

    // A step-back to an undone step: exit 1 `undone`.
    step_back(&w, &sid, 1);
    let msg = w.json(&["step-back", &sid, "--to", "2"]).err(1, "undone");
    assert!(msg.contains('2'), "{msg}");
    assert_eq!(w.head(&sid), 1, "the head is the last live step");

    // Human mode: no JSON on stdout, one line on stderr, same exit codes.
    let out = w.run(&["step-back", &sid, "--to", "2"]);
    assert_eq!(out.code, Some(1));
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.dump());
    assert!(out.stderr.contains("undone"));
    let out = w.run(&["status", "ffffffffffff"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(out.stderr.lines().count(), 1);

    // A second `new` on the same workspace, one nested inside, one around it: workspace-busy.
    fs::create_dir_all(ws.join("sub")).unwrap();
    let ws_s = ws.to_str().unwrap();
    let msg = w
        .json(&["new", "--workspace", ws_s])
        .err(1, "workspace-busy");
    assert!(
        msg.contains(&sid),
        "the message names the live session: {msg}"
    );
    w.json(&["new", "--workspace", ws.join("sub").to_str().unwrap()])
        .err(1, "workspace-busy");
    // Around: a workspace that contains ws (but not the store).
    let w2 = World::new();
    let outer = w2.ws("outer");
    let inner = w2.ws("outer/inner");
    let s2 = w2.new_session(&inner);
    w2.json(&["new", "--workspace", outer.to_str().unwrap()])
        .err(1, "workspace-busy");
    assert_eq!(
        w2.json(&["sessions"]).ok()["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        w.json(&["sessions"]).ok()["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "refused `new`s created no session"
    );
    let _ = s2;

    // Store inside the workspace, and workspace inside the store: exit 2.
    let w3 = World::new();
    let ws3 = w3.ws("ws3");
    let store_in = ws3.join("store");
    let out = w3.run_raw(
        &[
            "--json",
            "--store",
            store_in.to_str().unwrap(),
            "new",
            "--workspace",
            ws3.to_str().unwrap(),
        ],
        &[],
    );
    out.err(2, "store-in-workspace");
    let inside_store = w3.store.join("ws");
    w3.json(&["new", "--workspace", inside_store.to_str().unwrap()])
        .err(2, "store-in-workspace");
}

/// A refused `new` must leave no trace: a store inside a workspace is refused
/// (docs/reference.md, "Concepts"), yet the refused command has already created the store
/// (with `sessions/` and `blobs/`) inside it.
#[test]
fn refused_store_in_workspace_leaves_no_store_behind() {
    let w = World::new();
    let ws = w.ws("ws");
    let store_in = ws.join("store");
    let out = w.run_raw(
        &[
            "--json",
            "--store",
            store_in.to_str().unwrap(),
            "new",
            "--workspace",
            ws.to_str().unwrap(),
        ],
        &[],
    );
    out.err(2, "store-in-workspace");
    assert!(
        snapshot(&ws).is_empty(),
        "refused new left {:?} in the workspace",
        snapshot(&ws).keys().collect::<Vec<_>>()
    );
}

/// A `new` refused as workspace-busy because it is nested in a live session's workspace
/// must not change that live workspace (it would be an unwitnessed change).
#[test]
fn refused_nested_new_does_not_touch_the_live_workspace() {
    let w = World::new();
    let (sid, ws) = w.session();
    effect(&w, &["write", &sid, "f", "--content", "x"]);
    let before = snapshot(&ws);
    w.json(&[
        "new",
        "--workspace",
        ws.join("nested/deeper").to_str().unwrap(),
    ])
    .err(1, "workspace-busy");
    assert_snap_eq(
        &before,
        &snapshot(&ws),
        "a refused nested `new` changed the live workspace",
    );
    // The residue survives a rewind: a step-back to -1 does not give back the tree at -1.
    step_back(&w, &sid, -1);
    assert!(
        snapshot(&ws).is_empty(),
        "{:?}",
        snapshot(&ws).keys().collect::<Vec<_>>()
    );
}

#[test]
fn new_files_and_dirs_follow_the_umask() {
    let w = World::new();
    let (sid, ws) = w.session();
    let sh = |cmd: &str| {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "umask 027; exec \"$0\" --store \"$1\" --json {cmd}"
            ))
            .arg(bin())
            .arg(&w.store)
            .env_clear()
            .env("HOME", &w.home)
            .env("PATH", std::env::var_os("PATH").unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    sh(&format!("write {sid} n/f.txt --content x"));
    sh(&format!("mkdir {sid} d/e"));
    let snap = snapshot(&ws);
    assert_eq!(snap["n/f.txt"].1, 0o640, "0644 minus umask 027");
    assert_eq!(snap["d/e"].1, 0o750);
    // The recorded post-image agrees with the disk: no drift.
    assert_eq!(w.json(&["verify", &sid]).ok()["drift"], json!([]));
}

#[test]
fn a_tree_holding_a_non_utf8_name_is_rewound_byte_for_byte() {
    use std::os::unix::ffi::OsStrExt;
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("t/ok.txt"), b"ok", 0o644);
    fs::write(
        ws.join("t").join(std::ffi::OsStr::from_bytes(b"bad\xff")),
        b"x",
    )
    .unwrap();
    let before = snapshot(&ws);
    // Any name is data: the tree is captured whole, foreign name included, and comes back.
    w.json(&["rename", &sid, "t", "u"]).ok();
    assert_eq!(
        fs::read(ws.join("u").join(std::ffi::OsStr::from_bytes(b"bad\xff"))).unwrap(),
        b"x"
    );
    w.json(&["delete", &sid, "u"]).ok();
    assert!(!ws.join("u").exists());
    w.json(&["step-back", &sid, "--to", "0"]).ok();
    assert_snap_eq(&before, &snapshot(&ws), "the tree after the rewind");
    assert_eq!(
        fs::read(ws.join("t").join(std::ffi::OsStr::from_bytes(b"bad\xff"))).unwrap(),
        b"x"
    );
}

// ---------------------------------------------------------------- confinement

#[test]
fn hostile_paths_are_refused_and_nothing_outside_changes() {
    let w = World::new();
    let (sid, ws) = w.session();
    let outside = w.path("outside");
    put(&outside.join("sentinel"), b"secret", 0o600);
    put(&outside.join("dir/inner"), b"inner", 0o644);
    let root = w.root().to_path_buf();
    std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("sentinel"), ws.join("flink")).unwrap();
    std::os::unix::fs::symlink("../outside", ws.join("rel")).unwrap();
    std::os::unix::fs::symlink(outside.join("newfile"), ws.join("dangling")).unwrap();
    put(&ws.join("inside.txt"), b"inside", 0o644);
    fs::create_dir(ws.join("sub")).unwrap();
    effect(&w, &["write", &sid, "witnessed.txt", "--content", "w"]);

    let outside_before = snapshot(&root.join("outside"));
    let ws_before = snapshot(&ws);
    let wal_before = fs::read(w.wal(&sid)).unwrap();
    let passwd_before = fs::read("/etc/passwd").ok();
    let abs_sentinel = outside.join("sentinel").to_str().unwrap().to_string();

    let hostile: Vec<String> = vec![
        "../x".into(),
        "../outside/sentinel".into(),
        "sub/../../outside/sentinel".into(),
        "./../outside/newdir".into(),
        abs_sentinel.clone(),
        root.join("outside/new.txt").to_str().unwrap().into(),
        "link".into(),
        "link/sentinel".into(),
        "link/newfile".into(),
        "link/dir/inner".into(),
        "flink".into(),
        "rel".into(),
        "rel/sentinel".into(),
        "dangling".into(),
    ];
    let mut checked = 0;
    for p in &hostile {
        let p = p.as_str();
        let cases: Vec<Vec<&str>> = vec![
            vec!["write", &sid, p, "--content", "pwned"],
            vec!["delete", &sid, p],
            vec!["mkdir", &sid, p],
            vec!["chmod", &sid, p, "777"],
            vec!["rename", &sid, "inside.txt", p],
            vec!["rename", &sid, p, "stolen.txt"],
            vec!["read", &sid, p],
        ];
        for args in cases {
            let msg = w.json(&args).err(2, "path-outside");
            assert!(!msg.is_empty());
            checked += 1;
        }
    }
    // /etc/passwd, with verbs that would be harmless even if they got through.
    if let Some(bytes) = &passwd_before {
        let content = String::from_utf8_lossy(bytes).into_owned();
        use std::os::unix::fs::PermissionsExt;
        let mode = format!(
            "{:o}",
            fs::metadata("/etc/passwd").unwrap().permissions().mode() & 0o7777
        );
        for args in [
            vec!["write", &sid, "/etc/passwd", "--content", &content],
            vec!["chmod", &sid, "/etc/passwd", &mode],
            vec!["mkdir", &sid, "/etc/passwd"],
            vec!["read", &sid, "/etc/passwd"],
            vec!["list", &sid, "/etc"],
        ] {
            w.json(&args).err(2, "path-outside");
            checked += 1;
        }
    }
    for p in ["link", "rel", "../", "/tmp"] {
        w.json(&["list", &sid, p]).err(2, "path-outside");
    }
    assert!(checked >= 90);

    assert_snap_eq(
        &outside_before,
        &snapshot(&root.join("outside")),
        "outside the workspace",
    );
    assert!(!root.join("x").exists() && !root.join("stolen.txt").exists());
    assert_snap_eq(&ws_before, &snapshot(&ws), "inside the workspace");
    assert_eq!(fs::read("/etc/passwd").ok(), passwd_before);
    assert_eq!(w.head(&sid), 1, "no refused effect became a step");
    assert_eq!(
        fs::read(w.wal(&sid)).unwrap(),
        wal_before,
        "refusals write nothing to the WAL"
    );

    // A path through a symlink that stays inside is not followed either (exit 2), and a
    // symlink inside pointing inside may itself be replaced.
    std::os::unix::fs::symlink("sub", ws.join("inlink")).unwrap();
    let out = w.json(&["write", &sid, "inlink/f", "--content", "x"]);
    assert_eq!(out.code, Some(2), "{}", out.dump());
    assert!(!ws.join("sub/f").exists());
    // An absolute path inside the workspace is fine.
    let inside_abs = ws.join("abs.txt");
    effect(
        &w,
        &[
            "write",
            &sid,
            inside_abs.to_str().unwrap(),
            "--content",
            "ok",
        ],
    );
    assert_eq!(fs::read(&inside_abs).unwrap(), b"ok");
}

/// A directory replaced by a symlink to the outside AFTER revl witnessed a change below it:
/// the rewind must not restore (write or delete) through that link.
#[test]
fn a_rewind_never_acts_through_a_symlink_planted_later() {
    let w = World::new();
    let (sid, ws) = w.session();
    let outside = w.path("outside");
    put(&outside.join("f"), b"outside f", 0o600);
    put(&outside.join("g"), b"outside g", 0o644);
    put(&ws.join("d/g"), b"inside g", 0o644);
    effect(&w, &["write", &sid, "d/f", "--content", "new"]); // undo: d/f absent
    effect(&w, &["write", &sid, "d/g", "--content", "changed"]); // undo: d/g = "inside g"
                                                                 // Outside revl: d becomes a symlink to the outside directory.
    fs::remove_dir_all(ws.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("d")).unwrap();
    let outside_before = snapshot(&outside);

    let out = w.json(&["step-back", &sid, "--to", "0"]);
    assert_snap_eq(
        &outside_before,
        &snapshot(&outside),
        "outside the workspace after the rewind",
    );
    match out.code {
        Some(0) => {
            let failed = indices(&out.doc()["failed"]);
            assert_eq!(
                failed,
                vec![2, 1],
                "both inverses refuse to act through the link\n{}",
                out.dump()
            );
        }
        _ => {
            out.err(2, "path-outside");
        }
    }
    assert_eq!(snapshot(&ws)["d"].0, Kind::Symlink);
}

// ---------------------------------------------------------------- WAL integrity

#[test]
fn torn_tail_is_reported_then_truncated_by_the_next_write() {
    let w = World::new();
    let (sid, ws) = w.session();
    effect(&w, &["write", &sid, "a", "--content", "1"]);
    let wal = w.wal(&sid);
    let good = fs::read(&wal).unwrap();
    let mut torn = good.clone();
    torn.extend_from_slice(br#"{"record":"step","seq":9,"step":2,"kind":"bound"#);
    fs::write(&wal, &torn).unwrap();

    let st = w.json(&["status", &sid]).ok().clone();
    assert_eq!(st["torn"], true, "{st}");
    assert_eq!(st["head"], 1);
    let tl = w.timeline(&sid);
    assert_eq!(tl["torn"], true);
    assert_eq!(tl["head"], 1);
    assert_eq!(fs::read(&wal).unwrap(), torn, "readers do not truncate");

    // Trailing NUL bytes count as torn too.
    let mut nul = good.clone();
    nul.extend_from_slice(&[0u8; 64]);
    fs::write(&wal, &nul).unwrap();
    assert_eq!(w.json(&["status", &sid]).ok()["torn"], true);
    fs::write(&wal, &torn).unwrap();

    let k = effect(&w, &["write", &sid, "b", "--content", "2"]);
    assert_eq!(k, 2);
    let bytes = fs::read(&wal).unwrap();
    assert!(bytes.starts_with(&good), "the intact prefix is kept");
    assert!(
        !String::from_utf8_lossy(&bytes).contains("\"bound"),
        "the torn bytes are gone"
    );
    let recs = check_wal(&wal);
    assert_eq!(recs[0]["record"], "header");
    assert_eq!(recs[0]["walVersion"], 2);
    assert_eq!(w.json(&["status", &sid]).ok()["torn"], false);
    assert_eq!(fs::read(ws.join("b")).unwrap(), b"2");
    // seq is strictly increasing across the WAL.
    let seqs: Vec<u64> = recs.iter().filter_map(|r| r["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|p| p[0] < p[1]), "{seqs:?}");
}

fn every_command(sid: &str) -> Vec<Vec<&str>> {
    vec![
        vec!["status", sid],
        vec!["timeline", sid],
        vec!["verify", sid],
        vec!["inspect", sid, "--at", "0"],
        vec!["read", sid, "a"],
        vec!["list", sid],
        vec!["write", sid, "z", "--content", "z"],
        vec!["delete", sid, "a"],
        vec!["rename", sid, "a", "y"],
        vec!["mkdir", sid, "dd"],
        vec!["chmod", sid, "a", "600"],
        vec!["provide", sid, "k", "v"],
        vec!["boundary", sid],
        vec!["exec", sid, "--", "touch", "exec-ran"],
        vec!["step-back", sid, "--to", "-1"],
    ]
}

#[test]
fn a_flipped_byte_in_a_middle_line_is_corruption_everywhere() {
    let w = World::new();
    let (sid, ws) = w.session();
    effect(&w, &["write", &sid, "a", "--content", "1"]);
    effect(&w, &["provide", &sid, "k", "v"]);
    let wal = w.wal(&sid);
    let mut bytes = fs::read(&wal).unwrap();
    // Line 3 is the write's intent; flip one byte inside its label.
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .collect();
    assert!(starts.len() > 5);
    let line3 = &bytes[starts[2]..starts[3]];
    let at = starts[2]
        + line3
            .windows(8)
            .position(|x| x == b"fs.write")
            .expect("line 3 is the write intent");
    bytes[at] ^= 0x20; // fs.write -> Fs.write
    fs::write(&wal, &bytes).unwrap();
    let ws_before = snapshot(&ws);

    for args in every_command(&sid) {
        if matches!(args[0], "status" | "timeline") {
            // These show the intact records before line 3, marked (issue 23).
            let doc = w.json(&args).ok().clone();
            assert_eq!(doc["corrupt"]["line"], 3, "{doc}");
            assert_eq!(doc["corrupt"]["path"], wal.to_str().unwrap(), "{doc}");
            continue;
        }
        let msg = w.json(&args).err(1, "corrupt-wal");
        assert!(
            msg.contains(wal.to_str().unwrap()),
            "the message names the WAL path: {msg}"
        );
        assert!(msg.contains("line 3"), "the message names the line: {msg}");
    }
    // Without --json: exit 1 and the message on stderr.
    let out = w.run(&["verify", &sid]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("line 3") && out.stdout.is_empty());
    assert_eq!(
        fs::read(&wal).unwrap(),
        bytes,
        "nothing was written to the corrupt WAL"
    );
    assert_snap_eq(&ws_before, &snapshot(&ws), "the workspace");
}

#[test]
fn an_unknown_wal_version_is_refused() {
    let w = World::new();
    let (sid, ws) = w.session();
    effect(&w, &["write", &sid, "a", "--content", "1"]);
    let wal = w.wal(&sid);
    let text = fs::read_to_string(&wal).unwrap();
    let (header, rest) = text.split_once('\n').unwrap();
    let body = &header[..header.rfind(",\"crc\"").unwrap()];
    assert!(body.contains("\"walVersion\":2,"), "{body}");
    let new_header = seal(&body.replace("\"walVersion\":2,", "\"walVersion\":3,"));
    let doctored = format!("{new_header}{rest}");
    fs::write(&wal, &doctored).unwrap();
    check_wal(&wal); // every CRC is right: only the version is wrong
    let ws_before = snapshot(&ws);
    for args in every_command(&sid) {
        let msg = w.json(&args).err(1, "corrupt-wal");
        assert!(msg.contains(wal.to_str().unwrap()), "{msg}");
        assert!(msg.contains("walVersion 3"), "{msg}");
    }
    assert_eq!(fs::read_to_string(&wal).unwrap(), doctored);
    assert_snap_eq(&ws_before, &snapshot(&ws), "the workspace");
}

/// Find the blob whose content is `bytes`.
fn blob_of(store: &Path, bytes: &[u8]) -> std::path::PathBuf {
    for d in fs::read_dir(store.join("blobs")).unwrap() {
        let d = d.unwrap().path();
        if !d.is_dir() {
            continue;
        }
        for f in fs::read_dir(&d).unwrap() {
            let f = f.unwrap().path();
            if fs::read(&f).ok().as_deref() == Some(bytes) {
                return f;
            }
        }
    }
    panic!("no blob holds the {} bytes", bytes.len());
}

#[test]
fn a_damaged_preimage_blob_refuses_the_step_back_before_anything_runs() {
    let w = World::new();
    let (sid, ws) = w.session();
    let first: Vec<u8> = (0..6000u32).map(|i| (i % 253) as u8).collect();
    let payload = w.path("first.bin");
    fs::write(&payload, &first).unwrap();
    effect(&w, &["write", &sid, "other.txt", "--content", "o"]);
    effect(
        &w,
        &[
            "write",
            &sid,
            "big.bin",
            "--from",
            payload.to_str().unwrap(),
        ],
    );
    let k = effect(&w, &["write", &sid, "big.bin", "--content", "second"]);
    effect(&w, &["write", &sid, "other.txt", "--content", "p"]);
    let blob = blob_of(&w.store, &first);
    let digest = format!(
        "{}{}",
        blob.parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap(),
        blob.file_name().unwrap().to_str().unwrap()
    );
    let full = fs::read(&blob).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&blob)
        .unwrap()
        .set_len(100)
        .unwrap();

    let ws_before = snapshot(&ws);
    let wal_before = fs::read(w.wal(&sid)).unwrap();
    for to in ["2", "-1"] {
        let msg = w
            .json(&["step-back", &sid, "--to", to])
            .err(1, "missing-preimage");
        assert!(msg.contains(&format!("step {k}")), "names the step: {msg}");
        assert!(msg.contains(&digest), "names the blob: {msg}");
        assert_snap_eq(
            &ws_before,
            &snapshot(&ws),
            "a refused step-back changed the workspace",
        );
        assert_eq!(
            fs::read(w.wal(&sid)).unwrap(),
            wal_before,
            "a refused step-back wrote the WAL"
        );
    }
    // A missing blob is refused the same way.
    fs::remove_file(&blob).unwrap();
    w.json(&["step-back", &sid, "--to", "-1"])
        .err(1, "missing-preimage");
    assert_snap_eq(&ws_before, &snapshot(&ws), "workspace");
    // A step-back that does not need it still works; restoring the blob makes it work.
    step_back(&w, &sid, k as i64);
    fs::write(&blob, &full).unwrap();
    step_back(&w, &sid, -1);
    assert!(snapshot(&ws).is_empty());
}

// ---------------------------------------------------------------- crashes and repair

fn crash_setup(w: &World) -> (String, std::path::PathBuf) {
    let ws = w.ws("ws");
    put(&ws.join("keep.txt"), b"keep me", 0o644);
    put(
        &ws.join("big.bin"),
        &(0..5000u32).map(|i| (i % 241) as u8).collect::<Vec<_>>(),
        0o600,
    );
    put(&ws.join("tree/a.txt"), b"a", 0o640);
    put(&ws.join("tree/sub/b.bin"), &[0xff, 0, 0xfe], 0o755);
    put(&ws.join("tree/sub/empty"), b"", 0o444);
    put(&ws.join("tree/sub/large.bin"), &vec![7u8; 4500], 0o644);
    std::os::unix::fs::symlink("a.txt", ws.join("tree/link")).unwrap();
    chmod(&ws.join("tree/sub"), 0o750);
    put(&ws.join("target.txt"), b"old target", 0o600);
    put(&ws.join("mod.sh"), b"echo", 0o644);
    fs::write(
        w.path("payload.bin"),
        (0..6000u32)
            .map(|i| 255 - (i % 13) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let sid = w.new_session(&ws);
    (sid, ws)
}

fn crash_ops(w: &World, sid: &str) -> Vec<(&'static str, Vec<String>)> {
    let payload = w.path("payload.bin").to_str().unwrap().to_string();
    let s = sid.to_string();
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        (
            "write-new-nested",
            v(&["write", &s, "n1/n2/new.txt", "--content", "fresh"]),
        ),
        (
            "write-overwrite-big",
            v(&["write", &s, "big.bin", "--from", &payload]),
        ),
        (
            "write-overwrite-small",
            v(&["write", &s, "keep.txt", "--content", "changed"]),
        ),
        ("delete-file", v(&["delete", &s, "keep.txt"])),
        ("delete-tree", v(&["delete", &s, "tree"])),
        (
            "rename-replace",
            v(&["rename", &s, "keep.txt", "target.txt"]),
        ),
        (
            "rename-dir-nested",
            v(&["rename", &s, "tree", "moved/here"]),
        ),
        ("mkdir", v(&["mkdir", &s, "m1/m2"])),
        ("chmod", v(&["chmod", &s, "mod.sh", "755"])),
    ]
}

/// The tree after the op ran normally in a twin world.
fn expected_after(op: usize) -> Snapshot {
    let w = World::new();
    let (sid, ws) = crash_setup(&w);
    effect(&w, &["write", &sid, "pre.txt", "--content", "pre"]);
    let (_, args) = &crash_ops(&w, &sid)[op];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    w.json(&args).ok();
    snapshot(&ws)
}

#[test]
fn a_crash_at_any_effect_point_is_repaired_consistently() {
    let failpoints: [(&str, Option<bool>); 7] = [
        ("effect.after-intent", Some(false)),
        // Only a small overwrite (made in place) passes this point: half its bytes land.
        ("effect.torn-write", Some(false)),
        ("effect.after-change", Some(true)),
        ("wal.torn-append:1", Some(false)),
        ("wal.torn-append:2", Some(true)),
        ("io.enospc:1", None),
        ("io.enospc:2", None),
    ];
    let n_ops = crash_ops(&World::new(), "x").len();
    let mut failures = Vec::new();
    for op in 0..n_ops {
        let post = expected_after(op);
        for (fp, recorded_expected) in failpoints {
            if fp == "effect.torn-write"
                && crash_ops(&World::new(), "x")[op].0 != "write-overwrite-small"
            {
                continue;
            }
            let w = World::new();
            let (sid, ws) = crash_setup(&w);
            let s0 = snapshot(&ws);
            effect(&w, &["write", &sid, "pre.txt", "--content", "pre"]);
            let s1 = snapshot(&ws);
            let (name, args) = &crash_ops(&w, &sid)[op];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let ctx = format!("{name} with REVL_FAILPOINT={fp}");
            // A small overwrite's intent carries its bytes: once it is durable the write is
            // rolled forward, never back (it may have been acknowledged).
            let recorded_expected = match (*name, fp) {
                ("write-overwrite-small", "effect.after-intent" | "effect.torn-write") => {
                    Some(true)
                }
                _ => recorded_expected,
            };
            let out = w.json_env(&args, &[("REVL_FAILPOINT", fp)]);
            if fp.starts_with("io.enospc") {
                // ENOSPC is an error, not a crash: exit 1 `io`, or success if no write hit it.
                if out.code != Some(0) {
                    out.err(1, "io");
                }
            } else {
                assert!(
                    out.died(),
                    "{ctx}: the process must die abnormally\n{}",
                    out.dump()
                );
            }

            // A fresh process attaches and repairs.
            let tl_out = w.json(&["timeline", &sid]);
            let tl = tl_out.ok().clone();
            let head = tl["head"].as_u64().unwrap();
            let recorded = match head {
                1 => false,
                2 => {
                    assert_eq!(step(&tl, 2)["kind"], "effect", "{ctx}");
                    true
                }
                h => panic!("{ctx}: head {h} after the crash"),
            };
            if let Some(want) = recorded_expected {
                if recorded != want {
                    failures.push(format!(
                        "{ctx}: step recorded = {recorded}, expected {want}"
                    ));
                }
            }
            if fp == "wal.torn-append:1" {
                assert_eq!(tl["torn"], true, "{ctx}: the torn intent is reported");
            }
            let now = snapshot(&ws);
            let d = if recorded {
                diff(&post, &now)
            } else {
                diff(&s1, &now)
            };
            if !d.is_empty() {
                failures.push(format!(
                    "{ctx}: recorded={recorded} but the workspace differs:\n{d}"
                ));
            }
            let temps = temp_leftovers(&ws);
            if !temps.is_empty() {
                failures.push(format!("{ctx}: temp files left behind: {temps:?}"));
            }
            // The repaired session is usable and consistent.
            let v = w.json(&["verify", &sid]).ok().clone();
            if v["drift"] != json!([]) {
                failures.push(format!("{ctx}: drift after repair: {}", v["drift"]));
            }
            let rep = w.json(&["step-back", &sid, "--to", "-1"]);
            let rep = rep.ok();
            assert_eq!(rep["failed"], json!([]), "{ctx}");
            let d = diff(&s0, &snapshot(&ws));
            if !d.is_empty() {
                failures.push(format!(
                    "{ctx}: step-back to -1 did not restore the original tree:\n{d}"
                ));
            }
            check_wal(&w.wal(&sid));
            assert_eq!(w.timeline(&sid)["torn"], false, "{ctx}");
        }
    }
    assert!(
        failures.is_empty(),
        "{} crash case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn an_interrupted_unconfined_exec_becomes_an_opaque_step() {
    for fp in ["wal.torn-append:2", "wal.torn-append:1"] {
        let w = World::new();
        let (sid, ws) = w.session();
        let out = w.json_env(
            &["exec", &sid, "--unconfined", "--", "touch", "ran"],
            &[("REVL_FAILPOINT", fp)],
        );
        assert!(out.died(), "{}", out.dump());
        let tl = w.timeline(&sid);
        if fp.ends_with(":2") {
            // The intent was durable: the command may have run, its outcome is unknown.
            assert!(ws.join("ran").exists());
            assert_eq!(tl["head"], 1, "{tl}");
            let s = step(&tl, 1);
            assert_eq!(s["kind"], "opaque");
            assert_eq!(s["detail"]["repr"], "interrupted: outcome unknown");
            let rep = step_back(&w, &sid, 0);
            assert_eq!(indices(&rep["unrestored"]), vec![1]);
        } else {
            // The intent itself was torn: nothing was announced, nothing ran.
            assert!(!ws.join("ran").exists());
            assert_eq!(tl["head"], 0);
            assert_eq!(tl["torn"], true);
            // The next writer truncates the torn intent.
            assert_eq!(w.json(&["boundary", &sid]).ok()["step"], 1);
        }
        check_wal(&w.wal(&sid));
    }
}

/// A step-back interrupted at any WAL append (or failing with ENOSPC) is finished by the
/// next attach, or never began: the workspace is never left half-rewound.
#[test]
fn a_crash_during_step_back_is_finished_on_attach() {
    let mut failures = Vec::new();
    let mut seen_died = 0;
    let mut seen_part_way = 0;
    // The step-back appends 8 records: step-back, six `undone`, step-back-done.
    for fp in (1..=8)
        .map(|n| format!("wal.torn-append:{n}"))
        .chain((1..=14).map(|n| format!("io.enospc:{n}")))
    {
        let w = World::new();
        let ws = w.ws("ws");
        put(&ws.join("big.bin"), &vec![9u8; 5000], 0o600);
        put(&ws.join("t/a"), b"a", 0o640);
        put(&ws.join("t/b/c"), &vec![1u8; 4100], 0o644);
        let sid = w.new_session(&ws);
        let s0 = snapshot(&ws);
        effect(&w, &["write", &sid, "one.txt", "--content", "1"]);
        let target = snapshot(&ws);
        for args in [
            vec!["write", &sid, "big.bin", "--content", "small now"],
            vec!["provide", &sid, "k", "v"],
            vec!["delete", &sid, "t"],
            vec!["mkdir", &sid, "m/n"],
            vec!["rename", &sid, "one.txt", "m/n/one.txt"],
            vec!["chmod", &sid, "big.bin", "444"],
        ] {
            effect(&w, &args);
        }
        let pre = snapshot(&ws);
        let out = w.json_env(
            &["step-back", &sid, "--to", "1"],
            &[("REVL_FAILPOINT", fp.as_str())],
        );
        let ctx = format!("step-back with REVL_FAILPOINT={fp}");
        if fp.starts_with("wal.torn-append") {
            if out.code == Some(0) {
                failures.push(format!(
                    "{ctx}: expected the process to die\n{}",
                    out.dump()
                ));
                continue;
            }
            assert!(out.died(), "{ctx}\n{}", out.dump());
            seen_died += 1;
        } else if out.code != Some(0) {
            out.err(1, "io");
            // A rewind the full disk stopped part-way says to free space before it is
            // finished (the error's cause is the disk, not a word in its hint).
            let doc = out.doc();
            let e = &doc["error"];
            if e["message"]
                .as_str()
                .is_some_and(|m| m.contains("stopped part-way"))
            {
                assert!(
                    e["hint"]
                        .as_str()
                        .is_some_and(|h| h.contains("free some disk space first")),
                    "{ctx}\n{}",
                    out.dump()
                );
                seen_part_way += 1;
            }
        }
        let tl = w.timeline(&sid);
        let undone: Vec<u64> = (2..=7)
            .filter(|&i| step(&tl, i)["undone"] == true)
            .collect();
        let now = snapshot(&ws);
        if undone.is_empty() {
            let d = diff(&pre, &now);
            if !d.is_empty() {
                failures.push(format!(
                    "{ctx}: no step undone but the workspace changed:\n{d}"
                ));
            }
        } else if undone.len() == 6 {
            let d = diff(&target, &now);
            if !d.is_empty() {
                failures.push(format!(
                    "{ctx}: every step undone but the workspace is not the step-1 tree:\n{d}"
                ));
            }
            if w.json(&["status", &sid]).ok()["provisions"] != json!({}) {
                failures.push(format!("{ctx}: provision not withdrawn"));
            }
        } else if fp.starts_with("wal.torn-append") {
            failures.push(format!(
                "{ctx}: half-rewound after repair: undone {undone:?}"
            ));
        }
        if !temp_leftovers(&ws).is_empty() {
            failures.push(format!("{ctx}: temp files left: {:?}", temp_leftovers(&ws)));
        }
        // Whatever happened, the session goes on: a step-back to 1 (again) gives the tree.
        let again = w.json(&["step-back", &sid, "--to", "1"]);
        if again.code != Some(0) || again.doc()["failed"] != json!([]) {
            failures.push(format!("{ctx}: second step-back failed\n{}", again.dump()));
            continue;
        }
        let d = diff(&target, &snapshot(&ws));
        if !d.is_empty() {
            failures.push(format!(
                "{ctx}: after a second step-back the tree differs:\n{d}"
            ));
        }
        step_back(&w, &sid, -1);
        let d = diff(&s0, &snapshot(&ws));
        if !d.is_empty() {
            failures.push(format!(
                "{ctx}: step-back to -1 did not restore the original tree:\n{d}"
            ));
        }
        check_wal(&w.wal(&sid));
    }
    assert_eq!(
        seen_died, 8,
        "the torn-append failpoint fired at every append of the step-back"
    );
    assert!(
        seen_part_way > 0,
        "some full disk stopped the step-back part-way"
    );
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A small preimage is written once, inline in the intent; the step names it by path and
/// digest, and replay takes the bytes from the intent. A WAL whose intent lost them is
/// refused as corrupt, not rewound with nothing.
#[test]
fn a_small_preimage_sits_once_in_the_intent_and_the_step_names_it() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("f.txt"), b"the preimage", 0o640);
    let k = effect(&w, &["write", &sid, "f.txt", "--content", "after"]);
    let recs = check_wal(&w.wal(&sid));
    let intent = recs
        .iter()
        .find(|r| r["record"] == "intent" && r["step"] == k)
        .expect("an intent");
    let step_rec = recs
        .iter()
        .find(|r| r["record"] == "step" && r["step"] == k)
        .expect("a step");
    let ie = &intent["undo"]["entries"][0];
    let se = &step_rec["undo"]["entries"][0];
    assert!(
        ie["content"].is_string(),
        "the intent holds the bytes: {intent}"
    );
    assert!(
        se.get("content").is_none(),
        "the step repeats them: {step_rec}"
    );
    assert_eq!(se["path"], "f.txt");
    assert_eq!(se["kind"], "file");
    assert_eq!(se["digest"], ie["digest"]);
    assert_eq!(se["mode"], "0640");
    // The timeline shows the whole inverse, and a step-back puts the bytes back.
    let tl = w.timeline(&sid);
    assert_eq!(step(&tl, k)["undo"]["entries"][0]["content"], ie["content"]);
    let wal = fs::read_to_string(w.wal(&sid)).unwrap();
    step_back(&w, &sid, -1);
    assert_eq!(fs::read(ws.join("f.txt")).unwrap(), b"the preimage");

    // The same WAL with the intent's bytes cut out (and its CRC made right again).
    let w2 = World::new();
    let (sid2, _ws2) = w2.session();
    let tampered: String = wal
        .lines()
        .map(|line| {
            let mut v: Value = serde_json::from_str(line).unwrap();
            if v["record"] == "intent" {
                v["undo"]["entries"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("content");
                v.as_object_mut().unwrap().remove("crc");
                let text = v.to_string();
                seal(&text[..text.len() - 1])
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    fs::write(w2.wal(&sid2), tampered).unwrap();
    let out = w2.json(&["step-back", &sid2, "--to", "-1"]);
    let msg = out.err(1, "corrupt-wal");
    assert!(
        msg.contains(&format!("step {k}")) && msg.contains("content"),
        "{msg}"
    );
    // The timeline shows the records before that step, marked (issue 23).
    let tl = w2.json(&["timeline", &sid2]).ok().clone();
    let why = tl["corrupt"]["why"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!("step {k}")) && why.contains("content"),
        "{tl}"
    );
}

/// Only revl changed the workspace: `verify` reports no drift.
#[track_caller]
fn assert_no_drift(w: &World, sid: &str) {
    let v = w.json(&["verify", sid]).ok().clone();
    assert_eq!(
        v["drift"],
        json!([]),
        "only revl changed the workspace: {v}"
    );
}
