//! The crash tests in process (docs/architecture.md, "Storage traits and their guarantees"):
//! a session's verbs run with one storage operation made to fail, tear or stop
//! (`revl_core::faults::Faulty`), at every operation a clean run makes; then the store is
//! opened again as a new process opens it, and every session must attach (repairing what
//! the fault interrupted), show no drift, and still rewind to its first step.

use revl_core::faults::{Fault, Faulty};
use revl_core::session::StepBackMode;
use revl_core::state::Life;
use revl_core::{Failpoints, FileOp, Store};
use std::path::Path;

fn write(path: &str, content: &[u8]) -> FileOp {
    FileOp::Write {
        path: path.into(),
        content: content.to_vec(),
    }
}

/// Effects small and large (a blob), a directory, a boundary, overwrites, a delete, a
/// rename, a step-back, an exec (its output kept as a blob), a serial fork and a write on
/// the branch.
fn scenario(store: &Store, ws: &Path) -> revl_core::Result<()> {
    let big: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 251) as u8).collect();
    let mut s = store.new_session(ws, None)?;
    s.file_effect(write("a.txt", b"one"))?;
    s.file_effect(FileOp::Mkdir { path: "dir".into() })?;
    s.file_effect(write("dir/b.bin", &big))?;
    s.boundary(Some("k"))?;
    s.file_effect(write("a.txt", b"two"))?;
    s.file_effect(write("dir/b.bin", b"small now"))?;
    s.file_effect(FileOp::Delete { path: "dir".into() })?;
    s.file_effect(FileOp::Rename {
        from: "a.txt".into(),
        to: "c.txt".into(),
    })?;
    s.step_back(4, StepBackMode::Scoped)?;
    s.file_effect(write("d.txt", &big[..5000]))?;
    // An exec whose output is kept as a blob (past what its intent keeps inline).
    let argv: Vec<String> = ["sh", "-c", "seq 1 3000 > out.txt"]
        .map(String::from)
        .to_vec();
    s.exec_with(&revl_core::ExecOptions::new(&argv))?;
    let enumerated = s.fork(4)?;
    let hash = enumerated.hash.expect("an enumeration has a hash");
    let forked = s.fork_confirm(&hash)?;
    drop(s);
    let branch = forked.branch.expect("a confirmed fork names its branch");
    let mut b = store.attach(&branch)?;
    b.file_effect(write("e.txt", b"on the branch"))?;
    Ok(())
}

fn open(root: &Path) -> Store {
    Store::open(root, Failpoints::none()).expect("the store opens")
}

/// After the run: every session attaches (repairing), a live one shows no drift and
/// rewinds to step 0 without a missing preimage, and shows no drift after.
fn check(root: &Path, what: &str) {
    let store = open(root);
    let mut live = 0;
    for id in store.session_ids().unwrap() {
        let mut s = store
            .attach(&id)
            .unwrap_or_else(|e| panic!("{what}: session {id} does not attach: {e}"));
        if s.state().life() != Life::Live {
            continue;
        }
        live += 1;
        let drift = s.verify().unwrap().drift;
        assert!(drift.is_empty(), "{what}: drift after repair: {drift:?}");
        let back = s
            .step_back(0, StepBackMode::Scoped)
            .unwrap_or_else(|e| panic!("{what}: session {id} cannot rewind: {e}"));
        assert!(back.failed.is_empty(), "{what}: {:?}", back.failed);
        let drift = s.verify().unwrap().drift;
        assert!(
            drift.is_empty(),
            "{what}: drift after the rewind: {drift:?}"
        );
        // What was written after the repair reads back: the same records, as a new
        // process reads them.
        let records = s.record_count();
        drop(s);
        let again = open(root)
            .attach_read(&id)
            .unwrap_or_else(|e| panic!("{what}: session {id} does not read back: {e}"));
        assert_eq!(again.record_count(), records, "{what}");
        assert!(again.repairs().is_empty(), "{what}: {:?}", again.repairs());
    }
    assert!(
        live <= 1,
        "{what}: {live} live sessions share one workspace"
    );
}

fn run(at: u64, fault: Fault) -> (tempfile::TempDir, Faulty, revl_core::Result<()>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let plain = open(&root);
    let faulty = Faulty::new(plain.storage().clone(), at, fault);
    let store = plain.with_storage(faulty.storage());
    let r = scenario(&store, &tmp.path().join("ws"));
    (tmp, faulty, r)
}

#[test]
fn a_fault_at_any_storage_operation_leaves_a_store_that_repairs_and_rewinds() {
    let (tmp, clean, r) = run(0, Fault::Stop);
    r.expect("the run without a fault succeeds");
    check(&tmp.path().join("store"), "no fault");
    let n = clean.operations();
    let log = clean.log();
    assert!(n > 20, "the scenario makes {n} storage operations: {log:?}");
    for kind in [
        "create",
        "open",
        "append",
        "sync",
        "put",
        "put-file",
        "sync blobs",
    ] {
        assert!(
            log.iter().any(|l| l.starts_with(kind)),
            "no {kind} operation in {log:?}"
        );
    }
    // Each run has a store of its own: they go four at a time (fsyncs, not the CPU, are
    // what they wait for).
    let runs: Vec<(u64, Fault)> = (1..=n)
        .flat_map(|at| [Fault::Fail, Fault::Tear, Fault::Stop].map(|f| (at, f)))
        .collect();
    std::thread::scope(|scope| {
        for part in runs.chunks(runs.len().div_ceil(4)) {
            let log = &log;
            scope.spawn(move || {
                for &(at, fault) in part {
                    let what = format!("{fault:?} at operation {at} ({})", log[at as usize - 1]);
                    let (tmp, faulty, r) = run(at, fault);
                    // The fault reached the verb that met it: it failed, and said so in
                    // one line.
                    let e = r.expect_err(&what);
                    assert!(!e.message.contains('\n'), "{what}: {}", e.message);
                    if fault != Fault::Fail {
                        assert!(faulty.stopped(), "{what}");
                    }
                    check(&tmp.path().join("store"), &what);
                }
            });
        }
    });
}
