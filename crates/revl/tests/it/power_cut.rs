//! Power loss (docs/reliability.md, issue 18): the store and the workspaces live on the
//! power-cut FUSE layer (`revl-powercut`), which keeps only what fsync/fsyncdir made
//! durable. Each scenario is a fixed list of `revl` commands, run one after another as
//! separate processes against a loopback HTTP sink. A reference run without a cut counts
//! the mutating FUSE requests T of the scenario's armed part and records the state after
//! every command. Then, for each cut point N of a sample of 1..=T (every request for the
//! short scenarios; a stride plus seeded random points for the long one), on a fresh disk:
//! the same commands run until the N-th request, which never returns; the harness SIGKILLs
//! the command in flight, drops every write that was not fsynced (power cycle), mounts
//! again, and checks on the remounted store:
//!
//! - every session attaches (`status` repairs; `sessions` lists each one and each opens);
//! - no acknowledged step is lost and only an unacknowledged tail is missing: each session's
//!   timeline lies between its timeline after the last acknowledged command (`prev`) and the
//!   one after the command that was in flight (`next`), as a prefix (the step of a tool call
//!   in flight may also come back `opaque`: its outcome is unknown); its state, held sends,
//!   pending approvals and undone marks equal `prev`'s or `next`'s; the WAL counts of
//!   held sends, approval requests, grants and consumptions, commits and flushes lie between;
//! - nothing was sent twice or too early: per sink path, `prev ≤ sent ≤ next`, and no
//!   idempotency key arrived twice;
//! - the workspace agrees with the log: `revl verify` exits 0 on every live session, and
//!   every workspace (the session's and each parallel fork's) equals, byte for byte and mode
//!   for mode, its tree at `prev` or at `next`;
//! - the session is usable: a further write and `verify` succeed, and a commit of what is
//!   still held fires each of those sends exactly once.
//!
//! Violations are collected over all cut points, then the test fails with each kind once
//! (its category, the command in flight, and every cut point that showed it as "n (request
//! i/m)": the n-th mutating FUSE request of the armed part, the i-th of the m its command
//! made in the reference run). Each test prints one line: cut points, distinct post-cut
//! states, and how many cut points lost something or sent something twice or too early.
//! The layer needs `/dev/fuse` and root: plain `cargo test` leaves these tests out (ignored),
//! `scripts/test` runs them (add `-- --include-ignored` to a cargo test command line as root).
//! `REVL_POWER_CUT_ALL=1` cuts after every request of every scenario (a longer run);
//! `REVL_POWER_CUT_SEED` picks the random points; `REVL_POWER_CUT_ONLY=n[,m…]` runs just
//! those cut points and prints every WAL and the sink after the repair (to diagnose one).
//!
//! Not covered: `revl exec`. Its sandbox mounts an overlayfs whose upper layer sits in the
//! store's `scratch/`, and overlayfs cannot use a FUSE filesystem as its upper layer, so
//! `exec` cannot run with its store on this layer.

use crate::common::manifest::{self, tool};
use crate::common::{self, Snapshot};
use revl::sink::Sink;
use revl_powercut::{Disk, Mounted};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Longest any one command may take before the harness calls it hung.
const HANG: Duration = Duration::from_secs(120);

/// WAL records whose count may only grow from `prev` to `next` (never by a repair).
const COUNTED: &[&str] = &[
    "deferred-emission",
    "approval-requested",
    "approval-granted",
    "approval-consumed",
    "commit-approved",
    "flushed",
];

/// What a violation is about (each message starts with one): an acknowledged step, session,
/// held send, approval or file lost; a send twice or too early; a session that does not
/// attach; `verify` finding drift; a workspace that is neither before nor after; a session
/// state that is neither; a session that cannot go on; a command that misbehaved before the
/// cut.
const CATEGORIES: &[&str] = &[
    "LOST",
    "SENT",
    "ATTACH",
    "DRIFT",
    "WORKSPACE",
    "STATE",
    "UNUSABLE",
    "BEFORE-CUT",
];

fn sink() -> &'static Sink {
    static SINK: OnceLock<Sink> = OnceLock::new();
    SINK.get_or_init(|| Sink::start().expect("start the loopback sink"))
}

/// A fresh sink path prefix per run, so that one sink serves every run of every test.
fn next_prefix() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("/pc{}", N.fetch_add(1, Ordering::Relaxed))
}

// ---- the disk ----

/// A power-cut disk mounted under a fresh temp dir, and a directory off the disk for HOME,
/// the manifest and the commands' output. Field order: unmount before the temp dir goes.
struct Rig {
    mnt: Option<Mounted>,
    disk: Disk,
    root: PathBuf,
    off: PathBuf,
    /// Power cycles so far: each is a boot of "the machine", which revl reads as its boot
    /// id (`REVL_BOOT_ID`), as the kernel would give a new one after a real power loss.
    boots: u32,
    _tmp: tempfile::TempDir,
}

enum Outcome {
    /// The command ended by itself.
    Exit {
        code: i32,
        json: Value,
        text: String,
    },
    /// The cut came while it ran: it was SIGKILLed, unacknowledged.
    Cut,
}

impl Rig {
    fn new() -> Rig {
        let tmp = common::tempdir();
        let mp = tmp.path().join("disk");
        let off = tmp.path().join("off");
        std::fs::create_dir_all(&mp).unwrap();
        std::fs::create_dir_all(off.join("home")).unwrap();
        let disk = Disk::new();
        let mnt = disk.mount(&mp).unwrap_or_else(|e| {
            panic!("the power-cut layer could not mount (needs /dev/fuse and root: run scripts/test as root): {e}")
        });
        Rig {
            root: mnt.path().to_path_buf(),
            mnt: Some(mnt),
            disk,
            off,
            boots: 0,
            _tmp: tmp,
        }
    }

    fn store(&self) -> PathBuf {
        self.root.join("store")
    }

    fn spawn(&self, args: &[String]) -> Child {
        let mut cmd = common::clean_command(&self.off.join("home"), &self.off);
        cmd.arg("--store")
            .arg(self.store())
            .arg("--json")
            .args(args)
            .env("REVL_BOOT_ID", format!("power-cut-boot-{}", self.boots));
        cmd.stdout(File::create(self.off.join("stdout")).unwrap());
        cmd.stderr(File::create(self.off.join("stderr")).unwrap());
        cmd.spawn().expect("spawn revl")
    }

    fn output(&self) -> (Value, String) {
        let out = std::fs::read_to_string(self.off.join("stdout")).unwrap_or_default();
        let err = std::fs::read_to_string(self.off.join("stderr")).unwrap_or_default();
        let json = serde_json::from_str(&out).unwrap_or(Value::Null);
        (json, format!("{out}{err}"))
    }

    /// Run one command until it exits or the armed cut comes (polling both; the cut wakes
    /// the poll at once). On the cut: SIGKILL it, release the disk, reap it.
    fn run_until(&self, args: &[String]) -> Outcome {
        let mut child = self.spawn(args);
        let start = Instant::now();
        loop {
            if let Some(st) = child.try_wait().expect("wait for revl") {
                let (json, text) = self.output();
                return Outcome::Exit {
                    code: st.code().unwrap_or(-1),
                    json,
                    text,
                };
            }
            if self.disk.wait_cut(Duration::from_millis(1)) {
                let _ = child.kill();
                self.disk.release();
                let _ = child.wait();
                return Outcome::Cut;
            }
            if start.elapsed() > HANG {
                let _ = child.kill();
                self.disk.release();
                let _ = child.wait();
                panic!("revl {} hung for {HANG:?}", args.join(" "));
            }
        }
    }

    /// Run one command that no cut can interrupt (the disk is not armed).
    fn run(&self, args: &[&str]) -> (i32, Value, String) {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        match self.run_until(&args) {
            Outcome::Exit { code, json, text } => (code, json, text),
            Outcome::Cut => panic!("a cut while the disk was not armed"),
        }
    }

    /// Power cycle: what was not fsynced is gone; mount again at the same place.
    fn remount(&mut self) {
        let mnt = self.mnt.take().expect("mounted");
        self.mnt = Some(mnt.cut_and_remount().expect("cut and remount"));
        self.boots += 1;
    }
}

// ---- states ----

/// One session as the commands show it, without ids or hashes (they differ per run).
#[derive(Debug, Clone, PartialEq, Eq)]
struct SessionState {
    state: String,
    /// `(index, kind, label)` of every step.
    steps: Vec<(u64, String, String)>,
    undone: Vec<bool>,
    /// Held sends: `tool args`.
    queue: Vec<String>,
    owed: usize,
    /// Inverses a rewind lists `failed` (a fenced inverse whose outcome is unknown is never
    /// run again), over every `step-back-done` and `aborted` record.
    failed: usize,
    /// Pending approval tickets: `tool argsDigest` (from the WAL).
    pending: Vec<String>,
    counts: BTreeMap<&'static str, usize>,
}

/// Everything the checks compare: sessions by name, workspaces by name, sends by path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct State {
    sessions: BTreeMap<String, SessionState>,
    dirs: BTreeMap<String, Option<Snapshot>>,
    sent: BTreeMap<String, usize>,
}

/// What the reference run recorded: the state before the armed part and after each of its
/// commands, and which FUSE requests each command made.
struct Reference {
    states: Vec<State>,
    /// `(command, first request, end)`, requests counted from the arming.
    ranges: Vec<(String, u64, u64)>,
    total: u64,
}

impl Reference {
    /// Which command of the armed part made request `n`, and its place in that command.
    fn locate(&self, n: u64) -> (String, u64, u64) {
        for (cmd, a, b) in &self.ranges {
            if n > *a && n <= *b {
                return (cmd.clone(), n - a, b - a);
            }
        }
        ("(past the reference's requests)".into(), n, self.total)
    }
}

/// `s` with every run of exactly 32 hex digits (an id the names did not cover) shown as
/// `<id>` and of 64 (a hash, a digest) as `<hash>`, so that messages of different runs
/// compare equal.
fn mask_hex(s: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        match run.len() {
            32 => out.push_str("<id>"),
            64 => out.push_str("<hash>"),
            _ => out.push_str(run),
        }
        run.clear();
    };
    for ch in s.chars() {
        if ch.is_ascii_hexdigit() && ch.is_ascii_lowercase() || ch.is_ascii_digit() {
            run.push(ch);
        } else {
            flush(&mut run, &mut out);
            out.push(ch);
        }
    }
    flush(&mut run, &mut out);
    out
}

// ---- a scenario run ----

/// One run of a scenario: the reference run (`cut_at == None`) or a run cut after the
/// `cut_at`-th mutating request of its armed part.
struct Ctx {
    rig: Rig,
    prefix: String,
    manifest: PathBuf,
    /// Named sessions, in the order they were acknowledged.
    ids: Vec<(String, String)>,
    /// Workspaces (relative to the mount) compared after a cut.
    dirs: Vec<String>,
    cut_at: Option<u64>,
    armed: bool,
    /// Armed commands acknowledged (exit as expected) so far.
    done: usize,
    /// The command the cut interrupted.
    inflight: Option<String>,
    cut: bool,
    /// A command that behaved unlike the reference before any cut.
    failure: Option<String>,
    // Reference run only.
    states: Vec<State>,
    ranges: Vec<(String, u64, u64)>,
    cum: u64,
}

impl Ctx {
    fn new(cut_at: Option<u64>, dirs: &[&str]) -> Ctx {
        let rig = Rig::new();
        let prefix = next_prefix();
        let s = sink();
        let url = |p: &str| s.url(&format!("{prefix}{p}"));
        let manifest = manifest::write(
            &rig.off,
            &[
                tool("send_email", "deferred")
                    .service("mail")
                    .method("send")
                    .scope(&["mail"])
                    .post(&url("/send")),
                tool("post_status", "emission")
                    .service("status")
                    .method("post")
                    .scope(&["net"])
                    .post(&url("/status")),
                tool("create_ticket", "emission")
                    .service("tickets")
                    .method("create")
                    .scope(&["net"])
                    .no_approval()
                    .post(&url("/ticket"))
                    .compensate("close_ticket"),
                tool("close_ticket", "inverse")
                    .scope(&["net"])
                    .post(&url("/close")),
            ],
        );
        Ctx {
            rig,
            prefix,
            manifest,
            ids: Vec::new(),
            dirs: dirs.iter().map(|d| d.to_string()).collect(),
            cut_at,
            armed: false,
            done: 0,
            inflight: None,
            cut: false,
            failure: None,
            states: Vec::new(),
            ranges: Vec::new(),
            cum: 0,
        }
    }

    fn stopped(&self) -> bool {
        self.cut || self.failure.is_some()
    }

    fn id(&self, name: &str) -> String {
        self.ids
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| id.clone())
            .unwrap_or_else(|| panic!("no session named {name}"))
    }

    /// `s` with this run's session ids shown by name, the mount as `<mnt>`, and other ids
    /// and hashes masked: the same text in every run.
    fn named(&self, s: &str) -> String {
        let mut s = s.replace(&self.rig.root.display().to_string(), "<mnt>");
        for (name, id) in &self.ids {
            s = s.replace(id.as_str(), &format!("<{name}>"));
        }
        mask_hex(&s)
    }

    /// A command line as [`Ctx::named`] shows it, long arguments (contents) shortened.
    fn cmdline(&self, args: &[String]) -> String {
        self.named(&args.join(" "))
            .split(' ')
            .map(|w| match w.char_indices().nth(40) {
                Some((at, _)) => format!("{}…({} bytes)", &w[..at], w.len()),
                None => w.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn path(&self, rel: &str) -> String {
        self.rig.root.join(rel).display().to_string()
    }

    /// Everything up to here is setup, made durable; the cut can come from here on.
    fn arm(&mut self) -> Option<()> {
        if self.stopped() {
            return None;
        }
        self.rig.disk.sync_all();
        self.armed = true;
        match self.cut_at {
            Some(n) => self.rig.disk.arm_cut_after(n),
            None => {
                let st = self.capture().unwrap_or_else(|e| panic!("reference: {e}"));
                self.states.push(st);
            }
        }
        Some(())
    }

    /// Run `revl --json ARGS`; `expect` is the exit code the reference run gets. `None` once
    /// the cut came (or a command misbehaved before it): the scenario stops there.
    fn run(&mut self, expect: i32, args: &[&str]) -> Option<Value> {
        if self.stopped() {
            return None;
        }
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let line = args.join(" ");
        let before = self.rig.disk.ops();
        match self.rig.run_until(&args) {
            Outcome::Exit { code, json, text } => {
                let used = self.rig.disk.ops() - before;
                if code != expect {
                    self.failure = Some(format!(
                        "BEFORE-CUT: `revl {line}` exited {code}, not {expect}:\n{text}"
                    ));
                    return None;
                }
                if self.armed {
                    self.done += 1;
                    if self.cut_at.is_none() {
                        let line = self.cmdline(&args);
                        self.ranges.push((line, self.cum, self.cum + used));
                        self.cum += used;
                        let st = self.capture().unwrap_or_else(|e| panic!("reference: {e}"));
                        self.states.push(st);
                    }
                }
                Some(json)
            }
            Outcome::Cut => {
                self.cut = true;
                self.inflight = Some(self.cmdline(&args));
                None
            }
        }
    }

    fn ok(&mut self, args: &[&str]) -> Option<Value> {
        self.run(0, args)
    }

    /// `new` on `<mount>/<ws>`, named `name`.
    fn new_session(&mut self, name: &str, ws: &str) -> Option<String> {
        let (ws, m) = (self.path(ws), self.manifest.display().to_string());
        let doc = self.ok(&["new", "--workspace", &ws, "--manifest", &m])?;
        let id = doc["session"].as_str().expect("session id").to_string();
        self.ids.push((name.to_string(), id.clone()));
        Some(id)
    }

    fn write(&mut self, name: &str, path: &str, content: &str) -> Option<Value> {
        let s = self.id(name);
        self.ok(&["write", &s, path, "--content", content])
    }

    fn call(&mut self, name: &str, tool: &str, args: &str) -> Option<Value> {
        let s = self.id(name);
        self.ok(&["call", &s, tool, "--args", args])
    }

    /// `fork NAME --at K` then `fork-confirm` (with `--into <mount>/<into>` for a parallel
    /// fork); the branch is named `branch`.
    fn fork(&mut self, name: &str, at: &str, into: Option<&str>, branch: &str) -> Option<()> {
        let s = self.id(name);
        let doc = self.ok(&["fork", &s, "--at", at])?;
        let hash = doc["hash"].as_str().expect("fork hash").to_string();
        let mut args = vec!["fork-confirm".to_string(), s, "--hash".into(), hash];
        if let Some(d) = into {
            args.push("--into".into());
            args.push(self.path(d));
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let doc = self.ok(&a)?;
        let b = doc["branch"].as_str().expect("branch id").to_string();
        self.ids.push((branch.to_string(), b));
        Some(())
    }

    fn commit(&mut self, name: &str) -> Option<Value> {
        let s = self.id(name);
        let plan = self.ok(&["commit", &s])?;
        let hash = plan["hash"].as_str().expect("commit hash").to_string();
        self.ok(&["commit-confirm", &s, "--hash", &hash])
    }

    /// The sink's requests of this run: `(path without the prefix, idempotency key)`.
    fn received(&self) -> Vec<(String, Option<String>)> {
        sink()
            .received()
            .into_iter()
            .filter_map(|r| {
                r.path
                    .strip_prefix(&format!("{}/", self.prefix))
                    .map(|p| (format!("/{p}"), r.idempotency_key))
            })
            .collect()
    }

    /// Read the state of every named session (`status` attaches and repairs), every
    /// workspace, and the sink. `Err` when a session refuses to open.
    fn capture(&self) -> Result<State, String> {
        let mut st = State::default();
        for (name, id) in &self.ids {
            st.sessions.insert(name.clone(), self.session_state(id)?);
        }
        for d in &self.dirs {
            let p = self.rig.root.join(d);
            st.dirs
                .insert(d.clone(), p.exists().then(|| common::snapshot(&p)));
        }
        for (path, _) in self.received() {
            *st.sent.entry(path).or_default() += 1;
        }
        Ok(st)
    }

    fn session_state(&self, id: &str) -> Result<SessionState, String> {
        let (code, status, text) = self.rig.run(&["status", id]);
        if code != 0 {
            return Err(format!("`revl status {id}` exited {code}:\n{text}"));
        }
        let (code, tl, text) = self.rig.run(&["timeline", id]);
        if code != 0 {
            return Err(format!("`revl timeline {id}` exited {code}:\n{text}"));
        }
        let steps = tl["steps"].as_array().cloned().unwrap_or_default();
        let wal = PathBuf::from(status["wal"].as_str().unwrap_or_default());
        let recs = wal_records(&wal);
        let mut counts = BTreeMap::new();
        for k in COUNTED {
            counts.insert(*k, recs.iter().filter(|r| r["record"] == *k).count());
        }
        let granted: BTreeSet<String> = recs
            .iter()
            .filter(|r| r["record"] == "approval-granted")
            .filter_map(|r| r["ticket"].as_str().map(String::from))
            .collect();
        let pending = recs
            .iter()
            .filter(|r| r["record"] == "approval-requested")
            .filter(|r| !granted.contains(r["ticket"].as_str().unwrap_or_default()))
            .map(|r| format!("{} {}", r["tool"], r["argsDigest"]))
            .collect();
        Ok(SessionState {
            state: status["state"].as_str().unwrap_or("?").to_string(),
            steps: steps
                .iter()
                .map(|s| {
                    (
                        s["index"].as_u64().unwrap_or(u64::MAX),
                        s["kind"].as_str().unwrap_or("?").to_string(),
                        s["label"].as_str().unwrap_or("?").to_string(),
                    )
                })
                .collect(),
            undone: steps.iter().map(|s| s["undone"] == true).collect(),
            queue: status["queue"]
                .as_array()
                .map(|q| {
                    q.iter()
                        .map(|h| format!("{} {}", h["tool"], h["args"]))
                        .collect()
                })
                .unwrap_or_default(),
            owed: status["owed"].as_array().map_or(0, Vec::len),
            failed: recs
                .iter()
                .filter(|r| r["record"] == "step-back-done" || r["record"] == "aborted")
                .map(|r| r["failed"].as_array().map_or(0, Vec::len))
                .sum(),
            pending,
            counts,
        })
    }

    /// After the cut and the remount: every check of the module comment. Returns the
    /// violations and the state found (for counting distinct states).
    fn check(&mut self, r: &Reference) -> (Vec<String>, State) {
        let mut v = Vec::new();
        let prev = &r.states[self.done];
        let next = self
            .inflight
            .as_ref()
            .and_then(|_| r.states.get(self.done + 1));

        // Every session in the store opens (attach repairs); bind a session the command in
        // flight made (a branch) to its name in `next`.
        let (code, doc, text) = self.rig.run(&["sessions"]);
        if code != 0 {
            v.push(format!("ATTACH: `revl sessions` exited {code}:\n{text}"));
        }
        let all: Vec<String> = doc["sessions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["session"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let known: BTreeSet<String> = self.ids.iter().map(|(_, id)| id.clone()).collect();
        let unknown: Vec<&String> = all.iter().filter(|id| !known.contains(*id)).collect();
        for id in &unknown {
            let (code, _, text) = self.rig.run(&["status", id]);
            if code != 0 {
                v.push(format!("ATTACH: session {id} (made by the command in flight) does not attach: `revl status` exited {code}:\n{text}"));
            }
        }
        if let Some(n) = next {
            let missing: Vec<&String> = n
                .sessions
                .keys()
                .filter(|k| !self.ids.iter().any(|(name, _)| name == *k))
                .collect();
            if let ([name], [id]) = (missing.as_slice(), unknown.as_slice()) {
                self.ids.push(((*name).clone(), (*id).clone()));
            }
        }
        for (name, id) in &self.ids {
            if !all.contains(id) {
                v.push(format!(
                    "LOST: acknowledged session {name} ({id}) is not in `revl sessions`"
                ));
            }
        }

        let post = match self.capture() {
            Ok(st) => st,
            Err(e) => {
                v.push(format!(
                    "ATTACH: a session does not attach after the cut: {e}"
                ));
                return (v, State::default());
            }
        };

        // The workspace agrees with the log.
        for (name, id) in &self.ids {
            if post.sessions.get(name).is_some_and(|s| s.state == "live") {
                let (code, doc, text) = self.rig.run(&["verify", id]);
                if code != 0 {
                    v.push(format!(
                        "DRIFT: `revl verify` of {name} exited {code}: {}",
                        if doc.is_null() {
                            text
                        } else {
                            doc["drift"].to_string()
                        }
                    ));
                }
            }
        }
        for (dir, snap) in &post.dirs {
            let leftovers: Vec<String> = snap
                .iter()
                .flat_map(|s| s.keys())
                .filter(|k| k.rsplit('/').next().unwrap_or(k).starts_with(".revl-"))
                .cloned()
                .collect();
            if !leftovers.is_empty() {
                v.push(format!(
                    "WORKSPACE: {dir}: revl temp files left after attach: {leftovers:?}"
                ));
            }
        }
        compare(&post, prev, next, &mut v);

        // Nothing twice: no idempotency key arrived twice.
        let mut seen = BTreeSet::new();
        for (path, key) in self.received() {
            if let Some(k) = key {
                if !seen.insert(k.clone()) {
                    v.push(format!(
                        "SENT: {path} with idempotency key {k} arrived twice"
                    ));
                }
            }
        }

        // Usable after the repair: one more write, verify, and a commit of what is held.
        if let Some((name, id)) = self
            .ids
            .iter()
            .rev()
            .find(|(n, _)| post.sessions.get(n).is_some_and(|s| s.state == "live"))
            .cloned()
        {
            let verified = !v.iter().any(|m| m.contains("`revl verify`"));
            v.extend(self.continue_after(&name, &id, &post.sessions[&name], verified));
        }
        (v, post)
    }

    /// Print every WAL of the store, one record a line (ids named), and the sink's requests.
    fn dump(&self, n: u64) {
        eprintln!(
            "=== cut {n}: in flight `{}`",
            self.inflight.as_deref().unwrap_or("-")
        );
        let sessions = self.rig.store().join("sessions");
        for e in std::fs::read_dir(&sessions).into_iter().flatten().flatten() {
            let wal = e.path().join("wal.jsonl");
            eprintln!("--- {}", self.named(&wal.display().to_string()));
            let text = std::fs::read_to_string(&wal).unwrap_or_default();
            for line in text.lines() {
                let mut l = self.named(line);
                if let Some((at, _)) = l.char_indices().nth(300) {
                    l.truncate(at);
                    l.push('…');
                }
                eprintln!("{l}");
            }
        }
        eprintln!("--- sink: {:?}", self.received());
    }

    /// `verified`: `verify` passed before (else its failure is already reported).
    fn continue_after(
        &self,
        name: &str,
        id: &str,
        st: &SessionState,
        verified: bool,
    ) -> Vec<String> {
        let mut v = Vec::new();
        let (code, _, text) = self
            .rig
            .run(&["write", id, "after-cut.txt", "--content", "after"]);
        if code != 0 {
            v.push(format!(
                "UNUSABLE: {name}: a write after the repair exited {code}:\n{text}"
            ));
            return v;
        }
        let (code, _, text) = self.rig.run(&["verify", id]);
        if code != 0 && verified {
            v.push(format!(
                "DRIFT: {name}: verify after a further write exited {code}:\n{text}"
            ));
        }
        let (code, plan, text) = self.rig.run(&["commit", id]);
        if code != 0 {
            v.push(format!(
                "UNUSABLE: {name}: commit after the repair exited {code}:\n{text}"
            ));
            return v;
        }
        let before = self.received();
        let hash = plan["hash"].as_str().unwrap_or_default();
        let (code, _, text) = self.rig.run(&["commit-confirm", id, "--hash", hash]);
        if code != 0 {
            v.push(format!(
                "UNUSABLE: {name}: commit-confirm after the repair exited {code}:\n{text}"
            ));
            return v;
        }
        let after = self.received();
        let fired: Vec<&(String, Option<String>)> = after[before.len()..]
            .iter()
            .filter(|(p, _)| p == "/send")
            .collect();
        if fired.len() != st.queue.len() {
            v.push(format!(
                "{}: {name}: the commit after the repair fired {} held send(s); {} were held: {:?}",
                if fired.len() > st.queue.len() {
                    "SENT"
                } else {
                    "LOST"
                },
                fired.len(),
                st.queue.len(),
                st.queue
            ));
        }
        v
    }
}

/// `post` lies between `prev` (after the last acknowledged command) and `next` (after the
/// command in flight; `None`: nothing was in flight, so `post` must be `prev`). Each message
/// starts with its category (see [`CATEGORIES`]).
fn compare(post: &State, prev: &State, next: Option<&State>, v: &mut Vec<String>) {
    for name in prev.sessions.keys() {
        if !post.sessions.contains_key(name) {
            v.push(format!("LOST: acknowledged session {name} is gone"));
        }
    }
    for (name, s) in &post.sessions {
        let (p, n) = (
            prev.sessions.get(name),
            next.and_then(|n| n.sessions.get(name)),
        );
        if p.is_none() && n.is_none() {
            v.push(format!(
                "STATE: session {name} exists neither before nor after"
            ));
            continue;
        }
        if let Some(p) = p {
            if !s.steps.starts_with(&p.steps) {
                v.push(format!(
                    "LOST: {name}: acknowledged steps lost: had {:?}, now {:?}",
                    p.steps, s.steps
                ));
            }
        }
        // Beyond `prev`, only the steps of the command in flight: as `next` has them, or
        // recorded `opaque` by the repair of a tool call whose outcome is unknown.
        let from = p.map_or(0, |p| p.steps.len());
        for (i, step) in s.steps.iter().enumerate().skip(from) {
            let expected = n.and_then(|n| n.steps.get(i));
            if expected != Some(step) && !(expected.is_some() && step.1 == "opaque") {
                v.push(format!(
                    "STATE: {name}: step {step:?} is neither acknowledged nor the command in flight's ({expected:?})"
                ));
            }
        }
        let one_of = |what: &str, got: String, f: &dyn Fn(&SessionState) -> String| {
            let ok: Vec<String> = p.into_iter().chain(n).map(f).collect();
            (!ok.contains(&got)).then(|| format!("{name}: {what} is {got}, expected one of {ok:?}"))
        };
        v.extend(
            one_of("state", s.state.clone(), &|x| x.state.clone()).map(|m| format!("STATE: {m}")),
        );
        v.extend(
            one_of("held sends", format!("{:?}", s.queue), &|x| {
                format!("{:?}", x.queue)
            })
            .map(|m| format!("LOST: {m}")),
        );
        v.extend(
            one_of("pending approvals", format!("{:?}", s.pending), &|x| {
                format!("{:?}", x.pending)
            })
            .map(|m| format!("LOST: {m}")),
        );
        // Undone marks: each one as `prev` or as `next` has it (a repaired rewind finishes
        // what it can without crossing); what `next` undid and the repair did not is owed.
        let mark = |x: Option<&SessionState>, i: usize| x.and_then(|x| x.undone.get(i).copied());
        let (mut started, mut not_done) = (false, 0);
        for (i, &u) in s.undone.iter().enumerate() {
            let a = mark(p, i).unwrap_or(false);
            let b = mark(n, i).unwrap_or(a);
            if u != a && u != b {
                v.push(format!(
                    "STATE: {name}: step {i} undone={u}, neither as acknowledged ({a}) nor as in flight ({b}): {:?}",
                    s.undone
                ));
            }
            started |= u != a;
            not_done += usize::from(b && !u && a != b);
        }
        if started && not_done > s.owed + s.failed {
            v.push(format!(
                "STATE: {name}: the repaired rewind left {not_done} inverse(s) unrun but owes {} and lists {} failed: undone {:?}, in flight {:?}",
                s.owed,
                s.failed,
                s.undone,
                n.map(|n| &n.undone)
            ));
        }
        for k in COUNTED {
            let got = s.counts[k];
            let lo = p.map_or(0, |p| p.counts[k]);
            let hi = n.or(p).map_or(0, |n| n.counts[k]);
            if got < lo {
                v.push(format!(
                    "LOST: {name}: {got} `{k}` record(s) in the WAL, {lo} acknowledged"
                ));
            } else if got > hi {
                v.push(format!(
                    "STATE: {name}: {got} `{k}` record(s) in the WAL, at most {hi} expected"
                ));
            }
        }
        if s.owed > 0 && n.is_none() {
            v.push(format!(
                "STATE: {name}: {} owed with nothing in flight",
                s.owed
            ));
        }
    }
    for (dir, snap) in &post.dirs {
        let ok: Vec<Option<&Option<Snapshot>>> = std::iter::once(prev)
            .chain(next)
            .map(|st| st.dirs.get(dir))
            .collect();
        if !ok.contains(&Some(snap)) {
            let show = |s: Option<&Option<Snapshot>>| match s {
                Some(Some(s)) => s.clone(),
                _ => Snapshot::new(),
            };
            let found = snap.clone().unwrap_or_default();
            let mut d = format!(
                "WORKSPACE: {dir} is neither its tree after the last acknowledged command nor after the one in flight\n  vs acknowledged:\n{}",
                common::diff(&show(prev.dirs.get(dir)), &found)
            );
            if let Some(n) = next {
                d.push_str(&format!(
                    "  vs in flight:\n{}",
                    common::diff(&show(n.dirs.get(dir)), &found)
                ));
            }
            v.push(d);
        }
    }
    let paths: BTreeSet<&String> = post
        .sent
        .keys()
        .chain(prev.sent.keys())
        .chain(next.iter().flat_map(|n| n.sent.keys()))
        .collect();
    for path in paths {
        let got = post.sent.get(path).copied().unwrap_or(0);
        let lo = prev.sent.get(path).copied().unwrap_or(0);
        let hi = next.unwrap_or(prev).sent.get(path).copied().unwrap_or(0);
        if got < lo || got > hi {
            v.push(format!(
                "SENT: {path}: the sink received {got}, expected {lo}..={hi} (twice, or too early)"
            ));
        }
    }
}

/// The records of a WAL; lines that do not parse (a torn tail) skipped.
fn wal_records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

// ---- the driver ----

type Scenario = fn(&mut Ctx) -> Option<()>;

/// A cut point: `(n, i, m)`, the n-th request of the armed part, the i-th of m of its
/// command.
type CutPoint = (u64, u64, u64);

/// How many cut points: every request, or a stride plus seeded random points.
enum Sample {
    Every,
    Some { stride: u64, random: usize },
}

/// `REVL_POWER_CUT_ONLY=N[,M…]`: just these cut points (to reproduce one), each followed
/// by a dump of the WALs after the repair.
fn only() -> Option<Vec<u64>> {
    std::env::var("REVL_POWER_CUT_ONLY")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
}

fn points(total: u64, sample: &Sample, seed: u64) -> Vec<u64> {
    if let Some(v) = only() {
        return v;
    }
    let all = std::env::var("REVL_POWER_CUT_ALL").is_ok_and(|v| v == "1");
    let mut out = BTreeSet::new();
    match sample {
        _ if all => out.extend(1..=total),
        Sample::Every => out.extend(1..=total),
        Sample::Some { stride, random } => {
            out.extend((1..=total).step_by(*stride as usize));
            out.insert(total);
            let mut x = seed | 1;
            for _ in 0..*random {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                out.insert(1 + x % total);
            }
        }
    }
    out.into_iter().collect()
}

fn seed() -> u64 {
    std::env::var("REVL_POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0018)
}

/// Run `scenario` once without a cut, then once per cut point; fail with every violation.
fn drive(label: &str, dirs: &[&str], scenario: Scenario, sample: Sample) {
    let t0 = Instant::now();
    let mut reference = Ctx::new(None, dirs);
    let finished = scenario(&mut reference).is_some();
    assert!(
        finished && reference.failure.is_none(),
        "{label}: the reference run failed: {:?}",
        reference.failure
    );
    let r = Reference {
        states: std::mem::take(&mut reference.states),
        ranges: std::mem::take(&mut reference.ranges),
        total: reference.cum,
    };
    drop(reference);
    let seed = seed();
    let pts = points(r.total, &sample, seed);
    let (mut cuts, mut uncut) = (0usize, 0usize);
    let mut states = BTreeSet::new();
    // (command in flight, message) -> [(cut point, its request in that command)]
    let mut violations: BTreeMap<(String, String), Vec<CutPoint>> = BTreeMap::new();
    // category -> cut points with a violation of it
    let mut by_category: BTreeMap<&str, usize> = BTreeMap::new();
    let mut bad = 0usize;
    for &n in &pts {
        let mut ctx = Ctx::new(Some(n), dirs);
        let _ = scenario(&mut ctx);
        let (cmd, i, m) = r.locate(n);
        let found = if let Some(f) = &ctx.failure {
            vec![ctx.named(f)]
        } else if !ctx.cut {
            uncut += 1;
            continue;
        } else {
            cuts += 1;
            ctx.rig.remount();
            let (v, post) = ctx.check(&r);
            states.insert(format!("{post:?}"));
            if only().is_some() {
                ctx.dump(n);
            }
            v.iter().map(|m| ctx.named(m)).collect()
        };
        bad += usize::from(!found.is_empty());
        for cat in CATEGORIES {
            if found.iter().any(|m| m.starts_with(&format!("{cat}:"))) {
                *by_category.entry(cat).or_default() += 1;
            }
        }
        let inflight = ctx.inflight.clone().unwrap_or_else(|| cmd.clone());
        for msg in found {
            violations
                .entry((inflight.clone(), msg))
                .or_default()
                .push((n, i, m));
        }
    }
    let count = |c: &str| by_category.get(c).copied().unwrap_or(0);
    let others: Vec<String> = by_category
        .iter()
        .filter(|(c, _)| !matches!(**c, "LOST" | "SENT"))
        .map(|(c, k)| format!("{k} {}", c.to_lowercase()))
        .collect();
    let line = format!(
        "power_cut {label}: {cuts} cut points (of {} requests; {} sampled, {uncut} not reached), {} distinct states, {} lost, {} duplicated or early{}, {bad} cut point(s) with violations, {:.1}s (seed {seed})",
        r.total,
        pts.len(),
        states.len(),
        count("LOST"),
        count("SENT"),
        if others.is_empty() { String::new() } else { format!(", {}", others.join(", ")) },
        t0.elapsed().as_secs_f64()
    );
    println!("{line}");
    eprintln!("{line}");
    if !violations.is_empty() {
        let mut groups: Vec<_> = violations.into_iter().collect();
        groups.sort_by_key(|(_, at)| at[0].0);
        let mut report = String::new();
        for ((cmd, msg), at) in &groups {
            let pts: Vec<String> = at
                .iter()
                .map(|(n, i, m)| format!("{n} (request {i}/{m})"))
                .collect();
            report.push_str(&format!(
                "\n--- in flight `{cmd}`, {} cut point(s): {}\n{msg}\n",
                at.len(),
                pts.join(", ")
            ));
        }
        panic!("{line}\n{report}");
    }
}

// ---- scenarios ----

/// Bigger than the 4 KiB of an inline preimage and of an in-place overwrite.
fn big(c: char) -> String {
    std::iter::repeat_n(c, 6000).collect()
}

/// The first command of a store: `new` makes the store, then one write.
fn fresh_store(c: &mut Ctx) -> Option<()> {
    c.arm()?;
    c.new_session("S", "ws")?;
    c.write("S", "a.txt", "one")?;
    Some(())
}

/// In an existing store: `new`, then every kind of file effect, a provision and a boundary.
fn writes(c: &mut Ctx) -> Option<()> {
    c.ok(&["sessions"])?; // makes the store
    std::fs::create_dir(c.rig.root.join("ws")).unwrap();
    c.arm()?;
    c.new_session("S", "ws")?;
    c.write("S", "a.txt", "one")?; // a new file: staged and renamed
    c.write("S", "a.txt", "two")?; // a small overwrite: in place
    c.write("S", "big.bin", &big('x'))?;
    c.write("S", "big.bin", &big('y'))?; // its preimage goes to a blob
    let s = c.id("S");
    c.ok(&["mkdir", &s, "d"])?;
    c.ok(&["rename", &s, "a.txt", "d/a.txt"])?;
    c.ok(&["chmod", &s, "d/a.txt", "600"])?;
    c.ok(&["provide", &s, "KEY", "v1"])?;
    c.ok(&["boundary", &s, "--label", "t1"])?;
    c.ok(&["delete", &s, "d"])?;
    Some(())
}

/// Step-back over file effects and held sends, twice.
fn step_back(c: &mut Ctx) -> Option<()> {
    c.new_session("S", "ws")?;
    c.write("S", "a.txt", "one")?; // 1
    let s = c.id("S");
    c.ok(&["boundary", &s, "--label", "t1"])?; // 2
    c.write("S", "a.txt", "two")?; // 3
    c.write("S", "big.bin", &big('b'))?; // 4
    c.call("S", "send_email", r#"{"n":1}"#)?; // held after 4
    c.arm()?;
    c.ok(&["step-back", &s, "--to", "2"])?;
    c.write("S", "c.txt", "three")?;
    c.call("S", "send_email", r#"{"n":2}"#)?;
    c.ok(&["step-back", &s, "--to", "0"])?;
    c.write("S", "a.txt", "four")?;
    Some(())
}

/// A serial fork, then a fork of the branch at its hinge.
fn fork_serial(c: &mut Ctx) -> Option<()> {
    c.new_session("S", "ws")?;
    c.write("S", "a.txt", "one")?; // 1
    let s = c.id("S");
    c.ok(&["boundary", &s, "--label", "t1"])?; // 2
    c.write("S", "a.txt", "two")?; // 3
    c.write("S", "big.bin", &big('f'))?; // 4
    c.call("S", "send_email", r#"{"n":1}"#)?;
    c.arm()?;
    c.fork("S", "2", None, "B")?;
    c.write("B", "a.txt", "branch")?;
    c.fork("B", "-1", None, "B2")?;
    c.write("B2", "b.txt", "again")?;
    Some(())
}

/// Parallel forks into their own workspaces, then writes on every side.
fn fork_parallel(c: &mut Ctx) -> Option<()> {
    c.new_session("S", "ws")?;
    c.write("S", "a.txt", "one")?; // 1
    let s = c.id("S");
    c.ok(&["boundary", &s, "--label", "t1"])?; // 2
    c.write("S", "a.txt", "two")?; // 3
    c.call("S", "send_email", r#"{"n":1}"#)?;
    c.arm()?;
    c.fork("S", "2", Some("sib1"), "B1")?;
    c.fork("S", "2", Some("sib2"), "B2")?;
    c.write("B1", "a.txt", "sibling one")?;
    c.write("S", "a.txt", "parent")?;
    c.call("B2", "send_email", r#"{"n":2}"#)?;
    Some(())
}

/// Held sends, an approval requested and granted (a ticket, then standing), emissions, and
/// the commit that fires the held sends.
fn commit(c: &mut Ctx) -> Option<()> {
    c.new_session("S", "ws")?;
    c.write("S", "a.txt", "one")?;
    c.arm()?;
    let s = c.id("S");
    c.call("S", "send_email", r#"{"n":1}"#)?;
    c.call("S", "send_email", r#"{"n":2}"#)?;
    let req = c.run(1, &["call", &s, "post_status", "--args", r#"{"t":1}"#])?;
    let ticket = req["ticket"].as_str().expect("a ticket").to_string();
    c.ok(&["approve", &s, "--ticket", &ticket])?;
    c.call("S", "post_status", r#"{"t":1}"#)?;
    c.ok(&["approve", &s, "--tool", "post_status"])?;
    c.call("S", "post_status", r#"{"t":2}"#)?;
    c.call("S", "send_email", r#"{"n":3}"#)?;
    c.commit("S")?;
    Some(())
}

/// An emission with a compensation, file effects and a held send, then an abort (which
/// drops the send and runs every inverse, the compensation included).
fn abort(c: &mut Ctx) -> Option<()> {
    c.new_session("S", "ws")?;
    c.write("S", "a.txt", "one")?;
    c.arm()?;
    let s = c.id("S");
    c.call("S", "create_ticket", r#"{"title":"t"}"#)?;
    c.write("S", "b.txt", &big('a'))?;
    c.call("S", "send_email", r#"{"n":1}"#)?;
    c.ok(&["abort", &s])?;
    Some(())
}

/// Everything in one session tree, for random cut points.
fn mixed(c: &mut Ctx) -> Option<()> {
    c.ok(&["sessions"])?; // makes the store
    std::fs::create_dir(c.rig.root.join("ws")).unwrap();
    c.arm()?;
    c.new_session("S", "ws")?;
    let s = c.id("S");
    c.write("S", "a.txt", "one")?; // 1
    c.write("S", "big.bin", &big('m'))?; // 2
    c.ok(&["boundary", &s, "--label", "t1"])?; // 3
    c.call("S", "send_email", r#"{"n":1}"#)?;
    let req = c.run(1, &["call", &s, "post_status", "--args", r#"{"t":1}"#])?;
    let ticket = req["ticket"].as_str().expect("a ticket").to_string();
    c.ok(&["approve", &s, "--ticket", &ticket])?;
    c.call("S", "post_status", r#"{"t":1}"#)?; // 4
    c.write("S", "a.txt", "two")?; // 5
    c.ok(&["step-back", &s, "--to", "3"])?;
    c.write("S", "c.txt", "three")?; // 6
    c.call("S", "send_email", r#"{"n":2}"#)?;
    c.fork("S", "3", Some("sib1"), "B1")?;
    c.write("B1", "a.txt", "sibling")?;
    c.call("B1", "send_email", r#"{"n":3}"#)?;
    c.call("S", "create_ticket", r#"{"title":"t"}"#)?;
    c.commit("B1")?;
    c.fork("S", "1", None, "B2")?;
    c.write("B2", "big.bin", &big('n'))?;
    c.ok(&["abort", &c.id("B2")])?;
    Some(())
}

/// The commit ring (docs/wal-format.md, "The commit ring"): in a session that stays open, a
/// durable append is a synced chunk of `wal.ring` and the WAL itself is synced only when the
/// ring is full, so a power cut between two calls takes from the WAL what it held past its
/// last sync. The CLI scenarios above rarely leave that window open (a command's first
/// durable append syncs the WAL, and what a chunk held last is mostly an outcome repair can
/// redo); here the library writes 4 KiB in place 60 times, in six attachments, with a power
/// cut after each ten (the ring fills and starts over about every twenty): after every
/// remount each write whose call returned is in the session, in order, with its bytes.
#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_between_library_calls_loses_no_acknowledged_write() {
    use revl_core::{Failpoints, FileOp, Store};
    let mut rig = Rig::new();
    let store = rig.root.join("store");
    // Only the store is on the disk that loses power: the workspace keeps every write.
    let ws = rig.off.join("lib-ws");
    std::fs::create_dir_all(&ws).unwrap();
    let open = |p: &Path| Store::open(p, Failpoints::none()).expect("the store opens");
    let id = open(&store)
        .new_session(&ws, None)
        .unwrap()
        .id()
        .to_string();
    rig.disk.sync_all();
    let content = |n: u32| -> Vec<u8> {
        let mut c = vec![b'a' + (n % 26) as u8; 4096];
        c[..4].copy_from_slice(&n.to_le_bytes());
        c
    };
    let mut acknowledged = Vec::new();
    for round in 0..6u32 {
        let st = open(&store);
        let mut s = st.attach(&id).unwrap();
        for i in 0..10 {
            let n = round * 10 + i;
            let done = s
                .file_effect(FileOp::Write {
                    path: "f.bin".into(),
                    content: content(n),
                })
                .unwrap();
            acknowledged.push((done.step, n));
        }
        drop(s);
        drop(st);
        rig.remount();
        let st = open(&store);
        let s = st
            .attach(&id)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let steps = &s.state().steps;
        for (step, n) in &acknowledged {
            let got = steps.get(*step as usize).map(|s| s.label().to_string());
            assert_eq!(
                got.as_deref(),
                Some("fs.write f.bin"),
                "round {round}: the write of step {step} was acknowledged and is lost ({} steps)",
                steps.len()
            );
            let read = s
                .read_at("f.bin", *step as i64)
                .unwrap_or_else(|e| panic!("round {round}: read --at {step}: {e}"));
            assert_eq!(
                read.digest,
                blake3::hash(&content(*n)).to_hex().to_string(),
                "round {round}: step {step} reads back its bytes"
            );
        }
        assert_eq!(steps.len() as u64, acknowledged.last().unwrap().0 + 1);
    }
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_new_session_in_a_fresh_store() {
    drive("fresh-store", &["ws"], fresh_store, Sample::Every);
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_file_effects() {
    drive("writes", &["ws"], writes, Sample::Every);
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_step_back() {
    drive("step-back", &["ws"], step_back, Sample::Every);
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_fork_serial() {
    drive("fork-serial", &["ws"], fork_serial, Sample::Every);
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_fork_parallel() {
    drive(
        "fork-parallel",
        &["ws", "sib1", "sib2"],
        fork_parallel,
        Sample::Every,
    );
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_commit_with_held_sends_and_approvals() {
    drive("commit", &["ws"], commit, Sample::Every);
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_abort() {
    drive("abort", &["ws"], abort, Sample::Every);
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_random_points_in_a_mixed_session_tree() {
    drive(
        "mixed",
        &["ws", "sib1"],
        mixed,
        Sample::Some {
            stride: 9,
            random: 40,
        },
    );
}
