//! NodeClaim lifecycle and garbage collection: launched (the cloud's answer), registered
//! (a Node with the same provider id joined), initialized (Ready, startup taints gone), the
//! registration TTL, and instances or NodePools that went away underneath.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kerf_api::labels;
use rustc_hash::FxHashSet;
use serde_json::json;

use crate::metrics::families;

use super::desk::Desk;
use super::{Action, Controllers, Event, EventObject, Timer};
use crate::cluster::{CapacityType, ClaimRecord, CloudInstance, Launched};
use crate::objects::claim_record;
use crate::unavailable::Pattern;

/// How long after its creation a NodeClaim that has not launched is deleted (Karpenter's
/// launch timeout). Its creation is when the API server stored it, once a watch has shown
/// it: a create that waited behind a busy API server does not eat into its launch's time,
/// as Karpenter's liveness counts from the `Launched` condition it writes on the stored
/// object.
pub const LAUNCH_TTL: Duration = Duration::from_secs(5 * 60);
/// How often a NodeClaim past its launch timeout whose first launch is still unanswered is
/// looked at again.
pub const LAUNCH_ANSWER_WAIT: Duration = Duration::from_secs(15);
/// How long to wait before trying again something that failed `failures` times for a reason
/// that may pass (a launch, a write): 1 s, doubling, at most 10 s, so that what an API-server
/// outage caught goes through within seconds of its return.
pub fn retry_wait(failures: u32) -> Duration {
    Duration::from_secs(1)
        .saturating_mul(1 << failures.min(16))
        .min(Duration::from_secs(10))
}

/// One offering the cloud had no capacity for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsufficientOffering {
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
}

/// What the NodeClaim lifecycle keeps between cloud answers.
#[derive(Default)]
pub(crate) struct Lifecycles {
    /// NodeClaims whose launch was asked for and not yet answered.
    pub(super) launching: BTreeSet<String>,
    /// How many times each NodeClaim's launch failed for a passing reason, for its backoff.
    pub(super) relaunches: BTreeMap<String, u32>,
    /// The last error of each NodeClaim's launch, which a launch timeout reports.
    pub(super) last_error: BTreeMap<String, String>,
    /// Why each registered NodeClaim's node is not initialized yet, as last written in its
    /// `Initialized` condition: a new reason is written again, as Karpenter does.
    pub(super) initializing: BTreeMap<String, (&'static str, String)>,
    /// When each instance listing not answered yet was asked for, oldest first (answers come
    /// in order; one never answered is dropped after [`LISTING_ANSWERED_WITHIN`]).
    pub(super) listings_asked: std::collections::VecDeque<Duration>,
    /// When the last answered listing was asked for.
    pub(super) last_listing: Option<Duration>,
    /// Each instance's capacity reservation as the last listing that said it gave it, with
    /// when that listing was asked for, by provider id.
    pub(super) listed_reservations: BTreeMap<String, (Duration, Option<String>)>,
    /// When each class's resolved reservations last changed: a reservation drift waits for
    /// a listing asked for after it.
    pub(super) reservations_changed: BTreeMap<String, Duration>,
    /// When Kerf last asked the cloud to terminate each instance, by provider id: a listing
    /// asked for before the instance went still has it, by then without its NodeClaim.
    pub(super) terminating: BTreeMap<String, Duration>,
}

/// How long an instance listing may take to be answered before its ask is forgotten.
const LISTING_ANSWERED_WITHIN: Duration = Duration::from_secs(120);

/// How long an instance Kerf asked to terminate is left to go before garbage collection
/// takes it as an orphan: a scale-in's calls can wait their turn for a minute and more, and
/// listings asked for meanwhile still have the instance (a 10,000-pod scale-in collected 303
/// instances whose NodeClaims Kerf had just deleted, each a second delete of the node).
const TERMINATION_ANSWERED_WITHIN: Duration = Duration::from_secs(300);

impl Lifecycles {
    /// A NodeClaim is gone: its last launch error and initialization wait are forgotten.
    pub(super) fn forget_lifecycle(&mut self, name: &str) {
        self.last_error.remove(name);
        self.initializing.remove(name);
    }

    /// Asks the cloud for a NodeClaim's instance, once at a time. However its launch goes, a
    /// NodeClaim is launched or deleted within [`LAUNCH_TTL`] of its creation: one whose
    /// launch keeps failing (or whose writes were lost) cannot linger.
    pub(super) fn launch(&mut self, desk: &mut Desk, nodeclaim: &str, now: Duration) {
        if self.launching.insert(nodeclaim.to_string()) {
            if let Some(request) = launch_request(desk, nodeclaim, now) {
                desk.actions.push(Action::Launch {
                    nodeclaim: nodeclaim.to_string(),
                    request: Box::new(request),
                });
            }
            if let Some(created) = desk.cluster.nodeclaims.get(nodeclaim).map(|c| c.created) {
                desk.at(
                    created + LAUNCH_TTL,
                    Timer::LaunchTimeout(nodeclaim.to_string()),
                );
            }
        }
    }

    /// A launch failed for a reason that may pass (the cloud's or the API server's API
    /// unreachable, throttled or failing): said as it is, nothing is marked unavailable, and
    /// the NodeClaim is launched again after a backoff ([`retry_wait`]) until it launches or
    /// its launch timeout deletes it, as Karpenter requeues a launch that returned an error.
    pub(crate) fn launch_retry(
        &mut self,
        desk: &mut Desk,
        nodeclaim: &str,
        error: &str,
        now: Duration,
    ) {
        desk.activity += 1;
        self.launching.remove(nodeclaim);
        if !desk.cluster.nodeclaims.contains_key(nodeclaim) {
            return;
        }
        let tries = self.relaunches.entry(nodeclaim.to_string()).or_insert(0);
        let backoff = retry_wait(*tries);
        *tries += 1;
        (self.last_error).insert(nodeclaim.to_string(), error.to_string());
        desk.log_error(
            "nodeclaim.lifecycle",
            "failed launching nodeclaim",
            json!({"NodeClaim": {"name": nodeclaim}, "error": error,
                   "retry-in": format!("{}s", backoff.as_secs())}),
        );
        desk.at(now + backoff, Timer::Relaunch(nodeclaim.to_string()));
    }

    /// A launch's backoff ran out: launch again unless it launched, or its NodeClaim went,
    /// meanwhile.
    pub(super) fn relaunch(&mut self, desk: &mut Desk, nodeclaim: &str, now: Duration) {
        let due = desk
            .cluster
            .nodeclaims
            .get(nodeclaim)
            .is_some_and(|c| c.launched.is_none() && c.deleting.is_none());
        if due {
            self.launch(desk, nodeclaim, now);
        } else {
            self.relaunches.remove(nodeclaim);
        }
    }

    /// The cloud launched a NodeClaim's instance.
    pub(crate) fn launched(&mut self, desk: &mut Desk, nodeclaim: &str, launched: Launched) {
        desk.activity += 1;
        self.launching.remove(nodeclaim);
        self.relaunches.remove(nodeclaim);
        self.last_error.remove(nodeclaim);
        let Some(claim) = desk.cluster.nodeclaims.get_mut(nodeclaim) else {
            return;
        };
        desk.actions.push(Action::Log(super::LogRecord {
            level: super::Level::Info,
            controller: "nodeclaim.lifecycle",
            message: "launched nodeclaim",
            fields: json!({
                "NodeClaim": {"name": nodeclaim},
                "provider-id": launched.provider_id,
                "instance-type": launched.instance_type,
                "zone": launched.zone,
                "capacity-type": launched.capacity_type.as_str(),
                "allocatable": launched.allocatable.to_resource_list(),
            }),
        }));
        claim.launched = Some(launched);
        desk.cluster.link_node(nodeclaim);
        desk.status_changed(nodeclaim);
        arm_liveness(desk, nodeclaim);
    }

    /// Gives a registered node the labels of its NodeClaim it lacks (a kubelet registers with
    /// those its user data names; the instance type's come from the launch), and Karpenter's
    /// `karpenter.sh/registered` and, once initialized, `karpenter.sh/initialized`.
    fn sync_labels(&mut self, desk: &mut Desk, claim: &str, node_name: &str) {
        let Some(c) = desk.cluster.nodeclaims.get(claim) else {
            return;
        };
        let (Some(launched), Some(pool)) = (
            c.launched.as_ref(),
            desk.cluster.node_pools.get(&c.node_pool),
        ) else {
            return;
        };
        let mut want = super::provisioning::node_labels(launched, pool, node_name);
        // what Karpenter reads to count a node registered and initialized (its disruption
        // takes no node without them, so a cluster handed back to it needs them)
        want.insert(labels::REGISTERED.into(), "true".into());
        if c.initialized {
            want.insert(labels::INITIALIZED.into(), "true".into());
        }
        let annotations = c.annotations.clone();
        let Some(node) = desk.cluster.nodes.get(node_name) else {
            return;
        };
        // the registration itself (the node lacks Karpenter's mark): the NodeClaim's
        // annotations go too, the template's and Karpenter's hashes among them
        let annotations = if node.labels.contains_key(labels::REGISTERED) {
            BTreeMap::new()
        } else {
            annotations
        };
        // Karpenter's termination finalizer, which holds a deleted Node for its drain
        let finalize = !node.finalizer && !node.deleting;
        label_node(desk, node_name, want, annotations, finalize);
    }

    /// Gives a node Karpenter's `karpenter.sh/registered` and `karpenter.sh/initialized`
    /// labels, and nothing else of its NodeClaim's (its template may have changed since).
    fn mark_initialized(&mut self, desk: &mut Desk, node_name: &str) {
        let want = [labels::REGISTERED, labels::INITIALIZED]
            .into_iter()
            .map(|k| (k.to_string(), "true".to_string()))
            .collect();
        label_node(desk, node_name, want, BTreeMap::new(), false);
    }

    /// The reservations a class resolves to changed: a NodeClaim whose reservation left it
    /// has drifted only if the next instance listing still has it in the reservation.
    pub(crate) fn class_reservations_changed(&mut self, class: &str, now: Duration) {
        self.reservations_changed.insert(class.to_string(), now);
    }

    /// A class was deleted: nothing waits on its reservations.
    pub(crate) fn forget_class_reservations(&mut self, class: &str) {
        self.reservations_changed.remove(class);
    }

    /// Asks the cloud to terminate an instance, and remembers when (see
    /// [`TERMINATION_ANSWERED_WITHIN`]).
    pub(super) fn terminate_instance(
        &mut self,
        desk: &mut Desk,
        nodeclaim: &str,
        provider_id: String,
        now: Duration,
    ) {
        self.terminating.insert(provider_id.clone(), now);
        desk.actions.push(Action::DeleteInstance {
            nodeclaim: nodeclaim.to_string(),
            provider_id,
        });
    }

    /// An instance listing is asked for now.
    pub(super) fn list_instances(&mut self, desk: &mut Desk, now: Duration) {
        self.listings_asked.push_back(now);
        desk.actions.push(Action::ListInstances);
    }
}

impl Controllers {
    /// A Node object as the API server has it, from [`Controllers::observe`]: how a node's
    /// labels, taints and readiness reach the controllers. Its times are Unix times, counted
    /// on this clock's epoch.
    pub(crate) fn node_observed(&mut self, node: &k8s_openapi::api::core::v1::Node, now: Duration) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut record = crate::objects::node_record(node, now + self.desk.epoch());
        record.ready_changed = record.ready_changed.saturating_sub(self.desk.epoch());
        record.created = record.created.saturating_sub(self.desk.epoch());
        for c in &mut record.conditions {
            c.since = c.since.saturating_sub(self.desk.epoch());
        }
        record.last_pod_event = now;
        let held = record.deleting && record.finalizer;
        self.desk.cluster.apply_node(name.clone(), record, now);
        if held {
            node_deletion_held(&mut self.desk, &name, now);
        }
        // a node rebooting for repair: its new boot and readiness are looked at now
        if let Some((claim, _)) = (self.desk.cluster.claim_of_node(&name))
            .filter(|(_, c)| c.reboot.as_ref().is_some_and(|r| r.under_way()))
        {
            let claim = claim.clone();
            super::reboot::reboot_at(&mut self.desk, &claim, now);
        }
    }

    /// A NodeClaim object as the API server has it. One these controllers did not create
    /// (they restarted, or someone else made it) is read back from its labels, annotations
    /// and status, with its deadlines; one someone else started deleting is terminated
    /// gracefully, its grace period counted from `deleting` (its deletion timestamp).
    pub(crate) fn nodeclaim_observed(
        &mut self,
        object: &kerf_api::NodeClaim,
        created: Duration,
        deleting: Option<Duration>,
        now: Duration,
    ) {
        let name = object.metadata.name.clone().unwrap_or_default();
        // read whole only when new, or not launched by these controllers and perhaps by
        // another writer since (most updates are these controllers' own status writes)
        let launched = (self.desk.cluster.nodeclaims.get(&name)).map(|c| c.launched.is_some());
        let adopt = launched == Some(false) && !self.lifecycle.launching.contains(&name);
        stored_at(&mut self.desk, &name, created);
        if launched.is_some() && !adopt {
            self.reboot
                .reboot_bound_observed(&mut self.desk, &name, object, now);
            instance_terminating_observed(&mut self.desk, &name, object);
            deleting_observed(&mut self.desk, &name, deleting, now);
            return;
        }
        let types = self
            .desk
            .cluster
            .instance_types
            .get(&object.spec.node_class_ref.name);
        let price = |it: &str, zone: &str, ct: CapacityType| {
            types
                .and_then(|ts| ts.iter().find(|t| t.name == it))
                .and_then(|t| {
                    t.offerings
                        .iter()
                        .find(|o| o.zone == zone && o.capacity_type == ct.as_str())
                })
                .map_or(0.0, |o| o.price_per_hour)
        };
        let read = claim_record(object, created, None, price);
        if launched.is_none() {
            let mut record = read;
            // its termination deadline, as Karpenter (or these controllers before a restart)
            // wrote it
            let epoch = self.desk.epoch();
            record.terminate_at = (record.annotations)
                .get(labels::NODECLAIM_TERMINATION_TIMESTAMP)
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(|t| Duration::from_secs(u64::try_from(t.as_second()).unwrap_or(0)))
                .map(|unix| unix.saturating_sub(epoch));
            // a reboot for repair under way (these controllers' before a restart, or
            // Karpenter's before a takeover) is carried on
            record.reboot = crate::objects::claim_reboot(object).map(|r| r.since(epoch));
            let rebooting = record.reboot.as_ref().is_some_and(|r| r.under_way());
            let launched = record.launched.is_some();
            self.desk.cluster.apply_nodeclaim(name.clone(), record);
            if launched {
                arm_liveness(&mut self.desk, &name);
            }
            if rebooting {
                super::reboot::reboot_at(&mut self.desk, &name, now);
            }
        } else if let Some(launched) = read.launched {
            // launched by another writer since it was first read (a Karpenter that held the
            // Lease while this replica waited): its instance is taken as it is, never launched
            // a second time
            self.lifecycle.relaunches.remove(&name);
            self.lifecycle.last_error.remove(&name);
            if let Some(c) = self.desk.cluster.nodeclaims.get_mut(&name) {
                c.launched = Some(launched);
            }
            self.desk.cluster.changes.lifecycle.insert(name.clone());
            self.desk.cluster.link_node(&name);
            arm_liveness(&mut self.desk, &name);
        }
        deleting_observed(&mut self.desk, &name, deleting, now);
    }

    /// The cloud had no capacity for any offering of a NodeClaim: the offerings are
    /// remembered as unavailable and the NodeClaim goes; its pods are provisioned again.
    pub(crate) fn launch_failed(
        &mut self,
        nodeclaim: &str,
        insufficient: &[InsufficientOffering],
        now: Duration,
    ) {
        self.desk.activity += 1;
        self.lifecycle.launching.remove(nodeclaim);
        for o in insufficient {
            self.desk.unavailable.mark(
                Pattern {
                    capacity_type: Some(o.capacity_type.clone()),
                    instance_type: Some(o.instance_type.clone()),
                    zone: Some(o.zone.clone()),
                },
                now,
            );
        }
        // a request that found no spot capacity in any of its offerings is a spot shortage in
        // those zones: the next plan falls back (to another NodePool's on-demand, say) at once
        // instead of trying the zones' other spot types a request at a time. Karpenter marks
        // offerings one by one; this is Kerf's, and lasts as long (the same TTL).
        if !insufficient.is_empty()
            && insufficient
                .iter()
                .all(|o| o.capacity_type == kerf_api::labels::CAPACITY_TYPE_SPOT)
        {
            let zones: BTreeSet<&str> = insufficient.iter().map(|o| o.zone.as_str()).collect();
            for zone in zones {
                self.desk.unavailable.mark(
                    Pattern {
                        capacity_type: Some(kerf_api::labels::CAPACITY_TYPE_SPOT.into()),
                        instance_type: None,
                        zone: Some(zone.to_string()),
                    },
                    now,
                );
            }
        }
        let error = format!(
            "creating instance, insufficient capacity, all requested instance types were unavailable during launch ({} offerings)",
            insufficient.len()
        );
        self.desk
            .count_disrupted(nodeclaim, "insufficient_capacity", "", false);
        // the pods it was for are told too, those still waiting for a node
        let waiting: Vec<String> = (self.desk.cluster.pods.iter())
            .filter(|(_, p)| p.nominated.as_deref() == Some(nodeclaim) && p.node.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        for pod in waiting {
            let mut message =
                format!("NodeClaim {nodeclaim} nominated for this pod failed to launch: {error}");
            message.truncate(1024);
            self.desk.event(
                Event {
                    kind: EventObject::Pod,
                    name: pod,
                    warning: true,
                    reason: "InsufficientCapacityError".into(),
                    message,
                },
                now,
            );
        }
        self.give_up_launch(nodeclaim, "InsufficientCapacityError", &error, now);
    }

    /// Says why a launch failed (an Event on the NodeClaim and a log line) and lets the
    /// NodeClaim go.
    fn give_up_launch(
        &mut self,
        nodeclaim: &str,
        reason: &'static str,
        error: &str,
        now: Duration,
    ) {
        self.desk.event(
            Event {
                kind: EventObject::NodeClaim,
                name: nodeclaim.to_string(),
                warning: true,
                reason: reason.into(),
                message: format!("NodeClaim {nodeclaim} event: {error}"),
            },
            now,
        );
        self.desk.log_error(
            "nodeclaim.lifecycle",
            "failed launching nodeclaim",
            json!({"NodeClaim": {"name": nodeclaim}, "error": error}),
        );
        self.release(nodeclaim, now);
    }

    /// A launch failed for a reason other than capacity (a class not resolved, no subnet or
    /// image, an API error): said as it is, and the NodeClaim goes; nothing is marked
    /// unavailable.
    pub(crate) fn launch_error(&mut self, nodeclaim: &str, error: &str, now: Duration) {
        self.desk.activity += 1;
        self.lifecycle.launching.remove(nodeclaim);
        self.give_up_launch(nodeclaim, "LaunchFailed", error, now);
    }

    /// A launch the cloud refused for want of a permission: given up as a launch error
    /// does, and its class resolved again now, so that the class (whose status the cloud
    /// marks not validated) stops its NodePools' launches at once rather than at its next
    /// round, where each new NodeClaim would be refused in turn.
    pub(crate) fn launch_refused(&mut self, nodeclaim: &str, error: &str, now: Duration) {
        let class = (self.desk.cluster.nodeclaims.get(nodeclaim)).map(|c| c.node_class.clone());
        self.launch_error(nodeclaim, error, now);
        if let Some(class) = class {
            self.node_classes
                .resolve_node_class_now(&mut self.desk, &class, now);
        }
    }

    /// The offerings a recent launch found without capacity, for a cloud choosing what to
    /// ask for.
    pub fn unavailable_offerings(&self) -> &crate::unavailable::UnavailableOfferings {
        &self.desk.unavailable
    }

    /// Registration and initialization of a NodeClaim whose node changed.
    pub(super) fn lifecycle(&mut self, name: &str, now: Duration) {
        let Some(claim) = self.desk.cluster.nodeclaims.get(name) else {
            return;
        };
        if claim.launched.is_none() {
            // found unlaunched (a restart between creation and launch): launch it now
            if claim.deleting.is_none() {
                self.lifecycle.launch(&mut self.desk, name, now);
            }
            return;
        }
        let Some(node_name) = claim.node.clone() else {
            return;
        };
        let Some(node) = self.desk.cluster.nodes.get(&node_name) else {
            return;
        };
        let unregistered = (node.taints.iter()).any(|t| t.key == labels::UNREGISTERED_TAINT_KEY);
        // Karpenter's registration looks for the taint as it puts it: key and NoExecute
        let guarded = (node.taints.iter()).any(|t| {
            t.key == labels::UNREGISTERED_TAINT_KEY && t.effect == kerf_api::TaintEffect::NoExecute
        });
        if claim.initialized {
            if unregistered {
                // registered while nobody removed the taint (a restart in between)
                self.lifecycle.sync_labels(&mut self.desk, name, &node_name);
                remove_unregistered_taint(&mut self.desk, &node_name);
            } else if node.labels.get(labels::INITIALIZED).map(String::as_str) != Some("true")
                && claim.deleting.is_none()
            {
                // the status says initialized but the node lacks the label (taken off by
                // hand, or the label's write failed after its retries): without it the node
                // counts in no disruption budget, so nothing of its NodePool would ever be
                // disrupted (Karpenter leaves such a node as it is)
                self.lifecycle.mark_initialized(&mut self.desk, &node_name);
            }
            self.consistency
                .check_consistency(&mut self.desk, name, false, now);
            return;
        }
        // a node rebooting for repair initializes again once the reboot is over
        if claim.reboot.as_ref().is_some_and(|r| r.under_way()) {
            return;
        }
        // the NodeClaim's own startup taints, which its NodePool may have changed since
        let startup_left =
            (claim.startup_taints.iter()).any(|s| node.taints.iter().any(|t| t.key == s.key));
        if !claim.registered {
            if !guarded && !node.labels.contains_key(labels::REGISTERED) {
                unregistered_taint_missing(&mut self.desk, name, now);
            }
            let claim = &self.desk.cluster.nodeclaims[name];
            let pool = claim.node_pool.clone();
            let zone = claim.launched.as_ref().map_or("", |l| l.zone.as_str());
            self.desk
                .metrics
                .inc(&families::NODES_CREATED, &[&claim.node_pool, zone]);
            if let Some(c) = self.desk.cluster.nodeclaims.get_mut(name) {
                c.registered = true;
            }
            self.desk.log(
                "nodeclaim.lifecycle",
                "registered nodeclaim",
                json!({"NodeClaim": {"name": name}, "Node": {"name": node_name}}),
            );
            self.desk
                .cancel(&Timer::RegistrationTimeout(name.to_string()));
            self.registration_outcome(&pool, None);
            if let Some(why) = initializing(&self.desk, &self.desk.cluster.nodeclaims[name]) {
                self.lifecycle.initializing.insert(name.to_string(), why);
            }
            self.desk.status_changed(name);
            self.lifecycle.sync_labels(&mut self.desk, name, &node_name);
        }
        if unregistered {
            remove_unregistered_taint(&mut self.desk, &node_name);
        }
        let node = &self.desk.cluster.nodes[&node_name];
        let ephemeral_left = (node.taints.iter()).any(super::provisioning::is_known_ephemeral);
        if !node.ready || startup_left || ephemeral_left {
            let why = initializing(&self.desk, &self.desk.cluster.nodeclaims[name]);
            if let Some(why) = why
                && self.lifecycle.initializing.get(name) != Some(&why)
            {
                self.lifecycle.initializing.insert(name.to_string(), why);
                self.desk.status_changed(name);
            }
            return;
        }
        self.lifecycle.initializing.remove(name);
        let allocatable = node.allocatable.to_resource_list();
        if let Some(c) = self.desk.cluster.nodeclaims.get_mut(name) {
            c.initialized = true;
            // back from a reboot for repair: no longer disrupted
            if c.reboot.is_some() {
                self.desk.forget_reason(name);
            }
        }
        if let Some(n) = self.desk.cluster.nodes.get_mut(&node_name) {
            n.last_pod_event = now;
        }
        self.desk.cluster.changes.disruption = true;
        // the node's label first, then the status, as Karpenter writes them: a restart between
        // the two finds the NodeClaim not initialized yet and initializes it again
        self.lifecycle.sync_labels(&mut self.desk, name, &node_name);
        self.desk.status_changed(name);
        self.desk.at(
            now + super::provisioning::NOMINATION_GRACE,
            Timer::NominationExpiry(name.to_string()),
        );
        self.desk.log(
            "nodeclaim.lifecycle",
            "initialized nodeclaim",
            json!({
                "NodeClaim": {"name": name}, "Node": {"name": node_name}, "allocatable": allocatable,
            }),
        );
        self.consistency
            .check_consistency(&mut self.desk, name, false, now);
    }

    /// A NodeClaim not launched [`LAUNCH_TTL`] after its creation is deleted, as Karpenter's
    /// liveness does (`launch_timeout`); its pods look for capacity again.
    pub(super) fn launch_timeout(&mut self, name: &str, now: Duration) {
        let Some(claim) = self.desk.cluster.nodeclaims.get(name) else {
            return;
        };
        if claim.launched.is_some() || claim.deleting.is_some() {
            return;
        }
        // stored later than it was decided: the deadline moved with it
        if now < claim.created + LAUNCH_TTL {
            self.desk.at(
                claim.created + LAUNCH_TTL,
                Timer::LaunchTimeout(name.to_string()),
            );
            return;
        }
        // its first launch asked for and not answered yet (waiting its turn behind the
        // client's rate limit in a burst of thousands): it is waited for, as Karpenter's
        // liveness never runs while the lifecycle's own launch call does, up to twice the
        // timeout in case the answer was lost
        let unanswered = self.lifecycle.launching.contains(name)
            && !self.lifecycle.relaunches.contains_key(name)
            && !self.lifecycle.last_error.contains_key(name);
        if unanswered && now < claim.created + 2 * LAUNCH_TTL {
            let again = (now + LAUNCH_ANSWER_WAIT).min(claim.created + 2 * LAUNCH_TTL);
            self.desk.at(again, Timer::LaunchTimeout(name.to_string()));
            return;
        }
        self.lifecycle.launching.remove(name);
        let pool = claim.node_pool.clone();
        let why = match self.lifecycle.last_error.get(name) {
            // Karpenter shows the NodeClaim's Launched condition: the error, at most 1024
            Some(e) => ("LaunchFailed".to_string(), e.chars().take(1024).collect()),
            None => (
                "AwaitingReconciliation".to_string(),
                "object is awaiting reconciliation".to_string(),
            ),
        };
        self.registration_outcome(&pool, Some((&why.0, &why.1)));
        self.desk.count_disrupted(name, "launch_timeout", "", false);
        self.desk.log(
            "nodeclaim.lifecycle",
            "deleted nodeclaim",
            json!({"NodeClaim": {"name": name}, "reason": "launch timeout"}),
        );
        self.release(name, now);
    }

    pub(super) fn registration_timeout(&mut self, name: &str, now: Duration) {
        let Some(claim) = self.desk.cluster.nodeclaims.get(name) else {
            return;
        };
        if claim.node.is_some() {
            return;
        }
        let provider = claim.launched.as_ref().map(|l| l.provider_id.clone());
        let pool = claim.node_pool.clone();
        self.registration_outcome(
            &pool,
            Some(("RegistrationFailed", "Failed to register node")),
        );
        self.desk
            .count_disrupted(name, "registration_timeout", "", false);
        self.desk.log(
            "nodeclaim.lifecycle",
            "deleted nodeclaim",
            json!({"NodeClaim": {"name": name}, "reason": "registration timeout"}),
        );
        if let Some(provider_id) = provider {
            self.lifecycle
                .terminate_instance(&mut self.desk, name, provider_id, now);
        }
        self.release(name, now);
    }

    /// Garbage collection: the cloud no longer has a NodeClaim's instance. Its node and
    /// NodeClaim go at once; their pods look for capacity again.
    pub(crate) fn instance_gone(&mut self, provider_id: &str, now: Duration) {
        self.desk.activity += 1;
        let Some((name, claim)) = self.desk.cluster.nodeclaims.iter().find(|(_, c)| {
            c.launched
                .as_ref()
                .is_some_and(|l| l.provider_id == provider_id)
        }) else {
            return;
        };
        let (name, node) = (name.clone(), claim.node.clone());
        self.desk
            .count_disrupted(&name, "garbage_collected", "", true);
        if let Some(node) = &node {
            // its pods went with the instance: until the node's deletion is seen, they are
            // not healthy for any PodDisruptionBudget a drain elsewhere consults
            if let Some(n) = self.desk.cluster.nodes.get_mut(node) {
                n.ready = false;
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
        self.desk.log(
            "nodeclaim.lifecycle",
            "deleted nodeclaim",
            json!({"NodeClaim": {"name": name}, "Node": {"name": node}}),
        );
        self.release(&name, now);
    }

    /// Deletes a NodeClaim outright: no node to drain.
    fn release(&mut self, name: &str, now: Duration) {
        self.lifecycle.relaunches.remove(name);
        self.lifecycle.forget_lifecycle(name);
        self.consistency.forget_consistency(&mut self.desk, name);
        self.desk.count_nodeclaim_deleted(name, now);
        self.desk.actions.push(Action::DeleteNodeClaim {
            nodeclaim: name.to_string(),
        });
        self.desk.actions.push(Action::ReleaseNodeClaim {
            nodeclaim: name.to_string(),
        });
    }

    /// Garbage collection against the cloud's list of instances, each with the NodeClaim it
    /// was launched for: a NodeClaim whose instance is gone goes (with its node), and an
    /// instance whose NodeClaim does not exist is terminated (with its node). What the
    /// listing says of a NodeClaim's instance (its image, subnet and security groups) is
    /// kept on its record, which is how a restarted controller learns them again.
    pub(crate) fn garbage_collect(&mut self, instances: &[CloudInstance], now: Duration) {
        // looked up once per NodeClaim and instance, never walked: hashed, not ordered
        let running: FxHashSet<&str> = instances.iter().map(|i| i.provider_id.as_str()).collect();
        let gone: Vec<String> = self
            .desk
            .cluster
            .nodeclaims
            .values()
            .filter_map(|c| c.launched.as_ref().map(|l| l.provider_id.clone()))
            .filter(|p| !running.contains(p.as_str()))
            .collect();
        for provider_id in gone {
            self.instance_gone(&provider_id, now);
        }
        // an instance some NodeClaim launched is not an orphan whatever the cloud names it
        // (Karpenter kwok's nodes are named apart from their NodeClaims)
        let claimed: FxHashSet<String> = self
            .desk
            .cluster
            .nodeclaims
            .values()
            .filter_map(|c| c.launched.as_ref().map(|l| l.provider_id.clone()))
            .collect();
        let mut left_reservation = Vec::new();
        // when this listing was asked for: what it says is no older than that
        let asked = &mut self.lifecycle.listings_asked;
        while asked
            .front()
            .is_some_and(|t| *t + LISTING_ANSWERED_WITHIN < now)
        {
            asked.pop_front();
        }
        let listing = asked.pop_front().unwrap_or(now);
        let previous = self.lifecycle.last_listing.replace(listing);
        // the first listing asked for since a class's reservations changed: a reservation
        // drift waited for it
        let mut learned = (self.lifecycle.reservations_changed.values())
            .any(|at| listing > *at && previous.is_none_or(|p| p <= *at));
        let listed = &mut self.lifecycle.listed_reservations;
        listed.retain(|p, _| running.contains(p.as_str()));
        for i in instances {
            if let Some(reservation) = &i.reservation {
                let before = listed.insert(i.provider_id.clone(), (listing, reservation.clone()));
                learned |= before.is_none_or(|(_, r)| r != *reservation);
            }
        }
        let terminating = &mut self.lifecycle.terminating;
        terminating.retain(|p, at| {
            running.contains(p.as_str()) && *at + TERMINATION_ANSWERED_WITHIN > listing
        });
        for instance in instances {
            let (provider_id, claim) = (&instance.provider_id, &instance.nodeclaim);
            if !self.desk.cluster.nodeclaims.contains_key(claim)
                && (claimed.contains(provider_id)
                    || self.lifecycle.terminating.contains_key(provider_id))
            {
                continue;
            }
            if let Some(record) = self.desk.cluster.nodeclaims.get_mut(claim) {
                if let Some(l) = record
                    .launched
                    .as_mut()
                    .filter(|l| l.provider_id == *provider_id)
                {
                    if instance.image_id.is_some() && l.image_id != instance.image_id {
                        l.image_id.clone_from(&instance.image_id);
                        learned = true;
                    }
                    if instance.network.is_some() && l.network != instance.network {
                        l.network.clone_from(&instance.network);
                        learned = true;
                    }
                    // a capacity block's instances end with it: only an on-demand
                    // reservation's run on
                    let block = l.labels.get(labels::CAPACITY_RESERVATION_TYPE)
                        == Some(&"capacity-block".to_string());
                    if instance.reservation == Some(None)
                        && l.capacity_type == CapacityType::Reserved
                        && !block
                        && record.deleting.is_none()
                    {
                        left_reservation.push(claim.clone());
                    }
                }
                continue;
            }
            if self.lifecycle.launching.contains(claim) {
                continue;
            }
            self.desk.activity += 1;
            self.desk.log(
                "nodeclaim.garbagecollection",
                "garbage collecting instance without nodeclaim",
                json!({"provider-id": provider_id, "NodeClaim": {"name": claim}}),
            );
            let node = self
                .desk
                .cluster
                .nodes
                .iter()
                .find(|(_, n)| n.provider_id == *provider_id)
                .map(|(k, _)| k.clone());
            if let Some(node) = node {
                self.desk.count_node_deleted(&node, now);
                self.desk.actions.push(Action::DeleteNode { node });
            }
            self.lifecycle
                .terminate_instance(&mut self.desk, claim, provider_id.clone(), now);
        }
        if !left_reservation.is_empty() {
            self.desk.left_reservation(&left_reservation);
            learned = true;
        }
        if learned {
            self.desk.activity += 1;
            self.disruption
                .evaluate_drift(&mut self.desk, &self.lifecycle, now);
        }
    }
}

/// What the cloud needs to launch the NodeClaim now; none while its NodePool is gone (its
/// launch timeout deletes it).
fn launch_request(desk: &Desk, nodeclaim: &str, now: Duration) -> Option<super::LaunchRequest> {
    let claim = desk.cluster.nodeclaims.get(nodeclaim)?;
    Some(super::LaunchRequest {
        node_pool: desk.cluster.node_pools.get(&claim.node_pool)?.clone(),
        node_class: desk.cluster.node_classes.get(&claim.node_class).cloned(),
        claim: claim.clone(),
        unavailable: desk.unavailable.clone(),
        at: now,
    })
}

/// Sets a NodeClaim's expiry and registration deadline, both counted from its creation
/// as Karpenter counts them (so a restarted controller sets the same ones).
fn arm_liveness(desk: &mut Desk, nodeclaim: &str) {
    let Some(claim) = desk.cluster.nodeclaims.get(nodeclaim) else {
        return;
    };
    let (created, registered) = (claim.created, claim.registered);
    if let Some(kerf_api::duration::NillableDuration::After(ttl)) = desk
        .cluster
        .node_pools
        .get(&claim.node_pool)
        .map(|np| np.spec.template.spec.expire_after)
    {
        desk.at(created + ttl, Timer::Expire(nodeclaim.to_string()));
    }
    if !registered {
        desk.at(
            created + desk.settings.registration_ttl,
            Timer::RegistrationTimeout(nodeclaim.to_string()),
        );
    }
}

/// Someone deleted a Node its termination finalizer holds (`kubectl delete node`): as
/// Karpenter's node termination does, its NodeClaim is deleted and the node drained
/// before the finalizer comes off; a Node with no NodeClaim left has the finalizer taken
/// off at once.
fn node_deletion_held(desk: &mut Desk, name: &str, now: Duration) {
    match desk.cluster.claim_of_node(name) {
        Some((claim, c)) => {
            if c.deleting.is_none() {
                let claim = claim.clone();
                desk.terminate(&claim, now, now);
            }
        }
        None => desk.actions.push(Action::DeleteNode {
            node: name.to_string(),
        }),
    }
}

/// This controller's own NodeClaim, not launched yet, as the API server stored it: its
/// creation is counted from the stored creation time when that is later than the
/// decision (a create that waited its turn behind a busy API server), so its launch and
/// registration deadlines, and its expiry, run from where Karpenter's and a restarted
/// controller's do.
fn stored_at(desk: &mut Desk, name: &str, created: Duration) {
    if let Some(c) = (desk.cluster.nodeclaims.get_mut(name))
        .filter(|c| c.launched.is_none() && c.created < created)
    {
        c.created = created;
    }
}

/// A NodeClaim read with `InstanceTerminating`: the API server holds it, and the node leaves
/// its NodePool's budget counts.
fn instance_terminating_observed(desk: &mut Desk, name: &str, object: &kerf_api::NodeClaim) {
    let stored = crate::objects::is_true(
        object.status.as_ref(),
        kerf_api::nodeclaim::condition_types::INSTANCE_TERMINATING,
    );
    if let Some(c) = desk.cluster.nodeclaims.get_mut(name).filter(|_| stored) {
        c.instance_terminating_stored = true;
    }
}

/// A NodeClaim read with a deletion timestamp (`deleting`): its deletion is stored, and
/// it terminates gracefully from then.
fn deleting_observed(desk: &mut Desk, name: &str, deleting: Option<Duration>, now: Duration) {
    if let Some(since) = deleting {
        if let Some(c) = desk.cluster.nodeclaims.get_mut(name) {
            c.deletion_stored = true;
        }
        desk.terminate(name, since, now);
    }
}

/// The node's labels are synced: the registration taint goes, and pods may land.
fn remove_unregistered_taint(desk: &mut Desk, node: &str) {
    desk.actions.push(Action::RemoveTaint {
        node: node.to_string(),
        key: labels::UNREGISTERED_TAINT_KEY.into(),
    });
}

/// Gives the node those of `want` it lacks (and, with `finalize`, the termination
/// finalizer), in its record at once and through a `LabelNode` (with `annotations`);
/// nothing when it lacks none.
fn label_node(
    desk: &mut Desk,
    node_name: &str,
    want: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    finalize: bool,
) {
    let Some(node) = desk.cluster.nodes.get_mut(node_name) else {
        return;
    };
    let missing: BTreeMap<String, String> = want
        .into_iter()
        .filter(|(k, v)| node.labels.get(k) != Some(v))
        .collect();
    if missing.is_empty() && !finalize {
        return;
    }
    std::sync::Arc::make_mut(&mut node.labels)
        .extend(missing.iter().map(|(k, v)| (k.clone(), v.clone())));
    node.finalizer |= finalize;
    desk.cluster.changes.disruption = true;
    desk.actions.push(Action::LabelNode {
        node: node_name.to_string(),
        labels: missing,
        annotations,
        finalizer: finalize,
    });
}

/// A node registered without the `karpenter.sh/unregistered` taint (its user data or
/// image does not add it): pods may land before its labels are synced. Karpenter goes on
/// with the registration and says so in an error line and a warning on the NodeClaim.
fn unregistered_taint_missing(desk: &mut Desk, claim: &str, now: Duration) {
    let provider_id = (desk.cluster.nodeclaims.get(claim))
        .and_then(|c| c.launched.as_ref())
        .map(|l| l.provider_id.clone());
    desk.log_error(
        "nodeclaim.lifecycle",
        "node claim registration error",
        json!({
            "NodeClaim": {"name": claim}, "provider-id": provider_id,
            "taint": labels::UNREGISTERED_TAINT_KEY,
            "error": "missing taint prevents registration-related race conditions on Karpenter-managed nodes",
        }),
    );
    desk.event(
        Event {
            kind: EventObject::NodeClaim,
            name: claim.to_string(),
            warning: true,
            reason: "UnregisteredTaintMissing".into(),
            message: format!(
                "Missing {} taint which prevents registration related race conditions on \
             Karpenter-managed nodes",
                labels::UNREGISTERED_TAINT_KEY
            ),
        },
        now,
    );
}

/// Why a registered NodeClaim's node is not initialized yet, as Karpenter says it: the
/// node not ready, a startup taint or a known ephemeral taint still on it.
pub(super) fn initializing(desk: &Desk, record: &ClaimRecord) -> Option<(&'static str, String)> {
    if record
        .reboot
        .as_ref()
        .is_some_and(|r| matches!(r.phase, crate::cluster::RebootPhase::Issued(_)))
    {
        return Some(("Rebooting", "node is rebooting".into()));
    }
    let node = desk.cluster.nodes.get(record.node.as_deref()?)?;
    if !node.ready {
        return Some(("NodeNotReady", "Node status is NotReady".into()));
    }
    let text = |t: &kerf_api::Taint| match &t.value {
        Some(v) if !v.is_empty() => format!("{}={v}:{:?}", t.key, t.effect),
        _ => format!("{}:{:?}", t.key, t.effect),
    };
    if let Some(t) =
        (node.taints.iter()).find(|t| record.startup_taints.iter().any(|s| s.key == t.key))
    {
        return Some((
            "StartupTaintsExist",
            format!("StartupTaint {:?} still exists", text(t)),
        ));
    }
    let ephemeral = node
        .taints
        .iter()
        .find(|t| super::provisioning::is_known_ephemeral(t))?;
    Some((
        "KnownEphemeralTaintsExist",
        format!("KnownEphemeralTaint {:?} still exists", text(ephemeral)),
    ))
}

/// NodePools that changed: the NodeClaims of deleted ones are deleted (their owner
/// reference would have them collected).
pub(super) fn node_pools_changed(desk: &mut Desk, pools: &BTreeSet<String>, now: Duration) {
    let orphans: Vec<String> = desk
        .cluster
        .nodeclaims
        .iter()
        .filter(|(_, c)| {
            pools.contains(&c.node_pool)
                && !desk.cluster.node_pools.contains_key(&c.node_pool)
                && c.deleting.is_none()
        })
        .map(|(k, _)| k.clone())
        .collect();
    for name in orphans {
        desk.log(
            "nodeclaim.lifecycle",
            "deleted nodeclaim",
            json!({"NodeClaim": {"name": name}, "reason": "nodepool deleted"}),
        );
        desk.delete_nodeclaim(&name, now);
    }
}
