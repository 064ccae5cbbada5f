//! `kerf simulate [NAME|PATH]`: run Kerf's core against a simulated cluster and cloud on a
//! virtual clock, and report nodes, cost, spot share and how long pods waited.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use kerf_sim::{BUILT_IN, DEFAULT, RunOptions, SimError};

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
    /// Check the invariants (no over-commitment, limits, registration, no pod left behind)
    /// on every step; a violation fails the run.
    #[arg(long)]
    check: bool,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
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
    let which = args.scenario.as_deref().unwrap_or(DEFAULT);
    let mut scenario = match kerf_sim::load(which) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{which}: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if let Some(seed) = args.seed {
        scenario.spec.seed = seed;
    }
    let tty = std::io::stderr().is_terminal();
    let mut shown = Duration::ZERO;
    let mut progress = |now: Duration, nodes: usize, pending: usize| {
        if tty && now >= shown {
            eprint!(
                "\r  t={:<10} nodes={nodes:<6} pending pods={pending:<8}",
                kerf_sim::clock::short(now)
            );
            shown = now + Duration::from_secs(600);
        }
    };
    let result = kerf_sim::run(scenario, RunOptions { check: args.check }, &mut progress);
    if tty {
        eprint!("\r{:60}\r", "");
    }
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
    if let Some(path) = &args.log {
        let lines: String = report
            .events
            .iter()
            .map(|e| kerf_sim::log::line(e) + "\n")
            .collect();
        std::fs::write(path, lines).with_context(|| format!("writing {}", path.display()))?;
    }
    let text = match args.output {
        Format::Text => report.summary(),
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
    };
    crate::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}
