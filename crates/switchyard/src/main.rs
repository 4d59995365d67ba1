//! The `switchyard` binary: parses the command line and hands over to `cli`.

mod cli;
mod connections;
mod demo;

use clap::Parser;

/// mimalloc instead of the system allocator: the request path allocates many small,
/// short-lived objects across threads, where glibc malloc showed up as ~15% of the
/// gateway's CPU in profiles.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let args = cli::Args::parse();
    // `serve` handles requests on the gateway's own per-core I/O threads; its main runtime
    // only starts up and runs background work, so one thread is enough and adds no
    // wake-ups. The mock (alone or in the demo) serves on the main runtime and wants
    // every core.
    let runtime = if args.serves_on_main_runtime() {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    };
    runtime.block_on(cli::dispatch(args))
}
