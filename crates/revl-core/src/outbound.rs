//! The world outside the machine (SPEC 1.3, 2, 4.4, 5): declared tool calls by class, held
//! sends, commit, abort, approvals, resend, and the repair of interrupted commits and aborts.

use crate::classify::{bucket, partition, Bucket};
use crate::error::{Code, Error, Result};
use crate::session::Session;
use crate::state::Life;
use crate::step::{Step, StepKind, BY_ABORT};
use crate::tools::{check_args, run_tool, Class, Manifest, Tool};
use crate::util::{new_id, sha256_jcs};
use crate::wal::Record;
use serde_json::{json, Value};
use std::path::Path;

impl crate::store::Store {
    /// Read, validate and store a manifest file; returns its digest. `None` when neither a
    /// file was given nor `revl.toml` exists in the workspace.
    pub fn import_manifest(
        &self,
        given: Option<&Path>,
        workspace: &Path,
    ) -> Result<Option<String>> {
        let path = match given {
            Some(p) => p.to_path_buf(),
            None => {
                let p = workspace.join("revl.toml");
                if !p.is_file() {
                    return Ok(None);
                }
                p
            }
        };
        let bytes = std::fs::read(&path).map_err(|e| {
            Error::new(
                Code::BadManifest,
                format!("cannot read manifest {}: {e}", path.display()),
                "give --manifest a readable revl.toml",
            )
        })?;
        let text = String::from_utf8(bytes.clone()).map_err(|_| {
            Error::new(
                Code::BadManifest,
                format!("{}: not UTF-8", path.display()),
                "save the manifest as UTF-8",
            )
        })?;
        Manifest::parse(&text, &path.display().to_string())?;
        Ok(Some(self.blobs().put(&bytes)?))
    }
}

fn object_args(args: &Value) -> Result<()> {
    if args.is_object() {
        Ok(())
    } else {
        Err(Error::bad_args(
            "tool args must be a JSON object",
            "pass --args '{\"name\": value, ...}'",
        ))
    }
}

impl Session {
    /// The session's manifest: the copy stored at `new`, never the file in the workspace.
    pub fn manifest(&self) -> Result<Manifest> {
        match &self.state.manifest_digest {
            None => Ok(Manifest::default()),
            Some(d) => {
                let bytes = self.blobs.get(d, None)?;
                Manifest::parse(
                    &String::from_utf8_lossy(&bytes),
                    &format!("manifest blob {d}"),
                )
            }
        }
    }

    fn env(&self, step: u64) -> Vec<(String, String)> {
        vec![
            ("REVL_SESSION".into(), self.id.clone()),
            ("REVL_STEP".into(), step.to_string()),
        ]
    }

    /// `call TOOL --args JSON`, by the tool's class (SPEC 4.1).
    pub fn call(&mut self, name: &str, args: Value) -> Result<Value> {
        self.require_live()?;
        let manifest = self.manifest()?;
        let tool = manifest
            .tool(name)
            .cloned()
            .ok_or_else(|| manifest.unknown_tool(name))?;
        object_args(&args)?;
        check_args(&tool, &args, false)?;
        match tool.class {
            Class::Inverse => Err(Error::bad_args(
                format!(
                    "tool {name:?} is of class inverse: it runs only as an undo or a compensation"
                ),
                "call the forward tool instead",
            )),
            Class::Deferred => self.enqueue(&tool, args),
            Class::Effect => self.call_effect(&tool, &manifest, args),
            Class::Emission => self.call_emission(&tool, &manifest, args),
            Class::Opaque => self.call_opaque(&tool, args),
        }
    }

    fn enqueue(&mut self, tool: &Tool, args: Value) -> Result<Value> {
        let seq = self.take_seq()?;
        let after_step = self.state.head();
        self.append(
            Record::DeferredEmission {
                seq,
                tool: tool.name.clone(),
                service: tool.service.clone(),
                method: tool.method.clone(),
                args,
                after_step,
            },
            true,
        )?;
        Ok(
            json!({"seq": seq, "queued": true, "afterStep": after_step, "note": "held: it fires only at a confirmed commit"}),
        )
    }

    fn intent(&mut self, step: u64, kind: &str, label: &str, site: &str) -> Result<()> {
        self.append(
            Record::Intent {
                step,
                kind: kind.into(),
                label: label.into(),
                site: site.into(),
                undo: None,
                preimage: None,
                after: None,
            },
            true,
        )
    }

    fn call_effect(&mut self, tool: &Tool, manifest: &Manifest, args: Value) -> Result<Value> {
        let undo_tool = manifest.tool(tool.undo.as_deref().unwrap_or("")).cloned();
        let step = self.state.next_index();
        let label = format!("{}.{}", tool.service, tool.method);
        self.intent(step, "effect", &label, &tool.name)?;
        self.fp.point("effect.after-intent");
        let run = run_tool(tool, &args, None, self.ws.root(), &self.env(step), None)?;
        self.fp.point("effect.after-change");
        if run.timed_out() {
            // Unknown outcome: an opaque step, so a fork over it is refused.
            let repr = format!(
                "{} {} timed out: outcome unknown",
                tool.name,
                crate::util::jcs(&args)
            );
            let rec = self.step_record(
                step,
                "opaque",
                &format!("{}/opaque", tool.name),
                &tool.name,
                json!({"repr": repr, "tool": tool.name, "args": args}),
            )?;
            self.append(Record::Step(rec), false)?;
            self.sync()?;
            return Err(Error::new(
                Code::Timeout,
                run.error_message(),
                "the tool's outcome is unknown: it is recorded as an opaque step",
            )
            .with_step(step));
        }
        if run.error.is_some() {
            // Taken at its word: nothing happened.
            self.append(
                Record::IntentVoid {
                    step,
                    why: run.error_message(),
                },
                true,
            )?;
            return Err(Error::new(
                Code::ToolFailed,
                run.error_message(),
                "nothing was recorded; fix the call and try again",
            ));
        }
        let mut rec = self.step_record(
            step,
            "effect",
            &label,
            &tool.name,
            json!({"tool": tool.name, "args": args, "witness": run.witness}),
        )?;
        rec.set_scope(tool.scope.as_ref())?;
        rec.set_undo_scope(undo_tool.as_ref().and_then(|u| u.scope.as_ref()))?;
        rec.set_undo(Some(&json!({"type": "tool", "tool": tool.undo})))?;
        rec.undo_idempotent = tool.undo_idempotent;
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(
            json!({"step": step, "seq": seq, "label": label, "exitCode": run.exit_code, "stdout": run.stdout, "stderr": run.stderr, "witness": run.witness}),
        )
    }

    /// Find a usable approval for an emission, or `None`.
    fn usable_approval(&self, tool: &str, digest: &str) -> Option<Record> {
        if self.state.standing.contains(tool) {
            return Some(Record::ApprovalConsumed {
                ticket: None,
                tool: Some(tool.into()),
            });
        }
        self.state
            .tickets_granted
            .iter()
            .find(|(t, (tl, d))| {
                tl == tool
                    && d.as_deref() == Some(digest)
                    && !self.state.tickets_consumed.contains(*t)
            })
            .map(|(t, _)| Record::ApprovalConsumed {
                ticket: Some(t.clone()),
                tool: None,
            })
    }

    fn call_emission(&mut self, tool: &Tool, manifest: &Manifest, args: Value) -> Result<Value> {
        let digest = sha256_jcs(&args);
        if !tool.approval_none {
            match self.usable_approval(&tool.name, &digest) {
                // Consumption is durable before the crossing fires.
                Some(consume) => self.append(consume, true)?,
                None => {
                    let ticket = new_id();
                    self.append(
                        Record::ApprovalRequested {
                            ticket: ticket.clone(),
                            tool: tool.name.clone(),
                            args_digest: digest.clone(),
                        },
                        true,
                    )?;
                    return Ok(
                        json!({"approvalRequired": true, "ticket": ticket, "tool": tool.name, "argsDigest": digest,
                        "hint": format!("a human approves with `revl approve {} --ticket {ticket}` (once) or `--tool {}` (standing); then call again", self.id, tool.name)}),
                    );
                }
            }
        }
        let step = self.state.next_index();
        let label = format!("{}.{}", tool.service, tool.method);
        let seq = self.take_seq()?;
        let key = format!("{}-{seq}", self.id);
        self.intent(step, "emission", &label, &tool.name)?;
        self.fp.point("effect.after-intent");
        let run = run_tool(
            tool,
            &args,
            None,
            self.ws.root(),
            &self.env(step),
            Some(&key),
        )?;
        self.fp.point("effect.after-change");
        let mut detail = json!({"key": key, "service": tool.service, "method": tool.method, "args": args, "witness": run.witness});
        if let Some(e) = &run.error {
            detail["error"] = e.clone();
        }
        let mut recs = Vec::new();
        let mut emission = crate::wal::StepRecord::new(
            seq,
            step,
            StepKind::Emission,
            &label,
            &tool.name,
            &detail,
        )?;
        emission.set_scope(tool.scope.as_ref())?;
        emission.set_ts(Some(&crate::util::now_rfc3339()))?;
        if let Some(comp) = tool.compensate.as_ref().and_then(|c| manifest.tool(c)) {
            emission.compensation = Some(step + 1);
            recs.push(Record::Step(emission));
            let mut c = self.step_record(
                step + 1,
                "compensation",
                &format!("compensate {label}"),
                &comp.name,
                json!({"for": step, "tool": comp.name, "args": args}),
            )?;
            c.set_scope(comp.scope.as_ref())?;
            recs.push(Record::Step(c));
        } else {
            recs.push(Record::Step(emission));
        }
        // An emission and its compensation step go out in one write.
        self.append_many(recs, false)?;
        self.sync()?;
        if run.error.is_some() {
            return Err(Error::new(
                Code::ToolFailed,
                run.error_message(),
                "the emission is recorded with its error: it may have crossed",
            )
            .with_step(step));
        }
        Ok(
            json!({"step": step, "seq": seq, "label": label, "key": key, "exitCode": run.exit_code, "stdout": run.stdout, "stderr": run.stderr, "witness": run.witness}),
        )
    }

    fn call_opaque(&mut self, tool: &Tool, args: Value) -> Result<Value> {
        let step = self.state.next_index();
        let label = format!("{}/opaque", tool.name);
        self.intent(step, "opaque", &label, &tool.name)?;
        let run = run_tool(tool, &args, None, self.ws.root(), &self.env(step), None)?;
        let outcome = match &run.error {
            None => "ok".to_string(),
            Some(e) => e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("failed")
                .to_string(),
        };
        let repr = format!("{} {} ({outcome})", tool.name, crate::util::jcs(&args));
        let rec = self.step_record(
            step,
            "opaque",
            &label,
            &tool.name,
            json!({"repr": repr, "tool": tool.name, "args": args}),
        )?;
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(
            json!({"step": step, "seq": seq, "label": label, "exitCode": run.exit_code, "stdout": run.stdout, "stderr": run.stderr, "witness": run.witness}),
        )
    }

    /// Run a manifest inverse: an effect's undo tool or a compensation.
    pub(crate) fn run_tool_inverse(&mut self, s: &Step) -> Result<()> {
        let manifest = self.manifest()?;
        let (tool_name, args, witness) = match s.kind {
            StepKind::Effect => (
                s.undo()
                    .and_then(|u| u.get("tool"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                s.detail().get("args").cloned().unwrap_or(json!({})),
                s.detail().get("witness").cloned().unwrap_or(Value::Null),
            ),
            StepKind::Compensation => {
                let f = s.detail().get("for").and_then(Value::as_u64).unwrap_or(0);
                (
                    s.detail()
                        .get("tool")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    s.detail().get("args").cloned().unwrap_or(json!({})),
                    self.state
                        .steps
                        .get(f as usize)
                        .and_then(|e| e.detail().get("witness"))
                        .cloned()
                        .unwrap_or(Value::Null),
                )
            }
            _ => {
                return Err(Error::new(
                    Code::ToolFailed,
                    format!("step {} ({}) has no inverse", s.index, s.label()),
                    "nothing can restore it",
                ))
            }
        };
        let tool = manifest.tool(&tool_name).cloned().ok_or_else(|| {
            Error::new(
                Code::ToolFailed,
                format!(
                    "step {}: inverse tool {tool_name:?} is not in the manifest",
                    s.index
                ),
                "the manifest copy is damaged",
            )
        })?;
        let run = run_tool(
            &tool,
            &args,
            Some(&witness),
            self.ws.root(),
            &self.env(s.index),
            None,
        )?;
        match run.error {
            None => Ok(()),
            Some(_) => Err(Error::new(
                Code::ToolFailed,
                run.error_message(),
                "the inverse failed; its outcome is listed",
            )),
        }
    }

    // ---- approvals (SPEC 5) ----

    /// `approve --ticket T` (once) or `--tool NAME` (standing, this session only).
    pub fn approve(&mut self, ticket: Option<&str>, tool: Option<&str>) -> Result<Value> {
        self.require_live()?;
        match (ticket, tool) {
            (Some(t), None) => {
                let (tool, digest) = self.state.tickets_requested.get(t).cloned().ok_or_else(|| {
                    Error::bad_args(format!("no ticket {t} was requested in session {}", self.id), "approve a ticket this session's emission returned (approvals never cross sessions)")
                })?;
                if self.state.tickets_granted.contains_key(t) {
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
                Ok(
                    json!({"approved": true, "ticket": t, "tool": tool, "argsDigest": digest, "standing": false, "session": self.id}),
                )
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
                Ok(json!({"approved": true, "tool": name, "standing": true, "session": self.id}))
            }
            _ => Err(Error::new(
                Code::Usage,
                "approve needs exactly one of --ticket T or --tool NAME",
                "revl approve SESSION --ticket T",
            )),
        }
    }

    // ---- commit (SPEC 4.4) ----

    /// The commit plan: `{deferred, witnessed: {count}, hash}`. Nothing fires.
    pub fn commit_plan(&self) -> Value {
        let st = &self.state;
        let deferred: Vec<Value> = st
            .queue
            .iter()
            .filter_map(|q| st.deferred.get(q))
            .map(|d| d.to_json())
            .collect();
        let witnessed = st.witnessed();
        let hash = sha256_jcs(
            &json!({"session": self.id, "head": st.head(), "deferred": st.queue, "witnessed": witnessed}),
        );
        json!({"session": self.id, "deferred": deferred, "witnessed": {"count": witnessed.len(), "steps": witnessed}, "hash": hash})
    }

    pub fn commit(&self) -> Result<Value> {
        self.require_live()?;
        Ok(self.commit_plan())
    }

    /// `commit-confirm --hash H`: held sends fire once each, FIFO, after `commit-approved`.
    pub fn commit_confirm(&mut self, hash: &str) -> Result<Value> {
        self.require_live()?;
        let plan = self.commit_plan();
        if plan["hash"].as_str() != Some(hash) {
            return Ok(json!({"committed": false, "refused": true,
                "reason": "stale hash: the queue or the timeline changed since the plan (or the hash is wrong); nothing fired",
                "plan": plan}));
        }
        let manifest = self.manifest()?;
        self.append(Record::CommitApproved { hash: hash.into() }, true)?;
        self.fp.point("commit.after-approved");
        let mut flushed = Vec::new();
        let mut residue = Vec::new();
        for seq in self.state.queue.clone() {
            let d = self.state.deferred[&seq].clone();
            let key = format!("{}-{seq}", self.id);
            let run = match manifest.tool(&d.tool) {
                Some(t) => {
                    run_tool(
                        t,
                        &d.args,
                        None,
                        self.ws.root(),
                        &self.env(d.after_step),
                        Some(&key),
                    )?
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
                    residue.push(
                        json!({"seq": seq, "type": error["type"], "message": error["message"]}),
                    );
                    self.append(Record::FlushResidue { seq, error }, false)?;
                }
            }
        }
        let discharged: Vec<u64> = plan["witnessed"]["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_u64)
            .collect();
        self.append(
            Record::Discharge {
                steps: discharged.clone(),
            },
            false,
        )?;
        self.append(Record::ActivationComplete {}, false)?;
        self.sync()?;
        Ok(
            json!({"committed": true, "flushed": flushed, "flushResidue": residue, "discharged": discharged}),
        )
    }

    /// `resend --seq S`: an operator fires one owed or failed held send of a committed
    /// session once more, explicitly.
    pub fn resend(&mut self, seq: u64) -> Result<Value> {
        if self.state.life() != Life::Committed {
            return Err(Error::new(Code::NotCommitted, format!("session {} is {}, not committed: resend is for a committed session's owed sends", self.id, self.state.life().as_str()), "commit first; held sends fire at commit"));
        }
        if !self.state.residue.contains_key(&seq) {
            return Err(Error::bad_args(
                format!(
                    "held send {seq} is not owed or failed in session {}",
                    self.id
                ),
                "see `revl status` for the owed sends",
            ));
        }
        let d = self.state.deferred[&seq].clone();
        let manifest = self.manifest()?;
        let tool = manifest.tool(&d.tool).cloned().ok_or_else(|| {
            Error::new(
                Code::ToolFailed,
                format!("tool {:?} is not in the manifest", d.tool),
                "the manifest copy is damaged",
            )
        })?;
        let key = format!("{}-{seq}", self.id);
        let run = run_tool(
            &tool,
            &d.args,
            None,
            self.ws.root(),
            &self.env(d.after_step),
            Some(&key),
        )?;
        match run.error {
            None => {
                self.append(Record::Flushed { seq }, true)?;
                Ok(json!({"resent": true, "seq": seq, "flushed": true}))
            }
            Some(error) => {
                self.append(
                    Record::FlushResidue {
                        seq,
                        error: error.clone(),
                    },
                    true,
                )?;
                Ok(json!({"resent": true, "seq": seq, "flushed": false, "error": error}))
            }
        }
    }

    // ---- abort (SPEC 4.4) ----

    /// `abort`: drop the queue, run every remaining inverse newest first (effects and
    /// provisions, then compensations). On an aborted session with owed entries, run those.
    pub fn abort(&mut self) -> Result<Value> {
        let owed_only = self.state.life() == Life::Aborted && !self.owed().is_empty();
        if !owed_only {
            self.require_live()?;
        }
        let tail: Vec<u64> = if owed_only {
            self.owed()
                .iter()
                .filter_map(|o| o.get("index").and_then(Value::as_u64))
                .collect()
        } else {
            self.state.steps.iter().rev().map(|s| s.index).collect()
        };
        let undoable = |s: &Step| {
            !s.undone
                && matches!(s.kind, StepKind::Effect | StepKind::Provision)
                && s.undo().is_some()
        };
        let first: Vec<u64> = tail
            .iter()
            .copied()
            .filter(|&i| undoable(&self.state.steps[i as usize]))
            .collect();
        let comps: Vec<u64> = tail
            .iter()
            .copied()
            .filter(|&i| {
                let s = &self.state.steps[i as usize];
                s.kind == StepKind::Compensation && !s.undone
            })
            .collect();
        let mut run_list = first.clone();
        run_list.extend(&comps);
        self.check_preimages(&run_list)?;
        if !owed_only {
            self.append(Record::AbortBegin {}, true)?;
        }
        let dropped = self.drop_deferred(|_| true, BY_ABORT)?;
        let (mut replayed, mut comps_ran, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for &i in &run_list {
            match self.run_inverse(i, BY_ABORT, "abort.mid-replay")? {
                Ok(()) if comps.contains(&i) => comps_ran.push(i),
                Ok(()) => replayed.push(i),
                Err(f) => failed.push(f),
            }
        }
        let dropped_seqs: Vec<u64> = dropped.iter().filter_map(|d| d["seq"].as_u64()).collect();
        self.append(
            Record::Aborted {
                replayed: replayed.clone(),
                compensations_ran: comps_ran.clone(),
                dropped_deferred: dropped_seqs,
                failed: failed.clone(),
                owed: vec![],
            },
            false,
        )?;
        self.sync()?;
        let comp_entries: Vec<Value> = comps_ran.iter().map(|&i| {
            let mut e = crate::classify::emission_entry(&self.state.steps[i as usize]);
            e["outcome"] = "unconfirmable: a compensation is a second crossing; its effect out there cannot be checked from here".into();
            e
        }).collect();
        Ok(
            json!({"aborted": true, "replayed": replayed, "compensationsRan": comp_entries, "droppedDeferred": dropped, "failed": failed}),
        )
    }

    // ---- repair of interrupted commits and aborts (SPEC 6.4); never crosses ----

    pub(crate) fn repair_outbound(&mut self) -> Result<()> {
        if self.state.commit_approved.is_some() && !self.state.activation_complete {
            for seq in self.state.queue.clone() {
                self.append(Record::FlushResidue { seq, error: json!({"type": "unconfirmed", "message": "the commit was interrupted: this send may or may not have fired; it is owed and never re-fired automatically"}) }, false)?;
            }
            let discharged = self.state.witnessed();
            if !self.state.discharged {
                self.append(Record::Discharge { steps: discharged }, false)?;
            }
            self.append(Record::ActivationComplete {}, false)?;
            self.sync()?;
        }
        if self.state.abort_begun && self.state.aborted.is_none() {
            let dropped = self.drop_deferred(|_| true, crate::step::BY_RECOVER)?;
            let (mut replayed, mut failed, mut owed) = (Vec::new(), Vec::new(), Vec::new());
            let tail = partition(&self.state.steps, -1);
            let _ = tail;
            let order: Vec<u64> = self.state.steps.iter().rev().map(|s| s.index).collect();
            for i in order {
                let s = self.state.steps[i as usize].clone();
                match bucket(&s) {
                    Bucket::InversesRan | Bucket::ProvisionsWithdrawn => {
                        if s.fenced {
                            failed.push(json!({"index": i, "label": s.label(), "error": "interrupted after its replay fence", "outcome": "unknown"}));
                        } else {
                            match self.run_inverse(i, BY_ABORT, "repair.never")? {
                                Ok(()) => replayed.push(i),
                                Err(f) => failed.push(f),
                            }
                        }
                    }
                    Bucket::WouldCrossOnRewind => owed.push(json!({"index": i, "kind": s.kind.as_str(), "label": s.label(), "why": "its inverse crosses: repair never crosses; an explicit `revl abort` runs it"})),
                    _ => {}
                }
            }
            let dropped_seqs: Vec<u64> = dropped.iter().filter_map(|d| d["seq"].as_u64()).collect();
            self.append(
                Record::Aborted {
                    replayed,
                    compensations_ran: vec![],
                    dropped_deferred: dropped_seqs,
                    failed,
                    owed,
                },
                false,
            )?;
            self.sync()?;
        }
        Ok(())
    }
}

impl Session {
    /// `note-model` (SPEC 8): which model answered step k and what it cost. Metadata only:
    /// no prompt or response text, and no digest of them, is ever written.
    pub fn note_model(&mut self, args: &Value) -> Result<Value> {
        self.require_live()?;
        let bad = |f: &str, want: &str| {
            Error::bad_args(
                format!("note-model: `{f}` must be {want}"),
                "see `revl note-model --help`",
            )
        };
        let step = args
            .get("step")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad("step", "a step index"))?;
        if step > self.state.head() {
            return Err(Error::bad_args(
                format!(
                    "note-model: step {step} is out of range 0..={}",
                    self.state.head()
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
        Ok(json!({"recorded": true, "step": step, "outcome": outcome, "llm": llm}))
    }
}
