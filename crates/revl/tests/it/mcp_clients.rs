//! `revl mcp` (docs/mcp.md) driven by real clients.
//!
//! - `python_client_end_to_end` and `typescript_client_end_to_end` run the scripts in
//!   tests/mcp/ (the official Python `mcp` client and `@modelcontextprotocol/sdk`) against
//!   the built binary. They need `REVL_TEST_PYTHON` (a python with `mcp` installed) and
//!   `REVL_TEST_NODE_DIR` (a directory holding node_modules), as `.ci/setup-mcp-clients`
//!   prints, so plain `cargo test` leaves them out (ignored) and `scripts/test` installs the
//!   clients and runs them. A missing client FAILS the test (a skip would read as `ok`), with
//!   a message naming `scripts/test` and `.ci/setup-mcp-clients`.
//! - The raw tests speak JSON-RPC over the server's stdio by hand: malformed input gets a
//!   JSON-RPC error and the server keeps serving.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_revl");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The client from `var`. A missing client FAILS the test, in CI and locally alike: a test
/// that returns early reads as `ok` in the summary, which would claim the clients were run.
fn client_env(var: &str) -> PathBuf {
    match std::env::var_os(var).filter(|v| !v.is_empty()) {
        Some(v) => PathBuf::from(v),
        None => panic!(
            "{var} is not set, so this MCP client test cannot run: run scripts/test, or `eval \"$(bash .ci/setup-mcp-clients)\"` (installs the pinned Python and TypeScript MCP clients under target/) and test again with --include-ignored"
        ),
    }
}

/// Run a client script to completion (at most 5 minutes) and require exit 0.
fn run_script(mut cmd: Command, what: &str) {
    let started = Instant::now();
    let mut child = cmd
        .current_dir(repo_root())
        .env_remove("REVL_STORE")
        .env_remove("REVL_FAILPOINT")
        .env_remove("REVL_LOCK_WAIT_MS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start the {what} client ({:?}): {e}; `bash .ci/setup-mcp-clients` needs python3 and node",
                cmd.get_program()
            )
        });
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
    let err = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the {what} client did not finish within 5 minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    eprintln!("{err}");
    println!("{out}");
    assert!(
        status.success(),
        "the {what} client failed ({status}):\n{out}\n{err}"
    );
    assert!(
        out.contains("1 passed, 0 failed"),
        "the {what} client did not report its run:\n{out}"
    );
    eprintln!(
        "{what} client scenario passed in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
#[ignore = "needs the MCP clients (PyPI, npm): run by scripts/test (README)"]
fn python_client_end_to_end() {
    let python = client_env("REVL_TEST_PYTHON");
    let mut cmd = Command::new(python);
    cmd.arg("tests/mcp/client_py.py").arg(BIN);
    run_script(cmd, "Python");
}

#[test]
#[ignore = "needs the MCP clients (PyPI, npm): run by scripts/test (README)"]
fn typescript_client_end_to_end() {
    let node_dir = client_env("REVL_TEST_NODE_DIR");
    let mut cmd = Command::new("node");
    cmd.arg("tests/mcp/client_ts.mjs").arg(BIN).arg(node_dir);
    run_script(cmd, "TypeScript");
}

// ---- raw JSON-RPC over stdio ----

struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Raw {
    fn start(store: &Path, args: &[&str]) -> Raw {
        let mut child = Command::new(BIN)
            .arg("--store")
            .arg(store)
            .arg("mcp")
            .args(args)
            .env_remove("REVL_STORE")
            .env_remove("REVL_FAILPOINT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Raw {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    fn send(&mut self, line: &[u8]) {
        let w = self.stdin.as_mut().unwrap();
        w.write_all(line).unwrap();
        w.write_all(b"\n").unwrap();
        w.flush().unwrap();
    }

    fn send_json(&mut self, v: Value) {
        self.send(v.to_string().as_bytes());
    }

    /// The next message on stdout; every line must be one JSON-RPC 2.0 message.
    fn recv(&self) -> Value {
        match self.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("stdout carried a line that is not JSON ({e}): {line}")
                });
                assert_eq!(v["jsonrpc"], "2.0", "{v}");
                v
            }
            Err(RecvTimeoutError::Timeout) => panic!("no answer within 60 s"),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("the server closed stdout (did it crash?)")
            }
        }
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send_json(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let v = self.recv();
        assert_eq!(v["id"], id, "the answer to request {id}: {v}");
        v
    }

    fn initialize(&mut self) {
        let v = self.request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
        );
        assert_eq!(v["result"]["serverInfo"]["name"], "revl", "{v}");
        self.send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn call(&mut self, id: u64, tool: &str, args: Value) -> Value {
        let v = self.request(id, "tools/call", json!({"name": tool, "arguments": args}));
        assert!(
            v.get("error").is_none(),
            "a tool call is never a protocol error: {v}"
        );
        v["result"].clone()
    }

    /// Close stdin; the server must exit 0 by itself.
    fn finish(mut self) {
        drop(self.stdin.take());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the server exited with {status}");
                return;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                panic!("the server did not exit after stdin closed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn error_code(v: &Value) -> i64 {
    v["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected a JSON-RPC error: {v}"))
}

#[test]
fn raw_malformed_jsonrpc_gets_errors_and_the_server_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let ws = tmp.path().join("ws");
    let mut s = Raw::start(&store, &["--workspace", ws.to_str().unwrap()]);

    // Before initialize: garbage is answered, a stray notification and response are dropped.
    s.send(b"this is not json {");
    let v = s.recv();
    assert_eq!(error_code(&v), -32700, "parse error: {v}");
    assert!(v.get("id").is_none() || v["id"].is_null(), "{v}");
    s.send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    s.send_json(json!({"jsonrpc": "2.0", "id": 99, "result": {}}));
    s.initialize();

    // Wrong JSON-RPC version: Invalid Request, with the request's id.
    s.send_json(json!({"jsonrpc": "1.0", "id": 2, "method": "ping"}));
    let v = s.recv();
    assert_eq!(error_code(&v), -32600, "{v}");
    assert_eq!(v["id"], 2, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("2.0"),
        "{v}"
    );

    // Not an object, not a message, a broken half line, invalid UTF-8.
    for bad in [
        &b"[1, 2, 3]"[..],
        b"42",
        b"{\"jsonrpc\": \"2.0\", \"id\": 3}",
    ] {
        s.send(bad);
        let v = s.recv();
        assert_eq!(
            error_code(&v),
            -32600,
            "{}: {v}",
            String::from_utf8_lossy(bad)
        );
    }
    s.send(b"{\"jsonrpc\": \"2.0\", \"id\": 4, \"method\": \"tools/list\"");
    assert_eq!(error_code(&s.recv()), -32700);
    s.send(b"\xff\xfe\x00garbage");
    assert_eq!(error_code(&s.recv()), -32700);

    // An unknown method and an unknown tool: JSON-RPC errors with the id.
    let v = s.request(5, "no/such/method", json!({}));
    assert_eq!(error_code(&v), -32601, "{v}");
    let v = s.request(
        6,
        "tools/call",
        json!({"name": "revl_approve", "arguments": {}}),
    );
    assert_eq!(error_code(&v), -32602, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool"),
        "{v}"
    );

    // Wrong argument types: a tool result with isError and the error document (docs/reference.md).
    let r = s.call(7, "revl_write", json!({"path": ["a"], "content": 3}));
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["error"]["code"], "bad-args", "{r}");
    let r = s.call(8, "revl_fork", json!({"at": 0, "extra": true}));
    assert_eq!(r["structuredContent"]["error"]["code"], "bad-args", "{r}");

    // A message longer than the transport takes: skipped without being buffered whole, and
    // answered with its id.
    let mut huge = br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"revl_write","arguments":{"path":"big.txt","content":""#.to_vec();
    huge.resize(huge.len() + revl_mcp::MAX_LINE + 10, b'x');
    huge.extend_from_slice(br#""}}}"#);
    s.send(&huge);
    drop(huge);
    let v = s.recv();
    assert_eq!(error_code(&v), -32600, "{v}");
    assert_eq!(v["id"], 9, "{v}");
    assert!(!ws.join("big.txt").exists());

    // Still serving: ping, then a real tool call that writes a file.
    let v = s.request(10, "ping", json!({}));
    assert!(v.get("result").is_some(), "{v}");
    let r = s.call(
        11,
        "revl_write",
        json!({"path": "ok.txt", "content": "fine"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(std::fs::read_to_string(ws.join("ok.txt")).unwrap(), "fine");
    s.finish();
}

#[test]
fn raw_workspace_target_attaches_to_its_live_session_and_releases_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let ws = tmp.path().join("ws");
    let ws_arg = ws.to_str().unwrap();

    let mut a = Raw::start(&store, &["--workspace", ws_arg]);
    a.initialize();
    let first = a.call(2, "revl_status", json!({}))["structuredContent"]["session"]
        .as_str()
        .unwrap()
        .to_string();
    // Between calls the server holds no lock: the CLI can act on the same session.
    let out = Command::new(BIN)
        .args([
            "--store",
            store.to_str().unwrap(),
            "--json",
            "provide",
            &first,
            "k",
            "v",
        ])
        .env("REVL_LOCK_WAIT_MS", "2000")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And the server sees it: it rebuilds from the WAL on every call.
    let st = a.call(3, "revl_status", json!({}));
    assert_eq!(st["structuredContent"]["provisions"]["k"], "v", "{st}");
    // A refusal's hint is worded for an MCP client: it names the tool to call, no CLI flag.
    let bad = a.call(4, "revl_step_back", json!({"to": 99}));
    assert_eq!(bad["isError"], true, "{bad}");
    let hint = bad["structuredContent"]["error"]["hint"]
        .as_str()
        .unwrap_or_default();
    assert!(
        hint.contains("revl_timeline") && !hint.contains("--"),
        "{bad}"
    );
    a.finish();

    // A second server on the same workspace serves the same live session.
    let mut b = Raw::start(&store, &["--workspace", &format!("{ws_arg}/.")]);
    b.initialize();
    let again = b.call(2, "revl_status", json!({}))["structuredContent"]["session"].clone();
    assert_eq!(again, first.as_str());
    b.finish();

    // The workspace directory deleted: the server still serves its live session (whose
    // status says where the workspace was) rather than refusing to start.
    std::fs::remove_dir_all(&ws).unwrap();
    let mut c = Raw::start(&store, &["--workspace", ws_arg]);
    c.initialize();
    let st = c.call(2, "revl_status", json!({}));
    assert_eq!(st["structuredContent"]["session"], first.as_str(), "{st}");
    c.finish();

    // Bad targets are refused before serving, with the error document (docs/reference.md).
    let out = Command::new(BIN)
        .args([
            "--store",
            store.to_str().unwrap(),
            "--json",
            "mcp",
            "--session",
            "abcdef",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["code"], "unknown-session", "{doc}");
}

/// Each tool's annotations (readOnlyHint, destructiveHint, openWorldHint), as docs/mcp.md
/// lists them: open-world only where a manifest tool may fire, a command may run on the
/// host, or a read may reach a remote's bucket; read-only only for pure reads; destructive where files may be overwritten or
/// removed.
const ANNOTATIONS: &[(&str, bool, bool, bool)] = &[
    ("revl_new", false, false, false),
    ("revl_write", false, true, false),
    ("revl_delete", false, true, false),
    ("revl_rename", false, true, false),
    ("revl_mkdir", false, false, false),
    ("revl_chmod", false, false, false),
    ("revl_read", true, false, true),
    ("revl_list", true, false, false),
    ("revl_provide", false, false, false),
    ("revl_boundary", false, false, false),
    ("revl_call", false, true, true),
    ("revl_exec", false, true, true),
    ("revl_timeline", true, false, true),
    ("revl_inspect_step", true, false, false),
    ("revl_status", true, false, true),
    ("revl_verify", true, false, false),
    ("revl_sessions", true, false, false),
    ("revl_step_back", false, true, true),
    ("revl_fork", false, false, false),
    ("revl_fork_confirm", false, true, true),
    ("revl_diff", true, false, true),
    ("revl_log", true, false, true),
    ("revl_commit", true, false, false),
    ("revl_commit_confirm", false, true, true),
    ("revl_abort", false, true, true),
    ("revl_note_model", false, false, false),
];

/// The hints column of docs/mcp.md's tool table, as (readOnly, destructive, openWorld).
fn documented_hints() -> Vec<(String, (bool, bool, bool))> {
    let doc = std::fs::read_to_string(repo_root().join("docs/mcp.md")).unwrap();
    doc.lines()
        .filter(|l| l.starts_with("| `revl_"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_end_matches('|').split(" | ").collect();
            let name = cells[0]
                .trim_start_matches("| ")
                .trim_matches('`')
                .to_string();
            let hints: Vec<&str> = cells.last().unwrap().trim().split(", ").collect();
            let has = |h: &str| hints.contains(&h);
            for h in &hints {
                assert!(
                    ["RO", "W", "D", "OW"].contains(h),
                    "docs/mcp.md: {name} has an unknown hint {h:?}"
                );
            }
            (name, (has("RO"), has("D"), has("OW")))
        })
        .collect()
}

#[test]
fn raw_tools_list_carries_the_documented_annotations_and_instructions_name_exec() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let ws = tmp.path().join("ws");
    let mut s = Raw::start(&store, &["--workspace", ws.to_str().unwrap()]);
    let init = s.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
    );
    s.send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let text = init["result"]["instructions"].as_str().unwrap_or_default();
    // exec is a first-class way to change files, named beside the file tools; no sentence
    // confines changes to the file tools alone.
    for want in [
        "revl_exec",
        "sandbox",
        "revl_write",
        "revl_read",
        "revl_call",
    ] {
        assert!(text.contains(want), "the instructions name {want}: {text}");
    }
    assert!(
        !text.contains("Change files only through revl_write"),
        "the instructions must not forbid exec by omission: {text}"
    );

    let v = s.request(2, "tools/list", json!({}));
    let tools = v["result"]["tools"].as_array().unwrap();
    let mut listed: Vec<(String, (bool, bool, bool))> = tools
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_string();
            let a = &t["annotations"];
            let get = |k: &str| {
                a[k].as_bool()
                    .unwrap_or_else(|| panic!("{name} sets no {k}: {a}"))
            };
            let hints = (
                get("readOnlyHint"),
                get("destructiveHint"),
                get("openWorldHint"),
            );
            (name, hints)
        })
        .collect();
    listed.sort();
    let mut table: Vec<(String, (bool, bool, bool))> = ANNOTATIONS
        .iter()
        .map(|(n, ro, d, ow)| (n.to_string(), (*ro, *d, *ow)))
        .collect();
    table.sort();
    assert_eq!(
        listed, table,
        "tools/list annotations (readOnly, destructive, openWorld) against the table"
    );
    let mut documented = documented_hints();
    documented.sort();
    assert_eq!(
        documented, table,
        "docs/mcp.md's hints column against the table"
    );
    s.finish();
}

/// A repair an MCP tool call's attach made is in that call's result (`repaired`), as in the
/// CLI's `--json`: an agent is told that revl finished what a crash interrupted.
#[test]
fn an_mcp_call_reports_what_its_attach_repaired() {
    let w = crate::common::World::new();
    let (sid, ws) = w.session();
    w.json(&["write", &sid, "a", "--content", "1"]).ok();
    let died = w.json_env(
        &["write", &sid, "a", "--content", "2"],
        &[("REVL_FAILPOINT", "wal.torn-append:2")],
    );
    assert_ne!(died.code, Some(0), "{}", died.dump());
    let mut s = Raw::start(&w.store, &["--workspace", ws.to_str().unwrap()]);
    s.initialize();
    let r = s.call(2, "revl_write", json!({"path": "b", "content": "x"}));
    let text = r["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{r}"));
    let what: Vec<&str> = doc["repaired"]
        .as_array()
        .unwrap_or_else(|| panic!("no `repaired` in {doc}"))
        .iter()
        .map(|x| x["what"].as_str().unwrap())
        .collect();
    assert!(what.contains(&"intent-rolled-forward"), "{doc}");
    s.finish();
}

#[test]
fn mcp_exec_net_true_and_a_list_reach_the_declared_set_only() {
    use crate::egress::Server;
    let srv = Server::start(b"via-mcp", None, false);
    let w = crate::common::World::new();
    let ws = w.ws("ws");
    let m = crate::egress::net_manifest(w.root(), &[format!("127.0.0.1:{}", srv.port)]);
    let sid = w.new_session_with(&ws, &m);
    let mut s = Raw::start(&w.store, &["--session", &sid]);
    s.initialize();
    let fetch = format!(
        "import urllib.request; open('got','w').write(urllib.request.urlopen('http://127.0.0.1:{}/m', timeout=10).read().decode())",
        srv.port
    );
    let doc = |r: &Value| -> Value {
        serde_json::from_str(r["content"][0]["text"].as_str().unwrap_or_default())
            .unwrap_or_else(|_| panic!("{r}"))
    };
    let r = s.call(
        2,
        "revl_exec",
        json!({"argv": ["python3", "-c", fetch], "net": true}),
    );
    let d = doc(&r);
    assert_eq!(d["exitCode"], 0, "{d}");
    assert_eq!(
        d["netStep"].as_u64(),
        Some(d["step"].as_u64().unwrap() - 1),
        "{d}"
    );
    assert_eq!(std::fs::read_to_string(ws.join("got")).unwrap(), "via-mcp");
    let dest = format!("127.0.0.1:{}", srv.port);
    let r = s.call(
        3,
        "revl_exec",
        json!({"argv": ["python3", "-c", fetch], "net": [dest]}),
    );
    assert!(doc(&r)["netStep"].is_u64(), "{r}");
    // Outside the set: an error result (bad-args), nothing ran.
    let r = s.call(
        4,
        "revl_exec",
        json!({"argv": ["touch", "ran"], "net": ["127.0.0.1:1"]}),
    );
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(doc(&r)["error"]["code"], "bad-args", "{r}");
    assert!(!ws.join("ran").exists());
    assert_eq!(srv.requests().len(), 2);
    s.finish();
}

/// The read tools take `remote` (and `session`): a session another store pushed to a
/// `file://` remote is read through this store's verified cache of it, with the documents
/// the store that ran it gives (docs/fleet.md, "Reading a remote"; docs/mcp.md).
#[test]
fn raw_read_tools_read_a_remote_session_through_the_verified_cache() {
    let w = crate::common::World::new();
    let (id, _) = w.session();
    w.json(&["write", &id, "a.txt", "--content", "one"]).ok();
    w.json(&["write", &id, "a.txt", "--content", "two"]).ok();
    let bucket = w.path("bucket");
    std::fs::create_dir_all(&bucket).unwrap();
    let url = format!("file://{}", bucket.display());
    w.json(&["remote", "add", "origin", &url]).ok();
    w.json(&["push"]).ok();
    // Store B, on another machine, knows the remote; its server serves a session of its own.
    let b = w.path("store-b");
    let on_b = |args: &[&str]| {
        let s = b.to_str().unwrap();
        let mut a = vec!["--json", "--store", s];
        a.extend_from_slice(args);
        w.run_raw(&a, &[])
    };
    on_b(&["remote", "add", "origin", &url]).ok();
    let ws_b = w.ws("ws-b");
    let mut s = Raw::start(&b, &["--workspace", ws_b.to_str().unwrap()]);
    s.initialize();
    let doc = |r: Value| r["structuredContent"].clone();
    let local = |args: &[&str]| w.json(args).ok().clone();
    let r = doc(s.call(
        2,
        "revl_read",
        json!({"remote": "origin", "session": &id[..8], "path": "a.txt", "at": 1}),
    ));
    assert_eq!(r, local(&["read", &id, "a.txt", "--at", "1"]), "{r}");
    let r = doc(s.call(
        3,
        "revl_timeline",
        json!({"remote": "origin", "session": id}),
    ));
    assert_eq!(r["steps"], local(&["timeline", &id])["steps"], "{r}");
    let r = doc(s.call(4, "revl_status", json!({"remote": "origin", "session": id})));
    assert_eq!(
        (r["session"].as_str(), &r["head"]),
        (Some(id.as_str()), &json!(2)),
        "{r}"
    );
    let r = doc(s.call(5, "revl_log", json!({"remote": "origin"})));
    let listed: Vec<&str> = r["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|x| x["session"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![id.as_str()], "{r}");
    let (l, rt) = (format!("{id}@1"), format!("{id}@2"));
    let r = doc(s.call(
        6,
        "revl_diff",
        json!({"remote": "origin", "left": l, "right": rt}),
    ));
    let here = w.json(&["diff", &l, &rt]);
    assert_eq!(r["paths"], here.doc()["paths"], "{r}");
    assert_eq!(r["paths"][0]["path"], "a.txt", "{r}");
    // A remote session is read at a step, never "now"; an unknown remote is named.
    let r = s.call(
        7,
        "revl_read",
        json!({"remote": "origin", "session": id, "path": "a.txt"}),
    );
    assert_eq!(doc(r.clone())["error"]["code"], "bad-args", "{r}");
    let r = s.call(8, "revl_log", json!({"remote": "nowhere"}));
    assert_eq!(doc(r.clone())["error"]["code"], "usage", "{r}");
    // The server's own session is untouched by all of it.
    let r = doc(s.call(9, "revl_status", json!({})));
    assert_eq!(r["head"], 0, "{r}");
    s.finish();
}
