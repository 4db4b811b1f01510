//! Where a read verb finds its sessions (docs/fleet.md, "Reading a remote"): this store, or a
//! remote's verified, read-only cache. A front end (the CLI, the MCP server, the Python
//! package) writes each read verb once, over a [`Catalog`]; `--remote NAME` (or a `remote`
//! argument) only changes which catalog it is given.
//!
//! [`RemoteCache`] is the remote's side: a session named is resolved among the remote's,
//! pulled with its ancestors and verified (every object against what names it, the lineage
//! its manifest states against its WAL; a hostile one refused and its session marked
//! unreadable) into the store's mirror of the remote (`<store>/remotes/NAME/mirror`), a store
//! of [`revl_core::storage::Copied`] journals that is read-only: the verb then runs on that
//! store exactly as on a local one.

use crate::pull::{Reader, Unreadable};
use crate::Remotes;
use revl_core::{Result, Store};

/// The sessions a read verb reads: resolved (and, for a remote, fetched and verified) before
/// the verb runs on [`Catalog::store`].
pub trait Catalog {
    /// The store the verb reads.
    fn store(&self) -> &Store;

    /// The full id of the session `given` (an id or a unique prefix), ready to be read in
    /// [`Catalog::store`].
    fn session(&self, given: &str) -> Result<String>;

    /// What a listing (`log`, `view`) reads: every session, or the family of `given`; the
    /// sessions of a remote that were refused are listed apart, never blocking the others.
    fn listing(&self, given: Option<&str>) -> Result<Listing>;

    /// A verb run on this catalog failed with `e`: where that is a remote's object refused
    /// (`corrupt-remote`) while the one session the verb named was read, that session is
    /// marked unreadable ([`Reader::refused`]). Nothing for this store's own sessions.
    fn refused(&self, _e: &revl_core::Error) {}

    /// A point `ID` or `ID@K` (`diff`), its session made ready as [`Catalog::session`] does.
    fn point(&self, given: &str) -> Result<String> {
        match given.rsplit_once('@') {
            Some((id, k)) => Ok(format!("{}@{k}", self.session(id)?)),
            None => self.session(given),
        }
    }
}

/// `f` on the catalog `c`: a refusal it meets marks the session it named
/// ([`Catalog::refused`]). Every front end runs a read verb on a catalog through this.
pub fn reading<T>(c: &dyn Catalog, f: impl FnOnce(&dyn Catalog) -> Result<T>) -> Result<T> {
    f(c).inspect_err(|e| c.refused(e))
}

/// What a listing reads.
#[derive(Debug, Default)]
pub struct Listing {
    /// The session whose family is listed (every session when `None`), as the store names it.
    pub session: Option<String>,
    /// Sessions of a remote left out: an object of theirs was refused (`corrupt-remote`).
    pub unreadable: Vec<Unreadable>,
}

/// This store's own sessions: resolved as every local verb resolves them.
impl Catalog for Store {
    fn store(&self) -> &Store {
        self
    }

    fn session(&self, given: &str) -> Result<String> {
        self.resolve(given)
    }

    fn listing(&self, given: Option<&str>) -> Result<Listing> {
        Ok(Listing {
            session: given.map(str::to_string),
            unreadable: Vec::new(),
        })
    }

    /// As given: the verb reads it (`ID@K`) and resolves it in this store itself.
    fn point(&self, given: &str) -> Result<String> {
        Ok(given.to_string())
    }
}

/// A remote's sessions, read through the store's verified cache of it.
pub struct RemoteCache {
    store: Store,
    reader: Reader,
    /// The sessions verbs named, resolved by [`Catalog::session`].
    named: std::sync::Mutex<Vec<String>>,
}

impl RemoteCache {
    /// The cache of the remote `name` of `store` (`revl remote add NAME URL`).
    pub fn open(store: &Store, name: &str) -> Result<RemoteCache> {
        let remote = Remotes::load(store)?.get(name)?;
        Ok(RemoteCache::of(store, Reader::open(store, &remote)?))
    }

    /// The cache over an opened reader (its bucket anywhere: object_store's in-memory one in
    /// tests).
    pub fn of(store: &Store, reader: Reader) -> RemoteCache {
        RemoteCache {
            store: store.clone(),
            reader,
            named: std::sync::Mutex::default(),
        }
    }

    /// The reader that fills the cache (listings of the bucket, a remote fork).
    pub fn reader(&self) -> &Reader {
        &self.reader
    }
}

impl Catalog for RemoteCache {
    fn store(&self) -> &Store {
        &self.reader.mirror
    }

    /// Resolved among the remote's sessions, then pulled with its ancestors, verified.
    fn session(&self, given: &str) -> Result<String> {
        let id = self.reader.resolve(given)?;
        // A hostile object met pulling the family marks its own session (the sync does);
        // only what goes wrong after is this session's to be marked for.
        self.reader.sync_family(&id)?;
        let mut named = self.named.lock().unwrap_or_else(|e| e.into_inner());
        if !named.contains(&id) {
            named.push(id.clone());
        }
        Ok(id)
    }

    /// Only when the verb named one session: a refusal met comparing two is not known to
    /// be either's.
    fn refused(&self, e: &revl_core::Error) {
        let named = self.named.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let [id] = named.as_slice() {
            self.reader.refused(id, e);
        }
    }

    /// Every session of the remote, or the family of `given` (from the index when the remote
    /// has one, else the bucket), each pulled and verified; those refused are listed.
    fn listing(&self, given: Option<&str>) -> Result<Listing> {
        let r = &self.reader;
        let Some(given) = given else {
            let (_, unreadable) = r.sync_all()?;
            return Ok(Listing {
                session: None,
                unreadable,
            });
        };
        let id = r.resolve(given)?;
        let fam = crate::pull::lineage(&self.store, &r.remote, Some(&id))?;
        let mut unreadable = fam.unreadable;
        let others = fam.sessions.into_iter().filter(|e| e.session != id);
        unreadable.extend(r.sync_each(others.map(|e| e.session))?.1);
        r.sync_family(&id)?;
        Ok(Listing {
            session: Some(id),
            unreadable,
        })
    }
}
