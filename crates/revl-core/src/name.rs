//! Names as data: every name the filesystem allows, written as text.
//!
//! Linux names (and symlink targets) are bytes; revl's paths travel as UTF-8 text (WAL
//! records, JSON documents, the Python and MCP surfaces). A name that is UTF-8 is written as
//! it is. Any byte that is not part of a UTF-8 character is written as one character of the
//! Unicode private-use range U+10FF80..=U+10FFFF: byte `b` (0x80..=0xFF) becomes
//! U+10FF00 + `b`. So the name `x\xE9.txt` (Latin-1) is the text `x\u{10FFE9}.txt`, and text
//! output shows it as `x\xe9.txt` (see [`crate::util::visible`]).
//!
//! That one range is reserved: a name that really holds one of those 128 characters has
//! each of its four UTF-8 bytes written as a reserved character too, so decoding is exact
//! for every name ([`to_bytes`] of [`from_bytes`] gives the bytes back). docs/wal-format.md
//! ("Names that are not UTF-8") states the form for readers outside revl.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

const BASE: u32 = 0x10FF00;

/// Is `c` one of the reserved characters that stand for a byte?
fn reserved(c: char) -> bool {
    (BASE + 0x80..=BASE + 0xFF).contains(&(c as u32))
}

/// The character that stands for byte `b` (0x80..=0xFF).
fn escaped(b: u8) -> char {
    char::from_u32(BASE + u32::from(b)).expect("U+10FF80..=U+10FFFF are valid characters")
}

/// The UTF-8 encoding of a reserved character starts F4 8F BE or F4 8F BF.
fn has_reserved_bytes(b: &[u8]) -> bool {
    b.windows(3)
        .any(|w| w[0] == 0xF4 && w[1] == 0x8F && (w[2] == 0xBE || w[2] == 0xBF))
}

/// The text of a name (or a relative path, or a symlink target) given as bytes.
pub fn from_bytes(b: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(b) {
        if !has_reserved_bytes(b) {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::with_capacity(b.len() + 8);
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            if reserved(c) {
                let mut buf = [0u8; 4];
                out.extend(c.encode_utf8(&mut buf).bytes().map(escaped));
            } else {
                out.push(c);
            }
        }
        out.extend(chunk.invalid().iter().copied().map(escaped));
    }
    Cow::Owned(out)
}

/// The text of an OS name, path or symlink target.
pub fn from_os(os: &OsStr) -> Cow<'_, str> {
    from_bytes(os.as_bytes())
}

/// The bytes a name's text stands for (the inverse of [`from_bytes`]).
pub fn to_bytes(s: &str) -> Cow<'_, [u8]> {
    if !has_reserved_bytes(s.as_bytes()) {
        return Cow::Borrowed(s.as_bytes());
    }
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        if reserved(c) {
            out.push((c as u32 - BASE) as u8);
        } else {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    Cow::Owned(out)
}

/// The OS name a name's text stands for.
pub fn to_os(s: &str) -> Cow<'_, OsStr> {
    match to_bytes(s) {
        Cow::Borrowed(b) => Cow::Borrowed(OsStr::from_bytes(b)),
        Cow::Owned(v) => Cow::Owned(OsString::from_vec(v)),
    }
}

/// Does this text stand for a name that is not UTF-8 (it holds a reserved character)?
pub fn is_escaped(s: &str) -> bool {
    has_reserved_bytes(s.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(b: &[u8]) {
        let s = from_bytes(b);
        assert_eq!(&*to_bytes(&s), b, "round trip of {b:?} through {s:?}");
    }

    #[test]
    fn utf8_names_are_written_as_they_are() {
        assert!(matches!(
            from_bytes(b"a/b c.txt"),
            Cow::Borrowed("a/b c.txt")
        ));
        assert!(matches!(from_bytes("é€😀".as_bytes()), Cow::Borrowed(_)));
        assert!(!is_escaped("é€😀"));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_escaped_and_come_back() {
        let s = from_bytes(b"x\xe9.txt");
        assert_eq!(s, "x\u{10FFE9}.txt");
        assert!(is_escaped(&s));
        round(b"x\xe9.txt");
        round(b"\xff\xfe\x80");
        round(b"\xc3");
        round(b"ok\xc3(");
        round(b"\xf4\x8f\xbe\x80"); // a reserved character itself
        round("mixed \u{10FFE9} and \u{10FF80}".as_bytes());
        round(b"\xf4\x8f\xbe"); // a reserved character cut short
    }

    #[test]
    fn every_two_byte_sequence_round_trips() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                round(&[a, b]);
                round(&[b'n', a, b]);
            }
        }
    }

    #[test]
    fn distinct_names_get_distinct_text() {
        let a = from_bytes(b"\xe9").into_owned();
        let b = from_bytes("\u{10FFE9}".as_bytes()).into_owned();
        let c = from_bytes("é".as_bytes()).into_owned();
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(b, c);
    }
}
