//! Parents by id (docs/wal-format.md, "Parents by id" and "Versions and compatibility"),
//! through the binary: a branch names its parent by session id (and remote), never by a
//! path, so a store moved with `mv` gives the same answers (`log`, `timeline`, `branch`,
//! `compare`, `read --at` across forks) and goes on working; a copy of a store never reads
//! its original; new WALs are walVersion 2 and a walVersion-1 store made by the revl before
//! it (tests/fixtures/store-v1.tar.gz, made by tests/fixtures/make-store-v1.sh) reads the same.

use crate::common::*;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

/// Run `revl --store STORE --json ARGS…`.
fn json_in(w: &World, store: &Path, args: &[&str]) -> Out {
    let mut a = vec!["--store", store.to_str().unwrap(), "--json"];
    a.extend_from_slice(args);
    w.run_raw(&a, &[])
}

/// `json_in`, asserted to succeed.
fn ok_in(w: &World, store: &Path, args: &[&str]) -> Value {
    json_in(w, store, args).ok().clone()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// Enumerate and confirm a fork of `id` at `at` (parallel into `into`, else serial).
fn fork(w: &World, store: &Path, id: &str, at: &str, into: Option<&Path>) -> String {
    let plan = ok_in(w, store, &["fork", id, "--at", at]);
    let mut args = vec!["fork-confirm", id, "--hash", s(&plan["hash"])];
    if let Some(d) = into {
        args.extend(["--into", d.to_str().unwrap()]);
    }
    let r = ok_in(w, store, &args);
    assert_eq!(r["forked"], true, "{r}");
    s(&r["branch"]).to_string()
}

fn write(w: &World, store: &Path, id: &str, path: &str, content: &str) {
    ok_in(w, store, &["write", id, path, "--content", content]);
}

/// Every answer of the read verbs the issue names, keyed by command line, with `store`'s
/// path written `<store>` (the only thing a move may change).
fn answers(w: &World, store: &Path, queries: &[Vec<String>]) -> Vec<(String, String)> {
    let root = store.to_str().unwrap();
    queries
        .iter()
        .map(|q| {
            let args: Vec<&str> = q.iter().map(String::as_str).collect();
            let doc = ok_in(w, store, &args);
            (q.join(" "), doc.to_string().replace(root, "<store>"))
        })
        .collect()
}

/// Every file under `dir` that holds `needle` (its bytes).
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p);
            } else if m.is_file()
                && fs::read(&p)
                    .unwrap()
                    .windows(needle.len())
                    .any(|win| win == needle.as_bytes())
            {
                out.push(p);
            }
        }
    }
    out
}

fn mv(from: &Path, to: &Path) {
    let st = std::process::Command::new("mv")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success(), "mv {} {}", from.display(), to.display());
}

/// A store with a root S, a parallel fork P of S at 1, a serial fork B of S at 2 and a
/// serial fork C of B at 1, each with steps after its fork, moved whole with `mv`: every
/// read answers as before, the branches' WALs name their parents by id only (no file of
/// the store holds the store's own path), and work goes on in the moved store. Before
/// that, a copy of the store without S's WAL says S cannot be found (it never reads the
/// original's).
#[test]
fn a_store_moved_with_mv_answers_the_same_and_names_no_path() {
    let w = World::new();
    let store = w.store.clone();
    let ws = w.ws("ws");
    let sid = w.new_session(&ws);
    write(&w, &store, &sid, "a.txt", "a1");
    write(&w, &store, &sid, "b.txt", "b1");
    write(&w, &store, &sid, "a.txt", "a2");
    let par = w.path("par");
    let p = fork(&w, &store, &sid, "1", Some(&par));
    write(&w, &store, &p, "d.txt", "d1");
    write(&w, &store, &p, "a.txt", "p1");
    let b = fork(&w, &store, &sid, "2", None);
    write(&w, &store, &b, "a.txt", "c1");
    write(&w, &store, &b, "c.txt", "c1");
    let c = fork(&w, &store, &b, "1", None);
    write(&w, &store, &c, "e.txt", "e1");

    // Walversion 2, parents by reference: no byte of the store names where it is.
    for id in [&sid, &p, &b, &c] {
        let recs = check_wal(&store.join("sessions").join(id).join("wal.jsonl"));
        assert_eq!(recs[0]["walVersion"], 2, "{}", recs[0]);
        if let Some(fb) = recs.iter().find(|r| r["record"] == "fork-branch") {
            assert!(fb.get("parentWal").is_none(), "{fb}");
            assert!(fb.get("parentRemote").is_none(), "{fb}");
        }
    }
    let holding = files_holding(&store, store.to_str().unwrap());
    assert!(
        holding.is_empty(),
        "files of the store name its path: {holding:?}"
    );

    let q = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let queries = vec![
        q(&["log"]),
        q(&["timeline", &sid]),
        q(&["timeline", &p]),
        q(&["timeline", &b]),
        q(&["timeline", &c]),
        q(&["branch", &sid]),
        q(&["branch", &p]),
        q(&["branch", &b]),
        q(&["branch", &c]),
        q(&["compare", &b, &p]),
        q(&["compare", &sid, &b]),
        q(&["compare", &b, &c]),
        q(&["read", &b, "a.txt", "--at", "0"]),
        q(&["read", &p, "a.txt", "--at", "0"]),
        q(&["read", &c, "a.txt", "--at", "0"]),
        q(&["read", &c, "e.txt", "--at", "1"]),
        q(&["read", &sid, "a.txt", "--at", "3"]),
    ];
    let before = answers(&w, &store, &queries);
    // The answers are the right ones, not merely stable.
    let get = |all: &[(String, String)], k: &str| -> Value {
        serde_json::from_str(&all.iter().find(|(q, _)| q == k).unwrap().1).unwrap()
    };
    let read = |k: &str| get(&before, k)["content"].clone();
    assert_eq!(read(&format!("read {b} a.txt --at 0")), "a1");
    assert_eq!(read(&format!("read {p} a.txt --at 0")), "a1");
    assert_eq!(read(&format!("read {c} a.txt --at 0")), "c1");
    assert_eq!(read(&format!("read {sid} a.txt --at 3")), "a2");
    let lin = get(&before, &format!("branch {c}"));
    assert_eq!(lin["parent"], b.as_str(), "{lin}");
    assert_eq!(
        lin["parentWal"],
        format!("<store>/sessions/{b}/wal.jsonl"),
        "{lin}"
    );
    assert_eq!(
        get(&before, &format!("compare {b} {p}"))["relation"],
        "siblings"
    );
    let edges = get(&before, "log")["edges"].clone();
    assert_eq!(edges.as_array().unwrap().len(), 3, "{edges}");

    // A copy without S's WAL says so; it never reads the original store's.
    let copy = w.path("store-copy");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&store)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    fs::remove_dir_all(copy.join("sessions").join(&sid)).unwrap();
    for args in [
        vec!["compare", b.as_str(), p.as_str()],
        vec!["branch", b.as_str()],
        vec!["compare", b.as_str(), c.as_str()],
    ] {
        let msg = json_in(&w, &copy, &args).err(1, "io");
        assert!(
            msg.contains(&sid) && msg.contains("cannot be found"),
            "{msg}"
        );
        assert!(!msg.contains(&format!("{}/", store.display())), "{msg}");
    }
    fs::remove_dir_all(&copy).unwrap();
    // A branch's WAL taken out of its store names no place to look for its parent (its
    // old path is not followed): an error that says so.
    let loose = w.path("loose.jsonl");
    fs::copy(store.join("sessions").join(&b).join("wal.jsonl"), &loose).unwrap();
    let msg = w
        .json(&["branch", "--wal", loose.to_str().unwrap()])
        .err(1, "io");
    assert!(
        msg.contains(&sid) && msg.contains("not inside a store"),
        "{msg}"
    );

    // `mv` the store to another directory: the same answers.
    let elsewhere = w.path("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    let moved = elsewhere.join("moved-store");
    mv(&store, &moved);
    assert!(!store.exists());
    let after = answers(&w, &moved, &queries);
    for ((q, a), (_, z)) in before.iter().zip(&after) {
        assert_eq!(a, z, "`{q}` answers differently after the move");
    }

    // And work goes on there: steps, a new fork of a branch, its lineage through the store.
    write(&w, &moved, &c, "f.txt", "f1");
    let par2 = w.path("par2");
    let d = fork(&w, &moved, &c, "2", Some(&par2));
    let lin = ok_in(&w, &moved, &["branch", &d]);
    assert_eq!(lin["parent"], c.as_str(), "{lin}");
    assert_eq!(
        s(&lin["parentWal"]),
        moved
            .join("sessions")
            .join(&c)
            .join("wal.jsonl")
            .to_str()
            .unwrap(),
        "{lin}"
    );
    let r = ok_in(&w, &moved, &["read", &d, "f.txt", "--at", "0"]);
    assert_eq!(r["content"], "f1", "{r}");
    let cmp = ok_in(&w, &moved, &["compare", &c, &d]);
    assert_eq!(cmp["relation"], "parent-branch", "{cmp}");
}

/// The ids tests/fixtures/make-store-v1.sh printed when it made store-v1.tar.gz.
const V1_S: &str = "64ebf60322a9968f2cce70f0b6b5a070";
const V1_R: &str = "76465025a0f9d5076449443e9614abb4";
const V1_P: &str = "910894950de8975942b952ee3c184546";
const V1_B: &str = "09dd28333e419e69279eaa3eac1af4b4";

/// The walVersion-1 store of tests/fixtures, unpacked under `dir` as `dir/store`.
fn v1_store(dir: &Path) -> PathBuf {
    let archive = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/store-v1.tar.gz"
    );
    let st = std::process::Command::new("tar")
        .arg("-C")
        .arg(dir)
        .arg("-xzf")
        .arg(archive)
        .status()
        .unwrap();
    assert!(st.success(), "tar -xzf {archive}");
    dir.join("store")
}

/// A walVersion-1 store written by the revl before walVersion 2 (its branches' `parentWal`
/// name the absolute path of a directory long gone, and `remote origin: sessions/<id>`),
/// unpacked somewhere else: `log`, `timeline`, `branch`, `compare` and `read --at` across its
/// forks answer, every parent found by id. A parent of a remote is found in the store's
/// mirror of that remote. (Its workspaces went with the directory it was made in, so only
/// the read verbs apply; the next test goes on writing to a walVersion-1 WAL.)
#[test]
fn a_walversion_1_store_reads_after_it_was_moved() {
    let w = World::new();
    let store = v1_store(w.root());
    let wal = |id: &str| store.join("sessions").join(id).join("wal.jsonl");
    for id in [V1_S, V1_R, V1_P, V1_B] {
        assert_eq!(check_wal(&wal(id))[0]["walVersion"], 1, "{id}");
    }
    // The fixture's branches name paths that exist nowhere now.
    let fb = |id: &str| {
        check_wal(&wal(id))
            .into_iter()
            .find(|r| r["record"] == "fork-branch")
            .unwrap()
    };
    let recorded = fb(V1_B)["parentWal"].as_str().unwrap().to_string();
    assert!(
        recorded.starts_with('/') && !Path::new(&recorded).exists(),
        "{recorded}"
    );
    assert_eq!(
        fb(V1_R)["parentWal"],
        format!("remote origin: sessions/{V1_S}")
    );

    // log: the family, each fork with its mode.
    let log = ok_in(&w, &store, &["log"]);
    let mut edges: Vec<(String, String, i64, String)> = log["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                s(&e["parent"]).into(),
                s(&e["branch"]).into(),
                e["at"].as_i64().unwrap(),
                s(&e["mode"]).into(),
            )
        })
        .collect();
    edges.sort();
    let mut want = vec![
        (V1_S.into(), V1_R.into(), 1, "parallel".into()),
        (V1_S.into(), V1_P.into(), 1, "parallel".into()),
        (V1_S.into(), V1_B.into(), 2, "serial".into()),
    ];
    want.sort();
    assert_eq!(edges, want, "{log}");

    // timeline.
    let tl = ok_in(&w, &store, &["timeline", V1_S]);
    assert_eq!(tl["state"], "frozen", "{tl}");
    assert_eq!(tl["steps"].as_array().unwrap().len(), 4, "{tl}");
    let tl = ok_in(&w, &store, &["timeline", V1_B]);
    assert_eq!(tl["steps"][1]["label"], "fs.write a.txt", "{tl}");

    // branch: each parent found in this store, by id; the remote's name kept.
    let in_store = |id: &str| wal(id).to_str().unwrap().to_string();
    for id in [V1_P, V1_B, V1_R] {
        let lin = ok_in(&w, &store, &["branch", id]);
        assert_eq!(lin["parent"], V1_S, "{lin}");
        assert_eq!(lin["parentWal"], in_store(V1_S), "{lin}");
    }
    let lin = ok_in(&w, &store, &["branch", V1_R]);
    assert_eq!(lin["parentRemote"], "origin", "{lin}");
    assert!(ok_in(&w, &store, &["branch", V1_B])
        .get("parentRemote")
        .is_none());

    // compare reads S's history up to each fork point.
    let cmp = ok_in(&w, &store, &["compare", V1_B, V1_P]);
    assert_eq!(cmp["relation"], "siblings", "{cmp}");
    assert_eq!(cmp["delta"]["sharedPrefix"], 1, "{cmp}");
    let cmp = ok_in(&w, &store, &["compare", V1_S, V1_B]);
    assert_eq!(cmp["relation"], "parent-branch", "{cmp}");

    // read --at across the forks.
    let read = |id: &str, path: &str, at: &str| {
        ok_in(&w, &store, &["read", id, path, "--at", at])["content"].clone()
    };
    assert_eq!(read(V1_B, "a.txt", "0"), "a1"); // S's a.txt at the fork point 2
    assert_eq!(read(V1_B, "a.txt", "1"), "c1");
    assert_eq!(read(V1_P, "d.txt", "1"), "d1");
    assert_eq!(read(V1_R, "e.txt", "1"), "e1");
    assert_eq!(read(V1_S, "a.txt", "3"), "a2");

    // Without S's own WAL, R's parent is read from the store's mirror of remote origin;
    // B's (a parent of this store) is an error naming S.
    fs::remove_dir_all(store.join("sessions").join(V1_S)).unwrap();
    let lin = ok_in(&w, &store, &["branch", V1_R]);
    assert_eq!(
        lin["parentWal"],
        store
            .join("remotes/origin/mirror/sessions")
            .join(V1_S)
            .join("wal.jsonl")
            .to_str()
            .unwrap(),
        "{lin}"
    );
    let msg = json_in(&w, &store, &["branch", V1_B]).err(1, "io");
    assert!(
        msg.contains(V1_S) && msg.contains("cannot be found"),
        "{msg}"
    );
}

/// The version policy: a walVersion-2 `fork-branch` holding a path, or a walVersion-1 one
/// without it, is refused (`corrupt-wal`, naming the record); a parent reference that is no session id, or a
/// remote that is no remote name, never builds a path. A walVersion-1 branch (as the revl
/// before walVersion 2 wrote it) reads, is appended to as walVersion 1, and its own fork is
/// a walVersion-2 WAL whose lineage reads through it.
#[test]
fn a_fork_branch_that_mixes_the_versions_is_refused_and_version_1_goes_on() {
    let w = World::new();
    let store = w.store.clone();
    let (sid, _ws) = w.session();
    write(&w, &store, &sid, "a.txt", "1");
    write(&w, &store, &sid, "a.txt", "2");
    let b = fork(&w, &store, &sid, "1", Some(&w.path("par")));
    let wal = store.join("sessions").join(&b).join("wal.jsonl");
    let good = fs::read_to_string(&wal).unwrap();
    // B's WAL with its header's and its fork-branch's bodies rewritten, each line resealed.
    let doctor = |header: &dyn Fn(&str) -> String, fb: &dyn Fn(&str) -> String| {
        let out: String = good
            .lines()
            .map(|l| {
                let body = &l[..l.rfind(",\"crc\"").unwrap()];
                if body.starts_with("{\"record\":\"header\"") {
                    seal(&header(body))
                } else if body.starts_with("{\"record\":\"fork-branch\"") {
                    seal(&fb(body))
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        fs::write(&wal, &out).unwrap();
    };
    let same = |b: &str| b.to_string();
    let v1 = |b: &str| b.replace("\"walVersion\":2,", "\"walVersion\":1,");
    let parent = format!("\"parent\":\"{sid}\",");
    let path = format!("\"parentWal\":\"{}\",", w.wal(&sid).display());
    let add = |extra: &str| {
        let (parent, extra) = (parent.clone(), extra.to_string());
        move |b: &str| b.replace(&parent, &format!("{parent}{extra}"))
    };
    let refused = |header: &dyn Fn(&str) -> String, fb: &dyn Fn(&str) -> String| {
        doctor(header, fb);
        let msg = w.json(&["branch", &b]).err(1, "corrupt-wal");
        assert!(msg.contains("fork-branch"), "{msg}");
    };
    // v2 with a path; v1 without one; v1 with a remote; a hostile remote name.
    refused(&same, &add(&path));
    refused(&v1, &same);
    refused(&v1, &add(&format!("{path}\"parentRemote\":\"origin\",")));
    refused(&same, &add("\"parentRemote\":\"../../x\","));
    // A parent that is no session id: named in the error, no path built from it.
    doctor(&same, &|b: &str| {
        b.replace(&format!("\"parent\":\"{sid}\""), "\"parent\":\"../../etc\"")
    });
    let msg = w.json(&["branch", &b]).err(1, "io");
    assert!(
        msg.contains("../../etc") && msg.contains("not a session id"),
        "{msg}"
    );

    // v1 with its path, as the revl before walVersion 2 wrote it, but the store moved: the
    // path names nothing, the parent is found by id.
    let gone = format!("\"parentWal\":\"/nonexistent/store/sessions/{sid}/wal.jsonl\",");
    doctor(&v1, &add(&gone));
    let lin = w.json(&["branch", &b]).ok().clone();
    assert_eq!(lin["parent"], sid.as_str(), "{lin}");
    assert_eq!(lin["parentWal"], w.wal(&sid).to_str().unwrap(), "{lin}");
    // It goes on: appended to as walVersion 1; its fork is walVersion 2.
    let before = fs::read(&wal).unwrap();
    write(&w, &store, &b, "b.txt", "b1");
    let after = fs::read(&wal).unwrap();
    assert!(after.starts_with(&before), "appended, not rewritten");
    assert_eq!(check_wal(&wal)[0]["walVersion"], 1);
    let c = fork(&w, &store, &b, "1", Some(&w.path("par2")));
    let recs = check_wal(&store.join("sessions").join(&c).join("wal.jsonl"));
    assert_eq!(recs[0]["walVersion"], 2);
    let fb = recs.iter().find(|r| r["record"] == "fork-branch").unwrap();
    assert_eq!(fb["parent"], b.as_str(), "{fb}");
    assert!(fb.get("parentWal").is_none(), "{fb}");
    let cmp = w.json(&["compare", &b, &c]).ok().clone();
    assert_eq!(cmp["relation"], "parent-branch", "{cmp}");
    // Both histories begin with the root's step 1, read through B's walVersion-1 record.
    assert!(cmp["delta"]["sharedPrefix"].as_u64() >= Some(1), "{cmp}");
    let r = w.json(&["read", &c, "b.txt", "--at", "0"]).ok().clone();
    assert_eq!(r["content"], "b1", "{r}");
}
