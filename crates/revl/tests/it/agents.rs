//! Coding agents on a revl session (docs/agents.md), without the agents: `revl exec
//! --passthrough`, the native hook (`revl hook claude|codex`) and the command it rewrites,
//! run the way Claude Code's Bash tool runs it. The real agents are driven in
//! `agents_real.rs`.

use crate::common::env::records;
use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a process gave, bytes as they were.
struct Raw {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn raw(mut cmd: Command, stdin: &[u8]) -> Raw {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut i = child.stdin.take().unwrap();
    let _ = i.write_all(stdin);
    drop(i);
    let o = child.wait_with_output().unwrap();
    Raw {
        code: o.status.code(),
        stdout: o.stdout,
        stderr: o.stderr,
    }
}

fn revl_cmd(w: &World, args: &[&str]) -> Command {
    let mut c = w.command_for(&["--store", w.store.to_str().unwrap()]);
    c.args(args);
    c
}

/// `revl hook AGENT EVENT` with `payload` on stdin.
fn hook(w: &World, agent: &str, event: Option<&str>, session: &str, payload: &[u8]) -> Raw {
    let mut args = vec!["hook", agent];
    args.extend(event);
    args.extend(["--session", session]);
    raw(revl_cmd(w, &args), payload)
}

/// Run the shell command the way Claude Code's Bash tool does: in its current directory,
/// `eval` it, and on success write `pwd -P` to the file it reads the next directory from.
fn as_claude_runs(w: &World, cwd: &Path, command: &str, cwd_file: &Path) -> Raw {
    let mut c = Command::new("/bin/bash");
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &w.home)
        .current_dir(cwd)
        .args([
            "-c",
            r#"eval "$1" < /dev/null && pwd -P >| "$2""#,
            "claude-shell",
            command,
            cwd_file.to_str().unwrap(),
        ]);
    raw(c, b"")
}

fn claude_pre(cwd: &Path, command: &str, tool_use: &str) -> Vec<u8> {
    json!({
        "session_id": "7809d98e-23d3-402d-9fbf-28cbdec91fcd",
        "transcript_path": "/nonexistent/t.jsonl",
        "cwd": cwd,
        "prompt_id": "562f7f70-e838-4b4e-9937-368cec562a93",
        "permission_mode": "acceptEdits",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "d"},
        "tool_use_id": tool_use,
    })
    .to_string()
    .into_bytes()
}

fn rewritten(answer: &Raw) -> String {
    assert_eq!(
        answer.code,
        Some(0),
        "{}",
        String::from_utf8_lossy(&answer.stderr)
    );
    let a: Value = serde_json::from_slice(&answer.stdout).expect("the hook answers JSON");
    let out = &a["hookSpecificOutput"];
    assert_eq!(out["hookEventName"], "PreToolUse");
    assert_eq!(out["permissionDecision"], "allow", "{a}");
    assert_eq!(out["updatedInput"]["description"], "d", "other inputs kept");
    out["updatedInput"]["command"].as_str().unwrap().to_string()
}

/// `exec --passthrough` is the command for its caller: its stdout and stderr byte for byte
/// (control bytes and all, where text mode escapes them), no summary, its exit status as
/// revl's; and still one step.
#[test]
fn passthrough_gives_the_commands_own_bytes_and_status() {
    let w = World::new();
    let (s, ws) = w.session();
    let o = raw(
        revl_cmd(
            &w,
            &[
                "exec",
                &s,
                "--passthrough",
                "--",
                "sh",
                "-c",
                r#"printf 'out\033[31m\001\n'; printf 'err\n' >&2; echo x > made; exit 7"#,
            ],
        ),
        b"",
    );
    assert_eq!(o.stdout, b"out\x1b[31m\x01\n");
    assert_eq!(o.stderr, b"err\n");
    assert_eq!(o.code, Some(7));
    assert_eq!(std::fs::read(ws.join("made")).unwrap(), b"x\n");
    assert_eq!(w.head(&s), 1);
    // Killed by a signal: 128 + N, as a shell reports it.
    let o = raw(
        revl_cmd(
            &w,
            &[
                "exec",
                &s,
                "--passthrough",
                "--",
                "sh",
                "-c",
                "kill -TERM $$",
            ],
        ),
        b"",
    );
    assert_eq!(o.code, Some(128 + 15));
    // --json and --passthrough cannot both say what is printed.
    let o = raw(
        revl_cmd(&w, &["--json", "exec", &s, "--passthrough", "--", "true"]),
        b"",
    );
    assert_eq!(o.code, Some(2));
    assert_eq!(w.head(&s), 2);
}

/// `--note-to FILE`: what the command wrote on the descriptor `$REVL_NOTE_FD` names comes
/// out in FILE (here the caller's descriptor 3), not in its output or the workspace.
#[test]
fn a_note_comes_back_on_its_own_descriptor() {
    let w = World::new();
    let (s, ws) = w.session();
    let mut c = Command::new("/bin/bash");
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &w.home)
        .args([
            "-c",
            r#"n=$("$@" 3>&1 1>/dev/null); echo "note=[$n] status=$?""#,
            "x",
            bin(),
            "--store",
            w.store.to_str().unwrap(),
            "exec",
            &s,
            "--passthrough",
            "--note-to",
            "/dev/fd/3",
            "--",
            "sh",
            "-c",
            r#"mkdir -p a/b && cd a/b && printf %s "$PWD" >&"$REVL_NOTE_FD""#,
        ]);
    let o = raw(c, b"");
    let said = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        said.trim(),
        format!("note=[{}/a/b] status=0", ws.display()),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(ws.join("a/b").is_dir());
    assert_eq!(snapshot(&ws).len(), 2, "nothing but the two directories");
}

/// PreToolUse on Claude Code's Bash: the hook rewrites the command; run as Claude runs it,
/// it behaves as the command would (stdout, stderr, status, the directory it ended in
/// carried to the next command through Claude's own `pwd -P` file), each command is one
/// step named by the agent's command and recording the agent call.
#[test]
fn the_claude_hook_makes_each_command_one_step_that_behaves_as_itself() {
    let w = World::new();
    let (s, ws) = w.session();
    let cwd_file = w.path("claude-cwd");
    let cmd1 = "mkdir -p sub/deep && cd sub && echo hi > a.txt && pwd && echo warn >&2";
    let r1 = rewritten(&hook(
        &w,
        "claude",
        Some("PreToolUse"),
        &s,
        &claude_pre(&ws, cmd1, "toolu_1"),
    ));
    assert_ne!(r1, cmd1);
    let o = as_claude_runs(&w, &ws, &r1, &cwd_file);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{}/sub\n", ws.display())
    );
    assert_eq!(o.stderr, b"warn\n");
    assert_eq!(o.code, Some(0));
    // Claude's wrapper read the directory the command ended in.
    let next = std::fs::read_to_string(&cwd_file).unwrap();
    assert_eq!(next, format!("{}/sub\n", ws.display()));
    // The next command starts there; it fails with its own status and output.
    let cmd2 = "pwd; cat a.txt; ls -d deep; echo oops >&2; exit 3";
    let sub = ws.join("sub");
    let r2 = rewritten(&hook(
        &w,
        "claude",
        None,
        &s,
        &claude_pre(&sub, cmd2, "toolu_2"),
    ));
    let o = as_claude_runs(&w, &sub, &r2, &cwd_file);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{}/sub\nhi\ndeep\n", ws.display())
    );
    assert_eq!(o.stderr, b"oops\n");
    assert_eq!(o.code, Some(3));
    // Deleting a directory is a change like any other.
    let r3 = rewritten(&hook(
        &w,
        "claude",
        None,
        &s,
        &claude_pre(&sub, "rmdir deep && cd ..", "toolu_3"),
    ));
    let o = as_claude_runs(&w, &sub, &r3, &cwd_file);
    assert_eq!(o.code, Some(0));
    assert_eq!(
        std::fs::read_to_string(&cwd_file).unwrap(),
        format!("{}\n", ws.display())
    );
    assert!(!ws.join("sub/deep").exists());
    let t = w.timeline(&s);
    let labels: Vec<&str> = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["label"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels[1..],
        [
            format!("exec claude: {cmd1} (3 changes)"),
            format!("exec claude: {cmd2} (0 changes)"),
            "exec claude: rmdir deep && cd .. (1 change)".to_string(),
        ]
    );
    let steps: Vec<Value> = records(&w.wal(&s))
        .into_iter()
        .filter(|r| r["record"] == "step" && r["site"] == "exec")
        .collect();
    assert_eq!(steps.len(), 3);
    assert_eq!(
        steps[1]["detail"]["origin"],
        json!({
            "agent": "claude",
            "agentSession": "7809d98e-23d3-402d-9fbf-28cbdec91fcd",
            "turn": "562f7f70-e838-4b4e-9937-368cec562a93",
            "toolUse": "toolu_2",
            "command": cmd2,
        })
    );
    assert_eq!(steps[1]["detail"]["exitCode"], 3);
    // Step back over the three: the workspace is as it was.
    w.json(&["step-back", &s, "--to", "0"]).ok();
    assert_eq!(snapshot(&ws).len(), 0);
}

/// A payload revl cannot answer at PreToolUse blocks the tool call (exit 2, which the
/// agents read as "block, and tell the model why") with one line on stderr; nothing runs
/// and nothing is recorded. Other events and other tools get no answer.
#[test]
fn hostile_hook_payloads_block_the_call_with_one_line() {
    let w = World::new();
    let (s, ws) = w.session();
    let outside = w.ws("elsewhere");
    let huge = vec![b'{'; 9 << 20];
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", b"".to_vec(), "is empty"),
        ("not json", b"\xff\xfe{{".to_vec(), "is not JSON"),
        ("an array", b"[1,2]".to_vec(), "not an object"),
        ("huge", huge, "MiB"),
        (
            "tool_input not an object",
            br#"{"hook_event_name":"PreToolUse","tool_name":"Bash","cwd":"/","tool_input":"rm -rf /"}"#.to_vec(),
            "`tool_input` as a string",
        ),
        (
            "command not a string",
            br#"{"hook_event_name":"PreToolUse","tool_name":"Bash","cwd":"/","tool_input":{"command":{"a":1}}}"#.to_vec(),
            "`command` as an object",
        ),
        (
            "another event named",
            br#"{"hook_event_name":"Stop"}"#.to_vec(),
            "installed for PreToolUse",
        ),
    ];
    for (what, payload, says) in cases {
        let o = hook(&w, "claude", Some("PreToolUse"), &s, &payload);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.code, Some(2), "{what}: {err}");
        assert!(o.stdout.is_empty(), "{what}");
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        assert!(err.contains(says), "{what}: {err}");
    }
    // A command in a directory outside the workspace is denied, saying why.
    let o = hook(
        &w,
        "claude",
        Some("PreToolUse"),
        &s,
        &claude_pre(&outside, "ls", "t"),
    );
    let a: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "deny");
    assert!(a["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap()
        .contains("outside the revl session's workspace"));
    // Another tool, another event: no answer, the agent goes on as it would.
    let mut read = claude_pre(&ws, "x", "t");
    read = String::from_utf8(read)
        .unwrap()
        .replace("\"Bash\"", "\"Read\"")
        .into_bytes();
    let o = hook(&w, "claude", None, &s, &read);
    assert_eq!((o.code, o.stdout.len()), (Some(0), 0));
    let o = hook(
        &w,
        "claude",
        None,
        &s,
        br#"{"hook_event_name":"Notification"}"#,
    );
    assert_eq!((o.code, o.stdout.len()), (Some(0), 0));
    assert_eq!(w.head(&s), 0, "nothing recorded");
}

fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(marker))
            .unwrap_or(false)
    })
}

fn wait_gone(marker: &str) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if !running(marker) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The agent ending the command (Claude's timeout kills its shell; a killed agent takes its
/// shells with it): revl ended by SIGTERM, or losing its parent, stops the sandboxed tree,
/// background children included, and records what it did by then as the step.
#[test]
fn ending_revl_or_its_caller_kills_the_sandboxed_tree() {
    let w = World::new();
    let (s, ws) = w.session();
    for (n, how) in ["sigterm", "parent-killed"].into_iter().enumerate() {
        let marker = format!("{}{n}", 31_337_000 + std::process::id() % 1000);
        let script = format!("echo partial > f{n}; sleep {marker} & echo started; sleep {marker}");
        let mut c = Command::new("/bin/bash");
        // The agent's shell: revl runs under it; killing the shell (SIGKILL, nothing
        // forwarded) must still end the command.
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &w.home)
            .args([
                "-c",
                r#""$@" & echo $!; wait"#,
                "agent-shell",
                bin(),
                "--store",
                w.store.to_str().unwrap(),
                "exec",
                &s,
                "--passthrough",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut shell = c.spawn().unwrap();
        let mut lines = BufReader::new(shell.stdout.take().unwrap()).lines();
        let revl_pid = lines.next().unwrap().unwrap();
        assert_eq!(lines.next().unwrap().unwrap(), "started");
        assert!(running(&marker));
        match how {
            "sigterm" => {
                Command::new("kill")
                    .args(["-TERM", &revl_pid])
                    .status()
                    .unwrap();
            }
            _ => shell.kill().unwrap(),
        }
        let _ = shell.wait();
        assert!(wait_gone(&marker), "{how}: the sandboxed tree is gone");
        // revl recorded the step before it exited.
        let t = Instant::now();
        while w.head(&s) != n as i64 + 1 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(w.head(&s), n as i64 + 1, "{how}");
        assert_eq!(
            std::fs::read(ws.join(format!("f{n}"))).unwrap(),
            b"partial\n"
        );
    }
}

fn payload(event: &str, cwd: &Path, extra: Value) -> Vec<u8> {
    let mut p = json!({
        "session_id": "a5e1c0de-0000-4000-8000-000000000001",
        "cwd": cwd,
        "hook_event_name": event,
    });
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    p.to_string().into_bytes()
}

fn prompt(w: &World, s: &str, ws: &Path, id: &str, text: &str) {
    let o = hook(
        w,
        "claude",
        None,
        s,
        &payload(
            "UserPromptSubmit",
            ws,
            json!({"prompt_id": id, "prompt": text}),
        ),
    );
    assert_eq!(o.code, Some(0), "{}", String::from_utf8_lossy(&o.stderr));
}

/// An edit tool's call, as the agent makes it: PreToolUse (the preimage is kept), the tool
/// writes, PostToolUse (the step is recorded).
fn edit(
    w: &World,
    s: &str,
    ws: &Path,
    (turn, id): (&str, &str),
    rel: &str,
    content: &str,
    env: &[(&str, &str)],
) -> Raw {
    let file = ws.join(rel);
    let extra = json!({
        "prompt_id": turn,
        "tool_name": "Write",
        "tool_use_id": id,
        "tool_input": {"file_path": file, "content": content},
    });
    let o = hook(
        w,
        "claude",
        None,
        s,
        &payload("PreToolUse", ws, extra.clone()),
    );
    assert_eq!(
        (o.code, o.stdout.len()),
        (Some(0), 0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, content).unwrap();
    let mut c = revl_cmd(w, &["hook", "claude", "--session", s]);
    for (k, v) in env {
        c.env(k, v);
    }
    raw(c, &payload("PostToolUse", ws, extra))
}

/// Prompts open turns; an edit tool's writes are file steps with the preimage taken before
/// the tool ran; `step-back --to turn:2`, `read --at TURN-ID` and `fork --at turn:N` name
/// turns; the rewind restores the tool's edits byte for byte, lists them by turn, and
/// keeps a hand edit made meanwhile (preserved, listed).
#[test]
fn turns_are_boundaries_and_edit_tool_writes_are_steps() {
    let w = World::new();
    let (s, ws) = w.session();
    std::fs::write(ws.join("keep.txt"), "original\n").unwrap();
    prompt(&w, &s, &ws, "p-one", "write the notes\nwith details");
    let o = edit(&w, &s, &ws, ("p-one", "toolu_a"), "notes.txt", "v1\n", &[]);
    assert_eq!(o.code, Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    prompt(&w, &s, &ws, "p-two", "rewrite them");
    let o = edit(&w, &s, &ws, ("p-two", "toolu_b"), "notes.txt", "v2\n", &[]);
    assert_eq!(o.code, Some(0));
    let o = edit(
        &w,
        &s,
        &ws,
        ("p-two", "toolu_c"),
        "keep.txt",
        "changed\n",
        &[],
    );
    assert_eq!(o.code, Some(0));
    prompt(&w, &s, &ws, "p-three", "and more");
    let o = edit(
        &w,
        &s,
        &ws,
        ("p-three", "toolu_d"),
        "deep/new.txt",
        "v3\n",
        &[],
    );
    assert_eq!(o.code, Some(0));
    let t = w.timeline(&s);
    let labels: Vec<&str> = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["label"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels[1..],
        [
            "claude turn 1: write the notes",
            "claude: Write notes.txt",
            "claude turn 2: rewrite them",
            "claude: Write notes.txt",
            "claude: Write keep.txt",
            "claude turn 3: and more",
            "claude: Write deep/new.txt",
        ]
    );
    // No hand edit: verify is clean (the tool's writes are revl's steps).
    let v = w.json(&["verify", &s]);
    assert_eq!(
        v.ok()["drift"].as_array().map(Vec::len),
        Some(0),
        "{}",
        v.dump()
    );
    // read --at a turn id: as that turn began.
    let r = w.json(&["read", &s, "notes.txt", "--at", "p-two"]);
    assert_eq!(r.ok()["content"], "v1\n");
    // A hand edit meanwhile, then back to where turn 2 began.
    std::fs::write(ws.join("keep.txt"), "by hand\n").unwrap();
    let back = w.json(&["step-back", &s, "--to", "turn:2"]);
    let doc = back.ok();
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "v1\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("keep.txt")).unwrap(),
        "original\n"
    );
    assert!(!ws.join("deep").exists());
    let text = doc.to_string();
    assert!(
        text.contains("claude turn 3: and more"),
        "the report names the turns: {text}"
    );
    assert!(text.contains("keep.txt"), "the hand edit is listed: {text}");
    let kept = records(&w.wal(&s))
        .into_iter()
        .filter(|r| r["record"] == "preserved")
        .count();
    assert_eq!(kept, 1, "the hand edit was preserved");
    // Unknown turns are one-line errors.
    let e = w.json(&["fork", &s, "--at", "turn:9"]);
    assert!(e.err(2, "bad-args").contains("no such step or turn"));
}

/// A crash after the edit's intent is durable and before its step: the next command
/// repairs it forward (the tool's edit stays, recorded), never back.
#[test]
fn a_crash_while_recording_an_edit_repairs_forward() {
    let w = World::new();
    let (s, ws) = w.session();
    let o = edit(
        &w,
        &s,
        &ws,
        ("p", "toolu_x"),
        "f.txt",
        "agent wrote\n",
        &[("REVL_FAILPOINT", "agent-edit.after-intent")],
    );
    assert_ne!(o.code, Some(0), "the failpoint stopped it");
    let st = w.json(&["status", &s]);
    assert!(st.dump().contains("repaired"), "{}", st.dump());
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).unwrap(),
        "agent wrote\n"
    );
    assert_eq!(w.head(&s), 1);
    w.json(&["step-back", &s, "--to", "0"]).ok();
    assert!(!ws.join("f.txt").exists());
}

/// The answer of a `PreToolUse` hook that must block the call: a deny, or exit 2; one line
/// saying why either way. Returns the why.
fn blocked(o: &Raw) -> String {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    if o.code == Some(2) {
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        return err;
    }
    assert_eq!(o.code, Some(0), "{err}");
    let a: Value = serde_json::from_slice(&o.stdout).expect("a deny answer");
    assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "deny", "{a}");
    let why = a["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(why.lines().count(), 1, "one line: {why}");
    why
}

/// An edit tool's call that creates a file in a directory that did not exist: the step is
/// the file (its bytes kept), its undo the absence of the new directory. A file that
/// appeared in that directory while the tool ran (by hand, another command) is not the
/// tool's: a rewind preserves and lists it, never deletes it silently.
#[test]
fn an_edit_into_a_new_directory_is_the_file_not_the_directory() {
    let w = World::new();
    let (s, ws) = w.session();
    let file = ws.join("dir/new.txt");
    let extra = json!({
        "tool_name": "Write",
        "tool_use_id": "toolu_nd",
        "tool_input": {"file_path": file, "content": "new\n"},
    });
    let o = hook(
        &w,
        "claude",
        None,
        &s,
        &payload("PreToolUse", &ws, extra.clone()),
    );
    assert_eq!((o.code, o.stdout.len()), (Some(0), 0));
    std::fs::create_dir_all(ws.join("dir")).unwrap();
    std::fs::write(&file, "new\n").unwrap();
    // Made by hand while the tool ran.
    std::fs::write(ws.join("dir/other.txt"), "mine\n").unwrap();
    let o = hook(&w, "claude", None, &s, &payload("PostToolUse", &ws, extra));
    assert_eq!(o.code, Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let t = w.timeline(&s);
    let last = t["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["label"], "claude: Write dir/new.txt");
    assert!(
        last.to_string().contains("\"dir/new.txt\""),
        "the step is the file: {last}"
    );
    let back = w.json(&["step-back", &s, "--to", "0"]);
    let text = back.ok().to_string();
    assert!(!file.exists(), "the tool's file is undone");
    assert!(
        text.contains("dir/other.txt"),
        "the hand-made file is listed: {text}"
    );
    let kept: Vec<Value> = records(&w.wal(&s))
        .into_iter()
        .filter(|r| r["record"] == "preserved")
        .collect();
    assert!(
        kept.iter().any(|r| r.to_string().contains("dir/other.txt")),
        "the hand-made file was preserved: {kept:?}"
    );
}

fn codex_patch(w: &World, s: &str, ws: &Path, id: &str, patch: &str) -> Raw {
    let extra = json!({
        "tool_name": "apply_patch",
        "tool_use_id": id,
        "tool_input": {"command": patch},
    });
    hook(w, "codex", None, s, &payload("PreToolUse", ws, extra))
}

/// An `apply_patch` is confined the way Codex reads it: a header line is trimmed (an
/// indented header still names its file), and a patch revl cannot read the files of
/// (no header, a `***` line it does not know, a `~` path, a `..` path) is denied, one line.
#[test]
fn an_apply_patch_revl_cannot_confine_is_denied() {
    let w = World::new();
    let (s, ws) = w.session();
    let outside = w.ws("elsewhere");
    // An indented header: Codex trims it and adds the file; revl keeps its preimage.
    let o = codex_patch(
        &w,
        &s,
        &ws,
        "call_ok",
        "*** Begin Patch\n  *** Add File: ind.txt  \n+x\n*** End Patch\n",
    );
    assert_eq!(
        (o.code, o.stdout.len()),
        (Some(0), 0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::write(ws.join("ind.txt"), "x\n").unwrap();
    let extra = json!({"tool_name": "apply_patch", "tool_use_id": "call_ok", "tool_input": {"command": "-"}});
    let o = hook(&w, "codex", None, &s, &payload("PostToolUse", &ws, extra));
    assert_eq!(o.code, Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(w.head(&s), 1, "the indented header's file is recorded");
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    std::os::unix::fs::symlink(outside.join("sub"), ws.join("link")).unwrap();
    for (what, patch, says) in [
        (
            "no header",
            "*** Begin Patch\n+x\n*** End Patch\n",
            "no file",
        ),
        (
            "an unknown *** line",
            "*** Begin Patch\n*** Frob File: a.txt\n+x\n*** End Patch\n",
            "Frob",
        ),
        (
            "a ~ path",
            "*** Begin Patch\n*** Add File: ~/x.txt\n+x\n*** End Patch\n",
            "~",
        ),
        (
            "a .. through a symlink",
            "*** Begin Patch\n*** Add File: link/../escaped.txt\n+x\n*** End Patch\n",
            "..",
        ),
    ] {
        let why = blocked(&codex_patch(&w, &s, &ws, "call_bad", patch));
        assert!(why.contains(says), "{what}: {why}");
    }
    // A `..` in an edit tool's own path: refused, never resolved lexically.
    let extra = json!({
        "tool_name": "Write",
        "tool_use_id": "toolu_dd",
        "tool_input": {"file_path": ws.join("link/../escaped.txt"), "content": "x"},
    });
    let why = blocked(&hook(
        &w,
        "claude",
        None,
        &s,
        &payload("PreToolUse", &ws, extra),
    ));
    assert!(why.contains(".."), "{why}");
    assert_eq!(w.head(&s), 1, "nothing else recorded");
}

/// After a rewind, `turn:N` names the last live step before that turn: `step-back --to
/// turn:N` works and `read --at turn:N` gives what the workspace held when it began.
#[test]
fn a_turn_after_a_rewind_is_named_by_its_live_start() {
    let w = World::new();
    let (s, ws) = w.session();
    prompt(&w, &s, &ws, "p-1", "one");
    let o = edit(&w, &s, &ws, ("p-1", "toolu_1"), "a.txt", "v1\n", &[]);
    assert_eq!(o.code, Some(0));
    prompt(&w, &s, &ws, "p-2", "two");
    let o = edit(&w, &s, &ws, ("p-2", "toolu_2"), "a.txt", "v2\n", &[]);
    assert_eq!(o.code, Some(0));
    w.json(&["step-back", &s, "--to", "turn:2"]).ok();
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "v1\n");
    prompt(&w, &s, &ws, "p-3", "two again");
    let o = edit(&w, &s, &ws, ("p-3", "toolu_3"), "a.txt", "v3\n", &[]);
    assert_eq!(o.code, Some(0));
    let r = w.json(&["read", &s, "a.txt", "--at", "turn:2"]);
    assert_eq!(r.ok()["content"], "v1\n", "{}", r.dump());
    let r = w.json(&["read", &s, "a.txt", "--at", "p-3"]);
    assert_eq!(r.ok()["content"], "v1\n", "{}", r.dump());
    let back = w.json(&["step-back", &s, "--to", "turn:2"]);
    back.ok();
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "v1\n");
}

/// A tool call that failed may still have changed files (a patch applied in part): its
/// `PostToolUseFailure` records what changed, as `PostToolUse` does.
#[test]
fn a_failed_edit_tool_call_records_what_it_changed() {
    let w = World::new();
    let (s, ws) = w.session();
    let file = ws.join("half.txt");
    let extra = json!({
        "tool_name": "Write",
        "tool_use_id": "toolu_f",
        "tool_input": {"file_path": file, "content": "half\n"},
    });
    let o = hook(
        &w,
        "claude",
        None,
        &s,
        &payload("PreToolUse", &ws, extra.clone()),
    );
    assert_eq!((o.code, o.stdout.len()), (Some(0), 0));
    std::fs::write(&file, "half\n").unwrap();
    let o = hook(
        &w,
        "claude",
        None,
        &s,
        &payload("PostToolUseFailure", &ws, extra),
    );
    assert_eq!(o.code, Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(w.head(&s), 1, "the failed call's change is a step");
    w.json(&["step-back", &s, "--to", "0"]).ok();
    assert!(!file.exists());
}

/// `revl agent install claude` replaces the settings file whole through a temp file no one
/// can plant a symlink at: a planted link at the old fixed temp name redirects nothing.
#[test]
fn install_writes_through_no_planted_symlink() {
    let w = World::new();
    let (s, ws) = w.session();
    let outside = w.ws("elsewhere").join("victim");
    std::fs::write(&outside, "victim\n").unwrap();
    std::fs::create_dir_all(ws.join(".claude")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join(".claude/.settings.local.json.revl-tmp")).unwrap();
    let mut c = revl_cmd(&w, &["agent", "install", "claude", "--session", &s]);
    c.current_dir(&ws);
    let o = raw(c, b"");
    assert_eq!(o.code, Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "victim\n");
    let settings = ws.join(".claude/settings.local.json");
    assert!(std::fs::symlink_metadata(&settings).unwrap().is_file());
    assert!(std::fs::read_to_string(&settings)
        .unwrap()
        .contains("hook claude"));
}

/// `gc --apply` between an edit's PreToolUse and its PostToolUse keeps the blob its large
/// preimage waits in (outside the WAL until the edit is recorded): the edit is recorded and
/// a rewind puts the large file back byte for byte.
#[test]
fn gc_between_an_edits_hooks_keeps_its_preimage() {
    let w = World::new();
    let (s, ws) = w.session();
    let big: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    std::fs::write(ws.join("big.bin"), &big).unwrap();
    let file = ws.join("big.bin");
    let extra = json!({
        "tool_name": "Write",
        "tool_use_id": "toolu_gc",
        "tool_input": {"file_path": file, "content": "small\n"},
    });
    let o = hook(
        &w,
        "claude",
        None,
        &s,
        &payload("PreToolUse", &ws, extra.clone()),
    );
    assert_eq!((o.code, o.stdout.len()), (Some(0), 0));
    w.json(&["gc", "--apply"]).ok();
    std::fs::write(&file, "small\n").unwrap();
    let o = hook(&w, "claude", None, &s, &payload("PostToolUse", &ws, extra));
    assert_eq!(o.code, Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(w.head(&s), 1);
    let back = w.json(&["step-back", &s, "--to", "0"]);
    back.ok();
    assert_eq!(std::fs::read(&file).unwrap(), big);
}

/// A stand-in for the agent's binary: writes its arguments (one a line) and
/// `CLAUDE_CODE_TMPDIR` to files beside it, so a test sees how `revl agent` started it.
fn fake_agent(w: &World) -> (std::path::PathBuf, std::path::PathBuf) {
    let bin = w.path("fake-agent");
    let out = w.path("fake-agent.args");
    std::fs::write(
        &bin,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {0}\nprintf '%s' \"$CLAUDE_CODE_TMPDIR\" > {0}.tmpdir\n",
            out.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, out)
}

/// `revl agent AGENT --session S -- ARGS` with the fake agent: (its arguments, revl's stderr).
fn launch(w: &World, agent: &str, s: &str, args: &[&str]) -> (Vec<String>, String) {
    launch_with(w, &[], agent, s, args)
}

/// [`launch`] with revl's own options first (`--json`).
fn launch_with(
    w: &World,
    opts: &[&str],
    agent: &str,
    s: &str,
    args: &[&str],
) -> (Vec<String>, String) {
    let (bin, out) = fake_agent(w);
    let _ = std::fs::remove_file(&out);
    let mut a = opts.to_vec();
    a.extend(["agent", agent, "--session", s, "--"]);
    a.extend(args);
    let var = if agent == "claude" {
        "REVL_CLAUDE"
    } else {
        "REVL_CODEX"
    };
    // The agent's stdout is the agent's (revl's own line is on stderr, --json or not).
    let o = revl_cmd(w, &a).env(var, &bin).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let got = std::fs::read_to_string(&out).expect("the agent started");
    (got.lines().map(str::to_string).collect(), stderr)
}

/// A Claude Code transcript of three turns (prompt ids p-1, p-2, p-3), the shape of Claude
/// Code 2.1.332's: each prompt queued, then its user line, the model's tool call, the tool
/// result.
fn claude_transcript(sid: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for (n, p) in ["p-1", "p-2", "p-3"].iter().enumerate() {
        let prompt = format!("prompt number {}", n + 1);
        lines.push(json!({"type": "queue-operation", "operation": "enqueue", "sessionId": sid, "content": prompt}).to_string());
        lines.push(json!({"type": "user", "promptId": p, "uuid": format!("u{n}"), "sessionId": sid, "message": {"role": "user", "content": prompt}}).to_string());
        lines.push(json!({"type": "assistant", "uuid": format!("a{n}"), "parentUuid": format!("u{n}"), "sessionId": sid, "message": {"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{n}"), "name": "Bash", "input": {}}]}}).to_string());
        lines.push(json!({"type": "user", "promptId": p, "uuid": format!("r{n}"), "sessionId": sid, "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{n}"), "content": format!("result {}", n + 1)}]}}).to_string());
    }
    lines
}

/// After a fork inside turn 2, `revl agent claude --session BRANCH` resumes the parent's
/// conversation with turn 1 only: a new transcript (a new id, in Claude Code's directory for
/// the branch's workspace) holding the lines before turn 2's, `--resume ID` given, and one
/// line saying so and that the files are inside turn 2. A transcript revl cannot trust
/// (a symlink, a huge line, a line that is not JSON, no line of the dropped turn) resumes
/// nothing, says why, and the agent still starts.
#[test]
fn a_branch_resumes_the_claude_conversation_before_the_forks_turn() {
    let w = World::new();
    let (s, ws) = w.session();
    let sid = "a5e1c0de-0000-4000-8000-000000000001";
    prompt(&w, &s, &ws, "p-1", "prompt number 1");
    assert_eq!(
        edit(&w, &s, &ws, ("p-1", "t-1"), "a.txt", "1\n", &[]).code,
        Some(0)
    );
    prompt(&w, &s, &ws, "p-2", "prompt number 2");
    assert_eq!(
        edit(&w, &s, &ws, ("p-2", "t-2"), "a.txt", "2\n", &[]).code,
        Some(0)
    );
    assert_eq!(
        edit(&w, &s, &ws, ("p-2", "t-3"), "b.txt", "2\n", &[]).code,
        Some(0)
    );
    prompt(&w, &s, &ws, "p-3", "prompt number 3");
    // The fork is after turn 2's first edit (step 4): inside turn 2.
    let plan = w.json(&["fork", &s, "--at", "4"]);
    let hash = plan.ok()["hash"].as_str().unwrap().to_string();
    let done = w.json(&["fork-confirm", &s, "--hash", &hash]);
    let b = done.ok()["branch"].as_str().unwrap().to_string();
    let projects = w.home.join(".claude/projects");
    let parent_dir = projects.join("-somewhere-else");
    std::fs::create_dir_all(&parent_dir).unwrap();
    let lines = claude_transcript(sid);
    let transcript = parent_dir.join(format!("{sid}.jsonl"));
    std::fs::write(&transcript, lines.join("\n") + "\n").unwrap();

    let (args, err) = launch(&w, "claude", &b, &["-p", "next"]);
    assert!(
        err.contains(&format!("{{agent: claude, from: {sid}, turns kept: 1}}"))
            && err.contains("inside claude turn 2: prompt number 2"),
        "{err}"
    );
    assert_eq!(args[0], "--settings");
    assert_eq!(args[2], "--resume", "{args:?}");
    assert_eq!(&args[4..], ["-p", "next"]);
    let id = &args[3];
    assert_ne!(id, sid);
    let branch_project: String = ws
        .to_str()
        .unwrap()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let copy = std::fs::read_to_string(projects.join(&branch_project).join(format!("{id}.jsonl")))
        .expect("the resumed conversation is where Claude Code looks for it");
    assert_eq!(copy, lines[..4].join("\n") + "\n", "turn 1 only");
    let tmpdir = std::fs::read_to_string(w.path("fake-agent.args.tmpdir")).unwrap();
    assert!(
        tmpdir.starts_with(w.store.to_str().unwrap()),
        "Claude Code's temporary files are revl's: {tmpdir}"
    );

    let target = w.path("elsewhere.jsonl");
    for why in [
        "is a symlink",
        "over 16 MiB",
        "not JSON",
        "has no line of turn p-2",
    ] {
        let _ = std::fs::remove_file(&transcript);
        let mut l = lines.clone();
        match why {
            "is a symlink" => {
                std::fs::write(&target, lines.join("\n") + "\n").unwrap();
                std::os::unix::fs::symlink(&target, &transcript).unwrap();
            }
            "over 16 MiB" => l.insert(1, format!("{{\"pad\": \"{}\"}}", "x".repeat(17 << 20))),
            "not JSON" => l.insert(2, "{\"type\": \"user\", \"promptId\": ".into()),
            _ => l = l.iter().map(|x| x.replace("\"p-2\"", "\"p-9\"")).collect(),
        }
        if why != "is a symlink" {
            std::fs::write(&transcript, l.join("\n") + "\n").unwrap();
        }
        let (args, err) = launch(&w, "claude", &b, &["-p", "next"]);
        assert!(!args.contains(&"--resume".to_string()), "{why}: {args:?}");
        assert_eq!(&args[2..], ["-p", "next"], "{why}");
        assert!(
            err.contains("conversation: a new one") && err.contains(why),
            "{why}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        let written = std::fs::read_dir(projects.join(&branch_project))
            .unwrap()
            .count();
        assert_eq!(written, 1, "{why}: nothing more is written");
    }
}

/// The same for Codex: the parent's rollout (in the parent session's revl-owned
/// CODEX_HOME) cut before turn 2, written with a new id in the branch's, its first line
/// naming that id, and `exec … PROMPT` run as `exec … resume ID PROMPT`.
#[test]
fn a_branch_resumes_the_codex_conversation_before_the_forks_turn() {
    let w = World::new();
    let (s, ws) = w.session();
    let sid = "01a24a65-08e0-77f1-ab02-5e0ea41bc846";
    let turn = |id: &str, text: &str| {
        let p = json!({"session_id": sid, "cwd": ws, "hook_event_name": "UserPromptSubmit", "turn_id": id, "prompt": text});
        let o = hook(&w, "codex", None, &s, p.to_string().as_bytes());
        assert_eq!(o.code, Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    };
    turn("t-1", "one");
    assert_eq!(w.run(&["write", &s, "y", "--content", "y\n"]).code, Some(0));
    turn("t-2", "two");
    let plan = w.json(&["fork", &s, "--at", "turn:2"]);
    let hash = plan.ok()["hash"].as_str().unwrap().to_string();
    let b = w.json(&["fork-confirm", &s, "--hash", &hash]).ok()["branch"]
        .as_str()
        .unwrap()
        .to_string();
    let day = w
        .store
        .join("agents/codex")
        .join(&s)
        .join("sessions/2026/12/06");
    std::fs::create_dir_all(&day).unwrap();
    let mut lines = vec![
        json!({"type": "session_meta", "payload": {"id": sid, "session_id": sid, "cwd": ws}})
            .to_string(),
    ];
    for t in ["t-1", "t-2"] {
        lines.push(
            json!({"type": "event_msg", "payload": {"type": "task_started", "turn_id": t}})
                .to_string(),
        );
        lines.push(json!({"type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": format!("prompt of {t}")}]}}).to_string());
    }
    let name = format!("rollout-2026-12-06T08-07-45-{sid}.jsonl");
    std::fs::write(day.join(&name), lines.join("\n") + "\n").unwrap();
    let (args, err) = launch_with(
        &w,
        &["--json"],
        "codex",
        &b,
        &["exec", "--skip-git-repo-check", "next"],
    );
    let said: Value = serde_json::from_str(err.trim()).expect("with --json, one JSON line");
    let c = &said["conversation"];
    assert_eq!(
        (&c["agent"], &c["from"], &c["turnsKept"]),
        (&json!("codex"), &json!(sid), &json!(1)),
        "{said}"
    );
    let at = args.iter().position(|a| a == "resume").expect("resumed");
    assert_eq!(args[at - 2..at], ["exec", "--skip-git-repo-check"]);
    let id = &args[at + 1];
    assert_eq!(c["resumedAs"], json!(id));
    assert_eq!(args[at + 2..], ["next"]);
    let copy = std::fs::read_to_string(
        w.store
            .join("agents/codex")
            .join(&b)
            .join("sessions/2026/12/06")
            .join(name.replace(sid, id)),
    )
    .expect("the resumed rollout is in the branch's CODEX_HOME");
    let got: Vec<&str> = copy.lines().collect();
    assert_eq!(got.len(), 3, "{copy}");
    let meta: Value = serde_json::from_str(got[0]).unwrap();
    assert_eq!(
        (&meta["payload"]["id"], &meta["payload"]["session_id"]),
        (&json!(id), &json!(id))
    );
    assert_eq!(got[1..], lines[1..3]);
}
