//! Fork through the binary: the report (golden), confirm, frozen parent, branch, refusals,
//! and a crash at every point of the confirm, each in a fresh process.

use crate::common::env as support;
use crate::common::manifest::{self, tool};
use revl::sink::Sink;
use serde_json::Value;
use support::*;

fn manifest(e: &Env, sink: &Sink) -> std::path::PathBuf {
    let count = e.root.join("local-undo.count");
    write_script(
        &e.root.join("tools/local.sh"),
        &format!("#!/bin/sh\necho x >> {}\necho '{{}}'\n", count.display()),
    );
    let local = e.root.join("tools/local.sh").display().to_string();
    manifest::write(
        &e.root,
        &[
            tool("hold", "deferred")
                .service("mail")
                .method("send")
                .scope(&["mail"])
                .http(&sink.url("/held")),
            tool("ticket", "emission")
                .service("tickets")
                .method("create")
                .scope(&["net"])
                .no_approval()
                .http(&sink.url("/ticket"))
                .compensate("close"),
            tool("close", "inverse")
                .scope(&["net"])
                .http(&sink.url("/close")),
            tool("tweet", "emission")
                .service("social")
                .method("post")
                .scope(&["net"])
                .http(&sink.url("/tweet")),
            tool("put_object", "effect")
                .service("bucket")
                .method("put")
                .scope(&["net"])
                .http(&sink.url("/put"))
                .undo("restore_object")
                .undo_idempotent(true),
            tool("restore_object", "inverse")
                .scope(&["net"])
                .http(&sink.url("/restore")),
            tool("local_fx", "effect")
                .scope_table(r#"caps = ["fs"]"#)
                .run(&[&local])
                .undo("local_undo")
                .undo_idempotent(false),
            tool("local_undo", "inverse")
                .scope_table("confined = true")
                .run(&[&local]),
            tool("shell", "opaque").run(&["true"]),
        ],
    )
}

fn new_session(e: &Env, sink: &Sink) -> String {
    new_session_with(e, &manifest(e, sink))
}

/// A history holding every kind: 0 hinge, 1 write, 2 provide, 3 boundary, 4 bare emission,
/// 5 emission + 6 compensation, 7 net effect with an undo tool, 8 write, then a held send.
fn every_kind(e: &Env, sink: &Sink) -> String {
    let s = new_session(e, sink);
    ok(e, &["write", &s, "a.txt", "--content", "alpha"]);
    ok(e, &["provide", &s, "API_KEY", "k1"]);
    ok(e, &["boundary", &s, "--label", "turn-1"]);
    ok(e, &["approve", &s, "--tool", "tweet"]);
    ok(e, &["call", &s, "tweet", "--args", r#"{"text":"hello"}"#]);
    ok(e, &["call", &s, "ticket", "--args", r#"{"title":"bug"}"#]);
    ok(e, &["call", &s, "put_object", "--args", r#"{"key":"k"}"#]);
    ok(e, &["write", &s, "a.txt", "--content", "beta"]);
    ok(e, &["call", &s, "hold", "--args", r#"{"to":"a@b.c"}"#]);
    s
}

fn normalise(v: &Value, s: &str, port: u16) -> Value {
    let text = serde_json::to_string_pretty(v)
        .unwrap()
        .replace(s, "<SESSION>")
        .replace(&port.to_string(), "<PORT>");
    let mut v: Value = serde_json::from_str(&text).unwrap();
    if v.get("hash").is_some() {
        v["hash"] = "<HASH>".into();
    }
    v
}

#[test]
fn fork_report_golden_over_every_kind() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = every_kind(&e, &sink);
    let before = sink.count();
    let report = ok(&e, &["fork", &s, "--at", "-1"]);
    assert_eq!(sink.count(), before, "enumeration sent something");
    assert_eq!(report["hash"].as_str().unwrap().len(), 64);
    let got = normalise(&report, &s, sink.port());
    let golden =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/fork_report.json");
    if std::env::var_os("REVL_BLESS").is_some() {
        std::fs::write(&golden, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
    }
    let want: Value = serde_json::from_str(&std::fs::read_to_string(&golden).unwrap()).unwrap();
    assert_eq!(
        got, want,
        "fork report differs from tests/golden/fork_report.json (REVL_BLESS=1 rewrites it)"
    );
    // The buckets, spelled out (the golden could be blessed wrong; these cannot).
    let idx = |k: &str| -> Vec<u64> {
        report[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["index"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(
        report["rewound"]["inversesRan"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["index"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![8, 1]
    );
    assert_eq!(report["rewound"]["provisionsWithdrawn"][0]["index"], 2);
    assert_eq!(idx("emissionsCrossed"), vec![4]);
    assert_eq!(idx("emissionsCompensated"), vec![5]);
    assert_eq!(idx("wouldCrossOnRewind"), vec![7, 6]);
    assert_eq!(report["wouldCrossOnRewind"][1]["for"], 5);
    assert!(idx("unrestored").is_empty());
    assert_eq!(report["residue"]["clean"], false);
    assert_eq!(
        report["residue"]["outstanding"],
        serde_json::json!([4, 5, 6, 7])
    );
    assert_eq!(report["droppedDeferred"].as_array().unwrap().len(), 1);
    // Nothing changed in the workspace.
    assert_eq!(std::fs::read_to_string(e.ws.join("a.txt")).unwrap(), "beta");
}

#[test]
fn opaque_tail_and_non_idempotent_span_are_refused() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    ok(&e, &["write", &s, "a.txt", "--content", "1"]);
    ok(&e, &["call", &s, "local_fx"]);
    let o = revl(&e, &["fork", &s, "--at", "1"], None);
    assert_eq!(
        (o.code, o.json["error"]["code"].as_str()),
        (1, Some("non-idempotent"))
    );
    assert!(o.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("local_fx.call"));
    ok(&e, &["exec", &s, "--unconfined", "--", "true"]);
    let o = revl(&e, &["fork", &s, "--at", "0"], None);
    assert_eq!(
        (o.code, o.json["error"]["code"].as_str()),
        (1, Some("KIND_OPAQUE"))
    );
    let msg = o.json["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("KIND_OPAQUE") && msg.contains("exec/opaque"),
        "{msg}"
    );
    // Forking at the opaque step itself is fine (nothing above it).
    ok(&e, &["fork", &s, "--at", "3"]);
    assert!(
        !std::fs::read_to_string(e.root.join("local-undo.count"))
            .unwrap_or_default()
            .contains("x\nx"),
        "an inverse ran at enumeration"
    );
}

#[test]
fn confirm_rewinds_freezes_parent_and_branch_continues() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = every_kind(&e, &sink);
    assert_eq!(paths(&sink), vec!["/tweet", "/ticket", "/put"]);
    let report = ok(&e, &["fork", &s, "--at", "3"]);
    let r = ok(
        &e,
        &[
            "fork-confirm",
            &s,
            "--hash",
            report["hash"].as_str().unwrap(),
        ],
    );
    assert_eq!(r["forked"], true);
    let b = r["branch"].as_str().unwrap().to_string();
    assert_ne!(b, s);
    assert_eq!(b.len(), 32);
    // No compensation, no outbound undo, no held send fired.
    assert_eq!(paths(&sink), vec!["/tweet", "/ticket", "/put"]);
    assert_eq!(r["emissionsCrossed"][0]["index"], 4);
    assert_eq!(
        r["droppedDeferred"].as_array().unwrap().len(),
        1,
        "the confirmed report lists the dropped held send"
    );
    assert_eq!(
        ok(&e, &["status", &s])["queue"].as_array().unwrap().len(),
        0
    );
    assert_eq!(
        r["lineage"]["notPreserved"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["axis"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["providerVersions", "seedsAndClock", "modelDecisions"]
    );
    // Files at step 3.
    assert_eq!(
        std::fs::read_to_string(e.ws.join("a.txt")).unwrap(),
        "alpha"
    );
    // Parent frozen: effects, fork, commit, abort refused naming the branch; reads work.
    for args in [
        vec!["write", &s, "x", "--content", "y"],
        vec!["fork", &s, "--at", "0"],
        vec!["commit-confirm", &s, "--hash", "00"],
        vec!["abort", &s],
        vec!["call", &s, "hold"],
    ] {
        let o = revl(&e, &args, None);
        assert_eq!(
            (o.code, o.json["error"]["code"].as_str()),
            (1, Some("frozen")),
            "{args:?}"
        );
        let msg = o.json["error"]["message"].as_str().unwrap();
        assert!(msg.contains("frozen") && msg.contains(&b), "{msg}");
    }
    let st = ok(&e, &["status", &s]);
    assert_eq!(
        (
            st["state"].as_str(),
            st["branch"].as_str(),
            st["frozenAt"].as_i64()
        ),
        (Some("frozen"), Some(b.as_str()), Some(3))
    );
    // Branch: live, provisions inherited, no approvals, steps from 0.
    let bs = ok(&e, &["status", &b]);
    assert_eq!(
        (
            bs["state"].as_str(),
            bs["parent"].as_str(),
            bs["forkedAt"].as_i64()
        ),
        (Some("live"), Some(s.as_str()), Some(3))
    );
    assert_eq!(bs["provisions"]["API_KEY"], "k1");
    assert_eq!(bs["head"], 0);
    let o = revl(&e, &["call", &b, "tweet", "--args", "{}"], None);
    assert_eq!(
        o.json["approvalRequired"], true,
        "the parent's standing approval leaked into the branch"
    );
    // The branch's own held send arrives only at the branch's commit.
    ok(&e, &["write", &b, "c.txt", "--content", "gamma"]);
    ok(&e, &["call", &b, "hold", "--args", r#"{"to":"branch"}"#]);
    assert_eq!(sink.count(), 3);
    let plan = ok(&e, &["commit", &b]);
    ok(
        &e,
        &[
            "commit-confirm",
            &b,
            "--hash",
            plan["hash"].as_str().unwrap(),
        ],
    );
    assert_eq!(paths(&sink), vec!["/tweet", "/ticket", "/put", "/held"]);
    assert!(sink.received()[3].body.contains("branch"));
    // Record order in both WALs.
    let parent_recs: Vec<String> = records(&e.store.join("sessions").join(&s).join("wal.jsonl"))
        .iter()
        .map(|r| r["record"].as_str().unwrap().to_string())
        .collect();
    let tail: Vec<&str> = parent_recs
        .iter()
        .skip_while(|r| *r != "fork-begin")
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        vec![
            "fork-begin",
            "undone",
            "deferred-dropped",
            "fork-frozen",
            "fork-complete"
        ]
    );
    let branch_recs: Vec<String> = records(&e.store.join("sessions").join(&b).join("wal.jsonl"))
        .iter()
        .map(|r| r["record"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(&branch_recs[..3], &["header", "fork-branch", "step"]);
    let fb = &records(&e.store.join("sessions").join(&b).join("wal.jsonl"))[1];
    assert_eq!(fb["provisions"]["API_KEY"], "k1");
    assert_eq!(fb["notPreserved"].as_array().unwrap().len(), 3);
}

#[test]
fn stale_hash_no_pending_and_committed_are_refused() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    ok(&e, &["write", &s, "a.txt", "--content", "1"]);
    let o = revl(&e, &["fork-confirm", &s, "--hash", "abc"], None);
    assert_eq!(
        (o.code, o.json["error"]["code"].as_str()),
        (1, Some("no-pending-fork"))
    );
    let r = ok(&e, &["fork", &s, "--at", "0"]);
    ok(&e, &["write", &s, "b.txt", "--content", "2"]);
    let o = revl(
        &e,
        &["fork-confirm", &s, "--hash", r["hash"].as_str().unwrap()],
        None,
    );
    assert_eq!(o.code, 1);
    assert_eq!(
        (o.json["refused"].as_bool(), o.json["forked"].as_bool()),
        (Some(true), Some(false))
    );
    assert!(o.json.get("hash").is_none());
    assert!(
        e.ws.join("a.txt").exists() && e.ws.join("b.txt").exists(),
        "a stale confirm changed the workspace"
    );
    // The pending fork is cleared: confirming the fresh report's (absent) hash needs a new fork.
    let o = revl(
        &e,
        &["fork-confirm", &s, "--hash", r["hash"].as_str().unwrap()],
        None,
    );
    assert_eq!(o.json["error"]["code"], "no-pending-fork");
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
    let o = revl(&e, &["fork", &s, "--at", "0"], None);
    assert_eq!(
        (o.code, o.json["error"]["code"].as_str()),
        (1, Some("not-live"))
    );
    assert!(o.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("committed boundary"));
}

#[test]
fn second_alternative_forks_the_branch_at_minus_one() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    ok(&e, &["write", &s, "a.txt", "--content", "base"]);
    ok(&e, &["write", &s, "a.txt", "--content", "try-1"]);
    let h = ok(&e, &["fork", &s, "--at", "1"])["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let b1 = ok(&e, &["fork-confirm", &s, "--hash", &h])["branch"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["write", &b1, "a.txt", "--content", "try-2"]);
    let h = ok(&e, &["fork", &b1, "--at", "-1"])["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let b2 = ok(&e, &["fork-confirm", &b1, "--hash", &h])["branch"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(std::fs::read_to_string(e.ws.join("a.txt")).unwrap(), "base");
    assert_eq!(ok(&e, &["status", &b2])["parent"], b1.as_str());
    assert_eq!(
        revl(&e, &["fork", &s, "--at", "0"], None).json["error"]["code"],
        "frozen"
    );
}

/// The crash matrix: a failpoint during fork-confirm, then a fresh process attaches.
fn crash_case(failpoint: &str) -> (Env, Sink, String, Value) {
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session(&e, &sink);
    ok(&e, &["write", &s, "keep.txt", "--content", "k"]);
    ok(&e, &["mkdir", &s, "d"]);
    let at_k = snapshot(&e.ws);
    ok(&e, &["write", &s, "d/new.txt", "--content", "n"]);
    ok(&e, &["write", &s, "keep.txt", "--content", "changed"]);
    ok(&e, &["provide", &s, "K", "v"]);
    ok(&e, &["call", &s, "ticket", "--args", "{}"]);
    ok(&e, &["call", &s, "put_object", "--args", "{}"]);
    ok(&e, &["delete", &s, "d"]);
    ok(&e, &["call", &s, "hold", "--args", "{}"]);
    let head_snap = snapshot(&e.ws);
    let sent = sink.count();
    let h = ok(&e, &["fork", &s, "--at", "2"])["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let o = revl(&e, &["fork-confirm", &s, "--hash", &h], Some(failpoint));
    assert_ne!(
        o.code, 0,
        "{failpoint}: the process did not die: {}",
        o.stdout
    );
    // A fresh process attaches (and repairs).
    let st = ok(&e, &["status", &s]);
    assert_eq!(
        sink.count(),
        sent,
        "{failpoint}: something was sent during the fork or its repair"
    );
    let snap = snapshot(&e.ws);
    let begun = records(&e.store.join("sessions").join(&s).join("wal.jsonl"))
        .iter()
        .any(|r| r["record"] == "fork-begin");
    if begun {
        assert_eq!(snap, at_k, "{failpoint}: workspace is not at step 2");
    } else {
        assert_eq!(
            snap, head_snap,
            "{failpoint}: a torn fork-begin changed the workspace"
        );
    }
    let _ = head_snap;
    (e, sink, s, st)
}

#[test]
fn crash_after_begin_abandons_fork_at_k() {
    let (e, _sink, s, st) = crash_case("fork.after-begin");
    assert_eq!(st["state"], "live");
    assert!(st.get("branch").is_none());
    assert_eq!(st["queue"].as_array().unwrap().len(), 0);
    let recs = records(&e.store.join("sessions").join(&s).join("wal.jsonl"));
    assert_eq!(recs.last().unwrap()["record"], "fork-abandoned");
    // Live at k: a new fork at the same step works.
    ok(&e, &["fork", &s, "--at", "2"]);
}

#[test]
fn crash_mid_rewind_is_finished_at_repair() {
    for n in 1..=4 {
        let (_e, _sink, _s, st) = crash_case(&format!("fork.mid-rewind:{n}"));
        assert_eq!(st["state"], "live");
    }
}

#[test]
fn crash_after_rewind_abandons() {
    let (_e, _sink, _s, st) = crash_case("fork.after-rewind");
    assert_eq!(st["state"], "live");
}

#[test]
fn crash_after_branch_rolls_forward() {
    for fp in ["fork.after-branch", "fork.after-frozen"] {
        let (e, _sink, s, st) = crash_case(fp);
        assert_eq!(st["state"], "frozen", "{fp}");
        let b = st["branch"].as_str().unwrap().to_string();
        assert_eq!(ok(&e, &["status", &b])["state"], "live");
        let recs: Vec<String> = records(&e.store.join("sessions").join(&s).join("wal.jsonl"))
            .iter()
            .map(|r| r["record"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            &recs[recs.len() - 2..],
            &["fork-frozen", "fork-complete"],
            "{fp}"
        );
    }
}

#[test]
fn torn_append_at_every_fork_record() {
    // fork-confirm appends: 1 fork-begin, 2..=5 undone (four host-confined inverses), 6
    // deferred-dropped, 7 fork-frozen, 8 fork-complete.
    for n in 1..=8 {
        let (e, _sink, s, st) = crash_case(&format!("wal.torn-append:{n}"));
        let expect = if n >= 7 { "frozen" } else { "live" };
        assert_eq!(st["state"], expect, "torn append {n}");
        let _ = (e, s);
    }
}
