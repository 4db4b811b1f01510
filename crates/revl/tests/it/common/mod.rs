//! Test harness shared by the integration tests: run the built `revl` binary against a
//! private temporary store with a cleaned environment, and snapshot directory trees for
//! byte-for-byte, mode-for-mode comparison.
#![allow(dead_code)]

pub mod env;
pub mod fake_model;
pub mod manifest;

use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The revl binary under test: this build's, or `$REVL_TEST_BIN` (to replay a test
/// against an older build and see it fail before a fix).
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("REVL_TEST_BIN")
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_revl").to_string())
    })
}

/// The revl binary in a clean environment (only `PATH`, `HOME` and `LC_ALL=C`), run in
/// `cwd` with no stdin: every test run of the binary starts here.
pub fn clean_command(home: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("HOME", home)
        .env("LC_ALL", "C")
        .current_dir(cwd)
        .stdin(Stdio::null());
    cmd
}

/// Where temporary trees go: `$REVL_TEST_TMP`, else `/dev/shm` when it is a writable tmpfs
/// (fsyncs are cheap there, which keeps the suite fast), else the system temp dir.
pub fn tmp_base() -> PathBuf {
    static BASE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        if let Some(p) = std::env::var_os("REVL_TEST_TMP").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let shm = Path::new("/dev/shm");
        if shm.is_dir() && tempfile::tempdir_in(shm).is_ok() {
            return shm.to_path_buf();
        }
        std::env::temp_dir()
    })
    .clone()
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("revl-test-")
        .tempdir_in(tmp_base())
        .expect("create a temp dir")
}

/// What one run of the binary produced.
#[derive(Debug, Clone)]
pub struct Out {
    /// The exit code; `None` when the process was killed by a signal.
    pub code: Option<i32>,
    /// The signal that ended the process, if any.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// stdout parsed as one JSON document (only when `--json` was passed and it parsed).
    pub json: Option<Value>,
    /// The command line, for messages.
    pub cmdline: String,
}

impl Out {
    /// The parsed JSON document; panics (with the run's output) if there is none.
    pub fn doc(&self) -> &Value {
        self.json
            .as_ref()
            .unwrap_or_else(|| panic!("no JSON document from {}\n{}", self.cmdline, self.dump()))
    }

    pub fn dump(&self) -> String {
        format!(
            "$ {}\nexit {:?} signal {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.cmdline, self.code, self.signal, self.stdout, self.stderr
        )
    }

    /// Assert exit 0 and return the JSON document.
    #[track_caller]
    pub fn ok(&self) -> &Value {
        assert_eq!(self.code, Some(0), "expected success\n{}", self.dump());
        self.doc()
    }

    /// Assert a failure with the error document (docs/reference.md, "Errors and exit
    /// codes"): `exit`, `code`, a JSON document of exactly `{"error": {code, message,
    /// hint}}` on stdout, and one line on stderr. Returns the message.
    #[track_caller]
    pub fn err(&self, exit: i32, code: &str) -> String {
        assert_eq!(
            self.code,
            Some(exit),
            "expected exit {exit} ({code})\n{}",
            self.dump()
        );
        let doc = self.doc();
        let obj = doc
            .as_object()
            .unwrap_or_else(|| panic!("error document is not an object\n{}", self.dump()));
        assert_eq!(
            obj.keys().collect::<Vec<_>>(),
            vec!["error"],
            "error document has other members\n{}",
            self.dump()
        );
        let e = doc["error"]
            .as_object()
            .unwrap_or_else(|| panic!("`error` is not an object\n{}", self.dump()));
        let mut keys: Vec<&str> = e.keys().map(String::as_str).collect();
        keys.retain(|k| *k != "step");
        keys.sort_unstable();
        assert_eq!(
            keys,
            vec!["code", "hint", "message"],
            "error members\n{}",
            self.dump()
        );
        assert_eq!(e["code"], code, "error code\n{}", self.dump());
        let message = e["message"].as_str().unwrap_or_default().to_string();
        assert!(!message.trim().is_empty(), "empty message\n{}", self.dump());
        assert!(
            !e["hint"].as_str().unwrap_or_default().trim().is_empty(),
            "empty hint\n{}",
            self.dump()
        );
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "stderr must be exactly one line\n{}",
            self.dump()
        );
        assert!(
            lines[0].contains(&message),
            "stderr line does not carry the message\n{}",
            self.dump()
        );
        assert!(
            !self.stderr.contains("panicked") && !self.stderr.contains("RUST_BACKTRACE"),
            "panic output\n{}",
            self.dump()
        );
        message
    }

    /// True when the process died abnormally (a signal, e.g. SIGABRT from a failpoint).
    pub fn died(&self) -> bool {
        self.code.is_none() && self.signal.is_some()
    }
}

/// A private world for one test: a temp root holding the store, HOME, and workspaces.
pub struct World {
    pub dir: tempfile::TempDir,
    pub store: PathBuf,
    pub home: PathBuf,
}

/// A test's layered branch workspaces (docs/architecture.md, "Layered workspaces") are
/// mounts under its temp root: they are unmounted (lazily, deepest first) before the root is
/// deleted, so no test leaves a mount behind.
impl Drop for World {
    fn drop(&mut self) {
        unmount_under(self.dir.path());
    }
}

/// Unmount every mount under `root` (`/proc/self/mountinfo`'s mount points, octal escapes
/// decoded), deepest first.
pub fn unmount_under(root: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let unescape = |s: &str| {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\' && i + 3 < b.len() {
                if let Ok(n) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                    out.push(n);
                    i += 4;
                    continue;
                }
            }
            out.push(b[i]);
            i += 1;
        }
        PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(out))
    };
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape)
        .filter(|p| p.starts_with(root) && p != root)
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        let _ = Command::new("umount").arg("-l").arg(&p).output();
        let _ = Command::new("fusermount3").arg("-uz").arg(&p).output();
    }
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

impl World {
    pub fn new() -> World {
        Self::new_in(&tmp_base())
    }

    /// A world under `base` (a test that writes gigabytes wants a disk, not the RAM-backed
    /// default of [`tmp_base`]).
    pub fn new_in(base: &Path) -> World {
        let dir = tempfile::Builder::new()
            .prefix("revl-test-")
            .tempdir_in(base)
            .expect("create a temp dir");
        let store = dir.path().join("store");
        let home = dir.path().join("home");
        fs::create_dir_all(&home).unwrap();
        World { dir, store, home }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A path under the temp root (not created).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The canonical workspace path `<root>/<name>`, created.
    pub fn ws(&self, name: &str) -> PathBuf {
        let p = self.path(name);
        fs::create_dir_all(&p).unwrap();
        fs::canonicalize(&p).unwrap()
    }

    fn command(&self, args: &[&str], envs: &[(&str, &str)], with_store: bool) -> (Command, String) {
        let mut cmd = clean_command(&self.home, self.dir.path());
        if with_store {
            cmd.arg("--store").arg(&self.store);
        }
        cmd.args(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let cmdline = format!(
            "{}revl {}{}",
            envs.iter()
                .map(|(k, v)| format!("{k}={v} "))
                .collect::<String>(),
            if with_store {
                format!("--store {} ", self.store.display())
            } else {
                String::new()
            },
            args.join(" ")
        );
        (cmd, cmdline)
    }

    /// The command for `revl ARGS…` in this world's clean environment, not run (to spawn
    /// one in the background); no `--store` is added.
    pub fn command_for(&self, args: &[&str]) -> Command {
        self.command(args, &[], false).0
    }

    /// Run `revl --store STORE ARGS…` (no `--json` added).
    pub fn run(&self, args: &[&str]) -> Out {
        self.run_env(args, &[])
    }

    /// Run with `--json` added before the command and parse stdout.
    pub fn json(&self, args: &[&str]) -> Out {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        self.run_env(&a, &[])
    }

    /// Run with `--json` and extra environment variables.
    pub fn json_env(&self, args: &[&str], envs: &[(&str, &str)]) -> Out {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        self.run_env(&a, envs)
    }

    pub fn run_env(&self, args: &[&str], envs: &[(&str, &str)]) -> Out {
        self.spawn(args, envs, true)
    }

    /// Run without adding `--store` (the caller passes its own, or none: then the store
    /// comes from the cleaned environment, i.e. under the temp HOME, plus `envs`).
    pub fn run_raw(&self, args: &[&str], envs: &[(&str, &str)]) -> Out {
        self.spawn(args, envs, false)
    }

    fn spawn(&self, args: &[&str], envs: &[(&str, &str)], with_store: bool) -> Out {
        let (mut cmd, cmdline) = self.command(args, envs, with_store);
        let out = cmd.output().expect("spawn revl");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let wants_json = args
            .iter()
            .take_while(|a| **a != "--")
            .any(|a| *a == "--json");
        let json = if wants_json && !stdout.trim().is_empty() {
            serde_json::from_str::<Value>(&stdout).ok()
        } else {
            None
        };
        if wants_json && out.status.code().is_some() {
            assert!(json.is_some(), "with --json, stdout must be exactly one JSON document\n$ {cmdline}\n{stdout}\n{stderr}");
        }
        Out {
            code: out.status.code(),
            signal: out.status.signal(),
            stdout,
            stderr,
            json,
            cmdline,
        }
    }

    /// `new --workspace WS` → the session id.
    pub fn new_session(&self, ws: &Path) -> String {
        self.new_session_args(&["--workspace", ws.to_str().unwrap()])
    }

    /// `new --workspace WS --manifest M` → the session id.
    pub fn new_session_with(&self, ws: &Path, manifest: &Path) -> String {
        let (ws, m) = (ws.to_str().unwrap(), manifest.to_str().unwrap());
        self.new_session_args(&["--workspace", ws, "--manifest", m])
    }

    fn new_session_args(&self, args: &[&str]) -> String {
        let mut a = vec!["new"];
        a.extend_from_slice(args);
        let out = self.json(&a);
        let doc = out.ok();
        doc["session"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id\n{}", out.dump()))
            .to_string()
    }

    /// A fresh workspace `<root>/ws` and a session on it.
    pub fn session(&self) -> (String, PathBuf) {
        let ws = self.ws("ws");
        (self.new_session(&ws), ws)
    }

    pub fn wal(&self, id: &str) -> PathBuf {
        self.store.join("sessions").join(id).join("wal.jsonl")
    }

    pub fn timeline(&self, id: &str) -> Value {
        self.json(&["timeline", id]).ok().clone()
    }

    /// The session's head: its last live step (-1 after a step-back to the start).
    pub fn head(&self, id: &str) -> i64 {
        self.timeline(id)["head"].as_i64().expect("head")
    }

    /// The index the next step will take (one past the highest recorded).
    pub fn next_index(&self, id: &str) -> u64 {
        self.timeline(id)["steps"].as_array().expect("steps").len() as u64
    }
}

/// The kind of a tree entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

/// `relpath → (kind, mode, bytes | symlink target)`. Directories carry no bytes; symlinks
/// carry mode 0 (their mode is meaningless on Linux).
pub type Snapshot = BTreeMap<String, (Kind, u32, Vec<u8>)>;

/// Snapshot every entry under `root` (the root itself excluded), without following links.
pub fn snapshot(root: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    walk(root, "", &mut out);
    out
}

fn walk(dir: &Path, prefix: &str, out: &mut Snapshot) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let p = e.path();
        let m = fs::symlink_metadata(&p).unwrap();
        let mode = m.permissions().mode() & 0o7777;
        let ft = m.file_type();
        if ft.is_symlink() {
            let t = fs::read_link(&p).unwrap();
            out.insert(
                rel,
                (Kind::Symlink, 0, t.as_os_str().as_encoded_bytes().to_vec()),
            );
        } else if ft.is_dir() {
            out.insert(rel.clone(), (Kind::Dir, mode, Vec::new()));
            walk(&p, &rel, out);
        } else if ft.is_file() {
            out.insert(rel, (Kind::File, mode, fs::read(&p).unwrap()));
        } else {
            panic!("unexpected special file {}", p.display());
        }
    }
}

fn show(e: Option<&(Kind, u32, Vec<u8>)>) -> String {
    match e {
        None => "absent".into(),
        Some((k, m, b)) => {
            let shown: String = if b.len() > 40 {
                format!(
                    "{:?}… ({} bytes)",
                    String::from_utf8_lossy(&b[..40]),
                    b.len()
                )
            } else {
                format!("{:?}", String::from_utf8_lossy(b))
            };
            format!("{k:?} {m:04o} {shown}")
        }
    }
}

/// A readable description of how two snapshots differ ("" when equal).
pub fn diff(expected: &Snapshot, actual: &Snapshot) -> String {
    let mut out = String::new();
    let keys: std::collections::BTreeSet<&String> = expected.keys().chain(actual.keys()).collect();
    for k in keys {
        let (a, b) = (expected.get(k), actual.get(k));
        if a != b {
            out.push_str(&format!("  {k}: expected {}, found {}\n", show(a), show(b)));
        }
    }
    out
}

#[track_caller]
pub fn assert_snap_eq(expected: &Snapshot, actual: &Snapshot, what: &str) {
    let d = diff(expected, actual);
    assert!(d.is_empty(), "{what}: the trees differ:\n{d}");
}

/// Every `.revl-*.tmp` file under `root`.
pub fn temp_leftovers(root: &Path) -> Vec<String> {
    snapshot(root)
        .keys()
        .filter(|k| {
            let name = k.rsplit('/').next().unwrap_or(k);
            name.starts_with(".revl-") && name.ends_with(".tmp")
        })
        .cloned()
        .collect()
}

/// Set a mode.
pub fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// Write a file with a mode, creating parents.
pub fn put(p: &Path, bytes: &[u8], mode: u32) {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(p, bytes).unwrap();
    chmod(p, mode);
}

// ---- the WAL ----

/// The CRC member (docs/wal-format.md, "Lines"): CRC-32C of the line bytes before `,"crc"`,
/// 8 lowercase hex.
pub fn crc_hex(body: &[u8]) -> String {
    format!("{:08x}", crc32c::crc32c(body))
}

/// Close a record body (a JSON object text without its final `}`) into a WAL line.
pub fn seal(body: &str) -> String {
    format!("{body},\"crc\":\"{}\"}}\n", crc_hex(body.as_bytes()))
}

/// Check a whole WAL: every line ends with `,"crc":"hhhhhhhh"}` and a newline, the CRC is
/// right, and the line parses as JSON with a `record` member. Returns the parsed records.
#[track_caller]
pub fn check_wal(path: &Path) -> Vec<Value> {
    let bytes = fs::read(path).unwrap();
    assert!(
        bytes.ends_with(b"\n"),
        "WAL {} does not end with a newline",
        path.display()
    );
    let mut recs = Vec::new();
    for (i, line) in bytes[..bytes.len() - 1].split(|&b| b == b'\n').enumerate() {
        let text =
            std::str::from_utf8(line).unwrap_or_else(|_| panic!("WAL line {} is not UTF-8", i + 1));
        let at = text
            .rfind(",\"crc\":\"")
            .unwrap_or_else(|| panic!("WAL line {} has no crc member: {text}", i + 1));
        let suffix = &text[at..];
        assert_eq!(
            suffix.len(),
            18,
            "WAL line {} crc member shape: {suffix}",
            i + 1
        );
        assert!(
            suffix.ends_with("\"}"),
            "WAL line {} does not end with its crc member",
            i + 1
        );
        let hex = &suffix[8..16];
        assert!(
            hex.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')),
            "WAL line {} crc is not lowercase hex: {hex}",
            i + 1
        );
        assert_eq!(hex, crc_hex(&line[..at]), "WAL line {} crc mismatch", i + 1);
        let v: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("WAL line {} is not JSON ({e}): {text}", i + 1));
        assert!(
            v["record"].is_string(),
            "WAL line {} has no record member",
            i + 1
        );
        recs.push(v);
    }
    recs
}
