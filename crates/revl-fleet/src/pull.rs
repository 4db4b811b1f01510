//! Reading a remote (docs/fleet.md): sessions pushed from any store are copied, verified, into a
//! local mirror store (`<store>/remotes/NAME/mirror`), where the offline readers read them
//! exactly as they read local sessions. Every object is checked against what names it (a
//! segment's SHA-256 and the WAL's, a blob's blake3): an altered object is refused.
//!
//! A branch on another machine: `fork --remote` materialises the session's workspace at its
//! head from the base tree and the WAL (in `<store>/remotes/NAME/forks/<id>`, a scratch
//! store), enumerates the fork there, and `fork-confirm --into DIR` performs it as a
//! parallel fork whose branch then moves into the local store.

use crate::bucket::{Bucket, Fetched};
use crate::untrusted::{is_digest, MAX_MANIFEST, MAX_OBJECT, MAX_PACK, MAX_WAL_READ};
use crate::{blob_key, sha256_hex, tampered, Manifest, Remote};
use revl_core::storage::Copied;
use revl_core::{Code, Error, Result, Store};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A remote opened for reading, with its local mirror.
pub struct Reader {
    pub remote: Remote,
    pub bucket: Bucket,
    pub mirror: Store,
    /// The mirror's blobs (the mirror's storage: its packs are kept through it).
    cache_blobs: std::sync::Arc<MirrorBlobs>,
    /// The store's cache of the remote (`<store>/remotes/NAME`).
    root: PathBuf,
}

/// What a WAL's verification starts from (the verified prefix the cache holds) and the
/// segments past it to fetch.
type Plan<'a> = (Vec<u8>, Vec<&'a crate::Segment>);

/// What a read verified of a manifest, as its cache records it (`verified/<id>.json`, and
/// `verified/<id>.pulled` for what the mirror holds): the WAL (its length and SHA-256) and
/// every field checked against it or taken from the manifest (the lineage: parent, fork
/// step, state, head; the base tree). A cached verification is reused only for a manifest
/// stating all of them: one with the same WAL but another lineage is judged again.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Checked {
    wal_length: u64,
    wal_sha256: String,
    parent: Option<String>,
    at: Option<i64>,
    state: String,
    head: u64,
    base: Option<String>,
    /// The manifest's epoch and writer (taken from it as stated): what an index row holds
    /// besides the lineage, so a row can be compared with what was verified.
    epoch: u64,
    writer: String,
}

impl Checked {
    fn of(m: &Manifest) -> Checked {
        Checked {
            wal_length: m.wal_length,
            wal_sha256: m.wal_sha256.clone(),
            parent: m.parent.clone(),
            at: m.at,
            state: m.state.clone(),
            head: m.head,
            base: m.base.as_ref().map(|b| b.tree.clone()),
            epoch: m.epoch,
            writer: m.writer.clone(),
        }
    }

    fn read(path: &Path) -> Option<Checked> {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    }

    fn write(&self, path: &Path) -> Result<()> {
        let b = serde_json::to_vec(self).expect("serialises");
        revl_core::util::write_durable(path, &b).map_err(|e| Error::io(path.display(), e))
    }
}

/// A session's unreadable mark: the manifest (its SHA-256) it was refused at, and why.
#[derive(serde::Serialize, serde::Deserialize)]
struct Mark {
    manifest: String,
    message: String,
    hint: String,
}

fn mirror_settings(dir: &Path) -> Copied {
    Copied {
        // Nothing is written there: a mirrored session's untouched files are read from its
        // base tree, by digest, in the mirror's blobs.
        workspaces: dir.join("bases"),
        untouched: revl_core::storage::Untouched::BaseTree,
        writable: false,
        remote: None,
    }
}

impl Reader {
    pub fn open(store: &Store, remote: &Remote) -> Result<Reader> {
        Self::over(store, remote, Bucket::open(&remote.url)?)
    }

    /// A reader of `remote` through `bucket` (its objects, wherever they are).
    pub fn over(store: &Store, remote: &Remote, bucket: Bucket) -> Result<Reader> {
        let root = crate::config::remote_dir(store, &remote.name);
        let dir = root.join("mirror");
        // The base directories an older revl wrote out (`mirror/bases/`): nothing reads
        // them now (a mirror reads base trees by digest), so they go.
        let old = dir.join("bases");
        if old.exists() {
            make_writable(&old);
            let _ = std::fs::remove_dir_all(&old);
        }
        let (mirror, cache_blobs) = refetching_with(
            store,
            &remote.name,
            Store::open_copy(&dir, mirror_settings(&dir), None)?,
            Some(&bucket),
        );
        Ok(Reader {
            bucket,
            remote: remote.clone(),
            mirror,
            cache_blobs,
            root,
        })
    }

    /// Every session id the remote holds (listing the bucket).
    pub fn session_ids(&self) -> Result<Vec<String>> {
        Ok(self
            .bucket
            .children("sessions")?
            .into_iter()
            .filter(|n| revl_core::store::is_session_id(n))
            .collect())
    }

    /// A full id or a unique prefix of one (at least 6 characters) among the remote's.
    pub fn resolve(&self, given: &str) -> Result<String> {
        let g = given.trim().to_ascii_lowercase();
        if g.len() == 32 && revl_core::store::is_session_id(&g) {
            return Ok(g);
        }
        if g.len() < 6 || g.len() > 32 || !g.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(Error::new(
                Code::UnknownSession,
                format!("{given:?} is not a session id (32 hex characters, or a unique prefix of at least 6)"),
                "check the session id",
            ));
        }
        let m: Vec<String> = self
            .session_ids()?
            .into_iter()
            .filter(|i| i.starts_with(&g))
            .collect();
        match m.len() {
            1 => Ok(m.into_iter().next().expect("one")),
            0 => Err(Error::new(
                Code::UnknownSession,
                format!("no session {given} in remote {}", self.remote.name),
                "`revl remote lineage NAME` lists the remote's sessions",
            )),
            n => Err(Error::new(
                Code::AmbiguousSession,
                format!(
                    "{given} matches {n} sessions of remote {}",
                    self.remote.name
                ),
                "give more characters of the id",
            )),
        }
    }

    /// Copy session `id` (and its ancestors) into the mirror, verified. Returns its manifest.
    pub fn sync_family(&self, id: &str) -> Result<Manifest> {
        let m = self.sync(id)?;
        let mut parent = m.parent.clone();
        let mut hops = 0;
        while let Some(p) = parent.take().filter(|_| hops < 64) {
            hops += 1;
            match self.sync(&p) {
                Ok(pm) => parent = pm.parent.clone(),
                // A parent that was never pushed: the readers say so (an orphan).
                Err(e) if e.code == Code::UnknownSession => break,
                Err(e) => return Err(e),
            }
        }
        Ok(m)
    }

    /// Copy every session of the remote into the mirror. A session with a hostile object
    /// (`corrupt-remote`) is left out of the mirror and listed, never blocking the others.
    pub fn sync_all(&self) -> Result<(Vec<String>, Vec<Unreadable>)> {
        self.sync_each(self.session_ids()?)
    }

    /// Copy each of `ids` into the mirror: those copied, and those refused
    /// (`corrupt-remote`), which are listed and never stop the others; any other error does.
    pub fn sync_each(
        &self,
        ids: impl IntoIterator<Item = String>,
    ) -> Result<(Vec<String>, Vec<Unreadable>)> {
        let mut ok = Vec::new();
        let mut bad = Vec::new();
        for id in ids {
            match self.sync(&id) {
                Ok(_) => ok.push(id),
                Err(e) if e.code == Code::CorruptRemote => bad.push(Unreadable::of(&id, &e)),
                Err(e) => return Err(e),
            }
        }
        Ok((ok, bad))
    }

    /// Copy one session into the mirror: its WAL (new segments appended), its base tree and
    /// every blob it names, each verified. A session refused (`corrupt-remote`) is removed
    /// from the mirror: nothing of it is read.
    pub fn sync(&self, id: &str) -> Result<Manifest> {
        self.sync_checked(id).inspect_err(|e| {
            if e.code == Code::CorruptRemote {
                self.forget(id);
            }
        })
    }

    /// Remove session `id` from the mirror (its WAL; blobs aside).
    fn forget(&self, id: &str) {
        let sdir = self.mirror.session_dir(id);
        if sdir.exists() {
            make_writable(&sdir);
            let _ = std::fs::remove_dir_all(&sdir);
        }
        for ext in ["wal", "json", "pulled"] {
            let _ = std::fs::remove_file(self.verified_path(id, ext));
        }
    }

    fn sync_checked(&self, id: &str) -> Result<Manifest> {
        let name = &self.remote.name;
        let Some(raw) = self
            .bucket
            .get_limited(&crate::manifest_key(id), MAX_MANIFEST)?
        else {
            return Err(Error::new(
                Code::UnknownSession,
                format!("no session {id} in remote {name}"),
                "push it from the store that ran it (`revl push SESSION`)",
            ));
        };
        let m = self.judged(id, &raw.0, |m| {
            self.verify_wals(std::slice::from_ref(m)).remove(0)
        })?;
        let pulled = self.verified_path(id, "pulled");
        if Checked::read(&pulled).as_ref() != Some(&Checked::of(&m))
            || len_of(&self.mirror.wal_path(id)) != Some(m.wal_length)
        {
            let wal_obj = format!("sessions/{id}/wal");
            let verified = self.verified_path(id, "wal");
            let wal = std::fs::read(&verified).map_err(|e| Error::io(verified.display(), e))?;
            // Into the mirror through its journals, as any store's WAL is made.
            create_journal(&self.mirror, id, &wal)?;
            self.judge(id, &raw.0, || {
                if let Some(base) = &m.base {
                    self.mirror.set_base(id, base)?;
                }
                self.fetch_blobs(id, &m)?;
                // What the base tree and the WAL name passes the checks a local write
                // passes, before anything is written at it (docs/fleet.md, "A remote is
                // untrusted input"): the base tree's shape and every path, without
                // writing the tree out (a mirror reads it by digest).
                let base_obj = m.base.as_ref().map(|b| blob_key(&b.tree));
                let s = self
                    .mirror
                    .attach_read(id)
                    .map_err(|e| hostile(name, &wal_obj, e))?;
                s.check_base()
                    .map_err(|e| hostile(name, base_obj.as_deref().unwrap_or(&wal_obj), e))?;
                s.check_paths().map_err(|e| hostile(name, &wal_obj, e))
            })?;
            Checked::of(&m).write(&pulled)?;
            // One copy on disk: the verified WAL becomes the mirror's (a hard link; each is
            // only ever replaced whole, by rename, so neither changes under the other, and
            // the next read still starts from the verified bytes and the WAL they state).
            share(&self.mirror.wal_path(id), &verified);
        }
        Ok(m)
    }

    /// Where this reader keeps what it judged of session `id` (`ext`: `wal`, the WAL
    /// verified against its manifest; `json`, which head that is; `unreadable`, the mark
    /// of a session refused), beside the mirror in the store's cache of the remote.
    fn verified_path(&self, id: &str, ext: &str) -> PathBuf {
        self.root.join("verified").join(format!("{id}.{ext}"))
    }

    /// The lineage entry of session `id` as this store last verified it (its WAL kept in
    /// the cache and the manifest's lineage checked against it), if it did.
    fn verified_entry(&self, id: &str) -> Option<LineageEntry> {
        if !revl_core::store::is_session_id(id) || !self.verified_path(id, "wal").is_file() {
            return None;
        }
        let c = Checked::read(&self.verified_path(id, "json"))?;
        Some(LineageEntry {
            session: id.to_string(),
            parent: c.parent,
            at: c.at,
            state: c.state,
            head: c.head,
            epoch: c.epoch,
            writer: c.writer,
        })
    }

    /// Parse and check the manifest `bytes` of session `id`, then run `check` on it,
    /// through the session's unreadable mark: a manifest already refused (the same bytes)
    /// is refused again at once, with the reason recorded, and nothing of it is fetched;
    /// a refusal (`corrupt-remote`) marks the session, and the mark holds until its
    /// manifest changes (a new push, or `push --repair`, writes a new epoch).
    fn judged(
        &self,
        id: &str,
        bytes: &[u8],
        check: impl FnOnce(&Manifest) -> Result<()>,
    ) -> Result<Manifest> {
        let mark = self.verified_path(id, "unreadable");
        let digest = sha256_hex(bytes);
        if let Some(e) = std::fs::read(&mark)
            .ok()
            .and_then(|b| serde_json::from_slice::<Mark>(&b).ok())
            .filter(|k| k.manifest == digest)
        {
            return Err(Error::new(Code::CorruptRemote, e.message, e.hint));
        }
        let mut m = None;
        self.judge(id, bytes, || {
            let parsed = crate::parse_manifest(bytes, id, &self.remote.name)?;
            check(&parsed)?;
            m = Some(parsed);
            Ok(())
        })?;
        let _ = std::fs::remove_file(&mark);
        Ok(m.expect("judged"))
    }

    /// A refusal (`corrupt-remote`) met reading session `id` after it was pulled (a blob the
    /// cache lost that the remote holds damaged too): marked as the sync marks one, against
    /// the manifest the remote holds now, and the session left out of the mirror, so
    /// listings name it unreadable and its reads are refused at once while the remote's
    /// other sessions still read. Any other error is left as it is.
    pub fn refused(&self, id: &str, e: &Error) {
        if e.code != Code::CorruptRemote {
            return;
        }
        if let Ok(Some((bytes, _))) = self
            .bucket
            .get_limited(&crate::manifest_key(id), MAX_MANIFEST)
        {
            let _ = self.judge(id, &bytes, || {
                Err(Error::new(e.code, e.message.clone(), e.hint.clone()))
            });
            self.forget(id);
        }
    }

    /// Run `check` for session `id` whose manifest is `bytes`; a refusal
    /// (`corrupt-remote`) is recorded as the session's unreadable mark.
    fn judge(&self, id: &str, bytes: &[u8], check: impl FnOnce() -> Result<()>) -> Result<()> {
        check().inspect_err(|e| {
            if e.code == Code::CorruptRemote {
                let k = Mark {
                    manifest: sha256_hex(bytes),
                    message: e.message.clone(),
                    hint: e.hint.clone(),
                };
                let mark = self.verified_path(id, "unreadable");
                let _ = std::fs::create_dir_all(self.root.join("verified"));
                let _ = revl_core::util::write_durable(
                    &mark,
                    &serde_json::to_vec(&k).expect("serialises"),
                );
            }
        })
    }

    /// The WAL of each manifest, fetched (what an earlier read verified is kept: only the
    /// segments past it are fetched, up to 32 requests in flight across all of them),
    /// verified (each segment's SHA-256, the whole WAL's, the segments tiling it) and its
    /// stated lineage (parent, fork step, state, head: what listings and the index show)
    /// checked against the WAL, kept in the cache (`verified/<id>.wal`). Each manifest's
    /// answer on its own: a hostile one refuses only its session.
    pub fn verify_wals(&self, ms: &[Manifest]) -> Vec<Result<()>> {
        let name = &self.remote.name;
        // What each needs: the verified prefix it starts from, and the segments past it.
        let plans: Vec<Result<Option<Plan>>> = ms
            .iter()
            .map(|m| {
                let id = &m.session;
                if m.wal_length > MAX_WAL_READ {
                    return Err(crate::untrusted::refused(
                        name,
                        &crate::manifest_key(id),
                        &format!(
                            "its walLength is {} bytes, more than revl reads of a remote WAL ({MAX_WAL_READ} bytes); nothing of it was fetched",
                            m.wal_length
                        ),
                    ));
                }
                let have = Checked::read(&self.verified_path(id, "json"));
                // The verified WAL is believed only while it holds as many bytes as its
                // record states (one cut short, by a full disk or by hand, is fetched again).
                if have.as_ref() == Some(&Checked::of(m))
                    && len_of(&self.verified_path(id, "wal")) == Some(m.wal_length)
                {
                    return Ok(None);
                }
                // A verified prefix is reused whatever lineage it was checked with: the
                // lineage is checked again against the whole WAL below.
                let mut wal = match have.map(|h| h.wal_length) {
                    Some(len) if len <= m.wal_length => {
                        std::fs::read(self.verified_path(id, "wal"))
                            .ok()
                            .filter(|b| b.len() as u64 == len)
                            .unwrap_or_default()
                    }
                    _ => Vec::new(),
                };
                let start = wal.len() as u64;
                let mut at = 0u64;
                let mut need = Vec::new();
                for s in &m.segments {
                    // The segments in order must tile [0, walLength).
                    if s.from != at || s.to < s.from {
                        return Err(tampered(
                            name,
                            &crate::manifest_key(id),
                            "its segments do not tile the WAL",
                        ));
                    }
                    at = s.to;
                    if s.to <= start {
                        continue;
                    }
                    if s.from < start {
                        // The cache holds part of this segment: fetch whole from its start.
                        wal.truncate(s.from as usize);
                    }
                    need.push(s);
                }
                if at != m.wal_length {
                    return Err(tampered(
                        name,
                        &crate::manifest_key(id),
                        "its segments do not tile the WAL",
                    ));
                }
                Ok(Some((wal, need)))
            })
            .collect();
        // Each manifest's answer, its WAL so far and how many segments it still waits for;
        // the segments fetched in rounds (at most FETCH_BUDGET bytes as stated), each
        // checked as it comes, a manifest's WAL kept (and dropped from memory) once whole,
        // and nothing more fetched for a manifest once one of its objects is refused.
        let mut out: Vec<Result<()>> = Vec::with_capacity(ms.len());
        let mut wals: Vec<Vec<u8>> = Vec::with_capacity(ms.len());
        let mut left: Vec<usize> = Vec::with_capacity(ms.len());
        let mut todo: Vec<(usize, &crate::Segment)> = Vec::new();
        for (i, (m, plan)) in ms.iter().zip(plans).enumerate() {
            let (r, wal, n) = match plan {
                Ok(None) => (Ok(()), Vec::new(), 0),
                Err(e) => (Err(e), Vec::new(), 0),
                Ok(Some((wal, need))) if need.is_empty() => {
                    (self.keep_verified(m, &wal), Vec::new(), 0)
                }
                Ok(Some((wal, need))) => {
                    todo.extend(need.iter().map(|s| (i, *s)));
                    (Ok(()), wal, need.len())
                }
            };
            out.push(r);
            wals.push(wal);
            left.push(n);
        }
        for round in crate::untrusted::rounds(&todo, |(_, s)| s.to - s.from) {
            let round: Vec<&(usize, &crate::Segment)> =
                round.iter().filter(|(i, _)| out[*i].is_ok()).collect();
            let keys: Vec<(String, u64)> = round
                .iter()
                .map(|(_, s)| (s.key.clone(), s.to - s.from))
                .collect();
            for (&&(i, s), got) in round.iter().zip(self.bucket.get_each_limited(&keys)) {
                if out[i].is_err() {
                    continue;
                }
                let checked = got.and_then(|b| {
                    let Some(b) = b else {
                        return Err(tampered(name, &s.key, "it is missing"));
                    };
                    if b.len() as u64 != s.to - s.from || sha256_hex(&b) != s.sha256 {
                        return Err(tampered(name, &s.key, "its SHA-256 is not the manifest's"));
                    }
                    wals[i].extend_from_slice(&b);
                    Ok(())
                });
                left[i] -= 1;
                out[i] = match checked {
                    Err(e) => Err(e),
                    Ok(()) if left[i] == 0 => self.keep_verified(&ms[i], &wals[i]),
                    Ok(()) => Ok(()),
                };
                if out[i].is_err() || left[i] == 0 {
                    wals[i] = Vec::new();
                }
            }
        }
        out
    }

    /// The assembled WAL of manifest `m`: checked against its SHA-256 and the lineage the
    /// manifest states, then kept as verified.
    fn keep_verified(&self, m: &Manifest, wal: &[u8]) -> Result<()> {
        let (name, id) = (&self.remote.name, &m.session);
        if sha256_hex(wal) != m.wal_sha256 {
            return Err(tampered(
                name,
                &crate::manifest_key(id),
                "the WAL its segments make does not have its SHA-256",
            ));
        }
        let dir = self.root.join("verified");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(dir.display(), e))?;
        let path = self.verified_path(id, "wal");
        let mark = self.verified_path(id, "json");
        let _ = std::fs::remove_file(&mark);
        revl_core::util::write_durable(&path, wal).map_err(|e| Error::io(path.display(), e))?;
        let wal_obj = format!("sessions/{id}/wal");
        let (st, _) = revl_core::state::State::read(&path)
            .map_err(|e| tampered(name, &wal_obj, &e.message))?;
        if st.session != *id {
            return Err(tampered(
                name,
                &wal_obj,
                "its header names another session (a WAL is pushed under its own id)",
            ));
        }
        let stated = (
            st.origin.as_ref().map(|o| o.parent.clone()),
            st.origin.as_ref().map(|o| o.at.to_i64()),
            st.life().as_str(),
            st.head(),
        );
        if stated != (m.parent.clone(), m.at, m.state.as_str(), m.head) {
            return Err(tampered(
                name,
                &crate::manifest_key(id),
                "its lineage (parent, fork step, state, head) is not its WAL's",
            ));
        }
        Checked::of(m).write(&mark)
    }

    /// Fetch every blob the mirrored session names that the mirror does not hold yet (again
    /// after each round: a directory snapshot names more).
    fn fetch_blobs(&self, id: &str, m: &Manifest) -> Result<()> {
        let blobs = self.mirror.blobs();
        // What this fetch put in the cache, verified as it came: not read back to be judged
        // again here (every blob is verified again when it is read).
        let mut held: BTreeSet<String> = BTreeSet::new();
        // The base tree's pack first (one request for its small files), when this mirror
        // does not hold the tree yet; every entry is checked against its digest.
        if let Some(base) = m
            .base
            .as_ref()
            .filter(|b| blobs.check(&b.tree, None).is_err())
        {
            let key = crate::pack_key(&base.tree);
            if let Some((bytes, _)) = self.bucket.get_limited(&key, MAX_PACK)? {
                let entries = crate::unpack(&bytes)
                    .ok_or_else(|| tampered(&self.remote.name, &key, "it is not a pack"))?;
                // Each entry checked, then the pack kept whole: one file in the cache, not
                // one a blob (the cache's reads find a blob no loose file holds in it).
                if !pack_intact(&entries) {
                    return Err(tampered(
                        &self.remote.name,
                        &key,
                        "an entry's content does not match its digest",
                    ));
                }
                self.cache_blobs
                    .packs
                    .keep(&base.tree, &bytes)
                    .map_err(|e| Error::io(format_args!("cannot keep {key} in the cache"), e))?;
                held.extend(entries.into_iter().map(|(d, _)| d));
            }
        }
        let mut tried: BTreeSet<String> = BTreeSet::new();
        loop {
            let (st, _) = revl_core::state::State::read(&self.mirror.wal_path(id))?;
            let mut want = revl_core::gc::blobs_named(&st, &blobs);
            if let Some(base) = &m.base {
                want.insert(base.tree.clone());
                if blobs.check(&base.tree, None).is_ok() {
                    for it in self.mirror.base_items(base)? {
                        want.extend(it.digest);
                    }
                }
            }
            if let Some(d) = want.iter().find(|d| !is_digest(d)) {
                return Err(tampered(
                    &self.remote.name,
                    &format!("sessions/{id}/wal"),
                    &format!("it names a digest that is not one ({})", d.escape_debug()),
                ));
            }
            let new: Vec<String> = want
                .into_iter()
                .filter(|d| {
                    !tried.contains(d) && !held.contains(d) && blobs.check(d, None).is_err()
                })
                .collect();
            if new.is_empty() {
                return Ok(());
            }
            // The one copy between stores (revl_core::storage::copy_blobs), from the
            // remote's blobs: 256 asked at a time, so a round holds at most FETCH_BUDGET
            // bytes in memory (blobs of at most FETCH_SMALL bytes each); a larger blob
            // streams into a file of the cache (`incoming/`), then into the mirror as it is
            // read. Each is checked against its name before the mirror keeps it; one that
            // does not match is refused (`corrupt-remote`, naming the object).
            let spill = self.root.join("incoming");
            sweep_stale_spills(&spill);
            tried.extend(new.iter().cloned());
            let from = crate::storage::RemoteBlobs::reading(
                self.bucket.clone(),
                &self.remote.name,
                &spill,
            );
            revl_core::storage::copy_blobs(
                &from,
                &*self.mirror.storage().blobs,
                &new,
                revl_core::storage::Durability::Cached,
                &mut || {},
            )?;
        }
    }
}

/// How many blobs one round of a blob fetch asks for.
const FETCH_CHUNK: usize = 256;
/// The largest blob a fetch holds in memory: a round holds at most
/// [`crate::untrusted::FETCH_BUDGET`] bytes; a larger blob streams into a file.
pub(crate) const FETCH_SMALL: u64 = crate::untrusted::FETCH_BUDGET / FETCH_CHUNK as u64;

/// Whether every entry of a pack holds what its digest names (checked over the cores: ten
/// thousand small entries cost the hashing, not the bytes).
fn pack_intact(entries: &[(String, &[u8])]) -> bool {
    revl_core::util::par_map(entries, |(d, b)| revl_core::util::blake3_hex(b) == *d)
        .into_iter()
        .all(|ok| ok)
}

/// Files a fetch streamed into the cache, removed when it is done with them.
struct Spilled(Vec<PathBuf>);

/// Remove what a fetch killed mid-stream (or cut by a power loss) left in `dir`: a spill
/// file not written to for ten minutes. A fetch running beside this one writes its file
/// continuously, so its file is never that old.
fn sweep_stale_spills(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        // The rule gc applies to the temp files of blob writes (ten minutes).
        let stale =
            e.file_name().to_string_lossy().starts_with(".fetch.") && revl_core::gc::abandoned(&e);
        if stale {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl Drop for Spilled {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The blobs of a remote's cache as a copy out of it reads them (a remote branch moving
/// into this store): the cache's files, and one found damaged fetched again from the
/// remote, checked against its name, and put back in the cache. The cache's blobs are
/// written without an fsync (docs/fleet.md, "Reading a remote"), so a power cut may leave
/// one cut short; only the remote's copy decides whether the blob is lost.
struct MirrorBlobs {
    cache: std::sync::Arc<dyn revl_core::storage::Blobs>,
    remote: String,
    bucket: std::sync::OnceLock<Bucket>,
    open: Box<dyn Fn() -> Result<Bucket> + Send + Sync>,
    spill: PathBuf,
    swept: std::sync::Once,
    /// The base-tree packs the cache keeps whole: a blob no loose file holds is read there.
    packs: crate::packs::Packs,
}

impl MirrorBlobs {
    /// The blobs `cache` holds of the remote `name` of `store`, its bucket `bucket` when it is
    /// open already (else opened from the store's `remotes.toml` at the first blob fetched
    /// again: a copy that finds nothing damaged never reaches the remote).
    fn new(
        store: &Store,
        name: &str,
        cache: std::sync::Arc<dyn revl_core::storage::Blobs>,
        bucket: Option<&Bucket>,
    ) -> MirrorBlobs {
        let opened = std::sync::OnceLock::new();
        if let Some(b) = bucket {
            let _ = opened.set(b.clone());
        }
        let (st, n) = (store.clone(), name.to_string());
        MirrorBlobs {
            cache,
            remote: name.to_string(),
            bucket: opened,
            open: Box::new(move || Bucket::open(&crate::Remotes::load(&st)?.get(&n)?.url)),
            spill: crate::config::remote_dir(store, name).join("incoming"),
            swept: std::sync::Once::new(),
            packs: crate::packs::Packs::new(
                crate::config::remote_dir(store, name)
                    .join("mirror")
                    .join("packs"),
            ),
        }
    }

    fn bucket(&self) -> Result<&Bucket> {
        if let Some(b) = self.bucket.get() {
            return Ok(b);
        }
        let b = (self.open)()?;
        Ok(self.bucket.get_or_init(|| b))
    }

    /// The remote's pack of base tree `tree` (a pack of the cache that no longer reads
    /// whole), every entry checked against its digest, kept in its place: whether that was
    /// done.
    fn pack_again(&self, tree: &str) -> bool {
        let key = crate::pack_key(tree);
        let Some(bytes) = is_digest(tree)
            .then(|| self.bucket().ok())
            .flatten()
            .and_then(|b| b.get_limited(&key, MAX_PACK).ok().flatten())
            .map(|(bytes, _)| bytes)
        else {
            return false;
        };
        crate::unpack(&bytes).is_some_and(|entries| pack_intact(&entries))
            && self.packs.write(tree, &bytes).is_ok()
    }

    /// The remote's blob `digest`, checked against its name, put in the cache.
    fn fetch_again(&self, digest: &str) -> Result<()> {
        use revl_core::storage::Durability;
        let key = blob_key(digest);
        let refused = |why: &str| tampered(&self.remote, &key, why);
        let io = |e| {
            Error::io(
                format_args!("cannot put blob {digest} back in the cache"),
                e,
            )
        };
        // Once a cache's life: what a killed fetch left is older than this one.
        self.swept.call_once(|| sweep_stale_spills(&self.spill));
        let got = self
            .bucket()?
            .fetch_each(
                std::slice::from_ref(&key),
                MAX_OBJECT,
                FETCH_SMALL,
                &self.spill,
            )
            .pop()
            .expect("one answer a key")?;
        match got {
            None => Err(refused("it is missing")),
            Some(Fetched::Bytes(b)) => {
                if revl_core::util::blake3_hex(&b) != digest {
                    return Err(refused("its content does not match its digest"));
                }
                self.cache.put(digest, &b, Durability::Cached).map_err(io)
            }
            Some(Fetched::File { path, blake3 }) => {
                let _spilled = Spilled(vec![path.clone()]);
                if blake3 != digest {
                    return Err(refused("its content does not match its digest"));
                }
                self.cache.put_file(&path, Durability::Cached).map_err(io)?;
                Ok(())
            }
        }
    }
}

impl std::fmt::Debug for MirrorBlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MirrorBlobs({}, {:?})", self.remote, self.cache)
    }
}

impl revl_core::storage::Blobs for MirrorBlobs {
    fn put(
        &self,
        digest: &str,
        bytes: &[u8],
        durability: revl_core::storage::Durability,
    ) -> std::io::Result<()> {
        self.cache.put(digest, bytes, durability)
    }

    fn put_file(
        &self,
        path: &Path,
        durability: revl_core::storage::Durability,
    ) -> std::io::Result<String> {
        self.cache.put_file(path, durability)
    }

    fn put_stream(
        &self,
        r: &mut dyn std::io::Read,
        durability: revl_core::storage::Durability,
    ) -> std::io::Result<String> {
        self.cache.put_stream(r, durability)
    }

    fn sync(&self) -> std::io::Result<()> {
        self.cache.sync()
    }

    fn open(&self, digest: &str) -> std::io::Result<Option<Box<dyn std::io::Read + Send>>> {
        Ok(match self.cache.open(digest)? {
            Some(r) => Some(r),
            None => self.packs.open(digest, &|tree| self.pack_again(tree)),
        })
    }

    fn contains(&self, digest: &str) -> std::io::Result<bool> {
        Ok(self.cache.contains(digest)?
            || self
                .packs
                .size(digest, &|tree| self.pack_again(tree))
                .is_some())
    }

    fn dir(&self) -> Option<&Path> {
        self.cache.dir()
    }

    fn size(&self, digest: &str) -> std::io::Result<Option<u64>> {
        Ok(match self.cache.size(digest)? {
            Some(n) => Some(n),
            None => self.packs.size(digest, &|tree| self.pack_again(tree)),
        })
    }

    /// Fetched from the remote, checked, and put back in the cache; one the remote holds
    /// damaged, or no longer holds, is refused (`corrupt-remote`, naming the object).
    fn refetch(&self, digest: &str) -> std::io::Result<bool> {
        self.fetch_again(digest)
            .map(|()| true)
            .map_err(std::io::Error::other)
    }
}

/// A session of the remote that is not read: an object of it was refused.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unreadable {
    pub session: String,
    pub code: &'static str,
    pub message: String,
}

impl Unreadable {
    pub fn of(id: &str, e: &Error) -> Unreadable {
        Unreadable {
            session: id.to_string(),
            code: e.code.as_str(),
            message: e.message.clone(),
        }
    }
}

/// An error met while writing or checking what a remote's object names, as that object's
/// refusal (an I/O error of this machine stays one).
fn hostile(remote: &str, key: &str, e: Error) -> Error {
    match e.code {
        Code::Io | Code::CorruptRemote => e,
        _ => crate::untrusted::refused(remote, key, &e.message),
    }
}

/// The size of the regular file at `path` (not followed if a symlink), `None` if there is
/// none.
fn len_of(path: &Path) -> Option<u64> {
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}

/// Make `to` a hard link to `from` (by a link beside it and a rename over it); on any
/// failure (another filesystem, no links) `to` stays the copy it was.
fn share(from: &Path, to: &Path) {
    let tmp = to.with_extension("wal.link");
    let _ = std::fs::remove_file(&tmp);
    if std::fs::hard_link(from, &tmp).is_err() || std::fs::rename(&tmp, to).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                make_writable(&e.path());
            }
        }
    }
}

/// One session in a remote's lineage.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LineageEntry {
    pub session: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<i64>,
    pub state: String,
    pub head: u64,
    pub epoch: u64,
    pub writer: String,
}

impl LineageEntry {
    pub fn of(m: &Manifest) -> Self {
        LineageEntry {
            session: m.session.clone(),
            parent: m.parent.clone(),
            at: m.at,
            state: m.state.clone(),
            head: m.head,
            epoch: m.epoch,
            writer: m.writer.clone(),
        }
    }
}

/// `revl remote lineage NAME [SESSION]`: from the index when the remote has one, else by
/// listing the bucket and reading every manifest.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LineageReport {
    pub kind: &'static str,
    pub remote: String,
    /// `index` or `bucket`.
    pub source: &'static str,
    pub count: usize,
    pub sessions: Vec<LineageEntry>,
    /// Sessions whose manifest was refused (`corrupt-remote`): left out, never blocking the
    /// others.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<Unreadable>,
    /// Sessions whose index row is not what the bucket's verified WAL says (answered from
    /// the bucket instead) or that the bucket does not hold: rebuild the index (`revl
    /// remote index NAME URL`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stale: Vec<String>,
}

pub fn lineage(store: &Store, remote: &Remote, of: Option<&str>) -> Result<LineageReport> {
    let unreadable;
    let mut stale = Vec::new();
    let (source, mut all) = match &remote.index {
        Some(url) => {
            let mut ix = crate::index::Index::connect(url)?;
            let (mut rows, unread) = ix.lineage(&remote.name, of)?;
            // A row the table holds in a shape revl never writes stands for its session
            // alone: it differs from any truth, so it is checked against the bucket and
            // named stale like any row that differs.
            rows.extend(unread.into_iter().map(|session| LineageEntry {
                session,
                parent: None,
                at: None,
                state: String::new(),
                head: 0,
                epoch: 0,
                writer: String::new(),
            }));
            let r = Reader::open(store, remote)?;
            match of {
                // A family's rows are checked against the bucket's verified WALs before
                // they are believed: a row that differs (another store pushed without the
                // index, or the table was written by hand) is answered from the bucket
                // and named stale.
                Some(of_id) => {
                    let (checked, late, bad) = check_rows(&r, rows)?;
                    (stale, unreadable) = (late, bad);
                    // Only the family the verified rows make (a forged parent makes none).
                    ("index", family(checked, of_id))
                }
                // The whole remote: a row equal to what this store verified of its session
                // is answered as verified (no bucket read); every other row (one this store
                // never verified, or one that differs from it: a later push, or a row
                // written by hand) is checked against the bucket as a family's rows are.
                None => {
                    let (mut known, rest): (Vec<_>, Vec<_>) = rows
                        .into_iter()
                        .partition(|row| r.verified_entry(&row.session).as_ref() == Some(row));
                    let (checked, late, bad) = check_rows(&r, rest)?;
                    known.extend(checked);
                    (stale, unreadable) = (late, bad);
                    ("index", known)
                }
            }
        }
        None => {
            let r = Reader::open(store, remote)?;
            // A family's query verifies only the family (the cache keeps what it verified).
            let (ms, bad) = match of {
                Some(id) => family_manifests(&r, id)?,
                None => bucket_manifests(&r)?,
            };
            unreadable = bad;
            ("bucket", ms.iter().map(LineageEntry::of).collect())
        }
    };
    if source == "bucket" {
        if let Some(id) = of {
            all = family(all, id);
        }
    }
    all.sort_by(|a, b| a.session.cmp(&b.session));
    Ok(LineageReport {
        kind: "revl.remote-lineage",
        remote: remote.name.clone(),
        source,
        count: all.len(),
        sessions: all,
        unreadable,
        stale,
    })
}

/// Index rows checked against the bucket: each row's session's manifest read and its WAL
/// verified; a row equal to what they say is believed, one that differs is answered from
/// the bucket and named stale (as is a row for a session the bucket does not hold, which is
/// left out); sessions refused (`corrupt-remote`) are returned apart.
fn check_rows(
    r: &Reader,
    rows: Vec<LineageEntry>,
) -> Result<(Vec<LineageEntry>, Vec<String>, Vec<Unreadable>)> {
    let ids: Vec<String> = rows
        .iter()
        .filter(|e| revl_core::store::is_session_id(&e.session))
        .map(|e| e.session.clone())
        .collect();
    let (ms, bad) = verified_of(r, &ids)?;
    let by: std::collections::BTreeMap<&str, LineageEntry> = ms
        .iter()
        .map(|m| (m.session.as_str(), LineageEntry::of(m)))
        .collect();
    let (mut checked, mut stale) = (Vec::new(), Vec::new());
    for row in rows {
        if bad.iter().any(|u| u.session == row.session) {
            continue;
        }
        match by.get(row.session.as_str()) {
            Some(truth) => {
                if *truth != row {
                    stale.push(row.session.clone());
                }
                checked.push(truth.clone());
            }
            None => stale.push(row.session.escape_debug().to_string()),
        }
    }
    Ok((checked, stale, bad))
}

/// Every session's manifest in the bucket, each believed only once its WAL is verified
/// and the lineage it states is the WAL's ([`Reader::verify_wals`]); those refused
/// (`corrupt-remote`) are listed apart, never blocking the others.
pub fn bucket_manifests(r: &Reader) -> Result<(Vec<Manifest>, Vec<Unreadable>)> {
    verified_of(r, &r.session_ids()?)
}

/// The verified manifests of `ids` (read 32 at a time; a session the bucket does not hold
/// is left out), and those refused.
pub fn verified_of(r: &Reader, ids: &[String]) -> Result<(Vec<Manifest>, Vec<Unreadable>)> {
    let (stated, mut bad) = stated_of(r, ids)?;
    let ok = verify_stated(r, stated, &mut bad)?;
    Ok((ok, bad))
}

/// The verified manifests of the family of `id` (its root ancestor and everything below
/// it): every manifest is read and checked, but only the WALs of the family their stated
/// lineage makes are fetched and verified; the family is then made again from the verified
/// ones alone (a manifest lying about its lineage is refused, never followed).
pub fn family_manifests(r: &Reader, id: &str) -> Result<(Vec<Manifest>, Vec<Unreadable>)> {
    let (stated, mut bad) = stated_of(r, &r.session_ids()?)?;
    let entries: Vec<LineageEntry> = stated.iter().map(|(_, m)| LineageEntry::of(m)).collect();
    let keep: BTreeSet<String> = family(entries, id).into_iter().map(|e| e.session).collect();
    let stated = stated
        .into_iter()
        .filter(|(_, m)| keep.contains(&m.session))
        .collect();
    let ok = verify_stated(r, stated, &mut bad)?;
    Ok((ok, bad))
}

/// A manifest as read (its bytes) and parsed, not believed yet.
type Stated = (Vec<u8>, Manifest);

/// The manifests of `ids` read and checked (the rules of "A remote is untrusted input"),
/// not yet believed; those refused go to the second list; any other error stops.
fn stated_of(r: &Reader, ids: &[String]) -> Result<(Vec<Stated>, Vec<Unreadable>)> {
    let mut parsed = Vec::new();
    let mut bad = Vec::new();
    for chunk in ids.chunks(1024) {
        let keys: Vec<(String, u64)> = chunk
            .iter()
            .map(|id| (crate::manifest_key(id), MAX_MANIFEST))
            .collect();
        for (id, got) in chunk.iter().zip(r.bucket.get_each_limited(&keys)) {
            let judged = got.and_then(|got| match got {
                Some(b) => r.judged(id, &b, |_| Ok(())).map(|m| Some((b, m))),
                None => Ok(None),
            });
            match judged {
                Ok(Some(one)) => parsed.push(one),
                Ok(None) => {}
                Err(e) => refused_into(e, id, &mut bad)?,
            }
        }
    }
    Ok((parsed, bad))
}

/// The manifests of `stated` whose WAL verifies and states their lineage
/// ([`Reader::verify_wals`]); those refused are added to `bad`.
fn verify_stated(
    r: &Reader,
    stated: Vec<Stated>,
    bad: &mut Vec<Unreadable>,
) -> Result<Vec<Manifest>> {
    let mut out = Vec::new();
    for chunk in stated.chunks(1024) {
        let ms: Vec<Manifest> = chunk.iter().map(|(_, m)| m.clone()).collect();
        for ((b, m), v) in chunk.iter().zip(r.verify_wals(&ms)) {
            match r.judge(&m.session, b, || v) {
                Ok(()) => out.push(m.clone()),
                Err(e) => refused_into(e, &m.session, bad)?,
            }
        }
    }
    Ok(out)
}

/// A refusal (`corrupt-remote`) of session `id` listed in `bad`; any other error returned.
fn refused_into(e: Error, id: &str, bad: &mut Vec<Unreadable>) -> Result<()> {
    if e.code == Code::CorruptRemote {
        bad.push(Unreadable::of(id, &e));
        Ok(())
    } else {
        Err(e)
    }
}

/// The family of `id`: its root ancestor and every session below that root.
pub fn family(all: Vec<LineageEntry>, id: &str) -> Vec<LineageEntry> {
    let by: std::collections::BTreeMap<String, LineageEntry> =
        all.iter().map(|e| (e.session.clone(), e.clone())).collect();
    let mut root = id.to_string();
    let mut hops = 0;
    while let Some(p) = by.get(&root).and_then(|e| e.parent.clone()) {
        if !by.contains_key(&p) || hops > 64 {
            break;
        }
        root = p;
        hops += 1;
    }
    let mut keep: BTreeSet<String> = [root].into();
    loop {
        let before = keep.len();
        for e in &all {
            if e.parent.as_ref().is_some_and(|p| keep.contains(p)) {
                keep.insert(e.session.clone());
            }
        }
        if keep.len() == before {
            break;
        }
    }
    all.into_iter()
        .filter(|e| keep.contains(&e.session))
        .collect()
}

// ---- a branch on another machine ----

/// The scratch store of a remote fork of `id`.
fn fork_dir(store: &Store, remote: &str, id: &str) -> PathBuf {
    crate::config::remote_dir(store, remote)
        .join("forks")
        .join(id)
}

fn scratch(store: &Store, remote: &str, id: &str, mirror: &Store) -> Result<Store> {
    let dir = fork_dir(store, remote, id);
    let work = Store::open_copy(
        &dir,
        Copied {
            workspaces: dir.join("heads"),
            untouched: revl_core::storage::Untouched::Workspace,
            writable: true,
            remote: Some(remote.to_string()),
        },
        Some(mirror.root().join("blobs")),
    )?;
    Ok(refetching(store, remote, work, None))
}

/// `cache` (a store over a remote's cached blobs: the mirror, a remote fork's scratch
/// store) with every blob read that finds one damaged or missing fetching it again from
/// the remote `remote` of `store` ([`MirrorBlobs`]), its bucket `bucket` if open already.
fn refetching(store: &Store, remote: &str, cache: Store, bucket: Option<&Bucket>) -> Store {
    refetching_with(store, remote, cache, bucket).0
}

/// [`refetching`], and the cache's blobs (which keep its packs).
fn refetching_with(
    store: &Store,
    remote: &str,
    cache: Store,
    bucket: Option<&Bucket>,
) -> (Store, std::sync::Arc<MirrorBlobs>) {
    let blobs = std::sync::Arc::new(MirrorBlobs::new(
        store,
        remote,
        cache.storage().blobs.clone(),
        bucket,
    ));
    let storage = revl_core::storage::Storage {
        journals: cache.storage().journals.clone(),
        blobs: blobs.clone(),
    };
    (cache.with_storage(storage), blobs)
}

/// `revl fork --remote NAME SESSION --at K`: the session's workspace at its head is made
/// from the bucket, and the fork is enumerated there (pending in this store).
pub fn fork(
    store: &Store,
    cache: &crate::RemoteCache,
    given: &str,
    k: i64,
) -> Result<revl_core::report::ForkReport> {
    // Through the store's verified cache of the remote, as every read verb: one verified
    // copy of each object.
    let r = cache.reader();
    let id = r.resolve(given)?;
    // A hostile object met pulling the family marks its own session (the sync does); one
    // met after is this session's ([`Reader::refused`]).
    let m = r.sync_family(&id)?;
    fork_of(store, r, &id, &m, k).inspect_err(|e| r.refused(&id, e))
}

fn fork_of(
    store: &Store,
    r: &Reader,
    id: &str,
    m: &Manifest,
    k: i64,
) -> Result<revl_core::report::ForkReport> {
    let (remote, id) = (&r.remote, id.to_string());
    let dir = fork_dir(store, &remote.name, &id);
    // A branch an earlier confirm made here but never moved is moved before its scratch
    // store goes.
    adopt_branches(store, &remote.name, &id, Some(&r.bucket))?;
    if dir.exists() {
        make_writable(&dir);
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io(dir.display(), e))?;
    }
    let work = scratch(store, &remote.name, &id, &r.mirror)?;
    copy_journal(&r.mirror, &work, &id, m.wal_length)?;
    // The head, from the mirror (whose workspace is the base tree).
    let src = r.mirror.attach_read(&id)?;
    let head = src.state().head() as i64;
    src.materialise_at(head, &dir.join("heads").join(&id))
        .map_err(|e| hostile(&remote.name, &format!("sessions/{id}/wal"), e))?;
    drop(src);
    let mut s = work.attach(&id)?;
    s.fork(k)
}

/// The fork `fork-confirm [SESSION] --hash H` confirms.
pub enum ForkOf {
    /// The local session's own.
    Local,
    /// A fork enumerated with `fork --remote`, waiting in this store.
    Remote { remote: String, id: String },
}

/// Which fork `fork-confirm [SESSION] --hash H` confirms: a pending remote fork of SESSION
/// (the only one when SESSION is not given), unless the store ran SESSION and its own
/// pending fork has the hash H; else the local session's. A session this store never ran,
/// with a remote configured and no remote fork of it pending, is `no-pending-fork`.
pub fn fork_to_confirm(store: &Store, session: Option<&str>, hash: &str) -> Result<ForkOf> {
    let given = session.unwrap_or("");
    let remote = pending_fork(store, given)?;
    match (session.map(|sid| store.resolve(sid)), remote) {
        (None, None) => Err(Error::new(
            Code::Usage,
            "fork-confirm needs SESSION (no remote fork is pending in this store)",
            "revl fork-confirm SESSION --hash H",
        )),
        (None | Some(Err(_)), Some((remote, id))) => Ok(ForkOf::Remote { remote, id }),
        (Some(Ok(local)), Some((remote, id))) => {
            // The session's own pending fork answers to its hash; any other hash is the
            // remote fork's (whose confirm judges it).
            let (st, _) = revl_core::state::State::read(&store.wal_path(&local))?;
            match st.fork_pending {
                Some((_, Some(h))) if h == hash => Ok(ForkOf::Local),
                _ => Ok(ForkOf::Remote { remote, id }),
            }
        }
        (Some(Err(e)), None)
            if e.code == Code::UnknownSession && !crate::Remotes::load(store)?.remotes.is_empty() =>
        {
            Err(Error::new(
                Code::NoPendingFork,
                format!("no fork of session {given} is pending in this store: it never ran here, and no `fork --remote` of it was enumerated"),
                "enumerate it first: `revl fork --remote NAME SESSION --at K`, read the report, then confirm its hash",
            ))
        }
        (Some(Err(e)), None) => Err(e),
        (Some(Ok(_)), None) => Ok(ForkOf::Local),
    }
}

/// The remote a pending remote fork of `given` (an id or prefix; empty: any) waits in, if
/// any.
pub fn pending_fork(store: &Store, given: &str) -> Result<Option<(String, String)>> {
    let g = given.trim().to_ascii_lowercase();
    let mut found = Vec::new();
    for r in crate::Remotes::load(store)?.list() {
        let forks = crate::config::remote_dir(store, &r.name).join("forks");
        let Ok(rd) = std::fs::read_dir(&forks) else {
            continue;
        };
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            // No id given: every pending remote fork (the caller wants exactly one).
            if g.is_empty() || (g.len() >= 6 && n.starts_with(&g)) {
                found.push((r.name.clone(), n));
            }
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        n => Err(Error::new(
            Code::AmbiguousSession,
            format!("{given} matches {n} pending remote forks"),
            "give the whole session id, and --remote NAME",
        )),
    }
}

/// Move a branch a remote fork made in the scratch store `work` into `store`: every blob
/// it names, then its WAL (the commit point of the move). Each step is idempotent: a move
/// cut short is finished by running it again. Its base tree comes later (its first push, or
/// its close: [`revl_core::Session`]'s capture at close).
fn move_branch(
    store: &Store,
    work: &Store,
    branch: &str,
    remote: &str,
    bucket: Option<&Bucket>,
) -> Result<()> {
    let (st, meta) = revl_core::state::State::read(&work.wal_path(branch))?;
    // The same copy as a push's, through the stores' blobs (a digest the WAL names that is
    // not a blob, a small preimage held inline, is skipped). The scratch store's blobs are
    // the remote's cache: one a power cut damaged there is fetched again from the remote.
    let named: Vec<String> = revl_core::gc::blobs_named(&st, &work.blobs())
        .into_iter()
        .collect();
    let from = MirrorBlobs::new(store, remote, work.storage().blobs.clone(), bucket);
    revl_core::storage::copy_blobs(
        &from,
        &*store.storage().blobs,
        &named,
        revl_core::storage::Durability::Synced,
        &mut || {},
    )?;
    // The branch's base tree is not captured here: like a session made before its store had
    // a remote, its first push captures it (its workspace then holds, for every path the
    // branch never touched, what it held when the branch was made), so a branch costs no
    // second copy of its files unless it is pushed.
    copy_journal(work, store, branch, meta.good_len)
}

/// The first `len` bytes of session `id`'s WAL copied from store `from` into store `to`,
/// through their journals (the one copy of a WAL between stores, a push's too: the
/// mirror's into a remote fork's scratch store, a branch's from there into this store).
fn copy_journal(from: &Store, to: &Store, id: &str, len: u64) -> Result<()> {
    revl_core::storage::copy_journal(&*from.storage().journals, &*to.storage().journals, id, len)
}

/// Session `id`'s WAL made in `store` holding exactly `bytes` (whole or not at all).
fn create_journal(store: &Store, id: &str, bytes: &[u8]) -> Result<()> {
    store
        .storage()
        .journals
        .create(id, bytes)
        .map_err(|e| Error::io(format!("cannot write the WAL of session {id}"), e))
}

/// Branches a remote fork of `id` completed in its scratch store that never moved into
/// this store (revl was killed between the two): moved now, so the scratch store can go.
fn adopt_branches(
    store: &Store,
    remote: &str,
    id: &str,
    bucket: Option<&Bucket>,
) -> Result<Vec<String>> {
    let dir = fork_dir(store, remote, id);
    if !dir.join("sessions").join(id).exists() {
        return Ok(Vec::new());
    }
    let mirror_dir = crate::config::remote_dir(store, remote).join("mirror");
    let mirror = Store::open_copy(&mirror_dir, mirror_settings(&mirror_dir), None)?;
    let work = scratch(store, remote, id, &mirror)?;
    let (parent, _) = revl_core::state::State::read(&work.wal_path(id))?;
    let mut moved = Vec::new();
    for c in parent.parallel_children.iter().filter(|c| c.complete) {
        if !store.wal_path(&c.branch).exists() && work.wal_path(&c.branch).exists() {
            move_branch(store, &work, &c.branch, remote, bucket)?;
            moved.push(c.branch.clone());
        }
    }
    Ok(moved)
}

/// `revl fork-confirm SESSION --hash H --into DIR` of a remote fork: the parallel fork runs
/// in the scratch store; its branch (WAL and the blobs it names) moves into this store.
pub fn fork_confirm(
    store: &Store,
    remote: &str,
    id: &str,
    hash: &str,
    into: &Path,
) -> Result<revl_core::report::ForkReport> {
    confirm_of(store, remote, id, hash, into).inspect_err(|e| {
        // A blob the branch names that the remote holds damaged: the session is marked as
        // a read marks it ([`Reader::refused`]).
        if e.code == Code::CorruptRemote {
            if let Ok(r) = crate::Remotes::load(store)
                .and_then(|rs| rs.get(remote))
                .and_then(|rm| Reader::open(store, &rm))
            {
                r.refused(id, e);
            }
        }
    })
}

fn confirm_of(
    store: &Store,
    remote: &str,
    id: &str,
    hash: &str,
    into: &Path,
) -> Result<revl_core::report::ForkReport> {
    let dir = fork_dir(store, remote, id);
    if !dir.join("sessions").join(id).exists() {
        return Err(Error::new(
            Code::NoPendingFork,
            format!("no remote fork of session {id} is pending in this store (remote {remote})"),
            "enumerate it first: `revl fork --remote NAME SESSION --at K`",
        ));
    }
    // The confirm before this one was killed after it forked: its branch is moved in now,
    // and that fork is no longer pending.
    let adopted = adopt_branches(store, remote, id, None)?;
    if !adopted.is_empty() {
        make_writable(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        return Err(Error::new(
            Code::NoPendingFork,
            format!(
                "an earlier fork-confirm of session {id} was interrupted after it forked: its branch {} is now this store's session (nothing was lost); no fork is pending",
                adopted.join(", ")
            ),
            "use that branch (`revl status BRANCH` shows it), or enumerate again: `revl fork --remote NAME SESSION --at K`",
        ));
    }
    let mirror_dir = crate::config::remote_dir(store, remote).join("mirror");
    let mirror = Store::open_copy(&mirror_dir, mirror_settings(&mirror_dir), None)?;
    // DIR becomes a workspace of this store: the scratch store's checks see only itself.
    store.check_branch_dir(&revl_core::store::resolve_future(into)?)?;
    let work = scratch(store, remote, id, &mirror)?;
    let mut s = work.attach(id)?;
    let report = s.fork_confirm_into(hash, into)?;
    drop(s);
    let Some(branch) = report.branch.clone().filter(|_| report.forked) else {
        return Ok(report);
    };
    store.failpoints().point("remote-fork.before-move");
    move_branch(store, &work, &branch, remote, None)?;
    make_writable(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}
