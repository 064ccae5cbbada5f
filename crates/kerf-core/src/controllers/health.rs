//! Node repair as Karpenter v1.15 runs it (behind its `NodeRepair` feature gate, off by
//! default): a disruption method, first in each pass. A node one of the cloud's repair
//! policies ([`crate::repair`]) has been due on is replaced or rebooted, one per pass, within
//! its NodePool's `Unhealthy` budget. A replaced node's replacement is launched first, then its
//! pods are drained gracefully until the policy's drain bound runs out (PodDisruptionBudgets
//! and pods' do-not-disrupt hold only until then; the node's own do-not-disrupt does not
//! hold); a rebooted one is handed to [`super::reboot`].
//! `karpenter.sh/do-not-repair: "true"` on the node vetoes repair, and a NodePool with more
//! than [`UNHEALTHY_SHARE`] % of its nodes unhealthy is left alone: that is an outage to look
//! at, not nodes to replace.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::desk::Desk;
use super::{Controllers, Event, EventObject};
use crate::disruption::search::RepairView;
use crate::metrics::families;
use crate::repair::{self, Decision, UNHEALTHY_SHARE};

/// A node repair would replace, and why.
#[derive(Clone, Debug)]
pub(super) struct RepairDue {
    /// What the disruption pass reads.
    pub(super) view: RepairView,
    /// The governing policy, the drain bound and the score.
    pub(super) decision: Decision,
}

/// What node repair keeps between passes.
#[derive(Default)]
pub(super) struct Repairs {
    /// The nodes node repair may replace, by node name, as the last pass found them.
    pub(super) repairs: BTreeMap<String, RepairDue>,
    /// The decisions of the repair commands under way, by node name, as they were taken.
    pub(super) repairing: BTreeMap<String, RepairDue>,
}

/// A node repair may not replace: its name, its NodeClaim's, and the NodePool past the
/// unhealthy share (none when the node's annotation vetoes repair).
pub(super) type Blocked = (String, String, Option<String>);

impl Repairs {
    /// A repair command that failed: its node is no longer being repaired.
    pub(super) fn repair_abandoned(&mut self, node: &str) {
        self.repairing.remove(node);
    }

    /// A repair command takes this node: logged as Karpenter's `selected repair policy`, and
    /// a replacement's decision kept for when the node goes.
    pub(super) fn select_repair(&mut self, desk: &mut Desk, node: &str) {
        let Some(due) = self.repairs.get(node).cloned() else {
            return;
        };
        let action = due.decision.action;
        let condition = &due.decision.governing.condition;
        let policy = due.decision.governing.policy;
        desk.log(
            "disruption",
            "selected repair policy",
            json!({
                "Node": {"name": node},
                "condition": condition.kind,
                "status": condition.status,
                "reason": condition.reason,
                "reason-regex": policy.reason.regex(),
                "fallback": policy.reason == repair::ReasonFilter::Fallback,
                "action": action.as_str(),
                "eligible-at": crate::clock::rfc3339(due.decision.governing.due + desk.epoch()),
                "termination-grace-period": repair::go_duration(due.decision.drain_bound),
                "termination-grace-period-condition": condition.kind,
            }),
        );
        if action == repair::RepairAction::Replace {
            self.repairing.insert(node.to_string(), due);
        }
    }

    /// The node of a repair command is about to be deleted: its drain may take the policy's
    /// bound (or its NodeClaim's own grace period, if shorter) and no longer, and it counts
    /// into Karpenter's repair metric.
    pub(super) fn bound_repair(&mut self, desk: &mut Desk, node: &str, claim: &str, now: Duration) {
        let Some(due) = self.repairing.remove(node) else {
            return;
        };
        let Some(c) = desk.cluster.nodeclaims.get(claim) else {
            return;
        };
        let bound = (c.termination_grace_period).map_or(due.decision.drain_bound, |g| {
            g.min(due.decision.drain_bound)
        });
        count_repair(desk, claim, &due.decision, bound);
        desk.terminate_by(claim, now + bound, now);
    }

    /// Works out which nodes repair may replace now (into the disruption state), with the
    /// events of those it may not.
    pub(super) fn find_repairs(
        &mut self,
        desk: &mut Desk,
        reboot: &super::reboot::RebootCalls,
        now: Duration,
    ) {
        let (due, blocked) = repairs_due(desk, reboot, now);
        for (node, claim, pool) in blocked {
            repair_blocked(desk, &node, &claim, pool.as_deref(), now);
        }
        self.repairs = due;
    }
}

impl Controllers {
    /// `look` with the nodes due for repair as they are at `now` in place of the last
    /// pass's list, which is put back after (a node repaired since is already going): a
    /// checker's look at what a fresh pass would decide.
    pub(super) fn with_repairs_as_at<T>(
        &mut self,
        now: Duration,
        look: impl FnOnce(&mut Controllers) -> T,
    ) -> T {
        let due = repairs_due(&self.desk, &self.reboot, now).0;
        let kept = std::mem::replace(&mut self.health.repairs, due);
        let seen = look(self);
        self.health.repairs = kept;
        seen
    }
}

/// The events of a node repair leaves alone: vetoed by its annotation, or its NodePool
/// (`tripped`) past the unhealthy share.
fn repair_blocked(desk: &mut Desk, node: &str, claim: &str, tripped: Option<&str>, now: Duration) {
    let (warning, reason, message) = match tripped {
        Some(pool) => (
            true,
            "NodeRepairBlocked",
            format!("more than {UNHEALTHY_SHARE}% of nodes in nodepool \"{pool}\" are unhealthy"),
        ),
        None => (
            false,
            "DisruptionBlocked",
            "repair is blocked through the \"karpenter.sh/do-not-repair\" annotation".into(),
        ),
    };
    let mut objects = vec![
        (EventObject::Node, node.to_string()),
        (EventObject::NodeClaim, claim.to_string()),
    ];
    if let Some(pool) = tripped {
        objects.push((EventObject::NodePool, pool.to_string()));
    }
    for (kind, name) in objects {
        desk.event(
            Event {
                kind,
                name,
                warning,
                reason: reason.into(),
                message: message.clone(),
            },
            now,
        );
    }
}

/// Counts a repair into Karpenter's `karpenter_nodeclaims_unhealthy_disrupted_total`: the
/// condition acted on, and whether its drain is bounded (`eventual`) or none
/// (`forceful`).
pub(super) fn count_repair(desk: &mut Desk, claim: &str, decision: &Decision, bound: Duration) {
    let Some(c) = desk.cluster.nodeclaims.get(claim) else {
        return;
    };
    let mode = if bound.is_zero() {
        "forceful"
    } else {
        "eventual"
    };
    let (capacity_type, image) = c.launched.as_ref().map_or(("", ""), |l| {
        (
            l.capacity_type.as_str(),
            l.image_id.as_deref().unwrap_or(""),
        )
    });
    desk.metrics.inc(
        &families::NODECLAIMS_UNHEALTHY_DISRUPTED,
        &[
            capacity_type,
            &repair::snake_case(&decision.governing.condition.kind),
            image,
            &c.node_pool,
            mode,
        ],
    );
}

/// The nodes repair may replace now, and those it may not with the NodePool that
/// trips the unhealthy share (none: vetoed by the node's annotation). Reads only.
pub(super) fn repairs_due(
    desk: &Desk,
    reboot: &super::reboot::RebootCalls,
    now: Duration,
) -> (BTreeMap<String, RepairDue>, Vec<Blocked>) {
    if !desk.settings.node_repair {
        return Default::default();
    }
    let policies = desk.settings.repair_policies;
    // per NodePool: its nodes, and those a policy's condition and status match
    let mut pools: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for n in desk.cluster.nodes.values() {
        let Some(pool) = n.labels.get(kerf_api::labels::NODEPOOL) else {
            continue;
        };
        let counts = pools.entry(pool.as_str()).or_default();
        counts.0 += 1;
        counts.1 += usize::from(repair::unhealthy(policies, &n.conditions));
    }
    let tripped: BTreeMap<String, bool> = (pools.into_iter())
        .map(|(p, (nodes, unhealthy))| (p.to_string(), repair::tripped(nodes, unhealthy)))
        .collect();
    let mut due = Vec::new();
    let mut blocked = Vec::new();
    for (name, n) in &desk.cluster.nodes {
        let Some((claim_name, claim)) = n
            .nodeclaim
            .as_ref()
            .and_then(|k| desk.cluster.nodeclaims.get_key_value(k))
        else {
            continue;
        };
        // a NodeClaim already going, or one whose node never registered (liveness
        // replaces those), or one being rebooted
        let rebooting = claim.reboot.as_ref().is_some_and(|r| r.under_way());
        if claim.deleting.is_some() || !claim.registered || rebooting {
            continue;
        }
        if !desk.cluster.node_pools.contains_key(&claim.node_pool) {
            continue;
        }
        let matches = repair::matches(policies, &n.conditions, n.created);
        // a fault a reboot did not clear is tolerated again from the reboot's end
        let rebooted = claim.reboot.as_ref().and_then(|r| r.ended());
        let Some(mut decision) = repair::decide(&matches, now, rebooted) else {
            continue;
        };
        reboot.escalate_reboot(claim_name, &mut decision, now);
        if n.do_not_repair {
            blocked.push((name.clone(), claim_name.clone(), None));
            continue;
        }
        if tripped.get(&claim.node_pool).copied().unwrap_or(false) {
            blocked.push((
                name.clone(),
                claim_name.clone(),
                Some(claim.node_pool.clone()),
            ));
            continue;
        }
        let view = RepairView {
            score: decision.score,
            initialized: claim.initialized,
            reboot: decision.action == repair::RepairAction::Reboot,
        };
        due.push((name.clone(), RepairDue { view, decision }));
    }
    (due.into_iter().collect(), blocked)
}
