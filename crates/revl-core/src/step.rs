//! Steps, the seven kinds, and the scope gate (docs/reference.md, "Step kinds and buckets",
//! "The scope gate").

use crate::steptext::StepText;
use serde_json::{json, Value};

/// The seven step kinds. A kind a future version adds is kept by name as `Other` and, like
/// `opaque`, can never be restored.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StepKind {
    Effect,
    Provision,
    Emission,
    Compensation,
    Boundary,
    Hinge,
    Opaque,
    Other(String),
}

impl StepKind {
    pub fn parse(s: &str) -> StepKind {
        match s {
            "effect" => StepKind::Effect,
            "provision" => StepKind::Provision,
            "emission" => StepKind::Emission,
            "compensation" => StepKind::Compensation,
            "boundary" => StepKind::Boundary,
            "hinge" => StepKind::Hinge,
            "opaque" => StepKind::Opaque,
            other => StepKind::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            StepKind::Effect => "effect",
            StepKind::Provision => "provision",
            StepKind::Emission => "emission",
            StepKind::Compensation => "compensation",
            StepKind::Boundary => "boundary",
            StepKind::Hinge => "hinge",
            StepKind::Opaque => "opaque",
            StepKind::Other(s) => s,
        }
    }
}

impl From<&str> for StepKind {
    fn from(s: &str) -> Self {
        StepKind::parse(s)
    }
}

impl serde::Serialize for StepKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for StepKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = StepKind;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a step kind")
            }
            // Parsed from the borrowed text: the seven known kinds allocate nothing.
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<StepKind, E> {
                Ok(StepKind::parse(s))
            }
        }
        d.deserialize_str(V)
    }
}

/// How an unwind ran a step's inverse (`undoneBy`).
pub const BY_STEP_BACK: &str = "step_back";
pub const BY_FORK: &str = "fork";
pub const BY_ABORT: &str = "abort";
pub const BY_RECOVER: &str = "recover";

/// One timeline step, as replayed from the WAL.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub index: u64,
    pub kind: StepKind,
    /// Label, site, ts, and the JSON members (detail, scope, undoScope, undo): see the
    /// accessors below.
    pub text: StepText,
    pub undo_idempotent: Option<bool>,
    pub compensation: Option<u64>,
    pub undone: bool,
    pub undone_by: Option<String>,
    /// The head when the inverse ran (orders undos among later steps, for `verify`).
    pub undone_at: Option<u64>,
    /// On an emission stepped over by an unwind.
    pub crossed: bool,
    /// A `replay-fence` was written for this step's inverse and no `undone` followed.
    pub fenced: bool,
}

impl Step {
    /// A declared compensation that has not run: recorded with its emission (so that a
    /// rewind knows what would undo it), but nothing happened. The timeline shows it as
    /// armed, and it is not counted as a step that happened (`head`, `branch` counts).
    pub fn armed(&self) -> bool {
        self.kind == StepKind::Compensation && !self.undone
    }

    pub fn label(&self) -> &str {
        self.text.label()
    }

    pub fn site(&self) -> &str {
        self.text.site()
    }

    /// `detail`, parsed (on first use).
    pub fn detail(&self) -> &Value {
        self.text.detail()
    }

    /// The declared scope, exactly as recorded; `None` = none declared (crossing).
    pub fn scope(&self) -> Option<&Value> {
        self.text.scope()
    }

    /// A manifest effect's undo tool scope (docs/reference.md, "The scope gate": both must
    /// pass the gate).
    pub fn undo_scope(&self) -> Option<&Value> {
        self.text.undo_scope()
    }

    /// How this step is undone; `None` = it has no inverse.
    pub fn undo(&self) -> Option<&crate::undo::Undo> {
        self.text.undo()
    }

    /// The timeline JSON (docs/reference.md, "Step kinds and buckets"; `timeline` returns these).
    pub fn to_json(&self) -> Value {
        crate::report::to_json(&crate::report::StepView::of(self))
    }

    /// True when this step's inverse is revl's own file restore (built-in file effects).
    pub fn has_builtin_undo(&self) -> bool {
        self.undo().is_some_and(crate::undo::Undo::is_restore)
    }

    pub fn scope_json(&self) -> Value {
        self.scope().cloned().unwrap_or(Value::Null)
    }
}

/// The scope gate (docs/reference.md, "The scope gate"), first match wins:
/// 1. scope absent → crossing (an unproven input is never assumed safe);
/// 2. `"confined": true` or `"sandbox": true` → host-confined;
/// 3. `{"caps": []}` → host-confined (declared nothing);
/// 4. `caps` present and every token is exactly `fs` → host-confined;
/// 5. anything else (`net`, `FS`, unknown words, `{}`, no `caps`) → crossing.
pub fn host_confined(scope: Option<&Value>) -> bool {
    ScopeClaim::of(scope).host_confined()
}

/// What a declared scope claims, as the scope gate reads it: the JSON is read once, here;
/// the gate decides on this value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeClaim {
    /// No scope declared (or not a JSON object).
    Absent,
    /// `"confined": true`.
    Confined,
    /// `"sandbox": true`.
    Sandbox,
    /// `caps`, token by token.
    Caps(Vec<Cap>),
    /// An object with none of the above (`{}`, `caps` not a list).
    Nothing,
}

/// One capability token of a declared scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cap {
    /// Exactly `fs`: the host's files, under revl's witness.
    Fs,
    /// Anything else (`net`, `FS`, an unknown word, a token that is not a string).
    Other(String),
}

impl ScopeClaim {
    pub fn of(scope: Option<&Value>) -> Self {
        let Some(Value::Object(m)) = scope else {
            return ScopeClaim::Absent;
        };
        let yes = |k: &str| m.get(k) == Some(&Value::Bool(true));
        if yes("confined") {
            return ScopeClaim::Confined;
        }
        if yes("sandbox") {
            return ScopeClaim::Sandbox;
        }
        match m.get("caps") {
            Some(Value::Array(caps)) => ScopeClaim::Caps(
                caps.iter()
                    .map(|t| match t.as_str() {
                        Some("fs") => Cap::Fs,
                        Some(other) => Cap::Other(other.to_string()),
                        None => Cap::Other(t.to_string()),
                    })
                    .collect(),
            ),
            _ => ScopeClaim::Nothing,
        }
    }

    /// The gate's verdict (rules 1-5 above).
    pub fn host_confined(&self) -> bool {
        match self {
            ScopeClaim::Absent | ScopeClaim::Nothing => false,
            ScopeClaim::Confined | ScopeClaim::Sandbox => true,
            // Rules 3 and 4: an empty list passes `all` vacuously.
            ScopeClaim::Caps(caps) => caps.iter().all(|c| *c == Cap::Fs),
        }
    }
}

/// The scope every built-in file effect records.
pub fn fs_scope() -> Value {
    json!({"caps": ["fs"]})
}

/// The scope of a sandboxed exec step (docs/reference.md, "The scope gate"): `fs`,
/// confinement proven by the sandbox.
pub fn sandbox_scope() -> Value {
    json!({"caps": ["fs"], "sandbox": true})
}

/// On the wire a position is an integer, `-1` or a step index.
impl schemars::JsonSchema for Pos {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Pos".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "integer", "minimum": -1})
    }
}

/// A position on a timeline (docs/reference.md, "Concepts"): before every step, or after
/// step k ran. On the wire (WAL records, reports, arguments) it is an integer: `-1` for
/// [`Pos::Start`], else `k`. The variants are ordered as the timeline is: `Start < After(0)
/// < After(1) …`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pos {
    /// Before every step (`-1`).
    #[default]
    Start,
    /// After step k ran.
    After(u64),
}

impl Pos {
    /// `-1` → [`Pos::Start`], `k ≥ 0` → [`Pos::After`]; anything else is not a position.
    pub fn from_i64(k: i64) -> Option<Pos> {
        match k {
            -1 => Some(Pos::Start),
            k if k >= 0 => Some(Pos::After(k as u64)),
            _ => None,
        }
    }

    /// The wire form: `-1` or `k`.
    pub fn to_i64(self) -> i64 {
        match self {
            Pos::Start => -1,
            Pos::After(k) => k as i64,
        }
    }

    /// The index of the first step above this position (the newest-first tail ends there).
    pub fn first_above(self) -> u64 {
        match self {
            Pos::Start => 0,
            Pos::After(k) => k + 1,
        }
    }

    /// Is step `i` at or before this position (did it run by then)?
    pub fn covers(self, i: u64) -> bool {
        i < self.first_above()
    }

    /// The step this position is after, if any.
    pub fn step(self) -> Option<u64> {
        match self {
            Pos::Start => None,
            Pos::After(k) => Some(k),
        }
    }
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_i64())
    }
}

impl serde::Serialize for Pos {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(self.to_i64())
    }
}

impl<'de> serde::Deserialize<'de> for Pos {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let k = i64::deserialize(d)?;
        Pos::from_i64(k).ok_or_else(|| {
            serde::de::Error::custom(format!("{k} is not a position (-1 or a step index)"))
        })
    }
}

impl From<Pos> for serde_json::Value {
    fn from(p: Pos) -> Self {
        p.to_i64().into()
    }
}
