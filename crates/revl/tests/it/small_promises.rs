//! Small promises a user relies on (docs/reference.md): `head` is the last live step, `read`
//! gives exact bytes, a call's args are checked against the tool's declaration before
//! anything is queued.

use crate::common::{put, World};
use std::process::Command;

#[test]
fn head_is_the_last_live_step_after_a_step_back() {
    let w = World::new();
    let (s, _ws) = w.session();
    for c in ["1", "2", "3"] {
        w.json(&["write", &s, "f.txt", "--content", c]).ok();
    }
    w.json(&["step-back", &s, "--to", "1"]).ok();
    assert_eq!(w.json(&["status", &s]).ok()["head"], 1);
    assert_eq!(w.json(&["timeline", &s]).ok()["head"], 1);
    assert!(
        w.run(&["status", &s]).stdout.contains("head      1"),
        "{}",
        w.run(&["status", &s]).stdout
    );
    // A fork at the head the status reports is a fork at a live step.
    let head = w.json(&["status", &s]).ok()["head"].to_string();
    let f = w.json(&["fork", &s, "--at", &head]);
    assert!(f.ok()["hash"].is_string(), "{}", f.dump());
    // A new step moves it on.
    w.json(&["write", &s, "g.txt", "--content", "g"]).ok();
    assert_eq!(w.json(&["status", &s]).ok()["head"], 4);
    // Back to before every step: -1.
    w.json(&["step-back", &s, "--to", "-1"]).ok();
    assert_eq!(w.json(&["status", &s]).ok()["head"], -1);
}

#[test]
fn read_gives_the_exact_bytes() {
    let w = World::new();
    let (s, ws) = w.session();
    let binary: Vec<u8> = vec![0, 159, 146, 150, 0xff, b'\n', 27, b'[', b'2', b'J'];
    put(&ws.join("bin.dat"), &binary, 0o644);
    put(&ws.join("text.txt"), b"no newline at the end", 0o644);
    // --out: the bytes, exactly.
    let out = w.path("copy.dat");
    let r = w.json(&["read", &s, "bin.dat", "--out", out.to_str().unwrap()]);
    assert_eq!(r.ok()["size"], binary.len(), "{}", r.dump());
    assert_eq!(std::fs::read(&out).unwrap(), binary);
    // Text is printed as stored: no newline added.
    let t = w.run(&["read", &s, "text.txt"]);
    assert_eq!(t.code, Some(0), "{}", t.dump());
    assert_eq!(t.stdout, "no newline at the end");
    // --at reads the same way.
    w.json(&["write", &s, "w.txt", "--content", "line\n"]).ok();
    let t = w.run(&["read", &s, "w.txt", "--at", "1"]);
    assert_eq!(t.stdout, "line\n");
}

#[test]
fn binary_content_is_refused_on_a_terminal() {
    let w = World::new();
    let (s, ws) = w.session();
    put(&ws.join("bin.dat"), &[0u8, 0xff, 27, b'c'], 0o644);
    // `script` gives the command a terminal (util-linux).
    let cmd = format!(
        "{} --store {} read {} bin.dat; echo \"exit=$?\"",
        crate::common::bin(),
        w.store.display(),
        s
    );
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("run script (util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("exit=2"), "bad-args on a terminal: {text}");
    assert!(text.contains("--out FILE"), "the hint names --out: {text}");
    assert!(
        !text.contains('\u{1b}'),
        "no raw byte reached the terminal: {text:?}"
    );
}

#[test]
fn a_held_send_whose_args_miss_a_url_placeholder_is_refused_at_the_call() {
    let w = World::new();
    let ws = w.ws("ws");
    let m = w.path("revl.toml");
    std::fs::write(
        &m,
        r#"
[[tool]]
name = "post"
class = "deferred"
service = "tickets"
method = "post"
scope = ["net"]
http = { method = "POST", url = "http://127.0.0.1:9/tickets/{id}" }
"#,
    )
    .unwrap();
    let s = w.new_session_with(&ws, &m);
    let out = w.json(&["call", &s, "post", "--args", r#"{"body": "x"}"#]);
    let msg = out.err(2, "bad-args");
    assert!(msg.contains("`id`"), "{msg}");
    assert_eq!(
        w.json(&["status", &s]).ok()["queue"],
        serde_json::json!([]),
        "nothing was queued"
    );
    let ok = w.json(&["call", &s, "post", "--args", r#"{"id": "a b/c"}"#]);
    assert_eq!(ok.ok()["queued"], true, "{}", ok.dump());
}

#[test]
fn ctrl_c_during_exec_stops_the_command_and_says_what_was_kept() {
    let w = World::new();
    let (s, ws) = w.session();
    let mut cmd = w.command_for(&[
        "--store",
        w.store.to_str().unwrap(),
        "exec",
        &s,
        "--",
        "sh",
        "-c",
        "echo started; echo kept > made.txt; exec sleep 60",
    ]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    // Wait until the command has started (its first line is out), then Ctrl-C revl.
    let pid = child.id() as i32;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    std::thread::sleep(std::time::Duration::from_millis(300));
    loop {
        let scratch = w.store.join("scratch");
        let busy = std::fs::read_dir(&scratch).is_ok_and(|mut d| d.next().is_some());
        if busy || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    assert!(
        stdout.contains("interrupted") && stdout.contains("kept as step 1"),
        "says what happened and what was kept: {stdout}"
    );
    assert_eq!(std::fs::read(ws.join("made.txt")).unwrap(), b"kept\n");
    let tl = w.json(&["timeline", &s]).ok().clone();
    assert_eq!(tl["head"], 1, "{tl}");
    w.json(&["step-back", &s, "--to", "0"]).ok();
    assert!(!ws.join("made.txt").exists());
}

/// A declared compensation that never ran is no step that happened: the timeline shows it
/// armed, `head` is the emission, and `branch` counts only what happened.
#[test]
fn an_unfired_compensation_is_armed_not_a_step_that_happened() {
    let w = World::new();
    let ws = w.ws("ws");
    let m = w.path("revl.toml");
    std::fs::write(
        &m,
        r#"
[[tool]]
name = "post_status"
class = "emission"
service = "status"
method = "post"
scope = ["net"]
run = ["true"]
approval = "none"
compensate = "unpost"

[[tool]]
name = "unpost"
class = "inverse"
service = "status"
method = "unpost"
scope = ["net"]
run = ["true"]
"#,
    )
    .unwrap();
    let s = w.new_session_with(&ws, &m);
    w.json(&["call", &s, "post_status"]).ok();
    let tl = w.json(&["timeline", &s]).ok().clone();
    assert_eq!(tl["head"], 1, "the head is the emission: {tl}");
    assert_eq!(tl["steps"][2]["kind"], "compensation");
    assert_eq!(tl["steps"][2]["armed"], true, "{tl}");
    assert!(tl["steps"][1].get("armed").is_none());
    let text = w.run(&["timeline", &s]).stdout;
    assert!(text.contains("[armed: not run"), "{text}");
    let wal = w.wal(&s);
    let b = w.json(&["branch", wal.to_str().unwrap()]).ok().clone();
    assert_eq!(b["steps"], 2, "hinge and emission: {b}");
    // A compensating step-back fires it: then it happened.
    w.json(&["step-back", &s, "--to", "0", "--compensating"])
        .ok();
    let tl = w.json(&["timeline", &s]).ok().clone();
    assert!(tl["steps"][2].get("armed").is_none(), "{tl}");
}
