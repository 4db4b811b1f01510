//! Sandboxed `exec` (docs/architecture.md, "The exec sandbox"), through the binary: a
//! golden table of edge cases, each run through `exec`, its change set checked against the
//! table, the workspace compared with the same command run plainly on a copy (an
//! independent computation), then rewound by a fork and compared byte for byte with a copy
//! taken before.

use crate::common::*;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::{symlink, FileTypeExt};
use std::path::Path;
use std::process::Command;

/// One row: how the workspace looks before, the command, the change set it must produce.
struct Case {
    name: &'static str,
    setup: &'static str,
    script: &'static str,
    /// `(path, change)` pairs, in path order.
    changes: &'static [(&'static str, &'static str)],
    /// Extra `exec` options (`--timeout`, `--cwd`).
    opts: &'static [&'static str],
    /// Compare with a plain run of the script on a copy (off where timing decides the
    /// result: a timeout, a background process).
    twin: bool,
}

const fn case(
    name: &'static str,
    setup: &'static str,
    script: &'static str,
    changes: &'static [(&'static str, &'static str)],
) -> Case {
    Case {
        name,
        setup,
        script,
        changes,
        opts: &[],
        twin: true,
    }
}

const BASE: &str =
    "echo old > a.txt; mkdir -p d/sub; echo x > d/x; echo y > d/sub/y; ln -s a.txt l";

const CASES: &[Case] = &[
    case("create", BASE, "echo hi > new.txt", &[("new.txt", "created")]),
    case("modify", BASE, "echo new > a.txt", &[("a.txt", "modified")]),
    case("append", BASE, "echo more >> a.txt", &[("a.txt", "modified")]),
    case("delete", BASE, "rm a.txt", &[("a.txt", "deleted")]),
    case("rename a file", BASE, "mv a.txt b.txt", &[("a.txt", "deleted"), ("b.txt", "created")]),
    case("rename a directory", BASE, "mv d e", &[("d", "dir-deleted"), ("e", "dir-created")]),
    case("chmod a file", BASE, "chmod 600 a.txt", &[("a.txt", "mode")]),
    case("chmod +x", BASE, "chmod +x a.txt", &[("a.txt", "mode")]),
    case("chmod a directory", BASE, "chmod 700 d", &[("d", "mode")]),
    case("mkdir -p", BASE, "mkdir -p p/q/r", &[("p", "dir-created")]),
    case("mkdir -p inside an existing directory", BASE, "mkdir -p d/n/m && echo f > d/n/m/f", &[("d/n", "dir-created")]),
    case("rm -r", BASE, "rm -r d", &[("d", "dir-deleted")]),
    case("rm -r below", BASE, "rm -r d/sub", &[("d/sub", "dir-deleted")]),
    case("file to directory", BASE, "rm a.txt && mkdir a.txt && echo in > a.txt/inner", &[("a.txt", "dir-created")]),
    case("directory to file", BASE, "rm -r d && echo f > d", &[("d", "created")]),
    case("symlink created", BASE, "ln -s d/x lx", &[("lx", "symlink")]),
    case("symlink retargeted", BASE, "ln -sfn d/x l", &[("l", "symlink")]),
    case("dangling symlink", BASE, "ln -s nowhere dl", &[("dl", "symlink")]),
    case("symlink deleted", BASE, "rm l", &[("l", "deleted")]),
    case("symlink replaced by a file", BASE, "rm l && echo f > l", &[("l", "created")]),
    case("hard link", BASE, "ln a.txt h", &[("h", "created")]),
    case("hard link then edit", BASE, "ln a.txt h && echo z >> h", &[("a.txt", "modified"), ("h", "created")]),
    case("empty file", BASE, ": > empty", &[("empty", "created")]),
    case("truncate to empty", BASE, ": > a.txt", &[("a.txt", "modified")]),
    case("binary", BASE, "printf '\\000\\001\\377\\376' > bin", &[("bin", "created")]),
    case("large file (100 MB)", BASE, "yes revl-big-file-line | head -c 100000000 > big", &[("big", "created")]),
    case("large file modified in place", "head -c 5000000 /dev/zero > big", "printf x | dd of=big bs=1 seek=4000000 conv=notrunc 2>/dev/null", &[("big", "modified")]),
    case("non-UTF-8 name", BASE, "touch \"$(printf 'bad\\377name')\"", &[("bad\u{10FFFF}name", "created")]),
    case("non-UTF-8 symlink target", BASE, "ln -s \"$(printf 't\\351')\" lt", &[("lt", "symlink")]),
    case("deep path", BASE, "mkdir -p a1/a2/a3/a4/a5/a6/a7/a8/a9/a10/a11/a12/a13/a14/a15/a16/a17/a18/a19/a20/a21/a22/a23/a24/a25/a26/a27/a28/a29/a30 && echo deep > a1/a2/a3/a4/a5/a6/a7/a8/a9/a10/a11/a12/a13/a14/a15/a16/a17/a18/a19/a20/a21/a22/a23/a24/a25/a26/a27/a28/a29/a30/f", &[("a1", "dir-created")]),
    case("many files (10,000)", BASE, "mkdir many && cd many && seq 1 10000 | xargs touch", &[("many", "dir-created")]),
    case("many files modified", "mkdir m && cd m && for i in $(seq 1 300); do echo $i > f$i; done", "for f in m/*; do echo x >> $f; done", &[]),
    case("fails after changing files", BASE, "echo partial > p.txt; rm a.txt; exit 3", &[("a.txt", "deleted"), ("p.txt", "created")]),
    case("FIFO", BASE, "mkfifo fifo && echo ok > ok", &[("fifo", "ignored"), ("ok", "created")]),
    case("socket", BASE, "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")'", &[("sock", "ignored")]),
    case("special file in a new directory", BASE, "mkdir nd && mkfifo nd/fifo && echo f > nd/f", &[("nd", "dir-created"), ("nd/fifo", "ignored")]),
    case("no change", BASE, "true", &[]),
    case("same bytes rewritten", BASE, "echo old > a.txt", &[]),
    case("a tree removed and made again, identical", BASE, "rm -r d && mkdir -p d/sub && echo x > d/x && echo y > d/sub/y", &[]),
    case("a file made then removed", BASE, "echo t > tmp.txt && rm tmp.txt", &[]),
    case("read-only file deleted", "echo ro > ro.txt && chmod 444 ro.txt", "rm -f ro.txt", &[("ro.txt", "deleted")]),
    case("move a file into a directory, replacing", "echo a > a; mkdir d; echo old > d/a", "mv a d/a", &[("a", "deleted"), ("d/a", "modified")]),
    case("setgid directory mode", BASE, "chmod 2755 d", &[("d", "mode")]),
    Case {
        name: "working directory",
        setup: BASE,
        script: "echo here > f && pwd > where",
        changes: &[("d/sub/f", "created"), ("d/sub/where", "created")],
        opts: &["--cwd", "d/sub"],
        twin: false,
    },
    Case {
        name: "timeout",
        setup: BASE,
        script: "echo before > t.txt; sleep 30; echo after > u.txt",
        changes: &[("t.txt", "created")],
        opts: &["--timeout", "1"],
        twin: false,
    },
    Case {
        name: "background process left running",
        setup: BASE,
        script: "(sleep 2; echo late > late.txt) & echo now > now.txt",
        changes: &[("now.txt", "created")],
        opts: &[],
        twin: false,
    },
];

fn sh(dir: &Path, script: &str) {
    assert!(sh_status(dir, script).success(), "setup {script:?} failed");
}

fn sh_status(dir: &Path, script: &str) -> std::process::ExitStatus {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .status()
        .unwrap()
}

/// Remove what exec does not apply from a plain run's tree: special files.
fn drop_unapplied(dir: &Path) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let t = fs::symlink_metadata(&p).unwrap().file_type();
        if !(t.is_file() || t.is_dir() || t.is_symlink()) {
            if t.is_dir() {
                fs::remove_dir_all(&p).unwrap();
            } else {
                fs::remove_file(&p).unwrap();
            }
        } else if t.is_dir() {
            drop_unapplied(&p);
        }
    }
}

/// `exec SESSION -- sh -c SCRIPT`, which must succeed: its result.
fn sh_exec(w: &World, sid: &str, script: &str) -> Value {
    w.json(&["exec", sid, "--", "sh", "-c", script])
        .ok()
        .clone()
}

/// The change set without the entries recorded one by one inside a new tree (issue 23:
/// each is listed under its `dir-created` root; ignored entries are kept).
fn changes(doc: &Value) -> Vec<(String, String)> {
    let all = all_changes(doc);
    let roots: Vec<String> = all
        .iter()
        .filter(|(_, ch)| ch == "dir-created")
        .map(|(p, _)| format!("{p}/"))
        .collect();
    all.iter()
        .filter(|(p, ch)| ch == "ignored" || !roots.iter().any(|r| p.starts_with(r.as_str())))
        .cloned()
        .collect()
}

fn all_changes(doc: &Value) -> Vec<(String, String)> {
    doc["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes in {doc}"))
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["change"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every path below `top` in the workspace, relative to it (special files left out: they
/// are not applied).
fn walk_rel(ws: &Path, top: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut stack = vec![top.to_string()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(ws.join(&d)) else {
            continue;
        };
        for e in rd.flatten() {
            let rel = format!("{d}/{}", e.file_name().to_string_lossy());
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(rel.clone());
            } else if !(t.is_file() || t.is_symlink()) {
                continue;
            }
            out.insert(rel);
        }
    }
    out
}

fn fork_to(w: &World, sid: &str, at: &str) -> Value {
    let h = w.json(&["fork", sid, "--at", at]).ok()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    w.json(&["fork-confirm", sid, "--hash", &h]).ok().clone()
}

fn run_case(c: &Case) {
    let w = World::new();
    let ws = w.ws("ws");
    sh(&ws, c.setup);
    let sid = w.new_session(&ws);
    let before = snapshot(&ws);
    let twin = w.path("twin");
    if c.twin {
        let st = Command::new("cp")
            .arg("-a")
            .arg(&ws)
            .arg(&twin)
            .status()
            .unwrap();
        assert!(st.success());
    }
    let mut args = vec!["exec", sid.as_str()];
    args.extend_from_slice(c.opts);
    args.extend_from_slice(&["--", "sh", "-c", c.script]);
    let out = w.json(&args);
    let doc = out.ok().clone();
    assert_eq!(doc["sandbox"], true, "{}: {}", c.name, out.dump());
    let all = all_changes(&doc);
    // A new tree is recorded entry by entry: every path below a `dir-created` entry must be
    // listed, and exactly the paths the real workspace now holds there (an independent
    // listing); the table names only the top of each new tree.
    let tops: Vec<String> = all
        .iter()
        .filter(|(_, ch)| ch == "dir-created")
        .map(|(p, _)| p.clone())
        .collect();
    let inside = |p: &str| tops.iter().any(|t| p.starts_with(&format!("{t}/")));
    for t in tops.iter().filter(|t| !inside(t)) {
        let listed: std::collections::BTreeSet<String> = all
            .iter()
            .filter(|(p, ch)| p.starts_with(&format!("{t}/")) && ch != "ignored")
            .map(|(p, _)| p.clone())
            .collect();
        let on_disk: std::collections::BTreeSet<String> = walk_rel(&ws, t);
        assert_eq!(
            listed, on_disk,
            "{}: the entries recorded inside {t}",
            c.name
        );
    }
    let got: Vec<(String, String)> = all
        .iter()
        .filter(|(p, ch)| !inside(p) || ch == "ignored")
        .cloned()
        .collect();
    if c.name == "many files modified" {
        assert_eq!(got.len(), 300, "{}: {got:?}", c.name);
        assert!(got
            .iter()
            .all(|(p, ch)| p.starts_with("m/f") && ch == "modified"));
    } else {
        let want: Vec<(String, String)> = c
            .changes
            .iter()
            .map(|(p, ch)| (p.to_string(), ch.to_string()))
            .collect();
        assert_eq!(got, want, "{}: the change set\n{}", c.name, out.dump());
    }
    // The step: an ordinary witnessed effect, host-confined by the sandbox.
    let tl = w.timeline(&sid);
    let s = &tl["steps"][1];
    assert_eq!(s["kind"], "effect", "{}", c.name);
    assert!(
        s["label"].as_str().unwrap().starts_with("exec sh -c "),
        "{}",
        s["label"]
    );
    assert_eq!(
        s["scope"],
        serde_json::json!({"caps": ["fs"], "sandbox": true})
    );
    assert_eq!(s["detail"]["changes"], doc["changes"]);
    if c.twin {
        sh_status(&twin, c.script);
        drop_unapplied(&twin);
        assert_snap_eq(
            &snapshot(&twin),
            &snapshot(&ws),
            &format!("{}: exec against a plain run", c.name),
        );
    }
    // Nothing is drift: the log knows what the command did.
    w.json(&["verify", &sid]).ok();
    // A fork back to before the command: the workspace as it was, byte for byte.
    let rep = fork_to(&w, &sid, "0");
    assert_eq!(rep["preserved"], serde_json::json!([]), "{}: {rep}", c.name);
    assert_snap_eq(
        &before,
        &snapshot(&ws),
        &format!("{}: after a fork to step 0", c.name),
    );
    assert!(temp_leftovers(&ws).is_empty(), "{}", c.name);
}

#[test]
fn golden_table_of_edge_cases_rewinds_byte_for_byte() {
    assert!(CASES.len() >= 30, "the table has {} rows", CASES.len());
    for c in CASES {
        run_case(c);
    }
}

#[test]
fn step_back_and_abort_restore_what_a_command_changed() {
    let w = World::new();
    let ws = w.ws("ws");
    sh(&ws, BASE);
    let sid = w.new_session(&ws);
    let before = snapshot(&ws);
    let script =
        "echo n > a.txt; rm -r d; ln -sfn nowhere l; mkdir -p k/j; echo q > k/j/q; chmod 600 a.txt";
    w.json(&["exec", &sid, "--", "sh", "-c", script]).ok();
    let after1 = snapshot(&ws);
    w.json(&["write", &sid, "w.txt", "--content", "w"]).ok();
    w.json(&[
        "exec",
        &sid,
        "--",
        "sh",
        "-c",
        "echo again >> a.txt; rm w.txt",
    ])
    .ok();
    // Step back over the second command and the write: as after the first command.
    w.json(&["step-back", &sid, "--to", "1"]).ok();
    assert_snap_eq(&after1, &snapshot(&ws), "step-back to 1");
    // Abort: everything back.
    w.json(&["abort", &sid]).ok();
    assert_snap_eq(&before, &snapshot(&ws), "abort");
}

/// The sandbox's last process runs `execve` itself (it shares memory with PID 1 instead of
/// being a copy that returns into `std::process::Command`): the program is looked up on
/// the command's PATH as `execvp` does (an entry that is not executable is passed over, an
/// empty entry is the working directory), its arguments and environment arrive whole, and a
/// script without `#!` is refused (`execvp` would run it with /bin/sh; revl runs a command
/// never through a shell) with a hint that says so, nothing recorded.
#[test]
fn a_program_is_looked_up_on_path_and_a_script_without_hash_bang_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let (sid, ws) = w.session();
    let put = |rel: &str, body: &str, mode: u32| {
        let p = ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    put("first/tool", "#!/bin/sh\necho from-first\n", 0o644);
    put(
        "second/tool",
        "#!/bin/sh\necho \"from-second $# [$1] [$2] $REVL_PROBE\"\n",
        0o755,
    );
    put("plain.sh", "echo no-hash-bang\n", 0o755);
    let path = format!(
        "{}:{}:{}",
        ws.join("first").display(),
        ws.join("second").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = [("PATH", path.as_str()), ("REVL_PROBE", "probe value")];
    let doc = w
        .json_env(&["exec", &sid, "--", "tool", "a b", ""], &env)
        .ok()
        .clone();
    assert_eq!(
        doc["stdout"], "from-second 2 [a b] [] probe value\n",
        "{doc}"
    );
    assert_eq!(doc["exitCode"], 0);
    assert_eq!(w.head(&sid), 1);
    // An empty PATH entry: the working directory (here --cwd second).
    let env = [("PATH", ":/usr/bin:/bin"), ("REVL_PROBE", "cwd")];
    let doc = w
        .json_env(&["exec", &sid, "--cwd", "second", "--", "tool"], &env)
        .ok()
        .clone();
    assert_eq!(doc["stdout"], "from-second 0 [] [] cwd\n", "{doc}");
    // Only a file that is not executable: permission denied, nothing recorded.
    let env = [("PATH", path.split(':').next().unwrap())];
    let msg = w
        .json_env(&["exec", &sid, "--", "tool"], &env)
        .err(1, "exec-failed");
    assert!(msg.contains("Permission denied"), "{msg}");
    // A script without `#!`: refused, with the reason in the hint.
    let out = w.json(&["exec", &sid, "--", "./plain.sh"]);
    let msg = out.err(1, "exec-failed");
    assert!(msg.contains("Exec format error"), "{msg}");
    let hint = out.doc()["error"]["hint"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(hint.contains("#!"), "{hint}");
    assert_eq!(
        w.head(&sid),
        2,
        "a command that did not start records nothing"
    );
}

#[test]
fn exec_options_and_refusals() {
    let w = World::new();
    let (sid, ws) = w.session();
    // Not found: exit 1, exec-failed, nothing recorded.
    w.json(&["exec", &sid, "--", "/nonexistent/program"])
        .err(1, "exec-failed");
    assert_eq!(w.head(&sid), 0);
    // A --cwd outside the workspace: exit 2, path-outside, nothing runs.
    w.json(&["exec", &sid, "--cwd", "../..", "--", "touch", "x"])
        .err(2, "path-outside");
    w.json(&["exec", &sid, "--cwd", "missing", "--", "true"])
        .err(2, "bad-args");
    w.json(&["exec", &sid, "--timeout", "0", "--", "true"])
        .err(2, "bad-args");
    assert_eq!(w.head(&sid), 0);
    assert!(!ws.join("x").exists());
    // The environment: the caller's, plus REVL_SESSION and REVL_STEP; stdin is empty.
    let doc = sh_exec(&w, &sid, "echo $REVL_SESSION $REVL_STEP; cat");
    assert_eq!(doc["stdout"], format!("{sid} 1\n"));
    assert_eq!(doc["exitCode"], 0);
    assert_eq!(doc["timedOut"], false);
    // Outputs are capped at 1 MiB, and say so.
    let doc = sh_exec(&w, &sid, "head -c 2000000 /dev/zero | tr '\\0' a");
    assert_eq!(doc["stdoutTruncated"], true);
    assert_eq!(doc["stdout"].as_str().unwrap().len(), 1 << 20);
    // A signal: reported, not an exit code.
    let doc = w
        .json(&["exec", &sid, "--", "sh", "-c", "kill -TERM $$"])
        .ok()
        .clone();
    assert_eq!(doc["exitCode"], Value::Null);
    assert_eq!(doc["signal"], 15);
    // --unconfined: v1's opaque step and result.
    let doc = w
        .json(&["exec", &sid, "--unconfined", "--", "touch", "host.txt"])
        .ok()
        .clone();
    assert!(
        doc.get("sandbox").is_none() && doc.get("changes").is_none(),
        "{doc}"
    );
    assert!(ws.join("host.txt").exists());
    let tl = w.timeline(&sid);
    let last = tl["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["label"], "exec/opaque");
    // doctor says the sandbox works here (the suite's machine allows it).
    let doc = w.json(&["doctor"]).ok().clone();
    assert_eq!(doc["sandbox"]["available"], true, "{doc}");
}

/// A plain TCP listener on the host's loopback that counts connections.
fn listener() -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

#[test]
fn the_sandbox_confines_what_the_command_reaches() {
    let w = World::new();
    let (sid, ws) = w.session();
    let (l, port) = listener();
    // A directory of the host's disk (not under /tmp or /dev/shm, which the sandbox
    // replaces with its own): the command may read it, never write it.
    let host_dir = tempfile::Builder::new()
        .prefix("revl-sandbox-probe-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let outside = host_dir.path().join("outside.txt");
    fs::write(&outside, "host").unwrap();
    let host_tmp = std::env::temp_dir().join(format!("revl-sandbox-probe-{}", std::process::id()));
    let _ = fs::remove_file(&host_tmp);
    symlink(host_dir.path(), ws.join("out")).unwrap();
    let script = format!(
        "python3 -c 'import socket; s=socket.socket(); s.settimeout(2); s.connect((\"127.0.0.1\", {port}))' 2>/dev/null && echo CONNECTED; \
         cat {outside} | grep -q host && echo READ-OUTSIDE; \
         echo x > {outside} 2>/dev/null && echo WROTE-OUTSIDE; \
         echo x > {host_tmp} 2>/dev/null && [ -s {host_tmp} ] && echo TMP-PRIVATE-WRITABLE; \
         echo x > out/outside.txt 2>/dev/null && echo WROTE-THROUGH-LINK; \
         mount -o remount,rw / 2>/dev/null && echo REMOUNTED; \
         umount {ws} 2>/dev/null && echo UNMOUNTED; \
         ls /dev | tr '\\n' ' '; echo; \
         (sleep 37.125; echo late > late.txt) & \
         echo done",
        outside = outside.display(),
        host_tmp = host_tmp.display(),
        ws = ws.display(),
    );
    let doc = w
        .json(&["exec", &sid, "--", "sh", "-c", &script])
        .ok()
        .clone();
    let stdout = doc["stdout"].as_str().unwrap();
    assert!(stdout.contains("done"), "{doc}");
    assert!(
        stdout.contains("READ-OUTSIDE"),
        "reads are not hidden: {doc}"
    );
    assert!(
        stdout.contains("TMP-PRIVATE-WRITABLE"),
        "/tmp is the command's own, writable and discarded: {doc}"
    );
    for bad in [
        "CONNECTED",
        "WROTE-OUTSIDE",
        "WROTE-THROUGH-LINK",
        "REMOUNTED",
        "UNMOUNTED",
    ] {
        assert!(!stdout.contains(bad), "{bad}: {doc}");
    }
    assert!(
        stdout.contains("\nfull null random shm urandom zero \n"),
        "/dev holds five nodes and shm (no tty: docs/security.md): {doc}"
    );
    // Observed from outside: the listener received nothing; the host is untouched.
    assert!(
        l.accept().is_err(),
        "the host's loopback received a connection"
    );
    assert_eq!(fs::read_to_string(&outside).unwrap(), "host");
    assert!(!host_tmp.exists(), "the command wrote the host's /tmp");
    // The background child is gone: no process runs this test's unique `sleep 37.125`
    // (every process's command line, read from /proc).
    let alive: Vec<String> = fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("sleep 37.125"))
        .collect();
    assert!(
        alive.is_empty(),
        "a background process survived exec: {alive:?}"
    );
    assert!(!ws.join("late.txt").exists());
}

#[test]
fn a_crash_mid_apply_is_repaired_all_forward_or_all_back() {
    for fp in [
        "exec.mid-apply",
        "exec.after-run",
        "wal.torn-append:2",
        "wal.torn-append:3",
    ] {
        let w = World::new();
        let ws = w.ws("ws");
        sh(&ws, BASE);
        let sid = w.new_session(&ws);
        let before = snapshot(&ws);
        let script = "echo n > a.txt; rm -r d; echo b > b.txt; mkdir -p z/y; echo q > z/y/q";
        let out = w.json_env(
            &["exec", &sid, "--", "sh", "-c", script],
            &[("REVL_FAILPOINT", fp)],
        );
        assert!(out.died(), "{fp}: {}", out.dump());
        // The next command repairs: either nothing happened or all of it did.
        let tl = w.timeline(&sid);
        let now = snapshot(&ws);
        if tl["head"] == 0 {
            assert_snap_eq(&before, &now, &format!("{fp}: rolled back"));
        } else {
            assert!(
                tl["steps"][1]["label"]
                    .as_str()
                    .unwrap()
                    .starts_with("exec sh -c "),
                "{fp}"
            );
            assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "n\n", "{fp}");
            assert!(!ws.join("d").exists() && ws.join("z/y/q").exists(), "{fp}");
            let rep = fork_to(&w, &sid, "0");
            assert_eq!(rep["preserved"], serde_json::json!([]));
            assert_snap_eq(
                &before,
                &snapshot(&ws),
                &format!("{fp}: forward, then a fork"),
            );
        }
        w.json(&["verify", &sid]).ok();
        assert!(temp_leftovers(&ws).is_empty(), "{fp}");
        assert!(
            !w.store.join("scratch").join(&sid).exists(),
            "{fp}: the scratch directory was left"
        );
    }
}

/// Large preimages go to the blob store in one batch (one sync before the intent, not three
/// fsyncs a blob), and an applied file trades places with the upper layer's: a crash in the
/// middle of the apply still puts every byte back, and an exec carried through still rewinds
/// exactly, the replaced files freed by the next exec (docs/architecture.md, "The exec
/// sandbox").
#[test]
fn an_exec_over_large_files_rewinds_exactly_after_a_crash_mid_apply_or_none() {
    let setup = "for i in 1 2 3 4 5 6; do head -c 9000 /dev/urandom > big$i.bin; echo small$i > s$i.txt; done";
    let script = "for i in 1 2 3 4 5 6; do echo tail >> big$i.bin; echo more >> s$i.txt; done";
    for fp in [Some("exec.mid-apply"), None] {
        let w = World::new();
        let ws = w.ws("ws");
        sh(&ws, setup);
        let sid = w.new_session(&ws);
        let before = snapshot(&ws);
        let env: &[(&str, &str)] = match fp {
            Some(fp) => &[("REVL_FAILPOINT", fp)],
            None => &[],
        };
        let out = w.json_env(&["exec", &sid, "--", "sh", "-c", script], env);
        if fp.is_some() {
            assert!(out.died(), "{fp:?}: {}", out.dump());
            let tl = w.timeline(&sid);
            assert_eq!(tl["head"], 0, "{fp:?}: a crash mid-apply rolls back");
            assert_snap_eq(
                &before,
                &snapshot(&ws),
                "rolled back after a crash mid-apply",
            );
            continue;
        }
        let doc = out.ok().clone();
        assert_eq!(doc["changes"].as_array().map(Vec::len), Some(12), "{doc}");
        assert_eq!(
            fs::read(ws.join("big3.bin")).unwrap().len(),
            9005,
            "the append was applied"
        );
        // A second exec frees what the first replaced; the store keeps no spent scratch
        // beyond the last exec's.
        w.json(&["exec", &sid, "--", "sh", "-c", "echo again >> s1.txt"])
            .ok();
        let scratch: Vec<_> = fs::read_dir(w.store.join("scratch"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(scratch.len() <= 1, "spent scratch piles up: {scratch:?}");
        fork_to(&w, &sid, "0");
        assert_snap_eq(&before, &snapshot(&ws), "a fork to step 0 after two execs");
        w.json(&["verify", &sid]).ok();
    }
}

#[test]
fn what_the_last_exec_replaced_goes_when_the_session_ends() {
    // An exec's apply sets what it replaced aside (freed while the next exec's command
    // runs); a session that ends has no next exec, so commit and abort free it.
    for end in ["abort", "commit"] {
        let w = World::new();
        let ws = w.ws("ws");
        sh(&ws, "head -c 9000 /dev/urandom > big.bin");
        let sid = w.new_session(&ws);
        w.json(&["exec", &sid, "--", "sh", "-c", "echo tail >> big.bin"])
            .ok();
        let spent = w.store.join("scratch").join(format!("{sid}.spent"));
        assert!(spent.exists(), "{end}: the exec set nothing aside");
        if end == "abort" {
            w.json(&["abort", &sid]).ok();
        } else {
            let hash = w.json(&["commit", &sid]).ok()["hash"]
                .as_str()
                .unwrap()
                .to_string();
            w.json(&["commit-confirm", &sid, "--hash", &hash]).ok();
        }
        assert!(
            !spent.exists(),
            "{end}: the replaced bytes stay in the store"
        );
    }
}

#[test]
fn special_files_left_in_the_workspace_do_not_break_the_sandbox() {
    // A FIFO already in the workspace (not witnessed): the command runs over it.
    let w = World::new();
    let ws = w.ws("ws");
    let st = Command::new("mkfifo")
        .arg(ws.join("pipe"))
        .status()
        .unwrap();
    assert!(st.success());
    let sid = w.new_session(&ws);
    let doc = w
        .json(&["exec", &sid, "--", "sh", "-c", "echo a > a"])
        .ok()
        .clone();
    assert_eq!(
        changes(&doc),
        vec![("a".to_string(), "created".to_string())]
    );
    assert!(fs::symlink_metadata(ws.join("pipe"))
        .unwrap()
        .file_type()
        .is_fifo());
}

/// Run the binary as an unprivileged user: `nobody` through `setpriv` when the suite runs
/// as root (as CI does), else as the current user.
fn as_user(dir: &Path, args: &[&str]) -> (Value, String) {
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin()]);
        c
    } else {
        Command::new(bin())
    };
    let out = cmd
        .arg("--store")
        .arg(dir.join("store"))
        .arg("--json")
        .args(args)
        .env("HOME", dir)
        .current_dir(dir)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {doc} {err}");
    (doc, err)
}

#[test]
fn the_sandbox_works_for_an_unprivileged_user() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("revl-unpriv-")
        .tempdir_in(tmp_base())
        .unwrap();
    let d = dir.path();
    fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir(d.join("ws")).unwrap();
    fs::write(d.join("ws/a"), "a\n").unwrap();
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "[ \"$(id -u)\" != 0 ] || chown -R 65534:65534 {0}/ws && mkdir -p {0}/store && ([ \"$(id -u)\" != 0 ] || chown 65534:65534 {0}/store)",
            d.display()
        ))
        .status()
        .unwrap();
    assert!(st.success());
    let before = snapshot(&d.join("ws"));
    let (doc, _) = as_user(d, &["doctor"]);
    assert_eq!(doc["sandbox"]["available"], true, "{doc}");
    assert_eq!(doc["root"], false, "{doc}");
    let (doc, _) = as_user(d, &["new", "--workspace", d.join("ws").to_str().unwrap()]);
    let sid = doc["session"].as_str().unwrap().to_string();
    let (doc, _) = as_user(
        d,
        &[
            "exec",
            &sid,
            "--",
            "sh",
            "-c",
            "id -u; echo b > a; mkdir -p x/y; echo z > x/y/z; echo no > /etc/revl-probe",
        ],
    );
    let uid = doc["stdout"].as_str().unwrap().trim().to_string();
    assert!(
        uid != "0" && uid.parse::<u32>().is_ok(),
        "the command ran as {uid:?}: {doc}"
    );
    assert_eq!(
        changes(&doc),
        vec![
            ("a".into(), "modified".into()),
            ("x".into(), "dir-created".into())
        ]
    );
    assert!(
        doc["stderr"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{doc}"
    );
    assert!(!Path::new("/etc/revl-probe").exists());
    let (doc, _) = as_user(d, &["fork", &sid, "--at", "0"]);
    let hash = doc["hash"].as_str().unwrap().to_string();
    as_user(d, &["fork-confirm", &sid, "--hash", &hash]);
    assert_snap_eq(&before, &snapshot(&d.join("ws")), "after a fork, as a user");
}
