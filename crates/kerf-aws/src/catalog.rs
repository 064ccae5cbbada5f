//! The embedded catalog: facts of every instance type moto knows, and which zones of which
//! region offer each one. Rebuilt by `scripts/gen-catalog.py`.

use std::collections::BTreeMap;
use std::sync::{LazyLock, OnceLock};

use serde::Deserialize;

/// Facts of one instance type, as DescribeInstanceTypes reports them.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct InstanceTypeInfo {
    /// `m5.large`.
    pub name: String,
    /// Default vCPUs.
    pub vcpu: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// `nitro`, `xen`, or empty for bare metal.
    pub hypervisor: String,
    /// Whether this is a bare-metal type.
    pub bare_metal: bool,
    /// Whether AWS lists it as current generation.
    pub current_generation: bool,
    /// Most network interfaces the instance can attach.
    pub max_enis: u32,
    /// IPv4 addresses per network interface.
    pub ipv4_per_eni: u32,
    /// Whether traffic between such instances is encrypted in transit.
    pub encryption_in_transit: bool,
    /// Whether the type can be bought as spot.
    pub spot: bool,
    /// Baseline network bandwidth in Mbps, where known.
    #[serde(default)]
    pub network_bandwidth_mbps: Option<u64>,
    /// Sustained clock speed in MHz, where known.
    #[serde(default)]
    pub cpu_clock_mhz: Option<u32>,
    /// CPU manufacturer, kebab case.
    #[serde(default)]
    pub cpu_manufacturer: Option<String>,
    /// Maximum EBS bandwidth in Mbps.
    #[serde(default)]
    pub ebs_bandwidth_mbps: Option<u64>,
    /// Local NVMe storage in GB.
    #[serde(default)]
    pub local_nvme_gb: Option<u64>,
    /// GPUs, if any.
    #[serde(default)]
    pub gpu: Option<Gpu>,
    /// AWS Neuron devices (Inferentia, Trainium), if any.
    #[serde(default)]
    pub neuron: Option<Neuron>,
    /// Whether it runs Nitro Enclaves (`enclaveOptions`).
    #[serde(default)]
    pub nitro_enclaves: bool,
    /// Whether it supports nested virtualization (`cpuOptions`).
    #[serde(default)]
    pub nested_virtualization: bool,
    /// Most interfaces per network card, by card index, when it has more than one card
    /// (one card holds all `max_enis` otherwise).
    #[serde(default)]
    pub network_cards: Vec<u32>,
    /// Most EFA interfaces, where it has EFA.
    #[serde(default)]
    pub max_efa: Option<u32>,
}

impl InstanceTypeInfo {
    /// Most interfaces network card `index` takes; 0 for a card it does not have.
    pub fn card_interfaces(&self, index: usize) -> u32 {
        match (self.network_cards.is_empty(), index) {
            (true, 0) => self.max_enis,
            (true, _) => 0,
            (false, i) => self.network_cards.get(i).copied().unwrap_or(0),
        }
    }
}

/// GPUs of an instance type.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Gpu {
    /// Kebab-case name: `a10g`, `t4`, `l4`.
    pub name: String,
    /// Kebab-case manufacturer: `nvidia`, `amd`, `habana`.
    pub manufacturer: String,
    /// Number of GPUs.
    pub count: u32,
    /// Memory of one GPU in MiB.
    pub memory_mib: u64,
}

/// AWS Neuron accelerators of an instance type.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Neuron {
    /// Kebab-case name: `inferentia`, `trainium`.
    pub name: String,
    /// Number of devices.
    pub count: u32,
    /// Number of NeuronCores.
    pub cores: u32,
}

#[derive(Deserialize)]
struct TypesFile {
    types: Vec<InstanceTypeInfo>,
}

/// The offerings file with each region's text left unparsed: a process reads one region or
/// two, and all of them parsed would hold about 2 MB.
#[derive(Deserialize)]
struct OfferingsFile {
    #[serde(borrow)]
    regions: BTreeMap<&'static str, &'static serde_json::value::RawValue>,
}

/// The regions, each parsed when first asked for.
struct Offerings {
    file: OfferingsFile,
    parsed: BTreeMap<&'static str, OnceLock<RegionOfferings>>,
}

/// Zones of a region and, per instance type, the indices of the zones that offer it.
#[derive(Deserialize)]
struct RegionOfferings {
    zones: Vec<String>,
    types: BTreeMap<String, Vec<usize>>,
}

/// Why the catalog cannot answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// The region is not in the embedded data.
    #[error("unknown region {region:?}; known regions: {known}")]
    UnknownRegion {
        /// The region asked for.
        region: String,
        /// The regions the catalog has, comma-separated.
        known: String,
    },
}

static TYPES: LazyLock<Vec<InstanceTypeInfo>> = LazyLock::new(|| {
    let file: TypesFile = serde_json::from_str(include_str!("../data/instance-types.json"))
        .expect("embedded instance-types.json is valid (checked by tests)");
    file.types
});

static OFFERINGS: LazyLock<Offerings> = LazyLock::new(|| {
    let file: OfferingsFile = serde_json::from_str(include_str!("../data/offerings.json"))
        .expect("embedded offerings.json is valid (checked by tests)");
    let parsed = file.regions.keys().map(|r| (*r, OnceLock::new())).collect();
    Offerings { file, parsed }
});

/// Every instance type in the catalog, sorted by name.
pub fn all() -> &'static [InstanceTypeInfo] {
    &TYPES
}

/// The facts of one instance type.
pub fn get(name: &str) -> Option<&'static InstanceTypeInfo> {
    TYPES
        .binary_search_by(|t| t.name.as_str().cmp(name))
        .ok()
        .map(|i| &TYPES[i])
}

/// The regions the catalog knows.
pub fn regions() -> impl Iterator<Item = &'static str> {
    OFFERINGS.file.regions.keys().copied()
}

/// The zones of a region, sorted.
pub fn zones(region: &str) -> Result<&'static [String], CatalogError> {
    region_offerings(region).map(|r| r.zones.as_slice())
}

/// The zones of `region` that offer `instance_type`, sorted.
pub fn zones_offering(
    region: &str,
    instance_type: &str,
) -> Result<Vec<&'static str>, CatalogError> {
    let r = region_offerings(region)?;
    Ok(r.types
        .get(instance_type)
        .map(|idx| {
            idx.iter()
                .filter_map(|&i| r.zones.get(i))
                .map(String::as_str)
                .collect()
        })
        .unwrap_or_default())
}

fn region_offerings(region: &str) -> Result<&'static RegionOfferings, CatalogError> {
    let offerings: &'static Offerings = &OFFERINGS;
    let (Some(raw), Some(parsed)) = (
        offerings.file.regions.get(region),
        offerings.parsed.get(region),
    ) else {
        return Err(CatalogError::UnknownRegion {
            region: region.to_string(),
            known: regions().collect::<Vec<_>>().join(", "),
        });
    };
    Ok(parsed.get_or_init(|| {
        serde_json::from_str(raw.get())
            .expect("embedded offerings.json is valid (checked by tests)")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_loads_and_is_sorted() {
        assert!(all().len() > 1000);
        assert!(all().windows(2).all(|w| w[0].name < w[1].name));
        let m5 = get("m5.large").unwrap();
        assert_eq!(
            (m5.vcpu, m5.memory_mib, m5.max_enis, m5.ipv4_per_eni),
            (2, 8192, 3, 10)
        );
        assert_eq!(get("m6g.large").unwrap().arch, "arm64");
        assert!(get("no.such").is_none());
    }

    #[test]
    fn offerings_per_region() {
        assert!(regions().any(|r| r == "ap-northeast-2"));
        // each region is parsed when first asked for: every one parses
        for r in regions() {
            assert!(!zones(r).unwrap().is_empty(), "{r}");
        }
        assert_eq!(zones("us-east-1").unwrap()[0], "us-east-1a");
        let z = zones_offering("us-east-1", "m5.large").unwrap();
        assert!(z.len() >= 3, "{z:?}");
        assert!(matches!(
            zones("mars-1"),
            Err(CatalogError::UnknownRegion { .. })
        ));
    }
}
