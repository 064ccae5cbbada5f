//! kube-scheduler as the simulated cluster runs it: [`Binder`] keeps what it reads between
//! passes (each node's usage, the pods waiting) and places the waiting pods with
//! [`crate::kube_scheduler`], written apart from Kerf's solver. It reads the API server and,
//! through one named hook ([`Nominations`]), the NodeClaims Kerf nominated pods to.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::labels;
use kerf_core::cluster::{Cluster, PodOwner};
use kerf_core::provisioning::rules::is_provisionable;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::api_server::{ApiServer, StoredPod};
use crate::kube_scheduler;

/// The binder's memory between passes, kept as pods come, go, are bound and unbound.
#[derive(Default)]
pub(super) struct Binder {
    /// What the pods bound to each node take of it: a pass starts from it instead of adding
    /// up every bound pod.
    usage: HashMap<String, kube_scheduler::Usage>,
    /// The keys of the pods waiting for a node (daemon pods aside): a pass reads these
    /// instead of walking every pod.
    pending: BTreeSet<String>,
    /// Those of `pending` whose status does not say Unschedulable yet: a pass that only marks
    /// new pods reads these.
    unmarked: BTreeSet<String>,
    /// Something it reads changed: it looks again.
    pub dirty: bool,
    /// What its last pass placed nowhere, kept while only new pending pods have come since:
    /// a pass over pods of those classes alone would place nothing again.
    failed: Option<Failed>,
}

/// The pending pods a pass placed nowhere: their classes (by hash), and whether any of them
/// mounts claims (then storage decides where they fit).
struct Failed {
    classes: HashSet<u64>,
    claims: bool,
}

/// What one pass decided, for the API server to store.
pub(super) struct Pass {
    /// Pods to bind, with their nodes, in the order they were placed.
    pub placed: Vec<(String, String)>,
    /// The waiting pods not yet marked Unschedulable: those still unbound after `placed` is
    /// bound are marked.
    pub unmarked: Vec<String>,
}

/// Kerf's nominations, the one thing the binder reads from outside the API server: the
/// stand-in tries a pod's nominated NodeClaim's node first, as the operator's `Nominated`
/// events would have a nomination-aware kube-scheduler do (unless the scenario's
/// `spec.kubeScheduler.ignoreNominations` says it reads none, as the real one), and leaves a
/// nominated pod's status unmarked.
pub(super) struct Nominations<'a> {
    cluster: &'a Cluster,
    honoured: bool,
}

impl<'a> Nominations<'a> {
    /// Kerf's nominations as its cluster state holds them; `honoured` says whether the
    /// stand-in places nominated pods there first.
    pub fn new(cluster: &'a Cluster, honoured: bool) -> Nominations<'a> {
        Nominations { cluster, honoured }
    }

    /// The NodeClaim Kerf nominated the pod to, if any.
    pub fn claim(&self, pod: &str) -> Option<&'a String> {
        (self.cluster.pods().get(pod)).and_then(|r| r.nominated.as_ref())
    }

    /// The NodeClaim the stand-in places the pod by: its nomination, when honoured.
    fn honoured_claim(&self, pod: &str) -> Option<&'a String> {
        self.claim(pod).filter(|_| self.honoured)
    }

    /// The node of a NodeClaim, once it has registered one.
    fn node(&self, claim: &str) -> Option<&'a str> {
        (self.cluster.nodeclaims().get(claim)).and_then(|c| c.node.as_deref())
    }
}

impl Binder {
    /// How many pods wait for a node.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Something it reads other than a new pending pod changed: it looks again, over every
    /// pending pod.
    pub fn changed(&mut self) {
        self.dirty = true;
        self.failed = None;
    }

    /// The pods waiting for a node (stored unbound, not a DaemonSet's), by key.
    pub fn pending(&self) -> impl Iterator<Item = &String> {
        self.pending.iter()
    }

    /// Whether its last pass placed some pending pod nowhere, and nothing since could fit
    /// one.
    pub fn failed_last(&self) -> bool {
        self.failed.is_some()
    }

    /// Whether writing `labels` onto `node` could fit a pod the binder last placed nowhere.
    /// The binder places pods on Ready nodes only. A node not Ready that gains labels can
    /// add spread domains, which never raises the fewest pods any domain holds, and can
    /// count the pods bound to it in domains: that matters when one of them counts toward
    /// a pending pod's spread or required affinity ([`crate::kube_scheduler::counts_for`]). A
    /// changed value can empty a domain, so it always counts.
    pub fn labels_widen(
        &self,
        api: &ApiServer,
        node: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        let Some(n) = api.nodes.get(node) else {
            return false;
        };
        if n.ready || !self.failed_last() {
            return true;
        }
        if (labels.iter()).any(|(k, v)| n.labels.get(k).is_some_and(|old| old != v)) {
            return true;
        }
        let on_node: Vec<&Pod> = (api.pods.values())
            .filter(|p| p.node.as_deref() == Some(node))
            .map(|p| p.declared())
            .collect();
        !on_node.is_empty()
            && (api.pods.values()).filter(|p| p.node.is_none()).any(|p| {
                (on_node.iter()).any(|o| crate::kube_scheduler::counts_for(p.declared(), o))
            })
    }

    /// Claims, volumes or CSINodes changed: they decide only where pods that mount claims
    /// fit.
    pub fn storage_changed(&mut self) {
        if self.failed.as_ref().is_none_or(|f| f.claims) {
            self.changed();
        } else {
            self.dirty = true;
        }
    }

    /// Adds a stored pod to (or takes it from) what its node's pods take, if it is bound.
    pub fn uses(&mut self, pod: &StoredPod, add: bool) {
        let Some(node) = pod.node.as_deref() else {
            return;
        };
        if add {
            (self.usage.entry(node.to_string()).or_default()).add(&pod.facts);
        } else if (self.usage.get_mut(node)).is_some_and(|u| u.remove(&pod.facts)) {
            self.usage.remove(node);
        }
    }

    /// Keeps the waiting pods true to the pod `k` as stored now (`None`: gone), and the last
    /// pass's failures to pending pods whose classes all failed: a pod of another class
    /// forgets the failures.
    pub fn track(&mut self, k: &str, stored: Option<&StoredPod>) {
        let waiting = stored.filter(|p| p.node.is_none() && p.owner != PodOwner::DaemonSet);
        let Some(p) = waiting else {
            self.pending.remove(k);
            self.unmarked.remove(k);
            return;
        };
        if is_provisionable(&p.pod) {
            self.unmarked.remove(k);
        } else {
            self.unmarked.insert(k.to_string());
        }
        if let Some(failed) = &mut self.failed {
            if !failed.classes.contains(&p.facts.class_hash()) {
                self.failed = None;
            } else if p.facts.mounts_claims() {
                failed.claims = true;
            }
        }
        self.pending.insert(k.to_string());
    }

    /// The pod was marked Unschedulable (or will stay unmarked: nominated, finished, a
    /// mirror).
    pub fn marked(&mut self, k: &str) {
        self.unmarked.remove(k);
    }

    /// One pass of kube-scheduler's stand-in: binds pending pods one by one, oldest first
    /// and those nominated for a node first, and names the ones no Ready node fits for their
    /// status. A pod refused for its spread or affinity while others were placed leaves the
    /// binder dirty: kube-scheduler requeues it when another pod is bound.
    pub fn pass(&mut self, api: &ApiServer, nominations: &Nominations<'_>) -> Pass {
        if self.failed.is_some() {
            // every pending pod is of a class the last pass placed nowhere, and nothing
            // since could fit one ([`Binder::track`]): only the new ones are marked
            let unmarked = self.unmarked.iter().cloned().collect();
            return Pass {
                placed: Vec::new(),
                unmarked,
            };
        }
        // in key order, then (stably) nominated first and longest waiting first
        let mut pending: Vec<(Option<&String>, Duration, &String, &StoredPod)> =
            (self.pending.iter())
                .filter_map(|k| api.pods.get_key_value(k))
                .map(|(k, p)| (nominations.honoured_claim(k), p.pending_since, k, p))
                .collect();
        if pending.is_empty() {
            return Pass {
                placed: Vec::new(),
                unmarked: Vec::new(),
            };
        }
        pending.sort_by_key(|&(claim, since, _, _)| (claim.is_none(), since));
        let mut placed = Vec::new();
        if api.nodes.iter().any(|(_, n)| n.ready) {
            let nodes = (api.nodes.iter())
                .map(|(name, n)| kube_scheduler::Node {
                    name,
                    labels: &n.labels,
                    taints: &n.taints,
                    allocatable: Cow::Borrowed(&n.amounts),
                    ready: n.ready,
                    volume_limits: (api.csi_limits.get(name))
                        .map(|l| (labels::EBS_CSI_DRIVER, *l))
                        .into_iter()
                        .collect(),
                })
                .collect();
            // one pending pod of each class stands for the rest
            let mut classes = HashSet::default();
            let alike: Vec<&Pod> = (pending.iter())
                .filter(|(_, _, _, p)| classes.insert(p.facts.class_hash()))
                .map(|(_, _, _, p)| p.declared())
                .collect();
            let mut weighs: HashMap<u64, bool> = HashMap::default();
            let bound = (api.pods.values()).filter_map(|p| {
                let node = p.node.as_deref()?;
                let hash = p.facts.class_hash();
                let weighs = *(weighs.entry(hash))
                    .or_insert_with(|| kube_scheduler::weighs_on(p.declared(), &p.facts, &alike));
                weighs.then(|| (p.declared(), &p.facts, node))
            });
            let storage = Some(api.storage.view());
            let usage = |n: &str| self.usage.get(n);
            let mut scheduler = kube_scheduler::Scheduler::with_usage(nodes, usage, bound, storage);
            for (claim, _, k, p) in &pending {
                let nominated = claim.and_then(|c| nominations.node(c));
                if let Some(node) = scheduler.schedule_with(p.declared(), &p.facts, nominated) {
                    placed.push(((*k).clone(), node.to_string()));
                }
            }
        }
        // none placed: every pending pod's class failed, as long as only new pods come
        self.failed = placed.is_empty().then(|| {
            let facts = || pending.iter().map(|(_, _, _, p)| &p.facts);
            Failed {
                classes: facts().map(|f| f.class_hash()).collect(),
                claims: facts().any(|f| f.mounts_claims()),
            }
        });
        // kube-scheduler requeues a pod refused for its spread or affinity when another pod
        // is bound: one refused early in this pass may fit beside the pods bound after it
        let bound: HashSet<&String> = placed.iter().map(|(k, _)| k).collect();
        let again = !placed.is_empty()
            && (pending.iter()).any(|(_, _, k, p)| p.facts.counts_peers() && !bound.contains(k));
        // the pods not yet marked Unschedulable, for when the placed ones are bound
        let unmarked = (pending.into_iter())
            .filter(|(_, _, _, p)| !is_provisionable(&p.pod))
            .map(|(_, _, k, _)| k.clone())
            .collect();
        self.dirty |= again;
        Pass { placed, unmarked }
    }
}
