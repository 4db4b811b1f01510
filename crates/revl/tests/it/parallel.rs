//! Parallel branches (docs/user-guide.md §6) through the binary: siblings from one step,
//! each in its own workspace; the parent untouched and live; held sends committed per
//! session, counted by a loopback sink; concurrent writers; crashes at every fork failpoint
//! in parallel mode; refusals of DIR.

use crate::common::env as support;
use crate::common::manifest::{self, tool};
use crate::common::{assert_snap_eq, snapshot, Snapshot};
use revl::sink::Sink;
use serde_json::Value;
use std::path::{Path, PathBuf};
use support::*;

fn manifest(e: &Env, sink: &Sink) -> PathBuf {
    manifest::write(
        &e.root,
        &[tool("send_email", "deferred")
            .service("mail")
            .method("send")
            .scope(&["mail"])
            .post(&sink.url("/send"))],
    )
}

/// A parent with history: steps 1-3 at k = 3, then more (files, an exec, a held send).
fn parent(e: &Env, sink: &Sink) -> (String, Snapshot) {
    let s = new_session_with(e, &manifest(e, sink));
    ok(e, &["write", &s, "a.txt", "--content", "a1"]);
    ok(e, &["write", &s, "dir/b.txt", "--content", "b1"]);
    ok(e, &["boundary", &s, "--label", "k"]);
    let at_k = snapshot(&e.ws);
    ok(e, &["write", &s, "a.txt", "--content", "a2"]);
    ok(e, &["delete", &s, "dir"]);
    exec_sh(e, &s, "echo built > out.txt; mkdir -p gen; echo g > gen/g");
    let r = ok(
        e,
        &["call", &s, "send_email", "--args", r#"{"who":"parent"}"#],
    );
    assert_eq!(r["queued"], true);
    (s, at_k)
}

/// `revl exec S -- sh -c SCRIPT`, which must succeed.
fn exec_sh(e: &Env, s: &str, script: &str) -> Value {
    ok(e, &["exec", s, "--", "sh", "-c", script])
}

/// Enumerate a fork at `at`: its hash.
fn fork_hash(e: &Env, s: &str, at: &str) -> String {
    ok(e, &["fork", s, "--at", at])["hash"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `fork-confirm --into DIR` of a fresh fork at 3, maybe with a failpoint armed.
fn confirm_into(e: &Env, s: &str, dir: &str, failpoint: Option<&str>) -> Out {
    let h = fork_hash(e, s, "3");
    revl(
        e,
        &["fork-confirm", s, "--hash", &h, "--into", dir],
        failpoint,
    )
}

fn fork_into(e: &Env, s: &str, at: &str, dir: &Path) -> Value {
    let h = fork_hash(e, s, at);
    ok(
        e,
        &[
            "fork-confirm",
            s,
            "--hash",
            &h,
            "--into",
            dir.to_str().unwrap(),
        ],
    )
}

fn commit(e: &Env, s: &str) {
    let plan = ok(e, &["commit", s]);
    let r = ok(
        e,
        &[
            "commit-confirm",
            s,
            "--hash",
            plan["hash"].as_str().unwrap(),
        ],
    );
    assert_eq!(r["committed"], true, "{r}");
}

fn sent_by(sink: &Sink, who: &str) -> usize {
    sink.received()
        .iter()
        .filter(|r| serde_json::from_str::<Value>(&r.body).unwrap()["who"] == who)
        .count()
}

#[test]
fn siblings_from_one_step_each_get_the_step_k_workspace_and_their_own_sends() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, at_k) = parent(&e, &sink);
    let parent_before = snapshot(&e.ws);
    let head = ok(&e, &["timeline", &s])["head"].clone();
    let mut branches = Vec::new();
    for n in 0..3 {
        let dir = e.root.join(format!("sibling{n}"));
        let r = fork_into(&e, &s, "3", &dir);
        assert_eq!(r["forked"], true, "{r}");
        assert_eq!(r["mode"], "parallel");
        assert_eq!(r["into"], dir.to_str().unwrap());
        assert_eq!(r["droppedDeferred"], serde_json::json!([]));
        assert_eq!(
            r["parentKeeps"]["queue"].as_array().unwrap().len(),
            1,
            "{r}"
        );
        assert!(
            ["copy", "reflink", "layers"].contains(&r["clone"].as_str().unwrap()),
            "{r}"
        );
        assert!(r["bytesCopied"].as_u64().is_some());
        assert_eq!(
            r["lineage"]["preserved"]["workspace"],
            dir.to_str().unwrap()
        );
        // The branch's workspace: the parent's at k, byte for byte.
        assert_snap_eq(&at_k, &snapshot(&dir), &format!("sibling {n} at k"));
        // The parent: untouched and live, at its head, its queue kept.
        assert_snap_eq(&parent_before, &snapshot(&e.ws), "the parent's workspace");
        let st = ok(&e, &["status", &s]);
        assert_eq!(st["state"], "live");
        assert_eq!(st["queue"].as_array().unwrap().len(), 1);
        assert_eq!(ok(&e, &["timeline", &s])["head"], head);
        branches.push((r["branch"].as_str().unwrap().to_string(), dir));
    }
    // Each session continues on its own, and each commits only its own held sends.
    for (i, (b, dir)) in branches.iter().enumerate() {
        let st = ok(&e, &["status", b]);
        assert_eq!(
            st["queue"],
            serde_json::json!([]),
            "a branch carries no held send"
        );
        ok(
            &e,
            &["write", b, "mine.txt", "--content", &format!("branch {i}")],
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("mine.txt")).unwrap(),
            format!("branch {i}")
        );
        ok(
            &e,
            &[
                "call",
                b,
                "send_email",
                "--args",
                &format!(r#"{{"who":"b{i}"}}"#),
            ],
        );
    }
    assert!(
        !e.ws.join("mine.txt").exists(),
        "no cross-talk into the parent's workspace"
    );
    assert_eq!(sink.count(), 0, "nothing is sent before a commit");
    commit(&e, &branches[1].0);
    assert_eq!((sent_by(&sink, "b1"), sink.count()), (1, 1));
    commit(&e, &s);
    assert_eq!((sent_by(&sink, "parent"), sink.count()), (1, 2));
    commit(&e, &branches[0].0);
    commit(&e, &branches[2].0);
    assert_eq!(
        (
            sent_by(&sink, "parent"),
            sent_by(&sink, "b0"),
            sent_by(&sink, "b1"),
            sent_by(&sink, "b2")
        ),
        (1, 1, 1, 1)
    );
    // Siblings: the lineage of each names the same parent and k.
    for (b, _) in &branches {
        let st = ok(&e, &["status", b]);
        assert_eq!(
            (st["parent"].as_str(), st["forkedAt"].as_u64()),
            (Some(s.as_str()), Some(3)),
            "{st}"
        );
    }
}

/// A manifest effect's undo runs with DIR as its working directory, never in the parent's
/// workspace: the parent keeps what the step made, the branch does not have it.
#[test]
fn a_manifest_inverse_of_a_parallel_fork_runs_in_the_branch_not_in_the_parent() {
    let e = env();
    let m = manifest::write(
        &e.root,
        &[
            tool("mark", "effect")
                .scope(&["fs"])
                .run(&["sh", "-c", "echo on > marker"])
                .undo("unmark"),
            tool("unmark", "inverse").scope(&["fs"]).run(&[
                "sh",
                "-c",
                "rm marker && echo here > unmarked",
            ]),
        ],
    );
    let s = new_session_with(&e, &m);
    ok(&e, &["boundary", &s, "--label", "k"]);
    ok(&e, &["call", &s, "mark", "--args", "{}"]);
    let parent_before = snapshot(&e.ws);
    assert_eq!(std::fs::read(e.ws.join("marker")).unwrap(), b"on\n");
    let dir = e.root.join("branch");
    let r = fork_into(&e, &s, "1", &dir);
    assert_eq!(r["failed"], serde_json::json!([]), "{r}");
    // The parent is exactly as it was; the branch's copy had the inverse run in it.
    assert_snap_eq(&parent_before, &snapshot(&e.ws), "the parent workspace");
    assert!(
        !dir.join("marker").exists(),
        "the branch still has the step's file"
    );
    assert_eq!(std::fs::read(dir.join("unmarked")).unwrap(), b"here\n");
    assert!(
        !e.ws.join("unmarked").exists(),
        "the inverse ran in the parent"
    );
}

#[test]
fn the_parent_and_three_branches_write_at_once() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, _) = parent(&e, &sink);
    let mut sessions = vec![(s.clone(), e.ws.clone())];
    for n in 0..3 {
        let dir = e.root.join(format!("b{n}"));
        let r = fork_into(&e, &s, "3", &dir);
        sessions.push((r["branch"].as_str().unwrap().to_string(), dir));
    }
    let heads: Vec<u64> = sessions
        .iter()
        .map(|(id, _)| ok(&e, &["timeline", id])["head"].as_u64().unwrap())
        .collect();
    let per = 12;
    std::thread::scope(|sc| {
        for (i, (id, _)) in sessions.iter().enumerate() {
            let e = &e;
            sc.spawn(move || {
                for j in 0..per {
                    let r = ok(
                        e,
                        &[
                            "write",
                            id,
                            &format!("w/{i}-{j}.txt"),
                            "--content",
                            &format!("{i}:{j}"),
                        ],
                    );
                    assert!(r["step"].as_u64().is_some(), "{r}");
                }
            });
        }
    });
    for (i, ((id, dir), h)) in sessions.iter().zip(heads).enumerate() {
        let tl = ok(&e, &["timeline", id]);
        assert_eq!(
            tl["head"].as_u64().unwrap(),
            h + per,
            "no lost step in session {i}"
        );
        let names: Vec<String> = std::fs::read_dir(dir.join("w"))
            .unwrap()
            .map(|d| d.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), per as usize, "{names:?}");
        assert!(
            names.iter().all(|n| n.starts_with(&format!("{i}-"))),
            "cross-talk: {names:?}"
        );
        ok(&e, &["verify", id]);
    }
}

/// A branch's command finishes its parent's interrupted fork first. It reads the parent's
/// WAL for that only where the parent's index entry says a fork is unfinished or no longer
/// describes the WAL (docs/wal-format.md, "The session index"): here the entry was
/// rebuilt by a reader after the crash, so it is fresh and says `forkUnfinished: true`.
#[test]
fn a_branch_finishes_its_parents_interrupted_fork_whatever_the_parents_entry_says() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, at_k) = parent(&e, &sink);
    let dir = e.root.join("branch");
    let o = confirm_into(&e, &s, dir.to_str().unwrap(), Some("fork.after-branch"));
    assert_eq!(
        o.code, -1,
        "the process dies at the failpoint: {}",
        o.stderr
    );
    let entry_of = |id: &str| -> Value {
        let p = e.store.join("sessions").join(id).join("index.json");
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let wal = e.store.join("sessions").join(&s).join("wal.jsonl");
    let last = |wal: &Path| records(wal).last().unwrap()["record"].clone();
    assert_eq!(last(&wal), "fork-begin");
    // `log` reads every session and rebuilds the entries it finds stale, repairing nothing.
    ok(&e, &["log"]);
    let entry = entry_of(&s);
    assert_eq!(entry["forkUnfinished"], true, "{entry}");
    assert_eq!(last(&wal), "fork-begin", "log repaired nothing");
    let branch = std::fs::read_dir(e.store.join("sessions"))
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .find(|id| *id != s)
        .expect("the branch's WAL exists");
    // The branch's command: the parent's fork is completed first.
    assert_eq!(ok(&e, &["status", &branch])["state"], "live");
    assert_eq!(last(&wal), "fork-complete");
    assert_snap_eq(&at_k, &snapshot(&dir), "the branch's workspace");
    ok(&e, &["status", &s]);
    assert_eq!(entry_of(&s)["forkUnfinished"], false);
    assert_eq!(sink.count(), 0, "nothing was sent");
}

#[test]
fn a_crash_at_any_fork_failpoint_in_parallel_mode_leaves_the_parent_whole() {
    for fp in [
        "fork.after-begin",
        "fork.mid-clone",
        "fork.mid-rewind",
        "fork.after-rewind",
        "fork.after-branch",
        "wal.torn-append:1",
        "wal.torn-append:2",
    ] {
        let (e, sink) = (env(), Sink::start().unwrap());
        let (s, at_k) = parent(&e, &sink);
        let parent_before = snapshot(&e.ws);
        let head = ok(&e, &["timeline", &s])["head"].clone();
        let dir = e.root.join("branch");
        let o = confirm_into(&e, &s, dir.to_str().unwrap(), Some(fp));
        assert_eq!(
            o.code, -1,
            "{fp}: the process dies at the failpoint: {}",
            o.stderr
        );
        // The next command on the parent repairs.
        let st = ok(&e, &["status", &s]);
        assert_eq!(st["state"], "live", "{fp}");
        assert_eq!(
            st["queue"].as_array().unwrap().len(),
            1,
            "{fp}: the parent's queue"
        );
        assert_eq!(ok(&e, &["timeline", &s])["head"], head, "{fp}");
        assert_snap_eq(
            &parent_before,
            &snapshot(&e.ws),
            &format!("{fp}: the parent's workspace"),
        );
        let sessions = ok(&e, &["sessions"]);
        let branches: Vec<&Value> = sessions["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["session"] != s.as_str())
            .collect();
        // After the branch's WAL exists (the failpoint after it, or the torn `fork-complete`,
        // the parent's second append), the fork is completed at repair.
        if fp == "fork.after-branch" || fp == "wal.torn-append:2" {
            // The branch existed: the fork is completed, the branch is live at k in DIR.
            assert_eq!(branches.len(), 1, "{fp}: {sessions}");
            assert_eq!(branches[0]["state"], "live");
            assert_snap_eq(
                &at_k,
                &snapshot(&dir),
                &format!("{fp}: the branch's workspace"),
            );
        } else {
            assert!(
                branches.is_empty(),
                "{fp}: no live branch may be left: {sessions}"
            );
            assert!(!dir.exists(), "{fp}: what revl made in DIR is removed");
        }
        // The parent can fork again, in parallel.
        let r = fork_into(&e, &s, "3", &e.root.join("again"));
        assert_eq!(r["forked"], true, "{fp}");
        assert_eq!(sink.count(), 0, "{fp}: nothing was sent");
    }
}

#[test]
fn a_crash_into_an_existing_empty_directory_keeps_the_directory() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, _) = parent(&e, &sink);
    let dir = e.root.join("empty");
    std::fs::create_dir(&dir).unwrap();
    let o = confirm_into(&e, &s, dir.to_str().unwrap(), Some("fork.mid-rewind"));
    assert_eq!(o.code, -1);
    ok(&e, &["status", &s]);
    assert!(dir.is_dir(), "the user's empty directory stays");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "and is empty again"
    );
}

#[test]
fn into_must_be_new_or_empty_and_outside_the_store_and_live_workspaces() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, _) = parent(&e, &sink);
    let full = e.root.join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), "x").unwrap();
    let file = e.root.join("file");
    std::fs::write(&file, "x").unwrap();
    for dir in [
        full.clone(),
        file.clone(),
        e.ws.join("inside"),
        e.root.clone(),
        e.store.join("sub"),
    ] {
        let o = confirm_into(&e, &s, dir.to_str().unwrap(), None);
        assert_eq!(o.code, 2, "{}: {}", dir.display(), o.stderr);
        assert_eq!(o.json["error"]["code"], "path-outside", "{}", dir.display());
        assert_eq!(ok(&e, &["status", &s])["state"], "live");
    }
    assert!(!e.ws.join("inside").exists());
    assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1);
    // A branch's workspace is live too: a second fork may not nest in it.
    let b1 = e.root.join("b1");
    fork_into(&e, &s, "3", &b1);
    let o = confirm_into(&e, &s, b1.join("nested").to_str().unwrap(), None);
    assert_eq!(o.json["error"]["code"], "path-outside");
    // Without --into, fork-confirm is the serial fork, unchanged: the parent freezes.
    let h = fork_hash(&e, &s, "3");
    let r = ok(&e, &["fork-confirm", &s, "--hash", &h]);
    assert!(r.get("mode").is_none(), "{r}");
    assert_eq!(ok(&e, &["status", &s])["state"], "frozen");
}

/// The files under `root` (not directories) with their bytes and modes.
fn files(root: &Path) -> std::collections::BTreeMap<String, (u32, Vec<u8>)> {
    snapshot(root)
        .into_iter()
        .filter(|(_, (k, _, _))| *k != crate::common::Kind::Dir)
        .map(|(p, (_, m, b))| (p, (m, b)))
        .collect()
}

#[test]
fn compare_and_diff_agree_with_an_independent_computation() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, _) = parent(&e, &sink);
    let mut ids = Vec::new();
    for n in 0..3 {
        let r = fork_into(&e, &s, "3", &e.root.join(format!("s{n}")));
        ids.push(r["branch"].as_str().unwrap().to_string());
    }
    // s0 and s1 write the same label with different bytes; s2 repeats s0 exactly, then more.
    ok(&e, &["write", &ids[0], "x.txt", "--content", "one\ntwo\n"]);
    ok(&e, &["write", &ids[1], "x.txt", "--content", "one\nTWO\n"]);
    ok(&e, &["write", &ids[2], "x.txt", "--content", "one\ntwo\n"]);
    ok(
        &e,
        &[
            "exec",
            &ids[2],
            "--",
            "sh",
            "-c",
            "mkdir -p gen && echo g > gen/g && rm a.txt",
        ],
    );
    // The independent computation: positions 1..=3 are the parent's; then each branch's
    // steps by (kind, label, what its detail says it left), from `timeline`.
    let steps = |id: &str| -> Vec<(String, String, Value)> {
        ok(&e, &["timeline", id])["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["kind"] != "hinge")
            .map(|s| {
                let d = &s["detail"];
                let content = serde_json::json!([d.get("after"), d.get("changes"), d.get("path")]);
                (
                    s["kind"].as_str().unwrap().into(),
                    s["label"].as_str().unwrap().into(),
                    content,
                )
            })
            .collect()
    };
    for (a, b) in [(0usize, 1usize), (0, 2), (1, 2)] {
        let (sa, sb) = (steps(&ids[a]), steps(&ids[b]));
        let common = sa.iter().zip(&sb).take_while(|(x, y)| x == y).count();
        let identical = sa == sb;
        let r = ok(&e, &["compare", &ids[a], &ids[b]]);
        assert_eq!(r["relation"], "siblings", "{r}");
        let d = &r["delta"];
        assert_eq!(d["sharedPrefix"], 3 + common as u64, "{a} vs {b}: {d}");
        assert_eq!(d["identical"], identical);
        if !identical {
            assert_eq!(d["firstDifference"]["position"], 4 + common as u64, "{d}");
        }
        // diff: exactly the files whose bytes or modes differ between the two workspaces.
        let (fa, fb) = (
            files(&e.root.join(format!("s{a}"))),
            files(&e.root.join(format!("s{b}"))),
        );
        let mut want: Vec<String> = fa
            .keys()
            .chain(fb.keys())
            .filter(|p| fa.get(*p) != fb.get(*p))
            .cloned()
            .collect();
        want.sort();
        want.dedup();
        let o = revl(&e, &["diff", &ids[a], &ids[b]], None);
        let got: Vec<String> = o.json["paths"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["left"]["kind"] != "dir" && p["right"]["kind"] != "dir")
            .map(|p| p["path"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(got, want, "{a} vs {b}: {}", o.json);
        assert_eq!(o.code, i32::from(!want.is_empty()));
    }
    // The unified diff of the one text difference between s0 and s1.
    let o = revl(&e, &["diff", &ids[0], &ids[1], "x.txt"], None);
    let d = o.json["paths"][0]["diff"].as_str().unwrap();
    assert!(d.contains("-two\n+TWO\n"), "{d}");
    // A side at a step: s2 right after its first write is s0 now.
    let o = revl(&e, &["diff", &ids[0], &format!("{}@1", ids[2])], None);
    assert_eq!(
        (o.code, o.json["paths"].clone()),
        (0, serde_json::json!([])),
        "{}",
        o.json
    );
    // The same session twice is SAME, identical.
    let r = ok(&e, &["compare", &ids[0], &ids[0]]);
    assert_eq!(
        (r["relation"].as_str(), r["delta"]["identical"].as_bool()),
        (Some("same"), Some(true))
    );
}

/// A filesystem image on a loop device, mounted for one test, unmounted and deleted after.
struct LoopFs {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.mnt)
            .status();
    }
}

/// Make and mount a `kind` (xfs, btrfs) filesystem (scripts/test installs xfsprogs and
/// btrfs-progs and runs as root).
fn loop_fs(kind: &str) -> LoopFs {
    let have = |c: &str| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {c}"))
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    // A test that cannot run fails, saying why: a skip would print `ok` in the summary.
    assert!(
        root && have(&format!("mkfs.{kind}")),
        "making a {kind} image needs root and mkfs.{kind}: run scripts/test as root (it installs xfsprogs and btrfs-progs)"
    );
    // On the build disk, not in RAM: the image is sparse, 512 MiB at most.
    let dir = tempfile::Builder::new()
        .prefix("revl-loop-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let img = dir.path().join("fs.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::File::create(&img)
        .unwrap()
        .set_len(512 << 20)
        .unwrap();
    let mkfs: Vec<&str> = match kind {
        "xfs" => vec!["mkfs.xfs", "-q", "-m", "reflink=1"],
        _ => vec!["mkfs.btrfs", "-q"],
    };
    let ok = |args: &[&str]| {
        let o = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let mut a = mkfs.clone();
    a.push(img.to_str().unwrap());
    ok(&a);
    ok(&[
        "mount",
        "-o",
        "loop",
        img.to_str().unwrap(),
        mnt.to_str().unwrap(),
    ]);
    LoopFs { _dir: dir, mnt }
}

/// A parent on `ws` with a 5 MB file, k = 3; forks into `dirs` in parallel; every branch
/// equals the step-k tree; returns the clone kinds.
fn fork_each(e: &Env, sink: &Sink, dirs: &[PathBuf]) -> Vec<String> {
    // A 5 MB file after k: every clone carries it (shared by reflink, snapshot or a lower
    // layer, copied otherwise), then the rewind in DIR removes it.
    let (s, at_k) = big_parent(e, sink);
    let mut kinds = Vec::new();
    let mut trees = Vec::new();
    for d in dirs {
        let r = fork_into(e, &s, "3", d);
        kinds.push(r["clone"].as_str().unwrap().to_string());
        if r["clone"] == "reflink" || r["clone"] == "snapshot" {
            assert_eq!(r["bytesCopied"], 0, "{r}");
        }
        trees.push(snapshot(d));
    }
    for t in &trees {
        assert_snap_eq(&at_k, t, "a clone, rewound to k");
    }
    for t in &trees[1..] {
        assert_snap_eq(&trees[0], t, "a clone against the copy path");
    }
    kinds
}

#[test]
#[ignore = "needs root, mkfs.xfs and mkfs.btrfs: run by scripts/test (README)"]
fn reflink_and_snapshot_clones_equal_the_copy_path() {
    {
        let fs = loop_fs("xfs");
        let (mut e, sink) = (env(), Sink::start().unwrap());
        e.ws = fs.mnt.join("ws");
        // Outside the XFS image (a tmpfs, as root): layers.
        let kinds = fork_each(&e, &sink, &[e.root.join("copy"), fs.mnt.join("reflinked")]);
        assert_eq!(kinds, ["layers", "reflink"]);
    }
    {
        let fs = loop_fs("btrfs");
        let (mut e, sink) = (env(), Sink::start().unwrap());
        // The workspace is a subvolume: one snapshot; a plain directory: reflinks.
        let sub = fs.mnt.join("ws");
        let o = std::process::Command::new("btrfs")
            .args(["subvolume", "create"])
            .arg(&sub)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        e.ws = sub;
        let kinds = fork_each(&e, &sink, &[e.root.join("copy"), fs.mnt.join("snap")]);
        assert_eq!(kinds, ["layers", "snapshot"]);
        let (mut e2, sink2) = (env(), Sink::start().unwrap());
        e2.ws = fs.mnt.join("plain");
        let kinds = fork_each(
            &e2,
            &sink2,
            &[e2.root.join("copy"), fs.mnt.join("reflinked")],
        );
        assert_eq!(kinds, ["layers", "reflink"]);
    }
}

#[test]
fn repair_never_removes_a_directory_the_fork_did_not_make() {
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, _) = parent(&e, &sink);
    let dir = e.root.join("contested");
    // Killed right after fork-begin: DIR was never made.
    let o = confirm_into(&e, &s, dir.to_str().unwrap(), Some("fork.after-begin"));
    assert_eq!(o.code, -1);
    // Someone else makes DIR and puts work in it before the next revl command.
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("precious.txt"), "not revl's").unwrap();
    ok(&e, &["status", &s]);
    assert_eq!(
        std::fs::read_to_string(dir.join("precious.txt")).unwrap(),
        "not revl's",
        "repair removed a directory the fork never made"
    );
}

// ---- Layered workspaces (docs/architecture.md, "Layered workspaces") ----

const NEEDS_LAYERS: &str = "needs root and fuse-overlayfs: run by scripts/test (README)";

/// Fail (never skip) where the layered tests cannot run: root, /dev/fuse, fuse-overlayfs.
fn require_layers() {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    let fuse = std::process::Command::new("sh")
        .args(["-c", "command -v fuse-overlayfs && command -v fusermount3"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        root && fuse,
        "{NEEDS_LAYERS}: scripts/test installs fuse-overlayfs"
    );
}

/// The bytes `root` takes on disk (allocated blocks), mounts under it not crossed.
fn disk(root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(root).unwrap();
    let mut n = m.blocks() * 512;
    if m.is_dir() {
        for e in std::fs::read_dir(root).unwrap().flatten() {
            if e.metadata().is_ok_and(|x| x.dev() == m.dev()) {
                n += disk(&e.path());
            }
        }
    }
    n
}

/// Is something mounted at `dir` (`/proc/self/mountinfo`)?
fn mounted(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = dir.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(want))
}

/// A parent as [`parent`], then a 5 MB file after k: a copy of the workspace costs 5 MB.
fn big_parent(e: &Env, sink: &Sink) -> (String, Snapshot) {
    let (s, at_k) = parent(e, sink);
    exec_sh(e, &s, "head -c 5000000 /dev/zero | tr '\\0' z > big.bin");
    (s, at_k)
}

#[test]
#[ignore = "needs root and fuse-overlayfs: run by scripts/test (README)"]
fn a_further_branch_from_the_same_point_shares_the_lower_layer_and_costs_its_changes() {
    require_layers();
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, at_k) = big_parent(&e, &sink);
    let r1 = fork_into(&e, &s, "3", &e.root.join("b1"));
    assert_eq!(r1["clone"], "layers", "{r1}");
    assert_eq!(r1["layers"]["driver"], "overlayfs", "{r1}");
    assert_eq!(r1["layers"]["sharedLower"], false, "{r1}");
    assert!(r1["bytesCopied"].as_u64().unwrap() >= 5_000_000, "{r1}");
    let before = disk(&e.store);
    let r2 = fork_into(&e, &s, "3", &e.root.join("b2"));
    let grew = disk(&e.store) - before;
    assert_eq!(r2["clone"], "layers", "{r2}");
    assert_eq!(r2["layers"]["sharedLower"], true, "{r2}");
    assert_eq!(r2["layers"]["lower"], r1["layers"]["lower"], "{r2}");
    assert_eq!(r2["bytesCopied"], 0, "{r2}");
    assert!(
        grew < 1_000_000,
        "the second branch copied the workspace: the store grew by {grew} bytes"
    );
    for b in ["b1", "b2"] {
        assert_snap_eq(&at_k, &snapshot(&e.root.join(b)), b);
        // An ordinary directory: any process reads and writes it.
        std::fs::write(e.root.join(b).join("own.txt"), b).unwrap();
    }
    assert_eq!(std::fs::read(e.root.join("b2/own.txt")).unwrap(), b"b2");
    assert!(!e.ws.join("own.txt").exists());
    // A rewind on the branch writes its upper layer: the shared lower is untouched.
    let b1 = r1["branch"].as_str().unwrap();
    ok(&e, &["write", b1, "a.txt", "--content", "branch"]);
    ok(&e, &["step-back", b1, "--to", "0"]);
    assert_eq!(std::fs::read(e.root.join("b1/a.txt")).unwrap(), b"a1");
    assert_snap_eq(
        &at_k,
        &snapshot(&e.root.join("b2"))
            .into_iter()
            .filter(|(p, _)| p != "own.txt")
            .collect(),
        "b2 after b1's rewind",
    );
}

#[test]
#[ignore = "needs root and fuse-overlayfs: run by scripts/test (README)"]
fn a_layered_branch_never_sees_the_parents_later_writes() {
    require_layers();
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, at_k) = parent(&e, &sink);
    let r1 = fork_into(&e, &s, "3", &e.root.join("b1"));
    assert_eq!(r1["clone"], "layers", "{r1}");
    // The parent goes on: a revl write, an exec, and a file changed by hand.
    ok(&e, &["write", &s, "a.txt", "--content", "a3"]);
    exec_sh(&e, &s, "echo later > late.txt; echo x > dir2");
    std::fs::write(e.ws.join("out.txt"), "by hand").unwrap();
    assert_snap_eq(
        &at_k,
        &snapshot(&e.root.join("b1")),
        "b1 after the parent wrote",
    );
    // A fork after the parent changed is a new point: its own lower layer, at step k too.
    let r2 = fork_into(&e, &s, "3", &e.root.join("b2"));
    assert_eq!(r2["layers"]["sharedLower"], false, "{r2}");
    assert_ne!(r2["layers"]["lower"], r1["layers"]["lower"]);
    assert_snap_eq(&at_k, &snapshot(&e.root.join("b2")), "b2");
    assert_snap_eq(&at_k, &snapshot(&e.root.join("b1")), "b1 after b2");
}

#[test]
#[ignore = "needs root and fuse-overlayfs: run by scripts/test (README)"]
fn a_layered_workspace_is_mounted_again_on_attach_after_an_unmount() {
    require_layers();
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, _) = parent(&e, &sink);
    let dir = e.root.join("b1");
    let r = fork_into(&e, &s, "3", &dir);
    let b = r["branch"].as_str().unwrap();
    ok(&e, &["write", b, "mine.txt", "--content", "kept"]);
    let before = snapshot(&dir);
    // A reboot, or someone's umount: DIR is an empty directory.
    let o = std::process::Command::new("umount")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!mounted(&dir));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    // The next command on the branch mounts it again: everything is there.
    ok(&e, &["write", b, "more.txt", "--content", "after"]);
    assert!(mounted(&dir));
    let mut want = before;
    want.extend(snapshot(&dir).into_iter().filter(|(p, _)| p == "more.txt"));
    assert_snap_eq(&want, &snapshot(&dir), "the branch after the remount");
    ok(&e, &["verify", b]);
    ok(&e, &["step-back", b, "--to", "0"]);
    assert!(!dir.join("mine.txt").exists() && !dir.join("more.txt").exists());
}

#[test]
#[ignore = "needs root and fuse-overlayfs: run by scripts/test (README)"]
fn gc_keeps_an_aborted_branchs_layered_workspace_that_holds_hand_edits() {
    require_layers();
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, _) = big_parent(&e, &sink);
    let dir = e.root.join("b1");
    let r = fork_into(&e, &s, "3", &dir);
    assert_eq!(r["clone"], "layers", "{r}");
    let b = r["branch"].as_str().unwrap();
    ok(&e, &["abort", b]);
    // Bytes revl did not write, in the aborted branch's DIR (its upper layer).
    std::fs::write(dir.join("a.txt"), "by hand").unwrap();
    let g = ok(&e, &["gc", "--apply"]);
    assert_eq!(g["layers"]["workspaces"], serde_json::json!([]), "{g}");
    let kept = g["layers"]["kept"].to_string();
    assert!(kept.contains(dir.to_str().unwrap()), "{g}");
    assert!(mounted(&dir), "{g}");
    assert_eq!(std::fs::read(dir.join("a.txt")).unwrap(), b"by hand");
    // What the user asks for by name still goes.
    ok(&e, &["abort", b, "--remove"]);
    assert!(!dir.exists() && !mounted(&dir));
}

#[test]
#[ignore = "needs root and fuse-overlayfs: run by scripts/test (README)"]
fn abort_remove_and_gc_take_layered_workspaces_down_and_collect_the_lower_layer() {
    require_layers();
    let (e, sink) = (env(), Sink::start().unwrap());
    let (s, _) = big_parent(&e, &sink);
    let ids: Vec<String> = (1..=3)
        .map(|n| {
            let r = fork_into(&e, &s, "3", &e.root.join(format!("b{n}")));
            assert_eq!(r["clone"], "layers", "{r}");
            r["branch"].as_str().unwrap().to_string()
        })
        .collect();
    let layers = e.store.join("layers");
    let count = |d: &str| std::fs::read_dir(layers.join(d)).map_or(0, |r| r.count());
    assert_eq!((count("lower"), count("branch")), (1, 3));
    // The parent's workspace is the user's: --remove is refused, nothing is aborted.
    let o = revl(&e, &["abort", &s, "--remove"], None);
    assert_eq!(
        (o.code, o.json["error"]["code"].as_str()),
        (2, Some("bad-args")),
        "{}",
        o.stderr
    );
    assert_eq!(ok(&e, &["status", &s])["state"], "live");
    // abort --remove: unmounted, DIR and the upper layer gone, the lower kept (in use).
    let r = ok(&e, &["abort", &ids[0], "--remove"]);
    assert_eq!(
        r["removed"]["dir"],
        e.root.join("b1").to_str().unwrap(),
        "{r}"
    );
    assert_eq!(r["removed"]["lowersCollected"], serde_json::json!([]));
    assert!(!e.root.join("b1").exists() && !mounted(&e.root.join("b1")));
    assert_eq!((count("lower"), count("branch")), (1, 2));
    // An aborted branch's layers: gc takes them down (a dry run first changes nothing).
    ok(&e, &["abort", &ids[1]]);
    let dry = ok(&e, &["gc"]);
    assert_eq!(
        dry["layers"]["workspaces"],
        serde_json::json!([e.root.join("b2").to_str().unwrap()]),
        "{dry}"
    );
    assert!(mounted(&e.root.join("b2")));
    let g = ok(&e, &["gc", "--apply"]);
    assert_eq!(g["layers"]["applied"], true, "{g}");
    assert!(!e.root.join("b2").exists() && !mounted(&e.root.join("b2")));
    assert_eq!((count("lower"), count("branch")), (1, 1));
    // The last branch of the point goes: its lower layer is collected.
    // The layers' bytes (the aborted session's WAL may grow beside them).
    let before = disk(&e.store.join("layers"));
    let r = ok(&e, &["abort", &ids[2], "--remove"]);
    assert_eq!(
        r["removed"]["lowersCollected"].as_array().unwrap().len(),
        1,
        "{r}"
    );
    assert_eq!((count("lower"), count("branch")), (0, 0));
    assert!(
        before - disk(&e.store.join("layers")) >= 5_000_000,
        "the lower layer's bytes were freed"
    );
    assert!(!e.root.join("b3").exists());
    // A crash right after the mount: repair takes the layers down, nothing is left.
    let o = confirm_into(
        &e,
        &s,
        e.root.join("b4").to_str().unwrap(),
        Some("fork.mid-clone"),
    );
    assert_eq!(o.code, -1);
    ok(&e, &["status", &s]);
    assert!(!e.root.join("b4").exists() && !mounted(&e.root.join("b4")));
    assert_eq!((count("lower"), count("branch")), (0, 0));
}

/// `revl --store STORE --json ARGS` as the unprivileged user nobody, with `path` as PATH.
fn as_nobody(e: &Env, path: &str, args: &[&str]) -> Value {
    // setpriv found on this PATH (the child's PATH may not have it).
    let setpriv = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("setpriv"))
        .find(|p| p.exists())
        .expect("setpriv (util-linux)");
    let o = std::process::Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(crate::common::bin())
        .args(["--store", e.store.to_str().unwrap(), "--json"])
        .args(args)
        .env_clear()
        .env("PATH", path)
        .env("HOME", &e.root)
        .current_dir(&e.root)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert!(
        o.status.success(),
        "{args:?}: {v} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    v
}

#[test]
#[ignore = "needs root and fuse-overlayfs: run by scripts/test (README)"]
fn an_unprivileged_user_gets_fuse_overlayfs_layers_or_a_copy_that_says_why() {
    require_layers();
    let e = env();
    std::fs::create_dir_all(&e.ws).unwrap();
    std::fs::write(e.ws.join("a.txt"), "a0").unwrap();
    std::fs::write(e.ws.join("big.bin"), vec![b'z'; 2_000_000]).unwrap();
    std::fs::create_dir_all(e.ws.join("lib")).unwrap();
    std::fs::write(e.ws.join("lib/x"), "x").unwrap();
    let o = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&e.root)
        .output()
        .unwrap();
    assert!(o.status.success());
    let path = std::env::var("PATH").unwrap();
    let nobody = |args: &[&str]| as_nobody(&e, &path, args);
    let s = nobody(&["new", "--workspace", e.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    nobody(&["write", &s, "a.txt", "--content", "a1"]);
    nobody(&["boundary", &s, "--label", "k"]);
    nobody(&["write", &s, "a.txt", "--content", "a2"]);
    // A tree made after step k, in the frozen lower layer of every branch: the branch's
    // rewind must remove it, which fuse-overlayfs cannot do by renaming it aside (EXDEV).
    nobody(&["write", &s, "dist/sub/f", "--content", "x"]);
    let fork = |dir: &str, path: &str| {
        let h = as_nobody(&e, path, &["fork", &s, "--at", "2"])["hash"]
            .as_str()
            .unwrap()
            .to_string();
        let d = e.root.join(dir);
        as_nobody(
            &e,
            path,
            &[
                "fork-confirm",
                &s,
                "--hash",
                &h,
                "--into",
                d.to_str().unwrap(),
            ],
        )
    };
    let r1 = fork("b1", &path);
    assert_eq!(
        (r1["clone"].as_str(), r1["layers"]["driver"].as_str()),
        (Some("layers"), Some("fuse-overlayfs")),
        "{r1}"
    );
    assert_eq!(r1["failed"], serde_json::json!([]), "{r1}");
    let r2 = fork("b2", &path);
    assert_eq!(
        (
            r2["layers"]["sharedLower"].as_bool(),
            r2["bytesCopied"].as_u64()
        ),
        (Some(true), Some(0)),
        "{r2}"
    );
    // Any process of the user reads DIR; the branch is at step k: the tree made after k
    // is gone from both branches.
    let as_user = |cmd: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(cmd)
            .output()
            .unwrap()
    };
    let cat = as_user(&["cat", e.root.join("b2/a.txt").to_str().unwrap()]);
    assert_eq!(cat.stdout, b"a1");
    for b in ["b1", "b2"] {
        let ls = as_user(&["ls", "-A", e.root.join(b).to_str().unwrap()]);
        assert_eq!(
            String::from_utf8_lossy(&ls.stdout),
            "a.txt\nbig.bin\nlib\n",
            "{b}: {}",
            String::from_utf8_lossy(&ls.stderr)
        );
    }
    let b2 = r2["branch"].as_str().unwrap();
    nobody(&["write", b2, "x.txt", "--content", "x"]);
    // fuse-overlayfs cannot rename a directory of its lower layer: refused in one line,
    // nothing changed.
    let o = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(crate::common::bin())
        .args([
            "--store",
            e.store.to_str().unwrap(),
            "rename",
            b2,
            "lib",
            "lib2",
        ])
        .env_clear()
        .env("PATH", &path)
        .env("HOME", &e.root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("lib cannot be renamed here")
            && err.lines().count() <= 3,
        "{err}"
    );
    let ls = as_user(&["ls", "-A", e.root.join("b2").to_str().unwrap()]);
    assert_eq!(
        String::from_utf8_lossy(&ls.stdout),
        "a.txt\nbig.bin\nlib\nx.txt\n"
    );
    assert_eq!(nobody(&["verify", b2])["drift"], serde_json::json!([]));
    let r = nobody(&["abort", b2, "--remove"]);
    assert_eq!(r["removed"]["clone"], "layers", "{r}");
    assert!(!e.root.join("b2").exists() && !mounted(&e.root.join("b2")));
    // Where neither overlay can be mounted (no right to mount, no fuse-overlayfs): a copy,
    // and the report says why.
    let r3 = fork("b3", "/nonexistent");
    assert_eq!(r3["clone"], "copy", "{r3}");
    assert!(
        r3["fallback"].as_str().unwrap().contains("fuse-overlayfs"),
        "{r3}"
    );
    assert_eq!(std::fs::read(e.root.join("b3/a.txt")).unwrap(), b"a1");
    nobody(&["abort", r1["branch"].as_str().unwrap(), "--remove"]);
    assert!(!mounted(&e.root.join("b1")));
}

/// A layered DIR's scan takes the digests of its lower layer's files from that layer's
/// stat index (docs/architecture.md, "Drift scans: digests known by stat"), which the
/// freeze fills as it copies: a further branch from the same point reads none of them
/// again. A lower file changed under the store (same size, mtime put back) has a new ctime,
/// so the next branch reads it, finds it off its step-k image, and puts it back.
#[test]
#[ignore = "needs root and fuse-overlayfs: run by scripts/test (README)"]
fn a_changed_lower_layer_file_is_read_again_and_the_next_branch_is_at_step_k() {
    use std::os::unix::fs::MetadataExt;
    require_layers();
    let (e, sink) = (env(), Sink::start().unwrap());
    let s = new_session_with(&e, &manifest(&e, &sink));
    ok(&e, &["write", &s, "x.txt", "--content", "x1"]);
    exec_sh(&e, &s, "mkdir v && echo v1 > v/one && echo v2 > v/two");
    let k = ok(&e, &["status", &s])["head"]
        .as_i64()
        .unwrap()
        .to_string();
    let at_k = snapshot(&e.ws);
    ok(&e, &["write", &s, "x.txt", "--content", "later"]);
    let r1 = fork_into(&e, &s, &k, &e.root.join("b1"));
    assert_eq!(r1["clone"], "layers", "{r1}");
    let lower = e
        .store
        .join("layers/lower")
        .join(r1["layers"]["lower"].as_str().unwrap());
    // The freeze keeps the digest of every file it copied with the layer at once (a frozen
    // layer's index: docs/architecture.md), so the next branch, made right away, reads none.
    let index = std::fs::read(lower.join("stat-index")).expect("the freeze kept no digests");
    assert!(index.starts_with(b"revl-stat-index frozen 1\n"));
    let r2 = fork_into(&e, &s, &k, &e.root.join("b2"));
    assert_eq!(r2["layers"]["sharedLower"], true, "{r2}");
    let f = lower.join("tree/v/two");
    let m = std::fs::symlink_metadata(&f).unwrap();
    std::fs::write(&f, "V2\n").unwrap();
    let fh = std::fs::File::options().write(true).open(&f).unwrap();
    fh.set_times(std::fs::FileTimes::new().set_modified(m.modified().unwrap()))
        .unwrap();
    let m2 = std::fs::symlink_metadata(&f).unwrap();
    assert_eq!(
        (m2.size(), m2.mtime(), m2.mtime_nsec()),
        (m.size(), m.mtime(), m.mtime_nsec())
    );
    let r3 = fork_into(&e, &s, &k, &e.root.join("b3"));
    assert_eq!(r3["layers"]["sharedLower"], true, "{r3}");
    assert_snap_eq(&at_k, &snapshot(&e.root.join("b3")), "b3");
}
