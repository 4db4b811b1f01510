//! A coding agent's session on revl (docs/agents.md): its turns as boundaries, and the
//! edits its own tools made recorded as file steps with the preimages taken before.

use super::Session;
use crate::agent::Origin;
use crate::error::{Error, Result};
use crate::report::Stepped;
use crate::step::Pos;
use crate::undo::{EffectDetail, FileDetail, IntentAfter, RestoreEntry, Undo};
use crate::wal::Record;
use serde_json::json;

/// The site of a turn boundary.
pub const TURN_SITE: &str = "turn";
/// The site of an edit an agent's tool made.
pub const AGENT_EDIT_SITE: &str = "agent-edit";

impl Session {
    /// The live turn boundaries, oldest first: (step, turn id). A turn a step-back went
    /// back over is no longer live.
    pub(super) fn turns(&self) -> Vec<(u64, Option<String>)> {
        let spans = &self.journal.state.spans;
        self.journal
            .state
            .steps
            .iter()
            .filter(|s| s.kind == crate::step::StepKind::Boundary && s.site() == TURN_SITE)
            .filter(|s| {
                !spans
                    .iter()
                    .any(|(to, h)| !to.covers(s.index) && s.index <= *h)
            })
            .map(|s| {
                let id = s.detail()["origin"]["turn"].as_str().map(str::to_string);
                (s.index, id)
            })
            .collect()
    }

    /// The labels of the live turns after `to`: what a step-back to `to` unwinds.
    pub(super) fn turns_after(&self, to: crate::step::Pos) -> Vec<String> {
        self.turns()
            .into_iter()
            .filter(|(i, _)| !to.covers(*i))
            .map(|(i, _)| self.journal.state.label_at(crate::step::Pos::After(i)))
            .collect()
    }

    /// A user prompt opens a turn (docs/agents.md): a boundary step labelled
    /// `AGENT turn N: FIRST LINE`, its detail the origin and the prompt's first line.
    pub fn turn(&mut self, origin: &Origin, first_line: &str) -> Result<Stepped> {
        self.require_live()?;
        let n = self.turns().len() + 1;
        let step = self.journal.state.next_index();
        let line = crate::util::visible(first_line, false);
        let label = format!("{} turn {n}: {line}", origin.agent);
        let detail = json!({"origin": origin, "prompt": first_line, "turn": n});
        let rec = self.step_record(step, "boundary", &label, TURN_SITE, detail)?;
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(Stepped { step, seq, label })
    }

    /// A point given as a step index (`K`, `-1`), a turn (`turn:N`, the Nth live turn) or a
    /// turn id (an agent's prompt or turn id): the last live step before that turn's
    /// boundary (`-1` when none), what the workspace held when the turn began. Back there,
    /// nothing that turn did remains, and the next prompt opens turn N again.
    pub fn point(&self, given: &str, what: &str) -> Result<i64> {
        let g = given.trim();
        if let Ok(k) = g.parse::<i64>() {
            return Ok(k);
        }
        let turns = self.turns();
        let hint = "give a step index from `revl timeline`, -1 for before every step, turn:N for the Nth turn of an agent, or an agent's turn id";
        let found = match g.strip_prefix("turn:") {
            Some(n) => match n.parse::<usize>() {
                Ok(n) if n >= 1 => turns.get(n - 1).map(|t| t.0),
                _ => {
                    return Err(Error::bad_args(
                        format!("{what} {given:?}: turn:N needs a turn number from 1"),
                        hint,
                    ))
                }
            },
            None => turns
                .iter()
                .find(|(_, id)| id.as_deref() == Some(g))
                .map(|t| t.0),
        };
        // The last live step before the turn's boundary: the turn itself is unwound too,
        // and the next prompt opens turn N again. The steps just before it may be ones an
        // earlier rewind undid (the turn began after that rewind): they are passed over.
        let state = &self.journal.state;
        let live_before = |b: u64| {
            (0..b)
                .rev()
                .find(|&k| {
                    crate::classify::k_not_live(&state.steps, &state.spans, Pos::After(k)).is_none()
                })
                .map_or(-1, |k| k as i64)
        };
        found.map(live_before).ok_or_else(|| {
            Error::bad_args(
                format!(
                    "{what} {}: no such step or turn (the session has {} turn(s))",
                    crate::util::visible(given, false),
                    turns.len()
                ),
                hint,
            )
        })
    }

    /// What `path` (relative to the workspace) holds now, kept so that it can be put back:
    /// taken before another program (an agent's edit tool) changes it, then given to
    /// [`Session::record_edit`] with the same path. Large contents go to the blob store
    /// (durable). Where `path`'s directory does not exist yet, the preimage is the absence
    /// of its first missing ancestor (the tool makes the directories too, and a rewind
    /// removes them), as for a write into a new directory.
    pub fn capture_preimage(&self, path: &str) -> Result<RestoreEntry> {
        let rel = self.ws.confine(path, false)?;
        match self.ws.topmost_absent_parent(&rel)? {
            Some(top) => Ok(RestoreEntry::Absent { path: top }),
            None => self.ws.capture(&rel, &self.blobs),
        }
    }

    /// Record an edit another program made (an agent's edit tool) to `path`, with the
    /// preimage [`Session::capture_preimage`] took of it before: one file step on `path`
    /// whose undo restores that preimage and whose post-image is what `path` holds now, so
    /// a rewind puts it back like any write and never takes it for a hand edit. Where the
    /// preimage is the absence of a new directory above `path`, the step is still the file
    /// (as a write into a new directory is): whatever else appears in that directory is
    /// not the edit's, and a rewind preserves it as drift. The intent (preimage and
    /// post-image) is durable before the step; a crash between them is repaired forward.
    pub fn record_edit(
        &mut self,
        path: &str,
        pre: RestoreEntry,
        origin: Option<Origin>,
        label: &str,
    ) -> Result<Option<Stepped>> {
        self.require_live()?;
        self.settle(false)?;
        let path = self.ws.confine(path, false)?;
        let above = matches!(&pre, RestoreEntry::Absent { path: top }
            if path.starts_with(&format!("{top}/")));
        if pre.path() != path && !above {
            return Err(Error::bad_args(
                format!(
                    "the preimage of {} is not {path}'s (nor the absence of a directory above it)",
                    crate::util::visible(pre.path(), false)
                ),
                "take the preimage with capture_preimage of the same path",
            ));
        }
        let after = self.ws.observe(&path)?;
        let unchanged = match above {
            // The file was absent (its directory was): absent still, the edit made nothing.
            true => after.kind == Some(crate::undo::FileKind::Absent),
            false => pre.image().shown_by(&after),
        };
        if unchanged {
            return Ok(None);
        }
        // Its bytes are kept so that `read --at` returns them after a later change.
        self.ws.keep(&path, &self.blobs)?;
        let step = self.journal.state.next_index();
        let detail = FileDetail {
            after: after.at(""),
            path: path.clone(),
            to: None,
            origin: origin.map(Box::new),
        };
        let undo = Undo::Restore { entries: vec![pre] };
        let intent = Record::Intent {
            step,
            kind: "effect".into(),
            label: label.to_string(),
            site: AGENT_EDIT_SITE.into(),
            undo: Some(undo.clone()),
            preimage: None,
            after: Some(IntentAfter {
                detail: EffectDetail::File(detail.clone()),
                images: vec![after.at(path.clone())],
                kept: Default::default(),
            }),
            redo: None,
            argv: None,
        };
        self.append(intent, true)?;
        self.fp.point("agent-edit.after-intent");
        let rec = self.file_step_record(
            step,
            label,
            AGENT_EDIT_SITE,
            &EffectDetail::File(detail),
            &undo,
        )?;
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(Some(Stepped {
            step,
            seq,
            label: label.to_string(),
        }))
    }
}

/// The agent turn a branch's conversation resumes before (docs/agents.md, "Resume on a
/// branch"): the turn of the parent that holds the parent's step k+1, the first step the
/// branch (forked at k) does not have. The conversation keeps the turns fully before it;
/// at a fork inside that turn, the branch's files hold part of it while its conversation
/// does not.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkTurn {
    /// The parent's session id and the fork point.
    pub parent: String,
    pub at: Pos,
    /// The origin of the turn's boundary: the agent, its session id (the conversation) and
    /// the turn id (Claude Code's prompt id, Codex's turn id).
    pub origin: Origin,
    /// The turn's label (`claude turn 3: …`).
    pub label: String,
    /// The branch drops this turn (the conversation resumes just before it). False when the
    /// fork was at the parent's last step: then this is the last turn, and every turn is
    /// kept.
    pub drops: bool,
    /// The fork was inside this dropped turn: the branch's files hold its steps up to k.
    pub inside: bool,
}

impl Session {
    /// Where this branch's agent conversation resumes ([`ForkTurn`]), or why it cannot: the
    /// session is not a branch, has agent turns of its own already, its parent is on a
    /// remote, or the fork point is before the parent's first agent turn.
    pub fn fork_turn(&self) -> Result<ForkTurn> {
        let not = |why: String| {
            Error::bad_args(
                why,
                "say in the prompt what the agent should know (docs/agents.md, \"Resume on a branch\")",
            )
        };
        if let Some((i, _)) = self.turns().first() {
            return Err(not(format!(
                "the session has agent turns of its own ({}): continue its conversation with the agent's own resume",
                self.journal.state.label_at(Pos::After(*i))
            )));
        }
        let Some(o) = &self.journal.state.origin else {
            return Err(not("the session is not a branch".into()));
        };
        if o.parent_remote.is_some() {
            return Err(not("the branch's parent is on a remote".into()));
        }
        let parent = self.store().attach_read(&o.parent)?;
        let steps = &parent.journal.state.steps;
        let next = match o.at {
            Pos::Start => 0,
            Pos::After(k) => k as usize + 1,
        };
        let is_turn = |s: &&crate::step::Step| {
            s.kind == crate::step::StepKind::Boundary && s.site() == TURN_SITE
        };
        let drops = next < steps.len();
        let upto = &steps[..(next + 1).min(steps.len())];
        let Some(t) = upto.iter().rev().find(is_turn) else {
            return Err(not(
                "the fork point is before the parent's first agent turn: there is no conversation to resume".into(),
            ));
        };
        let origin: Origin = serde_json::from_value(t.detail()["origin"].clone())
            .map_err(|e| not(format!("the turn's origin is not readable ({e})")))?;
        let origin = origin.checked()?;
        Ok(ForkTurn {
            parent: o.parent.clone(),
            at: o.at,
            origin,
            label: parent.journal.state.label_at(Pos::After(t.index)),
            drops,
            inside: drops && t.index as usize != next,
        })
    }
}
