//! Karpenter's Prometheus metrics, with its names, types and labels, so that dashboards and
//! alerts built for Karpenter read Kerf. Counters and summaries are kept as the controllers
//! act; gauges (nodes, pods, NodePools, offerings) are read off the cluster state when the
//! metrics are rendered, so nothing is stored twice. Rendered as OpenMetrics text for the
//! operator's `/metrics` and the simulator's `--metrics FILE`.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use kerf_api::labels;
use kerf_scheduling::resources::Resources;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::cluster::{Cluster, PodOwner};
use crate::unavailable::UnavailableOfferings;

/// A metric's labels, in the order Karpenter writes them.
pub type Labels = Vec<(&'static str, String)>;
type Counters = Family<Labels, Counter>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// How far back a summary's quantiles look (client_golang's default `MaxAge`).
const SUMMARY_WINDOW: Duration = Duration::from_secs(600);
/// The quantiles Karpenter's summaries report.
const QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];

/// A summary as client_golang keeps one: quantiles over the last [`SUMMARY_WINDOW`], sum and
/// count over all time.
#[derive(Debug, Default)]
struct Summary {
    recent: VecDeque<(Duration, f64)>,
    sum: f64,
    count: u64,
}

impl Summary {
    fn observe(&mut self, now: Duration, value: f64) {
        self.recent.push_back((now, value));
        self.sum += value;
        self.count += 1;
        self.forget(now);
    }

    fn forget(&mut self, now: Duration) {
        while self
            .recent
            .front()
            .is_some_and(|(t, _)| now.saturating_sub(*t) > SUMMARY_WINDOW)
        {
            self.recent.pop_front();
        }
    }

    /// The value at quantile `q` of the recent observations (NaN when none, as client_golang).
    fn quantile(&self, q: f64) -> f64 {
        let mut values: Vec<f64> = self.recent.iter().map(|(_, v)| *v).collect();
        if values.is_empty() {
            return f64::NAN;
        }
        values.sort_by(f64::total_cmp);
        let rank = (q * (values.len() - 1) as f64).round() as usize;
        values[rank.min(values.len() - 1)]
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} summary");
        for q in QUANTILES {
            let _ = writeln!(
                out,
                "{name}{{quantile=\"{q}\"}} {}",
                number(self.quantile(q))
            );
        }
        let _ = writeln!(out, "{name}_sum {}", number(self.sum));
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

/// A float as OpenMetrics writes it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v}")
    }
}

/// The counters, histograms and summaries the controllers keep.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    nodeclaims_created: Counters,
    nodeclaims_terminated: Counters,
    nodeclaims_disrupted: Counters,
    nodes_created: Counters,
    nodes_terminated: Counters,
    decisions: Counters,
    decisions_by_node_pool: Counters,
    scheduling_duration: Histogram,
    pods_startup: Summary,
    nodes_termination: Summary,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Every counter at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let mut counter = |name: &str, help: &str| {
            let family = Counters::default();
            registry.register(name, help, family.clone());
            family
        };
        let nodeclaims_created = counter(
            "karpenter_nodeclaims_created",
            "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created and the owning nodepool.",
        );
        let nodeclaims_terminated = counter(
            "karpenter_nodeclaims_terminated",
            "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity type, and zone.",
        );
        let nodeclaims_disrupted = counter(
            "karpenter_nodeclaims_disrupted",
            "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted and the owning nodepool.",
        );
        let nodes_created = counter(
            "karpenter_nodes_created",
            "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
        );
        let nodes_terminated = counter(
            "karpenter_nodes_terminated",
            "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
        );
        let decisions = counter(
            "karpenter_voluntary_disruption_decisions",
            "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
        );
        let decisions_by_node_pool = counter(
            "karpenter_voluntary_disruption_decisions_by_nodepool",
            "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, reason, and consolidation type.",
        );
        let scheduling_duration = Histogram::new(exponential_buckets(0.005, 2.0, 16));
        registry.register(
            "karpenter_provisioner_scheduling_duration_seconds",
            "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
            scheduling_duration.clone(),
        );
        Metrics {
            registry,
            nodeclaims_created,
            nodeclaims_terminated,
            nodeclaims_disrupted,
            nodes_created,
            nodes_terminated,
            decisions,
            decisions_by_node_pool,
            scheduling_duration,
            pods_startup: Summary::default(),
            nodes_termination: Summary::default(),
        }
    }

    /// A NodeClaim was created, for provisioning or as a disruption's replacement.
    pub fn nodeclaim_created(&self, reason: &str, node_pool: &str, min_values_relaxed: bool) {
        self.nodeclaims_created
            .get_or_create(&vec![
                ("reason", reason.to_string()),
                ("nodepool", node_pool.to_string()),
                ("min_values_relaxed", min_values_relaxed.to_string()),
            ])
            .inc();
    }

    /// A NodeClaim is gone.
    pub fn nodeclaim_terminated(&self, node_pool: &str, capacity_type: &str, zone: &str) {
        self.nodeclaims_terminated
            .get_or_create(&vec![
                ("nodepool", node_pool.to_string()),
                ("capacity_type", capacity_type.to_string()),
                ("zone", zone.to_string()),
            ])
            .inc();
    }

    /// A NodeClaim is being disrupted (`reason` as Karpenter's: underutilized, empty, drifted,
    /// expired, interrupted, unhealthy).
    pub fn nodeclaim_disrupted(&self, reason: &str, node_pool: &str, capacity_type: &str) {
        self.nodeclaims_disrupted
            .get_or_create(&vec![
                ("reason", reason.to_string()),
                ("nodepool", node_pool.to_string()),
                ("capacity_type", capacity_type.to_string()),
            ])
            .inc();
    }

    /// A NodeClaim's node registered.
    pub fn node_created(&self, node_pool: &str, zone: &str) {
        self.nodes_created
            .get_or_create(&vec![
                ("nodepool", node_pool.to_string()),
                ("zone", zone.to_string()),
            ])
            .inc();
    }

    /// A node Kerf manages was deleted, `took` after its deletion began.
    pub fn node_terminated(&mut self, node_pool: &str, zone: &str, now: Duration, took: Duration) {
        self.nodes_terminated
            .get_or_create(&vec![
                ("nodepool", node_pool.to_string()),
                ("zone", zone.to_string()),
            ])
            .inc();
        self.nodes_termination.observe(now, took.as_secs_f64());
    }

    /// A voluntary disruption command started.
    pub fn decision(
        &self,
        decision: &str,
        reason: &str,
        consolidation_type: &str,
        node_pools: &[&str],
    ) {
        let labels = |extra: Option<&str>| {
            let mut l: Labels = Vec::new();
            if let Some(p) = extra {
                l.push(("nodepool", p.to_string()));
            }
            l.push(("decision", decision.to_string()));
            l.push(("reason", reason.to_string()));
            l.push(("consolidation_type", consolidation_type.to_string()));
            l
        };
        self.decisions.get_or_create(&labels(None)).inc();
        for p in node_pools {
            self.decisions_by_node_pool
                .get_or_create(&labels(Some(p)))
                .inc();
        }
    }

    /// A scheduling simulation took this long (wall clock).
    pub fn scheduled(&self, took: Duration) {
        self.scheduling_duration.observe(took.as_secs_f64());
    }

    /// A pod started running `took` after Kerf first saw it waiting.
    pub fn pod_started(&mut self, now: Duration, took: Duration) {
        self.pods_startup.observe(now, took.as_secs_f64());
    }

    /// Everything as OpenMetrics text: the kept metrics, the gauges read off `cluster` at
    /// `now`, the eligible-node counts of the last disruption pass, and the shell's own
    /// registries (`extra`), ending in `# EOF`.
    pub fn render(&mut self, view: &StateView<'_>, extra: &[&Registry]) -> String {
        let mut out = String::new();
        let _ = encode_registry(&mut out, &self.registry);
        let gauges = gauges(view);
        let _ = encode_registry(&mut out, &gauges);
        for r in extra {
            let _ = encode_registry(&mut out, r);
        }
        self.pods_startup.forget(view.now);
        self.nodes_termination.forget(view.now);
        self.pods_startup.render(
            &mut out,
            "karpenter_pods_startup_duration_seconds",
            "The time from pod creation until the pod is running.",
        );
        self.nodes_termination.render(
            &mut out,
            "karpenter_nodes_termination_duration_seconds",
            "The time taken between a node's deletion request and the removal of its finalizer",
        );
        let _ = encode_eof(&mut out);
        out
    }
}

/// What the gauges are read from.
pub struct StateView<'a> {
    /// The cluster.
    pub cluster: &'a Cluster,
    /// Offerings out of capacity.
    pub unavailable: &'a UnavailableOfferings,
    /// Nodes each disruption reason could act on, at the last pass.
    pub eligible: &'a BTreeMap<String, usize>,
    /// The controllers' time.
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
        v.push((name.replace(['.', '/', '-'], "_"), *n as f64));
    }
    v
}

/// The node labels Karpenter copies onto its node and pod metrics, by metric label.
const NODE_LABELS: [(&str, &str); 6] = [
    ("arch", labels::ARCH),
    ("capacity_type", labels::CAPACITY_TYPE),
    ("instance_type", labels::INSTANCE_TYPE),
    ("os", labels::OS),
    ("region", labels::REGION),
    ("zone", labels::ZONE),
];

/// A NodePool label for a node Kerf did not launch.
const NO_NODE_POOL: &str = "N/A";

fn register_gauges(registry: &mut Registry, name: &str, help: &str) -> Gauges {
    let family = Gauges::default();
    registry.register(name, help, family.clone());
    family
}

fn gauges(view: &StateView<'_>) -> Registry {
    let cluster = view.cluster;
    let mut r = Registry::default();
    let allocatable = register_gauges(
        &mut r,
        "karpenter_nodes_allocatable",
        "Node allocatable are the resources allocatable by nodes.",
    );
    let pod_requests = register_gauges(
        &mut r,
        "karpenter_nodes_total_pod_requests",
        "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
    );
    let daemon_requests = register_gauges(
        &mut r,
        "karpenter_nodes_total_daemon_requests",
        "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
    );
    let overhead = register_gauges(
        &mut r,
        "karpenter_nodes_system_overhead",
        "Node system daemon overhead are the resources reserved for system overhead, the difference between the node's capacity and allocatable values are reported by the status.",
    );
    let mut daemon: BTreeMap<&str, Resources> = BTreeMap::new();
    for p in cluster.pods.values() {
        if let (PodOwner::DaemonSet, Some(n)) = (p.owner, p.node.as_deref()) {
            daemon.entry(n).or_default().add(&p.requests);
        }
    }
    let empty = Resources::default();
    for (name, node) in &cluster.nodes {
        let mut base: Labels = vec![("node_name", name.clone())];
        let pool = node.labels.get(labels::NODEPOOL);
        base.push((
            "nodepool",
            pool.cloned().unwrap_or_else(|| NO_NODE_POOL.into()),
        ));
        for (metric_label, key) in NODE_LABELS {
            base.push((
                metric_label,
                node.labels.get(key).cloned().unwrap_or_default(),
            ));
        }
        let system = node.capacity.saturating_sub(&node.allocatable);
        for (family, resources) in [
            (&allocatable, &node.allocatable),
            (&pod_requests, &node.requests),
            (
                &daemon_requests,
                daemon.get(name.as_str()).unwrap_or(&empty),
            ),
            (&overhead, &system),
        ] {
            for (resource, value) in resource_values(resources) {
                let mut l = base.clone();
                l.insert(0, ("resource_type", resource));
                family.get_or_create(&l).set(value);
            }
        }
    }

    let pods_state = register_gauges(
        &mut r,
        "karpenter_pods_state",
        "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type and pod phase.",
    );
    for p in cluster.pods.values() {
        let meta = &p.pod.metadata;
        let node = p.node.as_deref().and_then(|n| cluster.nodes.get(n));
        let node_label = |key: &str| {
            node.and_then(|n| n.labels.get(key))
                .cloned()
                .unwrap_or_default()
        };
        let owner = meta
            .owner_references
            .as_deref()
            .and_then(|o| o.first())
            .map(|o| format!("{}/{}", o.kind, o.name))
            .unwrap_or_default();
        let phase = p
            .pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".into());
        let l: Labels = vec![
            ("name", meta.name.clone().unwrap_or_default()),
            ("namespace", meta.namespace.clone().unwrap_or_default()),
            ("owner", owner),
            ("node", p.node.clone().unwrap_or_default()),
            ("nodepool", node_label(labels::NODEPOOL)),
            ("zone", node_label(labels::ZONE)),
            ("arch", node_label(labels::ARCH)),
            ("capacity_type", node_label(labels::CAPACITY_TYPE)),
            ("instance_type", node_label(labels::INSTANCE_TYPE)),
            ("phase", phase),
        ];
        pods_state.get_or_create(&l).set(1.0);
    }

    let usage = register_gauges(
        &mut r,
        "karpenter_nodepools_usage",
        "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and resource type.",
    );
    let limit = register_gauges(
        &mut r,
        "karpenter_nodepools_limit",
        "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name and resource type.",
    );
    for (name, pool) in &cluster.node_pools {
        for (resource, value) in resource_values(&cluster.pool_usage(name)) {
            usage
                .get_or_create(&vec![
                    ("nodepool", name.clone()),
                    ("resource_type", resource),
                ])
                .set(value);
        }
        for (resource, q) in &pool.spec.limits {
            let scale = if resource == "cpu" { 1000.0 } else { 1.0 };
            let value = if resource == "cpu" {
                q.milli() as f64 / scale
            } else {
                q.units_ceil() as f64
            };
            limit
                .get_or_create(&vec![
                    ("nodepool", name.clone()),
                    ("resource_type", resource.replace(['.', '/', '-'], "_")),
                ])
                .set(value);
        }
    }

    let eligible = register_gauges(
        &mut r,
        "karpenter_voluntary_disruption_eligible_nodes",
        "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
    );
    for (reason, n) in view.eligible {
        eligible
            .get_or_create(&vec![("reason", reason.clone())])
            .set(*n as f64);
    }
    let node_count = register_gauges(
        &mut r,
        "karpenter_cluster_state_node_count",
        "Current count of nodes in cluster state",
    );
    node_count
        .get_or_create(&Vec::new())
        .set(cluster.nodes.len() as f64);

    let price = register_gauges(
        &mut r,
        "karpenter_cloudprovider_instance_type_offering_price_estimate",
        "Instance type offering estimated hourly price used when making informed decisions on node cost calculation, based on instance type, capacity type, and zone.",
    );
    let available = register_gauges(
        &mut r,
        "karpenter_cloudprovider_instance_type_offering_available",
        "Instance type offering availability, based on instance type, capacity type, and zone",
    );
    let cpu = register_gauges(
        &mut r,
        "karpenter_cloudprovider_instance_type_cpu_cores",
        "VCPUs cores for a given instance type.",
    );
    let memory = register_gauges(
        &mut r,
        "karpenter_cloudprovider_instance_type_memory_bytes",
        "Memory, in bytes, for a given instance type.",
    );
    for options in cluster.instance_types.values() {
        for t in options.iter() {
            let name = vec![("instance_type", t.name.clone())];
            cpu.get_or_create(&name)
                .set(t.capacity.cpu_millis as f64 / 1000.0);
            memory
                .get_or_create(&name)
                .set(t.capacity.memory_bytes as f64);
            for o in &t.offerings {
                let l: Labels = vec![
                    ("instance_type", t.name.clone()),
                    ("capacity_type", o.capacity_type.clone()),
                    ("zone", o.zone.clone()),
                ];
                price.get_or_create(&l).set(o.price_per_hour);
                let up = o.available
                    && !view.unavailable.is_unavailable(
                        &o.capacity_type,
                        &t.name,
                        &o.zone,
                        view.now,
                    );
                available.get_or_create(&l).set(f64::from(u8::from(up)));
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::Summary;
    use std::time::Duration;

    #[test]
    fn summary_quantiles_cover_the_last_ten_minutes() {
        let mut s = Summary::default();
        let at = Duration::from_secs;
        s.observe(at(0), 100.0);
        for (i, v) in [1.0, 2.0, 3.0, 4.0, 5.0].into_iter().enumerate() {
            s.observe(at(700 + i as u64), v);
        }
        assert_eq!(s.count, 6);
        assert_eq!(s.sum, 115.0);
        assert_eq!(s.quantile(0.0), 1.0);
        assert_eq!(s.quantile(0.5), 3.0);
        assert_eq!(s.quantile(1.0), 5.0);
        let mut out = String::new();
        s.render(&mut out, "x_seconds", "help");
        assert!(out.contains("# TYPE x_seconds summary\n"), "{out}");
        assert!(out.contains("x_seconds{quantile=\"0.9\"} 5\n"), "{out}");
        assert!(out.contains("x_seconds_count 6\n"), "{out}");
        assert!(Summary::default().quantile(0.5).is_nan());
    }
}
