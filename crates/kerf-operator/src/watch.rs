//! Watches of every kind the controllers read, merged into one channel of observations.
//! Each watch relists after an error (the watcher's own backoff); the main loop applies the
//! observations to the core's cluster state, which is the store these watches fill.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kerf_api::{EC2NodeClass, NodeClaim, NodePool};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;

/// An object as a watch saw it.
#[derive(Debug)]
pub enum Object {
    /// A Pod.
    Pod(Box<Pod>),
    /// A Node.
    Node(Box<Node>),
    /// A NodeClaim.
    NodeClaim(Box<NodeClaim>),
    /// A NodePool.
    NodePool(Box<NodePool>),
    /// An EC2NodeClass.
    NodeClass(Box<EC2NodeClass>),
    /// A DaemonSet.
    DaemonSet(Box<DaemonSet>),
    /// A PodDisruptionBudget.
    Pdb(Box<PodDisruptionBudget>),
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
}

/// What of an object the controllers read, hashed: an update that leaves it unchanged (a
/// kwok heartbeat, a container status) is not passed on.
type Fingerprint<K> = fn(&K) -> u64;

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
    ))
}

fn node_fingerprint(node: &Node) -> u64 {
    let status = node.status.as_ref();
    let ready = kerf_core::objects::node_ready(node);
    hash_of(&(
        &node.metadata.labels,
        node.spec
            .as_ref()
            .map(|s| (&s.taints, &s.provider_id, s.unschedulable)),
        status.map(|s| (&s.allocatable, &s.capacity)),
        ready,
    ))
}

fn key_of(meta: &kube::api::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

fn spawn<K>(
    client: &Client,
    kind: &'static str,
    wrap: fn(K) -> Object,
    fingerprint: Option<Fingerprint<K>>,
    tx: UnboundedSender<Observed>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    tokio::spawn(async move {
        let mut known = Known::default();
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            let messages = match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    let print = fingerprint.map_or(0, |f| f(&o));
                    if !known.applied(key_of(o.meta()), print) && fingerprint.is_some() {
                        continue;
                    }
                    vec![Observed::Applied(wrap(o))]
                }
                Ok(Event::Delete(o)) => {
                    known.deleted(&key_of(o.meta()));
                    vec![Observed::Deleted(wrap(o))]
                }
                Ok(Event::Init) => {
                    known.relisting();
                    continue;
                }
                Ok(Event::InitDone) => {
                    let mut out: Vec<Observed> = known
                        .relisted()
                        .into_iter()
                        .map(|key| Observed::Gone(kind, key))
                        .collect();
                    out.push(Observed::Synced(kind));
                    out
                }
                Err(e) => vec![Observed::Failed(kind, e.to_string())],
            };
            for message in messages {
                if tx.send(message).is_err() {
                    return;
                }
            }
        }
    });
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
pub const KINDS: [&str; 7] = [
    "Pod",
    "Node",
    "NodeClaim",
    "NodePool",
    "EC2NodeClass",
    "DaemonSet",
    "PodDisruptionBudget",
];

/// Starts a watch per kind, all sending to `tx`.
pub fn spawn_all(client: &Client, tx: &UnboundedSender<Observed>) {
    let pod = |o| Object::Pod(Box::new(crate::observe::slim_pod(o)));
    spawn::<Pod>(client, KINDS[0], pod, Some(pod_fingerprint), tx.clone());
    let node = |o| Object::Node(Box::new(o));
    spawn::<Node>(client, KINDS[1], node, Some(node_fingerprint), tx.clone());
    let claim = |o| Object::NodeClaim(Box::new(o));
    spawn::<NodeClaim>(client, KINDS[2], claim, None, tx.clone());
    let pool = |o| Object::NodePool(Box::new(o));
    spawn::<NodePool>(client, KINDS[3], pool, None, tx.clone());
    let class = |o| Object::NodeClass(Box::new(o));
    spawn::<EC2NodeClass>(client, KINDS[4], class, None, tx.clone());
    let ds = |o| Object::DaemonSet(Box::new(o));
    spawn::<DaemonSet>(client, KINDS[5], ds, None, tx.clone());
    let pdb = |o| Object::Pdb(Box::new(o));
    spawn::<PodDisruptionBudget>(client, KINDS[6], pdb, None, tx.clone());
}

#[cfg(test)]
mod tests {
    use super::Known;

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
