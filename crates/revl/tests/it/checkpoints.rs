//! Checkpoints bound to timeline positions (docs/langgraph.md): the `bind` record made through the
//! library (what `revl.langgraph` calls), seen through the `revl` binary: `revl log --json`
//! lists `checkpoints: [{position, checkpointId}]`, the text log and `revl view` show them,
//! a fork carries them in the old line's WAL, and `fork_preview` enumerates without
//! recording anything.

use crate::common::env as support;
use revl_core::{Failpoints, Store};
use serde_json::json;
use support::*;

fn store(e: &Env) -> Store {
    Store::open(&e.store, Failpoints::none()).unwrap()
}

#[test]
fn bound_checkpoints_show_in_log_and_view() {
    let e = env();
    let ws = e.ws.to_str().unwrap().to_string();
    let id = ok(&e, &["new", "--workspace", &ws])["session"]
        .as_str()
        .unwrap()
        .to_string();
    {
        let mut s = store(&e).attach(&id).unwrap();
        let b = s.bind("ckpt-before", None).unwrap();
        assert_eq!(b.position, 0);
    }
    ok(&e, &["write", &id, "a.txt", "--content", "one"]);
    ok(&e, &["write", &id, "b.txt", "--content", "two"]);
    {
        let mut s = store(&e).attach(&id).unwrap();
        assert_eq!(s.bind("ckpt-after", None).unwrap().position, 2);
        // A late checkpoint bound where it stood (LangGraph's async durability).
        assert_eq!(s.bind("ckpt-late", Some(1)).unwrap().position, 1);
        // Past the head, empty or with control characters: refused, nothing written.
        let n = s.record_count();
        assert!(s.bind("x", Some(3)).is_err());
        assert!(s.bind("", None).is_err());
        assert!(s.bind("a\nb", None).is_err());
        assert_eq!(s.record_count(), n);
    }
    let wal = e.store.join("sessions").join(&id).join("wal.jsonl");
    let binds: Vec<_> = records(&wal)
        .into_iter()
        .filter(|r| r["record"] == "bind")
        .map(|r| (r["label"].clone(), r["at"].clone()))
        .collect();
    assert_eq!(
        binds,
        vec![
            (json!("ckpt-before"), json!(0)),
            (json!("ckpt-after"), json!(2)),
            (json!("ckpt-late"), json!(1)),
        ]
    );
    let log = ok(&e, &["log"]);
    assert_eq!(
        log["sessions"][0]["checkpoints"],
        json!([
            {"position": 0, "checkpointId": "ckpt-before"},
            {"position": 2, "checkpointId": "ckpt-after"},
            {"position": 1, "checkpointId": "ckpt-late"},
        ])
    );
    let text = revl_env(&e, &["log"], false, None);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains("checkpoint ckpt-after at step 2"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("checkpoint ckpt-before at step 0"),
        "{}",
        text.stdout
    );
    let out = e.root.join("view.html");
    let v = revl_env(&e, &["view", "--out", out.to_str().unwrap()], false, None);
    assert_eq!(v.code, 0, "{}", v.stderr);
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains("checkpoint <code>ckpt-late</code>"));

    // A serial fork at 1: the old line keeps its checkpoints; binding on it is refused
    // (frozen); the branch takes new ones; the committed branch still binds.
    let hash = ok(&e, &["fork", &id, "--at", "1"])["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let branch = ok(&e, &["fork-confirm", &id, "--hash", &hash])["branch"]
        .as_str()
        .unwrap()
        .to_string();
    {
        let mut s = store(&e).attach(&id).unwrap();
        let err = s.bind("on-frozen", None).unwrap_err();
        assert_eq!(err.code, revl_core::Code::Frozen);
    }
    let plan = ok(&e, &["commit", &branch])["hash"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["commit-confirm", &branch, "--hash", &plan]);
    {
        let mut s = store(&e).attach(&branch).unwrap();
        assert_eq!(s.bind("after-commit", None).unwrap().position, 0);
    }
    let log = ok(&e, &["log"]);
    let by = |sid: &str| {
        log["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session"] == sid)
            .unwrap()
            .clone()
    };
    assert_eq!(by(&id)["state"], "frozen");
    assert_eq!(by(&id)["checkpoints"].as_array().unwrap().len(), 3);
    assert_eq!(
        by(&branch)["checkpoints"],
        json!([{"position": 0, "checkpointId": "after-commit"}])
    );
}

#[test]
fn fork_preview_records_nothing_and_matches_fork() {
    let e = env();
    let ws = e.ws.to_str().unwrap().to_string();
    let id = ok(&e, &["new", "--workspace", &ws])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["write", &id, "a.txt", "--content", "one"]);
    ok(&e, &["write", &id, "a.txt", "--content", "two"]);
    let wal = e.store.join("sessions").join(&id).join("wal.jsonl");
    let before = std::fs::read(&wal).unwrap();
    let preview = {
        let mut s = store(&e).attach(&id).unwrap();
        s.fork_preview(1).unwrap()
    };
    assert_eq!(
        std::fs::read(&wal).unwrap(),
        before,
        "a preview writes nothing"
    );
    assert_eq!(std::fs::read_to_string(e.ws.join("a.txt")).unwrap(), "two");
    let fork = ok(&e, &["fork", &id, "--at", "1"]);
    assert_eq!(
        fork["hash"],
        json!(preview.hash),
        "the preview's hash is fork's"
    );
    // No pending fork came from the preview: a confirm without `fork` would be refused.
    let e2 = env();
    let ws2 = e2.ws.to_str().unwrap().to_string();
    let id2 = ok(&e2, &["new", "--workspace", &ws2])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e2, &["write", &id2, "a.txt", "--content", "one"]);
    let h = {
        let mut s = store(&e2).attach(&id2).unwrap();
        s.fork_preview(0).unwrap().hash.unwrap()
    };
    let o = revl(&e2, &["fork-confirm", &id2, "--hash", &h], None);
    o_err(&o, "no-pending-fork");
}

fn o_err(o: &Out, code: &str) {
    assert_eq!(o.code, 1, "{} {}", o.json, o.stderr);
    assert_eq!(o.json["error"]["code"], code, "{}", o.json);
}

/// A front end's checkpoints kept in the store (docs/langgraph.md, "What is kept where"):
/// `checkpoint` records name blobs; `revl gc` keeps those not forgotten, on a committed
/// session too, and frees a forgotten one's; `revl log` shows a root checkpoint as it shows
/// a `bind`; a record naming a blob that is not a digest never reaches the WAL.
#[test]
fn checkpoint_records_keep_their_blobs_from_gc_until_forgotten() {
    use revl_core::session::CheckpointKey;
    let e = env();
    let ws = e.ws.to_str().unwrap().to_string();
    let id = ok(&e, &["new", "--workspace", &ws])["session"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&e, &["write", &id, "a.txt", "--content", "one"]);
    let key = |cid: &str, uses: Vec<String>| CheckpointKey {
        thread: "t".into(),
        ns: String::new(),
        id: cid.into(),
        parent: None,
        uses,
    };
    let (first, second) = {
        let mut s = store(&e).attach(&id).unwrap();
        let a = s.save_checkpoint(key("c1", vec![]), b"first state", true, None);
        let a = a.unwrap();
        assert_eq!(a.position, Some(1));
        let first = a.blob.unwrap();
        let b = s
            .save_checkpoint(key("c2", vec![first.clone()]), b"second", true, Some(0))
            .unwrap();
        s.save_checkpoint_writes("t", "", "c2", b"writes").unwrap();
        // Hostile members are refused before anything is written.
        let n = s.record_count();
        assert!(s
            .save_checkpoint(key("c3", vec!["not-a-digest".into()]), b"x", true, None)
            .is_err());
        assert!(s
            .save_checkpoint(key("c4", vec![]), b"x", true, Some(9))
            .is_err());
        assert_eq!(s.record_count(), n);
        (first, b.blob.unwrap())
    };
    let plan = ok(&e, &["commit", &id]);
    ok(
        &e,
        &[
            "commit-confirm",
            &id,
            "--hash",
            plan["hash"].as_str().unwrap(),
        ],
    );
    let log = ok(&e, &["log"]);
    assert_eq!(
        log["sessions"][0]["checkpoints"],
        json!([{"position": 1, "checkpointId": "c1"}, {"position": 0, "checkpointId": "c2"}])
    );
    let blob = |d: &str| e.store.join("blobs").join(&d[..2]).join(&d[2..]);
    ok(&e, &["gc", "--apply"]);
    assert!(blob(&first).is_file() && blob(&second).is_file());
    // c1 forgotten: c2 still uses its blob. Then the whole thread: both may go.
    {
        let mut s = store(&e).attach(&id).unwrap();
        s.forget_checkpoints("t", Some(""), vec!["c1".into()])
            .unwrap();
    }
    ok(&e, &["gc", "--apply"]);
    assert!(blob(&first).is_file() && blob(&second).is_file());
    {
        let mut s = store(&e).attach(&id).unwrap();
        s.forget_checkpoints("t", None, vec![]).unwrap();
    }
    let gc = ok(&e, &["gc", "--apply"]);
    assert!(gc["unreachable"].as_u64().unwrap() >= 3, "{gc}");
    assert!(!blob(&first).exists() && !blob(&second).exists());
    // The records stay (the WAL is never rewritten), and replay still reads them.
    let wal = e.store.join("sessions").join(&id).join("wal.jsonl");
    let kinds: Vec<_> = records(&wal)
        .into_iter()
        .filter_map(|r| r["record"].as_str().map(str::to_string))
        .filter(|k| k.starts_with("checkpoint"))
        .collect();
    assert_eq!(
        kinds,
        [
            "checkpoint",
            "checkpoint",
            "checkpoint-writes",
            "checkpoint-forget",
            "checkpoint-forget"
        ]
    );
    ok(&e, &["verify", &id]);
}
