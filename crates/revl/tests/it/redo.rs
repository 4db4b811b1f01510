//! The one-sync small write (docs/wal-format.md, "Durability order"): its intent carries
//! the new bytes; after a power loss (a new boot id) repair writes again what the file
//! lost, and only that. The power-cut harness (`power_cut.rs`) drops real unsynced writes;
//! these tests stage the same states by hand, through the binary, so each rule is checked
//! on its own.

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

/// After a power loss a lost write comes back over whatever its file shows, unless a later
/// step touched the path: a file showing neither image (ext4 journals a size or mode change
/// apart from the bytes; or a person typed into it) is preserved first, as a rewind
/// preserves drift; a file a person removed is not made again.
#[test]
fn a_lost_write_is_redone_over_partial_or_hand_bytes_which_are_kept_never_over_a_later_step() {
    let w = World::new();
    let (sid, ws) = w.session();
    let b1 = [("REVL_BOOT_ID", "boot-1")];
    let files = ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt"];
    for p in files {
        w.json_env(&["write", &sid, p, "--content", &format!("{p} 0")], &b1)
            .ok();
    }
    for p in files {
        w.json_env(&["write", &sid, p, "--content", &format!("{p} 1")], &b1)
            .ok();
    }
    // b.txt is deleted and made again with its old bytes by later steps (durable): the file
    // shows the in-place write's preimage, yet that write must not come back over them.
    w.json_env(&["delete", &sid, "b.txt"], &b1).ok();
    w.json_env(&["write", &sid, "b.txt", "--content", "b.txt 0"], &b1)
        .ok();
    // What the power cut left: a.txt its preimage; c.txt bytes that are neither image;
    // d.txt its old bytes cut short (the truncate survived, the write did not); e.txt gone.
    fs::write(ws.join("a.txt"), "a.txt 0").unwrap();
    fs::write(ws.join("c.txt"), "typed by hand").unwrap();
    fs::write(ws.join("d.txt"), "d.t").unwrap();
    fs::remove_file(ws.join("e.txt")).unwrap();
    w.json_env(&["status", &sid], &[("REVL_BOOT_ID", "boot-2")])
        .ok();
    let read = |p: &str| String::from_utf8(fs::read(ws.join(p)).unwrap()).unwrap();
    assert_eq!(read("a.txt"), "a.txt 1", "the lost write is redone");
    assert_eq!(read("b.txt"), "b.txt 0", "later steps win");
    assert_eq!(
        read("c.txt"),
        "c.txt 1",
        "redone over bytes of neither image"
    );
    assert_eq!(read("d.txt"), "d.txt 1", "redone over a partial write");
    assert!(
        !ws.join("e.txt").exists(),
        "a removed file is not made again"
    );
    // The bytes of neither image are preserved, recorded, and in the blob store.
    let kept: Vec<(String, String)> = records(&w, &sid)
        .into_iter()
        .filter(|r| r["record"] == "preserved")
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_string(),
                r["digest"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let paths: Vec<&str> = kept.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["c.txt", "d.txt"], "{kept:?}");
    let blob = |d: &str| fs::read(w.store.join("blobs").join(&d[..2]).join(&d[2..])).unwrap();
    assert_eq!(blob(&kept[0].1), b"typed by hand");
    assert_eq!(blob(&kept[1].1), b"d.t");
    // verify: only the removed file differs from the log.
    let v = w.json_env(&["verify", &sid], &[("REVL_BOOT_ID", "boot-2")]);
    assert_eq!(v.code, Some(1), "{}", v.dump());
    let drift: Vec<&str> = v.doc()["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(drift, ["e.txt"], "{}", v.dump());
}

/// A lost write to a file with another hard link is redone by rename, as it was first made:
/// never through the link, which may lead outside the workspace.
#[test]
fn a_lost_write_to_a_hard_linked_file_is_redone_by_rename_never_through_the_link() {
    let w = World::new();
    let (sid, ws) = w.session();
    let b1 = [("REVL_BOOT_ID", "boot-1")];
    w.json_env(&["write", &sid, "f.txt", "--content", "zero"], &b1)
        .ok();
    w.json_env(&["write", &sid, "f.txt", "--content", "one"], &b1)
        .ok();
    // The power cut lost the write, and a link to the file appeared outside the workspace
    // (made while the session was idle).
    fs::write(ws.join("f.txt"), "zero").unwrap();
    let outside = w.path("outside-link");
    fs::hard_link(ws.join("f.txt"), &outside).unwrap();
    w.json_env(&["status", &sid], &[("REVL_BOOT_ID", "boot-2")])
        .ok();
    assert_eq!(fs::read(ws.join("f.txt")).unwrap(), b"one");
    assert_eq!(
        fs::read(&outside).unwrap(),
        b"zero",
        "the link is untouched"
    );
    assert!(
        crate::common::temp_leftovers(&ws).is_empty(),
        "{:?}",
        crate::common::temp_leftovers(&ws)
    );
}

/// A fork's `walPosition` counts the parent's records before its `fork-begin`, also when
/// the fork first settles in-place writes (a `files-synced` goes out before it).
#[test]
fn a_fork_wal_position_counts_the_files_synced_it_wrote_first() {
    let w = World::new();
    let (sid, _) = w.session();
    w.json(&["write", &sid, "f", "--content", "0"]).ok();
    w.json(&["write", &sid, "f", "--content", "1"]).ok();
    let plan = w.json(&["fork", &sid, "--at", "0"]).ok().clone();
    let hash = plan["hash"].as_str().unwrap();
    let done = w.json(&["fork-confirm", &sid, "--hash", hash]).ok().clone();
    let recs = records(&w, &sid);
    let begin = recs
        .iter()
        .position(|r| r["record"] == "fork-begin")
        .unwrap();
    assert_eq!(recs[begin - 1]["record"], "files-synced", "{recs:?}");
    assert_eq!(done["lineage"]["preserved"]["walPosition"], begin, "{done}");
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

/// A command may move, copy or link a file: the in-place writes not yet fsynced in their
/// files are made durable (and `files-synced` recorded) before it runs, so their bytes never
/// travel to a path repair does not know.
#[test]
fn in_place_writes_settle_before_a_command_runs() {
    let w = World::new();
    let (sid, ws) = w.session();
    w.json(&["write", &sid, "f", "--content", "0"]).ok();
    w.json(&["write", &sid, "f", "--content", "1"]).ok();
    w.json(&["exec", &sid, "--unconfined", "--", "mv", "f", "g"])
        .ok();
    assert_eq!(fs::read(ws.join("g")).unwrap(), b"1");
    let recs = records(&w, &sid);
    let exec = recs
        .iter()
        .position(|r| r["record"] == "intent" && r["site"] == "exec")
        .unwrap();
    let synced = recs
        .iter()
        .position(|r| r["record"] == "files-synced")
        .unwrap_or_else(|| panic!("no files-synced: {recs:?}"));
    assert!(synced < exec, "{recs:?}");
    assert_eq!(recs[synced]["through"], 2);
}
