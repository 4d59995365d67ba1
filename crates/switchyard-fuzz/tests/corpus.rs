//! Every fuzz check over its seed corpus and over every input a fuzzing run found a crash
//! with (`fuzz/regressions/<target>/`): the checks hold on well-formed input, and a crash
//! once found stays fixed. Each target is its own test, named after it.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "the replay helper fails the test at a missing file or target"
)]

use std::path::Path;
use switchyard_fuzz::TARGETS;

fn run(target: &str) {
    let (_, check) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .expect("a known target");
    let seeds = switchyard_fuzz::seeds::all();
    let ours = seeds.get(target).expect("seeds for every target");
    assert!(!ours.is_empty());
    for seed in ours {
        check(seed);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut paths: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for path in paths {
        eprintln!("{target}: {}", path.display());
        check(&std::fs::read(&path).unwrap());
    }
}

/// Writes every target's seed corpus into `$SWITCHYARD_FUZZ_CORPUS/<target>/`, for
/// `scripts/fuzz.sh`, which runs it after the suite so that nothing is built again.
#[test]
#[ignore = "writes the seed corpus for scripts/fuzz.sh"]
fn write_seed_corpus() {
    let dir = std::path::PathBuf::from(
        std::env::var_os("SWITCHYARD_FUZZ_CORPUS")
            .expect("SWITCHYARD_FUZZ_CORPUS names the corpus directory"),
    );
    for (target, seeds) in switchyard_fuzz::seeds::all() {
        let target_dir = dir.join(target);
        std::fs::create_dir_all(&target_dir).unwrap();
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(target_dir.join(format!("seed-{i:04}")), seed).unwrap();
        }
        eprintln!(
            "{target}: {} seeds in {}",
            seeds.len(),
            target_dir.display()
        );
    }
}

macro_rules! targets {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { run(stringify!($name)); })*

        #[test]
        fn every_target_has_its_test() {
            let tested = [$(stringify!($name)),*];
            let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
            assert_eq!(names, tested);
            // And a cargo-fuzz target in fuzz/fuzz_targets.
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets");
            let mut files: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".rs").to_owned())
                .collect();
            files.sort();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            assert_eq!(files, sorted);
        }
    };
}

targets!(
    decode,
    reader,
    translate_request,
    translate_response,
    translate_error,
    translate_stream,
    headers,
    settings,
    config,
    client_conn,
    http1,
    gateway,
);
