//! revl's integration tests, one binary (it links once): every module drives the public
//! surface (the `revl` binary, the MCP protocol, the library API) through the one harness in
//! `common` (runs of the binary in a clean environment, tree snapshots, WAL checks, test
//! manifests).

mod common;

mod agents;
mod agents_real;

mod back_at_k;
mod caller_holds;
mod checkpoints;
mod concurrency;
mod demo;
mod drift;
mod egress;
mod escaped_output;
mod exec;
mod exec_output;
mod fleet;
mod fork;
mod foundation;
mod fuzz;
mod guide;
mod hardening;
mod incremental;
mod limits;
mod lineage;
mod mcp_authority;
mod mcp_clients;
mod outbound;
mod parallel;
mod power_cut;
mod promises;
mod prop_stepback;
mod python;
mod redo;
mod relocate;
mod resource;
mod rough_edges;
mod security;
mod seeing;
mod small_promises;
mod soak;
mod wal_policy;
mod wire_schema;
