//! A fault-injecting wrapper over the storage traits (docs/architecture.md, "Storage traits
//! and their guarantees"): the store's journals and blobs, with one chosen write operation
//! made to fail, tear or stop. The crash tests run the library's verbs through it in
//! process and then open the store again as a new process would, to check that what the
//! traits promise is all the code above them needs.
//!
//! Operations are counted in the order they happen, each write once: a journal created, a
//! journal opened for appending (it may cut a torn tail), an append, a sync, a blob put
//! (bytes or a file). Reads are passed through.

use crate::storage::{Appender, Blobs, Copied, Durability, Journals, Lease, Storage};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What happens at the chosen operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// It fails (an I/O error, as a full disk gives) and writes nothing; later operations
    /// work again.
    Fail,
    /// Half of its bytes are written (an append or a journal's creation: the first half,
    /// durably; anything else: nothing), then storage stops as in [`Fault::Stop`].
    Tear,
    /// It and every later operation fail without writing anything: the machine stopped
    /// here. Whatever the process does next never reaches storage.
    Stop,
}

/// The plan shared by every wrapped journal, appender and blob store of one run.
#[derive(Debug)]
struct Plan {
    at: u64,
    fault: Fault,
    count: AtomicU64,
    stopped: AtomicBool,
    log: Mutex<Vec<String>>,
}

impl Plan {
    /// Count the operation `what`: `Ok(None)` to run it, `Ok(Some(fault))` to inject, `Err`
    /// when storage has stopped.
    fn pass(&self, what: String) -> std::io::Result<Option<Fault>> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(stopped());
        }
        let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(what);
        if n != self.at {
            return Ok(None);
        }
        if self.fault != Fault::Fail {
            self.stopped.store(true, Ordering::SeqCst);
        }
        Ok(Some(self.fault))
    }
}

fn stopped() -> std::io::Error {
    std::io::Error::other("storage stopped (injected fault)")
}

fn failed() -> std::io::Error {
    std::io::Error::other("injected I/O failure")
}

/// A store's storage with one fault planned: [`Faulty::storage`] is what the store uses.
#[derive(Debug, Clone)]
pub struct Faulty {
    plan: Arc<Plan>,
    inner: Storage,
}

impl Faulty {
    /// `inner`, with `fault` at the `at`-th write operation (from 1; 0: never).
    pub fn new(inner: Storage, at: u64, fault: Fault) -> Faulty {
        Faulty {
            plan: Arc::new(Plan {
                at,
                fault,
                count: AtomicU64::new(0),
                stopped: AtomicBool::new(false),
                log: Mutex::new(Vec::new()),
            }),
            inner,
        }
    }

    /// The storage to give the store ([`crate::store::Store::with_storage`]).
    pub fn storage(&self) -> Storage {
        Storage {
            journals: Arc::new(FaultyJournals {
                plan: self.plan.clone(),
                inner: self.inner.journals.clone(),
            }),
            blobs: Arc::new(FaultyBlobs {
                plan: self.plan.clone(),
                inner: self.inner.blobs.clone(),
            }),
        }
    }

    /// Write operations counted so far.
    pub fn operations(&self) -> u64 {
        self.plan.count.load(Ordering::SeqCst)
    }

    /// The operations counted so far, in order (`create <id>`, `append <id> <n> bytes`, …).
    pub fn log(&self) -> Vec<String> {
        self.plan
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether storage stopped (a [`Fault::Tear`] or [`Fault::Stop`] was injected).
    pub fn stopped(&self) -> bool {
        self.plan.stopped.load(Ordering::SeqCst)
    }
}

#[derive(Debug)]
struct FaultyJournals {
    plan: Arc<Plan>,
    inner: Arc<dyn Journals>,
}

impl Journals for FaultyJournals {
    fn create(&self, id: &str, bytes: &[u8]) -> std::io::Result<()> {
        match self.plan.pass(format!("create {id}"))? {
            None => self.inner.create(id, bytes),
            Some(Fault::Fail) => Err(failed()),
            // Creation is atomic: a torn one leaves nothing a reader sees.
            Some(_) => Err(stopped()),
        }
    }

    fn read_range(&self, id: &str, from: u64, to: u64) -> std::io::Result<Vec<u8>> {
        self.inner.read_range(id, from, to)
    }

    fn appender(&self, id: &str, lease: &Lease, keep: u64) -> std::io::Result<Box<dyn Appender>> {
        match self.plan.pass(format!("open {id} at {keep}"))? {
            None => Ok(Box::new(FaultyAppender {
                plan: self.plan.clone(),
                id: id.to_string(),
                inner: self.inner.appender(id, lease, keep)?,
            })),
            Some(Fault::Fail) => Err(failed()),
            Some(_) => Err(stopped()),
        }
    }

    fn lease(&self, id: &str, wait: Duration) -> std::io::Result<Option<Lease>> {
        self.inner.lease(id, wait)
    }

    fn copied(&self) -> Option<&Copied> {
        self.inner.copied()
    }
}

struct FaultyAppender {
    plan: Arc<Plan>,
    id: String,
    inner: Box<dyn Appender>,
}

impl Appender for FaultyAppender {
    fn append(&mut self, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
        let what = format!("append {} {} bytes", self.id, bytes.len());
        match self.plan.pass(what)? {
            None => self.inner.append(bytes, durability),
            Some(Fault::Fail) => Err(failed()),
            Some(Fault::Tear) => {
                let _ = self
                    .inner
                    .append(&bytes[..bytes.len() / 2], Durability::Synced);
                Err(stopped())
            }
            Some(Fault::Stop) => Err(stopped()),
        }
    }

    fn sync(&mut self) -> std::io::Result<()> {
        match self.plan.pass(format!("sync {}", self.id))? {
            None => self.inner.sync(),
            Some(Fault::Fail) => Err(failed()),
            Some(_) => Err(stopped()),
        }
    }
}

#[derive(Debug)]
struct FaultyBlobs {
    plan: Arc<Plan>,
    inner: Arc<dyn Blobs>,
}

impl Blobs for FaultyBlobs {
    fn put(&self, digest: &str, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
        match self.plan.pass(format!("put {digest}"))? {
            None => self.inner.put(digest, bytes, durability),
            Some(Fault::Fail) => Err(failed()),
            // A put is atomic: torn, it leaves nothing under the blob's name.
            Some(_) => Err(stopped()),
        }
    }

    fn put_file(&self, path: &Path, durability: Durability) -> std::io::Result<String> {
        match self.plan.pass(format!("put-file {}", path.display()))? {
            None => self.inner.put_file(path, durability),
            Some(Fault::Fail) => Err(failed()),
            Some(_) => Err(stopped()),
        }
    }

    fn put_stream(&self, r: &mut dyn Read, durability: Durability) -> std::io::Result<String> {
        match self.plan.pass("put-stream".to_string())? {
            None => self.inner.put_stream(r, durability),
            Some(Fault::Fail) => Err(failed()),
            Some(_) => Err(stopped()),
        }
    }

    fn sync(&self) -> std::io::Result<()> {
        match self.plan.pass("sync blobs".to_string())? {
            None => self.inner.sync(),
            Some(Fault::Fail) => Err(failed()),
            Some(_) => Err(stopped()),
        }
    }

    fn open(&self, digest: &str) -> std::io::Result<Option<Box<dyn Read + Send>>> {
        self.inner.open(digest)
    }

    fn contains(&self, digest: &str) -> std::io::Result<bool> {
        self.inner.contains(digest)
    }

    fn refetch(&self, digest: &str) -> std::io::Result<bool> {
        self.inner.refetch(digest)
    }

    fn dir(&self) -> Option<&Path> {
        self.inner.dir()
    }
}
