//! Digests known by stat (docs/architecture.md, "Drift scans: digests known by stat"): a
//! scan that checks every witnessed path of a large workspace (a fork's enumeration, its
//! confirm, the rewind of a parallel branch's DIR, `verify`) reads a file's content only
//! where its stat changed since an earlier scan read it.
//!
//! An entry says: the file at this path (relative to the tree's root) with this inode,
//! size, mtime, ctime and mode held content of this digest. A later scan whose `lstat`
//! shows all five unchanged takes the digest without reading the file. The ctime is the
//! guard: every write, truncate, chmod, rename or link count change sets it to the clock's
//! now, and no system call sets it back. An entry is kept only when its ctime is older
//! than the scan that recorded it by [`SETTLED`]: a change after that scan began gets a
//! later ctime (the filesystem's clock ticks in milliseconds), so it cannot leave the five
//! values as they were. (A clock set back by more than that, or a filesystem that keeps no
//! ctime, defeats it, as it defeats git's index.)
//!
//! The file is a cache: missing, unreadable, of another format or failing its checksum, it
//! is ignored (every file is read) and written anew.
//!
//! A layered fork's frozen lower layer has an index of its own, filled by the freeze as it
//! copies each file (the digest of the bytes it wrote): nothing writes that tree afterwards,
//! so its entries are kept without waiting to settle ([`StatIndex::frozen`]).
//!
//! Format (little-endian): `revl-stat-index 1\n` (a frozen layer's: `revl-stat-index
//! frozen 1\n`, whose entries are kept at load whatever their ctime), the scan's start
//! (i64 seconds, u32 nanoseconds), the entry count (u64), the entries (path length u32,
//! path bytes, inode u64, size u64, mtime i64 + u32, ctime i64 + u32, mode u32, digest 32
//! bytes), then the blake3 of everything before.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MAGIC: &[u8] = b"revl-stat-index 1\n";
/// The first line of a frozen layer's index ([`StatIndex::frozen`]): the same format, whose
/// entries are kept at load whatever their ctime.
const MAGIC_FROZEN: &[u8] = b"revl-stat-index frozen 1\n";
/// How much older than the scan that recorded it an entry's ctime must be (seconds).
pub const SETTLED: i64 = 2;
/// The largest index read (bytes): about 2.5 million entries.
const MAX_BYTES: u64 = 256 << 20;
/// The longest path an entry may name.
const MAX_PATH: usize = 1 << 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    ino: u64,
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
    mode: u32,
}

impl Stat {
    fn of(m: &Metadata) -> Stat {
        Stat {
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec() as u32),
            ctime: (m.ctime(), m.ctime_nsec() as u32),
            mode: m.mode(),
        }
    }
}

/// The digests of one tree's files known by stat: loaded before a scan, consulted and
/// added to while it runs, saved after it.
#[derive(Debug)]
pub struct StatIndex {
    path: PathBuf,
    /// When this scan began (seconds, nanoseconds since the epoch).
    began: (i64, u32),
    known: HashMap<Vec<u8>, Known>,
    /// The index of a frozen layer: nothing writes its tree ([`StatIndex::note_frozen`]).
    frozen: bool,
    /// What this scan read (settled files only).
    read: Mutex<Read>,
}

/// What a scan read: path, stat, digest.
type Read = HashMap<Vec<u8>, (Stat, [u8; 32])>;

/// An entry loaded, and whether this scan took its digest.
#[derive(Debug)]
struct Known {
    stat: Stat,
    digest: [u8; 32],
    hit: std::sync::atomic::AtomicBool,
}

fn now() -> (i64, u32) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos())
}

/// A little-endian reader over the index's bytes; `None` past the end.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn time(&mut self) -> Option<(i64, u32)> {
        Some((self.u64()? as i64, self.u32()?))
    }
}

/// Is a change at `ctime` settled before `began` (older by [`SETTLED`] seconds)?
fn settled(ctime: (i64, u32), began: (i64, u32)) -> bool {
    ctime < (began.0.saturating_sub(SETTLED), began.1)
}

impl StatIndex {
    /// The index kept at `path` (an empty one where there is none that can be read).
    pub fn load(path: &Path) -> StatIndex {
        let began = now();
        let (known, frozen) = read(path).unwrap_or_default();
        StatIndex {
            path: path.to_path_buf(),
            began,
            known,
            frozen,
            read: Mutex::new(HashMap::new()),
        }
    }

    /// A new index, empty, for a tree nothing writes once revl has made it (a layered fork's
    /// frozen lower layer, filled by [`StatIndex::note_frozen`]), to be saved at `path`.
    pub fn frozen(path: &Path) -> StatIndex {
        StatIndex {
            path: path.to_path_buf(),
            began: now(),
            known: HashMap::new(),
            frozen: true,
            read: Mutex::new(HashMap::new()),
        }
    }

    /// The digest of the file at `rel` whose `lstat` is `m`, where an earlier scan read it
    /// with the same stat.
    pub fn digest(&self, rel: &[u8], m: &Metadata) -> Option<String> {
        let k = self.known.get(rel)?;
        if k.stat != Stat::of(m) {
            return None;
        }
        k.hit.store(true, std::sync::atomic::Ordering::Relaxed);
        Some(hex::encode(k.digest))
    }

    /// The file at `rel`, whose `lstat` before it was read is `m`, held `digest`. Whether
    /// it is kept (only a settled file is).
    pub fn note(&self, rel: &[u8], m: &Metadata, digest: &str) -> bool {
        let mut d = [0u8; 32];
        if hex::decode_to_slice(digest, &mut d).is_err() {
            return false;
        }
        let st = Stat::of(m);
        if !settled(st.ctime, self.began) {
            return false;
        }
        match self.read.lock() {
            Ok(mut read) => {
                read.insert(rel.to_vec(), (st, d));
                true
            }
            Err(_) => false,
        }
    }

    /// [`StatIndex::note`] for a tree nothing writes after revl made it: a layered fork's
    /// frozen lower layer, noted by the freeze that copied each file and hashed the bytes it
    /// wrote. The settling rule guards a workspace against a writer racing the scan; a
    /// frozen layer has none (the overlay never writes its lower layer, and nothing else
    /// may write the store), so the entry is kept at once. A file changed under the store
    /// anyway gets a later ctime than the one noted here, and is read again.
    pub fn note_frozen(&self, rel: &[u8], m: &Metadata, digest: &[u8; 32]) -> bool {
        if !self.frozen {
            return false;
        }
        match self.read.lock() {
            Ok(mut read) => {
                read.insert(rel.to_vec(), (Stat::of(m), *digest));
                true
            }
            Err(_) => false,
        }
    }

    /// Write what this scan saw (the entries it took, and what it read), where it read
    /// anything new (a temporary file renamed over the old one; not synced: a cache that a
    /// crash tears is ignored next time).
    pub fn save(&self) -> std::io::Result<()> {
        let Ok(read) = self.read.lock() else {
            return Ok(());
        };
        if read.is_empty() {
            return Ok(());
        }
        let taken = self.known.iter().filter(|(p, k)| {
            k.hit.load(std::sync::atomic::Ordering::Relaxed) && !read.contains_key(*p)
        });
        let all: Vec<(&Vec<u8>, &Stat, &[u8; 32])> = taken
            .map(|(p, k)| (p, &k.stat, &k.digest))
            .chain(read.iter().map(|(p, (st, d))| (p, st, d)))
            .collect();
        let mut out = Vec::with_capacity(64 + all.len() * 112);
        out.extend_from_slice(if self.frozen { MAGIC_FROZEN } else { MAGIC });
        out.extend_from_slice(&(self.began.0 as u64).to_le_bytes());
        out.extend_from_slice(&self.began.1.to_le_bytes());
        out.extend_from_slice(&(all.len() as u64).to_le_bytes());
        for (p, st, d) in all {
            out.extend_from_slice(&(p.len() as u32).to_le_bytes());
            out.extend_from_slice(p);
            out.extend_from_slice(&st.ino.to_le_bytes());
            out.extend_from_slice(&st.size.to_le_bytes());
            for t in [st.mtime, st.ctime] {
                out.extend_from_slice(&(t.0 as u64).to_le_bytes());
                out.extend_from_slice(&t.1.to_le_bytes());
            }
            out.extend_from_slice(&st.mode.to_le_bytes());
            out.extend_from_slice(d);
        }
        let sum = blake3::hash(&out);
        out.extend_from_slice(sum.as_bytes());
        let tmp = self
            .path
            .with_extension(format!("tmp-{}", crate::util::new_id()));
        std::fs::write(&tmp, &out)?;
        std::fs::rename(&tmp, &self.path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

/// A scan of a workspace with the digests kept at an index file (none: every file read):
/// [`Scan::ws`] is what the scan observes through, [`Scan::done`] keeps what it read.
pub struct Scan {
    ws: crate::workspace::Workspace,
    index: Option<std::sync::Arc<StatIndex>>,
}

impl Scan {
    pub fn of(ws: &crate::workspace::Workspace, index: Option<&Path>) -> Scan {
        match index {
            Some(p) => {
                let idx = std::sync::Arc::new(StatIndex::load(p));
                Scan {
                    ws: ws.with_index(idx.clone()),
                    index: Some(idx),
                }
            }
            None => Scan {
                ws: ws.clone(),
                index: None,
            },
        }
    }

    pub fn ws(&self) -> &crate::workspace::Workspace {
        &self.ws
    }

    /// Keep what the scan read for the next one. A cache: where it cannot be written, the
    /// next scan reads those files again.
    pub fn done(self) {
        if let Some(i) = self.index {
            let _ = i.save();
        }
    }
}

/// The entries of an index, by path.
type Entries = HashMap<Vec<u8>, Known>;

/// The entries of the index at `path`, checked (`None` where anything is off), and whether
/// it is a frozen layer's.
fn read(path: &Path) -> Option<(Entries, bool)> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // A regular file only: a symlink, a FIFO or a device planted there is not opened
    // through (no hang, no endless read).
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let m = f.metadata().ok()?;
    if !m.is_file() || m.len() > MAX_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    f.take(MAX_BYTES).read_to_end(&mut bytes).ok()?;
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if blake3::hash(body).as_bytes() != sum {
        return None;
    }
    let mut r = Reader(body);
    let frozen = body.starts_with(MAGIC_FROZEN);
    let magic = if frozen { MAGIC_FROZEN } else { MAGIC };
    if r.take(magic.len())? != magic {
        return None;
    }
    let began = r.time()?;
    let n = r.u64()?;
    // Each entry takes at least 80 bytes: a count larger than the file allows is refused.
    if n > body.len() as u64 / 80 {
        return None;
    }
    let mut out = HashMap::with_capacity(n as usize);
    for _ in 0..n {
        let len = r.u32()? as usize;
        if len > MAX_PATH {
            return None;
        }
        let p = r.take(len)?.to_vec();
        let st = Stat {
            ino: r.u64()?,
            size: r.u64()?,
            mtime: r.time()?,
            ctime: r.time()?,
            mode: r.u32()?,
        };
        let d: [u8; 32] = r.take(32)?.try_into().ok()?;
        // Written only when settled (or frozen); checked again, so a hand-made file cannot
        // say more.
        if frozen || settled(st.ctime, began) {
            let hit = false.into();
            out.insert(
                p,
                Known {
                    stat: st,
                    digest: d,
                    hit,
                },
            );
        }
    }
    r.0.is_empty().then_some((out, frozen))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn old_file(dir: &Path, name: &str, body: &[u8]) -> (Vec<u8>, Metadata) {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        (
            name.as_bytes().to_vec(),
            std::fs::symlink_metadata(&p).unwrap(),
        )
    }

    #[test]
    fn a_saved_entry_is_known_until_the_stat_changes_and_a_damaged_index_is_ignored() {
        let t = tempfile::tempdir().unwrap();
        let (rel, m) = old_file(t.path(), "a", b"one");
        let at = t.path().join("stat-index");
        let mut idx = StatIndex::load(&at);
        // Pretend the scan began well after the file was made.
        idx.began.0 += 10;
        let d = crate::util::blake3_hex(b"one");
        idx.note(&rel, &m, &d);
        idx.save().unwrap();
        let again = StatIndex::load(&at);
        assert_eq!(again.digest(&rel, &m), Some(d.clone()));
        // Written again: a new ctime, not known.
        std::fs::write(t.path().join("a"), b"two").unwrap();
        let m2 = std::fs::symlink_metadata(t.path().join("a")).unwrap();
        assert_eq!(again.digest(&rel, &m2), None);
        // One byte flipped: the whole index is ignored.
        let mut bytes = std::fs::read(&at).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&at, &bytes).unwrap();
        assert_eq!(StatIndex::load(&at).digest(&rel, &m), None);
    }

    #[test]
    fn a_fifo_or_a_symlink_in_place_of_the_index_is_not_read() {
        let t = tempfile::tempdir().unwrap();
        let (rel, m) = old_file(t.path(), "a", b"one");
        let fifo = t.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(StatIndex::load(&fifo).digest(&rel, &m), None);
        let link = t.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert_eq!(StatIndex::load(&link).digest(&rel, &m), None);
    }

    /// A frozen layer's index keeps what the freeze noted at once (no settling), survives
    /// a save by a later scan as frozen, and still misses a file written afterwards; a
    /// workspace's index takes no frozen note.
    #[test]
    fn a_frozen_layers_entries_are_kept_at_once_until_their_file_changes() {
        let t = tempfile::tempdir().unwrap();
        let (a, ma) = old_file(t.path(), "a", b"one");
        let (b, mb) = old_file(t.path(), "b", b"two");
        let da = *blake3::hash(b"one").as_bytes();
        let at = t.path().join("stat-index");
        let idx = StatIndex::frozen(&at);
        assert!(idx.note_frozen(&a, &ma, &da));
        idx.save().unwrap();
        let again = StatIndex::load(&at);
        assert_eq!(again.digest(&a, &ma), Some(hex::encode(da)));
        // A scan that reads another file saves the index again: still frozen, still known.
        again.note(&b, &mb, &crate::util::blake3_hex(b"two"));
        // (b is too fresh to be kept by an ordinary note; a's entry was taken.)
        let b2 = b"c".to_vec();
        let db = *blake3::hash(b"x").as_bytes();
        again
            .read
            .lock()
            .unwrap()
            .insert(b2.clone(), (Stat::of(&mb), db));
        again.save().unwrap();
        let third = StatIndex::load(&at);
        assert!(third.frozen);
        assert_eq!(third.digest(&a, &ma), Some(hex::encode(da)));
        // Written after the freeze: a new ctime, read again.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(t.path().join("a"), b"ONE").unwrap();
        let ma2 = std::fs::symlink_metadata(t.path().join("a")).unwrap();
        assert_eq!(third.digest(&a, &ma2), None);
        // An ordinary index refuses a frozen note, and keeps nothing unsettled.
        let ws = StatIndex::load(&t.path().join("ws-index"));
        assert!(!ws.note_frozen(&a, &ma2, &da));
        ws.save().unwrap();
        assert!(!t.path().join("ws-index").exists());
        // An ordinary index with the same fresh entry drops it at load.
        let plain = t.path().join("plain-index");
        let p = StatIndex::load(&plain);
        p.read
            .lock()
            .unwrap()
            .insert(a.clone(), (Stat::of(&ma2), da));
        p.save().unwrap();
        assert_eq!(StatIndex::load(&plain).digest(&a, &ma2), None);
    }

    #[test]
    fn a_file_changed_too_recently_is_not_kept() {
        let t = tempfile::tempdir().unwrap();
        let (rel, m) = old_file(t.path(), "a", b"one");
        let at = t.path().join("stat-index");
        let idx = StatIndex::load(&at);
        idx.note(&rel, &m, &crate::util::blake3_hex(b"one"));
        idx.save().unwrap();
        assert!(!at.exists(), "nothing settled was seen: nothing written");
        assert_eq!(StatIndex::load(&at).digest(&rel, &m), None);
    }
}
