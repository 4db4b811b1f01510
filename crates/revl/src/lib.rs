//! The `revl` command line as a library: the `revl` binary and the Python package's `revl`
//! command run this same code (same flags, same documents); and support code shared with the
//! tests.
#![forbid(unsafe_code)]

mod agents;
mod cli;
mod demo;
mod render;
mod resume;
mod view;

pub mod sink;

pub use cli::main_with;
