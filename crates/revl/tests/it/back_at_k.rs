//! "Back at step k" means every witnessed path (docs/user-guide.md, "Changes made outside
//! revl"): names that are not UTF-8 are data (witnessed, preserved, listed, restored), and a
//! rewind puts back hand edits of paths the rewound steps never touched, after preserving
//! them, or with `--keep-drift` leaves them listed and still reported by `verify`.

use crate::common::{put, snapshot, World};
use serde_json::Value;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// `x\xE9.txt`: a Latin-1 name, not UTF-8.
fn latin1() -> &'static OsStr {
    OsStr::from_bytes(b"x\xe9.txt")
}

/// The text revl writes for that name in documents (docs/wal-format.md, "Names that are not
/// UTF-8"): byte 0xE9 is U+10FFE9.
const LATIN1_TEXT: &str = "x\u{10FFE9}.txt";

fn paths(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|e| e["path"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The bytes of blob `digest`, through `revl blob`.
fn blob(w: &World, digest: &str) -> Vec<u8> {
    let out = w.root().join(format!("blob-{digest}"));
    w.run(&["blob", digest, "--out", out.to_str().unwrap()])
        .ok_text();
    std::fs::read(out).unwrap()
}

trait OkText {
    fn ok_text(&self) -> &str;
}

impl OkText for crate::common::Out {
    fn ok_text(&self) -> &str {
        assert_eq!(self.code, Some(0), "{}", self.dump());
        &self.stdout
    }
}

/// A session that made directory `d` (step 0), with a hand-made file of a non-UTF-8 name
/// inside it.
fn mkdir_and_hand_file(w: &World) -> (String, PathBuf, PathBuf) {
    let (s, ws) = w.session();
    w.json(&["mkdir", &s, "d"]).ok();
    let hand = ws.join("d").join(latin1());
    put(&hand, b"made by hand, name not UTF-8", 0o640);
    (s, ws, hand)
}

#[test]
fn a_name_that_is_not_utf8_is_drift_verify_reports() {
    let w = World::new();
    let (s, _ws, _) = mkdir_and_hand_file(&w);
    let out = w.json(&["verify", &s]);
    assert_eq!(out.code, Some(1), "drift found exits 1\n{}", out.dump());
    let drift = &out.doc()["drift"];
    assert!(
        paths(drift).contains(&format!("d/{LATIN1_TEXT}")),
        "{}",
        out.dump()
    );
    // Text output shows the byte escaped, never raw.
    let text = w.run(&["verify", &s]);
    assert!(
        text.stdout.contains("d/x\\xe9.txt"),
        "the text names the file with the byte escaped:\n{}",
        text.dump()
    );
}

#[test]
fn a_step_back_preserves_and_lists_a_hand_file_whose_name_is_not_utf8() {
    let w = World::new();
    let (s, ws, hand) = mkdir_and_hand_file(&w);
    let out = w.json(&["step-back", &s, "--to", "-1"]);
    let doc = out.ok();
    let kept = &doc["preserved"];
    assert_eq!(
        paths(kept),
        vec![format!("d/{LATIN1_TEXT}")],
        "{}",
        out.dump()
    );
    assert!(!hand.exists(), "the directory revl made is gone");
    assert!(!ws.join("d").exists());
    let digest = kept[0]["digest"].as_str().unwrap();
    assert_eq!(blob(&w, digest), b"made by hand, name not UTF-8");
}

#[test]
fn abort_and_fork_preserve_a_hand_file_whose_name_is_not_utf8() {
    for verb in ["abort", "fork"] {
        let w = World::new();
        let (s, _ws, hand) = mkdir_and_hand_file(&w);
        let doc = if verb == "abort" {
            w.json(&["abort", &s]).ok().clone()
        } else {
            let h = w.json(&["fork", &s, "--at", "-1"]).ok()["hash"]
                .as_str()
                .unwrap()
                .to_string();
            w.json(&["fork-confirm", &s, "--hash", &h]).ok().clone()
        };
        assert_eq!(
            paths(&doc["preserved"]),
            vec![format!("d/{LATIN1_TEXT}")],
            "{verb}: {doc}"
        );
        assert!(!hand.exists(), "{verb}");
        let digest = doc["preserved"][0]["digest"].as_str().unwrap();
        assert_eq!(blob(&w, digest), b"made by hand, name not UTF-8", "{verb}");
    }
}

#[test]
fn a_write_into_a_directory_holding_a_non_utf8_name_is_rewound_exactly() {
    // revl's own write next to a hand file: the hand file is witnessed as drift when its
    // directory is revl's, and a step-back of a step that never touched it keeps it.
    let w = World::new();
    let (s, ws) = w.session();
    let dir = ws.join("pre");
    std::fs::create_dir_all(&dir).unwrap();
    put(&dir.join(latin1()), b"was here before revl", 0o644);
    let before = snapshot(&ws);
    w.json(&["write", &s, "pre/new.txt", "--content", "revl's"])
        .ok();
    w.json(&["step-back", &s, "--to", "-1"]).ok();
    assert_eq!(
        snapshot(&ws),
        before,
        "byte for byte, the foreign name included"
    );
}

/// Step 0 is the session's hinge; steps 1-3: a.txt written, b.txt written twice. k = 2: the
/// tail (step 3) touches only b.
fn three_steps(w: &World) -> (String, PathBuf) {
    let (s, ws) = w.session();
    w.json(&["write", &s, "a.txt", "--content", "A at step 0"])
        .ok();
    w.json(&["write", &s, "b.txt", "--content", "B at step 1"])
        .ok();
    w.json(&["write", &s, "b.txt", "--content", "B at step 2"])
        .ok();
    (s, ws)
}

fn read(w: &World, s: &str, path: &str, at: &str) -> String {
    let out = w.json(&["read", s, path, "--at", at]);
    out.ok()["content"].as_str().unwrap().to_string()
}

fn fork(w: &World, s: &str, at: &str) -> (Value, String) {
    let doc = w.json(&["fork", s, "--at", at]).ok().clone();
    let hash = doc["hash"].as_str().unwrap().to_string();
    (doc, hash)
}

#[test]
fn a_serial_fork_restores_hand_edits_the_tail_never_touched_and_preserves_them() {
    let w = World::new();
    let (s, ws) = three_steps(&w);
    put(&ws.join("a.txt"), b"edited by hand", 0o644);
    let (enumerated, hash) = fork(&w, &s, "2");
    assert!(
        paths(&enumerated["drift"]).contains(&"a.txt".to_string()),
        "the enumeration lists the hand edit the rewind will meet: {enumerated}"
    );
    let out = w.json(&["fork-confirm", &s, "--hash", &hash]);
    let doc = out.ok();
    let beyond = &doc["beyondTail"];
    assert_eq!(paths(beyond), vec!["a.txt"], "{}", out.dump());
    assert_eq!(beyond[0]["outcome"], "restored");
    let kept = &doc["preserved"];
    assert_eq!(paths(kept), vec!["a.txt"]);
    assert_eq!(
        blob(&w, kept[0]["digest"].as_str().unwrap()),
        b"edited by hand"
    );
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"A at step 0");
    assert_eq!(std::fs::read(ws.join("b.txt")).unwrap(), b"B at step 1");
    let branch = doc["branch"].as_str().unwrap().to_string();
    let v = w.json(&["verify", &branch]);
    assert_eq!(v.code, Some(0), "the branch starts clean\n{}", v.dump());
    assert_eq!(read(&w, &branch, "a.txt", "0"), read(&w, &s, "a.txt", "2"));
}

#[test]
fn a_step_back_restores_hand_edits_the_tail_never_touched() {
    let w = World::new();
    let (s, ws) = three_steps(&w);
    put(&ws.join("a.txt"), b"edited by hand", 0o600);
    let text = w.run(&["step-back", &s, "--to", "2"]);
    let out = text.ok_text().to_string();
    assert!(
        out.contains("CHANGED OUTSIDE REVL")
            && out.contains("a.txt")
            && out.contains("restored to step 2"),
        "{out}"
    );
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"A at step 0");
    let v = w.json(&["verify", &s]);
    assert_eq!(v.code, Some(0), "{}", v.dump());
    // The hand bytes are in the blob store, named by a `preserved` record.
    let wal = std::fs::read_to_string(w.wal(&s)).unwrap();
    assert!(
        wal.contains("\"preserved\"") && wal.contains("a.txt"),
        "{wal}"
    );
}

#[test]
fn keep_drift_leaves_hand_edits_listed_and_the_branch_verify_reports_them() {
    let w = World::new();
    let (s, ws) = three_steps(&w);
    put(&ws.join("a.txt"), b"edited by hand", 0o644);
    let (_, hash) = fork(&w, &s, "2");
    let out = w.json(&["fork-confirm", &s, "--hash", &hash, "--keep-drift"]);
    let doc = out.ok();
    assert_eq!(paths(&doc["beyondTail"]), vec!["a.txt"], "{}", out.dump());
    assert_eq!(doc["beyondTail"][0]["outcome"], "kept");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"edited by hand");
    let branch = doc["branch"].as_str().unwrap().to_string();
    let v = w.json(&["verify", &branch]);
    assert_eq!(v.code, Some(1), "{}", v.dump());
    assert_eq!(paths(&v.doc()["drift"]), vec!["a.txt"]);
    // The fork point's content, not the hand bytes.
    assert_eq!(read(&w, &branch, "a.txt", "0"), "A at step 0");
    // Step-back with --keep-drift likewise leaves them; verify reports them.
    let w2 = World::new();
    let (s2, ws2) = three_steps(&w2);
    put(&ws2.join("a.txt"), b"edited by hand", 0o644);
    let sb = w2.json(&["step-back", &s2, "--to", "2", "--keep-drift"]);
    assert_eq!(sb.ok()["beyondTail"][0]["outcome"], "kept", "{}", sb.dump());
    assert_eq!(std::fs::read(ws2.join("a.txt")).unwrap(), b"edited by hand");
    assert_eq!(w2.json(&["verify", &s2]).code, Some(1));
}

#[test]
fn a_parallel_fork_gives_the_step_k_workspace_and_the_parent_keeps_its_hand_edits() {
    let w = World::new();
    let (s, ws) = three_steps(&w);
    put(&ws.join("a.txt"), b"edited by hand", 0o644);
    let (_, hash) = fork(&w, &s, "2");
    let into = w.path("branch");
    let out = w.json(&[
        "fork-confirm",
        &s,
        "--hash",
        &hash,
        "--into",
        into.to_str().unwrap(),
    ]);
    let doc = out.ok();
    assert_eq!(paths(&doc["beyondTail"]), vec!["a.txt"], "{}", out.dump());
    assert_eq!(std::fs::read(into.join("a.txt")).unwrap(), b"A at step 0");
    assert_eq!(std::fs::read(into.join("b.txt")).unwrap(), b"B at step 1");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"edited by hand");
    let branch = doc["branch"].as_str().unwrap().to_string();
    assert_eq!(w.json(&["verify", &branch]).code, Some(0));
}

#[test]
fn a_hand_file_in_a_directory_revl_made_before_k_is_preserved_and_removed() {
    // Step 1 makes d, steps 2-3 write elsewhere; a hand file in d is not step 2's content.
    let w = World::new();
    let (s, ws) = w.session();
    w.json(&["mkdir", &s, "d"]).ok();
    w.json(&["write", &s, "b.txt", "--content", "1"]).ok();
    w.json(&["write", &s, "b.txt", "--content", "2"]).ok();
    put(&ws.join("d").join(latin1()), b"hand", 0o644);
    let out = w.json(&["step-back", &s, "--to", "2"]);
    let doc = out.ok();
    assert_eq!(
        paths(&doc["beyondTail"]),
        vec![format!("d/{LATIN1_TEXT}")],
        "{}",
        out.dump()
    );
    assert!(!ws.join("d").join(latin1()).exists());
    assert!(ws.join("d").is_dir());
    assert_eq!(paths(&doc["preserved"]), vec![format!("d/{LATIN1_TEXT}")]);
}
