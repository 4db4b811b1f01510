//! Reading a whole WAL: the torn-tail, corruption, header and seq rules of
//! docs/wal-format.md, over a file read in pieces and decoded a block of lines at a time on
//! every core.

use super::line::*;
use super::record::Record;
use super::{OLDEST_WAL_VERSION, WAL_VERSION};
use crate::error::{Code, Error, Result};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A WAL as read from disk: records in order, whether the last line was torn, and the byte
/// length of the intact prefix (where the next writer truncates to).
#[derive(Debug)]
pub struct WalRead {
    pub path: PathBuf,
    pub records: Vec<Record>,
    pub torn: bool,
    pub good_len: u64,
    pub last_seq: u64,
}

impl WalRead {
    fn new(path: &Path, records: Vec<Record>, meta: WalMeta) -> Self {
        WalRead {
            path: path.to_path_buf(),
            records,
            torn: meta.torn,
            good_len: meta.good_len,
            last_seq: meta.last_seq,
        }
    }

    pub fn header(&self) -> Option<&Record> {
        self.records.first()
    }
}

/// Read and check a WAL file. A torn last line is reported and skipped; a bad line followed
/// by any good line is corruption (`corrupt-wal`, naming the path and line); an unknown
/// `walVersion` is refused.
pub fn read_wal(path: &Path) -> Result<WalRead> {
    let mut records = Vec::new();
    let meta = read_wal_each(path, |mut block| {
        records.append(&mut block);
        Ok(())
    })?;
    Ok(WalRead::new(path, records, meta))
}

/// Parse WAL bytes (see [`read_wal`]).
pub fn parse_wal(path: &Path, bytes: &[u8]) -> Result<WalRead> {
    let mut records = Vec::new();
    let meta = parse_wal_each(path, bytes, |mut block| {
        records.append(&mut block);
        Ok(())
    })?;
    Ok(WalRead::new(path, records, meta))
}

/// Where a WAL stops being readable (docs/wal-format.md, "Torn tails and corruption": a bad
/// line with a good one after it, a `seq` that goes back, a record replay rejects), for the
/// readers that show the intact records before it (`status`, `timeline`, `log`, `sessions`)
/// instead of refusing. `line` is the first unreadable line (1-based); every line before it
/// is intact.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Corrupt {
    pub line: usize,
    pub path: String,
    pub why: String,
}

/// What reading a WAL found, besides its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalMeta {
    pub torn: bool,
    /// Byte length of the intact prefix (where the next writer truncates to).
    pub good_len: u64,
    pub last_seq: u64,
    /// Intact records, header included.
    pub records: usize,
}

/// Lines decoded per block: each block is split across the cores, then handed to `sink` in
/// order, so a long WAL is never held as one vector of records.
pub(super) const BLOCK_LINES: usize = 1 << 17;

/// Check WAL bytes and hand the intact records to `sink` in order, in blocks (the same
/// checks as [`read_wal`]). An error from `sink` stops the read and is returned as is. On a
/// read error, the records accepted before the bad line are handed over first; on any
/// error, records already handed over must be discarded by the caller.
pub fn parse_wal_each(
    path: &Path,
    bytes: &[u8],
    mut sink: impl FnMut(Vec<Record>) -> Result<()>,
) -> Result<WalMeta> {
    let mut p = LineChecker::new(path, false);
    p.feed(bytes, 0, &mut sink)?;
    p.finish().map(|(meta, _)| meta)
}

/// Read a WAL file in pieces of about [`READ_CHUNK`] bytes, handing the intact records to
/// `sink` in blocks as in [`parse_wal_each`]: the file is never held whole, so reading a
/// long WAL touches little more memory than what the caller keeps.
pub fn read_wal_each(path: &Path, sink: impl FnMut(Vec<Record>) -> Result<()>) -> Result<WalMeta> {
    read_pieces(path, READ_CHUNK, sink)
}

/// Like [`read_wal_each`], but corruption after the header (a bad line with a good one
/// after it, a `seq` that goes back) ends the read instead of failing it: the intact
/// records before it are handed over and the corruption is returned with the meta. Every
/// other refusal (an unreadable header, an unknown `walVersion`, a record of a newer revl)
/// is still an error.
pub fn read_wal_prefix_each(
    path: &Path,
    sink: impl FnMut(Vec<Record>) -> Result<()>,
) -> Result<(WalMeta, Option<Corrupt>)> {
    read_pieces_mode(path, READ_CHUNK, true, sink)
}

/// Read what was appended to a WAL after an intact prefix read before (`from`: where it
/// ended, its last seq, its records), from `file` (the WAL, open), with the checks of
/// [`read_wal`] carried on from there: the first new line must follow the prefix's seq, a
/// bad line followed by a good one is corruption. The caller decides what a torn end means
/// (the meta says so); the prefix itself is not read again.
pub fn read_wal_after(
    path: &Path,
    file: &mut File,
    from: WalMeta,
) -> Result<(Vec<Record>, WalMeta)> {
    use std::io::{Seek, SeekFrom};
    let cannot = |e| Error::io(format!("cannot read WAL {}", path.display()), e);
    file.seek(SeekFrom::Start(from.good_len)).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(cannot)?;
    let mut p = LineChecker::new(path, false);
    p.meta = WalMeta {
        torn: false,
        ..from
    };
    p.line_no = from.records;
    let mut records = Vec::new();
    p.feed(&bytes, from.good_len, &mut |mut block| {
        records.append(&mut block);
        Ok(())
    })?;
    let (meta, _) = p.finish()?;
    Ok((records, meta))
}

pub(super) fn read_pieces(
    path: &Path,
    chunk: usize,
    sink: impl FnMut(Vec<Record>) -> Result<()>,
) -> Result<WalMeta> {
    read_pieces_mode(path, chunk, false, sink).map(|(meta, _)| meta)
}

fn read_pieces_mode(
    path: &Path,
    chunk: usize,
    lenient: bool,
    mut sink: impl FnMut(Vec<Record>) -> Result<()>,
) -> Result<(WalMeta, Option<Corrupt>)> {
    let cannot = |e| Error::io(format!("cannot read WAL {}", path.display()), e);
    let mut f = File::open(path).map_err(cannot)?;
    // A short WAL is read in one piece of its own size (the buffer is zero-filled).
    let len = f.metadata().map_or(chunk as u64, |m| m.len());
    let chunk = chunk.min(usize::try_from(len).unwrap_or(usize::MAX).saturating_add(1));
    let mut p = LineChecker::new(path, lenient);
    // `buf[..filled]` holds bytes read and not yet handed over; the rest is room. The
    // buffer is zeroed once when it grows, not before every read.
    let mut buf: Vec<u8> = Vec::new();
    let mut filled = 0usize;
    let mut base = 0u64;
    let mut eof = false;
    while !eof && p.corrupt_at.is_none() {
        // At least READ_CHUNK/2 of room, more when one line is longer. (Never zero room: a
        // read into no room would look like the end of the file.)
        if buf.len() - filled < chunk.div_ceil(2).max(1) {
            buf.resize(filled + chunk.max(filled).max(1), 0);
        }
        let n = loop {
            match f.read(&mut buf[filled..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(cannot(e)),
            }
        };
        filled += n;
        eof = n == 0;
        // Hand over the complete lines (all of it at the end of the file).
        let upto = if eof {
            filled
        } else {
            match memchr::memrchr(b'\n', &buf[..filled]) {
                Some(i) => i + 1,
                None => continue,
            }
        };
        p.feed(&buf[..upto], base, &mut sink)?;
        base += upto as u64;
        buf.copy_within(upto..filled, 0);
        filled -= upto;
    }
    p.finish()
}

/// Bytes read per piece by [`read_wal_each`].
const READ_CHUNK: usize = 16 << 20;

/// The torn/corrupt/header/seq rules of docs/wal-format.md, applied to a WAL fed in pieces of whole
/// lines (the last piece may end with a line that has no newline).
struct LineChecker<'p> {
    path: &'p Path,
    meta: WalMeta,
    /// A bad line is a torn tail only if no good line follows it.
    bad: Option<(usize, String)>,
    /// Corruption after the header ends a lenient read here (see [`read_wal_prefix_each`]).
    lenient: bool,
    corrupt_at: Option<Corrupt>,
    line_no: usize,
    spans: Vec<(usize, usize, bool)>,
    cores: usize,
}

impl<'p> LineChecker<'p> {
    fn new(path: &'p Path, lenient: bool) -> Self {
        LineChecker {
            path,
            meta: WalMeta {
                torn: false,
                good_len: 0,
                last_seq: 0,
                records: 0,
            },
            bad: None,
            lenient,
            corrupt_at: None,
            line_no: 0,
            spans: Vec::new(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
        }
    }

    fn corrupt(&self, line_no: usize, why: String) -> Error {
        corrupt_error(self.path, line_no, &why)
    }

    /// A line whose CRC is right and whose record this revl cannot decode: the version
    /// policy (docs/wal-format.md) refuses the whole WAL and never takes it for a torn tail.
    fn newer(&self, line_no: usize, e: &LineError) -> Error {
        Error::new(
            Code::NewerWal,
            format!(
                "WAL {} line {line_no} holds {e}: it was written by a newer revl (this is revl {}, which reads walVersion {OLDEST_WAL_VERSION} to {WAL_VERSION} with the records docs/wal-format.md lists); nothing was read past it, nothing was changed",
                self.path.display(),
                env!("CARGO_PKG_VERSION"),
            ),
            "use the newer revl that wrote this session; this one neither reads nor writes it",
        )
    }

    /// Stop at a refusal: corruption after the header ends a lenient read (its records so
    /// far stand); anything else is an error.
    fn stop(&mut self, s: Stop) -> Result<()> {
        match s {
            Stop::Corrupt(line, why) if self.lenient && self.meta.records > 0 => {
                self.corrupt_at = Some(Corrupt {
                    line,
                    path: self.path.display().to_string(),
                    why,
                });
                Ok(())
            }
            Stop::Corrupt(line, why) => Err(self.corrupt(line, why)),
            Stop::Hard(e) => Err(e),
        }
    }

    /// Check the lines of `bytes`, which start at file offset `base`.
    fn feed(
        &mut self,
        bytes: &[u8],
        base: u64,
        sink: &mut impl FnMut(Vec<Record>) -> Result<()>,
    ) -> Result<()> {
        /// A run of lines decoded: the good records in order, and the bad lines (by their
        /// index in the run). Records are moved as whole vectors from here on.
        #[derive(Default)]
        struct Decoded {
            records: Vec<Record>,
            bad: Vec<(usize, LineError)>,
        }
        let decode = |spans: &[(usize, usize, bool)]| -> Decoded {
            let mut d = Decoded {
                records: Vec::with_capacity(spans.len()),
                bad: Vec::new(),
            };
            for (i, span) in spans.iter().enumerate() {
                let r = if span.2 {
                    decode_line(&bytes[span.0..span.1])
                } else {
                    Err(LineError::Shape("last line has no newline"))
                };
                match r {
                    Ok(rec) => d.records.push(rec),
                    Err(e) => d.bad.push((i, e)),
                }
            }
            d
        };
        let mut pos = 0usize;
        while pos < bytes.len() && self.corrupt_at.is_none() {
            // Split the next block into lines (cheap) ...
            let mut spans = std::mem::take(&mut self.spans);
            spans.clear();
            while pos < bytes.len() && spans.len() < BLOCK_LINES {
                match memchr_nl(&bytes[pos..]) {
                    Some(i) => {
                        spans.push((pos, pos + i, true));
                        pos += i + 1;
                    }
                    None => {
                        spans.push((pos, bytes.len(), false));
                        pos = bytes.len();
                    }
                }
            }
            // ... decode it on every core (CRC + JSON is the cost) ...
            let threads = if spans.len() < 2_048 { 1 } else { self.cores };
            let per = spans.len().div_ceil(threads).max(1);
            let runs: Vec<Decoded> = if threads == 1 {
                vec![decode(&spans)]
            } else {
                std::thread::scope(|sc| {
                    let handles: Vec<_> = spans
                        .chunks(per)
                        .map(|c| sc.spawn(move || decode(c)))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_default())
                        .collect()
                })
            };
            let decoded: usize = runs.iter().map(|d| d.records.len() + d.bad.len()).sum();
            if decoded != spans.len() {
                return Err(self.corrupt(self.line_no + 1, "a decoder thread failed".into()));
            }
            // ... and walk the results in order, handing over each run whole.
            for (run, lines) in runs.into_iter().zip(spans.chunks(per)) {
                let Decoded { mut records, bad } = run;
                let mut bad = bad.into_iter().peekable();
                let mut good = 0usize;
                for (i, span) in lines.iter().enumerate() {
                    self.line_no += 1;
                    if let Some((_, e)) = bad.next_if(|(b, _)| *b == i) {
                        let stop = if let Some((n, why)) = self.bad.take() {
                            // Two bad lines: the first is not a torn tail.
                            Some(Stop::Corrupt(n, why))
                        } else if matches!(e, LineError::Unknown { .. }) {
                            // Written whole (its CRC is right): never torn, never skipped.
                            Some(Stop::Hard(self.newer(self.line_no, &e)))
                        } else {
                            None
                        };
                        if let Some(stop) = stop {
                            records.truncate(good);
                            sink(records)?;
                            return self.stop(stop);
                        }
                        self.bad = Some((self.line_no, e.to_string()));
                        continue;
                    }
                    if let Err(stop) = self.accept(&records[good]) {
                        records.truncate(good);
                        sink(records)?;
                        return self.stop(stop);
                    }
                    good += 1;
                    self.meta.good_len = base + (span.1 + usize::from(span.2)) as u64;
                }
                if !records.is_empty() {
                    sink(records)?;
                }
            }
            self.spans = spans;
        }
        Ok(())
    }

    /// The checks on a good line: what came before it, the header, `seq`.
    fn accept(&mut self, rec: &Record) -> std::result::Result<(), Stop> {
        if let Some((n, why)) = self.bad.take() {
            return Err(Stop::Corrupt(n, why));
        }
        if self.meta.records == 0 {
            match rec {
                Record::Header { wal_version, .. }
                    if (OLDEST_WAL_VERSION..=WAL_VERSION).contains(wal_version) => {}
                Record::Header { wal_version, .. } => {
                    return Err(Stop::Hard(Error::new(
                        Code::CorruptWal,
                        format!(
                            "WAL {} has walVersion {wal_version}; this revl ({}) reads walVersion {OLDEST_WAL_VERSION} to {WAL_VERSION} only; nothing was changed",
                            self.path.display(),
                            env!("CARGO_PKG_VERSION"),
                        ),
                        format!("use a revl release that reads walVersion {wal_version} (the one that wrote this WAL)"),
                    )))
                }
                _ => {
                    return Err(Stop::Hard(
                        self.corrupt(1, "first record is not a header".into()),
                    ))
                }
            }
        } else if let Some(s) = rec.seq() {
            // seq must strictly increase.
            if s <= self.meta.last_seq {
                return Err(Stop::Corrupt(
                    self.line_no,
                    format!(
                        "seq {s} does not increase (previous {})",
                        self.meta.last_seq
                    ),
                ));
            }
        }
        if let Some(s) = rec.seq() {
            self.meta.last_seq = s;
        }
        self.meta.records += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<(WalMeta, Option<Corrupt>)> {
        self.meta.torn = self.bad.is_some() && self.corrupt_at.is_none();
        if self.meta.records == 0 {
            let why = if self.meta.torn {
                "the header line is torn"
            } else {
                "the file is empty"
            };
            return Err(self.corrupt(1, why.into()));
        }
        Ok((self.meta, self.corrupt_at))
    }
}

/// Why a read stopped: corruption at a line (a lenient read keeps what came before), or
/// any other refusal.
enum Stop {
    Corrupt(usize, String),
    Hard(Error),
}

/// The `corrupt-wal` error of docs/wal-format.md for corruption at `line` of the WAL at
/// `path`. Past the header, the hint gives the way forward: the readers that show the
/// intact prefix, and `recover --truncate-corrupt`, which keeps it and moves the rest
/// aside.
pub(crate) fn corrupt_error(path: &Path, line: usize, why: &str) -> Error {
    let hint = if line > 1 {
        format!(
            "nothing was written to it; `status` and `timeline` show the {} intact record(s) before line {line}; to go on, `revl recover {} --truncate-corrupt` keeps them and moves line {line} and everything after it into a file next to the WAL (no byte is lost); or restore the WAL from a backup",
            line - 1,
            recover_target(path),
        )
    } else {
        "the file was changed outside revl; restore it from a backup (nothing was written to it)"
            .to_string()
    };
    Error::new(
        Code::CorruptWal,
        format!("corrupt WAL {} at line {line}: {why}", path.display()),
        hint,
    )
}

/// How `recover` names the session of the WAL at `path`: its id when the WAL sits at
/// `<store>/sessions/<id>/wal.jsonl`, else `--wal PATH`.
fn recover_target(path: &Path) -> String {
    match path
        .parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
    {
        Some(id) if crate::store::is_session_id(id) => id.to_string(),
        _ => format!("--wal {}", path.display()),
    }
}

fn memchr_nl(b: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', b)
}
