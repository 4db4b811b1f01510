//! Offline lineage, topology, partition and compare over real WALs made by real forks.

use crate::common::env as support;
use serde_json::Value;
use std::path::{Path, PathBuf};
use support::*;

fn wal(e: &Env, id: &str) -> PathBuf {
    e.store.join("sessions").join(id).join("wal.jsonl")
}

fn branch(args: &[&str]) -> Out {
    // Offline readers need no store: run without --store pointing anywhere useful.
    let e = env();
    revl(&e, args, None)
}

fn w(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn fork(e: &Env, s: &str, at: &str) -> String {
    let h = ok(e, &["fork", s, "--at", at])["hash"]
        .as_str()
        .unwrap()
        .to_string();
    ok(e, &["fork-confirm", s, "--hash", &h])["branch"]
        .as_str()
        .unwrap()
        .to_string()
}

/// parent P (steps 1..=3) → branch B at 2 → branch-of-branch C at B's 1.
fn chain() -> (Env, String, String, String) {
    let e = env();
    let p = ok(&e, &["new", "--workspace", e.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["write", &p, "a.txt", "--content", "1"]);
    ok(&e, &["provide", &p, "K", "v"]);
    ok(&e, &["write", &p, "a.txt", "--content", "2"]);
    let b = fork(&e, &p, "2");
    ok(&e, &["write", &b, "b.txt", "--content", "x"]);
    ok(&e, &["write", &b, "b.txt", "--content", "y"]);
    let c = fork(&e, &b, "1");
    ok(&e, &["boundary", &c]);
    (e, p, b, c)
}

#[test]
fn lineage_roles_and_text() {
    let (e, p, b, c) = chain();
    let lp = branch(&["branch", "--wal", w(&wal(&e, &p))]);
    assert_eq!(
        (lp.code, lp.json["role"].as_str(), lp.json["child"].as_str()),
        (0, Some("forked-parent"), Some(b.as_str()))
    );
    assert_eq!(
        (lp.json["kind"].as_str(), lp.json["schemaVersion"].as_str()),
        (Some("revl.branch-lineage"), Some("1.0"))
    );
    assert_eq!(lp.json["frozenAt"], 2);
    assert!(lp.json.get("preserved").is_none() && lp.json.get("midFork").is_none());
    let lb = branch(&["branch", "--wal", w(&wal(&e, &b))]);
    assert_eq!(
        (
            lb.json["role"].as_str(),
            lb.json["parent"].as_str(),
            lb.json["divergedAt"].as_i64()
        ),
        (Some("forked-branch"), Some(p.as_str()), Some(2))
    );
    assert_eq!(lb.json["inheritedResidue"]["clean"], true);
    assert_eq!(lb.json["notPreserved"].as_array().unwrap().len(), 3);
    assert_eq!(lb.json["preserved"]["at"], 2);
    let lc = branch(&["branch", "--wal", w(&wal(&e, &c))]);
    assert_eq!(lc.json["role"], "branch");
    let text = revl_env(&e, &["branch", "--wal", w(&wal(&e, &c))], false, None);
    assert!(
        text.stdout.starts_with(&format!("BRANCH {c}")),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!("branch of  {b} at step 1")),
        "{}",
        text.stdout
    );
    // A standalone WAL.
    let e2 = env();
    let s = ok(&e2, &["new", "--workspace", e2.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    let ls = branch(&["branch", "--wal", w(&wal(&e2, &s))]);
    assert_eq!((ls.code, ls.json["role"].as_str()), (0, Some("standalone")));
    assert!(ls.json.get("preserved").is_none());
}

#[test]
fn topology_edges_orphans_dangling() {
    let (e, p, b, c) = chain();
    let (wp, wb, wc) = (wal(&e, &p), wal(&e, &b), wal(&e, &c));
    let t = branch(&[
        "branch",
        "--wal",
        w(&wp),
        "--wal",
        w(&wb),
        "--wal",
        w(&wc),
        "--wal",
        w(&wp),
    ]);
    assert_eq!(t.code, 0, "{}", t.json);
    assert_eq!(t.json["kind"], "revl.branch-topology");
    assert_eq!(
        t.json["sessions"].as_array().unwrap().len(),
        3,
        "the same WAL given twice counts once"
    );
    assert_eq!(t.json["edges"].as_array().unwrap().len(), 2);
    assert_eq!(t.json["roots"], serde_json::json!([p]));
    assert_eq!(t.json["children"][&p], serde_json::json!([b]));
    assert_eq!(t.json["children"][&b], serde_json::json!([c]));
    let text = revl_env(
        &e,
        &["branch", "--wal", w(&wp), "--wal", w(&wb), "--wal", w(&wc)],
        false,
        None,
    );
    assert!(text.stdout.starts_with("branch topology"));
    assert!(
        text.stdout.contains("(forked at step 2)") && text.stdout.contains("(forked at step 1)")
    );
    // Parent missing: B is an orphan. Branch missing: P dangles.
    let t = branch(&["branch", "--wal", w(&wb), "--wal", w(&wc)]);
    assert_eq!(t.code, 1);
    assert_eq!(t.json["orphans"][0]["branch"], b.as_str());
    let text = revl_env(
        &e,
        &["branch", "--wal", w(&wb), "--wal", w(&wc)],
        false,
        None,
    );
    assert!(text.stdout.contains("ORPHAN"));
    let e2 = env();
    let s = ok(&e2, &["new", "--workspace", e2.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    let t = branch(&["branch", "--wal", w(&wp), "--wal", w(&wal(&e2, &s))]);
    assert_eq!(t.code, 1);
    assert_eq!(t.json["dangling"][0]["branch"], b.as_str());
    assert_eq!(
        t.json["unidentified"][0]["wal"]
            .as_str()
            .map(|x| x.ends_with("wal.jsonl")),
        Some(true)
    );
    let text = revl_env(
        &e,
        &["branch", "--wal", w(&wp), "--wal", w(&wal(&e2, &s))],
        false,
        None,
    );
    assert!(text.stdout.contains("DANGLING"));
}

#[test]
fn mid_fork_wal_reads_half_rewound_without_repair() {
    let e = env();
    let s = ok(&e, &["new", "--workspace", e.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["write", &s, "a.txt", "--content", "1"]);
    ok(&e, &["write", &s, "a.txt", "--content", "2"]);
    let h = ok(&e, &["fork", &s, "--at", "1"])["hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(
        revl(
            &e,
            &["fork-confirm", &s, "--hash", &h],
            Some("fork.after-begin")
        )
        .code,
        0
    );
    let before = std::fs::read(wal(&e, &s)).unwrap();
    let l = branch(&["branch", "--wal", w(&wal(&e, &s))]);
    assert!(
        l.json["midFork"].as_str().unwrap().contains("half rewound"),
        "{}",
        l.json
    );
    assert_eq!(
        std::fs::read(wal(&e, &s)).unwrap(),
        before,
        "an offline reader wrote to the WAL"
    );
    // In text, a fork in progress names no branch (none exists yet) and no "step -".
    let text = revl_env(&e, &["branch", "--wal", w(&wal(&e, &s))], false, None);
    assert!(
        text.stdout.contains("MID-FORK: the fork at step 1 began"),
        "{}",
        text.stdout
    );
    assert!(
        !text.stdout.contains("forked into") && !text.stdout.contains("step -"),
        "{}",
        text.stdout
    );
    // A live command repairs: the fork is abandoned and the WAL reads standalone; status
    // says so (the branch was never made).
    let st = ok(&e, &["status", &s]);
    assert_eq!(
        st["abandonedForks"].as_array().map(Vec::len),
        Some(1),
        "{st}"
    );
    assert_eq!(
        (
            &st["abandonedForks"][0]["at"],
            &st["abandonedForks"][0]["outcome"]
        ),
        (&serde_json::json!(1), &serde_json::json!("abandoned"))
    );
    assert_eq!(
        st["abandonedForks"][0]["hash"],
        h.as_str(),
        "the hash that was confirmed"
    );
    let text = revl_env(&e, &["status", &s], false, None);
    assert!(
        text.stdout.contains("fork at step 1 ABANDONED"),
        "{}",
        text.stdout
    );
    let l = branch(&["branch", "--wal", w(&wal(&e, &s))]);
    assert_eq!(l.json["role"], "standalone");
    assert!(l.json.get("midFork").is_none());
}

#[test]
fn partition_findings_and_exit_codes() {
    let (e, p, _b, c) = chain();
    let part = branch(&["branch", "--wal", w(&wal(&e, &p)), "--at", "3"]);
    assert_eq!(part.json["kind"], "revl.branch-partition");
    assert_eq!(part.json["performed"], false);
    let f: Vec<&str> = part.json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["finding"].as_str().unwrap())
        .collect();
    assert!(f.contains(&"not-live"), "{f:?}");
    assert!(
        f.contains(&"undone"),
        "steps above 2 were stepped over by the fork: {f:?}"
    );
    assert_eq!(part.json["forkable"], false);
    // The live branch, with a torn tail appended: information only.
    let bw = wal(&e, &c);
    let mut f2 = std::fs::OpenOptions::new().append(true).open(&bw).unwrap();
    std::io::Write::write_all(&mut f2, b"{\"record\":\"und").unwrap();
    let part = branch(&["branch", "--wal", w(&bw), "--at", "-1"]);
    let f: Vec<&str> = part.json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["finding"].as_str().unwrap())
        .collect();
    assert_eq!(f, vec!["torn-tail"]);
    assert_eq!(
        (part.code, part.json["forkable"].as_bool()),
        (0, Some(true))
    );
    // A committed session: the boundary is a finding and K out of range is bad input.
    let e2 = env();
    let s = ok(&e2, &["new", "--workspace", e2.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e2, &["write", &s, "a", "--content", "1"]);
    let plan = ok(&e2, &["commit", &s]);
    ok(
        &e2,
        &[
            "commit-confirm",
            &s,
            "--hash",
            plan["hash"].as_str().unwrap(),
        ],
    );
    let part = branch(&["branch", "--wal", w(&wal(&e2, &s)), "--at", "0"]);
    let f: Vec<&str> = part.json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["finding"].as_str().unwrap())
        .collect();
    assert!(
        f.contains(&"not-live") && f.contains(&"committed-boundary"),
        "{f:?}"
    );
    assert_eq!(
        branch(&["branch", "--wal", w(&wal(&e2, &s)), "--at", "9"]).code,
        2
    );
    assert_eq!(
        branch(&["branch", "--wal", "/nonexistent/wal.jsonl"]).code,
        1,
        "docs/reference.md, branch: a WAL that cannot be read exits 1"
    );
}

#[test]
fn compare_parent_branch_siblings_unrelated() {
    let (e, p, b, _c) = chain();
    let r = branch(&["compare", w(&wal(&e, &p)), w(&wal(&e, &b))]);
    assert_eq!(
        (
            r.code,
            r.json["relation"].as_str(),
            r.json["divergedAt"].as_i64()
        ),
        (0, Some("parent-branch"), Some(2))
    );
    let d = &r.json["delta"];
    assert_eq!(d["identical"], false);
    assert_eq!(d["firstDifference"]["position"], 3);
    assert_eq!(d["firstDifference"]["left"]["label"], "fs.write a.txt");
    assert_eq!(d["firstDifference"]["right"]["label"], "fs.write b.txt");
    assert_eq!(d["onlyRight"].as_array().unwrap().len(), 2);
    assert_eq!(
        r.json["notComparable"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["axis"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["decisionCause", "counterfactual"]
    );
    let text = revl_env(
        &e,
        &["compare", w(&wal(&e, &p)), w(&wal(&e, &b))],
        false,
        None,
    );
    assert!(
        text.stdout.starts_with("relation: PARENT-BRANCH"),
        "{}",
        text.stdout
    );

    // Siblings: copy the store before the confirm, confirm in both copies.
    let e = env();
    let s = ok(&e, &["new", "--workspace", e.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["write", &s, "a.txt", "--content", "1"]);
    ok(&e, &["write", &s, "a.txt", "--content", "2"]);
    ok(
        &e,
        &note_model(
            &s,
            "2",
            "m-1",
            ["10", "5", "0.5", "1", "3"],
            "validated",
            &[],
        ),
    );
    let copy = e.root.join("store-copy");
    copy_dir(&e.store, &copy);
    let b1 = fork(&e, &s, "1");
    ok(&e, &["write", &b1, "x.txt", "--content", "left"]);
    ok(
        &e,
        &note_model(
            &b1,
            "1",
            "m-2",
            ["1", "1", "1", "1", "1"],
            "exhausted",
            &["--cost", "0.01", "--currency", "EUR"],
        ),
    );
    let e2 = Env {
        store: copy.clone(),
        ws: e.ws.clone(),
        root: e.root.clone(),
        world: support::env().world,
    };
    // The workspace is shared; the copy's fork rewinds a.txt again (same bytes at step 1).
    let b2 = fork(&e2, &s, "1");
    ok(&e2, &["write", &b2, "y.txt", "--content", "right"]);
    let (w1, w2) = (
        wal(&e, &b1),
        copy.join("sessions").join(&b2).join("wal.jsonl"),
    );
    let r = branch(&["compare", w(&w1), w(&w2)]);
    assert_eq!(
        (
            r.code,
            r.json["relation"].as_str(),
            r.json["divergedAt"].as_i64()
        ),
        (0, Some("siblings"), Some(1))
    );
    assert_eq!(r.json["delta"]["firstDifference"]["position"], 2);
    assert_eq!(
        r.json["left"]["modelDecisions"][0]["llm"]["model"]["value"],
        "m-2"
    );
    assert_eq!(
        r.json["left"]["modelDecisions"][0]["llm"]["model"]["provenance"],
        "host-reported"
    );
    assert_eq!(
        r.json["right"]["modelDecisions"].as_array().unwrap().len(),
        0,
        "the branch does not copy the parent's model decisions"
    );
    // Unrelated.
    let e3 = env();
    let u = ok(&e3, &["new", "--workspace", e3.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    let r = branch(&["compare", w(&w1), w(&wal(&e3, &u))]);
    assert_eq!(
        (
            r.code,
            r.json["relation"].as_str(),
            r.json["comparable"].as_bool()
        ),
        (1, Some("unrelated"), Some(false))
    );
    assert!(r.json.get("delta").is_none() && r.json["why"].as_str().is_some());
    let text = revl_env(&e3, &["compare", w(&w1), w(&wal(&e3, &u))], false, None);
    assert!(text.stdout.starts_with("relation: UNRELATED"));
}

#[test]
fn siblings_forked_at_different_steps_have_null_divergence() {
    let e = env();
    let s = ok(&e, &["new", "--workspace", e.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    for c in ["1", "2", "3"] {
        ok(&e, &["write", &s, "a.txt", "--content", c]);
    }
    let copy = e.root.join("store-copy");
    copy_dir(&e.store, &copy);
    let b1 = fork(&e, &s, "1");
    let e2 = Env {
        store: copy.clone(),
        ws: e.ws.clone(),
        root: e.root.clone(),
        world: support::env().world,
    };
    let b2 = fork(&e2, &s, "2");
    let r = branch(&[
        "compare",
        w(&wal(&e, &b1)),
        w(&copy.join("sessions").join(&b2).join("wal.jsonl")),
    ]);
    assert_eq!(
        (r.json["relation"].as_str(), r.json["divergedAt"].clone()),
        (Some("siblings"), Value::Null)
    );
}

#[test]
fn model_decisions_are_metadata_only_and_invisible_to_partition() {
    let e = env();
    let s = ok(&e, &["new", "--workspace", e.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["write", &s, "a.txt", "--content", "1"]);
    let before = branch(&["branch", "--wal", w(&wal(&e, &s)), "--at", "0"]).json;
    let r = ok(
        &e,
        &note_model(
            &s,
            "1",
            "gpt-x",
            ["100", "20", "1.25", "2", "3"],
            "validated",
            &[],
        ),
    );
    assert_eq!(r["llm"]["tokensIn"]["value"], 100);
    let after = branch(&["branch", "--wal", w(&wal(&e, &s)), "--at", "0"]).json;
    assert_eq!(before, after);
    let bad = revl(
        &e,
        &note_model(&s, "9", "m", ["1", "1", "1", "1", "1"], "validated", &[]),
        None,
    );
    assert_eq!(bad.code, 2);
    let bad = revl(
        &e,
        &note_model(&s, "1", "m", ["1", "1", "1", "1", "1"], "maybe", &[]),
        None,
    );
    assert_eq!(bad.code, 2);
    let md = records(&wal(&e, &s))
        .into_iter()
        .find(|r| r["record"] == "model-decision")
        .unwrap();
    let keys: Vec<&String> = md["llm"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        vec![
            "attemptCeiling",
            "attempts",
            "latencySeconds",
            "model",
            "tokensIn",
            "tokensOut"
        ]
    );
}

#[test]
fn recover_on_a_branch_wal_lands_at_the_fork_point() {
    let (e, _p, b, c) = chain();
    // C is live: recover refuses without --force, then rolls back to C's start.
    let o = revl(&e, &["recover", "--wal", w(&wal(&e, &c))], None);
    assert_eq!(
        (o.code, o.json["error"]["code"].as_str()),
        (1, Some("live"))
    );
    let r = ok(&e, &["recover", "--wal", w(&wal(&e, &c)), "--force"]);
    assert_eq!(r["verdict"], "rolled-back");
    assert_eq!(r["lineage"]["role"], "branch");
    assert_eq!(r["lineage"]["divergedAt"], 1);
    assert!(r["note"].as_str().unwrap().contains("fork point"));
    // The workspace is at the fork point (B's step 1), not empty.
    assert_eq!(std::fs::read_to_string(e.ws.join("b.txt")).unwrap(), "x");
    assert_eq!(std::fs::read_to_string(e.ws.join("a.txt")).unwrap(), "1");
    let r = ok(&e, &["recover", &b]);
    assert_eq!(r["verdict"], "fork-retired");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        let t = to.join(e.file_name());
        if p.is_dir() {
            copy_dir(&p, &t);
        } else {
            std::fs::copy(&p, &t).unwrap();
        }
    }
}

/// `note-model S --step K --model M --tokens-in I --tokens-out O --latency-seconds L
/// --attempts A --attempt-ceiling C --outcome X`, then `extra`; `n` = [I, O, L, A, C].
fn note_model<'a>(
    s: &'a str,
    step: &'a str,
    model: &'a str,
    n: [&'a str; 5],
    outcome: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut a = vec!["note-model", s, "--step", step, "--model", model];
    let flags = [
        "--tokens-in",
        "--tokens-out",
        "--latency-seconds",
        "--attempts",
        "--attempt-ceiling",
    ];
    for (flag, v) in flags.into_iter().zip(n) {
        a.extend([flag, v]);
    }
    a.extend(["--outcome", outcome]);
    a.extend_from_slice(extra);
    a
}
