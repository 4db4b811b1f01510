//! One classifier, three readers: over random histories of all seven kinds and every kind of
//! scope, the live fork report, a live `step-back --scoped` and the offline `branch --at` put
//! every step in the same bucket, and all three equal an oracle written here, independently,
//! from the table of docs/reference.md, "Step kinds and buckets". Where the live fork
//! refuses, its refusal is among the offline findings.

use proptest::prelude::*;
use revl_core::lineage;
use revl_core::wal::{create_wal, Record, StepRecord};
use revl_core::{Failpoints, Store};
use serde_json::{json, Value};

/// Scopes as declared, including the tricky ones.
fn scopes() -> Vec<Option<Value>> {
    vec![
        None,
        Some(json!({"caps": []})),
        Some(json!({"caps": ["fs"]})),
        Some(json!({"caps": ["fs", "fs"]})),
        Some(json!({"caps": ["net"]})),
        Some(json!({"caps": ["fs", "net"]})),
        Some(json!({"caps": ["FS"]})),
        Some(json!({"caps": ["blorp"]})),
        Some(json!({"confined": true})),
        Some(json!({"sandbox": true})),
        Some(json!({})),
        Some(json!({"caps": ["net"], "confined": true})),
        Some(json!({"caps": ["fs"], "confined": false})),
        Some(json!({"caps": "fs"})),
    ]
}

/// The oracle's gate, written from the rules of docs/reference.md, "The scope gate", in order.
fn oracle_confined(scope: &Option<Value>) -> bool {
    let Some(Value::Object(m)) = scope else {
        return false;
    };
    if m.get("confined") == Some(&json!(true)) || m.get("sandbox") == Some(&json!(true)) {
        return true;
    }
    match m.get("caps") {
        Some(Value::Array(a)) if a.is_empty() => true,
        Some(Value::Array(a)) => a.iter().all(|t| t == "fs"),
        _ => false,
    }
}

#[derive(Debug, Clone)]
enum Gen {
    FileEffect {
        scope: usize,
    },
    ToolEffect {
        scope: usize,
        undo_scope: usize,
        idem: Option<bool>,
    },
    Provision,
    Emission {
        compensated: bool,
        scope: usize,
    },
    Boundary,
    Opaque,
}

fn gen_step() -> impl Strategy<Value = Gen> {
    let n = scopes().len();
    prop_oneof![
        3 => (0..n).prop_map(|scope| Gen::FileEffect { scope }),
        3 => (0..n, 0..n, prop_oneof![Just(None), Just(Some(true)), Just(Some(false))]).prop_map(|(scope, undo_scope, idem)| Gen::ToolEffect { scope, undo_scope, idem }),
        2 => Just(Gen::Provision),
        2 => (any::<bool>(), 0..n).prop_map(|(compensated, scope)| Gen::Emission { compensated, scope }),
        1 => Just(Gen::Boundary),
        1 => Just(Gen::Opaque),
    ]
}

#[derive(Debug, Default, PartialEq, Clone)]
struct Buckets {
    inverses: Vec<u64>,
    provisions: Vec<u64>,
    crossed: Vec<u64>,
    compensated: Vec<u64>,
    would_cross: Vec<u64>,
    unrestored: Vec<u64>,
}

fn idx(v: &Value) -> Vec<u64> {
    v.as_array()
        .map(|a| a.iter().map(|e| e["index"].as_u64().unwrap()).collect())
        .unwrap_or_default()
}

/// (kind, scope, undo scope, undoIdempotent, builtin) per step.
type ModelStep = (String, Option<Value>, Option<Value>, Option<bool>, bool);

const MANIFEST: &str = r#"
[[tool]]
name = "u"
class = "inverse"
scope = []
run = ["true"]

[[tool]]
name = "c"
class = "inverse"
scope = ["net"]
run = ["true"]
"#;

struct Built {
    _tmp: tempfile::TempDir,
    store: Store,
    id: String,
    wal: std::path::PathBuf,
    /// (kind, scope, undo scope, undoIdempotent, builtin) per step, for the oracle.
    model: Vec<ModelStep>,
}

fn build(history: &[Gen]) -> Built {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&tmp.path().join("store"), Failpoints::none()).unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mpath = tmp.path().join("m.toml");
    std::fs::write(&mpath, MANIFEST).unwrap();
    let digest = store.import_manifest(Some(&mpath), &ws).unwrap();
    let id = format!("{:032x}", 0xabcdef_u64);
    std::fs::create_dir_all(store.session_dir(&id)).unwrap();
    let sc = scopes();
    let mut recs = vec![Record::Header {
        wal_version: 1,
        seq: 0,
        session: id.clone(),
        workspace: std::fs::canonicalize(&ws).unwrap().display().to_string(),
        manifest_digest: digest,
        created_by: "test".into(),
        guarantee: "g".into(),
        ts: None,
    }];
    let mut model = Vec::new();
    let push = |recs: &mut Vec<Record>,
                model: &mut Vec<_>,
                kind: &str,
                detail: Value,
                scope: Option<Value>,
                undo_scope: Option<Value>,
                undo: Option<Value>,
                idem: Option<bool>,
                comp: Option<u64>| {
        let step = model.len() as u64;
        let builtin = undo
            .as_ref()
            .is_some_and(|u: &Value| u["type"] == "restore");
        let mut rec = StepRecord::new(
            step + 1,
            step,
            kind.into(),
            &format!("{kind}-{step}"),
            "gen",
            &detail,
        )
        .unwrap();
        rec.set_scope(scope.as_ref()).unwrap();
        rec.set_undo_scope(undo_scope.as_ref()).unwrap();
        rec.set_undo(undo.as_ref()).unwrap();
        rec.undo_idempotent = idem;
        rec.compensation = comp;
        recs.push(Record::Step(rec));
        model.push((kind.to_string(), scope, undo_scope, idem, builtin));
    };
    push(
        &mut recs,
        &mut model,
        "hinge",
        json!({}),
        None,
        None,
        None,
        None,
        None,
    );
    for g in history {
        let i = model.len();
        match g {
            Gen::FileEffect { scope } => push(
                &mut recs,
                &mut model,
                "effect",
                json!({"path": format!("f{i}")}),
                sc[*scope].clone(),
                None,
                Some(
                    json!({"type": "restore", "entries": [{"path": format!("f{i}"), "kind": "absent"}]}),
                ),
                Some(true),
                None,
            ),
            Gen::ToolEffect {
                scope,
                undo_scope,
                idem,
            } => push(
                &mut recs,
                &mut model,
                "effect",
                json!({"tool": "t", "args": {}, "witness": null}),
                sc[*scope].clone(),
                sc[*undo_scope].clone(),
                Some(json!({"type": "tool", "tool": "u"})),
                *idem,
                None,
            ),
            Gen::Provision => push(
                &mut recs,
                &mut model,
                "provision",
                json!({"key": "k", "value": format!("v{i}"), "previous": null}),
                None,
                None,
                Some(json!({"type": "withdraw"})),
                Some(true),
                None,
            ),
            Gen::Emission { compensated, scope } => {
                push(
                    &mut recs,
                    &mut model,
                    "emission",
                    json!({"key": format!("{id}-{i}"), "service": "s", "method": "m", "args": {}}),
                    sc[*scope].clone(),
                    None,
                    None,
                    None,
                    compensated.then_some(i as u64 + 1),
                );
                if *compensated {
                    push(
                        &mut recs,
                        &mut model,
                        "compensation",
                        json!({"for": i, "tool": "c", "args": {}}),
                        Some(json!({"caps": ["net"]})),
                        None,
                        None,
                        None,
                        None,
                    );
                }
            }
            Gen::Boundary => push(
                &mut recs,
                &mut model,
                "boundary",
                json!({}),
                None,
                None,
                None,
                None,
                None,
            ),
            Gen::Opaque => push(
                &mut recs,
                &mut model,
                "opaque",
                json!({"repr": "exec [\"true\"] (exit 0)"}),
                None,
                None,
                None,
                None,
                None,
            ),
        }
    }
    let wal = store.wal_path(&id);
    create_wal(&wal, &recs, &Failpoints::none()).unwrap();
    Built {
        _tmp: tmp,
        store,
        id,
        wal,
        model,
    }
}

/// The last column of docs/reference.md, "Step kinds and buckets", newest first.
fn oracle(model: &[ModelStep], k: i64) -> Buckets {
    let mut b = Buckets::default();
    for (i, (kind, scope, undo_scope, _, builtin)) in model.iter().enumerate().rev() {
        if (i as i64) <= k {
            break;
        }
        let i = i as u64;
        match kind.as_str() {
            "effect" => {
                if oracle_confined(scope) && (*builtin || oracle_confined(undo_scope)) {
                    b.inverses.push(i)
                } else {
                    b.would_cross.push(i)
                }
            }
            "provision" => b.provisions.push(i),
            "emission" => {
                if model
                    .get(i as usize + 1)
                    .is_some_and(|m| m.0 == "compensation")
                {
                    b.compensated.push(i)
                } else {
                    b.crossed.push(i)
                }
            }
            "compensation" => b.would_cross.push(i),
            "opaque" => b.unrestored.push(i),
            _ => {}
        }
    }
    b
}

fn from_doc(d: &Value, inv: &str, prov: &str) -> Buckets {
    let pick = |v: &Value| idx(v);
    Buckets {
        inverses: pick(&d[inv]),
        provisions: pick(&d[prov]),
        crossed: pick(&d["emissionsCrossed"]),
        compensated: pick(&d["emissionsCompensated"]),
        would_cross: pick(&d["wouldCrossOnRewind"]),
        unrestored: pick(&d["unrestored"]),
    }
}

fn check(history: Vec<Gen>, kpick: usize) {
    let b = build(&history);
    let head = b.model.len() as i64 - 1;
    let k = (kpick as i64 % (head + 2)) - 1; // -1..=head
    let want = oracle(&b.model, k);

    // Offline, from the WAL alone (before anything live touches it).
    let off = lineage::open(&b.wal).unwrap().partition(k).unwrap();
    let offline = from_doc(&off, "wouldRewind", "wouldWithdraw");
    assert_eq!(
        offline, want,
        "offline partition vs oracle at k={k}: {history:?}"
    );
    let findings: Vec<&str> = off["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["finding"].as_str().unwrap())
        .collect();

    // Live fork enumeration.
    let mut s = b.store.attach(&b.id).unwrap();
    match s.fork(k).map(|r| revl_core::report::to_json(&r)) {
        Ok(report) => {
            let mut live = from_doc(&report["rewound"], "inversesRan", "provisionsWithdrawn");
            let rest = from_doc(&report, "x", "y");
            (
                live.crossed,
                live.compensated,
                live.would_cross,
                live.unrestored,
            ) = (
                rest.crossed,
                rest.compensated,
                rest.would_cross,
                rest.unrestored,
            );
            assert_eq!(
                live, want,
                "live fork report vs oracle at k={k}: {history:?}"
            );
            assert_eq!(
                off["forkable"], true,
                "offline says not forkable where the live fork enumerated: {findings:?}"
            );
        }
        Err(e) => {
            let finding = match e.code.as_str() {
                "KIND_OPAQUE" => "opaque-tail",
                "non-idempotent" => "non-idempotent-span",
                other => panic!("unexpected refusal {other}: {}", e.message),
            };
            assert!(
                findings.contains(&finding),
                "live refused {finding} but offline findings are {findings:?}"
            );
            assert_eq!(off["forkable"], false);
        }
    }
    // Live scoped step-back (never refuses over residue).
    let sb = revl_core::report::to_json(&s.step_back(k, revl_core::StepBackMode::Scoped).unwrap());
    let stepped = from_doc(&sb, "inversesRan", "provisionsWithdrawn");
    assert_eq!(
        stepped, want,
        "step-back --scoped vs oracle at k={k}: {history:?}"
    );
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn live_fork_step_back_and_offline_agree_with_the_oracle(history in prop::collection::vec(gen_step(), 0..10), kpick in 0usize..64) {
        check(history, kpick);
    }
}

#[test]
fn compensation_of_emission_at_k_itself_would_cross_with_its_for() {
    let b = build(&[Gen::Emission {
        compensated: true,
        scope: 4,
    }]);
    let off = lineage::open(&b.wal).unwrap().partition(1).unwrap();
    let wc = off["wouldCrossOnRewind"].as_array().unwrap();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0]["index"].as_u64(), wc[0]["for"].as_u64()),
        (Some(2), Some(1))
    );
    assert!(wc[0]["why"].as_str().unwrap().contains("compensation"));
}

#[test]
fn absent_scope_is_never_offered_as_rewindable() {
    let b = build(&[
        Gen::FileEffect { scope: 0 },
        Gen::ToolEffect {
            scope: 1,
            undo_scope: 0,
            idem: Some(true),
        },
    ]);
    let off = lineage::open(&b.wal).unwrap().partition(0).unwrap();
    assert!(off["wouldRewind"].as_array().unwrap().is_empty());
    let whys: Vec<&str> = off["wouldCrossOnRewind"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["why"].as_str().unwrap())
        .collect();
    assert!(whys.iter().all(|w| w.contains("absent scope")), "{whys:?}");
    assert!(off["readerNote"].as_str().unwrap().contains("absent"));
}
