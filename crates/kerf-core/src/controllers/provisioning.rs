//! Provisioning: pods kube-scheduler could not place are batched (1 s idle, 10 s max), then
//! one solve places them on existing nodes, NodeClaims coming up, or new NodeClaims, which
//! are created and handed to the cloud.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::time::Duration;

use kerf_api::{NodePool, Taint, TaintEffect, labels};
use kerf_scheduling::resources::Resources;
use kerf_scheduling::{Decision, NodePoolInput, PlannedNodeClaim};
use serde_json::json;
use std::fmt::Write as _;

use crate::metrics::families;
use std::hash::{Hash, Hasher};

use super::desk::Desk;
use super::rehearsal::PlannedNode;
use super::{Action, Controllers, Event, EventObject, Timer, Unplaced, list_text};
use crate::cluster::{ClaimRecord, NodeRecord, split_pod_key};
use crate::hash::{node_class_hash, node_pool_hash};
use crate::nodepools::{NoCompatibleTypes, no_compatible_types};
use crate::provisioning::rules::Batcher;
use crate::provisioning::rules::{nodeclaim, nodeclaim_name};

/// The labels a NodeClaim's node will carry: the instance type's and the offering's, the
/// NodePool template's, the NodePool, and the hostname.
pub fn node_labels(
    launched: &crate::cluster::Launched,
    pool: &NodePool,
    hostname: &str,
) -> BTreeMap<String, String> {
    let mut l = launched.labels.clone();
    l.extend(pool.spec.template.metadata.labels.clone());
    l.insert(
        labels::NODEPOOL.into(),
        pool.metadata.name.clone().unwrap_or_default(),
    );
    l.insert(labels::ZONE.into(), launched.zone.clone());
    l.insert(
        labels::CAPACITY_TYPE.into(),
        launched.capacity_type.as_str().into(),
    );
    l.insert(labels::HOSTNAME.into(), hostname.to_string());
    l
}

/// Taints a node carries only while it comes up (Karpenter's ephemeral taints).
const EPHEMERAL_TAINTS: [&str; 4] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    labels::UNREGISTERED_TAINT_KEY,
];

/// Whether a taint is one of Karpenter's known ephemeral taints, by key and effect as
/// Karpenter matches them: a node is not initialized while it carries one. Until the node
/// lifecycle controller removes `not-ready`, kube-scheduler binds nothing there, so pods
/// nominated to it would wait out their nomination and get a new NodeClaim each time.
pub(super) fn is_known_ephemeral(t: &Taint) -> bool {
    let effect = if t.key == labels::UNREGISTERED_TAINT_KEY {
        TaintEffect::NoExecute
    } else {
        TaintEffect::NoSchedule
    };
    EPHEMERAL_TAINTS.contains(&t.key.as_str()) && t.effect == effect
}

/// The taints pods must tolerate on a node: its own, less its NodeClaim's startup taints and
/// the ephemeral taints while it is not initialized (they go away then, so pods need not
/// tolerate them).
pub(super) fn scheduling_taints(
    node: &NodeRecord,
    startup: &[Taint],
    initialized: bool,
) -> Vec<Taint> {
    node.scheduling_taints()
        .filter(|t| {
            initialized
                || !(EPHEMERAL_TAINTS.contains(&t.key.as_str())
                    || startup
                        .iter()
                        .any(|s| s.key == t.key && s.effect == t.effect))
        })
        .cloned()
        .collect()
}

/// A solve's decision with the names its indices stand for.
#[derive(Debug)]
pub struct Solved {
    /// What the solver decided.
    pub decision: Decision,
    /// The pending pods' `namespace/name` keys, as the decision indexes them.
    pub pods: Vec<String>,
    /// The NodePools' names, as the decision indexes them.
    pub node_pools: Vec<String>,
    /// The existing nodes' names (a NodeClaim's own name while it has no node yet).
    pub nodes: Vec<String>,
    /// The NodeClaim behind each existing node; none for a node Kerf does not manage.
    pub claims: Vec<Option<String>>,
    /// Pending pods left out for their claims (`namespace/name`, why), as Karpenter ignores
    /// them until their claims are right.
    pub ignored: Vec<(String, String)>,
    /// The lower bound on what the pending pods cost (the provisioner's solves and
    /// `kerf schedule`'s dry run work it out when the decision launches NodeClaims), or why
    /// the linear program failed.
    pub bound: Option<Result<kerf_scheduling::CostBound, String>>,
}

/// How a solve packs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Packing {
    /// As Karpenter does: a NodeClaim grows while any type still fits its pods.
    Karpenter,
    /// Karpenter's decision, or the cheaper one with nodes no larger than the cost bound's
    /// optimum buys ([`kerf_scheduling::solve_near_bound`]); the bound comes with it when
    /// the decision launches anything.
    NearBound,
}

/// How long kube-scheduler has to bind pods nominated to an initialized node before the
/// provisioner looks for capacity for them again (Karpenter: twice the batch maximum).
pub const NOMINATION_GRACE: Duration = Duration::from_secs(20);
/// How long pods the last solve could not place wait before they are tried again when
/// nothing else (a new pod, a node, a NodePool change) brings them back sooner.
pub const UNSCHEDULABLE_RETRY: Duration = Duration::from_secs(10);

/// What a provisioning pass decided for one pod it solved for, kept while the pod waits for
/// a node: `kerf explain` tells it as decided, rather than working it out again.
#[derive(Clone, Debug)]
pub(crate) struct PodVerdict {
    /// When the pass ran.
    pub(crate) at: Duration,
    /// What it decided.
    pub(crate) outcome: PodOutcome,
}

/// Where a provisioning pass put a pod.
#[derive(Clone, Debug)]
pub(crate) enum PodOutcome {
    /// Onto this NodeClaim: one the pass created, or one (or its node) already there.
    Nominated(String),
    /// Nowhere, for these reasons.
    Unschedulable(Vec<kerf_scheduling::Reason>),
}

/// What the provisioner keeps between batches.
pub(crate) struct Provisioner {
    pub(super) batcher: Batcher,
    pub(super) unplaced: Option<Unplaced>,
    /// The pods the last solve found no place for. A pod wanting capacity outside it has not
    /// been solved for since it began to wait: consolidation holds off until it is, as
    /// Karpenter's consolidation simulates the pending pods beside the candidates' and makes
    /// no move while they would need new nodes.
    pub(super) left_pending: HashSet<String>,
    /// Pending pods left out of provisioning for their claims, with the reason last logged.
    pub(super) ignored_pods: BTreeMap<String, String>,
    /// What the last pass left, for the scheduler's gauges.
    pub(crate) reading: crate::metrics::SchedulingReading,
    /// The nodes the NodeClaims of earlier batches will register as, kept until their
    /// launches answer, so that a later batch's rehearsal seats their pods there. Without
    /// them, while creates waited on a throttling API server, every batch ended the
    /// nominations to NodeClaims not yet launched and provisioned for their pods again (772
    /// NodeClaims for 1,000 pods).
    pub(super) unlaunched: BTreeMap<String, super::rehearsal::PlannedNode>,
    /// What the last pass to solve for each pod still waiting decided for it.
    pub(crate) verdicts: HashMap<String, PodVerdict>,
}

impl Provisioner {
    pub(super) fn new(settings: &super::Settings) -> Provisioner {
        Provisioner {
            batcher: Batcher::new(settings.batch_idle, settings.batch_max),
            unplaced: None,
            left_pending: HashSet::default(),
            ignored_pods: BTreeMap::new(),
            reading: crate::metrics::SchedulingReading::default(),
            unlaunched: BTreeMap::new(),
            verdicts: HashMap::default(),
        }
    }

    /// A pass decided this for `pod` at `at` (a solve, or the rehearsal moving its
    /// nomination).
    pub(super) fn record(&mut self, pod: &str, outcome: PodOutcome, at: Duration) {
        (self.verdicts).insert(pod.to_string(), PodVerdict { at, outcome });
    }

    /// What the last pass to solve for `pod` decided, while that still stands: a pod
    /// nominated since to another NodeClaim, or no longer nominated to the one the pass
    /// chose (kube-scheduler bound others there), waits for a new decision.
    pub(crate) fn verdict(&self, pod: &str, nominated: Option<&str>) -> Option<&PodVerdict> {
        self.verdicts.get(pod).filter(|v| match &v.outcome {
            PodOutcome::Nominated(claim) => nominated == Some(claim.as_str()),
            PodOutcome::Unschedulable(_) => nominated.is_none(),
        })
    }

    /// Nominations to an initialized NodeClaim end: pods kube-scheduler did not bind there
    /// (other pods took the room) want capacity again.
    pub(super) fn nomination_expiry(&mut self, desk: &mut Desk, claim: &str, now: Duration) {
        // every expiry due by now in one look over the pods: a burst's passes nominate pods
        // to thousands of NodeClaims, and a look each was a third of the operator's CPU
        let due: Vec<(Duration, Timer)> = (desk.timers.iter())
            .take_while(|(at, _)| *at <= now)
            .filter(|(_, t)| matches!(t, Timer::NominationExpiry(_)))
            .cloned()
            .collect();
        let mut claims: HashSet<String> = [claim.to_string()].into_iter().collect();
        for timer in due {
            desk.timers.remove(&timer);
            if let (_, Timer::NominationExpiry(c)) = timer {
                claims.insert(c);
            }
        }
        let nodeclaims = &desk.cluster.nodeclaims;
        claims.retain(|c| nodeclaims.get(c).is_none_or(|c| c.initialized));
        if claims.is_empty() {
            return;
        }
        let mut again = false;
        for p in desk.cluster.pods.values_mut() {
            if p.node.is_none() && p.nominated.as_ref().is_some_and(|c| claims.contains(c)) {
                p.nominated = None;
                again |= p.wants_capacity();
            }
        }
        if again {
            self.saw_pending_pod(desk, now);
        }
    }

    /// These nodes' room or taints changed: the pods nominated to their NodeClaims keep the
    /// nomination only while the node, as the watches show it now (its bound pods,
    /// allocatable and taints), can still take them, longest waiting first as kube-scheduler
    /// takes them; the rest want capacity again at once. kube-scheduler places pods its own
    /// way, and a pod planned onto a node it filled with others would otherwise wait out
    /// [`NOMINATION_GRACE`].
    pub(super) fn recheck_nominations(
        &mut self,
        desk: &mut Desk,
        nodes: &BTreeSet<String>,
        now: Duration,
    ) {
        let cluster = &desk.cluster;
        let mut rooms: HashMap<&str, (Resources, Vec<Taint>)> = HashMap::default();
        for node in nodes {
            let (Some(n), Some((claim, c))) =
                (cluster.nodes.get(node), cluster.claim_of_node(node))
            else {
                continue;
            };
            let taints = scheduling_taints(n, &c.startup_taints, c.initialized);
            let room = n.allocatable.saturating_sub(&n.requests);
            rooms.insert(claim.as_str(), (room, taints));
        }
        if rooms.is_empty() {
            return;
        }
        let mut waiting: Vec<(Duration, &String, &str)> = (cluster.pods.iter())
            .filter(|(_, p)| p.node.is_none())
            .filter_map(|(k, p)| {
                let claim = p.nominated.as_deref()?;
                rooms
                    .contains_key(claim)
                    .then_some((p.pending_since, k, claim))
            })
            .collect();
        waiting.sort();
        let mut released = Vec::new();
        for (_, key, claim) in waiting {
            let p = &cluster.pods[key];
            let (room, taints) = rooms.get_mut(claim).expect("collected above");
            let tolerations = (p.shape.spec.as_ref())
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default();
            let tolerated =
                kerf_scheduling::taints::first_untolerated(tolerations, taints, true).is_none();
            if tolerated && p.requests.fits(room) {
                *room = room.saturating_sub(&p.requests);
            } else {
                released.push(key.clone());
            }
        }
        let mut again = false;
        for key in released {
            if let Some(p) = desk.cluster.pods.get_mut(&key) {
                p.nominated = None;
                again |= p.wants_capacity();
            }
        }
        if again {
            self.saw_pending_pod(desk, now);
        }
    }

    /// A pod started waiting for capacity: open or extend the batch window.
    pub(super) fn saw_pending_pod(&mut self, desk: &mut Desk, now: Duration) {
        self.batcher.saw_pod(now);
        if let Some(at) = self.batcher.closes_at() {
            desk.cancel(&Timer::Batch);
            desk.at(at, Timer::Batch);
        }
    }

    /// A solve decided about these pods, leaving `unschedulable` of them without a place:
    /// each pod's first decision counts into Karpenter's decision latency, and the pass
    /// into the scheduler's gauges.
    fn count_decided(
        &mut self,
        desk: &mut Desk,
        keys: &[String],
        unschedulable: usize,
        now: Duration,
    ) {
        for k in keys {
            let Some(rec) = desk.cluster.pods.get_mut(k) else {
                continue;
            };
            if rec.decided.is_none() {
                rec.decided = Some(now);
                let waited = now.saturating_sub(rec.pending_since);
                desk.metrics.observe(
                    &families::PODS_SCHEDULING_DECISION_DURATION_SECONDS,
                    &[],
                    waited.as_secs_f64(),
                );
            }
        }
        self.reading.pass += 1;
        self.reading.unschedulable = unschedulable;
    }

    /// Says once (until the reason changes) which pending pods are left out for their
    /// claims, as Karpenter's `ignoring pod`.
    fn log_ignored_pods(&mut self, desk: &mut Desk) {
        let now: BTreeMap<String, String> = (desk.cluster.pods.iter())
            .filter(|(_, p)| p.node.is_none() && p.nominated.is_none())
            .filter_map(|(k, p)| Some((k.clone(), p.volume_problem.clone()?)))
            .collect();
        for (pod, why) in &now {
            if self.ignored_pods.get(pod) != Some(why) {
                desk.log(
                    "provisioner",
                    "ignoring pod",
                    json!({"Pod": pod_ref(pod), "error": format!("ignoring pod, {why}")}),
                );
            }
        }
        self.ignored_pods = now;
    }
}

impl Controllers {
    pub(super) fn batch_due(&mut self, now: Duration) {
        if self.provisioning.batcher.take_if_ready(now) {
            self.provision(now);
        } else if let Some(at) = self.provisioning.batcher.closes_at() {
            self.desk.at(at, Timer::Batch);
        }
    }

    /// A batch: one solve over the pods that want capacity, NodeClaims created and pods
    /// nominated; then kube-scheduler's placement rehearsed ([`super::rehearsal`]) and the
    /// pods it leaves without a node solved for again, up to [`super::rehearsal::ROUNDS`]
    /// times, so that the batch needs no second wave.
    fn provision(&mut self, now: Duration) {
        if self.desk.cluster.pods.values().any(|p| p.wants_capacity()) {
            tell_incompatible_pools(&mut self.desk, now);
        }
        let claims = &self.desk.cluster.nodeclaims;
        (self.provisioning.unlaunched)
            .retain(|name, _| claims.get(name).is_some_and(super::rehearsal::unlaunched));
        let mut planned = Vec::new();
        for round in 0..=super::rehearsal::ROUNDS {
            let made = self.provision_once(now);
            if made.is_empty() {
                break;
            }
            planned.extend(made);
            if round == super::rehearsal::ROUNDS {
                break;
            }
            let leftovers = self.provisioning.rehearse(&mut self.desk, &planned, now);
            if leftovers.is_empty() {
                break;
            }
            self.desk.log(
                "provisioner",
                "kube-scheduler would leave pod(s) without a node, provisioning again",
                json!({"Pods": list_text(&leftovers), "round": round + 1}),
            );
        }
        // the buffers take what room the real pods left
        self.provision_buffers(now);
    }

    /// One solve over the pods that want capacity, then NodeClaims created and pods
    /// nominated: the NodeClaims' nodes as they will register.
    fn provision_once(&mut self, now: Duration) -> Vec<PlannedNode> {
        self.desk.unavailable.expire(now);
        self.provisioning.log_ignored_pods(&mut self.desk);
        let keys = self.desk.cluster.pods_where(|p| p.wants_capacity());
        if keys.is_empty() {
            return Vec::new();
        }
        self.desk.log(
            "provisioner",
            "found provisionable pod(s)",
            json!({"Pods": list_text(&keys), "duration": "0s"}),
        );
        let inputs = provisioning_inputs(&mut self.desk, &keys, now);
        if let Some(last) = &self.provisioning.unplaced
            && last.inputs == inputs
        {
            // what the last solve read is unchanged, and it placed none of these pods:
            // it would answer the same, so its answer is given again
            let (logs, events) = (last.logs.clone(), last.events.clone());
            self.desk.actions.extend(logs);
            for e in events {
                self.desk.event(e, now);
            }
            self.desk.cancel(&Timer::RetryPending);
            self.desk.at(now + UNSCHEDULABLE_RETRY, Timer::RetryPending);
            return Vec::new();
        }
        self.provisioning.unplaced = None;
        let logged_before = self.desk.actions.len();
        let (solved, pools) = solve_pending(&mut self.desk, keys, now);
        let Solved {
            decision,
            pods: keys,
            node_pools: pool_names,
            claims: existing_claims,
            ..
        } = solved;
        self.provisioning
            .count_decided(&mut self.desk, &keys, decision.unschedulable.len(), now);
        self.provisioning.left_pending = (decision.unschedulable.iter())
            .map(|u| keys[u.pod].clone())
            .collect();
        let pods = &self.desk.cluster.pods;
        (self.provisioning.verdicts).retain(|k, _| pods.get(k).is_some_and(|p| p.node.is_none()));
        for u in &decision.unschedulable {
            let outcome = PodOutcome::Unschedulable(u.reasons.clone());
            self.provisioning.record(&keys[u.pod], outcome, now);
        }
        for e in &decision.existing {
            // pods a node Kerf does not manage can take are left to kube-scheduler
            let Some(claim) = existing_claims[e.node].clone() else {
                continue;
            };
            let node = self
                .desk
                .cluster
                .nodeclaims
                .get(&claim)
                .and_then(|c| c.node.clone());
            for p in &e.pods {
                let outcome = PodOutcome::Nominated(claim.clone());
                self.provisioning.record(&keys[*p], outcome, now);
                nominate(&mut self.desk, &keys[*p], &claim, now);
                nominated_event(&mut self.desk, &keys[*p], &claim, node.as_deref(), now);
            }
            if self
                .desk
                .cluster
                .nodeclaims
                .get(&claim)
                .is_some_and(|c| c.initialized)
            {
                self.desk
                    .at(now + NOMINATION_GRACE, Timer::NominationExpiry(claim));
            }
        }
        log_new_nodeclaims(&mut self.desk, &decision.nodeclaims);
        let mut failed = Vec::new();
        for u in &decision.unschedulable {
            let reasons: Vec<String> = u.reasons.iter().map(ToString::to_string).collect();
            let (namespace, name) = split_pod_key(&keys[u.pod]);
            let pod = json!({"name": name, "namespace": namespace});
            self.desk.log_error(
                "provisioner",
                "could not schedule pod",
                json!({
                    "Pod": pod,
                    "error": reasons.join("; "),
                }),
            );
            let event = Event {
                kind: EventObject::Pod,
                name: keys[u.pod].clone(),
                warning: true,
                reason: "FailedScheduling".into(),
                message: format!("Failed to schedule pod, {}", reasons.join("; ")),
            };
            failed.push(event.clone());
            self.desk.event(event, now);
        }
        let mut planned = Vec::new();
        for plan in &decision.nodeclaims {
            let pool = pool_names[plan.node_pool].clone();
            let name = self.create_nodeclaim(plan, &pool, "provisioned", now);
            for p in &plan.pods {
                let outcome = PodOutcome::Nominated(name.clone());
                self.provisioning.record(&keys[*p], outcome, now);
                nominate(&mut self.desk, &keys[*p], &name, now);
                nominated_event(&mut self.desk, &keys[*p], &name, None, now);
            }
            let taints = &self.desk.cluster.nodeclaims[&name].taints;
            if let Some(node) = PlannedNode::of(&name, plan, &pools[plan.node_pool], taints) {
                (self.provisioning.unlaunched).insert(name.clone(), node.clone());
                planned.push(node);
            }
        }
        if decision.nodeclaims.is_empty() && decision.existing.is_empty() {
            let logs = self.desk.actions[logged_before..]
                .iter()
                .filter(|a| matches!(a, Action::Log(_)))
                .cloned()
                .collect();
            self.provisioning.unplaced = Some(super::Unplaced {
                inputs,
                logs,
                events: failed,
            });
        }
        if !decision.unschedulable.is_empty() {
            // pods left pending go round again, a while later: solving every batch window
            // for pods nothing can host only burns CPU
            self.desk.cancel(&Timer::RetryPending);
            self.desk.at(now + UNSCHEDULABLE_RETRY, Timer::RetryPending);
        }
        planned
    }

    /// What the provisioner would do at `now` for every pod that wants capacity, without doing
    /// it: `kerf schedule`'s dry run over the cluster its manifests describe.
    pub fn dry_run(&mut self, now: Duration) -> Solved {
        let keys = self.desk.cluster.pods_where(|p| p.wants_capacity());
        let (pools, pool_names) = self.desk.pool_inputs(now);
        let options = self.desk.solve_options();
        let mut solved =
            self.desk
                .solve_over(keys, &pools, pool_names, options, Packing::NearBound);
        solved.ignored = (self.desk.cluster.pods.iter())
            .filter(|(_, p)| p.node.is_none() && p.nominated.is_none())
            .filter_map(|(k, p)| Some((k.clone(), p.volume_problem.clone()?)))
            .collect();
        solved
    }

    /// Creates the NodeClaim of a plan and asks the cloud to launch it; its name. `reason`
    /// is Karpenter's for the created-NodeClaims counter: `provisioned`, or the disruption's
    /// reason for a replacement.
    pub(super) fn create_nodeclaim(
        &mut self,
        plan: &PlannedNodeClaim,
        pool_name: &str,
        reason: &str,
        now: Duration,
    ) -> String {
        let name = nodeclaim_name(pool_name, &mut self.desk.rng);
        let relaxed = if plan.min_values_relaxed {
            "true"
        } else {
            "false"
        };
        self.desk
            .metrics
            .inc(&families::NODECLAIMS_CREATED, &[relaxed, pool_name, reason]);
        let types: Vec<String> = plan.instance_types.iter().map(|o| o.name.clone()).collect();
        self.desk.log(
            "provisioner",
            "created nodeclaim",
            json!({
                "NodePool": {"name": pool_name}, "NodeClaim": {"name": name},
                "requests": plan.requests.to_resource_list(),
                "instance-types": list_text(&types),
            }),
        );
        let pool = self.desk.cluster.node_pools[pool_name].clone();
        let class = pool.spec.template.spec.node_class_ref.name.clone();
        let pool_hash = node_pool_hash(&pool);
        // only an EC2NodeClass has a hash (Karpenter kwok's node class has none)
        let class_hash = self
            .desk
            .cluster
            .node_classes
            .get(&class)
            .filter(|_| pool.spec.template.spec.node_class_ref.group == labels::AWS_GROUP)
            .map(|c| node_class_hash(c, &self.desk.settings.cluster_ca_bundle));
        let mut object = nodeclaim(plan, &pool, name.clone());
        let annotations = object
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        annotations.insert(labels::NODEPOOL_HASH.into(), pool_hash.clone());
        annotations.insert(
            labels::NODEPOOL_HASH_VERSION.into(),
            crate::hash::NODEPOOL_HASH_VERSION.into(),
        );
        if let Some(hash) = &class_hash {
            annotations.insert(labels::EC2NODECLASS_HASH.into(), hash.clone());
            annotations.insert(
                labels::EC2NODECLASS_HASH_VERSION.into(),
                crate::hash::EC2NODECLASS_HASH_VERSION.into(),
            );
        }
        let annotations = annotations.clone();
        object.metadata.finalizers = Some(vec![labels::TERMINATION_FINALIZER.into()]);
        let overlaid_prices = self.desk.overlaid_prices(pool_name, &types, now);
        self.desk.cluster.nodeclaims.insert(
            name.clone(),
            ClaimRecord {
                node_pool: pool_name.to_string(),
                node_class: class,
                created: now,
                requirements: plan.requirements.clone(),
                taints: object.spec.taints.clone(),
                startup_taints: object.spec.startup_taints.clone(),
                instance_types: types,
                node_pool_hash: pool_hash,
                node_class_hash: class_hash.unwrap_or_default(),
                annotations,
                termination_grace_period: object.spec.termination_grace_period.map(|g| g.0),
                requested: crate::objects::requested_names(&object),
                launched: None,
                node: None,
                registered: false,
                initialized: false,
                drifted: None,
                deleting: None,
                deletion_stored: false,
                instance_terminating: false,
                instance_terminating_stored: false,
                consolidatable: false,
                terminate_at: None,
                overlaid_prices,
                reboot: None,
            },
        );
        self.desk
            .actions
            .push(super::Action::CreateNodeClaim(Box::new(object)));
        self.lifecycle.launch(&mut self.desk, &name, now);
        // its conditions Unknown until the launch answers, as Karpenter writes them first
        // (after the launch in the NodeClaim's lane, so that the launch waits on no write)
        self.desk.status_changed(&name);
        name
    }
}

/// Feeds `Debug` text into a hasher without building the string.
struct DebugHasher<'h>(&'h mut std::collections::hash_map::DefaultHasher);

impl std::fmt::Write for DebugHasher<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// The allocatable the scheduler gives an instance type of a NodePool (its attachment slots
/// included), when the NodePool still offers the type.
pub(super) fn type_allocatable<'a>(
    pools: &'a [NodePoolInput],
    pool: &str,
    instance_type: &str,
) -> Option<&'a Resources> {
    pools
        .iter()
        .find(|p| p.name == pool)?
        .instance_types
        .iter()
        .find(|t| t.name == instance_type)
        .map(|t| &t.allocatable)
}

/// A pod's `namespace/name` as Karpenter's log lines name it (`{"name", "namespace"}`).
fn pod_ref(key: &str) -> serde_json::Value {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    json!({"name": name, "namespace": namespace})
}

/// Karpenter's `computed new nodeclaim(s) to fit pod(s)`, when a solve made any.
pub(super) fn log_new_nodeclaims(desk: &mut Desk, planned: &[PlannedNodeClaim]) {
    if !planned.is_empty() {
        desk.log(
            "provisioner",
            "computed new nodeclaim(s) to fit pod(s)",
            json!({
                "nodeclaims": planned.len(),
                "pods": planned.iter().map(|c| c.pods.len()).sum::<usize>(),
            }),
        );
    }
}

/// Tells each NodePool whose requirements filter out all its instance types, as Karpenter
/// does before each batch's scheduling simulation: a log line each batch, and a warning
/// event on the NodePool at most once a minute.
fn tell_incompatible_pools(desk: &mut Desk, now: Duration) {
    let (pools, _) = desk.pool_inputs(now);
    for np in &pools {
        let Some(why) = no_compatible_types(np, desk.settings.min_values_policy) else {
            continue;
        };
        let mut fields = json!({"NodePool": {"name": np.name}});
        if let NoCompatibleTypes::MinValues(keys) = &why {
            fields["minValuesIncompatibleErr"] = format!(
                "minValues requirement is not met for label(s) (label(s)=[{}])",
                keys.join(" ")
            )
            .into();
        }
        desk.log(
            "provisioner",
            "skipping, nodepool requirements filtered out all instance types",
            fields,
        );
        desk.event(
            Event {
                kind: EventObject::NodePool,
                name: np.name.clone(),
                warning: true,
                reason: "NoCompatibleInstanceTypes".into(),
                message: why.message().into(),
            },
            now,
        );
    }
}

/// A pod is to go to this NodeClaim; the first time it is, the provisioner found it a
/// place (Karpenter's provisioning latency metrics count from here).
fn nominate(desk: &mut Desk, pod: &str, claim: &str, now: Duration) {
    if let Some(rec) = desk.cluster.pods.get_mut(pod) {
        rec.nominated = Some(claim.to_string());
        rec.schedulable_since.get_or_insert(now);
    }
}

/// Karpenter's `Nominated` event: the pod should schedule on this NodeClaim (and its
/// node, once registered).
pub(super) fn nominated_event(
    desk: &mut Desk,
    pod: &str,
    claim: &str,
    node: Option<&str>,
    now: Duration,
) {
    let mut on = format!("nodeclaim/{claim}");
    if let Some(node) = node {
        on.push_str(&format!(", node/{node}"));
    }
    desk.event(
        Event {
            kind: EventObject::Pod,
            name: pod.to_string(),
            warning: false,
            reason: "Nominated".into(),
            message: format!("Pod should schedule on: {on}"),
        },
        now,
    );
}

/// A fingerprint of everything a solve for these pending pods reads: the cluster's
/// writes, the unavailable offerings, and the NodePools, nodes, in-flight NodeClaims and
/// nominations as the solver gets them (the controllers' own writes included).
fn provisioning_inputs(desk: &mut Desk, keys: &[String], now: Duration) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (desk.cluster.generation(), desk.cluster.pod_writes()).hash(&mut h);
    desk.unavailable.generation().hash(&mut h);
    keys.hash(&mut h);
    let (pools, _) = desk.pool_inputs(now);
    let (existing, _) = desk.capacity_in_place(&pools);
    let mut text = DebugHasher(&mut h);
    for p in &pools {
        let _ = write!(
            text,
            "{}|{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|",
            p.name,
            p.weight,
            p.labels,
            p.requirements,
            p.taints,
            p.startup_taints,
            p.limits,
            p.usage
        );
    }
    let _ = write!(text, "{existing:?}");
    for (k, p) in &desk.cluster.pods {
        if let Some(claim) = &p.nominated {
            (k, claim).hash(&mut h);
        }
    }
    h.finish()
}

/// One solve for these pending pods over the whole cluster: its NodePools within their
/// limits, its nodes and in-flight NodeClaims with the pods bound or nominated to them;
/// with the NodePools as the solver read them.
fn solve_pending(
    desk: &mut Desk,
    keys: Vec<String>,
    now: Duration,
) -> (Solved, Vec<NodePoolInput>) {
    let (pools, pool_names) = desk.pool_inputs(now);
    // wall-clock time, for the scheduling-duration histogram only: no decision reads it
    let started = std::time::Instant::now();
    let options = desk.solve_options();
    let solved = desk.solve_over(keys, &pools, pool_names, options, Packing::NearBound);
    desk.metrics.observe(
        &families::SCHEDULER_SCHEDULING_DURATION_SECONDS,
        &["provisioner"],
        started.elapsed().as_secs_f64(),
    );
    (solved, pools)
}
