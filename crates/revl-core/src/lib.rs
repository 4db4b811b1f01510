//! revl-core: the model and its rules. No CLI, no async, no network server.
//!
//! - [`wal`]: the crash-safe write-ahead log (JSON Lines + CRC-32C), the source of truth.
//! - [`state`]: session state as a pure function of the WAL.
//! - [`step`] and [`classify`]: the seven step kinds, the scope gate, and THE classifier
//!   that every rewind, report and offline reader uses.
//! - [`workspace`]: path confinement and witnessed file effects with exact inverses.
//! - [`session`]: attach/repair and the verbs; [`store`]: where sessions live.
#![forbid(unsafe_code)]

pub mod blobs;
pub mod classify;
pub mod error;
pub mod failpoint;
pub mod fork;
mod note_model_placeholder;
pub mod outbound;
pub mod proc;
pub mod recover;
pub mod session;
pub mod state;
pub mod step;
pub mod store;
pub mod tools;
pub mod util;
pub mod wal;
pub mod workspace;

pub use error::{Code, Error, Result};
pub use failpoint::Failpoints;
pub use session::{Session, StepBackMode, GUARANTEE};
pub use store::Store;
pub use workspace::FileOp;
