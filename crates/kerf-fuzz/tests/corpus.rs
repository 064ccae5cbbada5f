//! The committed corpus replays without a panic, and a short seeded run of mutations of it
//! finds none either.

use std::path::PathBuf;

use kerf_fuzz::{TARGETS, Target, corpus, mutate, run_one};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

#[test]
fn every_corpus_input_parses_or_fails_cleanly() {
    for target in TARGETS {
        let files = corpus(&root(), target.name);
        assert!(!files.is_empty(), "fuzz/corpus/{} has inputs", target.name);
        for f in files {
            let text = String::from_utf8_lossy(&std::fs::read(&f).expect("readable")).into_owned();
            if let Err(panic) = run_one(target, &text) {
                panic!("{}: panicked: {panic}", f.display());
            }
        }
    }
}

/// The seeds of the settings, kwok instance-types and watched-object targets are valid
/// input, so that mutations start from the paths that read everything.
#[test]
fn the_settings_kwok_types_and_watched_seeds_read_whole() {
    for target in TARGETS
        .iter()
        .filter(|t| ["settings", "kwok-types", "watched"].contains(&t.name))
    {
        for f in corpus(&root(), target.name) {
            let text = std::fs::read_to_string(&f).expect("readable");
            assert_eq!(
                run_one(target, &text).as_deref(),
                Ok("ok"),
                "{}",
                f.display()
            );
        }
    }
}

#[test]
fn two_thousand_mutations_per_target_panic_nowhere() {
    for target in TARGETS {
        let pool: Vec<Vec<u8>> = corpus(&root(), target.name)
            .iter()
            .map(|p| std::fs::read(p).expect("readable"))
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for i in 0..2000 {
            let input = mutate(&mut rng, &pool[i % pool.len()], &pool);
            let text = String::from_utf8_lossy(&input).into_owned();
            if let Err(panic) = run_one(target, &text) {
                panic!("{}: {text:?} panicked: {panic}", target.name);
            }
        }
    }
}

#[test]
fn a_panicking_parser_is_reported_not_fatal() {
    let broken = Target {
        name: "broken",
        run: |text| {
            let n: u32 = text.parse().expect("a number");
            n.to_string()
        },
    };
    assert_eq!(run_one(&broken, "7"), Ok("7".to_string()));
    assert!(run_one(&broken, "seven").is_err());
}
