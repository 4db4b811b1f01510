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
//! is ignored (every file is read) and written anew. Format (little-endian):
//! `revl-stat-index 1\n`, the scan's start (i64 seconds, u32 nanoseconds), the entry
//! count (u64), the entries (path length u32, path bytes, inode u64, size u64, mtime i64 +
//! u32, ctime i64 + u32, mode u32, digest 32 bytes), then the blake3 of everything before.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MAGIC: &[u8] = b"revl-stat-index 1\n";
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
        let known = read(path).unwrap_or_default();
        StatIndex {
            path: path.to_path_buf(),
            began,
            known,
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
        out.extend_from_slice(MAGIC);
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

/// Carry the digests of `from`'s index to `to`, a copy of the tree `from` just made (a
/// layered fork's new lower layer), so the first scan of the copy reads none of the files
/// it can prove: a regular file of `to` gets an entry for its own stat and the digest of
/// its source where the source's `lstat` is still what `from_index` recorded (the source
/// was not written since that entry was noted, so the copy holds those bytes). Each entry
/// is kept under the rule of every entry ([`SETTLED`]: the copy's ctime older than this
/// pass by two seconds); a copy made later than that is read by the next scan. A cache: a
/// source without an entry, or an index that cannot be read or written, carries nothing.
/// Returns how many entries were carried.
pub fn carry(from_index: &Path, from: &Path, to: &Path, to_index: &Path) -> usize {
    let Some(known) = read(from_index) else {
        return 0;
    };
    let into = StatIndex::load(to_index);
    let carried = carry_into(&known, from, to, &into);
    let _ = into.save();
    carried
}

/// [`carry`]'s walk: what `known` (the source's entries) proves of `to`, noted in `into`.
fn carry_into(known: &Entries, from: &Path, to: &Path, into: &StatIndex) -> usize {
    use std::os::unix::ffi::OsStrExt;
    let mut carried = 0;
    let mut stack = vec![to.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            let p = e.path();
            if m.is_dir() {
                stack.push(p);
                continue;
            }
            if !m.is_file() {
                continue;
            }
            let Ok(rel) = p.strip_prefix(to) else {
                continue;
            };
            let rel = rel.as_os_str().as_bytes();
            let Some(k) = known.get(rel) else { continue };
            let source = std::fs::symlink_metadata(from.join(std::ffi::OsStr::from_bytes(rel)));
            if source.is_ok_and(|s| s.is_file() && Stat::of(&s) == k.stat) && m.len() == k.stat.size
            {
                carried += usize::from(into.note(rel, &m, &hex::encode(k.digest)));
            }
        }
    }
    carried
}

/// The entries of the index at `path`, checked: `None` where anything is off.
type Entries = HashMap<Vec<u8>, Known>;

fn read(path: &Path) -> Option<Entries> {
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
    if r.take(MAGIC.len())? != MAGIC {
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
        // Written only when settled; checked again, so a hand-made file cannot say more.
        if settled(st.ctime, began) {
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
    r.0.is_empty().then_some(out)
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

    /// A copy's digests come from the source's entries only where the source is still as
    /// the entry says (so the copy holds those bytes); a copy changed afterwards is not
    /// known by its old stat.
    #[test]
    fn a_copy_carries_the_digests_its_source_still_proves() {
        let t = tempfile::tempdir().unwrap();
        let (from, to) = (t.path().join("from"), t.path().join("to"));
        std::fs::create_dir_all(from.join("d")).unwrap();
        let (a, ma) = old_file(&from, "a", b"one");
        let (b, mb) = old_file(&from, "d/b", b"two");
        let at = t.path().join("from-index");
        let mut idx = StatIndex::load(&at);
        idx.began.0 += 10;
        let (da, db) = (
            crate::util::blake3_hex(b"one"),
            crate::util::blake3_hex(b"two"),
        );
        assert!(idx.note(&a, &ma, &da) && idx.note(&b, &mb, &db));
        idx.save().unwrap();
        std::fs::create_dir_all(to.join("d")).unwrap();
        std::fs::copy(from.join("a"), to.join("a")).unwrap();
        std::fs::copy(from.join("d/b"), to.join("d/b")).unwrap();
        // The source of d/b is written again after its entry: its copy proves nothing.
        std::fs::write(from.join("d/b"), b"TWO").unwrap();
        let to_at = t.path().join("to-index");
        let mut into = StatIndex::load(&to_at);
        into.began.0 += 10;
        let known = read(&at).unwrap();
        assert_eq!(carry_into(&known, &from, &to, &into), 1);
        into.save().unwrap();
        let kept = StatIndex::load(&to_at);
        let ma2 = std::fs::symlink_metadata(to.join("a")).unwrap();
        let mb2 = std::fs::symlink_metadata(to.join("d/b")).unwrap();
        assert_eq!(kept.digest(&a, &ma2), Some(da));
        assert_eq!(kept.digest(&b, &mb2), None);
        // The copy changed under the store: a new ctime, read again.
        std::fs::write(to.join("a"), b"ONE").unwrap();
        let ma3 = std::fs::symlink_metadata(to.join("a")).unwrap();
        assert_eq!(kept.digest(&a, &ma3), None);
        // Without the source's index nothing is carried (nothing read, nothing written).
        assert_eq!(
            carry(&t.path().join("none"), &from, &to, &t.path().join("x")),
            0
        );
        assert!(!t.path().join("x").exists());
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
