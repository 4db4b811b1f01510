//! One WAL line: the compact JSON of a record closed by its CRC-32C member, and back.

use super::record::{Record, StepRecord};

/// Encode one record as its WAL line, CRC member and newline included.
pub fn encode_line(rec: &Record) -> Vec<u8> {
    let mut buf = serde_json::to_vec(rec).expect("WAL records always serialise");
    // serde_json writes an object: it ends with '}'. The CRC covers everything before the
    // comma that introduces the crc member.
    debug_assert_eq!(buf.last(), Some(&b'}'));
    buf.pop();
    let crc = crc32c::crc32c(&buf);
    buf.extend_from_slice(format!(",\"crc\":\"{crc:08x}\"}}\n").as_bytes());
    buf
}

pub(super) const CRC_SUFFIX_LEN: usize = 18; // ,"crc":"hhhhhhhh"}

/// Why one line failed to decode.
#[derive(Debug)]
pub(super) enum LineError {
    Shape(&'static str),
    Crc {
        stored: String,
        computed: String,
    },
    /// The line's CRC is right (it was written whole, on purpose) but this revl cannot
    /// decode its record: a record or member of a newer revl (or an edit that re-sealed the
    /// CRC). Never a torn tail (the version policy of `docs/wal-format.md`).
    Unknown {
        record: Option<String>,
        why: String,
    },
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineError::Shape(s) => write!(f, "{s}"),
            LineError::Crc { stored, computed } => {
                write!(f, "CRC mismatch (stored {stored}, computed {computed})")
            }
            LineError::Unknown { record, why } => match record {
                Some(r) => write!(f, "a `{r}` record this revl cannot read ({why})"),
                None => write!(f, "a record this revl cannot read ({why})"),
            },
        }
    }
}

/// Decode one line (without its newline).
pub(super) fn decode_line(line: &[u8]) -> std::result::Result<Record, LineError> {
    if line.len() < CRC_SUFFIX_LEN + 2 || line[0] != b'{' {
        return Err(LineError::Shape("line is not a CRC-closed JSON object"));
    }
    let split = line.len() - CRC_SUFFIX_LEN;
    let (body, suffix) = line.split_at(split);
    if !suffix.starts_with(b",\"crc\":\"") || !suffix.ends_with(b"\"}") {
        return Err(LineError::Shape("line does not end with its crc member"));
    }
    let stored = &suffix[8..16];
    let computed = crc32c::crc32c(body);
    let matches = stored
        .iter()
        .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        && std::str::from_utf8(stored)
            .ok()
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            == Some(computed);
    if !matches {
        return Err(LineError::Crc {
            stored: String::from_utf8_lossy(stored).into_owned(),
            computed: format!("{computed:08x}"),
        });
    }
    // From here on the CRC is right: a line that does not decode is not damage but a
    // record this revl does not know (see `LineError::Unknown`).
    // UTF-8 is checked once for the line (the parser then need not check each string).
    let line = std::str::from_utf8(line).map_err(|e| unknown(None, e.to_string()))?;
    let body = &line[..split];
    // Hot path: step records are most of a WAL. Parse the whole line straight into the
    // struct (serde's internally tagged enums buffer every value first, which is slow).
    if body.starts_with("{\"record\":\"step\",") {
        if let Some(step) = super::stepline::decode(body) {
            return Ok(Record::Step(step));
        }
        return serde_json::from_str::<StepRecord>(line)
            .map(Record::Step)
            .map_err(|e| unknown(Some(line), e.to_string()));
    }
    // Parse the body closed with '}' (the crc member is not part of the record).
    let mut obj = String::with_capacity(body.len() + 1);
    obj.push_str(body);
    obj.push('}');
    serde_json::from_str::<Record>(&obj).map_err(|e| unknown(Some(&obj), e.to_string()))
}

/// A CRC-correct line whose record did not decode: name its `record` member if it has one.
#[cold]
fn unknown(json: Option<&str>, why: String) -> LineError {
    let record = json
        .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .and_then(|v| v.get("record").and_then(|r| r.as_str()).map(str::to_owned));
    LineError::Unknown { record, why }
}
