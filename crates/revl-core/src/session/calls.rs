//! Declared tool calls by class (docs/reference.md, "Action classes" and "Effects"):
//! effects, emissions (with approvals), held sends, opaque tools; and running a manifest
//! inverse (an undo tool or a compensation) for the unwind executor.

use crate::error::{Code, Error, Remedy, Result};
use crate::report::CallResult;
use crate::session::Session;
use crate::step::StepKind;
use crate::tools::{check_args, Class, DeclaredTool, Manifest, Source, Tool};
use crate::undo::Undo;
use crate::util::{new_id, sha256_jcs};
use crate::wal::Record;
use serde_json::{json, Value};
use std::path::Path;

/// Where a new session's manifest comes from. The caller decides; the core never guesses
/// beyond what the variant says (docs/mcp.md, "Who decides what").
#[derive(Debug, Clone, Copy)]
pub enum ManifestSource<'a> {
    /// This file when given, else the workspace's own `revl.toml` when there is one: what
    /// `revl new` and the Python package do, whose caller is the operator.
    FileOrWorkspace(Option<&'a Path>),
    /// Exactly this manifest text (`None`: no manifest), as a front end fixed it before any
    /// agent could act; no file is read, the workspace's `revl.toml` least of all. `revl
    /// mcp` creates sessions this way, so what an agent writes in a workspace never becomes
    /// a session's tools.
    Fixed(Option<&'a str>),
}

impl crate::store::Store {
    /// Read, validate and store a manifest file; returns its digest. `None` when neither a
    /// file was given nor `revl.toml` exists in the workspace.
    pub fn import_manifest(
        &self,
        given: Option<&Path>,
        workspace: &Path,
    ) -> Result<Option<String>> {
        self.import_manifest_from(ManifestSource::FileOrWorkspace(given), workspace, &[])
    }

    /// [`Store::import_manifest`](crate::store::Store) plus the Python function tools a
    /// front end declared (docs/python.md): each becomes a `[[tool]]` table with `python =
    /// "module:qualname"` in the stored copy, validated with the file's tools as one manifest.
    pub fn import_manifest_with(
        &self,
        given: Option<&Path>,
        workspace: &Path,
        python: &[DeclaredTool],
    ) -> Result<Option<String>> {
        self.import_manifest_from(ManifestSource::FileOrWorkspace(given), workspace, python)
    }

    /// Validate and store the manifest `source` names (with the Python function tools a
    /// front end declared); returns its digest, `None` when there is no manifest at all.
    pub fn import_manifest_from(
        &self,
        source: ManifestSource<'_>,
        workspace: &Path,
        python: &[DeclaredTool],
    ) -> Result<Option<String>> {
        let (mut text, mut file, any) = match source {
            ManifestSource::FileOrWorkspace(given) => {
                let path = match given {
                    Some(p) => Some(p.to_path_buf()),
                    None => Some(workspace.join("revl.toml")).filter(|p| p.is_file()),
                };
                match path {
                    Some(path) => {
                        let text = read_manifest_file(&path)?;
                        let file = path.display().to_string();
                        // The file alone first: a `python` key in it is refused there.
                        Manifest::parse(&text, &file)?;
                        (text, file, true)
                    }
                    None => (String::new(), "tools=".to_string(), false),
                }
            }
            // A fixed text was stored before (it may hold Python tools a front end declared
            // then): it is parsed as a stored copy.
            ManifestSource::Fixed(Some(t)) => (t.to_string(), "the fixed manifest".into(), true),
            ManifestSource::Fixed(None) => (String::new(), "tools=".to_string(), false),
        };
        if !any && python.is_empty() {
            return Ok(None);
        }
        if !python.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            for t in python {
                text += &t.to_toml();
            }
            if any {
                file = format!("{file} with the Python tools of tools=");
            }
        }
        Manifest::parse_from(&text, &file, Source::Stored)?;
        Ok(Some(self.blobs().put(text.as_bytes())?))
    }

    /// The text of a stored manifest (a session's `manifestDigest`).
    pub fn manifest_text(&self, digest: &str) -> Result<String> {
        let bytes = self.blobs().get(digest, None)?;
        String::from_utf8(bytes).map_err(|_| {
            Error::new(
                Code::BadManifest,
                format!("manifest blob {digest}: not UTF-8"),
                "the stored copy is damaged; give the manifest file again",
            )
        })
    }
}

fn read_manifest_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| {
        Error::new(
            Code::BadManifest,
            format!("cannot read manifest {}: {e}", path.display()),
            "give a readable revl.toml as the manifest",
        )
        .with_remedy(Remedy::GiveManifest)
        .with_cause(e)
    })?;
    String::from_utf8(bytes).map_err(|_| {
        Error::new(
            Code::BadManifest,
            format!("{}: not UTF-8", path.display()),
            "save the manifest as UTF-8",
        )
    })
}

fn object_args(args: &Value) -> Result<()> {
    if args.is_object() {
        Ok(())
    } else {
        Err(Error::bad_args(
            "tool args must be a JSON object",
            "give the args as a JSON object",
        )
        .with_remedy(Remedy::ArgsObject))
    }
}

impl Session {
    /// The session's manifest: the copy stored at `new`, never the file in the workspace.
    pub fn manifest(&self) -> Result<Manifest> {
        self.view().manifest()
    }

    /// Run `tool` as this session does every tool: in its workspace (see [`View::run_tool_at`]).
    pub(super) fn run_tool_at(
        &self,
        tool: &Tool,
        args: &Value,
        witness: Option<&Value>,
        step: u64,
        key: Option<&str>,
    ) -> Result<crate::tools::ToolRun> {
        self.view()
            .run_tool_at(tool, args, witness, step, key, self.ws.root())
    }

    /// `call TOOL --args JSON`, by the tool's class (docs/reference.md, "Effects").
    pub fn call(&mut self, name: &str, args: Value) -> Result<CallResult> {
        self.require_live()?;
        let manifest = self.manifest()?;
        let tool = manifest
            .tool(name)
            .cloned()
            .ok_or_else(|| manifest.unknown_tool(name))?;
        object_args(&args)?;
        check_args(&tool, &args, false, self.store.tool_host())?;
        crate::tools::check_runnable(&tool, self.store.tool_host())?;
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

    fn enqueue(&mut self, tool: &Tool, args: Value) -> Result<CallResult> {
        let seq = self.take_seq()?;
        let after_step = self.journal.state.head();
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
        Ok(CallResult::Queued {
            seq,
            queued: true,
            after_step,
            note: "held: it fires only at a confirmed commit",
        })
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
                redo: None,
                argv: None,
            },
            true,
        )
    }

    fn call_effect(&mut self, tool: &Tool, manifest: &Manifest, args: Value) -> Result<CallResult> {
        let undo_tool = manifest.tool(tool.undo.as_deref().unwrap_or("")).cloned();
        let step = self.journal.state.next_index();
        let label = format!("{}.{}", tool.service, tool.method);
        self.intent(step, "effect", &label, &tool.name)?;
        self.fp.point("effect.after-intent");
        let run = self.run_tool_at(tool, &args, None, step, None)?;
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
        rec.set_undo(Some(&Undo::Tool {
            tool: tool.undo.clone().unwrap_or_default(),
        }))?;
        rec.undo_idempotent = tool.undo_idempotent;
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(CallResult::ran(step, seq, label, None, run))
    }

    /// Find a usable approval for an emission, or `None`.
    fn usable_approval(&self, tool: &str, digest: &str) -> Option<Record> {
        if self.journal.state.standing.contains(tool) {
            return Some(Record::ApprovalConsumed {
                ticket: None,
                tool: Some(tool.into()),
            });
        }
        self.journal
            .state
            .tickets_granted
            .iter()
            .find(|(t, (tl, d))| {
                tl == tool
                    && d.as_deref() == Some(digest)
                    && !self.journal.state.tickets_consumed.contains(*t)
            })
            .map(|(t, _)| Record::ApprovalConsumed {
                ticket: Some(t.clone()),
                tool: None,
            })
    }

    fn call_emission(
        &mut self,
        tool: &Tool,
        manifest: &Manifest,
        args: Value,
    ) -> Result<CallResult> {
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
                            args: Some(args.clone()),
                        },
                        true,
                    )?;
                    return Ok(CallResult::ApprovalRequired {
                        approval_required: true,
                        hint: format!("a human approves with `revl approve {} --ticket {ticket}` (once) or `--tool {}` (standing); then call again", self.id, tool.name),
                        ticket,
                        tool: tool.name.clone(),
                        args_digest: digest,
                    });
                }
            }
        }
        let step = self.journal.state.next_index();
        let label = format!("{}.{}", tool.service, tool.method);
        let seq = self.take_seq()?;
        let key = format!("{}-{seq}", self.id);
        self.intent(step, "emission", &label, &tool.name)?;
        self.fp.point("effect.after-intent");
        let run = self.run_tool_at(tool, &args, None, step, Some(&key))?;
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
        Ok(CallResult::ran(step, seq, label, Some(key), run))
    }

    fn call_opaque(&mut self, tool: &Tool, args: Value) -> Result<CallResult> {
        let step = self.journal.state.next_index();
        let label = format!("{}/opaque", tool.name);
        self.intent(step, "opaque", &label, &tool.name)?;
        let run = self.run_tool_at(tool, &args, None, step, None)?;
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
        Ok(CallResult::ran(step, seq, label, None, run))
    }

    /// Refuse (`tool-unavailable`) before an unwind records anything if one of the
    /// inverses it would run is a Python function this process does not hold.
    pub(crate) fn check_inverse_tools(&self, run: &[u64]) -> Result<()> {
        self.view().check_inverse_tools(run)
    }
}
