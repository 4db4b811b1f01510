//! [`LazyJson`]: a JSON value kept as its compact text until something looks inside.
//!
//! A step's `detail`, `scope`, `undo` and `undoScope` are read from the WAL millions of
//! times by the offline readers and attach, but most are only carried through: classified
//! by kind, or copied verbatim into a report. Holding each as one string (instead of a tree
//! of maps and strings) makes a 1,000,000-record WAL parse several times faster and in a
//! fraction of the memory; the tree is built on first use and cached.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;
use std::sync::OnceLock;

pub struct LazyJson {
    /// Always one well-formed JSON value without surrounding whitespace.
    raw: Box<str>,
    /// Boxed so that a `LazyJson` stays two words and a flag: most are never parsed.
    tree: OnceLock<Box<Value>>,
}

impl LazyJson {
    /// The compact JSON text, exactly as read (or as `serde_json` wrote it).
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// From text already checked to be one well-formed JSON value, without surrounding
    /// whitespace (by serde, or by the step-line decoder's validator).
    pub(crate) fn from_checked(raw: &str) -> Self {
        LazyJson {
            raw: raw.into(),
            tree: OnceLock::new(),
        }
    }

    /// The parsed value (built on first use).
    pub fn value(&self) -> &Value {
        // The text came from a JSON parser or serializer, so it always parses.
        self.tree
            .get_or_init(|| Box::new(serde_json::from_str(&self.raw).unwrap_or(Value::Null)))
    }

    /// The parsed value, by value.
    pub fn into_value(self) -> Value {
        match self.tree.into_inner() {
            Some(v) => *v,
            None => serde_json::from_str(&self.raw).unwrap_or(Value::Null),
        }
    }
}

impl From<Value> for LazyJson {
    fn from(v: Value) -> Self {
        let raw = serde_json::value::to_raw_value(&v).expect("a Value always serialises");
        LazyJson {
            raw: raw.into(),
            tree: OnceLock::from(Box::new(v)),
        }
    }
}

impl std::ops::Deref for LazyJson {
    type Target = Value;
    fn deref(&self) -> &Value {
        self.value()
    }
}

impl Clone for LazyJson {
    fn clone(&self) -> Self {
        LazyJson {
            raw: self.raw.clone(),
            tree: self.tree.clone(),
        }
    }
}

impl PartialEq for LazyJson {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw || self.value() == other.value()
    }
}

impl std::fmt::Debug for LazyJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for LazyJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Written verbatim (the text is one well-formed JSON value by construction).
        RawValue::from_string(self.raw.to_string())
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

impl<'de> Deserialize<'de> for LazyJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(LazyJson {
            raw: Box::<RawValue>::deserialize(d)?.into(),
            tree: OnceLock::new(),
        })
    }
}
