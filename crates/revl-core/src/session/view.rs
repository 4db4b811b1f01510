//! A session read only (docs/architecture.md, "The journal"): its id, store, blobs, WAL and
//! state, and what is decided from them alone: the manifest copy, the inverse a step names
//! and running it in a workspace it is given, and where bytes of a digest are kept. A
//! session and THE executor's rewinds ([`super::unwind::Rewind`]) both read through it; a
//! parallel branch's rewind gets the parent's view and the branch's workspace, never the
//! parent's.

use crate::blobs::BlobStore;
use crate::error::{Code, Error, Result};
use crate::state::State;
use crate::step::{Step, StepKind};
use crate::store::Store;
use crate::tools::{run_tool, Manifest, Source, Tool};
use crate::undo::Undo;
use crate::workspace::Workspace;
use serde_json::{json, Value};
use std::path::Path;

/// A session, read only.
pub(crate) struct View<'a> {
    pub(super) id: &'a str,
    pub(super) store: &'a Store,
    pub(super) blobs: &'a BlobStore,
    pub(super) wal: &'a Path,
    pub(super) state: &'a State,
}

impl View<'_> {
    /// The session's manifest: the copy stored at `new`, never the file in the workspace.
    pub fn manifest(&self) -> Result<Manifest> {
        match &self.state.manifest_digest {
            None => Ok(Manifest::default()),
            Some(d) => {
                let bytes = self.blobs.get(d, None)?;
                Manifest::parse_from(
                    &String::from_utf8_lossy(&bytes),
                    &format!("manifest blob {d}"),
                    Source::Stored,
                )
            }
        }
    }

    /// Run `tool` as this session does every tool: in its workspace, with the environment of
    /// step `step`, through the store's host for Python functions; `witness` for an inverse,
    /// `key` (the idempotency key) for a held send.
    pub(super) fn run_tool_at(
        &self,
        tool: &Tool,
        args: &Value,
        witness: Option<&Value>,
        step: u64,
        key: Option<&str>,
        cwd: &Path,
    ) -> Result<crate::tools::ToolRun> {
        run_tool(
            tool,
            args,
            witness,
            cwd,
            &self.env(step),
            key,
            self.store.tool_host(),
        )
    }

    pub(super) fn env(&self, step: u64) -> Vec<(String, String)> {
        vec![
            ("REVL_SESSION".into(), self.id.to_string()),
            ("REVL_STEP".into(), step.to_string()),
        ]
    }

    /// Refuse (`tool-unavailable`) before an unwind records anything if one of the
    /// inverses it would run is a Python function this process does not hold.
    pub(crate) fn check_inverse_tools(&self, run: &[u64]) -> Result<()> {
        let mut manifest = None;
        for &i in run {
            let s = &self.state.steps[i as usize];
            let name = match (&s.kind, s.undo()) {
                (StepKind::Effect, Some(Undo::Tool { tool })) => tool.as_str(),
                (StepKind::Compensation, _) => {
                    s.detail().get("tool").and_then(Value::as_str).unwrap_or("")
                }
                _ => continue,
            };
            if manifest.is_none() {
                manifest = Some(self.manifest()?);
            }
            if let Some(t) = manifest.as_ref().and_then(|m| m.tool(name)) {
                crate::tools::check_runnable(t, self.store.tool_host())?;
            }
        }
        Ok(())
    }

    /// Run a manifest inverse: an effect's undo tool or a compensation.
    pub(crate) fn run_tool_inverse(&self, s: &Step, ws: &Workspace) -> Result<()> {
        let manifest = self.manifest()?;
        let (tool_name, args, witness) = match s.kind {
            StepKind::Effect => (
                match s.undo() {
                    Some(Undo::Tool { tool }) => tool.clone(),
                    _ => String::new(),
                },
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
        let run = self.run_tool_at(&tool, &args, Some(&witness), s.index, None, ws.root())?;
        match run.error {
            None => Ok(()),
            Some(_) => Err(Error::new(
                Code::ToolFailed,
                run.error_message(),
                "the inverse failed; its outcome is listed",
            )),
        }
    }

    /// The bytes whose blake3 is `digest`: from the blob store, an inline preimage of any
    /// step, or the workspace file `rel`.
    pub(crate) fn bytes_by_digest(
        &self,
        digest: &str,
        rel: &str,
        ws: &Workspace,
    ) -> Result<Vec<u8>> {
        // A cache of a remote fetched it again and the remote holds it damaged: that
        // object's refusal is the answer if no other copy (checked by its digest) is found.
        let refused = match self.blobs.get(digest, None) {
            Ok(b) => return Ok(b),
            Err(e) if e.code == Code::CorruptRemote => Some(e),
            Err(_) => None,
        };
        if let Some(b) = super::read::inline_preimage(&self.state.steps, digest)? {
            return Ok(b);
        }
        if let Some(b) = super::read::kept_in_wal(self.wal, digest) {
            return Ok(b);
        }
        // The sessions that share this workspace's history: a branch's first writes hold
        // its parent's last contents as their preimages, and the other way round.
        let mut related: Vec<String> = Vec::new();
        related.extend(self.state.fork_frozen.as_ref().map(|f| f.branch.clone()));
        related.extend(self.state.fork_begun.as_ref().map(|f| f.branch.clone()));
        related.extend(self.state.origin.as_ref().map(|o| o.parent.clone()));
        related.extend(
            self.state
                .parallel_children
                .iter()
                .map(|c| c.branch.clone()),
        );
        let mut seen: Vec<String> = vec![self.id.to_string()];
        while let Some(id) = related.pop() {
            if seen.contains(&id) {
                continue;
            }
            seen.push(id.clone());
            let Ok((st, _)) = crate::state::State::read(&self.store.wal_path(&id)) else {
                continue;
            };
            if let Some(b) = super::read::inline_preimage(&st.steps, digest)? {
                return Ok(b);
            }
            if let Some(b) = super::read::kept_in_wal(&self.store.wal_path(&id), digest) {
                return Ok(b);
            }
            related.extend(st.fork_frozen.as_ref().map(|f| f.branch.clone()));
            related.extend(st.origin.as_ref().map(|o| o.parent.clone()));
            related.extend(st.parallel_children.iter().map(|c| c.branch.clone()));
        }
        if let Some(b) = ws.bytes_of(rel)? {
            if crate::util::blake3_hex(&b) == digest {
                return Ok(b);
            }
        }
        if let Some(e) = refused {
            return Err(e);
        }
        Err(Error::new(
            Code::MissingPreimage,
            format!("the content of {rel} (digest {digest}) is kept nowhere"),
            "revl holds no copy of these bytes (it keeps what its writes and execs wrote until `revl gc --apply` drops what no live or frozen session reaches; an exec recorded by an earlier revl kept its outputs only up to 4 KiB); `revl timeline` names the step that made them",
        ))
    }
}

impl super::Session {
    /// This session, read only.
    pub(crate) fn view(&self) -> View<'_> {
        View {
            id: &self.id,
            store: &self.store,
            blobs: &self.blobs,
            wal: self.journal.path(),
            state: &self.journal.state,
        }
    }
}
