//! Pretty JSON in serde_json's layout, byte for byte, for documents with long arrays: the
//! entries of a long array are rendered on every core, in rounds, and written in order.
//!
//! The offline partition of a million-step WAL is a document of about 750,000 entries;
//! printing it on one core was a sixth of `revl branch --at -1`. An entry pretty-printed on
//! its own differs from the same entry nested in the document only by the indentation of
//! its lines, and JSON text never holds a raw newline outside whitespace (strings escape it,
//! recorded members come from single WAL lines), so each line break of the entry's own
//! rendering gets the nesting's indentation added.

use serde::Serialize;
use std::io::{self, Write};

/// Entries rendered per round (split across the cores), so the output is never held whole.
const ROUND: usize = 1 << 13;
/// Arrays shorter than this are rendered on the calling thread.
const PARALLEL_FROM: usize = 4096;

/// A top-level JSON object written member by member, as `serde_json::to_writer_pretty`
/// would write the whole object.
pub struct PrettyObject<W: Write> {
    out: W,
    empty: bool,
}

impl<W: Write> PrettyObject<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(b"{")?;
        Ok(PrettyObject { out, empty: true })
    }

    fn key(&mut self, key: &str) -> io::Result<()> {
        self.out
            .write_all(if self.empty { b"\n  " } else { b",\n  " })?;
        self.empty = false;
        serde_json::to_writer(&mut self.out, key)?;
        self.out.write_all(b": ")
    }

    /// One member.
    pub fn member(&mut self, key: &str, value: &impl Serialize) -> io::Result<()> {
        self.key(key)?;
        let mut buf = Vec::new();
        render(&mut buf, &mut Vec::new(), value, b"  ")?;
        self.out.write_all(&buf)
    }

    /// A member that is an array, its entries rendered on every core when it is long.
    pub fn array<T: Serialize + Sync>(&mut self, key: &str, items: &[T]) -> io::Result<()> {
        self.key(key)?;
        if items.is_empty() {
            return self.out.write_all(b"[]");
        }
        self.out.write_all(b"[\n")?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        for (r, round) in items.chunks(ROUND).enumerate() {
            if r > 0 {
                self.out.write_all(b",\n")?;
            }
            if round.len() < PARALLEL_FROM || cores == 1 {
                self.out.write_all(&entries(round)?)?;
                continue;
            }
            let per = round.len().div_ceil(cores);
            let parts: Vec<io::Result<Vec<u8>>> = std::thread::scope(|sc| {
                let handles: Vec<_> = round
                    .chunks(per)
                    .map(|part| sc.spawn(move || entries(part)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(io::Error::other("a JSON writer thread failed"))
                        })
                    })
                    .collect()
            });
            for (i, part) in parts.into_iter().enumerate() {
                if i > 0 {
                    self.out.write_all(b",\n")?;
                }
                self.out.write_all(&part?)?;
            }
        }
        self.out.write_all(b"\n  ]")
    }

    /// Close the object; the writer back.
    pub fn end(mut self) -> io::Result<W> {
        self.out.write_all(if self.empty { b"}" } else { b"\n}" })?;
        Ok(self.out)
    }
}

/// Entries of an array nested in the top-level object: each on its own indented lines,
/// separated by `,\n`.
fn entries<T: Serialize>(items: &[T]) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(items.len() * 128);
    let mut scratch = Vec::new();
    for (i, item) in items.iter().enumerate() {
        buf.extend_from_slice(if i == 0 { b"    " } else { b",\n    " });
        render(&mut buf, &mut scratch, item, b"    ")?;
    }
    Ok(buf)
}

/// `value` pretty-printed (through `scratch`), each line after the first indented by
/// `indent` more.
fn render(
    buf: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    value: &impl Serialize,
    indent: &[u8],
) -> io::Result<()> {
    scratch.clear();
    serde_json::to_writer_pretty(&mut *scratch, value)?;
    let mut rest = &scratch[..];
    while let Some(i) = memchr::memchr(b'\n', rest) {
        buf.extend_from_slice(&rest[..=i]);
        buf.extend_from_slice(indent);
        rest = &rest[i + 1..];
    }
    buf.extend_from_slice(rest);
    Ok(())
}
