//! A command's arguments through the library: one holding a NUL byte cannot reach a
//! program, so it is bad input (refused before anything runs or is recorded), not a
//! sandbox that cannot be set up.

use revl_core::{Code, Failpoints, Store};

#[test]
fn an_argument_with_a_nul_byte_is_bad_args_and_nothing_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&tmp.path().join("store"), Failpoints::none()).unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut s = store.new_session(&ws, None).unwrap();
    let head = s.state().head();
    let wal = std::fs::read(store.wal_path(s.id())).unwrap();
    let argv = [
        "sh".to_string(),
        "-c".to_string(),
        "echo x > ran\0".to_string(),
    ];
    let e = s.exec(&argv).unwrap_err();
    assert_eq!(e.code, Code::BadArgs, "{e:?}");
    assert!(
        e.message.contains("NUL") && e.message.contains("argument 2"),
        "{}",
        e.message
    );
    assert!(!ws.join("ran").exists(), "the command ran");
    assert_eq!(s.state().head(), head);
    assert_eq!(
        std::fs::read(store.wal_path(s.id())).unwrap(),
        wal,
        "something was recorded"
    );
}
