//! The one way in: every shell hands what it reads (the operator's watches, the simulator's
//! API server, the CLI's manifests) to [`Controllers::observe`], which turns objects into the
//! controllers' records and keeps their change tracking. No shell writes the cluster state
//! any other way.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kerf_api::cluster_read::{Gaps, Read};
use kerf_api::manifest::RawDocument;
use kerf_api::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use kerf_scheduling::InstanceTypeOption;
use kerf_scheduling::pods::pod_key;

use crate::cluster::{CloudInstance, Launched};
use crate::controllers::interruption::Notice;
use crate::controllers::lifecycle::InsufficientOffering;
use crate::controllers::reboot::RebootRefusal;
use crate::controllers::{Action, Controllers};
use crate::workloads::{ClusterObject, VolumeObject};

/// A Kubernetes object as a shell read it. Karpenter's kinds come as [`Read`]s: as far as
/// Kerf understands them, with what it could not read (a newer Karpenter's fields) as gaps.
#[derive(Clone, Debug)]
pub enum Object {
    /// A Pod.
    Pod(Box<Pod>),
    /// A Node.
    Node(Box<Node>),
    /// A NodeClaim.
    NodeClaim(Arc<Read<NodeClaim>>),
    /// A NodePool.
    NodePool(Arc<Read<NodePool>>),
    /// An EC2NodeClass (or another provider's node class, as the record Kerf keeps for it).
    NodeClass(Arc<Read<EC2NodeClass>>),
    /// A NodeOverlay.
    NodeOverlay(Arc<Read<NodeOverlay>>),
    /// A DaemonSet, as the pod template it runs on every node it fits.
    DaemonSet {
        /// `namespace/name`.
        key: String,
        /// Its pods' template (see [`Object::daemonset`]).
        template: Box<Pod>,
    },
    /// A PodDisruptionBudget.
    Pdb(Box<PodDisruptionBudget>),
    /// A PersistentVolumeClaim, PersistentVolume, StorageClass or CSINode.
    Volume(VolumeObject),
    /// A CapacityBuffer.
    CapacityBuffer(Arc<Read<kerf_api::CapacityBuffer>>),
    /// A PodTemplate (a CapacityBuffer's chunk shape), by `namespace/name`.
    PodTemplate {
        /// `namespace/name`.
        key: String,
        /// Its template and generation.
        template: Box<crate::buffers::Template>,
    },
    /// A Deployment, StatefulSet or ReplicaSet a CapacityBuffer may take its shape from.
    Workload {
        /// `Kind/namespace/name`.
        key: String,
        /// Its pods' template, replicas and generation.
        template: Box<crate::buffers::Template>,
    },
}

/// What a shell tells the controllers it saw.
#[derive(Clone, Debug)]
pub enum Observation {
    /// An object was created or changed (a watch event, a relist, a manifest).
    Applied(Object),
    /// An object was deleted, or went while nobody watched (a relist no longer has it).
    /// Known by its kind (`Pod`, `NodePool`, …) and `namespace/name` key (namespace empty
    /// when cluster-scoped).
    Deleted {
        /// The kind.
        kind: String,
        /// The key.
        key: String,
    },
    /// The cloud's interruption queue says an instance is going.
    Notice(Notice),
    /// The zones (ids) the cluster is shifted away from changed to these (ARC's zonal shift:
    /// the cloud launches nothing there meanwhile).
    ZonalShifts(std::collections::BTreeSet<String>),
    /// The cloud's answer to [`Action::ListInstanceTypes`]: what a node class can launch,
    /// every offering available (the controllers track capacity errors themselves).
    InstanceTypes {
        /// The node class.
        node_class: String,
        /// The class as it was asked about ([`Action::ListInstanceTypes`]'s `spec`): an
        /// answer for a class that changed since is stale, and the ask the change raised
        /// brings the fresh one.
        spec: Option<Box<kerf_api::EC2NodeClass>>,
        /// Its instance types.
        types: Arc<[InstanceTypeOption]>,
    },
    /// The cloud's resolution of a node class asked for with
    /// [`Action::ResolveNodeClass`], or why it failed.
    NodeClassResolved {
        /// The node class.
        node_class: String,
        /// Its status as resolved (conditions without transition times), or the error.
        status: Result<kerf_api::ec2nodeclass::EC2NodeClassStatus, String>,
    },
    /// The cloud's prices or its region's instance types changed: every node class's types
    /// are asked for again.
    OfferingsChanged,
    /// The cloud launched a NodeClaim's instance ([`Action::Launch`]).
    Launched {
        /// The NodeClaim.
        nodeclaim: String,
        /// Its instance.
        launched: Box<Launched>,
    },
    /// The cloud had no capacity for any of these offerings of a NodeClaim: they are
    /// remembered as unavailable and the NodeClaim goes.
    LaunchFailed {
        /// The NodeClaim.
        nodeclaim: String,
        /// The offerings refused.
        insufficient: Vec<InsufficientOffering>,
    },
    /// A launch failed for a reason that may pass (an API unreachable or throttled): it is
    /// tried again after a backoff.
    LaunchRetry {
        /// The NodeClaim.
        nodeclaim: String,
        /// What the cloud said.
        error: String,
    },
    /// A launch failed for a reason other than capacity that will not pass by itself (a
    /// class not resolved, no subnet or image): the NodeClaim goes.
    LaunchError {
        /// The NodeClaim.
        nodeclaim: String,
        /// What the cloud said.
        error: String,
    },
    /// The cloud refused a launch for want of a permission: the NodeClaim goes and its
    /// class is resolved again at once.
    LaunchRefused {
        /// The NodeClaim.
        nodeclaim: String,
        /// What the cloud said.
        error: String,
    },
    /// The API server took an eviction asked of this pod (`namespace/name`).
    Evicted(String),
    /// The cloud no longer has this instance (by provider id).
    InstanceGone(String),
    /// The cloud's instances of this cluster ([`Action::ListInstances`]), for garbage
    /// collection.
    Instances(Vec<CloudInstance>),
    /// An eviction asked for did not happen: the API server's answer, when one came (429
    /// from a PodDisruptionBudget, 500, …).
    EvictionRefused {
        /// `namespace/name`.
        pod: String,
        /// The status code.
        code: Option<u16>,
    },
    /// A disruption command's mark on this node ([`Action::Taint`] with `by`) was refused,
    /// or not written in time: the command gives the node up.
    MarkRefused {
        /// The node.
        node: String,
        /// The mark's deadline, which tells its command.
        by: Duration,
    },
    /// The cloud's answer to [`Action::Reboot`].
    RebootAnswered {
        /// The NodeClaim.
        nodeclaim: String,
        /// Taken, or why not.
        result: Result<(), RebootRefusal>,
    },
}

impl Object {
    /// A NodePool read whole (from a manifest or a simulated API server).
    pub fn node_pool(np: NodePool) -> Object {
        Object::NodePool(Arc::new(whole(np)))
    }

    /// A node class read whole.
    pub fn node_class(class: EC2NodeClass) -> Object {
        Object::NodeClass(Arc::new(whole(class)))
    }

    /// A NodeOverlay read whole.
    pub fn node_overlay(overlay: NodeOverlay) -> Object {
        Object::NodeOverlay(Arc::new(whole(overlay)))
    }

    /// A CapacityBuffer read whole.
    pub fn capacity_buffer(buffer: kerf_api::CapacityBuffer) -> Object {
        Object::CapacityBuffer(Arc::new(whole(buffer)))
    }

    /// A NodeClaim read whole.
    pub fn nodeclaim(claim: NodeClaim) -> Object {
        Object::NodeClaim(Arc::new(whole(claim)))
    }

    /// A DaemonSet as the API server sends it, or `None` when its template cannot be read
    /// (its pods then are not counted as overhead, as they would not be scheduled either).
    pub fn daemonset(ds: &DaemonSet) -> Option<Object> {
        let mut value = serde_json::to_value(ds).ok()?;
        value["apiVersion"] = "apps/v1".into();
        value["kind"] = "DaemonSet".into();
        match crate::workloads::read(&RawDocument { line: 0, value }) {
            Ok(Some(ClusterObject::DaemonSet(template))) => Some(Object::DaemonSet {
                key: namespaced_key(&ds.metadata),
                template,
            }),
            _ => None,
        }
    }
}

fn whole<T>(object: T) -> Read<T> {
    Read {
        object: Ok(object),
        gaps: Gaps::default(),
    }
}

/// `namespace/name` of a namespaced object (`default` when the namespace is unset).
pub fn namespaced_key(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or("")
    )
}

fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("")
}

/// Whether a pod has run to its end (`Succeeded` or `Failed`): it holds no room and waits
/// for none.
pub fn finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

impl Controllers {
    /// Takes in what a shell saw at `now` (never earlier than the `now` of its last call). The one way objects reach the controllers: the
    /// records, their change tracking and the questions to the cloud they raise (a node
    /// class's instance types) all follow from here.
    pub fn observe(&mut self, observation: Observation, now: Duration) {
        match observation {
            Observation::Applied(object) => self.applied(object, now),
            Observation::Deleted { kind, key } => self.deleted(&kind, &key, now),
            Observation::Notice(notice) => self.interruption.notice(&mut self.desk, &notice, now),
            Observation::ZonalShifts(zones) => self.zonal_shifts_observed(zones, now),
            Observation::Launched {
                nodeclaim,
                launched,
            } => self
                .lifecycle
                .launched(&mut self.desk, &nodeclaim, *launched),
            Observation::LaunchFailed {
                nodeclaim,
                insufficient,
            } => self.launch_failed(&nodeclaim, &insufficient, now),
            Observation::LaunchRetry { nodeclaim, error } => {
                self.lifecycle
                    .launch_retry(&mut self.desk, &nodeclaim, &error, now);
            }
            Observation::LaunchError { nodeclaim, error } => {
                self.launch_error(&nodeclaim, &error, now);
            }
            Observation::LaunchRefused { nodeclaim, error } => {
                self.launch_refused(&nodeclaim, &error, now);
            }
            Observation::Evicted(pod) => self.termination.evicted(&mut self.desk, &pod, now),
            Observation::InstanceGone(provider_id) => self.instance_gone(&provider_id, now),
            Observation::Instances(instances) => self.garbage_collect(&instances, now),
            Observation::EvictionRefused { pod, code } => {
                self.termination
                    .eviction_refused(&mut self.desk, &pod, code, now)
            }
            Observation::MarkRefused { node, by } => self.mark_refused(&node, by, now),
            Observation::RebootAnswered { nodeclaim, result } => {
                self.reboot
                    .reboot_answered(&mut self.desk, &nodeclaim, result, now);
            }
            Observation::InstanceTypes {
                node_class,
                spec,
                types,
            } => {
                let now_held = self.desk.cluster.node_classes.get(&node_class);
                let same = |a: &kerf_api::EC2NodeClass, b: &kerf_api::EC2NodeClass| {
                    a.spec == b.spec && a.status == b.status
                };
                let current = match (spec.as_deref(), now_held) {
                    (Some(asked), Some(held)) => same(asked, held),
                    (asked, held) => asked.is_none() && held.is_none(),
                };
                if !current {
                    // the class changed while the cloud worked this out: the types of its
                    // old subnets or images would stay until the next change
                    return;
                }
                self.desk.types_asked.remove(&node_class);
                let asked = |a: &Action| matches!(a, Action::ListInstanceTypes { node_class: c, .. } if *c == node_class);
                self.desk.actions.retain(|a| !asked(a));
                self.desk.cluster.set_instance_types(&node_class, types);
                // what reads a class's types follows up as on a change of the class: drift,
                // the NodeOverlays' statuses, provisioning
                let changes = &mut self.desk.cluster.changes;
                changes.node_classes.insert(node_class);
                changes.provisionable = true;
            }
            Observation::NodeClassResolved { node_class, status } => {
                self.node_classes
                    .node_class_resolved(&mut self.desk, &node_class, status, now);
            }
            Observation::OfferingsChanged => {
                let classes: Vec<String> =
                    self.desk.cluster.instance_types.keys().cloned().collect();
                for class in classes {
                    self.ask_instance_types(&class);
                }
            }
        }
    }

    /// Asks the cloud for a node class's instance types, with the class as it is now.
    fn ask_instance_types(&mut self, class: &str) {
        self.desk.types_asked.insert(class.to_string());
        self.desk.actions.push(Action::ListInstanceTypes {
            node_class: class.to_string(),
            spec: self
                .desk
                .cluster
                .node_classes
                .get(class)
                .cloned()
                .map(Box::new),
        });
    }

    /// Asks for the instance types of a NodePool's node class unless they are known or
    /// already asked for.
    fn want_instance_types(&mut self, class: &str) {
        if !self.desk.cluster.instance_types.contains_key(class)
            && !self.desk.types_asked.contains(class)
        {
            self.ask_instance_types(class);
        }
    }

    fn applied(&mut self, object: Object, now: Duration) {
        let cluster = &mut self.desk.cluster;
        match object {
            Object::Pod(pod) if finished(&pod) => cluster.delete_pod(&pod_key(&pod), now),
            Object::Pod(pod) => cluster.apply_pod(*pod, now),
            Object::Node(node) => self.node_observed(&node, now),
            Object::NodeClaim(read) => {
                // one Kerf cannot type is reported by the shell and left as it was last read
                let Ok(claim) = &read.object else {
                    return;
                };
                let epoch = self.desk.epoch();
                let at = |t: &Time| {
                    let ms = u64::try_from(t.0.as_millisecond()).unwrap_or(0);
                    Duration::from_millis(ms).saturating_sub(epoch)
                };
                let meta = &claim.metadata;
                let created = meta.creation_timestamp.as_ref().map_or(now, at);
                let deleting = meta.deletion_timestamp.as_ref().map(at);
                if deleting.is_some()
                    && self
                        .termination
                        .released_and_gone(&self.desk, name_of(meta))
                {
                    return;
                }
                self.nodeclaim_observed(claim, created, deleting, now);
            }
            Object::NodePool(read) => {
                let Ok(np) = &read.object else {
                    return;
                };
                let name = name_of(&np.metadata);
                // status writes come back as events too: only a spec change is a change
                let gaps = Some(&read.gaps).filter(|g| !g.is_empty());
                if (cluster.node_pools.get(name)).is_none_or(|old| old.spec != np.spec)
                    || cluster.pool_gaps.get(name) != gaps
                {
                    cluster.apply_node_pool_read(np.clone(), &read.gaps);
                }
                let class = np.spec.template.spec.node_class_ref.name.clone();
                self.want_instance_types(&class);
            }
            Object::NodeClass(read) => {
                let Ok(class) = &read.object else {
                    return;
                };
                let name = name_of(&class.metadata).to_string();
                let gaps = Some(&read.gaps).filter(|g| !g.is_empty());
                // the status matters too: its subnets' zones are where types are offered
                let changed = (cluster.node_classes.get(&name))
                    .is_none_or(|old| old.spec != class.spec || old.status != class.status);
                let reserved = |c: &kerf_api::EC2NodeClass| -> Vec<String> {
                    (c.status.iter().flat_map(|s| &s.capacity_reservations))
                        .map(|r| r.id.clone())
                        .collect()
                };
                let old = cluster.node_classes.get(&name).map(reserved);
                let reservations_moved = old.is_some_and(|old| old != reserved(class));
                if changed || cluster.class_gaps.get(&name) != gaps {
                    cluster.apply_node_class_read(class.clone(), &read.gaps);
                    self.ask_instance_types(&name);
                } else {
                    // its generation, finalizers, deletion: nothing that changes what it
                    // offers, but the status controller's business
                    cluster.set_node_class_metadata(&name, &class.metadata);
                }
                if reservations_moved {
                    self.lifecycle.class_reservations_changed(&name, now);
                }
                self.node_classes
                    .node_class_observed(&mut self.desk, &name, now);
            }
            Object::NodeOverlay(read) => {
                let Ok(overlay) = &read.object else {
                    return;
                };
                let name = name_of(&overlay.metadata);
                // status writes come back as events too: only a spec change is a change
                if (cluster.node_overlays.get(name)).is_none_or(|old| old.spec != overlay.spec) {
                    cluster.apply_node_overlay(overlay.clone());
                }
            }
            Object::CapacityBuffer(read) => {
                let Ok(buffer) = &read.object else {
                    return;
                };
                let key = namespaced_key(&buffer.metadata);
                let buffers = &mut cluster.buffers.buffers;
                // status writes come back as events too: only a spec change is a change
                let old = buffers.get(&key);
                let changed = old.is_none_or(|old| {
                    old.spec != buffer.spec
                        || old.metadata.generation != buffer.metadata.generation
                        || old.metadata.uid != buffer.metadata.uid
                });
                buffers.insert(key, buffer.clone());
                cluster.changes.buffers |= changed;
            }
            Object::PodTemplate { key, template } => {
                let templates = &mut cluster.buffers.templates;
                if templates.get(&key) != Some(&template) {
                    templates.insert(key, *template);
                    cluster.changes.buffers = true;
                }
            }
            Object::Workload { key, template } => {
                let workloads = &mut cluster.buffers.workloads;
                if workloads.get(&key) != Some(&template) {
                    workloads.insert(key, *template);
                    cluster.changes.buffers = true;
                }
            }
            Object::DaemonSet { key, template } => cluster.apply_daemonset(key, *template),
            Object::Pdb(pdb) => cluster.apply_pdb(namespaced_key(&pdb.metadata), *pdb),
            // an attachment changes no pod's placement
            Object::Volume(v @ VolumeObject::Attachment(_)) => v.apply(&mut cluster.volumes),
            Object::Volume(v) => cluster.volumes_changed(|volumes| v.apply(volumes), now),
        }
    }

    fn deleted(&mut self, kind: &str, key: &str, now: Duration) {
        let cluster = &mut self.desk.cluster;
        let (namespace, name) = match key.split_once('/') {
            Some((ns, n)) => (Some(ns).filter(|ns| !ns.is_empty()), n),
            None => (None, key),
        };
        match kind {
            "Pod" => cluster.delete_pod(key, now),
            "Node" => cluster.delete_node(name, now),
            "NodeClaim" => {
                cluster.delete_nodeclaim(name);
                self.termination.forget_drained(&mut self.desk, name, now);
            }
            "NodePool" => cluster.delete_node_pool(name),
            "EC2NodeClass" | "KWOKNodeClass" => {
                cluster.delete_node_class(name);
                self.lifecycle.forget_class_reservations(name);
            }
            "NodeOverlay" => cluster.delete_node_overlay(name),
            "DaemonSet" => cluster.delete_daemonset(key),
            "PodDisruptionBudget" => cluster.delete_pdb(key),
            "PersistentVolumeClaim" => {
                cluster.volumes_changed(|v| v.delete_claim(namespace, name), now);
            }
            "PersistentVolume" => cluster.volumes_changed(|v| v.delete_volume(name), now),
            "StorageClass" => cluster.volumes_changed(|v| v.delete_class(name), now),
            "CSINode" => cluster.volumes_changed(|v| v.delete_csi_node(name), now),
            "VolumeAttachment" => cluster.volumes.delete_attachment(name),
            "CapacityBuffer" => {
                cluster.changes.buffers |= cluster.buffers.buffers.remove(key).is_some();
            }
            "PodTemplate" => {
                cluster.changes.buffers |= cluster.buffers.templates.remove(key).is_some();
            }
            "Deployment" | "StatefulSet" | "ReplicaSet" => {
                let workloads = &mut cluster.buffers.workloads;
                cluster.changes.buffers |= workloads.remove(&format!("{kind}/{key}")).is_some();
            }
            _ => {}
        }
    }
}
