//! The simulated API server ([`ApiServer`]) and the objects it stores: Nodes as a kubelet
//! registered and reports them (Ready) with what Kerf wrote to them (taints, labels),
//! NodeClaims, pods and the kinds users apply. kube-scheduler's stand-in and the checkers
//! read them here; Kerf's controllers see them only as a watch delivers them
//! ([`kerf_core::controllers::Controllers::observe`]), as the operator sees
//! kube-apiserver's. A write Kerf meant but never made is missing here, where it shows.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kerf_api::{NodeClaim, Taint, labels};
use kerf_scheduling::resources::Resources;
use serde_json::json;

use kerf_core::observe::{Object, namespaced_key};

use crate::clock::EPOCH_UNIX;
use crate::kube_scheduler::Amounts;

/// The simulated API server: every object the cluster stores, as kube-apiserver would hold
/// it. The workload controllers, the binder and the checkers read and write here; Kerf's
/// controllers see its objects only as their watches deliver them, and the cloud only
/// through the Nodes its kubelets register.
#[derive(Default)]
pub(crate) struct ApiServer {
    /// Node objects.
    pub nodes: Nodes,
    /// NodePools, node classes, NodeOverlays, DaemonSets and PDBs.
    pub objects: Objects,
    /// Pods, by `namespace/name`.
    pub pods: BTreeMap<String, StoredPod>,
    /// NodeClaim objects, all a restarted controller can learn its NodeClaims from.
    pub nodeclaims: BTreeMap<String, StoredNodeClaim>,
    /// Claims, volumes and classes.
    pub storage: super::storage::Stored,
    /// Each node's EBS attachment limit, as its CSINode publishes it.
    pub csi_limits: BTreeMap<String, i64>,
    /// When the controllers first asked to create each NodeClaim not stored yet (an outage
    /// may hold a create back; [`StoredNodeClaim::asked`]).
    pub creates_asked: BTreeMap<String, Duration>,
    /// The Events the controllers sent, as kube-apiserver keeps them.
    pub events: super::events::Events,
}

impl ApiServer {
    /// Stores a NodeClaim the controllers created at `now`; a create of one that exists
    /// changes nothing.
    pub fn create_nodeclaim(&mut self, object: NodeClaim, now: Duration) {
        let name = object.metadata.name.clone().unwrap_or_default();
        let asked = self.creates_asked.remove(&name).unwrap_or(now);
        let stored = StoredNodeClaim {
            object,
            created: now,
            age: Duration::ZERO,
            deleting: None,
            node_registered: false,
            asked,
        };
        self.nodeclaims.entry(name).or_insert(stored);
    }

    /// Writes a NodeClaim's status subresource at `now`, keeping each condition's last
    /// transition time while its status holds, and adds `labels` to it.
    pub fn patch_nodeclaim_status(
        &mut self,
        name: &str,
        mut status: kerf_api::nodeclaim::NodeClaimStatus,
        labels: BTreeMap<String, String>,
        now: Duration,
    ) {
        let Some(stored) = self.nodeclaims.get_mut(name) else {
            return;
        };
        let previous = stored.object.status.take().unwrap_or_default();
        let created = kerf_core::clock::kubernetes_time(stored.born());
        status.conditions = kerf_core::objects::nodeclaim_conditions(
            std::mem::take(&mut status.conditions),
            &previous.conditions,
            now + Duration::from_secs(EPOCH_UNIX),
            stored.object.metadata.generation,
            Some(&created),
        );
        stored.object.status = Some(status);
        (stored.object.metadata.labels.get_or_insert_default()).extend(labels);
    }

    /// Sets (`Some`) or removes (`None`) a NodeClaim's labels or, with `annotations`, its
    /// annotations, as a merge patch does.
    pub fn patch_nodeclaim_metadata(
        &mut self,
        name: &str,
        changes: BTreeMap<String, Option<String>>,
        annotations: bool,
    ) {
        let Some(stored) = self.nodeclaims.get_mut(name) else {
            return;
        };
        let meta = &mut stored.object.metadata;
        let map = if annotations {
            meta.annotations.get_or_insert_default()
        } else {
            meta.labels.get_or_insert_default()
        };
        for (k, v) in changes {
            match v {
                Some(v) => map.insert(k, v),
                None => map.remove(&k),
            };
        }
    }

    /// Every stored object as an operator's first list after a restart delivers it, in the
    /// order its watches settle: the kinds users apply, NodeClaims, volumes, pods (each at
    /// its creation, or its PodScheduled condition, which the object carries: a pod's wait
    /// counts from then), then Nodes (after their pods, so their requests add up).
    pub fn relist(&self) -> Vec<(Object, Option<Duration>)> {
        let mut out: Vec<(Object, Option<Duration>)> = Vec::new();
        out.extend(self.objects.list().into_iter().map(|o| (o, None)));
        let claims = self.nodeclaims.values();
        out.extend(claims.map(|c| (Object::nodeclaim(c.listed()), None)));
        let volumes = self.storage.list().into_iter();
        out.extend(volumes.map(|v| (Object::Volume(v), None)));
        let pods = self.pods.values();
        out.extend(pods.map(|p| (Object::Pod(p.pod.clone()), Some(p.pending_since))));
        let nodes = self.nodes.iter();
        out.extend(nodes.map(|(name, n)| (Object::Node(Box::new(n.object(name))), None)));
        out
    }

    /// Starts a NodeClaim's deletion at `now` (its finalizer holds it): the object as the
    /// watch delivers it then, or none when it is gone or already being deleted.
    pub fn delete_nodeclaim(&mut self, name: &str, now: Duration) -> Option<NodeClaim> {
        let stored = (self.nodeclaims.get_mut(name)).filter(|c| c.deleting.is_none())?;
        stored.deleting = Some(now);
        Some(stored.listed())
    }
}

/// A NodeClaim object as the simulated API server holds it: what the controllers created,
/// with the status and labels they wrote since.
pub(crate) struct StoredNodeClaim {
    /// The object as last written (status and labels included).
    pub object: NodeClaim,
    /// When it was stored, in the run's time.
    pub created: Duration,
    /// How old it was when the run started (a NodeClaim of the cluster a run starts from).
    pub age: Duration,
    /// When its deletion was asked, if it was (its finalizer holds it until then).
    pub deleting: Option<Duration>,
    /// Whether a kubelet ever registered a Node for its instance.
    pub node_registered: bool,
    /// When the controllers first asked for its create (an outage may have held it back).
    pub asked: Duration,
}

impl StoredNodeClaim {
    /// Whether its stored status holds the condition `type_` as True.
    pub fn condition_true(&self, type_: &str) -> bool {
        (self.object.status.as_ref())
            .is_some_and(|s| (s.conditions.iter()).any(|k| k.type_ == type_ && k.status == "True"))
    }

    /// The object as a list returns it: with its creation and deletion timestamps.
    pub fn listed(&self) -> NodeClaim {
        let at = |unix: Duration| {
            let ms = i64::try_from(unix.as_millis()).unwrap_or(i64::MAX);
            k8s_openapi::jiff::Timestamp::from_millisecond(ms)
                .ok()
                .map(Time)
        };
        let mut object = self.object.clone();
        object.metadata.creation_timestamp = at(self.born());
        object.metadata.deletion_timestamp =
            (self.deleting).and_then(|t| at(Duration::from_secs(EPOCH_UNIX) + t));
        object
    }

    /// When it was created, since the Unix epoch: at its creation in the run, less the age
    /// it had at the start.
    pub fn born(&self) -> Duration {
        (Duration::from_secs(EPOCH_UNIX) + self.created).saturating_sub(self.age)
    }

    /// The NodePool its `karpenter.sh/nodepool` label names.
    pub fn pool(&self) -> Option<&str> {
        (self.object.metadata.labels.as_ref())
            .and_then(|l| l.get(labels::NODEPOOL))
            .map(String::as_str)
    }
}

/// One stored Node.
#[derive(Clone, Debug)]
pub(crate) struct StoredNode {
    /// `spec.providerID`.
    pub provider_id: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `status.allocatable`.
    pub allocatable: Resources,
    /// `status.allocatable` as the binder counts it (thousandths by name).
    pub amounts: Amounts,
    /// `status.capacity`.
    pub capacity: Resources,
    /// The `Ready` condition.
    pub ready: bool,
    /// When `Ready` last changed (simulated time).
    pub ready_changed: Duration,
    /// Its other conditions (a node monitoring agent's): type, status, reason and when the
    /// status last changed.
    pub conditions: Vec<(String, String, String, Duration)>,
    /// `metadata.resourceVersion`: bumped by every write that changed the object.
    pub resource_version: u64,
}

impl StoredNode {
    /// A node as its kubelet registers it: not Ready yet.
    pub fn registered(
        provider_id: &str,
        labels: BTreeMap<String, String>,
        taints: Vec<Taint>,
        allocatable: Resources,
        capacity: Resources,
        now: Duration,
    ) -> StoredNode {
        StoredNode {
            provider_id: provider_id.to_string(),
            labels,
            annotations: BTreeMap::new(),
            taints,
            amounts: super::allocatable_amounts(&allocatable),
            allocatable,
            capacity,
            ready: false,
            ready_changed: now,
            conditions: Vec::new(),
            resource_version: 0,
        }
    }

    /// Whether it carries Karpenter's disrupted taint.
    pub fn disrupted(&self) -> bool {
        (self.taints.iter()).any(|t| t.key == labels::DISRUPTED_TAINT_KEY)
    }

    /// The Node object, as a watch delivers it.
    pub fn object(&self, name: &str) -> Node {
        let taints: Vec<_> = (self.taints.iter())
            .map(|t| json!({"key": t.key, "value": t.value, "effect": format!("{:?}", t.effect)}))
            .collect();
        let ready = if self.ready { "True" } else { "False" };
        let mut conditions = vec![json!({
            "type": "Ready",
            "status": ready,
            "lastTransitionTime": crate::clock::rfc3339(self.ready_changed),
        })];
        for (kind, status, reason, since) in &self.conditions {
            conditions.push(json!({
                "type": kind,
                "status": status,
                "reason": reason,
                "lastTransitionTime": crate::clock::rfc3339(*since),
            }));
        }
        serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": self.labels,
                "annotations": self.annotations,
                "resourceVersion": self.resource_version.to_string(),
            },
            "spec": {"providerID": self.provider_id, "taints": taints},
            "status": {
                "capacity": self.capacity.to_resource_list(),
                "allocatable": self.allocatable.to_resource_list(),
                "conditions": conditions,
            },
        }))
        .expect("a well-formed Node")
    }
}

/// The stored Nodes, by name.
#[derive(Debug, Default)]
pub(crate) struct Nodes {
    objects: BTreeMap<String, StoredNode>,
    /// The last resource version given out.
    version: u64,
}

impl Nodes {
    /// Creates a Node.
    pub fn create(&mut self, name: &str, mut node: StoredNode) {
        self.version += 1;
        node.resource_version = self.version;
        self.objects.insert(name.to_string(), node);
    }

    /// One Node.
    pub fn get(&self, name: &str) -> Option<&StoredNode> {
        self.objects.get(name)
    }

    /// Every Node, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &StoredNode)> {
        self.objects.iter()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Writes to a Node: `edit` says whether it changed anything (a write that changes
    /// nothing keeps the resource version, as kube-apiserver's no-op updates do). Whether
    /// the object changed; a Node that does not exist is not written (404).
    pub fn update(&mut self, name: &str, edit: impl FnOnce(&mut StoredNode) -> bool) -> bool {
        let Some(node) = self.objects.get_mut(name) else {
            return false;
        };
        if !edit(node) {
            return false;
        }
        self.version += 1;
        node.resource_version = self.version;
        true
    }

    /// Deletes a Node; whether it existed.
    pub fn delete(&mut self, name: &str) -> bool {
        self.objects.remove(name).is_some()
    }

    /// Adds a taint unless one with its key and effect is there, as the operator's patch does.
    pub fn taint(&mut self, name: &str, taint: &Taint) -> bool {
        self.update(name, |n| {
            let there = (n.taints.iter()).any(|t| t.key == taint.key && t.effect == taint.effect);
            if !there {
                n.taints.push(taint.clone());
            }
            !there
        })
    }

    /// Removes the taints with this key.
    pub fn remove_taint(&mut self, name: &str, key: &str) -> bool {
        self.update(name, |n| {
            let before = n.taints.len();
            n.taints.retain(|t| t.key != key);
            n.taints.len() != before
        })
    }

    /// Adds or overwrites labels and annotations.
    pub fn label(
        &mut self,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> bool {
        self.update(name, |n| {
            let changed = (labels.iter()).any(|(k, v)| n.labels.get(k) != Some(v))
                || (annotations.iter()).any(|(k, v)| n.annotations.get(k) != Some(v));
            n.labels
                .extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            n.annotations
                .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
            changed
        })
    }

    /// Sets or removes labels.
    pub fn relabel(&mut self, name: &str, labels: &BTreeMap<String, Option<String>>) -> bool {
        self.update(name, |n| {
            let mut changed = false;
            for (k, v) in labels {
                changed |= match v {
                    Some(v) => n.labels.insert(k.clone(), v.clone()).as_ref() != Some(v),
                    None => n.labels.remove(k).is_some(),
                };
            }
            changed
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    fn node() -> StoredNode {
        let (cpu, memory) = ("cpu".to_string(), "memory".to_string());
        let room = || Resources::from_quantities([(&cpu, "2"), (&memory, "4Gi")]);
        StoredNode::registered(
            "aws:///us-east-1a/i-1",
            BTreeMap::from([("a".to_string(), "1".to_string())]),
            Vec::new(),
            room(),
            room(),
            Duration::from_secs(5),
        )
    }

    #[test]
    fn only_a_write_that_changes_a_node_bumps_its_resource_version() {
        let mut nodes = Nodes::default();
        nodes.create("n", node());
        let version = |nodes: &Nodes| nodes.get("n").map(|n| n.resource_version);
        let first = version(&nodes);
        let taint = kerf_core::cluster::disrupted_taint();
        assert!(nodes.taint("n", &taint));
        assert!(version(&nodes) > first);
        let tainted = version(&nodes);
        assert!(!nodes.taint("n", &taint), "the same taint twice is one");
        assert_eq!(version(&nodes), tainted);
        assert!(nodes.remove_taint("n", &taint.key));
        assert!(!nodes.remove_taint("n", &taint.key));
        assert!(
            !nodes.taint("gone", &taint),
            "no such node: nothing written"
        );
        let same = BTreeMap::from([("a".to_string(), "1".to_string())]);
        assert!(!nodes.label("n", &same, &BTreeMap::new()));
        assert!(
            nodes.label("n", &BTreeMap::new(), &same),
            "a new annotation is a write"
        );
        assert!(!nodes.label("n", &BTreeMap::new(), &same));
        assert_eq!(nodes.get("n").map(|n| n.annotations.clone()), Some(same));
    }

    /// A user's NodePool as a manifest gives it: weight `weight`, no status, no finalizers.
    fn applied_pool(weight: i32) -> kerf_api::NodePool {
        serde_yaml::from_str(&format!(
            "metadata: {{name: general}}\nspec: {{weight: {weight}, template: {{spec: \
             {{nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}, \
             requirements: []}}}}}}"
        ))
        .expect("NodePool")
    }

    #[test]
    fn an_apply_keeps_status_and_finalizers_and_counts_spec_changes() {
        let apply = |new, old: Option<&kerf_api::NodePool>| applied(new, old);
        let mut held = apply(applied_pool(10), None);
        assert_eq!(held.metadata.generation, Some(1), "created at generation 1");
        held.status = Some(Default::default());
        held.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        let same = apply(applied_pool(10), Some(&held));
        assert_eq!(same.metadata.generation, Some(1), "the same spec again");
        assert_eq!(same.status, held.status, "the status stays");
        assert_eq!(same.metadata.finalizers, held.metadata.finalizers);
        let changed = apply(applied_pool(20), Some(&same));
        assert_eq!(changed.metadata.generation, Some(2), "a spec change");
        assert_eq!(changed.status, held.status);
    }

    #[test]
    fn the_object_reads_back_as_the_operator_reads_a_node() {
        let mut stored = node();
        stored.taints.push(kerf_core::cluster::disrupted_taint());
        stored.ready = true;
        let object: Node = stored.object("n");
        let record = kerf_core::objects::node_record(&object, Duration::ZERO);
        assert!(record.ready);
        assert_eq!(record.provider_id, stored.provider_id);
        assert_eq!(record.taints, stored.taints);
        assert_eq!(record.allocatable, stored.allocatable);
        assert_eq!(*record.labels, stored.labels);
        assert_eq!(
            record.ready_changed,
            Duration::from_secs(crate::clock::EPOCH_UNIX + 5)
        );
    }
}

/// The simulated API server's objects of the kinds users apply (NodePools, node classes,
/// NodeOverlays, DaemonSets, PodDisruptionBudgets), with what the simulated controllers write
/// to them (a node class's reservations, a budget's status). Kerf's controllers see them only
/// through [`kerf_core::controllers::Controllers::observe`]; a restarted Kerf lists them here.
#[derive(Clone, Debug, Default)]
pub(crate) struct Objects {
    pub node_pools: BTreeMap<String, kerf_api::NodePool>,
    pub node_classes: BTreeMap<String, kerf_api::EC2NodeClass>,
    pub node_overlays: BTreeMap<String, kerf_api::NodeOverlay>,
    /// DaemonSets by `namespace/name`, as their pod templates.
    pub daemonsets: BTreeMap<String, k8s_openapi::api::core::v1::Pod>,
    /// PodDisruptionBudgets by `namespace/name`.
    pub pdbs: BTreeMap<String, k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    /// CapacityBuffers by `namespace/name`.
    pub buffers: BTreeMap<String, kerf_api::CapacityBuffer>,
    /// PodTemplates by `namespace/name`, as buffers read them.
    pub pod_templates: BTreeMap<String, kerf_core::buffers::Template>,
    /// Workloads' pod shapes and replicas by `Kind/namespace/name`, as buffers read them.
    pub workload_shapes: BTreeMap<String, kerf_core::buffers::Template>,
    /// The last resource version given out to these objects.
    version: u64,
}

/// Karpenter's kinds a user applies and the controllers write the status and finalizers of.
pub(crate) trait Applied {
    /// Its metadata.
    fn metadata(&self) -> &ObjectMeta;
    /// Its metadata, to write.
    fn metadata_mut(&mut self) -> &mut ObjectMeta;
    /// Whether its spec is `other`'s.
    fn same_spec(&self, other: &Self) -> bool;
    /// Takes the status `held` has.
    fn keep_status(&mut self, held: &Self);
}

macro_rules! applied_kinds {
    ($($kind:ty),*) => {$(
        impl Applied for $kind {
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
            fn same_spec(&self, other: &Self) -> bool {
                self.spec == other.spec
            }
            fn keep_status(&mut self, held: &Self) {
                self.status = held.status.clone();
            }
        }
    )*};
}

applied_kinds!(
    kerf_api::NodePool,
    kerf_api::EC2NodeClass,
    kerf_api::NodeOverlay
);

/// An object a user applies as kube-apiserver keeps it over the one it holds (`old`): the
/// status and the finalizers the controllers wrote stay (the manifest carries neither),
/// and the generation starts at 1 and goes up only when the spec changes.
pub(crate) fn applied<T: Applied>(mut new: T, old: Option<&T>) -> T {
    let Some(old) = old else {
        new.metadata_mut().generation = Some(1);
        return new;
    };
    let changed = !new.same_spec(old);
    new.keep_status(old);
    let held = old.metadata();
    let meta = new.metadata_mut();
    let mut finalizers = held.finalizers.clone().unwrap_or_default();
    for f in meta.finalizers.take().unwrap_or_default() {
        if !finalizers.contains(&f) {
            finalizers.push(f);
        }
    }
    meta.finalizers = Some(finalizers).filter(|f| !f.is_empty());
    meta.generation = Some(held.generation.unwrap_or(1) + i64::from(changed));
    new
}

impl Objects {
    /// The next resource version, for an object written now.
    fn next_version(&mut self) -> Option<String> {
        self.version += 1;
        Some(self.version.to_string())
    }

    /// Stores an object of these kinds (others are not kept here), each write of Karpenter's
    /// kinds with the next resource version, and gives it back as the watch event Kerf sees.
    pub fn store(&mut self, object: Object) -> Object {
        let name = |m: &ObjectMeta| m.name.clone().unwrap_or_default();
        match &object {
            Object::NodePool(r) => {
                if let Ok(np) = &r.object {
                    let mut np = np.clone();
                    np.metadata.resource_version = self.next_version();
                    self.node_pools.insert(name(&np.metadata), np.clone());
                    return Object::node_pool(np);
                }
            }
            Object::NodeClass(r) => {
                if let Ok(c) = &r.object {
                    let mut c = c.clone();
                    c.metadata.resource_version = self.next_version();
                    self.node_classes.insert(name(&c.metadata), c.clone());
                    return Object::node_class(c);
                }
            }
            Object::NodeOverlay(r) => {
                if let Ok(o) = &r.object {
                    let mut o = o.clone();
                    o.metadata.resource_version = self.next_version();
                    self.node_overlays.insert(name(&o.metadata), o.clone());
                    return Object::node_overlay(o);
                }
            }
            Object::DaemonSet { key, template } => {
                self.daemonsets.insert(key.clone(), (**template).clone());
            }
            Object::Pdb(pdb) => {
                self.pdbs
                    .insert(namespaced_key(&pdb.metadata), (**pdb).clone());
            }
            Object::CapacityBuffer(r) => {
                if let Ok(b) = &r.object {
                    self.buffers.insert(namespaced_key(&b.metadata), b.clone());
                }
            }
            Object::PodTemplate { key, template } => {
                self.pod_templates.insert(key.clone(), (**template).clone());
            }
            Object::Workload { key, template } => {
                self.workload_shapes
                    .insert(key.clone(), (**template).clone());
            }
            Object::Pod(_) | Object::Node(_) | Object::NodeClaim(_) | Object::Volume(_) => {}
        }
        object
    }

    /// Deletes an object of these kinds by kind and key (`namespace/name`, or `/name`).
    pub fn delete(&mut self, kind: &str, key: &str) {
        let name = key.split_once('/').map_or(key, |(_, n)| n);
        match kind {
            "NodePool" => drop(self.node_pools.remove(name)),
            "EC2NodeClass" => drop(self.node_classes.remove(name)),
            "NodeOverlay" => drop(self.node_overlays.remove(name)),
            "DaemonSet" => drop(self.daemonsets.remove(key)),
            "PodDisruptionBudget" => drop(self.pdbs.remove(key)),
            "CapacityBuffer" => drop(self.buffers.remove(key)),
            "PodTemplate" => drop(self.pod_templates.remove(key)),
            _ => {}
        }
    }

    /// Everything stored, as a relist delivers it: classes before the NodePools that name
    /// them.
    pub fn list(&self) -> Vec<Object> {
        let classes = (self.node_classes.values()).map(|c| Object::node_class(c.clone()));
        let pools = (self.node_pools.values()).map(|np| Object::node_pool(np.clone()));
        let overlays = (self.node_overlays.values()).map(|o| Object::node_overlay(o.clone()));
        let daemonsets = self.daemonsets.iter().map(|(key, t)| Object::DaemonSet {
            key: key.clone(),
            template: Box::new(t.clone()),
        });
        let pdbs = (self.pdbs.values()).map(|p| Object::Pdb(Box::new(p.clone())));
        let templates = self
            .pod_templates
            .iter()
            .map(|(key, t)| Object::PodTemplate {
                key: key.clone(),
                template: Box::new(t.clone()),
            });
        let shapes = self
            .workload_shapes
            .iter()
            .map(|(key, t)| Object::Workload {
                key: key.clone(),
                template: Box::new(t.clone()),
            });
        let buffers = (self.buffers.values()).map(|b| Object::capacity_buffer(b.clone()));
        (classes
            .chain(pools)
            .chain(overlays)
            .chain(daemonsets)
            .chain(pdbs)
            .chain(templates)
            .chain(shapes)
            .chain(buffers))
        .collect()
    }
}

/// One stored Pod: the object as its controller made it and kube-scheduler bound it (Kerf's
/// reading of its volumes is Kerf's own), with what the simulated control plane tracks of it.
#[derive(Clone, Debug)]
pub(crate) struct StoredPod {
    /// The object.
    pub pod: Box<k8s_openapi::api::core::v1::Pod>,
    /// Who made it.
    pub owner: kerf_core::cluster::PodOwner,
    /// `spec.nodeName`.
    pub node: Option<String>,
    /// When it was created, or last left without a node.
    pub pending_since: Duration,
    /// What kube-scheduler's stand-in reads of it, worked out once.
    pub facts: crate::kube_scheduler::Facts,
}

impl StoredPod {
    /// A pod as its controller (or the scenario) creates it.
    pub fn created(pod: k8s_openapi::api::core::v1::Pod, now: Duration) -> StoredPod {
        let node = (pod.spec.as_ref())
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        StoredPod {
            owner: kerf_core::cluster::owner_of(&pod),
            node,
            pending_since: now,
            facts: crate::kube_scheduler::Facts::of(&pod),
            pod: Box::new(pod),
        }
    }

    /// The object as declared (the binder and the checkers read it).
    pub fn declared(&self) -> &k8s_openapi::api::core::v1::Pod {
        &self.pod
    }

    /// kube-scheduler's binding and its `PodScheduled=True` condition, and the kubelet
    /// taking the pod at once: its `status.startTime` is `now`.
    pub fn bind(&mut self, node: &str, now: Duration) {
        self.pod.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
        kerf_core::cluster::set_pod_scheduled(&mut self.pod, "True", None);
        let unix = Duration::from_secs(crate::clock::EPOCH_UNIX) + now;
        let ms = i64::try_from(unix.as_millis()).unwrap_or(i64::MAX);
        let started = k8s_openapi::jiff::Timestamp::from_millisecond(ms).ok();
        self.pod
            .status
            .get_or_insert_with(Default::default)
            .start_time = started.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time);
        self.node = Some(node.to_string());
    }

    /// When its kubelet took it (`status.startTime`), in the simulation's time.
    pub fn started(&self) -> Option<Duration> {
        let at = self
            .pod
            .status
            .as_ref()?
            .start_time
            .as_ref()?
            .0
            .as_millisecond();
        let unix = Duration::from_millis(u64::try_from(at).ok()?);
        Some(unix.saturating_sub(Duration::from_secs(crate::clock::EPOCH_UNIX)))
    }

    /// Its node is gone and it is not deleted with it (a pod no controller owns): it waits for
    /// a node again, as Kerf's reading of a node's deletion has it.
    pub fn unbind(&mut self, now: Duration) {
        if let Some(s) = self.pod.spec.as_mut() {
            s.node_name = None;
        }
        if let Some(s) = self.pod.status.as_mut() {
            s.conditions = None;
            s.start_time = None;
        }
        self.node = None;
        self.pending_since = now;
    }
}
