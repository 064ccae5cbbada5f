//! The bin-packing scheduler: Karpenter's provisioning simulation over interned data.
//!
//! Pods go largest first (CPU, then memory). Each tries the bins in order: existing nodes
//! (initialized first), then the NodeClaims planned so far in this solve (first fit), then a
//! new NodeClaim from each NodePool by weight. A pod that fits nowhere is relaxed one step
//! and queued again; the solve ends when a full pass over the queue places nothing.
//!
//! Speed comes from the shape of the data, not from shortcuts in the rules: label keys and
//! values are symbols, a planned node's instance types are a bit set narrowed by a cache of
//! (NodePool, requirements) → compatible types, topology counts are kept incrementally, and
//! pods with the same constraints share a cursor past the bins that can never take them.
//!
//! Its rooms: `compile` turns the problem into that data, `fit` checks and commits a pod to
//! a bin (and keeps the cursors), `explain` turns a NodePool's rejection into a reason with
//! numbers, `session` answers consolidation's "what if these nodes were gone?" questions;
//! this file holds the types they share and the run from pending pods to a decision.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::amounts::{Amounts, Dimensions};
use crate::bitset::BitSet;
use crate::input::Problem;
use crate::interned::{Conflict, Req, Reqs};
use crate::launch::{self, CompiledOffering, Launch, LaunchOption};
use crate::pods::{HostPort, PodInfo, Relaxation};
use crate::reasons::{Reason, Why};
use crate::resources::Resources;
use crate::symbols::{Sym, Symbols};
use crate::topology::{GroupId, Topology};

pub use bound::{CostBound, NodeSize, capped_pools, cost_bound, solve_near_bound};
pub use catalog::Catalog;

mod bound;
mod catalog;
mod compile;
mod explain;
mod fit;
mod session;

use fit::Cursor;
pub use session::Session;

/// A NodeClaim the solve decided to launch.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedNodeClaim {
    /// Index of its NodePool in the problem.
    pub node_pool: usize,
    /// Indices of the pending pods it takes.
    pub pods: Vec<usize>,
    /// What its pods and the daemonsets request.
    pub requests: Resources,
    /// The NodePool's requirements narrowed by its pods and topology, instance types last.
    pub requirements: Vec<kerf_api::NodeSelectorRequirementWithMinValues>,
    /// The instance types it may launch as, cheapest first (at most the launch cap).
    pub instance_types: Vec<LaunchOption>,
    /// The launch the cheapest available offering gives.
    pub launch: Launch,
    /// Whether MIN_VALUES_POLICY=BestEffort lowered one of its NodePool's minValues.
    pub min_values_relaxed: bool,
}

/// Pods placed on one existing node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingPlacement {
    /// Index of the node in the problem.
    pub node: usize,
    /// Indices of the pending pods placed there.
    pub pods: Vec<usize>,
}

/// A pod that could not be placed, with why, per NodePool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    /// Index of the pod in the problem.
    pub pod: usize,
    /// The reasons of its last (most relaxed) attempt.
    pub reasons: Vec<Reason>,
}

/// The outcome of one solve.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// NodeClaims to create, in the order they were planned.
    pub nodeclaims: Vec<PlannedNodeClaim>,
    /// Pods placed on existing nodes, by node.
    pub existing: Vec<ExistingPlacement>,
    /// Pods left pending.
    pub unschedulable: Vec<Unschedulable>,
}

impl Decision {
    /// What the planned NodeClaims cost per hour.
    pub fn cost_per_hour(&self) -> f64 {
        // folded from +0.0: an empty sum of f64 is -0.0
        self.nodeclaims
            .iter()
            .fold(0.0, |sum, n| sum + n.launch.price_per_hour)
    }
}

/// An instance type of a NodePool, compiled.
struct TypeInfo {
    /// Its place in the NodePool input's instance types.
    index: usize,
    reqs: Arc<Reqs>,
    allocatable: Amounts,
    capacity: Amounts,
    offerings: Arc<[CompiledOffering]>,
}

/// A NodePool, compiled.
struct Pool {
    input: usize,
    reqs: Reqs,
    types: Vec<TypeInfo>,
    overhead: Amounts,
    /// What the limits leave after the NodePool's existing usage.
    budget: Amounts,
    /// What they leave after the planned NodeClaims' reservations too.
    remaining: Amounts,
    /// How many bins there were when the reservations were last tightened.
    tightened: Option<usize>,
    compat: RefCell<FxHashMap<Reqs, Rc<BitSet>>>,
}

/// Where pods can go: an existing node or a planned NodeClaim.
#[derive(Clone)]
struct Bin {
    /// Which of the two it is.
    host: Host,
    /// Its hostname label's value (a planned NodeClaim's is made up and unique).
    hostname: Sym,
    /// Its labels as requirements, narrowed by the pods a planned NodeClaim took (an
    /// existing node's are shared with the [`Catalog`] that keeps them).
    reqs: Arc<Reqs>,
    /// What its pods request (with daemonset overhead on a planned NodeClaim).
    requests: Amounts,
    /// An upper bound on what more fits.
    headroom: Amounts,
    /// The pods placed on it in this solve.
    pods: Vec<usize>,
    /// The host ports its pods use.
    ports: Vec<HostPort>,
}

/// What a bin stands for.
#[derive(Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "bins live in one Vec and are copied whole when saved: a boxed span would cost an \
              allocation at every placement on a planned NodeClaim"
)]
enum Host {
    /// A node that exists (or a NodeClaim already launching): its index in the problem.
    Node(usize),
    /// A NodeClaim this solve plans, with its NodePool (index into the compiled pools), the
    /// instance types it may still launch as (indices into that pool's types) and what they
    /// can hold (kept with `types`: a pod placed on it seldom narrows them, and every type
    /// was read at every placement).
    Planned {
        pool: usize,
        types: BitSet,
        span: Span,
    },
}

/// What a planned NodeClaim's instance types can hold, each amount read off all of them.
#[derive(Clone, Copy)]
struct Span {
    /// The most any of them holds: more than this fits none.
    widest: Amounts,
    /// The least any of them holds: this much fits every one.
    narrowest: Amounts,
}

impl Bin {
    /// The existing node it is.
    fn node(&self) -> Option<usize> {
        match self.host {
            Host::Node(n) => Some(n),
            Host::Planned { .. } => None,
        }
    }

    /// The instance types a planned NodeClaim may still launch as.
    fn types(&self) -> Option<&BitSet> {
        match &self.host {
            Host::Planned { types, .. } => Some(types),
            Host::Node(_) => None,
        }
    }
}

/// Why a bin turned a pod away, in symbols; `permanent` when no later change in the solve
/// can make the same pod constraints fit.
#[derive(Clone, Copy, Debug)]
struct Reject {
    permanent: bool,
    cause: Cause,
}

#[derive(Clone, Copy, Debug)]
enum Cause {
    Hostname,
    Resources,
    Taint(usize),
    Ports,
    Requirements(Conflict),
    Topology(GroupId),
    NoTypes,
    Fit,
    Limit,
    /// Taking the pod would leave a NodeClaim that can launch into a reservation none to
    /// launch into (Karpenter's strict reserved-offering mode): it goes to another.
    Reserved,
    MinValues(Sym, u32),
}

/// A pod already on a node, as topology counts it.
struct Bound {
    /// The node's index in the problem.
    node: usize,
    /// Its namespace.
    namespace: Sym,
    /// Its labels (shared by the replicas compiled from one pod).
    labels: Arc<[(Sym, Sym)]>,
    /// The groups of its own required anti-affinity terms (other pods avoid it through them).
    owned: Arc<[GroupId]>,
}

/// A successful check, ready to apply.
struct Fit {
    reqs: Option<Reqs>,
    types: Option<BitSet>,
}

/// The pod constraints in force for one attempt. Pods whose attempts are equal share a
/// cursor: the attempt itself is the key, so two different constraint sets never do.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Attempt {
    /// What a node must have to take the pod (its volumes' topology included).
    reqs: Reqs,
    /// The pod's own requirements, from which its spreads take their domains.
    own: Reqs,
    host: Option<Req>,
    groups: Vec<GroupId>,
    tolerations: u64,
    tolerate_pns: bool,
    host_ports: Vec<HostPort>,
}

struct State<'p> {
    problem: &'p Problem<'p>,
    symbols: Symbols,
    well_known: usize,
    hostname: Sym,
    /// The offering labels' symbols, the reservation id's once everything is interned.
    offering_keys: launch::OfferingKeys,
    dims: Dimensions,
    topology: Topology,
    pools: Vec<Pool>,
    pool_order: Vec<usize>,
    pods: Vec<PodInfo>,
    bins: Vec<Bin>,
    min_request: Amounts,
    cursors: FxHashMap<Attempt, Cursor>,
    /// In a session, the existing nodes too full for any of its pods as its cluster stands
    /// (between questions): every question's scans start past them.
    full: Option<Cursor>,
    nothing: Req,
    toleration_ids: Vec<u64>,
    /// Pods already on nodes that topology counts, and their indices by node.
    bound: Vec<Bound>,
    bound_at: Vec<Vec<usize>>,
    /// The bin of each existing node.
    bin_of_node: Vec<usize>,
    /// Bins a [`Session`] has taken away.
    excluded: Vec<bool>,
    /// Whether pods may open new NodeClaims (a session may forbid it).
    pools_enabled: bool,
    /// Bins as they were before a session's tentative change touched them.
    saved: Option<session::Saved>,
    /// How many more instances each capacity reservation takes.
    reservations: FxHashMap<Sym, u32>,
}

/// Decides where the pending pods go and which NodeClaims to launch.
pub fn solve(problem: &Problem<'_>) -> Decision {
    solve_with(problem, &mut Catalog::default())
}

/// [`solve`] with the instance types `catalog` compiled for earlier solves of this cluster.
pub fn solve_with(problem: &Problem<'_>, catalog: &mut Catalog) -> Decision {
    let mut state = State::new(problem, problem.pods.iter().copied(), catalog);
    let reasons = state.run((0..problem.pods.len()).collect());
    state.finish(reasons)
}

impl<'p> State<'p> {
    /// Places `order`'s pods, largest first; returns the ones left with their reasons.
    fn run(&mut self, mut order: Vec<usize>) -> FxHashMap<usize, Vec<Reason>> {
        order.sort_by(|a, b| {
            let (x, y) = (&self.pods[*a].requests, &self.pods[*b].requests);
            y.cpu_millis()
                .cmp(&x.cpu_millis())
                .then_with(|| y.memory_bytes().cmp(&x.memory_bytes()))
        });
        let mut queue: VecDeque<usize> = order.into();
        let mut relax: FxHashMap<usize, Relaxation> = FxHashMap::default();
        let mut last_len: FxHashMap<usize, usize> = FxHashMap::default();
        let mut reasons: FxHashMap<usize, Vec<Reason>> = FxHashMap::default();
        while let Some(&pod) = queue.front() {
            if last_len.get(&pod) == Some(&queue.len()) {
                break; // a full pass without progress
            }
            queue.pop_front();
            let r = *relax.entry(pod).or_default();
            match self.place(pod, &r) {
                Ok(()) => {
                    reasons.remove(&pod);
                }
                Err(why) => {
                    reasons.insert(pod, why);
                    let relaxed = relax.entry(pod).or_default().relax(&self.pods[pod]);
                    queue.push_back(pod);
                    if relaxed {
                        last_len.clear();
                    } else {
                        last_len.insert(pod, queue.len());
                    }
                }
            }
        }
        queue
            .into_iter()
            .map(|p| (p, reasons.remove(&p).unwrap_or_default()))
            .collect()
    }

    fn finish(self, reasons: FxHashMap<usize, Vec<Reason>>) -> Decision {
        let placed = self.bins.iter().map(|b| (b, b.pods.clone()));
        self.decision(placed, reasons)
    }

    /// The decision for pods placed in bins (each bin with the pods it gained).
    fn decision<'b>(
        &'b self,
        placed: impl Iterator<Item = (&'b Bin, Vec<usize>)>,
        mut reasons: FxHashMap<usize, Vec<Reason>>,
    ) -> Decision {
        let mut decision = Decision::default();
        // planned NodeClaims take reservations in the order they were opened
        let mut room = self.reservations.clone();
        for (bin, mut pods) in placed {
            if pods.is_empty() {
                continue;
            }
            pods.sort_unstable();
            match &bin.host {
                Host::Node(node) => decision
                    .existing
                    .push(ExistingPlacement { node: *node, pods }),
                Host::Planned { pool, types, .. } => {
                    match self.planned(bin, *pool, types, &pods, &mut room) {
                        Some(planned) => decision.nodeclaims.push(planned),
                        // its only offerings were reservations the plans before it filled
                        None => {
                            let name = &self.problem.node_pools[self.pools[*pool].input].name;
                            for pod in pods {
                                reasons.entry(pod).or_default().push(Reason {
                                    node_pool: Some(name.clone()),
                                    why: Why::NoAvailableOffering,
                                });
                            }
                        }
                    }
                }
            }
        }
        let mut pending: Vec<usize> = reasons.keys().copied().collect();
        pending.sort_unstable();
        decision.unschedulable = pending
            .into_iter()
            .map(|pod| Unschedulable {
                pod,
                reasons: reasons.remove(&pod).unwrap_or_default(),
            })
            .collect();
        decision
    }

    /// A planned bin (of `pool`, still open to `types`) as a NodeClaim to launch: the
    /// cheapest offering among its types, a reservation with `room` first; a reserved
    /// launch takes one of that room and is pinned to its reservation.
    fn planned(
        &self,
        bin: &Bin,
        pool: usize,
        types: &BitSet,
        pods: &[usize],
        room: &mut FxHashMap<Sym, u32>,
    ) -> Option<PlannedNodeClaim> {
        let p = &self.pools[pool];
        let candidates: Vec<launch::Candidate<'_>> = types
            .iter()
            .map(|i| launch::Candidate {
                name: &self.problem.node_pools[p.input].instance_types[p.types[i].index].name,
                reqs: &p.types[i].reqs,
                offerings: &p.types[i].offerings,
            })
            .collect();
        let (options, chosen) = launch::choose(
            &candidates,
            &bin.reqs,
            &self.offering_keys,
            self.problem.options.max_instance_types,
            &self.symbols,
            &|id| room.get(&id).is_some_and(|n| *n > 0),
        )?;
        let mut requirements = launch::requirements(&bin.reqs, &options, &self.symbols);
        if let Some(id) = &chosen.reservation {
            if let Some(n) = self.symbols.get(id).and_then(|s| room.get_mut(&s)) {
                *n = n.saturating_sub(1);
            }
            launch::pin_reservation(&mut requirements, id);
        }
        let min_values_relaxed = p.reqs.iter().any(|(key, r)| {
            let now = bin.reqs.get(key).and_then(|b| b.min_values);
            r.min_values.is_some_and(|m| now.is_some_and(|n| n < m))
        });
        Some(PlannedNodeClaim {
            node_pool: p.input,
            pods: pods.to_vec(),
            requests: self.dims.to_resources(&bin.requests),
            requirements,
            instance_types: options,
            launch: chosen,
            min_values_relaxed,
        })
    }
}
