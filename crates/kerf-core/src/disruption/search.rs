//! Choosing what to disrupt: emptiness, drift, then consolidation (delete several nodes
//! whose pods fit elsewhere; else replace one node with a strictly cheaper one). Pure: the
//! shell describes the cluster, this module answers with one command.
//!
//! Consolidation looks at every candidate in the cluster each pass, with no timeout. The
//! cluster is compiled once per pass into a scheduler [`Session`]; each question ("do this
//! node's pods fit elsewhere?") then costs the placement of the pods that move. Deletion is
//! greedy and incremental: candidates are taken cheapest-to-disrupt first, and each one whose
//! pods fit on the nodes that remain (counting the pods already moved there) joins the set,
//! so the set is not limited to a prefix of the order as in Karpenter's binary search.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::nodepool::{ConsolidationPolicy, DisruptionReason};
use kerf_api::{NodePool, labels};
use kerf_scheduling::resources::Resources;
use kerf_scheduling::{
    BoundPod, Catalog, Decision, ExistingNode, InstanceTypeOption, NodePoolInput, PlannedNodeClaim,
    Problem, Session,
};

mod narrow;

use narrow::{Refused, narrow};

/// A node as disruption sees it.
#[derive(Clone, Debug)]
pub struct NodeView {
    /// The node as the scheduler sees it.
    pub node: ExistingNode,
    /// Its NodePool's index in [`ClusterView::node_pools`], when Kerf manages it.
    pub node_pool: Option<usize>,
    /// What it costs per hour.
    pub price_per_hour: f64,
    /// How it is bought.
    pub capacity_type: crate::cluster::CapacityType,
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
    /// What moving its pods costs, as Karpenter's Balanced policy weighs it
    /// ([`crate::disruption::rules::node_disruption_cost`]).
    pub disruption_cost: f64,
    /// Whether a replacement for it failed to launch lately and the wait after it has not
    /// run out: moves that launch nothing may still take it.
    pub replace_backoff: bool,
    /// Whether multi-node consolidation may take it: not once the kube-scheduler rehearsal
    /// refused a multi-node move that did in this pass, when only single-node consolidation
    /// is left to try it (as Karpenter's single-node method runs when the multi-node one
    /// finds nothing).
    pub multi_node: bool,
    /// Node repair's decision, when a repair policy is due on it and nothing vetoes repair
    /// (what blocks voluntary disruption does not).
    pub repair: Option<RepairView>,
}

/// A node repair may replace: its place in line and whether it counts against the budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RepairView {
    /// Its place in line (more first), as [`crate::repair::Decision::score`].
    pub score: f64,
    /// Whether it is initialized: a node that never was neither needs nor takes the
    /// NodePool's `Unhealthy` budget.
    pub initialized: bool,
    /// Whether repair reboots it rather than replacing it.
    pub reboot: bool,
}

/// The cluster, as one pass reads it.
pub struct ClusterView<'a> {
    /// Nodes.
    pub nodes: Vec<NodeView>,
    /// Every pod on a node (index order is the caller's).
    pub pods: Vec<&'a Pod>,
    /// What findings call each of them (`namespace/name`), in the order of `pods`: a
    /// pod's shape carries no name.
    pub keys: Vec<&'a str>,
    /// What each of them requests (in the order of `pods`).
    pub requests: Vec<Resources>,
    /// Each one's [`kerf_scheduling::pods::terms_of`] (in the order of `pods`), or none: the
    /// solver then compares replicas field by field.
    pub terms: Vec<u64>,
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
    /// The `TerminateFirstDrift` and `TerminateFirstRepair` gates: a drifted or unhealthy
    /// node in a full capacity reservation is deleted first when only its own slot could
    /// take its pods.
    pub terminate_first: TerminateFirst,
    /// The policies replacements are planned under (PREFERENCE_POLICY, MIN_VALUES_POLICY),
    /// as provisioning plans them.
    pub options: kerf_scheduling::SolveOptions,
    /// The least a consolidation move must save.
    pub min_savings: MinSavings,
    /// Whether pods wait that the provisioner has not solved for since they began to wait:
    /// they would take the room a consolidation move counts on, or need new nodes of their
    /// own, so no consolidation move is made until they are placed (Karpenter simulates
    /// them beside the candidates' pods and moves nothing that would need new nodes for
    /// them). Empty nodes, drift and repair go on.
    pub pods_await_capacity: bool,
    /// Each NodePool's instance types in name order, sorted the first time a replacement of
    /// it is narrowed ([`ClusterView::instance_type`]).
    pub types_by_name: TypesByName,
}

/// Indices into each NodePool's `instance_types`, in name order: a pass narrows many
/// replacements, each looking up its up to 60 types among the hundreds its NodePool offers.
#[derive(Debug, Default)]
pub struct TypesByName(std::cell::RefCell<BTreeMap<usize, std::rc::Rc<[u32]>>>);

impl ClusterView<'_> {
    /// The instance type of NodePool `pool` (an index into `node_pools`) named `name`.
    pub(crate) fn instance_type(&self, pool: usize, name: &str) -> Option<&InstanceTypeOption> {
        let types = &self.node_pools.get(pool)?.instance_types;
        let order = (self.types_by_name.0.borrow_mut())
            .entry(pool)
            .or_insert_with(|| {
                let mut order: Vec<u32> =
                    (0..types.len()).filter_map(|i| i.try_into().ok()).collect();
                order.sort_by(|a, b| types[*a as usize].name.cmp(&types[*b as usize].name));
                order.into()
            })
            .clone();
        let at = (order.binary_search_by(|i| types[*i as usize].name.as_str().cmp(name))).ok()?;
        Some(&types[order[at] as usize])
    }
}

/// The least a consolidation move (not an empty node's deletion, not a drift replacement)
/// must save for its disruption to be worth it, so churn is a choice. Both must hold; zero
/// (the default) asks only that the move save something, as Karpenter does.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MinSavings {
    /// Dollars per hour.
    pub per_hour: f64,
    /// Percent of what the disrupted nodes cost.
    pub percent: f64,
}

impl MinSavings {
    /// Whether saving `savings` of nodes costing `price` per hour is enough.
    pub fn met(&self, savings: f64, price: f64) -> bool {
        savings > 0.0 && savings >= self.per_hour && savings * 100.0 >= self.percent * price
    }
}

/// Karpenter's `k` for the Balanced policy: a move passes when its share of the NodePool's
/// cost saved is at least 1/k of its share of the NodePool's disruption cost.
pub const BALANCED_K: f64 = 2.0;

/// A NodePool's cost and disruption cost, the denominators of the Balanced score.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolTotals {
    /// What its nodes cost per hour.
    pub cost: f64,
    /// The sum of its nodes' disruption costs.
    pub disruption: f64,
}

/// A move's Balanced score for one NodePool: its savings fraction over its disruption
/// fraction (0 when it saves nothing or the pool's totals are zero; infinite when it
/// disrupts nothing).
pub fn balanced_score(savings: f64, disruption: f64, totals: PoolTotals) -> f64 {
    Score::of(0, savings, disruption, totals).value()
}

/// What the Balanced policy made of a move for one NodePool it disrupts: Karpenter's
/// `ConsolidationApproved` event says it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score {
    /// The NodePool's index in the view.
    pub pool: usize,
    /// The NodePool's cost the move saves, as a fraction.
    pub savings_fraction: f64,
    /// The NodePool's disruption cost the move disrupts, as a fraction.
    pub disruption_fraction: f64,
}

impl Score {
    /// A move saving `savings` and disrupting `disruption` of a NodePool with these totals
    /// (both fractions 0 when a total is, as Karpenter scores it).
    pub fn of(pool: usize, savings: f64, disruption: f64, totals: PoolTotals) -> Score {
        let whole = totals.cost > 0.0 && totals.disruption > 0.0;
        Score {
            pool,
            savings_fraction: if whole { savings / totals.cost } else { 0.0 },
            disruption_fraction: if whole {
                disruption / totals.disruption
            } else {
                0.0
            },
        }
    }

    /// The score: savings over disruption (0 when it saves nothing, infinite when it
    /// disrupts nothing).
    pub fn value(&self) -> f64 {
        if self.savings_fraction <= 0.0 {
            0.0
        } else if self.disruption_fraction == 0.0 {
            f64::INFINITY
        } else {
            self.savings_fraction / self.disruption_fraction
        }
    }

    /// Karpenter's event message: `score 1.50 >= threshold 0.50 (k: 2, savings 12.0%,
    /// disruption 8.0%)` (an infinite score as Go prints it, `+Inf`).
    pub fn message(&self) -> String {
        let score = self.value();
        let score = if score.is_infinite() {
            "+Inf".to_string()
        } else {
            format!("{score:.2}")
        };
        format!(
            "score {score} >= threshold {:.2} (k: {}, savings {:.1}%, disruption {:.1}%)",
            1.0 / BALANCED_K,
            BALANCED_K,
            self.savings_fraction * 100.0,
            self.disruption_fraction * 100.0
        )
    }
}

/// Whether a move is worth making: the minimum saving, and for each Balanced NodePool it
/// disrupts, Karpenter's score (a multi-pool move's saving shared by what each pool's
/// candidates cost).
pub struct Worth<'v> {
    view: &'v ClusterView<'v>,
    totals: Vec<PoolTotals>,
    /// The single-node moves judged, for Karpenter's consolidation move metrics.
    judged: std::cell::RefCell<Vec<JudgedMove>>,
}

/// A consolidation move judged for one NodePool: Karpenter counts each (and, under
/// Balanced, its score).
#[derive(Clone, Debug, PartialEq)]
pub struct JudgedMove {
    /// The NodePool's index in the view.
    pub pool: usize,
    /// Its Balanced score, when the NodePool is Balanced.
    pub score: Option<f64>,
    /// Whether the move passed.
    pub approved: bool,
}

impl<'v> Worth<'v> {
    /// Works out each NodePool's totals over all its nodes, candidates or not.
    pub fn new(view: &'v ClusterView<'v>) -> Worth<'v> {
        let mut totals = vec![PoolTotals::default(); view.node_pools.len()];
        for n in &view.nodes {
            if let Some(t) = n.node_pool.and_then(|p| totals.get_mut(p)) {
                t.cost += n.price_per_hour;
                t.disruption += n.disruption_cost;
            }
        }
        Worth {
            view,
            totals,
            judged: std::cell::RefCell::default(),
        }
    }

    fn balanced(&self, pool: usize) -> bool {
        let policy = self.view.node_pool_objects[pool]
            .spec
            .disruption
            .consolidation_policy;
        policy == ConsolidationPolicy::Balanced
    }

    /// The node's score were it deleted outright (the best any move on it can do), when
    /// its NodePool is Balanced.
    pub fn best_score(&self, node: usize) -> Option<f64> {
        let n = &self.view.nodes[node];
        let pool = n.node_pool.filter(|p| self.balanced(*p))?;
        Some(balanced_score(
            n.price_per_hour,
            n.disruption_cost,
            self.totals[pool],
        ))
    }

    /// Whether deleting the node outright could pass its NodePool's score: if not, no move
    /// on it can.
    pub fn can_pass(&self, node: usize) -> bool {
        self.best_score(node)
            .is_none_or(|score| score >= 1.0 / BALANCED_K)
    }

    /// Each NodePool a move on `candidates` saving `savings` per hour disrupts, with its
    /// share of the saving (a multi-pool move's saving shared by what each pool's candidates
    /// cost) and the disruption cost of its candidates.
    fn shares(&self, candidates: &[usize], savings: f64) -> BTreeMap<usize, (f64, f64)> {
        let nodes = &self.view.nodes;
        let price: f64 = candidates.iter().map(|i| nodes[*i].price_per_hour).sum();
        let mut by_pool: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
        for i in candidates {
            if let Some(p) = nodes[*i].node_pool {
                let e = by_pool.entry(p).or_default();
                e.0 += nodes[*i].price_per_hour;
                e.1 += nodes[*i].disruption_cost;
            }
        }
        if by_pool.len() > 1 && price > 0.0 {
            for e in by_pool.values_mut() {
                e.0 = savings * e.0 / price;
            }
        } else {
            for e in by_pool.values_mut() {
                e.0 = savings;
            }
        }
        by_pool
    }

    /// The Balanced scores of a move on `candidates` saving `savings` per hour, one per
    /// Balanced NodePool it disrupts.
    pub fn scores(&self, candidates: &[usize], savings: f64) -> Vec<Score> {
        let shares = self.shares(candidates, savings);
        (shares.into_iter())
            .filter(|(p, _)| self.balanced(*p))
            .map(|(pool, (saved, disruption))| {
                Score::of(pool, saved, disruption, self.totals[pool])
            })
            .collect()
    }

    /// Whether a move on `candidates` saving `savings` per hour is worth it.
    pub fn approves(&self, candidates: &[usize], savings: f64) -> bool {
        let nodes = &self.view.nodes;
        let price: f64 = candidates.iter().map(|i| nodes[*i].price_per_hour).sum();
        if !self.view.min_savings.met(savings, price) {
            return false;
        }
        let judged: Vec<JudgedMove> = (self.shares(candidates, savings).into_iter())
            .map(|(p, (saved, disruption))| {
                let score =
                    (self.balanced(p)).then(|| balanced_score(saved, disruption, self.totals[p]));
                JudgedMove {
                    pool: p,
                    score,
                    approved: score.is_none_or(|s| s >= 1.0 / BALANCED_K),
                }
            })
            .collect();
        let approved = judged.iter().all(|j| j.approved);
        if candidates.len() == 1 {
            self.judged.borrow_mut().extend(judged);
        }
        approved
    }
}

impl ClusterView<'_> {
    /// Every pod on a node, as the scheduler's bound pods (node indices are the view's).
    pub fn bound_pods(&self) -> Vec<BoundPod<'_>> {
        self.nodes
            .iter()
            .enumerate()
            .flat_map(|(k, n)| {
                n.pods.iter().map(move |p| BoundPod {
                    node: k,
                    pod: self.pods[*p],
                    terms: self.terms.get(*p).copied(),
                })
            })
            .collect()
    }
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    /// Why.
    pub reason: DisruptionReason,
    /// Which method found it (Karpenter's `consolidation_type` metric label).
    pub method: Method,
    /// Nodes to remove (indices into [`ClusterView::nodes`]).
    pub candidates: Vec<usize>,
    /// Replacement NodeClaims to launch first.
    pub replacements: Vec<PlannedNodeClaim>,
    /// Dollars per hour saved.
    pub savings: f64,
    /// Why the node is deleted before its replacement exists (Karpenter's terminate-first
    /// reason: `no-reserved-capacity`), when it is.
    pub terminate_first: Option<&'static str>,
}

/// The disruption method that found a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Empty nodes deleted.
    Emptiness,
    /// A drifted node replaced.
    Drift,
    /// An unhealthy node replaced (node repair).
    Repair,
    /// An unhealthy node rebooted in place (node repair's `RebootNode` action): nothing
    /// launched, nothing simulated.
    Reboot,
    /// Several nodes deleted or replaced by one.
    MultiNode,
    /// One node replaced by a cheaper one.
    SingleNode,
}

impl Method {
    /// Karpenter's `consolidation_type` label: empty, multi, single; none for drift.
    pub fn consolidation_type(self) -> &'static str {
        match self {
            Method::Emptiness => "empty",
            Method::Drift | Method::Repair | Method::Reboot => "",
            Method::MultiNode => "multi",
            Method::SingleNode => "single",
        }
    }
}

/// How many distinct cheaper instance types a spot-to-spot replacement needs (Karpenter).
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;

/// The first method that finds something to do: emptiness, drift, multi-node consolidation
/// (delete several; else replace several with one cheaper node), single-node replace.
pub fn plan(view: &ClusterView<'_>, catalog: &mut Catalog) -> Option<Command> {
    plan_judged(view, catalog).0
}

/// [`plan`], with the single-node moves it judged (Karpenter counts and scores each).
pub fn plan_judged(
    view: &ClusterView<'_>,
    catalog: &mut Catalog,
) -> (Option<Command>, Vec<JudgedMove>) {
    if let Some(c) = empty(view) {
        return (Some(c), Vec::new());
    }
    // compiling the cluster costs as much as a solve over all of it: not when no node could
    // be drifted away or consolidated (a quiet cluster, consolidateAfter not reached)
    let drifted = view.nodes.iter().any(|n| n.disruptable && n.drifted);
    let unhealthy = view.nodes.iter().any(|n| n.repair.is_some());
    if !drifted && !unhealthy && disruption_order(view).is_empty() {
        return (None, Vec::new());
    }
    let worth = Worth::new(view);
    let found = with_session(view, &view.node_pools, catalog, |session| {
        repair(view, session)
            .or_else(|| drift(view, session))
            .or_else(|| {
                consolidating(view).then_some(())?;
                delete_many(view, &worth, session)
                    .or_else(|| replace_many(view, &worth, session))
                    .or_else(|| replace_one(view, &worth, session))
            })
    });
    let command = match found {
        // the node Karpenter's packing would replace may do better split
        Some(c) if c.method == Method::SingleNode => {
            Some(split_if_cheaper(view, &worth, c, catalog))
        }
        Some(c) => Some(c),
        None if consolidating(view) => split(view, &worth, catalog),
        None => None,
    };
    (command, worth.judged.into_inner())
}

/// Whether consolidation may move pods now: not while pods wait that the provisioner has
/// not placed ([`ClusterView::pods_await_capacity`]).
fn consolidating(view: &ClusterView<'_>) -> bool {
    !view.pods_await_capacity
}

/// Why a command no longer holds when it is checked again, as Karpenter's validation names it
/// (in its `ConsolidationRejected` events and log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// A candidate is no longer one (a pod arrived that may not move, its policy changed…).
    Churn,
    /// Its NodePool's disruption budget no longer allows it.
    Budget,
    /// Its pods no longer move as the command said (or pods wait for capacity).
    Scheduling,
}

impl Rejection {
    /// Karpenter's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::Churn => "churn",
            Rejection::Budget => "budget",
            Rejection::Scheduling => "scheduling",
        }
    }
}

/// A command decided a while ago, checked again on the current cluster after the
/// validation wait, as Karpenter validates: the same candidates, not a new search. Each
/// candidate must still be one (disruptable, its policy still allowing the reason, no
/// failed replacement backing it off when it is to be replaced) within its NodePool's
/// budget, and its pods must still move as the command said: nowhere new for
/// a deletion, onto as many new nodes as before, still cheaper, for a replacement (whose
/// fresh plan is what launches). Empty nodes are the exception: those still empty go, as
/// long as one does. Why not, when the command no longer holds.
pub fn revalidate(
    view: &ClusterView<'_>,
    catalog: &mut Catalog,
    decided: &Decided,
) -> Result<Command, Rejection> {
    if matches!(decided.method, Method::MultiNode | Method::SingleNode) && !consolidating(view) {
        return Err(Rejection::Scheduling);
    }
    let mut budget = Allowance::new(view, decided.reason);
    let still = |n: &NodeView| n.disruptable && policy_allows(view, n, decided.reason);
    if decided.method == Method::Emptiness {
        let mut over_budget = false;
        let candidates: Vec<usize> = (decided.candidates.iter().copied())
            .filter(|i| {
                let n = &view.nodes[*i];
                let allowed = still(n) && n.pods.is_empty();
                let within = allowed && budget.take(n);
                over_budget |= allowed && !within;
                within
            })
            .collect();
        if candidates.is_empty() {
            return Err(if over_budget {
                Rejection::Budget
            } else {
                Rejection::Churn
            });
        }
        let savings = candidates
            .iter()
            .map(|i| view.nodes[*i].price_per_hour)
            .sum();
        return Ok(Command {
            reason: decided.reason,
            method: Method::Emptiness,
            candidates,
            replacements: Vec::new(),
            savings,
            terminate_first: None,
        });
    }
    let candidates = &decided.candidates;
    let launch = decided.replacements > 0;
    for i in candidates {
        let n = &view.nodes[*i];
        let backoff = launch && n.replace_backoff && decided.method != Method::Drift;
        if !still(n) || backoff || (decided.method == Method::Drift && !n.drifted) {
            return Err(Rejection::Churn);
        }
        if !budget.take(n) {
            return Err(Rejection::Budget);
        }
    }
    let pods: Vec<usize> = (candidates.iter())
        .flat_map(|i| view.nodes[*i].pods.iter().copied())
        .collect();
    // only the candidates' pods move: the session compiles those alone
    let replacements = place_elsewhere(view, &view.node_pools, catalog, candidates, &pods, launch);
    if let (Method::Drift, [node]) = (decided.method, &candidates[..]) {
        return Ok(replaced_by(
            view,
            *node,
            replacements.ok_or(Rejection::Scheduling)?,
            decided.reason,
            Method::Drift,
        ));
    }
    let price: f64 = candidates
        .iter()
        .map(|i| view.nodes[*i].price_per_hour)
        .sum();
    let worth = Worth::new(view);
    let found = replacements
        .filter(|r| r.len() == decided.replacements)
        .and_then(|r| {
            if launch {
                narrow(view, candidates, r).ok()
            } else {
                Some((r, price))
            }
        })
        .filter(|(_, savings)| worth.approves(candidates, *savings));
    // a split was planned on capped NodePools: it is checked the same way again
    let found = match (found, &candidates[..]) {
        (None, [node]) if decided.method == Method::SingleNode => {
            split_saving(view, *node, catalog).filter(|(r, savings)| {
                r.len() == decided.replacements && worth.approves(candidates, *savings)
            })
        }
        (found, _) => found,
    };
    let (replacements, savings) = found.ok_or(Rejection::Scheduling)?;
    Ok(Command {
        reason: decided.reason,
        method: decided.method,
        candidates: candidates.clone(),
        replacements,
        savings,
        terminate_first: None,
    })
}

/// What [`revalidate`] checks again: a command as it was decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    /// Why it was decided.
    pub reason: DisruptionReason,
    /// The method that found it.
    pub method: Method,
    /// Its candidates (indices into the current view's nodes).
    pub candidates: Vec<usize>,
    /// How many new nodes it was to launch.
    pub replacements: usize,
}

/// A single-node replacement, or the split of the same node when that saves more.
fn split_if_cheaper(
    view: &ClusterView<'_>,
    worth: &Worth<'_>,
    single: Command,
    catalog: &mut Catalog,
) -> Command {
    let [node] = single.candidates[..] else {
        return single;
    };
    let split = split_saving(view, node, catalog).filter(|(_, savings)| {
        *savings > single.savings + 1e-9 && worth.approves(&[node], *savings)
    });
    match split {
        Some((replacements, savings)) => Command {
            replacements,
            savings,
            ..single
        },
        None => single,
    }
}

/// Compiles the view once into a session, new nodes launching from `node_pools`, and asks
/// `questions` of it.
fn with_session<R>(
    view: &ClusterView<'_>,
    node_pools: &[NodePoolInput],
    catalog: &mut Catalog,
    questions: impl FnOnce(&mut Session<'_>) -> R,
) -> R {
    let movable = Movable {
        pods: &view.pods,
        requests: &view.requests,
        terms: &view.terms,
    };
    with_session_of(view, node_pools, movable, catalog, questions)
}

/// The pods a session may move, with their requests (pod indices in its answers are
/// positions here).
#[derive(Clone, Copy)]
struct Movable<'a, 'p> {
    pods: &'a [&'p Pod],
    requests: &'a [Resources],
    terms: &'a [u64],
}

/// [`with_session`] with only `movable` compiled as pods that may move.
fn with_session_of<R>(
    view: &ClusterView<'_>,
    node_pools: &[NodePoolInput],
    movable: Movable<'_, '_>,
    catalog: &mut Catalog,
    questions: impl FnOnce(&mut Session<'_>) -> R,
) -> R {
    let nodes: Vec<ExistingNode> = view.nodes.iter().map(|n| n.node.clone()).collect();
    let bound = view.bound_pods();
    let problem = Problem {
        nodes: &nodes,
        bound_pods: &bound,
        daemonsets: view.daemonsets,
        requests: movable.requests,
        terms: movable.terms,
        options: view.options,
        ..Problem::new(node_pools, &[])
    };
    let mut session = Session::with_catalog(&problem, movable.pods, catalog);
    questions(&mut session)
}

/// What consolidating one node on its own would come to, budgets and policies aside: how
/// `kerf explain node` tells why a node is kept.
#[derive(Clone, Debug, PartialEq)]
pub enum Alone {
    /// Its pods fit on the other nodes: it could be deleted.
    Deletable,
    /// One strictly cheaper node could take its pods.
    Replaceable {
        /// The replacement's cheapest instance type.
        instance_type: String,
        /// Its price per hour.
        price_per_hour: f64,
    },
    /// A pod fits nowhere, not even on a new node: the pod and why.
    PodsDoNotFit {
        /// The pod's index in [`ClusterView::pods`].
        pod: usize,
        /// Why, per NodePool.
        reasons: Vec<kerf_scheduling::Reason>,
    },
    /// Its pods would need this many new nodes.
    NeedsNodes(usize),
    /// Smaller nodes (or another size) than Karpenter's packing picks would take its pods
    /// for less.
    Split {
        /// The new nodes' cheapest instance types.
        instance_types: Vec<String>,
        /// What they cost together per hour.
        price_per_hour: f64,
    },
    /// The cheapest replacement costs as much or more.
    NotCheaper {
        /// The replacement's cheapest instance type.
        instance_type: String,
        /// How it would be bought.
        capacity_type: String,
        /// Its price per hour.
        price_per_hour: f64,
    },
    /// A spot node would be replaced by spot, with SpotToSpotConsolidation off.
    SpotToSpotOff,
    /// Spot to spot is on, but too few cheaper instance types are offered.
    SpotToSpotTooFew {
        /// How many are cheaper.
        cheaper: usize,
    },
    /// The cheaper instance types leave a NodePool minValues unmet.
    MinValues {
        /// The requirement's key.
        key: String,
        /// How many distinct values the cheaper types keep.
        left: usize,
        /// How many it asks.
        min: u32,
    },
}

/// Consolidates `node` alone, as single-node consolidation would (see [`Alone`]), and
/// where that finds no cheaper node, as a split would.
pub fn alone(view: &ClusterView<'_>, node: usize) -> Alone {
    let single = alone_single(view, node);
    if !matches!(single, Alone::NeedsNodes(_) | Alone::NotCheaper { .. }) {
        return single;
    }
    match split_saving(view, node, &mut Catalog::default()) {
        Some((replacements, savings)) => Alone::Split {
            instance_types: replacements
                .iter()
                .map(|r| r.launch.instance_type.clone())
                .collect(),
            price_per_hour: view.nodes[node].price_per_hour - savings,
        },
        None => single,
    }
}

fn alone_single(view: &ClusterView<'_>, node: usize) -> Alone {
    let n = &view.nodes[node];
    with_session(view, &view.node_pools, &mut Catalog::default(), |session| {
        if session
            .try_remove(&[node], &n.pods, false)
            .unschedulable
            .is_empty()
        {
            return Alone::Deletable;
        }
        let decision = session.try_remove(&[node], &n.pods, true);
        if let Some(u) = decision.unschedulable.first() {
            return Alone::PodsDoNotFit {
                pod: u.pod,
                reasons: u.reasons.clone(),
            };
        }
        let nodes = decision.nodeclaims;
        let [r] = nodes.as_slice() else {
            let count = nodes.len();
            return match narrow(view, &[node], nodes) {
                Ok((nodes, savings)) => Alone::Split {
                    instance_types: (nodes.iter())
                        .map(|r| r.launch.instance_type.clone())
                        .collect(),
                    price_per_hour: n.price_per_hour - savings,
                },
                Err(_) => Alone::NeedsNodes(count),
            };
        };
        let planned = r.launch.clone();
        match narrow(view, &[node], nodes) {
            Ok((nodes, _)) => Alone::Replaceable {
                instance_type: nodes[0].launch.instance_type.clone(),
                price_per_hour: nodes[0].launch.price_per_hour,
            },
            Err(Refused::SpotToSpotOff) => Alone::SpotToSpotOff,
            Err(Refused::SpotToSpotTooFew(cheaper)) => Alone::SpotToSpotTooFew { cheaper },
            Err(Refused::MinValues(key, left, min)) => Alone::MinValues { key, left, min },
            Err(Refused::NotCheaper) => Alone::NotCheaper {
                instance_type: planned.instance_type,
                capacity_type: planned.capacity_type,
                price_per_hour: planned.price_per_hour,
            },
        }
    })
}

/// Every reason a NodePool's budgets may name, in the order passes report them.
pub const BUDGET_REASONS: [DisruptionReason; 4] = [
    DisruptionReason::Empty,
    DisruptionReason::Drifted,
    DisruptionReason::Underutilized,
    DisruptionReason::Unhealthy,
];

/// Nodes each disruption reason could act on now, budgets aside (Karpenter's
/// `karpenter_voluntary_disruption_eligible_nodes`).
pub fn eligible(view: &ClusterView<'_>) -> [(DisruptionReason, usize); 4] {
    BUDGET_REASONS.map(|r| {
        let n = view
            .nodes
            .iter()
            .filter(|n| match r {
                // repair ignores what blocks voluntary disruption (see `repair`)
                DisruptionReason::Unhealthy => n.repair.is_some(),
                _ => {
                    n.disruptable
                        && policy_allows(view, n, r)
                        && match r {
                            DisruptionReason::Empty => n.pods.is_empty(),
                            DisruptionReason::Drifted => n.drifted,
                            _ => !n.pods.is_empty(),
                        }
                }
            })
            .count();
        (r, n)
    })
}

fn policy_allows(view: &ClusterView<'_>, n: &NodeView, reason: DisruptionReason) -> bool {
    let Some(p) = n.node_pool else { return false };
    let policy = view.node_pool_objects[p]
        .spec
        .disruption
        .consolidation_policy;
    match reason {
        DisruptionReason::Empty | DisruptionReason::Underutilized => {
            n.consolidatable && policy_permits(policy, reason)
        }
        DisruptionReason::Drifted | DisruptionReason::Unhealthy => true,
    }
}

/// Whether a NodePool's consolidation policy lets a node be disrupted for `reason` once
/// consolidateAfter has run out: `WhenEmpty` takes only empty nodes.
pub fn policy_permits(policy: ConsolidationPolicy, reason: DisruptionReason) -> bool {
    reason != DisruptionReason::Underutilized || policy != ConsolidationPolicy::WhenEmpty
}

/// Disruptions left per NodePool for one reason, as one pass spends them.
struct Allowance<'v> {
    view: &'v ClusterView<'v>,
    reason: DisruptionReason,
    used: BTreeMap<usize, usize>,
}

impl<'v> Allowance<'v> {
    fn new(view: &'v ClusterView<'v>, reason: DisruptionReason) -> Allowance<'v> {
        Allowance {
            view,
            reason,
            used: BTreeMap::new(),
        }
    }

    fn has_room(&self, n: &NodeView) -> bool {
        let Some(p) = n.node_pool else { return false };
        let allowed = self
            .view
            .allowed
            .get(&(p, self.reason))
            .copied()
            .unwrap_or(0);
        self.used.get(&p).copied().unwrap_or(0) < allowed
    }

    fn take(&mut self, n: &NodeView) -> bool {
        if !self.has_room(n) {
            return false;
        }
        if let Some(p) = n.node_pool {
            *self.used.entry(p).or_insert(0) += 1;
        }
        true
    }
}

fn empty(view: &ClusterView<'_>) -> Option<Command> {
    let mut budget = Allowance::new(view, DisruptionReason::Empty);
    let mut candidates = Vec::new();
    let mut savings = 0.0;
    for (i, n) in view.nodes.iter().enumerate() {
        if n.disruptable
            && n.pods.is_empty()
            && policy_allows(view, n, DisruptionReason::Empty)
            && budget.take(n)
        {
            candidates.push(i);
            savings += n.price_per_hour;
        }
    }
    (!candidates.is_empty()).then_some(Command {
        reason: DisruptionReason::Empty,
        method: Method::Emptiness,
        candidates,
        replacements: Vec::new(),
        savings,
        terminate_first: None,
    })
}

/// The replacements of a removal when every pod found a place.
fn placed(decision: Decision) -> Option<Vec<PlannedNodeClaim>> {
    decision
        .unschedulable
        .is_empty()
        .then_some(decision.nodeclaims)
}

/// Node repair, first of the methods: the unhealthy node longest past due (then the one
/// cheapest to disrupt, then by name) rebooted, or replaced if its pods fit elsewhere or on
/// replacements, within the NodePool's `Unhealthy` budget, one per pass.
fn repair(view: &ClusterView<'_>, session: &mut Session<'_>) -> Option<Command> {
    let mut order: Vec<(usize, RepairView)> = (view.nodes.iter().enumerate())
        .filter_map(|(i, n)| Some((i, n.repair?)))
        .collect();
    order.sort_by(|(a, ra), (b, rb)| {
        let (x, y) = (&view.nodes[*a], &view.nodes[*b]);
        rb.score
            .total_cmp(&ra.score)
            .then(x.disruption_cost.total_cmp(&y.disruption_cost))
            .then_with(|| x.node.name.cmp(&y.node.name))
    });
    let budget = Allowance::new(view, DisruptionReason::Unhealthy);
    for (i, r) in order {
        let n = &view.nodes[i];
        if r.initialized && !budget.has_room(n) {
            continue;
        }
        if r.reboot {
            return Some(Command {
                reason: DisruptionReason::Unhealthy,
                method: Method::Reboot,
                candidates: vec![i],
                replacements: Vec::new(),
                savings: 0.0,
                terminate_first: None,
            });
        }
        if let Some(c) = replace_node(
            view,
            session,
            i,
            DisruptionReason::Unhealthy,
            Method::Repair,
        ) {
            return Some(c);
        }
    }
    None
}

fn drift(view: &ClusterView<'_>, session: &mut Session<'_>) -> Option<Command> {
    let mut budget = Allowance::new(view, DisruptionReason::Drifted);
    for (i, n) in view.nodes.iter().enumerate() {
        if !(n.disruptable && n.drifted && budget.take(n)) {
            continue;
        }
        // drifted nodes are replaced even when that costs more
        if let Some(c) = replace_node(view, session, i, DisruptionReason::Drifted, Method::Drift) {
            return Some(c);
        }
    }
    None
}

/// Node `i` replaced whatever it costs (drift, repair): its pods placed on the other nodes
/// and new ones, if they all can be; else, under the method's terminate-first gate, deleted
/// first when its own capacity reservation's slot would take them ([`terminate_first`]).
fn replace_node(
    view: &ClusterView<'_>,
    session: &mut Session<'_>,
    i: usize,
    reason: DisruptionReason,
    method: Method,
) -> Option<Command> {
    match placed(session.try_remove(&[i], &view.nodes[i].pods, true)) {
        Some(replacements) => Some(replaced_by(view, i, replacements, reason, method)),
        None => terminate_first(view, i, reason, method),
    }
}

/// Which methods may delete a node before its replacement exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TerminateFirst {
    /// `TerminateFirstDrift`.
    pub drift: bool,
    /// `TerminateFirstRepair`.
    pub repair: bool,
}

/// Karpenter's terminate-first reason for a node whose replacement needs its own slot in a
/// full capacity reservation.
pub const NO_RESERVED_CAPACITY: &str = "no-reserved-capacity";

/// A drifted or unhealthy reserved node whose pods fit nowhere while it holds its slot in a
/// full capacity reservation, as Karpenter's second simulation finds it: with that slot
/// given back to the reservation, the pods fit (on the other nodes and new ones); then the
/// node is deleted first, and provisioning launches into the freed slot.
fn terminate_first(
    view: &ClusterView<'_>,
    i: usize,
    reason: DisruptionReason,
    method: Method,
) -> Option<Command> {
    let gate = match method {
        Method::Drift => view.terminate_first.drift,
        Method::Repair => view.terminate_first.repair,
        _ => false,
    };
    let n = &view.nodes[i];
    let reservation =
        (n.node.labels.get(labels::CAPACITY_RESERVATION_ID)).filter(|id| !id.is_empty())?;
    if !gate || n.capacity_type != crate::cluster::CapacityType::Reserved {
        return None;
    }
    let credited: Vec<NodePoolInput> = (view.node_pools.iter())
        .map(|np| NodePoolInput {
            instance_types: credit(&np.instance_types, reservation),
            ..np.clone()
        })
        .collect();
    // a second compile, rare (a reserved node whose pods fit nowhere else)
    with_session(view, &credited, &mut Catalog::default(), |session| {
        placed(session.try_remove(&[i], &n.pods, true))
    })?;
    Some(Command {
        reason,
        method,
        candidates: vec![i],
        replacements: Vec::new(),
        savings: n.price_per_hour,
        terminate_first: Some(NO_RESERVED_CAPACITY),
    })
}

/// The instance types with one more slot in the reservation `id` (an offering unavailable
/// stays so).
fn credit(types: &Arc<[InstanceTypeOption]>, id: &str) -> Arc<[InstanceTypeOption]> {
    (types.iter())
        .map(|t| {
            let mut t = t.clone();
            for o in &mut t.offerings {
                if let Some(r) = o.reservation.as_mut().filter(|r| r.id == id) {
                    r.capacity += 1;
                }
            }
            t
        })
        .collect()
}

/// Node `i` replaced by `replacements` (none for a deletion), with what that saves.
fn replaced_by(
    view: &ClusterView<'_>,
    i: usize,
    replacements: Vec<PlannedNodeClaim>,
    reason: DisruptionReason,
    method: Method,
) -> Command {
    let cost: f64 = replacements.iter().map(|r| r.launch.price_per_hour).sum();
    Command {
        reason,
        method,
        candidates: vec![i],
        savings: view.nodes[i].price_per_hour - cost,
        terminate_first: None,
        replacements,
    }
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

/// [`disruption_order`] less the nodes multi-node consolidation may no longer take
/// ([`NodeView::multi_node`]).
fn multi_node_order(view: &ClusterView<'_>) -> Vec<usize> {
    let mut order = disruption_order(view);
    order.retain(|i| view.nodes[*i].multi_node);
    order
}

fn delete_many(
    view: &ClusterView<'_>,
    worth: &Worth<'_>,
    session: &mut Session<'_>,
) -> Option<Command> {
    // free room per node, kept current as pods move, for the cheap bound before each try
    let mut room = Room::new(view);
    let mut budget = Allowance::new(view, DisruptionReason::Underutilized);
    let mut chosen = Vec::new();
    let mut savings = 0.0;
    for i in multi_node_order(view) {
        let n = &view.nodes[i];
        // a deletion's score is its best: one that passes alone passes in any set of them
        if !budget.has_room(n) || !worth.can_pass(i) || !room.fits_elsewhere(i) {
            continue;
        }
        let decision = session.try_remove(&[i], &n.pods, false);
        if decision.unschedulable.is_empty() {
            session.keep();
            budget.take(n);
            room.apply(i, &decision);
            chosen.push(i);
            savings += n.price_per_hour;
        }
    }
    session.undo();
    (!chosen.is_empty() && worth.approves(&chosen, savings)).then_some(Command {
        reason: DisruptionReason::Underutilized,
        method: Method::MultiNode,
        candidates: chosen,
        replacements: Vec::new(),
        savings,
        terminate_first: None,
    })
}

/// Free cpu and memory per node and the pods on it, as a pass moves pods around: a cheap
/// necessary condition before each question to the session.
struct Room<'v> {
    view: &'v ClusterView<'v>,
    free: Vec<(i64, i64)>,
    pods: Vec<Vec<usize>>,
    gone: Vec<bool>,
}

impl<'v> Room<'v> {
    fn new(view: &'v ClusterView<'v>) -> Room<'v> {
        Room {
            view,
            free: view
                .nodes
                .iter()
                .map(|n| {
                    let a = &n.node.allocatable;
                    let r = &n.node.requested;
                    (a.cpu_millis - r.cpu_millis, a.memory_bytes - r.memory_bytes)
                })
                .collect(),
            pods: view.nodes.iter().map(|n| n.pods.clone()).collect(),
            gone: vec![false; view.nodes.len()],
        }
    }

    /// Whether `node`'s pods could all move to the other nodes, by two relaxations of placing
    /// them: [`Room::fits_in_sum`] and [`Room::fits_by_size`]. A node that fails either cannot
    /// go (on the 10,000-pod day the count by size turns away 97 % of the deletions the
    /// session would refuse, which were 99 % of those asked).
    fn fits_elsewhere(&self, node: usize) -> bool {
        self.fits_in_sum(node) && self.fits_by_size(node)
    }

    /// The free cpu and memory of the nodes other than `node` still there. An over-committed
    /// resource has no room, as the solver sees it, but takes a pod that requests none of it.
    fn others(&self, node: usize) -> impl Iterator<Item = (i64, i64)> + '_ {
        (self.free.iter().enumerate())
            .filter(move |(k, _)| *k != node && !self.gone[*k])
            .map(|(_, &(c, m))| (c.max(0), m.max(0)))
    }

    /// The cpu and memory each pod on `node` requests.
    fn asked(&self, node: usize) -> impl Iterator<Item = (i64, i64)> + '_ {
        (self.pods[node].iter()).map(|p| {
            let r = &self.view.requests[*p];
            (r.cpu_millis, r.memory_bytes)
        })
    }

    /// The pods' total cpu and memory fit in the other nodes' free room.
    fn fits_in_sum(&self, node: usize) -> bool {
        let sum = |free: (i64, i64), asked: (i64, i64)| (free.0 + asked.0, free.1 + asked.1);
        let asked = self.asked(node).fold((0, 0), sum);
        let free = self.others(node).fold((0, 0), sum);
        asked.0 <= free.0 && asked.1 <= free.1
    }

    /// For each size of pod (cpu and memory requested) on `node`, the other nodes have room
    /// for as many whole pods of it, counted node by node, as there are.
    fn fits_by_size(&self, node: usize) -> bool {
        let mut sizes: Vec<(i64, i64)> = self.asked(node).collect();
        sizes.sort_unstable();
        sizes.chunk_by(|a, b| a == b).all(|same| {
            let (cpu, mem) = same[0];
            let need = same.len() as i64;
            let whole = |free: i64, asked: i64| if asked > 0 { free / asked } else { need };
            let mut room = 0;
            self.others(node).any(|(c, m)| {
                room += whole(c, cpu).min(whole(m, mem));
                room >= need
            })
        })
    }

    /// Records a kept removal of `node`.
    fn apply(&mut self, node: usize, decision: &Decision) {
        self.gone[node] = true;
        self.pods[node].clear();
        for e in &decision.existing {
            for p in &e.pods {
                let r = &self.view.requests[*p];
                self.free[e.node].0 -= r.cpu_millis;
                self.free[e.node].1 -= r.memory_bytes;
                self.pods[e.node].push(*p);
            }
        }
    }
}

/// The cheapest any NodePool could run some pods for, counting only cpu and memory: no
/// replacement can cost less. Each type's cheapest available offering, cheapest first, so
/// that a pass asking for candidate after candidate stops at the first type that fits.
struct CheapestPossible {
    /// (price per hour, allocatable cpu millis, allocatable memory bytes)
    types: Vec<(f64, i64, i64)>,
}

impl CheapestPossible {
    fn new(view: &ClusterView<'_>) -> CheapestPossible {
        let mut types: Vec<(f64, i64, i64)> = (view.node_pools.iter())
            .flat_map(|np| np.instance_types.iter())
            .filter_map(|t| {
                let price = (t.offerings.iter())
                    .filter(|o| o.available)
                    .map(|o| o.price_per_hour)
                    .fold(f64::MAX, f64::min);
                let a = &t.allocatable;
                (price < f64::MAX).then_some((price, a.cpu_millis, a.memory_bytes))
            })
            .collect();
        types.sort_by(|a, b| a.0.total_cmp(&b.0));
        CheapestPossible { types }
    }

    /// What `moving` (pod indices) could run for at least; `f64::MAX` when no type fits.
    fn of(&self, view: &ClusterView<'_>, moving: &[usize]) -> f64 {
        let (mut cpu, mut mem) = (0, 0);
        for p in moving {
            let r = &view.requests[*p];
            cpu += r.cpu_millis;
            mem += r.memory_bytes;
        }
        (self.types.iter())
            .find(|(_, c, m)| *c >= cpu && *m >= mem)
            .map_or(f64::MAX, |(price, _, _)| *price)
    }
}

/// Several nodes repacked at once onto cheaper new ones and the other nodes: the longest
/// prefix of the disruption order (within budget, no fixed cap) whose pods that costs less
/// for, found by binary search as Karpenter does (which allows one new node only);
/// deletions were already tried node by node.
fn replace_many(
    view: &ClusterView<'_>,
    worth: &Worth<'_>,
    session: &mut Session<'_>,
) -> Option<Command> {
    let mut budget = Allowance::new(view, DisruptionReason::Underutilized);
    let order: Vec<usize> = multi_node_order(view)
        .into_iter()
        .filter(|i| !view.nodes[*i].replace_backoff && budget.take(&view.nodes[*i]))
        .collect();
    let (mut lo, mut hi) = (2, order.len());
    let mut best = None;
    while lo <= hi {
        let mid = (lo + hi) / 2;
        let prefix = &order[..mid];
        let pods: Vec<usize> = prefix
            .iter()
            .flat_map(|i| view.nodes[*i].pods.iter().copied())
            .collect();
        // a repack leaves fewer nodes than it takes: swapping nodes for as many others
        // churns for little, and each launch more is one more that may fail
        let outcome = placed(session.try_remove(prefix, &pods, true))
            .filter(|r| r.len() == 1 || r.len() < prefix.len())
            .and_then(|r| narrow(view, prefix, r).ok())
            .filter(|(_, savings)| worth.approves(prefix, *savings));
        match outcome {
            Some((replacements, savings)) => {
                best = Some(Command {
                    reason: DisruptionReason::Underutilized,
                    method: Method::MultiNode,
                    candidates: prefix.to_vec(),
                    replacements,
                    savings,
                    terminate_first: None,
                });
                lo = mid + 1;
            }
            None => hi = mid - 1,
        }
    }
    session.undo();
    best
}

fn replace_one(
    view: &ClusterView<'_>,
    worth: &Worth<'_>,
    session: &mut Session<'_>,
) -> Option<Command> {
    let mut order = disruption_order(view);
    // the most expensive node has the most to save
    order.sort_by(|a, b| {
        view.nodes[*b]
            .price_per_hour
            .total_cmp(&view.nodes[*a].price_per_hour)
    });
    let budget = Allowance::new(view, DisruptionReason::Underutilized);
    let cheapest = CheapestPossible::new(view);
    for i in order {
        let n = &view.nodes[i];
        if !budget.has_room(n)
            || n.replace_backoff
            || !worth.can_pass(i)
            || cheapest.of(view, &n.pods) >= n.price_per_hour
        {
            continue;
        }
        let Some(replacements) = placed(session.try_remove(&[i], &n.pods, true)) else {
            continue;
        };
        let narrowed = narrow(view, &[i], replacements).ok();
        if let Some((replacements, savings)) = narrowed.filter(|(_, s)| worth.approves(&[i], *s)) {
            session.undo();
            return Some(single_node(i, replacements, savings));
        }
    }
    session.undo();
    None
}

/// Single-node consolidation alone, as Karpenter's packing finds it: the first disruptable
/// node, dearest first, whose pods a cheaper new capacity takes, never a split over nodes of
/// other sizes (the caller keeps only a move onto one new node). The
/// disruption pass asks it for a move kube-scheduler follows whatever order the pods come in
/// (every other node given no room), when its rehearsal refused the cheaper move; a split
/// is such a refused move more often than not (swarm seed 66157).
pub fn replace_alone(view: &ClusterView<'_>, catalog: &mut Catalog) -> Option<Command> {
    if !consolidating(view) {
        return None;
    }
    let worth = Worth::new(view);
    with_session(view, &view.node_pools, catalog, |session| {
        replace_one(view, &worth, session)
    })
}

/// How many candidates a pass works out a split for: each costs a linear program, and one
/// that finds room a session compiled over the whole cluster.
const SPLIT_TRIES: usize = 4;

/// The least share of a node's price its pods' LP bound must leave for a split to be
/// tried. The bound is fractional: closer than this, the packing found was the node again
/// (408 of 575 splits on the 10,000-pod day, on-demand nodes while spot ran out), and a
/// real split would save too little to be worth its disruption.
const SPLIT_MIN_SAVING: f64 = 0.01;

/// One node replaced by several smaller, cheaper ones, or by one of another size than
/// Karpenter's packing picks (Karpenter stops at "Can't remove without creating 2
/// candidates" and at its single cheapest replacement). Candidates are taken by what a
/// split could save at most, from the cheapest any type could run their cpu and memory
/// for; for each, the LP bound of its pods says whether a packing could save enough, and
/// if so its pods are placed again with each NodePool's types capped at the largest the
/// bound's optimum buys.
fn split(view: &ClusterView<'_>, worth: &Worth<'_>, catalog: &mut Catalog) -> Option<Command> {
    let budget = Allowance::new(view, DisruptionReason::Underutilized);
    let floor = UnitPrices::new(view);
    let mut order: Vec<(usize, f64)> = disruption_order(view)
        .into_iter()
        .filter_map(|i| {
            let n = &view.nodes[i];
            let most = n.price_per_hour - floor.of(view, &n.pods);
            (budget.has_room(n)
                && !n.replace_backoff
                && worth.can_pass(i)
                && view.min_savings.met(most, n.price_per_hour))
            .then_some((i, most))
        })
        .collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1));
    (order.into_iter().take(SPLIT_TRIES)).find_map(|(i, _)| {
        let (replacements, savings) = split_saving(view, i, catalog)?;
        (worth.approves(&[i], savings)).then(|| single_node(i, replacements, savings))
    })
}

/// Underutilized `node` replaced by `replacements`, saving `savings` per hour.
fn single_node(node: usize, replacements: Vec<PlannedNodeClaim>, savings: f64) -> Command {
    Command {
        reason: DisruptionReason::Underutilized,
        method: Method::SingleNode,
        candidates: vec![node],
        savings,
        terminate_first: None,
        replacements,
    }
}

/// A node's split ([`split_replacements`]) and what it saves, when it is allowed and
/// strictly cheaper than the node.
fn split_saving(
    view: &ClusterView<'_>,
    node: usize,
    catalog: &mut Catalog,
) -> Option<(Vec<PlannedNodeClaim>, f64)> {
    let replacements = split_replacements(view, node, catalog)?;
    narrow(view, &[node], replacements).ok()
}

/// The new nodes a node's pods would take (beside room on the other nodes) when each
/// NodePool's types are capped at the largest its pods' LP bound buys; none when the bound
/// is no cheaper than the node or the pods do not all find a place.
fn split_replacements(
    view: &ClusterView<'_>,
    node: usize,
    catalog: &mut Catalog,
) -> Option<Vec<PlannedNodeClaim>> {
    let n = &view.nodes[node];
    let pods: Vec<&Pod> = n.pods.iter().map(|p| view.pods[*p]).collect();
    let requests: Vec<Resources> = n.pods.iter().map(|p| view.requests[*p].clone()).collect();
    let terms: Vec<u64> = (n.pods.iter())
        .filter_map(|p| view.terms.get(*p).copied())
        .collect();
    // with SpotToSpotConsolidation off a spot node's replacements that may be spot are
    // refused (`narrow`): only NodePools that rule spot out can split it, and its split is
    // planned, and bounded, without spot offerings
    let pools = if !view.spot_to_spot && n.capacity_type == crate::cluster::CapacityType::Spot {
        let spot_ruled_out = |np: &NodePoolInput| {
            !kerf_scheduling::Requirements::from_api(&np.requirements)
                .get(labels::CAPACITY_TYPE)
                .has(labels::CAPACITY_TYPE_SPOT)
        };
        if !view.node_pools.iter().any(spot_ruled_out) {
            return None;
        }
        std::borrow::Cow::Owned(without_spot(&view.node_pools, catalog))
    } else {
        std::borrow::Cow::Borrowed(&view.node_pools[..])
    };
    let problem = Problem {
        daemonsets: view.daemonsets,
        requests: &requests,
        terms: &terms,
        options: view.options,
        ..Problem::new(&pools, &pods)
    };
    let bound = kerf_scheduling::cost_bound(&problem, catalog).ok()?;
    if bound.unplaceable > 0 || bound.per_hour >= n.price_per_hour * (1.0 - SPLIT_MIN_SAVING) {
        return None;
    }
    let capped = kerf_scheduling::capped_pools(&pools, &bound.largest);
    place_elsewhere(view, &capped, catalog, &[node], &n.pods, true)
}

/// Takes `nodes` away and places `pods` (view pod indices, theirs) on the other nodes and,
/// when `new_nodes`, on new ones launched from `node_pools`; the new nodes (their pods as
/// view indices), or none when a pod finds no place. Only `pods` are compiled as pods that
/// may move: the other nodes' pods count through their nodes' requests and as bound pods,
/// so this costs a fraction of a session over the whole cluster.
fn place_elsewhere(
    view: &ClusterView<'_>,
    node_pools: &[NodePoolInput],
    catalog: &mut Catalog,
    nodes: &[usize],
    pods: &[usize],
    new_nodes: bool,
) -> Option<Vec<PlannedNodeClaim>> {
    let shapes: Vec<&Pod> = pods.iter().map(|p| view.pods[*p]).collect();
    let requests: Vec<Resources> = pods.iter().map(|p| view.requests[*p].clone()).collect();
    let terms: Vec<u64> = (pods.iter())
        .filter_map(|p| view.terms.get(*p).copied())
        .collect();
    let moving: Vec<usize> = (0..pods.len()).collect();
    let movable = Movable {
        pods: &shapes,
        requests: &requests,
        terms: &terms,
    };
    let mut replacements = with_session_of(view, node_pools, movable, catalog, |s| {
        placed(s.try_remove(nodes, &moving, new_nodes))
    })?;
    for r in &mut replacements {
        for p in &mut r.pods {
            *p = pods[*p];
        }
    }
    Some(replacements)
}

/// The NodePools with their spot offerings taken out (and the types left with none), each
/// list the same one for as long as its NodePool's is ([`Catalog::without_spot`]), so the
/// types compiled for it are kept between passes.
fn without_spot(pools: &[NodePoolInput], catalog: &mut Catalog) -> Vec<NodePoolInput> {
    (pools.iter())
        .map(|np| NodePoolInput {
            instance_types: catalog.without_spot(&np.instance_types),
            ..np.clone()
        })
        .collect()
}

/// The least any offered type asks per millicore and per byte: what a node's pods could
/// run for at best, counting only cpu and memory, without solving anything.
struct UnitPrices {
    cpu: f64,
    memory: f64,
}

impl UnitPrices {
    fn new(view: &ClusterView<'_>) -> UnitPrices {
        let mut prices = UnitPrices {
            cpu: f64::MAX,
            memory: f64::MAX,
        };
        for t in view
            .node_pools
            .iter()
            .flat_map(|np| np.instance_types.iter())
        {
            let (cpu, memory) = (t.allocatable.cpu_millis, t.allocatable.memory_bytes);
            for o in t.offerings.iter().filter(|o| o.available) {
                if cpu > 0 {
                    prices.cpu = prices.cpu.min(o.price_per_hour / cpu as f64);
                }
                if memory > 0 {
                    prices.memory = prices.memory.min(o.price_per_hour / memory as f64);
                }
            }
        }
        prices
    }

    /// At least what `pods` (view pod indices) cost to run per hour.
    fn of(&self, view: &ClusterView<'_>, pods: &[usize]) -> f64 {
        let (mut cpu, mut memory) = (0.0, 0.0);
        for p in pods {
            cpu += view.requests[*p].cpu_millis as f64;
            memory += view.requests[*p].memory_bytes as f64;
        }
        let floor = (cpu * self.cpu).max(memory * self.memory);
        if floor.is_finite() { floor } else { f64::MAX }
    }
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::benchmark::BenchCluster;

    fn pod(name: String, (cpu_millis, memory_mib): (i64, i64)) -> Pod {
        let requests = serde_json::json!({"cpu": format!("{cpu_millis}m"), "memory": format!("{memory_mib}Mi")});
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
        }))
        .expect("a valid pod")
    }

    /// The room check only turns away deletions the session refuses too, before and after
    /// removals are kept: it is a relaxation, never a second opinion. Pods come in three
    /// sizes, so that whole pods and not only sums decide, and the count by size must turn
    /// away some nodes the sums let through.
    #[test]
    fn the_room_check_turns_away_only_deletions_the_session_refuses() {
        let sizes = [(1500, 1024), (700, 3072), (250, 512)];
        let (mut turned_away, mut by_size, mut kept) = (0, 0, 0);
        for seed in 0..100 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut c = BenchCluster::generate(0, seed);
            c.daemonsets.clear();
            for n in 0..4 {
                // 2 to 6 vCPUs, filled with pods until one does not fit or by chance
                let type_index = rng.random_range(1..6);
                let a = &c.node_pool_input.instance_types[type_index].allocatable;
                let (mut cpu, mut mib) = (a.cpu_millis, a.memory_bytes >> 20);
                let mut pods = Vec::new();
                while rng.random_range(0..12) > 0 {
                    let size = sizes[rng.random_range(0..3)];
                    if size.0 > cpu || size.1 > mib {
                        break;
                    }
                    (cpu, mib) = (cpu - size.0, mib - size.1);
                    pods.push(pod(format!("p{n}-{}", pods.len()), size));
                }
                c.add_node(&format!("node-{n}"), type_index, "test-zone-1", pods, true);
            }
            let view = c.view(4);
            // node by node (in index order, not `delete_many`'s), each removal the session
            // allows kept, as `delete_many` keeps them
            let mut room = Room::new(&view);
            with_session(
                &view,
                &view.node_pools,
                &mut Catalog::default(),
                |session| {
                    for (i, n) in view.nodes.iter().enumerate() {
                        let fits = room.fits_elsewhere(i);
                        turned_away += usize::from(!fits);
                        by_size += usize::from(!fits && room.fits_in_sum(i));
                        let decision = session.try_remove(&[i], &n.pods, false);
                        if !decision.unschedulable.is_empty() {
                            continue;
                        }
                        assert!(
                            fits,
                            "seed {seed}: node {i} turned away, yet the session moves its pods"
                        );
                        session.keep();
                        room.apply(i, &decision);
                        kept += 1;
                    }
                },
            );
        }
        assert!(
            by_size > 0 && turned_away > by_size && kept > 0,
            "the clusters exercise both relaxations and kept removals ({turned_away} turned \
             away, {by_size} by size alone, {kept} kept)"
        );
    }
}
