//! `revl mcp`: the operator fixes the bounds at start, the agent works inside them
//! (docs/mcp.md, "Who decides what"; docs/security.md, "The MCP server: operator and agent").
//!
//! Each attack of the red-team finding is made from outside, as an MCP client over stdio,
//! and must be refused with `not-allowed` while a canary shows that nothing changed on the
//! host; each allowed case (with `--allow-unconfined`, inside a `--root`, the operator's
//! `--manifest`) works. No network: every tool is local, the only address named is never
//! connected to.

use crate::common::manifest::{self, tool};
use crate::common::World;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A `revl mcp` server of the world's store, spoken to by hand (newline-delimited JSON-RPC).
struct Mcp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    next: u64,
    instructions: String,
}

impl Mcp {
    /// Start `revl --store STORE mcp ARGS…` and complete the handshake.
    fn start(w: &World, args: &[&str]) -> Mcp {
        let mut cmd = w.command_for(&["--store", w.store.to_str().unwrap(), "mcp"]);
        let mut child = cmd
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
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
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut err, sink) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut m = Mcp {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            next: 1,
            instructions: String::new(),
        };
        let init = m.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "authority", "version": "0"}}),
        );
        m.instructions = init["result"]["instructions"]
            .as_str()
            .unwrap_or_else(|| panic!("no instructions: {init}"))
            .to_string();
        m.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    fn send(&mut self, v: Value) {
        let w = self.stdin.as_mut().unwrap();
        writeln!(w, "{v}").unwrap();
        w.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| {
                panic!(
                    "no answer to {method} ({e}); the server's stderr:\n{}",
                    self.stderr.lock().unwrap()
                )
            });
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], id, "{v}");
        v
    }

    /// A tool call: (isError, the document).
    fn call(&mut self, tool: &str, args: Value) -> (bool, Value) {
        let v = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert!(
            v.get("error").is_none(),
            "a tool call is never a protocol error: {v}"
        );
        let r = &v["result"];
        (r["isError"] == true, r["structuredContent"].clone())
    }

    #[track_caller]
    fn ok(&mut self, tool: &str, args: Value) -> Value {
        let (err, doc) = self.call(tool, args.clone());
        assert!(!err, "{tool} {args} failed: {doc}");
        doc
    }

    /// The call is refused with `code`; returns the error document's `error`.
    #[track_caller]
    fn refused(&mut self, tool: &str, args: Value, code: &str) -> Value {
        let (err, doc) = self.call(tool, args.clone());
        assert!(err, "{tool} {args} was not refused: {doc}");
        assert_eq!(doc["error"]["code"], code, "{tool} {args}: {doc}");
        doc["error"].clone()
    }

    fn session(&mut self) -> String {
        self.ok("revl_status", json!({}))["session"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn tools(&mut self) -> Vec<Value> {
        self.request("tools/list", json!({}))["result"]["tools"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Close stdin; the server must exit 0 by itself.
    fn finish(mut self) {
        drop(self.stdin.take());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "the server exited with {status}:\n{}",
                    self.stderr.lock().unwrap()
                );
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the server did not exit after stdin closed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A manifest the agent would like: an opaque tool that touches `canary` on the host when
/// called, and an `[exec] net` that would widen the sandbox's egress.
fn planted_manifest(canary: &Path) -> String {
    format!(
        "{}[exec]\nnet = [\"127.0.0.1:9\"]\n",
        manifest::text(&[tool("planted", "opaque").run(&["touch", s(canary)])])
    )
}

/// An operator's manifest: one held send (`deferred`: calling it only queues it).
fn operator_manifest(dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(format!("{name}.toml"));
    let text = manifest::text(&[tool(name, "deferred")
        .service("mail")
        .method("send")
        .scope(&["mail"])
        .run(&["true"])]);
    std::fs::write(&p, text).unwrap();
    p
}

/// The workspaces of the store's sessions.
fn session_workspaces(w: &World) -> Vec<String> {
    w.json(&["sessions"]).ok()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["workspace"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn unconfined_exec_is_refused_without_allow_unconfined_and_nothing_runs_on_the_host() {
    let w = World::new();
    let ws = w.ws("ws");
    let canary = w.path("canary-unconfined");
    let mut m = Mcp::start(&w, &["--workspace", s(&ws)]);
    let sid = m.session();
    let head = w.head(&sid);
    let e = m.refused(
        "revl_exec",
        json!({"argv": ["touch", s(&canary)], "unconfined": true}),
        "not-allowed",
    );
    let text = format!("{e}");
    assert!(
        text.contains("--allow-unconfined"),
        "names the operator's flag: {e}"
    );
    assert!(!canary.exists(), "the host command ran");
    assert_eq!(w.head(&sid), head, "something was recorded");
    // `unconfined: false` is the sandbox, as without the argument.
    let (_, doc) = m.call("revl_exec", json!({"argv": ["true"], "unconfined": false}));
    assert_ne!(doc["error"]["code"], "not-allowed", "{doc}");
    m.finish();
    assert!(!canary.exists());
}

#[test]
fn unconfined_exec_runs_on_the_host_with_allow_unconfined() {
    let w = World::new();
    let ws = w.ws("ws");
    let canary = w.path("canary-allowed");
    let mut m = Mcp::start(&w, &["--workspace", s(&ws), "--allow-unconfined"]);
    assert!(
        m.instructions.contains("unconfined exec: allowed"),
        "{}",
        m.instructions
    );
    let doc = m.ok(
        "revl_exec",
        json!({"argv": ["touch", s(&canary)], "unconfined": true}),
    );
    assert_eq!(doc["exitCode"], 0, "{doc}");
    assert!(
        canary.exists(),
        "the operator allowed it: the command ran on the host"
    );
    m.finish();
}

#[test]
fn revl_new_without_any_root_is_refused_naming_the_flag() {
    let w = World::new();
    let ws = w.ws("ws");
    let target = w.path("elsewhere");
    let mut m = Mcp::start(&w, &["--workspace", s(&ws)]);
    let sid = m.session();
    let e = m.refused("revl_new", json!({"workspace": s(&target)}), "not-allowed");
    assert!(
        format!("{e}").contains("--root"),
        "names the operator's flag: {e}"
    );
    assert!(!target.exists(), "the workspace was created");
    m.refused("revl_new", json!({"workspace": "/etc"}), "not-allowed");
    assert_eq!(m.session(), sid, "the server still serves its session");
    m.finish();
    assert_eq!(session_workspaces(&w), [s(&ws)]);
}

#[test]
fn revl_new_outside_the_roots_is_refused_etc_included() {
    let w = World::new();
    let root = w.ws("roots");
    let ws = w.ws("roots/a");
    let outside = w.ws("outside");
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    let mut m = Mcp::start(&w, &["--workspace", s(&ws), "--root", s(&root)]);
    let sid = m.session();
    for target in [
        "/etc".to_string(),
        "/etc/revl-agent-ws".to_string(),
        s(&outside.join("x")).to_string(),
        // A symlink inside the root that leads out: checked where it leads.
        s(&root.join("link/x")).to_string(),
        format!("{}/../outside/y", s(&root)),
        // The root's sibling with a longer name is not below it.
        format!("{}-sibling", s(&root)),
    ] {
        let (err, doc) = m.call("revl_new", json!({"workspace": target}));
        assert!(err, "revl_new {target} was not refused: {doc}");
        assert_eq!(doc["error"]["code"], "not-allowed", "{target}: {doc}");
    }
    assert!(!Path::new("/etc/revl-agent-ws").exists());
    assert!(!outside.join("x").exists() && !outside.join("y").exists());
    assert!(!w.path("roots-sibling").exists());
    assert_eq!(m.session(), sid, "the server still serves its session");
    m.finish();
    assert_eq!(session_workspaces(&w), [s(&ws)], "no session was created");
}

#[test]
fn revl_new_inside_a_root_works_with_the_servers_manifest() {
    let w = World::new();
    let root = w.ws("roots");
    let ws = w.ws("roots/a");
    let m_path = operator_manifest(&w.path("operator"), "notify");
    let mut m = Mcp::start(
        &w,
        &[
            "--workspace",
            s(&ws),
            "--root",
            s(&root),
            "--manifest",
            s(&m_path),
        ],
    );
    let first = m.session();
    // The operator's file changes after start: the server keeps what it read.
    std::fs::write(&m_path, "not a manifest at all [").unwrap();
    let created = m.ok("revl_new", json!({"workspace": s(&root.join("b/c"))}));
    let second = created["session"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    assert_eq!(
        m.session(),
        second,
        "the server continues on the new session"
    );
    assert!(root.join("b/c").is_dir());
    assert_eq!(
        m.ok("revl_call", json!({"tool": "notify"}))["queued"],
        true,
        "the new session has the server's manifest"
    );
    m.finish();
}

#[test]
fn revl_new_refuses_a_manifest_the_agent_names() {
    let w = World::new();
    let root = w.ws("roots");
    let ws = w.ws("roots/a");
    let canary = w.path("canary-named");
    let evil = ws.join("evil.toml");
    // A server started with no flag at all: the agent writes a manifest, then names it.
    let mut m = Mcp::start(&w, &["--workspace", s(&ws)]);
    m.ok(
        "revl_write",
        json!({"path": "evil.toml", "content": planted_manifest(&canary)}),
    );
    let target = w.path("b");
    let e = m.refused(
        "revl_new",
        json!({"workspace": s(&target), "manifest": s(&evil)}),
        "not-allowed",
    );
    assert!(format!("{e}").contains("manifest"), "{e}");
    let (err, _) = m.call("revl_call", json!({"tool": "planted"}));
    assert!(err, "the agent's tool exists");
    m.finish();
    assert!(!canary.exists(), "the agent's tool ran on the host");
    assert!(!target.exists(), "the workspace was created");

    // Inside a root the manifest is refused all the same, and it is not even in the schema
    // an agent reads.
    let mut m = Mcp::start(&w, &["--workspace", s(&ws), "--root", s(&root)]);
    let target = root.join("b");
    m.refused(
        "revl_new",
        json!({"workspace": s(&target), "manifest": s(&evil)}),
        "not-allowed",
    );
    assert!(!target.exists(), "the workspace was created");
    let tools = m.tools();
    let new = tools.iter().find(|t| t["name"] == "revl_new").unwrap();
    let props: Vec<&String> = new["inputSchema"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(props, ["workspace"], "{new}");
    let (err, _) = m.call("revl_call", json!({"tool": "planted"}));
    assert!(err, "the agent's tool exists");
    m.finish();
    assert!(!canary.exists(), "the agent's tool ran on the host");
    assert_eq!(session_workspaces(&w), [s(&ws)]);
}

#[test]
fn a_revl_toml_the_agent_writes_never_becomes_a_sessions_tools() {
    let w = World::new();
    let root = w.ws("roots");
    let ws = w.ws("roots/a");
    let canary = w.path("canary-revl-toml");
    // The agent writes revl.toml into its workspace and closes the session.
    let mut m = Mcp::start(&w, &["--workspace", s(&ws)]);
    m.ok(
        "revl_write",
        json!({"path": "revl.toml", "content": planted_manifest(&canary)}),
    );
    let plan = m.ok("revl_commit", json!({}));
    m.ok("revl_commit_confirm", json!({"hash": plan["hash"]}));
    m.finish();

    // The server started again on that workspace (no live session there): the session it
    // creates does not read the agent's revl.toml.
    let mut m = Mcp::start(&w, &["--workspace", s(&ws)]);
    let (err, doc) = m.call("revl_call", json!({"tool": "planted"}));
    assert!(err, "the agent's tool exists after a restart: {doc}");
    assert!(!canary.exists(), "the agent's tool ran on the host");
    // Its [exec] net did not widen the sandbox's egress: refused before anything runs.
    m.refused(
        "revl_exec",
        json!({"argv": ["touch", "ran"], "net": ["127.0.0.1:9"]}),
        "bad-args",
    );
    assert!(!ws.join("ran").exists());
    assert!(
        m.instructions.contains("no --manifest (no manifest)"),
        "{}",
        m.instructions
    );
    let plan = m.ok("revl_commit", json!({}));
    m.ok("revl_commit_confirm", json!({"hash": plan["hash"]}));
    m.finish();

    // revl_new on it, inside a root: the file is not the new session's manifest either.
    let mut m = Mcp::start(&w, &["--workspace", s(&root.join("b")), "--root", s(&root)]);
    m.ok("revl_new", json!({"workspace": s(&ws)}));
    let (err, doc) = m.call("revl_call", json!({"tool": "planted"}));
    assert!(err, "the agent's tool exists in the new session: {doc}");
    m.finish();
    assert!(!canary.exists(), "the agent's tool ran on the host");
    assert!(
        ws.join("revl.toml").exists(),
        "the file itself stays the agent's"
    );
}

#[test]
fn fork_confirm_into_outside_the_roots_is_refused_and_inside_works() {
    let w = World::new();
    let root = w.ws("roots");
    let ws = w.ws("roots/a");
    let outside = w.path("outside-branch");
    // Without any root, `into` is refused too.
    let mut m = Mcp::start(&w, &["--workspace", s(&ws)]);
    let sid = m.session();
    m.ok("revl_write", json!({"path": "f", "content": "1"}));
    m.ok("revl_write", json!({"path": "f", "content": "2"}));
    let report = m.ok("revl_fork", json!({"at": 1}));
    let e = m.refused(
        "revl_fork_confirm",
        json!({"hash": report["hash"], "into": s(&root.join("b"))}),
        "not-allowed",
    );
    assert!(format!("{e}").contains("--root"), "{e}");
    m.finish();
    assert!(!root.join("b").exists());

    let mut m = Mcp::start(&w, &["--workspace", s(&ws), "--root", s(&root)]);
    let report = m.ok("revl_fork", json!({"at": 1}));
    for into in [
        s(&outside).to_string(),
        "/etc/revl-agent-branch".to_string(),
    ] {
        m.refused(
            "revl_fork_confirm",
            json!({"hash": report["hash"], "into": into}),
            "not-allowed",
        );
    }
    assert!(!outside.exists() && !Path::new("/etc/revl-agent-branch").exists());
    let st = m.ok("revl_status", json!({}));
    assert_eq!(
        (st["session"].as_str(), st["state"].as_str()),
        (Some(sid.as_str()), Some("live"))
    );
    assert_eq!(std::fs::read_to_string(ws.join("f")).unwrap(), "2");
    assert_eq!(session_workspaces(&w).len(), 1, "no branch was made");
    // Inside the root: the parallel fork works (the refusals left the enumeration intact).
    let par = m.ok(
        "revl_fork_confirm",
        json!({"hash": report["hash"], "into": s(&root.join("b"))}),
    );
    assert_eq!(par["mode"], "parallel", "{par}");
    assert_eq!(
        std::fs::read_to_string(root.join("b/f")).ok().as_deref(),
        Some("1"),
        "{par}"
    );
    assert_eq!(m.session(), sid, "a parallel fork keeps serving the parent");
    m.finish();
}

#[test]
fn a_session_whose_manifest_differs_from_the_servers_is_not_served() {
    let w = World::new();
    let root = w.ws("roots");
    let ws = w.ws("roots/a");
    let a = operator_manifest(&w.path("operator"), "tool_a");
    let b = operator_manifest(&w.path("operator"), "tool_b");
    let a_copy = w.path("operator/copy-of-a.toml");
    std::fs::copy(&a, &a_copy).unwrap();
    let sid = w.new_session_with(&ws, &a);

    // Another manifest than the session's: refused before serving, by session or workspace.
    for target in [["--workspace", s(&ws)], ["--session", sid.as_str()]] {
        let mut args = vec!["mcp"];
        args.extend(target);
        args.extend(["--manifest", s(&b)]);
        let out = w.json(&args);
        let msg = out.err(2, "not-allowed");
        assert!(msg.contains(&sid), "{msg}");
    }
    // The same bytes under another path: served.
    let mut m = Mcp::start(&w, &["--session", &sid, "--manifest", s(&a_copy)]);
    assert_eq!(m.ok("revl_call", json!({"tool": "tool_a"}))["queued"], true);
    m.finish();

    // Without --manifest the server's manifest is the session's own: a session it creates
    // gets it, and a serial fork's branch (which inherits it) is served.
    let mut m = Mcp::start(&w, &["--session", &sid, "--root", s(&root)]);
    assert!(
        m.instructions.contains(&format!("session {sid}'s own")),
        "{}",
        m.instructions
    );
    m.ok("revl_new", json!({"workspace": s(&root.join("n"))}));
    assert_eq!(m.ok("revl_call", json!({"tool": "tool_a"}))["queued"], true);
    let (err, _) = m.call("revl_call", json!({"tool": "tool_b"}));
    assert!(err, "tool_b is not the server's");
    let report = m.ok("revl_fork", json!({"at": 0}));
    let forked = m.ok("revl_fork_confirm", json!({"hash": report["hash"]}));
    let branch = forked["branch"].as_str().unwrap().to_string();
    assert_eq!(m.session(), branch, "the server continues on the branch");
    assert_eq!(m.ok("revl_call", json!({"tool": "tool_a"}))["queued"], true);
    m.finish();
}

#[test]
fn the_tools_and_instructions_say_what_the_operator_bounds() {
    let w = World::new();
    let root = w.ws("roots");
    let ws = w.ws("roots/a");
    let mut m = Mcp::start(&w, &["--workspace", s(&ws)]);
    for want in ["not-allowed", "unconfined exec: refused", "none (revl_new"] {
        assert!(m.instructions.contains(want), "{want}: {}", m.instructions);
    }
    let tools = m.tools();
    let get = |n: &str| tools.iter().find(|t| t["name"] == n).unwrap().clone();
    for (name, flag) in [
        ("revl_new", "--root"),
        ("revl_fork_confirm", "--root"),
        ("revl_exec", "--allow-unconfined"),
    ] {
        let t = get(name);
        assert!(
            t["description"].as_str().unwrap().contains(flag),
            "{name}'s description names {flag}: {t}"
        );
        assert!(
            t["annotations"]["title"]
                .as_str()
                .unwrap()
                .contains("operator"),
            "{name}'s title says it is operator-bounded: {t}"
        );
    }
    let unconfined = &get("revl_exec")["inputSchema"]["properties"]["unconfined"];
    assert!(
        unconfined["description"]
            .as_str()
            .unwrap()
            .contains("--allow-unconfined"),
        "{unconfined}"
    );
    m.finish();
    let m = Mcp::start(&w, &["--workspace", s(&ws), "--root", s(&root)]);
    assert!(m.instructions.contains(s(&root)), "{}", m.instructions);
    m.finish();
}

#[test]
fn a_root_that_is_not_a_directory_stops_the_server_at_start() {
    let w = World::new();
    let ws = w.ws("ws");
    let file = w.path("a-file");
    std::fs::write(&file, "x").unwrap();
    for root in [w.path("missing"), file] {
        let out = w.json(&["mcp", "--workspace", s(&ws), "--root", s(&root)]);
        let msg = out.err(2, "usage");
        assert!(
            msg.contains("--root") && msg.contains("not an existing directory"),
            "{msg}"
        );
    }
    assert!(
        session_workspaces(&w).is_empty(),
        "nothing was created before the refusal"
    );
}
