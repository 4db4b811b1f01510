//! Resource faults: a full disk during a write, a commit and a fork, and a manifest tool that
//! hangs past its timeout. Each full-disk scenario runs twice: on a real 2 MiB tmpfs holding
//! both the store and the workspace (mounting it needs root: plain `cargo test` leaves these
//! out (ignored), `scripts/test` runs them as root), and with `REVL_FAILPOINT=io.enospc`
//! (the `_by_failpoint` tests, which need nothing and always run).
//!
//! Each time: a clear one-line error (code `io`, "No space left"), the WAL and the workspace
//! stay consistent (a fresh `status` works once there is room for its repair; the workspace
//! equals the timeline), and the session works again once the space returns.

use crate::common;
use crate::common::manifest::{self, tool};

use common::{check_wal, snapshot, temp_leftovers, Out, Snapshot, World};
use revl::sink::Sink;
use serde_json::Value;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A small real filesystem, unmounted on drop. Mounting it needs root: without, the test
/// fails, saying so (a skip would print `ok`).
struct SmallFs {
    dir: PathBuf,
}

impl SmallFs {
    fn mount(at: &Path) -> SmallFs {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(at)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a 2 MiB tmpfs needs root: run it as root, as scripts/test does ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        SmallFs {
            dir: at.to_path_buf(),
        }
    }

    /// Fill every free byte with a filler file; returns its path.
    fn fill(&self) -> PathBuf {
        let p = self.dir.join("filler");
        let mut f = File::create(&p).unwrap();
        let buf = vec![0xa5u8; 1 << 20];
        let mut chunk = buf.len();
        while chunk > 0 {
            match f.write(&buf[..chunk]) {
                Ok(n) if n == chunk => {}
                _ => chunk /= 2,
            }
        }
        let _ = f.sync_all();
        p
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Where a scenario runs: a world whose store and workspace live on the small filesystem
/// (`fs`), or on the world's own disk with the full disk made by a failpoint (`fs` is
/// `None`).
struct Disk {
    w: World,
    ws: PathBuf,
    fs: Option<SmallFs>,
}

/// A [`Disk`] on a real 2 MiB tmpfs (root).
fn small_tmpfs() -> Disk {
    disk(true)
}

/// A [`Disk`] whose full disk is `REVL_FAILPOINT=io.enospc`.
fn failpoint() -> Disk {
    disk(false)
}

fn disk(real: bool) -> Disk {
    let mut w = World::new();
    let fs = real.then(|| SmallFs::mount(&w.path("disk")));
    let base = match &fs {
        Some(f) => f.dir.clone(),
        None => w.path("disk"),
    };
    w.store = base.join("store");
    let ws = base.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = std::fs::canonicalize(&ws).unwrap();
    Disk { w, ws, fs }
}

/// The error for a full disk (docs/reference.md, "Errors and exit codes"): exit 1, code
/// `io`, one stderr line saying so.
#[track_caller]
fn assert_no_space(out: &Out) {
    let msg = out.err(1, "io");
    assert!(
        msg.contains("No space left"),
        "the message must say the disk is full: {msg}"
    );
}

/// The workspace equals the expected tree and holds no temp file; the WAL reads.
#[track_caller]
fn assert_consistent(d: &Disk, sid: &str, want: &Snapshot) {
    let tl = d.w.json(&["timeline", sid]).ok().clone();
    assert_eq!(tl["torn"], false);
    check_wal(&d.w.wal(sid));
    assert!(
        temp_leftovers(&d.ws).is_empty(),
        "{:?}",
        temp_leftovers(&d.ws)
    );
    common::assert_snap_eq(want, &snapshot(&d.ws), "workspace after a full disk");
    let v = d.w.json(&["verify", sid]).ok().clone();
    assert_eq!(
        v["drift"],
        serde_json::json!([]),
        "verify reports drift: {v}"
    );
}

fn labels(tl: &Value) -> Vec<String> {
    tl["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["label"].as_str().unwrap().to_string())
        .collect()
}

#[test]
#[ignore = "needs root: run by scripts/test (README)"]
fn a_full_disk_during_a_write() {
    a_full_disk_during_a_write_on(small_tmpfs());
}

#[test]
fn a_full_disk_during_a_write_by_failpoint() {
    a_full_disk_during_a_write_on(failpoint());
}

fn a_full_disk_during_a_write_on(d: Disk) {
    let sid = d.w.new_session(&d.ws);
    d.w.json(&["write", &sid, "small", "--content", "kept"])
        .ok();
    let before = snapshot(&d.ws);
    let big = d.w.path("big.bin");
    std::fs::write(&big, vec![b'x'; 300 * 1024]).unwrap();
    let big = big.to_str().unwrap();
    let out = match &d.fs {
        Some(fs) => {
            let filler = fs.fill();
            let out = d.w.json(&["write", &sid, "dir/big", "--from", big]);
            assert_no_space(&out);
            // While the disk is still full, nothing changed and the session reads.
            common::assert_snap_eq(&before, &snapshot(&d.ws), "after the refused write");
            std::fs::remove_file(filler).unwrap();
            out
        }
        None => {
            let out = d.w.json_env(
                &["write", &sid, "dir/big", "--from", big],
                &[("REVL_FAILPOINT", "io.enospc:2")],
            );
            assert_no_space(&out);
            out
        }
    };
    drop(out);
    // Space is back: a fresh status repairs whatever was open; nothing was acknowledged.
    d.w.json(&["status", &sid]).ok();
    let tl = d.w.timeline(&sid);
    assert_eq!(labels(&tl), ["session/hinge", "fs.write small"]);
    assert_consistent(&d, &sid, &before);
    // And the session works again.
    d.w.json(&["write", &sid, "dir/big", "--from", big]).ok();
    assert_eq!(
        std::fs::read(d.ws.join("dir/big")).unwrap().len(),
        300 * 1024
    );
    let tl = d.w.timeline(&sid);
    assert_eq!(
        labels(&tl),
        ["session/hinge", "fs.write small", "fs.write dir/big"]
    );
    d.w.json(&["step-back", &sid, "--to", "1"]).ok();
    assert_consistent(&d, &sid, &before);
}

/// A step-back whose disk fills after some inverses ran (preserving a large hand edit needs
/// room the disk no longer has): the error says the step-back stopped part-way and which
/// inverses had run, never "nothing was acknowledged"; once there is room, the next command
/// finishes it and lists what it preserved, and nothing is lost.
#[test]
#[ignore = "needs root: run by scripts/test (README)"]
fn a_full_disk_during_a_step_back() {
    let d = small_tmpfs();
    let sid = d.w.new_session(&d.ws);
    for (p, c) in [("a.txt", "1"), ("b.txt", "2"), ("c.txt", "3")] {
        d.w.json(&["write", &sid, p, "--content", c]).ok();
    }
    // A hand edit as large as a fifth of the disk, then the rest of the disk filled.
    let hand: Vec<u8> = (0..400 * 1024).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.ws.join("a.txt"), &hand).unwrap();
    // Room left for the small records and blobs of the first two inverses, not for it.
    let filler = d.fs.as_ref().unwrap().fill();
    let len = std::fs::metadata(&filler).unwrap().len();
    File::options()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(len.saturating_sub(96 * 1024))
        .unwrap();
    let out = d.w.json(&["step-back", &sid, "--to", "1"]);
    let msg = out.err(1, "io");
    let hint = out.doc()["error"]["hint"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(msg.contains("No space left"), "{msg}");
    assert!(
        msg.contains("stopped part-way") && hint.contains("step(s) 2, 3 had run"),
        "the error says what had run: {msg} / {hint}"
    );
    assert!(!hint.contains("nothing was acknowledged"), "{hint}");
    std::fs::remove_file(filler).unwrap();
    let st = d.w.run(&["status", &sid]);
    assert_eq!(st.code, Some(0), "{}", st.dump());
    assert!(
        st.stdout.contains("finished the scoped step-back") && st.stdout.contains("a.txt"),
        "the repair lists what it preserved: {}",
        st.stdout
    );
    assert_eq!(std::fs::read(d.ws.join("a.txt")).unwrap(), b"1");
    // The hand bytes are in the blob store.
    let wal = std::fs::read_to_string(d.w.wal(&sid)).unwrap();
    let digest = wal
        .lines()
        .find(|l| l.contains("\"preserved\"") && l.contains("a.txt"))
        .and_then(|l| l.split("\"digest\":\"").nth(1))
        .map(|r| r[..64].to_string())
        .expect("a preserved record for a.txt");
    let back = d.w.path("back");
    d.w.run(&["blob", &digest, "--out", back.to_str().unwrap()]);
    assert_eq!(std::fs::read(back).unwrap(), hand);
}

#[test]
#[ignore = "needs root: run by scripts/test (README)"]
fn a_full_disk_during_a_commit() {
    a_full_disk_during_a_commit_on(small_tmpfs());
}

#[test]
fn a_full_disk_during_a_commit_by_failpoint() {
    a_full_disk_during_a_commit_on(failpoint());
}

fn a_full_disk_during_a_commit_on(d: Disk) {
    const SENDS: usize = 120;
    let sink = Sink::start().unwrap();
    let manifest = d.w.path("revl.toml");
    std::fs::write(
        &manifest,
        manifest::text(&[tool("hold", "deferred")
            .scope(&["mail"])
            .post(&sink.url("/held"))]),
    )
    .unwrap();
    let sid = d.w.new_session_with(&d.ws, &manifest);
    d.w.json(&["write", &sid, "deliverable", "--content", "done"])
        .ok();
    for i in 0..SENDS {
        d.w.json(&["call", &sid, "hold", "--args", &format!("{{\"n\":{i}}}")])
            .ok();
    }
    let want = snapshot(&d.ws);
    let hash = d.w.json(&["commit", &sid]).ok()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let out = match &d.fs {
        Some(fs) => {
            // The flushed records of 120 sends need more than the WAL's last page.
            let filler = fs.fill();
            let out = d.w.json(&["commit-confirm", &sid, "--hash", &hash]);
            assert_no_space(&out);
            // While full, a status whose repair must write says so, on one line.
            let st = d.w.json(&["status", &sid]);
            if st.code != Some(0) {
                assert_no_space(&st);
            }
            std::fs::remove_file(filler).unwrap();
            out
        }
        None => {
            let out = d.w.json_env(
                &["commit-confirm", &sid, "--hash", &hash],
                &[("REVL_FAILPOINT", "io.enospc:40")],
            );
            assert_no_space(&out);
            out
        }
    };
    drop(out);
    // Space is back: the interrupted commit is repaired as docs/architecture.md, "Attach
    // and repair" says.
    let st = d.w.json(&["status", &sid]).ok().clone();
    assert_eq!(st["state"], "committed");
    let got = sink.received();
    let mut keys: Vec<String> = got
        .iter()
        .map(|r| r.idempotency_key.clone().unwrap())
        .collect();
    let n_arrived = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n_arrived, "a held send arrived twice");
    assert!(
        n_arrived < SENDS,
        "the full disk stopped the flush part-way"
    );
    let owed = st["owed"].as_array().unwrap();
    let recs = check_wal(&d.w.wal(&sid));
    let flushed = recs.iter().filter(|r| r["record"] == "flushed").count();
    // Every send is flushed or owed; nothing was fired by the repair.
    assert_eq!(flushed + owed.len(), SENDS);
    assert!(n_arrived <= flushed + 1, "repair fired sends");
    assert_eq!(sink.received().len(), n_arrived);
    assert_consistent(&d, &sid, &want);
    // The operator resends an owed send that never arrived: it fires once.
    let never = owed
        .iter()
        .filter_map(|o| o["seq"].as_u64())
        .find(|s| !keys.contains(&format!("{sid}-{s}")))
        .expect("an owed send that never arrived");
    d.w.json(&["resend", &sid, "--seq", &never.to_string()])
        .ok();
    assert_eq!(sink.received().len(), n_arrived + 1);
    // And the workspace takes a new session.
    let sid2 = d.w.new_session(&d.ws);
    d.w.json(&["write", &sid2, "next", "--content", "ok"]).ok();
}

#[test]
#[ignore = "needs root: run by scripts/test (README)"]
fn a_full_disk_during_a_fork() {
    a_full_disk_during_a_fork_on(small_tmpfs());
}

#[test]
fn a_full_disk_during_a_fork_by_failpoint() {
    a_full_disk_during_a_fork_on(failpoint());
}

fn a_full_disk_during_a_fork_on(d: Disk) {
    let sid = d.w.new_session(&d.ws);
    for i in 0..6 {
        d.w.json(&[
            "write",
            &sid,
            &format!("f{i}"),
            "--content",
            &"a".repeat(3000),
        ])
        .ok();
    }
    let at_k = snapshot(&d.ws);
    let k = d.w.head(&sid);
    // The tail rewrites and deletes: its rewind must write files back.
    for i in 0..6 {
        d.w.json(&["write", &sid, &format!("f{i}"), "--content", "b"])
            .ok();
    }
    d.w.json(&["delete", &sid, "f0"]).ok();
    d.w.json(&["write", &sid, "new/deep/file", "--content", "c"])
        .ok();
    let head_snap = snapshot(&d.ws);
    let fork =
        d.w.json(&["fork", &sid, "--at", &k.to_string()])
            .ok()
            .clone();
    let hash = fork["hash"].as_str().unwrap().to_string();
    let out = match &d.fs {
        Some(fs) => {
            let filler = fs.fill();
            let out = d.w.json(&["fork-confirm", &sid, "--hash", &hash]);
            std::fs::remove_file(filler).unwrap();
            out
        }
        None => d.w.json_env(
            &["fork-confirm", &sid, "--hash", &hash],
            &[("REVL_FAILPOINT", "io.enospc:3")],
        ),
    };
    let st = d.w.json(&["status", &sid]).ok().clone();
    println!(
        "fork on a full disk: exit {:?}, {}",
        out.code,
        out.stderr.trim()
    );
    match out.code {
        Some(1) => {
            assert_no_space(&out);
            // No branch exists: the fork is abandoned at repair, its rewind completed.
            assert_eq!(st["state"], "live", "{st}");
            let recs = check_wal(&d.w.wal(&sid));
            assert_eq!(
                recs.iter()
                    .filter(|r| r["record"] == "fork-abandoned")
                    .count(),
                1
            );
            assert_consistent(&d, &sid, &at_k);
            // The session works again: fork once more, for real.
            let fork =
                d.w.json(&["fork", &sid, "--at", &k.to_string()])
                    .ok()
                    .clone();
            let hash = fork["hash"].as_str().unwrap();
            let done =
                d.w.json(&["fork-confirm", &sid, "--hash", hash])
                    .ok()
                    .clone();
            let branch = done["branch"].as_str().unwrap().to_string();
            assert_consistent(&d, &branch, &at_k);
            d.w.json(&["write", &branch, "after", "--content", "x"])
                .ok();
        }
        Some(0) => {
            // The fork fitted: every inverse that could not write is listed as failed, and
            // the workspace holds exactly the post-images of those steps.
            let doc = out.doc();
            assert_eq!(doc["forked"], true);
            assert_eq!(st["state"], "frozen");
            let failed = doc["failed"].as_array().unwrap();
            if failed.is_empty() {
                assert_consistent(&d, doc["branch"].as_str().unwrap(), &at_k);
            } else {
                assert_eq!(doc["residue"]["clean"], false);
                assert_ne!(snapshot(&d.ws), head_snap);
            }
        }
        _ => panic!("{}", out.dump()),
    }
}

/// A manifest tool that hangs is bounded by its timeout and reported: an opaque step, code
/// `timeout`, exit 1, quickly; the hung process is killed.
#[test]
fn a_hanging_tool_is_bounded_by_its_timeout() {
    let w = World::new();
    let ws = w.ws("ws");
    let manifest = w.path("revl.toml");
    std::fs::write(
        &manifest,
        manifest::text(&[
            tool("hang", "effect")
                .scope_table("caps = [], confined = true")
                .run(&["sleep", "30.4242"])
                .undo("unhang")
                .timeout(1),
            tool("unhang", "inverse").scope(&[]).run(&["true"]),
        ]),
    )
    .unwrap();
    let sid = w.new_session_with(&ws, &manifest);
    let t0 = Instant::now();
    let out = w.json(&["call", &sid, "hang"]);
    let took = t0.elapsed();
    out.err(1, "timeout");
    assert_eq!(out.doc()["error"]["step"], 1, "the error carries the step");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let tl = w.timeline(&sid);
    assert_eq!(tl["steps"][1]["kind"], "opaque");
    assert_eq!(tl["steps"][1]["label"], "hang/opaque");
    // A fork over it is refused, honestly.
    w.json(&["fork", &sid, "--at", "0"]).err(1, "KIND_OPAQUE");
    // The sleeping child did not outlive the call.
    std::thread::sleep(Duration::from_millis(100));
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| c.windows(7).any(|x| x == b"30.4242"));
    assert!(!alive, "the hung tool is still running");
}
