//! The `switchyard` binary: parses the command line and hands over to `cli`.

mod cli;
mod demo;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let args = cli::Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(cli::dispatch(args))
}
