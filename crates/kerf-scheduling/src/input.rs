//! What a solve is given: NodePools with their instance types and offerings, the nodes that
//! exist and the pods on them, daemonsets, and the pending pods.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::{NodeSelectorRequirementWithMinValues, Taint};

use crate::resources::Resources;

/// One place and purchase option an instance type can be launched with.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    /// Availability zone.
    pub zone: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
    /// Price in dollars per hour.
    pub price_per_hour: f64,
    /// False while the cloud has reported insufficient capacity for it.
    pub available: bool,
    /// A capacity reservation's offering (capacity type `reserved`): which, and how many
    /// more instances it takes.
    pub reservation: Option<Reservation>,
}

/// A capacity reservation behind an offering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Its id (`cr-…`).
    pub id: String,
    /// How many more instances it takes now.
    pub capacity: u32,
}

/// An instance type as the scheduler needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceTypeOption {
    /// The type's name (`m5.large`).
    pub name: String,
    /// Labels a node of this type carries (instance-type, arch, os, family, …); zone and
    /// capacity type come from the offerings. Shared: the options are copied whenever the
    /// unavailable offerings change, and the labels never do.
    pub labels: Arc<BTreeMap<String, String>>,
    /// What the machine has: NodePool limits count this.
    pub capacity: Resources,
    /// What pods may request: capacity minus kubelet, system and eviction reservations.
    pub allocatable: Resources,
    /// Where and how it can be bought.
    pub offerings: Vec<Offering>,
}

/// A NodePool, resolved against its node class.
#[derive(Clone, Debug)]
pub struct NodePoolInput {
    /// The NodePool's name.
    pub name: String,
    /// Higher weights are tried first; ties go by name.
    pub weight: i32,
    /// `spec.template.metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.template.spec.requirements`.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Taints every pod must tolerate.
    pub taints: Vec<Taint>,
    /// Taints that go away once the node is ready: they need no toleration.
    pub startup_taints: Vec<Taint>,
    /// `spec.limits`, by resource name (cpu in millicores, bytes for memory); absent
    /// resources are unlimited.
    pub limits: BTreeMap<String, i64>,
    /// The capacity of the nodes this NodePool already has, counted against its limits.
    pub usage: Resources,
    /// How many nodes it already has (launched or in flight), counted against
    /// `limits.nodes`.
    pub nodes: i64,
    /// The instance types its node class can launch, with their offerings.
    pub instance_types: Arc<[InstanceTypeOption]>,
    /// When set, only the types no larger than this in cpu and memory may launch (a packing
    /// capped at what a cost bound buys, [`crate::capped_pools`]). Kept apart from
    /// `instance_types` so that a capped NodePool reuses the catalog compiled for it.
    pub largest: Option<crate::NodeSize>,
}

impl NodePoolInput {
    /// Whether `t` is no larger than [`NodePoolInput::largest`] (every type is, without one).
    pub fn within_largest(&self, t: &InstanceTypeOption) -> bool {
        self.largest.is_none_or(|size| {
            t.capacity.cpu_millis <= size.cpu_millis && t.capacity.memory_bytes <= size.memory_bytes
        })
    }
}

/// A node that exists (or a NodeClaim already launching).
#[derive(Clone, Debug)]
pub struct ExistingNode {
    /// The node's name (its hostname label's value when that is absent).
    pub name: String,
    /// The node's labels, shared with the caller's node record: a disruption pass views
    /// every node, and cloning each one's labels was 3 % of a simulated day.
    pub labels: Arc<BTreeMap<String, String>>,
    /// Taints a pod must tolerate (the caller leaves out startup taints of nodes not yet
    /// initialized).
    pub taints: Vec<Taint>,
    /// What pods may request in total.
    pub allocatable: Resources,
    /// What the pods on it (daemonsets included) already request.
    pub requested: Resources,
    /// Whether the node is ready for pods; initialized nodes are tried first.
    pub initialized: bool,
}

/// A pod already bound to an existing node: it counts for topology and uses host ports.
#[derive(Clone, Copy, Debug)]
pub struct BoundPod<'a> {
    /// Index into the existing nodes.
    pub node: usize,
    /// The pod.
    pub pod: &'a Pod,
    /// Its [`crate::pods::terms_of`], when the caller keeps it.
    pub terms: Option<u64>,
}

/// Whether preferences (preferred affinities, ScheduleAnyway spreads) bind until relaxed,
/// as Karpenter's default, or are dropped up front.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Preferences {
    /// Treat preferences as requirements, relaxing them one by one when a pod cannot fit.
    #[default]
    Respect,
    /// Ignore preferences entirely.
    Ignore,
}

impl Preferences {
    /// Reads `PREFERENCE_POLICY` as Karpenter spells it (`Respect` or `Ignore`, case and all).
    pub fn parse(text: &str) -> Result<Preferences, String> {
        match text {
            "Respect" => Ok(Preferences::Respect),
            "Ignore" => Ok(Preferences::Ignore),
            _ => Err(format!("{text:?}: must be Respect or Ignore")),
        }
    }
}

/// What a new NodeClaim does when its NodePool's `minValues` cannot be met (Karpenter's
/// `MIN_VALUES_POLICY`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinValues {
    /// The NodePool cannot take the pod.
    #[default]
    Strict,
    /// Each short minValues is lowered to what the instance types give, on that NodeClaim
    /// only; the NodeClaim says so (`karpenter.sh/nodeclaim-min-values-relaxed`).
    BestEffort,
}

impl MinValues {
    /// Reads `MIN_VALUES_POLICY` as Karpenter spells it (`Strict` or `BestEffort`).
    pub fn parse(text: &str) -> Result<MinValues, String> {
        match text {
            "Strict" => Ok(MinValues::Strict),
            "BestEffort" => Ok(MinValues::BestEffort),
            _ => Err(format!("{text:?}: must be Strict or BestEffort")),
        }
    }
}

/// Knobs of one solve.
#[derive(Clone, Copy, Debug)]
pub struct SolveOptions {
    /// How preferences are treated.
    pub preferences: Preferences,
    /// How unmet minValues are treated.
    pub min_values: MinValues,
    /// How many instance types a launch may carry (Karpenter sends 60).
    pub max_instance_types: usize,
    /// Whether pods may go to new NodeClaims. Consolidation asks "do these pods fit on the
    /// nodes that stay?" with the NodePools still defining topology domains but no launches.
    pub new_nodeclaims: bool,
    /// Whether pods may go to existing nodes. Explaining a pod asks each NodePool alone
    /// "could a new node of yours host it?" with the nodes still counting for topology.
    pub existing_nodes: bool,
}

impl Default for SolveOptions {
    fn default() -> SolveOptions {
        SolveOptions {
            preferences: Preferences::Respect,
            min_values: MinValues::Strict,
            max_instance_types: 60,
            new_nodeclaims: true,
            existing_nodes: true,
        }
    }
}

/// Everything one solve reads.
#[derive(Clone, Copy, Debug)]
pub struct Problem<'a> {
    /// The NodePools.
    pub node_pools: &'a [NodePoolInput],
    /// Nodes that exist.
    pub nodes: &'a [ExistingNode],
    /// Pods already on those nodes.
    pub bound_pods: &'a [BoundPod<'a>],
    /// Daemonset pod templates (as pods), whose pods will run on new nodes.
    pub daemonsets: &'a [Pod],
    /// The pending pods to place (borrowed: a caller keeping thousands of pods need not
    /// copy them to ask).
    pub pods: &'a [&'a Pod],
    /// What each pod to place requests, when the caller has worked it out already (in the
    /// order of `pods`, or of a session's movable pods); empty, it is worked out here.
    pub requests: &'a [Resources],
    /// Each pod to place's [`crate::pods::terms_of`], when the caller keeps them (in the
    /// order of `requests`); empty, replicas are compared field by field.
    pub terms: &'a [u64],
    /// Knobs.
    pub options: SolveOptions,
}

impl<'a> Problem<'a> {
    /// Pods to place on an empty cluster: no nodes, no daemonsets, default options.
    pub fn new(node_pools: &'a [NodePoolInput], pods: &'a [&'a Pod]) -> Problem<'a> {
        Problem {
            node_pools,
            nodes: &[],
            bound_pods: &[],
            daemonsets: &[],
            pods,
            requests: &[],
            terms: &[],
            options: SolveOptions::default(),
        }
    }
}
