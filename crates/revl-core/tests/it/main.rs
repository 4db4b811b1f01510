//! revl-core's integration tests, one binary: the library API against its contracts.

mod agreement;
mod large_wal;
