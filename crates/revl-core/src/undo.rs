//! Inverses and file images, typed.
//!
//! An [`Undo`] is the durable descriptor of how to undo a step (docs/reference.md,
//! "Concepts"): revl's own file restore, a provision's withdrawal, or a manifest effect's
//! undo tool. A file restore is a list of [`RestoreEntry`]s ("put this path back to this
//! state"), applied in order. An [`Image`] is what a path looks like (kind, digest, mode):
//! the post-image a file effect intends and records, and what `verify` observes. A
//! directory's content is a listing of [`TreeItem`]s kept in the blob store.
//!
//! On disk these are JSON objects with sorted keys (the WAL has always been written so):
//! [`sorted`] writes them that way, whatever the declaration order of the fields.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

/// Serialise through a `Value`, so object keys come out sorted (serde_json's map is a
/// `BTreeMap`): the bytes revl has always written for these descriptors.
pub fn sorted<T: Serialize, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    let v = serde_json::to_value(v).map_err(serde::ser::Error::custom)?;
    // Written as text made once (its long base64 strings copied, not escaped byte by byte).
    serde_json::value::RawValue::from_string(crate::util::json_text(&v))
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

/// [`sorted`] for an optional member.
pub fn sorted_opt<T: Serialize, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => sorted(v, s),
        None => s.serialize_none(),
    }
}

/// How a step is undone. `#[serde(tag = "type")]`: `{"type": "restore", "entries": [...]}`,
/// `{"type": "withdraw", "key", "previous"}`, `{"type": "tool", "tool"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Undo {
    /// revl's own file restore: every entry put back, in order. Idempotent.
    Restore { entries: Vec<RestoreEntry> },
    /// A provision's withdrawal (the previous value comes back).
    Withdraw {
        #[serde(default)]
        key: String,
        #[serde(default)]
        previous: Option<String>,
    },
    /// A manifest effect's undo tool (of class `inverse`).
    Tool {
        #[serde(default)]
        tool: String,
    },
    /// A descriptor this version does not understand (a newer revl wrote it, or the WAL was
    /// edited): it exists, so the step has an inverse, but running it fails.
    #[serde(skip)]
    Unknown,
}

impl Undo {
    /// Parse a recorded descriptor; one this version does not understand is
    /// [`Undo::Unknown`].
    pub fn parse(raw: &str) -> Undo {
        serde_json::from_str(raw).unwrap_or(Undo::Unknown)
    }

    /// The restore entries (empty for any other descriptor).
    pub fn entries(&self) -> &[RestoreEntry] {
        match self {
            Undo::Restore { entries } => entries,
            _ => &[],
        }
    }

    pub fn is_restore(&self) -> bool {
        matches!(self, Undo::Restore { .. })
    }

    /// The descriptor a file effect's `step` record carries: its intent's, without the
    /// inline preimage contents (the intent just before it holds them; see
    /// [`Undo::hydrate`]). Each entry keeps its path, kind, mode and digest.
    pub fn slim(&self) -> Undo {
        let mut u = self.clone();
        if let Undo::Restore { entries } = &mut u {
            for e in entries {
                if let RestoreEntry::File { content, .. } = e {
                    *content = None;
                }
            }
        }
        u
    }

    /// Give a step's slim restore descriptor back the inline contents its intent holds. An
    /// entry for a file with neither `content` nor `blob` takes the `content` of the
    /// intent's entry at the same position, which must name the same path and digest.
    pub fn hydrate(&mut self, intent: Option<&mut Undo>) -> Result<(), String> {
        let Undo::Restore { entries } = self else {
            return Ok(());
        };
        let mut from = match intent {
            Some(Undo::Restore { entries }) => Some(entries),
            _ => None,
        };
        for (j, e) in entries.iter_mut().enumerate() {
            let RestoreEntry::File {
                path,
                digest,
                content: content @ None,
                blob: None,
                ..
            } = e
            else {
                continue;
            };
            let source = from
                .as_mut()
                .and_then(|f| f.get_mut(j))
                .and_then(|i| match i {
                    RestoreEntry::File {
                        path: p,
                        digest: d,
                        content: c,
                        ..
                    } if p == path && d == digest => c.take(),
                    _ => None,
                });
            match source {
                Some(c) => *content = Some(c),
                None => {
                    return Err(format!(
                        "its restore entry for {path:?} has no content, and its intent holds none"
                    ))
                }
            }
        }
        Ok(())
    }
}

/// One path's state to put back (`#[serde(tag = "kind")]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum RestoreEntry {
    /// The path did not exist: remove whatever is there.
    Absent {
        path: String,
    },
    /// Only the mode changed (`chmod`): put the mode back.
    Mode {
        path: String,
        mode: String,
    },
    /// A regular file: its bytes inline (base64, at most 4 KiB) or in a blob.
    File {
        path: String,
        mode: String,
        digest: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blob: Option<String>,
    },
    Symlink {
        path: String,
        target: String,
    },
    /// A directory tree: its listing ([`TreeItem`]s, JCS) is the blob `tree`.
    Dir {
        path: String,
        mode: String,
        tree: String,
        digest: String,
    },
}

impl RestoreEntry {
    pub fn path(&self) -> &str {
        match self {
            RestoreEntry::Absent { path }
            | RestoreEntry::Mode { path, .. }
            | RestoreEntry::File { path, .. }
            | RestoreEntry::Symlink { path, .. }
            | RestoreEntry::Dir { path, .. } => path,
        }
    }

    /// What the path looks like once this entry is restored (for `verify`).
    pub fn image(&self) -> Image {
        let path = self.path().to_string();
        match self {
            RestoreEntry::Absent { .. } => Image::absent(path),
            RestoreEntry::Mode { mode, .. } => Image {
                mode: Some(mode.clone()),
                path,
                ..Image::default()
            },
            RestoreEntry::File { mode, digest, .. } | RestoreEntry::Dir { mode, digest, .. } => {
                Image {
                    digest: Some(digest.clone()),
                    kind: Some(if matches!(self, RestoreEntry::Dir { .. }) {
                        FileKind::Dir
                    } else {
                        FileKind::File
                    }),
                    mode: Some(mode.clone()),
                    path,
                }
            }
            RestoreEntry::Symlink { .. } => Image {
                kind: Some(FileKind::Symlink),
                path,
                ..Image::default()
            },
        }
    }
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Absent,
    /// A FIFO, socket or device: revl witnesses none of them.
    Special,
}

impl FileKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::Absent => "absent",
            FileKind::Special => "special",
        }
    }
}

/// What a path looks like: `{path, kind, digest?, mode?}` (a directory's digest covers its
/// whole tree, a symlink's its target). An expected image names only what it checks; an
/// observed one everything there is. In a step's `detail.after` the path is left out
/// (`detail.path` names it): an empty `path` is not written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Image {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<FileKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
}

impl Image {
    pub fn absent(path: impl Into<String>) -> Image {
        Image {
            kind: Some(FileKind::Absent),
            path: path.into(),
            ..Image::default()
        }
    }

    /// Does `seen` show this (expected) image: every member this one names is equal?
    pub fn shown_by(&self, seen: &Image) -> bool {
        fn same<T: PartialEq>(want: &Option<T>, got: &Option<T>) -> bool {
            want.is_none() || want == got
        }
        same(&self.digest, &seen.digest)
            && same(&self.kind, &seen.kind)
            && same(&self.mode, &seen.mode)
            && (self.path.is_empty() || self.path == seen.path)
    }

    /// The same image at another path.
    pub fn at(&self, path: impl Into<String>) -> Image {
        Image {
            path: path.into(),
            ..self.clone()
        }
    }
}

/// A file effect's `detail`: `{path[, to], after}` (after = the primary post-image).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDetail {
    pub after: Image,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The agent call that made this edit with its own tool (docs/agents.md); revl then
    /// recorded it with the preimage taken before the tool ran. (Boxed: a record stays
    /// small.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Box<crate::agent::Origin>>,
}

impl FileDetail {
    /// The post-images this effect left: for a rename, the source gone and the target.
    pub fn images(&self) -> Vec<Image> {
        match &self.to {
            Some(to) => vec![Image::absent(self.path.clone()), self.after.at(to.clone())],
            None => vec![self.after.at(self.path.clone())],
        }
    }
}

/// One entry of an exec step's change set: `{path, change, after?, why?}`
/// (docs/wal-format.md, "Step kinds, details and inverses").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecChange {
    /// The post-image (without its path); absent for `ignored`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Image>,
    /// `created`, `modified`, `deleted`, `mode`, `symlink`, `dir-created`, `dir-deleted`,
    /// `ignored`.
    pub change: String,
    pub path: String,
    /// Why an `ignored` entry was not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A sandboxed exec step's `detail`: `{argv, cwd, exitCode, signal?, timedOut, changes}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecDetail {
    pub argv: Vec<String>,
    pub changes: Vec<ExecChange>,
    /// The working directory, relative to the workspace ("" = its root).
    pub cwd: String,
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Connections the egress proxy refused (docs/user-guide.md §8), when the exec asked for the
    /// network and forwarded nothing (otherwise its emission step lists them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied: Vec<crate::egress::Denied>,
    /// The agent call that ran the command (docs/agents.md), when an agent's hook did.
    /// (Boxed: a record stays small.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Box<crate::agent::Origin>>,
}

impl ExecDetail {
    /// The post-images the change set left (ignored entries left none).
    pub fn images(&self) -> Vec<Image> {
        self.changes
            .iter()
            .filter_map(|c| c.after.as_ref().map(|a| a.at(c.path.clone())))
            .collect()
    }
}

/// The detail of a witnessed effect: a built-in file effect's, or a sandboxed exec's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EffectDetail {
    Exec(ExecDetail),
    File(FileDetail),
}

impl EffectDetail {
    /// Read a step's detail; `None` when it is neither kind.
    pub fn parse(v: &Value) -> Option<EffectDetail> {
        serde_json::from_value(v.clone()).ok()
    }

    pub fn images(&self) -> Vec<Image> {
        match self {
            EffectDetail::Exec(d) => d.images(),
            EffectDetail::File(d) => d.images(),
        }
    }
}

/// A witnessed effect intent's `after`: the intended post-images (repair rolls the change
/// forward when the workspace shows all of them) and the detail its step will carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentAfter {
    pub detail: EffectDetail,
    pub images: Vec<Image>,
    /// Post-image bytes of small files (digest -> base64), so that `read --at` returns what
    /// a step left even after the file was changed outside revl (absent in older WALs).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub kept: std::collections::BTreeMap<String, String>,
}

/// One entry of a directory listing (the tree blob of a [`RestoreEntry::Dir`]), with short
/// keys: `p` path below the directory, `k` kind, `m` mode, `d` digest, `c` inline content
/// (base64), `t` symlink target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeItem {
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(rename = "k")]
    pub kind: FileKind,
    #[serde(rename = "m", default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(rename = "p")]
    pub path: String,
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// A value as the JSON revl writes (keys sorted).
pub fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("undo descriptors and images serialise")
}
