//! Scenario files (`apiVersion: kerf.sh/v1alpha1`, `kind: Scenario`): the world at t=0, the
//! cloud's behaviour, and what happens when. Other tools write these, so the shape is a
//! contract and every error names the field path.

use std::path::Path;
use std::time::Duration;

use kerf_api::duration::GoDuration;
use serde::Deserialize;
use serde_json::Value;

/// A scenario that cannot be used, with the path of the problem.
#[derive(Debug, thiserror::Error)]
#[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct ScenarioError {
    /// Field path (`spec.events[2].scale.replicas`); empty for the file as a whole.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ScenarioError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// A scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scenario {
    /// Must be `kerf.sh/v1alpha1`.
    pub api_version: String,
    /// Must be `Scenario`.
    pub kind: String,
    /// The scenario's name.
    pub metadata: Metadata,
    /// What to simulate.
    pub spec: Spec,
}

impl Scenario {
    /// The zones the run offers: `spec.zones`, each one of the region's, or the region's
    /// first three.
    pub(crate) fn zones(&self) -> Result<Vec<String>, ScenarioError> {
        let region = &self.spec.region;
        let all = kerf_aws::catalog::zones(region)
            .map_err(|e| ScenarioError::new("spec.region", e.to_string()))?;
        if self.spec.zones.is_empty() {
            return Ok(all.iter().take(3).cloned().collect());
        }
        for (i, z) in self.spec.zones.iter().enumerate() {
            if !all.contains(z) {
                let message = format!("{z} is not a zone of {region}");
                return Err(ScenarioError::new(format!("spec.zones[{i}]"), message));
            }
        }
        Ok(self.spec.zones.clone())
    }

    /// The controllers' settings the scenario asks for: its feature gates and policies.
    pub(crate) fn settings(&self) -> kerf_core::controllers::Settings {
        let spec = &self.spec;
        let gates = &spec.feature_gates;
        kerf_core::controllers::Settings {
            epoch_unix: crate::clock::EPOCH_UNIX,
            registration_ttl: crate::world::REGISTRATION_TTL,
            spot_to_spot: gates.spot_to_spot_consolidation,
            node_repair: gates.node_repair,
            static_capacity: gates.static_capacity,
            capacity_buffer: gates.capacity_buffer,
            node_overlay: gates.node_overlay,
            pod_deletion_cost: gates.pod_deletion_cost_management,
            terminate_first_drift: gates.terminate_first_drift,
            terminate_first_repair: gates.terminate_first_repair,
            node_class_status: true,
            preference_policy: spec.preference_policy,
            min_values_policy: spec.min_values_policy,
            min_savings: kerf_core::disruption::search::MinSavings {
                per_hour: spec.consolidation_min_savings_per_hour,
                percent: spec.consolidation_min_savings_percent,
            },
            ..kerf_core::controllers::Settings::default()
        }
    }
}

/// Scenario metadata.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// Name shown in reports.
    pub name: String,
}

/// What to simulate.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Spec {
    /// AWS region (catalog, zones).
    #[serde(default = "default_region")]
    pub region: String,
    /// Zones to use; default the region's first three.
    #[serde(default)]
    pub zones: Vec<String>,
    /// Simulated time.
    pub duration: GoDuration,
    /// Seed of every random choice.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The cloud's behaviour.
    #[serde(default)]
    pub cloud: Cloud,
    /// Karpenter's feature gates, as `--feature-gates` sets them.
    #[serde(default)]
    pub feature_gates: FeatureGates,
    /// Karpenter's `PREFERENCE_POLICY`: `Respect` (default) or `Ignore`.
    #[serde(default, deserialize_with = "preference_policy")]
    pub preference_policy: kerf_scheduling::Preferences,
    /// Karpenter's `MIN_VALUES_POLICY`: `Strict` (default) or `BestEffort`.
    #[serde(default, deserialize_with = "min_values_policy")]
    pub min_values_policy: kerf_scheduling::MinValues,
    /// Kerf's `CONSOLIDATION_MIN_SAVINGS_PER_HOUR`: the least a consolidation move must
    /// save, in dollars per hour (0, the default: any saving).
    #[serde(default)]
    pub consolidation_min_savings_per_hour: f64,
    /// Kerf's `CONSOLIDATION_MIN_SAVINGS_PERCENT`: the same in percent of what the nodes it
    /// disrupts cost.
    #[serde(default)]
    pub consolidation_min_savings_percent: f64,
    /// Objects present at t=0: inline documents or `{file: path}`.
    #[serde(default)]
    pub manifests: Vec<Value>,
    /// Changes over time, in time order.
    #[serde(default)]
    pub events: Vec<Event>,
    /// Times at which Kerf crashes and starts again: everything it held in memory is lost
    /// and it rebuilds its state from the cluster's objects, as a restarted pod would.
    #[serde(default)]
    pub operator_restarts: Vec<GoDuration>,
    /// The API server's faults.
    #[serde(default)]
    pub api_server: ApiServer,
    /// How kube-scheduler's stand-in binds.
    #[serde(default)]
    pub kube_scheduler: KubeScheduler,
}

/// How the simulated kube-scheduler binds pending pods.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeScheduler {
    /// Whether it ignores Kerf's nominations, as the real one does (Karpenter's and Kerf's
    /// nominations are events and memory, not `status.nominatedNodeName`): pods are then bound
    /// in its queue's order (oldest first) onto the node it scores best, and pods planned onto
    /// a node may find it filled by others. Off by default: the stand-in tries a pod's
    /// nominated node first, which keeps the swarm's waits short.
    #[serde(default)]
    pub ignore_nominations: bool,
}

/// Faults of the simulated API server, drawn from the scenario's seed. Kerf keeps each write
/// that failed for a passing reason and tries it again with a backoff, as the operator does.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiServer {
    /// Windows in which the API server answers nothing. Kerf's writes fail and it sees no
    /// change; nothing else changes either (kubelets cannot register their nodes,
    /// kube-scheduler cannot bind, the workload controllers and `kubectl` cannot write), so
    /// what would have happened meanwhile happens when the window ends. The cloud keeps
    /// answering: launches and terminations go on, and spot interruption messages arrive.
    #[serde(default)]
    pub outages: Vec<Outage>,
    /// The chance (0–1) that a write of Kerf's is stored but its answer is lost: Kerf cannot
    /// tell it from a failure and writes it again.
    #[serde(default)]
    pub lost_responses: f64,
    /// The chance (0–1) that a write of Kerf's meets a conflict (409: the object changed
    /// meanwhile) and is not stored.
    #[serde(default)]
    pub conflicts: f64,
}

/// A window in which the API server is down.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Outage {
    /// When it goes down.
    pub from: GoDuration,
    /// When it answers again.
    pub until: GoDuration,
}

impl ApiServer {
    /// The end of the outage under way at `t`, if one is.
    pub fn down_at(&self, t: Duration) -> Option<Duration> {
        self.outages
            .iter()
            .find(|o| o.from.0 <= t && t < o.until.0)
            .map(|o| o.until.0)
    }
}

fn default_region() -> String {
    "us-east-1".into()
}

fn default_seed() -> u64 {
    1
}

fn preference_policy<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<kerf_scheduling::Preferences, D::Error> {
    let text = String::deserialize(d)?;
    kerf_scheduling::Preferences::parse(&text).map_err(serde::de::Error::custom)
}

fn min_values_policy<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<kerf_scheduling::MinValues, D::Error> {
    let text = String::deserialize(d)?;
    kerf_scheduling::MinValues::parse(&text).map_err(serde::de::Error::custom)
}

/// Karpenter's feature gates the simulated controllers honour.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct FeatureGates {
    /// Spot nodes may be replaced by cheaper spot nodes (given 15 cheaper instance types).
    #[serde(default)]
    pub spot_to_spot_consolidation: bool,
    /// Nodes whose Ready condition has not been True for 30 minutes are replaced.
    #[serde(default)]
    pub node_repair: bool,
    /// Static NodePools (`spec.replicas`) are kept at their replica count.
    #[serde(default)]
    pub static_capacity: bool,
    /// CapacityBuffers (autoscaling.x-k8s.io/v1beta1) keep room for their placeholder pods.
    #[serde(default)]
    pub capacity_buffer: bool,
    /// NodeOverlays are laid over the instance types' prices and capacity.
    #[serde(default)]
    pub node_overlay: bool,
    /// ReplicaSet pods get their node's rank as their pod-deletion-cost, which the simulated
    /// ReplicaSet controller reads when scaling in.
    #[serde(default)]
    pub pod_deletion_cost_management: bool,
    /// A drifted node of a static NodePool at its node limit, or one whose replacement
    /// needs its own slot in a full capacity reservation, is deleted before its replacement
    /// exists.
    #[serde(default)]
    pub terminate_first_drift: bool,
    /// The same for an unhealthy node.
    #[serde(default)]
    pub terminate_first_repair: bool,
}

/// The simulated cloud.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Cloud {
    /// Create → node registered.
    #[serde(default = "default_launch_delay")]
    pub launch_delay: GoDuration,
    /// Registered → Ready.
    #[serde(default = "default_ready_delay")]
    pub ready_delay: GoDuration,
    /// Up to this much more launch delay per instance, drawn from the scenario's seed.
    #[serde(default = "no_jitter")]
    pub launch_jitter: GoDuration,
    /// Up to this much more ready delay per node, drawn from the scenario's seed.
    #[serde(default = "no_jitter")]
    pub ready_jitter: GoDuration,
    /// Injected faults.
    #[serde(default)]
    pub faults: Faults,
    /// Windows in which offerings have no capacity.
    #[serde(default)]
    pub insufficient_capacity: Vec<CapacityWindow>,
    /// Spot interruptions.
    #[serde(default)]
    pub spot_interruptions: Vec<SpotInterruption>,
    /// Other instance notices: scheduled maintenance, stop and terminate, rebalance.
    #[serde(default)]
    pub notices: Vec<Notice>,
    /// Capacity reservations in the account: an EC2NodeClass whose
    /// `capacityReservationSelectorTerms` select one (by id, or by tags) may launch into it.
    #[serde(default)]
    pub reservations: Vec<CapacityReservation>,
}

/// A capacity reservation of the simulated account (an ODCR or a capacity block).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CapacityReservation {
    /// `cr-…`.
    pub id: String,
    /// The one instance type it holds.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
    /// How many instances it holds.
    pub count: u32,
    /// `default` (an On-Demand Capacity Reservation) or `capacity-block`.
    #[serde(default = "default_reservation_type", rename = "type")]
    pub reservation_type: String,
    /// Its tags, for selector terms that select by tag.
    #[serde(default)]
    pub tags: std::collections::BTreeMap<String, String>,
    /// When it ends (simulated time); a capacity block is drained 40 minutes before.
    #[serde(default)]
    pub end: Option<GoDuration>,
    /// Whether its owner may take capacity back (an interruptible reservation: a
    /// `capacityReservationInterruption` notice reclaims one of its instances).
    #[serde(default)]
    pub interruptible: bool,
}

fn default_reservation_type() -> String {
    "default".into()
}

/// Faults the simulated cloud injects, drawn from the scenario's seed.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Faults {
    /// The chance (0–1) that a launched instance never registers its node (a broken AMI or
    /// user data): Kerf must give up on the NodeClaim after the 15-minute registration TTL.
    #[serde(default)]
    pub never_register: f64,
    /// The chance (0–1) that a registered node never reports Ready (a CNI that never
    /// starts): only node repair (`featureGates.NodeRepair`) replaces it.
    #[serde(default)]
    pub never_ready: f64,
}

fn no_jitter() -> GoDuration {
    GoDuration(Duration::ZERO)
}

impl Default for Cloud {
    fn default() -> Cloud {
        Cloud {
            launch_delay: default_launch_delay(),
            ready_delay: default_ready_delay(),
            launch_jitter: no_jitter(),
            ready_jitter: no_jitter(),
            faults: Faults::default(),
            insufficient_capacity: Vec::new(),
            spot_interruptions: Vec::new(),
            notices: Vec::new(),
            reservations: Vec::new(),
        }
    }
}

fn default_launch_delay() -> GoDuration {
    GoDuration(Duration::from_secs(30))
}

fn default_ready_delay() -> GoDuration {
    GoDuration(Duration::from_secs(15))
}

/// Offerings without capacity for a while; absent fields match everything.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CapacityWindow {
    /// `spot` or `on-demand`.
    pub capacity_type: Option<String>,
    /// Instance types.
    #[serde(default)]
    pub instance_types: Vec<String>,
    /// Zones.
    #[serde(default)]
    pub zones: Vec<String>,
    /// Start (default 0s).
    pub from: Option<GoDuration>,
    /// End (default: the end of the scenario).
    pub until: Option<GoDuration>,
}

impl CapacityWindow {
    /// Whether the window is open at any time in `[from, to]`.
    pub fn overlaps(&self, from: Duration, to: Duration) -> bool {
        let start = self.from.map_or(Duration::ZERO, |d| d.0);
        start <= to && self.until.is_none_or(|u| u.0 > from)
    }

    /// Whether an offering has no capacity at `t`.
    pub fn covers(
        &self,
        capacity_type: &str,
        instance_type: &str,
        zone: &str,
        t: Duration,
    ) -> bool {
        let from = self.from.map_or(Duration::ZERO, |d| d.0);
        let in_time = t >= from && self.until.is_none_or(|u| t < u.0);
        in_time
            && self
                .capacity_type
                .as_deref()
                .is_none_or(|c| c == capacity_type)
            && (self.instance_types.is_empty()
                || self.instance_types.iter().any(|i| i == instance_type))
            && (self.zones.is_empty() || self.zones.iter().any(|z| z == zone))
    }
}

/// Spot interruption warnings at a time.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SpotInterruption {
    /// When the warning arrives (the instance is reclaimed two minutes later).
    pub at: GoDuration,
    /// How many spot nodes (oldest first).
    #[serde(default = "one")]
    pub count: u32,
    /// Only nodes of this NodePool.
    pub nodepool: Option<String>,
    /// Only nodes of this instance type.
    pub instance_type: Option<String>,
}

/// An instance notice at a time, delivered as the EventBridge message AWS sends.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Notice {
    /// When the message arrives.
    pub at: GoDuration,
    /// What it announces.
    pub kind: NoticeKind,
    /// How many nodes (oldest first).
    #[serde(default = "one")]
    pub count: u32,
    /// Only nodes of this NodePool.
    pub nodepool: Option<String>,
    /// Only nodes of this instance type.
    pub instance_type: Option<String>,
}

/// The notices the simulated cloud sends besides spot interruptions.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum NoticeKind {
    /// AWS Health scheduled change (maintenance, retirement): the instance keeps running.
    ScheduledChange,
    /// The instance is stopping: it goes away a minute later.
    Stopping,
    /// The instance was terminated: it is gone.
    Terminated,
    /// A rebalance recommendation: nothing happens to the instance.
    Rebalance,
    /// The owner of an interruptible capacity reservation takes an instance's capacity
    /// back: reclaimed two minutes later, and the reservation holds one fewer.
    CapacityReservationInterruption,
}

fn one() -> u32 {
    1
}

/// One change at a time.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Event {
    /// When.
    pub at: GoDuration,
    /// Set a workload's replicas.
    pub scale: Option<Scale>,
    /// Create or update an object.
    pub apply: Option<Value>,
    /// Delete an object.
    pub delete: Option<ObjectRef>,
    /// Set a condition on nodes, as a node monitoring agent reports a fault.
    pub node_condition: Option<NodeConditionFault>,
}

/// A condition set on nodes (a fault for node repair to act on).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeConditionFault {
    /// How many nodes (the first by name, of `nodePool` when given).
    #[serde(default = "one")]
    pub nodes: u32,
    /// Only nodes of this NodePool.
    #[serde(default)]
    pub node_pool: Option<String>,
    /// The condition's type (`Ready`, `AcceleratedHardwareReady`, `KernelReady`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Its status.
    pub status: String,
    /// Its reason.
    #[serde(default)]
    pub reason: String,
}

/// A scale change.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scale {
    /// Deployment, ReplicaSet, StatefulSet or Job.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// New replica count.
    pub replicas: i64,
}

/// An object to delete.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ObjectRef {
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace (ignored for cluster-scoped kinds).
    #[serde(default = "default_namespace")]
    pub namespace: String,
}

fn default_namespace() -> String {
    "default".into()
}

/// The file's one document, or an error that says what the file holds instead: users hand
/// `kerf simulate` the manifests they would hand `kerf schedule`, and "unknown field `spec`"
/// would not tell them that a scenario wraps its manifests.
fn one_scenario_document(text: &str) -> Result<Value, ScenarioError> {
    let mut documents = kerf_api::manifest::read_documents(text).map_err(|e| {
        let at = match e.line {
            0 => String::new(),
            line => format!("line {line} column {}", e.column),
        };
        ScenarioError::new(at, format!("cannot parse YAML: {}", e.message))
    })?;
    let others: Vec<String> = documents
        .iter()
        .filter(|d| !d.kind().is_empty() && d.kind() != "Scenario")
        .map(|d| match d.name() {
            "" => d.kind().to_string(),
            name => format!("{}/{name}", d.kind()),
        })
        .collect();
    if !others.is_empty() {
        const SHOWN: usize = 3;
        let mut listed = others[..others.len().min(SHOWN)].join(", ");
        if others.len() > SHOWN {
            listed.push_str(&format!(" and {} more", others.len() - SHOWN));
        }
        return Err(ScenarioError::new(
            "",
            format!(
                "not a scenario: it holds {listed}. A scenario is one document with \
                 `apiVersion: kerf.sh/v1alpha1` and `kind: Scenario` that lists its manifests \
                 under `spec.manifests` (examples in scenarios/); `kerf schedule -f FILE` \
                 plans nodes for manifests as they are"
            ),
        ));
    }
    match documents.len() {
        0 => Err(ScenarioError::new("", "the file holds no document")),
        1 => Ok(documents.remove(0).value),
        n => Err(ScenarioError::new(
            "",
            format!("holds {n} documents: a scenario file holds one"),
        )),
    }
}

/// Reads a scenario; `{file: path}` manifests are read relative to `base` (or refused when
/// there is no base, as for built-in scenarios) and expanded into their documents.
pub fn parse(text: &str, base: Option<&Path>) -> Result<Scenario, ScenarioError> {
    let value = one_scenario_document(text)?;
    let mut scenario: Scenario = serde_path_to_error::deserialize(&value).map_err(|e| {
        let path = e.path().to_string();
        ScenarioError::new(
            if path == "." { "<root>".into() } else { path },
            e.into_inner().to_string(),
        )
    })?;
    if scenario.api_version != "kerf.sh/v1alpha1" {
        return Err(ScenarioError::new("apiVersion", "must be kerf.sh/v1alpha1"));
    }
    if scenario.kind != "Scenario" {
        return Err(ScenarioError::new("kind", "must be Scenario"));
    }
    let mut manifests = Vec::new();
    for (i, m) in scenario.spec.manifests.iter().enumerate() {
        let path = format!("spec.manifests[{i}]");
        match m.get("file").and_then(Value::as_str) {
            Some(file) if m.as_object().is_some_and(|o| o.len() == 1) => {
                let Some(base) = base else {
                    return Err(ScenarioError::new(
                        path,
                        "file manifests need a scenario file on disk",
                    ));
                };
                let full = base.join(file);
                let text = std::fs::read_to_string(&full).map_err(|e| {
                    ScenarioError::new(&path, format!("cannot read {}: {e}", full.display()))
                })?;
                let docs = kerf_api::manifest::read_documents(&text).map_err(|e| {
                    ScenarioError::new(
                        &path,
                        format!("{}:{}:{}: {}", full.display(), e.line, e.column, e.message),
                    )
                })?;
                manifests.extend(docs.into_iter().map(|d| d.value));
            }
            _ => manifests.push(m.clone()),
        }
    }
    scenario.spec.manifests = manifests;
    check(&scenario)?;
    Ok(scenario)
}

fn check(s: &Scenario) -> Result<(), ScenarioError> {
    if s.spec.duration.0.is_zero() {
        return Err(ScenarioError::new("spec.duration", "must be more than 0s"));
    }
    let faults = &s.spec.cloud.faults;
    for (field, p) in [
        ("neverRegister", faults.never_register),
        ("neverReady", faults.never_ready),
    ] {
        if !(0.0..=1.0).contains(&p) {
            return Err(ScenarioError::new(
                format!("spec.cloud.faults.{field}"),
                "must be a probability between 0 and 1",
            ));
        }
    }
    let api = &s.spec.api_server;
    for (field, p) in [
        ("lostResponses", api.lost_responses),
        ("conflicts", api.conflicts),
    ] {
        if !(0.0..=1.0).contains(&p) {
            return Err(ScenarioError::new(
                format!("spec.apiServer.{field}"),
                "must be a probability between 0 and 1",
            ));
        }
    }
    for (i, o) in api.outages.iter().enumerate() {
        if o.until.0 <= o.from.0 {
            return Err(ScenarioError::new(
                format!("spec.apiServer.outages[{i}].until"),
                "must be after from",
            ));
        }
    }
    let mut last = Duration::ZERO;
    for (i, e) in s.spec.events.iter().enumerate() {
        let path = format!("spec.events[{i}]");
        if e.at.0 < last {
            return Err(ScenarioError::new(
                format!("{path}.at"),
                "events must be in time order",
            ));
        }
        last = e.at.0;
        let actions = usize::from(e.scale.is_some())
            + usize::from(e.apply.is_some())
            + usize::from(e.delete.is_some())
            + usize::from(e.node_condition.is_some());
        if actions != 1 {
            return Err(ScenarioError::new(
                &path,
                "must have exactly one of scale, apply, delete, nodeCondition",
            ));
        }
        if let Some(c) = &e.node_condition
            && !matches!(c.status.as_str(), "True" | "False" | "Unknown")
        {
            return Err(ScenarioError::new(
                format!("{path}.nodeCondition.status"),
                "must be True, False or Unknown",
            ));
        }
        if let Some(sc) = &e.scale {
            if sc.replicas < 0 {
                return Err(ScenarioError::new(
                    format!("{path}.scale.replicas"),
                    "must be ≥ 0",
                ));
            }
            if !matches!(
                sc.kind.as_str(),
                "Deployment" | "ReplicaSet" | "StatefulSet" | "Job"
            ) {
                return Err(ScenarioError::new(
                    format!("{path}.scale.kind"),
                    "must be Deployment, ReplicaSet, StatefulSet or Job",
                ));
            }
        }
    }
    for (i, w) in s.spec.cloud.insufficient_capacity.iter().enumerate() {
        if let Some(ct) = &w.capacity_type
            && !["spot", "on-demand"].contains(&ct.as_str())
        {
            return Err(ScenarioError::new(
                format!("spec.cloud.insufficientCapacity[{i}].capacityType"),
                "must be spot or on-demand",
            ));
        }
    }
    for (i, m) in s.spec.manifests.iter().enumerate() {
        if m.get("kind").and_then(Value::as_str).is_none() {
            return Err(ScenarioError::new(
                format!("spec.manifests[{i}].kind"),
                "required",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: kerf.sh/v1alpha1
kind: Scenario
metadata: {name: t}
spec:
  duration: 1h
  cloud:
    insufficientCapacity:
    - {capacityType: spot, from: 10m, until: 30m}
  manifests:
  - {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: []}}
  events:
  - {at: 5m, scale: {kind: Deployment, name: inflate, replicas: 3}}
"#;

    #[test]
    fn scenarios_read_with_defaults() {
        let s = parse(GOOD, None).unwrap();
        assert_eq!(s.spec.region, "us-east-1");
        assert_eq!(s.spec.seed, 1);
        assert_eq!(s.spec.cloud.launch_delay.0, Duration::from_secs(30));
        let w = &s.spec.cloud.insufficient_capacity[0];
        assert!(w.covers("spot", "m5.large", "us-east-1a", Duration::from_secs(600)));
        assert!(!w.covers("spot", "m5.large", "us-east-1a", Duration::from_secs(1800)));
        assert!(!w.covers(
            "on-demand",
            "m5.large",
            "us-east-1a",
            Duration::from_secs(900)
        ));
    }

    #[test]
    fn errors_name_the_field_path() {
        let bad = GOOD.replace("replicas: 3", "replicas: -1");
        assert_eq!(
            parse(&bad, None).unwrap_err().to_string(),
            "spec.events[0].scale.replicas: must be ≥ 0"
        );
        let bad = GOOD.replace("duration: 1h", "duration: 1h\n  colour: blue");
        let err = parse(&bad, None).unwrap_err().to_string();
        assert!(err.contains("unknown field `colour`"), "{err}");
        let bad = GOOD.replace("at: 5m", "at: 5 minutes");
        assert!(
            parse(&bad, None)
                .unwrap_err()
                .path
                .starts_with("spec.events[0].at")
        );
        let bad = GOOD.replace("{file: x}", "").replace(
            "  - {apiVersion: v1",
            "  - {file: pools.yaml}\n  - {apiVersion: v1",
        );
        assert_eq!(parse(&bad, None).unwrap_err().path, "spec.manifests[0]");
        // manifests given in place of a scenario are named, with where they belong
        let manifests = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\n---\n\
                         apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b}\n";
        let err = parse(manifests, None).unwrap_err().to_string();
        assert!(
            err.starts_with("not a scenario: it holds NodePool/a, Deployment/b.")
                && err.contains("spec.manifests")
                && err.contains("kerf schedule -f"),
            "{err}"
        );
        let twice = format!("{GOOD}---\n{GOOD}");
        assert_eq!(
            parse(&twice, None).unwrap_err().to_string(),
            "holds 2 documents: a scenario file holds one"
        );
        assert_eq!(
            parse("# nothing\n", None).unwrap_err().to_string(),
            "the file holds no document"
        );
        // a chance above one would panic the random draw: it is refused by name
        let bad = GOOD.replace("  cloud:\n", "  cloud:\n    faults: {neverReady: 2}\n");
        assert_eq!(
            parse(&bad, None).unwrap_err().to_string(),
            "spec.cloud.faults.neverReady: must be a probability between 0 and 1"
        );
        let bad = GOOD.replace("  cloud:\n", "  apiServer: {conflicts: 1.5}\n  cloud:\n");
        assert_eq!(
            parse(&bad, None).unwrap_err().to_string(),
            "spec.apiServer.conflicts: must be a probability between 0 and 1"
        );
        let bad = GOOD.replace(
            "  cloud:\n",
            "  apiServer: {outages: [{from: 10m, until: 5m}]}\n  cloud:\n",
        );
        assert_eq!(
            parse(&bad, None).unwrap_err().to_string(),
            "spec.apiServer.outages[0].until: must be after from"
        );
    }
}
