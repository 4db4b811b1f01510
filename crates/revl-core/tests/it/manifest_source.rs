//! Where a new session's manifest comes from (`ManifestSource`): `FileOrWorkspace` may read
//! the workspace's own `revl.toml` (the operator's `revl new`); `Fixed` never reads a file,
//! so a front end whose agent can write the workspace (`revl mcp`, docs/mcp.md) cannot be
//! handed tools by it.

use revl_core::session::ManifestSource;
use revl_core::{Failpoints, Store};

const AGENT_MANIFEST: &str = r#"
[[tool]]
name = "planted"
class = "opaque"
run = ["touch", "planted"]
"#;

const OPERATOR_MANIFEST: &str = r#"
[[tool]]
name = "greet"
class = "opaque"
run = ["true"]
"#;

fn setup() -> (tempfile::TempDir, Store, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&tmp.path().join("store"), Failpoints::none()).unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("revl.toml"), AGENT_MANIFEST).unwrap();
    (tmp, store, ws)
}

#[test]
fn file_or_workspace_reads_the_workspace_revl_toml() {
    let (_tmp, store, ws) = setup();
    let s = store
        .new_session_from(&ws, ManifestSource::FileOrWorkspace(None), &[])
        .unwrap();
    let names: Vec<String> = s
        .manifest()
        .unwrap()
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["planted"]);
}

#[test]
fn fixed_none_ignores_the_workspace_revl_toml() {
    let (_tmp, store, ws) = setup();
    let s = store
        .new_session_from(&ws, ManifestSource::Fixed(None), &[])
        .unwrap();
    assert_eq!(s.state().manifest_digest, None);
    assert!(s.manifest().unwrap().tools.is_empty());
}

#[test]
fn fixed_text_is_the_session_manifest_byte_for_byte() {
    let (_tmp, store, ws) = setup();
    let s = store
        .new_session_from(&ws, ManifestSource::Fixed(Some(OPERATOR_MANIFEST)), &[])
        .unwrap();
    let digest = s.state().manifest_digest.clone().expect("a manifest");
    assert_eq!(store.manifest_text(&digest).unwrap(), OPERATOR_MANIFEST);
    let names: Vec<String> = s
        .manifest()
        .unwrap()
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["greet"]);
}
