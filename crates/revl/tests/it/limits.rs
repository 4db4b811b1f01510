//! Limits that hold and are named (docs/security.md, "The layers", 3): the sandbox's tmpfs
//! are bounded, an open-file limit applies, and the result names the limit that stopped a
//! command where revl can tell.

use crate::common::World;
use serde_json::Value;

fn exec(w: &World, sid: &str, limits: &[&str], script: &str) -> Value {
    let mut args = vec!["exec", sid];
    args.extend_from_slice(limits);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    w.json(&args).ok().clone()
}

#[test]
fn the_sandbox_tmpfs_are_bounded_by_the_memory_limit() {
    let w = World::new();
    let (sid, _ws) = w.session();
    // 64 MiB of memory: each tmpfs holds at most a third of it.
    let doc = exec(
        &w,
        &sid,
        &["--memory", "64M"],
        "for d in /tmp /dev/shm; do head -c 100000000 /dev/zero > $d/big 2>/dev/null; echo $d $(wc -c < $d/big); done",
    );
    let out = doc["stdout"].as_str().unwrap_or_default();
    for line in out.lines() {
        let n: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(
            n <= 64 << 20,
            "a tmpfs held {n} bytes under --memory 64M: {doc}"
        );
    }
    assert_eq!(out.lines().count(), 2, "{doc}");
}

#[test]
fn an_open_file_limit_applies() {
    let w = World::new();
    let (sid, _ws) = w.session();
    let doc = exec(&w, &sid, &[], "ulimit -n");
    let n: u64 = doc["stdout"].as_str().unwrap().trim().parse().unwrap();
    assert!(n <= 4096, "{doc}");
}

#[test]
fn the_result_names_the_limit_that_stopped_a_command() {
    let w = World::new();
    let (sid, _ws) = w.session();
    let doc = exec(&w, &sid, &["--cpu-seconds", "1"], "while :; do :; done");
    assert_eq!(doc["limit"], "cpu", "{doc}");
    let doc = exec(&w, &sid, &["--timeout", "1"], "sleep 30");
    assert_eq!(doc["limit"], "timeout", "{doc}");
    let doc = exec(&w, &sid, &[], "true");
    assert!(doc.get("limit").is_none(), "{doc}");
    // --pids: named where a pids cgroup held it; elsewhere the result says which weaker
    // limit applied.
    let doc = exec(
        &w,
        &sid,
        &["--pids", "20"],
        "for i in $(seq 1 60); do sleep 2 & done 2>/dev/null; wait",
    );
    match doc.get("pidsLimit").and_then(Value::as_str) {
        None => assert_eq!(doc["limit"], "pids", "{doc}"),
        Some(weaker) => assert!(weaker == "rlimit" || weaker == "none", "{doc}"),
    }
}

/// Text output is capped: a command that prints 3 MB of control bytes (each shown as four
/// escaped characters) does not flood the terminal with 12 MB; the cut is said.
#[test]
fn text_output_is_capped_and_says_so() {
    let w = World::new();
    let (sid, _ws) = w.session();
    let out = w.run(&[
        "exec",
        &sid,
        "--",
        "sh",
        "-c",
        "head -c 3000000 /dev/zero | tr '\\000' '\\001'",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.len() < (1 << 20) + 64 * 1024,
        "{} bytes reached the terminal",
        out.stdout.len()
    );
    assert!(
        out.stdout.contains("the rest is cut here"),
        "the cut is said"
    );
}

/// `--max-bytes` counts every entry, directories included: 5,000 empty directories do not
/// pass a 1 MiB limit.
#[test]
fn max_bytes_counts_directories_too() {
    let w = World::new();
    let (sid, ws) = w.session();
    let out = w.json(&[
        "exec",
        &sid,
        "--max-bytes",
        "1M",
        "--",
        "sh",
        "-c",
        "for i in $(seq 1 5000); do mkdir d$i; done",
    ]);
    out.err(1, "limit-exceeded");
    assert_eq!(
        std::fs::read_dir(&ws).unwrap().count(),
        0,
        "nothing applied"
    );
}
