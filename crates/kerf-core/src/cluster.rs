//! The cluster as Kerf's controllers see it (Karpenter's `state.Cluster`): NodePools, node
//! classes, NodeClaims, Nodes, Pods, DaemonSets and PodDisruptionBudgets, indexed the way the
//! controllers query them. Shells write what they observed through the methods here (the
//! simulator from its world, the operator from its watches); every method notes what it
//! changed so the controllers know what to look at again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kerf_api::cluster_read::Gaps;
use kerf_api::{EC2NodeClass, NodePool, NodeSelectorRequirementWithMinValues, Taint, labels};
use kerf_scheduling::InstanceTypeOption;
use kerf_scheduling::pods::pod_key;
use kerf_scheduling::resources::{Resources, pod_requests};

use crate::disruption::rules::{DoNotDisrupt, do_not_disrupt};
use crate::provisioning::rules::is_provisionable;
use crate::volumes::Volumes;

/// How a node's capacity is bought.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CapacityType {
    /// Spare capacity, reclaimable with two minutes' notice.
    Spot,
    /// Pay by the second, never reclaimed.
    OnDemand,
    /// Capacity reserved ahead.
    Reserved,
}

impl CapacityType {
    /// The `karpenter.sh/capacity-type` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::Spot => labels::CAPACITY_TYPE_SPOT,
            CapacityType::OnDemand => labels::CAPACITY_TYPE_ON_DEMAND,
            CapacityType::Reserved => "reserved",
        }
    }

    /// Reads a `karpenter.sh/capacity-type` label value.
    pub fn parse(text: &str) -> Option<CapacityType> {
        [
            CapacityType::Spot,
            CapacityType::OnDemand,
            CapacityType::Reserved,
        ]
        .into_iter()
        .find(|c| c.as_str() == text)
    }
}

/// What the cloud launched for a NodeClaim: the status fields Karpenter fills in at launch.
#[derive(Clone, Debug)]
pub struct Launched {
    /// `aws:///<zone>/<instance id>` or `kwok://<name>`: matches the Node's `spec.providerID`.
    pub provider_id: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// How it is bought.
    pub capacity_type: CapacityType,
    /// Dollars per hour.
    pub price_per_hour: f64,
    /// What the machine has (NodePool limits count this).
    pub capacity: Resources,
    /// What pods may request.
    pub allocatable: Resources,
    /// The instance type's labels (arch, family, size, …).
    pub labels: BTreeMap<String, String>,
    /// The image it booted (`status.imageID`), when the cloud has images: a NodeClaim whose
    /// image is no longer among its class's `status.amis` has drifted.
    pub image_id: Option<String>,
    /// Its subnet and security groups, when the cloud has them.
    pub network: Option<InstanceNetwork>,
}

/// Where an instance sits in the cloud's network. No Kubernetes object keeps it, so the cloud
/// reports it at launch and at every listing: a NodeClaim whose subnet or security groups its
/// class no longer selects has drifted.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct InstanceNetwork {
    /// `subnet-…`.
    pub subnet_id: String,
    /// `sg-…`, each once; none when the cloud did not say.
    pub security_group_ids: BTreeSet<String>,
}

/// An instance the cloud runs for this cluster, as its listing reports it for garbage
/// collection.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudInstance {
    /// Matches the Node's `spec.providerID`.
    pub provider_id: String,
    /// The NodeClaim it was launched for (its tag).
    pub nodeclaim: String,
    /// The image it runs, when the cloud has images.
    pub image_id: Option<String>,
    /// Its subnet and security groups, when the cloud has them.
    pub network: Option<InstanceNetwork>,
    /// The capacity reservation it runs in now (`Some(None)`: none), when the cloud says: an
    /// instance whose on-demand reservation ended runs on as on-demand.
    pub reservation: Option<Option<String>>,
}

impl Launched {
    /// The cloud's own id for the instance: the last segment of the provider id.
    pub fn instance_id(&self) -> &str {
        self.provider_id.rsplit('/').next().unwrap_or("")
    }
}

/// Why a NodeClaim no longer matches what would be launched today.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriftReason {
    /// The NodePool's template changed.
    NodePoolDrifted,
    /// The node no longer meets the NodePool's requirements.
    RequirementsDrifted,
    /// The node class changed.
    NodeClassDrift,
    /// Its image is no longer one its node class resolves to (a new AMI release).
    AmiDrift,
    /// Its security groups are not the ones its node class selects now.
    SecurityGroupDrift,
    /// Its subnet is not one its node class selects now.
    SubnetDrift,
    /// It runs in a capacity reservation its node class no longer resolves.
    CapacityReservationDrift,
    /// It runs in a placement group other than the one its node class resolves to now.
    PlacementGroupDrift,
}

impl DriftReason {
    /// Every reason, in the order drift is looked for.
    pub const ALL: [DriftReason; 8] = [
        DriftReason::NodePoolDrifted,
        DriftReason::RequirementsDrifted,
        DriftReason::NodeClassDrift,
        DriftReason::AmiDrift,
        DriftReason::SecurityGroupDrift,
        DriftReason::SubnetDrift,
        DriftReason::CapacityReservationDrift,
        DriftReason::PlacementGroupDrift,
    ];

    /// The reason a `Drifted` condition names, read back after a restart.
    pub fn parse(reason: &str) -> Option<DriftReason> {
        DriftReason::ALL.into_iter().find(|d| d.as_str() == reason)
    }

    /// The reason of the `Drifted` condition, as Karpenter writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftReason::NodePoolDrifted => "NodePoolDrifted",
            DriftReason::RequirementsDrifted => "RequirementsDrifted",
            DriftReason::NodeClassDrift => "NodeClassDrift",
            DriftReason::AmiDrift => "AMIDrift",
            DriftReason::SecurityGroupDrift => "SecurityGroupDrift",
            DriftReason::SubnetDrift => "SubnetDrift",
            DriftReason::CapacityReservationDrift => "CapacityReservationDrift",
            DriftReason::PlacementGroupDrift => "PlacementGroupDrift",
        }
    }
}

/// A NodeClaim: what was asked for, what the cloud gave, and how far it got.
#[derive(Clone, Debug)]
pub struct ClaimRecord {
    /// The NodePool it belongs to.
    pub node_pool: String,
    /// The node class it launches with (`spec.nodeClassRef.name`).
    pub node_class: String,
    /// When it was created.
    pub created: Duration,
    /// `spec.requirements`.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// `spec.taints`: its node keeps them.
    pub taints: Vec<Taint>,
    /// `spec.startupTaints`: its node registers with them and its agents remove them.
    pub startup_taints: Vec<Taint>,
    /// The instance types it may launch as, cheapest first.
    pub instance_types: Vec<String>,
    /// `karpenter.sh/nodepool-hash` at creation.
    pub node_pool_hash: String,
    /// `karpenter.k8s.aws/ec2nodeclass-hash` at creation.
    pub node_class_hash: String,
    /// `metadata.annotations`: its NodePool template's and Karpenter's own, copied to its
    /// Node when the node registers.
    pub annotations: BTreeMap<String, String>,
    /// `spec.terminationGracePeriod`: how long its drain may wait on its pods once its
    /// deletion starts (its own, as made: the NodePool's may have changed since).
    pub termination_grace_period: Option<Duration>,
    /// The resources its `spec.resources.requests` names: its node's capacity of each is
    /// checked against the launch's (condition `ConsistentStateFound`).
    pub requested: Vec<String>,
    /// Set once the cloud launched it (condition `Launched`).
    pub launched: Option<Launched>,
    /// The Node that registered for it.
    pub node: Option<String>,
    /// Condition `Registered`: its node joined once.
    pub registered: bool,
    /// Condition `Initialized`: the node is Ready and its startup taints are gone.
    pub initialized: bool,
    /// Condition `Drifted`, with its reason.
    pub drifted: Option<DriftReason>,
    /// When its deletion started (`metadata.deletionTimestamp`).
    pub deleting: Option<Duration>,
    /// The API server holds its deletion: from then on it no longer counts against its
    /// NodePool's limits. A deletion only asked for (the write refused by an outage and
    /// waiting to be tried again) still counts, as Karpenter frees a node's share only once
    /// the write that marks it has succeeded (swarm seed 365383).
    pub deletion_stored: bool,
    /// Condition `InstanceTerminating` (its drain is done and the cloud was told to
    /// terminate the instance), as these controllers write it.
    pub instance_terminating: bool,
    /// The API server holds `InstanceTerminating`: from then on the node no longer counts
    /// toward its NodePool's disruption budgets, as in Karpenter, whose budgets read the
    /// NodeClaim as its informer has it. A condition only asked for (its status write
    /// refused by an outage and waiting to be tried again) still counts.
    pub instance_terminating_stored: bool,
    /// Condition `Consolidatable`: initialized, and quiet for its NodePool's
    /// consolidateAfter.
    pub consolidatable: bool,
    /// When its pods go regardless of budgets and do-not-disrupt
    /// (`karpenter.sh/nodeclaim-termination-timestamp`): node repair sets it to the moment
    /// it gives up on an unhealthy node.
    pub terminate_at: Option<Duration>,
    /// The price of each of its offerings where a NodeOverlay changed it, by instance type,
    /// zone and capacity type, so that the cloud launches the cheapest as Kerf priced it.
    pub overlaid_prices: BTreeMap<(String, String, String), f64>,
    /// Its node's reboot for repair, under way or the last one's end (condition
    /// `Rebooting`).
    pub reboot: Option<Reboot>,
}

/// A reboot for repair (Karpenter's `RebootNode` repair action), as the NodeClaim's
/// `Rebooting` condition and `karpenter.sh/reboot-*` annotations record it, so that a
/// restarted controller carries it on.
#[derive(Clone, Debug, PartialEq)]
pub struct Reboot {
    /// How far it got.
    pub phase: RebootPhase,
    /// When it was asked for (`Rebooting` True's transition): the drain bound counts from
    /// here.
    pub requested: Duration,
    /// `rebooting for TYPE/REASON`, the node condition repair acted on.
    pub message: String,
    /// `karpenter.sh/reboot-termination-grace-period`: how long the drain may take before
    /// the pods left ride through the reboot (none: until the node is empty), or why the
    /// annotation cannot be read (the reboot then fails as an invalid request).
    pub drain_bound: Result<Option<Duration>, String>,
    /// `karpenter.sh/reboot-pre-boot-id`: the node's boot id before the reboot, recorded once
    /// the drain is done; a different one proves the reboot.
    pub pre_boot_id: Option<String>,
}

/// Where a reboot stands.
#[derive(Clone, Debug, PartialEq)]
pub enum RebootPhase {
    /// Asked for: the node is tainted and drained, then the cloud is asked (`RebootRequested`).
    Requested,
    /// The cloud took it, at this time (`Initialized` Unknown since): waiting for a new boot
    /// and Ready (`RebootIssued`).
    Issued(Duration),
    /// Over (`Rebooting` False) at this time: repair tolerates a fault again from here.
    Ended {
        /// When.
        at: Duration,
        /// `RebootSucceeded`, or `RebootFailed` (the NodeClaim kept: its request was invalid).
        reason: &'static str,
        /// What happened.
        message: String,
    },
}

impl Reboot {
    /// Whether it is under way (`Rebooting` True).
    pub fn under_way(&self) -> bool {
        !matches!(self.phase, RebootPhase::Ended { .. })
    }

    /// The reboot with its times moved from Unix time to a clock whose zero is `epoch`.
    pub fn since(mut self, epoch: Duration) -> Reboot {
        self.requested = self.requested.saturating_sub(epoch);
        match &mut self.phase {
            RebootPhase::Issued(at) | RebootPhase::Ended { at, .. } => {
                *at = at.saturating_sub(epoch);
            }
            RebootPhase::Requested => {}
        }
        self
    }

    /// When it ended, if it did.
    pub fn ended(&self) -> Option<Duration> {
        match self.phase {
            RebootPhase::Ended { at, .. } => Some(at),
            _ => None,
        }
    }
}

impl ClaimRecord {
    /// The taints its node registers with, as every cloud's user data or kubelet sets them:
    /// `spec.taints`, then `spec.startupTaints`, then Karpenter v1's
    /// `karpenter.sh/unregistered:NoExecute`, which keeps pods off the node until its
    /// NodeClaim's labels and taints are on it (the lifecycle controller then removes it).
    pub fn registration_taints(&self) -> Vec<Taint> {
        let mut taints: Vec<Taint> = (self.taints.iter())
            .chain(&self.startup_taints)
            .cloned()
            .collect();
        taints.push(unregistered_taint());
        taints
    }
}

/// Karpenter v1's registration taint.
pub fn unregistered_taint() -> Taint {
    Taint {
        key: kerf_api::labels::UNREGISTERED_TAINT_KEY.into(),
        value: None,
        effect: kerf_api::TaintEffect::NoExecute,
        time_added: None,
    }
}

/// The taint that keeps new pods off a node being disrupted; a restarted controller reads
/// it to know which nodes were mid-disruption.
pub fn disrupted_taint() -> Taint {
    Taint {
        key: labels::DISRUPTED_TAINT_KEY.into(),
        value: None,
        effect: kerf_api::TaintEffect::NoSchedule,
        time_added: None,
    }
}

/// The taint a node asked to be disrupted is placed against before it is stored.
static DISRUPTED_TAINT: LazyLock<Taint> = LazyLock::new(disrupted_taint);

/// A Node.
#[derive(Clone, Debug)]
pub struct NodeRecord {
    /// `spec.providerID`.
    pub provider_id: String,
    /// The NodeClaim whose instance it is, when Kerf launched it.
    pub nodeclaim: Option<String>,
    /// Labels (shared with the solver's view of the node): those stored, and those Kerf
    /// asked for since.
    pub labels: std::sync::Arc<BTreeMap<String, String>>,
    /// The API server holds its `karpenter.sh/initialized: "true"` label: Karpenter's
    /// budgets count the node from then (its informer's copy), not from when Kerf asked
    /// for the label (a write refused by a conflict may land seconds later, swarm seed
    /// 61538).
    pub initialized_stored: bool,
    /// Taints.
    pub taints: Vec<Taint>,
    /// `status.allocatable`.
    pub allocatable: Resources,
    /// `status.capacity`: a node without a NodeClaim counts this against its NodePool's
    /// limits.
    pub capacity: Resources,
    /// Condition `Ready`.
    pub ready: bool,
    /// When the `Ready` condition last changed (its lastTransitionTime): node repair counts
    /// an unhealthy node's toleration from here.
    pub ready_changed: Duration,
    /// What the pods bound to it request.
    pub requests: Resources,
    /// When a pod last arrived or left (consolidateAfter counts from here).
    pub last_pod_event: Duration,
    /// The `last_pod_event` it was last reported consolidatable for.
    pub marked_consolidatable: Option<Duration>,
    /// `karpenter.sh/do-not-disrupt: "true"` on the Node: no voluntary disruption.
    pub do_not_disrupt: bool,
    /// Kerf asked for the disrupted taint and has not asked for it to go: the solver keeps
    /// pods off the node already, while the drain waits for the taint itself to be stored.
    pub tainting: bool,
    /// Kerf asked for the disrupted taint to go and has not asked for it again since: a
    /// taint the record still shows may be removed by that write yet.
    pub untainting: bool,
    /// `metadata.creationTimestamp` (when first seen, without one): its age in the metrics.
    pub created: Duration,
    /// Its conditions other than `Ready`'s state above (and `Ready` too), for repair.
    pub conditions: Vec<crate::repair::NodeCondition>,
    /// `karpenter.sh/do-not-repair: "true"`: repair leaves it alone.
    pub do_not_repair: bool,
    /// It carries Karpenter's `karpenter.sh/termination` finalizer: a deletion of the Node
    /// waits for its drain.
    pub finalizer: bool,
    /// `metadata.deletionTimestamp` is set: someone deleted the Node (its finalizer holds it
    /// for the drain).
    pub deleting: bool,
    /// `status.nodeInfo.bootID`: a reboot changes it.
    pub boot_id: String,
}

/// Who made a pod, as far as disruption cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodOwner {
    /// No controller: an evicted pod is gone for good.
    None,
    /// A workload controller (ReplicaSet, StatefulSet, Job, …) makes a new one.
    Controller,
    /// A DaemonSet: it runs on every node it fits and drains last.
    DaemonSet,
}

impl PodRecord {
    /// The pod as its owner declared it, before Kerf added its volumes' topology and
    /// attachments.
    pub fn declared(&self) -> &Pod {
        self.declared.as_deref().unwrap_or(&self.shape)
    }
}

impl NodeRecord {
    /// The taints pods are placed against: those stored, and the disrupted taint once Kerf
    /// asked for it.
    pub fn scheduling_taints(&self) -> impl Iterator<Item = &Taint> {
        let asked = (self.tainting
            && !self
                .taints
                .iter()
                .any(|t| t.key == labels::DISRUPTED_TAINT_KEY))
        .then(|| &*DISRUPTED_TAINT);
        self.taints.iter().chain(asked)
    }

    /// The node as the solver's existing capacity: its labels, taints, room and requests.
    pub fn as_existing(&self, name: &str, initialized: bool) -> kerf_scheduling::ExistingNode {
        kerf_scheduling::ExistingNode {
            name: name.to_string(),
            labels: self.labels.clone(),
            taints: self.scheduling_taints().cloned().collect(),
            allocatable: self.allocatable.clone(),
            requested: self.requests.clone(),
            initialized,
        }
    }
}

/// A Pod.
#[derive(Clone, Debug)]
pub struct PodRecord {
    /// What it shares with its replicas: namespace, labels, annotations, owners and spec
    /// without `nodeName` ([`crate::pod_shapes`]). Its name is its key's, and what is its
    /// own is below.
    pub shape: Arc<Pod>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `status.phase`.
    pub phase: Option<String>,
    /// Whether its deletion has begun (`metadata.deletionTimestamp`): a drain waits for it
    /// to go and asks no eviction of it, as Karpenter's does.
    pub terminating: bool,
    /// Whether its `Ready` condition is true.
    pub ready: bool,
    /// Whether, as last written, kube-scheduler found it no node and it is Kerf's to
    /// provision ([`is_provisionable`]).
    pub provisionable: bool,
    /// What it requests (containers, init peak, overhead).
    pub requests: Resources,
    /// What the solver reads of it, fingerprinted ([`kerf_scheduling::pods::terms_of`]):
    /// replicas compile once per solve.
    pub terms: u64,
    /// Who made it.
    pub owner: PodOwner,
    /// `spec.nodeName`.
    pub node: Option<String>,
    /// The NodeClaim the provisioner planned it onto, while that NodeClaim comes up.
    pub nominated: Option<String>,
    /// When it was last left without a node.
    pub pending_since: Duration,
    /// `status.startTime`: a timed `karpenter.sh/do-not-disrupt` counts from here.
    pub started: Option<Duration>,
    /// The pod as declared, when it mounts claims: `pod` has its volumes' topology added,
    /// and is made again from this when the volumes change.
    pub declared: Option<Box<Pod>>,
    /// Which pod of this name it is: a pod made again under the same name (a StatefulSet's,
    /// or one whose uid changed) is a new one, which an eviction asked of the old does not
    /// cover.
    pub incarnation: u64,
    /// Why its claims keep it from being provisioned for now (see
    /// [`Volumes::problem`]).
    pub volume_problem: Option<String>,
    /// `metadata.creationTimestamp` (when first seen, without one).
    pub created: Duration,
    /// When the provisioner first found it a place, until it is bound (Karpenter's
    /// scheduling success time, from which its provisioning latency metrics count).
    pub schedulable_since: Option<Duration>,
    /// When the provisioner first decided about it, placed or not.
    pub decided: Option<Duration>,
}

impl PodRecord {
    /// Whether the provisioner should find it a node: kube-scheduler found none, and no
    /// NodeClaim is coming up for it.
    pub fn wants_capacity(&self) -> bool {
        self.nominated.is_none() && self.volume_problem.is_none() && self.provisionable
    }

    /// The pod again as an object, for writing it back (its status reduced to its phase).
    pub fn object(&self, key: &str) -> Pod {
        let mut pod = self.declared().clone();
        let (_, name) = split_pod_key(key);
        pod.metadata.name = Some(name.to_string());
        pod.metadata.uid.clone_from(&self.uid);
        if let Some(s) = pod.spec.as_mut() {
            s.node_name.clone_from(&self.node);
        }
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: self.phase.clone(),
            ..Default::default()
        });
        pod
    }
}

/// A pod bound to a node or started, for Karpenter's pod latency metrics.
#[derive(Clone, Copy, Debug)]
pub enum PodTransition {
    /// It was bound to a node.
    Bound {
        /// How long after its creation.
        since_created: Duration,
        /// How long after the provisioner first found it a place, if it did.
        since_schedulable: Option<Duration>,
        /// Whether it claims dynamic resources.
        dynamic_resources: bool,
    },
    /// It started running.
    Started {
        /// How long after its creation.
        since_created: Duration,
        /// How long after the provisioner first found it a place, if it did.
        since_schedulable: Option<Duration>,
    },
}

/// What changed since the controllers last looked.
#[derive(Clone, Debug, Default)]
pub struct Changes {
    /// A pod started wanting capacity.
    pub provisionable: bool,
    /// Something disruption reads changed (room freed, nodes added or removed, readiness).
    pub disruption: bool,
    /// NodePools whose spec changed (drift).
    pub node_pools: BTreeSet<String>,
    /// Node classes whose spec or status changed (drift, NodePools' readiness), or whose
    /// deletion began.
    pub node_classes: BTreeSet<String>,
    /// NodeClaims whose node registered or became ready (lifecycle).
    pub lifecycle: BTreeSet<String>,
    /// A NodeOverlay was created, changed or deleted.
    pub node_overlays: bool,
    /// Nodes whose room or taints changed (a pod bound there, the Node written): the pods
    /// nominated to them are checked against what they can still take.
    pub nodes_filled: BTreeSet<String>,
    /// A CapacityBuffer, PodTemplate or workload was created, changed or deleted.
    pub buffers: bool,
}

/// The cluster state.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// NodePools by name.
    pub(crate) node_pools: BTreeMap<String, NodePool>,
    /// EC2NodeClasses by name.
    pub(crate) node_classes: BTreeMap<String, EC2NodeClass>,
    /// NodeOverlays by name.
    pub(crate) node_overlays: BTreeMap<String, kerf_api::NodeOverlay>,
    /// Instance types each node class can launch (all offerings available), from the cloud
    /// provider.
    pub(crate) instance_types: BTreeMap<String, Arc<[InstanceTypeOption]>>,
    /// NodeClaims by name.
    pub(crate) nodeclaims: BTreeMap<String, ClaimRecord>,
    /// Nodes by name.
    pub(crate) nodes: BTreeMap<String, NodeRecord>,
    /// Pods by `namespace/name`.
    pub(crate) pods: BTreeMap<String, PodRecord>,
    /// The pods' shapes, each kept once for all the replicas that have it.
    shapes: crate::pod_shapes::Shapes,
    /// DaemonSet pod templates by `namespace/name`.
    pub(crate) daemonsets: BTreeMap<String, Pod>,
    /// PodDisruptionBudgets by `namespace/name`.
    pub(crate) pdbs: BTreeMap<String, PodDisruptionBudget>,
    /// Claims, volumes and storage classes, for the topology of pods' volumes.
    pub(crate) volumes: Volumes,
    /// CapacityBuffers and the PodTemplates and workloads they take their shape from.
    pub(crate) buffers: crate::buffers::Buffers,
    /// What changed since the controllers last looked.
    pub(crate) changes: Changes,
    /// What Kerf could not read of a NodePool (by name) read from a live cluster: it limits
    /// what may be done with it. A NodePool missing here was read whole.
    pub(crate) pool_gaps: BTreeMap<String, Gaps>,
    /// The same for EC2NodeClasses.
    pub(crate) class_gaps: BTreeMap<String, Gaps>,
    /// Why a NodePool (by name) fails the checks Karpenter's CRD leaves to the controller
    /// (`karpenter.k8s.aws` labels, label and taint syntax, a taint twice, …): no node is
    /// launched for it
    /// and its `ValidationSucceeded` says so, as Karpenter's `nodepool.validation` does.
    pub(crate) pool_invalid: BTreeMap<String, String>,
    /// Pods whose `karpenter.sh/do-not-disrupt` is a duration, with when it runs out: the
    /// one input of disruption that changes by itself with time, pod by pod.
    timed_do_not_disrupt: BTreeMap<String, Duration>,
    /// Counts every write through the methods below except to pods that stay without a
    /// node, so disruption (which reads all the rest) can tell that nothing it reads changed.
    generation: u64,
    /// Counts every pod write, those of pods without a node included.
    pod_writes: u64,
    /// Counts writes to what the instance types offered per NodePool are made of: NodePools,
    /// node classes, NodeOverlays and the cloud's types.
    catalog_generation: u64,
    /// Pods created so far, numbering their incarnations.
    pod_incarnations: u64,
    /// Pods that were bound or started running since the controllers last looked.
    pod_transitions: Vec<PodTransition>,
    /// How far the controllers' clock's zero is from the Unix epoch (objects' timestamps are
    /// Unix times).
    pub(crate) epoch: Duration,
}

/// The simulator's planted-bug tests only (feature `plant`): the cluster state open to writes
/// that skip its change tracking, the bug the convergence checker exists to catch.
#[cfg(feature = "plant")]
pub struct UntrackedWrites<'a> {
    /// NodePools by name.
    pub node_pools: &'a mut BTreeMap<String, NodePool>,
    /// Pods by `namespace/name`.
    pub pods: &'a mut BTreeMap<String, PodRecord>,
}

#[cfg(feature = "plant")]
impl Cluster {
    /// Writes past change tracking (see [`UntrackedWrites`]).
    pub(crate) fn untracked_writes(&mut self) -> UntrackedWrites<'_> {
        UntrackedWrites {
            node_pools: &mut self.node_pools,
            pods: &mut self.pods,
        }
    }
}

/// Read access for shells, explain and checkers: every write goes through
/// [`crate::controllers::Controllers::observe`] or the controllers themselves.
impl Cluster {
    /// NodePools by name.
    pub fn node_pools(&self) -> &BTreeMap<String, NodePool> {
        &self.node_pools
    }

    /// EC2NodeClasses by name.
    pub fn node_classes(&self) -> &BTreeMap<String, EC2NodeClass> {
        &self.node_classes
    }

    /// NodeOverlays by name.
    pub fn node_overlays(&self) -> &BTreeMap<String, kerf_api::NodeOverlay> {
        &self.node_overlays
    }

    /// Instance types each node class can launch, as the cloud last answered.
    pub fn instance_types(&self) -> &BTreeMap<String, Arc<[InstanceTypeOption]>> {
        &self.instance_types
    }

    /// NodeClaims by name.
    pub fn nodeclaims(&self) -> &BTreeMap<String, ClaimRecord> {
        &self.nodeclaims
    }

    /// Nodes by name.
    pub fn nodes(&self) -> &BTreeMap<String, NodeRecord> {
        &self.nodes
    }

    /// Pods by `namespace/name`.
    pub fn pods(&self) -> &BTreeMap<String, PodRecord> {
        &self.pods
    }

    /// DaemonSet pod templates by `namespace/name`.
    pub fn daemonsets(&self) -> &BTreeMap<String, Pod> {
        &self.daemonsets
    }

    /// PodDisruptionBudgets by `namespace/name`.
    pub fn pdbs(&self) -> &BTreeMap<String, PodDisruptionBudget> {
        &self.pdbs
    }

    /// Claims, volumes and storage classes, for the topology of pods' volumes.
    pub fn volumes(&self) -> &Volumes {
        &self.volumes
    }

    /// What Kerf could not read of each NodePool read from a live cluster.
    pub fn pool_gaps(&self) -> &BTreeMap<String, Gaps> {
        &self.pool_gaps
    }

    /// What Kerf could not read of each node class read from a live cluster.
    pub fn class_gaps(&self) -> &BTreeMap<String, Gaps> {
        &self.class_gaps
    }
}

fn set_gaps(map: &mut BTreeMap<String, Gaps>, name: &str, gaps: &Gaps) {
    if gaps.is_empty() {
        map.remove(name);
    } else {
        map.insert(name.to_string(), gaps.clone());
    }
}

/// A pod's key (`namespace/name`) as namespace and name.
pub fn split_pod_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// Who made a pod, from its owner references.
pub fn owner_of(pod: &Pod) -> PodOwner {
    match pod.metadata.owner_references.as_deref() {
        Some(refs) if refs.iter().any(|o| o.kind == "DaemonSet") => PodOwner::DaemonSet,
        Some(refs) if refs.iter().any(|o| o.controller == Some(true)) => PodOwner::Controller,
        _ => PodOwner::None,
    }
}

impl Cluster {
    /// When the pods whose `karpenter.sh/do-not-disrupt` is a duration stop blocking.
    pub fn do_not_disrupt_ends(&self) -> impl Iterator<Item = Duration> + '_ {
        self.timed_do_not_disrupt.values().copied()
    }

    /// A number that changes whenever anything is written but a pod without a node (its
    /// deletion changes it too).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A number that changes whenever a NodePool, node class, NodeOverlay or a class's
    /// instance types are written: what the overlaid catalog is worked out from.
    pub fn catalog_generation(&self) -> u64 {
        self.catalog_generation
    }

    /// What the pods nominated to each NodeClaim request (a pod leaves its nomination when
    /// bound): the room they will take once kube-scheduler binds them, which neither a solve
    /// nor a consolidation move may count on.
    pub fn nominated_requests(&self) -> rustc_hash::FxHashMap<&str, Resources> {
        let mut nominated: rustc_hash::FxHashMap<&str, Resources> = Default::default();
        for p in self.pods.values() {
            if let Some(claim) = &p.nominated {
                nominated
                    .entry(claim.as_str())
                    .or_default()
                    .add(&p.requests);
            }
        }
        nominated
    }

    /// A number that changes whenever a pod is written or deleted, with or without a node.
    pub fn pod_writes(&self) -> u64 {
        self.pod_writes
    }

    /// Keys of the pods that satisfy `keep`, in key order.
    pub fn pods_where(&self, keep: impl Fn(&PodRecord) -> bool) -> Vec<String> {
        self.pods
            .iter()
            .filter(|(_, p)| keep(p))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Since when a NodeClaim has waited for its launch (no provider ID yet), the earliest
    /// such NodeClaim's creation, if one does: Karpenter's cluster state is not synced while
    /// one waits, and its disruption makes no decision meanwhile.
    pub fn launching_since(&self) -> Option<Duration> {
        (self.nodeclaims.values())
            .filter(|c| c.launched.is_none())
            .map(|c| c.created)
            .min()
    }

    /// The NodeClaim behind a node, with its name.
    pub fn claim_of_node(&self, node: &str) -> Option<(&String, &ClaimRecord)> {
        self.claim_of(self.nodes.get(node)?)
    }

    /// The NodeClaim behind a node record in hand (a walk over the nodes looks each up once).
    pub fn claim_of(&self, node: &NodeRecord) -> Option<(&String, &ClaimRecord)> {
        self.nodeclaims.get_key_value(node.nodeclaim.as_ref()?)
    }

    /// A pod was created or changed. Its node comes from `spec.nodeName`.
    pub(crate) fn apply_pod(&mut self, pod: Pod, now: Duration) {
        self.pod_writes += 1;
        let declared = Volumes::mounts_claims(&pod).then(|| Box::new(pod.clone()));
        let volume_problem = declared.as_deref().and_then(|d| self.volumes.problem(d));
        let pod = self.volumes.inject(pod);
        let key = pod_key(&pod);
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        let old = self.pods.remove(&key);
        let (nominated, pending_since, wanted) = match &old {
            Some(o) => (o.nominated.clone(), o.pending_since, o.wants_capacity()),
            None => (None, now, false),
        };
        let created = match &old {
            Some(o) => o.created,
            None => (crate::objects::created_at(&pod.metadata))
                .map_or(now, |t| t.saturating_sub(self.epoch)),
        };
        let old_node = old.as_ref().and_then(|o| o.node.clone());
        let unbound = old_node.is_none() && node.is_some();
        let (mut schedulable_since, mut decided) = old
            .as_ref()
            .map_or((None, None), |o| (o.schedulable_since, o.decided));
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        let running = phase.as_deref() == Some("Running");
        let since_schedulable = schedulable_since.map(|at| now.saturating_sub(at));
        if let Some(o) = &old {
            if unbound {
                let dynamic_resources = (pod.spec.as_ref())
                    .and_then(|s| s.resource_claims.as_ref())
                    .is_some_and(|c| !c.is_empty());
                self.pod_transitions.push(PodTransition::Bound {
                    since_created: now.saturating_sub(created),
                    since_schedulable,
                    dynamic_resources,
                });
            }
            if o.phase.as_deref() != Some("Running") && running {
                self.pod_transitions.push(PodTransition::Started {
                    since_created: now.saturating_sub(created),
                    since_schedulable,
                });
            }
        }
        if node.is_none() && old_node.is_some() {
            // waiting again: its provisioning latency counts afresh
            (schedulable_since, decided) = (None, None);
        }
        if old_node.is_some() || node.is_some() {
            self.generation += 1;
        }
        if let Some(o) = &old
            && let Some(n) = o.node.as_ref().and_then(|n| self.nodes.get_mut(n))
        {
            n.requests = n.requests.saturating_sub(&o.requests);
        }
        let requests = pod_requests(&pod);
        let incarnation = match &old {
            Some(o) if o.uid == pod.metadata.uid => o.incarnation,
            _ => {
                self.pod_incarnations += 1;
                self.pod_incarnations
            }
        };
        let mut record = PodRecord {
            incarnation,
            volume_problem,
            owner: owner_of(&pod),
            terms: kerf_scheduling::pods::terms_of(&pod),
            requests,
            node: node.clone(),
            nominated: if node.is_some() { None } else { nominated },
            started: crate::disruption::rules::pod_started(&pod)
                .map(|t| t.saturating_sub(self.epoch)),
            pending_since: if node.is_none() && old_node.is_some() {
                now
            } else {
                pending_since
            },
            uid: pod.metadata.uid.clone(),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            phase,
            ready: crate::objects::pod_condition_true(&pod, "Ready"),
            provisionable: is_provisionable(&pod),
            shape: self.shapes.intern(pod),
            declared,
            created,
            schedulable_since,
            decided,
        };
        if let Some(n) = node.as_ref().and_then(|n| self.nodes.get_mut(n)) {
            n.requests.add(&record.requests);
            if old_node != node {
                n.last_pod_event = now;
            }
        }
        if let Some(n) = node.as_ref().filter(|_| old_node != node) {
            self.changes.nodes_filled.insert(n.clone());
        }
        if old_node != node {
            if let Some(n) = old_node.as_ref().and_then(|n| self.nodes.get_mut(n)) {
                n.last_pod_event = now;
            }
            self.changes.disruption |= old_node.is_some();
        }
        if record.owner == PodOwner::DaemonSet {
            record.nominated = None;
        }
        if record.wants_capacity() && !wanted {
            self.changes.provisionable = true;
        }
        match do_not_disrupt(&record.shape, record.started) {
            DoNotDisrupt::Until(end) => self.timed_do_not_disrupt.insert(key.clone(), end),
            _ => self.timed_do_not_disrupt.remove(&key),
        };
        self.pods.insert(key, record);
    }

    /// The pods bound or started since the last call.
    pub fn take_pod_transitions(&mut self) -> Vec<PodTransition> {
        std::mem::take(&mut self.pod_transitions)
    }

    /// Claims, volumes or storage classes changed: the pods that mount claims are read
    /// again with their volumes' topology as it is now.
    pub(crate) fn volumes_changed(&mut self, change: impl FnOnce(&mut Volumes), now: Duration) {
        change(&mut self.volumes);
        // only the pods whose volumes now say something else are read again
        let volumes = &self.volumes;
        let changed: Vec<Pod> = self
            .pods
            .values()
            .filter_map(|p| {
                let declared = p.declared.as_deref()?;
                let now = volumes.inject(declared.clone());
                let same = now.metadata.annotations == p.shape.metadata.annotations
                    && now.spec.as_ref().map(|s| &s.overhead)
                        == p.shape.spec.as_ref().map(|s| &s.overhead)
                    && volumes.problem(declared) == p.volume_problem;
                (!same).then(|| declared.clone())
            })
            .collect();
        if !changed.is_empty() {
            self.changes.provisionable = true;
        }
        for pod in changed {
            self.apply_pod(pod, now);
        }
    }

    /// A pod is gone.
    pub(crate) fn delete_pod(&mut self, key: &str, now: Duration) {
        let Some(p) = self.pods.remove(key) else {
            return;
        };
        self.pod_writes += 1;
        self.timed_do_not_disrupt.remove(key);
        // a waiting pod's going is read too: the disruption pass counts the pods waiting (a
        // node promised to one, consolidation held while one waits for capacity), and a pass
        // that found nothing is not run again until this number moves (swarm seed 92701: a
        // drifted node stayed once the pods its room was kept for were deleted)
        self.generation += 1;
        if let Some(n) = p.node.and_then(|n| self.nodes.get_mut(&n)) {
            n.requests = n.requests.saturating_sub(&p.requests);
            n.last_pod_event = now;
            self.changes.disruption = true;
        }
    }

    /// Takes a pod off its node (the node went away): it waits for a node again.
    pub(crate) fn unbind_pod(&mut self, key: &str, now: Duration) {
        let Some(mut pod) = self.pods.get(key).map(|p| p.object(key)) else {
            return;
        };
        if let Some(s) = pod.spec.as_mut() {
            s.node_name = None;
        }
        if let Some(s) = pod.status.as_mut() {
            s.conditions = None;
        }
        self.apply_pod(pod, now);
    }

    /// A NodePool was read from a live cluster with `gaps` (empty: read whole).
    pub(crate) fn apply_node_pool_read(&mut self, np: NodePool, gaps: &Gaps) {
        let name = np.metadata.name.clone().unwrap_or_default();
        set_gaps(&mut self.pool_gaps, &name, gaps);
        self.apply_node_pool(np);
    }

    /// An EC2NodeClass was read from a live cluster with `gaps` (empty: read whole).
    pub(crate) fn apply_node_class_read(&mut self, class: EC2NodeClass, gaps: &Gaps) {
        let name = class.metadata.name.clone().unwrap_or_default();
        set_gaps(&mut self.class_gaps, &name, gaps);
        self.apply_node_class(class);
    }

    /// Whether new nodes may be launched for a NodePool: it is not being deleted, it and its
    /// node class were read whole (or at least every field that shapes a node was), and its
    /// class is neither `Ready` False nor being deleted (as Karpenter's provisioner leaves out
    /// a NodePool whose class is not ready; a class no controller has resolved yet has no
    /// `Ready` and is not held).
    pub fn may_launch_for(&self, pool: &str) -> bool {
        let np = self.node_pools.get(pool);
        let class = np.map(|np| np.spec.template.spec.node_class_ref.name.as_str());
        // a NodePool being deleted (held by a foreground deletion of its NodeClaims) gets no
        // new node, as Karpenter's provisioner leaves it out
        let deleting = np.is_some_and(|np| np.metadata.deletion_timestamp.is_some());
        !deleting
            && self.pool_gaps.get(pool).is_none_or(|g| g.launch)
            && !self.pool_invalid.contains_key(pool)
            && class.is_none_or(|c| self.class_gaps.get(c).is_none_or(|g| g.launch))
            && class.is_none_or(|c| !self.class_not_ready(c))
    }

    /// Whether a node class says it is not ready (`Ready` False) or is being deleted.
    fn class_not_ready(&self, class: &str) -> bool {
        (self.node_classes.get(class)).is_some_and(|c| {
            c.metadata.deletion_timestamp.is_some()
                || (c.status.iter().flat_map(|s| &s.conditions))
                    .any(|c| c.type_ == "Ready" && c.status == "False")
        })
    }

    /// A NodePool was created or changed.
    pub(crate) fn apply_node_pool(&mut self, np: NodePool) {
        self.generation += 1;
        self.catalog_generation += 1;
        let name = np.metadata.name.clone().unwrap_or_default();
        self.changes.node_pools.insert(name.clone());
        self.changes.disruption = true;
        let problems = np.runtime_problems();
        if problems.is_empty() {
            self.pool_invalid.remove(&name);
        } else {
            let message = problems.iter().map(ToString::to_string).collect::<Vec<_>>();
            self.pool_invalid.insert(name.clone(), message.join("; "));
        }
        self.node_pools.insert(name, np);
    }

    /// A NodePool is gone.
    pub(crate) fn delete_node_pool(&mut self, name: &str) {
        self.generation += 1;
        self.catalog_generation += 1;
        self.pool_gaps.remove(name);
        self.pool_invalid.remove(name);
        self.node_pools.remove(name);
        self.changes.node_pools.insert(name.to_string());
        self.changes.disruption = true;
    }

    /// A node class was created or changed.
    pub(crate) fn apply_node_class(&mut self, class: EC2NodeClass) {
        self.generation += 1;
        self.catalog_generation += 1;
        let name = class.metadata.name.clone().unwrap_or_default();
        self.changes.node_classes.insert(name.clone());
        self.node_classes.insert(name, class);
    }

    /// A node class's metadata changed (generation, finalizers, deletion), nothing that
    /// changes what the class offers.
    pub(crate) fn set_node_class_metadata(
        &mut self,
        name: &str,
        metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) {
        if let Some(class) = self.node_classes.get_mut(name) {
            // a deletion begun is read by its NodePools' `NodeClassReady`
            if class.metadata.deletion_timestamp != metadata.deletion_timestamp {
                self.changes.node_classes.insert(name.to_string());
            }
            class.metadata = metadata.clone();
        }
    }

    /// A NodeOverlay was created or changed.
    pub(crate) fn apply_node_overlay(&mut self, overlay: kerf_api::NodeOverlay) {
        self.generation += 1;
        self.catalog_generation += 1;
        self.changes.node_overlays = true;
        self.changes.disruption = true;
        let name = overlay.metadata.name.clone().unwrap_or_default();
        self.node_overlays.insert(name, overlay);
    }

    /// A NodeOverlay is gone.
    pub(crate) fn delete_node_overlay(&mut self, name: &str) {
        if self.node_overlays.remove(name).is_some() {
            self.generation += 1;
            self.catalog_generation += 1;
            self.changes.node_overlays = true;
            self.changes.disruption = true;
        }
    }

    /// The instance types a node class can launch changed.
    pub(crate) fn set_instance_types(&mut self, class: &str, types: Arc<[InstanceTypeOption]>) {
        self.generation += 1;
        self.catalog_generation += 1;
        // NodeClaims read before their class's types (another autoscaler's, or after a
        // restart) were priced at nothing: price them now, or consolidation takes them for free
        for c in self
            .nodeclaims
            .values_mut()
            .filter(|c| c.node_class == class)
        {
            if let Some(l) = c.launched.as_mut().filter(|l| l.price_per_hour == 0.0) {
                let offering = types
                    .iter()
                    .find(|t| t.name == l.instance_type)
                    .and_then(|t| {
                        t.offerings.iter().find(|o| {
                            o.zone == l.zone && o.capacity_type == l.capacity_type.as_str()
                        })
                    });
                if let Some(o) = offering {
                    l.price_per_hour = o.price_per_hour;
                }
            }
        }
        self.instance_types.insert(class.to_string(), types);
        self.changes.disruption = true;
    }

    /// A DaemonSet's pod template, by `namespace/name`.
    pub(crate) fn apply_daemonset(&mut self, key: String, template: Pod) {
        self.generation += 1;
        self.daemonsets.insert(key, template);
    }

    /// A DaemonSet is gone.
    pub(crate) fn delete_daemonset(&mut self, key: &str) {
        self.generation += 1;
        self.daemonsets.remove(key);
    }

    /// A PodDisruptionBudget was created or changed.
    pub(crate) fn apply_pdb(&mut self, key: String, pdb: PodDisruptionBudget) {
        self.generation += 1;
        self.pdbs.insert(key, pdb);
        self.changes.disruption = true;
    }

    /// A PodDisruptionBudget is gone.
    pub(crate) fn delete_pdb(&mut self, key: &str) {
        self.generation += 1;
        self.pdbs.remove(key);
        self.changes.disruption = true;
    }

    /// A node class is gone.
    pub(crate) fn delete_node_class(&mut self, name: &str) {
        self.class_gaps.remove(name);
        self.generation += 1;
        self.catalog_generation += 1;
        self.node_classes.remove(name);
        self.changes.node_classes.insert(name.to_string());
    }

    /// A NodeClaim was created or changed.
    pub(crate) fn apply_nodeclaim(&mut self, name: String, claim: ClaimRecord) {
        self.generation += 1;
        self.changes.lifecycle.insert(name.clone());
        self.changes.disruption = true;
        self.nodeclaims.insert(name.clone(), claim);
        self.link_node(&name);
    }

    /// Joins a launched NodeClaim with its node when the node was seen first (a watch
    /// delivers them in any order, and a restart reads both back).
    pub(crate) fn link_node(&mut self, claim: &str) {
        let Some(c) = self.nodeclaims.get_mut(claim) else {
            return;
        };
        let Some(provider_id) = c
            .launched
            .as_ref()
            .map(|l| l.provider_id.as_str())
            .filter(|id| !id.is_empty())
        else {
            return;
        };
        if let Some((name, node)) = self
            .nodes
            .iter_mut()
            .find(|(_, n)| n.nodeclaim.is_none() && n.provider_id == provider_id)
        {
            node.nodeclaim = Some(claim.to_string());
            c.node = Some(name.clone());
            self.changes.lifecycle.insert(claim.to_string());
        }
    }

    /// A NodeClaim is gone: pods nominated to it want capacity again.
    pub(crate) fn delete_nodeclaim(&mut self, name: &str) {
        self.generation += 1;
        if self.nodeclaims.remove(name).is_none() {
            return;
        }
        self.changes.disruption = true;
        for p in self.pods.values_mut() {
            if p.nominated.as_deref() == Some(name) {
                p.nominated = None;
                if p.wants_capacity() {
                    self.changes.provisionable = true;
                }
            }
        }
    }

    /// A Node registered (or changed). It joins the NodeClaim with the same provider id.
    pub(crate) fn apply_node(&mut self, name: String, mut node: NodeRecord, now: Duration) {
        self.generation += 1;
        node.nodeclaim = self
            .nodeclaims
            .iter()
            .find(|(_, c)| {
                c.launched
                    .as_ref()
                    .is_some_and(|l| l.provider_id == node.provider_id)
            })
            .map(|(k, _)| k.clone());
        if let Some(old) = self.nodes.get(&name) {
            // a Node's creation time does not change (nor does the time first seen stand in
            // for it)
            node.created = old.created;
            node.requests = old.requests.clone();
            node.last_pod_event = old.last_pod_event;
            node.marked_consolidatable = old.marked_consolidatable;
            node.tainting = old.tainting;
            node.untainting = old.untainting;
        } else {
            node.requests = Resources::default();
            node.last_pod_event = now;
            for p in self.pods.values() {
                if p.node.as_deref() == Some(name.as_str()) {
                    node.requests.add(&p.requests);
                }
            }
        }
        if let Some(c) = node.nodeclaim.as_ref() {
            if let Some(claim) = self.nodeclaims.get_mut(c) {
                claim.node = Some(name.clone());
            }
            self.changes.lifecycle.insert(c.clone());
        }
        self.changes.disruption = true;
        self.changes.nodes_filled.insert(name.clone());
        self.nodes.insert(name, node);
    }

    /// A Node is gone: the pods on it have no node any more.
    pub(crate) fn delete_node(&mut self, name: &str, now: Duration) {
        self.generation += 1;
        let Some(node) = self.nodes.remove(name) else {
            return;
        };
        self.changes.disruption = true;
        if let Some(c) = node.nodeclaim.and_then(|c| self.nodeclaims.get_mut(&c)) {
            c.node = None;
        }
        for k in self.pods_where(|p| p.node.as_deref() == Some(name)) {
            self.unbind_pod(&k, now);
        }
    }

    /// The largest capacity, resource by resource, among a NodeClaim's instance types.
    fn largest_option(&self, claim: &ClaimRecord) -> Resources {
        let Some(options) = self.instance_types.get(&claim.node_class) else {
            return Resources::default();
        };
        options
            .iter()
            .filter(|o| claim.instance_types.contains(&o.name))
            .fold(Resources::default(), |m, o| m.max(&o.capacity))
    }

    /// How many nodes a NodePool has, counted against its `limits.nodes` as its usage is
    /// against its other limits: NodeClaims launched or in flight whose deletion is not
    /// stored, and nodes carrying its label without a NodeClaim.
    pub fn pool_nodes(&self, pool: &str) -> i64 {
        let claims = self
            .nodeclaims
            .values()
            .filter(|c| c.node_pool == pool && !c.deletion_stored)
            .count();
        let bare = self
            .nodes
            .values()
            .filter(|n| {
                n.nodeclaim.is_none()
                    && n.labels.get(kerf_api::labels::NODEPOOL).map(String::as_str) == Some(pool)
            })
            .count();
        i64::try_from(claims + bare).unwrap_or(i64::MAX)
    }

    /// What the NodePool's nodes whose deletion is not stored have, counted against its
    /// limits.
    pub fn pool_usage(&self, pool: &str) -> Resources {
        let mut usage = Resources::default();
        // a NodeClaim whose deletion is stored counts no more: Karpenter's cluster state
        // leaves nodes marked for deletion out of a NodePool's resources and its scheduler
        // counts only active nodes against the limits (swarm seed 326309)
        let live = self.nodeclaims.values().filter(|c| !c.deletion_stored);
        for c in live.filter(|c| c.node_pool == pool) {
            match &c.launched {
                Some(l) => usage.add(&l.capacity),
                // created and not launched yet (another controller's launch in the same
                // instant, swarm seed 40907): the largest type it may become, as
                // Karpenter's scheduler reserves for a NodeClaim it plans
                None => usage.add(&self.largest_option(c)),
            }
        }
        // a node carrying the NodePool's label without a NodeClaim (its NodeClaim deleted
        // from under it, or a node listed in `kerf schedule`'s manifests) is the pool's too
        for n in self.nodes.values().filter(|n| {
            n.nodeclaim.is_none()
                && n.labels.get(kerf_api::labels::NODEPOOL).map(String::as_str) == Some(pool)
        }) {
            usage.add(&n.capacity);
        }
        usage
    }
}

/// Writes a pod's `PodScheduled` condition as kube-scheduler does: `True` once bound,
/// `False` with reason `Unschedulable` when no node fits it (what makes it Karpenter's).
pub fn set_pod_scheduled(pod: &mut Pod, status: &str, reason: Option<&str>) {
    let st = pod.status.get_or_insert_with(Default::default);
    let conditions = st.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "PodScheduled");
    conditions.push(PodCondition {
        type_: "PodScheduled".into(),
        status: status.into(),
        reason: reason.map(str::to_string),
        ..Default::default()
    });
}
