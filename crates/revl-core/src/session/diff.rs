//! `diff LEFT[@K] RIGHT[@K] [PATH]` (docs/user-guide.md §6): the paths whose content
//! differs between two sessions' workspaces at two points, with unified diffs for text. The
//! paths compared are those either side's history witnessed (its lineage included); their
//! content comes from the blob store and the WAL (as `read --at` finds it), or from the
//! live files at a live session's head.

use super::Session;
use crate::error::{Error, Result};
use crate::state::{Life, State};
use crate::step::{Pos, StepKind};
use crate::undo::{FileKind, Image, Undo};
use serde::Serialize;
use std::collections::BTreeSet;

/// Text files up to this size get a unified diff.
const DIFF_MAX: usize = 1 << 20;

/// One side of a diff: a session, at a step or (None) now.
#[derive(Clone, Copy)]
pub struct Point<'a> {
    pub session: &'a Session,
    pub at: Option<i64>,
}

/// `{path, left, right, diff?}`; a side is null where the path did not exist.
#[derive(Debug, Clone, Serialize)]
pub struct PathDiff {
    pub path: String,
    pub left: Option<Image>,
    pub right: Option<Image>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// `{left, right, paths}`.
#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    pub left: String,
    pub right: String,
    pub paths: Vec<PathDiff>,
}

/// Every path `steps` witnessed up to `upto` (a file effect's paths, an exec's changes).
fn witnessed_in(st: &State, upto: Option<Pos>, out: &mut BTreeSet<String>) {
    for s in &st.steps {
        if s.kind != StepKind::Effect || upto.is_some_and(|k| !k.covers(s.index)) {
            continue;
        }
        if let Some(Undo::Restore { entries }) = s.undo() {
            out.extend(entries.iter().map(|e| e.path().to_string()));
        }
        out.extend(crate::drift::after_images(s).into_iter().map(|i| i.path));
    }
}

impl Session {
    /// The label of a point: `SESSION@K` or `SESSION` (now).
    fn point_label(&self, at: Option<i64>) -> String {
        match at {
            Some(k) => format!("{}@{k}", self.id),
            None => self.id.clone(),
        }
    }

    /// Every path this session's history witnessed, its ancestors' up to each fork point
    /// included (a branch's workspace started as its parent's at k). An ancestor whose WAL
    /// cannot be found or read is an error (its paths would silently go uncompared).
    fn witnessed_paths(&self, at: Option<Pos>) -> Result<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        witnessed_in(&self.journal.state, at, &mut out);
        let mut origin = self.journal.state.origin.clone();
        let mut branch = self.id.clone();
        let mut hops = 0;
        while let Some(o) = origin.take().filter(|_| hops < 64) {
            hops += 1;
            let wal = crate::lineage::find_parent_wal(
                &branch,
                &o.parent_ref(),
                o.at,
                Some(self.store.root()),
            )?;
            let (st, _) = State::read(&wal)?;
            witnessed_in(&st, Some(o.at), &mut out);
            branch = o.parent;
            origin = st.origin.clone();
        }
        Ok(out)
    }

    /// The image of `rel` at a point, and its bytes when it is a file.
    fn image_with_bytes(&self, rel: &str, at: Option<i64>) -> Result<(Image, Option<Vec<u8>>)> {
        // A mirrored session's workspace is elsewhere: "now" is its head as the WAL says.
        let live_now = at.is_none()
            && self.journal.state.life() == Life::Live
            && self.store.copied().is_none();
        let (img, inline) = if live_now {
            (self.ws.observe(rel)?, None)
        } else {
            let k = self.check_range(at.unwrap_or(self.journal.state.head() as i64))?;
            self.image_at(rel, k)?
        };
        let bytes = match (img.kind, &img.digest, inline) {
            (_, _, Some(b)) => Some(b),
            (Some(FileKind::File), _, None) if live_now => self.ws.bytes_of(rel)?,
            (Some(FileKind::File), Some(d), None) => self.bytes_by_digest(d, rel).ok(),
            _ => None,
        };
        Ok((img, bytes))
    }
}

/// Under `prefix` (the path itself, or below it).
fn under(path: &str, prefix: &str) -> bool {
    prefix.is_empty() || path == prefix || path.starts_with(&format!("{prefix}/"))
}

fn side(img: Image) -> Option<Image> {
    (img.kind != Some(FileKind::Absent)).then_some(Image {
        path: String::new(),
        ..img
    })
}

/// The diff of two points, restricted to `path` (and below) when given.
pub fn diff(left: Point, right: Point, path: Option<&str>) -> Result<DiffReport> {
    let prefix = match path {
        Some(p) => left.session.ws.confine(p, true)?,
        None => String::new(),
    };
    let pos = |p: &Point| {
        p.at.and_then(|k| p.session.journal.state.pos(k))
            .or(Some(p.session.journal.state.head_pos()))
    };
    let mut paths = left.session.witnessed_paths(pos(&left))?;
    paths.extend(right.session.witnessed_paths(pos(&right))?);
    // A directory that is live on either side now: its files, one by one.
    for p in [&left, &right] {
        if p.at.is_none()
            && p.session.journal.state.life() == Life::Live
            && p.session.store.copied().is_none()
        {
            let dirs: Vec<String> = paths.iter().cloned().collect();
            for d in dirs {
                if p.session
                    .ws
                    .lstat_rel(&d)?
                    .is_some_and(|(k, _, _)| k == FileKind::Dir)
                {
                    for img in p.session.ws.observe_tree(&d, &|_| false)? {
                        paths.insert(img.path);
                    }
                }
            }
        }
    }
    let mut out: Vec<PathDiff> = Vec::new();
    for rel in paths.iter().filter(|p| under(p, &prefix)) {
        let (li, lb) = left.session.image_with_bytes(rel, left.at)?;
        let (ri, rb) = right.session.image_with_bytes(rel, right.at)?;
        let (l, r) = (side(li), side(ri));
        let same = match (&l, &r) {
            (Some(a), Some(b))
                if a.kind == Some(FileKind::Dir) && b.kind == Some(FileKind::Dir) =>
            {
                a.mode == b.mode
            }
            (a, b) => a == b,
        };
        if same {
            continue;
        }
        let text = |b: &Option<Vec<u8>>, img: &Option<Image>| match (b, img) {
            (_, None) => Some(String::new()),
            (Some(b), Some(_)) if b.len() <= DIFF_MAX => String::from_utf8(b.clone()).ok(),
            _ => None,
        };
        let is_file = |i: &Option<Image>| i.as_ref().is_none_or(|i| i.kind == Some(FileKind::File));
        let unified = match (is_file(&l) && is_file(&r), text(&lb, &l), text(&rb, &r)) {
            (true, Some(a), Some(b)) if a != b => Some(
                similar::TextDiff::from_lines(&a, &b)
                    .unified_diff()
                    .header(
                        &format!("{}/{rel}", left.session.point_label(left.at)),
                        &format!("{}/{rel}", right.session.point_label(right.at)),
                    )
                    .to_string(),
            ),
            _ => None,
        };
        out.push(PathDiff {
            path: rel.clone(),
            left: l,
            right: r,
            diff: unified,
        });
    }
    Ok(DiffReport {
        left: left.session.point_label(left.at),
        right: right.session.point_label(right.at),
        paths: out,
    })
}

/// `ID` or `ID@K`.
fn split_point(given: &str) -> Result<(&str, Option<i64>)> {
    match given.rsplit_once('@') {
        Some((id, k)) => k.trim().parse::<i64>().map(|k| (id, Some(k))).map_err(|_| {
            Error::bad_args(
                format!("{given:?}: {k:?} is not a step index"),
                "give SESSION or SESSION@K, K a step index from the timeline (-1: before every step)",
            )
        }),
        None => Ok((given, None)),
    }
}

/// `diff LEFT RIGHT [PATH]` on a store: each side `ID[@K]` (an id or a unique prefix),
/// attached for the time of the diff (one session given twice is attached once).
pub fn diff_in(
    store: &crate::store::Store,
    left: &str,
    right: &str,
    path: Option<&str>,
) -> Result<DiffReport> {
    let ((l, lk), (r, rk)) = (split_point(left)?, split_point(right)?);
    let (l, r) = (store.resolve(l)?, store.resolve(r)?);
    let ls = store.attach(&l)?;
    let rs = if r == l {
        None
    } else {
        Some(store.attach(&r)?)
    };
    diff(
        Point {
            session: &ls,
            at: lk,
        },
        Point {
            session: rs.as_ref().unwrap_or(&ls),
            at: rk,
        },
        path,
    )
}
