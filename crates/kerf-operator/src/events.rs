//! Kubernetes Events (events.k8s.io/v1) written off the action path: the controllers' work
//! never waits on them. Nominations, and pods told their NodeClaim found no capacity, are
//! rate-limited as Karpenter limits them (5 per second, bursts of 10, each kind apart); when
//! the queue is full an event is dropped, never the work.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kerf_core::controllers::{Event as KerfEvent, EventObject};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;

use crate::execute::retry;
use crate::log;

/// Events waiting to be written at most.
const QUEUE: usize = 1024;
/// Nomination events per second, and the burst allowed.
const NOMINATIONS_PER_SECOND: f64 = 5.0;
const NOMINATION_BURST: f64 = 10.0;

/// UIDs remembered at most: past this the map starts again (a miss only leaves an event
/// without its object's UID).
const UIDS: usize = 50_000;

/// Hands events to the task that writes them.
pub struct Recorder {
    tx: mpsc::Sender<(KerfEvent, Option<String>)>,
    /// Nodes' and NodeClaims' UIDs as last seen, kept after they go: an event about a node
    /// being deleted is often written after the node is gone.
    uids: Mutex<HashMap<(EventObject, String), String>>,
}

impl Recorder {
    /// Starts the writing task (inside a Tokio runtime).
    pub fn spawn(client: Client) -> Recorder {
        let (tx, rx) = mpsc::channel(QUEUE);
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "kerf-operator".into());
        tokio::spawn(write_all(client, instance, rx));
        Recorder {
            tx,
            uids: Mutex::new(HashMap::new()),
        }
    }

    /// Remembers a node's or NodeClaim's UID from a watch event.
    pub fn remember(&self, kind: EventObject, meta: &ObjectMeta) {
        let (Some(name), Some(uid)) = (&meta.name, &meta.uid) else {
            return;
        };
        let mut uids = self.uids.lock().unwrap_or_else(|p| p.into_inner());
        if uids.len() >= UIDS {
            uids.clear();
        }
        uids.insert((kind, name.clone()), uid.clone());
    }

    /// A node's or NodeClaim's UID, if seen.
    pub fn uid(&self, kind: EventObject, name: &str) -> Option<String> {
        let uids = self.uids.lock().unwrap_or_else(|p| p.into_inner());
        uids.get(&(kind, name.to_string())).cloned()
    }

    /// Queues an event about the object with this UID.
    pub fn record(&self, event: KerfEvent, uid: Option<String>) {
        // a full queue drops the event: events are for people, the work goes on
        let _ = self.tx.try_send((event, uid));
    }
}

/// A token bucket.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * NOMINATIONS_PER_SECOND;
        self.tokens = (self.tokens + refill).min(NOMINATION_BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

async fn write_all(
    client: Client,
    instance: String,
    mut rx: mpsc::Receiver<(KerfEvent, Option<String>)>,
) {
    let bucket = || Bucket {
        tokens: NOMINATION_BURST,
        at: Instant::now(),
    };
    // Karpenter limits two kinds of pod events, each with a bucket of its own
    let (mut nominations, mut shortages) = (bucket(), bucket());
    while let Some((event, uid)) = rx.recv().await {
        if event.reason == "Nominated" && !nominations.take() {
            continue;
        }
        let shortage =
            event.reason == "InsufficientCapacityError" && event.kind == EventObject::Pod;
        if shortage && !shortages.take() {
            continue;
        }
        if let Err(e) = write(&client, &instance, event, uid).await {
            log::error("recording event", &e.to_string());
        }
    }
}

/// Writes one event about a pod, node or NodeClaim, with the object's UID so that
/// `kubectl describe` lists it. Cluster-scoped objects' events go to the `default`
/// namespace, as client-go's recorders put them.
async fn write(
    client: &Client,
    instance: &str,
    e: KerfEvent,
    uid: Option<String>,
) -> Result<(), kube::Error> {
    let (api_version, kind) = e.kind.api_version_kind();
    let (namespace, name) = match e.kind {
        EventObject::Pod | EventObject::CapacityBuffer => {
            let (ns, name) = e.name.split_once('/').unwrap_or(("default", &e.name));
            (Some(ns.to_string()), name.to_string())
        }
        EventObject::Node
        | EventObject::NodeClaim
        | EventObject::NodePool
        | EventObject::NodeClass
        | EventObject::NodeOverlay => (None, e.name.clone()),
    };
    let home = namespace.clone().unwrap_or_else(|| "default".into());
    let now = k8s_openapi::jiff::Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            // client-go's name for an event: the object's name and the time in hex
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(home.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(e.reason.to_string()),
        reason: Some(e.reason.to_string()),
        note: Some(e.message),
        type_: Some(if e.warning { "Warning" } else { "Normal" }.into()),
        regarding: Some(ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            name: Some(name),
            namespace,
            uid,
            ..ObjectReference::default()
        }),
        reporting_controller: Some("karpenter".into()),
        reporting_instance: Some(instance.to_string()),
        ..Event::default()
    };
    let events: Api<Event> = Api::namespaced(client.clone(), &home);
    let post = PostParams::default();
    retry("recording event", || events.create(&post, &event)).await?;
    Ok(())
}
