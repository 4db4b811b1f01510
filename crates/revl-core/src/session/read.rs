//! Reading a session (docs/reference.md, "Reading a session"): timeline, inspect, status,
//! owed, verify; and the checks a rewind target passes.

use super::{Session, TIMELINE_CLAIM};
use crate::classify::{self, partition};
use crate::drift::Expected;
use crate::error::{Code, Error, Result};
use crate::report::{Inspect, Owed, ReadAt, Status, StepView, Timeline, Verify};
use crate::step::{Pos, StepKind};
use crate::undo::{FileKind, Image, RestoreEntry, TreeItem, Undo};
use serde_json::Value;

impl Session {
    pub fn timeline(&self) -> Timeline {
        Timeline {
            session: self.id.clone(),
            state: self.journal.state.life().as_str(),
            head: self.journal.state.position(),
            torn: self.journal.torn,
            steps: self
                .journal
                .state
                .steps
                .iter()
                .map(|s| {
                    let mut v = StepView::of(s);
                    // Which fork rewound it: the serial fork that froze this session.
                    if let (Some("fork"), Some(f)) =
                        (v.undone_by.as_deref(), &self.journal.state.fork_frozen)
                    {
                        v.rewound_by = Some(format!(
                            "the fork at step {} that made branch {}",
                            f.at, f.branch
                        ));
                    }
                    v
                })
                .collect(),
            accumulated: self
                .journal
                .state
                .accumulated(self.journal.state.head_pos()),
            guarantee: TIMELINE_CLAIM,
            busy: self.busy(),
            corrupt: self.corrupt().cloned(),
        }
    }

    /// A rewind (fork, step-back) to `k`: the session is live, `k` is in range and a live
    /// step (docs/reference.md, "Step back"). Returns the partition of the tail above `k`.
    pub(crate) fn rewind_target(&self, k: i64, verb: &str) -> Result<classify::Partition> {
        self.require_live()?;
        let k = self.check_range(k)?;
        if let Some(why) =
            classify::k_not_live(&self.journal.state.steps, &self.journal.state.spans, k)
        {
            return Err(Error::new(
                Code::Undone,
                format!("cannot {verb} {k}: {why}"),
                "pick a live step from the timeline",
            )
            .with_remedy(crate::error::Remedy::Timeline));
        }
        Ok(partition(&self.journal.state.steps, k))
    }

    /// The position K names: an integer in [-1, head] (exit 2 otherwise).
    pub fn check_range(&self, k: i64) -> Result<Pos> {
        self.journal.state.pos(k).ok_or_else(|| {
            Error::bad_args(
                format!(
                    "step {k} is out of range: this session has steps -1 to {}",
                    self.journal.state.head()
                ),
                "the timeline lists the step indices",
            )
            .with_remedy(crate::error::Remedy::Timeline)
        })
    }

    pub fn inspect(&self, k: i64) -> Result<Inspect> {
        let k = self.check_range(k)?;
        let steps = &self.journal.state.steps;
        Ok(Inspect {
            at: k,
            at_label: self.journal.state.label_at(k),
            active_provisions: self.journal.state.provisions_at(k),
            accumulated: self.journal.state.accumulated(k),
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
        let st = &self.journal.state;
        Status {
            session: self.id.clone(),
            state: st.life().as_str(),
            workspace: st.workspace.clone(),
            wal: self.journal.path().display().to_string(),
            head: st.position(),
            torn: self.journal.torn,
            provisions: st.provisions_at(st.head_pos()),
            queue: st.held_sends(),
            owed: self.owed(),
            parent: st.origin.as_ref().map(|o| o.parent.clone()),
            forked_at: st.origin.as_ref().map(|o| o.at),
            branch: st.fork_frozen.as_ref().map(|f| f.branch.clone()),
            frozen_at: st.fork_frozen.as_ref().map(|f| f.at),
            abandoned_forks: st.abandoned_forks(),
            busy: self.busy(),
            repair_pending: self.repair_blocked.clone(),
            corrupt: self.corrupt().cloned(),
        }
    }

    /// What repair or an interrupted operation could not finish without crossing: crossing
    /// inverses not yet run (from a repaired abort or compensating step-back), and held sends
    /// whose outcome is unknown after a crash during a commit.
    pub fn owed(&self) -> Vec<Owed> {
        let st = &self.journal.state;
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
                    args: (*d.args).clone(),
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

    /// `verify` (docs/architecture.md, "Drift: what revl expects, exactly"): every
    /// witnessed path whose bytes, mode or kind no longer match the last recorded image
    /// (post-image, or preimage after an undo), and every entry revl never witnessed inside
    /// a directory it created.
    pub fn verify(&self) -> Result<Verify> {
        let exp = self.expected();
        let scan = crate::statindex::Scan::of(&self.ws, Some(&self.store.stat_index(&self.id)));
        let drift = exp.per_entry(exp.drift(scan.ws())?, scan.ws(), &self.blobs);
        scan.done();
        Ok(Verify {
            session: self.id.clone(),
            drift,
            note: "changes made to the workspace outside revl are not witnessed; a rewind does not restore them, and preserves what it would overwrite or remove",
            busy: self.busy(),
        })
    }

    /// `read PATH --at K` (docs/user-guide.md §3): the content PATH had right after step K
    /// ran (K = -1: before every step), even when a later rewind undid step K, in any state
    /// of the session. What revl witnessed at K decides the image; a path revl had not
    /// touched by then had what the first later step touching it found (its preimage), or,
    /// if revl never touched it, what it has now. The bytes come from the blob store, an
    /// inline preimage, or the workspace, whichever holds that digest. `absent` (exit 1)
    /// where it did not exist.
    pub fn read_at(&self, path: &str, k: i64) -> Result<ReadAt> {
        let k = self.check_range(k)?;
        let rel = self.ws.confine(path, false)?;
        let (img, inline) = self.image_at(&rel, k)?;
        let absent = || {
            Error::new(
                Code::Absent,
                format!("{rel} did not exist after step {k}"),
                "the timeline shows which steps touched it",
            )
            .with_remedy(crate::error::Remedy::Timeline)
        };
        let digest = match (img.kind, &img.digest) {
            (Some(FileKind::File), Some(d)) => d.clone(),
            (Some(FileKind::Absent), _) => return Err(absent()),
            (kind, _) => {
                return Err(Error::bad_args(
                    format!(
                        "{rel} was a {} after step {k}, not a file",
                        kind.map_or("path", FileKind::as_str)
                    ),
                    "read a file; list a directory",
                ))
            }
        };
        let bytes = match inline {
            Some(b) => b,
            None => self.bytes_by_digest(&digest, &rel)?,
        };
        let (content, content_base64) = match String::from_utf8(bytes) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(crate::workspace::b64(e.as_bytes()))),
        };
        Ok(ReadAt {
            path: rel,
            at: k,
            mode: img.mode,
            digest,
            content,
            content_base64,
        })
    }

    /// The image `rel` had right after step `k` ran (see [`Session::read_at`]), with its
    /// bytes when they sit in a directory listing.
    pub(crate) fn image_at(&self, rel: &str, k: Pos) -> Result<(Image, Option<Vec<u8>>)> {
        self.image_in(&self.expected_at(k), rel, k)
    }

    /// What revl witnessed right after step `k` (built once for the many paths of a
    /// diff or a materialisation).
    pub(crate) fn expected_at(&self, k: Pos) -> Expected {
        Expected::at_in_with(
            &self.journal.state.steps,
            k,
            &self.blobs,
            self.journal.state.inherited(),
        )
    }

    /// [`Session::image_at`] with `exp`, the session's [`Session::expected_at`] of `k`.
    pub(crate) fn image_in(
        &self,
        exp: &Expected,
        rel: &str,
        k: Pos,
    ) -> Result<(Image, Option<Vec<u8>>)> {
        let witnessed = exp.image_of(rel);
        Ok(match witnessed {
            // Only its mode was witnessed (a chmod of a file revl had not written): its
            // content is what it was before the next change, or what it is now.
            Some(img) if img.kind == Some(FileKind::File) && img.digest.is_none() => {
                let (found, bytes) = match self.preimage_after(rel, k)? {
                    Some(found) => found,
                    None => self.unwitnessed_now(rel)?,
                };
                (
                    Image {
                        digest: found.digest,
                        ..img
                    },
                    bytes,
                )
            }
            Some(img) => (img, None),
            None => match self.preimage_after(rel, k)? {
                Some(found) => found,
                None => self.unwitnessed_now(rel)?,
            },
        })
    }

    /// The state `rel` had before the first step after `k` that touched it changed it (that
    /// step's preimage), with its bytes when they sit in a directory listing.
    fn preimage_after(&self, rel: &str, k: Pos) -> Result<Option<(Image, Option<Vec<u8>>)>> {
        first_preimage(
            self.journal
                .state
                .steps
                .iter()
                .skip(k.first_above() as usize),
            &self.blobs,
            rel,
        )
    }

    /// What a path no step of this session touched after the point asked about holds now.
    /// The workspace, unless this session was frozen by a serial fork: then the workspace is
    /// its branch's (or that branch's branch's), and the path is as the first of their steps
    /// that touched it found it (its preimage), or, untouched by all of them, as it is now.
    /// (A mirror's untouched files are the session's base tree, which no branch wrote:
    /// [`crate::storage::Untouched::BaseTree`].)
    fn unwitnessed_now(&self, rel: &str) -> Result<(Image, Option<Vec<u8>>)> {
        if let Some(img) = self.untouched_in_base(rel)? {
            return Ok((img, None));
        }
        if self.store.copied().is_none() {
            for st in self.heirs()? {
                if let Some(found) = first_preimage(st.steps.iter(), &self.blobs, rel)? {
                    return Ok(found);
                }
            }
        }
        Ok((self.ws.observe(rel)?, None))
    }

    /// The serial branches that hold this session's workspace since a fork froze it, in
    /// order (read once per attach: a diff asks for many paths).
    fn heirs(&self) -> Result<&[crate::state::State]> {
        if let Some(h) = self.heirs.get() {
            return Ok(h);
        }
        let mut heirs = Vec::new();
        let mut child = self
            .journal
            .state
            .fork_frozen
            .as_ref()
            .map(|f| f.branch.clone());
        while let Some(id) = child.take().filter(|_| heirs.len() < 64) {
            let (st, _) = crate::state::State::read(&self.store.wal_path(&id))?;
            child = st.fork_frozen.as_ref().map(|f| f.branch.clone());
            heirs.push(st);
        }
        Ok(self.heirs.get_or_init(|| heirs))
    }

    /// The bytes whose blake3 is `digest` (see [`View::bytes_by_digest`]), this session's
    /// workspace file `rel` last.
    pub(crate) fn bytes_by_digest(&self, digest: &str, rel: &str) -> Result<Vec<u8>> {
        self.view().bytes_by_digest(digest, rel, &self.ws)
    }
}

/// The bytes with this digest that an intent of the WAL at `wal` carries: a small write's
/// `redo`, or a post-image kept in `after.kept`. Read only when nothing else holds them.
pub(super) fn kept_in_wal(wal: &std::path::Path, digest: &str) -> Option<Vec<u8>> {
    let read = crate::wal::read_wal(wal).ok()?;
    for r in read.records.iter().rev() {
        let crate::wal::Record::Intent { after, redo, .. } = r else {
            continue;
        };
        if let Some(b64) = after.as_ref().and_then(|a| a.kept.get(digest)) {
            return crate::workspace::unb64(b64).ok();
        }
        if let Some(redo) = redo {
            if let Ok(b) = crate::workspace::unb64(&redo.content) {
                if crate::util::blake3_hex(&b) == digest {
                    return Some(b);
                }
            }
        }
    }
    None
}

/// The bytes of an inline preimage with this digest, in any step of `steps`.
pub(super) fn inline_preimage(
    steps: &[crate::step::Step],
    digest: &str,
) -> Result<Option<Vec<u8>>> {
    for s in steps {
        for e in s.undo().map(Undo::entries).unwrap_or_default() {
            if let RestoreEntry::File {
                digest: d,
                content: Some(c),
                ..
            } = e
            {
                if d == digest {
                    return crate::workspace::unb64(c).map(Some);
                }
            }
        }
    }
    Ok(None)
}

/// The preimage of `rel` in the first of `steps` that changed it (a file effect's or an
/// exec's restore entry, or the listing of a directory above it), with its bytes when they
/// sit in that listing; `None` when none of them touched it.
fn first_preimage<'a>(
    steps: impl Iterator<Item = &'a crate::step::Step>,
    blobs: &crate::blobs::BlobStore,
    rel: &str,
) -> Result<Option<(Image, Option<Vec<u8>>)>> {
    for s in steps {
        let Some(Undo::Restore { entries }) = s.undo().filter(|_| s.kind == StepKind::Effect)
        else {
            continue;
        };
        for e in entries {
            let p = e.path();
            if p == rel {
                return Ok(Some((e.image(), None)));
            }
            let Some(below) = rel.strip_prefix(&format!("{p}/")) else {
                continue;
            };
            match e {
                RestoreEntry::Dir { tree, .. } => {
                    let items: Vec<TreeItem> =
                        serde_json::from_slice(&blobs.get(tree, Some(s.index))?)
                            .unwrap_or_default();
                    let Some(it) = items.into_iter().find(|i| i.path == below) else {
                        return Ok(Some((Image::absent(rel), None)));
                    };
                    let bytes = it
                        .content
                        .as_deref()
                        .map(crate::workspace::unb64)
                        .transpose()?;
                    let img = Image {
                        digest: it.digest,
                        kind: Some(it.kind),
                        mode: it.mode,
                        path: rel.to_string(),
                    };
                    return Ok(Some((img, bytes)));
                }
                // A mode says nothing about what is below the path.
                RestoreEntry::Mode { .. } => continue,
                _ => return Ok(Some((Image::absent(rel), None))),
            }
        }
    }
    Ok(None)
}
