//! Reading a session (SPEC 4.2): timeline, inspect, status, owed, verify; and the checks a
//! rewind target passes.

use super::{Session, GUARANTEE};
use crate::classify::{self, partition};
use crate::error::{Code, Error, Result};
use crate::report::Owed;
use crate::step::{Step, StepKind};
use serde_json::{json, Map, Value};

impl Session {
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

    /// A rewind (fork, step-back) to `k`: the session is live, `k` is in range and a live
    /// step (SPEC 4.3). Returns the partition of the tail above `k`.
    pub(crate) fn rewind_target(&self, k: i64, verb: &str) -> Result<classify::Partition> {
        self.require_live()?;
        self.check_range(k)?;
        if let Some(why) = classify::k_not_live(&self.state.steps, &self.state.spans, k) {
            return Err(Error::new(
                Code::Undone,
                format!("cannot {verb} {k}: {why}"),
                "pick a live step from the timeline",
            ));
        }
        Ok(partition(&self.state.steps, k))
    }

    /// Check K is an integer in [-1, head] (exit 2 otherwise).
    pub fn check_range(&self, k: i64) -> Result<()> {
        let head = self.state.head() as i64;
        if k < -1 || k > head {
            return Err(Error::bad_args(
                format!("step {k} is out of range: this session has steps -1..={head}"),
                "the timeline lists the step indices",
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
            "owed": crate::report::to_json(&self.owed()),
        });
        if let Some(o) = &st.origin {
            v["parent"] = o.parent.clone().into();
            v["forkedAt"] = o.at.into();
        }
        if let Some(f) = &st.fork_frozen {
            v["branch"] = f.branch.clone().into();
            v["frozenAt"] = f.at.into();
        }
        v
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
