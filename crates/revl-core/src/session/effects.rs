//! Effects on a live session (docs/reference.md, "Effects"): witnessed file effects,
//! provisions, boundaries (exec is in `exec`). Each announces itself durably (`intent`)
//! before it changes anything.

use super::Session;
use crate::error::{Error, Result};
use crate::report::Stepped;
use crate::step::{fs_scope, sandbox_scope};
use crate::undo::{to_value, EffectDetail, Image, IntentAfter, Undo};
use crate::wal::{Record, StepRecord};
use crate::workspace::FileOp;
use serde_json::json;

impl Session {
    // ---- effects ----

    /// A built-in file effect: preimage durable first (intent), the change, then the step.
    ///
    /// A small overwrite made in place carries its new bytes in the intent too (`redo`):
    /// once that intent is fsynced the write is acknowledged, after one `pwrite`, without
    /// waiting for the file's own fsync or the step record's (docs/wal-format.md,
    /// "Durability order").
    pub fn file_effect(&mut self, op: FileOp) -> Result<Stepped> {
        self.require_live()?;
        // A rename moves a file with whatever bytes it holds: an in-place write's bytes must
        // be durable before its file moves (repair redoes by path, and a later step on the
        // path, such as this rename, makes it leave the file alone).
        self.settle(matches!(op, FileOp::Rename { .. }))?;
        let planned = self.ws.plan(op, &self.blobs)?;
        let step = self.journal.state.next_index();
        let redo = match &planned.op {
            FileOp::Write { content, .. } if crate::workspace::in_place(&planned) => {
                crate::util::boot_id().map(|boot| crate::wal::Redo {
                    content: crate::workspace::b64(content),
                    boot: boot.to_string(),
                })
            }
            _ => None,
        };
        let deferred_sync = redo.is_some();
        // The write's own post-image is kept, so that `read --at` returns it even after the
        // file is changed outside revl: an in-place write's bytes are in its `redo`; other
        // small ones ride in the intent (`after.kept`); larger ones go to the blob store
        // (durable before the intent names their digest).
        let mut kept = crate::workspace::KeptBytes::with_budget(crate::workspace::INLINE_MAX);
        if let (FileOp::Write { content, .. }, false) = (&planned.op, deferred_sync) {
            if content.len() <= crate::workspace::INLINE_MAX {
                kept.add(content);
            } else {
                self.blobs.put(content)?;
            }
        }
        let intent = Record::Intent {
            step,
            kind: "effect".into(),
            label: planned.label.clone(),
            site: planned.site.clone(),
            undo: Some(planned.undo.clone()),
            preimage: None,
            after: Some(IntentAfter {
                detail: EffectDetail::File(planned.detail.clone()),
                images: planned.after.clone(),
                kept: kept.kept,
            }),
            redo,
            argv: None,
        };
        // A small overwrite is made in place after the intent (which holds its preimage).
        // Otherwise the new content is written to its temp file first; then the temp's fsync
        // (a second thread) and the intent's fsync run at the same time, so the filesystem
        // journal can commit them together. The change itself (the rename) waits for both.
        let (staged, file) = match self.ws.stage(&planned, step) {
            Ok(Some(f)) => (Ok(true), Some(f)),
            Ok(None) => (Ok(false), None),
            Err(e) => (Err(e), None),
        };
        let (appended, synced) = std::thread::scope(|sc| {
            let sync = file.map(|f| sc.spawn(move || f.sync_all()));
            let appended = self.append(intent, true);
            let synced = sync.map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("fsync thread panicked")))
            });
            (appended, synced)
        });
        let staged = match (staged, synced) {
            (Ok(_), Some(Err(e))) => Err(Error::io(
                format!("cannot fsync the staged content of {}", planned.label),
                e,
            )),
            (s, _) => s,
        };
        if let Err(e) = appended {
            let _ = std::fs::remove_file(self.ws.temp_for(step));
            return Err(e);
        }
        let staged = match staged {
            Ok(b) => b,
            Err(e) => {
                self.clean_temps(&planned.after, step);
                self.append(
                    Record::IntentVoid {
                        step,
                        why: e.message.clone(),
                    },
                    true,
                )?;
                return Err(e);
            }
        };
        self.fp.point("effect.after-intent");
        let unsynced = match self.ws.apply(&planned, step, staged, deferred_sync) {
            Ok(unsynced) => unsynced,
            Err(e) => {
                // The change failed part-way: put the preimage back and void the intent. If even
                // that fails, the intent stays open and the next attach repairs it: back to the
                // preimage, or, for an in-place write (whose intent carries its bytes, and which
                // repair never rolls back), forward. The error says which.
                if self
                    .ws
                    .restore(planned.undo.entries(), &self.blobs, step)
                    .is_ok()
                {
                    self.clean_temps(&planned.after, step);
                    let _ = self.append(
                        Record::IntentVoid {
                            step,
                            why: e.message.clone(),
                        },
                        true,
                    );
                    return Err(e);
                }
                let then = if deferred_sync {
                    "completes the write from the bytes its intent holds and records the step"
                } else {
                    "rolls the change back, or forward if it is complete"
                };
                let hint = format!(
                    "the preimage could not be put back either: the next command on this session {then}; fix the cause ({}) first",
                    e.hint
                );
                return Err(Error { hint, ..e });
            }
        };
        self.fp.point("effect.after-change");
        let rec = self.file_step_record(
            step,
            &planned.label,
            &planned.site,
            &EffectDetail::File(planned.detail.clone()),
            &planned.undo,
        )?;
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        // Written in place without its own fsync: the intent (fsynced, with the bytes) is
        // what makes the step durable; the step record rides with the next fsync.
        if !unsynced {
            self.sync()?;
        }
        Ok(Stepped {
            step,
            seq,
            label: planned.label,
        })
    }

    /// The `step` record of a witnessed effect (made, or rolled forward at repair): scope
    /// `fs` (a sandboxed exec's says so: `sandbox: true`), the restore descriptor without the
    /// inline bytes its intent holds, idempotent.
    pub(super) fn file_step_record(
        &mut self,
        step: u64,
        label: &str,
        site: &str,
        detail: &EffectDetail,
        undo: &Undo,
    ) -> Result<StepRecord> {
        let mut rec = self.step_record(step, "effect", label, site, to_value(detail))?;
        let scope = match detail {
            EffectDetail::File(_) => fs_scope(),
            EffectDetail::Exec(_) => sandbox_scope(),
        };
        rec.set_scope(Some(&scope))?;
        rec.set_undo(Some(&undo.slim()))?;
        rec.undo_idempotent = Some(true);
        Ok(rec)
    }

    /// Remove the temp files a write of `step` may have left (at the root, or next to a
    /// target behind a mount point), and the trash of a tree it was removing.
    pub(super) fn clean_temps(&self, after: &[Image], step: u64) {
        let _ = std::fs::remove_file(self.ws.temp_for(step));
        // A tree being removed is first moved to a trash name at the root; a crash while it
        // was removed leaves it there (the intent's preimage holds the tree).
        let _ = self.ws.remove_trash(step);
        for a in after {
            if let Some(parent) = self.ws.abs(&a.path).parent() {
                let _ = std::fs::remove_file(parent.join(format!(".revl-{step}.tmp")));
            }
        }
    }

    /// `provide KEY VALUE`: a provision step.
    pub fn provide(&mut self, key: &str, value: &str) -> Result<Stepped> {
        self.require_live()?;
        if key.is_empty() {
            return Err(Error::bad_args(
                "the provision key is empty",
                "give a non-empty KEY",
            ));
        }
        let step = self.journal.state.next_index();
        let previous = self
            .journal
            .state
            .provisions_at(self.journal.state.head_pos())
            .get(key)
            .cloned();
        let detail = json!({"key": key, "value": value, "previous": &previous});
        let mut rec = self.step_record(
            step,
            "provision",
            &format!("provide {key}"),
            "provide",
            detail,
        )?;
        rec.set_undo(Some(&Undo::Withdraw {
            key: key.to_string(),
            previous,
        }))?;
        rec.undo_idempotent = Some(true);
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(Stepped {
            step,
            seq,
            label: format!("provide {key}"),
        })
    }

    /// `boundary [LABEL]`: an agent turn marker.
    pub fn boundary(&mut self, label: Option<&str>) -> Result<Stepped> {
        self.require_live()?;
        let step = self.journal.state.next_index();
        let label = format!(
            "{}/boundary",
            label.filter(|l| !l.is_empty()).unwrap_or("turn")
        );
        let rec = self.step_record(step, "boundary", &label, "boundary", json!({}))?;
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(Stepped { step, seq, label })
    }
}
