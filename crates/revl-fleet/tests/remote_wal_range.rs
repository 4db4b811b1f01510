//! A remote's WAL read as a byte range (`RemoteJournals::read_range`, docs/fleet.md, "The
//! layout in the bucket"): only the bytes asked for are kept, whatever the size of the
//! segments that hold them, and each of those segments is still checked whole against its
//! SHA-256. Its own test binary: the allocator below counts this process's heap, and no
//! other test runs beside this one.

use revl_core::storage::Journals;
use revl_core::workspace::FileOp;
use revl_core::{Failpoints, Store};
use revl_fleet::push::{push_with, Mode};
use revl_fleet::storage::RemoteJournals;
use revl_fleet::{segment_key, Bucket, Remote};
use sha2::Digest;
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The system allocator, counting the bytes held now and the most held since the last
/// [`peak_from_now`].
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = HELD.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(now, Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        HELD.fetch_sub(l.size(), Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            if new >= l.size() {
                grew(new - l.size());
            } else {
                HELD.fetch_sub(l.size() - new, Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Start counting the peak from what is held now; returns that.
fn peak_from_now() -> usize {
    let now = HELD.load(Relaxed);
    PEAK.store(now, Relaxed);
    now
}

/// A segment far larger than the bytes read from it.
const BIG: u64 = 192 << 20;

#[test]
fn a_range_of_a_remote_wal_holds_only_its_bytes_and_still_checks_every_segment_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let a = Store::open(&tmp.path().join("a"), Failpoints::none()).unwrap();
    let mut s = a.new_session(&ws, None).unwrap();
    let id = s.id().to_string();
    s.file_effect(FileOp::Write {
        path: "a.txt".into(),
        content: b"one".to_vec(),
    })
    .unwrap();
    drop(s);
    let dir = tmp.path().join("shared");
    let url = format!("file://{}", dir.display());
    let remote = Remote {
        name: "origin".into(),
        url: url.clone(),
        index: None,
    };
    push_with(&a, &remote, &Bucket::open(&url).unwrap(), &[], Mode::Extend).unwrap();
    let local = std::fs::read(a.wal_path(&id)).unwrap();
    let n = local.len() as u64;

    // A second segment of 192 MiB past the pushed WAL (zeros, sparse on disk, ending in a
    // mark), named in the manifest with its SHA-256: the range read wants its last bytes.
    // The manifest states the whole WAL's SHA-256 too (checked when a read spans every
    // segment).
    let mark = b"the last 16 byte";
    let (mut sha, mut whole) = (sha2::Sha256::new(), sha2::Sha256::new());
    whole.update(&local);
    let mut zeros = vec![0u8; 1 << 20];
    for _ in 0..(BIG >> 20) - 1 {
        sha.update(&zeros);
        whole.update(&zeros);
    }
    zeros.truncate((1 << 20) - mark.len());
    for h in [&mut sha, &mut whole] {
        h.update(&zeros);
        h.update(mark);
    }
    drop(zeros);
    let sha = hex::encode(sha.finalize());
    let key = segment_key(&id, n, n + BIG, &sha);
    let seg = dir.join(&key);
    std::fs::create_dir_all(seg.parent().unwrap()).unwrap();
    let mut f = std::fs::File::create(&seg).unwrap();
    f.set_len(BIG).unwrap();
    f.seek(SeekFrom::Start(BIG - mark.len() as u64)).unwrap();
    f.write_all(mark).unwrap();
    drop(f);
    let mpath = dir.join(format!("sessions/{id}/manifest.json"));
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    m["walLength"] = (n + BIG).into();
    m["walSha256"] = hex::encode(whole.finalize()).into();
    m["segments"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"key": key, "from": n, "to": n + BIG, "sha256": sha}));
    std::fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();

    let journals = RemoteJournals::reading(Bucket::open(&url).unwrap(), "origin");
    let end = n + BIG;
    let base = peak_from_now();
    let got = journals.read_range(&id, end - 16, end).unwrap();
    let peak = PEAK.load(Relaxed) - base;
    assert_eq!(got, mark);
    assert!(
        peak < 16 << 20,
        "reading 16 bytes of a {BIG}-byte segment held {peak} bytes at once"
    );
    // A range across the two segments: the pushed WAL's tail, then the zeros.
    let across = journals.read_range(&id, n - 5, n + 5).unwrap();
    assert_eq!(&across[..5], &local[n as usize - 5..]);
    assert_eq!(&across[5..], &[0u8; 5]);
    // Spanning every segment, the whole WAL is checked against the manifest's SHA-256.
    let honest = std::fs::read(&mpath).unwrap();
    m["walSha256"] = "ab".repeat(32).into();
    std::fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
    let e = journals.read_range(&id, n - 5, n + 5).unwrap_err();
    assert!(e.to_string().contains("does not have its SHA-256"), "{e}");
    std::fs::write(&mpath, honest).unwrap();
    // A byte altered far from the range read: the segment is still checked whole.
    let mut f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.seek(SeekFrom::Start(7)).unwrap();
    f.write_all(b"x").unwrap();
    drop(f);
    let e = journals.read_range(&id, end - 16, end).unwrap_err();
    let e = revl_core::storage::trait_error("read", e);
    assert_eq!(e.code, revl_core::Code::CorruptRemote, "{e:?}");
    assert!(e.message.contains(&key), "{}", e.message);
    assert!(
        e.message.contains("its SHA-256 is not the manifest's"),
        "{}",
        e.message
    );
    // A segment cut short is refused too.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(BIG - 1)
        .unwrap();
    let e = journals.read_range(&id, n, n + 1).unwrap_err();
    let e = revl_core::storage::trait_error("read", e);
    assert_eq!(e.code, revl_core::Code::CorruptRemote, "{e:?}");
    // What the range does not reach is read as before.
    assert_eq!(journals.read_range(&id, 0, n).unwrap(), local);
}
