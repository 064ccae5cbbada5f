//! `kerf-operator`: Kerf's controllers in a cluster. The kubeconfig is found as kubectl finds
//! it (`KUBECONFIG`, `~/.kube/config`, then the in-cluster service account).

use std::net::SocketAddr;

use clap::Parser;
use kerf_operator::cloud::CapacitySettings;
use kerf_operator::leader;
use kerf_operator::runtime_metrics::{Counted, RuntimeMetrics};
use kerf_operator::seats::{Seats, Window};
use kerf_operator::settings::{Provider, Settings};
use kerf_operator::throttle::{Gate, Paced, TokenBucket};

/// The API clients: one for the watches, the probe and the Lease; one for the controllers'
/// actions, whose every request waits for the Lease to be held and then for a token of the
/// KUBE_CLIENT_QPS / KUBE_CLIENT_BURST bucket ([`kerf_operator::throttle`]); and one for the
/// Events, behind the same gate with a bucket of its own. Every request of each is counted.
async fn clients(settings: &Settings) -> Result<kerf_operator::Clients, String> {
    let mut config = kube::Config::infer().await.map_err(|e| {
        format!("no usable kubeconfig (KUBECONFIG, ~/.kube/config or in-cluster): {e}")
    })?;
    // a 429 (the API server's priority and fairness turning a request away), 503 or 504 is
    // sent again inside the client after the answer's Retry-After: throttling slows a call
    // and never fails it (tests/faults.rs). The watches keep kube-rs's own retry; the
    // actions' and events' clients put their calls through a window of calls in flight that
    // narrows at each 429 ([`kerf_operator::seats`]), kube-rs's retry off beneath it.
    config.default_retry = true;
    let mut windowed = config.clone();
    windowed.default_retry = false;
    let gate = Gate::new(!settings.disable_leader_election);
    let paced = Paced::new(
        TokenBucket::new(settings.kube_client_qps, settings.kube_client_burst),
        gate.clone(),
    );
    let metrics = std::sync::Arc::new(RuntimeMetrics::default());
    let counted = Counted(std::sync::Arc::clone(&metrics));
    let builder = |config: kube::Config| {
        kube::client::ClientBuilder::try_from(config).map_err(|e| e.to_string())
    };
    let watch = builder(config.clone())?.with_layer(&counted).build();
    let act = builder(windowed.clone())?
        .with_layer(&Seats::new(Window::new(), gate.clone()))
        .with_layer(&paced)
        .with_layer(&counted)
        .build();
    let events_paced = Paced::new(
        TokenBucket::new(settings.kube_client_qps, settings.kube_client_burst),
        gate.clone(),
    );
    let events = builder(windowed)?
        .with_layer(&Seats::new(Window::new(), gate.clone()))
        .with_layer(&events_paced)
        .with_layer(&counted)
        .build();
    Ok(kerf_operator::Clients {
        watch,
        act,
        events,
        gate,
        metrics,
    })
}

/// The Lease's namespace when none is set: the service account's in a pod, else kube-system.
fn lease_namespace(settings: &Settings) -> String {
    settings
        .leader_election_namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .map(|n| n.trim().to_string())
                .unwrap_or_else(|_| "kube-system".into())
        })
}

/// This replica's name on the Lease: as set, else the host name and a random suffix.
fn lease_identity(settings: &Settings) -> String {
    settings
        .leader_election_identity
        .clone()
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "kerf".into());
            format!("{host}_{:08x}", rand::random::<u32>())
        })
}

fn options(settings: &Settings) -> kerf_operator::Options {
    kerf_operator::Options {
        controllers: kerf_core::controllers::Settings {
            spot_to_spot: settings.feature_gates.spot_to_spot,
            node_repair: settings.feature_gates.node_repair,
            static_capacity: settings.feature_gates.static_capacity,
            node_overlay: settings.feature_gates.node_overlay,
            capacity_buffer: settings.feature_gates.capacity_buffer,
            pod_deletion_cost: settings.feature_gates.pod_deletion_cost,
            terminate_first_drift: settings.feature_gates.terminate_first_drift,
            terminate_first_repair: settings.feature_gates.terminate_first_repair,
            batch_idle: settings.batch_idle_duration,
            batch_max: settings.batch_max_duration,
            unavailable_offerings_ttl: settings.unavailable_offerings_ttl,
            preference_policy: settings.preference_policy,
            min_values_policy: settings.min_values_policy,
            min_savings: kerf_core::disruption::search::MinSavings {
                per_hour: settings.consolidation_min_savings_per_hour,
                percent: settings.consolidation_min_savings_percent,
            },
            ..kerf_core::controllers::Settings::default()
        },
        leader_election: (!settings.disable_leader_election).then(|| {
            leader::Config::new(
                lease_namespace(settings),
                settings.leader_election_name.clone(),
                lease_identity(settings),
            )
        }),
        metrics_address: SocketAddr::new(settings.bind_address, settings.metrics_port),
        health_address: SocketAddr::new(settings.bind_address, settings.health_probe_port),
    }
}

// one thread: the controllers are one state machine, and a single allocator arena keeps the
// resident set small
#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args = Settings::parse();
    if let Err(e) = args.validate() {
        eprintln!("kerf-operator: {e}");
        return std::process::ExitCode::from(2);
    }
    kerf_operator::log::set_level(args.log_level);
    for (name, why) in kerf_operator::settings::SETTINGS_NOT_ACTED_ON {
        if let Ok(value) = std::env::var(name) {
            kerf_operator::log::warn(
                "operator",
                "setting not acted on",
                serde_json::json!({"setting": name, "value": value, "why": why}),
            );
        }
    }
    let aws_unknown = kerf_operator::settings::unknown_gates(&args.aws_feature_gates, true);
    let gates = [
        (&args.feature_gates.unknown, "FEATURE_GATES"),
        (&aws_unknown, "AWS_FEATURE_GATES"),
    ];
    for (unknown, setting) in gates {
        for gate in unknown {
            kerf_operator::log::warn(
                "operator",
                "unknown feature gate ignored",
                serde_json::json!({"setting": setting, "gate": gate}),
            );
        }
    }
    if !args.feature_gates.reserved_capacity {
        kerf_operator::log::warn(
            "operator",
            "setting not acted on",
            serde_json::json!({"setting": "FEATURE_GATES", "value": "ReservedCapacity=false",
                "why": "capacity reservations an EC2NodeClass selects are always used"}),
        );
    }
    let mut options = options(&args);
    let capacity = CapacitySettings {
        vm_memory_overhead_percent: args.vm_memory_overhead_percent,
        reserved_enis: args.reserved_enis,
    };
    let clients = match clients(&args).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kerf-operator: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let result = match args.cloud_provider {
        Provider::Kwok => match kerf_operator::kwok::Kwok::new(
            clients.act.clone(),
            args.region.as_deref().unwrap_or("us-east-1"),
            args.kwok_no_capacity,
            args.instance_types_file_path.as_deref(),
            capacity,
        ) {
            Ok(cloud) => kerf_operator::run(clients, cloud, options).await,
            Err(e) => Err(e.into()),
        },
        Provider::Aws => {
            let Some(name) = args.cluster_name else {
                eprintln!(
                    "kerf-operator: --cloud-provider aws needs --cluster-name (CLUSTER_NAME)"
                );
                return std::process::ExitCode::from(2);
            };
            // every AWS call counted from the first, as Karpenter's SDK middleware does
            kerf_aws_provider::sdk_metrics::install();
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
            options.controllers.cluster_ca_bundle = cluster.ca_bundle.clone().unwrap_or_default();
            // as Karpenter, a cluster ARC does not know stops the operator at start
            let zonal_shifts = if args.enable_zonal_shift {
                match kerf_operator::aws::zonal_shifts(&config, &name).await {
                    Ok(shifts) => Some(shifts),
                    Err(e) => {
                        eprintln!("kerf-operator: {e}");
                        return std::process::ExitCode::FAILURE;
                    }
                }
            } else {
                None
            };
            let aws = kerf_operator::aws::AwsOptions {
                cluster,
                interruption_queue: args.interruption_queue,
                capacity,
                isolated_vpc: args.isolated_vpc,
                disable_dry_run: args.disable_dry_run,
                zonal_shifts,
                reboot_for_repair: kerf_operator::settings::reboot_for_repair(
                    &args.aws_feature_gates,
                ),
            };
            match kerf_operator::aws::Aws::new(&config, aws) {
                Ok(cloud) => kerf_operator::run(clients, cloud, options).await,
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
