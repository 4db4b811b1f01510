//! Drift (docs/user-guide.md §3) through the binary: every way of changing the workspace by
//! hand, under every kind of rewind. Nothing is lost (each drifted file's bytes come back
//! from `revl blob`), and the workspace ends at step k, byte for byte.

use crate::common::env::*;
use crate::common::{assert_snap_eq, put, snapshot, Snapshot};
use serde_json::Value;
use std::path::Path;

/// How the workspace was changed by hand after revl's last step, and the bytes that must
/// survive the rewind (path, content) — none for a deletion.
#[derive(Debug, Clone, Copy)]
enum Hand {
    /// top.txt rewritten.
    Edit,
    /// d/hand.txt added inside d, a directory revl created.
    AddInRevlDir,
    /// top.txt replaced by a directory holding a file.
    FileToDir,
    /// top.txt chmodded to 0600.
    Chmod,
    /// top.txt deleted.
    Delete,
}

impl Hand {
    fn apply(self, e: &Env) -> Vec<(&'static str, Vec<u8>, u32)> {
        let top = e.ws.join("top.txt");
        match self {
            Hand::Edit => {
                put(&top, b"edited by hand", 0o644);
                vec![("top.txt", b"edited by hand".to_vec(), 0o644)]
            }
            Hand::AddInRevlDir => {
                put(&e.ws.join("d/hand.txt"), b"added by hand", 0o640);
                vec![("d/hand.txt", b"added by hand".to_vec(), 0o640)]
            }
            Hand::FileToDir => {
                std::fs::remove_file(&top).unwrap();
                put(&top.join("inner.txt"), b"inside a hand-made dir", 0o644);
                vec![(
                    "top.txt/inner.txt",
                    b"inside a hand-made dir".to_vec(),
                    0o644,
                )]
            }
            Hand::Chmod => {
                crate::common::chmod(&top, 0o600);
                vec![("top.txt", b"T2".to_vec(), 0o600)]
            }
            Hand::Delete => {
                std::fs::remove_file(&top).unwrap();
                vec![]
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Rewind {
    Fork,
    Scoped,
    Compensating,
    Abort,
    RecoverForce,
    /// A scoped step-back killed after its first inverse; the next command repairs it.
    RepairAfterCrash,
}

/// Steps 1-4 write d/a.txt and top.txt twice; k = 0 (the hinge): at k the workspace holds
/// only what was there before.
fn history(e: &Env) -> (String, Snapshot) {
    std::fs::create_dir_all(&e.ws).unwrap();
    put(&e.ws.join("before.txt"), b"not revl's", 0o644);
    let ws = e.ws.to_str().unwrap();
    let s = ok(e, &["new", "--workspace", ws])["session"]
        .as_str()
        .unwrap()
        .to_string();
    let at_k = snapshot(&e.ws);
    for (p, c) in [
        ("d/a.txt", "A1"),
        ("top.txt", "T1"),
        ("d/a.txt", "A2"),
        ("top.txt", "T2"),
    ] {
        ok(e, &["write", &s, p, "--content", c]);
    }
    (s, at_k)
}

/// Run the rewind to 0; the report's `preserved` list when the rewind reported one.
fn rewind(e: &Env, s: &str, how: Rewind) -> Option<Value> {
    let report = match how {
        Rewind::Fork => {
            let f = ok(e, &["fork", s, "--at", "0"]);
            ok(
                e,
                &["fork-confirm", s, "--hash", f["hash"].as_str().unwrap()],
            )
        }
        Rewind::Scoped => ok(e, &["step-back", s, "--to", "0"]),
        Rewind::Compensating => ok(e, &["step-back", s, "--to", "0", "--compensating"]),
        Rewind::Abort => ok(e, &["abort", s]),
        Rewind::RecoverForce => ok(e, &["recover", s, "--force"])["rolledBack"].clone(),
        Rewind::RepairAfterCrash => {
            let o = revl(
                e,
                &["step-back", s, "--to", "0"],
                Some("step-back.mid-replay:1"),
            );
            assert_ne!(o.code, 0, "the step-back was not killed");
            ok(e, &["status", s]);
            return None;
        }
    };
    Some(report["preserved"].clone())
}

/// The `preserved` records of a WAL: (path, digest, mode).
fn preserved_records(wal: &Path) -> Vec<(String, String, String)> {
    records(wal)
        .into_iter()
        .filter(|r| r["record"] == "preserved")
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_string(),
                r["digest"].as_str().unwrap().to_string(),
                r["mode"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn case(hand: Hand, how: Rewind) {
    let e = env();
    let (s, at_k) = history(&e);
    let survivors = hand.apply(&e);
    // verify sees it first, and says so with its exit code.
    let v = revl(&e, &["verify", &s], None);
    assert_eq!(
        v.code, 1,
        "{hand:?}: verify did not report the drift: {}",
        v.json
    );
    assert!(!v.json["drift"].as_array().unwrap().is_empty());
    let reported = rewind(&e, &s, how);
    let ctx = format!("{hand:?} under {how:?}");
    // The workspace is at step k, byte for byte and mode for mode.
    assert_snap_eq(&at_k, &snapshot(&e.ws), &ctx);
    // Nothing is lost: every drifted file's bytes come back from the blob store.
    let wal = e.store.join("sessions").join(&s).join("wal.jsonl");
    let kept = preserved_records(&wal);
    for (path, bytes, mode) in &survivors {
        let (_, digest, m) = kept
            .iter()
            .find(|(p, _, _)| p == path)
            .unwrap_or_else(|| panic!("{ctx}: {path} was not preserved: {kept:?}"));
        assert_eq!(m, &format!("{mode:04o}"), "{ctx}: mode of {path}");
        let out = e.root.join("blob.out");
        ok(&e, &["blob", digest, "--out", out.to_str().unwrap()]);
        assert_eq!(
            &std::fs::read(&out).unwrap(),
            bytes,
            "{ctx}: bytes of {path}"
        );
    }
    // The report lists exactly what was preserved (a crash leaves only the WAL records).
    if let Some(list) = reported {
        let listed: Vec<&str> = list
            .as_array()
            .unwrap_or_else(|| panic!("{ctx}: no preserved list"))
            .iter()
            .map(|p| p["path"].as_str().unwrap())
            .collect();
        let want: Vec<&str> = survivors.iter().map(|s| s.0).collect();
        assert_eq!(listed, want, "{ctx}: preserved");
    }
    // Without drift nothing is preserved: a deletion left no bytes to keep.
    if survivors.is_empty() {
        assert!(kept.is_empty(), "{ctx}: {kept:?}");
    }
}

#[test]
fn every_hand_change_under_every_rewind_loses_nothing() {
    for hand in [
        Hand::Edit,
        Hand::AddInRevlDir,
        Hand::FileToDir,
        Hand::Chmod,
        Hand::Delete,
    ] {
        for how in [
            Rewind::Fork,
            Rewind::Scoped,
            Rewind::Compensating,
            Rewind::Abort,
            Rewind::RecoverForce,
            Rewind::RepairAfterCrash,
        ] {
            case(hand, how);
        }
    }
}

#[test]
fn a_rewind_without_drift_preserves_nothing_and_new_drift_makes_the_fork_hash_stale() {
    let e = env();
    let (s, at_k) = history(&e);
    assert_eq!(revl(&e, &["verify", &s], None).code, 0);
    let f = ok(&e, &["fork", &s, "--at", "0"]);
    assert_eq!(f["drift"], serde_json::json!([]));
    // A hand edit after the enumeration: the confirm refuses and changes nothing.
    let before = snapshot(&e.ws);
    put(&e.ws.join("top.txt"), b"late edit", 0o644);
    let o = revl(
        &e,
        &["fork-confirm", &s, "--hash", f["hash"].as_str().unwrap()],
        None,
    );
    assert_eq!(o.code, 1, "{}", o.json);
    assert_eq!(o.json["refused"], true);
    assert_eq!(o.json["drift"][0]["path"], "top.txt", "{}", o.json);
    let mut want = before;
    want.get_mut("top.txt").unwrap().2 = b"late edit".to_vec();
    assert_snap_eq(
        &want,
        &snapshot(&e.ws),
        "a stale confirm changed the workspace",
    );
    // Enumerated again, the drift is in the report and the hash; the confirm preserves it.
    let f = ok(&e, &["fork", &s, "--at", "0"]);
    assert_eq!(f["drift"][0]["path"], "top.txt");
    let done = ok(
        &e,
        &["fork-confirm", &s, "--hash", f["hash"].as_str().unwrap()],
    );
    assert_eq!(done["preserved"][0]["path"], "top.txt");
    assert_snap_eq(&at_k, &snapshot(&e.ws), "after the fork");
    // A clean rewind in the branch preserves nothing.
    let b = done["branch"].as_str().unwrap().to_string();
    ok(&e, &["write", &b, "n.txt", "--content", "x"]);
    let sb = ok(&e, &["step-back", &b, "--to", "0"]);
    assert_eq!(sb["preserved"], serde_json::json!([]));
}

#[test]
fn blob_refuses_what_it_does_not_hold() {
    let e = env();
    history(&e);
    let o = revl(&e, &["blob", &"0".repeat(64)], None);
    assert_eq!(
        (o.code, o.json["error"]["code"].as_str()),
        (1, Some("unknown-blob"))
    );
    let o = revl(&e, &["blob", "not-a-digest"], None);
    assert_eq!(
        (o.code, o.json["error"]["code"].as_str()),
        (2, Some("bad-args"))
    );
}

mod union {
    //! Property (docs/architecture.md, "Drift: what revl expects, exactly"): random
    //! histories of witnessed changes interleaved with random hand changes, then a rewind
    //! to a random k: the union of the workspace and the blob store holds every byte that
    //! existed in the workspace before the rewind.
    use crate::common::{put, tempdir};
    use proptest::prelude::*;
    use proptest::sample::Index;
    use revl_core::{Failpoints, FileOp, StepBackMode, Store};
    use std::collections::BTreeSet;
    use std::path::Path;

    const PATHS: &[&str] = &["a", "d/b", "d/e/c", "n/m/f", "top"];

    #[derive(Debug, Clone)]
    enum Op {
        /// revl writes a file.
        Write(usize, u8),
        /// revl deletes a path.
        Delete(usize),
        /// revl makes a directory.
        Mkdir(usize),
        /// A hand edits or creates a file (inside revl's directories too).
        HandWrite(usize, u8),
        /// A hand adds a file next to a witnessed path.
        HandAdd(usize, u8),
        /// A hand chmods a path.
        HandChmod(usize),
        /// A hand deletes a path.
        HandDelete(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let p = 0..PATHS.len();
        prop_oneof![
            3 => (p.clone(), any::<u8>()).prop_map(|(i, b)| Op::Write(i, b)),
            1 => p.clone().prop_map(Op::Delete),
            1 => p.clone().prop_map(Op::Mkdir),
            2 => (p.clone(), any::<u8>()).prop_map(|(i, b)| Op::HandWrite(i, b)),
            2 => (p.clone(), any::<u8>()).prop_map(|(i, b)| Op::HandAdd(i, b)),
            1 => p.clone().prop_map(Op::HandChmod),
            1 => p.prop_map(Op::HandDelete),
        ]
    }

    /// Every regular file's bytes under `dir` (a content set: where it lies does not matter).
    fn contents(dir: &Path, out: &mut BTreeSet<Vec<u8>>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                contents(&p, out);
            } else if m.is_file() {
                out.insert(std::fs::read(&p).unwrap());
            }
        }
    }

    fn bytes(tag: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| tag.wrapping_add(i as u8)).collect()
    }

    fn run(ops: &[Op], k: &Index, compensating: bool) -> Result<(), TestCaseError> {
        let dir = tempdir();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let ws = std::fs::canonicalize(&ws).unwrap();
        let store_dir = dir.path().join("store");
        let store = Store::open(&store_dir, Failpoints::none()).unwrap();
        let mut s = store.new_session(&ws, None).unwrap();
        let mut live: Vec<i64> = vec![-1, 0];
        for (n, op) in ops.iter().enumerate() {
            let res = match op {
                Op::Write(i, b) => Some(s.file_effect(FileOp::Write {
                    path: PATHS[*i].into(),
                    // Sizes across the inline limit: some preimages are blobs.
                    content: bytes(*b, if n % 3 == 0 { 5000 } else { 3 + n }),
                })),
                Op::Delete(i) => Some(s.file_effect(FileOp::Delete {
                    path: PATHS[*i].into(),
                })),
                Op::Mkdir(i) => Some(s.file_effect(FileOp::Mkdir {
                    path: PATHS[*i].into(),
                })),
                Op::HandWrite(i, b) => {
                    let p = ws.join(PATHS[*i]);
                    if !p.is_dir() && p.parent().is_some_and(|d| !d.exists() || d.is_dir()) {
                        put(&p, &bytes(*b, 7 + n), 0o644);
                    }
                    None
                }
                Op::HandAdd(i, b) => {
                    let p = ws.join(PATHS[*i]);
                    if let Some(d) = p.parent().filter(|d| d.is_dir()) {
                        put(&d.join(format!("hand-{n}")), &bytes(*b, 11 + n), 0o600);
                    }
                    None
                }
                Op::HandChmod(i) => {
                    let p = ws.join(PATHS[*i]);
                    if p.is_file() {
                        crate::common::chmod(&p, 0o640);
                    }
                    None
                }
                Op::HandDelete(i) => {
                    let p = ws.join(PATHS[*i]);
                    if p.is_file() {
                        std::fs::remove_file(&p).unwrap();
                    }
                    None
                }
            };
            // revl refuses what the tree makes impossible (exit 2); that is not a failure.
            if let Some(Ok(r)) = res {
                live.push(r.step as i64);
            }
        }
        let mut before = BTreeSet::new();
        contents(&ws, &mut before);
        let k = live[k.index(live.len())];
        let mode = if compensating {
            StepBackMode::Compensating { force: false }
        } else {
            StepBackMode::Scoped
        };
        let r = s
            .step_back(k, mode)
            .map_err(|e| TestCaseError::fail(format!("step-back --to {k}: {}", e.message)))?;
        prop_assert!(r.failed.is_empty(), "{:?}", r.failed);
        let mut after = BTreeSet::new();
        contents(&ws, &mut after);
        contents(&store_dir.join("blobs"), &mut after);
        let lost: Vec<&Vec<u8>> = before.difference(&after).collect();
        prop_assert!(
            lost.is_empty(),
            "{} file content(s) existed before the rewind to {k} and exist nowhere after it",
            lost.len()
        );
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
        #[test]
        fn the_workspace_and_the_blob_store_keep_every_byte(
            ops in prop::collection::vec(op(), 1..24),
            k in any::<Index>(),
            compensating in any::<bool>(),
        ) {
            run(&ops, &k, compensating)?;
        }
    }
}

#[test]
fn a_crash_while_a_tree_is_removed_leaves_no_trash_behind() {
    let e = env();
    let (s, _) = history(&e);
    let before = snapshot(&e.ws);
    // Killed after the tree was moved to its trash name, before it was removed.
    let o = revl(&e, &["delete", &s, "d"], Some("effect.mid-remove"));
    assert_ne!(o.code, 0, "the delete was not killed");
    let st = ok(&e, &["status", &s]);
    assert_eq!(st["head"], 5, "the delete is rolled forward: {st}");
    let mut want = before;
    want.retain(|p, _| p != "d" && !p.starts_with("d/"));
    assert_snap_eq(&want, &snapshot(&e.ws), "no trash left after the repair");
}

/// `read --at K` for every K and every path against the workspace recorded right after each
/// step ran (an independent replay of the history), in a parent frozen by a fork and in its
/// branch: rewound content stays readable.
#[test]
fn read_at_every_step_agrees_with_the_recorded_history() {
    use crate::common::Kind;
    use std::collections::BTreeMap;
    let e = env();
    std::fs::create_dir_all(&e.ws).unwrap();
    put(&e.ws.join("seed.txt"), b"there before revl", 0o644);
    let s = ok(&e, &["new", "--workspace", e.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    let big: String = (0..6000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let from = e.root.join("big.in");
    std::fs::write(&from, &big).unwrap();
    // (K -> the tree right after step K ran), per session.
    let mut parent: BTreeMap<i64, Snapshot> = BTreeMap::new();
    parent.insert(-1, snapshot(&e.ws));
    parent.insert(0, snapshot(&e.ws));
    let step = |args: &[&str], at: &mut BTreeMap<i64, Snapshot>| {
        let r = ok(&e, args);
        at.insert(r["step"].as_i64().unwrap(), snapshot(&e.ws));
    };
    step(&["write", &s, "a.txt", "--content", "one"], &mut parent);
    step(
        &["write", &s, "d/b.txt", "--from", from.to_str().unwrap()],
        &mut parent,
    );
    step(&["write", &s, "a.txt", "--content", "two"], &mut parent);
    step(&["chmod", &s, "a.txt", "600"], &mut parent);
    step(&["rename", &s, "d/b.txt", "d/c.txt"], &mut parent);
    step(
        &["write", &s, "seed.txt", "--content", "revl's seed"],
        &mut parent,
    );
    step(&["delete", &s, "d"], &mut parent);
    ok(&e, &["step-back", &s, "--to", "4"]); // steps 5-7 rewound
    step(&["write", &s, "a.txt", "--content", "three"], &mut parent);
    step(&["mkdir", &s, "m"], &mut parent);
    step(&["write", &s, "m/n.txt", "--content", "in m"], &mut parent);
    let f = ok(&e, &["fork", &s, "--at", "9"]);
    let b = ok(
        &e,
        &["fork-confirm", &s, "--hash", f["hash"].as_str().unwrap()],
    )["branch"]
        .as_str()
        .unwrap()
        .to_string();
    let mut branch: BTreeMap<i64, Snapshot> = BTreeMap::new();
    branch.insert(-1, snapshot(&e.ws));
    branch.insert(0, snapshot(&e.ws));
    step(&["write", &b, "a.txt", "--content", "branch"], &mut branch);
    step(&["delete", &b, "m"], &mut branch);

    for (sid, history) in [(&s, &parent), (&b, &branch)] {
        let paths: std::collections::BTreeSet<&String> =
            history.values().flat_map(|snap| snap.keys()).collect();
        for (k, snap) in history {
            for p in &paths {
                let ctx = format!("read {p} --at {k} in {sid}");
                let o = revl(&e, &["read", sid, p, "--at", &k.to_string()], None);
                match snap.get(*p) {
                    Some((Kind::File, mode, bytes)) => {
                        assert_eq!(o.code, 0, "{ctx}: {}", o.json);
                        let got = match o.json["content"].as_str() {
                            Some(c) => c.as_bytes().to_vec(),
                            None => revl_core::workspace::unb64(
                                o.json["contentBase64"].as_str().unwrap(),
                            )
                            .unwrap(),
                        };
                        assert_eq!(&got, bytes, "{ctx}");
                        assert_eq!(o.json["mode"], format!("{mode:04o}"), "{ctx}");
                    }
                    Some(_) => assert_eq!(o.code, 2, "{ctx}: a directory is not read"),
                    None => assert_eq!(
                        (o.code, o.json["error"]["code"].as_str()),
                        (1, Some("absent")),
                        "{ctx}: {}",
                        o.json
                    ),
                }
            }
        }
    }
}

/// `revl gc`: a dry run removes nothing; `--apply` removes what no live or frozen session
/// reaches (an aborted session's blobs, an orphan), and the live session still rewinds and
/// reads every step's content.
#[test]
fn gc_frees_only_what_no_live_or_frozen_session_reaches() {
    let e = env();
    let blob_files = |e: &Env| -> usize {
        let mut n = 0;
        for d in std::fs::read_dir(e.store.join("blobs")).unwrap().flatten() {
            if d.path().is_dir() {
                n += std::fs::read_dir(d.path()).unwrap().count();
            }
        }
        n
    };
    let big = |tag: char| -> String { std::iter::repeat_n(tag, 6000).collect() };
    // A live session whose history needs blobs: large preimages, a tree, kept content.
    let (s, _) = history(&e);
    ok(&e, &["write", &s, "big.txt", "--content", &big('x')]);
    ok(&e, &["write", &s, "big.txt", "--content", &big('y')]);
    ok(&e, &["delete", &s, "d"]);
    ok(&e, &["step-back", &s, "--to", "6"]); // the tree comes back
    ok(&e, &["step-back", &s, "--to", "5"]); // big y is replaced: only its kept blob holds it
                                             // An aborted session on another workspace, with blobs of its own.
    let ws2 = e.root.join("ws2");
    let a = ok(&e, &["new", "--workspace", ws2.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["write", &a, "z.txt", "--content", &big('z')]);
    ok(&e, &["write", &a, "z.txt", "--content", &big('w')]);
    ok(&e, &["abort", &a]);
    // An orphan: a blob nothing names (as a crash before its intent leaves).
    let orphan = revl_core::util::blake3_hex(b"orphan");
    put(
        &e.store.join("blobs").join(&orphan[..2]).join(&orphan[2..]),
        b"orphan",
        0o644,
    );
    let n = blob_files(&e);
    let dry = ok(&e, &["gc"]);
    assert_eq!(dry["applied"], false);
    assert!(dry["unreachable"].as_u64().unwrap() >= 2, "{dry}");
    assert_eq!(blob_files(&e), n, "a dry run removed something");
    let done = ok(&e, &["gc", "--apply"]);
    assert_eq!(done["unreachable"], dry["unreachable"]);
    assert_eq!(
        blob_files(&e),
        n - dry["unreachable"].as_u64().unwrap() as usize
    );
    let o = revl(&e, &["blob", &orphan], None);
    assert_eq!(o.json["error"]["code"], "unknown-blob");
    // Nothing the live session needs went: every step reads, and it rewinds to the start.
    for k in 0..=7 {
        for p in ["big.txt", "d/a.txt", "top.txt"] {
            let o = revl(&e, &["read", &s, p, "--at", &k.to_string()], None);
            assert!(
                o.code == 0 || o.json["error"]["code"] == "absent",
                "read {p} --at {k} after gc: {}",
                o.json
            );
        }
    }
    let y = ok(&e, &["read", &s, "big.txt", "--at", "6"]);
    assert_eq!(y["content"], big('y'), "a kept post-image was collected");
    let sb = ok(&e, &["step-back", &s, "--to", "0"]);
    assert_eq!(sb["failed"], serde_json::json!([]));
    assert_eq!(ok(&e, &["gc"])["unreachable"], 0, "nothing new to collect");
}

/// The temp files of blob writes a killed writer left (`blobs/.incoming.*.tmp` of a file
/// stored streamed, `blobs/<ab>/.*.tmp` of a blob written whole) go once nothing has written
/// to them for ten minutes: `gc` lists them, `gc --apply` removes them; one written to just
/// now (a live writer may own it) is left where it is.
#[test]
fn gc_removes_the_temp_files_of_killed_blob_writes_once_they_are_old() {
    let e = env();
    ok(&e, &["gc"]); // the store and its blobs/ exist
    let blobs = e.store.join("blobs");
    std::fs::create_dir_all(blobs.join("ab")).unwrap();
    let old = [
        blobs.join(".incoming.4242.0123456789abcdef.tmp"),
        blobs.join("ab").join(".cdef0123.4242.tmp"),
    ];
    let fresh = [
        blobs.join(".incoming.4243.fedcba9876543210.tmp"),
        blobs.join("ab").join(".cdef4567.4243.tmp"),
    ];
    let eleven_minutes_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(11 * 60);
    for p in old.iter().chain(&fresh) {
        put(p, &[7u8; 1000], 0o600);
    }
    for p in &old {
        std::fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(eleven_minutes_ago)
            .unwrap();
    }
    let names = |doc: &Value| -> Vec<String> {
        let mut v: Vec<String> = doc["abandonedTempFiles"]
            .as_array()
            .unwrap_or_else(|| panic!("no abandonedTempFiles: {doc}"))
            .iter()
            .map(|p| {
                let p = Path::new(p.as_str().unwrap());
                let parent = p.parent().unwrap().file_name().unwrap();
                format!(
                    "{}/{}",
                    parent.to_string_lossy(),
                    p.file_name().unwrap().to_string_lossy()
                )
            })
            .collect();
        v.sort();
        v
    };
    let want = vec![
        "ab/.cdef0123.4242.tmp".to_string(),
        "blobs/.incoming.4242.0123456789abcdef.tmp".to_string(),
    ];
    let dry = ok(&e, &["gc"]);
    assert_eq!(names(&dry), want, "{dry}");
    assert_eq!(dry["abandonedTempBytes"], 2000, "{dry}");
    assert!(
        old.iter().chain(&fresh).all(|p| p.exists()),
        "a dry run removed one"
    );
    let text = revl_env(&e, &["gc"], false, None);
    assert!(
        text.stdout
            .contains("2 temp file(s) of blob writes that never finished"),
        "{}",
        text.stdout
    );
    let done = ok(&e, &["gc", "--apply"]);
    assert_eq!(names(&done), want, "{done}");
    for p in &old {
        assert!(!p.exists(), "{} left", p.display());
    }
    for p in &fresh {
        assert!(
            p.exists(),
            "{} removed: a live writer may own it",
            p.display()
        );
    }
    assert_eq!(names(&ok(&e, &["gc"])), Vec::<String>::new());
}

/// Run revl (JSON) and return its document and the peak resident memory of its process
/// (VmHWM, polled from /proc while it runs: the peak of a long copy is always seen).
fn revl_peak_rss(e: &Env, args: &[&str]) -> (Value, u64) {
    let mut cmd = crate::common::clean_command(&e.world.home, e.world.root());
    cmd.arg("--store")
        .arg(&e.store)
        .arg("--json")
        .args(args)
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    let reader = {
        let mut out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut out, &mut s).unwrap();
            s
        })
    };
    loop {
        if let Ok(st) = std::fs::read_to_string(&status) {
            if let Some(kb) = st
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak_kb = peak_kb.max(kb);
            }
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let out = reader.join().unwrap();
    let doc: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    (doc, peak_kb * 1024)
}

/// A 2 GiB file through a deletion (its preimage streamed into the blob store), a rewind
/// that restores it (streamed out), and a rewind over it after a hand put it in place of a
/// small file revl wrote (preserved, streamed): each process stays under 64 MiB resident.
#[test]
fn a_2_gib_file_is_rewound_in_under_64_mib() {
    const BIG: u64 = 2 << 30;
    const BOUND: u64 = 64 << 20;
    // On the build's disk (cargo's per-target temp dir), not the RAM-backed /dev/shm the
    // other tests use: the copies of the file take 4 GiB.
    let e = env_in(Path::new(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&e.ws).unwrap();
    // Sparse: cheap to make, 2 GiB to read, hash and copy.
    let huge = e.ws.join("huge.bin");
    std::fs::File::create(&huge).unwrap().set_len(BIG).unwrap();
    let s = ok(&e, &["new", "--workspace", e.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    let (del, rss) = revl_peak_rss(&e, &["delete", &s, "huge.bin"]);
    assert_eq!(del["step"], 1, "{del}");
    println!("2 GiB delete: peak RSS {} KiB", rss >> 10);
    assert!(
        rss < BOUND,
        "delete of a 2 GiB file: peak RSS {} MiB",
        rss >> 20
    );
    assert!(!huge.exists());
    let (sb, rss) = revl_peak_rss(&e, &["step-back", &s, "--to", "0"]);
    assert_eq!(sb["failed"], serde_json::json!([]), "{sb}");
    println!("2 GiB restore: peak RSS {} KiB", rss >> 10);
    assert!(
        rss < BOUND,
        "restore of a 2 GiB file: peak RSS {} MiB",
        rss >> 20
    );
    assert_eq!(std::fs::metadata(&huge).unwrap().len(), BIG);
    // A small file revl wrote, replaced by hand with the 2 GiB one: the rewind preserves it.
    ok(&e, &["write", &s, "small.txt", "--content", "small"]);
    std::fs::rename(&huge, e.ws.join("small.txt")).unwrap();
    let (sb, rss) = revl_peak_rss(&e, &["step-back", &s, "--to", "0"]);
    assert_eq!(sb["preserved"][0]["path"], "small.txt", "{sb}");
    println!("2 GiB preserve + rewind: peak RSS {} KiB", rss >> 10);
    assert!(
        rss < BOUND,
        "preserving a 2 GiB file: peak RSS {} MiB",
        rss >> 20
    );
    assert!(!e.ws.join("small.txt").exists());
    let kept = e.store.join("blobs");
    let digest = sb["preserved"][0]["digest"].as_str().unwrap();
    let blob = kept.join(&digest[..2]).join(&digest[2..]);
    assert_eq!(std::fs::metadata(blob).unwrap().len(), BIG);
}

/// A directory revl made, then deleted, then restored with its tree by a step-back, is no
/// drift for verify nor for a fork that rewinds through it (a regression: its restored
/// entries once read as unwitnessed entries of a directory revl made).
#[test]
fn a_restored_tree_inside_a_made_directory_is_not_drift() {
    let e = env();
    std::fs::create_dir_all(&e.ws).unwrap();
    let s = ok(&e, &["new", "--workspace", e.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    let at_k = snapshot(&e.ws);
    ok(&e, &["mkdir", &s, "d/e"]); // 1: makes d and d/e
    ok(&e, &["write", &s, "d/e/f.txt", "--content", "f"]); // 2
    ok(&e, &["write", &s, "top.txt", "--content", "t"]); // 3
    ok(&e, &["rename", &s, "top.txt", "d/top.txt"]); // 4: changes d
    ok(&e, &["delete", &s, "d"]); // 5
    ok(&e, &["step-back", &s, "--to", "4"]); // d comes back from its tree
    let v = revl(&e, &["verify", &s], None);
    assert_eq!(v.code, 0, "{}", v.json);
    let f = ok(&e, &["fork", &s, "--at", "0"]);
    assert_eq!(f["drift"], serde_json::json!([]), "{f}");
    let done = ok(
        &e,
        &["fork-confirm", &s, "--hash", f["hash"].as_str().unwrap()],
    );
    assert_eq!(done["preserved"], serde_json::json!([]), "{done}");
    assert_snap_eq(&at_k, &snapshot(&e.ws), "after the fork");
}

/// The repair of an interrupted write preserves a hand edit made meanwhile, whether it rolls
/// the write back (a write staged by rename: the intent holds only the preimage) or forward
/// (a small in-place write: its intent carries the new bytes too).
#[test]
fn repairing_an_interrupted_write_preserves_a_hand_edit() {
    let e = env();
    let (s, _) = history(&e);
    let big = "n".repeat(5000);
    let o = revl(
        &e,
        &["write", &s, "top.txt", "--content", &big],
        Some("effect.after-intent"),
    );
    assert_ne!(o.code, 0, "the write was not killed");
    put(&e.ws.join("top.txt"), b"typed by hand meanwhile", 0o644);
    let st = ok(&e, &["status", &s]);
    assert_eq!(st["head"], 4, "the staged write is rolled back: {st}");
    assert_eq!(std::fs::read(e.ws.join("top.txt")).unwrap(), b"T2");
    // The small write is rolled forward over the hand edit, which is preserved first.
    let o = revl(
        &e,
        &["write", &s, "top.txt", "--content", "small"],
        Some("effect.after-intent"),
    );
    assert_ne!(o.code, 0, "the write was not killed");
    put(&e.ws.join("top.txt"), b"typed again", 0o644);
    let st = ok(&e, &["status", &s]);
    assert_eq!(st["head"], 5, "the in-place write is rolled forward: {st}");
    assert_eq!(std::fs::read(e.ws.join("top.txt")).unwrap(), b"small");
    let wal = e.store.join("sessions").join(&s).join("wal.jsonl");
    let kept = preserved_records(&wal);
    assert_eq!(kept.len(), 2, "{kept:?}");
    let out = e.root.join("blob2.out");
    ok(&e, &["blob", &kept[1].1, "--out", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap(), b"typed again");
    let out = e.root.join("blob.out");
    ok(&e, &["blob", &kept[0].1, "--out", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap(), b"typed by hand meanwhile");
    // The file removed by hand meanwhile: the write is recorded (it may have been
    // acknowledged), the file is not made again, verify reports it, and the session goes on.
    let o = revl(
        &e,
        &["write", &s, "top.txt", "--content", "again"],
        Some("effect.after-intent"),
    );
    assert_ne!(o.code, 0, "the write was not killed");
    std::fs::remove_file(e.ws.join("top.txt")).unwrap();
    let st = ok(&e, &["status", &s]);
    assert_eq!(st["head"], 6, "{st}");
    assert!(!e.ws.join("top.txt").exists());
    let v = revl(&e, &["verify", &s], None);
    assert_eq!(v.code, 1, "{}", v.json);
    ok(&e, &["write", &s, "other.txt", "--content", "goes on"]);
}

/// Rewrite `path` by hand with `body` (the same length as before) and put its mtime back:
/// only its change time (ctime) tells that it was written.
fn edit_keeping_size_and_mtime(path: &Path, body: &[u8]) {
    let before = std::fs::symlink_metadata(path).unwrap();
    assert_eq!(
        before.len(),
        body.len() as u64,
        "the edit must keep the size"
    );
    std::fs::write(path, body).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_times(std::fs::FileTimes::new().set_modified(before.modified().unwrap()))
        .unwrap();
    let after = std::fs::symlink_metadata(path).unwrap();
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());
}

/// Scans of every witnessed path keep the digests they read by stat (docs/architecture.md,
/// "Drift scans: digests known by stat"), so a later scan reads only files whose stat
/// changed. A hand edit that keeps the size and puts the mtime back is still drift to every
/// later scan: `verify`, the fork's enumeration (its hash binds it), and the parallel
/// branch, whose DIR is at step k while the parent keeps the edit.
#[test]
fn a_hand_edit_keeping_size_and_mtime_is_drift_after_scans_kept_the_digests() {
    let e = env();
    std::fs::create_dir_all(&e.ws).unwrap();
    let ws = e.ws.to_str().unwrap();
    let s = ok(&e, &["new", "--workspace", ws])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["write", &s, "top.txt", "--content", "T1"]);
    ok(
        &e,
        &[
            "exec",
            &s,
            "--",
            "sh",
            "-c",
            "mkdir v && for i in 1 2 3; do echo file$i > v/f$i; done",
        ],
    );
    let at_k = snapshot(&e.ws);
    let k = ok(&e, &["status", &s])["head"]
        .as_i64()
        .unwrap()
        .to_string();
    // Older than a scan's settling time, so the scans below keep their digests by stat.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let v = revl(&e, &["verify", &s], None);
    assert_eq!(v.code, 0, "no drift yet: {}", v.json);
    let clean = ok(&e, &["fork", &s, "--at", &k]);
    assert_eq!(clean["drift"], serde_json::json!([]), "{clean}");
    assert!(
        e.store
            .join("sessions")
            .join(&s)
            .join("stat-index")
            .is_file(),
        "the scans kept no digests: the edit below would be found by reading anyway"
    );
    edit_keeping_size_and_mtime(&e.ws.join("v/f2"), b"FILE2\n");
    edit_keeping_size_and_mtime(&e.ws.join("top.txt"), b"t1");
    let v = revl(&e, &["verify", &s], None);
    assert_eq!(v.code, 1, "verify missed the edits: {}", v.json);
    let drifted = |doc: &Value| -> Vec<String> {
        doc["drift"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(drifted(&v.json), ["top.txt", "v/f2"], "{}", v.json);
    // The enumeration lists them, and its hash is not the clean one's.
    let f = ok(&e, &["fork", &s, "--at", &k]);
    assert_eq!(drifted(&f), ["top.txt", "v/f2"], "{f}");
    assert_ne!(f["hash"], clean["hash"], "the hash does not bind the edits");
    let dir = e.root.join("b1");
    let r = ok(
        &e,
        &[
            "fork-confirm",
            &s,
            "--hash",
            f["hash"].as_str().unwrap(),
            "--into",
            dir.to_str().unwrap(),
        ],
    );
    assert_eq!(r["forked"], true, "{r}");
    // The branch is at step k; the parent keeps what the hand wrote.
    assert_snap_eq(&at_k, &snapshot(&dir), "the branch");
    assert_eq!(std::fs::read(e.ws.join("v/f2")).unwrap(), b"FILE2\n");
    assert_eq!(std::fs::read(e.ws.join("top.txt")).unwrap(), b"t1");
}

/// A tree revl made, with another filesystem mounted in it since: the rewind that removes
/// the tree never empties the mounted filesystem (its files are not revl's: they are
/// preserved first, and the step's inverse fails and says why; std's remove_dir_all
/// emptied it).
#[test]
#[ignore = "needs root: run by scripts/test (README)"]
fn a_rewind_never_empties_a_filesystem_mounted_in_a_tree_revl_made() {
    // A test that cannot run fails, saying why (a skip would print `ok`).
    let root = std::process::Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        root.stdout, b"0\n",
        "this test mounts a tmpfs: run it as root, as scripts/test does"
    );
    let e = env();
    std::fs::create_dir_all(&e.ws).unwrap();
    let s = ok(&e, &["new", "--workspace", e.ws.to_str().unwrap()])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["write", &s, "dist/sub/a.txt", "--content", "revl's"]);
    let mnt = e.ws.join("dist/sub");
    let m = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    std::fs::write(mnt.join("theirs.txt"), "not revl's").unwrap();
    let _ = revl(&e, &["step-back", &s, "--to", "0"], None);
    // Wherever the mount is now (the tree may have been moved aside first).
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let ws = e.ws.to_str().unwrap();
    let at: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(ws))
        .map(str::to_string)
        .collect();
    let kept: Vec<Vec<u8>> = at
        .iter()
        .filter_map(|p| std::fs::read(Path::new(p).join("theirs.txt")).ok())
        .collect();
    for p in &at {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(p)
            .status();
    }
    assert_eq!(at.len(), 1, "the tmpfs is still mounted: {at:?}");
    assert_eq!(
        kept,
        vec![b"not revl's".to_vec()],
        "the mounted filesystem's file is still there"
    );
}
