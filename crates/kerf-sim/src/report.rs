//! What a run reports: the JSON document (a contract), the terminal summary, and a
//! self-contained HTML page with charts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::scenario::Scenario;

/// A node at the end of the run.
#[derive(Clone, Debug, Serialize)]
pub struct FinalNode {
    /// Node name (the NodeClaim's name while it has not registered).
    pub name: String,
    /// Its NodeClaim.
    pub nodeclaim: String,
    /// Its NodePool.
    pub nodepool: String,
    /// Instance type.
    pub instance_type: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// Zone.
    pub zone: String,
    /// Price per hour.
    pub price_per_hour: f64,
    /// Pods bound to it (daemonsets left out).
    pub pods: Vec<String>,
}

/// The state at the end.
#[derive(Clone, Debug, Serialize)]
pub struct Final {
    /// Nodes.
    pub nodes: Vec<FinalNode>,
    /// Pods not bound.
    pub pending_pods: Vec<String>,
    /// What the nodes cost per hour.
    pub cost_per_hour: f64,
}

/// Sums over the run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    /// Dollars spent on instances.
    pub cost: f64,
    /// A floor no cluster could go below, as sampled: at each timeline sample, the
    /// linear-programming bound of packing the workload pods anew onto the instance types
    /// their NodePools allow (requirements, taints, weights, daemonset overhead, limits),
    /// held until the next sample.
    pub lower_bound_cost: f64,
    /// Instances launched.
    pub nodes_launched: usize,
    /// Instances terminated.
    pub nodes_terminated: usize,
    /// Pods removed from nodes that went away.
    pub pods_evicted: usize,
    /// Instances that never registered (injected by `spec.cloud.faults`).
    #[serde(skip_serializing_if = "is_zero")]
    pub faults_injected: usize,
    /// Times Kerf crashed and restarted (`spec.operatorRestarts`).
    #[serde(skip_serializing_if = "is_zero")]
    pub operator_restarts: usize,
    /// Kerf's writes that failed or lost their answer (`spec.apiServer`), each tried again.
    #[serde(skip_serializing_if = "is_zero")]
    pub api_writes_failed: usize,
    /// The longest a pod waited for a node.
    pub max_pod_pending_seconds: f64,
    /// The pod that waited longest.
    pub slowest_pod: Option<String>,
    /// Share of node-seconds on spot.
    pub spot_node_seconds_share: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One point of the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the start.
    pub t: f64,
    /// Launched instances.
    pub nodes: usize,
    /// Of which spot.
    pub spot_nodes: usize,
    /// Pods not bound.
    pub pending_pods: usize,
    /// What the instances cost per hour.
    pub cost_per_hour: f64,
    /// The same, split by NodePool and capacity type (only the non-empty ones).
    pub by_pool: Vec<PoolSample>,
}

/// One NodePool's instances of one capacity type at a sample.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PoolSample {
    /// The NodePool.
    pub nodepool: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// Launched instances.
    pub nodes: usize,
    /// What they cost per hour.
    pub cost_per_hour: f64,
}

/// A pod's wait for a node, from when it was left without one until it was bound (or the
/// run ended).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Wait {
    /// `namespace/name`.
    pub pod: String,
    /// Seconds since the start when the wait began.
    pub since: f64,
    /// When it ended.
    pub until: f64,
}

/// A NodeClaim Kerf took away during the run: by a disruption command (with its reason),
/// by expiry, or for any other cause its NodeClaim's deletion had.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Removal {
    /// The NodeClaim.
    pub nodeclaim: String,
    /// Its Node (none if it never registered).
    pub node: Option<String>,
    /// Its NodePool.
    pub nodepool: String,
    /// Its instance type.
    pub instance_type: String,
    /// Why: a disruption method's reason (`Drifted`, `Underutilized`, `Empty`,
    /// `Unhealthy`), `Expired`, `Interrupted` (a spot interruption or another cloud
    /// notice), or `Deleted` for any other deletion (garbage collection, a NodePool
    /// removed, a static NodePool scaled down).
    pub reason: String,
    /// Seconds since the start when it was decided (the command, or the deletion).
    pub decided: f64,
    /// When its instance was terminated; none if it still ran at the end.
    pub terminated: Option<f64>,
}

/// Another run's timeline, drawn over a report's own.
#[derive(Clone, Debug, Serialize)]
pub struct Beside {
    /// What the other run is (the legend's words).
    pub label: String,
    /// Its samples.
    pub timeline: Vec<Sample>,
}

/// How many of the longest waits a report keeps.
pub const LONGEST_WAITS: usize = 5;

/// Everything a run reports.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Simulated seconds.
    pub duration_seconds: f64,
    /// The end state.
    #[serde(rename = "final")]
    pub end: Final,
    /// Sums.
    pub totals: Totals,
    /// The wall-clock time the run starts at (the log's `time` fields count from here).
    pub started_at: String,
    /// Samples over time.
    pub timeline: Vec<Sample>,
    /// The longest waits for a node, longest first.
    pub longest_waits: Vec<Wait>,
    /// The NodeClaims Kerf took away, in the order it decided to.
    pub removals: Vec<Removal>,
    /// Another run's timeline the page draws over this one's (`kerf plan`: the cluster
    /// without the change); none for a run on its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beside: Option<Beside>,
    /// The log records.
    pub events: Vec<Value>,
    /// Karpenter's metrics at the end, as OpenMetrics text (`kerf simulate --metrics`); not
    /// in the JSON report, since the scheduling durations in it are wall-clock times.
    #[serde(skip)]
    pub metrics: String,
}

impl Report {
    /// Assembles a report.
    pub fn new(
        scenario: &Scenario,
        nodes: Vec<FinalNode>,
        pending_pods: Vec<String>,
        totals: Totals,
        timeline: Vec<Sample>,
        longest_waits: Vec<Wait>,
        events: Vec<Value>,
    ) -> Report {
        let cost_per_hour = nodes.iter().fold(0.0, |s, n| s + n.price_per_hour);
        Report {
            scenario: scenario.metadata.name.clone(),
            seed: scenario.spec.seed,
            duration_seconds: scenario.spec.duration.0.as_secs_f64(),
            end: Final {
                nodes,
                pending_pods,
                cost_per_hour,
            },
            totals,
            started_at: crate::clock::rfc3339(Duration::ZERO),
            timeline,
            longest_waits,
            removals: Vec::new(),
            beside: None,
            events,
            metrics: String::new(),
        }
    }

    /// The terminal summary.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let t = &self.totals;
        let _ = writeln!(
            out,
            "scenario {} (seed {}), {} simulated",
            self.scenario,
            self.seed,
            crate::clock::short(Duration::from_secs_f64(self.duration_seconds))
        );
        let mut groups: BTreeMap<(&str, &str, &str), usize> = BTreeMap::new();
        for n in &self.end.nodes {
            *groups
                .entry((&n.nodepool, &n.instance_type, &n.capacity_type))
                .or_default() += 1;
        }
        let spot = self
            .end
            .nodes
            .iter()
            .filter(|n| n.capacity_type == "spot")
            .count();
        let _ = writeln!(
            out,
            "nodes at the end: {} ({} spot), ${:.4}/hour",
            self.end.nodes.len(),
            spot,
            self.end.cost_per_hour
        );
        for ((pool, it, ct), count) in groups {
            let _ = writeln!(out, "  {count:>4} × {it:<16} {ct:<10} nodepool {pool}");
        }
        let _ = writeln!(
            out,
            "cost: ${:.2} total; spot share of node time {:.0}%",
            t.cost,
            t.spot_node_seconds_share * 100.0
        );
        if t.lower_bound_cost > 0.0 {
            let _ = writeln!(
                out,
                "lower bound: ${:.2} (the pods packed anew at each sample, as a linear program); cost is {:.2}× it",
                t.lower_bound_cost,
                t.cost / t.lower_bound_cost
            );
        }
        if let Some(peak) = self
            .timeline
            .iter()
            .max_by(|a, b| a.nodes.cmp(&b.nodes).then(b.t.total_cmp(&a.t)))
            .filter(|p| p.nodes > 0)
        {
            let _ = writeln!(
                out,
                "peak: {} at {} ({} spot)",
                plural(peak.nodes, "node"),
                crate::clock::short(Duration::from_secs_f64(peak.t)),
                peak.spot_nodes
            );
        }
        let _ = writeln!(
            out,
            "nodes launched {}, terminated {}; pods evicted {}",
            t.nodes_launched, t.nodes_terminated, t.pods_evicted
        );
        let mut launches: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for e in self
            .events
            .iter()
            .filter(|e| e["message"] == "launched nodeclaim")
        {
            let field = |k: &str| e[k].as_str().unwrap_or("?");
            *launches
                .entry((field("instance-type"), field("capacity-type")))
                .or_default() += 1;
        }
        for ((it, ct), count) in launches {
            let _ = writeln!(out, "  {count:>4} × {it:<16} {ct:<10} launched");
        }
        if t.faults_injected + t.operator_restarts + t.api_writes_failed > 0 {
            let _ = writeln!(
                out,
                "injected faults: {} nodes never registered or never Ready, {} operator \
                 restarts, {} writes failed or unanswered (tried again)",
                t.faults_injected, t.operator_restarts, t.api_writes_failed
            );
        }
        let _ = writeln!(
            out,
            "pods pending at the end: {}; longest wait {}{}",
            self.end.pending_pods.len(),
            crate::clock::short(Duration::from_secs_f64(t.max_pod_pending_seconds)),
            t.slowest_pod
                .as_ref()
                .map(|p| format!(" ({p})"))
                .unwrap_or_default()
        );
        out
    }

    /// The self-contained HTML page: the data is embedded, the charts are drawn by an inline
    /// script, nothing is fetched.
    pub fn html(&self) -> String {
        let data = serde_json::to_string(self)
            .unwrap_or_else(|_| "{}".into())
            .replace("</", "<\\/");
        PAGE.replace("%%TITLE%%", &html_escape(&self.scenario))
            .replace("%%DATA%%", &data)
    }
}

impl Report {
    /// The HTML page with `timeline`, another run's (`label`), drawn dashed over this
    /// run's nodes, cost and pending pods.
    pub fn html_beside(&self, label: &str, timeline: &[Sample]) -> String {
        let mut both = self.clone();
        both.beside = Some(Beside {
            label: label.to_string(),
            timeline: timeline.to_vec(),
        });
        both.html()
    }
}

/// The report page: styles and the script that draws it, with `%%TITLE%%` and `%%DATA%%`
/// (the JSON report) to fill in.
const PAGE: &str = include_str!("report.html");

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('%', "&#37;")
}

/// `1 node`, `3 nodes`: counts as people write them.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
