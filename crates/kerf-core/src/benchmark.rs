//! The consolidation benchmark's cluster: `n` nodes of Karpenter's 400 synthetic instance
//! types (the scheduling benchmark's catalog), ten pods each, left behind by a peak that has
//! passed so that most nodes run at 15–85 % of their cpu and memory. Shared by
//! `kerf bench consolidation` and the tests, so both measure the same cluster.
//!
//! A tenth of the apps spread over zones (ScheduleAnyway) and one node in twenty carries a
//! `karpenter.sh/do-not-disrupt` pod, so a pass meets topology and blocked nodes as a real one
//! does.

use k8s_openapi::api::core::v1::{
    Container, Pod, PodSpec, ResourceRequirements, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kerf_api::nodepool::DisruptionReason;
use kerf_api::{NodePool, labels};
use kerf_scheduling::resources::{Resources, pod_requests};
use kerf_scheduling::{ExistingNode, NodePoolInput, benchmark};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::disruption::search::{ClusterView, NodeView};

/// Pods per node.
pub const PODS_PER_NODE: usize = 10;
const APPS: usize = 50;
const ZONES: [&str; 2] = ["test-zone-1", "test-zone-2"];

/// The objects a [`ClusterView`] borrows.
pub struct BenchCluster {
    /// Pods on the nodes, node by node.
    pub pods: Vec<Pod>,
    /// The one NodePool (WhenEmptyOrUnderutilized, consolidateAfter 0s).
    pub node_pool: NodePool,
    /// The NodePool as scheduler input, over the 400 synthetic types.
    pub node_pool_input: NodePoolInput,
    /// The daemonset every node runs (100m, 128Mi).
    pub daemonsets: Vec<Pod>,
    /// Nodes, with the indices of their pods.
    pub nodes: Vec<NodeView>,
}

fn pod(name: String, app: usize, cpu_millis: i64, memory_mib: i64, protected: bool) -> Pod {
    let app_label = format!("app-{app}");
    let spread = app.is_multiple_of(10).then(|| {
        vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: labels::ZONE.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), app_label.clone())].into()),
                match_expressions: None,
            }),
            ..TopologySpreadConstraint::default()
        }]
    });
    let annotations =
        protected.then(|| [(labels::DO_NOT_DISRUPT.to_string(), "true".to_string())].into());
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some("default".into()),
            labels: Some([("app".to_string(), app_label)].into()),
            annotations,
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(
                        [
                            ("cpu".to_string(), Quantity(format!("{cpu_millis}m"))),
                            ("memory".to_string(), Quantity(format!("{memory_mib}Mi"))),
                        ]
                        .into(),
                    ),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            topology_spread_constraints: spread,
            ..PodSpec::default()
        }),
        status: None,
    }
}

fn node_pool_object() -> NodePool {
    let spec = serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
        }
    });
    serde_json::from_value(spec).expect("the benchmark NodePool is a valid NodePool")
}

impl BenchCluster {
    /// Builds the cluster of `nodes` nodes from `seed`.
    pub fn generate(nodes: usize, seed: u64) -> BenchCluster {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let daemon = pod("daemon".into(), APPS, 100, 128, false);
        let daemon_requests = pod_requests(&daemon);
        let mut c = BenchCluster {
            pods: Vec::with_capacity(nodes * PODS_PER_NODE),
            node_pool: node_pool_object(),
            node_pool_input: benchmark::node_pool(),
            daemonsets: vec![daemon],
            nodes: Vec::with_capacity(nodes),
        };
        for i in 0..nodes {
            // 4 to 32 vCPUs (fake-it-3 … fake-it-31)
            let type_index = rng.random_range(3..32);
            let t = &c.node_pool_input.instance_types[type_index];
            let utilization = rng.random_range(15..86) as i64;
            let free = t.allocatable.saturating_sub(&daemon_requests);
            let cpu = free.cpu_millis * utilization / 100 / PODS_PER_NODE as i64;
            let mib = free.memory_bytes / (1 << 20) * utilization / 100 / PODS_PER_NODE as i64;
            let protected = i % 20 == 7;
            let on_node: Vec<Pod> = (0..PODS_PER_NODE)
                .map(|k| {
                    let app = rng.random_range(0..APPS);
                    // pods of one node differ a little in size, as replicas of apps do
                    let jitter = rng.random_range(80..121) as i64;
                    pod(
                        format!("pod-{i}-{k}"),
                        app,
                        (cpu * jitter / 100).max(10),
                        (mib * jitter / 100).max(16),
                        protected && k == 0,
                    )
                })
                .collect();
            let zone = ZONES[i % ZONES.len()];
            c.add_node(&format!("node-{i}"), type_index, zone, on_node, !protected);
        }
        c
    }

    /// Adds an on-demand node of synthetic type `type_index` in `zone` running `pods` (plus
    /// the daemonsets), consolidatable, disruptable as said.
    pub fn add_node(
        &mut self,
        name: &str,
        type_index: usize,
        zone: &str,
        pods: Vec<Pod>,
        disruptable: bool,
    ) {
        let t = &self.node_pool_input.instance_types[type_index];
        let mut requested = Resources::default();
        for d in &self.daemonsets {
            requested.add(&pod_requests(d));
        }
        let disruption_cost = crate::disruption::rules::node_disruption_cost(&pods, false);
        let mut on_node = Vec::with_capacity(pods.len());
        for p in pods {
            requested.add(&pod_requests(&p));
            on_node.push(self.pods.len());
            self.pods.push(p);
        }
        let mut node_labels = (*t.labels).clone();
        node_labels.insert(labels::ZONE.into(), zone.into());
        node_labels.insert(
            labels::CAPACITY_TYPE.into(),
            labels::CAPACITY_TYPE_ON_DEMAND.into(),
        );
        node_labels.insert(labels::NODEPOOL.into(), "default".into());
        node_labels.insert(labels::HOSTNAME.into(), name.into());
        let price = t
            .offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND)
            .map_or(0.0, |o| o.price_per_hour);
        self.nodes.push(NodeView {
            node: ExistingNode {
                name: name.into(),
                labels: node_labels.into(),
                taints: Vec::new(),
                allocatable: t.allocatable.clone(),
                requested,
                initialized: true,
            },
            node_pool: Some(0),
            price_per_hour: price,
            capacity_type: crate::cluster::CapacityType::OnDemand,
            disruption_cost,
            pods: on_node,
            disruptable,
            consolidatable: true,
            drifted: false,
            replace_backoff: false,
            multi_node: true,
            repair: None,
        });
    }

    /// The cluster as one pass reads it, with `allowed` disruptions for every reason.
    pub fn view(&self, allowed: usize) -> ClusterView<'_> {
        let reasons = [
            DisruptionReason::Empty,
            DisruptionReason::Drifted,
            DisruptionReason::Underutilized,
        ];
        ClusterView {
            nodes: self.nodes.clone(),
            pods: self.pods.iter().collect(),
            keys: (self.pods.iter())
                .map(|p| p.metadata.name.as_deref().unwrap_or(""))
                .collect(),
            requests: self.pods.iter().map(pod_requests).collect(),
            // none kept: the solver compares replicas field by field
            terms: Vec::new(),
            node_pool_objects: vec![&self.node_pool],
            node_pools: vec![self.node_pool_input.clone()],
            daemonsets: &self.daemonsets,
            allowed: reasons.into_iter().map(|r| ((0, r), allowed)).collect(),
            spot_to_spot: false,
            terminate_first: Default::default(),
            options: kerf_scheduling::SolveOptions::default(),
            min_savings: crate::disruption::search::MinSavings::default(),
            pods_await_capacity: false,
            types_by_name: Default::default(),
        }
    }

    /// What the nodes cost per hour.
    pub fn cost_per_hour(&self) -> f64 {
        self.nodes.iter().map(|n| n.price_per_hour).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_hold_their_pods_and_are_not_overcommitted() {
        let c = BenchCluster::generate(50, 1);
        assert_eq!(c.nodes.len(), 50);
        assert_eq!(c.pods.len(), 50 * PODS_PER_NODE);
        for n in &c.nodes {
            assert!(
                n.node.requested.fits(&n.node.allocatable),
                "{}",
                n.node.name
            );
        }
        assert_eq!(c.nodes.iter().filter(|n| !n.disruptable).count(), 3);
    }

    #[test]
    fn same_seed_same_cluster() {
        let (a, b) = (BenchCluster::generate(20, 9), BenchCluster::generate(20, 9));
        assert_eq!(a.pods, b.pods);
        assert_eq!(a.cost_per_hour(), b.cost_per_hour());
    }
}
