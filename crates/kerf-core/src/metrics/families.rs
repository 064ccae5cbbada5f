//! Every `karpenter_*` metric family Karpenter v1.15 (core and AWS provider) registers, as it
//! declares them: name (counters with their `_total`), type, help, label names and buckets.
//! The operator's `/metrics` and the simulator's `--metrics` register each of them, and the
//! test `metric_families_are_karpenters` compares this list with the registry of Karpenter's
//! own Go packages.

use super::{Kind, Spec};

/// The Node labels Karpenter copies onto its node metrics (the AWS provider's well-known
/// labels), by metric label.
pub const NODE_LABEL_KEYS: [(&str, &str); 36] = [
    ("nodepool", "karpenter.sh/nodepool"),
    ("arch", "kubernetes.io/arch"),
    (
        "capacity_reservation_id",
        "karpenter.k8s.aws/capacity-reservation-id",
    ),
    (
        "capacity_reservation_interruptible",
        "karpenter.k8s.aws/capacity-reservation-interruptible",
    ),
    (
        "capacity_reservation_type",
        "karpenter.k8s.aws/capacity-reservation-type",
    ),
    ("capacity_type", "karpenter.sh/capacity-type"),
    (
        "instance_accelerator_count",
        "karpenter.k8s.aws/instance-accelerator-count",
    ),
    (
        "instance_accelerator_manufacturer",
        "karpenter.k8s.aws/instance-accelerator-manufacturer",
    ),
    (
        "instance_accelerator_name",
        "karpenter.k8s.aws/instance-accelerator-name",
    ),
    (
        "instance_capability_flex",
        "karpenter.k8s.aws/instance-capability-flex",
    ),
    ("instance_category", "karpenter.k8s.aws/instance-category"),
    ("instance_cpu", "karpenter.k8s.aws/instance-cpu"),
    (
        "instance_cpu_manufacturer",
        "karpenter.k8s.aws/instance-cpu-manufacturer",
    ),
    (
        "instance_cpu_sustained_clock_speed_mhz",
        "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    ),
    (
        "instance_ebs_bandwidth",
        "karpenter.k8s.aws/instance-ebs-bandwidth",
    ),
    (
        "instance_encryption_in_transit_supported",
        "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    ),
    ("instance_family", "karpenter.k8s.aws/instance-family"),
    (
        "instance_generation",
        "karpenter.k8s.aws/instance-generation",
    ),
    ("instance_gpu_count", "karpenter.k8s.aws/instance-gpu-count"),
    (
        "instance_gpu_manufacturer",
        "karpenter.k8s.aws/instance-gpu-manufacturer",
    ),
    (
        "instance_gpu_memory",
        "karpenter.k8s.aws/instance-gpu-memory",
    ),
    ("instance_gpu_name", "karpenter.k8s.aws/instance-gpu-name"),
    (
        "instance_hypervisor",
        "karpenter.k8s.aws/instance-hypervisor",
    ),
    (
        "instance_local_nvme",
        "karpenter.k8s.aws/instance-local-nvme",
    ),
    ("instance_memory", "karpenter.k8s.aws/instance-memory"),
    (
        "instance_network_bandwidth",
        "karpenter.k8s.aws/instance-network-bandwidth",
    ),
    ("instance_size", "karpenter.k8s.aws/instance-size"),
    ("instance_tenancy", "karpenter.k8s.aws/instance-tenancy"),
    ("instance_type", "node.kubernetes.io/instance-type"),
    ("os", "kubernetes.io/os"),
    ("placement_group_id", "karpenter.k8s.aws/placement-group-id"),
    (
        "placement_group_partition",
        "karpenter.k8s.aws/placement-group-partition",
    ),
    ("region", "topology.kubernetes.io/region"),
    ("windows_build", "node.kubernetes.io/windows-build"),
    ("zone", "topology.kubernetes.io/zone"),
    ("zone_id", "topology.k8s.aws/zone-id"),
];

/// The labels of a node metric: the copied Node labels, then the node's name, its phase and
/// whether Kerf manages it.
pub const NODE: &[&str] = &[
    "nodepool",
    "arch",
    "capacity_reservation_id",
    "capacity_reservation_interruptible",
    "capacity_reservation_type",
    "capacity_type",
    "instance_accelerator_count",
    "instance_accelerator_manufacturer",
    "instance_accelerator_name",
    "instance_capability_flex",
    "instance_category",
    "instance_cpu",
    "instance_cpu_manufacturer",
    "instance_cpu_sustained_clock_speed_mhz",
    "instance_ebs_bandwidth",
    "instance_encryption_in_transit_supported",
    "instance_family",
    "instance_generation",
    "instance_gpu_count",
    "instance_gpu_manufacturer",
    "instance_gpu_memory",
    "instance_gpu_name",
    "instance_hypervisor",
    "instance_local_nvme",
    "instance_memory",
    "instance_network_bandwidth",
    "instance_size",
    "instance_tenancy",
    "instance_type",
    "os",
    "placement_group_id",
    "placement_group_partition",
    "region",
    "windows_build",
    "zone",
    "zone_id",
    "node_name",
    "phase",
    "managed",
];

/// A node metric of one resource: [`NODE`], then `resource_type`.
pub const NODE_WITH_RESOURCE: &[&str] = &[
    "nodepool",
    "arch",
    "capacity_reservation_id",
    "capacity_reservation_interruptible",
    "capacity_reservation_type",
    "capacity_type",
    "instance_accelerator_count",
    "instance_accelerator_manufacturer",
    "instance_accelerator_name",
    "instance_capability_flex",
    "instance_category",
    "instance_cpu",
    "instance_cpu_manufacturer",
    "instance_cpu_sustained_clock_speed_mhz",
    "instance_ebs_bandwidth",
    "instance_encryption_in_transit_supported",
    "instance_family",
    "instance_generation",
    "instance_gpu_count",
    "instance_gpu_manufacturer",
    "instance_gpu_memory",
    "instance_gpu_name",
    "instance_hypervisor",
    "instance_local_nvme",
    "instance_memory",
    "instance_network_bandwidth",
    "instance_size",
    "instance_tenancy",
    "instance_type",
    "os",
    "placement_group_id",
    "placement_group_partition",
    "region",
    "windows_build",
    "zone",
    "zone_id",
    "node_name",
    "phase",
    "managed",
    "resource_type",
];

/// client_golang's duration buckets as Karpenter's `metrics.DurationBuckets()` lists them.
const DURATION: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];
/// The AWS batcher's batch sizes.
const BATCH_SIZE: &[f64] = &[
    1.0, 2.0, 4.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0,
    125.0, 150.0, 175.0, 200.0, 225.0, 250.0, 275.0, 300.0, 350.0, 400.0, 450.0, 500.0, 550.0,
    600.0, 700.0, 800.0, 900.0, 1000.0,
];
/// client_golang's default buckets.
const CLOUD_CALL: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Balanced consolidation scores.
const SCORE: &[f64] = &[0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0];
/// Powers of two from 1 s to 1024 s.
const INSTANCE_TERMINATION: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];
/// Powers of two from 1 s to 2048 s.
const NODECLAIM_TERMINATION: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
];
/// From 15 minutes to 30 days.
const LIFETIME: &[f64] = &[
    900.0, 1800.0, 2700.0, 3600.0, 7200.0, 14400.0, 21600.0, 28800.0, 36000.0, 43200.0, 57600.0,
    72000.0, 86400.0, 172800.0, 259200.0, 432000.0, 864000.0, 1296000.0, 1728000.0, 2160000.0,
    2592000.0,
];
/// Powers of two from 10 s to 1280 s.
const REBOOT: &[f64] = &[10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0, 1280.0];

/// `karpenter_build_info`.
pub const BUILD_INFO: Spec = Spec {
    name: "karpenter_build_info",
    kind: Kind::Gauge,
    help: "A metric with a constant '1' value labeled by version from which karpenter was built.",
    labels: &["commit", "goarch", "goversion", "version"],
    buckets: &[],
};
/// `karpenter_cloudprovider_batcher_batch_size`.
pub const CLOUDPROVIDER_BATCHER_BATCH_SIZE: Spec = Spec {
    name: "karpenter_cloudprovider_batcher_batch_size",
    kind: Kind::Histogram,
    help: "Size of the request batch per batcher",
    labels: &["batcher"],
    buckets: BATCH_SIZE,
};
/// `karpenter_cloudprovider_batcher_batch_time_seconds`.
pub const CLOUDPROVIDER_BATCHER_BATCH_TIME_SECONDS: Spec = Spec {
    name: "karpenter_cloudprovider_batcher_batch_time_seconds",
    kind: Kind::Histogram,
    help: "Duration of the batching window per batcher",
    labels: &["batcher"],
    buckets: DURATION,
};
/// `karpenter_cloudprovider_duration_seconds`.
pub const CLOUDPROVIDER_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_cloudprovider_duration_seconds",
    kind: Kind::Histogram,
    help: "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
    labels: &["controller", "method", "provider"],
    buckets: CLOUD_CALL,
};
/// `karpenter_cloudprovider_errors_total`.
pub const CLOUDPROVIDER_ERRORS: Spec = Spec {
    name: "karpenter_cloudprovider_errors_total",
    kind: Kind::Counter,
    help: "Total number of errors returned from CloudProvider calls.",
    labels: &["controller", "error", "method", "nodepool", "provider"],
    buckets: &[],
};
/// `karpenter_cloudprovider_instance_launch_failures_total`.
pub const CLOUDPROVIDER_INSTANCE_LAUNCH_FAILURES: Spec = Spec {
    name: "karpenter_cloudprovider_instance_launch_failures_total",
    kind: Kind::Counter,
    help: "Number of instance launch (CreateFleet offering) failures, dimensioned by availability zone, zone ID, capacity type, and launch failure reason.",
    labels: &["capacity_type", "reason", "zone", "zone_id"],
    buckets: &[],
};
/// `karpenter_cloudprovider_instance_termination_failures_total`.
pub const CLOUDPROVIDER_INSTANCE_TERMINATION_FAILURES: Spec = Spec {
    name: "karpenter_cloudprovider_instance_termination_failures_total",
    kind: Kind::Counter,
    help: "Number of instance termination (TerminateInstances) failures, dimensioned by availability zone and zone ID.",
    labels: &["zone", "zone_id"],
    buckets: &[],
};
/// `karpenter_cloudprovider_instance_type_cpu_cores`.
pub const CLOUDPROVIDER_INSTANCE_TYPE_CPU_CORES: Spec = Spec {
    name: "karpenter_cloudprovider_instance_type_cpu_cores",
    kind: Kind::Gauge,
    help: "VCPUs cores for a given instance type.",
    labels: &["instance_type"],
    buckets: &[],
};
/// `karpenter_cloudprovider_instance_type_memory_bytes`.
pub const CLOUDPROVIDER_INSTANCE_TYPE_MEMORY_BYTES: Spec = Spec {
    name: "karpenter_cloudprovider_instance_type_memory_bytes",
    kind: Kind::Gauge,
    help: "Memory, in bytes, for a given instance type.",
    labels: &["instance_type"],
    buckets: &[],
};
/// `karpenter_cloudprovider_instance_type_offering_available`.
pub const CLOUDPROVIDER_INSTANCE_TYPE_OFFERING_AVAILABLE: Spec = Spec {
    name: "karpenter_cloudprovider_instance_type_offering_available",
    kind: Kind::Gauge,
    help: "Instance type offering availability, based on instance type, capacity type, and zone",
    labels: &["capacity_type", "instance_type", "zone"],
    buckets: &[],
};
/// `karpenter_cloudprovider_instance_type_offering_price_estimate`.
pub const CLOUDPROVIDER_INSTANCE_TYPE_OFFERING_PRICE_ESTIMATE: Spec = Spec {
    name: "karpenter_cloudprovider_instance_type_offering_price_estimate",
    kind: Kind::Gauge,
    help: "Instance type offering estimated hourly price used when making informed decisions on node cost calculation, based on instance type, capacity type, and zone.",
    labels: &["capacity_type", "instance_type", "zone"],
    buckets: &[],
};
/// `karpenter_cluster_state_node_count`.
pub const CLUSTER_STATE_NODE_COUNT: Spec = Spec {
    name: "karpenter_cluster_state_node_count",
    kind: Kind::Gauge,
    help: "Current count of nodes in cluster state",
    labels: &[],
    buckets: &[],
};
/// `karpenter_cluster_state_synced`.
pub const CLUSTER_STATE_SYNCED: Spec = Spec {
    name: "karpenter_cluster_state_synced",
    kind: Kind::Gauge,
    help: "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are stored in the APIServer have the same representation as Karpenter's cluster state",
    labels: &[],
    buckets: &[],
};
/// `karpenter_cluster_state_unsynced_time_seconds`.
pub const CLUSTER_STATE_UNSYNCED_TIME_SECONDS: Spec = Spec {
    name: "karpenter_cluster_state_unsynced_time_seconds",
    kind: Kind::Gauge,
    help: "The time for which cluster state is not synced",
    labels: &[],
    buckets: &[],
};
/// `karpenter_cluster_utilization_percent`.
pub const CLUSTER_UTILIZATION_PERCENT: Spec = Spec {
    name: "karpenter_cluster_utilization_percent",
    kind: Kind::Gauge,
    help: "Utilization of allocatable resources by pod requests",
    labels: &["resource_type"],
    buckets: &[],
};
/// `karpenter_consolidation_moves_total`.
pub const CONSOLIDATION_MOVES: Spec = Spec {
    name: "karpenter_consolidation_moves_total",
    kind: Kind::Counter,
    help: "Number of balanced consolidation moves. Labeled by decision, NodePool, and policy.",
    labels: &["decision", "nodepool", "policy"],
    buckets: &[],
};
/// `karpenter_consolidation_score`.
pub const CONSOLIDATION_SCORE: Spec = Spec {
    name: "karpenter_consolidation_score",
    kind: Kind::Histogram,
    help: "Score of balanced consolidation moves. Labeled by decision, NodePool, and policy.",
    labels: &["decision", "nodepool", "policy"],
    buckets: SCORE,
};
/// `karpenter_ec2nodeclasses_userdata_bytes`.
pub const EC2NODECLASSES_USERDATA_BYTES: Spec = Spec {
    name: "karpenter_ec2nodeclasses_userdata_bytes",
    kind: Kind::Gauge,
    help: "Size in bytes of the rendered user data (raw, pre-base64) for the EC2NodeClass",
    labels: &["nodeclass"],
    buckets: &[],
};
/// `karpenter_interruption_deleted_messages_total`.
pub const INTERRUPTION_DELETED_MESSAGES: Spec = Spec {
    name: "karpenter_interruption_deleted_messages_total",
    kind: Kind::Counter,
    help: "Count of messages deleted from the SQS queue.",
    labels: &[],
    buckets: &[],
};
/// `karpenter_interruption_instance_status_unhealthy_total`.
pub const INTERRUPTION_INSTANCE_STATUS_UNHEALTHY: Spec = Spec {
    name: "karpenter_interruption_instance_status_unhealthy_total",
    kind: Kind::Counter,
    help: "Count of unique unhealthy instance statuses detected from EC2 DescribeInstanceStatus. Broken down by status check category.",
    labels: &["category"],
    buckets: &[],
};
/// `karpenter_interruption_message_queue_duration_seconds`.
pub const INTERRUPTION_MESSAGE_QUEUE_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_interruption_message_queue_duration_seconds",
    kind: Kind::Histogram,
    help: "Amount of time an interruption message is on the queue before it is processed by karpenter.",
    labels: &[],
    buckets: DURATION,
};
/// `karpenter_interruption_received_messages_total`.
pub const INTERRUPTION_RECEIVED_MESSAGES: Spec = Spec {
    name: "karpenter_interruption_received_messages_total",
    kind: Kind::Counter,
    help: "Count of messages received from the SQS queue. Broken down by message type and whether the message was actionable.",
    labels: &["message_type"],
    buckets: &[],
};
/// `karpenter_nodeclaims_created_total`.
pub const NODECLAIMS_CREATED: Spec = Spec {
    name: "karpenter_nodeclaims_created_total",
    kind: Kind::Counter,
    help: "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created, the owning nodepool, and if min values was relaxed for this nodeclaim.",
    labels: &["min_values_relaxed", "nodepool", "reason"],
    buckets: &[],
};
/// `karpenter_nodeclaims_disrupted_total`.
pub const NODECLAIMS_DISRUPTED: Spec = Spec {
    name: "karpenter_nodeclaims_disrupted_total",
    kind: Kind::Counter,
    help: "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted, the owning nodepool, the capacity type, the consolidation policy, and the termination mode.",
    labels: &[
        "capacity_type",
        "consolidation_policy",
        "nodepool",
        "reason",
        "termination_mode",
    ],
    buckets: &[],
};
/// `karpenter_nodeclaims_instance_termination_duration_seconds`.
pub const NODECLAIMS_INSTANCE_TERMINATION_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_nodeclaims_instance_termination_duration_seconds",
    kind: Kind::Histogram,
    help: "Duration of CloudProvider Instance termination in seconds.",
    labels: &["nodepool"],
    buckets: INSTANCE_TERMINATION,
};
/// `karpenter_nodeclaims_terminated_total`.
pub const NODECLAIMS_TERMINATED: Spec = Spec {
    name: "karpenter_nodeclaims_terminated_total",
    kind: Kind::Counter,
    help: "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity type, and zone.",
    labels: &["capacity_type", "nodepool", "zone"],
    buckets: &[],
};
/// `karpenter_nodeclaims_termination_duration_seconds`.
pub const NODECLAIMS_TERMINATION_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_nodeclaims_termination_duration_seconds",
    kind: Kind::Histogram,
    help: "Duration of NodeClaim termination in seconds.",
    labels: &["nodepool"],
    buckets: NODECLAIM_TERMINATION,
};
/// `karpenter_nodeclaims_unhealthy_disrupted_total`.
pub const NODECLAIMS_UNHEALTHY_DISRUPTED: Spec = Spec {
    name: "karpenter_nodeclaims_unhealthy_disrupted_total",
    kind: Kind::Counter,
    help: "Number of unhealthy nodeclaims disrupted in total by node repair. Labeled by the condition the node was disrupted on, the owning nodepool, the capacity type, the image ID, and the termination mode.",
    labels: &[
        "capacity_type",
        "condition",
        "image_id",
        "nodepool",
        "termination_mode",
    ],
    buckets: &[],
};
/// `karpenter_nodepools_allowed_disruptions`.
pub const NODEPOOLS_ALLOWED_DISRUPTIONS: Spec = Spec {
    name: "karpenter_nodepools_allowed_disruptions",
    kind: Kind::Gauge,
    help: "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. Labeled by NodePool. Note that allowed disruptions can change very rapidly, as new nodes may be created and others may be deleted at any point.",
    labels: &["nodepool", "reason"],
    buckets: &[],
};
/// `karpenter_nodepools_cost_total`.
pub const NODEPOOLS_COST: Spec = Spec {
    name: "karpenter_nodepools_cost_total",
    kind: Kind::Gauge,
    help: "Total cost of the nodepool from Karpenter's perspective. Units are determined by the cloud provider. Not an authoritative source for billing. Includes modifications due to NodeOverlays",
    labels: &["nodepool"],
    buckets: &[],
};
/// `karpenter_nodepools_cost_tracker_errors_total`.
pub const NODEPOOLS_COST_TRACKER_ERRORS: Spec = Spec {
    name: "karpenter_nodepools_cost_tracker_errors_total",
    kind: Kind::Counter,
    help: "Number of errors encountered during cost tracking operations. Labeled by nodepool.",
    labels: &["nodepool"],
    buckets: &[],
};
/// `karpenter_nodepools_limit`.
pub const NODEPOOLS_LIMIT: Spec = Spec {
    name: "karpenter_nodepools_limit",
    kind: Kind::Gauge,
    help: "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name and resource type.",
    labels: &["nodepool", "resource_type"],
    buckets: &[],
};
/// `karpenter_nodepools_nodes_consuming_budgets`.
pub const NODEPOOLS_NODES_CONSUMING_BUDGETS: Spec = Spec {
    name: "karpenter_nodepools_nodes_consuming_budgets",
    kind: Kind::Gauge,
    help: "The number of nodes consuming the budget of a nodepool at a point in time. Labeled by NodePool.",
    labels: &["nodepool", "reason"],
    buckets: &[],
};
/// `karpenter_nodepools_usage`.
pub const NODEPOOLS_USAGE: Spec = Spec {
    name: "karpenter_nodepools_usage",
    kind: Kind::Gauge,
    help: "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and resource type.",
    labels: &["nodepool", "resource_type"],
    buckets: &[],
};
/// `karpenter_nodes_allocatable`.
pub const NODES_ALLOCATABLE: Spec = Spec {
    name: "karpenter_nodes_allocatable",
    kind: Kind::Gauge,
    help: "Node allocatable are the resources allocatable by nodes.",
    labels: NODE_WITH_RESOURCE,
    buckets: &[],
};
/// `karpenter_nodes_created_total`.
pub const NODES_CREATED: Spec = Spec {
    name: "karpenter_nodes_created_total",
    kind: Kind::Counter,
    help: "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
    labels: &["nodepool", "zone"],
    buckets: &[],
};
/// `karpenter_nodes_current_lifetime_seconds`.
pub const NODES_CURRENT_LIFETIME_SECONDS: Spec = Spec {
    name: "karpenter_nodes_current_lifetime_seconds",
    kind: Kind::Gauge,
    help: "Node age in seconds",
    labels: NODE,
    buckets: &[],
};
/// `karpenter_nodes_drained_total`.
pub const NODES_DRAINED: Spec = Spec {
    name: "karpenter_nodes_drained_total",
    kind: Kind::Counter,
    help: "The total number of nodes drained by Karpenter",
    labels: &["nodepool"],
    buckets: &[],
};
/// `karpenter_nodes_lifetime_duration_seconds`.
pub const NODES_LIFETIME_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_nodes_lifetime_duration_seconds",
    kind: Kind::Histogram,
    help: "The lifetime duration of the nodes since creation.",
    labels: &["nodepool"],
    buckets: LIFETIME,
};
/// `karpenter_nodes_reboot_duration_seconds`.
pub const NODES_REBOOT_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_nodes_reboot_duration_seconds",
    kind: Kind::Histogram,
    help: "Duration of the full reboot action from request to terminal outcome, labeled by result.",
    labels: &["result"],
    buckets: REBOOT,
};
/// `karpenter_nodes_reboot_recovery_duration_seconds`.
pub const NODES_REBOOT_RECOVERY_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_nodes_reboot_recovery_duration_seconds",
    kind: Kind::Histogram,
    help: "Time from issuing a reboot until the node proved a new boot and rejoined (bootID changed + Ready). Recorded on successful reboots only.",
    labels: &[],
    buckets: REBOOT,
};
/// `karpenter_nodes_reboots_total`.
pub const NODES_REBOOTS: Spec = Spec {
    name: "karpenter_nodes_reboots_total",
    kind: Kind::Counter,
    help: "Number of node reboots carried out by Karpenter, labeled by terminal result (succeeded, provider_error, recovery_timeout).",
    labels: &["result"],
    buckets: &[],
};
/// `karpenter_nodes_system_overhead`.
pub const NODES_SYSTEM_OVERHEAD: Spec = Spec {
    name: "karpenter_nodes_system_overhead",
    kind: Kind::Gauge,
    help: "Node system daemon overhead are the resources reserved for system overhead, the difference between the node's capacity and allocatable values are reported by the status.",
    labels: NODE_WITH_RESOURCE,
    buckets: &[],
};
/// `karpenter_nodes_terminated_total`.
pub const NODES_TERMINATED: Spec = Spec {
    name: "karpenter_nodes_terminated_total",
    kind: Kind::Counter,
    help: "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
    labels: &["nodepool", "zone"],
    buckets: &[],
};
/// `karpenter_nodes_termination_duration_seconds`.
pub const NODES_TERMINATION_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_nodes_termination_duration_seconds",
    kind: Kind::Summary,
    help: "The time taken between a node's deletion request and the removal of its finalizer",
    labels: &["nodepool"],
    buckets: &[],
};
/// `karpenter_nodes_total_daemon_limits`.
pub const NODES_TOTAL_DAEMON_LIMITS: Spec = Spec {
    name: "karpenter_nodes_total_daemon_limits",
    kind: Kind::Gauge,
    help: "Node total daemon limits are the resources specified by DaemonSet pod limits.",
    labels: NODE_WITH_RESOURCE,
    buckets: &[],
};
/// `karpenter_nodes_total_daemon_requests`.
pub const NODES_TOTAL_DAEMON_REQUESTS: Spec = Spec {
    name: "karpenter_nodes_total_daemon_requests",
    kind: Kind::Gauge,
    help: "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
    labels: NODE_WITH_RESOURCE,
    buckets: &[],
};
/// `karpenter_nodes_total_pod_limits`.
pub const NODES_TOTAL_POD_LIMITS: Spec = Spec {
    name: "karpenter_nodes_total_pod_limits",
    kind: Kind::Gauge,
    help: "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods.",
    labels: NODE_WITH_RESOURCE,
    buckets: &[],
};
/// `karpenter_nodes_total_pod_requests`.
pub const NODES_TOTAL_POD_REQUESTS: Spec = Spec {
    name: "karpenter_nodes_total_pod_requests",
    kind: Kind::Gauge,
    help: "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
    labels: NODE_WITH_RESOURCE,
    buckets: &[],
};
/// `karpenter_pod_deletion_cost_nodes_with_pending_annotation_writes`.
pub const POD_DELETION_COST_NODES_WITH_PENDING_ANNOTATION_WRITES: Spec = Spec {
    name: "karpenter_pod_deletion_cost_nodes_with_pending_annotation_writes",
    kind: Kind::Gauge,
    help: "Number of nodes with at least one pending pod-deletion-cost annotation change enqueued this cycle.",
    labels: &["nodepool"],
    buckets: &[],
};
/// `karpenter_pod_deletion_cost_pod_annotation_writes_total`.
pub const POD_DELETION_COST_POD_ANNOTATION_WRITES: Spec = Spec {
    name: "karpenter_pod_deletion_cost_pod_annotation_writes_total",
    kind: Kind::Counter,
    help: "Number of pod-deletion-cost annotation write attempts. Labeled by outcome.",
    labels: &["result"],
    buckets: &[],
};
/// `karpenter_pods_bound_duration_seconds`.
pub const PODS_BOUND_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_pods_bound_duration_seconds",
    kind: Kind::Histogram,
    help: "The time from pod creation until the pod is bound.",
    labels: &["dynamic_resources"],
    buckets: DURATION,
};
/// `karpenter_pods_disruption_initiated_total`.
pub const PODS_DISRUPTION_INITIATED: Spec = Spec {
    name: "karpenter_pods_disruption_initiated_total",
    kind: Kind::Counter,
    help: "Number of pod disruptions initiated in total by Karpenter, incremented by the reschedulable pod count whenever the underlying nodeclaim is disrupted. Labeled by reason the nodeclaim was disrupted, the owning nodepool, the capacity type, the consolidation policy, and the termination mode. Pods owned by DaemonSets and mirror pods are excluded.",
    labels: &[
        "capacity_type",
        "consolidation_policy",
        "nodepool",
        "reason",
        "termination_mode",
    ],
    buckets: &[],
};
/// `karpenter_pods_drained_total`.
pub const PODS_DRAINED: Spec = Spec {
    name: "karpenter_pods_drained_total",
    kind: Kind::Counter,
    help: "The total number of pods drained during node termination by Karpenter, labeled by reason",
    labels: &["reason"],
    buckets: &[],
};
/// `karpenter_pods_eviction_requests_total`.
pub const PODS_EVICTION_REQUESTS: Spec = Spec {
    name: "karpenter_pods_eviction_requests_total",
    kind: Kind::Counter,
    help: "The total number of pod eviction requests made by Karpenter, labeled by response code",
    labels: &["code"],
    buckets: &[],
};
/// `karpenter_pods_provisioning_bound_duration_seconds`.
pub const PODS_PROVISIONING_BOUND_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_pods_provisioning_bound_duration_seconds",
    kind: Kind::Histogram,
    help: "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this calculated from a point in memory, not by the pod creation timestamp.",
    labels: &["dynamic_resources"],
    buckets: DURATION,
};
/// `karpenter_pods_provisioning_scheduling_undecided_time_seconds`.
pub const PODS_PROVISIONING_SCHEDULING_UNDECIDED_TIME_SECONDS: Spec = Spec {
    name: "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
    kind: Kind::Gauge,
    help: "The time from when Karpenter has seen a pod without making a scheduling decision for the pod. Note: this calculated from a point in memory, not by the pod creation timestamp.",
    labels: &["name", "namespace"],
    buckets: &[],
};
/// `karpenter_pods_provisioning_startup_duration_seconds`.
pub const PODS_PROVISIONING_STARTUP_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_pods_provisioning_startup_duration_seconds",
    kind: Kind::Histogram,
    help: "The time from when Karpenter first thinks the pod can schedule until the pod is running. Note: this calculated from a point in memory, not by the pod creation timestamp.",
    labels: &[],
    buckets: DURATION,
};
/// `karpenter_pods_provisioning_unbound_time_seconds`.
pub const PODS_PROVISIONING_UNBOUND_TIME_SECONDS: Spec = Spec {
    name: "karpenter_pods_provisioning_unbound_time_seconds",
    kind: Kind::Gauge,
    help: "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this calculated from a point in memory, not by the pod creation timestamp.",
    labels: &["dynamic_resources", "name", "namespace"],
    buckets: &[],
};
/// `karpenter_pods_provisioning_unstarted_time_seconds`.
pub const PODS_PROVISIONING_UNSTARTED_TIME_SECONDS: Spec = Spec {
    name: "karpenter_pods_provisioning_unstarted_time_seconds",
    kind: Kind::Gauge,
    help: "The time from when Karpenter first thinks the pod can schedule until the pod is running. Note: this calculated from a point in memory, not by the pod creation timestamp.",
    labels: &["name", "namespace"],
    buckets: &[],
};
/// `karpenter_pods_scheduling_decision_duration_seconds`.
pub const PODS_SCHEDULING_DECISION_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_pods_scheduling_decision_duration_seconds",
    kind: Kind::Histogram,
    help: "The time it takes for Karpenter to first try to schedule a pod after it's been seen.",
    labels: &[],
    buckets: DURATION,
};
/// `karpenter_pods_startup_duration_seconds`.
pub const PODS_STARTUP_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_pods_startup_duration_seconds",
    kind: Kind::Summary,
    help: "The time from pod creation until the pod is running.",
    labels: &[],
    buckets: &[],
};
/// `karpenter_pods_state`.
pub const PODS_STATE: Spec = Spec {
    name: "karpenter_pods_state",
    kind: Kind::Gauge,
    help: "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, namespace, owner, node, whether the pod is scheduled, nodepool name, zone, architecture, capacity type, instance type, pod phase, pod readiness, and whether the node is Karpenter-managed.",
    labels: &[
        "arch",
        "capacity_type",
        "instance_type",
        "managed",
        "name",
        "namespace",
        "node",
        "nodepool",
        "owner",
        "phase",
        "ready",
        "scheduled",
        "zone",
    ],
    buckets: &[],
};
/// `karpenter_pods_unbound_time_seconds`.
pub const PODS_UNBOUND_TIME_SECONDS: Spec = Spec {
    name: "karpenter_pods_unbound_time_seconds",
    kind: Kind::Gauge,
    help: "The time from pod creation until the pod is bound.",
    labels: &["dynamic_resources", "name", "namespace"],
    buckets: &[],
};
/// `karpenter_pods_unstarted_time_seconds`.
pub const PODS_UNSTARTED_TIME_SECONDS: Spec = Spec {
    name: "karpenter_pods_unstarted_time_seconds",
    kind: Kind::Gauge,
    help: "The time from pod creation until the pod is running.",
    labels: &["name", "namespace"],
    buckets: &[],
};
/// `karpenter_scheduler_ignored_pods_count`.
pub const SCHEDULER_IGNORED_PODS_COUNT: Spec = Spec {
    name: "karpenter_scheduler_ignored_pods_count",
    kind: Kind::Gauge,
    help: "Number of pods ignored during scheduling by Karpenter",
    labels: &[],
    buckets: &[],
};
/// `karpenter_scheduler_pending_pods_by_effective_zone_count`.
pub const SCHEDULER_PENDING_PODS_BY_EFFECTIVE_ZONE_COUNT: Spec = Spec {
    name: "karpenter_scheduler_pending_pods_by_effective_zone_count",
    kind: Kind::Gauge,
    help: "Pending pods dimensioned by effective zone constraint, or the intersection of pod-level zone signals, volume topology (PVC zones), and topology constraints. Values: specific zone name (e.g., 'us-west-2a'), 'flexible' (multiple zones), or 'none' (no valid intersection).",
    labels: &["controller", "zone"],
    buckets: &[],
};
/// `karpenter_scheduler_queue_depth`.
pub const SCHEDULER_QUEUE_DEPTH: Spec = Spec {
    name: "karpenter_scheduler_queue_depth",
    kind: Kind::Gauge,
    help: "The number of pods currently waiting to be scheduled.",
    labels: &["controller", "scheduling_id"],
    buckets: &[],
};
/// `karpenter_scheduler_scheduling_duration_seconds`.
pub const SCHEDULER_SCHEDULING_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_scheduler_scheduling_duration_seconds",
    kind: Kind::Histogram,
    help: "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
    labels: &["controller"],
    buckets: DURATION,
};
/// `karpenter_scheduler_unfinished_work_seconds`.
pub const SCHEDULER_UNFINISHED_WORK_SECONDS: Spec = Spec {
    name: "karpenter_scheduler_unfinished_work_seconds",
    kind: Kind::Gauge,
    help: "How many seconds of work has been done that is in progress and hasn't been observed by scheduling_duration_seconds.",
    labels: &["controller", "scheduling_id"],
    buckets: &[],
};
/// `karpenter_scheduler_unschedulable_pods_count`.
pub const SCHEDULER_UNSCHEDULABLE_PODS_COUNT: Spec = Spec {
    name: "karpenter_scheduler_unschedulable_pods_count",
    kind: Kind::Gauge,
    help: "The number of unschedulable Pods.",
    labels: &["controller"],
    buckets: &[],
};
/// `karpenter_voluntary_disruption_consolidation_timeouts_total`.
pub const VOLUNTARY_DISRUPTION_CONSOLIDATION_TIMEOUTS: Spec = Spec {
    name: "karpenter_voluntary_disruption_consolidation_timeouts_total",
    kind: Kind::Counter,
    help: "Number of times the Consolidation algorithm has reached a timeout. Labeled by consolidation type.",
    labels: &["consolidation_type"],
    buckets: &[],
};
/// `karpenter_voluntary_disruption_decision_evaluation_duration_seconds`.
pub const VOLUNTARY_DISRUPTION_DECISION_EVALUATION_DURATION_SECONDS: Spec = Spec {
    name: "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
    kind: Kind::Histogram,
    help: "Duration of the disruption decision evaluation process in seconds. Labeled by method and consolidation type.",
    labels: &["consolidation_type", "reason"],
    buckets: DURATION,
};
/// `karpenter_voluntary_disruption_decisions_by_nodepool_total`.
pub const VOLUNTARY_DISRUPTION_DECISIONS_BY_NODEPOOL: Spec = Spec {
    name: "karpenter_voluntary_disruption_decisions_by_nodepool_total",
    kind: Kind::Counter,
    help: "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, reason, and consolidation type.",
    labels: &["consolidation_type", "decision", "nodepool", "reason"],
    buckets: &[],
};
/// `karpenter_voluntary_disruption_decisions_total`.
pub const VOLUNTARY_DISRUPTION_DECISIONS: Spec = Spec {
    name: "karpenter_voluntary_disruption_decisions_total",
    kind: Kind::Counter,
    help: "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
    labels: &["consolidation_type", "decision", "reason"],
    buckets: &[],
};
/// `karpenter_voluntary_disruption_eligible_nodes`.
pub const VOLUNTARY_DISRUPTION_ELIGIBLE_NODES: Spec = Spec {
    name: "karpenter_voluntary_disruption_eligible_nodes",
    kind: Kind::Gauge,
    help: "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
    labels: &["reason"],
    buckets: &[],
};
/// `karpenter_voluntary_disruption_failed_validations_total`.
pub const VOLUNTARY_DISRUPTION_FAILED_VALIDATIONS: Spec = Spec {
    name: "karpenter_voluntary_disruption_failed_validations_total",
    kind: Kind::Counter,
    help: "Number of candidates that were selected for disruption but failed validation. Labeled by consolidation type.",
    labels: &["consolidation_type"],
    buckets: &[],
};
/// `karpenter_voluntary_disruption_queue_failures_total`.
pub const VOLUNTARY_DISRUPTION_QUEUE_FAILURES: Spec = Spec {
    name: "karpenter_voluntary_disruption_queue_failures_total",
    kind: Kind::Counter,
    help: "The number of times that an enqueued disruption decision failed. Labeled by disruption method.",
    labels: &["consolidation_type", "decision", "reason"],
    buckets: &[],
};
/// `karpenter_voluntary_disruption_terminate_first_decisions_total`.
pub const VOLUNTARY_DISRUPTION_TERMINATE_FIRST_DECISIONS: Spec = Spec {
    name: "karpenter_voluntary_disruption_terminate_first_decisions_total",
    kind: Kind::Counter,
    help: "Number of terminate-first disruption decisions performed. Labeled by nodepool name, reason, and why the replacement couldn't be staged first.",
    labels: &["nodepool", "reason", "terminate_first_reason"],
    buckets: &[],
};

/// Every family, for the compatibility test and the registration.
pub const ALL: &[Spec] = &[
    BUILD_INFO,
    CLOUDPROVIDER_BATCHER_BATCH_SIZE,
    CLOUDPROVIDER_BATCHER_BATCH_TIME_SECONDS,
    CLOUDPROVIDER_DURATION_SECONDS,
    CLOUDPROVIDER_ERRORS,
    CLOUDPROVIDER_INSTANCE_LAUNCH_FAILURES,
    CLOUDPROVIDER_INSTANCE_TERMINATION_FAILURES,
    CLOUDPROVIDER_INSTANCE_TYPE_CPU_CORES,
    CLOUDPROVIDER_INSTANCE_TYPE_MEMORY_BYTES,
    CLOUDPROVIDER_INSTANCE_TYPE_OFFERING_AVAILABLE,
    CLOUDPROVIDER_INSTANCE_TYPE_OFFERING_PRICE_ESTIMATE,
    CLUSTER_STATE_NODE_COUNT,
    CLUSTER_STATE_SYNCED,
    CLUSTER_STATE_UNSYNCED_TIME_SECONDS,
    CLUSTER_UTILIZATION_PERCENT,
    CONSOLIDATION_MOVES,
    CONSOLIDATION_SCORE,
    EC2NODECLASSES_USERDATA_BYTES,
    INTERRUPTION_DELETED_MESSAGES,
    INTERRUPTION_INSTANCE_STATUS_UNHEALTHY,
    INTERRUPTION_MESSAGE_QUEUE_DURATION_SECONDS,
    INTERRUPTION_RECEIVED_MESSAGES,
    NODECLAIMS_CREATED,
    NODECLAIMS_DISRUPTED,
    NODECLAIMS_INSTANCE_TERMINATION_DURATION_SECONDS,
    NODECLAIMS_TERMINATED,
    NODECLAIMS_TERMINATION_DURATION_SECONDS,
    NODECLAIMS_UNHEALTHY_DISRUPTED,
    NODEPOOLS_ALLOWED_DISRUPTIONS,
    NODEPOOLS_COST,
    NODEPOOLS_COST_TRACKER_ERRORS,
    NODEPOOLS_LIMIT,
    NODEPOOLS_NODES_CONSUMING_BUDGETS,
    NODEPOOLS_USAGE,
    NODES_ALLOCATABLE,
    NODES_CREATED,
    NODES_CURRENT_LIFETIME_SECONDS,
    NODES_DRAINED,
    NODES_LIFETIME_DURATION_SECONDS,
    NODES_REBOOT_DURATION_SECONDS,
    NODES_REBOOT_RECOVERY_DURATION_SECONDS,
    NODES_REBOOTS,
    NODES_SYSTEM_OVERHEAD,
    NODES_TERMINATED,
    NODES_TERMINATION_DURATION_SECONDS,
    NODES_TOTAL_DAEMON_LIMITS,
    NODES_TOTAL_DAEMON_REQUESTS,
    NODES_TOTAL_POD_LIMITS,
    NODES_TOTAL_POD_REQUESTS,
    POD_DELETION_COST_NODES_WITH_PENDING_ANNOTATION_WRITES,
    POD_DELETION_COST_POD_ANNOTATION_WRITES,
    PODS_BOUND_DURATION_SECONDS,
    PODS_DISRUPTION_INITIATED,
    PODS_DRAINED,
    PODS_EVICTION_REQUESTS,
    PODS_PROVISIONING_BOUND_DURATION_SECONDS,
    PODS_PROVISIONING_SCHEDULING_UNDECIDED_TIME_SECONDS,
    PODS_PROVISIONING_STARTUP_DURATION_SECONDS,
    PODS_PROVISIONING_UNBOUND_TIME_SECONDS,
    PODS_PROVISIONING_UNSTARTED_TIME_SECONDS,
    PODS_SCHEDULING_DECISION_DURATION_SECONDS,
    PODS_STARTUP_DURATION_SECONDS,
    PODS_STATE,
    PODS_UNBOUND_TIME_SECONDS,
    PODS_UNSTARTED_TIME_SECONDS,
    SCHEDULER_IGNORED_PODS_COUNT,
    SCHEDULER_PENDING_PODS_BY_EFFECTIVE_ZONE_COUNT,
    SCHEDULER_QUEUE_DEPTH,
    SCHEDULER_SCHEDULING_DURATION_SECONDS,
    SCHEDULER_UNFINISHED_WORK_SECONDS,
    SCHEDULER_UNSCHEDULABLE_PODS_COUNT,
    VOLUNTARY_DISRUPTION_CONSOLIDATION_TIMEOUTS,
    VOLUNTARY_DISRUPTION_DECISION_EVALUATION_DURATION_SECONDS,
    VOLUNTARY_DISRUPTION_DECISIONS_BY_NODEPOOL,
    VOLUNTARY_DISRUPTION_DECISIONS,
    VOLUNTARY_DISRUPTION_ELIGIBLE_NODES,
    VOLUNTARY_DISRUPTION_FAILED_VALIDATIONS,
    VOLUNTARY_DISRUPTION_QUEUE_FAILURES,
    VOLUNTARY_DISRUPTION_TERMINATE_FIRST_DECISIONS,
];
