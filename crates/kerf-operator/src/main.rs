//! `kerf-operator`: Kerf's controllers in a cluster. The kubeconfig is found as kubectl finds
//! it (`KUBECONFIG`, `~/.kube/config`, then the in-cluster service account).

use clap::{Parser, ValueEnum};

/// Which cloud launches the nodes.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Provider {
    /// EC2 instances, through the AWS SDK's standard credential chain (`AWS_ENDPOINT_URL`
    /// points it at an emulator).
    Aws,
    /// Nodes are Node objects that kwok runs (for tests and benchmarks without a cloud).
    Kwok,
}

/// Kerf's node autoscaler, in-cluster.
#[derive(Debug, Parser)]
#[command(name = "kerf-operator", version)]
struct Args {
    /// The cloud provider.
    #[arg(long, value_enum, default_value = "aws")]
    cloud_provider: Provider,
    /// The region: kwok offers its instance types and zones (default us-east-1); for aws it
    /// overrides the SDK's (`AWS_REGION`).
    #[arg(long, env = "AWS_REGION")]
    region: Option<String>,
    /// aws: the EKS cluster's name (Karpenter's `settings.clusterName`).
    #[arg(long, env = "CLUSTER_NAME")]
    cluster_name: Option<String>,
    /// aws: the API server's URL nodes join (`settings.clusterEndpoint`). This, the CA bundle
    /// and the service CIDR are looked up with eks:DescribeCluster when not given.
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    cluster_endpoint: Option<String>,
    /// aws: the cluster's CA certificate, base64 (`aws eks describe-cluster --query
    /// cluster.certificateAuthority.data`).
    #[arg(long, env = "CLUSTER_CA_BUNDLE")]
    cluster_ca_bundle: Option<String>,
    /// aws: the service CIDR AL2023 nodes need (`aws eks describe-cluster --query
    /// cluster.kubernetesNetworkConfig.serviceIpv4Cidr`).
    #[arg(long, env = "CLUSTER_CIDR")]
    cluster_cidr: Option<String>,
    /// aws: the SQS queue of interruption messages (`settings.interruptionQueue`); none read
    /// when unset.
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    interruption_queue: Option<String>,
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
            args.region.as_deref().unwrap_or("us-east-1"),
            args.kwok_no_capacity,
        ) {
            Ok(cloud) => kerf_operator::run(client, cloud, options).await,
            Err(e) => Err(e.into()),
        },
        Provider::Aws => {
            let Some(name) = args.cluster_name else {
                eprintln!(
                    "kerf-operator: --cloud-provider aws needs --cluster-name (CLUSTER_NAME)"
                );
                return std::process::ExitCode::from(2);
            };
            let mut config = kerf_aws_provider::sdk_config().await;
            if let Some(region) = args.region {
                config = config
                    .into_builder()
                    .region(aws_config::Region::new(region))
                    .build();
            }
            if config.region().is_none() {
                eprintln!(
                    "kerf-operator: no AWS region: set AWS_REGION (or --region, or a profile's region)"
                );
                return std::process::ExitCode::from(2);
            }
            // what is not given is looked up, as Karpenter does
            let given = (
                args.cluster_endpoint,
                args.cluster_ca_bundle,
                args.cluster_cidr,
            );
            let cluster = match given {
                (Some(endpoint), Some(ca), Some(cidr)) => {
                    kerf_aws_provider::user_data::ClusterInfo {
                        name: name.clone(),
                        endpoint,
                        ca_bundle: Some(ca),
                        cidr: Some(cidr),
                    }
                }
                (endpoint, ca, cidr) => {
                    match kerf_aws_provider::cluster::describe(&config, &name).await {
                        Ok(found) => kerf_aws_provider::user_data::ClusterInfo {
                            name: name.clone(),
                            endpoint: endpoint.unwrap_or(found.endpoint),
                            ca_bundle: ca.or(found.ca_bundle),
                            cidr: cidr.or(found.cidr),
                        },
                        Err(e) => {
                            eprintln!(
                                "kerf-operator: looking up cluster {name} (give --cluster-endpoint, \
                                 --cluster-ca-bundle and --cluster-cidr to skip it): {e}"
                            );
                            return std::process::ExitCode::FAILURE;
                        }
                    }
                }
            };
            match kerf_operator::aws::Aws::new(&config, cluster, args.interruption_queue) {
                Ok(cloud) => {
                    tokio::spawn(kerf_operator::aws::reconcile_node_classes(
                        client.clone(),
                        config,
                        name,
                    ));
                    kerf_operator::run(client, cloud, options).await
                }
                Err(e) => Err(e.into()),
            }
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kerf-operator: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
