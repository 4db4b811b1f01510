//! Declared egress (docs/user-guide.md §8), through the binary, against loopback servers
//! only: a server on the host's 127.0.0.1 declared literally gets exactly the requests the
//! command made (and the `net-connect` record was durable in the WAL when it accepted); an
//! undeclared one gets nothing (through the proxy, through a tunnel, directly); a name that
//! resolves to loopback is refused; `--net=DEST` outside the set runs nothing; a fork
//! restores the files and reports the crossing; a revl killed mid-connection is repaired
//! with the destination known.

use crate::common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a loopback test server saw: each request line, and whether the WAL held the
/// connection's `net-connect` when it accepted.
#[derive(Default)]
pub struct Seen {
    pub requests: Vec<String>,
    pub accepts: usize,
    pub recorded_first: Vec<bool>,
}

/// A loopback HTTP server answering every request with `body` (`Connection: close`). With
/// `wal`, on each accept it reads that file for a `net-connect` naming its port. With
/// `hold`, it accepts and never answers.
pub struct Server {
    pub port: u16,
    pub seen: Arc<Mutex<Seen>>,
}

impl Server {
    pub fn start(body: &'static [u8], wal: Option<PathBuf>, hold: bool) -> Server {
        Self::serve(TcpListener::bind("127.0.0.1:0").unwrap(), body, wal, hold)
    }

    pub fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().requests.clone()
    }

    pub fn accepts(&self) -> usize {
        self.seen.lock().unwrap().accepts
    }
}

/// Does the WAL at `wal` hold an admitted `net-connect` to `port`?
pub fn wal_has_connect(wal: &Path, port: u16) -> bool {
    std::fs::read_to_string(wal)
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let Some((body, _)) = l.rsplit_once(",\"crc\":\"") else {
                return false;
            };
            serde_json::from_str::<Value>(&format!("{body}}}")).is_ok_and(|v| {
                v["record"] == "net-connect" && v["port"] == port && v.get("denied").is_none()
            })
        })
}

/// A manifest with `[exec] net = [...]`.
pub fn net_manifest(dir: &Path, net: &[String]) -> PathBuf {
    let list: Vec<String> = net.iter().map(|d| format!("{d:?}")).collect();
    let p = dir.join("revl.toml");
    std::fs::write(&p, format!("[exec]\nnet = [{}]\n", list.join(", "))).unwrap();
    p
}

/// A Python client script in the workspace (urllib honours HTTP_PROXY).
const CLIENT: &str = r#"
import http.client, os, socket, sys, urllib.request
proxy = os.environ.get("HTTP_PROXY", "")
out = []
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return "ok %d %s" % (r.status, r.read().decode())
    except Exception as e:
        return "fail %s" % e
def tunnel(port, path):
    try:
        c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
        c.set_tunnel("127.0.0.1", port)
        c.request("GET", path)
        r = c.getresponse()
        return "ok %d %s" % (r.status, r.read().decode())
    except Exception as e:
        return "fail %s" % e
def direct(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /direct HTTP/1.0\r\n\r\n")
        return "ok connected"
    except Exception as e:
        return "fail %s" % e
for a in sys.argv[1:]:
    kind, _, rest = a.partition("=")
    if kind == "get":
        out.append(get(rest))
    elif kind == "tunnel":
        port, _, path = rest.partition("/")
        out.append(tunnel(int(port), "/" + path))
    elif kind == "direct":
        out.append(direct(int(rest)))
open("out.txt", "w").write("\n".join(out) + "\n")
print("proxy=" + proxy)
print("\n".join(out))
"#;

fn setup(net: &[String]) -> (World, String, PathBuf) {
    let w = World::new();
    let ws = w.ws("ws");
    std::fs::write(ws.join("client.py"), CLIENT).unwrap();
    let m = net_manifest(w.root(), net);
    let id = w.new_session_with(&ws, &m);
    (w, id, ws)
}

fn exec_net(w: &World, id: &str, net: &str, args: &[&str]) -> Out {
    let mut a = vec!["exec", id, net, "--", "python3", "client.py"];
    a.extend_from_slice(args);
    w.json(&a)
}

fn net_records(w: &World, id: &str) -> Vec<Value> {
    check_wal(&w.wal(id))
        .into_iter()
        .filter(|r| r["record"] == "net-connect" || r["record"] == "net-close")
        .collect()
}

#[test]
fn declared_server_gets_exactly_the_requests_recorded_first() {
    // The server is bound first (the manifest names its port), and serves once the
    // session (its WAL) exists.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (w, id, ws) = setup(&[format!("127.0.0.1:{port}")]);
    let server = Server::serve(l, b"hello", Some(w.wal(&id)), false);
    let out = exec_net(
        &w,
        &id,
        "--net",
        &[
            &format!("get=http://127.0.0.1:{port}/a"),
            &format!("tunnel={port}/t"),
            &format!("direct={port}"),
        ],
    );
    let doc = out.ok().clone();
    assert_eq!(doc["exitCode"], 0, "{}", out.dump());
    let text = std::fs::read_to_string(ws.join("out.txt")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "ok 200 hello", "{}", out.dump());
    assert_eq!(lines[1], "ok 200 hello", "{}", out.dump());
    assert!(
        lines[2].starts_with("fail"),
        "a direct connect must fail: {}",
        out.dump()
    );
    assert!(doc["stdout"]
        .as_str()
        .unwrap()
        .contains("proxy=http://127.0.0.1:3128"));
    // Exactly the two requests, through the proxy; each accept found its record durable.
    assert_eq!(
        server.requests(),
        vec!["GET /a HTTP/1.1".to_string(), "GET /t HTTP/1.1".to_string()]
    );
    let seen = server.seen.lock().unwrap();
    assert_eq!(
        seen.recorded_first,
        vec![true, true],
        "net-connect durable before the server saw a byte"
    );
    drop(seen);
    // The steps: the emission, then the effect (out.txt).
    let step = doc["step"].as_u64().unwrap();
    assert_eq!(doc["netStep"].as_u64(), Some(step - 1), "{}", out.dump());
    assert_eq!(doc["net"]["connections"].as_array().unwrap().len(), 2);
    let tl = w.timeline(&id);
    let em = &tl["steps"][(step - 1) as usize];
    assert_eq!(em["kind"], "emission");
    assert_eq!(em["label"], "exec.net python3");
    assert_eq!(em["site"], "exec");
    assert_eq!(em["scope"], serde_json::json!({"caps": ["net"]}));
    let d = &em["detail"];
    assert_eq!(d["service"], "exec");
    assert_eq!(d["method"], "net");
    assert_eq!(d["args"]["argv"][0], "python3");
    assert!(d["key"].as_str().unwrap().starts_with(&id));
    for c in d["connections"].as_array().unwrap() {
        assert_eq!(c["dest"], "127.0.0.1");
        assert_eq!(c["port"], port);
        assert!(
            c["bytesUp"].as_u64().unwrap() > 0 && c["bytesDown"].as_u64().unwrap() > 0,
            "{c}"
        );
    }
    let eff = &tl["steps"][step as usize];
    assert_eq!(eff["kind"], "effect");
    assert_eq!(eff["detail"]["changes"][0]["path"], "out.txt");
    // The records: two connects, each with its close and byte counts.
    let recs = net_records(&w, &id);
    let connects: Vec<&Value> = recs
        .iter()
        .filter(|r| r["record"] == "net-connect")
        .collect();
    let closes: Vec<&Value> = recs.iter().filter(|r| r["record"] == "net-close").collect();
    assert_eq!((connects.len(), closes.len()), (2, 2), "{recs:?}");
    for c in &connects {
        assert_eq!(c["dest"], "127.0.0.1");
        assert_eq!(c["resolved"], "127.0.0.1");
        assert!(c["ts"].is_string());
    }
    for c in &closes {
        assert!(c["bytesUp"].as_u64().unwrap() > 0 && c["bytesDown"].as_u64().unwrap() > 0);
        assert_eq!(c["port"], port);
        assert!(c["ts"].is_string());
    }
}

impl Server {
    fn serve(l: TcpListener, body: &'static [u8], wal: Option<PathBuf>, hold: bool) -> Server {
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s2 = seen.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let recorded = wal.as_ref().is_some_and(|w| wal_has_connect(w, port));
                {
                    let mut s = s2.lock().unwrap();
                    s.accepts += 1;
                    s.recorded_first.push(recorded);
                }
                let s3 = s2.clone();
                std::thread::spawn(move || answer(c, &s3, body, hold));
            }
        });
        Server { port, seen }
    }
}

fn answer(mut c: TcpStream, seen: &Mutex<Seen>, body: &[u8], hold: bool) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(20)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    if let Some(line) = head.lines().next().filter(|l| !l.is_empty()) {
        seen.lock().unwrap().requests.push(line.to_string());
    }
    if hold {
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let _ = c.write_all(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    let _ = c.write_all(body);
}

#[test]
fn undeclared_server_gets_nothing() {
    let declared = Server::start(b"yes", None, false);
    let other = Server::start(b"no", None, false);
    let (w, id, ws) = setup(&[format!("127.0.0.1:{}", declared.port)]);
    let q = other.port;
    let out = exec_net(
        &w,
        &id,
        "--net",
        &[
            &format!("get=http://127.0.0.1:{q}/p"),
            &format!("tunnel={q}/t"),
            &format!("direct={q}"),
        ],
    );
    let doc = out.ok().clone();
    let text = std::fs::read_to_string(ws.join("out.txt")).unwrap();
    for (i, l) in text.lines().enumerate() {
        assert!(
            l.starts_with("fail"),
            "attempt {i} must fail: {l}\n{}",
            out.dump()
        );
    }
    assert!(text.lines().next().unwrap().contains("403"), "{text}");
    assert_eq!(other.accepts(), 0, "the undeclared server got a connection");
    assert_eq!(declared.accepts(), 0);
    // Refused attempts are recorded; nothing forwarded: one effect step, no emission.
    assert!(doc.get("netStep").is_none(), "{}", out.dump());
    let denied = doc["net"]["denied"].as_array().unwrap();
    assert_eq!(denied.len(), 2, "{}", out.dump());
    let recs = net_records(&w, &id);
    assert_eq!(recs.len(), 2, "{recs:?}");
    for r in &recs {
        assert_eq!(r["record"], "net-connect");
        assert_eq!(r["denied"], true);
        assert_eq!(r["port"], q);
        assert!(
            r["why"]
                .as_str()
                .unwrap()
                .contains("not in the requested set"),
            "{r}"
        );
    }
    let tl = w.timeline(&id);
    let step = doc["step"].as_u64().unwrap();
    let eff = &tl["steps"][step as usize];
    assert_eq!(eff["kind"], "effect");
    assert_eq!(
        eff["detail"]["denied"].as_array().unwrap().len(),
        2,
        "{eff}"
    );
}

#[test]
fn name_resolving_to_loopback_is_refused_unless_literal() {
    let s = Server::start(b"x", None, false);
    let p = s.port;
    // Declared by name: refused, it resolves to loopback.
    let (w, id, ws) = setup(&[format!("localhost:{p}")]);
    let out = exec_net(&w, &id, "--net", &[&format!("get=http://localhost:{p}/n")]);
    out.ok();
    let text = std::fs::read_to_string(ws.join("out.txt")).unwrap();
    assert!(text.starts_with("fail") && text.contains("403"), "{text}");
    assert_eq!(s.accepts(), 0);
    let why = net_records(&w, &id)[0]["why"].as_str().unwrap().to_string();
    assert!(why.contains("loopback") && why.contains("literal"), "{why}");
    // Declared literally: the literal address reaches it, the name still does not.
    let (w, id, ws) = setup(&[format!("127.0.0.1:{p}")]);
    let out = exec_net(
        &w,
        &id,
        "--net",
        &[
            &format!("get=http://localhost:{p}/n"),
            &format!("get=http://127.0.0.1:{p}/l"),
        ],
    );
    out.ok();
    let text = std::fs::read_to_string(ws.join("out.txt")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("fail"), "{text}");
    assert_eq!(lines[1], "ok 200 x", "{text}");
    assert_eq!(s.requests(), vec!["GET /l HTTP/1.1".to_string()]);
}

#[test]
fn net_outside_the_set_is_bad_args_and_nothing_runs() {
    let (w, id, ws) = setup(&["127.0.0.1:9".to_string()]);
    let head = w.head(&id);
    let out = w.json(&["exec", &id, "--net=127.0.0.1:10", "--", "touch", "ran"]);
    let msg = out.err(2, "bad-args");
    assert!(
        msg.contains("127.0.0.1:10") && msg.contains("outside"),
        "{msg}"
    );
    assert!(!ws.join("ran").exists());
    assert_eq!(w.head(&id), head);
    // An empty one, and both forms at once, are refused too.
    for bad in [vec!["--net="], vec!["--net", "--net=127.0.0.1:9"]] {
        let mut a = vec!["exec", id.as_str()];
        a.extend(bad.iter().copied());
        a.extend(["--", "touch", "ran"]);
        w.json(&a).err(2, "bad-args");
        assert!(!ws.join("ran").exists());
    }
    // A part of the set is fine.
    w.json(&["exec", &id, "--net=127.0.0.1:9", "--", "touch", "ran"])
        .ok();
    assert!(ws.join("ran").exists());
    // No declared set at all: --net is refused too.
    let w2 = World::new();
    let (id2, ws2) = w2.session();
    let out = w2.json(&["exec", &id2, "--net", "--", "touch", "ran"]);
    let msg = out.err(2, "bad-args");
    assert!(msg.contains("[exec] net"), "{msg}");
    assert!(!ws2.join("ran").exists());
    // A malformed manifest entry is bad-manifest at `new`.
    let w3 = World::new();
    let ws3 = w3.ws("ws");
    let m = net_manifest(w3.root(), &["pypi.org".to_string()]);
    let out = w3.json(&[
        "new",
        "--workspace",
        ws3.to_str().unwrap(),
        "--manifest",
        m.to_str().unwrap(),
    ]);
    let msg = out.err(2, "bad-manifest");
    assert!(msg.contains("no port"), "{msg}");
}

#[test]
fn fork_restores_files_and_reports_the_crossing() {
    let s = Server::start(b"downloaded-bytes", None, false);
    let (w, id, ws) = setup(&[format!("127.0.0.1:{}", s.port)]);
    std::fs::write(ws.join("keep.txt"), b"before").unwrap();
    w.json(&["write", &id, "keep.txt", "--content", "before"])
        .ok();
    let before = snapshot(&ws);
    let k = w.head(&id);
    let out = exec_net(
        &w,
        &id,
        &format!("--net=127.0.0.1:{}", s.port),
        &[&format!("get=http://127.0.0.1:{}/f", s.port)],
    );
    let doc = out.ok().clone();
    let net_step = doc["netStep"].as_u64().unwrap();
    assert!(ws.join("out.txt").exists());
    // The enumerated fork lists the emission with its connections; the text names it.
    let rep = w.json(&["fork", &id, "--at", &k.to_string()]);
    let r = rep.ok().clone();
    let crossed = r["emissionsCrossed"].as_array().unwrap();
    assert_eq!(crossed.len(), 1, "{r}");
    assert_eq!(crossed[0]["index"], net_step);
    assert_eq!(crossed[0]["connections"][0]["dest"], "127.0.0.1");
    assert_eq!(crossed[0]["connections"][0]["port"], s.port);
    assert_eq!(r["residue"]["clean"], false);
    let text = w.run(&["fork", &id, "--at", &k.to_string()]);
    let line = text
        .stdout
        .lines()
        .find(|l| l.contains("exec.net"))
        .unwrap_or_else(|| panic!("no exec.net row\n{}", text.stdout));
    assert!(
        line.contains(&format!("reached 127.0.0.1:{}", s.port)),
        "{}",
        text.stdout
    );
    // The row names the step as its label does (`exec.net <program>`).
    assert!(line.contains("exec.net python3"), "{}", text.stdout);
    let hash = w.json(&["fork", &id, "--at", &k.to_string()]).ok()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let done = w.json(&["fork-confirm", &id, "--hash", &hash]);
    let d = done.ok();
    assert_eq!(d["forked"], true);
    assert_snap_eq(&before, &snapshot(&ws), "after the fork");
    // view shows the emission and its destination.
    let html = w.root().join("v.html");
    w.run(&["view", &id, "--out", html.to_str().unwrap()]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("exec.net python3"), "view lacks the emission");
    assert!(
        page.contains(&format!("reached 127.0.0.1:{}", s.port)),
        "view lacks the destination"
    );
}

/// A declared destination with nothing listening: the outbound connect fails, nothing is
/// forwarded, so nothing crossed: no emission, no `netStep`, and a fork is clean. The
/// attempt stays on the record (its `net-close` carries the error) and in the exec's result.
#[test]
fn a_connect_that_failed_is_not_a_crossing() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (w, id, ws) = setup(&[format!("127.0.0.1:{closed}")]);
    let k = w.head(&id).to_string();
    let out = exec_net(
        &w,
        &id,
        "--net",
        &[&format!("get=http://127.0.0.1:{closed}/f")],
    );
    let doc = out.ok().clone();
    assert!(doc.get("netStep").is_none_or(Value::is_null), "{doc}");
    let conns = doc["net"]["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 1, "{doc}");
    assert!(conns[0]["error"].as_str().is_some(), "{doc}");
    assert_eq!(conns[0]["bytesUp"], 0);
    let got = std::fs::read_to_string(ws.join("out.txt")).unwrap();
    assert!(got.starts_with("fail"), "{got}");
    // On the record: the attempt and its failure.
    let recs = net_records(&w, &id);
    assert!(
        recs.iter()
            .any(|r| r["record"] == "net-close" && r["error"].is_string()),
        "{recs:?}"
    );
    // No emission on the timeline; a fork before the exec crosses nothing.
    let tl = w.json(&["timeline", &id]);
    let steps = tl.ok()["steps"].as_array().unwrap().clone();
    assert!(!steps.iter().any(|s| s["kind"] == "emission"), "{steps:?}");
    let r = w.json(&["fork", &id, "--at", &k]);
    let r = r.ok();
    assert_eq!(r["emissionsCrossed"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(r["residue"]["clean"], true, "{r}");
    // The text says the connect failed, never that the destination was reached.
    let text = w.run(&[
        "exec",
        &id,
        "--net",
        "--",
        "python3",
        "client.py",
        &format!("get=http://127.0.0.1:{closed}/g"),
    ]);
    assert!(text.stdout.contains("failed "), "{}", text.stdout);
    assert!(
        !text
            .stdout
            .lines()
            .any(|l| l.trim_start().starts_with("reached")),
        "{}",
        text.stdout
    );
}

#[test]
fn step_back_reports_the_crossing() {
    let s = Server::start(b"z", None, false);
    let (w, id, _ws) = setup(&[format!("127.0.0.1:{}", s.port)]);
    let out = exec_net(
        &w,
        &id,
        "--net",
        &[&format!("get=http://127.0.0.1:{}/f", s.port)],
    );
    let net_step = out.ok()["netStep"].as_u64().unwrap();
    let r = w.json(&["step-back", &id, "--to", &(net_step - 1).to_string()]);
    let r = r.ok();
    assert_eq!(r["emissionsCrossed"][0]["index"], net_step, "{r}");
    assert_eq!(r["emissionsCrossed"][0]["connections"][0]["port"], s.port);
    assert_eq!(r["inversesRan"].as_array().unwrap().len(), 1, "{r}");
}

#[test]
fn killed_mid_connection_repair_knows_the_destination() {
    let s = Server::start_hold();
    let (w, id, _ws) = setup(&[format!("127.0.0.1:{}", s.port)]);
    let store = w.store.to_str().unwrap().to_string();
    let mut child = w
        .command_for(&[
            "--store",
            &store,
            "exec",
            &id,
            "--net",
            "--",
            "python3",
            "client.py",
            &format!("get=http://127.0.0.1:{}/slow", s.port),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while s.requests().is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the request never arrived"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGKILL revl itself (the child this test started), mid-connection.
    let _ = std::process::Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status();
    let _ = child.wait();
    // The WAL holds the connect, not its close.
    assert!(wal_has_connect(&w.wal(&id), s.port));
    let st = w.json(&["status", &id]);
    st.ok();
    let tl = w.timeline(&id);
    let steps = tl["steps"].as_array().unwrap();
    let last = steps.last().unwrap();
    assert_eq!(last["kind"], "emission", "{tl}");
    assert_eq!(last["label"], "exec.net python3");
    let c = &last["detail"]["connections"][0];
    assert_eq!(c["dest"], "127.0.0.1");
    assert_eq!(c["port"], s.port);
    assert_eq!(c["interrupted"], true);
    // The emission names the whole command (kept in the exec's first intent).
    assert_eq!(
        last["detail"]["args"]["argv"],
        serde_json::json!([
            "python3",
            "client.py",
            format!("get=http://127.0.0.1:{}/slow", s.port)
        ]),
        "{tl}"
    );
    // No effect step: the change set was never applied.
    assert!(steps.iter().all(|s| s["kind"] != "effect"), "{tl}");
}

impl Server {
    fn start_hold() -> Server {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        Self::serve(l, b"", None, true)
    }
}

/// Power loss in the middle of a connection. The power-cut FUSE layer cannot hold an exec's
/// store (overlayfs refuses a FUSE upper layer, see power_cut.rs), so the cut is made on the
/// WAL itself: every egress record is fsynced when written, so what a power cut leaves is a
/// prefix of the records, possibly with a torn last line. For every prefix from the exec's
/// first intent on (and the same with half of the next line torn), a copy of the store is
/// attached: repair must name every destination a `net-connect` announced (as possibly
/// reached when its `net-close` is missing), carry byte counts only from a `net-close`, and
/// leave a usable session.
#[test]
fn power_cut_at_every_egress_record_leaves_every_destination_known() {
    let s = Server::start(b"pc", None, false);
    let other = Server::start(b"never", None, false);
    let w = World::new();
    let ws = w.ws("ws");
    let m = net_manifest(w.root(), &[format!("127.0.0.1:{}", s.port)]);
    let id = w.new_session_with(&ws, &m);
    // Two connections and a refused attempt; the command writes no file, so the workspace
    // is the same at every cut.
    let script = format!(
        "import urllib.request as u\nfor p in ('/1', '/2'):\n    u.urlopen('http://127.0.0.1:{0}' + p, timeout=10).read()\ntry:\n    u.urlopen('http://127.0.0.1:{1}/x', timeout=10)\nexcept Exception:\n    pass\n",
        s.port, other.port
    );
    let out = w.json(&["exec", &id, "--net", "--", "python3", "-c", &script]);
    assert_eq!(out.ok()["exitCode"], 0, "{}", out.dump());
    assert_eq!(other.accepts(), 0);
    let wal = std::fs::read_to_string(w.wal(&id)).unwrap();
    let lines: Vec<&str> = wal.split_inclusive('\n').collect();
    let rec = |l: &str| -> Value {
        let (body, _) = l.rsplit_once(",\"crc\":\"").unwrap();
        serde_json::from_str(&format!("{body}}}")).unwrap()
    };
    let first = lines
        .iter()
        .position(|l| rec(l)["record"] == "intent" && rec(l)["site"] == "exec")
        .unwrap();
    let mut cuts = 0;
    for cut in first..=lines.len() {
        for torn in [false, true] {
            if torn && cut == lines.len() {
                continue;
            }
            cuts += 1;
            let copy = w.root().join(format!("cut-{cut}-{torn}"));
            let st = std::process::Command::new("cp")
                .args(["-a", w.store.to_str().unwrap(), copy.to_str().unwrap()])
                .status()
                .unwrap();
            assert!(st.success());
            let mut text: String = lines[..cut].concat();
            if torn {
                let next = lines[cut];
                text.push_str(&next[..next.len() / 2]);
            }
            let cw = copy.join("sessions").join(&id).join("wal.jsonl");
            std::fs::write(&cw, &text).unwrap();
            // The records after the cut were never made durable: the commit ring, which
            // would bring back those it holds (docs/wal-format.md, "The commit ring"), goes.
            let _ = std::fs::remove_file(cw.with_file_name("wal.ring"));
            let store = copy.to_str().unwrap();
            let what = format!(
                "cut after {cut} record(s){}",
                if torn { " + a torn line" } else { "" }
            );
            let st = w.run_raw(&["--store", store, "--json", "status", &id], &[]);
            assert_eq!(st.code, Some(0), "{what}: {}", st.dump());
            let tl = w.run_raw(&["--store", store, "--json", "timeline", &id], &[]);
            let tl = tl
                .json
                .clone()
                .unwrap_or_else(|| panic!("{what}: {}", tl.dump()));
            let kept: Vec<Value> = lines[..cut].iter().map(|l| rec(l)).collect();
            let connects: Vec<&Value> = kept
                .iter()
                .filter(|r| r["record"] == "net-connect" && r.get("denied").is_none())
                .collect();
            let steps = tl["steps"].as_array().unwrap();
            let emissions: Vec<&Value> = steps.iter().filter(|s| s["kind"] == "emission").collect();
            if connects.is_empty() {
                assert!(
                    emissions.is_empty(),
                    "{what}: an emission without a connection: {tl}"
                );
            } else {
                assert_eq!(emissions.len(), 1, "{what}: {tl}");
                let conns = emissions[0]["detail"]["connections"].as_array().unwrap();
                assert_eq!(
                    conns.len(),
                    connects.len(),
                    "{what}: every announced destination is known: {tl}"
                );
                for (c, r) in conns.iter().zip(&connects) {
                    assert_eq!(c["port"], r["port"], "{what}");
                    let close = kept
                        .iter()
                        .find(|k| k["record"] == "net-close" && k["conn"] == r["conn"]);
                    match close {
                        Some(k) => {
                            assert_eq!(c["bytesUp"], k["bytesUp"], "{what}");
                            assert_eq!(c["bytesDown"], k["bytesDown"], "{what}");
                            assert!(c.get("interrupted").is_none(), "{what}");
                        }
                        None => {
                            // Nothing counted them: the counts are unknown (null), never
                            // a zero that claims nothing was forwarded.
                            assert_eq!(c["interrupted"], true, "{what}: {c}");
                            assert!(
                                c["bytesUp"].is_null() && c["bytesDown"].is_null(),
                                "{what}: unknown counts are null: {c}"
                            );
                        }
                    }
                }
            }
            // No effect was applied unless its step survived.
            let effects = steps.iter().filter(|s| s["kind"] == "effect").count();
            let kept_effects = kept
                .iter()
                .filter(|r| r["record"] == "step" && r["kind"] == "effect")
                .count();
            assert_eq!(effects, kept_effects, "{what}: {tl}");
            // Usable: a further step is recorded.
            let b = w.run_raw(&["--store", store, "--json", "boundary", &id], &[]);
            assert_eq!(b.code, Some(0), "{what}: {}", b.dump());
        }
    }
    assert!(cuts >= 8, "{cuts} cut points");
}

/// A loopback listener for [`a_name_resolving_to_a_special_purpose_address_is_refused`]: it
/// binds `PORT` on each address given, appends the address to `HITS` on every connection
/// (the canary: any line there is a connection that reached it), and answers `canary`.
const CANARY: &str = r#"
import socket, sys, threading
port, hits, ready = int(sys.argv[1]), sys.argv[2], sys.argv[3]
lock = threading.Lock()
def serve(a, s):
    while True:
        c, _ = s.accept()
        with lock, open(hits, "a") as f:
            f.write(a + "\n")
        try:
            c.recv(65536)
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\ncanary")
        except OSError:
            pass
        c.close()
for a in sys.argv[4:]:
    s = socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a, port))
    s.listen(16)
    threading.Thread(target=serve, args=(a, s), daemon=True).start()
open(ready, "w").write("ready")
threading.Event().wait()
"#;

/// Declared names that resolve into the IANA special-purpose blocks are refused
/// (docs/security.md, "Which addresses a name may resolve to"): benchmarking, documentation,
/// IETF protocol assignments, CGNAT, reserved, IPv4-mapped, IPv4-compatible, NAT64 (well-known
/// and local-use), 6to4, Teredo, discard-only, ORCHID, site-local. Each address is a
/// listener (the canary) on the loopback of a network namespace of the test's own, where
/// revl runs with an `/etc/hosts` bound over the host's in a mount namespace of its own:
/// nothing on the host changes. Only the control, a name resolving to a public address,
/// reaches its listener. Before the table, the first twelve (all but CGNAT and reserved)
/// reached theirs.
#[test]
#[ignore = "needs root: run by scripts/test (README)"]
fn a_name_resolving_to_a_special_purpose_address_is_refused() {
    // A test that cannot run fails, saying why (a skip would print `ok`).
    let root = std::process::Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        root.stdout, b"0\n",
        "this test needs root (network and mount namespaces of its own, addresses on their loopback, /etc/hosts bound over): run it as root, as scripts/test does"
    );
    const PORT: u16 = 8080;
    // (name, the address it resolves to, the block its refusal names)
    let refused: &[(&str, &str, &str)] = &[
        ("bench.test", "198.18.0.1", "198.18.0.0/15"),
        ("doc.test", "192.0.2.1", "192.0.2.0/24"),
        ("ietf.test", "192.0.0.1", "192.0.0.0/29"),
        ("mapped.test", "::ffff:198.18.0.1", "::ffff:0:0/96"),
        ("compat.test", "::7f00:1", "::/96"),
        ("nat64.test", "64:ff9b::a00:1", "64:ff9b::/96"),
        ("nat64local.test", "64:ff9b:1::1", "64:ff9b:1::/48"),
        ("sixtofour.test", "2002:7f00:1::1", "2002::/16"),
        ("teredo.test", "2001:0:7f00:1::1", "2001::/32"),
        ("doc6.test", "2001:db8::1", "2001:db8::/32"),
        ("discard.test", "100::1", "100::/64"),
        ("orchid.test", "2001:10::1", "2001:10::/28"),
        ("cgnat.test", "100.64.0.1", "100.64.0.0/10"),
        ("reserved.test", "240.0.0.1", "240.0.0.0/4"),
        ("bench6.test", "2001:2::1", "2001:2::/48"),
        ("doc3fff.test", "3fff::1", "3fff::/20"),
        ("sitelocal.test", "fec0::1", "fec0::/10"),
    ];
    let control = ("public.test", "192.0.3.1");
    let mut net: Vec<String> = refused
        .iter()
        .map(|(n, _, _)| format!("{n}:{PORT}"))
        .collect();
    net.push(format!("{}:{PORT}", control.0));
    let (w, id, ws) = setup(&net);
    let d = w.root();
    let (hosts, hits, ready, out, canary) = (
        d.join("hosts"),
        d.join("hits"),
        d.join("ready"),
        d.join("out.json"),
        d.join("canary.py"),
    );
    let mut lines = vec!["127.0.0.1 localhost".to_string()];
    lines.extend(refused.iter().map(|(n, a, _)| format!("{a} {n}")));
    lines.push(format!("{} {}", control.1, control.0));
    std::fs::write(&hosts, lines.join("\n") + "\n").unwrap();
    std::fs::write(&canary, CANARY).unwrap();
    // Every address on the namespace's loopback (the IPv4-mapped one is reached through
    // its IPv4 address).
    let listen: Vec<&str> = refused
        .iter()
        .map(|(_, a, _)| *a)
        .filter(|a| !a.starts_with("::ffff:"))
        .chain([control.1])
        .collect();
    let mut script = String::from("set -e\nip link set lo up\n");
    for a in &listen {
        if a.contains(':') {
            script.push_str(&format!("ip -6 addr add {a}/128 dev lo nodad\n"));
        } else {
            script.push_str(&format!("ip addr add {a}/32 dev lo\n"));
        }
    }
    let gets: Vec<String> = refused
        .iter()
        .map(|(n, _, _)| format!("get=http://{n}:{PORT}/"))
        .chain([format!("get=http://{}:{PORT}/", control.0)])
        .collect();
    script.push_str(&format!(
        "mount --bind {hosts} /etc/hosts\n\
         python3 {canary} {PORT} {hits} {ready} {listen} &\n\
         c=$!\n\
         i=0; while [ ! -e {ready} ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done\n\
         {revl} --store {store} --json exec {id} --net -- python3 client.py {gets} > {out} || true\n\
         kill $c\n",
        hosts = hosts.display(),
        canary = canary.display(),
        hits = hits.display(),
        ready = ready.display(),
        listen = listen.join(" "),
        revl = bin(),
        store = w.store.display(),
        gets = gets.join(" "),
        out = out.display(),
    ));
    let ran = std::process::Command::new("unshare")
        .args(["-n", "-m", "--propagation", "private", "sh", "-c", &script])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", &w.home)
        .env("LC_ALL", "C")
        .current_dir(d)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(ran.status.success(), "{said}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap_or_default())
        .unwrap_or_else(|e| panic!("no exec result ({e}): {said}"));
    // The canary: only the control's listener was reached.
    let hit = std::fs::read_to_string(&hits).unwrap_or_default();
    assert_eq!(
        hit,
        format!("{}\n", control.1),
        "a refused name reached its listener: {doc}"
    );
    let got = std::fs::read_to_string(ws.join("out.txt")).unwrap();
    let got: Vec<&str> = got.lines().collect();
    assert_eq!(got.len(), refused.len() + 1, "{got:?}");
    for (i, (n, a, block)) in refused.iter().enumerate() {
        assert!(
            got[i].starts_with("fail") && got[i].contains("403"),
            "{n} ({a}): {}",
            got[i]
        );
        let recs = net_records(&w, &id);
        let why = recs
            .iter()
            .find(|r| r["dest"] == *n && r["denied"] == true)
            .and_then(|r| r["why"].as_str())
            .unwrap_or_else(|| panic!("no refusal of {n} recorded: {recs:?}"))
            .to_string();
        assert!(
            why.contains(&format!("in {block} ")) && why.contains("literal"),
            "{n} ({a}): {why}"
        );
    }
    assert_eq!(got[refused.len()], "ok 200 canary", "the control: {doc}");
}
