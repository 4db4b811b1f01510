//! revl-core's integration tests, one binary: the library API against its contracts.

mod agreement;
mod exec_args;
mod faults;
mod large_wal;
mod manifest_source;
mod ring;
