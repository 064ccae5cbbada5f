//! The `aws` cloud provider: NodeClaims become EC2 instances through kerf-aws-provider's
//! fleet, offered in the zones of the class's subnets, with the EC2NodeClass reconciler of
//! `node_classes` running beside it; the interruption queue's
//! messages become notices for the controllers; prices and the region's instance types are
//! read from AWS every 12 hours, over the embedded ones.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kerf_api::common::NodeSelectorRequirementWithMinValues as Requirement;
use kerf_api::ec2nodeclass::{AmiFamily, AmiStatus, CapacityReservationStatus, EC2NodeClassStatus};
use kerf_api::{EC2NodeClass, NodePool, labels};
use kerf_aws::instance_type::{instance_types_of, scheduler_options};
use kerf_aws::reservations::add_reserved_offerings;
use kerf_aws_provider::instance_status::InstanceStatusChecks;
use kerf_aws_provider::instance_types::{InstanceTypeSource, RegionCatalog};
use kerf_aws_provider::interruption_queue::InterruptionQueue;
use kerf_aws_provider::launch::{
    Choice, Fleet, Instance, LaunchError, LaunchOrder, RebootOutcome, admits,
};
use kerf_aws_provider::pricing::{PriceSource, Prices};
use kerf_aws_provider::user_data::{ClusterInfo, Sizing};
use kerf_aws_provider::zonal_shift::ZonalShifts;
use kerf_core::cluster::{CapacityType, ClaimRecord, CloudInstance, Launched};
use kerf_core::controllers::lifecycle::InsufficientOffering;
use kerf_core::controllers::reboot::RebootRefusal;
use kerf_core::fleet;
use kerf_core::metrics::{Recorder, families};
use kerf_scheduling::InstanceTypeOption;
use serde_json::json;

use crate::cloud::{Available, CapacitySettings, CloudError, CloudProvider, offerings};
use crate::instance_tagging::Tagging;
use crate::log;
use crate::node_classes::NodeClasses;
use crate::watch::{Observed, Queue};

/// How often prices and instance types are read again (Karpenter's is 12 hours).
pub const PRICE_REFRESH: Duration = Duration::from_secs(12 * 60 * 60);
/// How soon a failed read of the region's instance types is tried again.
const INSTANCE_TYPES_RETRY: Duration = Duration::from_secs(5 * 60);
/// The longest wait between retries of a failing queue.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// EC2 instances for NodeClaims.
pub struct Aws {
    region: String,
    fleet: Arc<Fleet>,
    /// The SDK configuration, for the background work.
    config: aws_config::SdkConfig,
    /// The interruption queue's name, when one is read.
    interruption_queue: Option<String>,
    /// What was read from AWS over the embedded data.
    live: Arc<Mutex<Live>>,
    /// The instance types per node class spec and zones: built once, shared with the
    /// controllers.
    catalogs: Mutex<HashMap<String, Arc<[InstanceTypeOption]>>>,
    capacity: CapacitySettings,
    /// Resolves node classes for the node class status controller.
    node_classes: NodeClasses,
    /// No Pricing API calls (`ISOLATED_VPC`).
    isolated_vpc: bool,
    /// The `RebootForRepair` AWS gate (see [`AwsOptions::reboot_for_repair`]).
    reboot_for_repair: bool,
    /// The cluster's zonal shifts, when followed.
    zonal_shifts: Option<Arc<ZonalShifts>>,
    /// Per class, the images it had when types without one were last warned of: a catalog
    /// built again for the same images (new prices, rooms, the region's types discovered)
    /// says nothing new, so the warning is said once per class and set of images.
    unbooted_said: Mutex<HashMap<String, String>>,
    /// Launched instances waiting for the tag naming their NodeClaim.
    tagging: Arc<Tagging>,
    /// The API server, once started: an instance found without its NodeClaim's tag is
    /// matched to its NodeClaim there.
    client: std::sync::OnceLock<kube::Client>,
}

/// Prices and instance types read from AWS, and how many times either was read: catalogs
/// built from an older generation are stale.
#[derive(Clone, Default)]
struct Live {
    generation: u64,
    /// Live prices (the embedded model until read, and wherever they say nothing).
    prices: Arc<Prices>,
    /// The region's instance types and their zones (the embedded catalog until read).
    types: Option<Arc<RegionCatalog>>,
}

impl Live {
    fn read(live: &Mutex<Live>) -> Live {
        live.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Changes what is held and starts a new generation.
    fn update(live: &Mutex<Live>, change: impl FnOnce(&mut Live)) {
        let mut held = live.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut held);
        held.generation += 1;
    }
}

/// What the aws provider is configured with beyond the SDK's configuration.
#[derive(Clone, Debug)]
pub struct AwsOptions {
    /// The cluster nodes join.
    pub cluster: ClusterInfo,
    /// The SQS queue of interruption messages, when one is read.
    pub interruption_queue: Option<String>,
    /// Memory overhead and reserved ENIs.
    pub capacity: CapacitySettings,
    /// No Pricing API calls (`ISOLATED_VPC`): on-demand prices stay the embedded ones.
    pub isolated_vpc: bool,
    /// The `RebootForRepair` AWS gate: node repair reboots a node whose accelerator reports
    /// an XID error a reboot clears, instead of replacing it.
    pub reboot_for_repair: bool,
    /// `DISABLE_DRY_RUN`: a class's launch authorization is not checked with dry runs.
    pub disable_dry_run: bool,
    /// `ENABLE_ZONAL_SHIFT`: the cluster's zonal shifts, read at start ([`zonal_shifts`]).
    pub zonal_shifts: Option<Arc<ZonalShifts>>,
}

/// The cluster's zonal shifts, read once to check that ARC knows the cluster (Karpenter does
/// not start otherwise, and says so in these words).
pub async fn zonal_shifts(
    config: &aws_config::SdkConfig,
    cluster: &str,
) -> Result<Arc<ZonalShifts>, String> {
    let arn = kerf_aws_provider::cluster::arn(config, cluster)
        .await
        .map_err(|e| format!("looking up cluster {cluster}'s ARN for zonal shift: {e}"))?;
    let shifts = ZonalShifts::new(config, arn);
    shifts.check().await?;
    Ok(Arc::new(shifts))
}

/// How often the cluster's zonal shifts are read (Karpenter's interval).
const ZONAL_SHIFT_INTERVAL: Duration = Duration::from_secs(30);

/// The zones a class's subnets are in; none before its status is written.
fn zones(class: Option<&EC2NodeClass>) -> Vec<String> {
    let mut zones: Vec<String> = class
        .and_then(|c| c.status.as_ref())
        .map(|s| s.subnets.iter().map(|s| s.zone.clone()).collect())
        .unwrap_or_default();
    zones.sort();
    zones.dedup();
    zones
}

/// `arch/variant` of an instance type (`amd64/nvidia`, `arm64/standard`), for saying which
/// kinds of types a class has no image for.
fn variant_of(type_labels: &BTreeMap<String, String>) -> String {
    let arch = type_labels.get(labels::ARCH).map_or("?", String::as_str);
    let variant = if type_labels.contains_key(labels::INSTANCE_GPU_COUNT) {
        "nvidia"
    } else if type_labels.contains_key(labels::INSTANCE_ACCELERATOR_COUNT) {
        "neuron"
    } else {
        "standard"
    };
    format!("{arch}/{variant}")
}

impl Aws {
    /// A provider launching in `config`'s region for `cluster`, reading interruption messages
    /// from the SQS queue `interruption_queue` when given.
    pub fn new(config: &aws_config::SdkConfig, options: AwsOptions) -> Result<Aws, CloudError> {
        let region = config
            .region()
            .map(|r| r.to_string())
            .ok_or_else(|| CloudError::Config("no AWS region (set AWS_REGION)".into()))?;
        kerf_aws::catalog::zones(&region).map_err(|e| CloudError::Config(e.to_string()))?;
        let cluster_name = options.cluster.name.clone();
        let fleet = Arc::new(Fleet::new(config, options.cluster));
        Ok(Aws {
            region,
            node_classes: NodeClasses::new(
                config,
                &cluster_name,
                Arc::clone(&fleet),
                options.disable_dry_run,
            ),
            fleet,
            config: config.clone(),
            interruption_queue: options.interruption_queue,
            live: Arc::default(),
            catalogs: Mutex::default(),
            unbooted_said: Mutex::default(),
            tagging: Arc::default(),
            client: std::sync::OnceLock::new(),
            capacity: options.capacity,
            isolated_vpc: options.isolated_vpc,
            reboot_for_repair: options.reboot_for_repair,
            zonal_shifts: options.zonal_shifts,
        })
    }

    fn catalog(&self, class: Option<&EC2NodeClass>) -> Arc<[InstanceTypeOption]> {
        let zones = zones(class);
        let amis: Vec<&AmiStatus> = class
            .and_then(|c| c.status.as_ref())
            .map(|s| s.amis.iter().collect())
            .unwrap_or_default();
        let live = Live::read(&self.live);
        let reservations: Vec<CapacityReservationStatus> = class
            .and_then(|c| c.status.as_ref())
            .map(|s| s.capacity_reservations.clone())
            .unwrap_or_default();
        let rooms = self.fleet.reservation_rooms();
        let group = (class.and_then(|c| c.metadata.name.as_deref()))
            .and_then(|name| self.fleet.placement_group(name));
        // the class's zones the cluster is shifted away from, by name
        let shifted_ids = self.fleet.shifted();
        let shifted: BTreeSet<String> = (class.and_then(|c| c.status.as_ref()))
            .map(|s| {
                (s.subnets.iter())
                    .filter(|s| {
                        s.zone_id
                            .as_ref()
                            .is_some_and(|id| shifted_ids.contains(id))
                    })
                    .map(|s| s.zone.clone())
                    .collect()
            })
            .unwrap_or_default();
        let key = format!(
            "{}|{}|{}|{}|{}|{:?}|{:?}|{:?}",
            live.generation,
            class
                .and_then(|c| serde_json::to_string(&c.spec).ok())
                .unwrap_or_default(),
            zones.join(","),
            serde_json::to_string(&amis).unwrap_or_default(),
            serde_json::to_string(&reservations).unwrap_or_default(),
            rooms,
            group,
            shifted,
        );
        let mut catalogs = self.catalogs.lock().unwrap_or_else(PoisonError::into_inner);
        // rooms and prices change the key: what older keys built is not asked for again
        if catalogs.len() > 32 && !catalogs.contains_key(&key) {
            catalogs.clear();
        }
        let built = catalogs.entry(key).or_insert_with(|| {
            let settings = self.capacity.node_settings(class);
            let mut types = match &live.types {
                Some(read) => {
                    instance_types_of(&read.types, &settings, |name| read.zones_offering(name))
                }
                None => kerf_aws::instance_types(&self.region, &settings).unwrap_or_default(),
            };
            add_reserved_offerings(&mut types, &reservations, |id| {
                rooms.get(id).copied().unwrap_or(0)
            });
            let mut options = scheduler_options(&types, |_, _, _| false);
            // offered only where the class has a subnet
            for t in &mut options {
                t.offerings.retain(|o| zones.contains(&o.zone));
            }
            options.retain(|t| !t.offerings.is_empty());
            // and none in a zone shifted away from, reserved or not, while the shift lasts
            for o in options.iter_mut().flat_map(|t| t.offerings.iter_mut()) {
                if shifted.contains(&o.zone) {
                    o.available = false;
                }
            }
            // and only the types one of its images boots (architecture, GPU, Neuron), as
            // Karpenter filters them: a fleet's every override can launch
            let before = options.len();
            let mut unbooted: BTreeSet<String> = BTreeSet::new();
            options.retain(|t| {
                let booted = amis.iter().any(|a| admits(&a.requirements, &t.labels));
                if !booted {
                    unbooted.insert(variant_of(&t.labels));
                }
                booted
            });
            let name = class.and_then(|c| c.metadata.name.clone());
            let said_before = |name: &String| {
                let images = serde_json::to_string(&amis).unwrap_or_default();
                let mut said = self
                    .unbooted_said
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                said.insert(name.clone(), images.clone()) == Some(images)
            };
            if let Some(c) = class.filter(|_| {
                options.len() < before
                    && !amis.is_empty()
                    && !name.as_ref().is_some_and(said_before)
            }) {
                log::warn(
                    "providers.instancetype",
                    "instance types without an image of the class are not offered",
                    json!({
                        "EC2NodeClass": {"name": c.metadata.name},
                        "excluded": before - options.len(),
                        "variants": unbooted,
                    }),
                );
            }
            // every type of a class with a placement group launches into it: its nodes carry
            // the group's id, which requirements may select and drift compares
            if let Some(g) = &group {
                for t in &mut options {
                    Arc::make_mut(&mut t.labels)
                        .insert(labels::PLACEMENT_GROUP_ID.into(), g.id.clone());
                }
            }
            reprice(&mut options, &live.prices);
            options.into()
        });
        Arc::clone(built)
    }
}

/// The instance types Karpenter's authorization check falls back to when no NodePool of a
/// class admits one of its types (one of each architecture).
const PROBE_FALLBACK: [&str; 2] = ["m5.large", "m6g.large"];

impl Aws {
    /// The instance type a class's launch is tried with, as Karpenter's authorization check
    /// picks it: among the class's types (as just resolved) those a NodePool of the class
    /// admits, else m5.large or m6g.large, else any; one a standard image of the class boots
    /// (no GPU or accelerator) before others.
    fn probe_type(
        &self,
        class: &EC2NodeClass,
        status: &EC2NodeClassStatus,
        node_pools: &[Vec<Requirement>],
    ) -> Option<Choice> {
        let mut resolved = class.clone();
        resolved.status = Some(status.clone());
        let catalog = self.catalog(Some(&resolved));
        let admitted = |t: &&InstanceTypeOption| {
            node_pools.iter().any(|requirements| {
                requirements.iter().all(|r| match t.labels.get(&r.key) {
                    Some(value) => r.matches(Some(value)),
                    // what the type does not say (zone, capacity type) is its offerings'
                    None => true,
                })
            })
        };
        let windows = matches!(
            class.spec.family(),
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025
        );
        let mut candidates: Vec<&InstanceTypeOption> = if windows {
            Vec::new()
        } else {
            catalog.iter().filter(admitted).collect()
        };
        if candidates.is_empty() {
            candidates = (catalog.iter())
                .filter(|t| PROBE_FALLBACK.contains(&t.name.as_str()))
                .collect();
        }
        if candidates.is_empty() {
            candidates = catalog.iter().collect();
        }
        let standard = |t: &&&InstanceTypeOption| {
            (status.amis.iter())
                .filter(|a| admits(&a.requirements, &t.labels))
                .any(|a| !a.requirements.iter().any(|r| accelerated(&r.key)))
        };
        let chosen = (candidates.iter().find(standard)).or(candidates.first())?;
        let vcpu = u32::try_from(chosen.capacity.cpu_millis / 1000).unwrap_or(0);
        Some(Choice {
            instance_type: chosen.name.clone(),
            zone: String::new(),
            labels: (*chosen.labels).clone(),
            sizing: Sizing::new(vcpu, chosen.capacity.pods, class.spec.kubelet.as_ref()),
        })
    }
}

/// Whether an image requirement's key is one only GPU or accelerator images ask for.
fn accelerated(key: &str) -> bool {
    key == labels::INSTANCE_GPU_COUNT || key == labels::INSTANCE_ACCELERATOR_COUNT
}

impl CloudProvider for Aws {
    fn name(&self) -> &'static str {
        "aws"
    }

    fn instance_types(&self, class: Option<&EC2NodeClass>) -> Arc<[InstanceTypeOption]> {
        self.catalog(class)
    }

    async fn create(
        &self,
        name: &str,
        claim: &ClaimRecord,
        pool: &NodePool,
        class: Option<&EC2NodeClass>,
        available: &Available<'_>,
    ) -> Result<Launched, CloudError> {
        let Some(class) = class else {
            return Err(CloudError::Config(format!(
                "NodePool {}: EC2NodeClass {} not found",
                claim.node_pool, claim.node_class
            )));
        };
        let Some(status) = class.status.as_ref() else {
            return Err(CloudError::Config(format!(
                "EC2NodeClass {}: not resolved yet (no status)",
                claim.node_class
            )));
        };
        // instances of a class with a placement group go into it or nowhere
        if let Some(selector) = &class.spec.placement_group_selector
            && self.fleet.placement_group(&claim.node_class).is_none()
        {
            return Err(CloudError::Config(format!(
                "EC2NodeClass {}: placement group {selector} is not resolved",
                claim.node_class
            )));
        }
        let catalog = self.catalog(Some(class));
        let offers = fleet::request(&claim.requirements, offerings(&catalog, claim), available);
        let Some(first) = offers.first() else {
            return Err(CloudError::InsufficientCapacity(Vec::new()));
        };
        let capacity_type = first.capacity_type.to_string();
        let choices: Vec<Choice> = offers
            .iter()
            .map(|c| {
                let t = c.item.0;
                let vcpu = u32::try_from(t.capacity.cpu_millis / 1000).unwrap_or(0);
                Choice {
                    instance_type: c.instance_type.to_string(),
                    zone: c.zone.to_string(),
                    labels: (*t.labels).clone(),
                    sizing: Sizing::new(vcpu, t.capacity.pods, class.spec.kubelet.as_ref()),
                }
            })
            .collect();
        let template = &pool.spec.template;
        let mut node_labels: BTreeMap<String, String> = template.metadata.labels.clone();
        node_labels.insert(labels::NODEPOOL.into(), claim.node_pool.clone());
        node_labels.insert(labels::CAPACITY_TYPE.into(), capacity_type.clone());
        let taints = claim.registration_taints();
        // a NodeClaim pinned to a reservation asks for it alone (`fleet::request`)
        let reservation = (first.reservation)
            .and_then(|id| status.capacity_reservations.iter().find(|r| r.id == id));
        let instance = self
            .fleet
            .launch(&LaunchOrder {
                nodeclaim: name,
                node_pool: &claim.node_pool,
                node_class: &claim.node_class,
                spec: &class.spec,
                status,
                capacity_type: &capacity_type,
                choices: &choices,
                labels: &node_labels,
                taints: &taints,
                reservation,
            })
            .await
            .map_err(|e| match e {
                LaunchError::InsufficientCapacity(offerings) => CloudError::InsufficientCapacity(
                    offerings
                        .into_iter()
                        .map(|o| InsufficientOffering {
                            capacity_type: o.capacity_type,
                            instance_type: o.instance_type,
                            zone: o.zone,
                        })
                        .collect(),
                ),
                LaunchError::Aws(kerf_aws_provider::AwsError::Api { call, message }) => {
                    CloudError::Api(format!("{call}: {message}"))
                }
                LaunchError::Aws(
                    ref e @ kerf_aws_provider::AwsError::Unauthorized {
                        permission,
                        ref message,
                    },
                ) => {
                    (self.node_classes).launch_refused(
                        &claim.node_class,
                        class,
                        permission,
                        message,
                    );
                    CloudError::Refused(e.to_string())
                }
                other => CloudError::Config(other.to_string()),
            })?;
        let chosen = offers
            .iter()
            .find(|c| c.instance_type == instance.instance_type && c.zone == instance.zone)
            .ok_or_else(|| {
                CloudError::Api(format!(
                    "CreateFleet launched {} in {}, which the NodeClaim did not ask for",
                    instance.instance_type, instance.zone
                ))
            })?;
        self.tagging.push(&instance.id, name);
        let (t, o) = chosen.item;
        let mut type_labels = (*t.labels).clone();
        type_labels.insert(labels::REGION.into(), self.region.clone());
        if let Some(r) = reservation {
            type_labels.extend(kerf_aws::reservations::node_labels(
                &r.id,
                &r.reservation_type,
                r.interruptible.unwrap_or(false),
            ));
        }
        Ok(Launched {
            provider_id: instance.provider_id(),
            instance_type: t.name.clone(),
            zone: o.zone.clone(),
            capacity_type: CapacityType::parse(&o.capacity_type).unwrap_or(CapacityType::OnDemand),
            // as Kerf priced it (a NodeOverlay's price where one applies), as on every cloud
            price_per_hour: chosen.price,
            capacity: t.capacity.clone(),
            allocatable: t.allocatable.clone(),
            labels: type_labels,
            image_id: instance.image_id,
            network: instance.network,
        })
    }

    fn start(&self, client: kube::Client, queue: Arc<Queue>, metrics: Recorder) {
        self.fleet.count_into(metrics.clone());
        let _ = self.client.set(client.clone());
        tokio::spawn(Arc::clone(&self.tagging).run(Arc::clone(&self.fleet)));
        // a reservation's room changed (a launch into it, EC2's count): the controllers'
        // instance types carry it, so they are made anew
        let fleet = Arc::clone(&self.fleet);
        let sink = Arc::clone(&queue);
        tokio::spawn(async move {
            loop {
                fleet.reservation_room_changed().await;
                sink.push(Observed::OfferingsChanged);
            }
        });
        self.node_classes.read_kubernetes_version(client);
        if let Some(shifts) = self.zonal_shifts.clone() {
            tokio::spawn(follow_zonal_shifts(
                shifts,
                Arc::clone(&self.fleet),
                Arc::clone(&queue),
            ));
        }
        if let Some(name) = self.interruption_queue.clone() {
            tokio::spawn(read_interruptions(
                self.config.clone(),
                name,
                Arc::clone(&queue),
                metrics,
            ));
        }
        tokio::spawn(check_instance_statuses(
            InstanceStatusChecks::new(&self.config),
            Arc::clone(&queue),
        ));
        tokio::spawn(refresh_instance_types(
            InstanceTypeSource::new(&self.config),
            Arc::clone(&self.live),
            Arc::clone(&queue),
        ));
        tokio::spawn(refresh_prices(
            PriceSource::new(&self.config),
            Arc::clone(&self.live),
            queue,
            self.isolated_vpc,
        ));
    }

    fn repair_policies(&self) -> &'static [kerf_core::repair::RepairPolicy] {
        if self.reboot_for_repair {
            &kerf_core::repair::AWS_POLICIES_REBOOTING
        } else {
            &kerf_core::repair::AWS_POLICIES
        }
    }

    async fn reboot(
        &self,
        _node: &str,
        provider_id: &str,
        _operation_id: &str,
    ) -> Result<(), RebootRefusal> {
        match self.fleet.reboot(provider_id).await {
            Ok(RebootOutcome::Rebooted) => Ok(()),
            Ok(RebootOutcome::NotFound) => Err(RebootRefusal::Rejected(format!(
                "instance of {provider_id} not found"
            ))),
            Err(e @ kerf_aws_provider::AwsError::Unauthorized { .. }) => {
                Err(RebootRefusal::Rejected(e.to_string()))
            }
            Err(e) => Err(RebootRefusal::Failed(e.to_string())),
        }
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        self.fleet
            .terminate(provider_id)
            .await
            .map_err(|e| CloudError::Api(e.to_string()))
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, CloudError> {
        let mut instances = self
            .fleet
            .list()
            .await
            .map_err(|e| CloudError::Api(e.to_string()))?;
        // an instance without its NodeClaim's tag yet: one launched here waits in the tagging
        // queue with its NodeClaim; any other (an operator restarted before its turn) is
        // matched by its NodeClaim's provider id, and tagged
        for i in &mut instances {
            if i.nodeclaim.is_none() {
                i.nodeclaim = self.tagging.nodeclaim_of(&i.id);
            }
        }
        let untagged: BTreeSet<String> = (instances.iter())
            .filter(|i| i.nodeclaim.is_none())
            .map(Instance::provider_id)
            .collect();
        if let Some(client) = self.client.get().filter(|_| !untagged.is_empty()) {
            let claims = claims_of(client, &untagged).await?;
            for i in &mut instances {
                if let Some(claim) = claims.get(&i.provider_id()) {
                    self.tagging.push(&i.id, claim);
                    i.nodeclaim = Some(claim.clone());
                }
            }
        }
        Ok(instances
            .into_iter()
            // one nobody claims while it is young may be a launch still under way
            .filter(|i| i.nodeclaim.is_some() || !i.young)
            .map(|i| CloudInstance {
                provider_id: i.provider_id(),
                nodeclaim: i.nodeclaim.unwrap_or_default(),
                image_id: i.image_id,
                network: i.network,
                reservation: i.reservation,
            })
            .collect())
    }

    fn resolves_node_classes(&self) -> bool {
        true
    }

    async fn resolve_node_class(
        &self,
        name: &str,
        class: &EC2NodeClass,
        node_pools: &[Vec<Requirement>],
    ) -> Result<EC2NodeClassStatus, CloudError> {
        let probe_type = |status: &EC2NodeClassStatus| self.probe_type(class, status, node_pools);
        self.node_classes.resolve(name, class, probe_type).await
    }

    async fn clean_up_node_class(
        &self,
        name: &str,
        class: &EC2NodeClass,
    ) -> Result<(), CloudError> {
        self.node_classes.clean_up(name, class).await
    }
}

/// The NodeClaims whose `status.providerID` is one of `provider_ids`, by provider id, read
/// from the API server as plain objects (a NodeClaim Kerf cannot read fully still has its
/// provider id). A failed read fails the listing: garbage collection must not take an instance
/// it could not match for an orphan.
async fn claims_of(
    client: &kube::Client,
    provider_ids: &BTreeSet<String>,
) -> Result<HashMap<String, String>, CloudError> {
    let resource = kube::api::ApiResource::erase::<kerf_api::NodeClaim>(&());
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client.clone(), &resource);
    let listed = (api.list(&kube::api::ListParams::default()).await)
        .map_err(|e| CloudError::Api(format!("reading nodeclaims for untagged instances: {e}")))?;
    Ok((listed.items.into_iter())
        .filter_map(|o| {
            let provider_id = o.data["status"]["providerID"].as_str()?.to_string();
            let name = o.metadata.name?;
            (provider_ids.contains(&provider_id)).then_some((provider_id, name))
        })
        .collect())
}

/// Live prices over the model's: an offering keeps its modelled price where AWS quoted none.
/// Cheapest first again, as the options were.
fn reprice(options: &mut [InstanceTypeOption], prices: &Prices) {
    for t in options.iter_mut() {
        for o in &mut t.offerings {
            let live = match o.capacity_type.as_str() {
                labels::CAPACITY_TYPE_SPOT => prices.spot.get(&(t.name.clone(), o.zone.clone())),
                labels::CAPACITY_TYPE_ON_DEMAND => prices.on_demand.get(&t.name),
                _ => None,
            };
            match (live, o.capacity_type.as_str()) {
                (Some(p), _) => o.price_per_hour = *p,
                // a reservation costs the on-demand price over ten million, whatever it is now
                (None, labels::CAPACITY_TYPE_RESERVED) => {
                    if let Some(p) = prices.on_demand.get(&t.name) {
                        o.price_per_hour = p / kerf_aws::reservations::RESERVED_PRICE_DIVISOR;
                    }
                }
                (None, _) => {}
            }
        }
        t.offerings
            .sort_by(|a, b| a.price_per_hour.total_cmp(&b.price_per_hour));
    }
    let cheapest =
        |t: &InstanceTypeOption| t.offerings.first().map_or(f64::MAX, |o| o.price_per_hour);
    options.sort_by(|a, b| {
        cheapest(a)
            .total_cmp(&cheapest(b))
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// Reads prices now and every [`PRICE_REFRESH`]; a failure is logged and the prices held
/// (the embedded model at first) stay, on-demand and spot each on their own.
async fn refresh_prices(
    source: PriceSource,
    live: Arc<Mutex<Live>>,
    sink: Arc<Queue>,
    isolated_vpc: bool,
) {
    loop {
        // an isolated VPC has no route to the Pricing API: the embedded on-demand prices stay
        let on_demand = if isolated_vpc {
            None
        } else {
            Some(source.on_demand().await)
        };
        let spot = source.spot().await;
        let mut fresh = (*Live::read(&live).prices).clone();
        let mut changed = false;
        match on_demand {
            None => {}
            Some(Ok(read)) => {
                log::recovered(ON_DEMAND_REFRESH);
                (fresh.on_demand, changed) = (read, true);
            }
            Some(Err(e)) => log::error_when_changed(ON_DEMAND_REFRESH, &e.to_string()),
        }
        match spot {
            Ok(read) => {
                log::recovered(SPOT_REFRESH);
                (fresh.spot, changed) = (read, true);
            }
            Err(e) => log::error_when_changed(SPOT_REFRESH, &e.to_string()),
        }
        if changed {
            Live::update(&live, |l| l.prices = Arc::new(fresh));
            sink.push(Observed::OfferingsChanged);
        }
        tokio::time::sleep(PRICE_REFRESH).await;
    }
}

/// Reads the region's instance types and their zones now and every [`PRICE_REFRESH`]; a
/// failed or empty read is logged, what is held (the embedded catalog at first) stays, and
/// it is tried again in [`INSTANCE_TYPES_RETRY`].
async fn refresh_instance_types(
    source: InstanceTypeSource,
    live: Arc<Mutex<Live>>,
    sink: Arc<Queue>,
) {
    loop {
        let wait = match source.describe().await {
            Ok(read) if !read.types.is_empty() => {
                log::recovered(TYPES_REFRESH);
                let held = Live::read(&live).types;
                if held.as_deref() != Some(&read) {
                    log::info(
                        "providers.instancetype",
                        "discovered instance types",
                        json!({"count": read.types.len()}),
                    );
                    Live::update(&live, |l| l.types = Some(Arc::new(read)));
                    sink.push(Observed::OfferingsChanged);
                }
                PRICE_REFRESH
            }
            Ok(_) => {
                log::error_when_changed(TYPES_REFRESH, "DescribeInstanceTypes listed none");
                INSTANCE_TYPES_RETRY
            }
            Err(e) => {
                log::error_when_changed(TYPES_REFRESH, &e.to_string());
                INSTANCE_TYPES_RETRY
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// What the refresh loops say when a refresh fails (each said once until it changes).
const ON_DEMAND_REFRESH: &str = "refreshing on-demand prices, keeping the ones held";
/// See [`ON_DEMAND_REFRESH`].
const SPOT_REFRESH: &str = "refreshing spot prices, keeping the ones held";
/// See [`ON_DEMAND_REFRESH`].
const TYPES_REFRESH: &str = "refreshing instance types, keeping the ones held";

/// How long ago an RFC 3339 time was, if it parses (a time in the future is no wait).
fn waited_since(time: &str) -> Option<Duration> {
    let at: k8s_openapi::jiff::Timestamp = time.parse().ok()?;
    let since = k8s_openapi::jiff::Timestamp::now().duration_since(at);
    Some(Duration::try_from(since).unwrap_or_default())
}

/// Reads EC2's status checks every minute until the process stops (with or without an
/// interruption queue, as Karpenter): each unhealthy instance becomes a notice. Without the
/// permission it says what to grant and stops; another failure is logged and tried again at
/// the next round.
async fn check_instance_statuses(checks: InstanceStatusChecks, sink: Arc<Queue>) {
    loop {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        match checks.unhealthy(now).await {
            Ok(messages) => {
                for notice in messages.iter().flat_map(|m| m.notices()) {
                    sink.push(Observed::Notice(notice));
                }
            }
            Err(e @ kerf_aws_provider::AwsError::Unauthorized { .. }) => {
                log::error(
                    "instance status health checks are off until Kerf restarts",
                    &e.to_string(),
                );
                return;
            }
            Err(e) => log::error("getting instance statuses", &e.to_string()),
        }
        tokio::time::sleep(kerf_aws_provider::instance_status::INTERVAL).await;
    }
}

/// Reads the interruption queue until the process stops: each message's instances become
/// notices for the controllers; malformed messages are logged (and deleted by the queue);
/// failed calls are retried with a backoff doubling to a minute.
/// Reads the cluster's zonal shifts every [`ZONAL_SHIFT_INTERVAL`]: the fleet offers nothing
/// in a zone shifted away from and leaves its instances alone, and a change of the shifted
/// zones goes to the controllers, which tell the NodePools it concerns.
async fn follow_zonal_shifts(shifts: Arc<ZonalShifts>, fleet: Arc<Fleet>, sink: Arc<Queue>) {
    let mut told: Option<BTreeSet<String>> = None;
    loop {
        match shifts.update().await {
            Ok(()) => log::recovered("updating zonal shifts"),
            Err(e) => log::error_when_changed(
                "updating zonal shifts",
                &format!("getting zonal shifts: {e}"),
            ),
        }
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let shifted = shifts.shifted(now);
        fleet.set_shifted(shifted.clone());
        if told.as_ref() != Some(&shifted) {
            sink.push(Observed::ZonalShifts(shifted.clone()));
            told = Some(shifted);
        }
        tokio::time::sleep(ZONAL_SHIFT_INTERVAL).await;
    }
}

async fn read_interruptions(
    config: aws_config::SdkConfig,
    name: String,
    sink: Arc<Queue>,
    metrics: Recorder,
) {
    let mut backoff = Duration::from_secs(1);
    let queue = loop {
        match InterruptionQueue::open(&config, &name).await {
            Ok(q) => break q,
            Err(e) => {
                log::error("opening the interruption queue", &e.to_string());
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    };
    backoff = Duration::from_secs(1);
    loop {
        match queue.poll().await {
            Ok(polled) => {
                log::recovered("receiving interruption messages");
                backoff = Duration::from_secs(1);
                metrics.add(
                    &families::INTERRUPTION_DELETED_MESSAGES,
                    &[],
                    polled.deleted as u64,
                );
                for error in polled.malformed {
                    log::error("failed parsing interruption message", &error);
                }
                for message in polled.messages {
                    metrics.inc(
                        &families::INTERRUPTION_RECEIVED_MESSAGES,
                        &[message.kind.as_str()],
                    );
                    if let Some(waited) = message.time.as_deref().and_then(waited_since) {
                        metrics.observe(
                            &families::INTERRUPTION_MESSAGE_QUEUE_DURATION_SECONDS,
                            &[],
                            waited.as_secs_f64(),
                        );
                    }
                    for notice in message.notices() {
                        sink.push(Observed::Notice(notice));
                    }
                }
            }
            Err(e) => {
                log::error_when_changed("receiving interruption messages", &e.to_string());
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_scheduling::Offering as SchedulingOffering;

    fn option(name: &str, offerings: &[(&str, &str, f64)]) -> InstanceTypeOption {
        let types =
            kerf_aws::instance_types("us-east-1", &kerf_aws::capacity::NodeSettings::default())
                .expect("catalog");
        let mut o = scheduler_options(&types, |_, _, _| false)
            .into_iter()
            .find(|t| t.name == name)
            .expect("a type");
        o.offerings = offerings
            .iter()
            .map(|(capacity_type, zone, price)| SchedulingOffering {
                capacity_type: (*capacity_type).to_string(),
                zone: (*zone).to_string(),
                price_per_hour: *price,
                ..o.offerings[0].clone()
            })
            .collect();
        o
    }

    #[test]
    fn live_prices_replace_the_models_where_quoted_and_reorder() {
        let mut options = vec![
            option(
                "m5.large",
                &[
                    ("on-demand", "us-east-1a", 0.096),
                    ("spot", "us-east-1a", 0.04),
                ],
            ),
            option(
                "c5.large",
                &[
                    ("on-demand", "us-east-1a", 0.085),
                    ("spot", "us-east-1b", 0.035),
                ],
            ),
        ];
        let prices = Prices {
            on_demand: HashMap::from([("m5.large".to_string(), 0.05)]),
            spot: HashMap::from([(("m5.large".to_string(), "us-east-1a".to_string()), 0.01)]),
        };
        reprice(&mut options, &prices);
        assert_eq!(options[0].name, "m5.large", "now the cheapest");
        let quoted: Vec<(&str, f64)> = options[0]
            .offerings
            .iter()
            .map(|o| (o.capacity_type.as_str(), o.price_per_hour))
            .collect();
        assert_eq!(quoted, [("spot", 0.01), ("on-demand", 0.05)]);
        // c5.large had no quote: the model's prices stay
        assert_eq!(options[1].offerings[0].price_per_hour, 0.035);
    }

    fn provider() -> Aws {
        let config = aws_config::SdkConfig::builder()
            .region(aws_config::Region::new("us-east-1"))
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        Aws::new(
            &config,
            AwsOptions {
                cluster: ClusterInfo {
                    name: "c".into(),
                    endpoint: "https://c".into(),
                    ca_bundle: None,
                    cidr: None,
                },
                interruption_queue: None,
                capacity: CapacitySettings::default(),
                isolated_vpc: false,
                disable_dry_run: false,
                zonal_shifts: None,
                reboot_for_repair: false,
            },
        )
        .expect("provider")
    }

    #[test]
    fn only_types_an_image_of_the_class_boots_are_offered() {
        let aws = provider();
        let class = |amis: serde_json::Value| -> EC2NodeClass {
            serde_json::from_value(json!({
                "metadata": {"name": "default"},
                "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                    "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                    "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
                "status": {"subnets": [{"id": "s-a", "zone": "us-east-1a"}], "amis": amis},
            }))
            .expect("class")
        };
        let standard = json!({"id": "ami-std", "requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"},
            {"key": "karpenter.k8s.aws/instance-accelerator-count", "operator": "DoesNotExist"}]});
        let nvidia = json!({"id": "ami-gpu", "requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Exists"}]});
        let has =
            |types: &Arc<[InstanceTypeOption]>, name: &str| types.iter().any(|t| t.name == name);
        let only_standard = aws.instance_types(Some(&class(json!([standard.clone()]))));
        assert!(has(&only_standard, "m5.large"));
        assert!(
            !has(&only_standard, "g5.xlarge"),
            "no image boots a GPU type"
        );
        assert!(!has(&only_standard, "m6g.large"), "no image boots arm64");
        let with_gpu = aws.instance_types(Some(&class(json!([standard, nvidia]))));
        assert!(has(&with_gpu, "g5.xlarge"));
        assert!(aws.instance_types(Some(&class(json!([])))).is_empty());
    }

    #[test]
    fn instance_types_read_from_ec2_replace_the_embedded_catalog() {
        let aws = provider();
        let class: EC2NodeClass = serde_json::from_value(json!({
            "metadata": {"name": "default"},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
            "status": {"subnets": [{"id": "s-a", "zone": "us-east-1a"}, {"id": "s-b", "zone": "us-east-1b"}],
                "amis": [{"id": "ami-1", "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]},
        }))
        .expect("class");
        let embedded = aws.instance_types(Some(&class));
        assert!(embedded.iter().any(|t| t.name == "c5.large"));
        let m5 = embedded.iter().find(|t| t.name == "m5.large").expect("m5");
        // EC2 describes one type, larger than the embedded one, offered in one zone
        let mut info = kerf_aws::catalog::get("m5.large").expect("m5").clone();
        info.memory_mib *= 2;
        Live::update(&aws.live, |l| {
            l.types = Some(Arc::new(RegionCatalog {
                types: vec![info],
                zones: BTreeMap::from([("m5.large".into(), vec!["us-east-1a".into()])]),
            }));
        });
        let read = aws.instance_types(Some(&class));
        let names: Vec<&str> = read.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["m5.large"]);
        assert!(read[0].capacity.memory_bytes > m5.capacity.memory_bytes);
        assert!(read[0].offerings.iter().all(|o| o.zone == "us-east-1a"));
        assert_eq!(read[0].offerings.len(), 2, "spot and on-demand");
    }
}
