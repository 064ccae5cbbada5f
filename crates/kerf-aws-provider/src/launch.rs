//! Launching, listing and terminating a NodeClaim's instance with EC2 Fleet, as Karpenter does:
//! a launch template per AMI (named by the hash of what it holds, found or created once and
//! cached), one `instant` CreateFleet request per NodeClaim with an override per instance type
//! and zone it allows (at most 60, cheapest first, in the subnet with the most free addresses),
//! `price-capacity-optimized` for spot and `lowest-price` for on-demand — requests of the same
//! shape sent together as one (`fleet_batch`) — and the tags that let garbage collection and
//! IAM conditions find Kerf's instances. An instance is launched with its NodePool's tags;
//! the tag naming its NodeClaim differs between the instances of one request, so it is written
//! after the launch (`tag_nodeclaim`), as Karpenter's tagging controller does.
//!
//! Fleet errors are sorted as Karpenter sorts them: capacity errors name the offerings to mark
//! unavailable; a subnet out of addresses is left out and the fleet asked again; a denied call
//! names the IAM action.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder;
use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget,
    ConnectionTrackingSpecificationRequest, CreateFleetError, DefaultTargetCapacityType, Filter,
    FleetLaunchTemplateConfigRequest, FleetLaunchTemplateOverridesRequest,
    FleetLaunchTemplateSpecificationRequest, FleetOnDemandAllocationStrategy, FleetType,
    InstanceStateName, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateCapacityReservationSpecificationRequest, LaunchTemplateCpuOptionsRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateEnclaveOptionsRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatePlacementRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest, MarketType,
    NestedVirtualizationSpecification, OnDemandOptionsRequest, RequestLaunchTemplateData,
    ResourceType, SpotAllocationStrategy, SpotOptionsRequest, Tag, TagSpecification,
    TargetCapacitySpecificationRequest, VolumeType,
};
use kerf_api::common::NodeSelectorRequirementWithMinValues as Requirement;
use kerf_api::ec2nodeclass::{
    BlockDeviceMapping, CapacityReservationStatus, EC2NodeClassSpec, EC2NodeClassStatus,
    EnabledDisabled, HttpTokens, InstanceStorePolicy, InterfaceType,
};
use kerf_api::{Taint, labels};
use kerf_core::cluster::InstanceNetwork;

use crate::fleet_batch::FleetBatcher;
use crate::node_class::PlacementGroup;
use crate::user_data::{self, Bootstrap, ClusterInfo, Sizing, UserDataError};
use crate::{AwsError, classify};
use kerf_core::metrics::{Recorder, families};

/// A fleet request carries at most this many overrides (EC2's limit is higher; Karpenter
/// keeps to 60 so that the request stays small and the cheapest options are kept).
pub const MAX_OVERRIDES: usize = 60;
/// Launch template names start with this, as Karpenter's do.
pub const LAUNCH_TEMPLATE_PREFIX: &str = "karpenter.k8s.aws";
/// The tag every Kerf instance carries with its NodeClaim's name.
pub const NODECLAIM_TAG: &str = "karpenter.sh/nodeclaim";
/// The tag with the NodePool's name.
pub const NODEPOOL_TAG: &str = "karpenter.sh/nodepool";
/// The tag with the EC2NodeClass's name.
pub const NODECLASS_TAG: &str = "karpenter.k8s.aws/ec2nodeclass";
/// The tag with the cluster's name, as EKS writes it.
pub const EKS_CLUSTER_TAG: &str = "eks:eks-cluster-name";
/// How long an instance without its NodeClaim's tag is taken to belong to a launch still
/// under way (Karpenter's garbage collection waits as long).
pub const UNCLAIMED_GRACE: Duration = Duration::from_secs(30);
/// How often CreateTags is tried on an instance EC2 does not know yet.
const TAG_ATTEMPTS: u32 = 5;
/// Fleet error codes that mean the offering has no capacity now.
const CAPACITY_ERRORS: &[&str] = &[
    "InsufficientInstanceCapacity",
    "UnfulfillableCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "Unsupported",
    "ReservationCapacityExceeded",
    "InvalidCapacityReservationState.Unavailable",
];
/// The fleet error code of a subnet without free addresses.
const NO_ADDRESSES: &str = "InsufficientFreeAddressesInSubnet";

/// One way the NodeClaim may be launched: an instance type in a zone.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// The instance type's labels (arch, GPU and accelerator counts), matched against the
    /// AMIs' requirements.
    pub labels: BTreeMap<String, String>,
    /// Its kubelet's pod limit and kube-reserved, written into its user data (types that
    /// differ in them get launch templates of their own).
    pub sizing: Sizing,
}

/// What one launch needs.
#[derive(Clone, Copy, Debug)]
pub struct LaunchOrder<'a> {
    /// The NodeClaim's name.
    pub nodeclaim: &'a str,
    /// Its NodePool's name.
    pub node_pool: &'a str,
    /// Its EC2NodeClass's name.
    pub node_class: &'a str,
    /// The class's spec.
    pub spec: &'a EC2NodeClassSpec,
    /// The class's status: subnets, security groups, AMIs and instance profile to use.
    pub status: &'a EC2NodeClassStatus,
    /// `spot` or `on-demand`: one fleet request buys one kind.
    pub capacity_type: &'a str,
    /// The offerings allowed, cheapest first.
    pub choices: &'a [Choice],
    /// The labels the node registers with.
    pub labels: &'a BTreeMap<String, String>,
    /// The taints and startup taints it registers with.
    pub taints: &'a [Taint],
    /// The capacity reservation a `reserved` launch goes into (one of `status`'s).
    pub reservation: Option<&'a CapacityReservationStatus>,
}

/// An instance Kerf runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// `i-…`.
    pub id: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// The NodeClaim it was launched for (its tag, written after the launch).
    pub nodeclaim: Option<String>,
    /// Launched less than [`UNCLAIMED_GRACE`] ago: without its NodeClaim's tag, a launch may
    /// still be about to claim it, so garbage collection leaves it alone.
    pub young: bool,
    /// The image it booted.
    pub image_id: Option<String>,
    /// Its subnet and security groups.
    pub network: Option<InstanceNetwork>,
    /// The capacity reservation it runs in (`Some(None)`: none), as EC2 describes it; `None`
    /// when EC2 does not say (its reservation preference missing from the answer).
    pub reservation: Option<Option<String>>,
}

impl Instance {
    /// The Node's `spec.providerID`: `aws:///<zone>/<id>`.
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.id)
    }
}

/// An offering EC2 had no capacity for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Unavailable {
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
}

/// Why a launch failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// None of the offerings had capacity; mark these unavailable and try others.
    #[error("insufficient capacity: {}", describe(.0))]
    InsufficientCapacity(Vec<Unavailable>),
    /// The node class is not ready to launch from (nothing resolved yet, or nothing of it fits
    /// the NodeClaim).
    #[error("EC2NodeClass {class}: {reason}")]
    NotReady {
        /// The class's name.
        class: String,
        /// What is missing.
        reason: String,
    },
    /// The user data could not be written.
    #[error(transparent)]
    UserData(#[from] UserDataError),
    /// An AWS call failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
}

fn describe(offerings: &[Unavailable]) -> String {
    let shown: Vec<String> = offerings
        .iter()
        .take(5)
        .map(|o| format!("{}/{}/{}", o.capacity_type, o.instance_type, o.zone))
        .collect();
    match offerings.len() {
        0 => "no offering was tried".into(),
        n if n > shown.len() => format!("{} and {} more", shown.join(", "), n - shown.len()),
        _ => shown.join(", "),
    }
}

/// Launches and finds instances with EC2.
#[derive(Debug)]
pub struct Fleet {
    pub(crate) ec2: aws_sdk_ec2::Client,
    cluster: ClusterInfo,
    /// Launch template ids by name, once found or created.
    templates: Mutex<HashMap<String, String>>,
    /// Held by the launch finding or making a template, by its name.
    making: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// How many more instances each capacity reservation takes: EC2's count at the last
    /// class resolution, less the launches into it since (Karpenter's availability cache).
    reservation_room: Mutex<BTreeMap<String, u32>>,
    /// The placement group each class resolved to at its last resolution.
    placement_groups: Mutex<BTreeMap<String, PlacementGroup>>,
    /// Woken when a room or a placement group changes: the controllers' instance types must
    /// be made anew.
    pub(crate) room_changed: tokio::sync::Notify,
    /// The controllers' metrics, once the operator hands them over: launch and
    /// termination failures, user data sizes.
    metrics: std::sync::OnceLock<Recorder>,
    /// Launches of the same shape waiting to go out as one fleet request.
    batcher: FleetBatcher,
    /// The zones' ids, and those shifted away from.
    pub(crate) zonal: Mutex<crate::zonal_shift::Zones>,
}

/// Whether an AMI's requirements admit an instance type's labels (its architecture, and
/// whether it has GPUs or Neuron accelerators).
pub fn admits(requirements: &[Requirement], labels: &BTreeMap<String, String>) -> bool {
    requirements
        .iter()
        .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
}

/// Why none of a NodeClaim's choices could be launched: the zones without a subnet, the
/// instance types without an image, or no choice at all.
fn unlaunchable(no_subnet: &BTreeSet<&str>, no_image: &BTreeSet<&str>) -> String {
    let list = |set: &BTreeSet<&str>| {
        let mut items: Vec<&str> = set.iter().take(5).copied().collect();
        if set.len() > 5 {
            items.push("…");
        }
        items.join(", ")
    };
    let mut causes = Vec::new();
    if !no_subnet.is_empty() {
        causes.push(format!("no subnet in zone(s) {}", list(no_subnet)));
    }
    if !no_image.is_empty() {
        causes.push(format!(
            "no AMI of the class for instance type(s) {}",
            list(no_image)
        ));
    }
    if causes.is_empty() {
        "no available offering for the NodeClaim".to_string()
    } else {
        causes.join("; ")
    }
}

pub(crate) fn tag(key: &str, value: &str) -> Tag {
    Tag::builder().key(key).value(value).build()
}

/// `tags` on each kind of resource a request makes.
pub(crate) fn tag_specifications(tags: &[Tag], kinds: &[ResourceType]) -> Vec<TagSpecification> {
    (kinds.iter())
        .map(|kind| {
            TagSpecification::builder()
                .resource_type(kind.clone())
                .set_tags(Some(tags.to_vec()))
                .build()
        })
        .collect()
}

/// A Kubernetes quantity of bytes (`20Gi`, `100G`) in whole GiB, rounded up, as EBS takes it.
fn volume_gib(size: &str) -> Option<i32> {
    let bytes = kerf_api::Quantity::parse(size).ok()?.units_ceil();
    let gib = (bytes + (1 << 30) - 1) >> 30;
    i32::try_from(gib).ok().filter(|g| *g >= 1)
}

fn block_devices(mappings: &[BlockDeviceMapping]) -> Vec<LaunchTemplateBlockDeviceMappingRequest> {
    mappings
        .iter()
        .map(|m| {
            let ebs = m.ebs.as_ref().map(|e| {
                LaunchTemplateEbsBlockDeviceRequest::builder()
                    .set_delete_on_termination(e.delete_on_termination)
                    .set_encrypted(e.encrypted)
                    .set_iops(e.iops.and_then(|n| i32::try_from(n).ok()))
                    .set_kms_key_id(e.kms_key_id.clone())
                    .set_snapshot_id(e.snapshot_id.clone())
                    .set_volume_initialization_rate(e.volume_initialization_rate)
                    .set_throughput(e.throughput.and_then(|n| i32::try_from(n).ok()))
                    .set_volume_size(e.volume_size.as_deref().and_then(volume_gib))
                    .set_volume_type(e.volume_type.map(|t| {
                        VolumeType::from(
                            serde_json::to_value(t)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_string))
                                .unwrap_or_default()
                                .as_str(),
                        )
                    }))
                    .build()
            });
            LaunchTemplateBlockDeviceMappingRequest::builder()
                .set_device_name(m.device_name.clone())
                .set_ebs(ebs)
                .build()
        })
        .collect()
}

/// The release an AMI alias names (`bottlerocket@v1.46.0` → `v1.46.0`).
fn alias_version(spec: &EC2NodeClassSpec) -> Option<&str> {
    (spec.ami_selector_terms.iter())
        .find_map(|t| t.alias.as_deref())
        .and_then(|a| a.split_once('@'))
        .map(|(_, version)| version)
}

/// The launch template's network interfaces, when the class configures any: one per
/// `networkInterfaces` entry (an `efa-only` one carries no addresses, prefixes or connection
/// tracking), else the primary one alone, with the security groups on each.
fn network_interfaces(
    spec: &EC2NodeClassSpec,
    groups: &[String],
) -> Option<Vec<LaunchTemplateInstanceNetworkInterfaceSpecificationRequest>> {
    let tracking = spec.connection_tracking.as_ref().map(|c| {
        ConnectionTrackingSpecificationRequest::builder()
            .set_tcp_established_timeout(c.tcp_established_timeout)
            .set_udp_stream_timeout(c.udp_stream_timeout)
            .set_udp_timeout(c.udp_timeout)
            .build()
    });
    let addressed = |card: i32, device: i32| {
        LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
            .network_card_index(card)
            .device_index(device)
            .set_groups(Some(groups.to_vec()))
            .set_ipv4_prefix_count(spec.ip_prefix_count)
            .set_associate_public_ip_address(spec.associate_public_ip_address)
            .set_connection_tracking_specification(tracking.clone())
    };
    match spec.network_interfaces.as_deref() {
        Some(nics) if !nics.is_empty() => Some(
            nics.iter()
                .map(|n| match n.interface_type {
                    InterfaceType::Interface => addressed(n.network_card_index, n.device_index)
                        .interface_type(n.interface_type.as_str())
                        .build(),
                    InterfaceType::EfaOnly => {
                        LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                            .network_card_index(n.network_card_index)
                            .device_index(n.device_index)
                            .interface_type(n.interface_type.as_str())
                            .set_groups(Some(groups.to_vec()))
                            .build()
                    }
                })
                .collect(),
        ),
        _ if spec.associate_public_ip_address.is_some()
            || spec.ip_prefix_count.is_some()
            || tracking.is_some() =>
        {
            Some(vec![addressed(0, 0).build()])
        }
        _ => None,
    }
}

/// Everything a launch template holds, hashed into its name.
pub(crate) struct Template {
    name: String,
    data: RequestLaunchTemplateData,
}

impl Fleet {
    /// A client for EC2 and the cluster its nodes join.
    pub fn new(config: &aws_config::SdkConfig, cluster: ClusterInfo) -> Fleet {
        Fleet::with_client(crate::client!(aws_sdk_ec2, config), cluster)
    }

    /// Over a given EC2 client (tests answer it with chosen errors).
    pub fn with_client(ec2: aws_sdk_ec2::Client, cluster: ClusterInfo) -> Fleet {
        Fleet {
            ec2,
            cluster,
            templates: Mutex::default(),
            making: Mutex::default(),
            reservation_room: Mutex::default(),
            placement_groups: Mutex::default(),
            room_changed: tokio::sync::Notify::new(),
            metrics: std::sync::OnceLock::new(),
            batcher: FleetBatcher::default(),
            zonal: Mutex::default(),
        }
    }

    /// Counts into the controllers' metrics from now on (the first handle given stays).
    pub fn count_into(&self, metrics: Recorder) {
        let _ = self.metrics.set(metrics);
    }

    /// EC2's counts of reservations' room, read with a class's status.
    pub fn set_reservation_room(&self, room: BTreeMap<String, u32>) {
        let mut held = (self.reservation_room.lock()).unwrap_or_else(PoisonError::into_inner);
        let before = held.clone();
        held.extend(room);
        if *held != before {
            self.room_changed.notify_one();
        }
    }

    /// The placement group `class` resolved to (none without a selector, or before it was
    /// found).
    pub fn set_placement_group(&self, class: &str, group: Option<PlacementGroup>) {
        let mut held = (self.placement_groups.lock()).unwrap_or_else(PoisonError::into_inner);
        let changed = match group {
            Some(g) => held.insert(class.to_string(), g.clone()) != Some(g),
            None => held.remove(class).is_some(),
        };
        if changed {
            self.room_changed.notify_one();
        }
    }

    /// The placement group `class` launches into.
    pub fn placement_group(&self, class: &str) -> Option<PlacementGroup> {
        (self.placement_groups.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .get(class)
            .cloned()
    }

    /// Returns once a reservation's room or a placement group changed since the last call.
    pub async fn reservation_room_changed(&self) {
        self.room_changed.notified().await;
    }

    /// How many more instances a reservation takes, as far as Kerf knows (0 when unknown).
    pub fn reservation_room(&self, id: &str) -> u32 {
        let held = (self.reservation_room.lock()).unwrap_or_else(PoisonError::into_inner);
        held.get(id).copied().unwrap_or(0)
    }

    /// Every reservation's room, for a catalog's cache key.
    pub fn reservation_rooms(&self) -> BTreeMap<String, u32> {
        (self.reservation_room.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// One instance launched into a reservation (`full`: EC2 said it has no room at all).
    fn took_reservation(&self, id: &str, full: bool) {
        let mut held = (self.reservation_room.lock()).unwrap_or_else(PoisonError::into_inner);
        let room = held.entry(id.to_string()).or_default();
        *room = if full { 0 } else { room.saturating_sub(1) };
        self.room_changed.notify_one();
    }

    pub(crate) fn template(
        &self,
        req: &LaunchOrder<'_>,
        image_id: &str,
        sizing: &Sizing,
        profile: &str,
    ) -> Result<Template, LaunchError> {
        let spec = req.spec;
        // the kubelet may not set some domains' labels itself: the lifecycle puts those on
        // the Node once it registers
        let kubelet_labels: BTreeMap<String, String> = (req.labels.iter())
            .filter(|(k, _)| !kerf_api::labels::kubelet_may_not_set(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let user_data = user_data::user_data(&Bootstrap {
            cluster: &self.cluster,
            family: spec.family(),
            labels: &kubelet_labels,
            taints: req.taints,
            kubelet: spec.kubelet.as_ref(),
            custom: spec.user_data.as_deref(),
            sizing: Some(sizing),
            raid0: spec.instance_store_policy == Some(InstanceStorePolicy::RAID0),
            image_version: alias_version(spec),
        })?;
        if let Some(m) = self.metrics.get() {
            // the size EC2 limits: the script before its base64
            let raw = user_data.len() / 4 * 3
                - user_data.bytes().rev().take_while(|b| *b == b'=').count();
            m.set(
                &families::EC2NODECLASSES_USERDATA_BYTES,
                &[req.node_class],
                raw as f64,
            );
        }
        let groups: Vec<String> = req
            .status
            .security_groups
            .iter()
            .map(|g| g.id.clone())
            .collect();
        let metadata = &spec.metadata_options;
        let endpoint = match metadata.http_endpoint {
            Some(EnabledDisabled::Disabled) => {
                LaunchTemplateInstanceMetadataEndpointState::Disabled
            }
            _ => LaunchTemplateInstanceMetadataEndpointState::Enabled,
        };
        let tokens = match metadata.http_tokens {
            Some(HttpTokens::Optional) => LaunchTemplateHttpTokensState::Optional,
            _ => LaunchTemplateHttpTokensState::Required,
        };
        let hop_limit = metadata
            .http_put_response_hop_limit
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(1);
        let placement = self.placement_group(req.node_class);
        // what the name hashes: every input, in a fixed order
        let key = serde_json::json!({
            "cluster": self.cluster.name,
            "image": image_id,
            "groups": groups,
            "userData": user_data,
            "profile": profile,
            "blockDevices": spec.block_device_mappings,
            "metadata": spec.metadata_options,
            "monitoring": spec.detailed_monitoring,
            "publicIp": spec.associate_public_ip_address,
            "tags": spec.tags,
            "reservation": req.reservation.map(|r| (&r.id, &r.reservation_type)),
            "prefixes": spec.ip_prefix_count,
            "interfaces": spec.network_interfaces,
            "connectionTracking": spec.connection_tracking,
            "cpu": spec.cpu_options,
            "enclaves": spec.enclave_options,
            "placementGroup": placement.as_ref().map(|g| &g.id),
        });
        let name = format!(
            "{LAUNCH_TEMPLATE_PREFIX}/{}",
            kerf_core::hash::fnv1a(key.to_string().as_bytes())
        );
        // the groups go on the instance unless the class configures interfaces (the public
        // address, prefixes, connection tracking, several interfaces): EC2 then wants them on
        // the interfaces
        let interfaces = network_interfaces(spec, &groups);
        let group_ids = interfaces.is_none().then_some(groups);
        let mut template_tags = vec![
            tag(EKS_CLUSTER_TAG, &self.cluster.name),
            tag(NODECLASS_TAG, req.node_class),
        ];
        template_tags.extend(spec.tags.iter().map(|(k, v)| tag(k, v)));
        let data = RequestLaunchTemplateData::builder()
            .image_id(image_id)
            .user_data(user_data)
            .iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(profile)
                    .build(),
            )
            .set_network_interfaces(interfaces)
            .set_security_group_ids(group_ids)
            .set_block_device_mappings(
                (!spec.block_device_mappings.is_empty())
                    .then(|| block_devices(&spec.block_device_mappings)),
            )
            .metadata_options(
                LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_endpoint(endpoint)
                    .http_tokens(tokens)
                    .http_put_response_hop_limit(hop_limit)
                    .build(),
            )
            // into the class's placement group (EC2 picks a partition of a partition group)
            .set_placement(placement.as_ref().map(|g| {
                LaunchTemplatePlacementRequest::builder()
                    .group_id(&g.id)
                    .build()
            }))
            .set_cpu_options(
                (spec.cpu_options.as_ref())
                    .and_then(|c| c.nested_virtualization)
                    .map(|n| {
                        LaunchTemplateCpuOptionsRequest::builder()
                            .nested_virtualization(NestedVirtualizationSpecification::from(
                                n.as_str(),
                            ))
                            .build()
                    }),
            )
            // sent either way, as Karpenter does
            .enclave_options(
                LaunchTemplateEnclaveOptionsRequest::builder()
                    .enabled(spec.enclave_options.as_ref().is_some_and(|e| e.enabled))
                    .build(),
            )
            .monitoring(
                LaunchTemplatesMonitoringRequest::builder()
                    .enabled(spec.detailed_monitoring.unwrap_or(false))
                    .build(),
            )
            .tag_specifications(
                LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(ResourceType::NetworkInterface)
                    .set_tags(Some(template_tags))
                    .build(),
            )
            // a reserved launch targets its reservation alone, a capacity block as its market
            .set_capacity_reservation_specification(req.reservation.map(|r| {
                LaunchTemplateCapacityReservationSpecificationRequest::builder()
                    .capacity_reservation_preference(
                        CapacityReservationPreference::CapacityReservationsOnly,
                    )
                    .capacity_reservation_target(
                        CapacityReservationTarget::builder()
                            .capacity_reservation_id(&r.id)
                            .build(),
                    )
                    .build()
            }))
            // a capacity block and an interruptible reservation are markets of their own
            .set_instance_market_options(req.reservation.and_then(reservation_market).map(
                |market| {
                    LaunchTemplateInstanceMarketOptionsRequest::builder()
                        .market_type(market)
                        .build()
                },
            ))
            .build();
        Ok(Template { name, data })
    }

    /// The id of the launch template named `t.name`: cached, found, or created.
    pub(crate) async fn ensure(&self, t: Template, node_class: &str) -> Result<String, AwsError> {
        let known = |name: &str| {
            let templates = self.templates.lock();
            (templates.unwrap_or_else(PoisonError::into_inner).get(name)).cloned()
        };
        if let Some(id) = known(&t.name) {
            return Ok(id);
        }
        // launches in flight together that need the same new template make it once: the
        // others wait for it here and find it made
        let making = Arc::clone(
            (self.making.lock().unwrap_or_else(PoisonError::into_inner))
                .entry(t.name.clone())
                .or_default(),
        );
        let _making = making.lock().await;
        if let Some(id) = known(&t.name) {
            return Ok(id);
        }
        let found = self
            .ec2
            .describe_launch_templates()
            .launch_template_names(&t.name)
            .send()
            .await;
        let id = match found {
            Ok(out) => out
                .launch_templates()
                .first()
                .and_then(|lt| lt.launch_template_id())
                .map(str::to_string),
            Err(e) if e.code() == Some("InvalidLaunchTemplateName.NotFoundException") => None,
            Err(e) => {
                return Err(classify(
                    "DescribeLaunchTemplates",
                    "ec2:DescribeLaunchTemplates",
                    e,
                ));
            }
        };
        let id = match id {
            Some(id) => id,
            None => {
                let tags = TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .tags(tag(EKS_CLUSTER_TAG, &self.cluster.name))
                    .tags(tag(
                        &format!("kubernetes.io/cluster/{}", self.cluster.name),
                        "owned",
                    ))
                    .tags(tag(NODECLASS_TAG, node_class))
                    .build();
                let out = self
                    .ec2
                    .create_launch_template()
                    .launch_template_name(&t.name)
                    .launch_template_data(t.data)
                    .tag_specifications(tags)
                    .send()
                    .await
                    .map_err(|e| classify("CreateLaunchTemplate", "ec2:CreateLaunchTemplate", e))?;
                // an answer without an id is not cached: the next launch looks again
                let made = out.launch_template().and_then(|lt| lt.launch_template_id());
                made.map(str::to_string).ok_or_else(|| AwsError::Api {
                    call: "CreateLaunchTemplate",
                    message: format!("{}: answered without a template id", t.name),
                })?
            }
        };
        self.templates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(t.name, id.clone());
        Ok(id)
    }

    /// Deletes the launch templates made for `node_class` in this cluster (found by their
    /// tags) and forgets them; returns how many went.
    pub async fn delete_launch_templates(&self, node_class: &str) -> Result<usize, AwsError> {
        let found: Vec<_> = self
            .ec2
            .describe_launch_templates()
            .filters(
                Filter::builder()
                    .name(format!("tag:{NODECLASS_TAG}"))
                    .values(node_class)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name(format!("tag:{EKS_CLUSTER_TAG}"))
                    .values(&self.cluster.name)
                    .build(),
            )
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| classify("DescribeLaunchTemplates", "ec2:DescribeLaunchTemplates", e))?;
        let ids: Vec<&str> = found
            .iter()
            .filter_map(|t| t.launch_template_id())
            .collect();
        for id in &ids {
            match self
                .ec2
                .delete_launch_template()
                .launch_template_id(*id)
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) if e.code().is_some_and(|c| c.contains("NotFound")) => {}
                Err(e) => {
                    return Err(classify(
                        "DeleteLaunchTemplate",
                        "ec2:DeleteLaunchTemplate",
                        e,
                    ));
                }
            }
        }
        self.templates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, id| !ids.contains(&id.as_str()));
        Ok(ids.len())
    }

    pub(crate) fn instance_tags(&self, req: &LaunchOrder<'_>) -> Vec<Tag> {
        let mut tags: BTreeMap<String, String> = req.spec.tags.clone();
        for (k, v) in [
            (NODEPOOL_TAG.to_string(), req.node_pool),
            (NODECLASS_TAG.to_string(), req.node_class),
            (
                format!("kubernetes.io/cluster/{}", self.cluster.name),
                "owned",
            ),
            (EKS_CLUSTER_TAG.to_string(), self.cluster.name.as_str()),
        ] {
            tags.insert(k, v.to_string());
        }
        tags.iter().map(|(k, v)| tag(k, v)).collect()
    }

    /// Launches one instance for the NodeClaim.
    pub async fn launch(&self, req: &LaunchOrder<'_>) -> Result<Instance, LaunchError> {
        let not_ready = |reason: &str| LaunchError::NotReady {
            class: req.node_class.to_string(),
            reason: reason.to_string(),
        };
        let status = req.status;
        if status.subnets.is_empty() {
            return Err(not_ready("no subnets resolved (status.subnets is empty)"));
        }
        if status.security_groups.is_empty() {
            return Err(not_ready(
                "no security groups resolved (status.securityGroups is empty)",
            ));
        }
        if status.amis.is_empty() {
            return Err(not_ready("no AMIs resolved (status.amis is empty)"));
        }
        let profile = status
            .instance_profile
            .clone()
            .or_else(|| req.spec.instance_profile.clone())
            .ok_or_else(|| not_ready("no instance profile (status.instanceProfile is empty)"))?;
        let mut skipped_subnets: BTreeSet<String> = BTreeSet::new();
        // a subnet out of addresses is dropped and the fleet asked again, at most once per
        // subnet
        for _ in 0..=status.subnets.len() {
            match self.try_launch(req, &profile, &skipped_subnets).await? {
                Attempt::Launched(instance) => return Ok(instance),
                Attempt::Exhausted(subnets) if !subnets.is_subset(&skipped_subnets) => {
                    skipped_subnets.extend(subnets);
                }
                Attempt::Exhausted(_) => break,
                Attempt::Failed(e) => return Err(e),
            }
        }
        Err(not_ready(
            "every subnet for the NodeClaim's zones is out of free addresses",
        ))
    }

    async fn try_launch(
        &self,
        req: &LaunchOrder<'_>,
        profile: &str,
        skipped_subnets: &BTreeSet<String>,
    ) -> Result<Attempt, LaunchError> {
        let by_image = match overrides_by_image(req, skipped_subnets) {
            Ok(by_image) => by_image,
            Err(reason) => {
                let class = req.node_class.to_string();
                return Ok(Attempt::Failed(LaunchError::NotReady { class, reason }));
            }
        };
        let mut configs = Vec::new();
        let mut zone_of_subnet: HashMap<String, String> = HashMap::new();
        for ((image, sizing), overrides) in &by_image {
            let template = self.template(req, image, sizing, profile)?;
            let id = self.ensure(template, req.node_class).await?;
            let overrides: Vec<FleetLaunchTemplateOverridesRequest> = overrides
                .iter()
                .enumerate()
                .map(|(priority, (choice, subnet))| {
                    zone_of_subnet.insert(subnet.to_string(), choice.zone.clone());
                    FleetLaunchTemplateOverridesRequest::builder()
                        .instance_type(choice.instance_type.as_str().into())
                        .subnet_id(*subnet)
                        .priority(priority as f64)
                        .build()
                })
                .collect();
            configs.push(
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_id(id)
                            .version("$Latest")
                            .build(),
                    )
                    .set_overrides(Some(overrides))
                    .build(),
            );
        }
        let fleet = self.fleet_request(req, configs);
        let metrics = self.metrics.get().cloned();
        let share = self.batcher.create_fleet(fleet, metrics).await?;
        if let Some(r) = req.reservation {
            let full = (share.errors.iter())
                .any(|e| e.error_code() == Some("ReservationCapacityExceeded"));
            if full || share.instance.is_some() {
                self.took_reservation(&r.id, full);
            }
        }
        self.count_launch_failures(&share.errors, req, &zone_of_subnet);
        let launched = (share.instance.as_ref())
            .and_then(|launched| instance_of(launched, req, &by_image, &zone_of_subnet));
        if let Some(instance) = launched {
            return Ok(Attempt::Launched(instance));
        }
        Ok(sort_errors(&share.errors, req, &zone_of_subnet))
    }

    /// The instant fleet request of one instance for `req` over the launch template
    /// configurations `configs`: its capacity type (spot, a capacity block, else on-demand)
    /// with Karpenter's allocation strategies, and its tags on the instance, its volumes and
    /// the fleet.
    pub(crate) fn fleet_request(
        &self,
        req: &LaunchOrder<'_>,
        configs: Vec<FleetLaunchTemplateConfigRequest>,
    ) -> CreateFleetFluentBuilder {
        let spot = req.capacity_type == labels::CAPACITY_TYPE_SPOT;
        let block = req
            .reservation
            .is_some_and(|r| r.reservation_type == "capacity-block");
        let tags = self.instance_tags(req);
        let kinds = [
            ResourceType::Instance,
            ResourceType::Volume,
            ResourceType::Fleet,
        ];
        let tag_specs = tag_specifications(&tags, &kinds);
        let fleet = self
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .set_launch_template_configs(Some(configs))
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(if spot {
                        DefaultTargetCapacityType::Spot
                    } else if block {
                        DefaultTargetCapacityType::CapacityBlock
                    } else {
                        DefaultTargetCapacityType::OnDemand
                    })
                    .build(),
            )
            .set_tag_specifications(Some(tag_specs));
        if spot {
            fleet.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .build(),
            )
        } else if block {
            fleet
        } else {
            fleet.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                    .build(),
            )
        }
    }

    /// Karpenter's launch-failure counter: one per offering the fleet refused, by zone,
    /// zone id, capacity type and reason.
    fn count_launch_failures(
        &self,
        errors: &[CreateFleetError],
        req: &LaunchOrder<'_>,
        zone_of_subnet: &HashMap<String, String>,
    ) {
        let Some(m) = self.metrics.get() else { return };
        for e in errors {
            let overrides = (e.launch_template_and_overrides()).and_then(|l| l.overrides());
            let subnet = overrides.and_then(|o| o.subnet_id());
            let zone = (overrides.and_then(|o| o.availability_zone()))
                .or_else(|| {
                    subnet
                        .and_then(|s| zone_of_subnet.get(s))
                        .map(String::as_str)
                })
                .unwrap_or("");
            let zone_id = (req.status.subnets.iter())
                .find(|s| Some(s.id.as_str()) == subnet || (subnet.is_none() && s.zone == zone))
                .and_then(|s| s.zone_id.as_deref())
                .unwrap_or("");
            let text = format!(
                "{}: {}",
                e.error_code().unwrap_or_default(),
                e.error_message().unwrap_or_default()
            );
            m.inc(
                &families::CLOUDPROVIDER_INSTANCE_LAUNCH_FAILURES,
                &[
                    req.capacity_type,
                    launch_failure_reason(&text),
                    zone,
                    zone_id,
                ],
            );
        }
    }

    /// Tags a launched instance with its NodeClaim's name (which launches batched together
    /// cannot carry from the fleet request). An instance EC2 does not know yet — it answers
    /// CreateTags from an eventually consistent view — is asked again after a pause.
    pub async fn tag_nodeclaim(&self, instance_id: &str, nodeclaim: &str) -> Result<(), AwsError> {
        let mut pause = Duration::from_millis(250);
        let mut attempt = 1;
        loop {
            let sent = self
                .ec2
                .create_tags()
                .resources(instance_id)
                .tags(tag(NODECLAIM_TAG, nodeclaim))
                .send()
                .await;
            match sent {
                Ok(_) => return Ok(()),
                Err(e)
                    if attempt < TAG_ATTEMPTS && e.code() == Some("InvalidInstanceID.NotFound") =>
                {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(classify("CreateTags", "ec2:CreateTags", e)),
            }
        }
    }

    /// The instances Kerf launched for this cluster that are not terminated (found by their
    /// NodePool's tag, which every launch writes).
    pub async fn list(&self) -> Result<Vec<Instance>, AwsError> {
        let reservations: Vec<_> = self
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("tag-key")
                    .values(NODEPOOL_TAG)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name(format!("tag:{EKS_CLUSTER_TAG}"))
                    .values(&self.cluster.name)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .set_values(Some(
                        ["pending", "running", "stopping", "stopped", "shutting-down"]
                            .map(String::from)
                            .to_vec(),
                    ))
                    .build(),
            )
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| classify("DescribeInstances", "ec2:DescribeInstances", e))?;
        let mut instances = Vec::new();
        for r in reservations {
            for i in r.instances() {
                let (Some(id), Some(zone)) = (
                    i.instance_id(),
                    i.placement().and_then(|p| p.availability_zone()),
                ) else {
                    continue;
                };
                if i.state().and_then(|s| s.name()) == Some(&InstanceStateName::Terminated) {
                    continue;
                }
                let tag_value = |key: &str| {
                    i.tags()
                        .iter()
                        .find(|t| t.key() == Some(key))
                        .and_then(|t| t.value())
                        .map(str::to_string)
                };
                instances.push(Instance {
                    young: i.launch_time().is_some_and(launched_within_grace),
                    id: id.to_string(),
                    instance_type: i
                        .instance_type()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default(),
                    zone: zone.to_string(),
                    capacity_type: match i.instance_lifecycle() {
                        Some(l) if l.as_str() == "spot" => labels::CAPACITY_TYPE_SPOT,
                        _ => labels::CAPACITY_TYPE_ON_DEMAND,
                    }
                    .to_string(),
                    nodeclaim: tag_value(NODECLAIM_TAG),
                    image_id: i.image_id().map(str::to_string),
                    // in a reservation only while it targets reservations alone, as
                    // Karpenter reads it (an ended on-demand reservation's instances run on
                    // with the `open` preference)
                    reservation: i.capacity_reservation_specification().map(|spec| {
                        let only = spec.capacity_reservation_preference()
                            == Some(&CapacityReservationPreference::CapacityReservationsOnly);
                        i.capacity_reservation_id()
                            .filter(|_| only)
                            .map(str::to_string)
                    }),
                    network: i.subnet_id().map(|subnet| InstanceNetwork {
                        subnet_id: subnet.to_string(),
                        security_group_ids: i
                            .security_groups()
                            .iter()
                            .filter_map(|g| g.group_id())
                            .map(str::to_string)
                            .collect(),
                    }),
                });
            }
        }
        instances.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(instances)
    }

    /// Terminates the instance of a provider id (`aws:///<zone>/<id>`); one already gone is
    /// not an error.
    pub async fn terminate(&self, provider_id: &str) -> Result<(), AwsError> {
        let Some(id) = instance_id(provider_id) else {
            return Ok(());
        };
        self.unless_shifted(provider_id, "TerminateInstances", "termination")?;
        match self.ec2.terminate_instances().instance_ids(id).send().await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("InvalidInstanceID.NotFound") => Ok(()),
            Err(e) => {
                if let Some(m) = self.metrics.get() {
                    let (zone, zone_id) = self.zone_of(provider_id);
                    m.inc(
                        &families::CLOUDPROVIDER_INSTANCE_TERMINATION_FAILURES,
                        &[&zone, &zone_id],
                    );
                }
                Err(classify("TerminateInstances", "ec2:TerminateInstances", e))
            }
        }
    }
}

/// How a reboot for repair ended, as [`Fleet::reboot`] tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RebootOutcome {
    /// EC2 took it.
    Rebooted,
    /// The instance is gone: nothing to reboot.
    NotFound,
}

impl Fleet {
    /// Reboots the instance of a provider id in place (`ec2:RebootInstances`, which the
    /// `RebootForRepair` gate needs granted): EC2 takes no client token, so a retried call
    /// reboots again, as Karpenter's does.
    pub async fn reboot(&self, provider_id: &str) -> Result<RebootOutcome, AwsError> {
        let Some(id) = instance_id(provider_id) else {
            return Ok(RebootOutcome::NotFound);
        };
        self.unless_shifted(provider_id, "RebootInstances", "reboot")?;
        match self.ec2.reboot_instances().instance_ids(id).send().await {
            Ok(_) => Ok(RebootOutcome::Rebooted),
            Err(e) if e.code() == Some("InvalidInstanceID.NotFound") => Ok(RebootOutcome::NotFound),
            Err(e) => Err(classify("RebootInstances", "ec2:RebootInstances", e)),
        }
    }
}

/// The reason Karpenter's launch-failure counter gives a fleet error (`code: message`): the
/// first of its named causes the text shows, else `LaunchFailed` (capacity errors included).
fn launch_failure_reason(text: &str) -> &'static str {
    let has = |s: &str| text.contains(s);
    if has("AuthFailure.ServiceLinkedRoleCreationNotPermitted") {
        "SpotSLRCreationFailed"
    } else if has("UnauthorizedOperation") || has("AccessDenied") || has("AuthFailure") {
        let denied = has("with an explicit deny in a permissions boundary")
            || has("with an explicit deny in a service control policy");
        if !denied && has("Not authorized for images") {
            "AMIAuthorizationFailure"
        } else {
            "Unauthorized"
        }
    } else if has("InvalidParameter") && has("belong to different networks") {
        "SecurityGroupSubnetVPCMismatch"
    } else if has("iamInstanceProfile.name is invalid") {
        "InstanceProfileNameInvalid"
    } else if has("InvalidLaunchTemplateId.NotFound") {
        "LaunchTemplateNotFound"
    } else if has("User data is limited to") {
        "UserDataSizeLimitExceeded"
    } else if has("InvalidAMIID.Malformed") {
        "InvalidAMIID"
    } else if has("InvalidAMIID.NotFound") {
        "AMINotFound"
    } else if has("RequestLimitExceeded") {
        "RequestLimitExceeded"
    } else if has("InternalError") {
        "InternalError"
    } else if has("not eligible for Free Tier") {
        "FreeTierIneligible"
    } else if has("MaxFleetCountExceeded") {
        "FleetQuotaExceeded"
    } else if has("PendingVerification") {
        "AccountPendingVerification"
    } else if has("MaxSpotInstanceCountExceeded") {
        "SpotQuotaExceeded"
    } else if has("VcpuLimitExceeded") {
        "VCPULimitExceeded"
    } else if has("InsufficientFreeAddressesInSubnet") {
        "InsufficientFreeAddressesInSubnet"
    } else {
        "LaunchFailed"
    }
}

/// The instance id of an `aws:///<zone>/<id>` provider id.
pub fn instance_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws:///")?;
    let id = rest.rsplit('/').next()?;
    id.starts_with("i-").then_some(id)
}

/// The overrides of a launch grouped by the AMI each instance type boots, in the choices'
/// cheapest-first order, at most [`MAX_OVERRIDES`]; or why no choice is left (no subnet in its
/// zone outside `skipped_subnets`, no image of the class for its type).
fn overrides_by_image<'r>(
    req: &'r LaunchOrder<'_>,
    skipped_subnets: &BTreeSet<String>,
) -> Result<ByImage<'r>, String> {
    let status = req.status;
    let mut by_image: ByImage<'r> = Vec::new();
    let mut count = 0;
    // what kept the choices left out, to name the real cause when none is left
    let (mut no_subnet, mut no_image) = (BTreeSet::new(), BTreeSet::new());
    for choice in req.choices {
        if count == MAX_OVERRIDES {
            break;
        }
        let Some(subnet) = (status.subnets.iter())
            .find(|s| s.zone == choice.zone && !skipped_subnets.contains(&s.id))
        else {
            no_subnet.insert(choice.zone.as_str());
            continue;
        };
        let Some(ami) = (status.amis.iter()).find(|a| admits(&a.requirements, &choice.labels))
        else {
            no_image.insert(choice.instance_type.as_str());
            continue;
        };
        let key = (ami.id.as_str(), &choice.sizing);
        match by_image.iter_mut().find(|(k, _)| *k == key) {
            Some((_, overrides)) => overrides.push((choice, &subnet.id)),
            None => by_image.push((key, vec![(choice, &subnet.id)])),
        }
        count += 1;
    }
    if by_image.is_empty() {
        return Err(unlaunchable(&no_subnet, &no_image));
    }
    Ok(by_image)
}

/// (AMI id, kubelet sizing) → the (choice, subnet) overrides launched from that template.
type ByImage<'r> = Vec<((&'r str, &'r Sizing), Vec<(&'r Choice, &'r str)>)>;

/// The instance a fleet launched, as Kerf records it: its zone (from the override, or the
/// subnet's), the AMI of the template whose overrides hold its type, and its network.
fn instance_of(
    launched: &aws_sdk_ec2::types::CreateFleetInstance,
    req: &LaunchOrder<'_>,
    by_image: &ByImage<'_>,
    zone_of_subnet: &HashMap<String, String>,
) -> Option<Instance> {
    let id = launched.instance_ids().first()?;
    let overrides = launched
        .launch_template_and_overrides()
        .and_then(|l| l.overrides());
    let zone = overrides
        .and_then(|o| o.availability_zone())
        .map(str::to_string)
        .or_else(|| {
            overrides
                .and_then(|o| o.subnet_id())
                .and_then(|s| zone_of_subnet.get(s).cloned())
        })
        .unwrap_or_default();
    let instance_type = launched.instance_type().map(|t| t.as_str());
    let image_id = by_image
        .iter()
        .find(|(_, overrides)| {
            overrides
                .iter()
                .any(|(c, _)| Some(c.instance_type.as_str()) == instance_type)
        })
        .map(|((image, _), _)| (*image).to_string());
    let network = (overrides.and_then(|o| o.subnet_id())).map(|subnet| InstanceNetwork {
        subnet_id: subnet.to_string(),
        security_group_ids: (req.status.security_groups.iter())
            .map(|g| g.id.clone())
            .collect(),
    });
    Some(Instance {
        id: id.clone(),
        instance_type: instance_type.unwrap_or_default().to_string(),
        zone,
        capacity_type: req.capacity_type.to_string(),
        nodeclaim: Some(req.nodeclaim.to_string()),
        young: true,
        image_id,
        network,
        reservation: None,
    })
}

/// Whether an instance launched at `at` is younger than [`UNCLAIMED_GRACE`] (or launched in
/// the future by a skewed clock).
fn launched_within_grace(at: &aws_sdk_ec2::primitives::DateTime) -> bool {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(at.secs()).unwrap_or(0));
    SystemTime::now()
        .duration_since(at)
        .map_or(true, |age| age < UNCLAIMED_GRACE)
}

/// How one fleet request ended.
enum Attempt {
    Launched(Instance),
    /// These subnets had no free addresses, and nothing launched.
    Exhausted(BTreeSet<String>),
    Failed(LaunchError),
}

/// What the fleet's errors mean when nothing launched.
fn sort_errors(
    errors: &[CreateFleetError],
    req: &LaunchOrder<'_>,
    zone_of_subnet: &HashMap<String, String>,
) -> Attempt {
    let mut unavailable = BTreeSet::new();
    let mut exhausted = BTreeSet::new();
    let mut other = Vec::new();
    for e in errors {
        let code = e.error_code().unwrap_or_default();
        let overrides = e
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        let instance_type = overrides
            .and_then(|o| o.instance_type())
            .map(|t| t.as_str().to_string());
        let subnet = overrides.and_then(|o| o.subnet_id()).map(str::to_string);
        let zone = overrides
            .and_then(|o| o.availability_zone())
            .map(str::to_string)
            .or_else(|| subnet.as_ref().and_then(|s| zone_of_subnet.get(s).cloned()));
        if CAPACITY_ERRORS.contains(&code) {
            if let (Some(instance_type), Some(zone)) = (instance_type, zone) {
                unavailable.insert(Unavailable {
                    capacity_type: req.capacity_type.to_string(),
                    instance_type,
                    zone,
                });
            }
        } else if code == NO_ADDRESSES {
            exhausted.extend(subnet);
        } else {
            other.push(format!("{code}: {}", e.error_message().unwrap_or_default()));
        }
    }
    if !unavailable.is_empty() {
        return Attempt::Failed(LaunchError::InsufficientCapacity(
            unavailable.into_iter().collect(),
        ));
    }
    if !exhausted.is_empty() {
        return Attempt::Exhausted(exhausted);
    }
    if other.is_empty() {
        // no instance and no reason: every offering asked for counts as unavailable
        let asked = req
            .choices
            .iter()
            .take(MAX_OVERRIDES)
            .map(|c| Unavailable {
                capacity_type: req.capacity_type.to_string(),
                instance_type: c.instance_type.clone(),
                zone: c.zone.clone(),
            })
            .collect();
        return Attempt::Failed(LaunchError::InsufficientCapacity(asked));
    }
    Attempt::Failed(LaunchError::Aws(AwsError::Api {
        call: "CreateFleet",
        message: other.join("; "),
    }))
}

/// The market a reserved launch names in its launch template, as Karpenter's does: a
/// capacity block's, an interruptible reservation's, or none for an ODCR.
fn reservation_market(r: &CapacityReservationStatus) -> Option<MarketType> {
    if r.reservation_type == "capacity-block" {
        Some(MarketType::CapacityBlock)
    } else if r.interruptible == Some(true) {
        Some(MarketType::InterruptibleCapacityReservation)
    } else {
        None
    }
}

#[cfg(test)]
mod unlaunchable_tests {
    use super::unlaunchable;
    use std::collections::BTreeSet;

    #[test]
    fn the_cause_is_named_and_no_subnet_is_blamed_for_a_missing_image() {
        let none = BTreeSet::new();
        let images = BTreeSet::from(["g5.xlarge", "inf2.xlarge"]);
        let message = unlaunchable(&none, &images);
        assert_eq!(
            message,
            "no AMI of the class for instance type(s) g5.xlarge, inf2.xlarge"
        );
        let zones = BTreeSet::from(["us-west-2d"]);
        assert_eq!(
            unlaunchable(&zones, &none),
            "no subnet in zone(s) us-west-2d"
        );
        assert_eq!(
            unlaunchable(&none, &none),
            "no available offering for the NodeClaim"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_errors_are_counted_under_karpenters_reasons() {
        for (text, reason) in [
            ("InsufficientInstanceCapacity: no capacity", "LaunchFailed"),
            (
                "UnauthorizedOperation: Not authorized for images: [ami-1]",
                "AMIAuthorizationFailure",
            ),
            (
                "UnauthorizedOperation: with an explicit deny in a service control policy. Not authorized for images",
                "Unauthorized",
            ),
            ("InvalidAMIID.NotFound: gone", "AMINotFound"),
            ("MaxSpotInstanceCountExceeded: quota", "SpotQuotaExceeded"),
            (
                "InsufficientFreeAddressesInSubnet: full",
                "InsufficientFreeAddressesInSubnet",
            ),
            (
                "InvalidParameter: sg-1 and subnet-1 belong to different networks",
                "SecurityGroupSubnetVPCMismatch",
            ),
        ] {
            assert_eq!(launch_failure_reason(text), reason, "{text}");
        }
    }

    #[test]
    fn provider_ids_give_their_instance() {
        assert_eq!(
            instance_id("aws:///ap-northeast-2a/i-0123456789abcdef0"),
            Some("i-0123456789abcdef0")
        );
        assert_eq!(instance_id("kwok://node-a"), None);
        assert_eq!(instance_id("aws:///ap-northeast-2a/"), None);
    }

    #[test]
    fn reserved_launches_name_the_market_of_their_reservation() {
        let reservation = |kind: &str, interruptible: Option<bool>| {
            let mut r: CapacityReservationStatus = serde_json::from_value(serde_json::json!({
                "id": "cr-1", "instanceType": "m5.large", "availabilityZone": "us-east-1a",
                "ownerID": "123456789012", "instanceMatchCriteria": "targeted",
                "reservationType": kind, "state": "active",
            }))
            .expect("a status");
            r.interruptible = interruptible;
            r
        };
        assert_eq!(
            reservation_market(&reservation("capacity-block", None)),
            Some(MarketType::CapacityBlock)
        );
        assert_eq!(
            reservation_market(&reservation("default", Some(true))),
            Some(MarketType::InterruptibleCapacityReservation)
        );
        assert_eq!(
            reservation_market(&reservation("default", Some(false))),
            None
        );
    }

    #[test]
    fn volume_sizes_round_up_to_gib() {
        assert_eq!(volume_gib("20Gi"), Some(20));
        assert_eq!(volume_gib("100G"), Some(94));
        assert_eq!(volume_gib("0"), None);
        assert_eq!(volume_gib("lots"), None);
    }
}
