//! The emptiness invariant: once the cluster has been quiet (the convergence check's
//! quiet), no node Karpenter would certainly delete as empty stays one for long. The node
//! is Ready and labelled initialized, its NodeClaim initialized and not being deleted, no
//! workload pod has been on it for its NodePool's consolidateAfter, and that NodePool
//! consolidates empty nodes, is not static, still allows the node's labels and has budget
//! left for `Empty` as Karpenter counts it. A node that has met all of that without a
//! break for two minutes (a disruption pass, the nomination window, the validation wait,
//! with room to spare) and is still there is a violation.
//!
//! Read from the stored Nodes, NodeClaims, pods, NodePools, EC2NodeClasses and
//! PodDisruptionBudgets and the cloud's instances, with each node's last pod event as the
//! convergence check saw it; Kerf's disruption code is not asked. It keeps quiet where
//! Karpenter might not act and this checker cannot tell: a pod with any
//! `karpenter.sh/do-not-disrupt` value or selected by any PodDisruptionBudget (even a
//! DaemonSet's), a `karpenter.sh/do-not-disrupt` node or NodeClaim, a drifted NodeClaim, a
//! budget schedule it cannot read, a drain still holding workload pods (Karpenter nominates
//! nodes for them), a write being retried, an API server that is down or was lately, and any
//! CapacityBuffer in the cluster (its room is kept on nodes no pod is on).

use std::collections::BTreeMap;
use std::time::Duration;

use kerf_api::duration::NillableDuration;
use kerf_api::labels;
use kerf_api::nodepool::{ConsolidationPolicy, DisruptionReason};
use kerf_core::cluster::PodOwner;

use super::oracle::schedules_understood;
use super::spot_preference::holds;
use super::{Checkers, Sight, SimError};
use crate::kube_scheduler::selector_matches;

/// How long a node may stay certainly deletable before it counts as a violation.
pub(in crate::world) const DELETE_WITHIN: Duration = Duration::from_secs(120);

impl Checkers {
    /// Runs at the convergence check's quiet points under `--check`.
    pub(super) fn check_empty_nodes(&mut self, seen: &Sight<'_>) -> Result<(), SimError> {
        let now = seen.now;
        // a CapacityBuffer keeps room on nodes no pod is on, which this check does not size
        let buffered = seen.scenario.spec.feature_gates.capacity_buffer;
        let calm = (!buffered || seen.api.objects.buffers.is_empty())
            && !seen.writes_pending
            && now >= seen.api_back() + DELETE_WITHIN
            && !self.drain_holds_pods(seen);
        let deletable: Vec<(String, String, Duration)> = if calm {
            (seen.api.nodes.iter())
                .filter_map(|(name, _)| {
                    let (pool, since) = self.certainly_deletable(seen, name)?;
                    Some((name.clone(), pool, since))
                })
                .collect()
        } else {
            Vec::new()
        };
        let tracked = &mut self.convergence.deletable_since;
        tracked.retain(|node, _| deletable.iter().any(|(n, _, _)| n == node));
        for (node, _, _) in &deletable {
            tracked.entry(node.clone()).or_insert(now);
        }
        for (node, pool, since) in deletable {
            let from = self.convergence.deletable_since[&node];
            if now >= from + DELETE_WITHIN {
                return Err(seen.violation(format!(
                    "emptiness: node {node} of nodepool {pool} has had no workload pod since \
                     {}, has been past its consolidateAfter with budget left since {}, and \
                     was not deleted",
                    crate::clock::rfc3339(since),
                    crate::clock::rfc3339(from)
                )));
            }
        }
        Ok(())
    }

    /// Whether a node being drained still holds a workload pod: Karpenter's provisioner
    /// plans those pods onto the other nodes and nominates them, which keeps them from
    /// consolidation.
    fn drain_holds_pods(&self, seen: &Sight<'_>) -> bool {
        (seen.api.pods.values())
            .filter(|p| p.owner != PodOwner::DaemonSet)
            .filter_map(|p| p.node.as_deref())
            .any(|node| {
                let disrupted = seen.api.nodes.get(node).is_some_and(|n| n.disrupted());
                disrupted
                    || (seen.instance_of_node(node)).is_some_and(|(c, _)| c.deleting.is_some())
            })
    }

    /// The NodePool and last pod event of `node` when Karpenter would certainly delete it
    /// as empty now.
    fn certainly_deletable(&self, seen: &Sight<'_>, node: &str) -> Option<(String, Duration)> {
        let n = seen.api.nodes.get(node)?;
        let pinned = |a: Option<&BTreeMap<String, String>>| {
            a.is_some_and(|a| a.get(labels::DO_NOT_DISRUPT).is_some_and(|v| v == "true"))
        };
        let initialized = n
            .labels
            .get(labels::INITIALIZED)
            .is_some_and(|v| v == "true");
        if !n.ready || !initialized || n.disrupted() || pinned(Some(&n.annotations)) {
            return None;
        }
        let (claim, _) = seen.instance_of_node(node)?;
        let status = claim.object.status.as_ref()?;
        let condition =
            |kind: &str| (status.conditions.iter()).any(|k| k.type_ == kind && k.status == "True");
        if claim.deleting.is_some()
            || !condition("Initialized")
            || condition("Drifted")
            || pinned(claim.object.metadata.annotations.as_ref())
        {
            return None;
        }
        let pool = claim.pool()?;
        if n.labels.get(labels::NODEPOOL).map(String::as_str) != Some(pool) {
            return None;
        }
        let np = seen.api.objects.node_pools.get(pool)?;
        let disruption = &np.spec.disruption;
        let NillableDuration::After(after) = disruption.consolidate_after else {
            return None;
        };
        let consolidates = matches!(
            disruption.consolidation_policy,
            ConsolidationPolicy::WhenEmpty | ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        let class = &np.spec.template.spec.node_class_ref.name;
        let allowed = (np.spec.template.spec.requirements.iter())
            .all(|r| holds(r.operator, &r.values, n.labels.get(&r.key)));
        if !consolidates
            || np.spec.replicas.is_some()
            || !allowed
            || !seen.api.objects.node_classes.contains_key(class)
            || !schedules_understood(np)
        {
            return None;
        }
        let since = self.convergence.last_pod_event(node)?;
        let quiet = self.convergence.quiet_since();
        if seen.now < since.max(quiet) + after {
            return None;
        }
        let none = BTreeMap::new();
        for p in (seen.api.pods.values()).filter(|p| p.node.as_deref() == Some(node)) {
            let pod = p.declared();
            // any PodDisruptionBudget whose selector takes the pod, in any namespace (one
            // left out defaults on one side only), and any do-not-disrupt value (this check
            // keeps to nodes that are certainly deletable)
            let pod_labels = pod.metadata.labels.as_ref().unwrap_or(&none);
            let guarded = seen.api.objects.pdbs.values().any(|b| {
                (b.spec.as_ref())
                    .and_then(|s| s.selector.as_ref())
                    .is_none_or(|s| selector_matches(s, pod_labels))
            });
            let marked = (pod.metadata.annotations.as_ref())
                .is_some_and(|a| a.contains_key(labels::DO_NOT_DISRUPT));
            if p.owner != PodOwner::DaemonSet || guarded || marked {
                return None;
            }
        }
        if seen.budget_left(np, DisruptionReason::Empty) <= 0 {
            return None;
        }
        Some((pool.to_string(), since))
    }
}
