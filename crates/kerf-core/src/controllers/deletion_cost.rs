//! Karpenter's `PodDeletionCostManagement` feature gate: once a minute the nodes are ranked
//! the way consolidation would take them, and each node's ReplicaSet pods get that rank as
//! their `controller.kubernetes.io/pod-deletion-cost`, so that a Deployment scaled in
//! removes its pods from the nodes Kerf would empty next.
//!
//! As Karpenter v1.15 ranks them: only nodes with a NodeClaim count. Nodes already going
//! (being deleted, in a disruption command, or tainted `karpenter.sh/disrupted`) get
//! `-2147483648`. The others are sorted by savings ratio (their offering's price over 1 plus
//! their reschedulable pods' eviction costs), highest first, ties by name; those that could
//! not be disrupted (a blocker, a pod no ReplicaSet, Job or DaemonSet would make again outside
//! `kube-system`, a type the NodePool does not offer, `consolidateAfter: Never` unless
//! drifted) have the annotation removed, as have those past their NodePool's `Drifted`
//! (drifted nodes) or `Underutilized` budget. The rest, drifted first, get `-n + i` for the
//! `i`-th of `n`. Per minute, nodes already going are all written; of the others at most 50
//! nodes whose pods need a change.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::duration::NillableDuration;
use kerf_api::nodepool::DisruptionReason;

use std::sync::Arc;

use super::blockers::Wanted;
use super::desk::Desk;
use super::{Action, Controllers, Timer};
use crate::cluster::{PodOwner, PodRecord};
use crate::disruption::rules::{POD_DELETION_COST_ANNOTATION, eviction_cost};
use crate::metrics::families;

/// How often the nodes are ranked again (Karpenter: a minute).
pub const DELETION_COST_INTERVAL: Duration = Duration::from_secs(60);

/// How soon a ranking put off while the watches are not whole is tried again.
const UNSYNCED_RETRY: Duration = Duration::from_secs(1);

/// At most this many nodes (not already going) have their pods rewritten a minute.
pub const MAX_NODES_PER_CYCLE: usize = 50;

/// The controllers that make a pod again elsewhere when it is deleted: a pod under any other
/// (or none) keeps its node from being ranked.
const RECREATING: [(&str, &str); 3] = [
    ("apps/v1", "ReplicaSet"),
    ("batch/v1", "Job"),
    ("apps/v1", "DaemonSet"),
];

/// What the ranking keeps between minutes: the NodePools its gauge has a series for.
#[derive(Default)]
pub(super) struct DeletionCosts {
    gauged: BTreeSet<String>,
}

/// Where a node lands in the ranking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    /// Already going: its pods go first.
    Going,
    /// Drifted, within its NodePool's `Drifted` budget.
    Drifted,
    /// Within its NodePool's `Underutilized` budget.
    Normal,
    /// Not to be disrupted now: the annotation is removed.
    Cleanup,
}

/// One node as ranked: its name, NodePool and the value its ReplicaSet pods get (`None`:
/// removed).
#[derive(Clone, Debug, PartialEq)]
pub struct Ranked {
    /// The node.
    pub node: String,
    /// Its NodePool, the gauge's label.
    pub node_pool: String,
    /// The pod deletion cost its ReplicaSet pods get, or `None` for the annotation removed.
    pub cost: Option<i32>,
    /// Whether it was already going (written whatever the per-minute cap).
    pub going: bool,
}

/// Whether a pod's controller is this group-version and kind.
fn controlled_by(pod: &Pod, api_version: &str, kind: &str) -> bool {
    (pod.metadata.owner_references.iter().flatten())
        .any(|o| o.controller == Some(true) && o.api_version == api_version && o.kind == kind)
}

/// Whether a pod keeps its node from being ranked: outside `kube-system`, and no controller
/// that makes it again elsewhere.
fn pins(pod: &Pod) -> bool {
    pod.metadata.namespace.as_deref() != Some("kube-system")
        && !RECREATING.iter().any(|(v, k)| controlled_by(pod, v, k))
}

/// Whether a pod would be made again elsewhere were its node to go, as Karpenter counts a
/// node's reschedulable pods: running or pending (a StatefulSet's also while terminating),
/// not a DaemonSet's, not a static pod.
fn reschedulable(p: &PodRecord) -> bool {
    let terminal = matches!(p.phase.as_deref(), Some("Succeeded" | "Failed"));
    let stateful = controlled_by(&p.shape, "apps/v1", "StatefulSet");
    let mirror = (p.shape.metadata.owner_references.iter().flatten()).any(|o| o.kind == "Node");
    !terminal && (!p.terminating || stateful) && p.owner != PodOwner::DaemonSet && !mirror
}

/// The value a ReplicaSet pod is to have, as its annotation reads.
fn annotated(pod: &Pod) -> Option<&str> {
    (pod.metadata.annotations.as_ref())
        .and_then(|a| a.get(POD_DELETION_COST_ANNOTATION))
        .map(String::as_str)
}

impl Controllers {
    /// Ranks the nodes and asks for the pod annotations that differ; again in a minute.
    pub(super) fn rank_deletion_costs(&mut self, now: Duration) {
        if self.desk.unsynced_since.is_some() {
            self.desk.at(now + UNSYNCED_RETRY, Timer::DeletionCost);
            return;
        }
        self.desk
            .at(now + DELETION_COST_INTERVAL, Timer::DeletionCost);
        let overlaid = self.desk.overlay_evaluation(now).by_pool;
        let g = self.gather();
        let ranked = ranking(&self.desk, &self.disruption, &g, &overlaid, now);
        drop(g);
        self.deletion_cost.write_ranks(&mut self.desk, &ranked);
    }
}

impl DeletionCosts {
    /// Asks for the pod annotations the ranking says and the pods do not hold yet (the nodes
    /// going first, then as many ranked and cleared ones as a cycle writes), and sets each
    /// NodePool's gauge of nodes with writes pending.
    fn write_ranks(&mut self, desk: &mut Desk, ranked: &[Ranked]) {
        let mut by_node: BTreeMap<&str, Vec<(&String, &PodRecord)>> = BTreeMap::new();
        for (k, p) in &desk.cluster.pods {
            if let Some(n) = &p.node
                && controlled_by(&p.shape, "apps/v1", "ReplicaSet")
            {
                by_node.entry(n.as_str()).or_default().push((k, p));
            }
        }
        let mut writes = Vec::new();
        let mut unchanged = 0;
        let mut per_pool: BTreeMap<String, usize> = BTreeMap::new();
        // the nodes going are all written; the ranked ones take the cap first, the
        // cleanups what is left of it
        let mut ranked_written = 0;
        let mut cleanups_written = 0;
        for r in ranked {
            let room = match (r.going, r.cost) {
                (true, _) => true,
                (false, Some(_)) => ranked_written < MAX_NODES_PER_CYCLE,
                (false, None) => ranked_written + cleanups_written < MAX_NODES_PER_CYCLE,
            };
            if !room {
                continue;
            }
            let want = r.cost.map(|c| c.to_string());
            let pods = by_node.get(r.node.as_str()).map_or(&[][..], Vec::as_slice);
            let differ = |p: &PodRecord| annotated(&p.shape) != want.as_deref();
            if !pods.iter().any(|(_, p)| differ(p)) {
                continue;
            }
            for (k, p) in pods {
                if differ(p) {
                    writes.push(Action::AnnotatePodDeletionCost {
                        pod: (*k).clone(),
                        cost: r.cost,
                    });
                } else {
                    unchanged += 1;
                }
            }
            *per_pool.entry(r.node_pool.clone()).or_default() += 1;
            match (r.going, r.cost) {
                (true, _) => {}
                (false, Some(_)) => ranked_written += 1,
                (false, None) => cleanups_written += 1,
            }
        }
        let spec = &families::POD_DELETION_COST_POD_ANNOTATION_WRITES;
        if unchanged > 0 {
            desk.metrics.add(spec, &["skipped_unchanged"], unchanged);
        }
        let gauge = &families::POD_DELETION_COST_NODES_WITH_PENDING_ANNOTATION_WRITES;
        for pool in std::mem::take(&mut self.gauged) {
            desk.metrics.remove(gauge, &[&pool]);
        }
        for (pool, n) in &per_pool {
            desk.metrics.set(gauge, &[pool], *n as f64);
        }
        self.gauged = per_pool.into_keys().collect();
        desk.actions.extend(writes);
    }
}

/// Every node with a NodeClaim, ranked (over the instance types as the NodePools offer
/// them, `overlaid`): those already going, then the drifted and the
/// others in budget by savings ratio, then those whose annotation is removed.
fn ranking(
    desk: &Desk,
    disruption: &super::disruption::Disruptions,
    g: &super::blockers::Gathered<'_>,
    overlaid: &BTreeMap<String, Arc<[kerf_scheduling::InstanceTypeOption]>>,
    now: Duration,
) -> Vec<Ranked> {
    let managed = desk.settings.pod_deletion_cost;
    let in_command: BTreeSet<&str> = (disruption.commands())
        .flat_map(|c| c.candidates.iter().map(String::as_str))
        .collect();
    let mut all_pods: BTreeMap<&str, Vec<&PodRecord>> = BTreeMap::new();
    for p in desk.cluster.pods.values() {
        if let Some(n) = &p.node {
            all_pods.entry(n.as_str()).or_default().push(p);
        }
    }
    let mut nodes: Vec<(f64, &str, &str, Group)> = Vec::new();
    for (name, n) in &desk.cluster.nodes {
        let Some(claim) = n.nodeclaim.as_deref() else {
            continue;
        };
        let Some(c) = desk.cluster.nodeclaims.get(claim) else {
            continue;
        };
        let pool = c.node_pool.as_str();
        let np = desk.cluster.node_pools.get(pool);
        let pods = all_pods.get(name.as_str()).map_or(&[][..], Vec::as_slice);
        // the type, zone and capacity type its node is labelled with, as launched
        let launched = c.launched.as_ref();
        let types = np.and_then(|np| {
            let class = &np.spec.template.spec.node_class_ref.name;
            (overlaid.get(pool))
                .or_else(|| desk.cluster.instance_types.get(class))
                .filter(|t| !t.is_empty())
        });
        let offered = launched.map(|l| (types?.iter()).find(|t| t.name == l.instance_type));
        let price = launched.zip(offered.flatten()).map_or(0.0, |(l, t)| {
            (t.offerings.iter())
                .find(|o| o.zone == l.zone && o.capacity_type == l.capacity_type.as_str())
                .map_or(0.0, |o| o.price_per_hour)
        });
        let cost = 1.0
            + (pods.iter())
                .filter(|p| reschedulable(p))
                .map(|p| eviction_cost(&p.shape, managed).max(0.0))
                .sum::<f64>();
        let going = c.deleting.is_some()
            || in_command.contains(name.as_str())
            || super::disruption::has_disrupted_taint(n);
        let group = if going {
            Group::Going
        } else if !disruption.blockers(desk, name, g, Wanted::First, now).is_empty()
            || pods.iter().any(|p| pins(&p.shape))
            // no NodePool, or its class offers no such type: nothing to rank it by
            || np.is_none()
            || matches!(offered, Some(None))
        {
            Group::Cleanup
        } else if c.drifted.is_some() && np.is_some_and(|np| np.spec.replicas.is_none()) {
            Group::Drifted
        } else if np.is_some_and(|np| {
            matches!(
                np.spec.disruption.consolidate_after,
                NillableDuration::Never
            )
        }) {
            Group::Cleanup
        } else {
            Group::Normal
        };
        nodes.push((price / cost, name, pool, group));
    }
    nodes.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let budgets = disruption.budgets_now(desk, now);
    let mut left: BTreeMap<(String, DisruptionReason), usize> = (budgets.iter())
        .map(|((pool, r), b)| {
            (
                (pool.to_string(), *r),
                b.allowed.saturating_sub(b.consuming),
            )
        })
        .collect();
    let mut within = |pool: &str, reason: DisruptionReason| {
        let n = left.get_mut(&(pool.to_string(), reason));
        match n {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    };
    let of = |group: Group| {
        (nodes.iter())
            .filter(move |n| n.3 == group)
            .map(|&(_, name, pool, _)| (name, pool))
    };
    let going: Vec<_> = of(Group::Going).collect();
    // each budget is spent in savings order; what it cannot take is cleaned up after
    // the rest, drifted first
    let (drifted, drift_overflow): (Vec<_>, Vec<_>) =
        of(Group::Drifted).partition(|(_, pool)| within(pool, DisruptionReason::Drifted));
    let (normal, normal_overflow): (Vec<_>, Vec<_>) =
        of(Group::Normal).partition(|(_, pool)| within(pool, DisruptionReason::Underutilized));
    let cleanup = of(Group::Cleanup)
        .chain(drift_overflow)
        .chain(normal_overflow);
    let ranked: Vec<_> = drifted.into_iter().chain(normal).collect();
    let n = ranked.len();
    let row = |(name, pool): (&str, &str), cost: Option<i32>, going: bool| Ranked {
        node: name.to_string(),
        node_pool: pool.to_string(),
        cost,
        going,
    };
    let rank = |i: usize| {
        let below = i64::try_from(n).unwrap_or(i64::MAX) - i64::try_from(i).unwrap_or(0);
        i32::try_from(-below).unwrap_or(i32::MIN)
    };
    (going.into_iter().map(|r| row(r, Some(i32::MIN), true)))
        .chain(
            ranked
                .into_iter()
                .enumerate()
                .map(|(i, r)| row(r, Some(rank(i)), false)),
        )
        .chain(cleanup.map(|r| row(r, None, false)))
        .collect()
}
