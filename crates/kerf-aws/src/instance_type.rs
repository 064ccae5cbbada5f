//! Instance types as a region offers them: capacity, overhead, allocatable, the labels
//! Karpenter derives, and the (zone × capacity type) offerings with prices.

use std::collections::BTreeMap;

use kerf_api::labels;

use crate::capacity::{NodeSettings, Resources, capacity, overhead};
use crate::catalog::{self, CatalogError, InstanceTypeInfo};
use crate::pricing::{model, spot_price};

/// One way to buy an instance type: a zone and a capacity type, at a price (the scheduler's
/// view of it is [`kerf_scheduling::Offering`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PricedOffering {
    /// Availability zone.
    pub zone: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: &'static str,
    /// USD per hour.
    pub price_per_hour: f64,
    /// The capacity reservation a `reserved` offering launches into.
    pub reservation: Option<crate::reservations::Reserved>,
}

/// An instance type with everything the scheduler needs to know about it.
#[derive(Clone, Debug)]
pub struct InstanceType<'a> {
    /// The catalog facts: the embedded catalog's, or ones EC2 described.
    pub info: &'a InstanceTypeInfo,
    /// What the instance offers the kubelet.
    pub capacity: Resources,
    /// What the kubelet keeps (kube-reserved, system-reserved, eviction thresholds).
    pub overhead: Resources,
    /// Capacity less overhead: what pods can request.
    pub allocatable: Resources,
    /// Labels every node of this type carries (zone and capacity type are per offering).
    pub labels: BTreeMap<String, String>,
    /// How many EBS volumes a node of it attaches, as its CSINode will say.
    pub ebs_attachments: i64,
    /// Ways to buy it in the region, cheapest first.
    pub offerings: Vec<PricedOffering>,
}

impl InstanceType<'_> {
    /// `m5.large`.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The cheapest offering, if any.
    pub fn cheapest(&self) -> Option<&PricedOffering> {
        self.offerings.first()
    }
}

/// The labels Karpenter's AWS provider derives from an instance type.
pub fn labels_of(info: &InstanceTypeInfo) -> BTreeMap<String, String> {
    let (family, size) = info.name.split_once('.').unwrap_or((&info.name, ""));
    let category: String = family
        .chars()
        .take_while(|c| c.is_ascii_lowercase())
        .collect();
    let generation: String = family[category.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let mut l = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        l.insert(k.to_string(), v);
    };
    put(labels::INSTANCE_TYPE, info.name.clone());
    put(labels::ARCH, info.arch.clone());
    put(labels::OS, "linux".into());
    put(labels::INSTANCE_FAMILY, family.into());
    put(labels::INSTANCE_SIZE, size.into());
    put(labels::INSTANCE_CATEGORY, category);
    if !generation.is_empty() {
        put(labels::INSTANCE_GENERATION, generation);
    }
    put(labels::INSTANCE_CPU, info.vcpu.to_string());
    put(labels::INSTANCE_MEMORY, info.memory_mib.to_string());
    put(labels::INSTANCE_HYPERVISOR, info.hypervisor.clone());
    put(
        labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
        info.encryption_in_transit.to_string(),
    );
    if let Some(m) = &info.cpu_manufacturer {
        put(labels::INSTANCE_CPU_MANUFACTURER, m.clone());
    }
    if let Some(mhz) = info.cpu_clock_mhz {
        put(
            labels::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
            mhz.to_string(),
        );
    }
    if let Some(bw) = info.network_bandwidth_mbps {
        put(labels::INSTANCE_NETWORK_BANDWIDTH, bw.to_string());
    }
    if let Some(bw) = info.ebs_bandwidth_mbps {
        put(labels::INSTANCE_EBS_BANDWIDTH, bw.to_string());
    }
    if let Some(gb) = info.local_nvme_gb {
        put(labels::INSTANCE_LOCAL_NVME, gb.to_string());
    }
    if let Some(g) = &info.gpu {
        put(labels::INSTANCE_GPU_NAME, g.name.clone());
        put(labels::INSTANCE_GPU_MANUFACTURER, g.manufacturer.clone());
        put(labels::INSTANCE_GPU_COUNT, g.count.to_string());
        put(labels::INSTANCE_GPU_MEMORY, g.memory_mib.to_string());
    }
    if let Some(n) = &info.neuron {
        put(labels::INSTANCE_ACCELERATOR_NAME, n.name.clone());
        put(labels::INSTANCE_ACCELERATOR_MANUFACTURER, "aws".into());
        put(labels::INSTANCE_ACCELERATOR_COUNT, n.count.to_string());
    }
    l
}

/// Every priced instance type of the embedded catalog offered in `region`, with capacity
/// computed for `settings`, sorted by cheapest offering (then name). Prices are us-east-1
/// list prices in every region.
pub fn instance_types(
    region: &str,
    settings: &NodeSettings,
) -> Result<Vec<InstanceType<'static>>, CatalogError> {
    catalog::zones(region)?; // an unknown region is an error, not an empty list
    Ok(instance_types_of(catalog::all(), settings, |name| {
        catalog::zones_offering(region, name).unwrap_or_default()
    }))
}

/// As [`instance_types`], for facts and zones read elsewhere (EC2's own answers):
/// `zones_offering(name)` lists the zones that offer a type.
pub fn instance_types_of<'a, Z: AsRef<str>>(
    infos: &'a [InstanceTypeInfo],
    settings: &NodeSettings,
    zones_offering: impl Fn(&str) -> Vec<Z>,
) -> Vec<InstanceType<'a>> {
    let prices = model();
    let mut out = Vec::new();
    for info in infos {
        let Some(on_demand) = prices.on_demand(info) else {
            continue;
        };
        if !settings.launch.admit(info) {
            continue;
        }
        let zones = zones_offering(&info.name);
        if zones.is_empty() {
            continue;
        }
        let mut offerings = Vec::with_capacity(zones.len() * 2);
        for zone in &zones {
            let zone = zone.as_ref();
            offerings.push(PricedOffering {
                zone: zone.to_string(),
                capacity_type: labels::CAPACITY_TYPE_ON_DEMAND,
                price_per_hour: on_demand,
                reservation: None,
            });
            if info.spot {
                offerings.push(PricedOffering {
                    zone: zone.to_string(),
                    capacity_type: labels::CAPACITY_TYPE_SPOT,
                    price_per_hour: spot_price(&info.name, zone, on_demand),
                    reservation: None,
                });
            }
        }
        offerings.sort_by(|a, b| {
            a.price_per_hour
                .total_cmp(&b.price_per_hour)
                .then_with(|| a.zone.cmp(&b.zone))
                .then_with(|| a.capacity_type.cmp(b.capacity_type))
        });
        let capacity = capacity(info, settings);
        let overhead = overhead(info, settings, &capacity);
        out.push(InstanceType {
            info,
            allocatable: capacity.saturating_sub(&overhead),
            capacity,
            overhead,
            labels: labels_of(info),
            ebs_attachments: crate::attach_limits::ebs(info, settings.block_devices),
            offerings,
        });
    }
    out.sort_by(|a, b| {
        let price = |t: &InstanceType| t.cheapest().map_or(f64::MAX, |o| o.price_per_hour);
        price(a)
            .total_cmp(&price(b))
            .then_with(|| a.name().cmp(b.name()))
    });
    out
}

/// The scheduler's view of instance types; `unavailable(capacity_type, instance_type, zone)`
/// marks offerings the cloud recently could not fill.
pub fn scheduler_options(
    types: &[InstanceType],
    unavailable: impl Fn(&str, &str, &str) -> bool,
) -> Vec<kerf_scheduling::InstanceTypeOption> {
    types
        .iter()
        .map(|t| kerf_scheduling::InstanceTypeOption {
            name: t.name().to_string(),
            labels: t.labels.clone().into(),
            capacity: t.capacity.clone(),
            allocatable: {
                // the scheduler counts attachments as a resource; the node's own
                // allocatable (and the NodeClaim's) does not carry it
                let mut a = t.allocatable.clone();
                let ebs = format!(
                    "{}{}",
                    kerf_api::labels::ATTACHABLE_VOLUMES,
                    kerf_api::labels::EBS_CSI_DRIVER
                );
                a.extended.insert(ebs, t.ebs_attachments);
                a
            },
            offerings: t
                .offerings
                .iter()
                .map(|o| kerf_scheduling::Offering {
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.to_string(),
                    price_per_hour: o.price_per_hour,
                    available: !unavailable(o.capacity_type, t.name(), &o.zone),
                    reservation: o
                        .reservation
                        .as_ref()
                        .map(|r| kerf_scheduling::Reservation {
                            id: r.id.clone(),
                            capacity: r.capacity,
                        }),
                })
                .collect(),
        })
        .collect()
}
