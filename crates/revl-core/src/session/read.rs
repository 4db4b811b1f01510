//! Reading a session (SPEC 4.2): timeline, inspect, status, owed, verify; and the checks a
//! rewind target passes.

use super::{Session, GUARANTEE};
use crate::classify::{self, partition};
use crate::drift::Expected;
use crate::error::{Code, Error, Result};
use crate::report::{Inspect, Owed, Status, StepView, Timeline, Verify};
use crate::step::{Pos, StepKind};
use serde_json::Value;

impl Session {
    pub fn timeline(&self) -> Timeline {
        Timeline {
            session: self.id.clone(),
            state: self.state.life().as_str(),
            head: self.state.head(),
            torn: self.torn,
            steps: self.state.steps.iter().map(StepView::of).collect(),
            accumulated: self.state.accumulated(self.state.head_pos()),
            guarantee: GUARANTEE,
        }
    }

    /// A rewind (fork, step-back) to `k`: the session is live, `k` is in range and a live
    /// step (SPEC 4.3). Returns the partition of the tail above `k`.
    pub(crate) fn rewind_target(&self, k: i64, verb: &str) -> Result<classify::Partition> {
        self.require_live()?;
        let k = self.check_range(k)?;
        if let Some(why) = classify::k_not_live(&self.state.steps, &self.state.spans, k) {
            return Err(Error::new(
                Code::Undone,
                format!("cannot {verb} {k}: {why}"),
                "pick a live step from the timeline",
            )
            .with_remedy(crate::error::Remedy::Timeline));
        }
        Ok(partition(&self.state.steps, k))
    }

    /// The position K names: an integer in [-1, head] (exit 2 otherwise).
    pub fn check_range(&self, k: i64) -> Result<Pos> {
        self.state.pos(k).ok_or_else(|| {
            Error::bad_args(
                format!(
                    "step {k} is out of range: this session has steps -1..={}",
                    self.state.head()
                ),
                "the timeline lists the step indices",
            )
            .with_remedy(crate::error::Remedy::Timeline)
        })
    }

    pub fn inspect(&self, k: i64) -> Result<Inspect> {
        let k = self.check_range(k)?;
        let steps = &self.state.steps;
        Ok(Inspect {
            at: k,
            at_label: self.state.label_at(k),
            active_provisions: self.state.provisions_at(k),
            accumulated: self.state.accumulated(k),
            ahead_of_here: steps
                .iter()
                .filter(|s| !k.covers(s.index))
                .map(|s| s.index)
                .collect(),
            emissions_so_far: steps
                .iter()
                .filter(|s| k.covers(s.index) && s.kind == StepKind::Emission)
                .map(|s| s.index)
                .collect(),
        })
    }

    pub fn status(&self) -> Status {
        let st = &self.state;
        Status {
            session: self.id.clone(),
            state: st.life().as_str(),
            workspace: st.workspace.clone(),
            wal: self.wal_path.display().to_string(),
            head: st.head(),
            torn: self.torn,
            provisions: st.provisions_at(st.head_pos()),
            queue: st
                .queue
                .iter()
                .filter_map(|q| st.deferred.get(q))
                .cloned()
                .collect(),
            owed: self.owed(),
            parent: st.origin.as_ref().map(|o| o.parent.clone()),
            forked_at: st.origin.as_ref().map(|o| o.at),
            branch: st.fork_frozen.as_ref().map(|f| f.branch.clone()),
            frozen_at: st.fork_frozen.as_ref().map(|f| f.at),
        }
    }

    /// What repair or an interrupted operation could not finish without crossing: crossing
    /// inverses not yet run (from a repaired abort or compensating step-back), and held sends
    /// whose outcome is unknown after a crash during a commit.
    pub fn owed(&self) -> Vec<Owed> {
        let st = &self.state;
        let mut owed: Vec<Owed> = st
            .owed_steps()
            .into_iter()
            .cloned()
            .map(Owed::Step)
            .collect();
        for (seq, err) in &st.residue {
            if err.get("type").and_then(Value::as_str) != Some("unconfirmed") {
                continue;
            }
            if let Some(d) = st.deferred.get(seq) {
                owed.push(Owed::HeldSend {
                    args: d.args.clone(),
                    kind: "held-send",
                    method: d.method.clone(),
                    seq: d.seq,
                    service: d.service.clone(),
                    tool: d.tool.clone(),
                    why: "its outcome is unknown after a crash during the flush; `revl resend` fires it again explicitly",
                });
            }
        }
        owed
    }

    /// `verify` (SPEC 13): every witnessed path whose bytes, mode or kind no longer match
    /// the last recorded image (post-image, or preimage after an undo), and every entry revl
    /// never witnessed inside a directory it created.
    pub fn verify(&self) -> Result<Verify> {
        let drift = Expected::of(&self.state.steps).drift(&self.ws)?;
        Ok(Verify {
            session: self.id.clone(),
            drift,
            note: "changes made to the workspace outside revl are not witnessed; a rewind does not restore them, and preserves what it would overwrite or remove",
        })
    }
}
