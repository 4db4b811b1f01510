//! `exec`'s outputs (docs/user-guide.md, "Shell commands: `revl exec`", issue 23 #13),
//! through the binary: beyond the 1 MiB cap the result keeps the head AND the tail (a test
//! runner's summary is at the end) with one marker line between; in text mode the command's
//! output reaches the terminal while it runs.

use crate::common::*;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

const MIB: usize = 1024 * 1024;

/// A command printing 3 MiB whose last line is the summary: the JSON keeps its first line,
/// its last line and a marker saying how much fell between, within 1 MiB; stderr too.
#[test]
fn exec_keeps_the_head_and_the_tail_of_a_long_output() {
    let w = World::new();
    let (s, _ws) = w.session();
    // Numbered lines to 3 MiB, then the summary; the same shape on stderr.
    let script = "i=0; while [ $i -lt 60000 ]; do \
        echo \"line $i ........................................\"; i=$((i+1)); done; \
        echo 'SUMMARY: 1 failed'; \
        head -c 3145728 /dev/zero | tr '\\0' 'e' >&2; echo >&2; echo 'ERR-TAIL' >&2";
    let out = w.json(&["exec", &s, "--", "sh", "-c", script]);
    let doc = out.ok().clone();
    let stdout = doc["stdout"].as_str().unwrap();
    assert_eq!(doc["stdoutTruncated"], true, "{}", out.dump().len());
    assert!(
        stdout.starts_with("line 0 ..."),
        "the head's first line: {:.60}",
        stdout
    );
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some("SUMMARY: 1 failed"),
        "the tail's last line is kept"
    );
    let markers: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("[\u{2026} ") && l.ends_with(" bytes omitted \u{2026}]"))
        .collect();
    assert_eq!(markers.len(), 1, "one marker line between head and tail");
    let omitted: usize = markers[0]
        .trim_start_matches("[\u{2026} ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let total = 60000 * "line N ........................................\n".len();
    assert!(
        omitted > total - MIB - 8 * 1024,
        "omitted {omitted} of ~{total}"
    );
    assert!(
        stdout.len() <= MIB,
        "at most 1 MiB, the marker included: {}",
        stdout.len()
    );
    // Whole lines meet the marker on both sides.
    let (before, after) = stdout.split_once(markers[0]).unwrap();
    assert!(
        before.ends_with(".....\n"),
        "{:?}",
        &before[before.len() - 20..]
    );
    assert!(after.starts_with("\nline "), "{:?}", &after[..20]);
    let stderr = doc["stderr"].as_str().unwrap();
    assert_eq!(doc["stderrTruncated"], true);
    assert!(stderr.starts_with("eee") && stderr.trim_end().ends_with("ERR-TAIL"));
    assert!(stderr.len() <= MIB, "{}", stderr.len());
    // A short output is kept whole, unmarked.
    let short = w.json(&["exec", &s, "--", "sh", "-c", "echo one; echo two"]);
    let d = short.ok();
    assert_eq!(
        (d["stdout"].as_str(), &d["stdoutTruncated"]),
        (Some("one\ntwo\n"), &serde_json::json!(false))
    );
}

/// Text mode: the first line is on revl's stdout while the command still sleeps; stderr goes
/// to stderr; the step summary comes after the output. --json stays one document.
#[test]
fn exec_in_text_mode_streams_the_output_as_the_command_runs() {
    let w = World::new();
    let (s, _ws) = w.session();
    let script = "echo first; echo warn >&2; sleep 2; echo second > out.txt; echo last";
    let store = w.store.to_str().unwrap().to_string();
    let mut child = w
        .command_for(&["--store", &store, "exec", &s, "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let seen_after = started.elapsed();
    assert_eq!(first, "first");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first line arrived only after revl exited ({seen_after:?})"
    );
    assert!(
        seen_after < Duration::from_millis(1900),
        "the first line waited for the command's sleep: {seen_after:?}"
    );
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    let err = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert!(status.success(), "{rest:?} {err}");
    assert_eq!(rest[0], "last", "{rest:?}");
    assert!(
        rest[1].starts_with("step ") && rest[1].ends_with("exec (sandboxed)  exit 0  1 change(s)"),
        "the summary follows the output: {rest:?}"
    );
    assert!(
        !rest.iter().any(|l| l.starts_with("--- stdout")),
        "the output is not printed twice: {rest:?}"
    );
    assert_eq!(err.trim(), "warn", "stderr goes to stderr");
    // --json: the document alone, with the captured outputs.
    let o = w.json(&["exec", &s, "--", "sh", "-c", "echo hi; echo oops >&2"]);
    let d = o.ok();
    assert_eq!(
        (d["stdout"].as_str(), d["stderr"].as_str()),
        (Some("hi\n"), Some("oops\n"))
    );
    assert_eq!(o.stderr, "", "nothing streamed under --json");
}
