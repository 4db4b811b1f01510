//! The WAL's robustness policy (issue 23), through the `revl` binary: a WAL corrupt in the
//! middle shows its intact records and can be cut back to them without losing a byte (and
//! `new` never starts a second session beside it); a CRC-correct record this revl does not
//! know is a newer revl's, never a torn tail; the journal never writes a record replay would
//! reject; a branch finds its parent by id in the store it lives in, or says it cannot.

use crate::common::*;
use serde_json::Value;
use std::fs;
use std::path::Path;

/// An effect through the binary, asserted to succeed.
fn ok(w: &World, args: &[&str]) -> Value {
    w.json(args).ok().clone()
}

/// The byte offsets where each line of `bytes` starts.
fn line_starts(bytes: &[u8]) -> Vec<usize> {
    std::iter::once(0)
        .chain(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .filter(|&i| i < bytes.len())
        .collect()
}

/// The 1-based number of the first line of `bytes` that contains every one of `needles`.
fn line_with(bytes: &[u8], needles: &[&str]) -> usize {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .position(|l| needles.iter().all(|n| l.contains(n)))
        .unwrap_or_else(|| panic!("no line with {needles:?} in\n{text}"))
        + 1
}

/// Finding 14: one flipped byte in a middle line. Reads show the intact records, marked;
/// writes refuse and write nothing; `new` refuses a second session on the workspace; and
/// `recover --truncate-corrupt` keeps the intact records and moves the rest aside (every
/// byte kept), after which the session reads and writes again.
#[test]
fn a_corrupt_middle_line_shows_the_prefix_blocks_new_and_is_cut_back_without_loss() {
    let w = World::new();
    let (sid, ws) = w.session();
    ok(&w, &["write", &sid, "a", "--content", "1"]);
    ok(&w, &["write", &sid, "b", "--content", "2"]);
    ok(&w, &["provide", &sid, "k", "v"]);
    let wal = w.wal(&sid);
    let mut bytes = fs::read(&wal).unwrap();
    // The intent of the second write: flip one byte of its label.
    let n = line_with(&bytes, &["\"record\":\"intent\"", "fs.write b"]);
    let start = line_starts(&bytes)[n - 1];
    let at = start
        + bytes[start..]
            .windows(10)
            .position(|x| x == b"fs.write b")
            .unwrap();
    bytes[at] ^= 0x20;
    fs::write(&wal, &bytes).unwrap();
    let wal_s = wal.to_str().unwrap();

    // status and timeline: the intact records (the first write: head 1), marked.
    let st = ok(&w, &["status", &sid]);
    assert_eq!(st["head"], 1, "{st}");
    assert_eq!(st["corrupt"]["line"], n, "{st}");
    assert_eq!(st["corrupt"]["path"], wal_s, "{st}");
    assert!(
        st["corrupt"]["why"].as_str().unwrap().contains("CRC"),
        "{st}"
    );
    let tl = ok(&w, &["timeline", &sid]);
    assert_eq!(tl["steps"].as_array().unwrap().len(), 2, "{tl}");
    assert_eq!(tl["corrupt"]["line"], n, "{tl}");
    let text = w.run(&["status", &sid]);
    assert_eq!(text.code, Some(0), "{}", text.dump());
    for want in [
        "CORRUPT WAL".to_string(),
        format!("from line {n} on are unreadable"),
        format!("revl recover {sid} --truncate-corrupt"),
    ] {
        assert!(text.stdout.contains(&want), "{want:?}\n{}", text.dump());
    }
    let text = w.run(&["timeline", &sid]);
    assert!(
        text.code == Some(0) && text.stdout.contains("CORRUPT WAL"),
        "{}",
        text.dump()
    );
    // sessions and log: listed as the intact records say, marked.
    let ss = ok(&w, &["sessions"]);
    assert_eq!(ss["sessions"][0]["corrupt"]["line"], n, "{ss}");
    assert_eq!(ss["sessions"][0]["head"], 1, "{ss}");
    let lg = ok(&w, &["log"]);
    assert_eq!(lg["sessions"][0]["corrupt"]["line"], n, "{lg}");
    assert_eq!(lg["sessions"][0]["state"], "live", "{lg}");
    let text = w.run(&["log"]);
    assert!(text.stdout.contains("CORRUPT WAL"), "{}", text.dump());

    // Writing verbs (and the readers that would answer wrong from a prefix) refuse, and
    // nothing is written.
    for args in [
        vec!["write", &sid, "z", "--content", "z"],
        vec!["provide", &sid, "k2", "v"],
        vec!["step-back", &sid, "--to", "0"],
        vec!["abort", &sid],
        vec!["verify", &sid],
        vec!["inspect", &sid, "--at", "0"],
    ] {
        let msg = w.json(&args).err(1, "corrupt-wal");
        assert!(msg.contains(&format!("line {n}")), "{msg}");
    }
    assert_eq!(fs::read(&wal).unwrap(), bytes, "nothing was written");

    // `new` on that workspace (or inside it) refuses, naming the session and the way out.
    for dir in [ws.clone(), ws.join("sub")] {
        let out = w.json(&["new", "--workspace", dir.to_str().unwrap()]);
        let msg = out.err(1, "workspace-busy");
        assert!(msg.contains(&sid), "{msg}");
        let hint = out.doc()["error"]["hint"].as_str().unwrap();
        assert!(hint.contains("--truncate-corrupt"), "{hint}");
    }
    assert_eq!(
        ok(&w, &["sessions"])["sessions"].as_array().unwrap().len(),
        1
    );

    // recover --truncate-corrupt: the intact records stay, the rest moves aside whole.
    let r = ok(&w, &["recover", &sid, "--truncate-corrupt"]);
    assert_eq!(r["verdict"], "truncated", "{r}");
    assert_eq!(r["corrupt"]["line"], n, "{r}");
    let moved = Path::new(r["movedTo"].as_str().unwrap()).to_path_buf();
    assert_eq!(moved.parent(), wal.parent(), "next to the WAL: {r}");
    let kept = fs::read(&wal).unwrap();
    let aside = fs::read(&moved).unwrap();
    assert_eq!(kept.len(), start, "the WAL ends where line {n} began");
    assert_eq!([kept, aside].concat(), bytes, "no byte is lost");
    check_wal(&wal);
    // Readable and attachable again: the session goes on from its intact records.
    let st = ok(&w, &["status", &sid]);
    assert!(st.get("corrupt").is_none(), "{st}");
    ok(&w, &["write", &sid, "c", "--content", "3"]);
    // Cutting an intact WAL is refused, and changes nothing.
    let before = fs::read(&wal).unwrap();
    w.json(&["recover", &sid, "--truncate-corrupt"])
        .err(2, "bad-args");
    assert_eq!(fs::read(&wal).unwrap(), before);
    // And the workspace still has its one live session.
    w.json(&["new", "--workspace", ws.to_str().unwrap()])
        .err(1, "workspace-busy");
}

/// Append a CRC-correct line with this body (a JSON object text without its final `}`).
fn append_sealed(wal: &Path, body: &str) -> Vec<u8> {
    let mut bytes = fs::read(wal).unwrap();
    bytes.extend_from_slice(seal(body).as_bytes());
    fs::write(wal, &bytes).unwrap();
    bytes
}

/// Finding 19: a CRC-correct record this revl cannot decode, as the LAST line, is a newer
/// revl's durable record: every reader refuses with `newer-wal` naming it and its line, and
/// no writer truncates it. An unknown `walVersion` stays `corrupt-wal`, naming the versions.
#[test]
fn a_valid_record_this_revl_does_not_know_is_never_taken_for_a_torn_tail() {
    for body in [
        r#"{"record":"quantum-leap","step":1"#,
        // A known record with a member this revl does not know.
        r#"{"record":"abort-begin","reason":"from a newer revl""#,
    ] {
        let w = World::new();
        let (sid, ws) = w.session();
        ok(&w, &["write", &sid, "a", "--content", "1"]);
        let wal = w.wal(&sid);
        let bytes = append_sealed(&wal, body);
        let n = String::from_utf8_lossy(&bytes).lines().count();
        let name = if body.contains("quantum") {
            "quantum-leap"
        } else {
            "abort-begin"
        };
        for args in [
            vec!["status", &sid],
            vec!["timeline", &sid],
            vec!["write", &sid, "b", "--content", "2"],
            vec!["abort", &sid],
            vec!["log", &sid],
            vec!["branch", "--wal", wal.to_str().unwrap()],
        ] {
            let out = w.json(&args);
            let msg = match args[0] {
                // `log` lists an unreadable session with its error.
                "log" => {
                    let doc = out.ok();
                    assert_eq!(doc["sessions"][0]["state"], "unreadable", "{doc}");
                    assert_eq!(doc["sessions"][0]["error"]["code"], "newer-wal", "{doc}");
                    doc["sessions"][0]["error"]["message"]
                        .as_str()
                        .unwrap()
                        .to_string()
                }
                _ => out.err(1, "newer-wal"),
            };
            for want in [
                format!("line {n}"),
                format!("`{name}`"),
                "newer revl".into(),
                "walVersion 1 to 2".into(),
                wal.to_str().unwrap().into(),
            ] {
                assert!(msg.contains(&want), "{want:?} in {msg}");
            }
        }
        assert_eq!(fs::read(&wal).unwrap(), bytes, "nothing was truncated");
        // Its workspace is held: no second session beside a session revl cannot read.
        let out = w.json(&["new", "--workspace", ws.to_str().unwrap()]);
        let msg = out.err(1, "workspace-busy");
        assert!(msg.contains(&sid), "{msg}");
        assert!(
            out.doc()["error"]["hint"]
                .as_str()
                .unwrap()
                .contains("newer revl"),
            "{}",
            out.dump()
        );
    }

    // An unknown walVersion: corrupt-wal, naming the version found and the one read.
    let w = World::new();
    let (sid, _ws) = w.session();
    let wal = w.wal(&sid);
    let text = fs::read_to_string(&wal).unwrap();
    let (header, rest) = text.split_once('\n').unwrap();
    let body = &header[..header.rfind(",\"crc\"").unwrap()];
    let doctored = format!(
        "{}{rest}",
        seal(&body.replace("\"walVersion\":2,", "\"walVersion\":7,"))
    );
    fs::write(&wal, &doctored).unwrap();
    let msg = w.json(&["status", &sid]).err(1, "corrupt-wal");
    assert!(
        msg.contains("walVersion 7") && msg.contains("reads walVersion 1 to 2"),
        "{msg}"
    );
    assert_eq!(fs::read_to_string(&wal).unwrap(), doctored);
}

/// Finding 20: the journal validates a record before it writes it. Here an intent lost its
/// inline preimage bytes (its CRC re-sealed) and the write crashed after changing the file:
/// repair would roll the step forward with a record replay rejects. Before the fix that
/// record was written (the session then unreadable for good, with a hint blaming an edit
/// and "internal"); now nothing is written and the error says what is wrong.
#[test]
fn a_record_replay_would_reject_is_never_written() {
    let w = World::new();
    let (sid, ws) = w.session();
    put(&ws.join("f.txt"), b"the preimage", 0o644);
    let out = w.json_env(
        &["write", &sid, "f.txt", "--content", "after"],
        &[("REVL_FAILPOINT", "effect.after-change")],
    );
    assert!(out.died(), "the failpoint aborts\n{}", out.dump());
    assert_eq!(fs::read(ws.join("f.txt")).unwrap(), b"after");
    let wal = w.wal(&sid);
    let text = fs::read_to_string(&wal).unwrap();
    let tampered: String = text
        .lines()
        .map(|line| {
            let mut v: Value = serde_json::from_str(line).unwrap();
            if v["record"] == "intent" {
                let e = v["undo"]["entries"][0].as_object_mut().unwrap();
                assert!(e.remove("content").is_some(), "an inline preimage: {line}");
                v.as_object_mut().unwrap().remove("crc");
                let t = v.to_string();
                seal(&t[..t.len() - 1])
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    fs::write(&wal, &tampered).unwrap();
    for args in [
        vec!["write", &sid, "g", "--content", "x"],
        vec!["status", &sid],
    ] {
        let out = w.json(&args);
        // A writer refuses; a read still answers, saying which repair cannot run and why.
        let msg = if args[0] == "status" {
            out.ok()["repairPending"]
                .as_str()
                .unwrap_or_else(|| panic!("no repairPending\n{}", out.dump()))
                .to_string()
        } else {
            out.err(1, "corrupt-wal")
        };
        assert!(
            msg.contains("nothing was written") && msg.contains("f.txt"),
            "{msg}"
        );
        assert!(!msg.contains("internal"), "{msg}");
        assert_eq!(
            fs::read_to_string(&wal).unwrap(),
            tampered,
            "nothing was written to the WAL\n{}",
            out.dump()
        );
    }
}

/// `fork SESSION --at K` then `fork-confirm`: the branch id.
fn fork(w: &World, s: &str, at: &str) -> String {
    let h = ok(w, &["fork", s, "--at", at])["hash"]
        .as_str()
        .unwrap()
        .to_string();
    ok(w, &["fork-confirm", s, "--hash", &h])["branch"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Run `revl --store STORE --json ARGS…`.
fn json_in(w: &World, store: &Path, args: &[&str]) -> Out {
    let mut a = vec!["--store", store.to_str().unwrap(), "--json"];
    a.extend_from_slice(args);
    w.run_raw(&a, &[])
}

/// The parts of a compare document that do not name files.
fn compare_answer(doc: &Value) -> Value {
    let side = |s: &Value| serde_json::json!({"session": s["session"], "role": s["role"], "steps": s["steps"]});
    serde_json::json!({
        "relation": doc["relation"],
        "comparable": doc["comparable"],
        "divergedAt": doc["divergedAt"],
        "delta": doc["delta"],
        "left": side(&doc["left"]),
        "right": side(&doc["right"]),
    })
}

/// Finding 21: a branch finds its parent by id in the store its WAL lives in. A store
/// copied whole (the original gone) compares, lists and diffs the same; a store without an
/// ancestor's WAL is an error naming it, never a different answer.
#[test]
fn a_copied_store_gives_the_same_answers_and_a_missing_parent_is_an_error() {
    let w = World::new();
    let (p, _ws) = w.session();
    ok(&w, &["write", &p, "a.txt", "--content", "1"]);
    ok(&w, &["write", &p, "a.txt", "--content", "2"]);
    ok(&w, &["write", &p, "b.txt", "--content", "3"]);
    // p → b (at 1) → c (at b's 1).
    let b = fork(&w, &p, "1");
    ok(&w, &["write", &b, "c.txt", "--content", "4"]);
    ok(&w, &["write", &b, "c.txt", "--content", "5"]);
    let c = fork(&w, &b, "1");
    ok(&w, &["write", &c, "d.txt", "--content", "6"]);
    let cmp_pb = compare_answer(&ok(&w, &["compare", &p, &b]));
    let cmp_bc = compare_answer(&ok(&w, &["compare", &b, &c]));
    assert_eq!(cmp_bc["relation"], "parent-branch", "{cmp_bc}");
    // Both histories start with p's step 1 (read from p's WAL).
    assert_eq!(cmp_pb["delta"]["sharedPrefix"], 1, "{cmp_pb}");
    assert!(
        cmp_bc["delta"]["sharedPrefix"].as_u64() >= Some(1),
        "{cmp_bc}"
    );
    let lin = ok(&w, &["branch", "--wal", &b]);
    assert_eq!(lin["parentWal"], w.wal(&p).to_str().unwrap(), "{lin}");
    let c_at0 = format!("{c}@0");
    let diff_before = w.json(&["diff", &c_at0, &c]);
    assert_eq!(diff_before.code, Some(1), "{}", diff_before.dump());

    // Copy the store, then remove the original.
    let copy = w.path("store-copy");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(&w.store)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    fs::remove_dir_all(&w.store).unwrap();

    for (args, before) in [([&p, &b], &cmp_pb), ([&b, &c], &cmp_bc)] {
        let out = json_in(&w, &copy, &["compare", args[0], args[1]]);
        assert_eq!(
            &compare_answer(out.ok()),
            before,
            "the copy compares the same\n{}",
            out.dump()
        );
    }
    let out = json_in(&w, &copy, &["branch", "--wal", &b]);
    let lin2 = out.ok();
    let p_in_copy = copy.join("sessions").join(&p).join("wal.jsonl");
    assert_eq!(lin2["parentWal"], p_in_copy.to_str().unwrap(), "{lin2}");
    assert_eq!(lin2["divergedAt"], lin["divergedAt"]);
    let out = json_in(&w, &copy, &["diff", &c_at0, &c]);
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert_eq!(
        out.doc()["paths"],
        diff_before.doc()["paths"],
        "{}",
        out.dump()
    );

    // Without p's WAL: every reader that needs p's history names p and stops.
    fs::remove_file(&p_in_copy).unwrap();
    for args in [
        vec!["compare", b.as_str(), c.as_str()],
        vec!["branch", "--wal", b.as_str()],
        vec!["diff", c_at0.as_str(), c.as_str()],
    ] {
        let out = json_in(&w, &copy, &args);
        let msg = out.err(1, "io");
        assert!(msg.contains(&p) && msg.contains("cannot be found"), "{msg}");
    }
    // What does not need p still answers: c's lineage names its parent b, found by id.
    let out = json_in(&w, &copy, &["branch", "--wal", &c]);
    let b_in_copy = copy.join("sessions").join(&b).join("wal.jsonl");
    assert_eq!(
        out.ok()["parentWal"],
        b_in_copy.to_str().unwrap(),
        "{}",
        out.dump()
    );
}
