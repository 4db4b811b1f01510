//! Property: after any sequence of file effects, provisions and boundaries, `step-back --to k`
//! gives back exactly the tree (bytes, modes, kinds, absence) that stood right after step k,
//! and exactly the provisions active at k. Invalid operations may be refused (exit 2) and are
//! then simply not steps.
//!
//! The main property (500 cases by default, `PROPTEST_CASES` overrides) drives the library
//! directly; a smaller one drives the binary end to end.

use crate::common;

use common::*;
use proptest::prelude::*;
use proptest::sample::Index;
use revl_core::{Failpoints, FileOp, Session, StepBackMode, Store};
use serde_json::json;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// The small tree every case plays in: names in two levels of nested directories. The same
/// name may be a file in one case and a directory in another.
const PATHS: &[&str] = &[
    "a", "big", "d", "d/a", "d/c", "d/e", "d/e/f", "x", "x/y", "x/y/z",
];
const FILE_MODES: &[u32] = &[0o644, 0o600, 0o755, 0o444];
/// Directories always keep owner rwx so a non-root run can still work inside them.
const DIR_MODES: &[u32] = &[0o755, 0o700, 0o750, 0o711];

#[derive(Debug, Clone)]
enum Op {
    Write { path: usize, content: Vec<u8> },
    Delete { path: usize },
    Rename { from: usize, to: usize },
    Mkdir { path: usize },
    Chmod { path: usize, mode: usize },
    Provide { key: usize, value: u8 },
    Boundary,
}

fn content() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => Just(Vec::new()),
        3 => "[a-z ]{1,16}".prop_map(String::into_bytes),
        3 => proptest::collection::vec(any::<u8>(), 1..48),
        1 => (any::<u8>(), 4097usize..9000).prop_map(|(seed, n)| (0..n).map(|i| seed.wrapping_add((i * 7 + i / 251) as u8)).collect()),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..PATHS.len();
    prop_oneof![
        4 => (p.clone(), content()).prop_map(|(path, content)| Op::Write { path, content }),
        2 => p.clone().prop_map(|path| Op::Delete { path }),
        2 => (p.clone(), p.clone()).prop_map(|(from, to)| Op::Rename { from, to }),
        2 => p.clone().prop_map(|path| Op::Mkdir { path }),
        2 => (p, 0..FILE_MODES.len()).prop_map(|(path, mode)| Op::Chmod { path, mode }),
        1 => (0..2usize, any::<u8>()).prop_map(|(key, value)| Op::Provide { key, value }),
        1 => Just(Op::Boundary),
    ]
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The seed tree present before the session starts (so -1 is not trivially empty).
fn seed(ws: &Path) {
    put(&ws.join("a"), b"seed a", 0o644);
    put(
        &ws.join("big"),
        &(0..5000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>(),
        0o600,
    );
    put(&ws.join("d/c"), &[0xff, 0xfe, 0x00, 0x80], 0o600);
    fs::create_dir_all(ws.join("d/e")).unwrap();
    chmod(&ws.join("d"), 0o750);
}

fn chmod_mode(ws: &Path, path: &str, mode: usize) -> u32 {
    if ws.join(path).is_dir() {
        DIR_MODES[mode]
    } else {
        FILE_MODES[mode]
    }
}

type Provisions = BTreeMap<String, String>;

/// What a test remembers about each recorded step: the tree and provisions right after it.
struct Model {
    snaps: BTreeMap<i64, (Snapshot, Provisions)>,
    provisions: Provisions,
}

impl Model {
    fn new(ws: &Path) -> Model {
        let s = snapshot(ws);
        let mut snaps = BTreeMap::new();
        snaps.insert(-1, (s.clone(), Provisions::new()));
        snaps.insert(0, (s, Provisions::new()));
        Model {
            snaps,
            provisions: Provisions::new(),
        }
    }
}

// ---------------------------------------------------------------- through the library

fn lib_apply(
    s: &mut Session,
    ws: &Path,
    op: &Op,
    model: &mut Model,
    check_verify: bool,
) -> Result<Option<u64>, TestCaseError> {
    let head = s.state().head();
    let res = match op {
        Op::Write { path, content } => s.file_effect(FileOp::Write {
            path: PATHS[*path].into(),
            content: content.clone(),
        }),
        Op::Delete { path } => s.file_effect(FileOp::Delete {
            path: PATHS[*path].into(),
        }),
        Op::Rename { from, to } => s.file_effect(FileOp::Rename {
            from: PATHS[*from].into(),
            to: PATHS[*to].into(),
        }),
        Op::Mkdir { path } => s.file_effect(FileOp::Mkdir {
            path: PATHS[*path].into(),
        }),
        Op::Chmod { path, mode } => {
            let m = chmod_mode(ws, PATHS[*path], *mode);
            s.file_effect(FileOp::Chmod {
                path: PATHS[*path].into(),
                mode: m,
            })
        }
        Op::Provide { key, value } => s.provide(&format!("k{key}"), &format!("v{value}")),
        Op::Boundary => s.boundary(None),
    };
    match res {
        Ok(doc) => {
            let k = doc.step;
            prop_assert_eq!(k, head + 1, "{:?}: an effect takes head+1", op);
            prop_assert_eq!(s.state().head(), k);
            if let Op::Provide { key, value } = op {
                model
                    .provisions
                    .insert(format!("k{key}"), format!("v{value}"));
            }
            model
                .snaps
                .insert(k as i64, (snapshot(ws), model.provisions.clone()));
            if check_verify {
                let v = s
                    .verify()
                    .map_err(|e| TestCaseError::fail(format!("verify: {e}")))?;
                prop_assert!(
                    v.drift.is_empty(),
                    "drift right after {:?}: {:?}",
                    op,
                    v.drift
                );
            }
            Ok(Some(k))
        }
        Err(e) => {
            prop_assert_eq!(
                e.code.exit_code(),
                2,
                "{:?} failed with {} ({}), not a refusal",
                op,
                e.code.as_str(),
                e.message
            );
            prop_assert_eq!(s.state().head(), head, "a refused op is no step");
            Ok(None)
        }
    }
}

fn lib_step_back(
    s: &mut Session,
    ws: &Path,
    k: i64,
    model: &Model,
    check_verify: bool,
) -> Result<(), TestCaseError> {
    let rep = s.step_back(k, StepBackMode::Scoped).map_err(|e| {
        TestCaseError::fail(format!(
            "step-back --to {k}: {} {}",
            e.code.as_str(),
            e.message
        ))
    })?;
    prop_assert!(
        rep.failed.is_empty(),
        "step-back --to {}: {:?}",
        k,
        rep.failed
    );
    let (want, prov) = &model.snaps[&k];
    let d = diff(want, &snapshot(ws));
    prop_assert!(
        d.is_empty(),
        "after step-back --to {k} the tree differs from the one right after step {k}:\n{d}"
    );
    let status = s.status();
    prop_assert_eq!(
        &status.provisions,
        prov,
        "provisions after step-back --to {}",
        k
    );
    prop_assert!(
        temp_leftovers(ws).is_empty(),
        "temp files left: {:?}",
        temp_leftovers(ws)
    );
    if check_verify {
        let v = s
            .verify()
            .map_err(|e| TestCaseError::fail(format!("verify: {e}")))?;
        prop_assert!(
            v.drift.is_empty(),
            "drift right after step-back --to {}: {:?}",
            k,
            v.drift
        );
    }
    Ok(())
}

fn pick(candidates: &[i64], sel: &Index) -> i64 {
    candidates[sel.index(candidates.len())]
}

/// One case: ops, a step-back to a recorded k, more ops, a second step-back to a live step.
fn run_case(
    ops: &[Op],
    sel: &Index,
    reattach: bool,
    more: &[Op],
    sel2: &Index,
    check_verify: bool,
) -> Result<(), TestCaseError> {
    let dir = tempdir();
    let ws = dir.path().join("ws");
    fs::create_dir_all(&ws).unwrap();
    let ws = fs::canonicalize(&ws).unwrap();
    seed(&ws);
    let store = Store::open(&dir.path().join("store"), Failpoints::none()).unwrap();
    let mut s = store.new_session(&ws, None).unwrap();
    let mut model = Model::new(&ws);
    let mut recorded: Vec<i64> = vec![-1, 0];
    for op in ops {
        if let Some(k) = lib_apply(&mut s, &ws, op, &mut model, check_verify)? {
            recorded.push(k as i64);
        }
    }
    if reattach {
        // A fresh attach replays the WAL into the same timeline.
        let before = revl_core::report::to_json(&s.timeline());
        let id = s.id().to_string();
        drop(s);
        s = store.attach(&id).unwrap();
        prop_assert_eq!(before, revl_core::report::to_json(&s.timeline()));
    }
    let k = pick(&recorded, sel);
    lib_step_back(&mut s, &ws, k, &model, check_verify)?;
    model.provisions = model.snaps[&k].1.clone();

    // Go on after the rewind: new steps take fresh indices; then rewind again to a live
    // step (one at or below k, or a new one).
    let mut live: Vec<i64> = recorded.iter().copied().filter(|&i| i <= k).collect();
    let head_before = s.state().head();
    for op in more {
        if let Some(n) = lib_apply(&mut s, &ws, op, &mut model, check_verify)? {
            prop_assert!(n > head_before, "index {} reused", n);
            live.push(n as i64);
        }
    }
    let k2 = pick(&live, sel2);
    lib_step_back(&mut s, &ws, k2, &model, check_verify)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(500), ..ProptestConfig::default() })]

    #[test]
    fn step_back_restores_the_tree_of_step_k(
        ops in proptest::collection::vec(op(), 1..12),
        sel in any::<Index>(),
        reattach in any::<bool>(),
        more in proptest::collection::vec(op(), 0..4),
        sel2 in any::<Index>(),
    ) {
        run_case(&ops, &sel, reattach, &more, &sel2, false)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(500).min(100), ..ProptestConfig::default() })]

    /// `verify` must report no drift when only revl changed the workspace: right after every
    /// effect and right after every step-back.
    #[test]

    fn verify_sees_no_drift_when_only_revl_changed_the_tree(
        ops in proptest::collection::vec(op(), 1..12),
        sel in any::<Index>(),
        more in proptest::collection::vec(op(), 0..4),
        sel2 in any::<Index>(),
    ) {
        run_case(&ops, &sel, false, &more, &sel2, true)?;
    }
}

// ---------------------------------------------------------------- through the binary

fn bin_apply(
    w: &World,
    sid: &str,
    ws: &Path,
    op: &Op,
    model: &mut Model,
) -> Result<Option<u64>, TestCaseError> {
    let payload = w.path("payload.bin");
    let owned: Vec<String> = match op {
        Op::Write { path, content } => match std::str::from_utf8(content) {
            Ok(t) if !t.starts_with('-') && !t.contains('\0') => vec![
                "write".into(),
                sid.into(),
                PATHS[*path].into(),
                "--content".into(),
                t.into(),
            ],
            _ => {
                fs::write(&payload, content).unwrap();
                vec![
                    "write".into(),
                    sid.into(),
                    PATHS[*path].into(),
                    "--from".into(),
                    payload.to_str().unwrap().into(),
                ]
            }
        },
        Op::Delete { path } => vec!["delete".into(), sid.into(), PATHS[*path].into()],
        Op::Rename { from, to } => vec![
            "rename".into(),
            sid.into(),
            PATHS[*from].into(),
            PATHS[*to].into(),
        ],
        Op::Mkdir { path } => vec!["mkdir".into(), sid.into(), PATHS[*path].into()],
        Op::Chmod { path, mode } => vec![
            "chmod".into(),
            sid.into(),
            PATHS[*path].into(),
            format!("{:o}", chmod_mode(ws, PATHS[*path], *mode)),
        ],
        Op::Provide { key, value } => vec![
            "provide".into(),
            sid.into(),
            format!("k{key}"),
            format!("v{value}"),
        ],
        Op::Boundary => vec!["boundary".into(), sid.into()],
    };
    let args: Vec<&str> = owned.iter().map(String::as_str).collect();
    let head = w.head(sid);
    let next = w.next_index(sid);
    let out = w.json(&args);
    match out.code {
        Some(0) => {
            let k = out.doc()["step"].as_u64().expect("step");
            prop_assert_eq!(k, next, "{:?}", op);
            if let Op::Provide { key, value } = op {
                model
                    .provisions
                    .insert(format!("k{key}"), format!("v{value}"));
            }
            model
                .snaps
                .insert(k as i64, (snapshot(ws), model.provisions.clone()));
            Ok(Some(k))
        }
        Some(2) => {
            prop_assert!(out.doc()["error"]["code"].is_string(), "{}", out.dump());
            prop_assert_eq!(w.head(sid), head, "a refused op is no step");
            Ok(None)
        }
        _ => Err(TestCaseError::fail(format!(
            "{op:?}: not a success nor a refusal\n{}",
            out.dump()
        ))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(500).min(30), ..ProptestConfig::default() })]

    #[test]
    fn step_back_through_the_binary(
        ops in proptest::collection::vec(op(), 1..10),
        sel in any::<Index>(),
    ) {
        let w = World::new();
        let ws = w.ws("ws");
        seed(&ws);
        let sid = w.new_session(&ws);
        let mut model = Model::new(&ws);
        let mut recorded: Vec<i64> = vec![-1, 0];
        for op in &ops {
            if let Some(k) = bin_apply(&w, &sid, &ws, op, &mut model)? {
                recorded.push(k as i64);
            }
        }
        let k = pick(&recorded, &sel);
        let out = w.json(&["step-back", &sid, "--to", &k.to_string()]);
        prop_assert_eq!(out.code, Some(0), "{}", out.dump());
        prop_assert_eq!(&out.doc()["failed"], &json!([]));
        let (want, prov) = &model.snaps[&k];
        let d = diff(want, &snapshot(&ws));
        prop_assert!(d.is_empty(), "after step-back --to {k}:\n{d}");
        let status = w.json(&["status", &sid]).ok().clone();
        prop_assert_eq!(&status["provisions"], &serde_json::to_value(prov).unwrap());
        check_wal(&w.wal(&sid));
    }
}
