//! Attach-time repair (docs/architecture.md, "Attach and repair"), in order. Repair never
//! crosses: it runs only host-confined inverses and provision withdrawals; what it cannot
//! finish without crossing it lists `owed`.

use super::{DriftPolicy, Session};
use crate::drift::Expected;
use crate::error::Result;
use crate::state::Life;
use crate::undo::Undo;
use crate::wal::Record;
use serde_json::json;

impl Session {
    // ---- repair on attach (docs/architecture.md, "Attach and repair") ----

    /// Every repair of docs/architecture.md, "Attach and repair", in this order: a torn
    /// write's temp file; a fork (this session's, then its parent's); an intent without
    /// outcome; a step-back, a commit and an abort without their closing records.
    pub(super) fn repair(&mut self) -> Result<()> {
        // A write stages its content before its intent is durable: if the intent was torn,
        // nothing names the temp file; it can only be the next step's.
        if self.journal.state.life() == Life::Live {
            let temp = self.ws.temp_for(self.journal.state.next_index());
            if std::fs::remove_file(&temp).is_ok() {
                self.repaired(
                    "temp-removed",
                    Some(self.journal.state.next_index()),
                    format!(
                        "removed {}: the staged content of a write whose intent never became durable",
                        temp.display()
                    ),
                );
            }
        }
        // What an interrupted exec left in the store's scratch (its sandbox is gone with it).
        let _ = crate::workspace::remove_any(&self.exec_scratch());
        // What the last exec replaced waits for the next exec, which frees it while its
        // command runs; once the session is over nothing will, so it goes now.
        if self.journal.state.life() != Life::Live {
            let _ = crate::workspace::remove_any(&self.exec_spent());
        }
        // In-place writes a power loss may have undone are written again first, so that
        // every later repair sees the workspace as the WAL left it.
        let synced = if self.journal.state.life() == Life::Live {
            self.redo_lost_writes()?
        } else {
            None
        };
        if let Some(through) = synced {
            self.repaired(
                "lost-writes-redone",
                Some(through),
                format!("after a power loss, wrote again the small writes up to step {through} that a file had lost (their bytes were in the WAL)"),
            );
        }
        let records = self.journal.state.records;
        self.repair_fork()?;
        self.repair_parent_fork()?;
        if self.journal.state.records != records {
            self.repaired(
                "fork-repaired",
                None,
                "finished or abandoned a fork a crash interrupted (see `revl status` and `revl log`)",
            );
        }
        if let Some(intent) = self.journal.state.intent.clone() {
            let file_effect = match (&intent.undo, &intent.after) {
                (Some(Undo::Restore { entries }), Some(after)) if intent.kind == "effect" => {
                    Some((entries, after))
                }
                _ => None,
            };
            if let Some((entries, after)) = file_effect {
                let mut done = !after.images.is_empty();
                for img in &after.images {
                    done &= self.ws.shows(img)?;
                }
                self.clean_temps(&after.images, intent.step);
                let redo = match (&intent.redo, entries.first()) {
                    (Some(r), Some(pre)) if !done => {
                        after.images.first().map(|post| crate::state::Unsettled {
                            step: intent.step,
                            pre: pre.clone(),
                            post: post.clone(),
                            redo: r.clone(),
                        })
                    }
                    _ => None,
                };
                if let Some(u) = &redo {
                    // An in-place write whose intent carries its bytes may have been
                    // acknowledged: roll it forward, never back. Bytes that are neither the
                    // preimage nor the new ones (changed by hand meanwhile) are preserved first.
                    let mut exp = Expected::of_in_with(
                        &self.journal.state.steps,
                        &self.blobs,
                        self.journal.state.inherited(),
                    );
                    exp.done(entries, after.images.clone());
                    self.redo_over(u, &exp)?;
                }
                if done || redo.is_some() {
                    // Roll forward: the change is on disk; record it.
                    let undo = Undo::Restore {
                        entries: entries.clone(),
                    };
                    let rec = self.file_step_record(
                        intent.step,
                        &intent.label,
                        &intent.site,
                        &after.detail,
                        &undo,
                    )?;
                    self.append(Record::Step(rec), false)?;
                    self.repaired(
                        "intent-rolled-forward",
                        Some(intent.step),
                        format!(
                            "step {} ({}) was complete on disk when revl stopped: recorded it",
                            intent.step, intent.label
                        ),
                    );
                } else {
                    // Roll back, as an unwind does: what changed by hand since is preserved
                    // first (against the state the change intended; its own preimage is not
                    // drift).
                    let mut exp = Expected::of_in_with(
                        &self.journal.state.steps,
                        &self.blobs,
                        self.journal.state.inherited(),
                    );
                    exp.done(entries, after.images.clone());
                    self.rewind().preserve_drift(intent.step, entries, &exp)?;
                    self.ws.restore(entries, &self.blobs, intent.step)?;
                    self.append(Record::IntentVoid { step: intent.step, why: "interrupted before the change completed; preimage restored at repair".into() }, false)?;
                    self.repaired(
                        "intent-rolled-back",
                        Some(intent.step),
                        format!("{} was interrupted before it completed: put back what was there before (no step recorded)", intent.label),
                    );
                }
            } else if intent.kind == "effect"
                && intent.site == "exec"
                && self.exec_net_repaired(&intent)?
            {
                // Recorded above: the connections it opened, as its emission.
            } else if intent.kind == "effect" && intent.site == "exec" {
                // A sandboxed command was running: the real workspace never changed (its
                // change set was not yet applied), so nothing happened.
                self.append(Record::IntentVoid { step: intent.step, why: "the sandboxed command was interrupted before its change set was applied; the workspace is untouched".into() }, false)?;
                self.repaired(
                    "exec-voided",
                    Some(intent.step),
                    format!("{} was interrupted before its changes were applied: the workspace is untouched, no step recorded", intent.label),
                );
            } else {
                // A tool call or exec with unknown outcome: opaque, so a fork over it refuses.
                let label = if intent.kind == "opaque" {
                    intent.label.clone()
                } else {
                    format!("{}/opaque", intent.site)
                };
                let rec = self.step_record(
                    intent.step,
                    "opaque",
                    &label,
                    &intent.site,
                    json!({"repr": "interrupted: outcome unknown", "intended": intent.label}),
                )?;
                self.append(Record::Step(rec), false)?;
                self.repaired(
                    "outcome-unknown",
                    Some(intent.step),
                    format!("{} was interrupted with an unknown outcome: recorded as opaque step {} (a fork cannot cross it)", intent.label, intent.step),
                );
            }
            self.sync()?;
        }
        if let Some(through) = synced {
            self.append(Record::FilesSynced { through }, false)?;
            self.sync()?;
        }
        if let Some((to, mode, keep)) = self.journal.state.step_back_open.clone() {
            let undone = self.undone_count();
            let kept = self.finish_step_back(to, &mode, DriftPolicy::keeping(keep))?;
            let ran = self.undone_count() - undone;
            let kept: Vec<String> = kept
                .iter()
                .map(|p| format!("{} (`revl blob {}`)", p.path, p.digest))
                .collect();
            let kept = if kept.is_empty() {
                String::new()
            } else {
                format!(
                    "; preserved first (changed outside revl): {}",
                    kept.join(", ")
                )
            };
            self.repaired(
                "step-back-finished",
                to.step(),
                format!("finished the {mode} step-back to step {to} an interruption left open: {ran} more inverse(s) ran (`revl timeline` marks every step it undid){kept}"),
            );
        }
        if self.journal.state.commit_approved.is_some() && !self.journal.state.activation_complete {
            let owed = self.journal.state.queue.len();
            self.finish_commit()?;
            self.repaired(
                "commit-finished",
                None,
                format!("finished the commit a crash interrupted: {owed} held send(s) whose outcome is unknown are owed, never re-fired (`revl status`)"),
            );
        }
        if self.journal.state.abort_begun && !self.journal.state.aborted {
            self.finish_abort()?;
            self.repaired(
                "abort-finished",
                None,
                "finished the abort a crash interrupted (host-confined inverses only; what would cross is owed)",
            );
        }
        Ok(())
    }

    /// Finish a commit a crash interrupted after `commit-approved`: every held send without
    /// an outcome is `flush-residue {type: "unconfirmed"}` (owed, never re-fired), then
    /// `discharge` and `activation-complete`.
    fn finish_commit(&mut self) -> Result<()> {
        for seq in self.journal.state.queue.clone() {
            self.append(Record::FlushResidue { seq, error: json!({"type": "unconfirmed", "message": "the commit was interrupted: this send may or may not have fired; it is owed and never re-fired automatically"}) }, false)?;
        }
        let discharged = self.journal.state.witnessed();
        if !self.journal.state.discharged {
            self.append(Record::Discharge { steps: discharged }, false)?;
        }
        self.append(Record::ActivationComplete {}, false)?;
        self.sync()
    }
}

impl Session {
    /// An exec interrupted while its proxy had opened connections (docs/user-guide.md §8):
    /// they may have reached their destinations, so they are recorded as the exec's
    /// emission (an open one `interrupted`, its bytes unknown); the workspace is untouched
    /// (its change set was never applied), so no effect is recorded. False when it opened
    /// none.
    fn exec_net_repaired(&mut self, intent: &crate::state::PendingIntent) -> Result<bool> {
        let recs: Vec<Record> = self
            .journal.state
            .net
            .iter()
            .filter(|r| matches!(r, Record::NetConnect { step, .. } | Record::NetClose { step, .. } if *step == intent.step))
            .cloned()
            .collect();
        let summary = crate::egress::NetSummary::from_records(&recs);
        if summary.reached().next().is_none() {
            return Ok(false);
        }
        // The exec's first intent holds its command.
        let argv = intent.argv.clone().unwrap_or_default();
        self.net_emission(intent.step, &argv, &summary)?;
        let dests: Vec<String> = summary
            .reached()
            .map(|c| format!("{}:{}", c.dest, c.port))
            .collect();
        self.repaired(
            "exec-net-recorded",
            Some(intent.step),
            format!(
                "{} was interrupted after its proxy opened {} connection(s) ({}): recorded as emission step {} (they may have reached their destinations); its file changes were never applied",
                intent.label,
                summary.reached().count(),
                dests.join(", "),
                intent.step
            ),
        );
        Ok(true)
    }

    /// How many steps are marked undone.
    fn undone_count(&self) -> usize {
        self.journal.state.steps.iter().filter(|s| s.undone).count()
    }
}
