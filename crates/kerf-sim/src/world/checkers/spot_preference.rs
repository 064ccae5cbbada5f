//! The spot-preference invariant: once the cluster has settled, no on-demand node of a
//! lower-weight NodePool could be replaced by a strictly cheaper node of the
//! highest-weight NodePool its pods accept, unless that capacity ran out lately. That is
//! how work that fell back to on-demand during a spot crunch returns to spot.
//!
//! The oracle reads the stored Nodes, NodeClaims, pods, NodePools, DaemonSets, NodeOverlays
//! and PodDisruptionBudgets, the cloud's instances and its catalog itself; it calls neither
//! Kerf's solver nor its consolidation, nor reads Kerf's records. It only speaks up
//! when Karpenter would certainly act: the node is free to disrupt (consolidation policy,
//! consolidateAfter not Never, budget, some pods and no do-not-disrupt pod, no PodDisruptionBudget, no bare pod, no inter-pod
//! affinity, no ScheduleAnyway spread, which may be skewed now and which the move is
//! simulated with as required), the replacement is one node in the node's own zone (so no
//! other spread or anti-affinity rule can object), no pod would go on its own to a heavier
//! NodePool than the one all of them accept (counting that NodePool's offerings whose
//! capacity ran out, which the controllers may not know of), and the target NodePool has no
//! minValues.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::duration::NillableDuration;
use kerf_api::nodepool::{ConsolidationPolicy, DisruptionReason};
use kerf_api::{NodePool, Operator, labels};
use kerf_aws::instance_type::InstanceType;
use kerf_core::cluster::PodOwner;
use kerf_core::controllers::disruption::{
    PASS_INTERVAL, REPLACE_BACKOFF, REPLACE_BACKOFF_MAX, VALIDATION_DELAY,
};
use kerf_core::unavailable::TTL;

use super::oracle::budget_room;
use super::{Checkers, Sight, SimError, StoredNodeClaim, allocatable_amounts};
use crate::clock::EPOCH_UNIX;
use crate::cloud::Instance;
use crate::kube_scheduler::{
    Amounts, add, node_affinity_matches, requests, selector_matches, untolerated,
};

/// Which offerings count as available: the scenario's capacity windows are the truth, and
/// the controllers know only what failed launches told them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lately {
    /// Leave out offerings whose capacity ran out lately (the controllers may know).
    RanOut,
    /// Count every offering (the controllers may not know it ran out).
    Unknown,
}

/// A cheaper home the oracle found for an on-demand node's pods.
struct Better {
    pool: String,
    instance_type: String,
    capacity_type: &'static str,
    price: f64,
}

impl Checkers {
    /// Runs at the convergence check's settled points under `--check`.
    pub(super) fn check_spot_preference(&mut self, seen: &Sight<'_>) -> Result<(), SimError> {
        // a write the API server refused (a NodeClaim's deletion, say) is still on its way:
        // Kerf already counts it and the stored objects do not yet show it, so the check
        // waits until the operator's retries have none left
        if seen.writes_pending {
            return Ok(());
        }
        let on_demand: Vec<String> = (seen.api.nodes.iter())
            .filter(|(name, n)| {
                n.ready
                    && seen.instance_of_node(name).is_some_and(|(c, i)| {
                        c.deleting.is_none() && i.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND
                    })
            })
            .map(|(name, _)| name.clone())
            .collect();
        for node in on_demand {
            if self.backing_off(seen, &node) {
                continue;
            }
            if let Some(b) = self.cheaper_home(seen, &node) {
                return Err(seen.violation(format!(
                    "spot preference: on-demand node {node} could be replaced by a cheaper \
                     {} {} of nodepool {} (${:.4}/h), which its pods accept",
                    b.capacity_type, b.instance_type, b.pool, b.price
                )));
            }
        }
        Ok(())
    }

    /// Whether the node's disruption was given up lately: after the k-th time, Kerf does
    /// not replace it for 5 minutes doubled k-1 times, at most 2 hours (the book, docs/src/design.md), and a
    /// pass and the validation follow.
    fn backing_off(&self, seen: &Sight<'_>, node: &str) -> bool {
        let Some((times, last)) = self.rolled_back.get(node) else {
            return false;
        };
        let doubled = REPLACE_BACKOFF * 2u32.pow(times.saturating_sub(1).min(16));
        let wait = doubled.min(REPLACE_BACKOFF_MAX);
        seen.now < *last + wait + PASS_INTERVAL + VALIDATION_DELAY
    }

    /// A strictly cheaper single node of the highest-weight NodePool that could take all
    /// of `node`'s pods, when that NodePool outweighs the node's own.
    fn cheaper_home(&mut self, seen: &Sight<'_>, node: &str) -> Option<Better> {
        let n = seen.api.nodes.get(node)?;
        let (claim, instance) = seen.instance_of_node(node)?;
        let price = instance.price_per_hour;
        let own = seen.api.objects.node_pools.get(claim.pool()?)?;
        // a static NodePool's nodes are never disrupted (Karpenter v1.15, gate or not)
        if own.spec.replicas.is_some() || !self.disruptable(seen, node, own) {
            return None;
        }
        let pods: Vec<&Pod> = (seen.api.pods.values())
            .filter(|p| p.node.as_deref() == Some(node) && p.owner != PodOwner::DaemonSet)
            .map(|p| p.declared())
            .collect();
        if pods.is_empty() {
            // an empty node is deleted, not replaced: the convergence check's business
            return None;
        }
        let zone = n.labels.get(labels::ZONE)?.clone();
        if seen.spread_objects(&pods, &zone) {
            return None;
        }
        let mut needed = Amounts::new();
        for p in &pods {
            add(&mut needed, &requests(p));
        }
        let own_weight = own.spec.weight.unwrap_or(0);
        let mut pools: Vec<(i32, String, NodePool)> = (seen.api.objects.node_pools.iter())
            // nor does one launch a replacement
            .filter(|(_, np)| np.spec.replicas.is_none())
            .map(|(name, np)| (np.spec.weight.unwrap_or(0), name.clone(), np.clone()))
            .collect();
        pools.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let pods: Vec<Pod> = pods.into_iter().cloned().collect();
        // the first weight with a NodePool that can host the pods is where Karpenter's
        // simulation puts them; every NodePool of that weight must offer cheaper
        let mut top: Option<i32> = None;
        let mut found = None;
        for (weight, name, np) in pools {
            if top.is_some_and(|t| weight < t) {
                break;
            }
            let offers = seen.offers(&name, &np, &pods, &needed, &zone, Lately::RanOut);
            if offers.is_empty() {
                // a pod this heavier NodePool would take on its own goes there, pod by pod
                // as Karpenter places them, and the rest need a second node: no single
                // replacement (swarm seed 111019). Whether its capacity ran out is not
                // asked: the controllers learn that only from a launch that failed within
                // the cache's TTL, and without one they plan the pod there (seed 125653)
                if pods.iter().any(|p| {
                    let one = std::slice::from_ref(p);
                    !seen
                        .offers(&name, &np, one, &requests(p), &zone, Lately::Unknown)
                        .is_empty()
                }) {
                    return None;
                }
                continue;
            }
            top = Some(weight);
            if weight <= own_weight
                || np
                    .spec
                    .template
                    .spec
                    .requirements
                    .iter()
                    .any(|r| r.min_values.is_some())
            {
                return None;
            }
            // Karpenter prices a replacement's type as it would launch, not at the offering
            // found in this zone (swarm seed 375257)
            let mut priced = Vec::new();
            for b in offers {
                if let Some(worst) =
                    self.worst_launch_price(seen, &name, &np, &pods, &b.instance_type)
                {
                    priced.push(Better { price: worst, ..b });
                }
            }
            let cheapest = priced
                .into_iter()
                .min_by(|a, b| a.price.total_cmp(&b.price))?;
            if cheapest.price >= price {
                return None;
            }
            found.get_or_insert(cheapest);
        }
        found
    }

    /// Whether Karpenter may consolidate the node at all: its NodePool consolidates
    /// underutilized nodes and has budget left, and no pod on it pins it.
    fn disruptable(&self, seen: &Sight<'_>, node: &str, np: &NodePool) -> bool {
        if np.spec.disruption.consolidation_policy != ConsolidationPolicy::WhenEmptyOrUnderutilized
            || np.spec.disruption.consolidate_after == NillableDuration::Never
        {
            return false;
        }
        if seen.budget_left(np, DisruptionReason::Underutilized) == 0 {
            return false;
        }
        let respect = seen.scenario.spec.preference_policy == kerf_scheduling::Preferences::Respect;
        (seen.api.pods.values())
            .filter(|p| p.node.as_deref() == Some(node) && p.owner != PodOwner::DaemonSet)
            .all(|p| {
                let pod = p.declared();
                let pinned = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(labels::DO_NOT_DISRUPT));
                let guarded = seen.api.objects.pdbs.values().any(|b| {
                    b.metadata.namespace == pod.metadata.namespace
                        && b.spec
                            .as_ref()
                            .and_then(|s| s.selector.as_ref())
                            .is_some_and(|s| {
                                selector_matches(
                                    s,
                                    pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                                )
                            })
                });
                let affine = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.affinity.as_ref())
                    .is_some_and(|a| a.pod_affinity.is_some());
                // a ScheduleAnyway spread may be skewed now, and under PREFERENCE_POLICY=Respect
                // Karpenter simulates the move with it required (relaxed only when nothing
                // fits): the pods may need more than one new node (swarm seed 20363). Under
                // Ignore it drops such spreads up front, as this oracle's placement does
                let anyway = respect
                    && pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.topology_spread_constraints.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.when_unsatisfiable == "ScheduleAnyway")
                        });
                p.owner != PodOwner::None && !pinned && !guarded && !affine && !anyway
            })
    }
}

impl Checkers {
    /// What Karpenter's consolidation takes a replacement of NodePool `name` as type
    /// `instance_type` to cost (`WorstLaunchPrice`, by which it drops types no cheaper than
    /// the candidates): it assumes spot launches where the replacement may be spot, and
    /// pins it there, so the dearest spot offering its requirements and the pods allow, in
    /// any zone; else the dearest of them all. Read upward where Karpenter's view may
    /// differ (an offering that ran out lately, reserved capacity): the dearest offering
    /// allowed. `None` when an overlaid price cannot be told or nothing is allowed.
    fn worst_launch_price(
        &mut self,
        seen: &Sight<'_>,
        name: &str,
        np: &NodePool,
        pods: &[Pod],
        instance_type: &str,
    ) -> Option<f64> {
        let catalog = seen.catalog(&np.spec.template.spec.node_class_ref.name);
        let t = catalog.iter().find(|t| t.name() == instance_type)?;
        let since = seen.now.saturating_sub(TTL + PASS_INTERVAL);
        let windows = &seen.scenario.spec.cloud.insufficient_capacity;
        let (mut spot, mut all, mut spot_ran_out) = (None::<f64>, None::<f64>, false);
        for o in &t.offerings {
            let node_labels = candidate_labels(name, np, t, &o.zone, o.capacity_type);
            let allowed = (np.spec.template.spec.requirements.iter())
                .all(|r| holds(r.operator, &r.values, node_labels.get(&r.key)));
            if !allowed || !pods.iter().all(|p| node_affinity_matches(p, &node_labels)) {
                continue;
            }
            let price = seen.overlaid(&node_labels, o.price_per_hour)?;
            all = Some(all.map_or(price, |a| a.max(price)));
            if o.capacity_type == labels::CAPACITY_TYPE_SPOT {
                spot = Some(spot.map_or(price, |s| s.max(price)));
                spot_ran_out |= windows.iter().any(|w| {
                    let start = w.from.map_or(Duration::ZERO, |d| d.0).max(since);
                    start <= seen.now && w.covers(o.capacity_type, t.name(), &o.zone, start)
                });
            }
        }
        let reserved = (t.offerings.iter()).any(|o| {
            o.capacity_type != labels::CAPACITY_TYPE_SPOT
                && o.capacity_type != labels::CAPACITY_TYPE_ON_DEMAND
        });
        match spot {
            Some(worst) if !spot_ran_out && !reserved => Some(worst),
            _ => all,
        }
    }

    /// The instance just launched for `nodeclaim` is priced as its NodeOverlays say: the
    /// catalog's price of its offering, overlaid by this checker's own reading.
    pub(in crate::world) fn check_launch_price(
        &mut self,
        seen: &Sight<'_>,
        nodeclaim: &str,
    ) -> Result<(), SimError> {
        let Some((_, instance)) = seen.cloud.instances.values().find(|(c, _)| c == nodeclaim)
        else {
            return Ok(());
        };
        let instance = instance.clone();
        let Some(claim) = seen.api.nodeclaims.get(nodeclaim) else {
            return Ok(());
        };
        let class = claim.object.spec.node_class_ref.name.clone();
        let Some(pool) = claim.pool().map(str::to_string) else {
            return Ok(());
        };
        let Some(np) = seen.api.objects.node_pools.get(&pool).cloned() else {
            return Ok(());
        };
        let catalog = seen.catalog(&class);
        let Some(t) = catalog.iter().find(|t| t.name() == instance.instance_type) else {
            return Ok(());
        };
        let Some(o) = (t.offerings.iter())
            .find(|o| o.zone == instance.zone && o.capacity_type == instance.capacity_type)
        else {
            return Ok(());
        };
        let node_labels = candidate_labels(&pool, &np, t, &instance.zone, o.capacity_type);
        match seen.overlaid(&node_labels, o.price_per_hour) {
            Some(want) if (want - instance.price_per_hour).abs() > 1e-9 => {
                Err(seen.violation(format!(
                    "nodeclaim {nodeclaim} launched a {} {} in {} at ${:.4}/h; its \
                     NodeOverlays price it at ${want:.4}/h",
                    instance.capacity_type,
                    instance.instance_type,
                    instance.zone,
                    instance.price_per_hour
                )))
            }
            _ => Ok(()),
        }
    }
}

/// The labels a node of `t` launched by NodePool `pool` in `zone` would carry.
fn candidate_labels(
    pool: &str,
    np: &NodePool,
    t: &InstanceType,
    zone: &str,
    capacity_type: &str,
) -> BTreeMap<String, String> {
    let mut l = t.labels.clone();
    l.extend(np.spec.template.metadata.labels.clone());
    l.insert(labels::ZONE.into(), zone.into());
    l.insert(labels::CAPACITY_TYPE.into(), capacity_type.into());
    l.insert(labels::NODEPOOL.into(), pool.into());
    l
}

/// A NodePool requirement against one label value.
pub(super) fn holds(op: Operator, values: &[String], have: Option<&String>) -> bool {
    let number = |s: &str| s.parse::<i64>().ok();
    let compare = |f: fn(i64, i64) -> bool| match (
        have.and_then(|h| number(h)),
        values.first().and_then(|v| number(v)),
    ) {
        (Some(h), Some(b)) => f(h, b),
        _ => false,
    };
    match op {
        Operator::In => have.is_some_and(|h| values.contains(h)),
        Operator::NotIn => have.is_none_or(|h| !values.contains(h)),
        Operator::Exists => have.is_some(),
        Operator::DoesNotExist => have.is_none(),
        Operator::Gt => compare(|h, b| h > b),
        Operator::Lt => compare(|h, b| h < b),
        Operator::Gte => compare(|h, b| h >= b),
        Operator::Lte => compare(|h, b| h <= b),
    }
}

impl Sight<'_> {
    /// The offerings of NodePool `name` in `zone` that one node of could take `pods`
    /// (`needed` in all, plus the DaemonSets that would run there) within the NodePool's
    /// limits; with [`Lately::RanOut`], without those whose capacity ran out lately.
    fn offers(
        &self,
        name: &str,
        np: &NodePool,
        pods: &[Pod],
        needed: &Amounts,
        zone: &str,
        lately: Lately,
    ) -> Vec<Better> {
        let template = &np.spec.template;
        if pods.iter().any(|p| untolerated(p, &template.spec.taints)) {
            return Vec::new();
        }
        let catalog = self.catalog(&template.spec.node_class_ref.name);
        let Some(usage) = self.stored_usage(name) else {
            return Vec::new();
        };
        let limits: Amounts = np
            .spec
            .limits
            .iter()
            .map(|(k, q)| (k.clone(), q.milli()))
            .collect();
        let since = self.now.saturating_sub(TTL + PASS_INTERVAL);
        let windows = &self.scenario.spec.cloud.insufficient_capacity;
        let mut out = Vec::new();
        // `limits.nodes`: its NodeClaims as the API server holds them, not being deleted,
        // and the one more the replacement would be
        let nodes = (self.api.nodeclaims.values())
            .filter(|c| c.deleting.is_none())
            .filter(|c| c.pool() == Some(name))
            .count() as i128;
        let node_limit = limits.get("nodes").copied();
        if node_limit.is_some_and(|limit| (nodes + 1) * 1000 > limit) {
            return Vec::new();
        }
        for t in catalog.iter() {
            let capacity = allocatable_amounts(&t.capacity);
            let over_limit =
                limits
                    .iter()
                    .filter(|(r, _)| r.as_str() != "nodes")
                    .any(|(r, limit)| {
                        usage.get(r).copied().unwrap_or(0) + capacity.get(r).copied().unwrap_or(0)
                            > *limit
                    });
            if over_limit {
                continue;
            }
            for o in t.offerings.iter().filter(|o| o.zone == zone) {
                let node_labels = candidate_labels(name, np, t, zone, o.capacity_type);
                let allowed = template
                    .spec
                    .requirements
                    .iter()
                    .all(|r| holds(r.operator, &r.values, node_labels.get(&r.key)));
                if !allowed || !pods.iter().all(|p| node_affinity_matches(p, &node_labels)) {
                    continue;
                }
                let ran_out = windows.iter().any(|w| {
                    let start = w.from.map_or(Duration::ZERO, |d| d.0).max(since);
                    start <= self.now && w.covers(o.capacity_type, t.name(), zone, start)
                });
                if ran_out && lately == Lately::RanOut {
                    continue;
                }
                let mut total = needed.clone();
                for ds in self.api.objects.daemonsets.values() {
                    if node_affinity_matches(ds, &node_labels)
                        && !untolerated(ds, &template.spec.taints)
                    {
                        add(&mut total, &requests(ds));
                    }
                }
                let allocatable = allocatable_amounts(&t.allocatable);
                // an offering whose overlaid price this checker cannot tell is no evidence
                let Some(price) = self.overlaid(&node_labels, o.price_per_hour) else {
                    continue;
                };
                if total
                    .iter()
                    .all(|(r, v)| *v <= allocatable.get(r).copied().unwrap_or(0))
                {
                    out.push(Better {
                        pool: name.to_string(),
                        instance_type: t.name().to_string(),
                        capacity_type: o.capacity_type,
                        price,
                    });
                }
            }
        }
        out
    }

    /// Whether a DoNotSchedule topology spread of the pods keeps them from all going back
    /// to one new node in their zone, counted as Karpenter counts:
    /// - hostname: a new node's domain starts at the smallest count, zero, so it holds at
    ///   most maxSkew of the pods one constraint selects (swarm seed 31168);
    /// - zone: the zone's count (on nodes the pod's node affinity accepts) may exceed
    ///   maxSkew over the emptiest zone of the region, where kube-scheduler saw no node
    ///   and Karpenter sees a zone it can launch in (swarm seed 35435);
    /// - any other key: not modelled, so the oracle keeps quiet.
    pub(super) fn spread_objects(&self, pods: &[&Pod], zone: &str) -> bool {
        pods.iter().any(|p| {
            let constraints = p
                .spec
                .as_ref()
                .and_then(|s| s.topology_spread_constraints.as_deref())
                .unwrap_or_default();
            constraints
                .iter()
                .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
                .any(|c| {
                    let Some(selector) = c.label_selector.as_ref() else {
                        return false;
                    };
                    let selects = |q: &Pod| {
                        q.metadata.namespace == p.metadata.namespace
                            && selector_matches(
                                selector,
                                q.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                            )
                    };
                    let max_skew = i64::from(c.max_skew);
                    if c.topology_key == labels::HOSTNAME {
                        return pods.iter().filter(|q| selects(q)).count() as i64 > max_skew;
                    }
                    if c.topology_key != labels::ZONE {
                        return true;
                    }
                    let mut counts: BTreeMap<&str, i64> =
                        self.cloud.zones.iter().map(|z| (z.as_str(), 0)).collect();
                    for q in self.api.pods.values().filter(|q| selects(&q.pod)) {
                        let Some(node) = q.node.as_ref().and_then(|n| self.api.nodes.get(n)) else {
                            continue;
                        };
                        if !node_affinity_matches(p, &node.labels) {
                            continue;
                        }
                        if let Some(z) = node.labels.get(labels::ZONE) {
                            *counts.entry(z.as_str()).or_insert(0) += 1;
                        }
                    }
                    let own = counts.get(zone).copied().unwrap_or(0);
                    let emptiest = counts
                        .iter()
                        .filter(|(z, _)| **z != zone)
                        .map(|(_, n)| *n)
                        .min()
                        .unwrap_or(own);
                    own - emptiest > max_skew
                })
        })
    }

    /// How many more of NodePool `np`'s nodes its budgets let be disrupted for `reason`
    /// now, counted over its stored Nodes as Karpenter counts
    /// (`BuildDisruptionBudgetMapping`): those whose Node is labelled initialized, and of
    /// them as already disrupting those not Ready, being deleted or tainted disrupted.
    pub(super) fn budget_left(&self, np: &NodePool, reason: DisruptionReason) -> i64 {
        let of_pool: Vec<bool> = (self.api.nodes.iter())
            .filter(|(_, n)| {
                n.labels
                    .get(labels::INITIALIZED)
                    .is_some_and(|v| v == "true")
            })
            .filter_map(|(k, n)| {
                // a Node whose instance is gone still counts, as disrupting, while the
                // NodeClaim its status names is stored
                let (c, gone) = match self.instance_of_node(k) {
                    Some((c, _)) => (c, false),
                    None => (self.stored_claim_of_node(k)?.0, true),
                };
                (np.metadata.name.as_deref() == c.pool())
                    .then_some(gone || !n.ready || c.deleting.is_some() || n.disrupted())
            })
            .collect();
        // nodes already going (a drain a do-not-disrupt pod holds up, say) spend the budget
        // too (swarm seed 33531): their NodeClaim's deletion is stored, or the disrupted
        // taint is on the Node (as Karpenter marks a command's candidates), and so do nodes
        // not Ready
        let deleting = of_pool.iter().filter(|d| **d).count() as i64;
        let unix = (EPOCH_UNIX + self.now.as_secs()) as i64;
        budget_room(np, reason, of_pool.len() as i64, deleting, unix)
    }

    /// The cloud's instance behind stored Node `node` (by its provider id) and the stored
    /// NodeClaim it was launched for, when that NodeClaim's status names the instance.
    pub(super) fn instance_of_node(&self, node: &str) -> Option<(&StoredNodeClaim, &Instance)> {
        let n = self.api.nodes.get(node)?;
        let (name, instance) = self.cloud.instances.get(&n.provider_id)?;
        let claim = self.api.nodeclaims.get(name)?;
        let named = (claim.object.status.as_ref()).and_then(|s| s.provider_id.as_deref());
        (named == Some(n.provider_id.as_str())).then_some((claim, instance))
    }

    /// What NodePool `pool` holds against its limits as the API server and the cloud tell
    /// it: the capacity of the instances of its stored NodeClaims not being deleted. `None`
    /// while one of those has no instance yet: its size is not known, so the check keeps
    /// quiet.
    pub(super) fn stored_usage(&self, pool: &str) -> Option<Amounts> {
        let mut usage = Amounts::new();
        for (name, c) in &self.api.nodeclaims {
            if c.pool() != Some(pool) || c.deleting.is_some() {
                continue;
            }
            let (_, instance) = self
                .cloud
                .instances
                .values()
                .find(|(claim, _)| claim == name)?;
            add(&mut usage, &allocatable_amounts(&instance.capacity));
        }
        Some(usage)
    }

    /// What an offering costs with the scenario's NodeOverlays over it (NodeOverlay gate),
    /// read from the overlay objects by this checker's own rule: of the overlays that set a
    /// price and whose requirements the node's labels meet, the heaviest sets it (`price`,
    /// or `priceAdjustment` as a percent or an amount, never below 0). `None` when overlays
    /// share a weight: which one Karpenter's conflict rule keeps is not worked out here.
    pub(super) fn overlaid(
        &self,
        node_labels: &BTreeMap<String, String>,
        base: f64,
    ) -> Option<f64> {
        let overlays = &self.api.objects.node_overlays;
        if !self.scenario.spec.feature_gates.node_overlay || overlays.is_empty() {
            return Some(base);
        }
        let weight = |o: &kerf_api::NodeOverlay| o.spec.weight.unwrap_or(0);
        let mut weights: Vec<i32> = overlays.values().map(weight).collect();
        weights.sort_unstable();
        if weights.windows(2).any(|w| w[0] == w[1]) {
            return None;
        }
        let top = overlays
            .values()
            .filter(|o| o.spec.price.is_some() || o.spec.price_adjustment.is_some())
            .filter(|o| {
                (o.spec.requirements.iter())
                    .all(|r| holds(r.operator, &r.values, node_labels.get(&r.key)))
            })
            .max_by_key(|o| weight(o));
        let Some(o) = top else {
            return Some(base);
        };
        if let Some(p) = &o.spec.price {
            return p.parse().ok();
        }
        let change = o.spec.price_adjustment.as_deref()?;
        let price = match change.strip_suffix('%') {
            Some(percent) => base + base * percent.parse::<f64>().ok()? / 100.0,
            None => base + change.parse::<f64>().ok()?,
        };
        Some(price.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario;
    use crate::world::{RunOptions, World};

    /// Two pods on an on-demand node of the only NodePool, settled.
    const ON_DEMAND_ONLY: &str = r#"
apiVersion: kerf.sh/v1alpha1
kind: Scenario
metadata: {name: on-demand-only}
spec:
  duration: 10m
  manifests:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {name: default}
    spec:
      role: R
      amiSelectorTerms: [{alias: al2023@latest}]
      subnetSelectorTerms: [{tags: {k: v}}]
      securityGroupSelectorTerms: [{tags: {k: v}}]
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: on-demand}
    spec:
      template:
        spec:
          nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
          requirements:
          - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
          - {key: karpenter.k8s.aws/instance-category, operator: In, values: [m]}
      disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: app, namespace: default}
    spec:
      replicas: 2
      selector: {matchLabels: {app: app}}
      template:
        metadata: {labels: {app: app}}
        spec:
          containers:
          - name: c
            image: app
            resources: {requests: {cpu: '1', memory: 1Gi}}
"#;

    #[test]
    fn an_on_demand_node_a_heavier_spot_nodepool_would_replace_cheaper_is_a_violation() {
        let scenario = scenario::parse(ON_DEMAND_ONLY, None).expect("scenario");
        let mut world = World::new(scenario, RunOptions::checked()).expect("world");
        world.settle().expect("settles");
        while world.step().expect("holds every invariant") {}
        assert!(
            world
                .with_checkers(|c, s| c.check_spot_preference(s))
                .is_ok(),
            "one NodePool: no better home"
        );
        // the planted bug: a heavier spot NodePool appears and the controllers never hear
        // of it, so nothing moves the pods to it
        let spot: NodePool = serde_yaml::from_str(
            r#"
metadata: {name: spot}
spec:
  weight: 50
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
"#,
        )
        .expect("NodePool");
        world.write(kerf_core::observe::Object::node_pool(spot));
        let e = world
            .with_checkers(|c, s| c.check_spot_preference(s))
            .expect_err("a violation");
        assert!(
            e.to_string().contains("spot preference: on-demand node")
                && e.to_string().contains("of nodepool spot"),
            "{e}"
        );
    }

    /// A heavier NodePool `both` of c and m types allowing `capacity_types`.
    fn heavier(capacity_types: &str) -> NodePool {
        serde_yaml::from_str(&format!(
            r#"
metadata: {{name: both}}
spec:
  weight: 50
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
      - {{key: karpenter.sh/capacity-type, operator: In, values: [{capacity_types}]}}
      - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}}
  disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}}
"#
        ))
        .expect("NodePool")
    }

    /// Karpenter prices a replacement that may be spot at its spot offerings, and pins it
    /// there: where a NodeOverlay makes spot dear, a cheaper on-demand type of a NodePool
    /// that allows both is no cheaper home (swarm seed 375257); allowing on-demand alone,
    /// it is.
    #[test]
    fn a_replacement_that_may_be_spot_is_priced_at_its_spot_offerings() {
        let gated = ON_DEMAND_ONLY.replace(
            "  duration: 10m\n",
            "  duration: 10m\n  featureGates: {NodeOverlay: true}\n",
        );
        let scenario = scenario::parse(&gated, None).expect("scenario");
        let mut world = World::new(scenario, RunOptions::checked()).expect("world");
        world.settle().expect("settles");
        while world.step().expect("holds every invariant") {}
        let overlay: kerf_api::NodeOverlay = serde_yaml::from_str(
            r#"
metadata: {name: dear-spot}
spec:
  requirements:
  - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
  price: "10"
"#,
        )
        .expect("NodeOverlay");
        world.write(kerf_core::observe::Object::node_overlay(overlay));
        world.write(kerf_core::observe::Object::node_pool(heavier(
            "spot, on-demand",
        )));
        let quiet = world.with_checkers(|c, s| c.check_spot_preference(s));
        assert!(quiet.is_ok(), "{:?}", quiet.err().map(|e| e.to_string()));
        world.write(kerf_core::observe::Object::node_pool(heavier("on-demand")));
        let e = world
            .with_checkers(|c, s| c.check_spot_preference(s))
            .expect_err("a violation");
        assert!(
            e.to_string()
                .contains("could be replaced by a cheaper on-demand")
                && e.to_string().contains("of nodepool both"),
            "{e}"
        );
    }
}
