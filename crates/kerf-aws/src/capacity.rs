//! Capacity and allocatable of a node, as Karpenter computes them for the AL2023 AMI family:
//! memory less the hypervisor's share, pods limited by network interfaces, and the kubelet's
//! kube-reserved, system-reserved and eviction thresholds subtracted.

use std::collections::BTreeMap;

use kerf_api::Quantity;
use kerf_api::ec2nodeclass::{
    EC2NodeClassSpec, InstanceStorePolicy, InterfaceType, KubeletConfiguration, NetworkInterface,
    Toggle,
};
use kerf_api::labels::{
    RESOURCE_AMD_GPU, RESOURCE_AWS_NEURON, RESOURCE_AWS_NEURON_CORE, RESOURCE_EFA,
    RESOURCE_HABANA_GAUDI, RESOURCE_NVIDIA_GPU,
};

use crate::catalog::InstanceTypeInfo;
pub use kerf_scheduling::resources::Resources;

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;
/// Share of memory the hypervisor and OS take before the kubelet sees it (Karpenter's
/// `VM_MEMORY_OVERHEAD_PERCENT` default).
pub const VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
/// arm64 kernels reserve this much more memory than the instance type reports.
const ARM64_MEMORY_RESERVED_MIB: i64 = 64;
/// Root volume of an AL2023 node without block device mappings.
const DEFAULT_ROOT_VOLUME_BYTES: i64 = 20 * GIB;

/// The parts of an EC2NodeClass, and the controller settings, that change a node's capacity
/// or overhead.
#[derive(Clone, Debug)]
pub struct NodeSettings<'a> {
    /// Kubelet settings.
    pub kubelet: Option<&'a KubeletConfiguration>,
    /// Size of the volume backing ephemeral storage, if not the default 20Gi.
    pub root_volume_bytes: Option<i64>,
    /// Whether instance store volumes back ephemeral storage (RAID0).
    pub instance_store_raid0: bool,
    /// The share of memory the hypervisor takes (`VM_MEMORY_OVERHEAD_PERCENT`).
    pub vm_memory_overhead_percent: f64,
    /// Network interfaces kept out of the pod count (`RESERVED_ENIS`).
    pub reserved_enis: u32,
    /// Block device mappings of the launch template (the root volume's included): each
    /// takes one of the node's EBS attachment slots.
    pub block_devices: usize,
    /// What the class's launch options ask of an instance type.
    pub launch: LaunchNeeds<'a>,
}

/// What an EC2NodeClass's launch options ask of an instance type, as Karpenter's AWS
/// provider checks them before offering the type: types that cannot take them are not
/// launched for the class.
#[derive(Clone, Copy, Debug, Default)]
pub struct LaunchNeeds<'a> {
    /// `enclaveOptions.enabled`: Nitro Enclaves support.
    pub enclaves: bool,
    /// `cpuOptions.nestedVirtualization: enabled`.
    pub nested_virtualization: bool,
    /// `connectionTracking` set: a Nitro type.
    pub connection_tracking: bool,
    /// `networkInterfaces`: each card and device index present, enough EFA interfaces.
    pub network_interfaces: Option<&'a [NetworkInterface]>,
}

impl LaunchNeeds<'_> {
    /// Whether `info` can be launched with these options.
    pub fn admit(&self, info: &InstanceTypeInfo) -> bool {
        if (self.enclaves && !info.nitro_enclaves)
            || (self.nested_virtualization && !info.nested_virtualization)
            || (self.connection_tracking && info.hypervisor != "nitro")
        {
            return false;
        }
        let Some(nics) = self.network_interfaces else {
            return true;
        };
        let slots_exist = nics.iter().all(|n| {
            usize::try_from(n.network_card_index)
                .is_ok_and(|card| info.card_interfaces(card) > n.device_index.max(0) as u32)
        });
        slots_exist && self.efa_only(None) <= info.max_efa.unwrap_or(0)
    }

    /// The `efa-only` interfaces, on card `card` or on every card.
    fn efa_only(&self, card: Option<i32>) -> u32 {
        self.network_interfaces.map_or(0, |nics| {
            nics.iter()
                .filter(|n| n.interface_type == InterfaceType::EfaOnly)
                .filter(|n| card.is_none_or(|c| n.network_card_index == c))
                .count() as u32
        })
    }
}

impl Default for NodeSettings<'_> {
    fn default() -> Self {
        NodeSettings {
            kubelet: None,
            root_volume_bytes: None,
            instance_store_raid0: false,
            vm_memory_overhead_percent: VM_MEMORY_OVERHEAD_PERCENT,
            reserved_enis: 0,
            block_devices: 1,
            launch: LaunchNeeds::default(),
        }
    }
}

impl<'a> NodeSettings<'a> {
    /// The settings an EC2NodeClass implies.
    pub fn from_node_class(spec: &'a EC2NodeClassSpec) -> NodeSettings<'a> {
        let root = spec
            .block_device_mappings
            .iter()
            .find(|b| b.root_volume)
            .or_else(|| {
                spec.block_device_mappings
                    .iter()
                    .find(|b| b.device_name.as_deref() == Some("/dev/xvda"))
            });
        NodeSettings {
            kubelet: spec.kubelet.as_ref(),
            root_volume_bytes: root
                .and_then(|b| b.ebs.as_ref())
                .and_then(|e| e.size())
                .map(|q| q.units_ceil() as i64),
            instance_store_raid0: spec.instance_store_policy == Some(InstanceStorePolicy::RAID0),
            block_devices: spec.block_device_mappings.len().max(1),
            launch: LaunchNeeds {
                enclaves: spec.enclave_options.as_ref().is_some_and(|e| e.enabled),
                nested_virtualization: spec
                    .cpu_options
                    .as_ref()
                    .is_some_and(|c| c.nested_virtualization == Some(Toggle::Enabled)),
                connection_tracking: spec.connection_tracking.is_some(),
                network_interfaces: spec.network_interfaces.as_deref(),
            },
            ..NodeSettings::default()
        }
    }
}

/// Pods the node runs: the kubelet's maxPods, else the ENI limit (less the reserved
/// interfaces), capped by podsPerCore.
pub fn pods(
    info: &InstanceTypeInfo,
    kubelet: Option<&KubeletConfiguration>,
    reserved_enis: u32,
) -> i64 {
    let enis = i64::from(info.max_enis.saturating_sub(reserved_enis));
    let eni_limited = enis * (i64::from(info.ipv4_per_eni) - 1).max(0) + 2;
    let mut pods = kubelet
        .and_then(|k| k.settings().max_pods)
        .map(i64::from)
        .unwrap_or(eni_limited);
    if let Some(per_core) = kubelet
        .and_then(|k| k.settings().pods_per_core)
        .filter(|p| *p > 0)
    {
        pods = pods.min(i64::from(per_core) * i64::from(info.vcpu));
    }
    pods
}

/// What the instance offers the kubelet.
pub fn capacity(info: &InstanceTypeInfo, settings: &NodeSettings) -> Resources {
    let mut mib = info.memory_mib as i64;
    if info.arch == "arm64" {
        mib -= ARM64_MEMORY_RESERVED_MIB;
    }
    let overhead_mib = (mib as f64 * settings.vm_memory_overhead_percent).ceil() as i64;
    let ephemeral = match (settings.instance_store_raid0, info.local_nvme_gb) {
        (true, Some(gb)) => gb as i64 * 1_000_000_000,
        _ => settings
            .root_volume_bytes
            .unwrap_or(DEFAULT_ROOT_VOLUME_BYTES),
    };
    let mut extended = BTreeMap::new();
    if let Some(gpu) = &info.gpu {
        let resource = match gpu.manufacturer.as_str() {
            "nvidia" => Some(RESOURCE_NVIDIA_GPU),
            "amd" => Some(RESOURCE_AMD_GPU),
            "habana" => Some(RESOURCE_HABANA_GAUDI),
            _ => None,
        };
        if let Some(r) = resource {
            extended.insert(r.to_string(), i64::from(gpu.count));
        }
    }
    // EFA devices: the class's efa-only interfaces, which its launch template attaches.
    // Karpenter also advertises a type's own EFA count and attaches `efa` interfaces to a
    // NodeClaim that asks for them; Kerf does not attach those, so it offers none (a pod
    // asking for EFA would otherwise get a node without it, again and again)
    let efa = settings.launch.efa_only(None);
    if efa > 0 {
        extended.insert(RESOURCE_EFA.to_string(), i64::from(efa));
    }
    if let Some(neuron) = &info.neuron {
        extended.insert(RESOURCE_AWS_NEURON.to_string(), i64::from(neuron.count));
        extended.insert(
            RESOURCE_AWS_NEURON_CORE.to_string(),
            i64::from(neuron.cores),
        );
    }
    Resources {
        cpu_millis: i64::from(info.vcpu) * 1000,
        memory_bytes: (mib - overhead_mib) * MIB,
        ephemeral_storage_bytes: ephemeral,
        // an efa-only interface on the primary card takes an ENI no pod address comes from
        pods: pods(
            info,
            settings.kubelet,
            settings.reserved_enis + settings.launch.efa_only(Some(0)),
        ),
        extended,
    }
}

/// Karpenter's kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of the third
/// and fourth, 0.25% of every core above four.
fn kube_reserved_cpu_millis(vcpu: u32) -> i64 {
    let cores = i64::from(vcpu);
    let mut millis = 0.0;
    for (from, to, share) in [
        (0, 1, 0.06),
        (1, 2, 0.01),
        (2, 4, 0.005),
        (4, i64::MAX, 0.0025),
    ] {
        let n = (cores.min(to) - from).max(0);
        millis += n as f64 * 1000.0 * share;
    }
    millis.round() as i64
}

/// A reservation value of the kubelet config (`100m`, `1Gi`) in the resource's unit.
fn reserved(map: &BTreeMap<String, String>, key: &str, millis: bool) -> Option<i64> {
    let q = Quantity::parse(map.get(key)?).ok()?;
    Some(if millis {
        q.milli() as i64
    } else {
        q.units_ceil() as i64
    })
}

/// An eviction threshold (`100Mi` or `10%`) against a capacity, in bytes.
fn threshold(value: &str, capacity_bytes: i64) -> Option<i64> {
    if let Some(pct) = value.strip_suffix('%') {
        let pct: f64 = pct.parse().ok()?;
        return Some((capacity_bytes as f64 * pct / 100.0).ceil() as i64);
    }
    Quantity::parse(value).ok().map(|q| q.units_ceil() as i64)
}

/// Karpenter's kube-reserved for a node of `vcpu` cores running `pods` pods, as (cpu millis,
/// memory bytes, ephemeral-storage bytes): the class's `kubeReserved` where it names a
/// resource, else [`kube_reserved_cpu_millis`], 11 MiB a pod plus 255 MiB, and 1 GiB. The
/// kubelet is told the same (the user data writes it), so it reserves what the scheduler
/// left out.
pub fn kube_reserved(
    vcpu: u32,
    pods: i64,
    kubelet: Option<&KubeletConfiguration>,
) -> (i64, i64, i64) {
    let empty = BTreeMap::new();
    let kube = kubelet.map_or(&empty, |k| &k.settings().kube_reserved);
    (
        reserved(kube, "cpu", true).unwrap_or_else(|| kube_reserved_cpu_millis(vcpu)),
        reserved(kube, "memory", false).unwrap_or((11 * pods + 255) * MIB),
        reserved(kube, "ephemeral-storage", false).unwrap_or(GIB),
    )
}

/// What the kubelet keeps for itself: kube-reserved + system-reserved + eviction thresholds.
pub fn overhead(
    info: &InstanceTypeInfo,
    settings: &NodeSettings,
    capacity: &Resources,
) -> Resources {
    let empty = BTreeMap::new();
    let kubelet = settings.kubelet;
    let system = kubelet.map_or(&empty, |k| &k.settings().system_reserved);
    let (kube_cpu, kube_memory, kube_ephemeral) = kube_reserved(info.vcpu, capacity.pods, kubelet);
    let system_cpu = reserved(system, "cpu", true).unwrap_or(0);
    let system_memory = reserved(system, "memory", false).unwrap_or(0);
    let system_ephemeral = reserved(system, "ephemeral-storage", false).unwrap_or(0);

    // Hard thresholds default to memory.available=100Mi and nodefs.available=10%. Soft
    // thresholds only warn before evicting: as Karpenter, they leave allocatable alone.
    let signal = |name: &str, default: &str, cap: i64| {
        let hard = kubelet
            .and_then(|k| k.settings().eviction_hard.get(name))
            .map_or(default, String::as_str);
        threshold(hard, cap).unwrap_or(0)
    };
    let evict_memory = signal("memory.available", "100Mi", capacity.memory_bytes);
    let evict_ephemeral = signal("nodefs.available", "10%", capacity.ephemeral_storage_bytes);

    Resources {
        cpu_millis: kube_cpu + system_cpu,
        memory_bytes: kube_memory + system_memory + evict_memory,
        ephemeral_storage_bytes: kube_ephemeral + system_ephemeral + evict_ephemeral,
        pods: 0,
        extended: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_reserved_cpu_steps() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(2), 70);
        assert_eq!(kube_reserved_cpu_millis(4), 80);
        assert_eq!(kube_reserved_cpu_millis(8), 90);
        assert_eq!(kube_reserved_cpu_millis(96), 310);
    }
}
