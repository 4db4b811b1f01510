//! Rough edges a new user hit (issue 17), each fixed with a test through the binary.

use crate::common::World;
use serde_json::Value;

#[test]
fn note_model_refuses_attempts_above_the_ceiling_and_a_second_decision() {
    let w = World::new();
    let (sid, _) = w.session();
    w.json(&["write", &sid, "a", "--content", "x"]).ok();
    let note = |attempts: &str, ceiling: &str| {
        w.json(&[
            "note-model",
            &sid,
            "--step",
            "1",
            "--model",
            "m",
            "--tokens-in",
            "1",
            "--tokens-out",
            "1",
            "--latency-seconds",
            "0.5",
            "--attempts",
            attempts,
            "--attempt-ceiling",
            ceiling,
            "--outcome",
            "validated",
        ])
    };
    let msg = note("4", "3").err(2, "bad-args");
    assert!(msg.contains("above the attempt ceiling"), "{msg}");
    note("3", "3").ok();
    let msg = note("1", "3").err(2, "bad-args");
    assert!(msg.contains("already has its model decision"), "{msg}");
}

#[test]
fn a_label_with_a_newline_stays_one_timeline_line_and_an_opaque_exec_shows_its_command() {
    let w = World::new();
    let (sid, _) = w.session();
    w.json(&["boundary", &sid, "--label", "two\nlines"]).ok();
    w.json(&["exec", &sid, "--unconfined", "--", "echo", "hi there"])
        .ok();
    let out = w.run(&["timeline", &sid]);
    assert_eq!(out.code, Some(0));
    let lines: Vec<&str> = out.stdout.lines().collect();
    // The header, the column names, the hinge, the boundary, the exec: five lines,
    // whatever the label holds.
    assert_eq!(lines.len(), 5, "{}", out.stdout);
    assert!(lines[1].starts_with(" step  kind"), "{}", lines[1]);
    assert!(lines[3].contains(r"two\nlines/boundary"), "{}", lines[3]);
    assert!(
        lines[4].contains("exec/opaque (echo hi there)"),
        "{}",
        lines[4]
    );
}

#[test]
fn the_fork_warning_accounts_for_an_effect_that_crossed() {
    use crate::common::manifest::{self, tool};
    let w = World::new();
    let ws = w.ws("ws");
    let m = manifest::write(
        w.root(),
        &[
            tool("put", "effect")
                .scope(&["net"])
                .run(&["true"])
                .undo("unput")
                .undo_idempotent(true),
            tool("unput", "inverse").scope(&["net"]).run(&["true"]),
        ],
    );
    let sid = w.new_session_with(&ws, &m);
    w.json(&["call", &sid, "put", "--args", "{}"]).ok();
    let r: Value = w.json(&["fork", &sid, "--at", "0"]).ok().clone();
    let warn = r["warning_emissions"].as_str().unwrap();
    assert!(
        !warn.contains("nothing from this tail is out in the world"),
        "{warn}"
    );
    assert!(warn.contains("1 step(s) that crossed stay done"), "{warn}");
}
