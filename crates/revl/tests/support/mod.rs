//! Shared harness for the outbound and fork tests: run the real binary on a temporary store.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Env {
    pub _tmp: tempfile::TempDir,
    pub store: PathBuf,
    pub ws: PathBuf,
    pub root: PathBuf,
}

pub fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    Env {
        store: root.join("store"),
        ws: root.join("ws"),
        root,
        _tmp: tmp,
    }
}

pub struct Out {
    pub code: i32,
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
}

pub fn revl_env(e: &Env, args: &[&str], json: bool, failpoint: Option<&str>) -> Out {
    let mut c = Command::new(env!("CARGO_BIN_EXE_revl"));
    c.arg("--store").arg(&e.store);
    if json {
        c.arg("--json");
    }
    c.args(args)
        .env_remove("REVL_FAILPOINT")
        .env_remove("REVL_STORE")
        .env_remove("REVL_LOCK_WAIT_MS");
    if let Some(f) = failpoint {
        c.env("REVL_FAILPOINT", f);
    }
    let o = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    Out {
        code: o.status.code().unwrap_or(-1),
        json: serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stdout,
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
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

/// Every entry below `dir`: relative path → (kind, mode, bytes or link target).
pub fn snapshot(dir: &Path) -> BTreeMap<String, (String, u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, (String, u32, Vec<u8>)>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mode = m.permissions().mode() & 0o7777;
            if m.file_type().is_symlink() {
                out.insert(
                    rel,
                    (
                        "symlink".into(),
                        0,
                        std::fs::read_link(&p)
                            .unwrap()
                            .into_os_string()
                            .into_encoded_bytes(),
                    ),
                );
            } else if m.is_dir() {
                out.insert(rel, ("dir".into(), mode, vec![]));
                walk(root, &p, out);
            } else {
                out.insert(rel, ("file".into(), mode, std::fs::read(&p).unwrap()));
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// The record names of a WAL, in order.
pub fn records(wal: &Path) -> Vec<Value> {
    std::fs::read_to_string(wal)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
