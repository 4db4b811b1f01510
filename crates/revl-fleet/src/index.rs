//! The lineage index in PostgreSQL (docs/fleet.md): one row per session of a remote (its parent,
//! fork step, state, head and remote head), kept by every push and rebuilt from the bucket
//! alone by `revl remote index NAME postgres://...`. The bucket stays the truth: the index
//! only answers lineage queries without listing the bucket.

use crate::pull::LineageEntry;
use crate::Manifest;
use revl_core::{Code, Error, Result};

pub struct Index {
    client: postgres::Client,
}

fn pg_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(
        Code::Io,
        format!("{what}: {e}"),
        "check the postgres:// URL and that the server is reachable (`revl remote list` shows the index URL)",
    )
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS revl_sessions (
    remote text NOT NULL,
    session text NOT NULL,
    parent text,
    at bigint,
    state text NOT NULL,
    head bigint NOT NULL,
    epoch bigint NOT NULL,
    writer text NOT NULL,
    wal_length bigint NOT NULL,
    wal_sha256 text NOT NULL,
    PRIMARY KEY (remote, session));
CREATE INDEX IF NOT EXISTS revl_sessions_parent ON revl_sessions (remote, parent);";

impl Index {
    pub fn connect(url: &str) -> Result<Index> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(Error::new(
                Code::Usage,
                format!("{url:?} is not a postgres:// URL"),
                "give postgres://USER[:PASSWORD]@HOST[:PORT]/DB",
            ));
        }
        let mut client = postgres::Client::connect(url, postgres::NoTls)
            .map_err(|e| pg_err("cannot connect to the index", e))?;
        client
            .batch_execute(SCHEMA)
            .map_err(|e| pg_err("cannot create the index's table", e))?;
        Ok(Index { client })
    }

    /// Record a session's new remote head (only a higher epoch replaces a row).
    pub fn upsert(&mut self, remote: &str, m: &Manifest) -> Result<()> {
        self.client
            .execute(
                "INSERT INTO revl_sessions (remote, session, parent, at, state, head, epoch, writer, wal_length, wal_sha256)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (remote, session) DO UPDATE SET parent = EXCLUDED.parent, at = EXCLUDED.at,
                   state = EXCLUDED.state, head = EXCLUDED.head, epoch = EXCLUDED.epoch, writer = EXCLUDED.writer,
                   wal_length = EXCLUDED.wal_length, wal_sha256 = EXCLUDED.wal_sha256
                 WHERE revl_sessions.epoch <= EXCLUDED.epoch",
                &[
                    &remote,
                    &m.session,
                    &m.parent,
                    &m.at,
                    &m.state,
                    &(m.head as i64),
                    &(m.epoch as i64),
                    &m.writer,
                    &(m.wal_length as i64),
                    &m.wal_sha256,
                ],
            )
            .map_err(|e| pg_err("cannot update the index", e))?;
        Ok(())
    }

    /// Replace the remote's rows with `entries` (one transaction, bulk COPY).
    pub fn rebuild(
        &mut self,
        remote: &str,
        entries: &[(LineageEntry, u64, String)],
    ) -> Result<u64> {
        use std::io::Write;
        let mut tx = self
            .client
            .transaction()
            .map_err(|e| pg_err("cannot rebuild the index", e))?;
        tx.execute("DELETE FROM revl_sessions WHERE remote = $1", &[&remote])
            .map_err(|e| pg_err("cannot rebuild the index", e))?;
        let mut w = tx
            .copy_in("COPY revl_sessions (remote, session, parent, at, state, head, epoch, writer, wal_length, wal_sha256) FROM STDIN")
            .map_err(|e| pg_err("cannot rebuild the index", e))?;
        let esc = |s: &str| {
            s.replace('\\', "\\\\")
                .replace('\t', "\\t")
                .replace('\n', "\\n")
                .replace('\r', "\\r")
        };
        for (e, len, sha) in entries {
            let line = format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                esc(remote),
                esc(&e.session),
                e.parent.as_deref().map(esc).unwrap_or_else(|| "\\N".into()),
                e.at.map(|a| a.to_string()).unwrap_or_else(|| "\\N".into()),
                esc(&e.state),
                e.head,
                e.epoch,
                esc(&e.writer),
                len,
                esc(sha)
            );
            w.write_all(line.as_bytes())
                .map_err(|e| Error::io("cannot rebuild the index", e))?;
        }
        let n = w
            .finish()
            .map_err(|e| pg_err("cannot rebuild the index", e))?;
        tx.commit()
            .map_err(|e| pg_err("cannot rebuild the index", e))?;
        Ok(n)
    }

    /// The remote's lineage: every session, or the family of `of` (its root ancestor and
    /// everything below it, by a recursive query); the rows that cannot be read as revl
    /// writes them are returned apart (their sessions, as text).
    pub fn lineage(
        &mut self,
        remote: &str,
        of: Option<&str>,
    ) -> Result<(Vec<LineageEntry>, Vec<String>)> {
        let rows = match of {
            None => self.client.query(
                "SELECT session, parent, at, state, head, epoch, writer FROM revl_sessions WHERE remote = $1 ORDER BY session",
                &[&remote],
            ),
            Some(id) => self.client.query(
                "WITH RECURSIVE up(session, parent, depth) AS (
                    SELECT session, parent, 0 FROM revl_sessions WHERE remote = $1 AND session = $2
                    UNION ALL
                    SELECT s.session, s.parent, up.depth + 1 FROM revl_sessions s JOIN up ON s.session = up.parent
                      WHERE s.remote = $1 AND up.depth < 64),
                 root AS (SELECT session FROM up ORDER BY depth DESC LIMIT 1),
                 down(session) AS (
                    SELECT session FROM root
                    UNION
                    SELECT s.session FROM revl_sessions s JOIN down ON s.parent = down.session WHERE s.remote = $1)
                 SELECT s.session, s.parent, s.at, s.state, s.head, s.epoch, s.writer
                   FROM revl_sessions s JOIN down USING (session) WHERE s.remote = $1 ORDER BY s.session",
                &[&remote, &id],
            ),
        }
        .map_err(|e| pg_err("cannot query the index", e))?;
        // A row is read as the table says, never trusted to be what revl wrote: a column of
        // another type, a NULL where revl writes a value or a negative count makes the row
        // unreadable; it is returned apart (its session, or where it stands: text to be escaped
        // before it is shown), never
        // failing the query, and what the readable rows say is checked by the caller.
        let mut out = (Vec::new(), Vec::new());
        for (i, r) in rows.iter().enumerate() {
            let count = |i: usize| {
                r.try_get::<_, i64>(i)
                    .ok()
                    .and_then(|v| u64::try_from(v).ok())
            };
            let entry = (|| {
                Some(LineageEntry {
                    session: r.try_get(0).ok()?,
                    parent: r.try_get(1).ok()?,
                    at: r.try_get(2).ok()?,
                    state: r.try_get(3).ok()?,
                    head: count(4)?,
                    epoch: count(5)?,
                    writer: r.try_get(6).ok()?,
                })
            })();
            match entry {
                Some(e) => out.0.push(e),
                None => out.1.push(
                    r.try_get::<_, String>(0)
                        .unwrap_or_else(|_| format!("(row {} of the answer)", i + 1)),
                ),
            }
        }
        Ok(out)
    }
}

/// `revl remote index NAME postgres://...`: record the index URL for the remote and rebuild
/// the index from the bucket alone.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Indexed {
    pub remote: String,
    pub index: String,
    pub sessions: u64,
    /// Sessions whose manifest was refused (`corrupt-remote`): not indexed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<crate::pull::Unreadable>,
}

pub fn index(store: &revl_core::Store, name: &str, url: &str) -> Result<Indexed> {
    let mut all = crate::Remotes::load(store)?;
    let remote = all.get(name)?;
    let mut ix = Index::connect(url)?;
    // Only what the bucket's verified WALs say is indexed.
    let reader = crate::pull::Reader::open(store, &remote)?;
    let (manifests, unreadable) = crate::pull::bucket_manifests(&reader)?;
    let rows: Vec<_> = manifests
        .into_iter()
        .map(|m| (LineageEntry::of(&m), m.wal_length, m.wal_sha256.clone()))
        .collect();
    let n = ix.rebuild(name, &rows)?;
    if let Some(c) = all.remotes.get_mut(name) {
        c.index = Some(url.to_string());
    }
    all.save(store)?;
    Ok(Indexed {
        remote: name.to_string(),
        index: redact(url),
        sessions: n,
        unreadable,
    })
}

/// A postgres URL with its password hidden (for documents).
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let cred = &url[s + 3..at];
            match cred.split_once(':') {
                Some((u, _)) => format!("{}{u}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}
