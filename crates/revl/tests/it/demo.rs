//! `revl demo` is the README's first command: it must run and tell the truth.

#[test]
fn demo_runs_the_whole_story() {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_revl"))
        .args(["demo", "--json"])
        .env("HOME", tmp.path())
        .env_remove("REVL_STORE")
        .env_remove("REVL_FAILPOINT")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], true);
    // One irreversible status post during the session, one email at the branch's commit.
    assert_eq!(doc["sinkReceived"], 2);
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_revl"))
        .arg("demo")
        .env("HOME", tmp.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("CROSSED (cannot be undone)") && text.contains("demo ok"),
        "{text}"
    );
}
