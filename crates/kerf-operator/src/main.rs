//! `kerf-operator`: Kerf's controllers in a cluster. The kubeconfig is found as kubectl finds
//! it (`KUBECONFIG`, `~/.kube/config`, then the in-cluster service account).

use clap::{Parser, ValueEnum};

/// Which cloud launches the nodes.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Provider {
    /// Nodes are Node objects that kwok runs (for tests and benchmarks without a cloud).
    Kwok,
}

/// Kerf's node autoscaler, in-cluster.
#[derive(Debug, Parser)]
#[command(name = "kerf-operator", version)]
struct Args {
    /// The cloud provider.
    #[arg(long, value_enum, default_value = "kwok")]
    cloud_provider: Provider,
    /// The region whose instance types and zones kwok offers.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// kwok only: a file of offerings without capacity, one
    /// `CAPACITY_TYPE[:INSTANCE_TYPE[:ZONE]]` a line (`*` for any), read at every launch.
    #[arg(long, value_name = "FILE")]
    kwok_no_capacity: Option<std::path::PathBuf>,
    /// Karpenter's feature gates, as `SpotToSpotConsolidation=true,NodeRepair=true`.
    #[arg(long, default_value = "")]
    feature_gates: String,
}

/// Reads `--feature-gates` into the options it sets.
fn feature_gates(gates: &str) -> Result<kerf_operator::Options, String> {
    let mut options = kerf_operator::Options {
        spot_to_spot: false,
        node_repair: false,
    };
    for gate in gates.split(',').filter(|g| !g.is_empty()) {
        let (flag, value) = match gate.split_once('=') {
            Some(("SpotToSpotConsolidation", v)) => (&mut options.spot_to_spot, v),
            Some(("NodeRepair", v)) => (&mut options.node_repair, v),
            _ => {
                return Err(format!(
                    "--feature-gates: {gate}: unknown gate (known: \
                     SpotToSpotConsolidation=true|false, NodeRepair=true|false)"
                ));
            }
        };
        *flag = value
            .parse()
            .map_err(|_| format!("--feature-gates: {gate}: the value must be true or false"))?;
    }
    Ok(options)
}

// one thread: the controllers are one state machine, and a single allocator arena keeps the
// resident set small
#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let options = match feature_gates(&args.feature_gates) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("kerf-operator: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "kerf-operator: no usable kubeconfig (KUBECONFIG, ~/.kube/config or in-cluster): {e}"
            );
            return std::process::ExitCode::from(2);
        }
    };
    let result = match args.cloud_provider {
        Provider::Kwok => match kerf_operator::kwok::Kwok::new(
            client.clone(),
            &args.region,
            args.kwok_no_capacity,
        ) {
            Ok(cloud) => kerf_operator::run(client, cloud, options).await,
            Err(e) => Err(e.into()),
        },
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kerf-operator: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
