//! The wire: every document the CLI prints, the MCP server returns and the Python package
//! wraps, as typed values (docs/architecture.md, "The wire"). Front ends serialise these and
//! decide nothing; `docs/schema/wire.json` is the JSON schema derived from them (a test
//! keeps it in step, another checks the Python result classes and exception codes against
//! it).
//!
//! - [`report`]: the verbs' results (`status`, `timeline`, `fork`, `step-back`, `call`, …).
//! - [`entry`]: the entries those results list (rewound, emission, would-cross,
//!   unrestored), a tool's failure, the error document.
//! - [`Refusal`](crate::api::Refusal): the two refusals that answer with their own document,
//!   worded once.
//!
//! What stays `serde_json::Value`, and why: it is JSON revl records but does not define —
//! a tool call's `args` (the caller's), a tool's `witness` (the tool's), a declared
//! [`entry::Scope`] (the manifest's; the scope gate reads it through the typed
//! [`crate::step::ScopeClaim`]), a step's `detail`, `undo` and `repr` exactly as recorded,
//! an exec's recorded `connections`, a `note-model` `llm` object (the caller's metadata),
//! and the `preserved` of a fork-branch record (read back from the WAL as written). The
//! schema shows these as "any JSON".

pub mod entry;
pub mod report;
pub mod schema;

pub use entry::*;
