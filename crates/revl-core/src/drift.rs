//! Drift (docs/architecture.md, "Drift: what revl expects, exactly"): a witnessed path that
//! is no longer as revl's last witnessed step left it (kind, digest, mode), or an entry
//! inside a directory revl created that revl never witnessed. `verify` reports it; every
//! rewind checks for it before an inverse overwrites or removes a path, and preserves what
//! it would destroy.
//!
//! [`Expected`] is what revl believes the workspace holds now: each witnessed path's last
//! image, rebuilt from the timeline in the order things happened (each file effect's
//! post-images at its index; each undo's preimages right after the head it ran at), and the
//! directories revl itself created. A rewind updates it after every inverse it runs.

use crate::error::Result;
use crate::step::{Step, StepKind};
use crate::undo::{EffectDetail, FileKind, Image, RestoreEntry, Undo};
use crate::workspace::Workspace;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One drifted path `{path, expected, actual}` (the entry shape of `verify`). `expected` is
/// absent for an entry revl never witnessed inside a directory it created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Drift {
    pub path: String,
    pub expected: Image,
    pub actual: Image,
    /// What changed, in words: `new file`, `modified`, `deleted`, `mode 0600 -> 0755`,
    /// `replaced (file -> dir)`.
    pub change: String,
}

impl Drift {
    pub fn new(path: String, expected: Image, actual: Image) -> Drift {
        let change = describe(&expected, &actual);
        Drift {
            path,
            expected,
            actual,
            change,
        }
    }
}

/// What changed between an expected image and the one found, in a few words.
fn describe(want: &Image, got: &Image) -> String {
    let kind = |i: &Image| i.kind.map_or("path", FileKind::as_str).to_string();
    match (want.kind, got.kind) {
        (Some(FileKind::Absent), _) => format!("new {}", kind(got)),
        (_, Some(FileKind::Absent)) => "deleted".into(),
        (Some(w), Some(g)) if w != g => format!("replaced ({} -> {})", kind(want), kind(got)),
        _ => {
            let mut parts = Vec::new();
            if want.digest.is_some() && want.digest != got.digest {
                parts.push(if got.kind == Some(FileKind::Symlink) {
                    "retargeted".to_string()
                } else {
                    "modified".to_string()
                });
            }
            if want.mode.is_some() && want.mode != got.mode {
                parts.push(format!(
                    "mode {} -> {}",
                    want.mode.as_deref().unwrap_or("-"),
                    got.mode.as_deref().unwrap_or("-")
                ));
            }
            if parts.is_empty() {
                "changed".into()
            } else {
                parts.join(", ")
            }
        }
    }
}

/// What revl believes the workspace holds now.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    images: BTreeMap<String, Image>,
    /// Directories revl created (the topmost absent ancestor of a write, a mkdir): every
    /// entry in them must be witnessed.
    created: BTreeSet<String>,
    /// Directories that came with their content (moved in, or restored from a tree): revl
    /// knew their whole tree by its digest, even after something below changed.
    trees: BTreeSet<String>,
    /// The listing blob of each directory a rewind restored from a captured tree: drift
    /// inside it is reported entry by entry ([`Expected::per_entry`]).
    listings: BTreeMap<String, String>,
    /// The blob store, when at hand: a restored directory's listing is then read, and its
    /// entries expected one by one.
    blobs: Option<crate::blobs::BlobStore>,
}

/// (head, 0 = step / 1 = undo, newest undo first)
type EventKey = (u64, u8, std::cmp::Reverse<u64>);

impl Expected {
    /// Rebuild from the timeline.
    pub fn of(steps: &[Step]) -> Expected {
        Self::until(steps, None, None, &[])
    }

    /// Rebuild from the timeline, with the blob store: a directory a rewind restored is
    /// expected entry by entry (its listing read from the store).
    pub fn of_in(steps: &[Step], blobs: &crate::blobs::BlobStore) -> Expected {
        Self::until(steps, None, Some(blobs), &[])
    }

    /// [`Expected::of_in`] for a branch that inherited witnessed images from its parent
    /// (`inherited`: what the parent's witness said at the fork point of the paths whose
    /// drift the fork left in place); its own steps come after them.
    pub fn of_in_with(
        steps: &[Step],
        blobs: &crate::blobs::BlobStore,
        inherited: &[Image],
    ) -> Expected {
        Self::until(steps, None, Some(blobs), inherited)
    }

    /// What revl's witness says the workspace held right after step k ran (the file effects
    /// up to k, and the undos run before step k+1), whatever was undone later.
    pub fn at(steps: &[Step], k: crate::step::Pos) -> Expected {
        Self::until(steps, Some(k), None, &[])
    }

    /// [`Expected::at`] with the blob store (see [`Expected::of_in`]).
    pub fn at_in(steps: &[Step], k: crate::step::Pos, blobs: &crate::blobs::BlobStore) -> Expected {
        Self::until(steps, Some(k), Some(blobs), &[])
    }

    /// [`Expected::at_in`] with inherited images (see [`Expected::of_in_with`]).
    pub fn at_in_with(
        steps: &[Step],
        k: crate::step::Pos,
        blobs: &crate::blobs::BlobStore,
        inherited: &[Image],
    ) -> Expected {
        Self::until(steps, Some(k), Some(blobs), inherited)
    }

    fn until(
        steps: &[Step],
        k: Option<crate::step::Pos>,
        blobs: Option<&crate::blobs::BlobStore>,
        inherited: &[Image],
    ) -> Expected {
        let mut events: Vec<(EventKey, &Step, bool)> = Vec::new();
        for s in steps {
            if s.kind != StepKind::Effect || !s.has_builtin_undo() {
                continue;
            }
            if k.is_some_and(|k| !k.covers(s.index)) {
                continue;
            }
            events.push(((s.index, 0, std::cmp::Reverse(0)), s, false));
            if let (true, Some(at)) = (s.undone, s.undone_at) {
                // An undo run while the head was `at` came after step `at`.
                if k.is_none_or(|k| at < k.first_above().saturating_sub(1)) {
                    events.push(((at, 1, std::cmp::Reverse(s.index)), s, true));
                }
            }
        }
        events.sort_by_key(|e| e.0);
        let mut exp = Expected {
            blobs: blobs.cloned(),
            ..Expected::default()
        };
        for img in inherited {
            exp.set(img.clone());
        }
        for (_, s, undo) in events {
            let entries = match s.undo() {
                Some(Undo::Restore { entries }) => entries.as_slice(),
                _ => &[],
            };
            if undo {
                exp.undone(entries);
            } else {
                exp.done(entries, after_images(s));
            }
        }
        exp
    }

    /// A file effect ran: its post-images are expected; a path its preimage says was absent
    /// and that is now a directory (the missing parent of what it wrote, a mkdir) is a
    /// directory revl made.
    pub(crate) fn done(&mut self, entries: &[RestoreEntry], after: Vec<Image>) {
        for e in entries {
            if let RestoreEntry::Absent { path } = e {
                // A directory the effect made: the absent ancestor of what it wrote, or the
                // directory a mkdir made (a file it wrote is witnessed by its own image).
                let below = format!("{path}/");
                let made_dir = after.iter().any(|a| {
                    a.path.starts_with(&below)
                        || (&a.path == path
                            && a.kind == Some(FileKind::Dir)
                            && a.digest.as_deref() == Some(crate::workspace::empty_dir_digest()))
                });
                if made_dir {
                    self.created.insert(path.clone());
                }
            }
        }
        for img in &after {
            self.set(img.clone());
        }
        self.own_trees(&after);
    }

    /// A new tree recorded entry by entry (an exec's `dir-created` with its contents, or a
    /// directory a rewind restored from its listing): revl witnessed every path in it, so
    /// each of its directories owns its entries like one revl made empty (an entry it did
    /// not record is drift), instead of knowing the tree only by one digest. `imgs` holds
    /// the top's image with its tree digest and every entry's image; a directory with a
    /// digest and entries listed below it is such a top. One pass: a set of the parents of
    /// every path, then each directory's ancestors.
    fn own_trees(&mut self, imgs: &[Image]) {
        let parents: std::collections::HashSet<&str> = imgs
            .iter()
            .filter_map(|a| a.path.rsplit_once('/').map(|(p, _)| p))
            .collect();
        let tops: std::collections::HashSet<&str> = imgs
            .iter()
            .filter(|d| d.kind == Some(FileKind::Dir) && d.digest.is_some())
            .map(|d| d.path.as_str())
            .filter(|p| parents.contains(p))
            .collect();
        if tops.is_empty() {
            return;
        }
        let mut owned: Vec<String> = Vec::new();
        for d in imgs.iter().filter(|a| a.kind == Some(FileKind::Dir)) {
            let mut at = d.path.as_str();
            loop {
                if tops.contains(at) {
                    owned.push(d.path.clone());
                    break;
                }
                match at.rsplit_once('/') {
                    Some((parent, _)) => at = parent,
                    None => break,
                }
            }
        }
        for d in owned {
            self.trees.remove(&d);
            self.listings.remove(&d);
            if let Some(i) = self.images.get_mut(&d) {
                i.digest = None;
            }
            self.created.insert(d);
        }
    }

    /// An inverse ran: its preimages are expected again.
    pub fn undone(&mut self, entries: &[RestoreEntry]) {
        for e in entries {
            if let RestoreEntry::Absent { path } = e {
                self.created.remove(path);
            }
            self.set(e.image());
            if let RestoreEntry::Dir { path, tree, .. } = e {
                self.listings.insert(path.clone(), tree.clone());
                // With the blob store at hand, the restored tree is known entry by entry.
                if let Some(items) = self.listing(tree) {
                    let mut imgs = vec![e.image()];
                    imgs.extend(listing_images(path, items));
                    for img in imgs.iter().skip(1) {
                        self.set(img.clone());
                    }
                    self.own_trees(&imgs);
                }
            }
        }
    }

    /// A directory listing from the blob store, when this Expected has one.
    fn listing(&self, tree: &str) -> Option<Vec<crate::undo::TreeItem>> {
        let b = self.blobs.as_ref()?.get(tree, None).ok()?;
        serde_json::from_slice(&b).ok()
    }

    /// Drift reported entry by entry: a restored directory whose tree digest differs is
    /// compared with its listing, so each entry that changed is named (`build/y new file`)
    /// instead of the directory alone. Drift without a listing at hand stays as it is.
    pub fn per_entry(
        &self,
        drift: Vec<Drift>,
        ws: &Workspace,
        blobs: &crate::blobs::BlobStore,
    ) -> Vec<Drift> {
        let mut out = Vec::with_capacity(drift.len());
        for d in drift {
            let both_dirs = d.expected.kind == Some(FileKind::Dir)
                && d.actual.kind == Some(FileKind::Dir)
                && d.expected.digest.is_some();
            let listing = self
                .listings
                .get(&d.path)
                .filter(|_| both_dirs)
                .and_then(|t| blobs.get(t, None).ok())
                .and_then(|b| serde_json::from_slice::<Vec<crate::undo::TreeItem>>(&b).ok());
            let (Some(items), Ok(seen)) = (listing, ws.observe_tree(&d.path, &|_| false)) else {
                out.push(d);
                continue;
            };
            let want: BTreeMap<String, Image> = listing_images(&d.path, items)
                .into_iter()
                .map(|i| (i.path.clone(), i))
                .collect();
            let mut found: Vec<Drift> = Vec::new();
            let mut seen_paths = BTreeSet::new();
            for got in seen.into_iter().filter(|i| i.path != d.path) {
                seen_paths.insert(got.path.clone());
                match want.get(&got.path) {
                    Some(w) if w.shown_by(&got) => {}
                    Some(w) => found.push(Drift::new(got.path.clone(), w.clone(), got)),
                    None => found.push(Drift::new(
                        got.path.clone(),
                        Image::absent(got.path.clone()),
                        got,
                    )),
                }
            }
            for (p, w) in &want {
                if !seen_paths.contains(p) {
                    found.push(Drift::new(p.clone(), w.clone(), Image::absent(p.clone())));
                }
            }
            // The directory's own mode is reported too when it changed.
            let own_mode = d.expected.mode.is_some() && d.expected.mode != d.actual.mode;
            if found.is_empty() || own_mode {
                found.push(d);
            }
            {
                found.sort_by(|a, b| a.path.cmp(&b.path));
                out.extend(found);
            }
        }
        out
    }

    /// The expected image of `img.path` is now `img`: it replaces what was expected at that
    /// path and, unless it only sets a mode, below it. A change below a directory makes any
    /// recorded digest of that directory stale: its kind and mode are kept, its digest
    /// dropped; something exists below it, so it is a directory.
    fn set(&mut self, img: Image) {
        // A mode-only image (a chmod, or its undo) changes the mode and nothing else: what is
        // below the path, and a directory's digest of its tree, stay as they were.
        // A symlink's image (a restored link) names no digest either, and is not one.
        let mode_only = img.digest.is_none()
            && img.kind != Some(FileKind::Absent)
            && img.kind != Some(FileKind::Symlink);
        if mode_only {
            if let Some(e) = self.images.get_mut(&img.path) {
                e.mode = img.mode;
                return;
            }
        }
        let under = format!("{}/", img.path);
        let below: Vec<String> = if mode_only {
            Vec::new()
        } else {
            self.images
                .range(under.clone()..)
                .take_while(|(k, _)| k.starts_with(&under))
                .map(|(k, _)| k.clone())
                .collect()
        };
        for k in below {
            self.images.remove(&k);
        }
        if !mode_only {
            let stale: Vec<String> = self
                .created
                .range(under.clone()..)
                .take_while(|c| c.starts_with(&under))
                .cloned()
                .collect();
            for c in stale {
                self.created.remove(&c);
            }
        }
        let gone: Vec<String> = self
            .trees
            .iter()
            .filter(|t| **t == img.path || t.starts_with(&under))
            .cloned()
            .collect();
        for t in gone {
            self.trees.remove(&t);
        }
        // A directory that comes with a tree (moved in, restored), not one made empty.
        let empty = crate::workspace::empty_dir_digest();
        if img.kind == Some(FileKind::Dir) && img.digest.as_deref().is_some_and(|d| d != empty) {
            let made: Vec<String> = self
                .created
                .iter()
                .filter(|c| **c == img.path || c.starts_with(&under))
                .cloned()
                .collect();
            for c in made {
                self.created.remove(&c);
            }
            self.trees.insert(img.path.clone());
        }
        let absent = img.kind == Some(FileKind::Absent);
        let mut at = img.path.as_str();
        while let Some((parent, _)) = at.rsplit_once('/') {
            if let Some(e) = self.images.get_mut(parent) {
                // Nothing below a path expected absent (or not a directory) says it exists
                // again unless something is there: an absent path below it changes nothing.
                if absent && e.kind != Some(FileKind::Dir) {
                    break;
                }
                e.digest = None;
                if e.kind != Some(FileKind::Dir) {
                    e.mode = None;
                    e.kind = Some(FileKind::Dir);
                }
            }
            at = parent;
        }
        self.images.insert(img.path.clone(), img);
    }

    /// What revl's witness says is at `path`: its own image, or absent when an ancestor is
    /// expected absent or not a directory; `None` when revl witnessed nothing there.
    pub fn image_of(&self, path: &str) -> Option<Image> {
        if let Some(i) = self.images.get(path) {
            return Some(i.clone());
        }
        let mut at = path;
        while let Some((parent, _)) = at.rsplit_once('/') {
            if let Some(i) = self.images.get(parent) {
                return match i.kind {
                    Some(FileKind::Dir) | None => None,
                    _ => Some(Image::absent(path)),
                };
            }
            at = parent;
        }
        None
    }

    /// Is `path` inside a directory revl expects with a digest of its whole tree?
    fn covered_by_tree(&self, path: &str) -> bool {
        let mut at = path;
        while let Some((parent, _)) = at.rsplit_once('/') {
            if self.trees.contains(parent) {
                return true;
            }
            if self.created.contains(parent) {
                return false;
            }
            if self.images.get(parent).is_some_and(|i| i.digest.is_some()) {
                return true;
            }
            at = parent;
        }
        false
    }

    /// Does revl claim every entry of directory `dir`? A directory revl made empty owns its
    /// entries, and so do the directories it made on the way inside it; a directory with an
    /// image of its own that revl did not make empty (moved in, or restored with its content)
    /// does not: its digest covers its tree.
    fn owns_entries_of(&self, dir: &str) -> bool {
        let mut at = dir;
        loop {
            if self.created.contains(at) {
                return true;
            }
            if self.images.contains_key(at) {
                return false;
            }
            match at.rsplit_once('/') {
                Some((parent, _)) => at = parent,
                None => return false,
            }
        }
    }

    /// The drift at `path` and below it: a witnessed path whose image differs (edited,
    /// replaced, chmodded, deleted, or present where revl left nothing), and, inside a
    /// directory revl created, every entry revl never witnessed (each file by itself).
    pub fn drift_at(&self, ws: &Workspace, path: &str) -> Result<Vec<Drift>> {
        let has_digest = |p: &str| self.images.get(p).is_some_and(|i| i.digest.is_some());
        let seen: BTreeMap<String, Image> = ws
            .observe_tree(path, &has_digest)?
            .into_iter()
            .map(|i| (i.path.clone(), i))
            .collect();
        let under = format!("{path}/");
        let mut out = Vec::new();
        let witnessed = self
            .images
            .range(path.to_string()..)
            .take_while(|(k, _)| k.as_str() == path || k.starts_with(&under));
        for (p, want) in witnessed {
            let got = seen
                .get(p)
                .cloned()
                .unwrap_or_else(|| Image::absent(p.clone()));
            if !want.shown_by(&got) {
                out.push(Drift::new(p.clone(), want.clone(), got));
            }
        }
        for (p, got) in &seen {
            if self.images.contains_key(p) {
                continue;
            }
            let is_dir = got.kind == Some(FileKind::Dir);
            // A directory revl created must still be one.
            if self.created.contains(p) {
                if !is_dir {
                    out.push(Drift::new(
                        p.clone(),
                        Image {
                            kind: Some(FileKind::Dir),
                            path: p.clone(),
                            ..Image::default()
                        },
                        got.clone(),
                    ));
                }
                continue;
            }
            // A directory on the way to a witnessed path is witnessed with it.
            let below = format!("{p}/");
            let leads_to_witnessed = self
                .images
                .range(below.clone()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(&below));
            if is_dir && leads_to_witnessed {
                continue;
            }
            // Inside a directory whose whole tree revl recorded (a digest): that directory's
            // own comparison covers it (and a rewind preserves every file of a drifted one).
            if self.covered_by_tree(p) {
                continue;
            }
            // Anything else unwitnessed is drift inside a directory revl created.
            let parent = p.rsplit_once('/').map_or("", |x| x.0);
            if !parent.is_empty() && self.owns_entries_of(parent) {
                out.push(Drift::new(p.clone(), Image::absent(p.clone()), got.clone()));
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// All drift of the workspace (`verify`): every witnessed path, and the entries of every
    /// directory revl created.
    pub fn drift(&self, ws: &Workspace) -> Result<Vec<Drift>> {
        let mut roots: BTreeSet<&str> = self.images.keys().map(String::as_str).collect();
        roots.extend(self.created.iter().map(String::as_str));
        // Each subtree once: skip a root inside another root.
        let mut out = Vec::new();
        let mut last: Option<&str> = None;
        for r in roots {
            if last.is_some_and(|l| r.starts_with(&format!("{l}/"))) {
                continue;
            }
            out.extend(self.drift_at(ws, r)?);
            last = Some(r);
        }
        Ok(out)
    }
}

/// The images of a directory listing's entries, below `dir`.
fn listing_images(dir: &str, items: Vec<crate::undo::TreeItem>) -> Vec<Image> {
    items
        .into_iter()
        .map(|it| {
            let digest = match it.kind {
                FileKind::Symlink => it
                    .target
                    .as_deref()
                    .map(|t| crate::util::blake3_hex(&crate::name::to_bytes(t))),
                FileKind::Dir => None,
                _ => it.digest,
            };
            Image {
                digest,
                kind: Some(it.kind),
                mode: it.mode,
                path: format!("{dir}/{}", it.path),
            }
        })
        .collect()
}

/// The post-images a file effect left, from its recorded detail.
pub(crate) fn after_images(s: &Step) -> Vec<Image> {
    EffectDetail::parse(s.detail())
        .map(|d| d.images())
        .unwrap_or_default()
}

/// The file restores a plan runs, in the order it runs them (its other inverses restore no
/// file).
fn restores_of<'a>(
    steps: &'a [Step],
    plan: &crate::unwind::Plan,
) -> impl Iterator<Item = &'a [RestoreEntry]> {
    plan.runs()
        .into_iter()
        .filter_map(|i| match steps.get(i as usize).and_then(Step::undo) {
            Some(Undo::Restore { entries }) => Some(entries.as_slice()),
            _ => None,
        })
}

/// The drift a rewind to `k` meets beyond its inverses' reach: once the plan's restores
/// ran, revl expects every witnessed path at its step-k image; each witnessed path outside
/// what those restores put back that differs from it (a hand edit of a path the rewound
/// tail never touched, a file made by hand inside a directory revl made before k). A fork
/// or step-back preserves and restores these too, or, asked to keep them, lists them.
/// Changes nothing.
pub fn beyond_plan(
    steps: &[Step],
    inherited: &[Image],
    plan: &crate::unwind::Plan,
    ws: &Workspace,
    blobs: &crate::blobs::BlobStore,
) -> Result<Vec<Drift>> {
    let exp = Expected::of_in_with(steps, blobs, inherited);
    beyond_plan_from(&exp, steps, plan, ws, blobs)
}

/// [`beyond_plan`] from `exp`, what revl expects before the plan runs (built once where
/// [`of_plan_from`] needs it too; copied only where the plan restores something).
pub fn beyond_plan_from(
    exp: &Expected,
    steps: &[Step],
    plan: &crate::unwind::Plan,
    ws: &Workspace,
    blobs: &crate::blobs::BlobStore,
) -> Result<Vec<Drift>> {
    let mut exp = std::borrow::Cow::Borrowed(exp);
    let mut roots: Vec<String> = Vec::new();
    for entries in restores_of(steps, plan) {
        roots.extend(entries.iter().map(|e| e.path().to_string()));
        exp.to_mut().undone(entries);
    }
    let under = |p: &str, root: &str| p == root || p.starts_with(&format!("{root}/"));
    Ok(exp
        .per_entry(exp.drift(ws)?, ws, blobs)
        .into_iter()
        .filter(|d| !roots.iter().any(|r| under(&d.path, r)))
        .collect())
}

/// The drift a plan's inverses would run over (from `exp`, what revl expects before the
/// plan runs), as a rewind would meet it (newest first,
/// each path once: a path an earlier inverse of the plan restores is as revl expects by the
/// time an older one reaches it). Changes nothing (`fork` lists it; its hash covers it).
pub fn of_plan_from(
    exp: &Expected,
    steps: &[Step],
    plan: &crate::unwind::Plan,
    ws: &Workspace,
    blobs: &crate::blobs::BlobStore,
) -> Result<Vec<Drift>> {
    let mut exp = std::borrow::Cow::Borrowed(exp);
    let mut checked: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for entries in restores_of(steps, plan) {
        for e in entries {
            let under = |p: &str, root: &str| p == root || p.starts_with(&format!("{root}/"));
            if checked.iter().any(|c| under(e.path(), c)) {
                continue;
            }
            let here = exp.drift_at(ws, e.path())?;
            for d in exp.per_entry(here, ws, blobs) {
                if !checked.iter().any(|c| under(&d.path, c)) {
                    out.push(d);
                }
            }
            checked.push(e.path().to_string());
        }
        exp.to_mut().undone(entries);
    }
    Ok(out)
}
