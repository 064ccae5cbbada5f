//! Choosing what to disrupt: emptiness, drift, then consolidation (delete several nodes
//! whose pods fit elsewhere; else replace one node with a strictly cheaper one). Pure: the
//! shell describes the cluster, this module answers with one command.
//!
//! Consolidation looks at every candidate in the cluster each pass. Deletion is greedy and
//! incremental: candidates are taken cheapest-to-disrupt first, and each one whose pods fit
//! on the nodes that remain (counting the pods already moved there) joins the set, so one
//! pass costs one small solve per candidate instead of Karpenter's repeated prefix searches.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::nodepool::{ConsolidationPolicy, DisruptionReason};
use kerf_api::{NodePool, labels};
use kerf_scheduling::resources::pod_requests;
use kerf_scheduling::{
    BoundPod, ExistingNode, NodePoolInput, PlannedNodeClaim, Problem, SolveOptions, solve,
};

/// A node as disruption sees it.
#[derive(Clone, Debug)]
pub struct NodeView {
    /// The node as the scheduler sees it.
    pub node: ExistingNode,
    /// Its NodePool's index in [`ClusterView::node_pools`], when Kerf manages it.
    pub node_pool: Option<usize>,
    /// What it costs per hour.
    pub price_per_hour: f64,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// The pods on it that would move (daemonset pods left out), as indices into
    /// [`ClusterView::pods`].
    pub pods: Vec<usize>,
    /// Whether it may be disrupted at all: initialized, not being deleted, not nominated,
    /// no do-not-disrupt on it or its pods, no pod a PodDisruptionBudget protects.
    pub disruptable: bool,
    /// Whether `consolidateAfter` has passed since its last pod event.
    pub consolidatable: bool,
    /// Whether it has drifted from its NodePool or node class.
    pub drifted: bool,
}

/// The cluster, as one pass reads it.
pub struct ClusterView<'a> {
    /// Nodes.
    pub nodes: Vec<NodeView>,
    /// Every pod on a node (index order is the caller's).
    pub pods: Vec<&'a Pod>,
    /// NodePool objects, for policies.
    pub node_pool_objects: Vec<&'a NodePool>,
    /// NodePools as scheduler input (replacements launch from these).
    pub node_pools: Vec<NodePoolInput>,
    /// Daemonset templates (overhead on replacements).
    pub daemonsets: &'a [Pod],
    /// Allowed disruptions per NodePool and reason, from the budgets.
    pub allowed: BTreeMap<(usize, DisruptionReason), usize>,
    /// Whether spot nodes may be replaced by spot (SpotToSpotConsolidation).
    pub spot_to_spot: bool,
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    /// Why.
    pub reason: DisruptionReason,
    /// Nodes to remove (indices into [`ClusterView::nodes`]).
    pub candidates: Vec<usize>,
    /// Replacement NodeClaims to launch first.
    pub replacements: Vec<PlannedNodeClaim>,
    /// Dollars per hour saved.
    pub savings: f64,
}

/// Candidates simulated for deletion per pass (cheapest to disrupt first). Each simulation
/// still compiles every NodePool's instance types; until compiled pools are reused across
/// simulations this bounds a pass on large clusters.
pub const MAX_DELETE_TRIES: usize = 100;
/// Candidates simulated for replacement per pass (most expensive first), for the same reason.
pub const MAX_REPLACE_TRIES: usize = 8;

/// How many distinct cheaper instance types a spot-to-spot replacement needs (Karpenter).
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;

/// The first method that finds something to do: emptiness, drift, multi-node delete,
/// single-node replace.
pub fn plan(view: &ClusterView<'_>) -> Option<Command> {
    empty(view)
        .or_else(|| drift(view))
        .or_else(|| delete_many(view))
        .or_else(|| replace_one(view))
}

fn policy_allows(view: &ClusterView<'_>, n: &NodeView, reason: DisruptionReason) -> bool {
    let Some(p) = n.node_pool else { return false };
    let policy = view.node_pool_objects[p]
        .spec
        .disruption
        .consolidation_policy;
    match reason {
        DisruptionReason::Empty => n.consolidatable,
        DisruptionReason::Underutilized => {
            n.consolidatable && policy == ConsolidationPolicy::WhenEmptyOrUnderutilized
        }
        DisruptionReason::Drifted => true,
    }
}

fn take_budget(
    view: &ClusterView<'_>,
    used: &mut BTreeMap<usize, usize>,
    n: &NodeView,
    reason: DisruptionReason,
) -> bool {
    let Some(p) = n.node_pool else { return false };
    let allowed = view.allowed.get(&(p, reason)).copied().unwrap_or(0);
    let u = used.entry(p).or_insert(0);
    if *u < allowed {
        *u += 1;
        true
    } else {
        false
    }
}

fn empty(view: &ClusterView<'_>) -> Option<Command> {
    let mut used = BTreeMap::new();
    let mut candidates = Vec::new();
    let mut savings = 0.0;
    for (i, n) in view.nodes.iter().enumerate() {
        if n.disruptable
            && n.pods.is_empty()
            && policy_allows(view, n, DisruptionReason::Empty)
            && take_budget(view, &mut used, n, DisruptionReason::Empty)
        {
            candidates.push(i);
            savings += n.price_per_hour;
        }
    }
    (!candidates.is_empty()).then_some(Command {
        reason: DisruptionReason::Empty,
        candidates,
        replacements: Vec::new(),
        savings,
    })
}

/// Solves the pods of `moving` onto every node outside `gone`, with new NodeClaims from the
/// NodePools when `pools` is set. `None` when some pod has no place.
fn simulate(
    view: &ClusterView<'_>,
    nodes: &[ExistingNode],
    gone: &[bool],
    moving: &[usize],
    pools: bool,
) -> Option<Vec<PlannedNodeClaim>> {
    let keep: Vec<usize> = (0..nodes.len()).filter(|i| !gone[*i]).collect();
    let remaining: Vec<ExistingNode> = keep.iter().map(|i| nodes[*i].clone()).collect();
    let position: BTreeMap<usize, usize> = keep.iter().enumerate().map(|(k, i)| (*i, k)).collect();
    let bound: Vec<BoundPod<'_>> = view
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| position.get(&i).map(|&k| (k, n)))
        .flat_map(|(k, n)| {
            n.pods.iter().map(move |p| BoundPod {
                node: k,
                pod: view.pods[*p],
            })
        })
        .collect();
    let pods: Vec<Pod> = moving.iter().map(|p| (*view.pods[*p]).clone()).collect();
    let no_pools: [NodePoolInput; 0] = [];
    let decision = solve(&Problem {
        node_pools: if pools { &view.node_pools } else { &no_pools },
        nodes: &remaining,
        bound_pods: &bound,
        daemonsets: view.daemonsets,
        pods: &pods,
        options: SolveOptions::default(),
    });
    decision
        .unschedulable
        .is_empty()
        .then_some(decision.nodeclaims)
}

fn drift(view: &ClusterView<'_>) -> Option<Command> {
    let mut used = BTreeMap::new();
    let nodes: Vec<ExistingNode> = view.nodes.iter().map(|n| n.node.clone()).collect();
    for (i, n) in view.nodes.iter().enumerate() {
        if !(n.disruptable
            && n.drifted
            && take_budget(view, &mut used, n, DisruptionReason::Drifted))
        {
            continue;
        }
        let mut gone = vec![false; nodes.len()];
        gone[i] = true;
        // drifted nodes are replaced even when that costs more
        if let Some(replacements) = simulate(view, &nodes, &gone, &n.pods, true) {
            let cost: f64 = replacements.iter().map(|r| r.launch.price_per_hour).sum();
            return Some(Command {
                reason: DisruptionReason::Drifted,
                candidates: vec![i],
                savings: n.price_per_hour - cost,
                replacements,
            });
        }
    }
    None
}

/// Cheapest to disrupt first: fewest pods, then lowest price, then name.
fn disruption_order(view: &ClusterView<'_>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..view.nodes.len())
        .filter(|i| {
            let n = &view.nodes[*i];
            n.disruptable
                && !n.pods.is_empty()
                && policy_allows(view, n, DisruptionReason::Underutilized)
        })
        .collect();
    order.sort_by(|a, b| {
        let (x, y) = (&view.nodes[*a], &view.nodes[*b]);
        x.pods
            .len()
            .cmp(&y.pods.len())
            .then(x.price_per_hour.total_cmp(&y.price_per_hour))
            .then_with(|| x.node.name.cmp(&y.node.name))
    });
    order
}

fn delete_many(view: &ClusterView<'_>) -> Option<Command> {
    let mut nodes: Vec<ExistingNode> = view.nodes.iter().map(|n| n.node.clone()).collect();
    let mut gone = vec![false; nodes.len()];
    let mut used = BTreeMap::new();
    let mut chosen = Vec::new();
    let mut savings = 0.0;
    for i in disruption_order(view).into_iter().take(MAX_DELETE_TRIES) {
        let n = &view.nodes[i];
        gone[i] = true;
        let fits = room_elsewhere(view, &nodes, &gone, &n.pods)
            && simulate(view, &nodes, &gone, &n.pods, false).is_some();
        if fits && take_budget(view, &mut used, n, DisruptionReason::Underutilized) {
            // the moved pods now use room on the nodes that stay: place them for real
            place(view, &mut nodes, &gone, &n.pods);
            chosen.push(i);
            savings += n.price_per_hour;
        } else {
            gone[i] = false;
        }
    }
    (!chosen.is_empty()).then_some(Command {
        reason: DisruptionReason::Underutilized,
        candidates: chosen,
        replacements: Vec::new(),
        savings,
    })
}

/// A cheap necessary condition before a solve: the pods' total cpu and memory fit in the free
/// room of the nodes that stay, and the largest pod fits in the roomiest one.
fn room_elsewhere(
    view: &ClusterView<'_>,
    nodes: &[ExistingNode],
    gone: &[bool],
    moving: &[usize],
) -> bool {
    let (mut cpu, mut mem, mut big_cpu, mut big_mem) = (0, 0, 0, 0);
    for p in moving {
        let r = pod_requests(view.pods[*p]);
        cpu += r.cpu_millis;
        mem += r.memory_bytes;
        big_cpu = big_cpu.max(r.cpu_millis);
        big_mem = big_mem.max(r.memory_bytes);
    }
    let (mut free_cpu, mut free_mem, mut roomiest) = (0, 0, false);
    for (i, n) in nodes.iter().enumerate() {
        if gone[i] {
            continue;
        }
        let c = n.allocatable.cpu_millis - n.requested.cpu_millis;
        let m = n.allocatable.memory_bytes - n.requested.memory_bytes;
        free_cpu += c.max(0);
        free_mem += m.max(0);
        roomiest |= c >= big_cpu && m >= big_mem;
    }
    roomiest && cpu <= free_cpu && mem <= free_mem
}

/// The cheapest any NodePool could run these pods for, counting only cpu and memory: no
/// replacement can cost less.
fn cheapest_possible(view: &ClusterView<'_>, moving: &[usize]) -> f64 {
    let (mut cpu, mut mem) = (0, 0);
    for p in moving {
        let r = pod_requests(view.pods[*p]);
        cpu += r.cpu_millis;
        mem += r.memory_bytes;
    }
    view.node_pools
        .iter()
        .flat_map(|np| np.instance_types.iter())
        .filter(|t| t.allocatable.cpu_millis >= cpu && t.allocatable.memory_bytes >= mem)
        .flat_map(|t| {
            t.offerings
                .iter()
                .filter(|o| o.available)
                .map(|o| o.price_per_hour)
        })
        .fold(f64::MAX, f64::min)
}

/// Adds moved pods' requests to the nodes a solve puts them on.
fn place(view: &ClusterView<'_>, nodes: &mut [ExistingNode], gone: &[bool], moving: &[usize]) {
    let keep: Vec<usize> = (0..nodes.len()).filter(|i| !gone[*i]).collect();
    let remaining: Vec<ExistingNode> = keep.iter().map(|i| nodes[*i].clone()).collect();
    let pods: Vec<Pod> = moving.iter().map(|p| (*view.pods[*p]).clone()).collect();
    let decision = solve(&Problem {
        node_pools: &[],
        nodes: &remaining,
        bound_pods: &[],
        daemonsets: &[],
        pods: &pods,
        options: SolveOptions::default(),
    });
    for e in decision.existing {
        for p in e.pods {
            nodes[keep[e.node]].requested.add(&pod_requests(&pods[p]));
        }
    }
}

fn replace_one(view: &ClusterView<'_>) -> Option<Command> {
    let nodes: Vec<ExistingNode> = view.nodes.iter().map(|n| n.node.clone()).collect();
    let mut order = disruption_order(view);
    // the most expensive node has the most to save
    order.sort_by(|a, b| {
        view.nodes[*b]
            .price_per_hour
            .total_cmp(&view.nodes[*a].price_per_hour)
    });
    for i in order.into_iter().take(MAX_REPLACE_TRIES) {
        let n = &view.nodes[i];
        let mut used = BTreeMap::new();
        if !take_budget(view, &mut used, n, DisruptionReason::Underutilized) {
            continue;
        }
        if cheapest_possible(view, &n.pods) >= n.price_per_hour {
            continue;
        }
        let mut gone = vec![false; nodes.len()];
        gone[i] = true;
        let Some(replacements) = simulate(view, &nodes, &gone, &n.pods, true) else {
            continue;
        };
        if replacements.len() != 1 {
            continue;
        }
        let r = &replacements[0];
        let spot = labels::CAPACITY_TYPE_SPOT;
        if n.capacity_type == spot && r.launch.capacity_type == spot {
            let cheaper = r
                .instance_types
                .iter()
                .filter(|o| o.price_per_hour < n.price_per_hour)
                .count();
            if !view.spot_to_spot || cheaper < SPOT_TO_SPOT_MIN_TYPES {
                continue;
            }
        }
        if r.launch.price_per_hour < n.price_per_hour {
            return Some(Command {
                reason: DisruptionReason::Underutilized,
                candidates: vec![i],
                savings: n.price_per_hour - r.launch.price_per_hour,
                replacements,
            });
        }
    }
    None
}
