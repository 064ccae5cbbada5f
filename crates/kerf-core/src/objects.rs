//! Between API objects and the cluster state: what a NodeClaim's status says about a record
//! (so a restarted controller picks up where it was) and what a record's status is, and a
//! Node object as a node record.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::labels::UNSCHEDULABLE_TAINT_KEY;
use kerf_api::nodeclaim::NodeClaimStatus;
use kerf_api::nodeclaim::condition_types;
use kerf_api::nodepool::NodePoolStatus;
use kerf_api::{Condition, EC2NodeClass, NodeClaim, Taint, TaintEffect, labels};
use kerf_scheduling::resources::Resources;

use crate::cluster::{
    CapacityType, ClaimRecord, Cluster, DriftReason, Launched, NodeRecord, Reboot, RebootPhase,
};
use crate::nodepools::taint_of;

/// A NodeOverlay's status as Karpenter writes it: `ValidationSucceeded` (False with reason
/// `RuntimeValidation` or `Conflict` when it applies nowhere) and the root `Ready`.
pub fn nodeoverlay_status(
    refused: Option<&crate::overlays::Refusal>,
) -> kerf_api::nodeoverlay::NodeOverlayStatus {
    use crate::overlays::Refusal;
    let (validation, ready) = match refused {
        None => (
            condition("ValidationSucceeded", true, "ValidationSucceeded"),
            condition("Ready", true, "Ready"),
        ),
        Some(r) => {
            let (reason, message) = match r {
                Refusal::RuntimeValidation(m) => ("RuntimeValidation", m.clone()),
                Refusal::Conflict => ("Conflict", "conflict with another overlay".to_string()),
            };
            let mut v = condition("ValidationSucceeded", false, reason);
            v.message = message;
            let mut ready = condition("Ready", false, "UnhealthyDependents");
            ready.message = "ValidationSucceeded=False".into();
            (v, ready)
        }
    };
    kerf_api::nodeoverlay::NodeOverlayStatus {
        conditions: vec![validation, ready],
    }
}

fn condition(type_: &str, status: bool, reason: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: String::new(),
        last_transition_time: None,
        observed_generation: None,
    }
}

/// Whether a pod's condition of this type is true.
pub fn pod_condition_true(pod: &k8s_openapi::api::core::v1::Pod, type_: &str) -> bool {
    (pod.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Whether a NodeClaim's status holds the condition `type_` as True.
pub(crate) fn is_true(status: Option<&NodeClaimStatus>, type_: &str) -> bool {
    status.is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

/// Gives each condition the transition time the stored object's condition of the same type
/// and status has, or `now` when the status changed or is new: Karpenter's CRDs require
/// `lastTransitionTime`, and it should say when the condition last changed, not when it was
/// last written.
pub fn keep_transition_times(conditions: &mut [Condition], previous: &[Condition], now: Duration) {
    for c in conditions {
        c.last_transition_time = previous
            .iter()
            .find(|p| p.type_ == c.type_ && p.status == c.status)
            .and_then(|p| p.last_transition_time.clone())
            .or_else(|| Some(crate::clock::kubernetes_time(now)));
    }
}

/// What a NodeClaim's conditions say beyond its record, as the controllers that own them
/// see it when the status is written.
#[derive(Clone, Debug, Default)]
pub struct ClaimConditions {
    /// Why a registered node is not initialized yet: Karpenter's reason and message.
    pub initializing: Option<(&'static str, String)>,
    /// Why its last launch failed, while it is tried again (`LaunchFailed`).
    pub launch_error: Option<String>,
    /// The disruption that chose it (`DisruptionReason`).
    pub disruption: Option<String>,
    /// Its drain, once its deletion started: under way (`false`) or done (`true`).
    pub drained: Option<bool>,
    /// Its volumes' detachment, once drained (`VolumesDetached`).
    pub detachment: Option<Detachment>,
    /// Its node falls short of what its launch promised (`ConsistentStateFound` false).
    pub inconsistent: bool,
}

/// Where a drained node's volumes stand: its `VolumesDetached` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detachment {
    /// VolumeAttachments remain (Unknown, `AwaitingVolumeDetachment`).
    Awaiting,
    /// None remains (True).
    Done,
    /// Some remained when the termination time came (False,
    /// `TerminationGracePeriodElapsed`).
    GraceElapsed,
}

/// Karpenter's reason and message for a condition no controller has decided yet.
const AWAITING: (&str, &str) = (
    "AwaitingReconciliation",
    "object is awaiting reconciliation",
);

fn unknown(type_: &str, reason: &str, message: &str) -> Condition {
    Condition {
        status: "Unknown".into(),
        message: message.into(),
        ..condition(type_, false, reason)
    }
}

/// A condition set true as Karpenter sets one: its type as the reason, no message.
fn holds(type_: &str) -> Condition {
    condition(type_, true, type_)
}

/// The status a NodeClaim record stands for: provider id, node, capacity and the
/// conditions Karpenter v1.15 writes, with its reasons and messages: `Launched`,
/// `Registered` and `Initialized` `Unknown` until they hold, `Ready` summing the three,
/// `Drifted` and `DisruptionReason` with the reason as the message too, `Drained`,
/// `InstanceTerminating`, `Consolidatable` and `ConsistentStateFound` (false while the node
/// falls short of its launch).
pub fn nodeclaim_status(record: &ClaimRecord, beside: &ClaimConditions) -> NodeClaimStatus {
    use condition_types::*;
    let mut status = NodeClaimStatus {
        node_name: record.node.clone(),
        ..NodeClaimStatus::default()
    };
    if let Some(l) = &record.launched {
        status.provider_id = Some(l.provider_id.clone());
        status.capacity = l.capacity.to_resource_list();
        status.allocatable = l.allocatable.to_resource_list();
        status.image_id = l.image_id.clone();
    }
    let (launched, registered, initialized) = (
        record.launched.is_some(),
        record.registered,
        record.initialized,
    );
    let launch = match (&beside.launch_error, launched) {
        (_, true) => holds(LAUNCHED),
        (Some(e), false) => unknown(LAUNCHED, "LaunchFailed", &truncated(e)),
        (None, false) => unknown(LAUNCHED, AWAITING.0, AWAITING.1),
    };
    let registration = match (registered, launched) {
        (true, _) => holds(REGISTERED),
        (false, true) => unknown(
            REGISTERED,
            "NodeNotFound",
            "Node not registered with cluster",
        ),
        (false, false) => unknown(REGISTERED, AWAITING.0, AWAITING.1),
    };
    let initialization = match (initialized, registered, &beside.initializing) {
        (true, ..) => holds(INITIALIZED),
        (false, true, Some((reason, message))) => unknown(INITIALIZED, reason, message),
        (false, true, None) => unknown(INITIALIZED, "NodeNotReady", "Node status is NotReady"),
        (false, false, _) => unknown(INITIALIZED, AWAITING.0, AWAITING.1),
    };
    // Ready sums the three as operatorpkg does; its message lists those not yet true, in the
    // order Karpenter's own writes leave them
    let waiting: &[&str] = match (launched, registered, initialized) {
        (true, true, true) => &[],
        (false, ..) => &[LAUNCHED, REGISTERED, INITIALIZED],
        (true, false, _) => &[INITIALIZED, REGISTERED],
        (true, true, false) => &[INITIALIZED],
    };
    let ready = if waiting.is_empty() {
        holds(READY)
    } else {
        let message: Vec<String> = waiting.iter().map(|t| format!("{t}=Unknown")).collect();
        unknown(READY, "ReconcilingDependents", &message.join(", "))
    };
    status.conditions = vec![launch, registration, initialization];
    match (registered, beside.inconsistent) {
        (true, false) => status.conditions.push(holds(CONSISTENT_STATE_FOUND)),
        (true, true) => status.conditions.push(Condition {
            message: "Consistency Check Failed".into(),
            ..condition(CONSISTENT_STATE_FOUND, false, "ConsistencyCheckFailed")
        }),
        (false, _) => {}
    }
    let because = |type_: &str, why: &str| Condition {
        message: why.into(),
        ..condition(type_, true, why)
    };
    if let Some(d) = record.drifted {
        status.conditions.push(because(DRIFTED, d.as_str()));
    }
    if let Some(r) = &beside.disruption {
        status.conditions.push(because(DISRUPTION_REASON, r));
    }
    if let Some(r) = &record.reboot {
        status.conditions.push(rebooting(r));
    }
    match beside.drained {
        Some(true) => status.conditions.push(holds(DRAINED)),
        Some(false) => status
            .conditions
            .push(unknown(DRAINED, "Draining", "Draining")),
        None => {}
    }
    match beside.detachment {
        Some(Detachment::Done) => status.conditions.push(holds(VOLUMES_DETACHED)),
        Some(Detachment::Awaiting) => status.conditions.push(unknown(
            VOLUMES_DETACHED,
            "AwaitingVolumeDetachment",
            "AwaitingVolumeDetachment",
        )),
        Some(Detachment::GraceElapsed) => status.conditions.push(Condition {
            message: "TerminationGracePeriodElapsed".into(),
            ..condition(VOLUMES_DETACHED, false, "TerminationGracePeriodElapsed")
        }),
        None => {}
    }
    if record.instance_terminating {
        status.conditions.push(holds(INSTANCE_TERMINATING));
    }
    if record.consolidatable {
        status.conditions.push(holds(CONSOLIDATABLE));
    }
    status.conditions.push(ready);
    status
}

/// The `Rebooting` condition of a reboot: True `RebootRequested` or `RebootIssued` while under
/// way, False with its outcome once over, the message naming what repair acted on until then.
fn rebooting(r: &Reboot) -> Condition {
    use condition_types::REBOOTING;
    let (status, reason, message) = match &r.phase {
        RebootPhase::Requested => (true, "RebootRequested", r.message.as_str()),
        RebootPhase::Issued(_) => (true, "RebootIssued", r.message.as_str()),
        RebootPhase::Ended {
            reason, message, ..
        } => (false, *reason, message.as_str()),
    };
    Condition {
        message: message.into(),
        ..condition(REBOOTING, status, reason)
    }
}

/// A reboot's drain bound as a NodeClaim's `karpenter.sh/reboot-termination-grace-period`
/// says it, read as Karpenter reads it: none without the annotation, else a Go duration
/// not below zero, or why not in Karpenter's words.
pub fn reboot_bound(object: &NodeClaim) -> Result<Option<Duration>, String> {
    let annotations = object.metadata.annotations.as_ref();
    let Some(value) = annotations.and_then(|a| a.get(labels::REBOOT_TERMINATION_GRACE_PERIOD))
    else {
        return Ok(None);
    };
    match kerf_api::duration::parse_go_duration_nanos(value) {
        Err(e) => Err(format!(
            "parsing reboot termination grace period {value:?}: {e}"
        )),
        Ok(n) if n < 0 => Err(format!(
            "reboot termination grace period must be non-negative, got {value:?}"
        )),
        Ok(n) => Ok(Some(Duration::from_nanos(n.unsigned_abs()))),
    }
}

/// A NodeClaim's reboot as its `Rebooting` condition and annotations record it (times in
/// seconds from the Unix epoch), for a controller that did not ask for it (after a restart,
/// or a takeover from Karpenter).
pub fn claim_reboot(object: &NodeClaim) -> Option<Reboot> {
    use condition_types::{INITIALIZED, REBOOTING};
    let conditions = &object.status.as_ref()?.conditions;
    let find = |t: &str| conditions.iter().find(|c| c.type_ == t);
    let since = |c: &Condition| {
        (c.last_transition_time.as_deref())
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .and_then(|t| u64::try_from(t.as_second()).ok())
            .map_or(Duration::ZERO, Duration::from_secs)
    };
    let c = find(REBOOTING)?;
    let annotations = object.metadata.annotations.as_ref();
    let annotation = |k: &str| annotations.and_then(|a| a.get(k)).cloned();
    let phase = match (c.status.as_str(), c.reason.as_str()) {
        ("True", "RebootRequested") => RebootPhase::Requested,
        ("True", "RebootIssued") => RebootPhase::Issued(find(INITIALIZED).map_or(since(c), since)),
        ("False", "RebootSucceeded") => RebootPhase::Ended {
            at: since(c),
            reason: "RebootSucceeded",
            message: c.message.clone(),
        },
        ("False", _) => RebootPhase::Ended {
            at: since(c),
            reason: "RebootFailed",
            message: c.message.clone(),
        },
        _ => return None,
    };
    Some(Reboot {
        phase,
        requested: since(c),
        message: c.message.clone(),
        drain_bound: reboot_bound(object),
        pre_boot_id: annotation(labels::REBOOT_PRE_BOOT_ID),
    })
}

/// A launch error as Karpenter puts it in a condition: at most 1,024 characters.
fn truncated(message: &str) -> String {
    if message.chars().count() <= 1024 {
        return message.to_string();
    }
    let cut: String = message.chars().take(1021).collect();
    format!("{cut}...")
}

/// The conditions a NodeClaim's status write stores, as operatorpkg keeps them: each
/// condition's transition time kept while its status stays (a new `Launched`, `Registered`,
/// `Initialized` or `Ready` dates from the NodeClaim's creation, any other from `now`), the
/// generation observed stamped on each, the conditions of types Kerf does not own (another
/// controller's) kept as stored, and the list ordered by transition time with `Ready` last.
pub fn nodeclaim_conditions(
    ours: Vec<Condition>,
    stored: &[Condition],
    now: Duration,
    generation: Option<i64>,
    created: Option<&str>,
) -> Vec<Condition> {
    use condition_types::*;
    let now = crate::clock::kubernetes_time(now);
    let mut out: Vec<Condition> = ours
        .into_iter()
        .map(|mut c| {
            let before = stored.iter().find(|p| p.type_ == c.type_);
            let dependent = [LAUNCHED, REGISTERED, INITIALIZED, READY].contains(&c.type_.as_str());
            c.last_transition_time = match before {
                Some(p) if p.status == c.status => p.last_transition_time.clone(),
                None if dependent => created.map(str::to_string),
                _ => None,
            }
            .or_else(|| Some(now.clone()));
            c.observed_generation = generation;
            c
        })
        .collect();
    out.extend(
        stored
            .iter()
            .filter(|c| !OWNED.contains(&c.type_.as_str()))
            .cloned(),
    );
    out.sort_by(|a, b| {
        let key = |c: &Condition| (c.type_ == READY, c.last_transition_time.clone());
        key(a).cmp(&key(b))
    });
    out
}

/// A NodePool's status (Karpenter's `nodepool/counter` and `nodepool/readiness`): the summed
/// capacity of its launched NodeClaims with their count under `nodes`, `ValidationSucceeded`
/// (`nodepool.validation`), `NodeClassReady` from its node class, and `Ready` while both are
/// true (operatorpkg's root condition: `UnhealthyDependents` naming those that are not).
///
/// `classes_resolved` says whether a controller resolves node classes into their status (the
/// AWS provider's); where none does (the kwok provider's EC2NodeClass stand-in, the
/// simulator), a class without `Ready` counts as ready, as it counts for launching.
pub fn nodepool_status(
    cluster: &Cluster,
    pool: &str,
    registration: Condition,
    class_generation: i64,
    classes_resolved: bool,
) -> NodePoolStatus {
    let mut capacity = Resources::default();
    let mut nodes = 0i64;
    for c in cluster.nodeclaims.values().filter(|c| c.node_pool == pool) {
        if let Some(l) = &c.launched {
            capacity.add(&l.capacity);
            nodes += 1;
        }
    }
    let mut resources = capacity.to_resource_list();
    resources.retain(|_, q| q.milli() != 0);
    resources.insert("nodes".into(), kerf_api::Quantity::from_units(nodes));
    let invalid = cluster.pool_invalid.get(pool);
    let mut validation = condition(
        "ValidationSucceeded",
        invalid.is_none(),
        if invalid.is_some() {
            "NodePoolValidationFailed"
        } else {
            "ValidationSucceeded"
        },
    );
    if let Some(message) = invalid {
        validation.message = message.clone();
    }
    let np = cluster.node_pools.get(pool);
    let class =
        np.and_then(|np| (cluster.node_classes).get(&np.spec.template.spec.node_class_ref.name));
    let class_ready = node_class_ready(class, classes_resolved);
    let unhealthy: Vec<String> = [&validation, &class_ready]
        .into_iter()
        .filter(|c| c.status != "True")
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect();
    let mut ready = condition(
        condition_types::READY,
        unhealthy.is_empty(),
        if unhealthy.is_empty() {
            "Ready"
        } else {
            "UnhealthyDependents"
        },
    );
    ready.message = unhealthy.join(", ");
    // Karpenter's registration health controller leaves a NodePool whose class is not there
    // as it was
    let registration = if class.is_some() {
        Some(registration)
    } else {
        (np.and_then(|np| np.status.as_ref()).into_iter())
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == registration.type_)
            .cloned()
    };
    NodePoolStatus {
        resources,
        nodes: Some(nodes),
        conditions: [validation, class_ready, ready]
            .into_iter()
            .chain(registration)
            .collect(),
        node_class_observed_generation: Some(class_generation),
    }
}

/// A NodePool's `NodeClassReady` from its node class (none: not there), as Karpenter's
/// `nodepool.readiness` sets it: false while the class is missing or being deleted, or not yet
/// `Ready` (with that condition's own reason and message when it is `Ready` False).
fn node_class_ready(class: Option<&EC2NodeClass>, classes_resolved: bool) -> Condition {
    const TYPE: &str = "NodeClassReady";
    let not_ready = |reason: &str, message: &str| {
        let mut c = condition(TYPE, false, reason);
        c.message = message.into();
        c
    };
    let Some(class) = class else {
        return not_ready("NodeClassNotFound", "NodeClass not found on cluster");
    };
    if class.metadata.deletion_timestamp.is_some() {
        return not_ready("NodeClassTerminating", "NodeClass is Terminating");
    }
    let ready = (class.status.as_ref()).and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == condition_types::READY)
    });
    match ready.map(|c| (c.status.as_str(), c)) {
        Some(("True", _)) => condition(TYPE, true, TYPE),
        Some(("False", c)) => not_ready(&c.reason, &c.message),
        None if !classes_resolved => condition(TYPE, true, TYPE),
        _ => not_ready("NodeClassReadinessUnknown", "Node Class Readiness Unknown"),
    }
}

/// A NodePool's status before its first reconcile: `status` with the conditions of
/// Karpenter's ready set (`ValidationSucceeded`, `NodeClassReady`, `Ready`) Unknown, awaiting
/// reconciliation, as operatorpkg initializes them.
pub fn nodepool_status_awaiting(status: &NodePoolStatus) -> NodePoolStatus {
    let mut out = status.clone();
    out.conditions = [
        "ValidationSucceeded",
        "NodeClassReady",
        condition_types::READY,
    ]
    .into_iter()
    .map(|t| Condition {
        type_: t.into(),
        status: "Unknown".into(),
        reason: AWAITING.0.into(),
        message: AWAITING.1.into(),
        last_transition_time: None,
        observed_generation: None,
    })
    .collect();
    out
}

/// The labels the NodeClaim object carries once launched (what `kubectl get nodeclaims`
/// shows): the instance type's labels (arch, os, family, size, …), its capacity type and
/// zone, as Karpenter writes them; Karpenter tells a NodeClaim that no longer meets its
/// NodePool's requirements by these labels.
pub fn launched_labels(l: &Launched) -> BTreeMap<String, String> {
    let mut out = l.labels.clone();
    out.insert(labels::INSTANCE_TYPE.to_string(), l.instance_type.clone());
    out.insert(
        labels::CAPACITY_TYPE.to_string(),
        l.capacity_type.as_str().to_string(),
    );
    out.insert(labels::ZONE.to_string(), l.zone.clone());
    out
}

/// The resources a NodeClaim requests (`spec.resources.requests`, those not zero): what its
/// node's consistency is checked on.
pub fn requested_names(object: &NodeClaim) -> Vec<String> {
    (object.spec.resources.requests.iter())
        .filter(|(_, q)| q.milli() != 0)
        .map(|(k, _)| k.clone())
        .collect()
}

/// A NodeClaim object as a record, for a controller that did not create it (after a
/// restart). `price` gives an offering's price per hour; `created` and `deleting` are the
/// object's timestamps in the shell's time.
pub fn claim_record(
    object: &NodeClaim,
    created: Duration,
    deleting: Option<Duration>,
    price: impl Fn(&str, &str, CapacityType) -> f64,
) -> ClaimRecord {
    let meta = &object.metadata;
    let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k)).cloned();
    let annotation = |k: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .cloned()
            .unwrap_or_default()
    };
    let versioned = |hash: &str, version: &str, ours: &str| {
        if annotation(version) == ours {
            annotation(hash)
        } else {
            String::new()
        }
    };
    let status = object.status.as_ref();
    let instance_types = object
        .spec
        .requirements
        .iter()
        .find(|r| r.key == labels::INSTANCE_TYPE && r.operator == kerf_api::Operator::In)
        .map(|r| r.values.clone())
        .unwrap_or_default();
    let launched = status.and_then(|s| {
        let provider_id = s.provider_id.clone()?;
        let instance_type = label(labels::INSTANCE_TYPE)?;
        let zone = label(labels::ZONE)?;
        let capacity_type = CapacityType::parse(&label(labels::CAPACITY_TYPE)?)?;
        let list = |l: &kerf_api::ResourceList| {
            Resources::from_quantities(l.iter().map(|(k, v)| (k, v.as_str())))
        };
        Some(Launched {
            price_per_hour: price(&instance_type, &zone, capacity_type),
            provider_id,
            // and the reservation it runs in, which expiry and drift read
            labels: [
                labels::INSTANCE_TYPE,
                labels::CAPACITY_RESERVATION_ID,
                labels::CAPACITY_RESERVATION_TYPE,
                labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
                labels::PLACEMENT_GROUP_ID,
            ]
            .into_iter()
            .filter_map(|k| label(k).map(|v| (k.to_string(), v)))
            .collect(),
            instance_type,
            zone,
            capacity_type,
            capacity: list(&s.capacity),
            allocatable: list(&s.allocatable),
            image_id: s.image_id.clone(),
            network: None,
        })
    });
    let drifted = status
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == condition_types::DRIFTED && c.status == "True")
        })
        .and_then(|c| DriftReason::parse(&c.reason));
    ClaimRecord {
        node_pool: label(labels::NODEPOOL).unwrap_or_default(),
        node_class: object.spec.node_class_ref.name.clone(),
        created,
        requirements: object.spec.requirements.clone(),
        taints: object.spec.taints.clone(),
        startup_taints: object.spec.startup_taints.clone(),
        instance_types,
        // a hash of another version (or none) is not comparable: never a reason to drift,
        // as in Karpenter
        node_pool_hash: versioned(
            labels::NODEPOOL_HASH,
            labels::NODEPOOL_HASH_VERSION,
            crate::hash::NODEPOOL_HASH_VERSION,
        ),
        node_class_hash: versioned(
            labels::EC2NODECLASS_HASH,
            labels::EC2NODECLASS_HASH_VERSION,
            crate::hash::EC2NODECLASS_HASH_VERSION,
        ),
        annotations: meta.annotations.clone().unwrap_or_default(),
        termination_grace_period: object.spec.termination_grace_period.map(|g| g.0),
        requested: requested_names(object),
        launched,
        node: status.and_then(|s| s.node_name.clone()),
        registered: is_true(status, condition_types::REGISTERED),
        initialized: is_true(status, condition_types::INITIALIZED),
        drifted,
        deletion_stored: deleting.is_some(),
        deleting,
        instance_terminating: is_true(status, condition_types::INSTANCE_TERMINATING),
        instance_terminating_stored: is_true(status, condition_types::INSTANCE_TERMINATING),
        consolidatable: is_true(status, condition_types::CONSOLIDATABLE),
        // a restarted node repair sets it again if the node is still unhealthy
        terminate_at: None,
        overlaid_prices: BTreeMap::new(),
        // read with the controllers' clock by the caller (see [`claim_reboot`])
        reboot: None,
    }
}

/// Whether a Node's `Ready` condition is `True`.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// When a Node's `Ready` condition last changed, in seconds from the Unix epoch as the
/// operator counts time.
fn ready_changed(node: &Node) -> Option<Duration> {
    let condition = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    let at = condition.last_transition_time.as_ref()?.0.as_millisecond();
    Some(Duration::from_millis(u64::try_from(at).ok()?))
}

/// An object's `metadata.creationTimestamp` on the controllers' clock (Unix time), if set.
pub fn created_at(meta: &ObjectMeta) -> Option<Duration> {
    let at = meta.creation_timestamp.as_ref()?.0.as_millisecond();
    Some(Duration::from_millis(u64::try_from(at).ok()?))
}

/// A Node's conditions as repair reads them (a condition without a transition time counts
/// from `now`).
fn node_conditions(node: &Node, now: Duration) -> Vec<crate::repair::NodeCondition> {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    (conditions.into_iter().flatten())
        .map(|c| crate::repair::NodeCondition {
            kind: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone().unwrap_or_default(),
            since: (c.last_transition_time.as_ref())
                .and_then(|t| u64::try_from(t.0.as_millisecond()).ok())
                .map_or(now, Duration::from_millis),
        })
        .collect()
}

/// A Node object as a node record (its NodeClaim is joined by provider id when applied).
pub fn node_record(node: &Node, now: Duration) -> NodeRecord {
    let spec = node.spec.as_ref();
    let status = node.status.as_ref();
    let ready = node_ready(node);
    let mut taints: Vec<Taint> = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(taint_of)
        .collect();
    // kube-scheduler reads a cordon as this taint (the node controller adds it too)
    if spec.and_then(|s| s.unschedulable).unwrap_or(false)
        && !taints.iter().any(|t| t.key == UNSCHEDULABLE_TAINT_KEY)
    {
        taints.push(Taint {
            key: UNSCHEDULABLE_TAINT_KEY.into(),
            value: None,
            effect: TaintEffect::NoSchedule,
            time_added: None,
        });
    }
    let resources = |list: Option<&BTreeMap<String, Quantity>>| {
        list.map(|m| Resources::from_quantities(m.iter().map(|(k, v)| (k, v.0.as_str()))))
            .unwrap_or_default()
    };
    NodeRecord {
        provider_id: spec.and_then(|s| s.provider_id.clone()).unwrap_or_default(),
        nodeclaim: None,
        labels: node.metadata.labels.clone().unwrap_or_default().into(),
        initialized_stored: (node.metadata.labels.as_ref())
            .and_then(|l| l.get(labels::INITIALIZED))
            .is_some_and(|v| v == "true"),
        taints,
        allocatable: resources(status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))),
        capacity: resources(status.and_then(|s| s.capacity.as_ref().or(s.allocatable.as_ref()))),
        ready,
        ready_changed: ready_changed(node).unwrap_or(now),
        requests: Resources::default(),
        last_pod_event: now,
        marked_consolidatable: None,
        do_not_disrupt: crate::disruption::rules::node_blocks(node.metadata.annotations.as_ref()),
        tainting: false,
        untainting: false,
        created: created_at(&node.metadata).unwrap_or(now),
        conditions: node_conditions(node, now),
        do_not_repair: (node.metadata.annotations.as_ref())
            .and_then(|a| a.get(labels::DO_NOT_REPAIR))
            .is_some_and(|v| v == "true"),
        finalizer: (node.metadata.finalizers.iter().flatten())
            .any(|f| f == labels::TERMINATION_FINALIZER),
        deleting: node.metadata.deletion_timestamp.is_some(),
        boot_id: (status.and_then(|s| s.node_info.as_ref()))
            .map(|i| i.boot_id.clone())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let t0 = Duration::from_secs(20_454 * 86_400);
        let mut first = vec![
            condition(condition_types::LAUNCHED, true, "Launched"),
            condition(condition_types::REGISTERED, false, "NotRegistered"),
        ];
        keep_transition_times(&mut first, &[], t0);
        let mut later = vec![
            condition(condition_types::LAUNCHED, true, "Launched"),
            condition(condition_types::REGISTERED, true, "Registered"),
            condition(condition_types::DRIFTED, true, "NodePoolDrifted"),
        ];
        keep_transition_times(&mut later, &first, t0 + Duration::from_secs(90));
        let times: Vec<_> = later
            .iter()
            .map(|c| c.last_transition_time.as_deref().unwrap_or("none"))
            .collect();
        assert_eq!(
            times,
            [
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:01:30Z",
                "2026-01-01T00:01:30Z"
            ]
        );
    }

    /// (status, reason, message) of each condition, by type.
    fn read(conditions: &[Condition]) -> BTreeMap<&str, (&str, &str, &str)> {
        conditions
            .iter()
            .map(|c| {
                let v = (c.status.as_str(), c.reason.as_str(), c.message.as_str());
                (c.type_.as_str(), v)
            })
            .collect()
    }

    /// The conditions Karpenter v1.15's lifecycle controller writes at each step (read from
    /// operatorpkg's condition set and the lifecycle's reconcilers): `Unknown` with its
    /// reasons until they hold, `Ready` summing them.
    #[test]
    fn a_nodeclaims_conditions_read_as_karpenters_through_its_lifecycle() {
        let object: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []},
        }))
        .unwrap();
        let mut record = claim_record(&object, Duration::ZERO, None, |_, _, _| 0.05);
        let none = ClaimConditions::default();
        let fresh = nodeclaim_status(&record, &none).conditions;
        let awaiting = ("Unknown", AWAITING.0, AWAITING.1);
        assert_eq!(
            read(&fresh),
            BTreeMap::from([
                ("Launched", awaiting),
                ("Registered", awaiting),
                ("Initialized", awaiting),
                (
                    "Ready",
                    (
                        "Unknown",
                        "ReconcilingDependents",
                        "Launched=Unknown, Registered=Unknown, Initialized=Unknown"
                    )
                ),
            ])
        );
        let failing = ClaimConditions {
            launch_error: Some("x".repeat(2000)),
            ..ClaimConditions::default()
        };
        let failed = nodeclaim_status(&record, &failing).conditions;
        assert_eq!(read(&failed)["Launched"].1, "LaunchFailed");
        assert_eq!(read(&failed)["Launched"].2.len(), 1024);

        record.launched = Some(Launched {
            provider_id: "aws:///us-east-1a/i-1".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
            price_per_hour: 0.05,
            capacity: Resources::default(),
            allocatable: Resources::default(),
            labels: BTreeMap::new(),
            image_id: None,
            network: None,
        });
        let launched = read(&nodeclaim_status(&record, &none).conditions)
            .into_iter()
            .map(|(t, v)| {
                (
                    t.to_string(),
                    (v.0.to_string(), v.1.to_string(), v.2.to_string()),
                )
            })
            .collect::<BTreeMap<_, _>>();
        let own = |s: &str, r: &str, m: &str| (s.to_string(), r.to_string(), m.to_string());
        assert_eq!(launched["Launched"], own("True", "Launched", ""));
        assert_eq!(
            launched["Registered"],
            own(
                "Unknown",
                "NodeNotFound",
                "Node not registered with cluster"
            )
        );
        assert_eq!(
            launched["Ready"],
            own(
                "Unknown",
                "ReconcilingDependents",
                "Initialized=Unknown, Registered=Unknown"
            )
        );

        record.registered = true;
        let tainted = ClaimConditions {
            initializing: Some((
                "StartupTaintsExist",
                "StartupTaint \"example.com/warming:NoSchedule\" still exists".into(),
            )),
            ..ClaimConditions::default()
        };
        let registered = nodeclaim_status(&record, &tainted).conditions;
        let registered = read(&registered);
        assert_eq!(registered["Registered"], ("True", "Registered", ""));
        assert_eq!(registered["ConsistentStateFound"].0, "True");
        assert_eq!(registered["Initialized"].1, "StartupTaintsExist");
        assert_eq!(registered["Ready"].2, "Initialized=Unknown");

        record.initialized = true;
        record.consolidatable = true;
        record.drifted = Some(DriftReason::AmiDrift);
        let ending = ClaimConditions {
            disruption: Some("Drifted".into()),
            drained: Some(false),
            ..ClaimConditions::default()
        };
        let done = nodeclaim_status(&record, &ending).conditions;
        let done = read(&done);
        assert_eq!(done["Ready"], ("True", "Ready", ""));
        assert_eq!(done["Drifted"], ("True", "AMIDrift", "AMIDrift"));
        assert_eq!(done["DisruptionReason"], ("True", "Drifted", "Drifted"));
        assert_eq!(done["Drained"], ("Unknown", "Draining", "Draining"));
        assert_eq!(done["Consolidatable"], ("True", "Consolidatable", ""));
        assert!(!done.contains_key("InstanceTerminating"));
    }

    /// A status write keeps what operatorpkg keeps: another controller's condition as stored,
    /// a new lifecycle condition dated from the NodeClaim's creation, the generation observed,
    /// and `Ready` last.
    #[test]
    fn a_status_write_keeps_another_writers_conditions() {
        let stored = vec![
            Condition {
                last_transition_time: Some("2026-12-01T00:00:05Z".into()),
                ..condition("example.com/Warm", true, "Warm")
            },
            Condition {
                last_transition_time: Some("2026-12-01T00:00:03Z".into()),
                ..holds(condition_types::LAUNCHED)
            },
            Condition {
                last_transition_time: Some("2026-12-01T00:00:03Z".into()),
                ..holds(condition_types::DRIFTED)
            },
        ];
        let ours = vec![
            holds(condition_types::LAUNCHED),
            unknown(condition_types::REGISTERED, "NodeNotFound", "x"),
            unknown(condition_types::READY, "ReconcilingDependents", "y"),
            holds(condition_types::CONSISTENT_STATE_FOUND),
        ];
        let now = Duration::from_secs(20_788 * 86_400 + 9); // 2026-12-01T00:00:09Z
        let out = nodeclaim_conditions(ours, &stored, now, Some(2), Some("2026-12-01T00:00:01Z"));
        let types: Vec<&str> = out.iter().map(|c| c.type_.as_str()).collect();
        // Drifted, Kerf's to clear, is gone; the other writer's stays
        assert_eq!(
            types,
            [
                "Registered",
                "Launched",
                "example.com/Warm",
                "ConsistentStateFound",
                "Ready"
            ]
        );
        let at = |t: &str| {
            out.iter()
                .find(|c| c.type_ == t)
                .and_then(|c| c.last_transition_time.clone())
                .unwrap()
        };
        assert_eq!(at("Registered"), "2026-12-01T00:00:01Z");
        assert_eq!(at("Launched"), "2026-12-01T00:00:03Z");
        assert_eq!(at("example.com/Warm"), "2026-12-01T00:00:05Z");
        assert_eq!(
            at("ConsistentStateFound"),
            crate::clock::kubernetes_time(now)
        );
        assert!(
            out.iter()
                .filter(|c| c.type_ != "example.com/Warm")
                .all(|c| c.observed_generation == Some(2))
        );
    }

    #[test]
    fn a_status_reads_back_as_the_record_it_came_from() {
        let object: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "labels": {
                "karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m5.large",
                "karpenter.sh/capacity-type": "spot", "topology.kubernetes.io/zone": "us-east-1a"},
                "annotations": {"karpenter.sh/nodepool-hash": "123", "karpenter.sh/nodepool-hash-version": "v3",
                    "karpenter.k8s.aws/ec2nodeclass-hash": "456", "karpenter.k8s.aws/ec2nodeclass-hash-version": "v5"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]}]},
        }))
        .unwrap();
        let mut record = claim_record(&object, Duration::ZERO, None, |_, _, _| 0.05);
        assert!(record.launched.is_none());
        assert_eq!(record.instance_types, ["m5.large", "m5.xlarge"]);
        assert_eq!(record.node_pool_hash, "123");
        assert_eq!(
            record.node_class_hash, "",
            "a hash of another version is not compared"
        );
        record.launched = Some(Launched {
            provider_id: "kwok://default-abcde".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
            price_per_hour: 0.05,
            capacity: Resources::from_quantities([(&"cpu".to_string(), "2")]),
            allocatable: Resources::from_quantities([(&"cpu".to_string(), "1930m")]),
            labels: BTreeMap::new(),
            image_id: None,
            network: None,
        });
        record.node = Some("default-abcde".into());
        record.registered = true;
        record.drifted = Some(DriftReason::NodePoolDrifted);
        let mut with_status = object.clone();
        with_status.status = Some(nodeclaim_status(&record, &ClaimConditions::default()));
        let back = claim_record(&with_status, Duration::ZERO, None, |_, _, _| 0.05);
        assert_eq!(back.node.as_deref(), Some("default-abcde"));
        assert!(back.registered && !back.initialized);
        assert_eq!(back.drifted, Some(DriftReason::NodePoolDrifted));
        let l = back.launched.expect("launched");
        assert_eq!(l.provider_id, "kwok://default-abcde");
        assert_eq!(l.capacity_type, CapacityType::Spot);
        assert_eq!(l.allocatable.cpu_millis, 1930);
        // every drift reason survives a restart, the cloud's as well as the NodePool's
        for reason in DriftReason::ALL {
            record.drifted = Some(reason);
            with_status.status = Some(nodeclaim_status(&record, &ClaimConditions::default()));
            let back = claim_record(&with_status, Duration::ZERO, None, |_, _, _| 0.05);
            assert_eq!(back.drifted, Some(reason));
        }

        // read back after its node (a restart, or a watch delivering the node first), it is
        // joined to the node by provider id, and the node is no longer counted on its own
        let mut cluster = Cluster::default();
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"providerID": "kwok://default-abcde"},
            "status": {"capacity": {"cpu": "2"}},
        }))
        .unwrap();
        cluster.apply_node(
            "n1".into(),
            node_record(&node, Duration::ZERO),
            Duration::ZERO,
        );
        assert_eq!(cluster.pool_usage("default").cpu_millis, 2000);
        let mut back = claim_record(&with_status, Duration::ZERO, None, |_, _, _| 0.05);
        back.node = None;
        cluster.apply_nodeclaim("default-abcde".into(), back);
        assert_eq!(
            cluster.nodes["n1"].nodeclaim.as_deref(),
            Some("default-abcde")
        );
        assert_eq!(
            cluster.nodeclaims["default-abcde"].node.as_deref(),
            Some("n1")
        );
        assert_eq!(cluster.pool_usage("default").cpu_millis, 2000);
    }
}
