//! Sessions: create, attach (rebuild from the WAL, repair interrupted operations), and the
//! verbs on a live session. Every public verb leaves the WAL durable before it returns.

use crate::blobs::BlobStore;
use crate::classify::{self, bucket, partition, Bucket};
use crate::error::{Code, Error, Result};
use crate::failpoint::Failpoints;
use crate::state::{Life, State};
use crate::step::{fs_scope, Step, StepKind, BY_STEP_BACK};
use crate::store::Store;
use crate::util::now_rfc3339;
use crate::wal::{create_wal, Record, StepRecord, WalRead, WalWriter};
use crate::workspace::{FileOp, Workspace, UNDO_RESTORE};
use serde_json::{json, Map, Value};
use std::fs::File;
use std::path::{Path, PathBuf};

/// What a rewind claims, and no more (SPEC 4.3).
pub const GUARANTEE: &str = "The inverses of the unwound steps ran, newest first; for file effects the recorded preimage bytes, modes and kinds were restored. Nothing is claimed about anything outside the workspace.";

/// `step-back` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepBackMode {
    Scoped,
    Compensating { force: bool },
}

/// An attached session: its lock is held for as long as this value lives.
pub struct Session {
    pub(crate) store: Store,
    pub(crate) id: String,
    pub(crate) wal_path: PathBuf,
    pub(crate) state: State,
    pub(crate) torn: bool,
    pub(crate) writer: Option<WalWriter>,
    /// Where the intact WAL prefix ends and which seq came last (to open the writer lazily).
    read_tail: (u64, u64, usize),
    pub(crate) ws: Workspace,
    pub(crate) blobs: BlobStore,
    pub(crate) fp: Failpoints,
    _lock: File,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).finish()
    }
}

fn created_by() -> String {
    format!("revl {}", env!("CARGO_PKG_VERSION"))
}

impl Store {
    /// `new --workspace DIR`: create a session (refusing a workspace that has, or is nested
    /// in or around, a live session) and return it attached.
    pub fn new_session(&self, workspace: &Path, manifest: Option<&Path>) -> Result<Session> {
        // Every check runs on the path the workspace will have, before anything is created.
        let ws = crate::store::resolve_future(workspace)?;
        if ws.exists() && !ws.is_dir() {
            return Err(Error::bad_args(
                format!("workspace {} is not a directory", ws.display()),
                "give --workspace a directory",
            ));
        }
        crate::store::check_overlap(self.root(), &ws)?;
        let manifest_digest = self.import_manifest(manifest, &ws)?;
        let _store_lock = self.store_lock()?;
        for id in self.session_ids()? {
            // A WAL that cannot be read is reported by the commands that use it; it does not
            // hold a workspace.
            let Ok(info) = self.info(&id) else { continue };
            let other = Path::new(&info.workspace);
            if info.state == Life::Live && (other.starts_with(&ws) || ws.starts_with(other)) {
                return Err(Error::new(
                    Code::WorkspaceBusy,
                    format!(
                        "workspace {} already has a live session {} (on {})",
                        ws.display(),
                        id,
                        other.display()
                    ),
                    format!("commit or abort session {id} first, or use it"),
                ));
            }
        }
        std::fs::create_dir_all(&ws)
            .map_err(|e| Error::io(format!("cannot create workspace {}", ws.display()), e))?;
        let ws = std::fs::canonicalize(&ws)
            .map_err(|e| Error::io(format!("cannot open workspace {}", ws.display()), e))?;
        let id = crate::util::new_id();
        let dir = self.session_dir(&id);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(dir.display(), e))?;
        let ts = Some(now_rfc3339());
        let header = Record::Header {
            wal_version: crate::wal::WAL_VERSION,
            seq: 0,
            session: id.clone(),
            workspace: ws.display().to_string(),
            manifest_digest,
            created_by: created_by(),
            guarantee: GUARANTEE.into(),
            ts: ts.clone(),
        };
        create_wal(
            &self.wal_path(&id),
            &[header, hinge_record(1, ts.as_deref())?],
            &self.fp,
        )?;
        File::open(self.root().join("sessions"))
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io("sessions/", e))?;
        self.attach(&id)
    }

    /// Attach to a session: take its lock, rebuild its state from the WAL, repair any
    /// interrupted operation (SPEC 6.4).
    pub fn attach(&self, id: &str) -> Result<Session> {
        let dir = self.session_dir(id);
        let lock = self.lock(&dir.join("lock"), &format!("session {id}"))?;
        let wal_path = self.wal_path(id);
        let (state, read) = State::read(&wal_path)?;
        let ws = Workspace::new(PathBuf::from(&state.workspace), self.fp.clone());
        let mut s = Session {
            store: self.clone(),
            id: id.to_string(),
            wal_path,
            torn: read.torn,
            read_tail: (read.good_len, read.last_seq, read.records),
            state,
            writer: None,
            ws,
            blobs: self.blobs(),
            fp: self.fp.clone(),
            _lock: lock,
        };
        s.repair()?;
        Ok(s)
    }
}

/// Step 0 of every session and branch.
pub(crate) fn hinge_record(seq: u64, ts: Option<&str>) -> Result<Record> {
    let mut rec = StepRecord::new(
        seq,
        0,
        StepKind::Hinge,
        "session/hinge",
        "session",
        &json!({}),
    )?;
    rec.set_ts(ts)?;
    Ok(Record::Step(rec))
}

impl Session {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn steps(&self) -> &[Step] {
        &self.state.steps
    }

    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    pub fn wal_path(&self) -> &Path {
        &self.wal_path
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    // ---- writing the WAL: every append also goes through State::apply ----

    fn writer(&mut self) -> Result<&mut WalWriter> {
        if self.writer.is_none() {
            let (good_len, last_seq, records) = self.read_tail;
            let read = WalRead {
                path: self.wal_path.clone(),
                records: Vec::new(),
                torn: self.torn,
                good_len,
                last_seq,
            };
            let mut w = WalWriter::open(&read, self.fp.clone())?;
            w.set_records(records);
            self.writer = Some(w);
            self.torn = false;
        }
        Ok(self.writer.as_mut().expect("writer just opened"))
    }

    pub(crate) fn append(&mut self, rec: Record, durable: bool) -> Result<()> {
        self.append_many(vec![rec], durable)
    }

    pub(crate) fn append_many(&mut self, recs: Vec<Record>, durable: bool) -> Result<()> {
        self.writer()?.append_many(&recs, durable)?;
        for r in recs {
            if let Err(why) = self.state.apply_owned(r) {
                return Err(Error::new(
                    Code::CorruptWal,
                    format!("internal: {why}"),
                    "report this as a bug",
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn sync(&mut self) -> Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.sync(),
            None => Ok(()),
        }
    }

    pub(crate) fn take_seq(&mut self) -> Result<u64> {
        Ok(self.writer()?.take_seq())
    }

    /// Records in the WAL so far (header included).
    pub fn record_count(&self) -> usize {
        self.state.records
    }

    pub(crate) fn step_record(
        &mut self,
        step: u64,
        kind: &str,
        label: &str,
        site: &str,
        detail: Value,
    ) -> Result<StepRecord> {
        let mut rec = StepRecord::new(self.take_seq()?, step, kind.into(), label, site, &detail)?;
        rec.set_ts(Some(&now_rfc3339()))?;
        Ok(rec)
    }

    // ---- life checks ----

    /// Refuse a verb that would write the WAL or the workspace unless the session is live.
    pub fn require_live(&self) -> Result<()> {
        match self.state.life() {
            Life::Live => Ok(()),
            Life::Frozen { branch, at } => Err(Error::new(
                Code::Frozen,
                format!("session {} is frozen: it was forked at step {at} and continues as branch {branch}", self.id),
                format!("act on the branch {branch} instead (reads still work here)"),
            )),
            Life::Committed => Err(Error::new(
                Code::NotLive,
                format!("session {} is committed: it stands behind a committed boundary and takes no more effects", self.id),
                "start a new session with `revl new`",
            )),
            Life::Aborted => Err(Error::new(
                Code::NotLive,
                format!("session {} is aborted and takes no more effects", self.id),
                "start a new session with `revl new`",
            )),
        }
    }

    // ---- effects ----

    /// A built-in file effect: preimage durable first (intent), the change, then the step.
    pub fn file_effect(&mut self, op: FileOp) -> Result<Value> {
        self.require_live()?;
        let planned = self.ws.plan(op, &self.blobs)?;
        let step = self.state.next_index();
        let intent = Record::Intent {
            step,
            kind: "effect".into(),
            label: planned.label.clone(),
            site: planned.site.clone(),
            undo: Some(planned.undo.clone()),
            preimage: None,
            after: Some(json!({"images": planned.after, "detail": planned.detail})),
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
        if let Err(e) = self.ws.apply(&planned, step, staged) {
            // The change failed part-way: put the preimage back and void the intent. If even
            // that fails, the intent stays open and the next attach repairs it.
            if self.ws.restore(&planned.undo, &self.blobs, step).is_ok() {
                self.clean_temps(&planned.after, step);
                let _ = self.append(
                    Record::IntentVoid {
                        step,
                        why: e.message.clone(),
                    },
                    true,
                );
            }
            return Err(e);
        }
        self.fp.point("effect.after-change");
        let rec = self.file_step_record(
            step,
            &planned.label,
            &planned.site,
            planned.detail.clone(),
            &planned.undo,
        )?;
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(json!({"step": step, "seq": seq, "label": planned.label}))
    }

    /// The `step` record of a file effect (made, or rolled forward at repair): scope `fs`,
    /// the restore descriptor without the inline bytes its intent holds, idempotent.
    fn file_step_record(
        &mut self,
        step: u64,
        label: &str,
        site: &str,
        detail: Value,
        undo: &Value,
    ) -> Result<StepRecord> {
        let mut rec = self.step_record(step, "effect", label, site, detail)?;
        rec.set_scope(Some(&fs_scope()))?;
        rec.set_undo(Some(&crate::workspace::slim_undo(undo)))?;
        rec.undo_idempotent = Some(true);
        Ok(rec)
    }

    /// Remove the temp files a write of `step` may have left (at the root, or next to a
    /// target behind a mount point).
    fn clean_temps(&self, after: &[Value], step: u64) {
        let _ = std::fs::remove_file(self.ws.temp_for(step));
        for a in after {
            if let Some(p) = a.get("path").and_then(Value::as_str) {
                if let Some(parent) = self.ws.abs(p).parent() {
                    let _ = std::fs::remove_file(parent.join(format!(".revl-{step}.tmp")));
                }
            }
        }
    }

    /// `provide KEY VALUE`: a provision step.
    pub fn provide(&mut self, key: &str, value: &str) -> Result<Value> {
        self.require_live()?;
        if key.is_empty() {
            return Err(Error::bad_args(
                "the provision key is empty",
                "give a non-empty KEY",
            ));
        }
        let step = self.state.next_index();
        let previous = self
            .state
            .provisions_at(self.state.head() as i64)
            .get(key)
            .cloned();
        let detail = json!({"key": key, "value": value, "previous": previous});
        let mut rec = self.step_record(
            step,
            "provision",
            &format!("provide {key}"),
            "provide",
            detail,
        )?;
        rec.set_undo(Some(
            &json!({"type": "withdraw", "key": key, "previous": previous}),
        ))?;
        rec.undo_idempotent = Some(true);
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(json!({"step": step, "seq": seq, "label": format!("provide {key}")}))
    }

    /// `boundary [LABEL]`: an agent turn marker.
    pub fn boundary(&mut self, label: Option<&str>) -> Result<Value> {
        self.require_live()?;
        let step = self.state.next_index();
        let label = format!(
            "{}/boundary",
            label.filter(|l| !l.is_empty()).unwrap_or("turn")
        );
        let rec = self.step_record(step, "boundary", &label, "boundary", json!({}))?;
        let seq = rec.seq;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(json!({"step": step, "seq": seq, "label": label}))
    }

    /// `exec -- ARGV`: run a command in the workspace (never through a shell); always an
    /// opaque step, whatever its exit code.
    pub fn exec(&mut self, argv: &[String]) -> Result<Value> {
        self.require_live()?;
        if argv.is_empty() || argv[0].is_empty() {
            return Err(Error::bad_args(
                "exec needs a command",
                "revl exec SESSION -- PROGRAM [ARGS...]",
            ));
        }
        let step = self.state.next_index();
        self.append(
            Record::Intent {
                step,
                kind: "opaque".into(),
                label: "exec/opaque".into(),
                site: "exec".into(),
                undo: None,
                preimage: None,
                after: None,
            },
            true,
        )?;
        let env = vec![
            ("REVL_SESSION".to_string(), self.id.clone()),
            ("REVL_STEP".to_string(), step.to_string()),
        ];
        let ran = match crate::proc::run(argv, self.ws.root(), &env, None, None) {
            Ok(r) => r,
            Err(e) => {
                self.append(
                    Record::IntentVoid {
                        step,
                        why: format!("could not start {}: {e}", argv[0]),
                    },
                    true,
                )?;
                return Err(Error::new(
                    Code::ToolFailed,
                    format!("could not start {}: {e}", argv[0]),
                    "check the program name and that it is executable",
                ));
            }
        };
        let status = match ran.code {
            Some(c) => format!("exit {c}"),
            None => "killed by a signal".to_string(),
        };
        let repr = format!("exec {} ({status})", crate::util::jcs(&json!(argv)));
        let rec = self.step_record(
            step,
            "opaque",
            "exec/opaque",
            "exec",
            json!({"repr": repr, "argv": argv, "exitCode": ran.code}),
        )?;
        self.append(Record::Step(rec), false)?;
        self.sync()?;
        Ok(json!({
            "step": step,
            "exitCode": ran.code,
            "stdout": String::from_utf8_lossy(&ran.stdout),
            "stderr": String::from_utf8_lossy(&ran.stderr),
        }))
    }

    // ---- reading ----

    pub fn timeline(&self) -> Value {
        json!({
            "session": self.id,
            "state": self.state.life().as_str(),
            "head": self.state.head(),
            "torn": self.torn,
            "steps": self.state.steps.iter().map(Step::to_json).collect::<Vec<_>>(),
            "accumulated": self.state.accumulated(self.state.head() as i64),
            "guarantee": GUARANTEE,
        })
    }

    /// Check K is an integer in [-1, head] (exit 2 otherwise).
    /// A rewind (fork, step-back) to `k`: the session is live, `k` is in range and a live
    /// step (SPEC 4.3). Returns the partition of the tail above `k`.
    pub(crate) fn rewind_target(&self, k: i64, verb: &str) -> Result<classify::Partition> {
        self.require_live()?;
        self.check_range(k)?;
        if let Some(why) = classify::k_not_live(&self.state.steps, &self.state.spans, k) {
            return Err(Error::new(
                Code::Undone,
                format!("cannot {verb} {k}: {why}"),
                "pick a live step from `revl timeline`",
            ));
        }
        Ok(partition(&self.state.steps, k))
    }

    pub fn check_range(&self, k: i64) -> Result<()> {
        let head = self.state.head() as i64;
        if k < -1 || k > head {
            return Err(Error::bad_args(
                format!("step {k} is out of range: this session has steps -1..={head}"),
                "see `revl timeline` for the step indices",
            ));
        }
        Ok(())
    }

    pub fn inspect(&self, k: i64) -> Result<Value> {
        self.check_range(k)?;
        let provisions = self.state.provisions_at(k);
        Ok(json!({
            "at": k,
            "atLabel": self.state.label_at(k),
            "activeProvisions": provisions,
            "accumulated": self.state.accumulated(k),
            "aheadOfHere": self.state.steps.iter().filter(|s| s.index as i64 > k).map(|s| s.index).collect::<Vec<_>>(),
            "emissionsSoFar": self.state.steps.iter().filter(|s| s.index as i64 <= k && s.kind == StepKind::Emission).map(|s| s.index).collect::<Vec<_>>(),
        }))
    }

    pub fn status(&self) -> Value {
        let st = &self.state;
        let mut v = json!({
            "session": self.id,
            "state": st.life().as_str(),
            "workspace": st.workspace,
            "wal": self.wal_path.display().to_string(),
            "head": st.head(),
            "torn": self.torn,
            "provisions": st.provisions_at(st.head() as i64),
            "queue": st.queue.iter().filter_map(|q| st.deferred.get(q)).map(|d| d.to_json()).collect::<Vec<_>>(),
            "owed": self.owed(),
        });
        if let Some(o) = &st.origin {
            v["parent"] = o.parent.clone().into();
            v["forkedAt"] = o.at.into();
        }
        if let Some((branch, at, _)) = &st.fork_frozen {
            v["branch"] = branch.clone().into();
            v["frozenAt"] = (*at).into();
        }
        v
    }

    /// What repair or an interrupted operation could not finish without crossing.
    pub fn owed(&self) -> Vec<Value> {
        let st = &self.state;
        let mut owed: Vec<Value> = Vec::new();
        if let Some(a) = &st.aborted {
            if let Some(list) = a.get("owed").and_then(Value::as_array) {
                owed.extend(
                    list.iter()
                        .filter(|o| {
                            // An owed inverse that a later explicit abort ran is no longer owed.
                            o.get("index")
                                .and_then(Value::as_u64)
                                .is_none_or(|i| !st.steps.get(i as usize).is_some_and(|s| s.undone))
                        })
                        .cloned(),
                );
            }
        }
        for (seq, err) in &st.residue {
            if err.get("type").and_then(Value::as_str) == Some("unconfirmed") {
                let mut e = st
                    .deferred
                    .get(seq)
                    .map(|d| d.to_json())
                    .unwrap_or_else(|| json!({"seq": seq}));
                e["kind"] = "held-send".into();
                e["why"] = "its outcome is unknown after a crash during the flush; `revl resend` fires it again explicitly".into();
                owed.push(e);
            }
        }
        owed
    }

    /// `verify`: witnessed paths whose bytes, mode or kind no longer match the last recorded
    /// post-image (or, for an undone step, its preimage).
    pub fn verify(&self) -> Result<Value> {
        let mut expected: Vec<Value> = Vec::new();
        let set = |expected: &mut Vec<Value>, img: Value| {
            let p = img
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let under = format!("{p}/");
            expected.retain(|e| {
                let q = e.get("path").and_then(Value::as_str).unwrap_or("");
                q != p && !q.starts_with(&under)
            });
            // A change below a directory makes any recorded digest of that directory stale:
            // keep its kind and mode, drop its digest.
            for e in expected.iter_mut() {
                let q = e
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                if p.starts_with(&format!("{q}/")) {
                    if let Some(o) = e.as_object_mut() {
                        o.remove("digest");
                        // Something below it exists now: it is a directory (created if needed).
                        if o.get("kind").and_then(Value::as_str) != Some("dir") {
                            o.remove("mode");
                            o.insert("kind".into(), "dir".into());
                        }
                    }
                }
            }
            expected.push(img);
        };
        // Events in the order they happened: each file effect's post-images at its index; each
        // undo's preimages right after the head it was run at (newest first within an unwind).
        let mut events: Vec<(EventKey, Vec<Value>)> = Vec::new();
        for s in self
            .state
            .steps
            .iter()
            .filter(|s| s.kind == StepKind::Effect && s.has_builtin_undo())
        {
            events.push(((s.index, 0, std::cmp::Reverse(0)), after_images(s)));
            if let (true, Some(at)) = (s.undone, s.undone_at) {
                events.push(((at, 1, std::cmp::Reverse(s.index)), preimages(s)));
            }
        }
        events.sort_by_key(|e| e.0);
        for (_, imgs) in events {
            for img in imgs {
                set(&mut expected, img);
            }
        }
        let mut drift = Vec::new();
        for img in expected {
            let path = img.get("path").and_then(Value::as_str).unwrap_or("");
            let seen = self.ws.observe(path)?;
            let ok = img
                .as_object()
                .is_some_and(|o| o.iter().all(|(k, v)| seen.get(k) == Some(v)));
            if !ok {
                drift.push(json!({"path": path, "expected": img, "actual": seen}));
            }
        }
        Ok(json!({
            "session": self.id,
            "drift": drift,
            "note": "changes made to the workspace outside revl are not witnessed; a rewind does not restore them",
        }))
    }

    // ---- step-back (SPEC 4.3) ----

    pub fn step_back(&mut self, to: i64, mode: StepBackMode) -> Result<Value> {
        let part = self.rewind_target(to, "step back to")?;
        let tail: Vec<u64> = self
            .state
            .steps
            .iter()
            .skip((to + 1) as usize)
            .rev()
            .map(|s| s.index)
            .collect();
        // What this mode runs, newest first.
        let run: Vec<u64> = tail
            .iter()
            .copied()
            .filter(|&i| {
                let s = &self.state.steps[i as usize];
                matches!(
                    (mode, bucket(s)),
                    (_, Bucket::InversesRan | Bucket::ProvisionsWithdrawn)
                        | (
                            StepBackMode::Compensating { .. },
                            Bucket::WouldCrossOnRewind
                        )
                )
            })
            .collect();
        if let StepBackMode::Compensating { force: false } = mode {
            let bare: Vec<&Step> = part
                .emissions_crossed
                .iter()
                .map(|&i| &self.state.steps[i as usize])
                .filter(|s| s.kind == StepKind::Emission)
                .collect();
            if !bare.is_empty() {
                let labels: Vec<String> = bare
                    .iter()
                    .map(|s| format!("{} ({})", s.index, s.label()))
                    .collect();
                return Err(Error::new(
                    Code::Irreversible,
                    format!(
                        "the tail holds emissions with no compensation: {}",
                        labels.join(", ")
                    ),
                    "use --force to run the other inverses anyway, or a scoped step-back",
                ));
            }
        }
        self.check_preimages(&run)?;
        let mode_name = match mode {
            StepBackMode::Scoped => "scoped",
            StepBackMode::Compensating { .. } => "compensating",
        };
        self.append(
            Record::StepBack {
                to,
                mode: mode_name.into(),
            },
            true,
        )?;
        let mut ran = Vec::new();
        let mut failed = Vec::new();
        for &i in &run {
            match self.run_inverse(i, BY_STEP_BACK, "abort.never")? {
                Ok(()) => ran.push(i),
                Err(f) => failed.push(f),
            }
        }
        let dropped = self.drop_deferred(|d| d.after_step as i64 > to, BY_STEP_BACK)?;
        self.append(
            Record::StepBackDone {
                to,
                failed: failed.clone(),
            },
            false,
        )?;
        self.sync()?;
        let steps = &self.state.steps;
        let mut report = json!({
            "to": to,
            "toLabel": self.state.label_at(to),
            "inversesRan": ran.iter().filter(|&&i| steps[i as usize].kind == StepKind::Effect).map(|&i| classify::rewound_entry(&steps[i as usize])).collect::<Vec<_>>(),
            "provisionsWithdrawn": ran.iter().filter(|&&i| steps[i as usize].kind == StepKind::Provision).map(|&i| classify::rewound_entry(&steps[i as usize])).collect::<Vec<_>>(),
            "emissionsCrossed": classify::entries(steps, &part.emissions_crossed, classify::emission_entry),
            "emissionsCompensated": classify::entries(steps, &part.emissions_compensated, classify::emission_entry),
            "unrestored": classify::entries(steps, &part.unrestored, classify::unrestored_entry),
            "failed": failed,
            "droppedDeferred": dropped,
            "live": true,
            "guarantee": GUARANTEE,
        });
        match mode {
            StepBackMode::Scoped => {
                report["compensate"] = false.into();
                report["wouldCrossOnRewind"] = classify::entries(
                    steps,
                    &part.would_cross_on_rewind,
                    classify::would_cross_entry,
                )
                .into();
            }
            StepBackMode::Compensating { .. } => {
                report["compensationsRan"] = ran
                    .iter()
                    .filter(|&&i| steps[i as usize].kind == StepKind::Compensation)
                    .map(|&i| classify::emission_entry(&steps[i as usize]))
                    .collect::<Vec<_>>()
                    .into();
            }
        }
        Ok(report)
    }

    /// Refuse (`missing-preimage`) before anything runs if a blob an inverse needs is gone.
    pub(crate) fn check_preimages(&self, run: &[u64]) -> Result<()> {
        for &i in run {
            let s = &self.state.steps[i as usize];
            if !s.has_builtin_undo() {
                continue;
            }
            for e in crate::workspace::restore_entries(s.undo()) {
                for b in Workspace::blobs_needed(e, &self.blobs)? {
                    self.blobs.check(&b, Some(i)).map_err(|err| {
                        Error::new(
                            Code::MissingPreimage,
                            format!("step {i} ({}): {}", s.label(), err.message),
                            err.hint.clone(),
                        )
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Run one step's inverse and record `undone`. The outer `Result` is a WAL failure (stop
    /// everything); the inner one is the inverse's own failure (listed in `failed`).
    /// `crash_point` is passed after the inverse ran and before its `undone`.
    pub(crate) fn run_inverse(
        &mut self,
        i: u64,
        by: &str,
        crash_point: &str,
    ) -> Result<std::result::Result<(), Value>> {
        let s = self.state.steps[i as usize].clone();
        if s.undo_idempotent == Some(false) {
            self.append(Record::ReplayFence { step: i }, true)?;
        }
        let outcome: Result<()> = match s.kind {
            StepKind::Provision => Ok(()),
            StepKind::Effect if s.has_builtin_undo() => {
                self.ws
                    .restore(s.undo().expect("builtin undo"), &self.blobs, i)
            }
            _ => self.run_tool_inverse(&s),
        };
        self.fp.point(crash_point);
        match outcome {
            Ok(()) => {
                self.append(
                    Record::Undone {
                        step: i,
                        by: by.into(),
                    },
                    false,
                )?;
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(
                json!({"index": i, "label": s.label(), "error": e.message, "outcome": "failed"}),
            )),
        }
    }

    /// Drop held sends matching `which`; returns their entries (FIFO).
    pub(crate) fn drop_deferred(
        &mut self,
        which: impl Fn(&crate::state::Deferred) -> bool,
        by: &str,
    ) -> Result<Vec<Value>> {
        let seqs: Vec<u64> = self
            .state
            .queue
            .iter()
            .copied()
            .filter(|q| self.state.deferred.get(q).is_some_and(&which))
            .collect();
        let entries: Vec<Value> = seqs
            .iter()
            .filter_map(|q| self.state.deferred.get(q))
            .map(|d| d.to_json())
            .collect();
        if !seqs.is_empty() {
            self.append(
                Record::DeferredDropped {
                    seqs,
                    by: by.into(),
                },
                false,
            )?;
        }
        Ok(entries)
    }

    // ---- repair on attach (SPEC 6.4) ----

    fn repair(&mut self) -> Result<()> {
        // A write stages its content before its intent is durable: if the intent was torn,
        // nothing names the temp file; it can only be the next step's.
        if self.state.life() == Life::Live {
            let _ = std::fs::remove_file(self.ws.temp_for(self.state.next_index()));
        }
        self.repair_fork()?;
        self.repair_parent_fork()?;
        if let Some(intent) = self.state.intent.clone() {
            let file_effect = intent.kind == "effect"
                && intent
                    .undo
                    .as_ref()
                    .and_then(|u| u.get("type"))
                    .and_then(Value::as_str)
                    == Some(UNDO_RESTORE);
            if file_effect {
                let after = intent.after.clone().unwrap_or(Value::Null);
                let images: Vec<Value> = after
                    .get("images")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let mut done = !images.is_empty();
                for img in &images {
                    done &= self.ws.shows(img)?;
                }
                self.clean_temps(&images, intent.step);
                if done {
                    // Roll forward: the change is on disk; record it.
                    let detail = after.get("detail").cloned().unwrap_or(Value::Null);
                    let undo = intent.undo.clone().unwrap_or(Value::Null);
                    let rec = self.file_step_record(
                        intent.step,
                        &intent.label,
                        &intent.site,
                        detail,
                        &undo,
                    )?;
                    self.append(Record::Step(rec), false)?;
                } else {
                    self.ws.restore(
                        intent.undo.as_ref().expect("file intent has undo"),
                        &self.blobs,
                        intent.step,
                    )?;
                    self.append(Record::IntentVoid { step: intent.step, why: "interrupted before the change completed; preimage restored at repair".into() }, false)?;
                }
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
            }
            self.sync()?;
        }
        if let Some((to, mode)) = self.state.step_back_open.clone() {
            self.finish_step_back(to, &mode)?;
        }
        self.repair_outbound()?;
        Ok(())
    }

    /// Finish an interrupted step-back: host-confined inverses not yet `undone` are run;
    /// a fenced one is `failed` (outcome unknown, never re-run); crossing ones are owed.
    fn finish_step_back(&mut self, to: i64, mode: &str) -> Result<()> {
        let head_then = self
            .state
            .spans
            .last()
            .map(|s| s.1)
            .unwrap_or(self.state.head());
        let mut failed = Vec::new();
        let idx: Vec<u64> = ((to + 1) as u64..=head_then).rev().collect();
        for i in idx {
            let s = self.state.steps[i as usize].clone();
            let b = bucket(&s);
            if !matches!(b, Bucket::InversesRan | Bucket::ProvisionsWithdrawn) {
                continue;
            }
            if s.fenced {
                failed.push(json!({"index": i, "label": s.label(), "error": "interrupted after its replay fence", "outcome": "unknown"}));
                continue;
            }
            if let Err(f) = self.run_inverse(i, BY_STEP_BACK, "repair.never")? {
                failed.push(f);
            }
        }
        let _ = mode;
        self.drop_deferred(|d| d.after_step as i64 > to, BY_STEP_BACK)?;
        self.append(Record::StepBackDone { to, failed }, false)?;
        self.sync()
    }
}

/// (head, 0 = step / 1 = undo, newest undo first)
type EventKey = (u64, u8, std::cmp::Reverse<u64>);

/// What an undone file effect's restore put back, as images to compare.
fn preimages(s: &Step) -> Vec<Value> {
    crate::workspace::restore_entries(s.undo())
        .iter()
        .map(|e| match e["kind"].as_str() {
            Some("mode") => json!({"path": e["path"], "mode": e["mode"]}),
            Some("absent") => json!({"path": e["path"], "kind": "absent"}),
            _ => {
                let mut img = json!({"path": e["path"], "kind": e["kind"]});
                for k in ["digest", "mode"] {
                    if let Some(v) = e.get(k) {
                        img[k] = v.clone();
                    }
                }
                img
            }
        })
        .collect()
}

fn after_images(s: &Step) -> Vec<Value> {
    let d = &s.detail();
    let path = d.get("path").cloned().unwrap_or(Value::Null);
    let after = d.get("after").cloned().unwrap_or(Value::Null);
    let mut img = Map::new();
    if let Some(o) = after.as_object() {
        img.extend(o.clone());
    }
    match d.get("to") {
        Some(to) => {
            img.insert("path".into(), to.clone());
            vec![json!({"path": path, "kind": "absent"}), Value::Object(img)]
        }
        None => {
            img.insert("path".into(), path);
            vec![Value::Object(img)]
        }
    }
}
