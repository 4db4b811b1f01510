//! revl's benchmarks: each measures revl next to the baseline a user would reach for, in
//! the same run, and prints a table. Figures and method: docs/performance.md.
//!
//!   cargo bench -p revl --bench revl                # every section
//!   cargo bench -p revl --bench revl -- write attach # some sections
//!
//! Sections: write, attach, incremental (a long-lived handle's call at the 10th, 1,000th and
//! 10,000th write; `status` with a 50 MB held-send argument), index (`new` in a store of
//! 1,000 sessions of 1,000 steps), partition, offline, topology, fork, restore, enqueue, commit,
//! exec, parallel (parallel fork on ext4, and on XFS and btrfs images when run as root),
//! layers (layered branches of a 100,000-file workspace on ext4: the first and later
//! siblings, as root and as an unprivileged user, memory per idle branch, 100 siblings;
//! root only),
//! view (the lineage page at 500 sessions and 10,000 steps), python (the Python binding's
//! cost per call next to the Rust library's; needs `REVL_BENCH_PYTHON`, an interpreter with
//! the package installed), egress (declared egress, docs/user-guide.md §8: added latency per
//! connection through the proxy with and without its durable record, against a direct
//! connect; a 100 MB download through the proxy against direct), agents (Claude Code on revl,
//! docs/agents.md: what the hooks and revl add to one shell command, and one scripted task,
//! against the same agent alone; needs `REVL_BENCH_CLAUDE`, Claude Code's binary).
//! Timings are medians of repeated runs (wall clock, release build). A benchmark never fails a
//! test: the goals are checked by reading the table.

use revl::sink::Sink;
use revl_core::wal::{create_wal, encode_line, Record, StepRecord};
use revl_core::{ExecOptions, Failpoints, FileOp, StepBackMode, Store};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// The scripted model the agent tests drive Claude Code with (docs/agents.md).
#[path = "../tests/it/common/fake_model.rs"]
#[allow(dead_code)]
mod fake_model;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<F: FnMut()>(n: usize, mut f: F) -> Duration {
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.1} µs")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

fn row(name: &str, value: String) {
    println!("  {name:<58} {value}");
}

fn store(dir: &Path) -> Store {
    Store::open(&dir.join("store"), Failpoints::none()).unwrap()
}

/// A synthetic session WAL of `n` steps: a realistic mix of file effects (inline preimages),
/// provisions, boundaries and emissions. Returns (store, id).
fn synthetic(dir: &Path, n: usize, tail_files: usize) -> (Store, String) {
    let st = store(dir);
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let id = format!("{:032x}", n as u128 + 1);
    std::fs::create_dir_all(st.session_dir(&id)).unwrap();
    let mut recs = vec![Record::Header {
        wal_version: 1,
        seq: 0,
        session: id.clone(),
        workspace: std::fs::canonicalize(&ws).unwrap().display().to_string(),
        manifest_digest: None,
        created_by: "bench".into(),
        guarantee: "g".into(),
        ts: None,
    }];
    for i in 0..n as u64 {
        let (kind, label, detail, scope, undo) = if i == 0 {
            ("hinge", "session/hinge".to_string(), json!({}), None, None)
        } else if i as usize >= n - tail_files {
            let p = format!("f{i}.txt");
            (
                "effect",
                format!("fs.write {p}"),
                json!({"path": p, "after": {"kind": "file", "digest": "0".repeat(64), "mode": "0644"}}),
                Some(json!({"caps": ["fs"]})),
                Some(json!({"type": "restore", "entries": [{"path": p, "kind": "absent"}]})),
            )
        } else {
            match i % 4 {
                0 => (
                    "provision",
                    format!("provide k{}", i % 7),
                    json!({"key": format!("k{}", i % 7), "value": format!("v{i}"), "previous": null}),
                    None,
                    Some(json!({"type": "withdraw"})),
                ),
                1 => ("boundary", "turn/boundary".into(), json!({}), None, None),
                2 => (
                    "emission",
                    "svc.call".into(),
                    json!({"key": format!("{id}-{i}"), "service": "svc", "method": "call", "args": {"n": i}}),
                    Some(json!({"caps": ["net"]})),
                    None,
                ),
                _ => ("boundary", "turn/boundary".into(), json!({}), None, None),
            }
        };
        let mut rec = StepRecord::new(i + 1, i, kind.into(), &label, "bench", &detail).unwrap();
        rec.set_scope(scope.as_ref()).unwrap();
        rec.undo_idempotent = undo.as_ref().map(|_| true);
        rec.set_undo(undo.as_ref()).unwrap();
        rec.set_ts(Some("2026-12-02T00:00:00.000Z")).unwrap();
        recs.push(Record::Step(rec));
    }
    create_wal(&st.wal_path(&id), &recs, &Failpoints::none()).unwrap();
    (st, id)
}

fn bench_write() {
    println!(
        "\nwitnessed overwrite of an existing 4 KiB file (durable), next to a plain write+fsync"
    );
    let tmp = tempfile::tempdir().unwrap();
    let st = store(tmp.path());
    let mut s = st.new_session(&tmp.path().join("ws"), None).unwrap();
    let content: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    s.file_effect(FileOp::Write {
        path: "f.bin".into(),
        content: content.clone(),
    })
    .unwrap();
    let plain_path = tmp.path().join("plain.bin");
    std::fs::write(&plain_path, &content).unwrap();
    // Interleaved, one of each per round, so both see the same disk weather.
    let (mut revl, mut plain, mut inplace) = (Vec::new(), Vec::new(), Vec::new());
    let inplace_path = tmp.path().join("inplace.bin");
    std::fs::write(&inplace_path, &content).unwrap();
    for round in 0..300u32 {
        let mut c = content.clone();
        c[0] = round as u8;
        let t = Instant::now();
        s.file_effect(FileOp::Write {
            path: "f.bin".into(),
            content: c.clone(),
        })
        .unwrap();
        revl.push(t.elapsed());
        let t = Instant::now();
        let mut f = std::fs::File::create(&plain_path).unwrap();
        f.write_all(&c).unwrap();
        f.sync_all().unwrap();
        plain.push(t.elapsed());
        let t = Instant::now();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&inplace_path)
            .unwrap();
        f.write_all(&c).unwrap();
        f.sync_data().unwrap();
        inplace.push(t.elapsed());
    }
    let (revl, plain, inplace) = (median(revl), median(plain), median(inplace));
    row(
        "revl write (intent with preimage and new bytes fsynced, pwrite), median",
        fmt(revl),
    );
    row("plain write + fsync, median", fmt(plain));
    println!(
        "  ratio (goal: at most 1.2x)  {:.2}x",
        revl.as_secs_f64() / plain.as_secs_f64()
    );
    row(
        "floor: in-place pwrite + fdatasync (no truncate), median",
        fmt(inplace),
    );
    row(
        "revl / that floor (one ordered sync: the intent's)",
        format!("{:.2}x", revl.as_secs_f64() / inplace.as_secs_f64()),
    );
    row(
        "in-place writes waiting for their files' fsync (batch of 32)",
        format!("{}", s.state().unsettled.len()),
    );
}

fn bench_attach() {
    println!("\nattach: rebuild a session from its WAL");
    for n in [1_000usize, 100_000] {
        let tmp = tempfile::tempdir().unwrap();
        let (st, id) = synthetic(tmp.path(), n, 10);
        let d = time(7, || {
            drop(st.attach(&id).unwrap());
        });
        row(
            &format!("attach, {n} steps (goal at 100,000: under 250 ms)"),
            fmt(d),
        );
    }
}

fn bench_partition() {
    println!("\npartition of a tail (the one classifier)");
    let tmp = tempfile::tempdir().unwrap();
    let (st, id) = synthetic(tmp.path(), 100_000, 10);
    let s = st.attach(&id).unwrap();
    let d = time(21, || {
        std::hint::black_box(revl_core::classify::partition(
            s.steps(),
            revl_core::step::Pos::Start,
        ));
    });
    row(
        "partition of a 100,000-step tail (goal: under 50 ms)",
        fmt(d),
    );
}

fn bench_offline() {
    println!("\noffline: branch --at -1 over a WAL of 1,000,000 records (from the file)");
    let tmp = tempfile::tempdir().unwrap();
    let (_st, id) = synthetic(tmp.path(), 1_000_000, 10);
    let wal = tmp
        .path()
        .join("store/sessions")
        .join(&id)
        .join("wal.jsonl");
    let size = std::fs::metadata(&wal).unwrap().len();
    // To time the binary itself on the same file: REVL_BENCH_KEEP=/some/path.jsonl
    if let Ok(keep) = std::env::var("REVL_BENCH_KEEP") {
        std::fs::copy(&wal, &keep).unwrap();
    }
    // What `revl branch --wal F --at -1 --json` does: read, check and replay (streamed),
    // classify, and write the whole document (750,000 entries here). Freeing the timeline
    // is not timed: the binary exits instead.
    let mut runs = Vec::new();
    let mut phases = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let w = revl_core::lineage::open(&wal).unwrap();
        let open = t.elapsed();
        let doc = w.partition_doc(-1).unwrap();
        let build = t.elapsed() - open;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::sink());
        serde_json::to_writer_pretty(&mut out, &doc).unwrap();
        out.flush().unwrap();
        let total = t.elapsed();
        runs.push(total);
        phases.push((open, build, total - open - build));
        drop(doc);
        drop(w);
    }
    let d = median(runs.clone());
    let (open, build, ser) = phases[runs.iter().position(|r| *r == d).unwrap()];
    row(
        &format!("1,000,001 records, {:.0} MB", size as f64 / 1e6),
        fmt(d),
    );
    row(
        "records per second (goal: at least 1,000,000/s)",
        format!("{:.0}", 1_000_001.0 / d.as_secs_f64()),
    );
    row("  of which: read, check CRCs, parse, replay", fmt(open));
    row("  of which: classify and build the entries", fmt(build));
    row("  of which: write the pretty JSON", fmt(ser));
}

fn bench_topology() {
    println!("\noffline: topology over 1,000 WALs");
    let tmp = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for i in 0..1000 {
        let (_st, id) = synthetic(&tmp.path().join(format!("s{i}")), 20 + i % 5, 2);
        paths.push(
            tmp.path()
                .join(format!("s{i}/store/sessions/{id}/wal.jsonl")),
        );
    }
    let d = time(5, || {
        std::hint::black_box(revl_core::lineage::topology(&paths).unwrap());
    });
    row("topology of 1,000 WALs, total", fmt(d));
}

fn bench_fork() {
    println!("\nfork: enumerate and confirm, tail of N steps (10 file writes, the rest provisions/boundaries/emissions)");
    for n in [10usize, 1_000, 100_000] {
        let tmp = tempfile::tempdir().unwrap();
        let (st, id) = synthetic(tmp.path(), n + 1, 10.min(n));
        let mut s = st.attach(&id).unwrap();
        let t = Instant::now();
        let r = s.fork(0).unwrap();
        let enumerate = t.elapsed();
        let t = Instant::now();
        s.fork_confirm(r.hash.as_deref().unwrap()).unwrap();
        let confirm = t.elapsed();
        row(&format!("tail {n}: enumerate"), fmt(enumerate));
        row(&format!("tail {n}: confirm"), fmt(confirm));
    }
}

fn make_tree(ws: &Path, files: usize) {
    for i in 0..files {
        let d = ws.join(format!("d{}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&d).unwrap();
        }
        std::fs::write(d.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
    }
}

/// A kernel overlay mounted as revl's sandbox mounts its own (the same options), over a copy
/// of the tree, for the exec bench's floor. `None` where this process may not mount (not
/// root).
struct Bare {
    lower: std::path::PathBuf,
    root: std::path::PathBuf,
}

impl Bare {
    fn new(tmp: &Path, tree: &Path) -> Option<Bare> {
        let root = tmp.join("bare");
        let lower = root.join("lower");
        std::fs::create_dir_all(&lower).unwrap();
        let b = Bare { lower, root };
        // Mount once, over the empty lower layer, to see whether this process may.
        let m = b.mount()?;
        b.unmount(&m);
        std::fs::remove_dir(&b.lower).unwrap();
        copy_tree(tree, &b.lower);
        Some(b)
    }

    fn mount(&self) -> Option<std::path::PathBuf> {
        let id = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let (upper, work, mnt) = (
            self.root.join(format!("upper{id}")),
            self.root.join(format!("work{id}")),
            self.root.join(format!("mnt{id}")),
        );
        for d in [&upper, &work, &mnt] {
            std::fs::create_dir(d).unwrap();
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={},redirect_dir=nofollow,metacopy=off,index=off,xino=off,volatile",
            self.lower.display(),
            upper.display(),
            work.display()
        );
        let ok = std::process::Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(&mnt)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(mnt)
    }

    fn unmount(&self, mnt: &Path) {
        let _ = std::process::Command::new("umount").arg(mnt).status();
    }

    /// Mount, run `script` in the overlay, take it down: the time of all three.
    fn run(&self, script: &str) -> Duration {
        let t = Instant::now();
        let mnt = self.mount().expect("the overlay mounted before");
        sh(&mnt, &["sh", "-c", script]);
        self.unmount(&mnt);
        t.elapsed()
    }
}

fn sh(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new(args[0])
        .args(&args[1..])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `git ARGS` in `dir` with a throwaway identity, which must succeed.
fn git(dir: &Path, args: &[&str]) {
    let mut a = vec!["git", "-c", "user.name=b", "-c", "user.email=b@b"];
    a.extend_from_slice(args);
    sh(dir, &a);
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (p, t) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            copy_tree(&p, &t)
        } else {
            std::fs::copy(&p, &t).unwrap();
        }
    }
}

fn bench_restore() {
    println!("\ngoing back to step k after 10 files changed: revl vs a full copy vs a shadow-git checkpoint");
    for files in [1_000usize, 100_000] {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        make_tree(&ws, files);
        // Baselines' checkpoints at k (not timed: the going-back is).
        let snap = tmp.path().join("snap");
        copy_tree(&ws, &snap);
        git(&ws, &["init", "-q"]);
        git(&ws, &["add", "-A"]);
        git(&ws, &["commit", "-qm", "k"]);
        let st = store(tmp.path());
        let mut s = st.new_session(&ws, None).unwrap();
        let k = s.boundary(Some("k")).unwrap().step as i64;
        let change = |s: &mut revl_core::Session, round: usize| {
            for j in 0..10 {
                s.file_effect(FileOp::Write {
                    path: format!("d0/f{j}.txt"),
                    content: format!("changed {round}\n").into_bytes(),
                })
                .unwrap();
            }
        };
        let mut revl_t = Vec::new();
        let mut git_t = Vec::new();
        let mut copy_t = Vec::new();
        for round in 0..3 {
            change(&mut s, round);
            let t = Instant::now();
            s.step_back(k, StepBackMode::Scoped).unwrap();
            revl_t.push(t.elapsed());
            // git: the same 10 changes, then checkout to go back.
            for j in 0..10 {
                std::fs::write(ws.join(format!("d0/f{j}.txt")), "changed by git round\n").unwrap();
            }
            let t = Instant::now();
            sh(&ws, &["git", "checkout", "-q", "--", "."]);
            git_t.push(t.elapsed());
            // copy: the same 10 changes, then replace the workspace by the copy taken at k.
            for j in 0..10 {
                std::fs::write(ws.join(format!("d0/f{j}.txt")), "changed by copy round\n").unwrap();
            }
            let t = Instant::now();
            for e in std::fs::read_dir(&ws).unwrap().flatten() {
                if e.file_name() != ".git" {
                    std::fs::remove_dir_all(e.path()).unwrap();
                }
            }
            copy_tree(&snap, &ws);
            copy_t.push(t.elapsed());
            // The revl session must still see its own world: re-sync its view (the baselines
            // rewrote the same files with the step-k bytes, so nothing drifted).
        }
        let (r, g, c) = (median(revl_t), median(git_t), median(copy_t));
        row(
            &format!("{files} files: revl step-back over 10 writes"),
            fmt(r),
        );
        row(
            &format!("{files} files: shadow-git checkout"),
            format!(
                "{}  ({:.0}x revl)",
                fmt(g),
                g.as_secs_f64() / r.as_secs_f64()
            ),
        );
        row(
            &format!("{files} files: full copy back"),
            format!(
                "{}  ({:.0}x revl)",
                fmt(c),
                c.as_secs_f64() / r.as_secs_f64()
            ),
        );
    }
}

const MANIFEST: &str = r#"
[[tool]]
name = "send"
class = "deferred"
scope = ["mail"]
http = { method = "POST", url = "URL" }
"#;

fn bench_enqueue_commit(do_enqueue: bool, do_commit: bool) {
    let sink = Sink::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let st = store(tmp.path());
    let m = tmp.path().join("revl.toml");
    std::fs::write(&m, MANIFEST.replace("URL", &sink.url("/send"))).unwrap();
    let mut s = st.new_session(&tmp.path().join("ws"), Some(&m)).unwrap();
    let t = Instant::now();
    for i in 0..1000 {
        s.call("send", json!({"n": i, "to": "a@b.c"})).unwrap();
    }
    let enqueue = t.elapsed();
    if do_enqueue {
        println!("\nenqueue a held send (durable)");
        row("per call, mean of 1,000", fmt(enqueue / 1000));
    }
    if do_commit {
        println!("\ncommit 1,000 held sends to a loopback sink, next to the same 1,000 requests sent directly");
        let direct_send = |i: usize| {
            let run = revl_core::tools::http_call(
                "POST",
                &sink.url("/direct"),
                &json!({"n": i, "to": "a@b.c"}),
                None,
                Duration::from_secs(30),
                "direct",
            );
            assert!(run.error.is_none());
        };
        // Warm the HTTP client's keep-alive pool and the sink first (not timed), so neither
        // side pays the first connection: whichever ran first used to look ~2x slower.
        (0..100).for_each(direct_send);
        let plan = s.commit().unwrap();
        let t = Instant::now();
        let r = revl_core::report::to_json(&s.commit_confirm(&plan.hash).unwrap());
        let commit = t.elapsed();
        assert_eq!(r["flushed"].as_array().unwrap().len(), 1000);
        let t = Instant::now();
        (0..1000).for_each(direct_send);
        let direct = t.elapsed();
        assert_eq!(sink.count(), 2100);
        let (rc, rd) = (1000.0 / commit.as_secs_f64(), 1000.0 / direct.as_secs_f64());
        row(
            "revl commit-confirm",
            format!("{} ({rc:.0} sends/s)", fmt(commit)),
        );
        row(
            "direct, same HTTP client, no revl",
            format!("{} ({rd:.0} sends/s)", fmt(direct)),
        );
        row(
            "revl / direct rate (goal: at least 0.5)",
            format!("{:.2}", rc / rd),
        );
    }
}

/// `sh -c SCRIPT` as argv.
fn sh_c(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

fn bench_exec() {
    println!("\nexec: a command in the sandbox, its change set captured and applied as one step");
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let st = store(tmp.path());
    let mut s = st.new_session(&ws, None).unwrap();
    let n = 41;
    let scratch = tmp.path().join("scratch");
    let canon = ws.canonicalize().unwrap();
    let argv = vec!["true".to_string()];
    // Interleaved, so that the three see the same machine (its speed drifts by minutes).
    let (mut plain, mut sandbox_only, mut full) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let ok = std::process::Command::new("true")
            .status()
            .unwrap()
            .success();
        plain.push(t.elapsed());
        assert!(ok);
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).unwrap();
        let spec = revl_core::sandbox::Spec {
            argv: &argv,
            workspace: &canon,
            cwd: &canon,
            env: &[],
            timeout: None,
            scratch: &scratch,
            hide: &[],
            limits: Default::default(),
            net_listener: None,
            note: false,
        };
        let t = Instant::now();
        let o = revl_core::sandbox::run(&spec, &mut || Ok(())).unwrap();
        sandbox_only.push(t.elapsed());
        assert_eq!(o.ran.code, Some(0));
        let t = Instant::now();
        let r = s.exec_with(&ExecOptions::new(&argv)).unwrap();
        full.push(t.elapsed());
        assert_eq!(r.exit_code, Some(0));
    }
    let (plain, sandbox_only, full) = (median(plain), median(sandbox_only), median(full));
    row("plain spawn of `true`", fmt(plain));
    row(
        "`true` in the sandbox (namespaces, overlay, mounts)",
        fmt(sandbox_only),
    );
    row(
        "revl exec -- true (sandbox + empty change set + step)",
        fmt(full),
    );
    row(
        "fixed overhead over a plain spawn (goal: at most 15 ms)",
        fmt(full.saturating_sub(plain)),
    );
    drop(s);

    // The third case writes 8 KiB of new bytes to each changed file: past what the intent
    // keeps inline, so every post-image is kept as a blob (docs/fleet.md, "Every step's
    // content is somewhere").
    for (files, changed, big) in [
        (100_000usize, 10usize, false),
        (100_000, 1_000, false),
        (100_000, 1_000, true),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        make_tree(&ws, files);
        let twin = tmp.path().join("twin");
        copy_tree(&ws, &twin);
        let gitws = tmp.path().join("git");
        copy_tree(&ws, &gitws);
        // The same change through the binary (`revl exec` as a process, what an agent's
        // shell hook runs), on its own copy of the tree and its own session.
        let cliws = tmp.path().join("cli");
        copy_tree(&ws, &cliws);
        // The floor (as root): the same command in a bare kernel overlay with the sandbox's
        // options over its own copy of the tree, mounted and taken down each round. Any
        // design that keeps the workspace untouched while the command runs pays this
        // copy-up; revl's capture and apply come on top.
        let bare = Bare::new(tmp.path(), &ws);
        git(&gitws, &["init", "-q"]);
        git(&gitws, &["add", "-A"]);
        git(&gitws, &["commit", "-qm", "base"]);
        // The trees just written are flushed before the first round: a `syncfs` in the
        // first measured exec would otherwise write back this set-up's gigabytes.
        sh(tmp.path(), &["sync"]);
        // Append a line to `changed` files spread over the tree; `off` picks which: the
        // first-touch runs each take a set no earlier run touched (a build's first run: no
        // preimage is stored yet), the warm runs take set 0 again and again.
        let script = |off: usize| {
            if big {
                format!(
                    "i=0; while [ $i -lt {changed} ]; do f=$(( i * {files} / {changed} + {off} )); head -c 8192 /dev/urandom > d$(( f / 1000 ))/f$f.txt; i=$(( i + 1 )); done"
                )
            } else {
                format!(
                    "i=0; while [ $i -lt {changed} ]; do f=$(( i * {files} / {changed} + {off} )); echo more >> d$(( f / 1000 ))/f$f.txt; i=$(( i + 1 )); done"
                )
            }
        };
        let runs = 7;
        let st = store(tmp.path());
        let mut s = st.new_session(&ws, None).unwrap();
        let store_dir = tmp.path().join("store");
        let cli = revl_as(
            None,
            &store_dir,
            &["new", "--workspace", cliws.to_str().unwrap()],
        );
        let cli_sid = cli["session"].as_str().unwrap().to_string();
        // One round is the same change by the four, interleaved (the machine drifts).
        // Each arm starts with nothing dirty on the filesystem (a `sync`, not timed): revl's
        // `syncfs` would otherwise write back what the arm before it left (git's objects
        // and index, in the order below), a cost of the bench's order, not of revl.
        let quiet = || sh(&twin, &["sync"]);
        let mut round = |off: usize| {
            let script = script(off);
            quiet();
            let t = Instant::now();
            sh(&twin, &["sh", "-c", &script]);
            let plain = t.elapsed();
            quiet();
            let t = Instant::now();
            sh(&gitws, &["sh", "-c", &script]);
            git(&gitws, &["add", "-A"]);
            git(&gitws, &["commit", "-qm", "step"]);
            let git = t.elapsed();
            let argv = sh_c(&script);
            quiet();
            let t = Instant::now();
            let r = s.exec_with(&ExecOptions::new(&argv)).unwrap();
            let revl = t.elapsed();
            let applied = r.sandboxed.as_ref().unwrap().changes.len();
            assert_eq!(applied, changed);
            quiet();
            let t = Instant::now();
            let doc = revl_as(
                None,
                &store_dir,
                &["exec", &cli_sid, "--", "sh", "-c", &script],
            );
            let bin = t.elapsed();
            assert_eq!(doc["changes"].as_array().map(Vec::len), Some(changed));
            quiet();
            let overlay = bare.as_ref().map(|b| b.run(&script));
            (plain, git, revl, bin, overlay)
        };
        // Sets 1..=runs are touched once each (first touch); set 0 is touched once unmeasured,
        // then measured `runs` times (warm). The step between files is files/changed >= 100,
        // so the sets never overlap.
        let first: Vec<_> = (1..=runs).map(&mut round).collect();
        round(0);
        let warm: Vec<_> = (0..runs).map(|_| round(0)).collect();
        let label = if big {
            format!("{changed} files rewritten with 8 KiB in a {files}-file workspace")
        } else {
            format!("{changed} files changed in a {files}-file workspace")
        };
        for (when, rounds) in [("first touch", first), ("warm", warm)] {
            let plain = median(rounds.iter().map(|r| r.0).collect());
            let git = median(rounds.iter().map(|r| r.1).collect());
            let revl = median(rounds.iter().map(|r| r.2).collect());
            let bin = median(rounds.iter().map(|r| r.3).collect());
            let label = format!("{label}, {when}");
            row(&format!("{label}: the command run plainly"), fmt(plain));
            if bare.is_some() {
                let overlay = median(rounds.iter().filter_map(|r| r.4).collect());
                row(
                    &format!("{label}: the command in a bare overlay (the copy-up floor)"),
                    fmt(overlay),
                );
                row(
                    &format!("{label}: checkpoint / bare overlay (no capture could do better)"),
                    format!("{:.1}x", git.as_secs_f64() / overlay.as_secs_f64()),
                );
            }
            row(
                &format!("{label}: revl exec (sandbox + capture + apply)"),
                fmt(revl),
            );
            row(
                &format!("{label}: `revl exec` through the binary (a process each)"),
                fmt(bin),
            );
            row(
                &format!("{label}: command + shadow-git checkpoint"),
                fmt(git),
            );
            row(
                &format!("{label}: revl above plain (goal at 10: at most 50 ms)"),
                fmt(revl.saturating_sub(plain)),
            );
            row(
                &format!("{label}: checkpoint / revl (goal at 1,000: at least 10x)"),
                format!("{:.1}x", git.as_secs_f64() / revl.as_secs_f64()),
            );
            row(
                &format!("{label}: checkpoint / revl through the binary"),
                format!("{:.1}x", git.as_secs_f64() / bin.as_secs_f64()),
            );
        }
    }
}

/// A loop-mounted filesystem image for the parallel-fork bench (root only).
struct Loop {
    _dir: tempfile::TempDir,
    mnt: std::path::PathBuf,
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.mnt)
            .status();
    }
}

fn loop_mount(kind: &str) -> Option<Loop> {
    let dir = tempfile::tempdir_in("/var/tmp").ok()?;
    let img = dir.path().join("fs.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).ok()?;
    std::fs::File::create(&img).ok()?.set_len(4 << 30).ok()?;
    let mkfs = match kind {
        "xfs" => vec!["mkfs.xfs", "-q", "-m", "reflink=1"],
        _ => vec!["mkfs.btrfs", "-q"],
    };
    let run = |a: &[&str]| {
        std::process::Command::new(a[0])
            .args(&a[1..])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let mut a = mkfs;
    a.push(img.to_str()?);
    (run(&a) && run(&["mount", "-o", "loop", img.to_str()?, mnt.to_str()?]))
        .then_some(Loop { _dir: dir, mnt })
}

fn bench_parallel() {
    println!(
        "\nparallel fork (fork-confirm --into DIR) of a workspace vs cp -a and git worktree add"
    );
    let mut places: Vec<(String, std::path::PathBuf, Option<Loop>)> = Vec::new();
    let ext4 = tempfile::tempdir_in("/var/tmp").unwrap();
    places.push(("ext4".into(), ext4.path().to_path_buf(), None));
    for kind in ["xfs", "btrfs"] {
        match loop_mount(kind) {
            Some(l) => places.push((kind.into(), l.mnt.clone(), Some(l))),
            None => println!("  {kind}: skipped (needs root and mkfs.{kind})"),
        }
    }
    for (fs, base, _keep) in &places {
        for files in [10_000usize, 100_000] {
            let case = base.join(format!("case-{files}"));
            std::fs::create_dir_all(&case).unwrap();
            let ws = case.join("ws");
            if fs == "btrfs" {
                sh(&case, &["btrfs", "subvolume", "create", "ws"]);
            }
            make_tree(&ws, files);
            // The tree is on disk before anything is timed (revl made its files durable when
            // it wrote them; a fork's own syncfs then flushes only what the fork made).
            sh(&case, &["sync"]);
            let st = Store::open(&case.join("store"), Failpoints::none()).unwrap();
            let mut s = st.new_session(&ws, None).unwrap();
            s.boundary(Some("k")).unwrap();
            let h = s.fork(1).unwrap().hash.unwrap();
            let t = Instant::now();
            let r = s.fork_confirm_into(&h, &case.join("branch")).unwrap();
            let revl = t.elapsed();
            let how = r.parallel.as_ref().map_or("-", |p| p.clone);
            drop(s);
            let reflink = if fs == "ext4" {
                "--reflink=auto"
            } else {
                "--reflink=always"
            };
            let t = Instant::now();
            sh(&case, &["cp", "-a", reflink, "ws", "cp-copy"]);
            let cp = t.elapsed();
            let t = Instant::now();
            sh(&case, &["cp", "-a", reflink, "ws", "cp-durable"]);
            sh(&case, &["sync", "-f", "cp-durable"]);
            let cp_sync = t.elapsed();
            git(&ws, &["init", "-q"]);
            git(&ws, &["add", "-A"]);
            git(&ws, &["commit", "-qm", "base"]);
            let t = Instant::now();
            git(&ws, &["worktree", "add", "-q", "../wt"]);
            let wt = t.elapsed();
            row(
                &format!("{fs}, {files} files: revl parallel fork ({how})"),
                fmt(revl),
            );
            row(&format!("{fs}, {files} files: cp -a {reflink}"), fmt(cp));
            row(
                &format!("{fs}, {files} files: cp -a {reflink} + sync -f (durable)"),
                fmt(cp_sync),
            );
            row(&format!("{fs}, {files} files: git worktree add"), fmt(wt));
        }
    }
}

/// `revl ARGS --json` as `user` (None: this user), the store `store`; its JSON document.
fn revl_as(user: Option<&str>, store: &Path, args: &[&str]) -> serde_json::Value {
    let bin = env!("CARGO_BIN_EXE_revl");
    let mut c = match user {
        Some(u) => {
            let mut c = std::process::Command::new("setpriv");
            c.args([
                &format!("--reuid={u}"),
                &format!("--regid={u}"),
                "--clear-groups",
                bin,
            ]);
            c
        }
        None => std::process::Command::new(bin),
    };
    let o = c
        .args(["--store", store.to_str().unwrap(), "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "revl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Bytes allocated under `p` (`du -sk`), mounts not crossed.
fn du_bytes(p: &Path) -> u64 {
    let o = std::process::Command::new("du")
        .args(["-skx"])
        .arg(p)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .and_then(|k| k.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Proportional and resident memory (kB) of every fuse-overlayfs process.
fn fuse_memory() -> (usize, u64, u64) {
    let (mut n, mut pss, mut rss) = (0, 0, 0);
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim() != "fuse-overlayfs" {
            continue;
        }
        n += 1;
        let roll = std::fs::read_to_string(e.path().join("smaps_rollup")).unwrap_or_default();
        for l in roll.lines() {
            let kb = |l: &str| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            if l.starts_with("Pss:") {
                pss += kb(l);
            } else if l.starts_with("Rss:") {
                rss += kb(l);
            }
        }
    }
    (n, pss, rss)
}

/// The kernel's slab memory (kB, /proc/meminfo).
fn slab_kb() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Slab:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Layered branches (docs/performance.md, "Layered branches"): a 100,000-file workspace on
/// ext4, through the release binary: the first branch (it freezes the lower layer: one
/// copy), the later ones from the same point, as root (kernel overlayfs) and as the
/// unprivileged user nobody (fuse-overlayfs); memory per idle branch; 100 siblings from one
/// point (time and disk); `cp -a` and `git worktree add` of the same tree in the same run.
fn bench_layers() {
    let root_user = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    if !root_user {
        println!("\nlayers: skipped (needs root: it runs revl as root and as nobody)");
        return;
    }
    let files = 100_000;
    println!("\nlayers: parallel branches of a {files}-file workspace on ext4, through the CLI");
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let case = dir.path();
    sh(case, &["chmod", "755", "."]);
    for (who, user) in [
        ("root, overlayfs", None),
        ("nobody, fuse-overlayfs", Some("65534")),
    ] {
        let sub = case.join(user.unwrap_or("root"));
        let ws = sub.join("ws");
        make_tree(&ws, files);
        if let Some(u) = user {
            sh(
                case,
                &["chown", "-R", &format!("{u}:{u}"), sub.to_str().unwrap()],
            );
        }
        sh(case, &["sync"]);
        let store = sub.join("store");
        let s = revl_as(user, &store, &["new", "--workspace", ws.to_str().unwrap()])["session"]
            .as_str()
            .unwrap()
            .to_string();
        revl_as(user, &store, &["boundary", &s, "--label", "k"]);
        let fork = |name: &str| -> (Duration, serde_json::Value) {
            let h = revl_as(user, &store, &["fork", &s, "--at", "1"])["hash"]
                .as_str()
                .unwrap()
                .to_string();
            let into = sub.join(name);
            let t = Instant::now();
            let r = revl_as(
                user,
                &store,
                &[
                    "fork-confirm",
                    &s,
                    "--hash",
                    &h,
                    "--into",
                    into.to_str().unwrap(),
                ],
            );
            (t.elapsed(), r)
        };
        let (first, r) = fork("b0");
        let how = |r: &serde_json::Value| {
            format!(
                "{}{}",
                r["clone"].as_str().unwrap_or("-"),
                r["layers"]["driver"]
                    .as_str()
                    .map(|d| format!(" by {d}"))
                    .unwrap_or_default()
            )
        };
        row(
            &format!("{who}: 1st branch ({}, freezes the lower)", how(&r)),
            fmt(first),
        );
        let later: Vec<Duration> = (1..=5).map(|i| fork(&format!("b{i}")).0).collect();
        let (lo, hi) = (*later.iter().min().unwrap(), *later.iter().max().unwrap());
        row(
            &format!("{who}: 2nd-6th branch (goal at most 50 ms)"),
            format!("{} (median; {}-{})", fmt(median(later)), fmt(lo), fmt(hi)),
        );
        if user.is_some() {
            let (n, pss, rss) = fuse_memory();
            row(
                &format!("{who}: memory per idle branch ({n} daemons)"),
                format!(
                    "{} kB PSS, {} kB RSS",
                    pss / n.max(1) as u64,
                    rss / n.max(1) as u64
                ),
            );
        } else {
            // 100 siblings from the one point (94 more), time and disk, and the kernel's
            // slab memory per branch (an overlay mount has no process).
            let (disk0, slab0) = (du_bytes(&store), slab_kb());
            let t = Instant::now();
            for i in 6..100 {
                fork(&format!("b{i}"));
            }
            let rest = t.elapsed();
            let per = (du_bytes(&store) - disk0) / 94;
            let slab = slab_kb().saturating_sub(slab0) / 94;
            row(
                &format!("{who}: siblings 7-100, total (fork + fork-confirm each)"),
                format!("{} ({} per branch)", fmt(rest), fmt(rest / 94)),
            );
            row(
                &format!("{who}: 100 siblings: store on disk (lower layer once)"),
                format!(
                    "{:.1} MB ({:.1} kB per further branch)",
                    du_bytes(&store) as f64 / 1e6,
                    per as f64 / 1e3
                ),
            );
            row(
                &format!("{who}: memory per idle branch (kernel slab growth)"),
                format!("{slab} kB"),
            );
            let t = Instant::now();
            sh(&sub, &["cp", "-a", "ws", "cp-copy"]);
            let cp = t.elapsed();
            row(
                "cp -a of the same tree (per branch; 100 of them)",
                format!(
                    "{} ({:.1} MB on disk each)",
                    fmt(cp),
                    du_bytes(&sub.join("cp-copy")) as f64 / 1e6
                ),
            );
            git(&ws, &["init", "-q"]);
            git(&ws, &["add", "-A"]);
            git(&ws, &["commit", "-qm", "base"]);
            let t = Instant::now();
            git(&ws, &["worktree", "add", "-q", "../wt"]);
            row(
                "git worktree add of the same tree (per branch)",
                format!(
                    "{} ({:.1} MB on disk each)",
                    fmt(t.elapsed()),
                    du_bytes(&sub.join("wt")) as f64 / 1e6
                ),
            );
        }
        // Take every branch down: abort --remove (the abort, the unmount, which syncs the
        // upper layer's filesystem, the upper layer removed); the last one also collects
        // the lower layer (a whole tree deleted), so it is shown apart.
        let branches = revl_as(user, &store, &["sessions"]);
        let mut took = Vec::new();
        for b in branches["sessions"].as_array().unwrap() {
            let id = b["session"].as_str().unwrap();
            if id != s {
                let t = Instant::now();
                revl_as(user, &store, &["abort", id, "--remove"]);
                took.push(t.elapsed());
            }
        }
        let last = took.pop().unwrap();
        row(
            &format!("{who}: abort --remove, per branch (median)"),
            fmt(median(took)),
        );
        row(
            &format!("{who}: abort --remove of the last (collects the lower)"),
            fmt(last),
        );
    }
}

/// `revl view` on 500 sessions and 10,000 steps: a tree of branches (each session a branch
/// of the one before it, halved), 20 steps each. The page is written by the release binary;
/// where playwright-core and Chromium are installed, the page is also opened, searched and
/// one timeline expanded (tests/view/time_view.mjs).
fn bench_view() {
    println!("\nview: `revl view` at 500 sessions x 20 steps (10,000 steps)");
    let dir = tempfile::tempdir().unwrap();
    let st = store(dir.path());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = std::fs::canonicalize(&ws).unwrap().display().to_string();
    let id = |j: usize| format!("{:032x}", 0xa000_0000_usize + j);
    let t = Instant::now();
    for j in 0..500 {
        let me = id(j);
        std::fs::create_dir_all(st.session_dir(&me)).unwrap();
        let mut recs = vec![Record::Header {
            wal_version: revl_core::wal::WAL_VERSION,
            seq: 0,
            session: me.clone(),
            workspace: ws.clone(),
            manifest_digest: None,
            created_by: "bench".into(),
            guarantee: "g".into(),
            ts: None,
        }];
        if j > 0 {
            let parent = id((j - 1) / 2);
            recs.push(Record::ForkBranch {
                branch: me.clone(),
                parent: parent.clone(),
                at: revl_core::step::Pos::from_i64(5).unwrap(),
                parent_remote: None,
                parent_wal: None,
                preserved: json!([]),
                not_preserved: json!([]),
                crossed: vec![],
                would_cross: vec![],
                failed: vec![],
                provisions: json!({}),
            });
        }
        let base = recs.len() as u64;
        for i in 0..20u64 {
            let (kind, label) = match i {
                0 => ("hinge", "session/hinge".to_string()),
                _ if i % 5 == 0 => ("emission", format!("mail.send #{j}-{i}")),
                _ if i % 2 == 0 => ("boundary", format!("turn {i} of session {j}")),
                _ => ("effect", format!("fs.write src/file-{j}-{i}.rs")),
            };
            let mut rec =
                StepRecord::new(base + i, i, kind.into(), &label, "bench", &json!({})).unwrap();
            rec.set_ts(Some("2026-12-02T00:00:00.000Z")).unwrap();
            recs.push(Record::Step(rec));
        }
        create_wal(&st.wal_path(&id(j)), &recs, &Failpoints::none()).unwrap();
    }
    row("make 500 WALs (setup)", fmt(t.elapsed()));
    let out = dir.path().join("view.html");
    let bin = env!("CARGO_BIN_EXE_revl");
    let run = || {
        let o = std::process::Command::new(bin)
            .arg("--store")
            .arg(dir.path().join("store"))
            .args(["view", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let d = time(5, run);
    let bytes = std::fs::metadata(&out).unwrap().len();
    row("revl view (500 sessions, 10,000 steps)", fmt(d));
    row("page size", format!("{:.2} MB", bytes as f64 / 1e6));
    let Some(node) = std::env::var_os("REVL_TEST_VIEW_NODE_DIR") else {
        row(
            "in Chromium",
            "skipped (set REVL_TEST_VIEW_NODE_DIR)".into(),
        );
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/view/time_view.mjs");
    let o = std::process::Command::new("node")
        .arg(script)
        .arg(&out)
        .arg("turn 14 of session 377")
        .env("REVL_TEST_VIEW_NODE_DIR", node)
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("time_view.mjs: {}", String::from_utf8_lossy(&o.stderr)));
    row("Chromium: load the page", format!("{} ms", r["loadMs"]));
    row(
        &format!("Chromium: search 500 sessions ({} match)", r["shown"]),
        format!("{} ms", r["searchMs"]),
    );
    row(
        "Chromium: search again (the text is read once)",
        format!("{} ms", r["searchAgainMs"]),
    );
    row(
        "Chromium: clear the search, then expand one timeline by a click",
        format!("{} ms", r["expandMs"]),
    );
}

/// The Python binding against the Rust library, per call: a witnessed 4 KiB overwrite and
/// the enqueue of a held send. The binding attaches for every call (the session lock is
/// taken per call, so `revl approve` works while a Python object lives), so its baseline is
/// the Rust library doing the same (attach, verb, drop); a Rust program that keeps one
/// session attached is shown too.
/// Median of `n` calls of `f` at each of `marks` (the 1st call at a mark is the mark-th of
/// the session), with `fill` run between marks to grow the session.
fn bench_incremental() {
    println!("\nincremental attach: a handle that keeps its session (Kept) next to attaching from the whole WAL, per call");
    let tmp = tempfile::tempdir().unwrap();
    let st = store(tmp.path());
    let id = st
        .new_session(&tmp.path().join("ws"), None)
        .unwrap()
        .id()
        .to_string();
    let content: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let write = |s: &mut revl_core::Session, n: u64| {
        let mut c = content.clone();
        c[..8].copy_from_slice(&n.to_le_bytes());
        s.file_effect(FileOp::Write {
            path: "f.bin".into(),
            content: c,
        })
        .unwrap();
    };
    let mut kept: Option<revl_core::session::Kept> = None;
    let mut n = 0u64;
    for mark in [10u64, 1_000, 10_000] {
        // Grow to the mark through the handle (cheap), then time both ways, interleaved.
        while n + 1 < mark {
            let mut s = st.attach_kept(&id, kept.take()).unwrap();
            n += 1;
            write(&mut s, n);
            kept = s.keep();
        }
        let (mut inc, mut whole) = (Vec::new(), Vec::new());
        for _ in 0..15 {
            let t = Instant::now();
            let mut s = st.attach_kept(&id, kept.take()).unwrap();
            n += 1;
            write(&mut s, n);
            kept = s.keep();
            inc.push(t.elapsed());
            let t = Instant::now();
            let mut s = st.attach(&id).unwrap();
            n += 1;
            write(&mut s, n);
            drop(s);
            whole.push(t.elapsed());
        }
        let wal = std::fs::metadata(st.wal_path(&id)).unwrap().len();
        row(
            &format!(
                "4 KiB write at call {mark} (WAL {:.1} MB): kept handle",
                wal as f64 / 1e6
            ),
            fmt(median(inc)),
        );
        row(
            &format!("4 KiB write at call {mark}: attach from the whole WAL"),
            fmt(median(whole)),
        );
    }
    // status of a session holding a 50 MB held-send argument, next to one without.
    let m = tmp.path().join("revl.toml");
    std::fs::write(&m, MANIFEST.replace("URL", "http://127.0.0.1:9/unused")).unwrap();
    let mut ids = Vec::new();
    for (name, to) in [
        ("small", "a@b.c".to_string()),
        ("big", "x".repeat(50 << 20)),
    ] {
        let mut s = st
            .new_session(&tmp.path().join(format!("ws-{name}")), Some(&m))
            .unwrap();
        s.call("send", json!({"n": 1, "to": to})).unwrap();
        ids.push(s.id().to_string());
    }
    let mut keeps: Vec<Option<revl_core::session::Kept>> = vec![None, None];
    let (mut kept_t, mut whole_t) = (vec![Vec::new(), Vec::new()], vec![Vec::new(), Vec::new()]);
    for round in 0..16 {
        for (i, id) in ids.iter().enumerate() {
            let t = Instant::now();
            let s = st.attach_prefix_kept(id, keeps[i].take()).unwrap();
            std::hint::black_box(s.status());
            keeps[i] = s.keep();
            // The first call reads the whole WAL: not counted.
            if round > 0 {
                kept_t[i].push(t.elapsed());
            }
            let t = Instant::now();
            let s = st.attach_prefix(id).unwrap();
            std::hint::black_box(s.status());
            drop(s);
            whole_t[i].push(t.elapsed());
        }
    }
    let [ks, kb] = [median(kept_t[0].clone()), median(kept_t[1].clone())];
    let [ws, wb] = [median(whole_t[0].clone()), median(whole_t[1].clone())];
    row("status, no large argument: kept handle", fmt(ks));
    row("status, a 50 MB held-send argument: kept handle", fmt(kb));
    row(
        "  ratio (goal: at most 1.2)",
        format!("{:.2}", kb.as_secs_f64() / ks.as_secs_f64()),
    );
    row("status, no large argument: from the whole WAL", fmt(ws));
    row(
        "status, a 50 MB held-send argument: from the whole WAL",
        fmt(wb),
    );
}

/// `new` in a store of 1,000 sessions of 1,000 steps each, next to `new` in an empty store.
fn bench_index() {
    println!("\nthe session index: `new` in a store of 1,000 sessions of 1,000 steps, next to an empty store");
    let tmp = tempfile::tempdir().unwrap();
    let (big, id0) = synthetic(&tmp.path().join("big"), 1_000, 10);
    // 999 more: the same records under their own header (id, workspace).
    let wal0 = std::fs::read(big.wal_path(&id0)).unwrap();
    let body = &wal0[wal0.iter().position(|b| *b == b'\n').unwrap() + 1..];
    for i in 1..1_000u32 {
        let id = format!("{:08x}{:024x}", i, 0xfeed);
        std::fs::create_dir_all(big.session_dir(&id)).unwrap();
        let header = Record::Header {
            wal_version: 1,
            seq: 0,
            session: id.clone(),
            workspace: tmp.path().join(format!("big-ws/{i}")).display().to_string(),
            manifest_digest: None,
            created_by: "bench".into(),
            guarantee: "g".into(),
            ts: None,
        };
        let mut bytes = encode_line(&header);
        bytes.extend_from_slice(body);
        std::fs::write(big.wal_path(&id), bytes).unwrap();
    }
    let empty = store(&tmp.path().join("empty"));
    let t = Instant::now();
    big.sessions().unwrap();
    row(
        "`sessions` once, building the 1,000 index entries",
        fmt(t.elapsed()),
    );
    let (mut e, mut b, mut noindex) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..9 {
        let t = Instant::now();
        drop(
            empty
                .new_session(&tmp.path().join(format!("e{round}")), None)
                .unwrap(),
        );
        e.push(t.elapsed());
        let t = Instant::now();
        drop(
            big.new_session(&tmp.path().join(format!("b{round}")), None)
                .unwrap(),
        );
        b.push(t.elapsed());
        if round < 3 {
            // As before the index: every WAL replayed (its entries, and the store's holders
            // file, removed first).
            for id in big.session_ids().unwrap() {
                let _ = std::fs::remove_file(big.session_dir(&id).join("index.json"));
            }
            let _ = std::fs::remove_file(big.root().join("holders.json"));
            let t = Instant::now();
            drop(
                big.new_session(&tmp.path().join(format!("n{round}")), None)
                    .unwrap(),
            );
            noindex.push(t.elapsed());
        }
    }
    let (e, b) = (median(e), median(b));
    row("`new`, empty store", fmt(e));
    row("`new`, 1,000 sessions of 1,000 steps (index)", fmt(b));
    row(
        "  ratio (goal: at most 2)",
        format!("{:.2}", b.as_secs_f64() / e.as_secs_f64()),
    );
    row(
        "`new`, 1,000 sessions, every WAL replayed (no index entries)",
        fmt(median(noindex)),
    );
    // `log` (the lineage view) of the same store, next to `log` of an empty one.
    let (mut le, mut lb) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        std::hint::black_box(revl_core::log::log(&empty, None).unwrap());
        le.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(revl_core::log::log(&big, None).unwrap());
        lb.push(t.elapsed());
    }
    row("`log`, empty store", fmt(median(le)));
    row("`log`, 1,000 sessions of 1,000 steps", fmt(median(lb)));
    for id in big.session_ids().unwrap() {
        let _ = std::fs::remove_file(big.session_dir(&id).join("index.json"));
    }
    let t = Instant::now();
    std::hint::black_box(revl_core::log::log(&big, None).unwrap());
    row(
        "`log`, 1,000 sessions, every WAL replayed (no index entries)",
        fmt(t.elapsed()),
    );
}

fn bench_python() {
    println!("\nthe Python binding, per call, next to the Rust library (300 rounds each, medians)");
    let Some(py) = std::env::var_os("REVL_BENCH_PYTHON") else {
        println!("  (not run: set REVL_BENCH_PYTHON to a python with the package installed, e.g. a venv after `pip install ./python`)");
        return;
    };
    let rounds = 300u32;
    let tmp = tempfile::tempdir().unwrap();
    let st = store(tmp.path());
    let m = tmp.path().join("revl.toml");
    std::fs::write(&m, MANIFEST.replace("URL", "http://127.0.0.1:9/unused")).unwrap();
    let id = st
        .new_session(&tmp.path().join("ws"), Some(&m))
        .unwrap()
        .id()
        .to_string();
    let content: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let write = |s: &mut revl_core::Session, round: u32| {
        let mut c = content.clone();
        c[0] = round as u8;
        s.file_effect(FileOp::Write {
            path: "f.bin".into(),
            content: c,
        })
        .unwrap();
    };
    // Python runs in its own process, driven round by round: one Rust call, then the same
    // call from Python, so both see the same disk and WALs of the same length.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/bench/binding.py");
    let mut child = match std::process::Command::new(&py)
        .arg(&script)
        .arg(tmp.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            println!("  (not run: cannot start {}: {e})", py.to_string_lossy());
            return;
        }
    };
    let mut to_py = child.stdin.take().unwrap();
    let mut from_py = std::io::BufReader::new(child.stdout.take().unwrap());
    {
        use std::io::BufRead;
        let mut ready = String::new();
        let _ = from_py.read_line(&mut ready);
        if ready.trim() != "ready" {
            println!(
                "  (not run: the Python side did not start; is the package installed in {}?)",
                py.to_string_lossy()
            );
            return;
        }
    }
    let mut ask = |line: String| -> Option<Duration> {
        use std::io::BufRead;
        writeln!(to_py, "{line}").ok()?;
        to_py.flush().ok()?;
        let mut answer = String::new();
        from_py.read_line(&mut answer).ok()?;
        answer
            .trim()
            .parse::<f64>()
            .ok()
            .map(Duration::from_secs_f64)
    };
    let (mut w_attach, mut q_attach, mut w_py, mut q_py) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Who goes first alternates by round: an fsync pays for what the other side just wrote.
    for round in 0..rounds {
        let rust_write = || {
            let t = Instant::now();
            let mut s = st.attach(&id).unwrap();
            write(&mut s, round);
            drop(s);
            t.elapsed()
        };
        let rust_enqueue = || {
            let t = Instant::now();
            let mut s = st.attach(&id).unwrap();
            s.call("send", json!({"n": round, "to": "a@b.c"})).unwrap();
            drop(s);
            t.elapsed()
        };
        let python_first = round % 2 == 1;
        if !python_first {
            w_attach.push(rust_write());
        }
        let Some(d) = ask(format!("write {round}")) else {
            println!("  (the Python side stopped)");
            return;
        };
        w_py.push(d);
        if python_first {
            w_attach.push(rust_write());
            q_attach.push(rust_enqueue());
        }
        let Some(d) = ask(format!("enqueue {round}")) else {
            println!("  (the Python side stopped)");
            return;
        };
        q_py.push(d);
        if !python_first {
            q_attach.push(rust_enqueue());
        }
    }
    drop(to_py);
    let _ = child.wait();
    let (mut w_held, mut q_held) = (Vec::new(), Vec::new());
    let mut held = st
        .new_session(&tmp.path().join("ws-held"), Some(&m))
        .unwrap();
    for round in 0..rounds {
        let t = Instant::now();
        write(&mut held, round);
        w_held.push(t.elapsed());
        let t = Instant::now();
        held.call("send", json!({"n": round, "to": "a@b.c"}))
            .unwrap();
        q_held.push(t.elapsed());
    }
    let (w_py, q_py) = (median(w_py), median(q_py));
    let (wa, qa) = (median(w_attach), median(q_attach));
    row("witnessed 4 KiB write: Python (attach per call)", fmt(w_py));
    row(
        "witnessed 4 KiB write: Rust library, attach per call",
        fmt(wa),
    );
    row(
        "  Python / Rust, same work (goal: at most 1.10)",
        format!("{:.2}", w_py.as_secs_f64() / wa.as_secs_f64()),
    );
    row(
        "witnessed 4 KiB write: Rust, one session kept attached",
        fmt(median(w_held)),
    );
    row("enqueue a held send: Python (attach per call)", fmt(q_py));
    row(
        "enqueue a held send: Rust library, attach per call",
        fmt(qa),
    );
    row(
        "  Python / Rust, same work (goal: at most 1.10)",
        format!("{:.2}", q_py.as_secs_f64() / qa.as_secs_f64()),
    );
    row(
        "enqueue a held send: Rust, one session kept attached",
        fmt(median(q_held)),
    );
    // What a user waits for before the first call, and what they download.
    let import = |code: &str| {
        time(11, || {
            let ok = std::process::Command::new(&py)
                .args(["-c", code])
                .status()
                .unwrap()
                .success();
            assert!(ok);
        })
    };
    let (bare, with) = (import("pass"), import("import revl"));
    row(
        "`import revl` (python -c 'import revl' minus python -c pass)",
        fmt(with.saturating_sub(bare)),
    );
    // Where `pip install ./python` left the wheel (the tests build in target/python).
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let wheels = [target.join("python/wheels"), target.join("wheels")];
    for e in wheels
        .iter()
        .flat_map(std::fs::read_dir)
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("revl-"))
    {
        let size = e.metadata().map(|m| m.len()).unwrap_or(0);
        row(
            &format!("wheel {}", e.file_name().to_string_lossy()),
            format!("{:.1} MiB", size as f64 / (1 << 20) as f64),
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    println!(
        "revl benchmarks (release build; {} cores)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    if want("write") {
        bench_write();
    }
    if want("attach") {
        bench_attach();
    }
    if want("partition") {
        bench_partition();
    }
    if want("offline") {
        bench_offline();
    }
    if want("topology") {
        bench_topology();
    }
    if want("fork") {
        bench_fork();
    }
    if want("restore") {
        bench_restore();
    }
    if want("enqueue") || want("commit") {
        bench_enqueue_commit(want("enqueue"), want("commit"));
    }
    if want("exec") {
        bench_exec();
    }
    if want("parallel") {
        bench_parallel();
    }
    if want("parallel") || want("layers") {
        bench_layers();
    }
    if want("view") {
        bench_view();
    }
    if want("incremental") {
        bench_incremental();
    }
    if want("index") {
        bench_index();
    }
    if want("python") {
        bench_python();
    }
    if want("egress") {
        bench_egress();
    }
    if want("agents") {
        bench_agents();
    }
    let _ = encode_line;
}

/// A loopback server for the egress section: each connection sends one request head
/// `GET /N` and gets N bytes back, then the server closes.
fn egress_server() -> u16 {
    egress_server_paced(None)
}

/// [`egress_server`], sending at most `mb_per_s` MB/s (a source as fast as a network link,
/// not as fast as loopback memory copies): 1 MiB chunks, each sent when the running total
/// is due.
fn egress_server_paced(mb_per_s: Option<f64>) -> u16 {
    use std::io::Read;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let _ = c.set_nodelay(true);
                let mut buf = Vec::new();
                let mut b = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&b[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let n: usize = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|p| p.trim_start_matches('/').parse().ok())
                    .unwrap_or(0);
                let _ = c.write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").as_bytes(),
                );
                let mut left = n;
                let started = Instant::now();
                while left > 0 {
                    let k = left.min(chunk.len());
                    if let Some(rate) = mb_per_s {
                        let due = Duration::from_secs_f64((n - left) as f64 / 1e6 / rate);
                        if let Some(wait) = due.checked_sub(started.elapsed()) {
                            std::thread::sleep(wait);
                        }
                    }
                    if c.write_all(&chunk[..k]).is_err() {
                        return;
                    }
                    left -= k;
                }
            });
        }
    });
    port
}

/// One request for `n` bytes to the egress server, directly or through a proxy (CONNECT);
/// returns the bytes read after the response head.
fn egress_fetch(server: u16, proxy: Option<u16>, n: usize) -> usize {
    use std::io::Read;
    let mut c = std::net::TcpStream::connect(("127.0.0.1", proxy.unwrap_or(server))).unwrap();
    let _ = c.set_nodelay(true);
    let mut buf = vec![0u8; 1 << 20];
    if proxy.is_some() {
        c.write_all(format!("CONNECT 127.0.0.1:{server} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let k = c.read(&mut buf[..1]).unwrap();
            assert!(k > 0, "the proxy closed");
            got.extend_from_slice(&buf[..k]);
        }
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&got)
        );
    }
    c.write_all(format!("GET /{n} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut head = Vec::new();
    let mut body = 0usize;
    loop {
        let k = c.read(&mut buf).unwrap();
        if k == 0 {
            break;
        }
        if head.len() < 4 || !head.windows(4).any(|w| w == b"\r\n\r\n") {
            head.extend_from_slice(&buf[..k]);
            if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                body += head.len() - (i + 4);
            }
        } else {
            body += k;
        }
        if body >= n && head.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    body
}

fn bench_egress() {
    use revl_core::egress::{proxy::Proxy, Dest};
    use std::sync::{Arc, Mutex};
    println!("\negress: declared egress (docs/user-guide.md §8), revl's proxy vs a direct connect");
    let server = egress_server();
    let allowed = vec![Dest::parse(&format!("127.0.0.1:{server}")).unwrap()];
    // The durable proxy appends each record to a WAL-like file on the target's disk and
    // fdatasyncs it, as the session's writer does.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let wal = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("wal.jsonl"))
            .unwrap(),
    ));
    let durable: revl_core::egress::proxy::Sink = Arc::new(move |rec: Record| {
        let mut f = wal.lock().unwrap();
        f.write_all(&encode_line(&rec)).map_err(|e| e.to_string())?;
        f.sync_data().map_err(|e| e.to_string())
    });
    let quiet: revl_core::egress::proxy::Sink = Arc::new(|_rec: Record| Ok(()));
    let start = |sink| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let p = Proxy::start(std::os::fd::OwnedFd::from(l), allowed.clone(), 1, sink).unwrap();
        (p, port)
    };
    let (pd, port_d) = start(durable);
    let (pq, port_q) = start(quiet);
    let n = 201;
    let (mut direct, mut recorded, mut unrecorded) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        // Interleaved, so that the three see the same machine.
        let t = Instant::now();
        assert_eq!(egress_fetch(server, None, 100), 100);
        direct.push(t.elapsed());
        let t = Instant::now();
        assert_eq!(egress_fetch(server, Some(port_d), 100), 100);
        recorded.push(t.elapsed());
        let t = Instant::now();
        assert_eq!(egress_fetch(server, Some(port_q), 100), 100);
        unrecorded.push(t.elapsed());
    }
    let (direct, recorded, unrecorded) = (median(direct), median(recorded), median(unrecorded));
    row(
        "one connection + 100-byte request/response, direct (host namespace)",
        fmt(direct),
    );
    row(
        "the same through the proxy, net-connect + net-close fdatasynced",
        format!(
            "{} (+{})",
            fmt(recorded),
            fmt(recorded.saturating_sub(direct))
        ),
    );
    row(
        "the same through the proxy, records not written",
        format!(
            "{} (+{})",
            fmt(unrecorded),
            fmt(unrecorded.saturating_sub(direct))
        ),
    );
    // Throughput: 100 MB, interleaved rounds; the best of each (the machine is shared).
    let size = 100_000_000usize;
    let rounds = 5;
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        assert_eq!(egress_fetch(server, None, size), size);
        d.push(t.elapsed());
        let t = Instant::now();
        assert_eq!(egress_fetch(server, Some(port_d), size), size);
        p.push(t.elapsed());
    }
    let mbps = |t: Duration| size as f64 / 1e6 / t.as_secs_f64();
    let (dm, pm) = (median(d.clone()), median(p.clone()));
    let (db, pb) = (*d.iter().min().unwrap(), *p.iter().min().unwrap());
    row(
        "100 MB download, direct (median / best)",
        format!("{:.0} / {:.0} MB/s", mbps(dm), mbps(db)),
    );
    row(
        "100 MB download through the proxy (median / best)",
        format!("{:.0} / {:.0} MB/s", mbps(pm), mbps(pb)),
    );
    row(
        "proxy / direct (goal: at least 0.80; median, best)",
        format!(
            "{:.2}, {:.2}",
            dm.as_secs_f64() / pm.as_secs_f64(),
            db.as_secs_f64() / pb.as_secs_f64()
        ),
    );
    // The same 100 MB from a source paced at 1 Gbit/s (125 MB/s), as a download from a
    // package index at best arrives: does the proxy keep up with a real link?
    let paced = egress_server_paced(Some(125.0));
    let allowed_paced = vec![Dest::parse(&format!("127.0.0.1:{paced}")).unwrap()];
    let (pp, port_p) = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let wal = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("wal-paced.jsonl"))
            .unwrap();
        let wal = Arc::new(Mutex::new(wal));
        let sink: revl_core::egress::proxy::Sink = Arc::new(move |rec: Record| {
            let mut f = wal.lock().unwrap();
            f.write_all(&encode_line(&rec)).map_err(|e| e.to_string())?;
            f.sync_data().map_err(|e| e.to_string())
        });
        let p = Proxy::start(std::os::fd::OwnedFd::from(l), allowed_paced, 1, sink).unwrap();
        (p, port)
    };
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(egress_fetch(paced, None, size), size);
        d.push(t.elapsed());
        let t = Instant::now();
        assert_eq!(egress_fetch(paced, Some(port_p), size), size);
        p.push(t.elapsed());
    }
    let (dm, pm) = (median(d), median(p));
    row(
        "100 MB from a 1 Gbit/s source: direct / through the proxy (median)",
        format!("{:.0} / {:.0} MB/s", mbps(dm), mbps(pm)),
    );
    row(
        "proxy / direct from a 1 Gbit/s source (goal: at least 0.80)",
        format!("{:.2}", dm.as_secs_f64() / pm.as_secs_f64()),
    );
    drop(pp.finish());
    drop(pd.finish());
    drop(pq.finish());
}

/// docs/agents.md: what the hook and revl add to one shell command of Claude Code, against
/// the same agent running the command itself; and one scripted task with and without revl.
fn bench_agents() {
    use fake_model::{Api, FakeModel, Say};
    println!("\nClaude Code on revl (docs/agents.md): wall clock of `claude -p`, medians of interleaved runs");
    let Some(claude) = std::env::var_os("REVL_BENCH_CLAUDE") else {
        println!("  (not run: set REVL_BENCH_CLAUDE to Claude Code's binary, e.g. target/agents-node/node_modules/.bin/claude after .ci/setup-agents)");
        return;
    };
    let revl = env!("CARGO_BIN_EXE_revl");
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let run = |script: Vec<Say>, with_revl: bool, round: usize| -> Duration {
        let dir = tmp
            .path()
            .join(format!("r{round}-{with_revl}-{}", script.len()));
        let (ws, home) = (dir.join("ws"), dir.join("home"));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let fake = FakeModel::start(Api::Anthropic, script);
        let mut c = if with_revl {
            let mut c = std::process::Command::new(revl);
            c.arg("--store")
                .arg(dir.join("store"))
                .args(["agent", "claude", "--"]);
            c.env("REVL_CLAUDE", &claude);
            c
        } else {
            let mut c = std::process::Command::new(&claude);
            c.args(["--allowedTools", "Bash"]);
            c
        };
        c.args([
            "-p",
            "go",
            "--output-format",
            "json",
            "--permission-mode",
            "acceptEdits",
        ])
        .current_dir(&ws)
        .env("HOME", &home)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
        fake.claude_env(&mut c);
        let t = Instant::now();
        assert!(c.status().unwrap().success());
        let d = t.elapsed();
        let _ = std::fs::remove_dir_all(&dir);
        d
    };
    const N: usize = 20;
    let commands = || {
        let mut v: Vec<Say> = (0..N)
            .map(|i| Say::Call("Bash", json!({"command": format!("echo {i} > f{i}.txt")})))
            .collect();
        v.push(Say::Text("done"));
        v
    };
    let task = |ws: &str| {
        vec![
            Say::Call(
                "Bash",
                json!({"command": "mkdir -p src/old && cd src && printf 'one\\n' > a.txt && pwd"}),
            ),
            Say::Call("Bash", json!({"command": "pwd && cat a.txt && ls"})),
            Say::Call(
                "Write",
                json!({"file_path": format!("{ws}/src/notes.md"), "content": "v1\n"}),
            ),
            Say::Call("Bash", json!({"command": "rm -rf old; false"})),
            Say::Call("Bash", json!({"command": "ls -R .. | wc -l"})),
            Say::Text("done"),
        ]
    };
    let rounds = 5;
    let (mut p0, mut r0, mut pn, mut rn) = (vec![], vec![], vec![], vec![]);
    for i in 0..rounds {
        p0.push(run(vec![Say::Text("done")], false, i));
        r0.push(run(vec![Say::Text("done")], true, i));
        pn.push(run(commands(), false, i));
        rn.push(run(commands(), true, i));
    }
    let (p0, r0, pn, rn) = (median(p0), median(r0), median(pn), median(rn));
    println!(
        "  no command:        claude {:>8.1} ms   revl agent claude {:>8.1} ms",
        ms(p0),
        ms(r0)
    );
    println!(
        "  {N} shell commands: claude {:>8.1} ms   revl agent claude {:>8.1} ms",
        ms(pn),
        ms(rn)
    );
    let per = (ms(rn) - ms(r0) - (ms(pn) - ms(p0))) / N as f64;
    println!("  added per shell command (hooks + revl exec, start-up taken out): {per:.1} ms (goal: at most 30 ms)");
    // The pieces, alone: the hook's answer, and the rewritten command's revl exec.
    let dir = tmp.path().join("pieces");
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = std::fs::canonicalize(&ws).unwrap();
    let store_dir = dir.join("store");
    let out = std::process::Command::new(revl)
        .arg("--store")
        .arg(&store_dir)
        .args(["--json", "new", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let id = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    let payload =
        json!({"session_id": "s", "cwd": ws, "prompt_id": "p", "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": "true"}, "tool_use_id": "t"})
        .to_string();
    let (mut hook, mut exec, mut plain) = (vec![], vec![], vec![]);
    for _ in 0..30 {
        let t = Instant::now();
        let mut c = std::process::Command::new(revl)
            .arg("--store")
            .arg(&store_dir)
            .args(["hook", "claude", "--session", &id])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        c.stdin
            .take()
            .unwrap()
            .write_all(payload.as_bytes())
            .unwrap();
        assert!(c.wait().unwrap().success());
        hook.push(t.elapsed());
        let t = Instant::now();
        let ok = std::process::Command::new(revl)
            .arg("--store")
            .arg(&store_dir)
            .args([
                "exec",
                &id,
                "--passthrough",
                "--note-to",
                "/dev/null",
                "--",
                "/bin/bash",
                "-c",
                "true",
            ])
            .status()
            .unwrap()
            .success();
        exec.push(t.elapsed());
        assert!(ok);
        let t = Instant::now();
        assert!(std::process::Command::new("/bin/bash")
            .args(["-c", "true"])
            .status()
            .unwrap()
            .success());
        plain.push(t.elapsed());
    }
    println!(
        "  pieces: `revl hook claude` PreToolUse {:.1} ms; `revl exec --passthrough -- bash -c true` {:.1} ms; plain `bash -c true` {:.1} ms",
        ms(median(hook)), ms(median(exec)), ms(median(plain))
    );
    // One scripted task (5 tool calls: directories, a cd carried, a failure, a Write).
    let (mut tp, mut tr) = (vec![], vec![]);
    for i in 0..rounds {
        let dir_p = tmp.path().join(format!("r{i}-false-6"));
        tp.push(run(task(&dir_p.join("ws").to_string_lossy()), false, i));
        let dir_r = tmp.path().join(format!("r{i}-true-6"));
        tr.push(run(task(&dir_r.join("ws").to_string_lossy()), true, i));
    }
    println!("  one scripted task (4 commands, 1 Write): claude {:>8.1} ms   revl agent claude {:>8.1} ms", ms(median(tp)), ms(median(tr)));
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
