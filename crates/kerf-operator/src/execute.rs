//! The controllers' actions as API calls: NodeClaims created, status patched, finalizers
//! released; Nodes tainted and deleted; pods evicted through the Eviction API; instances
//! launched and terminated through the cloud provider. Server errors and conflicts are
//! retried with backoff; a 404 on a delete is success; a 429 on an eviction (a
//! PodDisruptionBudget said no) is left to the drain's next round.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Taint as K8sTaint};
use kerf_api::{EC2NodeClass, NodeClaim};
use kerf_core::cluster::{CloudInstance, Launched};
use kerf_core::controllers::node_classes::TERMINATION_FINALIZER;
use kerf_core::controllers::reboot::RebootRefusal;
use kerf_core::controllers::{Action, Controllers, EventObject, LaunchRequest};
use kerf_core::objects::{keep_transition_times, nodeclaim_conditions};
use kerf_core::observe::Observation;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, Patch, PatchParams, PostParams,
};
use serde_json::json;

use crate::cloud::{CloudError, CloudProvider};
use crate::events::Recorder;
use crate::log;
use crate::recent::Recent;
use crate::reconciles::{CloudCalls, Method};

/// How many times a failing call is tried.
const ATTEMPTS: u32 = 4;

/// What kind of failure an API call met: they are told apart because they call for different
/// answers (only the cloud's capacity answers mark offerings unavailable, and only a failure
/// that may pass is tried again later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The server could not be reached, or the connection broke: the outcome of a write is
    /// unknown.
    Unreachable,
    /// 429: the server asked to slow down.
    Throttled,
    /// 409: the object changed meanwhile (or already exists).
    Conflict,
    /// 5xx: the server failed.
    Server,
    /// Any other answer: the request itself was refused.
    Rejected,
    /// The cloud provider's API failed.
    Cloud,
    /// The cloud provider is misconfigured, or had no capacity.
    CloudRefused,
}

impl Fault {
    /// Its name as the metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Unreachable => "unreachable",
            Fault::Throttled => "throttled",
            Fault::Conflict => "conflict",
            Fault::Server => "server",
            Fault::Rejected => "rejected",
            Fault::Cloud => "cloud",
            Fault::CloudRefused => "cloud_refused",
        }
    }

    /// Whether the same call may succeed later.
    pub fn passes(self) -> bool {
        !matches!(self, Fault::Rejected | Fault::CloudRefused)
    }
}

/// An error that knows its [`Fault`].
pub trait Faulty: std::fmt::Display {
    /// The kind of failure.
    fn fault(&self) -> Fault;
}

impl Faulty for kube::Error {
    fn fault(&self) -> Fault {
        match self {
            kube::Error::Api(s) if s.code == 429 => Fault::Throttled,
            kube::Error::Api(s) if s.code == 409 => Fault::Conflict,
            kube::Error::Api(s) if s.code >= 500 => Fault::Server,
            kube::Error::Api(_) => Fault::Rejected,
            kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => Fault::Rejected,
            _ => Fault::Unreachable,
        }
    }
}

impl Faulty for CloudError {
    fn fault(&self) -> Fault {
        match self {
            CloudError::Api(_) => Fault::Cloud,
            CloudError::InsufficientCapacity(_)
            | CloudError::Config(_)
            | CloudError::Refused(_) => Fault::CloudRefused,
        }
    }
}

/// A call that failed: what was done, the error, and its kind.
#[derive(Debug)]
pub struct Failure {
    /// What was being done (`creating nodeclaim`).
    pub what: &'static str,
    /// The error as the client reported it.
    pub message: String,
    /// Its kind.
    pub fault: Fault,
    /// What the controllers are told all the same (a launch refused, an eviction not made).
    pub answer: Option<Box<Answer>>,
}

/// Turns an error met while doing `what` into a [`Failure`].
fn failed<E: Faulty>(what: &'static str) -> impl FnOnce(E) -> Failure {
    move |e| Failure {
        what,
        message: e.to_string(),
        fault: e.fault(),
        answer: None,
    }
}

/// Runs `call` until it succeeds, fails for good, or runs out of attempts (100 ms, 400 ms,
/// 1.6 s between them). A conflict (another writer changed the object since `call` read it)
/// is the optimistic write working as meant: `call` reads again and writes after 10 ms, 20 ms,
/// ... (as client-go's conflict retry does, not after the failures' growing waits, which
/// held a node's first taint edits up for seconds while its status was being written), up to
/// [`CONFLICT_ATTEMPTS`] times, without an error line. An object that already exists is no
/// conflict to try again: the caller is told at once.
pub(crate) async fn retry<T, F, Fut>(what: &str, mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut wait = Duration::from_millis(100);
    let mut attempt = 1;
    let mut conflicts = 0;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                return Err(kube::Error::Api(s));
            }
            Err(e) if matches!(&e, kube::Error::Api(s) if s.code == 409) => {
                conflicts += 1;
                if conflicts >= CONFLICT_ATTEMPTS {
                    return Err(e);
                }
                log::debug(what, &e.to_string());
                tokio::time::sleep(CONFLICT_WAIT * conflicts).await;
            }
            Err(e) if attempt < ATTEMPTS && e.fault().passes() => {
                log::error(what, &e.to_string());
                tokio::time::sleep(wait).await;
                wait *= 4;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// How many times a call that met a conflict reads and writes again.
const CONFLICT_ATTEMPTS: u32 = 10;

/// The wait before the first write again after a conflict, growing by as much each time.
const CONFLICT_WAIT: Duration = Duration::from_millis(10);

fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Writes a NodeClaim's status, keeping each condition's transition time where its status
/// stayed, then the labels its launch gave it unless it has them already. It starts from the
/// answer to Kerf's last write of the NodeClaim when one is kept in `recent` (reading it
/// otherwise), and writes on the condition that the NodeClaim is still as that answer or read
/// had it (its resourceVersion): a condition another controller wrote in between is read and
/// kept.
async fn patch_nodeclaim_status(
    claims: &Api<NodeClaim>,
    recent: &Recent<NodeClaim>,
    nodeclaim: &str,
    status: kerf_api::nodeclaim::NodeClaimStatus,
    labels: std::collections::BTreeMap<String, String>,
) -> Result<(), Failure> {
    let params = PatchParams::default();
    let written = retry("patching nodeclaim status", || async {
        // gone: nothing to write (its deletion finished first)
        let Some(stored) = last_or_read(recent, claims, nodeclaim).await? else {
            return Ok(None);
        };
        let patch = nodeclaim_status_patch(stored, status.clone());
        match claims.patch_status(nodeclaim, &params, &patch).await {
            // deleted since the answer kept in `recent` (its finalizer went while this write
            // waited its turn): nothing to write, as Karpenter's status patch ignores NotFound
            Err(e) if gone(&e) => Ok(None),
            written => written.map(Some),
        }
    })
    .await
    .map_err(failed("patching nodeclaim status"))?;
    let Some(mut written) = written else {
        return Ok(());
    };
    // the labels are written once: a status written again finds them there
    let have = written.metadata.labels.as_ref();
    if !(labels.iter()).all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v)) {
        let labels = Patch::Merge(json!({"metadata": {"labels": labels}}));
        written = retry("labelling nodeclaim", || {
            claims.patch(nodeclaim, &params, &labels)
        })
        .await
        .map_err(failed("labelling nodeclaim"))?;
    }
    recent.put(nodeclaim, written);
    Ok(())
}

/// The merge patch that writes `status` over the `stored` NodeClaim's, its conditions keeping
/// the stored ones' transition times, on the condition that the NodeClaim is unchanged since.
fn nodeclaim_status_patch(
    stored: NodeClaim,
    mut status: kerf_api::nodeclaim::NodeClaimStatus,
) -> Patch<serde_json::Value> {
    let created = (stored.metadata.creation_timestamp.as_ref()).map(|t| {
        let seconds = u64::try_from(t.0.as_second()).unwrap_or(0);
        kerf_core::clock::kubernetes_time(Duration::from_secs(seconds))
    });
    let previous = stored.status.map(|s| s.conditions).unwrap_or_default();
    status.conditions = nodeclaim_conditions(
        std::mem::take(&mut status.conditions),
        &previous,
        now(),
        stored.metadata.generation,
        created.as_deref(),
    );
    Patch::Merge(json!({
        "metadata": {"resourceVersion": stored.metadata.resource_version},
        "status": status,
    }))
}

/// A write whose object may already be gone (a delete, a label, a finalizer's release): done
/// either way.
fn unless_gone<T>(what: &'static str, r: Result<T, kube::Error>) -> Result<(), Failure> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(failed(what)(e)),
    }
}

/// Deletes a Node Kerf has drained and releases Karpenter's `karpenter.sh/termination`
/// finalizer on it, which Karpenter puts on the Nodes it registers and lifts itself once they
/// are drained: a Node Karpenter registered and Kerf removes would otherwise stay Terminating.
/// A Node already gone is fine.
pub(crate) async fn delete_node(nodes: &Api<Node>, name: &str) -> Result<(), kube::Error> {
    let del = DeleteParams::default();
    match retry("deleting node", || nodes.delete(name, &del)).await {
        Ok(_) => {}
        Err(e) if gone(&e) => return Ok(()),
        Err(e) => return Err(e),
    }
    let Some(node) = retry("reading node", || nodes.get_opt(name)).await? else {
        return Ok(());
    };
    let finalizers = node.metadata.finalizers.unwrap_or_default();
    if !finalizers
        .iter()
        .any(|f| f == kerf_api::labels::TERMINATION_FINALIZER)
    {
        return Ok(());
    }
    let rest: Vec<&String> = finalizers
        .iter()
        .filter(|f| *f != kerf_api::labels::TERMINATION_FINALIZER)
        .collect();
    // the resource version makes it a compare-and-swap: a finalizer added meanwhile is kept
    let patch = Patch::Merge(json!({"metadata": {
        "finalizers": rest, "resourceVersion": node.metadata.resource_version,
    }}));
    let params = PatchParams::default();
    match retry("releasing node", || nodes.patch(name, &params, &patch)).await {
        Ok(_) => Ok(()),
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The object as the answer to Kerf's last write of it left it, when `recent` keeps one, or as
/// the server has it now; none when it is gone.
async fn last_or_read<K>(
    recent: &Recent<K>,
    api: &Api<K>,
    name: &str,
) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    last_or_read_as(recent, name, api, name).await
}

/// [`last_or_read`] of an object `recent` keeps under `key` (a namespaced object's
/// `namespace/name`).
async fn last_or_read_as<K>(
    recent: &Recent<K>,
    key: &str,
    api: &Api<K>,
    name: &str,
) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match recent.take(key) {
        Some(last) => Ok(Some(last)),
        None => api.get_opt(name).await,
    }
}

/// Merges `status` into the object's status, its conditions keeping the transition times the
/// stored ones have; an object that is gone needs none. As a NodeClaim's status, it starts from
/// the answer to Kerf's last write of the object when `recent` keeps one, and writes under the
/// resourceVersion it started from.
async fn write_status<K, S>(
    api: &Api<K>,
    (recent, key): (&Recent<K>, &str),
    name: &str,
    what: &'static str,
    read: fn(K) -> Option<Vec<kerf_api::Condition>>,
    status: S,
    conditions: fn(&mut S) -> &mut Vec<kerf_api::Condition>,
) -> Result<(), Failure>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize + Clone,
{
    let params = PatchParams::default();
    let r = retry(what, || async {
        let Some(stored) = last_or_read_as(recent, key, api, name).await? else {
            return Ok(None);
        };
        let version = stored.meta().resource_version.clone();
        let previous = read(stored).unwrap_or_default();
        let mut status = status.clone();
        keep_transition_times(conditions(&mut status), &previous, now());
        let patch = Patch::Merge(json!({
            "metadata": {"resourceVersion": version},
            "status": status,
        }));
        api.patch_status(name, &params, &patch).await.map(Some)
    })
    .await;
    match r {
        Ok(Some(written)) => {
            recent.put(key, written);
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(failed(what)(e)),
    }
}

/// The wall clock as the core reads it: time since the Unix epoch, never earlier than it
/// last said (the core keeps no clock of its own, and a wall clock stepped back by NTP or a
/// restored VM would otherwise hand it times out of order).
pub fn now() -> Duration {
    static LATEST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let nanos = u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX);
    let before = LATEST.fetch_max(nanos, std::sync::atomic::Ordering::Relaxed);
    Duration::from_nanos(before.max(nanos))
}

/// What a carried-out action has to tell the controllers: answered to them by the loop that
/// holds them ([`Answer::tell`]), since the calls themselves run without them.
#[derive(Debug)]
pub enum Answer {
    /// An observation for the controllers: a node class's instance types or resolution, a
    /// NodeClaim whose finalizer was released.
    Observed(Observation),
    /// The cloud's answer to a NodeClaim's launch.
    Launch {
        /// The NodeClaim.
        nodeclaim: String,
        /// The instance, or why there is none.
        result: Result<Launched, CloudError>,
    },
    /// The cloud's instances, for garbage collection.
    Instances(Vec<CloudInstance>),
    /// The API server took a pod's eviction.
    Evicted(String),
    /// An eviction did not happen (a PodDisruptionBudget refused it, or it failed): the pod,
    /// and the API server's status code when it answered.
    EvictionRefused(String, Option<u16>),
    /// The cloud's answer to a NodeClaim's reboot.
    Reboot {
        /// The NodeClaim.
        nodeclaim: String,
        /// Taken, or why not.
        result: Result<(), RebootRefusal>,
    },
}

impl Answer {
    /// Hands the answer to the controllers, as what they observe.
    pub fn tell(self, core: &mut Controllers) {
        let observation = match self {
            Answer::Observed(o) => o,
            Answer::Reboot { nodeclaim, result } => {
                Observation::RebootAnswered { nodeclaim, result }
            }
            Answer::Launch { nodeclaim, result } => match result {
                Ok(launched) => Observation::Launched {
                    nodeclaim,
                    launched: Box::new(launched),
                },
                Err(CloudError::InsufficientCapacity(insufficient)) => Observation::LaunchFailed {
                    nodeclaim,
                    insufficient,
                },
                // the provider's API (or, for kwok, the API server) failing may pass: tried
                // again after a backoff, not given up
                Err(e @ CloudError::Api(_)) => Observation::LaunchRetry {
                    nodeclaim,
                    error: e.to_string(),
                },
                // a permission refused: the class is looked at again now, and says so
                Err(e @ CloudError::Refused(_)) => Observation::LaunchRefused {
                    nodeclaim,
                    error: e.to_string(),
                },
                Err(e) => Observation::LaunchError {
                    nodeclaim,
                    error: e.to_string(),
                },
            },
            Answer::Instances(instances) => Observation::Instances(instances),
            Answer::Evicted(pod) => Observation::Evicted(pod),
            Answer::EvictionRefused(pod, code) => Observation::EvictionRefused { pod, code },
        };
        core.observe(observation, now());
    }
}

/// How a carried-out action went: what it tells the controllers, and the failure's kind when
/// it failed (logged).
#[derive(Debug)]
pub struct Outcome {
    /// What the controllers are told.
    pub answer: Option<Answer>,
    /// Done, or how it failed.
    pub result: Result<(), Fault>,
}

impl From<Result<Option<Answer>, Failure>> for Outcome {
    fn from(r: Result<Option<Answer>, Failure>) -> Outcome {
        match r {
            Ok(answer) => Outcome {
                answer,
                result: Ok(()),
            },
            Err(f) => {
                // a cloud call failing the same way at every try is said once a minute
                if matches!(f.fault, Fault::Cloud | Fault::CloudRefused) {
                    log::error_when_changed(f.what, &f.message);
                } else {
                    log::error(f.what, &f.message);
                }
                Outcome {
                    answer: f.answer.map(|a| *a),
                    result: Err(f.fault),
                }
            }
        }
    }
}

/// Carries out actions against the API server and the cloud, each on its own: nothing here
/// holds the controllers, so calls of different objects run at once ([`crate::dispatch`]).
pub struct Executor<C> {
    client: Client,
    cloud: C,
    events: Recorder,
    calls: CloudCalls,
    /// Each NodeClaim as Kerf's last write of it left it.
    claims_written: Recent<NodeClaim>,
    /// Each Node's `spec.taints` as Kerf's last write of it left them.
    taints_written: Recent<serde_json::Value>,
    /// Each NodePool as Kerf's last status write left it.
    pools_written: Recent<kerf_api::NodePool>,
    /// Each NodeOverlay as Kerf's last status write left it.
    overlays_written: Recent<kerf_api::NodeOverlay>,
    /// Each CapacityBuffer (by `namespace/name`) as Kerf's last status write left it.
    buffers_written: Recent<kerf_api::CapacityBuffer>,
}

fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("default", key))
}

impl<C: CloudProvider> Executor<C> {
    /// An executor for this client and cloud, its cloud calls counted in `calls`, its
    /// Events written with `events` (a client of their own, as client-go's event sink has,
    /// so that a burst of Events never spends the actions' request budget).
    pub fn new(client: Client, events: Client, cloud: C, calls: CloudCalls) -> Executor<C> {
        let events = Recorder::spawn(events);
        Executor {
            client,
            cloud,
            events,
            calls,
            claims_written: Recent::new(),
            taints_written: Recent::new(),
            pools_written: Recent::new(),
            overlays_written: Recent::new(),
            buffers_written: Recent::new(),
        }
    }

    /// The cloud provider.
    pub fn cloud(&self) -> &C {
        &self.cloud
    }

    /// The cloud's instances, for garbage collection (the call timed and its error counted).
    pub async fn instances(&self) -> Result<Vec<CloudInstance>, CloudError> {
        let started = std::time::Instant::now();
        let r = self.cloud.list().await;
        let controller = "nodeclaim.garbagecollection";
        self.calls
            .record(controller, Method::List, "", &r, started.elapsed());
        r
    }

    /// The event recorder.
    pub fn events(&self) -> &Recorder {
        &self.events
    }

    /// Records an Event, about the object by its UID (a pod's as the controllers hold it).
    pub fn record_event(&self, e: kerf_core::controllers::Event, core: &Controllers) {
        let uid = match e.kind {
            EventObject::Pod => core
                .cluster()
                .pods()
                .get(&e.name)
                .and_then(|p| p.uid.clone()),
            _ => self.events.uid(e.kind, &e.name),
        };
        self.events.record(e, uid);
    }

    /// Carries out one action that writes or asks something (not a log line or an Event);
    /// `node_pool` is the NodePool of the NodeClaim it is about, for the cloud-call metrics.
    pub async fn execute(&self, action: Action, node_pool: String) -> Outcome {
        self.run(action, node_pool).await.into()
    }

    async fn run(&self, action: Action, node_pool: String) -> Result<Option<Answer>, Failure> {
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        let nodes: Api<Node> = Api::all(self.client.clone());
        let (post, del, params) = (
            PostParams::default(),
            DeleteParams::default(),
            PatchParams::default(),
        );
        match action {
            // no call: the lanes print log lines and record events on the spot
            // ([`crate::dispatch::Lanes::submit`]), and a disruption's start is a log line
            Action::Log(_) | Action::Event(_) | Action::Disrupting { .. } => {}
            Action::CreateNodeClaim(object) => {
                let r = retry("creating nodeclaim", || claims.create(&post, &object)).await;
                match r {
                    // its first status is written from the created object
                    Ok(created) => {
                        let name = created.metadata.name.clone().unwrap_or_default();
                        self.claims_written.put(&name, created);
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(failed("creating nodeclaim")(e)),
                }
            }
            Action::ListInstanceTypes { node_class, spec } => {
                let types = self.cloud.instance_types(spec.as_deref());
                let answer = Observation::InstanceTypes {
                    node_class,
                    spec,
                    types,
                };
                return Ok(Some(Answer::Observed(answer)));
            }
            Action::ResolveNodeClass {
                node_class,
                class,
                node_pools,
            } => {
                let resolved = (self.cloud)
                    .resolve_node_class(&node_class, &class, &node_pools)
                    .await;
                let status = resolved.map_err(|e| e.to_string());
                let resolved = Observation::NodeClassResolved { node_class, status };
                return Ok(Some(Answer::Observed(resolved)));
            }
            Action::PatchNodeClassStatus { node_class, status } => {
                let classes: Api<EC2NodeClass> = Api::all(self.client.clone());
                let patch = Patch::Merge(json!({ "status": status }));
                let what = "patching ec2nodeclass status";
                let r = retry(what, || classes.patch_status(&node_class, &params, &patch)).await;
                unless_gone(what, r)?;
            }
            Action::AddNodeClassFinalizer { node_class, class } => {
                let mut finalizers = class.metadata.finalizers.clone().unwrap_or_default();
                finalizers.push(TERMINATION_FINALIZER.to_string());
                self.set_node_class_finalizers(&node_class, &class, finalizers)
                    .await?;
            }
            Action::FinalizeNodeClass { node_class, class } => {
                (self.cloud.clean_up_node_class(&node_class, &class).await)
                    .map_err(failed("cleaning up after ec2nodeclass"))?;
                let rest = (class.metadata.finalizers.iter().flatten())
                    .filter(|f| *f != TERMINATION_FINALIZER)
                    .cloned()
                    .collect();
                self.set_node_class_finalizers(&node_class, &class, rest)
                    .await?;
            }
            Action::ListInstances => match self.instances().await {
                Ok(instances) => {
                    log::recovered("listing instances");
                    return Ok(Some(Answer::Instances(instances)));
                }
                Err(e) => log::error_when_changed("listing instances", &e.to_string()),
            },
            Action::Launch { nodeclaim, request } => {
                return self.launch(nodeclaim, &request).await.map(Some);
            }
            Action::PatchNodeClaimStatus {
                nodeclaim,
                status,
                labels,
            } => {
                let recent = &self.claims_written;
                patch_nodeclaim_status(&claims, recent, &nodeclaim, *status, labels).await?;
            }
            Action::PatchNodePoolStatus { node_pool, status } => {
                let pools: Api<kerf_api::NodePool> = Api::all(self.client.clone());
                let what = "patching nodepool status";
                let read = |p: kerf_api::NodePool| p.status.map(|s| s.conditions);
                let recent = &self.pools_written;
                let recent = (recent, node_pool.as_str());
                write_status(&pools, recent, &node_pool, what, read, *status, |s| {
                    &mut s.conditions
                })
                .await?;
            }
            Action::PatchNodeOverlayStatus {
                node_overlay,
                status,
            } => {
                let overlays: Api<kerf_api::NodeOverlay> = Api::all(self.client.clone());
                let what = "patching nodeoverlay status";
                let read = |o: kerf_api::NodeOverlay| o.status.map(|s| s.conditions);
                let recent = &self.overlays_written;
                let recent = (recent, node_overlay.as_str());
                write_status(&overlays, recent, &node_overlay, what, read, *status, |s| {
                    &mut s.conditions
                })
                .await?;
            }
            Action::PatchCapacityBufferStatus { buffer, status } => {
                let (namespace, name) = split(&buffer);
                let buffers: Api<kerf_api::CapacityBuffer> =
                    Api::namespaced(self.client.clone(), namespace);
                let what = "patching capacitybuffer status";
                let read = |b: kerf_api::CapacityBuffer| b.status.map(|s| s.conditions);
                let recent = (&self.buffers_written, buffer.as_str());
                write_status(&buffers, recent, name, what, read, *status, |s| {
                    &mut s.conditions
                })
                .await?;
            }
            Action::LabelNode {
                node,
                labels,
                annotations,
                finalizer,
            } => {
                let mut metadata = json!({"labels": labels});
                if !annotations.is_empty() {
                    metadata["annotations"] = json!(annotations);
                }
                let patch = if finalizer {
                    // a strategic merge adds to the finalizer list rather than replacing it
                    metadata["finalizers"] = json!([kerf_api::labels::TERMINATION_FINALIZER]);
                    Patch::Strategic(json!({ "metadata": metadata }))
                } else {
                    Patch::Merge(json!({ "metadata": metadata }))
                };
                let raw = self.raw_nodes();
                let r = retry("labelling node", || raw.patch(&node, &params, &patch)).await;
                if let Ok(written) = &r {
                    (self.taints_written).put(&node, written.data["spec"]["taints"].clone());
                }
                unless_gone("labelling node", r)?;
            }
            Action::Taint { node, taint, by } => {
                let taint = K8sTaint {
                    key: taint.key,
                    value: taint.value,
                    effect: format!("{:?}", taint.effect),
                    time_added: None,
                };
                let edit = self.edit_taints(&node, |ts| {
                    if !ts
                        .iter()
                        .any(|t| t.key == taint.key && t.effect == taint.effect)
                    {
                        ts.push(taint.clone());
                    }
                });
                let Some(by) = by else {
                    return edit.await.map(|()| None);
                };
                // a mark goes out by its deadline or not at all: a call still held then (by
                // the gate of an overdue Lease, or retries) is dropped unsent or its
                // outcome left unknown, and the command is given up either way
                let left = by.saturating_sub(now());
                let late = || Failure {
                    what: "tainting node",
                    message: format!("{node}: the disruption's mark was not written in time"),
                    fault: Fault::Rejected,
                    answer: None,
                };
                let written = if left.is_zero() {
                    drop(edit);
                    Err(late())
                } else {
                    (tokio::time::timeout(left, edit).await).unwrap_or_else(|_| Err(late()))
                };
                return written.map(|()| None).map_err(|f| Failure {
                    answer: Some(Box::new(Answer::Observed(Observation::MarkRefused {
                        node,
                        by,
                    }))),
                    ..f
                });
            }
            Action::RemoveTaint { node, key } => {
                self.edit_taints(&node, |ts| ts.retain(|t| t.key != key))
                    .await?;
            }
            Action::Evict { pod } => {
                let (ns, name) = split(&pod);
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                match pods.evict(name, &EvictParams::default()).await {
                    Ok(_) => return Ok(Some(Answer::Evicted(pod))),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    // 429: a PodDisruptionBudget allows no disruption now; the drain's next
                    // round asks again
                    Err(kube::Error::Api(s)) if s.code == 429 => {
                        return Ok(Some(Answer::EvictionRefused(pod, Some(s.code))));
                    }
                    Err(e) => {
                        let code = match &e {
                            kube::Error::Api(s) => Some(s.code),
                            _ => None,
                        };
                        return Err(Failure {
                            answer: Some(Box::new(Answer::EvictionRefused(pod, code))),
                            ..failed("evicting pod")(e)
                        });
                    }
                }
            }
            Action::AnnotatePodDeletionCost { pod, cost } => {
                let (ns, name) = split(&pod);
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                let key = kerf_core::disruption::rules::POD_DELETION_COST_ANNOTATION;
                let value = cost.map(|c| c.to_string());
                let patch = Patch::Merge(json!({"metadata": {"annotations": {key: value}}}));
                let written = retry("annotating pod", || pods.patch(name, &params, &patch)).await;
                let result = match &written {
                    Ok(_) => "updated",
                    Err(kube::Error::Api(s)) if s.code == 404 => "skipped_notfound",
                    Err(kube::Error::Api(s)) if s.code == 409 => "skipped_conflict",
                    Err(_) => "error",
                };
                let writes = &kerf_core::metrics::families::POD_DELETION_COST_POD_ANNOTATION_WRITES;
                self.calls.metrics().inc(writes, &[result]);
                if result == "error" {
                    written.map_err(failed("annotating pod"))?;
                }
            }
            Action::DeletePod { pod, grace_seconds } => {
                let (ns, name) = split(&pod);
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                let params = DeleteParams {
                    grace_period_seconds: grace_seconds.and_then(|g| u32::try_from(g).ok()),
                    ..DeleteParams::default()
                };
                let r = retry("deleting pod", || pods.delete(name, &params)).await;
                unless_gone("deleting pod", r)?;
            }
            Action::DeleteInstance {
                provider_id,
                nodeclaim: _,
            } => {
                let started = std::time::Instant::now();
                let deleted = self.cloud.delete(&provider_id).await;
                let (controller, took) = ("nodeclaim.termination", started.elapsed());
                self.calls
                    .record(controller, Method::Delete, &node_pool, &deleted, took);
                deleted.map_err(failed("terminating instance"))?;
            }
            Action::Reboot {
                nodeclaim,
                node,
                provider_id,
                operation_id,
            } => {
                let started = std::time::Instant::now();
                let result = self.cloud.reboot(&node, &provider_id, &operation_id).await;
                let recorded = result
                    .clone()
                    .map_err(|e| CloudError::Api(format!("{e:?}")));
                let took = started.elapsed();
                (self.calls).record(
                    "nodeclaim.reboot",
                    Method::Reboot,
                    &node_pool,
                    &recorded,
                    took,
                );
                return Ok(Some(Answer::Reboot { nodeclaim, result }));
            }
            Action::RelabelNode { node, labels } => {
                let patch = Patch::Merge(json!({"metadata": {"labels": labels}}));
                let r = retry("relabelling node", || nodes.patch(&node, &params, &patch)).await;
                unless_gone("relabelling node", r)?;
            }
            Action::RelabelNodeClaim { nodeclaim, labels } => {
                let patch = Patch::Merge(json!({"metadata": {"labels": labels}}));
                let r = retry("relabelling nodeclaim", || {
                    claims.patch(&nodeclaim, &params, &patch)
                })
                .await;
                unless_gone("relabelling nodeclaim", r)?;
            }
            Action::DeleteNode { node } => {
                delete_node(&nodes, &node)
                    .await
                    .map_err(failed("deleting node"))?;
            }
            Action::AnnotateNodeClaim {
                nodeclaim,
                annotations,
            } => {
                let patch = Patch::Merge(json!({"metadata": {"annotations": annotations}}));
                let r = retry("annotating nodeclaim", || {
                    claims.patch(&nodeclaim, &params, &patch)
                })
                .await;
                unless_gone("annotating nodeclaim", r)?;
            }
            Action::DeleteNodeClaim { nodeclaim } => {
                let r = retry("deleting nodeclaim", || claims.delete(&nodeclaim, &del)).await;
                unless_gone("deleting nodeclaim", r)?;
            }
            Action::ReleaseNodeClaim { nodeclaim } => {
                let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
                let r = retry("releasing nodeclaim", || {
                    claims.patch(&nodeclaim, &params, &release)
                })
                .await;
                unless_gone("releasing nodeclaim", r)?;
                let key = format!("/{nodeclaim}");
                let kind = "NodeClaim".into();
                return Ok(Some(Answer::Observed(Observation::Deleted { kind, key })));
            }
        }
        Ok(None)
    }

    /// Asks the cloud for a NodeClaim's instance: the answer for the controllers.
    async fn launch(&self, nodeclaim: String, request: &LaunchRequest) -> Result<Answer, Failure> {
        let available = |ct: &str, it: &str, zone: &str| request.available(ct, it, zone);
        let (claim, pool) = (&request.claim, &request.node_pool);
        let started = std::time::Instant::now();
        let class = request.node_class.as_ref();
        let created = self
            .cloud
            .create(&nodeclaim, claim, pool, class, &available)
            .await;
        let (controller, method) = ("nodeclaim.lifecycle", Method::Create);
        let took = started.elapsed();
        self.calls
            .record(controller, method, &claim.node_pool, &created, took);
        match created {
            Err(e @ (CloudError::Config(_) | CloudError::Refused(_))) => Err(Failure {
                what: "launching nodeclaim",
                message: e.to_string(),
                fault: e.fault(),
                answer: Some(Box::new(Answer::Launch {
                    nodeclaim,
                    result: Err(e),
                })),
            }),
            result => Ok(Answer::Launch { nodeclaim, result }),
        }
    }

    /// Writes a node class's finalizers on the version the controllers held: a class
    /// changed since is looked at again at the node class controller's next round.
    async fn set_node_class_finalizers(
        &self,
        name: &str,
        class: &EC2NodeClass,
        finalizers: Vec<String>,
    ) -> Result<(), Failure> {
        let classes: Api<EC2NodeClass> = Api::all(self.client.clone());
        let patch = Patch::Merge(json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": class.metadata.resource_version,
        }}));
        let what = "patching ec2nodeclass finalizers";
        let r = classes.patch(name, &PatchParams::default(), &patch).await;
        match r {
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            r => unless_gone(what, r),
        }
    }

    /// Reads a node, changes its taints, and writes the new list on the condition that the
    /// list is still the one read (a JSON Patch `test`, then the list): the kubelet's and
    /// kwok's status writes and other labels' patches never turn it away, as a whole-object
    /// write with the read's resourceVersion is turned away by each of them; a list changed in
    /// between (the node lifecycle controller lifting `not-ready`) is read again at once. The
    /// list as Kerf's last write of the node left it stands for the read when one is kept.
    async fn edit_taints(
        &self,
        name: &str,
        edit: impl Fn(&mut Vec<K8sTaint>),
    ) -> Result<(), Failure> {
        let raw = self.raw_nodes();
        let r = retry("tainting node", || async {
            // the answer to the last write is trusted for a change only: that the edit is
            // already there is read from the server
            let kept = self.taints_written.take(name);
            let patch = match kept.and_then(|taints| taints_patch(&taints, &edit)) {
                Some(patch) => patch,
                None => {
                    let Some(node) = raw.get_opt(name).await? else {
                        return Ok(());
                    };
                    let Some(patch) = taints_patch(&node.data["spec"]["taints"], &edit) else {
                        return Ok(());
                    };
                    patch
                }
            };
            match raw.patch(name, &PatchParams::default(), &patch).await {
                Ok(written) => {
                    let taints = written.data["spec"]["taints"].clone();
                    self.taints_written.put(name, taints);
                    Ok(())
                }
                Err(kube::Error::Api(s)) if s.code == 422 && no_causes(&s) => {
                    // the list changed since it was read (the server's answer to a failed
                    // `test` names no field, where an invalid taint's names its path): as a
                    // conflict, read again
                    Err(kube::Error::Api(Box::new(kube::core::Status {
                        code: 409,
                        ..*s
                    })))
                }
                Err(e) => Err(e),
            }
        })
        .await;
        r.map_err(failed("tainting node"))
    }

    /// Nodes as the server writes them, unknown fields and all: a taint edit tests and
    /// keeps the server's own text.
    fn raw_nodes(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &ApiResource::erase::<Node>(&()))
    }
}

/// Whether an answer names no cause (no field path).
fn no_causes(s: &kube::core::Status) -> bool {
    s.details.as_ref().is_none_or(|d| d.causes.is_empty())
}

/// The JSON Patch that turns the taints `read` (the node's `spec.taints` as the server sent
/// it, `null` when it has none) into their `edit`, on the condition that they are still
/// `read`; none when the edit changes nothing. Taints kept are written back as read, so the
/// test compares the server's own text of them.
fn taints_patch(read: &serde_json::Value, edit: impl Fn(&mut Vec<K8sTaint>)) -> Option<Patch<()>> {
    let raw: Vec<serde_json::Value> = read.as_array().cloned().unwrap_or_default();
    let typed: Vec<Option<K8sTaint>> = (raw.iter())
        .map(|t| serde_json::from_value(t.clone()).ok())
        .collect();
    let mut edited: Vec<K8sTaint> = typed.iter().flatten().cloned().collect();
    let before = edited.clone();
    edit(&mut edited);
    if edited == before {
        return None;
    }
    // a taint this build cannot read is kept as it is
    let mut written: Vec<serde_json::Value> = (raw.iter().zip(&typed))
        .filter(|(_, t)| t.is_none())
        .map(|(r, _)| r.clone())
        .collect();
    for t in &edited {
        let as_read = (raw.iter().zip(&typed)).find(|(_, r)| r.as_ref() == Some(t));
        written.push(match as_read {
            Some((r, _)) => r.clone(),
            None => serde_json::to_value(t).unwrap_or_default(),
        });
    }
    let ops = json!([
        {"op": "test", "path": "/spec/taints", "value": read},
        {"op": "add", "path": "/spec/taints", "value": written},
    ]);
    serde_json::from_value(ops).ok().map(Patch::Json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(patch: Patch<()>) -> serde_json::Value {
        let Patch::Json(p) = patch else {
            panic!("a JSON Patch")
        };
        serde_json::to_value(p).unwrap()
    }

    #[test]
    fn a_taint_edit_tests_the_list_as_read_and_keeps_the_rest_as_the_server_wrote_it() {
        // the server's text of a taint (its time as written), kept to the letter
        let read = json!([
            {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2026-12-03T17:52:19Z"},
        ]);
        let patch = taints_patch(&read, |ts| {
            ts.retain(|t| t.key != "karpenter.sh/unregistered")
        });
        assert_eq!(
            ops(patch.expect("a change")),
            json!([
                {"op": "test", "path": "/spec/taints", "value": read},
                {"op": "add", "path": "/spec/taints", "value": [read[1]]},
            ])
        );
    }

    #[test]
    fn a_node_without_taints_is_tested_for_none_and_an_edit_that_changes_nothing_writes_nothing() {
        let taint = K8sTaint {
            key: "karpenter.sh/disrupted".into(),
            effect: "NoSchedule".into(),
            ..K8sTaint::default()
        };
        let patch = taints_patch(&serde_json::Value::Null, |ts| ts.push(taint.clone()));
        assert_eq!(
            ops(patch.expect("a change")),
            json!([
                {"op": "test", "path": "/spec/taints", "value": null},
                {"op": "add", "path": "/spec/taints", "value": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
            ])
        );
        assert!(taints_patch(&serde_json::Value::Null, |ts| ts.retain(|t| t.key != "x")).is_none());
        let read = json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]);
        assert!(
            taints_patch(&read, |ts| if ts.is_empty() {
                ts.push(taint.clone())
            })
            .is_none()
        );
    }
}
