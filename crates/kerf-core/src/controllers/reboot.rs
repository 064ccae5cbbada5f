//! Reboots for repair, as Karpenter v1.15's `nodeclaim.reboot` carries them out: node repair
//! commits a reboot on a NodeClaim (`Rebooting` True `RebootRequested`, its drain bound in
//! `karpenter.sh/reboot-termination-grace-period`); the node is tainted
//! `karpenter.sh/rebooting:NoSchedule` and drained by eviction only (PodDisruptionBudgets and
//! do-not-disrupt hold; what is left at the bound rides through the reboot); its boot id is
//! recorded (`karpenter.sh/reboot-pre-boot-id`) and the cloud asked to reboot it
//! (`RebootIssued`, `Initialized` Unknown, the `karpenter.sh/initialized` label taken off); a
//! new boot id lifts the taint, and with the node Ready the reboot has succeeded and the
//! node initializes again. A reboot not issued within [`ISSUANCE_TIMEOUT`] or not recovered
//! within [`RECOVERY_TIMEOUT`] gives the node up: its NodeClaim is deleted. Two reboots of
//! a NodeClaim within [`REBOOT_WINDOW`] and its next repair replaces it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kerf_api::labels;
use kerf_api::nodepool::DisruptionReason;
use serde_json::json;

use super::desk::Desk;
use super::{Action, Controllers, Event, EventObject, Timer};
use crate::cluster::{PodOwner, Reboot, RebootPhase};
use crate::controllers::disruption::PdbAllowances;
use crate::disruption::rules::{drain_tier, pod_blocks};
use crate::metrics::families;
use crate::repair::{Decision, RepairAction};

/// How often a reboot under way is looked at when nothing it waits for changes.
pub const REBOOT_POLL: Duration = Duration::from_secs(15);
/// Every drain before a reboot lasts at least this long, for pods bound late to catch it.
pub const MIN_DRAIN: Duration = Duration::from_secs(5);
/// How long the cloud has to take a reboot once the node is drained.
pub const ISSUANCE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// How long a rebooted node has to come back with a new boot and Ready.
pub const RECOVERY_TIMEOUT: Duration = Duration::from_secs(20 * 60);
/// Reboots of one NodeClaim are counted over this window…
pub const REBOOT_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// …and after this many, the next repair replaces the node instead.
pub const REBOOTS_BEFORE_REPLACEMENT: usize = 2;

/// Why a reboot the cloud did not take within [`ISSUANCE_TIMEOUT`] failed (Karpenter's text).
const NOT_ISSUED: &str = "reboot was not issued within the issuance timeout";

/// Why the cloud did not take a reboot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RebootRefusal {
    /// The cloud cannot reboot (`reboot not implemented by the cloud provider`): the node is
    /// given up at once.
    NotImplemented,
    /// The cloud refused it for good (unauthorized, the instance gone): given up at once.
    Rejected(String),
    /// The call failed and may pass: tried again until [`ISSUANCE_TIMEOUT`].
    Failed(String),
}

/// What the reboot controller keeps between looks (not written anywhere: a restart loses it,
/// as Karpenter's process-local memory does).
#[derive(Default)]
pub(crate) struct RebootCalls {
    /// When each NodeClaim's reboots were committed, within [`REBOOT_WINDOW`].
    committed: BTreeMap<String, Vec<Duration>>,
    /// When the NodeClaims waiting on the cloud recorded their pre-reboot boot id: the
    /// issuance timeout counts from here.
    issuing: BTreeMap<String, Duration>,
    /// The NodeClaims whose reboot the cloud is being asked for now.
    asked: BTreeSet<String>,
    /// When the cloud last failed a NodeClaim's reboot: it is asked again a
    /// [`REBOOT_POLL`] later, not at every change of the node.
    failed: BTreeMap<String, Duration>,
}

impl RebootCalls {
    /// A reboot decision turned into a replacement when its NodeClaim was rebooted
    /// [`REBOOTS_BEFORE_REPLACEMENT`] times within [`REBOOT_WINDOW`]: rebooting did not cure
    /// it. Returns whether it escalated.
    pub(super) fn escalate_reboot(
        &self,
        claim: &str,
        decision: &mut Decision,
        now: Duration,
    ) -> bool {
        if decision.action != RepairAction::Reboot {
            return false;
        }
        let recent = (self.committed.get(claim).into_iter().flatten())
            .filter(|t| now < **t + REBOOT_WINDOW)
            .count();
        if recent < REBOOTS_BEFORE_REPLACEMENT {
            return false;
        }
        decision.action = RepairAction::Replace;
        true
    }

    /// Asks the cloud to reboot the node: one operation id for every try of one reboot.
    fn ask_reboot(
        &mut self,
        desk: &mut Desk,
        claim: &str,
        node: &str,
        r: &Reboot,
        pre_boot_id: &str,
    ) {
        let Some(provider_id) = (desk.cluster.nodeclaims.get(claim))
            .and_then(|c| c.launched.as_ref())
            .map(|l| l.provider_id.clone())
        else {
            return;
        };
        let requested = (r.requested + desk.epoch()).as_secs() * 1_000_000_000;
        self.asked.insert(claim.to_string());
        desk.actions.push(Action::Reboot {
            nodeclaim: claim.to_string(),
            node: node.to_string(),
            provider_id,
            operation_id: format!("{claim}-{requested}-{pre_boot_id}"),
        });
    }

    /// The cloud took the reboot: `RebootIssued`, the node no longer initialized.
    fn reboot_issued(&mut self, desk: &mut Desk, claim: &str, now: Duration) {
        self.settle_reboot(claim);
        let Some(c) = desk.cluster.nodeclaims.get_mut(claim) else {
            return;
        };
        let Some(r) = c.reboot.as_mut() else {
            return;
        };
        r.phase = RebootPhase::Issued(now);
        c.initialized = false;
        let node = c.node.clone();
        desk.cluster.changes.disruption = true;
        desk.status_changed(claim);
        if let Some(node) = node {
            desk.actions.push(Action::RelabelNode {
                node,
                labels: BTreeMap::from([(labels::INITIALIZED.into(), None)]),
            });
        }
        reboot_at(desk, claim, now + REBOOT_POLL);
    }

    /// The node came back: `Rebooting` False `RebootSucceeded`; it initializes again.
    fn reboot_succeeded(
        &mut self,
        desk: &mut Desk,
        claim: &str,
        r: &Reboot,
        issued: Duration,
        now: Duration,
    ) {
        desk.actions.push(Action::AnnotateNodeClaim {
            nodeclaim: claim.to_string(),
            annotations: BTreeMap::from([(labels::REBOOT_PRE_BOOT_ID.to_string(), None)]),
        });
        self.end_reboot(
            desk,
            claim,
            "RebootSucceeded",
            "node rebooted and rejoined the cluster",
            now,
        );
        desk.log(
            "nodeclaim.reboot",
            "reboot reached terminal outcome",
            json!({"NodeClaim": {"name": claim}, "reason": "RebootSucceeded"}),
        );
        let took = now.saturating_sub(r.requested).as_secs_f64();
        count_reboot(desk, "succeeded", took);
        let recovery = now.saturating_sub(issued).as_secs_f64();
        (desk.metrics.recorder()).observe(
            &families::NODES_REBOOT_RECOVERY_DURATION_SECONDS,
            &[],
            recovery,
        );
        // initialized again as a new node is: Ready, startup and ephemeral taints gone
        desk.cluster.changes.lifecycle.insert(claim.to_string());
    }

    /// The reboot asked for cannot be carried out as written (a drain bound that does not
    /// read): it ends failed and the node stays, untainted, as Karpenter's `invalid_request`.
    fn reboot_invalid(
        &mut self,
        desk: &mut Desk,
        claim: &str,
        node: Option<&str>,
        message: &str,
        now: Duration,
    ) {
        if let Some(node) = node {
            desk.actions.push(Action::RemoveTaint {
                node: node.to_string(),
                key: labels::REBOOTING_TAINT_KEY.into(),
            });
        }
        let took = (desk.cluster.nodeclaims.get(claim))
            .and_then(|c| c.reboot.as_ref())
            .map_or(0.0, |r| now.saturating_sub(r.requested).as_secs_f64());
        let pre_boot = (desk.cluster.nodeclaims.get(claim))
            .and_then(|c| c.reboot.as_ref())
            .is_some_and(|r| r.pre_boot_id.is_some());
        if pre_boot {
            desk.actions.push(Action::AnnotateNodeClaim {
                nodeclaim: claim.to_string(),
                annotations: BTreeMap::from([(labels::REBOOT_PRE_BOOT_ID.to_string(), None)]),
            });
        }
        self.end_reboot(desk, claim, "RebootFailed", message, now);
        desk.log(
            "nodeclaim.reboot",
            "reboot reached terminal outcome",
            json!({"NodeClaim": {"name": claim}, "reason": "RebootFailed"}),
        );
        tell_reboot_failed(desk, claim, message, now);
        count_reboot(desk, "invalid_request", took);
    }

    /// A NodeClaim read again: a reboot still asked for takes its drain bound as the
    /// annotation says now, as Karpenter reads it at each look (an annotation taken off is
    /// left alone: these controllers' own write of it may not be back yet).
    pub(super) fn reboot_bound_observed(
        &mut self,
        desk: &mut Desk,
        claim: &str,
        object: &kerf_api::NodeClaim,
        now: Duration,
    ) {
        let annotated = (object.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key(labels::REBOOT_TERMINATION_GRACE_PERIOD));
        if !annotated {
            return;
        }
        let bound = crate::objects::reboot_bound(object);
        let Some(r) = (desk.cluster.nodeclaims.get_mut(claim)).and_then(|c| c.reboot.as_mut())
        else {
            return;
        };
        if r.phase != RebootPhase::Requested || r.drain_bound == bound {
            return;
        }
        r.drain_bound = bound;
        reboot_at(desk, claim, now);
    }

    /// `Rebooting` False with this outcome, from now: repair tolerates a fault again from
    /// here.
    fn end_reboot(
        &mut self,
        desk: &mut Desk,
        claim: &str,
        reason: &'static str,
        message: &str,
        now: Duration,
    ) {
        self.settle_reboot(claim);
        if let Some(r) = (desk.cluster.nodeclaims.get_mut(claim)).and_then(|c| c.reboot.as_mut()) {
            r.phase = RebootPhase::Ended {
                at: now,
                reason,
                message: message.to_string(),
            };
        }
        desk.cluster.changes.disruption = true;
        desk.status_changed(claim);
    }

    /// A NodeClaim gone: what the reboot controller kept of it goes too.
    pub(super) fn forget_reboot(&mut self, claim: &str) {
        self.committed.remove(claim);
        self.settle_reboot(claim);
    }

    /// A reboot over, or given up: what was kept for its calls goes.
    fn settle_reboot(&mut self, claim: &str) {
        self.issuing.remove(claim);
        self.asked.remove(claim);
        self.failed.remove(claim);
    }

    /// The cloud's answer to [`Action::Reboot`].
    pub(crate) fn reboot_answered(
        &mut self,
        desk: &mut Desk,
        claim: &str,
        result: Result<(), RebootRefusal>,
        now: Duration,
    ) {
        desk.activity += 1;
        self.asked.remove(claim);
        let under_way = (desk.cluster.nodeclaims.get(claim))
            .and_then(|c| c.reboot.as_ref())
            .is_some_and(|r| r.phase == RebootPhase::Requested);
        if !under_way {
            return;
        }
        match result {
            Ok(()) => self.reboot_issued(desk, claim, now),
            Err(RebootRefusal::NotImplemented) => {
                let message = "reboot not implemented by the cloud provider";
                self.reboot_failed(desk, claim, "provider_error", message, now);
            }
            Err(RebootRefusal::Rejected(why)) => {
                let message = format!("reboot rejected by the cloud provider: {why}");
                self.reboot_failed(desk, claim, "provider_error", &message, now);
            }
            Err(RebootRefusal::Failed(why)) => {
                self.failed.insert(claim.to_string(), now);
                desk.log_error(
                    "nodeclaim.reboot",
                    "failed to reboot node",
                    json!({"NodeClaim": {"name": claim}, "error": why}),
                );
                reboot_at(desk, claim, now + REBOOT_POLL);
            }
        }
    }

    /// `RebootIssued`: a new boot id lifts the taint; with the node Ready, it succeeded.
    fn reboot_issued_step(
        &mut self,
        desk: &mut Desk,
        claim: &str,
        node: Option<&str>,
        r: &Reboot,
        at: Duration,
        now: Duration,
    ) {
        let booted = node
            .map(|n| &desk.cluster.nodes[n])
            .filter(|n| r.pre_boot_id.as_ref().is_some_and(|pre| *pre != n.boot_id));
        if let (Some(n), Some(name)) = (booted, node) {
            let ready = n.ready;
            let tainted = (n.taints.iter()).any(|t| t.key == labels::REBOOTING_TAINT_KEY);
            if tainted {
                desk.actions.push(Action::RemoveTaint {
                    node: name.to_string(),
                    key: labels::REBOOTING_TAINT_KEY.into(),
                });
                desk.event(
                    Event {
                        kind: EventObject::NodeClaim,
                        name: claim.to_string(),
                        warning: false,
                        reason: "RebootObserved".into(),
                        message: "New boot observed (bootID changed); awaiting node readiness"
                            .into(),
                    },
                    now,
                );
            }
            if ready {
                self.reboot_succeeded(desk, claim, r, at, now);
                return;
            }
        }
        if now >= at + RECOVERY_TIMEOUT {
            let message = "node did not recover within the observation window";
            self.reboot_failed(desk, claim, "recovery_timeout", message, now);
            return;
        }
        let next = (now + REBOOT_POLL).min(at + RECOVERY_TIMEOUT);
        reboot_at(desk, claim, next);
    }

    /// The reboot failed: the node is given up (its NodeClaim deleted, its pods going by the
    /// drain bound), said on the NodeClaim.
    fn reboot_failed(
        &mut self,
        desk: &mut Desk,
        claim: &str,
        result: &'static str,
        message: &str,
        now: Duration,
    ) {
        let Some(c) = desk.cluster.nodeclaims.get(claim) else {
            return;
        };
        let (node, r) = (c.node.clone(), c.reboot.clone());
        if let Some(node) = node.filter(|n| desk.cluster.nodes.contains_key(n)) {
            desk.actions.push(Action::RemoveTaint {
                node,
                key: labels::REBOOTING_TAINT_KEY.into(),
            });
        }
        tell_reboot_failed(desk, claim, message, now);
        desk.log_error(
            "nodeclaim.reboot",
            "reboot failed, replacing node",
            json!({"NodeClaim": {"name": claim}, "result": result, "error": message}),
        );
        let took = r
            .as_ref()
            .map_or(0.0, |r| now.saturating_sub(r.requested).as_secs_f64());
        count_reboot(desk, result, took);
        self.settle_reboot(claim);
        if let Some(bound) = r.and_then(|r| r.drain_bound.ok().flatten()) {
            desk.terminate_by(claim, now + bound, now);
        }
        desk.record_reason(claim, DisruptionReason::Unhealthy);
        desk.delete_nodeclaim(claim, now);
    }
}

impl Controllers {
    /// Commits a reboot of `node` for repair: the drain bound and `Rebooting` written on its
    /// NodeClaim, counted as Karpenter's `reboot` decision. Returns whether it was committed
    /// (not when a reboot is under way or the NodeClaim is going).
    pub(super) fn commit_reboot(&mut self, node: &str, decision: &Decision, now: Duration) -> bool {
        let Some((claim, c)) = self.desk.cluster.claim_of_node(node) else {
            return false;
        };
        if c.deleting.is_some() || c.reboot.as_ref().is_some_and(Reboot::under_way) {
            return false;
        }
        let claim = claim.clone();
        let bound = (c.termination_grace_period)
            .map_or(decision.drain_bound, |g| g.min(decision.drain_bound));
        let condition = &decision.governing.condition;
        let message = format!("rebooting for {}/{}", condition.kind, condition.reason);
        self.desk.actions.push(Action::AnnotateNodeClaim {
            nodeclaim: claim.clone(),
            annotations: BTreeMap::from([(
                labels::REBOOT_TERMINATION_GRACE_PERIOD.to_string(),
                Some(crate::repair::go_duration(bound)),
            )]),
        });
        self.desk.marks += 1;
        if let Some(c) = self.desk.cluster.nodeclaims.get_mut(&claim) {
            c.reboot = Some(Reboot {
                phase: RebootPhase::Requested,
                requested: now,
                message,
                drain_bound: Ok(Some(bound)),
                pre_boot_id: None,
            });
        }
        self.desk.record_reason(&claim, DisruptionReason::Unhealthy);
        let times = self.reboot.committed.entry(claim.clone()).or_default();
        times.retain(|t| now < *t + REBOOT_WINDOW);
        times.push(now);
        self.desk.status_changed(&claim);
        self.desk.log(
            "disruption",
            "committed node reboot",
            json!({"NodeClaim": {"name": claim}}),
        );
        super::health::count_repair(&mut self.desk, &claim, decision, bound);
        reboot_at(&mut self.desk, &claim, now);
        true
    }

    /// One look at a NodeClaim's reboot: the drain, the cloud's call, the new boot, the
    /// timeouts.
    pub(super) fn reboot_step(&mut self, claim: &str, now: Duration) {
        let Some(c) = self.desk.cluster.nodeclaims.get(claim) else {
            self.reboot.forget_reboot(claim);
            return;
        };
        let Some(r) = c
            .reboot
            .clone()
            .filter(|r| r.under_way() && c.deleting.is_none())
        else {
            self.reboot.settle_reboot(claim);
            return;
        };
        let node = c
            .node
            .clone()
            .filter(|n| self.desk.cluster.nodes.contains_key(n));
        self.desk.record_reason(claim, DisruptionReason::Unhealthy);
        match r.phase {
            RebootPhase::Requested => self.reboot_requested(claim, node.as_deref(), &r, now),
            RebootPhase::Issued(at) => {
                self.reboot
                    .reboot_issued_step(&mut self.desk, claim, node.as_deref(), &r, at, now)
            }
            RebootPhase::Ended { .. } => {}
        }
    }

    /// `RebootRequested`: taint, drain, record the boot id, ask the cloud.
    fn reboot_requested(&mut self, claim: &str, node: Option<&str>, r: &Reboot, now: Duration) {
        if let Err(why) = &r.drain_bound {
            self.reboot.reboot_invalid(
                &mut self.desk,
                claim,
                node,
                &format!("invalid reboot request: {why}"),
                now,
            );
            return;
        }
        let issuing = self.reboot.issuing.get(claim).copied();
        let deadline = issuing.unwrap_or(r.requested) + ISSUANCE_TIMEOUT;
        let Some(node) = node else {
            if now >= deadline {
                self.reboot
                    .reboot_failed(&mut self.desk, claim, "provider_error", NOT_ISSUED, now);
            } else {
                reboot_at(&mut self.desk, claim, now + REBOOT_POLL);
            }
            return;
        };
        if self.reboot.asked.contains(claim) {
            return; // the cloud's answer brings the next look
        }
        let boot_id = self.desk.cluster.nodes[node].boot_id.clone();
        if let Some(pre) = &r.pre_boot_id {
            // drained already, and asked before (a refused call, or a restart): a new boot
            // means the call went through; else it is asked again, not drained again
            if *pre != boot_id {
                self.reboot.reboot_issued(&mut self.desk, claim, now);
                return;
            }
            if issuing.is_none() {
                self.reboot.issuing.insert(claim.to_string(), now);
            } else if now >= deadline {
                self.reboot
                    .reboot_failed(&mut self.desk, claim, "provider_error", NOT_ISSUED, now);
                return;
            }
            if let Some(again) =
                (self.reboot.failed.get(claim).map(|t| *t + REBOOT_POLL)).filter(|t| now < *t)
            {
                reboot_at(&mut self.desk, claim, again.min(deadline));
                return;
            }
            self.reboot.ask_reboot(&mut self.desk, claim, node, r, pre);
            return;
        }
        add_rebooting_taint(&mut self.desk, node);
        if !self.drained_for_reboot(claim, node, r, now) {
            return;
        }
        self.desk.actions.push(Action::AnnotateNodeClaim {
            nodeclaim: claim.to_string(),
            annotations: BTreeMap::from([(
                labels::REBOOT_PRE_BOOT_ID.to_string(),
                Some(boot_id.clone()),
            )]),
        });
        if let Some(Reboot { pre_boot_id, .. }) =
            (self.desk.cluster.nodeclaims.get_mut(claim)).and_then(|c| c.reboot.as_mut())
        {
            *pre_boot_id = Some(boot_id.clone());
        }
        self.reboot.issuing.insert(claim.to_string(), now);
        self.reboot
            .ask_reboot(&mut self.desk, claim, node, r, &boot_id);
    }

    /// Whether the drain before the reboot is over: at least [`MIN_DRAIN`] after the
    /// request, and every pod evicted that may be, or the drain bound reached (what is left
    /// rides through the reboot). Evicts in tiers, as termination's drain does, but never
    /// deletes a pod.
    fn drained_for_reboot(&mut self, claim: &str, node: &str, r: &Reboot, now: Duration) -> bool {
        let earliest = r.requested + MIN_DRAIN;
        let bound = r.drain_bound.clone().ok().flatten();
        let deadline = bound.map(|b| r.requested + b.max(MIN_DRAIN));
        if bound == Some(Duration::ZERO) && now >= earliest {
            return true;
        }
        if deadline.is_some_and(|d| now >= d) {
            return true;
        }
        // no eviction before the taint is stored: the replacements would come right back
        let tainted = (self.desk.cluster.nodes[node].taints.iter())
            .any(|t| t.key == labels::REBOOTING_TAINT_KEY);
        let mut on_node: Vec<(u8, String)> = (self.desk.cluster.pods.iter())
            .filter(|(_, p)| p.node.as_deref() == Some(node))
            .filter(|(_, p)| !super::blockers::tolerates_disrupted(&p.shape))
            .filter(|(_, p)| !super::is_mirror(&p.shape))
            .map(|(k, p)| {
                (
                    drain_tier(&p.shape, p.owner == PodOwner::DaemonSet),
                    k.clone(),
                )
            })
            .collect();
        on_node.sort();
        let mut left = 0;
        if tainted {
            let mut budgets = PdbAllowances::new(&self.desk.cluster, &self.termination.evicting);
            for tier in 0..4 {
                for (_, k) in on_node.iter().filter(|(t, _)| *t == tier) {
                    left += 1;
                    let p = &self.desk.cluster.pods[k];
                    if p.terminating || self.termination.evicting.contains(&self.desk.cluster, k) {
                        continue;
                    }
                    if pod_blocks(&p.shape, p.started, now) || budgets.blocks(&self.desk.cluster, k)
                    {
                        continue;
                    }
                    budgets.spend(&self.desk.cluster, k);
                    self.termination.evict(&mut self.desk, k, None, claim, now);
                }
                if left > 0 {
                    break;
                }
            }
        } else {
            left = on_node.len().max(1);
        }
        if left == 0 && now >= earliest {
            return true;
        }
        let mut next = now + super::termination::EVICTION_WAIT;
        if left == 0 {
            next = earliest;
        }
        if let Some(d) = deadline {
            next = next.min(d);
        }
        reboot_at(&mut self.desk, claim, next);
        false
    }
}

/// Karpenter's taint on a node drained and rebooted for repair.
pub fn rebooting_taint() -> kerf_api::Taint {
    kerf_api::Taint {
        key: labels::REBOOTING_TAINT_KEY.into(),
        value: None,
        effect: kerf_api::TaintEffect::NoSchedule,
        time_added: None,
    }
}

/// Karpenter's `RebootFailed` Warning on the NodeClaim.
fn tell_reboot_failed(desk: &mut Desk, claim: &str, message: &str, now: Duration) {
    desk.event(
        Event {
            kind: EventObject::NodeClaim,
            name: claim.to_string(),
            warning: true,
            reason: "RebootFailed".into(),
            message: message.to_string(),
        },
        now,
    );
}

/// Looks at a NodeClaim's reboot at `when`, or sooner if a look is due sooner: one
/// timer a NodeClaim, however many changes ask for a look.
pub(super) fn reboot_at(desk: &mut Desk, claim: &str, when: Duration) {
    let timer = Timer::Reboot(claim.to_string());
    let due = (desk.timers.iter())
        .find(|(_, t)| *t == timer)
        .map(|(at, _)| *at);
    match due {
        Some(at) if at <= when => {}
        Some(at) => {
            desk.timers.remove(&(at, timer.clone()));
            desk.at(when, timer);
        }
        None => desk.at(when, timer),
    }
}

fn count_reboot(desk: &mut Desk, result: &str, took: f64) {
    desk.metrics.inc(&families::NODES_REBOOTS, &[result]);
    (desk.metrics.recorder()).observe(&families::NODES_REBOOT_DURATION_SECONDS, &[result], took);
}

/// Keeps new pods off the node while it is drained and rebooted.
fn add_rebooting_taint(desk: &mut Desk, node: &str) {
    let n = &desk.cluster.nodes[node];
    if n.taints
        .iter()
        .any(|t| t.key == labels::REBOOTING_TAINT_KEY)
    {
        return;
    }
    desk.actions.push(Action::Taint {
        node: node.to_string(),
        taint: rebooting_taint(),
        by: None,
    });
}
