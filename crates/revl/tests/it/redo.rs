//! The one-sync small write (SPEC 17): its intent carries the new bytes; after a power loss
//! (a new boot id) repair writes again what the file lost, and only that. The power-cut
//! harness (`power_cut.rs`) drops real unsynced writes; these tests stage the same states
//! by hand, through the binary, so each rule is checked on its own.

use crate::common::World;
use serde_json::Value;
use std::fs;

fn records(w: &World, sid: &str) -> Vec<Value> {
    fs::read_to_string(w.wal(sid))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_write_lost_to_a_power_cut_is_written_again_after_the_reboot_and_only_then() {
    let w = World::new();
    let (sid, ws) = w.session();
    w.json(&["write", &sid, "a.txt", "--content", "one"]).ok();
    let boot = [("REVL_BOOT_ID", "boot-1")];
    let ok = |args: &[&str]| w.json_env(args, &boot).ok().clone();
    ok(&["write", &sid, "a.txt", "--content", "two"]);
    ok(&["write", &sid, "b.txt", "--content", "bee"]);
    ok(&["write", &sid, "b.txt", "--content", "bee-2"]);
    // The in-place write's intent carries its bytes and the boot it was made in.
    let intents: Vec<Value> = records(&w, &sid)
        .into_iter()
        .filter(|r| r["record"] == "intent" && r.get("redo").is_some())
        .collect();
    assert_eq!(
        intents.len(),
        2,
        "a.txt's and b.txt's overwrites are in place"
    );
    assert_eq!(intents[0]["redo"]["boot"], "boot-1");
    // Same boot: what the page cache held is what the disk will hold. Put a.txt back by hand:
    // that is drift, never "a lost write".
    fs::write(ws.join("a.txt"), "one").unwrap();
    let v = w.json_env(&["verify", &sid], &boot);
    assert_eq!(v.code, Some(1), "{}", v.dump());
    assert_eq!(fs::read(ws.join("a.txt")).unwrap(), b"one");
    // A power cut lost both last writes: the files show their preimages, the machine booted
    // again. The next attach writes them again; b.txt's two writes replay in order.
    fs::write(ws.join("b.txt"), "bee").unwrap();
    let st = w.json_env(&["status", &sid], &[("REVL_BOOT_ID", "boot-2")]);
    assert_eq!(st.ok()["head"], 4);
    assert_eq!(fs::read(ws.join("a.txt")).unwrap(), b"two");
    assert_eq!(fs::read(ws.join("b.txt")).unwrap(), b"bee-2");
    let v = w.json_env(&["verify", &sid], &[("REVL_BOOT_ID", "boot-2")]);
    assert_eq!(v.code, Some(0), "{}", v.dump());
    let synced: Vec<Value> = records(&w, &sid)
        .into_iter()
        .filter(|r| r["record"] == "files-synced")
        .collect();
    assert_eq!(synced.len(), 1, "repair records that the files are durable");
    assert_eq!(synced[0]["through"], 4);
    // Recorded: a later boot does not look again (the hand edit after it is drift).
    fs::write(ws.join("a.txt"), "one").unwrap();
    w.json_env(&["status", &sid], &[("REVL_BOOT_ID", "boot-3")])
        .ok();
    assert_eq!(fs::read(ws.join("a.txt")).unwrap(), b"one");
}

#[test]
fn a_lost_write_is_not_redone_over_a_hand_edit_nor_over_a_later_step() {
    let w = World::new();
    let (sid, ws) = w.session();
    let b1 = [("REVL_BOOT_ID", "boot-1")];
    for (p, c) in [("a.txt", "a0"), ("b.txt", "b0"), ("c.txt", "c0")] {
        w.json_env(&["write", &sid, p, "--content", c], &b1).ok();
    }
    for (p, c) in [("a.txt", "a1"), ("b.txt", "b1"), ("c.txt", "c1")] {
        w.json_env(&["write", &sid, p, "--content", c], &b1).ok();
    }
    // b.txt is deleted and made again with its old bytes by later steps (durable): the file
    // shows the in-place write's preimage, yet that write must not come back over them.
    // c.txt shows bytes that are neither image: changed by hand, left as it is.
    w.json_env(&["delete", &sid, "b.txt"], &b1).ok();
    w.json_env(&["write", &sid, "b.txt", "--content", "b0"], &b1)
        .ok();
    fs::write(ws.join("a.txt"), "a0").unwrap();
    fs::write(ws.join("c.txt"), "typed by hand").unwrap();
    w.json_env(&["status", &sid], &[("REVL_BOOT_ID", "boot-2")])
        .ok();
    assert_eq!(
        fs::read(ws.join("a.txt")).unwrap(),
        b"a1",
        "the lost write is redone"
    );
    assert_eq!(
        fs::read(ws.join("b.txt")).unwrap(),
        b"b0",
        "later steps win"
    );
    assert_eq!(fs::read(ws.join("c.txt")).unwrap(), b"typed by hand");
}

/// The files of in-place writes are fsynced 32 at a time: then `files-synced` is recorded
/// and a later power loss no longer needs their bytes.
#[test]
fn in_place_writes_settle_in_batches() {
    let w = World::new();
    let (sid, _) = w.session();
    w.json(&["write", &sid, "f", "--content", "0"]).ok();
    for i in 1..=40 {
        w.json(&["write", &sid, "f", "--content", &i.to_string()])
            .ok();
    }
    let recs = records(&w, &sid);
    let synced: Vec<&Value> = recs
        .iter()
        .filter(|r| r["record"] == "files-synced")
        .collect();
    assert_eq!(synced.len(), 1, "one batch in 40 writes");
    assert_eq!(
        synced[0]["through"], 33,
        "the first 32 in-place writes: steps 2 to 33"
    );
    // A commit settles the rest before it commits.
    let plan = w.json(&["commit", &sid]).ok()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    w.json(&["commit-confirm", &sid, "--hash", &plan]).ok();
    let recs = records(&w, &sid);
    let last = recs
        .iter()
        .rev()
        .find(|r| r["record"] == "files-synced")
        .unwrap();
    assert_eq!(last["through"], 41);
}
