//! Writing a WAL: the appending writer (poisoned after a failed write or fsync) and atomic
//! creation of a whole new WAL.

use crate::error::{Code, Error, Result};
use crate::failpoint::Failpoints;

use super::line::*;
use super::read::WalRead;
use super::record::Record;
use crate::storage::{Appender, Durability, Journals};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Appends records to one WAL. After any failed write or fsync the writer is poisoned and
/// refuses further writes until the session is attached again (an fsync is never retried).
pub struct WalWriter {
    out: Box<dyn Appender>,
    path: PathBuf,
    next_seq: u64,
    records: usize,
    dirty: bool,
    poisoned: bool,
    fp: Failpoints,
    /// Bytes of whole records in the file: where the reader's intact prefix ended, plus
    /// every line this writer wrote.
    len: u64,
    /// The seq of the last record in the file that carries one.
    last_seq: u64,
}

impl WalWriter {
    /// Append through `out` (opened by the store's journals, a torn tail already cut:
    /// docs/architecture.md, "Storage traits and their guarantees"), after what `read` said
    /// the WAL holds.
    pub fn over(read: &WalRead, out: Box<dyn Appender>, fp: Failpoints) -> Self {
        WalWriter {
            out,
            path: read.path.clone(),
            next_seq: read.last_seq + 1,
            records: read.records.len(),
            dirty: false,
            poisoned: false,
            fp,
            len: read.good_len,
            last_seq: read.last_seq,
        }
    }

    /// The seq the next seq-taking record will carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Reserve a seq for a record about to be appended.
    pub fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn set_records(&mut self, n: usize) {
        self.records = n;
    }

    /// Where the WAL ends now, when none of this writer's writes failed: `(byte length, last
    /// seq, records)` (records waiting for their group commit included: they are in the file
    /// every reader sees). `None` for a poisoned writer.
    pub fn end(&self) -> Option<(u64, u64, usize)> {
        (!self.poisoned).then_some((self.len, self.last_seq, self.records))
    }

    /// Bytes of whole records in the file (what was read, and what this writer appended).
    pub fn byte_len(&self) -> u64 {
        self.len
    }

    /// Number of records in the WAL (header included).
    pub fn records(&self) -> usize {
        self.records
    }

    /// Append one record. `durable` = fsync before returning (announcing records);
    /// otherwise the record is group-committed by the next [`WalWriter::sync`].
    pub fn append(&mut self, rec: &Record, durable: bool) -> Result<()> {
        self.append_many(std::slice::from_ref(rec), durable)
    }

    /// Append several records in one write (an emission and its compensation go out together).
    pub fn append_many(&mut self, recs: &[Record], durable: bool) -> Result<()> {
        if self.poisoned {
            return Err(Error::new(
                Code::Io,
                format!("an earlier write to {} failed", self.path.display()),
                "run the command again: revl re-reads the WAL and repairs before writing",
            ));
        }
        let mut buf = Vec::new();
        for r in recs {
            buf.extend(encode_line(r));
        }
        if self.fp.fires("wal.torn-append") {
            let half = buf.len() / 2;
            let _ = self.out.append(&buf[..half], Durability::Synced);
            crate::failpoint::crash("wal.torn-append");
        }
        let durability = if durable {
            Durability::Synced
        } else {
            Durability::Cached
        };
        let res = self
            .fp
            .enospc()
            .and_then(|_| self.out.append(&buf, durability));
        if let Err(e) = res {
            self.poisoned = true;
            // Best effort: do not leave a partial line behind for the next writer to mistake
            // for a torn tail of an acknowledged record (it would be one anyway: unacknowledged).
            return Err(Error::io(
                format!("cannot append to WAL {}", self.path.display()),
                e,
            ));
        }
        self.records += recs.len();
        self.len += buf.len() as u64;
        if let Some(s) = recs.iter().rev().find_map(Record::seq) {
            self.last_seq = s;
        }
        self.dirty = !durable;
        Ok(())
    }

    /// Make every appended record durable (group commit of outcome records).
    pub fn sync(&mut self) -> Result<()> {
        if self.poisoned {
            return Err(Error::new(
                Code::Io,
                format!("an earlier write to {} failed", self.path.display()),
                "run the command again: revl re-reads the WAL and repairs before writing",
            ));
        }
        if self.dirty {
            if let Err(e) = self.out.sync() {
                self.poisoned = true;
                return Err(Error::io(
                    format!("cannot fsync WAL {}", self.path.display()),
                    e,
                ));
            }
            self.dirty = false;
        }
        Ok(())
    }
}

impl std::fmt::Debug for WalWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalWriter")
            .field("path", &self.path)
            .finish()
    }
}

/// The bytes of `recs` as WAL lines.
pub fn encode_records(recs: &[Record]) -> Vec<u8> {
    let mut buf = Vec::new();
    for r in recs {
        buf.extend(encode_line(r));
    }
    buf
}

/// Create session `id`'s WAL with its first records through the store's journals: it
/// appears complete or not at all; `wal` names it in the error.
pub fn create_journal(
    journals: &dyn Journals,
    id: &str,
    wal: &Path,
    recs: &[Record],
    fp: &Failpoints,
) -> Result<()> {
    fp.enospc()
        .and_then(|_| journals.create(id, &encode_records(recs)))
        .map_err(|e| Error::io(format!("cannot create WAL {}", wal.display()), e))
}

/// Write a whole new WAL (header and first records) by temp file, fsync, rename, and fsync of
/// the directory: it appears complete or not at all.
pub fn create_wal(path: &Path, recs: &[Record], fp: &Failpoints) -> Result<()> {
    let dir = path.parent().expect("a WAL path has a parent");
    let tmp = dir.join(".wal.jsonl.tmp");
    let mut buf = Vec::new();
    for r in recs {
        buf.extend(encode_line(r));
    }
    let res = (|| -> std::io::Result<()> {
        fp.enospc()?;
        let mut f = File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    res.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(format!("cannot create WAL {}", path.display()), e)
    })
}
