//! The batch rehearsed as kube-scheduler will bind it, before anyone waits on it.
//!
//! The solver packs a batch as a bin packer would, but kube-scheduler binds the pods its own
//! way: in its queue's order, each onto the Ready node its filters pass and its score likes
//! best (LeastAllocated spreads them), never where Kerf nominated them. Pods then end up
//! where they were not planned, and some no longer fit anywhere: Karpenter finds them a
//! second and third wave of NodeClaims seconds later. The provisioner instead plays
//! kube-scheduler over the nodes there will be (the cluster's, those in flight, and the batch's
//! new NodeClaims) with [`kerf_kube_scheduler`], written apart from the solver, and finds the
//! leftovers a NodeClaim in the same batch; pods the rehearsal places elsewhere than planned
//! are nominated where it placed them.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::{Taint, labels};
use kerf_kube_scheduler as ks;
use kerf_scheduling::resources::Resources;
use kerf_scheduling::{NodePoolInput, PlannedNodeClaim};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::desk::Desk;
use super::provisioning::Provisioner;
use super::provisioning::scheduling_taints;
use crate::cluster::PodOwner;
use crate::nodepools::daemon_runs_on;

/// Rounds of rehearsal a batch gets: each finds the last round's leftovers NodeClaims, which
/// change where kube-scheduler spreads pods, so the next round looks again.
pub(super) const ROUNDS: usize = 3;

/// A NodeClaim the batch planned, as the node it will register as.
#[derive(Clone, Debug)]
pub(super) struct PlannedNode {
    claim: String,
    labels: Arc<BTreeMap<String, String>>,
    taints: Vec<Taint>,
    allocatable: Resources,
}

impl PlannedNode {
    /// The node a new NodeClaim becomes: its launch's instance type (labels, allocatable) and
    /// offering, its NodePool's template labels and the requirements it pins to one value,
    /// and its taints (startup taints go away before pods bind).
    pub(super) fn of(
        claim: &str,
        plan: &PlannedNodeClaim,
        pool: &NodePoolInput,
        taints: &[Taint],
    ) -> Option<PlannedNode> {
        let launch = &plan.launch;
        let option = (pool.instance_types.iter()).find(|t| t.name == launch.instance_type)?;
        let mut labels: BTreeMap<String, String> = (*option.labels).clone();
        for r in &plan.requirements {
            if r.operator == kerf_api::Operator::In
                && let [value] = r.values.as_slice()
            {
                labels.insert(r.key.clone(), value.clone());
            }
        }
        labels.extend(pool.labels.clone());
        labels.insert(labels::NODEPOOL.into(), pool.name.clone());
        labels.insert(labels::ZONE.into(), launch.zone.clone());
        labels.insert(labels::CAPACITY_TYPE.into(), launch.capacity_type.clone());
        labels.insert(labels::HOSTNAME.into(), claim.to_string());
        Some(PlannedNode {
            claim: claim.to_string(),
            labels: Arc::new(labels),
            taints: taints.to_vec(),
            allocatable: option.allocatable.clone(),
        })
    }
}

/// A node of the rehearsal, owned until the scheduler borrows it.
struct Seat {
    name: String,
    claim: Option<String>,
    /// Shared with the node's record or the planned NodeClaim: a move's rehearsal seats
    /// every node of the cluster.
    labels: Arc<BTreeMap<String, String>>,
    taints: Vec<Taint>,
    allocatable: ks::Amounts,
    ready: bool,
    /// Whether its Node exists (its daemons' pods are among the bound ones).
    registered: bool,
    usage: ks::Usage,
}

impl Seat {
    /// A NodeClaim's node that has not registered: it will be Ready, nothing bound yet.
    fn unregistered(
        claim: &str,
        labels: Arc<BTreeMap<String, String>>,
        taints: Vec<Taint>,
        allocatable: &Resources,
    ) -> Seat {
        Seat {
            name: claim.to_string(),
            claim: Some(claim.to_string()),
            labels,
            taints,
            allocatable: amounts(allocatable),
            ready: true,
            registered: false,
            usage: ks::Usage::default(),
        }
    }
}

/// Resources as kube-scheduler's model counts them: thousandths, by resource name (the
/// names and amounts [`Resources::to_resource_list`] writes, without writing quantities).
fn amounts(r: &Resources) -> ks::Amounts {
    let thousandths = |v: i64| i128::from(v) * 1000;
    let scalars = [
        ("cpu", i128::from(r.cpu_millis)),
        ("memory", thousandths(r.memory_bytes)),
        ("ephemeral-storage", thousandths(r.ephemeral_storage_bytes)),
        ("pods", thousandths(r.pods)),
    ];
    (scalars.into_iter())
        .map(|(k, v)| (k.to_string(), v))
        .chain((r.extended.iter()).map(|(k, v)| (k.clone(), thousandths(*v))))
        .filter(|(_, v)| *v != 0)
        .collect()
}

/// The facts of each pod as declared (kube-scheduler reads no topology Kerf adds for its
/// volumes), worked out once per rehearsal: replicas share one shape, so one for them all.
#[derive(Default)]
struct FactsByShape(HashMap<*const Pod, ks::Facts>);

impl FactsByShape {
    fn of(&mut self, pod: &Pod) -> &ks::Facts {
        (self.0)
            .entry(std::ptr::from_ref(pod))
            .or_insert_with(|| ks::Facts::of(pod))
    }

    fn get(&self, pod: &Pod) -> Option<&ks::Facts> {
        self.0.get(&std::ptr::from_ref(pod))
    }
}

impl Provisioner {
    /// Plays kube-scheduler over the nodes there will be, the batch's `planned` NodeClaims
    /// among them, binding every pending pod in its queue's order (priority, then age). Pods
    /// it places on another NodeClaim than the one they are nominated to are nominated there;
    /// the nominated pods it places nowhere are returned, their nominations ended, to be
    /// provisioned for again in this batch.
    pub(super) fn rehearse(
        &mut self,
        desk: &mut Desk,
        planned: &[PlannedNode],
        now: Duration,
    ) -> Vec<String> {
        let mut facts = FactsByShape::default();
        let seats = self.seats(desk, planned, &HashSet::default(), &mut facts);
        let cluster = &desk.cluster;
        let pending: Vec<&String> = (cluster.pods.iter())
            .filter(|(_, p)| p.node.is_none() && p.provisionable && p.owner != PodOwner::DaemonSet)
            .map(|(k, _)| k)
            .collect();
        let placed = place(
            desk,
            &seats,
            &mut facts,
            in_queue_order(cluster, pending),
            true,
        );
        let mut moved = Vec::new();
        let mut leftovers = Vec::new();
        // the rehearsal leaves volumes out; kube-scheduler reads a pod's claims' topology and
        // counts a node's attachment slots (its CSINode's limits), so a pod that mounts claims
        // is not moved onto a node they cannot reach or would overflow: it would wait there,
        // nominated, while kube-scheduler refuses it
        let mut slots_taken: HashMap<&str, Resources> = HashMap::default();
        for (key, seat) in placed {
            let p = &cluster.pods[key];
            match seat {
                Some(i) => {
                    let claim = seats[i].claim.as_ref();
                    if let Some(claim) = claim.filter(|c| p.nominated.as_ref() != Some(*c)) {
                        let taken = slots_taken.entry(seats[i].name.as_str()).or_default();
                        // one that would not fit keeps what it has: its nomination (the
                        // solve counted the slots there), or none
                        if reaches(desk, p.declared(), &seats[i])
                            && attachments_fit(desk, &seats[i].name, &p.requests, taken)
                        {
                            moved.push((key.clone(), claim.clone()));
                        }
                    }
                }
                None if p.nominated.is_some() => leftovers.push(key.clone()),
                None => {}
            }
        }
        for (pod, claim) in moved {
            if let Some(p) = desk.cluster.pods.get_mut(&pod) {
                p.nominated = Some(claim.clone());
            }
            let outcome = super::provisioning::PodOutcome::Nominated(claim.clone());
            self.record(&pod, outcome, now);
            let node = (desk.cluster.nodeclaims.get(&claim)).and_then(|c| c.node.clone());
            super::provisioning::nominated_event(desk, &pod, &claim, node.as_deref(), now);
        }
        for pod in &leftovers {
            if let Some(p) = desk.cluster.pods.get_mut(pod) {
                p.nominated = None;
            }
        }
        leftovers
    }

    /// Plays kube-scheduler over the nodes a disruption command leaves (the cluster's but its
    /// `candidates`, its `replacements` Ready beside them, as they are once the command
    /// drains), binding the pods already pending and then the candidates' pods as their
    /// owners make them again: the candidates' pods it places nowhere. A move the solver
    /// packed tightly can leave a pod without a node once kube-scheduler spreads the others
    /// its own way; made anyway, that pod gets a new node, which the next pass consolidates
    /// again.
    pub(super) fn rehearse_move(
        &self,
        desk: &Desk,
        candidates: &[String],
        replacements: &[PlannedNode],
    ) -> Vec<String> {
        let cluster = &desk.cluster;
        let leaving: HashSet<&str> = candidates.iter().map(String::as_str).collect();
        let mut facts = FactsByShape::default();
        let seats = self.seats(desk, replacements, &leaving, &mut facts);
        let pending = (cluster.pods.iter())
            .filter(|(_, p)| p.node.is_none() && p.provisionable && p.owner != PodOwner::DaemonSet)
            .map(|(k, _)| k);
        let moving: Vec<&String> = (cluster.pods.iter())
            .filter(|(_, p)| {
                p.node.as_deref().is_some_and(|n| leaving.contains(n))
                    && p.owner == PodOwner::Controller
                    && !p.terminating
                    && !matches!(p.phase.as_deref(), Some("Succeeded" | "Failed"))
            })
            .map(|(k, _)| k)
            .collect();
        let mut order = in_queue_order(cluster, pending.collect());
        // the candidates' pods come after: they are made again only as the drain evicts them
        order.extend(in_queue_order(cluster, moving));
        // the replacements are Ready before a candidate drains: all there at once
        let placed = place(desk, &seats, &mut facts, order, false);
        (placed.into_iter())
            .filter(|(k, seat)| seat.is_none() && cluster.pods[*k].node.is_some())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The nodes there will be: the registered ones (but those `leaving`) with what their
    /// pods take, the launched NodeClaims still to register and the `planned` ones with their
    /// daemons'.
    fn seats(
        &self,
        desk: &Desk,
        planned: &[PlannedNode],
        leaving: &HashSet<&str>,
        facts: &mut FactsByShape,
    ) -> Vec<Seat> {
        let cluster = &desk.cluster;
        let mut seats = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::default();
        for (name, n) in &cluster.nodes {
            let claim = n
                .nodeclaim
                .as_ref()
                .and_then(|c| cluster.nodeclaims.get_key_value(c));
            if claim.is_some_and(|(_, c)| c.deleting.is_some()) || leaving.contains(name.as_str()) {
                continue;
            }
            let taints = match claim {
                Some((_, c)) => scheduling_taints(n, &c.startup_taints, c.initialized),
                None => n.scheduling_taints().cloned().collect(),
            };
            index.insert(name, seats.len());
            seats.push(Seat {
                name: name.clone(),
                claim: claim.map(|(k, _)| k.clone()),
                labels: n.labels.clone(),
                taints,
                allocatable: amounts(&n.allocatable),
                // a node Kerf launched becomes Ready; one it does not manage may not
                ready: n.ready || claim.is_some(),
                registered: true,
                usage: ks::Usage::default(),
            });
        }
        // replicas on a node are added up once: a node's pods are mostly a few shapes
        let mut on_seat: HashMap<(usize, *const Pod), (&Pod, usize)> = HashMap::default();
        for p in cluster.pods.values() {
            if let Some(&i) = p.node.as_deref().and_then(|n| index.get(n)) {
                let pod = p.declared();
                on_seat
                    .entry((i, std::ptr::from_ref(pod)))
                    .or_insert((pod, 0))
                    .1 += 1;
            }
        }
        for ((i, _), (pod, n)) in on_seat {
            seats[i].usage.add_many(facts.of(pod), n);
        }
        for (name, c) in &cluster.nodeclaims {
            let (Some(launched), None, None) = (&c.launched, &c.node, c.deleting) else {
                continue;
            };
            let Some(pool) = cluster.node_pools.get(&c.node_pool) else {
                continue;
            };
            let labels = Arc::new(super::provisioning::node_labels(launched, pool, name));
            seats.push(Seat::unregistered(
                name,
                labels,
                c.taints.clone(),
                &launched.allocatable,
            ));
        }
        // NodeClaims of earlier batches whose launch has not answered yet (their create or
        // launch held up by a slow or throttling API server), as they were planned
        let this_batch: HashSet<&str> = planned.iter().map(|p| p.claim.as_str()).collect();
        let earlier = (self.unlaunched.values())
            .filter(|p| !this_batch.contains(p.claim.as_str()))
            .filter(|p| cluster.nodeclaims.get(&p.claim).is_some_and(unlaunched));
        for p in earlier.chain(planned) {
            let seat =
                Seat::unregistered(&p.claim, p.labels.clone(), p.taints.clone(), &p.allocatable);
            seats.push(seat);
        }
        let daemons: Vec<(&Pod, ks::Facts)> = (cluster.daemonsets.values())
            .map(|ds| (ds, ks::Facts::of(ds)))
            .collect();
        for s in seats.iter_mut().filter(|s| !s.registered) {
            for (ds, f) in &daemons {
                if daemon_runs_on(ds, &s.labels, &s.taints) {
                    s.usage.add(f);
                }
            }
        }
        seats
    }
}

/// Whether a NodeClaim is still waiting for its launch's answer, neither launched nor going.
pub(super) fn unlaunched(c: &crate::cluster::ClaimRecord) -> bool {
    c.launched.is_none() && c.node.is_none() && c.deleting.is_none()
}

/// Pods in kube-scheduler's queue order: higher priority first, then older.
fn in_queue_order<'a>(
    cluster: &crate::cluster::Cluster,
    mut pods: Vec<&'a String>,
) -> Vec<&'a String> {
    pods.sort_by_key(|k| {
        let p = &cluster.pods[*k];
        let priority = (p.shape.spec.as_ref()).and_then(|s| s.priority);
        (Reverse(priority.unwrap_or(0)), p.created, *k)
    });
    pods
}

/// Whether the pod's volumes let it bind to the seat, as kube-scheduler's VolumeBinding
/// reads its claims (their alternatives as [`crate::volumes::Volumes::requirements`] gives
/// them). The rehearsal places pods as declared, without their volumes' topology, so a pod
/// is moved only onto a node its volumes reach: moved onto another zone's node, an evicted
/// StatefulSet pod waited there, nominated, while kube-scheduler refused it (swarm seeds
/// 60027, 64275). Placing by it instead turned such pods into leftovers batch after batch
/// (seed 62539), as the solve and the placement then disagreed.
fn reaches(desk: &Desk, pod: &Pod, seat: &Seat) -> bool {
    if !crate::volumes::Volumes::mounts_claims(pod) {
        return true;
    }
    let alternatives = desk.cluster.volumes.requirements(pod);
    alternatives.is_empty()
        || (alternatives.iter()).any(|a| a.iter().all(|r| ks::requirement_holds(r, &seat.labels)))
}

/// Whether the node `name` has the volume attachment slots `requests` asks for beyond
/// its bound pods' and those `taken` in this rehearsal (which it then counts); a node
/// with no published limit (or not registered yet) takes any number.
fn attachments_fit(desk: &Desk, name: &str, requests: &Resources, taken: &mut Resources) -> bool {
    let wanted: Vec<(&String, &i64)> = (requests.extended.iter())
        .filter(|(k, _)| k.starts_with(labels::ATTACHABLE_VOLUMES))
        .collect();
    let Some(node) = desk.cluster.nodes.get(name).filter(|_| !wanted.is_empty()) else {
        return true;
    };
    let mut limits = Resources::default();
    (desk.cluster.volumes).add_attach_slots(Some(name), None, &mut limits);
    let fits = wanted.iter().all(|(k, n)| {
        let used = node.requests.extended.get(*k).copied().unwrap_or(0)
            + taken.extended.get(*k).copied().unwrap_or(0);
        limits
            .extended
            .get(*k)
            .is_none_or(|limit| used + **n <= *limit)
    });
    if fits {
        for (k, n) in wanted {
            *taken.extended.entry(k.clone()).or_insert(0) += n;
        }
    }
    fits
}

/// Binds `pods` (in that order) as kube-scheduler would onto `seats`: where each went.
/// `arriving`: the seats not yet registered turn Ready one by one, in the order they
/// come (launched, then planned), and each time the pods still waiting are tried again
/// in queue order, as kube-scheduler retries them on a node's arrival. A batch's nodes
/// do come up over seconds, and the first to come take the pods at the head of the queue;
/// played as if all were there at once, LeastAllocated would spread the small pods over
/// every node and leave no room for the large ones, a pessimism that launched a fifth
/// more nodes than kube-scheduler needed (172 against Karpenter's 155 at 1,000 pods).
fn place<'a>(
    desk: &Desk,
    seats: &[Seat],
    facts: &mut FactsByShape,
    pods: Vec<&'a String>,
    arriving: bool,
) -> Vec<(&'a String, Option<usize>)> {
    let cluster = &desk.cluster;
    if pods.is_empty() {
        return Vec::new();
    }
    for k in &pods {
        facts.of(cluster.pods[*k].declared());
    }
    // one pod of each shape stands for the rest, for which bound pods weigh
    let mut shapes = HashSet::default();
    let alike: Vec<&Pod> = (pods.iter())
        .map(|k| cluster.pods[*k].declared())
        .filter(|s| shapes.insert(std::ptr::from_ref(*s)))
        .collect();
    let by_name: HashMap<&str, usize> = (seats.iter().enumerate())
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    // replicas share their declared shape: whether one weighs is asked once for them all
    let mut weighs: HashMap<*const Pod, bool> = HashMap::default();
    let weighing: Vec<(&Pod, &ks::Facts, &str)> = (cluster.pods.values())
        .filter_map(|p| {
            let node = p.node.as_deref().filter(|n| by_name.contains_key(n))?;
            let pod = p.declared();
            let f = facts.get(pod)?;
            let weighs = *(weighs.entry(std::ptr::from_ref(pod)))
                .or_insert_with(|| ks::weighs_on(pod, f, &alike));
            weighs.then_some((pod, f, node))
        })
        .collect();
    let nodes: Vec<ks::Node<'_>> = (seats.iter())
        .map(|s| ks::Node {
            name: &s.name,
            labels: &s.labels,
            taints: &s.taints,
            allocatable: std::borrow::Cow::Borrowed(&s.allocatable),
            ready: s.ready,
            volume_limits: BTreeMap::new(),
        })
        .collect();
    let usage = |n: &str| by_name.get(n).map(|&i| &seats[i].usage);
    let mut scheduler = ks::Scheduler::with_usage(nodes, usage, weighing, None);
    let mut out = Vec::new();
    let pods: Vec<(&String, &ks::Facts)> = (pods.into_iter())
        .filter_map(|k| Some((k, facts.get(cluster.pods[k].declared())?)))
        .collect();
    if !arriving {
        for (key, f) in pods {
            let seat = scheduler.schedule_with(cluster.pods[key].declared(), f, None);
            out.push((key, seat.map(|node| by_name[node])));
        }
        return out;
    }
    let registered = (seats.iter()).take_while(|s| s.registered).count();
    let mut waiting = pods;
    for ready in registered..=seats.len() {
        // a pod like one that found no room finds none either, until the next binding
        let mut roomless: HashSet<u64> = HashSet::default();
        waiting.retain(|&(key, f)| {
            if roomless.contains(&f.class_hash()) {
                return true;
            }
            let pod = cluster.pods[key].declared();
            match scheduler.schedule_within(pod, f, |i| i < ready) {
                Some(i) => {
                    out.push((key, Some(i)));
                    roomless.clear();
                    false
                }
                None => {
                    roomless.insert(f.class_hash());
                    true
                }
            }
        });
    }
    out.extend(waiting.into_iter().map(|(key, _)| (key, None)));
    out
}
