//! Nothing the caller holds leaks into a command (docs/security.md, "What a command can
//! reach"): descriptors revl's caller left open are closed in the command, its standard
//! input is /dev/null, and PID 1 of the sandbox (which only waits for the command) is
//! filtered, not dumpable and out of the caller's process group.

use crate::common::{bin, World};
use serde_json::Value;
use std::process::{Command, Stdio};

/// `revl --json exec SID -- ARGV` started by `sh`, which first opens `setup` (redirections
/// such as `5>>FILE`): the descriptors stay open in revl, as a careless caller leaves them.
fn exec_from_shell(w: &World, sid: &str, setup: &str, argv: &[&str]) -> Value {
    let quoted: Vec<String> = argv
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let script = format!(
        "exec {setup}; exec '{}' --store '{}' --json exec {sid} -- {}",
        bin(),
        w.store.display(),
        quoted.join(" ")
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(
        out.status.success(),
        "{script}\n{doc}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    doc
}

#[test]
fn descriptors_the_caller_left_open_do_not_reach_the_command() {
    let w = World::new();
    let (sid, _ws) = w.session();
    let canary = w.path("canary.txt");
    std::fs::write(&canary, b"untouched").unwrap();
    let dir = w.path("hostdir");
    std::fs::create_dir(&dir).unwrap();
    let setup = format!(
        "5>>'{}' 6<'{}' 7<'{}'",
        canary.display(),
        canary.display(),
        dir.display()
    );
    let doc = exec_from_shell(
        &w,
        &sid,
        &setup,
        &[
            "sh",
            "-c",
            "echo pwned >&5 && echo wrote5; cat <&6 && echo read6; ls /proc/self/fd; cat > /dev/null && echo stdin-empty",
        ],
    );
    let out = doc["stdout"].as_str().unwrap_or_default();
    assert!(!out.contains("wrote5") && !out.contains("read6"), "{doc}");
    assert_eq!(std::fs::read(&canary).unwrap(), b"untouched");
    // Only 0, 1, 2 (and the descriptor `ls` itself holds on the directory it lists).
    let fds: Vec<u32> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert!(
        fds.iter().all(|&f| f <= 3),
        "open descriptors: {fds:?}\n{doc}"
    );
    assert!(out.contains("stdin-empty"), "stdin is /dev/null: {doc}");
}

#[test]
fn pid_1_of_the_sandbox_is_filtered_not_dumpable_and_in_a_session_of_its_own() {
    let w = World::new();
    let (sid, _ws) = w.session();
    let doc = w
        .json(&[
            "exec",
            &sid,
            "--",
            "sh",
            "-c",
            "grep -E '^(Seccomp|NoNewPrivs):' /proc/1/status; \
             if head -c 1 /proc/1/mem >/dev/null 2>&1; then echo mem-readable; else echo mem-refused; fi; \
             echo session $(cut -d' ' -f6 /proc/1/stat) pgrp $(cut -d' ' -f5 /proc/1/stat)",
        ])
        .ok()
        .clone();
    let out = doc["stdout"].as_str().unwrap_or_default();
    assert!(
        out.lines()
            .any(|l| l.starts_with("Seccomp:") && l.trim_end().ends_with('2')),
        "PID 1 runs under the filter: {doc}"
    );
    assert!(out.contains("mem-refused"), "PID 1 is not dumpable: {doc}");
    // PID 1 leads a session of its own (its session id is its own pid, 1).
    assert!(out.contains("session 1 pgrp 1"), "{doc}");
}

/// Metadata revl neither records nor rewinds (extended attributes: user attributes, ACLs;
/// inode flags) that a command set never reaches the workspace silently: it is removed
/// before the change is applied, and the change says so. What the real file already had
/// stays.
#[test]
fn xattrs_and_inode_flags_a_command_set_are_not_applied() {
    let w = World::new();
    let (sid, ws) = w.session();
    std::fs::write(ws.join("old.txt"), b"old").unwrap();
    let had = std::process::Command::new("python3")
        .args([
            "-c",
            "import os,sys; os.setxattr(sys.argv[1], 'user.owner', b'kept')",
        ])
        .arg(ws.join("old.txt"))
        .status()
        .unwrap();
    assert!(had.success(), "user xattrs on the test's filesystem");
    let doc = w
        .json(&[
            "exec",
            &sid,
            "--",
            "python3",
            "-c",
            "import os, subprocess\n\
             open('new.txt','w').write('new')\n\
             os.setxattr('new.txt','user.evil',b'1')\n\
             open('old.txt','a').write('+')\n\
             os.setxattr('old.txt','user.evil',b'2')\n\
             os.makedirs('d')\n\
             open('d/in.txt','w').write('in')\n\
             os.setxattr('d/in.txt','user.evil',b'3')\n\
             subprocess.run(['chattr','+d','new.txt'])\n",
        ])
        .ok()
        .clone();
    let xattr = |p: &std::path::Path, name: &str| -> Option<Vec<u8>> {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import os,sys\ntry: sys.stdout.write(os.getxattr(sys.argv[1], sys.argv[2]).decode())\nexcept OSError: sys.exit(3)",
            ])
            .arg(p)
            .arg(name)
            .output()
            .unwrap();
        out.status.success().then_some(out.stdout)
    };
    for p in ["new.txt", "old.txt", "d/in.txt"] {
        assert_eq!(xattr(&ws.join(p), "user.evil"), None, "{p}: {doc}");
    }
    assert_eq!(
        xattr(&ws.join("old.txt"), "user.owner").as_deref(),
        Some(&b"kept"[..])
    );
    let flags = std::process::Command::new("lsattr")
        .arg(ws.join("new.txt"))
        .output()
        .unwrap();
    let flags = String::from_utf8_lossy(&flags.stdout);
    assert!(
        !flags.split_whitespace().next().unwrap_or("").contains('d'),
        "no-dump flag applied: {flags}"
    );
    let changes = doc["changes"].as_array().unwrap();
    let why = |p: &str| {
        changes
            .iter()
            .find(|c| c["path"] == p)
            .and_then(|c| c["why"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert!(why("new.txt").contains("user.evil"), "{doc}");
    assert!(why("old.txt").contains("user.evil"), "{doc}");
    assert!(why("d/in.txt").contains("user.evil"), "{doc}");
}

/// `/proc/keys` lists the key names the caller may view (across its keyrings): the command
/// reads an empty file.
#[test]
fn the_callers_key_names_are_hidden() {
    let w = World::new();
    let (sid, _ws) = w.session();
    // A key in the caller's user keyring, named so that a leak is visible.
    let _ = Command::new("python3")
        .args([
            "-c",
            "import ctypes; l=ctypes.CDLL(None); l.syscall(248, b'user', b'revl-canary-key', b'x', 1, -4)",
        ])
        .status();
    let doc = w
        .json(&[
            "exec",
            &sid,
            "--",
            "sh",
            "-c",
            "wc -c < /proc/keys; cat /proc/keys /proc/key-users",
        ])
        .ok()
        .clone();
    let out = doc["stdout"].as_str().unwrap_or_default();
    assert_eq!(out.lines().next().map(str::trim), Some("0"), "{doc}");
    assert!(!out.contains("revl-canary-key"), "{doc}");
}

/// A directory is rewound through handles, never by path: while revl rebuilds a deleted
/// tree of 2,000 files, a concurrent writer keeps swapping the directory being rebuilt for a
/// symlink to a directory outside the workspace. Nothing is ever written outside.
#[test]
fn a_directory_swapped_for_a_symlink_mid_rewind_is_never_written_through() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for round in 0..3 {
        let w = World::new();
        let (sid, ws) = w.session();
        std::fs::create_dir_all(ws.join("d")).unwrap();
        for i in 0..2000 {
            std::fs::write(ws.join(format!("d/f{i}")), format!("{i}")).unwrap();
        }
        let outside = w.path("outside");
        std::fs::create_dir(&outside).unwrap();
        w.json(&["delete", &sid, "d"]).ok();
        let stop = AtomicBool::new(false);
        let swaps = std::thread::scope(|sc| {
            let attacker = sc.spawn(|| {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let d = ws.join("d");
                    if std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir())
                        && std::fs::rename(&d, ws.join(format!("moved-{n}"))).is_ok()
                    {
                        let _ = std::os::unix::fs::symlink(&outside, &d);
                        n += 1;
                    }
                }
                n
            });
            // The rewind may fail (the directory it made was taken away): it must never
            // write outside.
            let _ = w.json(&["step-back", &sid, "--to", "0"]);
            stop.store(true, Ordering::Relaxed);
            attacker.join().unwrap()
        });
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "round {round}: revl wrote through the swapped symlink ({swaps} swaps)"
        );
    }
}
