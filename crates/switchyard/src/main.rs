//! The `switchyard` binary: parses the command line and hands over to `cli`.

mod cli;
mod demo;

use clap::Parser;

/// mimalloc instead of the system allocator: the request path allocates many small,
/// short-lived objects across threads, where glibc malloc showed up as ~15% of the
/// gateway's CPU in profiles.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let args = cli::Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(cli::dispatch(args))
}
