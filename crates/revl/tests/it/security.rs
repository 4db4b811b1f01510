//! Security: confinement of the built-in file effects under attack, and argv templates that
//! never meet a shell.
//!
//! - a directory component swapped for a symlink to the outside while revl writes in a loop
//!   (a check-then-use race): no file outside the workspace is ever created or changed;
//! - hard links to files outside the workspace: a write replaces the name (never writes
//!   through the link); a chmod must not change the outside file's mode;
//! - NAME_MAX / PATH_MAX overflows and non-UTF-8 names: a clean refusal, nothing changed;
//! - a tool argument that tries shell injection is one argv element, never interpreted.

use crate::common;
use crate::common::manifest::{self, tool};

use common::{snapshot, World};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The whole outside tree, to compare before and after.
fn outside_state(dir: &Path) -> common::Snapshot {
    snapshot(dir)
}

/// Flip `ws/d` between the real directory and a symlink to `outside` until `stop`.
fn flipper(ws: &Path, outside: &Path, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let (ws, outside, stop) = (ws.to_path_buf(), outside.to_path_buf(), stop.clone());
    std::thread::spawn(move || {
        let (d, real) = (ws.join("d"), ws.join("d.real"));
        let mut flips = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let hold = std::time::Duration::from_micros(200 + (flips % 7) * 150);
            if std::fs::rename(&d, &real).is_ok() {
                let _ = std::os::unix::fs::symlink(&outside, &d);
                std::thread::sleep(hold);
                let _ = std::fs::remove_file(&d);
                let _ = std::fs::rename(&real, &d);
                flips += 1;
            }
            std::thread::sleep(hold);
        }
        flips
    })
}

#[test]
fn a_symlink_swapped_in_during_rewinds_never_lets_a_restore_out() {
    let w = World::new();
    let (sid, ws) = w.session();
    let outside = w.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("f0"), "outside, untouched").unwrap();
    std::fs::create_dir_all(ws.join("d")).unwrap();
    let before = outside_state(&outside);
    // Files under d with history, so that each step-back restores preimages there.
    w.json(&["write", &sid, "d/f0", "--content", "v0"]).ok();
    w.json(&["write", &sid, "d/f1", "--content", "v0"]).ok();
    let stop = Arc::new(AtomicBool::new(false));
    let flips = flipper(&ws, &outside, &stop);
    for i in 0..80 {
        // A rewind interrupted by the swap (path-outside) is finished by the next attach,
        // which may meet the symlink too: ask until the directory is real again.
        // Under the attack an attach may also fail on a path that vanished mid-read (io):
        // a refusal, never an escape; the outside is checked after every command.
        let mut tries = 0;
        let head = loop {
            let t = w.json(&["timeline", &sid]);
            if t.code == Some(0) {
                break t.doc()["head"].as_u64().unwrap();
            }
            assert!(matches!(t.code, Some(1 | 2)) && tries < 500, "{}", t.dump());
            assert_eq!(outside_state(&outside), before, "a repair reached outside");
            tries += 1;
        };
        let wrote = w.json(&[
            "write",
            &sid,
            &format!("d/f{}", i % 2),
            "--content",
            &format!("v{i}"),
        ]);
        if wrote.code == Some(0) {
            let out = w.json(&["step-back", &sid, "--to", &head.to_string()]);
            assert!(matches!(out.code, Some(0..=2)), "{}", out.dump());
        }
        assert_eq!(
            outside_state(&outside),
            before,
            "rewind {i} reached outside the workspace"
        );
    }
    stop.store(true, Ordering::Relaxed);
    assert!(flips.join().unwrap() > 0);
}

#[test]
fn a_symlink_swapped_in_during_writes_never_lets_a_write_out() {
    let w = World::new();
    let (sid, ws) = w.session();
    let outside = w.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("f0"), "outside, untouched").unwrap();
    std::fs::create_dir_all(ws.join("d")).unwrap();
    let before = outside_state(&outside);

    // The attacker flips ws/d between a real directory and a symlink to the outside.
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = flipper(&ws, &outside, &stop);
    let mut outcomes = std::collections::BTreeMap::new();
    for i in 0..150 {
        let out = w.json(&[
            "write",
            &sid,
            &format!("d/f{}", i % 3),
            "--content",
            "payload",
        ]);
        assert!(
            matches!(out.code, Some(0..=2)),
            "exit {:?}\n{}",
            out.code,
            out.dump()
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.dump());
        *outcomes.entry(out.code).or_insert(0) += 1;
        let now = outside_state(&outside);
        assert_eq!(
            now,
            before,
            "write {i} reached outside the workspace through the swapped symlink: {:?}",
            now.keys().collect::<Vec<_>>()
        );
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    println!("symlink race: {flips} flips, outcomes {outcomes:?}");
    assert!(flips > 0);
}

/// Two names, one inode: `ws/link` and `outside.txt`.
fn hard_linked(w: &World) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let (sid, ws) = w.session();
    let outside = w.path("outside.txt");
    std::fs::write(&outside, "secret outside").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::hard_link(&outside, ws.join("link")).unwrap();
    assert_eq!(std::fs::metadata(&outside).unwrap().nlink(), 2);
    (sid, ws, outside)
}

#[test]
fn a_write_to_a_hard_linked_name_never_changes_the_outside_file() {
    let w = World::new();
    let (sid, ws, outside) = hard_linked(&w);
    w.json(&["write", &sid, "link", "--content", "inside"]).ok();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret outside");
    assert_eq!(std::fs::read_to_string(ws.join("link")).unwrap(), "inside");
    // Rewinding puts the name back to its preimage bytes, still without touching outside.
    w.json(&["step-back", &sid, "--to", "0"]).ok();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret outside");
    assert_eq!(
        std::fs::read_to_string(ws.join("link")).unwrap(),
        "secret outside"
    );
    // Deleting the name unlinks it only.
    w.json(&["delete", &sid, "link"]).ok();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret outside");
    assert_eq!(
        std::fs::metadata(&outside).unwrap().permissions().mode() & 0o7777,
        0o600
    );
}

#[test]
fn a_chmod_of_a_hard_linked_name_never_changes_the_outside_mode() {
    let w = World::new();
    let (sid, _ws, outside) = hard_linked(&w);
    let out = w.json(&["chmod", &sid, "link", "777"]);
    let mode = std::fs::metadata(&outside).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        mode,
        0o600,
        "chmod through a hard link changed the outside file's mode\n{}",
        out.dump()
    );
    // Refused before anything changed, as a path that cannot be proven inside.
    out.err(2, "path-outside");
    assert_eq!(w.head(&sid), 0);
}

#[test]
fn overlong_names_and_paths_are_refused_cleanly() {
    let w = World::new();
    let (sid, ws) = w.session();
    w.json(&["write", &sid, "keep", "--content", "k"]).ok();
    let before = snapshot(&ws);
    let long_name = "n".repeat(300); // > NAME_MAX (255)
    let deep = vec!["abcdefghij"; 500].join("/"); // > PATH_MAX (4096)
    let deep_file = format!("{deep}/f");
    let cases: Vec<Vec<&str>> = vec![
        vec!["write", &sid, &long_name, "--content", "x"],
        vec!["write", &sid, &deep_file, "--content", "x"],
        vec!["mkdir", &sid, &long_name],
        vec!["mkdir", &sid, &deep],
        vec!["rename", &sid, "keep", &long_name],
        vec!["rename", &sid, "keep", &deep_file],
        vec!["delete", &sid, &long_name],
        vec!["chmod", &sid, &deep_file, "600"],
        vec!["read", &sid, &long_name],
        vec!["list", &sid, &deep],
    ];
    for c in &cases {
        let out = w.json(c);
        assert!(
            matches!(out.code, Some(1 | 2)),
            "{:?} must be refused\n{}",
            &c[..2],
            out.dump()
        );
        let code = out.doc()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string();
        out.err(out.code.unwrap(), &code);
        assert!(
            out.stderr.contains("too long") || out.stderr.contains("does not exist"),
            "the message says why: {}",
            out.stderr
        );
        common::assert_snap_eq(&before, &snapshot(&ws), "after an overlong path");
    }
    assert_eq!(w.head(&sid), 1, "no step was recorded");
}

#[test]
fn non_utf8_names_given_on_the_command_line_name_the_real_file() {
    // Any name is data (docs/wal-format.md, "Names that are not UTF-8"): a path argument
    // that is not UTF-8 names exactly that file, and documents carry its escaped form.
    let w = World::new();
    let (sid, ws) = w.session();
    let bad = std::ffi::OsStr::from_bytes(b"bad\xffname");
    let run = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(common::bin())
            .arg("--store")
            .arg(&w.store)
            .arg("--json")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    let (sid_os, write, content, x) = (os(&sid), os("write"), os("--content"), os("x"));
    run(&[&write, &sid_os, bad, &content, &x]);
    assert_eq!(std::fs::read(ws.join(bad)).unwrap(), b"x");
    let read = run(&[&os("read"), &sid_os, bad]);
    assert_eq!(read["content"], "x");
    assert_eq!(read["path"], "bad\u{10FFFF}name");
    run(&[&os("rename"), &sid_os, bad, &os("good")]);
    assert_eq!(std::fs::read(ws.join("good")).unwrap(), b"x");
    run(&[&os("rename"), &sid_os, &os("good"), bad]);
    run(&[&os("delete"), &sid_os, bad]);
    assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 0);
    w.json(&["step-back", &sid, "--to", "3"]).ok();
    assert_eq!(std::fs::read(ws.join(bad)).unwrap(), b"x");
    w.json(&["step-back", &sid, "--to", "0"]).ok();
    assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 0, "nothing left");
}

#[test]
fn a_tool_argument_is_never_passed_through_a_shell() {
    let w = World::new();
    let ws = w.ws("ws");
    let pwned = w.path("pwned");
    let manifest = w.path("revl.toml");
    std::fs::write(
        &manifest,
        manifest::text(&[
            tool("say", "opaque").run(&["echo", "{word}"]),
            tool("note", "effect")
                .scope_table("caps = [], confined = true")
                .run(&["echo", "-n", "{word}"])
                .undo("unnote"),
            tool("unnote", "inverse")
                .scope(&[])
                .run(&["echo", "{word}", "{witness}"]),
        ]),
    )
    .unwrap();
    let sid = w.new_session_with(&ws, &manifest);
    let p = pwned.display().to_string();
    let attacks = [
        format!("x; touch {p}"),
        format!("$(touch {p})"),
        format!("`touch {p}`"),
        format!("x && touch {p} | cat > {p}"),
        format!("'\"; touch {p}; echo \""),
    ];
    for a in &attacks {
        let args = serde_json::json!({ "word": a }).to_string();
        let out = w.json(&["call", &sid, "say", "--args", &args]);
        let doc = out.ok();
        assert_eq!(
            doc["stdout"],
            format!("{a}\n"),
            "echo got the value verbatim"
        );
        let out = w.json(&["call", &sid, "note", "--args", &args]);
        assert_eq!(out.ok()["stdout"], a.as_str());
        assert!(!pwned.exists(), "the shell ran: {a}");
    }
    // The undo tools get the same values (and the witness) as plain arguments too.
    w.json(&["abort", &sid]).ok();
    assert!(!pwned.exists());
    assert!(std::fs::read_dir(&ws).unwrap().next().is_none());
}
