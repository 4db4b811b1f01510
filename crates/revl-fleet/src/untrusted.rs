//! A remote is untrusted input (docs/fleet.md, "A remote is untrusted input"; docs/security.md,
//! "What a remote is trusted with"). Every key, size, digest and manifest field read from a
//! bucket or a `file://` directory passes these rules before anything is read through it or
//! written from it; the paths its WAL and base tree name pass the checks a local write passes
//! (the workspace's own, in revl-core) before the mirror writes at them. A broken rule is
//! `corrupt-remote`, naming the object and the rule; only that object's session is unreadable.

use crate::{segment_key, Manifest};
use revl_core::{Code, Error};

/// The largest manifest read (a manifest lists one line per push: megabytes at most).
pub const MAX_MANIFEST: u64 = 64 << 20;
/// The largest segment or blob read: what one PUT may hold (5 GiB).
pub const MAX_OBJECT: u64 = 5 << 30;
/// The largest WAL a manifest may state (its segments are fetched and verified whole).
pub const MAX_WAL: u64 = 1 << 40;
/// The largest WAL a read fetches and verifies (it is assembled and checked in memory, so
/// revl, not the manifest, chooses how much that may be): a manifest stating more is
/// refused before any segment is fetched. A million steps' WAL is about 200 MiB.
pub const MAX_WAL_READ: u64 = 1 << 30;
/// What one round of a read fetches at most, by the sizes stated (segments, blobs):
/// objects are fetched in rounds of at most this many bytes (or 256 objects), and one
/// larger object alone, so a manifest's sizes never decide how much is held at once.
pub const FETCH_BUDGET: u64 = 64 << 20;
/// The largest epoch, head, WAL length or fork step a manifest may state: what the lineage
/// index's `bigint` columns hold.
pub const MAX_FIELD: u64 = i64::MAX as u64;
/// The largest pack read: its bytes and each entry's two header lines.
pub const MAX_PACK: u64 = crate::PACK_MAX_BYTES as u64 + (64 << 20);

/// `items` in rounds to fetch: each at most [`FETCH_BUDGET`] bytes by `size` (an item
/// larger than that goes alone) and at most 256 items.
pub fn rounds<T>(items: &[T], size: impl Fn(&T) -> u64) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut rest = items;
    while !rest.is_empty() {
        let (mut n, mut bytes) = (0usize, 0u64);
        while n < rest.len() && n < 256 {
            let b = size(&rest[n]);
            if n > 0 && bytes.saturating_add(b) > FETCH_BUDGET {
                break;
            }
            bytes = bytes.saturating_add(b);
            n += 1;
        }
        let (round, tail) = rest.split_at(n);
        out.push(round);
        rest = tail;
    }
    out
}

/// An object of `remote` refused: it broke `rule`.
pub fn refused(remote: &str, key: &str, rule: &str) -> Error {
    Error::new(
        Code::CorruptRemote,
        format!(
            "object {} of remote {remote} is refused: {rule}; nothing was written from it, and only its session is unreadable",
            key.escape_debug()
        ),
        "push the session again from the store that wrote it, or restore the object from the bucket's versions (or remove the remote: `revl remote list`); the remote's other sessions still read",
    )
}

/// A key names an object inside the remote: relative, no empty, `.` or `..` component, no
/// control character, no backslash, at most 1024 bytes. `Err` is the rule it broke.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > 1024 {
        return Err("its key is empty or longer than 1024 bytes".into());
    }
    if let Some(c) = key.chars().find(|c| c.is_control() || *c == '\\') {
        return Err(format!(
            "its key holds {c:?}: a key has no control character and no backslash"
        ));
    }
    if key.starts_with('/') {
        return Err("its key is absolute: a key names an object inside the remote".into());
    }
    if key
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(
            "its key has an empty, `.` or `..` component: a key names an object inside the remote"
                .into(),
        );
    }
    Ok(())
}

/// A digest as revl writes them: 64 lowercase hex digits (blake3 and SHA-256 alike).
pub fn is_digest(d: &str) -> bool {
    d.len() == 64 && d.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// A manifest's fields: no control character in any text (they go into documents, the
/// index's COPY and one-line messages), digests that are digests, segment keys that are the
/// keys their range and digest name (so no manifest can point a read outside the session's
/// segments), sizes that one object can hold. `Err` is the rule it broke.
pub fn check_manifest(m: &Manifest, id: &str) -> Result<(), String> {
    let texts = [
        ("kind", Some(&m.kind)),
        ("schemaVersion", Some(&m.schema_version)),
        ("session", Some(&m.session)),
        ("writer", Some(&m.writer)),
        ("walSha256", Some(&m.wal_sha256)),
        ("state", Some(&m.state)),
        ("workspace", Some(&m.workspace)),
        ("pushedAt", Some(&m.pushed_at)),
        ("parent", m.parent.as_ref()),
    ];
    for (name, v) in texts {
        if v.is_some_and(|v| v.chars().any(char::is_control)) {
            return Err(format!("its {name} holds a control character"));
        }
    }
    if !is_digest(&m.wal_sha256) {
        return Err("its walSha256 is not a SHA-256 (64 lowercase hex digits)".into());
    }
    for (name, v) in [
        ("epoch", m.epoch),
        ("head", m.head),
        ("walLength", m.wal_length),
    ] {
        if v > MAX_FIELD {
            return Err(format!(
                "its {name} is {v}, more than the lineage index holds ({MAX_FIELD})"
            ));
        }
    }
    if m.wal_length > MAX_WAL {
        return Err(format!(
            "its walLength is {}, more than a WAL read from a remote may be ({MAX_WAL} bytes)",
            m.wal_length
        ));
    }
    if let Some(p) = &m.parent {
        if !revl_core::store::is_session_id(p) {
            return Err("its parent is not a session id".into());
        }
    }
    if let Some(b) = &m.base {
        if !is_digest(&b.tree) {
            return Err("its base tree is not a blake3 digest (64 lowercase hex digits)".into());
        }
    }
    for s in &m.segments {
        if !is_digest(&s.sha256) {
            return Err(format!(
                "segment {} has a sha256 that is not a SHA-256 (64 lowercase hex digits)",
                s.key.escape_debug()
            ));
        }
        if s.key != segment_key(id, s.from, s.to, &s.sha256) {
            return Err(format!(
                "segment key {} is not the key its range and digest name (sessions/<id>/wal/<from>-<to>-<sha256>)",
                s.key.escape_debug()
            ));
        }
        if s.to < s.from || s.to - s.from > MAX_OBJECT {
            return Err(format!(
                "segment {} states {} bytes, more than one object may hold ({MAX_OBJECT} bytes)",
                s.key,
                s.to.wrapping_sub(s.from)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_stay_inside_the_remote() {
        assert!(check_key("blobs/ab").is_ok());
        for bad in [
            "",
            "/dev/zero",
            "../x",
            "a/../b",
            "a//b",
            "./a",
            "a\rb",
            "a\0b",
            "a\\b",
        ] {
            assert!(check_key(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_key(&"a".repeat(1025)).is_err());
    }

    #[test]
    fn rounds_hold_at_most_the_budget_or_one_object() {
        let sizes = [FETCH_BUDGET / 2, FETCH_BUDGET / 2, 1, MAX_OBJECT, 3];
        let r = rounds(&sizes, |s| *s);
        assert_eq!(
            r,
            vec![&sizes[..2], &sizes[2..3], &sizes[3..4], &sizes[4..]]
        );
        assert_eq!(rounds(&[0u64; 300], |s| *s).len(), 2);
    }

    #[test]
    fn digests_are_64_lowercase_hex() {
        assert!(is_digest(&"0a".repeat(32)));
        assert!(!is_digest(&"0A".repeat(32)));
        assert!(!is_digest(&"0a".repeat(31)));
        assert!(!is_digest("../../etc/passwd"));
    }
}
