//! The workload controllers' memory (kube-controller-manager's ReplicaSet, StatefulSet and
//! Job controllers): each workload's template and replicas, and which pods each owns.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kerf_core::workloads::{PodNames, claim_for};

use super::api_server::StoredPod;
use super::{deletion_cost, owned_by};

/// A workload controller's template and replica count.
pub(super) struct Workload {
    /// `Deployment`, `StatefulSet` or `Job`.
    pub kind: String,
    /// The pod template, named after the workload.
    pub template: Pod,
    /// A StatefulSet's claim templates: each pod gets its own claims, made before it.
    pub claims: Vec<PersistentVolumeClaim>,
    /// How many pods it wants.
    pub replicas: i64,
    /// How many pods it has made: the next pod's number.
    pub next: u64,
    /// How its controller names its pods.
    pub names: PodNames,
}

/// Every workload, and the pods each owns.
pub(super) struct Workloads {
    /// Each workload, by `Kind/namespace/name`.
    pub specs: BTreeMap<String, Workload>,
    /// The keys of each workload's pods, by workload name, and each owned pod's workload,
    /// kept as pods come and go ([`super::World::track_pod`]): the controllers read these
    /// instead of walking every pod after each eviction.
    pub by_workload: HashMap<String, BTreeSet<String>>,
    pub workload_of: HashMap<String, String>,
    /// A pod went or a workload changed: the controllers look again.
    pub dirty: bool,
}

impl Default for Workloads {
    fn default() -> Workloads {
        Workloads {
            specs: BTreeMap::new(),
            by_workload: HashMap::default(),
            workload_of: HashMap::default(),
            // the first settle reconciles whatever the scenario's manifests declared
            dirty: true,
        }
    }
}

/// What a workload controller asks of the API server to match its replicas, in order.
pub(super) enum Change {
    /// Make this pod, after its claims (a StatefulSet's, one per claim template).
    Create {
        pod: Box<Pod>,
        claims: Vec<PersistentVolumeClaim>,
    },
    /// Delete the pod with this key.
    Delete(String),
}

impl Workloads {
    /// The keys of the pods the workload `name` owns, in key order.
    pub fn pods_of(&self, name: &str) -> Vec<String> {
        (self.by_workload.get(name)).map_or_else(Vec::new, |pods| pods.iter().cloned().collect())
    }

    /// Keeps which pods each workload owns true to the pod `k`: `owner` is the workload its
    /// controller reference names (`None`: gone, or no workload's).
    pub fn track(&mut self, k: &str, owner: Option<&str>) {
        if self.workload_of.get(k).map(String::as_str) == owner {
            return;
        }
        if let Some(old) = self.workload_of.remove(k)
            && let Some(pods) = self.by_workload.get_mut(&old)
        {
            pods.remove(k);
        }
        if let Some(w) = owner {
            let w = w.to_string();
            (self.by_workload.entry(w.clone()).or_default()).insert(k.to_string());
            self.workload_of.insert(k.to_string(), w);
        }
    }

    /// The workloads whose pods are not as many as their replicas: only these are looked at
    /// again.
    pub fn off(&self) -> Vec<String> {
        (self.specs.iter())
            .filter(|(wk, w)| {
                let have = self.by_workload.get(wk.as_str()).map_or(0, BTreeSet::len);
                have != usize::try_from(w.replicas).unwrap_or(0)
            })
            .map(|(wk, _)| wk.clone())
            .collect()
    }

    /// The ReplicaSet/StatefulSet/Job controller of workload `wk` over the stored `pods`: the
    /// pods to make (named as its controller names them, a name taken drawing another) or to
    /// delete (pending first, then the lowest pod-deletion-cost, then the newest).
    pub fn reconcile(&mut self, wk: &str, pods: &BTreeMap<String, StoredPod>) -> Vec<Change> {
        let have = self.pods_of(wk);
        let Some(w) = self.specs.get_mut(wk) else {
            return Vec::new();
        };
        let want = usize::try_from(w.replicas).unwrap_or(0);
        let mut changes = Vec::new();
        if have.len() < want {
            // the keys this pass makes, taken as soon as they are named
            let mut made: HashSet<String> = HashSet::default();
            for _ in have.len()..want {
                let mut pod = w.template.clone();
                let namespace = kerf_scheduling::pods::namespace_of(&pod).to_string();
                let taken = |made: &HashSet<String>, n: &str| {
                    let key = format!("{namespace}/{n}");
                    pods.contains_key(&key) || made.contains(&key)
                };
                // a StatefulSet makes its lowest missing ordinal again, with its claims
                if w.kind == "StatefulSet" {
                    w.next = (0..)
                        .find(|&i| !taken(&made, &w.names.name(i, 0)))
                        .unwrap_or(0);
                }
                let mut attempt = 0;
                let mut name = w.names.name(w.next, attempt);
                // a name still taken draws another, as kube-apiserver's generateName does
                while taken(&made, &name) {
                    attempt += 1;
                    name = w.names.name(w.next, attempt);
                }
                let claims: Vec<_> = w.claims.iter().map(|t| claim_for(t, &name)).collect();
                for (t, c) in w.claims.iter().zip(&claims) {
                    let volume = t.metadata.name.as_deref().unwrap_or_default();
                    let mounted = (pod.spec.iter_mut())
                        .flat_map(|s| s.volumes.iter_mut().flatten())
                        .filter(|v| v.name == volume)
                        .filter_map(|v| v.persistent_volume_claim.as_mut());
                    for source in mounted {
                        source.claim_name = c.metadata.name.clone().unwrap_or_default();
                    }
                }
                made.insert(format!("{namespace}/{name}"));
                pod.metadata.name = Some(name);
                w.names.label(&mut pod);
                pod.metadata.owner_references = owned_by(&w.kind, wk);
                w.next += 1;
                changes.push(Change::Create {
                    pod: Box::new(pod),
                    claims,
                });
            }
        } else if have.len() > want {
            let mut order: Vec<(bool, i32, Duration, String)> = (have.iter())
                .filter_map(|k| pods.get(k).map(|p| (k, p)))
                .map(|(k, p)| {
                    let cost = deletion_cost(&p.pod);
                    (p.node.is_some(), cost, p.pending_since, k.clone())
                })
                .collect();
            order.sort_by(|a, b| {
                (a.0.cmp(&b.0).then(a.1.cmp(&b.1)))
                    .then(b.2.cmp(&a.2))
                    .then(b.3.cmp(&a.3))
            });
            let surplus = have.len() - want;
            changes.extend((order.into_iter().take(surplus)).map(|(_, _, _, k)| Change::Delete(k)));
        }
        changes
    }
}
