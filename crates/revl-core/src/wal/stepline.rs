//! A fast decoder for `step` lines in the exact shape revl writes them.
//!
//! Step records are nearly every line of a long WAL, and serde's derived decoder spends
//! most of its time matching member names, skipping members it does not keep and dispatching
//! per member. revl always writes a step's members compact and in one order (see
//! `StepRecord`'s `Serialize`), so this decoder walks that shape directly and checks the nested
//! values (`detail`, `scope`, `undo`, `undoScope`) with a small strict validator.
//!
//! It accepts a strict subset of what serde accepts and never decides anything serde would
//! decide differently: a line in any other shape (members reordered, repeated or unknown,
//! whitespace, an escape in `kind`/`label`/`site`/`ts`, a `\u` escape anywhere, a `null`
//! optional member, deep nesting, long numbers) yields `None` and is decoded by serde
//! instead. Two property tests hold the two decoders to the same answers.

use crate::step::StepKind;
use crate::steptext::{Part, Parts, StepText};
use crate::wal::StepRecord;

/// Decode the body of a step line: the line up to (not including) its `,"crc":…}` member.
/// `None` means "not in the canonical shape": decode the line with serde.
pub(crate) fn decode(body: &str) -> Option<StepRecord> {
    let mut c = Cursor {
        s: body,
        b: body.as_bytes(),
        i: 0,
    };
    let mut parts = Parts::default();
    c.lit(b"{\"record\":\"step\",\"seq\":")?;
    let seq = c.uint()?;
    c.lit(b",\"step\":")?;
    let step = c.uint()?;
    c.lit(b",\"kind\":")?;
    let kind = StepKind::parse(c.plain_str()?);
    c.lit(b",\"label\":")?;
    parts.set(Part::Label, Some(c.plain_str()?));
    c.lit(b",\"site\":")?;
    parts.set(Part::Site, Some(c.plain_str()?));
    c.lit(b",\"detail\":")?;
    parts.set(Part::Detail, Some(c.value()?));
    for (key, p) in [
        (&b",\"scope\":"[..], Part::Scope),
        (b",\"undoScope\":", Part::UndoScope),
        (b",\"undo\":", Part::Undo),
    ] {
        if c.lit(key).is_some() {
            let v = c.value()?;
            // serde reads a `null` optional member as absent: not canonical.
            if v == "null" {
                return None;
            }
            parts.set(p, Some(v));
        }
    }
    let undo_idempotent = if c.lit(b",\"undoIdempotent\":").is_some() {
        if c.lit(b"true").is_some() {
            Some(true)
        } else {
            c.lit(b"false")?;
            Some(false)
        }
    } else {
        None
    };
    let compensation = match c.lit(b",\"compensation\":") {
        Some(()) => Some(c.uint()?),
        None => None,
    };
    if c.lit(b",\"ts\":").is_some() {
        parts.set(Part::Ts, Some(c.plain_str()?));
    }
    if c.i != c.b.len() {
        return None;
    }
    Some(StepRecord {
        seq,
        step,
        kind,
        text: StepText::pack(parts)?,
        undo_idempotent,
        compensation,
    })
}

/// Nesting deeper than this goes to serde (whose own limit is 128).
const MAX_DEPTH: u32 = 64;
/// A number longer than this goes to serde.
const MAX_NUMBER: usize = 24;

struct Cursor<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Step over `l` if the text continues with it.
    fn lit(&mut self, l: &[u8]) -> Option<()> {
        if self.b[self.i..].starts_with(l) {
            self.i += l.len();
            Some(())
        } else {
            None
        }
    }

    /// An unsigned integer as serde reads one into a `u64`: digits, no leading zero.
    fn uint(&mut self) -> Option<u64> {
        let start = self.i;
        let mut n: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.i += 1;
        }
        let len = self.i - start;
        // `01` is not JSON; a fraction or exponent is not an integer for serde either.
        if len == 0
            || (len > 1 && self.b[start] == b'0')
            || matches!(self.peek(), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        Some(n)
    }

    /// A string with no escapes and no control characters: its text, borrowed.
    fn plain_str(&mut self) -> Option<&'a str> {
        self.lit(b"\"")?;
        let rest = &self.b[self.i..];
        let n = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[n] != b'"' || rest[..n].iter().any(|&c| c < 0x20) {
            return None;
        }
        let s = &self.s[self.i..self.i + n];
        self.i += n + 1;
        Some(s)
    }

    /// One compact JSON value, checked: its text.
    fn value(&mut self) -> Option<&'a str> {
        let start = self.i;
        self.skip(MAX_DEPTH)?;
        Some(&self.s[start..self.i])
    }

    fn skip(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'{' => self.items(b'}', depth, true),
            b'[' => self.items(b']', depth, false),
            b'"' => self.skip_str(),
            b't' => self.lit(b"true"),
            b'f' => self.lit(b"false"),
            b'n' => self.lit(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// The members of an object (`keyed`) or the elements of an array, from its opening
    /// bracket through `close`.
    fn items(&mut self, close: u8, depth: u32, keyed: bool) -> Option<()> {
        self.i += 1;
        if self.lit(&[close]).is_some() {
            return Some(());
        }
        let depth = depth.checked_sub(1)?;
        loop {
            if keyed {
                self.skip_str()?;
                self.lit(b":")?;
            }
            self.skip(depth)?;
            match self.peek()? {
                b',' => self.i += 1,
                c if c == close => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string; escapes other than `\u` are allowed (they need no decoding here).
    fn skip_str(&mut self) -> Option<()> {
        self.lit(b"\"")?;
        loop {
            let rest = &self.b[self.i..];
            let n = memchr::memchr2(b'"', b'\\', rest)?;
            if rest[..n].iter().any(|&c| c < 0x20) {
                return None;
            }
            self.i += n + 1;
            if rest[n] == b'"' {
                return Some(());
            }
            match self.peek()? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                _ => return None,
            }
        }
    }

    /// A number by the JSON grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        let start = self.i;
        let _ = self.lit(b"-");
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.lit(b".").is_some() {
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return None;
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return None;
            }
            self.digits();
        }
        (self.i - start <= MAX_NUMBER).then_some(())
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::{encode_line, Record};
    use proptest::prelude::*;
    use serde_json::Value;

    /// serde's answer for a body (the crc member is an unknown member to it).
    fn by_serde(body: &str) -> Option<StepRecord> {
        serde_json::from_str::<StepRecord>(&format!("{body},\"crc\":\"00000000\"}}")).ok()
    }

    fn body_of(rec: StepRecord) -> String {
        let line = String::from_utf8(encode_line(&Record::Step(rec))).unwrap();
        line[..line.len() - 19].to_owned() // without `,"crc":"hhhhhhhh"}\n`
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z./ _-]{0,12}",
            any::<String>(),
            Just("é \u{1F600} \" \\ / \u{1} \t \u{7f} \u{2028}".to_owned()),
        ]
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            text().prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
                prop::collection::btree_map(text(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    prop_compose! {
        fn record()(
            seq in any::<u64>(), step in any::<u64>(),
            kind in prop_oneof![Just("effect".to_owned()), Just("emission".to_owned()), text()],
            label in text(), site in text(), detail in json(),
            scope in prop::option::of(json()), undo_scope in prop::option::of(json()),
            undo in prop::option::of(json()), undo_idempotent in any::<Option<bool>>(),
            compensation in any::<Option<u64>>(), ts in prop::option::of(text()),
        ) -> StepRecord {
            let mut r = StepRecord::new(seq, step, StepKind::parse(&kind), &label, &site, &detail).unwrap();
            r.set_scope(scope.as_ref()).unwrap();
            r.set_undo_scope(undo_scope.as_ref()).unwrap();
            r.set_undo(undo.as_ref()).unwrap();
            r.set_ts(ts.as_deref()).unwrap();
            r.undo_idempotent = undo_idempotent;
            r.compensation = compensation;
            r
        }
    }

    /// Bytes a mutation puts in: JSON's punctuation and the starts of its tokens.
    const MUTANTS: &[u8] = b"\"\\,:{}[]0123456789.eE+-ntfu \x01x";

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Whatever revl writes, the fast decoder reads back exactly (or leaves to serde).
        #[test]
        fn agrees_with_serde_on_written_lines(rec in record()) {
            let body = body_of(rec);
            let serde = by_serde(&body);
            prop_assert!(serde.is_some(), "serde refuses a written line: {}", body);
            if let Some(f) = decode(&body) {
                prop_assert_eq!(format!("{f:?}"), format!("{:?}", serde.unwrap()));
            }
        }

        /// An edited line: whenever the fast decoder accepts it, serde accepts it and reads
        /// the same record.
        #[test]
        fn accepts_only_what_serde_reads_the_same(
            rec in record(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, prop::sample::select(MUTANTS)), 1..4),
        ) {
            let mut b = body_of(rec).into_bytes();
            for (at, op, byte) in edits {
                let i = at.index(b.len() + 1);
                match op {
                    0 => b.insert(i, byte),
                    1 if i < b.len() => { b.remove(i); }
                    _ if i < b.len() => b[i] = byte,
                    _ => b.push(byte),
                }
            }
            let Ok(body) = String::from_utf8(b) else { return Ok(()) };
            if let Some(f) = decode(&body) {
                let s = by_serde(&body);
                prop_assert!(s.is_some(), "fast accepted what serde refuses: {}", body);
                prop_assert_eq!(format!("{f:?}"), format!("{:?}", s.unwrap()));
            }
        }
    }

    #[test]
    fn takes_the_fast_path_for_canonical_lines_only() {
        let mut rec = StepRecord::new(
            7,
            6,
            StepKind::Emission,
            "svc.call",
            "agent",
            &serde_json::json!({"args": {"n": [1, -2.5e3, null, "a\"b"]}, "key": "k"}),
        )
        .unwrap();
        rec.set_scope(Some(&serde_json::json!({"caps": ["net"]})))
            .unwrap();
        rec.set_ts(Some("2026-12-02T00:00:00.000Z")).unwrap();
        rec.undo_idempotent = Some(false);
        rec.compensation = Some(3);
        let body = body_of(rec.clone());
        assert_eq!(decode(&body), Some(rec));
        // Not canonical: left to serde.
        for other in [
            body.replace("\"seq\":7,\"step\":6", "\"step\":6,\"seq\":7"),
            body.replace("\"label\":\"svc.call\"", "\"label\":\"svc\\u002ecall\""),
            body.replace("\"label\":\"svc.call\"", "\"label\": \"svc.call\""),
            body.replace("\"undoIdempotent\":false", "\"undoIdempotent\":null"),
            body.replace(",\"ts\"", ",\"extra\":1,\"ts\""),
            body.replace("\"seq\":7", "\"seq\":07"),
            body.replace("\"seq\":7", "\"seq\":7.0"),
            format!("{body},\"ts\":\"again\""),
        ] {
            assert_eq!(decode(&other), None, "{other}");
        }
        // Nesting beyond the decoder's depth goes to serde too.
        let deep = format!("{}1{}", "[".repeat(70), "]".repeat(70));
        assert_eq!(decode(&body.replace("\"k\"}", &format!("{deep}}}"))), None);
    }
}
