//! The operator's settings, named as Karpenter's: each is a flag and an environment variable
//! with Karpenter's name and default, so a Karpenter Deployment's `env` carries over. A value
//! that cannot be read stops the start with a message naming the setting.

use std::time::Duration;

use clap::{Parser, ValueEnum};
use kerf_api::duration::parse_go_duration;

/// Which cloud launches the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Provider {
    /// EC2 instances, through the AWS SDK's standard credential chain (`AWS_ENDPOINT_URL`
    /// points it at an emulator).
    Aws,
    /// Nodes are Node objects that kwok runs (for tests and benchmarks without a cloud).
    Kwok,
}

/// How much the operator logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum LogLevel {
    /// Everything, with the watch and lease details.
    Debug,
    /// What the controllers decide and do (Karpenter's default).
    Info,
    /// Only failures.
    Error,
}

/// Kerf's node autoscaler, in-cluster. Every setting is also read from the environment
/// variable of Karpenter's name (in brackets).
#[derive(Clone, Debug, Parser)]
#[command(name = "kerf-operator", version)]
pub struct Settings {
    /// The cloud provider.
    #[arg(long, value_enum, default_value = "aws", env = "CLOUD_PROVIDER")]
    pub cloud_provider: Provider,
    /// The region: kwok offers its instance types and zones (default us-east-1); for aws it
    /// overrides the SDK's.
    #[arg(long, env = "AWS_REGION", value_name = "AWS_REGION")]
    pub region: Option<String>,
    /// aws: the EKS cluster's name, for discovery tags and DescribeCluster.
    #[arg(long, env = "CLUSTER_NAME", value_name = "CLUSTER_NAME")]
    pub cluster_name: Option<String>,
    /// aws: the API server's URL nodes join. This, the CA bundle and the service CIDR are
    /// looked up with eks:DescribeCluster when not given.
    #[arg(long, env = "CLUSTER_ENDPOINT", value_name = "CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// aws: the cluster's CA certificate, base64.
    #[arg(long, env = "CLUSTER_CA_BUNDLE", value_name = "CLUSTER_CA_BUNDLE")]
    pub cluster_ca_bundle: Option<String>,
    /// aws: the service CIDR AL2023 nodes need.
    #[arg(long, env = "CLUSTER_CIDR", value_name = "CLUSTER_CIDR")]
    pub cluster_cidr: Option<String>,
    /// aws: the SQS queue of interruption messages; none are read when unset.
    #[arg(long, env = "INTERRUPTION_QUEUE", value_name = "INTERRUPTION_QUEUE")]
    pub interruption_queue: Option<String>,
    /// aws: no calls to AWS services without a VPC endpoint (the Pricing API): the embedded
    /// prices are used.
    #[arg(long, env = "ISOLATED_VPC", value_name = "ISOLATED_VPC", default_value = "false",
          value_parser = parse_bool("ISOLATED_VPC"), action = clap::ArgAction::Set)]
    pub isolated_vpc: bool,
    /// aws: a class's launch authorization is not checked with dry-run EC2 calls
    /// (`ValidationSucceeded` is True without them).
    #[arg(long, env = "DISABLE_DRY_RUN", value_name = "DISABLE_DRY_RUN", default_value = "false",
          value_parser = parse_bool("DISABLE_DRY_RUN"), action = clap::ArgAction::Set)]
    pub disable_dry_run: bool,
    /// aws: ARC zonal shifts of the cluster are followed (`arc-zonal-shift:GetManagedResource`
    /// every 30 s): nothing launches into a zone shifted away from, its instances are left
    /// alone, and the NodePools that could launch there are told.
    #[arg(long, env = "ENABLE_ZONAL_SHIFT", value_name = "ENABLE_ZONAL_SHIFT", default_value = "false",
          value_parser = parse_bool("ENABLE_ZONAL_SHIFT"), action = clap::ArgAction::Set)]
    pub enable_zonal_shift: bool,
    /// The share of memory taken off every instance type for the hypervisor.
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", value_name = "VM_MEMORY_OVERHEAD_PERCENT",
          default_value = "0.075", value_parser = parse_fraction)]
    pub vm_memory_overhead_percent: f64,
    /// Network interfaces kept out of the max-pods calculation (VPC CNI custom networking).
    #[arg(
        long,
        env = "RESERVED_ENIS",
        value_name = "RESERVED_ENIS",
        default_value = "0"
    )]
    pub reserved_enis: u32,
    /// kwok only: a file of offerings without capacity, one
    /// `CAPACITY_TYPE[:INSTANCE_TYPE[:ZONE]]` a line (`*` for any), read at every launch.
    #[arg(long, value_name = "FILE")]
    pub kwok_no_capacity: Option<std::path::PathBuf>,
    /// kwok only: the instance types of NodePools whose node class is a `KWOKNodeClass`, in
    /// the JSON format of Karpenter's kwok provider; Karpenter kwok's own set when absent.
    #[arg(
        long,
        env = "INSTANCE_TYPES_FILE_PATH",
        value_name = "INSTANCE_TYPES_FILE_PATH"
    )]
    pub instance_types_file_path: Option<std::path::PathBuf>,
    /// How long a batch of pending pods waits for one more pod.
    #[arg(long, env = "BATCH_IDLE_DURATION", value_name = "BATCH_IDLE_DURATION",
          default_value = "1s", value_parser = parse_batch_duration)]
    pub batch_idle_duration: Duration,
    /// The longest a batch of pending pods is held.
    #[arg(long, env = "BATCH_MAX_DURATION", value_name = "BATCH_MAX_DURATION",
          default_value = "10s", value_parser = parse_batch_duration)]
    pub batch_max_duration: Duration,
    /// Kerf's own: how long an insufficient-capacity error keeps its offerings out of launches
    /// (Karpenter's fixed 3 minutes by default; tests that wait for spot to return shorten it).
    #[arg(long, env = "UNAVAILABLE_OFFERINGS_TTL", value_name = "UNAVAILABLE_OFFERINGS_TTL",
          default_value = "3m", value_parser = parse_duration)]
    pub unavailable_offerings_ttl: Duration,
    /// Respect (preferred affinities and ScheduleAnyway spreads count, relaxed one by one
    /// when a pod cannot fit) or Ignore (they are dropped).
    #[arg(long, env = "PREFERENCE_POLICY", value_name = "PREFERENCE_POLICY",
          default_value = "Respect", value_parser = kerf_scheduling::Preferences::parse)]
    pub preference_policy: kerf_scheduling::Preferences,
    /// Strict (a NodePool whose minValues cannot be met takes no pod) or BestEffort (a new
    /// NodeClaim's minValues are lowered to what the instance types give, and it says so).
    #[arg(long, env = "MIN_VALUES_POLICY", value_name = "MIN_VALUES_POLICY",
          default_value = "Strict", value_parser = kerf_scheduling::MinValues::parse)]
    pub min_values_policy: kerf_scheduling::MinValues,
    /// Kerf's own: the least a consolidation move must save, in dollars per hour (0: any
    /// saving, as Karpenter).
    #[arg(long, env = "CONSOLIDATION_MIN_SAVINGS_PER_HOUR",
          value_name = "CONSOLIDATION_MIN_SAVINGS_PER_HOUR", default_value = "0",
          value_parser = parse_dollars)]
    pub consolidation_min_savings_per_hour: f64,
    /// Kerf's own: the least a consolidation move must save, in percent of what the nodes it
    /// disrupts cost (0: any saving, as Karpenter).
    #[arg(long, env = "CONSOLIDATION_MIN_SAVINGS_PERCENT",
          value_name = "CONSOLIDATION_MIN_SAVINGS_PERCENT", default_value = "0",
          value_parser = parse_percent)]
    pub consolidation_min_savings_percent: f64,
    /// Karpenter's feature gates, as `SpotToSpotConsolidation=true,NodeRepair=true`.
    #[arg(long, env = "FEATURE_GATES", value_name = "FEATURE_GATES", default_value = "",
          value_parser = FeatureGates::parse)]
    pub feature_gates: FeatureGates,
    /// Karpenter's AWS-specific gates (NodeClassCEL, DRANVIDIAGPU, DRAEFA, RebootForRepair):
    /// `RebootForRepair=true` makes node repair reboot a node whose accelerator reports an XID
    /// error a reboot clears (grant `ec2:RebootInstances`); the others are accepted as false,
    /// refused as true.
    #[arg(long, env = "AWS_FEATURE_GATES", value_name = "AWS_FEATURE_GATES", default_value = "",
          value_parser = parse_aws_gates)]
    pub aws_feature_gates: String,
    /// debug, info or error.
    #[arg(
        long,
        env = "LOG_LEVEL",
        value_name = "LOG_LEVEL",
        value_enum,
        default_value = "info",
        ignore_case = true
    )]
    pub log_level: LogLevel,
    /// The port of `/metrics`.
    #[arg(
        long,
        env = "METRICS_PORT",
        value_name = "METRICS_PORT",
        default_value = "8080"
    )]
    pub metrics_port: u16,
    /// The port of `/healthz` and `/readyz`.
    #[arg(
        long,
        env = "HEALTH_PROBE_PORT",
        value_name = "HEALTH_PROBE_PORT",
        default_value = "8081"
    )]
    pub health_probe_port: u16,
    /// The address both ports bind to.
    #[arg(
        long,
        env = "BIND_ADDRESS",
        value_name = "BIND_ADDRESS",
        default_value = "0.0.0.0"
    )]
    pub bind_address: std::net::IpAddr,
    /// Requests per second to the API server, on average.
    #[arg(long, env = "KUBE_CLIENT_QPS", value_name = "KUBE_CLIENT_QPS", default_value = "200",
          value_parser = parse_positive("KUBE_CLIENT_QPS"))]
    pub kube_client_qps: f64,
    /// Requests to the API server allowed at once above the average.
    #[arg(long, env = "KUBE_CLIENT_BURST", value_name = "KUBE_CLIENT_BURST",
          default_value = "300", value_parser = clap::value_parser!(u64).range(1..))]
    pub kube_client_burst: u64,
    /// Acts without a leader-election Lease (one replica only).
    #[arg(long, env = "DISABLE_LEADER_ELECTION", value_name = "DISABLE_LEADER_ELECTION",
          default_value = "false", value_parser = parse_bool("DISABLE_LEADER_ELECTION"),
          action = clap::ArgAction::Set)]
    pub disable_leader_election: bool,
    /// The leader-election Lease's name: Karpenter's, so that a Kerf and a Karpenter left
    /// running on one cluster never act at once (one waits on the other's Lease).
    #[arg(
        long,
        env = "LEADER_ELECTION_NAME",
        value_name = "LEADER_ELECTION_NAME",
        default_value = "karpenter-leader-election"
    )]
    pub leader_election_name: String,
    /// The Lease's namespace: the service account's namespace in a pod, else kube-system
    /// (empty, as Karpenter reads it, is unset).
    #[arg(
        long,
        env = "LEADER_ELECTION_NAMESPACE",
        value_name = "LEADER_ELECTION_NAMESPACE"
    )]
    pub leader_election_namespace: Option<String>,
    /// Who holds the Lease: the pod's name in the chart, else the host name and a random
    /// suffix.
    #[arg(
        long,
        env = "LEADER_ELECTION_IDENTITY",
        value_name = "LEADER_ELECTION_IDENTITY"
    )]
    pub leader_election_identity: Option<String>,
}

/// Karpenter's feature gates Kerf reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    /// `SpotToSpotConsolidation`.
    pub spot_to_spot: bool,
    /// `NodeRepair`.
    pub node_repair: bool,
    /// `StaticCapacity`.
    pub static_capacity: bool,
    /// `NodeOverlay`.
    pub node_overlay: bool,
    /// `CapacityBuffer`.
    pub capacity_buffer: bool,
    /// `PodDeletionCostManagement`.
    pub pod_deletion_cost: bool,
    /// `TerminateFirstDrift`.
    pub terminate_first_drift: bool,
    /// `TerminateFirstRepair`.
    pub terminate_first_repair: bool,
    /// `ReservedCapacity` (on by default, as in Karpenter v1.15).
    pub reserved_capacity: bool,
    /// The names given that Karpenter v1.15 does not know, ignored (see [`unknown_gates`]).
    pub unknown: Vec<String>,
}

impl Default for FeatureGates {
    fn default() -> FeatureGates {
        FeatureGates {
            spot_to_spot: false,
            node_repair: false,
            static_capacity: false,
            node_overlay: false,
            capacity_buffer: false,
            pod_deletion_cost: false,
            terminate_first_drift: false,
            terminate_first_repair: false,
            reserved_capacity: true,
            unknown: Vec::new(),
        }
    }
}

/// Karpenter v1.15's settings (core and AWS) Kerf does not act on, with why: each one set in
/// the environment is logged once at start, so a Deployment's `env` carries over unchanged
/// and nobody believes it took effect.
pub const SETTINGS_NOT_ACTED_ON: [(&str, &str); 15] = [
    ("KARPENTER_SERVICE", "Kerf serves no webhook"),
    ("ENABLE_PROFILING", "no pprof handlers"),
    (
        "DISABLE_CONTROLLER_WARMUP",
        "every replica lists the cluster before leading",
    ),
    (
        "DISABLE_CLUSTER_STATE_OBSERVABILITY",
        "the cluster-state metrics are always served",
    ),
    ("MEMORY_LIMIT", "no garbage collector to tune"),
    ("CPU_REQUESTS", "one controller loop"),
    ("LOG_OUTPUT_PATHS", "logs go to standard output"),
    ("LOG_ERROR_OUTPUT_PATHS", "logs go to standard output"),
    (
        "IGNORE_DRA_REQUESTS",
        "Dynamic Resource Allocation claims are not modelled",
    ),
    (
        "LEGACY_NODE_REPAIR",
        "node repair runs as Kerf's one repair controller",
    ),
    (
        "SCHEDULER_CONFIG",
        "default topology spread constraints are not injected",
    ),
    (
        "EKS_CONTROL_PLANE",
        "the cluster is looked up when CLUSTER_ENDPOINT is not given",
    ),
    (
        "AMI_REFRESH_INTERVAL",
        "images are resolved on Kerf's own interval",
    ),
    (
        "SUBNET_REFRESH_INTERVAL",
        "subnets are resolved on Kerf's own interval",
    ),
    (
        "SECURITY_GROUP_REFRESH_INTERVAL",
        "security groups are resolved on Kerf's own interval",
    ),
];

/// Karpenter's AWS-specific gates (`AWS_FEATURE_GATES`). Kerf implements `RebootForRepair`;
/// the others are accepted as false and refused as true.
const AWS_GATES: [&str; 4] = ["NodeClassCEL", "DRANVIDIAGPU", "DRAEFA", "RebootForRepair"];

/// The AWS gates Kerf implements.
const AWS_GATES_IMPLEMENTED: [&str; 1] = ["RebootForRepair"];

/// A boolean as Go's `strconv.ParseBool` reads it, which Karpenter's gates and flags use:
/// `1`, `t`, `T`, `TRUE`, `true`, `True` and their false counterparts.
fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Reads `Gate=bool,Gate=bool` as Karpenter does (spaces around names and values trimmed,
/// empty pairs skipped, values as Go's ParseBool reads them, the last of a name winning):
/// each gate named, with its value.
fn gate_pairs(text: &str) -> Result<std::collections::BTreeMap<&str, bool>, String> {
    let mut out = std::collections::BTreeMap::new();
    for gate in text.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        let Some((name, value)) = gate.split_once('=') else {
            return Err(format!("{gate}: expected Gate=true or Gate=false"));
        };
        let value = go_bool(value.trim())
            .ok_or_else(|| format!("{gate}: the value must be true or false"))?;
        out.insert(name.trim(), value);
    }
    Ok(out)
}

/// The gates Kerf reads from `FEATURE_GATES`: all of Karpenter v1.15's.
const GATES: [&str; 9] = [
    "CapacityBuffer",
    "SpotToSpotConsolidation",
    "NodeRepair",
    "StaticCapacity",
    "NodeOverlay",
    "ReservedCapacity",
    "PodDeletionCostManagement",
    "TerminateFirstDrift",
    "TerminateFirstRepair",
];

/// Reads `AWS_FEATURE_GATES`: every name Karpenter v1.15 knows, only as false (an unknown
/// name is ignored, as Karpenter ignores it, and reported by [`unknown_gates`]).
pub fn parse_aws_gates(text: &str) -> Result<String, String> {
    for (name, value) in gate_pairs(text)? {
        if value && AWS_GATES.contains(&name) && !AWS_GATES_IMPLEMENTED.contains(&name) {
            return Err(format!("{name}=true: Kerf does not implement {name}"));
        }
    }
    Ok(text.to_string())
}

/// Whether `AWS_FEATURE_GATES` (as [`parse_aws_gates`] accepted it) turns `RebootForRepair`
/// on: node repair reboots a node whose accelerator reports an XID error a reboot clears.
pub fn reboot_for_repair(text: &str) -> bool {
    gate_pairs(text).is_ok_and(|g| g.get("RebootForRepair") == Some(&true))
}

/// The names in `FEATURE_GATES` (`aws`: `AWS_FEATURE_GATES`) Karpenter v1.15 does not know:
/// ignored, as Karpenter ignores them (a gate of a later release, or a misspelt one), and
/// logged once at start so that a typo does not pass unseen.
pub fn unknown_gates(text: &str, aws: bool) -> Vec<String> {
    let known = |n: &str| {
        if aws {
            AWS_GATES.contains(&n)
        } else {
            GATES.contains(&n)
        }
    };
    gate_pairs(text)
        .unwrap_or_default()
        .into_keys()
        .filter(|n| !known(n))
        .map(str::to_string)
        .collect()
}

impl FeatureGates {
    /// Reads `Gate=bool,Gate=bool`; gates not named keep Karpenter's defaults, names
    /// Karpenter does not know are ignored.
    pub fn parse(text: &str) -> Result<FeatureGates, String> {
        let mut gates = FeatureGates::default();
        for (name, value) in gate_pairs(text)? {
            match name {
                "SpotToSpotConsolidation" => gates.spot_to_spot = value,
                "NodeRepair" => gates.node_repair = value,
                "StaticCapacity" => gates.static_capacity = value,
                "NodeOverlay" => gates.node_overlay = value,
                "CapacityBuffer" => gates.capacity_buffer = value,
                "PodDeletionCostManagement" => gates.pod_deletion_cost = value,
                "TerminateFirstDrift" => gates.terminate_first_drift = value,
                "TerminateFirstRepair" => gates.terminate_first_repair = value,
                "ReservedCapacity" => gates.reserved_capacity = value,
                _ => {}
            }
        }
        gates.unknown = unknown_gates(text, false);
        Ok(gates)
    }
}

impl Settings {
    /// Checks what one value alone cannot (a batch idle duration longer than the maximum is
    /// Karpenter's too: the window ends at the maximum).
    pub fn validate(&self) -> Result<(), String> {
        if self.metrics_port == self.health_probe_port {
            return Err(format!(
                "METRICS_PORT and HEALTH_PROBE_PORT must differ (both {})",
                self.metrics_port
            ));
        }
        Ok(())
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    match parse_go_duration(text) {
        Ok(d) if d.is_zero() => Err("must be longer than 0s".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// A batch window's end as Karpenter reads it: any Go duration (`1.5s`, `500us`, `0`); one
/// of 0 or less ends the window at once.
fn parse_batch_duration(text: &str) -> Result<Duration, String> {
    go_duration(text).ok_or_else(|| {
        format!("{text:?} is not a duration (a number and unit such as 1s, 500ms, 1.5s)")
    })
}

/// Go's `time.ParseDuration` ([`kerf_api::duration::parse_go_duration_nanos`]), negative
/// durations read as zero.
fn go_duration(text: &str) -> Option<Duration> {
    let nanos = kerf_api::duration::parse_go_duration_nanos(text).ok()?;
    Some(Duration::from_nanos(u64::try_from(nanos).unwrap_or(0)))
}

fn parse_dollars(text: &str) -> Result<f64, String> {
    match text.trim().trim_start_matches('$').parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err("must be dollars per hour, 0 or more (0.05 is 5 cents an hour)".into()),
    }
}

fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err("must be a percent from 0 to 100 (10 is 10 %)".into()),
    }
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        _ => Err("must be a fraction from 0 up to 1 (0.075 is 7.5 %)".into()),
    }
}

fn parse_positive(name: &'static str) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |text| match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{name} must be a number above 0")),
    }
}

/// A boolean setting as Karpenter reads it (Go's ParseBool; empty is false).
fn parse_bool(name: &'static str) -> impl Fn(&str) -> Result<bool, String> + Clone {
    move |text| match text {
        "" => Ok(false),
        t => go_bool(t).ok_or_else(|| format!("{name} must be true or false")),
    }
}

#[cfg(test)]
mod tests {
    use super::{FeatureGates, Settings};
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<Settings, String> {
        let mut all = vec!["kerf-operator"];
        all.extend_from_slice(args);
        Settings::try_parse_from(all).map_err(|e| e.to_string())
    }

    #[test]
    fn karpenters_defaults() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.batch_idle_duration.as_secs(), 1);
        assert_eq!(s.batch_max_duration.as_secs(), 10);
        assert_eq!((s.metrics_port, s.health_probe_port), (8080, 8081));
        assert_eq!((s.kube_client_qps, s.kube_client_burst), (200.0, 300));
        assert_eq!(s.vm_memory_overhead_percent, 0.075);
        assert_eq!(s.feature_gates, FeatureGates::default());
        assert!(!s.disable_leader_election && !s.isolated_vpc);
        assert_eq!(s.preference_policy, kerf_scheduling::Preferences::Respect);
        assert_eq!(s.min_values_policy, kerf_scheduling::MinValues::Strict);
        let s = parse(&[
            "--preference-policy",
            "Ignore",
            "--min-values-policy",
            "BestEffort",
            "--aws-feature-gates",
            "NodeClassCEL=false,DRANVIDIAGPU=false,DRAEFA=false,RebootForRepair=false",
        ])
        .unwrap();
        assert_eq!(s.preference_policy, kerf_scheduling::Preferences::Ignore);
        assert_eq!(s.min_values_policy, kerf_scheduling::MinValues::BestEffort);
        let s = parse(&[
            "--consolidation-min-savings-per-hour",
            "$0.05",
            "--consolidation-min-savings-percent",
            "10%",
        ])
        .unwrap();
        assert_eq!(s.consolidation_min_savings_per_hour, 0.05);
        assert_eq!(s.consolidation_min_savings_percent, 10.0);
    }

    #[test]
    fn reboot_for_repair_is_the_aws_gate_kerf_takes_true() {
        let s = parse(&["--aws-feature-gates", "RebootForRepair=true,DRAEFA=false"]).unwrap();
        assert!(super::reboot_for_repair(&s.aws_feature_gates));
        assert!(!super::reboot_for_repair("RebootForRepair=false"));
        assert!(!super::reboot_for_repair(""));
        assert!(parse(&["--aws-feature-gates", "DRAEFA=true"]).is_err());
    }

    #[test]
    fn a_bad_value_names_its_setting() {
        for (args, name) in [
            (
                &["--batch-idle-duration", "soon"][..],
                "BATCH_IDLE_DURATION",
            ),
            (&["--batch-max-duration", "1x"], "BATCH_MAX_DURATION"),
            (&["--metrics-port", "http"], "METRICS_PORT"),
            (&["--kube-client-qps=-1"], "KUBE_CLIENT_QPS"),
            (&["--kube-client-burst", "0"], "KUBE_CLIENT_BURST"),
            (
                &["--vm-memory-overhead-percent", "7.5"],
                "VM_MEMORY_OVERHEAD_PERCENT",
            ),
            (&["--isolated-vpc", "yes"], "ISOLATED_VPC"),
            (&["--log-level", "loud"], "LOG_LEVEL"),
            (&["--feature-gates", "NodeRepair=yes"], "FEATURE_GATES"),
            (&["--preference-policy", "respect"], "PREFERENCE_POLICY"),
            (&["--min-values-policy", "Loose"], "MIN_VALUES_POLICY"),
            (
                &["--aws-feature-gates", "NodeClassCEL=true"],
                "AWS_FEATURE_GATES",
            ),
            (&["--aws-feature-gates", "Zonal"], "AWS_FEATURE_GATES"),
            (
                &["--consolidation-min-savings-per-hour=-0.1"],
                "CONSOLIDATION_MIN_SAVINGS_PER_HOUR",
            ),
            (
                &["--consolidation-min-savings-percent", "150"],
                "CONSOLIDATION_MIN_SAVINGS_PERCENT",
            ),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(name), "{args:?}: {e}");
        }
    }

    /// What Karpenter v1.15 accepts, Kerf accepts: any Go duration for a batch window (one
    /// idle longer than the maximum ends at the maximum), booleans as Go's ParseBool reads
    /// them, gate names it does not know (ignored, and reported).
    #[test]
    fn values_karpenter_accepts_are_accepted() {
        let s = parse(&["--batch-idle-duration", "20s"]).unwrap();
        assert!(s.validate().is_ok());
        for (text, nanos) in [
            ("0", 0),
            ("0s", 0),
            ("1.5s", 1_500_000_000),
            ("500us", 500_000),
            ("2µs", 2_000),
            ("1h2m3.5s", 3_723_500_000_000),
            ("-1s", 0),
            ("+10ms", 10_000_000),
        ] {
            let s = parse(&[&format!("--batch-max-duration={text}")]).unwrap();
            assert_eq!(s.batch_max_duration.as_nanos(), nanos, "{text}");
        }
        for bad in ["", "1", "s", ".s", "1d", "1.2.3s", "--1s"] {
            let arg = format!("--batch-max-duration={bad}");
            assert!(parse(&[&arg]).is_err(), "{bad:?}");
        }
        for (text, value) in [("T", true), ("1", true), ("TRUE", true), ("f", false)] {
            let s = parse(&["--isolated-vpc", text]).unwrap();
            assert_eq!(s.isolated_vpc, value, "{text}");
        }
        assert!(parse(&["--isolated-vpc", "tRuE"]).is_err());
        let s = parse(&[
            "--feature-gates",
            "NodeRepair=True, Foo=1,nodeRepair=false,CapacityBuffer=true,CapacityBuffer=false",
            "--aws-feature-gates",
            "ZonalShift=true,NodeClassCEL=F",
        ])
        .unwrap();
        assert!(s.feature_gates.node_repair);
        assert_eq!(s.feature_gates.unknown, ["Foo", "nodeRepair"]);
        assert_eq!(
            super::unknown_gates(&s.aws_feature_gates, true),
            ["ZonalShift"]
        );
    }

    #[test]
    fn feature_gates_as_karpenters_chart_writes_them() {
        let g = FeatureGates::parse(
            "ReservedCapacity=false,SpotToSpotConsolidation=true,NodeRepair=false,\
             NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false",
        )
        .unwrap();
        assert!(g.spot_to_spot && !g.node_repair && !g.static_capacity);
        assert!(
            FeatureGates::parse("StaticCapacity=true")
                .unwrap()
                .static_capacity
        );
        assert!(
            FeatureGates::parse("TerminateFirstRepair=true")
                .unwrap()
                .terminate_first_repair
        );
        assert!(
            !FeatureGates::parse("CapacityBuffer=false")
                .unwrap()
                .capacity_buffer
        );
        assert!(
            FeatureGates::parse("CapacityBuffer=true")
                .unwrap()
                .capacity_buffer
        );
        // Karpenter v1.15's default: reservations on unless turned off
        assert!(FeatureGates::parse("").unwrap().reserved_capacity);
        assert!(
            !FeatureGates::parse("ReservedCapacity=false")
                .unwrap()
                .reserved_capacity
        );
        assert!(
            FeatureGates::parse("NodeOverlay=true")
                .unwrap()
                .node_overlay
        );
        assert!(FeatureGates::parse("NodeRepair=maybe").is_err());
    }
}
