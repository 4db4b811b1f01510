//! Support code shared by the `revl` binary and its tests.

pub mod sink;
