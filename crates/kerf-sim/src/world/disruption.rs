//! Disruption, termination and interruption in the simulated cluster: the shell around
//! `kerf_core::consolidation` and `kerf_core::disruption`. A pass every 10 s (while anything
//! changed) picks one command; it is re-checked after 15 s, then candidates are tainted,
//! replacements launched and awaited, and the candidates drained and deleted.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use kerf_api::nodepool::DisruptionReason;
use kerf_api::{EC2NodeClass, NodePool, Taint, TaintEffect, labels};
use kerf_core::consolidation::{ClusterView, Command, NodeView, plan};
use kerf_core::disruption::{
    allowed_disruptions, consolidatable_at, drain_tier, pdb_allowance, pdb_selects, pod_blocks,
};
use kerf_core::interruption::{self, Action};
use kerf_core::unavailable::Pattern;
use kerf_scheduling::{ExistingNode, Requirements};
use serde_json::json;

use super::{Ev, SimError, World};

/// How often disruption looks for work while the cluster changes.
pub const PASS_INTERVAL: Duration = Duration::from_secs(10);
/// How long a decision waits before it is re-checked and acted on.
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);
/// How often a draining node retries evictions a PDB refused.
pub const DRAIN_RETRY: Duration = Duration::from_secs(5);
/// Seconds from the Unix epoch to the simulation's start (2026-01-01T00:00:00Z), for budget
/// schedules.
const EPOCH_UNIX: u64 = 20_454 * 86_400;

/// A disruption decision on its way.
pub struct Pending {
    reason: DisruptionReason,
    candidates: Vec<String>,
    replacements: Vec<String>,
    savings: f64,
    acting: bool,
}

/// The drift-relevant part of a NodePool's template, hashed: expireAfter and
/// terminationGracePeriod changes apply without replacing nodes, and requirements drift only
/// the nodes that no longer meet them (both as in Karpenter).
pub fn template_hash(np: &NodePool) -> u64 {
    let mut t = np.spec.template.clone();
    t.spec.expire_after = kerf_api::nodepool::default_expire_after();
    t.spec.termination_grace_period = None;
    t.spec.requirements.clear();
    hash_json(&t)
}

/// An EC2NodeClass spec, hashed: any change to it drifts the nodes launched with it.
pub fn class_hash(nc: &EC2NodeClass) -> u64 {
    hash_json(&nc.spec)
}

fn hash_json(v: &impl serde::Serialize) -> u64 {
    let mut h = DefaultHasher::new();
    serde_json::to_string(v).unwrap_or_default().hash(&mut h);
    h.finish()
}

fn disrupted_taint() -> Taint {
    Taint {
        key: labels::DISRUPTED_TAINT_KEY.into(),
        value: None,
        effect: TaintEffect::NoSchedule,
        time_added: None,
    }
}

impl World {
    pub(super) fn schedule_pass(&mut self, at: Duration) {
        if self.pass_at.is_none_or(|p| p > at) && at <= self.duration() {
            self.pass_at = Some(at);
            self.push(at, Ev::Disrupt);
        }
    }

    /// Marks the NodeClaims of a changed NodePool as drifted: all of them when its template
    /// changed (`NodePoolDrifted`), those whose node no longer meets its requirements
    /// otherwise (`RequirementsDrifted`).
    pub(super) fn mark_drift(&mut self, pool: &str) {
        let Some(np) = self.node_pools.get(pool) else {
            return;
        };
        let hash = template_hash(np);
        let requirements = Requirements::from_api(&np.spec.template.spec.requirements);
        let mut marked = Vec::new();
        for (name, c) in &self.nodeclaims {
            if c.nodepool != pool || c.drifted {
                continue;
            }
            let labels = c
                .node
                .as_ref()
                .and_then(|n| self.nodes.get(n))
                .map(|n| &n.labels);
            if c.hash != hash {
                marked.push((name.clone(), "NodePoolDrifted"));
            } else if labels.is_some_and(|l| !requirements.matches_labels(l)) {
                marked.push((name.clone(), "RequirementsDrifted"));
            }
        }
        self.drifted(marked);
    }

    /// Marks the NodeClaims launched with an older spec of a changed EC2NodeClass as
    /// drifted (`NodeClassDrift`).
    pub(super) fn mark_class_drift(&mut self, class: &str) {
        let Some(nc) = self.node_classes.get(class) else {
            return;
        };
        let hash = class_hash(nc);
        let marked = self
            .nodeclaims
            .iter()
            .filter(|(_, c)| {
                !c.drifted
                    && c.class_hash != hash
                    && self
                        .node_pools
                        .get(&c.nodepool)
                        .is_some_and(|np| np.spec.template.spec.node_class_ref.name == class)
            })
            .map(|(name, _)| (name.clone(), "NodeClassDrift"))
            .collect();
        self.drifted(marked);
    }

    fn drifted(&mut self, marked: Vec<(String, &str)>) {
        for (name, reason) in marked {
            if let Some(c) = self.nodeclaims.get_mut(&name) {
                c.drifted = true;
            }
            self.log.info(
                self.now,
                "nodeclaim.disruption",
                "marking drifted",
                json!({"NodeClaim": {"name": name}, "reason": reason}),
            );
        }
        self.schedule_pass(self.now);
    }

    /// Builds the view of the cluster disruption decides on.
    fn view<'a>(
        &'a self,
        node_pools: Vec<kerf_scheduling::NodePoolInput>,
        pool_names: &[String],
        daemonsets: &'a [k8s_openapi::api::core::v1::Pod],
    ) -> (ClusterView<'a>, Vec<String>) {
        let pool_index: BTreeMap<&str, usize> = pool_names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let mut names = Vec::new();
        let mut nodes = Vec::new();
        let mut pods = Vec::new();
        let in_command: Vec<String> = self
            .command
            .iter()
            .flat_map(|c| c.candidates.clone())
            .collect();
        let mut by_node: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
        let mut nominated_claims: std::collections::BTreeSet<&str> = Default::default();
        for (k, p) in &self.pods {
            if let Some(n) = &p.node
                && !p.daemon
            {
                by_node.entry(n.as_str()).or_default().push(k);
            }
            if let Some(nc) = &p.nominated {
                nominated_claims.insert(nc.as_str());
            }
        }
        for (name, n) in &self.nodes {
            let Some(c) = self.nodeclaims.get(&n.nodeclaim) else {
                continue;
            };
            let Some(inst) = &c.instance else { continue };
            let pool = pool_index.get(c.nodepool.as_str()).copied();
            let mut on_node = Vec::new();
            let mut blocked = false;
            for k in by_node.get(name.as_str()).into_iter().flatten() {
                let p = &self.pods[k.as_str()];
                if pod_blocks(&p.pod, p.pending_since, self.now) || self.pdb_blocks(k) {
                    blocked = true;
                }
                on_node.push(pods.len());
                pods.push(&p.pod);
            }
            let nominated = nominated_claims.contains(n.nodeclaim.as_str());
            let np = self.node_pools.get(&c.nodepool);
            let consolidatable = n.ready
                && np
                    .and_then(|np| consolidatable_at(np, n.last_pod_event))
                    .is_some_and(|t| self.now >= t);
            nodes.push(NodeView {
                node: ExistingNode {
                    name: name.clone(),
                    labels: n.labels.clone(),
                    taints: n.taints.clone(),
                    allocatable: n.allocatable.clone(),
                    requested: n.requests.clone(),
                    initialized: n.ready,
                },
                node_pool: pool,
                price_per_hour: inst.price_per_hour,
                capacity_type: inst.capacity_type.clone(),
                pods: on_node,
                disruptable: n.ready
                    && n.deleting.is_none()
                    && !nominated
                    && !blocked
                    && !in_command.contains(name)
                    && pool.is_some(),
                consolidatable,
                drifted: c.drifted,
            });
            names.push(name.clone());
        }
        let mut allowed = BTreeMap::new();
        for (i, pool) in pool_names.iter().enumerate() {
            let np = &self.node_pools[pool];
            let total = self
                .nodes
                .values()
                .filter(|n| {
                    self.nodeclaims
                        .get(&n.nodeclaim)
                        .is_some_and(|c| c.nodepool == *pool)
                })
                .count();
            let deleting = self
                .nodes
                .values()
                .filter(|n| {
                    n.deleting.is_some()
                        && self
                            .nodeclaims
                            .get(&n.nodeclaim)
                            .is_some_and(|c| c.nodepool == *pool)
                })
                .count();
            for r in [
                DisruptionReason::Empty,
                DisruptionReason::Drifted,
                DisruptionReason::Underutilized,
            ] {
                let unix = EPOCH_UNIX + self.now.as_secs();
                allowed.insert((i, r), allowed_disruptions(np, r, total, deleting, unix));
            }
        }
        let objects: Vec<&NodePool> = pool_names.iter().map(|n| &self.node_pools[n]).collect();
        (
            ClusterView {
                nodes,
                pods,
                node_pool_objects: objects,
                node_pools,
                daemonsets,
                allowed,
                spot_to_spot: false,
            },
            names,
        )
    }

    /// Whether evicting a pod now would break a PodDisruptionBudget.
    fn pdb_blocks(&self, pod: &str) -> bool {
        let Some(p) = self.pods.get(pod) else {
            return false;
        };
        self.pdbs
            .values()
            .filter(|b| pdb_selects(b, &p.pod))
            .any(|b| {
                let selected: Vec<&super::SimPod> = self
                    .pods
                    .values()
                    .filter(|q| pdb_selects(b, &q.pod))
                    .collect();
                let healthy = selected
                    .iter()
                    .filter(|q| {
                        q.node
                            .as_ref()
                            .is_some_and(|n| self.nodes.get(n).is_some_and(|n| n.ready))
                    })
                    .count();
                pdb_allowance(b, selected.len(), healthy) == 0
            })
    }

    fn decide(&mut self) -> Option<(Command, Vec<String>)> {
        let (pools, pool_names) = self.pool_inputs();
        let daemonsets: Vec<k8s_openapi::api::core::v1::Pod> =
            self.daemonsets.values().cloned().collect();
        let (view, names) = self.view(pools, &pool_names, &daemonsets);
        let command = plan(&view)?;
        Some((command, names))
    }

    pub(super) fn disruption_pass(&mut self) -> Result<(), SimError> {
        self.pass_at = None;
        self.mark_consolidatable();
        if self.command.is_some() {
            return Ok(());
        }
        if let Some((command, names)) = self.decide() {
            self.command = Some(Pending {
                reason: command.reason,
                candidates: command
                    .candidates
                    .iter()
                    .map(|i| names[*i].clone())
                    .collect(),
                replacements: Vec::new(),
                savings: command.savings,
                acting: false,
            });
            self.push(self.now + VALIDATION_DELAY, Ev::Validate);
        } else {
            // wake up when the next node's consolidateAfter runs out
            let next = self
                .nodes
                .values()
                .filter_map(|n| {
                    let pool = self
                        .nodeclaims
                        .get(&n.nodeclaim)
                        .and_then(|c| self.node_pools.get(&c.nodepool))?;
                    consolidatable_at(pool, n.last_pod_event)
                })
                .filter(|t| *t > self.now)
                .min();
            if let Some(t) = next {
                self.schedule_pass(t);
            }
            // a budget window that is open now will close on a minute boundary: look again
            let unix = EPOCH_UNIX + self.now.as_secs();
            let windowed = self.node_pools.values().any(|np| {
                np.spec
                    .disruption
                    .budgets
                    .iter()
                    .any(|b| match (&b.schedule, b.duration) {
                        (Some(s), Some(d)) => kerf_api::cron::CronSchedule::parse(s)
                            .is_ok_and(|c| c.active_at(unix, d.0)),
                        _ => false,
                    })
            });
            if windowed {
                self.schedule_pass(self.now + Duration::from_secs(60));
            }
        }
        Ok(())
    }

    /// Logs each node once when its consolidateAfter has run out since its last pod event.
    fn mark_consolidatable(&mut self) {
        let mut newly = Vec::new();
        for (name, n) in &self.nodes {
            if !n.ready || n.marked_consolidatable == Some(n.last_pod_event) {
                continue;
            }
            let due = self
                .nodeclaims
                .get(&n.nodeclaim)
                .and_then(|c| self.node_pools.get(&c.nodepool))
                .and_then(|np| consolidatable_at(np, n.last_pod_event));
            if due.is_some_and(|t| self.now >= t) {
                newly.push(name.clone());
            }
        }
        for name in newly {
            let Some(n) = self.nodes.get_mut(&name) else {
                continue;
            };
            n.marked_consolidatable = Some(n.last_pod_event);
            let claim = n.nodeclaim.clone();
            self.log.info(
                self.now,
                "nodeclaim.disruption",
                "marking consolidatable",
                json!({"NodeClaim": {"name": claim}, "Node": {"name": name}}),
            );
        }
    }

    /// Re-decides with fresh state; acts only if the same candidates come out.
    pub(super) fn validate_command(&mut self) -> Result<(), SimError> {
        let Some(pending) = self.command.take() else {
            return Ok(());
        };
        let Some((command, names)) = self.decide() else {
            self.schedule_pass(self.now + PASS_INTERVAL);
            return Ok(());
        };
        let now_candidates: Vec<String> = command
            .candidates
            .iter()
            .map(|i| names[*i].clone())
            .collect();
        if command.reason != pending.reason || now_candidates != pending.candidates {
            self.schedule_pass(self.now + PASS_INTERVAL);
            return Ok(());
        }
        self.act(command, now_candidates)
    }

    fn act(&mut self, command: Command, candidates: Vec<String>) -> Result<(), SimError> {
        let method = if command.replacements.is_empty() {
            "delete"
        } else {
            "replace"
        };
        let pools: Vec<String> = candidates
            .iter()
            .filter_map(|n| {
                self.nodes
                    .get(n)
                    .and_then(|n| self.nodeclaims.get(&n.nodeclaim))
                    .map(|c| c.nodepool.clone())
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let id = format!("{:08x}", self.seq);
        let text = format!(
            "{}/{id}: {method}: nodepools=[{}]: [{}] -> [{} replacement(s)] (savings: ${:.2})",
            command.reason.as_str(),
            pools.join(", "),
            candidates.join(", "),
            command.replacements.len(),
            command.savings
        );
        if self.options.check {
            // budgets are never exceeded
            for pool in &pools {
                let np = &self.node_pools[pool];
                let of_pool = |n: &&super::SimNode| {
                    self.nodeclaims
                        .get(&n.nodeclaim)
                        .is_some_and(|c| c.nodepool == *pool)
                };
                let total = self.nodes.values().filter(of_pool).count();
                let deleting = self
                    .nodes
                    .values()
                    .filter(of_pool)
                    .filter(|n| n.deleting.is_some())
                    .count();
                let mine = candidates
                    .iter()
                    .filter(|c| {
                        self.nodes
                            .get(*c)
                            .and_then(|n| self.nodeclaims.get(&n.nodeclaim))
                            .is_some_and(|c| c.nodepool == *pool)
                    })
                    .count();
                let allowed = allowed_disruptions(
                    np,
                    command.reason,
                    total,
                    deleting,
                    EPOCH_UNIX + self.now.as_secs(),
                );
                if mine > allowed {
                    return Err(self.violation(format!("disruption of {mine} nodes of nodepool {pool} exceeds its budget of {allowed}")));
                }
            }
        }
        self.log.info(
            self.now,
            "disruption",
            "disrupting node(s)",
            json!({
                "command": text, "reason": command.reason.as_str().to_lowercase(),
            }),
        );
        for c in &candidates {
            self.taint(c);
        }
        let mut launched = Vec::new();
        for r in &command.replacements {
            let pool = self.pool_inputs().1[r.node_pool].clone();
            match self.launch_plan(r, &pool) {
                Some(name) => launched.push(name),
                None => {
                    // a replacement failed: give the command up and untaint
                    for c in &candidates {
                        if let Some(n) = self.nodes.get_mut(c) {
                            n.taints.retain(|t| t.key != labels::DISRUPTED_TAINT_KEY);
                        }
                    }
                    self.schedule_pass(self.now + PASS_INTERVAL);
                    return Ok(());
                }
            }
        }
        self.command = Some(Pending {
            reason: command.reason,
            candidates,
            replacements: launched,
            savings: command.savings,
            acting: true,
        });
        self.continue_command();
        Ok(())
    }

    /// Deletes the candidates once every replacement is Ready.
    pub(super) fn continue_command(&mut self) {
        let Some(c) = &self.command else { return };
        if !c.acting {
            return;
        }
        let mut ready = true;
        for r in &c.replacements {
            match self.nodeclaims.get(r) {
                None => {
                    // the replacement is gone: untaint and give up
                    let candidates = c.candidates.clone();
                    for n in candidates {
                        if let Some(n) = self.nodes.get_mut(&n) {
                            n.taints.retain(|t| t.key != labels::DISRUPTED_TAINT_KEY);
                        }
                    }
                    self.command = None;
                    self.schedule_pass(self.now + PASS_INTERVAL);
                    return;
                }
                Some(claim) => {
                    ready &= claim
                        .node
                        .as_ref()
                        .and_then(|n| self.nodes.get(n))
                        .is_some_and(|n| n.ready);
                }
            }
        }
        if !ready {
            return;
        }
        let c = self.command.take().expect("checked");
        for n in &c.candidates {
            self.terminate(n);
        }
        self.log.info(
            self.now,
            "disruption",
            "command succeeded",
            json!({
                "reason": c.reason.as_str().to_lowercase(), "savings": format!("${:.2}", c.savings),
            }),
        );
        self.schedule_pass(self.now + PASS_INTERVAL);
    }

    fn taint(&mut self, node: &str) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        if n.taints
            .iter()
            .any(|t| t.key == labels::DISRUPTED_TAINT_KEY)
        {
            return;
        }
        n.taints.push(disrupted_taint());
        self.log.info(self.now, "node.termination", "tainted node", json!({
            "Node": {"name": node}, "taint.Key": labels::DISRUPTED_TAINT_KEY, "taint.Value": "", "taint.Effect": "NoSchedule",
        }));
    }

    /// Starts deleting a node: taint it and drain it.
    pub(super) fn terminate(&mut self, node: &str) {
        self.taint(node);
        if let Some(n) = self.nodes.get_mut(node)
            && n.deleting.is_none()
        {
            n.deleting = Some(self.now);
            self.push(self.now, Ev::Drain(node.to_string()));
        }
    }

    /// Evicts in tiers (see [`drain_tier`]): a tier starts once every pod of the tiers
    /// before it is gone; the node is deleted when no pod is left.
    pub(super) fn drain(&mut self, node: &str) -> Result<(), SimError> {
        let Some(n) = self.nodes.get(node) else {
            return Ok(());
        };
        let since = n.deleting.unwrap_or(self.now);
        let claim = n.nodeclaim.clone();
        let grace = self
            .nodeclaims
            .get(&claim)
            .and_then(|c| self.node_pools.get(&c.nodepool))
            .and_then(|np| np.spec.template.spec.termination_grace_period)
            .map(|g| g.0);
        let forced = grace.is_some_and(|g| self.now >= since + g);
        let mut on_node: Vec<(u8, String)> = self
            .pods_where(|p| p.node.as_deref() == Some(node))
            .into_iter()
            .map(|k| (drain_tier(&self.pods[&k].pod, self.pods[&k].daemon), k))
            .collect();
        on_node.sort();
        for tier in 0..4 {
            let mut left = 0;
            for (_, k) in on_node.iter().filter(|(t, _)| *t == tier) {
                let p = &self.pods[k];
                let protected = pod_blocks(&p.pod, p.pending_since, self.now);
                if !forced && (protected || self.pdb_blocks(k)) {
                    left += 1;
                    continue;
                }
                self.evict(k, forced)?;
            }
            if left > 0 {
                self.push(self.now + DRAIN_RETRY, Ev::Drain(node.to_string()));
                return Ok(());
            }
        }
        self.log.info(
            self.now,
            "node.termination",
            "deleted node",
            json!({"Node": {"name": node}}),
        );
        let provider = self
            .nodeclaims
            .get(&claim)
            .and_then(|c| c.instance.as_ref())
            .map(|i| i.provider_id.clone());
        self.log.info(
            self.now,
            "nodeclaim.lifecycle",
            "deleted nodeclaim",
            json!({
                "NodeClaim": {"name": claim}, "Node": {"name": node}, "provider-id": provider,
            }),
        );
        self.remove_nodeclaim(&claim);
        Ok(())
    }

    /// Evicts a pod; `forced` once the terminationGracePeriod has run out.
    fn evict(&mut self, k: &str, forced: bool) -> Result<(), SimError> {
        let Some(p) = self.pods.get(k) else {
            return Ok(());
        };
        if self.options.check && !forced {
            // no do-not-disrupt pod is evicted, and no PodDisruptionBudget is broken
            if pod_blocks(&p.pod, p.pending_since, self.now) {
                return Err(self.violation(format!("evicted do-not-disrupt pod {k}")));
            }
            if self.pdb_blocks(k) {
                return Err(self.violation(format!(
                    "evicted pod {k} although its PodDisruptionBudget allows no disruption"
                )));
            }
        }
        let workload = p.workload.is_some() || p.daemon;
        // the report counts the pods users run; daemonset pods go with every node
        if !p.daemon {
            self.totals.pods_evicted += 1;
        }
        // evicted pods go; their controller makes new ones
        self.delete_pod(k);
        if !workload {
            self.log.info(
                self.now,
                "node.termination",
                "evicted pod without a controller",
                json!({"Pod": k}),
            );
        }
        Ok(())
    }

    /// Expiry: forceful, no budget.
    pub(super) fn expire(&mut self, nc: &str) {
        let Some(c) = self.nodeclaims.get(nc) else {
            return;
        };
        self.log.info(
            self.now,
            "nodeclaim.expiration",
            "deleting expired nodeclaim",
            json!({"NodeClaim": {"name": nc}}),
        );
        match c.node.clone() {
            Some(node) => self.terminate(&node),
            None => self.remove_nodeclaim(nc),
        }
    }

    /// One message from the interruption queue. Malformed messages are logged and dropped.
    /// Spot interruptions mark the offering unavailable; spot interruptions, scheduled
    /// changes and stop/terminate notices cordon and drain the node at once, so its pods get
    /// capacity before the instance goes; rebalance recommendations are logged only.
    pub(super) fn receive(&mut self, body: &str) {
        let message = match interruption::parse(body) {
            Ok(m) => m,
            Err(e) => {
                self.log.error(
                    self.now,
                    "interruption",
                    "failed parsing interruption message",
                    json!({"error": e.to_string()}),
                );
                return;
            }
        };
        for id in &message.instance_ids {
            let found = self.nodeclaims.iter().find_map(|(name, c)| {
                let inst = c.instance.as_ref().filter(|i| i.id == *id)?;
                Some((name.clone(), c.node.clone(), inst.clone()))
            });
            let Some((claim, node, inst)) = found else {
                continue;
            };
            let fields = json!({
                "NodeClaim": {"name": claim}, "Node": {"name": node},
                "messageKind": message.kind.as_str(), "instance-id": id,
            });
            if message.kind.action() == Action::Log {
                self.log.info(
                    self.now,
                    "interruption",
                    "received interruption message",
                    fields,
                );
                continue;
            }
            if message.kind == interruption::Kind::SpotInterruption {
                self.unavailable.mark(
                    Pattern {
                        capacity_type: Some(inst.capacity_type.clone()),
                        instance_type: Some(inst.instance_type.clone()),
                        zone: Some(inst.zone.clone()),
                    },
                    self.now,
                );
            }
            self.log.info(
                self.now,
                "interruption",
                "initiating delete from interruption message",
                fields,
            );
            match node {
                Some(node) => self.terminate(&node),
                None => self.remove_nodeclaim(&claim),
            }
        }
    }
}
