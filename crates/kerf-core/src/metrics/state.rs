//! The gauges Karpenter's metrics controllers set from its cluster state (nodes, pods,
//! NodePools, offerings, the scheduler's and disruption's last passes), read here off the
//! controllers' state at each render, so a gone object's series goes with it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::labels;
use kerf_api::nodepool::DisruptionReason;
use kerf_scheduling::resources::Resources;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::families::{self, NODE_LABEL_KEYS};
use super::{Labels, Spec};
use crate::cluster::{Cluster, PodOwner, PodRecord, split_pod_key};
use crate::unavailable::UnavailableOfferings;

type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// The families read off the state at each render (the rest are kept as they happen).
const READ_OFF: [&Spec; 32] = [
    &families::CLUSTER_STATE_NODE_COUNT,
    &families::CLUSTER_STATE_SYNCED,
    &families::CLUSTER_STATE_UNSYNCED_TIME_SECONDS,
    &families::CLUSTER_UTILIZATION_PERCENT,
    &families::CLOUDPROVIDER_INSTANCE_TYPE_CPU_CORES,
    &families::CLOUDPROVIDER_INSTANCE_TYPE_MEMORY_BYTES,
    &families::CLOUDPROVIDER_INSTANCE_TYPE_OFFERING_AVAILABLE,
    &families::CLOUDPROVIDER_INSTANCE_TYPE_OFFERING_PRICE_ESTIMATE,
    &families::NODEPOOLS_ALLOWED_DISRUPTIONS,
    &families::NODEPOOLS_NODES_CONSUMING_BUDGETS,
    &families::NODEPOOLS_COST,
    &families::NODEPOOLS_LIMIT,
    &families::NODEPOOLS_USAGE,
    &families::NODES_ALLOCATABLE,
    &families::NODES_TOTAL_POD_REQUESTS,
    &families::NODES_TOTAL_POD_LIMITS,
    &families::NODES_TOTAL_DAEMON_REQUESTS,
    &families::NODES_TOTAL_DAEMON_LIMITS,
    &families::NODES_SYSTEM_OVERHEAD,
    &families::NODES_CURRENT_LIFETIME_SECONDS,
    &families::PODS_STATE,
    &families::PODS_UNBOUND_TIME_SECONDS,
    &families::PODS_UNSTARTED_TIME_SECONDS,
    &families::PODS_PROVISIONING_UNBOUND_TIME_SECONDS,
    &families::PODS_PROVISIONING_UNSTARTED_TIME_SECONDS,
    &families::PODS_PROVISIONING_SCHEDULING_UNDECIDED_TIME_SECONDS,
    &families::SCHEDULER_IGNORED_PODS_COUNT,
    &families::SCHEDULER_PENDING_PODS_BY_EFFECTIVE_ZONE_COUNT,
    &families::SCHEDULER_QUEUE_DEPTH,
    &families::SCHEDULER_UNFINISHED_WORK_SECONDS,
    &families::SCHEDULER_UNSCHEDULABLE_PODS_COUNT,
    &families::VOLUNTARY_DISRUPTION_ELIGIBLE_NODES,
];

/// Whether a family is read off the state rather than kept.
pub(super) fn is_read_off_state(spec: &Spec) -> bool {
    READ_OFF.iter().any(|s| s.name == spec.name)
}

/// A NodePool's disruption budget for one reason, at the last disruption pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetReading {
    /// Nodes the budget lets be disrupted at once (before those already disrupting).
    pub allowed: usize,
    /// Nodes taking from it now (being deleted, tainted by a command, or not Ready).
    pub consuming: usize,
    /// Nodes it counts (the ones its percentages are of).
    pub nodes: usize,
}

/// What the provisioner's last pass left.
#[derive(Clone, Debug, Default)]
pub struct SchedulingReading {
    /// Which pass it was (Karpenter labels each solve with an id).
    pub pass: u64,
    /// Pods it could not place.
    pub unschedulable: usize,
}

/// What the gauges are read from.
pub struct StateView<'a> {
    /// The cluster.
    pub cluster: &'a Cluster,
    /// Offerings out of capacity.
    pub unavailable: &'a UnavailableOfferings,
    /// Nodes each disruption reason could act on, at the last pass.
    pub eligible: &'a BTreeMap<String, usize>,
    /// Each NodePool's budgets by reason, at the last disruption pass.
    pub budgets: &'a BTreeMap<(String, DisruptionReason), BudgetReading>,
    /// The provisioner's last pass.
    pub scheduling: &'a SchedulingReading,
    /// Since when the shell's view of the API server has not been whole (a watch relisting),
    /// if it is not.
    pub unsynced_since: Option<Duration>,
    /// The instant the metrics are rendered at.
    pub now: Duration,
}

/// A resource's metric label (`ephemeral-storage` → `ephemeral_storage`) and value (cpu in
/// cores, memory in bytes), as Karpenter writes them.
fn resource_values(r: &Resources) -> Vec<(String, f64)> {
    let mut v = vec![
        ("cpu".to_string(), r.cpu_millis as f64 / 1000.0),
        ("memory".to_string(), r.memory_bytes as f64),
        (
            "ephemeral_storage".to_string(),
            r.ephemeral_storage_bytes as f64,
        ),
        ("pods".to_string(), r.pods as f64),
    ];
    for (name, n) in &r.extended {
        v.push((resource_label(name), *n as f64));
    }
    v
}

/// A resource name as a metric label value: lower case, `-` as `_`.
fn resource_label(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

fn register(registry: &mut Registry, spec: &Spec) -> Gauges {
    let family = Gauges::default();
    registry.register(spec.family_name(), spec.family_help(), family.clone());
    family
}

/// A gauge family of `spec` with a value setter by label values.
struct Setter<'a> {
    spec: &'a Spec,
    family: Gauges,
}

impl Setter<'_> {
    fn set(&self, values: &[&str], value: f64) {
        self.family
            .get_or_create(&self.spec.labels(values))
            .set(value);
    }
}

/// Registers every state family in a fresh registry, in [`READ_OFF`]'s order.
fn setters(registry: &mut Registry) -> BTreeMap<&'static str, Setter<'static>> {
    READ_OFF
        .iter()
        .map(|spec| {
            let family = register(registry, spec);
            (spec.name, Setter { spec, family })
        })
        .collect()
}

/// Every state gauge, read off `view`.
pub(super) fn gauges(view: &StateView<'_>) -> Registry {
    let mut registry = Registry::default();
    let g = setters(&mut registry);
    let gauge = |spec: &Spec| &g[spec.name];
    let cluster = view.cluster;
    let secs = |since: Duration| view.now.saturating_sub(since).as_secs_f64();

    gauge(&families::CLUSTER_STATE_NODE_COUNT).set(&[], cluster.nodes.len() as f64);
    gauge(&families::CLUSTER_STATE_SYNCED)
        .set(&[], f64::from(u8::from(view.unsynced_since.is_none())));
    gauge(&families::CLUSTER_STATE_UNSYNCED_TIME_SECONDS)
        .set(&[], view.unsynced_since.map_or(0.0, secs));

    nodes(view, &g);
    pods(view, &g);

    for (name, pool) in &cluster.node_pools {
        let mut usage = resource_values(&cluster.pool_usage(name));
        let count = (cluster.nodeclaims.values())
            .filter(|c| &c.node_pool == name)
            .count();
        usage.push(("nodes".into(), count as f64));
        for (resource, value) in usage {
            gauge(&families::NODEPOOLS_USAGE).set(&[name, &resource], value);
        }
        for (resource, q) in &pool.spec.limits {
            let value = if resource == "cpu" {
                q.milli() as f64 / 1000.0
            } else {
                q.units_ceil() as f64
            };
            gauge(&families::NODEPOOLS_LIMIT).set(&[name, &resource_label(resource)], value);
        }
        let cost: f64 = (cluster.nodeclaims.values())
            .filter(|c| &c.node_pool == name)
            .filter_map(|c| c.launched.as_ref())
            .map(|l| l.price_per_hour)
            .sum();
        gauge(&families::NODEPOOLS_COST).set(&[name], cost);
    }
    for ((pool, reason), b) in view.budgets {
        let reason = &reason.as_str().to_lowercase();
        gauge(&families::NODEPOOLS_ALLOWED_DISRUPTIONS).set(&[pool, reason], b.allowed as f64);
        gauge(&families::NODEPOOLS_NODES_CONSUMING_BUDGETS)
            .set(&[pool, reason], b.consuming as f64);
    }
    for (reason, n) in view.eligible {
        gauge(&families::VOLUNTARY_DISRUPTION_ELIGIBLE_NODES).set(&[reason], *n as f64);
    }

    let offerings = gauge(&families::CLOUDPROVIDER_INSTANCE_TYPE_OFFERING_AVAILABLE);
    let prices = gauge(&families::CLOUDPROVIDER_INSTANCE_TYPE_OFFERING_PRICE_ESTIMATE);
    for options in cluster.instance_types.values() {
        for t in options.iter() {
            gauge(&families::CLOUDPROVIDER_INSTANCE_TYPE_CPU_CORES)
                .set(&[&t.name], t.capacity.cpu_millis as f64 / 1000.0);
            gauge(&families::CLOUDPROVIDER_INSTANCE_TYPE_MEMORY_BYTES)
                .set(&[&t.name], t.capacity.memory_bytes as f64);
            for o in &t.offerings {
                let l = [o.capacity_type.as_str(), t.name.as_str(), o.zone.as_str()];
                prices.set(&l, o.price_per_hour);
                let up = o.available
                    && !view.unavailable.is_unavailable(
                        &o.capacity_type,
                        &t.name,
                        &o.zone,
                        view.now,
                    );
                offerings.set(&l, f64::from(u8::from(up)));
            }
        }
    }
    registry
}

/// A pod's limits as Karpenter adds them up for its node metrics: its containers' (and
/// sidecars'), or the largest init container if larger, plus the overhead.
fn pod_limits(pod: &Pod) -> Resources {
    let Some(spec) = &pod.spec else {
        return Resources::default();
    };
    let limits = |c: &k8s_openapi::api::core::v1::Container| {
        let list = c.resources.as_ref().and_then(|r| r.limits.as_ref());
        Resources::from_quantities(list.into_iter().flatten().map(|(k, v)| (k, v.0.as_str())))
    };
    let mut sum = Resources::default();
    for c in &spec.containers {
        sum.add(&limits(c));
    }
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        if c.restart_policy.as_deref() == Some("Always") {
            sum.add(&limits(c));
        } else {
            init_peak = init_peak.max(&limits(c));
        }
    }
    let mut total = sum.max(&init_peak);
    if let Some(overhead) = &spec.overhead {
        total.add(&Resources::from_quantities(
            overhead.iter().map(|(k, v)| (k, v.0.as_str())),
        ));
    }
    total
}

fn nodes(view: &StateView<'_>, g: &BTreeMap<&'static str, Setter<'static>>) {
    let cluster = view.cluster;
    let mut daemon: BTreeMap<&str, (Resources, Resources)> = BTreeMap::new();
    let mut limits: BTreeMap<&str, Resources> = BTreeMap::new();
    for p in cluster.pods.values() {
        let Some(n) = p.node.as_deref() else { continue };
        let l = pod_limits(&p.shape);
        limits.entry(n).or_default().add(&l);
        if p.owner == PodOwner::DaemonSet {
            let d = daemon.entry(n).or_default();
            d.0.add(&p.requests);
            d.1.add(&l);
        }
    }
    let (mut allocatable, mut requested) = (Resources::default(), Resources::default());
    let empty = (Resources::default(), Resources::default());
    for (name, node) in &cluster.nodes {
        allocatable.add(&node.allocatable);
        requested.add(&node.requests);
        let mut values: Vec<&str> = NODE_LABEL_KEYS
            .iter()
            .map(|(_, key)| node.labels.get(*key).map(String::as_str).unwrap_or(""))
            .collect();
        values.push(name);
        // Node.status.phase, which kubelets no longer set
        values.push("");
        values.push(if node.nodeclaim.is_some() {
            "true"
        } else {
            "false"
        });
        g[families::NODES_CURRENT_LIFETIME_SECONDS.name]
            .set(&values, view.now.saturating_sub(node.created).as_secs_f64());
        let (daemon_requests, daemon_limits) = daemon.get(name.as_str()).unwrap_or(&empty);
        let pod_limits = limits.get(name.as_str()).cloned().unwrap_or_default();
        let overhead = node.capacity.saturating_sub(&node.allocatable);
        for (spec, resources) in [
            (&families::NODES_ALLOCATABLE, &node.allocatable),
            (&families::NODES_TOTAL_POD_REQUESTS, &node.requests),
            (&families::NODES_TOTAL_POD_LIMITS, &pod_limits),
            (&families::NODES_TOTAL_DAEMON_REQUESTS, daemon_requests),
            (&families::NODES_TOTAL_DAEMON_LIMITS, daemon_limits),
            (&families::NODES_SYSTEM_OVERHEAD, &overhead),
        ] {
            for (resource, value) in resource_values(resources) {
                let mut l = values.clone();
                l.push(&resource);
                g[spec.name].set(&l, value);
            }
        }
    }
    let used: BTreeMap<String, f64> = resource_values(&requested).into_iter().collect();
    for (resource, total) in resource_values(&allocatable) {
        if total > 0.0 {
            let share = 100.0 * used.get(&resource).copied().unwrap_or(0.0) / total;
            g[families::CLUSTER_UTILIZATION_PERCENT.name].set(&[&resource], share);
        }
    }
}

/// A pod's owner as Karpenter's pod metrics name it:
/// `/apis/<apiVersion>/namespaces/<namespace>/<kind>s/<name>`.
fn owner_path(pod: &Pod) -> String {
    let meta = &pod.metadata;
    let Some(o) = meta.owner_references.as_deref().and_then(|o| o.first()) else {
        return String::new();
    };
    format!(
        "/apis/{}/namespaces/{}/{}s/{}",
        o.api_version,
        meta.namespace.as_deref().unwrap_or(""),
        o.kind.to_lowercase(),
        o.name
    )
}

/// The zone a pending pod can only go to, `flexible` when it may go to several, `none` when
/// its zone terms leave none (Karpenter's effective zone).
fn effective_zone(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    let mut zones: Option<BTreeSet<String>> = None;
    if let Some(z) = spec
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|s| s.get(labels::ZONE))
    {
        zones = Some(BTreeSet::from([z.clone()]));
    }
    let terms = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| &r.node_selector_terms);
    if let Some(terms) = terms {
        // the terms are alternatives: the zones any of them allows (a term without a zone
        // allows every zone)
        let mut union = BTreeSet::new();
        let mut any_zone = false;
        for t in terms {
            let r = t
                .match_expressions
                .iter()
                .flatten()
                .find(|e| e.key == labels::ZONE && e.operator == "In");
            match r {
                Some(e) => union.extend(e.values.iter().flatten().cloned()),
                None => any_zone = true,
            }
        }
        if !any_zone && !terms.is_empty() {
            zones = Some(match zones {
                Some(z) => z.intersection(&union).cloned().collect(),
                None => union,
            });
        }
    }
    match zones {
        None => "flexible".into(),
        Some(z) if z.is_empty() => "none".into(),
        Some(z) if z.len() == 1 => z.into_iter().next().unwrap_or_default(),
        Some(_) => "flexible".into(),
    }
}

fn pods(view: &StateView<'_>, g: &BTreeMap<&'static str, Setter<'static>>) {
    let cluster = view.cluster;
    let secs = |since: Duration| view.now.saturating_sub(since).as_secs_f64();
    let mut by_zone: BTreeMap<String, usize> = BTreeMap::new();
    let (mut ignored, mut waiting) = (0, 0);
    for (key, p) in &cluster.pods {
        let pod = &*p.shape;
        let (namespace, name) = split_pod_key(key);
        let node = p.node.as_deref().and_then(|n| cluster.nodes.get(n));
        let node_label = |key: &str| {
            node.and_then(|n| n.labels.get(key))
                .map(String::as_str)
                .unwrap_or("")
        };
        let phase = p.phase.as_deref().unwrap_or("Pending");
        let ready = p.ready;
        let bool_text = |b: bool| if b { "true" } else { "false" };
        let owner = owner_path(pod);
        g[families::PODS_STATE.name].set(
            &[
                node_label(labels::ARCH),
                node_label(labels::CAPACITY_TYPE),
                node_label(labels::INSTANCE_TYPE),
                bool_text(node.is_some_and(|n| n.labels.contains_key(labels::NODEPOOL))),
                name,
                namespace,
                p.node.as_deref().unwrap_or(""),
                node_label(labels::NODEPOOL),
                &owner,
                phase,
                bool_text(ready),
                bool_text(p.node.is_some()),
                node_label(labels::ZONE),
            ],
            1.0,
        );
        pod_times(p, [name, namespace], phase, ready, &secs, g);
        if p.node.is_none() && phase == "Pending" {
            if p.volume_problem.is_some() && p.nominated.is_none() {
                ignored += 1;
            }
            if p.wants_capacity() {
                waiting += 1;
            }
            *by_zone.entry(effective_zone(pod)).or_default() += 1;
        }
    }
    const CONTROLLER: &str = "provisioner";
    g[families::SCHEDULER_IGNORED_PODS_COUNT.name].set(&[], ignored as f64);
    for (zone, n) in &by_zone {
        g[families::SCHEDULER_PENDING_PODS_BY_EFFECTIVE_ZONE_COUNT.name]
            .set(&[CONTROLLER, zone], *n as f64);
    }
    let pass = view.scheduling.pass.to_string();
    g[families::SCHEDULER_QUEUE_DEPTH.name].set(&[CONTROLLER, &pass], waiting as f64);
    g[families::SCHEDULER_UNSCHEDULABLE_PODS_COUNT.name]
        .set(&[CONTROLLER], view.scheduling.unschedulable as f64);
}

/// A waiting pod's time gauges: since its creation, and since Kerf first found it a place.
fn pod_times(
    p: &PodRecord,
    key: [&str; 2],
    phase: &str,
    ready: bool,
    secs: &dyn Fn(Duration) -> f64,
    g: &BTreeMap<&'static str, Setter<'static>>,
) {
    let terminal = matches!(phase, "Succeeded" | "Failed");
    if terminal {
        return;
    }
    let dynamic = if p
        .shape
        .spec
        .as_ref()
        .is_some_and(|s| s.resource_claims.as_ref().is_some_and(|c| !c.is_empty()))
    {
        "true"
    } else {
        "false"
    };
    let with_dynamic = [dynamic, key[0], key[1]];
    if p.node.is_none() {
        g[families::PODS_UNBOUND_TIME_SECONDS.name].set(&with_dynamic, secs(p.created));
        if let Some(at) = p.schedulable_since {
            g[families::PODS_PROVISIONING_UNBOUND_TIME_SECONDS.name].set(&with_dynamic, secs(at));
        }
        if p.decided.is_none() && p.wants_capacity() {
            g[families::PODS_PROVISIONING_SCHEDULING_UNDECIDED_TIME_SECONDS.name]
                .set(&key, secs(p.pending_since));
        }
    }
    if !ready {
        g[families::PODS_UNSTARTED_TIME_SECONDS.name].set(&key, secs(p.created));
        if let Some(at) = p.schedulable_since {
            g[families::PODS_PROVISIONING_UNSTARTED_TIME_SECONDS.name].set(&key, secs(at));
        }
    }
}
