//! Watches of every kind the controllers read, merged into one queue of observations.
//! Each watch relists after an error (the watcher's own backoff); the main loop applies the
//! observations to the core's cluster state, which is the store these watches fill.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use kerf_core::buffers::Template;
use kerf_core::observe::namespaced_key;
use kerf_core::workloads::VolumeObject;
use std::time::Duration;

use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use crate::http::Readiness;
use crate::kwok_types::KwokNodeClass;
use crate::lenient::Lenient;
use crate::slim::{SlimNode, SlimPod};

/// An object as a watch saw it.
#[derive(Debug)]
pub enum Object {
    /// A Pod.
    Pod(Box<Pod>),
    /// A Node.
    Node(Box<Node>),
    /// A NodeClaim, read as far as Kerf understands it.
    NodeClaim(Box<Lenient<NodeClaim>>),
    /// A NodePool, read as far as Kerf understands it.
    NodePool(Box<Lenient<NodePool>>),
    /// An EC2NodeClass, read as far as Kerf understands it.
    NodeClass(Box<Lenient<EC2NodeClass>>),
    /// A DaemonSet.
    DaemonSet(Box<DaemonSet>),
    /// A PodDisruptionBudget.
    Pdb(Box<PodDisruptionBudget>),
    /// A node class of Karpenter's kwok provider.
    KwokNodeClass(Box<KwokNodeClass>),
    /// A NodeOverlay, read as far as Kerf understands it.
    NodeOverlay(Box<Lenient<NodeOverlay>>),
    /// A PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode or
    /// VolumeAttachment.
    Volume(VolumeObject),
    /// A CapacityBuffer, read as far as Kerf understands it.
    CapacityBuffer(Box<Lenient<CapacityBuffer>>),
    /// A PodTemplate or a Deployment, StatefulSet or ReplicaSet, as the pod shape a
    /// CapacityBuffer may take.
    Shape {
        /// `PodTemplate`, `Deployment`, `StatefulSet` or `ReplicaSet`.
        kind: &'static str,
        /// `namespace/name`.
        key: String,
        /// Its template, replicas and generation.
        template: Box<Template>,
    },
}

/// What a watch reports.
#[derive(Debug)]
pub enum Observed {
    /// Created or changed.
    Applied(Object),
    /// Deleted.
    Deleted(Object),
    /// Gone while the watch was down: a relist no longer has the object with this
    /// `namespace/name` key (namespace empty for cluster-scoped kinds).
    Gone(&'static str, String),
    /// The watch of this kind has listed everything once.
    Synced(&'static str),
    /// The watch failed (it retries); the message is for the log.
    Failed(&'static str, String),
    /// The cloud's interruption queue says an instance is going.
    Notice(kerf_core::controllers::interruption::Notice),
    /// The zones (ids) the cluster is shifted away from changed to these.
    ZonalShifts(std::collections::BTreeSet<String>),
    /// The cloud's prices or its region's instance types were read again: every node
    /// class's instance types are offered again.
    OfferingsChanged,
}

impl Object {
    /// What of the object the controllers read, hashed, for the kinds whose updates are
    /// mostly about something else: an update that leaves it unchanged (a kwok heartbeat, a
    /// container status) is not passed on.
    fn fingerprint(&self) -> Option<u64> {
        match self {
            Object::Pod(p) => Some(pod_fingerprint(p)),
            Object::Node(n) => Some(node_fingerprint(n)),
            _ => None,
        }
    }
}

fn hash_of(value: &impl serde::Serialize) -> u64 {
    let mut h = DefaultHasher::new();
    serde_json::to_string(value)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

fn pod_fingerprint(pod: &Pod) -> u64 {
    let scheduled = pod.status.as_ref().and_then(|s| {
        s.conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled")
            .map(|c| (c.status.clone(), c.reason.clone()))
    });
    hash_of(&(
        pod.spec.as_ref().and_then(|s| s.node_name.as_ref()),
        pod.status.as_ref().and_then(|s| s.phase.as_ref()),
        scheduled,
        &pod.metadata.labels,
        &pod.metadata.annotations,
        pod.metadata.deletion_timestamp.is_some(),
        // what it requests changes with an in-place resize
        kerf_scheduling::resources::pod_requests(pod).to_resource_list(),
    ))
}

fn node_fingerprint(node: &Node) -> u64 {
    let status = node.status.as_ref();
    // repair reads every condition's state and transition, not its heartbeat
    let conditions: Vec<_> = (status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten())
    .map(|c| (&c.type_, &c.status, &c.reason, &c.last_transition_time))
    .collect();
    hash_of(&(
        &node.metadata.labels,
        &node.metadata.annotations,
        node.spec
            .as_ref()
            .map(|s| (&s.taints, &s.provider_id, s.unschedulable)),
        status.map(|s| (&s.allocatable, &s.capacity)),
        conditions,
        // a reboot for repair is proven by a new boot id
        status
            .and_then(|s| s.node_info.as_ref())
            .map(|i| &i.boot_id),
        // a deletion held by the termination finalizer, and the finalizer itself
        node.metadata.deletion_timestamp.is_some(),
        &node.metadata.finalizers,
    ))
}

fn key_of(meta: &kube::api::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

/// How a failed watch is retried: 0.5 s doubling to at most 5 s (kube's default grows to 30
/// s), so that after an API-server outage the cluster is seen again within seconds of its
/// return; the backoff starts over after a minute without failure.
fn watch_backoff() -> impl kube::runtime::utils::Backoff {
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .without_max_times()
        .with_jitter();
    kube::runtime::utils::ResetTimerBackoff::new(
        watcher::ExponentialBackoff::from(builder),
        Duration::from_secs(60),
    )
}

fn spawn<K>(
    client: &Client,
    kind: &'static str,
    wrap: fn(K) -> Object,
    queue: &Arc<Queue>,
    ready: &Arc<Readiness>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    let queue = Arc::clone(queue);
    let ready = Arc::clone(ready);
    queue.watches.fetch_add(1, Ordering::SeqCst);
    tokio::spawn(async move {
        let _running = Running(&queue);
        let mut known = Known::default();
        // lists are served from the API server's watch cache (resourceVersion 0), as
        // client-go's reflector lists for Karpenter: a consistent list of 50,000 pods read
        // from etcd in pages of 500 outlived etcd's 5-minute compaction on a busy API server
        // ("the provided continue parameter is too old") and the watch never came back
        let config = watcher::Config::default().any_semantic();
        let mut stream = watcher::watcher(api, config)
            .backoff(watch_backoff())
            .boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    let key = key_of(o.meta());
                    let object = wrap(o);
                    let print = object.fingerprint();
                    if known.applied(key.clone(), print.unwrap_or(0)) || print.is_none() {
                        queue.applied(kind, key, object);
                    }
                }
                Ok(Event::Delete(o)) => {
                    let key = key_of(o.meta());
                    known.deleted(&key);
                    queue.deleted(kind, &key, wrap(o));
                }
                Ok(Event::Init) => {
                    ready.relisting(kind);
                    known.relisting();
                }
                Ok(Event::InitDone) => {
                    ready.listed(kind);
                    for key in known.relisted() {
                        queue.push(Observed::Gone(kind, key));
                    }
                    queue.push(Observed::Synced(kind));
                }
                Err(e) => queue.push(Observed::Failed(kind, e.to_string())),
            }
        }
    });
}

/// Counts a watch as running until its task ends.
struct Running<'a>(&'a Queue);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.watches.fetch_sub(1, Ordering::SeqCst);
        self.0.ready.notify_one();
    }
}

/// The observations waiting for the main loop, in order, with at most one change per object:
/// while the loop is busy (a large solve, a burst of API calls) a newer state of an object
/// replaces the one waiting, as a controller's work queue dedupes by key, so the queue never
/// holds more than one copy of each object however fast the cluster changes. A deletion is
/// never merged away, and what follows it comes after it.
#[derive(Debug, Default)]
pub struct Queue {
    waiting: Mutex<Waiting>,
    ready: Notify,
    watches: AtomicUsize,
}

#[derive(Debug, Default)]
struct Waiting {
    order: VecDeque<Slot>,
    /// The newest change of each object with a slot in `order`, under that slot's number.
    latest: HashMap<(&'static str, String), (u64, Object)>,
    next: u64,
}

#[derive(Debug)]
enum Slot {
    /// The object's newest change, if the number still matches.
    Latest(&'static str, String, u64),
    /// Anything else, delivered as it is.
    Fixed(Observed),
}

impl Queue {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An object of `kind` with `key` was created or changed.
    pub fn applied(&self, kind: &'static str, key: String, object: Object) {
        let mut w = self.waiting();
        let k = (kind, key);
        if let Some((_, waiting)) = w.latest.get_mut(&k) {
            *waiting = object;
            return;
        }
        let n = w.next;
        w.next += 1;
        w.order.push_back(Slot::Latest(kind, k.1.clone(), n));
        w.latest.insert(k, (n, object));
        drop(w);
        self.ready.notify_one();
    }

    /// An object was deleted: a change of it still waiting is moot.
    pub fn deleted(&self, kind: &'static str, key: &str, object: Object) {
        let mut w = self.waiting();
        w.latest.remove(&(kind, key.to_string()));
        w.order.push_back(Slot::Fixed(Observed::Deleted(object)));
        drop(w);
        self.ready.notify_one();
    }

    /// Anything but a change of an object.
    pub fn push(&self, observed: Observed) {
        self.waiting().order.push_back(Slot::Fixed(observed));
        self.ready.notify_one();
    }

    /// The next observation, if one waits.
    pub fn try_pop(&self) -> Option<Observed> {
        let mut w = self.waiting();
        while let Some(slot) = w.order.pop_front() {
            match slot {
                Slot::Fixed(o) => return Some(o),
                Slot::Latest(kind, key, n) => {
                    let k = (kind, key);
                    if w.latest.get(&k).is_some_and(|(m, _)| *m == n) {
                        let (_, object) = w.latest.remove(&k)?;
                        return Some(Observed::Applied(object));
                    }
                }
            }
        }
        None
    }

    /// The next observation, waiting for one; `None` once every watch has ended and
    /// nothing waits.
    pub async fn pop(&self) -> Option<Observed> {
        loop {
            let notified = self.ready.notified();
            if let Some(o) = self.try_pop() {
                return Some(o);
            }
            if self.watches.load(Ordering::SeqCst) == 0 {
                return None;
            }
            notified.await;
        }
    }
}

/// The objects a watch has passed on, by key, with their fingerprints; and, during a
/// relist, the keys listed again, so that what was deleted while the watch was down is
/// reported gone when the relist ends.
#[derive(Debug, Default)]
pub struct Known {
    prints: HashMap<String, u64>,
    relist: Option<HashSet<String>>,
}

impl Known {
    /// A (re)list begins.
    pub fn relisting(&mut self) {
        self.relist = Some(HashSet::new());
    }

    /// An object was listed or changed; whether its fingerprint differs from the last one
    /// passed on (or it is new).
    pub fn applied(&mut self, key: String, print: u64) -> bool {
        if let Some(relist) = &mut self.relist {
            relist.insert(key.clone());
        }
        self.prints.insert(key, print) != Some(print)
    }

    /// An object was deleted.
    pub fn deleted(&mut self, key: &str) {
        self.prints.remove(key);
    }

    /// The relist ended: the keys known before that it did not list again, now forgotten.
    pub fn relisted(&mut self) -> Vec<String> {
        let Some(listed) = self.relist.take() else {
            return Vec::new();
        };
        let mut gone: Vec<String> = self
            .prints
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        gone.sort();
        for k in &gone {
            self.prints.remove(k);
        }
        gone
    }
}

/// The kinds watched, by the name [`Observed::Synced`] reports.
pub const KINDS: [&str; 12] = [
    "Pod",
    "Node",
    "NodeClaim",
    "NodePool",
    "EC2NodeClass",
    "DaemonSet",
    "PodDisruptionBudget",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "CSINode",
    "VolumeAttachment",
];

/// The kind name of Karpenter kwok's node class, watched where it is served.
pub const KWOK_NODE_CLASS: &str = "KWOKNodeClass";

/// The NodeOverlay kind, watched with the `NodeOverlay` gate where its CRD is served.
pub const NODE_OVERLAY: &str = "NodeOverlay";

/// The kinds watched with the `CapacityBuffer` gate: the buffers and the pod shapes they
/// refer to.
pub const BUFFER_KINDS: [&str; 5] = [
    "CapacityBuffer",
    "PodTemplate",
    "Deployment",
    "StatefulSet",
    "ReplicaSet",
];

/// A pod shape a CapacityBuffer may take: the object's kind, `namespace/name` and template
/// (a workload's replicas 1 where unset, as Karpenter reads them).
fn shape(
    kind: &'static str,
    meta: &ObjectMeta,
    replicas: i32,
    template: PodTemplateSpec,
) -> Object {
    Object::Shape {
        kind,
        key: namespaced_key(meta),
        template: Box::new(Template {
            generation: meta.generation.unwrap_or(0),
            replicas,
            template,
        }),
    }
}

/// Starts a watch per kind, all feeding one queue; `kwok_node_classes` adds one of
/// KWOKNodeClasses, `node_overlays` one of NodeOverlays and `buffers` those of
/// [`BUFFER_KINDS`]. Returns the queue and the kinds whose [`Observed::Synced`] to wait for.
pub fn spawn_all(
    client: &Client,
    kwok_node_classes: bool,
    node_overlays: bool,
    buffers: bool,
    ready: &Arc<Readiness>,
) -> (Arc<Queue>, Vec<&'static str>) {
    let queue = Arc::new(Queue::default());
    let pod = |o: SlimPod| Object::Pod(Box::new(o.into()));
    spawn::<SlimPod>(client, KINDS[0], pod, &queue, ready);
    let node = |o: SlimNode| Object::Node(Box::new(o.into()));
    spawn::<SlimNode>(client, KINDS[1], node, &queue, ready);
    let claim = |o| Object::NodeClaim(Box::new(o));
    spawn::<Lenient<NodeClaim>>(client, KINDS[2], claim, &queue, ready);
    let pool = |o| Object::NodePool(Box::new(o));
    spawn::<Lenient<NodePool>>(client, KINDS[3], pool, &queue, ready);
    let class = |o| Object::NodeClass(Box::new(o));
    spawn::<Lenient<EC2NodeClass>>(client, KINDS[4], class, &queue, ready);
    let ds = |o| Object::DaemonSet(Box::new(o));
    spawn::<DaemonSet>(client, KINDS[5], ds, &queue, ready);
    let pdb = |o| Object::Pdb(Box::new(o));
    spawn::<PodDisruptionBudget>(client, KINDS[6], pdb, &queue, ready);
    let claim = |o| Object::Volume(VolumeObject::Claim(Box::new(o)));
    spawn::<PersistentVolumeClaim>(client, KINDS[7], claim, &queue, ready);
    let volume = |o| Object::Volume(VolumeObject::Volume(Box::new(o)));
    spawn::<PersistentVolume>(client, KINDS[8], volume, &queue, ready);
    let class = |o| Object::Volume(VolumeObject::Class(Box::new(o)));
    spawn::<StorageClass>(client, KINDS[9], class, &queue, ready);
    let csi = |o| Object::Volume(VolumeObject::CsiNode(Box::new(o)));
    spawn::<CSINode>(client, KINDS[10], csi, &queue, ready);
    let attachment = |o| Object::Volume(VolumeObject::Attachment(Box::new(o)));
    spawn::<VolumeAttachment>(client, KINDS[11], attachment, &queue, ready);
    let mut kinds = KINDS.to_vec();
    if kwok_node_classes {
        let class = |o| Object::KwokNodeClass(Box::new(o));
        spawn::<KwokNodeClass>(client, KWOK_NODE_CLASS, class, &queue, ready);
        kinds.push(KWOK_NODE_CLASS);
    }
    if node_overlays {
        let overlay = |o| Object::NodeOverlay(Box::new(o));
        spawn::<Lenient<NodeOverlay>>(client, NODE_OVERLAY, overlay, &queue, ready);
        kinds.push(NODE_OVERLAY);
    }
    if buffers {
        let b = |o| Object::CapacityBuffer(Box::new(o));
        spawn::<Lenient<CapacityBuffer>>(client, BUFFER_KINDS[0], b, &queue, ready);
        let t = |o: PodTemplate| {
            let template = o.template.unwrap_or_default();
            shape("PodTemplate", &o.metadata, 0, template)
        };
        spawn::<PodTemplate>(client, BUFFER_KINDS[1], t, &queue, ready);
        let d = |o: Deployment| {
            let s = o.spec.unwrap_or_default();
            shape(
                "Deployment",
                &o.metadata,
                s.replicas.unwrap_or(1),
                s.template,
            )
        };
        spawn::<Deployment>(client, BUFFER_KINDS[2], d, &queue, ready);
        let st = |o: StatefulSet| {
            let s = o.spec.unwrap_or_default();
            shape(
                "StatefulSet",
                &o.metadata,
                s.replicas.unwrap_or(1),
                s.template,
            )
        };
        spawn::<StatefulSet>(client, BUFFER_KINDS[3], st, &queue, ready);
        let r = |o: ReplicaSet| {
            let s = o.spec.unwrap_or_default();
            let t = s.template.unwrap_or_default();
            shape("ReplicaSet", &o.metadata, s.replicas.unwrap_or(1), t)
        };
        spawn::<ReplicaSet>(client, BUFFER_KINDS[4], r, &queue, ready);
        kinds.extend(BUFFER_KINDS);
    }
    (queue, kinds)
}

#[cfg(test)]
mod tests {
    use super::{Known, Object, Observed, Queue};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;

    fn pdb(name: &str, generation: i64) -> Object {
        let mut p = PodDisruptionBudget::default();
        p.metadata.name = Some(name.into());
        p.metadata.generation = Some(generation);
        Object::Pdb(Box::new(p))
    }

    fn seen(q: &Queue) -> Vec<String> {
        std::iter::from_fn(|| q.try_pop())
            .map(|o| match o {
                Observed::Applied(Object::Pdb(p)) => format!(
                    "applied {} {}",
                    p.metadata.name.unwrap(),
                    p.metadata.generation.unwrap()
                ),
                Observed::Deleted(Object::Pdb(p)) => {
                    format!("deleted {}", p.metadata.name.unwrap())
                }
                Observed::Synced(kind) => format!("synced {kind}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_node_rebooted_or_with_a_condition_changed_is_a_change_and_a_heartbeat_is_not() {
        let node = |boot: &str, status: &str, beat: &str| -> k8s_openapi::api::core::v1::Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1"},
                "status": {
                    "conditions": [{"type": "KWOKRebootRequired", "status": status,
                        "lastTransitionTime": "2026-12-05T10:00:00Z", "lastHeartbeatTime": beat}],
                    "nodeInfo": {"bootID": boot, "architecture": "", "containerRuntimeVersion": "",
                        "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                        "machineID": "", "operatingSystem": "", "osImage": "", "systemUUID": ""},
                },
            }))
            .unwrap()
        };
        let first = super::node_fingerprint(&node("a", "False", "2026-12-05T10:00:00Z"));
        let beat = super::node_fingerprint(&node("a", "False", "2026-12-05T10:00:20Z"));
        assert_eq!(first, beat, "a heartbeat changes nothing repair reads");
        assert_ne!(
            first,
            super::node_fingerprint(&node("a", "True", "2026-12-05T10:00:00Z"))
        );
        assert_ne!(
            first,
            super::node_fingerprint(&node("kwok-b", "False", "2026-12-05T10:00:00Z"))
        );
    }

    #[test]
    fn a_resized_pod_is_a_change() {
        let pod = |cpu: &str| -> k8s_openapi::api::core::v1::Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web-0", "namespace": "default"},
                "spec": {"nodeName": "n1", "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            }))
            .unwrap()
        };
        assert_eq!(
            super::pod_fingerprint(&pod("1")),
            super::pod_fingerprint(&pod("1"))
        );
        assert_ne!(
            super::pod_fingerprint(&pod("1")),
            super::pod_fingerprint(&pod("2"))
        );
    }

    #[test]
    fn the_queue_keeps_one_change_per_object_and_never_merges_a_deletion_away() {
        let q = Queue::default();
        q.applied("PodDisruptionBudget", "/a".into(), pdb("a", 1));
        q.applied("PodDisruptionBudget", "/b".into(), pdb("b", 1));
        q.applied("PodDisruptionBudget", "/a".into(), pdb("a", 2));
        q.push(Observed::Synced("PodDisruptionBudget"));
        assert_eq!(
            seen(&q),
            ["applied a 2", "applied b 1", "synced PodDisruptionBudget"],
            "the newer state of a takes the older one's place"
        );
        q.applied("PodDisruptionBudget", "/a".into(), pdb("a", 3));
        q.deleted("PodDisruptionBudget", "/a", pdb("a", 3));
        q.applied("PodDisruptionBudget", "/a".into(), pdb("a", 1));
        q.applied("PodDisruptionBudget", "/a".into(), pdb("a", 2));
        assert_eq!(
            seen(&q),
            ["deleted a", "applied a 2"],
            "a change before a deletion is moot; one after it comes after it"
        );
        assert!(q.try_pop().is_none());
    }

    #[test]
    fn a_relist_reports_what_went_while_the_watch_was_down() {
        let mut k = Known::default();
        k.relisting();
        assert!(k.applied("default/a".into(), 1));
        assert!(k.applied("default/b".into(), 1));
        assert!(k.relisted().is_empty(), "the first list finds nothing gone");
        assert!(!k.applied("default/a".into(), 1), "unchanged");
        assert!(k.applied("default/a".into(), 2), "changed");
        // the watch fails; b is deleted and c created meanwhile
        k.relisting();
        assert!(!k.applied("default/a".into(), 2));
        assert!(k.applied("default/c".into(), 1));
        assert_eq!(k.relisted(), ["default/b"]);
        assert!(
            k.applied("default/b".into(), 1),
            "b is new again if it comes back"
        );
    }
}
