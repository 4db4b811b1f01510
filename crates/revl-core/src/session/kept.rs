//! Incremental attach (docs/architecture.md, "Incremental attach"): what a long-lived handle
//! (the Python `Session`, the MCP server) keeps of a session between two calls, so that the
//! next attach reads only what was appended since, with the same checks, instead of the
//! whole WAL.

use super::Session;
use crate::state::State;
use crate::wal::WalMeta;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

/// The last bytes of the prefix a [`Kept`] read (its final record's CRC among them): an
/// attach finds them where they were, or reads the whole WAL again.
const TAIL: u64 = 64;

/// A session's state as a released [`Session`] left it, and which WAL prefix it is the
/// replay of: the WAL file (device and inode), the prefix's byte length, last seq and
/// record count, and its last bytes. Given back to [`Store::attach_kept`] (and its read and
/// show forms), it spares re-reading that prefix when the WAL only grew since; anything
/// else (another file in its place, a shorter file, other bytes at the prefix's end, an
/// appended record that does not read or replay cleanly) reads the whole WAL as an attach
/// without it does.
///
/// [`Store::attach_kept`]: crate::store::Store::attach_kept
pub struct Kept {
    id: String,
    state: State,
    file: (u64, u64),
    meta: WalMeta,
    tail: Vec<u8>,
    /// What revl expected of the workspace at this state, where a call built it.
    expected: Option<(usize, std::sync::Arc<crate::drift::Expected>)>,
}

/// What a resumed attach starts from: the state, the WAL's end, and what revl expected of
/// the workspace at the kept state (used only while the state's witness version is the
/// one it was built at).
type Resumed = (
    State,
    WalMeta,
    Option<(usize, std::sync::Arc<crate::drift::Expected>)>,
);

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("id", &self.id)
            .field("len", &self.meta.good_len)
            .field("records", &self.meta.records)
            .finish()
    }
}

impl Kept {
    /// The session this was kept of.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The state of the WAL at `path` now, from the kept state and the records appended
    /// since; `None` when the WAL is not the kept prefix followed by whole, clean records
    /// (then the caller reads it whole, which reports whatever is wrong as it always did).
    pub(super) fn resume(self, path: &Path) -> Option<Resumed> {
        let mut f = File::open(path).ok()?;
        let m = f.metadata().ok()?;
        if (m.dev(), m.ino()) != self.file || m.len() < self.meta.good_len {
            return None;
        }
        let mut tail = vec![0u8; self.tail.len()];
        let at = self.meta.good_len - tail.len() as u64;
        f.read_exact_at(&mut tail, at).ok()?;
        if tail != self.tail {
            return None;
        }
        if m.len() == self.meta.good_len {
            return Some((self.state, self.meta, self.expected));
        }
        let (recs, meta) = crate::wal::read_wal_after(path, &mut f, self.meta).ok()?;
        if meta.torn {
            return None;
        }
        let mut state = self.state;
        for r in recs {
            state.apply_owned(r).ok()?;
        }
        Some((state, meta, self.expected))
    }
}

impl Session {
    /// Release the session (its lock goes with it) and keep its state for the next attach
    /// of a long-lived handle ([`Kept`]). `None` when there is nothing safe to keep: a
    /// session read without its lock, a WAL read as far as it is intact, a torn tail left
    /// in place, a write that failed, or a state whose record count is not the WAL's.
    pub fn keep(mut self) -> Option<Kept> {
        if self.journal.access() != &super::Access::Write || self.journal.torn {
            return None;
        }
        let (good_len, last_seq, records) = self.journal.end()?;
        if records != self.journal.state.records || good_len == 0 {
            return None;
        }
        // The lock is held: nobody else writes, so the file is what was read and written.
        let f = File::open(self.journal.path()).ok()?;
        let m = f.metadata().ok()?;
        if m.len() != good_len {
            return None;
        }
        self.index();
        let expected = self.expected.lock().ok().and_then(|mut e| e.take());
        let n = good_len.min(TAIL);
        let mut tail = vec![0u8; n as usize];
        f.read_exact_at(&mut tail, good_len - n).ok()?;
        Some(Kept {
            id: self.id.clone(),
            state: self.journal.take_state(),
            file: (m.dev(), m.ino()),
            meta: WalMeta {
                torn: false,
                good_len,
                last_seq,
                records,
            },
            tail,
            expected,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::failpoint::Failpoints;
    use crate::store::Store;
    use crate::FileOp;

    /// The handle's next attach resumes from what it kept (it does not fall back to a whole
    /// read), also after another session appended in between, and gives the whole read's state.
    #[test]
    fn a_kept_state_resumes_over_appended_records() {
        let tmp = tempfile::tempdir().unwrap();
        let st = Store::open(&tmp.path().join("store"), Failpoints::none()).unwrap();
        let mut s = st.new_session(&tmp.path().join("ws"), None).unwrap();
        let id = s.id().to_string();
        let write = |s: &mut super::Session, n: u8| {
            s.file_effect(FileOp::Write {
                path: "f.bin".into(),
                content: vec![n; 4096],
            })
            .unwrap();
        };
        write(&mut s, 1);
        let mut kept = s.keep();
        for n in 2..6u8 {
            // Another handle writes in between.
            let mut other = st.attach(&id).unwrap();
            write(&mut other, n);
            drop(other);
            let k = kept.take().expect("kept");
            let (state, meta, _) = k
                .resume(&st.wal_path(&id))
                .expect("resumed, not read whole");
            let (whole, whole_meta) = crate::state::State::read(&st.wal_path(&id)).unwrap();
            assert_eq!(meta, whole_meta);
            assert_eq!(state.steps.len(), whole.steps.len());
            assert_eq!(state.records, whole.records);
            let mut s = st.attach(&id).unwrap();
            write(&mut s, n + 10);
            kept = s.keep();
        }
    }
}
