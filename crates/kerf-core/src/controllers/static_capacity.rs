//! Static NodePools (`spec.replicas`, Karpenter's `StaticCapacity` feature gate): each is kept
//! at exactly its replica count whatever the pods ask, as Karpenter v1.15 does. Missing
//! NodeClaims are created at once (each the cheapest instance type the NodePool's
//! requirements allow, no pods nominated), up to `limits.nodes`; extra ones are deleted,
//! those not launched first, then the empty nodes, then the cheapest to disrupt (the pods'
//! eviction costs times the share of the node's lifetime left, nodes with a
//! `karpenter.sh/do-not-disrupt` pod last). Scale-down is forceful, like expiry: no
//! disruption budget applies, the drain still honours PodDisruptionBudgets. A static
//! NodePool never takes pending pods nor replacement nodes, and its nodes are never
//! consolidated (the NodePool is left out of the scheduler's NodePools), but pods may land
//! on them. A drifted node is replaced first, as Karpenter's StaticDrift does: within the
//! NodePool's `Drifted` budget and node limit, a new NodeClaim is made and the drifted one
//! deleted once its replacement is initialized. At its node limit no replacement can be
//! staged: with `TerminateFirstDrift` the drifted node is deleted first and the pool refilled
//! after (Karpenter's terminate-first), without it the node waits, told `DisruptionBlocked`.
//! With the gate off, a static NodePool is inert: nothing is made, replaced or removed.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::time::Duration;

use kerf_api::labels;
use kerf_scheduling::launch::{Launch, LaunchOption};
use kerf_scheduling::requirements::Requirements;
use kerf_scheduling::resources::Resources;
use kerf_scheduling::solver::PlannedNodeClaim;
use serde_json::json;

use kerf_api::nodepool::DisruptionReason;

use super::desk::Desk;
use super::{Controllers, Event, EventObject};
use crate::cluster::PodOwner;
use crate::disruption::rules::{eviction_cost, pod_blocks};
use crate::metrics::families;

/// How soon a static NodePool short of its replicas (at its node limit, or with nothing to
/// launch) looks again, as Karpenter requeues it.
const STATIC_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// Karpenter's cap on the instance types a NodeClaim lists.
const MAX_INSTANCE_TYPES: usize = 60;

/// A NodeClaim of a static NodePool that may be removed, with its rank.
struct Extra {
    name: String,
    /// 0: not launched, 1: empty, 2: with pods, 3: with a do-not-disrupt pod.
    tier: u8,
    /// Within tier 2 and 3: eviction costs × lifetime remaining.
    cost: f64,
}

/// What static NodePools' controller keeps between polls.
#[derive(Default)]
pub(super) struct StaticPools {
    /// Per static NodePool, the (replicas, active, to create) last logged, so that a
    /// deficit that cannot be met is said once, not at every poll.
    pub(super) logged: BTreeMap<String, (i64, i64, i64)>,
    /// Drifted or unhealthy NodeClaims of static NodePools being replaced, with their
    /// replacements and why.
    pub(super) replacing: BTreeMap<String, (String, DisruptionReason, std::time::Duration)>,
}

impl StaticPools {
    /// The nodes of the NodeClaims being replaced: their command holds their disrupted
    /// taint until the replacement is up.
    pub(super) fn held_nodes(&self, desk: &Desk) -> std::collections::BTreeSet<String> {
        (self.replacing.keys())
            .filter_map(|claim| desk.cluster.nodeclaims.get(claim)?.node.clone())
            .collect()
    }

    /// A NodePool's NodeClaims not being deleted nor replaced (launched or not: one in flight
    /// counts), how many count against its node limit besides (being deleted or replaced),
    /// and how many of those are being deleted without the API server holding it yet.
    fn static_counts(&self, desk: &Desk, pool: &str) -> (Vec<String>, i64, i64) {
        let mut active = Vec::new();
        let mut others = 0;
        let mut unstored = 0;
        for (name, c) in &desk.cluster.nodeclaims {
            if c.node_pool != pool {
                continue;
            }
            if c.deleting.is_some() || self.replacing.contains_key(name) {
                others += 1;
                unstored += i64::from(c.deleting.is_some() && !c.deletion_stored);
            } else {
                active.push(name.clone());
            }
        }
        (active, others, unstored)
    }

    fn shrink_static(
        &mut self,
        desk: &mut Desk,
        pool: &str,
        replicas: i64,
        active: &[String],
        now: Duration,
    ) {
        let excess = active.len() - usize::try_from(replicas).unwrap_or(0);
        let mut extras: Vec<Extra> = active.iter().map(|c| static_rank(desk, c, now)).collect();
        extras.sort_by(|a, b| {
            (a.tier.cmp(&b.tier))
                .then(a.cost.total_cmp(&b.cost))
                .then_with(|| a.name.cmp(&b.name))
        });
        self.logged.remove(pool);
        desk.log(
            "static.deprovisioning",
            "deprovisioning nodeclaims to satisfy replica count",
            json!({"NodePool": {"name": pool}, "current": active.len(), "desired": replicas,
                   "deprovision-count": excess}),
        );
        for extra in extras.into_iter().take(excess) {
            desk.log(
                "static.deprovisioning",
                "deleting nodeclaim",
                json!({"NodeClaim": {"name": extra.name}}),
            );
            desk.delete_nodeclaim(&extra.name, now);
        }
    }
}

impl Controllers {
    /// Brings every static NodePool to its replica count (gate on).
    pub(super) fn reconcile_static_pools(&mut self, now: Duration) {
        if !self.desk.settings.static_capacity {
            return;
        }
        let pools: Vec<(String, i64)> = self
            .desk
            .cluster
            .node_pools
            .iter()
            .filter_map(|(name, np)| np.spec.replicas.map(|r| (name.clone(), r)))
            .collect();
        self.follow_static_replacements(now);
        for (pool, replicas) in pools {
            let (active, deleting, unstored) =
                self.static_capacity.static_counts(&self.desk, &pool);
            let active_count = i64::try_from(active.len()).unwrap_or(i64::MAX);
            match active_count.cmp(&replicas) {
                // a NodeClaim whose deletion the API server does not hold yet (an expiry's
                // delete refused) still counts, as in Karpenter, where a delete that failed
                // marks nothing: no replacement until it is stored (swarm seed 439550)
                Ordering::Less if active_count + unstored >= replicas => {}
                Ordering::Less => self.grow_static(
                    &pool,
                    replicas,
                    active_count + unstored,
                    deleting - unstored,
                    now,
                ),
                Ordering::Greater => self.static_capacity.shrink_static(
                    &mut self.desk,
                    &pool,
                    replicas,
                    &active,
                    now,
                ),
                // one method acts at a time, repair first, as Karpenter's loop runs them
                Ordering::Equal => {
                    if !self.repair_static(&pool, &active, deleting, now) {
                        self.replace_drifted_static(&pool, &active, deleting, now);
                    }
                }
            }
        }
    }

    /// Drifted NodeClaims whose replacement is initialized are deleted; a replacement that
    /// went (its launch failed) is forgotten, and its drifted node untainted to try again.
    fn follow_static_replacements(&mut self, now: Duration) {
        let pairs: Vec<(String, String, DisruptionReason, std::time::Duration)> = self
            .static_capacity
            .replacing
            .iter()
            .map(|(d, (r, why, at))| (d.clone(), r.clone(), *why, *at))
            .collect();
        for (drifted, replacement, why, launched_at) in pairs {
            let Some(old) = self.desk.cluster.nodeclaims.get(&drifted) else {
                self.static_capacity.replacing.remove(&drifted);
                continue;
            };
            if old.deleting.is_some() {
                self.static_capacity.replacing.remove(&drifted);
                continue;
            }
            let node = old.node.clone();
            match self.desk.cluster.nodeclaims.get(&replacement) {
                None => {
                    self.static_capacity.replacing.remove(&drifted);
                    if let Some(n) = &node {
                        self.desk.untaint(n);
                    }
                }
                Some(r) if r.initialized => {
                    self.static_capacity.replacing.remove(&drifted);
                    let node = node.unwrap_or_default();
                    self.terminate_disrupted(&node, &drifted, why, now);
                }
                // a replacement that has not initialized in time is given up, as Karpenter's
                // queue gives a command's replacements up: the node stays, untainted, and
                // the replacement is one NodeClaim too many, which the pool scales down
                Some(_) if now >= launched_at + super::disruption::REPLACEMENT_TIMEOUT => {
                    self.static_capacity.replacing.remove(&drifted);
                    if let Some(n) = &node {
                        self.desk.untaint(n);
                    }
                }
                Some(_) => {}
            }
        }
    }

    /// Replaces drifted nodes of a NodePool at its count, replacement first, as many at once
    /// as its `Drifted` budget and node limit allow.
    fn replace_drifted_static(
        &mut self,
        pool: &str,
        active: &[String],
        others: i64,
        now: Duration,
    ) {
        let drifted: Vec<String> = active
            .iter()
            .filter(|c| {
                let c = &self.desk.cluster.nodeclaims[c.as_str()];
                c.drifted.is_some() && c.initialized && c.node.is_some()
            })
            .cloned()
            .collect();
        if drifted.is_empty() {
            return;
        }
        let np = self.desk.cluster.node_pools[pool].clone();
        let total = active.len() + usize::try_from(others).unwrap_or(0);
        // the Drifted budget as Karpenter counts it, less the replacements and deletions under
        // way here (most of which it counts already: their nodes are tainted or deleting)
        let going = usize::try_from(others).unwrap_or(0);
        let budget = (self
            .disruption
            .budgets_now(&self.desk, now)
            .get(&(pool, DisruptionReason::Drifted)))
        .map_or(0, |b| b.allowed.saturating_sub(b.consuming.max(going)));
        let limit = np.spec.limits.get("nodes").map_or(i64::MAX, |q| {
            i64::try_from(q.milli() / 1000).unwrap_or(i64::MAX)
        });
        let room = usize::try_from(limit - i64::try_from(total).unwrap_or(i64::MAX)).unwrap_or(0);
        let granted = budget.min(room).min(drifted.len());
        if granted == 0 {
            if budget > 0 {
                // at its node limit: no replacement can be staged
                let at_limit = drifted.into_iter().take(budget).collect();
                self.drifted_at_limit(pool, at_limit, now);
            }
            return;
        }
        let Some(plan) = static_plan(&mut self.desk, pool, now) else {
            return;
        };
        for claim in drifted.into_iter().take(granted) {
            let c = &self.desk.cluster.nodeclaims[&claim];
            let node = c.node.clone().unwrap_or_default();
            count_static_decision(&mut self.desk, pool, "replace", "drifted");
            self.desk.count_disrupted(&claim, "drifted", "", true);
            self.desk.log(
                "disruption",
                "disrupting node(s)",
                json!({"command": format!("StaticDrifted: replace: nodepools=[{pool}]: [{node}]"),
                       "reason": "drifted"}),
            );
            let drifted = kerf_api::nodepool::DisruptionReason::Drifted;
            self.desk.taint(&node);
            self.desk.disrupting(&node, drifted);
            let replacement = self.launch_replacement(&plan, pool, drifted, now);
            (self.static_capacity.replacing).insert(claim, (replacement, drifted, now));
            let timeout = now + super::disruption::REPLACEMENT_TIMEOUT;
            self.desk.at(timeout, super::Timer::StaticCapacity);
        }
    }

    /// Drifted NodeClaims of a static NodePool at its node limit, within its `Drifted` budget.
    /// With `TerminateFirstDrift` (and the NodePool ready and not being deleted) each is
    /// deleted before its replacement exists, as Karpenter's terminate-first: the pool's
    /// count then falls short and the NodePool is refilled. Otherwise each is told blocked
    /// (once per two minutes on its Node and NodeClaim).
    fn drifted_at_limit(&mut self, pool: &str, claims: Vec<String>, now: Duration) {
        let np = &self.desk.cluster.node_pools[pool];
        let first = self.desk.settings.terminate_first_drift
            && np.metadata.deletion_timestamp.is_none()
            && self.desk.cluster.may_launch_for(pool);
        for claim in claims {
            let node = (self.desk.cluster.nodeclaims.get(&claim))
                .and_then(|c| c.node.clone())
                .unwrap_or_default();
            if !first {
                blocked_at_limit(&mut self.desk, &node, &claim, now);
                continue;
            }
            let decision = "terminate-first";
            count_static_decision(&mut self.desk, pool, decision, "drifted");
            self.desk.metrics.inc(
                &families::VOLUNTARY_DISRUPTION_TERMINATE_FIRST_DECISIONS,
                &[pool, "drifted", "static-at-limit"],
            );
            self.desk.count_disrupted(&claim, "drifted", "", true);
            self.desk.log(
                "disruption",
                "disrupting node(s)",
                json!({"command": format!("StaticDrifted: {decision}: nodepools=[{pool}]: [{node}]"),
                       "reason": "drifted", "decision": decision,
                       "disrupted-node-count": 1, "replacement-node-count": 0}),
            );
            self.desk.taint(&node);
            self.terminate_disrupted(&node, &claim, DisruptionReason::Drifted, now);
        }
    }

    /// Unhealthy nodes of a static NodePool at its count, as Karpenter's repair takes them
    /// (a mirror of its static drift): those a repair policy is due on, the longest past due
    /// first, within the NodePool's `Unhealthy` budget (a node never initialized takes
    /// none). Below the node limit a replacement is launched first and the node deleted once
    /// it is initialized; at the limit, with `TerminateFirstRepair` (and the NodePool ready
    /// and not being deleted), the node is deleted first and the pool refilled, otherwise it
    /// waits, told `DisruptionBlocked`. Whether anything was done.
    fn repair_static(&mut self, pool: &str, active: &[String], others: i64, now: Duration) -> bool {
        if !self.desk.settings.node_repair {
            return false;
        }
        let mut due: Vec<(String, String, f64, bool)> = (active.iter())
            .filter_map(|claim| {
                let node = self.desk.cluster.nodeclaims.get(claim)?.node.clone()?;
                let r = self.health.repairs.get(&node)?;
                Some((claim.clone(), node, r.view.score, r.view.initialized))
            })
            .collect();
        if due.is_empty() {
            return false;
        }
        due.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        let np = self.desk.cluster.node_pools[pool].clone();
        let going = usize::try_from(others).unwrap_or(0);
        let mut budget = (self
            .disruption
            .budgets_now(&self.desk, now)
            .get(&(pool, DisruptionReason::Unhealthy)))
        .map_or(0, |b| b.allowed.saturating_sub(b.consuming.max(going)));
        let limit = np.spec.limits.get("nodes").map_or(i64::MAX, |q| {
            i64::try_from(q.milli() / 1000).unwrap_or(i64::MAX)
        });
        let total = i64::try_from(active.len() + going).unwrap_or(i64::MAX);
        let mut room = usize::try_from(limit - total).unwrap_or(0);
        let refillable =
            np.metadata.deletion_timestamp.is_none() && self.desk.cluster.may_launch_for(pool);
        let mut acted = false;
        for (claim, node, _, initialized) in due {
            if initialized {
                if budget == 0 {
                    continue;
                }
                budget -= 1;
            }
            let unhealthy = DisruptionReason::Unhealthy;
            if room > 0 {
                let Some(plan) = static_plan(&mut self.desk, pool, now) else {
                    return acted;
                };
                room -= 1;
                self.health.select_repair(&mut self.desk, &node);
                self.static_command(pool, &node, &claim, "replace", 1);
                let replacement = self.launch_replacement(&plan, pool, unhealthy, now);
                (self.static_capacity.replacing).insert(claim, (replacement, unhealthy, now));
                let timeout = now + super::disruption::REPLACEMENT_TIMEOUT;
                self.desk.at(timeout, super::Timer::StaticCapacity);
            } else if self.desk.settings.terminate_first_repair && refillable {
                self.health.select_repair(&mut self.desk, &node);
                self.desk.metrics.inc(
                    &families::VOLUNTARY_DISRUPTION_TERMINATE_FIRST_DECISIONS,
                    &[pool, "unhealthy", "static-at-limit"],
                );
                self.static_command(pool, &node, &claim, "terminate-first", 0);
                self.terminate_disrupted(&node, &claim, unhealthy, now);
            } else {
                blocked_at_limit(&mut self.desk, &node, &claim, now);
                continue;
            }
            acted = true;
        }
        acted
    }

    /// A repair command on a static NodePool's node: counted, logged as Karpenter's
    /// `disrupting node(s)`, its node tainted.
    fn static_command(
        &mut self,
        pool: &str,
        node: &str,
        claim: &str,
        decision: &str,
        replacements: usize,
    ) {
        count_static_decision(&mut self.desk, pool, decision, "unhealthy");
        self.desk.count_disrupted(claim, "unhealthy", "", true);
        let id = self.disruption.next_command_id();
        let arrow = if replacements > 0 {
            " -> [1 replacement]"
        } else {
            ""
        };
        self.desk.log(
            "disruption",
            "disrupting node(s)",
            json!({"command": format!("Unhealthy/{id}: {decision}: nodepools=[{pool}]: [{node}]{arrow}"),
                   "reason": "unhealthy", "decision": decision,
                   "disrupted-node-count": 1, "replacement-node-count": replacements}),
        );
        self.desk.taint(node);
        self.desk.disrupting(node, DisruptionReason::Unhealthy);
    }

    fn grow_static(
        &mut self,
        pool: &str,
        replicas: i64,
        active: i64,
        deleting: i64,
        now: Duration,
    ) {
        if !self.desk.cluster.may_launch_for(pool) {
            return;
        }
        let limit = self.desk.cluster.node_pools[pool]
            .spec
            .limits
            .get("nodes")
            .map(|q| i64::try_from(q.milli() / 1000).unwrap_or(i64::MAX));
        // NodeClaims being deleted count against the limit until they are gone
        let room = limit.map_or(i64::MAX, |l| l - active - deleting);
        let count = (replicas - active).min(room);
        // a deficit that cannot be met is said once, not at every poll, until it changes
        let state = (replicas, active, count);
        let said = self.static_capacity.logged.get(pool) == Some(&state);
        if count <= 0 {
            retry_static(&mut self.desk, now);
            if !said {
                self.static_capacity.logged.insert(pool.to_string(), state);
                self.desk.log(
                    "static.provisioning",
                    "nodepool node limit reached",
                    json!({"NodePool": {"name": pool}, "limit": limit, "current": active}),
                );
            }
            return;
        }
        let Some(plan) = static_plan(&mut self.desk, pool, now) else {
            retry_static(&mut self.desk, now);
            if !said {
                self.static_capacity.logged.insert(pool.to_string(), state);
                self.desk.log(
                    "static.provisioning",
                    "could not provision nodeclaims to satisfy replica count",
                    json!({"NodePool": {"name": pool},
                           "error": "no instance type satisfies the NodePool's requirements"}),
                );
            }
            return;
        };
        self.static_capacity.logged.remove(pool);
        self.desk.log(
            "static.provisioning",
            "provisioning nodeclaims to satisfy replica count",
            json!({"NodePool": {"name": pool}, "current": active, "desired": replicas,
                   "provision-count": count}),
        );
        for _ in 0..count {
            self.create_nodeclaim(&plan, pool, "provisioned", now);
        }
    }
}

/// Counts a static NodePool's decision (`replace`, `terminate-first`) for `reason`
/// (`drifted`, `unhealthy`) as Karpenter's queue does.
fn count_static_decision(desk: &mut Desk, pool: &str, decision: &str, reason: &str) {
    desk.metrics.inc(
        &families::VOLUNTARY_DISRUPTION_DECISIONS,
        &["", decision, reason],
    );
    desk.metrics.inc(
        &families::VOLUNTARY_DISRUPTION_DECISIONS_BY_NODEPOOL,
        &["", decision, pool, reason],
    );
}

/// A static NodePool's node that cannot be replaced first at the node limit, told
/// `DisruptionBlocked` on its Node and NodeClaim (once per two minutes).
fn blocked_at_limit(desk: &mut Desk, node: &str, claim: &str, now: Duration) {
    for (kind, name) in [(EventObject::Node, node), (EventObject::NodeClaim, claim)] {
        desk.event(
            Event {
                kind,
                name: name.to_string(),
                warning: false,
                reason: "DisruptionBlocked".into(),
                message: "static NodePool is at its node limit and cannot stage a replacement"
                    .into(),
            },
            now,
        );
    }
}

/// Looks at the static NodePools again in a while.
fn retry_static(desk: &mut Desk, now: Duration) {
    desk.cancel(&super::Timer::StaticCapacity);
    desk.at(now + STATIC_RETRY, super::Timer::StaticCapacity);
}

/// A NodeClaim of the NodePool with no pods: its requirements, and the instance types
/// they allow with an available offering, cheapest first (the cloud launches the
/// cheapest). None when no type is allowed.
fn static_plan(desk: &mut Desk, pool: &str, now: Duration) -> Option<PlannedNodeClaim> {
    let np = desk.cluster.node_pools.get(pool)?.clone();
    let template = &np.spec.template;
    let reqs = Requirements::from_api(&template.spec.requirements);
    let class = template.spec.node_class_ref.name.clone();
    let generation = desk.unavailable.generation();
    let options = match desk.overlay_evaluation(now).by_pool.remove(pool) {
        Some(types) => types,
        None => desk.type_options_for(&class, generation, now),
    };
    let (zone, capacity_type) = (reqs.get(labels::ZONE), reqs.get(labels::CAPACITY_TYPE));
    let offered = |key: &str| key == labels::ZONE || key == labels::CAPACITY_TYPE;
    // a type is ruled out by what it says of itself; a key it does not define (a
    // custom label the node will carry) rules nothing out
    let mut priced: Vec<(LaunchOption, Launch)> = options
        .iter()
        .filter(|t| {
            reqs.iter()
                .filter(|r| !offered(&r.key))
                .all(|r| t.labels.get(&r.key).is_none_or(|v| r.has(v)))
        })
        .filter_map(|t| {
            let o = t
                .offerings
                .iter()
                // reservations are handed out by provisioning's plans, not static ones
                .filter(|o| {
                    o.available
                        && o.reservation.is_none()
                        && zone.has(&o.zone)
                        && capacity_type.has(&o.capacity_type)
                })
                .min_by(|a, b| a.price_per_hour.total_cmp(&b.price_per_hour))?;
            let option = LaunchOption {
                name: t.name.clone(),
                price_per_hour: o.price_per_hour,
            };
            let launch = Launch {
                instance_type: t.name.clone(),
                capacity_type: o.capacity_type.clone(),
                zone: o.zone.clone(),
                price_per_hour: o.price_per_hour,
                reservation: None,
            };
            Some((option, launch))
        })
        .collect();
    priced.sort_by(|a, b| {
        (a.0.price_per_hour.total_cmp(&b.0.price_per_hour)).then_with(|| a.0.name.cmp(&b.0.name))
    });
    priced.truncate(MAX_INSTANCE_TYPES);
    let launch = priced.first()?.1.clone();
    let instance_types: Vec<LaunchOption> = priced.into_iter().map(|(o, _)| o).collect();
    let mut requirements = template.spec.requirements.clone();
    requirements.retain(|r| r.key != labels::INSTANCE_TYPE);
    requirements.push(kerf_api::NodeSelectorRequirementWithMinValues {
        key: labels::INSTANCE_TYPE.into(),
        operator: kerf_api::Operator::In,
        values: instance_types.iter().map(|o| o.name.clone()).collect(),
        min_values: None,
    });
    Some(PlannedNodeClaim {
        node_pool: 0,
        pods: Vec::new(),
        requests: Resources::default(),
        requirements,
        instance_types,
        launch,
        min_values_relaxed: false,
    })
}

/// Where a NodeClaim stands in the order a static NodePool's extra NodeClaims go.
fn static_rank(desk: &Desk, name: &str, now: Duration) -> Extra {
    let c = &desk.cluster.nodeclaims[name];
    let rank = |tier, cost| Extra {
        name: name.to_string(),
        tier,
        cost,
    };
    if c.launched.is_none() {
        return rank(0, 0.0);
    }
    let Some(node) = &c.node else {
        return rank(1, 0.0); // no Node yet: nothing runs there
    };
    let pods: Vec<_> = desk
        .cluster
        .pods
        .values()
        .filter(|p| p.node.as_deref() == Some(node.as_str()))
        .collect();
    let blocked = pods.iter().any(|p| pod_blocks(&p.shape, p.started, now));
    let workload: Vec<_> = pods
        .iter()
        .filter(|p| p.owner != PodOwner::DaemonSet)
        .collect();
    if workload.is_empty() && !blocked {
        return rank(1, 0.0);
    }
    let cost: f64 = (workload.iter())
        .map(|p| eviction_cost(&p.shape, desk.settings.pod_deletion_cost))
        .sum();
    let lifetime = desk.cluster.node_pools.get(&c.node_pool).map_or(1.0, |np| {
        match np.spec.template.spec.expire_after.duration() {
            Some(total) if !total.is_zero() => {
                let age = now.saturating_sub(c.created);
                (1.0 - age.as_secs_f64() / total.as_secs_f64()).clamp(0.0, 1.0)
            }
            _ => 1.0,
        }
    });
    rank(if blocked { 3 } else { 2 }, cost * lifetime)
}
