//! Well-known label, annotation, taint and finalizer names.
//!
//! These strings are the contract between Kerf, Karpenter users' manifests, kube-scheduler
//! and the nodes themselves; every other crate names them through these constants.

/// Group of the NodePool and NodeClaim kinds.
pub const KARPENTER_GROUP: &str = "karpenter.sh";
/// Group of the EC2NodeClass kind.
pub const AWS_GROUP: &str = "karpenter.k8s.aws";

/// Label on every node and NodeClaim naming the NodePool that owns it.
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
/// Label holding `spot`, `on-demand` or `reserved`.
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Label set to "true" once the node has registered with the cluster.
pub const REGISTERED: &str = "karpenter.sh/registered";
/// Label set to "true" once the node is initialized (ready, startup taints gone, resources registered).
pub const INITIALIZED: &str = "karpenter.sh/initialized";
/// When a NodeClaim's pods go regardless of budgets and grace periods (RFC 3339), as
/// Karpenter writes it for repair, forceful interruption and `terminationGracePeriod`.
pub const NODECLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
/// Annotation on pods or nodes that blocks voluntary disruption.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Annotation on a Node (or its NodeClaim) that keeps node repair from replacing it.
pub const DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";
/// Annotation on a NodeClaim whose node repair reboots: how long the drain before the reboot
/// may take (a Go duration, `1m0s`).
pub const REBOOT_TERMINATION_GRACE_PERIOD: &str = "karpenter.sh/reboot-termination-grace-period";
/// Annotation on a NodeClaim whose node repair reboots: the node's boot id before the reboot.
pub const REBOOT_PRE_BOOT_ID: &str = "karpenter.sh/reboot-pre-boot-id";
/// Taint that keeps new pods off a node while repair drains and reboots it.
pub const REBOOTING_TAINT_KEY: &str = "karpenter.sh/rebooting";
/// Annotation holding the hash of the NodePool template a NodeClaim was made from (drift).
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
/// Annotation on every NodeClaim Karpenter makes: `"true"` when MIN_VALUES_POLICY=BestEffort
/// lowered one of its NodePool's minValues, else `"false"` (copied to the Node).
pub const MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
/// Annotation Kerf puts on its in-memory copy of a pod that mounts claims (never written to
/// the cluster): the node requirements its volumes allow, as JSON alternatives (a list of
/// lists of node selector requirements), which the solver adds to the pod's own node
/// affinity for placement but not for counting topology spread domains, as Karpenter does.
pub const VOLUME_TOPOLOGY: &str = "kerf.sh/volume-topology";
/// Prefix of the resource a node's CSI volume attachments are counted in, one per driver
/// (`attachable-volumes-csi-ebs.csi.aws.com`), as kube-scheduler once named them: each pod
/// requests one per claim it mounts, and a node has what its CSINode allows (or, before
/// that is known, what its instance type allows). A node without the resource takes any
/// number.
pub const ATTACHABLE_VOLUMES: &str = "attachable-volumes-csi-";
/// The EBS CSI driver's name: the driver whose attachments an EC2 instance type limits.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";
/// Annotation holding the version of the NodePool hash algorithm.
pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// Annotation holding the hash of the EC2NodeClass a NodeClaim was launched from (drift).
pub const EC2NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
/// Annotation holding the version of the EC2NodeClass hash algorithm.
pub const EC2NODECLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";
/// Taint key put on nodes that are being disrupted, so no new pods land on them.
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";
/// Taint key put on nodes until they register, so nothing schedules too early.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
/// The taint a cordoned node (`spec.unschedulable`) carries for kube-scheduler.
pub const UNSCHEDULABLE_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";
/// Finalizer that holds a NodeClaim or Node until it is drained and its instance is gone.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// Instance type of a node.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// Availability zone of a node.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// Availability zone id of a node on AWS (`use1-az1`), the same zone in every account.
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
/// Region of a node.
pub const REGION: &str = "topology.kubernetes.io/region";
/// Hostname of a node; the per-node topology domain.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// CPU architecture: `amd64` or `arm64`.
pub const ARCH: &str = "kubernetes.io/arch";
/// Operating system: `linux` or `windows`.
pub const OS: &str = "kubernetes.io/os";
/// Windows build of a Windows node.
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

/// Capacity type value for spot instances.
pub const CAPACITY_TYPE_SPOT: &str = "spot";
/// Capacity type value for on-demand instances.
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Capacity type value for capacity reservations.
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
/// The capacity reservation a reserved node runs in (`cr-…`).
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// `default` (an On-Demand Capacity Reservation) or `capacity-block`.
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
/// `"true"` when EC2 may reclaim the reservation's instances.
pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";

/// `c`, `m`, `r`, `g`, … : the letters of the family before the generation digit.
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
/// `m5`, `c6g`, … : the part of the name before the dot.
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// The generation digit(s): `5` for m5.
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
/// The part of the name after the dot: `large`, `2xlarge`, `metal`.
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
/// Number of vCPUs.
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
/// CPU manufacturer: `intel`, `amd`, `aws`.
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
/// Sustained clock speed in MHz.
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
/// Memory in MiB.
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
/// Hypervisor: `nitro`, `xen`, or empty for bare metal.
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
/// Whether the instance encrypts traffic in transit.
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// Baseline network bandwidth in Mbps.
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// Maximum EBS bandwidth in Mbps.
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
/// Local NVMe storage in GB.
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
/// GPU name, kebab case: `a10g`, `t4`.
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
/// GPU manufacturer: `nvidia`, `amd`.
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// Number of GPUs.
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
/// Memory of one GPU in MiB.
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// Accelerator name (Inferentia, Trainium).
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
/// Accelerator manufacturer.
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
/// Number of accelerator devices.
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";

/// Extended resource of NVIDIA GPUs.
pub const RESOURCE_NVIDIA_GPU: &str = "nvidia.com/gpu";
/// Extended resource of AMD GPUs.
pub const RESOURCE_AMD_GPU: &str = "amd.com/gpu";
/// Extended resource of Habana Gaudi accelerators.
pub const RESOURCE_HABANA_GAUDI: &str = "habana.ai/gaudi";
/// Extended resource of AWS Neuron devices (Inferentia, Trainium).
pub const RESOURCE_AWS_NEURON: &str = "aws.amazon.com/neuron";
/// Extended resource of AWS Neuron cores.
pub const RESOURCE_AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
/// Elastic Fabric Adapter devices, as the EFA device plugin advertises them.
pub const RESOURCE_EFA: &str = "vpc.amazonaws.com/efa";

/// Labels Karpenter treats as well known: a pod may require them without a NodePool
/// defining them, because the cloud provider fills them in from the instance type.
pub const WELL_KNOWN_LABELS: &[&str] = &[
    NODEPOOL,
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    ZONE,
    REGION,
    HOSTNAME,
    ARCH,
    OS,
    WINDOWS_BUILD,
    INSTANCE_CATEGORY,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_SIZE,
    INSTANCE_CPU,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    INSTANCE_MEMORY,
    INSTANCE_HYPERVISOR,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_LOCAL_NVME,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
    CAPACITY_RESERVATION_INTERRUPTIBLE,
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
];

/// `karpenter.k8s.aws` keys a NodePool may use besides the well-known ones, as Karpenter's
/// AWS CRD allows them (Kerf's instance types do not carry them: a requirement on one is a
/// label its nodes get).
pub const AWS_ALLOWED_KEYS: &[&str] = &[
    "karpenter.k8s.aws/ec2nodeclass",
    "karpenter.k8s.aws/instance-tenancy",
    "karpenter.k8s.aws/instance-capability-flex",
    PLACEMENT_GROUP_ID,
    PLACEMENT_GROUP_PARTITION,
];

/// The placement group a node was launched into.
pub const PLACEMENT_GROUP_ID: &str = "karpenter.k8s.aws/placement-group-id";
/// The partition of a partition placement group it runs in.
pub const PLACEMENT_GROUP_PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";

/// Label keys from restricted domains that a NodePool may still use in requirements.
pub(crate) const ALLOWED_RESTRICTED_KEYS: &[&str] = &[
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    ZONE,
    REGION,
    ARCH,
    OS,
    WINDOWS_BUILD,
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
];

/// Why a label key may not appear in a NodePool's labels or requirements, if it may not.
///
/// As Karpenter v1.15 (`IsRestrictedLabel`, with the AWS provider's domain): the `karpenter.sh`
/// and `karpenter.k8s.aws` domains are reserved for labels Karpenter sets, but for the
/// well-known keys users select on; the NodePool and hostname labels are reserved outright.
/// Labels of the `kubernetes.io` and `k8s.io` domains are allowed (the kubelet may not set
/// them itself, so they are left out of its `--node-labels` and put on the Node by Kerf).
pub fn restricted_label_reason(key: &str) -> Option<String> {
    if key == NODEPOOL || key == HOSTNAME {
        return Some(format!("label {key:?} is restricted"));
    }
    if ALLOWED_RESTRICTED_KEYS.contains(&key)
        || AWS_ALLOWED_KEYS.contains(&key)
        || (key.starts_with("karpenter.k8s.aws/") && WELL_KNOWN_LABELS.contains(&key))
    {
        return None;
    }
    let domain = key.split_once('/').map(|(d, _)| d).unwrap_or("");
    let under = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    [KARPENTER_GROUP, AWS_GROUP]
        .into_iter()
        .find(|d| under(d))
        .map(|d| format!("label domain {d:?} is restricted"))
}

/// Whether the kubelet may not set this label on its own Node (the API server's
/// NodeRestriction admission refuses the `kubernetes.io` and `k8s.io` domains, and
/// `node-restriction.kubernetes.io`, to kubelets): such labels stay out of `--node-labels`,
/// as Karpenter's AWS provider leaves them out, and reach the Node from the controller.
pub fn kubelet_may_not_set(key: &str) -> bool {
    let domain = key.split_once('/').map(|(d, _)| d).unwrap_or("");
    ["node-restriction.kubernetes.io", "kubernetes.io", "k8s.io"]
        .iter()
        .any(|d| domain == *d || domain.ends_with(&format!(".{d}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API server's NodeRestriction refuses these domains to kubelets.
    #[test]
    fn the_kubelet_sets_no_label_of_the_kubernetes_domains() {
        for key in [
            "kubernetes.io/arch",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "kops.k8s.io/instancegroup",
            "node-restriction.kubernetes.io/team",
        ] {
            assert!(kubelet_may_not_set(key), "{key}");
        }
        for key in ["team", "karpenter.sh/nodepool", "example.com/kubernetes.io"] {
            assert!(!kubelet_may_not_set(key), "{key}");
        }
    }

    #[test]
    fn restricted_domains() {
        assert!(restricted_label_reason("kubernetes.io/hostname").is_some());
        assert!(restricted_label_reason("karpenter.sh/nodepool").is_some());
        assert!(restricted_label_reason("karpenter.sh/custom").is_some());
        assert!(restricted_label_reason("example.k8s.io/x").is_none());
        assert!(restricted_label_reason("kops.k8s.io/instancegroup").is_none());
        assert!(restricted_label_reason("example.kubernetes.io/pool").is_none());
        assert!(restricted_label_reason("karpenter.k8s.aws/custom").is_some());
        assert!(restricted_label_reason("karpenter.k8s.aws/instance-family").is_none());
        assert!(restricted_label_reason("karpenter.sh/capacity-type").is_none());
        assert!(restricted_label_reason("node.kubernetes.io/instance-type").is_none());
        assert!(restricted_label_reason("x.node.kubernetes.io/anything").is_none());
        assert!(restricted_label_reason("topology.kubernetes.io/zone").is_none());
        assert!(restricted_label_reason("workload").is_none());
        assert!(restricted_label_reason("billing-team").is_none());
    }
}
