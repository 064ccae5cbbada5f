//! `kerf bench scheduling`: Karpenter's scheduling benchmark (../shared/BENCHMARK.md), timed
//! as one solve per size, printing pods/sec and nodes so it can run beside Karpenter's own.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::{Args as ClapArgs, Subcommand, ValueEnum};
use kerf_scheduling::{Preferences, Problem, SolveOptions, benchmark, solve};

/// Arguments of `kerf bench`.
#[derive(ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// One solve of the diverse pod mix (or the preference mix) per size.
    Scheduling {
        /// Pod counts to solve (default: Karpenter's sizes, 1 … 20,000).
        #[arg(long, value_delimiter = ',')]
        pods: Vec<usize>,
        /// Run the preference benchmark (4,000 pods with preferred affinities) instead of
        /// the diverse mix, respecting or ignoring preferences.
        #[arg(long, value_enum)]
        preferences: Option<PreferenceMode>,
        /// Solves per size; the fastest is reported.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Seed of the pod generator.
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum PreferenceMode {
    Respect,
    Ignore,
}

const SIZES: [usize; 9] = [1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000];

/// Runs the benchmark and prints a table.
pub fn run(args: &Args) -> Result<ExitCode> {
    let Which::Scheduling {
        pods,
        preferences,
        repeat,
        seed,
    } = &args.which;
    let sizes: Vec<usize> = match (pods.is_empty(), preferences) {
        (false, _) => pods.clone(),
        (true, Some(_)) => vec![4000],
        (true, None) => SIZES.to_vec(),
    };
    let pools = [benchmark::node_pool()];
    let mut out = String::from("pods\tnodes\tseconds\tpods/sec\tmicroseconds/pod\n");
    for n in sizes {
        let (workload, mode) = match preferences {
            Some(PreferenceMode::Respect) => {
                (benchmark::preference_pods(n, *seed), Preferences::Respect)
            }
            Some(PreferenceMode::Ignore) => {
                (benchmark::preference_pods(n, *seed), Preferences::Ignore)
            }
            None => (benchmark::diverse_pods(n, *seed), Preferences::Respect),
        };
        let problem = Problem {
            options: SolveOptions {
                preferences: mode,
                ..SolveOptions::default()
            },
            ..Problem::new(&pools, &workload)
        };
        let mut best = f64::MAX;
        let mut nodes = 0;
        for _ in 0..(*repeat).max(1) {
            let start = Instant::now();
            let decision = solve(&problem);
            let secs = start.elapsed().as_secs_f64();
            if !decision.unschedulable.is_empty() {
                bail!(
                    "{} of {n} pods did not schedule: the run is an error, not a result",
                    decision.unschedulable.len()
                );
            }
            best = best.min(secs);
            nodes = decision.nodeclaims.len();
        }
        writeln!(
            out,
            "{n}\t{nodes}\t{best:.4}\t{:.0}\t{:.1}",
            n as f64 / best,
            best * 1e6 / n as f64
        )?;
        crate::emit(&std::mem::take(&mut out))?;
    }
    Ok(ExitCode::SUCCESS)
}
