//! The commit ring (docs/wal-format.md, "The commit ring"): a durable append to a local WAL
//! at the cost of one data-only sync.
//!
//! An `fdatasync` of an append grows the file, so the filesystem commits its journal (the
//! new size) as well as the bytes: on ext4 that is about twice the cost of overwriting
//! blocks the file already has. The ring is a file of fixed size next to the WAL
//! (`sessions/<id>/wal.ring`), written whole with zeros once, so later writes into it only
//! overwrite blocks it has. A durable append writes the WAL (not synced), then copies every
//! WAL byte appended since the WAL's last sync into the ring as one chunk and syncs the
//! ring: the bytes are durable in the ring. When the ring is full, the WAL itself is synced
//! and the ring starts over. Whoever takes the session's lease next folds the ring back in
//! ([`fold`]): where the WAL lost bytes the ring holds (a power cut), they are written to
//! the WAL again, and the WAL is synced, before anything reads it to write.
//!
//! A chunk: a 40-byte header, then its payload:
//!
//! ```text
//! "revlring" | wal id u32 | payload length u32 | WAL offset u64 | chain base u64 | payload CRC-32C u32 | header CRC-32C u32
//! ```
//!
//! little endian; the header CRC covers the 36 bytes before it. The wal id is the CRC-32C
//! of the WAL's first line (its header record): a ring is never folded into another WAL
//! of the same path. Chunks lie one after another from offset 0; the chain ends at the
//! first chunk whose header or payload is not valid, whose wal id or chain base differs
//! from the first's, or whose WAL offset is not where the previous chunk's payload ended.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The ring file's name in a session's directory.
pub const RING_NAME: &str = "wal.ring";
/// The ring's size: about twenty small overwrites (each intent holds a preimage and the new
/// bytes, ~11.5 KB for 4 KiB) between two syncs of the WAL itself.
pub const RING_BYTES: u64 = 256 * 1024;
const MAGIC: &[u8; 8] = b"revlring";
/// The sync of the WAL, by one appender, at which its ring is made.
pub const MAKE_AT: u32 = 4;
const HEADER: u64 = 40;
/// The most of a WAL's first line read to identify it.
const FIRST_LINE_MAX: usize = 64 * 1024;

/// Where a ring's chain ends after a fold: the WAL's bytes before `end` are durable (in the
/// WAL or the ring), and the next chunk goes at `pos`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingTail {
    pos: u64,
    base: u64,
    end: u64,
}

struct Chunk {
    at: u64,
    len: u32,
    offset: u64,
}

/// The id of the WAL open as `wal`: the CRC-32C of its first line (`None`: no whole first
/// line, a WAL being created).
fn wal_id(wal: &File) -> std::io::Result<Option<u32>> {
    let mut buf = vec![0u8; 4096];
    let mut have = 0;
    loop {
        let n = wal.read_at(&mut buf[have..], have as u64)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(nl) = buf[have..have + n].iter().position(|&b| b == b'\n') {
            return Ok(Some(crc32c::crc32c(&buf[..have + nl + 1])));
        }
        have += n;
        if have == buf.len() {
            if buf.len() >= FIRST_LINE_MAX {
                return Ok(None);
            }
            buf.resize(buf.len() * 2, 0);
        }
    }
}

fn header(id: u32, offset: u64, base: u64, payload: &[u8]) -> [u8; HEADER as usize] {
    let mut h = [0u8; HEADER as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&id.to_le_bytes());
    h[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[16..24].copy_from_slice(&offset.to_le_bytes());
    h[24..32].copy_from_slice(&base.to_le_bytes());
    h[32..36].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let crc = crc32c::crc32c(&h[..36]);
    h[36..40].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The valid chain of chunks at the start of `ring` for the WAL `id`: every header and
/// payload checked, one base, each offset where the previous payload ended (any bytes at
/// all: a ring is read as possibly garbage).
fn chain(ring: &[u8], id: u32) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    let mut at = 0u64;
    let mut expect: Option<(u64, u64)> = None;
    while at + HEADER <= ring.len() as u64 {
        let h = &ring[at as usize..(at + HEADER) as usize];
        let word = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let long = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        if &h[..8] != MAGIC || crc32c::crc32c(&h[..36]) != word(36) || word(8) != id {
            break;
        }
        let (len, offset, base) = (word(12), long(16), long(24));
        let Some(next) = (at + HEADER).checked_add(u64::from(len)) else {
            break;
        };
        let Some(end) = offset.checked_add(u64::from(len)) else {
            break;
        };
        if next > ring.len() as u64
            || expect.is_some_and(|(b, o)| (b, o) != (base, offset))
            || (expect.is_none() && offset != base)
        {
            break;
        }
        let payload = &ring[(at + HEADER) as usize..next as usize];
        if crc32c::crc32c(payload) != word(32) {
            break;
        }
        out.push(Chunk { at, len, offset });
        expect = Some((base, end));
        at = next;
    }
    out
}

/// Fold the ring of the WAL at `wal` back into it, under the session's lease: the bytes a
/// power cut took from the WAL's end and the ring holds are written again and the WAL is
/// synced. Returns where the chain ends, for the next appender to go on from (`None`: no
/// ring, or none for this WAL).
pub fn fold(wal: &Path) -> std::io::Result<Option<RingTail>> {
    let dir = wal.parent().expect("a WAL path has a parent");
    let mut ring = match File::open(dir.join(RING_NAME)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let file = match OpenOptions::new().read(true).write(true).open(wal) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(id) = wal_id(&file)? else {
        return Ok(None);
    };
    // Most attaches find no chain (a ring ended, or made and not yet written): one header
    // read says so; the rest is read only behind a first chunk.
    let mut bytes = vec![0u8; HEADER as usize];
    if ring.read_exact_at(&mut bytes, 0).is_err() || &bytes[..8] != MAGIC {
        return Ok(None);
    }
    bytes.clear();
    (&mut ring).take(RING_BYTES).read_to_end(&mut bytes)?;
    let chunks = chain(&bytes, id);
    let (Some(first), Some(last)) = (chunks.first(), chunks.last()) else {
        return Ok(None);
    };
    let base = first.offset;
    let end = last.offset + u64::from(last.len);
    let len = file.metadata()?.len();
    if base > len {
        // The WAL was cut before the chain began (by hand): the ring is not this history.
        return Ok(None);
    }
    let payload = |c: &Chunk| {
        let from = (c.at + HEADER) as usize;
        &bytes[from..from + c.len as usize]
    };
    // The WAL's own copy of the chain's range, as far as it reaches.
    let mut ours = vec![0u8; (end - base) as usize];
    let mut have = 0;
    while have < ours.len() {
        match file.read_at(&mut ours[have..], base + have as u64)? {
            0 => break,
            n => have += n,
        }
    }
    let ours = &ours[..have];
    // Where the WAL first differs from the chain (or ends before it does), and whether
    // every byte that differs is zero.
    let (mut first_diff, mut only_zeros) = (None, true);
    for c in &chunks {
        let at = (c.offset - base) as usize;
        let theirs = payload(c);
        let mine = &ours[at.min(have)..(at + theirs.len()).min(have)];
        if first_diff.is_none() {
            first_diff = theirs
                .iter()
                .zip(mine)
                .position(|(t, o)| t != o)
                .or((mine.len() < theirs.len()).then_some(mine.len()))
                .map(|i| at + i);
        }
        only_zeros &= theirs.iter().zip(mine).all(|(t, o)| t == o || *o == 0);
    }
    if let Some(from) = first_diff {
        // What a power cut leaves of an append: the WAL ends early, or shows zeros (a page
        // that never reached the disk, wherever it lies) or a torn line (no newline after
        // where it first differs). Whole lines that differ otherwise are damage or an
        // edit, no power cut's: the WAL is read as it is (and reported corrupt).
        if !only_zeros && newline_after(&file, base + from as u64, len)? {
            return Ok(None);
        }
        for c in &chunks {
            file.write_all_at(payload(c), c.offset)?;
        }
        file.sync_data()?;
    }
    Ok(Some(RingTail {
        pos: last.at + HEADER + u64::from(last.len),
        base,
        end,
    }))
}

/// Whether the WAL open as `file` holds a newline in `[from, len)`.
fn newline_after(file: &File, from: u64, len: u64) -> std::io::Result<bool> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = from;
    while at < len {
        let n = file.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        if buf[..n].contains(&b'\n') {
            return Ok(true);
        }
        at += n as u64;
    }
    Ok(false)
}

/// End the chain of the WAL at `wal`, durably, before the WAL is cut (a torn tail the next
/// writer removes): bytes written after the cut must never be overwritten by the chain's.
pub fn invalidate(wal: &Path) -> std::io::Result<()> {
    let dir = wal.parent().expect("a WAL path has a parent");
    match OpenOptions::new().write(true).open(dir.join(RING_NAME)) {
        Ok(f) => {
            f.write_all_at(&[0u8; HEADER as usize], 0)?;
            f.sync_data()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Remove the ring of the WAL at `wal` (a new WAL is created at its path: a chain of
/// another history must never be folded into it).
pub fn remove(wal: &Path) -> std::io::Result<()> {
    let dir = wal.parent().expect("a WAL path has a parent");
    match std::fs::remove_file(dir.join(RING_NAME)) {
        Ok(()) => File::open(dir)?.sync_all(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Retire the ring of the WAL at `wal`, a WAL that will never be appended to again (its
/// session closed) and whose ring was folded back: the WAL is synced, then the ring removed
/// (nothing to do where there is no ring).
pub fn retire(wal: &Path) -> std::io::Result<()> {
    let dir = wal.parent().expect("a WAL path has a parent");
    if std::fs::symlink_metadata(dir.join(RING_NAME)).is_err() {
        return Ok(());
    }
    File::open(wal)?.sync_data()?;
    remove(wal)
}

/// Set the ring of the WAL at `wal` aside, as `wal.ring.set-aside` (replacing an older
/// one), durably, before the WAL is cut by `recover --truncate-corrupt`: its chain is never
/// folded over the cut, and its bytes stay for whoever wants to look at them.
pub fn set_aside(wal: &Path) -> std::io::Result<()> {
    let dir = wal.parent().expect("a WAL path has a parent");
    match std::fs::rename(
        dir.join(RING_NAME),
        dir.join(format!("{RING_NAME}.set-aside")),
    ) {
        Ok(()) => File::open(dir)?.sync_all(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The ring side of a WAL's appender: chooses, for each durable append, between a chunk in
/// the ring and a sync of the WAL.
pub(crate) struct RingWriter {
    dir: PathBuf,
    /// The WAL's id (`None`: no ring for this WAL).
    id: Option<u32>,
    ring: Option<File>,
    /// How often this appender synced the WAL itself: the ring is made at the
    /// [`MAKE_AT`]th (a command that syncs a few times gains less than the ring costs).
    syncs: u32,
    /// A chain is open: the WAL is durable through its `base`, the chunks through `covered`.
    open: bool,
    base: u64,
    pos: u64,
    covered: u64,
    /// The WAL's bytes after `covered`, while a chain is open.
    pending: Vec<u8>,
}

impl RingWriter {
    /// For the WAL open as `wal` at `path`, `keep` bytes long, going on from `tail` (what the
    /// lease's fold found) when the chain ends where the WAL does.
    pub(crate) fn open(path: &Path, wal: &File, keep: u64, tail: Option<RingTail>) -> Self {
        let dir = path
            .parent()
            .expect("a WAL path has a parent")
            .to_path_buf();
        let id = wal_id(wal).ok().flatten();
        let ring = id.and_then(|_| {
            OpenOptions::new()
                .write(true)
                .open(dir.join(RING_NAME))
                .ok()
                .filter(|f| f.metadata().is_ok_and(|m| m.len() == RING_BYTES))
        });
        // The chain goes on where it ends; what the WAL holds after it (the last record of
        // the previous command, which rode on no sync) goes into the next chunk.
        let after = |t: &RingTail| -> Option<Vec<u8>> {
            let n = keep.checked_sub(t.end)?;
            if ring.is_none() || t.pos + HEADER + n > RING_BYTES {
                return None;
            }
            let mut buf = vec![0u8; n as usize];
            wal.read_exact_at(&mut buf, t.end).ok()?;
            Some(buf)
        };
        let go_on = tail.and_then(|t| Some((t, after(&t)?)));
        RingWriter {
            dir,
            id,
            open: go_on.is_some(),
            base: go_on.as_ref().map_or(keep, |(t, _)| t.base),
            pos: go_on.as_ref().map_or(0, |(t, _)| t.pos),
            covered: go_on.as_ref().map_or(keep, |(t, _)| t.end),
            pending: go_on.map(|(_, b)| b).unwrap_or_default(),
            ring,
            syncs: 0,
        }
    }

    /// `bytes` were appended to the WAL.
    pub(crate) fn appended(&mut self, bytes: &[u8]) {
        if !self.open {
            return;
        }
        if self.pending.len() + bytes.len() > RING_BYTES as usize {
            // More than a chunk can hold: the next durable append syncs the WAL itself.
            self.open = false;
            self.pending = Vec::new();
            return;
        }
        self.pending.extend_from_slice(bytes);
    }

    /// Make every byte appended to `wal` (`len` long now) durable: one chunk in the ring
    /// when it fits, else a sync of the WAL, after which a new chain begins.
    pub(crate) fn make_durable(&mut self, wal: &File, len: u64) -> std::io::Result<()> {
        if self.open && self.pending.is_empty() && self.covered == len {
            return Ok(());
        }
        if let (true, Some(ring), Some(id)) = (self.open, &self.ring, self.id) {
            let need = HEADER + self.pending.len() as u64;
            if self.pos + need <= RING_BYTES {
                let mut chunk = Vec::with_capacity(need as usize);
                chunk.extend_from_slice(&header(id, self.covered, self.base, &self.pending));
                chunk.extend_from_slice(&self.pending);
                ring.write_all_at(&chunk, self.pos)?;
                ring.sync_data()?;
                self.pos += need;
                self.covered = len;
                self.pending.clear();
                return Ok(());
            }
        }
        wal.sync_data()?;
        self.pending.clear();
        self.covered = len;
        self.base = len;
        self.pos = 0;
        self.syncs += 1;
        if self.ring.is_none() && self.syncs >= MAKE_AT && self.id.is_some() {
            // Made once, whole (zeros written, not a hole: a later chunk overwrites blocks
            // the file has, so its sync commits no metadata), synced with its directory.
            // A ring that cannot be made leaves the WAL synced as before.
            self.ring = make(&self.dir).ok();
        }
        self.open = self.ring.is_some();
        Ok(())
    }
}

fn make(dir: &Path) -> std::io::Result<File> {
    let tmp = dir.join(".wal.ring.tmp");
    let res = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(&vec![0u8; RING_BYTES as usize])?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(RING_NAME))?;
        File::open(dir)?.sync_all()?;
        OpenOptions::new().write(true).open(dir.join(RING_NAME))
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(ring: &mut [u8], at: usize, id: u32, offset: u64, base: u64, p: &[u8]) -> usize {
        let h = header(id, offset, base, p);
        ring[at..at + HEADER as usize].copy_from_slice(&h);
        ring[at + HEADER as usize..at + HEADER as usize + p.len()].copy_from_slice(p);
        at + HEADER as usize + p.len()
    }

    #[test]
    fn a_chain_stops_at_a_chunk_of_another_history_or_garbage() {
        let mut ring = vec![0u8; 4096];
        let a = b"{\"record\":\"x\"}\n".to_vec();
        let n = a.len() as u64;
        let at = put(&mut ring, 0, 7, 100, 100, &a);
        // Not where the first ended: an older chain's chunk.
        put(&mut ring, at, 7, 90, 90, &a);
        assert_eq!(chain(&ring, 7).len(), 1);
        assert_eq!(chain(&ring, 8).len(), 0, "another WAL's ring");
        // Where the first ended, but of another chain (another base).
        put(&mut ring, at, 7, 100 + n, 100 + n, &a);
        assert_eq!(chain(&ring, 7).len(), 1);
        let end = put(&mut ring, at, 7, 100 + n, 100, &a);
        assert_eq!(chain(&ring, 7).len(), 2);
        ring[at + 3] ^= 1;
        assert_eq!(chain(&ring, 7).len(), 1, "a torn header ends the chain");
        ring[at + 3] ^= 1;
        ring[end - 2] ^= 1;
        assert_eq!(chain(&ring, 7).len(), 1, "a torn payload ends the chain");
        // Offsets and lengths that would overflow end it, never panic.
        let mut ring = vec![0u8; 4096];
        let at = put(&mut ring, 0, 7, u64::MAX - 3, u64::MAX - 3, &a);
        put(&mut ring, at, 7, 0, u64::MAX - 3, &a);
        assert!(chain(&ring, 7).is_empty());
        let mut h = header(7, 5, 5, &a);
        h[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32c::crc32c(&h[..36]);
        h[36..40].copy_from_slice(&crc.to_le_bytes());
        let mut ring = vec![0u8; 4096];
        ring[..40].copy_from_slice(&h);
        assert!(chain(&ring, 7).is_empty(), "a length past the file");
    }
}
