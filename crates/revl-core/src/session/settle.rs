//! Small in-place writes acknowledged on their intent's one fsync (docs/wal-format.md,
//! "Durability order"): their files are fsynced later, in batches (`files-synced`), and
//! after a power loss repair writes again, from the intent's `redo` bytes, every one whose
//! file lost them.

use super::Session;
use crate::error::{Error, Result};
use crate::state::Unsettled;
use crate::undo::{FileKind, Image, RestoreEntry};
use crate::wal::Record;

/// How many in-place writes may wait for their files' fsync before they are fsynced
/// together: one batch of fsyncs per this many writes.
pub const SETTLE_AT: usize = 32;

/// The image a restore entry of a small file describes (what the file showed before).
pub(super) fn pre_image(e: &RestoreEntry) -> Option<Image> {
    match e {
        RestoreEntry::File {
            path, mode, digest, ..
        } => Some(Image {
            digest: Some(digest.clone()),
            kind: Some(FileKind::File),
            mode: Some(mode.clone()),
            path: path.clone(),
        }),
        _ => None,
    }
}

impl Session {
    /// The unsettled writes whose step is recorded (not a pending intent's).
    fn recorded_unsettled(&self) -> Vec<Unsettled> {
        let next = self.journal.state.next_index();
        self.journal
            .state
            .unsettled
            .iter()
            .filter(|u| u.step < next)
            .cloned()
            .collect()
    }

    /// fsync the files of the in-place writes that may not be durable yet, when `force` or
    /// when [`SETTLE_AT`] of them wait, then record `files-synced`: it goes out in the same
    /// write as the verb's next record, and is durable with it. `force` before a verb after
    /// which no later write of this session would settle them: commit, fork.
    pub(crate) fn settle(&mut self, force: bool) -> Result<()> {
        // Checked before the list is copied: every write asks, and each entry holds its bytes.
        if self.journal.state.unsettled.is_empty()
            || (!force && self.journal.state.unsettled.len() < SETTLE_AT)
        {
            return Ok(());
        }
        let todo = self.recorded_unsettled();
        if todo.is_empty() {
            return Ok(());
        }
        let mut paths: Vec<&str> = todo.iter().map(|u| u.post.path.as_str()).collect();
        paths.sort_unstable();
        paths.dedup();
        self.ws.sync_files(&paths)?;
        let through = todo.iter().map(|u| u.step).max().unwrap_or(0);
        self.journal.riders.push(Record::FilesSynced { through });
        Ok(())
    }

    /// Did a step after `u` touch its path (write, delete, rename, a command's change)? Then
    /// that step's own durability decides what the file holds, not `u`'s bytes.
    fn touched_later(&self, u: &Unsettled) -> bool {
        let q = serde_json::to_string(&u.post.path).unwrap_or_default();
        let pats = [
            format!("\"path\":{q}"),
            format!("\"from\":{q}"),
            format!("\"to\":{q}"),
        ];
        self.journal
            .state
            .steps
            .iter()
            .skip(u.step as usize + 1)
            .any(|s| {
                let d = s.detail().to_string();
                pats.iter().any(|p| d.contains(p.as_str()))
            })
    }

    /// After a power loss (an unsettled write was made in another boot of the machine):
    /// write again, durably, every such write whose file does not show its new bytes. A file
    /// that shows neither image kept part of the write (ext4 journals a size or mode change
    /// apart from the bytes) or was changed since by hand: what it holds is preserved first,
    /// as a rewind preserves drift, then the write is made again. A file removed or replaced
    /// by a directory since is left as it is (`verify` reports it). A write a later step
    /// undid or touched is skipped: that step's own durability decides what the file holds.
    /// Returns the last step covered: the caller records `files-synced` after the repair's
    /// other records.
    pub(super) fn redo_lost_writes(&mut self) -> Result<Option<u64>> {
        let boot = crate::util::boot_id();
        let old: Vec<Unsettled> = self
            .recorded_unsettled()
            .into_iter()
            .filter(|u| Some(u.redo.boot.as_str()) != boot)
            .collect();
        let Some(through) = old.iter().map(|u| u.step).max() else {
            return Ok(None);
        };
        // What the log says each path holds now (redoing a write changes no step).
        let exp = crate::drift::Expected::of_in_with(
            &self.journal.state.steps,
            &self.blobs,
            self.journal.state.inherited(),
        );
        for u in &old {
            let undone = self
                .journal
                .state
                .steps
                .get(u.step as usize)
                .is_none_or(|s| s.undone);
            if undone || self.touched_later(u) || self.ws.shows(&u.post)? {
                continue;
            }
            self.redo_over(u, &exp)?;
        }
        Ok(Some(through))
    }

    /// Make an in-place write again over whatever its file holds: bytes that are neither its
    /// preimage nor its new bytes are preserved first (against `exp`, the state with the
    /// write done). False when the path is no longer a regular file (left as it is).
    pub(super) fn redo_over(
        &mut self,
        u: &Unsettled,
        exp: &crate::drift::Expected,
    ) -> Result<bool> {
        let shows_pre = match pre_image(&u.pre) {
            Some(pre) => self.ws.shows(&pre)?,
            None => false,
        };
        if !shows_pre {
            self.rewind()
                .preserve_drift(u.step, std::slice::from_ref(&u.pre), exp)?;
        }
        self.redo_write(u)
    }

    /// Write an unsettled write's bytes and mode again, durably (false: the path is no
    /// longer a regular file, nothing written).
    fn redo_write(&self, u: &Unsettled) -> Result<bool> {
        let bytes = crate::workspace::unb64(&u.redo.content).map_err(|_| {
            Error::new(
                crate::error::Code::CorruptWal,
                format!("the redo bytes of step {} are not base64", u.step),
                "the WAL is damaged; `revl recover` gives a verdict",
            )
        })?;
        let mode = u
            .post
            .mode
            .clone()
            .or_else(|| match &u.pre {
                RestoreEntry::File { mode, .. } => Some(mode.clone()),
                _ => None,
            })
            .unwrap_or_else(|| "0644".into());
        self.ws.rewrite_small(&u.post.path, &bytes, &mode, u.step)
    }
}
