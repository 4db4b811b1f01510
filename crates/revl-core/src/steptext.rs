//! [`StepText`]: a step's text members in one allocation.
//!
//! A step carries a label, a site, a timestamp and up to four JSON members (`detail`,
//! `scope`, `undoScope`, `undo`). The offline readers and attach hold millions of steps,
//! most of which are only classified by kind or copied into a report, so each step keeps
//! all of them as one string with offsets (one allocation instead of seven, and a much
//! smaller step). A JSON member is kept as its compact text, exactly as recorded, and
//! parsed on first use (then cached).

use crate::undo::Undo;
use serde_json::Value;
use std::sync::OnceLock;

/// The members, in the order they sit in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Label = 0,
    Site,
    Ts,
    Detail,
    Scope,
    UndoScope,
    Undo,
}

const PARTS: usize = 7;
/// The members' names in a WAL record, in [`Part`] order.
const NAMES: [&str; PARTS] = [
    "label",
    "site",
    "ts",
    "detail",
    "scope",
    "undoScope",
    "undo",
];

impl Part {
    /// The member's name in a WAL record.
    pub(crate) fn name(self) -> &'static str {
        NAMES[self as usize]
    }
}
/// The JSON members.
const JSON: [Part; 4] = [Part::Detail, Part::Scope, Part::UndoScope, Part::Undo];

fn tree_slot(p: Part) -> usize {
    p as usize - Part::Detail as usize
}

/// The members as borrowed text, for building a [`StepText`]. The JSON members must each
/// be one well-formed JSON value (checked by a parser, or written by a serializer).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Parts<'a>(pub [Option<&'a str>; PARTS]);

impl<'a> Parts<'a> {
    pub(crate) fn set(&mut self, p: Part, v: Option<&'a str>) {
        self.0[p as usize] = v;
    }
}

pub struct StepText {
    text: Box<str>,
    /// Where each member ends in `text` (it starts where the previous one ends).
    ends: [u32; PARTS],
    /// Which members are present (label, site and detail always are).
    present: u8,
    /// The parsed `detail`, `scope` and `undoScope`, built on first use.
    trees: [OnceLock<Box<Value>>; 3],
    /// The parsed `undo`, built on first use.
    undo: OnceLock<Box<Undo>>,
}

impl StepText {
    /// Pack the members. `None` if the text would not fit 32-bit offsets (over 4 GiB).
    pub(crate) fn pack(parts: Parts<'_>) -> Option<StepText> {
        let len: usize = parts.0.iter().flatten().map(|s| s.len()).sum();
        u32::try_from(len).ok()?;
        let mut text = String::with_capacity(len);
        let mut ends = [0u32; PARTS];
        let mut present = 0u8;
        for (i, p) in parts.0.iter().enumerate() {
            if let Some(s) = p {
                text.push_str(s);
                present |= 1 << i;
            }
            ends[i] = text.len() as u32;
        }
        Some(StepText {
            text: text.into_boxed_str(),
            ends,
            present,
            trees: Default::default(),
            undo: OnceLock::new(),
        })
    }

    /// The members as borrowed text (to rebuild with one changed).
    pub(crate) fn parts(&self) -> Parts<'_> {
        let mut p = Parts::default();
        for (i, slot) in p.0.iter_mut().enumerate() {
            *slot = self.get_index(i);
        }
        p
    }

    fn get_index(&self, i: usize) -> Option<&str> {
        if self.present & (1 << i) == 0 {
            return None;
        }
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        Some(&self.text[start..self.ends[i] as usize])
    }

    /// A member's text (a JSON member's compact JSON).
    pub(crate) fn get(&self, p: Part) -> Option<&str> {
        self.get_index(p as usize)
    }

    /// A JSON member, parsed (and cached); `undo` is parsed typed, see [`StepText::undo`].
    pub(crate) fn json(&self, p: Part) -> Option<&Value> {
        if p == Part::Undo {
            return None;
        }
        let raw = self.get(p)?;
        // The text is well-formed JSON by construction, so it always parses.
        Some(
            self.trees[tree_slot(p)]
                .get_or_init(|| Box::new(serde_json::from_str(raw).unwrap_or(Value::Null))),
        )
    }

    pub fn label(&self) -> &str {
        self.get(Part::Label).unwrap_or_default()
    }

    pub fn site(&self) -> &str {
        self.get(Part::Site).unwrap_or_default()
    }

    pub fn ts(&self) -> Option<&str> {
        self.get(Part::Ts)
    }

    /// `detail`, parsed.
    pub fn detail(&self) -> &Value {
        self.json(Part::Detail).unwrap_or(&Value::Null)
    }

    /// `detail` as recorded (compact JSON).
    pub fn detail_raw(&self) -> &str {
        self.get(Part::Detail).unwrap_or("null")
    }

    /// The declared scope, exactly as recorded; `None` = none declared (crossing).
    pub fn scope(&self) -> Option<&Value> {
        self.json(Part::Scope)
    }

    /// A manifest effect's undo tool scope (docs/reference.md, "The scope gate": both must
    /// pass the gate).
    pub fn undo_scope(&self) -> Option<&Value> {
        self.json(Part::UndoScope)
    }

    /// The inverse descriptor, parsed (and cached); `None` = the step has none.
    pub fn undo(&self) -> Option<&Undo> {
        let raw = self.get(Part::Undo)?;
        Some(self.undo.get_or_init(|| Box::new(Undo::parse(raw))))
    }

    /// `undo` as recorded (compact JSON).
    pub fn undo_raw(&self) -> Option<&str> {
        self.get(Part::Undo)
    }
}

impl Clone for StepText {
    fn clone(&self) -> Self {
        StepText {
            text: self.text.clone(),
            ends: self.ends,
            present: self.present,
            trees: self.trees.clone(),
            undo: self.undo.clone(),
        }
    }
}

/// Equal when every member is: text members exactly, JSON members as text or as values.
impl PartialEq for StepText {
    fn eq(&self, other: &Self) -> bool {
        if self.present != other.present {
            return false;
        }
        if self.text == other.text && self.ends == other.ends {
            return true;
        }
        (0..PARTS).all(|i| {
            let (a, b) = (self.get_index(i), other.get_index(i));
            a == b
                || (i == Part::Undo as usize && self.undo() == other.undo())
                || JSON
                    .iter()
                    .any(|&p| p as usize == i && p != Part::Undo && self.json(p) == other.json(p))
        })
    }
}

impl std::fmt::Debug for StepText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (i, name) in NAMES.iter().enumerate() {
            match self.get_index(i) {
                // JSON members as recorded; text members quoted.
                Some(s) if i >= Part::Detail as usize => m.entry(name, &format_args!("{s}")),
                Some(s) => m.entry(name, &s),
                None => continue,
            };
        }
        m.finish()
    }
}
