//! The `revl` binary: the command line of [`revl::main_with`].
#![forbid(unsafe_code)]

use std::process::ExitCode;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    ExitCode::from(revl::main_with(std::env::args_os().collect()))
}
