//! The workload controllers' memory (kube-controller-manager's ReplicaSet, StatefulSet and
//! Job controllers): each workload's template and replicas, and which pods each owns.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kerf_core::workloads::PodNames;

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
            by_workload: HashMap::new(),
            workload_of: HashMap::new(),
            // the first settle reconciles whatever the scenario's manifests declared
            dirty: true,
        }
    }
}
