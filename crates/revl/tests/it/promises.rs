//! Every promise holds inside what a command creates, and every report says exactly what
//! happened (issue 23). Each test drives the binary and fails on the behaviour it fixes.

use crate::common::{manifest, World};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;

/// The hash of `revl fork SID --at K`, which must succeed.
fn fork_hash(w: &World, sid: &str, at: &str) -> String {
    w.json(&["fork", sid, "--at", at]).ok()["hash"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `revl exec SID -- sh -c SCRIPT`, which must succeed.
fn sh_exec(w: &World, sid: &str, script: &str) -> Value {
    w.json(&["exec", sid, "--", "sh", "-c", script])
        .ok()
        .clone()
}

/// A session with a `build/` directory made by one exec and extended by a second, then a
/// file made by hand inside it.
fn build_dir_with_hand_notes(w: &World) -> (String, std::path::PathBuf) {
    let (sid, ws) = w.session();
    sh_exec(w, &sid, "mkdir build && echo obj > build/a.o");
    sh_exec(w, &sid, "echo obj2 > build/b.o");
    fs::write(ws.join("build/NOTES.txt"), "notes\n").unwrap();
    (sid, ws)
}

fn preserved_paths(doc: &Value) -> Vec<String> {
    doc["preserved"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| p["path"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn hand_made_bytes_inside_an_exec_made_directory_are_drift_and_survive_abort_and_gc() {
    let w = World::new();
    let (sid, ws) = build_dir_with_hand_notes(&w);
    // verify sees it, and says what it is.
    let v = w.json(&["verify", &sid]);
    assert_eq!(v.code, Some(1), "{}", v.dump());
    let drift = v.doc()["drift"].as_array().unwrap().clone();
    assert_eq!(drift.len(), 1, "{}", v.dump());
    assert_eq!(drift[0]["path"], "build/NOTES.txt");
    assert_eq!(drift[0]["change"], "new file");
    let text = w.run(&["verify", &sid]);
    assert!(
        text.stdout.contains("build/NOTES.txt  new file"),
        "{}",
        text.stdout
    );
    // abort preserves it before removing build/.
    let a = w.json(&["abort", &sid]);
    let doc = a.ok();
    assert_eq!(
        preserved_paths(doc),
        vec!["build/NOTES.txt"],
        "{}",
        a.dump()
    );
    assert!(!ws.join("build").exists());
    let digest = doc["preserved"][0]["digest"].as_str().unwrap().to_string();
    // gc never removes it, and lists it apart.
    let dry = w.json(&["gc"]);
    let kept = dry.ok()["preserved"].as_array().unwrap().clone();
    assert!(
        kept.iter().any(|k| k["digest"] == digest.as_str()),
        "{}",
        dry.dump()
    );
    w.json(&["gc", "--apply"]).ok();
    let blob = w.run(&["blob", &digest]);
    assert_eq!(blob.code, Some(0), "{}", blob.dump());
    assert_eq!(blob.stdout, "notes\n");
}

#[test]
fn a_fork_over_an_exec_made_directory_lists_and_preserves_hand_made_entries() {
    let w = World::new();
    let (sid, ws) = build_dir_with_hand_notes(&w);
    let e = w.json(&["fork", &sid, "--at", "0"]);
    let drift: Vec<String> = e.ok()["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(drift, vec!["build/NOTES.txt"], "{}", e.dump());
    let hash = e.doc()["hash"].as_str().unwrap().to_string();
    let c = w.json(&["fork-confirm", &sid, "--hash", &hash]);
    assert_eq!(
        preserved_paths(c.ok()),
        vec!["build/NOTES.txt"],
        "{}",
        c.dump()
    );
    assert!(!ws.join("build").exists());
    // The parent's timeline says which fork rewound each step.
    let branch = c.doc()["branch"].as_str().unwrap().to_string();
    let t = w.run(&["timeline", &sid]);
    assert!(
        t.stdout.contains(&format!(
            "[undone by the fork at step 0 that made branch {branch}]"
        )),
        "{}",
        t.stdout
    );
}

#[test]
fn a_builtin_write_inside_an_exec_made_directory_keeps_hand_made_entries_drift() {
    let w = World::new();
    let (sid, ws) = w.session();
    sh_exec(&w, &sid, "mkdir -p d/sub && echo 1 > d/sub/f");
    w.json(&["write", &sid, "d/g", "--content", "g"]).ok();
    fs::write(ws.join("d/sub/hand.txt"), "mine").unwrap();
    let v = w.json(&["verify", &sid]);
    assert_eq!(v.code, Some(1), "{}", v.dump());
    assert_eq!(
        v.doc()["drift"][0]["path"],
        "d/sub/hand.txt",
        "{}",
        v.dump()
    );
    let back = w.json(&["step-back", &sid, "--to", "0"]);
    assert_eq!(
        preserved_paths(back.ok()),
        vec!["d/sub/hand.txt"],
        "{}",
        back.dump()
    );
}

#[test]
fn read_at_and_diff_see_each_file_a_new_directory_holds() {
    let w = World::new();
    let (sid, ws) = w.session();
    sh_exec(&w, &sid, "mkdir d && echo one > d/f");
    // Changed by hand afterwards: read --at 1 must still give step 1's bytes.
    fs::write(ws.join("d/f"), "hand\n").unwrap();
    let r = w.json(&["read", &sid, "d/f", "--at", "1"]);
    assert_eq!(r.ok()["content"], "one\n", "{}", r.dump());
    let d = w.json(&["diff", &format!("{sid}@0"), &format!("{sid}@1")]);
    assert_eq!(d.code, Some(1), "{}", d.dump());
    let paths: Vec<&str> = d.doc()["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"d/f"), "{}", d.dump());
}

/// After a serial fork the workspace is the branch's: the frozen parent's side of a diff,
/// and its `read --at`, must not borrow what only the branch wrote.
#[test]
fn a_frozen_parent_does_not_see_files_only_its_branch_wrote() {
    let w = World::new();
    let (sid, _ws) = w.session();
    w.json(&["write", &sid, "a", "--content", "1"]).ok();
    w.json(&["write", &sid, "b", "--content", "2"]).ok();
    let k = w.head(&sid) - 1;
    let hash = w.json(&["fork", &sid, "--at", &k.to_string()]).ok()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let done = w.json(&["fork-confirm", &sid, "--hash", &hash]);
    let branch = done.ok()["branch"].as_str().unwrap().to_string();
    w.json(&["write", &branch, "z", "--content", "only the branch"])
        .ok();
    w.json(&["write", &branch, "a", "--content", "branch's a"])
        .ok();
    let d = w.json(&["diff", &sid, &branch]);
    let paths: BTreeMap<String, Value> = d.doc()["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["path"].as_str().unwrap().to_string(), p.clone()))
        .collect();
    assert_eq!(
        paths.keys().map(String::as_str).collect::<Vec<_>>(),
        ["a", "b", "z"],
        "{}",
        d.dump()
    );
    assert!(paths["z"]["left"].is_null(), "{}", d.dump());
    assert!(paths["b"]["right"].is_null(), "{}", d.dump());
    // The parent's own reads agree: z never existed on its line; a is its own.
    let head = w.head(&sid).to_string();
    w.json(&["read", &sid, "z", "--at", &head]).err(1, "absent");
    let a = w.json(&["read", &sid, "a", "--at", &head]);
    assert_eq!(a.ok()["content"], "1", "{}", a.dump());
    // And `branch SESSION` takes the session as a positional argument, like --wal.
    let by_flag = w.json(&["branch", "--wal", &branch]);
    let positional = w.json(&["branch", &branch]);
    assert_eq!(by_flag.ok(), positional.ok());
    assert_eq!(positional.doc()["parent"], sid.as_str());
}

#[test]
fn read_at_returns_a_writes_own_bytes_after_a_hand_edit() {
    let w = World::new();
    let (sid, ws) = w.session();
    // A new small file (staged), an in-place overwrite, and a large one.
    w.json(&["write", &sid, "c.txt", "--content", "v1"]).ok();
    w.json(&["write", &sid, "c.txt", "--content", "v2"]).ok();
    let big = "x".repeat(10_000);
    w.json(&["write", &sid, "big.txt", "--content", &big]).ok();
    fs::write(ws.join("c.txt"), "hand").unwrap();
    fs::write(ws.join("big.txt"), "hand").unwrap();
    for (path, at, want) in [
        ("c.txt", "1", "v1"),
        ("c.txt", "2", "v2"),
        ("big.txt", "3", big.as_str()),
    ] {
        let r = w.json(&["read", &sid, path, "--at", at]);
        assert_eq!(r.ok()["content"], want, "{}", r.dump());
    }
}

#[test]
fn a_declared_compensation_that_never_fired_is_not_called_a_crossing() {
    let w = World::new();
    let sink = revl::sink::Sink::start().unwrap();
    let m = manifest::write(
        w.root(),
        &[
            manifest::tool("post_status", "emission")
                .scope(&["net"])
                .post(&sink.url("/status"))
                .no_approval()
                .compensate("delete_status"),
            manifest::tool("delete_status", "inverse")
                .scope(&["net"])
                .post(&sink.url("/delete")),
            manifest::tool("send_email", "deferred")
                .scope(&["mail"])
                .post(&sink.url("/mail")),
        ],
    );
    let ws = w.ws("ws");
    let sid = w.new_session_with(&ws, &m);
    w.json(&["write", &sid, "a", "--content", "1"]).ok();
    w.json(&["call", &sid, "send_email", "--args", "{}"]).ok();
    w.json(&["call", &sid, "post_status", "--args", "{}"]).ok();
    let e = w.json(&["fork", &sid, "--at", "1"]);
    let doc = e.ok().clone();
    let warning = doc["warning_emissions"].as_str().unwrap();
    assert!(warning.contains("1 emission(s) crossed"), "{warning}");
    assert!(
        warning.contains("compensation(s) were not fired"),
        "{warning}"
    );
    assert!(!warning.contains("that crossed stay done"), "{warning}");
    // An enumeration claims nothing ran, and says what each mode does with held sends.
    let g = doc["guarantee"].as_str().unwrap();
    assert!(g.starts_with("Nothing has run yet"), "{g}");
    assert!(
        doc["heldSendsByMode"]["parallel"]
            .as_str()
            .unwrap()
            .contains("keeps the held sends (send seq [3])"),
        "{doc}"
    );
    assert!(doc["heldSendsByMode"]["serial"]
        .as_str()
        .unwrap()
        .contains("drops"));
    let text = w.run(&["fork", &sid, "--at", "1"]);
    assert!(
        text.stdout
            .contains("a parallel fork --into DIR keeps them"),
        "{}",
        text.stdout
    );
    // The timeline claims no rewind.
    let t = w.json(&["timeline", &sid]);
    let tg = t.ok()["guarantee"].as_str().unwrap();
    assert!(!tg.contains("inverses of the unwound steps ran"), "{tg}");
    // Only the emission reached the sink: the compensation never fired.
    assert_eq!(
        sink.received()
            .iter()
            .filter(|r| r.path == "/delete")
            .count(),
        0
    );
    // A confirmed fork does claim what ran.
    let hash = fork_hash(&w, &sid, "1");
    let c = w.json(&["fork-confirm", &sid, "--hash", &hash]);
    assert!(c.ok()["guarantee"]
        .as_str()
        .unwrap()
        .contains("inverses of the unwound steps ran"));
}

#[test]
fn an_all_clear_fork_is_not_printed_as_a_warning() {
    let w = World::new();
    let (sid, _) = w.session();
    w.json(&["write", &sid, "a", "--content", "1"]).ok();
    let out = w.run(&["fork", &sid, "--at", "0"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(
        !out.stdout.to_lowercase().contains("warning"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("out in the world: nothing"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_failed_into_leaves_the_pending_fork_and_no_abandoned_mark() {
    let w = World::new();
    let (sid, _) = w.session();
    w.json(&["write", &sid, "a", "--content", "1"]).ok();
    let hash = fork_hash(&w, &sid, "0");
    let bad = w.json(&["fork-confirm", &sid, "--hash", &hash, "--into", "/proc/x"]);
    let msg = bad.err(2, "bad-args");
    assert!(msg.contains("/proc/x"), "{msg}");
    let st = w.json(&["status", &sid]);
    assert!(st.ok().get("abandonedForks").is_none(), "{}", st.dump());
    // The same hash still confirms (nothing was consumed).
    let into = w.path("sibling");
    let ok = w.json(&[
        "fork-confirm",
        &sid,
        "--hash",
        &hash,
        "--into",
        into.to_str().unwrap(),
    ]);
    assert_eq!(ok.ok()["forked"], true, "{}", ok.dump());
}

#[test]
fn exec_steps_show_their_command_and_change_count() {
    let w = World::new();
    let (sid, _) = w.session();
    sh_exec(&w, &sid, "echo a > x && echo b > y");
    let t = w.json(&["timeline", &sid]);
    let label = t.ok()["steps"][1]["label"].as_str().unwrap().to_string();
    assert_eq!(label, "exec sh -c 'echo a > x && echo b > y' (2 changes)");
    let text = w.run(&["timeline", &sid]);
    assert!(
        text.stdout.contains("exec sh -c 'echo a > x"),
        "{}",
        text.stdout
    );
}

#[test]
fn compare_lists_held_sends_and_speaks_in_step_numbers() {
    let w = World::new();
    let sink = revl::sink::Sink::start().unwrap();
    let m = manifest::write(
        w.root(),
        &[manifest::tool("send_email", "deferred")
            .scope(&["mail"])
            .post(&sink.url("/mail"))],
    );
    let ws = w.ws("ws");
    let sid = w.new_session_with(&ws, &m);
    w.json(&["write", &sid, "a", "--content", "1"]).ok();
    let hash = fork_hash(&w, &sid, "1");
    let into = w.path("sib");
    let b = w.json(&[
        "fork-confirm",
        &sid,
        "--hash",
        &hash,
        "--into",
        into.to_str().unwrap(),
    ]);
    let branch = b.ok()["branch"].as_str().unwrap().to_string();
    w.json(&[
        "call",
        &branch,
        "send_email",
        "--args",
        r#"{"to":"x@example.com"}"#,
    ])
    .ok();
    let c = w.json(&["compare", &sid, &branch]);
    let right = &c.ok()["right"];
    assert_eq!(
        right["heldSends"][0]["args"]["to"],
        "x@example.com",
        "{}",
        c.dump()
    );
    let text = w.run(&["compare", &sid, &branch]);
    let out = &text.stdout;
    assert!(out.contains("held sends queued on the right"), "{out}");
    assert!(out.contains(r#"args {"to":"x@example.com"}"#), "{out}");
    // The hinge is no step: the branch took none of its own.
    assert!(out.contains("(branch, 0 step(s) after its start)"), "{out}");
    assert!(out.contains("When a branch wins"), "{out}");
    // commit's text shows the args about to be sent.
    let plan = w.run(&["commit", &branch]);
    assert!(
        plan.stdout.contains(r#"args {"to":"x@example.com"}"#),
        "{}",
        plan.stdout
    );
}

#[test]
fn small_wording_a_new_user_tripped_on() {
    let w = World::new();
    let (sid, _) = w.session();
    w.json(&["write", &sid, "a", "--content", "1"]).ok();
    // No doubled parentheses at the session's start; no Rust range syntax.
    let f = w.run(&["fork", &sid, "--at", "-1"]);
    assert!(
        f.stdout.contains("at step -1 (before every step)"),
        "{}",
        f.stdout
    );
    assert!(!f.stdout.contains("(("), "{}", f.stdout);
    let r = w.json(&["read", &sid, "a", "--at", "7"]);
    let msg = r.err(2, "bad-args");
    assert!(!msg.contains("..="), "{msg}");
    assert!(msg.contains("-1 to 1"), "{msg}");
    // doctor creates no store.
    let fresh = w.path("no-store-here");
    let d = w.run_raw(&["--store", fresh.to_str().unwrap(), "doctor"], &[]);
    assert!(matches!(d.code, Some(0 | 1)), "{}", d.dump());
    assert!(!fresh.exists(), "doctor created {}", fresh.display());
}

#[test]
fn an_approval_request_is_said_once() {
    let w = World::new();
    let m = manifest::write(
        w.root(),
        &[manifest::tool("post", "emission")
            .scope(&["net"])
            .run(&["true"])],
    );
    let ws = w.ws("ws");
    let sid = w.new_session_with(&ws, &m);
    let out = w.run(&["call", &sid, "post", "--args", "{}"]);
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert!(out.stdout.contains("APPROVAL REQUIRED"), "{}", out.dump());
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.dump());
    assert!(
        !out.stderr.contains("revl approve"),
        "said twice:\n{}",
        out.dump()
    );
}

#[test]
fn attach_repairs_say_what_they_did_and_reads_work_while_a_repair_is_blocked() {
    let w = World::new();
    let (sid, ws) = w.session();
    for c in ["1", "2", "3"] {
        w.json(&["write", &sid, "a", "--content", c]).ok();
    }
    // A step-back that dies after its second record (torn third).
    let died = w.json_env(
        &["step-back", &sid, "--to", "0"],
        &[("REVL_FAILPOINT", "wal.torn-append:3")],
    );
    assert_ne!(died.code, Some(0), "{}", died.dump());
    // A read while the repair cannot write (disk full): it still answers, and says so.
    let blocked = w.json_env(&["status", &sid], &[("REVL_FAILPOINT", "io.enospc:1")]);
    let doc = blocked.ok();
    // A read leaves the torn tail (reported as `torn`) and repairs nothing yet.
    assert_eq!(doc["torn"], true, "{}", blocked.dump());
    assert!(doc.get("repaired").is_none(), "{}", blocked.dump());
    assert!(
        doc["repairPending"]
            .as_str()
            .unwrap_or_default()
            .contains("could not be repaired"),
        "{}",
        blocked.dump()
    );
    let t = w.json_env(&["timeline", &sid], &[("REVL_FAILPOINT", "io.enospc:1")]);
    t.ok();
    // The next command repairs, and reports each repair.
    let st = w.json(&["status", &sid]);
    let what: Vec<&str> = st.ok()["repaired"]
        .as_array()
        .unwrap_or_else(|| panic!("no `repaired`\n{}", st.dump()))
        .iter()
        .map(|r| r["what"].as_str().unwrap())
        .collect();
    assert!(what.contains(&"torn-tail"), "{}", st.dump());
    assert!(what.contains(&"step-back-finished"), "{}", st.dump());
    assert!(!ws.join("a").exists(), "the step-back to 0 was finished");
    // Reported once: the next command has nothing to repair.
    let again = w.json(&["status", &sid]);
    assert!(again.ok().get("repaired").is_none(), "{}", again.dump());
    // And in text.
    let (sid2, _) = {
        let ws2 = w.ws("ws2");
        (w.new_session(&ws2), ws2)
    };
    w.json(&["write", &sid2, "b", "--content", "1"]).ok();
    let died = w.json_env(
        &["write", &sid2, "b", "--content", "2"],
        &[("REVL_FAILPOINT", "wal.torn-append:2")],
    );
    assert_ne!(died.code, Some(0), "{}", died.dump());
    let text = w.run(&["timeline", &sid2]);
    assert!(
        text.stdout
            .contains("repaired on attach: removed an incomplete last WAL line"),
        "{}",
        text.dump()
    );
    assert!(text.stdout.contains("recorded it"), "{}", text.dump());
    assert!(!text.stdout.contains("(torn tail)"), "{}", text.dump());
}

#[test]
fn drift_inside_a_restored_directory_is_named_entry_by_entry() {
    let w = World::new();
    let (sid, ws) = w.session();
    sh_exec(&w, &sid, "mkdir build && echo a > build/a");
    w.json(&["exec", &sid, "--", "rm", "-rf", "build"]).ok();
    // The step-back restores build/ from its captured tree.
    w.json(&["step-back", &sid, "--to", "1"]).ok();
    fs::write(ws.join("build/y"), "mine").unwrap();
    fs::write(ws.join("build/a"), "edited").unwrap();
    let v = w.json(&["verify", &sid]);
    assert_eq!(v.code, Some(1), "{}", v.dump());
    let got: Vec<(String, String)> = v.doc()["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().to_string(),
                d["change"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("build/a".to_string(), "modified".to_string()),
            ("build/y".to_string(), "new file".to_string())
        ],
        "{}",
        v.dump()
    );
    let back = w.json(&["step-back", &sid, "--to", "0"]);
    assert_eq!(
        preserved_paths(back.ok()),
        vec!["build/a", "build/y"],
        "{}",
        back.dump()
    );
}

#[test]
fn compare_counts_a_branch_of_a_branch_along_the_whole_lineage() {
    let w = World::new();
    let (s, _) = w.session();
    for c in ["1", "2", "3"] {
        w.json(&["write", &s, "a", "--content", c]).ok();
    }
    let h = fork_hash(&w, &s, "2");
    let b1 = w.json(&["fork-confirm", &s, "--hash", &h]).ok()["branch"]
        .as_str()
        .unwrap()
        .to_string();
    w.json(&["write", &b1, "b", "--content", "x"]).ok();
    w.json(&["write", &b1, "c", "--content", "y"]).ok();
    let h = fork_hash(&w, &b1, "1");
    let b2 = w.json(&["fork-confirm", &b1, "--hash", &h]).ok()["branch"]
        .as_str()
        .unwrap()
        .to_string();
    w.json(&["write", &b2, "d", "--content", "z"]).ok();
    let c = w.json(&["compare", &b1, &b2]);
    let d = &c.ok()["delta"];
    // a, a (the root's steps 1-2), b (b1's step 1) are shared; then c against d.
    assert_eq!(d["sharedPrefix"], 3, "{}", c.dump());
    assert_eq!(d["firstDifference"]["position"], 4, "{}", c.dump());
    assert_eq!(
        d["firstDifference"]["left"]["label"],
        "fs.write c",
        "{}",
        c.dump()
    );
    assert_eq!(
        d["firstDifference"]["right"]["label"],
        "fs.write d",
        "{}",
        c.dump()
    );
}

#[test]
fn a_chmod_and_a_write_inside_a_users_directory_claim_nothing_else_in_it() {
    let w = World::new();
    let (sid, ws) = w.session();
    fs::create_dir(ws.join("src")).unwrap();
    fs::write(ws.join("src/mine.rs"), "fn main() {}").unwrap();
    sh_exec(&w, &sid, "chmod 700 src && echo x > src/n");
    let v = w.json(&["verify", &sid]);
    assert_eq!(
        v.code,
        Some(0),
        "no drift: src/ is the user's\n{}",
        v.dump()
    );
    let back = w.json(&["step-back", &sid, "--to", "0"]);
    assert!(preserved_paths(back.ok()).is_empty(), "{}", back.dump());
    assert_eq!(
        fs::read_to_string(ws.join("src/mine.rs")).unwrap(),
        "fn main() {}"
    );
}

#[test]
fn hand_made_bytes_in_a_restored_directory_survive_a_later_write_and_an_abort() {
    let w = World::new();
    let (sid, ws) = w.session();
    sh_exec(&w, &sid, "mkdir build && echo a > build/a");
    w.json(&["exec", &sid, "--", "rm", "-rf", "build"]).ok();
    w.json(&["step-back", &sid, "--to", "1"]).ok();
    w.json(&["write", &sid, "build/c", "--content", "c"]).ok();
    fs::write(ws.join("build/NOTES.txt"), "notes").unwrap();
    let v = w.json(&["verify", &sid]);
    let drift: Vec<&str> = v.doc()["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(drift, vec!["build/NOTES.txt"], "{}", v.dump());
    let a = w.json(&["abort", &sid]);
    assert_eq!(
        preserved_paths(a.ok()),
        vec!["build/NOTES.txt"],
        "{}",
        a.dump()
    );
}

#[test]
fn a_torn_tail_alone_is_reported_when_it_is_cut() {
    let w = World::new();
    let (sid, _) = w.session();
    w.json(&["write", &sid, "a", "--content", "1"]).ok();
    // The boundary's step record is torn: nothing else needs repair.
    let died = w.json_env(
        &["boundary", &sid, "--label", "t"],
        &[("REVL_FAILPOINT", "wal.torn-append:1")],
    );
    assert_ne!(died.code, Some(0), "{}", died.dump());
    let st = w.json(&["boundary", &sid, "--label", "t2"]);
    let what: Vec<&str> = st.ok()["repaired"]
        .as_array()
        .unwrap_or_else(|| panic!("no `repaired`\n{}", st.dump()))
        .iter()
        .map(|r| r["what"].as_str().unwrap())
        .collect();
    assert_eq!(what, vec!["torn-tail"], "{}", st.dump());
}
