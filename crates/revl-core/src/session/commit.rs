//! Approvals, commit and resend, and model decisions (docs/reference.md: "Approvals",
//! "Commit and abort", "Model decisions").

use super::Session;
use crate::error::{Code, Error, Remedy, Result};
use crate::report::{
    Approval, CommitPlan, CommitResult, FlushFailure, ModelNote, Resent, Witnessed,
};
use crate::state::Life;
use crate::tools::Class;
use crate::util::sha256_jcs;
use crate::wal::Record;
use serde_json::{json, Value};

impl Session {
    // ---- approvals (docs/reference.md, "Approvals") ----

    /// `approve --ticket T` (once) or `--tool NAME` (standing, this session only).
    pub fn approve(&mut self, ticket: Option<&str>, tool: Option<&str>) -> Result<Approval> {
        self.require_live()?;
        match (ticket, tool) {
            (Some(t), None) => {
                let (tool, digest) = self.journal.state.tickets_requested.get(t).cloned().ok_or_else(|| {
                    Error::bad_args(format!("no ticket {t} was requested in session {}", self.id), "approve a ticket this session's emission returned (approvals never cross sessions)")
                })?;
                if self.journal.state.tickets_granted.contains_key(t) {
                    return Err(Error::bad_args(
                        format!("ticket {t} is already approved"),
                        "call the tool again to use it",
                    ));
                }
                self.append(
                    Record::ApprovalGranted {
                        ticket: Some(t.into()),
                        tool: tool.clone(),
                        session: self.id.clone(),
                        standing: false,
                        args_digest: Some(digest.clone()),
                    },
                    true,
                )?;
                Ok(Approval {
                    approved: true,
                    ticket: Some(t.into()),
                    args_digest: Some(digest),
                    tool,
                    standing: false,
                    session: self.id.clone(),
                })
            }
            (None, Some(name)) => {
                let m = self.manifest()?;
                match m.tool(name) {
                    Some(t) if t.class == Class::Emission => {}
                    Some(t) => {
                        return Err(Error::bad_args(
                            format!(
                                "tool {name:?} is of class {}: only emissions need approval",
                                t.class.as_str()
                            ),
                            "approve an emission tool",
                        ))
                    }
                    None => return Err(m.unknown_tool(name)),
                }
                self.append(
                    Record::ApprovalGranted {
                        ticket: None,
                        tool: name.into(),
                        session: self.id.clone(),
                        standing: true,
                        args_digest: None,
                    },
                    true,
                )?;
                Ok(Approval {
                    approved: true,
                    ticket: None,
                    args_digest: None,
                    tool: name.into(),
                    standing: true,
                    session: self.id.clone(),
                })
            }
            _ => Err(Error::new(
                Code::Usage,
                "approve needs exactly one of a ticket or a tool name",
                "approve one ticket (one call, once), or one tool (standing, for this session)",
            )),
        }
    }

    // ---- commit (docs/reference.md, "Commit and abort") ----

    /// The commit plan: `{deferred, witnessed: {count}, hash}`. Nothing fires.
    pub fn commit_plan(&self) -> CommitPlan {
        let st = &self.journal.state;
        let witnessed = st.witnessed();
        let hash = sha256_jcs(
            &json!({"session": self.id, "head": st.head(), "deferred": st.queue, "witnessed": witnessed}),
        );
        CommitPlan {
            session: self.id.clone(),
            deferred: st.held_sends(),
            witnessed: Witnessed {
                count: witnessed.len(),
                steps: witnessed,
            },
            hash,
        }
    }

    pub fn commit(&self) -> Result<CommitPlan> {
        self.require_live()?;
        Ok(self.commit_plan())
    }

    /// `commit-confirm --hash H`: held sends fire once each, FIFO, after `commit-approved`.
    pub fn commit_confirm(&mut self, hash: &str) -> Result<CommitResult> {
        self.require_live()?;
        super::require_full_hash(hash, "`commit`")?;
        let plan = self.commit_plan();
        if plan.hash != hash {
            return Ok(CommitResult::Refused {
                committed: false,
                refused: true,
                reason: "stale hash: the queue or the timeline changed since the plan (or the hash is wrong); nothing fired",
                plan,
            });
        }
        let manifest = self.manifest()?;
        // A held send this process cannot run (a Python function it does not hold) refuses
        // the whole commit before anything is recorded.
        for seq in &self.journal.state.queue {
            if let Some(t) = manifest.tool(&self.journal.state.deferred[seq].tool) {
                crate::tools::check_runnable(t, self.store.tool_host())?;
            }
        }
        // The deliverable's files are durable before the commit is: after it, no later write
        // of this session would fsync them, and no repair of this session would redo them.
        self.settle(true)?;
        self.append(Record::CommitApproved { hash: hash.into() }, true)?;
        self.fp.point("commit.after-approved");
        let mut flushed = Vec::new();
        let mut residue = Vec::new();
        for seq in self.journal.state.queue.clone() {
            let d = self.journal.state.deferred[&seq].clone();
            let key = format!("{}-{seq}", self.id);
            let run = match manifest.tool(&d.tool) {
                Some(t) => {
                    self.run_tool_at(t, &d.args, None, d.after_step, Some(&key))?
                        .error
                }
                None => Some(
                    json!({"type": "missing-tool", "message": format!("tool {:?} is not in the manifest", d.tool)}),
                ),
            };
            self.fp.point("commit.mid-flush");
            match run {
                None => {
                    self.append(Record::Flushed { seq }, false)?;
                    flushed.push(seq);
                }
                Some(error) => {
                    residue.push(FlushFailure {
                        seq,
                        error: crate::wire::ToolError::of(&error),
                    });
                    self.append(Record::FlushResidue { seq, error }, false)?;
                }
            }
        }
        let discharged = plan.witnessed.steps;
        self.append(
            Record::Discharge {
                steps: discharged.clone(),
            },
            false,
        )?;
        self.append(Record::ActivationComplete {}, false)?;
        self.sync()?;
        // The session is over: no next exec will free what its last one replaced.
        let _ = crate::workspace::remove_any(&self.exec_spent());
        self.capture_base_at_close();
        Ok(CommitResult::Committed {
            committed: true,
            flushed,
            flush_residue: residue,
            discharged,
        })
    }

    /// `resend --seq S`: an operator fires one owed or failed held send of a committed
    /// session once more, explicitly.
    pub fn resend(&mut self, seq: u64) -> Result<Resent> {
        if self.journal.state.life() != Life::Committed {
            return Err(Error::new(Code::NotCommitted, format!("session {} is {}, not committed: resend is for a committed session's owed sends", self.id, self.journal.state.life().as_str()), "commit first; held sends fire at commit"));
        }
        if !self.journal.state.residue.contains_key(&seq) {
            return Err(Error::bad_args(
                format!(
                    "held send {seq} is not owed or failed in session {}",
                    self.id
                ),
                "the status lists the owed sends",
            )
            .with_remedy(Remedy::Status));
        }
        let d = self.journal.state.deferred[&seq].clone();
        let manifest = self.manifest()?;
        let tool = manifest.tool(&d.tool).cloned().ok_or_else(|| {
            Error::new(
                Code::ToolFailed,
                format!("tool {:?} is not in the manifest", d.tool),
                "the manifest copy is damaged",
            )
        })?;
        crate::tools::check_runnable(&tool, self.store.tool_host())?;
        let key = format!("{}-{seq}", self.id);
        let run = self.run_tool_at(&tool, &d.args, None, d.after_step, Some(&key))?;
        match run.error {
            None => {
                self.append(Record::Flushed { seq }, true)?;
                Ok(Resent {
                    resent: true,
                    seq,
                    flushed: true,
                    error: None,
                })
            }
            Some(error) => {
                self.append(
                    Record::FlushResidue {
                        seq,
                        error: error.clone(),
                    },
                    true,
                )?;
                Ok(Resent {
                    resent: true,
                    seq,
                    flushed: false,
                    error: Some(crate::wire::ToolError::of(&error)),
                })
            }
        }
    }

    /// `note-model` (docs/reference.md, "Model decisions"): which model answered step k and
    /// what it cost. Metadata only: no prompt or response text, and no digest of them, is
    /// ever written.
    pub fn note_model(&mut self, args: &Value) -> Result<ModelNote> {
        self.require_live()?;
        let bad = |f: &str, want: &str| {
            Error::bad_args(
                format!("note-model: `{f}` must be {want}"),
                "give every field of the model decision (docs/user-guide.md, \"Model decisions\")",
            )
        };
        let step = args
            .get("step")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad("step", "a step index"))?;
        if step > self.journal.state.head() {
            return Err(Error::bad_args(
                format!(
                    "note-model: step {step} is out of range: give a step from 0 to {}",
                    self.journal.state.head()
                ),
                "name a step that exists",
            ));
        }
        let outcome = match args.get("outcome").and_then(Value::as_str) {
            Some(o @ ("validated" | "exhausted")) => o.to_string(),
            _ => return Err(bad("outcome", "validated or exhausted")),
        };
        let host = |v: Value| json!({"value": v, "provenance": "host-reported"});
        let mut llm = serde_json::Map::new();
        let model = args
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .ok_or_else(|| bad("model", "a non-empty model name"))?;
        llm.insert("model".into(), host(model.into()));
        for (k, int) in [
            ("tokensIn", true),
            ("tokensOut", true),
            ("latencySeconds", false),
            ("attempts", true),
            ("attemptCeiling", true),
        ] {
            let v = args.get(k).ok_or_else(|| bad(k, "given"))?;
            let okv = if int {
                v.as_u64().is_some()
            } else {
                v.as_f64().is_some_and(|f| f >= 0.0)
            };
            if !okv {
                return Err(bad(
                    k,
                    if int {
                        "a non-negative integer"
                    } else {
                        "a non-negative number"
                    },
                ));
            }
            llm.insert(k.into(), host(v.clone()));
        }
        let num = |k: &str| llm.get(k).and_then(|v| v["value"].as_u64()).unwrap_or(0);
        if num("attempts") > num("attemptCeiling") {
            return Err(Error::bad_args(
                format!(
                    "note-model: attempts {} is above the attempt ceiling {}",
                    num("attempts"),
                    num("attemptCeiling")
                ),
                "give the attempts actually made, at most the ceiling",
            ));
        }
        if self
            .journal
            .state
            .model_decisions
            .iter()
            .any(|d| d["step"].as_u64() == Some(step))
        {
            return Err(Error::bad_args(
                format!("note-model: step {step} already has its model decision"),
                "record one decision per step (the first one stands)",
            ));
        }
        if let Some(c) = args.get("cost").filter(|c| !c.is_null()) {
            if !c.as_f64().is_some_and(|f| f >= 0.0) {
                return Err(bad("cost", "a non-negative number"));
            }
            llm.insert("cost".into(), host(c.clone()));
        }
        if let Some(c) = args.get("currency").filter(|c| !c.is_null()) {
            let c = c
                .as_str()
                .filter(|c| c.len() == 3 && c.chars().all(|x| x.is_ascii_uppercase()))
                .ok_or_else(|| bad("currency", "a 3-letter ISO 4217 code such as EUR"))?;
            llm.insert("currency".into(), host(c.into()));
        }
        let llm = Value::Object(llm);
        self.append(
            Record::ModelDecision {
                step,
                outcome: outcome.clone(),
                llm: llm.clone(),
            },
            true,
        )?;
        Ok(ModelNote {
            recorded: true,
            step,
            outcome,
            llm,
        })
    }
}
