//! `kerf-fuzz`: runs the mutation fuzzer over each target's corpus for a while and reports
//! executions, distinct outcomes, the slowest input and any panics (written out as files).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use kerf_fuzz::{TARGETS, corpus, mutate, run_one};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Fuzz Kerf's parsers of outside input.
#[derive(Parser)]
struct Args {
    /// Targets to fuzz (all when none): manifest, scenario, interruption, cron, quantity,
    /// duration, settings, kwok-types, watched.
    targets: Vec<String>,
    /// Seconds per target.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seed of the mutator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The corpus: one directory per target.
    #[arg(long, default_value = "fuzz/corpus")]
    corpus: PathBuf,
    /// Where inputs that panic are written.
    #[arg(long, default_value = "fuzz/crashes")]
    crashes: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    for t in &args.targets {
        if !TARGETS.iter().any(|x| x.name == t) {
            eprintln!("kerf-fuzz: unknown target {t:?}");
            return ExitCode::from(2);
        }
    }
    // panics are findings, reported below, not noise on stderr
    std::panic::set_hook(Box::new(|_| {}));
    let mut found = 0;
    for target in TARGETS
        .iter()
        .filter(|t| args.targets.is_empty() || args.targets.iter().any(|n| n == t.name))
    {
        let mut pool: Vec<Vec<u8>> = corpus(&args.corpus, target.name)
            .iter()
            .filter_map(|p| std::fs::read(p).ok())
            .collect();
        if pool.is_empty() {
            pool.push(Vec::new());
        }
        let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
        let mut seen = BTreeSet::new();
        let (mut runs, mut crashes) = (0u64, 0);
        let mut slowest = (Duration::ZERO, Vec::new());
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(args.seconds) {
            let base = &pool[rand::RngExt::random_range(&mut rng, 0..pool.len())];
            let input = mutate(&mut rng, base, &pool);
            let text = String::from_utf8_lossy(&input).into_owned();
            let t0 = Instant::now();
            let result = run_one(target, &text);
            let took = t0.elapsed();
            runs += 1;
            if took > slowest.0 {
                slowest = (took, input.clone());
            }
            match result {
                Ok(outcome) => {
                    if seen.insert(outcome) && pool.len() < 4096 {
                        pool.push(input);
                    }
                }
                Err(message) => {
                    crashes += 1;
                    let dir = args.crashes.join(target.name);
                    let file = dir.join(format!("crash-{runs}.txt"));
                    let _ = std::fs::create_dir_all(&dir);
                    let _ = std::fs::write(&file, &input);
                    println!("{}: panic {message:?}: {}", target.name, file.display());
                }
            }
        }
        found += crashes;
        println!(
            "{}: {runs} executions in {}s, {} distinct outcomes, {crashes} panics, slowest input {:.1} ms ({} bytes)",
            target.name,
            args.seconds,
            seen.len(),
            slowest.0.as_secs_f64() * 1e3,
            slowest.1.len()
        );
    }
    if found > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
