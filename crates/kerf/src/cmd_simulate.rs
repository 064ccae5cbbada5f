//! `kerf simulate [NAME|PATH]`: run Kerf's core against a simulated cluster and cloud on a
//! virtual clock, and report nodes, cost, spot share and how long pods waited.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use kerf_core::controllers::EventObject;
use kerf_sim::world::KeptEvent;
use kerf_sim::{BUILT_IN, DEFAULT, RunOptions, SimError};

use crate::cmd_explain::{Format as ExplainFormat, Kind};
use crate::progress::Progress;

/// Arguments of `kerf simulate`.
#[derive(clap::Args)]
pub struct Args {
    /// A built-in scenario's name or a scenario file (default: the built-in `day`).
    scenario: Option<String>,
    /// List the built-in scenarios.
    #[arg(long)]
    list: bool,
    /// Output: a text summary or the JSON report.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    output: Format,
    /// Also write the report as one self-contained HTML page.
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,
    /// Also write the JSON log lines.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Also write Karpenter's metrics at the end of the run, as OpenMetrics text (what the
    /// operator's /metrics would serve), to try dashboards offline.
    #[arg(long, value_name = "FILE")]
    metrics: Option<PathBuf>,
    /// Check the invariants on every step, each with its own oracle: no over-commitment,
    /// taints and selectors, NodePool limits, registration, disruption budgets,
    /// PodDisruptionBudgets and do-not-disrupt, waits while capacity exists, convergence and
    /// spot preference; a violation fails the run (exit 1), and the summary lists what held.
    #[arg(long)]
    check: bool,
    /// Override the scenario's seed; with --swarm, the first generated scenario's seed
    /// (default 1).
    #[arg(long)]
    seed: Option<u64>,
    /// Run to simulated time T (`90m`, `2h30m`) and explain a pod or node as it is then,
    /// instead of reporting: `--explain-at T pod NAMESPACE/NAME` or `--explain-at T node NAME`.
    #[arg(
        long,
        num_args = 3,
        value_names = ["T", "pod|node", "NAME"],
        conflicts_with_all = ["report", "log", "metrics"]
    )]
    explain_at: Option<Vec<String>>,
    /// Generate N random scenarios (seeds S, S+1, …) and run each with every invariant
    /// checked; a failure is shrunk and written as YAML. Exit 1 when any fails.
    #[arg(long, value_name = "N", conflicts_with_all = ["scenario", "list", "report", "log", "metrics", "explain_at"])]
    swarm: Option<u64>,
    /// Where --swarm writes the scenarios that failed.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "swarm-failures",
        requires = "swarm"
    )]
    failures: PathBuf,
    /// How many --swarm scenarios run at once (default: one per CPU). Results are reported
    /// in seed order whatever the number.
    #[arg(long, value_name = "J", requires = "swarm")]
    jobs: Option<std::num::NonZeroUsize>,
    /// Override the scenario's PREFERENCE_POLICY (`spec.preferencePolicy`): Respect or Ignore.
    #[arg(long, value_parser = kerf_scheduling::Preferences::parse, conflicts_with = "swarm")]
    preference_policy: Option<kerf_scheduling::Preferences>,
    /// Override the scenario's MIN_VALUES_POLICY (`spec.minValuesPolicy`): Strict or
    /// BestEffort.
    #[arg(long, value_parser = kerf_scheduling::MinValues::parse, conflicts_with = "swarm")]
    min_values_policy: Option<kerf_scheduling::MinValues>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Text,
    Json,
}

/// Runs the simulation; exit 1 on a violated invariant, 2 on a bad scenario.
pub fn run(args: &Args) -> Result<ExitCode> {
    if args.list {
        let mut out = String::new();
        for (name, text) in BUILT_IN {
            let about = text
                .lines()
                .take_while(|l| l.starts_with('#'))
                .map(|l| l.trim_start_matches('#').trim())
                .collect::<Vec<_>>()
                .join(" ");
            out.push_str(&format!("{name:<16} {about}\n"));
        }
        crate::emit(&out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(n) = args.swarm {
        let jobs = args
            .jobs
            .or_else(|| std::thread::available_parallelism().ok());
        return swarm(
            n,
            args.seed.unwrap_or(1),
            jobs.map_or(1, |j| j.get()),
            &args.failures,
        );
    }
    let which = args.scenario.as_deref().unwrap_or(DEFAULT);
    let mut scenario = match kerf_sim::load(which) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{which}: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if let Some(p) = args.preference_policy {
        scenario.spec.preference_policy = p;
    }
    if let Some(p) = args.min_values_policy {
        scenario.spec.min_values_policy = p;
    }
    if let Some(seed) = args.seed {
        scenario.spec.seed = seed;
    }
    if let Some(question) = &args.explain_at {
        return explain_at(scenario, which, question, args);
    }
    let bar = Progress::new(
        scenario.spec.duration.0.as_secs(),
        "simulating",
        args.output == Format::Json,
    );
    let mut progress = |now: Duration, nodes: usize, pending: usize| {
        bar.set(
            now.as_secs(),
            format!(
                "t={} nodes={nodes} pending pods={pending}",
                kerf_sim::clock::short(now)
            ),
        );
    };
    let result = kerf_sim::run(
        scenario,
        RunOptions {
            check: args.check,
            ..Default::default()
        },
        &mut progress,
    );
    bar.finish();
    let report = match result {
        Ok(r) => r,
        Err(SimError::Scenario(e)) => {
            eprintln!("{which}: {e}");
            return Ok(ExitCode::from(2));
        }
        Err(e @ SimError::Invariant { .. }) => {
            eprintln!("{which}: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    if let Some(path) = &args.report {
        std::fs::write(path, report.html())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.metrics {
        std::fs::write(path, &report.metrics)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.log {
        let lines: String = report
            .events
            .iter()
            .map(|e| kerf_sim::log::line(e) + "\n")
            .collect();
        std::fs::write(path, lines).with_context(|| format!("writing {}", path.display()))?;
    }
    let mut text = match args.output {
        Format::Text => report.summary(),
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
    };
    if args.check && args.output == Format::Text {
        text += &format!(
            "--check: held at every step: {}\n",
            kerf_sim::world::INVARIANTS.join("; ")
        );
    }
    crate::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `--explain-at T KIND NAME`: the explanation at simulated time T.
fn explain_at(
    scenario: kerf_sim::Scenario,
    which: &str,
    question: &[String],
    args: &Args,
) -> Result<ExitCode> {
    let [at, kind, name] = question else {
        anyhow::bail!("--explain-at takes T, pod|node and a name");
    };
    let at = match kerf_api::duration::parse_go_duration(at) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("--explain-at {at}: {e} (a duration from the start, as 90m or 2h30m)");
            return Ok(ExitCode::from(2));
        }
    };
    let Ok(kind) = <Kind as clap::ValueEnum>::from_str(kind, false) else {
        eprintln!("--explain-at: {kind:?}: expected pod or node");
        return Ok(ExitCode::from(2));
    };
    let format = match args.output {
        Format::Text => ExplainFormat::Text,
        Format::Json => ExplainFormat::Json,
    };
    let world = kerf_sim::World::new(
        scenario,
        RunOptions {
            check: args.check,
            ..Default::default()
        },
    );
    // the object the Events are about, named as the API server names it
    let (object, about) = match kind {
        Kind::Pod => (EventObject::Pod, crate::cmd_explain::pod_key(name)),
        Kind::Node => (EventObject::Node, name.clone()),
    };
    let answer = world.and_then(|w| {
        w.explain_at(at, |core, events, now| {
            let answer = crate::cmd_explain::answer(core, kind, name, format, now);
            let said: Vec<KeptEvent> = (events.about(object, &about, now).into_iter())
                .cloned()
                .collect();
            answer.map(|r| r.map(|text| (text, said, now)))
        })
    });
    match answer {
        Ok(Ok(Ok((text, said, now)))) => {
            let text = match format {
                ExplainFormat::Text => format!(
                    "at {}:\n{text}{}",
                    kerf_sim::clock::short(at),
                    events_text(&said, now)
                ),
                ExplainFormat::Json => with_events(&text, &said)?,
            };
            crate::emit(&text)?;
            Ok(ExitCode::SUCCESS)
        }
        Ok(Ok(Err(unknown))) => {
            eprintln!("{which}: at {}: {unknown}", kerf_sim::clock::short(at));
            Ok(ExitCode::from(2))
        }
        Ok(Err(e)) => Err(e),
        Err(SimError::Scenario(e)) => {
            eprintln!("{which}: {e}");
            Ok(ExitCode::from(2))
        }
        Err(e @ SimError::Invariant { .. }) => {
            eprintln!("{which}: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

/// The Events the API server keeps about the object explained, as `kubectl describe` lists
/// them under its description; nothing when there are none.
fn events_text(said: &[KeptEvent], now: Duration) -> String {
    if said.is_empty() {
        return String::new();
    }
    let rows: Vec<[String; 4]> = (said.iter())
        .map(|e| {
            let age = kerf_sim::clock::short(now.saturating_sub(e.last));
            let age = match e.count {
                1 => age,
                n => {
                    let over = kerf_sim::clock::short(now.saturating_sub(e.first));
                    format!("{age} (x{n} over {over})")
                }
            };
            let kind = if e.warning { "Warning" } else { "Normal" };
            [kind.into(), e.reason.clone(), age, e.message.clone()]
        })
        .collect();
    let head = ["Type", "Reason", "Age", "Message"].map(String::from);
    let rule = ["----", "------", "----", "-------"].map(String::from);
    let width = |i: usize| {
        (rows.iter().chain([&head, &rule]))
            .map(|r| r[i].len())
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2) = (width(0), width(1), width(2));
    let mut out = String::from("\nEvents:\n");
    for [kind, reason, age, message] in [head, rule].iter().chain(&rows) {
        let line = format!("  {kind:<w0$}  {reason:<w1$}  {age:<w2$}  {message}");
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The JSON explanation with the Events the API server keeps about its object.
fn with_events(explanation: &str, said: &[KeptEvent]) -> Result<String> {
    let mut value: serde_json::Value =
        serde_json::from_str(explanation).context("reading the explanation back")?;
    let events: Vec<serde_json::Value> = (said.iter())
        .map(|e| {
            serde_json::json!({
                "type": if e.warning { "Warning" } else { "Normal" },
                "reason": e.reason,
                "message": e.message,
                "count": e.count,
                "firstTimestamp": kerf_sim::clock::rfc3339(e.first),
                "lastTimestamp": kerf_sim::clock::rfc3339(e.last),
            })
        })
        .collect();
    if let Some(object) = value.as_object_mut() {
        object.insert("events".into(), events.into());
    }
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}

/// `--swarm N`: N generated scenarios from seed `first` on `jobs` threads, failures shrunk
/// and written to `dir` in seed order; the last line counts scenarios and violations.
fn swarm(n: u64, first: u64, jobs: usize, dir: &std::path::Path) -> Result<ExitCode> {
    let bar = Progress::new(n, "swarm", false);
    let last = first.saturating_add(n);
    let next = std::sync::atomic::AtomicU64::new(first);
    let (results, finished) = std::sync::mpsc::channel();
    let mut violations = 0u64;
    std::thread::scope(|scope| -> Result<()> {
        for _ in 0..jobs {
            let (next, results) = (&next, results.clone());
            scope.spawn(move || {
                loop {
                    let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    // the receiver is gone only when reporting failed; stop then
                    if seed >= last
                        || results
                            .send((seed, kerf_sim::swarm::run_seed(seed)))
                            .is_err()
                    {
                        break;
                    }
                }
            });
        }
        drop(results);
        // results arrive in any order; they are reported in seed order
        let mut arrived = std::collections::BTreeMap::new();
        let mut seed = first;
        for (s, outcome) in finished {
            arrived.insert(s, outcome);
            while let Some(outcome) = arrived.remove(&seed) {
                if let Some(failure) = outcome {
                    violations += 1;
                    bar.suspend(|| report_failure(&failure, dir))?;
                }
                seed += 1;
                bar.set(
                    seed - first,
                    format!("seed {seed}, violations {violations}"),
                );
            }
        }
        Ok(())
    })?;
    bar.finish();
    println!("{n} scenarios, {violations} violations");
    Ok(if violations > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes a failure's shrunk scenario under `dir` and prints where.
fn report_failure(failure: &kerf_sim::swarm::Failure, dir: &std::path::Path) -> Result<()> {
    let seed = failure.seed;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("seed-{seed}.yaml"));
    let header = format!(
        "# kerf simulate --swarm 1 --seed {seed}\n# generated: {}\n# shrunk: {}\n",
        failure.message, failure.shrunk_message
    );
    std::fs::write(&path, header + &kerf_sim::swarm::to_yaml(&failure.shrunk))
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "seed {seed}: {}\n  shrunk scenario: {} ({})",
        failure.message,
        path.display(),
        failure.shrunk_message
    );
    Ok(())
}
