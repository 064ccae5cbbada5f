//! The desk every controller works at: the cluster state they share, the settings, the
//! timers, the actions and events they send, the metrics they count. It holds no
//! controller's own memory; each controller keeps that in its own type.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap as HashMap;
use serde_json::{Value, json};

use super::disruption::has_disrupted_taint;
use super::{
    Action, EVENT_DEDUPE, EVENTS_KEPT, Event, EventObject, Level, LogRecord, Settings, Timer,
    is_mirror, termination_mode,
};
use crate::cluster::{Cluster, PodOwner, PodTransition};
use crate::metrics::families;
use crate::unavailable::UnavailableOfferings;
use kerf_api::labels;
use kerf_api::nodepool::ConsolidationPolicy;

/// What the controllers share: each reads and writes the cluster here, sets its timers,
/// and sends its actions, events and logs through it.
pub(crate) struct Desk {
    /// The cluster as observed ([`super::Controllers::observe`]) plus the controllers' own writes.
    pub(crate) cluster: Cluster,
    pub(super) settings: Settings,
    pub(super) rng: ChaCha8Rng,
    pub(super) timers: BTreeSet<(Duration, Timer)>,
    pub(crate) actions: Vec<Action>,
    pub(super) unavailable: UnavailableOfferings,
    /// When each event was last sent, by a hash of its object, reason and message, for
    /// deduplication: with an event for each of thousands of pods, keeping the names and
    /// messages would take megabytes.
    pub(super) events_sent: HashMap<u64, Duration>,
    /// How many `events_sent` held after it was last pruned.
    pub(super) events_pruned: usize,
    /// Counts the controllers' own work (timers fired, cloud answers taken), which writes
    /// to the cluster state directly.
    pub(super) activity: u64,
    /// Counts the controllers' own marks that neither the cluster's writes nor `activity`
    /// count (a node's disrupted taint asked for or dropped, a reboot committed), which the
    /// budget gauges count.
    pub(super) marks: u64,
    /// Karpenter's counters and summaries, kept as the controllers act.
    pub(super) metrics: crate::metrics::Metrics,
    /// Since when the shell's view of the API server has not been whole, if it is not.
    pub(super) unsynced_since: Option<Duration>,
    /// Instance types per node class with unavailable offerings marked, and the
    /// unavailable-offerings generation they were made for.
    pub(super) type_options: HashMap<String, super::TypeOptions>,
    /// Node classes whose instance types were asked for and not yet answered.
    pub(crate) types_asked: BTreeSet<String>,
    /// The last overlay evaluation, with the catalog and unavailable-offerings generations it
    /// read: every solve asks for it, and it changes only with them.
    pub(super) overlay_cache: Option<(u64, u64, crate::overlays::Evaluation)>,
    /// Why each NodeClaim being deleted by a disruption (a command, a repair, a reboot
    /// given up, a static NodePool) goes: its `DisruptionReason` condition, and the events
    /// of the evictions that follow. Karpenter keeps it on the NodeClaim; every controller
    /// that deletes one for a reason writes it here.
    pub(super) disruption_reasons: HashMap<String, kerf_api::nodepool::DisruptionReason>,
    /// The instance types as the solver compiled them, kept for the solves after (see
    /// [`kerf_scheduling::Catalog`]).
    pub(super) catalog: RefCell<kerf_scheduling::Catalog>,
}

impl Desk {
    /// Sets `timer` to fire at `when`.
    pub(super) fn at(&mut self, when: Duration, timer: Timer) {
        self.timers.insert((when, timer));
    }

    /// Counts a node about to be deleted: Karpenter's nodes-terminated counter, the time
    /// since its NodeClaim's deletion began, and its lifetime.
    pub(super) fn count_node_deleted(&mut self, node: &str, now: Duration) {
        let Some(n) = self.cluster.nodes.get(node) else {
            return;
        };
        let label = |key: &str| n.labels.get(key).cloned().unwrap_or_default();
        let (pool, zone) = (
            label(kerf_api::labels::NODEPOOL),
            label(kerf_api::labels::ZONE),
        );
        let began = n
            .nodeclaim
            .as_ref()
            .and_then(|c| self.cluster.nodeclaims.get(c))
            .and_then(|c| c.deleting)
            .unwrap_or(now);
        let took = now.saturating_sub(began);
        let lifetime = now.saturating_sub(n.created);
        self.metrics
            .inc(&families::NODES_TERMINATED, &[&pool, &zone]);
        self.metrics.observe_at(
            &families::NODES_TERMINATION_DURATION_SECONDS,
            &[&pool],
            took.as_secs_f64(),
            now,
        );
        self.metrics.observe_at(
            &families::NODES_LIFETIME_DURATION_SECONDS,
            &[&pool],
            lifetime.as_secs_f64(),
            now,
        );
    }

    /// Counts a NodeClaim whose finalizer is about to be released, and how long its
    /// termination took.
    pub(super) fn count_nodeclaim_deleted(&mut self, claim: &str, now: Duration) {
        let Some(c) = self.cluster.nodeclaims.get(claim) else {
            return;
        };
        let (capacity_type, zone) = c
            .launched
            .as_ref()
            .map(|l| (l.capacity_type.as_str(), l.zone.as_str()))
            .unwrap_or(("", ""));
        self.metrics.inc(
            &families::NODECLAIMS_TERMINATED,
            &[capacity_type, &c.node_pool, zone],
        );
        let took = now.saturating_sub(c.deleting.unwrap_or(now));
        self.metrics.recorder().observe(
            &families::NODECLAIMS_TERMINATION_DURATION_SECONDS,
            &[&c.node_pool],
            took.as_secs_f64(),
        );
    }

    /// Brings the moment `claim`'s pods go regardless of budgets and grace periods forward
    /// to `at` (never later), and writes it as Karpenter's
    /// `karpenter.sh/nodeclaim-termination-timestamp`.
    pub(super) fn terminate_by(&mut self, claim: &str, at: Duration, now: Duration) {
        let Some(c) = self.cluster.nodeclaims.get_mut(claim) else {
            return;
        };
        if c.terminate_at.is_some_and(|t| t <= at) {
            return;
        }
        c.terminate_at = Some(at);
        let node = c.node.clone();
        let unix = at + Duration::from_secs(self.settings.epoch_unix);
        // every pod goes by then, bypassing budgets: said on the NodeClaim and its Node
        let message = format!(
            "All pods will be deleted by {}",
            crate::clock::kubernetes_time(unix)
        );
        let objects = [
            (EventObject::NodeClaim, Some(claim.to_string())),
            (EventObject::Node, node),
        ];
        for (kind, name) in objects {
            if let Some(name) = name {
                self.event(
                    Event {
                        kind,
                        name,
                        warning: true,
                        reason: "TerminationGracePeriodExpiring".into(),
                        message: message.clone(),
                    },
                    now,
                );
            }
        }
        self.actions.push(Action::AnnotateNodeClaim {
            nodeclaim: claim.to_string(),
            annotations: BTreeMap::from([(
                kerf_api::labels::NODECLAIM_TERMINATION_TIMESTAMP.to_string(),
                Some(crate::clock::rfc3339(unix)),
            )]),
        });
    }

    /// Counts a NodeClaim disrupted for `reason` (Karpenter's lower-case reasons) by a
    /// consolidation of `consolidation_type` (empty when not consolidation), and, unless
    /// `pods` is false (a cloud's interruption), the pods its disruption moves.
    pub(super) fn count_disrupted(
        &mut self,
        claim: &str,
        reason: &str,
        consolidation_type: &str,
        pods: bool,
    ) {
        let Some(c) = self.cluster.nodeclaims.get(claim) else {
            return;
        };
        let capacity_type = c.launched.as_ref().map_or("", |l| l.capacity_type.as_str());
        let pool = self.cluster.node_pools.get(&c.node_pool);
        let policy = match pool.map(|p| p.spec.disruption.consolidation_policy) {
            _ if consolidation_type.is_empty() => "",
            Some(ConsolidationPolicy::WhenEmpty) => "when_empty",
            Some(ConsolidationPolicy::Balanced) => "balanced",
            Some(ConsolidationPolicy::WhenEmptyOrUnderutilized) => "when_empty_or_underutilized",
            None => "",
        };
        let mode = termination_mode(pool);
        let values = [capacity_type, policy, c.node_pool.as_str(), reason, mode];
        self.metrics.inc(&families::NODECLAIMS_DISRUPTED, &values);
        if pods {
            let moving = c.node.as_deref().map_or(0, |node| {
                (self.cluster.pods.values())
                    .filter(|p| p.node.as_deref() == Some(node))
                    .filter(|p| p.owner != PodOwner::DaemonSet && !is_mirror(&p.shape))
                    .count()
            });
            self.metrics
                .add(&families::PODS_DISRUPTION_INITIATED, &values, moving as u64);
        }
    }

    /// Counts a pod bound or started into Karpenter's pod latency metrics.
    pub(super) fn count_pod_transition(&mut self, t: PodTransition, now: Duration) {
        match t {
            PodTransition::Bound {
                since_created,
                since_schedulable,
                dynamic_resources,
            } => {
                let dynamic = if dynamic_resources { "true" } else { "false" };
                self.metrics.observe(
                    &families::PODS_BOUND_DURATION_SECONDS,
                    &[dynamic],
                    since_created.as_secs_f64(),
                );
                if let Some(d) = since_schedulable {
                    self.metrics.observe(
                        &families::PODS_PROVISIONING_BOUND_DURATION_SECONDS,
                        &[dynamic],
                        d.as_secs_f64(),
                    );
                }
            }
            PodTransition::Started {
                since_created,
                since_schedulable,
            } => {
                self.metrics.observe_at(
                    &families::PODS_STARTUP_DURATION_SECONDS,
                    &[],
                    since_created.as_secs_f64(),
                    now,
                );
                if let Some(d) = since_schedulable {
                    self.metrics.observe(
                        &families::PODS_PROVISIONING_STARTUP_DURATION_SECONDS,
                        &[],
                        d.as_secs_f64(),
                    );
                }
            }
        }
    }

    /// Drops every setting of `timer`.
    pub(super) fn cancel(&mut self, timer: &Timer) {
        self.timers.retain(|(_, t)| t != timer);
    }

    /// Sends a log line at info level.
    pub(super) fn log(&mut self, controller: &'static str, message: &'static str, fields: Value) {
        self.actions.push(Action::Log(LogRecord {
            level: Level::Info,
            controller,
            message,
            fields,
        }));
    }

    /// Records an event unless a repeat of it went out lately ([`Event::repeat_key`]).
    pub(super) fn event(&mut self, event: Event, now: Duration) {
        let (key, dedupe) = event.repeat_key();
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&key, &mut hasher);
        let key = std::hash::Hasher::finish(&hasher);
        if self
            .events_sent
            .get(&key)
            // a repeat right at the window's end is still dropped, as go-cache expires an
            // entry only past it
            .is_some_and(|at| now <= *at + dedupe)
        {
            return;
        }
        // the events past the longest window dedupe nothing: forgotten once the map has
        // doubled since it was last pruned (pruned at every event past a fixed size, a burst
        // of 50,000 nominations spent most of the operator's CPU walking it)
        if self.events_sent.len() > EVENTS_KEPT.max(2 * self.events_pruned) {
            self.events_sent
                .retain(|_, at| now <= *at + EVENT_DEDUPE * 15 / 2);
            self.events_pruned = self.events_sent.len();
        }
        self.events_sent.insert(key, now);
        self.actions.push(Action::Event(event));
    }

    /// Sends a log line at error level.
    pub(super) fn log_error(
        &mut self,
        controller: &'static str,
        message: &'static str,
        fields: Value,
    ) {
        self.actions.push(Action::Log(LogRecord {
            level: Level::Error,
            controller,
            message,
            fields,
        }));
    }

    /// How far this clock's zero is from the Unix epoch.
    pub(crate) fn epoch(&self) -> Duration {
        Duration::from_secs(self.settings.epoch_unix)
    }

    /// Starts deleting a NodeClaim at `now`: its node is tainted and drained first, if it has
    /// one.
    pub(super) fn delete_nodeclaim(&mut self, name: &str, now: Duration) {
        self.terminate(name, now, now);
    }

    /// Starts deleting a NodeClaim whose deletion began at `since` (its deletion timestamp,
    /// which the terminationGracePeriod counts from).
    pub(super) fn terminate(&mut self, name: &str, since: Duration, now: Duration) {
        self.activity += 1;
        let Some(c) = self.cluster.nodeclaims.get_mut(name) else {
            return;
        };
        if c.deleting.is_some() {
            return;
        }
        c.deleting = Some(since);
        let node = c.node.clone();
        let grace = c.termination_grace_period;
        self.actions.push(Action::DeleteNodeClaim {
            nodeclaim: name.to_string(),
        });
        // Karpenter writes the grace period's end on the NodeClaim when its deletion starts
        if let Some(grace) = grace {
            self.terminate_by(name, since + grace, now);
        }
        self.cluster.changes.disruption = true;
        if let Some(node) = node {
            self.taint(&node);
        }
        self.at(now, Timer::Drain(name.to_string()));
    }

    /// Asks for the disrupted taint on a node. The node's record is left as observed: the
    /// taint counts once the API server holds it (the drain waits for that, as Karpenter's
    /// termination taints before it evicts), so a refused write cannot pass for one stored.
    pub(super) fn taint(&mut self, node: &str) {
        self.taint_by(node, None);
    }

    /// Asks for a disruption command's mark, the disrupted taint stored by `by` or given up
    /// ([`Action::Taint`]).
    pub(super) fn mark(&mut self, node: &str, by: Duration) {
        self.taint_by(node, Some(by));
    }

    fn taint_by(&mut self, node: &str, by: Option<Duration>) {
        let Some(n) = self.cluster.nodes.get_mut(node) else {
            return;
        };
        // asked again while a removal may still be on its way (a rollback's, refused by an
        // outage): the operator's retry of that removal would otherwise undo this taint while
        // the drain goes ahead (swarm seed 437903)
        if n.tainting || (has_disrupted_taint(n) && !n.untainting) {
            return;
        }
        n.tainting = true;
        n.untainting = false;
        self.marks += 1;
        self.actions.push(Action::Taint {
            node: node.to_string(),
            taint: crate::cluster::disrupted_taint(),
            by,
        });
        self.log("node.termination", "tainted node", json!({
            "Node": {"name": node}, "taint.Key": labels::DISRUPTED_TAINT_KEY, "taint.Value": "", "taint.Effect": "NoSchedule",
        }));
    }

    /// Asks for the disrupted taint to go. Asked even when the record shows none: a taint
    /// asked for earlier may still be on its way. A NodeClaim not being deleted is no longer
    /// being disrupted: its `DisruptionReason` condition goes too, as Karpenter clears it
    /// with the taint.
    pub(super) fn untaint(&mut self, node: &str) {
        let Some(n) = self.cluster.nodes.get_mut(node) else {
            return;
        };
        n.tainting = false;
        n.untainting = true;
        self.marks += 1;
        self.actions.push(Action::RemoveTaint {
            node: node.to_string(),
            key: labels::DISRUPTED_TAINT_KEY.into(),
        });
        let kept = (self.cluster.claim_of_node(node))
            .filter(|(_, c)| c.deleting.is_none())
            .map(|(name, _)| name.to_string());
        if let Some(claim) = kept.filter(|c| self.disruption_reasons.contains_key(c)) {
            self.forget_reason(&claim);
            self.status_changed(&claim);
        }
    }

    /// A command marks `node` for `reason`: its NodeClaim's `DisruptionReason` condition
    /// says so from now on, as Karpenter's queue writes it with the taint (`markDisrupted`).
    pub(super) fn disrupting(&mut self, node: &str, reason: kerf_api::nodepool::DisruptionReason) {
        let claim = (self.cluster.claim_of_node(node)).map(|(name, _)| name.to_string());
        if let Some(claim) = claim.filter(|c| self.reason_of(c) != Some(reason)) {
            self.record_reason(&claim, reason);
            self.status_changed(&claim);
        }
    }

    /// The NodeClaim's status must be written. What it says comes from several
    /// controllers (lifecycle, consistency, disruption, termination): the write is kept in
    /// its place among the actions, and the router fills it in at the poll's end, from what
    /// they all hold then ([`super::Controllers::poll`]).
    pub(super) fn status_changed(&mut self, name: &str) {
        if self.cluster.nodeclaims.contains_key(name) {
            self.actions.push(Action::PatchNodeClaimStatus {
                nodeclaim: name.to_string(),
                status: Box::default(),
                labels: BTreeMap::new(),
            });
        }
    }

    /// Records why `claim` is being deleted by a disruption.
    pub(super) fn record_reason(
        &mut self,
        claim: &str,
        reason: kerf_api::nodepool::DisruptionReason,
    ) {
        self.disruption_reasons.insert(claim.to_string(), reason);
    }

    /// Why `claim` is being deleted by a disruption, if it is.
    pub(super) fn reason_of(&self, claim: &str) -> Option<kerf_api::nodepool::DisruptionReason> {
        self.disruption_reasons.get(claim).copied()
    }

    /// Forgets `claim`'s disruption reason: it is gone, or no longer being deleted.
    pub(super) fn forget_reason(&mut self, claim: &str) {
        self.disruption_reasons.remove(claim);
    }
}
