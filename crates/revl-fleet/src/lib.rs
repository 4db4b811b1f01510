//! revl's fleet store (docs/fleet.md): a store's sessions pushed to an S3-compatible bucket (or a
//! shared directory), read back on any machine, branched there, and their lineage indexed
//! in PostgreSQL. The local WAL stays the commit point: nothing here is on the path of a
//! verb that records a step.
//!
//! Layout of a remote (docs/fleet.md):
//! - `blobs/<digest>`: content-addressed blobs, shared by every session, written once;
//! - `sessions/<id>/wal/<from>-<to>-<sha256>`: immutable segments of the session's WAL (byte
//!   ranges of its intact prefix, zero-padded so they sort, named by content);
//! - `sessions/<id>/manifest.json`: the remote head (the WAL length and its SHA-256, the
//!   segments, the base tree, the lineage), replaced only by compare-and-swap.
#![forbid(unsafe_code)]

pub mod bucket;
pub mod cache;
pub mod config;
pub mod index;
mod packs;
pub mod pull;
pub mod push;
pub mod storage;
pub mod untrusted;

pub use bucket::Bucket;
pub use cache::{reading, Catalog, Listing, RemoteCache};
pub use config::{Remote, Remotes};

/// The manifest of one session in a remote.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub kind: String,
    pub schema_version: String,
    pub session: String,
    /// How many times the manifest was written (1 for the first push).
    pub epoch: u64,
    /// The store that wrote this epoch (its id, `<store>/store-id`).
    pub writer: String,
    pub wal_length: u64,
    pub wal_sha256: String,
    pub segments: Vec<Segment>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<revl_core::session::remote::BaseTree>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<i64>,
    pub state: String,
    pub head: u64,
    pub workspace: String,
    pub pushed_at: String,
}

/// One immutable segment of a session's WAL.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Segment {
    pub key: String,
    pub from: u64,
    pub to: u64,
    pub sha256: String,
}

pub const MANIFEST_KIND: &str = "revl.remote-session";

pub fn manifest_key(id: &str) -> String {
    format!("sessions/{id}/manifest.json")
}

pub fn blob_key(digest: &str) -> String {
    format!("blobs/{digest}")
}

/// A base tree's small files in one object (`packs/<tree digest>`), so that a branch on
/// another machine makes one request for them instead of one per file. The loose blobs are
/// pushed too: the pack is a shortcut, and a bucket without it (an older push) still works.
pub fn pack_key(tree: &str) -> String {
    format!("packs/{tree}")
}

/// Files above this size stay out of a pack (fetched alone, in parallel).
pub const PACK_MAX_BLOB: usize = 1 << 20;
/// A pack stops growing here; what does not fit is fetched loose.
pub const PACK_MAX_BYTES: usize = 256 << 20;

/// A pack's bytes: for each blob, `<digest>\n<length>\n<bytes>`.
pub fn pack(items: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (d, b) in items {
        out.extend_from_slice(format!("{d}\n{}\n", b.len()).as_bytes());
        out.extend_from_slice(b);
    }
    out
}

/// The `(digest, bytes)` entries of a pack; `None` if it is not one (each entry's bytes
/// are still to be checked against its digest: a pack is never trusted).
pub fn unpack(mut bytes: &[u8]) -> Option<Vec<(String, &[u8])>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let nl = bytes.iter().position(|&c| c == b'\n')?;
        let digest = std::str::from_utf8(&bytes[..nl]).ok()?.to_string();
        bytes = &bytes[nl + 1..];
        let nl = bytes.iter().position(|&c| c == b'\n')?;
        let len: usize = std::str::from_utf8(&bytes[..nl]).ok()?.parse().ok()?;
        bytes = &bytes[nl + 1..];
        if bytes.len() < len {
            return None;
        }
        out.push((digest, &bytes[..len]));
        bytes = &bytes[len..];
    }
    Some(out)
}

/// A segment's key names its range and its content's SHA-256: two stores racing to extend
/// the same remote head upload different objects, and the manifest names only the winner's.
pub fn segment_key(id: &str, from: u64, to: u64, sha256: &str) -> String {
    format!("sessions/{id}/wal/{from:020}-{to:020}-{sha256}")
}

/// The remote head a manifest states, as documents show it.
pub fn head_doc(m: &Manifest) -> serde_json::Value {
    serde_json::json!({"epoch": m.epoch, "walLength": m.wal_length, "walSha256": m.wal_sha256, "writer": m.writer})
}

pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

/// Parse a manifest fetched from `remote`, refusing one that is not ours or names another
/// session.
pub fn parse_manifest(bytes: &[u8], id: &str, remote: &str) -> revl_core::Result<Manifest> {
    let m: Manifest = serde_json::from_slice(bytes).map_err(|e| {
        tampered(
            remote,
            &manifest_key(id),
            &format!("it does not parse ({e})"),
        )
    })?;
    if m.kind != MANIFEST_KIND || m.session != id {
        return Err(tampered(
            remote,
            &manifest_key(id),
            "it is not the manifest of this session",
        ));
    }
    untrusted::check_manifest(&m, id)
        .map_err(|rule| untrusted::refused(remote, &manifest_key(id), &rule))?;
    Ok(m)
}

/// An object of the remote that does not match what names it: refused, never trusted.
pub fn tampered(remote: &str, key: &str, why: &str) -> revl_core::Error {
    untrusted::refused(remote, key, &format!("it was altered ({why})"))
}
