//! revl-core: the model and its rules. No CLI, no async, no network server.
//!
//! - [`wal`]: the crash-safe write-ahead log (JSON Lines + CRC-32C), the source of truth.
//! - [`state`]: session state as a pure function of the WAL.
//! - [`step`] and [`classify`]: the seven step kinds, the scope gate, and THE classifier
//!   that every rewind, report and offline reader uses.
//! - [`unwind`]: THE plan of every rewind (fork, step-back, abort, recover, repair): what
//!   runs, what is owed, what has an unknown outcome.
//! - [`wire`]: every document the CLI, MCP server and Python package emit, as typed values
//!   (its [`report`] holds the verbs' results); the JSON schema derives from it.
//! - [`undo`]: typed inverse descriptors, restore entries and file images.
//! - [`workspace`]: path confinement and witnessed file effects with exact inverses.
//! - [`session`]: attach/repair and the verbs; [`store`]: where sessions live.
// No unsafe code: every raw system call revl makes is in the `revl-sandbox` crate
// (docs/security.md, "Where the unsafe code is").
#![forbid(unsafe_code)]

pub mod agent;
pub mod api;
pub mod blobs;
pub mod changeset;
pub mod classify;
pub mod clone;
pub mod doctor;
pub mod drift;
pub mod egress;
pub mod error;
pub mod failpoint;
pub mod faults;
pub mod gc;
pub mod index;
pub mod layers;
pub mod lineage;
pub mod log;
pub mod name;
pub mod pending;
pub mod proc;
pub mod recover;
pub mod ring;
#[cfg(target_os = "linux")]
pub mod sandbox;
pub mod saved;
pub mod session;
pub mod state;
pub mod statindex;
pub mod step;
pub mod steptext;
pub mod storage;
pub mod store;
pub mod tools;
pub mod undo;
pub mod unwind;
pub mod util;
pub mod wal;
pub mod wire;
pub mod workspace;

pub use wire::report;

pub use error::{Code, Error, Remedy, Result};
pub use failpoint::Failpoints;
pub use session::{DriftPolicy, ExecLimits, ExecOptions, Session, StepBackMode, GUARANTEE};
pub use store::Store;
pub use workspace::FileOp;
