//! `kerf bench scheduling`: Karpenter's scheduling benchmark (../shared/BENCHMARK.md), timed
//! as one solve per size, printing pods/sec and nodes so it can run beside Karpenter's own.
//! `kerf bench consolidation`: one disruption pass over a synthetic cluster per size.
//! `kerf bench simulate`: a scenario's whole run (the 10,000-pod day), by turns with another
//! build's, each in a process of its own, and whether their reports are the same.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Result, bail};
use clap::{Args as ClapArgs, Subcommand, ValueEnum};
use kerf_core::benchmark::{BenchCluster, PODS_PER_NODE};
use kerf_core::disruption::search::plan;
use kerf_scheduling::{
    Catalog, Preferences, Problem, SolveOptions, benchmark, solve, solve_near_bound,
};

use crate::progress::Progress;

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
        /// How NodeClaims are packed: as the provisioner does (`near-bound`: Karpenter's
        /// decision, re-solved with smaller types when it costs over 1.05× the cost bound)
        /// or Karpenter's decision alone (`karpenter`).
        #[arg(long, value_enum, default_value = "near-bound")]
        packing: Packing,
    },
    /// One disruption pass (emptiness, drift, delete, replace) over a cluster of N nodes
    /// with ten pods each, most of them underutilized.
    Consolidation {
        /// Node counts (default 100 … 5,000).
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<usize>,
        /// Allowed disruptions as a percentage of the nodes (Karpenter's default budget is
        /// 10 %; 100 makes the pass weigh every candidate it can).
        #[arg(long, default_value_t = 100)]
        budget: usize,
        /// Passes per size; the fastest is reported.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Seed of the cluster generator.
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// A scenario's whole run (`kerf simulate SCENARIO -o json`), alone or by turns with
    /// another build of kerf, so that both meet the machine as it is; their JSON reports must
    /// be the same (a speed change that changes a decision is not one).
    Simulate {
        /// A built-in scenario's name or a scenario file (default: the built-in `day`).
        scenario: Option<String>,
        /// Another kerf binary (say, main's) to run by turns with this one.
        #[arg(long)]
        against: Option<PathBuf>,
        /// Runs of each binary.
        #[arg(long, default_value_t = 2)]
        repeat: usize,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Packing {
    NearBound,
    Karpenter,
}

#[derive(Clone, Copy, ValueEnum)]
enum PreferenceMode {
    Respect,
    Ignore,
}

const SIZES: [usize; 9] = [1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000];

const NODE_SIZES: [usize; 5] = [100, 500, 1000, 2000, 5000];

/// Runs the benchmark and prints a table.
pub fn run(args: &Args) -> Result<ExitCode> {
    match &args.which {
        Which::Scheduling {
            pods,
            preferences,
            repeat,
            seed,
            packing,
        } => scheduling(pods, *preferences, *repeat, *seed, *packing),
        Which::Consolidation {
            nodes,
            budget,
            repeat,
            seed,
        } => consolidation(nodes, *budget, *repeat, *seed),
        Which::Simulate {
            scenario,
            against,
            repeat,
        } => simulate(
            scenario.as_deref().unwrap_or("day"),
            against.as_deref(),
            *repeat,
        ),
    }
}

/// Times `kerf simulate` of this binary and of `against` by turns, and checks that every
/// run's report is the first one's.
fn simulate(scenario: &str, against: Option<&Path>, repeat: usize) -> Result<ExitCode> {
    let this = std::env::current_exe()?;
    // told before this build's runs, not after them
    if let Some(other) = against
        && !other.is_file()
    {
        bail!(
            "{}: no such file (--against names a kerf binary)",
            other.display()
        );
    }
    let mut binaries = vec![("this", this.as_path())];
    binaries.extend(against.map(|p| ("against", p)));
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); binaries.len()];
    let mut first: Option<(&str, Vec<u8>)> = None;
    let mut same = true;
    let mut out = String::from("run\tbinary\tseconds\n");
    let runs = repeat.max(1);
    let bar = Progress::new((runs * binaries.len()) as u64, "benchmark", false);
    for run in 1..=runs {
        for (k, (label, binary)) in binaries.iter().enumerate() {
            bar.set(
                ((run - 1) * binaries.len() + k) as u64,
                format!("{label}, run {run}"),
            );
            let start = Instant::now();
            let done = Command::new(binary)
                .args(["simulate", scenario, "-o", "json"])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| anyhow::anyhow!("{}: {e}", binary.display()))?;
            let secs = start.elapsed().as_secs_f64();
            if !done.status.success() {
                bail!(
                    "{}: `simulate {scenario}` failed ({}): {}",
                    binary.display(),
                    done.status,
                    String::from_utf8_lossy(&done.stderr).trim()
                );
            }
            match &first {
                None => first = Some((label, done.stdout)),
                Some((_, report)) => same &= *report == done.stdout,
            }
            times[k].push(secs);
            writeln!(out, "{run}\t{label}\t{secs:.2}")?;
            bar.suspend(|| crate::emit(&std::mem::take(&mut out)))?;
        }
    }
    bar.finish();
    for ((label, binary), t) in binaries.iter().zip(&times) {
        let best = t.iter().copied().fold(f64::MAX, f64::min);
        let mean = t.iter().sum::<f64>() / t.len() as f64;
        writeln!(
            out,
            "{label} ({}): best {best:.2} s, mean {mean:.2} s",
            binary.display()
        )?;
    }
    if !same {
        writeln!(
            out,
            "the reports differ: a run decided otherwise than {}'s first",
            first.map_or("", |(label, _)| label)
        )?;
    } else {
        writeln!(out, "every report is the same")?;
    }
    crate::emit(&out)?;
    Ok(if same {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn consolidation(sizes: &[usize], budget: usize, repeat: usize, seed: u64) -> Result<ExitCode> {
    let sizes = if sizes.is_empty() {
        &NODE_SIZES[..]
    } else {
        sizes
    };
    let mut out = String::from(
        "nodes\tpods\tseconds\tcommand\tcandidates\treplacements\tcost/h\tsavings/h\n",
    );
    let bar = Progress::new((sizes.len() * repeat.max(1)) as u64, "benchmark", false);
    for (k, &n) in sizes.iter().enumerate() {
        bar.set((k * repeat.max(1)) as u64, format!("{n} nodes"));
        let cluster = BenchCluster::generate(n, seed);
        let allowed = (n * budget).div_ceil(100);
        let mut best = f64::MAX;
        let mut command = None;
        for _ in 0..repeat.max(1) {
            let view = cluster.view(allowed);
            let start = Instant::now();
            command = plan(&view, &mut kerf_scheduling::Catalog::default());
            best = best.min(start.elapsed().as_secs_f64());
        }
        let (reason, candidates, replacements, savings) = match &command {
            Some(c) => (
                c.reason.as_str(),
                c.candidates.len(),
                c.replacements.len(),
                c.savings,
            ),
            None => ("none", 0, 0, 0.0),
        };
        writeln!(
            out,
            "{n}\t{}\t{best:.3}\t{reason}\t{candidates}\t{replacements}\t{:.2}\t{savings:.2}",
            n * PODS_PER_NODE,
            cluster.cost_per_hour(),
        )?;
        bar.suspend(|| crate::emit(&std::mem::take(&mut out)))?;
    }
    bar.finish();
    Ok(ExitCode::SUCCESS)
}

fn scheduling(
    pods: &[usize],
    preferences: Option<PreferenceMode>,
    repeat: usize,
    seed: u64,
    packing: Packing,
) -> Result<ExitCode> {
    let sizes: Vec<usize> = match (pods.is_empty(), preferences) {
        (false, _) => pods.to_vec(),
        (true, Some(_)) => vec![4000],
        (true, None) => SIZES.to_vec(),
    };
    let pools = [benchmark::node_pool()];
    let mut out =
        String::from("pods\tnodes\tseconds\tpods/sec\tmicroseconds/pod\t$/hour\tbound $/hour\n");
    let bar = Progress::new((sizes.len() * repeat.max(1)) as u64, "benchmark", false);
    for (k, n) in sizes.into_iter().enumerate() {
        bar.set((k * repeat.max(1)) as u64, format!("{n} pods"));
        let (workload, mode) = match preferences {
            Some(PreferenceMode::Respect) => {
                (benchmark::preference_pods(n, seed), Preferences::Respect)
            }
            Some(PreferenceMode::Ignore) => {
                (benchmark::preference_pods(n, seed), Preferences::Ignore)
            }
            None => (benchmark::diverse_pods(n, seed), Preferences::Respect),
        };
        let workload: Vec<_> = workload.iter().collect();
        let problem = Problem {
            options: SolveOptions {
                preferences: mode,
                ..SolveOptions::default()
            },
            ..Problem::new(&pools, &workload)
        };
        let mut best = f64::MAX;
        let mut nodes = 0;
        let (mut cost, mut bound) = (0.0, None);
        for _ in 0..repeat.max(1) {
            let start = Instant::now();
            let decision = match packing {
                Packing::NearBound => {
                    let (decision, b) = solve_near_bound(&problem, &mut Catalog::default());
                    bound = b.and_then(Result::ok).map(|b| b.per_hour);
                    decision
                }
                Packing::Karpenter => solve(&problem),
            };
            let secs = start.elapsed().as_secs_f64();
            cost = decision.cost_per_hour();
            if !decision.unschedulable.is_empty() {
                bail!(
                    "{} of {n} pods did not schedule: the run is an error, not a result",
                    decision.unschedulable.len()
                );
            }
            best = best.min(secs);
            nodes = decision.nodeclaims.len();
        }
        let bound = bound.map_or("-".to_string(), |b| format!("{b:.2}"));
        writeln!(
            out,
            "{n}\t{nodes}\t{best:.4}\t{:.0}\t{:.1}\t{cost:.2}\t{bound}",
            n as f64 / best,
            best * 1e6 / n as f64
        )?;
        bar.suspend(|| crate::emit(&std::mem::take(&mut out)))?;
    }
    bar.finish();
    Ok(ExitCode::SUCCESS)
}
