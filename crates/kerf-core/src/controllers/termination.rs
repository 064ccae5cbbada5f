//! Termination and expiry: a NodeClaim being deleted has its node tainted and drained in
//! tiers (see [`drain_tier`]), PodDisruptionBudgets and `karpenter.sh/do-not-disrupt`
//! respected until the NodePool's terminationGracePeriod runs out; then the instance, the
//! Node and the NodeClaim go.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::metrics::families;

use super::desk::Desk;
use super::{Action, Controllers, Event, EventObject, Timer};
use crate::cluster::{Cluster, PodOwner};
use crate::controllers::disruption::{PdbAllowances, has_disrupted_taint};
use crate::disruption::rules::{drain_tier, pod_blocks};
use crate::objects::Detachment;

/// How often a draining node retries evictions a PDB refused.
pub const DRAIN_RETRY: Duration = Duration::from_secs(5);
/// How long a drain waits for evicted pods to be gone before it looks again.
pub const EVICTION_WAIT: Duration = Duration::from_secs(1);
/// How often a drained node looks again for its volumes to be detached (Karpenter's
/// requeue).
pub const DETACH_RETRY: Duration = Duration::from_secs(1);
/// How long a NodeClaim whose finalizer Kerf released may stay before the release is asked
/// again: a drain that comes due meanwhile (an earlier round's timer) waits, where it once
/// deleted the node, terminated the instance and logged `deleted nodeclaim` a second time
/// while the first release still queued behind a 10,000-pod scale-in's writes.
pub const RELEASE_RETRY: Duration = Duration::from_secs(120);
/// How long a NodeClaim released and then seen gone is remembered as gone: an older update of
/// it, from a watch running behind (18 minutes behind in a 50,000-pod scale-in), does not make
/// it anew to be terminated a second time.
pub const GONE_KEPT: Duration = Duration::from_secs(3600);

/// Pods asked to leave, by key, with their incarnation and why they were asked: a pod made
/// again under the same name (a StatefulSet's, recreated as soon as the old one is gone) is
/// a new pod, whose eviction is still to be asked.
#[derive(Clone, Debug, Default)]
pub struct Evicting(BTreeMap<String, (u64, String)>);

impl Evicting {
    /// Whether the pod of this name now is one whose eviction was asked.
    pub fn contains(&self, cluster: &Cluster, key: &str) -> bool {
        self.0
            .get(key)
            .is_some_and(|(i, _)| cluster.pods.get(key).is_some_and(|p| p.incarnation == *i))
    }

    /// Records an eviction asked of the pod of this name now, and why (and forgets the pods
    /// gone); `false` when it was asked already.
    fn insert(&mut self, cluster: &Cluster, key: &str, why: &str) -> bool {
        self.0
            .retain(|k, (i, _)| cluster.pods.get(k).is_some_and(|p| p.incarnation == *i));
        let Some(p) = cluster.pods.get(key) else {
            return false;
        };
        let before = self
            .0
            .insert(key.to_string(), (p.incarnation, why.to_string()));
        before.is_none_or(|(i, _)| i != p.incarnation)
    }

    /// Forgets an eviction that did not happen; whether one was recorded.
    fn remove(&mut self, key: &str) -> bool {
        self.0.remove(key).is_some()
    }

    /// Why the eviction of this pod was asked, while it is recorded.
    fn why(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|(_, why)| why.as_str())
    }
}

/// What termination keeps between drains.
#[derive(Default)]
pub(crate) struct Terminations {
    /// Pods whose eviction was asked for, while they still exist.
    pub(super) evicting: Evicting,
    /// The NodeClaims whose node drains (`false`) or has drained (`true`): their `Drained`
    /// condition.
    pub(super) drained: BTreeMap<String, bool>,
    /// The drained NodeClaims' volumes: their `VolumesDetached` condition.
    pub(super) detachment: BTreeMap<String, Detachment>,
    /// The NodeClaims whose finalizer was released, and when: their termination is done
    /// until the watch shows them gone.
    pub(super) released: BTreeMap<String, Duration>,
    /// The released NodeClaims since seen gone, and when ([`GONE_KEPT`]).
    pub(super) gone: BTreeMap<String, Duration>,
}

impl Terminations {
    /// An eviction asked for `pod` did not happen (a PodDisruptionBudget refused it with 429,
    /// or the API server could not be reached): the drain asks again on its next round, as
    /// Karpenter's eviction queue requeues a refused eviction.
    /// `code` is the API server's answer, when one came (429, 500, …).
    pub(crate) fn eviction_refused(
        &mut self,
        desk: &mut Desk,
        pod: &str,
        code: Option<u16>,
        now: Duration,
    ) {
        if let Some(code) = code {
            let text = code.to_string();
            desk.metrics
                .inc(&families::PODS_EVICTION_REQUESTS, &[&text]);
        }
        // a PodDisruptionBudget's refusal is said on the node, as Karpenter says it
        let node = (desk.cluster.pods.get(pod)).and_then(|p| p.node.clone());
        if let (Some(429), Some(node)) = (code, node) {
            desk.event(
                Event {
                    kind: EventObject::Node,
                    name: node,
                    warning: true,
                    reason: "FailedDraining".into(),
                    message: format!(
                        "Failed to drain node, evicting pod violates a PDB (Pod={pod})"
                    ),
                },
                now,
            );
        }
        if self.evicting.remove(pod) {
            desk.activity += 1;
        }
    }

    /// The API server took the eviction asked of `pod`: the pod is told so with an
    /// `Evicted` Event, as Karpenter tells it once its eviction succeeds (a refused one,
    /// asked again, is announced once).
    pub(crate) fn evicted(&mut self, desk: &mut Desk, pod: &str, now: Duration) {
        desk.metrics
            .inc(&families::PODS_EVICTION_REQUESTS, &["200"]);
        let Some(why) = self.evicting.why(pod) else {
            return;
        };
        let message = format!("Evicted pod: {why}");
        desk.metrics.inc(&families::PODS_DRAINED, &[why]);
        desk.event(
            Event {
                kind: EventObject::Pod,
                name: pod.to_string(),
                warning: false,
                reason: "Evicted".into(),
                message,
            },
            now,
        );
    }

    /// A NodeClaim is gone: its drained mark, kept for its last status, goes too, and so
    /// does the look again at its release.
    pub(crate) fn forget_drained(&mut self, desk: &mut Desk, claim: &str, now: Duration) {
        self.drained.remove(claim);
        self.detachment.remove(claim);
        if let Some(asked) = self.released.remove(claim) {
            (desk.timers).remove(&(asked + RELEASE_RETRY, Timer::Release(claim.to_string())));
            let gone = &mut self.gone;
            gone.retain(|_, at| *at + GONE_KEPT > now);
            gone.insert(claim.to_string(), now);
        }
    }

    /// Whether a NodeClaim being deleted that these controllers do not hold is one they
    /// released and saw gone: an older update of it, not to be made anew.
    pub(crate) fn released_and_gone(&self, desk: &Desk, claim: &str) -> bool {
        !desk.cluster.nodeclaims.contains_key(claim) && self.gone.contains_key(claim)
    }

    /// A NodeClaim whose finalizer was released [`RELEASE_RETRY`] ago is still here: the
    /// release is asked again (the first may have failed), and nothing else is done or
    /// counted twice.
    pub(super) fn release_again(&mut self, desk: &mut Desk, claim: &str, now: Duration) {
        let Some(asked) = self.released.get(claim).copied() else {
            return;
        };
        if !desk.cluster.nodeclaims.contains_key(claim) {
            self.forget_drained(desk, claim, now);
            return;
        }
        let due = asked + RELEASE_RETRY;
        if now < due {
            desk.at(due, Timer::Release(claim.to_string()));
            return;
        }
        self.released.insert(claim.to_string(), now);
        desk.actions.push(Action::ReleaseNodeClaim {
            nodeclaim: claim.to_string(),
        });
        desk.at(now + RELEASE_RETRY, Timer::Release(claim.to_string()));
    }

    /// Whether a drained node waits for its volumes to be detached before its instance
    /// goes, as Karpenter's termination waits: while VolumeAttachments of persistent volumes
    /// remain on it and its termination time (`end`) has not come, the Node is told
    /// `AwaitingVolumeDetachment`, `VolumesDetached` is Unknown, and it is looked at again
    /// in a second. Once they are gone `VolumesDetached` is True; at the termination time it
    /// is False and the instance goes anyway. (Karpenter leaves out the attachments of pods
    /// it does not drain; Kerf drains every pod first, so none is left to leave out.)
    fn awaits_detachment(
        &mut self,
        desk: &mut Desk,
        claim: &str,
        node: &str,
        end: Option<Duration>,
        now: Duration,
    ) -> bool {
        let attached: Vec<String> = (desk.cluster.volumes.attached_to(node).into_iter())
            .map(String::from)
            .collect();
        let state = if attached.is_empty() {
            Detachment::Done
        } else if end.is_some_and(|t| now >= t) {
            Detachment::GraceElapsed
        } else {
            Detachment::Awaiting
        };
        let changed = self.detachment.insert(claim.to_string(), state) != Some(state);
        if state != Detachment::Awaiting {
            // written with the rest of the termination's last status
            return false;
        }
        if changed {
            desk.status_changed(claim);
        }
        desk.event(
            Event {
                kind: EventObject::Node,
                name: node.to_string(),
                warning: false,
                reason: "AwaitingVolumeDetachment".into(),
                message: format!(
                    "Awaiting deletion of bound volumeattachments ({})",
                    crate::controllers::list_text(&attached)
                ),
            },
            now,
        );
        let next = (now + DETACH_RETRY).min(end.unwrap_or(Duration::MAX));
        desk.at(next, Timer::Drain(claim.to_string()));
        true
    }

    /// Evicts a pod, or, with the node's termination time (`forced_by`), deletes it with what
    /// is left until then as its grace period (a second at least), past PodDisruptionBudgets
    /// and do-not-disrupt, and says so on the pod as Karpenter does.
    pub(super) fn evict(
        &mut self,
        desk: &mut Desk,
        key: &str,
        forced_by: Option<Duration>,
        claim: &str,
        now: Duration,
    ) {
        let forced = forced_by.is_some();
        let Some(p) = desk.cluster.pods.get(key) else {
            return;
        };
        let why = (desk.reason_of(claim))
            .map_or("Forceful Termination", |r| r.as_str())
            .to_string();
        let owned = p.owner != PodOwner::None;
        let own = (p.shape.spec.as_ref())
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(0);
        if !self.evicting.insert(&desk.cluster, key, &why) && !forced {
            return; // asked already: it is on its way out
        }
        if !owned {
            desk.log(
                "node.termination",
                "evicted pod without a controller",
                json!({"Pod": key}),
            );
        }
        if let Some(end) = forced_by {
            let left = end.saturating_sub(now).as_secs();
            let grace = i64::try_from(left).unwrap_or(i64::MAX).max(1);
            let at = crate::clock::go_time(end + desk.epoch());
            desk.event(
                Event {
                    kind: EventObject::Pod,
                    name: key.to_string(),
                    warning: false,
                    reason: "Disrupted".into(),
                    message: format!(
                        "Deleting the pod to accommodate the terminationTime {at} of the node. The \
                     pod was granted {grace} seconds of grace-period of its {own} \
                     terminationGracePeriodSeconds. This bypasses the PDB of the pod and the \
                     do-not-disrupt annotation."
                    ),
                },
                now,
            );
            desk.metrics.inc(&families::PODS_DRAINED, &[&why]);
            desk.actions.push(Action::DeletePod {
                pod: key.to_string(),
                grace_seconds: Some(grace),
            });
            return;
        }
        desk.actions.push(Action::Evict {
            pod: key.to_string(),
        });
    }

    /// Deletes, in any tier, the pods whose own grace period would outlast the node's
    /// termination time `end` were they evicted now, as Karpenter's drain does, so that each
    /// still gets what is left of it; looks again when the next one comes due.
    fn delete_outlasting(
        &mut self,
        desk: &mut Desk,
        on_node: &[(u8, String)],
        end: Duration,
        claim: &str,
        now: Duration,
    ) {
        let mut due_next: Option<Duration> = None;
        let mut outlasting = Vec::new();
        for (_, k) in on_node {
            let p = &desk.cluster.pods[k];
            let own = (p.shape.spec.as_ref()).and_then(|s| s.termination_grace_period_seconds);
            // going already, or a deletion (an eviction) asked and not refused
            let asked = self.evicting.contains(&desk.cluster, k);
            let (false, Some(own)) = (p.terminating || asked, own) else {
                continue;
            };
            let due = end.saturating_sub(Duration::from_secs(u64::try_from(own).unwrap_or(0)));
            if now > due {
                outlasting.push(k.clone());
            } else {
                due_next = Some(due_next.map_or(due, |d| d.min(due)));
            }
        }
        for k in outlasting {
            self.evict(desk, &k, Some(end), claim, now);
        }
        if let Some(due) = due_next {
            desk.at(
                due + Duration::from_millis(1),
                Timer::Drain(claim.to_string()),
            );
        }
    }
}

impl Controllers {
    /// Evicts in tiers: a tier starts once every pod of the tiers before it is gone; the
    /// instance, node and NodeClaim go when no pod is left.
    pub(super) fn drain(&mut self, claim: &str, now: Duration) {
        let Some(c) = self.desk.cluster.nodeclaims.get(claim) else {
            self.termination.forget_drained(&mut self.desk, claim, now);
            return;
        };
        // released already: a drain that comes due afterwards (an earlier round's timer)
        // has nothing left to do
        if self.termination.released.contains_key(claim) {
            return;
        }
        let since = c.deleting.unwrap_or(now);
        let node = c.node.clone();
        let provider = c.launched.as_ref().map(|l| l.provider_id.clone());
        if let Some(node) = &node {
            let grace = c.termination_grace_period;
            // the node's termination time: its pods are gone by then, whatever holds them
            let end = [grace.map(|g| since + g), c.terminate_at]
                .into_iter()
                .flatten()
                .min();
            let forced = end.is_some_and(|t| now >= t);
            // no eviction before the taint is stored: the evicted pods' replacements would
            // be bound right back (Karpenter's termination taints, then drains)
            let tainted = (self.desk.cluster.nodes.get(node)).is_none_or(has_disrupted_taint);
            if !forced && !tainted {
                self.desk.taint(node);
                self.desk
                    .at(now + EVICTION_WAIT, Timer::Drain(claim.to_string()));
                return;
            }
            if !self.termination.drained.contains_key(claim) {
                self.termination.drained.insert(claim.to_string(), false);
                self.desk.status_changed(claim);
            }
            let mut on_node: Vec<(u8, String)> = self
                .desk
                .cluster
                .pods
                .iter()
                .filter(|(_, p)| p.node.as_deref() == Some(node.as_str()))
                .map(|(k, p)| {
                    (
                        drain_tier(&p.shape, p.owner == PodOwner::DaemonSet),
                        k.clone(),
                    )
                })
                .collect();
            on_node.sort();
            if let Some(end) = end
                && !forced
            {
                self.termination
                    .delete_outlasting(&mut self.desk, &on_node, end, claim, now);
            }
            let mut budgets = PdbAllowances::new(&self.desk.cluster, &self.termination.evicting);
            for tier in 0..4 {
                let (mut blocked, mut evicted) = (0, 0);
                for (_, k) in on_node.iter().filter(|(t, _)| *t == tier) {
                    let p = &self.desk.cluster.pods[k];
                    // asked already, or on its way out on its own (evicted by an operator
                    // before a restart, deleted by its owner): wait for it to go
                    if !forced
                        && (p.terminating
                            || self.termination.evicting.contains(&self.desk.cluster, k))
                    {
                        evicted += 1;
                        continue;
                    }
                    let protected = pod_blocks(&p.shape, p.started, now);
                    if !forced && (protected || budgets.blocks(&self.desk.cluster, k)) {
                        blocked += 1;
                        continue;
                    }
                    budgets.spend(&self.desk.cluster, k);
                    self.termination
                        .evict(&mut self.desk, k, end.filter(|_| forced), claim, now);
                    evicted += 1;
                }
                // the node goes only once its pods are gone: look again when evictions had
                // time to finish, or when a budget may allow more
                // (and no later than the grace period's end, when every pod goes at once)
                if blocked > 0 || evicted > 0 {
                    let wait = if blocked > 0 {
                        DRAIN_RETRY
                    } else {
                        EVICTION_WAIT
                    };
                    let mut next = now + wait;
                    if let Some(end) = grace.map(|g| since + g).filter(|end| *end > now) {
                        next = next.min(end);
                    }
                    self.desk.at(next, Timer::Drain(claim.to_string()));
                    // said on the node while pods remain, as Karpenter's drain error is
                    self.desk.event(
                        Event {
                            kind: EventObject::Node,
                            name: node.clone(),
                            warning: true,
                            reason: "FailedDraining".into(),
                            message: format!(
                                "Failed to drain node, {} pods are waiting to be evicted",
                                on_node.len()
                            ),
                        },
                        now,
                    );
                    return;
                }
            }
            if self.termination.drained.insert(claim.to_string(), true) != Some(true) {
                let pool = (self.desk.cluster.nodeclaims.get(claim)).map(|c| c.node_pool.clone());
                self.desk
                    .metrics
                    .inc(&families::NODES_DRAINED, &[pool.as_deref().unwrap_or("")]);
            }
            if self
                .termination
                .awaits_detachment(&mut self.desk, claim, node, end, now)
            {
                return;
            }
            self.desk.log(
                "node.termination",
                "deleted node",
                json!({"Node": {"name": node}}),
            );
            self.desk.count_node_deleted(node, now);
            self.desk
                .actions
                .push(Action::DeleteNode { node: node.clone() });
        }
        if let Some(provider_id) = provider.clone() {
            if let Some(c) = self.desk.cluster.nodeclaims.get_mut(claim) {
                c.instance_terminating = true;
            }
            self.lifecycle
                .terminate_instance(&mut self.desk, claim, provider_id, now);
        }
        // Drained and InstanceTerminating, written before the finalizer goes (the drained
        // mark is kept until the NodeClaim is seen gone: the poll's status is worked out at
        // its end)
        if node.is_some() || provider.is_some() {
            self.desk.status_changed(claim);
        }
        self.desk.log(
            "nodeclaim.lifecycle",
            "deleted nodeclaim",
            json!({"NodeClaim": {"name": claim}, "Node": {"name": node}, "provider-id": provider}),
        );
        self.desk.count_nodeclaim_deleted(claim, now);
        self.lifecycle.forget_lifecycle(claim);
        self.consistency.forget_consistency(&mut self.desk, claim);
        self.desk.actions.push(Action::ReleaseNodeClaim {
            nodeclaim: claim.to_string(),
        });
        self.termination.released.insert(claim.to_string(), now);
        self.desk
            .at(now + RELEASE_RETRY, Timer::Release(claim.to_string()));
        self.desk.forget_reason(claim);
        self.reboot.forget_reboot(claim);
    }
}

/// Expiry: forceful, no budget.
pub(super) fn expire(desk: &mut Desk, claim: &str, now: Duration) {
    if desk
        .cluster
        .nodeclaims
        .get(claim)
        .is_none_or(|c| c.deleting.is_some())
    {
        return;
    }
    desk.log(
        "nodeclaim.expiration",
        "deleting expired nodeclaim",
        json!({"NodeClaim": {"name": claim}}),
    );
    desk.count_disrupted(claim, "expired", "", true);
    desk.delete_nodeclaim(claim, now);
}
