//! Outbound effects through the binary, against a real loopback HTTP sink and a real argv
//! tool: held sends, commit, abort, approvals, compensations, failpoints.

use crate::common::env as support;
use crate::common::manifest::{self, tool};
use revl::sink::Sink;
use serde_json::Value;
use std::path::PathBuf;
use support::*;

/// A manifest whose deferred tool posts to the sink, an emission with a compensation (both
/// to the sink), a bare emission, an argv effect whose undo appends to a log file.
fn manifest(e: &Env, sink: &Sink) -> PathBuf {
    let tools = e.root.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let log = e.root.join("tool.log");
    let script = tools.join("append.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$1 $REVL_STEP\" >> {}\necho '{{\"done\":\"'$1'\"}}'\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = script.display().to_string();
    manifest::write(
        &e.root,
        &[
            tool("send_email", "deferred")
                .service("mail")
                .method("send")
                .scope(&["mail"])
                .post(&sink.url("/send")),
            tool("send_broken", "deferred")
                .scope(&["mail"])
                .post(&sink.url("/fail")),
            tool("create_ticket", "emission")
                .service("tickets")
                .method("create")
                .scope(&["net"])
                .post(&sink.url("/ticket"))
                .compensate("close_ticket"),
            tool("close_ticket", "inverse")
                .scope(&["net"])
                .post(&sink.url("/close")),
            tool("post_tweet", "emission")
                .scope(&["net"])
                .post(&sink.url("/tweet")),
            tool("append", "effect")
                .scope_table("caps = [], confined = true")
                .run(&[&script, "{word}"])
                .undo("unappend")
                .undo_idempotent(true),
            tool("unappend", "inverse")
                .scope(&[])
                .run(&[&script, "undo-{witness}"]),
        ],
    )
}

fn new_session(e: &Env, sink: &Sink) -> String {
    new_session_with(e, &manifest(e, sink))
}

#[test]
fn held_sends_fire_only_at_commit_in_order_once() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    for i in 0..3 {
        let r = ok(
            &e,
            &[
                "call",
                &s,
                "send_email",
                "--args",
                &format!(r#"{{"to":"a@b.c","n":{i}}}"#),
            ],
        );
        assert_eq!(r["queued"], true);
    }
    ok(&e, &["write", &s, "a.txt", "--content", "x"]);
    assert_eq!(sink.count(), 0, "a held send arrived before commit");
    let plan = ok(&e, &["commit", &s]);
    assert_eq!(plan["deferred"].as_array().unwrap().len(), 3);
    assert_eq!(plan["witnessed"]["count"], 1);
    assert_eq!(sink.count(), 0);
    let r = ok(
        &e,
        &[
            "commit-confirm",
            &s,
            "--hash",
            plan["hash"].as_str().unwrap(),
        ],
    );
    assert_eq!(r["committed"], true);
    let got = sink.received();
    assert_eq!(got.len(), 3);
    for (i, g) in got.iter().enumerate() {
        let body: Value = serde_json::from_str(&g.body).unwrap();
        assert_eq!(body["n"], i, "FIFO order");
        assert!(g.idempotency_key.as_deref().unwrap().starts_with(&s));
    }
    // Committed: refuses effects with the committed boundary named.
    let o = revl(&e, &["write", &s, "b.txt", "--content", "y"], None);
    assert_eq!(o.code, 1);
    assert_eq!(o.json["error"]["code"], "not-live");
    assert!(o.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("committed boundary"));
    assert_eq!(sink.count(), 3);
}

#[test]
fn stale_commit_hash_fires_nothing() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    ok(&e, &["call", &s, "send_email", "--args", r#"{"to":"x"}"#]);
    let plan = ok(&e, &["commit", &s]);
    ok(&e, &["call", &s, "send_email", "--args", r#"{"to":"y"}"#]);
    let o = revl(
        &e,
        &[
            "commit-confirm",
            &s,
            "--hash",
            plan["hash"].as_str().unwrap(),
        ],
        None,
    );
    assert_eq!(o.code, 1);
    assert_eq!(o.json["refused"], true);
    assert_eq!(o.json["committed"], false);
    assert_eq!(o.json["plan"]["deferred"].as_array().unwrap().len(), 2);
    assert_eq!(sink.count(), 0);
    assert_eq!(ok(&e, &["status", &s])["state"], "live");
}

#[test]
fn failing_send_is_flush_residue_and_flush_continues() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    ok(&e, &["call", &s, "send_email", "--args", r#"{"n":1}"#]);
    ok(&e, &["call", &s, "send_broken", "--args", r#"{"n":2}"#]);
    ok(&e, &["call", &s, "send_email", "--args", r#"{"n":3}"#]);
    let plan = ok(&e, &["commit", &s]);
    let r = ok(
        &e,
        &[
            "commit-confirm",
            &s,
            "--hash",
            plan["hash"].as_str().unwrap(),
        ],
    );
    assert_eq!(r["flushed"].as_array().unwrap().len(), 2);
    let residue = r["flushResidue"].as_array().unwrap();
    assert_eq!(residue.len(), 1);
    assert_eq!(residue[0]["type"], "http");
    assert_eq!(paths(&sink), vec!["/send", "/fail", "/send"]);
}

#[test]
fn abort_drops_held_sends_forever_and_compensates_once() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    ok(&e, &["call", &s, "send_email", "--args", r#"{"to":"x"}"#]);
    let o = revl(
        &e,
        &["call", &s, "create_ticket", "--args", r#"{"title":"t"}"#],
        None,
    );
    assert_eq!(o.code, 1);
    assert_eq!(o.json["approvalRequired"], true);
    assert_eq!(sink.count(), 0, "an unapproved emission fired");
    ok(
        &e,
        &[
            "approve",
            &s,
            "--ticket",
            o.json["ticket"].as_str().unwrap(),
        ],
    );
    let r = ok(
        &e,
        &["call", &s, "create_ticket", "--args", r#"{"title":"t"}"#],
    );
    assert_eq!(paths(&sink), vec!["/ticket"]);
    // The ticket is consumed: a second call needs a new approval.
    let again = revl(
        &e,
        &["call", &s, "create_ticket", "--args", r#"{"title":"t"}"#],
        None,
    );
    assert_eq!(again.json["approvalRequired"], true);
    let tl = ok(&e, &["timeline", &s]);
    let step = r["step"].as_u64().unwrap() as usize;
    assert_eq!(tl["steps"][step]["compensation"], step + 1);
    assert_eq!(tl["steps"][step + 1]["kind"], "compensation");
    let a = ok(&e, &["abort", &s]);
    assert_eq!(a["aborted"], true);
    assert_eq!(a["droppedDeferred"].as_array().unwrap().len(), 1);
    assert_eq!(a["compensationsRan"].as_array().unwrap().len(), 1);
    assert_eq!(paths(&sink), vec!["/ticket", "/close"]);
    // A later recover never sends anything.
    let rec = ok(&e, &["recover", &s]);
    assert_eq!(rec["verdict"], "already-aborted");
    assert_eq!(paths(&sink), vec!["/ticket", "/close"]);
    assert_eq!(
        revl(&e, &["call", &s, "send_email", "--args", "{}"], None).json["error"]["code"],
        "not-live"
    );
}

#[test]
fn standing_grant_never_crosses_sessions() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let a = new_session(&e, &sink);
    ok(&e, &["approve", &a, "--tool", "post_tweet"]);
    ok(&e, &["call", &a, "post_tweet", "--args", r#"{"t":1}"#]);
    ok(&e, &["call", &a, "post_tweet", "--args", r#"{"t":2}"#]);
    assert_eq!(sink.count(), 2);
    ok(&e, &["abort", &a]);
    let e2 = Env {
        store: e.store.clone(),
        ws: e.root.join("ws2"),
        root: e.root.clone(),
        world: support::env().world,
    };
    let b = new_session(&e2, &sink);
    let o = revl(
        &e2,
        &["call", &b, "post_tweet", "--args", r#"{"t":3}"#],
        None,
    );
    assert_eq!(o.json["approvalRequired"], true);
    // A ticket from session a cannot be approved in b.
    let o2 = revl(
        &e2,
        &[
            "approve",
            &b,
            "--ticket",
            "0123456789abcdef0123456789abcdef",
        ],
        None,
    );
    assert_eq!(o2.code, 2);
    assert_eq!(sink.count(), 2);
}

#[test]
fn argv_effect_runs_and_abort_runs_its_undo() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    let r = ok(
        &e,
        &[
            "call",
            &s,
            "append",
            "--args",
            r#"{"word":"hello; rm -rf /"}"#,
        ],
    );
    assert_eq!(r["witness"]["done"], "hello; rm -rf /");
    let log = std::fs::read_to_string(e.root.join("tool.log")).unwrap();
    assert_eq!(log, format!("hello; rm -rf / {}\n", r["step"]));
    // Missing template argument: refused before anything runs.
    let o = revl(&e, &["call", &s, "append", "--args", "{}"], None);
    assert_eq!(
        (o.code, o.json["error"]["code"].as_str()),
        (2, Some("bad-args"))
    );
    ok(&e, &["abort", &s]);
    let log = std::fs::read_to_string(e.root.join("tool.log")).unwrap();
    assert_eq!(log.lines().count(), 2);
    assert!(
        log.lines()
            .nth(1)
            .unwrap()
            .starts_with("undo-{\"done\":\"hello; rm -rf /\"}"),
        "{log}"
    );
}

#[test]
fn malformed_manifest_is_refused_naming_file_tool_field() {
    let e = env();
    let p = e.root.join("bad.toml");
    std::fs::write(&p, "[[tool]]\nname = \"x\"\nclass = \"effect\"\nscope = [\"fs\"]\nrun = [\"true\"]\nundo = \"nope\"\n").unwrap();
    let o = revl(
        &e,
        &[
            "new",
            "--workspace",
            e.ws.to_str().unwrap(),
            "--manifest",
            p.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(o.code, 2);
    assert_eq!(o.json["error"]["code"], "bad-manifest");
    let msg = o.json["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("bad.toml") && msg.contains("\"x\"") && msg.contains("undo"),
        "{msg}"
    );
    std::fs::write(&p, "[[tool]]\nname = \"x\"\nclass = \"deferred\"\nscope = [\"mail\"]\nhttp = { url = \"http://127.0.0.1:9/\" }\ncolour = 1\n").unwrap();
    let o = revl(
        &e,
        &[
            "new",
            "--workspace",
            e.ws.to_str().unwrap(),
            "--manifest",
            p.to_str().unwrap(),
        ],
        None,
    );
    assert!(o.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("colour"));
    assert_eq!(
        revl(&e, &["sessions"], None).json["sessions"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn manifest_edits_after_new_change_nothing() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    let m = e.root.join("revl.toml");
    let text = std::fs::read_to_string(&m)
        .unwrap()
        .replace("/send", "/evil");
    std::fs::write(&m, text).unwrap();
    ok(&e, &["call", &s, "send_email", "--args", "{}"]);
    let plan = ok(&e, &["commit", &s]);
    ok(
        &e,
        &[
            "commit-confirm",
            &s,
            "--hash",
            plan["hash"].as_str().unwrap(),
        ],
    );
    assert_eq!(paths(&sink), vec!["/send"]);
}

fn queue_three(e: &Env, sink: &Sink) -> (String, String) {
    let s = new_session(e, sink);
    for i in 0..3 {
        ok(
            e,
            &[
                "call",
                &s,
                "send_email",
                "--args",
                &format!(r#"{{"n":{i}}}"#),
            ],
        );
    }
    let hash = ok(e, &["commit", &s])["hash"].as_str().unwrap().to_string();
    (s, hash)
}

#[test]
fn crash_after_commit_approved_sends_nothing_and_owes_all() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, hash) = queue_three(&e, &sink);
    let o = revl(
        &e,
        &["commit-confirm", &s, "--hash", &hash],
        Some("commit.after-approved"),
    );
    assert_ne!(o.code, 0);
    assert_eq!(sink.count(), 0);
    let st = ok(&e, &["status", &s]);
    assert_eq!(st["state"], "committed");
    assert_eq!(st["owed"].as_array().unwrap().len(), 3);
    assert_eq!(sink.count(), 0, "repair re-fired a send");
    let rec = ok(&e, &["recover", &s]);
    assert_eq!(rec["verdict"], "rolled-forward");
    // The operator resends one explicitly.
    let seq = st["owed"][0]["seq"].as_u64().unwrap().to_string();
    ok(&e, &["resend", &s, "--seq", &seq]);
    assert_eq!(sink.count(), 1);
    assert_eq!(ok(&e, &["status", &s])["owed"].as_array().unwrap().len(), 2);
}

#[test]
fn crash_mid_flush_never_sends_twice() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, hash) = queue_three(&e, &sink);
    let o = revl(
        &e,
        &["commit-confirm", &s, "--hash", &hash],
        Some("commit.mid-flush:2"),
    );
    assert_ne!(o.code, 0);
    assert_eq!(
        sink.count(),
        2,
        "the crash came after the second send's response"
    );
    let st = ok(&e, &["status", &s]);
    assert_eq!(st["state"], "committed");
    // The second send's outcome is unknown and the third never fired: both owed, none re-fired.
    assert_eq!(st["owed"].as_array().unwrap().len(), 2);
    ok(&e, &["timeline", &s]);
    assert_eq!(sink.count(), 2);
    let keys: Vec<_> = sink
        .received()
        .iter()
        .map(|r| r.idempotency_key.clone())
        .collect();
    assert_ne!(keys[0], keys[1]);
}

#[test]
fn crash_mid_abort_replay_finishes_without_crossing() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    ok(&e, &["approve", &s, "--tool", "create_ticket"]);
    ok(
        &e,
        &["call", &s, "create_ticket", "--args", r#"{"title":"t"}"#],
    );
    ok(&e, &["write", &s, "a.txt", "--content", "one"]);
    ok(&e, &["write", &s, "b.txt", "--content", "two"]);
    ok(&e, &["call", &s, "send_email", "--args", "{}"]);
    let o = revl(&e, &["abort", &s], Some("abort.mid-replay:1"));
    assert_ne!(o.code, 0);
    let st = ok(&e, &["status", &s]);
    assert_eq!(st["state"], "aborted");
    assert!(!e.ws.join("a.txt").exists() && !e.ws.join("b.txt").exists());
    // The compensation crosses: repair owes it and never runs it.
    let owed = st["owed"].as_array().unwrap();
    assert_eq!(owed.len(), 1);
    assert_eq!(owed[0]["kind"], "compensation");
    assert_eq!(paths(&sink), vec!["/ticket"]);
    // An explicit abort runs the owed compensation once.
    ok(&e, &["abort", &s]);
    assert_eq!(paths(&sink), vec!["/ticket", "/close"]);
    assert_eq!(ok(&e, &["status", &s])["owed"].as_array().unwrap().len(), 0);
    assert_eq!(revl(&e, &["abort", &s], None).code, 1);
    assert_eq!(paths(&sink), vec!["/ticket", "/close"]);
}

#[test]
fn bare_emission_blocks_compensating_step_back_unless_forced() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    ok(&e, &["approve", &s, "--tool", "post_tweet"]);
    ok(&e, &["write", &s, "a.txt", "--content", "one"]);
    ok(&e, &["call", &s, "post_tweet", "--args", "{}"]);
    let o = revl(&e, &["step-back", &s, "--to", "0", "--compensating"], None);
    assert_eq!(
        (o.code, o.json["error"]["code"].as_str()),
        (1, Some("irreversible"))
    );
    assert!(
        e.ws.join("a.txt").exists(),
        "a refused step-back ran something"
    );
    let r = ok(
        &e,
        &["step-back", &s, "--to", "0", "--compensating", "--force"],
    );
    assert_eq!(r["emissionsCrossed"].as_array().unwrap().len(), 1);
    assert!(!e.ws.join("a.txt").exists());
    assert_eq!(sink.count(), 1);
}

/// A compensating step-back over b.txt (host-confined), a compensated emission and a.txt,
/// killed at `step-back.mid-replay:N`, then repaired by the next command
/// (docs/architecture.md, "Attach and repair").
fn compensating_step_back_crash(n: u32) -> (Env, Sink, String, Value) {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    ok(&e, &["approve", &s, "--tool", "create_ticket"]);
    ok(&e, &["write", &s, "a.txt", "--content", "one"]); // step 1
    ok(
        &e,
        &["call", &s, "create_ticket", "--args", r#"{"title":"t"}"#],
    ); // steps 2 (emission) and 3 (its compensation)
    ok(&e, &["write", &s, "b.txt", "--content", "two"]); // step 4
    let fp = format!("step-back.mid-replay:{n}");
    let o = revl(
        &e,
        &["step-back", &s, "--to", "0", "--compensating"],
        Some(&fp),
    );
    assert_ne!(o.code, 0, "{fp}: the process did not die");
    // The next command attaches and repairs.
    let st = ok(&e, &["status", &s]);
    assert_eq!(st["state"], "live");
    let wal = PathBuf::from(st["wal"].as_str().unwrap());
    let done: Vec<Value> = records(&wal)
        .into_iter()
        .filter(|r| r["record"] == "step-back-done")
        .collect();
    assert_eq!(done.len(), 1, "{fp}: the repair closes the step-back once");
    assert!(!e.ws.join("a.txt").exists() && !e.ws.join("b.txt").exists());
    (e, sink, s, done[0].clone())
}

#[test]
fn crash_mid_compensating_step_back_owes_the_crossing_inverses_not_yet_run() {
    // Killed after b.txt's inverse ran, before the compensation ran.
    let (e, sink, s, done) = compensating_step_back_crash(1);
    // Repair finished the host-confined inverses and ran no crossing one.
    assert_eq!(paths(&sink), vec!["/ticket"], "repair crossed");
    let st = ok(&e, &["status", &s]);
    let owed = st["owed"].as_array().unwrap();
    assert_eq!(owed.len(), 1, "{st}");
    assert_eq!(
        (owed[0]["index"].as_u64(), owed[0]["kind"].as_str()),
        (Some(3), Some("compensation"))
    );
    assert_eq!(done["owed"][0]["index"], 3);
    assert_eq!(done["failed"], serde_json::json!([]));
    // The owed compensation runs once, on an explicit abort, and is then no longer owed.
    ok(&e, &["abort", &s]);
    assert_eq!(paths(&sink), vec!["/ticket", "/close"]);
    assert_eq!(ok(&e, &["status", &s])["owed"], serde_json::json!([]));
}

#[test]
fn crash_after_a_crossing_inverse_of_a_step_back_never_runs_it_again() {
    // Killed after the compensation crossed, before its `undone`: it was fenced first, so
    // its outcome is unknown: listed failed, never owed, never re-run.
    let (e, sink, s, done) = compensating_step_back_crash(2);
    assert_eq!(paths(&sink), vec!["/ticket", "/close"]);
    let failed = done["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{done}");
    assert_eq!(
        (failed[0]["index"].as_u64(), failed[0]["outcome"].as_str()),
        (Some(3), Some("unknown"))
    );
    assert!(done.get("owed").is_none(), "{done}");
    assert_eq!(ok(&e, &["status", &s])["owed"], serde_json::json!([]));
    ok(&e, &["abort", &s]);
    assert_eq!(
        paths(&sink),
        vec!["/ticket", "/close"],
        "a fenced compensation ran twice"
    );
}
