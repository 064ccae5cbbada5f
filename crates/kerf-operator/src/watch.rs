//! Watches of every kind the controllers read, merged into one channel of observations.
//! Each watch relists after an error (the watcher's own backoff); the main loop applies the
//! observations to the core's cluster state, which is the store these watches fill.

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
    /// The watch of this kind has listed everything once.
    Synced(&'static str),
    /// The watch failed (it retries); the message is for the log.
    Failed(&'static str, String),
}

fn spawn<K>(
    client: &Client,
    kind: &'static str,
    wrap: fn(K) -> Object,
    tx: UnboundedSender<Observed>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            let message = match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => Observed::Applied(wrap(o)),
                Ok(Event::Delete(o)) => Observed::Deleted(wrap(o)),
                Ok(Event::InitDone) => Observed::Synced(kind),
                Ok(Event::Init) => continue,
                Err(e) => Observed::Failed(kind, e.to_string()),
            };
            if tx.send(message).is_err() {
                return;
            }
        }
    });
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
    spawn::<Pod>(
        client,
        KINDS[0],
        |o| Object::Pod(Box::new(crate::observe::slim_pod(o))),
        tx.clone(),
    );
    spawn::<Node>(client, KINDS[1], |o| Object::Node(Box::new(o)), tx.clone());
    spawn::<NodeClaim>(
        client,
        KINDS[2],
        |o| Object::NodeClaim(Box::new(o)),
        tx.clone(),
    );
    spawn::<NodePool>(
        client,
        KINDS[3],
        |o| Object::NodePool(Box::new(o)),
        tx.clone(),
    );
    spawn::<EC2NodeClass>(
        client,
        KINDS[4],
        |o| Object::NodeClass(Box::new(o)),
        tx.clone(),
    );
    spawn::<DaemonSet>(
        client,
        KINDS[5],
        |o| Object::DaemonSet(Box::new(o)),
        tx.clone(),
    );
    spawn::<PodDisruptionBudget>(client, KINDS[6], |o| Object::Pdb(Box::new(o)), tx.clone());
}
