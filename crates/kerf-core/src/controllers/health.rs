//! Node repair, behind Karpenter's `NodeRepair` feature gate (off by default): a node whose
//! `Ready` condition has not been True for [`REPAIR_TOLERATION`] (AWS's repair policy for
//! Ready False and Unknown) has its NodeClaim deleted at once, its pods going regardless of
//! budgets and do-not-disrupt, so the provisioner replaces it. A NodePool with more than
//! [`UNHEALTHY_SHARE`] % of its nodes unhealthy (rounded up) is left alone: that is an
//! outage to look at, not a node to replace.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::{Controllers, Event, EventObject, Timer};

/// How long a node may stay not Ready before it is replaced.
pub const REPAIR_TOLERATION: Duration = Duration::from_secs(30 * 60);
/// The share of a NodePool's nodes that may be unhealthy at once for repair to go on.
pub const UNHEALTHY_SHARE: usize = 20;

impl Controllers {
    /// Deletes the NodeClaims of nodes unhealthy past the toleration, pool by pool.
    pub(super) fn repair_unhealthy(&mut self) {
        if !self.settings.node_repair {
            return;
        }
        // per NodePool: its nodes, and those whose Ready condition is not True
        let mut pools: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        let mut due = Vec::new();
        for (node, n) in &self.cluster.nodes {
            let Some((claim, c)) = n
                .nodeclaim
                .as_ref()
                .and_then(|k| self.cluster.nodeclaims.get_key_value(k))
            else {
                continue;
            };
            let counts = pools.entry(c.node_pool.as_str()).or_default();
            counts.0 += 1;
            if n.ready {
                continue;
            }
            counts.1 += 1;
            if self.now >= n.ready_changed + REPAIR_TOLERATION && c.terminate_at.is_none() {
                due.push((claim.clone(), node.clone(), c.node_pool.clone()));
            }
        }
        let healthy_enough: BTreeMap<String, bool> = pools
            .into_iter()
            .map(|(pool, (nodes, unhealthy))| {
                let allowed = (nodes * UNHEALTHY_SHARE).div_ceil(100);
                (pool.to_string(), unhealthy <= allowed)
            })
            .collect();
        for (claim, node, pool) in due {
            if !healthy_enough.get(&pool).copied().unwrap_or(false) {
                self.event(Event {
                    kind: EventObject::Node,
                    name: node,
                    warning: true,
                    reason: "NodeRepairBlocked",
                    message: format!(
                        "more than {UNHEALTHY_SHARE}% nodes are unhealthy in the nodepool"
                    ),
                });
                continue;
            }
            let Some(c) = self.cluster.nodeclaims.get_mut(&claim) else {
                continue;
            };
            c.terminate_at = Some(self.now);
            let deleting = c.deleting.is_some();
            self.activity += 1;
            if deleting {
                // a drain under way forces the rest of its pods out now
                self.at(self.now, Timer::Drain(claim));
                continue;
            }
            self.log(
                "node.health",
                "deleting unhealthy node",
                json!({"NodeClaim": {"name": claim}, "Node": {"name": node}}),
            );
            self.count_disrupted(&claim, "unhealthy");
            self.delete_nodeclaim(&claim);
        }
    }
}
