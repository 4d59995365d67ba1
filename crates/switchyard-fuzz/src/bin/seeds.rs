//! Writes the seed corpus of every fuzz target into `DIR/<target>/` (`fuzz/corpus` by
//! default): `cargo run -p switchyard-fuzz --bin seeds -- DIR`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("fuzz/corpus"), PathBuf::from);
    for (target, seeds) in switchyard_fuzz::seeds::all() {
        let target_dir = dir.join(target);
        std::fs::create_dir_all(&target_dir)?;
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(target_dir.join(format!("seed-{i:04}")), seed)?;
        }
        eprintln!(
            "{target}: {} seeds in {}",
            seeds.len(),
            target_dir.display()
        );
    }
    Ok(())
}
