//! Modules of the `tessera-bench` load generator (see src/bin/tessera-bench.rs).

pub mod args;
pub mod report;
pub mod resp;
pub mod rng;
pub mod worker;
pub mod zipf;
