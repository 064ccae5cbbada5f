//! Kerf's controllers as one sans-IO state machine, written once and driven by every shell.
//!
//! The shell hands what it observed, and every answer to an action, to
//! [`Controllers::observe`], then calls [`Controllers::poll`] with the time; the controllers
//! answer with [`Action`]s to carry out and [`Controllers::next_wakeup`] says when to poll
//! again if nothing else happens. The controllers apply their own writes (taints,
//! NodeClaims created, nominations) to their view at once, as Karpenter's `state.Cluster`
//! does; deletions take effect when the shell reports them done.
//!
//! Each controller is its own type and owns its state; its methods work over the `Desk`
//! (`controllers/desk.rs`) every controller shares: the cluster state, the settings, the
//! timers, what is sent. `Controllers` is the router: it hands each controller what it needs
//! of the others as arguments, and its own methods, kept beside the controller they start
//! from, are the steps that move two controllers at once.
//!
//! | controller (Karpenter's name) | here |
//! |---|---|
//! | `provisioning` | [`provisioning`]: batch window, solve, NodeClaims |
//! | `nodeclaim/lifecycle`, `nodeclaim/garbagecollection` | [`lifecycle`] |
//! | `disruption` (with drift and consolidation marking) | [`disruption`] |
//! | `node/termination`, `nodeclaim/expiration` | [`termination`] |
//! | `interruption` | [`interruption`] |

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::Duration;

use kerf_api::{NodeClaim, Taint};
use kerf_scheduling::InstanceTypeOption;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use crate::cluster::Cluster;
use crate::unavailable::UnavailableOfferings;
use desk::Desk;
use kerf_api::nodepool::NodePool;

mod blockers;
mod buffers;
mod consistency;
pub mod deletion_cost;
mod desk;
pub mod disruption;
pub mod explain;
pub mod health;
pub mod interruption;
pub mod lifecycle;
pub mod node_classes;
pub mod provisioning;
pub mod reboot;
mod registration;
mod repeats;
pub use repeats::{EventIdentity, RepeatKey};
mod rehearsal;
mod reservations;
mod solving;
pub mod static_capacity;
pub mod termination;
mod zonal_shift;

/// Knobs a shell sets once, Karpenter's settings among them.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Seconds from the Unix epoch to the shell's time zero (budget schedules are UTC).
    pub epoch_unix: u64,
    /// Provisioning waits this long after the last new pending pod (Karpenter: 1 s).
    pub batch_idle: Duration,
    /// … and at most this long after the first (Karpenter: 10 s).
    pub batch_max: Duration,
    /// A launched NodeClaim whose node has not registered by then is deleted (15 min).
    pub registration_ttl: Duration,
    /// Karpenter's `SpotToSpotConsolidation` feature gate.
    pub spot_to_spot: bool,
    /// Karpenter's `NodeRepair` feature gate: replace nodes unhealthy past a toleration.
    pub node_repair: bool,
    /// The cloud provider's repair policies (its `RepairPolicies()`).
    pub repair_policies: &'static [crate::repair::RepairPolicy],
    /// Karpenter's `StaticCapacity` feature gate: keep static NodePools at their replicas.
    pub static_capacity: bool,
    /// Karpenter's `NodeOverlay` feature gate: lay NodeOverlays over the instance types.
    pub node_overlay: bool,
    /// Karpenter's `CapacityBuffer` feature gate: keep the spare capacity CapacityBuffers
    /// describe ([`buffers`]).
    pub capacity_buffer: bool,
    /// Karpenter's `PodDeletionCostManagement` feature gate: rank nodes into their
    /// ReplicaSet pods' `controller.kubernetes.io/pod-deletion-cost` ([`deletion_cost`]) and
    /// stop reading that annotation as an eviction cost.
    pub pod_deletion_cost: bool,
    /// Karpenter's `TerminateFirstDrift` feature gate: a drifted node of a static NodePool at
    /// its node limit is deleted before its replacement exists.
    pub terminate_first_drift: bool,
    /// Karpenter's `TerminateFirstRepair` feature gate: an unhealthy node of a static
    /// NodePool at its node limit is deleted before its replacement exists.
    pub terminate_first_repair: bool,
    /// Keep each node class's status and finalizer ([`node_classes`]): a cloud that resolves
    /// node classes (AWS, the simulated one) turns it on; kwok's classes have no status.
    pub node_class_status: bool,
    /// The cluster's CA bundle (base64), part of the `ec2nodeclass-hash` as Karpenter's
    /// AWS provider computes it; empty where there is none (kwok, the simulator).
    pub cluster_ca_bundle: String,
    /// How long an insufficient-capacity error keeps its offerings out (Karpenter: 3 min).
    pub unavailable_offerings_ttl: Duration,
    /// Karpenter's `PREFERENCE_POLICY`: preferences respected (relaxed one by one) or
    /// ignored, in provisioning and in consolidation's simulations alike.
    pub preference_policy: kerf_scheduling::Preferences,
    /// Karpenter's `MIN_VALUES_POLICY`: unmet minValues refuse the NodePool or are lowered.
    pub min_values_policy: kerf_scheduling::MinValues,
    /// The least a consolidation move must save (Kerf's; zero, as Karpenter, by default).
    pub min_savings: crate::disruption::search::MinSavings,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            epoch_unix: 0,
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            registration_ttl: Duration::from_secs(15 * 60),
            spot_to_spot: false,
            node_repair: false,
            repair_policies: &crate::repair::AWS_POLICIES,
            static_capacity: false,
            node_overlay: false,
            capacity_buffer: false,
            pod_deletion_cost: false,
            terminate_first_drift: false,
            terminate_first_repair: false,
            node_class_status: false,
            cluster_ca_bundle: String::new(),
            unavailable_offerings_ttl: crate::unavailable::TTL,
            preference_policy: kerf_scheduling::Preferences::Respect,
            min_values_policy: kerf_scheduling::MinValues::Strict,
            min_savings: crate::disruption::search::MinSavings::default(),
        }
    }
}

/// A log record's level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Something happened.
    Info,
    /// Something failed.
    Error,
}

/// A log line in Karpenter's words: shells stamp the time and print it as JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRecord {
    /// Level.
    pub level: Level,
    /// Karpenter's controller name (`provisioner`, `nodeclaim.lifecycle`, …).
    pub controller: &'static str,
    /// Karpenter's message text.
    pub message: &'static str,
    /// Structured fields (`{"NodeClaim": {"name": …}}`).
    pub fields: Value,
}

impl LogRecord {
    /// The record as the JSON line Karpenter prints: `level`, `time`, `logger`, `message`,
    /// `controller`, then the fields.
    pub fn to_json(&self, time: &str) -> Value {
        let mut record = serde_json::Map::new();
        let level = match self.level {
            Level::Info => "INFO",
            Level::Error => "ERROR",
        };
        record.insert("level".into(), level.into());
        record.insert("time".into(), time.into());
        record.insert("logger".into(), "controller".into());
        record.insert("message".into(), self.message.into());
        record.insert("controller".into(), self.controller.into());
        if let Value::Object(extra) = &self.fields {
            record.extend(extra.clone());
        }
        Value::Object(record)
    }
}

/// The kind of object a Kubernetes Event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventObject {
    /// A Pod (namespaced).
    Pod,
    /// A Node.
    Node,
    /// A NodeClaim.
    NodeClaim,
    /// A NodePool.
    NodePool,
    /// An EC2NodeClass.
    NodeClass,
    /// A NodeOverlay.
    NodeOverlay,
    /// A CapacityBuffer (namespaced).
    CapacityBuffer,
}

impl EventObject {
    /// The object's `apiVersion` and `kind`.
    pub fn api_version_kind(self) -> (&'static str, &'static str) {
        match self {
            EventObject::Pod => ("v1", "Pod"),
            EventObject::Node => ("v1", "Node"),
            EventObject::NodeClaim => ("karpenter.sh/v1", "NodeClaim"),
            EventObject::NodePool => ("karpenter.sh/v1", "NodePool"),
            EventObject::NodeClass => ("karpenter.k8s.aws/v1", "EC2NodeClass"),
            EventObject::NodeOverlay => ("karpenter.sh/v1alpha1", "NodeOverlay"),
            EventObject::CapacityBuffer => ("autoscaling.x-k8s.io/v1beta1", "CapacityBuffer"),
        }
    }
}

/// A Kubernetes Event in Karpenter's words, what `kubectl describe` shows under the object.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// What the event is about.
    pub kind: EventObject,
    /// Its name (`namespace/name` for a Pod).
    pub name: String,
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// Karpenter's reason (`Nominated`, `DisruptionTerminating`, …; a condition's type for
    /// a condition's transition).
    pub reason: std::borrow::Cow<'static, str>,
    /// Karpenter's message.
    pub message: String,
}

/// Identical events about one object within this long are sent once, as Karpenter's
/// recorder deduplicates them.
pub const EVENT_DEDUPE: Duration = Duration::from_secs(120);
/// How many events' dedupe times are kept before the first look for those past every window.
const EVENTS_KEPT: usize = 4096;

/// What the controllers ask a shell to do.
#[derive(Clone, Debug)]
#[must_use = "an action the shell drops is a decision never carried out"]
pub enum Action {
    /// Print a log line.
    Log(LogRecord),
    /// Record a Kubernetes Event.
    Event(Event),
    /// Create this NodeClaim object (the controllers already track it).
    CreateNodeClaim(Box<NodeClaim>),
    /// Ask the cloud for the NodeClaim's instance; answer with [`crate::observe::Observation::Launched`] or
    /// another of the launch's observations ([`crate::observe::Observation::LaunchFailed`], …).
    Launch {
        /// The NodeClaim.
        nodeclaim: String,
        /// What the cloud needs to launch it, as the controllers saw it when they asked.
        request: Box<LaunchRequest>,
    },
    /// Add a taint to a node.
    Taint {
        /// The node.
        node: String,
        /// The taint.
        taint: Taint,
        /// For a disruption command's mark (Karpenter's MarkDisrupted): the instant by which
        /// it must be stored, while the budgets that allowed the command still hold. A mark
        /// refused, or not written by then, is not tried again but told back
        /// ([`crate::observe::Observation::MarkRefused`]), as Karpenter gives a command up
        /// when it cannot taint its candidates: written later, after an outage or a held
        /// Lease, it could start a disruption inside a budget window that allows none.
        by: Option<Duration>,
    },
    /// Add or overwrite these labels on a node: a registering node gets its NodeClaim's
    /// (instance type, zone, capacity type, NodePool, template labels) that its kubelet could
    /// not know, as Karpenter's registration syncs them.
    LabelNode {
        /// The node.
        node: String,
        /// The labels.
        labels: BTreeMap<String, String>,
        /// Annotations to add: the NodeClaim's, once, when its node registers (as Karpenter
        /// copies them then and never again).
        annotations: BTreeMap<String, String>,
        /// Add Karpenter's `karpenter.sh/termination` finalizer too (at registration), so
        /// that a deletion of the Node waits for its drain.
        finalizer: bool,
    },
    /// Remove the taints with this key from a node.
    RemoveTaint {
        /// The node.
        node: String,
        /// The taint key.
        key: String,
    },
    /// Voluntary disruption of these nodes starts (budgets apply): Karpenter's
    /// `disrupting node(s)` event.
    Disrupting {
        /// Why.
        reason: kerf_api::nodepool::DisruptionReason,
        /// The nodes.
        nodes: Vec<String>,
    },
    /// Evict a pod through the Eviction API (PodDisruptionBudgets apply).
    Evict {
        /// `namespace/name`.
        pod: String,
    },
    /// Delete a pod outright, past PodDisruptionBudgets and do-not-disrupt: its own grace
    /// period would outlast its node's termination time.
    DeletePod {
        /// `namespace/name`.
        pod: String,
        /// The grace period it is given: what is left until the node's termination time,
        /// at least a second (none: the pod's own).
        grace_seconds: Option<i64>,
    },
    /// Terminate the cloud instance.
    DeleteInstance {
        /// The NodeClaim it was launched for.
        nodeclaim: String,
        /// Its provider id.
        provider_id: String,
    },
    /// Delete the Node object; report it with [`Cluster::delete_node`].
    DeleteNode {
        /// The node.
        node: String,
    },
    /// Set or remove annotations of the NodeClaim (its termination deadline,
    /// `karpenter.sh/nodeclaim-termination-timestamp`, and a reboot's drain bound and boot
    /// id, which a restart reads back).
    AnnotateNodeClaim {
        /// The NodeClaim.
        nodeclaim: String,
        /// The annotations: a value to set, or `None` to remove.
        annotations: BTreeMap<String, Option<String>>,
    },
    /// Ask the cloud to reboot the NodeClaim's instance in place; answer with
    /// [`crate::observe::Observation::RebootAnswered`].
    Reboot {
        /// The NodeClaim.
        nodeclaim: String,
        /// Its Node.
        node: String,
        /// Its provider id.
        provider_id: String,
        /// The same for every try of one reboot (a cloud may use it to make the call
        /// idempotent; kwok's reboot writes it into the node's boot id).
        operation_id: String,
    },
    /// Set or remove labels of a node (`karpenter.sh/initialized` off while it reboots; a
    /// node out of its capacity reservation relabelled `on-demand`).
    RelabelNode {
        /// The node.
        node: String,
        /// The labels: a value to set, or `None` to remove.
        labels: BTreeMap<String, Option<String>>,
    },
    /// Set or remove labels of the NodeClaim (one out of its capacity reservation
    /// relabelled `on-demand`).
    RelabelNodeClaim {
        /// The NodeClaim.
        nodeclaim: String,
        /// The labels: a value to set, or `None` to remove.
        labels: BTreeMap<String, Option<String>>,
    },
    /// Start deleting the NodeClaim object (its `karpenter.sh/termination` finalizer keeps
    /// it until [`Action::ReleaseNodeClaim`]).
    DeleteNodeClaim {
        /// The NodeClaim.
        nodeclaim: String,
    },
    /// Set a ReplicaSet pod's `controller.kubernetes.io/pod-deletion-cost` to `cost`, or
    /// remove it (`None`): Karpenter's `PodDeletionCostManagement`
    /// ([`deletion_cost`]). The shell counts the outcome into
    /// `karpenter_pod_deletion_cost_pod_annotation_writes_total`.
    AnnotatePodDeletionCost {
        /// `namespace/name`.
        pod: String,
        /// The value, or `None` to remove it.
        cost: Option<i32>,
    },
    /// Remove the NodeClaim's finalizer: the object goes; report it with
    /// [`Cluster::delete_nodeclaim`].
    ReleaseNodeClaim {
        /// The NodeClaim.
        nodeclaim: String,
    },
    /// Write the NodePool's status from [`crate::objects::nodepool_status`].
    PatchNodePoolStatus {
        /// The NodePool.
        node_pool: String,
        /// The status.
        status: Box<kerf_api::nodepool::NodePoolStatus>,
    },
    /// Write a CapacityBuffer's status ([`buffers`]).
    PatchCapacityBufferStatus {
        /// The buffer, `namespace/name`.
        buffer: String,
        /// The status, conditions without transition times.
        status: Box<kerf_api::capacitybuffer::CapacityBufferStatus>,
    },
    /// Write a NodeOverlay's status (whether it applies, or conflicts).
    PatchNodeOverlayStatus {
        /// The NodeOverlay.
        node_overlay: String,
        /// The status.
        status: Box<kerf_api::nodeoverlay::NodeOverlayStatus>,
    },
    /// Ask the cloud what a node class can launch and answer with
    /// [`crate::observe::Observation::InstanceTypes`]: a NodePool names a class whose types
    /// are not known yet, the class changed, or the cloud's offerings did.
    ListInstanceTypes {
        /// The node class.
        node_class: String,
        /// The class as the controllers hold it (none when no such class was seen: the
        /// cloud's defaults).
        spec: Option<Box<kerf_api::EC2NodeClass>>,
    },
    /// Resolve a node class's selector terms (subnets, security groups, images, capacity
    /// reservations) and instance profile, and answer with
    /// [`crate::observe::Observation::NodeClassResolved`]: at every
    /// [`node_classes::NODE_CLASS_INTERVAL`] and when the class changes.
    ResolveNodeClass {
        /// The node class.
        node_class: String,
        /// The class as the controllers hold it.
        class: Box<kerf_api::EC2NodeClass>,
        /// What each NodePool of the class admits: its requirements, and its template's labels
        /// as `In` requirements (the cloud tries a launch of an instance type one of them
        /// admits, as Karpenter's authorization check does).
        node_pools: Vec<Vec<kerf_api::common::NodeSelectorRequirementWithMinValues>>,
    },
    /// Write a node class's resolved status.
    PatchNodeClassStatus {
        /// The node class.
        node_class: String,
        /// The status, conditions with their transition times and observed generation.
        status: Box<kerf_api::ec2nodeclass::EC2NodeClassStatus>,
    },
    /// Put [`node_classes::TERMINATION_FINALIZER`] on a node class, on the version held.
    AddNodeClassFinalizer {
        /// The node class.
        node_class: String,
        /// The class as the controllers hold it (its finalizers and resource version).
        class: Box<kerf_api::EC2NodeClass>,
    },
    /// A deleted node class no NodeClaim uses any more: delete what the cloud made for it
    /// (launch templates, the instance profile made for its role), then take
    /// [`node_classes::TERMINATION_FINALIZER`] off. A failure is tried again at the next
    /// round.
    FinalizeNodeClass {
        /// The node class.
        node_class: String,
        /// The class as the controllers hold it.
        class: Box<kerf_api::EC2NodeClass>,
    },
    /// List the cloud's instances of this cluster and answer with
    /// [`crate::observe::Observation::Instances`]: garbage collection's regular look, every
    /// [`GARBAGE_COLLECTION_INTERVAL`].
    ListInstances,
    /// Write the NodeClaim's status (provider id, node, capacity, conditions) and the labels
    /// its launch gave it, both as they were when the write was asked for: a shell writes
    /// them as they are (keeping each condition's transition time where its status stayed).
    PatchNodeClaimStatus {
        /// The NodeClaim.
        nodeclaim: String,
        /// Its status ([`crate::objects::nodeclaim_status`]).
        status: Box<kerf_api::nodeclaim::NodeClaimStatus>,
        /// The instance's labels once launched ([`crate::objects::launched_labels`]), else
        /// none.
        labels: BTreeMap<String, String>,
    },
}

/// Everything a cloud needs to launch a NodeClaim's instance, so that no shell reads the
/// controllers' state back: the NodeClaim (requirements, instance types, the prices Kerf gave
/// its offerings, taints), its NodePool and node class, and the offerings known unavailable.
#[derive(Clone, Debug)]
pub struct LaunchRequest {
    /// The NodeClaim as the controllers hold it.
    pub claim: crate::cluster::ClaimRecord,
    /// Its NodePool (labels for the node, kubelet settings).
    pub node_pool: kerf_api::NodePool,
    /// Its node class, when it has one (images, subnets, user data).
    pub node_class: Option<kerf_api::EC2NodeClass>,
    /// The unavailable-offerings memory when the launch was asked for, and that instant.
    pub(crate) unavailable: UnavailableOfferings,
    pub(crate) at: Duration,
}

impl LaunchRequest {
    /// Whether an offering (capacity type, instance type, zone) may be asked for: not among
    /// those a recent shortage marked unavailable.
    pub fn available(&self, capacity_type: &str, instance_type: &str, zone: &str) -> bool {
        !(self.unavailable).is_unavailable(capacity_type, instance_type, zone, self.at)
    }
}

/// Work the controllers scheduled for later. Timers due at the same instant fire in this
/// order: forceful lifecycle work (expiry, registration timeouts) first, so a disruption
/// decision or validation at that instant counts the nodes they started deleting against
/// its budgets.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Expire(String),
    RegistrationTimeout(String),
    NominationExpiry(String),
    Batch,
    Pass,
    Validate,
    Drain(String),
    /// A NodeClaim whose finalizer was released is looked at again
    /// ([`termination::RELEASE_RETRY`]).
    Release(String),
    /// A command under way (by its id) whose replacements have not initialized.
    ReplacementTimeout(String),
    RetryPending,
    Relaunch(String),
    LaunchTimeout(String),
    /// A static NodePool short of its replicas looks again (what was in the way may pass).
    StaticCapacity,
    /// Garbage collection compares the cloud's instances with the NodeClaims.
    GarbageCollect,
    /// Every node class is resolved again ([`node_classes::NODE_CLASS_INTERVAL`]).
    ResolveNodeClasses,
    /// The nodes are ranked into their pods' deletion costs
    /// ([`deletion_cost::DELETION_COST_INTERVAL`]).
    DeletionCost,
    /// A NodeClaim whose node falls short of its launch is looked at again
    /// ([`consistency::SCAN_PERIOD`]).
    ConsistencyScan(String),
    /// A NodeClaim's reboot for repair is looked at ([`reboot::REBOOT_POLL`]).
    Reboot(String),
    /// The CapacityBuffers are placed again ([`buffers::BUFFER_INTERVAL`]).
    Buffers,
}

/// How often garbage collection compares the cloud's instances with the NodeClaims.
pub const GARBAGE_COLLECTION_INTERVAL: Duration = Duration::from_secs(30);

/// A node class's instance types as the solver gets them, unavailable offerings marked.
struct TypeOptions {
    /// The cloud's instance types they were made from: new ones (a reservation's room, a
    /// refreshed catalog) make them anew.
    base: Arc<[InstanceTypeOption]>,
    /// The unavailable-offerings generation they were checked against.
    generation: u64,
    /// The (type, offering) positions marked unavailable.
    marked: Vec<(usize, usize)>,
    /// `base` with those offerings marked; `base` itself when none is.
    options: Arc<[InstanceTypeOption]>,
}

/// The last provisioning solve that placed none of its pods: a fingerprint of what it read,
/// what it logged and the events it had for the pods.
struct Unplaced {
    inputs: u64,
    logs: Vec<Action>,
    events: Vec<Event>,
}

/// The NodePool and NodeOverlay statuses as last written, so only changes are written.
#[derive(Default)]
struct Statuses {
    pools: BTreeMap<String, kerf_api::nodepool::NodePoolStatus>,
    overlays: BTreeMap<String, kerf_api::nodeoverlay::NodeOverlayStatus>,
}

/// The controllers, each with its own state, behind one router ([`Controllers::observe`],
/// [`Controllers::poll`]), and the cluster state they share.
pub struct Controllers {
    /// What every controller works through: the cluster, the clock, the outbox.
    pub(crate) desk: Desk,
    /// What the provisioner keeps between batches.
    pub(crate) provisioning: provisioning::Provisioner,
    /// What the NodeClaim lifecycle keeps between cloud answers.
    pub(crate) lifecycle: lifecycle::Lifecycles,
    /// Each NodeClaim's node's shortfalls against its launch, as last said.
    consistency: consistency::ConsistencyChecks,
    /// What the disruption controller keeps between passes.
    disruption: disruption::Disruptions,
    /// What node repair keeps between passes.
    health: health::Repairs,
    /// What reboots for repair keep between looks.
    pub(crate) reboot: reboot::RebootCalls,
    /// What termination keeps between drains.
    pub(crate) termination: termination::Terminations,
    /// What static NodePools' controller keeps between polls.
    static_capacity: static_capacity::StaticPools,
    /// What the pod deletion cost ranking keeps between minutes.
    deletion_cost: deletion_cost::DeletionCosts,
    /// What the CapacityBuffer controller keeps between passes.
    buffers: buffers::BufferPlacement,
    /// What the node class status controller keeps between answers.
    pub(crate) node_classes: node_classes::NodeClassStatuses,
    /// The interruption controller's: unhealthy instances already counted.
    pub(crate) interruption: interruption::Interruptions,
    /// The zonal shift controller's: the zones the cloud last said are shifted away from.
    zonal_shifts: zonal_shift::ZonalShifts,
    /// Each NodePool's recent registrations, for its `NodeRegistrationHealthy` condition.
    registration: registration::Registrations,
    /// The NodePool and NodeOverlay statuses last written.
    statuses: Statuses,
}

impl Controllers {
    /// Controllers over an empty cluster; `seed` drives generated NodeClaim names.
    pub fn new(settings: Settings, seed: u64) -> Controllers {
        let unavailable = UnavailableOfferings::with_ttl(settings.unavailable_offerings_ttl);
        // garbage collection and node class resolution look at once, then every interval;
        // so does the pod deletion cost ranking, with its gate on
        let mut timers = BTreeSet::from([
            (Duration::ZERO, Timer::GarbageCollect),
            (Duration::ZERO, Timer::ResolveNodeClasses),
        ]);
        if settings.pod_deletion_cost {
            timers.insert((Duration::ZERO, Timer::DeletionCost));
        }
        let mut cluster = Cluster::default();
        cluster.epoch = Duration::from_secs(settings.epoch_unix);
        Controllers {
            provisioning: provisioning::Provisioner::new(&settings),
            desk: Desk {
                cluster,
                settings,
                rng: ChaCha8Rng::seed_from_u64(seed),
                timers,
                actions: Vec::new(),
                unavailable,
                events_sent: HashMap::default(),
                events_pruned: 0,
                activity: 0,
                marks: 0,
                metrics: crate::metrics::Metrics::new(),
                unsynced_since: None,
                catalog: RefCell::default(),
                type_options: HashMap::default(),
                types_asked: BTreeSet::new(),
                overlay_cache: None,
                disruption_reasons: HashMap::default(),
            },
            lifecycle: lifecycle::Lifecycles::default(),
            consistency: consistency::ConsistencyChecks::default(),
            disruption: disruption::Disruptions::default(),
            health: health::Repairs::default(),
            reboot: reboot::RebootCalls::default(),
            termination: termination::Terminations::default(),
            static_capacity: static_capacity::StaticPools::default(),
            deletion_cost: deletion_cost::DeletionCosts::default(),
            buffers: buffers::BufferPlacement::default(),
            node_classes: node_classes::NodeClassStatuses::default(),
            interruption: interruption::Interruptions::default(),
            zonal_shifts: Default::default(),
            registration: registration::Registrations::default(),
            statuses: Statuses::default(),
        }
    }

    /// Karpenter's metrics at `now` as OpenMetrics text, with the shell's own registries.
    pub fn render_metrics(
        &mut self,
        now: Duration,
        extra: &[&prometheus_client::registry::Registry],
    ) -> String {
        let view = crate::metrics::StateView {
            cluster: &self.desk.cluster,
            unavailable: &self.desk.unavailable,
            eligible: self.disruption.eligible(),
            budgets: self.disruption.budget_readings(),
            scheduling: &self.provisioning.reading,
            unsynced_since: self.unsynced_since(),
            now,
        };
        self.desk.metrics.render(&view, extra)
    }

    /// A handle on Karpenter's metrics, for a shell to count its cloud calls, interruption
    /// messages and launch failures into.
    pub fn metrics(&self) -> crate::metrics::Recorder {
        self.desk.metrics.recorder()
    }

    /// Since when the shell's watches have not all been listed (the first listing, or a
    /// relist), or none while they are: Karpenter's cluster-state-synced gauges, and work that
    /// must not rank a partial view (pod deletion costs) waits meanwhile.
    pub fn watches_unsynced_since(&mut self, since: Option<Duration>) {
        self.desk.unsynced_since = since;
    }

    /// Since when the cluster state has not been synced, as Karpenter's gauges count it: a
    /// watch not listed yet, or a NodeClaim not launched yet (the earlier of the two).
    fn unsynced_since(&self) -> Option<Duration> {
        match (
            self.desk.unsynced_since,
            self.desk.cluster.launching_since(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Starts deleting a NodeClaim at `now`, as `kubectl delete nodeclaim` does: its node is
    /// tainted and drained first, if it has one.
    pub fn delete_nodeclaim(&mut self, name: &str, now: Duration) {
        self.desk.delete_nodeclaim(name, now);
    }

    /// What the disruption controller reads of the others: the provisioner's pods left
    /// pending, the buffers' held room, repair's nodes due, and `gathered` for the blockers.
    fn disruption_facts<'a>(
        &'a self,
        gathered: &'a blockers::Gathered<'a>,
    ) -> disruption::Facts<'a> {
        disruption::Facts {
            gathered,
            left_pending: &self.provisioning.left_pending,
            held: &self.buffers.held,
            repairs: &self.health.repairs,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.desk.settings
    }

    /// The cluster as the controllers hold it, for shells, `explain` and checkers to read:
    /// it changes only through [`Controllers::observe`] and the controllers' own work.
    pub fn cluster(&self) -> &Cluster {
        &self.desk.cluster
    }

    /// The simulator's planted-bug tests only (feature `plant`): writes past the cluster
    /// state's change tracking.
    #[cfg(feature = "plant")]
    pub fn untracked_writes(&mut self) -> crate::cluster::UntrackedWrites<'_> {
        self.desk.cluster.untracked_writes()
    }

    /// Runs everything due at `now` and everything the cluster's changes call for; returns
    /// what the shell must do, in order. A shell's `now` never goes back from one call to the
    /// next (this or [`Controllers::observe`]): the core keeps no clock to correct it.
    #[must_use = "the actions are the controllers' decisions: a shell carries every one out"]
    pub fn poll(&mut self, now: Duration) -> Vec<Action> {
        while let Some((at, _)) = self.desk.timers.first()
            && *at <= now
        {
            let (_, timer) = self.desk.timers.pop_first().expect("first exists");
            self.fire(timer, now);
        }
        self.react(now);
        for t in self.desk.cluster.take_pod_transitions() {
            self.desk.count_pod_transition(t, now);
        }
        let actions = std::mem::take(&mut self.desk.actions);
        self.with_final_statuses(actions)
    }

    /// The poll's actions with each NodeClaim's status written once, as it stands at the
    /// poll's end (where its last write was asked for), and neither a status nor a launch for
    /// a NodeClaim gone or being deleted since (its instance would belong to nothing).
    fn with_final_statuses(&self, mut actions: Vec<Action>) -> Vec<Action> {
        actions.retain(|a| match a {
            Action::Launch { nodeclaim, .. } => {
                (self.desk.cluster.nodeclaims.get(nodeclaim)).is_some_and(|c| c.deleting.is_none())
            }
            _ => true,
        });
        let last: BTreeMap<&str, usize> = (actions.iter().enumerate())
            .filter_map(|(i, a)| match a {
                Action::PatchNodeClaimStatus { nodeclaim, .. } => Some((nodeclaim.as_str(), i)),
                _ => None,
            })
            .collect();
        if last.is_empty() {
            return actions;
        }
        let finals: BTreeMap<usize, Option<Action>> = (last.iter())
            .map(|(name, i)| (*i, self.status_patch(name)))
            .collect();
        (actions.into_iter().enumerate())
            .filter_map(|(i, a)| match a {
                Action::PatchNodeClaimStatus { .. } => finals.get(&i).cloned().flatten(),
                other => Some(other),
            })
            .collect()
    }

    /// The write of a NodeClaim's status and launch labels as they stand now.
    fn status_patch(&self, name: &str) -> Option<Action> {
        let record = self.desk.cluster.nodeclaims.get(name)?;
        let beside = crate::objects::ClaimConditions {
            initializing: lifecycle::initializing(&self.desk, record),
            launch_error: self.lifecycle.last_error.get(name).cloned(),
            disruption: (self.desk.reason_of(name).map(|r| r.as_str()))
                .or_else(|| {
                    // a reboot read back after a restart
                    let rebooting = record.reboot.as_ref().is_some_and(|r| r.under_way());
                    rebooting.then_some(kerf_api::nodepool::DisruptionReason::Unhealthy.as_str())
                })
                .map(str::to_string),
            drained: self.termination.drained.get(name).copied(),
            detachment: self.termination.detachment.get(name).copied(),
            inconsistent: self.consistency.short(name),
        };
        Some(Action::PatchNodeClaimStatus {
            nodeclaim: name.to_string(),
            status: Box::new(crate::objects::nodeclaim_status(record, &beside)),
            labels: (record.launched.as_ref())
                .map(crate::objects::launched_labels)
                .unwrap_or_default(),
        })
    }

    /// When [`Controllers::poll`] has work next if nothing changes before.
    pub fn next_wakeup(&self) -> Option<Duration> {
        self.desk.timers.first().map(|(at, _)| *at)
    }

    fn fire(&mut self, timer: Timer, now: Duration) {
        // a regular look that finds nothing changes nothing a disruption pass reads
        if !matches!(
            timer,
            Timer::Pass
                | Timer::GarbageCollect
                | Timer::ResolveNodeClasses
                | Timer::DeletionCost
                | Timer::Release(_)
        ) {
            self.desk.activity += 1;
        }
        match timer {
            Timer::Batch => self.batch_due(now),
            Timer::Pass => self.disruption_pass(now),
            Timer::Validate => self.validate_command(now),
            Timer::Drain(claim) => self.drain(&claim, now),
            Timer::Release(claim) => self.termination.release_again(&mut self.desk, &claim, now),
            Timer::Expire(claim) => termination::expire(&mut self.desk, &claim, now),
            Timer::RegistrationTimeout(claim) => self.registration_timeout(&claim, now),
            Timer::ReplacementTimeout(id) => self.replacement_timeout(&id, now),
            Timer::NominationExpiry(claim) => {
                self.provisioning
                    .nomination_expiry(&mut self.desk, &claim, now)
            }
            Timer::RetryPending => self.provisioning.saw_pending_pod(&mut self.desk, now),
            Timer::Relaunch(claim) => self.lifecycle.relaunch(&mut self.desk, &claim, now),
            Timer::LaunchTimeout(claim) => self.launch_timeout(&claim, now),
            // the poll's reaction reconciles the static NodePools
            Timer::StaticCapacity => {}
            Timer::GarbageCollect => {
                self.lifecycle.list_instances(&mut self.desk, now);
                self.desk
                    .at(now + GARBAGE_COLLECTION_INTERVAL, Timer::GarbageCollect);
            }
            Timer::ResolveNodeClasses => {
                self.node_classes.resolve_node_classes(&mut self.desk, now)
            }
            Timer::DeletionCost => self.rank_deletion_costs(now),
            Timer::ConsistencyScan(claim) => {
                self.consistency
                    .check_consistency(&mut self.desk, &claim, true, now)
            }
            Timer::Reboot(claim) => self.reboot_step(&claim, now),
            Timer::Buffers => {
                if buffers::buffers_due(&mut self.desk, now) {
                    self.provisioning.saw_pending_pod(&mut self.desk, now);
                }
            }
        }
    }

    /// Follows up on what the shell reported since the last poll.
    fn react(&mut self, now: Duration) {
        let changes = std::mem::take(&mut self.desk.cluster.changes);
        if changes.disruption
            || !changes.lifecycle.is_empty()
            || !changes.node_pools.is_empty()
            || !changes.node_classes.is_empty()
        {
            // what follows writes claims directly (drift, lifecycle): a pass that ran
            // before this poll's reaction must not count as having seen it
            self.desk.activity += 1;
        }
        for class in &changes.node_classes {
            self.desk.type_options.remove(class);
        }
        if !changes.node_pools.is_empty() || !changes.node_classes.is_empty() {
            lifecycle::node_pools_changed(&mut self.desk, &changes.node_pools, now);
            self.disruption
                .evaluate_drift(&mut self.desk, &self.lifecycle, now);
        }
        // a block turns expiring (a class change), or a NodeClaim lands in one that already is
        if !changes.node_classes.is_empty() || !changes.lifecycle.is_empty() {
            self.desk.expire_capacity_blocks(now);
        }
        if changes.node_overlays
            || !changes.node_pools.is_empty()
            || !changes.node_classes.is_empty()
        {
            self.write_overlay_statuses(now);
        }
        for claim in &changes.lifecycle {
            self.lifecycle(claim, now);
        }
        self.provisioning
            .recheck_nominations(&mut self.desk, &changes.nodes_filled, now);
        if changes.buffers {
            if self.buffers.buffers_changed(&mut self.desk, now) {
                self.provisioning.saw_pending_pod(&mut self.desk, now);
            }
        } else if self
            .buffers
            .buffer_room_taken(&self.desk, &changes.nodes_filled)
        {
            self.provisioning.saw_pending_pod(&mut self.desk, now);
        }
        if changes.provisionable {
            self.provisioning.saw_pending_pod(&mut self.desk, now);
        }
        self.continue_command(now);
        self.reconcile_static_pools(now);
        let pools_read = !changes.node_pools.is_empty() || !changes.node_classes.is_empty();
        if changes.disruption || !changes.lifecycle.is_empty() || pools_read {
            self.count_node_pools();
        }
        if changes.disruption || !changes.lifecycle.is_empty() {
            self.disruption
                .schedule_pass(&mut self.desk, now + disruption::PASS_INTERVAL);
        }
    }

    /// The cloud says the zones shifted away from are now `zones` (ids): the zonal shift
    /// controller's events for the NodePools they concern are sent.
    pub(crate) fn zonal_shifts_observed(&mut self, zones: BTreeSet<String>, now: Duration) {
        for event in self.zonal_shifts.observed(zones, &self.desk.cluster) {
            self.desk.event(event, now);
        }
    }

    /// A NodeClaim of `pool` registered (`failure` None) or timed out launching or
    /// registering (`failure`: the reason and message to show): the registration health
    /// controller counts it, and the NodePool's status is written if its condition changed.
    pub(super) fn registration_outcome(&mut self, pool: &str, failure: Option<(&str, &str)>) {
        self.registration.outcome(&self.desk.cluster, pool, failure);
        self.count_node_pools();
    }

    /// Writes the status of every NodePool whose count or readiness changed.
    pub(super) fn count_node_pools(&mut self) {
        self.statuses
            .pools
            .retain(|name, _| self.desk.cluster.node_pools.contains_key(name));
        let names: Vec<String> = self.desk.cluster.node_pools.keys().cloned().collect();
        for name in names {
            let (registration, class_generation) =
                self.registration.condition(&self.desk.cluster, &name);
            let status = crate::objects::nodepool_status(
                &self.desk.cluster,
                &name,
                registration,
                class_generation,
                self.desk.settings.node_class_status,
            );
            let fresh = !self.statuses.pools.contains_key(&name)
                && (self.desk.cluster.node_pools.get(&name))
                    .and_then(|np| np.status.as_ref())
                    .is_none_or(|s| s.conditions.is_empty());
            if fresh {
                // a NodePool's conditions start Unknown, as operatorpkg writes them at its
                // first reconcile, so that their first outcome is a transition (an Event)
                self.desk.actions.push(Action::PatchNodePoolStatus {
                    node_pool: name.clone(),
                    status: Box::new(crate::objects::nodepool_status_awaiting(&status)),
                });
            }
            if self.statuses.pools.get(&name) != Some(&status) {
                self.statuses.pools.insert(name.clone(), status.clone());
                self.desk.actions.push(Action::PatchNodePoolStatus {
                    node_pool: name,
                    status: Box::new(status),
                });
            }
        }
    }
}

/// `a, b, c` for up to five items, then `and N other(s)`, as Karpenter shortens lists in logs.
pub fn list_text(items: &[String]) -> String {
    const SHOWN: usize = 5;
    if items.len() <= SHOWN {
        items.join(", ")
    } else {
        format!(
            "{} and {} other(s)",
            items[..SHOWN].join(", "),
            items.len() - SHOWN
        )
    }
}

impl Controllers {
    /// Writes the status of every NodeOverlay whose verdict changed.
    fn write_overlay_statuses(&mut self, now: Duration) {
        self.statuses
            .overlays
            .retain(|name, _| self.desk.cluster.node_overlays.contains_key(name));
        if !self.desk.settings.node_overlay {
            return;
        }
        let evaluation = self.desk.overlay_evaluation(now);
        let names: Vec<String> = self.desk.cluster.node_overlays.keys().cloned().collect();
        for name in names {
            let status = crate::objects::nodeoverlay_status(evaluation.refused.get(&name));
            if self.statuses.overlays.get(&name) != Some(&status) {
                self.statuses.overlays.insert(name.clone(), status.clone());
                self.desk.actions.push(Action::PatchNodeOverlayStatus {
                    node_overlay: name,
                    status: Box::new(status),
                });
            }
        }
    }
}

/// A static pod's mirror: its node's kubelet keeps it, so no disruption moves it.
pub(super) fn is_mirror(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    (pod.metadata.annotations.as_ref())
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
}

/// How a NodePool's nodes end, as Karpenter's disruption metrics label it: `graceful`
/// without a termination grace period, `forceful` with none to wait, `eventual` otherwise.
fn termination_mode(pool: Option<&NodePool>) -> &'static str {
    match pool.and_then(|p| p.spec.template.spec.termination_grace_period) {
        None => "graceful",
        Some(g) if g.0.is_zero() => "forceful",
        Some(_) => "eventual",
    }
}
