//! The base-tree packs a remote's cache keeps whole (`<store>/remotes/NAME/mirror/packs/<tree
//! digest>`, docs/fleet.md, "Reading a remote"): one file for a base tree's small blobs
//! instead of a file each. A pack is kept only once every entry was checked against its
//! digest; the blob store checks each blob again whenever it reads one, so a pack damaged
//! since is a damaged blob like any other (fetched again from the remote, loose).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, Read, Seek};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The packs of one cache, and where each blob they hold lies (learned from the packs'
/// headers, only when a blob is looked for that no loose file holds).
pub(crate) struct Packs {
    dir: PathBuf,
    index: Mutex<Index>,
}

#[derive(Default)]
struct Index {
    /// The pack files already read (a pack is only ever added whole, by rename).
    read: HashSet<OsString>,
    /// digest → (its pack, where its bytes start, how many). A pack is opened for each
    /// read, not held open: a cache of many sessions holds many packs.
    at: HashMap<String, (Arc<PathBuf>, u64, u64)>,
}

impl Packs {
    pub(crate) fn new(dir: PathBuf) -> Packs {
        Packs {
            dir,
            index: Mutex::default(),
        }
    }

    /// Keep `bytes`, a pack whose every entry was checked against its digest, as the pack
    /// of the base tree `tree`: written beside its place, synced, and renamed into it, the
    /// directory synced, before the cache records the session as pulled (a power cut must
    /// not leave an empty pack where a whole one was believed). Every read still checks
    /// what it reads.
    pub(crate) fn keep(&self, tree: &str, bytes: &[u8]) -> std::io::Result<()> {
        let written = self.write(tree, bytes);
        // Read again at the next look (it may replace a pack read before).
        let mut idx = self.index.lock().unwrap_or_else(|e| e.into_inner());
        idx.read.remove(std::ffi::OsStr::new(tree));
        let path = self.dir.join(tree);
        idx.at.retain(|_, (p, _, _)| **p != path);
        written
    }

    /// [`Packs::keep`] without touching what was read of the packs: for the `again` of
    /// [`Packs::find`], which reads the pack it replaces right after.
    /// (Its temporary file's name starts with a dot: never read as a pack.)
    pub(crate) fn write(&self, tree: &str, bytes: &[u8]) -> std::io::Result<()> {
        revl_core::util::write_durable(&self.dir.join(tree), bytes)
    }

    /// Where the blob `digest` lies in a pack, if one holds it (packs added since the last
    /// look are read first). A pack whose headers do not read whole (cut short by a power
    /// cut, or altered) is handed to `again`, which fetches it again from the remote (by
    /// its name, the base tree's digest) and writes it in its place ([`Packs::write`]) if
    /// it is intact there; whatever of it still reads is used either way.
    fn find(&self, digest: &str, again: &dyn Fn(&str) -> bool) -> Option<(Arc<PathBuf>, u64, u64)> {
        let mut idx = self.index.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = idx.at.get(digest) {
            return Some(at.clone());
        }
        let names: Vec<OsString> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| !n.to_string_lossy().starts_with('.') && !idx.read.contains(n))
            .collect();
        for name in names {
            idx.read.insert(name.clone());
            let open = || revl_core::util::open_regular_nofollow(&self.dir.join(&name)).ok();
            // Not followed if a symlink; a file that is not a pack holds nothing.
            let Some(mut f) = open() else {
                continue;
            };
            let (mut entries, whole) = entries_of(&f);
            if !whole && again(&name.to_string_lossy()) {
                if let Some(g) = open() {
                    f = g;
                    entries = entries_of(&f).0;
                }
            }
            let path = Arc::new(self.dir.join(&name));
            for (d, start, len) in entries {
                idx.at
                    .entry(d)
                    .or_insert_with(|| (path.clone(), start, len));
            }
        }
        idx.at.get(digest).cloned()
    }

    /// The blob's bytes as a pack holds them (unchecked: the reader checks them), streamed.
    pub(crate) fn open(
        &self,
        digest: &str,
        again: &dyn Fn(&str) -> bool,
    ) -> Option<Box<dyn Read + Send>> {
        let (path, start, len) = self.find(digest, again)?;
        // Opened now (not followed if a symlink); one gone since reads as not held.
        let file = revl_core::util::open_regular_nofollow(&path).ok()?;
        Some(Box::new(Entry {
            file,
            at: start,
            end: start + len,
        }))
    }

    /// The size a pack states for the blob.
    pub(crate) fn size(&self, digest: &str, again: &dyn Fn(&str) -> bool) -> Option<u64> {
        self.find(digest, again).map(|(_, _, len)| len)
    }
}

/// One entry of a pack, read in place.
struct Entry {
    file: File,
    at: u64,
    end: u64,
}

impl Read for Entry {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = buf.len().min((self.end - self.at) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// `(digest, offset, length)` of each entry of the pack file `f` (the format of
/// [`crate::pack`]), read header by header without holding the entries, and whether the
/// whole file read as a pack (not cut short, no header that is not one: what read before
/// such a place is still given).
fn entries_of(f: &File) -> (Vec<(String, u64, u64)>, bool) {
    let mut out = Vec::new();
    let whole = read_entries(f, &mut out).is_some();
    (out, whole)
}

fn read_entries(f: &File, out: &mut Vec<(String, u64, u64)>) -> Option<()> {
    // A pack holds at least one entry: an empty file is one a power cut emptied.
    let total = Some(f.metadata().ok()?.len()).filter(|n| *n > 0)?;
    let mut r = std::io::BufReader::new(f);
    r.rewind().ok()?;
    let mut pos = 0u64;
    while pos < total {
        let mut line = |max: u64| -> Option<String> {
            let mut b = Vec::new();
            (&mut r).take(max).read_until(b'\n', &mut b).ok()?;
            pos += b.len() as u64;
            (b.pop() == Some(b'\n')).then_some(())?;
            String::from_utf8(b).ok()
        };
        let digest = line(80)?;
        let len: u64 = line(24)?.parse().ok()?;
        if len > total.saturating_sub(pos) {
            return None;
        }
        out.push((digest, pos, len));
        r.seek_relative(i64::try_from(len).ok()?).ok()?;
        pos += len;
    }
    Some(())
}
