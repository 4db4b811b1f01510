//! The outbound, fork and lineage tests' view of the shared harness (`common`): an [`Env`]
//! with a store and a workspace path, and runs that return the exit code and the JSON
//! document. Running the binary and snapshotting trees live in `common` only.

use super as common;

#[allow(unused_imports)] // only the fork tests snapshot trees
pub use common::snapshot;
use serde_json::Value;
use std::path::{Path, PathBuf};

pub struct Env {
    /// The private temp root (HOME, the working directory of every run).
    pub world: common::World,
    pub store: PathBuf,
    pub ws: PathBuf,
    pub root: PathBuf,
}

pub fn env() -> Env {
    env_of(common::World::new())
}

/// An [`Env`] under `base`.
pub fn env_in(base: &Path) -> Env {
    env_of(common::World::new_in(base))
}

fn env_of(world: common::World) -> Env {
    Env {
        store: world.store.clone(),
        ws: world.path("ws"),
        root: world.root().to_path_buf(),
        world,
    }
}

pub struct Out {
    /// The exit code; -1 when the process was killed by a signal.
    pub code: i32,
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
}

pub fn revl_env(e: &Env, args: &[&str], json: bool, failpoint: Option<&str>) -> Out {
    let store = e.store.to_str().expect("a UTF-8 temp path");
    let mut a = vec!["--store", store];
    if json {
        a.push("--json");
    }
    a.extend_from_slice(args);
    let envs: Vec<(&str, &str)> = failpoint
        .map(|f| ("REVL_FAILPOINT", f))
        .into_iter()
        .collect();
    let o = e.world.run_raw(&a, &envs);
    Out {
        code: o.code.unwrap_or(-1),
        json: o.json.unwrap_or(Value::Null),
        stdout: o.stdout,
        stderr: o.stderr,
    }
}

pub fn revl(e: &Env, args: &[&str], failpoint: Option<&str>) -> Out {
    revl_env(e, args, true, failpoint)
}

pub fn ok(e: &Env, args: &[&str]) -> Value {
    let o = revl(e, args, None);
    assert_eq!(o.code, 0, "revl {args:?} failed: {} {}", o.json, o.stderr);
    o.json
}

/// `new --workspace <e.ws> --manifest M` → the new session's id.
pub fn new_session_with(e: &Env, manifest: &Path) -> String {
    let (ws, m) = (e.ws.to_str().unwrap(), manifest.to_str().unwrap());
    ok(e, &["new", "--workspace", ws, "--manifest", m])["session"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The paths the loopback sink received, in order.
pub fn paths(sink: &revl::sink::Sink) -> Vec<String> {
    sink.received().iter().map(|r| r.path.clone()).collect()
}

/// The records of a WAL, in order (lines that do not parse, such as a torn tail, skipped).
pub fn records(wal: &Path) -> Vec<Value> {
    std::fs::read_to_string(wal)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub fn write_script(path: &Path, body: &str) {
    common::put(path, body.as_bytes(), 0o755);
}
