//! The cloud provider interface the operator drives: what an instance type can be bought as,
//! launch a NodeClaim, delete and list instances. It lives with the operator because it does
//! I/O; the core only sees its answers as values (instance types, launched instances,
//! insufficient-capacity offerings), which the simulator's cloud gives it too.

use std::sync::Arc;

use kerf_core::metrics::Recorder;

use kerf_api::common::NodeSelectorRequirementWithMinValues as Requirement;
use kerf_api::ec2nodeclass::EC2NodeClassStatus;
use kerf_api::{EC2NodeClass, NodePool};
use kerf_aws::capacity::NodeSettings;
use kerf_core::cluster::{ClaimRecord, CloudInstance, Launched};
use kerf_core::controllers::lifecycle::InsufficientOffering;
use kerf_core::controllers::reboot::RebootRefusal;
use kerf_core::fleet::Candidate;
use kerf_scheduling::InstanceTypeOption;

use crate::watch::Queue;

/// Why a cloud call failed.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// No offering of the NodeClaim had capacity; these were tried.
    #[error("insufficient capacity ({} offerings tried)", .0.len())]
    InsufficientCapacity(Vec<InsufficientOffering>),
    /// The provider's API failed; the call may be retried.
    #[error("cloud provider API: {0}")]
    Api(String),
    /// The provider is misconfigured.
    #[error("cloud provider configuration: {0}")]
    Config(String),
    /// The provider refused a launch for want of a permission: the class says so on its
    /// `ValidationSucceeded` and launches nothing until the class or the permission changes.
    #[error("cloud provider permission: {0}")]
    Refused(String),
}

/// Controller settings that change every instance type's capacity, as Karpenter's
/// `VM_MEMORY_OVERHEAD_PERCENT` and `RESERVED_ENIS` do.
#[derive(Clone, Copy, Debug)]
pub struct CapacitySettings {
    /// The share of memory the hypervisor takes.
    pub vm_memory_overhead_percent: f64,
    /// Network interfaces kept out of the pod count.
    pub reserved_enis: u32,
}

impl Default for CapacitySettings {
    fn default() -> CapacitySettings {
        CapacitySettings {
            vm_memory_overhead_percent: kerf_aws::capacity::VM_MEMORY_OVERHEAD_PERCENT,
            reserved_enis: 0,
        }
    }
}

impl CapacitySettings {
    /// What a node of `class` gets, with these settings.
    pub fn node_settings<'a>(&self, class: Option<&'a EC2NodeClass>) -> NodeSettings<'a> {
        let base = class
            .map(|c| NodeSettings::from_node_class(&c.spec))
            .unwrap_or_default();
        NodeSettings {
            vm_memory_overhead_percent: self.vm_memory_overhead_percent,
            reserved_enis: self.reserved_enis,
            ..base
        }
    }
}

/// Every available offering of the NodeClaim's instance types in `catalog`, as candidates for
/// [`kerf_core::fleet::request`], priced as Kerf priced them (a NodeOverlay's price where
/// one applies).
pub fn offerings<'a>(
    catalog: &'a [InstanceTypeOption],
    claim: &'a ClaimRecord,
) -> impl Iterator<Item = Candidate<'a, (&'a InstanceTypeOption, &'a kerf_scheduling::Offering)>> {
    catalog
        .iter()
        .filter(|t| claim.instance_types.contains(&t.name))
        .flat_map(move |t| {
            // one the cloud itself says is unavailable (a zone shifted away from) is not asked
            let offered = t.offerings.iter().filter(|o| o.available);
            offered.map(move |o| {
                let key = (t.name.clone(), o.zone.clone(), o.capacity_type.clone());
                Candidate {
                    instance_type: &t.name,
                    zone: &o.zone,
                    capacity_type: &o.capacity_type,
                    price: (claim.overlaid_prices.get(&key)).map_or(o.price_per_hour, |p| *p),
                    reservation: o.reservation.as_ref().map(|r| r.id.as_str()),
                    item: (t, o),
                }
            })
        })
}

/// Whether an offering (capacity type, instance type, zone) may be asked for now.
pub type Available<'a> = dyn Fn(&str, &str, &str) -> bool + Sync + 'a;

/// A cloud the operator launches nodes in.
pub trait CloudProvider {
    /// The name `--cloud-provider` selects it by.
    fn name(&self) -> &'static str;

    /// The instance types a node class can launch, every offering available.
    fn instance_types(&self, class: Option<&EC2NodeClass>) -> Arc<[InstanceTypeOption]>;

    /// Launches the instance of a NodeClaim named `name`, from the offerings `available`
    /// (capacity type, instance type, zone) allows: those a recent launch found without
    /// capacity are not asked for again.
    fn create(
        &self,
        name: &str,
        claim: &ClaimRecord,
        pool: &NodePool,
        class: Option<&EC2NodeClass>,
        available: &Available<'_>,
    ) -> impl Future<Output = Result<Launched, CloudError>>;

    /// Terminates an instance (gone already is not an error).
    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), CloudError>>;

    /// Reboots the instance of `node` in place, for node repair (Karpenter's
    /// `CloudProvider.Reboot`); `operation_id` is the same for every try of one reboot. A
    /// cloud that cannot reboot says so, and repair gives the node up.
    fn reboot(
        &self,
        node: &str,
        provider_id: &str,
        operation_id: &str,
    ) -> impl Future<Output = Result<(), RebootRefusal>> {
        let _ = (node, provider_id, operation_id);
        std::future::ready(Err(RebootRefusal::NotImplemented))
    }

    /// Starts the cloud's background work once this replica leads, which reports into
    /// `queue` (interruption notices as [`Observed::Notice`](crate::watch::Observed::Notice),
    /// refreshed prices as
    /// [`Observed::OfferingsChanged`](crate::watch::Observed::OfferingsChanged)) or writes through
    /// `client` (node class status), counting into the controllers' `metrics`. A cloud with
    /// none starts nothing.
    fn start(&self, client: kube::Client, queue: Arc<Queue>, metrics: Recorder) {
        drop((client, queue, metrics));
    }

    /// The instances it runs for this cluster, each with the NodeClaim it was launched for.
    fn list(&self) -> impl Future<Output = Result<Vec<CloudInstance>, CloudError>>;

    /// Whether it resolves node classes into their status (the controllers' node class
    /// status controller asks only a cloud that does).
    fn resolves_node_classes(&self) -> bool {
        false
    }

    /// Its repair policies: which node conditions, for how long, make node repair replace a
    /// node (Karpenter's `CloudProvider.RepairPolicies`).
    fn repair_policies(&self) -> &'static [kerf_core::repair::RepairPolicy] {
        &kerf_core::repair::AWS_POLICIES
    }

    /// Resolves the node class `name`'s selector terms and instance profile into a status,
    /// checking that a launch of it would be authorized with an instance type one of
    /// `node_pools` (each NodePool's requirements) admits.
    fn resolve_node_class(
        &self,
        name: &str,
        _class: &EC2NodeClass,
        _node_pools: &[Vec<Requirement>],
    ) -> impl Future<Output = Result<EC2NodeClassStatus, CloudError>> {
        let message = format!("{} resolves no node class ({name})", self.name());
        std::future::ready(Err(CloudError::Config(message)))
    }

    /// Deletes what it made for the deleted node class `name` (launch templates, an
    /// instance profile made for its role).
    fn clean_up_node_class(
        &self,
        _name: &str,
        _class: &EC2NodeClass,
    ) -> impl Future<Output = Result<(), CloudError>> {
        std::future::ready(Ok(()))
    }
}
