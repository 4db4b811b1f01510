//! Small shared helpers: canonical JSON (JCS), digests, ids, RFC 3339 time.

use serde_json::Value;
use sha2::Digest as _;

/// Canonical JSON (RFC 8785) for documents of strings, integers, booleans, lists and
/// objects: compact, object keys sorted. `serde_json::Value` keeps objects in a BTreeMap,
/// so plain compact serialisation is canonical for the ASCII keys revl uses.
/// Text as a terminal may show it: every control character (C0, DEL, and C1 as UTF-8)
/// written as `\xNN` (a newline or tab as `\n`, `\t`), newlines and tabs kept as they are
/// when `keep_lines`; a byte of a name that is not UTF-8 (its escaped form, see
/// [`crate::name`]) written as `\xNN` too. A name or output a hostile command chose never
/// drives the terminal (escape sequences, a carriage return that hides a line). Works on
/// bytes; a stream cut into chunks is escaped by [`Visible`], which holds back a sequence
/// cut at the end of one chunk.
pub fn visible_bytes(raw: &[u8], keep_lines: bool) -> std::borrow::Cow<'_, [u8]> {
    if !(0..raw.len()).any(|i| special(raw, i, keep_lines).is_some()) {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut out = Vec::with_capacity(raw.len() + 16);
    let mut i = 0;
    while i < raw.len() {
        match special(raw, i, keep_lines) {
            None => {
                out.push(raw[i]);
                i += 1;
            }
            Some((n, byte)) => {
                match byte {
                    b'\n' => out.extend_from_slice(b"\\n"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    b => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                }
                i += n;
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// At `raw[i]`: a character to escape, as (its length in bytes, the byte to show). C0
/// controls and DEL are one byte; a C1 control is `C2 80..9F` (shown as its code point); a
/// reserved character standing for a byte of a non-UTF-8 name is `F4 8F BE|BF xx` (shown as
/// that byte).
fn special(raw: &[u8], i: usize, keep_lines: bool) -> Option<(usize, u8)> {
    let b = raw[i];
    if (b < 0x20 && !(keep_lines && (b == b'\n' || b == b'\t'))) || b == 0x7f {
        return Some((1, b));
    }
    if b == 0xc2 && raw.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)) {
        return Some((2, raw[i + 1]));
    }
    if b == 0xf4 && raw.get(i + 1) == Some(&0x8f) {
        if let (Some(&c), Some(&d)) = (raw.get(i + 2), raw.get(i + 3)) {
            if c == 0xbe || c == 0xbf {
                // U+10FF80..=U+10FFFF: byte 0x80 + ((c & 1) << 6) + (d & 0x3f).
                return Some((4, 0x80 | ((c & 1) << 6) | (d & 0x3f)));
            }
        }
    }
    None
}

/// A stream's bytes made visible chunk by chunk ([`visible_bytes`] with lines kept): a
/// sequence that may continue into the next chunk (a lone `C2`, or the start of a reserved
/// character) is held back until it does, so a control character split across two writes of
/// a command never reaches the terminal.
#[derive(Debug, Default)]
pub struct Visible {
    held: Vec<u8>,
}

impl Visible {
    /// The visible form of what can be shown of `chunk` now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut all = std::mem::take(&mut self.held);
        all.extend_from_slice(chunk);
        let keep = held_tail(&all);
        self.held = all.split_off(all.len() - keep);
        visible_bytes(&all, true).into_owned()
    }

    /// What is still held at the end of the stream, made visible.
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.held);
        visible_bytes(&rest, true).into_owned()
    }
}

/// How many bytes at the end of `b` may be the start of an escaped sequence cut short.
fn held_tail(b: &[u8]) -> usize {
    let n = b.len();
    match b {
        [.., 0xc2] => 1,
        [.., 0xf4] => 1,
        [.., 0xf4, 0x8f] => 2,
        [.., 0xf4, 0x8f, 0xbe | 0xbf] => 3,
        _ => 0,
    }
    .min(n)
}

/// [`visible_bytes`] for text.
pub fn visible(s: &str, keep_lines: bool) -> String {
    String::from_utf8_lossy(&visible_bytes(s.as_bytes(), keep_lines)).into_owned()
}

pub fn jcs(v: &Value) -> String {
    json_text(v)
}

/// `v` as compact JSON text, byte for byte what `serde_json::to_string` writes (object keys
/// in the map's order, which is sorted), except that a string with nothing to escape is
/// copied whole instead of escaped byte by byte: a file's inline bytes are kilobytes of
/// base64, and escaping them was most of a witnessed write's CPU (docs/performance.md).
pub fn json_text(v: &Value) -> String {
    let mut out = String::with_capacity(64);
    write_json(v, &mut out);
    out
}

fn write_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            use std::fmt::Write;
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_json_str(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_str(k, out);
                out.push(':');
                write_json(x, out);
            }
            out.push('}');
        }
    }
}

/// True when JSON must escape some byte of `s` (a control character, `"` or `\`). Checked
/// a block at a time without branches inside a block, so the compiler can vectorise it.
pub fn json_needs_escape(s: &str) -> bool {
    s.as_bytes().chunks(64).any(|c| {
        c.iter().fold(false, |acc, &b| {
            acc | (b < 0x20) | (b == b'"') | (b == b'\\')
        })
    })
}

fn write_json_str(s: &str, out: &mut String) {
    if json_needs_escape(s) {
        out.push_str(&serde_json::to_string(s).expect("a string serialises"));
    } else {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
    }
}

/// Serialise a string member that is almost always plain (base64, hex) without escaping it
/// byte by byte: written verbatim when nothing in it needs escaping (the same bytes).
pub fn ser_plain_str<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    if json_needs_escape(v) {
        return s.serialize_str(v);
    }
    let mut text = String::with_capacity(v.len() + 2);
    text.push('"');
    text.push_str(v);
    text.push('"');
    serde_json::value::RawValue::from_string(text)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

/// SHA-256 hex of the canonical JSON of `v` (argsDigest, commit hash, fork hash).
pub fn sha256_jcs(v: &Value) -> String {
    hex::encode(sha2::Sha256::digest(jcs(v).as_bytes()))
}

/// blake3 hex of bytes: blob names and post-image digests.
pub fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Bytes per read when a file is streamed (hashing, copying into or out of the blob store):
/// the memory a large file costs, whatever its size.
pub const STREAM_CHUNK: usize = 1 << 20;

/// The blake3 hex of everything `r` yields, read a chunk at a time; and how many bytes.
pub fn blake3_reader(mut r: impl std::io::Read) -> std::io::Result<(String, u64)> {
    with_chunk(|buf| {
        let mut h = blake3::Hasher::new();
        let mut n = 0u64;
        loop {
            match r.read(buf) {
                Ok(0) => return Ok((h.finalize().to_hex().to_string(), n)),
                Ok(k) => {
                    h.update(&buf[..k]);
                    n += k as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    })
}

thread_local! {
    static CHUNK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Run `f` on a buffer of [`STREAM_CHUNK`] bytes, the thread's own (allocated and zeroed
/// once, not for every file: verifying or copying 10,000 small blobs would otherwise zero
/// 10 GB); a nested call gets a buffer of its own.
pub fn with_chunk<T>(f: impl FnOnce(&mut [u8]) -> T) -> T {
    CHUNK.with(|c| match c.try_borrow_mut() {
        Ok(mut b) => {
            if b.len() != STREAM_CHUNK {
                *b = vec![0u8; STREAM_CHUNK];
            }
            f(&mut b)
        }
        Err(_) => f(&mut vec![0u8; STREAM_CHUNK]),
    })
}

/// [`blake3_reader`] of a source expected to hold about `len` bytes: its buffer is no
/// larger than that needs (a drift scan hashes 100,000 small files; zeroing a whole chunk
/// for each cost more than hashing them).
pub fn blake3_reader_sized(mut r: impl std::io::Read, len: u64) -> std::io::Result<(String, u64)> {
    let mut h = blake3::Hasher::new();
    let size = len.saturating_add(1).clamp(4096, STREAM_CHUNK as u64) as usize;
    let mut buf = vec![0u8; size];
    let mut n = 0u64;
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                h.update(&buf[..k]);
                n += k as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((h.finalize().to_hex().to_string(), n))
}

/// `f` of each of `items`, in order, spread over the machine's cores (up to four threads,
/// each taking one contiguous run of the items: files of one directory stay on one
/// thread). For work on many small files, where the kernel's per-file work is the cost.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    if threads <= 1 || items.len() < 64 {
        return items.iter().map(f).collect();
    }
    let per = items.len().div_ceil(threads);
    std::thread::scope(|sc| {
        let runs: Vec<_> = items
            .chunks(per)
            .map(|run| sc.spawn(|| run.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        runs.into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// A fresh 32-hex id (sessions, branches, tickets).
pub fn new_id() -> String {
    let mut b = [0u8; 16];
    // getrandom only fails when the OS has no entropy source at all; fall back to time+pid
    // so an id is still unique on this machine rather than panicking.
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b[..16].copy_from_slice(&(t ^ ((std::process::id() as u128) << 64)).to_le_bytes());
    }
    hex::encode(b)
}

/// Wall-clock time as RFC 3339 UTC (informational only; never used for ordering).
pub fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, dd) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Create `dir` and any missing parent (with `mode`, when given), each made durable: after a
/// directory is made, its parent is fsynced, so a power loss cannot take back an entry a
/// later record relies on (a store, a workspace).
pub fn create_dir_durable(dir: &std::path::Path, mode: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    let sync_parent =
        || std::fs::File::open(parent.unwrap_or(std::path::Path::new(".")))?.sync_all();
    if dir.is_dir() {
        // Made by a process that may have died before its parent's fsync: fsynced again
        // (cheap when nothing is dirty), as what is created in it will rely on it.
        return sync_parent();
    }
    if let Some(p) = parent {
        create_dir_durable(p, mode)?;
    }
    let mut b = std::fs::DirBuilder::new();
    if let Some(m) = mode {
        b.mode(m);
    }
    match b.create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(e) => return Err(e),
    }
    sync_parent()
}

/// Remove a file and make its removal durable (fsync of its directory). A file that is not
/// there is not an error.
pub fn remove_file_durable(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(d) => std::fs::File::open(d)?.sync_all(),
        None => Ok(()),
    }
}

/// This boot of the machine (`/proc/sys/kernel/random/boot_id`): after a power loss the
/// machine boots again, so a different id says that writes not fsynced before may be lost.
/// `REVL_BOOT_ID` overrides it: the power-cut tests restart "the machine" (a FUSE layer that
/// drops what was not fsynced) without rebooting the kernel. `None` where neither is there
/// (no procfs): a power loss could not be told from a crash, so no write waits for it.
pub fn boot_id() -> Option<&'static str> {
    static ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        std::env::var("REVL_BOOT_ID")
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    })
    .as_deref()
}

/// Whether `syncfs` on the filesystem holding `path` makes its writes durable. Not on FUSE:
/// the kernel never forwards `syncfs` to a FUSE server (only fsync and fsyncdir reach it),
/// so there every file and directory must be fsynced one by one.
pub fn syncfs_persists(path: &std::path::Path) -> bool {
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    rustix::fs::statfs(path).map_or(true, |s| s.f_type != FUSE_SUPER_MAGIC)
}

/// Make the whole tree at `root` durable: one `syncfs`, or where that persists nothing
/// (see [`syncfs_persists`]) an fsync of every file and directory, children first, and of
/// the directory that holds `root`.
pub fn sync_tree(root: &std::path::Path) -> std::io::Result<()> {
    if syncfs_persists(root) {
        let f = std::fs::File::open(root)?;
        return rustix::fs::syncfs(&f).map_err(Into::into);
    }
    fn walk(p: &std::path::Path) -> std::io::Result<()> {
        for e in std::fs::read_dir(p)? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                walk(&e.path())?;
            } else if t.is_file() {
                std::fs::File::open(e.path())?.sync_all()?;
            }
        }
        std::fs::File::open(p)?.sync_all()
    }
    walk(root)?;
    // And the root's own entry in its parent.
    match root.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => std::fs::File::open(parent)?.sync_all(),
        _ => Ok(()),
    }
}

/// Copy all of `from` into `to` (both at offset 0, `to` empty), keeping holes: only the
/// data extents are copied (`SEEK_DATA`/`SEEK_HOLE`), so a sparse file stays sparse. Where
/// the filesystem cannot say, the whole file is copied.
pub fn copy_sparse(from: &mut std::fs::File, to: &mut std::fs::File) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let len = from.metadata()?.len();
    let mut off = 0u64;
    while off < len {
        let data = match rustix::fs::seek(&*from, rustix::fs::SeekFrom::Data(off)) {
            Ok(d) => d,
            Err(rustix::io::Errno::NXIO) => break, // only a hole is left
            Err(rustix::io::Errno::INVAL) if off == 0 => 0, // no SEEK_DATA here
            Err(e) => return Err(e.into()),
        };
        let hole = rustix::fs::seek(&*from, rustix::fs::SeekFrom::Hole(data)).unwrap_or(len);
        from.seek(SeekFrom::Start(data))?;
        to.seek(SeekFrom::Start(data))?;
        let n = std::io::copy(&mut (&mut *from).take(hole - data), to)?;
        if n < hole - data {
            break; // it shrank meanwhile
        }
        off = hole;
    }
    to.set_len(len)
}

/// Replace `path` with `bytes` durably: a temp file beside it (an unguessable name, created
/// new, so a symlink planted there redirects nothing), fsynced, renamed into place, the
/// directory fsynced.
pub fn write_durable(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), new_id()));
    let r = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// Open `path` to read only if it is a regular file, never through a symlink (the last
/// component) and never blocking on a FIFO: for files another program wrote that revl reads
/// as untrusted input (an agent's transcript).
pub fn open_regular_nofollow(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let f = std::fs::File::from(fd);
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok(f)
}

/// A program's name as labels show it: the last component of argv[0] (`/usr/bin/curl` →
/// `curl`), or argv[0] itself when it has none.
pub fn program_name(argv0: &str) -> String {
    std::path::Path::new(argv0)
        .file_name()
        .map_or_else(|| argv0.to_string(), |n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// par_map gives every item's result, in the items' order, whatever thread ran it.
    #[test]
    fn par_map_keeps_the_order_of_its_items() {
        for n in [0usize, 1, 63, 64, 65, 1000, 1001] {
            let items: Vec<usize> = (0..n).collect();
            let got = par_map(&items, |i| (i * 7, std::thread::current().id()));
            assert_eq!(
                got.iter().map(|g| g.0).collect::<Vec<_>>(),
                items.iter().map(|i| i * 7).collect::<Vec<_>>()
            );
        }
    }

    /// Threads putting the same bytes at once each succeed, and the blob is intact (each
    /// put writes a file of its own before the rename).
    #[test]
    fn the_same_blob_put_by_many_threads_at_once_is_stored_intact() {
        use crate::storage::{Blobs, Durability, LocalBlobs};
        let dir = std::env::temp_dir().join(format!("revl-par-put-{}", new_id()));
        let blobs = LocalBlobs::new(dir.join("blobs"));
        let bytes = vec![7u8; 256 << 10];
        let digest = blake3_hex(&bytes);
        for round in 0..20 {
            let _ = std::fs::remove_dir_all(&dir);
            let jobs: Vec<usize> = (0..256).collect();
            let got = par_map(&jobs, |_| blobs.put(&digest, &bytes, Durability::Cached));
            for r in got {
                r.unwrap_or_else(|e| panic!("round {round}: a put failed: {e}"));
            }
            let mut held = Vec::new();
            std::io::Read::read_to_end(&mut blobs.open(&digest).unwrap().unwrap(), &mut held)
                .unwrap();
            assert_eq!(blake3_hex(&held), digest, "round {round}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// json_text is serde_json's compact text, byte for byte, whatever the strings hold.
    #[test]
    fn json_text_is_serde_jsons_text() {
        let long_plain = "QUJD".repeat(2000);
        let mut long_escaped = "x".repeat(100);
        long_escaped.push('"');
        long_escaped.push_str(&"y".repeat(100));
        let v = serde_json::json!({
            "z": [1, -2, 3.5, 1e300, 0.1, u64::MAX, i64::MIN, null, true, false],
            "a": {"nested": {"k\u{1}": "tab\there", "q": "a\"b\\c", "ctl": "\u{7f}\u{1f}\n\r\u{8}\u{c}"}},
            "unicode": "é ✓ 𝄞 /slash",
            "plain": long_plain,
            "escaped": long_escaped,
            "": "",
            "empty": {}, "none": [],
        });
        assert_eq!(json_text(&v), serde_json::to_string(&v).unwrap());
        for s in [
            "",
            "\"",
            "abc\\",
            &"a".repeat(63),
            &format!("{}\n", "a".repeat(64)),
            &format!("{}\u{0}", "b".repeat(200)),
        ] {
            assert_eq!(
                json_text(&Value::from(s)),
                serde_json::to_string(s).unwrap(),
                "{s:?}"
            );
            #[derive(serde::Serialize)]
            struct W<'a>(#[serde(serialize_with = "ser_plain_str")] &'a str);
            assert_eq!(
                serde_json::to_string(&W(s)).unwrap(),
                serde_json::to_string(s).unwrap()
            );
        }
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_789), (2026, 12, 2));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn jcs_sorts_keys() {
        let v = serde_json::json!({"b": 1, "a": [2, {"d": 1, "c": "x"}]});
        assert_eq!(jcs(&v), r#"{"a":[2,{"c":"x","d":1}],"b":1}"#);
    }
}
