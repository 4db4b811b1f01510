//! docs/fleet.md, many machines: push to an S3-compatible server (and a shared directory), fencing
//! by compare-and-swap, reads of a remote with the same documents as local reads, a branch
//! made in a second store directory (standing for a second machine), a tampered bucket
//! refused, and the lineage index in PostgreSQL rebuilt from the bucket alone.
//!
//! The tests on S3 and PostgreSQL need the servers from `.ci/start-fleet-servers` (moto's S3
//! server and PostgreSQL on loopback): plain `cargo test` leaves them out (ignored),
//! `scripts/test` starts the servers and runs them; without the servers they fail, saying
//! so. The tests on a shared directory (`Fleet::dir`) need nothing and always run.

use crate::common::{Out, World};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const NO_SERVERS: &str = "the fleet tests on S3 need the S3 and PostgreSQL servers: run scripts/test (it starts them), or `eval \"$(bash .ci/start-fleet-servers)\"` first";

/// The servers' environment (the AWS_* variables and the index URL).
fn servers() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for k in [
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "AWS_ALLOW_HTTP",
        "REVL_TEST_S3_BUCKET",
        "REVL_TEST_PG",
    ] {
        let v = std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set: {NO_SERVERS}"));
        out.push((k.to_string(), v));
    }
    out
}

fn env_of<'a>(env: &'a [(String, String)], k: &str) -> &'a str {
    &env.iter().find(|(n, _)| n == k).expect("set").1
}

/// One test's fleet: store A (this world's) and store B (a second machine's), a remote in a
/// fresh prefix of the test bucket (or a fresh shared directory).
struct Fleet {
    w: World,
    env: Vec<(String, String)>,
    url: String,
    store_b: PathBuf,
}

impl Fleet {
    fn s3() -> Fleet {
        let env = servers();
        let url = format!("s3://{}/t-{}", env_of(&env, "REVL_TEST_S3_BUCKET"), uniq());
        Fleet::with(env, |_| url)
    }

    fn dir() -> Fleet {
        Fleet::with(Vec::new(), |w| {
            let d = w.path("bucket");
            std::fs::create_dir_all(&d).unwrap();
            format!("file://{}", d.display())
        })
    }

    fn with(env: Vec<(String, String)>, url: impl FnOnce(&World) -> String) -> Fleet {
        let w = World::new();
        let store_b = w.path("store-b");
        let url = url(&w);
        Fleet {
            w,
            env,
            url,
            store_b,
        }
    }

    fn envs(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut e = self.env.clone();
        e.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        e
    }

    /// `revl --json --store A ARGS` with the servers' environment (and `extra`).
    fn a_env(&self, args: &[&str], extra: &[(&str, &str)]) -> Out {
        let e = self.envs(extra);
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.w.json_env(args, &e)
    }

    fn a(&self, args: &[&str]) -> Out {
        self.a_env(args, &[])
    }

    fn on(&self, store: &Path, args: &[&str]) -> Out {
        let e = self.envs(&[]);
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let s = store.display().to_string();
        let mut a = vec!["--json", "--store", s.as_str()];
        a.extend_from_slice(args);
        self.w.run_raw(&a, &e)
    }

    fn b(&self, args: &[&str]) -> Out {
        self.on(&self.store_b, args)
    }

    fn add_remotes(&self) {
        self.a(&["remote", "add", "origin", &self.url]).ok();
        self.b(&["remote", "add", "origin", &self.url]).ok();
    }
}

fn uniq() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{n:x}{:x}", std::process::id())
}

fn s(v: &Value) -> String {
    v.as_str().expect("a string").to_string()
}

/// A session in store A with a base tree and a history of writes, a large write, a delete,
/// a mkdir, a rename, a chmod: returns (session id, workspace, head).
fn session_with_history(f: &Fleet, name: &str) -> (String, PathBuf, u64) {
    let ws = f.w.ws(name);
    std::fs::create_dir_all(ws.join("src/deep")).unwrap();
    std::fs::write(ws.join("README"), "untouched by the agent\n").unwrap();
    std::fs::write(ws.join("src/lib.rs"), "fn main() {}\n").unwrap();
    std::fs::write(ws.join("src/deep/data.bin"), [0u8, 1, 2, 255, 254]).unwrap();
    std::fs::write(ws.join("doomed.txt"), "will be deleted\n").unwrap();
    let id = s(&f.a(&["new", "--workspace", ws.to_str().unwrap()]).ok()["session"]);
    let big: String = (0..3000).map(|i| format!("line {i}\n")).collect();
    f.a(&["write", &id, "notes.txt", "--content", "first"]).ok();
    f.a(&["write", &id, "big.txt", "--content", &big]).ok();
    f.a(&[
        "write",
        &id,
        "src/lib.rs",
        "--content",
        "fn main() { println!(); }\n",
    ])
    .ok();
    f.a(&["delete", &id, "doomed.txt"]).ok();
    f.a(&["mkdir", &id, "out"]).ok();
    f.a(&["write", &id, "out/result.txt", "--content", "42\n"])
        .ok();
    f.a(&["rename", &id, "notes.txt", "notes.md"]).ok();
    f.a(&["chmod", &id, "src/lib.rs", "600"]).ok();
    f.a(&["write", &id, "big.txt", "--content", "short now"])
        .ok();
    let head = f.a(&["status", &id]).ok()["head"].as_u64().unwrap();
    (id, ws, head)
}

const PATHS: &[&str] = &[
    "README",
    "src/lib.rs",
    "src/deep/data.bin",
    "doomed.txt",
    "notes.txt",
    "notes.md",
    "big.txt",
    "out/result.txt",
];

/// `read --at K` of every path at every step, as documents (an error's code when absent).
fn reads(run: &dyn Fn(&[&str]) -> Out, id: &str, head: u64) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for k in -1..=head as i64 {
        for p in PATHS {
            let r = run(&["read", id, p, "--at", &k.to_string()]);
            let v = match r.code {
                Some(0) => r.doc().clone(),
                _ => r.doc()["error"]["code"].clone(),
            };
            out.insert(format!("{p}@{k}"), v);
        }
    }
    out
}

/// A document without the members that are local file paths (docs/fleet.md: the same documents
/// as local reads, local file paths aside).
fn without_paths(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for k in ["wal", "parentWal", "out"] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

fn pushed(o: &Out) -> Value {
    o.ok()["pushed"][0].clone()
}

#[test]
#[ignore = "needs the fleet servers (S3, PostgreSQL): run by scripts/test (README)"]
fn push_is_idempotent_and_reads_of_the_remote_equal_local_reads() {
    let f = Fleet::s3();
    f.add_remotes();
    let (id, _ws, head) = session_with_history(&f, "ws");
    let p = pushed(&f.a(&["push", &id]));
    assert_eq!(p["session"], id.as_str());
    assert_eq!(p["segments"], 1);
    assert!(p["blobs"].as_u64().unwrap() >= 3, "{p}");
    assert_eq!(p["remoteHead"]["epoch"], 1);
    // Nothing new: nothing uploaded, the head unchanged.
    let again = pushed(&f.a(&["push"]));
    assert_eq!(
        (&again["segments"], &again["blobs"], &again["bytes"]),
        (&Value::from(0), &Value::from(0), &Value::from(0))
    );
    assert_eq!(again["remoteHead"], p["remoteHead"]);

    // Store B never ran the session: its reads of the remote equal A's local reads.
    let local = reads(&|a: &[&str]| f.a(a), &id, head);
    let remote = reads(
        &|a: &[&str]| {
            let mut v = vec!["--remote", "origin"];
            v.extend_from_slice(a);
            f.b(&v)
        },
        &id,
        head,
    );
    assert_eq!(local, remote);
    assert_eq!(local["README@3"]["content"], "untouched by the agent\n");
    assert_eq!(local["doomed.txt@8"], "absent");

    let short = &id[..8];
    for args in [
        vec!["log", short],
        vec!["branch", "--wal", short],
        vec!["branch", "--wal", short, "--at", "2"],
        vec!["branch", short, "--at", "2"],
        vec!["compare", short, short],
        vec!["diff", &format!("{short}@1"), &format!("{short}@{head}")],
    ] {
        let args: Vec<&str> = args.iter().map(|s| s.as_ref()).collect();
        let l = f.a(&args);
        let mut ra = vec!["--remote", "origin"];
        ra.extend_from_slice(&args);
        let r = f.b(&ra);
        assert_eq!(l.code, r.code, "{}\n{}", l.dump(), r.dump());
        assert_eq!(
            without_paths(l.doc().clone()),
            without_paths(r.doc().clone()),
            "{args:?}"
        );
    }
    // view writes the same sessions and steps.
    let out = f.w.path("remote.html");
    let v = f.b(&["--remote", "origin", "view", "--out", out.to_str().unwrap()]);
    assert_eq!(v.ok()["sessions"], 1);
    // A mirrored session is read-only.
    let e = f.b(&["--remote", "origin", "write", short, "x", "--content", "y"]);
    e.err(2, "usage");
}

#[test]
#[ignore = "needs the fleet servers (S3, PostgreSQL): run by scripts/test (README)"]
fn a_kill_at_any_point_of_a_push_leaves_the_remote_consistent_and_the_next_push_resumes() {
    let points = [
        "push.mid-blobs:1",
        "push.mid-blobs:2",
        "push.after-blobs",
        "push.after-segment",
        "push.before-manifest",
        "push.after-manifest",
    ];
    for fp in points {
        let f = Fleet::s3();
        f.add_remotes();
        let (id, _ws, head) = session_with_history(&f, "ws");
        let killed = f.a_env(&["push", &id], &[("REVL_FAILPOINT", fp)]);
        assert!(killed.died(), "{fp}: the push must die\n{}", killed.dump());
        // Store B sees either nothing or a complete, verified head.
        let seen = f.b(&[
            "--remote",
            "origin",
            "read",
            &id,
            "out/result.txt",
            "--at",
            &head.to_string(),
        ]);
        if fp == "push.after-manifest" {
            assert_eq!(seen.ok()["content"], "42\n", "{fp}");
        } else {
            seen.err(2, "unknown-session");
        }
        let resumed = pushed(&f.a(&["push", &id]));
        let done = fp == "push.after-manifest";
        assert_eq!(resumed["segments"], u64::from(!done), "{fp}: {resumed}");
        let local = reads(&|a: &[&str]| f.a(a), &id, head);
        let remote = reads(
            &|a: &[&str]| {
                let mut v = vec!["--remote", "origin"];
                v.extend_from_slice(a);
                f.b(&v)
            },
            &id,
            head,
        );
        assert_eq!(local, remote, "{fp}");
        // The session goes on; a kill in its second push resumes the same way.
        f.a(&["write", &id, "later.txt", "--content", "more"]).ok();
        // Two new blobs (large writes), so every point of the push is passed again.
        let big: String = (0..2000).map(|i| format!("later {i}\n")).collect();
        f.a(&["write", &id, "big1.txt", "--content", &big]).ok();
        f.a(&["write", &id, "big2.txt", "--content", &format!("{big}2")])
            .ok();
        let killed = f.a_env(&["push"], &[("REVL_FAILPOINT", fp)]);
        assert!(killed.died(), "{fp}");
        let p = pushed(&f.a(&["push"]));
        assert_eq!(p["remoteHead"]["epoch"], 2, "{fp}: {p}");
        let r = f.b(&[
            "--remote",
            "origin",
            "read",
            &id,
            "later.txt",
            "--at",
            &(head + 1).to_string(),
        ]);
        assert_eq!(r.ok()["content"], "more", "{fp}");
        assert_eq!(pushed(&f.a(&["push"]))["segments"], 0, "{fp}");
    }
}

/// Copy store A's directory to `to` (a copied store: the same sessions, the same store id).
fn copy_store(f: &Fleet, to: &Path) {
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&f.w.store)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
#[ignore = "needs the fleet servers (S3, PostgreSQL): run by scripts/test (README)"]
fn two_racing_writers_of_one_session_one_is_fenced_and_loses_nothing() {
    let f = Fleet::s3();
    f.add_remotes();
    let (id, _ws, _) = session_with_history(&f, "ws");
    pushed(&f.a(&["push", &id]));
    let copy = f.w.path("store-copy");
    copy_store(&f, &copy);
    f.a(&["write", &id, "a-side.txt", "--content", "A"]).ok();
    f.on(&copy, &["write", &id, "b-side.txt", "--content", "B"])
        .ok();
    let wal_copy = copy.join("sessions").join(&id).join("wal.jsonl");
    let before = std::fs::read(&wal_copy).unwrap();
    // Both push at once.
    let spawn = |store: &Path| {
        let mut c =
            f.w.command_for(&["--json", "--store", store.to_str().unwrap(), "push", &id]);
        for (k, v) in &f.env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let (ra, rb) = std::thread::scope(|s| {
        let a = s.spawn(|| spawn(&f.w.store));
        let b = s.spawn(|| spawn(&copy));
        (a.join().unwrap(), b.join().unwrap())
    });
    let codes = [ra.status.code(), rb.status.code()];
    assert!(
        codes.contains(&Some(0)) && codes.contains(&Some(1)),
        "one wins, one is fenced: {codes:?}\n{}\n{}",
        String::from_utf8_lossy(&ra.stdout),
        String::from_utf8_lossy(&rb.stdout)
    );
    let (loser, loser_store) = if ra.status.code() == Some(1) {
        (ra, f.w.store.clone())
    } else {
        (rb, copy.clone())
    };
    let doc: Value = serde_json::from_slice(&loser.stdout).unwrap();
    assert_eq!(doc["error"]["code"], "fenced", "{doc}");
    let msg = s(&doc["error"]["message"]);
    assert!(
        msg.contains("epoch 2") && msg.contains("nothing local changed"),
        "{msg}"
    );
    // The loser's history is whole.
    if loser_store == copy {
        assert_eq!(std::fs::read(&wal_copy).unwrap(), before);
    }
    let st = f.on(&loser_store, &["status", &id]).ok().clone();
    assert_eq!(st["state"], "live");
    // Readers see the winner's history, verified.
    let winner_file = if loser_store == copy {
        "a-side.txt"
    } else {
        "b-side.txt"
    };
    let head = st["head"].as_u64().unwrap();
    let r = f.b(&[
        "--remote",
        "origin",
        "read",
        &id,
        winner_file,
        "--at",
        &head.to_string(),
    ]);
    assert!(r.ok()["content"].is_string());
}

#[test]
#[ignore = "needs the fleet servers (S3, PostgreSQL): run by scripts/test (README)"]
fn a_push_from_a_stale_remote_head_is_fenced() {
    let f = Fleet::s3();
    f.add_remotes();
    let (id, _ws, _) = session_with_history(&f, "ws");
    pushed(&f.a(&["push", &id]));
    let copy = f.w.path("store-copy");
    copy_store(&f, &copy);
    // A goes on and pushes epoch 2.
    f.a(&["write", &id, "more.txt", "--content", "A"]).ok();
    assert_eq!(pushed(&f.a(&["push"]))["remoteHead"]["epoch"], 2);
    // The copy is behind: with nothing new, and with a history of its own, it is fenced.
    let behind = f.on(&copy, &["push", &id]);
    let msg = behind.err(1, "fenced");
    assert!(msg.contains("epoch 2"), "{msg}");
    f.on(&copy, &["write", &id, "other.txt", "--content", "B"])
        .ok();
    let wal = copy.join("sessions").join(&id).join("wal.jsonl");
    let before = std::fs::read(&wal).unwrap();
    let diverged = f.on(&copy, &["push"]);
    let msg = diverged.err(1, "fenced");
    assert!(msg.contains("does not extend"), "{msg}");
    assert_eq!(
        std::fs::read(&wal).unwrap(),
        before,
        "nothing local changed"
    );
    // The remote is A's.
    let r = f.b(&["--remote", "origin", "read", &id, "more.txt", "--at", "10"]);
    assert_eq!(r.ok()["content"], "A");
    // A push of the whole copy still pushes its other sessions, then answers `fenced`.
    let ws2 = f.w.ws("copy-only");
    let fresh = s(&f
        .on(&copy, &["new", "--workspace", ws2.to_str().unwrap()])
        .ok()["session"]);
    f.on(&copy, &["write", &fresh, "own.txt", "--content", "C"])
        .ok();
    let all = f.on(&copy, &["push"]);
    let msg = all.err(1, "fenced");
    assert!(
        msg.contains(&id) && msg.contains("other 1 session(s) were pushed"),
        "{msg}"
    );
    let r = f.b(&["--remote", "origin", "read", &fresh, "own.txt", "--at", "1"]);
    assert_eq!(r.ok()["content"], "C");
}

/// Every file below `dir` (relative path → bytes), the marker-free tree a branch gets.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

#[test]
#[ignore = "needs the fleet servers (S3, PostgreSQL): run by scripts/test (README)"]
fn a_branch_made_on_a_second_machine_is_the_source_read_at_k_byte_for_byte() {
    let f = Fleet::s3();
    f.add_remotes();
    let (id, _ws, head) = session_with_history(&f, "ws");
    // gc keeps the base tree a remote branch is made from (it is named by no WAL record).
    f.a(&["gc", "--apply"]).ok();
    pushed(&f.a(&["push"]));
    // DIR is checked against the store the branch will live in: not inside it, not inside
    // a live workspace of it.
    let ws_b = f.w.ws("b-live");
    f.b(&["new", "--workspace", ws_b.to_str().unwrap()]).ok();
    for bad in [ws_b.join("sub"), f.store_b.join("x")] {
        let r = f.b(&["fork", "--remote", "origin", &id, "--at", "2"]);
        let hash = s(&r.ok()["hash"]);
        f.b(&[
            "fork-confirm",
            &id,
            "--hash",
            &hash,
            "--into",
            bad.to_str().unwrap(),
        ])
        .err(2, "path-outside");
        assert!(!bad.exists(), "{} was made", bad.display());
    }
    for k in [-1i64, 2, 5, head as i64] {
        let into = f.w.path(&format!("branch-at-{}", k + 1));
        let r = f.b(&["fork", "--remote", "origin", &id, "--at", &k.to_string()]);
        let hash = s(&r.ok()["hash"]);
        assert_eq!(r.doc()["forked"], false);
        // The one pending remote fork may be confirmed without naming the session.
        let c = if k == 2 {
            f.b(&[
                "fork-confirm",
                "--hash",
                &hash,
                "--into",
                into.to_str().unwrap(),
            ])
        } else {
            f.b(&[
                "fork-confirm",
                &id,
                "--hash",
                &hash,
                "--into",
                into.to_str().unwrap(),
            ])
        };
        let doc = c.ok().clone();
        assert_eq!(doc["forked"], true);
        assert_eq!(doc["parent"], id.as_str());
        assert_eq!(doc["droppedDeferred"], serde_json::json!([]));
        let branch = s(&doc["branch"]);
        // The branch's files are the source's `read --at k`, byte for byte; nothing else.
        let got = files(&into);
        let mut want = BTreeMap::new();
        for p in PATHS {
            let r = f.a(&["read", &id, p, "--at", &k.to_string()]);
            if r.code == Some(0) {
                let d = r.doc();
                let bytes = match d["content"].as_str() {
                    Some(c) => c.as_bytes().to_vec(),
                    None => {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD
                            .decode(s(&d["contentBase64"]))
                            .unwrap()
                    }
                };
                want.insert(p.to_string(), bytes);
            }
        }
        assert_eq!(got, want, "branch at {k}");
        // The branch is B's, live, and its lineage names the remote parent.
        let lin = f.b(&["branch", "--wal", &branch]);
        let lin = lin.doc();
        assert_eq!(lin["role"], "branch", "{lin}");
        assert_eq!(lin["parent"], id.as_str());
        assert_eq!(lin["divergedAt"], k);
        // The parent's WAL is read from this store's verified copy of the remote.
        assert!(
            s(&lin["parentWal"]).contains("remotes/origin/mirror"),
            "{lin}"
        );
        let raw =
            std::fs::read_to_string(f.store_b.join("sessions").join(&branch).join("wal.jsonl"))
                .unwrap();
        // By reference (docs/wal-format.md, "Parents by id"): the id and the remote, no path.
        assert!(
            raw.contains(&format!(
                "\"parent\":\"{id}\",\"at\":{k},\"parentRemote\":\"origin\","
            )),
            "{raw}"
        );
        assert!(!raw.contains("parentWal"), "{raw}");
        f.b(&["write", &branch, "new.txt", "--content", "on machine B"])
            .ok();
    }
    // A confirm with no pending remote fork (each confirm consumed its own) is refused.
    f.b(&[
        "fork-confirm",
        &id,
        "--hash",
        &"0".repeat(64),
        "--into",
        f.w.path("x").to_str().unwrap(),
    ])
    .err(1, "no-pending-fork");
    // B's log knows its branches of the remote session as what they are: parallel forks.
    let log = f.b(&["log"]).ok().clone();
    let edges = log["edges"].as_array().unwrap();
    assert!(!edges.is_empty(), "{log}");
    assert!(edges.iter().all(|e| e["mode"] == "parallel"), "{log}");
    // The store that ran the session may branch it from the remote too; the confirm needs
    // no --remote there either (the session's own pending fork is not this one).
    let r = f.a(&["fork", "--remote", "origin", &id, "--at", "2"]);
    let hash = s(&r.ok()["hash"]);
    let into = f.w.path("branch-in-a");
    let c = f.a(&[
        "fork-confirm",
        &id,
        "--hash",
        &hash,
        "--into",
        into.to_str().unwrap(),
    ]);
    assert_eq!(c.ok()["forked"], true);
    assert_eq!(f.a(&["status", &id]).ok()["state"], "live");
}

/// revl killed after a remote fork forked but before its branch moved into the store: the
/// branch is not lost. The next confirm moves it in (and says so); the next enumeration
/// would too, before it clears the scratch store.
#[test]
fn a_remote_branch_cut_short_before_its_move_is_kept() {
    let f = Fleet::dir();
    f.add_remotes();
    let (id, _ws, _) = session_with_history(&f, "ws");
    pushed(&f.a(&["push"]));
    let r = f.b(&["fork", "--remote", "origin", &id, "--at", "3"]);
    let hash = s(&r.ok()["hash"]);
    let into = f.w.path("cut-short");
    let args = [
        "fork-confirm",
        id.as_str(),
        "--hash",
        hash.as_str(),
        "--into",
        into.to_str().unwrap(),
    ];
    let mut a = vec!["--json", "--store", f.store_b.to_str().unwrap()];
    a.extend_from_slice(&args);
    let killed =
        f.w.run_raw(&a, &[("REVL_FAILPOINT", "remote-fork.before-move")]);
    assert!(killed.died(), "{}", killed.dump());
    let before = files(&into);
    assert!(!before.is_empty(), "the fork wrote DIR before the kill");
    let again = f.b(&args);
    let msg = again.err(1, "no-pending-fork");
    assert!(msg.contains("is now this store's session"), "{msg}");
    let sessions = f.b(&["sessions"]).ok().clone();
    let branch = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["parent"] == id.as_str())
        .unwrap_or_else(|| panic!("no branch of {id}: {sessions}"))["session"]
        .as_str()
        .unwrap()
        .to_string();
    let st = f.b(&["status", &branch]).ok().clone();
    assert_eq!(st["state"], "live", "{st}");
    assert_eq!(files(&into), before, "DIR untouched by the recovery");
    // The branch works, and the same remote session may be branched again.
    f.b(&["write", &branch, "after.txt", "--content", "x"]).ok();
    f.b(&["fork", "--remote", "origin", &id, "--at", "2"]).ok();
}

/// A remote branch whose move into the store was cut short (revl killed before it), and a
/// blob it names damaged in the remote's cache afterwards (the cache's blobs are written
/// without an fsync, docs/fleet.md "Reading a remote": a power cut may cut one short). The
/// blob is the session's manifest copy, which only the move reads. Returns the confirm's
/// arguments, the blob's digest, its file in the cache, and its bytes.
fn cut_short_with_a_damaged_cached_blob(f: &Fleet) -> (Vec<String>, String, PathBuf, Vec<u8>) {
    f.add_remotes();
    let ws = f.w.ws("ws");
    let manifest = f.w.path("revl.toml");
    std::fs::write(
        &manifest,
        "[[tool]]\nname = \"note\"\nclass = \"emission\"\nservice = \"notes\"\nmethod = \"post\"\nscope = [\"net\"]\nrun = [\"true\"]\n",
    )
    .unwrap();
    let new = [
        "new",
        "--workspace",
        ws.to_str().unwrap(),
        "--manifest",
        manifest.to_str().unwrap(),
    ];
    let id = s(&f.a(&new).ok()["session"]);
    f.a(&["write", &id, "a.txt", "--content", "one"]).ok();
    f.a(&["write", &id, "a.txt", "--content", "two"]).ok();
    pushed(&f.a(&["push"]));
    let hash = s(&f.b(&["fork", "--remote", "origin", &id, "--at", "1"]).ok()["hash"]);
    let into = f.w.path("branch");
    let args: Vec<String> = vec![
        "fork-confirm".into(),
        id.clone(),
        "--hash".into(),
        hash,
        "--into".into(),
        into.display().to_string(),
    ];
    let mut a = vec!["--json", "--store", f.store_b.to_str().unwrap()];
    a.extend(args.iter().map(String::as_str));
    let killed =
        f.w.run_raw(&a, &[("REVL_FAILPOINT", "remote-fork.before-move")]);
    assert!(killed.died(), "{}", killed.dump());
    // The manifest copy the session's header names, cut short in the cache.
    let wal =
        std::fs::read_to_string(f.w.store.join("sessions").join(&id).join("wal.jsonl")).unwrap();
    let at = wal
        .find("\"manifestDigest\":\"")
        .expect("the header names a manifest copy");
    let d = wal[at + 18..at + 18 + 64].to_string();
    let cached = f
        .store_b
        .join("remotes/origin/mirror/blobs")
        .join(&d[..2])
        .join(&d[2..]);
    let good = std::fs::read(&cached).unwrap();
    std::fs::write(&cached, &good[..good.len() / 2]).unwrap();
    (args, d, cached, good)
}

/// The branch store B made from the remote session, once moved in.
fn moved_branch(f: &Fleet, parent: &str) -> Option<String> {
    f.b(&["sessions"]).ok()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["parent"] == parent)
        .map(|e| s(&e["session"]))
}

/// A blob the cache lost to a power cut is fetched again from the remote, checked against
/// its name, when a remote branch moves into the store: the branch moves in whole, and the
/// cache is put right.
#[test]
fn a_damaged_blob_of_the_cache_is_fetched_again_when_a_remote_branch_moves_in() {
    let f = Fleet::dir();
    let (args, d, cached, good) = cut_short_with_a_damaged_cached_blob(&f);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let msg = f.b(&args).err(1, "no-pending-fork");
    assert!(msg.contains("is now this store's session"), "{msg}");
    let branch = moved_branch(&f, args[1]).expect("the branch moved in");
    assert_eq!(f.b(&["status", &branch]).ok()["state"], "live");
    let mine = f.store_b.join("blobs").join(&d[..2]).join(&d[2..]);
    assert_eq!(std::fs::read(&mine).unwrap(), good);
    assert_eq!(std::fs::read(&cached).unwrap(), good, "the cache put right");
    f.b(&["write", &branch, "after.txt", "--content", "x"]).ok();
}

/// A blob of the cache damaged (a power cut: the cache's blobs are not fsynced) is fetched
/// again from the remote by a remote read, checked against its name, and the cache put
/// right; damaged in the remote too, the read is refused, naming the object, and the session
/// is marked unreadable: listed so, refused at once, the remote's other sessions still read.
#[test]
fn a_remote_read_fetches_again_a_blob_the_cache_lost() {
    let f = Fleet::dir();
    let (id, other) = two_pushed(&f);
    // Step 2 wrote big.txt; the last step overwrote it, keeping its bytes as a blob.
    let read = ["--remote", "origin", "read", &id, "big.txt", "--at", "2"];
    let big: String = (0..3000).map(|i| format!("line {i}\n")).collect();
    assert_eq!(f.b(&read).ok()["content"], big.as_str());
    let d = blake3::hash(big.as_bytes()).to_hex().to_string();
    let cached = f
        .store_b
        .join("remotes/origin/mirror/blobs")
        .join(&d[..2])
        .join(&d[2..]);
    assert!(cached.is_file(), "the read kept the blob in the cache");
    std::fs::write(&cached, &big.as_bytes()[..100]).unwrap();
    assert_eq!(f.b(&read).ok()["content"], big.as_str());
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        big.as_bytes(),
        "the cache put right"
    );
    std::fs::write(&cached, b"cut").unwrap();
    let in_bucket = f.w.path("bucket").join("blobs").join(&d);
    std::fs::write(&in_bucket, b"not what its name says").unwrap();
    let msg = f.b(&read).err(1, "corrupt-remote");
    assert!(msg.contains(&format!("blobs/{d}")), "{msg}");
    let log = f.b(&["--remote", "origin", "log"]).ok().clone();
    let (code, why) = unreadable(&log, &id).unwrap_or_else(|| panic!("not marked: {log}"));
    assert_eq!(code, "corrupt-remote");
    assert!(why.contains(&format!("blobs/{d}")), "{why}");
    assert!(listed(&log, &other), "the bystander is listed: {log}");
    let other_read = ["--remote", "origin", "read", &other, "o.txt", "--at", "1"];
    assert_eq!(f.b(&other_read).ok()["content"], "bystander");
    // Another path of the marked session: refused at once, with the reason.
    let msg = f
        .b(&["--remote", "origin", "read", &id, "README", "--at", "0"])
        .err(1, "corrupt-remote");
    assert!(msg.contains(&format!("blobs/{d}")), "{msg}");
}

/// The cache keeps a base tree's small files as the remote's pack, whole: a pack damaged in
/// the cache (its bytes altered, emptied, or cut short) is read like a damaged blob: the
/// file is fetched again from the remote, checked, and read; a branch made then has every
/// file.
#[test]
fn a_damaged_pack_of_the_cache_is_read_through_blobs_fetched_again() {
    let f = Fleet::dir();
    f.add_remotes();
    let (id, _ws, _head) = session_with_history(&f, "ws");
    pushed(&f.a(&["push"]));
    let read = ["--remote", "origin", "read", &id, "README", "--at", "0"];
    assert_eq!(f.b(&read).ok()["content"], "untouched by the agent\n");
    let packs = f.store_b.join("remotes/origin/mirror/packs");
    let pack = std::fs::read_dir(&packs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .expect("the read kept the base tree's pack");
    let whole = std::fs::read(&pack).unwrap();
    let at = whole
        .windows(b"untouched".len())
        .position(|w| w == b"untouched")
        .unwrap();
    let mut altered = whole.clone();
    altered[at..at + 9].copy_from_slice(b"TAMPERED!");
    std::fs::write(&pack, &altered).unwrap();
    assert_eq!(f.b(&read).ok()["content"], "untouched by the agent\n");
    // Emptied (what a power cut leaves of a file written just before it): fetched again.
    std::fs::write(&pack, b"").unwrap();
    assert_eq!(f.b(&read).ok()["content"], "untouched by the agent\n");
    assert_eq!(
        std::fs::read(&pack).unwrap(),
        whole,
        "the pack put back whole"
    );
    // Cut short: the pack's entries past the cut are fetched again too.
    std::fs::write(&pack, &whole[..whole.len() / 3]).unwrap();
    let into = f.w.path("branch");
    remote_branch(&f, &f.store_b, &id, "-1", &into);
    // Before every step: the workspace as `new` found it.
    assert_eq!(
        std::fs::read(into.join("README")).unwrap(),
        b"untouched by the agent\n"
    );
    assert_eq!(
        std::fs::read(into.join("src/deep/data.bin")).unwrap(),
        [0u8, 1, 2, 255, 254]
    );
    assert_eq!(
        std::fs::read(into.join("doomed.txt")).unwrap(),
        b"will be deleted\n"
    );
    assert_eq!(
        std::fs::read(into.join("src/lib.rs")).unwrap(),
        b"fn main() {}\n"
    );
}

/// The same blob damaged in the remote too: the move is refused (`corrupt-remote`, naming
/// the object), nothing of the branch moves, and it moves once the remote holds the blob
/// intact again.
#[test]
fn a_blob_damaged_in_the_remote_too_is_refused_when_a_remote_branch_moves_in() {
    let f = Fleet::dir();
    let (args, d, _, good) = cut_short_with_a_damaged_cached_blob(&f);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let in_bucket = f.w.path("bucket").join("blobs").join(&d);
    std::fs::write(&in_bucket, b"not what its name says").unwrap();
    let msg = f.b(&args).err(1, "corrupt-remote");
    assert!(msg.contains(&format!("blobs/{d}")), "{msg}");
    assert_eq!(moved_branch(&f, args[1]), None, "moved past a damaged blob");
    // The session is marked unreadable, as a read marks it.
    let log = f.b(&["--remote", "origin", "log"]).ok().clone();
    let (code, _) = unreadable(&log, args[1]).unwrap_or_else(|| panic!("not marked: {log}"));
    assert_eq!(code, "corrupt-remote");
    std::fs::write(&in_bucket, &good).unwrap();
    let msg = f.b(&args).err(1, "no-pending-fork");
    assert!(msg.contains("is now this store's session"), "{msg}");
    assert!(moved_branch(&f, args[1]).is_some());
}

#[test]
fn a_tampered_bucket_is_refused_never_trusted() {
    let f = Fleet::dir();
    f.add_remotes();
    let (id, _ws, head) = session_with_history(&f, "ws");
    pushed(&f.a(&["push"]));
    let bucket = f.w.path("bucket");
    let k = head.to_string();
    // The base tree's pack is a shortcut: without it the loose blobs serve (and are
    // checked). Set aside for the loose-blob case, then altered itself.
    let packs = bucket.join("packs");
    assert!(packs.is_dir(), "a push with a base tree uploads its pack");
    std::fs::rename(&packs, bucket.join("packs.off")).unwrap();
    // A blob altered: a second machine refuses it.
    let blob = std::fs::read_dir(bucket.join("blobs"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let orig = std::fs::read(&blob).unwrap();
    std::fs::write(&blob, b"not what its name says").unwrap();
    let r = f.b(&[
        "--remote",
        "origin",
        "read",
        &id,
        "out/result.txt",
        "--at",
        &k,
    ]);
    let msg = r.err(1, "corrupt-remote");
    assert!(msg.contains("altered"), "{msg}");
    std::fs::write(&blob, &orig).unwrap();
    std::fs::rename(bucket.join("packs.off"), &packs).unwrap();
    // The pack altered (one byte of an entry): refused, never cached.
    let pack = std::fs::read_dir(&packs)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let orig_pack = std::fs::read(&pack).unwrap();
    let mut bad = orig_pack.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(&pack, &bad).unwrap();
    let store_p = f.w.path("store-p");
    f.on(&store_p, &["remote", "add", "origin", &f.url]).ok();
    let r = f.on(
        &store_p,
        &[
            "--remote",
            "origin",
            "read",
            &id,
            "out/result.txt",
            "--at",
            &k,
        ],
    );
    let msg = r.err(1, "corrupt-remote");
    assert!(msg.contains("packs/"), "{msg}");
    std::fs::write(&pack, &orig_pack).unwrap();
    // Intact again: the same read from a fresh store works through the pack.
    let store_q = f.w.path("store-q");
    f.on(&store_q, &["remote", "add", "origin", &f.url]).ok();
    f.on(
        &store_q,
        &[
            "--remote",
            "origin",
            "read",
            &id,
            "out/result.txt",
            "--at",
            &k,
        ],
    )
    .ok();
    // A WAL segment altered (one byte).
    let segs = bucket.join("sessions").join(&id).join("wal");
    let seg = std::fs::read_dir(&segs)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&seg).unwrap();
    let orig_seg = bytes.clone();
    let i = bytes.len() / 2;
    bytes[i] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    let store_c = f.w.path("store-c");
    f.on(&store_c, &["remote", "add", "origin", &f.url]).ok();
    let r = f.on(
        &store_c,
        &[
            "--remote",
            "origin",
            "read",
            &id,
            "out/result.txt",
            "--at",
            &k,
        ],
    );
    r.err(1, "corrupt-remote");
    std::fs::write(&seg, &orig_seg).unwrap();
    // The manifest's stated lineage altered (what listings and the index show): refused
    // against the verified WAL.
    let man = bucket.join("sessions").join(&id).join("manifest.json");
    let orig_man = std::fs::read(&man).unwrap();
    let mut m: Value = serde_json::from_slice(&orig_man).unwrap();
    m["head"] = (head + 5).into();
    std::fs::write(&man, serde_json::to_vec(&m).unwrap()).unwrap();
    let store_l = f.w.path("store-l");
    f.on(&store_l, &["remote", "add", "origin", &f.url]).ok();
    let msg = f
        .on(&store_l, &["--remote", "origin", "log", &id])
        .err(1, "corrupt-remote");
    assert!(msg.contains("lineage"), "{msg}");
    std::fs::write(&man, &orig_man).unwrap();
    std::fs::write(&seg, &bytes).unwrap();
    // The manifest altered to match a forged segment: the WAL's SHA-256 still refuses it.
    let mut m: Value = serde_json::from_slice(&std::fs::read(&man).unwrap()).unwrap();
    use sha2::Digest;
    m["segments"][0]["sha256"] = hex::encode(sha2::Sha256::digest(&bytes)).into();
    std::fs::write(&man, serde_json::to_vec(&m).unwrap()).unwrap();
    let store_d = f.w.path("store-d");
    f.on(&store_d, &["remote", "add", "origin", &f.url]).ok();
    // Listing the remote: the session is listed unreadable, never blocking the others.
    let log = f.on(&store_d, &["--remote", "origin", "log"]).ok().clone();
    assert_eq!(
        unreadable(&log, &id).map(|u| u.0).as_deref(),
        Some("corrupt-remote"),
        "{log}"
    );
    f.on(&store_d, &["--remote", "origin", "log", &id])
        .err(1, "corrupt-remote");
    // Garbage for a manifest.
    std::fs::write(&man, b"{not json").unwrap();
    f.on(&store_d, &["--remote", "origin", "log", &id])
        .err(1, "corrupt-remote");
    std::fs::write(&seg, &orig_seg).unwrap();
}

#[test]
fn a_shared_directory_is_a_remote_too() {
    let f = Fleet::dir();
    f.add_remotes();
    let (id, _ws, head) = session_with_history(&f, "ws");
    assert_eq!(pushed(&f.a(&["push"]))["segments"], 1);
    assert_eq!(pushed(&f.a(&["push"]))["segments"], 0);
    let local = reads(&|a: &[&str]| f.a(a), &id, head);
    let remote = reads(
        &|a: &[&str]| {
            let mut v = vec!["--remote", "origin"];
            v.extend_from_slice(a);
            f.b(&v)
        },
        &id,
        head,
    );
    assert_eq!(local, remote);
    let copy = f.w.path("store-copy");
    copy_store(&f, &copy);
    f.a(&["write", &id, "x", "--content", "1"]).ok();
    f.on(&copy, &["write", &id, "y", "--content", "2"]).ok();
    pushed(&f.a(&["push"]));
    f.on(&copy, &["push"]).err(1, "fenced");
}

/// `--remote NAME` only changes where a read verb finds its sessions (docs/fleet.md, "Reading
/// a remote"): the remote's verified cache, read by the same verb. Every read verb (status,
/// timeline and inspect included) answers a remote session as the store that ran it does,
/// local file paths aside; a verb that writes is still refused.
#[test]
fn every_read_verb_reads_a_remote_session_as_the_store_that_ran_it() {
    let f = Fleet::dir();
    f.add_remotes();
    let (id, _ws, head) = session_with_history(&f, "ws");
    pushed(&f.a(&["push"]));
    let remote = |a: &[&str]| {
        let mut v = vec!["--remote", "origin"];
        v.extend_from_slice(a);
        f.b(&v)
    };
    fn strip(mut v: Value) -> Value {
        if let Some(m) = v.as_object_mut() {
            m.remove("workspace");
        }
        without_paths(v)
    }
    let (k, short) = ((head - 1).to_string(), &id[..8]);
    let (one, at_k) = (format!("{id}@1"), format!("{id}@{k}"));
    for args in [
        vec!["status", &id],
        vec!["timeline", short],
        vec!["inspect", &id, "--at", &k],
        vec!["log", short],
        vec!["diff", &one, &at_k],
        vec!["read", &id, "notes.txt", "--at", "1"],
        vec!["compare", &id, &id],
    ] {
        let (here, there) = (f.a(&args), remote(&args));
        assert_eq!(there.code, here.code, "{args:?}: {}", there.dump());
        assert_eq!(
            strip(there.doc().clone()),
            strip(here.doc().clone()),
            "{args:?}"
        );
    }
    // Still refused: the verbs that write, and reading a remote session's workspace now.
    remote(&["write", &id, "x", "--content", "1"]).err(2, "usage");
    remote(&["read", &id, "notes.txt"]).err(2, "usage");
}

#[test]
#[ignore = "needs the fleet servers (S3, PostgreSQL): run by scripts/test (README)"]
fn the_lineage_index_in_postgresql_is_rebuilt_from_the_bucket_alone() {
    let f = Fleet::s3();
    let name = format!("pg{}", &uniq()[..10]);
    f.a(&["remote", "add", &name, &f.url]).ok();
    f.b(&["remote", "add", &name, &f.url]).ok();
    let (id, _ws, _) = session_with_history(&f, "ws");
    let r = f.a(&["fork", &id, "--at", "3"]);
    let hash = s(&r.ok()["hash"]);
    let into = f.w.path("par");
    let c = f.a(&[
        "fork-confirm",
        &id,
        "--hash",
        &hash,
        "--into",
        into.to_str().unwrap(),
    ]);
    let branch = s(&c.ok()["branch"]);
    let ws2 = f.w.ws("other");
    let other = s(&f.a(&["new", "--workspace", ws2.to_str().unwrap()]).ok()["session"]);
    f.a(&["--remote", &name, "push"]).ok();
    let from_bucket = f.b(&["remote", "lineage", &name]).ok().clone();
    assert_eq!(from_bucket["source"], "bucket");
    assert_eq!(from_bucket["count"], 3);
    let pg = env_of(&f.env, "REVL_TEST_PG").to_string();
    let ix = f.b(&["remote", "index", &name, &pg]).ok().clone();
    assert_eq!(ix["sessions"], 3);
    // With one remote in the store, its name may be left out.
    let ix = f.b(&["remote", "index", &pg]).ok().clone();
    assert_eq!(
        (&ix["remote"], &ix["sessions"]),
        (&Value::from(name.clone()), &Value::from(3))
    );
    let from_index = f.b(&["remote", "lineage", &name]).ok().clone();
    assert_eq!(from_index["source"], "index");
    assert_eq!(from_index["sessions"], from_bucket["sessions"]);
    // A family, from the index.
    let fam = f.b(&["remote", "lineage", &name, &branch]).ok().clone();
    let ids: Vec<String> = fam["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| s(&e["session"]))
        .collect();
    let mut want = vec![id.clone(), branch.clone()];
    want.sort();
    assert_eq!(ids, want);
    assert!(!ids.contains(&other));
    let e = fam["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["session"] == branch.as_str())
        .unwrap();
    assert_eq!(
        (&e["parent"], &e["at"]),
        (&Value::from(id.clone()), &Value::from(3))
    );
    // Store B's later reads of the family use the index; its pushes keep it current.
    let log = f.b(&["--remote", &name, "log", &branch]).ok().clone();
    assert!(log.to_string().contains(&branch));
    f.a(&["write", &id, "late.txt", "--content", "x"]).ok();
    let p = f.a(&["--remote", &name, "push", &id]).ok().clone();
    // A's remote has no index configured: B's has. B's family query checks the rows
    // against the bucket's verified WALs: the stale row is noticed and answered from the
    // bucket.
    assert!(p["pushed"][0]["indexed"].is_null());
    let stale = f.b(&["remote", "lineage", &name, &id]).ok().clone();
    assert_eq!(stale["stale"], serde_json::json!([id.clone()]), "{stale}");
    let e = stale["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["session"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(e["epoch"], 2, "{stale}");
    // A row forged in the table (the bystander made a child of the family) is not believed.
    let man = revl_fleet::Bucket::open(&f.url)
        .unwrap()
        .get(&format!("sessions/{other}/manifest.json"))
        .unwrap()
        .unwrap()
        .0;
    let mut forged: revl_fleet::Manifest = serde_json::from_slice(&man).unwrap();
    forged.parent = Some(id.clone());
    forged.at = Some(1);
    forged.epoch = 99;
    revl_fleet::index::Index::connect(&pg)
        .unwrap()
        .upsert(&name, &forged)
        .unwrap();
    let fam = f.b(&["remote", "lineage", &name, &id]).ok().clone();
    assert!(
        !fam.to_string()
            .contains(&format!("\"session\":\"{other}\"")),
        "{fam}"
    );
    assert!(fam["stale"].to_string().contains(&other), "{fam}");
    // The whole remote's rows are checked too: the forged row is answered from the bucket
    // (no parent) and named stale, and the row of a later push the index never got as well.
    let whole = |f: &Fleet| {
        let all = f.b(&["remote", "lineage", &name]).ok().clone();
        let of = |id: &str| {
            all["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["session"] == id)
                .cloned()
                .unwrap_or_else(|| panic!("{id} missing: {all}"))
        };
        (of(&other), of(&id), of(&branch), all.clone())
    };
    let (o, i, b0, all) = whole(&f);
    assert!(o["parent"].is_null(), "{all}");
    assert_eq!(i["epoch"], 2, "{all}");
    assert!(all["stale"].to_string().contains(&other), "{all}");
    assert!(all["stale"].to_string().contains(&id), "{all}");
    // A row in a shape revl never writes (a negative head) is neither a panic nor believed:
    // the session is answered from the bucket and named stale.
    let sql = format!(
        "UPDATE revl_sessions SET head = -5 WHERE remote = '{name}' AND session = '{branch}'"
    );
    let psql = std::process::Command::new("psql")
        .args([pg.as_str(), "-q", "-c", sql.as_str()])
        .output()
        .expect("psql runs");
    assert!(psql.status.success(), "{psql:?}");
    let (_, _, b, all) = whole(&f);
    assert_eq!(b, b0, "{all}");
    assert!(all["stale"].to_string().contains(&branch), "{all}");
    let fam = f.b(&["remote", "lineage", &name, &branch]).ok().clone();
    assert!(fam["stale"].to_string().contains(&branch), "{fam}");
    // Re-index picks the new head up, and drops the forged row.
    f.b(&["remote", "index", &name, &pg]).ok();
    let fam = f.b(&["remote", "lineage", &name, &id]).ok().clone();
    assert!(fam["stale"].is_null(), "{fam}");
    let again = f.b(&["remote", "lineage", &name, &id]).ok().clone();
    let e = again["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["session"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(e["epoch"], 2);
}

#[test]
fn bad_remote_input_gets_a_one_line_error() {
    let f = Fleet::dir();
    f.a(&["remote", "add", "origin", "http://nope"])
        .err(2, "usage");
    f.a(&["remote", "add", "bad name", "file:///tmp/x"])
        .err(2, "usage");
    f.a(&["remote", "add", "origin", "file://relative/dir"])
        .err(2, "usage");
    f.a(&["push"]).err(2, "usage");
    f.a(&["--remote", "nope", "log"]).err(2, "usage");
    f.add_remotes();
    f.a(&["remote", "add", "origin", "file:///elsewhere"])
        .err(2, "usage");
    f.b(&[
        "--remote",
        "origin",
        "read",
        "0123456789abcdef0123456789abcdef",
        "x",
        "--at",
        "0",
    ])
    .err(2, "unknown-session");
    // Every read verb takes --remote (a session the remote lacks is named); a verb that
    // writes does not.
    f.b(&["--remote", "origin", "timeline", "0123456789"])
        .err(2, "unknown-session");
    f.b(&["--remote", "origin", "step-back", "0123456789", "--to", "0"])
        .err(2, "usage");
    let l = f.a(&["remote", "list"]).ok().clone();
    assert_eq!(l["remotes"][0]["name"], "origin");
}

#[test]
fn push_with_several_remotes_and_no_remote_names_them() {
    let f = Fleet::dir();
    f.add_remotes();
    let other = f.w.path("bucket-2");
    std::fs::create_dir_all(&other).unwrap();
    f.a(&[
        "remote",
        "add",
        "backup",
        &format!("file://{}", other.display()),
    ])
    .ok();
    let msg = f.a(&["push"]).err(2, "usage");
    assert!(
        msg.contains("origin") && msg.contains("backup"),
        "names the remotes: {msg}"
    );
    f.a(&["--remote", "backup", "push"]).ok();
}

#[test]
#[ignore = "needs the fleet servers (S3, PostgreSQL): run by scripts/test (README)"]
fn a_missing_bucket_and_missing_credentials_say_what_to_fix() {
    let f = Fleet::s3();
    f.add_remotes();
    let ws = f.w.ws("ws");
    let id = s(&f.a(&["new", "--workspace", ws.to_str().unwrap()]).ok()["session"]);
    let missing = format!("s3://revl-missing-{}/p", &uniq()[..10]);
    f.a(&["remote", "add", "gone", &missing]).ok();
    for args in [
        vec!["--remote", "gone", "push"],
        vec!["--remote", "gone", "log"],
        // A missing bucket is not a missing session.
        vec!["--remote", "gone", "read", &id, "x", "--at", "0"],
    ] {
        let msg = f.a(&args).err(1, "io");
        assert!(msg.contains("does not exist"), "{args:?}: {msg}");
        assert!(!msg.contains("not found"), "{args:?}: {msg}");
    }
    // No credentials: said, without the cloud's instance-metadata address.
    for args in [
        vec!["--remote", "origin", "push"],
        vec!["--remote", "origin", "log"],
    ] {
        let o = f.a_env(
            &args,
            &[("AWS_ACCESS_KEY_ID", ""), ("AWS_SECRET_ACCESS_KEY", "")],
        );
        let msg = o.err(2, "usage");
        assert!(msg.contains("no AWS credentials"), "{msg}");
        assert!(!o.stderr.contains("169.254"), "{}", o.stderr);
    }
}

#[test]
fn a_session_made_before_its_store_had_a_remote_is_branched_whole() {
    let f = Fleet::dir();
    let ws = f.w.ws("ws");
    std::fs::write(ws.join("kept.txt"), "never touched\n").unwrap();
    let id = s(&f.a(&["new", "--workspace", ws.to_str().unwrap()]).ok()["session"]);
    f.a(&["write", &id, "a.txt", "--content", "one"]).ok();
    // No remote at `new`: the first push captures the base tree from the live workspace.
    f.add_remotes();
    pushed(&f.a(&["push"]));
    let r = f.b(&["--remote", "origin", "read", &id, "kept.txt", "--at", "0"]);
    assert_eq!(r.ok()["content"], "never touched\n");
    let h = s(&f.b(&["fork", "--remote", "origin", &id, "--at", "0"]).ok()["hash"]);
    let into = f.w.path("b");
    f.b(&[
        "fork-confirm",
        &id,
        "--hash",
        &h,
        "--into",
        into.to_str().unwrap(),
    ])
    .ok();
    assert_eq!(
        files(&into),
        BTreeMap::from([("kept.txt".to_string(), b"never touched\n".to_vec())])
    );
}

/// The bytes a `read` answered (text or base64).
fn read_bytes(o: &Out) -> Vec<u8> {
    let d = o.ok();
    match d["content"].as_str() {
        Some(c) => c.as_bytes().to_vec(),
        None => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(s(&d["contentBase64"]))
                .unwrap()
        }
    }
}

/// Every step's content is somewhere (docs/fleet.md): a build output an exec made, 1 MiB
/// and overwritten since, is read at its step here and after `gc --apply`, on another store
/// through the remote, and a remote branch at that step has it, byte for byte.
#[test]
fn an_execs_large_output_overwritten_since_is_read_and_branched_at_its_step_anywhere() {
    let f = Fleet::dir();
    f.add_remotes();
    let ws = f.w.ws("build");
    let id = s(&f.a(&["new", "--workspace", ws.to_str().unwrap()]).ok()["session"]);
    let make = "mkdir -p out && head -c 1048576 /dev/urandom > out/app.bin \
        && head -c 300000 /dev/urandom > out/lib.so";
    f.a(&["exec", &id, "--", "sh", "-c", make]).ok();
    let built = std::fs::read(ws.join("out/app.bin")).unwrap();
    let lib = std::fs::read(ws.join("out/lib.so")).unwrap();
    assert_eq!((built.len(), lib.len()), (1 << 20, 300_000));
    let again = "head -c 20000 /dev/urandom > out/app.bin";
    f.a(&["exec", &id, "--", "sh", "-c", again]).ok();
    assert_ne!(std::fs::read(ws.join("out/app.bin")).unwrap(), built);
    let at1 = ["read", &id, "out/app.bin", "--at", "1"];
    assert_eq!(read_bytes(&f.a(&at1)), built, "read --at 1 here");
    f.a(&["gc", "--apply"]).ok();
    assert_eq!(read_bytes(&f.a(&at1)), built, "read --at 1 after gc");
    pushed(&f.a(&["push"]));
    let remote = [
        "--remote",
        "origin",
        "read",
        &id,
        "out/app.bin",
        "--at",
        "1",
    ];
    assert_eq!(read_bytes(&f.b(&remote)), built, "read --at 1 on store B");
    // A file no later step touched: on store B no workspace stands in for it.
    let remote = ["--remote", "origin", "read", &id, "out/lib.so", "--at", "1"];
    assert_eq!(
        read_bytes(&f.b(&remote)),
        lib,
        "read --at 1 of lib.so on store B"
    );
    let h = s(&f.b(&["fork", "--remote", "origin", &id, "--at", "1"]).ok()["hash"]);
    let into = f.w.path("branch");
    let confirm = [
        "fork-confirm",
        &id,
        "--hash",
        &h,
        "--into",
        into.to_str().unwrap(),
    ];
    f.b(&confirm).ok();
    assert_eq!(
        files(&into),
        BTreeMap::from([
            ("out/app.bin".to_string(), built),
            ("out/lib.so".to_string(), lib)
        ])
    );
}

// ---- a remote is untrusted input (docs/security.md, "What a remote is trusted with") ----

/// Direct access to a remote's objects (a `file://` directory's files, or a bucket's
/// objects through the library's client), to plant what an attacker who can write the
/// bucket could: every forged object is made consistent (digests, CRCs, the manifest's
/// SHA-256s recomputed), so only the checks on what the objects *say* can refuse it.
struct Forge {
    objects: Objects,
    id: String,
}

enum Objects {
    Dir(PathBuf),
    Bucket(revl_fleet::Bucket),
}

impl Forge {
    fn new(f: &Fleet, id: &str) -> Forge {
        let objects = match f.url.strip_prefix("file://") {
            Some(d) => Objects::Dir(PathBuf::from(d)),
            None => Objects::Bucket(revl_fleet::Bucket::open(&f.url).unwrap()),
        };
        Forge {
            objects,
            id: id.to_string(),
        }
    }

    fn get(&self, key: &str) -> Vec<u8> {
        match &self.objects {
            Objects::Dir(root) => std::fs::read(root.join(key)).unwrap(),
            Objects::Bucket(b) => b.get(key).unwrap().expect("the object exists").0,
        }
    }

    fn put(&self, key: &str, bytes: &[u8]) {
        match &self.objects {
            Objects::Dir(root) => std::fs::write(root.join(key), bytes).unwrap(),
            Objects::Bucket(b) => b.replace(key, bytes).unwrap(),
        }
    }

    fn man_key(&self) -> String {
        format!("sessions/{}/manifest.json", self.id)
    }

    fn manifest(&self) -> Value {
        serde_json::from_slice(&self.get(&self.man_key())).unwrap()
    }

    fn set_manifest(&self, m: &Value) {
        self.put(&self.man_key(), &serde_json::to_vec(m).unwrap());
    }

    /// A blob put in the bucket under its true name.
    fn put_blob(&self, bytes: &[u8]) -> String {
        let d = blake3::hash(bytes).to_hex().to_string();
        self.put(&format!("blobs/{d}"), bytes);
        d
    }

    /// The session's base tree entries, as pushed.
    fn base_items(&self) -> Vec<Value> {
        let tree = s(&self.manifest()["base"]["tree"]);
        serde_json::from_slice(&self.get(&format!("blobs/{tree}"))).unwrap()
    }

    /// Replace the session's base tree with `items` (a new tree blob, no pack for it).
    fn set_base_items(&self, items: &[Value]) {
        let tree = self.put_blob(&serde_json::to_vec(items).unwrap());
        let mut m = self.manifest();
        m["base"]["tree"] = tree.into();
        self.set_manifest(&m);
    }

    /// Blob `digest` altered to `bytes`, loose and in the base tree's pack.
    fn alter_blob(&self, digest: &str, bytes: &[u8]) {
        self.put(&format!("blobs/{digest}"), bytes);
        let pack = format!("packs/{}", s(&self.manifest()["base"]["tree"]));
        let packed = self.get(&pack);
        let items: Vec<(String, Vec<u8>)> = revl_fleet::unpack(&packed)
            .unwrap()
            .into_iter()
            .map(|(d, b)| {
                let b = if d == digest {
                    bytes.to_vec()
                } else {
                    b.to_vec()
                };
                (d, b)
            })
            .collect();
        self.put(&pack, &revl_fleet::pack(&items));
    }

    /// The session's WAL as the manifest's segments make it.
    fn wal(&self) -> Vec<u8> {
        let m = self.manifest();
        let mut out = Vec::new();
        for seg in m["segments"].as_array().unwrap() {
            out.extend(self.get(&s(&seg["key"])));
        }
        out
    }

    /// Rewrite each WAL line's text with `edit`, re-seal every CRC, and publish the result
    /// as the session's one segment with a manifest whose SHA-256s match.
    fn rewrite_wal(&self, edit: &dyn Fn(&str) -> String) {
        let wal = String::from_utf8(self.wal()).unwrap();
        let mut out = String::new();
        for line in wal.lines() {
            let at = line.rfind(",\"crc\":\"").unwrap();
            out.push_str(&crate::common::seal(&edit(&line[..at])));
        }
        use sha2::Digest;
        let sha = hex::encode(sha2::Sha256::digest(out.as_bytes()));
        let key = format!("sessions/{}/wal/{:020}-{:020}-{sha}", self.id, 0, out.len());
        self.put(&key, out.as_bytes());
        let mut m = self.manifest();
        m["segments"] =
            serde_json::json!([{"key": key, "from": 0, "to": out.len(), "sha256": sha}]);
        m["walLength"] = out.len().into();
        m["walSha256"] = sha.into();
        self.set_manifest(&m);
    }
}

/// What an attack may not change: a file and a directory outside every store, their bytes
/// and modes.
struct Victims {
    file: PathBuf,
    dir: PathBuf,
}

impl Victims {
    fn plant(f: &Fleet) -> Victims {
        let dir = f.w.path("victim-dir");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let file = f.w.path("victim.txt");
        std::fs::write(&file, "precious\n").unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        Victims { file, dir }
    }

    /// Checked from outside revl: the victims as planted, nothing new beside them.
    #[track_caller]
    fn check(&self, f: &Fleet, what: &str) {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::read(&self.file).unwrap(),
            b"precious\n",
            "{what}: a file outside the store was overwritten"
        );
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            mode(&self.file),
            0o644,
            "{what}: a file outside changed mode"
        );
        assert_eq!(
            mode(&self.dir),
            0o755,
            "{what}: a directory outside changed mode"
        );
        assert_eq!(
            std::fs::read_dir(&self.dir).unwrap().count(),
            0,
            "{what}: something was written in a directory outside the store"
        );
        let mut top: Vec<String> = std::fs::read_dir(f.w.path(""))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("escape"))
            .collect();
        top.sort();
        assert!(top.is_empty(), "{what}: written outside the store: {top:?}");
    }
}

/// The session listed as unreadable by `--remote origin log`, with its code and message.
fn unreadable(log: &Value, id: &str) -> Option<(String, String)> {
    log["unreadable"]
        .as_array()?
        .iter()
        .find_map(|e| (e["session"] == id).then(|| (s(&e["code"]), s(&e["message"]))))
}

fn listed(log: &Value, id: &str) -> bool {
    log["sessions"]
        .as_array()
        .is_some_and(|a| a.iter().any(|e| e["session"] == id))
}

/// One attack's rewrite of a WAL line's text, and of a manifest.
type WalEdit = Box<dyn Fn(&str) -> String>;
type ManifestEdit = Box<dyn Fn(&mut Value)>;

/// Two sessions pushed to a `file://` remote: the one the attacks forge and a bystander.
fn two_pushed(f: &Fleet) -> (String, String) {
    f.add_remotes();
    let (id, _ws, _) = session_with_history(f, "ws");
    let ws2 = f.w.ws("ws-other");
    let other = s(&f.a(&["new", "--workspace", ws2.to_str().unwrap()]).ok()["session"]);
    f.a(&["write", &other, "o.txt", "--content", "bystander"])
        .ok();
    f.a(&["push"]).ok();
    (id, other)
}

/// A fresh store reading the remote (a fresh mirror each attack).
fn fresh(f: &Fleet, name: &str) -> PathBuf {
    let p = f.w.path(name);
    f.on(&p, &["remote", "add", "origin", &f.url]).ok();
    p
}

/// Reading a hostile session: `--remote log` lists the others and names it unreadable
/// (`corrupt-remote`, the rule in the message); reading it is refused the same way.
#[track_caller]
fn refused_alone(f: &Fleet, store: &Path, id: &str, other: &str, rule: &str) {
    let log = f.on(store, &["--remote", "origin", "log"]).ok().clone();
    assert!(listed(&log, other), "the bystander is listed: {log}");
    assert!(!listed(&log, id), "the hostile session is not read: {log}");
    let (code, msg) =
        unreadable(&log, id).unwrap_or_else(|| panic!("{id} not listed unreadable: {log}"));
    assert_eq!(code, "corrupt-remote", "{msg}");
    assert!(msg.contains(rule), "the rule {rule:?} in {msg:?}");
    let r = f.on(
        store,
        &["--remote", "origin", "read", id, "README", "--at", "0"],
    );
    let msg = r.err(1, "corrupt-remote");
    assert!(msg.contains(rule), "the rule {rule:?} in {msg:?}");
    f.on(
        store,
        &["--remote", "origin", "read", other, "o.txt", "--at", "1"],
    )
    .ok();
}

#[test]
fn a_forged_base_tree_writes_nothing_outside_the_cache() {
    forged_base_trees(Fleet::dir());
}

#[test]
#[ignore = "needs the fleet servers (S3, PostgreSQL): run by scripts/test (README)"]
fn a_forged_base_tree_in_a_bucket_writes_nothing_outside_the_cache() {
    forged_base_trees(Fleet::s3());
}

fn forged_base_trees(f: Fleet) {
    let v = Victims::plant(&f);
    let (id, other) = two_pushed(&f);
    let forge = Forge::new(&f, &id);
    let orig = forge.manifest();
    let items = forge.base_items();
    let digest = items
        .iter()
        .find_map(|i| i["d"].as_str().map(str::to_string))
        .unwrap();
    let file = |p: &str| serde_json::json!({"k": "file", "p": p, "d": digest, "m": "666"});
    let abs = f.w.path("escape-abs.txt").display().to_string();
    // The mirror's base of a session: <store>/remotes/origin/mirror/bases/<id>, six levels
    // below the directory that holds the store.
    let attacks: Vec<(&str, Vec<Value>, &str)> = vec![
        ("absolute", vec![file(&abs)], "outside"),
        (
            "dotdot",
            vec![file("../../../../../../escape-dotdot.txt")],
            "..",
        ),
        (
            "symlink",
            vec![
                serde_json::json!({"k": "symlink", "p": "link", "t": v.dir.display().to_string()}),
                serde_json::json!({"k": "dir", "p": "link", "m": "777"}),
                file("link/planted.txt"),
            ],
            "symlink",
        ),
        (
            "chmod",
            vec![serde_json::json!({"k": "dir", "p": v.dir.display().to_string(), "m": "777"})],
            "outside",
        ),
    ];
    for (name, extra, rule) in attacks {
        let mut all = items.clone();
        all.extend(extra);
        forge.set_base_items(&all);
        let store = fresh(&f, &format!("store-{name}"));
        refused_alone(&f, &store, &id, &other, rule);
        v.check(&f, name);
        forge.set_manifest(&orig);
    }
    // Intact again: the session reads.
    let store = fresh(&f, "store-intact");
    f.on(
        &store,
        &["--remote", "origin", "read", &id, "README", "--at", "0"],
    )
    .ok();
}

#[test]
fn a_forged_wal_with_resealed_crcs_writes_nothing_outside_the_store() {
    forged_wals(Fleet::dir());
}

#[test]
#[ignore = "needs the fleet servers (S3, PostgreSQL): run by scripts/test (README)"]
fn a_forged_wal_in_a_bucket_with_resealed_crcs_writes_nothing_outside_the_store() {
    forged_wals(Fleet::s3());
}

fn forged_wals(f: Fleet) {
    let v = Victims::plant(&f);
    let (id, other) = two_pushed(&f);
    let forge = Forge::new(&f, &id);
    let orig = forge.manifest();
    let victim = v.file.display().to_string();
    let victim_dir = v.dir.display().to_string();
    // A remote fork materialises the head in <store>/remotes/origin/forks/<id>/heads/<id>:
    // seven levels below the directory that holds the store.
    let attacks: Vec<(&str, WalEdit)> = vec![
        (
            "absolute",
            Box::new(move |l: &str| l.replace("\"out/result.txt\"", &format!("\"{victim}\""))),
        ),
        (
            "dotdot",
            Box::new(|l: &str| {
                l.replace("out/result.txt", "../../../../../../../escape-dotdot.txt")
            }),
        ),
    ];
    for (name, edit) in attacks {
        forge.rewrite_wal(&*edit);
        let store = fresh(&f, &format!("store-{name}"));
        let r = f.on(&store, &["fork", "--remote", "origin", &id, "--at", "1"]);
        let msg = r.err(1, "corrupt-remote");
        assert!(
            msg.contains(&format!("sessions/{id}")),
            "names the object: {msg}"
        );
        v.check(&f, name);
        let log = f.on(&store, &["--remote", "origin", "log"]).ok().clone();
        assert!(listed(&log, &other), "{log}");
        assert_eq!(
            unreadable(&log, &id).map(|u| u.0).as_deref(),
            Some("corrupt-remote"),
            "{log}"
        );
        v.check(&f, name);
        forge.set_manifest(&orig);
    }
    // A header naming a workspace outside: copies never use it; nothing is written there.
    forge.rewrite_wal(&|l: &str| {
        if l.contains("\"record\":\"header\"") {
            let mut h: Value = serde_json::from_str(&format!("{l}}}")).unwrap();
            h["workspace"] = victim_dir.clone().into();
            let t = serde_json::to_string(&h).unwrap();
            t[..t.len() - 1].to_string()
        } else {
            l.to_string()
        }
    });
    let store = fresh(&f, "store-header");
    let _ = f.on(&store, &["fork", "--remote", "origin", &id, "--at", "1"]);
    v.check(&f, "header");
    forge.set_manifest(&orig);
}

#[test]
fn a_manifest_naming_objects_outside_the_remote_is_refused() {
    forged_manifests(Fleet::dir());
}

#[test]
#[ignore = "needs the fleet servers (S3, PostgreSQL): run by scripts/test (README)"]
fn a_manifest_in_a_bucket_naming_objects_outside_it_is_refused_and_the_index_still_rebuilds() {
    forged_manifests(Fleet::s3());
}

fn forged_manifests(f: Fleet) {
    let v = Victims::plant(&f);
    let (id, other) = two_pushed(&f);
    let forge = Forge::new(&f, &id);
    let orig = forge.manifest();
    let seg0 = orig["segments"][0].clone();
    let victim = v.file.display().to_string();
    let attacks: Vec<(&str, ManifestEdit, &str)> = vec![
        (
            "key-dotdot",
            Box::new(|m: &mut Value| m["segments"][0]["key"] = "../victim.txt".into()),
            "key",
        ),
        (
            "key-absolute",
            Box::new(move |m: &mut Value| m["segments"][0]["key"] = victim.clone().into()),
            "key",
        ),
        (
            "key-device",
            Box::new(|m: &mut Value| m["segments"][0]["key"] = "/dev/zero".into()),
            "key",
        ),
        (
            "size-lies",
            Box::new(move |m: &mut Value| {
                // The key named by the lie, so that only the size can refuse it.
                let to = seg0["to"].as_u64().unwrap() + (1 << 40);
                let (id, sha) = (s(&m["session"]), s(&seg0["sha256"]));
                m["segments"][0]["key"] =
                    format!("sessions/{id}/wal/{:020}-{to:020}-{sha}", 0).into();
                m["segments"][0]["to"] = to.into();
                m["walLength"] = to.into();
            }),
            "bytes",
        ),
        (
            "digest-not-hex",
            Box::new(|m: &mut Value| m["walSha256"] = "../../etc/passwd".into()),
            "SHA-256",
        ),
        (
            "carriage-return",
            Box::new(|m: &mut Value| m["writer"] = "a\rb".into()),
            "control character",
        ),
        (
            "nul",
            Box::new(|m: &mut Value| m["pushedAt"] = "2024\u{0}".into()),
            "control character",
        ),
    ];
    for (name, edit, rule) in attacks {
        let mut m = orig.clone();
        edit(&mut m);
        forge.set_manifest(&m);
        let store = fresh(&f, &format!("store-{name}"));
        let log = f.on(&store, &["--remote", "origin", "log"]).ok().clone();
        assert!(listed(&log, &other), "{name}: {log}");
        let (code, msg) = unreadable(&log, &id)
            .unwrap_or_else(|| panic!("{name}: {id} not listed unreadable: {log}"));
        assert_eq!(code, "corrupt-remote", "{name}: {msg}");
        assert!(msg.contains(rule), "{name}: the rule {rule:?} in {msg:?}");
        assert!(
            msg.contains("manifest.json"),
            "{name}: names the object: {msg}"
        );
        // The bucket's lineage lists the others too (the index is rebuilt from the same
        // manifests).
        let lin = f.on(&store, &["remote", "lineage", "origin"]).ok().clone();
        let ids: Vec<String> = lin["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| s(&e["session"]))
            .collect();
        assert_eq!(ids, vec![other.clone()], "{name}: {lin}");
        assert_eq!(
            lin["unreadable"][0]["session"],
            id.as_str(),
            "{name}: {lin}"
        );
        // The index is rebuilt from the same manifests: one hostile field never fails the
        // rebuild (a CR or a NUL once broke its bulk COPY); the others are indexed.
        if matches!(forge.objects, Objects::Bucket(_)) {
            let ix_name = format!("ix{}", &uniq()[..10]);
            f.on(&store, &["remote", "add", &ix_name, &f.url]).ok();
            let pg = env_of(&f.env, "REVL_TEST_PG").to_string();
            let ix = f
                .on(&store, &["remote", "index", &ix_name, &pg])
                .ok()
                .clone();
            assert_eq!(ix["sessions"], 1, "{name}: {ix}");
            assert_eq!(ix["unreadable"][0]["session"], id.as_str(), "{name}: {ix}");
        }
        v.check(&f, name);
    }
    forge.set_manifest(&orig);
    // A segment replaced by a symlink to a device (read until out of memory once): a
    // remote's objects are read without following a symlink.
    if let Objects::Dir(root) = &forge.objects {
        let seg = root.join(s(&orig["segments"][0]["key"]));
        let saved = std::fs::read(&seg).unwrap();
        std::fs::remove_file(&seg).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &seg).unwrap();
        let store = fresh(&f, "store-symlink");
        let log = f.on(&store, &["--remote", "origin", "log"]).ok().clone();
        assert!(listed(&log, &other), "{log}");
        let (code, msg) = unreadable(&log, &id).unwrap_or_else(|| panic!("{log}"));
        assert_eq!(code, "corrupt-remote", "{msg}");
        assert!(msg.contains("symlink"), "{msg}");
        std::fs::remove_file(&seg).unwrap();
        std::fs::write(&seg, saved).unwrap();
    }
    // One altered blob: its session is unreadable, the others still read.
    let store = fresh(&f, "store-blob");
    let digest = forge
        .base_items()
        .iter()
        .find_map(|i| i["d"].as_str().map(str::to_string))
        .unwrap();
    let good = forge.get(&format!("blobs/{digest}"));
    forge.alter_blob(&digest, b"not what its name says");
    refused_alone(&f, &store, &id, &other, "does not match its digest");
    // The store that wrote it repairs it: `push --repair` uploads the altered blob again,
    // a new epoch of the manifest has every reader judge the session again.
    let plain = f.a(&["push", &id]).ok().clone();
    assert_eq!(plain["pushed"][0]["blobs"], 0, "{plain}");
    let fixed = f.a(&["push", "--repair", &id]).ok().clone();
    let repaired = fixed["pushed"][0]["repaired"].to_string();
    assert!(repaired.contains(&format!("blobs/{digest}")), "{fixed}");
    assert_eq!(forge.get(&format!("blobs/{digest}")), good);
    let log = f.on(&store, &["--remote", "origin", "log"]).ok().clone();
    assert!(listed(&log, &id) && listed(&log, &other), "{log}");
    assert!(unreadable(&log, &id).is_none(), "{log}");
}

#[test]
fn push_repair_never_writes_through_a_symlinked_directory_of_a_shared_directory() {
    let f = Fleet::dir();
    f.add_remotes();
    let (id, _ws, _head) = session_with_history(&f, "ws");
    pushed(&f.a(&["push"]));
    // An attacker moves the session's directory out and leaves a symlink to a user's
    // directory in its place.
    let bucket = f.w.path("bucket");
    let victim = f.w.path("victim");
    std::fs::rename(bucket.join("sessions").join(&id), &victim).unwrap();
    std::fs::write(victim.join("manifest.json"), "the user's own file\n").unwrap();
    std::os::unix::fs::symlink(&victim, bucket.join("sessions").join(&id)).unwrap();
    let msg = f.a(&["push", "--repair", &id]).err(1, "corrupt-remote");
    assert!(msg.contains("symlink"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
    assert_eq!(
        std::fs::read_to_string(victim.join("manifest.json")).unwrap(),
        "the user's own file\n",
        "push --repair wrote through the symlink"
    );
}

#[test]
fn a_push_refuses_a_blob_symlink_in_a_shared_directory_without_reading_it() {
    let f = Fleet::dir();
    f.add_remotes();
    let (id, _ws, _head) = session_with_history(&f, "ws");
    pushed(&f.a(&["push"]));
    // A small blob of the session replaced by a symlink to a file outside the remote.
    let blobs = f.w.path("bucket").join("blobs");
    let small = std::fs::read_dir(&blobs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::metadata(p).unwrap().len() <= 64 << 10)
        .expect("a small blob");
    let outside = f.w.path("outside");
    std::fs::write(&outside, std::fs::read(&small).unwrap()).unwrap();
    std::fs::remove_file(&small).unwrap();
    std::os::unix::fs::symlink(&outside, &small).unwrap();
    f.a(&["write", &id, "more.txt", "--content", "more"]).ok();
    let msg = f.a(&["push"]).err(1, "corrupt-remote");
    assert!(msg.contains("symlink"), "{msg}");
}

/// `revl --json --store STORE ARGS` with its address space limited to 2 GiB (`ulimit -v`):
/// a read that allocated what a remote states (gibibytes) would fail there.
fn in_two_gib(store: &Path, args: &[&str]) -> (Option<i32>, Value, String) {
    within_kib(store, 2 << 20, args)
}

#[test]
fn a_remote_stating_a_tebibyte_wal_is_refused_without_reading_it() {
    let f = Fleet::dir();
    let (id, other) = two_pushed(&f);
    let forge = Forge::new(&f, &id);
    let Objects::Dir(root) = &forge.objects else {
        unreachable!("a shared directory")
    };
    // A WAL of 1 TiB in segments of 5 GiB, the first two present as 5 GiB (sparse) files:
    // reading what the manifest states would hold gibibytes before any digest is checked.
    let (seg, total) = (5u64 << 30, 1u64 << 40);
    let sha = "ab".repeat(32);
    let mut m = forge.manifest();
    let mut segments = Vec::new();
    let mut from = 0;
    while from < total {
        let to = (from + seg).min(total);
        let key = format!("sessions/{id}/wal/{from:020}-{to:020}-{sha}");
        if segments.len() < 2 {
            let f = std::fs::File::create(root.join(&key)).unwrap();
            f.set_len(to - from).unwrap();
        }
        segments.push(serde_json::json!({"key": key, "from": from, "to": to, "sha256": sha}));
        from = to;
    }
    m["walLength"] = total.into();
    m["segments"] = segments.into();
    forge.set_manifest(&m);
    for args in [
        &["--remote", "origin", "log"][..],
        &["remote", "lineage", "origin"][..],
    ] {
        let store = fresh(&f, &format!("reader-{}", args[0]));
        let (code, doc, stderr) = in_two_gib(&store, args);
        assert_eq!(code, Some(0), "{doc}\n{stderr}");
        assert!(listed(&doc, &other), "the bystander is listed: {doc}");
        let (code, msg) = unreadable(&doc, &id).unwrap_or_else(|| panic!("{doc}"));
        assert_eq!(code, "corrupt-remote", "{msg}");
        assert!(
            msg.contains("more than revl reads of a remote WAL"),
            "{msg}"
        );
        assert!(msg.contains(&forge.man_key()), "{msg}");
    }
}

#[test]
fn a_lineage_query_of_one_family_verifies_only_that_family() {
    let f = Fleet::dir();
    let (id, other) = two_pushed(&f);
    let store = fresh(&f, "reader");
    let r = f
        .on(&store, &["remote", "lineage", "origin", &id])
        .ok()
        .clone();
    assert_eq!(r["count"], 1, "{r}");
    assert_eq!(r["sessions"][0]["session"], id.as_str(), "{r}");
    let verified = store.join("remotes/origin/verified");
    assert!(verified.join(format!("{id}.json")).is_file());
    assert!(
        !verified.join(format!("{other}.json")).exists(),
        "a session outside the family was verified"
    );
    // A family member whose manifest lies about its lineage is refused, not followed.
    let forge = Forge::new(&f, &other);
    let mut m = forge.manifest();
    m["parent"] = id.as_str().into();
    m["at"] = 1.into();
    forge.set_manifest(&m);
    let r = f
        .on(&store, &["remote", "lineage", "origin", &id])
        .ok()
        .clone();
    assert_eq!(r["count"], 1, "{r}");
    let (code, msg) = unreadable(&r, &other).unwrap_or_else(|| panic!("{r}"));
    assert_eq!(code, "corrupt-remote", "{msg}");
    assert!(msg.contains("lineage"), "{msg}");
}

/// A remote branch's confirm writes none of the base's files again (docs/fleet.md, "A branch
/// on another machine"): the workspace the enumeration made in the scratch store is moved
/// into DIR (nothing copied), and no second copy of its files is kept in the store until the
/// branch is pushed, whose first push captures its base so that it branches elsewhere.
#[test]
fn a_remote_branch_moves_its_made_workspace_and_writes_no_second_copy() {
    let f = Fleet::dir();
    f.add_remotes();
    let (id, _ws, _) = session_with_history(&f, "ws");
    pushed(&f.a(&["push"]));
    let hash = s(&f.b(&["fork", "--remote", "origin", &id, "--at", "2"]).ok()["hash"]);
    let into = f.w.path("branch");
    let doc = f
        .b(&[
            "fork-confirm",
            &id,
            "--hash",
            &hash,
            "--into",
            into.to_str().unwrap(),
        ])
        .ok()
        .clone();
    assert_eq!(doc["bytesCopied"], 0, "{doc}");
    assert!(s(&doc["fallback"]).contains("moved here whole"), "{doc}");
    let branch = s(&doc["branch"]);
    assert_eq!(
        std::fs::read(into.join("README")).unwrap(),
        b"untouched by the agent\n"
    );
    // The move writes no second copy of the branch's files: no base tree yet, and no blob
    // of this store holds a file DIR got from the remote session's base.
    assert!(
        !f.store_b
            .join("sessions")
            .join(&branch)
            .join("base.json")
            .exists(),
        "the move captured a base tree"
    );
    let mut held = Vec::new();
    all_files(&f.store_b.join("blobs"), &mut held);
    for p in ["README", "src/deep/data.bin"] {
        let want = std::fs::read(into.join(p)).unwrap();
        assert!(!held.contains(&want), "{p} was written again as a blob");
    }
    // Nothing of the scratch store is left, and the branch works.
    assert!(!f.store_b.join("remotes/origin/forks").join(&id).exists());
    f.b(&["write", &branch, "after.txt", "--content", "x"]).ok();
    assert_eq!(f.b(&["status", &branch]).ok()["state"], "live");
    // Its first push captures its base: a third store branches it at its first step with
    // the files it was made with.
    pushed(&f.b(&["push", &branch]));
    let c = fresh(&f, "store-c");
    let again = f.w.path("again");
    remote_branch(&f, &c, &branch, "0", &again);
    assert_eq!(
        files(&again)
            .into_iter()
            .filter(|(p, _)| !p.starts_with(".revl"))
            .collect::<BTreeMap<_, _>>(),
        files(&into)
            .into_iter()
            .filter(|(p, _)| !p.starts_with(".revl") && p != "after.txt")
            .collect::<BTreeMap<_, _>>()
    );
}

/// A branch made from a remote and committed (or aborted) before it was ever pushed gets its
/// base tree as it closes: pushed then, a third store reads every file it was made with,
/// the ones it never touched included, at its first step.
#[test]
fn a_remote_branch_closed_before_its_first_push_reads_whole_elsewhere() {
    let f = Fleet::dir();
    f.add_remotes();
    let (id, _ws, _) = session_with_history(&f, "ws");
    pushed(&f.a(&["push"]));
    for end in ["commit", "abort"] {
        let into = f.w.path(&format!("branch-{end}"));
        let branch = s(&remote_branch(&f, &f.store_b, &id, "2", &into)["branch"]);
        let made = files(&into);
        f.b(&["write", &branch, "after.txt", "--content", "x"]).ok();
        if end == "commit" {
            let plan = s(&f.b(&["commit", &branch]).ok()["hash"]);
            f.b(&["commit-confirm", &branch, "--hash", &plan]).ok();
        } else {
            f.b(&["abort", &branch]).ok();
        }
        pushed(&f.b(&["push", &branch]));
        let c = fresh(&f, &format!("store-c-{end}"));
        for p in ["README", "src/lib.rs", "src/deep/data.bin", "doomed.txt"] {
            let r = f.on(&c, &["--remote", "origin", "read", &branch, p, "--at", "0"]);
            assert_eq!(
                read_bytes(&r),
                made[p],
                "{p} of the branch {end}ed before its push"
            );
        }
    }
}

/// `revl ARGS` on `store` with at most `kib` KiB of address space (`ulimit -v`).
fn within_kib(store: &Path, kib: u64, args: &[&str]) -> (Option<i32>, Value, String) {
    let s = store.display().to_string();
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("ulimit -v {kib} && exec \"$0\" \"$@\"")])
        .arg(env!("CARGO_BIN_EXE_revl"))
        .args(["--json", "--store", s.as_str()])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = serde_json::from_str(&stdout)
        .unwrap_or_else(|_| panic!("not one document: {stdout}\n{stderr}"));
    (out.status.code(), doc, stderr)
}

/// A remote's large blobs are fetched within a byte budget: each one larger than a round's
/// share streams into a file of the cache, hashed as it comes, and is kept only once its
/// digest is its name (docs/fleet.md, "Reading a remote"). Three blobs of 320 MiB read
/// by a reader held to 768 MiB of address space (before: the round held all three).
#[test]
fn a_remotes_large_blobs_stream_into_the_cache_within_a_memory_budget() {
    let f = Fleet::dir();
    f.add_remotes();
    let ws = f.w.ws("big");
    for i in 0..3u8 {
        // Sparse: one distinct byte, then zeros (cheap on disk, 320 MiB when read).
        let file = std::fs::File::create(ws.join(format!("big{i}.bin"))).unwrap();
        std::os::unix::fs::FileExt::write_at(&file, &[i + 1], 0).unwrap();
        file.set_len(320 << 20).unwrap();
    }
    let id = s(&f.a(&["new", "--workspace", ws.to_str().unwrap()]).ok()["session"]);
    f.a(&["write", &id, "small.txt", "--content", "one"]).ok();
    pushed(&f.a(&["push"]));
    let store = fresh(&f, "reader");
    let (code, doc, stderr) = within_kib(&store, 768 << 10, &["--remote", "origin", "log", &id]);
    assert_eq!(code, Some(0), "{doc}\n{stderr}");
    assert!(listed(&doc, &id), "{doc}");
    // Each large file's bytes are in the cache, whole; nothing streamed is left behind.
    let mut firsts = Vec::new();
    let root = store.join("remotes/origin/mirror/blobs");
    for d in std::fs::read_dir(&root).unwrap().flatten() {
        for b in std::fs::read_dir(d.path()).unwrap().flatten() {
            if b.metadata().unwrap().len() == 320 << 20 {
                let mut one = [0u8; 1];
                use std::io::Read;
                std::fs::File::open(b.path())
                    .unwrap()
                    .read_exact(&mut one)
                    .unwrap();
                firsts.push(one[0]);
            }
        }
    }
    firsts.sort();
    assert_eq!(firsts, [1, 2, 3]);
    let incoming = store.join("remotes/origin/incoming");
    let left: Vec<_> = std::fs::read_dir(&incoming)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// `fork --remote origin ID --at K` on `store`, confirmed into `into`: the confirm's document.
fn remote_branch(f: &Fleet, store: &Path, id: &str, k: &str, into: &Path) -> Value {
    let hash = s(&f
        .on(store, &["fork", "--remote", "origin", id, "--at", k])
        .ok()["hash"]);
    let into = into.to_str().unwrap();
    f.on(
        store,
        &["fork-confirm", id, "--hash", &hash, "--into", into],
    )
    .ok()
    .clone()
}

/// A cache an older revl filled kept each session's base tree written out
/// (`mirror/bases/<id>`, read-only directories among them); nothing reads it now, and the
/// next remote read removes it, whatever it holds, reading as before.
#[test]
fn the_base_directories_an_older_cache_wrote_out_are_removed() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fleet::dir();
    f.add_remotes();
    let (id, _ws, _) = session_with_history(&f, "ws");
    pushed(&f.a(&["push"]));
    let read = ["--remote", "origin", "read", &id, "README", "--at", "0"];
    assert_eq!(f.b(&read).ok()["content"], "untouched by the agent\n");
    let bases = f.store_b.join("remotes/origin/mirror/bases");
    let old = bases.join(&id).join("src/deep");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("data.bin"), b"old copy").unwrap();
    std::fs::write(bases.join(format!(".{id}.tree.done")), b"").unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o500)).unwrap();
    assert_eq!(f.b(&read).ok()["content"], "untouched by the agent\n");
    assert!(!bases.exists(), "an older cache's base directories stayed");
}

/// Every regular file's bytes below `d` (symlinks not followed).
fn all_files(d: &Path, out: &mut Vec<Vec<u8>>) {
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        if m.is_dir() {
            all_files(&e.path(), out);
        } else if m.is_file() {
            out.push(std::fs::read(e.path()).unwrap());
        }
    }
}

/// Reading a remote session writes its base tree nowhere but the cache's blobs (each of its
/// files is held once there, not written out again as a directory), and a branch made from
/// it at any step has every file's bytes, every mode and every symlink of the workspace
/// that step saw, the files no step touched included.
#[test]
fn a_remote_read_holds_each_base_file_once_and_a_branch_keeps_modes_and_symlinks() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fleet::dir();
    f.add_remotes();
    let ws = f.w.ws("ws");
    std::fs::create_dir_all(ws.join("bin")).unwrap();
    std::fs::create_dir_all(ws.join("locked/inner")).unwrap();
    let mut base_files = Vec::new();
    for i in 0..40 {
        let (rel, body) = (format!("data/{i:02}.txt"), format!("base file {i}\n"));
        std::fs::create_dir_all(ws.join("data")).unwrap();
        std::fs::write(ws.join(&rel), &body).unwrap();
        base_files.push(body.into_bytes());
    }
    std::fs::write(ws.join("bin/run.sh"), "#!/bin/sh\necho run\n").unwrap();
    std::fs::set_permissions(
        ws.join("bin/run.sh"),
        std::fs::Permissions::from_mode(0o751),
    )
    .unwrap();
    std::fs::write(ws.join("locked/inner/secret"), "s\n").unwrap();
    std::fs::set_permissions(
        ws.join("locked/inner/secret"),
        std::fs::Permissions::from_mode(0o400),
    )
    .unwrap();
    std::os::unix::fs::symlink("bin/run.sh", ws.join("run")).unwrap();
    std::os::unix::fs::symlink("../missing", ws.join("data/dangling")).unwrap();
    std::fs::set_permissions(ws.join("locked"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let id = s(&f.a(&["new", "--workspace", ws.to_str().unwrap()]).ok()["session"]);
    f.a(&["write", &id, "data/00.txt", "--content", "changed\n"])
        .ok();
    f.a(&["chmod", &id, "bin/run.sh", "700"]).ok();
    pushed(&f.a(&["push"]));
    // What `new` found: every entry's kind, mode and bytes (or target).
    fn entries(root: &Path) -> BTreeMap<String, (String, u32, Vec<u8>)> {
        let mut out = BTreeMap::new();
        fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, (String, u32, Vec<u8>)>) {
            let mut names: Vec<_> = std::fs::read_dir(d).unwrap().flatten().collect();
            names.sort_by_key(|e| e.file_name());
            for e in names {
                let p = e.path();
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                let m = std::fs::symlink_metadata(&p).unwrap();
                let mode = m.permissions().mode() & 0o7777;
                if m.file_type().is_symlink() {
                    let t = std::fs::read_link(&p).unwrap();
                    out.insert(
                        rel,
                        ("symlink".into(), 0, t.into_os_string().into_encoded_bytes()),
                    );
                } else if m.is_dir() {
                    out.insert(rel, ("dir".into(), mode, Vec::new()));
                    walk(root, &p, out);
                } else {
                    out.insert(rel, ("file".into(), mode, std::fs::read(&p).unwrap()));
                }
            }
        }
        walk(root, root, &mut out);
        out.retain(|k, _| !k.starts_with(".revl"));
        out
    }
    let now = entries(&ws);
    let mut before = now.clone();
    before.get_mut("data/00.txt").unwrap().2 = b"base file 0\n".to_vec();
    before.get_mut("bin/run.sh").unwrap().1 = 0o751;
    // A read of a file no step touched comes from the base tree.
    let r = f.b(&[
        "--remote",
        "origin",
        "read",
        &id,
        "data/07.txt",
        "--at",
        "1",
    ]);
    assert_eq!(r.ok()["content"], "base file 7\n");
    // The cache holds each base file's bytes once.
    let cache = f.store_b.join("remotes/origin");
    let mut held = Vec::new();
    all_files(&cache, &mut held);
    for b in &base_files[1..] {
        // Loose or in a pack: each file of the cache that holds the bytes, as often as it
        // holds them.
        let copies: usize = held
            .iter()
            .map(|h| h.windows(b.len()).filter(|w| w == b).count())
            .sum();
        assert_eq!(
            copies,
            1,
            "{:?} is held {copies} times in the cache",
            String::from_utf8_lossy(b)
        );
    }
    // Branches before every step and at the head: the workspace as it was, byte for byte.
    for (k, want) in [("-1", &before), ("2", &now)] {
        let into = f.w.path(&format!("branch{k}"));
        remote_branch(&f, &f.store_b, &id, k, &into);
        assert_eq!(&entries(&into), want, "the branch at {k}");
    }
}
