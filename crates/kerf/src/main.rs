//! `kerf`: the command line of Kerf, a Kubernetes node autoscaler compatible with Karpenter v1.
//!
//! The binary is glue: each subcommand reads its input, calls the library crates and prints.

mod cmd_bench;
mod cmd_crds;
mod cmd_explain;
mod cmd_instance_types;
mod cmd_plan;
mod cmd_replay;
mod cmd_schedule;
mod cmd_simulate;
mod cmd_validate;
mod inputs;
mod operator_settings;
mod progress;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc: the simulator and the dry runs allocate small objects by the million, where
/// glibc's allocator took an eighth of a simulated day.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Kerf: Karpenter-compatible node autoscaling, faster and easier to reason about.
#[derive(Parser)]
#[command(name = "kerf", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run Kerf against a simulated cluster and cloud (a built-in scenario or a scenario file) and report nodes, cost and waits.
    Simulate(cmd_simulate::Args),
    /// Print the NodePool, NodeClaim, EC2NodeClass, NodeOverlay and CapacityBuffer CRDs as YAML.
    Crds,
    /// Check NodePool, NodeClaim, EC2NodeClass and NodeOverlay manifests; exit 1 if any is invalid, 2 if a file cannot be read.
    Validate(cmd_validate::Args),
    /// List EC2 instance types with capacity, allocatable, labels, offerings and price, cheapest on-demand (or spot) price first.
    InstanceTypes(cmd_instance_types::Args),
    /// Dry-run provisioning: which NodeClaims Kerf would launch for the pods in the manifests, and why pods stay pending.
    Schedule(cmd_schedule::Args),
    /// Time Kerf on benchmarks: `kerf bench scheduling` (Karpenter's scheduling benchmark), `kerf bench consolidation` (one disruption pass) and `kerf bench simulate` (a scenario's whole run, by turns with another build).
    Bench(cmd_bench::Args),
    /// Why a pod is pending or runs where it runs (NodePool by NodePool), and why a node is or is not about to be disrupted; from manifests (-f) or the kubeconfig's cluster (read-only).
    Explain(cmd_explain::Args),
    /// What applying changed NodePools, EC2NodeClasses, NodeOverlays or PodDisruptionBudgets would do to the running cluster (the kubeconfig's, read-only, or --from snapshots): nodes, cost, replacements and evictions over the next hours, beside no change.
    Plan(cmd_plan::Args),
    /// Play a scenario against a live cluster (its kubeconfig) while an operator runs, and set what happened beside the simulation's prediction.
    Replay(cmd_replay::Args),
}

/// Writes command output to stdout; a reader that went away (`kerf … | head`) is not an error.
fn emit(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => cmd_simulate::run(&args),
        Command::Crds => cmd_crds::run(),
        Command::Validate(args) => cmd_validate::run(&args),
        Command::InstanceTypes(args) => cmd_instance_types::run(&args),
        Command::Bench(args) => cmd_bench::run(&args),
        Command::Plan(args) => cmd_plan::run(&args),
        Command::Schedule(args) => cmd_schedule::run(&args),
        Command::Replay(args) => cmd_replay::run(&args),
        Command::Explain(args) => cmd_explain::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // one style for every command: what it is about, then what is wrong
            eprintln!("{e:#}");
            ExitCode::from(2)
        }
    }
}
