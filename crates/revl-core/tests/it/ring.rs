//! The commit ring (docs/wal-format.md, "The commit ring"): a durable append is a chunk in
//! `wal.ring`, synced, while the WAL itself is synced only when the ring is full. A power
//! cut may take from the WAL every byte after its last sync; whoever takes the session's
//! lease next must find all of them again, byte for byte, and a WAL cut by
//! `recover --truncate-corrupt` must never get its cut bytes back from the ring.

use revl_core::{Failpoints, FileOp, Store};
use std::path::Path;

fn write(path: &str, content: &[u8]) -> FileOp {
    FileOp::Write {
        path: path.into(),
        content: content.to_vec(),
    }
}

fn open(root: &Path) -> Store {
    Store::open(root, Failpoints::none()).expect("the store opens")
}

/// A session with small overwrites, a larger write and a boundary, released; its id.
fn session(root: &Path, ws: &Path) -> String {
    let store = open(root);
    let mut s = store.new_session(ws, None).unwrap();
    for i in 0..12u32 {
        s.file_effect(write("f.txt", format!("version {i}\n").as_bytes()))
            .unwrap();
        if i == 5 {
            s.boundary(Some("half")).unwrap();
            s.file_effect(write("big.bin", &vec![b'b'; 9000])).unwrap();
        }
    }
    s.id().to_string()
}

/// A store in a temp directory with one released [`session`], its WAL and its ring.
struct Ringed {
    _tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    id: String,
    wal: std::path::PathBuf,
    ring: Vec<u8>,
}

fn ringed() -> Ringed {
    let tmp = tempfile::tempdir().unwrap();
    let (root, ws) = (tmp.path().join("store"), tmp.path().join("ws"));
    std::fs::create_dir(&ws).unwrap();
    let id = session(&root, &ws);
    let wal = root.join("sessions").join(&id).join("wal.jsonl");
    let ring = std::fs::read(root.join("sessions").join(&id).join("wal.ring"))
        .expect("a session one process synced four times has a ring");
    assert_eq!(ring.len(), revl_core::ring::RING_BYTES as usize);
    Ringed {
        _tmp: tmp,
        root,
        id,
        wal,
        ring,
    }
}

/// Where the ring's first chunk begins in the WAL (its header's WAL offset), read as
/// docs/wal-format.md describes the header.
fn chain_base(ring: &[u8]) -> u64 {
    assert_eq!(&ring[..8], b"revlring", "the ring begins with a chunk");
    u64::from_le_bytes(ring[16..24].try_into().unwrap())
}

/// Where the ring's chain ends in the WAL: its chunks walked as docs/wal-format.md
/// describes them (each header's offset where the previous payload ended).
fn chain_end(ring: &[u8]) -> u64 {
    let (mut at, mut end) = (0usize, chain_base(ring));
    while &ring[at..at + 8] == b"revlring" {
        let len = u32::from_le_bytes(ring[at + 12..at + 16].try_into().unwrap()) as usize;
        let offset = u64::from_le_bytes(ring[at + 16..at + 24].try_into().unwrap());
        if offset != end {
            break;
        }
        end = offset + len as u64;
        at += 40 + len;
    }
    end
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let t = to.join(e.file_name());
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            copy_dir(&e.path(), &t);
        } else if ft.is_file() {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

/// What a power cut leaves of the WAL's end, made by hand.
type Cut<'a> = Box<dyn Fn(&mut Vec<u8>) + 'a>;

#[test]
fn writes_a_power_cut_took_from_the_wal_come_back_from_the_ring() {
    let r = ringed();
    let (root, id, wal, ring) = (r.root.clone(), r.id.clone(), r.wal.clone(), r.ring.clone());
    let tmp = r._tmp.path();
    let whole = std::fs::read(&wal).unwrap();
    let base = chain_base(&ring) as usize;
    assert!(
        base < whole.len(),
        "the last appends are durable in the ring only: the chain begins at {base} of {}",
        whole.len()
    );
    let steps = open(&root).attach(&id).unwrap().state().steps.len();
    assert!(
        steps >= 14,
        "12 overwrites, a boundary and a larger write: {steps}"
    );
    // What a power cut can leave of the WAL's unsynced end: nothing, zeros where the size
    // reached the disk and the bytes did not, or part of it and garbage.
    let cuts: [(&str, Cut); 4] = [
        ("cut at the last sync", Box::new(|w| w.truncate(base))),
        (
            "zeros after the last sync",
            Box::new(|w| w[base..].iter_mut().for_each(|b| *b = 0)),
        ),
        (
            "part, then garbage",
            Box::new(|w| {
                let keep = base + (w.len() - base) / 2;
                w.truncate(keep);
                w.extend_from_slice(b"\x01garbage{\"record");
            }),
        ),
        (
            "a page of zeros, whole lines after it",
            Box::new(|w| {
                let from = base + 100;
                w[from..from + 4096].iter_mut().for_each(|b| *b = 0);
            }),
        ),
    ];
    for (what, cut) in cuts {
        let root2 = tmp.join(what.replace(' ', "-"));
        copy_dir(&root, &root2);
        let wal2 = root2.join("sessions").join(&id).join("wal.jsonl");
        let mut lost = whole.clone();
        cut(&mut lost);
        std::fs::write(&wal2, &lost).unwrap();
        let store = open(&root2);
        let s = store.attach(&id).unwrap();
        assert_eq!(
            s.state().steps.len(),
            steps,
            "{what}: every acknowledged step is back"
        );
        drop(s);
        // Byte for byte up to the chain's end (after it, the last step record, which rode
        // on no sync, may be written again by repair with its own time).
        let end = chain_end(&ring) as usize;
        let now = std::fs::read(&wal2).unwrap();
        assert!(
            now.len() >= end && now[..end] == whole[..end],
            "{what}: the WAL holds again exactly what was acknowledged"
        );
        // And it goes on: a further write after the fold, then everything reads.
        let mut s = store.attach(&id).unwrap();
        s.file_effect(write("f.txt", b"after the cut\n")).unwrap();
        assert_eq!(s.state().steps.len(), steps + 1, "{what}");
    }
}

#[test]
fn damage_the_ring_holds_a_copy_of_is_reported_and_a_cut_never_comes_back() {
    let r = ringed();
    let (root, id, wal) = (r.root.clone(), r.id.clone(), r.wal.clone());
    let base = chain_base(&r.ring) as usize;
    let whole = std::fs::read(&wal).unwrap();
    let nl = |from: usize| from + whole[from..].iter().position(|&b| b == b'\n').unwrap() + 1;
    // A byte flipped in a line the ring also holds, whole lines after it: damage, not what
    // a power cut leaves. The fold leaves it (the WAL is corrupt, as it says), and recover
    // moves the rest aside; the ring, which holds an intact copy of the rest, never brings
    // it back.
    let line = nl(base);
    let mut bytes = whole.clone();
    bytes[line + 3] ^= 0x20;
    std::fs::write(&wal, &bytes).unwrap();
    let store = open(&root);
    let reported = match store.attach_read(&id) {
        Ok(s) => s.corrupt().is_some(),
        Err(e) => e.code == revl_core::Code::CorruptWal,
    };
    assert!(reported, "the damage is reported, not hidden");
    assert!(
        std::fs::read(&wal).unwrap() == bytes,
        "nothing folded over it"
    );
    let report = store.truncate_corrupt(&id).unwrap();
    assert!(report.kept_records > 1);
    drop(store.attach(&id).unwrap());
    let after = std::fs::read(&wal).unwrap();
    assert!(after[..line] == whole[..line]);
    // The damaged line, intact as the ring holds it.
    let intact = &whole[line..nl(line)];
    assert!(
        !after.windows(intact.len()).any(|w| w == intact),
        "a line recover moved aside came back from the ring"
    );
    assert!(
        !root.join("sessions").join(&id).join("wal.ring").exists(),
        "recover removed the ring of the history it cut"
    );
}

/// `gc --apply` after a power cut decides what is garbage from the WAL: it must read it
/// with the ring folded back, or the blobs of acknowledged steps held only in the ring
/// look unreachable and are deleted.
#[test]
fn gc_after_a_power_cut_keeps_the_blobs_only_the_ring_names() {
    let r = ringed();
    let (root, id, wal) = (r.root.clone(), r.id.clone(), r.wal.clone());
    let base = chain_base(&r.ring) as usize;
    let step = {
        let s = open(&root).attach(&id).unwrap();
        s.state()
            .steps
            .iter()
            .position(|s| s.label() == "fs.write big.bin")
            .expect("the larger write") as i64
    };
    let mut bytes = std::fs::read(&wal).unwrap();
    let at = bytes
        .windows(b"fs.write big.bin".len())
        .position(|w| w == b"fs.write big.bin")
        .unwrap();
    assert!(
        at > base,
        "the larger write is held only in the ring after the cut"
    );
    bytes.truncate(base);
    std::fs::write(&wal, &bytes).unwrap();
    let store = open(&root);
    store.gc(true).unwrap();
    let s = store.attach(&id).unwrap();
    let read = s.read_at("big.bin", step).unwrap();
    assert_eq!(
        read.digest,
        blake3::hash(&vec![b'b'; 9000]).to_hex().to_string()
    );
}

/// A closed session never appends again: `gc --apply` syncs its WAL and removes its ring
/// (256 KiB each), and the session reads as it did, every write at its step.
#[test]
fn gc_retires_the_ring_of_a_closed_session_and_keeps_every_write() {
    let r = ringed();
    let ring = r.root.join("sessions").join(&r.id).join("wal.ring");
    let store = open(&r.root);
    store.attach(&r.id).unwrap().abort().unwrap();
    let before = std::fs::read(&r.wal).unwrap();
    store.gc(false).unwrap();
    assert!(ring.exists(), "a dry run removes nothing");
    store.gc(true).unwrap();
    assert!(!ring.exists(), "the ring of a closed session stays");
    assert_eq!(
        std::fs::read(&r.wal).unwrap(),
        before,
        "the WAL is as it was"
    );
    let s = store.attach(&r.id).unwrap();
    let steps = s.state().steps.len() as i64;
    let last = s.read_at("f.txt", steps - 1).unwrap();
    assert_eq!(last.content.as_deref(), Some("version 11\n"));
}
