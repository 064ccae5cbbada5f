//! The region's instance types as EC2 describes them: DescribeInstanceTypes for the facts
//! capacity, allocatable and labels are derived from, and DescribeInstanceTypeOfferings for
//! the zones that offer each type. They replace the embedded catalog where EC2 answers, so a
//! type launched after Kerf was built, or one a region no longer offers, is seen as it is.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    ArchitectureType, EphemeralNvmeSupport, InstanceTypeInfo as Described, LocationType,
    NitroEnclavesSupport, SupportedAdditionalProcessorFeature, UsageClassType,
};
use kerf_aws::catalog::{Gpu, InstanceTypeInfo, Neuron};

use crate::{AwsError, classify};

/// What EC2 says a region offers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RegionCatalog {
    /// Every type Karpenter would launch (amd64 or arm64), sorted by name.
    pub types: Vec<InstanceTypeInfo>,
    /// The zones offering each type, sorted.
    pub zones: BTreeMap<String, Vec<String>>,
}

impl RegionCatalog {
    /// The zones that offer `instance_type`, none when EC2 listed it nowhere.
    pub fn zones_offering(&self, instance_type: &str) -> Vec<&str> {
        self.zones
            .get(instance_type)
            .map(|z| z.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

/// Where a region's instance types are read from.
pub struct InstanceTypeSource {
    ec2: aws_sdk_ec2::Client,
}

impl InstanceTypeSource {
    /// Reads the region of `config`.
    pub fn new(config: &aws_config::SdkConfig) -> InstanceTypeSource {
        InstanceTypeSource::with_client(crate::client!(aws_sdk_ec2, config))
    }

    /// Reads through `ec2` (tests hand in a mocked one).
    pub fn with_client(ec2: aws_sdk_ec2::Client) -> InstanceTypeSource {
        InstanceTypeSource { ec2 }
    }

    /// Reads the region (every page of both calls).
    pub async fn describe(&self) -> Result<RegionCatalog, AwsError> {
        describe(&self.ec2).await
    }
}

async fn describe(ec2: &aws_sdk_ec2::Client) -> Result<RegionCatalog, AwsError> {
    let described: Vec<Described> = ec2
        .describe_instance_types()
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| {
            classify(
                "DescribeInstanceTypes",
                "ec2:DescribeInstanceTypes",
                e.into_service_error(),
            )
        })?;
    let mut types: Vec<InstanceTypeInfo> = described.iter().filter_map(info_of).collect();
    types.sort_by(|a, b| a.name.cmp(&b.name));
    types.dedup_by(|a, b| a.name == b.name);
    let offerings: Vec<_> = ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| {
            classify(
                "DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypeOfferings",
                e.into_service_error(),
            )
        })?;
    let mut zones: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for o in &offerings {
        if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
            zones
                .entry(t.as_str().to_string())
                .or_default()
                .push(zone.to_string());
        }
    }
    for z in zones.values_mut() {
        z.sort();
        z.dedup();
    }
    Ok(RegionCatalog { types, zones })
}

/// The facts Kerf keeps of one described type, or `None` for a type Karpenter does not launch
/// (no amd64 or arm64 architecture: mac instances) or an answer missing what capacity needs.
pub fn info_of(d: &Described) -> Option<InstanceTypeInfo> {
    let name = d.instance_type()?.as_str().to_string();
    let processor = d.processor_info()?;
    let architectures = processor.supported_architectures();
    let arch = if architectures.contains(&ArchitectureType::Arm64) {
        "arm64"
    } else if architectures.contains(&ArchitectureType::X8664) {
        "amd64"
    } else {
        return None;
    };
    let network = d.network_info()?;
    let cards = network.network_cards();
    let bandwidth = (!cards.is_empty())
        .then(|| {
            cards
                .iter()
                .map(|c| c.baseline_bandwidth_in_gbps())
                .sum::<Option<f64>>()
        })
        .flatten();
    let storage = d.instance_storage_info();
    let nvme = storage.filter(|s| {
        matches!(
            s.nvme_support(),
            Some(EphemeralNvmeSupport::Required | EphemeralNvmeSupport::Supported)
        )
    });
    let network_cards = if cards.len() > 1 {
        let count = cards
            .iter()
            .filter_map(|c| c.network_card_index())
            .max()
            .map_or(0, |m| m + 1);
        (0..count)
            .map(|i| {
                cards
                    .iter()
                    .find(|c| c.network_card_index() == Some(i))
                    .and_then(|c| c.maximum_network_interfaces())
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0)
            })
            .collect()
    } else {
        Vec::new()
    };
    let gpus = d.gpu_info().map(|g| g.gpus()).unwrap_or_default();
    let neuron = d
        .neuron_info()
        .map(|n| n.neuron_devices())
        .unwrap_or_default();
    Some(InstanceTypeInfo {
        name,
        vcpu: u32::try_from(d.v_cpu_info()?.default_v_cpus()?).ok()?,
        memory_mib: u64::try_from(d.memory_info()?.size_in_mib()?).ok()?,
        arch: arch.to_string(),
        hypervisor: d
            .hypervisor()
            .map(|h| h.as_str().to_string())
            .unwrap_or_default(),
        bare_metal: d.bare_metal().unwrap_or(false),
        current_generation: d.current_generation().unwrap_or(false),
        max_enis: u32::try_from(network.maximum_network_interfaces()?).ok()?,
        ipv4_per_eni: u32::try_from(network.ipv4_addresses_per_interface()?).ok()?,
        encryption_in_transit: network.encryption_in_transit_supported().unwrap_or(false),
        spot: d.supported_usage_classes().contains(&UsageClassType::Spot),
        network_bandwidth_mbps: bandwidth.map(|gbps| (gbps * 1000.0).round() as u64),
        cpu_clock_mhz: processor
            .sustained_clock_speed_in_ghz()
            .map(|ghz| (ghz * 1000.0).round() as u32),
        cpu_manufacturer: processor.manufacturer().map(kebab),
        ebs_bandwidth_mbps: d
            .ebs_info()
            .and_then(|e| e.ebs_optimized_info())
            .and_then(|e| e.maximum_bandwidth_in_mbps())
            .and_then(|m| u64::try_from(m).ok()),
        local_nvme_gb: nvme
            .and_then(|s| s.total_size_in_gb())
            .and_then(|g| u64::try_from(g).ok()),
        gpu: gpus.first().map(|g| Gpu {
            name: kebab(g.name().unwrap_or_default()),
            manufacturer: kebab(g.manufacturer().unwrap_or_default()),
            count: gpus
                .iter()
                .filter_map(|g| g.count())
                .map(|c| u32::try_from(c).unwrap_or(0))
                .sum(),
            memory_mib: g
                .memory_info()
                .and_then(|m| m.size_in_mib())
                .and_then(|m| u64::try_from(m).ok())
                .unwrap_or(0),
        }),
        neuron: neuron.first().map(|n| Neuron {
            name: kebab(n.name().unwrap_or_default()),
            count: neuron
                .iter()
                .filter_map(|n| n.count())
                .map(|c| u32::try_from(c).unwrap_or(0))
                .sum(),
            cores: neuron
                .iter()
                .map(|n| {
                    let cores = n.core_info().and_then(|c| c.count()).unwrap_or(0);
                    u32::try_from(n.count().unwrap_or(0) * cores).unwrap_or(0)
                })
                .sum(),
        }),
        nitro_enclaves: d.nitro_enclaves_support() == Some(&NitroEnclavesSupport::Supported),
        nested_virtualization: processor
            .supported_features()
            .contains(&SupportedAdditionalProcessorFeature::NestedVirtualization),
        network_cards,
        max_efa: network
            .efa_info()
            .and_then(|e| e.maximum_efa_interfaces())
            .and_then(|n| u32::try_from(n).ok()),
    })
}

/// A name as Karpenter's labels write it: lower case, words joined by `-`
/// (`Amazon Web Services` → `amazon-web-services`).
fn kebab(name: &str) -> String {
    name.to_lowercase()
        .replace('_', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kebab_case() {
        assert_eq!(kebab("NVIDIA"), "nvidia");
        assert_eq!(kebab("Amazon Web Services"), "amazon-web-services");
        assert_eq!(kebab("Intel_Corp"), "intel-corp");
    }
}
