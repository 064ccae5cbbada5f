//! The emptiness invariant: once the cluster has been quiet (the convergence check's
//! quiet), no node Karpenter would certainly delete as empty is still there. The node is
//! Ready, its NodeClaim initialized and not being deleted, no workload pod has been on it
//! since its NodePool's consolidateAfter plus two disruption passes and the validation
//! wait, and that NodePool consolidates empty nodes, is not static, still allows the
//! node's labels and has budget left for `Empty`.
//!
//! Read from the stored Nodes, NodeClaims, pods, NodePools, EC2NodeClasses and
//! PodDisruptionBudgets and the cloud's instances, with each node's last pod event as the
//! convergence check saw it; Kerf's disruption code is not asked. It keeps quiet where
//! Karpenter might not act and this checker cannot tell: a pod or PodDisruptionBudget that
//! could pin the node (even a DaemonSet's), a `karpenter.sh/do-not-disrupt` node or
//! NodeClaim, a drifted NodeClaim, a write being retried, an API server that is down or
//! was lately.

use std::time::Duration;

use kerf_api::duration::NillableDuration;
use kerf_api::labels;
use kerf_api::nodepool::{ConsolidationPolicy, DisruptionReason};
use kerf_core::cluster::PodOwner;
use kerf_core::controllers::disruption::{PASS_INTERVAL, VALIDATION_DELAY};

use super::spot_preference::holds;
use super::{SimError, World};
use crate::kube_scheduler::selector_matches;

/// How long past consolidateAfter Kerf may take to delete an empty node: a disruption
/// pass may just have run (one interval), the next finds the node, and the command waits
/// out its validation; one more interval of slack.
pub(super) const DELETE_WITHIN: Duration = Duration::from_secs(
    2 * PASS_INTERVAL.as_secs() + VALIDATION_DELAY.as_secs() + PASS_INTERVAL.as_secs(),
);

impl World {
    /// Runs at the convergence check's quiet points under `--check`.
    pub(super) fn check_empty_nodes(&self) -> Result<(), SimError> {
        if self.unfinished.next().is_some() || self.now < self.api_back() + DELETE_WITHIN {
            return Ok(());
        }
        for (name, _) in self.nodes.iter() {
            if let Some((pool, since)) = self.certainly_deleted(name) {
                return Err(self.violation(format!(
                    "emptiness: node {name} of nodepool {pool} has had no workload pod since \
                     {}, is past its consolidateAfter with budget left, and was not deleted",
                    crate::clock::rfc3339(since)
                )));
            }
        }
        Ok(())
    }

    /// The NodePool and last pod event of `node` when Karpenter would certainly have
    /// deleted it as empty by now.
    fn certainly_deleted(&self, node: &str) -> Option<(String, Duration)> {
        let n = self.nodes.get(node)?;
        let pinned = |a: Option<&std::collections::BTreeMap<String, String>>| {
            a.is_some_and(|a| a.get(labels::DO_NOT_DISRUPT).is_some_and(|v| v == "true"))
        };
        if !n.ready || n.disrupted() || pinned(Some(&n.annotations)) {
            return None;
        }
        let (claim, _) = self.instance_of_node(node)?;
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
        let np = self.objects.node_pools.get(pool)?;
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
            || !self.objects.node_classes.contains_key(class)
        {
            return None;
        }
        let since = self.convergence.last_pod_event(node)?;
        let quiet = self.convergence.quiet_since();
        if self.now < since.max(quiet) + after + DELETE_WITHIN {
            return None;
        }
        for p in self
            .pods
            .values()
            .filter(|p| p.node.as_deref() == Some(node))
        {
            let pod = p.declared();
            let guarded = self.objects.pdbs.values().any(|b| {
                b.metadata.namespace == pod.metadata.namespace
                    && (b.spec.as_ref())
                        .and_then(|s| s.selector.as_ref())
                        .is_some_and(|s| {
                            let none = std::collections::BTreeMap::new();
                            selector_matches(s, pod.metadata.labels.as_ref().unwrap_or(&none))
                        })
            });
            if p.owner != PodOwner::DaemonSet
                || guarded
                || pinned(pod.metadata.annotations.as_ref())
            {
                return None;
            }
        }
        if self.budget_left(np, DisruptionReason::Empty) <= 0 {
            return None;
        }
        Some((pool.to_string(), since))
    }
}
