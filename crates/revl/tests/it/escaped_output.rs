//! What a terminal shows is escaped (docs/reference.md, "Errors and exit codes"; docs/security.md):
//! every path, label, argument and message that came from the workspace, a command or a
//! manifest has its control characters escaped in text output, a newline in a name forges no
//! line, and a control character split across two writes of a command never reaches the
//! terminal whole.

use crate::common::{put, World};

/// A name that would clear the screen and forge a report line if printed raw.
const EVIL: &str = "evil\nstep 9  fs.write forged\u{1b}[2J\rX";

fn assert_clean(text: &str, what: &str) {
    assert!(
        !text.contains('\u{1b}') && !text.contains('\r') && !text.contains('\u{9b}'),
        "{what}: a control character reached the terminal: {text:?}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with("step 9  fs.write forged")),
        "{what}: a newline in a name forged a line: {text}"
    );
}

#[test]
fn hand_made_names_are_escaped_in_every_rewind_report() {
    let w = World::new();
    let (s, ws) = w.session();
    w.json(&["mkdir", &s, "d"]).ok();
    w.json(&["write", &s, "a.txt", "--content", "a"]).ok();
    put(&ws.join("d").join(EVIL), b"hand", 0o644);
    let v = w.run(&["verify", &s]);
    assert_eq!(v.code, Some(1), "{}", v.dump());
    assert_clean(&v.stdout, "verify");
    assert!(v.stdout.contains("d/evil\\nstep 9"), "{}", v.stdout);
    let f = w.run(&["fork", &s, "--at", "0"]);
    assert_clean(&f.stdout, "fork");
    let sb = w.run(&["step-back", &s, "--to", "0"]);
    assert_eq!(sb.code, Some(0), "{}", sb.dump());
    assert_clean(&sb.stdout, "step-back");
    assert!(
        sb.stdout.contains("preserved") && sb.stdout.contains("evil\\n"),
        "the preserved list names it, escaped: {}",
        sb.stdout
    );
}

#[test]
fn a_command_s_names_are_escaped_in_the_change_list() {
    let w = World::new();
    let (s, _ws) = w.session();
    let out = w.run(&[
        "exec",
        &s,
        "--",
        "sh",
        "-c",
        "printf x > \"$(printf 'evil\\nstep 9  fs.write forged\\033[2J')\"",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert_clean(&out.stdout, "exec");
    assert_eq!(
        out.stdout.lines().filter(|l| l.contains("created")).count(),
        1,
        "one change, one line: {}",
        out.stdout
    );
    let tl = w.run(&["timeline", &s]);
    assert_clean(&tl.stdout, "timeline");
}

#[test]
fn a_control_character_split_across_two_writes_is_escaped() {
    let w = World::new();
    let (s, _ws) = w.session();
    // CSI (U+009B) as UTF-8 is C2 9B: written in two flushes, a second apart.
    let out = w.run(&[
        "exec",
        &s,
        "--",
        "sh",
        "-c",
        "printf 'a\\302'; sleep 0.3; printf '\\2332J done\\n'",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    let raw = out.stdout.as_bytes();
    assert!(
        !raw.windows(2).any(|p| p == [0xc2, 0x9b]),
        "C2 9B reached the terminal: {:?}",
        out.stdout
    );
    assert!(out.stdout.contains("a\\x9b2J done"), "{:?}", out.stdout);
}

#[test]
fn manifest_labels_and_error_messages_are_one_line() {
    let w = World::new();
    let (s, _ws) = w.session();
    // A path that does not exist, holding a newline and ESC: the one-line error says so
    // escaped.
    let out = w.run(&["read", &s, "no\nsuch\u{1b}[2J"]);
    assert_ne!(out.code, Some(0));
    assert!(!out.stderr.contains('\u{1b}'), "{:?}", out.stderr);
    assert_eq!(out.stderr.trim_end().lines().count(), 1, "{:?}", out.stderr);
}
